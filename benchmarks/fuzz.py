"""Mutation fuzzer of ``hwgen inspect`` and ``hwgen compile`` on the example models.

    python benchmarks/fuzz.py --count 3000 --seed 1 --jobs 1 --out fuzz.json

Each case is a seeded mutant of a small example model (``tests/fuzz_mutants.py``: onnx-API
changes to ops, nodes, attributes, initializers, opsets and IR versions, and byte flips,
cuts and splices of the serialized model), run through inspect and compile in a forked
child under a time limit of 60 CPU seconds (and 5 times that in wall time, so a busy
machine does not turn slow cases into hangs) and an 8 GiB address-space limit
(``tests/fuzz_run.py``).
Every ``--cli-every``-th case also runs as real subprocesses of the console command, and
the mutants whose index is a multiple of ``--rtl-every`` and that compile are simulated
(native Verilator) on 3 frames against their golden model. Outcomes: design, clean
(exit 2, one stderr line), crash, hang,
stray (files left behind, or stderr on success). The report lists counts by outcome and
every case that is not design or clean, with its signature; the exit code is 1 when there
is any.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from fuzz_run import fuzz_case  # noqa: E402


def one(seed: int, index: int, cli_every: int, rtl_every: int, work: str,
        timeout: float, memory: int, keep: str) -> dict:
    return fuzz_case(seed, index, Path(work), timeout=timeout, memory=memory,
                     real_cli=cli_every > 0 and index % cli_every == 0,
                     check_rtl=rtl_every > 0 and index % rtl_every == 0, keep=Path(keep))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--count", type=int, default=200, help="number of mutants")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--start", type=int, default=0, help="first mutant index")
    ap.add_argument("--jobs", type=int, default=1, help="cases run at once")
    ap.add_argument("--out", default="fuzz-report.json", help="JSON report")
    ap.add_argument("--cli-every", type=int, default=20,
                    help="run every N-th case as real subprocesses (0: never)")
    ap.add_argument("--rtl-every", type=int, default=10,
                    help="simulate every N-th compiled mutant against golden (0: never)")
    ap.add_argument("--keep", default="fuzz-cases",
                    help="folder for the mutants that crash, hang or leave stray output")
    ap.add_argument("--timeout", type=float, default=60.0,
                    help="time limit per command in CPU seconds (wall: 5 times this)")
    ap.add_argument("--memory-gib", type=float, default=8.0)
    args = ap.parse_args(argv)
    memory = int(args.memory_gib * (1 << 30))
    t0 = time.monotonic()
    counts: Counter = Counter()
    cases = []
    out = Path(args.out)
    with tempfile.TemporaryDirectory(prefix="hwgen-fuzz-") as work:
        jobs = [(args.seed, i, args.cli_every, args.rtl_every, work, args.timeout, memory,
                 args.keep)
                for i in range(args.start, args.start + args.count)]
        if args.jobs > 1:
            with ProcessPoolExecutor(args.jobs) as ex:
                results = ex.map(one, *zip(*jobs))
                for r in results:
                    cases.append(r)
                    _progress(r, counts, len(cases), args, out, t0, cases)
        else:
            for j in jobs:
                r = one(*j)
                cases.append(r)
                _progress(r, counts, len(cases), args, out, t0, cases)
    _write(out, args, counts, cases, t0)
    print(f"{len(cases)} mutants in {time.monotonic() - t0:.0f} s: "
          + ", ".join(f"{k} {counts[k]}" for k in sorted(counts)))
    bad = sum(counts[k] for k in ("crash", "hang", "stray"))
    return 1 if bad else 0


def _progress(r, counts, n, args, out, t0, cases):
    counts[r["outcome"]] += 1
    if r["outcome"] not in ("design", "clean"):
        print(f"[{r['index']}] {r['outcome']}: {r['label']}\n    "
              + "\n    ".join(r["signatures"]), flush=True)
    if n % 50 == 0:
        print(f"{n} done, {time.monotonic() - t0:.0f} s: {dict(counts)}", flush=True)
        _write(out, args, counts, cases, t0)


def _write(out: Path, args, counts, cases, t0):
    rtl = [c["rtl_equals_golden"] for c in cases if c["rtl_equals_golden"] is not None]
    doc = {"command": " ".join(sys.argv), "seed": args.seed, "start": args.start,
           "count": len(cases), "seconds": round(time.monotonic() - t0, 1),
           "outcomes": dict(sorted(counts.items())),
           "rtl_checked": len(rtl), "rtl_equal": sum(rtl),
           "by_command": {cmd: dict(Counter(c["commands"].get(cmd) for c in cases))
                          for cmd in ("inspect", "compile")},
           "bad": [c for c in cases if c["outcome"] not in ("design", "clean")]}
    out.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
