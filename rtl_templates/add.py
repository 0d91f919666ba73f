"""Elementwise adder of two quantized streams with per-input rescaling (QDQ ``Add``).

ONNX semantics (DequantizeLinear ×2 → Add → [Relu/Clip] → QuantizeLinear)::

    y = saturate(round(((a - za)·sa + (b - zb)·sb) / sy) + zy)   [clamped to lo..hi]

Integer form (this block's golden function and hardware)::

    y = clamp(round_half_even(((a - za)·Ma + (b - zb)·Mb) / 2**S) + zy, lo, hi)

with ``Ma ≈ sa/sy · 2**S`` and ``Mb ≈ sb/sy · 2**S`` (:func:`make_add_requant`). A fused Relu
or Clip becomes the clamp bounds ``lo``/``hi`` (Relu: ``lo = zy``).

Precision (as :func:`dataflow.quant.make_requant`): ``S`` gives the larger multiplier
``MULT_BITS`` (24) significant bits and is at least ``max(bits(a - za), bits(b - zb)) +
ACC_GUARD_BITS``. Each multiplier is within 1/2 of its exact value, so for every input pair the
fixed-point sum differs from the exact real ``((a-za)·sa + (b-zb)·sb)/sy`` by at most
``(|a-za|max + |b-zb|max) / 2**(S+1) ≤ 2**-(ACC_GUARD_BITS+1)`` (1/8192) of an output step;
results can differ from exact rounding only that close to a rounding tie (and at exact ties,
when the multipliers are not exact, i.e. when a ratio is not a dyadic fraction).

Stream contract
    ``i0``: ``pe`` elements of ``a_type`` per beat; ``i1``: ``pe`` elements of ``b_type`` per
    beat; ``o``: ``pe`` elements of ``out_type`` per beat. Element k of a beat in bits
    ``[k*bits, (k+1)*bits)``, two's complement when signed.

Join and pipeline (a beat pair taken in cycle t)
    A beat is taken from both inputs together, when both are valid and the output FIFO is
    sure to have room (credit counter, as in :mod:`rtl_templates.mvau`):
    ``i0.ready = i1.valid & room``, ``i1.ready = i0.valid & room``. Each input's ready thus
    depends on the other input's valid and on the credits, never on ``o.ready``.
    t+1: operands registered    t+2: ``(a-za)·Ma`` and ``(b-zb)·Mb`` registered
    t+3: sum registered; round half to even, zero point, clamp → output FIFO (written)
    t+5: earliest output transfer. One beat per cycle; ``o.valid`` is the FIFO's ``r_rdy``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from amaranth.hdl import Cat, Const, Module, Signal, signed, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from dataflow.quant import (ACC_GUARD_BITS, MULT_BITS, QType, Requant, range_type,
                            round_shift_half_even, signed_width)
from rtl_templates.cost import Cost
from rtl_templates.requant import round_clamp

#: cycles from a (joined) input transfer to the output transfer of that beat
PIPELINE_DEPTH = 5


@dataclass(frozen=True)
class AddParams:
    """One adder instance: ``y = clamp(rhe(((a-za)·ma + (b-zb)·mb) / 2**shift) + zy, lo, hi)``."""
    ma: int
    mb: int
    shift: int
    za: int
    zb: int
    zy: int
    lo: int
    hi: int
    a_type: QType
    b_type: QType
    out_type: QType
    pe: int = 1

    def __post_init__(self):
        if self.pe < 1:
            raise ValueError(f"PE={self.pe} must be at least 1")
        if self.ma < 0 or self.mb < 0 or self.shift < 0:
            raise ValueError("multipliers and shift must be non-negative")
        if not (self.out_type.lo <= self.lo <= self.hi <= self.out_type.hi):
            raise ValueError(f"clamp bounds [{self.lo}, {self.hi}] outside "
                             f"{self.out_type.name}")

    @property
    def da_bounds(self) -> tuple[int, int]:
        return self.a_type.lo - self.za, self.a_type.hi - self.za

    @property
    def db_bounds(self) -> tuple[int, int]:
        return self.b_type.lo - self.zb, self.b_type.hi - self.zb

    @property
    def da_bits(self) -> int:
        return signed_width(*self.da_bounds)

    @property
    def db_bits(self) -> int:
        return signed_width(*self.db_bounds)

    @property
    def prod_bounds(self) -> tuple[tuple[int, int], tuple[int, int]]:
        (alo, ahi), (blo, bhi) = self.da_bounds, self.db_bounds
        return (alo * self.ma, ahi * self.ma), (blo * self.mb, bhi * self.mb)

    @property
    def sum_bounds(self) -> tuple[int, int]:
        (pa_lo, pa_hi), (pb_lo, pb_hi) = self.prod_bounds
        return min(pa_lo + pb_lo, 0), max(pa_hi + pb_hi, 0)

    @property
    def sum_bits(self) -> int:
        return signed_width(*self.sum_bounds)

    @property
    def mult_bits(self) -> int:
        return max(1, self.ma.bit_length(), self.mb.bit_length())

    @property
    def requant(self) -> Requant:
        """The shared round/zero-point/clamp stage (multiplier 1: the products are done)."""
        return Requant(mult=(1,), shift=self.shift, zero_point=self.zy, lo=self.lo, hi=self.hi)

    def real_multipliers(self) -> tuple[float, float]:
        return self.ma / 2.0 ** self.shift, self.mb / 2.0 ** self.shift


def make_add_requant(sa, sb, sy, zy: int, za: int, zb: int, lo: int | None, hi: int | None,
                     a_type: QType, b_type: QType, out_type: QType | None = None, pe: int = 1,
                     mult_bits: int = MULT_BITS) -> AddParams:
    """Fixed-point parameters of a QDQ Add (scales as in the model, i.e. float32 values).

    ``lo``/``hi`` are the integer clamp bounds (``None``: the output type's range; a fused
    Relu gives ``lo = zy``). ``out_type`` defaults to the smallest type holding ``lo..hi``.
    See the module documentation for the precision guarantee.
    """
    sa, sb, sy = (float(np.float32(s)) for s in (sa, sb, sy))
    if not all(math.isfinite(s) and s > 0 for s in (sa, sb, sy)):
        raise ValueError(f"scales must be finite and positive (got {sa}, {sb}, {sy})")
    if out_type is None:
        if lo is None or hi is None:
            raise ValueError("give out_type or both clamp bounds")
        out_type = range_type(lo, hi)
    lo = out_type.lo if lo is None else int(lo)
    hi = out_type.hi if hi is None else int(hi)
    ra, rb = sa / sy, sb / sy
    d_bits = max(signed_width(a_type.lo - za, a_type.hi - za),
                 signed_width(b_type.lo - zb, b_type.hi - zb))
    exp_max = math.floor(math.log2(max(ra, rb)))
    shift = max(mult_bits - 1 - exp_max, d_bits + ACC_GUARD_BITS, 0)
    ma, mb = (int(round(r * 2.0 ** shift)) for r in (ra, rb))
    return AddParams(ma=ma, mb=mb, shift=shift, za=int(za), zb=int(zb), zy=int(zy), lo=lo,
                     hi=hi, a_type=a_type, b_type=b_type, out_type=out_type, pe=pe)


# ---------------------------------------------------------------------------- golden

def golden(p: AddParams, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise integer semantics (any shape; ``a`` and ``b`` broadcast)."""
    a = np.asarray(a, dtype=np.int64).astype(object)
    b = np.asarray(b, dtype=np.int64).astype(object)
    acc = (a - p.za) * p.ma + (b - p.zb) * p.mb  # Python ints: no overflow
    y = round_shift_half_even(acc, p.shift) + p.zy
    y = np.minimum(np.maximum(y, p.lo), p.hi)
    return np.asarray(y, dtype=np.int64)


