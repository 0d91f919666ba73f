"""Memories the synthesis tools map on purpose: the policy, the hardware helpers, and what Yosys
makes of each memory on the two FPGA families hwgen targets.

Styles
    Every memory of a block has one of three styles, chosen by :func:`choose_style` from its
    shape (or given by the caller):

    ``logic``
        registers (a RAM) or LUTs (a ROM). A one-word RAM is written as a register, never as
        a memory (Yosys replaces a one-word memory "with list of registers" and warns); a
        one-word ROM is a constant. A larger ROM in this style is a
        memory with ``rom_style = "logic"``: a multiplexer of constants, about
        ``width·depth/16`` LUT4 per read port, plus the read register.
    ``distributed``
        a RAM that ECP5 LUT RAM holds for less than block RAM, written as a memory with a
        synchronous read port and no style attribute. On ECP5 Yosys maps it to LUT RAM
        (``TRELLIS_DPR16X4``, 16 words × 4 bits, asynchronous read) and puts the read register
        in flip-flops (or, for a RAM of a handful of bits such as 1 × 4, to registers). iCE40
        has no LUT RAM; Yosys picks block RAM or registers by its cost model (registers below
        about 66 bits). ``ram_style = "distributed"`` cannot be written instead:
        ``synth_ice40`` stops with "no valid mapping found" on it.
    ``block``
        a memory with ``ram_style``/``rom_style = "block"`` and a synchronous read port (the
        read register is the block RAM's own): ECP5 ``DP16KD`` (also in its 36-bit
        pseudo-dual-port mode), iCE40 ``SB_RAM40_4K``. A RAM or ROM deeper than one ECP5 tile's
        widest mode (512 words) is written as columns (:func:`block_columns`), each as
        narrow as it takes for one tile to hold every word: a DP16KD's data leaves the
        tile 5.8 ns after the clock, so a multiplexer of tiles stacked in depth after it
        (Yosys's choice where it saves tiles) leaves no room in an 8 ns period.

    The policy (:func:`choose_style`) uses Yosys' own exchange rates (a DP16KD costs 128, an
    SB_RAM40_4K 64, a TRELLIS_DPR16X4 4, a register bit 1, a LUT ROM bit 1/16) and pins
    block RAM and LUT ROM with attributes, so both families put the same memories in block
    RAM:

    * RAM: one word → a register; otherwise distributed when ECP5 LUT RAM (or registers)
      costs less than block RAM — up to 32 words at any width; with no read-before-write
      logic up to 64 words of 18 or 40 bits, 80 of 16, 160 of 8, 400 of 1 — block beyond;
    * ROM: one word, or all words equal → a constant; block when block RAM costs less than
      LUT ROM (one multiplexer per read port) on both families — the ROM fills its tiles
      with more than :data:`ROM_LUT_BITS_PER_TILE` bits (times its read ports) per tile, or
      is deeper than :data:`LOGIC_ROM_MAX_DEPTH` words (a deeper multiplexer is too slow);
      logic otherwise.

Reads and writes in the same cycle
    A RAM read port is synchronous (data the cycle after the address). What it returns when
    the same word is written in that cycle is the caller's choice (``rw``): ``"old"`` (the
    word before the write: Amaranth's default, which Yosys emulates on block RAM with a
    delayed write and a bypass), ``"new"`` (transparent; emulated with a bypass), or
    ``"dont_care"`` — the caller guarantees that such a read is never used, and the memory
    carries Yosys' ``no_rw_check`` attribute, so no emulation logic is built. Simulation
    keeps Amaranth's read-old behaviour; only unused reads may differ in silicon.

What Yosys makes of a memory
    :func:`yosys_mapping` reproduces Yosys 0.70 ``memory_libmap`` for the memories built here
    (one synchronous write port or none, synchronous read ports, no byte enables): the
    primitive and how many of them, on ``"ecp5"`` (``synth_ecp5``: DP16KD / PDPW16KD — both
    counted as ``DP16KD`` cells — and TRELLIS_DPR16X4) and ``"ice40"`` (``synth_ice40``:
    SB_RAM40_4K in 256×16, 512×8, 1024×4, 2048×2). :func:`bram_tiles` is the block RAM count
    the resource model needs. ``tests/blocks/test_memory.py`` checks both against Yosys.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from amaranth.hdl import Cat, Const, Elaboratable, Module, Mux, Signal
from amaranth.lib.memory import Memory

from hwgen.rtl_templates.kept import kept_follower
from hwgen.rtl_templates.pipeline import up_down

__all__ = ["BLOCK", "DISTRIBUTED", "LOGIC", "FAMILIES", "ROM_LUT_BITS_PER_TILE",
           "ROM_FANOUT", "FIFO_SLICE_BITS", "FIFO_LOGIC_SLICE_BITS", "LOGIC_ROM_MAX_DEPTH",
           "BufferedFIFO", "Mapping",
           "MemorySpec", "ROMLayout",
           "block_columns", "bram_tiles", "choose_style", "fifo_memory", "fifo_slices", "lane_rom",
           "lane_rom_slices", "plain_rom_attrs", "ram", "rom", "rom_layout", "rom_spec",
           "yosys_attrs", "yosys_mapping"]

LOGIC, DISTRIBUTED, BLOCK = "logic", "distributed", "block"
STYLES = (LOGIC, DISTRIBUTED, BLOCK)
FAMILIES = ("ecp5", "ice40")
RW_MODES = ("old", "new", "dont_care")

#: bits of LUT ROM that cost as much as one block RAM tile in Yosys' model (DP16KD 128 · 16,
#: SB_RAM40_4K 64 · 16)
ROM_LUT_BITS_PER_TILE = {"ecp5": 2048, "ice40": 1024}

#: deepest ROM held in logic: a LUT ROM of D words is a D/16-way multiplexer of LUT4s, one
#: LUT level more per doubling past 16 words. 256 words are 5 levels (about 17 ns on an
#: iCE40 UP5K, inside its 48 MHz period); 768 words were 7 levels, 22.5 ns
LOGIC_ROM_MAX_DEPTH = 256


# ============================================================================ policy

def choose_style(width: int, depth: int, *, rom: bool, read_ports: int = 1,
                 rw: str = "old") -> str:
    """The style of a ``width``-bit × ``depth``-word memory (see the module documentation;
    ``rw`` as in :func:`ram`)."""
    _check_shape(width, depth, read_ports)
    if not rom:
        if depth == 1:
            return LOGIC
        auto = yosys_mapping(width, depth, "ecp5", style=DISTRIBUTED, rom=False,
                             read_ports=read_ports, rw=rw)
        return BLOCK if auto.kind == BLOCK else DISTRIBUTED
    if depth == 1:
        return LOGIC
    if depth > LOGIC_ROM_MAX_DEPTH:
        return BLOCK
    bits = width * depth * read_ports
    for family in FAMILIES:
        tiles = yosys_mapping(width, depth, family, style=BLOCK, rom=True,
                              read_ports=read_ports).count
        if bits <= ROM_LUT_BITS_PER_TILE[family] * tiles:
            return LOGIC
    return BLOCK


def yosys_attrs(style: str, *, rom: bool, rw: str = "old") -> dict:
    """Yosys attributes of a memory of ``style`` (none for a distributed one: see the module
    documentation) and read/write mode ``rw``."""
    if style not in STYLES:
        raise ValueError(f"memory style must be one of {STYLES}, not {style!r}")
    if rw not in RW_MODES:
        raise ValueError(f"read/write mode must be one of {RW_MODES}, not {rw!r}")
    attrs = {}
    if style != DISTRIBUTED:
        attrs["rom_style" if rom else "ram_style"] = style
    if rw == "dont_care" and not rom:
        attrs["no_rw_check"] = 1
    return attrs


def _check_shape(width: int, depth: int, read_ports: int = 1):
    if width < 1 or depth < 1 or read_ports < 1:
        raise ValueError(f"a memory needs a positive width, depth and read port count, not "
                         f"{width}×{depth} with {read_ports} read ports")


# ============================================================================ hardware

class _ReadPort:
    """Stand-in of a synchronous read port: ``addr``, ``en`` in; ``data`` out one cycle after
    the address (same names as :class:`amaranth.lib.memory.ReadPort`)."""

    def __init__(self, width: int, depth: int, name: str):
        self.addr = Signal(range(max(depth, 2)), name=f"{name}_raddr")
        self.en = Signal(init=1, name=f"{name}_ren")
        self.data = Signal(width, name=f"{name}_rdata")


class _WritePort:
    def __init__(self, width: int, depth: int, name: str):
        self.addr = Signal(range(max(depth, 2)), name=f"{name}_waddr")
        self.en = Signal(name=f"{name}_wen")
        self.data = Signal(width, name=f"{name}_wdata")


@dataclass(frozen=True)
class ROMLayout:
    """How :func:`rom` stores a ROM: only its distinct bit columns that are not constant.
    ``words``: the stored words (``width`` bits); ``sources[b]``: where bit ``b`` of a read
    word comes from — ``("col", k)``, bit ``k`` of the stored word, or ``("const", v)``.
    Yosys drops constant columns of a ROM itself (so its block RAM count depends on them);
    duplicate columns (sign extensions) it keeps, and :func:`rom` stores them once."""
    words: tuple[int, ...]
    width: int
    sources: tuple[tuple[str, int], ...]


def rom_layout(init, width: int) -> ROMLayout:
    """The :class:`ROMLayout` of ``init`` (words of ``width`` bits)."""
    init = [int(v) & ((1 << width) - 1) for v in init]
    full = (1 << len(init)) - 1
    seen: dict[int, int] = {}
    cols, sources = [], []
    for b in range(width):
        col = 0
        for i, word in enumerate(init):
            col |= ((word >> b) & 1) << i
        if col in (0, full):
            sources.append(("const", int(col == full)))
        elif col in seen:
            sources.append(("col", seen[col]))
        else:
            seen[col] = len(cols)
            sources.append(("col", len(cols)))
            cols.append(b)
    words = tuple(sum(((word >> b) & 1) << k for k, b in enumerate(cols)) for word in init)
    return ROMLayout(words, len(cols), tuple(sources))


def rom_spec(init, width: int, read_ports: int = 1, style: str | None = None
             ) -> MemorySpec | None:
    """The memory :func:`rom` builds for ``init`` (None: no memory, only constants)."""
    layout = rom_layout(init, width)
    if layout.width == 0 or len(layout.words) == 1:
        return None
    return MemorySpec(layout.width, len(layout.words), rom=True, read_ports=read_ports,
                      style=style)


def rom(m: Module, name: str, *, width: int, init, read_ports: int = 1,
        style: str | None = None) -> list:
    """A ROM of ``len(init)`` words of ``width`` bits with ``read_ports`` synchronous read
    ports, added to ``m`` as submodule ``name``. Returns the read ports (``addr``, ``en`` —
    1 unless driven — and ``data``: the word at ``addr`` one cycle after).

    Only the distinct non-constant bit columns are stored (:func:`rom_layout`); ``style``
    (default :func:`choose_style` of the stored shape) applies to them. A ROM whose words
    are all equal (a one-word ROM, say) is a constant: its ``data`` is the word at every
    cycle."""
    init = [int(v) for v in init]
    depth = len(init)
    _check_shape(width, depth, read_ports)
    if style == DISTRIBUTED:
        raise ValueError("a ROM is logic or block (ECP5 LUT RAM takes no ROM in Yosys)")
    layout = rom_layout(init, width)
    ports = [_ReadPort(width, depth, f"{name}{k}") for k in range(read_ports)]
    spec = rom_spec(init, width, read_ports, style)
    if spec is None:
        m.d.comb += [p.data.eq(Const(init[0] & ((1 << width) - 1), width)) for p in ports]
        return ports
    attrs = yosys_attrs(spec.chosen_style, rom=True)
    columns = block_columns(spec.width, depth) if spec.chosen_style == BLOCK else [spec.width]
    mems, lo = [], 0
    for k, w in enumerate(columns):
        mems.append(Memory(shape=w, depth=depth, init=[(v >> lo) & ((1 << w) - 1)
                                                       for v in layout.words], attrs=attrs))
        m.submodules[name if len(columns) == 1 else f"{name}_c{k}"] = mems[-1]
        lo += w
    for port in ports:
        rds = [mem.read_port() for mem in mems]
        stored = Cat(*(rd.data for rd in rds))
        bits = [stored[k] if kind == "col" else Const(k, 1) for kind, k in layout.sources]
        m.d.comb += [port.data.eq(Cat(*bits))]
        m.d.comb += [a for rd in rds for a in (rd.addr.eq(port.addr), rd.en.eq(port.en))]
    return ports


#: LUTs one copy of a logic ROM's read address drives at most (:func:`lane_rom_slices`)
ROM_FANOUT = 64


def lane_rom_slices(lanes: int, lane_bits: int, depth: int, live_bits: int,
                    logic: bool = False) -> list[tuple[int, int]]:
    """The bit ranges ``(lo, hi)`` of a plain ROM of ``lanes`` lanes of ``lane_bits`` bits ×
    ``depth`` words (``live_bits`` of its columns not constant) that :func:`lane_rom` stores
    as memories of their own, each read through its own copy of the address.

    A ROM that Yosys makes logic (a multiplexer of constants per bit column, on both
    families) has its read address drive every one of its LUTs: a few hundred columns put
    one register's fan-out across the die, and the route, not the logic, sets the clock.
    Such a ROM is cut at lane boundaries into pieces of about :data:`ROM_FANOUT` LUTs each
    (about one LUT per 16 words of a column). Narrower pieces stay logic. A ROM pinned to
    block RAM (deeper than :data:`LOGIC_ROM_MAX_DEPTH`) is cut into pieces of at most
    :data:`ROM_ADDRESS_TILES` tiles (:func:`_tile_groups`): one address register reaching
    the 29 tiles of a 256-bit ROM of 1,152 words was a 10 ns route across the die. Other
    ROMs are one memory. ``logic``: the ROM is logic by its style
    (``rom_style = "logic"``), whatever Yosys would pick."""
    width = lanes * lane_bits
    if not logic and depth > LOGIC_ROM_MAX_DEPTH and lanes > 1:
        return _tile_groups(lanes, lane_bits, depth, live_bits)
    if depth < 2 or live_bits < 1 or lanes < 2 or not logic and (
            depth > LOGIC_ROM_MAX_DEPTH or any(
                yosys_mapping(live_bits, depth, f, style=DISTRIBUTED, rom=True).kind != LOGIC
                for f in FAMILIES)):
        return [(0, width)]
    per = max(1, ROM_FANOUT // (lane_bits * -(-depth // 16)))
    if per >= lanes:
        return [(0, width)]
    return [(i * lane_bits, min(lanes, i + per) * lane_bits) for i in range(0, lanes, per)]


#: block RAM tiles one copy of a block ROM's read address drives at most
#: (:func:`lane_rom_slices`)
ROM_ADDRESS_TILES = 8


def _tile_groups(lanes: int, lane_bits: int, depth: int, live_bits: int
                 ) -> list[tuple[int, int]]:
    """A block ROM's pieces (:func:`lane_rom_slices`) of at most :data:`ROM_ADDRESS_TILES`
    ECP5 tiles each (at the tile's width for ``depth`` words), cut at lane boundaries; each
    as wide as a whole number of tiles where a few lanes make one. One piece when the
    ``live_bits`` stored fit that many tiles."""
    tile = tile_width(depth)
    if live_bits <= ROM_ADDRESS_TILES * tile:
        return [(0, lanes * lane_bits)]
    whole = tile // math.gcd(tile, lane_bits)      # lanes filling whole tiles
    per = ROM_ADDRESS_TILES * tile // lane_bits
    if per >= whole:
        per -= per % whole
    per = max(1, per)
    return [(i * lane_bits, min(lanes, i + per) * lane_bits) for i in range(0, lanes, per)]


def plain_rom_attrs(depth: int, logic: bool = False) -> dict:
    """Attributes of a plain ROM of ``depth`` words: none (Yosys maps it by its own cost),
    except ``rom_style = "logic"`` when ``logic``, and ``"block"`` when it is deeper than
    :data:`LOGIC_ROM_MAX_DEPTH` (where Yosys' cost would pick a slow multiplexer of LUTs for
    a narrow one: 768 × 1 bit is 7 LUT levels on iCE40)."""
    if logic:
        return yosys_attrs(LOGIC, rom=True)
    return yosys_attrs(BLOCK, rom=True) if depth > LOGIC_ROM_MAX_DEPTH else {}


def _column_rom(m: Module, name: str, width: int, init: list[int]) -> _ReadPort:
    """A block ROM deeper than a tile's widest mode as :func:`lane_rom` stores it: its
    non-constant bit columns (the ones Yosys would keep), stored as columns one tile each
    holds (:func:`block_columns` of the live width), the constant bits as constants."""
    depth = len(init)
    port = _ReadPort(width, depth, name)
    live = [b for b in range(width) if len({(v >> b) & 1 for v in init}) > 1]
    bits = {b: Const((init[0] >> b) & 1, 1) for b in range(width)}
    lo = 0
    for k, w in enumerate(block_columns(len(live), depth) if live else []):
        cols = live[lo:lo + w]
        mem = Memory(shape=w, depth=depth, attrs=yosys_attrs(BLOCK, rom=True),
                     init=[sum(((v >> b) & 1) << j for j, b in enumerate(cols)) for v in init])
        m.submodules[f"{name}_c{k}"] = mem
        rd = mem.read_port()
        m.d.comb += [rd.addr.eq(port.addr), rd.en.eq(port.en)]
        bits.update({b: rd.data[j] for j, b in enumerate(cols)})
        lo += w
    m.d.comb += port.data.eq(Cat(*(bits[b] for b in range(width))))
    return port


def lane_rom(m: Module, name: str, width: int, init, slices: list[tuple[int, int]],
             logic: bool = False) -> list:
    """Plain ROMs (no attributes: Yosys picks their mapping; ``logic``: ``rom_style =
    "logic"``) of the ``(lo, hi)`` bit ranges ``slices`` (:func:`lane_rom_slices`) of words
    ``init`` of ``width`` bits; returns their read ports, in order (their data joined is the
    word). One slice: one memory ``name``."""
    init = [int(v) for v in init]
    attrs = plain_rom_attrs(len(init), logic)
    if not logic and len(block_columns(width, len(init))) > 1:
        return [_column_rom(m, name if len(slices) == 1 else f"{name}_{k}", hi - lo,
                            [(v >> lo) & ((1 << (hi - lo)) - 1) for v in init])
                for k, (lo, hi) in enumerate(slices)]
    if len(slices) == 1:
        mem = Memory(shape=width, depth=len(init), init=init, attrs=attrs)
        m.submodules[name] = mem
        return [mem.read_port()]
    ports = []
    for k, (lo, hi) in enumerate(slices):
        mask = (1 << (hi - lo)) - 1
        mem = Memory(shape=hi - lo, depth=len(init), init=[(v >> lo) & mask for v in init],
                     attrs=attrs)
        m.submodules[f"{name}_{k}"] = mem
        ports.append(mem.read_port())
    return ports


def ram(m: Module, name: str, *, width: int, depth: int, rw: str = "old",
        read_en: bool = False, style: str | None = None):
    """A RAM of ``depth`` words of ``width`` bits with one write port and one synchronous
    read port, added to ``m`` as ``name``; returns ``(write_port, read_port)`` with the
    signals of :class:`amaranth.lib.memory.WritePort` (``addr``, ``data``, ``en``) and
    ``ReadPort`` (``addr``, ``en``, ``data``).

    ``rw``: what a read returns when its word is written in the same cycle (``"old"``,
    ``"new"``, or ``"dont_care"``: never used; see the module documentation). ``read_en``:
    the caller drives the read port's ``en`` (its data then holds while ``en`` is low);
    otherwise the port reads every cycle. ``style``: :func:`choose_style` by default; a
    one-word RAM is always a register."""
    _check_shape(width, depth)
    if rw not in RW_MODES:
        raise ValueError(f"read/write mode must be one of {RW_MODES}, not {rw!r}")
    style = style or choose_style(width, depth, rom=False, rw=rw)
    if depth == 1:
        return _register_ram(m, name, width, rw, read_en)
    columns = block_columns(width, depth) if style == BLOCK else [width]
    if len(columns) > 1:
        ports = _ColumnRAM(m, name, width, depth, columns, yosys_attrs(style, rom=False, rw=rw),
                           rw, read_en)
        return ports.wr, ports.rd
    mem = Memory(shape=width, depth=depth, init=[], attrs=yosys_attrs(style, rom=False, rw=rw))
    m.submodules[name] = mem
    wr = mem.write_port()
    rd = mem.read_port(transparent_for=(wr,) if rw == "new" else ())
    return wr, rd


def _register_ram(m: Module, name: str, width: int, rw: str, read_en: bool):
    """A one-word RAM as a register, with the read semantics of :func:`ram`."""
    wr, rd = _WritePort(width, 1, name), _ReadPort(width, 1, name)
    word = Signal(width, name=f"{name}_word", reset_less=True)
    with m.If(wr.en):
        m.d.sync += word.eq(wr.data)
    if read_en or rw == "old":
        # a data register, as in a memory's read port
        cur = Mux(wr.en, wr.data, word) if rw == "new" else word
        with m.If(rd.en if read_en else 1):
            m.d.sync += rd.data.eq(cur)
    else:
        # new data (or don't care) and no enable: the word after this cycle's write
        m.d.comb += rd.data.eq(word)
    return wr, rd


#: ECP5 DP16KD: (words, the widest data width a tile holds that many words at)
_TILE_DEPTHS = ((512, 36), (1024, 18), (2048, 9), (4096, 4), (8192, 2), (16384, 1))


def tile_width(depth: int) -> int:
    """The widest data an ECP5 tile holds ``depth`` words at (one bit beyond 16,384 words:
    the tiles are then stacked)."""
    return next((w for d, w in _TILE_DEPTHS if depth <= d), 1)


def block_columns(width: int, depth: int) -> list[int]:
    """The widths of the column memories :func:`ram` builds a block RAM of ``depth`` words
    of ``width`` bits of: each as wide as an ECP5 tile is at that depth, so every column's
    tiles hold all the words side by side and no read multiplexer follows them. One column
    up to 512 words (and beyond 16,384, where no tile holds every word)."""
    if depth <= _TILE_DEPTHS[0][0] or depth > _TILE_DEPTHS[-1][0]:
        return [width]
    cw = tile_width(depth)
    full, rest = divmod(width, cw)
    return [cw] * full + ([rest] if rest else [])


class _ColumnRAM:
    """The ports of a RAM built of column memories (:func:`block_columns`): one address and
    enable for all, the data split across the columns."""

    def __init__(self, m: Module, name: str, width: int, depth: int, columns: list[int],
                 attrs: dict, rw: str, read_en: bool):
        self.wr, self.rd = _WritePort(width, depth, name), _ReadPort(width, depth, name)
        lo, data = 0, []
        for k, w in enumerate(columns):
            mem = Memory(shape=w, depth=depth, init=[], attrs=attrs)
            m.submodules[f"{name}_c{k}"] = mem
            wr = mem.write_port()
            rd = mem.read_port(transparent_for=(wr,) if rw == "new" else ())
            m.d.comb += [wr.addr.eq(self.wr.addr), wr.en.eq(self.wr.en),
                         wr.data.eq(self.wr.data[lo:lo + w]), rd.addr.eq(self.rd.addr)]
            if read_en:
                m.d.comb += rd.en.eq(self.rd.en)
            data.append(rd.data)
            lo += w
        m.d.comb += self.rd.data.eq(Cat(*data))


#: words of the small FIFO in logic after a block RAM queue (:meth:`BufferedFIFO._block_queue`).
#: A word that waits in the RAM is readable five cycles after its write (the RAM's write,
#: the issue, the RAM's read, its data register, the small FIFO's own two), three more than
#: a word that bypasses it; it enters the RAM only when the small FIFO is full (or behind
#: one that did), so it has this many words ahead of it, read at most one a cycle
BLOCK_FIFO_OUT = 5
#: widest slice of a :class:`BufferedFIFO` with one control whose queue is block RAM: a
#: multiple of every block RAM data width (ECP5 36, 18, 9; iCE40 16, 8), so slicing adds no
#: tiles
FIFO_SLICE_BITS = 144
#: widest slice of a :class:`BufferedFIFO` with one control whose queue is LUT RAM or
#: registers: a multiple of the LUT RAM's data width (ECP5 TRELLIS_DPR16X4: 4) and of the
#: block RAM widths iCE40 (no LUT RAM) maps such a queue to (16, 8). A control (the read
#: and write enables) drives every flip-flop of its slice's output word; a word read by
#: lanes spread over the die spreads too, and one enable for 144 of its bits routed 5.7 ns
#: on an LFE5U-85F
FIFO_LOGIC_SLICE_BITS = 32


def fifo_slices(width: int, depth: int) -> list[int]:
    """The widths of the slices of a :class:`BufferedFIFO` of ``depth`` words."""
    n = depth - 1
    block = n > 1 and choose_style(max(width, 1), n, rom=False, rw="dont_care") == BLOCK
    size = FIFO_SLICE_BITS if block else FIFO_LOGIC_SLICE_BITS
    full, rest = divmod(width, size)
    return [size] * full + ([rest] if rest or not full else [])


class BufferedFIFO(Elaboratable):
    """First-in first-out queue of ``depth`` words of ``width`` bits, cycle for cycle the same
    as :class:`amaranth.lib.fifo.SyncFIFOBuffered` (the same ports: ``w_data``, ``w_en``,
    ``w_rdy``, ``r_data``, ``r_en``, ``r_rdy``, ``level``), built so the tools map it as this
    module's policy says:

    an inner queue of ``depth - 1`` words and the output register ``r_data`` (for a block
    RAM queue, the RAM, a register after it and a small FIFO in logic whose output register
    is ``r_data``: :meth:`_block_queue`). A word written
    in cycle t can be read from cycle t + 2 on. ``w_rdy`` (a register) is high while the
    inner queue has room, ``r_rdy`` while the output register holds a word (neither depends
    on ``r_en`` or ``w_en``). The inner queue is a :func:`ram` whose reads never meet a
    write of the same word (``rw="dont_care"``): a register for one word (so FIFOs of up to
    2 words have no memory), then LUT RAM or block RAM by the policy. Depth 1 is one
    register that takes a word only while empty.

    A wide word is split into slices (:func:`fifo_slices`: of :data:`FIFO_SLICE_BITS` for a
    block RAM queue, else :data:`FIFO_LOGIC_SLICE_BITS`), each a FIFO with its own pointers
    and levels (all in step; the ports' flags are the first slice's): one control driving
    the write and read enables of hundreds of bits costs more in routing than a clock
    period.

    ``slice_ports``: the slices' read enables and output flags are ports of their own too,
    ``r_en_slices`` and ``r_rdy_slices`` (bit k: slice k's; the flags are all equal), and
    each slice reads on its bit of ``r_en_slices`` instead of on ``r_en`` (unused then): a
    reader keeping a copy of its ready per slice, each next to its slice, drives them (one
    reader's flip-flop reaching every slice's enables across the die is the path it
    removes).

    ``w_slice_ports``: likewise on the write side, ``w_en_slices`` and ``w_rdy_slices``, each
    slice writing on its bit of ``w_en_slices`` instead of on ``w_en`` (unused then): a
    writer keeping a copy of its valid per slice (a sliced FIFO before this one, slice to
    slice) drives them.

    ``w_room_known``: the writer writes only while the FIFO has room (it keeps the count
    itself), so a write is ``w_en`` alone, not ``w_en & w_rdy``: one input less on the
    writer's late enable (the small FIFO of a block RAM queue, whose writes ``held`` and
    ``room`` admit).

    ``r_rdy_copies``: ``r_rdy_c`` holds that many copies of ``r_rdy``, each a register of
    its own equal to ``r_rdy`` in every cycle (:func:`~rtl_templates.kept.kept_follower`),
    for a reader whose valid reaches many places (each copy placed beside its share); a
    FIFO of several slices spreads them over its slices."""

    def __init__(self, *, width: int, depth: int, slice_ports: bool = False,
                 w_slice_ports: bool = False, w_room_known: bool = False,
                 r_rdy_copies: int = 0):
        if width < 0 or depth < 1:
            raise ValueError(f"a FIFO needs depth ≥ 1 and width ≥ 0, not {width}×{depth}")
        self.width, self.depth, self.slice_ports = width, depth, slice_ports
        self.w_slice_ports, self.w_room_known = w_slice_ports, w_room_known
        self.r_rdy_copies = r_rdy_copies
        self.r_rdy_c = Signal(r_rdy_copies)
        n = len(fifo_slices(width, depth))
        self.r_en_slices = Signal(n)
        self.r_rdy_slices = Signal(n)
        self.w_en_slices = Signal(n)
        self.w_rdy_slices = Signal(n)
        self.w_data = Signal(width)
        self.w_en = Signal()
        self.w_rdy = Signal(init=1)
        self.r_data = Signal(width, reset_less=True)      # data: r_rdy says when it holds a word
        self.r_en = Signal()
        self.r_rdy = Signal()
        self.level = Signal(range(depth + 1))

    @property
    def inner_style(self) -> str | None:
        """Style of the inner queue (None for depth 1: one register)."""
        n = self.depth - 1
        return choose_style(max(self.width, 1), n, rom=False, rw="dont_care") if n else None

    def elaborate(self, platform):
        m = Module()
        slices = fifo_slices(self.width, self.depth)
        if len(slices) > 1 or self.slice_ports or self.w_slice_ports:
            lo = 0
            for k, w in enumerate(slices):
                mine = list(range(k, self.r_rdy_copies, len(slices)))   # copies it holds
                part = BufferedFIFO(width=w, depth=self.depth, w_room_known=self.w_room_known,
                                    r_rdy_copies=len(mine))
                m.submodules[f"slice{k}"] = part
                m.d.comb += [self.r_rdy_c[j].eq(part.r_rdy_c[i]) for i, j in enumerate(mine)]
                r_en = self.r_en_slices[k] if self.slice_ports else self.r_en
                w_en = self.w_en_slices[k] if self.w_slice_ports else self.w_en
                m.d.comb += [part.w_data.eq(self.w_data[lo:lo + w]), part.w_en.eq(w_en),
                             part.r_en.eq(r_en), self.r_data[lo:lo + w].eq(part.r_data),
                             self.r_rdy_slices[k].eq(part.r_rdy),
                             self.w_rdy_slices[k].eq(part.w_rdy)]
                if k == 0:
                    m.d.comb += [self.w_rdy.eq(part.w_rdy), self.r_rdy.eq(part.r_rdy),
                                 self.level.eq(part.level)]
                lo += w
            return m
        D = self.depth
        do_write = self.w_en if self.w_room_known else self.w_en & self.w_rdy
        if D == 1:
            m.d.comb += [self.w_rdy.eq(self.level == 0), self.r_rdy.eq(self.level == 1)]
            with m.If(do_write):
                m.d.sync += [self.r_data.eq(self.w_data), self.level.eq(1)]
            with m.If(self.r_en & self.r_rdy):
                m.d.sync += self.level.eq(0)
            self._r_rdy_copies(m, lambda c: Mux(self.r_en & self.r_rdy, 0, do_write | c))
            return m

        n = D - 1
        inner_level = Signal(range(n + 1))
        do_inner_read = Signal()
        # ``w_rdy`` is a register kept equal to ``inner_level != n`` (a stage's ready often
        # fans out to the whole of the writer's datapath: it must start at a flip-flop), and
        # ``nonempty`` one kept equal to ``inner_level != 0``: the read (the consumer's ready,
        # late) meets one small gate, not a compare of the level, on its way to the output
        # word's enable and to the level
        nonempty = Signal(name="inner_nonempty")
        m.d.comb += [
            do_inner_read.eq(nonempty & (~self.r_rdy | self.r_en)),
            self.level.eq(inner_level + self.r_rdy),
        ]
        with m.If(do_write & ~do_inner_read):
            m.d.sync += [self.w_rdy.eq(inner_level != n - 1), nonempty.eq(1)]
        with m.Elif(do_inner_read & ~do_write):
            m.d.sync += [self.w_rdy.eq(1), nonempty.eq(inner_level != 1)]
        staged = n > 1 and self.inner_style == BLOCK
        if staged:
            self._block_queue(m, n, do_write)
        else:
            self._plain_queue(m, n, do_write, do_inner_read)
        # the read is the consumer's ready, often a join's handshake across blocks
        m.d.sync += inner_level.eq(up_down(m, inner_level, do_write, do_inner_read))
        if not staged:
            with m.If(do_inner_read):
                m.d.sync += self.r_rdy.eq(1)
            with m.Elif(self.r_en):
                m.d.sync += self.r_rdy.eq(0)
            self._r_rdy_copies(m, lambda c: do_inner_read | (~self.r_en & c))
        return m

    def _r_rdy_copies(self, m: Module, next_of):
        """``r_rdy_c``: registers following ``r_rdy``, whose next value is ``next_of(r)``
        from a register's own value ``r``."""
        m.d.comb += self.r_rdy_c.eq(Cat(*(kept_follower(m, 0, next_of, f"r_rdy_c{j}")
                                          for j in range(self.r_rdy_copies))))

    def _plain_queue(self, m: Module, n: int, do_write, do_inner_read):
        """The queue as LUT RAM or registers that ``r_data`` loads from on the inner read
        (the RAM's read register)."""
        wr, rd = ram(m, "storage", width=max(self.width, 1), depth=n, rw="dont_care",
                     read_en=True)
        produce = Signal(range(max(n, 2)))
        consume = Signal(range(max(n, 2)))
        m.d.comb += [wr.addr.eq(produce), wr.data.eq(self.w_data), wr.en.eq(do_write),
                     rd.addr.eq(consume), rd.en.eq(do_inner_read),
                     self.r_data.eq(rd.data[:self.width])]
        if n > 1:
            with m.If(do_write):
                m.d.sync += produce.eq(Mux(produce == n - 1, 0, produce + 1))
            with m.If(do_inner_read):
                m.d.sync += consume.eq(Mux(consume == n - 1, 0, consume + 1))

    def _block_queue(self, m: Module, n: int, do_write):
        """The queue of a block RAM FIFO: the RAM (``n`` words), a register taking its data
        every cycle (``ram_q``), and a small FIFO in logic (:data:`BLOCK_FIFO_OUT` words)
        whose output register is ``r_data``.

        A block RAM's data leaves the tile late (ECP5 DP16KD: 5.8 ns after the clock), so the
        first register after it does nothing else, and the placer can put it beside the tile.
        The RAM reads the word at ``consume`` every cycle; a read is *issued* (``consume``
        advances) while the RAM holds words and the small FIFO has room for one more,
        counting those on their way to it (``held``); the word *lands* in the small FIFO two
        cycles later, from ``ram_q``.

        A word written while the RAM is empty and the small FIFO has room does not enter the
        RAM: it lands in the small FIFO in its write cycle, or one or two cycles later when
        older words land then, so every word lands after the words before it. The written
        words of the last two cycles wait for that in ``written``, a two-word LUT RAM
        written every cycle at a slot that alternates (a register per bit on iCE40, which
        has no LUT RAM): read as it is written, the slot being written holds the word of two
        cycles ago, the other the word of one cycle ago. A word enters
        the RAM once the small FIFO is full, and while the RAM holds words. Then it has the
        small FIFO's words ahead of it, enough to cover the RAM's longer way (readable five
        cycles after the write, not two), and each word after it is readable a cycle after
        its predecessor: the ports behave cycle for cycle as one FIFO of ``depth`` words
        (``w_rdy`` and ``level`` as kept by the caller; ``r_rdy`` the small FIFO's)."""
        out_words = BLOCK_FIFO_OUT
        m.submodules.out = out = BufferedFIFO(width=self.width, depth=out_words,
                                              w_room_known=True, r_rdy_copies=self.r_rdy_copies)
        m.d.comb += self.r_rdy_c.eq(out.r_rdy_c)
        wr, rd = ram(m, "storage", width=max(self.width, 1), depth=n, rw="dont_care",
                     read_en=False)
        produce = Signal(range(n))
        consume = Signal(range(n))
        ram_level = Signal(range(n + 1))
        ram_nonempty = Signal()
        held = Signal(range(out_words + 2))      # the small FIFO's words and those on the way
        room = Signal(init=1)                    # held < out_words
        ram_q = Signal(self.width, reset_less=True)
        m.submodules.written = written = Memory(shape=max(self.width, 1), depth=2, init=[])
        w_past = written.write_port()
        past = written.read_port(domain="comb")
        slot = Signal()
        # a word lands in the small FIFO this cycle from ram_q (issued two cycles ago), from
        # ``written`` (written one or two cycles ago); next cycle: issued a cycle ago, or
        # written a cycle ago to land two cycles after its write
        land_q, land_1, land_2 = Signal(), Signal(), Signal()
        next_q, next_2 = Signal(), Signal()
        issue, to_ram, bypass = Signal(), Signal(), Signal()
        lands_now = land_q | land_1 | land_2
        lands_next = next_q | next_2
        # a write bypasses the RAM when it may (``may_bypass``) and lands at once if no older
        # word lands next cycle (``lands_at_once``): both from registers alone, so the
        # writer's late enable meets one gate. ``lands_at_once`` is a wire the tools keep,
        # so its logic stays off that gate's far input (the writer's valid, often from
        # across the die) instead of merging into a LUT chain after it
        may_bypass = Signal()
        lands_at_once = Signal(attrs={"keep": 1})
        m.d.comb += [
            issue.eq(ram_nonempty & room),
            to_ram.eq(ram_nonempty | ~room),
            may_bypass.eq(self.w_rdy & ~to_ram),
            bypass.eq(self.w_en & may_bypass),
            wr.addr.eq(produce), wr.data.eq(self.w_data), wr.en.eq(do_write & to_ram),
            rd.addr.eq(consume),
            lands_at_once.eq(may_bypass & ~lands_next),
            out.w_en.eq(lands_now | (self.w_en & lands_at_once)),
            w_past.addr.eq(slot), w_past.data.eq(self.w_data), w_past.en.eq(1),
            past.addr.eq(Mux(land_2, slot, ~slot)),
            out.w_data.eq(Mux(land_q, ram_q, Mux(land_2 | land_1, past.data[:self.width],
                                                  self.w_data))),
            out.r_en.eq(self.r_en),
            self.r_data.eq(out.r_data), self.r_rdy.eq(out.r_rdy),
        ]
        m.d.sync += [
            ram_q.eq(rd.data[:self.width]), slot.eq(~slot),
            next_q.eq(issue), land_q.eq(next_q),
            next_2.eq(bypass & lands_next), land_2.eq(next_2),
            land_1.eq(bypass & lands_now & ~lands_next),
        ]
        with m.If(do_write & to_ram):
            m.d.sync += produce.eq(Mux(produce == n - 1, 0, produce + 1))
        with m.If(issue):
            m.d.sync += consume.eq(Mux(consume == n - 1, 0, consume + 1))
        # ``ram_nonempty`` kept equal to ``ram_level != 0``: the late write selects, the
        # compare is of the register
        up = do_write & to_ram
        m.d.sync += [
            ram_level.eq(up_down(m, ram_level, up, issue)),
            ram_nonempty.eq(Mux(up, Mux(issue, ram_nonempty, 1),
                                Mux(issue, ram_level != 1, ram_nonempty))),
        ]
        # the write (bypass) and the read are the neighbours' late handshakes: each next
        # value is chosen by them among values from the registers alone
        issued = Signal.like(held, name="held_issued")
        m.d.comb += issued.eq(held + issue)
        read = self.r_en & out.r_rdy
        m.d.sync += [
            held.eq(up_down(m, issued, bypass, read)),
            room.eq(Mux(bypass, Mux(read, issued < out_words, issued < out_words - 1),
                        Mux(read, issued < out_words + 1, issued < out_words))),
        ]


#: a RAM of at least this many words loses its all-zero initial content in the emitted
#: design (:func:`strip_ram_init`): block RAM, which the bitstream clears anyway
NO_INIT_MIN_WORDS = 513

_MEMINIT = re.compile(r"\n  cell \$meminit_v2 \S+\n    parameter \\MEMID \"([^\"\n]*)\"\n"
                      r"(?:    .*\n)*?  end\n")
_MEMWR = re.compile(r"\n  cell \$memwr_v2 \S+\n    parameter \\MEMID \"([^\"\n]*)\"\n")


def strip_ram_init(text: str) -> str:
    """RTLIL ``text`` without the initial content of its RAMs (memories with a write port)
    of at least :data:`NO_INIT_MIN_WORDS` words whose content is all zeros.

    Amaranth writes every memory's initial content, and Yosys's Verilog writes it a line per
    word: a FIFO of 11,390 words in 8 one-bit columns is 91,000 lines, and ResNet-8's
    FIFOs took Yosys's synthesis past its memory at the flatten pass. These RAMs are read
    only where written (a FIFO's queue, a line buffer); their block RAM tiles start cleared
    by the bitstream, and simulation starts them at zero all the same."""
    rams = set(_MEMWR.findall(text))

    def keep(m: re.Match) -> str:
        cell = m.group(0)
        words = re.search(r"parameter \\WORDS (\d+)", cell)
        data = re.search(r"connect \\DATA \d+'([01]*)", cell)
        if (m.group(1) in rams and words and int(words.group(1)) >= NO_INIT_MIN_WORDS
                and data and "1" not in data.group(1)):
            return "\n"
        return cell
    return _MEMINIT.sub(keep, text)


# ============================================================================ what Yosys does

@dataclass(frozen=True)
class Mapping:
    """What Yosys maps one memory to: ``kind`` (``"block"``, ``"distributed"`` or
    ``"logic"``), the netlist cell (``"DP16KD"``, ``"TRELLIS_DPR16X4"``, ``"SB_RAM40_4K"``,
    or ``None`` for logic) and how many of them; ``logic_bits``: storage bits left to
    registers (a RAM) or LUTs (a ROM) when ``kind`` is logic."""
    kind: str
    cell: str | None
    count: int
    logic_bits: int = 0
    #: block RAM tiles stacked in depth (their read data joined by a multiplexer of LUTs)
    stack: int = 1


@dataclass(frozen=True)
class _RamDef:
    """One RAM cell of a Yosys memory library (``+/lattice/brams_16kd.txt`` and
    ``lutrams_trellis.txt``, ``+/ice40/brams.txt``), reduced to what matters for hwgen's
    memories."""
    cell: str               # the cell it becomes in the netlist
    kind: str               # "block" | "distributed"
    abits: int
    dbits: tuple[int, ...]
    cost: int
    byte: int               # write enable granularity (0: none)
    wr_widths: tuple[int, int] | None   # min, max index into dbits of the write port
    rd_max: int             # max index of a read port
    rd_sync: bool           # read port is synchronous (else asynchronous: register emulated)
    shared_ports: int       # >0: write and read ports come from one group of this many ports
    rom_ok: bool = True     # False: "prune_rom" (no ROM mapping)


_LIBRARIES = {
    "ecp5": (
        _RamDef("TRELLIS_DPR16X4", DISTRIBUTED, 4, (4,), 4, 0, (0, 0), 0, False, 0,
                rom_ok=False),
        _RamDef("DP16KD", BLOCK, 14, (1, 2, 4, 9, 18), 128, 9, (0, 4), 4, True, 2),
        _RamDef("DP16KD", BLOCK, 14, (1, 2, 4, 9, 18, 36), 128, 9, (5, 5), 5, True, 0),
    ),
    "ice40": (
        _RamDef("SB_RAM40_4K", BLOCK, 11, (2, 4, 8, 16), 64, 0, (0, 2), 3, True, 0),
        _RamDef("SB_RAM40_4K", BLOCK, 11, (2, 4, 8, 16), 64, 1, (3, 3), 3, True, 0),
    ),
}


def _def_cost(d: _RamDef, width: int, depth: int, n_wr: int, n_rd: int, rw: str
              ) -> tuple[float, int, int] | None:
    """Yosys' cost, cell count and tiles stacked in depth of mapping the memory onto ``d``
    (``memory_libmap``'s ``handle_geom`` for one configuration), or None if it cannot."""
    if n_wr == 0 and not d.rom_ok:
        return None
    # emulation score: one point per read port not shared with a write port, three per soft
    # transparency, three per write port for read-first emulation
    emu = n_rd
    if n_wr and rw != "dont_care":
        if rw == "new":
            emu += 3 * n_rd
        elif d.rd_sync:          # read-old on a synchronous port: read-first emulation
            emu += 3 * n_wr + 3 * n_rd
    if d.shared_ports:
        space = d.shared_ports - n_wr
        repl_port = -(-n_rd // space)
    else:
        repl_port = n_rd
    if d.byte == 0:
        byte_log2 = len(d.dbits) - 1
    else:
        byte_log2 = max((i for i, b in enumerate(d.dbits) if d.byte >= b), default=0)
    best = None
    best_int = 0
    for base in range(len(d.dbits)):
        unit = min(base, d.rd_max)
        if n_wr:
            unit = min(unit, d.wr_widths[1])
        if unit != base and best is not None:
            break
        if n_wr and base < d.wr_widths[0] and base < byte_log2:
            continue
        uw = d.dbits[unit]
        eb = d.byte if d.byte and d.byte <= uw else uw
        if n_wr == 0:
            eb = 1
        swizzle = -(-width // eb) * eb
        addrs = 1 << (d.abits - base)
        mult_a = (depth - 1) // addrs + 1
        repl = -(-(mult_a * swizzle) // uw)
        demux = mult_a * n_wr if mult_a != 1 else 0
        mux = n_rd * (mult_a - 1) * width
        cost = d.cost * repl * repl_port + 0.5 * mux + 0.5 * demux + 2 * emu
        if best is None or cost < best_int:
            best = (cost, repl * repl_port, mult_a)
            best_int = int(cost)
    return best


def yosys_mapping(width: int, depth: int, family: str, *, style: str, rom: bool,
                  read_ports: int = 1, rw: str = "old") -> Mapping:
    """What Yosys 0.70 (``synth_ecp5`` / ``synth_ice40``) makes of a ``width`` × ``depth``
    memory in the Verilog with the attributes of ``style`` (:func:`yosys_attrs`): ``rom`` has
    no write port, a RAM one; ``read_ports`` synchronous read ports; ``rw`` as in :func:`ram`.
    A style of ``logic`` maps to logic; ``block`` to the family's block RAM; ``distributed``
    (no attribute) to whatever costs least in Yosys' model. (What :func:`ram` and :func:`rom`
    write as registers or constants instead of a memory: :meth:`MemorySpec.mapping`.)"""
    _check_shape(width, depth, read_ports)
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {FAMILIES}, not {family!r}")
    if style not in STYLES:
        raise ValueError(f"memory style must be one of {STYLES}, not {style!r}")
    bits = width * depth
    logic = Mapping(LOGIC, None, 0, bits * (read_ports if rom else 1))
    if style == LOGIC:
        return logic
    n_wr = 0 if rom else 1
    best: tuple[float, Mapping] | None = None
    by_kind: dict[str, tuple[float, Mapping]] = {}
    for d in _LIBRARIES[family]:
        if style == BLOCK and d.kind != BLOCK:
            continue
        got = _def_cost(d, width, depth, n_wr, read_ports, rw)
        if got is None:
            continue
        cost, count, stack = got
        if d.kind not in by_kind or cost < by_kind[d.kind][0]:
            by_kind[d.kind] = (cost, Mapping(d.kind, d.cell, count, stack=stack))
    if style == BLOCK:
        if not by_kind:
            raise ValueError(f"no block RAM of {family} takes a {width}×{depth} memory")
        best = by_kind[BLOCK]
        floor = int(best[0])
    else:
        floor = int(bits / 16 if rom else bits)   # Yosys compares against int(logic cost)
    chosen = logic
    for kind in (DISTRIBUTED, BLOCK):
        if kind in by_kind and by_kind[kind][0] < floor:
            floor = int(by_kind[kind][0])
            chosen = by_kind[kind][1]
    return best[1] if style == BLOCK and chosen is logic else chosen


def bram_tiles(width: int, depth: int, family: str, *, rom: bool = False, read_ports: int = 1,
               style: str | None = None, rw: str = "old") -> int:
    """Block RAM tiles (ECP5 DP16KD, iCE40 SB_RAM40_4K) a memory built by :func:`ram` (or,
    with the stored width of :func:`rom_layout`, by :func:`rom`) takes on ``family``;
    ``style`` defaults to the policy's choice (:func:`choose_style`)."""
    return MemorySpec(width, depth, rom, read_ports, rw, style).bram_tiles(family)


@dataclass(frozen=True)
class MemorySpec:
    """One memory as :func:`rom`, :func:`ram` or :class:`BufferedFIFO` builds it, for a
    resource model: ``style`` None means the policy's choice."""
    width: int
    depth: int
    rom: bool = False
    read_ports: int = 1
    rw: str = "old"
    style: str | None = None

    @property
    def chosen_style(self) -> str:
        return self.style or choose_style(self.width, self.depth, rom=self.rom,
                                          read_ports=self.read_ports, rw=self.rw)

    def mapping(self, family: str) -> Mapping:
        """What the memory becomes on ``family`` (registers or constants where the helpers
        write no memory: a one-word RAM or ROM)."""
        if self.depth == 1:
            return Mapping(LOGIC, None, 0, self.width * self.depth)
        style = self.chosen_style
        columns = block_columns(self.width, self.depth) if style == BLOCK else [self.width]
        maps = [yosys_mapping(w, self.depth, family, style=style, rom=self.rom,
                              read_ports=self.read_ports, rw=self.rw) for w in columns]
        return Mapping(maps[0].kind, maps[0].cell, sum(mp.count for mp in maps),
                       sum(mp.logic_bits for mp in maps), max(mp.stack for mp in maps))

    def bram_tiles(self, family: str) -> int:
        mp = self.mapping(family)
        return mp.count if mp.kind == BLOCK else 0


def fifo_memory(width: int, depth: int) -> MemorySpec:
    """The inner queue of a :class:`BufferedFIFO` (``depth - 1`` words; a register for one).
    The output register (``width`` flip-flops) comes on top."""
    return MemorySpec(max(width, 1), max(depth - 1, 1), rw="dont_care")
