"""The host link: a byte protocol over the board's USB-serial UART that sends an input frame
to the compiled core and returns its output frame.

The frame protocol
==================

Everything is little-endian and byte-oriented; the UART is 8N1 (``rtl_templates/uart.py``)
at the board's baud rate. The host sends a *request*, the board answers with exactly one
*reply*.

Request::

    0xA5 0x5A | type (1) | length (4) | payload (length bytes) | crc (2)

Reply::

    0x5A 0xA5 | type (1) | length (4) | payload (length bytes) | crc (2)

``length`` is the payload's byte count (unsigned 32 bits); ``crc`` is CRC-16/CCITT-FALSE
(polynomial 0x1021, initial value 0xFFFF, no reflection, no final XOR; ``crc16(b"123456789")
== 0x29B1``) over *type, length and payload* (not the magic), low byte first.

Request types:

``'I'`` (0x49), an input frame
    The payload is exactly the core's input frame: ``in_beats`` beats of ``in_width`` bits
    (a multiple of 8), each beat's ``tdata`` as ``in_width / 8`` bytes, least significant
    byte first, beat after beat (:func:`frame_bytes`). Its length must be ``in_beats ·
    in_width / 8``. The reply is ``'O'`` (0x4F): the core's output frame, ``out_beats`` beats
    of ``out_width`` bits in the same layout (:func:`beats_from_bytes`).
``'W'`` (0x57), weight-load words (only a design with memories loaded after reset, see
    ``rtl_templates/spram.py``)
    The payload is 16-bit load words, two bytes each (low byte first), any whole number of
    them; they go to the core's ``s_wload`` port in order. The reply is ``'A'`` (0x41) with
    an empty payload once the last word is taken.
``'P'`` (0x50), ping
    Any payload (ignored). The reply is ``'A'`` with 9 bytes: the input frame's byte count
    (4), the output frame's byte count (4) and flags (1; bit 0: the design has a weight-load
    port) — so a host can check it talks to the design it expects.

Errors. A refused request is answered by ``'E'`` (0x45) with one byte, the error code:

===  ==============  ==============================================================
1    ``ERR_CRC``     the request's CRC does not match
2    ``ERR_LENGTH``  an ``'I'`` whose length is not the input frame's, or an odd
                     ``'W'`` length
3    ``ERR_TYPE``    an unknown type (``'W'`` on a design without a load port)
4    ``ERR_LINE``    the UART lost a byte of the request (a framing error or an
                     overrun)
===  ==============  ==============================================================

* Hunting: the link looks for the magic byte by byte; bytes before a magic (line noise,
  a partial request) are skipped without a reply.
* The header (type, length) is checked as soon as it has arrived. A request refused there
  (codes 2 and 3) feeds nothing to the core: its ``length`` payload bytes and 2 CRC bytes are
  skipped by count, then the ``'E'`` reply is sent.
* An accepted request's payload streams into the core as it arrives (a frame is not
  buffered: it may be far larger than the link's memory), so its CRC is known only after the
  core took the whole frame. Bad CRC (or a lost byte) on an ``'I'``: the core still computes
  the frame, the link discards that output frame and replies ``'E'`` instead of ``'O'``; the
  next request starts from a clean core. On a ``'W'``: the words already went to the load
  port, so after an ``'E'`` the design must be reset before the weights are loaded again.
* The link holds the core's output (``m_axis_tready`` low) until the request's CRC has
  been checked. A core must therefore be able to take its whole input frame while its
  output waits — true of a core whose output needs the whole input (a classifier, anything
  ending in a dense layer or a global pool); a core that streams its output while its input
  still arrives needs output buffering of its own in front of the link.
* One request at a time: the host sends a request, then waits for its reply before it
  sends the next (UART has no flow control). The link takes the next request immediately
  after the last byte of a reply; bytes that arrive while it is still busy wait in a small
  receive FIFO (``rx_depth`` bytes), beyond that they are lost (an ``ERR_LINE`` reply).
* Recovery: if a reply does not come (a byte was lost on the line, so the link still waits
  for the rest of a request), the host sends ``in_bytes + 8`` zero bytes, reads and ignores
  whatever reply comes, and sends its request again. Zero bytes complete any pending
  request (a frame padded with zeros; its reply, an ``'E'``, is discarded) and are then
  skipped while the link hunts for a magic.

The faces of this file: :class:`HostLink`, the hardware between the UART pins and the core's
AXI4-Stream ports; the protocol in pure Python for the host (``hwgen run``) and the tests —
:func:`crc16`, :func:`encode_request`, :func:`encode_reply`, :func:`decode_reply`,
:func:`frame_bytes`, :func:`beats_from_bytes` and :func:`reference_replies` (the replies the
link gives to a byte string of requests: the golden model); and the cost,
:func:`resources` / :func:`cost`.
"""
from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hwgen.errors import HwgenError
from hwgen.rtl_templates import resources as res
from hwgen.rtl_templates import uart
from hwgen.rtl_templates.cost import Cost
from hwgen.rtl_templates.memory import BufferedFIFO

