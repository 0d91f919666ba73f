"""The ``hwgen`` command line: compile, simulate, verify, build, flash, run, quantize,
inspect, testbench, cache, boards, explore."""
from __future__ import annotations

import argparse
import io
import json
import os
import signal
import sys
import threading
import warnings
from pathlib import Path

import numpy as np
from amaranth.hdl import UnusedElaboratable

from hwgen import (
    __version__,
    api,
    build,
    cluster,
    design,
    explore,
    flash,
    inspect,
    report,
    testbench,
)
from hwgen.board_run import run_board
from hwgen.boards.board_top import DEFAULT_BAUD
from hwgen.boards.boards import boards_table
from hwgen.boards.fold import DEFAULT_BUDGET
from hwgen.errors import HwgenError, HwgenWarning
from hwgen.io import check_writable_file, write_atomic
from hwgen.progress import Progress
from hwgen.quantize import quantize
from hwgen.sim import cache


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="hwgen",
        description="ONNX model → streaming dataflow accelerator (Amaranth → Verilog), "
                    "simulated bit-exactly against its golden model and onnxruntime.")
    ap.add_argument("--version", action="version", version=f"hwgen {__version__}")
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    c = sub.add_parser("compile", help="generate Verilog and manifest.json from an ONNX model")
    c.add_argument("model", help="quantized ONNX model (QDQ format), or a float one with "
                                 "--calibration")
    c.add_argument("-o", "--output", required=True, metavar="DIR", help="output folder")
    c.add_argument("--name", help="top-level module name (default: from the model file name)")
    c.add_argument("-j", "--jobs", type=int, metavar="N",
                   help="processes converting blocks to Verilog (default: the core count)")
    c.add_argument("--no-cache", action="store_true",
                   help="neither read nor fill the per-block cache (~/.cache/hwgen/blocks)")
    c.add_argument("--assembly", choices=api.ASSEMBLIES, default="blocks",
                   help="convert each distinct block on its own under a top of instances "
                        "(default), or the whole design as one (slower; for comparison)")
    c.add_argument("--ip-xact", action="store_true",
                   help="also write component.xml, an IP-XACT description of the design for "
                        "Vivado's IP catalog (add the folder as an IP repository)")
    _force_arg(c)
    _fold_args(c)
    _quant_args(c)

    s = sub.add_parser("simulate", help="run float inputs through a compiled design")
    s.add_argument("design", metavar="DIR", help="folder written by 'hwgen compile'")
    s.add_argument("--input", required=True, metavar="X", help="inputs: .npy or .npz, batch first")
    s.add_argument("-o", "--output", required=True, metavar="Y.npy",
                   help="outputs (as ONNX returns them)")
    s.add_argument("--count", type=int, help="simulate only the first N samples")
    s.add_argument("--report", metavar="REPORT.html",
                   help="also write one self-contained HTML page: the run, the cycle budget "
                        "and the dataflow graph")
    _sim_args(s)

    v = sub.add_parser("verify", help="compile, simulate, compare with golden and onnxruntime")
    v.add_argument("model", help="quantized ONNX model (QDQ format), or a float one with "
                                 "--calibration")
    v.add_argument("--input", required=True, metavar="X", help="inputs: .npy or .npz, batch first")
    v.add_argument("--count", type=int, help="use only the first N samples")
    _fold_args(v)
    v.add_argument("-o", "--output", metavar="DIR", help="keep the compiled design in DIR")
    _force_arg(v)
    _sim_args(v)
    v.add_argument("--trace", action="store_true",
                   help="tap every stream in simulation and compare it with the golden "
                        "model's values; report the first diverging block (verilator or "
                        "amaranth)")
    v.add_argument("--report", metavar="REPORT.html",
                   help="also write one self-contained HTML page: the comparison, each layer "
                        "against onnxruntime, the cycle budget and the dataflow graph")
    v.add_argument("--link", action="store_true",
                   help="also simulate the board top of 'hwgen build' for --board (or the "
                        "board chosen without it; PLL left out) and send the frames through "
                        "its UART as 'hwgen run' does, comparing those outputs with the "
                        "golden model too")
    _quant_args(v)

    b = sub.add_parser("build", help="a model (or a compiled folder) to a bitstream for a "
                                     "board: Yosys, nextpnr, ecppack/icepack")
    b.add_argument("model", metavar="MODEL|DIR",
                   help="quantized ONNX model, or a folder 'hwgen compile' wrote")
    b.add_argument("--board", default="auto", metavar="B",
                   help="the board ('hwgen boards' lists them; one with a USB-serial UART), "
                        "or 'auto' (the default): the smallest such board the model fits, "
                        "or for a compiled folder the board it was compiled for")
    b.add_argument("-o", "--output", required=True, metavar="DIR", help="output folder")
    b.add_argument("--freq", type=float, metavar="MHZ",
                   help="the design's clock, made by the PLL from the board's oscillator "
                        "(default: " + ", ".join(f"{v:g} MHz on {k}" for k, v in
                                                 build.DEFAULT_FREQ_MHZ.items()) + ")")
    b.add_argument("--seed", type=int, default=1, metavar="N",
                   help="nextpnr's placement seed (default 1)")
    b.add_argument("--seeds", type=int, default=1, metavar="K",
                   help="place and route with up to K seeds from --seed on, until one meets "
                        "the clock; the first that does (else the fastest) is kept "
                        "(default 1)")
    b.add_argument("--router", choices=build.ROUTERS, default=build.ROUTERS[0],
                   help="nextpnr's router (default router1; router2 routes large, crowded "
                        "designs in a fraction of the time, at a slower clock)")
    b.add_argument("--baud", type=int, metavar="B",
                   help=f"the UART's baud rate (default {DEFAULT_BAUD})")
    b.add_argument("--strict-timing", action="store_true",
                   help="fail (exit 2) when the placed design misses the clock, instead of "
                        "a warning")
    b.add_argument("--budget", type=float, metavar="F",
                   help=f"share of each resource a model's folding may take (default "
                        f"{DEFAULT_BUDGET})")
    b.add_argument("--fold", metavar="FOLD.json", help="per-layer folding (as for compile)")
    b.add_argument("--target-cycles", type=int, metavar="N",
                   help="fold every layer to at most N cycles per frame (as for compile)")
    b.add_argument("--flash", action="store_true",
                   help="then load the bitstream onto the attached board (its SRAM; as "
                        "'hwgen flash' does)")
    b.add_argument("--write-flash", action="store_true",
                   help="with --flash: write the board's configuration flash instead (kept "
                        "across power cycles)")
    _force_arg(b)

    f = sub.add_parser("flash", help="load the bitstream of a folder 'hwgen build' wrote "
                                     "onto its board (openFPGALoader)")
    f.add_argument("design", metavar="DIR", help="folder written by 'hwgen build'")
    f.add_argument("--write-flash", action="store_true",
                   help="write the board's configuration flash (kept across power cycles) "
                        "instead of its SRAM (the default: lost at power-off)")
    f.add_argument("--dry-run", action="store_true",
                   help="print the openFPGALoader command line and do nothing")

    r = sub.add_parser("run", help="run inputs on a board through its UART link (the "
                                   "folder 'hwgen build' wrote)")
    r.add_argument("design", metavar="DIR", help="folder written by 'hwgen build'")
    r.add_argument("--port", required=True,
                   help="the board's serial port (e.g. /dev/ttyUSB0; pyserial URLs work)")
    r.add_argument("--input", required=True, metavar="X", help="inputs: .npy or .npz, batch first")
    r.add_argument("-o", "--output", metavar="Y.npy",
                   help="write the outputs (dequantized as the ONNX model returns them)")
    r.add_argument("--count", type=int, help="use only the first N samples")
    r.add_argument("--baud", type=int, metavar="B",
                   help="the link's baud rate (default: the one build.json records)")
    r.add_argument("--timeout", type=float, default=5.0, metavar="S",
                   help="seconds to wait for a reply before giving up (default 5)")

    q = sub.add_parser("quantize", help="quantize a float ONNX model with onnxruntime (QDQ)")
    q.add_argument("model", help="float ONNX model")
    q.add_argument("-o", "--output", required=True, metavar="MODEL.q.onnx",
                   help="quantized model to write")
    _quant_args(q, required=True)
    q.add_argument("--qoperator", action="store_true",
                   help="onnxruntime's QOperator format (QLinearConv, QLinearAdd, ...) "
                        "instead of QDQ")

    i = sub.add_parser("inspect", help="per node: does it map, to which blocks, at what cost "
                                       "(no Verilog; exit 0 also when nodes do not map)")
    i.add_argument("model", help="ONNX model (quantized, or float: estimated as 8-bit)")
    i.add_argument("--json", action="store_true", help="print the report as JSON")
    i.add_argument("--family", choices=("ecp5", "ice40"), default=None,
                   help="FPGA family of the table's LUT/FF/DSP/BRAM column (default: the "
                        "target device's; the totals give both)")
    _fold_args(i)

    t = sub.add_parser("testbench", help="export a standalone cocotb testbench of a compiled "
                                         "design (Verilog, test, vectors, Makefile, run.py)")
    t.add_argument("design", metavar="DIR", help="folder written by 'hwgen compile'")
    t.add_argument("-o", "--output", required=True, metavar="TB", help="testbench folder")
    t.add_argument("--input", metavar="X", help="inputs: .npy or .npz, batch first (default: "
                                               f"{testbench.DEFAULT_FRAMES} random frames)")
    t.add_argument("--count", type=int, metavar="N", help="use only the first N samples (or "
                                                          "N random frames)")
    t.add_argument("--seed", type=int, default=0, metavar="S",
                   help="seed of the random frames and of the test's stall pattern")
    t.add_argument("--stall", type=float, default=0.0, metavar="P",
                   help="the test's default probability of a random valid/ready stall per "
                        "cycle (TB_STALL overrides it when the test runs)")

    k = sub.add_parser("cache", help="the cache of compiled Verilator simulators: its size, "
                                     "or clear it")
    k.add_argument("action", choices=("info", "clear"),
                   help="info: location, entries, size and limit; clear: remove every entry")

    sub.add_parser("boards", help="list the boards and devices hwgen folds for, with their "
                                  "resources")
    _explore_parser(sub)
    return ap


