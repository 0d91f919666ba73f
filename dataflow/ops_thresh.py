"""Thresholds: a layer's accumulator, a chain of affine float ops and a low-bit quantizer
become per-channel thresholds compared in hardware (FINN's thresholding).

What is recognized
    A pending ``Gemm``/``MatMul``/``Conv`` (``ops_linear.Linear``) followed by any chain of
    ``BatchNormalization`` and ``Add``/``Sub``/``Mul``/``Div`` by constants (per tensor or
    per channel; recorded exactly by ``dataflow/affine.py``), optionally a Relu/Clip at the
    end, closed by a QONNX ``Quant`` of at most :data:`MAX_THRESHOLD_BITS` bits or a
    ``BipolarQuant`` (``ops_qonnx`` decides). The layer then writes its exact accumulator
    (``acc = W @ x + b``, an identity requantizer) into a tensor of its own, and a
    :class:`Thresholding` op maps it to the quantizer's integers with the thresholds block
    (``rtl_templates/thresholds.py``).

The rule (how the thresholds are computed)
    For channel ``c`` let ``f_c(a)`` be the quantizer's integer for accumulator value ``a``,
    computed as the model computes it: ``v = float32(a) · acc_scale[c]`` (the product's
    value in float32; exact when the scales are powers of two, as in FINN-style Brevitas
    models), then every step of the chain in float32 by onnxruntime itself (the nodes with
    their attributes and constants, one model, no graph optimizations: what qonnx's
    execution runs node by node), then the quantizer in NumPy float32 as qonnx does
    (``v / scale + zero_point``, clamp, the rounding mode; a bipolar quantizer: ``v >= 0``).
    Every op of the chain is monotonic in its data input (a negative scale, a BatchNorm
    with a negative ``gamma`` or ``c - x`` reverses the order; ``c / x`` is refused), and so
    is every float32 rounding, so ``f_c`` is monotonic on the accumulator's range
    ``[lo_c, hi_c]`` (interval bounds of ``W @ x + b``):

    * *increasing* when ``f_c(hi_c) >= f_c(lo_c)``: with ``N = q_hi - q_lo`` the
      quantizer's levels, ``T[c, k] = min{a : f_c(a) >= q_lo + k}`` (``hi_c + 1`` if none)
      for ``k = 1..N``, and ``f_c(a) = q_lo + #{k : a >= T[c, k]}``;
    * *decreasing* (a negative overall scale) otherwise: ``T[c, k] = min{a : f_c(a) <= q_hi
      - k}`` and ``f_c(a) = q_lo + N - #{k : a >= T[c, k]}`` — the comparison flips;

    each minimum found by bisection over ``[lo_c, hi_c + 1]`` (about ``log2(hi_c - lo_c)``
    evaluations of the chain, all channels and levels at once). So the thresholds give
    ``f_c`` exactly at every accumulator value, whatever the float rounding of the chain:
    the tests check it exhaustively against qonnx's execution. A bipolar output has one
    threshold (``+1`` from it on, for an increasing channel).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

from hwgen.dataflow.affine import Chain, host_affine, record
from hwgen.dataflow.context import REGISTRY, ImportContext, Unsupported, check_attrs
from hwgen.dataflow.intgraph import IntGraph, int_op
from hwgen.dataflow.loader import Node
from hwgen.dataflow.lower import Block, Builder, Folding, short_name
from hwgen.dataflow.ops_linear import Linear, MatVec
from hwgen.dataflow.values import Deq
from hwgen.rtl_templates.block import FoldSpace, divisors
from hwgen.rtl_templates.quant import QType, Requant, dot_range, range_type
from hwgen.rtl_templates.thresholds import ThresholdsParams
from hwgen.rtl_templates.xnor_mvau import BIPOLAR, is_bipolar

#: the widest quantizer turned into thresholds (2**bits - 1 thresholds per channel)
MAX_THRESHOLD_BITS = 4


@int_op
@dataclass
class Thresholding:
    """``out = out_lo + level``, level = #{k : in >= thresholds[c, k]} (or N minus it where
    ``decreasing[c]``), per element of channel c; a bipolar output is ``2·level - 1``."""
    name: str
    nodes: list[str]
    input: str
    output: str
    thresholds: np.ndarray     # [C, N] int64, ascending per channel
    decreasing: np.ndarray     # [C] int64 (1: the level counts down)
    out_lo: int

    def channels(self, ig: IntGraph) -> int:
        t = ig.tensors[self.output]
        return t.shape[0]

    def fold_space(self, ig: IntGraph) -> FoldSpace:
        size = ig.tensors[self.output].size
        return FoldSpace(divisors(self.channels(ig)), (1,), lambda pe, simd: size // pe)

    def in_per_beat(self, f: Folding) -> int:
        return f.pe

    def params(self, ig: IntGraph, pe: int = 1) -> ThresholdsParams:
        tin, tout = ig.tensors[self.input], ig.tensors[self.output]
        return ThresholdsParams(np.asarray(self.thresholds, np.int64),
                                np.asarray(self.decreasing).astype(bool), tin.qtype,
                                tout.qtype, int(self.out_lo), pe, tout.size)

    def lower(self, b: Builder, ig: IntGraph, f: Folding) -> str:
        tout = ig.tensors[self.output]
        p = self.params(ig, f.pe)
        src, _ = b.read(self.input, f.pe)
        out = b.stream(short_name(self.output), tout.qtype, f.pe, tout.size)
        b.add(Block(self.name, "thresholds", p, [src], [out], self.name, tuple(self.nodes)))
        return out


# ------------------------------------------------------------------ evaluating the chain

def _chain_session(chain: Chain, rank: int, channels: int):
    """An onnxruntime session computing the chain's steps from input ``v`` [K, C, 1, ...]
    (``rank`` axes) to output ``y``."""
    import onnxruntime as ort

    nodes, inits = [], []
    cur = "v"
    opset = 13
    for i, st in enumerate(chain.steps):
        ins = []
        for k in range(max([st.data] + list(st.consts)) + 1):
            if k == st.data:
                ins.append(cur)
            elif k in st.consts:
                name = f"c{i}_{k}"
                inits.append(numpy_helper.from_array(np.asarray(st.consts[k], np.float32), name))
                ins.append(name)
            else:
                ins.append("")
        out = f"s{i}"
        nodes.append(helper.make_node(st.node.op_type, ins, [out], **{
            k: v for k, v in st.node.attrs.items() if k != "training_mode" or v}))
        cur = out
        opset = max(opset, st.node.opset_version)
    nodes.append(helper.make_node("Identity", [cur], ["y"]))
    shape = ["k", channels] + [1] * (rank - 2)
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("v", onnx.TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = min(model.ir_version, 9)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        return ort.InferenceSession(model.SerializeToString(), so,
                                    providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 - onnxruntime's own refusal, reported on the node
        raise Unsupported(f"onnxruntime cannot evaluate the float ops after the layer "
                          f"({type(e).__name__}: {str(e).splitlines()[0][:200]})") from None


def chain_levels(chain: Chain, lin: Linear, level_fn):
    """``f(acc)`` for [K, C] integer accumulators: the chain in float32, the clip, then
    ``level_fn`` (the quantizer: float32 → integers)."""
    c = chain.weights.shape[0]
    rank = 1 + len(lin.shape) if len(lin.shape) == 3 else 2
    sess = _chain_session(chain, rank, c) if chain.steps else None
    scale = np.asarray(chain.acc_scale, np.float64).astype(np.float32)
    lo, hi = np.float32(lin.clip_lo), np.float32(lin.clip_hi)

    offset = None if chain.offset is None else np.asarray(chain.offset, np.float32)

    def f(acc: np.ndarray) -> np.ndarray:
        v = acc.astype(np.float32) * scale[None, :]
        if offset is not None:
            v = (v + offset[None, :]).astype(np.float32)
        if sess is not None:
            shape = v.shape
            y = sess.run(["y"], {"v": v.reshape(shape + (1,) * (rank - 2))})[0]
            if y.size != v.size:
                raise Unsupported("the float ops after the layer do not act per channel "
                                  "(their constants vary along other axes)")
            v = np.asarray(y, np.float32).reshape(shape)
        if np.isfinite(lo) or np.isfinite(hi):
            v = np.clip(v, lo, hi).astype(np.float32)
        return level_fn(v)
    return f


def thresholds_of(f, a_lo: np.ndarray, a_hi: np.ndarray, q_lo: int, n: int
                  ) -> tuple[np.ndarray, np.ndarray]:
    """(thresholds [C, n], decreasing [C]) of the monotonic per-channel functions ``f``
    (integers in [q_lo, q_lo + n]) on accumulators [a_lo, a_hi] (see the module's rule)."""
    c = a_lo.size
    f_lo, f_hi = f(a_lo[None, :])[0], f(a_hi[None, :])[0]
    dec = f_hi < f_lo
    k = np.arange(1, n + 1)[:, None]                       # [n, 1]
    lo = np.broadcast_to(a_lo - 1, (n, c)).copy()          # h(lo) < k (sentinel)
    hi = np.broadcast_to(a_hi + 1, (n, c)).copy()          # h(hi) >= k (sentinel)
    while np.any(hi - lo > 1):
        mid = (lo + hi) // 2
        mid = np.where(hi - lo > 1, mid, np.clip(mid, a_lo, a_hi))
        y = f(mid)
        h = np.where(dec[None, :], q_lo + n - y, y - q_lo)
        reach = h >= k
        active = hi - lo > 1
        hi = np.where(active & reach, mid, hi)
        lo = np.where(active & ~reach, mid, lo)
    return hi.T.astype(np.int64), dec


def acc_bounds(ctx: ImportContext, lin: Linear, chain: Chain) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel bounds of the accumulator ``W @ x + b`` (and of ``b``, a padded pixel)."""
    t = ctx.ig.tensors[lin.src].qtype
    lo, hi = dot_range(chain.weights, t.lo, t.hi)
    b = np.asarray(chain.bias, np.int64)
    return np.minimum(lo + b, b).astype(np.int64), np.maximum(hi + b, b).astype(np.int64)


def close_thresholds(ctx: ImportContext, node: Node, lin: Linear, qtype: QType, q_lo: int,
                     q_hi: int, scale, zero_point: int, level_fn):
    """Close ``lin`` (with its chain) by the quantizer ``node``: the layer writes its
    accumulator, a :class:`Thresholding` op the quantizer's integers (``level_fn``: float32
    values → integers in [q_lo, q_hi]; for a bipolar ``qtype``, ±1). Returns the output
    tensor's name."""
    chain = lin.chain
    if chain is None:
        chain = Chain.of(lin)
    if chain.problem:
        raise Unsupported(f"thresholds after the layer: {chain.problem}")
    a_lo, a_hi = acc_bounds(ctx, lin, chain)
    acc_type = range_type(int(a_lo.min()), int(a_hi.max()))
    f = chain_levels(chain, lin, level_fn)
    bip = is_bipolar(qtype)
    if bip:
        thr, dec = thresholds_of(lambda a: (f(a) > 0).astype(np.int64), a_lo, a_hi, 0, 1)
        out_lo = -1
    else:
        thr, dec = thresholds_of(f, a_lo, a_hi, q_lo, q_hi - q_lo)
        out_lo = q_lo
    shape = tuple(lin.shape)
    acc = ctx.new_tensor(f"{node.outputs[0]}_acc", shape, acc_type, 1.0, 0)
    raw = dataclasses.replace(lin, weights=chain.weights, bias=np.asarray(chain.bias))
    rq = Requant(mult=(1,), shift=0, zero_point=0, lo=acc_type.lo, hi=acc_type.hi)
    ctx.ig.ops.append((lin.op or MatVec).from_linear(raw, list(lin.nodes[:1]), acc, rq))
    out = ctx.new_tensor(node.outputs[0], shape, BIPOLAR if bip else qtype,
                         float(scale), 0 if bip else int(zero_point))
    ctx.ig.ops.append(Thresholding(node.label, list(lin.nodes[1:]) + [node.label], acc, out,
                                   thr, dec.astype(np.int64), out_lo))
    return out


