"""The resource model against Yosys: estimated LUT4, flip-flops, DSP and block RAM tiles per
block and per design, next to what ``synth_ecp5`` and ``synth_ice40 -dsp`` make of them.

    python benchmarks/resources.py [--quick] [--blocks | --grid | --designs]
                                   [--family ecp5|ice40|both]
                                   [--kinds mvau,vvau,...] [--only PATTERN] [--json OUT]
                                   [--timeout S]

Blocks: the test grids of every block kind (``tests/blocks/test_<block>.py``: small shapes, every
corner of the parameters) and every distinct block of the example designs at their foldings
(realistic sizes), and the elementwise operators' blocks at the tests' and realistic sizes;
each block alone is converted to Verilog and synthesized. ``--quick`` takes a few of each
kind. Designs: the example models and the QONNX test models of ``benchmarks/silicon.py``,
the QOperator ResNet and FINN's TFC at ``--target-cycles 1024``, at ``--target-cycles
64`` and at the folding searched for the ``ulx3s-85f`` (``@85f``), FINN's CNV at
``--target-cycles 16384``, the MLPerf Tiny networks at ``@85f`` and the same with
``--logic-lanes`` (``@85f-ll``), and their per-channel forms (``-pc``) at ``@85f``, the whole
core synthesized (no timing wrapper).
``--quick`` takes the small ones; ``--grid`` the test grids' blocks alone. The memories
Yosys turned into registers ("Replacing memory ... with list of registers") are listed after
the table.

The table gives per row the estimate and Yosys's count; the summary per block kind and
family the mean and worst ratio (estimate / Yosys) of LUT4 and flip-flops and the rows whose
DSP or block RAM tiles differ. Acceptance (``tests/blocks/test_resources.py`` checks a design
of each family): DSP and block RAM tiles exact, LUT4 and flip-flops within ±15 % per design.
Synthesis results are cached by content (``$HWGEN_CACHE/synth``), so a second run prints at
once.
"""
from __future__ import annotations

import argparse
import fnmatch
import hashlib
import json
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from amaranth.back import verilog

import hwgen
from hwgen import design as design_folder
from hwgen.boards.synth import (
    SYNTH_COMMANDS,
    SynthResult,
    cache_root,
    read_entry,
    synth_key,
    synthesize,
)
from hwgen.dataflow import operators  # noqa: F401  (registers every block kind)
from hwgen.dataflow.lower import lower
from hwgen.errors import HwgenError
from hwgen.rtl_templates.argmax import ArgMaxParams
from hwgen.rtl_templates.bcast import BcastParams
from hwgen.rtl_templates.block import block_spec
from hwgen.rtl_templates.dwc import DWCParams
from hwgen.rtl_templates.fifo import FIFOParams
from hwgen.rtl_templates.fork import ForkParams
from hwgen.rtl_templates.quant import INT8, UINT8
from hwgen.rtl_templates.upsample import UpsampleParams

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests" / d) for d in ("", "blocks", "dataflow")]  # test grids
sys.path.insert(0, str(ROOT / "benchmarks"))

from silicon import BOARDS, lanes_of, model_path  # noqa: E402
from silicon import MODELS as SILICON_MODELS  # noqa: E402  (benchmarks/silicon.py)

FAMILIES = ("ecp5", "ice40")
KEYS = ("lut4", "ff", "dsp", "bram")
#: the designs --quick takes
QUICK_DESIGNS = ("mlp", "qonnx-mlp-4bit", "qonnx-cnn-4bit", "qonnx-bipolar")
#: "" is --target-cycles 1024 (the default before device-aware folding), "@t64" a fast folding
#: "@85f": the folding searched for the ulx3s-85f (compile's default: products in logic cells
#: down to the device's bound), "@85f-ll": beyond it (``--logic-lanes``), "@85f-dsp": none
#: (``--dsp-only``)
FOLDINGS = {"": 1024, "@t64": 64, "@t16k": 16384, "@85f": None, "@85f-ll": None,
            "@85f-dsp": None, "@icebreaker": None}