def _explore_parser(sub):
    e = sub.add_parser("explore", help="design-space sweep: one build per point (budgets, "
                                       "folding targets, lanes, seeds, routers) on Dask; a "
                                       "table, Pareto plots and the best bitstream")
    e.add_argument("model", help="quantized ONNX model")
    e.add_argument("--board", required=True, metavar="B", help="the board to build for")
    e.add_argument("-o", "--output", required=True, metavar="DIR",
                   help="folder of explore.json, explore.html and best/ (run again to "
                        "resume an interrupted sweep)")
    e.add_argument("--budget", type=float, nargs="+", metavar="F",
                   help="device-search foldings at these shares of the device")
    e.add_argument("--target-cycles", type=int, nargs="+", metavar="N",
                   help="foldings to at most N cycles per frame (with --budget: both kinds; "
                        f"neither: the device search at {DEFAULT_BUDGET})")
    e.add_argument("--lanes", nargs="+", default=["auto"], choices=list(explore.LANES),
                   help="products: auto (as 'hwgen build'), logic (--logic-lanes), dsp "
                        "(--dsp-only) (default auto)")
    e.add_argument("--seed", type=int, nargs="+", default=[1], metavar="S",
                   help="nextpnr placement seeds (default 1)")
    e.add_argument("--router", nargs="+", default=[build.ROUTERS[0]], choices=build.ROUTERS,
                   help=f"nextpnr routers (default {build.ROUTERS[0]})")
    e.add_argument("--freq", type=float, metavar="MHZ", help="the clock (as for build)")
    e.add_argument("--scheduler", metavar="ADDRESS",
                   help="the Dask scheduler whose workers build the points (default: a "
                        "local cluster on 127.0.0.1)")
    e.add_argument("--workers", type=int, metavar="N",
                   help="worker processes of the local cluster (default: the cores)")
    e.add_argument("--dry-run", action="store_true",
                   help="list the points (and which are finished) without building")


