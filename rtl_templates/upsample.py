"""Nearest-neighbour upsampling of a feature map by integer factors: every pixel repeated
``fw`` times along a row and every row ``fh`` times (ONNX ``Resize``/``Upsample`` in nearest
mode with integer scales). The values pass unchanged.

Stream contract
    ``i``: a ``height × width`` feature map of ``channels``, channel-last, ``pe`` elements per
    beat; ``o``: the ``height·fh × width·fw`` map, channel-last, ``pe`` per beat.

Hardware
    A RAM holds one input row (``width · channels / pe`` words). The block alternates two
    phases per input row: *load* (``i.ready`` high) until the row's last beat is written,
    then *emit*: one word read per cycle while a credit for the output FIFO is left (read at
    t, the word into the output stage's write register at t+1 (:mod:`output_stage`), the
    earliest output transfer at t+4), the row ``fh`` times, each pixel ``fw`` times within
    it. Cycles per frame: ``height · width · channels / pe · (1 + fh·fw)``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from amaranth.hdl import Module, Signal, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from hwgen.rtl_templates import output_stage
from hwgen.rtl_templates import resources as res
from hwgen.rtl_templates.block import Example, FoldSpace, Port, divisors, register_block
from hwgen.rtl_templates.cost import Cost
from hwgen.rtl_templates.load_phase import load_phase
from hwgen.rtl_templates.memory import ram
from hwgen.rtl_templates.pipeline import counter_bits
from hwgen.rtl_templates.quant import QType

#: cycles from an emit read to the output transfer of that beat: the read, then the output
#: stage's (the RAM's read data is written: the write register comes first)
LATENCY = 1 + output_stage.latency()


@dataclass(frozen=True)
class UpsampleParams:
    """One upsampler."""
    qtype: QType
    channels: int
    height: int
    width: int
    fh: int
    fw: int
    pe: int = 1

    def __post_init__(self):
        if self.pe < 1 or self.channels % self.pe:
            raise ValueError(f"PE={self.pe} does not divide the {self.channels} channels")
        if min(self.height, self.width, self.fh, self.fw) < 1:
            raise ValueError("sizes and factors must be positive")

    @property
    def row_beats(self) -> int:
        return self.width * self.channels // self.pe

    @property
    def in_beats(self) -> int:
        return self.height * self.row_beats

    @property
    def out_beats(self) -> int:
        return self.in_beats * self.fh * self.fw


def golden(p: UpsampleParams, x: np.ndarray) -> np.ndarray:
    """[N, height·width·channels] channel-last → [N, height·fh·width·fw·channels]."""
    x = np.asarray(x, dtype=np.int64)
    n = x.shape[0]
    x = x.reshape(n, p.height, p.width, p.channels)
    return np.repeat(np.repeat(x, p.fh, axis=1), p.fw, axis=2).reshape(n, -1)


def timing(p: UpsampleParams, in_first: int, in_last: int) -> tuple[int, int]:
    """Each input row is loaded, then emitted ``fh·fw`` times over."""
    emit = p.row_beats * p.fh * p.fw
    first = in_first + p.row_beats + LATENCY
    last_start = max(in_last + 1, in_first + p.in_beats + p.out_beats - emit)
    return first, last_start + emit - 1 + LATENCY


def cost(p: UpsampleParams) -> Cost:
    by_family, parts = res.estimate(resource_parts, p, RESOURCE_FIT)
    return Cost(cycles=p.in_beats + p.out_beats, latency=timing(p, 0, p.in_beats - 1)[1] + 1,
                memory_bits=p.width * p.channels * p.qtype.bits
                + output_stage.fifo_depth(LATENCY) * p.pe * p.qtype.bits,
                registers=max(r.ff for r in by_family.values()), by_family=by_family,
                parts=parts)


#: calibration of :func:`resource_parts` (``benchmarks/resources.py --fit``)
RESOURCE_FIT: res.Fit = {
    "ecp5": {
        "lut4": {"ctl": 0.883, "fifo": 1.605, "row": 0.646, "1": 0.04},
        "carry": {"ctl": 0.188, "fifo": 0.032, "1": 0.0},
    },
    "ice40": {
        "lut4": {"ctl": 0.824, "fifo": 0.848, "row": 1.042, "1": 0.007},
        "carry": {"ctl": 0.308, "fifo": 0.228, "1": 0.0},
    },
}


def resource_parts(p: UpsampleParams, family: str) -> dict[str, res.Resources]:
    """The row RAM, the counters and the output stage."""
    w = p.pe * p.qtype.bits
    vb = p.channels // p.pe
    cb = (3 * counter_bits(p.row_beats) + counter_bits(vb) + counter_bits(p.fw)
          + counter_bits(p.fh))
    return {"row": res.memory(w, p.row_beats, family, rom=False, rw="dont_care"),
            "ctl": res.Resources(ff=cb + 2, lut4=2 * cb + 2, carry=cb),
            **output_stage.parts(w, LATENCY, family)}


class Upsample(wiring.Component):
    """The upsampler. See the module documentation for the contract."""

    def __init__(self, p: UpsampleParams):
        self.p = p
        w = p.pe * p.qtype.bits
        super().__init__({"i": In(stream.Signature(unsigned(w))),
                          "o": Out(stream.Signature(unsigned(w)))})

    def elaborate(self, platform):
        p = self.p
        m = Module()
        RB, VB = p.row_beats, p.channels // p.pe
        out = output_stage.OutputStage(m, self.o, p.pe * p.qtype.bits, LATENCY)
        wr, rd = ram(m, "row", width=p.pe * p.qtype.bits, depth=RB, rw="dont_care")
        # (written only while loading, read only after: never both in one cycle)

        loading = load_phase(m, self.i, wr, RB)

        # emit: channel beat, pixel repeat, pixel, row repeat (fastest first)
        base = Signal(range(max(RB, 2)))          # the pixel's first word
        cb = Signal(range(max(VB, 2)))
        rw = Signal(range(max(p.fw, 2)))
        px = Signal(range(max(p.width, 2)))
        rh = Signal(range(max(p.fh, 2)))
        emit = Signal()
        m.d.comb += [emit.eq(~loading & out.room), rd.addr.eq(base + cb)]
        out.spend(emit)
        with m.If(emit):
            with m.If(cb != VB - 1):
                m.d.sync += cb.eq(cb + 1)
            with m.Else():
                m.d.sync += cb.eq(0)
                with m.If(rw != p.fw - 1):
                    m.d.sync += rw.eq(rw + 1)
                with m.Else():
                    m.d.sync += rw.eq(0)
                    with m.If(px != p.width - 1):
                        m.d.sync += [px.eq(px + 1), base.eq(base + VB)]
                    with m.Else():
                        m.d.sync += [px.eq(0), base.eq(0)]
                        with m.If(rh != p.fh - 1):
                            m.d.sync += rh.eq(rh + 1)
                        with m.Else():
                            m.d.sync += [rh.eq(0), loading.eq(1)]
        v1 = Signal()
        m.d.sync += v1.eq(emit)
        out.write(rd.data, v1)
        return m


def manifest(p: UpsampleParams) -> dict:
    return {"folding": {"pe": p.pe}, "factors": [p.fh, p.fw]}


def fold_space(p: UpsampleParams) -> FoldSpace:
    n = p.height * p.width * p.channels * (1 + p.fh * p.fw)
    return FoldSpace(divisors(p.channels), (1,), lambda pe, simd: n // pe)



def examples() -> list[Example]:
    """Small instances for the conformance test."""
    out = []
    for t, c, h, w, fh, fw, pe in ((QType(8, False), 2, 3, 2, 2, 3, 1),
                                   (QType(8, True), 4, 2, 3, 3, 1, 2),
                                   (QType(4, False), 3, 1, 1, 1, 2, 3)):
        p = UpsampleParams(t, c, h, w, fh, fw, pe)
        out.append(Example(p, (Port(t, pe, c * h * w),), (Port(t, pe, c * h * w * fh * fw),),
                           f"c{c}-{h}x{w}-by{fh}x{fw}-pe{pe}"))
    return out


register_block("upsample", params=UpsampleParams, component=Upsample, golden=golden,
               cost=cost, timing=timing, manifest=manifest, fold_space=fold_space,
               examples=examples)
