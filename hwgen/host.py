"""The host end of a board's UART link (the frame protocol: ``rtl_templates/host_link.py``).

One description of the conversation, two lines under it: :func:`run_frames_over` talks to
anything with ``write(bytes)`` and ``read(n) -> bytes`` — a serial port (``hwgen run``,
:func:`open_serial`) — and :func:`conversation` / :func:`read_outputs` give the same
requests and read the same replies for the board top simulated in Verilator (``hwgen verify
--link``, ``sim/link.py``), so the driver's every byte is checked without a board.

A conversation: a ping (the reply names the input and output frame sizes and whether the
design loads weights: the host checks it talks to the design it compiled), then the weight
load if the design has one ('W' requests of at most :data:`LOAD_CHUNK_WORDS` words), then
one 'I' request per frame, each sent once the reply to the one before has arrived (the link
takes one request at a time).
"""
from __future__ import annotations

import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import serial

from hwgen.errors import HwgenError
from hwgen.rtl_templates import host_link as hl
from hwgen.sim.packing import beats_to_frames, frames_to_beats

#: weight-load words per 'W' request
LOAD_CHUNK_WORDS = 4096
#: bytes of a reply besides its payload (magic, type, length, CRC)
REPLY_OVERHEAD = hl.HEADER_BYTES + hl.CRC_BYTES


@dataclass
class Frames:
    """What the host sends for a batch and what it expects back."""
    ping: bytes
    loads: list[bytes]                   # 'W' requests (empty: no weight load)
    inputs: list[bytes]                  # one 'I' request per frame
    in_bytes: int                        # an input frame's payload bytes
    out_bytes: int                       # an output frame's payload bytes
    has_load_port: bool

    def reply_sizes(self) -> list[int]:
        """Bytes of each reply, in order, when nothing goes wrong."""
        return ([REPLY_OVERHEAD + hl.PING_BYTES] + [REPLY_OVERHEAD] * len(self.loads)
                + [REPLY_OVERHEAD + self.out_bytes] * len(self.inputs))

    def requests(self) -> list[bytes]:
        return [self.ping, *self.loads, *self.inputs]


def _width(manifest: dict, side: str) -> int:
    return int(manifest["ports"][side]["bits"])


