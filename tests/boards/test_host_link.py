# amaranth: UnusedElaboratable=no
"""The host link (``rtl_templates/host_link.py``): its protocol functions, and
:class:`HostLink` in Amaranth's simulator with a small fake core behind it, driven over the
UART pin by a host that sends each request once the replies before it have arrived. Every
test compares the reply bytes on the ``tx`` pin with :func:`reference_replies` exactly:
good frames, a corrupted payload byte (CRC error, and the next frame still right), a wrong
length, garbage before the magic, an unknown type, back-to-back requests, pings, weight-load
words reaching ``s_wload`` in order, and a byte lost on the line (``ERR_LINE``)."""
from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np
import pytest
from amaranth.back import verilog
from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from hwgen.rtl_templates import host_link as H
from hwgen.rtl_templates import uart as U

# the fake core: 6 beats of 16 bits in (12 bytes), 3 beats of 24 bits out (9 bytes)
IN_W, IN_BEATS, OUT_W, OUT_BEATS = 16, 6, 24, 3
IN_BYTES, OUT_BYTES = IN_W * IN_BEATS // 8, OUT_W * OUT_BEATS // 8
DIVISOR = 4


def out_fn(frame: bytes) -> bytes:
    """The fake core's function: output byte k is (x[k] ^ x[k + 3]) + 1."""
    return bytes(((frame[k] ^ frame[k + 3]) + 1) & 0xFF for k in range(OUT_BYTES))


class FakeCore(wiring.Component):
    """Takes a whole input frame (``s_axis_tready`` low while ``stall_in``), then sends
    :func:`out_fn` of it (a beat offered when ``stall_out`` is low, held until taken).
    ``bad_last``: an input beat's ``tlast`` was not where the frame ends."""

    def __init__(self):
        super().__init__({
            "s_axis_tdata": In(IN_W), "s_axis_tvalid": In(1), "s_axis_tready": Out(1),
            "s_axis_tlast": In(1),
            "m_axis_tdata": Out(OUT_W), "m_axis_tvalid": Out(1), "m_axis_tready": In(1),
            "m_axis_tlast": Out(1),
            "stall_in": In(1), "stall_out": In(1), "bad_last": Out(1)})

    def elaborate(self, platform):
        m = Module()
        frame = Signal(IN_W * IN_BEATS)
        obuf = Signal(OUT_W * OUT_BEATS)
        n = Signal(range(max(IN_BEATS, OUT_BEATS) + 1))
        ov = Signal()
        x = [frame[8 * k:8 * k + 8] for k in range(IN_BYTES)]
        fn = Cat(*[((x[k] ^ x[k + 3]) + 1)[:8] for k in range(OUT_BYTES)])
        m.d.comb += [self.m_axis_tdata.eq(obuf[:OUT_W]), self.m_axis_tvalid.eq(ov),
                     self.m_axis_tlast.eq(n == OUT_BEATS - 1)]
        with m.FSM():
            with m.State("IN"):
                m.d.comb += self.s_axis_tready.eq(~self.stall_in)
                with m.If(self.s_axis_tvalid & ~self.stall_in):
                    m.d.sync += [frame.eq(Cat(frame[IN_W:], self.s_axis_tdata)), n.eq(n + 1)]
                    with m.If(self.s_axis_tlast != (n == IN_BEATS - 1)):
                        m.d.sync += self.bad_last.eq(1)
                    with m.If(n == IN_BEATS - 1):
                        m.d.sync += n.eq(0)
                        m.next = "FN"
            with m.State("FN"):
                m.d.sync += obuf.eq(fn)
                m.next = "OUT"
            with m.State("OUT"):
                with m.If(~ov & ~self.stall_out):
                    m.d.sync += ov.eq(1)
                with m.If(ov & self.m_axis_tready):
                    m.d.sync += [ov.eq(0), obuf.eq(obuf >> OUT_W), n.eq(n + 1)]
                    with m.If(n == OUT_BEATS - 1):
                        m.d.sync += n.eq(0)
                        m.next = "IN"
        return m