__all__ = ["ACK", "CRC_BYTES", "ERROR", "ERR_CRC", "ERR_LENGTH", "ERR_LINE", "ERR_TYPE",
           "HEADER_BYTES", "INPUT", "OUTPUT", "PING", "PING_BYTES", "REPLY_MAGIC",
           "REQUEST_MAGIC", "RESOURCE_FIT", "RX_DEPTH", "WEIGHTS", "HostLink", "LinkError",
           "LinkParams", "beats_from_bytes", "cost", "crc16", "decode_reply", "encode_reply",
           "encode_request", "frame_bytes", "ping_payload", "reference_replies",
           "resource_parts", "resources"]

REQUEST_MAGIC = b"\xa5\x5a"
REPLY_MAGIC = b"\x5a\xa5"
#: magic, type, length before the payload; the CRC after it
HEADER_BYTES = 7
CRC_BYTES = 2
#: request types
INPUT, WEIGHTS, PING = b"I", b"W", b"P"
#: reply types
OUTPUT, ACK, ERROR = b"O", b"A", b"E"
#: error codes (the payload of an 'E' reply)
ERR_CRC = 1
ERR_LENGTH = 2
ERR_TYPE = 3
ERR_LINE = 4
#: the ping reply's payload length
PING_BYTES = 9
#: default receive FIFO depth (bytes)
RX_DEPTH = 16


class LinkError(HwgenError):
    """A reply that is not one: bad magic, bad CRC, cut short."""


# ============================================================================ golden / host


def crc16(data: bytes, crc: int = 0xFFFF) -> int:
    """CRC-16/CCITT-FALSE of ``data`` (polynomial 0x1021, MSB first, initial 0xFFFF);
    ``crc``: the value so far, to continue a computation."""
    for b in bytes(data):
        crc ^= b << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) & 0xFFFF if crc & 0x8000 else (crc << 1) & 0xFFFF
    return crc


def _kind(kind) -> bytes:
    k = kind.encode() if isinstance(kind, str) else bytes([kind]) if isinstance(kind, int) \
        else bytes(kind)
    if len(k) != 1:
        raise ValueError(f"a request or reply type is one byte, not {kind!r}")
    return k


def _frame(magic: bytes, kind, payload: bytes) -> bytes:
    body = _kind(kind) + struct.pack("<I", len(payload)) + bytes(payload)
    return magic + body + struct.pack("<H", crc16(body))


def encode_request(kind, payload: bytes = b"") -> bytes:
    """A request: ``kind`` ('I', 'W', 'P', or any byte) and its payload."""
    return _frame(REQUEST_MAGIC, kind, payload)


def encode_reply(kind, payload: bytes = b"") -> bytes:
    """A reply as the link sends it."""
    return _frame(REPLY_MAGIC, kind, payload)


def decode_reply(buf: bytes) -> tuple[str, bytes, int]:
    """(type as a one-character string, payload, bytes consumed) of the reply at the start
    of ``buf``; :class:`LinkError` if it does not start with the reply magic, is cut short or
    its CRC does not match."""
    buf = bytes(buf)
    if len(buf) < HEADER_BYTES:
        raise LinkError(f"reply cut short: {len(buf)} bytes, a header is {HEADER_BYTES}")
    if buf[:2] != REPLY_MAGIC:
        raise LinkError(f"reply does not start with the magic 5a a5 (got {buf[:2].hex(' ')})")
    (n,) = struct.unpack_from("<I", buf, 3)
    end = HEADER_BYTES + n + CRC_BYTES
    if len(buf) < end:
        raise LinkError(f"reply cut short: {len(buf)} of {end} bytes "
                        f"(type {buf[2:3]!r}, payload {n} bytes)")
    (crc,) = struct.unpack_from("<H", buf, end - CRC_BYTES)
    want = crc16(buf[2:end - CRC_BYTES])
    if crc != want:
        raise LinkError(f"reply CRC mismatch: received {crc:#06x}, computed {want:#06x}")
    return chr(buf[2]), buf[HEADER_BYTES:end - CRC_BYTES], end


def _tdata_bytes(width: int) -> int:
    if width <= 0 or width % 8:
        raise ValueError(f"a tdata width is a positive multiple of 8 bits, not {width}")
    return width // 8


def frame_bytes(tdata_beats, width: int) -> bytes:
    """The bytes of a frame of ``tdata`` beats (unsigned integers of ``width`` bits, a
    multiple of 8): each beat's bytes least significant first, beat after beat."""
    nb = _tdata_bytes(width)
    v = np.asarray(tdata_beats).reshape(-1)
    if width <= 64 and v.dtype.kind in "ui":
        u = v.astype(np.uint64)
        if v.dtype.kind == "i" and (v < 0).any() or width < 64 and (u >> np.uint64(width)).any():
            raise ValueError(f"a tdata beat does not fit {width} unsigned bits")
        return u.astype("<u8").view(np.uint8).reshape(-1, 8)[:, :nb].tobytes()
    out = bytearray()
    for x in v:
        x = int(x)
        if x < 0 or x >> width:
            raise ValueError(f"a tdata beat does not fit {width} unsigned bits: {x}")
        out += x.to_bytes(nb, "little")
    return bytes(out)


