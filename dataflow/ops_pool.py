"""MaxPool, AveragePool, GlobalAveragePool and spatial ReduceMean (QDQ and integer inputs),
over [N, C, H, W] maps and [N, C, L] ones (as (C, 1, L), see ``ops_conv``).

In QDQ form they build a pending :class:`Pooled` that the next QuantizeLinear closes into a
``Pool`` / ``GlobalAvgPool`` op.

Padding, exactly as ONNX defines it:

* MaxPool pads (its own, and the rows/columns a ceil_mode partial last window reaches past
  the input) with the type's minimum: the window is clipped to the input. AveragePool pads
  with the zero point (real zero) and divides by its count (below).
* A Pad before a pooling joins the window (``ops_conv.window_input``). Its elements are
  real values: AveragePool counts them in every divisor; MaxPool pads with the Pad's value
  when the pooling has no padding of its own, or when its input never goes below that value
  (then padding its own pads with it changes no maximum); else only a Pad with the type's
  minimum folds: one window cannot pad with two values.
* AveragePool's divisor per output pixel counts the input, the Pad's elements and, with
  count_include_pad, its own pads, never ceil mode's extension. With count_include_pad and a
  ceil_mode partial window it is refused: onnxruntime's float kernel divides that window by
  its size clipped to the padded input, its quantized kernel differently.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from hwgen.dataflow.context import REGISTRY, ImportContext, Unsupported, check_attrs
from hwgen.dataflow.intgraph import IntGraph, Window, int_op
from hwgen.dataflow.loader import Node
from hwgen.dataflow.lower import Block, Builder, Folding, short_name
from hwgen.dataflow.ops_conv import (
    WindowInput,
    add_window_generator,
    feature_map,
    window_geometry,
    window_input,
)
from hwgen.dataflow.ops_qdq import clamp_bounds, closed_nodes
from hwgen.dataflow.values import Int, Padded, Pending, channel_last_order
from hwgen.rtl_templates.block import FoldSpace, divisors
from hwgen.rtl_templates.gap import GAPParams
from hwgen.rtl_templates.pool import PoolParams
from hwgen.rtl_templates.pool import frame_steps as pool_steps
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
    pad_value: int | None = None              # padding (None: max the type's min, avg z_in)

    def fold_space(self, ig: IntGraph) -> FoldSpace:
        c = self.window.in_shape[0]
        px = int(np.prod(self.window.out_hw))
        k = self.window.kernel[0] * self.window.kernel[1]
        return FoldSpace(divisors(c), (1,), lambda pe, simd: pool_steps(c, k, px, pe))

    def in_per_beat(self, f: Folding) -> int:
        return f.pe

    def lower(self, b: Builder, ig: IntGraph, f: Folding) -> str:
        tin, tout = ig.tensors[self.input], ig.tensors[self.output]
        nodes = tuple(self.nodes)
        c = self.window.in_shape[0]
        oh, ow = self.window.out_hw
        k = self.window.kernel[0] * self.window.kernel[1]
        pad = self.pad_value if self.pad_value is not None else \
            tin.qtype.lo if self.kind == "max" else tin.zero_point
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
    counts: np.ndarray | None = None          # avg: the divisors, when a Pad or ceil mode set them
    pad_value: int | None = None              # max: the pad value, when a Pad set it
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
            ctx.ig.ops.append(Pool(self.nodes[0], nodes, self.tensor, out, "max", self.window,
                                   pad_value=self.pad_value))
            return result
        real = np.float64(np.float32(t.scale)) / np.float64(s)
        if self.kind == "gap":
            hw = int(np.prod(t.shape[1:]))
            ctx.ig.ops.append(GlobalAvgPool(self.nodes[0], nodes, self.tensor, out,
                                            make_requant(real / hw, zp, lo, hi)))
            return result
        win = self.window
        k = win.kernel[0] * win.kernel[1]
        if self.counts is not None:
            counts = self.counts
        elif self.count_include_pad:
            counts = np.full(int(np.prod(win.out_hw)), k)
        else:
            counts = win.counts()
        # onnxruntime's (Q)LinearAveragePool adds the zero point before rounding, in float32
        rq = dataclasses.replace(make_requant(real / np.unique(counts).astype(np.float64), zp,
                                              lo, hi), zp_first=True)
        if whole_map(win):
            # one window over the whole map, no pads: the global-average block sums it in
            # place (no window buffer), with the average pooling's rounding
            ctx.ig.ops.append(GlobalAvgPool(self.nodes[0], nodes, self.tensor, out, rq))
            return result
        ctx.ig.ops.append(Pool(self.nodes[0], nodes, self.tensor, out, "avg", win, counts, rq))
        return result


def whole_map(win: Window) -> bool:
    """Whether ``win`` is one unpadded window covering its whole input (an AveragePool
    that is a global average)."""
    return (win.out_hw == (1, 1) and not any(win.pads) and win.dilation == (1, 1)
            and tuple(win.kernel) == tuple(win.in_shape[1:]))


POOL_ATTRS = {"auto_pad": None, "ceil_mode": None, "dilations": None, "kernel_shape": None,
               "pads": None, "strides": None, "storage_order": lambda v: v == 0,
               "count_include_pad": None}


def pool_kernel(node: Node, rank: int) -> tuple[int, int]:
    k = tuple(int(v) for v in node.attrs["kernel_shape"])
    if len(k) != rank:
        raise Unsupported(f"kernel_shape {list(k)} does not match its {rank}-D input")
    return (1, k[0]) if rank == 1 else k


def least_value(ig: IntGraph, tensor: str) -> int:
    """The least value ``tensor`` can hold: the lower clamp of the requantizer or join that
    writes it (a Relu folded into it), through max poolings; else its type's minimum."""
    t = ig.tensors[tensor]
    op = ig.producer(tensor)
    if isinstance(op, Pool) and op.kind == "max":
        return least_value(ig, op.input)
    rq = getattr(op, "requant", None)
    lo = rq.lo if rq is not None else getattr(op, "lo", None)
    return t.qtype.lo if lo is None else max(int(lo), t.qtype.lo)


