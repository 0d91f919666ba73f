"""Nearest-neighbour ``Resize`` / ``Upsample`` of a quantized feature map by integer factors:
the ``upsample`` block (``rtl_templates/upsample.py``).

Which input pixel each output pixel takes depends on the node's modes
(``coordinate_transformation_mode``, ``nearest_mode``) and its scales or sizes; the
importer asks onnxruntime itself: the node with its own attributes and constants runs on a
map of pixel numbers, and the result must be every row and every column repeated an
integer number of times in order (what a nearest upscale by integer factors is with the
usual modes). Anything else — a downscale, a linear mode, scales on the batch or channel
axes — is refused with the reason.

QDQ form: ``DequantizeLinear → Resize → QuantizeLinear`` with the same scale and zero point
(what onnxruntime's quantizer writes); QOperator form: Resize of the integers themselves.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from onnx import helper, numpy_helper

from hwgen.dataflow.context import REGISTRY, ImportContext, Unsupported, check_attrs
from hwgen.dataflow.intgraph import IntGraph, int_op
from hwgen.dataflow.loader import Node
from hwgen.dataflow.lower import Block, Builder, Folding, short_name
from hwgen.dataflow.ops_table import ort_eval
from hwgen.dataflow.values import Const, Deq, Int, channel_last_order
from hwgen.rtl_templates.block import FoldSpace, divisors
from hwgen.rtl_templates.upsample import UpsampleParams


@int_op
@dataclass
class UpsampleOp:
    """Nearest upscaling of a feature map by the integer factors ``fh`` × ``fw``."""
    name: str
    nodes: list[str]
    input: str
    output: str
    fh: int
    fw: int

    def params(self, ig: IntGraph, pe: int) -> UpsampleParams:
        t = ig.tensors[self.input]
        c, h, w = t.shape
        return UpsampleParams(t.qtype, c, h, w, self.fh, self.fw, pe)

    def fold_space(self, ig: IntGraph) -> FoldSpace:
        c, h, w = ig.tensors[self.input].shape
        n = h * w * c * (1 + self.fh * self.fw)
        return FoldSpace(divisors(c), (1,), lambda pe, simd: n // pe)

    def in_per_beat(self, f: Folding) -> int:
        return f.pe

    def lower(self, b: Builder, ig: IntGraph, f: Folding) -> str:
        tout = ig.tensors[self.output]
        src, _ = b.read(self.input, f.pe)
        out = b.stream(short_name(self.output), tout.qtype, f.pe, tout.size)
        b.add(Block(self.name, "upsample", self.params(ig, f.pe), [src], [out], self.name,
                    tuple(self.nodes)))
        return out


RESIZE_ATTRS = {"mode": lambda v: v in (b"nearest", "nearest"),
                "coordinate_transformation_mode": None, "nearest_mode": None,
                "cubic_coeff_a": None, "exclude_outside": lambda v: v == 0,
                "extrapolation_value": None, "antialias": lambda v: v == 0,
                "keep_aspect_ratio_policy": None, "axes": None, "scales": None}


def _source_map(ctx: ImportContext, node: Node, channels: int, h: int, w: int) -> np.ndarray:
    """onnxruntime's source pixel number (row-major in ``h × w``) of every output pixel of
    the node, run on one channel."""
    inits, names = [], []
    for k in range(1, len(node.inputs)):
        if not node.inputs[k]:
            names.append("")
            continue
        v = ctx.value(node, k)
        if not isinstance(v, Const):
            raise Unsupported("its roi, scales and sizes must be constants")
        a = np.asarray(v.array)
        scales_k = 1 if node.since_version < 11 else 2
        if k == scales_k and a.size == 4 and (a[0] != 1 or a[1] != 1):
            raise Unsupported(f"scales {a.tolist()} change the batch or channel axis")
        if k == 3 and a.size == 4:                       # sizes: one sample, one channel
            if int(a[1]) != channels:
                raise Unsupported(f"sizes {a.tolist()} change the channel axis")
            a = np.array([1, 1, a[2], a[3]], dtype=a.dtype)
        inits.append(numpy_helper.from_array(a, f"in{k}"))
        names.append(f"in{k}")
    attrs = dict(node.attrs)
    fn = helper.make_node(node.op_type, ["x", *names], ["y"], **attrs)
    idx = np.arange(h * w, dtype=np.float32).reshape(1, 1, h, w)
    return ort_eval([fn], inits, {"x": idx}, np.dtype(np.float32),
                    {"": max(node.opset_version, 9)}).reshape(-1)


def _factors(src: np.ndarray, h: int, w: int) -> tuple[int, int] | None:
    """(fh, fw) when ``src`` repeats every row ``fh`` and every column ``fw`` times."""
    for fh in range(1, 65):
        for fw in range(1, 65):
            if src.size != h * fh * w * fw:
                continue
            want = np.repeat(np.repeat(np.arange(h * w).reshape(h, w), fh, axis=0), fw, axis=1)
            if np.array_equal(src.astype(np.int64), want.reshape(-1)):
                return fh, fw
    return None


def resize(ctx: ImportContext, node: Node):
    check_attrs(node, RESIZE_ATTRS)
    x = ctx.value(node, 0)
    if not isinstance(x, (Deq, Int)) or len(x.shape) != 3:
        raise Unsupported("only a quantized [N, C, H, W] feature map is resized")
    if x.order is not None and not np.array_equal(x.order, channel_last_order(x.shape)):
        raise Unsupported("its input is not streamed channel-last")
    c, h, w = x.shape
    factors = _factors(_source_map(ctx, node, c, h, w), h, w)
    if factors is None:
        raise Unsupported("only a nearest upscale by integer factors (every row and column "
                          "repeated a whole number of times) is supported")
    fh, fw = factors
    t = ctx.ig.tensors[x.tensor]
    shape = (c, h * fh, w * fw)
    out = ctx.new_tensor(node.outputs[0], shape, t.qtype, t.scale, t.zero_point)
    ctx.ig.ops.append(UpsampleOp(node.label, [node.label], x.tensor, out, fh, fw))
    ctx.set(node, type(x)(out, shape, channel_last_order(shape)))


for _v in (10, 11, 13, 18, 19):
    REGISTRY.register("", "Resize", _v)(resize)
for _v in (9,):
    REGISTRY.register("", "Upsample", _v)(resize)

__all__ = ["UpsampleOp"]