# ------------------------------------------------------------------------ Sub and Div

def sub_div(ctx: ImportContext, node: Node):
    """Sub/Div by a constant: host preprocessing of the float input, or a step of the chain
    after a layer (thresholds only)."""
    check_attrs(node, {})
    if host_affine(ctx, node):
        return
    a, b = ctx.value(node, 0), ctx.value(node, 1)
    data = 0 if isinstance(a, Linear) else 1 if isinstance(b, Linear) else None
    if data is None:
        raise Unsupported(f"{node.op_type} is supported by a constant on the float input "
                          f"(preprocessing) or after a Gemm/MatMul/Conv before a low-bit "
                          f"QONNX quantizer")
    lin = a if data == 0 else b
    record(ctx, lin, node, data)
    if lin.chain.unfolded is None:
        lin.chain.unfolded = (f"'{node.label}' ({node.op_type}) cannot fold into a "
                              f"requantizer")
    lin.nodes.append(node.label)
    ctx.set(node, lin)


def _extend_sub(tensors):
    """Sub: the difference of two quantized tensors stays with ``tensors``
    (:mod:`dataflow.ops_join`); anything else is :func:`sub_div`."""
    def handler(ctx: ImportContext, node: Node):
        if all(isinstance(ctx.value(node, k), Deq) for k in (0, 1)):
            return tensors(ctx, node)
        return sub_div(ctx, node)
    return handler


for _v in (7, 13, 14):
    REGISTRY.extend("", "Sub", _v)(_extend_sub)
    REGISTRY.register("", "Div", _v)(sub_div)
