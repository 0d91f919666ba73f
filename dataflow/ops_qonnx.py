"""QONNX, as Brevitas exports it: ``Quant``/``IntQuant``, ``BipolarQuant`` and ``Trunc`` of the
domain ``qonnx.custom_op.general`` (and its older alias ``onnx.brevitas``).

QONNX quantizers are fake-quant operators (float in, float out), with the semantics of the
``qonnx`` package (``qonnx/custom_op/general/intquant.py``, ``bipolar_quant.py``,
``trunc.py``), all in float32:

``Quant(x, scale, zeropt, bitwidth)``, attributes ``signed``, ``narrow``, ``rounding_mode``
    ``y = (round(clamp(x / scale + zeropt, min_int, max_int)) - zeropt) * scale`` with
    ``min_int``/``max_int`` of a ``bitwidth``-bit integer (signed or not; ``narrow`` drops
    the most negative value if signed, the largest one if unsigned). A signed 1-bit Quant
    is bipolar (``x / scale + zeropt >= 0 → +1``, else -1), as in qonnx.
``BipolarQuant(x, scale)``
    ``y = (+1 if x >= 0 else -1) * scale``.
``Trunc`` (version 1: ``x, scale, zeropt, in_bits, out_bits``; version 2: ``x, scale,
zeropt, in_bits, out_scale, out_bits``, attributes ``signed``, ``narrow``)
    ``r = round(x / scale + zeropt)``, then the ``t`` low bits go: ``y = mode(r / 2**t)``
    (version 2 clamps y to ``out_bits`` first), ``t = in_bits - out_bits`` (version 1) or
    ``round(log2(out_scale / scale))`` (version 2); out = ``y * scale`` (version 1) or
    ``y * out_scale`` (version 2).

How they map onto the importer's values (``dataflow.values``):

* a quantizer on a float constant (weights, biases) evaluates now: a ``DeqConst`` of its
  integers, per tensor or per channel (the one axis along which scale/zeropt vary), of any
  width; every rounding mode of qonnx is supported here;
* ``Quant`` on the graph input, on a pending layer (``Linear``, ``Pooled``, ``Joined``,
  ``Clipped``) or on a quantized tensor quantizes like ``QuantizeLinear`` (``close`` in
  ``ops_qdq``: requantizer multiplier = input scale · weight scale / output scale in float32)
  into an integer tensor of ``QType(bitwidth, signed)`` with the narrow range's bounds, and
  the value continues as the dequantized tensor (a :class:`QDeq`), since ``Quant`` outputs
  floats. Activations take one scale and zero point (per tensor), widths 1 to 16 and the
  rounding mode ``ROUND`` (half to even), the requantizer's;
* ``BipolarQuant`` (or a signed 1-bit ``Quant``) of a pending ``Gemm``/``MatMul``/``Conv`` is
  a sign threshold on the accumulator (``acc >= 0 → +1``), written as a requantizer into a
  tensor of type :data:`rtl_templates.xnor_mvau.BIPOLAR` (values ±1, one bit per element on
  a stream). Layers reading it compute with XNOR-popcount (±1 weights) or sign selects;
* ``Trunc`` is supported right after average or global average pooling: the pooling's
  requantizer gives ``r`` (exact with power-of-two scales and windows); when ``r`` is
  rounded off again (``t > 0``) in a way no single rounding reproduces (``FLOOR``, ``CEIL``,
  or ``ROUND`` after an inexact ``r``), a 1×1 depthwise layer computes ``y`` from ``r``
  exactly: ``floor(r / 2**t) = round_half_even((2r + 1 - 2**t) / 2**(t+1))`` and likewise
  for the others;
* a ``MaxPool`` reading a QONNX-quantized map is integer max pooling at once (QONNX puts no
  quantizer after it); see ``ops_pool.max_pool``;
* the requantizers of the ops made here drop the trailing zero bits their multipliers share
  (``m·2**g / 2**s`` → ``m / 2**(s-g)``, the same function, round24 included): with
  power-of-two scales the multipliers become a few bits wide instead of 24.

:func:`qonnx_reference` runs a QONNX model with the ``qonnx`` package (an optional
dependency) for ``hwgen verify``, since onnxruntime lacks these operators.

The integer results equal qonnx's execution exactly when the float32 arithmetic of the
QONNX graph is exact, which it is when scales are powers of two (as in FINN-style
Brevitas quantizers) and average-pooling windows have power-of-two sizes; otherwise they
can differ where float32 rounding decides a tie, as with any integer implementation.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import onnx
import onnxruntime as ort

from hwgen.dataflow.context import (
    REGISTRY,
    ImportContext,
    Unsupported,
    check_attrs,
    scale_problem,
)
from hwgen.dataflow.intgraph import Window
from hwgen.dataflow.loader import QONNX_DOMAINS, Node
from hwgen.dataflow.ops_clip import Clipped
from hwgen.dataflow.ops_conv import Conv
from hwgen.dataflow.ops_join import Joined
from hwgen.dataflow.ops_linear import Linear, MatVec
from hwgen.dataflow.ops_pool import GlobalAvgPool, Pool, Pooled
from hwgen.dataflow.ops_qdq import close
from hwgen.dataflow.ops_thresh import MAX_THRESHOLD_BITS, close_thresholds
from hwgen.dataflow.values import Const, Deq, DeqConst, FloatInput, Int, channel_last_order
from hwgen.errors import HwgenError
from hwgen.rtl_templates.quant import QType, Requant, make_requant, range_type
from hwgen.rtl_templates.xnor_mvau import BIPOLAR, is_bipolar, sign_requant

#: every domain QONNX quantizers have had (a model need not import it: ``dataflow.loader``)
DOMAINS = QONNX_DOMAINS
#: widths of activation tensors (streams); constants (weights, biases) may be wider
MAX_ACT_BITS = 16
#: the widest integer a quantized constant (weight, bias) may have
MAX_CONST_BITS = 32
_ROUND_MODES = ("ROUND", "HALF_EVEN", "CEIL", "FLOOR", "UP", "DOWN", "HALF_UP", "HALF_DOWN")


class QDeq(Deq):
    """A tensor that a QONNX quantizer wrote, seen as its dequantized floats. A MaxPool
    reading it becomes integer max pooling at once (``ops_pool.max_pool``)."""
    integer_max_pool = True


class BipolarDeq(QDeq):
    """A bipolar tensor that a QONNX quantizer wrote. Max pooling of it is integer max
    pooling of ±1 (the 1-bit stream encoding keeps the order), without padding."""
    integer_max_pool = True
    bipolar = True


# ------------------------------------------------------------------------------- helpers

def min_int(signed: bool, narrow: bool, bits: int) -> int:
    if signed:
        return -(1 << (bits - 1)) + (1 if narrow else 0)
    return 0


def max_int(signed: bool, narrow: bool, bits: int) -> int:
    if signed:
        return (1 << (bits - 1)) - 1
    return (1 << bits) - (2 if narrow else 1)


def qonnx_round(y: np.ndarray, mode: str) -> np.ndarray:
    """qonnx's ``resolve_rounding_mode`` (numpy, float in, float out)."""
    if mode in ("ROUND", "HALF_EVEN"):
        return np.round(y)
    if mode == "CEIL":
        return np.ceil(y)
    if mode == "FLOOR":
        return np.floor(y)
    if mode == "UP":
        return np.sign(y) * np.ceil(np.abs(y))
    if mode == "DOWN":
        return np.fix(y)
    if mode == "HALF_UP":
        return np.sign(y) * np.floor(np.abs(y) + 0.5)
    if mode == "HALF_DOWN":
        return np.sign(y) * np.ceil(np.abs(y) - 0.5)
    raise Unsupported(f"rounding_mode={mode!r} is not a QONNX rounding mode")


