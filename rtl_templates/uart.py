"""UART receiver and transmitter: 8 data bits, no parity, one stop bit (8N1), LSB first.

``divisor`` is the number of clock cycles per bit (at least 4): ``clock / baud``, rounded
(the receiver samples in the middle of each bit, so a rounding error of a few per cent over
the ten bits of a byte is harmless).

:class:`UartRx`
    The pin ``rx`` (idle high) goes through two flip-flops (a synchronizer: the line is
    asynchronous to the clock). A low level while idle is a start bit; it is checked again
    ``divisor // 2`` cycles later (in its middle: a shorter glitch is ignored), then the eight
    data bits and the stop bit are sampled one ``divisor`` apart. A byte whose stop bit is low
    is dropped, ``frame_err`` pulses for one cycle, and the receiver waits for the line to go
    high again (a break) before it looks for the next start bit. A good byte is offered on
    the stream ``o`` (``amaranth.lib.stream``: valid held, payload stable, until ready); if
    the next byte is complete while the previous one is still not taken, the new byte is
    dropped and ``overrun`` pulses for one cycle.

:class:`UartTx`
    The stream ``i`` of bytes out on the pin ``tx`` (a flip-flop, idle high). A byte is taken
    while the line is idle or in the last cycle of the previous stop bit, so back-to-back
    bytes follow each other without a gap: exactly ``10·divisor`` cycles per byte, and the
    line's level in the cycles after a byte is taken in cycle t (t + 1 on) is
    :func:`uart_bits` of the bytes.

Golden faces: :func:`uart_bits` (the line level per clock cycle of a byte string: what
:class:`UartTx` sends, and what drives :class:`UartRx` in simulation) and
:func:`uart_decode` (the bytes of a line sampled once per cycle, as the receiver reads it).
Cost: :func:`resources` (LUT4, flip-flops, carry cells per family) and :func:`cost`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from hwgen.rtl_templates import resources as res
from hwgen.rtl_templates.cost import Cost

__all__ = ["BITS_PER_BYTE", "MIN_DIVISOR", "UartParams", "UartRx", "UartTx", "cost",
           "resources", "uart_bits", "uart_decode"]

#: start bit, eight data bits, stop bit
BITS_PER_BYTE = 10
#: the smallest divisor: the receiver's middle-of-bit sampling needs a few cycles per bit
MIN_DIVISOR = 4


def _check_divisor(divisor: int) -> int:
    if int(divisor) != divisor or divisor < MIN_DIVISOR:
        raise ValueError(f"a UART needs at least {MIN_DIVISOR} clock cycles per bit "
                         f"(divisor {divisor!r})")
    return int(divisor)


# ============================================================================ golden


def uart_bits(data: bytes, divisor: int) -> np.ndarray:
    """The line level (0 or 1, uint8) in each clock cycle while ``data`` is sent back to back:
    per byte a start bit (0), the data bits LSB first and a stop bit (1), each ``divisor``
    cycles long. No idle time before, between or after the bytes."""
    divisor = _check_divisor(divisor)
    b = np.frombuffer(bytes(data), dtype=np.uint8)
    bits = np.unpackbits(b[:, None], axis=1, bitorder="little")            # [n, 8]
    frame = np.concatenate([np.zeros((len(b), 1), np.uint8), bits,
                            np.ones((len(b), 1), np.uint8)], axis=1)       # [n, 10]
    return np.repeat(frame.reshape(-1), divisor).astype(np.uint8)


def uart_decode(line, divisor: int, *, strict: bool = True) -> bytes:
    """The bytes on ``line`` (its level per clock cycle, e.g. :class:`UartTx`'s ``tx``
    sampled every cycle): a falling edge while idle starts a byte, each bit is read in its
    middle. ``strict``: a low stop bit raises ``ValueError``; otherwise such a byte is
    dropped and the decoder waits for the line to go high, as :class:`UartRx` does. A byte
    cut off at the end of ``line`` is not returned."""
    divisor = _check_divisor(divisor)
    v = np.asarray(line, dtype=np.uint8).reshape(-1)
    out = bytearray()
    n, t, half = len(v), 0, divisor // 2
    while True:
        lows = np.flatnonzero(v[t:] == 0)
        if len(lows) == 0:
            break
        start = t + int(lows[0])
        samples = start + half + divisor * np.arange(BITS_PER_BYTE)
        if samples[-1] >= n:
            break
        if v[samples[0]] != 0:              # a glitch, not a start bit
            t = start + half + 1
            continue
        bits = v[samples]
        if bits[-1] != 1:
            if strict:
                raise ValueError(f"UART framing error: the stop bit of the byte starting in "
                                 f"cycle {start} is low")
            highs = np.flatnonzero(v[samples[-1]:] == 1)
            if len(highs) == 0:
                break
            t = int(samples[-1] + highs[0])
            continue
        out.append(int(np.packbits(bits[1:9], bitorder="little")[0]))
        t = int(samples[-1]) + 1
    return bytes(out)


# ============================================================================ hardware


class _Countdown:
    """A bit-period counter in module ``m``: ``cnt`` counts down to zero and stays there;
    ``tick`` (cnt == 0) is a register; :meth:`load` a value above zero, :meth:`step` one
    down (while not ``tick``). The decrement is two halves with a registered borrow (the low
    half is zero), so no carry chain is longer than half the counter."""

    def __init__(self, m: Module, d: int):
        self.m, self.cnt = m, Signal(range(d), reset_less=True)   # loaded before use
        self.tick = Signal(init=1)
        w = len(self.cnt)
        self.k = max(1, w // 2)
        self.lo_zero = Signal(init=1)       # cnt[:k] == 0

    def load(self, v: int):
        assert 0 < v < 1 << len(self.cnt)
        self.m.d.sync += [self.cnt.eq(v), self.tick.eq(0),
                          self.lo_zero.eq(v & ((1 << self.k) - 1) == 0)]

    def step(self):
        c, k = self.cnt, self.k
        self.m.d.sync += [c[:k].eq(c[:k] - 1), self.lo_zero.eq(c[:k] == 1),
                          self.tick.eq(c == 1)]
        if k < len(c):
            with self.m.If(self.lo_zero):
                self.m.d.sync += c[k:].eq(c[k:] - 1)


class UartRx(wiring.Component):
    """Bytes from the pin ``rx`` on the stream ``o`` (see the module documentation).

    Ports: ``rx`` In(1) (the pin, idle high); ``o`` Out(stream of 8 bits); ``frame_err``
    Out(1) and ``overrun`` Out(1), one-cycle pulses (a byte dropped)."""

    def __init__(self, divisor: int):
        self.divisor = _check_divisor(divisor)
        super().__init__({"rx": In(1, init=1), "o": Out(stream.Signature(8)),
                          "frame_err": Out(1), "overrun": Out(1)})

    def elaborate(self, platform):
        m = Module()
        d = self.divisor
        sync = Signal(2, init=0b11)           # the synchronizer: sync[0] first, sync[1] second
        m.d.sync += sync.eq(Cat(self.rx, sync[0]))
        line = sync[1]
        ctr = _Countdown(m, d)
        tick = ctr.tick
        nbit = Signal(range(8), reset_less=True)
        shreg = Signal(8, reset_less=True)
        valid = Signal()
        data = Signal(8, reset_less=True)
        m.d.comb += [self.o.valid.eq(valid), self.o.payload.eq(data)]
        with m.If(self.o.ready):
            m.d.sync += valid.eq(0)
        m.d.sync += [self.frame_err.eq(0), self.overrun.eq(0)]
        load = ctr.load
        with m.If(~tick):
            ctr.step()
        # the states, one-hot (a state register with an initial value is not recoded)
        st = {n: Signal(init=n == "IDLE", name="st_" + n.lower())
              for n in ("IDLE", "START", "DATA", "STOP", "BREAK")}

        def goto(frm, to):
            m.d.sync += [st[frm].eq(0), st[to].eq(1)]

        with m.If(st["IDLE"] & ~line):
            load(d // 2 - 1)
            goto("IDLE", "START")
        with m.If(st["START"] & tick):
            load(d - 1)
            m.d.sync += nbit.eq(0)
            with m.If(line):
                goto("START", "IDLE")         # a glitch
            with m.Else():
                goto("START", "DATA")
        with m.If(st["DATA"] & tick):
            load(d - 1)
            m.d.sync += [shreg.eq(Cat(shreg[1:], line)), nbit.eq(nbit + 1)]
            with m.If(nbit == 7):
                goto("DATA", "STOP")
        with m.If(st["STOP"] & tick):
            with m.If(line):
                with m.If(~valid | self.o.ready):
                    m.d.sync += [data.eq(shreg), valid.eq(1)]
                with m.Else():
                    m.d.sync += self.overrun.eq(1)
                goto("STOP", "IDLE")
            with m.Else():
                m.d.sync += self.frame_err.eq(1)
                goto("STOP", "BREAK")
        with m.If(st["BREAK"] & line):
            goto("BREAK", "IDLE")
        return m


class UartTx(wiring.Component):
    """Bytes of the stream ``i`` out on the pin ``tx`` (see the module documentation).

    Ports: ``i`` In(stream of 8 bits); ``tx`` Out(1) (the pin, idle high, a flip-flop)."""

    def __init__(self, divisor: int):
        self.divisor = _check_divisor(divisor)
        super().__init__({"i": In(stream.Signature(8)), "tx": Out(1, init=1)})

    def elaborate(self, platform):
        m = Module()
        d = self.divisor
        shreg = Signal(BITS_PER_BYTE, init=(1 << BITS_PER_BYTE) - 1)   # shreg[0] on the line
        ctr = _Countdown(m, d)
        cnt, tick = ctr.cnt, ctr.tick
        left = Signal(range(BITS_PER_BYTE + 1))                        # bits still to send
        # ready: idle, or in the stop bit's last cycle; a register (its next value from the
        # stop bit's second-to-last cycle), which the tools map far smaller than the compare
        ready = Signal(init=1)
        m.d.sync += ready.eq(~(self.i.valid & ready) & (ready | ((left == 1) & (cnt == 1))))
        m.d.comb += [self.i.ready.eq(ready), self.tx.eq(shreg[0])]
        with m.If(left != 0):
            with m.If(tick):
                m.d.sync += [shreg.eq(Cat(shreg[1:], 1)), left.eq(left - 1)]
                ctr.load(d - 1)
            with m.Else():
                ctr.step()
        with m.If(self.i.valid & ready):
            m.d.sync += [shreg.eq(Cat(0, self.i.payload, 1)), left.eq(BITS_PER_BYTE)]
            ctr.load(d - 1)
        return m


# ============================================================================ cost


@dataclass(frozen=True)
class UartParams:
    divisor: int             # clock cycles per bit
    rx: bool = True          # a receiver
    tx: bool = True          # a transmitter


def resource_parts(p: UartParams, family: str) -> dict[str, res.Resources]:
    """The structural parts: registers, the bit-period counters (a decrement and a zero
    test each), the bit counters and the state logic."""
    cw = max(1, (p.divisor - 1).bit_length())
    parts: dict[str, res.Resources] = {}
    if p.rx:
        # synchronizer 2, counter (and its tick and borrow flags), bit counter 3, shift
        # register 8, data 8, valid, two flags, state (one-hot, 5)
        parts["rx_regs"] = res.Resources(ff=2 + cw + 2 + 3 + 8 + 8 + 1 + 2 + 5)
        parts["rx_logic"] = (res.sub(cw, family) + res.reduce_or(cw, family)
                             + res.Resources(lut4=cw + 3 + 8 + 8 + 10))
    if p.tx:
        # shift register 10, counter (and its tick and borrow flags), bits left 4
        parts["tx_regs"] = res.Resources(ff=BITS_PER_BYTE + cw + 2 + 4)
        parts["tx_logic"] = (res.sub(cw, family) + res.reduce_or(cw, family)
                             + res.Resources(lut4=cw + BITS_PER_BYTE + 4 + 3))
    return parts


#: calibration of :func:`resource_parts` against Yosys 0.70 (``synth_ecp5``, ``synth_ice40``)
#: at divisors 4 and 217: receiver ECP5 45/52 LUT4, iCE40 33/41; transmitter ECP5 43/39,
#: iCE40 31/39; flip-flops 33/39 and 18/24
RESOURCE_FIT: res.Fit = {
    "ecp5": {"lut4": {"rx_logic": 1.4, "tx_logic": 1.75}, "ff": {"1": -1}},
    "ice40": {"lut4": {"rx_logic": 0.82, "tx_logic": 1.0}, "ff": {"1": -1}},
}


def resources(p: UartParams, family: str) -> res.Resources:
    """Estimated LUT4, flip-flops and carry cells of the receiver and/or transmitter."""
    if family not in res.FAMILIES:
        raise ValueError(f"unknown FPGA family {family!r} (choose {', '.join(res.FAMILIES)})")
    return res.fitted(resource_parts(p, family), RESOURCE_FIT.get(family)).rounded()


def cost(p: UartParams) -> Cost:
    """One byte in or out takes ``10·divisor`` cycles."""
    by_family = {f: resources(p, f) for f in res.FAMILIES}
    return Cost(cycles=BITS_PER_BYTE * p.divisor, latency=BITS_PER_BYTE * p.divisor + 3,
                registers=max(r.ff for r in by_family.values()), by_family=by_family,
                parts={f: resource_parts(p, f) for f in res.FAMILIES})
