"""The inline SVG drawings of the verification report (:mod:`hwgen.report`): histograms,
bars and the dataflow graph. Plain strings, every number formatted the same way each time,
so the same inputs give the same bytes; hover text is SVG ``<title>`` (no script)."""
from __future__ import annotations

from dataclasses import dataclass
from html import escape

#: the widest difference a histogram shows one bar for; beyond it, one bar each side
HIST_RANGE = 8
CHAR_W = 6.6       # px per character of the 11 px monospace text
BOX_W, BOX_H, GAP_X, GAP_Y = 250, 74, 28, 44


def _t(s) -> str:
    return escape(str(s), quote=True)


def _clip(s: str, width: float) -> str:
    n = max(4, int(width / CHAR_W))
    return s if len(s) <= n else s[:n - 1] + "…"


def histogram(diffs: dict[int, int]) -> str:
    """Bars of how many elements differ by each number of steps (−R … R, with the rest
    gathered at the ends), heights on a square-root scale so rare differences show."""
    r = min(HIST_RANGE, max([1] + [abs(d) for d in diffs]))
    bins = [(f"{d:+d}" if d else "0", diffs.get(d, 0)) for d in range(-r, r + 1)]
    low = sum(c for d, c in diffs.items() if d < -r)
    high = sum(c for d, c in diffs.items() if d > r)
    if low or high:
        bins = [(f"<{-r}", low)] + bins + [(f">{r}", high)]
    top = max([c for _, c in bins] + [1])
    bw, h, pad = 16, 46, 14
    w = bw * len(bins)
    out = [f'<svg class="hist" width="{w}" height="{h + pad}" viewBox="0 0 {w} {h + pad}" '
           f'role="img">']
    for k, (label, c) in enumerate(bins):
        bh = 0 if not c else max(1.0, h * (c / top) ** 0.5)
        cls = "zero" if label == "0" else "off"
        out.append(f'<g><title>{_t(label)} steps: {c} elements</title>'
                   f'<rect class="{cls}" x="{k * bw + 1}" y="{h - bh:.1f}" width="{bw - 2}" '
                   f'height="{bh:.1f}"/></g>')
        if label in ("0", bins[0][0], bins[-1][0]):
            out.append(f'<text class="tick" x="{k * bw + bw / 2:.1f}" y="{h + pad - 3}" '
                       f'text-anchor="middle">{_t(label)}</text>')
    out.append(f'<line class="axis" x1="0" y1="{h}" x2="{w}" y2="{h}"/></svg>')
    return "".join(out)


def bar(fraction: float, width: int = 160, height: int = 12) -> str:
    """A horizontal bar filled to ``fraction`` (clipped to 1)."""
    f = max(0.0, min(1.0, fraction))
    return (f'<svg class="bar" width="{width}" height="{height}" viewBox="0 0 {width} '
            f'{height}"><rect class="track" x="0" y="0" width="{width}" height="{height}"/>'
            f'<rect class="{"full" if f >= 1 else "fill"}" x="0" y="0" '
            f'width="{width * f:.1f}" height="{height}"/></svg>')


def strip(segments: list[tuple[str, int]], width: int = 900, height: int = 26) -> str:
    """One bar split into ``segments`` (label, cycles) in proportion, labelled where they
    are wide enough: the latency breakdown."""
    total = sum(c for _, c in segments) or 1
    out = [f'<svg class="strip" width="{width}" height="{height}" viewBox="0 0 {width} '
           f'{height}" role="img">']
    x = 0.0
    for k, (label, c) in enumerate(segments):
        w = width * c / total
        out.append(f'<g><title>{_t(label)}: {c} cycles</title><rect class="seg{k % 2}" '
                   f'x="{x:.1f}" y="0" width="{w:.1f}" height="{height}"/></g>')
        if w > 6 * CHAR_W:
            out.append(f'<text class="seglabel" x="{x + 3:.1f}" y="{height / 2 + 4:.1f}">'
                       f'{_t(_clip(label, w - 6))}</text>')
        x += w
    out.append("</svg>")
    return "".join(out)


@dataclass
class Node:
    name: str
    lines: list[str]          # text under the name
    inputs: list[str]         # streams read
    outputs: list[str]        # streams written
    busy: float               # cycles / interval: the box's colour
    tip: str = ""


def _fill(busy: float) -> str:
    """Blue when idle, through yellow, to red for the block that sets the interval."""
    hue = round(210 * (1 - max(0.0, min(1.0, busy))))
    return f"hsl({hue},75%,86%)"