def _mode(node: Node, default: str) -> str:
    m = node.attrs.get("rounding_mode", default)
    m = (m.decode() if isinstance(m, bytes) else str(m)).upper()
    if m not in _ROUND_MODES:
        raise Unsupported(f"rounding_mode={m!r} is not a QONNX rounding mode")
    return m


def _flag(node: Node, name: str, default: int) -> bool:
    v = node.attrs.get(name, default)
    if v not in (0, 1):
        raise Unsupported(f"attribute {name}={v!r} must be 0 or 1")
    return bool(v)


def _const_input(ctx: ImportContext, node: Node, k: int, what: str) -> np.ndarray:
    a = ctx.const(node, k, what)
    if a is None:
        raise Unsupported(f"its {what} input is missing")
    return np.asarray(a)


def _scale_input(ctx: ImportContext, node: Node, k: int, what: str = "scale") -> np.ndarray:
    """A quantizer's scale input, refused (naming the tensor) unless every element is a
    finite, positive, normal float32."""
    a = _const_input(ctx, node, k, what)
    why = scale_problem(a)
    if why is not None:
        raise Unsupported(f"{what} '{node.inputs[k]}' {why}")
    return a.astype(np.float32)


def _int_scalar(a: np.ndarray, what: str) -> int:
    if a.size != 1:
        raise Unsupported(f"{what} must be a single value, got shape {list(a.shape)}")
    if a.dtype.kind not in "iuf":
        raise Unsupported(f"{what} has type {a.dtype}, not a number type")
    v = float(a.reshape(-1)[0])
    if not np.isfinite(v) or abs(v) > 2.0 ** 62:
        raise Unsupported(f"{what} {v} is not a finite integer")
    if v != round(v):
        raise Unsupported(f"{what} {v} is not an integer")
    return int(round(v))


def _bit_width(ctx, node, k: int, limit: int | None) -> int:
    bits = _int_scalar(_const_input(ctx, node, k, "bit width"), "the bit width")
    if bits < 1 or (limit is not None and bits > limit):
        kind = "activations" if limit == MAX_ACT_BITS else "constants"
        raise Unsupported(f"bit width {bits}: {kind} of 1 to {limit} bits are supported"
                          if limit else f"bit width {bits} must be at least 1")
    return bits


