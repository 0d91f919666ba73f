"""The requantizer's hardware: the pipeline tail every arithmetic block shares.

:class:`RequantPipeline` takes per lane a signed sum, its bias and its multiplier, and after
two pipeline registers (sum + bias; product) gives, combinationally,

    clamp(round_half_even(round24(p) / 2**shift) + zero_point, lo, hi)

of the product ``p = (sum + bias) * mult`` (:func:`round_clamp`), where ``round24`` rounds
|p| to 24 significant bits, half to even (a float32 product): the same formula as
:meth:`rtl_templates.quant.Requant.apply`, its golden function. Both roundings act on the
magnitude and the sign is put back afterwards (round half to even is symmetric).
:func:`round24_hw` is the one float32 rounding of the hardware; the two-input adder uses it too.
"""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed, unsigned

from hwgen.rtl_templates.quant import F32_BITS, Requant, signed_width
from hwgen.rtl_templates.xnor_mvau import sign_bit


def rhe_const(a, k: int):
    """round_half_even(a / 2**k) of an unsigned value ``a``, constant ``k``."""
    if k == 0:
        return a
    q = a >> k
    r = a[:k]
    half = 1 << (k - 1)
    return q + ((r > half) | ((r == half) & q[0]))


def round24_hw(m: Module, mag, name: str):
    """Unsigned ``mag`` rounded to 24 significant bits, half to even (one float32 rounding);
    unsigned, one bit wider than ``mag``.

    No shifter: the bits to drop are those more than 23 places below the leading one, a mask
    ``low`` made by OR-smearing ``mag`` downwards. Adding ``half - 1`` plus the lowest kept bit
    and clearing the ``low`` bits rounds half to even."""
    w = len(mag)
    if w <= F32_BITS:
        return mag
    smear = mag
    k = 1
    while k < w:                        # smear[j] = OR of mag[j..w-1]
        smear = smear | (smear >> k)
        k *= 2
    low = Signal(unsigned(w), name=f"{name}_low")           # the bits rounded away
    lsb = Signal(name=f"{name}_lsb")                        # the lowest kept bit
    kept = Signal(unsigned(w + 1), name=f"{name}_r24")
    m.d.comb += [
        low.eq(smear >> F32_BITS),
        lsb.eq((mag & ((low << 1) & ~low)).any()),
        kept.eq((mag + (low >> 1) + lsb) & ~Cat(low, Const(0, 1))),
    ]
    return kept


def sign_magnitude(m: Module, v, name: str):
    """(negative, |v|) of the signed value ``v``."""
    neg = Signal(name=f"{name}_neg")
    mag = Signal(unsigned(len(v)), name=f"{name}_mag")
    m.d.comb += [neg.eq(v.as_signed() < 0), mag.eq(Mux(neg, -v.as_signed(), v.as_signed()))]
    return neg, mag


def clamp(m: Module, v, lo: int, hi: int, name: str):
    y = Signal(signed(signed_width(lo, hi)), name=name)
    m.d.comb += y.eq(Mux(v < lo, lo, Mux(v > hi, hi, v)))
    return y


def round_clamp(m: Module, p, rq: Requant, name: str):
    """Combinational requantization of the signed product ``p``; returns the clamped value.
    With ``rq.zp_first`` the zero point joins before the rounding, as float32 does it:
    round_half_even(round24(round24(p) + zp·2**shift) / 2**shift)."""
    neg, mag = sign_magnitude(m, p, name)
    kept = round24_hw(m, mag, name)
    if rq.zp_first:
        t = Signal(signed(len(kept) + abs(rq.zero_point).bit_length() + rq.shift + 2),
                   name=f"{name}_zpsum")
        m.d.comb += t.eq(Mux(neg, -kept, kept) + (rq.zero_point << rq.shift))
        neg, mag2 = sign_magnitude(m, t, f"{name}_z")
        kept = round24_hw(m, mag2, f"{name}_z")
        zp = 0
    else:
        zp = rq.zero_point
    ymag = Signal(unsigned(max(1, len(kept) - rq.shift + 1)), name=f"{name}_ymag")
    m.d.comb += ymag.eq(rhe_const(kept, rq.shift))
    return clamp(m, Mux(neg, -ymag, ymag) + zp, rq.lo, rq.hi, name)


class RequantPipeline:
    """The requantizer tail of ``len(sums)`` lanes, built into module ``m``.

    In cycle t: ``valid``, and per lane the signed sum ``sums[k]``, its ``bias[k]`` and its
    multiplier ``mult[k]`` (signals or constants; a single value, not a list, is one multiplier
    shared by all lanes). t+1: ``sum + bias`` (``acc_bits`` wide) and the multiplier are
    registered; t+2: the product is registered. Then, combinationally,
    :func:`round_clamp` of every lane: :attr:`data` (lanes of ``out_bits``, packed) is valid
    when :attr:`valid`. With ``sign`` (a bipolar output) a sign test replaces the product
    and each lane is one bit. :data:`STAGES` registers from input to output."""

    STAGES = 2

    def __init__(self, m: Module, valid, sums, bias, mult, rq: Requant, acc_bits: int,
                 out_bits: int, sign: bool = False, name: str = "rq"):
        n, mult_w = len(sums), rq.mult_bits
        v1, v2 = Signal(name=f"{name}_v1"), Signal(name=f"{name}_v2")
        s1 = [Signal(signed(acc_bits), name=f"{name}_s_{k}") for k in range(n)]
        if isinstance(mult, (list, tuple)):
            m1 = [Signal(unsigned(mult_w), name=f"{name}_m_{k}") for k in range(n)]
            m.d.sync += [r.eq(x) for r, x in zip(m1, mult)]
        else:
            m1 = [Signal(unsigned(mult_w), name=f"{name}_m")] * n
            m.d.sync += m1[0].eq(mult)
        m.d.sync += [v1.eq(valid), v2.eq(v1)]
        m.d.sync += [s.eq(x + b) for s, x, b in zip(s1, sums, bias)]
        if sign:        # the sign requantizer as a comparison (no multiplier)
            outs = [Signal(name=f"{name}_b_{k}") for k in range(n)]
            m.d.sync += [b.eq(sign_bit(s, mm, rq.zero_point)) for b, s, mm in zip(outs, s1, m1)]
        else:
            p2 = [Signal(signed(acc_bits + mult_w + 1), name=f"{name}_p_{k}") for k in range(n)]
            m.d.sync += [x.eq(s * mm) for x, s, mm in zip(p2, s1, m1)]
            outs = [round_clamp(m, p, rq, name=f"{name}_y_{k}")[:out_bits]
                    for k, p in enumerate(p2)]
        self.valid = v2
        self.data = Cat(*outs)
