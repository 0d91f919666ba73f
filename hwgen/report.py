"""The verification report: one self-contained HTML page (inline CSS and SVG, no script,
nothing fetched) with verify's comparison table, each layer against onnxruntime, the cycle
budget and the dataflow graph. The same inputs give the same bytes: no time stamps, no
paths, every number formatted one way."""
from __future__ import annotations

from html import escape

from hwgen import design
from hwgen.dataflow.lower import DataflowGraph, lower
from hwgen.io import write_atomic
from hwgen.report_svg import Node, bar, graph, histogram, strip

CSS = """
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,sans-serif;color:#1d232b;margin:24px 32px;max-width:1400px}
@media (max-width:900px){body{margin:16px 12px}}
h1{font-size:22px;margin:0 0 4px;overflow-wrap:anywhere}h2{font-size:17px;margin:28px 0 8px;
border-bottom:1px solid #ccd3db;padding-bottom:3px}p.meta{color:#4a5562;margin:2px 0;
overflow-wrap:anywhere}
.wide{max-width:100%;overflow-x:auto}
table{border-collapse:collapse;margin:6px 0}td,th{border:1px solid #d5dbe2;padding:3px 7px;
text-align:left;vertical-align:middle;white-space:nowrap}th{background:#eef2f6}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}tr.sum td{font-weight:600;
background:#f6f8fa}tr.bn td{font-weight:600}
th{white-space:normal}td.w,th.w{white-space:normal;overflow-wrap:anywhere;min-width:10ch}
td .sub{display:block;color:#5b6672;font-size:12px;font-weight:400}
svg.bar{width:90px;height:12px;vertical-align:-1px}
@media (max-width:900px){td,th{padding:3px 5px}svg.bar{width:48px}}
td.w code{overflow-wrap:anywhere}
.badge{display:inline-block;padding:2px 10px;border-radius:10px;color:#fff;font-weight:700}
.pass{background:#2a7d3f}.fail{background:#b3261e}.note{color:#5b6672}
.same{color:#2a7d3f;font-weight:600}
.cards{display:flex;flex-wrap:wrap;gap:10px;margin:14px 0 4px}
.card{flex:1 1 200px;border:1px solid #d5dbe2;border-radius:6px;padding:8px 12px;
background:#f8fafc;min-width:0}.card .k{color:#4a5562;font-size:12px}
.card .v{font-size:19px;font-weight:650;overflow-wrap:anywhere}.card .d{color:#4a5562;
font-size:12px;overflow-wrap:anywhere}
code{font:12px ui-monospace,monospace}
svg text{font:11px ui-monospace,monospace;fill:#1d232b}svg text.name{font-weight:700}
svg .zero{fill:#2a7d3f}svg .off{fill:#d9822b}svg .axis{stroke:#7a8591}
svg text.tick{font-size:9px}svg .track{fill:#e7ebef}svg .fill{fill:#6f9bd1}
svg .full{fill:#2f5f98}svg .seg0{fill:#8fb3e0}svg .seg1{fill:#c3d6ef}
svg.strip{max-width:100%;height:auto}
svg .box{stroke:#7d8894;stroke-width:1}svg .box.bottleneck{stroke:#1f3b63;stroke-width:2.5}
svg .term{fill:#fff;stroke:#56606b}svg rect.pipe{fill:#f4f6f8;stroke:#b4bcc5;
stroke-dasharray:3 2}svg text.pipe{fill:#5b6672}
svg .edge{fill:none;stroke:#8a949e;stroke-width:1.2}svg .head{fill:#8a949e}
"""


def _t(s) -> str:
    return escape(str(s), quote=True)


def _pct(f: float | None, digits: int = 3) -> str:
    return "–" if f is None else f"{100 * f:.{digits}f} %"


