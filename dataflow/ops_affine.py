"""BatchNormalization of its own between two quantized tensors (after a Relu, a pooling, a
join, or after a Gemm that onnxruntime's quantizer quantized separately): a per-channel
affine requantizer, the ``affine`` block (``rtl_templates/affine.py``). A float MaxPool of a
dequantized map before it (onnxruntime's QOperator form: ``DequantizeLinear → MaxPool →
BatchNormalization → QuantizeLinear``) is an integer max pooling at the input's quantization
first (the maximum commutes with dequantization).

QDQ form: ``DequantizeLinear → BatchNormalization → QuantizeLinear``, the BN's scale and bias
possibly behind DequantizeLinear nodes of their own. A BatchNormalization directly after a
Conv or Gemm result is still folded into that layer (:func:`dataflow.ops_conv.batch_norm`,
which this handler extends).

Exact against onnxruntime: onnxruntime runs this group in float32 (no integer kernel
exists), so for each channel its output is a monotone staircase of the input's at most 256
values. The importer evaluates that staircase with onnxruntime itself — a model of the
DequantizeLinear, the BatchNormalization with the node's own constants and the
QuantizeLinear, fed every input value in every channel — and fits integers ``mult``,
``offset`` per channel with ``clamp(floor((x·mult + offset) / 2**shift))`` equal to it on every
value (:func:`rtl_templates.affine.fit_channels`). A channel that no such pair reproduces (a
float rounding in onnxruntime's path that breaks the staircase) takes the rounded real
affine map instead, which differs from onnxruntime by at most one step at those values.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from onnx import helper, numpy_helper

from hwgen.dataflow import ops_elementwise  # noqa: F401 - registers the Mul extended here
from hwgen.dataflow.context import REGISTRY, ImportContext, Unsupported, check_attrs
from hwgen.dataflow.intgraph import IntGraph, int_op
from hwgen.dataflow.loader import Node
from hwgen.dataflow.lower import Block, Builder, Folding, short_name
from hwgen.dataflow.ops_conv import batch_norm as folded_batch_norm
from hwgen.dataflow.ops_linear import Linear
from hwgen.dataflow.ops_pool import Pooled
from hwgen.dataflow.ops_qdq import clamp_bounds, close, closed_nodes, out_params, qtype_of
from hwgen.dataflow.ops_table import MAX_TABLE_BITS, all_values, np_type, ort_eval, scalar_init
from hwgen.dataflow.values import Const, Deq, DeqConst, Int, Pending, channel_last_order
from hwgen.rtl_templates.affine import AffineParams, fit_channels
from hwgen.rtl_templates.block import FoldSpace, divisors
from hwgen.rtl_templates.quant import UINT8

#: significant bits of the largest per-channel multiplier
MULT_BITS = 24


@int_op
@dataclass
class AffineOp:
    """``y = clamp(floor((x·mult[c] + offset[c]) / 2**shift), lo, hi)`` per channel ``c``."""
    name: str
    nodes: list[str]
    input: str
    output: str
    mult: list[int]
    offset: list[int]
    shift: int
    lo: int
    hi: int

    def channels(self, ig: IntGraph) -> int:
        return len(self.mult)

    def fold_space(self, ig: IntGraph) -> FoldSpace:
        c, size = len(self.mult), ig.tensors[self.output].size
        return FoldSpace(divisors(c), (1,), lambda pe, simd: size // pe)

    def in_per_beat(self, f: Folding) -> int:
        return f.pe

    def lower(self, b: Builder, ig: IntGraph, f: Folding) -> str:
        tin, tout = ig.tensors[self.input], ig.tensors[self.output]
        p = AffineParams(tin.qtype, tout.qtype, tuple(int(v) for v in self.mult),
                         tuple(int(v) for v in self.offset), self.shift, self.lo, self.hi,
                         tout.size // len(self.mult), f.pe)
        src, _ = b.read(self.input, f.pe)
        out = b.stream(short_name(self.output), tout.qtype, f.pe, tout.size)
        b.add(Block(self.name, "affine", p, [src], [out], self.name, tuple(self.nodes)))
        return out


def _const_inputs(ctx: ImportContext, node: Node) -> tuple[list, list]:
    """(nodes, initializers) giving the BN's inputs 1–4 as the model computes them."""
    nodes, inits = [], []
    for k, what in ((1, "scale"), (2, "bias"), (3, "mean"), (4, "var")):
        v = ctx.value(node, k)
        name = f"bn_{what}"
        if isinstance(v, DeqConst):
            q = np.asarray(v.q)
            inits += [numpy_helper.from_array(q, f"{name}_q"),
                      numpy_helper.from_array(np.asarray(v.scale, np.float32), f"{name}_s"),
                      numpy_helper.from_array(np.asarray(v.zero_point).astype(q.dtype),
                                              f"{name}_z")]
            nodes.append(helper.make_node("DequantizeLinear", [f"{name}_q", f"{name}_s",
                                                               f"{name}_z"], [name],
                                          axis=int(v.axis)))
        elif isinstance(v, Const) and np.asarray(v.array).dtype.kind == "f":
            inits.append(numpy_helper.from_array(np.asarray(v.array), name))
        else:
            raise Unsupported(f"its {what} must be a float constant or a dequantized constant")
    return nodes, inits


