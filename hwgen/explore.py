"""``hwgen explore``: a design-space sweep, one full ``hwgen build`` per point, on Dask.

The points are the product of the folding choices (each ``--budget`` value: the device
search at that share of the device; each ``--target-cycles`` value: every layer folded to
at most that many cycles per frame), the product choices (``--lanes``: ``auto`` as
``hwgen build`` does by default, ``logic`` as ``--logic-lanes``, ``dsp`` as ``--dsp-only``),
nextpnr's placement seeds (``--seed``) and routers (``--router``). Each point is one task
on a Dask cluster (``--scheduler ADDRESS``, or a local cluster of ``--workers`` processes on
127.0.0.1, by default one per core): the model travels to the workers once, each task
builds into a temporary folder of its worker and sends back its row and its output files.

Into the output folder, after every finished point:

- ``explore.json``: the sweep (model digest, board, clock) and one row per finished point:
  its options, ``ok`` with the resources synthesis used (LUT4, FF, DSP, BRAM), the cycles
  per frame, the clock reached (fmax) and the inferences per second at fmax (what the
  folding and the placement give together), or ``failed`` with the reason (a design that
  does not fit, fails to route, misses a tool: a row, not the end of the sweep);
- ``explore.html``: the table and the Pareto plots (inferences/s against each resource;
  the points no other point beats in every resource and in throughput at once are marked);
- ``best/``: the build folder (bitstream, ``build.json``, the design) of the best point: the
  most inferences/s at fmax among the points that meet the clock (among all points if none
  does), ties to the fewest LUT4, FF and DSP, then to the earlier point.

Running the same command again resumes: finished points (``ok`` or ``failed``) are kept and
only the others run. A worker that dies has its point run again elsewhere by the scheduler
(a task that raises is retried, :data:`hwgen.cluster.RETRIES`); a point whose workers keep
dying is a failed row. Ctrl-C cancels the cluster's tasks; what finished stays in the folder.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from html import escape
from pathlib import Path

from hwgen import build, cluster
from hwgen.boards.boards import board_by_name
from hwgen.boards.fold import DEFAULT_BUDGET
from hwgen.errors import HwgenError
from hwgen.io import write_atomic

RESULTS = "explore.json"
PAGE = "explore.html"
BEST = "best"
#: ``--lanes`` values → ``logic_lanes`` of :func:`hwgen.api.compile`
LANES = {"auto": None, "logic": "all", "dsp": "dsp"}
#: the resources a row reports and the plots show
KINDS = ("lut4", "ff", "dsp", "bram")


@dataclass(frozen=True)
class Point:
    """One build of the sweep: a folding (``budget`` or ``target_cycles``), the products
    (``lanes``, a key of :data:`LANES`), nextpnr's ``seed`` and ``router``."""
    budget: float | None = None
    target_cycles: int | None = None
    lanes: str = "auto"
    seed: int = 1
    router: str = build.ROUTERS[0]

    @property
    def key(self) -> str:
        fold = (f"t{self.target_cycles}" if self.target_cycles is not None
                else f"b{self.budget if self.budget is not None else DEFAULT_BUDGET:g}")
        return f"{fold}-{self.lanes}-s{self.seed}-{self.router}"

    def build_options(self) -> dict:
        """The options of :func:`hwgen.build.build` for this point."""
        return dict(seed=self.seed, router=self.router, budget=self.budget,
                    target_cycles=self.target_cycles, logic_lanes=LANES[self.lanes])


def grid(budgets=(), target_cycles=(), lanes=("auto",), seeds=(1,), routers=(build.ROUTERS[0],)
         ) -> list[Point]:
    """The sweep's points, in a fixed order (foldings, then lanes, seeds, routers); without
    ``budgets`` and ``target_cycles``, the default budget's device search."""
    for b in budgets:
        if not 0 < b <= 1:
            raise HwgenError(f"--budget must be a fraction in (0, 1] (got {b:g})")
    for t in target_cycles:
        if t < 1:
            raise HwgenError(f"--target-cycles must be at least 1 (got {t})")
    for ln in lanes:
        if ln not in LANES:
            raise HwgenError(f"--lanes must be among {', '.join(LANES)} (got {ln!r})")
    for r in routers:
        if r not in build.ROUTERS:
            raise HwgenError(f"--router must be among {', '.join(build.ROUTERS)} (got {r!r})")
    folds = ([dict(budget=float(b)) for b in budgets]
             + [dict(target_cycles=int(t)) for t in target_cycles]) or [dict()]
    points, seen = [], set()
    for f, ln, s, r in itertools.product(folds, lanes, seeds, routers):
        p = Point(lanes=ln, seed=int(s), router=r, **f)
        if p.key not in seen:
            seen.add(p.key)
            points.append(p)
    return points


