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
from hwgen.dataflow.lower import FIFO_MARGIN, Block, Builder, Folding, beats_per_pixel, short_name
from hwgen.dataflow.ops_qdq import clamp_bounds, closed_nodes
from hwgen.dataflow.values import Const, Deq, Int, Pending, channel_last_order
from hwgen.rtl_templates.add import AddParams, make_add_requant
from hwgen.rtl_templates.bcast import BcastParams
from hwgen.rtl_templates.block import FoldSpace, divisors
from hwgen.rtl_templates.concat import ConcatParams, make_concat
from hwgen.rtl_templates.fifo import FIFOParams
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
    """Elementwise sum of two tensors with their own scales, requantized to the output's; with
    ``negate`` (0 or 1) that input is subtracted instead (a Sub, in the adder's ``"exact"``
    fixed-point form: onnxruntime runs a QDQ Sub in float32)."""
    name: str
    nodes: list[str]
    inputs: list[str]
    output: str
    lo: int
    hi: int
    negate: int = -1
    kind = "add"

    def channels(self, ig: IntGraph) -> int:
        return _pixel_channels(ig, self.output)

    def broadcast(self, ig: IntGraph) -> bool:
        """The second input is one value per channel, broadcast over the pixels."""
        return ig.tensors[self.inputs[1]].size != ig.tensors[self.output].size

    def fold_space(self, ig: IntGraph) -> FoldSpace:
        if not self.broadcast(ig):
            return super().fold_space(ig)
        out, c = ig.tensors[self.output], self.channels(ig)
        return FoldSpace(divisors(c), (1,), lambda pe, simd: (out.size + c) // pe)

    def lower(self, b: Builder, ig: IntGraph, f: Folding) -> str:
        if not self.broadcast(ig):
            return super().lower(b, ig, f)
        tout, ts = ig.tensors[self.output], ig.tensors[self.inputs[1]]
        c = self.channels(ig)
        src0, fifo0 = b.read(self.inputs[0], f.pe)
        vec, _ = b.read(self.inputs[1], f.pe)
        wide = b.stream(f"{short_name(self.inputs[1])}_bcast", ts.qtype, f.pe, tout.size)
        b.add(Block(f"{self.name}_bcast", "bcast", BcastParams(ts.qtype, c, tout.size // c, f.pe),
                    [vec], [wide], self.name, tuple(self.nodes)))
        s = b.streams[wide]
        src1 = b.stream(f"{short_name(self.inputs[1])}_bcast_q", s.qtype, f.pe, s.elements)
        fifo1 = b.add(Block(f"fifo_{self.name}_bcast", "fifo",
                            FIFOParams(s.width, FIFO_MARGIN, s.beats), [wide], [src1]))
        out = b.stream(short_name(self.output), tout.qtype, f.pe, tout.size)
        blk = b.add(Block(self.name, self.kind, self.params(ig, f.pe), [src0, src1], [out],
                          self.name, tuple(self.nodes)))
        b.join(blk, [fifo0, fifo1], beats_per_pixel(tout, f.pe), hold_frame=(0,))
        return out

    def params(self, ig: IntGraph, pe: int) -> AddParams:
        ta, tb = (ig.tensors[t] for t in self.inputs)
        tout = ig.tensors[self.output]
        a, b, y = (Quantized(t.qtype, t.scale, t.zero_point) for t in (ta, tb, tout))
        if self.negate < 0:
            p = make_add_requant(a, b, y, lo=self.lo, hi=self.hi, pe=pe)
        else:
            p = make_add_requant(a, b, y, lo=self.lo, hi=self.hi, pe=pe, semantics="exact",
                                 neg_a=self.negate == 0, neg_b=self.negate == 1)
        return dataclasses.replace(p, elements=tout.size, channels=self.channels(ig))


@int_op
@dataclass
class ConcatOp(_Join):
    """Channel concatenation of feature maps (inputs requantized if their scales differ).
    Two inputs are one ``concat`` block; ``n > 2`` a chain of ``n - 1`` of them, each
    appending one more input to what the one before wrote (already in the output's
    quantization, so every input is requantized once, as onnxruntime does)."""
    name: str
    nodes: list[str]
    inputs: list[str]
    output: str
    kind = "concat"

    def channels(self, ig: IntGraph) -> int:
        return int(np.gcd.reduce([ig.tensors[t].shape[0] for t in self.inputs]))

    def params(self, ig: IntGraph, pe: int, k: int = 1) -> ConcatParams:
        """The ``k``-th block of the chain (1: the first two inputs; ``k``: what the blocks
        before wrote and input ``k``)."""
        tout = ig.tensors[self.output]
        y = Quantized(tout.qtype, tout.scale, tout.zero_point)
        tk = ig.tensors[self.inputs[k]]
        xk = Quantized(tk.qtype, tk.scale, tk.zero_point)
        if k == 1:
            t0 = ig.tensors[self.inputs[0]]
            x0, c0 = Quantized(t0.qtype, t0.scale, t0.zero_point), t0.shape[0]
        else:
            x0, c0 = y, sum(ig.tensors[t].shape[0] for t in self.inputs[:k])
        p = make_concat(x0, xk, y, c0=c0, c1=tk.shape[0], pe=pe)
        return dataclasses.replace(p, pixels=tout.size // tout.shape[0])

    def lower(self, b: Builder, ig: IntGraph, f: Folding) -> str:
        if len(self.inputs) == 2:
            return super().lower(b, ig, f)
        tout = ig.tensors[self.output]
        bpp = beats_per_pixel(tout, f.pe)
        prev, prev_fifo = b.read(self.inputs[0], f.pe)
        for k in range(1, len(self.inputs)):
            p = self.params(ig, f.pe, k)
            src, fifo = b.read(self.inputs[k], f.pe)
            last = k == len(self.inputs) - 1
            out = b.stream(short_name(self.output) + ("" if last else f"_part{k}"),
                           tout.qtype, f.pe, p.pixels * (p.c0 + p.c1))
            blk = b.add(Block(self.name if last else f"{self.name}_part{k}", self.kind, p,
                              [prev, src], [out], self.name, tuple(self.nodes)))
            b.join(blk, [prev_fifo, fifo], bpp)
            if not last:
                s = b.streams[out]
                prev = b.stream(f"{short_name(self.output)}_part{k}_q", s.qtype, f.pe,
                                s.elements)
                prev_fifo = b.add(Block(f"fifo_{self.name}_part{k}", "fifo",
                                        FIFOParams(s.width, FIFO_MARGIN, s.beats), [out],
                                        [prev]))
        return out


@dataclass
class Joined(Pending):
    """Add or channel Concat of dequantized tensors, awaiting its QuantizeLinear."""
    tensors: list[str]
    kind: str                      # "add" | "concat"
    shape: tuple[int, ...]
    nodes: list[str]
    clip_lo: float = -np.inf
    clip_hi: float = np.inf
    negate: int = -1               # "add": the input subtracted (a Sub), -1 none
    order: np.ndarray | None = None   # add: the inputs' stream order (elementwise, kept)

    def close(self, ctx, name, qtype, s, zp, closing) -> Int:
        lo, hi = clamp_bounds(qtype, s, zp, self.clip_lo, self.clip_hi)
        out = ctx.new_tensor(name, self.shape, qtype, s, zp)
        nodes = closed_nodes(self.nodes, closing)
        if self.kind == "add":
            ctx.ig.ops.append(AddOp(self.nodes[0], nodes, list(self.tensors), out, lo, hi,
                                    self.negate))
        else:
            if (lo, hi) != (qtype.lo, qtype.hi):
                raise Unsupported("a clip/relu fused after Concat is not supported")
            ctx.ig.ops.append(ConcatOp(self.nodes[0], nodes, list(self.tensors), out))
        order = self.order if self.kind == "add" else channel_last_order(self.shape)
        return Int(out, self.shape, order)


def add_tensors(ctx: ImportContext, node: Node, a: Deq, b: Deq, subtract: bool = False):
    """``a + b`` (``a - b`` with ``subtract``) of two dequantized tensors of one shape, or of
    a feature map and one value per channel."""
    what = "subtracting" if subtract else "adding"
    if a.shape != b.shape:
        pair = channel_vector(a, b)
        if pair is None:
            raise Unsupported(f"{what} tensors of shapes {list(a.shape)} and "
                              f"{list(b.shape)}: of broadcasts, only a feature map and one "
                              f"value per channel ([C, H, W] and [C, 1, 1]) are supported")
        # the vector is onnxruntime's broadcast operand B (QLinearAdd's scalar side)
        x, v = pair
        negate = (1 if x is a else 0) if subtract else -1
        ctx.set(node, Joined([x.tensor, v.tensor], "add", x.shape, [node.label],
                             negate=negate, order=x.order))
        return
    if not same_order(a, b):
        raise Unsupported("its inputs are streamed in different element orders")
    ctx.set(node, Joined([a.tensor, b.tensor], "add", a.shape, [node.label],
                         negate=1 if subtract else -1, order=a.order))


def sub(ctx: ImportContext, node: Node):
    check_attrs(node, {})
    a, b = ctx.value(node, 0), ctx.value(node, 1)
    if not (isinstance(a, Deq) and isinstance(b, Deq)):
        raise Unsupported("only the difference of two quantized tensors (DequantizeLinear "
                          "before both) is supported")
    add_tensors(ctx, node, a, b, subtract=True)


def channel_vector(a, b):
    """(feature map, vector) when one of two tensors is one value per channel of the other
    ([C, H, W] and [C, 1, 1]), both in their usual stream order; else None."""
    for x, v in ((a, b), (b, a)):
        xs, vs = tuple(x.shape), tuple(v.shape)
        if len(xs) == 3 and vs == (xs[0], 1, 1) and (vs != xs or x is a):
            x_order = np.arange(np.prod(xs)) if x.order is None else x.order
            if not np.array_equal(x_order, channel_last_order(xs)):
                continue
            if v.order is not None and not np.array_equal(v.order, np.arange(xs[0])):
                continue
            return x, v
    return None


def concat(ctx: ImportContext, node: Node):
    check_attrs(node, {"axis": None})
    xs = [ctx.value(node, k) for k in range(len(node.inputs))]
    present = [x for x in xs if x is not None]
    if present and all(isinstance(x, Const) for x in present):
        # constant folding (a shape built by Shape/Gather/Unsqueeze/Concat)
        ctx.set(node, Const(np.concatenate([x.array for x in present],
                                           axis=int(node.attrs.get("axis", 0)))))
        return
    if len(xs) < 2:
        raise Unsupported(f"Concat of {len(xs)} tensor: at least two are needed")
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
for _v in (7, 13, 14):
    REGISTRY.register("", "Sub", _v)(sub)
