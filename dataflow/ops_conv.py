"""Conv (2-D, group 1 or depthwise) and BatchNormalization folding, QDQ form.

A convolution becomes a pending ``Linear`` with a window geometry: its weight matrix has one
row per output channel and columns in (kh, kw, c) order, the order in which the sliding-window
generator streams a window of a channel-last feature map. Padding positions carry the input
zero point (real zero), so the input zero-point correction of the bias holds everywhere.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from hwgen.dataflow.context import REGISTRY, ImportContext, Unsupported, check_attrs
from hwgen.dataflow.intgraph import IntGraph, Window, int_op
from hwgen.dataflow.loader import Node
from hwgen.dataflow.lower import Block, Builder, Folding, row_fifo_depth, short_name
from hwgen.dataflow.ops_linear import Linear, add_bias
from hwgen.dataflow.values import Deq, DeqConst, FloatInput, channel_last_order
from hwgen.rtl_templates.block import FoldSpace, divisors
from hwgen.rtl_templates.mvau import MVAUParams
from hwgen.rtl_templates.quant import Requant
from hwgen.rtl_templates.swg import SWGParams
from hwgen.rtl_templates.vvau import VVAUParams


@int_op
@dataclass
class Conv:
    """2-D convolution (+ bias, folded batch norm, Relu/Clip) + QuantizeLinear: a
    sliding-window generator and a matrix–vector unit (a vector unit when ``depthwise``).
    ``weights`` is [OC, KH*KW*C] with columns in (kh, kw, c) order, or [C, KH*KW] when
    ``depthwise`` (group = channels)."""
    name: str
    nodes: list[str]
    input: str
    output: str
    weights: np.ndarray
    bias: np.ndarray
    requant: Requant
    window: Window
    depthwise: bool = False

    @classmethod
    def from_linear(cls, lin: Linear, nodes: list[str], out: str, rq: Requant) -> Conv:
        return cls(lin.nodes[0], nodes, lin.src, out, lin.weights, lin.bias, rq, lin.window,
                   lin.depthwise)

    def fold_space(self, ig: IntGraph) -> FoldSpace:
        c = self.window.in_shape[0]
        px = int(np.prod(self.window.out_hw))
        k = self.window.kernel[0] * self.window.kernel[1]
        if self.depthwise:
            return FoldSpace(divisors(c), (1,), lambda pe, simd: px * k * (c // pe))
        oc = self.weights.shape[0]
        return FoldSpace(divisors(oc), divisors(c),
                         lambda pe, simd: px * (oc // pe) * k * (c // simd))

    def in_per_beat(self, f: Folding) -> int:
        return f.pe if self.depthwise else f.simd

    def lower(self, b: Builder, ig: IntGraph, f: Folding) -> str:
        tin, tout = ig.tensors[self.input], ig.tensors[self.output]
        nodes = tuple(self.nodes)
        oh, ow = self.window.out_hw
        windows = add_window_generator(b, ig, self, tin.zero_point, self.in_per_beat(f),
                                       self.depthwise)
        out = b.stream(short_name(self.output), tout.qtype, f.pe, tout.size)
        if self.depthwise:
            p = VVAUParams(self.weights, self.bias, self.requant, tin.qtype, tout.qtype, f.pe,
                           oh * ow)
            b.add(Block(self.name, "vvau", p, [windows], [out], self.name, nodes))
        else:
            p = MVAUParams(self.weights, self.bias, self.requant, tin.qtype, tout.qtype, f.pe,
                           f.simd, oh * ow)
            b.add(Block(self.name, "mvau", p, [windows], [out], self.name, nodes))
        return out


def add_window_generator(b: Builder, ig: IntGraph, op, pad_value: int, per_beat: int,
                         depthwise: bool) -> str:
    """The sliding-window stage of a windowed op (convolution, pooling): the generator block
    reading ``op.input`` through a FIFO of one input row, and its window stream (returned)."""
    tin = ig.tensors[op.input]
    win = op.window
    c, h, w = win.in_shape
    oh, ow = win.out_hw
    sp = SWGParams((h, w, c), win.kernel, win.stride, win.pads, pad_value, tin.qtype, per_beat,
                   depthwise)
    src, _ = b.read(op.input, per_beat, row_fifo_depth(sp))
    windows = b.stream(f"{short_name(op.output)}_win", tin.qtype, per_beat,
                       oh * ow * win.kernel[0] * win.kernel[1] * c)
    b.add(Block(f"{op.name}_swg", "swg", sp, [src], [windows], op.name, tuple(op.nodes)))
    return windows


def window_from_attrs(node: Node, in_shape: tuple[int, int, int],
                      kernel: tuple[int, int]) -> Window:
    """Kernel/stride/pads of a 2-D Conv or pooling node (auto_pad and ceil_mode handled)."""
    a = node.attrs
    if any(d != 1 for d in a.get("dilations", [1, 1])):
        raise Unsupported(f"dilations {list(a['dilations'])} are not supported (only 1)")
    strides = tuple(int(s) for s in a.get("strides", [1, 1]))
    c, h, w = in_shape
    auto = a.get("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = []
        for size, k, s in ((h, kernel[0], strides[0]), (w, kernel[1], strides[1])):
            total = max((math.ceil(size / s) - 1) * s + k - size, 0)
            small = total // 2
            pads.append((total - small, small) if auto == "SAME_LOWER" else (small, total - small))
        pads = (pads[0][0], pads[1][0], pads[0][1], pads[1][1])
    elif auto == "VALID":
        pads = (0, 0, 0, 0)
    elif auto == "NOTSET":
        pads = tuple(int(p) for p in a.get("pads", [0, 0, 0, 0]))
    else:
        raise Unsupported(f"auto_pad={auto!r} is not supported")
    if len(strides) != 2 or len(pads) != 4:
        raise Unsupported("only 2-D windows are supported")
    if any(s < 1 for s in strides):
        raise Unsupported(f"strides {list(strides)} must be at least 1")
    if any(p < 0 for p in pads):
        raise Unsupported(f"pads {list(pads)} must not be negative")
    win = Window(in_shape, kernel, strides, pads)
    if a.get("ceil_mode", 0):
        # ceil mode adds an output row/column only when the floor formula leaves a remainder
        for size, k, s, p0, p1 in ((h, kernel[0], strides[0], pads[0], pads[2]),
                                   (w, kernel[1], strides[1], pads[1], pads[3])):
            if (size + p0 + p1 - k) % s:
                raise Unsupported("ceil_mode=1 with a partial last window is not supported")
    oh, ow = win.out_hw
    if oh < 1 or ow < 1:
        raise Unsupported(f"kernel {list(kernel)} does not fit the {h}x{w} input with its pads")
    return win


def feature_map(x, what: str = "input") -> Deq:
    """The node's data input must be a dequantized (C, H, W) map streamed channel-last."""
    if isinstance(x, FloatInput):
        raise Unsupported("its input is a float tensor that no QuantizeLinear quantized: "
                          "the model is not quantized here")
    if not isinstance(x, Deq) or len(x.shape) != 3:
        raise Unsupported(f"its {what} must be a quantized [N, C, H, W] feature map "
                          f"(got {type(x).__name__} of shape {list(getattr(x, 'shape', []))})")
    if not np.array_equal(x.order, channel_last_order(x.shape)):
        raise Unsupported(f"its {what} is a transposed or reshaped view; a feature map "
                          f"straight from a convolution, pooling or the input is needed")
    return x


