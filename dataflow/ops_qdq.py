"""QuantizeLinear / DequantizeLinear: where float tensors become integer tensors and back."""
from __future__ import annotations

import dataclasses

import numpy as np

from hwgen.dataflow.importer import INT_TYPES, REGISTRY, ImportContext, Unsupported
from hwgen.dataflow.intgraph import AddOp, ConcatOp, Conv, GlobalAvgPool, MatVec, Pool
from hwgen.dataflow.loader import Node
from hwgen.rtl_templates.quant import QType, dot_range, make_requant, signed_width
from hwgen.dataflow.values import (Clipped, Const, Deq, DeqConst, FloatInput, Int, Joined, Linear,
                             Pooled, channel_last_order)

Q_VERSIONS = (10, 13, 19, 21, 23, 24, 25)


def check_attrs(node: Node, known: dict):
    """Refuse attributes this handler does not understand or values it does not map."""
    for name, value in node.attrs.items():
        if name not in known:
            raise Unsupported(f"attribute '{name}' is not supported")
        ok = known[name]
        if ok is not None and not ok(value):
            raise Unsupported(f"attribute {name}={value!r} is not supported")


def _qtype_of(node: Node, zp: np.ndarray | None) -> QType:
    if zp is not None:
        dt = np.asarray(zp).dtype
    else:
        out_dtype = node.attrs.get("output_dtype", 0)
        dt = np.dtype(np.uint8) if not out_dtype else _onnx_dtype(out_dtype)
    if dt not in INT_TYPES:
        raise Unsupported(f"quantized type {dt} is not supported (int8, uint8, int16, uint16)")
    return INT_TYPES[dt]


def _onnx_dtype(code: int) -> np.dtype:
    import onnx.helper
    return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(code))


def _scalar(a: np.ndarray | None, what: str, default=0):
    if a is None:
        return default
    a = np.asarray(a)
    if a.size != 1:
        raise Unsupported(f"{what} must be a single value (per-tensor) for activations, "
                          f"got shape {list(a.shape)}")
    return a.reshape(-1)[0]


_Q_ATTRS = {"axis": None, "saturate": None, "block_size": lambda v: v == 0,
            "output_dtype": None}


def quantize_linear(ctx: ImportContext, node: Node):
    check_attrs(node, _Q_ATTRS)
    x = ctx.value(node, 0)
    zp_arr = ctx.const(node, 2, "zero point")
    qtype = _qtype_of(node, zp_arr)
    if isinstance(x, Const):
        raise Unsupported("quantizing a constant at run time is not supported; store it "
                          "quantized")
    s, zp = out_params(ctx.const(node, 1, "scale"), zp_arr)
    ctx.set(node, close(ctx, node, x, qtype, s, zp))


def out_params(scale, zp_arr) -> tuple[np.float32, int]:
    s = np.float32(_scalar(scale, "scale"))
    if not s > 0:
        raise Unsupported(f"scale {s} must be positive")
    return s, int(_scalar(zp_arr, "zero point"))


def close(ctx: ImportContext, node: Node, x, qtype: QType, s, zp: int) -> Int:
    """Quantize value ``x`` to (qtype, s, zp): the pending computation becomes an integer op
    writing a new tensor named after ``node.outputs[0]``."""
    if isinstance(x, FloatInput):
        if ctx.ig.input:
            raise Unsupported("the graph input is quantized twice; hwgen supports one "
                              "QuantizeLinear on the input")
        t = ctx.new_tensor(node.outputs[0], x.shape, qtype, s, zp)
        ctx.ig.input = t
        ctx.ig.input_order = x.order
        return Int(t, x.shape, x.order)
    if isinstance(x, Linear):
        return Int(_close_linear(ctx, node, x, qtype, s, zp), x.shape,
                   channel_last_order(x.shape))
    if isinstance(x, Pooled):
        return Int(_close_pool(ctx, node, x, qtype, s, zp), x.shape,
                   channel_last_order(x.shape))
    if isinstance(x, Joined):
        return Int(_close_join(ctx, node, x, qtype, s, zp), x.shape,
                   channel_last_order(x.shape))
    if isinstance(x, Clipped):
        return Int(_close_clip(ctx, node, x, qtype, s, zp), x.shape, x.order)
    if isinstance(x, Deq):
        t = ctx.ig.tensors[x.tensor]
        if (t.qtype, np.float32(t.scale), t.zero_point) != (qtype, s, zp):
            raise Unsupported(f"requantizing '{x.tensor}' from scale {t.scale} zero point "
                              f"{t.zero_point} to scale {s} zero point {zp} without an "
                              f"operation between is not supported")
        return Int(x.tensor, x.shape, x.order)
    raise Unsupported(f"its input is a {type(x).__name__}, which cannot be quantized here")