#: the designs: benchmarks/silicon.py's, the QOperator ResNet and FINN's networks
MODELS = {**SILICON_MODELS, "resnet-qop": "digits_resnet_qop.onnx",
          "finn-tfc-w1a1": "finn/tfc-w1a1.onnx", "finn-tfc-w2a2": "finn/tfc-w2a2.onnx",
          "finn-cnv-w1a1": "finn/cnv-w1a1.onnx", "finn-cnv-w2a2": "finn/cnv-w2a2.onnx",
          "mlperf-resnet8": "mlperf_tiny/resnet8_qdq.onnx",
          "mlperf-dscnn": "mlperf_tiny/dscnn_qdq.onnx",
          "mlperf-mobilenet": "mlperf_tiny/mobilenet_v1_025_qdq.onnx",
          "mlperf-autoencoder": "mlperf_tiny/autoencoder_qdq.onnx",
          **{f"mlperf-{m}-pc": f"mlperf_tiny/{f}_qdq_perchannel.onnx"
             for m, f in (("resnet8", "resnet8"), ("dscnn", "dscnn"),
                          ("mobilenet", "mobilenet_v1_025"), ("autoencoder", "autoencoder"))}}
#: the foldings a design is taken at (default: 1024 and 64 cycles per frame and the
#: ``ulx3s-85f`` search, compile's default); FINN's CNV
#: needs far more parallelism than any device holds at those; the MLPerf Tiny networks are
#: taken as compile folds them for the ULX3S-85F; FINN's TFC also as it folds them for the
#: iCEBreaker
MODEL_FOLDINGS = {"finn-cnv-w1a1": ("@t16k",), "finn-cnv-w2a2": ("@t16k", "@85f-ll"),
                  **{m: ("", "@t64", "@85f", "@icebreaker")
                     for m in ("finn-tfc-w1a1", "finn-tfc-w2a2")},
                  **{m: ("@85f", "@85f-ll") for m in ("mlperf-resnet8", "mlperf-dscnn",
                                                      "mlperf-mobilenet",
                                                      "mlperf-autoencoder")},
                  **{f"mlperf-{m}-pc": ("@85f",) for m in ("resnet8", "dscnn", "mobilenet",
                                                           "autoencoder")}}


@dataclass
class Item:
    """One thing to synthesize: a block (kind, parameters) or a whole design (Verilog)."""
    kind: str
    name: str
    params: object = None
    verilog: str = ""
    top: str = ""
    estimate: dict | None = None      # family → resources dict (designs)

    def source(self) -> tuple[str, str]:
        if self.verilog:
            return self.verilog, self.top
        top = f"{self.kind}_top"
        comp = block_spec(self.kind).component(self.params)
        return verilog.convert(comp, name=top, emit_src=False), top

    def estimated(self, family: str) -> dict:
        if self.estimate is not None:
            return self.estimate[family]
        return block_spec(self.kind).cost(self.params).resources(family).as_dict()


# ------------------------------------------------------------------------------ grids

def _test_grid(quick: bool) -> list[Item]:
    """The blocks of the tests' grids (imported from tests/)."""
    import test_dwc
    import test_gap
    import test_join_blocks as tj
    import test_mvau
    import test_pool
    import test_swg
    import test_swg_par
    import test_table_ops
    import test_thresholds
    import test_vvau

    def take(cfgs, k=3):
        return cfgs[:k] if quick else cfgs

    items = []
    for mod, kind in ((test_mvau, "mvau"), (test_vvau, "vvau"), (test_pool, "pool"),
                      (test_gap, "gap"), (test_swg, "swg")):
        items += [Item(kind, c.id, c.params) for c in take(mod.GRID)]
    items += [Item("swg_par", test_swg_par._pid(c), test_swg_par._params(c))
              for c in take(test_swg_par.PAR_GRID)]
    items += [Item("add", c.id, replace(c.params, elements=c.elems))
              for c in take(tj.ADD_GRID)]
    items += [Item("concat", c.id, replace(c.params, pixels=c.pixels))
              for c in take(tj.CAT_GRID, 4)]
    for a, b, pe, n in take(test_table_ops.CASES, 2):
        items.append(Item("lut", f"{a.name}-{b.name}-pe{pe}-{n}",
                          test_table_ops._params(a, b, pe, n, seed=n + pe)))
    for a, b, c, pe, px in take(test_thresholds.CASES, 2):
        items.append(Item("thresholds", f"{a.name}-{b.name}-c{c}-pe{pe}-px{px}",
                          test_thresholds._params(a, b, c, pe, px, seed=c + pe)))
    items += [Item("dwc", c.id, DWCParams(c.bits, c.i, c.o, c.frame))
              for c in take(test_dwc.GRID)]
    for w, d in take([(8, 2), (8, 16), (32, 5), (64, 64), (24, 300), (8, 1024)], 3):
        items.append(Item("fifo", f"w{w}-d{d}", FIFOParams(w, d, 16)))
    for w, n in take([(8, 2), (64, 3)], 1):
        items.append(Item("fork", f"w{w}-n{n}", ForkParams(w, n, 16)))
    return items + _frame_grid(quick)