def _act_scale(scale: np.ndarray) -> np.float32:
    if scale.size != 1:
        raise Unsupported(f"per-channel scales (shape {list(scale.shape)}) are supported for "
                          f"constants (weights) only; an activation takes one scale")
    s = np.float32(scale.reshape(-1)[0])
    if not (np.isfinite(s) and s > 0):
        raise Unsupported(f"scale {s} must be positive")
    return s


def _channel_axis(params: list[np.ndarray], shape: tuple[int, ...], what: str) -> int:
    """The one axis of a constant of ``shape`` along which its quantization parameters vary
    (numpy broadcasting), or -1 when they are per tensor."""
    axes = set()
    for p in params:
        if p.ndim > len(shape):
            raise Unsupported(f"{what}: parameter of shape {list(p.shape)} does not broadcast "
                              f"to {list(shape)}")
        full = (1,) * (len(shape) - p.ndim) + tuple(p.shape)
        for ax, (d, n) in enumerate(zip(full, shape)):
            if d != 1:
                if d != n:
                    raise Unsupported(f"{what}: parameter of shape {list(p.shape)} does not "
                                      f"broadcast to {list(shape)}")
                axes.add(ax)
    if len(axes) > 1:
        raise Unsupported(f"{what}: quantization parameters vary along axes {sorted(axes)}; "
                          f"per tensor or along one axis is supported")
    return axes.pop() if axes else -1


def _const_params(p: np.ndarray, axis: int) -> np.ndarray:
    """1-D per-channel (or 1-element) view of a broadcastable parameter."""
    p = np.asarray(p)
    if axis < 0 or p.size == 1:
        return p.reshape(-1)[:1]
    return p.reshape(-1)


# ------------------------------------------------------------------------------ constants

def _quant_const(node: Node, x: np.ndarray, scale, zp, bits: int, signed: bool,
                 narrow: bool, mode: str) -> DeqConst:
    """qonnx's int_quant on a constant, evaluated now (float32 as qonnx does)."""
    x = np.asarray(x, dtype=np.float32)
    scale = np.asarray(scale, dtype=np.float32)
    if np.asarray(zp).dtype.kind not in "iuf":
        raise Unsupported(f"zero point of type {np.asarray(zp).dtype} is not a number")
    zpf = np.asarray(zp, dtype=np.float32)
    if np.any(~(scale > 0)):
        raise Unsupported("scales must be positive")
    if not np.all(np.isfinite(zpf)) or np.any(zpf != np.round(zpf)):
        raise Unsupported("zero points must be finite integers")
    if not np.all(np.isfinite(x)):
        raise Unsupported("the quantized constant holds a value that is not finite (NaN or "
                          "infinity)")
    axis = _channel_axis([scale, zpf], x.shape, "quantized constant")
    y = x / scale + zpf
    if bits == 1 and signed:
        y = np.where(y >= 0, 1.0, -1.0)
    else:
        y = np.clip(y, min_int(signed, narrow, bits), max_int(signed, narrow, bits))
        y = qonnx_round(y, mode)
    q = y.astype(np.int64)
    return DeqConst(q, _const_params(scale, axis).astype(np.float32),
                    _const_params(zpf, axis).astype(np.int64), max(axis, 0))


def _bipolar_const(x: np.ndarray, scale) -> DeqConst:
    x = np.asarray(x, dtype=np.float32)
    scale = np.asarray(scale, dtype=np.float32)
    if np.any(~(scale > 0)):
        raise Unsupported("scales must be positive")
    axis = _channel_axis([scale], x.shape, "bipolar constant")
    q = np.where(x >= 0, 1, -1).astype(np.int64)
    return DeqConst(q, _const_params(scale, axis).astype(np.float32), np.zeros(1, np.int64),
                    max(axis, 0))


def _const_value(x):
    """The float array of a constant input, or None if ``x`` is not constant."""
    if isinstance(x, Const):
        a = np.asarray(x.array)
        if a.dtype.kind not in "fiu":
            raise Unsupported(f"constant of type {a.dtype} cannot be quantized")
        return a.astype(np.float32)
    if isinstance(x, DeqConst):
        return x.real()
    return None


# ---------------------------------------------------------------------------- activations

def compact_requant(rq: Requant) -> Requant:
    """The same requantizer with the trailing zero bits common to its multipliers (and
    covered by its shift) removed: round24 and the final rounding do not change when the
    product is scaled by a power of two."""
    nz = [int(m) for m in rq.mult if int(m)]
    if not nz:
        return replace(rq, mult=tuple(0 for _ in rq.mult), shift=0)
    g = min(min((m & -m).bit_length() - 1 for m in nz), rq.shift)
    return replace(rq, mult=tuple(int(m) >> g for m in rq.mult), shift=rq.shift - g)


def _compact_new_ops(ctx: ImportContext, n_before: int):
    for op in ctx.ig.ops[n_before:]:
        if getattr(op, "requant", None) is not None:
            op.requant = compact_requant(op.requant)