class RxLine:
    """The host's receiver: one level per cycle in, bytes out (middle-of-bit sampling)."""

    def __init__(self, divisor: int):
        self.d, self.t, self.start = divisor, 0, None
        self.bits: list[int] = []
        self.data = bytearray()
        self.framing = 0

    def feed(self, level: int):
        if self.start is None:
            if level == 0:
                self.start = self.t
                self.bits = []
        else:
            k, r = divmod(self.t - self.start - self.d // 2, self.d)
            if r == 0 and k >= 0:
                self.bits.append(level)
                if k == 9:
                    if self.bits[0] == 0 and level == 1:
                        self.data.append(sum(b << i for i, b in enumerate(self.bits[1:9])))
                    else:
                        self.framing += 1
                    self.start = None
        self.t += 1


@dataclass
class Segment:
    """Bytes the host sends once ``wait`` reply bytes have arrived (None: ``wait_cycles``
    after the previous segment ended); ``bad_stop``: indices of bytes sent with a low stop
    bit (followed by one bit time of idle line)."""
    data: bytes
    wait: int | None = 0
    wait_cycles: int = 0
    bad_stop: tuple = ()
    line: np.ndarray = field(default=None, repr=False)

    def levels(self, divisor: int) -> np.ndarray:
        parts = []
        for k, byte in enumerate(self.data):
            bits = U.uart_bits(bytes([byte]), divisor)
            if k in self.bad_stop:
                bits[-divisor:] = 0
                bits = np.concatenate([bits, np.ones(divisor, np.uint8)])
            parts.append(bits)
        return np.concatenate(parts) if parts else np.zeros(0, np.uint8)


def run_link(segments: list[Segment], n_reply: int, *, loads: bool = False, stall=0.3,
             seed: int = 0, divisor: int = DIVISOR, rx_depth: int = H.RX_DEPTH,
             max_cycles: int | None = None):
    """Simulate the link and the fake core; the host sends the segments. Returns (reply
    bytes, load words seen on ``s_wload``, the link's ``error`` at the end, cycles)."""
    m = Module()
    m.submodules.link = link = H.HostLink(IN_W, IN_BEATS, OUT_W, OUT_BEATS, divisor, loads,
                                          rx_depth=rx_depth)
    m.submodules.core = core = FakeCore()
    for name in ("s_axis_tdata", "s_axis_tvalid", "s_axis_tlast", "m_axis_tready"):
        m.d.comb += getattr(core, name).eq(getattr(link, name))
    for name in ("s_axis_tready", "m_axis_tdata", "m_axis_tvalid", "m_axis_tlast"):
        m.d.comb += getattr(link, name).eq(getattr(core, name))
    if max_cycles is None:       # the line time of everything, three times over
        line_bytes = sum(len(s.data) for s in segments) + n_reply
        max_cycles = 3 * (10 * divisor * line_bytes + sum(s.wait_cycles for s in segments)
                          + 1000)
    rng = random.Random(seed)
    host = RxLine(divisor)
    words: list[int] = []
    state = {}

    async def bench(ctx):
        seg, line, pos, idle_since, cycle = 0, None, 0, 0, 0
        quiet = 0
        while cycle < max_cycles:
            if line is None and seg < len(segments):
                s = segments[seg]
                ready = (len(host.data) >= s.wait if s.wait is not None
                         else cycle - idle_since >= s.wait_cycles)
                if ready:
                    line, pos = s.levels(divisor), 0
            if line is not None:
                ctx.set(link.rx, int(line[pos]))
                pos += 1
                if pos == len(line):
                    line, seg, idle_since = None, seg + 1, cycle
            else:
                ctx.set(link.rx, 1)
            ctx.set(core.stall_in, rng.random() < stall)
            ctx.set(core.stall_out, rng.random() < stall)
            if loads:
                r = rng.random() >= stall
                ctx.set(link.s_wload_tready, r)
                if r and ctx.get(link.s_wload_tvalid):
                    words.append(ctx.get(link.s_wload_tdata))
            level = ctx.get(link.tx)
            host.feed(level)
            quiet = quiet + 1 if level and host.start is None else 0
            assert not ctx.get(core.bad_last)
            cycle += 1
            await ctx.tick()
            if seg == len(segments) and len(host.data) >= n_reply and quiet > 20 * divisor:
                break
        state["cycles"] = cycle
        state["error"] = ctx.get(link.error)
        state["busy"] = ctx.get(link.busy)

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert host.framing == 0
    return bytes(host.data), words, state


def _frame(seed: int) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, IN_BYTES, dtype=np.uint8).tobytes()


def _check(segments: list[Segment], *, loads: bool = False, **kw):
    """Run the segments (each waiting for all replies before it, unless it says otherwise)
    and compare the replies with the golden model."""
    sent = b"".join(s.data for s in segments)
    want = H.reference_replies(sent, IN_BYTES, out_fn, out_bytes=OUT_BYTES, loads=loads)
    got, words, state = run_link(segments, len(want), loads=loads, **kw)
    assert got == want, (got.hex(" "), want.hex(" "))
    assert not state["busy"]
    return got, words, state


def _in_order(requests: list[bytes], loads: bool = False) -> list[Segment]:
    """Each request sent after the replies to all before it."""
    segs, acc = [], b""
    for r in requests:
        wait = len(H.reference_replies(acc, IN_BYTES, out_fn, out_bytes=OUT_BYTES, loads=loads))
        segs.append(Segment(r, wait))
        acc += r
    return segs