def exact_reference(sa, sb, sy, zy, za, zb, lo, hi, a, b):
    """The real formula in exact rational arithmetic (float32 scales taken as exact), with
    round half to even. Returns (y, tie) where ``tie`` marks exact halfway cases. For tests."""
    from fractions import Fraction
    fa, fb, fy = (Fraction(float(np.float32(s))) for s in (sa, sb, sy))
    ra, rb = fa / fy, fb / fy
    a = np.asarray(a, dtype=np.int64).reshape(-1)
    b = np.asarray(b, dtype=np.int64).reshape(-1)
    y = np.empty(a.shape, dtype=np.int64)
    tie = np.zeros(a.shape, dtype=bool)
    for k, (x0, x1) in enumerate(zip(a.tolist(), b.tolist())):
        v = (x0 - za) * ra + (x1 - zb) * rb
        fl = v.numerator // v.denominator
        frac = v - fl
        if frac == Fraction(1, 2):
            tie[k] = True
            r = fl + (fl & 1)
        else:
            r = fl + (frac > Fraction(1, 2))
        y[k] = min(max(r + zy, lo), hi)
    return y, tie


# ---------------------------------------------------------------------------- cost

def _fifo_depth() -> int:
    return PIPELINE_DEPTH + 3


def timing(p: AddParams, in_first: int, in_last: int) -> tuple[int, int]:
    """First and last output transfer of a frame whose first and last beat pairs were taken
    (both inputs valid) at ``in_first`` and ``in_last``; with two branches arriving at
    different times pass the later first and later last transfer of the two."""
    return in_first + PIPELINE_DEPTH, in_last + PIPELINE_DEPTH