def _qdeq(v: Int) -> Deq:
    return QDeq(v.tensor, v.shape, v.order)


def _narrow(ctx: ImportContext, tensor: str, lo: int, hi: int):
    """Tighten the output bounds of the op that wrote ``tensor`` to [lo, hi]."""
    op = ctx.ig.producer(tensor)
    t = ctx.ig.tensors[tensor]
    if (lo, hi) == (t.qtype.lo, t.qtype.hi):
        return
    if op is not None and getattr(op, "requant", None) is not None:
        rq = op.requant
        op.requant = replace(rq, lo=max(rq.lo, lo), hi=min(rq.hi, hi))
    elif op is not None and hasattr(op, "lo"):
        op.lo, op.hi = max(op.lo, lo), min(op.hi, hi)
    else:
        raise Unsupported("narrow range is not supported here (the graph input or a max "
                          "pooling cannot clamp)")


def _check_bipolar_src(ctx: ImportContext, x):
    if isinstance(x, Linear) and is_bipolar(ctx.ig.tensors[x.src].qtype) and \
            x.window is not None and (any(x.window.pads) or x.depthwise):
        raise Unsupported("a padded or depthwise convolution of a bipolar map is not "
                          "supported (zero padding has no ±1 encoding)")
    srcs = [x.tensor] if isinstance(x, (Pooled, Clipped)) else \
        list(x.tensors) if isinstance(x, Joined) else []
    if any(is_bipolar(ctx.ig.tensors[t].qtype) for t in srcs):
        raise Unsupported("pooling, adding or clipping bipolar tensors is not supported")


def _quant_act(ctx: ImportContext, node: Node, x, qtype: QType, lo: int, hi: int,
               s: np.float32, zp: int) -> Deq:
    """Quantize activation value ``x`` into a new tensor (or keep it if it already is)."""
    _check_bipolar_src(ctx, x)
    narrow = (lo, hi) != (qtype.lo, qtype.hi)
    if isinstance(x, Deq):
        t = ctx.ig.tensors[x.tensor]
        if (t.qtype, np.float32(t.scale), t.zero_point) == (qtype, s, zp):
            if narrow:
                _narrow(ctx, x.tensor, lo, hi)
            return x if isinstance(x, QDeq) else QDeq(x.tensor, x.shape, x.order)
    if isinstance(x, FloatInput):      # the host quantizes: it clamps to the narrow range
        v = close(ctx, x, node.outputs[0], qtype, s, zp, node.label)
        if narrow:
            ctx.ig.input_bounds = (lo, hi)
        return _qdeq(v)
    if isinstance(x, Clipped) and narrow:
        raise Unsupported("narrow range after a clip of a quantized tensor is not supported")
    if isinstance(x, Pooled) and x.kind == "max" and narrow:
        raise Unsupported("narrow range after max pooling is not supported")
    v = close(ctx, x, node.outputs[0], qtype, s, zp, node.label)
    if narrow:
        _narrow(ctx, v.tensor, lo, hi)
    return _qdeq(v)


def _threshold_act(ctx: ImportContext, node: Node, x: Linear, bits: int, signed: bool,
                   narrow: bool, mode: str, s: np.float32, z: int) -> Deq:
    """A low-bit quantizer after a layer and its float ops (``x.chain``): thresholds
    (``ops_thresh``), with qonnx's quantizer in float32 as the level function."""
    _check_bipolar_src(ctx, x)
    sf, zf = np.float32(s), np.float32(z)
    shape, order = x.shape, channel_last_order(x.shape)
    if bits == 1 and signed:
        if z != 0:
            raise Unsupported("a bipolar (signed 1-bit) Quant needs zero point 0")
        out = close_thresholds(ctx, node, x, BIPOLAR, -1, 1, s, 0,
                               lambda v: np.where(v / sf + zf >= 0, 1, -1))
        return BipolarDeq(out, shape, order)
    lo, hi = min_int(signed, narrow, bits), max_int(signed, narrow, bits)
    if not lo <= z <= hi:
        raise Unsupported(f"zero point {z} outside the {bits}-bit range [{lo}, {hi}]")

    def level(v: np.ndarray) -> np.ndarray:
        y = (v / sf + zf).astype(np.float32)
        y = np.where(y > hi, np.float32(hi), y)
        y = np.where(y < lo, np.float32(lo), y)
        return qonnx_round(y, mode).astype(np.int64)
    out = close_thresholds(ctx, node, x, QType(bits, signed), lo, hi, s, z, level)
    return QDeq(out, shape, order)