def _quant_args(p, required: bool = False):
    p.add_argument("--calibration", required=required, metavar="DATA",
                   help="calibration inputs for a float model: .npy or .npz, batch first"
                        + ("" if required else " (quantizes the model with onnxruntime first)"))
    p.add_argument("--per-channel", action="store_true",
                   help="per-channel weight scales (default: per tensor)")
    p.add_argument("--symmetric", action="store_true",
                   help="symmetric activations and weights (zero points 0)")
    t = p.add_mutually_exclusive_group()
    t.add_argument("--int8", dest="activation_type", action="store_const", const="int8",
                   help="int8 activations")
    t.add_argument("--uint8", dest="activation_type", action="store_const", const="uint8",
                   help="uint8 activations (the default)")
    p.set_defaults(activation_type=None)


def _quant_opts(args) -> dict:
    """The quantization keywords of compile/verify/quantize; options without
    --calibration are refused."""
    given = [f for f, on in (("--per-channel", args.per_channel), ("--symmetric", args.symmetric),
                             (f"--{args.activation_type}", args.activation_type)) if on]
    if args.calibration is None:
        if given:
            raise HwgenError(f"{', '.join(given)}: quantization options, they need "
                             f"--calibration DATA (a float model's calibration inputs)")
        return {}
    return dict(calibration=args.calibration, per_channel=args.per_channel,
                symmetric=args.symmetric, activation_type=args.activation_type or "uint8")


