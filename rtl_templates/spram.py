"""Constant memories held in iCE40 UltraPlus SPRAM and loaded after reset from a stream.

The UP5K's four SB_SPRAM256KA (16384 words × 16 bits each) are single-port RAMs that the
bitstream does not initialize. A block's constant memory (an MVAU's weights) can live there:
it is then written during a *load phase* after reset from the **weight-load stream** and
read-only afterwards.

Load stream
    16-bit words (``LOAD_BITS``) on a valid/ready stream. Every block with a loaded memory has
    ``wl_i`` (in), ``wl_o`` (out) and ``loaded`` (out). While loading it takes every beat of
    ``wl_i`` (ready high) into its memory; once it holds its last word ``loaded`` rises, and
    from then on it passes ``wl_i`` to ``wl_o`` unchanged (valid, ready and payload wired
    through). The blocks are daisy-chained in a fixed order, so one stream loads them all:
    the image (:func:`load_words` of every memory, in chain order) is the concatenation.

Layout (:class:`LoadLayout`)
    A memory of ``depth`` words of ``width`` bits is stored as ``rows`` rows of ``pack``
    words (``pack`` the largest power of two with ``pack·width ≤ 16``; 1 for ``width ≥ 16``),
    word ``a`` in row ``a // pack``, lane ``a % pack`` (bits ``[lane·width, (lane+1)·width)``).
    A row is ``columns`` = ⌈pack·width / 16⌉ SPRAM columns of 16 bits; the load image gives,
    row by row, each column's 16 bits (column 0 first). It takes ``columns·⌈rows/16384⌉``
    SPRAM tiles (:attr:`LoadLayout.tiles`).

Hardware (:func:`loaded_memory`)
    One memory per column, written and read through one address (the load counter while
    loading, the reader's row after), with ``ram_style = "huge"`` and no read-before-write
    check, and no initial content: :func:`strip_load_init` removes the all-zero
    initialization Amaranth writes into RTLIL, so ``synth_ice40 -spram`` maps each column to
    SB_SPRAM256KA. Reads are synchronous (the word one cycle after the address), as
    :class:`amaranth.lib.memory.Memory`'s read port.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from amaranth.hdl import Cat, Module, Mux, Signal, unsigned
from amaranth.lib import stream
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

#: bits of one weight-load beat and of one SPRAM column
LOAD_BITS = 16
#: words of one SB_SPRAM256KA
SPRAM_DEPTH = 16384
#: the text every loaded memory's name carries (:func:`strip_load_init` finds them by it)
MARK = "spram_load"


@dataclass(frozen=True)
class LoadLayout:
    """How a ``width``-bit × ``depth``-word constant memory sits in SPRAM (module notes)."""
    width: int
    depth: int

    def __post_init__(self):
        if self.width < 1 or self.depth < 1:
            raise ValueError(f"a loaded memory needs words, not {self.width}×{self.depth}")

    @property
    def pack(self) -> int:
        if self.width >= LOAD_BITS:
            return 1
        return 1 << ((LOAD_BITS // self.width).bit_length() - 1)

    @property
    def rows(self) -> int:
        return -(-self.depth // self.pack)

    @property
    def row_bits(self) -> int:
        return self.width * self.pack

    @property
    def columns(self) -> int:
        return -(-self.row_bits // LOAD_BITS)

    @property
    def load_words(self) -> int:
        """Beats of the load stream this memory takes."""
        return self.rows * self.columns

    @property
    def tiles(self) -> int:
        """SB_SPRAM256KA tiles: ⌈width/16⌉ · ⌈depth/16384⌉ for the stored rows."""
        return self.columns * -(-self.rows // SPRAM_DEPTH)


def load_words(layout: LoadLayout, words) -> list[int]:
    """The load-stream beats of a memory holding ``words`` (``layout.depth`` unsigned ints of
    ``layout.width`` bits): row by row, each row's columns from bit 0 up; unused lanes 0."""
    words = [int(w) for w in words]
    if len(words) != layout.depth:
        raise ValueError(f"{len(words)} words for a memory of {layout.depth}")
    mask = (1 << layout.width) - 1
    out = []
    for r in range(layout.rows):
        row = 0
        for lane, w in enumerate(words[r * layout.pack:(r + 1) * layout.pack]):
            row |= (w & mask) << (lane * layout.width)
        out += [(row >> (LOAD_BITS * c)) & 0xFFFF for c in range(layout.columns)]
    return out


