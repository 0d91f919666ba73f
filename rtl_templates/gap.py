"""Global average pooling (GlobalAveragePool; ReduceMean over the spatial axes), folded by PE.

Stream contract
    ``i``: a channel-last feature map of ``pixels`` (H*W) pixels, PE channels per beat,
    ``NB = C/PE`` beats per pixel (element ``ci`` of beat ``cb`` is channel ``cb*PE + ci``).
    ``o``: one vector of C channels per frame, NB beats of PE channels.
    One input beat per cycle: ``pixels*NB`` cycles per frame (input bound).

Semantics (ONNX QDQ: DequantizeLinear → GlobalAveragePool → QuantizeLinear)::

    acc[c] = sum_pixels q[pixel, c] - pixels * z_in
    y[c]   = requant(acc[c]),   multiplier float32(s_in / s_out / pixels)

The requantizer may also be per channel (C multipliers).

Hardware
    C accumulators live in a RAM of NB words of PE lanes (the input cycles through the
    channel blocks once per pixel), updated by read-modify-write: the word of channel block
    ``cb`` is read when a beat is taken (cycle t), the beat added in t+1 and written back in
    t+1. A read never meets the write of its own word (that write is of the previous channel
    block), except for NB = 1: that one word is a register, and back-to-back updates see each
    other. The RAM and the per-channel multiplier ROM follow ``memory``'s policy. The first
    pixel of a frame adds to 0 instead of the RAM.
    During the last pixel the sums go on, one output beat per input beat:
    t+2: sum   t+3: add -pixels*z_in, multiplier   t+4: multiply; round half to even,
    zero point, clamp → output FIFO. A credit counter (only consulted in the last pixel)
    keeps the FIFO from overflowing; ``valid`` on ``o`` never depends on ``ready``.

Cost
    ``cycles = pixels*NB``, ``latency = cycles + pipeline_depth(p)``; PE multipliers of
    ``acc_bits × mult_bits``; memory: accumulators ``C*acc_bits``, per-channel multipliers
    ``C*mult_bits`` (if per channel), output FIFO ``9*PE*out_bits``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from hwgen.rtl_templates import output_stage
from hwgen.rtl_templates import resources as res
from hwgen.rtl_templates.block import Example, FoldSpace, Port, divisors, register_block
from hwgen.rtl_templates.cost import Cost
from hwgen.rtl_templates.memory import ram, rom
from hwgen.rtl_templates.pipeline import Loop, counter_bits
from hwgen.rtl_templates.quant import QType, Requant, make_requant, signed_width
from hwgen.rtl_templates.requant import LANE_FIT, RequantPipeline
from hwgen.rtl_templates.resources import merge_fits, unsigned_muls
from hwgen.rtl_templates.words import lanes, pack_word

#: cycles from taking the last input beat of a channel block to its output transfer
#: cycles to the requantizer's input plus the output stage's (the requantizer's own
#: stages come on top: :func:`pipeline_depth`)
BASE_DEPTH = 2 + output_stage.latency(registered=True)


def spacing(p: GAPParams) -> int:
    """Fewest cycles between two sums reaching the requantizer: the channel blocks of the
    last pixel follow each other; with one block, a frame apart."""
    return p.pixels if p.nb == 1 else 1


def pipeline_depth(p: GAPParams) -> int:
    """Cycles from the last step of an output beat to that beat's output transfer."""
    return BASE_DEPTH + RequantPipeline.depth(p.requant, p.acc_bits, spacing=spacing(p))


# ---------------------------------------------------------------------------- params