# --------------------------------------------------------------------------- on a worker

def build_point(model: bytes, model_name: str, board: str, point: Point,
                freq_mhz: float | None = None) -> dict:
    """One point: ``hwgen build`` of the model (its bytes) in a temporary folder → its row
    (``status`` ``ok`` or ``failed`` with ``reason``) and, if built, ``files``: the build
    folder's files (name → bytes). Runs on a Dask worker."""
    t0 = time.perf_counter()
    row = {"point": point.key, "options": asdict(point)}
    tmp = Path(tempfile.mkdtemp(prefix="hwgen-explore-"))
    try:
        src = tmp / model_name
        src.write_bytes(model)
        try:
            # one core per point: a Dask worker process cannot start a pool of its own
            res = build.build(src, tmp / "out", board, freq_mhz, jobs=1,
                              **point.build_options())
        except HwgenError as e:
            return row | {"status": "failed", "reason": str(e),
                          "seconds": round(time.perf_counter() - t0, 1)}
        except (RuntimeError, OSError) as e:     # a tool that crashed or could not run
            first = (str(e).strip().splitlines() or [""])[0]
            return row | {"status": "failed", "reason": f"{type(e).__name__}: {first}",
                          "seconds": round(time.perf_counter() - t0, 1)}
        row |= row_of(res.report)
        row["seconds"] = round(time.perf_counter() - t0, 1)
        row["files"] = {f.name: f.read_bytes() for f in sorted(res.out_dir.iterdir())
                        if f.is_file()}
        return row
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def row_of(report: dict) -> dict:
    """The row of a finished build, from its ``build.json``."""
    res, perf, clock = report["resources"], report["performance"], report["clock"]
    fmax = clock.get("achieved_mhz")
    cycles = int(perf["cycles_per_frame"])
    row = {"status": "ok", "reason": None, "cycles_per_frame": cycles,
           "latency_cycles": int(perf["latency_cycles"]), "clock_mhz": clock["clock_mhz"],
           "fmax_mhz": None if fmax is None else round(float(fmax), 2),
           "timing_met": bool(clock["timing_met"]),
           "inferences_per_second": 0.0 if not fmax else round(fmax * 1e6 / cycles, 1)}
    for k in KINDS:
        v = res.get(k) or {}
        row[k] = int(v.get("synthesized", 0))
        row[f"{k}_available"] = v.get("available")
    return row


# --------------------------------------------------------------------------- on the client

@dataclass
class ExploreResult:
    out_dir: Path
    rows: list[dict]                 # in the grid's order, finished points only
    best: str | None                 # the best point's key
    ran: int = 0                     # points built by this call (the others were resumed)
    seconds: float = 0.0
    workers: int = 0
    pending: list[str] = field(default_factory=list)   # points not finished

    @property
    def json_path(self) -> Path:
        return self.out_dir / RESULTS

    @property
    def page(self) -> Path:
        return self.out_dir / PAGE


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _score(row: dict, order: int) -> tuple:
    return (row["timing_met"], row["inferences_per_second"],
            *(-row[k] for k in ("lut4", "ff", "dsp")), -order)


def best_point(rows: list[dict], order: dict[str, int]) -> str | None:
    """The best finished point's key (see the module notes)."""
    ok = [r for r in rows if r["status"] == "ok"]
    if not ok:
        return None
    return max(ok, key=lambda r: _score(r, order.get(r["point"], len(order))))["point"]


def pareto(rows: list[dict]) -> set[str]:
    """The ``ok`` points no other point matches or beats in inferences/s and in every one of
    LUT4, FF and DSP while beating it in one."""
    ok = [r for r in rows if r["status"] == "ok"]

    def dominates(a, b):
        ge = a["inferences_per_second"] >= b["inferences_per_second"] and all(
            a[k] <= b[k] for k in ("lut4", "ff", "dsp"))
        gt = a["inferences_per_second"] > b["inferences_per_second"] or any(
            a[k] < b[k] for k in ("lut4", "ff", "dsp"))
        return ge and gt
    return {r["point"] for r in ok if not any(dominates(o, r) for o in ok)}


