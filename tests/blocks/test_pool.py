"""Grid tests of the pooling unit (rtl_templates/pool.py): MaxPool and AveragePool.

The unit is fed window streams in the sliding-window generator's depthwise order, built here
with NumPy from random images (max: pads filled with the type's minimum; avg: with the input
zero point). For a grid of image shapes, kernels, strides, paddings, PE, int8/uint8,
``count_include_pad`` 0/1 (so divisors that vary per output pixel), equal and unrelated
scales and a Relu clamp, the unit must

* be bit-exact against :func:`rtl_templates.pool.golden` over several frames back to back,
  with and without random valid/ready stalls, in Amaranth's simulator (and an average pool
  feeding a max pool in Verilator);
* match its cost model: frame interval and latency within 2 %, one input beat per cycle;

and the golden model must agree with onnxruntime on the float QDQ model
DequantizeLinear → MaxPool/AveragePool → QuantizeLinear, run both unoptimized (float
kernels) and optimized (ORT fuses it into QLinearAveragePool), except at rounding ties:
every difference must sit where the exact real value is within 1e-4 of a half-integer, and
away from ties the golden model must equal the exact rational result. With unrelated input
and output scales there are no exact ties and the outputs are identical. With equal scales
and even divisors exact ties are common, and there

* the golden model rounds them half to even (its float32 product is exact there);
* unoptimized ORT rounds some of them the other way (its float32 DequantizeLinear products,
  sum, division by the count and by s_out land a few ulps off the tie);
* the fused QLinearAveragePool rounds ``v + z_out`` half to even, i.e. it adds the output
  zero point before rounding: with an odd z_out it rounds every tie the other way.
"""
from __future__ import annotations

import dataclasses
import functools
import zlib
from fractions import Fraction

import numpy as np
import pytest

from hwgen.rtl_templates.pool import Pool, PoolParams, cost, golden, timing
from hwgen.rtl_templates.quant import INT8, UINT8, QType, Requant, make_requant
from hwgen.rtl_templates.vvau import windows_to_stream
from hwgen.sim.harness import run_block

N_FRAMES = 4


# ---------------------------------------------------------------------------- requantizers

def avg_requant(kernel: int, in_type: QType, in_scale: float, in_zero_point: int,
                out_scale: float, out_zero_point: int, out_type: QType,
                counts: np.ndarray | None = None, lo: int | None = None,
                hi: int | None = None) -> Requant:
    """The requantizer of ``DequantizeLinear(s_in, z_in) → AveragePool → QuantizeLinear(s_out,
    z_out)``: one multiplier, the float32 value of ``s_in / s_out / n``, per distinct count
    ``n`` (ascending); the scales are taken as float32 as ONNX stores them. ``lo``/``hi``
    default to the output type's range (a folded Relu raises ``lo``)."""
    cnt = np.unique(np.full(1, kernel) if counts is None else np.asarray(counts))
    real = np.float64(np.float32(in_scale)) / np.float64(np.float32(out_scale))
    return make_requant(real / cnt.astype(np.float64), out_zero_point,
                        out_type.lo if lo is None else lo, out_type.hi if hi is None else hi)


def merge_requants(requants: dict[int, Requant]) -> Requant:
    """One requantizer per count (``{count: Requant}``, as the importer's ``Pool`` op holds
    them) → the single :class:`Requant` of :class:`rtl_templates.pool.PoolParams`, ``mult[j]``
    for the j-th smallest count. The shifts are aligned to the largest; that changes no result (the
    float32 rounding of the product is scale invariant, and ``round(x·2**d / 2**(s+d)) =
    round(x / 2**s)``)."""
    items = sorted((int(c), rq) for c, rq in requants.items())
    first = items[0][1]
    for _, rq in items:
        if (rq.zero_point, rq.lo, rq.hi) != (first.zero_point, first.lo, first.hi):
            raise ValueError("the per-count requantizers differ in zero point or clamp")
    shift = max(rq.shift for _, rq in items)
    mult = tuple(int(rq.mult[0]) << (shift - rq.shift) for _, rq in items)
    return dataclasses.replace(first, mult=mult, shift=shift)


# ---------------------------------------------------------------------------- windows