def pooled(node: Node, wi: WindowInput, kind: str, zero_point: int, lo: int,
           least: int | None = None) -> Pooled:
    """The pending max or average pooling of ``wi`` (a map, maybe padded by a Pad): its
    window, and the pad value (max) or divisors (avg) where a Pad or ceil mode sets them.
    ``zero_point`` and ``lo``: the input's zero point and its type's minimum; ``least``: the
    least value the input holds (max pooling; None: ``lo``)."""
    kernel = pool_kernel(node, wi.rank)
    g = window_geometry(node, wi.shape, kernel, wi.rank, wi.pads)
    win = g.window
    out_shape = wi.out_shape(wi.shape[0], win)
    nodes = [node.label, *wi.nodes]
    if kind == "max":
        pad_value = None
        if wi.value is not None and wi.value != lo:
            # its own pads (and ceil mode's) pad with lo; padding them with the Pad's value
            # instead changes no maximum when every window holds an element of the padded
            # input (own pads narrower than the kernel) and the input never goes below it
            own_fits = all(p < k for p, k in zip(g.own, kernel * 2))
            if (any(g.own) or any(g.ceil)) and not (
                    own_fits and least is not None and least >= wi.value):
                raise Unsupported(f"the Pad before it pads with {wi.value}, but MaxPool pads "
                                  f"its own pads (or ceil mode's partial windows) with the "
                                  f"type's minimum {lo} and its input can be below "
                                  f"{wi.value}: one window cannot pad with two values")
            pad_value = wi.value
        return Pooled(wi.x.tensor, "max", out_shape, nodes, win, pad_value=pad_value)
    include = bool(node.attrs.get("count_include_pad", 0))
    if include and any(g.ceil):
        raise Unsupported("AveragePool with count_include_pad=1 and a ceil_mode partial last "
                          "window is not supported (onnxruntime's float and quantized kernels "
                          "divide that window differently)")
    if wi.value is not None and wi.value != zero_point:
        raise Unsupported(f"the Pad before it pads with {wi.value}, not with the input's zero "
                          f"point {zero_point} (real zero)")
    counts = None
    if any(wi.pads) or any(g.ceil):
        # divisors: positions inside the input, the Pad's and (count_include_pad) its own pads
        e, o = g.explicit, g.own if include else (0, 0, 0, 0)
        c, h, w = wi.shape
        region = Window((c, h + e[0] + e[2] + o[0] + o[2], w + e[1] + e[3] + o[1] + o[3]),
                        kernel, win.stride,
                        (g.own[0] - o[0], g.own[1] - o[1], g.own[2] - o[2] + g.ceil[0],
                         g.own[3] - o[3] + g.ceil[1]))
        counts = region.counts()
    return Pooled(wi.x.tensor, "avg", out_shape, nodes, win, include, counts=counts)


