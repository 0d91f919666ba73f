"""The blocks of the elementwise operators, on their own: ``chanmul`` (feature map × a vector
held for the frame), ``bcast`` (the vector repeated over the pixels), ``affine`` (per-channel
affine requantizer) and ``upsample`` (nearest, integer factors).

For each: RTL == golden (``np.array_equal``) in Amaranth's simulator at several foldings,
with and without random stalls; stall-free, the measured interval and latency equal the cost
and timing models. (``tests/dataflow/test_elementwise_ops.py`` runs all of them in one model in the
native Verilator simulator.)
"""
from __future__ import annotations

import numpy as np
import pytest
from amaranth.hdl import Module, Signal, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from hwgen.rtl_templates.affine import Affine, AffineParams
from hwgen.rtl_templates.affine import cost as affine_cost
from hwgen.rtl_templates.affine import golden as affine_golden
from hwgen.rtl_templates.bcast import Bcast, BcastParams
from hwgen.rtl_templates.bcast import cost as bcast_cost
from hwgen.rtl_templates.bcast import golden as bcast_golden
from hwgen.rtl_templates.chanmul import ChanMul, ChanMulParams
from hwgen.rtl_templates.chanmul import cost as chanmul_cost
from hwgen.rtl_templates.chanmul import golden as chanmul_golden
from hwgen.rtl_templates.quant import INT8, UINT8, QType, make_requant
from hwgen.rtl_templates.upsample import Upsample, UpsampleParams
from hwgen.rtl_templates.upsample import cost as up_cost
from hwgen.rtl_templates.upsample import golden as up_golden
from hwgen.sim.harness import run_block

pytestmark = pytest.mark.sim


class VectorThenMap(wiring.Component):
    """Test harness: one input stream carrying, per frame, the vector's beats and then the
    feature map's, split onto ``chanmul``'s two inputs."""

    def __init__(self, p: ChanMulParams):
        assert p.x_type.bits == p.s_type.bits
        self.p = p
        w = p.pe * p.x_type.bits
        super().__init__({"i": In(stream.Signature(unsigned(w))),
                          "o": Out(stream.Signature(unsigned(p.pe * p.out_type.bits)))})

    def elaborate(self, platform):
        p = self.p
        m = Module()
        m.submodules.dut = dut = ChanMul(p)
        n = p.vec_beats + p.x_beats
        k = Signal(range(n + 1))
        vec = k < p.vec_beats
        m.d.comb += [dut.i1.payload.eq(self.i.payload), dut.i0.payload.eq(self.i.payload),
                     dut.i1.valid.eq(self.i.valid & vec), dut.i0.valid.eq(self.i.valid & ~vec),
                     self.i.ready.eq(vec & dut.i1.ready | ~vec & dut.i0.ready)]
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += k.eq((k + 1) % n)
        wiring.connect(m, dut.o, wiring.flipped(self.o))
        return m


def _chanmul(t: QType, out: QType, c: int, pixels: int, pe: int) -> ChanMulParams:
    rq = make_requant(np.float32(0.0173), out.lo + 9 if not out.signed else -3, out.lo, out.hi)
    return ChanMulParams(t, t, out, zx=t.lo + 7 if not t.signed else 2,
                         zs=t.lo + 11 if not t.signed else -5, rq=rq, channels=c,
                         pixels=pixels, pe=pe)


