"""Gemm, MatMul, Add (bias), Relu and Clip in QDQ form: they build a pending ``Linear`` that
the next QuantizeLinear turns into a ``MatVec`` op (see ``ops_qdq``)."""
from __future__ import annotations

import numpy as np

from hwgen.dataflow.importer import REGISTRY, ImportContext, Unsupported
from hwgen.dataflow.loader import Node
from hwgen.dataflow.ops_qdq import check_attrs
from hwgen.dataflow.values import Clipped, Const, Deq, DeqConst, FloatInput, Joined, Linear, Pooled


def _linear(ctx: ImportContext, node: Node, x, w: DeqConst, w_out_axis: int) -> Linear:
    """x: Deq [K]; w: dequantized constant with K×M (w_out_axis=1) or M×K (w_out_axis=0)."""
    if isinstance(x, FloatInput):
        raise Unsupported("its input is a float tensor that no QuantizeLinear quantized: "
                          "the model is not quantized here (quantize it in QDQ format first)")
    if not isinstance(x, Deq):
        raise Unsupported("its data input must come from DequantizeLinear of a quantized "
                          f"tensor (got {type(x).__name__})")
    if not isinstance(w, DeqConst):
        raise Unsupported("its weight input must be a constant integer tensor behind "
                          "DequantizeLinear")
    if w.q.ndim != 2:
        raise Unsupported(f"weights of rank {w.q.ndim} are not supported (2-D only)")
    if len(x.shape) != 1:
        raise Unsupported(f"input of shape {list(x.shape)} per sample: a 1-D vector per sample "
                          f"is supported (add Flatten)")
    n_out = w.q.shape[w_out_axis]
    s_w, z_w = w.per_channel(w_out_axis, n_out, "the weight")
    wq = w.q.astype(np.int64)
    wm = wq if w_out_axis == 0 else wq.T                       # [MH, MW]
    if wm.shape[1] != x.shape[0]:
        raise Unsupported(f"weights {list(w.q.shape)} do not match an input of "
                          f"{x.shape[0]} elements")
    wm = wm - z_w[:, None]
    if x.order is not None:  # columns in the order the elements arrive on the stream
        wm = wm[:, x.order]
    t = ctx.ig.tensors[x.tensor]
    acc_scale = (np.float32(t.scale) * s_w.astype(np.float32)).astype(np.float64)  # as ORT
    bias = -t.zero_point * wm.sum(axis=1)                       # fold the input zero point
    return Linear(src=x.tensor, weights=wm, acc_scale=acc_scale, bias=bias,
                  nodes=[node.label], shape=(n_out,))


def check_per_channel(arr: np.ndarray, lin: Linear, what: str):
    """A constant combined elementwise with a layer's [N, C, ...] output must be one value or
    one per channel *along the channel axis* under ONNX broadcasting (e.g. [C] after a Gemm,
    [C, 1, 1] after a convolution); anything else varies along other axes."""
    n = lin.weights.shape[0]
    if arr.size == 1:
        return
    out = (1,) + tuple(lin.shape)
    shape = (1,) * (len(out) - arr.ndim) + tuple(arr.shape)
    if len(shape) != len(out) or shape[1] != n or any(d != 1 for k, d in enumerate(shape)
                                                      if k != 1):
        raise Unsupported(f"{what} of shape {list(arr.shape)} does not broadcast as one value "
                          f"per output channel of a {list(out)} result")


def _add_bias(lin: Linear, b, node: Node, channel_vector: bool = False) -> Linear:
    """Add a constant bias in accumulator units. A bias quantized with scale s_x*s_w (as
    onnxruntime writes it) is exact; any other constant is rounded to the accumulator grid.
    ``channel_vector``: the bias is an operator's own per-channel input (Conv's B), not a
    tensor broadcast by ONNX rules."""
    if lin.has_bias:
        raise Unsupported("a second bias on one layer is not supported")
    n = lin.weights.shape[0]
    if not isinstance(b, (DeqConst, Const)) or (isinstance(b, Const)
                                                 and b.array.dtype.kind != "f"):
        raise Unsupported(f"its bias must be a float or dequantized constant "
                          f"(got {type(b).__name__})")
    arr = b.q if isinstance(b, DeqConst) else b.array
    if arr.size not in (1, n):
        raise Unsupported(f"bias of {arr.size} elements for {n} outputs")
    if not channel_vector:
        check_per_channel(arr, lin, "the bias")
    if isinstance(b, DeqConst):
        q = np.broadcast_to(arr.reshape(-1).astype(np.int64), (n,))
        if arr.ndim == 0 and np.size(b.scale) > 1:
            raise Unsupported("bias quantization parameters do not match its shape")
        s, z = b.per_channel(max(arr.ndim - 1, 0), n, "the bias") if arr.ndim else \
            (np.full(n, np.float32(b.scale)), np.full(n, int(np.asarray(b.zero_point))))
        q = q - z
        if np.array_equal(s.astype(np.float32), lin.acc_scale.astype(np.float32)):
            acc_b = q
        else:
            acc_b = np.rint(q * s.astype(np.float64) / lin.acc_scale).astype(np.int64)
    else:
        real = np.broadcast_to(arr.reshape(-1).astype(np.float64), (n,))
        acc_b = np.rint(real / lin.acc_scale).astype(np.int64)
    lin.bias = lin.bias + acc_b
    lin.has_bias = True
    lin.nodes.append(node.label)
    return lin


