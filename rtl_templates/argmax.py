"""Index of the largest element of each frame (``ArgMax`` over the classes, the graph output).

Stream contract
    ``i``: ``channels`` elements of ``in_type`` per frame, ``pe`` per beat; ``o``: one element
    per frame, the index (unsigned, ``out_type``: enough bits for ``channels - 1``).

Semantics
    ``y = argmax_c x[c]``; among equal largest values the first index (``last=False``, ONNX
    ``select_last_index=0``) or the last (``last=True``). A quantized tensor's order is its
    real values' order (the scale is positive), so this equals ONNX ArgMax of the
    dequantized values.

Hardware (a beat taken at cycle t)
    t+1 the beat registered; a comparison chain over its ``pe`` lanes gives the beat's best
    value and index, registered at t+2 together with the frame's first/last-beat flags; at t+2
    the running best is updated (or restarted on a frame's first beat) and, on the frame's
    last beat, the index enters the output stage (:mod:`output_stage`: its write register,
    then the FIFO): the earliest output transfer is t+5 (``LATENCY``). An input beat is
    taken while a credit for an output beat is left, so the pipeline never stalls; one beat
    per cycle.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from amaranth.hdl import Module, Mux, Signal, signed, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from hwgen.rtl_templates import output_stage
from hwgen.rtl_templates import resources as res
from hwgen.rtl_templates.block import Example, FoldSpace, Port, divisors, register_block
from hwgen.rtl_templates.cost import Cost
from hwgen.rtl_templates.pipeline import counter_bits
from hwgen.rtl_templates.quant import QType
from hwgen.rtl_templates.words import lanes

#: cycles from the frame's last input transfer to its output transfer: two to the running
#: comparison (its multiplexer is written, so the output stage's write register comes
#: first), then the output stage's
LATENCY = 2 + output_stage.latency()


def index_type(channels: int) -> QType:
    """The unsigned type of an index into ``channels`` elements."""
    return QType(max(1, (int(channels) - 1).bit_length()), False)


@dataclass(frozen=True)
class ArgMaxParams:
    """One arg-max instance."""
    in_type: QType
    channels: int
    pe: int = 1
    last: bool = False           # ties: the last index instead of the first

    def __post_init__(self):
        if self.channels < 1 or self.pe < 1 or self.channels % self.pe:
            raise ValueError(f"PE={self.pe} does not divide the {self.channels} elements")

    @property
    def out_type(self) -> QType:
        return index_type(self.channels)

    @property
    def beats(self) -> int:
        return self.channels // self.pe


def golden(p: ArgMaxParams, x: np.ndarray) -> np.ndarray:
    """[N, channels] → [N, 1] indices."""
    x = np.asarray(x, dtype=np.int64).reshape(-1, p.channels)
    if p.last:
        return (p.channels - 1 - np.argmax(x[:, ::-1], axis=1)).reshape(-1, 1)
    return np.argmax(x, axis=1).reshape(-1, 1)


def timing(p: ArgMaxParams, in_first: int, in_last: int) -> tuple[int, int]:
    return in_last + LATENCY, in_last + LATENCY


def cost(p: ArgMaxParams) -> Cost:
    by_family, parts = res.estimate(resource_parts, p, RESOURCE_FIT)
    return Cost(cycles=p.beats, latency=timing(p, 0, p.beats - 1)[1] + 1,
                memory_bits=output_stage.fifo_depth(LATENCY) * p.out_type.bits,
                registers=max(r.ff for r in by_family.values()), by_family=by_family,
                parts=parts)


#: calibration of :func:`resource_parts` (``benchmarks/resources.py --fit``)
RESOURCE_FIT: res.Fit = {
    "ecp5": {
        "lut4": {"chain": 2.003, "compare": 1.385, "fifo": 1.566, "regs": 1.1, "1": 0.041},
        "carry": {"chain": 0.456, "compare": 0.792, "fifo": 0.013, "regs": 0.333, "1": 0.0},
    },
    "ice40": {
        "lut4": {"chain": 0.615, "compare": 1.097, "fifo": 1.018, "regs": 0.993, "1": 0.003},
        "carry": {"chain": 0.53, "compare": 0.877, "fifo": 0.525, "regs": 0.61, "1": 0.0},
    },
}


def resource_parts(p: ArgMaxParams, family: str) -> dict[str, res.Resources]:
    """The lanes' comparison chain and the running comparison (a comparison and two
    multiplexers each), the input and best registers, the beat counter, the output stage."""
    b, ib = p.in_type.bits, p.out_type.bits
    cmp = res.compare(b, family) + res.mux(b + ib, family)
    cb = counter_bits(p.beats)
    # the lanes' chain: a comparison and two multiplexers per lane after the first, each
    # index ``beat·pe + k`` an adder (a product by a constant); the running comparison
    chain = (cmp + res.add(ib, family)) * (p.pe - 1)
    return {"chain": chain, "compare": cmp,
            "regs": res.Resources(ff=p.pe * b + 2 * (b + ib) + cb + 6, lut4=cb, carry=cb),
            **output_stage.parts(ib, LATENCY, family)}


class ArgMax(wiring.Component):
    """The arg-max block. See the module documentation for the contract."""

    def __init__(self, p: ArgMaxParams):
        self.p = p
        super().__init__({"i": In(stream.Signature(unsigned(p.pe * p.in_type.bits))),
                          "o": Out(stream.Signature(unsigned(p.out_type.bits)))})

    def elaborate(self, platform):
        p = self.p
        m = Module()
        ib, vb = p.out_type.bits, p.in_type.bits
        vshape = signed(vb) if p.in_type.signed else unsigned(vb)
        out = output_stage.OutputStage(m, self.o, ib, LATENCY)

        beat = Signal(range(max(p.beats, 2)))
        take = Signal()
        end = Signal()
        m.d.comb += [self.i.ready.eq(out.room), take.eq(self.i.valid & self.i.ready),
                     end.eq(beat == p.beats - 1)]
        out.spend(take & end)
        with m.If(take):
            m.d.sync += beat.eq(Mux(end, 0, beat + 1))

        # --- t+1: the beat --------------------------------------------------------------
        v1, first1, end1 = Signal(), Signal(), Signal()
        x1 = Signal(p.pe * vb)
        b1 = Signal(range(max(p.beats, 2)))
        # the input register loads every cycle (read only under ``v1``): no enable from the
        # late handshake, and the lanes' chain maps as it does alone
        m.d.sync += [v1.eq(take), first1.eq(beat == 0), end1.eq(end), b1.eq(beat),
                     x1.eq(self.i.payload)]

        def better(v, best):
            return (v >= best) if p.last else (v > best)

        # the beat's best lane, a comparison chain
        xs = lanes(x1, p.pe, vb, p.in_type.signed)
        bv, bi = xs[0], b1 * p.pe
        for k in range(1, p.pe):
            up = better(xs[k], bv)
            bv = Mux(up, xs[k], bv)
            bi = Mux(up, b1 * p.pe + k, bi)

        # --- t+2: the running best; the frame's index into the output stage ----------------
        v2, first2, end2 = Signal(), Signal(), Signal()
        bv2, bi2 = Signal(vshape), Signal(ib)
        m.d.sync += [v2.eq(v1), first2.eq(first1), end2.eq(end1), bv2.eq(bv), bi2.eq(bi)]
        best_v, best_i = Signal(vshape), Signal(ib)
        up2 = first2 | better(bv2, best_v)
        new_v, new_i = Mux(up2, bv2, best_v), Mux(up2, bi2, best_i)
        with m.If(v2):
            m.d.sync += [best_v.eq(new_v), best_i.eq(new_i)]
        out.write(new_i, v2 & end2)
        return m


def manifest(p: ArgMaxParams) -> dict:
    return {"folding": {"pe": p.pe}, "elements": p.channels,
            "types": {"input": p.in_type.name, "output": p.out_type.name}}


def fold_space(p: ArgMaxParams) -> FoldSpace:
    return FoldSpace(divisors(p.channels), (1,), lambda pe, simd: p.channels // pe)



def examples() -> list[Example]:
    """Small instances for the conformance test: one lane, first index of a tie; four lanes,
    last index."""
    out = []
    for in_type, channels, pe, last in ((QType(8, True), 10, 1, False),
                                        (QType(3, False), 12, 4, True)):
        p = ArgMaxParams(in_type, channels, pe, last)
        out.append(Example(p, (Port(in_type, pe, channels),), (Port(p.out_type, 1, 1),),
                           f"c{channels}-pe{pe}{'-last' if last else ''}"))
    return out


register_block("argmax", params=ArgMaxParams, component=ArgMax, golden=golden, cost=cost,
               timing=timing, manifest=manifest, fold_space=fold_space,
               examples=examples)
