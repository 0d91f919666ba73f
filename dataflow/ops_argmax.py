"""ArgMax over the classes: the index of the largest element of a vector, as the graph's
output (one index per frame), in the ``argmax`` block (``rtl_templates/argmax.py``).

The input is a quantized tensor (QDQ: behind its DequantizeLinear; or the integers
themselves) whose elements other than along ``axis`` are one per sample: a ``[N, C]`` vector
or a ``[N, C, 1, 1]`` map. A quantized tensor's order is that of its real values (its scale
is positive), so the index is that of the dequantized values; ties follow
``select_last_index``. The result is an integer tensor of the index type (scale 1, zero point
0), which the graph returns as it is (``output.dequantized`` false).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hwgen.dataflow.context import REGISTRY, ImportContext, Unsupported, check_attrs
from hwgen.dataflow.intgraph import IntGraph, int_op
from hwgen.dataflow.loader import Node
from hwgen.dataflow.lower import Block, Builder, Folding, short_name
from hwgen.dataflow.values import Deq, Int
from hwgen.rtl_templates.argmax import ArgMaxParams, index_type
from hwgen.rtl_templates.block import FoldSpace, divisors


@int_op
@dataclass
class ArgMaxOp:
    """``y = argmax_c x[c]`` of a vector (first or ``last`` index among ties)."""
    name: str
    nodes: list[str]
    input: str
    output: str
    last: bool = False

    def channels(self, ig: IntGraph) -> int:
        return ig.tensors[self.input].size

    def fold_space(self, ig: IntGraph) -> FoldSpace:
        c = self.channels(ig)
        return FoldSpace(divisors(c), (1,), lambda pe, simd: c // pe)

    def in_per_beat(self, f: Folding) -> int:
        return f.pe

    def lower(self, b: Builder, ig: IntGraph, f: Folding) -> str:
        tin, tout = ig.tensors[self.input], ig.tensors[self.output]
        p = ArgMaxParams(tin.qtype, tin.size, f.pe, self.last)
        src, _ = b.read(self.input, f.pe)
        out = b.stream(short_name(self.output), tout.qtype, 1, 1)
        b.add(Block(self.name, "argmax", p, [src], [out], self.name, tuple(self.nodes)))
        return out


def argmax(ctx: ImportContext, node: Node):
    check_attrs(node, {"axis": None, "keepdims": lambda v: v in (0, 1),
                       "select_last_index": lambda v: v in (0, 1)})
    x = ctx.value(node, 0)
    if not isinstance(x, (Deq, Int)):
        raise Unsupported(f"its input is a {type(x).__name__}; ArgMax needs a quantized tensor")
    rank = len(x.shape) + 1
    axis = int(node.attrs.get("axis", 0))
    axis = axis + rank if axis < 0 else axis
    if axis == 0:
        raise Unsupported("ArgMax along the batch axis is not supported")
    others = [d for k, d in enumerate(x.shape) if k != axis - 1]
    if any(d != 1 for d in others):
        raise Unsupported(f"ArgMax of a [N, {', '.join(map(str, x.shape))}] tensor along axis "
                          f"{axis}: only a vector of classes per sample is supported")
    if x.order is not None and not np.array_equal(x.order, np.arange(len(x.order))):
        raise Unsupported("its input is streamed in an order other than its own")
    if node.outputs[0] not in {o.name for o in ctx.graph.outputs}:
        raise Unsupported("ArgMax is supported as the graph output only")
    keep = int(node.attrs.get("keepdims", 1)) == 1
    shape = tuple(1 if k == axis - 1 else d for k, d in enumerate(x.shape)) if keep else \
        tuple(d for k, d in enumerate(x.shape) if k != axis - 1)
    c = int(np.prod(x.shape))
    out = ctx.new_tensor(node.outputs[0], shape or (1,), index_type(c), 1.0, 0)
    ctx.ig.ops.append(ArgMaxOp(node.label, [node.label], x.tensor, out,
                               bool(node.attrs.get("select_last_index", 0))))
    ctx.set(node, Int(out, shape or (1,), None))


for _v in (1, 11, 12, 13):
    REGISTRY.register("", "ArgMax", _v)(argmax)

__all__ = ["ArgMaxOp"]
