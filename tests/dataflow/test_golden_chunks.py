"""The golden model on large batches (``dataflow/golden.py``): asked for some tensors only,
it runs the frames in chunks and frees each stream after its last reader, with results
identical to the whole-batch run and memory bounded by the chunk, not the batch."""
from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np

from hwgen.dataflow import golden
from hwgen.dataflow.importer import load_model, to_int_graph

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _graph_and_inputs(n: int, seed: int = 0):
    ig = to_int_graph(load_model(EXAMPLES / "digits_resnet_qdq.onnx"))
    t = ig.tensors[ig.input]
    rng = np.random.default_rng(seed)
    xq = rng.integers(t.qtype.lo, t.qtype.hi + 1, (n, t.size), dtype=np.int64)
    return ig, xq


def _peak(fn) -> tuple[object, int]:
    tracemalloc.start()
    try:
        out = fn()
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_chunked_run_equals_whole_batch_and_stays_small(monkeypatch):
    ig, xq = _graph_and_inputs(120)
    whole, peak_whole = _peak(lambda: golden.run(ig, xq))
    # chunks of a few frames: the same values, a fraction of the memory
    monkeypatch.setattr(golden, "CHUNK_BYTES", 1 << 20)
    assert golden.frames_per_chunk(golden.lower(ig)) < 30
    mid = ig.ops[len(ig.ops) // 2].output
    part, peak_part = _peak(lambda: golden.run(ig, xq, [ig.output, mid]))
    assert set(part) == {ig.output, mid}
    assert np.array_equal(part[ig.output], whole[ig.output])
    assert np.array_equal(part[mid], whole[mid])
    assert peak_part * 4 < peak_whole, (peak_part, peak_whole)


def test_chunked_run_of_no_frames_and_one():
    ig, xq = _graph_and_inputs(1)
    assert golden.run(ig, xq[:0], [ig.output])[ig.output].shape[0] == 0
    assert np.array_equal(golden.run(ig, xq, [ig.output])[ig.output],
                          golden.run(ig, xq)[ig.output])