def conversation(manifest: dict, ig, xq: np.ndarray, load_words: list[int]) -> Frames:
    """The requests for the quantized frames ``xq`` [N, input elements] (stream order) and
    the weight-load image ``load_words`` (empty without one) of the compiled design."""
    mi, mo = manifest["input"], manifest["output"]
    tin = ig.tensors[ig.input]
    w_in, w_out = _width(manifest, "input"), _width(manifest, "output")
    in_bytes = mi["beats_per_frame"] * w_in // 8
    out_bytes = mo["beats_per_frame"] * w_out // 8
    inputs = []
    if len(xq):
        beats, _ = frames_to_beats(xq, tin.qtype, mi["elements_per_beat"])
        per = mi["beats_per_frame"]
        data = hl.frame_bytes(np.array(beats, dtype=object if w_in > 64 else np.uint64), w_in)
        inputs = [hl.encode_request(hl.INPUT, data[k * in_bytes:(k + 1) * in_bytes])
                  for k in range(len(beats) // per)]
    words = np.asarray(load_words, dtype="<u2").tobytes()
    loads = [hl.encode_request(hl.WEIGHTS, words[a:a + 2 * LOAD_CHUNK_WORDS])
             for a in range(0, len(words), 2 * LOAD_CHUNK_WORDS)]
    return Frames(hl.encode_request(hl.PING), loads, inputs, in_bytes, out_bytes,
                  "weight_load" in manifest["ports"])


def _error(kind: str, payload: bytes, what: str) -> HwgenError:
    if kind == "E":
        code = payload[0] if payload else None
        why = {hl.ERR_CRC: "the request's CRC did not match (a corrupted byte on the line)",
               hl.ERR_LENGTH: "wrong length for this design",
               hl.ERR_TYPE: "a request type this design does not take",
               hl.ERR_LINE: "the UART lost a byte of the request"}.get(code, f"code {code}")
        return hl.LinkError(f"{what}: the board replied with an error: {why}")
    return hl.LinkError(f"{what}: unexpected reply type {kind!r}")


def check_ping(fr: Frames, kind: str, payload: bytes) -> None:
    if kind != "A" or len(payload) != hl.PING_BYTES:
        raise _error(kind, payload, "ping")
    i, o, flags = struct.unpack("<IIB", payload)
    if (i, o, bool(flags & 1)) != (fr.in_bytes, fr.out_bytes, fr.has_load_port):
        raise hl.LinkError(f"the board's design takes {i}-byte input frames and gives {o}-byte "
                           f"outputs{' with a weight load' if flags & 1 else ''}; the compiled "
                           f"design has {fr.in_bytes} and {fr.out_bytes}: it is not this "
                           f"design's bitstream")


def split_replies(buf: bytes) -> list[tuple[str, bytes]]:
    """Every reply in ``buf`` (:func:`rtl_templates.host_link.decode_reply` one after the
    other); :class:`~rtl_templates.host_link.LinkError` on a broken one."""
    out, pos = [], 0
    while pos < len(buf):
        kind, payload, used = hl.decode_reply(buf[pos:])
        out.append((kind, payload))
        pos += used
    return out


def read_outputs(fr: Frames, manifest: dict, ig, replies: list[tuple[str, bytes]]
                 ) -> np.ndarray:
    """The output frames [N, output elements] (stream order, integers) of the replies to
    ``fr``'s requests, ping and loads included; LinkError naming the first bad one."""
    want = 1 + len(fr.loads) + len(fr.inputs)
    if len(replies) != want:
        raise hl.LinkError(f"{len(replies)} replies for {want} requests")
    check_ping(fr, *replies[0])
    for k, (kind, payload) in enumerate(replies[1:1 + len(fr.loads)]):
        if kind != "A":
            raise _error(kind, payload, f"weight-load request {k}")
    mo = manifest["output"]
    tout = ig.tensors[ig.output]
    w_out = _width(manifest, "output")
    beats = []
    for k, (kind, payload) in enumerate(replies[1 + len(fr.loads):]):
        if kind != "O" or len(payload) != fr.out_bytes:
            raise _error(kind, payload, f"frame {k}")
        beats += [int(b) for b in hl.beats_from_bytes(payload, w_out, mo["beats_per_frame"])]
    if not beats:
        return np.zeros((0, tout.size), np.int64)
    return beats_to_frames(beats, tout.qtype, mo["elements_per_beat"], tout.size)


# ----------------------------------------------------------------------------- a real line

@dataclass
class LineStats:
    frames: int = 0
    seconds: float = 0.0                 # wall time of the frames (after ping and load)
    load_seconds: float = 0.0
    bytes_sent: int = 0
    bytes_received: int = 0
    replies: list[tuple[str, bytes]] = field(default_factory=list)

    @property
    def frames_per_second(self) -> float:
        return self.frames / self.seconds if self.seconds > 0 else 0.0


def _read_reply(port, size_hint: int, what: str) -> tuple[str, bytes, bytes]:
    """One reply from ``port`` (its ``read(n)`` returns fewer bytes on a timeout)."""
    head = port.read(hl.HEADER_BYTES)
    if len(head) < hl.HEADER_BYTES:
        raise hl.LinkError(f"{what}: no reply from the board ({len(head)} bytes before the "
                           f"timeout; is the bitstream loaded and the port right?)")
    (n,) = struct.unpack_from("<I", head, 3)
    if head[:2] != hl.REPLY_MAGIC or n > max(size_hint, hl.PING_BYTES) + 16:
        raise hl.LinkError(f"{what}: not a reply of hwgen's link (header {head.hex(' ')})")
    rest = port.read(n + hl.CRC_BYTES)
    buf = head + rest
    kind, payload, _ = hl.decode_reply(buf)
    return kind, payload, buf


def run_frames_over(port, fr: Frames, progress: Callable[[int, int], None] | None = None
                    ) -> LineStats:
    """Hold the conversation ``fr`` on ``port`` (``write``/``read`` with a read timeout):
    each request, then its reply. Raises LinkError on a missing, broken or error reply."""
    st = LineStats()
    sizes = fr.reply_sizes()

    def ask(req: bytes, size: int, what: str) -> tuple[str, bytes]:
        port.write(req)
        st.bytes_sent += len(req)
        kind, payload, raw = _read_reply(port, size, what)
        st.bytes_received += len(raw)
        st.replies.append((kind, payload))
        return kind, payload

    check_ping(fr, *ask(fr.ping, sizes[0], "ping"))
    t0 = time.perf_counter()
    for k, req in enumerate(fr.loads):
        kind, payload = ask(req, sizes[1 + k], f"weight-load request {k}")
        if kind != "A":
            raise _error(kind, payload, f"weight-load request {k}")
    st.load_seconds = time.perf_counter() - t0
    t0 = time.perf_counter()
    for k, req in enumerate(fr.inputs):
        kind, payload = ask(req, fr.out_bytes + REPLY_OVERHEAD, f"frame {k}")
        if kind != "O":
            raise _error(kind, payload, f"frame {k}")
        st.frames += 1
        if progress:
            progress(k + 1, len(fr.inputs))
    st.seconds = time.perf_counter() - t0
    return st


def open_serial(port: str, baud: int, timeout: float):
    """The serial port ``port`` at ``baud`` (pyserial; a ``loop://``-style URL works too)."""
    try:
        return serial.serial_for_url(port, baudrate=baud, timeout=timeout)
    except (serial.SerialException, ValueError) as e:
        raise HwgenError(f"{port}: cannot open the serial port ({e})") from None
