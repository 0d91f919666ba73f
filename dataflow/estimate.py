"""Cost estimates of an integer graph, also of a partial one (``hwgen inspect``).

:func:`estimate` lowers the integer graph exactly as :func:`dataflow.lower.lower` does — the
same folding choice, blocks, width converters, forks and FIFOs (sized from the cost models) —
but it tolerates a graph that ``hwgen inspect`` could only partly map:

* an op that cannot be lowered (a Concat of three tensors, ...) is reported and left out;
  its result becomes a source for the ops after it (``OpEstimate.after`` names it);
* tensors standing in for the outputs of unsupported nodes (``ImportReport.stand_ins``) are
  extra sources, offered like the graph input;
* without a graph output the whole-design latency is not given.

Matrix–vector units are costed without an int64 copy of their weights (their accumulator
width comes from :func:`dataflow.survey.row_bounds`, exactly equal to the MVAU's own
computation), so that ImageNet-scale layers are estimated in bounded memory. For a complete
graph the result equals ``lower()``'s block for block (tests check it against the manifest).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field

from hwgen.dataflow import lower as L
from hwgen.dataflow.intgraph import Conv, IntGraph, MatVec, op_inputs
from hwgen.rtl_templates.quant import signed_width
from hwgen.rtl_templates.quant import row_bounds
from hwgen.errors import HwgenError
from hwgen.rtl_templates import mvau, swg
from hwgen.rtl_templates.cost import Cost


class LeanMVAUParams(mvau.MVAUParams):
    """MVAU parameters whose weight-derived figures are computed once each, the accumulator
    range without an int64 copy of the weights (same values as
    :class:`rtl_templates.mvau.MVAUParams`: the MVAU's own properties are reused, except the
    accumulator bounds, computed by :func:`dataflow.survey.row_bounds`, which equals its
    ``dot_range``)."""

    @functools.cached_property
    def acc_bounds(self) -> tuple[int, int]:
        import numpy as np
        lo, hi = row_bounds(self.weights, self.in_type.lo, self.in_type.hi)
        b = np.asarray(self.bias, dtype=np.int64)
        return (int(min(lo.min(), (lo + b).min(), 0)), int(max(hi.max(), (hi + b).max(), 0)))

    @functools.cached_property
    def acc_bits(self) -> int:
        return signed_width(*self.acc_bounds)


def _cache_parent_property(cls, name: str):
    """Let ``cls`` compute its parent's property ``name`` once per instance."""
    prop = getattr(cls.__mro__[1], name, None)
    if isinstance(prop, property):
        cached = functools.cached_property(prop.fget)
        cached.__set_name__(cls, name)
        setattr(cls, name, cached)


for _name in ("datapath", "w_bits"):   # each scans every weight
    _cache_parent_property(LeanMVAUParams, _name)


@dataclass
class OpEstimate:
    """One integer op: its compute blocks (``blocks``: sliding window + MVAU, ...) and their
    summed cost (cycles: the slowest block), or why it has none (``error``, ``blocked_by``)."""
    name: str
    kind: str
    folding: L.Folding | None = None
    blocks: list = field(default_factory=list)
    error: str = ""
    blocked_by: str = ""
    after: str = ""          # downstream of this op, which could not be lowered

    @property
    def cost(self) -> Cost | None:
        if not self.blocks:
            return None
        cs = [b.cost for b in self.blocks]
        return Cost(cycles=max(c.cycles for c in cs), latency=sum(c.latency for c in cs),
                    multipliers=sum(c.multipliers for c in cs),
                    memory_bits=sum(c.memory_bits for c in cs),
                    registers=sum(c.registers for c in cs))


@dataclass
class Estimate:
    ops: dict[str, OpEstimate]
    blocks: list                       # every block, plumbing included
    complete: bool                     # the whole graph lowered (input to output)
    totals: dict                       # as DataflowGraph.estimate(); latency None if partial
    folding: dict[str, L.Folding]
    dfg: L.DataflowGraph | None = None

    @property
    def plumbing(self) -> list:
        """FIFOs, forks and width converters (blocks of no layer)."""
        return [b for b in self.blocks if not b.layer]


def _lower_op(b: L._Builder, ig: IntGraph, op, f: L.Folding) -> str:
    """``lower._lower_op`` with :class:`LeanMVAUParams` for the matrix–vector units."""
    if isinstance(op, MatVec):
        tin, tout = ig.tensors[op.input], ig.tensors[op.output]
        p = LeanMVAUParams(op.weights, op.bias, op.requant, tin.qtype, tout.qtype, f.pe, f.simd)
        src, _ = b.read(op.input, f.simd, p.sf + L.FIFO_MARGIN if p.nf > 1 else L.FIFO_MARGIN)
        out = b.stream(L._short(op.output), tout.qtype, f.pe, tout.size)
        b.add(L.Block(op.name, "mvau", p, [src], [out], mvau.cost(p), op.name, tuple(op.nodes)))
        return out
    if isinstance(op, Conv) and not op.depthwise:
        tin, tout = ig.tensors[op.input], ig.tensors[op.output]
        c, h, w = op.window.in_shape
        oh, ow = op.window.out_hw
        sp = swg.SWGParams((h, w, c), op.window.kernel, op.window.stride, op.window.pads,
                           tin.zero_point, tin.qtype, f.simd, False)
        src, _ = b.read(op.input, f.simd, L._row_beats(sp))
        win = b.stream(f"{L._short(op.output)}_win", tin.qtype, f.simd,
                       oh * ow * op.window.kernel[0] * op.window.kernel[1] * c)
        nodes = tuple(op.nodes)
        b.add(L.Block(f"{op.name}_swg", "swg", sp, [src], [win], swg.cost(sp), op.name, nodes))
        out = b.stream(L._short(op.output), tout.qtype, f.pe, tout.size)
        p = LeanMVAUParams(op.weights, op.bias, op.requant, tin.qtype, tout.qtype, f.pe, f.simd)
        b.add(L.Block(op.name, "mvau", p, [win], [out], mvau.cost(p, oh * ow), op.name, nodes,
                      vectors=oh * ow))
        return out
    return L._lower_op(b, ig, op, f)


