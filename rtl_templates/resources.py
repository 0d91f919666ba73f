"""What Yosys makes of hwgen's hardware on the two FPGA families it targets: the family rules
of the resource model.

The blocks' cost faces (:class:`~rtl_templates.cost.Cost`) describe their hardware in the
terms these rules take — the multiplications they write (:class:`Mul`), their registers,
adders and memories — and :class:`Resources` holds the per-family result: LUT4s, flip-flops,
carry cells, DSP tiles, block RAM tiles and distributed RAM cells. The rules are Yosys 0.70's
(``synth_ecp5``; ``synth_ice40 -dsp``), measured by ``benchmarks/resources.py`` and
``tests/test_resources.py``.

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

from dataclasses import dataclass, fields

__all__ = ["DSP_RULES", "FAMILIES", "DSPRule", "Mul", "Resources", "add_muls", "dsp_tiles",
           "mul_tiles_total", "total", "unsigned_muls"]

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
    distributed RAM cells (ECP5 ``TRELLIS_DPR16X4``). The parts of an estimate may hold
    fractions; :meth:`rounded` gives the whole cells a block reports."""
    lut4: float = 0
    ff: float = 0
    carry: float = 0
    dsp: float = 0
    bram: float = 0
    dram: float = 0

    def __add__(self, other: Resources) -> Resources:
        return Resources(*(getattr(self, f.name) + getattr(other, f.name)
                           for f in fields(self)))

    def __mul__(self, k: float) -> Resources:
        return Resources(*(getattr(self, f.name) * k for f in fields(self)))

    __rmul__ = __mul__

    def rounded(self) -> Resources:
        return Resources(*(max(0, int(round(getattr(self, f.name)))) for f in fields(self)))

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def total(parts) -> Resources:
    """The sum of ``parts`` (Resources)."""
    out = Resources()
    for r in parts:
        out = out + r
    return out
