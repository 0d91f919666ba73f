"""What Yosys makes of hwgen's hardware on the two FPGA families it targets: the family rules
of the resource model.

The blocks' cost faces (:class:`~rtl_templates.cost.Cost`) describe their hardware in the
terms these rules take — the multiplications they write (:class:`Mul`), their registers,
adders and memories — and :class:`Resources` holds the per-family result: LUT4s, flip-flops,
carry cells, DSP tiles, block RAM tiles and distributed RAM cells. The rules are Yosys 0.70's
(``synth_ecp5``; ``synth_ice40 -dsp``), measured by ``benchmarks/resources.py`` and
``tests/blocks/test_resources.py``.

DSP tiles (:func:`dsp_tiles`)
    Yosys maps every ``$mul`` cell with ``mul2dsp``: the wider operand first (the operands of
    the original cell are swapped so that A is the wider), an operand wider than the tile is
    cut into tile-wide slices (the last slice the remainder) and each slice product is mapped
    the same way again, without the swap; a product — original or slice — becomes one tile
    only if both operands are at least ``min`` bits wide and (iCE40) its result at least
    ``y_min`` bits; otherwise it is built of LUTs. The numbers:

    ========  ========================  ====  ====  =====
    family    tile                      max   min   y_min
    ========  ========================  ====  ====  =====
    ecp5      MULT18X18D                18    2     —
    ice40     SB_MAC16 (16×16)          16    2     11
    ========  ========================  ====  ====  =====

    The operand widths are those of the cell Amaranth writes: a signed × unsigned product
    widens the unsigned operand by a zero bit (so an 8-bit unsigned input times a signed
    weight is a 9 × w product), the result is ``a + b`` bits (the operands' own widths) or
    fewer when only the low bits are used (``Mul.y_bits``). Yosys does not learn the value of
    an operand that comes from a register or a memory before it maps the multipliers, so
    those count at their declared width, zero bits and all; a constant operand loses its
    trailing zero bits (a shift) and a multiplication by a power of two is no multiplier at
    all (:meth:`Mul.by_constant`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np

from hwgen.rtl_templates.memory import (
    BLOCK,
    BLOCK_FIFO_OUT,
    DISTRIBUTED,
    LOGIC_ROM_MAX_DEPTH,
    MemorySpec,
    fifo_memory,
    fifo_slices,
    rom_spec,
    yosys_mapping,
)

__all__ = ["DSP_RULES", "FAMILIES", "DSPRule", "Fit", "Mul", "Resources", "accumulate", "add",
           "add_muls", "add_or_sub", "bit_columns", "block_depth_logic", "compare",
           "dsp_tiles", "equal",
           "estimate", "fifo", "fitted", "live_columns", "magnitude", "memory", "merge_fits",
           "mul_tiles_total", "mux", "param_live", "range_live", "reduce_or", "rom", "rom_live",
           "rom_depth_logic", "rom_luts", "soft_logic", "sub", "total", "unsigned_muls"]

FAMILIES = ("ecp5", "ice40")


@dataclass(frozen=True)
class DSPRule:
    """``mul2dsp``'s parameters for one family (see the module documentation)."""
    tile: str
    max_bits: int
    min_bits: int
    y_min: int


DSP_RULES = {
    "ecp5": DSPRule("MULT18X18D", 18, 2, 0),
    "ice40": DSPRule("SB_MAC16", 16, 2, 11),
}