def graph(nodes: list[Node], source: str, sink: str, streams: dict[str, str]) -> str:
    """The dataflow graph: ``nodes`` in stream order, a row per rank (longest path from the
    input ``source``), edges along the streams to the output ``sink``; an edge skipping rows
    runs in a lane on the left. ``streams``: hover text per stream."""
    made: dict[str, str] = {}          # stream → the node writing it
    rank: dict[str, int] = {}
    for n in nodes:
        rank[n.name] = 1 + max((rank[made[s]] for s in n.inputs if s in made), default=0)
        for s in n.outputs:
            made[s] = n.name
    rows: dict[int, list[Node]] = {}
    for n in nodes:
        rows.setdefault(rank[n.name], []).append(n)
    last = max(rows, default=0) + 1
    edges = []          # (stream, from, to); "" = the input/output terminal
    for n in nodes:
        for s in n.inputs:
            edges.append((s, made.get(s, -1), n.name))
    edges.append((sink, made.get(sink, -1), ""))
    rank_of = {-1: 0, "": last, **rank}
    skips = [e for e in edges if rank_of[e[2]] - rank_of[e[1]] > 1]
    left = 16 + 12 * len(skips)
    per_row = max([len(r) for r in rows.values()] + [1])
    width = left + per_row * (BOX_W + GAP_X)
    height = (last + 1) * (BOX_H + GAP_Y)
    pos = {}
    for r, row in rows.items():
        x0 = left + (width - left - len(row) * (BOX_W + GAP_X) + GAP_X) / 2
        for k, n in enumerate(row):
            pos[n.name] = (x0 + k * (BOX_W + GAP_X), r * (BOX_H + GAP_Y))
    mid = left + (width - left) / 2 - BOX_W / 2
    pos[-1] = (mid, 0)
    pos[""] = (mid, last * (BOX_H + GAP_Y))
    out = [f'<svg class="graph" width="{width:.0f}" height="{height:.0f}" viewBox="0 0 '
           f'{width:.0f} {height:.0f}" role="img"><defs><marker id="arrow" viewBox="0 0 8 8" '
           f'refX="8" refY="4" markerWidth="7" markerHeight="7" orient="auto">'
           f'<path d="M0,0 L8,4 L0,8 z" class="head"/></marker></defs>']
    lane = 0
    for s, a, b in edges:
        (xa, ya), (xb, yb) = pos[a], pos[b]
        x1, y1 = xa + BOX_W / 2, ya + (BOX_H if a != -1 else 28)
        x2, y2 = xb + BOX_W / 2, yb
        if rank_of[b] - rank_of[a] > 1:
            lane += 1
            lx = left - 12 * lane
            d = (f"M{x1:.1f},{y1:.1f} C{x1:.1f},{y1 + GAP_Y / 2:.1f} {lx:.1f},{y1:.1f} "
                 f"{lx:.1f},{y1 + GAP_Y / 2:.1f} L{lx:.1f},{y2 - GAP_Y / 2:.1f} "
                 f"C{lx:.1f},{y2:.1f} {x2:.1f},{y2 - GAP_Y / 2:.1f} {x2:.1f},{y2:.1f}")
        else:
            d = (f"M{x1:.1f},{y1:.1f} C{x1:.1f},{y1 + GAP_Y / 2:.1f} {x2:.1f},"
                 f"{y2 - GAP_Y / 2:.1f} {x2:.1f},{y2:.1f}")
        out.append(f'<g><title>{_t(streams.get(s, s))}</title><path class="edge" d="{d}" '
                   f'marker-end="url(#arrow)"/></g>')
    for key, label in ((-1, "input"), ("", "output")):
        x, y = pos[key]
        out.append(f'<g><title>{_t(streams.get(source if key == -1 else sink, ""))}</title>'
                   f'<rect class="term" x="{x + BOX_W / 2 - 45:.1f}" y="{y:.1f}" width="90" '
                   f'height="28" rx="14"/><text class="name" x="{x + BOX_W / 2:.1f}" '
                   f'y="{y + 18:.1f}" text-anchor="middle">{label}</text></g>')
    for n in nodes:
        x, y = pos[n.name]
        out.append(f'<g><title>{_t(n.tip or n.name)}</title><rect class="box" x="{x:.1f}" '
                   f'y="{y:.1f}" width="{BOX_W}" height="{BOX_H}" rx="4" '
                   f'style="fill:{_fill(n.busy)}"/>'
                   f'<text class="name" x="{x + 6:.1f}" y="{y + 15:.1f}">'
                   f'{_t(_clip(n.name, BOX_W - 12))}</text>')
        for k, line in enumerate(n.lines[:4]):
            out.append(f'<text class="info" x="{x + 6:.1f}" y="{y + 30 + 13 * k:.1f}">'
                       f'{_t(_clip(line, BOX_W - 12))}</text>')
        out.append("</g>")
    out.append("</svg>")
    return "".join(out)
