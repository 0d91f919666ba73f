"""Bipolar (±1) values in the matrix–vector unit: the element type, its 1-bit stream encoding
and the multiplier-free dot products the MVAU (``rtl_templates/mvau.py``) uses for them.

Element type
    :data:`BIPOLAR` is an integer type whose values are -1 and +1 (QONNX ``BipolarQuant``, or
    ``Quant`` with a signed bit width of 1). On a stream each element takes one bit:
    bit 1 = +1, bit 0 = -1. The encoding is monotonic (a larger bit is a larger value). The
    golden model and the integer graph hold the values themselves (±1), so every integer
    formula (``W @ x + b``, requantization) applies unchanged.

Dot products (``MVAUParams.datapath``)
    ``"xnor"``: bipolar inputs and ±1 weights, each stored as one bit. A product is +1 exactly
    when the two bits agree, so a SIMD-term dot product is ``2·popcount(xnor(x, w)) − SIMD``.
    ``"select"``: integer inputs and ±1 weights (one bit each): each term is ``x`` or ``−x``.
    ``"bipolar_in"``: bipolar inputs and integer weights: each term is ``w`` or ``−w``.
    None of them needs a multiplier. Their golden function is the MVAU's: the integer
    ``W @ x + b`` with x, w in {−1, +1} gives the same numbers as ``2·popcount − n``
    (:func:`xnor_popcount` is the bit-level form, used by the tests to show it).

Sign activation
    A bipolar output is ``+1 if acc >= 0 else −1`` (QONNX ``BipolarQuant``: ``x >= 0 → +1``).
    :func:`sign_requant` expresses it as an ordinary requantizer,
    ``clamp(2·acc + 1, −1, 1)``, which is never 0, so the golden function needs nothing new.
    The hardware compares instead of multiplying (:func:`sign_bit`) and sends bit ``y > 0``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from amaranth.hdl import Mux

from hwgen.rtl_templates.quant import QType, Requant


@dataclass(frozen=True)
class BipolarType(QType):
    """The bipolar element type: values -1 and +1, one bit on a stream (1 = +1)."""
    bits: int = 1
    signed: bool = False        # the stream bit is unsigned (and order preserving)

    @property
    def lo(self) -> int:
        return -1

    @property
    def hi(self) -> int:
        return 1

    @property
    def name(self) -> str:
        return "bipolar"

    def to_unsigned(self, values: np.ndarray) -> np.ndarray:
        v = np.asarray(values, dtype=np.int64)
        if np.any(np.abs(v) != 1):
            raise ValueError("bipolar values must be -1 or +1")
        return (v > 0).astype(np.int64)

    def from_unsigned(self, raw: np.ndarray) -> np.ndarray:
        return 2 * (np.asarray(raw, dtype=np.int64) & 1) - 1


BIPOLAR = BipolarType()


def is_bipolar(qtype) -> bool:
    return isinstance(qtype, BipolarType)


def is_pm1(weights: np.ndarray) -> bool:
    """All weights are -1 or +1 (so one bit stores each)."""
    w = np.asarray(weights)
    return w.size > 0 and bool(np.all(np.abs(w) == 1))


def sign_requant(always: int | None = None) -> Requant:
    """``+1 if acc >= 0 else -1`` as a requantizer: clamp(2·acc + 1, -1, 1). With ``always``
    (+1 or -1) the output is that constant (a clip that decides the sign on its own)."""
    if always is not None:
        return Requant(mult=(0,), shift=0, zero_point=int(always), lo=-1, hi=1)
    return Requant(mult=(2,), shift=0, zero_point=1, lo=-1, hi=1)


def check_sign_requant(rq: Requant) -> None:
    """A requantizer feeding a bipolar output must be a sign test: multipliers 0 or 2, no
    shift, zero point ±1, bounds [-1, 1] (so ``clamp(m·acc + zp, -1, 1)`` is never 0)."""
    if not (rq.shift == 0 and all(int(m) in (0, 2) for m in rq.mult)
            and rq.zero_point in (-1, 1) and (rq.lo, rq.hi) == (-1, 1)):
        raise ValueError("a bipolar output needs a sign requantizer (see sign_requant)")


def xnor_popcount(x_bits: np.ndarray, w_bits: np.ndarray) -> np.ndarray:
    """Bit-level golden of the XNOR datapath: ``x_bits`` [..., n], ``w_bits`` [m, n] in {0, 1}
    → [..., m] dot products of the ±1 values they encode, ``2·popcount(xnor) − n``."""
    x = np.asarray(x_bits, dtype=np.int64)[..., None, :]
    w = np.asarray(w_bits, dtype=np.int64)
    agree = (x == w).sum(axis=-1)
    return 2 * agree - w.shape[-1]


def sign_bit(acc, mult, zero_point: int):
    """The bit of ``clamp(mult·acc + zero_point, -1, 1)`` for ``mult`` in {0, 2} (a signal)
    and ``zero_point`` ±1: 1 (= +1) when the value is positive. No multiplier: 2·acc is a
    shift."""
    return Mux(mult != 0, ((acc << 1) + zero_point) > 0, int(zero_point > 0))


# ---------------------------------------------------------------------------- hardware

def select_term(bit, v):
    """``v`` if ``bit`` else ``−v`` (a ±1 factor given by one bit)."""
    return Mux(bit, v, -v)
