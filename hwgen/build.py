"""``hwgen build``: a model, or a folder ``hwgen compile`` wrote, to a bitstream for a board.

Steps, each shown on the progress line and timed in ``build.json``:

1. **compile** (a model): folded for the board's device as ``hwgen compile --board`` does;
   a compiled folder is taken as it is (its manifest names the board it was folded for; a
   different ``--board`` is refused). Without ``--board`` (or with ``--board auto``) the
   board is the smallest with a USB-serial UART the model fits, or a compiled folder's own
   (:func:`choose_board`).
2. **board top** (``boards/board_top.py``): the board's oscillator through a PLL to the
   target clock, a reset synchronizer, the status LED and the UART host link
   (``rtl_templates/host_link.py``, its frame protocol documented there) around the core;
   the pin and clock constraints (``boards/constraints.py``, an LPF for ECP5, a PCF for
   iCE40).
3. **synthesis** (Yosys), **place and route** (nextpnr at the target clock, ``--seed``;
   with ``--seeds K`` up to K seeds in turn until one meets the clock, the fastest kept
   otherwise: the seeds tried and their clocks are in ``build.json``) and **packing**
   (``ecppack`` / ``icepack``), through ``boards/synth.py``: results are cached by
   content, so building the same design again takes seconds.

The output folder holds the compiled design (``manifest.json``, ``<top>.v``,
``design.npz``), the board top's Verilog (``<top>_board.v``, the core's included), the
constraints, the bitstream (``<top>.bit`` for ECP5, ``<top>.bin`` for iCE40), the tools'
records of the run that made it (``yosys.log``, ``nextpnr.log``, nextpnr's timing report
``timing_report.json``) and ``build.json`` (its ``files`` names each by role): the
resources synthesis and place and route used next to the estimate and the device's
capacity, the target and achieved clock, whether timing is met, inferences per second and
latency at the clock the bitstream runs, tool versions, the seed and the wall time of each
step. It is written atomically, as ``compile``'s folder is: on an error or Ctrl-C
nothing of it is left.

A design that does not fit the device is refused (exit 2) with the numbers; a design that
misses the clock is a warning naming the achieved clock, an error with ``strict_timing``.
"""
from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from hwgen import api
from hwgen.boards.board_top import (
    DEFAULT_BAUD,
    MAX_BAUD,
    board_clock,
    board_top_verilog,
    uart_timing,
)
from hwgen.boards.boards import AUTO_BOARD, Board, board_by_name
from hwgen.boards.constraints import constraints_file
from hwgen.boards.synth import (
    BITSTREAM,
    PnrResult,
    SynthResult,
    place_and_route,
    shortfalls,
    synthesize,
    tool_version,
)
from hwgen.errors import HwgenError
from hwgen.io import BUILD_JSON, DESIGN_NPZ, MANIFEST, atomic_dir, check_output_dir
from hwgen.progress import QUIET, Progress

#: the clock a board's bitstream runs at unless told (``--freq``), per device family
DEFAULT_FREQ_MHZ = {"ecp5": 125.0, "ice40": 45.0}


class TimingNotMet(HwgenError):
    """The placed design misses the target clock (``strict_timing``)."""


@dataclass
class BuildResult:
    out_dir: Path
    bitstream: Path
    report: dict                         # build.json
    warnings: list[str] = field(default_factory=list)
    board_choice: str = ""               # --board auto: why this board


def default_freq(board: Board) -> float:
    return DEFAULT_FREQ_MHZ[board.device.family]


def _compiled(source: Path, board: Board, tmp: Path, progress: Progress, **opts
              ) -> tuple[dict, str, dict[str, float]]:
    """The manifest and Verilog of ``source`` (a compiled folder, or a model compiled into
    ``tmp`` for ``board``) and the compile's wall time."""
    steps: dict[str, float] = {}
    if source.is_dir():
        try:
            manifest = json.loads((source / MANIFEST).read_text())
        except (OSError, ValueError):
            raise HwgenError(f"{source}: not a folder hwgen compile wrote (no readable "
                             f"{MANIFEST})") from None
        folded = (manifest.get("target") or {}).get("board") or {}
        if folded.get("id") and folded["id"] != board.id:
            raise HwgenError(f"{source}: compiled for board {folded['id']}, not {board.id} "
                             f"(compile it again with --board {board.id})")
        for f in (manifest["verilog"], DESIGN_NPZ, MANIFEST):
            shutil.copyfile(source / f, tmp / f)
    else:
        t0 = time.perf_counter()
        with progress.step("compiling"):
            res = api.compile(source, tmp / "design", board=board.id, **opts)
        steps["compile"] = round(time.perf_counter() - t0, 3)
        manifest = res.manifest
        for f in (manifest["verilog"], DESIGN_NPZ, MANIFEST):
            shutil.move(tmp / "design" / f, tmp / f)
        shutil.rmtree(tmp / "design")
    return manifest, (tmp / manifest["verilog"]).read_text(), steps


