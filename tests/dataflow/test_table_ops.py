"""Table activations: the lookup-table block (``rtl_templates/lut.py``) and the unary
elementwise operators that lower to it (``dataflow/ops_table.py``).

* The block: RTL == golden (``np.array_equal``) in Amaranth's simulator for several element
  types and foldings, with and without random stalls; measured interval and latency equal
  the cost and timing models exactly (stall-free); one Verilator build.
* The operators: tiny Conv → activation models quantized by onnxruntime (QDQ and the
  QOperator form with ``QLinearSigmoid`` / ``QLinearLeakyRelu``): the golden model equals
  onnxruntime on every output element (the table is onnxruntime's own result), and the RTL
  equals the golden model.
"""
from __future__ import annotations

import numpy as np
import pytest
from test_cnn_ops import Net, assert_rtl_equals_golden, golden_and_ort, import_, quantized

from hwgen.dataflow.ops_table import TableOp
from hwgen.rtl_templates.lut import LUT, LUTParams, cost, golden, timing
from hwgen.rtl_templates.quant import INT8, UINT8, QType
from hwgen.sim.harness import run_block

INT4 = QType(4, True)


def _params(in_type: QType, out_type: QType, pe: int, elements: int, seed: int) -> LUTParams:
    rng = np.random.default_rng(seed)
    table = rng.integers(out_type.lo, out_type.hi + 1, 1 << in_type.bits)
    return LUTParams(tuple(int(v) for v in table), in_type, out_type, pe, elements)


def _frames(p: LUTParams, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.integers(p.in_type.lo, p.in_type.hi + 1, (n, p.elements))
    x[0, :min(p.elements, 1 << p.in_type.bits)] = p.in_type.from_unsigned(
        np.arange(min(p.elements, 1 << p.in_type.bits)))          # every entry appears
    return x


CASES = [(UINT8, UINT8, 1, 64), (INT8, UINT8, 4, 64), (UINT8, INT8, 8, 256),
         (INT4, INT8, 2, 24), (INT8, INT4, 3, 27)]


@pytest.mark.sim
@pytest.mark.parametrize("in_type,out_type,pe,elements", CASES,
                         ids=[f"{a.name}-{b.name}-pe{c}-{d}" for a, b, c, d in CASES])
def test_lut_block_golden_and_cycles(in_type, out_type, pe, elements):
    p = _params(in_type, out_type, pe, elements, seed=elements + pe)
    x = _frames(p, 4, seed=pe)
    run = run_block(LUT(p), x, in_type, pe, out_type, pe, elements)
    assert np.array_equal(run.frames, golden(p, x))
    c = cost(p)
    assert c.cycles == elements // pe
    assert run.interval == c.cycles                      # one beat per cycle, exactly
    assert run.latency == c.latency == timing(p, 0, p.beats - 1)[1] + 1
    assert run.result.out_times[0] - run.result.in_times[0] == timing(p, 0, 0)[0]


@pytest.mark.sim
@pytest.mark.parametrize("stall", [0.3, 0.6])
def test_lut_block_under_stalls(stall):
    p = _params(INT8, UINT8, 2, 40, seed=7)
    x = _frames(p, 6, seed=3)
    run = run_block(LUT(p), x, INT8, 2, UINT8, 2, 40, stall_in=stall, stall_out=stall, seed=11)
    assert np.array_equal(run.frames, golden(p, x))
    assert run.result.out_last == [(k + 1) % p.beats == 0 for k in range(6 * p.beats)]


@pytest.mark.verilator
def test_lut_block_verilator():
    p = _params(UINT8, INT8, 4, 32, seed=5)
    x = _frames(p, 3, seed=9)
    run = run_block(LUT(p), x, UINT8, 4, INT8, 4, 32, simulator="verilator", stall_in=0.2,
                    stall_out=0.2, seed=1, name="lut_top")
    assert np.array_equal(run.frames, golden(p, x))


def test_lut_params_refuse_bad_tables():
    with pytest.raises(ValueError, match="256 entries"):
        LUTParams((0,) * 255, UINT8, UINT8, 1, 8)
    with pytest.raises(ValueError, match="outside int8"):
        LUTParams((200,) * 256, UINT8, INT8, 1, 8)
    with pytest.raises(ValueError, match="PE=3"):
        LUTParams((0,) * 256, UINT8, UINT8, 3, 8)


# ------------------------------------------------------------------------- operators

def _act_net(op_type: str, **attrs):
    def build(seed):
        n = Net((3, 6, 6), seed)
        return n, n.op(op_type, [n.conv("x", 4, 3, "conv", pads=[1, 1, 1, 1])], "act", **attrs)
    return build


ACTS = {"sigmoid": ("Sigmoid", {}), "leaky_relu": ("LeakyRelu", {"alpha": 0.1})}


@pytest.mark.sim
@pytest.mark.parametrize("fmt", ["qdq", "qop"])
@pytest.mark.parametrize("act", sorted(ACTS))
def test_table_activation_equals_onnxruntime_and_rtl(act, fmt):
    op_type, attrs = ACTS[act]
    _, qm, x = quantized(_act_net(op_type, **attrs), fmt=fmt)
    kinds = [n.op_type for n in qm.graph.node]
    assert (op_type if fmt == "qdq" else f"QLinear{op_type}") in kinds
    ig = import_(qm)
    assert [type(op).__name__ for op in ig.ops] == ["Conv", "TableOp"]
    xq, y_stream, y, ref = golden_and_ort(ig, qm, x)
    assert np.array_equal(y, ref)                        # every element, not 99.9 %
    assert len(np.unique(y)) >= 8
    assert_rtl_equals_golden(ig, xq, y_stream)


def test_table_holds_onnxruntime_values_for_every_input():
    """The table of a QDQ Sigmoid is, entry by entry, onnxruntime's DQ → Sigmoid → Q."""
    _, qm, _ = quantized(_act_net("Sigmoid"), fmt="qdq")
    ig = import_(qm)
    op = next(o for o in ig.ops if isinstance(o, TableOp))
    tin, tout = ig.tensors[op.input], ig.tensors[op.output]
    values = tin.qtype.from_unsigned(np.arange(1 << tin.qtype.bits))
    real = tin.dequantize(values)
    want = tout.quantize(1.0 / (1.0 + np.exp(-real.astype(np.float64))))
    # float64 sigmoid may round differently at a handful of ties; onnxruntime's own
    # float32 path is what the table holds, and it agrees with float64 almost everywhere
    assert np.mean(op.table[np.arange(values.size)] == want) > 0.97
    assert np.all(np.abs(op.table - want) <= 1)
