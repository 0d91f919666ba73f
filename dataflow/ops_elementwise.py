"""Elementwise products of two quantized tensors.

QDQ form ``DequantizeLinear ×2 → Mul → QuantizeLinear`` and onnxruntime's
``com.microsoft.QLinearMul``; a Mul by a constant scale of a pending layer (the integer
chains of ``MatMulInteger``) stays with :func:`dataflow.ops_qop.mul`. Two forms map:

* **a tensor times a function of itself** — ``x · f(x)`` where ``f(x)`` is a table activation
  of ``x`` (:mod:`dataflow.ops_table`): HardSwish and SiLU as onnxruntime's quantizer writes
  them (``HardSigmoid`` / ``Sigmoid`` then ``Mul``). The product is one more function of
  ``x`` alone, so the pair becomes one lookup table, filled with onnxruntime's own result of
  the Mul for every value of ``x`` and its table value (the table activation disappears when
  nothing else reads it). Exact against onnxruntime by construction.
* **a feature map times a per-channel vector** — ``x[C, H, W] · s[C, 1, 1]``
  (squeeze-and-excitation): a :class:`ChanMulOp`, the ``chanmul`` block
  (``rtl_templates/chanmul.py``), which holds the frame's vector and streams the feature map
  against it: the integer product, then the requantizer with the float32 multiplier
  ``f32(f32(sx·ss) / sy)`` as onnxruntime's QLinearMul kernel computes it. Two tensors of
  one shape (streamed in one order) are the same block with one pixel: the second tensor is
  held whole for the frame.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from onnx import helper

from hwgen.dataflow.context import REGISTRY, ImportContext, Unsupported, check_attrs
from hwgen.dataflow.intgraph import IntGraph, int_op
from hwgen.dataflow.loader import Node
from hwgen.dataflow.lower import Block, Builder, Folding, short_name
from hwgen.dataflow.ops_join import channel_vector, same_order
from hwgen.dataflow.ops_qdq import clamp_bounds, closed_nodes, out_params, qtype_of
from hwgen.dataflow.ops_qop import MS
from hwgen.dataflow.ops_qop import mul as scale_mul
from hwgen.dataflow.ops_table import TableOp, all_values, np_type, ort_eval, scalar_init
from hwgen.dataflow.values import Deq, Int, Pending
from hwgen.rtl_templates.block import FoldSpace, divisors
from hwgen.rtl_templates.chanmul import ChanMulParams
from hwgen.rtl_templates.quant import make_requant


@int_op
@dataclass
class ChanMulOp:
    """``y[c, h, w] = x[c, h, w] · s[c]`` of two quantized tensors, requantized and clamped to
    ``lo..hi``."""
    name: str
    nodes: list[str]
    inputs: list[str]          # [feature map, vector]
    output: str
    lo: int
    hi: int

    def channels(self, ig: IntGraph) -> int:
        return ig.tensors[self.inputs[1]].size

    def pixels(self, ig: IntGraph) -> int:
        return ig.tensors[self.inputs[0]].size // self.channels(ig)

    def fold_space(self, ig: IntGraph) -> FoldSpace:
        c, px = self.channels(ig), self.pixels(ig)
        return FoldSpace(divisors(c), (1,), lambda pe, simd: (px + 1) * c // pe)

    def in_per_beat(self, f: Folding) -> int:
        return f.pe

    def params(self, ig: IntGraph, pe: int) -> ChanMulParams:
        tx, ts = (ig.tensors[t] for t in self.inputs)
        ty = ig.tensors[self.output]
        f32 = np.float32
        ratio = f32(f32(tx.scale) * f32(ts.scale)) / f32(ty.scale)   # float32, as ORT does
        rq = make_requant(ratio, ty.zero_point, self.lo, self.hi)
        return ChanMulParams(tx.qtype, ts.qtype, ty.qtype, tx.zero_point, ts.zero_point, rq,
                             self.channels(ig), self.pixels(ig), pe)

    def lower(self, b: Builder, ig: IntGraph, f: Folding) -> str:
        ty = ig.tensors[self.output]
        p = self.params(ig, f.pe)
        srcs, fifos = zip(*(b.read(t, f.pe) for t in self.inputs))
        out = b.stream(short_name(self.output), ty.qtype, f.pe, ty.size)
        blk = b.add(Block(self.name, "chanmul", p, list(srcs), [out], self.name,
                          tuple(self.nodes)))
        b.join(blk, list(fifos), max(1, p.vec_beats), hold_frame=(0,))
        return out


# ------------------------------------------------------------------------ x · f(x)

def _gate(ctx: ImportContext, a, b):
    """(x, gate, its table op) when one operand is a table activation of the other."""
    for x, g in ((a, b), (b, a)):
        op = ctx.ig.producer(g.tensor)
        if isinstance(op, TableOp) and op.input == x.tensor and tuple(g.shape) == tuple(x.shape):
            return x, g, op
    return None


def _only_reader(ctx: ImportContext, tensor: str, node: Node) -> bool:
    """Whether ``node`` is the one ONNX node reading integer tensor ``tensor`` (through its
    QuantizeLinear's DequantizeLinear nodes)."""
    names = {n for n, v in ctx.values.items() if isinstance(v, (Int, Deq)) and v.tensor == tensor}
    if names & {o.name for o in ctx.graph.outputs}:
        return False
    for n in ctx.graph.nodes:
        if n is node or not names & set(n.inputs):
            continue
        if n.op_type == "DequantizeLinear" and set(o for o in n.outputs if o) <= names:
            continue
        if n.op_type == "QuantizeLinear" and set(o for o in n.outputs if o) <= names:
            continue
        if n.label in ctx.ig.producer(tensor).nodes:
            continue
        return False
    return True


def _product_table(ctx, node: Node, x: str, g: str, qtype, s, zp, qlinear: bool) -> np.ndarray:
    """onnxruntime's product for every value of ``x`` with its gate value (raw-bit order)."""
    tx, tg = ctx.ig.tensors[x], ctx.ig.tensors[g]
    gate = ctx.ig.producer(g)
    xv = all_values(tx.qtype)
    gv = np.asarray(gate.table, dtype=np.int64)[tx.qtype.to_unsigned(xv)]
    feeds = {"qa": xv.astype(np_type(tx.qtype)), "qb": gv.astype(np_type(tg.qtype))}
    inits = [scalar_init("sa", tx.scale, np.float32), scalar_init("za", tx.zero_point,
                                                                  np_type(tx.qtype)),
             scalar_init("sb", tg.scale, np.float32), scalar_init("zb", tg.zero_point,
                                                                  np_type(tg.qtype)),
             scalar_init("sy", s, np.float32), scalar_init("zy", zp, np_type(qtype))]
    if qlinear:
        nodes = [helper.make_node("QLinearMul", ["qa", "sa", "za", "qb", "sb", "zb", "sy", "zy"],
                                  ["y"], domain=MS)]
        opsets = {"": 13, MS: 1}
    else:
        nodes = [helper.make_node("DequantizeLinear", ["qa", "sa", "za"], ["a"]),
                 helper.make_node("DequantizeLinear", ["qb", "sb", "zb"], ["b"]),
                 helper.make_node("Mul", ["a", "b"], ["m"]),
                 helper.make_node("QuantizeLinear", ["m", "sy", "zy"], ["y"])]
        opsets = {"": max(13, node.opset_version)}
    return ort_eval(nodes, inits, feeds, np_type(qtype), opsets)


def _gated_table(ctx, node: Node, x: Deq | Int, g: Deq | Int, name: str, qtype, s, zp,
                 nodes: list[str], qlinear: bool, bounds: tuple[int, int] | None = None) -> Int:
    gate = ctx.ig.producer(g.tensor)
    table = _product_table(ctx, node, x.tensor, g.tensor, qtype, s, zp, qlinear)
    if bounds is not None:                     # a Relu/Clip after the product
        table = np.clip(table, *bounds)
    if _only_reader(ctx, g.tensor, node):
        ctx.ig.ops.remove(gate)
        del ctx.ig.tensors[g.tensor]
        nodes = list(gate.nodes) + nodes
    out = ctx.new_tensor(name, x.shape, qtype, s, zp)
    ctx.ig.ops.append(TableOp(node.label, nodes, x.tensor, out, table))
    return Int(out, x.shape, x.order)


@dataclass
class Gated(Pending):
    """``x · f(x)`` of dequantized tensors (``g`` = f(x) a table activation), awaiting its
    QuantizeLinear."""
    x: Deq
    g: Deq
    node: Node
    nodes: list[str]
    clip_lo: float = -np.inf
    clip_hi: float = np.inf

    def close(self, ctx, name, qtype, s, zp, closing) -> Int:
        bounds = clamp_bounds(qtype, s, zp, self.clip_lo, self.clip_hi)
        return _gated_table(ctx, self.node, self.x, self.g, name, qtype, s, zp,
                            closed_nodes(self.nodes, closing), qlinear=False, bounds=bounds)


# ------------------------------------------------------------------------ x · s[c]

@dataclass
class ChannelScaled(Pending):
    """A feature map times a per-channel vector, dequantized, awaiting its QuantizeLinear."""
    x: Deq
    v: Deq
    nodes: list[str]
    clip_lo: float = -np.inf
    clip_hi: float = np.inf

    def close(self, ctx, name, qtype, s, zp, closing) -> Int:
        return _chan_mul(ctx, self.x, self.v, name, qtype, s, zp,
                         closed_nodes(self.nodes, closing),
                         clamp_bounds(qtype, s, zp, self.clip_lo, self.clip_hi))


def _chan_mul(ctx, x, v, name, qtype, s, zp, nodes, bounds=None) -> Int:
    out = ctx.new_tensor(name, x.shape, qtype, s, zp)
    lo, hi = bounds or (qtype.lo, qtype.hi)
    ctx.ig.ops.append(ChanMulOp(nodes[0], nodes, [x.tensor, v.tensor], out, lo, hi))
    return Int(out, x.shape, x.order)


# ------------------------------------------------------------------------ handlers

def _operands(a, b):
    """(the streamed operand, the one held for the frame): a feature map and its per-channel
    vector, or two tensors of one shape streamed in one order (the second held whole: a
    ``chanmul`` of one pixel)."""
    if tuple(a.shape) == tuple(b.shape) and same_order(a, b):
        return a, b
    return channel_vector(a, b)


def _unsupported_shapes(a, b) -> Unsupported:
    return Unsupported(f"the product of tensors of shapes {list(a.shape)} and "
                       f"{list(b.shape)}: only tensors of one shape, a feature map times one "
                       f"value per channel ([C, H, W] · [C, 1, 1]) or a tensor times a table "
                       f"activation of itself (HardSwish, SiLU) are supported")


def mul(ctx: ImportContext, node: Node):
    check_attrs(node, {})
    a, b = ctx.value(node, 0), ctx.value(node, 1)
    if not (isinstance(a, Deq) and isinstance(b, Deq)):
        scale_mul(ctx, node)
        return
    gated = _gate(ctx, a, b)
    if gated is not None:
        x, g, _ = gated
        ctx.set(node, Gated(x, g, node, [node.label]))
        return
    pair = _operands(a, b)
    if pair is None:
        raise _unsupported_shapes(a, b)
    ctx.set(node, ChannelScaled(pair[0], pair[1], [node.label]))


def qlinear_mul(ctx: ImportContext, node: Node):
    """com.microsoft QLinearMul (A, A_scale, A_zp, B, B_scale, B_zp, C_scale, C_zp)."""
    check_attrs(node, {})
    a, b = ctx.value(node, 0), ctx.value(node, 3)
    for k, v in ((0, a), (3, b)):
        if not isinstance(v, Int):
            raise Unsupported(f"its input {node.inputs[k]!r} is a {type(v).__name__}, not an "
                              f"integer tensor")
        t = ctx.ig.tensors[v.tensor]
        s_in, z_in = out_params(ctx.scale(node, k + 1, "input scale"),
                                ctx.zero_point(node, k + 2, what="input zero point"))
        if (np.float32(t.scale), t.zero_point) != (s_in, z_in):
            raise Unsupported(f"reads '{v.tensor}' with scale {s_in} zero point {z_in}, but "
                              f"it was quantized with scale {t.scale} zero point "
                              f"{t.zero_point}")
    zp_arr = ctx.zero_point(node, 7, what="output zero point")
    qtype = qtype_of(node, zp_arr)
    s, zp = out_params(ctx.scale(node, 6, "output scale"), zp_arr)
    gated = _gate(ctx, a, b)
    if gated is not None:
        x, g, _ = gated
        ctx.set(node, _gated_table(ctx, node, x, g, node.outputs[0], qtype, s, zp,
                                   [node.label], qlinear=True))
        return
    pair = _operands(a, b)
    if pair is None:
        raise _unsupported_shapes(a, b)
    ctx.set(node, _chan_mul(ctx, pair[0], pair[1], node.outputs[0], qtype, s, zp,
                            [node.label]))


for _v in (7, 13, 14):
    REGISTRY.register("", "Mul", _v)(mul)
REGISTRY.register(MS, "QLinearMul", 1)(qlinear_mul)

__all__ = ["ChanMulOp", "ChannelScaled", "Gated"]