def _resources(synth: SynthResult, pnr: PnrResult, manifest: dict, family: str,
               link_estimate: dict) -> dict:
    """Per kind: the core's estimate (and the host link's), what Yosys and nextpnr used, and
    the device's capacity."""
    est = manifest["estimate"]["resources"][family]
    cap = manifest["target"]["capacity"] if manifest.get("target") else {}
    kinds = {"lut4": ("lut4", "logic cells"), "ff": ("ff", "flip-flops"),
             "dsp": ("dsp", "DSP tiles"), "bram": ("bram", "block RAM tiles")}
    out = {}
    for k, (attr, cap_kind) in kinds.items():
        out[k] = {"estimated": int(est.get(k, 0)) + int(link_estimate.get(k, 0)),
                  "synthesized": int(getattr(synth, attr)),
                  "available": cap.get(cap_kind)}
    if synth.spram or est.get("spram"):
        out["spram"] = {"estimated": int(est.get("spram", 0)), "synthesized": synth.spram,
                        "available": cap.get("SPRAM tiles")}
    out["placed"] = {bel: {"used": u, "available": a}
                     for bel, (u, a) in sorted(pnr.utilization.items()) if u}
    return out


#: nextpnr's routers; the first is nextpnr's default
ROUTERS = ("router1", "router2")


