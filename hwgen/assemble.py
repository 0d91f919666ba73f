"""Dataflow graph → Amaranth design with the AXI4-Stream top level."""
from __future__ import annotations

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hwgen.dataflow.lower import Block, DataflowGraph
from hwgen.rtl_templates.axis_top import AxisTop
from hwgen.rtl_templates import add, concat, dwc, fork, gap, pool, swg, vvau
from hwgen.rtl_templates.fifo import StreamFIFO
from hwgen.rtl_templates.mvau import MVAU


def build_block(b: Block):
    p = b.params
    if b.kind == "mvau":
        return MVAU(p)
    if b.kind == "fifo":
        return StreamFIFO(*p)
    if b.kind == "fork":
        return fork.Fork(*p)
    if b.kind == "dwc":
        return dwc.DWC(p["bits"], p["in_elems"], p["out_elems"], p["frame"])
    component = {"swg": swg.SWG, "vvau": vvau.VVAU, "pool": pool.Pool, "gap": gap.GAP,
                 "add": add.AddBlock, "concat": concat.Concat}[b.kind]
    return component(p)


def _in_ports(b: Block, comp) -> list:
    return [comp.i] if len(b.inputs) == 1 else [getattr(comp, f"i{k}")
                                                  for k in range(len(b.inputs))]


def _out_ports(b: Block, comp) -> list:
    return [comp.o] if b.kind != "fork" else comp.outputs


class Dataflow(wiring.Component):
    """The blocks of a dataflow graph, each stream wired from its producer to its consumer."""

    def __init__(self, dfg: DataflowGraph):
        self.dfg = dfg
        self.comps = [build_block(b) for b in dfg.blocks]
        producers, consumers = {}, {}
        for b, c in zip(dfg.blocks, self.comps):
            for s, port in zip(b.outputs, _out_ports(b, c)):
                producers[s] = port
            for s, port in zip(b.inputs, _in_ports(b, c)):
                consumers[s] = port
        self._producers, self._consumers = producers, consumers
        super().__init__({"i": In(consumers[dfg.in_stream].signature.flip()),
                          "o": Out(producers[dfg.out_stream].signature)})

    def elaborate(self, platform):
        m = Module()
        used = set()
        for b, c in zip(self.dfg.blocks, self.comps):
            m.submodules[_instance_name(b.name, used)] = c
        for s in self.dfg.streams:
            if s == self.dfg.in_stream:
                wiring.connect(m, wiring.flipped(self.i), self._consumers[s])
            elif s == self.dfg.out_stream:
                wiring.connect(m, self._producers[s], wiring.flipped(self.o))
            else:
                wiring.connect(m, self._producers[s], self._consumers[s])
        return m


def _instance_name(name: str, used: set) -> str:
    """A Verilog-safe, unique instance name for a block (ONNX names may hold any text)."""
    base = "".join(c if c.isalnum() or c == "_" else "_" for c in name).strip("_") or "block"
    if base[0].isdigit():
        base = f"b_{base}"
    cand, k = base, 1
    while cand in used:
        k += 1
        cand = f"{base}_{k}"
    used.add(cand)
    return cand


def build_top(dfg: DataflowGraph) -> AxisTop:
    out_beats = dfg.output.size // dfg.out_per_beat
    return AxisTop(Dataflow(dfg), out_beats)
