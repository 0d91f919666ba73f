"""Integer types, range analysis and the fixed-point requantizer.

Everything here is exact integer arithmetic; the hardware blocks implement the very same
formulas. The requantizer maps an accumulator ``acc`` (whose real value is
``acc * real_multiplier`` in units of the output scale) to the output integer

    y = clamp(round_half_even(round24(acc * mult) / 2**shift) + zero_point, lo, hi)

where ``mult / 2**shift`` is the float32 value of the real multiplier (input scale · weight
scale / output scale, evaluated in float32 as onnxruntime does) and ``round24`` rounds the
exact product to 24 significant bits, half to even. That is precisely the float32
arithmetic of onnxruntime's integer kernels (``rint(float(acc) * scale)``) for |acc| < 2**24,
written as integer operations the hardware performs exactly: a multiplier, a leading-one
detector and two half-to-even roundings. It is ONNX's ``saturate(round(x / y_scale) + zp)``
with x evaluated in float32. A Relu folded into the requantizer raises ``lo`` to the zero
point.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np


@dataclass(frozen=True)
class QType:
    """An integer element type: ``bits`` wide, two's complement when ``signed``."""
    bits: int
    signed: bool

    @property
    def lo(self) -> int:
        return -(1 << (self.bits - 1)) if self.signed else 0

    @property
    def hi(self) -> int:
        return (1 << (self.bits - 1)) - 1 if self.signed else (1 << self.bits) - 1

    @property
    def name(self) -> str:
        return f"{'int' if self.signed else 'uint'}{self.bits}"

    def to_unsigned(self, values: np.ndarray) -> np.ndarray:
        """Raw bit patterns (as they travel on a stream) of in-range values."""
        v = np.asarray(values, dtype=np.int64)
        return v & ((1 << self.bits) - 1)

    def from_unsigned(self, raw: np.ndarray) -> np.ndarray:
        v = np.asarray(raw, dtype=np.int64) & ((1 << self.bits) - 1)
        if self.signed:
            v = np.where(v >= (1 << (self.bits - 1)), v - (1 << self.bits), v)
        return v


@dataclass(frozen=True)
class Quantized:
    """How a quantized tensor's integers map to reals: ``real = (q - zero_point) · scale``
    with ``q`` of type ``qtype`` (``None`` where a block chooses the type itself)."""
    qtype: QType | None
    scale: float
    zero_point: int


INT8 = QType(8, True)
UINT8 = QType(8, False)


def range_type(lo: int, hi: int) -> QType:
    """Smallest type holding every integer in [lo, hi] (signed if lo < 0)."""
    lo, hi = int(lo), int(hi)
    if lo >= 0:
        return QType(max(1, int(hi).bit_length()), False)
    bits = max((-lo - 1).bit_length(), max(hi, 0).bit_length()) + 1
    return QType(bits, True)


def signed_width(lo: int, hi: int) -> int:
    """Bits of a two's complement signal holding [lo, hi]."""
    return max((-min(lo, 0) - 1).bit_length() if lo < 0 else 0, max(hi, 0).bit_length()) + 1


def compact(a: np.ndarray) -> np.ndarray:
    """The smallest array that broadcasts back to ``a``: axes of stride 0 (a broadcast view,
    e.g. a filled constant) are cut to length 1."""
    idx = tuple(slice(0, 1) if st == 0 and n > 1 else slice(None)
                for st, n in zip(a.strides, a.shape))
    return a[idx]