# ============================================================================ protocol


def test_crc_and_framing_functions():
    assert H.crc16(b"123456789") == 0x29B1
    assert H.crc16(b"") == 0xFFFF
    r = H.encode_request("P")
    assert r == bytes([0xA5, 0x5A, 0x50, 0, 0, 0, 0]) + H.crc16(b"P\0\0\0\0").to_bytes(2,
                                                                                      "little")
    reply = H.encode_reply("O", b"\x01\x02\x03")
    assert H.decode_reply(reply + b"junk") == ("O", b"\x01\x02\x03", len(reply))
    with pytest.raises(H.LinkError, match="magic"):
        H.decode_reply(b"\xa5\x5a" + reply[2:])
    with pytest.raises(H.LinkError, match="CRC"):
        H.decode_reply(reply[:-1] + bytes([reply[-1] ^ 1]))
    with pytest.raises(H.LinkError, match="cut short"):
        H.decode_reply(reply[:-1])
    with pytest.raises(H.LinkError, match="cut short"):
        H.decode_reply(reply[:4])
    with pytest.raises(ValueError):
        H.encode_request("IW")


@pytest.mark.parametrize("width", [8, 16, 24, 64, 72, 200])
def test_frame_bytes_roundtrip(width: int):
    rng = np.random.default_rng(width)
    beats = [int.from_bytes(rng.integers(0, 256, width // 8, dtype=np.uint8).tobytes(),
                            "little") for _ in range(5)]
    arr = np.array(beats, dtype=object if width > 64 else np.uint64)
    data = H.frame_bytes(arr, width)
    assert data == b"".join(b.to_bytes(width // 8, "little") for b in beats)
    back = H.beats_from_bytes(data, width, beats=5)
    assert [int(v) for v in back] == beats
    if width > 8:
        with pytest.raises(ValueError):
            H.beats_from_bytes(data + b"\0", width)
    with pytest.raises(ValueError):
        H.frame_bytes([1 << width], width)


def test_reference_replies_model():
    f = _frame(1)
    good = H.encode_request("I", f)
    bad = bytearray(good)
    bad[10] ^= 0x40
    ping = H.encode_request("P", b"hello")
    words = H.encode_request("W", b"\x01\x02\x03\x04")
    got = H.reference_replies(b"\x00\xa5\x00\xa5" + good + bytes(bad) + ping + words
                              + H.encode_request("I", f[:5]) + H.encode_request("Q")
                              + good[:-1], IN_BYTES, out_fn, loads=True)
    want = (H.encode_reply("O", out_fn(f)) + H.encode_reply("E", bytes([H.ERR_CRC]))
            + H.encode_reply("A", H.ping_payload(IN_BYTES, OUT_BYTES, True))
            + H.encode_reply("A") + H.encode_reply("E", bytes([H.ERR_LENGTH]))
            + H.encode_reply("E", bytes([H.ERR_TYPE])))
    assert got == want
    # without a load port a 'W' is an unknown type
    assert H.reference_replies(words, IN_BYTES, out_fn) == H.encode_reply(
        "E", bytes([H.ERR_TYPE]))


# ============================================================================ hardware


@pytest.mark.sim
def test_good_frames_stalls():
    reqs = [H.encode_request("I", _frame(s)) for s in range(4)]
    _, _, state = _check(_in_order(reqs), stall=0.5, seed=3)
    assert not state["error"]


@pytest.mark.sim
def test_crc_error_then_good_frame():
    """A corrupted payload byte: the core took the frame, its output is discarded and the
    reply is 'E' 1; the next good frame is answered right; ``error`` until then."""
    bad = bytearray(H.encode_request("I", _frame(10)))
    bad[9] ^= 0x01
    _, _, state = _check(_in_order([bytes(bad)]), seed=4)
    assert state["error"]
    got, _, state = _check(_in_order([bytes(bad), H.encode_request("I", _frame(11))]), seed=5)
    assert got.startswith(H.encode_reply("E", bytes([H.ERR_CRC])))
    assert not state["error"]
    bad_crc = bytearray(H.encode_request("I", _frame(12)))
    bad_crc[-2] ^= 0x80                                   # the CRC itself
    _check(_in_order([bytes(bad_crc), H.encode_request("I", _frame(13))]), seed=6)


@pytest.mark.sim
def test_wrong_length_unknown_type_garbage():
    reqs = [b"\x00\xff\xa5\x11\x5a\xa5",                  # garbage (ends on a first magic byte)
            H.encode_request("I", _frame(20)),
            H.encode_request("I", _frame(21)[:7]),         # wrong length: skipped by count
            H.encode_request("I", _frame(22)),
            H.encode_request("Z", b"\xa5\x5a\x50"),        # unknown type, a magic inside
            H.encode_request("W", b"\x01\x02"),            # no load port: unknown type
            H.encode_request("I", _frame(23) + b"\x00"),   # one byte too many
            b"\x5a\x5a\xa5\x00",                           # garbage
            H.encode_request("P")]
    segs = _in_order(reqs)
    segs[1].wait = 0        # the garbage gets no reply
    got, _, _ = _check(segs, seed=7)
    assert got.count(H.encode_reply("E", bytes([H.ERR_LENGTH]))) == 2
    assert got.count(H.encode_reply("E", bytes([H.ERR_TYPE]))) == 2


@pytest.mark.sim
def test_back_to_back():
    """Each request the moment the previous reply's last byte arrived; and short requests
    sent together without waiting (the receive FIFO holds them)."""
    reqs = [H.encode_request("I", _frame(30 + k)) for k in range(3)] + [H.encode_request("P")]
    _check(_in_order(reqs), seed=8, stall=0.1)
    together = [Segment(H.encode_request("P") + H.encode_request("P", b"xy")),
                Segment(H.encode_request("I", _frame(40)) + H.encode_request("P"), 36)]
    _check(together, seed=9, stall=0)


@pytest.mark.sim
def test_ping_reports_the_design():
    got, _, _ = _check(_in_order([H.encode_request("P")]), loads=True)
    kind, payload, _ = H.decode_reply(got)
    assert kind == "A" and payload == H.ping_payload(IN_BYTES, OUT_BYTES, True)


@pytest.mark.sim
def test_weight_words_in_order():
    rng = np.random.default_rng(50)
    w1 = rng.integers(0, 1 << 16, 7).astype("<u2").tobytes()
    w2 = rng.integers(0, 1 << 16, 3).astype("<u2").tobytes()
    reqs = [H.encode_request("W", w1), H.encode_request("W", b""),
            H.encode_request("W", w2 + b"\x01"),             # odd: refused, nothing loaded
            H.encode_request("W", w2), H.encode_request("I", _frame(51))]
    _, words, state = _check(_in_order(reqs, loads=True), loads=True, seed=10, stall=0.5)
    assert words == list(np.frombuffer(w1 + w2, "<u2"))
    assert not state["error"]


@pytest.mark.sim
def test_line_error_and_recovery():
    """A payload byte with a low stop bit is dropped: the host's reply times out, it sends
    in_bytes + 8 zero bytes, gets 'E' 4, and the next frame is answered right."""
    f = _frame(60)
    req = H.encode_request("I", f)
    flush = bytes(IN_BYTES + 8)
    segs = [Segment(req, 0, bad_stop=(10,)), Segment(flush, None, wait_cycles=400),
            Segment(H.encode_request("I", _frame(61)), H.HEADER_BYTES + H.CRC_BYTES + 1)]
    want = (H.encode_reply("E", bytes([H.ERR_LINE]))
            + H.encode_reply("O", out_fn(_frame(61))))
    got, _, state = run_link(segs, len(want), seed=11)
    assert got == want
    assert not state["error"]


def test_verilog_and_cost():
    for loads in (False, True):
        text = verilog.convert(H.HostLink(IN_W, IN_BEATS, OUT_W, OUT_BEATS, 217, loads),
                               name="host_link")
        assert "module host_link" in text and ("s_wload_tdata" in text) == loads
    # a wide core's frame: 784 bytes in one beat, 10 beats of 8 bits out
    verilog.convert(H.HostLink(784 * 8, 1, 8, 10, 104), name="host_link")
    # Yosys 0.70's counts (LUT4, flip-flops) of three links
    measured = {(16, 6, 24, 3, 217, False): {"ecp5": (457, 277), "ice40": (455, 269)},
                (64, 98, 32, 1, 26, False): {"ecp5": (454, 332), "ice40": (463, 324)},
                (6272, 1, 8, 10, 104, True): {"ecp5": (471, 6545), "ice40": (473, 6537)}}
    for args, by_fam in measured.items():
        for fam, (lut4, ff) in by_fam.items():
            r = H.resources(H.LinkParams(*args), fam)
            assert abs(r.lut4 - lut4) <= 0.15 * lut4 and abs(r.ff - ff) <= 0.05 * ff, (args, r)
            assert r.dsp == 0 and (r.dram, r.bram) == ((2, 0) if fam == "ecp5" else (0, 1))
    c = H.cost(H.LinkParams(8, 10, 8, 1, 10))
    assert c.cycles == (18 + 10 + 1) * 100
    with pytest.raises(ValueError):
        H.HostLink(12, 1, 8, 1, 10)
