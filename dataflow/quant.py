"""Integer types, range analysis and the fixed-point requantizer.

Everything here is exact integer arithmetic; the hardware blocks implement the very same
formulas. The requantizer maps an accumulator ``acc`` (whose real value is
``acc * real_multiplier`` in units of the output scale) to the output integer

    y = clamp(round_half_even(acc * mult / 2**shift) + zero_point, lo, hi)

which is ONNX QuantizeLinear's ``saturate(round(x / y_scale) + y_zero_point)`` with the real
multiplier replaced by the fixed-point ``mult / 2**shift`` (see :func:`make_requant`). A Relu folded into the requantizer raises ``lo`` to the
zero point.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: significant bits of the largest per-channel fixed-point multiplier
MULT_BITS = 24
#: extra fraction bits beyond the accumulator width (absolute precision of the product)
ACC_GUARD_BITS = 12


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


def dot_range(w: np.ndarray, x_lo: int, x_hi: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-row exact bounds of ``w @ x`` for x in [x_lo, x_hi] elementwise (x_lo <= 0 <= x_hi
    is not required). ``w`` is [rows, cols] int."""
    w = np.asarray(w, dtype=np.int64)
    a, b = w * x_lo, w * x_hi
    return np.minimum(a, b).sum(axis=-1), np.maximum(a, b).sum(axis=-1)


@dataclass(frozen=True)
class Requant:
    """Fixed-point requantizer (per output channel ``mult``; one ``shift`` per layer)."""
    mult: tuple[int, ...]
    shift: int
    zero_point: int
    lo: int
    hi: int

    @property
    def mult_array(self) -> np.ndarray:
        return np.array(self.mult, dtype=object)

    @property
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
        y = round_shift_half_even(p, self.shift) + self.zero_point
        y = np.minimum(np.maximum(y, self.lo), self.hi)
        return y.astype(np.int64)


def round_shift_half_even(p, shift: int):
    """round_half_even(p / 2**shift) for integer (object or int64) arrays."""
    if shift == 0:
        return p
    q = p >> shift  # floor
    r = p - (q << shift)
    half = 1 << (shift - 1)
    up = (r > half) | ((r == half) & ((q & 1) == 1))
    return q + up.astype(np.int64) if not isinstance(up, bool) else q + int(up)


def make_requant(real_multiplier, zero_point: int, lo: int, hi: int, acc_bits: int = 0,
                 mult_bits: int = MULT_BITS) -> Requant:
    """Fixed-point form of ``real_multiplier`` (scalar or per channel, float64 >= 0).

    The shift gives the largest channel ``mult_bits`` significant bits and is at least
    ``acc_bits + ACC_GUARD_BITS``, so for any accumulator value the fixed-point product is
    within 2**-ACC_GUARD_BITS of a step of the exact one (results differ from exact
    arithmetic only that close to a rounding tie). Channels with much smaller multipliers
    keep that same absolute precision without widening the multiplier.
    """
    m = np.atleast_1d(np.asarray(real_multiplier, dtype=np.float64))
    if not np.all(np.isfinite(m)) or np.any(m < 0):
        raise ValueError("requantization multiplier must be finite and non-negative")
    shift = acc_bits + ACC_GUARD_BITS if acc_bits else 0
    if np.any(m > 0):
        exp_max = int(np.floor(np.log2(m.max())))
        shift = max(shift, mult_bits - 1 - exp_max)
    shift = max(shift, 0)
    mult = tuple(int(round(float(v) * (1 << shift))) for v in m)
    return Requant(mult=mult, shift=shift, zero_point=int(zero_point), lo=int(lo), hi=int(hi))
