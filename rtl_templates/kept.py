"""Kept copies: registers the tools must not merge, one per place that reads them.

One flip-flop that drives hundreds of loads spread over the die (a FIFO's write enable, a
multiplexer's select, a ROM's address, the operands of many multiplier tiles) costs more in
routing than a clock period. A *kept copy* is a register of its own for each group of loads,
placed beside them: it carries the Yosys ``keep`` attribute, and the synthesis runner
(``boards/synth.py: KEEP_COPIES``) puts that attribute on the flip-flops themselves, since
``opt_merge`` would otherwise merge flip-flops with the same input into one again.

Three shapes, all here or built from what is here:

- :func:`kept_copy`: ``v`` registered, a cycle behind it (data, select and enable copies);
- :func:`kept_follower`: a register always *equal* to another one (no cycle behind), since it
  computes the same next value from a feedback of its own (``Credits.room_copy``);
- a copy of a whole step control (the matrix unit's ``IssueControl`` per input slice, the
  window generator's ``StepControl`` per slice of its window and output word): the same
  state machine built again under a suffix, every register of it a follower of the first.

Data copies (more than one bit) have no reset (as :func:`~rtl_templates.pipeline.reg`): a
reset would put a LUT (``~rst & v``) before every copy, and the tools share that LUT among
the copies of one source bit, which are then fed from one place again. One-bit control
copies (valids, enables) take the reset when ``reset`` says so.
"""
from __future__ import annotations

from amaranth.hdl import Module, Shape, Signal


def kept_copy(m: Module, v, name: str, *, reset: bool | None = None, en=None,
              shape=None, init: int = 0) -> Signal:
    """``v`` registered in a copy the tools keep apart (of ``shape``, default ``v``'s).
    ``reset``: whether the copy has the reset (default: one bit does, data does not).
    ``en``: load only then (default: every cycle, the form a tile's register absorbs).
    ``init``: its value after configuration and reset (a copy of a register that starts
    at ``init``, given that register's next value as ``v``)."""
    shape = Shape.cast(v.shape() if shape is None else shape)
    r = Signal(shape, name=name, attrs={"keep": 1}, init=init,
               reset_less=(shape.width > 1) if reset is None else not reset)
    if en is None:
        m.d.sync += r.eq(v)
    else:
        with m.If(en):
            m.d.sync += r.eq(v)
    return r


def kept_copies(m: Module, v, n: int, name: str, *, reset: bool | None = None,
                en=None, init: int = 0) -> list[Signal]:
    """``n`` kept copies of ``v`` registered (``name_0`` … ``name_{n-1}``), as
    :func:`kept_copy`."""
    return [kept_copy(m, v, f"{name}_{k}", reset=reset, en=en, init=init) for k in range(n)]


def kept_follower(m: Module, init: int, next_of, name: str) -> Signal:
    """A one-bit register equal in every cycle to a register whose next value is
    ``next_of(itself)`` and whose initial value is ``init``: it computes that next value
    from its own feedback, so the tools keep it apart from the register it follows (and the
    loads hung on it are its own)."""
    r = Signal(init=init, name=name, attrs={"keep": 1})
    m.d.sync += r.eq(next_of(r))
    return r