_GEMM_ATTRS = {"alpha": lambda v: v == 1.0, "beta": lambda v: v == 1.0,
               "transA": lambda v: v == 0, "transB": None}


def gemm(ctx: ImportContext, node: Node):
    check_attrs(node, _GEMM_ATTRS)
    x, w = ctx.value(node, 0), ctx.value(node, 1)
    lin = _linear(ctx, node, x, w, 0 if node.attrs.get("transB", 0) else 1)
    c = ctx.value(node, 2)
    if c is not None:
        lin = _add_bias(lin, c, node)
        lin.nodes.pop()
    ctx.set(node, lin)


def matmul(ctx: ImportContext, node: Node):
    check_attrs(node, {})
    ctx.set(node, _linear(ctx, node, ctx.value(node, 0), ctx.value(node, 1), 1))


def add(ctx: ImportContext, node: Node):
    check_attrs(node, {})
    a, b = ctx.value(node, 0), ctx.value(node, 1)
    if isinstance(a, Deq) and isinstance(b, Deq):
        from hwgen.dataflow.ops_join import add_tensors
        add_tensors(ctx, node, a, b)
        return
    if isinstance(b, Linear):
        a, b = b, a
    if not isinstance(a, Linear):
        raise Unsupported("only a constant bias added to a Gemm/MatMul result is supported "
                          "(add of two tensors is not)")
    ctx.set(node, _add_bias(a, b, node))


def _clip_into(ctx: ImportContext, node: Node, lo: float, hi: float):
    x = ctx.value(node, 0)
    if isinstance(x, (Linear, Pooled, Joined)):
        x.clip_lo, x.clip_hi = max(x.clip_lo, lo), min(x.clip_hi, hi)
        x.nodes.append(node.label)
        ctx.set(node, x)
    elif isinstance(x, Deq):
        ctx.set(node, Clipped(x.tensor, x.shape, node.label, lo, hi, x.order))
    elif isinstance(x, Clipped):
        ctx.set(node, Clipped(x.tensor, x.shape, x.node, max(x.clip_lo, lo),
                              min(x.clip_hi, hi), x.order))
    else:
        raise Unsupported(f"its input is a {type(x).__name__}; a quantized tensor or a "
                          f"Gemm/MatMul result is needed")


def relu(ctx: ImportContext, node: Node):
    check_attrs(node, {})
    _clip_into(ctx, node, 0.0, np.inf)


def clip(ctx: ImportContext, node: Node):
    if node.since_version < 11:
        check_attrs(node, {"min": None, "max": None})
        lo, hi = node.attrs.get("min", -np.inf), node.attrs.get("max", np.inf)
    else:
        check_attrs(node, {})
        lo_a, hi_a = ctx.const(node, 1, "min"), ctx.const(node, 2, "max")
        lo = -np.inf if lo_a is None else float(np.asarray(lo_a).reshape(-1)[0])
        hi = np.inf if hi_a is None else float(np.asarray(hi_a).reshape(-1)[0])
    _clip_into(ctx, node, float(lo), float(hi))


for _v in (7, 9, 11, 13):
    REGISTRY.register("", "Gemm", _v)(gemm)
for _v in (9, 13):
    REGISTRY.register("", "MatMul", _v)(matmul)
for _v in (7, 13, 14):
    REGISTRY.register("", "Add", _v)(add)
for _v in (6, 13, 14):
    REGISTRY.register("", "Relu", _v)(relu)
for _v in (6, 11, 12, 13):
    REGISTRY.register("", "Clip", _v)(clip)