def out_size(h: int, k: int, stride: int, pad: int) -> int:
    return (h + 2 * pad - k) // stride + 1


def image_windows(x: np.ndarray, kh: int, kw: int, stride: int, pad: int,
                  pad_value: int) -> tuple[np.ndarray, np.ndarray]:
    """A NumPy sliding-window generator: images ``x`` [N, H, W, C] → windows
    [N, OH*OW, C, KH*KW] (kernel positions in raster order, pads = ``pad_value``) and the
    number of non-pad positions of each window [OH*OW]."""
    n, h, w, c = x.shape
    xp = np.full((n, h + 2 * pad, w + 2 * pad, c), pad_value, dtype=np.int64)
    xp[:, pad:pad + h, pad:pad + w] = x
    real = np.zeros((h + 2 * pad, w + 2 * pad), dtype=np.int64)
    real[pad:pad + h, pad:pad + w] = 1
    oh, ow = out_size(h, kh, stride, pad), out_size(w, kw, stride, pad)
    win = np.empty((n, oh * ow, c, kh * kw), dtype=np.int64)
    counts = np.empty(oh * ow, dtype=np.int64)
    for i in range(oh):
        for j in range(ow):
            rs, cs = slice(i * stride, i * stride + kh), slice(j * stride, j * stride + kw)
            win[:, i * ow + j] = xp[:, rs, cs].reshape(n, kh * kw, c).transpose(0, 2, 1)
            counts[i * ow + j] = real[rs, cs].sum()
    return win, counts


# ---------------------------------------------------------------------------- grid

@dataclasses.dataclass(frozen=True)
class Cfg:
    kind: str
    c: int
    h: int
    w: int
    kh: int
    kw: int
    stride: int
    pad: int
    pe: int
    in_type: QType
    out_type: QType
    include_pad: bool = False   # avg: ONNX count_include_pad
    same_scale: bool = False    # avg: s_out = s_in (many exact rounding ties)
    relu: bool = False          # avg: clamp at the output zero point

    @property
    def id(self) -> str:
        flags = "".join(f for f, on in (("-cip", self.include_pad),
                                         ("-same", self.same_scale), ("-relu", self.relu)) if on)
        return (f"{self.kind}-c{self.c}-{self.h}x{self.w}-k{self.kh}x{self.kw}-s{self.stride}"
                f"p{self.pad}-pe{self.pe}-{self.in_type.name}-{self.out_type.name}{flags}")

    @property
    def oh(self) -> int:
        return out_size(self.h, self.kh, self.stride, self.pad)

    @property
    def ow(self) -> int:
        return out_size(self.w, self.kw, self.stride, self.pad)

    @property
    def seed(self) -> int:
        return zlib.crc32(self.id.encode())

    @functools.cached_property
    def quant(self) -> tuple[float, int, float, int]:
        """(s_in, z_in, s_out, z_out) as float32 scales."""
        rng = np.random.default_rng(self.seed)
        ti, to = self.in_type, self.out_type
        z_in = int(rng.integers(ti.lo + 32, ti.hi - 32))
        s_in = float(np.float32(rng.uniform(0.005, 0.05)))
        if self.kind == "max":
            return s_in, z_in, s_in, z_in
        if self.relu:
            z_out = int(rng.integers(to.lo, to.lo + 40))
        else:
            z_out = int(rng.integers(to.lo + 64, to.hi - 64))
        s_out = s_in if self.same_scale else float(np.float32(s_in * rng.uniform(0.4, 0.9)))
        return s_in, z_in, s_out, z_out

    @property
    def pad_value(self) -> int:
        return self.in_type.lo if self.kind == "max" else self.quant[1]

    @functools.cached_property
    def counts(self) -> np.ndarray:
        one = np.zeros((1, self.h, self.w, 1), dtype=np.int64)
        return image_windows(one, self.kh, self.kw, self.stride, self.pad, 0)[1]

    @functools.cached_property
    def params(self) -> PoolParams:
        k, pixels = self.kh * self.kw, self.oh * self.ow
        if self.kind == "max":
            return PoolParams("max", self.c, k, self.in_type, self.out_type, self.pe, pixels)
        s_in, z_in, s_out, z_out = self.quant
        counts = None if self.include_pad else self.counts
        rq = avg_requant(k, self.in_type, s_in, z_in, s_out, z_out, self.out_type, counts,
                         lo=z_out if self.relu else None)
        return PoolParams("avg", self.c, k, self.in_type, self.out_type, self.pe, pixels,
                          requant=rq, in_zero_point=z_in, counts=counts)

    def images(self, n: int, seed: int) -> np.ndarray:
        rng = np.random.default_rng(self.seed + seed)
        t = self.in_type
        x = rng.integers(t.lo, t.hi + 1, size=(n, self.h, self.w, self.c))
        if n >= 3:
            x[0], x[1] = t.lo, t.hi
        return x.astype(np.int64)

    def frames(self, n: int, seed: int) -> np.ndarray:
        win, _ = image_windows(self.images(n, seed), self.kh, self.kw, self.stride, self.pad,
                               self.pad_value)
        return windows_to_stream(win, self.pe)


