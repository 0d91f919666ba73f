"""Speed-up of ``hwgen simulate --jobs N`` over ``--jobs 1`` on the example models.

    python benchmarks/parallel_speed.py [--models mlp,cnn] [--frames N] [--jobs 1,2] [--chunk F]

Compiles each model, builds its native bench (cached), then runs ``hwgen.simulate`` on the
first ``--frames`` samples of its test set (repeated as needed) with each worker count,
three times, and prints the median simulated cycles per wall-clock second of the whole call
(loading the design, quantizing, packing, the benches, unpacking) and of the simulation
phase alone (the chunks on their workers), and the speed-ups over the first worker count.
The outputs and cycles are checked equal across worker counts.

Measured on a shared two-core machine with a load average of 13-15 from other jobs (so the
figures are noisy, and a second process also wins a larger share of the machine), median
of 3, ``--jobs 2`` against ``--jobs 1``: the digits MLP, 40,000 frames in chunks of 512
(1,293,272 cycles), 1.45-1.94x for the whole call and 1.54-2.00x for the simulation phase
(271 k → 393 k and 208 k → 403 k cycles/s in two sessions); the digits CNN, 2,000-3,000
frames in chunks of 29, 1.20-1.40x (210 k → 294 k cycles/s).
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

import hwgen
from hwgen.progress import Progress


class Clock(Progress):
    """Times the simulation phase (from its start to the last chunk's end)."""

    def __init__(self):
        super().__init__(enabled=False)
        self.t0 = self.t1 = 0.0

    def start_frames(self):
        self.t0 = time.perf_counter()

    def frames(self, done, total, cycles):
        self.t1 = time.perf_counter()

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
MODELS = {"mlp": ("digits_mlp_qdq.onnx", "digits_test.npz"),
          "cnn": ("digits_cnn_qdq.onnx", "digits_images_test.npz"),
          "resnet": ("digits_resnet_qdq.onnx", "digits_images_test.npz")}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="mlp,cnn")
    ap.add_argument("--frames", type=int, default=20000)
    ap.add_argument("--jobs", default="1,2")
    ap.add_argument("--chunk", type=int, default=None, help="frames per chunk (default: "
                    "the design's)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    jobs = [int(j) for j in args.jobs.split(",")]
    print(f"{'model':<8} {'jobs':>4} {'frames':>7} {'chunk':>6} {'cycles':>10} "
          f"{'cycles/s':>12} {'speed-up':>8} {'sim cycles/s':>13} {'speed-up':>8}")
    for name in args.models.split(","):
        model, data = MODELS[name]
        x = np.load(EXAMPLES / data)["input"].astype(np.float32)
        x = np.concatenate([x] * (args.frames // len(x) + 1))[:args.frames]
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "d"
            hwgen.compile(EXAMPLES / model, out)
            hwgen.simulate(out, x[:1])  # build the bench
            base = sim_base = ref = None
            for j in jobs:
                rates, sim_rates = [], []
                for _ in range(args.repeat):
                    clock = Clock()
                    t = time.perf_counter()
                    r = hwgen.simulate(out, x, jobs=j, chunk=args.chunk, progress=clock)
                    rates.append(r.cycles / (time.perf_counter() - t))
                    sim_rates.append(r.cycles / (clock.t1 - clock.t0))
                if ref is None:
                    ref = r
                assert np.array_equal(r.outputs_int, ref.outputs_int)
                assert np.array_equal(r.frame_cycles, ref.frame_cycles)
                rate, sim_rate = statistics.median(rates), statistics.median(sim_rates)
                base, sim_base = base or rate, sim_base or sim_rate
                print(f"{name:<8} {j:>4} {len(x):>7} {r.chunk_frames:>6} {r.cycles:>10} "
                      f"{rate:>12,.0f} {rate / base:>7.2f}x {sim_rate:>13,.0f} "
                      f"{sim_rate / sim_base:>7.2f}x", flush=True)


if __name__ == "__main__":
    main()
