"""Data-width converter: the same element sequence, ``in_elems`` per input beat and
``out_elems`` per output beat (any two divisors of the frame size, e.g. 4 → 6).

Stream contract
    ``i``: ``in_elems`` elements of ``bits`` bits per beat; ``o``: ``out_elems`` per beat;
    element k of a beat in bits ``[k*bits, (k+1)*bits)``. The element order is unchanged.
    Since both counts divide the frame's element count, frame boundaries fall on beat
    boundaries on both sides: no output beat ever holds elements of two frames, without any
    frame counter.

Hardware: a shift buffer of ``N = in + out + min(in, out) - gcd(in, out)`` element registers
and a fill level (no LCM-sized buffer). Slot 0 holds the oldest element; an output beat is
slots ``0..out-1`` (``o.valid = level ≥ out``, a register: the comparisons of the next
level), after which everything moves down by ``out``; an input beat is written at the first
free slot (``i.ready = level ≤ N - in``, also a register). Neither ready nor valid depends
on the other side. That capacity is the smallest with which this scheme sustains the
maximal rate: one output beat per cycle when ``in ≥ out`` and one input beat per cycle when
``in ≤ out``. (For ``in < out`` the level
before a cycle takes the values ≤ ``out - gcd + in``, and the input must still fit; ``in > out``
is symmetric. ``tests/blocks/test_dwc.py`` checks both the rate and the minimality.)
With ``in == out`` the block is plain wires.

Timing (input offered back to back, output always ready): the first output beat leaves
``ceil(out/in)`` cycles after the first input transfer; the frame's last output beat leaves
at ``max(in_last + ceil(in/out), in_first + F/out)``.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np
from amaranth.hdl import Cat, Module, Mux, Signal, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from hwgen.rtl_templates import resources as res
from hwgen.rtl_templates import streams
from hwgen.rtl_templates.block import Example, FoldSpace, Port, fixed_fold, register_block
from hwgen.rtl_templates.cost import Cost
from hwgen.rtl_templates.kept import kept_copies
from hwgen.rtl_templates.pipeline import counter_bits
from hwgen.rtl_templates.quant import QType
from hwgen.rtl_templates.words import lanes


@dataclass(frozen=True)
class DWCParams:
    bits: int                # bits per element
    in_elems: int            # elements per input beat
    out_elems: int           # elements per output beat
    frame: int               # elements per frame
    #: element slots of the shift buffer; ``None``: :func:`capacity` (for experiments: smaller
    #: loses rate, below ``in + out - gcd`` it can deadlock)
    capacity: int | None = None
    #: a copy of the output's valid register per slice of the FIFO after the converter
    #: (``o`` a sliced stream: ``o.valid_slices``; the ``slice_ports`` face), each beside
    #: its slice's write enables
    valid_copies: int = field(default=0, metadata={"digest": "omit_default"})

    def __post_init__(self):
        if self.in_elems < 1 or self.out_elems < 1:
            raise ValueError("elements per beat must be positive")
        if self.frame % self.in_elems or self.frame % self.out_elems:
            raise ValueError(f"{self.in_elems} and {self.out_elems} elements per beat must "
                             f"both divide the {self.frame} elements of a frame")
        n = self.slots
        if self.in_elems != self.out_elems and n < max(self.in_elems, self.out_elems):
            raise ValueError(f"capacity {n} below one beat")

    @property
    def slots(self) -> int:
        """Element slots of the shift buffer."""
        return capacity(self.in_elems, self.out_elems) if self.capacity is None \
            else self.capacity


def capacity(in_elems: int, out_elems: int) -> int:
    """Element slots of the shift buffer that sustain the maximal rate."""
    if in_elems == out_elems:
        return 0
    return in_elems + out_elems + min(in_elems, out_elems) - math.gcd(in_elems, out_elems)


def golden(p: DWCParams, x: np.ndarray) -> np.ndarray:
    """Identity on the element sequence."""
    return np.asarray(x)


def timing(p: DWCParams, in_first: int, in_last: int) -> tuple[int, int]:
    """First and last output transfer of a frame whose first and last input beats were
    offered/taken at ``in_first`` and ``in_last``."""
    if p.in_elems == p.out_elems:
        return in_first, in_last
    first = in_first + math.ceil(p.out_elems / p.in_elems)
    last = max(in_last + math.ceil(p.in_elems / p.out_elems), in_first + p.frame // p.out_elems)
    return first, last


def cost(p: DWCParams) -> Cost:
    """Busy cycles per frame: the beats of the side with more beats."""
    beats_in, beats_out = p.frame // p.in_elems, p.frame // p.out_elems
    by_family, parts = res.estimate(resource_parts, p, RESOURCE_FIT)
    return Cost(cycles=max(beats_in, beats_out),
                latency=timing(p, 0, beats_in - 1)[1] + 1,
                registers=max(r.ff for r in by_family.values()), by_family=by_family,
                parts=parts)


#: calibration of :func:`resource_parts` (the converters of the conformance test and others
#: of 1 to 16 elements of 4 to 8 bits against Yosys: ECP5 0.87 to 1.15, iCE40 0.66 to 1.28)
RESOURCE_FIT: res.Fit = {
    "ecp5": {
        "lut4": {"slots": 1.104, "select": 0.768, "level": 1.222, "1": 0},
        "carry": {"level": 0.255, "1": 0},
    },
    "ice40": {
        "lut4": {"slots": 1.042, "select": 1.0, "level": 1.0, "1": 0},
        "carry": {"level": 0.355, "1": 0},
    },
}


def resource_parts(p: DWCParams, family: str) -> dict[str, res.Resources]:
    """The converter's hardware in the resource model's parts (see
    :mod:`rtl_templates.resources`): the slots and the multiplexer in front of each (shift by
    an output beat, or one of the input elements that can land there), their selects and
    enables, the fill level."""
    n, i, o, b = p.slots, p.in_elems, p.out_elems, p.bits
    if not n:
        return {}
    # an input element lands on a base that is a multiple of gcd(i, o), as the level always
    # is, selected by a flag of the one-hot level; a slot's landing word is a multiplexer of
    # the elements that can land there (one LUT per extra per bit), then the choice between
    # it and the shifted slot (one more where both exist); it holds through its
    # flip-flops' enable (a LUT per slot, and one per three more bases landing there)
    g = math.gcd(i, o)
    extra = enables = 0
    for j in range(n):
        lands = sum(1 for k in range(i) if 0 <= j - k <= n - i and (j - k) % g == 0)
        extra += max(0, (j < n - o) + lands - 1)
        enables += (lands > 0) + (lands + 1) // 3 * (lands > 1)
    lv = counter_bits(n + 1)
    # valid and ready registered: each from the comparisons of the four next levels
    # (and the valid's copies, one per slice of a sliced output); the one-hot level (a flag
    # per multiple of gcd(i, o), each a choice of four by the pop and push) and a base's
    # select (its flag before or after this cycle's pop)
    flags = n // g + 1
    bases = (n - i) // g + 1
    return {"slots": res.Resources(ff=n * b + lv + 2 + p.valid_copies + flags, lut4=b * extra),
            "select": res.Resources(lut4=enables + bases + flags),
            "level": res.add(lv, family) * 2 + res.compare(lv, family, True) * 8
            + res.Resources(lut4=2)}


def manifest(p: DWCParams) -> dict:
    return {"bits": p.bits, "in_elements": p.in_elems, "out_elements": p.out_elems}


def fold_space(p: DWCParams) -> FoldSpace:
    return fixed_fold(max(p.frame // p.in_elems, p.frame // p.out_elems))


class DWC(wiring.Component):
    """Re-packs a stream of ``bits``-bit elements from ``in_elems`` to ``out_elems`` per beat
    (see the module documentation)."""

    def __init__(self, p: DWCParams):
        self.p = p
        super().__init__({
            "i": In(stream.Signature(unsigned(p.bits * p.in_elems))),
            "o": Out(streams.signature(p.bits * p.out_elems, p.valid_copies)),
        })

    def elaborate(self, platform):
        m = Module()
        B, I, O = self.p.bits, self.p.in_elems, self.p.out_elems
        if I == O:
            m.d.comb += [self.o.payload.eq(self.i.payload), self.o.valid.eq(self.i.valid),
                         self.i.ready.eq(self.o.ready)]
            return m
        N = self.p.slots
        slots = [Signal(B, name=f"slot{j}", reset_less=True) for j in range(N)]
        level = Signal(range(N + 1))
        # valid (level >= O) and ready (level <= N - I) are registers of their own, so the
        # neighbours' handshake logic starts at a flip-flop: their next values are the
        # comparisons of the four possible next levels, chosen by this cycle's pop and push
        valid = Signal()
        ready = Signal(init=1)
        m.d.comb += [
            self.o.payload.eq(Cat(*slots[:O])),
            self.o.valid.eq(valid),
            self.i.ready.eq(ready),
        ]
        pop = Signal()
        push = Signal()
        m.d.comb += [pop.eq(self.o.valid & self.o.ready), push.eq(self.i.valid & self.i.ready)]
        m.d.sync += level.eq(level - pop * O + push * I)
        # the level only ever moves by I or O from 0: it is a multiple of gcd(I, O), and
        # ``at[v]`` is a register kept equal to ``level == v`` (one-hot: a move shifts it), so
        # where an input beat lands is a flag per base, not a decode of the level in front of
        # every bit (the output's ready, from the FIFO after the converter, and the input's
        # valid, from a fork before it, are late: they only choose between flags)
        g = math.gcd(I, O)
        at = {v: Signal(name=f"at{v}", init=int(v == 0)) for v in range(0, N + 1, g)}
        valid_next = Signal()                   # for the copies of ``valid``
        with m.Switch(Cat(push, pop)):
            for case, delta in ((0, 0), (1, I), (2, -O), (3, I - O)):
                with m.Case(case):
                    nxt = level + delta
                    m.d.sync += [valid.eq(nxt >= O), ready.eq(nxt <= N - I)]
                    m.d.sync += [at[v].eq(at.get(v - delta, 0)) for v in at]
                    if self.p.valid_copies:
                        m.d.comb += valid_next.eq(nxt >= O)
        if self.p.valid_copies:                 # each slice's valid: a kept copy of ``valid``
            m.d.comb += self.o.valid_slices.eq(Cat(*kept_copies(
                m, valid_next, self.p.valid_copies, "valid_c", reset=True)))

        with m.If(pop):
            for j in range(N - O):
                m.d.sync += slots[j].eq(slots[j + O])
        elems = lanes(self.i.payload, I, B)
        # an input beat lands on the first free slot after this cycle's pop: base b when the
        # level is b + O with a pop, b without (only bases that are multiples of gcd(I, O))
        # per slot: the element that lands there if a beat is pushed (chosen by the level's
        # flags and the pop), a wire kept apart from the push that loads it
        base = {b: Mux(pop, at.get(b + O, 0), at[b]) for b in range(0, N - I + 1, g)}
        for j in range(N):
            src = [(base[j - k], elems[k]) for k in range(I) if (j - k) in base]
            if not src:
                continue
            val = Signal(B, name=f"val{j}", attrs={"keep": 1})
            hit = Signal(name=f"hit{j}", attrs={"keep": 1})
            v = src[-1][1]
            for sel, e in reversed(src[:-1]):
                v = Mux(sel, e, v)
            m.d.comb += [val.eq(v), hit.eq(Cat(*(s for s, _ in src)).any())]
            with m.If(push & hit):
                m.d.sync += slots[j].eq(val)
        return m



def examples() -> list[Example]:
    """Small instances for the conformance test: wider, narrower, neither a multiple of the
    other, and equal beats."""
    out = []
    for bits, i, o, frame in ((8, 1, 4, 12), (8, 4, 1, 12), (6, 2, 3, 12), (4, 3, 2, 18),
                              (8, 2, 2, 8)):
        t = QType(bits, False)
        out.append(Example(DWCParams(bits, i, o, frame), (Port(t, i, frame),),
                           (Port(t, o, frame),), f"b{bits}-{i}to{o}"))
    return out


def slice_ports(p: DWCParams, port: str, widths: list[int]) -> DWCParams | None:
    """``p`` writing a sliced output stream of the slices ``widths``: a copy of the output's
    valid register per slice (None for the input, and for a converter that passes beats
    through)."""
    if port != "o" or len(widths) < 2 or p.in_elems == p.out_elems:
        return None
    return dataclasses.replace(p, valid_copies=len(widths))


register_block("dwc", params=DWCParams, component=DWC, golden=golden, cost=cost,
               timing=timing, manifest=manifest, fold_space=fold_space,
               slice_ports=slice_ports, examples=examples)
