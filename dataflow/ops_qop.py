"""The QOperator format as onnxruntime's quantizer writes it.

Each QLinear* operator is read as its QDQ equivalent: its integer inputs are viewed as
dequantized (they must carry the scale and zero point of the tensor they are), its constant
weights and bias as dequantized constants, and the result is quantized at once with the
operator's output scale and zero point, through the same code as the QDQ format.
MatMulInteger/ConvInteger produce an exact int32 accumulator (scale 1) that a following
Cast / Mul (scale) / Add (bias) / QuantizeLinear completes.
"""
from __future__ import annotations

import numpy as np
import onnx

from hwgen.dataflow.affine import fold_or_note, host_affine, record
from hwgen.dataflow.context import (
    INT_TYPES,
    REGISTRY,
    ImportContext,
    Unsupported,
    check_attrs,
    scale_problem,
)
from hwgen.dataflow.loader import Node
from hwgen.dataflow.ops_conv import CONV_ATTRS, conv_linear, window_input
from hwgen.dataflow.ops_join import Joined, channel_vector, same_order
from hwgen.dataflow.ops_linear import Linear, add_bias, check_per_channel, linear
from hwgen.dataflow.ops_pool import POOL_ATTRS, Pooled, pooled
from hwgen.dataflow.ops_qdq import close, out_params
from hwgen.dataflow.values import Deq, DeqConst, Int, Padded

MS = "com.microsoft"


def _deq_view(ctx: ImportContext, node: Node, k: int, k_scale: int, k_zp: int,
              windowed: bool = False) -> Deq | Padded:
    """Input ``k`` read as the dequantized tensor it is; ``windowed``: the node reads it
    through a sliding window, so a Pad before it may stay pending (a :class:`Padded` view)."""
    x = ctx.value(node, k)
    pad = x if windowed and isinstance(x, Padded) and isinstance(x.inner, Int) else None
    if pad is not None:
        x = pad.inner
    if not isinstance(x, Int):
        raise Unsupported(f"input {k} must be an integer tensor (got {type(x).__name__})")
    t = ctx.ig.tensors[x.tensor]
    s, z = out_params(ctx.scale(node, k_scale), ctx.zero_point(node, k_zp))
    if (np.float32(t.scale), t.zero_point) != (s, z):
        raise Unsupported(f"input {k} is read with scale {s} zero point {z}, but it was "
                          f"quantized with scale {t.scale} zero point {t.zero_point}")
    deq = Deq(x.tensor, x.shape, x.order)
    return deq if pad is None else Padded(deq, pad.pads, pad.value, pad.nodes)


def _wconst(ctx: ImportContext, node: Node, k: int, k_scale: int, k_zp: int,
            axis: int) -> DeqConst:
    q = ctx.const(node, k, "weight")
    if q is None:
        raise Unsupported(f"weight input {k} is missing (empty name)")
    if q.dtype.kind not in "iu":
        raise Unsupported(f"weight input {k} has type {q.dtype}, not an integer type")
    zp = ctx.zero_point(node, k_zp, q.dtype, "weight zero point")
    return DeqConst(q, ctx.scale(node, k_scale, "weight scale"),
                    np.zeros(1, np.int64) if zp is None else np.asarray(zp), axis)


def _bias(ctx: ImportContext, node: Node, k: int, lin: Linear):
    b = ctx.const(node, k, "bias")
    if b is None:
        return
    if b.dtype != np.int32:
        raise Unsupported(f"bias has type {b.dtype}; int32 (scale x_scale*w_scale) expected")
    add_bias(lin, DeqConst(b, lin.acc_scale.astype(np.float32), np.zeros(1, np.int64), 0),
              node, channel_vector=True)
    lin.nodes.pop()


def _finish(ctx: ImportContext, node: Node, pending, k_scale: int, k_zp: int):
    zp = ctx.zero_point(node, k_zp, what="output zero point")
    dt = np.uint8 if zp is None else np.asarray(zp).dtype
    if np.dtype(dt) not in INT_TYPES:
        raise Unsupported(f"output type {np.dtype(dt)} is not supported")
    s, z = out_params(ctx.scale(node, k_scale, "output scale"), zp)
    ctx.set(node, close(ctx, pending, node.outputs[0], INT_TYPES[np.dtype(dt)], s, z,
                        node.label))