def _chanmul_frames(p: ChanMulParams, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = p.x_type
    return rng.integers(t.lo, t.hi + 1, (n, p.channels * (p.pixels + 1)))


def _chanmul_golden(p, x):
    return chanmul_golden(p, x[:, p.channels:], x[:, :p.channels])


CHANMUL = [(UINT8, UINT8, 8, 9, 1), (INT8, INT8, 8, 4, 2), (UINT8, INT8, 6, 5, 3),
           (INT8, UINT8, 4, 1, 4)]


@pytest.mark.parametrize("t,out,c,px,pe", CHANMUL,
                         ids=[f"{a.name}-{b.name}-c{c}-px{px}-pe{pe}"
                              for a, b, c, px, pe in CHANMUL])
def test_chanmul_golden_and_cycles(t, out, c, px, pe):
    p = _chanmul(t, out, c, px, pe)
    x = _chanmul_frames(p, 4, seed=c + px)
    run = run_block(VectorThenMap(p), x, t, pe, out, pe, c * px)
    assert np.array_equal(run.frames, _chanmul_golden(p, x))
    k = chanmul_cost(p)
    assert run.interval == k.cycles == p.vec_beats + p.x_beats
    assert run.latency == k.latency


def test_chanmul_under_stalls():
    p = _chanmul(INT8, UINT8, 6, 4, 2)
    x = _chanmul_frames(p, 5, seed=1)
    run = run_block(VectorThenMap(p), x, INT8, 2, UINT8, 2, 24, stall_in=0.4, stall_out=0.4,
                    seed=2)
    assert np.array_equal(run.frames, _chanmul_golden(p, x))


BCAST = [(UINT8, 8, 3, 1), (INT8, 6, 4, 3), (UINT8, 4, 1, 4)]


@pytest.mark.parametrize("t,c,px,pe", BCAST, ids=[f"{a.name}-c{c}-px{px}-pe{pe}"
                                                 for a, c, px, pe in BCAST])
def test_bcast_golden_and_cycles(t, c, px, pe):
    p = BcastParams(t, c, px, pe)
    x = np.random.default_rng(c).integers(t.lo, t.hi + 1, (4, c))
    run = run_block(Bcast(p), x, t, pe, t, pe, c * px)
    assert np.array_equal(run.frames, bcast_golden(p, x))
    k = bcast_cost(p)
    assert run.interval == k.cycles
    assert run.latency == k.latency
    stalled = run_block(Bcast(p), x, t, pe, t, pe, c * px, stall_in=0.5, stall_out=0.5, seed=3)
    assert np.array_equal(stalled.frames, bcast_golden(p, x))


def _affine(t: QType, out: QType, c: int, px: int, pe: int) -> AffineParams:
    rng = np.random.default_rng(c + pe)
    mult = tuple(int(v) for v in rng.integers(-(1 << 20), 1 << 20, c))
    off = tuple(int(v) for v in rng.integers(-(1 << 26), 1 << 26, c))
    return AffineParams(t, out, mult, off, 18, out.lo + 2, out.hi - 3, px, pe)


AFFINE = [(UINT8, UINT8, 4, 6, 1), (INT8, INT8, 6, 3, 2), (INT8, UINT8, 16, 1, 4),
          (UINT8, INT8, 3, 2, 3)]


@pytest.mark.parametrize("t,out,c,px,pe", AFFINE, ids=[f"{a.name}-{b.name}-c{c}-px{px}-pe{pe}"
                                                      for a, b, c, px, pe in AFFINE])
def test_affine_golden_and_cycles(t, out, c, px, pe):
    p = _affine(t, out, c, px, pe)
    x = np.random.default_rng(px).integers(t.lo, t.hi + 1, (4, c * px))
    run = run_block(Affine(p), x, t, pe, out, pe, c * px)
    assert np.array_equal(run.frames, affine_golden(p, x))
    assert len(np.unique(run.frames)) > 8
    k = affine_cost(p)
    assert run.interval == k.cycles
    assert run.latency == k.latency
    stalled = run_block(Affine(p), x, t, pe, out, pe, c * px, stall_in=0.5, stall_out=0.5,
                        seed=4)
    assert np.array_equal(stalled.frames, affine_golden(p, x))


UPSAMPLE = [(UINT8, 2, 3, 2, 2, 3, 1), (INT8, 4, 2, 3, 3, 1, 2), (UINT8, 3, 1, 1, 1, 2, 3)]


@pytest.mark.parametrize("t,c,h,w,fh,fw,pe", UPSAMPLE,
                         ids=[f"{a.name}-c{c}-{h}x{w}-x{fh}x{fw}-pe{pe}"
                              for a, c, h, w, fh, fw, pe in UPSAMPLE])
def test_upsample_golden_and_cycles(t, c, h, w, fh, fw, pe):
    p = UpsampleParams(t, c, h, w, fh, fw, pe)
    x = np.random.default_rng(c + h).integers(t.lo, t.hi + 1, (4, c * h * w))
    n_out = c * h * w * fh * fw
    run = run_block(Upsample(p), x, t, pe, t, pe, n_out)
    assert np.array_equal(run.frames, up_golden(p, x))
    k = up_cost(p)
    assert run.interval == k.cycles
    assert run.latency == k.latency
    stalled = run_block(Upsample(p), x, t, pe, t, pe, n_out, stall_in=0.5, stall_out=0.5,
                        seed=5)
    assert np.array_equal(stalled.frames, up_golden(p, x))