def _first_reader(ig: IntGraph, tensor: str):
    return next((op for op in ig.ops if tensor in op_inputs(op)), None)


def estimate(ig: IntGraph, folding: dict[str, L.Folding] | None = None,
             target_cycles: int | None = L.DEFAULT_TARGET_CYCLES,
             sources: dict[str, str] | None = None) -> Estimate:
    """Per-op and whole-design estimates. ``folding`` fixes layers (unknown names are an
    error, as in ``lower``); ``sources``: stand-in tensors (→ the node they replace)."""
    sources = dict(sources or {})
    fold = L.choose_folding(ig, folding, target_cycles)
    ops = {op.name: OpEstimate(op.name, type(op).__name__, fold[op.name]) for op in ig.ops}
    b = L._Builder(ig, fold)
    readers: dict[str, int] = {}
    for op in ig.ops:
        for t in op_inputs(op):
            readers[t] = readers.get(t, 0) + 1
    if ig.output:
        readers[ig.output] = readers.get(ig.output, 0) + 1

    starts = []

    def source(t: str, name: str, after: int = 0):
        reader = next((op for op in ig.ops[after:] if t in op_inputs(op)), None)
        if reader is None:
            return
        qt = ig.tensors[t]
        s = b.stream(name, qt.qtype, L._in_per_beat(ig, reader, fold[reader.name]), qt.size)
        b.produce(t, s, readers.get(t, 0))
        starts.append(s)

    if ig.input:
        source(ig.input, "input")
    for t in sources:
        if t != ig.input:
            source(t, f"standin_{L._short(t)}")
    after: dict[str, str] = {}               # tensor → the op that failed upstream of it
    failed = False
    for k, op in enumerate(ig.ops):
        e = ops[op.name]
        e.after = next((after[t] for t in op_inputs(op) if t in after), "")
        if e.after:
            after[op.output] = e.after
        if any(t not in b.pending for t in op_inputs(op)):
            e.blocked_by = "(no source)"
            continue
        saved = (len(b.blocks), dict(b.streams), len(b.join_fifos),
                 {k: list(v) for k, v in b.pending.items()})
        try:
            out = _lower_op(b, ig, op, fold[op.name])
            b.produce(op.output, out, readers.get(op.output, 0))
        except (HwgenError, ValueError) as err:
            # left out: its result becomes a source, like a stand-in, for the ops after it
            n, b.streams, nj, b.pending = saved
            del b.blocks[n:]
            del b.join_fifos[nj:]
            e.error = str(err)
            failed = True
            after.setdefault(op.output, op.name)
            source(op.output, f"standin_{L._short(op.output)}", k + 1)
            continue
        e.blocks = [blk for blk in b.blocks[saved[0]:] if blk.layer == op.name]

    complete = bool(ig.output) and not failed and not sources and ig.output in b.pending \
        and bool(b.pending[ig.output]) and bool(ig.ops)
    dfg = None
    if b.blocks:
        tin = ig.tensors[ig.input] if ig.input else None
        out_t = ig.tensors[ig.output] if ig.output else None
        out_stream = b.pending[ig.output].pop(0) if complete else starts[0]
        dfg = L.DataflowGraph(b.blocks, b.streams, tin, out_t, starts[0], out_stream, fold)
        if len(starts) > 1:  # every source offers its first beat at cycle 0
            dfg.stream_times = functools.partial(_stream_times, dfg, starts)
        L._size_join_fifos(dfg, b.join_fifos)
    if complete:
        totals = dfg.estimate()
    elif b.blocks:
        neck = max(b.blocks, key=lambda blk: blk.cost.cycles)
        totals = {"cycles_per_frame": neck.cost.cycles, "bottleneck": neck.name,
                  "latency_cycles": None,
                  "multipliers": sum(blk.cost.multipliers for blk in b.blocks),
                  "memory_bits": sum(blk.cost.memory_bits for blk in b.blocks),
                  "registers": sum(blk.cost.registers for blk in b.blocks)}
    else:
        totals = {"cycles_per_frame": 0, "bottleneck": None, "latency_cycles": None,
                  "multipliers": 0, "memory_bits": 0, "registers": 0}
    return Estimate(ops, list(b.blocks), complete, totals, fold, dfg if complete else None)


def _stream_times(dfg: L.DataflowGraph, starts: list[str]) -> dict:
    """DataflowGraph.stream_times with several sources, each offered from cycle 0."""
    t = {s: (0, dfg.streams[s].beats - 1) for s in starts}
    for blk in dfg.blocks:
        first = max(t[s][0] for s in blk.inputs)
        last = max(t[s][1] for s in blk.inputs)
        out = blk.timing(first, last)
        for s in blk.outputs:
            t[s] = out
    return t
