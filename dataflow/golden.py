"""The golden model: the integer graph executed in NumPy, op by op.

Each op's integer semantics are those of its hardware blocks (``rtl_templates``): the golden
model calls the blocks' own golden functions, so the golden model and the RTL are two
implementations of one definition. Folding does not change results, so the blocks are
evaluated at PE = SIMD = 1. Every tensor is held as [N, elements] in stream order
(channel-last for feature maps).
"""
from __future__ import annotations

import numpy as np

from hwgen.dataflow.intgraph import (AddOp, ConcatOp, Conv, GlobalAvgPool, IntGraph, MatVec, Pool,
                               op_inputs)
from hwgen.rtl_templates import add, concat, gap, mvau, pool, swg, vvau


def matvec_params(g: IntGraph, op, pe: int = 1, simd: int = 1) -> mvau.MVAUParams:
    return mvau.MVAUParams(weights=op.weights, bias=op.bias, requant=op.requant,
                           in_type=g.tensors[op.input].qtype,
                           out_type=g.tensors[op.output].qtype, pe=pe, simd=simd)


def _windows(g: IntGraph, op, x: np.ndarray, pad: int, depthwise: bool) -> np.ndarray:
    t = g.tensors[op.input]
    c, h, w = op.window.in_shape
    p = swg.SWGParams((h, w, c), op.window.kernel, op.window.stride, op.window.pads, pad,
                      t.qtype, 1, depthwise)
    return swg.golden(p, x.reshape(x.shape[0], h, w, c)).reshape(x.shape[0], -1)


def run_op(g: IntGraph, op, xs: list[np.ndarray]) -> np.ndarray:
    """One op on its inputs (each [N, elements], stream order) → [N, elements]."""
    n = xs[0].shape[0]
    tout = g.tensors[op.output]
    if isinstance(op, MatVec):
        return mvau.golden(matvec_params(g, op), xs[0])
    if isinstance(op, Conv):
        tin = g.tensors[op.input]
        oh, ow = op.window.out_hw
        win = _windows(g, op, xs[0], tin.zero_point, op.depthwise)
        if op.depthwise:
            p = vvau.VVAUParams(op.weights, op.bias, op.requant, tin.qtype, tout.qtype, 1,
                                oh * ow)
            return vvau.golden(p, win)
        y = mvau.golden(matvec_params(g, op), win.reshape(n, oh * ow, -1))
        return y.reshape(n, -1)
    if isinstance(op, Pool):
        tin = g.tensors[op.input]
        oh, ow = op.window.out_hw
        k = op.window.kernel[0] * op.window.kernel[1]
        pad = tin.qtype.lo if op.kind == "max" else tin.zero_point
        win = _windows(g, op, xs[0], pad, True)
        p = pool.PoolParams(op.kind, op.window.in_shape[0], k, tin.qtype, tout.qtype, 1,
                            oh * ow, op.requant, tin.zero_point, op.counts)
        return pool.golden(p, win)
    if isinstance(op, GlobalAvgPool):
        tin = g.tensors[op.input]
        c = tin.shape[0]
        p = gap.GAPParams(c, tin.size // c, op.requant, tin.qtype, tout.qtype, 1,
                          tin.zero_point)
        return gap.golden(p, xs[0])
    if isinstance(op, AddOp):
        p = add_params(g, op, 1)
        return add.golden(p, xs[0], xs[1])
    if isinstance(op, ConcatOp):
        p = concat_params(g, op, 1)
        return concat.golden(p, xs[0].reshape(n, -1, p.c0),
                             xs[1].reshape(n, -1, p.c1)).reshape(n, -1)
    raise TypeError(f"no golden function for {type(op).__name__}")


def add_params(g: IntGraph, op: AddOp, pe: int) -> add.AddParams:
    ta, tb = (g.tensors[t] for t in op.inputs)
    tout = g.tensors[op.output]
    return add.make_add_requant(ta.scale, tb.scale, tout.scale, tout.zero_point, ta.zero_point,
                                tb.zero_point, op.lo, op.hi, ta.qtype, tb.qtype, tout.qtype, pe)


def concat_params(g: IntGraph, op: ConcatOp, pe: int) -> concat.ConcatParams:
    t0, t1 = (g.tensors[t] for t in op.inputs)
    tout = g.tensors[op.output]
    return concat.make_concat(t0.shape[0], t1.shape[0], pe, t0.qtype, t0.scale, t0.zero_point,
                              t1.qtype, t1.scale, t1.zero_point, tout.qtype, tout.scale,
                              tout.zero_point)


def run(g: IntGraph, xq: np.ndarray) -> dict[str, np.ndarray]:
    """Execute on integer inputs ``xq`` [N, elements] (stream order); every tensor's values,
    each [N, elements] in stream order."""
    xq = np.asarray(xq, dtype=np.int64)
    values = {g.input: xq.reshape(xq.shape[0], -1)}
    for op in g.ops:
        y = run_op(g, op, [values[t] for t in op_inputs(op)])
        values[op.output] = np.asarray(y, dtype=np.int64).reshape(xq.shape[0], -1)
    return values
