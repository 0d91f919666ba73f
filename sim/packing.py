"""Frames of integers ⇄ stream beats (element k of a beat in bits [k*bits, (k+1)*bits)), with
the block library's one packing (:mod:`rtl_templates.words`)."""
from __future__ import annotations

import numpy as np

from hwgen.rtl_templates.quant import QType
from hwgen.rtl_templates.words import pack_word, unpack_word


def frames_to_beats(
    frames: np.ndarray, qtype: QType, per_beat: int
) -> tuple[list[int], list[bool]]:
    """``frames`` [N, elements] in stream order → (beats, tlast flags)."""
    frames = np.asarray(frames, dtype=np.int64)
    n, elems = frames.shape
    if elems % per_beat:
        raise ValueError(f"{elems} elements do not split into beats of {per_beat}")
    per_frame = elems // per_beat
    raw = qtype.to_unsigned(frames).reshape(n * per_frame, per_beat)
    if qtype.bits <= 32:
        beats = pack_rows(raw, qtype.bits)
    else:
        beats = [pack_word(values, qtype.bits) for values in raw.tolist()]
    last = [j == per_frame - 1 for _ in range(n) for j in range(per_frame)]
    return beats, last


def pack_rows(raw: np.ndarray, bits: int, block: int = 4096) -> list[int]:
    """:func:`~hwgen.rtl_templates.words.pack_word` of each row of unsigned ``raw``
    [beats, per_beat] (``bits`` ≤ 32), with NumPy: each row's bits, little end first, made
    bytes and the bytes one int."""
    out: list[int] = []
    shifts = np.arange(bits, dtype=np.uint64)
    for a in range(0, raw.shape[0], block):
        rows = np.asarray(raw[a:a + block], dtype=np.uint64)
        bitm = ((rows[:, :, None] >> shifts) & np.uint64(1)).astype(np.uint8)
        packed = np.packbits(bitm.reshape(rows.shape[0], -1), axis=1, bitorder="little")
        size = packed.shape[1]
        blob = packed.tobytes()
        out += [int.from_bytes(blob[k:k + size], "little") for k in range(0, len(blob), size)]
    return out


def beats_to_frames(beats: list[int], qtype: QType, per_beat: int, elements: int) -> np.ndarray:
    """Inverse of :func:`frames_to_beats`: → [N, elements] int64."""
    vals = [v for w in beats for v in unpack_word(w, per_beat, qtype.bits)]
    raw = np.array(vals, dtype=np.int64)
    if raw.size % elements:
        raise ValueError(f"{len(beats)} beats do not make whole frames of {elements} elements")
    return qtype.from_unsigned(raw).reshape(-1, elements)
