"""Packed words: element k of a memory word or stream beat in bits ``[k*bits, (k+1)*bits)``.

One packing for everything: memory images of the blocks, stream beats of the simulators
(``sim/packing.py``) and the lanes of a beat in hardware (:func:`lanes`).
"""
from __future__ import annotations


def pack_word(values, bits: int) -> int:
    """Two's complement ``values`` packed ``bits`` apiece, the first in the low bits."""
    mask = (1 << bits) - 1
    word = 0
    for k, v in enumerate(values):
        word |= (int(v) & mask) << (k * bits)
    return word


def unpack_word(word: int, n: int, bits: int) -> list[int]:
    """The ``n`` raw (unsigned) ``bits``-bit elements of ``word``, the first from the low bits."""
    mask = (1 << bits) - 1
    return [(word >> (k * bits)) & mask for k in range(n)]


def lanes(word, n: int, bits: int, signed: bool = False) -> list:
    """The ``n`` lanes of ``bits`` bits of an Amaranth value ``word`` (lane k in bits
    ``[k*bits, (k+1)*bits)``), two's complement when ``signed``."""
    out = [word[k * bits:(k + 1) * bits] for k in range(n)]
    return [v.as_signed() for v in out] if signed else out