GRID = [
    Cfg("max", 4, 5, 5, 3, 3, 1, 1, 1, INT8, INT8),
    Cfg("max", 6, 6, 6, 2, 2, 2, 0, 3, UINT8, UINT8),
    Cfg("max", 8, 7, 7, 3, 3, 2, 1, 8, INT8, INT8),                     # PE = C
    Cfg("max", 3, 4, 5, 2, 3, 1, 0, 1, UINT8, UINT8),                   # 2x3 kernel
    Cfg("max", 4, 3, 3, 1, 1, 1, 0, 2, INT8, INT8),                     # K = 1
    Cfg("avg", 4, 5, 5, 3, 3, 1, 1, 2, INT8, INT8),                     # counts 4, 6, 9
    Cfg("avg", 6, 6, 6, 3, 3, 2, 1, 3, UINT8, UINT8, include_pad=True),  # pads, count K
    Cfg("avg", 8, 4, 4, 2, 2, 2, 0, 8, INT8, UINT8),                    # no pads: one count
    Cfg("avg", 3, 5, 7, 5, 5, 1, 2, 1, UINT8, INT8),                    # counts 9 .. 25
    Cfg("avg", 2, 6, 6, 3, 3, 1, 1, 2, INT8, INT8, same_scale=True, relu=True),
    Cfg("avg", 12, 3, 3, 3, 3, 1, 1, 4, UINT8, UINT8, same_scale=True),
    Cfg("avg", 4, 4, 6, 3, 2, 1, 1, 1, INT8, INT8, include_pad=True, same_scale=True),
]


def _ids(cfgs):
    return [c.id for c in cfgs]


def _run(cfg: Cfg, x: np.ndarray, simulator: str = "amaranth", **kw):
    p = cfg.params
    return run_block(Pool(p), x, p.in_type, p.pe, p.out_type, p.pe, p.out_elements,
                     simulator=simulator, name="pool_top", **kw)


def _check_outputs(cfg: Cfg, x: np.ndarray, run) -> None:
    p = cfg.params
    want = golden(p, x)
    got = run.frames
    assert got.shape == want.shape
    if not np.array_equal(got, want):
        bad = np.argwhere(got != want)
        f, e = bad[0]
        raise AssertionError(f"{len(bad)} of {want.size} outputs differ; first at frame {f} "
                             f"element {e}: got {got[f, e]}, golden {want[f, e]}")
    per = p.nb * p.pixels
    assert run.result.out_last == [(k % per) == per - 1 for k in range(len(x) * per)]
    assert len(run.result.in_times) == len(x) * p.in_elements // p.pe


def _check_cycles(cfg: Cfg, x: np.ndarray, run) -> None:
    p = cfg.params
    c = cost(p)
    steps = p.pixels * p.kernel * p.nb
    assert c.cycles == steps
    ends = run.frame_ends(p.pixels * p.nb)
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
    x = cfg.frames(N_FRAMES, seed=1)
    y = golden(cfg.params, x[2:])
    assert len(np.unique(y)) >= min(3, y.size)
    run = _run(cfg, x)
    _check_outputs(cfg, x, run)
    _check_cycles(cfg, x, run)