def _clamp_bounds(qtype: QType, s: np.float32, zp: int, lo: float, hi: float) -> tuple[int, int]:
    """Integer output bounds of QuantizeLinear(clip(v, lo, hi)): rounding is monotonic, so
    clipping before it equals clamping after it."""
    qlo, qhi = qtype.lo, qtype.hi
    if np.isfinite(lo):
        qlo = max(qlo, min(qhi, int(np.rint(np.float32(lo) / s)) + zp))
    if np.isfinite(hi):
        qhi = min(qhi, max(qlo, int(np.rint(np.float32(hi) / s)) + zp))
    return qlo, qhi


def _close_linear(ctx, node, lin: Linear, qtype, s, zp) -> str:
    lo, hi = _clamp_bounds(qtype, s, zp, lin.clip_lo, lin.clip_hi)
    # the multiplier in float32, (input scale · weight scale) / output scale, as ORT forms it
    mult = lin.acc_scale.astype(np.float32) / np.float32(s)
    out = ctx.new_tensor(node.outputs[0], lin.shape, qtype, s, zp)
    t_in = ctx.ig.tensors[lin.src].qtype
    a_lo, a_hi = dot_range(lin.weights, t_in.lo, t_in.hi)
    acc_bits = signed_width(int(min(a_lo.min(), (a_lo + lin.bias).min(), 0)),
                            int(max(a_hi.max(), (a_hi + lin.bias).max(), 0)))
    rq = make_requant(mult, zp, lo, hi, acc_bits)
    nodes = lin.nodes + [node.label]
    if lin.window is not None:
        ctx.ig.ops.append(Conv(lin.nodes[0], nodes, lin.src, out, lin.weights, lin.bias, rq,
                               lin.window, lin.depthwise))
    else:
        ctx.ig.ops.append(MatVec(name=lin.nodes[0], nodes=nodes, input=lin.src, output=out,
                                 weights=lin.weights, bias=lin.bias, requant=rq))
    return out


def _close_pool(ctx, node, p: Pooled, qtype, s, zp) -> str:
    t = ctx.ig.tensors[p.tensor]
    lo, hi = _clamp_bounds(qtype, s, zp, p.clip_lo, p.clip_hi)
    out = ctx.new_tensor(node.outputs[0], p.shape, qtype, s, zp)
    nodes = p.nodes + [node.label]
    if p.kind == "max":
        if (t.qtype, np.float32(t.scale), t.zero_point) != (qtype, s, zp) or \
                (lo, hi) != (qtype.lo, qtype.hi):
            raise Unsupported("MaxPool must keep its input's quantization (same scale and "
                              "zero point, no clip) to map to integer max pooling")
        ctx.ig.ops.append(Pool(p.nodes[0], nodes, p.tensor, out, "max", p.window))
        return out
    real = np.float64(np.float32(t.scale)) / np.float64(s)
    if p.kind == "gap":
        hw = int(np.prod(t.shape[1:]))
        acc_bits = signed_width(hw * (t.qtype.lo - t.zero_point), hw * (t.qtype.hi - t.zero_point))
        ctx.ig.ops.append(GlobalAvgPool(p.nodes[0], nodes, p.tensor, out,
                                        make_requant(real / hw, zp, lo, hi, acc_bits)))
        return out
    k = p.window.kernel[0] * p.window.kernel[1]
    counts = np.full(int(np.prod(p.window.out_hw)), k) if p.count_include_pad \
        else p.window.counts()
    acc_bits = signed_width(k * (t.qtype.lo - t.zero_point), k * (t.qtype.hi - t.zero_point))
    # onnxruntime's (Q)LinearAveragePool adds the zero point before rounding, in float32
    rq = dataclasses.replace(make_requant(real / np.unique(counts).astype(np.float64), zp, lo,
                                          hi, acc_bits), zp_first=True)
    ctx.ig.ops.append(Pool(p.nodes[0], nodes, p.tensor, out, "avg", p.window, counts, rq))
    return out


