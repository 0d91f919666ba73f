"""Packing integers into memory words and stream beats (element k in bits [k*bits, ...))."""
from __future__ import annotations


def pack_word(values, bits: int) -> int:
    """Two's complement ``values`` packed ``bits`` apiece, the first in the low bits."""
    word = 0
    for k, v in enumerate(values):
        word |= (int(v) & ((1 << bits) - 1)) << (k * bits)
    return word