def load_ports() -> dict:
    """The component members of a block with a loaded memory: the weight-load stream in
    (``wl_i``) and on (``wl_o``), and ``loaded``."""
    return {"wl_i": In(stream.Signature(unsigned(LOAD_BITS))),
            "wl_o": Out(stream.Signature(unsigned(LOAD_BITS))), "loaded": Out(1)}


def loaded_memory(m: Module, name: str, layout: LoadLayout, wl_i, wl_o) -> tuple:
    """A read-only memory of ``layout`` loaded from stream ``wl_i`` (passed on to ``wl_o``
    once loaded), added to ``m``. Returns ``(addr, data, loaded)``: the word at ``addr`` is on
    ``data`` the cycle after; ``loaded`` is high from the cycle after the last load beat."""
    L = layout
    loading = Signal(init=1, name=f"{name}_loading")
    loaded = Signal(name=f"{name}_loaded")
    lrow = Signal(range(max(L.rows, 2)), name=f"{name}_lrow")
    lcol = Signal(range(max(L.columns, 2)), name=f"{name}_lcol")
    take = Signal(name=f"{name}_take")
    m.d.comb += [
        loaded.eq(~loading),
        take.eq(wl_i.valid & loading),
        wl_i.ready.eq(loading | wl_o.ready),
        wl_o.valid.eq(wl_i.valid & ~loading),
        wl_o.payload.eq(wl_i.payload),
    ]
    with m.If(take):
        with m.If(lcol == L.columns - 1):
            m.d.sync += lcol.eq(0)
            with m.If(lrow == L.rows - 1):
                m.d.sync += [lrow.eq(0), loading.eq(0)]
            with m.Else():
                m.d.sync += lrow.eq(lrow + 1)
        with m.Else():
            m.d.sync += lcol.eq(lcol + 1)

    addr = Signal(range(max(L.depth, 2)), name=f"{name}_addr")
    shift = L.pack.bit_length() - 1
    row = Signal(range(max(L.rows, 2)), name=f"{name}_row")
    m.d.comb += row.eq(addr >> shift)
    at = Signal.like(row, name=f"{name}_at")
    m.d.comb += at.eq(Mux(loading, lrow, row))
    datas = []
    for c in range(L.columns):
        cw = min(LOAD_BITS, L.row_bits - LOAD_BITS * c)
        mem = Memory(shape=cw, depth=L.rows, init=[],
                     attrs={"ram_style": "huge", "no_rw_check": 1})
        m.submodules[f"{name}_{MARK}{c}"] = mem
        wr, rd = mem.write_port(), mem.read_port()
        m.d.comb += [wr.addr.eq(at), rd.addr.eq(at), wr.data.eq(wl_i.payload[:cw]),
                     wr.en.eq(take & (lcol == c))]
        datas.append(rd.data)
    row_data = Cat(*datas)
    data = Signal(L.width, name=f"{name}_data")
    if L.pack == 1:
        m.d.comb += data.eq(row_data)
    else:
        lane = Signal(shift, name=f"{name}_lane")
        m.d.sync += lane.eq(addr[:shift])
        m.d.comb += data.eq(row_data.word_select(lane, L.width))
    return addr, data, loaded


_INIT = re.compile(r"\n  cell \$meminit_v2 \S+\n    parameter \\MEMID \"[^\"\n]*"
                   + MARK + r"[^\"\n]*\"\n(?:    .*\n)*?  end\n")


def strip_load_init(text: str) -> str:
    """RTLIL ``text`` without the initialization of the loaded memories (Amaranth writes
    every memory's initial content, all zeros for these; SPRAM has none)."""
    return _INIT.sub("\n", text)