def beats_from_bytes(data: bytes, width: int, beats: int | None = None) -> np.ndarray:
    """The ``tdata`` beats of a frame's bytes (:func:`frame_bytes` inverted): uint64 for
    widths up to 64 bits, Python integers (dtype object) beyond. ``beats``: the expected
    count (a ValueError if the bytes hold another)."""
    nb = _tdata_bytes(width)
    data = bytes(data)
    if len(data) % nb or (beats is not None and len(data) != beats * nb):
        want = f"{beats} beats of {nb} bytes" if beats is not None else f"a multiple of {nb}"
        raise ValueError(f"a frame of {len(data)} bytes is not {want}")
    if width <= 64:
        b = np.frombuffer(data, np.uint8).reshape(-1, nb)
        pad = np.zeros((len(b), 8), np.uint8)
        pad[:, :nb] = b
        return pad.view("<u8").reshape(-1).astype(np.uint64)
    return np.array([int.from_bytes(data[k:k + nb], "little") for k in range(0, len(data), nb)],
                    dtype=object)


def ping_payload(in_bytes: int, out_bytes: int, loads: bool) -> bytes:
    """The payload of the reply to a ping."""
    return struct.pack("<IIB", in_bytes, out_bytes, int(bool(loads)))


def reference_replies(requests: bytes, in_bytes: int, out_fn: Callable[[bytes], bytes], *,
                      out_bytes: int | None = None, loads: bool = False) -> bytes:
    """The bytes :class:`HostLink` sends back for the byte string ``requests`` (a clean line:
    no UART errors), for a core whose input frame is ``in_bytes`` bytes and whose output
    frame for an input frame's bytes is ``out_fn(frame)``. ``out_bytes``: the output frame's
    byte count (for the ping reply; default: that of ``out_fn`` of a frame of zeros);
    ``loads``: the design takes 'W' requests. A request cut off at the end of ``requests``
    gets no reply."""
    if out_bytes is None:
        out_bytes = len(out_fn(bytes(in_bytes)))
    data = bytes(requests)
    out = bytearray()
    n, pos, hunt1 = len(data), 0, False
    while pos < n:
        b = data[pos]
        pos += 1
        if not hunt1:                       # hunting for the first magic byte
            hunt1 = b == REQUEST_MAGIC[0]
            continue
        if b == REQUEST_MAGIC[0]:           # A5 A5: still after the first byte
            continue
        hunt1 = False
        if b != REQUEST_MAGIC[1]:
            continue
        if pos + 5 > n:
            break
        kind = data[pos:pos + 1]
        (length,) = struct.unpack_from("<I", data, pos + 1)
        header = data[pos:pos + 5]
        pos += 5
        code = 0
        if kind == INPUT:
            code = 0 if length == in_bytes else ERR_LENGTH
        elif kind == WEIGHTS and loads:
            code = 0 if length % 2 == 0 else ERR_LENGTH
        elif kind != PING:
            code = ERR_TYPE
        end = pos + length + CRC_BYTES
        if end > n:
            break
        payload = data[pos:pos + length]
        pos = end
        if code:
            out += encode_reply(ERROR, bytes([code]))
            continue
        (crc,) = struct.unpack_from("<H", data, end - CRC_BYTES)
        if crc != crc16(header + payload):
            out += encode_reply(ERROR, bytes([ERR_CRC]))
        elif kind == INPUT:
            frame = bytes(out_fn(payload))
            if len(frame) != out_bytes:
                raise ValueError(f"out_fn returned {len(frame)} bytes, the output frame is "
                                 f"{out_bytes}")
            out += encode_reply(OUTPUT, frame)
        elif kind == WEIGHTS:
            out += encode_reply(ACK)
        else:
            out += encode_reply(ACK, ping_payload(in_bytes, out_bytes, loads))
    return bytes(out)


# ============================================================================ hardware


def _crc_taps() -> list[tuple[list[int], list[int]]]:
    """Per bit of the CRC after one byte: the bits of the CRC before and of the byte it is
    the XOR of (the update is linear)."""
    taps = []
    for k in range(16):
        taps.append(([i for i in range(16) if crc16(b"\0", 1 << i) >> k & 1],
                     [j for j in range(8) if crc16(bytes([1 << j]), 0) >> k & 1]))
    return taps


_CRC_TAPS = _crc_taps()


def _crc_next(crc, byte):
    """CRC-16/CCITT-FALSE after one more byte (a 16-bit value and an 8-bit one): one XOR of
    a few bits per bit."""
    bits = []
    for ci, bj in _CRC_TAPS:
        terms = [crc[i] for i in ci] + [byte[j] for j in bj]
        x = terms[0]
        for t in terms[1:]:
            x = x ^ t
        bits.append(x)
    return Cat(*bits)