def _real_affine(ctx: ImportContext, node: Node) -> tuple[np.ndarray, np.ndarray]:
    """(g, h) with BN(r) = r·g + h per channel, in float64."""
    vals = []
    for k in range(1, 5):
        v = ctx.value(node, k)
        vals.append((v.real() if isinstance(v, DeqConst) else np.asarray(v.array))
                    .astype(np.float64).reshape(-1))
    gamma, beta, mean, var = vals
    g = gamma / np.sqrt(var + float(node.attrs.get("epsilon", 1e-5)))
    return g, beta - mean * g


@dataclass
class Channelwise(Pending):
    """A per-channel affine float op of a dequantized tensor (a BatchNormalization, a Mul,
    Add, Sub or Div by a per-channel constant, or nothing: a requantization), awaiting its
    QuantizeLinear. ``graph``: the op as ONNX nodes and initializers from the real input
    ``r`` to the real output ``f``; ``g``, ``h``: its real map ``f = r·g + h`` per channel
    (the fit's first guess)."""
    x: Deq
    nodes: list[str]
    graph: tuple[list, list]
    g: np.ndarray
    h: np.ndarray
    opset: int
    clip_lo: float = -np.inf
    clip_hi: float = np.inf

    def close(self, ctx, name, qtype, s, zp, closing) -> Int:
        t = ctx.ig.tensors[self.x.tensor]
        c = self.x.shape[0]
        values = all_values(t.qtype)
        ones = (1,) * (len(self.x.shape) - 1)
        feed = np.broadcast_to(values.reshape((-1, 1) + ones),
                               (values.size, c) + ones).astype(np_type(t.qtype))
        op_nodes, inits = self.graph
        inits = list(inits) + [
            scalar_init("s_in", t.scale, np.float32),
            scalar_init("z_in", t.zero_point, np_type(t.qtype)),
            scalar_init("s_out", s, np.float32), scalar_init("z_out", zp, np_type(qtype))]
        nodes = [helper.make_node("DequantizeLinear", ["q", "s_in", "z_in"], ["r"]),
                 *op_nodes, helper.make_node("QuantizeLinear", ["f", "s_out", "z_out"], ["y"])]
        table = ort_eval(nodes, inits, {"q": np.ascontiguousarray(feed)}, np_type(qtype),
                         {"": max(15, self.opset)})
        if table.size != values.size * c:
            raise Unsupported("its constant varies along other axes than the channels")
        table = table.reshape(values.size, c)
        g, h = self.g, self.h
        # real output steps: y ≈ x·a + b, a = s_in·g/s_out, b = (h - z_in·s_in·g)/s_out + zp
        a = float(np.float32(t.scale)) * g / float(s)
        b = (h - t.zero_point * float(np.float32(t.scale)) * g) / float(s) + zp
        amax = max(float(np.max(np.abs(a))), 2.0 ** -30)
        shift = max(0, MULT_BITS - 1 - int(np.floor(np.log2(amax))))
        guesses = [int(round(a[ch] * 2.0 ** shift)) for ch in range(c)]
        fits = fit_channels(values, table, qtype.lo, qtype.hi, shift, guesses)
        mult, offset = [], []
        for ch, fit in enumerate(fits):
            if fit is None:
                fit = guesses[ch], int(np.floor((b[ch] + 0.5) * 2.0 ** shift))
            mult.append(int(fit[0]))
            offset.append(int(fit[1]))
        out = ctx.new_tensor(name, self.x.shape, qtype, s, zp)
        lo, hi = clamp_bounds(qtype, s, zp, self.clip_lo, self.clip_hi)   # a Relu/Clip after
        ctx.ig.ops.append(AffineOp(self.nodes[0], closed_nodes(self.nodes, closing),
                                   self.x.tensor, out, mult, offset, shift, lo, hi))
        return Int(out, self.x.shape, self.x.order)