def _close_join(ctx, node, j: Joined, qtype, s, zp) -> str:
    lo, hi = _clamp_bounds(qtype, s, zp, j.clip_lo, j.clip_hi)
    out = ctx.new_tensor(node.outputs[0], j.shape, qtype, s, zp)
    nodes = j.nodes + [node.label]
    if j.kind == "add":
        ctx.ig.ops.append(AddOp(j.nodes[0], nodes, list(j.tensors), out, lo, hi))
    else:
        if (lo, hi) != (qtype.lo, qtype.hi):
            raise Unsupported("a clip/relu fused after Concat is not supported")
        ctx.ig.ops.append(ConcatOp(j.nodes[0], nodes, list(j.tensors), out))
    return out


def _close_clip(ctx, node, c: Clipped, qtype, s, zp) -> str:
    """Relu/Clip between a DequantizeLinear and a QuantizeLinear with the same parameters
    is a clamp: fold it into the requantizer of the op that produced the tensor."""
    t = ctx.ig.tensors[c.tensor]
    if (t.qtype, np.float32(t.scale), t.zero_point) != (qtype, s, zp):
        raise Unsupported(f"the clip/relu '{c.node}' changes the quantization from scale "
                          f"{t.scale} zero point {t.zero_point} to scale {s} zero point {zp}; "
                          f"only a clamp with unchanged parameters is supported")
    prod = ctx.ig.producer(c.tensor)
    if prod is None or not (hasattr(prod, "requant") or hasattr(prod, "lo")):
        raise Unsupported(f"the clip/relu '{c.node}' does not follow a layer it can fold into")
    if ctx.ig.consumers(c.tensor) or _used_elsewhere(ctx, c.tensor):
        raise Unsupported(f"the clip/relu '{c.node}' input is also used unclamped elsewhere")
    lo, hi = _clamp_bounds(qtype, s, zp, c.clip_lo, c.clip_hi)
    if hasattr(prod, "lo"):
        prod.lo, prod.hi = max(prod.lo, lo), min(prod.hi, hi)
    else:
        rq = prod.requant
        prod.requant = dataclasses.replace(rq, lo=max(rq.lo, lo), hi=min(rq.hi, hi))
    prod.nodes += [c.node, node.label]
    return c.tensor


def _used_elsewhere(ctx, tensor: str) -> bool:
    """Whether ONNX tensors holding ``tensor`` (its Q output / DQ output) have other uses."""
    names = [n for n, v in ctx.values.items() if isinstance(v, (Int, Deq)) and v.tensor == tensor]
    return sum(ctx.n_consumers.get(n, 0) for n in names) > 2 or any(
        n in {o.name for o in ctx.graph.outputs} for n in names)


_DQ_ATTRS = {"axis": None, "block_size": lambda v: v == 0, "output_dtype": None}


def dequantize_linear(ctx: ImportContext, node: Node):
    check_attrs(node, _DQ_ATTRS)
    x = ctx.value(node, 0)
    scale = ctx.const(node, 1, "scale")
    zp = ctx.const(node, 2, "zero point")
    if isinstance(x, Const):
        q = np.asarray(x.array)
        if q.dtype.kind not in "iu":
            raise Unsupported(f"dequantized constant has type {q.dtype}, not an integer type")
        axis = int(node.attrs.get("axis", 1))
        ctx.set(node, DeqConst(q, np.asarray(scale, np.float32),
                               np.zeros(1, np.int64) if zp is None else np.asarray(zp), axis))
    elif isinstance(x, Int):
        t = ctx.ig.tensors[x.tensor]
        s, z = np.float32(_scalar(scale, "scale")), int(_scalar(zp, "zero point"))
        if (np.float32(t.scale), t.zero_point) != (s, z):
            raise Unsupported(f"dequantizes '{x.tensor}' with scale {s} zero point {z}, but it "
                              f"was quantized with scale {t.scale} zero point {t.zero_point}")
        ctx.set(node, Deq(x.tensor, x.shape, x.order))
    else:
        raise Unsupported(f"its input is a {type(x).__name__}, not an integer tensor")


for _v in Q_VERSIONS:
    REGISTRY.register("", "QuantizeLinear", _v)(quantize_linear)
    REGISTRY.register("", "DequantizeLinear", _v)(dequantize_linear)
