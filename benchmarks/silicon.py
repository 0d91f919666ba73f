"""What Yosys and nextpnr make of hwgen's designs: cells, block RAM, DSP tiles and fmax.

    python benchmarks/silicon.py [--designs mlp,cnn@t64,...] [--family ecp5|ice40|both]
                                 [--no-pnr] [--json OUT] [--timeout S] [--seed N]

Each design is an example model at ``--target-cycles 1024`` (``mlp``), at
``--target-cycles 64`` (``mlp@t64``) or at ``hwgen compile``'s default, the folding searched
for the ``ulx3s-85f`` (``mlp@85f``; ``mlp@85f-ll`` with ``--logic-lanes``), or the folding
searched for the ``icebreaker`` (``mlp@icebreaker``); ``--designs`` takes names or patterns
(``'*@t64'``, ``'qonnx-*'``; default: all). Per design: ``hwgen.compile``, the timing wrapper
(``hwgen.boards.synth.timing_wrapper``: the core's stream ports are wider than any package,
so wide inputs come from a shift register on one pin and wide outputs are XOR-reduced to one
pin each), Yosys for each family (``synth_ecp5``; ``synth_ice40 -dsp``), then nextpnr: the
ECP5 LFE5U-85F (CABGA381, speed 6) at a 125 MHz target and the iCE40 UP5K (SG48) at 48 MHz
when the synthesized cells can fit it.

The counts are of the wrapped design: the wrapper adds at most the ``wrap FF`` column's
flip-flops (its shift register and XOR registers) and a LUT per XOR register. Results are
cached by content (``$HWGEN_CACHE/synth`` or ``~/.cache/hwgen/synth``): a second run with the
same tools and designs prints the table at once. Large designs take minutes per step and up
to 1.5 GB of memory in place-and-route.
"""
from __future__ import annotations

import argparse
import fnmatch
import json
import sys
import tempfile
import time
from pathlib import Path

import hwgen
from hwgen.boards.devices import by_name
from hwgen.boards.synth import (
    place_and_route,
    shortfalls,
    synthesize,
    timing_wrapper,
    verilog_ports,
)
from hwgen.errors import HwgenError

ROOT = Path(__file__).resolve().parent.parent
EX = ROOT / "examples"

#: design name → model (an examples/ file, or a QONNX test model's builder name)
MODELS = {
    "mlp": "digits_mlp_qdq.onnx",
    "cnn": "digits_cnn_qdq.onnx",
    "resnet": "digits_resnet_qdq.onnx",
    "cnn-qop": "digits_cnn_qop.onnx",
    "resnet-qop": "digits_resnet_qop.onnx",
    # tests/qonnx_models.py: (builder, arguments)
    "qonnx-mlp-4bit": ("mlp", (4, 4)),
    "qonnx-mlp-2bit": ("mlp", (2, 2)),
    "qonnx-cnn-4bit": ("cnn", ("4bit",)),
    "qonnx-cnn-2bit": ("cnn", ("2bit",)),
    "qonnx-bipolar": ("bipolar_mlp", ()),
    "finn-tfc-w1a1": "finn/tfc-w1a1.onnx",
    "finn-tfc-w2a2": "finn/tfc-w2a2.onnx",
    # the layer-sequential engine's models (@icebreaker)
    "dscnn": "mlperf_tiny/dscnn_qdq.onnx",
    "tfc8": "mlperf_tiny/tfc_bnfused_qdq.onnx",
}
#: "" is --target-cycles 1024 (the default before device-aware folding), "@t64" a fast folding,
#: "@85f" today's default (no target: the folding searched for the default board, products in
#: logic cells down to the device's bound), "@85f-ll" the same search with products in logic
#: cells beyond it (--logic-lanes), "@85f-dsp" with every product in a DSP tile (--dsp-only),
#: "@icebreaker" the folding searched for the iCEBreaker (UP5K)
FOLDINGS = {"": 1024, "@t64": 64, "@85f": None, "@85f-ll": None, "@85f-dsp": None,
            "@icebreaker": None}
#: the foldings compiled for a board other than compile's default
BOARDS = {"@icebreaker": "icebreaker"}


def lanes_of(fold: str) -> str | None:
    """The ``logic_lanes`` of a folding's suffix: "-ll" all, "-dsp" none, else the default."""
    return "all" if fold.endswith("-ll") else "dsp" if fold.endswith("-dsp") else None
DESIGNS = [m + f for m in MODELS for f in FOLDINGS]
TARGETS = {"ecp5": ("ECP5 LFE5U-85F", 125.0), "ice40": ("iCE40 UP5K", 48.0)}


def model_path(spec, tmp: Path) -> Path:
    if isinstance(spec, str):
        return EX / spec
    sys.path.insert(0, str(ROOT / "tests"))
    import qonnx_models  # the QONNX test models, built with onnx.helper

    builder, args = spec
    path = tmp / f"{builder}.onnx"
    path.write_bytes(getattr(qonnx_models, builder)(*args).model.SerializeToString())
    return path


