# amaranth: UnusedElaboratable=no
"""The UART (``rtl_templates/uart.py``): the transmitter's line equals :func:`uart_bits`
cycle for cycle, the receiver reads what the golden line carries (several divisors, random
bytes, gaps), drops a byte with a low stop bit (``frame_err``) and one that arrives while
the previous one is not taken (``overrun``), and the golden decoder inverts the golden
line."""
from __future__ import annotations

import numpy as np
import pytest
from amaranth.back import verilog
from amaranth.sim import Simulator

from hwgen.rtl_templates import uart as U


def _sim(dut, bench):
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


def test_golden_bits_and_decode():
    data = bytes([0x00, 0xFF, 0xA5, 0x01, 0x80])
    line = U.uart_bits(data, 4)
    assert len(line) == 40 * len(data)
    # 0xA5 = 1010_0101: start, 1 0 1 0 0 1 0 1 (LSB first), stop
    assert list(line[80:120:4]) == [0, 1, 0, 1, 0, 0, 1, 0, 1, 1]
    rng = np.random.default_rng(0)
    for d in (4, 5, 7, 16):
        data = rng.integers(0, 256, 50, dtype=np.uint8).tobytes()
        idle = np.ones(13, np.uint8)
        line = np.concatenate([idle, U.uart_bits(data[:20], d), idle, U.uart_bits(data[20:], d),
                               idle])
        assert U.uart_decode(line, d) == data
    # the first byte's stop bit low; the receiver waits for a high line before the next byte
    bad = np.concatenate([U.uart_bits(b"\x12", 4), np.ones(3, np.uint8),
                          U.uart_bits(b"\x34", 4)])
    bad[36:40] = 0
    with pytest.raises(ValueError, match="stop bit"):
        U.uart_decode(bad, 4)
    assert U.uart_decode(bad, 4, strict=False) == b"\x34"
    with pytest.raises(ValueError):
        U.uart_bits(b"x", 3)


@pytest.mark.sim
@pytest.mark.parametrize("divisor", [4, 5, 9])
def test_tx_line_equals_golden(divisor: int):
    """Bytes offered back to back (valid always high, plus a pause): the line after the
    first byte is taken is ``uart_bits`` of the bytes exactly, idle high before and after."""
    rng = np.random.default_rng(divisor)
    data = rng.integers(0, 256, 12, dtype=np.uint8).tobytes()
    dut = U.UartTx(divisor)
    line, taken = [], []

    async def bench(ctx):
        k = 0
        for cycle in range(10 * divisor * (len(data) + 4)):
            pause = 5 * 10 * divisor <= cycle < 7 * 10 * divisor     # nothing offered
            ctx.set(dut.i.valid, k < len(data) and not pause)
            ctx.set(dut.i.payload, data[k] if k < len(data) else 0)
            line.append(ctx.get(dut.tx))
            if ctx.get(dut.i.valid) and ctx.get(dut.i.ready):
                taken.append(cycle)
                k += 1
            await ctx.tick()
        assert k == len(data)

    _sim(dut, bench)
    line = np.array(line, np.uint8)
    first = taken[0]
    assert line[:first + 1].all()
    # bytes taken while offered: 5 back to back, then after the pause 7 back to back
    a, b = taken[:5], taken[5:]
    assert np.all(np.diff(a) == 10 * divisor) and np.all(np.diff(b) == 10 * divisor)
    want_a = U.uart_bits(data[:5], divisor)
    assert np.array_equal(line[first + 1:first + 1 + len(want_a)], want_a)
    gap = line[first + 1 + len(want_a):b[0] + 1]
    assert gap.all()
    want_b = U.uart_bits(data[5:], divisor)
    assert np.array_equal(line[b[0] + 1:b[0] + 1 + len(want_b)], want_b)
    assert line[b[0] + 1 + len(want_b):].all()
    assert U.uart_decode(line, divisor) == data


def _rx_run(divisor: int, line: np.ndarray, ready_fn=lambda cycle: True, tail: int = 0):
    """Drive ``rx`` with ``line`` (one level per cycle); the bytes taken from ``o`` and the
    cycles ``frame_err`` and ``overrun`` pulsed."""
    dut = U.UartRx(divisor)
    got, ferr, ovr = bytearray(), [], []

    async def bench(ctx):
        for cycle in range(len(line) + tail + 4 * divisor):
            ctx.set(dut.rx, int(line[cycle]) if cycle < len(line) else 1)
            r = ready_fn(cycle)
            ctx.set(dut.o.ready, r)
            if ctx.get(dut.o.valid) and r:
                got.append(ctx.get(dut.o.payload))
            if ctx.get(dut.frame_err):
                ferr.append(cycle)
            if ctx.get(dut.overrun):
                ovr.append(cycle)
            await ctx.tick()

    _sim(dut, bench)
    return bytes(got), ferr, ovr


@pytest.mark.sim
@pytest.mark.parametrize("divisor", [4, 6, 11])
def test_rx_reads_golden_line(divisor: int):
    rng = np.random.default_rng(100 + divisor)
    data = rng.integers(0, 256, 24, dtype=np.uint8).tobytes()
    parts = [np.ones(7, np.uint8)]
    for k in range(0, len(data), 6):      # groups back to back, idle gaps of varied length
        parts += [U.uart_bits(data[k:k + 6], divisor), np.ones(int(rng.integers(0, 9)),
                                                                np.uint8)]
    line = np.concatenate(parts)
    got, ferr, ovr = _rx_run(divisor, line)
    assert got == data and not ferr and not ovr
    # the consumer is slow but faster than the line: nothing lost
    got, ferr, ovr = _rx_run(divisor, line, ready_fn=lambda c: c % (5 * divisor) == 0)
    assert got == data and not ferr and not ovr