def build(source, out_dir, board: str | None = None, freq_mhz: float | None = None,
          seed: int = 1, *, seeds: int = 1, strict_timing: bool = False, force: bool = False,
          baud: int | None = None, router: str = "router1", progress: Progress = QUIET,
          timeout: float | None = None, **compile_opts) -> BuildResult:
    """:mod:`hwgen.build` (see there) of ``source`` (an ONNX model or a compiled folder) for
    ``board`` (None or "auto": chosen by :func:`choose_board`) into ``out_dir``; ``router``:
    nextpnr's (:data:`ROUTERS`); ``seeds``: place and route with seeds ``seed``,
    ``seed + 1``, … up to that many until one meets the clock (the bitstream of the first
    that does, else of the fastest); ``compile_opts`` go to :func:`hwgen.api.compile`."""
    source = Path(source)
    if router not in ROUTERS:
        raise HwgenError(f"--router must be one of {', '.join(ROUTERS)} (got {router!r})")
    if seeds < 1:
        raise HwgenError(f"--seeds must be at least 1 (got {seeds})")
    choice = ""
    if board is None or board.strip().lower() == AUTO_BOARD:
        board, choice = choose_board(source, compile_opts)
    b = board_by_name(board)
    if not b.uart:
        raise HwgenError(f"board {b.id} has no USB-serial UART: hwgen's host link needs one "
                         f"(boards with one: icebreaker, ulx3s-25f, ulx3s-85f)")
    freq = float(freq_mhz) if freq_mhz is not None else default_freq(b)
    if not freq > 0:
        raise HwgenError(f"--freq must be positive (got {freq_mhz})")
    if not source.exists():
        raise HwgenError(f"{source}: no such file or folder")
    # a clock the PLL cannot make, or a baud rate the bridge cannot take: before any work
    clock_mhz = board_clock(b, freq).achieved_mhz
    uart_timing(clock_mhz, DEFAULT_BAUD if baud is None else baud, MAX_BAUD.get(b.id))
    own = check_output_dir(out_dir, None if source.is_dir() else source, force)
    family = b.device.family
    warnings: list[str] = []
    t_all = time.perf_counter()
    with atomic_dir(out_dir, replace=own) as tmp:
        manifest, core_v, steps = _compiled(source, b, tmp, progress, **compile_opts)
        core_top = manifest["top"]
        t0 = time.perf_counter()
        with progress.step("generating the board top"):
            top_v, top, info = board_top_verilog(b, core_v, core_top, manifest, freq, baud)
            cons_name, cons_text = constraints_file(b, top)
        steps["board_top"] = round(time.perf_counter() - t0, 3)
        (tmp / f"{top}.v").write_text(top_v)
        (tmp / cons_name).write_text(cons_text)

        lines: list[str] = []

        def say(line: str):
            lines.append(line)

        with progress.step(f"synthesizing with Yosys ({family})"):
            synth = synthesize(top_v, top, family, progress=say, report=progress.update,
                               timeout=timeout)
        steps["synthesis"] = synth.seconds if not synth.cached else 0.0
        short = shortfalls(synth, b.device)
        if short:
            raise HwgenError(f"{core_top} does not fit {b.id} ({b.device.name}) after "
                             f"synthesis: {'; '.join(short)}")
        steps["place_and_route"] = steps["pack"] = 0.0

        def pnr_at(s: int, k: int) -> PnrResult:
            what = f" (seed {s}, {k + 1} of at most {seeds})" if seeds > 1 else ""
            with progress.step(f"placing and routing at {info['clock_mhz']:g} MHz "
                               f"(nextpnr){what}"):
                got = place_and_route(synth, b.device, info["clock_mhz"], s,
                                      constraints=(cons_name, cons_text), bitstream=True,
                                      progress=say, report=progress.update, timeout=timeout,
                                      clock=info["clock_net"],
                                      options=() if router == ROUTERS[0] else
                                      ("--router", router))
            steps["place_and_route"] += got.seconds if not got.cached else 0.0
            steps["pack"] += got.pack_seconds if not got.cached else 0.0
            return got

        pnr, tried = first_to_meet(pnr_at, int(seed), seeds, info["clock_mhz"])
        for k in ("place_and_route", "pack"):
            steps[k] = round(steps[k], 3)
        bit_name = f"{core_top}{Path(BITSTREAM[family][4]).suffix}"
        shutil.copyfile(pnr.bitstream, tmp / bit_name)
        kept = _keep_logs(tmp, synth, pnr)

        clock = info["clock_mhz"]
        met = _met(pnr, clock)
        if not met:
            got = f"{pnr.fmax_mhz:.1f} MHz" if pnr.fmax_mhz is not None else "no clock"
            at = f" at seed {pnr.seed} (the best of {seeds})" if seeds > 1 else ""
            msg = (f"timing not met: {core_top} reaches {got}{at} on {b.device.name}, the "
                   f"target is {clock:g} MHz (build at --freq {_below(pnr.fmax_mhz)} or "
                   f"try other seeds: --seed, --seeds)")
            if strict_timing:
                raise TimingNotMet(msg)
            warnings.append(msg)
        cycles = int(manifest["estimate"]["cycles_per_frame"])
        latency = int(manifest["estimate"]["latency_cycles"])
        packer = BITSTREAM[family][3]
        report = {
            "format": "hwgen-build", "version": 1,
            "design": core_top, "model": manifest.get("model"),
            "board": b.as_dict(), "device": b.device.name,
            "files": {"bitstream": bit_name, "board_top": f"{top}.v",
                      "constraints": cons_name, "manifest": MANIFEST,
                      "verilog": manifest["verilog"], "design": DESIGN_NPZ, **kept},
            "clock": {"oscillator_mhz": b.clock_mhz, "target_mhz": freq,
                      "pll": info["pll"], "clock_mhz": clock,
                      "achieved_mhz": pnr.fmax_mhz, "timing_met": met,
                      "critical_path": (pnr.critical_path.__dict__ | {
                          "sources": list(pnr.critical_path.sources)}
                          if pnr.critical_path else None)},
            "host_link": info["link"],
            "resources": _resources(synth, pnr, manifest, family, info["link_estimate"]),
            "performance": {
                "cycles_per_frame": cycles, "latency_cycles": latency,
                "clock_mhz": clock,
                "inferences_per_second": round(clock * 1e6 / cycles, 3),
                "latency_us": round(latency / clock, 3),
                "at_achieved_clock": None if pnr.fmax_mhz is None else {
                    "clock_mhz": pnr.fmax_mhz,
                    "inferences_per_second": round(pnr.fmax_mhz * 1e6 / cycles, 3),
                    "latency_us": round(latency / pnr.fmax_mhz, 3)}},
            "tools": {"yosys": synth.yosys_version, "nextpnr": pnr.nextpnr_version,
                      packer: tool_version(packer)},
            "seed": pnr.seed, "seeds_tried": tried, "router": router,
            "cached": {"synthesis": synth.cached, "place_and_route": pnr.cached},
            "steps_seconds": steps,
            "warnings": warnings,
        }
        report["steps_seconds"]["total"] = round(time.perf_counter() - t_all, 3)
        (tmp / BUILD_JSON).write_text(json.dumps(report, indent=2) + "\n")
    return BuildResult(Path(out_dir), Path(out_dir) / bit_name, report, warnings, choice)