def summary_rows(rep) -> list[tuple[str, str]]:
    """The comparison table of ``hwgen verify`` (label, value), as printed and reported."""
    rows = [
        ("samples", str(rep.samples)),
        ("simulator", rep.sim.simulator),
        ("RTL == golden", "yes, every sample" if rep.rtl_equals_golden
         else f"NO: {rep.golden_mismatched_samples} samples differ"),
    ]
    ref = rep.reference
    cut = " (hardware output)" if rep.host_tail is not None else ""
    rows += [
        (f"RTL vs {ref}{cut}: identical elements", f"{100 * rep.ort_identical_fraction:.3f} %"),
        (f"RTL vs {ref}{cut}: max difference", f"{rep.ort_max_step_diff} quantization steps"),
    ]
    if rep.top1_agreement is not None:
        rows.append((f"RTL vs {ref}{cut}: top-1 agreement",
                     f"{100 * rep.top1_agreement:.2f} %"))
    if (t := rep.host_tail) is not None:
        rows.append(("host tail", f"{', '.join(t.ops)} → '{t.output}' (on the host)"))
        rows.append((f"model output vs {ref}: max |difference|", f"{t.max_abs_diff:.3g}"))
        if t.top1_agreement is not None:
            rows.append((f"model output vs {ref}: top-1 agreement",
                         f"{100 * t.top1_agreement:.2f} %"))
    if rep.label_accuracy is not None:
        also = ("" if rep.reference_label_accuracy is None else
                f" ({ref} {100 * rep.reference_label_accuracy:.2f} %)")
        rows.append(("accuracy against the labels", f"{100 * rep.label_accuracy:.2f} %{also}"))
    if rep.float_top1_agreement is not None:
        rows.append(("RTL vs float model: top-1 agreement",
                     f"{100 * rep.float_top1_agreement:.2f} %"))
    if rep.sim.load_cycles:
        rows.append(("weight load (SPRAM, once after reset)", f"{rep.sim.load_cycles} cycles"))
    rows.append(("latency", f"{rep.sim.latency} cycles"))
    if rep.sim.interval is not None:
        rows.append(("interval", f"{rep.sim.interval:.1f} cycles/frame (estimate "
                                 f"{rep.estimate['cycles_per_frame']}, bottleneck "
                                 f"{rep.estimate['bottleneck']})"))
    return rows


def latency_path(dfg: DataflowGraph) -> tuple[int, list[tuple[str, int]]]:
    """The estimate's latency of one frame, split along its critical path: the cycles the
    input frame takes to arrive, then per block (input to output, in stream order) the cycles
    it adds between the last beat of its latest input and its own last beat. The parts sum
    to ``dfg.latency()``."""
    t = dfg.stream_times()
    writer = {s: b for b in dfg.blocks for s in b.outputs}
    path, s = [], dfg.out_stream
    while s in writer:
        b = writer[s]
        s_in = max(b.inputs, key=lambda i: t[i][1])
        path.append((b.name, t[s][1] - t[s_in][1]))
        s = s_in
    return t[s][1] + 1, path[::-1]


def _folding(entry: dict) -> str:
    f = entry.get("folding")
    if f:
        return " ".join(f"{k.upper()} {v}" for k, v in sorted(f.items()))
    if "depth" in entry:
        return f"depth {entry['depth']}"
    if "in_elements" in entry:
        return f"{entry['in_elements']}→{entry['out_elements']} per beat"
    if "n_outputs" in entry:
        return f"{entry['n_outputs']} outputs"
    return ""


def _res(entry: dict, family: str) -> dict:
    return entry["estimate"]["resources"][family]


def _table(head: list[str] | None, rows: list[list[str]], numeric: set[int] = frozenset(),
           cls: list[str] | None = None, wrap: set[int] = frozenset()) -> str:
    """A table in a box that scrolls sideways if the page is narrower than it; the
    ``wrap`` columns (names) break anywhere rather than widen it, ``numeric`` ones align
    right."""
    def c(i):
        return ' class="n"' if i in numeric else ' class="w"' if i in wrap else ""

    out = ['<div class="wide"><table>' + (
        "<tr>" + "".join(f"<th{c(i)}>{h}</th>" for i, h in enumerate(head)) + "</tr>"
        if head else "")]
    for k, r in enumerate(rows):
        rc = f' class="{cls[k]}"' if cls and cls[k] else ""
        out.append(f"<tr{rc}>" + "".join(f"<td{c(i)}>{v}</td>" for i, v in enumerate(r))
                   + "</tr>")
    out.append("</table></div>")
    return "\n".join(out)