def _force_arg(p):
    p.add_argument("--force", action="store_true",
                   help="write into an existing folder that holds other files (only hwgen's "
                        "<top>.v, manifest.json and design.npz are replaced)")


def _fold_args(p):
    p.add_argument("--fold", metavar="FOLD.json",
                   help='per-layer folding: {"layer": {"pe": P, "simd": S}, ...} (a matrix '
                        'unit may add "lut_lanes": N, products built of logic cells, and '
                        '"rom_logic": true, its weights in logic cells instead of block RAM; '
                        '"sequential": true on every layer puts the model on the '
                        'layer-sequential engine)')
    p.add_argument("--target-cycles", type=int, metavar="N",
                   help="fold every layer (not fixed by --fold) to at most N cycles per "
                        "frame instead of searching for the device (with --fold: default "
                        "1024)")
    t = p.add_mutually_exclusive_group()
    t.add_argument("--board", metavar="B",
                   help="fold for this board's device ('hwgen boards' lists them); 'auto', "
                        "the default without --device: the smallest board the model fits, "
                        "named in the output with the reason")
    t.add_argument("--device", metavar="D", help="fold for this device (e.g. ice40-up5k)")
    p.add_argument("--budget", type=float, metavar="F",
                   help=f"share of each resource of the device a design may take "
                        f"(default {DEFAULT_BUDGET})")
    ll = p.add_mutually_exclusive_group()
    ll.add_argument("--logic-lanes", dest="logic_lanes", action="store_const", const="all",
                    help="let the device search build products of logic cells for "
                         "intervals below the device's bound (by default only for targets "
                         "down to it: the model's MACs ÷ the DSP lanes); shorter "
                         "intervals, most of the logic filled, a lower clock (101-118 MHz "
                         "on ECP5 so far)")
    ll.add_argument("--dsp-only", dest="logic_lanes", action="store_const", const="dsp",
                    help="build every product in a DSP tile (no products of logic cells)")


def _target_opts(args) -> dict:
    return dict(board=args.board, device=args.device, budget=args.budget,
                logic_lanes=args.logic_lanes)


