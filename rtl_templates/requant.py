"""The requantizer's hardware: the last stage every arithmetic block shares.

Given the product ``p = acc * mult`` (signed), it computes, combinationally,

    clamp(round_half_even(round24(p) / 2**shift) + zero_point, lo, hi)

where ``round24`` rounds |p| to 24 significant bits, half to even (a float32 product), the
same formula as :meth:`rtl_templates.quant.Requant.apply`, its golden function. Both roundings
act on the magnitude and the sign is put back afterwards (round half to even is symmetric).
"""
from __future__ import annotations

from amaranth.hdl import Mux, Module, Signal, signed, unsigned

from hwgen.rtl_templates.quant import F32_BITS, Requant, signed_width


def _round_shift(m: Module, a, k, width: int, name: str):
    """round_half_even(a / 2**k) for unsigned ``a``; ``k`` a constant or a signal."""
    if isinstance(k, int):
        if k == 0:
            return a
        q = a >> k
        r = a[:k]
        half = 1 << (k - 1)
        return q + ((r > half) | ((r == half) & q[0]))
    q = Signal(unsigned(width), name=f"{name}_q")
    r = Signal(unsigned(width), name=f"{name}_r")
    half = Signal(unsigned(width), name=f"{name}_half")
    m.d.comb += [q.eq(a >> k), r.eq(a - (q << k)), half.eq((1 << k) >> 1)]
    return q + ((k != 0) & ((r > half) | ((r == half) & q[0])))


def _round24(m: Module, mag, w: int, name: str):
    """|p| rounded to 24 significant bits, half to even (unsigned in, unsigned out)."""
    if w <= F32_BITS:
        return mag
    # bits below the 24 most significant ones of |p| are rounded away (a float32 value)
    drop = Signal(range(w), name=f"{name}_drop")
    m.d.comb += drop.eq(0)
    for k in range(F32_BITS, w):        # the highest set bit wins (last assignment)
        with m.If(mag[k]):
            m.d.comb += drop.eq(k - F32_BITS + 1)
    kept = Signal(unsigned(w + 1), name=f"{name}_kept")
    m.d.comb += kept.eq(_round_shift(m, mag, drop, w, f"{name}_r24") << drop)
    return kept


def _sign_mag(m: Module, v, name: str):
    w = len(v)
    neg = Signal(name=f"{name}_neg")
    mag = Signal(unsigned(w), name=f"{name}_mag")
    m.d.comb += [neg.eq(v.as_signed() < 0), mag.eq(Mux(neg, -v.as_signed(), v.as_signed()))]
    return neg, mag


def round_clamp(m: Module, p, rq: Requant, name: str):
    """Combinational requantization of the signed product ``p``; returns the clamped value.
    With ``rq.zp_first`` the zero point joins before the rounding, as float32 does it:
    round_half_even(round24(round24(p) + zp·2**shift) / 2**shift)."""
    neg, mag = _sign_mag(m, p, name)
    kept = _round24(m, mag, len(p), name)
    if rq.zp_first:
        t = Signal(signed(len(kept) + abs(rq.zero_point).bit_length() + rq.shift + 2),
                   name=f"{name}_zpsum")
        m.d.comb += t.eq(Mux(neg, -kept, kept) + (rq.zero_point << rq.shift))
        neg, mag2 = _sign_mag(m, t, f"{name}_z")
        kept = _round24(m, mag2, len(t), f"{name}_z")
        zp = 0
    else:
        zp = rq.zero_point
    ymag = Signal(unsigned(max(1, len(kept) - rq.shift + 1)), name=f"{name}_ymag")
    m.d.comb += ymag.eq(_round_shift(m, kept, rq.shift, len(kept), f"{name}_rs"))
    y0 = Mux(neg, -ymag, ymag) + zp
    y = Signal(signed(signed_width(rq.lo, rq.hi)), name=name)
    m.d.comb += y.eq(Mux(y0 < rq.lo, rq.lo, Mux(y0 > rq.hi, rq.hi, y0)))
    return y
