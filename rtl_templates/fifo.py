"""Stream FIFO: decouples two blocks; ``depth`` beats of ``width`` bits.

Golden function: identity. Cost: ``depth·width`` memory bits, one beat per cycle, a beat taken
in cycle t can leave in cycle t + LATENCY.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hwgen.rtl_templates import resources as res
from hwgen.rtl_templates import streams
from hwgen.rtl_templates.block import Example, FoldSpace, Port, fixed_fold, register_block
from hwgen.rtl_templates.cost import Cost
from hwgen.rtl_templates.memory import BufferedFIFO, fifo_slices
from hwgen.rtl_templates.quant import QType

LATENCY = 2
#: deepest FIFO built as one :class:`~hwgen.rtl_templates.memory.BufferedFIFO`: its inner
#: queue (a word less) is block RAM columns that hold every word in one tile
#: (:func:`~hwgen.rtl_templates.memory.block_columns`, at most 16,384 words). A deeper FIFO
#: is a chain of equal FIFOs of at most this depth: one memory of more words stacks tiles in
#: depth, and the multiplexer of their outputs after the tile's late data missed the clock
#: (ResNet-8's second residual FIFO, 8 bits × 22,782 words: 9.4 ns)
CHAIN_DEPTH = 16384 + 1


@dataclass(frozen=True)
class FIFOParams:
    width: int               # bits per beat
    depth: int               # beats held
    beats: int               # beats per frame
    #: ``o`` is a sliced stream (:class:`~hwgen.rtl_templates.streams.SlicedSignature`):
    #: the reader keeps a copy of its ready per slice of the word, and each slice reads on
    #: ``o.ready_slices`` (bit k: slice k's) and gives its valid on ``o.valid_slices``
    #: (:class:`~hwgen.rtl_templates.memory.BufferedFIFO`'s ``slice_ports``)
    slice_ports: bool = field(default=False, metadata={"digest": "omit_default"})
    #: ``i`` is a sliced stream: the writer gives a valid per slice of the word from a sliced
    #: FIFO of its own with the same slices; each slice writes on ``i.valid_slices`` and gives
    #: its ready on ``i.ready_slices``, so the two FIFOs' slices hand over slice to slice
    in_slice_ports: bool = field(default=False, metadata={"digest": "omit_default"})
    #: ``o.valid_copies``: that many copies of ``o.valid``, each a register of its own, for a
    #: reader whose valid reaches many places (the ``valid_copies`` face of the reader;
    #: :class:`~hwgen.rtl_templates.memory.BufferedFIFO`'s ``r_rdy_copies``)
    valid_copies: int = field(default=0, metadata={"digest": "omit_default"})

    @property
    def slices(self) -> int:
        return len(self.slice_widths)

    @property
    def chain(self) -> list[int]:
        """The depths of the FIFOs in series that hold the beats (:data:`CHAIN_DEPTH`)."""
        if self.depth <= CHAIN_DEPTH or self.slice_ports or self.in_slice_ports:
            return [self.depth]
        n = -(-self.depth // CHAIN_DEPTH)
        base, extra = divmod(self.depth, n)
        return [base + 1] * extra + [base] * (n - extra)

    @property
    def latency(self) -> int:
        """Cycles from a beat's input transfer to its earliest output transfer: each FIFO of
        the chain's :data:`LATENCY`."""
        return LATENCY * len(self.chain)

    @property
    def slice_widths(self) -> list[int]:
        return fifo_slices(self.width, self.depth)


def golden(p: FIFOParams, x: np.ndarray) -> np.ndarray:
    return np.asarray(x)


def timing(p: FIFOParams, in_first: int, in_last: int) -> tuple[int, int]:
    """First and last output transfer given the first and last input transfer."""
    return in_first + p.latency, in_last + p.latency


def cost(p: FIFOParams) -> Cost:
    by_family, parts = res.estimate(resource_parts, p, RESOURCE_FIT)
    return Cost(cycles=p.beats, latency=timing(p, 0, p.beats - 1)[1] + 1,
                memory_bits=p.width * p.depth,
                registers=max(r.ff for r in by_family.values()), by_family=by_family,
                parts=parts)


#: calibration of :func:`resource_parts` (``benchmarks/resources.py --fit``)
RESOURCE_FIT: res.Fit = {
    "ecp5": {
        "lut4": {"fifo": 1.73, "1": 0.061},
        "carry": {"fifo": 0.76, "1": 0},
    },
    "ice40": {
        "lut4": {"fifo": 1.006, "1": 0},
        "carry": {"fifo": 0.717, "1": 0},
    },
}


