"""Running one fuzz case and classifying what hwgen did with it.

A case is one mutant (``fuzz_mutants.mutant``) written to a fresh folder as ``model.onnx``;
``hwgen inspect`` and ``hwgen compile`` each run on it in a child process forked from this
one (the command line's own ``main``, its stdout and stderr in files, its temporary files in
a folder of its own) under a time limit and an address-space limit (``RLIMIT_AS``, 8 GiB:
the Verilog back end, Yosys in WebAssembly, reserves 4 GiB of address space). With
``real_cli`` the commands run as real subprocesses instead (the installed console command),
which checks the exit code and stderr exactly as a user sees them.

Outcomes, per command and for the case (the worst of its commands):

- ``design``: exit 0 (compile wrote exactly its three files; inspect printed a report),
  nothing on stderr;
- ``clean``: exit 2 with exactly one stderr line ``hwgen: error: ...``, nothing written;
- ``crash``: a traceback, another exit code or a signal (the ``signature`` names the
  exception and the innermost hwgen frame);
- ``hang``: the command used more than the time limit in CPU seconds (its process group),
  or more than ``WALL_FACTOR`` times the limit in wall time. CPU time, so that a case that
  is only starved by a busy machine is not counted as a hang;
- ``stray``: a folder or file left behind on a refusal (or a temporary file anywhere),
  stderr output (warnings) on success, or a design folder that is not exactly hwgen's files.

``check_design`` runs a compiled mutant's RTL (the native Verilator simulator) on a few
frames and compares it with its golden model.
"""
from __future__ import annotations

import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from fuzz_mutants import mutant

from hwgen import api, cli, design, simrun  # imported once here, so forked children start at once
from hwgen.dataflow import golden

ORDER = ("design", "clean", "stray", "hang", "crash")
#: compile options by case (index modulo their count): the device search, and a fixed
#: interval (the path taken with --target-cycles)
COMPILE_ARGS = ((), ("--target-cycles", "4096"))
TIME_LIMIT = 60.0
#: what onnxruntime's library itself keeps in $TMPDIR: ``.ses``, a session id it writes once
#: and reuses (the first time a process creates a session), not a file of hwgen's
OWN_FILES_OF_ONNXRUNTIME = {".ses"}
#: the wall-time backstop, as a multiple of the (CPU) time limit
WALL_FACTOR = 5.0
MEMORY_LIMIT = 8 << 30


@dataclass
class Result:
    command: str
    outcome: str
    code: int | None
    stderr: str
    seconds: float
    signature: str = ""


@dataclass
class CaseResult:
    label: str
    results: list[Result] = field(default_factory=list)
    rtl_equals_golden: bool | None = None

    @property
    def outcome(self) -> str:
        worst = max((ORDER.index(r.outcome) for r in self.results), default=0)
        if self.rtl_equals_golden is False:
            return "crash"
        return ORDER[worst]

    @property
    def signatures(self) -> list[str]:
        return [f"{r.command}: {r.outcome}: {r.signature}" for r in self.results
                if r.outcome not in ("design", "clean")]


def _hwgen_command() -> list[str]:
    script = Path(sys.executable).parent / "hwgen"
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    return [sys.executable, "-m", "hwgen.cli"]


def _show_warning(message, category, filename, lineno, file=None, line=None):
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


