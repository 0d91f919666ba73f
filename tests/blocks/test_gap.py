"""Grid tests of the global-average-pooling unit (rtl_templates/gap.py).

For a grid of channel counts, image sizes (one pixel up to 8x8), PE (one channel block, i.e.
back-to-back read-modify-writes of one accumulator word, up to PE = 1), int8/uint8 in and
out, per-tensor and per-channel requantization, a Relu clamp and equal scales (many exact
rounding ties), the unit must

* be bit-exact against :func:`rtl_templates.gap.golden` over several frames back to back,
  with and without random valid/ready stalls, in Amaranth's simulator and (a subset) in
  Verilator;
* match its cost model: frame interval and latency within 2 %, one input beat per cycle;

and the golden model must agree with onnxruntime on the float QDQ models
DequantizeLinear → GlobalAveragePool / ReduceMean(axes=[2, 3]) → QuantizeLinear, unoptimized
and optimized (ORT fuses GlobalAveragePool into QLinearGlobalAveragePool), everywhere except
at exact rounding ties, and must equal the exact rational result away from ties.
"""
from __future__ import annotations

import dataclasses
import functools
import zlib
from fractions import Fraction

import numpy as np
import pytest

from hwgen.rtl_templates.gap import GAP, GAPParams, cost, golden, spacing, timing
from hwgen.rtl_templates.quant import INT8, UINT8, QType, Requant, make_requant
from hwgen.rtl_templates.requant import RequantPipeline
from hwgen.sim.harness import run_block

N_FRAMES = 4
#: float32 arithmetic may round either way this close to a tie (in output steps)
TIE = 1e-4


def gap_requant(pixels: int, in_type: QType, in_scale: float, in_zero_point: int,
                out_scale: float, out_zero_point: int, out_type: QType, lo: int | None = None,
                hi: int | None = None) -> Requant:
    """The requantizer of ``DequantizeLinear(s_in, z_in) → GlobalAveragePool →
    QuantizeLinear(s_out, z_out)``: multiplier the float32 value of ``s_in / s_out / pixels``,
    the scales taken as float32 as ONNX stores them (``in_scale``/``out_scale`` may be per
    channel)."""
    s_in = np.asarray(in_scale, np.float32).astype(np.float64)
    s_out = np.asarray(out_scale, np.float32).astype(np.float64)
    return make_requant(s_in / s_out / pixels, out_zero_point,
                        out_type.lo if lo is None else lo, out_type.hi if hi is None else hi)


@dataclasses.dataclass(frozen=True)
class Cfg:
    c: int
    h: int
    w: int
    pe: int
    in_type: QType
    out_type: QType
    per_channel: bool = False   # one input scale per channel (a per-channel multiplier)
    relu: bool = False
    same_scale: bool = False

    @property
    def id(self) -> str:
        flags = "".join(f for f, on in (("-pc", self.per_channel), ("-relu", self.relu),
                                         ("-same", self.same_scale)) if on)
        return (f"c{self.c}-{self.h}x{self.w}-pe{self.pe}-{self.in_type.name}-"
                f"{self.out_type.name}{flags}")

    @property
    def pixels(self) -> int:
        return self.h * self.w

    @property
    def seed(self) -> int:
        return zlib.crc32(self.id.encode())

    @functools.cached_property
    def quant(self):
        """(s_in [C] or scalar, z_in, s_out, z_out), scales float32."""
        rng = np.random.default_rng(self.seed)
        ti, to = self.in_type, self.out_type
        z_in = int(rng.integers(ti.lo + 32, ti.hi - 32))
        if self.per_channel:
            s_in = rng.uniform(0.005, 0.05, self.c).astype(np.float32)
        else:
            s_in = np.float32(rng.uniform(0.005, 0.05))
        ref = float(np.max(s_in))
        s_out = np.float32(ref if self.same_scale else ref * rng.uniform(0.1, 0.4))
        z_out = int(rng.integers(to.lo, to.lo + 40)) if self.relu else \
            int(rng.integers(to.lo + 64, to.hi - 64))
        return s_in, z_in, s_out, z_out

    @functools.cached_property
    def params(self) -> GAPParams:
        s_in, z_in, s_out, z_out = self.quant
        rq = gap_requant(self.pixels, self.in_type, s_in, z_in, s_out, z_out, self.out_type,
                         lo=z_out if self.relu else None)
        return GAPParams(self.c, self.pixels, rq, self.in_type, self.out_type, self.pe, z_in)

    def images(self, n: int, seed: int) -> np.ndarray:
        """[N, H, W, C]; the first two all-lo and all-hi."""
        rng = np.random.default_rng(self.seed + seed)
        t = self.in_type
        x = rng.integers(t.lo, t.hi + 1, size=(n, self.h, self.w, self.c))
        if n >= 3:
            x[0], x[1] = t.lo, t.hi
        return x.astype(np.int64)

    def frames(self, n: int, seed: int) -> np.ndarray:
        return self.images(n, seed).reshape(n, -1)        # channel-last stream order


