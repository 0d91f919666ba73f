"""Stream FIFO: decouples two blocks; ``depth`` beats of ``width`` bits.

Golden function: identity. Cost: ``depth·width`` memory bits, one beat per cycle, a beat taken
in cycle t can leave in cycle t + LATENCY.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from amaranth.hdl import Module, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from hwgen.rtl_templates.block import fixed_fold, register_block
from hwgen.rtl_templates.cost import Cost

LATENCY = 2


def golden(x: np.ndarray) -> np.ndarray:
    return np.asarray(x)


def timing(in_first: int, in_last: int) -> tuple[int, int]:
    """First and last output transfer given the first and last input transfer."""
    return in_first + LATENCY, in_last + LATENCY


def cost(width: int, depth: int, beats: int) -> Cost:
    return Cost(cycles=beats, latency=timing(0, beats - 1)[1] + 1, memory_bits=width * depth,
                registers=width + 2 * depth.bit_length() + 4)


class StreamFIFO(wiring.Component):
    def __init__(self, width: int, depth: int):
        self.width, self.depth = width, depth
        super().__init__({"i": In(stream.Signature(unsigned(width))),
                          "o": Out(stream.Signature(unsigned(width)))})

    def elaborate(self, platform):
        m = Module()
        m.submodules.fifo = fifo = SyncFIFOBuffered(width=self.width, depth=self.depth)
        m.d.comb += [
            fifo.w_data.eq(self.i.payload), fifo.w_en.eq(self.i.valid),
            self.i.ready.eq(fifo.w_rdy),
            self.o.payload.eq(fifo.r_data), self.o.valid.eq(fifo.r_rdy),
            fifo.r_en.eq(self.o.ready),
        ]
        return m


# ---------------------------------------------------------------------------- registration

@dataclass(frozen=True)
class FIFOParams:
    width: int               # bits per beat
    depth: int               # beats held
    beats: int               # beats per frame


register_block("fifo", params=FIFOParams,
               component=lambda p: StreamFIFO(p.width, p.depth),
               golden=lambda p, x: golden(x),
               cost=lambda p: cost(p.width, p.depth, p.beats),
               timing=lambda p, first, last: timing(first, last),
               manifest=lambda p: {"width": p.width, "depth": p.depth},
               fold_space=lambda p: fixed_fold(p.beats))
