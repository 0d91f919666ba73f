"""Relu and Clip in QDQ form.

After a pending computation (a product, a pooling or a join) they narrow its clip range, so
the QuantizeLinear that closes it clamps. After a dequantized tensor they make a pending
:class:`Clipped`, which the next QuantizeLinear (with unchanged quantization) folds into the
clamp of the op that wrote the tensor.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from hwgen.dataflow.context import REGISTRY, ImportContext, Unsupported, check_attrs
from hwgen.dataflow.loader import Node
from hwgen.dataflow.ops_qdq import clamp_bounds, closed_nodes
from hwgen.dataflow.values import Deq, Int, Pending


@dataclass
class Clipped(Pending):
    """Relu/Clip of a dequantized tensor, awaiting its QuantizeLinear."""
    tensor: str
    shape: tuple[int, ...]
    node: str
    clip_lo: float = -np.inf
    clip_hi: float = np.inf
    order: np.ndarray | None = None

    def close(self, ctx, name, qtype, s, zp, closing) -> Int:
        """Relu/Clip between a DequantizeLinear and a QuantizeLinear with the same parameters
        is a clamp: fold it into the requantizer of the op that produced the tensor."""
        t = ctx.ig.tensors[self.tensor]
        if (t.qtype, np.float32(t.scale), t.zero_point) != (qtype, s, zp):
            raise Unsupported(f"the clip/relu '{self.node}' changes the quantization from scale "
                              f"{t.scale} zero point {t.zero_point} to scale {s} zero point "
                              f"{zp}; only a clamp with unchanged parameters is supported")
        prod = ctx.ig.producer(self.tensor)
        if prod is None or not (hasattr(prod, "requant") or hasattr(prod, "lo")):
            raise Unsupported(f"the clip/relu '{self.node}' does not follow a layer it can fold "
                              f"into")
        if ctx.ig.consumers(self.tensor) or _used_elsewhere(ctx, self.tensor):
            raise Unsupported(f"the clip/relu '{self.node}' input is also used unclamped "
                              f"elsewhere")
        lo, hi = clamp_bounds(qtype, s, zp, self.clip_lo, self.clip_hi)
        if hasattr(prod, "lo"):
            prod.lo, prod.hi = max(prod.lo, lo), min(prod.hi, hi)
        else:
            rq = prod.requant
            prod.requant = dataclasses.replace(rq, lo=max(rq.lo, lo), hi=min(rq.hi, hi))
        prod.nodes += closed_nodes([self.node], closing)
        return Int(self.tensor, self.shape, self.order)


def _used_elsewhere(ctx, tensor: str) -> bool:
    """Whether ONNX tensors holding ``tensor`` (its Q output / DQ output) have other uses."""
    names = [n for n, v in ctx.values.items() if isinstance(v, (Int, Deq)) and v.tensor == tensor]
    return sum(ctx.n_consumers.get(n, 0) for n in names) > 2 or any(
        n in {o.name for o in ctx.graph.outputs} for n in names)


def clip_into(ctx: ImportContext, node: Node, lo: float, hi: float):
    x = ctx.value(node, 0)
    if isinstance(x, Clipped):
        ctx.set(node, Clipped(x.tensor, x.shape, x.node, max(x.clip_lo, lo),
                              min(x.clip_hi, hi), x.order))
    elif isinstance(x, Pending):   # a product, pooling or join: its clip range narrows
        x.clip_lo, x.clip_hi = max(x.clip_lo, lo), min(x.clip_hi, hi)
        x.nodes.append(node.label)
        ctx.set(node, x)
    elif isinstance(x, Deq):
        ctx.set(node, Clipped(x.tensor, x.shape, node.label, lo, hi, x.order))
    else:
        raise Unsupported(f"its input is a {type(x).__name__}; a quantized tensor or a "
                          f"Gemm/MatMul result is needed")


def relu(ctx: ImportContext, node: Node):
    check_attrs(node, {})
    clip_into(ctx, node, 0.0, np.inf)


def clip(ctx: ImportContext, node: Node):
    if node.since_version < 11:
        check_attrs(node, {"min": None, "max": None})
        lo, hi = node.attrs.get("min", -np.inf), node.attrs.get("max", np.inf)
    else:
        check_attrs(node, {})
        lo_a, hi_a = ctx.const(node, 1, "min"), ctx.const(node, 2, "max")
        lo = -np.inf if lo_a is None else float(np.asarray(lo_a).reshape(-1)[0])
        hi = np.inf if hi_a is None else float(np.asarray(hi_a).reshape(-1)[0])
    clip_into(ctx, node, float(lo), float(hi))


for _v in (6, 13, 14):
    REGISTRY.register("", "Relu", _v)(relu)
for _v in (6, 11, 12, 13):
    REGISTRY.register("", "Clip", _v)(clip)