@pytest.mark.sim
@pytest.mark.parametrize("divisor", [5, 16])
def test_rx_samples_in_the_middle(divisor: int):
    """A line whose data and stop bits hold their value only in the cycle the golden decoder
    samples (the middle of the bit) and the opposite value elsewhere: the receiver reads the
    bytes the golden decoder does, so it samples in that same cycle."""
    rng = np.random.default_rng(divisor)
    data = rng.integers(0, 256, 6, dtype=np.uint8).tobytes()
    parts = [np.ones(3, np.uint8)]
    for byte in data:
        bits = U.uart_bits(bytes([byte]), divisor).copy()
        for k in range(1, 10):
            lo, mid = k * divisor, k * divisor + divisor // 2
            v = bits[mid]
            bits[lo:lo + divisor] = 1 - v
            bits[mid] = v
        parts += [bits, np.ones(divisor, np.uint8)]
    line = np.concatenate(parts)
    assert U.uart_decode(line, divisor) == data
    got, ferr, ovr = _rx_run(divisor, line)
    assert got == data and not ferr and not ovr


@pytest.mark.sim
def test_rx_framing_error_and_glitch():
    d = 5
    data = b"\x11\x22\x33\x44"
    gap = np.ones(d, np.uint8)        # after a low stop bit the line must go high again
    line = np.concatenate([gap] + [np.concatenate([U.uart_bits(data[k:k + 1], d), gap])
                                   for k in range(4)] + [np.ones(20, np.uint8)])
    bad = line.copy()
    bad[d + 11 * d + 9 * d: d + 11 * d + 10 * d] = 0          # 0x22's stop bit low
    got, ferr, ovr = _rx_run(d, bad)
    assert got == b"\x11\x33\x44" and len(ferr) == 1 and not ovr
    assert got == U.uart_decode(bad, d, strict=False)
    # a break: the line low for 3 bytes' time, then good bytes
    brk = np.concatenate([np.ones(5, np.uint8), np.zeros(30 * d, np.uint8),
                          np.ones(3 * d, np.uint8), U.uart_bits(b"\x5a", d)])
    got, ferr, ovr = _rx_run(d, brk)
    assert got == b"\x5a" and len(ferr) == 1
    # a glitch shorter than half a bit is no start bit
    gl = np.concatenate([np.ones(5, np.uint8), np.zeros(1, np.uint8), np.ones(3 * d, np.uint8),
                         U.uart_bits(b"\xc3", d)])
    got, ferr, ovr = _rx_run(d, gl)
    assert got == b"\xc3" and not ferr


@pytest.mark.sim
def test_rx_overrun_keeps_the_first_byte():
    d = 4
    line = np.concatenate([np.ones(5, np.uint8), U.uart_bits(b"\x01\x02\x03", d)])
    stop = 5 + 30 * d + 10

    got, ferr, ovr = _rx_run(d, line, ready_fn=lambda c: c >= stop, tail=10)
    assert got == b"\x01" and len(ovr) == 2 and not ferr


@pytest.mark.sim
@pytest.mark.parametrize("divisor", [4, 7])
def test_tx_to_rx_loop(divisor: int):
    """The transmitter's pin wired to the receiver's: random bytes, random valid/ready."""
    from amaranth.hdl import Module
    rng = np.random.default_rng(7 + divisor)
    data = rng.integers(0, 256, 30, dtype=np.uint8).tobytes()
    m = Module()
    m.submodules.tx = tx = U.UartTx(divisor)
    m.submodules.rx = rx = U.UartRx(divisor)
    m.d.comb += rx.rx.eq(tx.tx)
    got = bytearray()

    async def bench(ctx):
        k = 0
        for _ in range(10 * divisor * (len(data) + 8)):
            ctx.set(tx.i.valid, k < len(data) and rng.random() < 0.7)
            ctx.set(tx.i.payload, data[k] if k < len(data) else 0)
            ctx.set(rx.o.ready, rng.random() < 0.5)
            if ctx.get(tx.i.valid) and ctx.get(tx.i.ready):
                k += 1
            if ctx.get(rx.o.valid) and ctx.get(rx.o.ready):
                got.append(ctx.get(rx.o.payload))
            assert not ctx.get(rx.frame_err) and not ctx.get(rx.overrun)
            await ctx.tick()

    _sim(m, bench)
    assert bytes(got) == data


def test_verilog_and_cost():
    for d in (4, 217):
        assert "module" in verilog.convert(U.UartRx(d), name="uart_rx")
        assert "module" in verilog.convert(U.UartTx(d), name="uart_tx")
    # Yosys 0.70's counts (LUT4, flip-flops), recorded with benchmarks-style runs
    measured = {(4, "rx", "ecp5"): (45, 33), (217, "rx", "ecp5"): (52, 39),
                (4, "tx", "ecp5"): (43, 18), (217, "tx", "ecp5"): (39, 24),
                (4, "rx", "ice40"): (33, 33), (217, "rx", "ice40"): (41, 39),
                (4, "tx", "ice40"): (31, 18), (217, "tx", "ice40"): (39, 24)}
    for (d, side, fam), (lut4, ff) in measured.items():
        r = U.resources(U.UartParams(d, rx=side == "rx", tx=side == "tx"), fam)
        assert abs(r.lut4 - lut4) <= 0.25 * lut4 + 2 and abs(r.ff - ff) <= 2, (d, side, fam, r)
        assert r.dsp == 0 and r.bram == 0
    c = U.cost(U.UartParams(10))
    assert c.cycles == 100 and c.resources("ice40").ff > 0
    with pytest.raises(ValueError):
        U.UartRx(3)