@pytest.mark.sim
@pytest.mark.parametrize("cfg", GRID, ids=_ids(GRID))
def test_stalls_amaranth(cfg: Cfg):
    x = cfg.frames(N_FRAMES, seed=2)
    _check_outputs(cfg, x, _run(cfg, x, stall_in=0.3, stall_out=0.4, seed=3))


@pytest.mark.verilator
def test_verilator_avg_then_max():
    """One Verilator build that holds both kinds: an average pool (int8, PE 2, divisors 4/6/9)
    whose channel-last output feeds a max pool that reads each pixel's NB = 2 channel blocks
    as its K = 2 "kernel positions" (so it takes the maximum over channel blocks): the max
    pool's golden model applies to the average pool's output stream as it is. Checked: bit
    exact, the chain's interval, and its latency composed from the two timing models; then
    random stalls."""
    cfg = GRID[5]
    pa = cfg.params
    pm = PoolParams("max", pa.pe, pa.nb, pa.out_type, pa.out_type, pa.pe, pa.pixels)
    x = cfg.frames(N_FRAMES, seed=1)

    def run(x, **kw):
        r = run_block([Pool(pa), Pool(pm)], x, pa.in_type, pa.pe, pm.out_type, pm.pe,
                      pm.out_elements, simulator="verilator", name="pool_chain_top", **kw)
        assert np.array_equal(r.frames, golden(pm, golden(pa, x)))
        return r

    r = run(x)
    steps = pa.pixels * pa.kernel * pa.nb
    ends = r.frame_ends(pm.pixels)
    assert all(b - a == steps for a, b in zip(ends, ends[1:]))
    t0 = r.result.in_times[0]
    a_first, a_last = timing(pa, t0, t0 + steps - 1)
    _, m_last = timing(pm, a_first, a_last)  # (its first-output estimate assumes dense input)
    assert abs(r.latency - (m_last - t0 + 1)) <= 0.02 * r.latency
    for seed in (1, 2):
        run(cfg.frames(2 * N_FRAMES, seed=10 + seed), stall_in=0.3, stall_out=0.4, seed=seed)


@pytest.mark.parametrize("kind", ["max", "avg"])
def test_output_backpressure_only(kind: str):
    """Slow sink, always-valid source, an output beat on every step (K = 1, PE = C)."""
    cfg = Cfg(kind, 4, 3, 3, 1, 1, 1, 0, 4, INT8, INT8)
    x = cfg.frames(6, seed=4)
    _check_outputs(cfg, x, _run(cfg, x, stall_out=0.75, seed=5))


# ---------------------------------------------------------------------------- semantics

