"""QONNX models (``Quant``, ``BipolarQuant``, ``Trunc`` as Brevitas exports them) → integer
graph → golden model and RTL, checked against the ``qonnx`` package's own execution.

The models (``tests/qonnx_models.py``, built with ``onnx.helper``): an MLP at 4 bits and at
2 bits (ternary weights), a CNN at 4 bits and a mixed-precision 2-bit CNN (Conv → Relu →
Quant → MaxPool → Conv → Relu → Quant → GlobalAveragePool → Trunc → Flatten → MatMul →
Quant), and a bipolar MLP (8-bit input, ±1 weights and activations). For each:

* golden == qonnx, in integer space (qonnx's float output / output scale + zero point, which
  must be integral), on every sample;
* RTL == golden in Amaranth's simulator under random stalls; one model also in Verilator
  through the public API (compile + simulate), and ``verify`` takes qonnx as its reference;
* the manifest's multipliers are the narrow ones (4×4-bit products in the 4-bit MLP, 2-bit
  weights in the 2-bit layers, none for ±1 weights: XNOR-popcount or sign selects).

Further: Trunc after (global) average pooling in both versions and three rounding modes,
narrow ranges, zero points, weight rounding modes, the bipolar datapaths of the MVAU block by
themselves, and clear refusals of what is not supported.
"""
from __future__ import annotations

import functools

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from qonnx_models import DOMAIN, Builder, QModel, bipolar_mlp, cnn, inputs, mlp, run_qonnx

from hwgen import api
from hwgen.assemble import build_top
from hwgen.dataflow import golden
from hwgen.dataflow.importer import to_int_graph
from hwgen.dataflow.loader import load_model_proto
from hwgen.dataflow.lower import lower
from hwgen.dataflow.ops_conv import Conv
from hwgen.dataflow.ops_pool import GlobalAvgPool, Pool
from hwgen.dataflow.ops_qonnx import compact_requant
from hwgen.errors import HwgenError
from hwgen.rtl_templates.axis_top import AxisTop, axis_width
from hwgen.rtl_templates.mvau import MVAU, MVAUParams, cost
from hwgen.rtl_templates.mvau import golden as mvau_golden
from hwgen.rtl_templates.quant import INT8, QType, make_requant
from hwgen.rtl_templates.requant import RequantPipeline
from hwgen.rtl_templates.xnor_mvau import BIPOLAR, check_sign_requant, sign_requant, xnor_popcount
from hwgen.sim.amaranth_sim import run_amaranth
from hwgen.sim.base import StreamJob
from hwgen.sim.packing import beats_to_frames, frames_to_beats

pytest.importorskip("qonnx")

MODELS = {
    "mlp-4bit": lambda: mlp(4, 4),
    "mlp-2bit": lambda: mlp(2, 2),
    "cnn-4bit": lambda: cnn("4bit"),
    "cnn-2bit": lambda: cnn("2bit"),
    "bipolar-mlp": bipolar_mlp,
}


@functools.lru_cache(maxsize=None)
def _model(name: str) -> QModel:
    return MODELS[name]()


def _ig(model: onnx.ModelProto):
    return to_int_graph(load_model_proto(model))