def wrapper_flipflops(verilog: str, top: str) -> int:
    """Flip-flops the timing wrapper adds at most (some may merge into DSP or RAM ports)."""
    n = 0
    for p in verilog_ports(verilog, top):
        if p.name in ("clk", "rst"):
            continue
        if p.direction == "input":
            n += p.width
            continue
        w = p.width
        while True:
            w = -(-w // 4)
            n += w
            if w == 1:
                break
    return n


def run_design(name: str, families: list[str], pnr: bool, seed: int,
               timeout: float | None, pnr_options: tuple[str, ...] = ()) -> dict:
    base, _, fold = name.partition("@")
    target = FOLDINGS["@" + fold if fold else ""]

    def say(msg):
        print(f"  [{name}] {msg}", flush=True)

    model = MODELS[base] if isinstance(MODELS[base], str) else \
        f"tests/qonnx_models.py: {MODELS[base][0]}{MODELS[base][1]!r}"
    row = {"design": name, "model": model, "target_cycles": target, "families": {}}
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        say("hwgen compile")
        comp = hwgen.compile(model_path(MODELS[base], Path(tmp)), Path(tmp) / "d",
                             target_cycles=target, logic_lanes=lanes_of(fold),
                             board=BOARDS.get("@" + fold))
        text = comp.verilog.read_text()
        top = comp.manifest["top"]
        say(f"compiled in {time.perf_counter() - t0:.1f} s: {len(text) / 1e6:.1f} MB of "
            f"Verilog, ports {comp.manifest['ports']['input']['bits']} in / "
            f"{comp.manifest['ports']['output']['bits']} out")
    row["estimate"] = comp.estimate
    row["wrapper_ff"] = wrapper_flipflops(text, top)
    wrapped, wtop = timing_wrapper(text, top)
    for fam in families:
        out = row["families"][fam] = {}
        try:
            res = synthesize(wrapped, wtop, fam, timeout=timeout, progress=say)
        except HwgenError as e:
            say(f"synthesis failed: {e}")
            out["error"] = str(e)
            continue
        out["synth"] = res.as_dict()
        if not pnr:
            continue
        dev, freq = TARGETS[fam]
        why = shortfalls(res, by_name(dev))
        if why:
            say(f"{dev}: skipping place and route ({'; '.join(why)})")
            out["skipped"] = f"{dev}: " + "; ".join(why)
            continue
        try:
            out["pnr"] = place_and_route(res, dev, freq, seed, options=pnr_options,
                                         timeout=timeout, progress=say).as_dict()
        except HwgenError as e:
            say(f"place and route failed: {e}")
            out["error"] = str(e)
    return row


def fmax_cell(fam: dict) -> str:
    if "pnr" in fam:
        p = fam["pnr"]
        return f"{p['fmax_mhz']:.1f}" if p["fmax_mhz"] is not None else "no clk"
    if "skipped" in fam:
        return "no fit"
    return "fail" if "error" in fam else "—"


def print_table(rows: list[dict]) -> None:
    head = (f"{'design':22} {'family':6} {'LUT4':>7} {'FF':>6} {'carry':>6} {'DSP':>4} "
            f"{'BRAM':>5} {'DRAM':>5} {'wrap FF':>7} {'est mult':>8} {'est mem':>8} "
            f"{'est regs':>8} {'fmax':>7} {'yosys s':>7} {'pnr s':>6} {'warn':>4} mem→reg")
    print()
    print(head)
    print("-" * len(head))
    for r in rows:
        e = r["estimate"]
        for fam, f in r["families"].items():
            s = f.get("synth")
            if s is None:
                print(f"{r['design']:22} {fam:6} synthesis failed: {f.get('error', '')}")
                continue
            pnr_s = f"{f['pnr']['seconds']:.0f}" if "pnr" in f else ""
            mems = ",".join(s["memories_to_registers"]) or "-"
            print(f"{r['design']:22} {fam:6} {s['lut4']:>7,} {s['ff']:>6,} {s['carry']:>6,} "
                  f"{s['dsp']:>4} {s['bram']:>5} {s['dram']:>5} {r['wrapper_ff']:>7} "
                  f"{e['multipliers']:>8} {e['memory_bits']:>8,} {e['registers']:>8,} "
                  f"{fmax_cell(f):>7} {s['seconds']:>7.0f} {pnr_s:>6} {len(s['warnings']):>4} "
                  f"{mems}")
    print(f"\nfmax: MHz on {TARGETS['ecp5'][0]} (target {TARGETS['ecp5'][1]:g}) for ecp5, "
          f"{TARGETS['ice40'][0]} (target {TARGETS['ice40'][1]:g}) for ice40; 'no fit': the "
          f"synthesized cells exceed the device")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--designs", default="*",
                    help=f"comma-separated names or patterns (of {', '.join(DESIGNS)})")
    ap.add_argument("--family", choices=("ecp5", "ice40", "both"), default="both")
    ap.add_argument("--no-pnr", action="store_true", help="synthesis only")
    ap.add_argument("--json", metavar="OUT", help="write every result to this JSON file")
    ap.add_argument("--timeout", type=float, help="seconds per tool run")
    ap.add_argument("--seed", type=int, default=1, help="nextpnr's seed")
    ap.add_argument("--pnr-option", action="append", default=[], metavar="OPT",
                    help="extra nextpnr option, repeatable (e.g. --pnr-option=--router "
                         "--pnr-option=router2)")
    args = ap.parse_args(argv)
    pats = [p.strip() for p in args.designs.split(",") if p.strip()]
    names = [d for d in DESIGNS if any(fnmatch.fnmatchcase(d, p) for p in pats)]
    if not names:
        ap.error(f"no design matches {args.designs!r} (designs: {', '.join(DESIGNS)})")
    families = ["ecp5", "ice40"] if args.family == "both" else [args.family]
    rows = []
    for k, name in enumerate(names, 1):
        print(f"[{k}/{len(names)}] {name}", flush=True)
        try:
            rows.append(run_design(name, families, not args.no_pnr, args.seed, args.timeout,
                                   tuple(args.pnr_option)))
        except HwgenError as e:
            print(f"  [{name}] failed: {e}", flush=True)
        if args.json:  # after every design: a long run that stops keeps what it measured
            Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    print_table(rows)


if __name__ == "__main__":
    main()