def _sim_args(p):
    p.add_argument("--simulator", choices=("verilator", "cocotb", "amaranth"),
                   default="verilator",
                   help="simulation back end (default: verilator)")
    p.add_argument("--stall", type=float, default=0.0, metavar="P",
                   help="probability of a random valid/ready stall per cycle on each stream")
    p.add_argument("--seed", type=int, default=0, metavar="S",
                   help="seed of the stall pattern (chunk k draws from S + k * 2**64)")
    p.add_argument("--jobs", "-j", type=int, metavar="N",
                   help="worker processes (default: the cores); results do not depend on N")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="run the chunks on the Dask cluster of this scheduler (e.g. "
                        "tcp://10.0.0.5:8786) instead of local workers; the same results "
                        "(pip install 'hwgen[cluster]'; docs/cluster.md)")
    p.add_argument("--chunk", type=int, metavar="F",
                   help="frames per chunk: the batch is simulated in chunks of F frames, each "
                        "from reset (default: from the design's estimate, at least 16384 "
                        "cycles per chunk)")
    w = p.add_mutually_exclusive_group()
    w.add_argument("--vcd", metavar="FILE", help="write VCD waveforms of --frames "
                   "(streams named as in the manifest; verilator, or amaranth: the whole "
                   "chunk holding them)")
    w.add_argument("--fst", metavar="FILE", help="write FST waveforms of --frames "
                   "(verilator only)")
    p.add_argument("--frames", default="0:1", metavar="A:B",
                   help="frames A to B-1 for --vcd/--fst (default 0:1; within one chunk)")


def _print_timing(r, est: dict):
    if r.load_cycles:
        print(f"weight load: {r.load_cycles} cycles after reset (SPRAM), before the first frame")
    print(f"latency: {r.latency} cycles (first input beat to last output beat of one frame)")
    if r.interval is not None:
        print(f"interval: {r.interval:.1f} cycles per frame in steady state "
              f"(estimate {est['cycles_per_frame']}, bottleneck {est['bottleneck']})")


def _count(n):
    if n is not None and n < 1:
        raise HwgenError(f"--count must be at least 1 (got {n})")
    return n


def _stall(p):
    if not 0.0 <= p < 1.0:
        raise HwgenError(f"--stall must be in [0, 1) (got {p})")
    return p


def _sim_opts(args, progress) -> dict:
    wave = None
    if args.vcd or args.fst:
        first, stop = api.parse_frames(args.frames)
        wave = api.WaveRequest(Path(args.vcd or args.fst), "vcd" if args.vcd else "fst",
                               first, stop)
    elif args.frames != "0:1":
        raise HwgenError("--frames selects the frames of --vcd or --fst; give one of them")
    if args.scheduler is not None:
        cluster.distributed()   # installed, or the one-line error before any work
    return dict(jobs=args.jobs, chunk=args.chunk, wave=wave, seed=args.seed,
                scheduler=args.scheduler, progress=progress)


