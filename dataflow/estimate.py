"""Cost estimates of an integer graph, also of a partial one (``hwgen inspect``).

:func:`estimate` is :func:`hwgen.dataflow.lower.lower` with its partial policy — the same
folding choice, blocks, width converters, forks and FIFOs (sized from the cost models) — read
out per op:

* an op that cannot be lowered (a Concat of three tensors, ...) is reported and left out;
  its result becomes a source for the ops after it (``OpEstimate.after`` names it);
* tensors standing in for the outputs of unsupported nodes (``ImportReport.stand_ins``) are
  extra sources, offered like the graph input;
* without a graph output the whole-design latency is not given.

For a complete graph the result equals ``lower()``'s block for block (tests check it against
the manifest).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from hwgen.dataflow.intgraph import IntGraph
from hwgen.dataflow.lower import DEFAULT_TARGET_CYCLES, DataflowGraph, Folding, lower
from hwgen.rtl_templates.cost import Cost
from hwgen.rtl_templates.resources import FAMILIES, add_muls, total


@dataclass
class OpEstimate:
    """One integer op: its compute blocks (``blocks``: sliding window + MVAU, ...) and their
    summed cost (cycles: the slowest block), or why it has none (``error``, ``blocked_by``)."""
    name: str
    kind: str
    folding: Folding | None = None
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
                    registers=sum(c.registers for c in cs),
                    multiplies=add_muls(*(c.multiplies for c in cs)),
                    by_family={f: total(c.resources(f) for c in cs) for f in FAMILIES})


@dataclass
class Estimate:
    ops: dict[str, OpEstimate]
    blocks: list                       # every block, plumbing included
    complete: bool                     # the whole graph lowered (input to output)
    totals: dict                       # as DataflowGraph.estimate(); latency None if partial
    folding: dict[str, Folding]
    dfg: DataflowGraph | None = None

    @property
    def plumbing(self) -> list:
        """FIFOs, forks and width converters (blocks of no layer)."""
        return [b for b in self.blocks if not b.layer]


def estimate(ig: IntGraph, folding: dict[str, Folding] | None = None,
             target_cycles: int | None = DEFAULT_TARGET_CYCLES,
             sources: dict[str, str] | None = None,
             dfg: DataflowGraph | None = None) -> Estimate:
    """Per-op and whole-design estimates. ``folding`` fixes layers (unknown names are an
    error, as in ``lower``); ``sources``: stand-in tensors (→ the node they replace).
    ``dfg``: the graph already lowered with the partial policy (then the other arguments are
    not used)."""
    if dfg is None:
        dfg = lower(ig, folding, target_cycles, partial=True, sources=sources)
    ops = {}
    for op in ig.ops:
        e = OpEstimate(op.name, type(op).__name__, dfg.folding[op.name],
                       error=dfg.op_errors.get(op.name, ""), after=dfg.op_after.get(op.name, ""))
        if op.name in dfg.op_unreached:
            e.blocked_by = "(no source)"
        e.blocks = [b for b in dfg.blocks if b.layer == op.name]
        ops[op.name] = e
    return Estimate(ops, list(dfg.blocks), dfg.complete, dfg.estimate(), dfg.folding,
                    dfg if dfg.complete else None)