CONV_ATTRS = {"auto_pad": None, "dilations": None, "group": None, "kernel_shape": None,
               "pads": None, "strides": None}


def conv(ctx: ImportContext, node: Node):
    check_attrs(node, CONV_ATTRS)
    ctx.set(node, conv_linear(ctx, node, ctx.value(node, 0), ctx.value(node, 1),
                              ctx.value(node, 2)))


def conv_linear(ctx: ImportContext, node: Node, x, w, b) -> Linear:
    """The pending convolution of dequantized ``x`` with dequantized weights ``w`` (+ ``b``)."""
    x = feature_map(x)
    if not isinstance(w, DeqConst) or w.q.ndim != 4:
        raise Unsupported("its weights must be a 4-D constant integer tensor behind "
                          "DequantizeLinear")
    oc, cg, kh, kw = w.q.shape
    c = x.shape[0]
    group = int(node.attrs.get("group", 1))
    s_w, z_w = w.per_channel(0, oc, "the weight")
    wq = w.q.astype(np.int64) - z_w[:, None, None, None]
    if group == 1:
        if cg != c:
            raise Unsupported(f"weights expect {cg} input channels, the input has {c}")
        wm = wq.transpose(0, 2, 3, 1).reshape(oc, -1)          # columns (kh, kw, c)
        depthwise = False
    elif group == c and cg == 1 and oc == c:
        wm = wq.reshape(c, kh * kw)
        depthwise = True
    else:
        raise Unsupported(f"group={group} with {c} input and {oc} output channels: only "
                          f"group=1 and depthwise (group = channels, multiplier 1) are supported")
    win = window_from_attrs(node, x.shape, (kh, kw))
    t = ctx.ig.tensors[x.tensor]
    lin = Linear(src=x.tensor, weights=wm,
                 acc_scale=(np.float32(t.scale) * s_w.astype(np.float32)).astype(np.float64),
                 bias=-t.zero_point * wm.sum(axis=1),
                 nodes=[node.label], shape=(oc,) + win.out_hw, window=win,
                 depthwise=depthwise, op=Conv)
    if b is not None:
        add_bias(lin, b, node, channel_vector=True)
        lin.nodes.pop()
    return lin


def batch_norm(ctx: ImportContext, node: Node):
    """Fold inference-mode BatchNormalization into the convolution/Gemm before it:
    real' = real·g + (beta − mean·g), g = gamma / sqrt(var + eps), per channel."""
    check_attrs(node, {"epsilon": None, "momentum": None, "spatial": lambda v: v == 1,
                       "training_mode": lambda v: v == 0})
    x = ctx.value(node, 0)
    if not isinstance(x, Linear) or x.clip_lo > -np.inf or x.clip_hi < np.inf:
        raise Unsupported("BatchNormalization must directly follow a Conv or Gemm to be "
                          "folded into it")
    if len([o for o in node.outputs if o]) > 1:
        raise Unsupported("BatchNormalization in training mode is not supported")
    gamma, beta, mean, var = (np.asarray(ctx.const(node, k, n), np.float64).reshape(-1)
                              for k, n in ((1, "scale"), (2, "bias"), (3, "mean"), (4, "var")))
    eps = float(node.attrs.get("epsilon", 1e-5))
    g = gamma / np.sqrt(var + eps)
    shift = beta - mean * g
    sign = np.where(g < 0, -1, 1)
    x.weights = x.weights * sign[:, None]
    x.bias = x.bias * sign
    x.acc_scale = x.acc_scale * np.abs(g)
    safe = np.where(x.acc_scale > 0, x.acc_scale, 1.0)
    x.bias = x.bias + np.rint(shift / safe).astype(np.int64)
    x.nodes.append(node.label)
    ctx.set(node, x)


for _v in (1, 11, 22):
    REGISTRY.register("", "Conv", _v)(conv)
for _v in (7, 9, 14, 15):
    REGISTRY.register("", "BatchNormalization", _v)(batch_norm)