def _sign_act(ctx: ImportContext, node: Node, x, s: np.float32) -> Deq:
    """+1 where the real value is >= 0, else -1: a bipolar tensor of scale ``s``."""
    if isinstance(x, Linear) and x.chain is not None:
        _check_bipolar_src(ctx, x)
        out = close_thresholds(ctx, node, x, BIPOLAR, -1, 1, s, 0,
                               lambda v: np.where(v >= 0, 1, -1))
        return BipolarDeq(out, x.shape, channel_last_order(x.shape))
    _check_bipolar_src(ctx, x)
    if isinstance(x, Deq):
        t = ctx.ig.tensors[x.tensor]
        if is_bipolar(t.qtype) and np.float32(t.scale) == s:
            return BipolarDeq(x.tensor, x.shape, x.order)
        raise Unsupported("a bipolar quantizer on a quantized tensor (without a layer "
                          "between) is not supported")
    if isinstance(x, FloatInput):      # the host quantizes: x / s >= 0 → +1
        v = close(ctx, x, node.outputs[0], BIPOLAR, s, 0, node.label)
        return BipolarDeq(v.tensor, v.shape, v.order)
    if not isinstance(x, Linear):
        raise Unsupported(f"a bipolar quantizer after {type(x).__name__} is not supported; "
                          f"it must follow a Gemm/MatMul/Conv")
    if x.clip_lo >= 0:
        rq = sign_requant(always=+1)
    elif x.clip_hi < 0:
        rq = sign_requant(always=-1)
    else:
        if np.any(x.acc_scale <= 0):
            raise Unsupported("accumulator scales must be positive")
        rq = sign_requant()
    out = ctx.new_tensor(node.outputs[0], x.shape, BIPOLAR, s, 0)
    nodes = x.nodes + [node.label]
    if x.window is not None:
        ctx.ig.ops.append(Conv(x.nodes[0], nodes, x.src, out, x.weights, x.bias, rq,
                               x.window, x.depthwise, x.pad_value))
    else:
        ctx.ig.ops.append(MatVec(name=x.nodes[0], nodes=nodes, input=x.src, output=out,
                                 weights=x.weights, bias=x.bias, requant=rq))
    return BipolarDeq(out, x.shape, channel_last_order(x.shape))


# ------------------------------------------------------------------------------ handlers

_QUANT_ATTRS = {"signed": None, "narrow": None, "rounding_mode": None}


def quant(ctx: ImportContext, node: Node):
    n_ops = len(ctx.ig.ops)
    _quant(ctx, node)
    _compact_new_ops(ctx, n_ops)


def _quant(ctx: ImportContext, node: Node):
    check_attrs(node, _QUANT_ATTRS)
    signed, narrow = _flag(node, "signed", 1), _flag(node, "narrow", 0)
    mode = _mode(node, "ROUND")
    x = ctx.value(node, 0)
    scale = _scale_input(ctx, node, 1)
    zp = _const_input(ctx, node, 2, "zero point")
    cx = _const_value(x)
    if cx is not None:
        bits = _bit_width(ctx, node, 3, MAX_CONST_BITS)
        ctx.set(node, _quant_const(node, cx, scale, zp, bits, signed, narrow, mode))
        return
    bits = _bit_width(ctx, node, 3, MAX_ACT_BITS)
    s = _act_scale(scale)
    z = _int_scalar(zp, "the zero point")
    if isinstance(x, Linear) and bits <= MAX_THRESHOLD_BITS and (
            x.chain is not None or mode not in ("ROUND", "HALF_EVEN")):
        ctx.set(node, _threshold_act(ctx, node, x, bits, signed, narrow, mode, s, z))
        return
    if bits == 1 and signed:  # qonnx: a signed 1-bit Quant is bipolar
        if z != 0:
            raise Unsupported("a bipolar (signed 1-bit) Quant needs zero point 0")
        ctx.set(node, _sign_act(ctx, node, x, s))
        return
    if mode not in ("ROUND", "HALF_EVEN"):
        raise Unsupported(f"rounding_mode={mode} on activations: only ROUND (half to even) "
                          f"is supported")
    qtype = QType(bits, signed)
    lo, hi = min_int(signed, narrow, bits), max_int(signed, narrow, bits)
    if not lo <= z <= hi:
        raise Unsupported(f"zero point {z} outside the {bits}-bit range [{lo}, {hi}]")
    ctx.set(node, _quant_act(ctx, node, x, qtype, lo, hi, s, z))


def bipolar_quant(ctx: ImportContext, node: Node):
    check_attrs(node, {})
    x = ctx.value(node, 0)
    scale = _scale_input(ctx, node, 1)
    cx = _const_value(x)
    if cx is not None:
        ctx.set(node, _bipolar_const(cx, scale))
        return
    ctx.set(node, _sign_act(ctx, node, x, _act_scale(scale)))


# ---------------------------------------------------------------------------------- Trunc

def _pool_counts(p: Pooled, t) -> np.ndarray:
    """Divisor per output pixel (raster order) of an average / global average pooling."""
    if p.kind == "gap":
        return np.array([int(np.prod(t.shape[1:]))])
    k = p.window.kernel[0] * p.window.kernel[1]
    return np.full(int(np.prod(p.window.out_hw)), k) if p.count_include_pad \
        else p.window.counts()


