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
        m = Module()
        p = self.p
        nbi, nbo = p.in_width // 8, p.out_width // 8
        m.submodules.urx = urx = uart.UartRx(p.divisor)
        m.submodules.utx = utx = uart.UartTx(p.divisor)
        m.submodules.rxq = rxq = BufferedFIFO(width=8, depth=p.rx_depth)
        m.d.comb += [urx.rx.eq(self.rx), self.tx.eq(utx.tx),
                     rxq.w_data.eq(urx.o.payload), rxq.w_en.eq(urx.o.valid),
                     urx.o.ready.eq(rxq.w_rdy)]

        # the request side: bytes from the FIFO
        b = rxq.r_data
        take = Signal()                     # the state takes a byte this cycle, if one is there
        got = take & rxq.r_rdy
        m.d.comb += rxq.r_en.eq(take)

        kind = Signal(8)
        count = Signal(33)                  # length; then the payload or skip count, down
        nlen = Signal(2)
        rcrc = Signal(16)
        crc_lo = Signal(8)
        code = Signal(3)
        line_err = Signal()
        is_i = kind == ord(INPUT)
        is_w = (kind == ord(WEIGHTS)) if p.loads else Const(0)
        is_p = kind == ord(PING)

        # the core's input: a beat assembled from bytes, held until taken
        ibeat = Signal(p.in_width)
        ibyte = Signal(range(max(nbi, 2)))
        ivalid = Signal()
        ibeats = Signal(range(max(p.in_beats, 2)))
        ilast = ibeats == p.in_beats - 1
        m.d.comb += [self.s_axis_tdata.eq(ibeat), self.s_axis_tvalid.eq(ivalid),
                     self.s_axis_tlast.eq(ilast)]
        with m.If(ivalid & self.s_axis_tready):
            m.d.sync += [ivalid.eq(0), ibeats.eq(Mux(ilast, 0, ibeats + 1))]
        word = Signal(16)
        whigh = Signal()
        wvalid = Signal()
        if p.loads:
            m.d.comb += [self.s_wload_tdata.eq(word), self.s_wload_tvalid.eq(wvalid)]
            with m.If(wvalid & self.s_wload_tready):
                m.d.sync += wvalid.eq(0)

        # the reply side: bytes to the transmitter
        R_O, R_E, R_AP, R_AW = range(4)
        rkind = Signal(2)
        tb = Signal(8)
        tv = Signal()
        sent = tv & utx.i.ready
        m.d.comb += [utx.i.payload.eq(tb), utx.i.valid.eq(tv)]
        tcrc = Signal(16)
        nrlen = Signal(2)
        left = Signal(range(max(p.out_bytes, PING_BYTES) + 1))
        obuf = Signal(p.out_width)
        ocnt = Signal(range(nbo + 1))
        drained = Signal(range(max(p.out_beats, 2)))
        rchar = Mux(rkind == R_O, ord(OUTPUT), Mux(rkind == R_E, ord(ERROR), ord(ACK)))
        rlen = Signal(32)
        with m.Switch(rkind):
            for k, n in ((R_O, p.out_bytes), (R_E, 1), (R_AP, PING_BYTES), (R_AW, 0)):
                with m.Case(k):
                    m.d.comb += rlen.eq(n)
        info = ping_payload(p.in_bytes, p.out_bytes, p.loads)
        error = Signal()
        m.d.comb += self.error.eq(error)

        def reply(k):
            m.d.sync += [rkind.eq(k), error.eq(k == R_E)]
            m.next = "R_MAGIC0"

        # a line error during a request (cleared when a request starts)
        with m.If(urx.frame_err | urx.overrun):
            m.d.sync += line_err.eq(1)

        with m.FSM() as fsm:
            with m.State("HUNT0"):
                m.d.comb += take.eq(1)
                with m.If(got & (b == REQUEST_MAGIC[0])):
                    m.d.sync += line_err.eq(urx.frame_err | urx.overrun)
                    m.next = "HUNT1"
            with m.State("HUNT1"):
                m.d.comb += take.eq(1)
                with m.If(got):
                    with m.If(b == REQUEST_MAGIC[1]):
                        m.next = "TYPE"
                    with m.Elif(b != REQUEST_MAGIC[0]):
                        m.next = "HUNT0"
            with m.State("TYPE"):
                m.d.comb += take.eq(1)
                with m.If(got):
                    m.d.sync += [kind.eq(b), rcrc.eq(_crc_next(Const(0xFFFF, 16), b)),
                                 nlen.eq(0)]
                    m.next = "LEN"
            with m.State("LEN"):
                m.d.comb += take.eq(1)
                with m.If(got):
                    m.d.sync += [count.eq(Cat(count[8:32], b)), rcrc.eq(_crc_next(rcrc, b)),
                                 nlen.eq(nlen + 1)]
                    with m.If(nlen == 3):
                        m.next = "CHECK"
            with m.State("CHECK"):
                m.d.sync += [ibyte.eq(0), whigh.eq(0)]
                with m.If(is_i):
                    with m.If(count == p.in_bytes):
                        m.next = "PAYLOAD"
                    with m.Else():
                        m.d.sync += [code.eq(ERR_LENGTH), count.eq(count + CRC_BYTES)]
                        m.next = "SKIP"
                with m.Elif(is_w):
                    with m.If(~count[0]):
                        m.next = "PAYLOAD"
                    with m.Else():
                        m.d.sync += [code.eq(ERR_LENGTH), count.eq(count + CRC_BYTES)]
                        m.next = "SKIP"
                with m.Elif(is_p):
                    m.next = "PAYLOAD"
                with m.Else():
                    m.d.sync += [code.eq(ERR_TYPE), count.eq(count + CRC_BYTES)]
                    m.next = "SKIP"
            with m.State("PAYLOAD"):
                with m.If(count == 0):
                    m.next = "CRC0"
                with m.Else():
                    m.d.comb += take.eq(~(is_i & ivalid) & ~(is_w & wvalid))
                    with m.If(got):
                        m.d.sync += [count.eq(count - 1), rcrc.eq(_crc_next(rcrc, b))]
                        with m.If(is_i):
                            m.d.sync += [ibeat.eq(Cat(ibeat[8:], b)),
                                         ibyte.eq(Mux(ibyte == nbi - 1, 0, ibyte + 1))]
                            with m.If(ibyte == nbi - 1):
                                m.d.sync += ivalid.eq(1)
                        with m.If(is_w):
                            m.d.sync += [word.eq(Cat(word[8:], b)), whigh.eq(~whigh)]
                            with m.If(whigh):
                                m.d.sync += wvalid.eq(1)
            with m.State("CRC0"):
                m.d.comb += take.eq(1)
                with m.If(got):
                    m.d.sync += crc_lo.eq(b)
                    m.next = "CRC1"
            with m.State("CRC1"):
                m.d.comb += take.eq(1)
                with m.If(got):
                    m.d.sync += code.eq(Mux(line_err, ERR_LINE,
                                            Mux(Cat(crc_lo, b) != rcrc, ERR_CRC, 0)))
                    m.next = "VERDICT"
            with m.State("VERDICT"):
                m.d.sync += drained.eq(0)
                with m.If(line_err):
                    m.d.sync += code.eq(ERR_LINE)
                with m.If(is_i):
                    with m.If((code == 0) & ~line_err):
                        reply(R_O)
                    with m.Else():
                        m.next = "DRAIN"
                with m.Elif(~wvalid):       # a 'W' request's last word taken
                    with m.If((code == 0) & ~line_err):
                        reply(Mux(is_p, R_AP, R_AW))
                    with m.Else():
                        reply(R_E)
            with m.State("SKIP"):
                m.d.comb += take.eq(count != 0)
                with m.If(got):
                    m.d.sync += count.eq(count - 1)
                with m.If(count == 0):
                    reply(R_E)
            with m.State("DRAIN"):          # a bad 'I': its output frame discarded
                m.d.comb += self.m_axis_tready.eq(1)
                with m.If(self.m_axis_tvalid):
                    m.d.sync += drained.eq(drained + 1)
                    with m.If(drained == p.out_beats - 1):
                        reply(R_E)

            with m.State("R_MAGIC0"):
                m.d.comb += [tb.eq(REPLY_MAGIC[0]), tv.eq(1)]
                m.d.sync += [tcrc.eq(0xFFFF), nrlen.eq(0), ocnt.eq(0)]
                with m.If(sent):
                    m.next = "R_MAGIC1"
            with m.State("R_MAGIC1"):
                m.d.comb += [tb.eq(REPLY_MAGIC[1]), tv.eq(1)]
                with m.If(sent):
                    m.next = "R_TYPE"
            with m.State("R_TYPE"):
                m.d.comb += [tb.eq(rchar), tv.eq(1)]
                m.d.sync += left.eq(rlen)
                with m.If(sent):
                    m.d.sync += tcrc.eq(_crc_next(tcrc, tb))
                    m.next = "R_LEN"
            with m.State("R_LEN"):
                m.d.comb += [tb.eq(rlen.word_select(nrlen, 8)), tv.eq(1)]
                with m.If(sent):
                    m.d.sync += [tcrc.eq(_crc_next(tcrc, tb)), nrlen.eq(nrlen + 1)]
                    with m.If(nrlen == 3):
                        m.next = "R_PAY"
            with m.State("R_PAY"):
                with m.If(left == 0):
                    m.next = "R_CRC0"
                with m.Else():
                    with m.Switch(rkind):
                        with m.Case(R_O):
                            m.d.comb += [tb.eq(obuf[:8]), tv.eq(ocnt != 0),
                                         self.m_axis_tready.eq(ocnt == 0)]
                            with m.If((ocnt == 0) & self.m_axis_tvalid):
                                m.d.sync += [obuf.eq(self.m_axis_tdata), ocnt.eq(nbo)]
                            with m.If(sent):
                                m.d.sync += [obuf.eq(obuf >> 8), ocnt.eq(ocnt - 1)]
                        with m.Case(R_E):
                            m.d.comb += [tb.eq(code), tv.eq(1)]
                        with m.Case(R_AP):
                            m.d.comb += tv.eq(1)
                            with m.Switch(left):
                                for k in range(1, PING_BYTES + 1):
                                    with m.Case(k):
                                        m.d.comb += tb.eq(info[PING_BYTES - k])
                    with m.If(sent):
                        m.d.sync += [tcrc.eq(_crc_next(tcrc, tb)), left.eq(left - 1)]
            with m.State("R_CRC0"):
                m.d.comb += [tb.eq(tcrc[:8]), tv.eq(1)]
                with m.If(sent):
                    m.next = "R_CRC1"
            with m.State("R_CRC1"):
                m.d.comb += [tb.eq(tcrc[8:]), tv.eq(1)]
                with m.If(sent):
                    m.next = "HUNT0"
        m.d.comb += self.busy.eq(~fsm.ongoing("HUNT0") & ~fsm.ongoing("HUNT1"))
        return m


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
    """The structural parts: the UART, the receive FIFO, the two CRC registers and their
    byte update (16 XOR functions of up to 8 inputs: about two LUT4 per bit), the 33-bit
    length counter, the input beat and output beat shift registers, the counters and
    the two state machines."""
    lw = max(p.out_bytes, PING_BYTES).bit_length()
    parts = dict(uart.resource_parts(uart.UartParams(p.divisor), family))
    parts["rx_fifo"] = res.fifo(8, p.rx_depth, family)
    parts["crc"] = res.Resources(ff=32 + 8, lut4=2 * 2 * 16 + 16)
    parts["length"] = (res.Resources(ff=33 + 2, lut4=33 + 2) + res.sub(33, family)
                       + res.reduce_or(33, family) + res.equal(33, family))
    ib = max(1, (max(p.in_width // 8, 2) - 1).bit_length())
    bb = max(1, (max(p.in_beats, 2) - 1).bit_length())
    # the beat's bytes shift in with the flip-flops' enable: no LUT per bit
    parts["in_beat"] = (res.Resources(ff=p.in_width + ib + bb + 1, lut4=ib + 2)
                        + res.add(bb, family) + res.equal(bb, family))
    ob = max(1, (p.out_width // 8).bit_length())
    db = max(1, (max(p.out_beats, 2) - 1).bit_length())
    parts["out_beat"] = (res.Resources(ff=p.out_width + ob + db + lw,
                                       lut4=p.out_width + ob + db + 2 * lw)
                         + res.sub(lw, family) + res.add(db, family))
    if p.loads:
        parts["load_word"] = res.Resources(ff=18, lut4=18)
    # states (one-hot, 18), type, code, flags; the reply byte multiplexer
    parts["control"] = res.Resources(ff=18 + 8 + 3 + 4, lut4=60)
    return parts


#: calibration of :func:`resource_parts` against Yosys 0.70 (``synth_ecp5``;
#: ``synth_ice40 -dsp -spram``) on the links of 16×6 → 24×3 bytes (divisor 217), 64×98 →
#: 32×1 (26) and 6272×1 → 8×10 with a load port (104): ECP5 499/566/533 LUT4 and
#: 230/286/6494 flip-flops, iCE40 503/513/511 LUT4 and 222/278/6486 flip-flops
RESOURCE_FIT: res.Fit = {
    "ecp5": {"lut4": {"control": 4.0, "crc": 1.4}, "ff": {"1": -12}},
    "ice40": {"lut4": {"control": 1.5}, "ff": {"1": -12}},
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
