"""Tests of the sliding-window generator (rtl_templates/swg.py).

* ``golden`` against independent references: ``np.pad`` + direct window slicing in loops, a
  float convolution through the window matrix against a direct convolution written with
  loops, depthwise convolution and max pooling through the depthwise order;
* the component, wrapped in :class:`rtl_templates.axis_top.AxisTop`, on a grid of shapes, kernels
  (1×1, 1×3, 2×2, 3×3, 5×5), strides 1–3, symmetric/asymmetric/one-sided pads, SIMD (1, C,
  a divisor in between), signed/unsigned types, standard/depthwise order: bit-exact against
  ``golden`` over several frames back to back, with and without random stalls (Amaranth
  simulator; a subset in Verilator too);
* the cost model: the steady-state frame interval and the latency equal ``cost()`` (the test
  criterion is 2 %; the model is in fact cycle-exact, which is checked too: every output
  row's first and last beat leave when :func:`rtl_templates.swg.schedule` says), the
  throughput bound ``max(input beats, output beats)`` per frame is reached, and the unit
  sustains one output beat per cycle when it is output-bound.
"""
from __future__ import annotations

import dataclasses
import functools
import re
import zlib

import numpy as np
import pytest
from amaranth.back import verilog

from hwgen.rtl_templates import fifo, swg
from hwgen.rtl_templates.axis_top import AxisTop, Chain, axis_width
from hwgen.rtl_templates.quant import INT8, UINT8, QType
from hwgen.rtl_templates.swg import PIPELINE_DEPTH, SWG, SWGParams, cost, golden, schedule, timing
from hwgen.sim.base import StreamJob
from hwgen.sim.harness import BlockRun
from hwgen.sim.packing import beats_to_frames, frames_to_beats

INT4 = QType(4, True)
UINT5 = QType(5, False)


# ---------------------------------------------------------------------------- grid

@dataclasses.dataclass(frozen=True)
class Cfg:
    shape: tuple          # (H, W, C)
    kernel: tuple
    stride: tuple
    pads: tuple           # (top, left, bottom, right)
    qtype: QType
    simd: int = 1
    depthwise: bool = False
    pad_value: int | None = None   # None: a random value of the type

    @property
    def id(self) -> str:
        h, w, c = self.shape
        return (f"{h}x{w}x{c}-k{self.kernel[0]}x{self.kernel[1]}-s{self.stride[0]}x"
                f"{self.stride[1]}-p{''.join(map(str, self.pads))}-simd{self.simd}-"
                f"{self.qtype.name}{'-dw' if self.depthwise else ''}")

    @functools.cached_property
    def params(self) -> SWGParams:
        pv = self.pad_value
        if pv is None:
            rng = np.random.default_rng(zlib.crc32(self.id.encode()))
            pv = int(rng.integers(self.qtype.lo, self.qtype.hi + 1))
        return SWGParams(self.shape, self.kernel, self.stride, self.pads, pv, self.qtype,
                         simd=self.simd, depthwise=self.depthwise)