def _frame_grid(quick: bool) -> list[Item]:
    """The elementwise operators' blocks: the tests' grids (``tests/blocks/test_frame_blocks.py``,
    ``tests/dataflow/test_argmax.py``) and realistic sizes (tens of channels, PE up to 16)."""
    import test_argmax
    import test_frame_blocks as tf

    def take(cfgs, k=2):
        return cfgs[:k] if quick else cfgs

    items = []
    for t, out, c, px, pe in take(tf.CHANMUL + [(UINT8, UINT8, 64, 16, 1),
                                                (INT8, UINT8, 32, 16, 8),
                                                (UINT8, INT8, 128, 4, 16)]):
        items.append(Item("chanmul", f"{t.name}-{out.name}-c{c}-px{px}-pe{pe}",
                          tf._chanmul(t, out, c, px, pe)))
    for t, c, px, pe in take(tf.BCAST + [(UINT8, 64, 16, 1), (INT8, 32, 49, 8),
                                         (UINT8, 256, 4, 16)]):
        items.append(Item("bcast", f"{t.name}-c{c}-px{px}-pe{pe}", BcastParams(t, c, px, pe)))
    for t, out, c, px, pe in take(tf.AFFINE + [(UINT8, UINT8, 64, 16, 1),
                                              (INT8, INT8, 32, 16, 8)]):
        items.append(Item("affine", f"{t.name}-{out.name}-c{c}-px{px}-pe{pe}",
                          tf._affine(t, out, c, px, pe)))
    for t, c, h, w, fh, fw, pe in take(tf.UPSAMPLE + [(UINT8, 16, 8, 8, 2, 2, 1),
                                                      (INT8, 32, 7, 7, 2, 2, 8),
                                                      (UINT8, 64, 4, 16, 2, 2, 16)]):
        items.append(Item("upsample", f"{t.name}-c{c}-{h}x{w}-x{fh}x{fw}-pe{pe}",
                          UpsampleParams(t, c, h, w, fh, fw, pe)))
    for t, c, pe, last in take(test_argmax.CASES + [(INT8, 1000, 8, False),
                                                     (UINT8, 100, 1, True)]):
        items.append(Item("argmax", f"{t.name}-c{c}-pe{pe}-{'last' if last else 'first'}",
                          ArgMaxParams(t, c, pe, last)))
    return items


def compile_design(name: str, tmp: Path):
    """(compile result, lowered dataflow graph) of design ``name`` (``model@t64``)."""
    base, _, fold = name.partition("@")
    target = FOLDINGS["@" + fold if fold else ""]
    comp = hwgen.compile(model_path(MODELS[base], tmp), tmp / name, target_cycles=target,
                         logic_lanes=lanes_of(fold), board=BOARDS.get("@" + fold))
    _, ig, folding = design_folder.load(comp.out_dir)
    return comp, lower(ig, folding)


def design_names(quick: bool) -> list[str]:
    bases = QUICK_DESIGNS if quick else tuple(MODELS)
    return [b + f for b in bases for f in MODEL_FOLDINGS.get(b, ("", "@t64", "@85f"))]


def matches(name: str, only: str) -> bool:
    """Whether ``name`` matches one of the comma-separated fnmatch patterns ``only``."""
    return any(fnmatch.fnmatchcase(name, pat.strip()) for pat in only.split(",") if pat.strip())


def _design_blocks(names: list[str]) -> list[Item]:
    """Every distinct block of the designs (by its Verilog)."""
    items, seen = [], set()
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            _, dfg = compile_design(name, Path(tmp))
            for b in dfg.blocks:
                it = Item(b.kind, f"{name}:{b.name}", b.params)
                text, _ = it.source()
                h = hashlib.sha256(text.encode()).hexdigest()
                if h not in seen:
                    seen.add(h)
                    items.append(it)
    return items


def block_items(quick: bool, only: str | None = None) -> list[Item]:
    """The test grids' blocks and the designs' (only the designs whose name matches the
    part of ``only`` before a ``:``, so a pattern naming one design's blocks compiles that
    design alone)."""
    names = design_names(quick)
    if only and all(":" in pat for pat in only.split(",")):
        names = [n for n in names if matches(n, ",".join(pat.split(":")[0]
                                                        for pat in only.split(",")))]
    return _test_grid(quick) + _design_blocks(names)


