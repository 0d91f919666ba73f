"""Affine float ops by constants, recorded exactly: after a layer's accumulator (for
thresholds) and before the first quantizer of the graph input (host preprocessing).

After a layer
    BatchNormalization and Add/Sub/Mul/Div by constants that follow a pending layer
    (``ops_linear.Linear``) are each recorded as a :class:`Step` — the ONNX node and its
    constant inputs, as the model holds them — in the layer's :class:`Chain`, next to the
    accumulator as it was before the first step (weights, bias, accumulator scale). A
    low-bit QONNX quantizer that closes the layer evaluates the chain on accumulator values
    in float32 exactly as the model does and turns it into thresholds
    (``dataflow/ops_thresh.py``). The handlers still fold the steps they can into the
    layer's requantizer too (the QDQ meaning: ``ops_conv.batch_norm``, ``ops_qop.mul``), so
    a wider quantizer keeps working as before; a step they cannot fold (a negative scale, a
    subtraction from a constant) is noted in :attr:`Chain.unfolded`, and only thresholds
    can close such a layer.

Before the first quantizer
    Add/Sub/Mul/Div of the float graph input by a constant (``x·2 - 1``, ``(x - mean) /
    std``) is host preprocessing (:class:`PreOp`): the host computes the same float32
    operations, then quantizes (``intgraph.IntGraph.quantize_input``). Float32 ``+ - · /`` are
    correctly rounded in NumPy as in onnxruntime, so the host's values are the model's.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from hwgen.dataflow.context import ImportContext, Unsupported
from hwgen.dataflow.intgraph import PreOp
from hwgen.dataflow.loader import Node
from hwgen.dataflow.values import Const, DeqConst, FloatInput

#: the elementwise binary ops taken as affine steps or host preprocessing
AFFINE_OPS = ("Add", "Sub", "Mul", "Div")


@dataclass
class Step:
    """One float op of a chain: ``node`` with its data input at ``data`` and the constants
    at the other inputs (float32, as the model holds them)."""
    node: Node
    data: int
    consts: dict[int, np.ndarray]


@dataclass
class Chain:
    """The float ops after a layer's accumulator: ``real = acc · acc_scale (+ offset)`` (acc =
    ``weights @ x + bias``; ``offset``: the layer's float bias, as the model adds it), then
    ``steps`` in order."""
    weights: np.ndarray
    bias: np.ndarray
    acc_scale: np.ndarray
    steps: list[Step] = field(default_factory=list)
    problem: str | None = None     # why the chain cannot be evaluated exactly
    unfolded: str | None = None    # a step the requantizer could not fold
    offset: np.ndarray | None = None

    @classmethod
    def of(cls, lin) -> Chain:
        """The chain of pending layer ``lin`` as it is now, its float bias (if any) kept
        as the float offset rather than rounded into the integer bias."""
        fb = getattr(lin, "float_bias", None)
        if fb is None:
            return cls(lin.weights, np.array(lin.bias, copy=True),
                       np.array(lin.acc_scale, copy=True))
        return cls(lin.weights, np.asarray(lin.bias - lin.float_bias_acc),
                   np.array(lin.acc_scale, copy=True), offset=np.asarray(fb, np.float32))


def const_array(v) -> np.ndarray | None:
    """The float32 array of a constant value (plain or dequantized), None otherwise."""
    if isinstance(v, Const):
        a = np.asarray(v.array)
        return a.astype(np.float32) if a.dtype.kind in "fiu" else None
    if isinstance(v, DeqConst):
        return v.real().astype(np.float32)
    return None


def record(ctx: ImportContext, lin, node: Node, data: int) -> Chain:
    """Record ``node`` (data input ``data``) as the next step after pending layer ``lin``,
    starting its chain from the accumulator as it is now."""
    if lin.chain is None:
        lin.chain = Chain.of(lin)
    ch = lin.chain
    consts = {}
    for k, name in enumerate(node.inputs):
        if k == data or not name:
            continue
        a = const_array(ctx.values.get(name))
        if a is None:
            raise Unsupported(f"its input '{name}' must be a constant")
        consts[k] = a
    if (lin.clip_lo > -np.inf or lin.clip_hi < np.inf) and ch.problem is None:
        ch.problem = f"'{node.label}' follows a Relu/Clip of the layer"
    if node.op_type == "Div" and data == 1 and ch.problem is None:
        ch.problem = f"'{node.label}' divides a constant by the layer (not monotonic)"
    ch.steps.append(Step(node, data, consts))
    return ch


def fold_or_note(lin, node: Node, fold) -> None:
    """Run ``fold()`` (a handler's folding of ``node`` into ``lin``'s requantizer); if it
    cannot fold, note why in the chain instead of failing (thresholds may still close it)."""
    try:
        fold()
    except Unsupported as e:
        if lin.chain is None:
            raise
        if lin.chain.unfolded is None:
            lin.chain.unfolded = f"'{node.label}' ({node.op_type}): {e}"
        lin.nodes.append(node.label)


# ------------------------------------------------------------------ host preprocessing

def pre_op(ctx: ImportContext, node: Node, x: FloatInput, c: np.ndarray,
           const_first: bool) -> FloatInput:
    """The graph input after ``node`` (``x op c`` or ``c op x``): host preprocessing."""
    if x.viewed and c.size != 1:
        raise Unsupported("preprocessing by a constant that is not a single value after a "
                          "reshape or transpose of the input is not supported")
    shape = (1,) + tuple(x.shape)
    if c.size != 1:
        try:
            full = np.broadcast_to(c, np.broadcast_shapes(shape, c.shape))
        except ValueError:
            raise Unsupported(f"constant of shape {list(c.shape)} does not broadcast to the "
                              f"input {list(shape)}") from None
        if full.shape != shape:
            raise Unsupported(f"constant of shape {list(c.shape)} changes the input's shape "
                              f"{list(shape)}")
        c = full.reshape(-1)
    else:
        c = c.reshape(1)
    pre = tuple(x.pre) + (PreOp(node.op_type, np.ascontiguousarray(c, np.float32),
                                const_first),)
    return dataclasses.replace(x, pre=pre)


def host_affine(ctx: ImportContext, node: Node) -> bool:
    """If ``node`` (Add/Sub/Mul/Div) combines the float graph input with a constant, record
    it as host preprocessing and return True."""
    a, b = ctx.value(node, 0), ctx.value(node, 1)
    for data, (x, other) in enumerate(((a, b), (b, a))):
        if isinstance(x, FloatInput):
            c = const_array(other)
            if c is None:
                raise Unsupported(f"{node.op_type} of the float input with a non-constant is "
                                  f"not supported")
            ctx.set(node, pre_op(ctx, node, x, c, const_first=data == 1))
            return True
    return False