def resource_parts(p: FIFOParams, family: str, live=None) -> dict[str, res.Resources]:
    """The FIFO in the resource model's parts (:func:`rtl_templates.resources.fifo`), each
    of its chain's."""
    out = res.Resources()
    for d in p.chain:
        out = out + res.fifo(p.width, d, family, live)
    parts = {"fifo": out}
    if p.valid_copies:      # each copy of the valid: its register and its next value's LUT
        parts["copies"] = res.Resources(lut4=p.valid_copies, ff=p.valid_copies)
    return parts


def resources_live(p: FIFOParams, family: str, live) -> res.Resources:
    """The FIFO on ``family`` when its consumer uses only the bits ``live`` marks."""
    return res.fitted(resource_parts(p, family, live), RESOURCE_FIT.get(family)).rounded()


def manifest(p: FIFOParams) -> dict:
    return {"width": p.width, "depth": p.depth}


def fold_space(p: FIFOParams) -> FoldSpace:
    return fixed_fold(p.beats)


class StreamFIFO(wiring.Component):
    def __init__(self, p: FIFOParams):
        self.p = p
        super().__init__({
            "i": In(streams.signature(p.width, p.slices if p.in_slice_ports else 0)),
            "o": Out(streams.signature(p.width, p.slices if p.slice_ports else 0,
                                       p.valid_copies))})

    def elaborate(self, platform):
        m = Module()
        if len(self.p.chain) > 1:
            return self._chain(m)
        m.submodules.fifo = fifo = BufferedFIFO(width=self.p.width, depth=self.p.depth,
                                                slice_ports=self.p.slice_ports,
                                                w_slice_ports=self.p.in_slice_ports,
                                                r_rdy_copies=self.p.valid_copies)
        if self.p.valid_copies:
            m.d.comb += self.o.valid_copies.eq(fifo.r_rdy_c)
        if self.p.slice_ports:
            m.d.comb += [fifo.r_en_slices.eq(self.o.ready_slices),
                         self.o.valid_slices.eq(fifo.r_rdy_slices)]
        if self.p.in_slice_ports:
            m.d.comb += [fifo.w_en_slices.eq(self.i.valid_slices),
                         self.i.ready_slices.eq(fifo.w_rdy_slices)]
        m.d.comb += [
            fifo.w_data.eq(self.i.payload), fifo.w_en.eq(self.i.valid),
            self.i.ready.eq(fifo.w_rdy),
            self.o.payload.eq(fifo.r_data), self.o.valid.eq(fifo.r_rdy),
            fifo.r_en.eq(self.o.ready),
        ]
        return m


    def _chain(self, m: Module) -> Module:
        """FIFOs of :attr:`FIFOParams.chain` in series, each reading its predecessor."""
        w, valid, data = self.i.ready, self.i.valid, self.i.payload
        for k, depth in enumerate(self.p.chain):
            last = k == len(self.p.chain) - 1
            f = BufferedFIFO(width=self.p.width, depth=depth,
                             r_rdy_copies=self.p.valid_copies if last else 0)
            m.submodules[f"fifo{k}"] = f
            m.d.comb += [f.w_data.eq(data), f.w_en.eq(valid), w.eq(f.w_rdy)]
            w, valid, data = f.r_en, f.r_rdy, f.r_data
        m.d.comb += [self.o.payload.eq(data), self.o.valid.eq(valid), w.eq(self.o.ready)]
        if self.p.valid_copies:
            m.d.comb += self.o.valid_copies.eq(f.r_rdy_c)
        return m


def slice_ports(p: FIFOParams, port: str, widths: list[int]) -> FIFOParams | None:
    """The FIFO with ``port`` a sliced stream, when its own slices are ``widths``."""
    if len(widths) < 2 or list(widths) != p.slice_widths:
        return None
    return replace(p, **{"slice_ports" if port == "o" else "in_slice_ports": True})


def examples() -> list[Example]:
    """Small instances for the conformance test: the lowering's shallowest full-rate depth and
    a deeper, wider one."""
    out = []
    for width, depth, beats, copies in ((8, 3, 12, 0), (20, 8, 10, 0),
                                        (2, 2 * CHAIN_DEPTH + 5, 40, 0), (12, 5, 16, 3)):
        port = Port(QType(width, False), 1, beats)
        out.append(Example(FIFOParams(width, depth, beats, valid_copies=copies), (port,),
                           (port,), f"w{width}-d{depth}" + (f"-c{copies}" if copies else "")))
    return out


register_block("fifo", params=FIFOParams, component=StreamFIFO, golden=golden, cost=cost,
               timing=timing, manifest=manifest, fold_space=fold_space,
               resources_live=resources_live, slice_ports=slice_ports,
               examples=examples)
