"""The fuzzer's fixed seed set (``benchmarks/fuzz.py`` runs the long one): seeded mutants of
the example models through ``hwgen inspect`` and ``hwgen compile`` (``fuzz_run.fuzz_case``:
each command in a forked child under a time and a memory limit; every ``CLI_EVERY``-th case
as real subprocesses of the console command). No mutant may crash, hang or leave stray
output: every command ends with a design or report, or with exit code 2 and one line.
The first mutant that compiles is also simulated (native Verilator) against its golden model.
"""
from __future__ import annotations

import pytest
from fuzz_run import fuzz_case

SEED = 1
COUNT = 180
CHUNKS = 6
CLI_EVERY = 40


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_fuzz_seed_set(tmp_path, chunk):
    per = COUNT // CHUNKS
    bad = []
    for index in range(chunk * per, (chunk + 1) * per):
        r = fuzz_case(SEED, index, tmp_path, real_cli=index % CLI_EVERY == 0)
        if r["outcome"] not in ("design", "clean"):
            bad.append(f"{r['label']}\n    " + "\n    ".join(r["signatures"]))
    assert not bad, "\n".join(bad)


def test_fuzz_compiled_mutant_matches_golden(tmp_path):
    """RTL == golden on 3 frames for the first mutants of the set that compile."""
    checked = 0
    for index in range(COUNT):
        r = fuzz_case(SEED, index, tmp_path, check_rtl=True)
        if r["rtl_equals_golden"] is not None:
            assert r["rtl_equals_golden"], r
            checked += 1
            if checked == 1:
                return
    pytest.fail("no mutant of the set compiled")


def test_time_limit_counts_cpu_not_waiting(tmp_path):
    """A command that waits (a starved case on a busy machine) past the CPU limit is not a
    hang; one that computes past it is killed; the wall-time backstop kills any."""
    import subprocess
    import sys

    import fuzz_run

    def run(code, limit):
        p = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
        return fuzz_run._wait(p.pid, p.poll, limit)

    # it ran to its end (the limit's wall-time clock starts a little after the child's own)
    code, secs = run("import time; time.sleep(1.5)", 0.5)
    assert code == 0 and secs >= 1.0
    code, secs = run("while True: pass", 0.5)
    assert code is None and secs < 0.5 * fuzz_run.WALL_FACTOR
    code, secs = run("import time; time.sleep(60)", 0.2)
    assert code is None and 0.2 * fuzz_run.WALL_FACTOR <= secs < 30


def test_onnxruntime_session_file_is_not_stray(tmp_path):
    """onnxruntime's library writes ``$TMPDIR/.ses`` (a session id) the first time a process
    creates a session (inspect of a table activation does): not a file of hwgen's. Any
    other file left there is."""
    import fuzz_run

    cwd, tmp = tmp_path / "case", tmp_path / "tmp"
    cwd.mkdir()
    tmp.mkdir()
    (cwd / "model.onnx").write_bytes(b"")
    (tmp / ".ses").write_text("1\n")
    r = fuzz_run._classify("inspect", 0, "", 1.0, cwd, tmp, {"model.onnx"}, None)
    assert r.outcome == "design", r
    (tmp / "hwgen-x").mkdir()
    r = fuzz_run._classify("inspect", 0, "", 1.0, cwd, tmp, {"model.onnx"}, None)
    assert r.outcome == "stray" and "hwgen-x" in r.signature, r
