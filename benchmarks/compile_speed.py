"""Wall time of ``hwgen compile``: whole-design conversion against per-block conversion.

    python benchmarks/compile_speed.py [--repeat N] [--models a.onnx b.onnx ...]

For each model it runs, each in a fresh process and a fresh output folder:

* ``whole``: the design converted to Verilog as one Amaranth design (``verilog.convert`` of
  :func:`hwgen.assemble.build_top`), as hwgen did before per-block conversion;
* ``blocks -j J cold``: the default path (:func:`hwgen.assemble.to_verilog`) with ``J``
  processes and an empty block cache;
* ``blocks -j J warm``: the same again with the cache the cold run filled.

It prints the median wall time and CPU time (the compile's process and its children, Yosys
included) of ``--repeat`` runs (default 3) and their ratios to ``whole``,
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
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = [ROOT / "examples" / "digits_cnn_qdq.onnx",
          ROOT / "examples" / "mlperf_tiny" / "dscnn_qdq.onnx"]

# the whole design through one verilog.convert, for comparison
WHOLE = """
import sys
from amaranth.back import verilog
import hwgen.api as api
from hwgen.assemble import build_top

def whole(dfg, name, jobs=None, cache=True):
    top = build_top(dfg)
    return verilog.convert(top, name=name, emit_src=False), top

api.to_verilog = whole
api.compile(sys.argv[1], sys.argv[2])
"""


def run(model: Path, mode: str, jobs: int, cache: Path, out: Path) -> tuple[float, float]:
    """(wall s, CPU s of the compile and its children) of one compile."""
    env = dict(os.environ, HWGEN_CACHE=str(cache))
    if mode == "whole":
        cmd = [sys.executable, "-c", WHOLE, str(model), str(out)]
    else:
        cmd = [sys.executable, "-m", "hwgen.cli", "compile", str(model), "-o", str(out),
               "--jobs", str(jobs)]
    r0, t = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    wall, r1 = time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)


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
    args = ap.parse_args()
    print(f"{'model':24} {'mode':20} {'wall s':>7} {'ratio':>6} {'CPU s':>7} {'ratio':>6}"
          f"  wall runs")
    for model in args.models:
        times: dict[str, list[tuple[float, float]]] = {}
        seen_v, seen_e = set(), set()
        with tempfile.TemporaryDirectory(prefix="hwgen-cspeed-") as tmp:
            tmp = Path(tmp)
            for r in range(args.repeat):
                if not args.no_whole:
                    out = tmp / f"whole{r}"
                    times.setdefault("whole", []).append(
                        run(model, "whole", 1, tmp / f"cw{r}", out))
                    seen_e.add(digest(out)[1])
                for j in args.jobs:
                    cache = tmp / f"c{j}_{r}"
                    for state in ("cold", "warm"):
                        out = tmp / f"b{j}{state}{r}"
                        times.setdefault(f"blocks -j {j} {state}", []).append(
                            run(model, "blocks", j, cache, out))
                        v, e = digest(out)
                        seen_v.add(v)
                        seen_e.add(e)
        def med(ts, i):
            return statistics.median(t[i] for t in ts)

        base = times.get("whole")
        for mode, ts in times.items():
            w, c = med(ts, 0), med(ts, 1)
            rw = f"{med(base, 0) / w:5.1f}x" if base else "     -"
            rc = f"{med(base, 1) / c:5.1f}x" if base else "     -"
            print(f"{model.name:24} {mode:20} {w:7.1f} {rw} {c:7.1f} {rc}  "
                  f"{', '.join(f'{t[0]:.1f}' for t in ts)}")
        print(f"{model.name:24} per-block Verilog identical in all runs: {len(seen_v) == 1}; "
              f"estimates equal: {len(seen_e) == 1}")


if __name__ == "__main__":
    main()
