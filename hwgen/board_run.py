"""``hwgen run``: inputs through a board's UART link, outputs back (the folder ``hwgen
build`` wrote: its design and ``build.json``, which records the link's baud rate).

The inputs are quantized exactly as ``hwgen simulate`` quantizes them, the conversation is
:mod:`hwgen.host`'s (ping, weight load, one request per frame) and the outputs are
dequantized as ``simulate`` does, so a board's outputs compare with ``simulate``'s and
onnxruntime's directly.
"""
from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hwgen import api, design, host
from hwgen.dataflow.weight_load import folded_load_image
from hwgen.errors import HwgenError
from hwgen.io import BUILD_JSON
from hwgen.progress import QUIET, Progress


@dataclass
class BoardRun:
    outputs: np.ndarray          # as the ONNX model returns them
    outputs_int: np.ndarray      # [N, output elements] integers, stream order
    stats: host.LineStats
    port: str
    baud: int

    def summary(self) -> str:
        s = self.stats
        load = (f", weight load {s.load_seconds:.2f} s" if s.load_seconds else "")
        return (f"ran {s.frames} frames on {self.port} at {self.baud} baud in "
                f"{s.seconds:.2f} s ({s.frames_per_second:.2f} frames/s over the link, "
                f"{s.bytes_sent:,} bytes sent, {s.bytes_received:,} received{load})")

    def npy_bytes(self) -> bytes:
        buf = io.BytesIO()
        np.save(buf, self.outputs)
        return buf.getvalue()


def link_baud(out_dir: Path) -> int:
    """The baud rate ``build.json`` records for the design's link."""
    try:
        doc = json.loads((out_dir / BUILD_JSON).read_text())
        return int(doc["host_link"]["baud"])
    except (OSError, ValueError, KeyError, TypeError):
        raise HwgenError(f"{out_dir}: no readable {BUILD_JSON} with the link's baud rate (a "
                         f"folder 'hwgen build' wrote; or give --baud)") from None


def run_board(out_dir, port: str, x, count: int | None = None, *, baud: int | None = None,
              timeout: float = 5.0, progress: Progress = QUIET, line=None) -> BoardRun:
    """Send the float inputs ``x`` (array or .npy/.npz path) to the board on ``port`` running
    the bitstream of ``out_dir``; ``line``: an open port-like object (``write``/``read`` with
    a timeout) to use instead of opening ``port``."""
    out_dir = Path(out_dir)
    loaded = design.load(out_dir)
    manifest, ig, folding = loaded
    if baud is None:
        baud = link_baud(out_dir)
    xq = api.quantized_inputs(manifest, ig, x, count)
    words = folded_load_image(ig, folding)
    fr = host.conversation(manifest, ig, xq, words)
    own = line is None
    if own:
        line = host.open_serial(port, baud, timeout)
    try:
        with progress.step(f"running {len(fr.inputs)} frames over {port}"):
            stats = host.run_frames_over(line, fr)
    finally:
        if own:
            line.close()
    y = host.read_outputs(fr, manifest, ig, stats.replies)
    return BoardRun(api.dequantized_outputs(manifest, ig, y), y, stats, port, baud)
