"""Credit counters: the output side every never-stalling block pipeline shares
(:mod:`~hwgen.rtl_templates.output_stage` builds it around them).

A block's pipeline never stalls: results flow into an output FIFO, and the issue stage may
start a step that will write a beat only while a credit is left. Credits count the FIFO
places not yet promised: one is spent when such a step issues, one comes back when a beat
leaves on ``o``. So the FIFO never overflows, back-pressure only holds the issue stage, and
``o.valid`` (the FIFO's ``r_rdy``) never depends on ``o.ready``.

``room`` (a credit is left) is a register of its own, so the issue stage's ready starts at a
flip-flop: its next value comes from ``credits == 1`` (a compare of the register) and the
late ``issued`` and ``taken`` in one level, not from the credit adder. A step issues only
while ``room`` holds, so the counter reaches 0 only from 1 by an issue without a beat taken:
``room' = taken | (room & ~(credits == 1 & issued))``, always equal to ``credits != 0``.
"""
from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal

from hwgen.rtl_templates.kept import kept_follower
from hwgen.rtl_templates.pipeline import up_down


class Credits:
    """A credit counter starting at ``depth``: ``room`` and ``one`` are registers kept equal to
    ``credits != 0`` and ``credits == 1``; ``taken`` (a beat left the FIFO: its credit comes
    back) is read as given. A block keeps several in step, one per copy of its issue
    control, by feeding them the same ``taken`` and ``issued``."""

    def __init__(self, m: Module, depth: int, taken, suffix: str = ""):
        self.credits = Signal(range(depth + 1), init=depth, name=f"credits{suffix}")
        self.room = Signal(init=int(depth != 0), name=f"room{suffix}")
        #: a register always equal to ``credits == 1`` (no compare on the issue's path)
        self.one = Signal(init=int(depth == 1), name=f"credits_one{suffix}")
        self.taken = taken
        self._m = m

    def room_after(self, issued):
        """``room``'s value in the next cycle if ``issued``."""
        return self.taken | (self.room & ~(self.one & issued))

    def spend(self, issued):
        """``issued``: a step that will write one output beat issues this cycle (only while
        ``room``)."""
        self._last = self.one & issued
        #: ``room``'s value in the next cycle (for a register the caller keeps in step)
        self.room_next = self.room_after(issued)
        # ``taken`` (the FIFO's read, a wide net) and ``issued`` arrive late
        taken = self.taken
        self._m.d.sync += [self.credits.eq(up_down(self._m, self.credits, taken, issued)),
                           self.room.eq(self.room_next),
                           self.one.eq(Mux(taken == issued, self.one,
                                           Mux(taken, self.credits == 0, self.credits == 2)))]

    def room_copy(self, name: str) -> Signal:
        """A register always equal to ``room`` with a feedback of its own (so the tools keep
        it apart from ``room``): for a copy of the issue control, whose fan-out would
        otherwise all hang on ``room``'s one flip-flop. Only after :meth:`spend`."""
        return kept_follower(self._m, self.room.init, lambda r: self.taken | (r & ~self._last),
                             name)
