"""Run one stream block (or a chain of them) on integer frames, in either back end.

Block tests and the dataflow flow use the same path: the block is wrapped in the AXI4-Stream
top level (``rtl_templates.axis_top``), frames are packed into beats (``sim.packing``),
simulated, and the output beats unpacked into frames.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from amaranth.back import verilog

from hwgen.rtl_templates.axis_top import AxisTop, Chain
from hwgen.rtl_templates.quant import QType
from hwgen.sim.amaranth_sim import run_amaranth
from hwgen.sim.base import StreamJob, StreamResult
from hwgen.sim.packing import beats_to_frames, frames_to_beats
from hwgen.sim.verilator import run_verilator


@dataclass
class BlockRun:
    frames: np.ndarray         # [N, out_elements] integers
    result: StreamResult

    def frame_ends(self, out_beats_per_frame: int) -> list[int]:
        t = self.result.out_times
        return [t[(k + 1) * out_beats_per_frame - 1] for k in range(len(t) // out_beats_per_frame)]

    @property
    def latency(self) -> int:
        """First input transfer to the last output transfer of frame 0, inclusive."""
        n = len(self.frames)
        per = len(self.result.out_times) // n
        return self.frame_ends(per)[0] - self.result.in_times[0] + 1

    @property
    def interval(self) -> float:
        """Mean cycles between the ends of consecutive output frames."""
        n = len(self.frames)
        ends = self.frame_ends(len(self.result.out_times) // n)
        return (ends[-1] - ends[0]) / (n - 1)


def run_block(block, frames: np.ndarray, in_type: QType, in_per_beat: int, out_type: QType,
              out_per_beat: int, out_elements: int, simulator: str = "amaranth",
              stall_in: float = 0.0, stall_out: float = 0.0, seed: int = 0,
              max_cycles: int = 0, name: str = "dut") -> BlockRun:
    """Simulate ``block`` (a component with stream members ``i`` and ``o``, or a list of such
    blocks to chain) on ``frames`` [N, in_elements] in stream order."""
    blocks = block if isinstance(block, list) else [block]
    frames = np.asarray(frames, dtype=np.int64)
    n = frames.shape[0]
    top = AxisTop(Chain(blocks), out_elements // out_per_beat)
    beats, last = frames_to_beats(frames, in_type, in_per_beat)
    job = StreamJob(top.in_width, top.out_width, beats, last,
                    n * (out_elements // out_per_beat), stall_in, stall_out, seed, max_cycles)
    if simulator == "amaranth":
        res = run_amaranth(top, job)
    elif simulator == "verilator":
        res = run_verilator(verilog.convert(top, name=name, emit_src=False), name, job)
    else:
        raise ValueError(f"unknown simulator {simulator}")
    return BlockRun(beats_to_frames(res.out_beats, out_type, out_per_beat, out_elements), res)
