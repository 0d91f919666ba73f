"""``hwgen inspect``: what of a model maps to hardware, and what it would cost.

For every ONNX node: whether it maps and why not, the layer and blocks it becomes, their
folding, estimated cycles per frame, multipliers and memory bits; then every problem (not
only the first), the totals and the devices that could hold the design, each device
judged at its own folding (the shortest interval that fits it, as ``hwgen compile
--device`` would fold; with ``--fold``/``--target-cycles`` at that folding). Nothing is
generated, so this is fast also for ImageNet-scale models.

``inspect`` is the import walk of ``hwgen compile`` (:mod:`dataflow.importer`) with the
policy "collect every problem and go on". A quantized model (QDQ, QOperator or QONNX: one
definition, :func:`dataflow.operators.is_float_model`) is inspected as ``hwgen compile``
imports it. A
float model is inspected as if quantized to 8 bits (uint8 activations, int8 symmetric
per-tensor weights; see :mod:`dataflow.importer`): the estimates are those of its quantized
counterpart. After an unsupported node whose output shape is known, the inspection goes on
with a stand-in for that output, so later problems and layers are reported too.

``inspect(model)`` returns an :class:`InspectReport`; :func:`format_text` and
:func:`to_json` render it. Problems in the model are part of the report (the command exits
0); a file that cannot be read, a bad folding file or option is an error (exit 2).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from hwgen import __version__
from hwgen.api import fold_design, read_folding
from hwgen.boards.boards import BOARDS
from hwgen.boards.devices import DEVICES, Device, fmt_bits
from hwgen.boards.fold import (
    ENGINE_METHOD,
    FitReport,
    SearchMemo,
    Target,
    fold_for_device,
    report,
    resolve_target,
)
from hwgen.dataflow.estimate import Estimate, estimate
from hwgen.dataflow.importer import (
    COLLECT,
    COLLECT_ASSUMED,
    ImportReport,
    Problem,
    load_model,
    walk,
)
from hwgen.dataflow.lower import DEFAULT_TARGET_CYCLES, Folding
from hwgen.dataflow.operators import is_float_model
from hwgen.errors import HwgenError
from hwgen.rtl_templates.cost import Cost
from hwgen.rtl_templates.resources import FAMILIES, Resources, add_muls, total

JSON_FORMAT = "hwgen-inspect"
JSON_VERSION = 1


@dataclass
class NodeRow:
    node: str
    op_type: str
    op: str
    status: str                       # mapped | folded | constant | no hardware | host
    detail: str = ""                  # | unsupported | blocked | unused
    layer: str = ""
    blocked_by: str = ""
    after: str = ""
    blocks: list[str] = field(default_factory=list)
    folding: Folding | None = None
    cost: Cost | None = None          # of the layer (mapped rows)

    def status_text(self) -> str:
        if self.status == "folded":
            return f"folded into {self.layer}"
        if self.status == "blocked":
            return f"blocked by {self.blocked_by}"
        if self.detail and self.status in ("unsupported", "no hardware", "host"):
            return f"{self.status}: {self.detail}"
        return self.status


@dataclass
class InspectReport:
    model: str
    assumed: bool                      # a float model, read as quantized to 8 bits
    target_cycles: int | None          # None: folded for the device (``fit``)
    rows: list[NodeRow]
    problems: list[Problem]
    notes: list[str]
    estimate: Estimate
    seconds: float = 0.0
    fit: FitReport | None = None
    #: each device of ``boards.devices.DEVICES`` at its own folding (searched for it, or
    #: the one ``fold``/``target_cycles`` give): how the design would sit there
    device_fits: list[FitReport] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def __repr__(self) -> str:
        t = self.estimate.totals
        fit = "" if self.fit is None else f", target={self.fit.target.label!r}, " \
                                          f"fits={self.fit.fits}"
        return (f"InspectReport(model={self.model!r}, ok={self.ok}, "
                f"problems={len(self.problems)}, nodes={self.counts()}, "
                f"cycles_per_frame={t.get('cycles_per_frame')}, "
                f"latency_cycles={t.get('latency_cycles')}{fit})")

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.rows:
            out[r.status] = out.get(r.status, 0) + 1
        return out

    def multiplier_widths(self) -> dict[tuple[int, int], int]:
        """Operand widths → number of multipliers, over every block."""
        out: dict[tuple[int, int], int] = {}
        for b in self.estimate.blocks:
            for w in b.cost.multiplier_widths:
                w = tuple(w)
                out[w] = out.get(w, 0) + 1
        return out

    def multiplies(self) -> dict:
        """Every multiplication of every block (:class:`Mul` → count)."""
        return add_muls(*(b.cost.multiplies for b in self.estimate.blocks))

    def devices(self) -> list[tuple[Device, list[str]]]:
        """Every supported device and why the design would not fit it at its own folding
        (within the budget; empty: it fits)."""
        return [(f.device, f.shortfalls()) for f in self.device_fits]


def inspect(model, fold=None, target_cycles: int | None = None, board: str | None = None,
            device: str | None = None, budget: float | None = None,
            logic_lanes: str | bool | None = None) -> InspectReport:
    """Inspect the ONNX model at ``model`` (see the module documentation). The folding is
    ``hwgen compile``'s: searched for the device of ``board``/``device`` at ``budget``
    (neither: the smallest board the model fits, ``report.fit.choice`` saying why), unless
    ``fold`` or ``target_cycles`` is given; a model that fits no folding is reported at its
    cheapest one, not refused. ``report.device_fits``: every device at its own folding."""
    t0 = time.perf_counter()
    model = Path(model)
    if target_cycles is not None and target_cycles < 1:
        raise HwgenError(f"target cycles must be at least 1 (got {target_cycles})")
    dev_target = resolve_target(board, device, budget, logic_lanes)
    search = fold is None and target_cycles is None
    target = None if search else (DEFAULT_TARGET_CYCLES if target_cycles is None
                                  else target_cycles)
    folding = read_folding(fold) if isinstance(fold, (str, Path)) else dict(fold or {})
    try:
        graph = load_model(model, upgrade=True)
        upgrade_note = None
    except HwgenError as e:   # an old model onnx.version_converter refuses: inspect it as is
        try:
            graph = load_model(model, upgrade=False)
        except HwgenError:
            raise e from None
        upgrade_note = f"not brought forward to a newer opset ({e}); its nodes are inspected " \
                       f"at their own operator versions"
    assumed = is_float_model(graph)
    ig, rep = walk(graph, COLLECT_ASSUMED if assumed else COLLECT)
    notes = ([upgrade_note] if upgrade_note else []) + list(rep.notes)
    names = {op.name for op in ig.ops}
    unknown = sorted(set(folding) - names)
    if unknown:
        notes.append(f"folding ignored for {', '.join(unknown)}: not a mapped layer")
    fixed = None if search else {k: v for k, v in folding.items() if k in names}
    memo = SearchMemo()     # the board's search and the devices' share their work
    dfg, fit = fold_design(ig, model.name, fold, fixed, target, dev_target, partial=True,
                           sources=rep.stand_ins, memo=memo)
    device_fits = _device_fits(ig, dfg, fit, search, memo, rep.stand_ins)
    est = estimate(ig, dfg=dfg)
    rows, problems = _rows(rep, est)
    pos = {r.node: k for k, r in enumerate(rows)}
    problems.sort(key=lambda p: -1 if p.node is None else pos.get(p.node, len(rows)))
    if any(r.after for r in rows):
        notes.append("nodes marked * come after an unsupported node: they were analysed with a "
                     "stand-in for its output")
    return InspectReport(model.name, assumed, target, rows, problems, notes, est,
                         time.perf_counter() - t0, fit, device_fits)


def _device_fits(ig, dfg, fit: FitReport, search: bool, memo: SearchMemo,
                 sources) -> list[FitReport]:
    """Every device at the budget and logic lanes of ``fit``'s target: searched for each
    (``search``; the searches share ``memo`` with the one that made ``fit``), or the one
    folding ``dfg`` reported on each."""
    t = fit.target
    out = []
    for d in DEVICES:
        dt = Target(d, None, t.budget, t.logic_lanes)
        if search:
            out.append(fold_for_device(ig, dt, partial=True, sources=sources, refuse=False,
                                       memo=memo, graph=False)[2])
        else:
            out.append(report(dfg, ig, dt, fit.method, memo=memo))
    return out


def _rows(rep: ImportReport, est: Estimate) -> tuple[list[NodeRow], list[Problem]]:
    problems = list(rep.problems)
    rows = []
    for st in rep.nodes:
        r = NodeRow(st.label, st.op_type, st.op, st.status, st.detail, st.layer, st.blocked_by,
                    st.after)
        e = est.ops.get(st.layer) if st.layer else None
        if e is not None and st.status == "mapped":
            if e.error:
                why = e.error.removeprefix(f"layer {st.layer}: ")
                r.status, r.detail = "unsupported", why
                problems.append(Problem(st.label, st.op, why))
            elif e.blocked_by:
                r.status, r.blocked_by = "blocked", e.blocked_by
            else:
                r.after = r.after or e.after
                r.blocks = [b.kind for b in e.blocks]
                r.folding = e.folding
                r.cost = e.cost
        elif e is not None and st.status == "folded" and (e.error or e.blocked_by):
            r.status, r.blocked_by = "blocked", st.layer
        elif e is not None and st.status == "folded":
            r.after = r.after or e.after
        rows.append(r)
    return rows, problems


# ------------------------------------------------------------------------------ text

_COLS = ("node", "op", "blocks", "PE/SIMD", "cycles", "mults", "MAC use", "memory bits",
         "LUT/FF/DSP/BRAM", "status")
#: the family ``hwgen inspect``'s table gives resources for, unless told
DEFAULT_FAMILY = "ecp5"


def _num(v: float) -> str:
    """A compact count: 950, 9.5k, 95k, 1.2M."""
    v = int(round(v))
    if v < 1000:
        return str(v)
    if v < 10_000:
        return f"{v / 1000:.1f}k"
    if v < 1_000_000:
        return f"{v // 1000}k"
    return f"{v / 1e6:.1f}M"


def _res_cell(res: Resources) -> str:
    """LUT4 (ECP5: carry cells counted as two), FF, DSP and block RAM tiles."""
    return "/".join(_num(v) for v in (res.lut4 + 2 * res.carry, res.ff, res.dsp, res.bram))


def _pct(x: float | None) -> str:
    return "" if x is None else f"{100 * x:.0f} %"


def _cells(r: NodeRow, family: str, util: dict[str, float]) -> list[str]:
    pe = ""
    if r.folding is not None:
        pe = (f"{r.folding.pe}/{r.folding.simd}" if "mvau" in r.blocks or "vvau" in r.blocks
              else f"{r.folding.pe}/-")
        if r.folding.lut_lanes:     # products built of logic cells
            pe += f"+L{r.folding.lut_lanes}"
        if r.folding.rom_logic:     # weights in logic cells
            pe += "r"
    c = r.cost
    res = _res_cell(c.resources(family).rounded()) if c else ""
    return [r.node, r.op, "+".join(r.blocks), pe,
            f"{c.cycles:,}" if c else "", f"{c.multipliers:,}" if c else "",
            _pct(util.get(r.layer)) if c else "", f"{c.memory_bits:,}" if c else "", res,
            r.status_text() + ("*" if r.after else "")]


def _clip(s: str, n: int) -> str:
    return s if len(s) <= n else "…" + s[-(n - 1):]


def format_text(rep: InspectReport, family: str = DEFAULT_FAMILY) -> str:
    """The report as text; the table's resources are of FPGA ``family``."""
    if family not in FAMILIES:
        raise HwgenError(f"unknown FPGA family {family!r} (choose {', '.join(FAMILIES)})")
    lines = [f"hwgen inspect: {rep.model}"]
    if rep.assumed:
        lines.append("float model: estimates assume 8-bit quantization (uint8 activations, "
                     "int8 symmetric per-tensor weights)")
    else:
        lines.append("quantized model: as 'hwgen compile' imports it")
    if rep.fit is not None and rep.fit.choice:
        lines.append(f"board: {rep.fit.target.label} ({rep.fit.choice})")
    if rep.target_cycles is None and rep.fit is not None:
        lines.append(f"folding: searched for {rep.fit.target.describe()}: the shortest "
                     f"interval that fits, no layer faster than it needs")
    else:
        lines.append(f"folding: smallest PE/SIMD reaching {rep.target_cycles} cycles per "
                     f"frame (the fastest where none does), unless fixed by --fold")
    lines.append("")
    table = []
    run: list[NodeRow] = []
    util = rep.fit.layer_utilisation() if rep.fit is not None else {}

    def flush():
        if len(run) >= 4:
            ops = sorted({r.op_type for r in run})
            table.append([f"({len(run)} nodes)", ", ".join(ops), "", "", "", "", "", "", "",
                          f"constant ({run[0].node} … {run[-1].node})"])
        else:
            table.extend(_cells(r, family, util) for r in run)
        run.clear()

    for r in rep.rows:
        if r.status == "constant":
            run.append(r)
            continue
        flush()
        table.append(_cells(r, family, util))
    flush()
    plumb = rep.estimate.plumbing
    if plumb:
        table.append(["(plumbing)", f"{len(plumb)} blocks", "fifo/fork/dwc", "",
                      f"{max(b.cost.cycles for b in plumb):,}",
                      f"{sum(b.cost.multipliers for b in plumb):,}", "",
                      f"{sum(b.cost.memory_bits for b in plumb):,}",
                      _res_cell(total(b.cost.resources(family) for b in plumb).rounded()),
                      "FIFOs, forks, width converters"])
    head = [*_COLS[:8], f"{family} {_COLS[8]}", _COLS[9]]
    widths = [min(max([len(head[k])] + [len(row[k]) for row in table]), 40)
              for k in range(len(head) - 1)]
    right = {4, 5, 6, 7, 8}

    def fmt(row):
        cells = []
        for k, w in enumerate(widths):
            v = _clip(row[k], w)
            cells.append(v.rjust(w) if k in right else v.ljust(w))
        return "  ".join(cells + [row[-1]]).rstrip()

    lines.append(fmt(head))
    lines.extend(fmt(row) for row in table)
    lines.append("")
    if rep.problems:
        lines.append(f"problems ({len(rep.problems)}):")
        lines.extend(f"  {p}" for p in rep.problems)
    else:
        lines.append("problems: none, every node maps")
    if rep.notes:
        lines.append("notes:")
        lines.extend(f"  {n}" for n in rep.notes)
    lines.append("")
    counts = rep.counts()
    order = ("mapped", "folded", "constant", "no hardware", "host", "unsupported", "blocked",
             "unused")
    lines.append(f"nodes: {len(rep.rows)} (" + ", ".join(f"{counts[k]} {k}" for k in order
                                                        if counts.get(k)) + ")")
    t = rep.estimate.totals
    part = "" if rep.estimate.complete else " (of the layers that map)"
    lines.append(f"estimate{part}: {t['cycles_per_frame']:,} cycles per frame (bottleneck "
                 f"{t['bottleneck']}), latency "
                 + (f"{t['latency_cycles']:,} cycles" if t["latency_cycles"] is not None
                    else "n/a (the graph does not map end to end)"))
    lines.append(f"  {t['multipliers']:,} multipliers, {t['memory_bits']:,} memory bits "
                 f"({fmt_bits(t['memory_bits'])}), {t['registers']:,} registers")
    for fam in FAMILIES:
        r = t["resources"][fam]
        extra = (f" + {r['carry']:,} CCU2C, {r['dram']:,} LUT RAM (16×4)" if fam == "ecp5"
                 else f" ({r['carry']:,} SB_CARRY)")
        lines.append(f"  {fam}: {r['lut4']:,} LUT4{extra}, {r['ff']:,} FF, {r['dsp']:,} DSP, "
                     f"{r['bram']:,} block RAM")
    if rep.fit is not None:
        f = rep.fit
        bound = (f"{f.bound:,} cycles ({f.macs:,} MACs ÷ {f.device.multiplier_lanes} "
                 f"multipliers)" if f.bound else "n/a (no hard multipliers)")
        ratio = f" ({f.interval / f.bound:.2f}x the bound)" if f.bound else ""
        lines.append(f"target {f.target.describe()}: interval {f.interval:,} cycles per frame "
                     f"(bottleneck {f.bottleneck}), device bound {bound}{ratio}, floor "
                     f"{f.floor:,}")
        if f.mac_utilisation is not None:
            whose = "the engine's shared" if f.shared_lanes else "the layers'"
            lines.append(f"  MAC utilisation {_pct(f.mac_utilisation)}: {whose} "
                         f"{f.lanes:,} dot-product multipliers busy that share of the "
                         f"interval")
        lines.append("  " + ("fits: " if f.fits else "DOES NOT FIT: ")
                     + ", ".join(f.use_text(k) for k in f.use))
    lines.extend(_device_lines(rep))
    lines.append(f"inspected in {rep.seconds:.2f} s")
    return "\n".join(lines)