def run(argv=None) -> int:
    args = _parser().parse_args(argv)
    progress = Progress()

    if args.cmd == "boards":
        print(boards_table())
        return 0
    if args.cmd == "cache":
        if args.action == "clear":
            n, size = cache.clear()
            print(f"removed {n} entries ({_mib(size)}) from {cache.cache_root()}")
        else:
            c = cache.info()
            print(f"location: {c.root}")
            print(f"entries:  {c.entries}")
            print(f"size:     {_mib(c.bytes)} of {_mib(c.limit)} (HWGEN_CACHE_MAX; least "
                  f"recently used entries are removed past it)")
        return 0
    if args.cmd == "testbench":
        tb = testbench.export(args.design, args.output, args.input, args.count, args.seed,
                              args.stall)
        print(f"wrote the cocotb testbench of {tb.top} to {tb.out_dir}: {tb.frames} frames, "
              f"{tb.in_beats} input and {tb.out_beats} expected output beats")
        print(f"run it: cd {tb.out_dir} && python run.py   (or: make, make SIM=icarus)")
        return 0
    if args.cmd == "inspect":
        rep = inspect.inspect(args.model, args.fold, args.target_cycles, **_target_opts(args))
        if args.json:
            print(json.dumps(inspect.to_json(rep), indent=1))
        else:
            print(inspect.format_text(rep, args.family or rep.fit.device.family))
        return 0
    if args.cmd == "quantize":
        o = _quant_opts(args)
        fmt = "qoperator" if args.qoperator else "qdq"
        out = quantize(args.model, o.pop("calibration"), args.output, quant_format=fmt, **o)
        weights = "per channel" if o["per_channel"] else "per tensor"
        form = "QOperator" if args.qoperator else "QDQ"
        print(f"wrote {out} ({form}; int8 weights {weights}, {o['activation_type']} activations"
              f"{', symmetric' if o['symmetric'] else ''}; calibrated on {args.calibration})")
        return 0
    if args.cmd == "compile":
        res = api.compile(args.model, args.output, args.fold, args.name, args.target_cycles,
                          force=args.force, jobs=args.jobs, cache=not args.no_cache,
                          assembly=args.assembly, ip_xact=args.ip_xact,
                          **_target_opts(args), **_quant_opts(args))
        est = res.estimate
        print(f"wrote {res.verilog}, {res.out_dir / 'manifest.json'}"
              + (f", {res.out_dir / 'design.npz'} and {res.out_dir / 'component.xml'}"
                 if args.ip_xact else f" and {res.out_dir / 'design.npz'}"))
        print(f"estimate: {est['cycles_per_frame']} cycles per frame (bottleneck "
              f"{est['bottleneck']}), latency {est['latency_cycles']} cycles, "
              f"{est['multipliers']} multipliers, {est['memory_bits']} memory bits")
        _print_fit(res.fit)
        return 0
    if args.cmd == "simulate":
        manifest, _, _ = design.load(args.design)
        check_writable_file(args.output)
        if args.report is not None:
            check_writable_file(args.report)
        o = _sim_opts(args, progress)
        r = api.simulate(args.design, args.input, args.simulator, _count(args.count),
                         _stall(args.stall), o.pop("seed"), **o)
        buf = io.BytesIO()
        np.save(buf, r.outputs)
        write_atomic(args.output, buf.getvalue())
        print(f"simulated {r.outputs.shape[0]} samples with {r.simulator}; wrote {args.output}")
        _print_timing(r, manifest["estimate"])
        _print_run(r)
        if args.report is not None:
            report.write_simulation(r, args.design, args.report)
            print(f"wrote {args.report}")
        return 0
    if args.cmd == "verify":
        if args.report is not None:
            check_writable_file(args.report)
        rep = api.verify(args.model, args.input, _count(args.count), args.simulator, args.fold,
                         args.output, _stall(args.stall), args.target_cycles,
                         force=args.force, trace=args.trace, layers=args.report is not None,
                         link=args.link,
                         **_sim_opts(args, progress), **_target_opts(args),
                         **_quant_opts(args))
        _print_fit(rep.compiled.fit)
        _print_run(rep.sim)
        if rep.link is not None:
            print(f"board top via UART: {rep.link.summary()}")
        _print_report(rep)
        if args.report is not None:
            report.write(rep, args.report)
            print(f"wrote {args.report}")
        return 0 if rep.ok else 1
    if args.cmd == "flash":
        res = flash.flash(args.design, write_flash=args.write_flash, dry_run=args.dry_run,
                          echo=sys.stderr if progress.enabled else None)
        print(res.summary())
        return 0
    if args.cmd == "build":
        if args.write_flash and not args.flash:
            raise HwgenError("--write-flash goes with --flash (load the bitstream onto the "
                             "board after building)")
        res = build.build(args.model, args.output, args.board, args.freq, args.seed,
                          seeds=args.seeds, strict_timing=args.strict_timing,
                          force=args.force, baud=args.baud,
                          router=args.router, progress=progress, budget=args.budget,
                          fold=args.fold,
                          target_cycles=args.target_cycles)
        print(build.summary(res))
        if args.flash:
            sys.stdout.flush()
            done = flash.flash(res.out_dir, write_flash=args.write_flash,
                               echo=sys.stderr if progress.enabled else None)
            print(done.summary())
        return 0
    if args.cmd == "explore":
        return _explore(args)
    if args.cmd == "run":
        res = run_board(args.design, args.port, args.input, _count(args.count), baud=args.baud,
                        timeout=args.timeout, progress=progress)
        print(res.summary())
        if args.output is not None:
            write_atomic(args.output, res.npy_bytes())
            print(f"wrote {args.output}")
        return 0
    return 2


