"""FINN's TFC and CNV (w1a1, w2a2; ``examples/finn/``): golden == qonnx and RTL == golden.

    python benchmarks/finn_models.py [--count N] [--rtl] [--target-cycles T] [--only NAME,...]

For each model: the import (layers, thresholding blocks), the golden model against qonnx's
own execution (``qonnx.core.onnx_exec``) on the first ``--count`` of its 100 test inputs
(identical output elements and samples), and with ``--rtl`` ``hwgen verify`` in Verilator
(RTL == golden, cycles) at ``--target-cycles`` cycles per frame (a small folding: the
design builds quickly and a frame still takes few seconds to simulate).

The CNV networks take a minute or more in qonnx (its execution runs node by node); the
tests (``tests/e2e/test_finn_models.py``) run the TFC networks.

Measured on a shared two-core machine (``hwgen verify`` in Verilator, 100 test inputs each;
golden == qonnx and RTL == golden on every sample, RTL == qonnx on 100 % of the elements):

    model      folding                  interval (measured / estimate)   verify wall
    tfc-w1a1   ulx3s-85f search         98 / 49 cycles                   258 s
    tfc-w2a2   ulx3s-85f search         512 / 512 cycles                 148 s
    cnv-w1a1   --target-cycles 16384    28,800 / 16,384 cycles           956 s
    cnv-w2a2   --target-cycles 16384    28,800 / 16,384 cycles           1107 s

(The measured interval is twice the estimate where a matrix-vector unit computes all its
outputs in one neuron fold (PE = MH); the same holds without thresholds.)
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from hwgen import api
from hwgen.dataflow import golden
from hwgen.dataflow.importer import to_int_graph
from hwgen.dataflow.loader import load_model
from hwgen.dataflow.ops_qonnx import qonnx_reference

FINN = Path(__file__).resolve().parent.parent / "examples" / "finn"
MODELS = ("tfc-w1a1", "tfc-w2a2", "cnv-w1a1", "cnv-w2a2")


def run(name: str, count: int, rtl: bool, target_cycles: int) -> None:
    path = FINN / f"{name}.onnx"
    z = np.load(FINN / f"{name}_test.npz")
    x = z[z.files[0]][:count]
    n = x.shape[0]
    t0 = time.perf_counter()
    ig = to_int_graph(load_model(path))
    t_imp = time.perf_counter() - t0
    kinds = [type(op).__name__ for op in ig.ops]
    y = ig.from_stream(golden.run(ig, ig.quantize_input(x.reshape(n, -1)), [ig.output])[ig.output]
                       .reshape(n, -1))
    t0 = time.perf_counter()
    ref = qonnx_reference(path, x).reshape(n, -1)
    t_ref = time.perf_counter() - t0
    t = ig.tensors[ig.output]
    want = np.rint(ref / np.float32(t.scale)).astype(np.int64) + t.zero_point
    same = y == want
    print(f"{name}: {len(kinds)} ops ({kinds.count('Thresholding')} thresholding), import "
          f"{t_imp:.1f} s; golden vs qonnx on {n} inputs: {int(same.sum())}/{same.size} "
          f"elements, {int(same.all(axis=1).sum())}/{n} samples identical (qonnx "
          f"{t_ref:.1f} s)")
    if rtl:
        t0 = time.perf_counter()
        rep = api.verify(path, x, target_cycles=target_cycles)
        print(f"    RTL == golden: {rep.rtl_equals_golden} ({rep.samples} samples), RTL vs "
              f"qonnx identical {rep.ort_identical_fraction:.3%}, interval "
              f"{rep.sim.interval} cycles/frame, verify "
              f"{time.perf_counter() - t0:.0f} s")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--count", type=int, default=100)
    ap.add_argument("--rtl", action="store_true")
    ap.add_argument("--target-cycles", type=int, default=16384)
    ap.add_argument("--only", default=",".join(MODELS))
    a = ap.parse_args()
    for name in a.only.split(","):
        run(name, a.count, a.rtl, a.target_cycles)


if __name__ == "__main__":
    main()
