"""The golden model: the integer graph executed in NumPy, op by op.

Each op's integer semantics are those of its hardware block (``rtl_templates``), so the golden
model and the RTL are two implementations of one definition.
"""
from __future__ import annotations

import numpy as np

from dataflow.intgraph import IntGraph, MatVec
from rtl_templates import mvau


def run_op(g: IntGraph, op, x: np.ndarray) -> np.ndarray:
    if isinstance(op, MatVec):
        return mvau.golden(matvec_params(g, op), x.reshape(x.shape[0], -1))
    raise TypeError(f"no golden function for {type(op).__name__}")


def matvec_params(g: IntGraph, op: MatVec, pe: int = 1, simd: int = 1) -> mvau.MVAUParams:
    return mvau.MVAUParams(weights=op.weights, bias=op.bias, requant=op.requant,
                           in_type=g.tensors[op.input].qtype,
                           out_type=g.tensors[op.output].qtype, pe=pe, simd=simd)


def run(g: IntGraph, xq: np.ndarray) -> dict[str, np.ndarray]:
    """Execute on integer inputs ``xq`` [N, *input shape]; returns every tensor's values."""
    xq = np.asarray(xq, dtype=np.int64)
    values = {g.input: xq.reshape(xq.shape[0], *g.tensors[g.input].shape)}
    for op in g.ops:
        y = run_op(g, op, values[op.input])
        values[op.output] = y.reshape(y.shape[0], *g.tensors[op.output].shape)
    return values
