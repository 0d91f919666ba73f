"""Tests of the window-parallel sliding-window generator (rtl_templates/swg_par.py) and of
dilated windows in both generators (rtl_templates/swg.py).

* golden (both generators share it) against an independent reference with dilation: np.pad,
  then every window sliced with explicit loops;
* the window-parallel component on a grid of (C, kernel, stride, pads, dilation, window_par):
  bit-exact against golden over frames back to back, with and without random stalls
  (Amaranth simulator; one configuration in Verilator), and cycle-exact against its cost
  model: the frame interval ``Hp*Wp + OH*OW*(B - 1)`` and the last beat of the first frame
  as :func:`rtl_templates.swg_par.timing` says;
* the standard generator with dilation: RTL == golden, and its cost model (frame interval
  and row schedule) exact, as tests/blocks/test_swg.py checks it without dilation.
"""
from __future__ import annotations

import dataclasses
import functools
import zlib

import numpy as np
import pytest
from amaranth.back import verilog
from amaranth.hdl import Module, Signal, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from hwgen.rtl_templates import swg, swg_par
from hwgen.rtl_templates.axis_top import AxisTop, axis_width
from hwgen.rtl_templates.quant import INT8, UINT8, QType
from hwgen.rtl_templates.swg_par import SWGPar, SWGParParams
from hwgen.sim.base import StreamJob
from hwgen.sim.harness import BlockRun
from hwgen.sim.packing import beats_to_frames, frames_to_beats

INT4 = QType(4, True)

# (H, W, C), kernel, stride, pads (t, l, b, r), dilation, window_par
PAR_GRID = [
    ((6, 6, 3), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 27),   # whole window per beat
    ((6, 6, 3), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 9),    # one window row per beat
    ((5, 7, 1), (3, 3), (2, 2), (0, 1, 2, 0), (1, 1), 3),    # stride 2, one-sided pads
    ((7, 6, 2), (3, 2), (1, 2), (2, 1, 0, 1), (2, 1), 6),    # dilation 2 rows, P = 3 pixels
    ((8, 6, 1), (4, 2), (2, 1), (1, 0, 1, 0), (1, 2), 8),    # 4x2, dilated columns, whole
    ((6, 5, 2), (3, 3), (1, 1), (2, 2, 2, 2), (2, 2), 2),    # P = C: one pixel per beat
    ((5, 6, 3), (2, 2), (1, 1), (0, 0, 0, 0), (1, 1), 4),    # P crossing pixels (4 of 12)
    ((1, 9, 2), (1, 3), (1, 1), (0, 1, 0, 1), (1, 3), 6),    # one row, dilated 1x3
    ((9, 4, 1), (5, 4), (2, 2), (2, 1, 2, 1), (1, 1), 20),   # 10x4-like, P = whole rows
]

# the standard generator with dilation: (H, W, C), kernel, stride, pads, dilation, simd, dw
STD_GRID = [
    ((7, 7, 2), (3, 3), (1, 1), (2, 2, 2, 2), (2, 2), 1, False),
    ((8, 6, 4), (3, 2), (2, 1), (1, 0, 2, 1), (3, 2), 2, False),
    ((6, 7, 2), (2, 3), (1, 2), (0, 0, 0, 0), (2, 2), 2, True),
]


def _pid(c) -> str:
    return "x".join(map(str, c[0])) + f"-k{c[1]}-s{c[2]}-p{c[3]}-d{c[4]}-P{c[5]}"


def _params(c) -> SWGParParams:
    pv = int(np.random.default_rng(zlib.crc32(_pid(c).encode())).integers(-128, 128))
    return SWGParParams(c[0], c[1], c[2], c[3], pv, INT8, c[5], c[4])


def _std_params(c) -> swg.SWGParams:
    return swg.SWGParams(c[0], c[1], c[2], c[3], 3, INT8, simd=c[5], depthwise=c[6],
                         dilation=c[4])