@dataclass(frozen=True, eq=False)
class GAPParams:
    """Everything that defines one global-average-pooling unit."""
    channels: int            # C
    pixels: int              # H*W pixels averaged per frame
    requant: Requant         # per tensor (1 multiplier) or per channel (C)
    in_type: QType
    out_type: QType
    pe: int = 1
    in_zero_point: int = 0

    def __post_init__(self):
        if self.channels < 1 or self.pixels < 1:
            raise ValueError("channels and pixels must be positive")
        if self.pe < 1 or self.channels % self.pe:
            raise ValueError(f"PE={self.pe} does not divide the {self.channels} channels")
        if len(self.requant.mult) not in (1, self.channels):
            raise ValueError("requantizer multipliers must be per tensor or per channel")
        if not self.in_type.lo <= self.in_zero_point <= self.in_type.hi:
            raise ValueError(f"input zero point {self.in_zero_point} outside {self.in_type}")

    @property
    def nb(self) -> int:
        return self.channels // self.pe

    @property
    def in_elements(self) -> int:
        return self.pixels * self.channels

    @property
    def out_elements(self) -> int:
        return self.channels

    @property
    def bias(self) -> int:
        return -self.pixels * self.in_zero_point

    @property
    def acc_bounds(self) -> tuple[int, int]:
        n, t, z = self.pixels, self.in_type, self.in_zero_point
        return min(n * t.lo, n * (t.lo - z), 0), max(n * t.hi, n * (t.hi - z), 0)

    @property
    def acc_bits(self) -> int:
        return signed_width(*self.acc_bounds)

    def mult_per_channel(self) -> list[int]:
        m = list(self.requant.mult)
        return m * self.channels if len(m) == 1 else m


# ---------------------------------------------------------------------------- golden

def golden(p: GAPParams, x: np.ndarray) -> np.ndarray:
    """Integer semantics: ``x`` is [..., pixels*C] channel-last; returns [..., C]."""
    x = np.asarray(x, dtype=np.int64)
    x = x.reshape(*x.shape[:-1], p.pixels, p.channels)
    return p.requant.apply(x.sum(axis=-2) + p.bias, channel_axis=-1)


# ---------------------------------------------------------------------------- cost

def cost(p: GAPParams) -> Cost:
    """Cycles per frame, latency of an idle unit, and resources."""
    steps = p.pixels * p.nb
    mult_w = p.requant.mult_bits
    rq_tiles = RequantPipeline.multiplies(p.requant, p.acc_bits, p.pe, spacing=spacing(p))
    per_channel = len(p.requant.mult) > 1
    by_family, parts = res.estimate(resource_parts, p, RESOURCE_FIT, unsigned_muls(rq_tiles))
    return Cost(
        cycles=steps,
        latency=timing(p, 0, steps - 1)[1] + 1,
        multipliers=len(rq_tiles),
        multiplier_widths=rq_tiles,
        multiplies=unsigned_muls(rq_tiles),
        memory_bits=p.nb * p.pe * p.acc_bits
        + (p.nb * p.pe * mult_w if per_channel else 0)
        + output_stage.fifo_depth(pipeline_depth(p)) * p.pe * p.out_type.bits,
        registers=max(r.ff for r in by_family.values()),
        by_family=by_family, parts=parts,
    )


#: calibration of :func:`resource_parts` (``benchmarks/resources.py --fit``)
RESOURCE_FIT: res.Fit = merge_fits(LANE_FIT, {
    "ecp5": {
        "lut4": {"acc": 0.98, "ctl": 1.024, "fifo": 1.007, "mrom": 1, "rq_front": 0.58,
                 "rq_lanes": 21.249, "rq_r24": 0.9, "rq_seq": 0.706,
                 "rq_tail": 0.199, "1": 0.001},
        "carry": {"acc": 0.989, "ctl": 0.992, "fifo": 0.992, "rq_front": 1.057, "rq_lanes": 6.769,
                  "rq_prod": 0.412, "rq_r24": 1.218, "rq_seq": 0.936,
                  "rq_tail": 0.375, "1": 0},
    },
    "ice40": {
        "lut4": {"acc": 0.993, "ctl": 1.005, "fifo": 1.009, "mrom": 1, "rq_front": 0.989,
                 "rq_lanes": 24.33, "rq_prod": 0.502, "rq_r24": 0.718,
                 "rq_seq": 0.788, "rq_tail": 0.415, "1": 0},
        "carry": {"acc": 0.985, "ctl": 0.996, "fifo": 0.993, "rq_front": 0.949,
                  "rq_lanes": 10.249, "rq_prod": 0.415, "rq_r24": 1.156,
                  "rq_seq": 0.951, "rq_tail": 0.372, "1": 0},
    },
})