def _load(path: Path, head: dict) -> dict[str, dict]:
    """The finished rows of an earlier run of the same sweep in ``path`` (none if absent)."""
    if not path.is_file():
        return {}
    try:
        doc = json.loads(path.read_text())
        rows = doc["points"]
    except (OSError, ValueError, KeyError, TypeError):
        raise HwgenError(f"{path}: not a results file of hwgen explore (remove it to start "
                         f"over)") from None
    for k in ("model_sha256", "board", "freq_mhz"):
        if doc.get(k) != head[k]:
            raise HwgenError(f"{path.parent}: holds a sweep of another {k.split('_')[0]} "
                             f"({doc.get(k)}); give another -o folder or remove it")
    return {r["point"]: r for r in rows if r.get("status") in ("ok", "failed")}


def finished(out_dir) -> set[str]:
    """The keys of the points finished in ``out_dir`` (none without a readable results
    file)."""
    try:
        doc = json.loads((Path(out_dir) / RESULTS).read_text())
        return {r["point"] for r in doc["points"] if r.get("status") in ("ok", "failed")}
    except (OSError, ValueError, KeyError, TypeError):
        return set()


def _write(out_dir: Path, head: dict, rows: list[dict], best: str | None, points: list[Point]):
    order = {p.key: k for k, p in enumerate(points)}
    rows = sorted(rows, key=lambda r: (order.get(r["point"], len(order)), r["point"]))
    front = pareto(rows)
    doc = head | {"best": best, "pareto": sorted(front, key=lambda k: order.get(k, 0)),
                  "points": rows}
    write_atomic(out_dir / RESULTS, (json.dumps(doc, indent=1) + "\n").encode())
    write_atomic(out_dir / PAGE, page(doc, front).encode())


def _keep_best(out_dir: Path, files: dict[str, bytes]):
    """``files`` become the folder ``best/`` (replacing the one there in one step)."""
    tmp = Path(tempfile.mkdtemp(prefix=".best-", dir=out_dir))
    try:
        for name, data in files.items():
            (tmp / name).write_bytes(data)
        os.chmod(tmp, 0o777 & ~_umask())
        old = out_dir / f".old-best-{uuid.uuid4().hex[:8]}"
        if (out_dir / BEST).exists():
            (out_dir / BEST).rename(old)
        tmp.rename(out_dir / BEST)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


def explore(model, board: str, out_dir, points: list[Point], *, freq_mhz: float | None = None,
            scheduler=None, workers: int | None = None, point_fn: Callable = build_point,
            on_row: Callable | None = None) -> ExploreResult:
    """Build every point of the sweep (:func:`grid`) of ``model`` for ``board`` on a Dask
    cluster (``scheduler``: an address or a ``distributed.Client``; None: a local cluster of
    ``workers`` processes), resuming from ``out_dir``'s results; ``point_fn`` builds one
    point (:func:`build_point`'s signature); ``on_row(row)`` is told of each finished
    point."""
    model = Path(model)
    b = board_by_name(board)
    if not model.is_file():
        raise HwgenError(f"{model}: no such file")
    if not points:
        raise HwgenError("the sweep has no points")
    cluster.distributed()
    data = model.read_bytes()
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise HwgenError(f"{out_dir}: exists and is not a folder")
    head = {"format": "hwgen-explore", "version": 1, "model": model.name,
            "model_sha256": _digest(data), "board": b.id,
            "freq_mhz": None if freq_mhz is None else float(freq_mhz)}
    done = _load(out_dir / RESULTS, head)
    order = {p.key: k for k, p in enumerate(points)}
    rows = [done[p.key] for p in points if p.key in done]
    todo = [p for p in points if p.key not in done]
    best = best_point(rows, order)
    t0 = time.perf_counter()
    result = ExploreResult(out_dir, rows, best)
    out_dir.mkdir(parents=True, exist_ok=True)
    if best is not None and not (out_dir / BEST).is_dir():
        best = None      # the folder was removed: the next best point to finish fills it
    if not todo:
        _write(out_dir, head, rows, best_point(rows, order), points)
        result.best = best_point(rows, order)
        return result
    d = cluster.distributed()
    with cluster.connect(scheduler, workers) as client:
        result.workers = cluster.cluster_workers(client)
        tag = uuid.uuid4().hex[:8]
        sent = cluster.send(client, data, f"hwgen-model-{tag}")
        futures = {client.submit(point_fn, sent, model.name, b.id, p, freq_mhz,
                                 key=f"hwgen-explore-{p.key}-{tag}", retries=cluster.RETRIES,
                                 pure=False): p for p in todo}
        finished = set()
        try:
            for fut in d.as_completed(list(futures)):
                if fut in finished:   # a result lost with its worker and computed again
                    continue
                p = futures[fut]
                try:
                    row = fut.result()
                except d.KilledWorker:
                    row = {"point": p.key, "options": asdict(p), "status": "failed",
                           "reason": "the Dask workers building it died again and again "
                                     "(out of memory?)"}
                except Exception as e:    # the point function raised, retries spent
                    first = (str(e).strip().splitlines() or [""])[0]
                    row = {"point": p.key, "options": asdict(p), "status": "failed",
                           "reason": f"{type(e).__name__}: {first}"}
                finished.add(fut)
                fut.release()         # the row is here: the cluster may drop the result
                files = row.pop("files", None)
                rows.append(row)
                now = best_point(rows, order)
                if now == row["point"] and files is not None:
                    _keep_best(out_dir, files)
                    best = now
                _write(out_dir, head, rows, best, points)
                result.ran += 1
                if on_row is not None:
                    on_row(row)
        finally:
            rest = [f for f in futures if f not in finished]
            if rest:       # an interrupt or an error: stop the cluster's work on the sweep
                client.cancel(rest, force=True)
                result.pending = [futures[f].key for f in rest]
            sent.release()
    result.rows = sorted(rows, key=lambda r: order[r["point"]])
    result.best = best
    result.seconds = round(time.perf_counter() - t0, 1)
    return result