class HostLink(wiring.Component):
    """The protocol of this module's documentation between the UART pins and the core's
    AXI4-Stream ports.

    Parameters: the core's ``in_width`` (bits of ``s_axis_tdata``, a multiple of 8),
    ``in_beats`` (beats per input frame), ``out_width``, ``out_beats``; ``divisor`` (clock
    cycles per UART bit, at least 4); ``loads`` (the core has the weight-load port
    ``s_wload``); ``rx_depth`` (bytes of the receive FIFO).

    Ports (Out: driven by the link): ``rx`` In(1), ``tx`` Out(1) (the UART pins, idle high);
    towards the core's input ``s_axis_tdata`` Out(in_width), ``s_axis_tvalid`` Out(1),
    ``s_axis_tready`` In(1), ``s_axis_tlast`` Out(1) (the frame's last beat); from the core's
    output ``m_axis_tdata`` In(out_width), ``m_axis_tvalid`` In(1), ``m_axis_tready``
    Out(1), ``m_axis_tlast`` In(1) (unused: a frame is ``out_beats`` beats); with ``loads``
    ``s_wload_tdata`` Out(16), ``s_wload_tvalid`` Out(1), ``s_wload_tready`` In(1); status
    ``busy`` Out(1) (a request in progress, from its type byte to the end of its reply) and
    ``error`` Out(1) (the last reply was an 'E', until the next good one)."""

    def __init__(self, in_width: int, in_beats: int, out_width: int, out_beats: int,
                 divisor: int, loads: bool = False, *, rx_depth: int = RX_DEPTH):
        self.p = LinkParams(in_width, in_beats, out_width, out_beats, divisor, loads, rx_depth)
        self.in_width, self.in_beats = in_width, in_beats
        self.out_width, self.out_beats = out_width, out_beats
        self.divisor, self.loads, self.rx_depth = divisor, bool(loads), rx_depth
        super().__init__({
            "rx": In(1, init=1), "tx": Out(1, init=1),
            "s_axis_tdata": Out(in_width), "s_axis_tvalid": Out(1), "s_axis_tready": In(1),
            "s_axis_tlast": Out(1),
            "m_axis_tdata": In(out_width), "m_axis_tvalid": In(1), "m_axis_tready": Out(1),
            "m_axis_tlast": In(1),
            "busy": Out(1), "error": Out(1),
        } | ({"s_wload_tdata": Out(16), "s_wload_tvalid": Out(1), "s_wload_tready": In(1)}
             if self.loads else {}))

    def elaborate(self, platform):
        # Timing: every wide enable and every state decision comes from registers, one or
        # two LUTs deep. A byte is taken from a holding register (``hb``, refilled from the
        # receive FIFO while empty: the FIFO's read enable is a register); what a taken
        # byte does to the wide registers (the CRC, the input beat) happens in the next
        # cycle, enabled by a one-bit register, while ``hb`` still holds the byte. The
        # length is counted down in a 33-bit register whose top bit says "no bytes left";
        # the length and CRC checks are registered flags, decided on a cycle later. The
        # reply's bytes go through a register (``tb``) and the reply CRC takes each byte
        # as the transmitter takes it. Data registers loaded before every use have no
        # reset (Yosys would OR the reset into their clock enables).
        m = Module()
        p = self.p
        nbi, nbo = p.in_width // 8, p.out_width // 8
        m.submodules.urx = urx = uart.UartRx(p.divisor)
        m.submodules.utx = utx = uart.UartTx(p.divisor)
        m.submodules.rxq = rxq = BufferedFIFO(width=8, depth=p.rx_depth)
        m.d.comb += [urx.rx.eq(self.rx), self.tx.eq(utx.tx),
                     rxq.w_data.eq(urx.o.payload), rxq.w_en.eq(urx.o.valid),
                     urx.o.ready.eq(rxq.w_rdy)]

        # the request side: bytes from the FIFO through the holding register
        b = Signal(8, reset_less=True)      # the holding register
        hv = Signal()                       # it holds a byte
        take = Signal()                     # the state takes the held byte, if there is one
        got = hv & take
        m.d.comb += rxq.r_en.eq(~hv)
        # the held byte's class, decoded as it is loaded
        b_m0, b_m1, b_i, b_w, b_p = (Signal(name=n) for n in ("b_m0", "b_m1", "b_i", "b_w",
                                                                "b_p"))
        with m.If(~hv & rxq.r_rdy):
            r = rxq.r_data
            m.d.sync += [b.eq(r), hv.eq(1), b_m0.eq(r == REQUEST_MAGIC[0]),
                         b_m1.eq(r == REQUEST_MAGIC[1]), b_i.eq(r == ord(INPUT)),
                         b_w.eq(r == ord(WEIGHTS)), b_p.eq(r == ord(PING))]
        with m.If(got):
            m.d.sync += hv.eq(0)

        is_i, is_w, is_p = Signal(), Signal(), Signal()     # the request's type
        feed_i, feed_w = Signal(), Signal()                 # its payload goes to the core
        refused = Signal()                  # refused at the header: skipped, then 'E' code
        count = Signal(33, reset_less=True) # the length; then the bytes left - 1, down
        done = count[32]                    # no payload bytes left
        lo_zero = Signal()                  # count[:16] == 0: the decrement borrows

        def count_down():                   # count - 1 as two 16/17-bit halves
            m.d.sync += [count[:16].eq(count[:16] - 1), lo_zero.eq(count[:16] == 1)]
            with m.If(lo_zero):
                m.d.sync += count[16:].eq(count[16:] - 1)
        nlen = Signal(2, reset_less=True)
        len_ok = Signal()
        odd = Signal()
        rcrc = Signal(16, init=0xFFFF, reset_less=True)
        crc_lo_ok = Signal()
        crc_ok = Signal()
        code = Signal(3)
        line_err = Signal()
        crc_upd = Signal()                  # b (taken last cycle) goes into the CRC
        shift_i = Signal()                  # b (taken last cycle) goes into the input beat
        shift_last = Signal()               # ... and completes it
        with m.If(crc_upd):
            m.d.sync += rcrc.eq(_crc_next(rcrc, b))
        m.d.sync += [crc_upd.eq(0), shift_i.eq(0)]

        # the core's input: a beat assembled from bytes, held until taken
        ibeat = Signal(p.in_width, reset_less=True)
        ibyte = Signal(range(max(nbi, 2)), reset_less=True)
        ivalid = Signal()
        ilast = Signal()
        ibeats = Signal(range(max(p.in_beats, 2)))
        m.d.comb += [self.s_axis_tdata.eq(ibeat), self.s_axis_tvalid.eq(ivalid),
                     self.s_axis_tlast.eq(ilast)]
        with m.If(shift_i):
            m.d.sync += ibeat.eq(Cat(ibeat[8:], b))
            with m.If(shift_last):
                m.d.sync += [ivalid.eq(1), ilast.eq(ibeats == p.in_beats - 1)]
        with m.If(ivalid & self.s_axis_tready):
            m.d.sync += [ivalid.eq(0), ibeats.eq(Mux(ilast, 0, ibeats + 1))]
        iblock = ivalid | (shift_i & shift_last)    # no room for another byte
        word = Signal(16, reset_less=True)
        whigh = Signal()
        wvalid = Signal()
        if p.loads:
            m.d.comb += [self.s_wload_tdata.eq(word), self.s_wload_tvalid.eq(wvalid)]
            with m.If(wvalid & self.s_wload_tready):
                m.d.sync += wvalid.eq(0)

        # the reply side: bytes to the transmitter through a register
        R_O, R_E, R_AP, R_AW = range(4)
        rkind = Signal(2)
        tb = Signal(8, reset_less=True)
        tv = Signal()
        tc = Signal()                       # tb counts in the reply's CRC
        m.d.comb += [utx.i.payload.eq(tb), utx.i.valid.eq(tv)]
        tcrc = Signal(16, reset_less=True)
        with m.If(tv & utx.i.ready):
            m.d.sync += tv.eq(0)
            with m.If(tc):
                m.d.sync += tcrc.eq(_crc_next(tcrc, tb))

        def emit(crc=True):                 # tb (loaded while tv is low) goes out
            m.d.sync += [tv.eq(1), tc.eq(crc)]

        nrlen = Signal(2, reset_less=True)
        left = Signal(range(max(p.out_bytes, PING_BYTES) + 1), reset_less=True)
        left_zero = Signal()
        left_one = Signal()                 # left == 1, a register (no compare on the step)
        obuf = Signal(p.out_width, reset_less=True)
        ocnt = Signal(range(max(nbo, 2)))
        ohave = Signal()                    # obuf holds bytes of a beat
        drained = Signal(range(max(p.out_beats, 2)), reset_less=True)
        rchar = Mux(rkind == R_O, ord(OUTPUT), Mux(rkind == R_E, ord(ERROR), ord(ACK)))
        rlen = Signal(32)
        with m.Switch(rkind):
            for k, n in ((R_O, p.out_bytes), (R_E, 1), (R_AP, PING_BYTES), (R_AW, 0)):
                with m.Case(k):
                    m.d.comb += rlen.eq(n)
        info = ping_payload(p.in_bytes, p.out_bytes, p.loads)
        error = Signal()
        m.d.comb += self.error.eq(error)

        # a line error during a request (cleared when a request starts)
        with m.If(urx.frame_err | urx.overrun):
            m.d.sync += line_err.eq(1)

        # the states, one-hot: one flip-flop each (Yosys does not recode a state register
        # with an initial value, and a binary one costs two LUT levels per state test)
        st = {n: Signal(init=n == "HUNT0", name="st_" + n.lower()) for n in _STATES}

        def goto(frm, to):
            m.d.sync += [st[frm].eq(0), st[to].eq(1)]

        r_o, r_e, r_ap = Signal(), Signal(), Signal()   # rkind, one-hot
        pay_o = Signal()                    # in R_PAY, an 'O' reply, bytes left
        with m.If(pay_o & ~ohave):
            m.d.comb += self.m_axis_tready.eq(1)

        def reply(frm, k):
            m.d.sync += [rkind.eq(k), error.eq(k == R_E), r_o.eq(k == R_O), r_e.eq(k == R_E),
                         r_ap.eq(k == R_AP)]
            goto(frm, "R_MAGIC0")

        # the reply's next byte: an OR of the states' bytes (one state at a time), not a
        # chain of multiplexers
        ping_byte = Signal(8)
        with m.Switch(left[:4]):
            for k in range(1, PING_BYTES + 1):
                with m.Case(k):
                    m.d.comb += ping_byte.eq(info[PING_BYTES - k])
        srcs = [(st["R_MAGIC0"], REPLY_MAGIC[0]), (st["R_MAGIC1"], REPLY_MAGIC[1]),
                (st["R_TYPE"], rchar), (st["R_LEN"], rlen.word_select(nrlen, 8)),
                (st["R_PAY"] & r_o, obuf[:8]), (st["R_PAY"] & r_e, code),
                (st["R_PAY"] & r_ap, ping_byte),
                (st["R_CRC0"], tcrc[:8]), (st["R_CRC1"], tcrc[8:])]
        tb_next = Const(0, 8)
        for sel, v in srcs:
            tb_next = tb_next | Mux(sel, v, 0)
        with m.If(~tv):
            m.d.sync += tb.eq(tb_next)

        # the states that take every byte: a register of its own. PAYLOAD takes a byte
        # while bytes are left and the core has room, a condition registered a cycle late:
        # the cycle after a byte is taken the holding register is empty, so a condition
        # that a taken byte turns off is off before the next byte can be taken, and one
        # the core turns on (a beat or word taken) only waits a cycle longer
        take_all = Signal(init=1)
        take_pay = Signal()
        m.d.sync += take_pay.eq(st["PAYLOAD"] & ~done & ~(feed_i & iblock) & ~(feed_w & wvalid))
        m.d.comb += take.eq(take_all | take_pay)

        with m.If(st["HUNT0"]):
            m.d.sync += rcrc.eq(0xFFFF)
            with m.If(got & b_m0):
                m.d.sync += line_err.eq(urx.frame_err | urx.overrun)
                goto("HUNT0", "HUNT1")
        with m.If(st["HUNT1"] & got):
            with m.If(b_m1):
                goto("HUNT1", "TYPE")
            with m.Elif(~b_m0):
                goto("HUNT1", "HUNT0")
        with m.If(st["TYPE"] & got):
            m.d.sync += [is_i.eq(b_i), is_p.eq(b_p), is_w.eq(b_w if p.loads else 0),
                         crc_upd.eq(1), nlen.eq(0)]
            goto("TYPE", "LEN")
        with m.If(st["LEN"] & got):
            m.d.sync += [count.eq(Cat(count[8:32], b)), crc_upd.eq(1), nlen.eq(nlen + 1)]
            with m.If(nlen == 3):
                m.d.sync += take_all.eq(0)
                goto("LEN", "CHECK")
        with m.If(st["CHECK"]):
            m.d.sync += [len_ok.eq(count[:32] == p.in_bytes), odd.eq(count[0]),
                         lo_zero.eq(count[:16] == 0), ibyte.eq(0), whigh.eq(0)]
            goto("CHECK", "DECIDE")
        with m.If(st["DECIDE"]):
            count_down()
            m.d.sync += [feed_i.eq(is_i & len_ok), feed_w.eq(is_w & ~odd),
                         refused.eq((is_i & ~len_ok) | (is_w & odd) | ~(is_i | is_w | is_p)),
                         code.eq(Mux(is_i | is_w, ERR_LENGTH, ERR_TYPE))]
            goto("DECIDE", "PAYLOAD")
        with m.If(st["PAYLOAD"]):
            with m.If(done):
                m.d.sync += take_all.eq(1)
                goto("PAYLOAD", "CRC0")
            with m.If(got):
                m.d.sync += crc_upd.eq(1)
                count_down()
                with m.If(feed_i):
                    m.d.sync += [shift_i.eq(1), shift_last.eq(ibyte == nbi - 1),
                                 ibyte.eq(Mux(ibyte == nbi - 1, 0, ibyte + 1))]
                with m.If(feed_w):
                    m.d.sync += [word.eq(Cat(word[8:], b)), whigh.eq(~whigh)]
                    with m.If(whigh):
                        m.d.sync += wvalid.eq(1)
        with m.If(st["CRC0"] & got):         # the CRC took the last byte before this one
            m.d.sync += crc_lo_ok.eq(b == rcrc[:8])
            goto("CRC0", "CRC1")
        with m.If(st["CRC1"] & got):
            m.d.sync += [crc_ok.eq(crc_lo_ok & (b == rcrc[8:])), take_all.eq(0)]
            goto("CRC1", "VERDICT")
        with m.If(st["VERDICT"]):
            m.d.sync += drained.eq(0)
            bad = line_err | ~crc_ok
            with m.If(refused):
                reply("VERDICT", R_E)
            with m.Else():
                m.d.sync += code.eq(Mux(line_err, ERR_LINE, Mux(crc_ok, 0, ERR_CRC)))
                with m.If(feed_i):
                    with m.If(~bad):
                        reply("VERDICT", R_O)
                    with m.Else():
                        goto("VERDICT", "DRAIN")
                with m.Elif(~wvalid):       # a 'W' request's last word taken
                    with m.If(~bad):
                        reply("VERDICT", Mux(is_p, R_AP, R_AW))
                    with m.Else():
                        reply("VERDICT", R_E)
        # a bad 'I': its output frame discarded. The core's valid only counts and marks the
        # last beat (``drain_done``); the reply starts a cycle later from that register, so
        # the valid (from across the die) does not reach the reply's state logic
        drain_done = Signal()
        with m.If(st["DRAIN"]):
            m.d.comb += self.m_axis_tready.eq(~drain_done)
            with m.If(self.m_axis_tvalid & ~drain_done):
                m.d.sync += [drained.eq(drained + 1),
                             drain_done.eq(drained == p.out_beats - 1)]
            with m.If(drain_done):
                m.d.sync += drain_done.eq(0)
                reply("DRAIN", R_E)

        with m.If(st["R_MAGIC0"]):
            m.d.sync += [tcrc.eq(0xFFFF), nrlen.eq(0), ocnt.eq(0), ohave.eq(0)]
            with m.If(~tv):
                emit(False)
                goto("R_MAGIC0", "R_MAGIC1")
        with m.If(st["R_MAGIC1"] & ~tv):
            emit(False)
            goto("R_MAGIC1", "R_TYPE")
        with m.If(st["R_TYPE"] & ~tv):
            emit()
            m.d.sync += [left.eq(rlen), left_zero.eq(rlen == 0), left_one.eq(rlen == 1)]
            goto("R_TYPE", "R_LEN")
        with m.If(st["R_LEN"] & ~tv):
            emit()
            m.d.sync += nrlen.eq(nrlen + 1)
            with m.If(nrlen == 3):
                m.d.sync += pay_o.eq(r_o & ~left_zero)
                goto("R_LEN", "R_PAY")
        with m.If(st["R_PAY"]):
            with m.If(left_zero):
                goto("R_PAY", "R_CRC0")
            with m.Else():
                step = Signal()             # a payload byte into tb
                with m.If(r_o):
                    m.d.comb += step.eq(ohave & ~tv)
                    with m.If(step & left_one):
                        m.d.sync += pay_o.eq(0)
                    with m.If(step):
                        emit()
                with m.Elif(r_e):
                    m.d.comb += step.eq(~tv)
                    with m.If(step):
                        emit()
                with m.Elif(r_ap):
                    m.d.comb += step.eq(~tv)
                    with m.If(step):
                        emit()
                with m.If(step):
                    m.d.sync += [left.eq(left - 1), left_zero.eq(left_one),
                                 left_one.eq(left == 2)]
        # the output beat's bytes: ``pay_o`` alone says R_PAY, an 'O' reply and bytes left,
        # so the load and the step are ANDs of three flip-flops each, not the states' chain
        with m.If(pay_o & ~ohave & self.m_axis_tvalid):
            m.d.sync += [obuf.eq(self.m_axis_tdata), ocnt.eq(nbo - 1), ohave.eq(1)]
        with m.Elif(pay_o & ohave & ~tv):
            m.d.sync += [obuf.eq(obuf >> 8), ocnt.eq(ocnt - 1), ohave.eq(ocnt != 0)]
        with m.If(st["R_CRC0"] & ~tv):       # tv low: the CRC took the last payload byte
            emit(False)
            goto("R_CRC0", "R_CRC1")
        with m.If(st["R_CRC1"] & ~tv):
            emit(False)
            goto("R_CRC1", "R_END")
        with m.If(st["R_END"] & ~tv):
            m.d.sync += take_all.eq(1)
            goto("R_END", "HUNT0")
        m.d.comb += self.busy.eq(~st["HUNT0"] & ~st["HUNT1"])
        return m


