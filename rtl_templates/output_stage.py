"""The one output stage every never-stalling block ends in.

::

    pipeline ──(data, en)──▶ write register ──▶ output FIFO ──▶ o
       ▲                     (a kept enable           │
       └── issue while ``room`` ◀── credits ◀─────────┘ a beat leaves: its credit returns
                                 per FIFO slice)         (``late_return`` cycles later)

A block's pipeline never stalls: it issues a step that will write an output beat only while
a credit is left (:class:`~hwgen.rtl_templates.credits.Credits`: ``room`` is a register, so
the block's input ready starts at a flip-flop); the beat enters the output FIFO, and its
credit comes back when it leaves on ``o``. Back-pressure only holds the issue stage, and
``o.valid`` (the FIFO's ``r_rdy``) never depends on ``o.ready``.

Everything a block's output needs for timing lives here, so a technique added here reaches
every block:

- **the write register**: the FIFO's write data and enable start at flip-flops
  (:data:`WRITE_STAGES` cycle), so no block's last logic (a compare chain, a multiplexer, a
  memory's read data) reaches the FIFO's storage in the same period; a block whose data is
  already a plain register says so (``registered=True``) and skips it;
- **a kept write enable per FIFO slice**: a wide FIFO is cut into slices
  (:func:`~hwgen.rtl_templates.memory.fifo_slices`), and each slice is written on a copy of
  the enable of its own (kept apart by the tools), not one flip-flop reaching every slice;
- **late credit return** (``late_return``): ``o.ready``, the reader's flag, reaches one
  register, not the credit logic;
- **the join** of several inputs (:meth:`OutputStage.join`): the step and each input's
  ready share no logic, each ready on a copy of ``room`` of its own;
- **the FIFO depth** from the block's pipeline depth (:func:`fifo_depth`), and the stage's
  cost (:func:`parts`) and latency (:func:`latency`).

The FIFO is :class:`~hwgen.rtl_templates.memory.BufferedFIFO` (cycle for cycle Amaranth's
``SyncFIFOBuffered``: a beat written in cycle t can leave in cycle t + 2), whose storage
follows the memory policy: registers up to 2 beats, then LUT RAM or block RAM.
"""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Signal

from hwgen.rtl_templates import resources as res
from hwgen.rtl_templates.credits import Credits
from hwgen.rtl_templates.kept import kept_copies
from hwgen.rtl_templates.memory import BufferedFIFO, fifo_slices
from hwgen.rtl_templates.pipeline import counter_bits

#: cycles the write register adds between a block's last stage and the FIFO
WRITE_STAGES = 1
#: a beat written into the FIFO in cycle t can leave in cycle t + 2
FIFO_STAGES = 2


def latency(registered: bool = False) -> int:
    """Cycles from a block's last stage (the cycle its ``en`` is high) to the earliest output
    transfer of that beat: the write register (unless ``registered``) and the FIFO's two."""
    return FIFO_STAGES + (0 if registered else WRITE_STAGES)


def fifo_depth(depth: int, late_return: int = 0) -> int:
    """The output FIFO's beats for a block whose step reaches the output ``depth`` cycles
    after it issued (this stage's :func:`latency` included). The credit a step spends in cycle
    t comes back for a step in cycle t + depth + 1 + late_return, so that many beats keep one
    beat per cycle with the output always ready; one more lets a reader that takes a beat a
    cycle late cost no issue slot."""
    return depth + 2 + late_return


def parts(width: int, depth: int, family: str, registered: bool = False,
          late_return: int = 0) -> dict[str, res.Resources]:
    """The stage's resources (:mod:`rtl_templates.resources`): ``fifo`` (the FIFO of
    :func:`fifo_depth` (``depth``, ``late_return``) beats and its credit counter) and
    ``out_reg`` (the write register and each slice's enable copy; empty when
    ``registered``)."""
    beats = fifo_depth(depth, late_return)
    cb = counter_bits(beats + 1)
    credits = res.Resources(ff=cb + 2 + late_return, lut4=cb + 4, carry=cb / 2)
    out = {"fifo": res.fifo(width, beats, family) + credits}
    if not registered:
        out["out_reg"] = res.Resources(ff=width + len(fifo_slices(width, beats)))
    return out