def _channelwise_input(ctx: ImportContext, x: Deq, what: str) -> None:
    """A per-channel affine op reads a dequantized tensor of at most MAX_TABLE_BITS bits,
    [C], [C, L] or [C, H, W], streamed channel-last."""
    if ctx.ig.tensors[x.tensor].qtype.bits > MAX_TABLE_BITS:
        raise Unsupported(f"{what} needs an input of at most {MAX_TABLE_BITS} bits")
    if len(x.shape) not in (1, 2, 3):
        raise Unsupported(f"{what} of a [N, {', '.join(map(str, x.shape))}] tensor: [N, C], "
                          f"[N, C, L] and [N, C, H, W] are supported")
    if x.order is not None and not np.array_equal(x.order, channel_last_order(x.shape)):
        raise Unsupported("its input is not streamed channel-last")


def requantized(ctx: ImportContext, x: Deq, label: str) -> Channelwise:
    """A dequantized tensor quantized again with other parameters, no op between
    (onnxruntime's quantizer does it where it removed a Relu between them)."""
    _channelwise_input(ctx, x, "requantizing a tensor")
    c = x.shape[0]
    return Channelwise(x, [label], ([helper.make_node("Identity", ["r"], ["f"])], []),
                       np.ones(c), np.zeros(c), 13)


def _per_channel(arr: np.ndarray, shape: tuple[int, ...]) -> np.ndarray | None:
    """The per-channel values [C] of a constant broadcast against a [N, *shape] tensor, or
    None if it varies along another axis (or does not broadcast)."""
    full = (1,) + tuple(shape)
    try:
        b = np.broadcast_to(np.asarray(arr, np.float64), np.broadcast_shapes(full, arr.shape))
    except ValueError:
        return None
    if b.shape != full:
        return None
    b = b.reshape(shape[0], -1)
    return b[:, 0] if np.all(b == b[:, :1]) else None


def channel_arith(ctx: ImportContext, node: Node) -> bool:
    """Add/Sub/Mul/Div of a dequantized tensor and a per-channel constant (a Keras
    BatchNormalization written as Mul and Add, which onnxruntime quantizes one by one): a
    per-channel affine requantizer. True if taken."""
    a, b = ctx.value(node, 0), ctx.value(node, 1)
    data = 0 if isinstance(a, Deq) else 1 if isinstance(b, Deq) else None
    if data is None or not isinstance(ctx.value(node, 1 - data), (Const, DeqConst)):
        return False
    x, cv = (a, b) if data == 0 else (b, a)
    arr = cv.real() if isinstance(cv, DeqConst) else np.asarray(cv.array)
    if arr.dtype.kind != "f" or arr.size == 1:
        return False                   # one number: a lookup table (ops_scalar)
    vec = _per_channel(arr, x.shape)
    if vec is None or not np.all(np.isfinite(vec)):
        return False
    _channelwise_input(ctx, x, f"{node.op_type} by a per-channel constant")
    op = node.op_type
    if op == "Div" and data == 1 or (op in ("Mul", "Div") and np.any(vec == 0)):
        return False
    one, zero = np.ones_like(vec), np.zeros_like(vec)
    g, h = {"Mul": (vec, zero), "Add": (one, vec),
            "Sub": (one, -vec) if data == 0 else (-one, vec), "Div": (1 / vec, zero)}[op]
    const = np.asarray(arr, np.float32)
    ins = ["r", "k"] if data == 0 else ["k", "r"]
    graph = ([helper.make_node(op, ins, ["f"])], [numpy_helper.from_array(const, "k")])
    ctx.set(node, Channelwise(x, [node.label], graph, g, h, node.opset_version))
    return True


