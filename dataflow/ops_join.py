"""Add of two tensors (residual joins) and channel Concat, QDQ form."""
from __future__ import annotations

from hwgen.dataflow.importer import REGISTRY, ImportContext, Unsupported
from hwgen.dataflow.loader import Node
from hwgen.dataflow.ops_qdq import check_attrs
from hwgen.dataflow.values import Deq, Joined


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
    import numpy as np
    return (a.order is None and b.order is None) or (
        a.order is not None and b.order is not None and np.array_equal(a.order, b.order))


for _v in (4, 11, 13):
    REGISTRY.register("", "Concat", _v)(concat)