def design_items(quick: bool, only: str | None = None) -> list[Item]:
    items = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in design_names(quick):
            if only and not matches(name, only):
                continue
            comp, _ = compile_design(name, Path(tmp))
            est = comp.manifest["estimate"]["resources"]
            items.append(Item("design", name, verilog=comp.verilog.read_text(),
                              top=comp.manifest["top"], estimate=est))
    return items


# ------------------------------------------------------------------------------ running

def cached(text: str, top: str, family: str) -> SynthResult | None:
    """The stored synthesis result of ``text`` for ``family``, or None (never runs Yosys)."""
    assert family in SYNTH_COMMANDS
    return read_entry(cache_root() / f"yosys-{synth_key(text, top, family)}", SynthResult)


def measure(items: list[Item], families, timeout: float | None, say,
            cache_only: bool = False) -> list[dict]:
    rows = []
    for k, it in enumerate(items, 1):
        text, top = it.source()
        for fam in families:
            try:
                res = cached(text, top, fam) if cache_only else \
                    synthesize(text, top, fam, timeout=timeout)
            except HwgenError as e:
                say(f"[{k}/{len(items)}] {it.kind} {it.name} {fam}: {e}")
                continue
            if res is None:
                continue
            row = {"kind": it.kind, "name": it.name, "family": fam,
                   "estimate": it.estimated(fam),
                   "yosys": {"lut4": res.lut4, "ff": res.ff, "carry": res.carry,
                             "dsp": res.dsp, "bram": res.bram, "dram": res.dram},
                   "mem2reg": list(res.memories_to_registers),
                   "seconds": res.seconds, "cached": res.cached}
            rows.append(row)
            if not res.cached:
                say(f"[{k}/{len(items)}] {it.kind} {it.name} {fam}: {res.seconds:.1f} s")
    return rows


def _ratio(e: float, y: float) -> float:
    return (e + 1) / (y + 1)


def print_rows(rows: list[dict]) -> None:
    head = (f"{'kind':7} {'name':44} {'fam':5} " + " ".join(
        f"{k + ' est':>9} {k:>7}" for k in KEYS) + f" {'LUT r':>6} {'FF r':>6}")
    print(head)
    print("-" * len(head))
    for r in rows:
        e, y = r["estimate"], r["yosys"]
        flag = "" if all(e[k] == y[k] for k in ("dsp", "bram")) else "  <- tiles"
        print(f"{r['kind']:7} {r['name'][-44:]:44} {r['family']:5} " + " ".join(
            f"{e[k]:>9,} {y[k]:>7,}" for k in KEYS)
            + f" {_ratio(e['lut4'], y['lut4']):>6.2f} {_ratio(e['ff'], y['ff']):>6.2f}{flag}")


def summarize(rows: list[dict]) -> None:
    print()
    print(f"{'kind':7} {'fam':5} {'n':>4} {'LUT mean':>8} {'LUT min':>8} {'LUT max':>8} "
          f"{'FF mean':>8} {'FF min':>8} {'FF max':>8} {'DSP off':>7} {'BRAM off':>8}")
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        groups.setdefault((r["kind"], r["family"]), []).append(r)
    for (kind, fam), rs in sorted(groups.items()):
        lr = [_ratio(r["estimate"]["lut4"], r["yosys"]["lut4"]) for r in rs]
        fr = [_ratio(r["estimate"]["ff"], r["yosys"]["ff"]) for r in rs]
        dsp = sum(r["estimate"]["dsp"] != r["yosys"]["dsp"] for r in rs)
        bram = sum(r["estimate"]["bram"] != r["yosys"]["bram"] for r in rs)
        print(f"{kind:7} {fam:5} {len(rs):>4} {sum(lr) / len(lr):>8.2f} {min(lr):>8.2f} "
              f"{max(lr):>8.2f} {sum(fr) / len(fr):>8.2f} {min(fr):>8.2f} {max(fr):>8.2f} "
              f"{dsp:>7} {bram:>8}")


def print_mem2reg(rows: list[dict]) -> None:
    """The memories Yosys turned into registers ("Replacing memory ... with list of
    registers"), per item and family."""
    hits = [r for r in rows if r.get("mem2reg")]
    print(f"\nmemories made registers: {len(hits)} of {len(rows)} rows")
    for r in hits:
        print(f"  {r['kind']} {r['name']} {r['family']}: {', '.join(r['mem2reg'])}")


def block_fit(kind: str) -> dict:
    """The calibration table a block kind's estimate uses now (its module's
    ``RESOURCE_FIT``)."""
    mod = sys.modules[block_spec(kind).component.__module__]
    return getattr(mod, "RESOURCE_FIT", {})


