"""Native Verilator back end: a C++ bench compiled together with the verilated design.

``run_native(verilog, top, job)`` gives the same :class:`StreamResult` as
:func:`sim.verilator.run_verilator` (the cocotb bench), cycle for cycle and draw for draw,
but no Python runs per cycle: the bench (``native_bench.cpp``, shipped with the package)
reads the job from a binary file, drives the AXI streams with the same seeded stall pattern
(CPython's ``random.Random(seed)`` reimplemented: MT19937 seeded by ``init_by_array``) and
writes the result to a binary file.

The executable is built with ``verilator --cc --exe --build`` (only the top-level ports are
visible, nothing is ``--public``) and cached by content hash next to the cocotb builds
(``$HWGEN_CACHE`` or ``~/.cache/hwgen/verilator``), under keys of its own.

The verilated top is a small wrapper, ``hwgen_native_top``, with the design's ports except
that the design's ``rst`` comes from a register (initially high) loaded from the input
``rst_d`` at every edge; the bench lowers ``rst_d`` one edge early, so the design sees
exactly the cocotb bench's reset. Why: Amaranth's Verilog folds the synchronous reset into
every register's next-state logic, and Verilator re-evaluates all logic that depends on a
top-level input at every ``eval()``; with ``rst`` an input that was most of the design, twice
per cycle (measured on the digits CNN: 1.9x faster and 3x faster to build with the wrapper).

Observation: a job with ``taps`` runs a design built for observation (its top module drives
every stream out as ``<ident>__valid``/``__ready``/``__payload``, see
``hwgen.assemble.build_observed``); the wrapper gathers those into three ports the bench
reads, and every transfer on them comes back in ``StreamResult.taps``. A job with a ``wave``
runs a variant built with ``--trace`` (VCD) or ``--trace-fst`` (FST), cached under its own
key, and dumps the cycles of its window.

Speed: in a long run nearly all the time is the verilated design's clock-edge logic, which
computes every register of every block at every edge, busy or not (``perf`` on the digits
ResNet at board folding: 95 %, spread over the blocks in proportion to their logic, mostly
the multipliers, adder trees and pipeline registers of the MVAUs and VVAUs and the shift
registers of the window generators); Verilator's per-``eval`` bookkeeping and the bench's
loop take 3-8 %. So the cycles per CPU second fall as the folding adds logic. The C++
options change nothing measurable (``-O1``, ``-Os``, ``-O3``, ``-march=native``, profile-
guided optimisation, ``--output-split 0``, ``--output-split-cfuncs 500``: the same CPU time
within 3 %; Verilator's ``-fno-dfg`` 13 % slower); the build keeps :data:`OPT`.
``benchmarks/sim_speed.py`` has the figures.

Multi-threaded models (``--threads``) only pay off with much logic per cycle and idle cores.
Measured on a shared two-core machine, the digits CNN (310 kB of Verilog) ran 30-160x
*slower* with ``--threads 2`` than single-threaded (the model's threads spin-wait on each
other every cycle). So models are single-threaded unless the Verilog has at least
:data:`THREADS_MIN_VERILOG_BYTES` and the machine at least :data:`THREADS_MIN_CORES` cores;
``$HWGEN_NATIVE_THREADS`` overrides the choice.
"""
from __future__ import annotations

import functools
import hashlib
import json
import operator
import os
import re
import shutil
import struct
import subprocess
import tempfile
from collections.abc import Callable
from importlib import resources
from pathlib import Path

import numpy as np

from hwgen.errors import HwgenError
from hwgen.sim.base import StreamJob, StreamResult, check_status, default_max_cycles
from hwgen.sim.cache import cache_root, max_bytes, touch
from hwgen.sim.verilator import (
    BUILD_ARGS,
    EXTRA_CYCLES,
    check_top,
    cxx_opt,
    opt_makeflags,
    publish_build,
    setup_verilator,
)

__all__ = ["run_native", "build_native", "native_is_built", "missing_fst_headers",
           "native_cache_key",
           "native_threads", "bench_source", "random_key", "port_widths", "wrapper",
           "NATIVE_BENCH_VERSION"]

