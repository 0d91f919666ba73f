"""Place and route single blocks of an example design: fmax and the critical path per block.

    python benchmarks/block_pnr.py DESIGN [BLOCK ...] [--family ecp5|ice40] [--freq MHz]
                                   [--router router1|router2] [--seed N] [--list] [--path]

``DESIGN`` is a ``benchmarks/silicon.py`` design (``cnn``, ``mlp@t64``, ``qonnx-cnn-4bit@t64``,
…) or ``MODEL@dev``: the model folded for the default board (no ``--target-cycles``).
``BLOCK`` is a block's name in the lowered graph, or a part of it (the first match); none:
every compute block (``--list`` prints the blocks and stops). Each block is elaborated on its
own, wrapped by ``hwgen.boards.synth.timing_wrapper`` (its wide stream ports become a shift
register on one pin and XOR-reduced outputs), synthesized and placed and routed on the ECP5
LFE5U-85F speed 6 at 125 MHz (``--family ice40``: the iCE40 UP5K at 48 MHz) with nextpnr's
router2. Results are cached by content like ``silicon.py``'s. ``--path`` prints the critical
path's segments: cells, delays and the source lines they come from.

A design's fmax is at most its slowest block's; the blocks placed alone route shorter than
inside the whole design, so a block a little over the target may still fail there.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from amaranth.back import verilog

import hwgen
from hwgen import design as design_folder
from hwgen.boards.synth import place_and_route, synthesize, timing_wrapper
from hwgen.dataflow import operators  # noqa: F401  (registers every block kind)
from hwgen.dataflow.lower import lower
from hwgen.rtl_templates.block import block_spec

sys.path.insert(0, str(Path(__file__).resolve().parent))
from silicon import FOLDINGS, MODELS, TARGETS, model_path  # noqa: E402

#: blocks that only move data (placed with the compute blocks they serve)
PLUMBING = ("fifo", "fork")


def lowered(name: str):
    """The lowered dataflow graph of design ``name`` (``model``, ``model@t64``, ``model@dev``)."""
    base, _, fold = name.partition("@")
    target = None if fold == "dev" else FOLDINGS["@" + fold if fold else ""]
    with tempfile.TemporaryDirectory() as tmp:
        comp = hwgen.compile(model_path(MODELS[base], Path(tmp)), Path(tmp) / "d",
                             target_cycles=target)
        _, ig, folding = design_folder.load(comp.out_dir)
    return lower(ig, folding)


def describe(b) -> str:
    m = block_spec(b.kind).manifest(b.params)
    keep = {k: m[k] for k in ("folding", "matrix", "window", "width", "depth") if k in m}
    return json.dumps(keep, separators=(",", ":"))


def print_path(report: str) -> None:
    rep = json.loads(Path(report).read_text())
    paths = rep.get("critical_paths", [])
    if not paths:
        return
    skipped = 0
    for seg in paths[0].get("path", []):
        if seg["delay"] < 0.1 and seg.get("type") in ("logic", "routing"):
            skipped += 1       # inside a carry chain
            continue
        if skipped:
            print(f"    ({skipped} carry steps)")
            skipped = 0
        src = ";".join(s.split("|")[0].rsplit("/", 1)[-1] for s in seg.get("sources", ()))
        print(f"    {seg.get('type', ''):8} {seg['delay']:6.3f} ns  "
              f"{seg['from'].get('cell', '')[:60]}.{seg['from'].get('port', '')} -> "
              f"{seg['to'].get('cell', '')[:60]}.{seg['to'].get('port', '')}  {src[:90]}")


def run_block(b, family: str, freq: float, seed: int, options: tuple[str, ...],
              path: bool) -> None:
    text = verilog.convert(block_spec(b.kind).component(b.params), name="blk",
                           emit_src=True)
    wrapped, wtop = timing_wrapper(text, "blk")
    s = synthesize(wrapped, wtop, family)
    dev = TARGETS[family][0]
    p = place_and_route(s, dev, freq, seed, options=options)
    cp = p.critical_path
    print(f"{b.name:36} {b.kind:8} lut4 {s.lut4:6} ff {s.ff:6} dsp {s.dsp:3} bram {s.bram:3} "
          f"fmax {p.fmax_mhz:6.1f}  crit {cp.start if cp else '-'} -> {cp.end if cp else '-'} "
          f"({cp.logic_ns if cp else 0:.1f} logic + {cp.routing_ns if cp else 0:.1f} route ns)"
          f"  {describe(b)}", flush=True)
    if path:
        print_path(p.report)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("design")
    ap.add_argument("blocks", nargs="*")
    ap.add_argument("--family", choices=tuple(TARGETS), default="ecp5")
    ap.add_argument("--freq", type=float, help="target MHz (default: the family's)")
    ap.add_argument("--router", default="router2")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--path", action="store_true", help="print the critical path")
    args = ap.parse_args(argv)
    dfg = lowered(args.design)
    if args.list:
        for b in dfg.blocks:
            print(f"{b.name:40} {b.kind:8} {describe(b)}")
        return
    if args.blocks:
        chosen = []
        for want in args.blocks:
            hit = [b for b in dfg.blocks if b.name == want] or \
                  [b for b in dfg.blocks if want in b.name]
            if not hit:
                ap.error(f"no block {want!r} in {args.design}")
            chosen.append(hit[0])
    else:
        chosen = [b for b in dfg.blocks if b.kind not in PLUMBING]
    freq = args.freq or TARGETS[args.family][1]
    for b in chosen:
        run_block(b, args.family, freq, args.seed, ("--router", args.router), args.path)


if __name__ == "__main__":
    main()