def _comparison(rep) -> str:
    rows = [[_t(k), _t(v)] for k, v in summary_rows(rep)]
    if rep.trace is not None:
        rows.append(["trace (every stream vs golden)", _t(rep.trace.summary())])
    return "<h2>Comparison</h2>\n" + _table(None, rows, wrap={1})


def _layers(rep) -> str:
    lr = rep.layers
    if lr is None:
        return ""
    out = ["<h2>Layers against onnxruntime</h2>",
           "<p>Each layer output of the integer graph (the golden model's values, which the "
           "RTL equals at the output" + (" and on every stream traced" if rep.trace else "")
           + ") against onnxruntime's value of the ONNX tensor holding it, onnxruntime run "
           "on the model with those tensors added as graph outputs. Differences are "
           "hardware − onnxruntime in the tensor's quantization steps; the histograms' "
           "heights are on a square-root scale.</p>"]
    if lr.note:
        out.append(f'<p class="note">Not compared: {_t(lr.note)}.</p>')
        return "\n".join(out)
    rows = []
    for r in lr.layers:
        if r.note:
            rows.append([_t(r.layer), _t(r.onnx_tensor or "–"), "–", "–", "–",
                         f'<span class="note">{_t(r.note)}</span>'])
        else:
            same = set(r.diffs) <= {0}
            shown = (f'<span class="same">all {r.elements:,} elements identical</span>'
                     if same else histogram(r.diffs))
            rows.append([_t(r.layer), f"<code>{_t(r.onnx_tensor)}</code>", f"{r.elements:,}",
                         _pct(r.identical_fraction), str(r.max_step_diff), shown])
    out.append(_table(["layer", "ONNX tensor", "elements", "identical", "max |diff|",
                       "differences (steps)"], rows, {2, 3, 4}, wrap={0, 1}))
    return "\n".join(out)


def _budget(sim, dfg: DataflowGraph, manifest: dict, family: str) -> str:
    entries = {e["name"]: e for e in manifest["layers"]}
    interval = dfg.bottleneck.cost.cycles
    measured = (f"; measured in simulation: {sim.interval:.1f} cycles per frame"
                if sim.interval is not None else "")
    out = ["<h2>Cycle budget</h2>",
           f"<p>The interval (cycles per frame in steady state) is set by the slowest block, "
           f"<b>{_t(dfg.bottleneck.name)}</b>: {interval:,} cycles{measured}. A block is busy "
           f"for its cycles per frame ÷ the interval.</p>"]
    rows, cls = [], []
    for b in dfg.blocks:
        e, c = entries[b.name], b.cost.cycles
        r = _res(e, family)
        sub = (f'<span class="sub">layer {_t(b.layer)}</span>'
               if b.layer and b.layer != b.name else "")
        rows.append([_t(b.name) + sub, _t(b.kind), _t(_folding(e)), f"{c:,}",
                     f"{bar(c / interval)} {_pct(c / interval, 1)}", f"{r['lut4']:,}",
                     f"{r['ff']:,}", f"{r['dsp']:,}", f"{r['bram']:,}"])
        cls.append("bn" if b is dfg.bottleneck else "")
    tot = manifest["estimate"]["resources"][family]
    rows.append(["total", "", "", "", "", f"{tot['lut4']:,}", f"{tot['ff']:,}",
                 f"{tot['dsp']:,}", f"{tot['bram']:,}"])
    cls.append("sum")
    out.append(_table(["block", "kind", "folding", "cycles per frame", "busy",
                       f"LUT4 ({family})", "FF", "DSP", "BRAM"], rows,
                      {3, 5, 6, 7, 8}, cls, wrap={0, 2}))
    entry, path = latency_path(dfg)
    total = entry + sum(c for _, c in path)
    out.append(f"<h3>Latency of one frame: {total:,} cycles (estimate); measured "
               f"{sim.latency:,}</h3>")
    out.append("<p>Along the critical path, from the input's first beat to the output's "
               "last: the input frame arriving, then what each block adds after the last "
               "beat of its latest input.</p>")
    segs = [("input frame", entry)] + path
    out.append(strip(segs))
    rows = [[_t(n), f"{c:,}", _pct(c / total if total else None, 1)] for n, c in segs]
    rows.append(["total", f"{total:,}", "100.0 %"])
    out.append(_table(["part", "cycles", "share"], rows, {1, 2},
                      [""] * len(segs) + ["sum"], wrap={0}))
    return "\n".join(out)