GRID = [
    # 3x3 "same" conv, SIMD a divisor of C
    Cfg((6, 6, 4), (3, 3), (1, 1), (1, 1, 1, 1), INT8, simd=2, pad_value=0),
    # 3x3 "valid" conv, SIMD 1 (frames overlap: the buffer holds 2*KH rows)
    Cfg((5, 6, 2), (3, 3), (1, 1), (0, 0, 0, 0), UINT8, simd=1),
    # 2x2/2 max pooling, SIMD = C, depthwise order, pad value = type minimum
    Cfg((6, 6, 4), (2, 2), (2, 2), (0, 0, 0, 0), INT8, simd=4, depthwise=True,
        pad_value=-128),
    # 1x1 kernel: pass-through
    Cfg((4, 5, 4), (1, 1), (1, 1), (0, 0, 0, 0), UINT8, simd=4),
    # 1x1 kernel, stride 2, pads on the bottom/right only: subsampling with padding
    Cfg((7, 6, 2), (1, 1), (2, 2), (0, 0, 1, 1), INT8, simd=1),
    # non-square 1x3 kernel, stride (1, 2), pads left/right
    Cfg((4, 7, 4), (1, 3), (1, 2), (0, 1, 0, 1), INT4, simd=2),
    # 3x3 stride 2, asymmetric pads, depthwise, SIMD 1 with C = 3
    Cfg((6, 6, 3), (3, 3), (2, 2), (1, 0, 2, 1), UINT8, simd=1, depthwise=True),
    # stride 3, pads on the left only
    Cfg((7, 5, 2), (3, 3), (3, 3), (0, 2, 0, 0), INT8, simd=2),
    # 5x5 kernel larger than the 3x3 input, pads 2 all round
    Cfg((3, 3, 2), (5, 5), (1, 1), (2, 2, 2, 2), INT8, simd=1),
    # 5x5 stride 2 with asymmetric pads, depthwise SIMD = C
    Cfg((5, 6, 2), (5, 5), (2, 2), (2, 1, 2, 3), UINT5, simd=2, depthwise=True),
    # 2x2 stride 1 pads top/right only, SIMD 3 of 6, depthwise
    Cfg((5, 5, 6), (2, 2), (1, 1), (1, 0, 0, 1), INT8, simd=3, depthwise=True),
    # 2 rows only, 3x3 "same"
    Cfg((2, 6, 2), (3, 3), (1, 1), (1, 1, 1, 1), UINT8, simd=2),
    # rectangular stride (2, 1), no pads, int4
    Cfg((6, 5, 4), (3, 3), (2, 1), (0, 0, 0, 0), INT4, simd=2),
    # 1-D: one row, 1x3 kernel, stride 1, pads 1 on both sides, depthwise
    Cfg((1, 8, 2), (1, 3), (1, 1), (0, 1, 0, 1), INT8, simd=1, depthwise=True),
    # stride larger than the kernel (rows and columns skipped), pads at the top only
    Cfg((7, 7, 2), (2, 2), (3, 3), (2, 0, 0, 0), UINT8, simd=1),
]

# One Verilator build each: padding + overlap of frames, pooling, 5x5 kernel larger than
# the input, stride 3 with one-sided pads.
VL_GRID = [GRID[0], GRID[2], GRID[8], GRID[7]]

N_FRAMES = 3
N_FRAMES_TIMING = 4


def _ids(cfgs):
    return [c.id for c in cfgs]


def _frames(p: SWGParams, n: int, seed: int) -> np.ndarray:
    """[n, H, W, C] random values; frame 0 contains the type's extremes."""
    rng = np.random.default_rng(seed)
    x = rng.integers(p.qtype.lo, p.qtype.hi + 1, size=(n,) + p.in_shape)
    x.flat[0], x.flat[1] = p.qtype.lo, p.qtype.hi
    return x.astype(np.int64)


# ---------------------------------------------------------------------------- references

def windows(p: SWGParams, x: np.ndarray) -> np.ndarray:
    """The golden frames as [N, OH, OW, window elements]."""
    return golden(p, x).reshape(len(x), *p.out_shape, -1)