# ------------------------------------------------------------------------------ reporting

COLUMNS = (("point", "point", "{}"), ("status", "status", "{}"), ("cycles", "cycles_per_frame",
           "{:,}"), ("fmax MHz", "fmax_mhz", "{:.1f}"), ("inf/s", "inferences_per_second",
           "{:,.0f}"), ("LUT4", "lut4", "{:,}"), ("FF", "ff", "{:,}"), ("DSP", "dsp", "{}"),
           ("BRAM", "bram", "{}"), ("met", "timing_met", "{}"), ("s", "seconds", "{:.0f}"))


def _cell(row: dict, key: str, fmt: str) -> str:
    v = row.get(key)
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    return fmt.format(v)


def table(rows: list[dict], best: str | None = None, front: set[str] | None = None) -> str:
    """The rows as a text table (``*`` the best point, ``p`` the Pareto points), failed
    rows with their reason below."""
    front = pareto(rows) if front is None else front
    body = [[h for h, _, _ in COLUMNS] + [""]]
    for r in rows:
        mark = ("*" if r["point"] == best else "") + ("p" if r["point"] in front else "")
        body.append([_cell(r, k, f) for _, k, f in COLUMNS] + [mark])
    widths = [max(len(line[c]) for line in body) for c in range(len(body[0]))]
    lines = ["  ".join(c.ljust(w) if k < 2 else c.rjust(w)
                       for k, (c, w) in enumerate(zip(line, widths))).rstrip()
             for line in body]
    lines += [f"{r['point']}: {r['reason']}" for r in rows if r["status"] == "failed"]
    return "\n".join(lines)