GRID = [
    Cfg(4, 3, 3, 1, INT8, INT8),
    Cfg(8, 4, 4, 2, UINT8, UINT8),
    Cfg(6, 5, 5, 6, INT8, UINT8, per_channel=True),        # one channel block: RMW every cycle
    Cfg(3, 7, 7, 1, UINT8, INT8),
    Cfg(16, 2, 2, 4, INT8, INT8, relu=True),
    Cfg(1, 6, 6, 1, UINT8, UINT8),                         # C = 1
    Cfg(12, 1, 1, 3, INT8, INT8),                          # one pixel
    Cfg(10, 8, 8, 5, UINT8, UINT8, per_channel=True),
    Cfg(2, 4, 4, 1, INT8, INT8, same_scale=True),          # H*W = 16: exact ties
    Cfg(32, 7, 7, 8, UINT8, UINT8, same_scale=True),
]
VL_GRID = [GRID[2]]    # one build (~40 s cold on a busy machine; cached afterwards)


def _ids(cfgs):
    return [c.id for c in cfgs]


def _run(cfg: Cfg, x: np.ndarray, simulator: str = "amaranth", **kw):
    p = cfg.params
    return run_block(GAP(p), x, p.in_type, p.pe, p.out_type, p.pe, p.out_elements,
                     simulator=simulator, name="gap_top", **kw)


def _check_outputs(cfg: Cfg, x: np.ndarray, run) -> None:
    p = cfg.params
    want = golden(p, x)
    got = run.frames
    assert got.shape == want.shape
    if not np.array_equal(got, want):
        bad = np.argwhere(got != want)
        f, e = bad[0]
        raise AssertionError(f"{len(bad)} of {want.size} outputs differ; first at frame {f} "
                             f"channel {e}: got {got[f, e]}, golden {want[f, e]}")
    assert run.result.out_last == [(k % p.nb) == p.nb - 1 for k in range(len(x) * p.nb)]
    assert len(run.result.in_times) == len(x) * p.in_elements // p.pe


def _check_cycles(cfg: Cfg, x: np.ndarray, run) -> None:
    p = cfg.params
    c = cost(p)
    steps = p.pixels * p.nb
    assert c.cycles == steps
    ends = run.frame_ends(p.nb)
    for a, b in zip(ends, ends[1:]):
        assert abs((b - a) - c.cycles) <= 0.02 * c.cycles, f"interval {b - a} vs {c.cycles}"
    assert abs(run.latency - c.latency) <= 0.02 * c.latency, \
        f"latency {run.latency} vs cost model {c.latency}"
    t0 = run.result.in_times[0]
    assert run.result.in_times == list(range(t0, t0 + len(x) * steps))
    assert run.result.out_times[0] == timing(p, t0, t0 + steps - 1)[0]


# ---------------------------------------------------------------------------- tests

