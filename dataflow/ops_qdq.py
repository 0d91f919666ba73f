"""QuantizeLinear / DequantizeLinear: where float tensors become integer tensors and back.

A QuantizeLinear of a pending computation (``values.Pending``) asks it to close itself into
an integer op (each kind of pending value does so next to the handlers that create it).
"""
from __future__ import annotations

import numpy as np
import onnx.helper

from hwgen.dataflow.context import INT_TYPES, REGISTRY, ImportContext, Unsupported, check_attrs
from hwgen.dataflow.loader import Node
from hwgen.dataflow.values import (
    Const,
    Deq,
    DeqConst,
    FloatInput,
    Int,
    Padded,
    Pending,
    channel_last_order,
    input_positions,
)
from hwgen.rtl_templates.quant import QType

Q_VERSIONS = (10, 13, 19, 21, 23, 24, 25)


def qtype_of(node: Node, zp: np.ndarray | None) -> QType:
    """The integer type a QuantizeLinear writes (its zero point's type, or output_dtype)."""
    if zp is not None:
        dt = np.asarray(zp).dtype
    else:
        out_dtype = node.attrs.get("output_dtype", 0)
        dt = np.dtype(np.uint8) if not out_dtype else \
            np.dtype(onnx.helper.tensor_dtype_to_np_dtype(out_dtype))
    if dt not in INT_TYPES:
        raise Unsupported(f"quantized type {dt} is not supported (int8, uint8, int16, uint16)")
    return INT_TYPES[dt]


def _scalar(a: np.ndarray | None, what: str, default=0):
    if a is None:
        return default
    a = np.asarray(a)
    if a.size != 1:
        raise Unsupported(f"{what} must be a single value (per-tensor) for activations, "
                          f"got shape {list(a.shape)}")
    return a.reshape(-1)[0]


Q_ATTRS = {"axis": None, "saturate": None, "block_size": lambda v: v == 0,
           "output_dtype": None}


def quantize_linear(ctx: ImportContext, node: Node):
    check_attrs(node, Q_ATTRS)
    x = ctx.value(node, 0)
    zp_arr = ctx.zero_point(node, 2)
    qtype = qtype_of(node, zp_arr)
    if isinstance(x, Const):
        raise Unsupported("quantizing a constant at run time is not supported; store it "
                          "quantized")
    s, zp = out_params(ctx.scale(node, 1), zp_arr)
    ctx.set(node, close(ctx, x, node.outputs[0], qtype, s, zp, node.label))


def out_params(scale, zp_arr) -> tuple[np.float32, int]:
    s = np.float32(_scalar(scale, "scale"))
    if not s > 0:
        raise Unsupported(f"scale {s} must be positive")
    return s, int(_scalar(zp_arr, "zero point"))


def close(ctx: ImportContext, x, name: str, qtype: QType, s, zp: int,
          closing: str | None) -> Int:
    """Quantize value ``x`` to (qtype, s, zp): a pending computation becomes an integer op
    writing a new tensor named after ``name``. ``closing``: the quantizing node's label (None
    where the quantization is assumed)."""
    if isinstance(x, FloatInput):
        if ctx.ig.input:
            raise Unsupported("the graph input is quantized twice; hwgen supports one "
                              "QuantizeLinear on the input")
        t = ctx.new_tensor(name, x.shape, qtype, s, zp)
        order = x.order
        if x.viewed and len(x.shape) in (2, 3):
            # a feature map the graph input was transposed or reshaped into (a channel-last
            # model's NHWC → NCHW): the host streams it channel-last, as layers read maps
            order = channel_last_order(x.shape)
        # the stream's k-th element is the graph input's element input_order[k]
        pos = input_positions(x)
        pos = pos if order is None else pos[order]
        ctx.ig.input_order = None if order is None and np.array_equal(
            pos, np.arange(pos.size)) else pos
        ctx.ig.input = t
        ctx.ig.input_pre = tuple(x.pre)
        return Int(t, x.shape, order)
    if isinstance(x, Pending):
        return x.close(ctx, name, qtype, s, zp, closing)
    if isinstance(x, Padded) and isinstance(x.inner, Deq):
        # a padded map quantized again with its own parameters: still the same padded map
        t = ctx.ig.tensors[x.inner.tensor]
        if (t.qtype, np.float32(t.scale), t.zero_point) != (qtype, s, zp):
            raise Unsupported(f"the output of Pad ({', '.join(x.nodes)}) is quantized with "
                              f"scale {s} zero point {zp}, its input with scale {t.scale} zero "
                              f"point {t.zero_point}: a Pad maps only when it keeps its "
                              f"input's quantization (a pad value of real zero)")
        value = x.value
        if value is None:      # the float pad value, quantized as the QuantizeLinear does
            value = int(t.quantize(np.asarray([x.real], np.float32))[0])
        return Padded(close(ctx, x.inner, name, qtype, s, zp, closing), x.pads, value,
                      x.nodes)
    if isinstance(x, Deq):
        t = ctx.ig.tensors[x.tensor]
        if (t.qtype, np.float32(t.scale), t.zero_point) != (qtype, s, zp):
            raise Unsupported(f"requantizing '{x.tensor}' from scale {t.scale} zero point "
                              f"{t.zero_point} to scale {s} zero point {zp} without an "
                              f"operation between is not supported")
        return Int(x.tensor, x.shape, x.order)
    raise Unsupported(f"its input is a {type(x).__name__}, which cannot be quantized here")


