"""Window-parallel sliding-window generator (``swg_par``): feature map stream → window stream
with many window elements per beat, for a convolution whose input has few channels.

The sliding-window generator of :mod:`rtl_templates.swg` emits one beat per cycle of at most
``C`` elements, so a layer reading a 1- or 3-channel map needs ``OH*OW*KH*KW`` cycles per
frame however parallel its matrix unit is. This block emits ``P`` (``window_par``) elements
of a window per beat, up to the whole window, so the matrix unit behind it can take
``SIMD = P``.

Stream contract
    ``i``: one frame = an ``H×W×C`` feature map, channel-last, one pixel per beat (channel
    ``c`` in bits ``[c*bits, (c+1)*bits)``).
    ``o``: for each output pixel ``(oh, ow)`` in raster order, its window in ``(kh, kw, c)``
    order — :mod:`rtl_templates.swg`'s standard order, the column order of a convolution's
    weight matrix — in ``B = KH*KW*C / P`` beats: window element ``k`` in lane ``k mod P`` of
    beat ``k // P``. ``P`` is any divisor of ``KH*KW*C``; a matrix unit with ``SIMD = P``
    reads its synapse fold ``sf`` as beat ``sf``, so its weights need no other layout.
    Geometry (stride, pads, dilation, ``pad_value``, ONNX floor semantics) as in
    :mod:`rtl_templates.swg`; :func:`golden` is that block's golden function.
    With ``depthwise_pe`` = ``D`` > 0 the window is emitted in the depthwise order of
    :mod:`rtl_templates.swg` instead, ``(cb, kh, kw, ci)`` with channel ``c = cb*D + ci``:
    a depthwise vector unit with ``PE = D`` and ``SIMD = P / D`` kernel positions reads
    ``SIMD`` kernel positions of ``PE`` channels per beat.

Hardware
    The generator walks the padded map (``Hp = H + top + bottom`` rows by ``Wp = W + left +
    right`` columns) in raster order, one *step* per position, frames back to back: a
    position inside the map takes one input beat, a padding position takes ``pad_value``.
    A step pushes a column of ``KH`` pixels — the step's pixel and those ``DH``, ``2*DH``, …
    rows above — into a shift register of ``EW = (KW - 1)*DW + 1`` columns. The pixels above
    come from ``KH - 1`` delay lines of ``DH*Wp`` steps, line ``j`` delaying element ``j - 1``
    of the column: a RAM with one write and one read port each (``memory.ram``: LUT RAM or
    block RAM), written at step ``k`` at address ``k mod N`` and read at ``k + 1 mod N`` in
    the same cycle, so the word the next step needs is waiting in the read register.

    After the step at padded position ``(y, x)`` the shift register holds the window whose
    last row and column are ``y`` and ``x``. When that is an output window (``y - EH + 1 =
    oh*SH`` for an output row ``oh``, and likewise for the column), it is emitted in ``B``
    beats, one per cycle from the next cycle on; the next step waits for the cycle of the
    last beat (a step and the last beat share a cycle). Whether a position is inside the map
    or ends an output window is read from constant masks one step ahead into registers
    (the next position's ``inside`` two steps ahead: the copies of the step control load it
    from one flip-flop).
    The input's ready, ``i.valid & inside & free`` (a step at a position inside the map),
    is the input's valid and a register (``take``) kept equal to ``inside & free`` from the
    next values of the flags, the beat index and the output credits (the expressions that
    update them): only an AND with the valid lies between flip-flops and the enables of
    the FIFO before the block.

Pipeline (a beat issued in cycle t)
    t: beat index → the beat's ``P`` elements (a ``B``-way multiplexer of the window
    register), registered; t+1: → output FIFO; t+3: earliest output transfer
    (:data:`PIPELINE_DEPTH`). A credit counter lets a beat issue only while the output FIFO
    is sure to have room (:mod:`rtl_templates.output_stage`; a beat taken returns its credit a
    cycle late, through a register, and the FIFO is a beat deeper for it); the pipeline
    never stalls.

Cost model
    With the input offered every cycle and the output always ready no step waits but for the
    beats of the window before it: a frame takes ``Hp*Wp + OH*OW*(B - 1)`` cycles, back to
    back (``cost().cycles``). :func:`timing` walks the steps of one frame with the input beats
    offered when the caller says; it is exact for this hardware (the tests compare it beat
    for beat). ``memory_bits``: the delay lines ``(KH - 1)*DH*Wp*C*bits`` and the FIFO;
    registers: the window (``EW*KH*C*bits``), the output beat and the counters.
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hwgen.rtl_templates import output_stage, streams, swg
from hwgen.rtl_templates import resources as res
from hwgen.rtl_templates.block import Example, FoldSpace, Port, divisors, register_block
from hwgen.rtl_templates.cost import Cost
from hwgen.rtl_templates.memory import fifo_slices, ram
from hwgen.rtl_templates.pipeline import counter_bits
from hwgen.rtl_templates.quant import QType
from hwgen.rtl_templates.words import pack_word

#: cycles from issuing a beat to its earliest output transfer: the beat's word is a register
#: (the output stage's write register is left out)
PIPELINE_DEPTH = 1 + output_stage.latency(registered=True)
#: a beat taken on ``o`` returns its credit a cycle late, through a register
#: (:class:`~hwgen.rtl_templates.output_stage.OutputStage`' ``late_return``): the reader's
#: ready (a wide FIFO's first slice's ``w_rdy``) reaches that one flip-flop, not the credit
#: logic of every copy of the control (the digits CNN's path at seed 1: 8.4 ns)
LATE_RETURN = 1
#: output FIFO depth (:func:`output_stage.fifo_depth`)
FIFO_DEPTH = output_stage.fifo_depth(PIPELINE_DEPTH, LATE_RETURN)


#: most bits of the window shift register one copy of the step control enables
SHIFT_GROUP_BITS = 32


@dataclass(frozen=True)
class SWGParParams:
    """Everything that defines one window-parallel SWG instance."""
    in_shape: tuple[int, int, int]     # (H, W, C)
    kernel: tuple[int, int]            # (KH, KW)
    stride: tuple[int, int]            # (SH, SW)
    pads: tuple[int, int, int, int]    # (top, left, bottom, right)
    pad_value: int
    qtype: QType
    window_par: int                    # P: window elements per output beat
    dilation: tuple[int, int] = (1, 1)
    depthwise_pe: int = 0              # > 0: depthwise order, blocks of this many channels
    #: the reader (a FIFO of the same slices, or a unit keeping an issue control per slice)
    #: takes the output FIFO's slices one by one: each slice hands over on ports of its own
    #: (``o.valid_slices``, ``o.ready_slices``; the ``slice_ports`` face), not through
    #: ``o.valid`` and ``o.ready``
    out_slice_ports: bool = field(default=False, metadata={"digest": "omit_default"})
    #: the FIFO before the block gives a copy of its valid per copy of the step control
    #: (``i.valid_copies``, the ``valid_copies`` face): each copy's step starts at a
    #: register beside it, not at one valid whose net spans every copy
    in_valid_copies: bool = field(default=False, metadata={"digest": "omit_default"})

    @functools.cached_property
    def plan(self) -> SWGParPlan:
        """The generator's structure (:func:`plan`)."""
        return plan(self)

    @property
    def slice_widths(self) -> list[int]:
        """The output FIFO's slices (:func:`out_fifo_slices`), which a reader with no FIFO
        in between takes one by one."""
        return out_fifo_slices(self)

    def __post_init__(self):
        w = self.window   # checks the geometry
        for name in ("in_shape", "kernel", "stride", "pads", "dilation"):
            object.__setattr__(self, name, getattr(w, name))
        if self.window_par < 1 or w.window_elems % self.window_par:
            raise ValueError(f"window_par={self.window_par} does not divide the "
                             f"{w.window_elems} elements of a window")
        if self.depthwise_pe and (self.depthwise_pe < 0 or w.simd % self.depthwise_pe):
            raise ValueError(f"depthwise_pe={self.depthwise_pe} does not divide the "
                             f"{w.simd} channels")

    @property
    def order(self) -> swg.SWGParams:
        """The standard generator emitting this block's element order."""
        if not self.depthwise_pe:
            return self.window
        return dataclasses.replace(self.window, simd=self.depthwise_pe, depthwise=True)

    @property
    def window(self) -> swg.SWGParams:
        """The same geometry as a standard-order generator, one pixel per beat."""
        return swg.SWGParams(self.in_shape, self.kernel, self.stride, self.pads,
                             self.pad_value, self.qtype, simd=self.in_shape[2],
                             dilation=self.dilation)

    @property
    def simd(self) -> int:
        """Input elements per beat (one pixel)."""
        return self.in_shape[2]

    @property
    def padded(self) -> tuple[int, int]:
        H, W, _ = self.in_shape
        t, l, b, r = self.pads
        return H + t + b, W + l + r

    @property
    def out_shape(self) -> tuple[int, int]:
        return self.window.out_shape

    @property
    def span(self) -> tuple[int, int]:
        return self.window.span

    @property
    def beats_per_window(self) -> int:
        return self.window.window_elems // self.window_par

    @property
    def in_beats(self) -> int:
        H, W, _ = self.in_shape
        return H * W

    @property
    def out_beats(self) -> int:
        OH, OW = self.out_shape
        return OH * OW * self.beats_per_window

    @property
    def out_elems(self) -> int:
        return self.window.out_elems

    @property
    def line_words(self) -> int:
        """Steps of one delay line: ``DH`` padded rows."""
        return self.dilation[0] * self.padded[1]

    def masks(self) -> tuple[list[bool], list[bool], list[bool], list[bool]]:
        """Per padded row and column: inside the map; last row / column of an output window."""
        H, W, _ = self.in_shape
        t, l, _, _ = self.pads
        Hp, Wp = self.padded
        (EH, EW), (SH, SW), (OH, OW) = self.span, self.stride, self.out_shape

        def ends(n, e, s, o):
            return [y >= e - 1 and (y - e + 1) % s == 0 and (y - e + 1) // s < o
                    for y in range(n)]
        return ([t <= y < t + H for y in range(Hp)], [l <= x < l + W for x in range(Wp)],
                ends(Hp, EH, SH, OH), ends(Wp, EW, SW, OW))