def _lone_batch_norm(ctx: ImportContext, node: Node, x: Deq):
    check_attrs(node, {"epsilon": None, "momentum": None, "spatial": lambda v: v == 1,
                       "training_mode": lambda v: v == 0})
    if len([o for o in node.outputs if o]) > 1:
        raise Unsupported("BatchNormalization in training mode is not supported")
    _channelwise_input(ctx, x, "a BatchNormalization of its own")
    bn_nodes, inits = _const_inputs(ctx, node)
    attrs = {k: v for k, v in node.attrs.items() if k == "epsilon"}
    bn = helper.make_node("BatchNormalization", ["r", "bn_scale", "bn_bias", "bn_mean",
                                                 "bn_var"], ["f"], **attrs)
    g, h = _real_affine(ctx, node)
    ctx.set(node, Channelwise(x, [node.label], ([*bn_nodes, bn], inits), g, h,
                              node.opset_version))


def _extend(folded):
    """The BatchNormalization handler: a dequantized input here, anything else folded
    (``folded`` is :func:`dataflow.ops_conv.batch_norm`)."""
    assert folded is folded_batch_norm

    def batch_norm(ctx: ImportContext, node: Node):
        x = ctx.value(node, 0)
        unfoldable = not isinstance(x, Linear) or x.clip_lo > -np.inf or x.clip_hi < np.inf
        if isinstance(x, Pending) and unfoldable and ctx.assume_quantized:
            # a float model read as quantized: the pending computation gets its own (assumed)
            # quantization, as onnxruntime's quantizer would give it
            q = close(ctx, x, node.inputs[0], UINT8, np.float32(1.0), 0, None)
            ctx.values[node.inputs[0]] = q
            x = Deq(q.tensor, q.shape, q.order)
        if isinstance(x, Pooled) and x.kind == "max" and \
                (x.clip_lo, x.clip_hi) == (-np.inf, np.inf):
            # a float MaxPool of a dequantized map (onnxruntime's QOperator form leaves it in
            # float before an op it does not quantize): the maximum of dequantized values is
            # the dequantized maximum, exactly, so the pooling keeps its input's quantization
            t = ctx.ig.tensors[x.tensor]
            q = close(ctx, x, node.inputs[0], t.qtype, np.float32(t.scale), t.zero_point, None)
            x = Deq(q.tensor, q.shape, q.order)
            ctx.values[node.inputs[0]] = x          # the float MaxPool's output, exactly
        if isinstance(x, Deq):
            _lone_batch_norm(ctx, node, x)
        else:
            folded(ctx, node)
    return batch_norm


for _v in (7, 9, 14, 15):
    REGISTRY.extend("", "BatchNormalization", _v)(_extend)

def _extend_arith(before):
    def handler(ctx: ImportContext, node: Node):
        if not channel_arith(ctx, node):
            before(ctx, node)
    return handler


def _extend_quantize(before):
    """QuantizeLinear of a dequantized tensor with other parameters: a requantizer."""
    def handler(ctx: ImportContext, node: Node):
        x = ctx.value(node, 0)
        if isinstance(x, Deq) and not isinstance(x, Pending):
            t = ctx.ig.tensors[x.tensor]
            zp = ctx.zero_point(node, 2)
            qtype = qtype_of(node, zp)
            s, z = out_params(ctx.scale(node, 1), zp)
            if (t.qtype, np.float32(t.scale), t.zero_point) != (qtype, s, z):
                ctx.set(node, close(ctx, requantized(ctx, x, node.label), node.outputs[0],
                                    qtype, s, z, node.label))
                return
        before(ctx, node)
    return handler


for _op in ("Add", "Sub", "Mul", "Div"):
    for _v in REGISTRY.versions("", _op):
        REGISTRY.extend("", _op, _v)(_extend_arith)
for _v in REGISTRY.versions("", "QuantizeLinear"):
    REGISTRY.extend("", "QuantizeLinear", _v)(_extend_quantize)

__all__ = ["AffineOp", "Channelwise", "channel_arith", "requantized"]