@dataclass(frozen=True, order=True)
class Mul:
    """One multiplication ``a × b`` as a block writes it: the operands' widths and
    signedness (Amaranth's shapes), whether ``b`` is a constant (then ``b_bits`` is the width
    of its odd part, unsigned), and ``y_bits``, the product bits that are used (0: all,
    ``a_bits + b_bits``)."""
    a_bits: int
    a_signed: bool
    b_bits: int
    b_signed: bool
    constant: bool = False
    y_bits: int = 0

    @classmethod
    def by_constant(cls, a_bits: int, a_signed: bool, value: int, y_bits: int = 0
                    ) -> Mul | None:
        """``a × value`` for a non-negative constant: its trailing zero bits are a shift, so
        the product is ``a ×`` the odd part (``y_bits`` counts the used bits above the
        shift); None when there is nothing to multiply (0 or a power of two)."""
        if value < 0:
            raise ValueError("a constant factor is non-negative (unsigned)")
        if value == 0:
            return None
        odd = value >> ((value & -value).bit_length() - 1)
        if odd == 1:
            return None
        return cls(a_bits, a_signed, odd.bit_length(), False, True, y_bits)

    def cell(self) -> tuple[int, int, int]:
        """(A, B, Y) widths of the ``$mul`` cell Yosys maps: a mixed signed × unsigned
        product widens the unsigned operand by one bit."""
        a, b = self.a_bits, self.b_bits
        if self.a_signed != self.b_signed:
            if self.a_signed:
                b += 1
            else:
                a += 1
        y = self.a_bits + self.b_bits
        if self.y_bits:
            y = min(y, self.y_bits)
        return a, b, y

    def as_dict(self) -> dict:
        return {"a_bits": self.a_bits, "a_signed": self.a_signed, "b_bits": self.b_bits,
                "b_signed": self.b_signed, "constant": self.constant,
                "y_bits": self.y_bits or self.a_bits + self.b_bits}


def _tiles(a: int, b: int, y: int, rule: DSPRule, top: bool) -> int:
    """Tiles ``mul2dsp`` makes of an A × B → Y product (``top``: the original cell, whose
    operands are put wider first)."""
    if top and a < b:
        a, b = b, a
    if a < rule.min_bits or b < rule.min_bits or y < rule.y_min:
        return 0
    m = rule.max_bits
    if a > m:
        n = (a - 1) // m
        last = a - n * m
        return n * _tiles(m, b, min(y, b + m), rule, False) + _tiles(last, b, b + last, rule,
                                                                     False)
    if b > m:
        n = (b - 1) // m
        last = b - n * m
        return n * _tiles(a, m, min(y, a + m), rule, False) + _tiles(a, last, a + last, rule,
                                                                     False)
    return 1


def _soft(a: int, b: int, y: int, signed: bool, rule: DSPRule, top: bool
          ) -> list[tuple[int, int, bool]]:
    """The slices of an A × B product ``mul2dsp`` leaves to logic (as :func:`_tiles`)."""
    if top and a < b:
        a, b = b, a
    if a < rule.min_bits or b < rule.min_bits or y < rule.y_min:
        return [(a, b, signed)]
    m = rule.max_bits
    if a > m:
        n = (a - 1) // m
        last = a - n * m
        return n * _soft(m, b, min(y, b + m), False, rule, False) + _soft(last, b, b + last,
                                                                          signed, rule, False)
    if b > m:
        n = (b - 1) // m
        last = b - n * m
        return n * _soft(a, m, min(y, a + m), False, rule, False) + _soft(a, last, a + last,
                                                                          signed, rule, False)
    return []


def soft_logic(mul: Mul, family: str) -> Resources:
    """The logic Yosys builds for the parts of ``mul`` no DSP tile takes (measured on
    isolated products: about ``2·A·B - A`` LUT4 for an A × B slice, a quarter more when
    signed, and a carry chain), plus the adders that join a split product's slices."""
    rule = DSP_RULES[family]
    a, b, y = mul.cell()
    slices = _soft(a, b, y, mul.a_signed or mul.b_signed, rule, True)
    if slices == [(max(a, b), min(a, b), mul.a_signed or mul.b_signed)] \
            and min(a, b) >= 2 and mul.a_bits + mul.b_bits <= 4 and not mul.constant:
        # operands of 4 bits in all (a zero bit a mixed product adds is a constant): each
        # product bit is a function of at most 4 inputs, one LUT4, no carry chain
        return Resources(lut4=y)
    out = Resources()
    for sa, sb, sg in slices:
        if min(sa, sb) <= 1:
            out = out + Resources(lut4=max(sa, sb) * (2 if sg else 1))
        else:
            out = out + Resources(lut4=2 * sa * sb - sa + (0.5 * sa * sb if sg else 0),
                                  carry=sa + 1)
    if slices and dsp_tiles(mul, family):      # a slice joins the tiles' sum
        out = out + add(y, family) * len(slices)
    return out


