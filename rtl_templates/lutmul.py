"""A product built of logic cells: the multiplier lanes a device offers beyond its DSP tiles.

:func:`lut_mul` multiplies an operand ``x`` (signed or unsigned, ``len(x)`` bits) by a
signed ``w`` of ``w_bits`` bits without a ``*``: Yosys maps every ``$mul`` cell to hard
multiplier tiles (``mul2dsp``), so a product meant for logic is written as the sum it is.
``w`` is recoded in radix-4 Booth digits ``d_i ∈ {-2, -1, 0, 1, 2}`` (``w = Σ d_i·4^i``, one
digit per two bits of ``w``), each partial product ``d_i·x`` is a multiplexer (``x``,
``2x`` or 0) and a conditional inversion (LUTs only; the negation's ``+1`` is summed by
the adder tree), and the partials are summed by a registered adder tree, one carry chain
per stage:

    stage 1: the partial products ``d_i·x`` in ones' complement (``ceil(w_bits / 2)`` of
             ``len(x) + 2`` bits) and their digits' signs
    stages 2..: the adder tree (:func:`~rtl_templates.pipeline.tree_sum`), its last level
             left for the caller to register

:func:`lut_mul_stages` counts the stages; the product is exact (signed, ``len(x) + w_bits +
1`` bits hold it). Up to 8-bit ``w`` (four digits) it is as deep as a hard multiplier with
its operand registers: two stages, then the caller's register. :func:`lut_mul_parts` is its
structure in the resource model's terms.
"""
from __future__ import annotations

import numpy as np
from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed

from hwgen.rtl_templates import resources as res
from hwgen.rtl_templates.pipeline import reg, tree_stages, tree_sum, tree_sum_groups


def booth_digits(w_bits: int) -> int:
    """Radix-4 Booth digits of a signed ``w_bits``-bit operand."""
    return max(1, (w_bits + 1) // 2)


def lut_mul_stages(w_bits: int) -> int:
    """Registers :func:`lut_mul` puts between its operands and the product (to be
    registered by the caller): the partial products, the adder tree's inner stages."""
    return 1 + tree_stages(booth_digits(w_bits))


def booth_digit(w, i: int):
    """(one, two, neg) of Booth digit ``i`` of the signed value ``w``: ``|d_i|`` is 1, 2,
    and ``d_i`` negative (the digit's top bit)."""
    n = len(w)

    def bit(j):
        return Const(0, 1) if j < 0 else w[min(j, n - 1)]      # sign-extended
    hi, mid, lo = bit(2 * i + 1), bit(2 * i), bit(2 * i - 1)
    one = mid ^ lo
    two = (hi & ~mid & ~lo) | (~hi & mid & lo)
    return one, two, hi


def lut_mul(m: Module, x, w, name: str):
    """``x × w`` (``w`` signed), built of logic: signed, ``len(x) + len(w) + 1`` bits, valid
    :func:`lut_mul_stages` registers after the operands, to be registered by the caller.

    The first stage is LUTs only (no carry chain: ``x`` fans out to every lane that reads
    it, and that route takes most of the stage): each partial product is registered as its
    ones' complement (``mag`` or ``~mag``) with its digit's sign; the ``+1`` that completes
    a negation goes into the adder tree, in the two zero bits below the next partial
    product (the last digit's as one more operand of the tree's last pair, which the tools
    sum with a row of full adders before its carry chain)."""
    xb, wb = len(x), len(w)
    ppw = xb + 2
    n = booth_digits(wb)
    ones, negs = [], []
    for i in range(n):
        one, two, neg = booth_digit(w, i)
        mag = Signal(signed(ppw), name=f"{name}_mag{i}")
        m.d.comb += mag.eq(Mux(one, x, Mux(two, x << 1, 0)))
        ones.append(reg(m, Mux(neg, ~mag, mag), signed(ppw), f"{name}_pp{i}"))
        negs.append(reg(m, neg, 1, f"{name}_ng{i}"))
    terms = [ones[0]]
    for i in range(1, n):
        # pp_i·4^i + neg_{i-1}·4^(i-1): the sign bit sits in pp_i's two free low bits
        terms.append(Cat(negs[i - 1], Const(0, 1), ones[i]).as_signed() << (2 * (i - 1)))
    terms[-1] = terms[-1] + (negs[-1] << (2 * (n - 1)))
    return tree_sum(m, terms, f"{name}_t")


def const_lanes(lo, hi, lut_lanes: int) -> tuple[int, int]:
    """(all-zero, constant non-zero) among the last ``lut_lanes`` lanes, given each lane's
    smallest and largest weight (``lo``, ``hi``, flat in lane order): the tools fold a
    product by a constant weight (a zero one is nothing)."""
    lo = np.asarray(lo).reshape(-1)[len(np.asarray(lo).reshape(-1)) - lut_lanes:]
    hi = np.asarray(hi).reshape(-1)[len(np.asarray(hi).reshape(-1)) - lut_lanes:]
    const = lo == hi
    zero = int((const & (lo == 0)).sum())
    return zero, int(const.sum()) - zero


def lut_mul_const_parts(x_bits: int, w_bits: int, family: str) -> res.Resources:
    """What is left of one :func:`lut_mul` by a constant weight (Yosys folds the digits'
    decode and multiplexers): the sums of its non-zero partial products and their
    registers, the digits' signs (registers of a constant the tools keep: they start at
    0) and, on ECP5, the full adders of the tree's last pair (three operands)."""
    n = booth_digits(w_bits)
    ppw = x_bits + 2
    fa = ppw if family == "ecp5" else 0
    return res.add(ppw + 2, family) * max(0, n - 1) + res.Resources(
        lut4=2 * n + fa, ff=(n // 2) * (ppw + 3) + n)


def lut_mul_parts(x_bits: int, w_bits: int, family: str) -> res.Resources:
    """Structural logic of one :func:`lut_mul` (its flip-flops included, not the caller's
    product register): per Booth digit its decode and the multiplexer of ``x``, ``2x`` and
    their complements (LUTs), its partial product and sign registered; the adder tree (its
    last pair of three operands: a row of full adders more)."""
    n = booth_digits(w_bits)
    ppw = x_bits + 2
    out = (res.Resources(lut4=3) + res.mux(ppw, family) * 2) * n
    ff = n * (ppw + 1)
    w, k = ppw, n
    for ops, gw in tree_sum_groups(n, ppw + 2):
        out = out + res.add(gw, family) + res.Resources(lut4=(ops - 2) * gw)
    out = out + res.Resources(lut4=ppw + 2)
    # inner registers of the tree and the product
    lv = 0
    while k > 1:
        k, lv, w = (k + 1) // 2, lv + 1, w + 3
        if k > 1:
            ff += k * w
    return out + res.Resources(ff=ff)
