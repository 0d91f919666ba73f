"""``hwgen verify --link``: the board top simulated whole, through its serial line.

The compiled core inside the board top of ``hwgen build`` (``boards/board_top.py``: reset
synchronizer, UART host link, LED), built without the PLL (no simulation model of the
vendor primitive: the clock pin is the design's clock), is verilated with a host on the
other end of the UART (``sim/link.py``). The host holds the same conversation ``hwgen run``
holds with a board (:mod:`hwgen.host`: ping, weight load, one request per frame), at a fast
simulated baud rate (:data:`LINK_DIVISOR` clock cycles per bit), and the outputs read from
the replies are compared with the golden model's, exactly.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hwgen import host
from hwgen.boards.board_top import board_top_verilog
from hwgen.boards.boards import board_by_name
from hwgen.dataflow.weight_load import folded_load_image
from hwgen.errors import HwgenError
from hwgen.rtl_templates.host_link import LinkError
from hwgen.sim.link import run_link

#: clock cycles per UART bit in the co-simulation (the board's own rate would only cost
#: simulated cycles: the link's logic is the same at any divisor)
LINK_DIVISOR = 10


@dataclass
class LinkReport:
    frames: int
    outputs_int: np.ndarray      # [N, output elements] read from the replies
    equals_golden: bool
    mismatched_frames: int
    cycles: int                  # simulated, reset to the last reply
    bytes_sent: int
    bytes_received: int
    divisor: int
    board: str
    top: str
    error: str = ""              # the protocol error that stopped the comparison

    @property
    def ok(self) -> bool:
        return self.equals_golden and not self.error

    def summary(self) -> str:
        if self.error:
            return f"FAILED: {self.error}"
        same = "==" if self.equals_golden else "!="
        return (f"RTL via UART {same} golden on {self.frames - self.mismatched_frames}/"
                f"{self.frames} frames ({self.top} on {self.board}, {self.cycles:,} cycles at "
                f"{self.divisor} cycles per bit, {self.bytes_sent:,} bytes sent, "
                f"{self.bytes_received:,} received)")


def verify_link(out_dir, loaded, xq: np.ndarray, gold: np.ndarray, board: str,
                divisor: int = LINK_DIVISOR) -> LinkReport:
    """Simulate the board top of the compiled design in ``out_dir`` (``loaded``:
    :func:`hwgen.design.load` of it) on the quantized frames ``xq`` through its UART and
    compare the outputs with ``gold`` [N, output elements]."""
    gold = np.asarray(gold).reshape(len(xq), -1)
    manifest, ig, folding = loaded
    b = board_by_name(board)
    core_v = (Path(out_dir) / manifest["verilog"]).read_text()
    clock = b.clock_mhz
    text, top, _ = board_top_verilog(b, core_v, manifest["top"], manifest, clock,
                                     baud=round(clock * 1e6 / divisor), bypass_pll=True)
    words = folded_load_image(ig, folding)
    fr = host.conversation(manifest, ig, xq, words)
    sizes = fr.reply_sizes()
    segments, waited = [], 0
    for req, size in zip(fr.requests(), sizes):
        segments.append((req, waited))
        waited += size
    sent = sum(len(r) for r in fr.requests())
    est = manifest["estimate"]
    line = (sent + waited) * 10 * divisor
    compute = 2 * (len(xq) * int(est["cycles_per_frame"]) + int(est["latency_cycles"]))
    max_cycles = line + compute + 4 * len(words) + 100_000
    res = run_link(text, top, segments, waited, divisor, max_cycles)
    rep = LinkReport(len(xq), np.zeros((0, gold.shape[1]), np.int64), False, len(xq),
                     res.cycles, sent, len(res.reply), divisor, b.id, top)
    try:
        replies = host.split_replies(res.reply)
        if res.status != "ok":
            raise LinkError(f"the simulation ended early ({res.status}) after "
                            f"{len(replies)} of {len(sizes)} replies")
        out = host.read_outputs(fr, manifest, ig, replies)
    except HwgenError as e:            # LinkError included: the protocol broke
        rep.error = str(e)
        return rep
    rep.outputs_int = out
    rep.equals_golden = np.array_equal(gold, out)
    rep.mismatched_frames = int(np.sum(np.any(gold != out, axis=1)))
    return rep
