"""The golden model: the integer graph executed in NumPy, block by block.

The golden model is the dataflow graph itself run through the golden functions of its blocks
(:mod:`hwgen.rtl_templates.block`): the same lowering that builds the hardware, with each
block's NumPy face in place of its Amaranth face. So the golden model and the RTL are two
implementations of one definition. Folding does not change results, so the graph is lowered
fully serial (PE = SIMD = 1). Every tensor is held as [N, elements] in stream order
(channel-last for feature maps).

Memory: a whole graph's streams for a large batch do not fit (ResNet-8 on 1,000 frames holds
about 6 GB of int64 intermediates), so :func:`run` takes the frames in chunks sized by the
graph (:func:`frames_per_chunk`) and, when asked for some tensors only, frees each stream
after its last reader.
"""
from __future__ import annotations

import numpy as np

from hwgen.dataflow.intgraph import IntGraph
from hwgen.dataflow.lower import DataflowGraph, lower

#: bytes of int64 stream values a chunk of frames may hold at once (the blocks' golden
#: functions take a few times that in temporaries, e.g. a convolution's windows)
CHUNK_BYTES = 64 << 20


def run_graph(dfg: DataflowGraph, xq: np.ndarray,
              keep: set[str] | None = None) -> dict[str, np.ndarray]:
    """Every stream's values ([N, elements] each, in the stream's element order) for integer
    inputs ``xq`` [N, elements] on the input stream. Run on the folded graph a design was
    built from, these are the values its streams carry (``hwgen verify --trace`` compares
    them with the streams tapped in simulation). With ``keep``, only those streams are
    returned, and every other one is freed after its last reader."""
    xq = np.asarray(xq, dtype=np.int64)
    n = xq.shape[0]
    last = {}
    if keep is not None:
        for k, b in enumerate(dfg.blocks):
            for s in b.inputs:
                last[s] = k
    values = {dfg.in_stream: xq.reshape(n, -1)}
    for k, b in enumerate(dfg.blocks):
        y = b.spec.golden(b.params, *(values[s] for s in b.inputs))
        ys = y if len(b.outputs) > 1 else [y]
        for s, v in zip(b.outputs, ys):
            values[s] = np.asarray(v, dtype=np.int64).reshape(n, -1)
        if keep is not None:
            for s in set(b.inputs):
                if last[s] == k and s not in keep:
                    del values[s]
    if keep is not None:
        return {s: v for s, v in values.items() if s in keep}
    return values


def frames_per_chunk(dfg: DataflowGraph) -> int:
    """Frames :func:`run` takes at once: as many as keep the graph's streams for a chunk
    within ``CHUNK_BYTES`` (at least 1)."""
    per_frame = 8 * sum(st.elements for st in dfg.streams.values())
    return max(1, CHUNK_BYTES // max(per_frame, 1))


def run(g: IntGraph, xq: np.ndarray,
        tensors: list[str] | None = None) -> dict[str, np.ndarray]:
    """Execute on integer inputs ``xq`` [N, elements] (stream order); each tensor's values
    (every tensor's, or those named in ``tensors``), [N, elements] in stream order. With
    ``tensors``, the frames run in chunks (:func:`frames_per_chunk`) and only the named
    tensors are kept, so memory stays bounded whatever the batch."""
    dfg = lower(g)
    if tensors is None:
        values = run_graph(dfg, xq)
        return {t: values[s] for t, s in dfg.tensor_streams.items()}
    xq = np.asarray(xq, dtype=np.int64)
    n = xq.shape[0]
    keep = {dfg.tensor_streams[t] for t in tensors}
    if n == 0:
        return {t: np.zeros((0, dfg.streams[dfg.tensor_streams[t]].elements), np.int64)
                for t in tensors}
    step = frames_per_chunk(dfg)
    parts = [run_graph(dfg, xq[k:k + step], keep) for k in range(0, n, step)]
    return {t: np.concatenate([p[dfg.tensor_streams[t]] for p in parts])
            if len(parts) > 1 else parts[0][dfg.tensor_streams[t]] for t in tensors}