def row_bounds(w: np.ndarray, x_lo: int, x_hi: int,
               chunk: int = 1 << 22) -> tuple[np.ndarray, np.ndarray]:
    """Per-row exact bounds of ``w @ x`` for x in [x_lo, x_hi] elementwise (x_lo <= x_hi), for a
    2-D ``w`` of any integer dtype, possibly a broadcast view, without an int64 copy of ``w``:
    per row, the minimum is ``x_lo·Σw⁺ + x_hi·Σw⁻`` and the maximum ``x_hi·Σw⁺ + x_lo·Σw⁻``."""
    rows, cols = w.shape
    c = compact(w)
    rep = cols // max(c.shape[1], 1) if cols else 0
    pos = np.empty(c.shape[0], dtype=np.int64)
    neg = np.empty(c.shape[0], dtype=np.int64)
    step = max(1, chunk // max(c.shape[1], 1))
    for r in range(0, c.shape[0], step):
        part = c[r:r + step]
        pos[r:r + step] = np.where(part > 0, part, 0).sum(axis=1, dtype=np.int64)
        neg[r:r + step] = np.where(part < 0, part, 0).sum(axis=1, dtype=np.int64)
    pos, neg = pos * rep, neg * rep
    lo, hi = x_lo * pos + x_hi * neg, x_hi * pos + x_lo * neg
    if c.shape[0] != rows:
        lo, hi = np.broadcast_to(lo, (rows,)), np.broadcast_to(hi, (rows,))
    return lo, hi


def dot_range(w: np.ndarray, x_lo: int, x_hi: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-row exact bounds of ``w @ x`` for x in [x_lo, x_hi] elementwise (x_lo <= 0 <= x_hi
    is not required). ``w`` is [rows, cols] int (any integer dtype; see :func:`row_bounds`,
    which computes it without an int64 copy of ``w``)."""
    w = np.asarray(w)
    lo, hi = min(int(x_lo), int(x_hi)), max(int(x_lo), int(x_hi))
    if w.ndim == 2:
        return row_bounds(w, lo, hi)
    flat = w.reshape(-1, w.shape[-1]) if w.ndim else w.reshape(1, 1)
    a, b = row_bounds(flat, lo, hi)
    return a.reshape(w.shape[:-1]), b.reshape(w.shape[:-1])


@dataclass(frozen=True)
class Requant:
    """Fixed-point requantizer (per output channel ``mult``; one ``shift`` per layer)."""
    mult: tuple[int, ...]
    shift: int
    zero_point: int
    lo: int
    hi: int
    # onnxruntime's average pooling adds the zero point in float32 *before* rounding:
    # y = rint(fl32(fl32(acc·m) + zp)); this flag selects that form
    zp_first: bool = False

    @cached_property
    def mult_bits(self) -> int:
        return max(1, max(int(m) for m in self.mult).bit_length())

    def apply(self, acc: np.ndarray, channel_axis: int = -1) -> np.ndarray:
        """Golden requantization of integer ``acc`` (channels along ``channel_axis``)."""
        acc = np.asarray(acc)
        shape = [1] * acc.ndim
        shape[channel_axis] = -1
        mult = np.array(self.mult, dtype=object).reshape(shape) if len(self.mult) > 1 \
            else np.array(self.mult[0], dtype=object)
        # Python ints (object arrays): products may exceed 64 bits.
        p = acc.astype(object) * mult
        if self.zp_first:
            zs = self.zero_point << self.shift
            y = np.vectorize(lambda v: round24_shift(round24(v) + zs, self.shift),
                             otypes=[object])(p)
        else:
            y = np.vectorize(lambda v: round24_shift(v, self.shift), otypes=[object])(p)
            y = y + self.zero_point
        y = np.minimum(np.maximum(y, self.lo), self.hi)
        return y.astype(np.int64)


#: significant bits of a float32 value
F32_BITS = 24
#: significant bits of the larger multiplier in fixed-point forms (the two-input adder's)
MULT_BITS = 24
#: widest fixed-point requantization multiplier: a real multiplier up to 2**38, or channel
#: multipliers within 2**38 of each other (beyond that the scales are out of proportion)
MAX_MULT_BITS = 62
#: fraction bits beyond an operand's width in fixed-point forms (absolute precision)
ACC_GUARD_BITS = 12


def rhe(a: int, k: int) -> int:
    """round_half_even(a / 2**k) for any integer ``a`` (a left shift for k <= 0)."""
    if k <= 0:
        return a << -k
    q, r = a >> k, a & ((1 << k) - 1)
    half = 1 << (k - 1)
    return q + (1 if r > half or (r == half and q & 1) else 0)


def round24(p: int) -> int:
    """``p`` with its magnitude rounded to 24 significant bits, half to even: one float32
    rounding of an integer (scaled) value."""
    a = -p if p < 0 else p
    d = max(0, a.bit_length() - F32_BITS)
    a = rhe(a, d) << d
    return -a if p < 0 else a


def round24_shift(p: int, shift: int) -> int:
    """round_half_even(round24(p) / 2**shift) for one Python int: the requantizer's rounding
    (half to even is sign symmetric)."""
    return rhe(round24(p), shift)


def make_requant(real_multiplier, zero_point: int, lo: int, hi: int) -> Requant:
    """Requantizer for ``real_multiplier`` (scalar or per channel), taken as float32.

    Each channel's float32 multiplier is exactly ``m · 2**-s`` with a 24-bit mantissa m; one
    shift serves all channels (the largest s), the others' mantissas are shifted up to it.
    """
    m32 = np.atleast_1d(np.asarray(real_multiplier, dtype=np.float32))
    if not np.all(np.isfinite(m32)) or np.any(m32 < 0):
        raise ValueError("requantization multiplier must be finite and non-negative")
    tiny = np.finfo(np.float32).tiny
    if np.any((m32 > 0) & (m32 < tiny)):
        v = float(m32[(m32 > 0) & (m32 < tiny)][0])
        raise ValueError(f"requantization multiplier {v!r} is below the smallest normal "
                         f"float32 ({float(tiny)!r}): the scales are out of proportion")
    parts = []
    for v in m32:
        if v == 0:
            parts.append((0, 0))
            continue
        frac, exp = np.frexp(np.float64(v))            # v = frac · 2**exp, frac in [0.5, 1)
        parts.append((int(np.ldexp(frac, F32_BITS)), F32_BITS - int(exp)))
    shift = max(max(s for _, s in parts), 0)
    mult = tuple(m << (shift - s) if m else 0 for m, s in parts)
    if max(mult).bit_length() > MAX_MULT_BITS:
        nz = m32[m32 > 0]
        raise ValueError(f"requantization multipliers from {float(nz.min())!r} to "
                         f"{float(nz.max())!r} need a {max(mult).bit_length()}-bit fixed-point "
                         f"multiplier (at most {MAX_MULT_BITS}): the scales are out of "
                         f"proportion")
    return Requant(mult=mult, shift=shift, zero_point=int(zero_point), lo=int(lo), hi=int(hi))
