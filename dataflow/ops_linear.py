"""Gemm, MatMul and Add (bias) in QDQ form: they build a pending :class:`Linear` that the next
QuantizeLinear closes into a ``MatVec`` op (a convolution, ``ops_conv``, into a ``Conv``).

Memory: 8-bit constant weights stay narrow (as stored, int8, or int16 with the zero point
subtracted) instead of an int64 copy, and the accumulator range is computed without one
(``rtl_templates.quant.dot_range``); a filled constant (ConstantOfShape) stays a broadcast
view. ImageNet-scale fully connected layers import in bounded memory this way.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from hwgen.dataflow.affine import Chain, fold_or_note, host_affine, record
from hwgen.dataflow.context import (
    REGISTRY,
    ImportContext,
    Unsupported,
    check_attrs,
    unquantized_input,
)
from hwgen.dataflow.intgraph import IntGraph, Window, int_op
from hwgen.dataflow.loader import Node
from hwgen.dataflow.lower import FIFO_MARGIN, Block, Builder, Folding, short_name
from hwgen.dataflow.ops_join import add_tensors
from hwgen.dataflow.ops_qdq import clamp_bounds, closed_nodes
from hwgen.dataflow.values import Const, Deq, DeqConst, FloatInput, Int, Pending, channel_last_order
from hwgen.errors import HwgenError
from hwgen.rtl_templates.block import FoldSpace, divisors
from hwgen.rtl_templates.mvau import MVAUParams, frame_steps
from hwgen.rtl_templates.quant import Requant, compact, dot_range, make_requant, range_type


@dataclass
class Linear(Pending):
    """A matrix product awaiting its QuantizeLinear: real = acc * acc_scale (per channel),
    acc = weights @ (x - zx) + bias, then clamped to [clip_lo, clip_hi] in real units."""
    src: str
    weights: np.ndarray           # [MH, MW] integers (weight zero point subtracted)
    acc_scale: np.ndarray         # [MH] float64
    bias: np.ndarray              # [MH] int64, in accumulator units
    nodes: list[str]
    shape: tuple[int, ...]
    clip_lo: float = -np.inf
    clip_hi: float = np.inf
    has_bias: bool = False
    window: Window | None = None   # the sliding window of a convolution
    pad_value: int | None = None   # its padding in input integers (None: the zero point)
    depthwise: bool = False
    op: type | None = None         # the integer op it closes into (None: MatVec)
    chain: Chain | None = None     # float ops after the accumulator, recorded exactly
    # a float bias: its real values, and the integers ``bias`` holds for it (rounded to the
    # accumulator's grid, which is what a requantizer after it sees)
    float_bias: np.ndarray | None = None
    float_bias_acc: np.ndarray | None = None

    def close(self, ctx, name, qtype, s, zp, closing) -> Int:
        """The MatVec (or Conv) op with its requantizer."""
        if self.chain is not None and self.chain.unfolded:
            raise Unsupported(f"{self.chain.unfolded}; only a low-bit QONNX quantizer "
                              f"(thresholds) can follow it")
        lo, hi = clamp_bounds(qtype, s, zp, self.clip_lo, self.clip_hi)
        # the multiplier in float32, (input scale · weight scale) / output scale, as ORT forms it
        mult = self.acc_scale.astype(np.float32) / np.float32(s)
        out = ctx.new_tensor(name, self.shape, qtype, s, zp)
        rq = make_requant(mult, zp, lo, hi)
        nodes = closed_nodes(self.nodes, closing)
        ctx.ig.ops.append((self.op or MatVec).from_linear(self, nodes, out, rq))
        return Int(out, self.shape, channel_last_order(self.shape))

    def close_raw(self, ctx, name) -> tuple[Int, np.ndarray, np.ndarray | None]:
        """The accumulator itself as the graph's output, for the host to rescale: a
        requantizer of multiplier 1 into the accumulator's exact range. Returns the value,
        the real scale of each output channel and the float bias the host adds (None: no
        float bias; an integer one stays in the accumulator)."""
        if self.chain is not None or np.isfinite(self.clip_hi) or self.clip_lo not in (
                -np.inf, 0.0):
            raise Unsupported("float ops after the product other than a bias and a Relu "
                              "cannot stream its accumulator to the host")
        if np.any(self.acc_scale <= 0):
            raise Unsupported("accumulator scales must be positive")
        bias, offset = self.bias, None
        if self.float_bias is not None:
            if self.clip_lo == 0.0:
                raise Unsupported("a Relu after a float bias cannot stream its accumulator "
                                  "to the host")
            bias = self.bias - self.float_bias_acc
            offset = self.float_bias.astype(np.float32)
        tin = ctx.ig.tensors[self.src]
        lo, hi = dot_range(self.weights, tin.qtype.lo, tin.qtype.hi)
        lo, hi = int(np.min(lo + bias)), int(np.max(hi + bias))
        if self.clip_lo == 0.0:
            lo, hi = max(lo, 0), max(hi, 0)
        qtype = range_type(lo, hi)
        if qtype.bits > MAX_RAW_BITS:
            raise Unsupported(f"its accumulator takes {qtype.bits} bits, more than the "
                              f"{MAX_RAW_BITS} an output stream element may have")
        out = ctx.new_tensor(name, self.shape, qtype, 1.0, 0)
        rq = Requant((1,), 0, 0, lo, hi)
        lin = dataclasses.replace(self, bias=bias)
        ctx.ig.ops.append((self.op or MatVec).from_linear(lin, list(self.nodes), out, rq))
        return Int(out, self.shape, channel_last_order(self.shape)), \
            self.acc_scale.astype(np.float32), offset


#: the widest accumulator a layer streams to a host tail
MAX_RAW_BITS = 32


@int_op
@dataclass
class MatVec:
    """``out = requant(weights @ in + bias)``: Gemm / MatMul (+ Add) (+ Relu) + QuantizeLinear;
    one matrix–vector unit."""
    name: str                 # the ONNX node of the product (Gemm/MatMul): the layer's name
    nodes: list[str]          # every ONNX node folded into it
    input: str
    output: str
    weights: np.ndarray       # [MH, MW] integers, weight zero point subtracted
    bias: np.ndarray          # [MH] int64, input zero point folded in
    requant: Requant

    @classmethod
    def from_linear(cls, lin: Linear, nodes: list[str], out: str, rq: Requant) -> MatVec:
        return cls(lin.nodes[0], nodes, lin.src, out, lin.weights, lin.bias, rq)

    def fold_space(self, ig: IntGraph) -> FoldSpace:
        mh, mw = self.weights.shape
        return FoldSpace(divisors(mh), divisors(mw),
                         lambda pe, simd: frame_steps(mh, mw, pe, simd))

    def in_per_beat(self, f: Folding) -> int:
        return f.simd

    def lower(self, b: Builder, ig: IntGraph, f: Folding) -> str:
        tin, tout = ig.tensors[self.input], ig.tensors[self.output]
        try:
            p = MVAUParams(self.weights, self.bias, self.requant, tin.qtype, tout.qtype, f.pe,
                           f.simd, lut_lanes=f.lut_lanes, spram=f.spram,
                           rom_logic=f.rom_logic)
        except ValueError as e:     # a folding the unit cannot take (products in logic)
            raise HwgenError(f"layer {self.name}: {e}") from None
        # an MVAU that replays its input (several neuron folds) reads one whole vector early
        src, _ = b.read(self.input, f.simd, p.sf + FIFO_MARGIN if p.nf > 1 else FIFO_MARGIN)
        out = b.stream(short_name(self.output), tout.qtype, f.pe, tout.size)
        b.add(Block(self.name, "mvau", p, [src], [out], self.name, tuple(self.nodes)))
        return out


def narrow_weights(q: np.ndarray, z_w: np.ndarray, axis: int) -> np.ndarray:
    """Integer weights ``q`` minus their zero points ``z_w`` (one per index of ``axis``), in a
    narrow dtype where the weights are 8-bit (as stored when the zero points are 0 and ``q``
    is signed, else int16), else in int64."""
    if q.dtype.itemsize == 1 and q.dtype.kind in "iu":
        if not np.any(z_w) and q.dtype.kind == "i":
            return q
        shape = [1] * q.ndim
        shape[axis] = -1
        return q.astype(np.int16) - z_w.astype(np.int16).reshape(shape)
    shape = [1] * q.ndim
    shape[axis] = -1
    return q.astype(np.int64) - z_w.reshape(shape)


def row_sums(w: np.ndarray) -> np.ndarray:
    """Per-row sums (int64) of a 2-D integer matrix, possibly a broadcast view."""
    c = compact(w)
    s = c.sum(axis=1, dtype=np.int64) * (w.shape[1] // max(c.shape[1], 1))
    return np.broadcast_to(s, (w.shape[0],)).copy()


def linear(ctx: ImportContext, node: Node, x, w: DeqConst, w_out_axis: int) -> Linear:
    """x: Deq [K]; w: dequantized constant with K×M (w_out_axis=1) or M×K (w_out_axis=0)."""
    if isinstance(x, FloatInput):
        raise unquantized_input(ctx)
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
    if w.q.shape[1 - w_out_axis] != x.shape[0]:
        raise Unsupported(f"weights {list(w.q.shape)} do not match an input of "
                          f"{x.shape[0]} elements")
    q = narrow_weights(w.q, z_w, w_out_axis)
    wm = q if w_out_axis == 0 else q.T                           # [MH, MW]
    if x.order is not None and compact(wm).shape[1] != 1:
        # columns in the order the elements arrive on the stream
        wm = np.ascontiguousarray(wm[:, x.order])
    t = ctx.ig.tensors[x.tensor]
    acc_scale = (np.float32(t.scale) * s_w.astype(np.float32)).astype(np.float64)  # as ORT
    bias = -t.zero_point * row_sums(wm)                         # fold the input zero point
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


def add_bias(lin: Linear, b, node: Node, channel_vector: bool = False) -> Linear:
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
        if not np.all(np.isfinite(arr)):
            raise Unsupported("its float bias holds a value that is not finite (NaN or "
                              "infinity)")
        real = np.broadcast_to(arr.reshape(-1).astype(np.float64), (n,))
        acc_b = np.rint(real / lin.acc_scale).astype(np.int64)
        lin.float_bias, lin.float_bias_acc = np.array(real), acc_b
    lin.bias = lin.bias + acc_b
    lin.has_bias = True
    lin.nodes.append(node.label)
    return lin


GEMM_ATTRS = {"alpha": lambda v: v == 1.0, "beta": lambda v: v == 1.0,
              "transA": lambda v: v == 0, "transB": None}


def gemm(ctx: ImportContext, node: Node):
    check_attrs(node, GEMM_ATTRS)
    x, w = ctx.value(node, 0), ctx.value(node, 1)
    lin = linear(ctx, node, x, w, 0 if node.attrs.get("transB", 0) else 1)
    c = ctx.value(node, 2)
    if c is not None:
        lin = add_bias(lin, c, node)
        lin.nodes.pop()
    ctx.set(node, lin)


def matmul(ctx: ImportContext, node: Node):
    check_attrs(node, {})
    ctx.set(node, linear(ctx, node, ctx.value(node, 0), ctx.value(node, 1), 1))


def add(ctx: ImportContext, node: Node):
    check_attrs(node, {})
    if host_affine(ctx, node):
        return
    a, b = ctx.value(node, 0), ctx.value(node, 1)
    if isinstance(a, Deq) and isinstance(b, Deq):
        add_tensors(ctx, node, a, b)
        return
    data = 0
    if isinstance(b, Linear):
        a, b, data = b, a, 1
    if not isinstance(a, Linear):
        raise Unsupported("only a constant bias added to a Gemm/MatMul result is supported "
                          "(add of two tensors is not)")
    if a.chain is None and isinstance(b, DeqConst):
        ctx.set(node, add_bias(a, b, node))     # the layer's own quantized bias: exact
        return
    record(ctx, a, node, data)
    fold_or_note(a, node, lambda: add_bias(a, b, node))
    ctx.set(node, a)


for _v in (7, 9, 11, 13):
    REGISTRY.register("", "Gemm", _v)(gemm)
for _v in (9, 13):
    REGISTRY.register("", "MatMul", _v)(matmul)
for _v in (7, 13, 14):
    REGISTRY.register("", "Add", _v)(add)
