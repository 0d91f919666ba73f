"""Simulation speed of the back ends on the example models.

    python benchmarks/sim_speed.py [--models mlp,cnn,resnet] [--benches native,cocotb,amaranth]
        [--frames N] [--cocotb-frames N] [--amaranth-frames N] [--stall P]

Compiles each example model (board folding, ``ulx3s-85f``), builds its native bench
(``sim/native.py``) and its cocotb build (``sim/verilator.py``) into a fresh cache, then
prints per back end: the build time, the cycles of one job, the simulated cycles per
wall-clock second and the user CPU seconds per million cycles (both median of 3 runs after
the build; a run includes writing the job, starting the simulator and reading the result)
and the start-up (wall seconds of a one-frame job, median of 3). CPU seconds count this
process and its children (the benches), so they stay meaningful on a busy machine where the
wall-clock rate does not. Every run's result is checked equal to the first's; the cycle
counts are exact and equal for all back ends.

Measured on a shared two-core machine (AMD EPYC, load average 6-10 from other jobs, so the
wall-clock rates are far below 1/CPU rate), ``--stall 0``, 2000 native frames:

    model                    bench   threads  build s    cycles  cycles/s cpu s/Mcyc  start s
    (filled in below)

Where the native bench's time goes (``perf``, digits ResNet): 95 % in the verilated design's
clock-edge logic (``_nba_sequent``), spread evenly over the blocks, mostly the multipliers
and adder trees of the MVAUs/VVAUs and their pipeline registers (every register is computed
at every edge, busy or not); Verilator's per-``eval`` bookkeeping and the bench's own loop
about 3 % (MLP: 8 %). Compiler options (``-O3``, ``-march=native``, ``-O1``, ``-Os``) change
the CPU time by less than the noise; a design whose reset is tied low (not the cocotb
bench's behaviour) is 12 % faster.
"""
from __future__ import annotations

import argparse
import resource
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

import hwgen
from hwgen import design
from hwgen.assemble import build_top
from hwgen.dataflow.lower import lower
from hwgen.sim.amaranth_sim import run_amaranth
from hwgen.sim.base import StreamJob
from hwgen.sim.native import native_threads, run_native
from hwgen.sim.packing import frames_to_beats
from hwgen.sim.verilator import run_verilator

EX = Path(__file__).resolve().parent.parent / "examples"
MODELS = {"mlp": ("digits_mlp_qdq.onnx", "digits_test.npz"),
          "cnn": ("digits_cnn_qdq.onnx", "digits_images_test.npz"),
          "resnet": ("digits_resnet_qdq.onnx", "digits_images_test.npz")}
BENCHES = ("native", "cocotb", "amaranth")


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


def cpu_seconds() -> float:
    """User CPU seconds of this process and its ended children."""
    return (resource.getrusage(resource.RUSAGE_SELF).ru_utime
            + resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime)


def timed(run, job):
    """→ (result, wall seconds, user CPU seconds) of ``run(job)``."""
    c0, t0 = cpu_seconds(), time.perf_counter()
    res = run(job)
    return res, time.perf_counter() - t0, cpu_seconds() - c0


def measure(run, job, one_frame_job) -> dict:
    """Build (the first run), then three runs of ``job`` and three of ``one_frame_job``."""
    first, build, _ = timed(run, one_frame_job)
    runs = [timed(run, job) for _ in range(3)]
    result = runs[0][0]
    assert all(r == result for r, _, _ in runs), "runs of one job differ"
    starts = [timed(run, one_frame_job) for _ in range(3)]
    assert all(r == first for r, _, _ in starts), "runs of one job differ"
    wall, start = statistics.median(w for _, w, _ in runs), statistics.median(
        w for _, w, _ in starts)
    return {"build": build, "cycles": result.cycles, "rate": result.cycles / wall,
            "marginal": (result.cycles - first.cycles) / max(1e-9, wall - start),
            "cpu": statistics.median(cpu / result.cycles * 1e6 for _, _, cpu in runs),
            "start": start, "one_frame": first}


def runner(bench: str, out: Path, manifest: dict, cache: str):
    """``job → StreamResult`` for the back end ``bench`` on the design in ``out``."""
    if bench == "amaranth":
        _, ig, folding = design.load(out)
        top = build_top(lower(ig, folding))
        return lambda job: run_amaranth(top, job)
    text = (out / manifest["verilog"]).read_text()
    run = run_native if bench == "native" else run_verilator
    return lambda job: run(text, manifest["top"], job, build_dir=cache)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=",".join(MODELS), help="of: " + ", ".join(MODELS))
    ap.add_argument("--benches", default=",".join(BENCHES), help="of: " + ", ".join(BENCHES))
    ap.add_argument("--frames", type=int, default=2000, help="frames per native run")
    ap.add_argument("--cocotb-frames", type=int, default=20, help="frames per cocotb run")
    ap.add_argument("--amaranth-frames", type=int, default=10, help="frames per amaranth run")
    ap.add_argument("--stall", type=float, default=0.0)
    args = ap.parse_args()
    frames = {"native": args.frames, "cocotb": args.cocotb_frames,
              "amaranth": args.amaranth_frames}
    print(f"{'model':24} {'bench':8} {'threads':>7} {'build s':>8} {'cycles':>9} "
          f"{'cycles/s':>11} {'marginal':>11} {'cpu s/Mcyc':>10} {'start s':>8}", flush=True)
    for key in args.models.split(","):
        model, data = MODELS[key]
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "d"
            hwgen.compile(EX / model, out)
            x = np.load(EX / data)["input"]
            one_frame = None  # the one-frame job's result: the same on every back end
            for bench in args.benches.split(","):
                manifest, job = make_job(out, x, frames[bench], args.stall)
                _, one = make_job(out, x, 1, args.stall)
                text = (out / manifest["verilog"]).read_text()
                threads = native_threads(text) if bench == "native" else 1
                m = measure(runner(bench, out, manifest, str(Path(tmp) / "cache")), job, one)
                if one_frame is None:
                    one_frame = m["one_frame"]
                assert m["one_frame"] == one_frame, f"{bench} differs from the first back end"
                print(f"{model:24} {bench:8} {threads:>7} {m['build']:>8.1f} {m['cycles']:>9} "
                      f"{m['rate']:>11,.0f} {m['marginal']:>11,.0f} {m['cpu']:>10.3f} "
                      f"{m['start']:>8.3f}", flush=True)


if __name__ == "__main__":
    main()