def _golden(ig, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(integer inputs in stream order, golden integer outputs in ONNX order)."""
    n = x.shape[0]
    xq = ig.tensors[ig.input].quantize(ig.to_stream(x.reshape(n, -1)))
    y = golden.run(ig, xq)[ig.output].reshape(n, -1)
    return xq, ig.from_stream(y)


def _qonnx_int(ig, model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    """qonnx's execution of the model, as integers of the output tensor."""
    t = ig.tensors[ig.output]
    y = run_qonnx(model, x).reshape(x.shape[0], -1) / np.float32(t.scale) + t.zero_point
    yi = np.rint(y)
    assert np.max(np.abs(y - yi), initial=0) < 1e-3, "qonnx's output is not on the grid"
    return yi.astype(np.int64)


def _check_against_qonnx(model: onnx.ModelProto, x: np.ndarray, min_levels: int = 2):
    ig = _ig(model)
    _, y = _golden(ig, x)
    ref = _qonnx_int(ig, model, x)
    if not np.array_equal(y, ref):
        bad = np.argwhere(y != ref)
        raise AssertionError(f"{len(bad)} of {y.size} outputs differ from qonnx; first at "
                             f"{bad[0]}: golden {y[tuple(bad[0])]}, qonnx {ref[tuple(bad[0])]}")
    assert len(np.unique(y)) >= min_levels, f"degenerate test: outputs {np.unique(y)}"
    return ig, y


# ------------------------------------------------------------------ the five test models

EXPECTED_TYPES = {
    "mlp-4bit": ["int4", "uint4", "uint4", "int8"],
    "mlp-2bit": ["int2", "uint2", "uint2", "int8"],
    "cnn-4bit": ["int8", "uint4", "uint4", "uint4", "uint4", "int8"],
    "cnn-2bit": ["int8", "uint4", "uint4", "uint2", "uint6", "uint4", "int8"],
    "bipolar-mlp": ["int8", "bipolar", "bipolar", "int8"],
}


@pytest.mark.parametrize("name", list(MODELS))
def test_golden_equals_qonnx(name):
    qm = _model(name)
    x = inputs(qm.batch, qm.in_shape, seed=7)
    ig, y = _check_against_qonnx(qm.model, x, min_levels=8)
    assert [t.qtype.name for t in ig.tensors.values()] == EXPECTED_TYPES[name]
    # the values really use the narrow ranges (not a wide type in disguise)
    xq, _ = _golden(ig, x)
    vals = golden.run(ig, xq)
    for t, v in vals.items():
        q = ig.tensors[t].qtype
        assert q.lo <= v.min() and v.max() <= q.hi


def test_models_have_the_expected_structure():
    kinds = {n: [type(op).__name__ for op in _ig(_model(n).model).ops] for n in MODELS}
    assert kinds["mlp-4bit"] == kinds["mlp-2bit"] == ["MatVec"] * 3
    assert kinds["cnn-4bit"] == ["Conv", "Pool", "Conv", "GlobalAvgPool", "MatVec"]
    # FLOOR after an exact sum: the pooling gives Σq, a 1×1 depthwise layer floor(Σq / 4)
    assert kinds["cnn-2bit"] == ["Conv", "Pool", "Conv", "GlobalAvgPool", "Conv", "MatVec"]
    ig = _ig(_model("bipolar-mlp").model)
    assert [ig.tensors[op.input].qtype.name for op in ig.ops] == ["int8", "bipolar", "bipolar"]
    assert ig.ops[0].requant == sign_requant() == ig.ops[1].requant
    # ±1 weights, the bias on the accumulator grid
    assert all(set(np.unique(op.weights)) == {-1, 1} for op in ig.ops)


@pytest.mark.sim
@pytest.mark.parametrize("name", list(MODELS))
def test_rtl_equals_golden_amaranth(name):
    qm = _model(name)
    n = 4 if name.startswith("cnn") else 8
    x = inputs(n, qm.in_shape, seed=11)
    ig = _ig(qm.model)
    xq, _ = _golden(ig, x)
    want = golden.run(ig, xq)[ig.output].reshape(n, -1)       # stream order
    dfg = lower(ig, None, 128)
    top = build_top(dfg)
    beats, last = frames_to_beats(xq, dfg.input.qtype, dfg.in_per_beat)
    n_out = n * dfg.output.size // dfg.out_per_beat
    res = run_amaranth(top, StreamJob(top.in_width, top.out_width, beats, last, n_out,
                                      stall_in=0.2, stall_out=0.2, seed=3))
    got = beats_to_frames(res.out_beats, dfg.output.qtype, dfg.out_per_beat, dfg.output.size)
    assert np.array_equal(got, want)


def _mvaus(manifest) -> list[dict]:
    return [b for b in manifest["layers"] if b["block"] == "mvau"]


@pytest.mark.slow
def test_manifest_multipliers_are_narrow(tmp_path):
    man = {}
    for name in MODELS:
        path = tmp_path / f"{name.replace('-', '_')}.onnx"
        onnx.save(_model(name).model, path)
        man[name] = api.compile(path, tmp_path / name, board="ulx3s-85f").manifest

    def dot_widths(b):  # the dot-product multipliers' operand widths (input, weight)
        t = b["types"]
        ib = int("".join(c for c in t["input"] if c.isdigit()) or 1)
        return (ib, t["weight_bits"])

    def check_mul(b, widths):
        t, e = b["types"], b["estimate"]
        pe, simd = b["folding"]["pe"], b["folding"]["simd"]
        assert t["datapath"] == "mul" and dot_widths(b) == widths
        assert e["multipliers"] == pe * simd + pe
        assert e["multiplier_widths"] == sorted(
            [list(widths), [t["accumulator_bits"], t["multiplier_bits"]]])
        # power-of-two scales: the requantizer multipliers are a few bits, not 24
        assert t["multiplier_bits"] <= 8

    for b in _mvaus(man["mlp-4bit"]):
        check_mul(b, (4, 4))
    for b in _mvaus(man["mlp-2bit"]):
        check_mul(b, (2, 2))
    for name, widths in (("cnn-4bit", [(8, 4), (4, 4), (4, 4)]),      # 8-bit input image
                         ("cnn-2bit", [(8, 4), (4, 2), (4, 2)])):     # mixed precision
        for b, w in zip(_mvaus(man[name]), widths, strict=True):
            check_mul(b, w)
    # the 2-bit CNN streams 2-bit elements between its second conv and the pooling
    streams = man["cnn-2bit"]["streams"]
    assert any(s["type"] == "uint2" and s["bits"] == 2 * s["elements_per_beat"]
               for s in streams.values())

    # bipolar: no multiplier in any dot product; XNOR-popcount between ±1 operands
    l1, l2, l3 = _mvaus(man["bipolar-mlp"])
    assert l1["types"]["datapath"] == "select" and l1["types"]["weight_bits"] == 1
    assert l2["types"]["datapath"] == l3["types"]["datapath"] == "xnor"
    assert l1["estimate"]["multipliers"] == l2["estimate"]["multipliers"] == 0   # sign outputs
    assert l3["estimate"]["multipliers"] == l3["folding"]["pe"]                  # requant only
    assert l3["estimate"]["multiplier_widths"] == [[l3["types"]["accumulator_bits"],
                                                    l3["types"]["multiplier_bits"]]]
    for _name, s in man["bipolar-mlp"]["streams"].items():
        if s["type"] == "bipolar":
            assert s["bits"] == s["elements_per_beat"]        # one bit per element
    assert sum(s["type"] == "bipolar" for s in man["bipolar-mlp"]["streams"].values()) >= 2
    # the integer graph in the manifest reads back (bipolar type included)
    from hwgen import design
    _, ig, _ = design.load(tmp_path / "bipolar-mlp")
    assert [t.qtype for t in ig.tensors.values()][1:3] == [BIPOLAR, BIPOLAR]


@pytest.mark.verilator
def test_verilator_through_the_api(tmp_path):
    """The bipolar MLP: compile + simulate (Verilator) with float inputs; RTL == golden ==
    qonnx on every sample."""
    qm = _model("bipolar-mlp")
    path = tmp_path / "bipolar_mlp.onnx"
    onnx.save(qm.model, path)
    api.compile(path, tmp_path / "out", board="ulx3s-85f")
    x = inputs(qm.batch, qm.in_shape, seed=13)
    sim = api.simulate(tmp_path / "out", x, simulator="verilator", stall=0.1, seed=1)
    ig = _ig(qm.model)
    xq, want = _golden(ig, x)
    assert np.array_equal(sim.inputs_int, xq)
    assert np.array_equal(ig.from_stream(sim.outputs_int), want)
    assert np.array_equal(want, _qonnx_int(ig, qm.model, x))
    # the float outputs the API returns are qonnx's
    assert np.array_equal(sim.outputs.reshape(qm.batch, -1),
                          run_qonnx(qm.model, x).reshape(qm.batch, -1))


@pytest.mark.sim
def test_verify_uses_qonnx_as_the_reference(tmp_path):
    """``hwgen verify`` on a QONNX model: onnxruntime cannot run its custom ops, so the qonnx
    package's execution is the reference."""
    qm = bipolar_mlp(batch=4)
    path = tmp_path / "bipolar_mlp.onnx"
    onnx.save(qm.model, path)
    rep = api.verify(path, inputs(4, qm.in_shape, seed=3), simulator="amaranth",
                     board="ulx3s-85f")
    assert rep.ok and rep.golden_mismatched_samples == 0
    assert rep.ort_identical_fraction == 1.0 and rep.ort_max_step_diff == 0


# ------------------------------------------------------------------------------- Trunc

def _pool_trunc_model(version: int, mode: str, exact: bool, pool: str, batch: int = 64):
    """Quant(4-bit signed) → GlobalAveragePool | AveragePool 2×2 → Trunc → output.
    ``exact``: the Trunc scale is the input scale / window size (r = Σq exactly, Brevitas'
    form); otherwise the input scale itself (r = round(mean), then truncated again)."""
    b = Builder("trunc", inputs(256, (3, 4, 4), seed=5), seed=5)
    x = b.quant("x", 4, True)
    s = b.scales[x]
    if pool == "gap":
        p, k = b.gap(x), 16
    else:
        p = b.node("AveragePool", [x], "avgpool", kernel_shape=[2, 2], strides=[2, 2])
        v = b.vals[x]
        b.vals[p] = v.reshape(v.shape[0], 3, 2, 2, 2, 2).mean(axis=(3, 5))
        k = 4
    ts = s / k if exact else s
    in_bits = 4 + int(np.log2(k)) if exact else 4
    out_bits = in_bits - 2
    if version == 1:
        y = b.trunc(p, ts, in_bits, out_bits, mode, version=1)
    else:
        y = b.trunc(p, ts, in_bits, out_bits, mode, version=2, out_scale=ts * 4, signed=True)
    return b.build(y, batch, (3, 4, 4), qonnx_opset=version)


@pytest.mark.parametrize("pool", ["gap", "avg"])
@pytest.mark.parametrize("version,mode,exact", [
    (1, "FLOOR", True), (1, "ROUND", True), (1, "CEIL", True), (1, "FLOOR", False),
    (1, "ROUND", False), (2, "ROUND", True), (2, "FLOOR", True), (2, "CEIL", False)])
def test_trunc_after_pooling_equals_qonnx(version, mode, exact, pool):
    model = _pool_trunc_model(version, mode, exact, pool)
    x = inputs(64, (3, 4, 4), seed=17)
    ig, _ = _check_against_qonnx(model, x, min_levels=3)
    pools = [op for op in ig.ops if isinstance(op, (GlobalAvgPool, Pool))]
    assert len(pools) == 1
    fused = mode == "ROUND" and exact
    assert len(ig.ops) == (1 if fused else 2)
    if not fused:
        assert isinstance(ig.ops[1], Conv) and ig.ops[1].depthwise


@pytest.mark.sim
def test_trunc_rtl_equals_golden():
    """The two-op form (pooling, then the 1×1 depthwise layer) in hardware."""
    model = _pool_trunc_model(1, "FLOOR", False, "avg")
    ig = _ig(model)
    x = inputs(4, (3, 4, 4), seed=19)
    xq, _ = _golden(ig, x)
    want = golden.run(ig, xq)[ig.output].reshape(4, -1)
    dfg = lower(ig, None, 64)
    top = build_top(dfg)
    beats, last = frames_to_beats(xq, dfg.input.qtype, dfg.in_per_beat)
    res = run_amaranth(top, StreamJob(top.in_width, top.out_width, beats, last,
                                      4 * dfg.output.size // dfg.out_per_beat))
    got = beats_to_frames(res.out_beats, dfg.output.qtype, dfg.out_per_beat, dfg.output.size)
    assert np.array_equal(got, want)


# ----------------------------------------------------------- quantizer semantics in detail

def test_narrow_range_and_zero_points_equal_qonnx():
    """Signed narrow activations (−7..7 at 4 bits), an unsigned output with zero point 100,
    and an unsigned narrow activation (0..14)."""
    b = Builder("narrow", inputs(256, (16,), seed=3), seed=3)
    x = b.quant("x", 8, True)
    h = b.quant(b.dense(x, 12, 4), 4, True, narrow=True)
    h = b.quant(b.relu(b.dense(h, 12, 4, gemm=True)), 4, False, narrow=True)
    y = b.quant(b.dense(h, 8, 4), 8, False, zp=100)
    model = b.build(y, 64, (16,))
    x = inputs(64, (16,), seed=4)
    ig, out = _check_against_qonnx(model, x, min_levels=8)
    xq, _ = _golden(ig, x)
    vals = golden.run(ig, xq)
    t1, t2 = ig.ops[0].output, ig.ops[1].output
    assert ig.ops[0].requant.lo == -7 and vals[t1].min() >= -7 and (vals[t1] == -7).any()
    assert ig.ops[1].requant.hi == 14 and (vals[t2] == 14).any()
    assert ig.tensors[ig.output].zero_point == 100 and out.min() < 100 < out.max()


def _handmade(nodes, inits, in_shape, out_shape, opset=1):
    g = helper.make_graph(nodes, "m",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, in_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
                          [numpy_helper.from_array(np.asarray(v, np.float32), k)
                           for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13),
                                            helper.make_opsetid(DOMAIN, opset)])
    m.ir_version = 8
    return m


def _q(x, out, s, z, bw, signed=1, narrow=0, mode="ROUND"):
    return helper.make_node("Quant", [x, s, z, bw], [out], domain=DOMAIN, signed=signed,
                            narrow=narrow, rounding_mode=mode)


@pytest.mark.parametrize("mode", ["ROUND", "FLOOR", "CEIL", "HALF_UP", "DOWN"])
def test_weight_rounding_modes_and_zero_points(mode):
    """Weights quantized by any qonnx rounding mode, unsigned with a zero point per output
    channel (IntQuant, the newer name of Quant), per-channel scales along axis 1."""
    rng = np.random.default_rng(23)
    w = rng.standard_normal((10, 6)).astype(np.float32)
    ws = 2.0 ** rng.integers(-3, -1, (1, 6))
    wz = rng.integers(5, 11, (1, 6))
    nodes = [_q("x", "xq", "s", "z", "b8"),
             helper.make_node("IntQuant", ["w", "ws", "wz", "b4"], ["wq"], domain=DOMAIN,
                              signed=0, narrow=0, rounding_mode=mode),
             helper.make_node("MatMul", ["xq", "wq"], ["mm"]),
             _q("mm", "y", "so", "z", "b8")]
    inits = {"w": w, "ws": ws, "wz": wz, "s": 2.0 ** -6, "z": 0, "b8": 8, "b4": 4,
             "so": 2.0 ** -3}
    model = _handmade(nodes, inits, [32, 10], [32, 6])
    ig, _ = _check_against_qonnx(model, inputs(32, (10,), seed=29), min_levels=8)
    assert ig.ops[0].weights.min() < 0 < ig.ops[0].weights.max()   # zero points subtracted


def test_float_scales_agree_with_qonnx():
    """Non-power-of-two scales: the float32 QONNX arithmetic is no longer exact, yet the
    integer requantizer (float32 multiplier, as for QDQ models) agrees on nearly all
    outputs, never more than one step apart."""
    rng = np.random.default_rng(31)
    w = rng.standard_normal((16, 8)).astype(np.float32)
    nodes = [_q("x", "xq", "s", "z", "b8"), _q("w", "wq", "ws", "z", "b4", narrow=1),
             helper.make_node("MatMul", ["xq", "wq"], ["mm"]),
             helper.make_node("Relu", ["mm"], ["r"]),
             _q("r", "y", "so", "z", "b4", signed=0)]
    inits = {"w": w, "ws": np.abs(w).max(axis=0, keepdims=True) / 7, "s": 1 / 127.0, "z": 0,
             "b8": 8, "b4": 4, "so": 0.173}
    model = _handmade(nodes, inits, [256, 16], [256, 8])
    x = inputs(256, (16,), seed=37)
    ig = _ig(model)
    _, y = _golden(ig, x)
    diff = np.abs(y - _qonnx_int(ig, model, x))
    assert diff.max() <= 1 and np.mean(diff == 0) >= 0.99
    assert len(np.unique(y)) >= 10


def test_compact_requant_is_the_same_function():
    rng = np.random.default_rng(41)
    for _ in range(200):
        mult = [float(2.0 ** rng.integers(-12, 4)) * (1 if rng.random() < 0.5 else 1.5)
                for _ in range(3)]
        rq = make_requant(mult, int(rng.integers(-5, 5)), -200, 200)
        c = compact_requant(rq)
        assert c.mult_bits <= rq.mult_bits and c.shift <= rq.shift
        acc = rng.integers(-3000, 3000, (64, 3))
        assert np.array_equal(rq.apply(acc), c.apply(acc))
    assert compact_requant(make_requant(0.25, 0, -8, 7)).mult == (1,)


# ------------------------------------------------------------ the bipolar datapaths alone

def test_bipolar_type_and_xnor_popcount():
    v = np.array([[1, -1, -1, 1, 1]])
    assert np.array_equal(BIPOLAR.to_unsigned(v), [[1, 0, 0, 1, 1]])
    assert np.array_equal(BIPOLAR.from_unsigned(BIPOLAR.to_unsigned(v)), v)
    beats, _ = frames_to_beats(v, BIPOLAR, 5)
    assert beats == [0b11001]
    assert (BIPOLAR.lo, BIPOLAR.hi, BIPOLAR.bits, BIPOLAR.name) == (-1, 1, 1, "bipolar")
    assert BIPOLAR != QType(1, False) and BIPOLAR != QType(1, True)
    rng = np.random.default_rng(3)
    xb, wb = rng.integers(0, 2, (20, 37)), rng.integers(0, 2, (5, 37))
    assert np.array_equal(xnor_popcount(xb, wb), (2 * xb - 1) @ (2 * wb - 1).T)
    acc = np.arange(-5, 6)
    assert np.array_equal(sign_requant().apply(acc), np.where(acc >= 0, 1, -1))
    with pytest.raises(ValueError):
        check_sign_requant(make_requant(0.5, 0, -1, 1))
    with pytest.raises(ValueError):
        MVAUParams(np.ones((2, 2), np.int64), np.zeros(2, np.int64), make_requant(1.0, 0, -1, 1),
                   INT8, BIPOLAR)


def _random_bipolar_params(kind: str, pe: int, simd: int, seed: int) -> MVAUParams:
    rng = np.random.default_rng(seed)
    mh, mw = 6, 12
    in_type = BIPOLAR if kind in ("xnor", "xnor-sign", "bipolar_in") else \
        {"select": INT8, "select-u4": QType(4, False)}[kind]
    if kind == "bipolar_in":
        w = rng.integers(-7, 8, (mh, mw))
    else:
        w = rng.choice([-1, 1], (mh, mw))
    bias = rng.integers(-4, 5, mh)
    if kind == "xnor-sign":
        return MVAUParams(w, bias, sign_requant(), in_type, BIPOLAR, pe, simd)
    if kind == "select":  # int8 in → bipolar out with a threshold, per the first BNN layer
        return MVAUParams(w, bias * 50, sign_requant(), in_type, BIPOLAR, pe, simd)
    span = 2 * float(np.abs(w).sum(axis=1).max()) * max(1, in_type.hi)
    rq = make_requant(rng.uniform(100, 200, mh) / span, 3, -128, 127)
    return MVAUParams(w, bias, compact_requant(rq), in_type, INT8, pe, simd)


@pytest.mark.sim
@pytest.mark.parametrize("kind,pe,simd", [
    ("xnor", 2, 4), ("xnor", 1, 12), ("xnor-sign", 3, 3), ("xnor-sign", 6, 1),
    ("select", 2, 6), ("select-u4", 3, 2), ("bipolar_in", 2, 3), ("bipolar_in", 1, 1)])
def test_bipolar_mvau_datapaths_amaranth(kind, pe, simd):
    p = _random_bipolar_params(kind, pe, simd, seed=pe * 10 + simd)
    assert p.datapath == {"xnor-sign": "xnor", "select-u4": "select"}.get(kind, kind)
    # no multiplier in the dot products; the requantizer's tiles unless the output is a sign
    c = cost(p)
    rq_tiles = RequantPipeline.multiplies(p.requant, p.acc_bits, pe, p.out_type == BIPOLAR, p.sf)
    assert c.multipliers == len(rq_tiles) and c.multiplier_widths == rq_tiles
    assert len(rq_tiles) >= (0 if p.out_type == BIPOLAR else pe)
    assert p.w_bits == (1 if p.datapath in ("xnor", "select") else 4)
    rng = np.random.default_rng(7)
    n = 6
    x = rng.integers(p.in_type.lo, p.in_type.hi + 1, (n, p.mw))
    if p.in_type == BIPOLAR:
        x = np.where(x >= 0, 1, -1)
    x[0], x[1] = p.in_type.lo, p.in_type.hi
    want = mvau_golden(p, x)
    assert len(np.unique(want)) >= 2
    beats, last = frames_to_beats(x, p.in_type, p.simd)
    job = StreamJob(axis_width(p.simd * p.in_type.bits), axis_width(p.pe * p.out_type.bits),
                    beats, last, n * p.nf, stall_in=0.3, stall_out=0.3, seed=2)
    res = run_amaranth(AxisTop(MVAU(p), out_beats_per_frame=p.nf), job)
    got = beats_to_frames(res.out_beats, p.out_type, p.pe, p.mh)
    assert np.array_equal(got, want)


# ---------------------------------------------------------------------------- refusals

def _refused(model, *needles):
    with pytest.raises(HwgenError) as e:
        _ig(model)
    msg = str(e.value)
    for n in needles:
        assert n in msg, msg
    return msg


def _one_layer(act_scale=1 / 64, act_mode="ROUND", act_bits=8, first=None, last=None):
    nodes = [first or _q("x", "xq", "s", "z", "bx"),
             _q("w", "wq", "ws", "z", "b4", narrow=1),
             helper.make_node("MatMul", ["xq", "wq"], ["mm"]),
             last or _q("mm", "y", "so", "z", "b8", mode=act_mode)]
    inits = {"w": np.ones((4, 3)), "ws": 0.5, "s": act_scale, "z": 0, "bx": act_bits,
             "b4": 4, "b8": 8, "so": 0.25}
    return _handmade(nodes, inits, [1, 4], [1, 3])


def test_refusals():
    _refused(_one_layer(act_scale=np.full(4, 1 / 64)), "per-channel scales", "Quant")
    _refused(_one_layer(act_mode="FLOOR"), "rounding_mode=FLOOR", "only ROUND")
    _refused(_one_layer(act_bits=17), "1 to 16")
    # a narrow-range input quantizer is the host's clamp (tests/dataflow/test_thresholds.py)
    assert _ig(_one_layer(first=_q("x", "xq", "s", "z", "bx", narrow=1))).input_bounds == \
        (-127, 127)
    trunc = helper.make_node("Trunc", ["mm", "so", "z", "b8", "b4"], ["y"], domain=DOMAIN,
                             rounding_mode="FLOOR")
    _refused(_one_layer(last=trunc), "Trunc is supported right after")


def test_padded_conv_of_a_bipolar_map_is_refused():
    b = Builder("bconv", inputs(16, (2, 6, 6), seed=1), seed=1)
    x = b.quant("x", 8, True)
    x = b.bipolar(b.conv(x, 4, 4, pad=0))
    y = b.quant(b.conv(x, 4, 4, pad=1), 8, True)
    _refused(b.build(y, 4, (2, 6, 6)), "padded", "bipolar")
