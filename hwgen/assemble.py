"""Dataflow graph → Amaranth design with the AXI4-Stream top level."""
from __future__ import annotations

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hwgen.dataflow.lower import DataflowGraph
from hwgen.rtl_templates.axis_top import AxisTop


def _ports(comp, name: str, n: int) -> list:
    """Stream ports of a block: ``i``/``o`` for one, ``i0``, ``i1``, … for several."""
    if n == 1 and name in comp.signature.members:
        return [getattr(comp, name)]
    return [getattr(comp, f"{name}{k}") for k in range(n)]


class Dataflow(wiring.Component):
    """The blocks of a dataflow graph, each stream wired from its producer to its consumer."""

    def __init__(self, dfg: DataflowGraph):
        self.dfg = dfg
        self.comps = [b.spec.component(b.params) for b in dfg.blocks]
        producers, consumers = {}, {}
        for b, c in zip(dfg.blocks, self.comps):
            for s, port in zip(b.outputs, _ports(c, "o", len(b.outputs))):
                producers[s] = port
            for s, port in zip(b.inputs, _ports(c, "i", len(b.inputs))):
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
