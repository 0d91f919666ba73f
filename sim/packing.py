"""Frames of integers ⇄ stream beats (element k of a beat in bits [k*bits, (k+1)*bits))."""
from __future__ import annotations

import numpy as np

from hwgen.rtl_templates.quant import QType


def frames_to_beats(frames: np.ndarray, qtype: QType, per_beat: int) -> tuple[list[int], list[bool]]:
    """``frames`` [N, elements] in stream order → (beats, tlast flags)."""
    frames = np.asarray(frames, dtype=np.int64)
    n, elems = frames.shape
    if elems % per_beat:
        raise ValueError(f"{elems} elements do not split into beats of {per_beat}")
    raw = qtype.to_unsigned(frames).reshape(n, elems // per_beat, per_beat)
    beats, last = [], []
    b = qtype.bits
    for f in range(n):
        for j in range(raw.shape[1]):
            word = 0
            for k, v in enumerate(raw[f, j]):
                word |= int(v) << (k * b)
            beats.append(word)
            last.append(j == raw.shape[1] - 1)
    return beats, last


def beats_to_frames(beats: list[int], qtype: QType, per_beat: int, elements: int) -> np.ndarray:
    """Inverse of :func:`frames_to_beats`: → [N, elements] int64."""
    b, mask = qtype.bits, (1 << qtype.bits) - 1
    vals = [(w >> (k * b)) & mask for w in beats for k in range(per_beat)]
    raw = np.array(vals, dtype=np.int64)
    if raw.size % elements:
        raise ValueError(f"{len(beats)} beats do not make whole frames of {elements} elements")
    return qtype.from_unsigned(raw).reshape(-1, elements)
