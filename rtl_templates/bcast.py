"""Broadcast of a per-channel vector over a frame's pixels: ``y[p, c] = s[c]`` (ONNX
broadcasting of ``s[C, 1, 1]`` against a ``[C, H, W]`` feature map), so that an elementwise
join (``add``) reads both operands in lockstep.

Stream contract
    ``i``: ``channels`` elements per frame, ``pe`` per beat; ``o``: ``pixels · channels``
    elements per frame, ``pe`` per beat, channel-last (the vector once per pixel).

Hardware
    A RAM of ``channels / pe`` words. The block alternates two phases: *load* (``i.ready``
    high) until the vector's last beat is written, then *emit*: a word read per cycle while a
    credit for the output FIFO is left (the read at t, the word into the output stage's
    write register at t+1 (:mod:`output_stage`), the earliest output transfer at t+4),
    ``pixels`` times over, then load again. One beat per cycle in each phase.
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
from hwgen.rtl_templates.load_phase import load_phase, replay_phase
from hwgen.rtl_templates.memory import ram
from hwgen.rtl_templates.pipeline import counter_bits
from hwgen.rtl_templates.quant import QType

#: cycles from an emit read to the output transfer of that beat: the read, then the output
#: stage's (the RAM's read data is written: the write register comes first)
LATENCY = 1 + output_stage.latency()


@dataclass(frozen=True)
class BcastParams:
    """One broadcast instance."""
    qtype: QType
    channels: int
    pixels: int
    pe: int = 1

    def __post_init__(self):
        if self.pe < 1 or self.channels % self.pe or self.pixels < 1:
            raise ValueError(f"PE={self.pe} does not divide the {self.channels} channels")

    @property
    def vec_beats(self) -> int:
        return self.channels // self.pe

    @property
    def out_beats(self) -> int:
        return self.pixels * self.vec_beats


def golden(p: BcastParams, s: np.ndarray) -> np.ndarray:
    """[N, channels] → [N, pixels·channels]."""
    s = np.asarray(s, dtype=np.int64).reshape(-1, p.channels)
    return np.tile(s, (1, p.pixels))


def timing(p: BcastParams, in_first: int, in_last: int) -> tuple[int, int]:
    """The vector's beats from ``in_first`` on; emitting starts after its last beat."""
    start = max(in_last, in_first + p.vec_beats - 1) + 1
    return start + LATENCY, start + p.out_beats - 1 + LATENCY


def cost(p: BcastParams) -> Cost:
    by_family, parts = res.estimate(resource_parts, p, RESOURCE_FIT)
    return Cost(cycles=p.vec_beats + p.out_beats, latency=timing(p, 0, p.vec_beats - 1)[1] + 1,
                memory_bits=p.channels * p.qtype.bits
                + output_stage.fifo_depth(LATENCY) * p.pe * p.qtype.bits,
                registers=max(r.ff for r in by_family.values()), by_family=by_family,
                parts=parts)


#: calibration of :func:`resource_parts` (``benchmarks/resources.py --fit``)
RESOURCE_FIT: res.Fit = {
    "ecp5": {
        "lut4": {"ctl": 1.015, "fifo": 1.825, "vec": 0.647, "1": 0.066},
        "carry": {"ctl": 0.201, "fifo": 0.0, "1": 0.0},
    },
    "ice40": {
        "lut4": {"ctl": 0.92, "fifo": 0.896, "vec": 0.977, "1": 0.011},
        "carry": {"ctl": 0.609, "fifo": 0.174, "1": 0.0},
    },
}


def resource_parts(p: BcastParams, family: str) -> dict[str, res.Resources]:
    """The vector RAM, the phase control and the output stage."""
    w = p.pe * p.qtype.bits
    cb = 2 * counter_bits(p.vec_beats) + counter_bits(p.pixels)
    return {"vec": res.memory(w, p.vec_beats, family, rom=False, rw="dont_care"),
            "ctl": res.Resources(ff=cb + 2, lut4=2 * cb, carry=cb),
            **output_stage.parts(w, LATENCY, family)}


class Bcast(wiring.Component):
    """The broadcast block. See the module documentation for the contract."""

    def __init__(self, p: BcastParams):
        self.p = p
        w = p.pe * p.qtype.bits
        super().__init__({"i": In(stream.Signature(unsigned(w))),
                          "o": Out(stream.Signature(unsigned(w)))})

    def elaborate(self, platform):
        p = self.p
        m = Module()
        VB = p.vec_beats
        out = output_stage.OutputStage(m, self.o, p.pe * p.qtype.bits, LATENCY)
        wr, rd = ram(m, "vec", width=p.pe * p.qtype.bits, depth=VB, rw="dont_care")
        # (written only while loading, read only after: never both in one cycle)

        loading = load_phase(m, self.i, wr, VB)

        emit = Signal()
        m.d.comb += emit.eq(~loading & out.room)
        out.spend(emit)
        replay_phase(m, emit, loading, rd, VB, p.pixels)
        v1 = Signal()
        m.d.sync += v1.eq(emit)
        out.write(rd.data, v1)
        return m


def manifest(p: BcastParams) -> dict:
    return {"folding": {"pe": p.pe}, "channels": p.channels, "pixels": p.pixels}


def fold_space(p: BcastParams) -> FoldSpace:
    return FoldSpace(divisors(p.channels), (1,),
                     lambda pe, simd: (p.pixels + 1) * p.channels // pe)



def examples() -> list[Example]:
    """Small instances for the conformance test."""
    out = []
    for t, c, px, pe in ((QType(8, False), 8, 3, 1), (QType(8, True), 6, 4, 3),
                         (QType(5, False), 4, 1, 4)):
        out.append(Example(BcastParams(t, c, px, pe), (Port(t, pe, c),), (Port(t, pe, c * px),),
                           f"c{c}-px{px}-pe{pe}"))
    return out


register_block("bcast", params=BcastParams, component=Bcast, golden=golden, cost=cost,
               timing=timing, manifest=manifest, fold_space=fold_space,
               examples=examples)