def clamp_bounds(qtype: QType, s: np.float32, zp: int, lo: float, hi: float) -> tuple[int, int]:
    """Integer output bounds of QuantizeLinear(clip(v, lo, hi)): rounding is monotonic, so
    clipping before it equals clamping after it."""
    qlo, qhi = qtype.lo, qtype.hi
    if np.isfinite(lo):
        qlo = max(qlo, min(qhi, int(np.rint(np.float32(lo) / s)) + zp))
    if np.isfinite(hi):
        qhi = min(qhi, max(qlo, int(np.rint(np.float32(hi) / s)) + zp))
    return qlo, qhi


def closed_nodes(nodes: list[str], closing: str | None) -> list[str]:
    """The ONNX nodes of an op: those of the pending value, then the quantizing node."""
    return list(nodes) + ([closing] if closing else [])


def _check_const_params(q: np.ndarray, scale: np.ndarray, zp: np.ndarray | None, axis: int):
    """A dequantized constant's scale is one value or one per element of axis ``axis``,
    and its zero point has as many values as the scale (or one)."""
    if scale.size > 1:
        if scale.ndim != 1 or not -q.ndim <= axis < q.ndim or q.shape[axis] != scale.size:
            raise Unsupported(f"scale of shape {list(scale.shape)} does not match axis {axis} "
                              f"of the constant's shape {list(q.shape)}")
    if zp is not None and zp.size not in (1, scale.size):
        raise Unsupported(f"zero point has {zp.size} values but the scale {scale.size}; "
                          f"they must have the same shape")


_DQ_ATTRS = {"axis": None, "block_size": lambda v: v == 0, "output_dtype": None}


def dequantize_linear(ctx: ImportContext, node: Node):
    check_attrs(node, _DQ_ATTRS)
    x = ctx.value(node, 0)
    scale = ctx.scale(node, 1)
    if isinstance(x, Const):
        q = np.asarray(x.array)
        if q.dtype.kind not in "iu":
            raise Unsupported(f"dequantized constant '{node.inputs[0]}' has type {q.dtype}, "
                              f"not an integer type")
        zp = ctx.zero_point(node, 2, q.dtype)
        axis = int(node.attrs.get("axis", 1))
        _check_const_params(q, np.asarray(scale), None if zp is None else np.asarray(zp),
                            axis)
        ctx.set(node, DeqConst(q, np.asarray(scale, np.float32),
                               np.zeros(1, np.int64) if zp is None else np.asarray(zp), axis))
    elif isinstance(x, Int) or (isinstance(x, Padded) and isinstance(x.inner, Int)):
        inner = x.inner if isinstance(x, Padded) else x
        zp = ctx.zero_point(node, 2)
        t = ctx.ig.tensors[inner.tensor]
        s, z = np.float32(_scalar(scale, "scale")), int(_scalar(zp, "zero point"))
        if (np.float32(t.scale), t.zero_point) != (s, z):
            raise Unsupported(f"dequantizes '{inner.tensor}' with scale {s} zero point {z}, "
                              f"but it was quantized with scale {t.scale} zero point "
                              f"{t.zero_point}")
        deq = Deq(inner.tensor, inner.shape, inner.order)
        ctx.set(node, Padded(deq, x.pads, x.value, x.nodes) if isinstance(x, Padded) else deq)
    else:
        raise Unsupported(f"its input is a {type(x).__name__}, not an integer tensor")


for _v in Q_VERSIONS:
    REGISTRY.register("", "QuantizeLinear", _v)(quantize_linear)
    REGISTRY.register("", "DequantizeLinear", _v)(dequantize_linear)
