"""Add of two tensors (residual joins) and channel Concat, QDQ form: a pending
:class:`Joined` that the next QuantizeLinear closes into an ``AddOp`` / ``ConcatOp``.
A Concat of constants (a shape computed by ``Shape → Gather → Unsqueeze → Concat``) is
evaluated at import."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from hwgen.dataflow.context import REGISTRY, ImportContext, Unsupported, check_attrs
from hwgen.dataflow.intgraph import IntGraph, int_op
from hwgen.dataflow.loader import Node
from hwgen.dataflow.lower import Block, Builder, Folding, beats_per_pixel, short_name
from hwgen.dataflow.ops_qdq import clamp_bounds, closed_nodes
from hwgen.dataflow.values import Const, Deq, Int, Pending, channel_last_order
from hwgen.errors import HwgenError
from hwgen.rtl_templates.add import AddParams, make_add_requant
from hwgen.rtl_templates.block import FoldSpace, divisors
from hwgen.rtl_templates.concat import ConcatParams, make_concat
from hwgen.rtl_templates.quant import Quantized


def _pixel_channels(ig: IntGraph, tensor: str) -> int:
    t = ig.tensors[tensor]
    return t.shape[0] if len(t.shape) in (2, 3) else t.size


class _Join:
    """What both joins share: one beat of PE elements per cycle, the input FIFOs sized by
    the builder."""
    inputs: list[str]
    output: str
    name: str
    nodes: list[str]
    kind = ""

    def fold_space(self, ig: IntGraph) -> FoldSpace:
        out = ig.tensors[self.output]
        return FoldSpace(divisors(self.channels(ig)), (1,), lambda pe, simd: out.size // pe)

    def in_per_beat(self, f: Folding) -> int:
        return f.pe

    def lower(self, b: Builder, ig: IntGraph, f: Folding) -> str:
        tout = ig.tensors[self.output]
        p = self.params(ig, f.pe)
        srcs, fifos = zip(*(b.read(t, f.pe) for t in self.inputs))
        out = b.stream(short_name(self.output), tout.qtype, f.pe, tout.size)
        blk = b.add(Block(self.name, self.kind, p, list(srcs), [out], self.name,
                          tuple(self.nodes)))
        b.join(blk, list(fifos), beats_per_pixel(tout, f.pe))
        return out


@int_op
@dataclass
class AddOp(_Join):
    """Elementwise sum of two tensors with their own scales, requantized to the output's."""
    name: str
    nodes: list[str]
    inputs: list[str]
    output: str
    lo: int
    hi: int
    kind = "add"

    def channels(self, ig: IntGraph) -> int:
        return _pixel_channels(ig, self.output)

    def params(self, ig: IntGraph, pe: int) -> AddParams:
        ta, tb = (ig.tensors[t] for t in self.inputs)
        tout = ig.tensors[self.output]
        a, b, y = (Quantized(t.qtype, t.scale, t.zero_point) for t in (ta, tb, tout))
        p = make_add_requant(a, b, y, lo=self.lo, hi=self.hi, pe=pe)
        return dataclasses.replace(p, elements=tout.size, channels=self.channels(ig))


@int_op
@dataclass
class ConcatOp(_Join):
    """Channel concatenation of feature maps (inputs requantized if their scales differ)."""
    name: str
    nodes: list[str]
    inputs: list[str]
    output: str
    kind = "concat"

    def channels(self, ig: IntGraph) -> int:
        return int(np.gcd.reduce([ig.tensors[t].shape[0] for t in self.inputs]))

    def params(self, ig: IntGraph, pe: int) -> ConcatParams:
        if len(self.inputs) != 2:
            raise HwgenError(f"layer {self.name}: Concat of {len(self.inputs)} tensors; two "
                             f"are supported")
        t0, t1 = (ig.tensors[t] for t in self.inputs)
        tout = ig.tensors[self.output]
        x0, x1, y = (Quantized(t.qtype, t.scale, t.zero_point) for t in (t0, t1, tout))
        p = make_concat(x0, x1, y, c0=t0.shape[0], c1=t1.shape[0], pe=pe)
        return dataclasses.replace(p, pixels=tout.size // tout.shape[0])


@dataclass
class Joined(Pending):
    """Add or channel Concat of dequantized tensors, awaiting its QuantizeLinear."""
    tensors: list[str]
    kind: str                      # "add" | "concat"
    shape: tuple[int, ...]
    nodes: list[str]
    clip_lo: float = -np.inf
    clip_hi: float = np.inf
    order: np.ndarray | None = None   # add: the inputs' stream order (elementwise, kept)

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
        order = self.order if self.kind == "add" else channel_last_order(self.shape)
        return Int(out, self.shape, order)


def add_tensors(ctx: ImportContext, node: Node, a: Deq, b: Deq):
    if a.shape != b.shape:
        raise Unsupported(f"adding tensors of shapes {list(a.shape)} and {list(b.shape)}: "
                          f"broadcasting is not supported")
    if not same_order(a, b):
        raise Unsupported("its inputs are streamed in different element orders")
    ctx.set(node, Joined([a.tensor, b.tensor], "add", a.shape, [node.label], order=a.order))


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
    if not all(isinstance(x, Deq) and len(x.shape) in (2, 3) for x in xs) or \
            len({len(x.shape) for x in xs}) != 1 or \
            not all(np.array_equal(x.order, channel_last_order(x.shape)) for x in xs):
        raise Unsupported("only Concat of quantized [N, C, H, W] or [N, C, L] feature maps "
                          "(streamed channel-last) is supported")
    axis = int(node.attrs["axis"]) % (len(xs[0].shape) + 1)
    if axis != 1:
        raise Unsupported(f"Concat along axis {axis}: only the channel axis 1 is supported")
    if len({x.shape[1:] for x in xs}) != 1:
        raise Unsupported("Concat inputs differ in their spatial size")
    shape = (sum(x.shape[0] for x in xs),) + xs[0].shape[1:]
    ctx.set(node, Joined([x.tensor for x in xs], "concat", shape, [node.label]))


def same_order(a, b) -> bool:
    """Whether two values stream their elements in the same order."""
    return (a.order is None and b.order is None) or (
        a.order is not None and b.order is not None and np.array_equal(a.order, b.order))


for _v in (4, 11, 13):
    REGISTRY.register("", "Concat", _v)(concat)