def ref_windows(p: SWGParams, x: np.ndarray) -> np.ndarray:
    """Independent reference: np.pad, then slice every window with explicit loops."""
    (t, l, b, r), (KH, KW), (SH, SW) = p.pads, p.kernel, p.stride
    N, H, W, C = x.shape
    xp = np.pad(x, ((0, 0), (t, b), (l, r), (0, 0)), constant_values=p.pad_value)
    OH = (H + t + b - KH) // SH + 1
    OW = (W + l + r - KW) // SW + 1
    out = np.zeros((N, OH, OW, KH * KW * C), dtype=np.int64)
    for n in range(N):
        for oh in range(OH):
            for ow in range(OW):
                win = xp[n, oh * SH:oh * SH + KH, ow * SW:ow * SW + KW, :]   # [KH, KW, C]
                assert win.shape == (KH, KW, C)
                if p.depthwise:
                    vals = [win[kh, kw, cb * p.simd + ci] for cb in range(C // p.simd)
                            for kh in range(KH) for kw in range(KW) for ci in range(p.simd)]
                else:
                    vals = [win[kh, kw, c] for kh in range(KH) for kw in range(KW)
                            for c in range(C)]
                out[n, oh, ow] = vals
    return out


def _x_at(p: SWGParams, x, n, h, w, c):
    """Input value at (h, w) of the unpadded map, pad_value outside."""
    H, W, _ = p.in_shape
    return x[n, h, w, c] if 0 <= h < H and 0 <= w < W else p.pad_value


def direct_conv(p: SWGParams, x: np.ndarray, wt: np.ndarray) -> np.ndarray:
    """Float convolution with loops; ``wt`` [OC, KH, KW, C]."""
    (t, l, _, _), (KH, KW), (SH, SW) = p.pads, p.kernel, p.stride
    N = x.shape[0]
    OH, OW = p.out_shape
    y = np.zeros((N, OH, OW, wt.shape[0]))
    for n in range(N):
        for oh in range(OH):
            for ow in range(OW):
                for oc in range(wt.shape[0]):
                    acc = 0.0
                    for kh in range(KH):
                        for kw in range(KW):
                            for c in range(p.in_shape[2]):
                                acc += wt[oc, kh, kw, c] * _x_at(p, x, n, oh * SH - t + kh,
                                                                 ow * SW - l + kw, c)
                    y[n, oh, ow, oc] = acc
    return y


# ---------------------------------------------------------------------------- golden

@pytest.mark.parametrize("cfg", GRID, ids=_ids(GRID))
def test_golden_vs_reference(cfg: Cfg):
    p = cfg.params
    x = _frames(p, 2, seed=3)
    g = windows(p, x)
    assert g.shape == (2,) + p.out_shape + (p.window_elems,)
    assert np.array_equal(g, ref_windows(p, x))


def test_golden_random_params_vs_reference():
    rng = np.random.default_rng(11)
    checked = 0
    while checked < 60:
        H, W = (int(v) for v in rng.integers(1, 7, size=2))
        C = int(rng.choice([1, 2, 3, 4, 6]))
        simd = int(rng.choice([d for d in range(1, C + 1) if C % d == 0]))
        kernel = tuple(int(v) for v in rng.integers(1, 6, size=2))
        stride = tuple(int(v) for v in rng.integers(1, 4, size=2))
        pads = tuple(int(v) for v in rng.integers(0, 4, size=4))
        try:
            p = SWGParams((H, W, C), kernel, stride, pads, int(rng.integers(-8, 8)), INT8,
                          simd=simd, depthwise=bool(rng.integers(0, 2)))
        except ValueError:
            continue
        x = _frames(p, 2, seed=checked)
        assert np.array_equal(windows(p, x), ref_windows(p, x)), p
        checked += 1


@pytest.mark.parametrize("cfg", [c for c in GRID if not c.depthwise],
                         ids=_ids([c for c in GRID if not c.depthwise]))
def test_golden_window_matrix_is_a_convolution(cfg: Cfg):
    """windows @ W.reshape(OC, KH*KW*C).T equals a direct convolution (float weights)."""
    p = cfg.params
    x = _frames(p, 2, seed=5)
    wt = np.random.default_rng(6).normal(size=(3,) + p.kernel + (p.in_shape[2],))
    y = windows(p, x).astype(float) @ wt.reshape(3, -1).T
    assert np.allclose(y, direct_conv(p, x, wt))


@pytest.mark.parametrize("cfg", [c for c in GRID if c.depthwise],
                         ids=_ids([c for c in GRID if c.depthwise]))
def test_golden_depthwise_order(cfg: Cfg):
    """Depthwise order: per channel block, KH*KW consecutive beats of SIMD channels. A
    depthwise convolution and a max pooling computed from it match direct loops."""
    p = cfg.params
    (t, l, _, _), (KH, KW), (SH, SW) = p.pads, p.kernel, p.stride
    C, S = p.in_shape[2], p.simd
    x = _frames(p, 2, seed=7)
    g = windows(p, x).reshape(2, *p.out_shape, C // S, KH * KW, S)   # (cb, k, ci)
    per_ch = np.swapaxes(g, -1, -2).reshape(2, *p.out_shape, C, KH * KW)
    wt = np.random.default_rng(8).normal(size=(C, KH * KW))
    dw = (per_ch * wt).sum(axis=-1)
    mx = per_ch.max(axis=-1)
    OH, OW = p.out_shape
    for n in range(2):
        for oh in range(OH):
            for ow in range(OW):
                for c in range(C):
                    vals = [_x_at(p, x, n, oh * SH - t + kh, ow * SW - l + kw, c)
                            for kh in range(KH) for kw in range(KW)]
                    assert np.isclose(dw[n, oh, ow, c], np.dot(wt[c], vals))
                    assert mx[n, oh, ow, c] == max(vals)
    # and it is a permutation of the standard order
    std = windows(dataclasses.replace(p, depthwise=False), x)
    std = std.reshape(2, *p.out_shape, KH * KW, C // S, S).transpose(0, 1, 2, 4, 3, 5)
    assert np.array_equal(std.reshape(2, *p.out_shape, -1), windows(p, x))


def test_golden_one_by_one_is_subsampling():
    p = SWGParams((7, 6, 2), (1, 1), (2, 2), (0, 0, 1, 1), 5, INT8)
    x = _frames(p, 2, seed=9)
    xp = np.pad(x, ((0, 0), (0, 1), (0, 1), (0, 0)), constant_values=5)
    assert np.array_equal(windows(p, x), xp[:, ::2, ::2, :])


# ---------------------------------------------------------------------------- params / cost

def test_params_reject_bad_configs():
    ok = dict(in_shape=(4, 4, 4), kernel=(3, 3), stride=(1, 1), pads=(0, 0, 0, 0),
              pad_value=0, qtype=INT8)
    SWGParams(**ok)
    for bad in [dict(simd=3), dict(simd=0), dict(kernel=(5, 3)), dict(kernel=(3, 6)),
                dict(kernel=(0, 1)), dict(stride=(0, 1)), dict(pads=(0, 0, -1, 0)),
                dict(pads=(0, 0, 0)), dict(pad_value=128), dict(pad_value=-1, qtype=UINT8),
                dict(in_shape=(0, 4, 4))]:
        with pytest.raises(ValueError):
            SWGParams(**{**ok, **bad})
    # a kernel larger than the input is fine with enough padding
    assert SWGParams(**{**ok, "kernel": (5, 6), "pads": (1, 1, 1, 1)}).out_shape == (2, 1)


def test_cost_model_reaches_the_throughput_bound():
    """For many random layers (and some big ones) the chosen buffer reaches
    max(input beats, output beats) per frame exactly; the model stays cheap to evaluate."""
    rng = np.random.default_rng(12)
    n = 0
    while n < 300:
        H, W = (int(v) for v in rng.integers(1, 11, size=2))
        C = int(rng.choice([1, 2, 4]))
        try:
            p = SWGParams((H, W, C), tuple(int(v) for v in rng.integers(1, 7, size=2)),
                          tuple(int(v) for v in rng.integers(1, 4, size=2)),
                          tuple(int(v) for v in rng.integers(0, 4, size=4)), 0, INT8,
                          simd=int(rng.choice([d for d in (1, 2, 4) if C % d == 0])))
        except ValueError:
            continue
        c = cost(p)
        assert c.cycles == max(p.in_beats, p.out_beats), p
        assert p.kernel[0] <= p.buffer_rows <= 2 * H + 2 * p.kernel[0] + p.stride[0] + 4
        n += 1
    for shape, k, s, pads, rows in [((32, 32, 64), (3, 3), (1, 1), (1, 1, 1, 1), 4),
                                    ((32, 32, 64), (3, 3), (1, 1), (0, 0, 0, 0), 6),
                                    ((64, 64, 32), (2, 2), (2, 2), (0, 0, 0, 0), 4),
                                    ((224, 224, 3), (7, 7), (2, 2), (3, 3, 3, 3), 9)]:
        p = SWGParams(shape, k, s, pads, 0, UINT8, simd=1)
        c = cost(p)
        assert p.buffer_rows == rows
        assert c.cycles == max(p.in_beats, p.out_beats)
        assert c.memory_bits >= rows * shape[1] * shape[2] * 8


def test_cost_fields():
    p = GRID[0].params   # 6x6x4, 3x3 same, SIMD 2
    c = cost(p)
    R = p.buffer_rows
    assert R == 4
    assert c.memory_bits > R * 6 * 4 * 8 and c.multipliers == 0 and c.registers > 0
    assert c.cycles == p.out_beats == 36 * 9 * 2
    assert c.latency == timing(p, 0, p.in_beats - 1)[1] + 1


def test_timing_slow_input():
    """A slower input (spread over more cycles) never makes the output earlier, the output
    waits for the last input row it needs, and shifting the input shifts the output."""
    for cfg in GRID:
        p = cfg.params
        n = p.in_beats
        f0, l0 = timing(p, 0, n - 1)
        f1, l1 = timing(p, 0, 3 * (n - 1))
        f2, l2 = timing(p, 100, 100 + n - 1)
        assert f1 >= f0 and l1 >= l0
        # the last input beat the frame's last output row needs arrives at 3*k
        k = (p.row_needs()[-1][1] + 1) * p.row_in_beats - 1
        assert l1 > 3 * k + PIPELINE_DEPTH
        assert (f2, l2) == (f0 + 100, l0 + 100)
        assert l0 - f0 + 1 >= p.out_beats


# ---------------------------------------------------------------------------- simulation

def _top(p: SWGParams) -> AxisTop:
    return AxisTop(SWG(p), out_beats_per_frame=p.out_beats)


@functools.lru_cache(maxsize=None)
def _verilog(cfg: Cfg) -> str:
    return verilog.convert(_top(cfg.params), name="swg_top", emit_src=False)


def _run(cfg: Cfg, x: np.ndarray, sim: str = "amaranth", **kw) -> BlockRun:
    p = cfg.params
    n = len(x)
    width = axis_width(p.simd * p.qtype.bits)
    beats, last = frames_to_beats(x.reshape(n, -1), p.qtype, p.simd)
    job = StreamJob(width, width, beats, last, n * p.out_beats, **kw)
    if sim == "amaranth":
        from hwgen.sim.amaranth_sim import run_amaranth
        res = run_amaranth(_top(p), job)
    else:
        from hwgen.sim.verilator import run_verilator
        res = run_verilator(_verilog(cfg), "swg_top", job)
    return BlockRun(beats_to_frames(res.out_beats, p.qtype, p.simd, p.out_elems), res)


def _check_outputs(p: SWGParams, x: np.ndarray, run: BlockRun) -> None:
    n = len(x)
    res = run.result
    assert len(res.out_beats) == n * p.out_beats
    assert len(res.in_times) == n * p.in_beats
    want = golden(p, x).reshape(n, -1)
    got = run.frames
    if not np.array_equal(got, want):
        bad = np.argwhere(got != want)
        f, k = bad[0]
        raise AssertionError(f"{len(bad)} of {want.size} outputs differ; first at frame {f} "
                             f"element {k}: got {got[f, k]}, golden {want[f, k]}")
    assert res.out_last == [(k % p.out_beats) == p.out_beats - 1
                            for k in range(n * p.out_beats)]


def _check_timing(p: SWGParams, run: BlockRun) -> None:
    res = run.result
    n = len(run.frames)
    c = cost(p)
    assert c.cycles == max(p.in_beats, p.out_beats)
    # the criterion: within 2 % of the cost model
    assert abs(run.interval - c.cycles) <= 0.02 * c.cycles, \
        f"interval {run.interval}, model {c.cycles}"
    assert abs(run.latency - c.latency) <= 0.02 * c.latency, \
        f"latency {run.latency}, model {c.latency}"
    # ... and in fact exact: every frame interval, the latency ...
    ends = run.frame_ends(p.out_beats)
    assert [b - a for a, b in zip(ends, ends[1:])] == [c.cycles] * (n - 1)
    assert run.latency == c.latency
    assert res.in_times[0] == 0
    # ... and the first and last beat of every output row
    s, e, _, _ = schedule(p, p.buffer_rows, n)
    row = p.row_out_beats
    t = res.out_times
    assert [t[k * row] for k in range(len(s))] == [v + PIPELINE_DEPTH for v in s]
    assert [t[(k + 1) * row - 1] for k in range(len(s))] == [v + PIPELINE_DEPTH for v in e]
    # the bottleneck side runs without a gap from frame 1 on
    if p.out_beats >= p.in_beats:
        t1 = t[p.out_beats:]
        assert all(b - a == 1 for a, b in zip(t1, t1[1:])), "output beats with gaps"
    if p.in_beats >= p.out_beats:
        ti = res.in_times
        assert all(b - a == 1 for a, b in zip(ti, ti[1:])), "input beats with gaps"


@pytest.mark.sim
@pytest.mark.parametrize("cfg", GRID, ids=_ids(GRID))
def test_amaranth(cfg: Cfg):
    p = cfg.params
    x = _frames(p, N_FRAMES_TIMING, seed=1)
    run = _run(cfg, x)
    _check_outputs(p, x, run)
    _check_timing(p, run)


@pytest.mark.sim
@pytest.mark.parametrize("cfg", GRID, ids=_ids(GRID))
def test_amaranth_stalls(cfg: Cfg):
    p = cfg.params
    x = _frames(p, N_FRAMES, seed=2)
    run = _run(cfg, x, stall_in=0.3, stall_out=0.4, seed=zlib.crc32(cfg.id.encode()) % 1000)
    _check_outputs(p, x, run)


@pytest.mark.sim
def test_amaranth_output_backpressure_only():
    """A slow sink (ready 1 cycle in 4), source always valid: the credit counter must stop
    the reader in time and the writer must wait for the buffer."""
    cfg = GRID[3]   # 1x1 pass-through, SIMD = C: a window per beat
    p = cfg.params
    x = _frames(p, 4, seed=4)
    _check_outputs(p, x, _run(cfg, x, stall_out=0.75, seed=5))


@pytest.mark.sim
def test_sliced_input_reads_each_slice_on_its_own_ready():
    """A FIFO of three 32-bit slices before a generator of 96-bit beats, joined as a sliced
    stream through both blocks' ``slice_ports`` faces: each slice is read on its own copy of
    the generator's ready register; with random stalls the windows equal golden (a copy out
    of step with the others would take a slice's word early or late)."""
    p0 = dataclasses.replace(Cfg((5, 4, 12), (3, 3), (1, 1), (1, 1, 1, 1), INT8,
                                 simd=12).params)
    fp0 = fifo.FIFOParams(96, 4, p0.in_beats)
    widths = fp0.slice_widths
    assert widths == [32, 32, 32]
    fp, p = fifo.slice_ports(fp0, "o", widths), swg.slice_ports(p0, "i", widths)
    assert (fp.slice_ports, p.ready_copies) == (True, 3)
    assert swg.slice_ports(p0, "o", widths) is None
    chain = Chain([fifo.StreamFIFO(fp), SWG(p)])
    text = verilog.convert(chain, name="sliced", emit_src=False)
    assert len(set(re.findall(r"reg take_c_(\d+) ", text))) == 3
    x = _frames(p, N_FRAMES, seed=7)
    beats, last = frames_to_beats(x.reshape(len(x), -1), p.qtype, p.simd)
    from hwgen.sim.amaranth_sim import run_amaranth
    job = StreamJob(96, 96, beats, last, len(x) * p.out_beats, stall_in=0.3,
                    stall_out=0.4, seed=11)
    res = run_amaranth(AxisTop(chain, out_beats_per_frame=p.out_beats), job)
    run = BlockRun(beats_to_frames(res.out_beats, p.qtype, p.simd, p.out_elems), res)
    _check_outputs(p, x, run)


@pytest.mark.verilator
@pytest.mark.parametrize("cfg", VL_GRID, ids=_ids(VL_GRID))
def test_verilator(cfg: Cfg):
    p = cfg.params
    x = _frames(p, N_FRAMES_TIMING, seed=1)
    run = _run(cfg, x, sim="verilator")
    _check_outputs(p, x, run)
    _check_timing(p, run)
    x = _frames(p, 2 * N_FRAMES, seed=2)
    for seed in (1, 2):
        run = _run(cfg, x, sim="verilator", stall_in=0.3, stall_out=0.4, seed=seed)
        _check_outputs(p, x, run)
