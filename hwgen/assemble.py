"""Dataflow graph → Amaranth design with the AXI4-Stream top level, and its Verilog.

:func:`build_top` gives the whole design as one Amaranth component (for simulation in
Python). :func:`to_verilog` gives the Verilog that ``hwgen compile`` writes: every distinct
block (kind and parameters; equal blocks share one module) is converted to RTLIL on its own,
in parallel and through the on-disk cache of :mod:`hwgen.blockcache`, under a module name made
of its kind and a digest of its parameters; the top (:class:`AxisTop` around
:class:`InstanceDataflow`) instantiates those modules and wires the streams as
:class:`Dataflow` does; one Yosys run turns the top and the block modules (sorted by name)
into Verilog.

:func:`build_observed` is the design of :func:`build_top` with every stream of the dataflow
graph also driven out of the top module, for simulation only: per stream ``<name>__valid``,
``<name>__ready`` and ``<name>__payload`` (``<name>`` the stream's name as the manifest gives
it, made a Verilog identifier by :func:`stream_idents`). The blocks, their wiring and the
AXI4-Stream ports are those of :func:`build_top`.
"""
from __future__ import annotations

import multiprocessing
import os
import re
import signal
import sys
from dataclasses import dataclass

from amaranth.back import rtlil, verilog
from amaranth.hdl import Cat, ClockSignal, Instance, Module, ResetSignal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hwgen.blockcache import BlockCache, entry_key, params_digest
from hwgen.dataflow.lower import DataflowGraph
from hwgen.errors import HwgenError
from hwgen.rtl_templates.axis_top import AxisTop
from hwgen.rtl_templates.block import block_spec
from hwgen.rtl_templates.memory import strip_ram_init
from hwgen.rtl_templates.spram import strip_load_init


def _ports(comp, name: str, n: int) -> list:
    """Stream ports of a block: ``i``/``o`` for one, ``i0``, ``i1``, … for several."""
    if n == 1 and name in comp.signature.members:
        return [getattr(comp, name)]
    return [getattr(comp, f"{name}{k}") for k in range(n)]


class _Wired(wiring.Component):
    """The streams of a dataflow graph, each wired from its producer to its consumer;
    ``self.parts[k]`` stands for block ``k`` (a component, or an interface of one)."""

    def __init__(self, dfg: DataflowGraph, parts: list):
        self.dfg, self.parts = dfg, parts
        producers, consumers = {}, {}
        for b, c in zip(dfg.blocks, parts):
            for s, port in zip(b.outputs, _ports(c, "o", len(b.outputs))):
                producers[s] = port
            for s, port in zip(b.inputs, _ports(c, "i", len(b.inputs))):
                consumers[s] = port
        self._producers, self._consumers = producers, consumers
        # blocks with memories loaded after reset, in the weight-load chain's order
        self.loaders = [c for c in parts if "wl_i" in c.signature.members]
        members = {"i": In(consumers[dfg.in_stream].signature.flip()),
                   "o": Out(producers[dfg.out_stream].signature)}
        if self.loaders:
            members.update(wl=In(self.loaders[0].wl_i.signature.flip()), loaded=Out(1))
        super().__init__(members)

    def stream_port(self, s: str):
        """The stream interface carrying stream ``s`` (its producer's port; the consumer's
        for the input stream)."""
        return self._producers[s] if s in self._producers else self._consumers[s]

    def _connect(self, m: Module) -> None:
        for s in self.dfg.streams:
            if s == self.dfg.in_stream:
                wiring.connect(m, wiring.flipped(self.i), self._consumers[s])
            elif s == self.dfg.out_stream:
                wiring.connect(m, self._producers[s], wiring.flipped(self.o))
            else:
                wiring.connect(m, self._producers[s], self._consumers[s])
        if self.loaders:
            # the weight-load stream through every loader in turn; what the last one passes
            # on is dropped
            wiring.connect(m, wiring.flipped(self.wl), self.loaders[0].wl_i)
            for a, b in zip(self.loaders, self.loaders[1:]):
                wiring.connect(m, a.wl_o, b.wl_i)
            m.d.comb += [self.loaders[-1].wl_o.ready.eq(1),
                         self.loaded.eq(Cat(c.loaded for c in self.loaders).all())]