@pytest.mark.sim
@pytest.mark.parametrize("cfg", GRID, ids=_ids(GRID))
def test_golden_and_cycles_amaranth(cfg: Cfg):
    x = cfg.frames(max(N_FRAMES, 8), seed=1)
    y = golden(cfg.params, x[2:])
    assert len(np.unique(y)) >= min(3, y.size // 2)
    run = _run(cfg, x)
    _check_outputs(cfg, x, run)
    _check_cycles(cfg, x, run)


@pytest.mark.sim
@pytest.mark.parametrize("cfg", GRID, ids=_ids(GRID))
def test_stalls_amaranth(cfg: Cfg):
    x = cfg.frames(max(N_FRAMES, 8), seed=2)
    _check_outputs(cfg, x, _run(cfg, x, stall_in=0.3, stall_out=0.4, seed=3))


@pytest.mark.verilator
@pytest.mark.parametrize("cfg", VL_GRID, ids=_ids(VL_GRID))
def test_verilator(cfg: Cfg):
    """One build per configuration: cycle-exact run, then random stalls."""
    x = cfg.frames(8, seed=1)
    run = _run(cfg, x, simulator="verilator")
    _check_outputs(cfg, x, run)
    _check_cycles(cfg, x, run)
    for seed in (1, 2):
        x = cfg.frames(16, seed=10 + seed)
        _check_outputs(cfg, x, _run(cfg, x, simulator="verilator", stall_in=0.3,
                                    stall_out=0.4, seed=seed))


def test_output_backpressure_only():
    """Slow sink, always-valid source, one pixel per frame with PE = C: an output beat on
    every input beat."""
    cfg = Cfg(4, 1, 1, 4, INT8, INT8)
    x = cfg.frames(24, seed=4)
    _check_outputs(cfg, x, _run(cfg, x, stall_out=0.75, seed=5))


# ---------------------------------------------------------------------------- semantics

def _qdq_model(cfg: Cfg, n: int, op: str):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    s_in, z_in, s_out, z_out = cfg.quant
    code = {INT8: TensorProto.INT8, UINT8: TensorProto.UINT8}
    npt = {INT8: np.int8, UINT8: np.uint8}
    z_in_arr = np.full(np.shape(s_in), z_in, npt[cfg.in_type])
    if op == "ReduceMean":
        inits = [numpy_helper.from_array(np.array([2, 3], np.int64), "axes")]
        mid = helper.make_node("ReduceMean", ["xf", "axes"], ["yf"], keepdims=1)
    else:
        inits = []
        mid = helper.make_node("GlobalAveragePool", ["xf"], ["yf"])
    g = helper.make_graph(
        [helper.make_node("DequantizeLinear", ["x", "s_in", "z_in"], ["xf"], axis=1), mid,
         helper.make_node("QuantizeLinear", ["yf", "s_out", "z_out"], ["y"])],
        "gap", [helper.make_tensor_value_info("x", code[cfg.in_type],
                                              [n, cfg.c, cfg.h, cfg.w])],
        [helper.make_tensor_value_info("y", code[cfg.out_type], [n, cfg.c, 1, 1])],
        inits + [numpy_helper.from_array(np.asarray(s_in, np.float32), "s_in"),
                 numpy_helper.from_array(z_in_arr, "z_in"),
                 numpy_helper.from_array(np.array(s_out, np.float32), "s_out"),
                 numpy_helper.from_array(np.array(z_out, npt[cfg.out_type]), "z_out")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    m.ir_version = 9
    onnx.checker.check_model(m, full_check=True)
    return m, npt[cfg.in_type]


def _run_ort(model, x: np.ndarray, optimize: bool) -> np.ndarray:
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize
                                   else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    sess = ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0].reshape(len(x), -1).astype(np.int64)


def _exact(cfg: Cfg, images: np.ndarray):
    """Exact rational clamp(round_half_even(Σ(q - z_in) s_in / (HW s_out)) + z_out) and each
    value's distance from the nearest tie."""
    s_in, z_in, s_out, z_out = cfg.quant
    rq = cfg.params.requant
    acc = (images - z_in).reshape(len(images), -1, cfg.c).sum(axis=1)        # [N, C]
    s_in_c = np.broadcast_to(np.asarray(s_in, np.float32), (cfg.c,))
    y = np.empty(acc.shape, dtype=np.int64)
    dist = np.empty(acc.shape)
    for (i, c), a in np.ndenumerate(acc):
        v = int(a) * Fraction(float(s_in_c[c])) / (Fraction(float(s_out)) * cfg.pixels)
        dist[i, c] = abs(float(v - (v.numerator // v.denominator) - Fraction(1, 2)))
        y[i, c] = min(max(round(v) + z_out, rq.lo), rq.hi)
    return y, dist


@pytest.mark.parametrize("cfg", GRID, ids=_ids(GRID))
def test_golden_matches_onnxruntime(cfg: Cfg):
    n = 32
    images = cfg.images(n, seed=20)
    g = golden(cfg.params, cfg.frames(n, seed=20))
    y_ex, dist = _exact(cfg, images)
    rq = cfg.params.requant
    assert np.array_equal(g[dist > TIE], y_ex[dist > TIE])
    for op in ("GlobalAveragePool", "ReduceMean"):
        model, npt = _qdq_model(cfg, n, op)
        x = images.transpose(0, 3, 1, 2).astype(npt)
        # ORT fuses a per-channel DequantizeLinear into QLinearGlobalAveragePool as well,
        # which then refuses to run (its x_scale must be a scalar): unoptimized only there
        for opt in (False,) if cfg.per_channel else (False, True):
            o = np.maximum(_run_ort(model, x, opt), rq.lo)   # the Relu is not in the model
            diff = o != g
            assert np.abs(o - g).max() <= 1
            assert np.all(dist[diff] <= TIE), \
                f"ORT {op} (optimized={opt}) differs away from a rounding tie"
            if not cfg.same_scale:
                assert diff.sum() <= max(1, diff.size // 200), f"{op}: {diff.sum()} differ"


def test_tie_statistics():
    """Equal scales and H*W = 16: exact ties are common. The golden model rounds them half
    to even; count how often ORT's paths round them otherwise (pytest -s prints them)."""
    cfg = GRID[8]
    n = 512
    images = cfg.images(n, seed=30)
    g = golden(cfg.params, cfg.frames(n, seed=30))
    y_ex, dist = _exact(cfg, images)
    ties = (dist == 0) & (y_ex > cfg.params.requant.lo) & (y_ex < cfg.params.requant.hi)
    assert ties.sum() > 0 and np.array_equal(g, y_ex)
    msg = [f"{cfg.id}: {ties.sum()} exact ties in {g.size} outputs (z_out={cfg.quant[3]})"]
    for op in ("GlobalAveragePool", "ReduceMean"):
        model, npt = _qdq_model(cfg, n, op)
        for opt in (False, True):
            o = _run_ort(model, images.transpose(0, 3, 1, 2).astype(npt), opt)
            diff = o != g
            assert np.all(dist[diff] == 0)
            msg.append(f"{op} optimized={opt}: {diff.sum()}")
    print("\n" + "; ".join(msg))


def test_params_reject_bad_values():
    p = GRID[1].params                                   # C = 8
    for pe in (0, 3, 16):
        with pytest.raises(ValueError):
            dataclasses.replace(p, pe=pe)
    with pytest.raises(ValueError):
        dataclasses.replace(p, pixels=0)
    with pytest.raises(ValueError):
        dataclasses.replace(p, requant=dataclasses.replace(p.requant, mult=(1, 2)))
    with pytest.raises(ValueError):
        dataclasses.replace(p, in_zero_point=300)


def test_cost_formulas():
    p = GRID[7].params                                   # 10 channels, 8x8, PE 5, per channel
    c = cost(p)
    # four cycles to the requantizer and the output FIFO, then the requantizer's stages
    assert c.cycles == 64 * 2
    assert c.latency == c.cycles + 4 + RequantPipeline.depth(p.requant, p.acc_bits,
                                                              spacing=spacing(p))
    # one requantizer per lane; its 15×26-bit product takes two 16×16 tiles (the channel
    # blocks of the last pixel follow each other: no time to share a tile)
    assert c.multipliers == 5 * 2 and c.multiplier_widths == [(15, 16), (15, 10)] * 5
    assert c.memory_bits >= 2 * 5 * (p.acc_bits + p.requant.mult_bits)


# ---------------------------------------------------------------------------- whole-map AveragePool

def _whole_map_avg_model(c=6, h=5, w=3):
    """float input → QuantizeLinear → DequantizeLinear → AveragePool over the whole map →
    QuantizeLinear → DequantizeLinear (DS-CNN's pooling before its classifier)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    g = helper.make_graph(
        [helper.make_node("QuantizeLinear", ["x", "s_in", "z_in"], ["xq"]),
         helper.make_node("DequantizeLinear", ["xq", "s_in", "z_in"], ["xf"]),
         helper.make_node("AveragePool", ["xf"], ["yf"], kernel_shape=[h, w]),
         helper.make_node("QuantizeLinear", ["yf", "s_out", "z_out"], ["yq"]),
         helper.make_node("DequantizeLinear", ["yq", "s_out", "z_out"], ["y"])],
        "avg_whole", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", c, h, w])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", c, 1, 1])],
        [numpy_helper.from_array(np.array(0.05, np.float32), "s_in"),
         numpy_helper.from_array(np.array(3, np.uint8), "z_in"),
         numpy_helper.from_array(np.array(0.011, np.float32), "s_out"),
         numpy_helper.from_array(np.array(-4, np.int8), "z_out")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    m.ir_version = 9
    onnx.checker.check_model(m, full_check=True)
    return m


@pytest.mark.verilator
def test_whole_map_average_pool_is_a_global_average(tmp_path):
    """An AveragePool whose one window is the whole unpadded map maps to the global-average
    block (no window generator, no window buffer) with the average pooling's rounding (zero
    point added before it, as onnxruntime's); exact against onnxruntime; RTL == golden."""
    from conftest import golden_vs_onnxruntime, save_model

    from hwgen import api
    from hwgen.dataflow.importer import to_int_graph

    model = save_model(_whole_map_avg_model(), tmp_path / "m.onnx")
    ig = to_int_graph(api.load_model(model, upgrade=True))
    assert [type(op).__name__ for op in ig.ops] == ["GlobalAvgPool"]
    assert ig.ops[0].requant.zp_first
    x = np.random.default_rng(1).uniform(-0.2, 12, (300, 6, 5, 3)).astype(np.float32)
    diff, _ = golden_vs_onnxruntime(ig, model, x)
    assert diff.max() == 0
    r = api.verify(model, x[:40], target_cycles=64)
    assert [b["block"] for b in r.compiled.manifest["layers"]] == ["fifo", "gap"]
    assert r.samples == 40 and r.rtl_equals_golden