def golden(p: SWGParParams, x):
    """[frames, H*W*C] (channel-last) → [frames, OH*OW*KH*KW*C] in (kh, kw, c) order (the
    depthwise order with ``depthwise_pe``)."""
    return swg.golden(p.order, x)


# ---------------------------------------------------------------------------- cost

@functools.lru_cache(maxsize=256)
def _walk(p: SWGParParams, in_first: int, in_last: int) -> tuple[int, int]:
    """Issue cycles of the first and last output beat of one frame on an idle block whose
    input beats are offered evenly spread from ``in_first`` to ``in_last``."""
    n = p.in_beats
    span = in_last - in_first
    rin, cin, rwin, cwin = p.masks()
    B = p.beats_per_window
    free, k = in_first, 0
    first = last = None
    for y, ry in enumerate(rin):
        for x, cx in enumerate(cin):
            t = free
            if ry and cx:
                t = max(t, in_first + (k * span // (n - 1) if n > 1 else 0))
                k += 1
            if rwin[y] and cwin[x]:
                first = t + 1 if first is None else first
                last = t + B
                free = t + B
            else:
                free = t + 1
    return first, last


def timing(p: SWGParParams, in_first: int, in_last: int) -> tuple[int, int]:
    """First and last output transfer of one frame (see :func:`_walk`), output always
    ready."""
    first, last = _walk(p, in_first, in_last)
    return first + PIPELINE_DEPTH, last + PIPELINE_DEPTH


def longest_gap(p: SWGParParams) -> int:
    """The longest run of steps that emit no window, frames back to back (the steps from
    the last window of a frame to the first of the next are one run): cycles in which a
    consumer slower than this block gets nothing from it but what a FIFO between holds."""
    _, _, rwin, cwin = p.masks()
    emits = [bool(ry and cx) for ry in rwin for cx in cwin]
    if not any(emits):
        return len(emits)
    k = emits.index(True)
    run = best = 0
    for e in emits[k + 1:] + emits[:k + 1]:     # cyclic, starting after an emitting step
        run = 0 if e else run + 1
        best = max(best, run)
    return best


def frame_cycles(p: SWGParParams) -> int:
    """Cycles per frame, back to back: one per padded position, ``B - 1`` more per window."""
    Hp, Wp = p.padded
    OH, OW = p.out_shape
    return Hp * Wp + OH * OW * (p.beats_per_window - 1)


def cost(p: SWGParParams) -> Cost:
    bits = p.qtype.bits
    by_family, parts = res.estimate(resource_parts, p, RESOURCE_FIT)
    return Cost(
        cycles=frame_cycles(p),
        latency=timing(p, 0, p.in_beats - 1)[1] + 1,
        memory_bits=(p.kernel[0] - 1) * p.line_words * p.simd * bits
        + FIFO_DEPTH * p.window_par * bits,
        registers=max(r.ff for r in by_family.values()), by_family=by_family, parts=parts,
    )


#: calibration of :func:`resource_parts` (``benchmarks/resources.py --fit`` over the test grid)
RESOURCE_FIT: res.Fit = {
    "ecp5": {
        "lut4": {"ctl": 1.271, "data": 1.225, "fifo": 1.151, "line": 1.046, "1": 0.015},
        "carry": {"ctl": 0.231, "fifo": 0.343, "1": 0},
    },
    "ice40": {
        "lut4": {"ctl": 1.01, "data": 1.052, "fifo": 1.004, "line": 0.968, "1": 0.001},
        "carry": {"ctl": 0.622, "fifo": 0.599, "1": 0},
    },
}


def resource_parts(p: SWGParParams, family: str) -> dict[str, res.Resources]:
    """The delay lines, the window register, the output multiplexer and register, the
    output FIFO, the counters and flags (and their copies for the window register and the
    output word's slices)."""
    KH = p.kernel[0]
    EW = p.span[1]
    Hp, Wp = p.padded
    pix = p.simd * p.qtype.bits
    width = p.window_par * p.qtype.bits
    N = p.line_words
    cb = counter_bits
    line = (res.memory(pix, N, family, rom=False, rw="dont_care") if N > 1
            else res.Resources(ff=2 * pix))
    # 3: flags, ready (the credits and their late return: the output stage's part)
    ctl = cb(Hp) + cb(Wp) + 2 * cb(N) + cb(p.beats_per_window) + 3
    # the shift register's copies of the step control: held, inside and room flags, a beat
    # index
    pl = p.plan
    copies = pl.control_copies * (3 + cb(p.beats_per_window))
    # the copies of the output FIFO write's valid
    copies += len(set(pl.write_valids) - {None})
    ctl += copies
    # shift_out: the output word is the first beat or the shift register's low beat (a
    # multiplexer per bit), the shift register loads beats 1..B-1 or shifts (a multiplexer
    # per bit) but for its top beat, which loads beat B-1 or the zero shifted in: the
    # flip-flops' synchronous reset, no LUT
    return {
        "line": line * (KH - 1),
        "win": res.Resources(ff=EW * KH * pix),
        "data": (res.mux(width, family) + res.mux((p.beats_per_window - 2) * width, family)
                 + res.Resources(ff=p.beats_per_window * width + 1)
                 if pl.shift_out else
                 res.mux(width, family, p.beats_per_window) + res.Resources(ff=width + 1))
        + res.mux(pix, family),
        **output_stage.parts(width, PIPELINE_DEPTH, family, registered=True,
                             late_return=LATE_RETURN),
        "ctl": res.Resources(ff=ctl, lut4=ctl + Hp // 4 + Wp // 4, carry=ctl / 2),
    }


# ---------------------------------------------------------------------------- hardware

#: most beats per window whose output word is a multiplexer of the window register; more
#: beats go out through a shift register (:func:`shift_out`)
MUX_OUT_MAX_BEATS = 4


def shift_out(p: SWGParParams) -> bool:
    """Whether a window's beats after its first leave through a shift register of their own
    (one beat per beat emitted) instead of a ``B``-way multiplexer of the window register:
    more than :data:`MUX_OUT_MAX_BEATS` beats (a 24-way multiplexer of a 576-bit window was
    7 logic levels and 6.1 ns of route on an ECP5)."""
    return p.beats_per_window > MUX_OUT_MAX_BEATS


def shift_slices(p: SWGParParams) -> list[tuple[int, int, int]]:
    """The window shift register's slices, each enabled by a step control of its own:
    (column, low bit, high bit)."""
    width = p.kernel[0] * p.simd * p.qtype.bits
    return [(s, lo, min(width, lo + SHIFT_GROUP_BITS)) for s in range(p.span[1])
            for lo in range(0, width, SHIFT_GROUP_BITS)]


def output_slices(p: SWGParParams) -> list[tuple[int, int]]:
    """The output word's slices, each selected by a beat index of its own: (low bit, high
    bit); one slice when a window is one beat (no selection)."""
    width = p.window_par * p.qtype.bits
    if p.beats_per_window == 1:
        return [(0, width)]
    return [(lo, min(width, lo + SHIFT_GROUP_BITS)) for lo in range(0, width, SHIFT_GROUP_BITS)]


def out_fifo_slices(p: SWGParParams) -> list[int]:
    """The widths of the output FIFO's slices."""
    return fifo_slices(p.window_par * p.qtype.bits, FIFO_DEPTH)


def window_segments(p: SWGParParams) -> list[tuple[int, int, int]]:
    """A window in its emitted order as pieces of the shift register: (column ``s``, low bit,
    high bit) of ``sh[s]``, ``sh[s]`` holding the column of ``s`` steps back (kernel row
    ``KH - 1`` in its low pixel)."""
    KH, KW = p.kernel
    pix, bits = p.simd * p.qtype.bits, p.qtype.bits

    def pixel(kh, kw, lo=0, hi=pix):
        j = KH - 1 - kh
        return (KW - 1 - kw) * p.dilation[1], j * pix + lo, j * pix + hi
    if p.depthwise_pe:
        D = p.depthwise_pe * bits
        return [pixel(kh, kw, cb * D, (cb + 1) * D) for cb in range(p.simd // p.depthwise_pe)
                for kh in range(KH) for kw in range(KW)]
    return [pixel(kh, kw) for kh in range(KH) for kw in range(KW)]


def _window_bit(p: SWGParParams, b: int) -> tuple[int, int]:
    """Where bit ``b`` of a window (in its emitted order) sits in the shift register: (column
    ``s``, bit of ``sh[s]``)."""
    for s, lo, hi in window_segments(p):
        if b < hi - lo:
            return s, lo + b
        b -= hi - lo
    raise ValueError("bit beyond the window")


def write_valids(p: SWGParParams) -> list[tuple | None]:
    """Per slice of the output FIFO, the copy of the control whose registered emit is the
    slice's write valid: ``("o", lo)`` for output slice ``lo``'s, ``("sh", s, lo)`` for the
    shift register slice's (a window of one beat: the slice holding the FIFO slice's first
    bit), None for the main control's; all None when the FIFO is one slice."""
    widths = out_fifo_slices(p)
    if len(widths) == 1:
        return [None]
    keys, lo = [], 0
    starts = [a for a, _ in output_slices(p)]
    for w in widths:
        if len(starts) > 1:
            key = ("o", max(a for a in starts if a <= lo))
        else:
            col, bit = _window_bit(p, lo)
            key = ("sh", col, bit - bit % SHIFT_GROUP_BITS)
        keys.append(None if key in (("o", 0), ("sh", 0, 0)) else key)
        lo += w
    return keys


@dataclass(frozen=True)
class SWGParPlan:
    """The generator's structure, computed once from its parameters (:func:`plan`): what
    :meth:`SWGPar.elaborate` builds and :func:`resource_parts` counts."""
    #: a window's beats after its first leave through a shift register (:func:`shift_out`)
    shift_out: bool
    #: the window shift register's slices, a step control each (:func:`shift_slices`)
    shift_slices: tuple[tuple[int, int, int], ...]
    #: the output word's slices, a beat index each (:func:`output_slices`)
    output_slices: tuple[tuple[int, int], ...]
    #: the widths of the output FIFO's slices (:func:`out_fifo_slices`)
    out_fifo_slices: tuple[int, ...]
    #: a window in its emitted order as pieces of the shift register (:func:`window_segments`)
    window_segments: tuple[tuple[int, int, int], ...]
    #: per output FIFO slice, the control copy whose emit is its write valid
    #: (:func:`write_valids`)
    write_valids: tuple

    @property
    def control_copies(self) -> int:
        """Copies of the step control beside the main one: one per shift register slice and
        per output word slice but the first of each."""
        return len(self.shift_slices) + len(self.output_slices) - 2


def plan(p: SWGParParams) -> SWGParPlan:
    """The generator's :class:`SWGParPlan` (cached on ``p``: :attr:`SWGParParams.plan`)."""
    return SWGParPlan(shift_out=shift_out(p), shift_slices=tuple(shift_slices(p)),
                      output_slices=tuple(output_slices(p)),
                      out_fifo_slices=tuple(out_fifo_slices(p)),
                      window_segments=tuple(window_segments(p)),
                      write_valids=tuple(write_valids(p)))


def _bits(flags: list[bool]) -> Const:
    return Const(sum(1 << k for k, f in enumerate(flags) if f), max(len(flags), 1))


@dataclass(frozen=True)
class StepControl:
    """The generator's step control, or one of its copies (each beside the bits it drives)."""
    step: Signal        # a step (the next input position) goes this cycle
    emit: Signal        # a beat of the held window is emitted this cycle
    last_beat: Signal   # the beat emitted is the window's last
    bi: Signal          # the beat index
    pend_new: Signal    # the next values of ``pend`` (a window held) and ``bi``
    bi_new: Signal


class SWGPar(wiring.Component):
    """The window-parallel sliding-window generator (see the module documentation)."""

    def __init__(self, p: SWGParParams):
        self.p = p
        n = len(p.plan.out_fifo_slices) if p.out_slice_ports else 0
        super().__init__({
            "i": In(streams.signature(p.simd * p.qtype.bits, 0,
                                      p.plan.control_copies if p.in_valid_copies else 0)),
            # with out_slice_ports, a sliced stream: a valid and a ready per FIFO slice
            "o": Out(streams.signature(p.window_par * p.qtype.bits, n)),
        })

    def elaborate(self, platform):
        p = self.p
        m = Module()
        KH, KW = p.kernel
        EW = p.span[1]
        Hp, Wp = p.padded
        bits, pix = p.qtype.bits, p.simd * p.qtype.bits
        P, B, N = p.window_par, p.beats_per_window, p.line_words
        rin, cin, rwin, cwin = p.masks()

        pl = p.plan
        wide = len(pl.out_fifo_slices) > 1
        out = output_stage.OutputStage(m, self.o, P * bits, PIPELINE_DEPTH, registered=True,
                                       late_return=LATE_RETURN, slice_ports=p.out_slice_ports)
        if p.out_slice_ports:
            m.d.comb += [out.fifo.r_en_slices.eq(self.o.ready_slices),
                         self.o.valid_slices.eq(out.fifo.r_rdy_slices)]

        # --- position and its flags (registered one step ahead) -------------------------
        y, x = Signal(range(max(Hp, 2))), Signal(range(max(Wp, 2)))
        inside = Signal(init=int(rin[0] and cin[0]))
        ends = Signal(init=int(rwin[0] and cwin[0]))

        def after(cx, cy):
            """The position after ``(cx, cy)`` in raster order (wrapping at the frame's end)."""
            c_last = cx == Wp - 1
            return Mux(c_last, 0, cx + 1), Mux(c_last, Mux(cy == Hp - 1, 0, cy + 1), cy)

        nx, ny = after(x, y)
        # the next position's ``inside`` flag, a register of its own kept a step ahead (from
        # the position after the next): the copies below load it from one flip-flop instead
        # of each decoding the position (a wide fan-out of the counters)
        x1, y1 = 1 % Wp, (1 // Wp) % Hp
        inside_next = Signal(init=int(rin[y1] and cin[x1]), name="inside_next")
        nnx, nny = after(nx, ny)

        # --- step / emit control ---------------------------------------------------------
        def free_of(pend, bi, room):
            """No window held, or its last beat is emitted now: the next step may go."""
            return ~pend | (pend & room & (bi == B - 1))

        copies = []     # the copies' input valids: ``i.valid_copies`` bit by bit

        def control(name: str) -> StepControl:
            """The step control (:class:`StepControl`): a window is held (``pend``) while its
            beats are emitted; the next step waits for the last beat. A copy (``name``) has
            its own ``inside`` flag and its own copy of the output credits' ``room`` too, so
            no term of its step is shared with the others but the input's valid (with
            ``in_valid_copies`` not even that: a copy of it from the FIFO before)."""
            ins, room, valid = inside, out.room, self.i.valid
            if name:
                ins = Signal(init=inside.init, name=f"{name}inside")
                room = out.room_copy(f"{name}room")
                if p.in_valid_copies:
                    valid = self.i.valid_copies[len(copies)]
                copies.append(valid)
            pend = Signal(name=f"{name}pend")
            bi = Signal(range(max(B, 2)), name=f"{name}bi")
            emit = pend & room
            last_beat = bi == B - 1
            free = free_of(pend, bi, room)
            step = Signal(name=f"{name}step")
            m.d.comb += step.eq(free & (~ins | valid))
            if name:
                with m.If(step):
                    m.d.sync += ins.eq(inside_next)
            # the state's next values (the input's ready register follows them)
            pend_new = Signal(name=f"{name}pend_new")
            bi_new = Signal(bi.shape(), name=f"{name}bi_new")
            m.d.comb += [bi_new.eq(Mux(emit, Mux(last_beat, 0, bi + 1), bi)),
                         pend_new.eq(Mux(step, ends, Mux(emit & last_beat, 0, pend)))]
            m.d.sync += [bi.eq(bi_new), pend.eq(pend_new)]
            return StepControl(step, emit, last_beat, bi, pend_new, bi_new)

        ctl = control("")
        step, emit = ctl.step, ctl.emit
        # The input's ready is ``step & inside`` = ``i.valid & inside & free``: the part
        # without ``i.valid`` is a register of its own (``take``, kept equal to ``inside &
        # free`` from their next values, below), so only the AND with the input's valid (the
        # FIFO's output flag, a flip-flop) is left between flip-flops and the enables of the
        # FIFO's slices. ``i.valid`` has no next value here, so that gate stays.
        take = Signal(init=inside.init, name="take")     # no window is held at reset
        m.d.comb += self.i.ready.eq(self.i.valid & take)
        out.spend(emit)
        inside_new = Signal(name="inside_new")
        m.d.comb += inside_new.eq(Mux(step, inside_next, inside))
        m.d.sync += [inside.eq(inside_new),
                     take.eq(inside_new & free_of(ctl.pend_new, ctl.bi_new, out.room_next))]
        with m.If(step):
            m.d.sync += [x.eq(nx), y.eq(ny),
                         inside_next.eq(_bits(rin).bit_select(nny, 1)
                                        & _bits(cin).bit_select(nnx, 1)),
                         ends.eq(_bits(rwin).bit_select(ny, 1) & _bits(cwin).bit_select(nx, 1))]

        # --- the column: this step's pixel and the delay lines ----------------------------
        pad_word = pack_word([p.pad_value] * p.simd, bits)
        col = [Mux(inside, self.i.payload, pad_word)]
        addr = Signal(range(max(N, 2)))
        # the read address (the next step's word) kept in a register of its own: the RAMs'
        # read logic starts at a flip-flop, not behind the increment
        nxt = Signal(range(max(N, 2)), init=1 % max(N, 1))
        with m.If(step):
            m.d.sync += [addr.eq(nxt), nxt.eq(Mux(nxt == N - 1, 0, nxt + 1))]
        for j in range(1, KH):
            wr, rd = ram(m, f"line{j}", width=pix, depth=N,
                         rw="new" if N == 1 else "dont_care", read_en=True)
            m.d.comb += [wr.addr.eq(addr), wr.data.eq(col[j - 1]), wr.en.eq(step),
                         rd.addr.eq(nxt), rd.en.eq(step)]
            col.append(rd.data)

        # --- window shift register: sh[s] holds the column of s steps back -------------------
        # Its enable is the step; a step computed once would drive every bit of the window
        # (hundreds of flip-flops across the die), so each slice of at most SHIFT_GROUP_BITS
        # bits has a copy of the control of its own (the copies hold their own state, so the
        # tools keep them apart; they step together).
        sh = [Signal(KH * pix, name=f"sh{s}", reset_less=True) for s in range(EW)]
        emits = {}      # the copies' emits, for the output FIFO's write valids
        for s, lo, hi in pl.shift_slices:
            c = ctl if (s, lo) == (0, 0) else control(f"sh{s}_{lo}_")
            emits[("sh", s, lo)] = c.emit
            with m.If(c.step):
                m.d.sync += sh[s][lo:hi].eq(Cat(*col)[lo:hi] if s == 0 else sh[s - 1][lo:hi])

        window = Cat(*(sh[s][lo:hi] for s, lo, hi in pl.window_segments))

        # --- output beat: registered, then the FIFO ------------------------------------------
        data = Signal(P * bits, reset_less=True)    # data: ``valid`` says when
        valid = Signal()
        m.d.sync += valid.eq(emit)
        # no enable (the FIFO takes the beat only when valid): the last beat is the default
        # case, so a beat index the window never reaches (B not a power of two) does not
        # hold the word -- a hold is an enable of the whole word, one net across the die.
        # The beat index selects every bit of the word, so each slice of the word
        # (:func:`output_slices`) is selected by a copy of the control of its own.
        def beat(b, lo, hi):
            return window[b * P * bits + lo:b * P * bits + hi]

        for k, (lo, hi) in enumerate(pl.output_slices):
            c = ctl if k == 0 else control(f"o{lo}_")
            c_emit, c_bi = c.emit, c.bi
            emits[("o", lo)] = c_emit
            if not pl.shift_out:
                with m.Switch(c_bi):
                    for b in range(B):
                        with (m.Case(b) if b < B - 1 else m.Default()):
                            m.d.sync += data[lo:hi].eq(beat(b, lo, hi))
                continue
            # many beats: the first beat straight from the window, the others into a shift
            # register that moves one beat per beat emitted (the window holds still from a
            # window's first beat to its last), so no bit of the word is a B-way multiplexer
            w = hi - lo
            rest = Signal((B - 1) * w, name=f"o{lo}_rest", reset_less=True)
            first = c_bi == 0
            m.d.sync += data[lo:hi].eq(Mux(first, beat(0, lo, hi), rest[:w]))
            with m.If(c_emit):
                m.d.sync += rest.eq(Mux(first, Cat(*(beat(b, lo, hi) for b in range(1, B))),
                                        rest >> w))
        assert len(copies) == pl.control_copies
        if wide:
            # each slice of the output FIFO is written on a copy of ``valid`` of its own, the
            # registered emit of a copy of the control beside the slice's bits
            # (:func:`write_valids`): one valid would reach every slice's enables
            keys = pl.write_valids
            valids = {None: valid}
            for key in keys:
                if key not in valids:
                    valids[key] = Signal(name="_".join(map(str, key)) + "_valid")
                    m.d.sync += valids[key].eq(emits[key])
            out.write_slices(data, [valids[key] for key in keys])
        else:
            out.write(data, valid)
        return m


# ---------------------------------------------------------------------------- registration

def manifest(p: SWGParParams) -> dict:
    out = {"window": {"in_hwc": list(p.in_shape), "kernel": list(p.kernel),
                      "stride": list(p.stride), "pads": list(p.pads),
                      "dilation": list(p.dilation)},
           "folding": {"window_par": p.window_par}}
    if p.depthwise_pe:
        out["folding"]["depthwise_pe"] = p.depthwise_pe
    return out


def fold_space(p: SWGParParams) -> FoldSpace:
    """The block's ``SIMD`` is its ``window_par``."""
    return FoldSpace((1,), divisors(p.window.window_elems),
                     lambda pe, simd: frame_cycles(dataclasses.replace(p, window_par=simd)))


def slice_ports(p: SWGParParams, port: str, widths: list[int]) -> SWGParParams | None:
    """The same block handing its output over slice by slice to a reader of the slices
    ``widths`` (a FIFO of those slices, or a unit reading it straight), when its output FIFO
    has those slices (more than one); never its input."""
    if port != "o" or len(widths) < 2 or list(widths) != out_fifo_slices(p):
        return None
    return dataclasses.replace(p, out_slice_ports=True)



def valid_copies(p: SWGParParams) -> tuple[SWGParParams, int] | None:
    """The same block reading a copy of its input's valid per copy of its step control (and
    their number), when it has copies."""
    n = p.plan.control_copies
    return (dataclasses.replace(p, in_valid_copies=True), n) if n else None


def examples() -> list[Example]:
    """Small instances for the conformance test: a whole window per beat; a window row per
    beat; stride 2 with one-sided pads; dilation; the depthwise order."""
    t = QType(8, True)
    out = []
    for shape, k, s, pads, dil, par, dw in (
            ((5, 5, 3), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 27, 0),
            ((5, 5, 3), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 9, 0),
            ((5, 6, 1), (3, 3), (2, 2), (0, 1, 2, 0), (1, 1), 3, 0),
            ((6, 5, 2), (3, 2), (1, 2), (2, 1, 0, 1), (2, 1), 6, 0),
            ((4, 4, 4), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 6, 2)):
        p = SWGParParams(shape, k, s, pads, -7, t, par, dil, dw)
        out.append(Example(p, (Port(t, p.simd, p.in_beats * p.simd),),
                           (Port(t, par, p.out_elems),),
                           "x".join(map(str, shape)) + f"-k{k[0]}x{k[1]}-s{s[0]}x{s[1]}"
                           f"-P{par}{f'-dw{dw}' if dw else ''}", fold=(1, par)))
    return out


register_block("swg_par", params=SWGParParams, component=SWGPar, golden=golden, cost=cost,
               timing=timing, manifest=manifest, fold_space=fold_space,
               slice_ports=slice_ports, valid_copies=valid_copies,
               examples=examples)
