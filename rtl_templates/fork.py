"""Stream fork: every input beat goes to each of ``n_outputs`` output streams exactly once.

Stream contract
    ``i``: ``width``-bit beats. ``o0``, ``o1``, ... ``o{n-1}``: the same beats, in order.

Behaviour
    The current input beat is offered on every output whose "taken" flag is clear:
    ``o_k.valid = i.valid & ~taken_k`` (it never depends on any ready). When output k takes
    the beat while others have not yet, ``taken_k`` is set; the input beat is consumed (and
    all flags cleared) in the cycle in which the last output still owing it takes it:
    ``i.ready = AND_k(taken_k | o_k.ready)``. So the outputs may accept at different times,
    nothing is stored besides one flag per output, and a beat passes in the cycle it arrives
    (latency 0) when every output is ready. ``i.ready`` depends combinationally on the
    outputs' ready (and, through a join such as :class:`rtl_templates.add.AddBlock`, possibly
    on ``i.valid``); there is no valid → ready → valid loop because no valid depends on ready.

Deadlock and rate
    A fork whose branches meet again (a residual join) keeps the beats of the two branches in
    lockstep: branch A can run ahead of branch B only by as many beats as B's path can hold.
    Without storage on the shorter branch the join waits for every beat to cross the longer
    one (rate 1/(latency difference + 1)); a block on the longer branch that must see K beats
    before it emits anything deadlocks the graph unless the shorter branch buffers ≥ K beats.
    Sizing those FIFOs is the graph builder's job (see ``tests/blocks/test_join_blocks.py``).

Golden: identity to every output. Cost: one beat per cycle, no memory, ``n_outputs`` flags.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from amaranth.hdl import Module, Signal, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from hwgen.rtl_templates import resources as res
from hwgen.rtl_templates.block import Example, FoldSpace, Port, fixed_fold, register_block
from hwgen.rtl_templates.cost import Cost
from hwgen.rtl_templates.quant import QType

#: cycles from an input transfer to the same beat's output transfer (outputs ready)
LATENCY = 0


@dataclass(frozen=True)
class ForkParams:
    width: int               # bits per beat
    n_outputs: int
    beats: int               # beats per frame


def golden(p: ForkParams, x: np.ndarray) -> list[np.ndarray]:
    """The input, once per output."""
    x = np.asarray(x)
    return [x.copy() for _ in range(p.n_outputs)]


def timing(p: ForkParams, in_first: int, in_last: int) -> tuple[int, int]:
    """First and last output transfer (every output ready) of a frame whose first and last
    input beats arrived at ``in_first`` and ``in_last``."""
    return in_first + LATENCY, in_last + LATENCY


def cost(p: ForkParams) -> Cost:
    """``p.beats`` per frame: one per cycle; only the per-output taken flags are state."""
    by_family = {f: res.Resources(ff=p.n_outputs, lut4=2 * p.n_outputs + 1)
                 for f in res.FAMILIES}
    return Cost(cycles=p.beats, latency=timing(p, 0, p.beats - 1)[1] + 1,
                registers=p.n_outputs, by_family=by_family)


def manifest(p: ForkParams) -> dict:
    return {"width": p.width, "n_outputs": p.n_outputs}


def fold_space(p: ForkParams) -> FoldSpace:
    return fixed_fold(p.beats)


class Fork(wiring.Component):
    """Duplicates stream ``i`` onto ``o0`` ... ``o{n_outputs-1}``."""

    def __init__(self, p: ForkParams):
        if p.n_outputs < 1:
            raise ValueError("a fork needs at least one output")
        self.p = p
        self.n_outputs = p.n_outputs
        members = {"i": In(stream.Signature(unsigned(p.width)))}
        members.update({f"o{k}": Out(stream.Signature(unsigned(p.width)))
                        for k in range(p.n_outputs)})
        super().__init__(members)

    @property
    def outputs(self) -> list:
        return [getattr(self, f"o{k}") for k in range(self.n_outputs)]

    def elaborate(self, platform):
        m = Module()
        outs = self.outputs
        taken = [Signal(name=f"taken{k}") for k in range(self.n_outputs)]
        done = [Signal(name=f"done{k}") for k in range(self.n_outputs)]
        for o, t, d in zip(outs, taken, done):
            m.d.comb += [
                o.payload.eq(self.i.payload),
                o.valid.eq(self.i.valid & ~t),
                d.eq(t | o.ready),
            ]
        all_done = Signal()
        acc = done[0]
        for d in done[1:]:
            acc = acc & d
        m.d.comb += [all_done.eq(acc), self.i.ready.eq(acc)]
        with m.If(self.i.valid):
            with m.If(all_done):
                m.d.sync += [t.eq(0) for t in taken]
            with m.Else():
                m.d.sync += [t.eq(d) for t, d in zip(taken, done)]
        return m



def examples() -> list[Example]:
    """Small instances for the conformance test: two and three outputs."""
    out = []
    for width, n, beats in ((8, 2, 9), (12, 3, 6)):
        port = Port(QType(width, False), 1, beats)
        out.append(Example(ForkParams(width, n, beats), (port,), (port,) * n, f"w{width}-x{n}"))
    return out


register_block("fork", params=ForkParams, component=Fork, golden=golden, cost=cost,
               timing=timing, manifest=manifest, fold_space=fold_space,
               examples=examples)
