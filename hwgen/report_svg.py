"""The inline SVG drawings of the verification report (:mod:`hwgen.report`): histograms,
bars and the dataflow graph. Plain strings, every number formatted the same way each time,
so the same inputs give the same bytes; hover text is SVG ``<title>`` (no script)."""
from __future__ import annotations

from dataclasses import dataclass
from html import escape

#: the widest difference a histogram shows one bar for; beyond it, one bar each side
HIST_RANGE = 8
CHAR_W = 6.6       # px per character of the 11 px monospace text
BOX_W, GAP_X, GAP_Y = 360, 24, 30


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


def bar(fraction: float, width: int = 90, height: int = 12) -> str:
    """A horizontal bar filled to ``fraction`` (clipped to 1; full in a deeper blue: busy
    every cycle, which is what a balanced pipeline wants)."""
    f = max(0.0, min(1.0, fraction))
    return (f'<svg class="bar" width="{width}" height="{height}" viewBox="0 0 {width} '
            f'{height}" preserveAspectRatio="none"><rect class="track" x="0" y="0" '
            f'width="{width}" height="{height}"/>'
            f'<rect class="{"full" if f >= 1 else "fill"}" x="0" y="0" '
            f'width="{width * f:.1f}" height="{height}"/></svg>')


def strip(segments: list[tuple[str, int]], width: int = 720, height: int = 26) -> str:
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
    lines: list[str]          # text under the name (a plumbing node: its one label)
    inputs: list[str]         # streams read
    outputs: list[str]        # streams written
    busy: float               # cycles / interval: the box's shade
    tip: str = ""
    plumbing: bool = False    # a FIFO, fork or width converter: a small pill, no shade
    bottleneck: bool = False  # the block that sets the interval: outlined


def wrap(text: str, width: float) -> list[str]:
    """``text`` in lines of at most ``width`` px of the 11 px monospace text, broken after
    spaces, '_', '/' or '.' where it can be, else anywhere: nothing is cut off."""
    n = max(4, int(width / CHAR_W))
    out, rest = [], text
    while len(rest) > n:
        cut = max(rest.rfind(c, 0, n) for c in " _/.")
        cut = cut + 1 if cut >= n // 3 else n
        out.append(rest[:cut].rstrip())
        rest = rest[cut:].lstrip(" ")
    return out + ([rest] if rest or not out else [])


def _fill(busy: float) -> str:
    """One blue from pale (idle) to a medium shade (busy every cycle): how busy a block is,
    not a warning."""
    light = round(97 - 25 * max(0.0, min(1.0, busy)))
    return f"hsl(212,60%,{light}%)"


PILL_H, NAME_LH, INFO_LH = 24, 14, 13


def _size(n: Node) -> tuple[float, float, list[str], list[str]]:
    """(width, height, name lines, info lines) of a node's drawing."""
    if n.plumbing:
        label = " ".join(n.lines[:1]) or n.name
        return max(96.0, len(label) * CHAR_W + 20), PILL_H, [label], []
    name = wrap(n.name, BOX_W - 12)
    info = [ln for line in n.lines for ln in wrap(line, BOX_W - 12)]
    return BOX_W, 10 + NAME_LH * len(name) + INFO_LH * len(info) + 4, name, info