def _device_lines(rep: InspectReport) -> list[str]:
    """The devices that could hold the design, each at its own folding, and why not."""
    fits = rep.device_fits
    if not fits:
        return []
    held = [f.device.name for f in fits if f.fits]
    budget = f"{100 * fits[0].target.budget:g} %"
    lines = ["devices that could hold it: " + (", ".join(held) if held else "none"),
             f"  each folded for itself (its shortest interval within the {budget} budget):"
             if rep.target_cycles is None else
             f"  at this folding (--fold/--target-cycles), within the {budget} budget:"]
    boards = {d.id: [b.id for b in BOARDS if b.device_id == d.id] for d in DEVICES}
    width = max(len(f.device.name) for f in fits)
    for f in fits:
        on = boards.get(f.device.id)
        on = f" ({', '.join(on)})" if on else ""
        if f.fits:
            what = f"{f.interval:,} cycles per frame"
            if f.method == ENGINE_METHOD:
                what += " on the layer-sequential engine"
        else:
            what = (("does not fit at any folding: " if rep.target_cycles is None
                     else "does not fit: ") + "; ".join(f.shortfalls()))
        lines.append(f"  {f.device.name:<{width}}  {what}{on}")
    return lines


# ------------------------------------------------------------------------------ JSON

def _round4(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def _cost_json(c) -> dict | None:
    if c is None:
        return None
    return {"cycles": c.cycles, "latency": c.latency, "multipliers": c.multipliers,
            "memory_bits": c.memory_bits, "registers": c.registers,
            "resources": {f: c.resources(f).rounded().as_dict() for f in FAMILIES}}


def to_json(rep: InspectReport) -> dict:
    est = rep.estimate
    nodes = []
    for r in rep.rows:
        nodes.append({
            "node": r.node, "op_type": r.op_type, "op": r.op, "status": r.status,
            "detail": r.detail or None, "layer": r.layer or None,
            "blocked_by": r.blocked_by or None, "after_unsupported": r.after or None,
            "blocks": r.blocks,
            "folding": r.folding.as_dict() if r.folding else None,
            "estimate": _cost_json(r.cost),
        })
    layers = []
    for name, e in est.ops.items():
        layers.append({
            "name": name, "op": e.kind,
            "folding": e.folding.as_dict() if e.folding else None,
            "blocks": [{"name": b.name, "block": b.kind, "estimate": b.cost.as_dict()}
                       for b in e.blocks],
            "estimate": _cost_json(e.cost), "error": e.error or None,
            "mac_utilisation": (None if rep.fit is None else
                                _round4(rep.fit.layer_utilisation().get(name))),
            "blocked_by": e.blocked_by or None,
        })
    plumb = est.plumbing
    counts = rep.counts()
    totals = dict(est.totals)
    totals.update({
        "complete": est.complete, "nodes": len(rep.rows), "by_status": counts,
        "supported": sum(counts.get(k, 0) for k in ("mapped", "folded", "constant",
                                                     "no hardware")),
        "unsupported": counts.get("unsupported", 0), "blocked": counts.get("blocked", 0),
        "problems": len(rep.problems),
    })
    return {
        "format": JSON_FORMAT, "version": JSON_VERSION, "hwgen": __version__,
        "model": rep.model,
        "mode": "assumed-8bit" if rep.assumed else "quantized",
        "target_cycles": rep.target_cycles,
        "target": rep.fit.as_dict() if rep.fit is not None else None,
        "nodes": nodes,
        "layers": layers,
        "plumbing": {"blocks": len(plumb),
                     "memory_bits": sum(b.cost.memory_bits for b in plumb),
                     "registers": sum(b.cost.registers for b in plumb)},
        "problems": [{"node": p.node, "op": p.op or None, "reason": p.reason,
                      "message": str(p)} for p in rep.problems],
        "notes": rep.notes,
        "totals": totals,
        "devices": [{"name": f.device.name, "id": f.device.id, "part": f.device.part,
                     "memory_bits": f.device.memory_bits, "fits": f.fits,
                     "interval_cycles": f.interval, "folding": f.method,
                     "use": dict(f.use), "limit": dict(f.limit),
                     "shortfalls": f.shortfalls()} for f in rep.device_fits],
        "seconds": round(rep.seconds, 3),
    }
