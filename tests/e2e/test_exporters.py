"""One network, both PyTorch exporters: the same integer graph.

``examples/export_both.py`` exports each example network with the TorchScript exporter
(``dynamo=False``) and the new one (``dynamo=True``) from the same weights and quantizes both
with onnxruntime on the same calibration inputs; ``examples/mlperf_tiny/make_models.py``
made per-channel pairs the same way. The two exports differ in their ONNX (the new exporter
folds BatchNormalization itself, writes a flatten as ``Reshape`` with ``allowzero=1``, a global
pool as ``ReduceMean``, orders a residual block's branches differently), but hwgen must map
both to one integer graph (``IntGraph.canonical``), agree with onnxruntime on both, and the
hardware must equal the golden model. Needs neither torch nor a long simulation.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from conftest import golden_vs_onnxruntime

import hwgen
from hwgen.dataflow.importer import load_model, to_int_graph
from hwgen.dataflow.intgraph import canonical_close
from hwgen.reference import reference_session_options

EX = Path(__file__).resolve().parents[2] / "examples"
BOTH, TINY = EX / "exporters", EX / "mlperf_tiny"

# name: (TorchScript form, new exporter's form, test inputs (npz, first frame), exactly equal)
# "exactly" False: equal up to the float scales' last bits (canonical_close): the calibration
# sees the global average pool through two onnxruntime kernels (GlobalAveragePool and
# ReduceMean), whose float32 means differ in the last bit, so one scale does too
PAIRS = {
    "digits_mlp": (BOTH / "digits_mlp_ts_qdq.onnx", BOTH / "digits_mlp_dynamo_qdq.onnx",
                   (EX / "digits_test.npz", 200), True),
    "digits_cnn": (BOTH / "digits_cnn_ts_qdq.onnx", BOTH / "digits_cnn_dynamo_qdq.onnx",
                   (EX / "digits_images_test.npz", 200), True),
    "digits_resnet": (BOTH / "digits_resnet_ts_qdq.onnx",
                      BOTH / "digits_resnet_dynamo_qdq.onnx",
                      (EX / "digits_images_test.npz", 200), False),
    "resnet8": (TINY / "resnet8_qdq.onnx", BOTH / "resnet8_dynamo_qdq.onnx",
                (TINY / "resnet8_test.npz", 0), True),
    "dscnn": (TINY / "dscnn_qdq.onnx", BOTH / "dscnn_dynamo_qdq.onnx",
              (TINY / "dscnn_test.npz", 0), True),
    "resnet8_perchannel": (TINY / "resnet8_qdq_perchannel.onnx",
                           TINY / "resnet8_dynamo_qdq_perchannel.onnx",
                           (TINY / "resnet8_test.npz", 0), True),
    "dscnn_perchannel": (TINY / "dscnn_qdq_perchannel.onnx",
                         TINY / "dscnn_dynamo_qdq_perchannel.onnx",
                         (TINY / "dscnn_test.npz", 0), True),
    "mobilenet_v1_025_perchannel": (TINY / "mobilenet_v1_025_qdq_perchannel.onnx",
                                    TINY / "mobilenet_v1_025_dynamo_qdq_perchannel.onnx",
                                    (TINY / "mobilenet_v1_025_test.npz", 0), False),
}
GOLDEN_FRAMES = 8          # golden vs onnxruntime (ResNet-8's golden model: ~0.3 s a frame)
RTL_FRAMES = 2
RTL_PAIRS = ["digits_mlp", "digits_cnn", "digits_resnet"]
#: the pairs with the slowest golden model (ResNet-8, MobileNet): marked slow
SLOW_GOLDEN = {"resnet8", "resnet8_perchannel", "mobilenet_v1_025_perchannel"}


def int_graph(path: Path):
    return to_int_graph(load_model(path))


def inputs(name: str, n: int) -> np.ndarray:
    npz, first = PAIRS[name][2]
    with np.load(npz) as z:
        return z["input"][first:first + n].astype(np.float32)


def test_every_exported_model_is_paired():
    paired = {p.name for ts, dyn, _, _ in PAIRS.values() for p in (ts, dyn)}
    assert {p.name for p in BOTH.glob("*.onnx")} <= paired
    for ts, dyn, _, _ in PAIRS.values():
        assert ts.stat().st_size < 350_000 and dyn.stat().st_size < 350_000


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_both_exports_map_to_the_same_integer_graph(name):
    ts, dyn, _, exact = PAIRS[name]
    nodes = {p: [(n.name, n.op_type) for n in onnx.load(str(p)).graph.node] for p in (ts, dyn)}
    assert nodes[ts] != nodes[dyn]              # the ONNX graphs do differ
    a, b = int_graph(ts), int_graph(dyn)
    assert sorted(type(op).__name__ for op in a.ops) == \
        sorted(type(op).__name__ for op in b.ops)
    ca, cb = a.canonical(), b.canonical()
    assert (ca == cb) == exact
    assert canonical_close(ca, cb)


def test_canonical_is_not_vacuous():
    """Node names and independent branches' order do not count; a weight or a requantizer
    constant does."""
    ig = int_graph(BOTH / "digits_resnet_ts_qdq.onnx")
    base = ig.canonical()
    renamed = dataclasses.replace(ig, ops=[dataclasses.replace(op, name=f"x{k}")
                                           for k, op in enumerate(ig.ops)])
    assert renamed.canonical() == base
    r8 = int_graph(TINY / "resnet8_qdq.onnx")
    order = list(r8.ops)
    k = next(i for i, op in enumerate(order) if "short" in op.name)
    order.insert(k + 1, order.pop(k))             # the shortcut after the main path's conv
    assert order != r8.ops
    assert dataclasses.replace(r8, ops=order).canonical() == r8.canonical()
    first = ig.ops[0]
    w = first.weights.copy()
    w.flat[0] += 1
    other = dataclasses.replace(ig, ops=[dataclasses.replace(first, weights=w)] + ig.ops[1:])
    assert other.canonical() != base and not canonical_close(other.canonical(), base)
    rq = dataclasses.replace(first.requant, zero_point=first.requant.zero_point + 1)
    other = dataclasses.replace(ig, ops=[dataclasses.replace(first, requant=rq)] + ig.ops[1:])
    assert not canonical_close(other.canonical(), base)
    assert int_graph(BOTH / "digits_cnn_ts_qdq.onnx").canonical() != base


def golden_vs_ort(path: Path, x: np.ndarray) -> np.ndarray:
    """|golden − onnxruntime| per output element, in output quantization steps."""
    return golden_vs_onnxruntime(int_graph(path), path, x)[0]


@pytest.mark.parametrize("form", ["ts", "dynamo"])
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW_GOLDEN
                                  else n for n in sorted(PAIRS)])
def test_golden_matches_onnxruntime(name, form):
    path = PAIRS[name][0 if form == "ts" else 1]
    diff = golden_vs_ort(path, inputs(name, GOLDEN_FRAMES))
    assert diff.max() <= 1
    assert float(np.mean(diff == 0)) >= 0.999, f"{np.mean(diff == 0):.4%} identical"


@pytest.mark.verilator
@pytest.mark.parametrize("name", RTL_PAIRS)
def test_rtl_equals_golden_verilator(name):
    """The new exporter's form on the native Verilator bench, a few frames (the TorchScript
    form maps to the same integer graph, checked above); a slow folding keeps the design
    and its Verilator build small."""
    path = PAIRS[name][1]
    rep = hwgen.verify(path, inputs(name, RTL_FRAMES), simulator="verilator",
                       target_cycles=4096)
    assert rep.ok, path.name
    assert rep.ort_identical_fraction == 1.0 and rep.ort_max_step_diff == 0


def test_golden_follows_the_optimized_onnxruntime_session():
    """ResNet-8, TorchScript export, QDQ per-tensor. The golden model equals onnxruntime's
    default (optimized) session, whose fused integer kernels it reproduces (checked on the
    logits above). Without graph optimizations onnxruntime runs DequantizeLinear → float op
    → QuantizeLinear as written, and its float32 convolutions, adds and mean round some
    elements one step differently: the two onnxruntime sessions disagree with each other,
    by a step, a few where differences meet, the pool among them."""
    path = TINY / "resnet8_qdq.onnx"
    m = onnx.load(str(path))
    qs = [n for n in m.graph.node if n.op_type == "QuantizeLinear"]
    for q in qs:
        m.graph.output.append(onnx.helper.make_tensor_value_info(q.output[0],
                                                                 onnx.TensorProto.UINT8, None))
    x = inputs("resnet8", 20)
    outs = {}
    for level in ("ORT_ENABLE_ALL", "ORT_DISABLE_ALL"):
        so = reference_session_options()      # no int16 saturation without VNNI
        so.intra_op_num_threads = 1
        so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
        sess = ort.InferenceSession(m.SerializeToString(), so,
                                    providers=["CPUExecutionProvider"])
        outs[level] = dict(zip([q.output[0] for q in qs],
                               sess.run([q.output[0] for q in qs], {"input": x})))
    differ = {}
    for name in outs["ORT_ENABLE_ALL"]:
        d = np.abs(outs["ORT_ENABLE_ALL"][name].astype(np.int64)
                   - outs["ORT_DISABLE_ALL"][name].astype(np.int64))
        assert d.max() <= 3, name
        if d.any():
            differ[name] = int(np.count_nonzero(d))
    assert differ.get("input_QuantizeLinear_Output") is None          # the input: same
    pool = next(k for k in outs["ORT_ENABLE_ALL"] if "GlobalAveragePool" in k)
    assert differ.get(pool, 0) > 0                                    # the mean rounds apart
    assert sum(1 for k in differ if "Conv" in k or "Relu" in k) >= 5  # and many convs
