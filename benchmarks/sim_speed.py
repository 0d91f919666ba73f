"""Simulation speed of the back ends on the example models.

    python benchmarks/sim_speed.py [--models mlp,cnn,resnet] [--benches native,cocotb,amaranth]
        [--frames N | --cycles C] [--cocotb-frames N] [--amaranth-frames N] [--stall P]

Compiles each example model (default board folding), builds its native bench
(``sim/native.py``) and its cocotb build (``sim/verilator.py``) into a fresh cache, then
prints per back end: the build time (the first run, of a one-frame job: it builds the
Verilator model, or elaborates the design for Amaranth), the cycles of one job (native: about
``--cycles``, 2 M by default), the simulated cycles per wall-clock second (median of 3 runs;
a run includes writing the job, starting the simulator and reading the result), the same
beyond the start-up (``marginal``: only where the start-up is under half the run), the user
CPU seconds per million cycles (median of 3; this process and its children, the benches, so
it stays meaningful on a busy machine where the wall-clock rate does not) and the start-up
(wall seconds of the one-frame job, median of 3). Each job's runs are checked equal, and
the one-frame job's beats and transfer cycles equal on every back end (the cycles watched
for surplus beats after the last one differ: 32 on Verilator, 8 on Amaranth).

Measured on a shared two-core machine (AMD EPYC) with a load average of 15-17 from other
jobs, so the wall-clock rates are a fifth to a half of what one free core gives (1 / CPU
seconds);
``--stall 0``; the native rows with the default ``--cycles``, the others from a run with
2000 native frames:

    model              bench    threads build s    cycles   cycles/s   marginal cpu s/Mcyc start s
    digits_mlp_qdq     native         1    93.4   2000176    293,801    294,115      0.647   0.008
    digits_mlp_qdq     cocotb         1    74.8       816        602          -    477.002   1.773
    digits_mlp_qdq     amaranth       1     1.1       472        301          -   1225.780   1.049
    digits_cnn_qdq     native         1    53.5   2023914    520,018    521,932      0.890   0.016
    digits_cnn_qdq     cocotb         1    69.0      5786      4,437          -     74.001   1.188
    digits_cnn_qdq     amaranth       1     2.6      3172        380        380    952.961   2.215
    digits_resnet_qdq  native         1    58.8   2000864    315,396    317,088      1.474   0.040
    digits_resnet_qdq  cocotb         1   136.8     21472      4,381      5,285     28.787   1.220
    digits_resnet_qdq  amaranth       1     8.3     11208        246          -   1495.603  24.808

So one free core runs the native bench at about 1.5 M (MLP), 1.1 M (CNN) and 0.68 M (ResNet)
cycles per second. Where its time goes (``perf``, digits ResNet): 95 % in the verilated
design's clock-edge logic, spread over the blocks in proportion to their logic (the MVAUs
of ``block_a`` and ``block_b`` 27 %, their window generators 20 %, the rest 2-7 % each), mostly
multipliers, adder trees and pipeline registers, every one computed at every edge, busy or
not; Verilator's per-``eval`` bookkeeping and the bench's loop 3 % (MLP: 8 %). The C++
options change nothing measurable (``-O1``, ``-Os``, ``-O3``, ``-march=native``, profile-
guided optimisation, ``--output-split 0``, ``--output-split-cfuncs 500``: the same CPU time
within 3 %); Verilator's ``-fno-dfg`` is 13 % slower, ``--threads 2`` on this busy machine
did not finish in 6x the single-threaded wall time, and a design with its reset tied low
(not the cocotb bench's behaviour, so not an option) 12 % faster.
"""
from __future__ import annotations

import argparse
import dataclasses
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
            # the rate beyond the start-up (none if the start-up is most of the run)
            "marginal": ((result.cycles - first.cycles) / (wall - start)
                         if wall > 2 * start else None),
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
    ap.add_argument("--frames", type=int, default=None,
                    help="frames per native run (default: about --cycles cycles' worth)")
    ap.add_argument("--cycles", type=int, default=2_000_000,
                    help="cycles a native run lasts by default (from the design's estimate)")
    ap.add_argument("--cocotb-frames", type=int, default=20, help="frames per cocotb run")
    ap.add_argument("--amaranth-frames", type=int, default=10, help="frames per amaranth run")
    ap.add_argument("--stall", type=float, default=0.0)
    args = ap.parse_args()
    frames = {"native": args.frames, "cocotb": args.cocotb_frames,
              "amaranth": args.amaranth_frames}
    print(f"{'model':18} {'bench':8} {'threads':>7} {'build s':>7} {'cycles':>9} "
          f"{'cycles/s':>10} {'marginal':>10} {'cpu s/Mcyc':>10} {'start s':>7}", flush=True)
    for key in args.models.split(","):
        model, data = MODELS[key]
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "d"
            hwgen.compile(EX / model, out)
            x = np.load(EX / data)["input"]
            one_frame = None  # the one-frame job's result: the same on every back end
            per_frame = design.load(out)[0]["estimate"]["cycles_per_frame"]
            frames["native"] = args.frames or max(1, args.cycles // per_frame)
            for bench in args.benches.split(","):
                manifest, job = make_job(out, x, frames[bench], args.stall)
                _, one = make_job(out, x, 1, args.stall)
                text = (out / manifest["verilog"]).read_text()
                threads = native_threads(text) if bench == "native" else 1
                m = measure(runner(bench, out, manifest, str(Path(tmp) / "cache")), job, one)
                # beats and transfer cycles (the cycles watched after the last beat differ)
                got = dataclasses.replace(m["one_frame"], cycles=0)
                if one_frame is None:
                    one_frame = got
                assert got == one_frame, f"{bench} differs from the first back end"
                marginal = "-" if m["marginal"] is None else f"{m['marginal']:,.0f}"
                print(f"{Path(model).stem:18} {bench:8} {threads:>7} {m['build']:>7.1f} "
                      f"{m['cycles']:>9} {m['rate']:>10,.0f} {marginal:>10} {m['cpu']:>10.3f} "
                      f"{m['start']:>7.3f}", flush=True)


if __name__ == "__main__":
    main()
