"""Constant folding (ConstantOfShape, Shape, Gather, Unsqueeze, Squeeze) and ``Sum``.

Exporters compute shapes and constants with small subgraphs (``Shape → Gather → Unsqueeze →
Concat → Reshape`` for a flatten, ``ConstantOfShape`` for filled tensors, ``Unsqueeze`` of a
per-channel vector before a broadcasting ``Mul``). These handlers evaluate them at import
time, so the values they produce are constants (``values.Const``) like initializers.
``Shape`` of a streamed tensor is known statically: one sample (batch 1) of its per-sample
shape, which is how the hardware sees it.

``Sum`` of two quantized tensors is an ``Add`` of two tensors (a residual join); ``Sum`` of one
input is the identity.
"""
from __future__ import annotations

import numpy as np
import onnx.defs

from hwgen.dataflow.context import REGISTRY, ImportContext, Unsupported, check_attrs
from hwgen.dataflow.loader import Node, size_problem
from hwgen.dataflow.ops_join import add_tensors
from hwgen.dataflow.ops_shape import reshaped
from hwgen.dataflow.values import Const, Deq, FloatInput, Int

#: a filled constant with more elements than this stays a zero-stride (read-only) view
#: instead of being materialized: large weight tensors of the ONNX model zoo's "light" models
#: are ConstantOfShape outputs of tens of millions of elements
LAZY_FILL_ELEMENTS = 1 << 16


def _versions(op: str) -> tuple[int, ...]:
    return tuple(sorted({s.since_version for s in onnx.defs.get_all_schemas_with_history()
                         if s.domain == "" and s.name == op}))


def _int_list(a) -> list[int]:
    return [int(v) for v in np.asarray(a).reshape(-1)]


def constant_of_shape(ctx: ImportContext, node: Node):
    check_attrs(node, {"value": None})
    shape = _int_list(ctx.const(node, 0, "shape"))
    value = np.asarray(node.attrs.get("value", np.zeros(1, np.float32)))
    if value.size != 1:
        raise Unsupported(f"its value must have one element, has {value.size}")
    fill = value.reshape(())
    why = size_problem(shape, fill.dtype.itemsize)
    if why is not None:
        raise Unsupported(f"output '{node.outputs[0]}': {why}")
    n = int(np.prod(shape, dtype=np.int64))
    arr = np.broadcast_to(fill, tuple(shape))
    ctx.set(node, Const(arr if n > LAZY_FILL_ELEMENTS else arr.copy()))


def _shape_of(v) -> tuple[int, ...]:
    if isinstance(v, Const):
        return tuple(v.array.shape)
    shape = getattr(v, "shape", None)
    if shape is None:
        raise Unsupported(f"the shape of a {type(v).__name__} is not known")
    return (1,) + tuple(int(d) for d in shape)   # one sample: the batch axis is 1


def shape(ctx: ImportContext, node: Node):
    check_attrs(node, {"start": None, "end": None})
    full = _shape_of(ctx.value(node, 0))
    start = int(node.attrs.get("start", 0))
    end = node.attrs.get("end")
    s = np.array(full[start:None if end is None else int(end)], dtype=np.int64)
    ctx.set(node, Const(s))


def gather(ctx: ImportContext, node: Node):
    check_attrs(node, {"axis": None})
    x = ctx.value(node, 0)
    if not isinstance(x, Const):
        raise Unsupported("Gather of a streamed tensor is not supported (only of constants)")
    idx = np.asarray(ctx.const(node, 1, "indices")).astype(np.int64)
    axis = int(node.attrs.get("axis", 0))
    ctx.set(node, Const(np.take(x.array, idx, axis=axis)))


def _axes(ctx: ImportContext, node: Node) -> list[int] | None:
    if node.since_version < 13:
        a = node.attrs.get("axes")
        return None if a is None else [int(v) for v in a]
    a = ctx.const(node, 1, "axes")
    return None if a is None else _int_list(a)


def unsqueeze(ctx: ImportContext, node: Node):
    check_attrs(node, {"axes": None})
    x = ctx.value(node, 0)
    axes = _axes(ctx, node)
    if axes is None:
        raise Unsupported("Unsqueeze needs its axes")
    full = _shape_of(x)
    rank = len(full) + len(axes)
    axes = sorted(a % rank for a in axes)
    out = list(full)
    for a in axes:
        out.insert(a, 1)
    if isinstance(x, Const):
        ctx.set(node, Const(x.array.reshape(out)))
        return
    if 0 in axes:
        raise Unsupported("Unsqueeze at axis 0 moves the batch axis")
    ctx.set(node, _view(x, tuple(out[1:])))


def squeeze(ctx: ImportContext, node: Node):
    check_attrs(node, {"axes": None})
    x = ctx.value(node, 0)
    axes = _axes(ctx, node)
    full = _shape_of(x)
    if isinstance(x, Const):
        ctx.set(node, Const(np.squeeze(x.array, axis=None if axes is None else
                                       tuple(a % len(full) for a in axes))))
        return
    if axes is None:   # every size-1 axis of a sample (never the batch axis)
        axes = [k for k, d in enumerate(full) if d == 1 and k > 0]
    axes = sorted({a % len(full) for a in axes})
    if 0 in axes:
        raise Unsupported("Squeeze of axis 0 removes the batch axis")
    if any(full[a] != 1 for a in axes):
        raise Unsupported(f"Squeeze of axes {axes} of shape {list(full)}: they must be 1")
    ctx.set(node, _view(x, tuple(d for k, d in enumerate(full) if k not in axes)[1:]))


def _view(x, shape: tuple[int, ...]):
    if not isinstance(x, (Int, Deq, FloatInput)):
        raise Unsupported(f"reshaping a {type(x).__name__} is not supported")
    return reshaped(x, shape)


def sum_(ctx: ImportContext, node: Node):
    check_attrs(node, {})
    xs = [ctx.value(node, k) for k in range(len(node.inputs))]
    if len(xs) == 1:
        ctx.set(node, xs[0])
        return
    if len(xs) != 2:
        raise Unsupported(f"Sum of {len(xs)} tensors: two are supported (a residual join)")
    if not all(isinstance(x, Deq) for x in xs):
        raise Unsupported("Sum is supported as the join of two quantized tensors (both "
                          "from DequantizeLinear), got "
                          + " and ".join(type(x).__name__ for x in xs))
    add_tensors(ctx, node, xs[0], xs[1])


for _v in _versions("ConstantOfShape"):
    REGISTRY.register("", "ConstantOfShape", _v)(constant_of_shape)
for _v in _versions("Shape"):
    REGISTRY.register("", "Shape", _v)(shape)
for _v in _versions("Gather"):
    REGISTRY.register("", "Gather", _v)(gather)
for _v in _versions("Unsqueeze"):
    REGISTRY.register("", "Unsqueeze", _v)(unsqueeze)
for _v in _versions("Squeeze"):
    REGISTRY.register("", "Squeeze", _v)(squeeze)
for _v in (6, 8, 13):
    REGISTRY.register("", "Sum", _v)(sum_)