def _frames(shape, qtype: QType, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.integers(qtype.lo, qtype.hi + 1, size=(n,) + tuple(shape)).astype(np.int64)
    x.flat[0], x.flat[1] = qtype.lo, qtype.hi
    return x


def ref_windows(shape, kernel, stride, pads, dilation, pad_value, x) -> np.ndarray:
    """[N, OH*OW*KH*KW*C] in (oh, ow, kh, kw, c) order, by loops over a padded copy."""
    (t, l, b, r), (KH, KW), (SH, SW), (DH, DW) = pads, kernel, stride, dilation
    N, H, W, C = x.shape
    xp = np.pad(x, ((0, 0), (t, b), (l, r), (0, 0)), constant_values=pad_value)
    OH = (H + t + b - (KH - 1) * DH - 1) // SH + 1
    OW = (W + l + r - (KW - 1) * DW - 1) // SW + 1
    out = [[xp[n, oh * SH + kh * DH, ow * SW + kw * DW, c]
            for oh in range(OH) for ow in range(OW) for kh in range(KH) for kw in range(KW)
            for c in range(C)] for n in range(N)]
    return np.array(out, dtype=np.int64).reshape(N, -1)


# ---------------------------------------------------------------------------- golden / params

@pytest.mark.parametrize("c", PAR_GRID, ids=[_pid(c) for c in PAR_GRID])
def test_golden_vs_reference(c):
    p = _params(c)
    x = _frames(p.in_shape, p.qtype, 2, seed=3)
    assert np.array_equal(swg_par.golden(p, x),
                          ref_windows(*c[:5], p.pad_value, x))


def test_std_golden_depthwise_dilated_is_a_permutation():
    c = STD_GRID[2]
    p = _std_params(c)
    x = _frames(p.in_shape, p.qtype, 2, seed=4)
    KH, KW = p.kernel
    C, S = p.in_shape[2], p.simd
    ref = ref_windows(*c[:5], p.pad_value, x).reshape(2, -1, KH * KW, C // S, S)
    assert np.array_equal(swg.golden(p, x).reshape(2, -1),
                          ref.transpose(0, 1, 3, 2, 4).reshape(2, -1))


def test_params_reject_bad_configs():
    ok = dict(in_shape=(4, 4, 3), kernel=(3, 3), stride=(1, 1), pads=(0, 0, 0, 0),
              pad_value=0, qtype=INT8, window_par=9)
    SWGParParams(**ok)
    for bad in [dict(window_par=4), dict(window_par=0), dict(dilation=(0, 1)),
                dict(dilation=(2, 1)), dict(kernel=(5, 3))]:
        with pytest.raises(ValueError):
            SWGParParams(**{**ok, **bad})
    assert SWGParParams(**{**ok, "dilation": (2, 1), "pads": (1, 0, 1, 0)}).out_shape == (2, 2)


def test_cost_is_the_step_walk():
    """The frame interval is one cycle per padded position plus B - 1 per window, and the
    whole-window generator of a 3x32x32 "same" stem takes 34*34 cycles, not 32*32*9."""
    p = SWGParParams((32, 32, 3), (3, 3), (1, 1), (1, 1, 1, 1), 0, UINT8, 27)
    assert swg_par.cost(p).cycles == 34 * 34
    p9 = SWGParParams((32, 32, 3), (3, 3), (1, 1), (1, 1, 1, 1), 0, UINT8, 9)
    assert swg_par.cost(p9).cycles == 34 * 34 + 32 * 32 * 2
    f0, l0 = swg_par.timing(p, 0, 1023)
    f1, l1 = swg_par.timing(p, 100, 100 + 3 * 1023)
    assert l1 > l0 + 100 and f1 >= f0 + 100
    assert swg_par.timing(p, 100, 1123) == (f0 + 100, l0 + 100)


# ---------------------------------------------------------------------------- simulation

def _run(comp, p, x, in_per_beat, out_per_beat, out_beats, sim="amaranth", vl=None, **kw):
    n = len(x)
    beats, last = frames_to_beats(x.reshape(n, -1), p.qtype, in_per_beat)
    job = StreamJob(axis_width(in_per_beat * p.qtype.bits),
                    axis_width(out_per_beat * p.qtype.bits), beats, last, n * out_beats, **kw)
    if sim == "amaranth":
        from hwgen.sim.amaranth_sim import run_amaranth
        res = run_amaranth(AxisTop(comp(), out_beats_per_frame=out_beats), job)
    else:
        from hwgen.sim.verilator import run_verilator
        res = run_verilator(vl(), "swg_par_top", job)
    return BlockRun(beats_to_frames(res.out_beats, p.qtype, out_per_beat, p.out_elems), res)


def _check(p, x, run, golden):
    want = golden(p, x).reshape(len(x), -1)
    assert np.array_equal(run.frames, want), np.argwhere(run.frames != want)[:3]


def _check_stalled(p: SWGParParams, dut, seed_x: int, seed: int):
    """Three frames of ``p`` through ``dut`` (a generator of ``p`` with what surrounds it)
    under random stalls on both sides: RTL == golden."""
    from hwgen.sim.amaranth_sim import run_amaranth  # noqa: PLC0415 (as _run does)
    x = _frames(p.in_shape, p.qtype, 3, seed=seed_x)
    beats, last = frames_to_beats(x.reshape(len(x), -1), p.qtype, p.simd)
    job = StreamJob(axis_width(p.simd * p.qtype.bits), axis_width(p.window_par * p.qtype.bits),
                    beats, last, len(x) * p.out_beats, stall_in=0.3, stall_out=0.4, seed=seed)
    res = run_amaranth(AxisTop(dut, out_beats_per_frame=p.out_beats), job)
    got = beats_to_frames(res.out_beats, p.qtype, p.window_par, p.out_elems)
    _check(p, x, BlockRun(got, res), swg_par.golden)


def _check_par_timing(p: SWGParParams, run: BlockRun):
    c = swg_par.cost(p)
    ends = run.frame_ends(p.out_beats)
    assert [b - a for a, b in zip(ends, ends[1:])] == [c.cycles] * (len(ends) - 1)
    assert ends[0] == swg_par.timing(p, 0, p.in_beats - 1)[1] == c.latency - 1
    if p.beats_per_window == 1 or p.out_beats >= p.padded[0] * p.padded[1]:
        t = run.result.out_times[p.out_beats:]
        # back to back windows leave without a gap within an output row
        OW = p.out_shape[1]
        row = OW * p.beats_per_window
        for r in range(len(t) // row):
            seg = t[r * row:(r + 1) * row]
            gaps = {b - a for a, b in zip(seg, seg[1:])}
            assert max(gaps) <= max(1, p.stride[1]), gaps


@pytest.mark.sim
@pytest.mark.parametrize("c", PAR_GRID, ids=[_pid(c) for c in PAR_GRID])
def test_par_amaranth(c):
    p = _params(c)
    x = _frames(p.in_shape, p.qtype, 4, seed=1)
    run = _run(lambda: SWGPar(p), p, x, p.simd, p.window_par, p.out_beats)
    _check(p, x, run, swg_par.golden)
    _check_par_timing(p, run)
    x = _frames(p.in_shape, p.qtype, 3, seed=2)
    run = _run(lambda: SWGPar(p), p, x, p.simd, p.window_par, p.out_beats, stall_in=0.3,
               stall_out=0.4, seed=zlib.crc32(_pid(c).encode()) % 1000)
    _check(p, x, run, swg_par.golden)


@functools.lru_cache(maxsize=None)
def _par_verilog(c) -> str:
    p = _params(c)
    return verilog.convert(AxisTop(SWGPar(p), out_beats_per_frame=p.out_beats),
                           name="swg_par_top", emit_src=False)


@pytest.mark.verilator
@pytest.mark.parametrize("c", [PAR_GRID[3]], ids=[_pid(PAR_GRID[3])])
def test_par_verilator(c):
    p = _params(c)
    vl = functools.partial(_par_verilog, c)
    x = _frames(p.in_shape, p.qtype, 4, seed=1)
    args = (p, x, p.simd, p.window_par, p.out_beats)
    run = _run(None, *args, sim="verilator", vl=vl)
    _check(p, x, run, swg_par.golden)
    _check_par_timing(p, run)
    run = _run(None, *args, sim="verilator", vl=vl, stall_in=0.3, stall_out=0.4, seed=7)
    _check(p, x, run, swg_par.golden)


@pytest.mark.sim
@pytest.mark.parametrize("c", STD_GRID, ids=[_pid(c) for c in STD_GRID])
def test_std_dilated_amaranth(c):
    p = _std_params(c)
    x = _frames(p.in_shape, p.qtype, 4, seed=5)
    if not p.depthwise:
        assert np.array_equal(swg.golden(p, x).reshape(4, -1),
                              ref_windows(*c[:5], p.pad_value, x))
    run = _run(lambda: swg.SWG(p), p, x, p.simd, p.simd, p.out_beats)
    _check(p, x, run, swg.golden)
    c_ = swg.cost(p)
    ends = run.frame_ends(p.out_beats)
    assert [b - a for a, b in zip(ends, ends[1:])] == [c_.cycles] * 3
    assert c_.cycles == max(p.in_beats, p.out_beats)
    s, e, _, _ = swg.schedule(p, p.buffer_rows, 4)
    row = p.row_out_beats
    t = run.result.out_times
    assert [t[k * row] for k in range(len(s))] == [v + swg.PIPELINE_DEPTH for v in s]
    run = _run(lambda: swg.SWG(p), p, x, p.simd, p.simd, p.out_beats, stall_in=0.3, stall_out=0.4,
               seed=3)
    _check(p, x, run, swg.golden)


# ---------------------------------------------------------------------------- a whole model

@pytest.mark.verilator
def test_digits_cnn_parallel_window_verilator():
    """The digits CNN with its first convolution reading whole windows (SIMD = 9 = KH*KW*C)
    and its second reading 12 of a window's 72 elements per beat (not a divisor of its 8
    channels): RTL == golden on a few frames in the native Verilator simulator, and the
    measured interval is the estimate's."""
    from conftest import EXAMPLES

    from hwgen import api
    from hwgen.dataflow.lower import Folding

    x = np.load(EXAMPLES / "digits_images_test.npz")
    x = x[x.files[0]][:4]
    fold = {"/conv1/Conv": Folding(2, 9), "/conv2/Conv": Folding(1, 12)}
    rep = api.verify(EXAMPLES / "digits_cnn_qdq.onnx", x, fold=fold, target_cycles=512)
    assert rep.ok and rep.rtl_equals_golden
    kinds = {b["name"]: b["block"] for b in rep.compiled.manifest["layers"]}
    assert kinds["/conv1/Conv_swg"] == kinds["/conv2/Conv_swg"] == "swg_par"
    assert rep.sim.interval == pytest.approx(rep.estimate["cycles_per_frame"], rel=0.02)


# ------------------------------------------------------------------ depthwise order

# (H, W, C), kernel, stride, pads, dilation, window_par, depthwise_pe
DW_GRID = [
    ((5, 5, 4), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 6, 2),     # SIMD 3 of PE 2
    ((4, 6, 6), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 54, 6),    # the whole window
    ((6, 5, 3), (2, 2), (1, 1), (0, 1, 1, 0), (2, 1), 4, 1),     # PE 1, dilated rows
]


def _dw_params(c) -> SWGParParams:
    pv = int(np.random.default_rng(zlib.crc32(_pid(c).encode())).integers(-128, 128))
    return SWGParParams(c[0], c[1], c[2], c[3], pv, INT8, c[5], c[4], depthwise_pe=c[6])


@pytest.mark.sim
@pytest.mark.parametrize("c", DW_GRID, ids=[_pid(c) + f"-D{c[6]}" for c in DW_GRID])
def test_par_depthwise_order_amaranth(c):
    """With ``depthwise_pe`` the windows come in the standard generator's depthwise order
    (channel blocks of D, then kernel positions), P elements per beat, at the same timing."""
    p = _dw_params(c)
    x = _frames(p.in_shape, p.qtype, 3, seed=6)
    std = swg.SWGParams(c[0], c[1], c[2], c[3], p.pad_value, INT8, simd=c[6], depthwise=True,
                        dilation=c[4])
    assert np.array_equal(swg_par.golden(p, x), swg.golden(std, x).reshape(3, -1))
    KH, KW = p.kernel
    C, D = p.in_shape[2], c[6]
    ref = ref_windows(*c[:5], p.pad_value, x).reshape(3, -1, KH * KW, C // D, D)
    assert np.array_equal(swg_par.golden(p, x), ref.transpose(0, 1, 3, 2, 4).reshape(3, -1))
    run = _run(lambda: SWGPar(p), p, x, p.simd, p.window_par, p.out_beats)
    _check(p, x, run, swg_par.golden)
    _check_par_timing(p, run)
    run = _run(lambda: SWGPar(p), p, x, p.simd, p.window_par, p.out_beats, stall_in=0.3,
               stall_out=0.4, seed=11)
    _check(p, x, run, swg_par.golden)
    with pytest.raises(ValueError):
        SWGParParams(c[0], c[1], c[2], c[3], 0, INT8, c[5], c[4], depthwise_pe=5)


# ------------------------------------------------------------------ slice-by-slice output

class _SlicedOut(wiring.Component):
    """The generator with ``out_slice_ports``, each slice of its output FIFO read on its own
    ready (all driven by ``o.ready``, as the generator's ``o.ready``, which its credits
    count beats taken by): every slice's
    valid must equal ``o.valid`` in every cycle; from a cycle where one does not on, every
    payload bit leaves inverted (so the frames differ from golden)."""

    def __init__(self, p: SWGParParams):
        self.p = p
        super().__init__({"i": In(stream.Signature(unsigned(p.simd * p.qtype.bits))),
                          "o": Out(stream.Signature(unsigned(p.window_par * p.qtype.bits)))})

    def elaborate(self, platform):
        m = Module()
        m.submodules.g = g = SWGPar(self.p)
        n = len(g.o.ready_slices)
        seen, now = Signal(), Signal()
        m.d.comb += [now.eq(seen | (g.o.valid_slices != g.o.valid.replicate(n))),
                     g.i.payload.eq(self.i.payload), g.i.valid.eq(self.i.valid),
                     self.i.ready.eq(g.i.ready),
                     self.o.payload.eq(g.o.payload ^ now.replicate(len(g.o.payload))),
                     self.o.valid.eq(g.o.valid), g.o.ready.eq(self.o.ready),
                     g.o.ready_slices.eq(self.o.ready.replicate(n))]
        m.d.sync += seen.eq(now)
        return m


@pytest.mark.sim
def test_sliced_output_hands_over_per_slice():
    """A window of 3 beats of 96 bits and one of 1 beat of 216 bits (slices of 32 bits in
    the output FIFO, each written on a valid of its own copy of the control), read slice by
    slice with random stalls: RTL == golden, and every slice's valid is the first's."""
    for c in (PAR_GRID[1], PAR_GRID[0]):
        p = dataclasses.replace(_params(c), out_slice_ports=True)
        assert len(swg_par.out_fifo_slices(p)) > 1
        assert swg_par.slice_ports(_params(c), "o", swg_par.out_fifo_slices(p)) == p
        _check_stalled(p, _SlicedOut(p), seed_x=5, seed=3)


class _FifoThenGenerator(wiring.Component):
    """The FIFO before a generator keeping a copy of its valid per copy of the generator's
    step control, wired to it by ``wiring.connect`` (as the lowering's ``valid_copies``
    face has it)."""

    def __init__(self, p: SWGParParams):
        from hwgen.rtl_templates.fifo import FIFOParams  # noqa: PLC0415

        self.p, n = swg_par.valid_copies(p)
        self.fp = FIFOParams(p.simd * p.qtype.bits, 3, p.in_beats, valid_copies=n)
        super().__init__({"i": In(stream.Signature(unsigned(p.simd * p.qtype.bits))),
                          "o": Out(stream.Signature(unsigned(p.window_par * p.qtype.bits)))})

    def elaborate(self, platform):
        from hwgen.rtl_templates.fifo import StreamFIFO  # noqa: PLC0415

        m = Module()
        m.submodules.f = f = StreamFIFO(self.fp)
        m.submodules.g = g = SWGPar(self.p)
        wiring.connect(m, f.o, g.i)
        m.d.comb += [f.i.payload.eq(self.i.payload), f.i.valid.eq(self.i.valid),
                     self.i.ready.eq(f.i.ready), self.o.payload.eq(g.o.payload),
                     self.o.valid.eq(g.o.valid), g.o.ready.eq(self.o.ready)]
        return m


@pytest.mark.sim
def test_step_copies_read_copies_of_the_fifos_valid():
    """A generator whose step control has copies reads a copy of its input FIFO's valid per
    copy (``i.valid_copies``, the FIFO's ``valid_copies``): frames back to back under random
    stalls on both sides, RTL == golden (``wiring.connect`` checks the port is as wide as
    the FIFO's copies)."""
    for c in (PAR_GRID[1], PAR_GRID[0]):
        p = _params(c)
        q, n = swg_par.valid_copies(p)
        assert q.in_valid_copies and n == p.plan.control_copies > 0
        _check_stalled(p, _FifoThenGenerator(p), seed_x=7, seed=4)