def resource_parts(p: GAPParams, family: str) -> dict[str, res.Resources]:
    """The unit's hardware in the resource model's parts (see :mod:`rtl_templates.resources`):
    output FIFO, control, the accumulator memory and its adders, the multiplier ROM and the
    requantizers."""
    PE, NB = p.pe, p.nb
    ib, ob, A, rq = p.in_type.bits, p.out_type.bits, p.acc_bits, p.requant
    cbb = counter_bits(NB)
    ctl_bits = cbb + counter_bits(p.pixels)
    acc = res.memory(PE * A, NB, family, rom=False, rw="new" if NB == 1 else "dont_care")
    parts = output_stage.parts(PE * ob, pipeline_depth(p), family, registered=True)
    # (+4: the two loop counters' first and last flags, ``pipeline.Loop``)
    parts["ctl"] = res.Resources(ff=ctl_bits + 6 + cbb, lut4=ctl_bits + 2, carry=ctl_bits / 2)
    parts["acc"] = acc + res.accumulate(A, family) * PE + res.Resources(ff=PE * (ib + A))
    m_live, copies = 0, 1
    if len(rq.mult) > 1:
        mults = np.asarray(p.mult_per_channel(), dtype=np.int64).reshape(NB, PE)
        words = [pack_word(row, rq.mult_bits) for row in mults.tolist()]
        parts["mrom"] = res.rom(words, PE * rq.mult_bits, family)
        m_live = round(res.param_live(mults, mults, rq.mult_bits, rq.mult_bits)[2])
        copies = PE
    parts.update(RequantPipeline.parts(rq, A, ob, PE, family, spacing=spacing(p),
                                       mult_live=m_live, mult_copies=copies if m_live else 1))
    return parts


def timing(p: GAPParams, in_first: int, in_last: int) -> tuple[int, int]:
    """Cycles of the first and last output transfer of a frame whose first and last input
    beats were taken at ``in_first`` and ``in_last`` (output never stalled)."""
    steps = p.pixels * p.nb
    d = pipeline_depth(p)
    return (max(in_last - p.nb + 1, in_first + steps - p.nb) + d,
            max(in_last, in_first + steps - 1) + d)


# ---------------------------------------------------------------------------- hardware

