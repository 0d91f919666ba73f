"""Measured vs estimated cycles for every example model, and simulator throughput.

    python benchmarks/cycles.py [--count N] [--simulator verilator|amaranth] [--board B]

Prints, per model: the bottleneck estimate (cycles per frame) and the measured steady-state
interval, the estimated and measured latency, their ratios, and the simulated cycles per
wall-clock second (wall time is noisy on shared machines; the cycle figures are exact).
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

import hwgen

EX = Path(__file__).resolve().parent.parent / "examples"
MODELS = [("digits_mlp_qdq.onnx", "digits_test.npz"),
          ("digits_mlp_qdq_perchannel.onnx", "digits_test.npz")] + [
    (f"digits_{n}_{f}.onnx", "digits_images_test.npz")
    for n in ("cnn", "resnet") for f in ("qdq", "qdq_perchannel", "qop")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=50)
    ap.add_argument("--simulator", default="verilator")
    ap.add_argument("--board", default="ulx3s-85f",
                    help="fold for this board (default ulx3s-85f; 'auto': the smallest each "
                         "model fits)")
    args = ap.parse_args()
    print(f"{'model':34} {'est II':>7} {'meas II':>8} {'ratio':>6} {'est lat':>8} "
          f"{'meas lat':>9} {'ratio':>6} {'mult':>5} {'mem bits':>9} {'kcyc/s':>7}")
    for model, data in MODELS:
        with tempfile.TemporaryDirectory() as tmp:
            comp = hwgen.compile(EX / model, Path(tmp) / "d", board=args.board)
            x = np.load(EX / data)["input"][:args.count]
            t0 = time.perf_counter()
            sim = hwgen.simulate(Path(tmp) / "d", x, simulator=args.simulator)
            dt = time.perf_counter() - t0
        e = comp.estimate
        print(f"{model:34} {e['cycles_per_frame']:>7} {sim.interval:>8.1f} "
              f"{sim.interval / e['cycles_per_frame']:>6.3f} {e['latency_cycles']:>8} "
              f"{sim.latency:>9} {sim.latency / e['latency_cycles']:>6.3f} "
              f"{e['multipliers']:>5} {e['memory_bits']:>9} {sim.cycles / dt / 1e3:>7.1f}")


if __name__ == "__main__":
    main()
