"""A product built of logic cells: the multiplier lanes a device offers beyond its DSP tiles.

:func:`lut_mul` multiplies an operand ``x`` (signed or unsigned, ``len(x)`` bits) by a
signed ``w`` of ``w_bits`` bits without a ``*``: Yosys maps every ``$mul`` cell to hard
multiplier tiles (``mul2dsp``), so a product meant for logic is written as the sum it is.
``w`` is recoded in radix-4 Booth digits ``d_i ∈ {-2, -1, 0, 1, 2}`` (``w = Σ d_i·4^i``, one
digit per two bits of ``w``), each partial product ``d_i·x`` is a multiplexer (``x``,
``2x`` or 0) and a conditional inversion (LUTs only; the negation's ``+1`` is summed by
the adder tree), and the partials are summed by a registered adder tree, one carry chain
per stage:

    stage 1: the lane's own copies of ``x`` and ``w``
    stage 2..: the partial products ``d_i·x`` in ones' complement (``ceil(w_bits / 2)`` of
             ``len(x) + 2`` bits, LUTs) and the first level of the adder tree
             (:func:`~rtl_templates.pipeline.tree_sum`'s shape), then a level per stage,
             the last left for the caller to register

:func:`lut_mul_stages` counts the stages; the product is exact (signed, ``len(x) + w_bits +
1`` bits hold it). Up to 8-bit ``w`` (four digits) it is as deep as a hard multiplier with
its operand registers: two stages, then the caller's register. :func:`lut_mul_parts` is its
structure in the resource model's terms.
"""
from __future__ import annotations

import numpy as np
from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed

from hwgen.rtl_templates import resources as res
from hwgen.rtl_templates.kept import kept_copy
from hwgen.rtl_templates.pipeline import reg, tree_stages, tree_sum_groups