def qlinear_conv(ctx: ImportContext, node: Node):
    check_attrs(node, CONV_ATTRS)
    x = _deq_view(ctx, node, 0, 1, 2, windowed=True)
    w = _wconst(ctx, node, 3, 4, 5, 0)
    lin = conv_linear(ctx, node, x, w, None)
    _bias(ctx, node, 8, lin)
    _finish(ctx, node, lin, 6, 7)


def qlinear_matmul(ctx: ImportContext, node: Node):
    check_attrs(node, {})
    x = _deq_view(ctx, node, 0, 1, 2)
    w = _wconst(ctx, node, 3, 4, 5, 1)
    _finish(ctx, node, linear(ctx, node, x, w, 1), 6, 7)


def qgemm(ctx: ImportContext, node: Node):
    check_attrs(node, {"alpha": lambda v: v == 1.0, "transA": lambda v: v == 0,
                       "transB": None})
    x = _deq_view(ctx, node, 0, 1, 2)
    tb = int(node.attrs.get("transB", 0))
    w = _wconst(ctx, node, 3, 4, 5, 0 if tb else 1)
    lin = linear(ctx, node, x, w, 0 if tb else 1)
    _bias(ctx, node, 6, lin)
    if len(node.inputs) <= 7 or not node.inputs[7]:
        raise Unsupported("QGemm without y_scale returns floats; a quantized output is needed")
    _finish(ctx, node, lin, 7, 8)


def qlinear_add(ctx: ImportContext, node: Node):
    check_attrs(node, {})
    a, b = _deq_view(ctx, node, 0, 1, 2), _deq_view(ctx, node, 3, 4, 5)
    if a.shape != b.shape:
        pair = channel_vector(a, b)
        if pair is None:
            raise Unsupported("of broadcasts in QLinearAdd, only a feature map plus one value "
                              "per channel is supported")
        a, b = pair
    elif not same_order(a, b):
        raise Unsupported("its inputs are streamed in different element orders")
    _finish(ctx, node, Joined([a.tensor, b.tensor], "add", a.shape, [node.label],
                              order=a.order), 6, 7)


def qlinear_gap(ctx: ImportContext, node: Node):
    check_attrs(node, {"channels_last": lambda v: v == 0})
    x = _deq_view(ctx, node, 0, 1, 2)
    _finish(ctx, node, Pooled(x.tensor, "gap", (x.shape[0], 1, 1), [node.label]), 3, 4)


def qlinear_avgpool(ctx: ImportContext, node: Node):
    check_attrs(node, dict(POOL_ATTRS, channels_last=lambda v: v == 0))
    wi = window_input(_deq_view(ctx, node, 0, 1, 2, windowed=True))
    t = ctx.ig.tensors[wi.x.tensor]
    _finish(ctx, node, pooled(node, wi, "avg", t.zero_point, t.qtype.lo), 3, 4)


def qlinear_concat(ctx: ImportContext, node: Node):
    check_attrs(node, {"axis": None})
    if int(node.attrs["axis"]) % 4 != 1:
        raise Unsupported("only Concat along channels (axis 1) is supported")
    xs = [_deq_view(ctx, node, k, k + 1, k + 2) for k in range(2, len(node.inputs), 3)]
    if len(xs) < 2:
        raise Unsupported(f"Concat of {len(xs)} tensor: at least two are needed")
    if len({x.shape[1:] for x in xs}) != 1 or any(len(x.shape) != 3 for x in xs):
        raise Unsupported("QLinearConcat inputs must be feature maps of one height and width")
    shape = (sum(x.shape[0] for x in xs),) + xs[0].shape[1:]
    _finish(ctx, node, Joined([x.tensor for x in xs], "concat", shape, [node.label]), 0, 1)


def matmul_integer(ctx: ImportContext, node: Node):
    """Exact int32 accumulator; the scale arrives with a later Mul."""
    check_attrs(node, {})
    lin = _integer_linear(ctx, node, 2, 3, lambda x, w: linear(ctx, node, x, w, 1), axis=1)
    ctx.set(node, lin)


def conv_integer(ctx: ImportContext, node: Node):
    check_attrs(node, CONV_ATTRS)
    ctx.set(node, _integer_linear(ctx, node, 2, 3,
                                   lambda x, w: conv_linear(ctx, node, x, w, None), axis=0))