def dsp_tiles(mul: Mul, family: str) -> int:
    """Hard multiplier tiles Yosys uses for ``mul`` on ``family`` (see the module
    documentation)."""
    try:
        rule = DSP_RULES[family]
    except KeyError:
        raise ValueError(f"unknown FPGA family {family!r} (choose {', '.join(FAMILIES)})"
                         ) from None
    a, b, y = mul.cell()
    return _tiles(a, b, y, rule, True)


def add_muls(*parts: dict[Mul, int]) -> dict[Mul, int]:
    """The sum of multiplication lists (record → count)."""
    out: dict[Mul, int] = {}
    for part in parts:
        for m, n in part.items():
            if n:
                out[m] = out.get(m, 0) + n
    return out


def unsigned_muls(widths) -> dict[Mul, int]:
    """Unsigned products given as ``(a_bits, b_bits)`` pairs (the tiles of a wide product) as
    records (→ count)."""
    out: dict[Mul, int] = {}
    for a, b in widths:
        m = Mul(a, False, b, False)
        out[m] = out.get(m, 0) + 1
    return out


def mul_tiles_total(multiplies: dict[Mul, int], family: str) -> int:
    """DSP tiles of ``multiplies`` (record → count)."""
    return sum(n * dsp_tiles(m, family) for m, n in multiplies.items())


