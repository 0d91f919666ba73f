"""Place and route single blocks of an example design: fmax and the critical path per block.

    python benchmarks/block_pnr.py DESIGN [BLOCK ...] [--family ecp5|ice40] [--freq MHz]
                                   [--router router1|router2] [--seed N] [--list] [--path]
                                   [--lut-lanes N] [--logic-lanes] [--board NAME]
    python benchmarks/block_pnr.py --kinds [--only KIND,...] [--path] [--json OUT]
                                   [--markdown OUT] [--rows A.json,B.json]

``DESIGN`` is ``MODEL@FOLD``: ``MODEL`` a ``benchmarks/silicon.py`` model (``cnn``, ``mlp``,
``qonnx-cnn-4bit``, …) or an ``.onnx`` file under ``examples/``
(``mlperf_tiny/dscnn_qdq.onnx``); ``FOLD`` is empty (``--target-cycles 1024``), ``t64`` or any
``tN`` (``--target-cycles N``), or ``dev``: folded for the board (``--board``, default the
smallest board the model fits, as ``hwgen compile`` chooses it; ``--logic-lanes`` lets that
search build products of logic cells).
``--lut-lanes N`` builds the last ``N`` products of each chosen matrix or vector unit of logic
cells (``Folding.lut_lanes``), whatever the folding chose; ``--weight-bits B`` cuts the chosen
blocks' weights to ``B`` bits (an arithmetic shift right: the same block with narrower
weights, for timing only).
``BLOCK`` is a block's name in the lowered graph, or a part of it (the first match); none:
every compute block (``--list`` prints the blocks and stops). Each block is elaborated on its
own, wrapped by ``hwgen.boards.synth.timing_wrapper`` (its wide stream ports become a shift
register on one pin and XOR-reduced outputs), synthesized and placed and routed on the ECP5
LFE5U-85F speed 6 at 125 MHz (``--family ice40``: the iCE40 UP5K at 48 MHz) with nextpnr's
router2. Results are cached by content like ``silicon.py``'s. ``--path`` prints the critical
path's segments: cells, delays and the source lines they come from.

``--kinds``: every registered block kind once, its largest instance (estimated LUT4 and
flip-flops) in the designs of :data:`KIND_DESIGNS` folded for the ULX3S-85F, or its largest
conformance example (``examples`` face) for a kind none of them uses; then a table of kind,
source, fmax and critical path.

A design's fmax is at most its slowest block's; the blocks placed alone route shorter than
inside the whole design, so a block a little over the target may still fail there.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
from amaranth.back import verilog

import hwgen
from hwgen import design as design_folder
from hwgen.boards.synth import place_and_route, synthesize, timing_wrapper
from hwgen.dataflow import operators  # noqa: F401  (registers every block kind)
from hwgen.dataflow.lower import lower
from hwgen.errors import HwgenError
from hwgen.rtl_templates.block import block_spec

sys.path.insert(0, str(Path(__file__).resolve().parent))
from silicon import FOLDINGS, MODELS, TARGETS, model_path  # noqa: E402

#: blocks that only move data (placed with the compute blocks they serve)
PLUMBING = ("fifo", "fork")
#: ``--kinds``: the designs whose blocks stand for their kinds (folded for the ULX3S-85F)
KIND_DESIGNS = ("cnn@dev", "resnet@dev", "mlperf_tiny/resnet8_qdq.onnx@dev",
                "mlperf_tiny/dscnn_qdq.onnx@dev", "mlperf_tiny/mobilenet_v1_025_qdq.onnx@dev",
                "mlperf_tiny/autoencoder_qdq.onnx@dev", "timing/digits_cnn_wide_qdq.onnx@dev")


def lowered(name: str, board: str | None = None, logic_lanes: str | None = None):
    """The lowered dataflow graph of design ``name`` (``model``, ``model@t64``, ``model@tN``,
    ``model@dev``; ``model`` a silicon.py model or an ``.onnx`` file under ``examples/``)."""
    base, _, fold = name.partition("@")
    if fold == "dev":
        target = None
    elif ("@" + fold if fold else "") in FOLDINGS:
        target = FOLDINGS["@" + fold if fold else ""]
    elif fold.startswith("t") and fold[1:].isdigit():
        target = int(fold[1:])
    else:
        raise SystemExit(f"block_pnr: unknown folding {fold!r} (t64, tN or dev)")
    spec = base if base.endswith(".onnx") else MODELS[base]
    with tempfile.TemporaryDirectory() as tmp:
        comp = hwgen.compile(model_path(spec, Path(tmp)), Path(tmp) / "d",
                             target_cycles=target, board=board, logic_lanes=logic_lanes)
        _, ig, folding = design_folder.load(comp.out_dir)
    return lower(ig, folding)


def with_lanes(b, n: int | None, w_bits: int | None):
    """Block ``b`` with its last ``n`` products built of logic cells and its weights cut to
    ``w_bits`` bits (``None``: as they are)."""
    if not hasattr(b.params, "lut_lanes"):
        raise SystemExit(f"block_pnr: {b.name} ({b.kind}) has no products to build of logic")
    change = {} if n is None else {"lut_lanes": n}
    if w_bits is not None:
        w = np.asarray(b.params.weights)
        change["weights"] = w >> max(0, b.params.w_bits - w_bits)
    try:
        return dataclasses.replace(b, params=dataclasses.replace(b.params, **change))
    except ValueError as e:
        raise SystemExit(f"block_pnr: {b.name}: {e}") from None


def describe(b) -> str:
    m = block_spec(b.kind).manifest(b.params)
    keep = {k: m[k] for k in ("folding", "matrix", "window", "width", "depth") if k in m}
    if hasattr(b.params, "w_bits"):
        keep["w_bits"] = b.params.w_bits
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


def size(kind: str, params) -> int:
    """Estimated LUT4 + flip-flops of a block on the ECP5 (to pick a kind's largest)."""
    r = block_spec(kind).cost(params).resources("ecp5")
    return r.lut4 + r.ff


def largest_per_kind(board: str) -> list[tuple[str, object]]:
    """(source, block) for every registered kind: its largest instance in
    :data:`KIND_DESIGNS`, else its largest conformance example."""
    from hwgen.rtl_templates.block import registered_kinds

    best: dict[str, tuple[int, str, object]] = {}
    for design in KIND_DESIGNS:
        for b in lowered(design, board).blocks:
            n = size(b.kind, b.params)
            if b.kind not in best or n > best[b.kind][0]:
                best[b.kind] = (n, design.removesuffix("@dev"), b)
    for kind in registered_kinds():
        if kind in best:
            continue
        spec = block_spec(kind)
        exs = spec.examples() if spec.examples else []
        if exs:
            ex = max(exs, key=lambda e: size(kind, e.params))
            best[kind] = (0, "example", SimpleNamespace(name=ex.name, kind=kind,
                                                        params=ex.params))
    return [(best[k][1], best[k][2]) for k in sorted(best)]


def run_block(b, family: str, freq: float, seed: int, options: tuple[str, ...],
              path: bool) -> dict:
    text = verilog.convert(block_spec(b.kind).component(b.params), name="blk",
                           emit_src=True)
    wrapped, wtop = timing_wrapper(text, "blk")
    s = synthesize(wrapped, wtop, family)
    dev = TARGETS[family][0]
    # the clock on the ULX3S's clock pin (a global buffer's input): a pin the placer picks
    # may have no route to one
    lpf = None
    if family == "ecp5":
        lpf = ("blk.lpf", 'LOCATE COMP "clk" SITE "G2";\n')
        options = (*options, "--lpf-allow-unconstrained")
    p = place_and_route(s, dev, freq, seed, options=options, constraints=lpf)
    cp = p.critical_path
    print(f"{b.name:36} {b.kind:8} lut4 {s.lut4:6} ff {s.ff:6} dsp {s.dsp:3} bram {s.bram:3} "
          f"fmax {p.fmax_mhz:6.1f}  crit {cp.start if cp else '-'} -> {cp.end if cp else '-'} "
          f"({cp.logic_ns if cp else 0:.1f} logic + {cp.routing_ns if cp else 0:.1f} route ns)"
          f"  {describe(b)}", flush=True)
    if path:
        print_path(p.report)
    return {"kind": b.kind, "block": b.name, "lut4": s.lut4, "ff": s.ff, "dsp": s.dsp,
            "bram": s.bram, "fmax_mhz": p.fmax_mhz, "met": p.met,
            "path": (f"{cp.start} -> {cp.end} ({cp.delay_ns:.2f} ns, {cp.logic_levels} "
                     f"levels, {cp.routing_ns:.1f} ns route)") if cp else "-"}


def kinds_markdown(rows: list[dict], freq: float) -> str:
    """The ``--kinds`` table as a Markdown page (rows in kind order)."""
    out = ["# Block kinds placed and routed alone", "",
           f"Written by `python benchmarks/block_pnr.py --kinds --markdown` ({len(rows)} kinds). "
           f"Each kind's largest block in the example designs folded for the ULX3S-85F (or "
           f"its largest conformance example), alone in a timing wrapper, placed and routed "
           f"on the LFE5U-85F at {freq:g} MHz, seed 1.", "",
           "| kind | fmax MHz | source | block | LUT4 | FF | DSP | BRAM | critical path |",
           "|---|---:|---|---|---:|---:|---:|---:|---|"]
    for r in sorted(rows, key=lambda r: r["kind"]):
        fm = f"{r['fmax_mhz']:.1f}" if r.get("fmax_mhz") else "–"
        cells = [str(r.get(k, "")) for k in ("lut4", "ff", "dsp", "bram")]
        path = r["path"].replace("|", "\\|")
        out.append(f"| {r['kind']} | {fm} | {r['source']} | `{r['block']}` | "
                   f"{' | '.join(cells)} | `{path}` |")
    return "\n".join(out) + "\n"


def run_kinds(args) -> None:
    """``--kinds``: each kind's largest block placed and routed alone, then the table."""
    rows = []
    freq = args.freq or TARGETS[args.family][1]
    if args.rows:
        rows = {r["kind"]: r for f in args.rows.split(",")
                for r in json.loads(Path(f).read_text())}
        Path(args.markdown).write_text(kinds_markdown(list(rows.values()), freq))
        return
    only = set(args.only.split(",")) if args.only else None
    for source, b in largest_per_kind(args.board or "ulx3s-85f"):
        if only is not None and b.kind not in only:
            continue
        try:
            r = run_block(b, args.family, freq, args.seed, ("--router", args.router),
                          args.path)
        except HwgenError as e:     # a tool failure is a row of the table, not the end
            print(f"{b.name:36} {b.kind:8} failed: {e}", flush=True)
            r = {"kind": b.kind, "block": b.name, "fmax_mhz": None, "met": False,
                 "path": f"failed: {str(e).splitlines()[0][:160]}"}
        rows.append({"source": source, **r})
    print(f"\n{'kind':11} {'fmax':>6}  {'source':34} {'block':30} critical path")
    for r in rows:
        fm = f"{r['fmax_mhz']:6.1f}" if r["fmax_mhz"] else "     -"
        print(f"{r['kind']:11} {fm}  {r['source'][:34]:34} {r['block'][:30]:30} {r['path']}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    if args.markdown:
        Path(args.markdown).write_text(kinds_markdown(rows, freq))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("design", nargs="?")
    ap.add_argument("blocks", nargs="*")
    ap.add_argument("--family", choices=tuple(TARGETS), default="ecp5")
    ap.add_argument("--freq", type=float, help="target MHz (default: the family's)")
    ap.add_argument("--router", default="router2")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--path", action="store_true", help="print the critical path")
    ap.add_argument("--lut-lanes", type=int, metavar="N",
                    help="build the last N products of each chosen block of logic cells")
    ap.add_argument("--weight-bits", type=int, metavar="B",
                    help="cut the chosen blocks' weights to B bits (timing only)")
    ap.add_argument("--logic-lanes", action="store_const", const="all",
                    help="products in logic cells beyond the device's bound (as hwgen "
                         "compile --logic-lanes; by default down to it)")
    ap.add_argument("--board", help="@dev: the board to fold for")
    ap.add_argument("--kinds", action="store_true",
                    help="every block kind: its largest instance in the example designs")
    ap.add_argument("--json", metavar="OUT", help="--kinds: write the rows to this file")
    ap.add_argument("--only", metavar="KINDS", help="--kinds: only these (comma-separated)")
    ap.add_argument("--markdown", metavar="OUT", help="--kinds: write the table as Markdown")
    ap.add_argument("--rows", metavar="JSON",
                    help="--kinds --markdown: comma-separated --json files (the later "
                         "file's row of a kind wins) instead of placing and routing")
    args = ap.parse_args(argv)
    if args.rows and not (args.kinds and args.markdown):
        ap.error("--rows goes with --kinds --markdown")
    if args.kinds:
        run_kinds(args)
        return
    if not args.design:
        ap.error("a DESIGN (or --kinds)")
    dfg = lowered(args.design, args.board, args.logic_lanes)
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
    if args.lut_lanes is not None or args.weight_bits is not None:
        chosen = [with_lanes(b, args.lut_lanes, args.weight_bits) for b in chosen]
    freq = args.freq or TARGETS[args.family][1]
    for b in chosen:
        run_block(b, args.family, freq, args.seed, ("--router", args.router), args.path)


if __name__ == "__main__":
    main()
