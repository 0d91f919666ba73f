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
"""
from __future__ import annotations

from amaranth.hdl import unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out


class SlicedSignature(wiring.Signature):
    """A valid/ready stream of ``width``-bit payloads with ``slices`` per-slice flags:
    ``valid_slices`` (bit k: slice k's valid, from the writer) and ``ready_slices`` (bit k:
    slice k's ready, from the reader), besides ``payload``, ``valid`` and ``ready``."""

    def __init__(self, width: int, slices: int):
        if slices < 2:
            raise ValueError(f"a sliced stream has at least two slices, not {slices}")
        self.width, self.slices = width, slices
        super().__init__({"payload": Out(unsigned(width)), "valid": Out(1), "ready": In(1),
                          "valid_slices": Out(slices), "ready_slices": In(slices)})

    def __eq__(self, other):
        return (isinstance(other, SlicedSignature)
                and (self.width, self.slices) == (other.width, other.slices))

    def __hash__(self):
        return hash((SlicedSignature, self.width, self.slices))

    def __repr__(self):
        return f"SlicedSignature({self.width}, {self.slices})"


def signature(width: int, slices: int = 0) -> wiring.Signature:
    """A stream of ``width``-bit payloads: :class:`amaranth.lib.stream.Signature`, or with
    ``slices`` (≥ 2) a :class:`SlicedSignature`."""
    return SlicedSignature(width, slices) if slices else stream.Signature(unsigned(width))