#: the link's states (one flip-flop each): the request's, then the reply's
_STATES = ("HUNT0", "HUNT1", "TYPE", "LEN", "CHECK", "DECIDE", "PAYLOAD", "CRC0", "CRC1",
           "VERDICT", "DRAIN", "R_MAGIC0", "R_MAGIC1", "R_TYPE", "R_LEN", "R_PAY", "R_CRC0",
           "R_CRC1", "R_END")


# ============================================================================ cost


@dataclass(frozen=True)
class LinkParams:
    in_width: int            # bits of the core's s_axis_tdata (a multiple of 8)
    in_beats: int            # beats per input frame
    out_width: int           # bits of m_axis_tdata
    out_beats: int           # beats per output frame
    divisor: int             # clock cycles per UART bit
    loads: bool = False      # a weight-load port
    rx_depth: int = RX_DEPTH

    def __post_init__(self):
        for name in ("in_width", "out_width"):
            _tdata_bytes(getattr(self, name))
        if self.in_beats < 1 or self.out_beats < 1:
            raise ValueError("a frame has at least one beat")
        if self.rx_depth < 2:
            raise ValueError(f"the receive FIFO needs at least 2 bytes (rx_depth "
                             f"{self.rx_depth})")
        uart._check_divisor(self.divisor)

    @property
    def in_bytes(self) -> int:
        return self.in_beats * self.in_width // 8

    @property
    def out_bytes(self) -> int:
        return self.out_beats * self.out_width // 8


