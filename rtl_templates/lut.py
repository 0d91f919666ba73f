"""Lookup table (LUT): every element of a stream is replaced by ``table[its raw bits]``.

Stream contract
    ``i``: ``pe`` elements of ``in_type`` per beat; ``o``: ``pe`` elements of ``out_type`` per
    beat, element k in bits ``[k*bits, (k+1)*bits)`` on both sides. A frame is
    ``elements`` elements (``elements / pe`` beats).

Semantics
    ``y = table[x & (2**in_bits - 1)]``: the table is indexed by the element's raw bit
    pattern (two's complement for signed inputs), so any function of one quantized value —
    an activation between two quantized tensors, computed once by its owner — is exact.

Hardware
    One ROM of ``2**in_bits`` words of ``out_bits`` with one read port per lane, in LUTs or
    block RAM as ``memory.choose_style`` decides (block RAM from two lanes of an 8-bit
    table: a DP16KD serves two lanes). An input beat is taken at cycle t while a credit is
    left; the ROM answers at t+1 into the output stage (:mod:`output_stage`: its write
    register, then the FIFO), from which the beat can leave at t + ``LATENCY``. One beat per
    cycle; ``valid`` never waits for ``ready``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from amaranth.hdl import Cat, Module, Signal, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from hwgen.rtl_templates import output_stage
from hwgen.rtl_templates import resources as res
from hwgen.rtl_templates.block import Example, FoldSpace, Port, divisors, register_block
from hwgen.rtl_templates.cost import Cost
from hwgen.rtl_templates.memory import rom
from hwgen.rtl_templates.quant import QType
from hwgen.rtl_templates.words import lanes

#: cycles from an input transfer to the output transfer of that beat (output ready): the
#: ROM's read, then the output stage's (the read data is written: the write register comes
#: first)
LATENCY = 1 + output_stage.latency()


@dataclass(frozen=True, eq=False)
class LUTParams:
    """One lookup-table instance."""
    table: tuple[int, ...]   # 2**in_type.bits output values, indexed by the raw input bits
    in_type: QType
    out_type: QType
    pe: int = 1
    elements: int = 1        # elements per frame
    channels: int = 0        # channels of a pixel (PE divides them); 0 = the whole frame

    def __post_init__(self):
        if len(self.table) != 1 << self.in_type.bits:
            raise ValueError(f"a {self.in_type.name} input needs a table of "
                             f"{1 << self.in_type.bits} entries, not {len(self.table)}")
        if min(self.table) < self.out_type.lo or max(self.table) > self.out_type.hi:
            raise ValueError(f"table values outside {self.out_type.name}")
        if self.pe < 1 or self.elements % self.pe or (self.channels or self.elements) % self.pe:
            raise ValueError(f"PE={self.pe} does not divide the {self.channels or self.elements} "
                             f"channels")

    @property
    def beats(self) -> int:
        return self.elements // self.pe


def golden(p: LUTParams, x: np.ndarray) -> np.ndarray:
    """[N, elements] → [N, elements]: each element through the table."""
    raw = p.in_type.to_unsigned(np.asarray(x, dtype=np.int64))
    return np.asarray(p.table, dtype=np.int64)[raw]


def timing(p: LUTParams, in_first: int, in_last: int) -> tuple[int, int]:
    return in_first + LATENCY, in_last + LATENCY


def cost(p: LUTParams) -> Cost:
    rom = (1 << p.in_type.bits) * p.out_type.bits
    by_family, parts = res.estimate(resource_parts, p, RESOURCE_FIT)
    return Cost(cycles=p.beats, latency=timing(p, 0, p.beats - 1)[1] + 1,
                memory_bits=rom + output_stage.fifo_depth(LATENCY) * p.pe * p.out_type.bits,
                registers=max(r.ff for r in by_family.values()), by_family=by_family,
                parts=parts)


#: calibration of :func:`resource_parts` (``benchmarks/resources.py --fit``)
RESOURCE_FIT: res.Fit = {
    "ecp5": {
        "lut4": {"fifo": 1.855, "rom": 1.024, "1": 0.065},
        "carry": {"fifo": 0.01, "1": 0.0},
    },
    "ice40": {
        "lut4": {"fifo": 0.773, "rom": 1.245, "1": 0.002},
        "carry": {"fifo": 0.269, "1": 0.0},
    },
}


def resource_parts(p: LUTParams, family: str) -> dict[str, res.Resources]:
    """The table's hardware in the resource model's parts (see
    :mod:`rtl_templates.resources`): the ROM with a read port per lane, the output stage (its
    FIFO, credits and write register) and the valid flag."""
    raw = [v & ((1 << p.out_type.bits) - 1) for v in p.table]
    return {"rom": res.rom(raw, p.out_type.bits, family, read_ports=p.pe),
            **output_stage.parts(p.pe * p.out_type.bits, LATENCY, family),
            "ctl": res.Resources(ff=1)}


def manifest(p: LUTParams) -> dict:
    return {"folding": {"pe": p.pe}, "table_entries": len(p.table),
            "types": {"input": p.in_type.name, "output": p.out_type.name}}


def fold_space(p: LUTParams) -> FoldSpace:
    return FoldSpace(divisors(p.channels or p.elements), (1,),
                     lambda pe, simd: p.elements // pe)


class LUT(wiring.Component):
    """The lookup table. See the module documentation for the contract."""

    def __init__(self, p: LUTParams):
        self.p = p
        super().__init__({"i": In(stream.Signature(unsigned(p.pe * p.in_type.bits))),
                          "o": Out(stream.Signature(unsigned(p.pe * p.out_type.bits)))})

    def elaborate(self, platform):
        p = self.p
        m = Module()
        out = output_stage.OutputStage(m, self.o, p.pe * p.out_type.bits, LATENCY)
        raw = [v & ((1 << p.out_type.bits) - 1) for v in p.table]
        take = Signal()
        m.d.comb += [self.i.ready.eq(out.room), take.eq(self.i.valid & self.i.ready)]
        out.spend(take)
        ports = rom(m, "rom", width=p.out_type.bits, init=raw, read_ports=p.pe)
        for port, x in zip(ports, lanes(self.i.payload, p.pe, p.in_type.bits)):
            m.d.comb += port.addr.eq(x)
        valid1 = Signal()
        m.d.sync += valid1.eq(take)
        out.write(Cat(*(port.data for port in ports)), valid1)
        return m



def examples() -> list[Example]:
    """Small instances for the conformance test: one lane and three lanes over 6 channels."""
    rng = np.random.default_rng(7)
    int4 = QType(4, True)
    out = []
    for in_type, out_type, pe, elements, channels in ((QType(8, True), QType(8, False), 1, 6, 0),
                                                      (int4, QType(6, True), 3, 12, 6)):
        table = tuple(int(v) for v in rng.integers(out_type.lo, out_type.hi + 1,
                                                   1 << in_type.bits))
        p = LUTParams(table, in_type, out_type, pe, elements, channels)
        out.append(Example(p, (Port(in_type, pe, elements),), (Port(out_type, pe, elements),),
                           f"{in_type.name}-{out_type.name}-pe{pe}"))
    return out


register_block("lut", params=LUTParams, component=LUT, golden=golden, cost=cost,
               timing=timing, manifest=manifest, fold_space=fold_space,
               examples=examples)