def _child(argv: list[str], cwd: Path, tmp: Path, out: Path, err: Path, memory: int):
    """In the forked child: limits, files, the command line's main; never returns."""
    code = 1
    try:
        os.setpgid(0, 0)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        os.chdir(cwd)
        os.environ["TMPDIR"] = str(tmp)
        tempfile.tempdir = None
        fo = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        fe = os.open(err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(fo, 1)
        os.dup2(fe, 2)
        sys.stdout = open(1, "w", closefd=False)
        sys.stderr = open(2, "w", closefd=False)
        # the warnings a plain interpreter shows (not a test runner's capture)
        warnings.resetwarnings()
        for cat in (DeprecationWarning, PendingDeprecationWarning, ImportWarning,
                    ResourceWarning):
            warnings.simplefilter("ignore", cat)
        warnings.showwarning = _show_warning
        try:
            cli.main(argv)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:  # noqa: BLE001 - what the interpreter would print
            traceback.print_exc()
            code = 1
    except BaseException:  # noqa: BLE001
        try:
            traceback.print_exc()
        except BaseException:  # noqa: BLE001
            pass
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _group_cpu(pgid: int) -> float:
    """CPU seconds (user + system, with waited-for children) of the processes in group
    ``pgid``."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        # fields[0] is the state (field 3 of proc(5)); pgrp is field 5, utime..cstime 14-17
        if int(fields[2]) == pgid:
            total += sum(int(x) for x in fields[11:15])
    return total / tick


def _wait(pid: int, poll, timeout: float) -> tuple[int | None, float]:
    """Wait for child ``pid`` (leader of its process group) to end, or kill the group once
    it has used ``timeout`` CPU seconds or ``WALL_FACTOR * timeout`` wall seconds."""
    t0 = time.monotonic()
    next_cpu = t0 + timeout
    while True:
        code = poll()
        if code is not None:
            return code, time.monotonic() - t0
        now = time.monotonic()
        over = now - t0 > WALL_FACTOR * timeout
        if not over and now >= next_cpu:
            over = _group_cpu(pid) > timeout
            next_cpu = now + 0.5
        if over:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            while poll() is None:
                time.sleep(0.01)
            return None, time.monotonic() - t0
        time.sleep(0.005)


def _run_forked(argv, cwd, tmp, out, err, timeout, memory) -> tuple[int | None, float]:
    pid = os.fork()
    if pid == 0:
        _child(argv, cwd, tmp, out, err, memory)
    # the child makes its own group at once; make it here too, so that the group exists
    # before the first CPU check
    try:
        os.setpgid(pid, pid)
    except OSError:
        pass

    def poll():
        done, status = os.waitpid(pid, os.WNOHANG)
        return os.waitstatus_to_exitcode(status) if done else None
    return _wait(pid, poll, timeout)


def _limits(memory: int):
    def apply():
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    return apply


def _run_process(argv, cwd, tmp, out, err, timeout, memory) -> tuple[int | None, float]:
    env = dict(os.environ, TMPDIR=str(tmp))
    with open(out, "wb") as fo, open(err, "wb") as fe:
        p = subprocess.Popen(_hwgen_command() + argv, cwd=cwd, stdout=fo, stderr=fe, env=env,
                             preexec_fn=_limits(memory), start_new_session=True)
        return _wait(p.pid, p.poll, timeout)


_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


def signature(stderr: str) -> str:
    """The exception and the innermost frame of hwgen's own code in a traceback."""
    lines = [s for s in stderr.strip().splitlines() if s.strip()]
    if not lines:
        return "(no output)"
    exc = lines[-1].split(":")[0].strip()
    where = ""
    for m in _FRAME.finditer(stderr):
        path = m.group(1)
        for part in ("/hwgen/", "/dataflow/", "/rtl_templates/", "/sim/", "/boards/"):
            if part in path:
                where = f"{part.strip('/')}/{Path(path).name}:{m.group(3)}"
    return f"{exc} at {where}" if where else exc


def _classify(command: str, code, stderr: str, secs: float, cwd: Path, tmp: Path,
              expect: set[str], out_dir: Path | None) -> Result:
    def res(outcome, sig=""):
        return Result(command, outcome, code, stderr, secs, sig)

    if code is None:
        return res("hang", f"killed after {secs:.0f} s wall (time limit in CPU or wall time)")
    if "Traceback (most recent call last)" in stderr or code not in (0, 2):
        sig = signature(stderr) if "Traceback" in stderr else f"exit {code}: " + \
            (stderr.strip().splitlines() or ["(no output)"])[-1][:120]
        return res("crash", sig)
    left = sorted(os.listdir(cwd))
    temps = sorted(set(os.listdir(tmp)) - OWN_FILES_OF_ONNXRUNTIME)
    if code == 2:
        if not (stderr.startswith("hwgen: error: ") and stderr.count("\n") == 1
                and stderr.endswith("\n")):
            return res("stray", "refusal not one line: " + stderr[:200].replace("\n", "|"))
        if set(left) != expect or temps:
            return res("stray", f"left behind on refusal: {sorted(set(left) - expect)} "
                                f"{temps}")
        return res("clean")
    if stderr:
        return res("stray", "stderr on success: " + stderr[:200].replace("\n", "|"))
    if temps:
        return res("stray", f"temporary files left: {temps}")
    if out_dir is not None:
        if set(left) != expect | {out_dir.name}:
            return res("stray", f"files beside the design: {left}")
        files = sorted(os.listdir(out_dir))
        if len(files) != 3 or "manifest.json" not in files or "design.npz" not in files:
            return res("stray", f"design folder holds {files}")
    elif set(left) != expect:
        return res("stray", f"inspect wrote {left}")
    return res("design")


def run_case(data: bytes, label: str, work: Path, *, compile_args=(),
             timeout: float = TIME_LIMIT, memory: int = MEMORY_LIMIT,
             real_cli: bool = False) -> CaseResult:
    """Write ``data`` as ``work``/case/model.onnx, run inspect and compile on it, classify."""
    case = work / "case"
    tmp = work / "tmp"
    for d in (case, tmp):
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True)
    (case / "model.onnx").write_bytes(data)
    out, err = work / "stdout", work / "stderr"
    run = _run_process if real_cli else _run_forked
    result = CaseResult(label)
    for command, argv, out_dir in (
            ("inspect", ["inspect", "model.onnx"], None),
            ("compile", ["compile", "model.onnx", "-o", "out", *compile_args], case / "out")):
        code, secs = run(argv, case, tmp, out, err, timeout, memory)
        stderr = err.read_text(errors="replace")
        result.results.append(_classify(command, code, stderr, secs, case, tmp,
                                        {"model.onnx"}, out_dir))
        for q in tmp.iterdir():
            shutil.rmtree(q) if q.is_dir() and not q.is_symlink() else q.unlink()
    return result