def resource_parts(p: LinkParams, family: str) -> dict[str, res.Resources]:
    """The structural parts: the UART, the receive FIFO and the holding register after it
    (with its byte's class flags), the two CRC registers and their byte update (16 XOR
    functions of up to 8 inputs: about two LUT4 per bit) and check flags, the 33-bit length
    counter (two halves and a borrow flag), the input beat and output beat shift registers,
    the reply byte register and its multiplexer, the counters, and the one-hot states and
    flags."""
    lw = max(p.out_bytes, PING_BYTES).bit_length()
    parts = dict(uart.resource_parts(uart.UartParams(p.divisor), family))
    parts["rx_fifo"] = res.fifo(8, p.rx_depth, family)
    parts["rx_hold"] = res.Resources(ff=8 + 1 + 5, lut4=10)
    parts["crc"] = res.Resources(ff=32 + 3, lut4=2 * 2 * 16 + 8)
    parts["length"] = (res.Resources(ff=33 + 2 + 3, lut4=33 + 2) + res.sub(16, family)
                       + res.sub(17, family) + res.equal(32, family) + res.equal(16, family))
    ib = max(1, (max(p.in_width // 8, 2) - 1).bit_length())
    bb = max(1, (max(p.in_beats, 2) - 1).bit_length())
    # the beat's bytes shift in with the flip-flops' enable: no LUT per bit
    parts["in_beat"] = (res.Resources(ff=p.in_width + ib + bb + 4, lut4=ib + 4)
                        + res.add(bb, family) + res.equal(bb, family))
    ob = max(1, (p.out_width // 8).bit_length())
    db = max(1, (max(p.out_beats, 2) - 1).bit_length())
    # and the reply byte register, its valid and CRC flags, fed by an OR of 9 sources
    parts["out_beat"] = (res.Resources(ff=p.out_width + ob + db + lw + 8 + 4,
                                       lut4=p.out_width + ob + db + 2 * lw + 3 * 8)
                         + res.sub(lw, family) + res.add(db, family))
    if p.loads:
        parts["load_word"] = res.Resources(ff=18, lut4=18)
    # states (one-hot, 19), code, reply kind (2 and one-hot), flags
    parts["control"] = res.Resources(ff=19 + 3 + 2 + 4 + 18, lut4=60)
    return parts


#: calibration of :func:`resource_parts` against Yosys 0.70 (``synth_ecp5``;
#: ``synth_ice40 -dsp -spram``) on the links of 16×6 → 24×3 bytes (divisor 217), 64×98 →
#: 32×1 (26) and 6272×1 → 8×10 with a load port (104): ECP5 457/454/471 LUT4 and
#: 277/332/6545 flip-flops, iCE40 455/463/473 LUT4 and 269/324/6537 flip-flops
RESOURCE_FIT: res.Fit = {
    "ecp5": {"lut4": {"control": 2.1, "crc": 1.4}, "ff": {"1": -12}},
    "ice40": {"lut4": {"control": 0.3}, "ff": {"1": -12}},
}


def resources(p: LinkParams, family: str) -> res.Resources:
    """Estimated LUT4, flip-flops, carry cells, LUT RAM (ECP5) or block RAM (iCE40, the
    receive FIFO) of the link on ``family`` ("ecp5" or "ice40")."""
    if family not in res.FAMILIES:
        raise ValueError(f"unknown FPGA family {family!r} (choose {', '.join(res.FAMILIES)})")
    return res.fitted(resource_parts(p, family), RESOURCE_FIT.get(family)).rounded()


def cost(p: LinkParams) -> Cost:
    """``cycles``: the line time of one 'I' request and its 'O' reply (the UART's, not the
    core's: ``10·divisor`` per byte); ``latency`` the same plus the core's own."""
    line = (HEADER_BYTES + CRC_BYTES) * 2 + p.in_bytes + p.out_bytes
    cycles = line * uart.BITS_PER_BYTE * p.divisor
    by_family = {f: resources(p, f) for f in res.FAMILIES}
    return Cost(cycles=cycles, latency=cycles, memory_bits=8 * (p.rx_depth - 1),
                registers=max(r.ff for r in by_family.values()), by_family=by_family,
                parts={f: resource_parts(p, f) for f in res.FAMILIES})