def max_pool(ctx: ImportContext, node: Node):
    check_attrs(node, POOL_ATTRS)
    if len(node.outputs) > 1 and node.outputs[1]:
        raise Unsupported("the Indices output of MaxPool is not supported")
    x = ctx.value(node, 0)
    inner = x.inner if isinstance(x, Padded) else x
    if isinstance(inner, Int) or getattr(inner, "integer_max_pool", False):
        # integer input (QOperator models), or a map a QONNX quantizer wrote (no quantizer
        # follows its MaxPool; see ops_qonnx.QDeq): max of integers, same quantization
        wi = window_input(x, integer=True)
        t = ctx.ig.tensors[wi.x.tensor]
        p = pooled(node, wi, "max", t.zero_point, t.qtype.lo, least_value(ctx.ig, t.name))
        if getattr(inner, "bipolar", False) and any(p.window.pads):
            raise Unsupported("max pooling of a bipolar map with padding is not supported")
        out = ctx.new_tensor(node.outputs[0], p.shape, t.qtype, t.scale, t.zero_point)
        ctx.ig.ops.append(Pool(node.label, p.nodes, wi.x.tensor, out, "max", p.window,
                               pad_value=p.pad_value))
        ctx.set(node, type(inner)(out, p.shape, channel_last_order(p.shape)))
        return
    wi = window_input(x)
    t = ctx.ig.tensors[wi.x.tensor]
    ctx.set(node, pooled(node, wi, "max", t.zero_point, t.qtype.lo, least_value(ctx.ig, t.name)))


def average_pool(ctx: ImportContext, node: Node):
    check_attrs(node, POOL_ATTRS)
    wi = window_input(ctx.value(node, 0))
    t = ctx.ig.tensors[wi.x.tensor]
    ctx.set(node, pooled(node, wi, "avg", t.zero_point, t.qtype.lo))


def global_average_pool(ctx: ImportContext, node: Node):
    check_attrs(node, {})
    x = feature_map(ctx.value(node, 0))
    ctx.set(node, Pooled(x.tensor, "gap", (x.shape[0],) + (1,) * (len(x.shape) - 1),
                         [node.label]))


def reduce_mean(ctx: ImportContext, node: Node):
    check_attrs(node, {"axes": None, "keepdims": None, "noop_with_empty_axes": None})
    x = feature_map(ctx.value(node, 0))
    axes = node.attrs.get("axes") if node.since_version < 18 else ctx.const(node, 1, "axes")
    rank = len(x.shape) + 1
    axes = sorted(int(a) % rank for a in np.asarray(axes if axes is not None else [],
                                                    dtype=np.int64).reshape(-1))
    spatial = list(range(2, rank))
    if axes != spatial:
        raise Unsupported(f"ReduceMean over axes {axes}: only the spatial axes {spatial} of "
                          f"an [N, C, {', '.join('HW' if rank == 4 else 'L')}] map are "
                          f"supported")
    keep = int(node.attrs.get("keepdims", 1))
    shape = (x.shape[0],) + (1,) * (rank - 2) if keep else (x.shape[0],)
    ctx.set(node, Pooled(x.tensor, "gap", shape, [node.label]))


for _v in (8, 10, 11, 12, 22):
    REGISTRY.register("", "MaxPool", _v)(max_pool)
for _v in (7, 10, 11, 19, 22):
    REGISTRY.register("", "AveragePool", _v)(average_pool)
for _v in (1, 22):
    REGISTRY.register("", "GlobalAveragePool", _v)(global_average_pool)
for _v in (1, 11, 13, 18):
    REGISTRY.register("", "ReduceMean", _v)(reduce_mean)