# Bump when the build recipe changes in a way that matters (the bench source is hashed).
NATIVE_BENCH_VERSION = "3"
FORMAT_VERSION = 3
#: waveform kinds: the Verilator option and the bench's define
WAVES = {"vcd": ("--trace", "HWGEN_WAVE_VCD"), "fst": ("--trace-fst", "HWGEN_WAVE_FST")}
#: Verilog size from which the model is built with ``--threads`` (see the module notes)
THREADS_MIN_VERILOG_BYTES = 4_000_000
#: cores the machine needs for a multi-threaded model
THREADS_MIN_CORES = 8
#: compiler optimisation of the model and the bench (verilated.mk's default is -Os)
OPT = "-O2"
_STATUS = {0: "ok", 1: "timeout", 2: "extra"}


def bench_source() -> str:
    """The C++ text of the bench."""
    return resources.files(__package__ or "sim").joinpath("native_bench.cpp").read_text()


def native_threads(verilog: str) -> int:
    """Threads the model of ``verilog`` is built with (1: single-threaded)."""
    if os.environ.get("HWGEN_NATIVE_THREADS"):
        return max(1, int(os.environ["HWGEN_NATIVE_THREADS"]))
    cores = os.cpu_count() or 1
    if len(verilog.encode()) < THREADS_MIN_VERILOG_BYTES or cores < THREADS_MIN_CORES:
        return 1
    return min(4, cores // 4)


_PORTS = ("s_axis_tdata", "s_axis_tvalid", "s_axis_tready", "s_axis_tlast",
          "m_axis_tdata", "m_axis_tvalid", "m_axis_tready", "m_axis_tlast")
_OUTPUTS = {"s_axis_tready", "m_axis_tdata", "m_axis_tvalid", "m_axis_tlast", "s_wload_tready"}
#: the weight-load input of a design with memories loaded after reset
_WLOAD = ("s_wload_tdata", "s_wload_tvalid", "s_wload_tready")


def port_widths(verilog: str, top: str, job: StreamJob) -> dict[str, int]:
    """Widths of the stream ports of module ``top``, read from its declarations
    (``input [7:0] s_axis_tdata;`` or ANSI style); ports not found: 1 bit, data ports as
    the job says."""
    widths = {p: 1 for p in _PORTS}
    widths["s_axis_tdata"], widths["m_axis_tdata"] = job.in_width, job.out_width
    m = re.search(rf"\bmodule\s+{re.escape(top)}\s*[(#;](.*?)\bendmodule\b", verilog, re.S)
    body = m.group(1) if m else ""
    for name in _PORTS + _WLOAD:
        d = re.search(rf"\b(?:input|output)\s+(?:wire\s+|reg\s+|logic\s+)?"
                      rf"(?:\[\s*(\d+)\s*:\s*(\d+)\s*\]\s*)?{name}\s*[;,)]", body)
        if d:
            widths[name] = abs(int(d.group(1)) - int(d.group(2))) + 1 if d.group(1) else 1
        elif name in _WLOAD:    # a design without the weight-load input
            break
    return widths


def wrapper(verilog: str, top: str, job: StreamJob) -> str:
    """The Verilog of ``hwgen_native_top``: ``top`` with a registered reset (module notes)."""
    widths = port_widths(verilog, top, job)

    def decl(p):
        w = widths[p]
        return (f"{'output' if p in _OUTPUTS else 'input'} "
                f"{f'[{w - 1}:0] ' if w > 1 else ''}{p}")

    ports_of = _PORTS + tuple(p for p in _WLOAD if p in widths)
    ports = ["input clk", "input rst_d"] + [decl(p) for p in ports_of]
    conns = [f".{p}({p})" for p in ports_of]
    if job.taps:
        k, bits = len(job.taps), sum(b for _, b in job.taps)
        ports += [f"output [{k - 1}:0] hwgen_taps_valid", f"output [{k - 1}:0] hwgen_taps_ready",
                  f"output [{bits - 1}:0] hwgen_taps_payload"]
        at = 0
        for j, (ident, b) in enumerate(job.taps):
            conns += [f".{ident}__valid(hwgen_taps_valid[{j}])",
                      f".{ident}__ready(hwgen_taps_ready[{j}])",
                      f".{ident}__payload(hwgen_taps_payload[{at + b - 1}:{at}])"]
            at += b
    ports = ",\n  ".join(ports)
    conns = ", ".join(conns)
    return (f"module hwgen_native_top(\n  {ports}\n);\n"
            f"  reg rst_q = 1'b1;\n"
            f"  always @(posedge clk) rst_q <= rst_d;\n"
            f"  {top} dut(.clk(clk), .rst(rst_q), {conns});\n"
            f"endmodule\n")


def random_key(seed: int) -> list[int]:
    """The key CPython's ``random.Random(seed)`` passes to ``init_by_array``: the 32-bit
    words of ``abs(seed)``, least significant first (``[0]`` for 0)."""
    n = abs(operator.index(seed))
    words = max(1, (n.bit_length() + 31) // 32)
    return [(n >> (32 * k)) & 0xFFFF_FFFF for k in range(words)]


def native_cache_key(verilog: str, top: str, job: StreamJob) -> str:
    """Name of the cache entry of a design's native bench (``job`` gives the port widths
    where the Verilog does not declare them in a form :func:`port_widths` reads, the taps
    and the waveform kind)."""
    return _cache_key(verilog, top, job.in_width, job.out_width, tuple(job.taps),
                      job.wave.kind if job.wave else None)


@functools.lru_cache(maxsize=8)
def _cache_key(verilog: str, top: str, in_width: int, out_width: int, taps: tuple,
               wave: str | None) -> str:
    # memoized: the chunks of a batch share one Verilog text (hashing it takes a while)
    job = StreamJob(in_width, out_width, [], [], 0, taps=list(taps))
    version, make_fixes = setup_verilator()
    return "native-" + hashlib.sha256(json.dumps([
        verilog, top, wrapper(verilog, top, job), version, NATIVE_BENCH_VERSION, BUILD_ARGS,
        cxx_opt(OPT), make_fixes, native_threads(verilog), bench_source(),
    ] + ([wave] if wave else [])).encode()).hexdigest()[:24]


def _tail(text: str, n: int = 40) -> str:
    return "\n".join(text.splitlines()[-n:])


def _build(verilog: str, top: str, job: StreamJob, root: Path,
           report: Report | None = None) -> Path:
    """Return the path of the compiled bench of ``verilog``, compiling it if needed."""
    check_top(top)
    version, make_fixes = setup_verilator()
    key = native_cache_key(verilog, top, job)
    final = root / key
    if (final / "ok").is_file():
        touch(final)
        return final / "bench"
    max_bytes()  # a bad HWGEN_CACHE_MAX fails before the build

    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{key}-", dir=root))
    try:
        (tmp / f"{top}.v").write_text(verilog)
        (tmp / "hwgen_native_top.v").write_text(wrapper(verilog, top, job))
        (tmp / "native_bench.cpp").write_text(bench_source())
        threads = native_threads(verilog)
        env = dict(os.environ)
        # command-line style overrides beat verilated.mk's settings
        env["MAKEFLAGS"] = " ".join(filter(None, [
            env.get("MAKEFLAGS", ""), make_fixes,
            opt_makeflags(cxx_opt(OPT))]))
        wave = ([WAVES[job.wave.kind][0], "-CFLAGS", f"-D{WAVES[job.wave.kind][1]}"]
                if job.wave else [])
        cmd = ["verilator", "--cc", "--exe", "--build", "-j", str(min(4, os.cpu_count() or 1)),
               "--top-module", "hwgen_native_top", "--prefix", "Vtop",
               "-Mdir", str(tmp / "obj"),
               "-o", str(tmp / "bench"), *BUILD_ARGS, *wave,
               *(["--threads", str(threads)] if threads > 1 else []),
               str(tmp / "native_bench.cpp"), str(tmp / "hwgen_native_top.v"),
               str(tmp / f"{top}.v")]
        rc = _run_following(cmd, tmp, env, tmp / "build.log", report)
        if rc != 0 or not (tmp / "bench").is_file():
            text = (tmp / "build.log").read_text(errors="replace")
            raise RuntimeError(f"Verilator build of {top!r} failed (exit {rc}):\n"
                               f"{_tail(text)}")
        shutil.rmtree(tmp / "obj", ignore_errors=True)  # only the executable is needed
        publish_build(tmp, final, version)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final / "bench"


def _words(beats: list[int], width: int) -> tuple[int, bytes]:
    n = max(1, (width + 31) // 32)
    if width <= 64:
        arr = np.asarray(beats, dtype=np.uint64)
        if n == 1:
            return n, arr.astype("<u4").tobytes()
        return n, arr.astype("<u8").tobytes()
    return n, b"".join(b.to_bytes(4 * n, "little") for b in beats)


def _write_job(path: Path, job: StreamJob, max_cycles: int) -> None:
    in_words, data = _words(job.in_beats, job.in_width)
    key = random_key(job.seed)
    with open(path, "wb") as f:
        f.write(b"HWGJ" + struct.pack("<III", FORMAT_VERSION, in_words, len(key)))
        f.write(struct.pack("<QQddQQ", len(job.in_beats), job.n_out_beats,
                            float(job.stall_in), float(job.stall_out), max_cycles,
                            EXTRA_CYCLES))
        f.write(struct.pack(f"<{len(key)}I", *key))
        f.write(data)
        f.write(np.asarray([bool(x) for x in job.in_last], dtype=np.uint8).tobytes())
        f.write(struct.pack(f"<I{len(job.taps)}I", len(job.taps), *(b for _, b in job.taps)))
        w = job.wave
        path = os.fsencode(w.path) if w else b""
        f.write(struct.pack("<QQI", w.from_in_beat if w else 0, w.to_out_beat if w else 0,
                            len(path)) + path)
        f.write(struct.pack("<Q", len(job.load_beats)))
        f.write(np.asarray(job.load_beats, dtype="<u4").tobytes())


def _words_to_ints(words: np.ndarray, n: int) -> list[int]:
    """Rows of ``n`` little-endian 32-bit words → Python ints."""
    if n == 1:
        return words.tolist()
    if n == 2:
        return words.view("<u8").tolist()
    blob = words.tobytes()
    size = 4 * n
    return [int.from_bytes(blob[k:k + size], "little") for k in range(0, len(blob), size)]


def _read_taps(raw: bytes, pos: int, tap_bits: list[int]) -> list[tuple[list[int], list[int]]]:
    (n_taps,) = struct.unpack_from("<I", raw, pos)
    pos += 4
    if n_taps != len(tap_bits):
        raise RuntimeError(f"the native bench returned {n_taps} taps, expected {len(tap_bits)}")
    taps = []
    for bits in tap_bits:
        (n,) = struct.unpack_from("<Q", raw, pos)
        pos += 8
        times = np.frombuffer(raw, "<u8", n, pos).tolist()
        pos += 8 * n
        w = max(1, (bits + 31) // 32)
        taps.append((times, _words_to_ints(np.frombuffer(raw, "<u4", n * w, pos), w)))
        pos += 4 * n * w
    return taps


def _read_result(path: Path, tap_bits: list[int]) -> dict:
    raw = path.read_bytes()
    if raw[:4] != b"HWGR":
        raise RuntimeError(f"{path}: not a result of the native bench")
    version, status, out_words, cycles, n_in, n_out, load_cycles = struct.unpack_from(
        "<IIIQQQQ", raw, 4)
    if version != FORMAT_VERSION:
        raise RuntimeError(f"{path}: result format {version}, expected {FORMAT_VERSION}")
    pos = 4 + struct.calcsize("<IIIQQQQ")
    in_times = np.frombuffer(raw, "<u8", n_in, pos).tolist()
    pos += 8 * n_in
    out_times = np.frombuffer(raw, "<u8", n_out, pos).tolist()
    pos += 8 * n_out
    words = np.frombuffer(raw, "<u4", n_out * out_words, pos)
    pos += 4 * n_out * out_words
    last = [bool(x) for x in np.frombuffer(raw, np.uint8, n_out, pos)]
    pos += n_out
    return {"status": _STATUS[status], "cycles": cycles, "in_times": in_times,
            "out_times": out_times, "out_beats": _words_to_ints(words, out_words),
            "out_last": last, "taps": _read_taps(raw, pos, tap_bits),
            "load_cycles": load_cycles}


@functools.lru_cache(maxsize=1)
def missing_fst_headers() -> list[str]:
    """The C headers Verilator's FST writer includes that the C++ compiler cannot find
    (``lz4.h``, ``zlib.h``: system libraries, not part of the Verilator package)."""
    setup_verilator()
    root = Path(os.environ.get("VERILATOR_ROOT", "")) / "include"
    sources = [*root.glob("fstcpp/*.cpp"), *root.glob("fstcpp/*.h"), root / "verilated_fst_c.cpp"]
    wanted = sorted({h for f in sources if f.is_file()
                     for h in re.findall(r"#include <(\w+\.h)>", f.read_text(errors="replace"))})
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or "c++"
    missing = []
    for h in wanted:
        try:
            ok = subprocess.run([cxx, "-E", "-x", "c++", "-"], input=f"#include <{h}>\n",
                                capture_output=True, text=True).returncode == 0
        except OSError:
            ok = False
        if not ok:
            missing.append(h)
    return missing


def native_is_built(verilog: str, top: str, job: StreamJob,
                    build_dir: str | None = None) -> bool:
    """Whether the bench for ``job`` on ``verilog`` is in the cache already."""
    return (cache_root(build_dir) / native_cache_key(verilog, top, job) / "ok").is_file()


def build_native(verilog: str, top: str, job: StreamJob, build_dir: str | None = None,
                 report: Report | None = None) -> Path:
    """The compiled bench for ``job`` on ``verilog`` (built now unless cached): what
    :func:`run_native` runs, so a batch builds it once before its workers start.
    ``report(fraction, detail)`` hears how far the build is."""
    job.check()
    return _build(verilog, top, job, cache_root(build_dir), report)


#: a build's progress: (share done 0..1 or None, what it does now)
Report = Callable[[float | None, str], None]


def _run_following(cmd: list[str], cwd: Path, env: dict, log: Path,
                   report: Report | None) -> int:
    """Run the Verilator build with its output into ``log``, telling ``report`` how far it
    is: verilating, then each C++ object compiled of those the verilated model has."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
        try:
            if report is None:
                return proc.wait()
            report(None, "verilating")
            seen, total, compiled, rc = 0, 0, 0, None
            while rc is None:
                try:
                    rc = proc.wait(timeout=0.5)
                except subprocess.TimeoutExpired:
                    pass
                with open(log, "rb") as f:
                    f.seek(seen)
                    chunk = f.read()
                cut = len(chunk) if rc is not None else chunk.rfind(b"\n") + 1
                seen += cut
                for line in chunk[:cut].decode(errors="replace").splitlines():
                    if "V e r i l a t i o n" in line:
                        total = len(list((cwd / "obj").glob("*.cpp"))) + 3
                    elif total and " -c -o " in line:
                        compiled += 1
                if total:
                    report(0.15 + 0.85 * min(compiled / total, 0.98),
                           f"compiling C++ ({compiled}/{total} objects)")
            return rc
        except BaseException:
            proc.kill()
            proc.wait()
            raise


def run_native(verilog: str, top: str, job: StreamJob,
               build_dir: str | None = None, *, running: set | None = None) -> StreamResult:
    """Simulate ``job`` on the design ``verilog`` (top module ``top``) with the native bench.

    Same contract as :func:`sim.verilator.run_verilator`: ``build_dir`` overrides the cache
    root; :class:`SimTimeout` if the outputs do not all arrive within
    ``default_max_cycles(job)`` cycles, ``RuntimeError`` on a build error, more output beats
    than expected or a bench crash. ``running``: a set the bench's process is in while it
    runs (so a caller can end it on an interrupt).
    """
    job.check()
    max_cycles = default_max_cycles(job)
    bench = _build(verilog, top, job, cache_root(build_dir))

    run_dir = Path(tempfile.mkdtemp(prefix="hwgen-native-"))
    kept = None
    try:
        job_file, result_file = run_dir / "job.bin", run_dir / "result.bin"
        _write_job(job_file, job, max_cycles)
        proc = subprocess.Popen([str(bench), str(job_file), str(result_file)], cwd=run_dir,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if running is not None:
            running.add(proc)
        try:
            log, _ = proc.communicate()
        finally:
            if running is not None:
                running.discard(proc)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if not run_dir.is_dir():
            raise HwgenError(f"the simulation's temporary folder {run_dir} was removed while "
                             f"the bench ran")
        if proc.returncode != 0 or not result_file.is_file():
            if proc.returncode >= 0:  # not ended by a signal: keep the files to look at
                (run_dir / "sim.log").write_text(log)
                kept = run_dir
            raise RuntimeError(f"Verilator simulation of {top!r} failed (exit "
                               f"{proc.returncode}; files kept in {run_dir}):\n{_tail(log)}"
                               if kept else f"Verilator simulation of {top!r} ended by "
                               f"signal {-proc.returncode}")
        res = _read_result(result_file, [b for _, b in job.taps])
    finally:
        if kept is None:
            shutil.rmtree(run_dir, ignore_errors=True)
    result = StreamResult(out_beats=res["out_beats"], out_last=res["out_last"],
                          in_times=res["in_times"], out_times=res["out_times"],
                          cycles=res["cycles"], taps=res["taps"],
                          load_cycles=res["load_cycles"])
    check_status(top, job, max_cycles, res["status"], len(res["out_beats"]),
                 len(res["in_times"]), res["cycles"], result)
    return result