class Dataflow(_Wired):
    """The blocks of a dataflow graph as Amaranth submodules, streams wired."""

    def __init__(self, dfg: DataflowGraph):
        self.comps = [b.spec.component(b.params) for b in dfg.blocks]
        super().__init__(dfg, self.comps)

    def elaborate(self, platform):
        m = Module()
        used = set()
        for b, c in zip(self.dfg.blocks, self.comps):
            m.submodules[_instance_name(b.name, used)] = c
        self._connect(m)
        return m


class InstanceDataflow(_Wired):
    """The blocks of a dataflow graph as instances of the Verilog modules ``modules[k]``
    (whose ports ``ports[k]`` were read from their Verilog), streams wired."""

    def __init__(self, dfg: DataflowGraph, modules: list[str], ports: list[set[str]]):
        self.modules, self.port_names = modules, ports
        self.comps = [b.spec.component(b.params) for b in dfg.blocks]
        for c in self.comps:                 # built for their signatures only
            c._MustUse__silence = True
        used = set()
        self.names = [_instance_name(b.name, used) for b in dfg.blocks]
        super().__init__(dfg, [c.signature.create(path=(n,))
                               for c, n in zip(self.comps, self.names)])

    def elaborate(self, platform):
        m = Module()
        for b, comp, part, mod, names, inst in zip(self.dfg.blocks, self.comps, self.parts,
                                                   self.modules, self.port_names, self.names):
            conns, seen = {}, set()
            for path, member, value in comp.signature.flatten(part):
                port = "__".join(str(p) for p in path)
                conns[("o_" if member.flow == Out else "i_") + port] = value
                seen.add(port)
            for port, sig in (("clk", ClockSignal()), ("rst", ResetSignal())):
                if port in names:
                    conns["i_" + port] = sig
                    seen.add(port)
            if seen != names:
                raise HwgenError(f"block {b.name} ({b.kind}): the ports of module {mod} "
                                 f"({sorted(names)}) differ from its signature "
                                 f"({sorted(seen)})")
            m.submodules[inst] = Instance(mod, **conns)
        self._connect(m)
        return m


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
_WLOAD_PORTS = ("s_wload_tdata", "s_wload_tvalid", "s_wload_tready")


class ObservedTop(wiring.Component):
    """:func:`build_top`'s design (as submodule ``design``) with its AXI4-Stream ports, and
    every stream of the graph driven out: ``<ident>__valid``, ``__ready``, ``__payload``."""

    def __init__(self, dfg: DataflowGraph):
        self.top = build_top(dfg)
        self.in_width, self.out_width = self.top.in_width, self.top.out_width
        core = self.top.inner
        self.taps = [Tap(s, ident, len(core.stream_port(s).payload))
                     for s, ident in stream_idents(dfg).items()]
        self.ports = _AXIS_PORTS + (_WLOAD_PORTS if self.top.loads else ())
        members = {p: self.top.signature.members[p] for p in self.ports}
        for t in self.taps:
            members[f"{t.ident}__valid"] = Out(1)
            members[f"{t.ident}__ready"] = Out(1)
            members[f"{t.ident}__payload"] = Out(t.bits)
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        m.submodules.design = top = self.top
        for p in self.ports:
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


# ------------------------------------------------------------------ per-block RTLIL

def module_name(kind: str, digest: str) -> str:
    """The Verilog module name of a block: its kind and the start of its parameter digest."""
    base = re.sub(r"[^A-Za-z0-9_]", "_", kind).strip("_") or "block"
    return f"hwgen_{base}_{digest[:16]}"


def block_rtlil(kind: str, params, module: str) -> str:
    """The RTLIL of one block, as module ``module`` (its submodules ``module.<name>``), not
    marked as a top module."""
    comp = block_spec(kind).component(params)
    text = strip_ram_init(strip_load_init(rtlil.convert(comp, name=module, emit_src=False)))
    return text.replace(f"attribute \\top 1\nmodule \\{module}\n", f"module \\{module}\n", 1)


_WORK: list = []          # (kind, params, module) of the blocks being converted (forked)


def _worker_start() -> None:
    # Ctrl-C is the parent's: it ends the pool, and the command with one line
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _convert(k: int) -> tuple[int, str]:
    kind, params, module = _WORK[k]
    return k, block_rtlil(kind, params, module)


def module_ports(text: str, module: str) -> set[str]:
    """The port names of ``module`` in ``text`` (RTLIL written by Amaranth)."""
    head = f"module \\{module}\n"
    start = text.find(head)
    if start < 0 or not (start == 0 or text[start - 1] == "\n"):
        raise HwgenError(f"the RTLIL of block module {module} does not define it")
    end = text.find("\nend\n", start)
    body = text[start:end if end >= 0 else len(text)]
    return set(re.findall(r"^ *wire (?:width \d+ )?(?:upto )?(?:signed )?"
                          r"(?:input|output|inout) \d+ +\\(\S+)$", body, re.M))


