"""Co-simulation of a board top through its serial line, in Verilator (``hwgen verify
--link``).

``run_link(verilog, top, segments, n_reply, divisor, max_cycles)`` simulates the board top
``top`` (ports ``clk_in``, ``uart_rx``, ``uart_tx``; built without a PLL, so the clock pin
is the design's clock) with a host on the other end of the UART (``uart_bench.cpp``,
shipped with the package): the host sends each segment's bytes once the design has sent
the reply bytes the segment waits for, and records every byte the design sends. The bench
knows nothing of the frame protocol (``rtl_templates/host_link.py``): the caller builds the
requests and reads the replies with the protocol's own functions, as ``hwgen run`` does on
a real board.

The executable is built with ``verilator --cc --exe --build`` and cached by content hash
with the other Verilator builds (``$HWGEN_CACHE`` or ``~/.cache/hwgen/verilator``).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import subprocess
import tempfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from hwgen.errors import HwgenError
from hwgen.sim.cache import cache_root, max_bytes, touch
from hwgen.sim.verilator import (
    BUILD_ARGS,
    check_top,
    cxx_opt,
    opt_makeflags,
    publish_build,
    setup_verilator,
)

__all__ = ["LinkResult", "run_link", "build_link", "LINK_BENCH_VERSION"]

LINK_BENCH_VERSION = "1"
FORMAT_VERSION = 1
#: the host's line is idle this many cycles after reset before the first byte
IDLE_CYCLES = 64
OPT = "-O2"
_STATUS = {0: "ok", 1: "timeout", 2: "framing error on the design's line"}


@dataclass
class LinkResult:
    reply: bytes                 # every byte the design sent, in order
    times: np.ndarray            # the cycle of each byte's stop bit
    cycles: int                  # cycles simulated
    status: str                  # "ok" or why the run ended early


def bench_source() -> str:
    return resources.files(__package__ or "sim").joinpath("uart_bench.cpp").read_text()


def cache_key(verilog: str, top: str) -> str:
    version, make_fixes = setup_verilator()
    return "link-" + hashlib.sha256(json.dumps([
        verilog, top, version, LINK_BENCH_VERSION, BUILD_ARGS, cxx_opt(OPT), make_fixes,
        bench_source()]).encode()).hexdigest()[:24]


def build_link(verilog: str, top: str, build_dir: str | None = None) -> Path:
    """The compiled bench of the board top ``top`` (built now unless cached)."""
    check_top(top)
    version, make_fixes = setup_verilator()
    root = cache_root(build_dir)
    key = cache_key(verilog, top)
    final = root / key
    if (final / "ok").is_file():
        touch(final)
        return final / "bench"
    max_bytes()
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{key}-", dir=root))
    try:
        (tmp / f"{top}.v").write_text(verilog)
        (tmp / "uart_bench.cpp").write_text(bench_source())
        env = dict(os.environ)
        env["MAKEFLAGS"] = " ".join(filter(None, [
            env.get("MAKEFLAGS", ""), make_fixes, opt_makeflags(cxx_opt(OPT))]))
        cmd = ["verilator", "--cc", "--exe", "--build", "-j", str(min(4, os.cpu_count() or 1)),
               "--top-module", top, "--prefix", "Vtop", "-Mdir", str(tmp / "obj"),
               "-o", str(tmp / "bench"), *BUILD_ARGS,
               str(tmp / "uart_bench.cpp"), str(tmp / f"{top}.v")]
        proc = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True)
        (tmp / "build.log").write_text(proc.stdout + proc.stderr)
        if proc.returncode != 0 or not (tmp / "bench").is_file():
            tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-30:])
            raise RuntimeError(f"Verilator build of the board top {top!r} failed (exit "
                               f"{proc.returncode}):\n{tail}")
        shutil.rmtree(tmp / "obj", ignore_errors=True)
        publish_build(tmp, final, version)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final / "bench"


def _write_job(path: Path, segments: list[tuple[bytes, int]], n_reply: int, divisor: int,
               max_cycles: int) -> None:
    with open(path, "wb") as f:
        f.write(b"HWGL" + struct.pack("<IIIQQ", FORMAT_VERSION, divisor, IDLE_CYCLES,
                                      max_cycles, len(segments)))
        for data, wait in segments:
            f.write(struct.pack("<QQ", len(data), wait))
            f.write(bytes(data))
        f.write(struct.pack("<Q", n_reply))


def _read_result(path: Path) -> LinkResult:
    raw = path.read_bytes()
    if raw[:4] != b"HWGM":
        raise RuntimeError(f"{path}: not a result of the UART bench")
    version, status, cycles, n = struct.unpack_from("<IIQQ", raw, 4)
    if version != FORMAT_VERSION:
        raise RuntimeError(f"{path}: result version {version}, expected {FORMAT_VERSION}")
    rec = np.frombuffer(raw, dtype=np.dtype([("b", "u1"), ("t", "<u8")]), count=n,
                        offset=4 + struct.calcsize("<IIQQ"))
    return LinkResult(rec["b"].tobytes(), rec["t"].astype(np.int64), int(cycles),
                      _STATUS.get(status, f"status {status}"))


def run_link(verilog: str, top: str, segments: list[tuple[bytes, int]], n_reply: int,
             divisor: int, max_cycles: int, build_dir: str | None = None) -> LinkResult:
    """Simulate the host sending ``segments`` ((bytes, reply bytes to wait for first), in
    order) to the board top at ``divisor`` clock cycles per bit until ``n_reply`` bytes came
    back and the line stays idle, or ``max_cycles`` pass (then ``status`` says so; the
    bytes received so far are returned)."""
    if divisor < 2:
        raise HwgenError(f"the UART divisor must be at least 2 (got {divisor})")
    bench = build_link(verilog, top, build_dir)
    run_dir = Path(tempfile.mkdtemp(prefix="hwgen-link-"))
    try:
        job, result = run_dir / "job.bin", run_dir / "result.bin"
        _write_job(job, segments, n_reply, divisor, max_cycles)
        proc = subprocess.run([str(bench), str(job), str(result)], cwd=run_dir,
                              capture_output=True, text=True)
        if proc.returncode != 0 or not result.is_file():
            raise RuntimeError(f"the UART bench of {top!r} failed (exit {proc.returncode}): "
                               f"{(proc.stdout + proc.stderr).strip()[-500:]}")
        return _read_result(result)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
