"""Sliding-window generator (SWG): feature map stream → window stream for 2-D conv / pooling.

Stream contract
    ``i``: one frame = an ``H×W×C`` feature map, channel-last: pixels in raster order (row
    ``h``, then column ``w``), each pixel's ``C`` channels in ``CB = C / SIMD`` beats of SIMD
    elements, channel ``cb*SIMD + s`` in bits ``[s*bits, (s+1)*bits)`` of beat ``cb``.
    ``o``: for each output pixel ``(oh, ow)`` in raster order, its window:

    * standard order ``(kh, kw, c)``: for each kernel position in raster order its ``CB``
      channel beats (the column order of a conv weight matrix reshaped to [OC, KH, KW, C]);
    * ``depthwise=True``: order ``(cb, kh, kw, ci)`` with ``c = cb*SIMD + ci``: for each block of
      SIMD channels the ``KH*KW`` positions, one beat each (what :mod:`rtl_templates.vvau` and
      pooling units consume).

    Window position ``(kh, kw)`` of output pixel ``(oh, ow)`` is input pixel
    ``(oh*SH + kh*DH - top, ow*SW + kw*DW - left)`` (``DH, DW`` the dilation); positions
    outside the map (padding) carry ``pad_value``. A window spans ``EH = (KH - 1)*DH + 1``
    rows and ``EW`` columns likewise; ``OH = (H + top + bottom - EH) // SH + 1``, ``OW``
    likewise (ONNX floor semantics). Elements are two's complement when the type is signed.
    Below, where the kernel's extent matters (rows needed, rows buffered), ``KH`` stands for
    ``EH``.

Line buffer
    A circular buffer of ``R`` rows (:attr:`SWGParams.buffer_rows`) of ``W*CB`` beats in one
    RAM (see *Line buffer memory*); global input row ``g`` (counted over all frames) lives
    in slot ``g mod R``, so the write address is a plain counter modulo ``R*W*CB``.

    *Writer*: one input beat per cycle. ``wrel`` is the row being written, counted in the
    reader's frame (negative: the writer is still in the previous frame; ``≥ H``: it is in the
    next one). A row may be written while ``wrel < F + R``, ``F = clamp(oh*SH - top, 0, H)``
    the first row the reader's current output row ``oh`` still needs (row granularity: rows
    are freed when the reader finishes an output row).

    *Reader*: one output beat per cycle. Output row ``oh`` needs rows up to
    ``need = clamp(oh*SH - top + KH - 1, 0, H - 1)``; its first beat issues only when
    ``wrel > need`` (those rows are complete), the rest of the row then issues without checks.
    So even an output row made only of padding waits for its frame's first input row: no
    output of a frame leaves before that frame's input has begun, and the reader never runs
    ahead of the writer by a frame. As ``need - F < KH <= R`` the writer can always complete
    the rows the reader waits for: no deadlock.

    ``R`` is the smallest number of rows (≥ KH) for which the schedule model below reaches
    the throughput bound ``max(input beats, output beats)`` per frame with back-to-back
    frames (frames overlap: the next frame's first rows are written while the last output
    rows of the previous one are generated). Typical values: ``KH + 1`` for "same" padding
    with stride 1, ``2*KH`` without padding (the next frame's first ``KH`` rows must fit
    beside the last ``KH`` rows of the previous one).

Line buffer memory
    The buffer is a RAM with one write and one synchronous read port (``memory.ram``: LUT RAM
    or block RAM by the memory policy), read :data:`READ_DELAY` cycles after a beat issues.
    The writer fills only rows below ``F + R`` (``F`` of the reader's current output row), and
    a beat reads complete rows of its own output row, so a read can meet a write of its word
    in the same cycle only in the ``READ_DELAY`` cycles after an output row ends: the writer
    may then start row ``F + R`` (and the rows up to the next row's ``F + R``) while the last
    beats of the old row are read. That happens when those last beats read the first words of
    row ``F`` (or of the next rows): one column, one channel block, ``KH = 1`` or a window with
    only its last row inside the map. There the old word is the right one;
    :func:`rw_dont_care` finds those shapes by going through the last beats of every output
    row, and every other buffer is built without read-before-write logic
    (``rw="dont_care"``). A LUT RAM buffer is written a cycle late, from registers of the
    beat, its address and the write (:func:`late_write`): its write enable, which reaches
    every cell of the buffer, then starts at a flip-flop. :func:`rw_dont_care` then counts
    the words a cycle later (a read of a new word comes ``READ_DELAY`` + 1 cycles after the
    row's last beat is taken, after the late write).

Pipeline (a beat issued in cycle t)
    t: row/column/kernel counters → input row and column, pad flag, buffer slot
    t+1: read address = slot*W*CB + w*CB + cb, registered     t+2: memory read
    t+3: data registered          t+4: data (or pad_value) → output stage
    t+5: the output stage's write register (:mod:`output_stage`), then its FIFO
    t+7: earliest output transfer: :data:`PIPELINE_DEPTH` = 7.
    The bounds the issue and input conditions compare with (``F + R``, ``need``) are
    registers updated together with the row base they derive from, and so are the sums of
    that base the next bounds are clamped from. The input's ready (``wrel < F + R``) and the
    row's issue condition (``wrel > need``) are registers of their own, computed a cycle
    ahead: each compare of ``wrel``'s next value (``wrel``, ``wrel + 1`` — a register of its
    own —, less ``H`` at a frame's end) with each of the bound's next values (unchanged, the
    next row's, the first row's) is one carry chain from registers, and the late controls
    (a row done, the reader's row advancing) only pick one. The ready reaches the enables of
    the FIFO before the generator (often a wide word in slices) from a flip-flop, and the
    issue stage starts at flip-flops.
    The pipeline never stalls: a credit counter lets a beat issue only while the output FIFO
    is sure to have room. ``valid`` on ``o`` comes from the FIFO, never depends on ``ready``.

Cost model
    Per frame ``in_beats = H*W*CB`` and ``out_beats = OH*OW*KH*KW*CB``; an output row takes
    ``T = OW*KH*KW*CB`` cycles, an input row ``W*CB``. With the output always ready and the
    input offered every cycle the block follows a row-level recurrence (:func:`schedule`)
    that is exact for this hardware (tests compare it cycle for cycle):

    * reader row J (global): ``s_J = max(e_{J-1} + 1, b_{need_J} + 1)``, ``e_J = s_J + T - 1``;
    * writer row G: ``a_G = max(b_{G-1} + 1, e_{J'-1} + 1, input)``, ``b_G = a_G + W*CB - 1``,
      ``J'`` the first reader row with ``F_{J'} + R > G``;
    * output transfers are issue cycles + :data:`PIPELINE_DEPTH`.

    ``cost().cycles`` is the recurrence's steady-state frame period. ``R`` is chosen so that
    it equals ``max(in_beats, out_beats)`` exactly — no per-row or per-frame overhead; should
    that be unreachable within the row cap the model still gives the exact (larger) period.
    ``latency`` and :func:`timing` come from the same recurrence for one frame.
    ``memory_bits = R*W*C*bits`` (line buffer) ``+ D*SIMD*bits`` (output FIFO of
    ``D = output_stage.fifo_depth(PIPELINE_DEPTH)`` beats);
    ``registers``: the counters, the two pipeline stages and one beat (an estimate). The
    address ``slot*W*CB + w*CB`` multiplies by constants: each product is a table of its
    factor's values (:data:`TABLE_BITS`), a multiplier only for a factor wider than that.
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field

import numpy as np
from amaranth.hdl import Array, Cat, Const, Module, Mux, Shape, Signal, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from hwgen.rtl_templates import output_stage, streams
from hwgen.rtl_templates import resources as res
from hwgen.rtl_templates.block import Example, FoldSpace, Port, divisors, register_block
from hwgen.rtl_templates.cost import Cost
from hwgen.rtl_templates.kept import kept_copies, kept_copy
from hwgen.rtl_templates.memory import DISTRIBUTED, choose_style, ram
from hwgen.rtl_templates.pipeline import Loop, counter_bits, delay, reg
from hwgen.rtl_templates.quant import QType
from hwgen.rtl_templates.words import pack_word

#: cycles from issuing a beat to the line buffer read of its word (the address is registered)
READ_DELAY = 2
#: cycles from issuing a beat to its earliest output transfer: to the line buffer's read, its
#: data, the data's register (then the padding's multiplexer, so the output stage's write
#: register comes first), then the output stage's
PIPELINE_DEPTH = READ_DELAY + 2 + output_stage.latency()


@dataclass(frozen=True)
class SWGParams:
    """Everything that defines one SWG instance."""
    in_shape: tuple[int, int, int]     # (H, W, C)
    kernel: tuple[int, int]            # (KH, KW)
    stride: tuple[int, int]            # (SH, SW)
    pads: tuple[int, int, int, int]    # (top, left, bottom, right), ONNX order for 2-D
    pad_value: int                     # value of padding positions
    qtype: QType                       # element type
    simd: int = 1
    depthwise: bool = False            # output order (cb, kh, kw, ci) instead of (kh, kw, c)
    dilation: tuple[int, int] = (1, 1)  # (DH, DW)
    #: a copy of the input's ready register per slice of the FIFO before the generator
    #: (``i`` a sliced stream: ``i.ready_slices``; the ``slice_ports`` face), each beside
    #: its slice's read enables
    ready_copies: int = field(default=0, metadata={"digest": "omit_default"})

    def __post_init__(self):
        for name, n in (("in_shape", 3), ("kernel", 2), ("stride", 2), ("pads", 4),
                        ("dilation", 2)):
            v = tuple(int(x) for x in getattr(self, name))
            if len(v) != n:
                raise ValueError(f"{name} must have {n} entries, got {getattr(self, name)!r}")
            object.__setattr__(self, name, v)
        if min(self.in_shape) < 1:
            raise ValueError(f"bad input shape {self.in_shape}")
        if min(self.kernel) < 1:
            raise ValueError(f"bad kernel {self.kernel}")
        if min(self.stride) < 1:
            raise ValueError(f"bad stride {self.stride}")
        if min(self.pads) < 0:
            raise ValueError(f"negative pads {self.pads}")
        if min(self.dilation) < 1:
            raise ValueError(f"bad dilation {self.dilation}")
        if self.simd < 1 or self.in_shape[2] % self.simd:
            raise ValueError(f"SIMD={self.simd} does not divide the {self.in_shape[2]} channels")
        H, W, _ = self.in_shape
        KH, KW = self.span
        t, l, b, r = self.pads
        if H + t + b < KH or W + l + r < KW:
            raise ValueError(f"kernel {self.kernel} (dilation {self.dilation}) larger than "
                             f"the padded input "
                             f"{(H + t + b, W + l + r)}")
        if not self.qtype.lo <= self.pad_value <= self.qtype.hi:
            raise ValueError(f"pad value {self.pad_value} outside {self.qtype.name}")

    # ---- shapes
    @property
    def span(self) -> tuple[int, int]:
        """Input rows and columns one window covers, ``(K - 1)*D + 1`` each way."""
        return tuple((k - 1) * d + 1 for k, d in zip(self.kernel, self.dilation))

    @property
    def out_shape(self) -> tuple[int, int]:
        H, W, _ = self.in_shape
        KH, KW = self.span
        SH, SW = self.stride
        t, l, b, r = self.pads
        return (H + t + b - KH) // SH + 1, (W + l + r - KW) // SW + 1

    @property
    def window_elems(self) -> int:
        return self.kernel[0] * self.kernel[1] * self.in_shape[2]

    @property
    def cb(self) -> int:
        """Beats per pixel (channel blocks)."""
        return self.in_shape[2] // self.simd

    @property
    def in_elems(self) -> int:
        H, W, C = self.in_shape
        return H * W * C

    @property
    def out_elems(self) -> int:
        OH, OW = self.out_shape
        return OH * OW * self.window_elems

    @property
    def in_beats(self) -> int:
        return self.in_elems // self.simd

    @property
    def out_beats(self) -> int:
        return self.out_elems // self.simd

    @property
    def row_in_beats(self) -> int:
        """Beats of one input row."""
        return self.in_shape[1] * self.cb

    @property
    def row_out_beats(self) -> int:
        """Beats of one output row (OW windows)."""
        return self.out_shape[1] * self.kernel[0] * self.kernel[1] * self.cb

    def row_needs(self) -> list[tuple[int, int]]:
        """Per output row ``oh``: (F, need) = first input row still needed (clamped to
        [0, H]) and the last input row that must be complete before it starts (clamped to
        [0, H-1]: even a row of padding waits for its frame's first row)."""
        H = self.in_shape[0]
        KH, SH, top = self.span[0], self.stride[0], self.pads[0]
        out = []
        for oh in range(self.out_shape[0]):
            hb = oh * SH - top
            out.append((min(max(hb, 0), H), min(max(hb + KH - 1, 0), H - 1)))
        return out

    @functools.cached_property
    def buffer_rows(self) -> int:
        """R, the line buffer's rows (see the module documentation)."""
        return _choose_rows(self)

    @functools.cached_property
    def buffer_words(self) -> int:
        """The line buffer RAM's words: R rows of W·CB beats (at least 2)."""
        return max(self.buffer_rows * self.in_shape[1] * self.cb, 2)

    @functools.cached_property
    def steady_cycles(self) -> int:
        return _steady_period(self, self.buffer_rows)


# ---------------------------------------------------------------------------- golden

def golden(p: SWGParams, x: np.ndarray) -> np.ndarray:
    """Frames ``x`` [N, H·W·C] (channel-last; [N, H, W, C] also accepted) → [N, window
    elements]: for each output pixel its window in the stream's order."""
    x = np.asarray(x, dtype=np.int64)
    H, W, C = p.in_shape
    if x[0].size != H * W * C:
        raise ValueError(f"a frame of {x[0].size} elements is not {(H, W, C)}")
    x = x.reshape(-1, H, W, C)
    KH, KW = p.kernel
    SH, SW = p.stride
    DH, DW = p.dilation
    t, l, b, r = p.pads
    OH, OW = p.out_shape
    xp = np.full((x.shape[0], H + t + b, W + l + r, C), p.pad_value, dtype=np.int64)
    xp[:, t:t + H, l:l + W, :] = x
    # win[n, oh, ow, kh, kw, c]
    win = np.stack([np.stack([xp[:, kh * DH:kh * DH + SH * (OH - 1) + 1:SH,
                                 kw * DW:kw * DW + SW * (OW - 1) + 1:SW, :]
                              for kw in range(KW)], axis=3) for kh in range(KH)], axis=3)
    if p.depthwise:
        n = x.shape[0]
        win = win.reshape(n, OH, OW, KH, KW, C // p.simd, p.simd)
        win = win.transpose(0, 1, 2, 5, 3, 4, 6)          # (cb, kh, kw, ci)
    return win.reshape(x.shape[0], -1)


# ---------------------------------------------------------------------------- schedule

_NEG = -(1 << 62)


def schedule(p: SWGParams, rows: int, frames: int, avail=None, start: int = 0):
    """Row-level schedule of the hardware for ``frames`` back-to-back frames, output always
    ready, block idle (reset) at cycle ``start``. ``avail(k)``: the cycle input beat ``k``
    (counted over all frames) is offered first (``None``: from ``start`` on). Returns
    ``(s, e)`` — first/last issue cycle of every output row (global index ``f*OH + oh``) —
    and ``(a, b)`` — first/last write cycle of every input row (global index ``f*H + h``)."""
    H = p.in_shape[0]
    OH = p.out_shape[0]
    T, Wt = p.row_out_beats, p.row_in_beats
    needs = p.row_needs()
    NR, NG = OH * frames, H * frames
    s, e = [0] * NR, [0] * NR
    a, b = [0] * NG, [0] * NG

    def first_row(J):
        f, j = divmod(J, OH)
        return f * H + needs[j][0]

    J = G = Jp = 0
    while J < NR or G < NG:
        progressed = False
        if G < NG:
            while Jp < NR and first_row(Jp) + rows <= G:
                Jp += 1
            if Jp <= J:  # the reader row that frees this writer row has finished
                t = b[G - 1] + 1 if G else start
                if Jp:
                    t = max(t, e[Jp - 1] + 1)
                if avail is not None:
                    t = max(t, avail(G * Wt))
                a[G] = t
                b[G] = max(t + Wt - 1, avail((G + 1) * Wt - 1) if avail is not None else _NEG)
                G += 1
                progressed = True
        if J < NR:
            f, j = divmod(J, OH)
            need = f * H + needs[j][1]
            if need < G:
                t = e[J - 1] + 1 if J else start
                t = max(t, b[need] + 1)    # need >= 0: it is clamped
                s[J] = t
                e[J] = t + T - 1
                J += 1
                progressed = True
        if not progressed:  # cannot happen for rows >= KH (see the module documentation)
            raise RuntimeError("SWG schedule deadlock")
    return s, e, a, b


def _frames_for(p: SWGParams, rows: int) -> int:
    H, KH = p.in_shape[0], p.span[0]
    return 6 + 3 * (-(-(rows + KH) // H))


def _frame_ends(p: SWGParams, rows: int) -> list[int]:
    OH = p.out_shape[0]
    frames = _frames_for(p, rows)
    _, e, _, _ = schedule(p, rows, frames)
    return [e[(f + 1) * OH - 1] for f in range(frames)]


def _steady_period(p: SWGParams, rows: int) -> int:
    ends = _frame_ends(p, rows)
    d = [y - x for x, y in zip(ends, ends[1:])]
    return -(-(ends[-1] - ends[-3]) // 2) if d[-1] != d[-2] else d[-1]


def _choose_rows(p: SWGParams) -> int:
    H, KH, SH = p.in_shape[0], p.span[0], p.stride[0]
    bound = max(p.in_beats, p.out_beats)
    cap = 2 * H + 2 * KH + SH + 4
    best = None
    for rows in range(KH, cap + 1):
        ends = _frame_ends(p, rows)
        d = [y - x for x, y in zip(ends[-4:], ends[-3:])]
        if all(x == bound for x in d):
            return rows
        if best is None or d[-1] < best[0]:
            best = (d[-1], rows)
    return best[1]


# ---------------------------------------------------------------------------- cost

def timing(p: SWGParams, in_first: int, in_last: int) -> tuple[int, int]:
    """First and last output transfer of one frame on an idle block whose input beats are
    offered evenly spread from ``in_first`` to ``in_last`` (one per cycle when
    ``in_last - in_first = in_beats - 1``), output always ready."""
    n = p.in_beats
    span = in_last - in_first

    def avail(k):
        return in_first + (k * span // (n - 1) if n > 1 else 0)

    s, e, _, _ = schedule(p, p.buffer_rows, 1, avail=avail, start=in_first)
    return s[0] + PIPELINE_DEPTH, e[-1] + PIPELINE_DEPTH


def cost(p: SWGParams) -> Cost:
    """Cycles per frame (steady state, back-to-back frames), latency of an idle block with
    the input offered every cycle, and resources; see the module documentation."""
    bits = p.qtype.bits
    depth = p.buffer_rows * p.in_shape[1] * p.cb
    muls = address_multiplies(p)
    by_family, parts = res.estimate(resource_parts, p, RESOURCE_FIT, muls)
    return Cost(
        cycles=p.steady_cycles,
        latency=timing(p, 0, p.in_beats - 1)[1] + 1,
        memory_bits=depth * p.simd * bits
        + output_stage.fifo_depth(PIPELINE_DEPTH) * p.simd * bits,
        registers=max(r.ff for r in by_family.values()), by_family=by_family, parts=parts,
        multiplies=muls,
    )


#: an address product whose variable factor has at most this many bits is a table of
#: constants (one LUT function of those bits per product bit), not a multiplier: a hard
#: multiplier's output leaves the tile late (DS-CNN: a MULT18X18D into ``addr2``, 8.4 ns)
#: and the tiles are the matrix units'
TABLE_BITS = 6


@dataclass(frozen=True)
class AddressProduct:
    """One of the line buffer address's products by a constant: the variable factor's
    ``bits``, the constant ``value``, and how it is built: a shift (a power of two), a
    ``table`` of the factor's values (at most :data:`TABLE_BITS`), else ``mul``."""
    bits: int
    value: int
    table: bool
    mul: res.Mul | None


def _address_products(p: SWGParams) -> tuple[AddressProduct, AddressProduct]:
    """``slot * W*CB`` and ``w * CB`` (:class:`AddressProduct`)."""
    W, R = p.in_shape[1], p.buffer_rows
    addr_bits = (p.buffer_words - 1).bit_length()
    out = []
    for n, value in ((max(R, 2), W * p.cb), (max(W, 2), p.cb)):
        bits = (n - 1).bit_length()
        shift = (value & -value).bit_length() - 1
        m = res.Mul.by_constant(bits, False, value, y_bits=max(addr_bits - shift, 1))
        table = m is not None and bits <= TABLE_BITS
        out.append(AddressProduct(bits, value, table, None if table else m))
    return tuple(out)


def address_multiplies(p: SWGParams) -> dict[res.Mul, int]:
    """The address products Yosys maps like any product (on ECP5 a MULT18X18D when both
    factors have 2 bits or more): those of more than :data:`TABLE_BITS` index bits."""
    muls: dict[res.Mul, int] = {}
    for a in _address_products(p):
        if a.mul is not None:
            muls[a.mul] = muls.get(a.mul, 0) + 1
    return muls


def _address_tables(p: SWGParams) -> res.Resources:
    """LUT4s of the address products written as tables: a product bit above the
    constant's trailing zeros and the index's own low bit is a function of the index bits
    (on ECP5 a LUT4 per bit up to four, two or four joined by the slice's multiplexers for
    five or six; iCE40 the same count of SB_LUT4)."""
    addr_bits = (p.buffer_words - 1).bit_length()
    luts = 0
    for a in _address_products(p):
        if a.table:
            shift = (a.value & -a.value).bit_length() - 1
            luts += max(0, addr_bits - shift - 1) * (1 << max(0, a.bits - 4))
    return res.Resources(lut4=luts)


def _times(x: Signal, a: AddressProduct, width: int):
    """``x * a.value`` modulo ``2**width``: a table of every value of ``x`` or a product."""
    if not a.table:
        return x * a.value
    return Array(Const((k * a.value) % (1 << width), width) for k in range(1 << len(x)))[x]


#: calibration of :func:`resource_parts` (``benchmarks/resources.py --fit``). ECP5's LUT4
#: factors are each part's own LUT4s in Yosys's netlist (the LUTs feeding the part's
#: registers) over its count, least squares on the five examples and the fifteen
#: generators of ``tests/blocks/test_swg.py``: the compares of ``take`` and ``row_ok`` take
#: half as many again as counted (ABC duplicates them for depth); ``data`` is exact
RESOURCE_FIT: res.Fit = {
    "ecp5": {
        "lut4": {"buf": 0.979, "ctl": 1.163, "flags": 1.485, "fifo": 1.576, "1": 0.004},
        "carry": {"ctl": 0.544, "fifo": 0.6, "1": 0.0},
    },
    "ice40": {
        "lut4": {"buf": 1.007, "ctl": 1.131, "fifo": 1.166, "1": 0.003},
        "carry": {"ctl": 1.412, "fifo": 1.103, "mul_logic": 1.056, "1": 0.01},
    },
}


def resource_parts(p: SWGParams, family: str) -> dict[str, res.Resources]:
    """The generator's hardware in the resource model's parts (see
    :mod:`rtl_templates.resources`): the line buffer (``buf``), the output stage (``fifo``,
    ``out_reg``), the reader's and writer's counters and bounds and the issue pipeline
    (``ctl``), the input's and the row's flags (``flags``), the data's pad multiplexer
    (``data``) and the late write's registers (``late``)."""
    R = p.buffer_rows
    H, W, _ = p.in_shape
    OH, OW = p.out_shape
    KH, KW = p.kernel
    width = p.simd * p.qtype.bits
    depth = p.buffer_words
    cb = counter_bits
    loops = cb(OH) + cb(OW) + cb(KH) + cb(KW) + cb(p.cb)
    bases = 2 * (cb(H + max(p.pads) + max(p.span) + 2) + 1) + cb(R) + cb(H + R + 1) + cb(H)
    # the row base's sums the next bounds clamp (``hb + SH + R``, ``hb + SH + EH - 1``)
    bases += 2 * (cb(H + max(p.pads) + max(p.span) + R + p.stride[0] + 2) + 1)
    writer = cb(depth) + cb(W * p.cb) + cb(2 * H + R + 5)
    # ... and the input's ready register: a LUT per bit of the counters and bounds
    logic = loops + bases + writer + 1
    if bounds_registered(p):
        logic += cb(H + R + 1) + cb(H)
    # the issue pipeline's registers (position, slot, address, flags and their delays): the
    # pad flag's four compares with constants are its logic (the slot and the address are
    # carry chains and the address's products a DSP tile)
    pipe = cb(R) + cb(W) + cb(p.cb) + cb(depth) + 8
    # each of the six loop counters' ``first`` and ``last`` registers (``pipeline.Loop``)
    pipe += 12
    # ``take`` and ``row_ok`` (:func:`_next_compare`): each compares the next ``wrel`` (two
    # values) with the next bound (three: two registers and a constant) and picks one
    wrel = Shape.cast(range(-H - 2, H + R + 3)).width
    flag = (res.compare(wrel, family) * 4 + res.compare(wrel, family, constant=True) * 2
            + res.mux(1, family, 6))
    parts = {
        "buf": res.memory(width, depth, family, rom=False, rw=buffer_rw(p)),
        **output_stage.parts(width, PIPELINE_DEPTH, family),
        "ctl": res.Resources(ff=logic + pipe, lut4=logic + 4, carry=logic / 2),
        "flags": flag * 2,
        "data": res.Resources(ff=width, lut4=_pad_sets(p) if family == "ecp5" else 0),
        "addr": _address_tables(p),
    }
    # ``wrel + 1`` and ``wrel``, ``wrel + 1``, ``wrel + 2`` less H (four adders of a
    # register and a constant), the next values picked among them
    parts["ctl"] = parts["ctl"] + res.add(wrel, family) * 2
    if late_write(p):       # the late write's data, address and enable: registers only
        parts["late"] = res.Resources(ff=width + cb(depth) + 1)
    # the input ready's copies: the writer's own, one per slice of the FIFO before
    parts["flags"] = parts["flags"] + res.Resources(ff=1 + p.ready_copies)
    return parts


def _pad_sets(p: SWGParams) -> int:
    """LUT4s of the write register's pad multiplexer (the data or the constant pad word) on
    ECP5: the flip-flops' synchronous reset takes a bit whose pad bit is 0, a bit whose pad
    bit is 1 is a LUT (Yosys gives an ECP5 flip-flop no synchronous set; iCE40 has both)."""
    word = pack_word([p.pad_value] * p.simd, p.qtype.bits)
    return bin(word & ((1 << (p.simd * p.qtype.bits)) - 1)).count("1")


# ---------------------------------------------------------------------------- hardware

def bounds_registered(p: SWGParams) -> bool:
    """Whether the next output row's bounds are kept in registers: its rows are at least two
    beats (issues) apart."""
    return p.out_shape[1] * p.kernel[0] * p.kernel[1] * p.cb > 1


def buffer_style(p: SWGParams) -> str:
    """The line buffer's memory style (``memory.choose_style`` with the reads and writes of
    the schedule)."""
    rw = "dont_care" if rw_dont_care(p) else "old"
    return choose_style(p.simd * p.qtype.bits, p.buffer_words, rom=False, rw=rw)


def late_write(p: SWGParams) -> bool:
    """Whether the line buffer is written a cycle late from registers: a LUT RAM buffer,
    whose write enable reaches every cell."""
    return buffer_style(p) == DISTRIBUTED


def buffer_rw(p: SWGParams) -> str:
    """The line buffer's read/write mode: ``dont_care`` where :func:`rw_dont_care` finds no
    read meeting a write of its word, with the writes as they land."""
    return "dont_care" if rw_dont_care(p, late=int(late_write(p))) else "old"


def rw_dont_care(p: SWGParams, late: int = 0) -> bool:
    """True when no line buffer read whose data is used meets a write of the same word in the
    same cycle, so the buffer needs no read-before-write logic (see the module documentation,
    *Line buffer memory*). ``late``: the writes land that many cycles after their beats are
    taken (:func:`late_write`)."""
    H, W, _ = p.in_shape
    OH, OW = p.out_shape
    KH, KW = p.kernel
    SH, SW = p.stride
    DH, DW = p.dilation
    top, left = p.pads[0], p.pads[1]
    CB, R, rb, L = p.cb, p.buffer_rows, p.row_in_beats, READ_DELAY
    needs = p.row_needs()
    if p.depthwise:          # one window's beats in issue order, as (kh, kw, cb)
        window = [(kh, kw, cb) for cb in range(CB) for kh in range(KH) for kw in range(KW)]
    else:
        window = [(kh, kw, cb) for kh in range(KH) for kw in range(KW) for cb in range(CB)]

    def first(J):            # F of global output row J, in global input rows
        return (J // OH) * H + needs[J % OH][0]

    def beats_back(J):       # (global input row or None for padding, word) backwards from J
        while True:
            f, oh = divmod(J, OH)
            for ow in reversed(range(OW)):
                for kh, kw, cb in reversed(window):
                    h, w = oh * SH - top + kh * DH, ow * SW - left + kw * DW
                    inside = 0 <= h < H and 0 <= w < W
                    yield (f * H + h if inside else None), w * CB + cb
            J -= 1

    for J in range(OH):
        gen = beats_back(J)
        last = [next(gen) for _ in range(L)]           # last[k]: k beats before the end
        step = first(J + 1) - first(J)
        for j in range(L):                             # cycle t + 1 + j, t the row's last issue
            row, word = last[L - 1 - j]
            if row is None:
                continue
            q = j - late                               # the last word landed
            for a in range(min(step, q // rb + 1) if q >= 0 else 0):    # writer in row F + R + a
                if row % R == (first(J) + R + a) % R and word <= q - a * rb:   # ... word ≤ q
                    return False
    return True


def _counter(n: int) -> Signal:
    return Signal(range(max(n, 2)))


class SWG(wiring.Component):
    """The sliding-window generator. See the module documentation for the contract."""

    def __init__(self, p: SWGParams):
        self.p = p
        width = p.simd * p.qtype.bits
        super().__init__({
            "i": In(streams.signature(width, p.ready_copies)),
            "o": Out(stream.Signature(unsigned(width))),
        })

    def elaborate(self, platform):
        p = self.p
        m = Module()
        H, W, _ = p.in_shape
        KH, KW = p.kernel
        SH, SW = p.stride
        DH, DW = p.dilation
        EH, EW = p.span
        top, left, _, _ = p.pads
        OH, OW = p.out_shape
        CB, SIMD, bits = p.cb, p.simd, p.qtype.bits
        R = p.buffer_rows
        row_beats = W * CB
        depth = R * row_beats

        late = late_write(p)
        wr, rd = ram(m, "linebuf", width=SIMD * bits, depth=max(depth, 2),
                     rw=buffer_rw(p), style=buffer_style(p))

        # --- output stage: FIFO, credits, write register ---------------------------------
        out = output_stage.OutputStage(m, self.o, SIMD * bits, PIPELINE_DEPTH)

        # --- reader state -----------------------------------------------------------------
        loop_oh, loop_ow = Loop(m, OH, "oh"), Loop(m, OW, "ow")
        loop_kh, loop_kw, loop_cb = Loop(m, KH, "kh"), Loop(m, KW, "kw"), Loop(m, CB, "cb")
        oh, ow, kh, kw, cb = (lp.value for lp in (loop_oh, loop_ow, loop_kh, loop_kw, loop_cb))
        hb_lo, hb_hi = -top - 1, max((OH - 1) * SH - top, H) + EH + 2
        hb = Signal(range(hb_lo, hb_hi), init=-top)
        wb = Signal(range(-left - 1, max((OW - 1) * SW - left, W) + EW + 2), init=-left)
        sb = Signal(range(max(R, 2)), init=(-top) % R)     # slot of row hb
        # writer row in the reader's frame
        wrel = Signal(range(-H - 2, H + R + 3))

        # F + R (the writer's bound) and ``need`` (the last row the reader's row needs) follow
        # ``hb`` in registers of their own, updated in the same cycle as ``hb``
        def const_first(x):
            return min(max(x, 0), H)

        def const_need(x):
            return min(max(x + EH - 1, 0), H - 1)

        FR = Signal(range(H + R + 1), init=const_first(-top) + R)
        need = Signal(range(max(H, 2)), init=const_need(-top))
        # their values for the next output row, from ``hb + SH``: the sums ``hb + SH + R`` and
        # ``hb + SH + EH - 1`` are registers of their own that move with ``hb`` (so only the
        # clamps' compares with constants are left), and the bounds are registered (one cycle
        # after ``hb`` moves, so the clamps are off the issue path) when output rows are at
        # least two beats apart
        hb_fr = Signal(range(hb_lo + SH + R, hb_hi + SH + R), init=-top + SH + R)
        hb_need = Signal(range(hb_lo + SH + EH - 1, hb_hi + SH + EH - 1),
                         init=-top + SH + EH - 1)
        FR_next = Mux(hb_fr < R, R, Mux(hb_fr > H + R, H + R, hb_fr))
        need_next = Mux(hb_need < 0, 0, Mux(hb_need > H - 1, H - 1, hb_need))
        if bounds_registered(p):
            FR_next = reg(m, FR_next, FR.shape(), "fr_next")
            need_next = reg(m, need_next, need.shape(), "need_next")

        inner = ([loop_kw, loop_kh, loop_cb] if p.depthwise
                 else [loop_cb, loop_kw, loop_kh])
        win_first = loop_kh.first & loop_kw.first & loop_cb.first
        row_first = win_first & loop_ow.first
        # ``row_ok`` is a register kept equal to ``wrel > need`` (from their next values, below):
        # the issue condition starts at flip-flops, not at the compare
        row_ok = Signal(init=int(0 > const_need(-top)), name="row_ok")
        issue = Signal()
        m.d.comb += issue.eq(out.room & (~row_first | row_ok))
        out.spend(issue)

        carry = Const(1)
        for lp in inner:
            lp.step(issue & carry)
            carry = carry & lp.last
        win_last = carry
        ow_last = loop_ow.last
        oh_last = loop_oh.last
        # a row's last beat issues on ``out.room`` alone when rows are two beats or more
        # (its last beat is not its first, which waits for ``row_ok``): ``row_ok`` and
        # ``take`` then leave the paths of ``row_adv`` into their own next values (ResNet-8:
        # ``row_ok`` through the issue into its own compares' select, 5 levels)
        last_issue = out.room if bounds_registered(p) else issue
        frame_wrap = last_issue & win_last & ow_last & oh_last

        # the reader's row advances: the bounds move to the next row's (the first row's at a
        # frame's end) and ``wrel`` drops by ``H``
        row_adv = last_issue & win_last & ow_last
        m.d.sync += FR.eq(Mux(row_adv, Mux(oh_last, const_first(-top) + R, FR_next), FR))
        with m.If(row_adv):
            loop_ow.clear()
            m.d.sync += wb.eq(-left)
            with m.If(oh_last):
                loop_oh.clear()
                m.d.sync += [hb.eq(-top),
                             need.eq(const_need(-top)), hb_fr.eq(hb_fr.init),
                             hb_need.eq(hb_need.init)]
            with m.Else():
                loop_oh.step(Const(1))
                m.d.sync += [hb.eq(hb + SH),
                             need.eq(need_next), hb_fr.eq(hb_fr + SH),
                             hb_need.eq(hb_need + SH)]
            nsb = sb + Mux(oh_last, (H - (OH - 1) * SH) % R, SH % R)
            m.d.sync += sb.eq(Mux(nsb >= R, nsb - R, nsb))
        with m.If(issue & win_last & ~ow_last):
            loop_ow.step(Const(1))
            m.d.sync += wb.eq(wb + SW)

        # --- issue stage: position, pad flag, slot ---------------------------------------
        h = hb + kh * DH
        wcol = wb + kw * DW
        pad = (h < 0) | (h >= H) | (wcol < 0) | (wcol >= W)
        slot_sum = sb + kh * DH          # < 2R: (KH - 1)*DH < EH <= R
        slot = Mux(slot_sum >= R, slot_sum - R, slot_sum)

        v1, pad1 = Signal(), Signal()
        slot1, w1, cb1 = Signal(range(max(R, 2))), Signal(range(max(W, 2))), _counter(CB)
        m.d.sync += [v1.eq(issue), pad1.eq(pad), slot1.eq(slot), w1.eq(wcol), cb1.eq(cb)]

        # --- stage 1: read address (registered) --------------------------------------------
        abits = Shape.cast(range(max(depth, 2))).width
        slot_p, w_p = _address_products(p)
        addr2 = reg(m, _times(slot1, slot_p, abits) + _times(w1, w_p, abits) + cb1,
                    unsigned(abits), "addr2")
        m.d.comb += rd.addr.eq(addr2)
        v2, pad2 = delay(m, v1, 1, "v1"), delay(m, pad1, 1, "pad1")

        # --- stage 3: the memory's data registered; stage 4: data or padding → output -----
        data4 = reg(m, rd.data, unsigned(SIMD * bits), "data4")
        v4, pad4 = delay(m, v2, 2, "v2"), delay(m, pad2, 2, "pad2")
        pad_word = pack_word([p.pad_value] * SIMD, bits)
        out.write(Mux(pad4, pad_word, data4), v4)

        # --- writer ----------------------------------------------------------------------
        waddr = Signal(range(max(depth, 2)))
        wbeat = Loop(m, row_beats, "wbeat")
        # the input's ready from a register of its own, kept equal to ``wrel < FR`` (from their
        # next values, below): it reaches the enables of every slice of the FIFO before the
        # generator from a flip-flop, not through the compare
        # the generator's own handshake from a kept copy of ``take``: the ready's loads are
        # the FIFO's read enables, and the handshake the tools build for them sits by the
        # FIFO (ResNet-8: ``take`` to a gate beside the FIFO and back into ``row_ok``, 6.5 ns
        # of route); this copy's loads are the writer's own. ``take`` is kept too: two
        # registers of one next value are otherwise merged into one again (the kept one)
        take_init = int(wrel.init < FR.init)
        take_next_s = Signal(name="take_next")
        take = kept_copy(m, take_next_s, "take", reset=True, init=take_init)
        m.d.comb += self.i.ready.eq(take)
        take_w = kept_copy(m, take_next_s, "take_w", reset=True, init=take_init)
        fire = self.i.valid & take_w
        if late:
            # the write a cycle late, from registers: the enable reaches every LUT RAM cell
            # of the buffer from a flip-flop (see *Line buffer memory*)
            wen = Signal()
            m.d.sync += wen.eq(fire)
            m.d.comb += [wr.addr.eq(reg(m, waddr, waddr.shape(), "waddr_late")),
                         wr.data.eq(reg(m, self.i.payload, unsigned(SIMD * bits), "wdata_late")),
                         wr.en.eq(wen)]
        else:
            m.d.comb += [wr.addr.eq(waddr), wr.data.eq(self.i.payload), wr.en.eq(fire)]
        row_done = fire & wbeat.last
        wbeat.step(fire)
        with m.If(fire):
            m.d.sync += [
                waddr.eq(Mux(waddr == depth - 1, 0, waddr + 1)),
            ]
        # ``wrel + 1`` is a register of its own, moving with ``wrel``
        wrel1 = Signal(wrel.shape(), init=wrel.init + 1, name="wrel1")
        # every sum is of registers only (``wrel``, ``wrel + 1`` and ``wrel + 2`` with and
        # without the frame's end); the late ``row_done`` (the input's handshake) and
        # ``frame_wrap`` (the issue) select among them after the carry chains (DS-CNN's
        # paths: the issue or the handshake into ``wrel``'s adder, 9 and 10 levels); each
        # candidate is one register and one constant, one carry chain (``wrel1 + 1 - H`` as
        # two adders was a chain after a chain)
        def moved(x, x1=None):  # x + row_done, less H at a frame's end (x1: x + 1 in a register)
            plus1 = x + 1 if x1 is None else x1
            return Mux(frame_wrap, Mux(row_done, x + (1 - H), x - H), Mux(row_done, plus1, x))
        m.d.sync += [wrel.eq(moved(wrel, wrel1)), wrel1.eq(moved(wrel1))]
        # ``take`` and ``row_ok`` in the next cycle: every compare of the next ``wrel`` with the
        # next bound is one carry chain between registers (or a register and a constant),
        # made in parallel with the issue logic; the late ``row_adv``, ``oh_last`` and
        # ``row_done`` only select among them
        take_next = _next_compare(wrel, wrel1, row_done, row_adv, oh_last,
                                  lambda x: x < FR, lambda x: x < FR_next,
                                  lambda x: x < const_first(-top) + R + H)
        if p.ready_copies:                  # each slice's ready: a kept copy of ``take``
            m.d.comb += self.i.ready_slices.eq(Cat(*kept_copies(
                m, take_next, p.ready_copies, "take_c", reset=True, init=take_init)))
        m.d.comb += take_next_s.eq(take_next)
        m.d.sync += [
            row_ok.eq(_next_compare(wrel, wrel1, row_done, row_adv, oh_last,
                                    lambda x: x > need, lambda x: x > need_next,
                                    lambda x: x > const_need(-top) + H)),
        ]
        return m


def _next_compare(wrel, wrel1, row_done, row_adv, oh_last, same, nxt, first_h):
    """A flag's next value ``cmp(wrel', bound')`` for the writer row ``wrel' = wrel + row_done
    (- H at a frame's end)`` and the bound ``bound'`` (``same``: unchanged, ``nxt``: the next
    output row's; ``first_h``: the compare with the first row's, ``H`` added to the constant
    instead of taken from the row). ``wrel1`` is the register equal to ``wrel + 1``."""
    def pick(x):
        return Mux(row_adv, Mux(oh_last, first_h(x), nxt(x)), same(x))
    return Mux(row_done, pick(wrel1), pick(wrel))


# ---------------------------------------------------------------------------- registration

def manifest(p: SWGParams) -> dict:
    return {"window": {"in_hwc": list(p.in_shape), "kernel": list(p.kernel),
                       "stride": list(p.stride), "pads": list(p.pads),
                       "dilation": list(p.dilation), "depthwise_order": p.depthwise},
            "folding": {"simd": p.simd}}


def fold_space(p: SWGParams) -> FoldSpace:
    return FoldSpace((1,), divisors(p.in_shape[2]),
                     lambda pe, simd: cost(dataclasses.replace(p, simd=simd)).cycles)



def examples() -> list[Example]:
    """Small instances for the conformance test: 3×3 "same" with SIMD a divisor of C; 3×3
    "valid" at SIMD 1 (frames overlap); 2×2/2 pooling order; 1×1 pass; stride 2 with
    one-sided pads and dilation."""
    i8, u8 = QType(8, True), QType(8, False)
    out = []
    for shape, k, s, pads, t, simd, dw, dil in (
            ((5, 5, 4), (3, 3), (1, 1), (1, 1, 1, 1), i8, 2, False, (1, 1)),
            ((4, 5, 2), (3, 3), (1, 1), (0, 0, 0, 0), u8, 1, False, (1, 1)),
            ((4, 4, 4), (2, 2), (2, 2), (0, 0, 0, 0), i8, 4, True, (1, 1)),
            ((3, 4, 4), (1, 1), (1, 1), (0, 0, 0, 0), u8, 4, False, (1, 1)),
            ((6, 5, 2), (3, 2), (2, 1), (1, 0, 2, 1), i8, 1, False, (2, 1))):
        p = SWGParams(shape, k, s, pads, t.lo + 3, t, simd, dw, dil)
        out.append(Example(p, (Port(t, simd, p.in_elems),), (Port(t, simd, p.out_elems),),
                           "x".join(map(str, shape)) + f"-k{k[0]}x{k[1]}-s{s[0]}x{s[1]}"
                           f"-simd{simd}{'-dw' if dw else ''}"))
    return out


def slice_ports(p: SWGParams, port: str, widths: list[int]) -> SWGParams | None:
    """``p`` reading a sliced input stream of the slices ``widths``: a copy of the input's
    ready register per slice (None for the output)."""
    if port != "i" or len(widths) < 2:
        return None
    return dataclasses.replace(p, ready_copies=len(widths))


register_block("swg", params=SWGParams, component=SWG, golden=golden, cost=cost,
               timing=timing, manifest=manifest, fold_space=fold_space,
               slice_ports=slice_ports, examples=examples)