def choose_board(source: Path, compile_opts: dict) -> tuple[str, str]:
    """``--board auto``: a compiled folder's own board; for a model the smallest board with
    a USB-serial UART it fits (:func:`hwgen.api.auto_board`)."""
    if source.is_dir():
        try:
            folded = json.loads((source / MANIFEST).read_text())["target"]["board"]["id"]
        except (OSError, ValueError, KeyError, TypeError):
            raise HwgenError(f"{source}: --board auto needs the board the folder was "
                             f"compiled for, and its {MANIFEST} names none (give --board)"
                             ) from None
        return folded, "auto: the board the folder was compiled for"
    if not source.exists():
        raise HwgenError(f"{source}: no such file or folder")
    opts = {k: compile_opts.get(k) for k in ("fold", "target_cycles", "budget",
                                             "logic_lanes")}
    return api.auto_board(source, uart=True, **opts)


#: the tools' records a build folder keeps: build.json's ``files`` role → file name
LOGS = {"yosys_log": "yosys.log", "nextpnr_log": "nextpnr.log",
        "timing_report": "timing_report.json"}


def _keep_logs(tmp: Path, synth: SynthResult, pnr: PnrResult) -> dict[str, str]:
    """Copy Yosys's log, nextpnr's log and its timing report (JSON: clocks, critical paths,
    utilization) of the bitstream's run into ``tmp``; → their roles and names."""
    kept = {}
    for role, src in (("yosys_log", synth.log), ("nextpnr_log", pnr.log),
                      ("timing_report", pnr.report)):
        if src and Path(src).is_file():
            shutil.copyfile(src, tmp / LOGS[role])
            kept[role] = LOGS[role]
    return kept


def first_to_meet(pnr_at, seed: int, seeds: int, clock: float) -> tuple[PnrResult, list]:
    """Place and route with ``pnr_at(seed + k, k)`` for k = 0, 1, … (at most ``seeds``) until
    a result meets ``clock``: → that result (else the fastest, the first of equals) and the
    seeds tried with their clocks."""
    best, tried = None, []
    for k in range(seeds):
        got = pnr_at(seed + k, k)
        tried.append({"seed": seed + k, "achieved_mhz": got.fmax_mhz,
                      "timing_met": _met(got, clock)})
        if tried[-1]["timing_met"]:
            return got, tried
        if best is None or (got.fmax_mhz or 0.0) > (best.fmax_mhz or 0.0):
            best = got
    return best, tried


def _met(pnr: PnrResult, clock: float) -> bool:
    return bool(pnr.met and pnr.fmax_mhz is not None and pnr.fmax_mhz >= clock)


def _below(fmax: float | None) -> str:
    return f"{int(fmax)}" if fmax else "a lower clock"


def summary(res: BuildResult) -> str:
    """The build's readable summary for the terminal."""
    r = res.report
    c = r["clock"]
    got = f"{c['achieved_mhz']:.1f} MHz" if c["achieved_mhz"] is not None else "no clock"
    lines = ([f"board: {r['board']['id']} ({res.board_choice})"] if res.board_choice else [])
    lines += [f"built {res.bitstream} for {r['board']['id']} ({r['device']})",
             f"clock: {c['clock_mhz']:g} MHz from the {c['oscillator_mhz']:g} MHz oscillator, "
             f"achieved {got} ({'met' if c['timing_met'] else 'NOT met'}"
             + (f", seed {r['seed']}" if len(r.get("seeds_tried", ())) > 1 else "") + ")"]
    res_rows = []
    for k in ("lut4", "ff", "dsp", "bram", "spram"):
        v = r["resources"].get(k)
        if v is None:
            continue
        avail = v.get("available")
        share = f", {100 * v['synthesized'] / avail:.0f} %" if avail else ""
        res_rows.append(f"{k} {v['synthesized']:,}/{avail:,} (est. {v['estimated']:,}"
                        f"{share})" if avail is not None else
                        f"{k} {v['synthesized']:,} (est. {v['estimated']:,})")
    lines.append("resources: " + ", ".join(res_rows))
    p = r["performance"]
    lines.append(f"performance: {p['cycles_per_frame']:,} cycles per frame, "
                 f"{p['inferences_per_second']:,.1f} inferences/s, latency "
                 f"{p['latency_us']:,.1f} µs at {p['clock_mhz']:g} MHz")
    link = r["host_link"]
    lines.append(f"host link: UART {link.get('baud', '?')} baud on "
                 + ", ".join(f"{s} {p}" for s, p in r["board"]["uart"].items()))
    lines.append("steps: " + ", ".join(f"{k} {v:.1f} s" for k, v in r["steps_seconds"].items()))
    lines += [f"warning: {w}" for w in res.warnings]
    return "\n".join(lines)
