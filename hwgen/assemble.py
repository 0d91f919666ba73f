"""Dataflow graph → Amaranth design with the AXI4-Stream top level."""
from __future__ import annotations

from dataflow.lower import Block, DataflowGraph
from hwgen.top import AxisTop, Chain
from rtl_templates.fifo import StreamFIFO
from rtl_templates.mvau import MVAU


def build_block(b: Block):
    if b.kind == "mvau":
        return MVAU(b.params)
    if b.kind == "fifo":
        width, depth = b.params
        return StreamFIFO(width, depth)
    raise ValueError(f"unknown block kind {b.kind}")


def build_top(dfg: DataflowGraph) -> AxisTop:
    out_beats = dfg.output.size // dfg.out_per_beat
    return AxisTop(Chain([build_block(b) for b in dfg.blocks]), out_beats)
