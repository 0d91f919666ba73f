"""BatchNormalization of its own between two quantized tensors (after a Relu, a pooling, a
join, or after a Gemm that onnxruntime's quantizer quantized separately): a per-channel
affine requantizer, the ``affine`` block (``rtl_templates/affine.py``).

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

from hwgen.dataflow.context import REGISTRY, ImportContext, Unsupported, check_attrs
from hwgen.dataflow.intgraph import IntGraph, int_op
from hwgen.dataflow.loader import Node
from hwgen.dataflow.lower import Block, Builder, Folding, short_name
from hwgen.dataflow.ops_conv import batch_norm as folded_batch_norm
from hwgen.dataflow.ops_linear import Linear
from hwgen.dataflow.ops_qdq import clamp_bounds, close, closed_nodes
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
class Normalized(Pending):
    """A BatchNormalization of a dequantized tensor, awaiting its QuantizeLinear."""
    x: Deq
    node: Node
    nodes: list[str]
    clip_lo: float = -np.inf
    clip_hi: float = np.inf

    def close(self, ctx, name, qtype, s, zp, closing) -> Int:
        t = ctx.ig.tensors[self.x.tensor]
        c = self.x.shape[0]
        n = self.node
        values = all_values(t.qtype)
        ones = (1,) * (len(self.x.shape) - 1)
        feed = np.broadcast_to(values.reshape((-1, 1) + ones),
                               (values.size, c) + ones).astype(np_type(t.qtype))
        bn_nodes, inits = _const_inputs(ctx, n)
        inits += [scalar_init("s_in", t.scale, np.float32),
                  scalar_init("z_in", t.zero_point, np_type(t.qtype)),
                  scalar_init("s_out", s, np.float32), scalar_init("z_out", zp, np_type(qtype))]
        attrs = {k: v for k, v in n.attrs.items() if k == "epsilon"}
        nodes = [helper.make_node("DequantizeLinear", ["q", "s_in", "z_in"], ["r"]), *bn_nodes,
                 helper.make_node("BatchNormalization", ["r", "bn_scale", "bn_bias", "bn_mean",
                                                         "bn_var"], ["f"], **attrs),
                 helper.make_node("QuantizeLinear", ["f", "s_out", "z_out"], ["y"])]
        table = ort_eval(nodes, inits, {"q": np.ascontiguousarray(feed)}, np_type(qtype),
                         {"": max(15, n.opset_version)}).reshape(values.size, c)
        g, h = _real_affine(ctx, n)
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


def _lone_batch_norm(ctx: ImportContext, node: Node, x: Deq):
    check_attrs(node, {"epsilon": None, "momentum": None, "spatial": lambda v: v == 1,
                       "training_mode": lambda v: v == 0})
    if len([o for o in node.outputs if o]) > 1:
        raise Unsupported("BatchNormalization in training mode is not supported")
    if ctx.ig.tensors[x.tensor].qtype.bits > MAX_TABLE_BITS:
        raise Unsupported(f"a BatchNormalization of its own needs an input of at most "
                          f"{MAX_TABLE_BITS} bits")
    if len(x.shape) not in (1, 3):
        raise Unsupported(f"BatchNormalization of a [N, {', '.join(map(str, x.shape))}] "
                          f"tensor: [N, C] and [N, C, H, W] are supported")
    if x.order is not None and not np.array_equal(x.order, channel_last_order(x.shape)):
        raise Unsupported("its input is not streamed channel-last")
    ctx.set(node, Normalized(x, node, [node.label]))


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
        if isinstance(x, Deq):
            _lone_batch_norm(ctx, node, x)
        else:
            folded(ctx, node)
    return batch_norm


for _v in (7, 9, 14, 15):
    REGISTRY.extend("", "BatchNormalization", _v)(_extend)

__all__ = ["AffineOp", "Normalized"]
