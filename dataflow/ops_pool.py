"""MaxPool, AveragePool, GlobalAveragePool and spatial ReduceMean (QDQ and integer inputs).

In QDQ form they build a pending :class:`Pooled` that the next QuantizeLinear closes into a
``Pool`` / ``GlobalAvgPool`` op."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from hwgen.dataflow.context import REGISTRY, ImportContext, Unsupported, check_attrs
from hwgen.dataflow.intgraph import IntGraph, Window, int_op
from hwgen.dataflow.loader import Node
from hwgen.dataflow.lower import Block, Builder, Folding, short_name
from hwgen.dataflow.ops_conv import add_window_generator, feature_map, window_from_attrs
from hwgen.dataflow.ops_qdq import clamp_bounds, closed_nodes
from hwgen.dataflow.values import Int, Pending, channel_last_order
from hwgen.rtl_templates.block import FoldSpace, divisors
from hwgen.rtl_templates.gap import GAPParams
from hwgen.rtl_templates.pool import PoolParams
from hwgen.rtl_templates.quant import Requant, make_requant


@int_op
@dataclass
class Pool:
    """Max or average pooling over windows: a sliding-window generator and a pooling unit.
    Average: acc = Σ_window q - K·z_in (padding enters as z_in, i.e. real zero), divided by
    the pixel's count: ``requant.mult[j]`` is the multiplier of the j-th smallest distinct
    value of ``counts``."""
    name: str
    nodes: list[str]
    input: str
    output: str
    kind: str                                 # "max" | "avg"
    window: Window
    counts: np.ndarray | None = None          # avg: divisor per output pixel
    requant: Requant | None = None            # avg: one multiplier per distinct count

    def fold_space(self, ig: IntGraph) -> FoldSpace:
        c = self.window.in_shape[0]
        px = int(np.prod(self.window.out_hw))
        k = self.window.kernel[0] * self.window.kernel[1]
        return FoldSpace(divisors(c), (1,), lambda pe, simd: px * k * (c // pe))

    def in_per_beat(self, f: Folding) -> int:
        return f.pe

    def lower(self, b: Builder, ig: IntGraph, f: Folding) -> str:
        tin, tout = ig.tensors[self.input], ig.tensors[self.output]
        nodes = tuple(self.nodes)
        c = self.window.in_shape[0]
        oh, ow = self.window.out_hw
        k = self.window.kernel[0] * self.window.kernel[1]
        pad = tin.qtype.lo if self.kind == "max" else tin.zero_point
        windows = add_window_generator(b, ig, self, pad, f.pe, True)
        avg = self.kind == "avg"
        pp = PoolParams(self.kind, c, k, tin.qtype, tout.qtype, f.pe, oh * ow,
                        self.requant if avg else None, tin.zero_point,
                        self.counts if avg else None)
        out = b.stream(short_name(self.output), tout.qtype, f.pe, tout.size)
        b.add(Block(self.name, "pool", pp, [windows], [out], self.name, nodes))
        return out


@int_op
@dataclass
class GlobalAvgPool:
    """Mean over all pixels per channel: acc = Σ q - H·W·z_in, then requant."""
    name: str
    nodes: list[str]
    input: str
    output: str
    requant: Requant

    def fold_space(self, ig: IntGraph) -> FoldSpace:
        t = ig.tensors[self.input]
        return FoldSpace(divisors(t.shape[0]), (1,), lambda pe, simd: t.size // pe)

    def in_per_beat(self, f: Folding) -> int:
        return f.pe

    def lower(self, b: Builder, ig: IntGraph, f: Folding) -> str:
        tin, tout = ig.tensors[self.input], ig.tensors[self.output]
        c = tin.shape[0]
        gp = GAPParams(c, tin.size // c, self.requant, tin.qtype, tout.qtype, f.pe,
                       tin.zero_point)
        src, _ = b.read(self.input, f.pe)
        out = b.stream(short_name(self.output), tout.qtype, f.pe, tout.size)
        b.add(Block(self.name, "gap", gp, [src], [out], self.name, tuple(self.nodes)))
        return out


@dataclass
class Pooled(Pending):
    """Pooling of a dequantized feature map, awaiting its QuantizeLinear.
    ``kind``: "max", "avg" or "gap" (global average)."""
    tensor: str
    kind: str
    shape: tuple[int, ...]
    nodes: list[str]
    window: Window | None = None
    count_include_pad: bool = False
    clip_lo: float = -np.inf
    clip_hi: float = np.inf

    def close(self, ctx, name, qtype, s, zp, closing) -> Int:
        t = ctx.ig.tensors[self.tensor]
        lo, hi = clamp_bounds(qtype, s, zp, self.clip_lo, self.clip_hi)
        out = ctx.new_tensor(name, self.shape, qtype, s, zp)
        nodes = closed_nodes(self.nodes, closing)
        result = Int(out, self.shape, channel_last_order(self.shape))
        if self.kind == "max":
            if (t.qtype, np.float32(t.scale), t.zero_point) != (qtype, s, zp) or \
                    (lo, hi) != (qtype.lo, qtype.hi):
                raise Unsupported("MaxPool must keep its input's quantization (same scale and "
                                  "zero point, no clip) to map to integer max pooling")
            ctx.ig.ops.append(Pool(self.nodes[0], nodes, self.tensor, out, "max", self.window))
            return result
        real = np.float64(np.float32(t.scale)) / np.float64(s)
        if self.kind == "gap":
            hw = int(np.prod(t.shape[1:]))
            ctx.ig.ops.append(GlobalAvgPool(self.nodes[0], nodes, self.tensor, out,
                                            make_requant(real / hw, zp, lo, hi)))
            return result
        win = self.window
        k = win.kernel[0] * win.kernel[1]
        counts = np.full(int(np.prod(win.out_hw)), k) if self.count_include_pad \
            else win.counts()
        # onnxruntime's (Q)LinearAveragePool adds the zero point before rounding, in float32
        rq = dataclasses.replace(make_requant(real / np.unique(counts).astype(np.float64), zp,
                                              lo, hi), zp_first=True)
        ctx.ig.ops.append(Pool(self.nodes[0], nodes, self.tensor, out, "avg", win, counts, rq))
        return result


POOL_ATTRS = {"auto_pad": None, "ceil_mode": None, "dilations": None, "kernel_shape": None,
               "pads": None, "strides": None, "storage_order": lambda v: v == 0,
               "count_include_pad": None}


def pool_window(node: Node, shape):
    k = tuple(int(v) for v in node.attrs["kernel_shape"])
    if len(k) != 2:
        raise Unsupported(f"kernel_shape {list(k)}: only 2-D pooling is supported")
    return window_from_attrs(node, shape, k)


def max_pool(ctx: ImportContext, node: Node):
    check_attrs(node, POOL_ATTRS)
    if len(node.outputs) > 1 and node.outputs[1]:
        raise Unsupported("the Indices output of MaxPool is not supported")
    x = ctx.value(node, 0)
    if isinstance(x, Int) or getattr(x, "integer_max_pool", False):
        # integer input (QOperator models), or a map a QONNX quantizer wrote (no quantizer
        # follows its MaxPool; see ops_qonnx.QDeq): max of integers, same quantization
        if not np.array_equal(x.order, channel_last_order(x.shape)):
            raise Unsupported("its input must be a (C, H, W) feature map")
        win = pool_window(node, x.shape)
        if getattr(x, "bipolar", False) and any(win.pads):
            raise Unsupported("max pooling of a bipolar map with padding is not supported")
        t = ctx.ig.tensors[x.tensor]
        shape = (x.shape[0],) + win.out_hw
        out = ctx.new_tensor(node.outputs[0], shape, t.qtype, t.scale, t.zero_point)
        ctx.ig.ops.append(Pool(node.label, [node.label], x.tensor, out, "max", win))
        ctx.set(node, type(x)(out, shape, channel_last_order(shape)))
        return
    x = feature_map(x)
    win = pool_window(node, x.shape)
    ctx.set(node, Pooled(x.tensor, "max", (x.shape[0],) + win.out_hw, [node.label], win))


def average_pool(ctx: ImportContext, node: Node):
    check_attrs(node, POOL_ATTRS)
    x = feature_map(ctx.value(node, 0))
    win = pool_window(node, x.shape)
    ctx.set(node, Pooled(x.tensor, "avg", (x.shape[0],) + win.out_hw, [node.label], win,
                         bool(node.attrs.get("count_include_pad", 0))))


def global_average_pool(ctx: ImportContext, node: Node):
    check_attrs(node, {})
    x = feature_map(ctx.value(node, 0))
    ctx.set(node, Pooled(x.tensor, "gap", (x.shape[0], 1, 1), [node.label]))


def reduce_mean(ctx: ImportContext, node: Node):
    check_attrs(node, {"axes": None, "keepdims": None, "noop_with_empty_axes": None})
    x = feature_map(ctx.value(node, 0))
    axes = node.attrs.get("axes") if node.since_version < 18 else ctx.const(node, 1, "axes")
    axes = sorted(int(a) % 4 for a in np.asarray(axes if axes is not None else [],
                                                 dtype=np.int64).reshape(-1))
    if axes != [2, 3]:
        raise Unsupported(f"ReduceMean over axes {axes}: only the spatial axes [2, 3] of an "
                          f"[N, C, H, W] map are supported")
    keep = int(node.attrs.get("keepdims", 1))
    shape = (x.shape[0], 1, 1) if keep else (x.shape[0],)
    ctx.set(node, Pooled(x.tensor, "gap", shape, [node.label]))


for _v in (8, 10, 11, 12, 22):
    REGISTRY.register("", "MaxPool", _v)(max_pool)
for _v in (7, 10, 11, 19, 22):
    REGISTRY.register("", "AveragePool", _v)(average_pool)
for _v in (1, 22):
    REGISTRY.register("", "GlobalAveragePool", _v)(global_average_pool)
for _v in (1, 11, 13, 18):
    REGISTRY.register("", "ReduceMean", _v)(reduce_mean)