def graph(nodes: list[Node], source: str, sink: str, streams: dict[str, str]) -> str:
    """The dataflow graph: ``nodes`` in stream order, top to bottom by rank (longest path
    from the input ``source``), the blocks of one rank side by side; a run of plumbing
    blocks one after the other (FIFO, width converter, ...) shares one row, left to right,
    as small pills. Edges follow the streams to the output ``sink``; an edge skipping rows
    runs in a lane on the left. ``streams``: hover text per stream."""
    made: dict[str, str] = {}          # stream → the node writing it
    rank: dict[str, int] = {}
    for n in nodes:
        rank[n.name] = 1 + max((rank[made[s]] for s in n.inputs if s in made), default=0)
        for s in n.outputs:
            made[s] = n.name
    by_rank: dict[int, list[Node]] = {}
    for n in nodes:
        by_rank.setdefault(rank[n.name], []).append(n)
    rows: list[list[Node]] = []
    chain = False                      # the last row is a run of plumbing
    for r in sorted(by_rank):
        ns = by_rank[r]
        single = len(ns) == 1 and ns[0].plumbing and len(ns[0].inputs) == 1
        if single and chain and made.get(ns[0].inputs[0]) == rows[-1][-1].name:
            rows[-1].append(ns[0])
        else:
            rows.append(list(ns))
            chain = single
    row_of = {n.name: k + 1 for k, row in enumerate(rows) for n in row}
    last = len(rows) + 1
    edges = []          # (stream, from, to); -1 = the input terminal, "" = the output
    for n in nodes:
        for s in n.inputs:
            edges.append((s, made.get(s, -1), n.name))
    edges.append((sink, made.get(sink, -1), ""))
    row_of.update({-1: 0, "": last})
    skips = [e for e in edges if row_of[e[2]] - row_of[e[1]] > 1]
    left = 16 + 12 * len(skips)
    size = {n.name: _size(n) for n in nodes}
    size[-1] = size[""] = (90, 28, [], [])

    def row_w(row):
        return sum(size[n.name][0] for n in row) + GAP_X * (len(row) - 1)

    width = left + max([row_w(r) for r in rows] + [BOX_W]) + 16
    tops, y = [], 0.0
    for row in [[-1]] + [[n.name for n in r] for r in rows] + [[""]]:
        h = max(size[k][1] for k in row)
        tops.append((y, h))
        y += h + GAP_Y
    height = y - GAP_Y + 2
    pos = {}                           # key → (x, y) of its top left corner
    for k, row in enumerate([[-1]] + [[n.name for n in r] for r in rows] + [[""]]):
        ty, th = tops[k]
        x = left + (width - left - sum(size[n][0] for n in row)
                    - GAP_X * (len(row) - 1)) / 2
        for key in row:
            w, h = size[key][:2]
            pos[key] = (x, ty + (th - h) / 2)
            x += w + GAP_X
    out = [f'<svg class="graph" width="{width:.0f}" height="{height:.0f}" viewBox="0 0 '
           f'{width:.0f} {height:.0f}" role="img"><defs><marker id="arrow" viewBox="0 0 8 8" '
           f'refX="8" refY="4" markerWidth="7" markerHeight="7" orient="auto">'
           f'<path d="M0,0 L8,4 L0,8 z" class="head"/></marker></defs>']
    lane = 0
    for s, a, b in edges:
        (xa, ya), (xb, yb) = pos[a], pos[b]
        (wa, ha), (wb, _) = size[a][:2], size[b][:2]
        if row_of[a] == row_of[b]:              # along a row of plumbing
            x1, y1, x2 = xa + wa, ya + ha / 2, xb
            d = f"M{x1:.1f},{y1:.1f} L{x2:.1f},{y1:.1f}"
        else:
            x1, y1 = xa + wa / 2, ya + ha
            x2, y2 = xb + wb / 2, yb
            g = min(GAP_Y, y2 - y1) / 2
            if row_of[b] - row_of[a] > 1:
                lane += 1
                lx = left - 12 * lane
                d = (f"M{x1:.1f},{y1:.1f} C{x1:.1f},{y1 + g:.1f} {lx:.1f},{y1:.1f} "
                     f"{lx:.1f},{y1 + g:.1f} L{lx:.1f},{y2 - g:.1f} "
                     f"C{lx:.1f},{y2:.1f} {x2:.1f},{y2 - g:.1f} {x2:.1f},{y2:.1f}")
            else:
                d = (f"M{x1:.1f},{y1:.1f} C{x1:.1f},{y1 + g:.1f} {x2:.1f},"
                     f"{y2 - g:.1f} {x2:.1f},{y2:.1f}")
        out.append(f'<g><title>{_t(streams.get(s, s))}</title><path class="edge" d="{d}" '
                   f'marker-end="url(#arrow)"/></g>')
    for key, label in ((-1, "input"), ("", "output")):
        x, y = pos[key]
        out.append(f'<g><title>{_t(streams.get(source if key == -1 else sink, ""))}</title>'
                   f'<rect class="term" x="{x:.1f}" y="{y:.1f}" width="90" '
                   f'height="28" rx="14"/><text class="name" x="{x + 45:.1f}" '
                   f'y="{y + 18:.1f}" text-anchor="middle">{label}</text></g>')
    for n in nodes:
        x, y = pos[n.name]
        w, h, name, info = size[n.name]
        if n.plumbing:
            out.append(f'<g><title>{_t(n.tip or n.name)}</title><rect class="pipe" '
                       f'x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h}" rx="{h / 2}"/>'
                       f'<text class="pipe" x="{x + w / 2:.1f}" y="{y + h / 2 + 4:.1f}" '
                       f'text-anchor="middle">{_t(name[0])}</text></g>')
            continue
        cls = "box bottleneck" if n.bottleneck else "box"
        out.append(f'<g><title>{_t(n.tip or n.name)}</title><rect class="{cls}" x="{x:.1f}" '
                   f'y="{y:.1f}" width="{w}" height="{h}" rx="4" '
                   f'style="fill:{_fill(n.busy)}"/>')
        ty = y + 15
        for line in name:
            out.append(f'<text class="name" x="{x + 6:.1f}" y="{ty:.1f}">{_t(line)}</text>')
            ty += NAME_LH
        for line in info:
            out.append(f'<text class="info" x="{x + 6:.1f}" y="{ty + 1:.1f}">{_t(line)}</text>')
            ty += INFO_LH
        out.append("</g>")
    out.append("</svg>")
    return "".join(out)
