"""Wall time of ``hwgen compile``: whole-design conversion against per-block conversion.

    python benchmarks/compile_speed.py [--repeat N] [--models a.onnx b.onnx ...]
        [--board B] [--budget F] [--jobs J ...] [--no-whole] [--inspect]

For each model it runs, each in a fresh process and a fresh output folder:

* ``whole``: ``hwgen compile --assembly whole``, the design converted to Verilog as one
  Amaranth design (:func:`hwgen.assemble.whole_verilog`);
* ``blocks -j J cold``: the default path (:func:`hwgen.assemble.to_verilog`) with ``J``
  processes and an empty block cache;
* ``blocks -j J warm``: the same again with the cache the cold run filled.

* ``inspect`` (with ``--inspect``): ``hwgen inspect`` of the model.

It prints the median wall time, CPU time (the compile's process and its children, Yosys
included) and peak resident memory of ``--repeat`` runs (default 3) and their ratios to
``whole``,
and checks that every per-block run wrote byte-identical Verilog and the same manifest
estimate as the others. Wall time is noisy on shared machines: compare the ratios (CPU
time is steadier).

Measured on a shared two-core machine while other jobs ran (load average 11-15; wall times
vary several-fold from run to run, CPU times much less):

    model                mode                 wall s  ratio   CPU s  ratio  wall runs
    digits_cnn_qdq.onnx  whole                  12.3   1.0x     3.2   1.0x  21.6, 11.6, 12.3
    digits_cnn_qdq.onnx  blocks -j 1 cold       13.1   0.9x     3.0   1.0x  15.3, 13.1, 11.5
    digits_cnn_qdq.onnx  blocks -j 1 warm        6.6   1.9x     1.3   2.5x  7.0, 6.6, 4.6
    digits_cnn_qdq.onnx  blocks -j 2 cold       11.5   1.1x     3.0   1.0x  11.7, 11.5, 8.2
    digits_cnn_qdq.onnx  blocks -j 2 warm        5.0   2.5x     1.3   2.4x  5.0, 6.2, 3.7
    dscnn_qdq.onnx       whole                  16.7   1.0x     7.2   1.0x  39.3, 16.7, 6.8
    dscnn_qdq.onnx       blocks -j 1 cold        5.4   3.1x     5.2   1.4x  22.4, 5.3, 5.4
    dscnn_qdq.onnx       blocks -j 1 warm        1.9   9.0x     1.8   4.1x  5.8, 1.9, 1.6
    dscnn_qdq.onnx       blocks -j 2 cold        5.7   2.9x     5.6   1.3x  16.1, 5.3, 5.7
    dscnn_qdq.onnx       blocks -j 2 warm        2.0   8.4x     1.7   4.2x  7.5, 1.7, 2.0

The per-block Verilog was byte-identical across all job counts and cache states, and the
estimates (cycles per frame, latency) equal to the whole-design runs'. A warm compile is
imports, folding and one Yosys run over the file; a cold one adds the blocks' RTLIL, where
the few largest blocks (dscnn's stem convolution, the average pool's window generator with
its 16,000-word line buffer) take most of the time, so ``-j 2`` gains little on two busy
cores.

The four MLPerf Tiny examples with ``--board ulx3s-85f`` at the default folding of
2026-11-25 (``hwgen compile`` and ``hwgen inspect`` timed by ``/usr/bin/time``, one cold
compile each with a fresh ``HWGEN_CACHE``, default ``-j`` (2 cores), load average 2-3; peak
memory is the largest process's):

    wall s / CPU s             inspect     compile cold   peak MB
    resnet8_qdq                2.5 / 2.6   6.8 / 9.8      146
    resnet8_qdq_perchannel     2.8 / 2.9   7.3 / 10.4     146
    dscnn_qdq                  1.4 / 1.5   6.1 / 9.1      146
    dscnn_qdq_perchannel       1.4 / 1.5   6.0 / 9.3      146
    mobilenet_v1_025_qdq       1.8 / 1.9   9.1 / 14.3     146
    mobilenet_v1_025_qdq_pc    2.1 / 2.2   9.2 / 14.1     146
    autoencoder_qdq            2.9 / 3.0   9.1 / 13.0     172
    autoencoder_qdq_pc         3.0 / 3.1   8.5 / 12.2     172

An earlier measurement under a load average of 11-21 (wall time 3-5x the CPU time):

The four MLPerf Tiny examples with ``--board ulx3s-85f`` (``hwgen compile`` and ``hwgen
inspect`` timed by ``/usr/bin/time -v``, default ``-j`` (2 cores), one cold and one warm
compile per fresh cache, medians of 3 (MobileNet: 2, at ``--budget 0.95``: at 85 % it needs
191 of 176 block RAM tiles and is refused); load average 11-21, so wall time is 3-5x the CPU
time; peak memory is the largest process's):

    wall s / CPU s        inspect    compile cold  compile warm  --assembly whole  peak MB
    resnet8_qdq           5.2 / 1.4  37.1 / 7.7    13.1 / 2.9    39.9 / 9.2        146 (whole 179)
    dscnn_qdq             4.9 / 1.2  25.9 / 5.7     9.7 / 2.1    33.6 / 8.1        146 (whole 153)
    mobilenet_v1_025_qdq  4.8 / 1.1  60.5 / 11.8   16.6 / 3.4        -             146
    autoencoder_qdq      10.9 / 2.9  43.9 / 9.8    18.9 / 4.3    51.6 / 11.2       156 (whole 236)

Cold and warm Verilog were byte-identical, and so were the Verilog files of separate cold
runs. A cold compile's time is nearly all Amaranth's RTLIL conversion of the blocks
(MobileNet, profiled: 85 % in ``rtlil.convert``, of it a third emitting memories' initial
contents and a third building the netlist), which the cache removes; the rest is the
folding search and one Yosys run. ``inspect`` is about 1 s of imports plus the import walk
and the folding search (the autoencoder: 0.8 s walk, most of it fitting its BatchNorm
constants (``affine.fit_channel``), 1.4 s search, most of it the MVAU resource model's ROM
column analysis per candidate folding).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = [ROOT / "examples" / "digits_cnn_qdq.onnx",
          ROOT / "examples" / "mlperf_tiny" / "dscnn_qdq.onnx"]

# runs a command; prints its wall time, CPU time and peak resident memory (MB) of it and its
# children (a fresh process, so the peak is this command's alone)
MEASURE = """
import resource, subprocess, sys, time
t = time.perf_counter()
subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL)
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print(time.perf_counter() - t, r.ru_utime + r.ru_stime, r.ru_maxrss / 1024)
"""


def run(model: Path, mode: str, jobs: int, cache: Path, out: Path,
        target: list[str]) -> tuple[float, float, float]:
    """(wall s, CPU s, peak MB) of one compile (or inspect) and its children."""
    env = dict(os.environ, HWGEN_CACHE=str(cache))
    cli = [sys.executable, "-m", "hwgen.cli"]
    if mode == "inspect":
        cmd = cli + ["inspect", str(model)] + target
    else:
        cmd = cli + ["compile", str(model), "-o", str(out), "--jobs", str(jobs)] + target
        if mode == "whole":
            cmd += ["--assembly", "whole", "--no-cache"]
    res = subprocess.run([sys.executable, "-c", MEASURE] + cmd, check=True, env=env,
                         capture_output=True, text=True)
    wall, cpu, mb = map(float, res.stdout.split())
    return wall, cpu, mb


def digest(out: Path) -> tuple[str, str]:
    man = json.loads((out / "manifest.json").read_text())
    text = (out / man["verilog"]).read_bytes()
    return hashlib.sha256(text).hexdigest()[:16], json.dumps(man["estimate"], sort_keys=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--models", nargs="*", type=Path, default=MODELS)
    ap.add_argument("--jobs", nargs="*", type=int, default=[1, 2])
    ap.add_argument("--no-whole", action="store_true", help="skip the whole-design runs")
    ap.add_argument("--inspect", action="store_true", help="time hwgen inspect too")
    ap.add_argument("--board", help="compile for this board (default: hwgen's)")
    ap.add_argument("--budget", help="resource budget (default: hwgen's)")
    args = ap.parse_args()
    target = (["--board", args.board] if args.board else []) + \
        (["--budget", args.budget] if args.budget else [])
    print(f"{'model':24} {'mode':20} {'wall s':>7} {'ratio':>6} {'CPU s':>7} {'ratio':>6}"
          f" {'peak MB':>8}  wall runs")
    for model in args.models:
        times: dict[str, list[tuple[float, float]]] = {}
        seen_v, seen_e = set(), set()
        with tempfile.TemporaryDirectory(prefix="hwgen-cspeed-") as tmp:
            tmp = Path(tmp)
            for r in range(args.repeat):
                if args.inspect:
                    times.setdefault("inspect", []).append(
                        run(model, "inspect", 1, tmp / "ci", tmp / "i", target))
                if not args.no_whole:
                    out = tmp / f"whole{r}"
                    times.setdefault("whole", []).append(
                        run(model, "whole", 1, tmp / f"cw{r}", out, target))
                    seen_e.add(digest(out)[1])
                for j in args.jobs:
                    cache = tmp / f"c{j}_{r}"
                    for state in ("cold", "warm"):
                        out = tmp / f"b{j}{state}{r}"
                        times.setdefault(f"blocks -j {j} {state}", []).append(
                            run(model, "blocks", j, cache, out, target))
                        v, e = digest(out)
                        seen_v.add(v)
                        seen_e.add(e)
        def med(ts, i):
            return statistics.median(t[i] for t in ts)

        base = times.get("whole")
        for mode, ts in times.items():
            w, c, mb = med(ts, 0), med(ts, 1), max(t[2] for t in ts)
            compiled = base and mode != "inspect"
            rw = f"{med(base, 0) / w:5.1f}x" if compiled else "     -"
            rc = f"{med(base, 1) / c:5.1f}x" if compiled else "     -"
            print(f"{model.name:24} {mode:20} {w:7.1f} {rw} {c:7.1f} {rc} {mb:8.0f}  "
                  f"{', '.join(f'{t[0]:.1f}' for t in ts)}")
        print(f"{model.name:24} per-block Verilog identical in all runs: {len(seen_v) == 1}; "
              f"estimates equal: {len(seen_e) == 1}")


if __name__ == "__main__":
    main()
