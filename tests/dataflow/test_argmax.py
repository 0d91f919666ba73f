"""ArgMax over the classes as the graph output: the ``argmax`` block (``rtl_templates/argmax.py``)
and the operator (``dataflow/ops_argmax.py``).

* the block: golden == ONNX ArgMax (onnxruntime on the integers) with many ties, first and
  last index; RTL == golden in Amaranth's simulator for several foldings, with random stalls;
  measured interval and latency equal the cost and timing models (stall-free);
* the operator: Conv → Flatten → Gemm → ArgMax models quantized by onnxruntime (QDQ and
  QOperator), the golden index equal to onnxruntime's on every sample, RTL == golden;
* refusals: ArgMax not at the graph output, over a feature map.
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from test_cnn_ops import Net, assert_rtl_equals_golden, golden_and_ort, import_, quantized

from hwgen.dataflow.host_tail import tail_nodes
from hwgen.dataflow.ops_argmax import ArgMaxOp
from hwgen.rtl_templates.argmax import ArgMax, ArgMaxParams, cost, golden, timing
from hwgen.rtl_templates.quant import INT8, UINT8, QType
from hwgen.sim.harness import run_block


def _ort_argmax(x: np.ndarray, last: bool, dtype) -> np.ndarray:
    import onnxruntime as ort

    node = helper.make_node("ArgMax", ["x"], ["y"], axis=1, keepdims=1,
                            select_last_index=int(last))
    g = helper.make_graph([node], "am", [helper.make_tensor_value_info(
        "x", helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.INT64, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(["y"], {"x": x.astype(dtype)})[0]


def _frames(t: QType, n: int, c: int, seed: int) -> np.ndarray:
    """Few distinct values, so most frames hold ties for the maximum."""
    rng = np.random.default_rng(seed)
    return rng.integers(max(t.lo, -3), min(t.hi, 4) + 1, (n, c))


@pytest.mark.parametrize("last", [False, True], ids=["first", "last"])
@pytest.mark.parametrize("t", [UINT8, INT8], ids=lambda t: t.name)
def test_argmax_golden_equals_onnx_with_ties(t, last):
    x = _frames(t, 200, 10, seed=int(last))
    p = ArgMaxParams(t, 10, 2, last)
    want = _ort_argmax(x, last, np.int8 if t.signed else np.uint8)
    assert np.array_equal(golden(p, x), want)
    assert len(np.unique(want)) == 10


CASES = [(UINT8, 10, 1, False), (INT8, 10, 2, True), (UINT8, 12, 4, False),
         (QType(4, True), 6, 3, True), (UINT8, 5, 5, False)]


@pytest.mark.sim
@pytest.mark.parametrize("t,c,pe,last", CASES,
                         ids=[f"{t.name}-c{c}-pe{pe}-{'last' if lst else 'first'}"
                              for t, c, pe, lst in CASES])
def test_argmax_block_golden_and_cycles(t, c, pe, last):
    p = ArgMaxParams(t, c, pe, last)
    x = _frames(t, 6, c, seed=c + pe)
    run = run_block(ArgMax(p), x, t, pe, p.out_type, 1, 1)
    assert np.array_equal(run.frames, golden(p, x))
    k = cost(p)
    assert k.cycles == c // pe
    assert run.interval == k.cycles
    assert run.latency == k.latency == timing(p, 0, p.beats - 1)[1] + 1


@pytest.mark.sim
@pytest.mark.parametrize("stall", [0.3, 0.6])
def test_argmax_block_under_stalls(stall):
    p = ArgMaxParams(INT8, 12, 3, False)
    x = _frames(INT8, 8, 12, seed=4)
    run = run_block(ArgMax(p), x, INT8, 3, p.out_type, 1, 1, stall_in=stall, stall_out=stall,
                    seed=5)
    assert np.array_equal(run.frames, golden(p, x))
    assert run.result.out_last == [True] * 8


# ------------------------------------------------------------------------- the operator

def _classifier(keepdims: int = 1, last: int = 0, output_argmax: bool = True):
    def build(seed):
        n = Net((3, 6, 6), seed)
        c = n.relu(n.conv("x", 8, 3, "conv", pads=[1, 1, 1, 1]), "relu")
        z = n.gemm(n.op("Flatten", [c], "flatten"), 288, 10, "fc")
        out = n.op("ArgMax", [z], "argmax", axis=1, keepdims=keepdims, select_last_index=last)
        if output_argmax:
            def model(o, n=n):
                graph = helper.make_graph(
                    n.nodes, "classifier",
                    [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", *n.shape])],
                    [helper.make_tensor_value_info(o, TensorProto.INT64, None)],
                    initializer=n.inits)
                m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                      ir_version=8)
                m = onnx.shape_inference.infer_shapes(m, strict_mode=True)
                onnx.checker.check_model(m, full_check=True)
                return m
            n.model = model
        return n, out
    return build


@pytest.mark.sim
@pytest.mark.parametrize("keepdims,last", [(1, 0), (0, 1)], ids=["keep-first", "flat-last"])
@pytest.mark.parametrize("fmt", ["qdq", "qop"])
def test_argmax_output_equals_onnxruntime_and_rtl(fmt, keepdims, last):
    _, qm, x = quantized(_classifier(keepdims, last), fmt=fmt)
    assert qm.graph.node[-1].op_type == "ArgMax"
    ig = import_(qm)
    assert isinstance(ig.ops[-1], ArgMaxOp) and not ig.output_dequantized
    xq, y_stream, y, ref = golden_and_ort(ig, qm, x)
    assert np.array_equal(y, ref)                      # the index of every sample
    assert len(np.unique(y)) >= 4
    if fmt == "qdq" and keepdims:
        assert_rtl_equals_golden(ig, xq, y_stream)


def test_argmax_must_be_the_graph_output():
    def build(seed):
        n, out = _classifier(output_argmax=False)(seed)
        return n, n.op("Cast", [out], "cast", to=TensorProto.FLOAT)
    _, qm, _ = quantized(build, fmt="qdq")
    # the Cast after it runs on the host; the ArgMax stays in hardware
    ig = import_(qm)
    assert isinstance(ig.ops[-1], ArgMaxOp) and ig.host_tail
    assert tail_nodes(ig.host_tail) == ["Cast"]
