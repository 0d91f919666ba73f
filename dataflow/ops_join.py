"""Add of two tensors (residual joins) and channel Concat, QDQ form: a pending
:class:`Joined` that the next QuantizeLinear closes into an ``AddOp`` / ``ConcatOp``.
A Concat of constants (a shape computed by ``Shape → Gather → Unsqueeze → Concat``) is
evaluated at import."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hwgen.dataflow.context import REGISTRY, ImportContext, Unsupported, check_attrs
from hwgen.dataflow.intgraph import AddOp, ConcatOp
from hwgen.dataflow.loader import Node
from hwgen.dataflow.ops_qdq import clamp_bounds, closed_nodes
from hwgen.dataflow.values import Const, Deq, Int, Pending, channel_last_order


@dataclass
class Joined(Pending):
    """Add or channel Concat of dequantized tensors, awaiting its QuantizeLinear."""
    tensors: list[str]
    kind: str                      # "add" | "concat"
    shape: tuple[int, ...]
    nodes: list[str]
    clip_lo: float = -np.inf
    clip_hi: float = np.inf

    def close(self, ctx, name, qtype, s, zp, closing) -> Int:
        lo, hi = clamp_bounds(qtype, s, zp, self.clip_lo, self.clip_hi)
        out = ctx.new_tensor(name, self.shape, qtype, s, zp)
        nodes = closed_nodes(self.nodes, closing)
        if self.kind == "add":
            ctx.ig.ops.append(AddOp(self.nodes[0], nodes, list(self.tensors), out, lo, hi))
        else:
            if (lo, hi) != (qtype.lo, qtype.hi):
                raise Unsupported("a clip/relu fused after Concat is not supported")
            ctx.ig.ops.append(ConcatOp(self.nodes[0], nodes, list(self.tensors), out))
        return Int(out, self.shape, channel_last_order(self.shape))


def add_tensors(ctx: ImportContext, node: Node, a: Deq, b: Deq):
    if a.shape != b.shape:
        raise Unsupported(f"adding tensors of shapes {list(a.shape)} and {list(b.shape)}: "
                          f"broadcasting is not supported")
    if not _same_order(a, b):
        raise Unsupported("its inputs are streamed in different element orders")
    ctx.set(node, Joined([a.tensor, b.tensor], "add", a.shape, [node.label]))


def concat(ctx: ImportContext, node: Node):
    check_attrs(node, {"axis": None})
    xs = [ctx.value(node, k) for k in range(len(node.inputs))]
    present = [x for x in xs if x is not None]
    if present and all(isinstance(x, Const) for x in present):
        # constant folding (a shape built by Shape/Gather/Unsqueeze/Concat)
        ctx.set(node, Const(np.concatenate([x.array for x in present],
                                           axis=int(node.attrs.get("axis", 0)))))
        return
    if len(xs) != 2:
        raise Unsupported(f"Concat of {len(xs)} tensors: two are supported")
    if not all(isinstance(x, Deq) and len(x.shape) == 3 for x in xs):
        raise Unsupported("only Concat of quantized [N, C, H, W] feature maps is supported")
    axis = int(node.attrs["axis"]) % 4
    if axis != 1:
        raise Unsupported(f"Concat along axis {axis}: only the channel axis 1 is supported")
    if len({x.shape[1:] for x in xs}) != 1:
        raise Unsupported("Concat inputs differ in height or width")
    shape = (sum(x.shape[0] for x in xs),) + xs[0].shape[1:]
    ctx.set(node, Joined([x.tensor for x in xs], "concat", shape, [node.label]))


def _same_order(a, b) -> bool:
    return (a.order is None and b.order is None) or (
        a.order is not None and b.order is not None and np.array_equal(a.order, b.order))


for _v in (4, 11, 13):
    REGISTRY.register("", "Concat", _v)(concat)