def _explore(args) -> int:
    points = explore.grid(args.budget or (), args.target_cycles or (), args.lanes, args.seed,
                          args.router)
    if args.dry_run:
        done = explore.finished(args.output)
        for p in points:
            print(f"{p.key}{'  (finished)' if p.key in done else ''}")
        print(f"{len(points)} points, {sum(p.key in done for p in points)} finished")
        return 0
    if args.scheduler is not None and args.workers is not None:
        raise HwgenError("--workers sizes the local cluster: not with --scheduler")
    res = explore.explore(args.model, args.board, args.output, points, freq_mhz=args.freq,
                          scheduler=args.scheduler, workers=args.workers,
                          on_row=lambda r: print(f"{r['point']}: {r['status']}"
                                                 + (f" ({r['reason']})" if r.get("reason") else ""),
                                                 file=sys.stderr))
    print(explore.table(res.rows, res.best))
    print(f"{len(res.rows)} of {len(points)} points finished ({res.ran} now, "
          f"{res.seconds:.0f} s on {res.workers} workers); wrote {res.json_path} and "
          f"{res.page}" + (f"; best: {res.best} in {res.out_dir / explore.BEST}"
                           if res.best else "; no point built"))
    return 0


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


def _print_run(r):
    print(f"simulated {r.cycles} cycles in chunks of {r.chunk_frames} frames on {r.jobs} "
          f"worker{'s' if r.jobs > 1 else ''}")
    if r.wave is not None:
        print(f"wrote waveforms to {r.wave}")


def _print_trace(t):
    print(f"trace: {t.summary()}")
    if not t.ok:
        for c in t.streams:
            if not c.ok:
                print(f"  {c.describe()}")


def _print_fit(fit):
    if fit is None:
        return
    how = "searched for the device" if fit.method == "device search" else fit.method
    if fit.choice:
        print(f"board: {fit.target.label} ({fit.choice})")
    print(f"target: {fit.summary()} (folding: {how})")
    if not fit.fits:
        print(f"warning: the design does not fit {fit.target.label} at this folding "
              f"(without --fold/--target-cycles hwgen folds it to fit)", file=sys.stderr)


def _print_report(rep):
    rows = report.summary_rows(rep)
    w = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{w}}  {v}")
    if rep.trace is not None:
        _print_trace(rep.trace)
    print("PASS" if rep.ok else "FAIL")


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the command is, so it unwinds as from a Ctrl-C: child tools
    killed, temporary folders removed, no output folder half-written."""


def _terminate(signum, frame):
    raise Terminated()


def _default_sigterm_in_child():
    """A process forked from the command (a pool's worker) dies of SIGTERM as without the
    handler: a handler in Python would not run while the worker waits inside C code."""
    if signal.getsignal(signal.SIGTERM) is _terminate:
        try:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        except ValueError:      # not the child's main thread: nothing to undo there
            pass


os.register_at_fork(after_in_child=_default_sigterm_in_child)


def main(argv=None):
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always", HwgenWarning)
            warnings.showwarning = _show_warning
            code = run(argv)
    except HwgenError as e:
        _quiet()
        print(f"hwgen: error: {e}", file=sys.stderr)
        code = 2
    except Terminated:
        _quiet()
        print("hwgen: terminated", file=sys.stderr)
        code = 143
    except KeyboardInterrupt:
        _quiet()
        print("hwgen: interrupted", file=sys.stderr)
        code = 130
    except MemoryError:
        _quiet()
        print("hwgen: error: out of memory (the model needs more than the memory available "
              "or the process's memory limit)", file=sys.stderr)
        code = 2
    if previous is not None:
        signal.signal(signal.SIGTERM, previous)
    sys.exit(code)


_python_showwarning = warnings.showwarning


def _show_warning(message, category, filename, lineno, file=None, line=None):
    """hwgen's warnings as one line each on stderr, like its errors; others as Python
    shows them."""
    if issubclass(category, HwgenWarning):
        print(f"hwgen: warning: {message}", file=sys.stderr)
    else:
        _python_showwarning(message, category, filename, lineno, file, line)


def _quiet():
    """A command stopped half-way: the Amaranth components it built and never elaborated
    are not worth a warning each as the process exits."""
    warnings.simplefilter("ignore", UnusedElaboratable)


if __name__ == "__main__":
    main()
