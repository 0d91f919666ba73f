"""The requantizer's hardware: the last stage every arithmetic block shares.

Given the product ``p = acc * mult`` (signed), it computes, combinationally,
``clamp(round_half_even(p / 2**shift) + zero_point, lo, hi)`` — the same formula as
:meth:`dataflow.quant.Requant.apply`, its golden function.
"""
from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal, signed

from dataflow.quant import Requant, signed_width


def round_clamp(m: Module, p, rq: Requant, name: str):
    """Combinational ``clamp(round_half_even(p / 2**shift) + zp, lo, hi)``."""
    S = rq.shift
    if S > 0:
        q = p >> S  # arithmetic (floor) for signed values
        r = p[:S]
        half = 1 << (S - 1)
        up = (r > half) | ((r == half) & q[0])
        y0 = q + up + rq.zero_point
    else:
        y0 = p + rq.zero_point
    y = Signal(signed(signed_width(rq.lo, rq.hi)), name=name)
    m.d.comb += y.eq(Mux(y0 < rq.lo, rq.lo, Mux(y0 > rq.hi, rq.hi, y0)))
    return y
