"""Thresholds: the multi-threshold block (``rtl_templates/thresholds.py``) and the QONNX
quantizers after a layer's accumulator and a chain of affine float ops that become it
(``dataflow/ops_thresh.py``).

* The block: RTL == golden (``np.array_equal``) in Amaranth's simulator for integer and
  bipolar outputs, increasing and decreasing channels, several foldings, with and without
  random stalls; measured interval and latency equal the cost and timing models exactly
  (stall-free); one Verilator build.
* The thresholds: for small QONNX models (MatMul → BatchNormalization / Mul / Add / Sub /
  Div by constants, negative scales included → Quant or BipolarQuant) every accumulator
  value of every channel is run through qonnx's own execution of the chain and compared with
  the thresholds' level (exhaustive), and whole models equal qonnx on random inputs.
* Input preprocessing (Mul / Sub / Div / Add by constants before the first quantizer) is
  folded into the host's input quantization, equal to qonnx.
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from qonnx_models import DOMAIN

from hwgen import api, design
from hwgen.assemble import build_top
from hwgen.dataflow import golden as golden_run
from hwgen.dataflow.importer import to_int_graph
from hwgen.dataflow.loader import load_model_proto
from hwgen.dataflow.lower import lower
from hwgen.dataflow.ops_qonnx import qonnx_reference as run_qonnx
from hwgen.errors import HwgenError
from hwgen.rtl_templates.mvau import MVAU, MVAUParams
from hwgen.rtl_templates.mvau import cost as mvau_cost
from hwgen.rtl_templates.mvau import golden as mvau_golden
from hwgen.rtl_templates.quant import QType, Requant, range_type
from hwgen.rtl_templates.thresholds import (
    LATENCY,
    Thresholds,
    ThresholdsParams,
    cost,
    golden,
    timing,
)
from hwgen.rtl_templates.xnor_mvau import BIPOLAR
from hwgen.sim.amaranth_sim import run_amaranth
from hwgen.sim.base import StreamJob
from hwgen.sim.harness import run_block
from hwgen.sim.packing import beats_to_frames, frames_to_beats

INT12 = QType(12, True)
INT2 = QType(2, True)
UINT4 = QType(4, False)


def _params(in_type: QType, out_type: QType, channels: int, pe: int, pixels: int, seed: int,
            ) -> ThresholdsParams:
    rng = np.random.default_rng(seed)
    n = 1 if out_type is BIPOLAR else out_type.hi - out_type.lo
    t = np.sort(rng.integers(in_type.lo, in_type.hi + 2, (channels, n)), axis=1)
    dec = rng.random(channels) < 0.4
    lo = -1 if out_type is BIPOLAR else out_type.lo
    return ThresholdsParams(t, dec, in_type, out_type, lo, pe, channels * pixels)


def _frames(p: ThresholdsParams, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.integers(p.in_type.lo, p.in_type.hi + 1, (n, p.elements))
    # the thresholds themselves and their neighbours appear
    t = np.asarray(p.thresholds)
    x[0] = np.clip(np.resize(t[:, 0], p.elements), p.in_type.lo, p.in_type.hi)
    x[1] = np.clip(np.resize(t[:, -1] - 1, p.elements), p.in_type.lo, p.in_type.hi)
    return x


CASES = [(INT12, INT2, 8, 1, 1), (INT12, UINT4, 6, 3, 4), (INT12, BIPOLAR, 12, 4, 2),
         (QType(5, True), INT2, 4, 4, 9), (QType(6, False), UINT4, 5, 5, 1)]


@pytest.mark.sim
@pytest.mark.parametrize("in_type,out_type,channels,pe,pixels", CASES,
                         ids=[f"{a.name}-{b.name}-c{c}-pe{d}-px{e}" for a, b, c, d, e in CASES])
def test_block_golden_and_cycles(in_type, out_type, channels, pe, pixels):
    p = _params(in_type, out_type, channels, pe, pixels, seed=channels + pe)
    x = _frames(p, 4, seed=pe)
    run = run_block(Thresholds(p), x, in_type, pe, out_type, pe, p.elements)
    assert np.array_equal(run.frames, golden(p, x))
    c = cost(p)
    assert c.cycles == p.elements // pe
    assert run.interval == c.cycles
    assert run.latency == c.latency == timing(p, 0, p.beats - 1)[1] + 1
    assert run.result.out_times[0] - run.result.in_times[0] == LATENCY


@pytest.mark.sim
@pytest.mark.parametrize("stall", [0.3, 0.6])
def test_block_under_stalls(stall):
    p = _params(INT12, UINT4, 6, 2, 3, seed=4)
    x = _frames(p, 5, seed=3)
    run = run_block(Thresholds(p), x, INT12, 2, UINT4, 2, p.elements, stall_in=stall,
                    stall_out=stall, seed=11)
    assert np.array_equal(run.frames, golden(p, x))


@pytest.mark.verilator
def test_block_verilator():
    p = _params(INT12, INT2, 8, 4, 2, seed=5)
    x = _frames(p, 3, seed=9)
    run = run_block(Thresholds(p), x, INT12, 4, INT2, 4, p.elements, simulator="verilator",
                    stall_in=0.2, stall_out=0.2, seed=1, name="thresholds_top")
    assert np.array_equal(run.frames, golden(p, x))


def test_golden_semantics():
    t = np.array([[-2, 0, 3], [-2, 0, 3]])
    p = ThresholdsParams(t, np.array([False, True]), INT12, INT2, -2, 1, 2)
    x = np.array([[-3, -3], [-2, -2], [0, 0], [3, 3]])
    y = golden(p, x)
    assert y[:, 0].tolist() == [-2, -1, 0, 1]             # increasing: count reached
    assert y[:, 1].tolist() == [1, 0, -1, -2]             # decreasing: N - count


def test_params_refuse_bad_thresholds():
    with pytest.raises(ValueError, match="ascending"):
        ThresholdsParams(np.array([[2, 1]]), np.array([False]), INT12, INT2, -1)
    with pytest.raises(ValueError, match="do not fit"):
        ThresholdsParams(np.array([[0, 1, 2, 3]]), np.array([False]), INT12, INT2, -1)
    with pytest.raises(ValueError, match="PE"):
        ThresholdsParams(np.array([[0], [1]]), np.array([False, True]), INT12, BIPOLAR, -1, 3, 2)


# ------------------------------------------------------------ thresholds from QONNX models

def _init(name, v):
    return numpy_helper.from_array(np.asarray(v, np.float32), name)


def _quant(x, out, s, z, bw, signed=1, narrow=0, mode="ROUND"):
    return helper.make_node("Quant", [x, s, z, bw], [out], domain=DOMAIN, signed=signed,
                            narrow=narrow, rounding_mode=mode)


def _chain(kind: str, c: int, rng) -> tuple[list, list, str]:
    """The float ops after the accumulator ``acc_real`` [K, C]: (nodes, initializers, the
    tensor the final quantizer reads)."""
    nodes, inits = [], []
    gamma = rng.uniform(0.2, 2.0, c) * np.where(rng.random(c) < 0.3, -1, 1)
    inits += [_init("g", gamma), _init("b", rng.normal(0, 2, c)), _init("mu", rng.normal(0, 3, c)),
              _init("var", rng.uniform(0.5, 4, c))]
    nodes.append(helper.make_node("BatchNormalization", ["acc_real", "g", "b", "mu", "var"],
                                  ["bn"], epsilon=1e-4))
    if kind == "bn":
        return nodes, inits, "bn"
    inits += [_init("m1", rng.uniform(0.3, 1.5, c) * np.where(rng.random(c) < 0.5, -1, 1)),
              _init("a1", rng.normal(0, 0.7, c)), _init("s1", np.float32(0.37)),
              _init("d1", rng.uniform(0.5, 3.0, c))]
    nodes += [helper.make_node("Mul", ["m1", "bn"], ["t1"]),
              helper.make_node("Add", ["t1", "a1"], ["t2"]),
              helper.make_node("Sub", ["s1", "t2"], ["t3"]),      # a constant minus: flips
              helper.make_node("Div", ["t3", "d1"], ["t4"])]
    return nodes, inits, "t4"


def _model(kind: str, quant: str, c: int = 6, k: int = 8, seed: int = 0):
    """x [1, k] → 4-bit Quant → MatMul (3-bit weights) → chain → ``quant``. Returns (full
    model, chain-only model reading ``acc_real``, the accumulator scale)."""
    rng = np.random.default_rng(seed)
    s_x, s_w = 2.0 ** -3, 2.0 ** -2
    w = rng.integers(-3, 4, (k, c)) * s_w
    pre = [_quant("x", "xq", "sx", "z0", "b4"), _quant("w", "wq", "sw", "z0", "b3", narrow=1),
           helper.make_node("MatMul", ["xq", "wq"], ["acc_real"])]
    pre_inits = [_init("sx", s_x), _init("sw", s_w), _init("z0", 0), _init("b4", 4),
                 _init("b3", 3), _init("w", w)]
    nodes, inits, last = _chain(kind, c, rng)
    if quant == "bipolar":
        qn = [helper.make_node("BipolarQuant", [last, "sq"], ["y"], domain=DOMAIN)]
        inits += [_init("sq", 1.0)]
    else:
        bits, signed, narrow, mode = quant
        qn = [_quant(last, "y", "sq", "zq", "bq", signed, narrow, mode)]
        inits += [_init("sq", 0.5), _init("zq", 0 if signed else 1), _init("bq", bits)]

    def make(inp, nodes_, inits_, in_shape):
        out_shape = [in_shape[0], c]
        g = helper.make_graph(nodes_, "m",
                              [helper.make_tensor_value_info(inp, TensorProto.FLOAT, in_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
                              inits_)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13),
                                                helper.make_opsetid(DOMAIN, 1)])
        m.ir_version = 8
        return m
    full = make("x", pre + nodes + qn, pre_inits + inits, [1, k])
    chain = make("acc_real", nodes + qn, inits, ["n", c])
    return full, chain, np.float32(s_x * s_w)


QUANTS = [(2, 1, 1, "ROUND"), (3, 1, 0, "FLOOR"), (4, 0, 0, "ROUND"), (4, 1, 0, "HALF_UP"),
          (1, 1, 0, "ROUND"), "bipolar"]


def _ids(q):
    return q if isinstance(q, str) else f"{'int' if q[1] else 'uint'}{q[0]}-n{q[2]}-{q[3]}"


@pytest.mark.parametrize("kind", ["bn", "affine"])
@pytest.mark.parametrize("quant", QUANTS, ids=[_ids(q) for q in QUANTS])
def test_thresholds_equal_qonnx_on_every_accumulator(kind, quant):
    """Every accumulator value of every channel: the thresholds' output == qonnx's
    execution of the chain and the quantizer (exhaustive)."""
    pytest.importorskip("qonnx")
    full, chain, acc_scale = _model(kind, quant, seed=len(kind) + len(_ids(quant)))
    ig = to_int_graph(load_model_proto(full))
    kinds = [type(op).__name__ for op in ig.ops]
    assert kinds == ["MatVec", "Thresholding"]
    mv, th = ig.ops
    p = th.params(ig)
    lo, hi = acc_bounds_of(mv, ig)                                  # per channel
    acc = np.arange(lo.min(), hi.max() + 1)
    frames = np.repeat(acc[:, None], p.channels, axis=1)           # [K, C]
    inside = (frames >= lo) & (frames <= hi)                       # each channel's range
    got = golden(p, frames)
    ref = run_qonnx(chain, (frames.astype(np.float32) * acc_scale))
    t = ig.tensors[th.output]
    want = np.rint(ref / np.float32(t.scale)).astype(np.int64) + t.zero_point
    bad = inside & (got != want)
    assert not bad.any(), np.argwhere(bad)[:5]
    assert len(np.unique(got)) >= 2
    if kind == "affine":   # the chain flips some channels and not others
        assert 0 < int(np.sum(th.decreasing)) < p.channels


def acc_bounds_of(mv, ig):
    w = mv.weights.astype(np.int64)
    t = ig.tensors[mv.input].qtype
    pos, neg = np.where(w > 0, w, 0).sum(1), np.where(w < 0, w, 0).sum(1)
    return t.lo * pos + t.hi * neg + mv.bias, t.hi * pos + t.lo * neg + mv.bias


@pytest.mark.sim
@pytest.mark.parametrize("quant", [(2, 1, 1, "ROUND"), "bipolar"], ids=["int2", "bipolar"])
def test_model_golden_and_rtl(quant):
    """The whole model: golden == qonnx on random inputs, RTL == golden (Amaranth)."""
    pytest.importorskip("qonnx")
    full, _, _ = _model("affine", quant, c=8, k=12, seed=5)
    ig = to_int_graph(load_model_proto(full))
    x = np.random.default_rng(1).uniform(-1.2, 1.2, (64, 12)).astype(np.float32)
    xq = ig.quantize_input(x)
    y = golden_run.run(ig, xq)[ig.output].reshape(64, -1)
    t = ig.tensors[ig.output]
    ref = run_qonnx(full, x)
    want = np.rint(ref / np.float32(t.scale)).astype(np.int64) + t.zero_point
    assert np.array_equal(ig.from_stream(y), want)
    dfg = lower(ig, None, 16)
    top = build_top(dfg)
    beats, last = frames_to_beats(xq[:6], dfg.input.qtype, dfg.in_per_beat)
    n_out = 6 * dfg.output.size // dfg.out_per_beat
    res = run_amaranth(top, StreamJob(top.in_width, top.out_width, beats, last, n_out,
                                      stall_in=0.2, stall_out=0.2, seed=3))
    got = beats_to_frames(res.out_beats, dfg.output.qtype, dfg.out_per_beat, dfg.output.size)
    assert np.array_equal(got, y[:6])


def test_layer_with_an_unfoldable_step_needs_a_low_bit_quantizer():
    full, _, _ = _model("affine", (8, 1, 0, "ROUND"))
    with pytest.raises(HwgenError, match="low-bit QONNX quantizer"):
        to_int_graph(load_model_proto(full))


# ------------------------------------------------------------------ input preprocessing

def test_input_preprocessing_equals_qonnx(tmp_path):
    """(x·2 - 1) / 0.5 + 0.25 per element before an 8-bit narrow input quantizer: the host
    computes it in float32, then quantizes and clamps (-127..127); golden == qonnx, and a
    design folder keeps it."""
    pytest.importorskip("qonnx")
    rng = np.random.default_rng(3)
    k, c = 10, 4
    nodes = [helper.make_node("Mul", ["x", "two"], ["p1"]),
             helper.make_node("Sub", ["p1", "one"], ["p2"]),
             helper.make_node("Div", ["p2", "half"], ["p3"]),
             helper.make_node("Add", ["off", "p3"], ["p4"]),
             _quant("p4", "xq", "sx", "z0", "b8", narrow=1),
             _quant("w", "wq", "sw", "z0", "b4", narrow=1),
             helper.make_node("MatMul", ["xq", "wq"], ["acc"]),
             _quant("acc", "y", "sy", "z0", "b16")]
    inits = [_init("two", 2.0), _init("one", 1.0), _init("half", 0.5),
             _init("off", rng.normal(0, 0.1, (1, k))), _init("sx", 1 / 127), _init("z0", 0),
             _init("b8", 8), _init("sw", 1.0), _init("b4", 4), _init("b16", 16),
             _init("w", rng.integers(-7, 8, (k, c))), _init("sy", 1 / 127)]
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                     [1, k])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13),
                                            helper.make_opsetid(DOMAIN, 1)])
    m.ir_version = 8
    ig = to_int_graph(load_model_proto(m))
    assert [p.op for p in ig.input_pre] == ["Mul", "Sub", "Div", "Add"]
    assert ig.input_bounds == (-127, 127)
    x = rng.uniform(-0.2, 1.2, (40, k)).astype(np.float32)
    x[0, :] = np.float32(-5.0)                      # saturates at the narrow bound
    xq = ig.quantize_input(x)
    assert xq.min() == -127
    y = golden_run.run(ig, xq)[ig.output].reshape(40, -1)
    t = ig.tensors[ig.output]
    ref = run_qonnx(m, x)
    assert np.array_equal(y, np.rint(ref / np.float32(t.scale)).astype(np.int64))
    path = tmp_path / "pre.onnx"
    onnx.save(m, path)
    api.compile(path, tmp_path / "d", target_cycles=64)
    _, ig2, _ = design.load(tmp_path / "d")
    assert np.array_equal(ig2.quantize_input(x), xq)


def test_preprocessing_refusals():
    k = 4
    nodes = [helper.make_node("Div", ["two", "x"], ["p"]),
             _quant("p", "xq", "sx", "z0", "b8"),
             _quant("w", "wq", "sw", "z0", "b4"),
             helper.make_node("MatMul", ["xq", "wq"], ["acc"]),
             _quant("acc", "y", "sx", "z0", "b8")]
    inits = [_init("two", 2.0), _init("sx", 1 / 64), _init("z0", 0), _init("b8", 8),
             _init("sw", 1.0), _init("b4", 4), _init("w", np.ones((k, 2)))]
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                     [1, k])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13),
                                            helper.make_opsetid(DOMAIN, 1)])
    m.ir_version = 8
    ig = to_int_graph(load_model_proto(m))          # c / x on the host is fine (no monotony
    x = np.array([[0.5, 1.0, -2.0, 4.0]], np.float32)   # needed): 2 / x
    assert np.array_equal(ig.quantize_input(x), np.array([[127, 127, -64, 32]]))


# ------------------------------------------------- the layer before: accumulator pass-through

@pytest.mark.parametrize("pe,simd,vectors,wider", [(2, 4, 1, 0), (8, 3, 2, 3), (1, 12, 1, 1)])
def test_mvau_passes_its_accumulator_through(pe, simd, vectors, wider):
    """A layer feeding thresholds sends ``W @ x + b`` on: the requantizer is the identity,
    built without a product or rounding; RTL == golden and cycles == the cost model. An
    output type wider than the accumulator (``wider`` bits) is sign-extended."""
    rng = np.random.default_rng(pe * 10 + simd)
    w = rng.integers(-3, 4, (8, 12))
    b = rng.integers(-20, 20, 8)
    in_type = QType(4, True)
    lo = (np.where(w > 0, w, 0).sum(1) * in_type.lo + np.where(w < 0, w, 0).sum(1) * in_type.hi
          + b).min()
    hi = (np.where(w > 0, w, 0).sum(1) * in_type.hi + np.where(w < 0, w, 0).sum(1) * in_type.lo
          + b).max()
    out_type = range_type(int(lo), int(hi))
    out_type = QType(out_type.bits + wider, True)
    rq = Requant((1,), 0, 0, out_type.lo, out_type.hi)
    p = MVAUParams(w, b, rq, in_type, out_type, pe, simd, vectors)
    assert p.identity and mvau_cost(p).multipliers == pe * simd      # the dot products only
    x = rng.integers(in_type.lo, in_type.hi + 1, (4, 12 * vectors))
    run = run_block(MVAU(p), x, in_type, simd, out_type, pe, 8 * vectors)
    want = mvau_golden(p, x)
    assert np.array_equal(run.frames, want)
    assert np.array_equal(want.reshape(4, vectors, 8),
                          x.reshape(4, vectors, 12) @ w.T + b)      # the accumulator itself
    c = mvau_cost(p)
    assert run.interval == c.cycles and run.latency == c.latency