#: the block kinds drawn as plumbing in the graph (small pills): they move data, not compute
PLUMBING = ("fifo", "dwc", "fork")


def _graph(dfg: DataflowGraph, manifest: dict, family: str) -> str:
    entries = {e["name"]: e for e in manifest["layers"]}
    interval = dfg.bottleneck.cost.cycles
    nodes = []
    for b in dfg.blocks:
        e, c = entries[b.name], b.cost.cycles
        r = _res(e, family)
        lines = [f"{b.kind} {_folding(e)}".strip(),
                 f"{c:,} cycles/frame, busy {100 * c / interval:.0f} %",
                 f"LUT4 {r['lut4']:,} FF {r['ff']:,} DSP {r['dsp']} BRAM {r['bram']}"]
        if b.layer and b.layer != b.name:
            lines.append(f"layer {b.layer}")
        tip = "\n".join([b.name] + lines + [f"latency {b.cost.latency:,} cycles"])
        if b is dfg.bottleneck:
            lines[1] += " (sets the interval)"
        plumbing = b.kind in PLUMBING
        if not plumbing:                # two facts a line: a wide, low box
            lines = [f"{lines[0]} · {lines[1]}", " · ".join(lines[2:])]
        nodes.append(Node(b.name, lines[:1] if plumbing else lines, list(b.inputs),
                          list(b.outputs), c / interval, tip, plumbing,
                          b is dfg.bottleneck))
    streams = {n: (f"stream {n}: {s['type']}, {s['elements_per_beat']} per beat, "
                   f"{s['elements_per_frame']} per frame, {s['bits']} bits")
               for n, s in manifest["streams"].items()}
    return ("<h2>Dataflow graph</h2>\n<p>Blocks in stream order, joined by their streams. "
            "A layer's box is shaded by how busy it is, from pale (idle) to blue (busy every "
            "cycle); the block that sets the interval has a dark outline. FIFOs, forks and "
            "width converters are the small dashed pills. Resources for "
            f"{_t(family)}; hover over a block or stream for its details.</p>\n"
            '<div class="wide graph-box">'
            + graph(nodes, dfg.in_stream, dfg.out_stream, streams)
            + "</div>")


def _target(m: dict) -> str:
    """The manifest's ``target`` in one line."""
    t = m["target"]
    where = t["board"]["name"] if t["board"] else t["device"]["name"]
    cap = t.get("capacity") or t["limit"]
    use = ", ".join(f"{t['use'][k]:,}/{cap[k]:,} {k}"
                    + (f" ({100 * t['use'][k] / t['limit'][k]:.0f} % of the budget)"
                       if t["limit"].get(k) else "")
                    for k in t["use"])
    fit = "fits" if t["fits"] else "does not fit"
    return (f"target: {where} at {100 * t['budget']:.0f} % budget, interval "
            f"{t['interval_cycles']:,} cycles, {fit}: {use} (folding: {t['folding']})")


def _card(key: str, value: str, detail: str = "") -> str:
    return (f'<div class="card"><div class="k">{_t(key)}</div><div class="v">{_t(value)}'
            f'</div><div class="d">{_t(detail)}</div></div>')


