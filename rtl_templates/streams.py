"""Stream signatures: ``amaranth.lib.stream``'s, and the sliced stream of a wide FIFO.

A FIFO whose word is wider than one slice (:func:`~hwgen.rtl_templates.memory.fifo_slices`)
keeps each slice's pointers and flags apart, so no one control reaches every slice's
enables across the die. Between such a FIFO and a neighbour that can drive the slices one
by one (a matrix unit keeping a copy of its issue control per slice; a window generator whose
own output FIFO has the same slices), the stream carries a valid and a ready per slice as
well: :class:`SlicedSignature`. Both ends declare it on their ``i``/``o`` port, so
``wiring.connect`` wires the slices with the stream and assembly matches nothing by name.

The per-slice flags are all equal to the stream's ``valid``/``ready`` cycle by cycle; they are
separate wires so that each slice's enables start beside that slice. Whether a block can take
a sliced stream on a port is its registry face ``slice_ports``
(:mod:`~hwgen.rtl_templates.block`).

A reader whose input valid reaches many places (a window generator's copies of its step
control, each beside the bits it enables) takes *copies* of the valid as well:
``valid_copies``, each bit a register of the FIFO before it, equal to ``valid`` in every
cycle (:class:`~hwgen.rtl_templates.memory.BufferedFIFO`'s ``r_rdy_copies``), so no one
flip-flop's net spans the reader's copies. The reader's registry face ``valid_copies`` asks
for them.
"""
from __future__ import annotations

from amaranth.hdl import unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out


class SlicedSignature(wiring.Signature):
    """A valid/ready stream of ``width``-bit payloads with ``slices`` per-slice flags:
    ``valid_slices`` (bit k: slice k's valid, from the writer) and ``ready_slices`` (bit k:
    slice k's ready, from the reader), and with ``copies`` the writer's ``valid_copies``,
    besides ``payload``, ``valid`` and ``ready`` (``slices`` 0: no per-slice flags)."""

    def __init__(self, width: int, slices: int, copies: int = 0):
        if slices == 1 or slices < 0 or copies < 0 or not (slices or copies):
            raise ValueError(f"a sliced stream has at least two slices or a valid copy, not "
                             f"{slices} slices and {copies} copies")
        self.width, self.slices, self.copies = width, slices, copies
        members = {"payload": Out(unsigned(width)), "valid": Out(1), "ready": In(1)}
        if slices:
            members.update(valid_slices=Out(slices), ready_slices=In(slices))
        if copies:
            members.update(valid_copies=Out(copies))
        super().__init__(members)

    def __eq__(self, other):
        return (isinstance(other, SlicedSignature)
                and (self.width, self.slices, self.copies)
                == (other.width, other.slices, other.copies))

    def __hash__(self):
        return hash((SlicedSignature, self.width, self.slices, self.copies))

    def __repr__(self):
        return f"SlicedSignature({self.width}, {self.slices}, {self.copies})"


def signature(width: int, slices: int = 0, copies: int = 0) -> wiring.Signature:
    """A stream of ``width``-bit payloads: :class:`amaranth.lib.stream.Signature`, or with
    ``slices`` (≥ 2) or ``copies`` of the valid a :class:`SlicedSignature`."""
    if slices or copies:
        return SlicedSignature(width, slices, copies)
    return stream.Signature(unsigned(width))
