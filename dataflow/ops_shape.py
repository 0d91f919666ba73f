"""Flatten, Reshape, Identity, Dropout: views that change no values.

A reshape or transpose keeps the stream as it is and only changes which ONNX element each
streamed element is (the value's ``order``); the batch axis must stay first.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from hwgen.dataflow.context import REGISTRY, ImportContext, Unsupported, check_attrs
from hwgen.dataflow.intgraph import op_inputs
from hwgen.dataflow.loader import Node
from hwgen.dataflow.values import (
    Const,
    Deq,
    DeqConst,
    FloatInput,
    Int,
    Pending,
    channel_last_order,
    view_positions,
)


@dataclass
class Viewed(Pending):
    """A reshape of a pending computation (a ReduceMean → Reshape → QuantizeLinear): the
    computation closes as it is, and its result is seen with ``shape``."""
    inner: Pending
    shape: tuple[int, ...]
    nodes: list[str]

    def close(self, ctx, name, qtype, s, zp, closing) -> Int:
        v = self.inner.close(ctx, name, qtype, s, zp, closing)
        op = ctx.ig.producer(v.tensor)
        if op is not None:
            op.nodes[-1:-1] = [n for n in self.nodes if n not in op.nodes]
        return reshaped(v, self.shape)


def reshaped(v, shape: tuple[int, ...], label: str = ""):
    # row-major flat indices do not change under a reshape, so the stream order carries over
    if isinstance(v, (Int, Deq)):
        return type(v)(v.tensor, shape, v.order)
    if isinstance(v, FloatInput):
        return dataclasses.replace(v, shape=shape, viewed=True)
    if isinstance(v, Pending) and label and hasattr(v, "shape"):
        if isinstance(v, Viewed):
            return Viewed(v.inner, shape, v.nodes + [label])
        return Viewed(v, shape, [label])
    raise Unsupported(f"reshaping a {type(v).__name__} is not supported")


def _stream_shape(v) -> tuple[int, ...]:
    """The per-sample shape of a value a reshape can view (what :func:`reshaped` takes)."""
    if isinstance(v, DeqConst):
        raise Unsupported("its input is a dequantized constant, not a streamed tensor: "
                          "reshaping one is not supported")
    if not isinstance(v, (Int, Deq, FloatInput, Pending)) or not hasattr(v, "shape"):
        raise Unsupported(f"reshaping a {type(v).__name__} is not supported")
    return tuple(v.shape)


def _size(shape) -> int:
    return int(np.prod(shape, dtype=np.int64))


def _batch(ctx: ImportContext) -> int | None:
    """The batch size the graph input fixes (None: dynamic)."""
    shape = ctx.graph.inputs[0].shape if ctx.graph.inputs else None
    return shape[0] if shape and isinstance(shape[0], int) else None


def flatten(ctx: ImportContext, node: Node):
    check_attrs(node, {"axis": None})
    x = ctx.value(node, 0)
    if isinstance(x, Const):
        axis = int(node.attrs.get("axis", 1))
        a = x.array
        axis = axis % a.ndim if a.ndim else 0
        ctx.set(node, Const(a.reshape(_size(a.shape[:axis]), -1)))
        return
    axis = int(node.attrs.get("axis", 1))
    rank = len(_stream_shape(x)) + 1
    if axis < 0:
        axis += rank
    if axis == 0 and _batch(ctx) == 1:
        axis = 1          # with one sample, merging the batch axis in is a plain flatten
    if axis != 1:
        raise Unsupported(f"Flatten axis={axis} merges the batch axis; only axis=1 (or 0 "
                          f"where the model's batch is 1) is supported")
    ctx.set(node, reshaped(x, (_size(x.shape),), node.label))


def reshape(ctx: ImportContext, node: Node):
    """Reshape; a 0 in the target copies the input's dimension unless ``allowzero=1``, where
    it is an empty axis: fine for a constant, refused for a streamed tensor (a stream of no
    elements). Without a 0 in the target, ``allowzero`` changes nothing."""
    check_attrs(node, {"allowzero": lambda v: v in (0, 1), "shape": None})
    x = ctx.value(node, 0)
    if node.since_version < 5:
        target = list(node.attrs["shape"])
    else:
        target = [int(d) for d in np.asarray(ctx.const(node, 1, "shape")).reshape(-1)]
    allowzero = int(node.attrs.get("allowzero", 0)) == 1
    if allowzero and 0 in target:
        if isinstance(x, Const):
            if -1 in target:
                raise Unsupported(f"allowzero=1 with both 0 and -1 in shape {target} is "
                                  f"invalid ONNX")
            if _size(target) != x.array.size:
                raise Unsupported(f"shape {target} (allowzero=1) does not hold the "
                                  f"{x.array.size} elements of its input")
            ctx.set(node, Const(x.array.reshape(target)))
            return
        raise Unsupported(f"allowzero=1 with a 0 in shape {target} makes an empty axis; a "
                          f"streamed tensor cannot be empty")
    if isinstance(x, Const):
        a = x.array
        ctx.set(node, Const(a.reshape([a.shape[k] if d == 0 else d
                                       for k, d in enumerate(target)])))
        return
    full = (1,) + _stream_shape(x)  # one sample
    shape = [full[k] if d == 0 else d for k, d in enumerate(target)]
    if shape.count(-1) > 1:
        raise Unsupported(f"shape {target} has more than one -1")
    if -1 in shape:
        known = _size([d for d in shape if d != -1])
        shape[shape.index(-1)] = _size(full) // max(known, 1)
    if _size(shape) != _size(full) or not shape or shape[0] != 1:
        raise Unsupported(f"reshape of a [N, {', '.join(map(str, x.shape))}] tensor to "
                          f"{target} does not keep the batch axis first")
    ctx.set(node, reshaped(x, tuple(shape[1:]), node.label))


def identity(ctx: ImportContext, node: Node):
    ctx.set(node, ctx.value(node, 0))


def dropout(ctx: ImportContext, node: Node):
    check_attrs(node, {"seed": None, "ratio": None, "is_test": None})
    tm = ctx.value(node, 2) if node.since_version >= 12 else None
    if tm is not None and (not isinstance(tm, Const) or bool(np.asarray(tm.array))):
        raise Unsupported("Dropout in training mode is not supported")
    if len(node.outputs) > 1 and node.outputs[1]:
        raise Unsupported("Dropout's mask output is not supported")
    ctx.set(node, ctx.value(node, 0))


for _v in (1, 9, 11, 13, 21, 23, 24, 25):
    REGISTRY.register("", "Flatten", _v)(flatten)
for _v in (5, 13, 14, 19, 21, 23, 24, 25):
    REGISTRY.register("", "Reshape", _v)(reshape)
for _v in (1, 13, 14, 16, 19, 21, 23, 24, 25):
    REGISTRY.register("", "Identity", _v)(identity)
for _v in (7, 10, 12, 13, 22):
    REGISTRY.register("", "Dropout", _v)(dropout)


def transpose(ctx: ImportContext, node: Node):
    check_attrs(node, {"perm": None})
    x = ctx.value(node, 0)
    if isinstance(x, Const):
        ctx.set(node, Const(np.transpose(x.array, node.attrs.get("perm"))))
        return
    if isinstance(x, DeqConst):     # quantized weights (QONNX: Quant → Transpose → MatMul)
        perm = list(node.attrs.get("perm", range(x.q.ndim - 1, -1, -1)))
        axis = perm.index(x.axis % x.q.ndim) if x.q.ndim else 0
        ctx.set(node, DeqConst(np.transpose(x.q, perm), x.scale, x.zero_point, axis))
        return
    if not isinstance(x, (Int, Deq, FloatInput)):
        raise Unsupported(f"transposing a {type(x).__name__} is not supported")
    rank = len(x.shape) + 1
    perm = list(node.attrs.get("perm", range(rank - 1, -1, -1)))
    if sorted(perm) != list(range(rank)) or perm[0] != 0:
        raise Unsupported(f"perm {perm} must keep the batch axis first")
    p = [d - 1 for d in perm[1:]]
    size = _size(x.shape)
    # y's row-major position j holds x's flat element src[j]; invert to follow the stream
    src = np.arange(size).reshape(x.shape).transpose(p).reshape(-1)
    inv = np.empty(size, dtype=np.int64)
    inv[src] = np.arange(size)
    order = inv if x.order is None else inv[x.order]
    shape = tuple(x.shape[d] for d in p)
    if isinstance(x, FloatInput):
        ctx.set(node, dataclasses.replace(x, shape=shape, order=order, viewed=True))
    elif _restream_input(ctx, x, shape, src):
        ctx.set(node, type(x)(x.tensor, shape, channel_last_order(shape)))
    else:
        ctx.set(node, type(x)(x.tensor, shape, order))


def _restream_input(ctx: ImportContext, x, shape: tuple[int, ...], src: np.ndarray) -> bool:
    """A transpose of the quantized graph input into a feature map (a channel-last model's
    NHWC → NCHW, quantized before the Transpose) that no layer has read yet: the host
    streams the input in the map's channel-last order instead, and the input tensor takes
    the map's shape. True if done."""
    ig = ctx.ig
    if x.tensor != ig.input or len(shape) not in (2, 3) or any(
            x.tensor in op_inputs(op) for op in ig.ops):
        return False
    pos = view_positions(_size(shape), x.order, ig.input_order)
    ig.input_order = pos[src][channel_last_order(shape)]
    ig.tensors[x.tensor].shape = tuple(shape)
    return True


for _v in (1, 13, 21, 23, 24, 25):
    REGISTRY.register("", "Transpose", _v)(transpose)