def _pool_op(ctx, p: Pooled, out: str, nodes: list[str], ratios: np.ndarray, counts,
             zp: int, lo: int, hi: int):
    """The pooling op writing ``out`` = clamp(round_half_even(acc · ratio[count]) + zp):
    ``ratios`` per distinct count (ascending), acc = Σ q − K·z_in."""
    rq = make_requant(ratios, zp, lo, hi)
    if p.kind == "gap":
        ctx.ig.ops.append(GlobalAvgPool(p.nodes[0], nodes, p.tensor, out, rq))
    else:
        ctx.ig.ops.append(Pool(p.nodes[0], nodes, p.tensor, out, "avg", p.window, counts, rq))


def _trunc_requant_form(mode: str, t: int) -> tuple[int, int, int]:
    """(weight, bias, extra shift) with mode(r / 2**t) = round_half_even((w·r + b) / 2**(t+e))
    for every integer r."""
    if mode in ("ROUND", "HALF_EVEN"):
        return 1, 0, 0
    if mode == "FLOOR":
        return 2, 1 - (1 << t), 1
    if mode == "CEIL":
        return 2, (1 << t) - 1, 1
    raise Unsupported(f"Trunc rounding_mode={mode}: ROUND, FLOOR and CEIL are supported")


def _mode_div(r: int, t: int, mode: str) -> int:
    return int(qonnx_round(np.array(r / 2 ** t), mode))


def trunc(ctx: ImportContext, node: Node):
    n_ops = len(ctx.ig.ops)
    _trunc(ctx, node)
    _compact_new_ops(ctx, n_ops)


def _trunc(ctx: ImportContext, node: Node):
    # version 2 has the output scale as an extra input: a file that does not import the
    # domain (read as version 1) is told by its inputs
    v2 = node.opset_version >= 2 or len(node.inputs) == 6
    check_attrs(node, {"rounding_mode": None, "signed": None, "narrow": None} if v2
                else {"rounding_mode": None})
    mode = _mode(node, "FLOOR")
    x = ctx.value(node, 0)
    if not isinstance(x, Pooled) or x.kind not in ("avg", "gap"):
        raise Unsupported("Trunc is supported right after AveragePool/GlobalAveragePool "
                          f"only (its input is a {type(x).__name__})")
    _check_bipolar_src(ctx, x)
    if x.clip_lo > -np.inf or x.clip_hi < np.inf:
        raise Unsupported("a clip between the pooling and Trunc is not supported")
    s_t = _act_scale(_scale_input(ctx, node, 1))
    if _int_scalar(_const_input(ctx, node, 2, "zero point"), "the zero point") != 0:
        raise Unsupported("Trunc with a nonzero zero point is not supported")
    in_bits = _int_scalar(_const_input(ctx, node, 3, "input bit width"), "the input bit width")
    if not 1 <= in_bits <= MAX_CONST_BITS:
        raise Unsupported(f"input bit width {in_bits}: 1 to {MAX_CONST_BITS} bits are supported")
    if v2:
        s_out = _act_scale(_scale_input(ctx, node, 4, "output scale"))
        out_bits = _bit_width(ctx, node, 5, MAX_ACT_BITS)
        t = int(np.round(np.log2(np.float32(s_out) / np.float32(s_t))))
        signed, narrow = _flag(node, "signed", 1), _flag(node, "narrow", 0)
    else:
        out_bits = _bit_width(ctx, node, 4, MAX_ACT_BITS)
        t = in_bits - out_bits
        s_out = s_t
    if t < 0:
        raise Unsupported(f"Trunc widening by {-t} bits is not supported")

    tin = ctx.ig.tensors[x.tensor]
    counts = _pool_counts(x, tin)
    distinct = np.unique(counts)
    # r = round_half_even(acc · ratio): acc = Σ q − K·z_in, ratio = s_in / (K · s_trunc)
    ratios = np.float64(np.float32(tin.scale)) / (distinct.astype(np.float64) * np.float64(s_t))
    acc_lo = distinct * (tin.qtype.lo - tin.zero_point)
    acc_hi = distinct * (tin.qtype.hi - tin.zero_point)
    r_lo = int(min(np.round(acc_lo * ratios)))
    r_hi = int(max(np.round(acc_hi * ratios)))
    y_lo, y_hi = _mode_div(r_lo, t, mode), _mode_div(r_hi, t, mode)
    if v2:
        qtype = QType(out_bits, signed)
        lo, hi = min_int(signed, narrow, out_bits), max_int(signed, narrow, out_bits)
    else:
        qtype = QType(out_bits, y_lo < 0)
        if not (qtype.lo <= y_lo and y_hi <= qtype.hi):
            qtype = range_type(y_lo, y_hi)
        lo, hi = qtype.lo, qtype.hi
    nodes = x.nodes + [node.label]
    exact_r = bool(np.all(ratios == np.round(ratios)))
    if t == 0 or (mode in ("ROUND", "HALF_EVEN") and exact_r):
        # one rounding: y = round_half_even(acc · ratio / 2**t) (r is exact, or t = 0)
        out = ctx.new_tensor(node.outputs[0], x.shape, qtype, s_out, 0)
        _pool_op(ctx, x, out, nodes, ratios / 2.0 ** t, counts, 0, lo, hi)
    else:
        # r as its own tensor, then y = mode(r / 2**t) by a 1×1 depthwise layer
        r_type = range_type(min(r_lo, 0), max(r_hi, 0))
        r = ctx.new_tensor(f"{node.outputs[0]}_r", x.shape, r_type, float(s_t), 0)
        _pool_op(ctx, x, r, list(x.nodes), ratios, counts, 0, r_type.lo, r_type.hi)
        w, b, e = _trunc_requant_form(mode, t)
        c = x.shape[0]
        out = ctx.new_tensor(node.outputs[0], x.shape, qtype, s_out, 0)
        rq = make_requant(2.0 ** -(t + e), 0, lo, hi)
        win = Window(tuple(x.shape) if len(x.shape) == 3 else (c, 1, 1), (1, 1), (1, 1),
                     (0, 0, 0, 0))
        ctx.ig.ops.append(Conv(node.label, [node.label], r, out, np.full((c, 1), w, np.int64),
                               np.full(c, b, np.int64), rq, win, True))
    ctx.set(node, QDeq(out, x.shape, channel_last_order(x.shape)))