#: weight of the prior (the current factors) against the blocks' relative errors
PRIOR = 0.05


def fit(items: list[Item], families, say) -> dict:
    """Per block kind and family, the factors of the structural parts (and a constant) that
    best fit Yosys's LUT4 and carry counts: non-negative least squares on relative errors,
    pulled towards the current factors (``RESOURCE_FIT``, 1 for a part it does not name)
    so that parts the blocks hardly exercise keep them. Blocks not in the synthesis cache
    are skipped. Prints the tables the block files hold."""
    from scipy.optimize import nnls

    out: dict = {}
    by_kind: dict[str, list] = {}
    for it in items:
        if it.params is None:
            continue
        text, top = it.source()
        cost = block_spec(it.kind).cost(it.params)
        for fam in families:
            res = cached(text, top, fam)
            if res is not None:
                by_kind.setdefault(it.kind, []).append((fam, cost.parts.get(fam, {}), res))
    for kind, rows in sorted(by_kind.items()):
        now = block_fit(kind)
        for fam in families:
            rs = [(parts, res) for f, parts, res in rows if f == fam]
            names = sorted({n for parts, _ in rs for n in parts})
            if not rs or not names:
                continue
            for key in ("lut4", "carry"):
                prior = [now.get(fam, {}).get(key, {}).get(n, 1.0) for n in names] + \
                    [now.get(fam, {}).get(key, {}).get("1", 0.0)]
                xa = np.array([[getattr(parts[n], key) if n in parts else 0.0 for n in names]
                               + [1.0] for parts, _ in rs])
                ya = np.array([float(getattr(res, key)) for _, res in rs])
                used = xa.any(axis=0)
                w = 1 / np.maximum(ya, 20)
                lam = np.sqrt(PRIOR * len(rs))
                k = int(used.sum())
                a = np.vstack([(xa * w[:, None])[:, used], lam * np.eye(k)])
                b = np.concatenate([ya * w, lam * np.array(prior)[used]])
                coef = np.array(prior, dtype=float)
                coef[used], _ = nnls(a, b)
                rat = (xa @ coef + 1) / (ya + 1)
                say(f"{kind} {fam} {key}: {len(rs)} blocks, estimate / Yosys "
                    f"{rat.min():.2f}..{rat.max():.2f}")
                out.setdefault(kind, {}).setdefault(fam, {})[key] = {
                    n: round(float(c), 3) for n, c, u in zip(names + ["1"], coef, used) if u}
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="a small grid and the small designs")
    what = ap.add_mutually_exclusive_group()
    what.add_argument("--blocks", action="store_true", help="blocks only")
    what.add_argument("--designs", action="store_true", help="whole designs only")
    what.add_argument("--grid", action="store_true",
                      help="the test grids' blocks only (not the designs' blocks)")
    ap.add_argument("--family", choices=("ecp5", "ice40", "both"), default="both")
    ap.add_argument("--kinds", help="comma-separated block kinds (blocks only)")
    ap.add_argument("--only", help="comma-separated name patterns (fnmatch), one of which "
                                    "the items must match")
    ap.add_argument("--json", metavar="OUT", help="write every row to this JSON file")
    ap.add_argument("--timeout", type=float, help="seconds per Yosys run")
    ap.add_argument("--cached", action="store_true",
                    help="only what is in the synthesis cache (never runs Yosys)")
    ap.add_argument("--fit", action="store_true",
                    help="print the calibration tables fitted to the cached blocks")
    args = ap.parse_args(argv)
    families = list(FAMILIES) if args.family == "both" else [args.family]

    def say(msg):
        print(f"  {msg}", file=sys.stderr, flush=True)

    t0 = time.perf_counter()
    items = []
    if args.grid:
        items += _test_grid(args.quick)
    elif not args.designs:
        items += block_items(args.quick, args.only)
    if args.kinds:
        items = [it for it in items if it.kind in set(args.kinds.split(","))]
    if not args.blocks and not args.grid:
        items += design_items(args.quick, args.only)
    if args.only:
        items = [it for it in items if matches(it.name, args.only)]
    say(f"{len(items)} items, {len(families)} families")
    if args.fit:
        print(json.dumps(fit(items, families, say), indent=1))
        return
    rows = measure(items, families, args.timeout, say, args.cached)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    print_rows(rows)
    summarize(rows)
    print_mem2reg(rows)
    print(f"\n{time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