def _qdq_model(cfg: Cfg, n: int):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    s_in, z_in, s_out, z_out = cfg.quant
    code = {INT8: TensorProto.INT8, UINT8: TensorProto.UINT8}
    npt = {INT8: np.int8, UINT8: np.uint8}
    attrs = dict(kernel_shape=[cfg.kh, cfg.kw], strides=[cfg.stride] * 2, pads=[cfg.pad] * 4)
    if cfg.kind == "avg":
        attrs["count_include_pad"] = int(cfg.include_pad)
    op = "MaxPool" if cfg.kind == "max" else "AveragePool"
    g = helper.make_graph(
        [helper.make_node("DequantizeLinear", ["x", "s_in", "z_in"], ["xf"]),
         helper.make_node(op, ["xf"], ["yf"], **attrs),
         helper.make_node("QuantizeLinear", ["yf", "s_out", "z_out"], ["y"])],
        "pool", [helper.make_tensor_value_info("x", code[cfg.in_type],
                                               [n, cfg.c, cfg.h, cfg.w])],
        [helper.make_tensor_value_info("y", code[cfg.out_type], [n, cfg.c, cfg.oh, cfg.ow])],
        [numpy_helper.from_array(np.array(s_in, np.float32), "s_in"),
         numpy_helper.from_array(np.array(z_in, npt[cfg.in_type]), "z_in"),
         numpy_helper.from_array(np.array(s_out, np.float32), "s_out"),
         numpy_helper.from_array(np.array(z_out, npt[cfg.out_type]), "z_out")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    m.ir_version = 9
    onnx.checker.check_model(m, full_check=True)
    return m, npt[cfg.in_type]


def run_ort(model, x: np.ndarray, optimize: bool) -> np.ndarray:
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize
                                   else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    sess = ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0].astype(np.int64)


def exact_avg(acc: np.ndarray, div: np.ndarray, s_in: float, s_out: float, z_out: int,
              lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact rational ``clamp(round_half_even(acc*s_in/(div*s_out)) + z_out)`` and each real
    value's distance from the nearest rounding tie (in output steps). ``acc`` and ``div``
    broadcast; the scales are the float32 values ONNX holds."""
    r = Fraction(float(np.float32(s_in))) / Fraction(float(np.float32(s_out)))
    acc, div = np.broadcast_arrays(np.asarray(acc), np.asarray(div))
    y = np.empty(acc.shape, dtype=np.int64)
    dist = np.empty(acc.shape, dtype=np.float64)
    for i in np.ndindex(acc.shape):
        v = int(acc[i]) * r / int(div[i])
        f = v - (v.numerator // v.denominator)
        dist[i] = abs(float(f - Fraction(1, 2)))
        y[i] = min(max(round(v) + z_out, lo), hi)            # round(): half to even
    return y, dist


def _golden_nchw(cfg: Cfg, images: np.ndarray) -> np.ndarray:
    y = golden(cfg.params, windows_to_stream(
        image_windows(images, cfg.kh, cfg.kw, cfg.stride, cfg.pad, cfg.pad_value)[0], cfg.pe))
    return y.reshape(len(images), cfg.oh, cfg.ow, cfg.c).transpose(0, 3, 1, 2)


#: float32 arithmetic (ORT's, and the golden requantizer's float32 product) may round
#: either way this close to a tie, in output steps (|values| < 2**9 here)
TIE = 1e-4


@pytest.mark.parametrize("cfg", GRID, ids=_ids(GRID))
def test_golden_matches_onnxruntime(cfg: Cfg):
    n = 8
    images = cfg.images(n, seed=20)
    model, npt = _qdq_model(cfg, n)
    x_nchw = images.transpose(0, 3, 1, 2).astype(npt)
    g = _golden_nchw(cfg, images)
    ort_plain = run_ort(model, x_nchw, optimize=False)
    ort_fused = run_ort(model, x_nchw, optimize=True)
    if cfg.kind == "max":
        assert np.array_equal(g, ort_plain) and np.array_equal(g, ort_fused)
        return
    s_in, z_in, s_out, z_out = cfg.quant
    rq = cfg.params.requant
    # exact: sum over the real (non-pad) positions of q - z_in, divided by the ONNX divisor
    win, real = image_windows(images - z_in, cfg.kh, cfg.kw, cfg.stride, cfg.pad, 0)
    acc = win.sum(axis=-1)                                     # [N, pixels, C]
    div = np.full_like(real, cfg.kh * cfg.kw) if cfg.include_pad else real
    y_ex, dist = exact_avg(acc, div[None, :, None], s_in, s_out, z_out, rq.lo, rq.hi)
    to_nchw = lambda a: a.reshape(n, cfg.oh, cfg.ow, cfg.c).transpose(0, 3, 1, 2)  # noqa: E731
    y_ex, dist = to_nchw(y_ex), to_nchw(dist)
    assert np.array_equal(g[dist > TIE], y_ex[dist > TIE])
    for name, o in (("unoptimized", ort_plain), ("QLinearAveragePool", ort_fused)):
        if rq.lo > cfg.out_type.lo:      # the Relu clamp is not in the ORT model
            o = np.maximum(o, rq.lo)
        diff = o != g
        assert np.abs(o - g).max(initial=0) <= 1
        assert np.all(dist[diff] <= TIE), \
            f"ORT ({name}) differs from golden away from a rounding tie: " \
            f"{np.sort(dist[diff])[-5:]}"
        if not cfg.same_scale:
            # unrelated scales: no exact ties, so at most a rare near-tie difference
            assert diff.sum() <= max(1, diff.size // 500), f"{name}: {diff.sum()} differ"


@pytest.mark.parametrize("cfg", [GRID[9], GRID[10]], ids=_ids([GRID[9], GRID[10]]))
def test_tie_statistics(cfg: Cfg):
    """Equal input and output scales with even divisors make exact ties common: the golden
    model rounds them half to even; count how often ORT rounds them otherwise (pytest -s
    prints the numbers)."""
    n = 16
    images = cfg.images(n, seed=30)
    model, npt = _qdq_model(cfg, n)
    g = _golden_nchw(cfg, images)
    rq = cfg.params.requant
    s_in, z_in, s_out, z_out = cfg.quant
    win, real = image_windows(images - z_in, cfg.kh, cfg.kw, cfg.stride, cfg.pad, 0)
    y_ex, dist = exact_avg(win.sum(axis=-1), real[None, :, None], s_in, s_out, z_out,
                           rq.lo, rq.hi)
    to_nchw = lambda a: a.reshape(n, cfg.oh, cfg.ow, cfg.c).transpose(0, 3, 1, 2)  # noqa: E731
    y_ex, dist = to_nchw(y_ex), to_nchw(dist)
    ties = (dist == 0) & (y_ex > rq.lo) & (y_ex < rq.hi)
    assert ties.sum() > 0
    assert np.array_equal(g, y_ex)               # exact ties included: half to even
    x = images.transpose(0, 3, 1, 2).astype(npt)
    msg = [f"{cfg.id}: {ties.sum()} exact ties in {g.size} outputs (z_out={z_out})"]
    for name, opt in (("unoptimized ORT", False), ("QLinearAveragePool", True)):
        o = np.maximum(run_ort(model, x, opt), rq.lo)
        diff = o != g
        assert np.all(dist[diff] == 0), f"{name} differs away from an exact tie"
        msg.append(f"{name} rounds {diff.sum()} of them the other way")
    print("\n" + "; ".join(msg))


def test_params_reject_bad_values():
    mx, av = GRID[0].params, GRID[5].params
    with pytest.raises(ValueError):
        dataclasses.replace(mx, kind="min")
    with pytest.raises(ValueError):
        dataclasses.replace(mx, out_type=UINT8)          # max needs the same type
    with pytest.raises(ValueError):
        dataclasses.replace(mx, requant=av.requant)
    with pytest.raises(ValueError):
        dataclasses.replace(mx, pe=3)
    with pytest.raises(ValueError):
        dataclasses.replace(av, requant=None)
    with pytest.raises(ValueError):
        dataclasses.replace(av, counts=np.ones(3, dtype=np.int64))  # wrong length
    with pytest.raises(ValueError):
        dataclasses.replace(av, counts=np.full(av.pixels, 10))      # > K
    with pytest.raises(ValueError):                                 # 3 counts, 2 multipliers
        dataclasses.replace(av, requant=dataclasses.replace(av.requant, mult=(1, 2)))


def test_merge_requants_equals_avg_requant():
    """The importer's {count: Requant} form, merged, computes exactly what avg_requant's
    shared-shift form computes."""
    cfg = GRID[8]                                        # counts 9 .. 25
    p = cfg.params
    s_in, z_in, s_out, z_out = cfg.quant
    real = np.float64(np.float32(s_in)) / np.float64(np.float32(s_out))
    per = {int(c): make_requant(real / int(c), z_out, cfg.out_type.lo, cfg.out_type.hi)
           for c in p.count_values}
    merged = merge_requants(per)
    assert merged == p.requant
    acc = np.arange(p.acc_bounds[0], p.acc_bounds[1] + 1)
    for j, c in enumerate(p.count_values):
        one = dataclasses.replace(merged, mult=(merged.mult[j],))
        assert np.array_equal(one.apply(acc), per[int(c)].apply(acc))


def test_count_table():
    p = GRID[5].params                                   # 5x5, 3x3 kernel, pad 1
    assert list(p.count_values) == [4, 6, 9]
    assert len(p.requant.mult) == 3 and p.index_bits == 2
    assert p.count_values[p.count_index].tolist() == p.counts.tolist()
    m = np.array(p.requant.mult, dtype=float)
    assert np.allclose(m[0] / m, [1, 6 / 4, 9 / 4], rtol=1e-6)
    assert cost(p).memory_bits >= p.pixels * 2
    one = GRID[6].params                                 # count_include_pad: one count
    assert len(one.count_values) == 1 and cost(one).multipliers == one.pe
