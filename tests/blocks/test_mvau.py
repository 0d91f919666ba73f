"""Grid tests of the matrix–vector unit (rtl_templates/mvau.py) in both simulators.

For a grid of matrix shapes, PE, SIMD, int8/uint8 inputs and outputs, per-tensor and
per-channel requantization (with and without a Relu-like clamp, weight zero points and
large biases) the MVAU wrapped in :class:`rtl_templates.axis_top.AxisTop` must

* be bit-exact against :func:`rtl_templates.mvau.golden` (``np.array_equal``);
* match the cost model: the steady-state interval between frames equals ``cost(p).cycles``
  and the latency of an idle unit equals ``cost(p).latency`` (within 2 %), and the unit
  accepts one input beat per cycle during neuron fold 0;
* lose or duplicate nothing under random valid/ready stalls on both streams.

Some configurations snap the multipliers so that the requantizer's two roundings (to 24
significant bits, then the final shift) often meet exact halves, and one hand-built unit has
accumulators where the round-to-24-bits tie alone decides the output.

Every configuration is deterministic (seeded), so the Verilog of a configuration is the same
from run to run and Verilator builds are reused from the cache (``$HWGEN_CACHE`` or
``~/.cache/hwgen/verilator``). The Verilator subset shares one build per configuration
between its correctness, cycle and stall tests.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import zlib

import numpy as np
import pytest
from amaranth.back import verilog

from hwgen.rtl_templates.axis_top import AxisTop, axis_width
from hwgen.rtl_templates.mvau import MVAU, MVAUParams, cost, golden
from hwgen.rtl_templates.quant import INT8, UINT8, QType, Requant, make_requant
from hwgen.sim.amaranth_sim import run_amaranth
from hwgen.sim.base import StreamJob
from hwgen.sim.packing import beats_to_frames, frames_to_beats
from hwgen.sim.verilator import run_verilator

TOP_NAME = "mvau_top"


# ---------------------------------------------------------------------------- params

def random_params(mh: int, mw: int, pe: int, simd: int, in_type: QType, out_type: QType, *,
                  per_channel: bool = False, relu: bool = False, weight_zp: bool = False,
                  big_bias: bool = False, ties: bool = False, seed: int = 0) -> MVAUParams:
    """Random but meaningful MVAU parameters.

    Weights are int8 values, or (``weight_zp``) uint8 values minus a weight zero point, so in
    [-255, 255]. Biases are of the size of a typical dot product, or (``big_bias``) up to
    ±2**20 like int32 biases of a real model. The requantizer multipliers are calibrated on
    random inputs so that the outputs spread over the output range instead of saturating:
    per tensor one scalar, per channel MH values spread over ~100x. ``relu`` clamps at the
    zero point from below.

    ``ties`` snaps the multipliers to float32 values that make the requantizer's roundings
    hit exact halves often: a mantissa ``2**23 + 2**t`` (t matched to the accumulator size)
    makes about half the products tie in the round-to-24-bits step, and (per channel, every
    other channel) a power of two makes the final shift tie whenever ``acc`` is an odd
    multiple of half its step.
    """
    rng = np.random.default_rng(seed)
    if weight_zp:
        # a zero point away from 128, so that the weights really leave the int8 range
        w_zp = int(rng.integers(0, 64) if rng.random() < 0.5 else rng.integers(192, 256))
        weights = rng.integers(0, 256, size=(mh, mw)) - w_zp
        # make sure the extremes of the range occur
        weights.flat[0], weights.flat[-1] = -w_zp, 255 - w_zp
    elif ties:  # small weights: small accumulators, so the final shift is small too
        weights = rng.integers(-4, 5, size=(mh, mw))
    else:
        weights = rng.integers(-128, 128, size=(mh, mw))
    weights = weights.astype(np.int64)

    # typical size of a dot product: sqrt(MW) * rms(w) * rms(x)
    x_rms = math.sqrt((in_type.lo ** 2 + in_type.lo * in_type.hi + in_type.hi ** 2) / 3)
    typ_dot = max(1.0, math.sqrt(mw) * float(np.sqrt(np.mean(weights.astype(float) ** 2)))
                  * x_rms)
    if big_bias:
        bias = rng.integers(-(1 << 20), 1 << 20, size=mh)
        bias[0] = (1 << 20) - 1
        if mh > 1:
            bias[-1] = -(1 << 20)
    else:
        bias = rng.integers(-int(typ_dot), int(typ_dot) + 1, size=mh)
    bias = bias.astype(np.int64)

    lo, hi = out_type.lo, out_type.hi
    span = hi - lo
    if relu:  # as after a real Relu: the zero point near the bottom, clamp at it
        zp = int(rng.integers(lo, lo + span // 4 + 1))
        lo = zp
    else:
        zp = int(rng.integers(lo + span // 4, hi - span // 4 + 1))

    # a placeholder requantizer, just to learn the accumulator width
    dummy = Requant(mult=(1,), shift=0, zero_point=zp, lo=lo, hi=hi)
    p0 = MVAUParams(weights=weights, bias=bias, requant=dummy, in_type=in_type,
                    out_type=out_type, pe=pe, simd=simd)

    # calibrate: typical |acc| on random inputs (per channel and overall)
    xs = rng.integers(in_type.lo, in_type.hi + 1, size=(256, mw))
    acc = xs @ weights.T + bias                                   # [256, MH]
    room = max(hi - zp, zp - lo, 1)                               # output steps available
    if per_channel:
        typ = np.percentile(np.abs(acc), 75, axis=0) + 1.0        # [MH]
        spread = np.logspace(-1.3, 0.7, mh) if mh > 1 else np.ones(1)
        rng.shuffle(spread)                                       # spans 100x
        mult = room / typ * spread
    else:
        typ = np.array([float(np.percentile(np.abs(acc), 75)) + 1.0])
        mult = room / typ[0]
    if ties:
        snapped = []
        for c, (mc, tc) in enumerate(zip(np.atleast_1d(mult), typ)):
            e = int(np.floor(np.log2(mc)))             # mc in [2**e, 2**(e+1))
            if per_channel and c % 2:
                snapped.append(2.0 ** e)               # final-shift ties
            else:                                      # round-to-24-bit ties
                t = max(0, min(22, int(np.floor(np.log2(tc))) - 1))
                snapped.append((2 ** 23 + 2 ** t) / 2 ** 24 * 2.0 ** (e + 1))
        mult = np.array(snapped) if per_channel else snapped[0]
    rq = make_requant(mult, zp, lo, hi)
    return dataclasses.replace(p0, requant=rq)


def random_frames(p: MVAUParams, n: int, seed: int) -> np.ndarray:
    """``n`` random input vectors; the first two are all-lo and all-hi (extreme sums)."""
    rng = np.random.default_rng(seed + 1000)
    x = rng.integers(p.in_type.lo, p.in_type.hi + 1, size=(n, p.mw))
    if n >= 4:
        x[0, :], x[1, :] = p.in_type.lo, p.in_type.hi
    return x.astype(np.int64)


# ---------------------------------------------------------------------------- grid

@dataclasses.dataclass(frozen=True)
class Cfg:
    mh: int
    mw: int
    pe: int
    simd: int
    in_type: QType
    out_type: QType
    per_channel: bool = False
    relu: bool = False
    weight_zp: bool = False
    big_bias: bool = False
    ties: bool = False

    @property
    def id(self) -> str:
        flags = "".join(f for f, on in (("-pc", self.per_channel), ("-relu", self.relu),
                                         ("-wzp", self.weight_zp), ("-bigb", self.big_bias),
                                         ("-ties", self.ties))
                        if on)
        return (f"{self.mh}x{self.mw}-pe{self.pe}-simd{self.simd}-"
                f"{self.in_type.name}-{self.out_type.name}{flags}")

    @functools.cached_property
    def params(self) -> MVAUParams:
        # a seed derived deterministically from the configuration (hash() is salted)
        return random_params(self.mh, self.mw, self.pe, self.simd, self.in_type,
                             self.out_type, per_channel=self.per_channel, relu=self.relu,
                             weight_zp=self.weight_zp, big_bias=self.big_bias, ties=self.ties,
                             seed=zlib.crc32(self.id.encode()))


# (MH, MW, PE, SIMD): PE=SIMD=1; PE=MH (one output beat per vector, NF=1); SIMD=MW (SF=1);
# MH=1; MW=1; odd factors; NF=1 and SF=1 together.
GRID = [
    Cfg(1, 1, 1, 1, UINT8, UINT8),                                    # MH=MW=1, NF=SF=1
    Cfg(4, 6, 1, 1, UINT8, INT8, per_channel=True),                   # PE=SIMD=1
    Cfg(8, 8, 2, 4, UINT8, INT8, ties=True),
    Cfg(16, 12, 4, 3, INT8, UINT8, per_channel=True, relu=True),
    Cfg(10, 32, 5, 8, UINT8, UINT8, weight_zp=True),
    Cfg(6, 8, 6, 8, INT8, INT8, per_channel=True, big_bias=True),     # NF=1 and SF=1
    Cfg(3, 5, 3, 1, UINT8, UINT8, relu=True),                         # PE=MH, SIMD=1
    Cfg(32, 16, 1, 16, INT8, UINT8, per_channel=True, weight_zp=True),  # SIMD=MW, NF=32
    Cfg(12, 20, 4, 5, UINT8, INT8, big_bias=True),
    Cfg(1, 24, 1, 6, INT8, INT8, per_channel=True),                   # MH=1
    Cfg(9, 1, 3, 1, INT8, UINT8, per_channel=True, relu=True),        # MW=1
    Cfg(5, 7, 1, 7, UINT8, INT8, per_channel=True, big_bias=True, weight_zp=True),
    Cfg(8, 12, 4, 4, UINT8, INT8, per_channel=True, ties=True),
]

# The Verilator subset: one build each (~15-30 s cold, cached afterwards), shared by the
# three Verilator tests. Together with the design of test_requant_round24_ties_decide
# (a fourth build) they cover PE and SIMD > 1, NF=SF=1, SIMD=MW with NF=32, int8/uint8 in
# and out, per-tensor/per-channel, weight zero point, big biases and rounding ties.
VL_GRID = [GRID[2], GRID[5], GRID[7]]
#: a test run in both simulators: each run carries its simulator's marker
SIMULATORS = [pytest.param("amaranth", marks=pytest.mark.sim),
              pytest.param("verilator", marks=pytest.mark.verilator)]

N_FRAMES = 6


def _ids(cfgs):
    return [c.id for c in cfgs]


# ---------------------------------------------------------------------------- running

def _top(p: MVAUParams) -> AxisTop:
    return AxisTop(MVAU(p), out_beats_per_frame=p.nf)


_VERILOG: dict[str, str] = {}


def _verilog(p: MVAUParams, key: str) -> str:
    """Verilog of the wrapped unit, converted once per configuration ``key``."""
    if key not in _VERILOG:
        _VERILOG[key] = verilog.convert(_top(p), name=TOP_NAME, emit_src=False)
    return _VERILOG[key]


def _job(p: MVAUParams, x: np.ndarray, **kw) -> StreamJob:
    beats, last = frames_to_beats(x, p.in_type, p.simd)
    return StreamJob(in_width=axis_width(p.simd * p.in_type.bits),
                     out_width=axis_width(p.pe * p.out_type.bits), in_beats=beats,
                     in_last=last, n_out_beats=len(x) * p.nf, **kw)


def _run(sim: str, cfg: Cfg, job: StreamJob):
    return _run_params(sim, cfg.params, cfg.id, job)


def _run_params(sim: str, p: MVAUParams, key: str, job: StreamJob):
    if sim == "amaranth":
        return run_amaranth(_top(p), job)
    return run_verilator(_verilog(p, key), TOP_NAME, job)


def _check_outputs(p: MVAUParams, x: np.ndarray, res) -> None:
    n = len(x)
    assert len(res.out_beats) == n * p.nf
    got = beats_to_frames(res.out_beats, p.out_type, p.pe, p.mh)
    want = golden(p, x)
    if not np.array_equal(got, want):
        bad = np.argwhere(got != want)
        f, c = bad[0]
        raise AssertionError(
            f"{len(bad)} of {want.size} outputs differ; first at frame {f} channel {c}: "
            f"got {got[f, c]}, golden {want[f, c]}\ngot:\n{got}\ngolden:\n{want}")
    assert res.out_last == [(k % p.nf) == p.nf - 1 for k in range(n * p.nf)]
    # every input beat was consumed exactly once
    assert len(res.in_times) == n * p.sf


def _assert_meaningful(p: MVAUParams, y: np.ndarray) -> None:
    """The golden outputs must not be (nearly) all saturated, else the test is weak."""
    rq = p.requant
    inside = (y > rq.lo) & (y < rq.hi)
    assert inside.mean() >= 0.2, f"only {inside.mean():.0%} of the outputs are unsaturated"
    if y.size >= 6:
        assert len(np.unique(y)) >= 3, f"outputs hardly vary: {np.unique(y)}"


def _n_frames(cfg: Cfg) -> int:
    # tiny units get more frames so that enough outputs are checked; tie configurations
    # need many for the (rarer) final-shift ties
    return 128 if cfg.ties else max(N_FRAMES, -(-48 // cfg.mh))


def _tie_counts(p: MVAUParams, x: np.ndarray) -> tuple[int, int]:
    """How many requantizations of ``golden(p, x)`` round an exact half, in the
    round-to-24-bits step and in the final shift (before clamping)."""
    acc = x @ p.weights.T + p.bias
    mult = p.mult_per_channel()
    t24 = tfin = 0
    for row in acc:
        for a, m in zip(row.tolist(), mult):
            mag = abs(a * m)
            d = max(0, mag.bit_length() - 24)
            if d and mag & ((1 << d) - 1) == 1 << (d - 1):
                t24 += 1
            q, r = mag >> d, mag & ((1 << d) - 1)
            kept = (q + (1 if r > (1 << d >> 1) or (d and r == 1 << (d - 1) and q & 1)
                         else 0)) << d
            k = p.requant.shift
            if k and kept & ((1 << k) - 1) == 1 << (k - 1):
                tfin += 1
    return t24, tfin


# ---------------------------------------------------------------------------- tests

@pytest.mark.sim
@pytest.mark.parametrize("cfg", GRID, ids=_ids(GRID))
def test_golden_amaranth(cfg: Cfg):
    p = cfg.params
    x = random_frames(p, _n_frames(cfg), seed=1)
    _assert_meaningful(p, golden(p, x))
    if cfg.ties:
        t24, tfin = _tie_counts(p, x)
        assert t24 >= 20, f"only {t24} round-to-24-bit ties"
        if cfg.per_channel:
            assert tfin >= 10, f"only {tfin} final-shift ties"
    _check_outputs(p, x, _run("amaranth", cfg, _job(p, x)))


@pytest.mark.verilator
@pytest.mark.parametrize("cfg", VL_GRID, ids=_ids(VL_GRID))
def test_golden_verilator(cfg: Cfg):
    p = cfg.params
    x = random_frames(p, _n_frames(cfg), seed=1)
    _assert_meaningful(p, golden(p, x))
    _check_outputs(p, x, _run("verilator", cfg, _job(p, x)))


def _check_cycles(p: MVAUParams, x: np.ndarray, res) -> None:
    n, steps = len(x), p.nf * p.sf
    c = cost(p)
    assert c.cycles == steps
    last = [res.out_times[(f + 1) * p.nf - 1] for f in range(n)]
    intervals = [b - a for a, b in zip(last, last[1:])]
    latency = last[0] - res.in_times[0] + 1
    # the criterion: within 2 % of the cost model
    for iv in intervals:
        assert abs(iv - c.cycles) <= 0.02 * c.cycles, \
            f"frame interval {iv} cycles, cost model {c.cycles} (all intervals {intervals})"
    assert abs(latency - c.latency) <= 0.02 * c.latency, \
        f"latency {latency} cycles, cost model {c.latency}"
    # input acceptance: one beat per cycle during neuron fold 0, then none for folds 1..NF-1
    t0 = res.in_times[0]
    want_in = [t0 + f * steps + s for f in range(n) for s in range(p.sf)]
    assert res.in_times == want_in, f"input transfers at {res.in_times}, expected {want_in}"


@pytest.mark.parametrize("sim", SIMULATORS)
@pytest.mark.parametrize("cfg", VL_GRID, ids=_ids(VL_GRID))
def test_cycles_match_cost_model(cfg: Cfg, sim: str):
    p = cfg.params
    x = random_frames(p, 8, seed=2)
    res = _run(sim, cfg, _job(p, x))
    _check_outputs(p, x, res)
    _check_cycles(p, x, res)


@pytest.mark.parametrize("cfg", [c for c in GRID if c not in VL_GRID],
                         ids=_ids([c for c in GRID if c not in VL_GRID]))
def test_cycles_match_cost_model_rest(cfg: Cfg):
    """The same cycle checks for the configurations only simulated by Amaranth."""
    p = cfg.params
    x = random_frames(p, 8, seed=2)
    res = _run("amaranth", cfg, _job(p, x))
    _check_outputs(p, x, res)
    _check_cycles(p, x, res)


STALL_GRID = [GRID[1], GRID[3], GRID[5], GRID[7], GRID[10]]


@pytest.mark.sim
@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("cfg", STALL_GRID, ids=_ids(STALL_GRID))
def test_stalls_amaranth(cfg: Cfg, seed: int):
    p = cfg.params
    # enough frames that the output FIFO fills up again and again
    x = random_frames(p, 4 * _n_frames(cfg), seed=10 + seed)
    res = _run("amaranth", cfg, _job(p, x, stall_in=0.3, stall_out=0.5, seed=seed))
    _check_outputs(p, x, res)


@pytest.mark.verilator
@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("cfg", VL_GRID, ids=_ids(VL_GRID))
def test_stalls_verilator(cfg: Cfg, seed: int):
    p = cfg.params
    x = random_frames(p, 3 * _n_frames(cfg), seed=10 + seed)
    res = _run("verilator", cfg, _job(p, x, stall_in=0.3, stall_out=0.5, seed=seed))
    _check_outputs(p, x, res)


# ---------------------------------------------------------------------------- rounding

def critical_params() -> tuple[MVAUParams, np.ndarray]:
    """An MVAU whose accumulators hit requantizer inputs where the round-to-24-bits tie
    decides the output.

    With a 24-bit mantissa ``m`` where ``3m = K*2**(f+1) + 2**f + e`` (e = ±1) and
    ``A = 3*2**(d-1)``, the product ``A*m`` has 25 significant bits ending in ...1: a
    round-to-24-bits tie.

    * e = +1: the upper 24 bits ``q = K*2**f + 2**(f-1)`` are even, so half to even keeps
      them, and the final shift by ``d + f`` sees ``K + 1/2`` exactly: K rounded half to
      even. Rounding the first tie up instead gives K + 1 for even K.
    * e = -1: ``q = K*2**f + 2**(f-1) - 1`` is odd, so half to even rounds it up, again to
      ``K + 1/2`` exactly. Truncating the first tie instead gives K for odd K.

    Channels come in pairs with bias +A and -A; the first weight column is 1 (the others
    -1..1), so a zero input vector yields ``acc = bias`` exactly and other vectors values
    around it. Returns the parameters and the expected outputs for a zero input vector.
    """
    # (f, K, d, e): e=+1 with even K tells half-even from half-up, e=-1 with odd K from
    # truncation; the others are controls
    combos = [(17, 96, 9, 1), (17, 99, 8, 1), (17, 126, 12, 1), (18, 50, 10, 1),
              (17, 101, 7, -1), (17, 125, 11, -1), (18, 51, 13, -1), (18, 60, 6, -1)]
    mults, bias, zero_out = [], [], []
    for f, k, d, e in combos:
        three_m = k * 2 ** (f + 1) + 2 ** f + e
        assert three_m % 3 == 0
        m = three_m // 3
        assert 2 ** 23 <= m < 2 ** 25 // 3
        a = 3 * 2 ** (d - 1)
        y = k + (k % 2)                       # K + 1/2 rounded half to even
        for sign in (1, -1):
            mults.append(m / 2.0 ** (d + f))  # exact in float32: 24-bit mantissa
            bias.append(sign * a)
            zero_out.append(sign * y)
    mh, mw = len(mults), 4
    rng = np.random.default_rng(99)
    weights = rng.integers(-1, 2, size=(mh, mw))
    weights[:, 0] = 1
    dummy = Requant(mult=(1,), shift=0, zero_point=0, lo=INT8.lo, hi=INT8.hi)
    p0 = MVAUParams(weights=weights.astype(np.int64), bias=np.array(bias, dtype=np.int64),
                    requant=dummy, in_type=INT8, out_type=INT8, pe=4, simd=2)
    rq = make_requant(np.array(mults), 0, INT8.lo, INT8.hi)
    return dataclasses.replace(p0, requant=rq), np.array(zero_out, dtype=np.int64)


@pytest.mark.parametrize("sim", SIMULATORS)
def test_requant_round24_ties_decide(sim: str):
    p, zero_out = critical_params()
    # the construction is right: golden gives K rounded half to even for acc = ±A
    x0 = np.zeros((1, p.mw), dtype=np.int64)
    assert np.array_equal(golden(p, x0)[0], zero_out)
    rng = np.random.default_rng(5)
    x = rng.integers(INT8.lo, INT8.hi + 1, size=(40, p.mw))
    x[::2] = 0                                # every other vector: exactly the critical acc
    x[1::4, 0] = rng.integers(-2, 3, size=len(x[1::4]))  # its neighbours
    res = _run_params(sim, p, "round24-ties", _job(p, x))
    _check_outputs(p, x, res)


@pytest.mark.sim
def test_output_backpressure_only_amaranth():
    """A slow sink (ready 1 cycle in 4) with an always-valid source: the credit counter must
    stop the issue stage in time (a unit with PE=MH and SF=1 completes a beat every step)."""
    cfg = GRID[5]
    p = cfg.params
    x = random_frames(p, 24, seed=7)
    res = _run("amaranth", cfg, _job(p, x, stall_out=0.75, seed=5))
    _check_outputs(p, x, res)


def test_params_reject_bad_folding():
    p = GRID[2].params  # 8x8
    for pe, simd in [(3, 1), (1, 3), (16, 1), (1, 16), (0, 1), (1, 0), (5, 4), (2, 6)]:
        with pytest.raises(ValueError):
            dataclasses.replace(p, pe=pe, simd=simd)
    # sanity: valid foldings are accepted
    for pe, simd in [(1, 1), (8, 8), (4, 2)]:
        assert dataclasses.replace(p, pe=pe, simd=simd).nf == 8 // pe


def test_params_reject_wrong_multiplier_count():
    p = GRID[2].params
    rq = dataclasses.replace(p.requant, mult=(1, 2, 3))
    with pytest.raises(ValueError):
        dataclasses.replace(p, requant=rq)


def test_random_params_cover_the_requested_ranges():
    """The helper itself: weight-zero-point weights reach beyond int8, big biases reach
    ±2**20, per-channel multipliers span ~100x, Relu clamps at the zero point."""
    wzp = GRID[4].params
    assert wzp.weights.max() - wzp.weights.min() == 255 and wzp.w_bits == 9
    assert wzp.weights.min() < -128 or wzp.weights.max() > 127
    big = GRID[5].params
    assert np.abs(big.bias).max() >= (1 << 20) - 1 and big.acc_bits >= 22
    pc = GRID[7].params
    m = np.array(pc.requant.mult, dtype=float)
    assert len(m) == pc.mh and m.max() / m.min() > 20
    relu = GRID[3].params
    assert relu.requant.lo == relu.requant.zero_point
    assert len(GRID[2].params.requant.mult) == 1


# Per-channel multipliers in a ROM of their own, read by the requantizer where its product
# needs them (requant.LateMults): deep enough for block RAM, so read a cycle early and
# registered once more, for the tiled product (SF = 1) and the sequential one (SF = 8).
LATE_GRID = [Cfg(512, 4, 1, 4, UINT8, INT8, per_channel=True),
             Cfg(320, 16, 2, 2, INT8, UINT8, per_channel=True, big_bias=True)]


@pytest.mark.parametrize("cfg", LATE_GRID, ids=_ids(LATE_GRID))
def test_late_multipliers_from_block_ram(cfg: Cfg):
    from hwgen.rtl_templates.requant import RequantPipeline, late_mult, late_mult_registered
    p = cfg.params
    rq = p.requant
    seq = RequantPipeline.sequential(rq, p.acc_bits, p.sf)
    assert late_mult(rq) and seq == (p.sf > 1)
    table = np.asarray(p.mult_per_channel()).reshape(p.nf, p.pe)
    assert late_mult_registered(table, rq.mult_bits, seq)
    x = random_frames(p, 3, seed=2)
    _assert_meaningful(p, golden(p, x))
    res = _run("verilator", cfg, _job(p, x))
    _check_outputs(p, x, res)
    _check_cycles(p, x, res)


# A weight ROM pinned to block RAM and wider than the tiles one address drives
# (memory.ROM_ADDRESS_TILES): stored in pieces, each read through its own copy of the
# address counter.
DEEP = Cfg(80, 240, 4, 8, INT8, INT8, per_channel=True)


@pytest.mark.verilator
def test_deep_weight_rom_in_pieces():
    p = DEEP.params
    assert p.nf * p.sf == 600 and len(p.weight_slices) == 2 == p.plan.rom_copies
    x = random_frames(p, 3, seed=4)
    _assert_meaningful(p, golden(p, x))
    res = _run("verilator", DEEP, _job(p, x))
    _check_outputs(p, x, res)
    _check_cycles(p, x, res)
    v = _verilog(p, DEEP.id)
    assert "widx_addr1" in v and "widx_addr2" not in v


# An input buffer in block RAM (64 words of 32 bits) beside weights in block RAM: its read
# data and the stream word are registered apart and selected a cycle later
# (MVAUPlan.ibuf_apart), so the buffer's register can be the tile's output register.
APART = Cfg(8, 256, 4, 4, INT8, INT8)


@pytest.mark.verilator
def test_input_buffer_in_block_ram_registered_apart():
    p = APART.params
    assert p.weights_in_bram and p.nf == 2 and p.sf == 64 and p.plan.ibuf_apart
    x = random_frames(p, 4, seed=6)
    _assert_meaningful(p, golden(p, x))
    res = _run("verilator", APART, _job(p, x))
    _check_outputs(p, x, res)
    _check_cycles(p, x, res)
    for seed in (1, 2):
        res = _run("verilator", APART, _job(p, x, stall_in=0.3, stall_out=0.5, seed=seed))
        _check_outputs(p, x, res)
    v = _verilog(p, APART.id)
    assert "x0b_0" in v and "x0s_0" in v and "use_stream2_0" in v
