"""Dataflow graph → Amaranth design with the AXI4-Stream top level.

:func:`build_top` is the design; :func:`build_observed` is the same design with every
stream of the dataflow graph also driven out of the top module, for simulation only: per
stream ``<name>__valid``, ``<name>__ready`` and ``<name>__payload`` (``<name>`` the stream's
name as the manifest gives it, made a Verilog identifier by :func:`stream_ident`). The
blocks, their wiring and the AXI4-Stream ports are those of :func:`build_top`.
"""
from __future__ import annotations

from dataclasses import dataclass

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


    def stream_port(self, s: str):
        """The stream interface carrying stream ``s`` (its producer's port; the consumer's
        for the input stream)."""
        return self._producers[s] if s in self._producers else self._consumers[s]


def _instance_name(name: str, used: set, default: str = "block") -> str:
    """A Verilog-safe, unique instance name for a block (ONNX names may hold any text)."""
    base = "".join(c if c.isalnum() or c == "_" else "_" for c in name).strip("_") or default
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


def stream_idents(dfg: DataflowGraph) -> dict[str, str]:
    """Each stream's name as a Verilog identifier, unique, in the graph's stream order (a
    name that is one already is kept)."""
    used: set[str] = set()
    return {s: _instance_name(s, used, "stream") for s in dfg.streams}


@dataclass(frozen=True)
class Tap:
    """One observed stream: its name in the manifest, its Verilog identifier, payload bits."""
    stream: str
    ident: str
    bits: int


_AXIS_PORTS = ("s_axis_tdata", "s_axis_tvalid", "s_axis_tready", "s_axis_tlast",
               "m_axis_tdata", "m_axis_tvalid", "m_axis_tready", "m_axis_tlast")


class ObservedTop(wiring.Component):
    """:func:`build_top`'s design (as submodule ``design``) with its AXI4-Stream ports, and
    every stream of the graph driven out: ``<ident>__valid``, ``__ready``, ``__payload``."""

    def __init__(self, dfg: DataflowGraph):
        self.top = build_top(dfg)
        self.in_width, self.out_width = self.top.in_width, self.top.out_width
        core = self.top.inner
        self.taps = [Tap(s, ident, len(core.stream_port(s).payload))
                     for s, ident in stream_idents(dfg).items()]
        members = {p: self.top.signature.members[p] for p in _AXIS_PORTS}
        for t in self.taps:
            members[f"{t.ident}__valid"] = Out(1)
            members[f"{t.ident}__ready"] = Out(1)
            members[f"{t.ident}__payload"] = Out(t.bits)
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        m.submodules.design = top = self.top
        for p in _AXIS_PORTS:
            if self.signature.members[p].flow == In:
                m.d.comb += getattr(top, p).eq(getattr(self, p))
            else:
                m.d.comb += getattr(self, p).eq(getattr(top, p))
        for t in self.taps:
            port = top.inner.stream_port(t.stream)
            m.d.comb += [getattr(self, f"{t.ident}__valid").eq(port.valid),
                         getattr(self, f"{t.ident}__ready").eq(port.ready),
                         getattr(self, f"{t.ident}__payload").eq(port.payload)]
        return m


def build_observed(dfg: DataflowGraph) -> ObservedTop:
    """The design of :func:`build_top` with every stream observable (module notes)."""
    return ObservedTop(dfg)