@dataclass(frozen=True)
class Resources:
    """What one block (or a design) takes of one FPGA family: LUT4 cells (ECP5 ``LUT4``,
    iCE40 ``SB_LUT4``), flip-flops, carry cells (ECP5 ``CCU2C``, two LUTs' worth each; iCE40
    ``SB_CARRY``), DSP tiles, block RAM tiles (ECP5 ``DP16KD``, iCE40 ``SB_RAM40_4K``) and
    distributed RAM cells (ECP5 ``TRELLIS_DPR16X4``) and iCE40 UltraPlus SPRAM tiles
    (``SB_SPRAM256KA``: weights loaded after reset, ``rtl_templates/spram.py``). The parts of an
    estimate may hold fractions; :meth:`rounded` gives the whole cells a block reports."""
    lut4: float = 0
    ff: float = 0
    carry: float = 0
    dsp: float = 0
    bram: float = 0
    dram: float = 0
    spram: float = 0

    def __add__(self, other: Resources) -> Resources:
        return Resources(*(getattr(self, f.name) + getattr(other, f.name)
                           for f in fields(self)))

    def __mul__(self, k: float) -> Resources:
        return Resources(*(getattr(self, f.name) * k for f in fields(self)))

    __rmul__ = __mul__

    def rounded(self) -> Resources:
        return Resources(*(max(0, int(round(getattr(self, f.name)))) for f in fields(self)))

    def as_dict(self) -> dict:
        """The figures by name; ``spram`` only where there is any (a design without loaded
        memories reports what it did before SPRAM was modelled)."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.name != "spram" or self.spram}


def total(parts) -> Resources:
    """The sum of ``parts`` (Resources)."""
    out = Resources()
    for r in parts:
        out = out + r
    return out


# ============================================================================ logic primitives
#
# What Yosys makes of one operation between registers, per family (LUT4 and carry cells; the
# operands' registers are counted by the caller), measured on isolated operations of 8, 16
# and 32 bits (``benchmarks/resources.py`` keeps the blocks honest). ``w``: operand width.
# ECP5 puts an adder's bits two to a CCU2C (the LUTs inside it are not counted as LUT4);
# iCE40 needs an SB_LUT4 and an SB_CARRY per bit.

def add(w: float, family: str) -> Resources:
    """``a + b`` (also ``a - b`` on ECP5, ``a + b + carry_in``, ``a + constant``)."""
    if family == "ecp5":
        return Resources(carry=math.ceil((w + 1) / 2))
    return Resources(lut4=w + 1, carry=w)


def sub(w: float, family: str) -> Resources:
    """``a - b``: iCE40 inverts ``b`` in LUTs of its own."""
    if family == "ecp5":
        return Resources(carry=math.ceil((w + 1) / 2))
    return Resources(lut4=2 * w + 1, carry=w)


def accumulate(w: float, family: str) -> Resources:
    """``Mux(first, 0, acc) + x``: the clear takes a LUT per bit."""
    if family == "ecp5":
        return Resources(lut4=w, carry=w / 2)
    return Resources(lut4=2 * w - 1, carry=w - 1)


def magnitude(w: float, family: str) -> Resources:
    """``Mux(v < 0, -v, v)``."""
    if family == "ecp5":
        return Resources(lut4=2 * w - 1, carry=(w + 1) / 2)
    return Resources(lut4=3 * w, carry=w - 1)


def add_or_sub(w: float, family: str) -> Resources:
    """``Mux(s, c - v, c + v)``: two adders and a multiplexer."""
    if family == "ecp5":
        return Resources(lut4=w + 1, carry=w)
    return Resources(lut4=3.9 * w, carry=1.9 * w)


def compare(w: float, family: str, constant: bool = False) -> Resources:
    """``a < b`` (or ``a < constant``): a carry chain."""
    if constant:
        return Resources(lut4=1, carry=(w - 1) / 2) if family == "ecp5" else \
            Resources(lut4=1, carry=w - 2)
    return Resources(lut4=2, carry=w / 2) if family == "ecp5" else \
        Resources(lut4=w, carry=w - 1)


def equal(w: float, family: str) -> Resources:
    """``a == b``."""
    return Resources(lut4=(0.67 if family == "ecp5" else 1.0) * w)


def mux(w: float, family: str, ways: int = 2) -> Resources:
    """A ``ways``-input multiplexer of ``w`` bits."""
    return Resources(lut4=w * max(0, ways - 1))


def reduce_or(w: float, family: str) -> Resources:
    """``v.any()`` of ``w`` bits."""
    return Resources(lut4=max(0.0, (w - 1) / 3))


# ============================================================================ memory contents

def bit_columns(values, bits: int) -> np.ndarray:
    """The bit columns of a memory: ``values`` [words, lanes] integers (two's complement in
    ``bits`` bits) → a boolean [lanes·bits, words] array (column ``lane·bits + b``)."""
    v = np.asarray(values)
    if bits <= 8:   # one byte per value: unpack its bits (little end first) directly
        u = (v.astype(np.int64) & ((1 << bits) - 1)).astype(np.uint8)
        cols = np.unpackbits(u[:, :, None], axis=2, bitorder="little")[:, :, :bits]
    else:
        v = v.astype(np.int64) & ((1 << bits) - 1)
        cols = (v[:, :, None] >> np.arange(bits, dtype=np.int64)) & 1     # [words, lanes, bits]
    return np.ascontiguousarray(cols.reshape(v.shape[0], -1).T).astype(bool)


#: memories of more bits than this are not analysed bit by bit (:func:`rom_live`)
EXACT_COLUMN_BITS = 1 << 22


def rom_live(values, bits: int) -> tuple[int, int]:
    """(non-constant, distinct non-constant) bit columns of a ROM whose words hold ``values``
    [words, lanes] (two's complement in ``bits`` bits): exact up to
    :data:`EXACT_COLUMN_BITS` bits; beyond, each lane's columns are taken to be those of its
    signed range (the bits above it copy the sign; a lane of one sign has a constant sign
    column) and all distinct."""
    v = np.asarray(values)
    if v.size == 0:
        return 0, 0
    if v.size * bits <= EXACT_COLUMN_BITS:
        return live_columns(bit_columns(v, bits))
    return range_live(v.min(axis=0), v.max(axis=0), bits)


def range_live(lo, hi, bits: int) -> tuple[int, int]:
    """:func:`rom_live`'s estimate for a large ROM from each lane's smallest and largest
    value (``lo``, ``hi``)."""
    lo, hi = np.asarray(lo, dtype=np.int64), np.asarray(hi, dtype=np.int64)
    mag = np.maximum(np.where(lo < 0, -lo - 1, 0), np.maximum(hi, 0))
    width = np.ceil(np.log2(mag + 1)).astype(np.int64)         # magnitude bits
    live = width + ((lo < 0) & (hi >= 0)).astype(np.int64)    # + a sign column if mixed
    live = np.where(lo == hi, 0, np.minimum(live, bits))
    n = int(live.sum())
    return n, n


def param_live(bias, mult, acc_bits: int, mult_bits: int) -> tuple[int, int, float]:
    """(non-constant, distinct non-constant) bit columns of a bias-and-multiplier memory
    (``bias`` and ``mult`` [words, lanes]) and the non-constant multiplier bits per lane."""
    mcols = bit_columns(mult, mult_bits)
    live, distinct = live_columns(np.concatenate([bit_columns(bias, acc_bits), mcols]))
    return live, distinct, live_columns(mcols)[0] / max(1, np.shape(mult)[1])


def bias_live(bias, acc_bits: int) -> tuple[int, int]:
    """:func:`live_columns` of a bias memory of its own (``bias`` [words, lanes])."""
    return live_columns(bit_columns(bias, acc_bits))


def live_columns(cols: np.ndarray) -> tuple[int, int]:
    """(columns that are not constant, distinct ones among them) of ``cols`` [columns, words]
    (from :func:`bit_columns`; several memories' columns may be stacked). The tools remove
    the registers of constant columns and merge those of equal columns."""
    cols = np.asarray(cols, dtype=bool)
    if cols.size == 0:
        return 0, 0
    live = cols[cols.any(axis=1) & ~cols.all(axis=1)]
    if len(live) == 0:
        return 0, 0
    packed = np.ascontiguousarray(np.packbits(live, axis=1))
    distinct = len({row.tobytes() for row in packed})
    return len(live), distinct


# ============================================================================ memories

#: ECP5 LUT RAM: words per TRELLIS_DPR16X4
DPR_WORDS = 16
#: data bits of one LUT RAM cell (ECP5 TRELLIS_DPR16X4)
DPR_BITS = 4


def rom_luts(depth: int, family: str) -> float:
    """LUT4s per column of a ROM of ``depth`` words in logic (measured with Yosys on random
    contents). ECP5: one per 16 words of the address space (its wide multiplexers, PFUMX and
    L6MUX21, join them, and the words past ``depth`` are decoded like the others: 24 words
    take 2, 48 take 4, 100 take 8) up to 128 words; beyond, about one per 16 words plus
    20 %. iCE40 has no wide multiplexers: about two per 16 words from 17 words on."""
    if depth <= 16:
        return 1.0
    if family == "ecp5":
        return 2.0 ** ((depth - 1).bit_length() - 4) if depth <= 128 else depth / DPR_WORDS * 1.2
    return depth / DPR_WORDS * 2.0


def memory(width: int, depth: int, family: str, *, rom: bool, style: str | None = None,
           read_ports: int = 1, rw: str = "old", plain: bool = False,
           logic_width: int | None = None) -> Resources:
    """A memory of ``width`` stored bits × ``depth`` words with synchronous read ports:
    its block RAM tiles, LUT RAM cells, and the flip-flops and LUTs around them.

    ``plain``: an Amaranth ``Memory`` with :func:`~rtl_templates.memory.plain_rom_attrs`
    (Yosys picks by its own cost, up to a ROM's depth limit),
    otherwise one of :mod:`rtl_templates.memory`'s helpers (``style`` None: its policy).
    ``logic_width``: columns left when the memory becomes logic (a ROM's equal columns give
    equal logic, which the tools merge; default ``width``).

    block RAM: the read register is the tile's own; LUT RAM (ECP5, asynchronous read): the
    read register in flip-flops and a multiplexer per 16 words; logic: a ROM is LUTs (about
    one per 16 bits of a column) and its read register, a RAM registers, a read multiplexer
    and the write enables."""
    lw = width if logic_width is None else logic_width
    if width < 1 or depth < 1:          # nothing stored: constants
        return Resources()
    if plain:
        if rom and depth <= 1:
            return Resources()
        # memory.plain_rom_attrs: a ROM deeper than LOGIC_ROM_MAX_DEPTH is pinned to block
        deep = rom and depth > LOGIC_ROM_MAX_DEPTH
        if deep:    # memory.lane_rom: a block ROM of its live columns, deep ones as columns
            mp = MemorySpec(width, depth, rom, read_ports, rw, BLOCK).mapping(family)
        else:
            mp = yosys_mapping(width, depth, family, style=DISTRIBUTED, rom=rom,
                               read_ports=read_ports, rw=rw)
    else:
        mp = MemorySpec(width, depth, rom, read_ports, rw, style).mapping(family)
    if mp.kind == BLOCK:
        return Resources(bram=mp.count, lut4=2 * read_ports)
    if mp.kind == DISTRIBUTED:
        groups = -(-depth // DPR_WORDS)
        return Resources(dram=mp.count, ff=width * read_ports,
                         lut4=read_ports * width * (groups - 1) + groups)
    if rom:
        if depth <= 1:
            return Resources()
        return Resources(ff=lw * read_ports, lut4=read_ports * lw * rom_luts(depth, family))
    if depth == 1 and rw == "dont_care":     # memory.ram's register reads the word itself
        return Resources(ff=width, lut4=1)
    return Resources(ff=width * depth + width * read_ports,
                     lut4=read_ports * width * (depth - 1) + depth)


def rom(init, width: int, family: str, read_ports: int = 1) -> Resources:
    """A ROM built by :func:`rtl_templates.memory.rom` (its distinct non-constant columns
    stored, by the memory policy; nothing for a constant)."""
    spec = rom_spec(init, width, read_ports)
    if spec is None:
        return Resources()
    return memory(spec.width, spec.depth, family, rom=True, read_ports=read_ports)


def rom_in_bram(columns, depth: int) -> bool:
    """Whether the tools put a slice of a lane ROM in block RAM on either family: its
    slices' ``(live, distinct)`` columns (:func:`rom_live`), each slice read as a plain
    ROM of ``depth`` words (a unit's weight ROM, whose read data then gets a fabric
    register before the tiles)."""
    return any(memory(live, depth, f, rom=True, plain=True).bram
               for live, _ in columns for f in FAMILIES)


def block_depth_logic(width: int, depth: int, family: str, *, rom: bool, read_ports: int = 1,
                      rw: str = "old") -> Resources:
    """The logic around the block RAM tiles of a plain ``width`` × ``depth`` memory (no
    style attribute: :func:`~rtl_templates.memory.yosys_mapping` follows ``memory_libmap``'s
    choice of geometry) that Yosys stacks ``n`` tiles in depth (``Mapping.stack``): their
    read data joined by ``(n - 1) × width`` LUT4 per read port, the write enable decoded into
    ``n`` (a RAM). Measured: 228 LUT4 after the 8-bit, 59,008-word weight ROM of the 8-bit
    TFC on the engine (29 deep). :func:`memory` counts none of it; nothing for a memory one
    tile deep (the memory helpers write deep ones as columns: ``memory.block_columns``)."""
    n = yosys_mapping(width, depth, family, style=BLOCK, rom=rom, read_ports=read_ports,
                      rw=rw).stack
    return Resources(lut4=read_ports * (n - 1) * width + (n if n > 1 and not rom else 0))


def rom_depth_logic(init, width: int, family: str, read_ports: int = 1) -> Resources:
    """:func:`block_depth_logic` of a ROM built by :func:`rtl_templates.memory.rom` when the
    policy puts it in block RAM (else nothing)."""
    spec = rom_spec(init, width, read_ports)
    if spec is None:
        return Resources()
    mp = spec.mapping(family)
    if mp.kind != BLOCK or mp.stack == 1:
        return Resources()
    return Resources(lut4=read_ports * (mp.stack - 1) * spec.width)


def fifo(width: int, depth: int, family: str, live=None) -> Resources:
    """:class:`~rtl_templates.memory.BufferedFIFO` of ``depth`` words of ``width`` bits:
    the inner queue's memory (``depth - 1`` words, registers up to two), the output
    register, the pointers, fill levels and the full and non-empty flags; per slice of a wide
    word.

    ``live``: which of the word's bits the consumer uses (None: all). The tools remove the
    output register's unused bits, and of a memory the tiles (block RAM, LUT RAM) whose
    columns are all unused; the memory keeps the kind the whole word chose."""
    slices = fifo_slices(width, depth)
    if len(slices) > 1:
        lo, out = 0, Resources()
        for w in slices:
            out = out + fifo(w, depth, family, None if live is None else live[lo:lo + w])
            lo += w
        return out
    kept = width if live is None else int(np.count_nonzero(live))
    if depth <= 1:
        return Resources(ff=kept + 1, lut4=2)
    n = depth - 1
    ptr = max(1, (max(n, 2) - 1).bit_length())
    lvl = max(1, n.bit_length())
    store = memory(max(width, 1), n, family, rom=False, rw="dont_care")
    if store.bram == 0 and store.dram == 0:     # registers, and r_data the read register
        store = Resources(ff=kept * n + kept, lut4=kept * (n - 1) + n)
    elif live is not None and kept < width:
        store = _live_tiles(store, width, n, family, np.asarray(live, dtype=bool))
    block = n > 1 and fifo_memory(width, depth).chosen_style == BLOCK
    def tree(bits: int) -> int:
        return max(1, -(-(bits - 1) // 3))
    if block:
        # the small FIFO after the RAM (its output register is the FIFO's), the RAM's data
        # register, the last two written words (LUT RAM on ECP5, a register each on iCE40),
        # the landing multiplexer (three sources: about one LUT4 per bit on ECP5, where the
        # choice between the two written words is the LUT RAM's address; three on iCE40,
        # with that choice); the RAM's level, the count of words on the
        # way and seven flags; the wrap compares of the two pointers with n - 1 and the
        # one-word compare of the level (a LUT4 tree each)
        bits = np.ones(width, dtype=bool) if live is None else np.asarray(live, dtype=bool)
        if family == "ecp5":
            past = Resources(dram=sum(bool(bits[lo:lo + DPR_BITS].any())
                                      for lo in range(0, width, DPR_BITS)),
                             lut4=kept)
        else:
            past = Resources(ff=2 * kept, lut4=3 * kept)
        store = (store + fifo(width, BLOCK_FIFO_OUT, family, live) + past
                 + Resources(ff=kept + lvl + 11,
                             lut4=2 * tree(ptr) + tree(lvl) + lvl + 8)
                 + add(lvl, family) * 2 + add(3, family))
    ctl = (Resources(ff=(2 * ptr if n > 1 else 0) + lvl + 3, lut4=lvl + 6) + add(lvl, family)
           + (add(ptr, family) * 2 if n > 1 else Resources()))
    return store + ctl


def _live_tiles(store: Resources, width: int, depth: int, family: str, live: np.ndarray
                ) -> Resources:
    """A FIFO's inner memory (``store``, of the whole ``width``) with the tiles whose columns
    ``live`` never marks removed: tiles side by side each hold a group of columns as wide as
    one tile takes at this depth (LUT RAM: :data:`DPR_BITS` columns)."""
    if store.bram:
        def count(w: int) -> int:
            return yosys_mapping(w, depth, family, style=BLOCK, rom=False,
                                 rw="dont_care").count
        one = count(1)
        unit = 1
        while unit < width and count(unit + 1) == one:
            unit += 1
        tiles = sum(count(min(unit, width - lo)) for lo in range(0, width, unit)
                    if live[lo:lo + unit].any())
        return Resources(bram=tiles, lut4=store.lut4)
    groups = -(-width // DPR_BITS)
    kept = sum(bool(live[lo:lo + DPR_BITS].any()) for lo in range(0, width, DPR_BITS))
    bits = int(np.count_nonzero(live))
    return Resources(dram=store.dram * kept / groups, ff=bits,
                     lut4=store.lut4 * bits / width)


# ============================================================================ calibration

#: a block's calibration: family → resource ("lut4", "carry", "ff") → part → factor ("1": a
#: constant added); parts and resources it does not name keep their structural count
Fit = dict[str, dict[str, dict[str, float]]]


def merge_fits(*fits: Fit) -> Fit:
    """One calibration from several (later ones win per family, resource and part)."""
    out: Fit = {}
    for fit in fits:
        for fam, by_res in fit.items():
            for r, by_part in by_res.items():
                out.setdefault(fam, {}).setdefault(r, {}).update(by_part)
    return out


def fitted(parts: dict[str, Resources], fit: dict[str, dict[str, float]] | None
           ) -> Resources:
    """The estimate of a block from its structural ``parts`` (part name → Resources) and the
    family's calibration (resource → part → factor, ``"1"``: a constant)."""
    fit = fit or {}
    out = Resources(**{k: fit.get(k, {}).get("1", 0.0) for k in ("lut4", "carry", "ff")})
    for name, r in parts.items():
        out = out + Resources(lut4=r.lut4 * fit.get("lut4", {}).get(name, 1.0),
                              ff=r.ff * fit.get("ff", {}).get(name, 1.0),
                              carry=r.carry * fit.get("carry", {}).get(name, 1.0),
                              dsp=r.dsp, bram=r.bram, dram=r.dram, spram=r.spram)
    return out


def estimate(parts_of, p, fit: Fit, multiplies: dict[Mul, int] | None = None,
             soft_multiplies: dict[Mul, int] | None = None
             ) -> tuple[dict[str, Resources], dict[str, dict]]:
    """(family → rounded estimate, family → structural parts) of block parameters ``p``,
    with ``parts_of(p, family)`` the block's structural parts, ``fit`` its calibration and
    ``multiplies`` its multiplications: what no DSP tile takes is logic (part
    ``mul_logic``), of ``soft_multiplies`` if given (those whose factors are not all
    constant: the tools fold the others)."""
    parts = {f: parts_of(p, f) for f in FAMILIES}
    # iCE40: ice40_dsp moves a plain register (no reset: a data register, pipeline.reg) into
    # the SB_MAC16 tiles: a product's register, and for an unsigned one-tile product
    # (pipeline.mul_pipe's: the requantizers') its operand registers (A_REG, B_REG) and the
    # product's fabric copy (the output register) too
    absorbed = 0
    for m, n in (multiplies or {}).items():
        tiles = dsp_tiles(m, "ice40")
        if tiles:
            absorbed += n * min(32, m.cell()[2])
        if tiles == 1 and not (m.a_signed or m.b_signed or m.constant):
            absorbed += n * (m.a_bits + m.b_bits + min(32, m.cell()[2]))
    if absorbed:
        parts["ice40"]["dsp_regs"] = Resources(ff=-absorbed)
    muls = multiplies if soft_multiplies is None else soft_multiplies
    for f in FAMILIES:
        soft = total(n * soft_logic(m, f) for m, n in (muls or {}).items())
        if soft != Resources():
            parts[f]["mul_logic"] = soft
    return {f: fitted(parts[f], fit.get(f)).rounded() for f in FAMILIES}, parts