def check_design(design_dir: Path, frames: int = 3, seed: int = 0) -> bool:
    """RTL (native Verilator simulator) == golden model on ``frames`` input frames: the
    example test set quantized when its shape fits, else random integers of the input's
    type."""
    manifest, ig, _ = design.load(design_dir)
    tin = ig.tensors[ig.input]
    n_el = manifest["input"]["frame_elements"]
    rng = np.random.default_rng(seed)
    lo, hi = tin.qtype.lo, tin.qtype.hi
    xq = rng.integers(lo, hi + 1, size=(frames, n_el), dtype=np.int64)
    y = simrun.run_frames(design_dir, xq, "verilator", jobs=1).outputs_int
    gold = golden.run(ig, xq)[ig.output].reshape(y.shape)
    # the outputs as the model returns them (dequantized, shaped, a host tail run)
    assert api.dequantized_outputs(manifest, ig, y).shape[0] == frames
    return bool(np.array_equal(gold, y))


def fuzz_case(seed: int, index: int, work: Path, *, real_cli: bool = False,
              check_rtl: bool = False, timeout: float = TIME_LIMIT,
              memory: int = MEMORY_LIMIT, keep: Path | None = None) -> dict:
    """Mutant ``(seed, index)`` through inspect and compile (and, if it compiles and
    ``check_rtl``, RTL == golden on 3 frames); a JSON-able summary. A mutant whose outcome is
    not design or clean is saved in ``keep`` (if given) as ``<seed>_<index>.onnx``."""
    m = mutant(seed, index)
    w = Path(work) / f"{seed}_{index}"
    res = run_case(m.data, m.label, w, compile_args=COMPILE_ARGS[index % len(COMPILE_ARGS)],
                   timeout=timeout, memory=memory, real_cli=real_cli)
    rtl = None
    if check_rtl and res.results[-1].outcome == "design":
        try:
            rtl = check_design(w / "case" / "out", 3, seed=index)
        except Exception as e:  # noqa: BLE001 - reported as a failed comparison
            rtl = False
            res.results.append(Result("rtl", "crash", None, traceback.format_exc(), 0.0,
                                      f"{type(e).__name__}: {e}"[:200]))
        res.rtl_equals_golden = rtl
    out = {"index": index, "label": m.label, "outcome": res.outcome,
           "commands": {r.command: r.outcome for r in res.results},
           "seconds": round(sum(r.seconds for r in res.results), 2),
           "rtl_equals_golden": rtl, "signatures": res.signatures}
    if res.outcome not in ("design", "clean"):
        out["stderr"] = {r.command: r.stderr[-3000:] for r in res.results
                         if r.outcome not in ("design", "clean")}
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            (keep / f"{seed}_{index}.onnx").write_bytes(m.data)
    shutil.rmtree(w, ignore_errors=True)
    return out