class GAP(wiring.Component):
    """The global-average-pooling unit. See the module documentation for the contract."""

    def __init__(self, p: GAPParams):
        self.p = p
        super().__init__({
            "i": In(stream.Signature(unsigned(p.pe * p.in_type.bits))),
            "o": Out(stream.Signature(unsigned(p.pe * p.out_type.bits))),
        })

    def elaborate(self, platform):
        p = self.p
        m = Module()
        PE, NB = p.pe, p.nb
        ib, ob = p.in_type.bits, p.out_type.bits
        rq = p.requant
        acc_w, mult_w = p.acc_bits, rq.mult_bits

        # --- output FIFO and credits ---------------------------------------------------
        out = output_stage.OutputStage(m, self.o, PE * ob, pipeline_depth(p), registered=True)

        # --- issue stage ---------------------------------------------------------------
        loop_cb, loop_px = Loop(m, NB, "cb"), Loop(m, p.pixels, "px")
        cb = loop_cb.value
        last_px = loop_px.last
        issue = Signal()
        m.d.comb += [
            self.i.ready.eq(~last_px | out.room),
            issue.eq(self.i.valid & self.i.ready),
        ]
        loop_cb.step(issue)
        loop_px.step(issue & loop_cb.last)
        out.spend(issue & last_px)

        # --- accumulator RAM: read at t, add and write back at t+1 ---------------------------
        # one word (NB = 1): a register, read after its last update; otherwise a read never
        # meets the write of its own word (the write is of the previous channel block)
        acc_wr, acc_rd = ram(m, "accmem", width=PE * acc_w, depth=NB,
                             rw="new" if NB == 1 else "dont_care")
        m.d.comb += acc_rd.addr.eq(cb)

        v1, first1, last1 = Signal(), Signal(), Signal()
        cb1 = Signal.like(cb)
        x1 = Signal(PE * ib)
        m.d.sync += [v1.eq(issue), first1.eq(loop_px.first), last1.eq(last_px), cb1.eq(cb),
                     x1.eq(self.i.payload)]
        xs = lanes(x1, PE, ib, p.in_type.signed)
        olds = lanes(acc_rd.data, PE, acc_w, signed=True)
        sums = [Signal(signed(acc_w), name=f"sum_{ci}") for ci in range(PE)]
        m.d.comb += [s.eq(Mux(first1, 0, o) + x) for s, o, x in zip(sums, olds, xs)]
        m.d.comb += [acc_wr.addr.eq(cb1), acc_wr.data.eq(Cat(*sums)), acc_wr.en.eq(v1)]

        # per-channel multipliers: ROM read at t+1, data at t+2
        if len(rq.mult) > 1:
            mults = p.mult_per_channel()
            words = [pack_word(mults[cb_ * PE:(cb_ + 1) * PE], mult_w) for cb_ in range(NB)]
            m_rd, = rom(m, "mrom", width=PE * mult_w, init=words)
            m.d.comb += m_rd.addr.eq(cb1)
            mult2 = lanes(m_rd.data, PE, mult_w)
        else:
            mult2 = Const(rq.mult[0], unsigned(mult_w))

        # --- stage 2: the sum moves on --------------------------------------------------
        v2 = Signal()
        s2 = [Signal(signed(acc_w), name=f"s2_{ci}") for ci in range(PE)]
        m.d.sync += v2.eq(v1 & last1)
        m.d.sync += [s.eq(n) for s, n in zip(s2, sums)]

        # --- stages 3, 4: bias, product; round half to even, zero point, clamp → FIFO ------
        rqp = RequantPipeline(m, v2, s2, [p.bias] * PE, mult2, rq, acc_w, ob,
                              spacing=spacing(p))
        out.write(rqp.data, rqp.valid)
        return m


# ---------------------------------------------------------------------------- registration

def manifest(p: GAPParams) -> dict:
    return {"folding": {"pe": p.pe}}


def fold_space(p: GAPParams) -> FoldSpace:
    return FoldSpace(divisors(p.channels), (1,), lambda pe, simd: p.channels * p.pixels // pe)



def examples() -> list[Example]:
    """Small instances for the conformance test: per-tensor and per-channel multipliers, one
    and several channel blocks."""
    i8, u8 = QType(8, True), QType(8, False)
    out = []
    for c, pixels, pe, t, o, mult in ((4, 9, 1, i8, i8, 0.3 / 9),
                                      (6, 4, 6, u8, u8, np.linspace(0.2, 0.9, 6) / 4),
                                      (8, 5, 2, u8, i8, 0.5 / 5)):
        zin, zout = (t.lo + t.hi + 1) // 2 + 3, (o.lo + o.hi + 1) // 2 - 5
        p = GAPParams(c, pixels, make_requant(mult, zout, o.lo, o.hi), t, o, pe, zin)
        out.append(Example(p, (Port(t, pe, c * pixels),), (Port(o, pe, c),),
                           f"c{c}-px{pixels}-pe{pe}"))
    return out


register_block("gap", params=GAPParams, component=GAP, golden=golden, cost=cost,
               timing=timing, manifest=manifest, fold_space=fold_space,
               examples=examples)