def join_cost(inputs: int) -> res.Resources:
    """What :meth:`OutputStage.join` adds to a block's control: a copy of ``room`` per input
    and its next value's LUT."""
    return res.Resources(ff=inputs, lut4=inputs)


class OutputStage(Credits):
    """Output FIFO driving stream ``o`` (``width`` bits), its credits and its write register,
    for a block whose step reaches the output ``depth`` cycles after it issued (this stage's
    :func:`latency` included).

    ``registered``: the data the block writes is already a plain register (no write
    register). ``late_return``: a beat taken on ``o`` returns its credit that many cycles
    later, through registers (``taken_late``: the first of them); the FIFO gets as many
    beats more, so the block never waits longer for room.

    ``slice_ports``: the FIFO's per-slice read ports (``fifo.r_en_slices``,
    ``fifo.r_rdy_slices``) for a reader keeping a ready per slice; ``o.valid`` and the
    credits follow the first slice.

    The block calls :meth:`spend` (a step that will write a beat issues) and :meth:`write`
    (its last stage), and issues only while ``room``."""

    def __init__(self, m: Module, o, width: int, depth: int, *, registered: bool = False,
                 late_return: int = 0, slice_ports: bool = False):
        self.width, self.registered = width, registered
        self.depth = fifo_depth(depth, late_return)
        self.n_slices = len(fifo_slices(width, self.depth))
        m.submodules.ofifo = self.fifo = BufferedFIFO(
            width=width, depth=self.depth, slice_ports=slice_ports,
            w_slice_ports=not registered and self.n_slices > 1)
        m.d.comb += [o.payload.eq(self.fifo.r_data), o.valid.eq(self.fifo.r_rdy),
                     self.fifo.r_en.eq(o.ready)]
        taken = o.valid & o.ready
        #: the first register of a late return (None without)
        self.taken_late = None
        for k in range(late_return):
            t = Signal(name=f"taken_late{k if k else ''}")
            m.d.sync += t.eq(taken)
            if k == 0:
                self.taken_late = t
            taken = t
        super().__init__(m, self.depth, taken)

    def write(self, data, en):
        """The block's last stage: ``data`` (``width`` bits) enters the FIFO when ``en``
        (after the write register unless ``registered``)."""
        m = self._m
        if self.registered:
            m.d.comb += [self.fifo.w_data.eq(data), self.fifo.w_en.eq(en)]
            return
        w_data = Signal(self.width, name="out_data", reset_less=True)
        m.d.sync += w_data.eq(data)
        m.d.comb += self.fifo.w_data.eq(w_data)
        if self.n_slices == 1:
            w_en = Signal(name="out_en")
            m.d.sync += w_en.eq(en)
            m.d.comb += self.fifo.w_en.eq(w_en)
        else:
            m.d.comb += self.fifo.w_en_slices.eq(
                Cat(*kept_copies(m, en, self.n_slices, "out_en", reset=True)))

    def join(self, inputs) -> Signal:
        """Takes a beat from every stream of ``inputs`` together, when all are valid and a
        credit is left: the step (``take``, spent here). Each input's ready is the other
        inputs' valids and a copy of ``room`` of its own (:meth:`room_copy`), so the step
        shares no logic with the readies: it is one LUT from the valids, beside the block,
        and each ready one LUT beside its FIFO (with ``room & i0.valid`` shared between the
        step and ``i1``'s ready, ResNet-8's residual add ran room → i0's FIFO → i1's FIFO →
        the credits: 6.5 ns of route). Cost: :func:`join_cost`."""
        m = self._m
        take = Signal(name="take")
        m.d.comb += take.eq(self.room & Cat(*(s.valid for s in inputs)).all())
        self.spend(take)
        for k, s in enumerate(inputs):
            room = self.room_copy(f"room_i{k}")
            others = Cat(*(t.valid for j, t in enumerate(inputs) if j != k))
            m.d.comb += s.ready.eq(room & others.all())
        return take

    def write_slices(self, data, ens):
        """As :meth:`write` for a ``registered`` stage whose block keeps a write enable per
        FIFO slice itself (``ens[k]``: slice k's, all equal, each a register beside its
        slice)."""
        if not self.registered or self.n_slices != len(ens):
            raise ValueError("write_slices needs registered=True and one enable per slice")
        self.fifo.w_slice_ports = True
        self._m.d.comb += [self.fifo.w_data.eq(data), self.fifo.w_en_slices.eq(Cat(*ens))]