def _integer_linear(ctx, node, k_xzp: int, k_wzp: int, build, axis: int) -> Linear:
    x = ctx.value(node, 0)
    if not isinstance(x, Int):
        raise Unsupported(f"input must be an integer tensor (got {type(x).__name__})")
    t = ctx.ig.tensors[x.tensor]
    xz = ctx.zero_point(node, k_xzp, what="input zero point")
    if int(np.asarray(0 if xz is None else xz).reshape(-1)[0]) != t.zero_point:
        raise Unsupported("its input zero point differs from the tensor's")
    q = ctx.const(node, 1, "weight")
    if q.dtype.kind not in "iu":
        raise Unsupported(f"weight '{node.inputs[1]}' has type {q.dtype}, not an integer type")
    wz = ctx.zero_point(node, k_wzp, q.dtype, "weight zero point")
    # view both as dequantized with the tensor's own scale; divide it out again below so the
    # accumulator is the exact integer sum (real value = acc · 1)
    w = DeqConst(q, np.ones(1, np.float32), np.zeros(1, np.int64) if wz is None
                 else np.asarray(wz), axis)
    lin = build(Deq(x.tensor, x.shape, x.order), w)
    lin.acc_scale = np.ones_like(lin.acc_scale)
    return lin


def cast(ctx: ImportContext, node: Node):
    """Cast of an int32 accumulator to float keeps it pending (exact below 2**24)."""
    check_attrs(node, {"to": lambda v: v == onnx.TensorProto.FLOAT, "saturate": None,
                       "round_mode": None})
    x = ctx.value(node, 0)
    if not isinstance(x, Linear):
        raise Unsupported("Cast is supported only on a MatMulInteger/ConvInteger result")
    x.nodes.append(node.label)
    ctx.set(node, x)


def mul(ctx: ImportContext, node: Node):
    """Multiplying a pending accumulator by a constant (per tensor or per channel) scale, or
    the float graph input (host preprocessing). The Mul handler,
    :mod:`dataflow.ops_elementwise`, calls it for everything but a product of two quantized
    tensors."""
    check_attrs(node, {})
    if host_affine(ctx, node):
        return
    a, b = ctx.value(node, 0), ctx.value(node, 1)
    data = 0
    if isinstance(b, Linear):
        a, b, data = b, a, 1
    c = getattr(b, "array", None)
    if not isinstance(a, Linear) or c is None or c.dtype.kind != "f":
        raise Unsupported("Mul is supported only as a constant scale of a pending layer")
    record(ctx, a, node, data)
    fold_or_note(a, node, lambda: _fold_mul(ctx, node, a, b, c))
    ctx.set(node, a)


def _fold_mul(ctx: ImportContext, node: Node, a: Linear, b, c: np.ndarray):
    """Fold a positive constant scale into the accumulator scale."""
    n = a.weights.shape[0]
    why = scale_problem(c)
    if why is not None:
        name = node.inputs[1] if b is ctx.value(node, 1) else node.inputs[0]
        raise Unsupported(f"Mul scale '{name}' {why}")
    if c.size not in (1, n):
        raise Unsupported("Mul scale must be positive, per tensor or per output channel")
    check_per_channel(c, a, "the Mul scale")
    a.acc_scale = a.acc_scale * np.broadcast_to(c.reshape(-1).astype(np.float64), (n,))
    a.nodes.append(node.label)


REGISTRY.register("", "QLinearConv", 10)(qlinear_conv)
for _v in (10, 21):
    REGISTRY.register("", "QLinearMatMul", _v)(qlinear_matmul)
REGISTRY.register("", "MatMulInteger", 10)(matmul_integer)
REGISTRY.register("", "ConvInteger", 10)(conv_integer)
for _v in (6, 9, 13, 19, 21, 23, 24, 25):
    REGISTRY.register("", "Cast", _v)(cast)
REGISTRY.register(MS, "QGemm", 1)(qgemm)
REGISTRY.register(MS, "QLinearAdd", 1)(qlinear_add)
REGISTRY.register(MS, "QLinearGlobalAveragePool", 1)(qlinear_gap)
REGISTRY.register(MS, "QLinearAveragePool", 1)(qlinear_avgpool)
REGISTRY.register(MS, "QLinearConcat", 1)(qlinear_concat)