def _cards(m: dict, sim, rep=None) -> str:
    """The page's summary at its top: the outcome and accuracy (verify), throughput and
    latency at the target's clock, and the resources on the target."""
    out = []
    if rep is not None:
        n = rep.samples
        out.append(_card("result", "PASS" if rep.ok else "FAIL",
                         f"RTL equals the golden model bit for bit on all {n:,} samples"
                         if rep.rtl_equals_golden else
                         f"{rep.golden_mismatched_samples:,} of {n:,} samples differ from "
                         f"the golden model"))
        if rep.label_accuracy is not None:
            ref = ("" if rep.reference_label_accuracy is None else
                   f"; {rep.reference} {100 * rep.reference_label_accuracy:.2f} %")
            out.append(_card("accuracy against the labels", _pct(rep.label_accuracy, 2),
                             f"on {n:,} samples{ref}"))
        elif rep.top1_agreement is not None:
            out.append(_card(f"top-1 agreement with {rep.reference}",
                             _pct(rep.top1_agreement, 2),
                             f"on {n:,} samples (the input has no labels)"))
        else:
            out.append(_card(f"identical to {rep.reference}",
                             _pct(rep.ort_identical_fraction, 2),
                             f"of the output elements; max difference {rep.ort_max_step_diff} "
                             f"steps"))
    t, est = m["target"], m["estimate"]
    interval = sim.interval if sim.interval is not None else est["cycles_per_frame"]
    how = "measured" if sim.interval is not None else "estimated"
    clock = t.get("clock_mhz")
    where = t["board"]["name"] if t["board"] else t["device"]["name"]
    if clock:
        out.append(_card(f"throughput at {clock:g} MHz", f"{clock * 1e6 / interval:,.0f} "
                         f"frames/s", f"{interval:,.1f} cycles per frame ({how}; bottleneck "
                         f"{est['bottleneck']}); latency {sim.latency:,} cycles = "
                         f"{sim.latency / clock:,.2f} µs"))
    else:
        out.append(_card("interval", f"{interval:,.1f} cycles/frame",
                         f"{how}; latency {sim.latency:,} cycles"))
    cap = t.get("capacity") or t["limit"]
    use = " · ".join(f"{k} {t['use'][k]:,}/{cap[k]:,}"
                     + (f" ({100 * t['use'][k] / cap[k]:.0f} %)" if cap[k] else "")
                     for k in t["use"])
    out.append(_card(f"resources on {where}", "fits" if t["fits"] else "does not fit",
                     f"{use}; budget {100 * t['budget']:.0f} % of each"))
    return '<div class="cards">' + "".join(out) + "</div>"


def _page(what: str, m: dict, status: str, sections: list[str]) -> str:
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>hwgen {what}: {_t(m['model']['file'])}</title>",
        f"<style>{CSS}</style></head><body>",
        f"<h1>hwgen {what}: {_t(m['model']['file'])}{' ' + status if status else ''}</h1>",
        f'<p class="meta">model SHA-256 <code>{_t(m["model"]["sha256"])}</code>; top module '
        f"<code>{_t(m['top'])}</code>; hwgen {_t(m['hwgen'])}</p>",
        f'<p class="meta">{_t(_target(m))}</p>',
        *sections, "</body></html>", ""]
    return "\n".join(p for p in parts if p)


def render(rep) -> str:
    """The page for a :class:`hwgen.api.VerifyReport` made with ``layers=True``."""
    m, dfg = rep.compiled.manifest, rep.dfg
    family = m["target"]["device"]["family"]
    status = '<span class="badge pass">PASS</span>' if rep.ok else \
        '<span class="badge fail">FAIL</span>'
    return _page("verify", m, status, [
        _cards(m, rep.sim, rep), _comparison(rep), _layers(rep),
        _budget(rep.sim, dfg, m, family),
        _graph(dfg, m, family)])


def render_simulation(sim, manifest: dict, dfg: DataflowGraph) -> str:
    """The page for a :class:`hwgen.api.SimulationResult` of the design ``manifest``
    describes (``dfg``: its dataflow graph): the run, the cycle budget and the graph."""
    family = manifest["target"]["device"]["family"]
    est = manifest["estimate"]
    rows = [("samples", str(sim.outputs.shape[0])), ("simulator", sim.simulator),
            ("latency", f"{sim.latency} cycles")]
    if sim.interval is not None:
        rows.append(("interval", f"{sim.interval:.1f} cycles/frame (estimate "
                                 f"{est['cycles_per_frame']}, bottleneck {est['bottleneck']})"))
    table = "<h2>Simulation</h2>\n" + _table(None, [[_t(k), _t(v)] for k, v in rows])
    return _page("simulate", manifest, "", [_cards(manifest, sim), table,
                                            _budget(sim, dfg, manifest, family),
                                            _graph(dfg, manifest, family)])


def write(rep, path):
    """:func:`render` to ``path``, atomically (a temporary file renamed into place)."""
    write_atomic(path, render(rep).encode("utf-8"))


def write_simulation(sim, design_dir, path):
    """:func:`render_simulation` of the design in ``design_dir`` to ``path``, atomically."""
    manifest, ig, folding = design.load(design_dir)
    write_atomic(path, render_simulation(sim, manifest, lower(ig, folding)).encode("utf-8"))