# ------------------------------------------------------------------------ MultiThreshold

_MT_ATTRS = {"out_dtype": None, "out_scale": None, "out_bias": None, "data_layout": None}


def multi_threshold(ctx: ImportContext, node: Node):
    """FINN's ``MultiThreshold(x, thresholds)``: ``out_scale · #{t : x >= t} + out_bias`` per
    channel (thresholds [C or 1, n]), after a layer: thresholds on its accumulator
    (``ops_thresh``), with the layer's float ops (its chain) evaluated as the model does."""
    check_attrs(node, _MT_ATTRS)
    x = ctx.value(node, 0)
    if not isinstance(x, Linear):
        raise Unsupported(f"MultiThreshold is supported right after a Gemm/MatMul/Conv (its "
                          f"input is a {type(x).__name__})")
    layout = node.attrs.get("data_layout", "")
    layout = layout.decode() if isinstance(layout, bytes) else str(layout)
    rank = len(x.shape) + 1
    if (layout and layout.find("C") != 1) or (not layout and rank == 3):
        raise Unsupported(f"data_layout {layout or 'NWC (rank 3)'}: only channels-first "
                          f"layouts (NC, NCHW) are supported")
    thr = np.asarray(_const_input(ctx, node, 1, "thresholds"), np.float32)
    c = x.weights.shape[0]
    if thr.ndim != 2 or thr.shape[0] not in (1, c) or thr.shape[1] < 1:
        raise Unsupported(f"thresholds of shape {list(thr.shape)} for {c} channels")
    t = np.broadcast_to(thr, (c, thr.shape[1]))
    n = t.shape[1]
    if n > (1 << MAX_THRESHOLD_BITS) - 1:
        raise Unsupported(f"{n} thresholds: at most {(1 << MAX_THRESHOLD_BITS) - 1} are "
                          f"supported")
    dtype = node.attrs.get("out_dtype", "")
    dtype = (dtype.decode() if isinstance(dtype, bytes) else str(dtype)).upper()
    s = np.float32(node.attrs.get("out_scale", 1.0))
    b = np.float32(node.attrs.get("out_bias", 0.0))
    _check_bipolar_src(ctx, x)

    def count(v: np.ndarray) -> np.ndarray:
        return np.sum(v[..., None] >= t, axis=-1).astype(np.int64)
    if dtype == "BIPOLAR" or (n == 1 and b == -s / 2 and b != 0):
        if n != 1 or not b == -s / 2:
            raise Unsupported("a bipolar MultiThreshold needs one threshold and out_bias = "
                              "-out_scale / 2")
        out = close_thresholds(ctx, node, x, BIPOLAR, -1, 1, s / 2, 0,
                               lambda v: 2 * count(v) - 1)
        ctx.set(node, BipolarDeq(out, x.shape, channel_last_order(x.shape)))
        return
    if not s > 0:
        raise Unsupported(f"out_scale {s} must be positive")
    zp = -b / s
    if zp != np.round(zp):
        raise Unsupported(f"out_bias {b} is not a whole number of out_scale {s}")
    qtype = range_type(0, n)
    if not qtype.lo <= int(zp) <= qtype.hi:
        qtype = range_type(min(0, int(zp)), max(n, int(zp)))
    out = close_thresholds(ctx, node, x, qtype, 0, n, s, int(zp), count)
    ctx.set(node, QDeq(out, x.shape, channel_last_order(x.shape)))


for _d in DOMAINS:
    REGISTRY.register(_d, "MultiThreshold", 1)(multi_threshold)
    REGISTRY.register(_d, "Quant", 1)(quant)
    REGISTRY.register(_d, "IntQuant", 1)(quant)
    REGISTRY.register(_d, "BipolarQuant", 1)(bipolar_quant)
    REGISTRY.register(_d, "Trunc", 1)(trunc)


# ---------------------------------------------------------- annotated graph inputs

