"""Bitstreams of the example designs: ``hwgen build`` of each, then one table.

    python benchmarks/build_table.py [--designs NAME@BOARD,...] [--mlperf] [--seed N]
                                     [--freq MHZ] [--router R] [--json OUT] [--keep DIR]
                                     [--markdown OUT] [--rows JSON,...]

Default designs: the digits MLP, CNN and ResNet (QDQ) for the ULX3S-85F and the digits MLP
for the iCEBreaker; ``--mlperf`` adds the four MLPerf Tiny networks (QDQ per-tensor) for the
ULX3S-85F; ``cnn_wide`` is a digits CNN that is none of the examples (``examples/timing/``);
``tfc_w1a1``, ``tfc_w2a2``, ``cnv_w1a1`` and ``cnv_w2a2`` are FINN's networks as QONNX
(``examples/finn/``).
Each is built as ``hwgen build MODEL --board B`` builds it (folded for the board, the board
top with PLL, reset, LED and UART link, Yosys, nextpnr at the board's default clock, the
packer; ``--router``: nextpnr's router for every design, by default router1, as ``hwgen
build``'s). Per design the table
gives the clock target and the clock nextpnr reached, whether timing is met, the estimated
and the synthesized LUT4 and flip-flops (the core's estimate plus the link's), DSP and block
RAM tiles, inferences per second at the target clock and the wall time of synthesis and of
place and route; then each design's critical path (start and end cell, delay, logic levels).
``--markdown OUT`` writes the table and the paths as Markdown (``docs/build_results.md``);
``--rows A.json,B.json`` prints (and writes) the rows of earlier ``--json`` runs instead of
building. Results are cached by content (``$HWGEN_CACHE/synth``), so a second run prints at
once; wall times are those of the run that filled the cache (``build.json``'s ``steps_seconds`` of a
cached step are 0).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hwgen.build import ROUTERS, build
from hwgen.errors import HwgenError

EX = Path(__file__).resolve().parent.parent / "examples"
MODELS = {"mlp": "digits_mlp_qdq.onnx", "cnn": "digits_cnn_qdq.onnx",
          "resnet": "digits_resnet_qdq.onnx", "cnn_wide": "timing/digits_cnn_wide_qdq.onnx",
          "resnet8": "mlperf_tiny/resnet8_qdq.onnx", "dscnn": "mlperf_tiny/dscnn_qdq.onnx",
          "mobilenet": "mlperf_tiny/mobilenet_v1_025_qdq.onnx",
          "autoencoder": "mlperf_tiny/autoencoder_qdq.onnx",
          "tfc_w1a1": "finn/tfc-w1a1.onnx", "tfc_w2a2": "finn/tfc-w2a2.onnx",
          "cnv_w1a1": "finn/cnv-w1a1.onnx", "cnv_w2a2": "finn/cnv-w2a2.onnx"}
DEFAULT = ["mlp@ulx3s-85f", "cnn@ulx3s-85f", "resnet@ulx3s-85f", "mlp@icebreaker"]
MLPERF = ["resnet8@ulx3s-85f", "dscnn@ulx3s-85f", "mobilenet@ulx3s-85f",
          "autoencoder@ulx3s-85f"]


def _commit() -> str:
    """The commit of the source tree the builds run from ("" outside a git checkout; a
    "+" when it has uncommitted changes)."""
    root = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=7", "HEAD"],
                              capture_output=True, text=True, timeout=30)
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain",
                                "--untracked-files=no"], capture_output=True, text=True,
                               timeout=30)
    except (OSError, subprocess.SubprocessError):
        return ""
    if head.returncode:
        return ""
    return head.stdout.strip() + ("+" if dirty.stdout.strip() else "")


def row(name: str, doc: dict, wall: float) -> dict:
    r, c, p = doc["resources"], doc["clock"], doc["performance"]
    return {"design": name, "commit": _commit(), "target_mhz": c["clock_mhz"],
            "fmax_mhz": c["achieved_mhz"],
            "met": c["timing_met"], "router": doc.get("router", "router1"),
            **{f"{k}_est": r[k]["estimated"] for k in ("lut4", "ff", "dsp", "bram")},
            **{f"{k}_syn": r[k]["synthesized"] for k in ("lut4", "ff", "dsp", "bram")},
            "inferences_per_second": p["inferences_per_second"],
            "cycles_per_frame": p["cycles_per_frame"],
            "synthesis_s": doc["steps_seconds"].get("synthesis", 0.0),
            "pnr_s": doc["steps_seconds"].get("place_and_route", 0.0),
            "wall_s": round(wall, 1), "cached": doc["cached"], "path": _path(c)}


def _path(clock: dict) -> str:
    """The critical path as "start → end (ns, logic levels)", cells named short."""
    p = clock.get("critical_path")
    if not p:
        return "-"
    short = [n.removeprefix("core.core.").removeprefix("core.") for n in (p["start"], p["end"])]
    return f"{short[0]} → {short[1]} ({p['delay_ns']:.2f} ns, {p['logic_levels']} levels)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--designs", help="comma-separated NAME@BOARD (names: "
                                      + ", ".join(MODELS) + ")")
    ap.add_argument("--mlperf", action="store_true", help="add the MLPerf Tiny networks")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--freq", type=float, help="clock target (default: the board's)")
    ap.add_argument("--router", choices=ROUTERS,
                    help="nextpnr's router (default: router1, as hwgen build's)")
    ap.add_argument("--json", metavar="OUT", help="write the rows to this JSON file")
    ap.add_argument("--keep", metavar="DIR", help="keep each build's folder under DIR")
    ap.add_argument("--markdown", metavar="OUT", help="write the table as Markdown")
    ap.add_argument("--rows", metavar="JSON", help="comma-separated --json files: their rows "
                                                   "instead of building")
    args = ap.parse_args()
    names = args.designs.split(",") if args.designs else DEFAULT + (MLPERF if args.mlperf
                                                                    else [])
    rows = []
    if args.rows:
        names = []
        for f in args.rows.split(","):
            rows += json.loads(Path(f).read_text())
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(args.keep) if args.keep else Path(tmp)
        for name in names:
            model, board = name.split("@")
            out = base / name.replace("@", "_")
            t0 = time.perf_counter()
            print(f"building {name} ...", file=sys.stderr, flush=True)
            router = args.router or "router1"
            try:
                res = build(EX / MODELS[model], out, board, args.freq, args.seed, force=True,
                            router=router)
                rows.append(row(name, res.report, time.perf_counter() - t0))
            except HwgenError as e:     # a failed build is a row of the table, not the end
                why = str(e).splitlines()[0][:200]
                print(f"{name} failed: {why}", file=sys.stderr, flush=True)
                rows.append({"design": name, "commit": _commit(), "failed": why,
                             "router": router,
                             "path": f"failed: {why}"})
            if args.json:       # each row as soon as it is known
                Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    head = (f"{'design':24s} {'MHz':>5s} {'fmax':>6s} {'met':>3s} {'LUT4 est/syn':>15s} "
            f"{'FF est/syn':>15s} {'DSP':>7s} {'BRAM':>7s} {'inf/s':>10s} {'synth s':>7s} "
            f"{'pnr s':>7s}")
    print(head)
    for r in rows:
        if r.get("failed"):
            print(f"{r['design']:24s} failed ({r['router']})")
            continue
        fm = f"{r['fmax_mhz']:.1f}" if r["fmax_mhz"] is not None else "-"
        print(f"{r['design']:24s} {r['target_mhz']:5g} {fm:>6s} {'yes' if r['met'] else 'no':>3s} "
              f"{r['lut4_est']:>7,}/{r['lut4_syn']:<7,} {r['ff_est']:>7,}/{r['ff_syn']:<7,} "
              f"{r['dsp_est']:>3}/{r['dsp_syn']:<3} {r['bram_est']:>3}/{r['bram_syn']:<3} "
              f"{r['inferences_per_second']:>10,.0f} {r['synthesis_s']:>7.1f} "
              f"{r['pnr_s']:>7.1f}")
    print("\ncritical paths:")
    for r in rows:
        print(f"  {r['design']:24s} {r['path']}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    if args.markdown:
        Path(args.markdown).write_text(markdown(rows, args.seed))


def markdown(rows: list[dict], seed: int) -> str:
    """The table and the critical paths as a Markdown page."""
    out = ["# Board builds", "",
           "Written by `python benchmarks/build_table.py --markdown docs/build_results.md` "
           f"(`hwgen build`, default options, placement seed {seed}). LUT4 and flip-flops: "
           "the estimate and what Yosys made of the design (core and link); commit: the "
           "source the row was built from.", "",
           "| design | commit | target MHz | fmax MHz | met | LUT4 est / syn | FF est / syn | "
           "DSP | BRAM | cycles per frame | inferences/s | router |",
           "|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        commit = r.get("commit") or "-"
        if r.get("failed"):
            out.append(f"| {r['design']} | {commit} | | failed | no | | | | | | | "
                       f"{r['router']} |")
            continue
        fm = f"{r['fmax_mhz']:.1f}" if r["fmax_mhz"] is not None else "-"
        out.append(f"| {r['design']} | {commit} | {r['target_mhz']:g} | {fm} | "
                   f"{'yes' if r['met'] else 'no'} | {r['lut4_est']:,} / {r['lut4_syn']:,} | "
                   f"{r['ff_est']:,} / {r['ff_syn']:,} | {r['dsp_syn']} | {r['bram_syn']} | "
                   f"{r['cycles_per_frame']:,} | {r['inferences_per_second']:,.0f} | "
                   f"{r['router']} |")
    out += ["", "Critical paths (start → end, delay, logic levels):", ""]
    out += [f"- {r['design']}: `{r['path']}`" for r in rows]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    main()