def cost(p: AddParams, elements: int) -> Cost:
    """``elements`` per frame (per input): one beat of ``pe`` elements per cycle."""
    if elements % p.pe:
        raise ValueError(f"PE={p.pe} does not divide the {elements} elements of a frame")
    beats = elements // p.pe
    (pa_lo, pa_hi), (pb_lo, pb_hi) = p.prod_bounds
    prod_bits = signed_width(pa_lo, pa_hi) + signed_width(pb_lo, pb_hi)
    depth = _fifo_depth()
    return Cost(
        cycles=beats,
        latency=timing(p, 0, beats - 1)[1] + 1,
        multipliers=2 * p.pe,
        multiplier_widths=[(p.da_bits, max(1, p.ma.bit_length())),
                           (p.db_bits, max(1, p.mb.bit_length()))] * p.pe,
        memory_bits=depth * p.pe * p.out_type.bits,
        registers=p.pe * (p.a_type.bits + p.b_type.bits + prod_bits + p.sum_bits)
        + 3 + (depth + 1).bit_length() + 2 * depth.bit_length() + 4,
    )


# ---------------------------------------------------------------------------- hardware

def _lanes(word, qt: QType, n: int):
    b = qt.bits
    return [word[k * b:(k + 1) * b].as_signed() if qt.signed else word[k * b:(k + 1) * b]
            for k in range(n)]


class AddBlock(wiring.Component):
    """The two-input adder. See the module documentation for the contract."""

    def __init__(self, p: AddParams):
        self.p = p
        super().__init__({
            "i0": In(stream.Signature(unsigned(p.pe * p.a_type.bits))),
            "i1": In(stream.Signature(unsigned(p.pe * p.b_type.bits))),
            "o": Out(stream.Signature(unsigned(p.pe * p.out_type.bits))),
        })

    def elaborate(self, platform):
        p = self.p
        m = Module()
        PE = p.pe

        depth = _fifo_depth()
        m.submodules.ofifo = ofifo = SyncFIFOBuffered(width=PE * p.out_type.bits, depth=depth)
        m.d.comb += [
            self.o.payload.eq(ofifo.r_data),
            self.o.valid.eq(ofifo.r_rdy),
            ofifo.r_en.eq(self.o.ready),
        ]
        credits = Signal(range(depth + 1), init=depth)
        room = credits != 0

        # --- join -------------------------------------------------------------------------
        take = Signal()
        m.d.comb += [
            take.eq(self.i0.valid & self.i1.valid & room),
            self.i0.ready.eq(self.i1.valid & room),
            self.i1.ready.eq(self.i0.valid & room),
        ]
        out_taken = self.o.valid & self.o.ready
        m.d.sync += credits.eq(credits - take + out_taken)

        # --- t+1: operands ----------------------------------------------------------------
        v1 = Signal()
        a1 = Signal(PE * p.a_type.bits)
        b1 = Signal(PE * p.b_type.bits)
        m.d.sync += v1.eq(take)
        with m.If(take):
            m.d.sync += [a1.eq(self.i0.payload), b1.eq(self.i1.payload)]

        # --- t+2: products ----------------------------------------------------------------
        (pa_lo, pa_hi), (pb_lo, pb_hi) = p.prod_bounds
        v2 = Signal()
        m.d.sync += v2.eq(v1)
        pa = [Signal(signed(signed_width(pa_lo, pa_hi)), name=f"pa_{k}") for k in range(PE)]
        pb = [Signal(signed(signed_width(pb_lo, pb_hi)), name=f"pb_{k}") for k in range(PE)]
        for k, (x, y) in enumerate(zip(_lanes(a1, p.a_type, PE), _lanes(b1, p.b_type, PE))):
            da = Signal(signed(p.da_bits), name=f"da_{k}")
            db = Signal(signed(p.db_bits), name=f"db_{k}")
            m.d.comb += [da.eq(x - p.za), db.eq(y - p.zb)]
            m.d.sync += [pa[k].eq(da * Const(p.ma, unsigned(max(1, p.ma.bit_length())))),
                         pb[k].eq(db * Const(p.mb, unsigned(max(1, p.mb.bit_length()))))]

        # --- t+3: sum; round, zero point, clamp → FIFO ------------------------------------
        v3 = Signal()
        m.d.sync += v3.eq(v2)
        s3 = [Signal(signed(p.sum_bits), name=f"s3_{k}") for k in range(PE)]
        m.d.sync += [s.eq(x + y) for s, x, y in zip(s3, pa, pb)]
        rq = p.requant
        outs = [round_clamp(m, s3[k], rq, name=f"y_{k}")[:p.out_type.bits] for k in range(PE)]
        m.d.comb += [ofifo.w_data.eq(Cat(*outs)), ofifo.w_en.eq(v3)]
        return m