def annotated_type(name: str) -> tuple[QType, int, int] | None:
    """The element type and bounds of a FINN/QONNX datatype name (``BINARY``, ``BIPOLAR``,
    ``TERNARY``, ``INT<n>``, ``UINT<n>``); None for the float and fixed-point ones, which
    carry no integer type."""
    if name == "BIPOLAR":
        return BIPOLAR, -1, 1
    if name == "BINARY":
        return QType(1, False), 0, 1
    if name == "TERNARY":
        return QType(2, True), -1, 1
    for prefix, signed in (("UINT", False), ("INT", True)):
        if name.startswith(prefix) and name[len(prefix):].isdigit():
            bits = int(name[len(prefix):])
            if not 1 <= bits <= MAX_ACT_BITS:
                raise Unsupported(f"an input datatype of {bits} bits: 1 to {MAX_ACT_BITS} "
                                  f"are supported")
            if signed and bits == 1:
                return BIPOLAR, -1, 1
            t = QType(bits, signed)
            return t, t.lo, t.hi
    return None


def annotated_input(ctx: ImportContext, name: str, shape: tuple[int, ...],
                    datatype: str) -> QDeq | None:
    """The graph input ``name`` that a ``finn_datatype`` annotation declares integer: its
    values are the integers themselves (scale 1, zero point 0), quantized on the host as
    the annotation says (rounded and saturated; bipolar: x >= 0 → +1, else -1). None when the
    datatype is not an integer one."""
    found = annotated_type(datatype)
    if found is None:
        return None
    qtype, lo, hi = found
    order = channel_last_order(shape)
    t = ctx.new_tensor(name, shape, qtype, 1.0, 0)
    ctx.ig.input, ctx.ig.input_order = t, order
    if (lo, hi) != (qtype.lo, qtype.hi):
        ctx.ig.input_bounds = (lo, hi)
    return (BipolarDeq if is_bipolar(qtype) else QDeq)(t, shape, order)


# ------------------------------------------------------------------- reference execution

def is_qonnx_model(model) -> bool:
    """Whether an ONNX model (path or ModelProto) has nodes of a QONNX domain."""
    m = model if isinstance(model, onnx.ModelProto) else onnx.load(str(model),
                                                                    load_external_data=False)
    return any(n.domain in DOMAINS for n in m.graph.node)


def qonnx_reference(model, x: np.ndarray, names: list[str] | None = None):
    """The float output of the ``qonnx`` package's execution of a QONNX model on ``x`` (batch
    axis first), in chunks of the model's batch size if it fixes one; with ``names``, the
    values of those tensors instead (a list). ``qonnx`` is not a dependency of hwgen:
    without it this raises a one-line error."""
    try:
        from qonnx.core.modelwrapper import ModelWrapper
        from qonnx.core.onnx_exec import execute_onnx
        from qonnx.transformation.infer_shapes import InferShapes
    except ImportError:
        raise HwgenError("this is a QONNX model: comparing with its reference execution needs "
                         "the qonnx package (pip install qonnx)") from None
    m = model if isinstance(model, onnx.ModelProto) else onnx.load(str(model))
    m = onnx.ModelProto.FromString(m.SerializeToString())
    # the historical domains as qonnx's cleanup writes them: qonnx's own, imported
    imported = {o.domain: o.version for o in m.opset_import}
    version = max((imported.get(d, 1) for d in DOMAINS
                   if any(n.domain == d for n in m.graph.node)), default=1)
    for n in m.graph.node:
        if n.domain in DOMAINS:
            n.domain = DOMAINS[0]
    if DOMAINS[0] not in imported:
        m.opset_import.append(onnx.helper.make_opsetid(DOMAINS[0], version))
    dim = m.graph.input[0].type.tensor_type.shape.dim[0]
    fixed = dim.dim_value if dim.HasField("dim_value") and dim.dim_value > 0 else 0
    if fixed and x.shape[0] % fixed:
        fixed = 0       # run the whole batch at once, the batch axis rewritten to it
    n = fixed or x.shape[0]
    if not fixed:  # qonnx needs every shape: fix the batch axis of the inputs and outputs
        for vi in list(m.graph.input) + list(m.graph.output):
            d = vi.type.tensor_type.shape.dim
            if len(d):
                d[0].Clear()
                d[0].dim_value = n
    w = ModelWrapper(m).transform(InferShapes())
    inp, out = w.graph.input[0].name, w.graph.output[0].name
    x = np.asarray(x, np.float32)
    want = names or [out]
    # qonnx runs each channels_last op as a one-node onnxruntime model stamped with an old
    # opset: onnxruntime's warnings about that are not the user's business
    ort.set_default_logger_severity(3)
    try:
        runs = [execute_onnx(w, {inp: x[k:k + n]}, return_full_exec_context=bool(names))
                for k in range(0, x.shape[0], n)]
    finally:
        ort.set_default_logger_severity(2)
    got = [np.concatenate([r[t] for r in runs]) for t in want]
    return got if names else got[0]
