"""Integer graph + folding → dataflow graph: the blocks, their folding and the FIFOs between.

The folding choice lives in :func:`choose_folding` alone, so a smarter (budget-aware) search can
replace it without touching the rest.
"""
from __future__ import annotations

from dataclasses import dataclass

from dataflow.golden import matvec_params
from dataflow.intgraph import IntGraph, MatVec, QTensor
from hwgen.errors import HwgenError
from rtl_templates import fifo, mvau
from rtl_templates.cost import Cost

#: beats a FIFO between two blocks holds beyond one input vector of its consumer
FIFO_MARGIN = 2


@dataclass
class Folding:
    pe: int = 1
    simd: int = 1


@dataclass
class Block:
    """One hardware block of the dataflow chain."""
    name: str
    kind: str                       # "mvau" | "fifo"
    params: object                  # MVAUParams for "mvau"; (width, depth) for "fifo"
    in_per_beat: int                # elements per input beat
    out_per_beat: int               # elements per output beat
    cost: Cost
    onnx_nodes: tuple[str, ...] = ()

    def timing(self, in_first: int, in_last: int) -> tuple[int, int]:
        if self.kind == "mvau":
            return mvau.timing(self.params, in_first, in_last)
        return fifo.timing(in_first, in_last)


@dataclass
class DataflowGraph:
    blocks: list[Block]
    input: QTensor
    output: QTensor

    @property
    def in_per_beat(self) -> int:
        return self.blocks[0].in_per_beat

    @property
    def out_per_beat(self) -> int:
        return self.blocks[-1].out_per_beat

    @property
    def bottleneck(self) -> Block:
        return max(self.blocks, key=lambda b: b.cost.cycles)

    def latency(self) -> int:
        """First input beat to last output beat of one frame through the idle chain, input
        offered every cycle and output always ready: each block's timing model maps its
        input's first/last transfer cycles to its output's."""
        t = (0, self.input.size // self.in_per_beat - 1)
        for b in self.blocks:
            t = b.timing(*t)
        return t[1] + 1

    def estimate(self) -> dict:
        costs = [b.cost for b in self.blocks]
        return {
            "cycles_per_frame": self.bottleneck.cost.cycles,
            "bottleneck": self.bottleneck.name,
            "latency_cycles": self.latency(),
            "multipliers": sum(c.multipliers for c in costs),
            "memory_bits": sum(c.memory_bits for c in costs),
            "registers": sum(c.registers for c in costs),
        }


def choose_folding(ig: IntGraph, requested: dict[str, Folding] | None) -> dict[str, Folding]:
    """Per layer PE/SIMD: the requested values, else fully serial (PE = SIMD = 1)."""
    requested = dict(requested or {})
    names = [op.name for op in ig.ops]
    unknown = sorted(set(requested) - set(names))
    if unknown:
        raise HwgenError(f"folding names unknown layer(s) {', '.join(unknown)}; layers are "
                         f"{', '.join(names)}")
    return {n: requested.get(n, Folding()) for n in names}


def lower(ig: IntGraph, folding: dict[str, Folding] | None = None) -> DataflowGraph:
    fold = choose_folding(ig, folding)
    blocks: list[Block] = []
    for op in ig.ops:
        if not isinstance(op, MatVec):
            raise HwgenError(f"layer {op.name}: no hardware block for {type(op).__name__}")
        f = fold[op.name]
        mh, mw = op.weights.shape
        for what, v, dim in (("PE", f.pe, mh), ("SIMD", f.simd, mw)):
            if v < 1 or dim % v:
                raise HwgenError(f"layer {op.name}: {what}={v} must be a divisor of {dim}")
        p = matvec_params(ig, op, f.pe, f.simd)
        if blocks:
            prev = blocks[-1]
            if prev.out_per_beat != f.simd:
                raise HwgenError(f"layer {op.name}: SIMD={f.simd} must equal PE="
                                 f"{prev.out_per_beat} of the layer before it ({prev.name})")
            depth = p.sf + FIFO_MARGIN
            width = f.simd * p.in_type.bits
            blocks.append(Block(f"fifo_{prev.name}_{op.name}", "fifo", (width, depth),
                                f.simd, f.simd, fifo.cost(width, depth, p.sf)))
        blocks.append(Block(op.name, "mvau", p, f.simd, f.pe, mvau.cost(p), tuple(op.nodes)))
    return DataflowGraph(blocks, ig.tensors[ig.input], ig.tensors[ig.output])
