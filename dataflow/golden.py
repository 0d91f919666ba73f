"""The golden model: the integer graph executed in NumPy, block by block.

The golden model is the dataflow graph itself run through the golden functions of its blocks
(:mod:`hwgen.rtl_templates.block`): the same lowering that builds the hardware, with each
block's NumPy face in place of its Amaranth face. So the golden model and the RTL are two
implementations of one definition. Folding does not change results, so the graph is lowered
fully serial (PE = SIMD = 1). Every tensor is held as [N, elements] in stream order
(channel-last for feature maps).
"""
from __future__ import annotations

import numpy as np

from hwgen.dataflow.intgraph import IntGraph
from hwgen.dataflow.lower import DataflowGraph, lower


def run_graph(dfg: DataflowGraph, xq: np.ndarray) -> dict[str, np.ndarray]:
    """Every stream's values ([N, elements] each, in the stream's element order) for integer
    inputs ``xq`` [N, elements] on the input stream. Run on the folded graph a design was
    built from, these are the values its streams carry (``hwgen verify --trace`` compares
    them with the streams tapped in simulation)."""
    xq = np.asarray(xq, dtype=np.int64)
    n = xq.shape[0]
    values = {dfg.in_stream: xq.reshape(n, -1)}
    for b in dfg.blocks:
        y = b.spec.golden(b.params, *(values[s] for s in b.inputs))
        ys = y if len(b.outputs) > 1 else [y]
        for s, v in zip(b.outputs, ys):
            values[s] = np.asarray(v, dtype=np.int64).reshape(n, -1)
    return values


def run(g: IntGraph, xq: np.ndarray) -> dict[str, np.ndarray]:
    """Execute on integer inputs ``xq`` [N, elements] (stream order); every tensor's values,
    each [N, elements] in stream order."""
    dfg = lower(g)
    values = run_graph(dfg, xq)
    return {t: values[s] for t, s in dfg.tensor_streams.items()}
