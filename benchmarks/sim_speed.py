"""Simulation speed of the Verilator back ends on the example models.

    python benchmarks/sim_speed.py [--frames N] [--cocotb-frames N] [--stall P]

Compiles each example model, builds its native bench (``sim/native.py``) and its cocotb
build (``sim/verilator.py``) into a fresh cache, then prints the build times and the
simulated cycles per wall-clock second (median of 3 runs after the build; each run includes
writing the job, starting the simulator and reading the result). Wall time is noisy on
shared machines; the cycle counts are exact and equal for both benches.

Measured on a shared two-core machine while other jobs ran (``--cocotb-frames 20``; the
cocotb figures include its start-up, which dominates 20 frames):

    model                    bench   threads  build s    cycles    cycles/s
    digits_mlp_qdq.onnx      native        1     23.5   2049339   4,962,109
    digits_mlp_qdq.onnx      cocotb        1     28.6     21819      23,213
    digits_cnn_qdq.onnx      native        1     20.2   1281170   1,816,868
    digits_cnn_qdq.onnx      cocotb        1     12.5     13970      19,807
    digits_resnet_qdq.onnx   native        1     18.9   2048867     792,185
    digits_resnet_qdq.onnx   cocotb        1     32.1     21347      15,338

With 100 cocotb frames the cocotb bench ran at 61–95 k cycles/s. In the native runs nearly all
the time is the verilated design's own clock-edge logic (``perf``); the requantizers' float32
rounding is the largest part of it.
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

import hwgen
from hwgen import design
from hwgen.sim.base import StreamJob
from hwgen.sim.native import native_threads, run_native
from hwgen.sim.packing import frames_to_beats
from hwgen.sim.verilator import run_verilator

EX = Path(__file__).resolve().parent.parent / "examples"
MODELS = [("digits_mlp_qdq.onnx", "digits_test.npz"),
          ("digits_cnn_qdq.onnx", "digits_images_test.npz"),
          ("digits_resnet_qdq.onnx", "digits_images_test.npz")]


def make_job(out_dir: Path, x: np.ndarray, frames: int, stall: float, seed: int = 0):
    """The job ``hwgen.simulate`` would run for ``frames`` samples of ``x`` (repeated)."""
    manifest, ig, _ = design.load(out_dir)
    x = np.resize(x, (frames,) + x.shape[1:]).astype(np.float32)
    flat = x.reshape(frames, manifest["input"]["frame_elements"])
    xq = ig.tensors[ig.input].quantize(ig.to_stream(flat))
    beats, last = frames_to_beats(xq, ig.tensors[ig.input].qtype,
                                  manifest["input"]["elements_per_beat"])
    est = manifest["estimate"]
    return manifest, StreamJob(
        manifest["ports"]["input"]["bits"], manifest["ports"]["output"]["bits"], beats, last,
        frames * manifest["output"]["beats_per_frame"], stall, stall, seed,
        max_cycles=int((est["latency_cycles"] + (frames + 2) * est["cycles_per_frame"])
                       * 4 / max(0.05, (1 - stall) ** 2) + 10000))


def measure(run, text, top, job, cache) -> tuple[float, float, int]:
    """→ (build seconds, cycles per second (median of 3), cycles)."""
    t0 = time.perf_counter()
    first = run(text, top, job, build_dir=cache)
    build = time.perf_counter() - t0
    rates = []
    for _ in range(3):
        t0 = time.perf_counter()
        res = run(text, top, job, build_dir=cache)
        rates.append(res.cycles / (time.perf_counter() - t0))
        assert res == first
    return build, statistics.median(rates), first.cycles


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--frames", type=int, default=2000, help="frames per native run")
    ap.add_argument("--cocotb-frames", type=int, default=20, help="frames per cocotb run")
    ap.add_argument("--stall", type=float, default=0.0)
    args = ap.parse_args()
    print(f"{'model':24} {'bench':7} {'threads':>7} {'build s':>8} {'cycles':>9} "
          f"{'cycles/s':>11}")
    for model, data in MODELS:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "d"
            hwgen.compile(EX / model, out)
            x = np.load(EX / data)["input"]
            for name, run, frames in (("native", run_native, args.frames),
                                      ("cocotb", run_verilator, args.cocotb_frames)):
                manifest, job = make_job(out, x, frames, args.stall)
                text = (out / manifest["verilog"]).read_text()
                threads = native_threads(text) if name == "native" else 1
                build, rate, cycles = measure(run, text, manifest["top"], job,
                                              str(Path(tmp) / "cache"))
                print(f"{model:24} {name:7} {threads:>7} {build:>8.1f} {cycles:>9} "
                      f"{rate:>11,.0f}", flush=True)


if __name__ == "__main__":
    main()
