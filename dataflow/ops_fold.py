"""Constant folding (ConstantOfShape, Shape, Gather, Unsqueeze, Squeeze, Expand, and the
arithmetic of :data:`ARITHMETIC` on constants) and ``Sum``.

Exporters compute shapes and constants with small subgraphs (``Shape → Gather → Unsqueeze →
Concat → Reshape`` for a flatten, ``ConstantOfShape`` for filled tensors, ``Unsqueeze`` of a
per-channel vector before a broadcasting ``Mul``). These handlers evaluate them at import
time, so the values they produce are constants (``values.Const``) like initializers.
``Shape`` of a streamed tensor is known statically: one sample (batch 1) of its per-sample
shape, which is how the hardware sees it.

Shape arithmetic past that (``x.shape[2] * 2`` for an interpolation's size, ``Slice`` of a
shape, ``Cast``, ``Range``, …) is any ai.onnx op of :data:`ARITHMETIC` whose inputs are all
constants: :func:`fold_constant_node` evaluates it with onnx's reference implementation of
the op, so the batch axis is 1 there too (one frame), before any handler of the op sees it.

``Expand`` of a streamed tensor to a shape computed so (PyTorch's ``y.view(b, c, 1, 1)
.expand_as(x)`` before ``x * y``, squeeze-and-excitation as often written) is its input
itself when every op reading it broadcasts anyway: an elementwise ``Mul``/``Add``/``Sub``/
``Div`` (or its QLinear form), possibly behind a QuantizeLinear/DequantizeLinear pair, whose
other operand already has the expanded shape. Its result is then the same without the copy.

``Sum`` of two quantized tensors is an ``Add`` of two tensors (a residual join); ``Sum`` of one
input is the identity.
"""
from __future__ import annotations

import numpy as np
import onnx.defs
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

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


#: ai.onnx ops evaluated at import when every input is a constant (shape arithmetic)
ARITHMETIC = frozenset({"Add", "Sub", "Mul", "Div", "Mod", "Neg", "Abs", "Floor", "Ceil",
                        "Min", "Max", "Slice", "Cast", "Range", "Equal", "Less", "Greater",
                        "Not", "And", "Or", "Where", "ReduceProd", "Size", "Tile"})
#: the most elements a folded op's inputs may have together
FOLD_ELEMENTS = 1 << 16
#: ... for an op outside :data:`ARITHMETIC` (a computation on constant weights)
FOLD_ANY_ELEMENTS = 1 << 22
#: ai.onnx ops never folded here: quantizers (their constant results are quantized weights,
#: ``values.DeqConst``), ops with handlers of their own for constants, and ops whose result is
#: not a function of their inputs
NOT_FOLDED = frozenset({"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear",
                        "Constant", "ConstantOfShape", "Shape", "Transpose", "Reshape",
                        "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout", "Expand",
                        "Gather", "Concat", "Sum", "RandomNormal", "RandomUniform",
                        "RandomNormalLike", "RandomUniformLike", "Bernoulli", "Multinomial"})


def fold_constant_node(ctx: ImportContext, node: Node) -> bool:
    """Evaluate ``node`` (an ai.onnx op, not a quantizer, whose inputs are all constants:
    shape arithmetic of :data:`ARITHMETIC`, or any other op such as the ``Pow`` of two
    constants FINN's exports hold) with onnx's reference implementation and set its outputs
    as constants; False (nothing done) for any other node. Ops whose handlers give their
    constant results a meaning of their own (quantizers, views of quantized weights) are
    left to them."""
    if node.domain != "" or node.op_type in NOT_FOLDED:
        return False
    given = [n for n in node.inputs if n]
    values = [ctx.values.get(n) for n in given]
    limit = FOLD_ELEMENTS if node.op_type in ARITHMETIC else FOLD_ANY_ELEMENTS
    if not values or not all(isinstance(v, Const) for v in values) or \
            sum(v.array.size for v in values) > limit:
        return False
    outputs = [o for o in node.outputs if o]
    names = {n: f"i{k}" for k, n in enumerate(dict.fromkeys(given))}
    fn = helper.make_node(node.op_type, [names.get(n, "") for n in node.inputs],
                          [f"o{k}" for k in range(len(outputs))], **dict(node.attrs))
    graph = helper.make_graph([fn], "fold", [], [helper.make_empty_tensor_value_info(f"o{k}")
                                                 for k in range(len(outputs))],
                              [numpy_helper.from_array(np.asarray(ctx.values[n].array), name)
                               for n, name in names.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("",
                                                                        node.opset_version)])
    try:
        results = ReferenceEvaluator(model).run(None, {})
    except Exception as e:  # noqa: BLE001 - the reference's refusal, on the node
        raise Unsupported(f"its constant inputs cannot be evaluated ({type(e).__name__}: "
                          f"{str(e).splitlines()[0][:200] if str(e) else ''})") from None
    for name, r in zip(outputs, results):
        ctx.values[name] = Const(np.asarray(r))
    return True