def booth_digits(w_bits: int) -> int:
    """Radix-4 Booth digits of a signed ``w_bits``-bit operand."""
    return max(1, (w_bits + 1) // 2)


def lut_mul_stages(w_bits: int) -> int:
    """Registers :func:`lut_mul` puts between its operands and the product (to be
    registered by the caller): its copies of the operands, the adder tree's inner stages."""
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


def lut_mul(m: Module, x, w, name: str, w_const: int | None = None):
    """``x × w`` (``w`` signed), built of logic: signed, ``len(x) + len(w) + 1`` bits, valid
    :func:`lut_mul_stages` registers after the operands, to be registered by the caller.

    The operands are registered first, a copy per lane (an operand register shared by
    many lanes routes across the die, 3.5–8.5 ns on an LFE5U-85F); behind them everything
    is local to the lane. Each partial product is its ones' complement (``mag`` or
    ``~mag``, LUTs only, no carry chain before the tree's); the ``+1`` that completes a
    negation goes into the adder tree, in the two zero bits below the next partial product
    (the last digit's as one more operand of the tree's last sum, which the tools add with
    a row of full adders before its carry chain).

    ``w_const``: the lane's weight when it is the same in every fold; the product is then
    by a constant, which the tools reduce to the sums of the non-zero digits' partial
    products (a kept copy of a constant would hide it from them)."""
    xb, wb = len(x), len(w)
    ppw = xb + 2
    n = booth_digits(wb)
    # copies of the operands of the lane's own (kept apart by the tools), next to its logic
    x = kept_copy(m, x, f"{name}_x")
    w = Const(w_const, signed(wb)) if w_const is not None else kept_copy(m, w, f"{name}_w")
    ones, negs = [], []
    for i in range(n):
        one, two, neg = booth_digit(w, i)
        mag = Signal(signed(ppw), name=f"{name}_mag{i}")
        m.d.comb += mag.eq(Mux(one, x, Mux(two, x << 1, 0)))
        pp = Signal(signed(ppw), name=f"{name}_pp{i}")
        m.d.comb += pp.eq(Mux(neg, ~mag, mag))
        ones.append(pp)
        negs.append(neg)
    terms = [ones[0]]
    for i in range(1, n):
        # pp_i·4^i + neg_{i-1}·4^(i-1): the sign bit sits in pp_i's two free low bits
        terms.append(Cat(negs[i - 1], Const(0, 1), ones[i]).as_signed() << (2 * (i - 1)))
    # the last digit's sign: one more operand of the tree's last sum
    last = negs[-1]
    level, total = 0, max(0, (n - 1).bit_length())
    while len(terms) > 1:
        nxt = [terms[k] + terms[k + 1] for k in range(0, len(terms) - 1, 2)]
        terms = nxt + ([terms[-1]] if len(terms) % 2 else [])
        level += 1
        if level < total:
            terms = [reg(m, t, t.shape(), f"{name}_t{level}_{k}") for k, t in enumerate(terms)]
            last = reg(m, last, 1, f"{name}_ng{level}")
    return terms[0] + (last << (2 * (n - 1)))


def tile_operand(m: Module, v, name: str, apart: bool):
    """A hard multiplier tile's operand register. ``apart`` (a unit with lanes in logic): a
    kept copy of the tile's own. Yosys merges flip-flops with the same input, and a plain
    operand register merges into a logic lane's kept copy of the same operand: that copy
    then drives tiles in the multiplier rows besides its own lane's logic, and pulls the
    lane there (the digits CNN with logic lanes: 59 of 132 tiles fed so). A copy of the
    tile's own has one load, and moves into the tile (``boards/dsp_pack.py``)."""
    return kept_copy(m, v, name) if apart else reg(m, v, v.shape(), name)


def lane_constants(lo, hi) -> list[int | None]:
    """Each lane's weight when it is the same in every fold (else None), given each lane's
    smallest and largest weight (flat in lane order)."""
    lo, hi = np.asarray(lo).reshape(-1), np.asarray(hi).reshape(-1)
    return [int(a) if a == b else None for a, b in zip(lo, hi)]


def const_lanes(lo, hi, lut_lanes: int) -> tuple[int, int]:
    """(all-zero, constant non-zero) among the last ``lut_lanes`` lanes, given each lane's
    smallest and largest weight (``lo``, ``hi``, flat in lane order): the tools fold a
    product by a constant weight (a zero one is nothing)."""
    consts = lane_constants(lo, hi)
    consts = consts[len(consts) - lut_lanes:]
    zero = sum(c == 0 for c in consts)
    return zero, sum(c is not None for c in consts) - zero


def lut_mul_const_parts(x_bits: int, w_bits: int, family: str) -> res.Resources:
    """What is left of one :func:`lut_mul` by a constant weight (Yosys folds the digits'
    decode and multiplexers): the copy of ``x``, the sums of its non-zero partial products
    and their registers and, on ECP5, the full adders of the tree's last sum (three
    operands)."""
    n = booth_digits(w_bits)
    ppw = x_bits + 2
    fa = ppw if family == "ecp5" else 0
    return res.add(ppw + 2, family) * max(0, n - 1) + res.Resources(
        lut4=2 * n + fa, ff=x_bits + (n // 2) * (ppw + 3))


def lut_mul_parts(x_bits: int, w_bits: int, family: str) -> res.Resources:
    """Structural logic of one :func:`lut_mul` (its flip-flops included, not the caller's
    product register): its copies of the operands; per Booth digit its decode and the
    multiplexer of ``x``, ``2x`` and their complements (LUTs); the adder tree (its last sum
    of three operands: a row of full adders more) and its inner registers."""
    n = booth_digits(w_bits)
    ppw = x_bits + 2
    out = (res.Resources(lut4=3) + res.mux(ppw, family) * 2) * n
    ff = x_bits + w_bits
    for ops, gw in tree_sum_groups(n, ppw + 2):
        out = out + res.add(gw, family) + res.Resources(lut4=(ops - 2) * gw)
    out = out + res.Resources(lut4=ppw + 2)
    k, w = n, ppw
    while k > 1:
        k, w = (k + 1) // 2, w + 3
        if k > 1:
            ff += k * w + 1
    return out + res.Resources(ff=ff)
