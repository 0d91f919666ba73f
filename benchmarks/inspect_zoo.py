"""``hwgen inspect`` on the onnx package's light model-zoo models: time and peak memory.

    python benchmarks/inspect_zoo.py [--target-cycles N] [--pytorch-converted] [MODEL.onnx ...]

Without model arguments it runs every ``onnx/backend/test/data/light/*.onnx`` (ImageNet
models with 224×224 inputs whose weights ConstantOfShape fills: tens of millions of them);
with ``--pytorch-converted`` every ``backend/test/data/pytorch-converted/*/model.onnx`` (small
float models PyTorch exported long ago, named by their folder), and after the table the
problems of each model that does not map completely, one line each.
Each model runs in its own process, so the peak RSS column is that model's alone (the
Python interpreter, numpy, onnx and the report included). Per model: nodes; nodes that map
(mapped + folded into a layer), other supported nodes (constants, views), unsupported and
blocked nodes; the layers; the estimated cycles per frame and memory; wall time of the
inspection (loading, import, estimates) and of the whole process; peak RSS.
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path


def zoo_data() -> Path:
    import onnx
    return Path(onnx.__file__).parent / "backend" / "test" / "data"


def light_models() -> list[Path]:
    return sorted((zoo_data() / "light").glob("*.onnx"))


def pytorch_converted() -> list[Path]:
    return sorted((zoo_data() / "pytorch-converted").glob("*/model.onnx"))


def label(path: Path) -> str:
    """A model's name: its file's, or its folder's for a ``model.onnx``."""
    return path.parent.name if path.name == "model.onnx" else path.name


def one(path: str, target: int | None) -> dict:
    from hwgen.inspect import inspect
    rep = inspect(path, target_cycles=target)
    c = rep.counts()
    t = rep.estimate.totals
    return {
        "model": label(Path(path)), "nodes": len(rep.rows),
        "mapped": c.get("mapped", 0) + c.get("folded", 0),
        "other": c.get("constant", 0) + c.get("no hardware", 0) + c.get("unused", 0),
        "unsupported": c.get("unsupported", 0), "blocked": c.get("blocked", 0),
        "layers": sum(1 for e in rep.estimate.ops.values() if e.blocks),
        "problems": len(rep.problems), "complete": all(r.status for r in rep.rows),
        "cycles": t["cycles_per_frame"], "memory_bits": t["memory_bits"],
        "seconds": rep.seconds,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "problem_lines": [str(p) for p in rep.problems],
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("models", nargs="*", help="ONNX models (default: the light model zoo)")
    ap.add_argument("--target-cycles", type=int, help="as 'hwgen inspect --target-cycles'")
    ap.add_argument("--pytorch-converted", action="store_true",
                    help="the onnx package's pytorch-converted test models instead")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(one(args.one, args.target_cycles)))
        return 0
    models = [Path(m) for m in args.models] or (
        pytorch_converted() if args.pytorch_converted else light_models())
    head = (f"{'model':<26}{'nodes':>6}{'mapped':>7}{'other':>6}{'unsup':>6}{'blocked':>8}"
            f"{'layers':>7}{'cycles/frame':>14}{'memory Mbit':>12}{'inspect s':>10}"
            f"{'process s':>10}{'peak RSS MB':>12}")
    print(head)
    print("-" * len(head))
    worst = 0.0
    refused = []
    for m in models:
        cmd = [sys.executable, __file__, "--one", str(m)]
        if args.target_cycles:
            cmd += ["--target-cycles", str(args.target_cycles)]
        t0 = time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if p.returncode:
            print(f"{label(m):<26} FAILED: {p.stderr.strip().splitlines()[-1:]}")
            continue
        r = json.loads(p.stdout.strip().splitlines()[-1])
        worst = max(worst, wall)
        print(f"{r['model']:<26}{r['nodes']:>6}{r['mapped']:>7}{r['other']:>6}"
              f"{r['unsupported']:>6}{r['blocked']:>8}{r['layers']:>7}{r['cycles']:>14,}"
              f"{r['memory_bits'] / 2**20:>12.1f}{r['seconds']:>10.2f}{wall:>10.2f}"
              f"{r['peak_rss_mb']:>12.0f}")
        if r["problem_lines"]:
            refused.append((r["model"], r["problem_lines"]))
    print(f"slowest model: {worst:.2f} s for the whole process")
    if refused:
        print(f"\nproblems ({len(refused)} of {len(models)} models):")
        for model, lines in refused:
            for line in lines:
                print(f"{model:<26} {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