#: ops that broadcast an operand to the other's shape: (op, its data inputs)
_BROADCASTING = {"Mul": (0, 1), "Add": (0, 1), "Sub": (0, 1), "Div": (0, 1),
                 "QLinearMul": (0, 3), "QLinearAdd": (0, 3)}


def _per_sample(ctx: ImportContext, tensor: str) -> tuple | None:
    """The per-sample shape of ``tensor``: as the walk knows it (done already), else as ONNX
    shape inference does (which knows no com.microsoft op)."""
    shape = getattr(ctx.values.get(tensor), "shape", None)
    if shape is not None:
        return tuple(int(d) for d in shape)
    info = ctx.graph.value_info.get(tensor)
    return None if info is None or info.shape is None else tuple(info.shape[1:])


def _not_broadcast(ctx: ImportContext, tensor: str, shape: tuple[int, ...]) -> str | None:
    """None when every reader of ``tensor`` (through QuantizeLinear/DequantizeLinear) is a
    broadcasting elementwise op whose other operand has the per-sample ``shape``; else what
    reads it otherwise."""
    if tensor in {o.name for o in ctx.graph.outputs}:
        return "it is a graph output"
    for n in ctx.graph.nodes:
        if tensor not in n.inputs:
            continue
        if n.op_type in ("QuantizeLinear", "DequantizeLinear") and n.inputs[0] == tensor:
            why = _not_broadcast(ctx, n.outputs[0], shape)
            if why:
                return why
            continue
        data = _BROADCASTING.get(n.op_type)
        others = [n.inputs[k] for k in data or () if k < len(n.inputs) and
                  n.inputs[k] != tensor]
        if data is None or len(others) != 1 or _per_sample(ctx, others[0]) != shape:
            return f"node {n.label} ({n.op_type}) reads it"
    return None


def expand(ctx: ImportContext, node: Node):
    check_attrs(node, {})
    x = ctx.value(node, 0)
    target = tuple(_int_list(ctx.const(node, 1, "shape")))
    if isinstance(x, Const):
        try:
            out = np.broadcast_shapes(x.array.shape, target)
        except ValueError:
            raise Unsupported(f"shape {list(target)} does not broadcast with the input's "
                              f"{list(x.array.shape)}") from None
        ctx.set(node, Const(np.broadcast_to(x.array, out).copy()))
        return
    if not isinstance(x, (Int, Deq, FloatInput)):
        raise Unsupported(f"Expand of a {type(x).__name__} is not supported")
    full = _shape_of(x)
    try:
        out = tuple(int(d) for d in np.broadcast_shapes(full, target))
    except ValueError:
        raise Unsupported(f"shape {list(target)} does not broadcast with the input's "
                          f"{list(full)} (batch axis 1: one frame)") from None
    if out[0] != 1:
        raise Unsupported(f"Expand to {list(target)} repeats the batch axis")
    if out != full:
        why = _not_broadcast(ctx, node.outputs[0], out[1:])
        if why:
            raise Unsupported(f"Expand of a streamed tensor from {list(full[1:])} to "
                              f"{list(out[1:])} per sample maps only where its readers "
                              f"broadcast it themselves (an elementwise Mul, Add, Sub or Div "
                              f"with an operand of that shape); {why}")
    ctx.set(node, x)


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


for _v in _versions("Expand"):
    REGISTRY.register("", "Expand", _v)(expand)
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