def default_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


class _Progress:
    """``converting blocks k/n`` on one line of stderr, when it is a terminal."""

    def __init__(self, total: int, enabled: bool | None):
        self.total, self.done = total, 0
        self.on = (sys.stderr.isatty() if enabled is None else enabled) and total > 0

    def step(self, n: int = 1) -> None:
        self.done += n
        if self.on:
            sys.stderr.write(f"\rconverting blocks to Verilog: {self.done}/{self.total}")
            if self.done >= self.total:
                sys.stderr.write("\n")
            sys.stderr.flush()


def block_modules(dfg: DataflowGraph, jobs: int | None = None, cache: bool = True,
                  progress: bool | None = None) -> tuple[list[str], dict[str, str]]:
    """The module name of every block of ``dfg`` and the RTLIL of each distinct module,
    converted in ``jobs`` processes (default: the usable cores) and taken from / stored in
    the block cache unless ``cache`` is false. The result does not depend on ``jobs`` nor on
    the cache's contents."""
    names, work, digests = [], {}, {}
    for b in dfg.blocks:
        digest = params_digest(b.kind, b.params)
        name = module_name(b.kind, digest)
        if digests.setdefault(name, digest) != digest:
            raise HwgenError(f"two different blocks share module name {name}")
        names.append(name)
        work.setdefault(name, (b.kind, b.params, name))
    store = BlockCache() if cache else None
    texts: dict[str, str] = {}
    todo = []
    for name in sorted(work):
        text = store.get(entry_key(name, digests[name])) if store else None
        if text is None:
            todo.append(work[name])
        else:
            texts[name] = text
    bar = _Progress(len(work), progress)
    bar.step(len(texts))
    jobs = default_jobs() if jobs is None else jobs
    if jobs < 1:
        raise HwgenError(f"jobs must be at least 1 (got {jobs})")
    results = _run(todo, min(jobs, len(todo)), bar)
    for (_, _, name), text in zip(todo, results):
        texts[name] = text
        if store:
            store.put(entry_key(name, digests[name]), text)
    if store and todo:
        store.evict()
    return names, texts


def _run(todo: list, jobs: int, bar: _Progress) -> list[str]:
    global _WORK
    out: list[str | None] = [None] * len(todo)
    if jobs <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        for k, (kind, params, name) in enumerate(todo):
            out[k] = block_rtlil(kind, params, name)
            bar.step()
        return out
    _WORK = todo
    try:
        with multiprocessing.get_context("fork").Pool(jobs, _worker_start) as pool:
            for k, text in pool.imap_unordered(_convert, range(len(todo))):
                out[k] = text
                bar.step()
    finally:
        _WORK = []
    return out


#: how ``hwgen compile`` converts a design: block by block (:func:`to_verilog`, the default)
#: or as one Amaranth design (:func:`whole_verilog`)
ASSEMBLIES = ("blocks", "whole")


def whole_verilog(dfg: DataflowGraph, name: str) -> tuple[str, AxisTop]:
    """The Verilog of :func:`build_top`'s design converted as one Amaranth design (slower
    than :func:`to_verilog`; the same hardware cycle for cycle), and its top component."""
    top = build_top(dfg)
    text = strip_ram_init(strip_load_init(rtlil.convert(top, name=name, emit_src=False)))
    return verilog._convert_rtlil_text(text), top


def to_verilog(dfg: DataflowGraph, name: str, jobs: int | None = None, cache: bool = True,
               progress: bool | None = None) -> tuple[str, AxisTop]:
    """The Verilog of the design of ``dfg`` with top module ``name`` (see the module notes),
    and its top component (for the port widths)."""
    names, texts = block_modules(dfg, jobs, cache, progress)
    ports = [module_ports(texts[n], n) for n in names]
    out_beats = dfg.output.size // dfg.out_per_beat
    top = AxisTop(InstanceDataflow(dfg, names, ports), out_beats)
    parts = [rtlil.convert(top, name=name, emit_src=False)]
    parts += [texts[n] for n in sorted(texts)]
    # one Yosys run for all modules (as verilog.convert runs it for one design): starting
    # Yosys costs more than converting most blocks
    return verilog._convert_rtlil_text("\n".join(parts)), top