def _scatter(rows: list[dict], kind: str, front: set[str], best: str | None) -> str:
    """Inferences/s (up) against ``kind`` used (right), one circle per ``ok`` point."""
    ok = [r for r in rows if r["status"] == "ok"]
    w, h, left, bottom, top, right = 310, 220, 56, 34, 12, 22
    xs = [r[kind] for r in ok] or [0]
    ys = [r["inferences_per_second"] for r in ok] or [0]
    avail = max([r.get(f"{kind}_available") or 0 for r in ok] + [0])
    xmax = max(max(xs), 1) * 1.08
    if avail and max(xs) > 0.5 * avail:
        xmax = max(xmax, avail)
    ymax = max(max(ys), 1) * 1.08

    def px(x):
        return left + (w - left - right) * x / xmax

    def py(y):
        return h - bottom - (h - bottom - top) * y / ymax
    out = [f'<svg class="pareto" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img">',
           f'<line class="axis" x1="{left}" y1="{h - bottom}" x2="{w - right}" '
           f'y2="{h - bottom}"/><line class="axis" x1="{left}" y1="{top}" x2="{left}" '
           f'y2="{h - bottom}"/>']
    for k in range(5):
        xv, yv = xmax * k / 4, ymax * k / 4
        out.append(f'<text class="tick" x="{px(xv):.1f}" y="{h - bottom + 13}" '
                   f'text-anchor="middle">{xv:,.0f}</text>')
        out.append(f'<text class="tick" x="{left - 4}" y="{py(yv) + 4:.1f}" '
                   f'text-anchor="end">{yv:,.0f}</text>')
    if avail and avail <= xmax:
        out.append(f'<line class="cap" x1="{px(avail):.1f}" y1="{top}" x2="{px(avail):.1f}" '
                   f'y2="{h - bottom}"><title>{kind} available: {avail:,}</title></line>')
    fr = sorted((r for r in ok if r["point"] in front), key=lambda r: (r[kind], r["point"]))
    stair, ybest = [], -1.0
    for r in fr:        # the front in this resource alone: each point above all left of it
        if r["inferences_per_second"] > ybest:
            ybest = r["inferences_per_second"]
            stair.append(f"{px(r[kind]):.1f},{py(ybest):.1f}")
    if len(stair) > 1:
        out.append(f'<polyline class="front" points="{" ".join(stair)}"/>')
    for r in sorted(ok, key=lambda r: r["point"]):
        cls = "best" if r["point"] == best else ("front" if r["point"] in front else "other")
        tip = (f"{r['point']}: {r['inferences_per_second']:,.0f} inf/s, {kind} {r[kind]:,}, "
               f"fmax {r['fmax_mhz']} MHz, {r['cycles_per_frame']} cycles/frame")
        out.append(f'<g><title>{escape(tip)}</title><circle class="{cls}" '
                   f'cx="{px(r[kind]):.1f}" cy="{py(r["inferences_per_second"]):.1f}" '
                   f'r="{5 if cls == "best" else 4}"/></g>')
    out.append(f'<text class="label" x="{(left + w - right) / 2:.1f}" y="{h - 4}" '
               f'text-anchor="middle">{escape(kind.upper())} used</text></svg>')
    return "".join(out)


_CSS = """body{font:14px system-ui,sans-serif;margin:24px;color:#222}
table{border-collapse:collapse;font:12px ui-monospace,monospace}
td,th{padding:3px 8px;border-bottom:1px solid #ddd;text-align:right}
td:first-child,th:first-child,td:nth-child(2){text-align:left}
tr.failed td{color:#a33}tr.best td{font-weight:bold}
.plots{display:flex;gap:16px;flex-wrap:wrap}
svg .axis{stroke:#888}svg .tick,svg .label{font:10px ui-monospace,monospace;fill:#555}
svg .cap{stroke:#c66;stroke-dasharray:3 3}svg polyline.front{fill:none;stroke:#3a6ea5}
svg circle.other{fill:none;stroke:#999}svg circle.front{fill:#3a6ea5}
svg circle.best{fill:#d08a1f;stroke:#222}"""


def page(doc: dict, front: set[str]) -> str:
    """explore.html: the Pareto plots and the table of every finished point."""
    rows, best = doc["points"], doc.get("best")
    ok = sum(r["status"] == "ok" for r in rows)
    head = [escape(h) for h, _, _ in COLUMNS] + ["reason"]
    trs = []
    for r in rows:
        cls = "failed" if r["status"] == "failed" else ("best" if r["point"] == best else "")
        cells = [escape(_cell(r, k, f)) for _, k, f in COLUMNS] + [escape(r.get("reason") or "")]
        mark = " ★" if r["point"] == best else (" ◆" if r["point"] in front else "")
        cells[0] += mark
        trs.append(f'<tr class="{cls}">' + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    plots = "".join(_scatter(rows, k, front, best) for k in ("lut4", "ff", "dsp"))
    return (f"<!doctype html><html><head><meta charset=\"utf-8\"><title>hwgen explore: "
            f"{escape(doc['model'])} on {escape(doc['board'])}</title><style>{_CSS}</style>"
            f"</head><body><h1>{escape(doc['model'])} on {escape(doc['board'])}</h1>"
            f"<p>{len(rows)} points finished, {ok} built, {len(rows) - ok} failed. "
            f"Inferences per second at the clock each placement reached (fmax) against "
            f"the resources synthesis used: ★ the best point (kept in <code>best/</code>), "
            f"◆ the Pareto points (none better in throughput and in every resource); the "
            f"dashed line is the device's capacity.</p><div class=\"plots\">{plots}</div>"
            f"<table><tr>{''.join(f'<th>{h}</th>' for h in head)}</tr>{''.join(trs)}"
            f"</table></body></html>\n")
