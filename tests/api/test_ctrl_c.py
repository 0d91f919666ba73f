"""Ctrl-C (SIGINT) in every phase of a command: while the command line loads, during the
import of the model, the lowering (folding), the elaboration (Amaranth and Yosys) and the
simulation. Each ends with exit code 130 and the one line ``hwgen: interrupted`` (no
traceback), and leaves no output folder and no temporary file behind.

The signal is raised from inside the phase, deterministically: the command runs in a child
interpreter that wraps the phase's function so that its ``n``-th Python call sends SIGINT
to the process (``n`` = 1 lands at the phase's start, larger ``n`` deep inside it).
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "examples" / "digits_mlp_qdq.onnx"
INPUTS = ROOT / "examples" / "digits_test.npz"

#: the child: ``python -c DRIVER phase n hwgen-arguments...``
DRIVER = r"""
import os, signal, sys

phase, n, argv = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
SIGNAL = getattr(signal, os.environ.get("HWGEN_TEST_SIGNAL", "SIGINT"))


def interrupt_after(calls):
    count = [0]

    def profile(frame, event, arg):
        if event == "call":
            count[0] += 1
            if count[0] >= calls:
                sys.setprofile(None)
                os.kill(os.getpid(), SIGNAL)
    return profile


def armed(fn):
    def wrapper(*a, **k):
        sys.setprofile(interrupt_after(n))
        try:
            return fn(*a, **k)
        finally:
            sys.setprofile(None)
    return wrapper


if phase == "start-up":
    class Interrupt:   # SIGINT while the command line's modules load
        def find_spec(self, name, path=None, target=None):
            if name == "hwgen.dataflow.lower":
                os.kill(os.getpid(), signal.SIGINT)
            return None
    sys.meta_path.insert(0, Interrupt())
else:
    from hwgen import api, simrun
    owner, attr = {"import": (api, "load_model"), "lowering": (api, "fold_design"),
                   "elaboration": (api, "to_verilog"),
                   "simulation": (simrun, "run_native")}[phase]
    setattr(owner, attr, armed(getattr(owner, attr)))

from hwgen.console import main
main(argv)
"""

CASES = [("start-up", 1), ("import", 1), ("import", 300), ("lowering", 1),
         ("lowering", 2000), ("elaboration", 1), ("elaboration", 5000),
         ("simulation", 1), ("simulation", 40)]


@pytest.mark.parametrize("phase,n", CASES, ids=[f"{p}-{n}" for p, n in CASES])
def test_ctrl_c_in_phase(tmp_path, phase, n, cache):
    _stop_in_phase(tmp_path, phase, n, "SIGINT", 130, "hwgen: interrupted\n", cache)


@pytest.mark.parametrize("phase,n", [("elaboration", 5000), ("simulation", 40)])
def test_sigterm_in_phase(tmp_path, phase, n, cache):
    """SIGTERM (a job scheduler's or ``kill``'s stop) unwinds as a Ctrl-C does: exit code
    143, one line, nothing left behind (the child tools of ``hwgen build`` are killed on
    the same way out: ``boards.synth.run_tool``)."""
    _stop_in_phase(tmp_path, phase, n, "SIGTERM", 143, "hwgen: terminated\n", cache)


@pytest.fixture(scope="module")
def sim_cache(tmp_path_factory):
    """One simulator cache for the module: the simulation phase runs after the build, so
    its tests share the build instead of each compiling the same simulator."""
    return tmp_path_factory.mktemp("cache")


@pytest.fixture
def cache(request, tmp_path):
    return request.getfixturevalue("sim_cache") if "simulation" in request.node.name \
        else tmp_path / "cache"


def _stop_in_phase(tmp_path, phase, n, sig, code, line, cache):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    out = work / "out"
    if phase == "simulation":
        args = ["verify", str(MODEL), "--input", str(INPUTS), "--count", "3",
                "--target-cycles", "1024", "-o", str(out)]
    else:
        args = ["compile", str(MODEL), "-o", str(out), "--target-cycles", "1024"]
    env = dict(os.environ, TMPDIR=str(tmp), HWGEN_CACHE=str(cache),
               HWGEN_TEST_SIGNAL=sig)
    p = subprocess.run([sys.executable, "-c", DRIVER, phase, str(n), *args], cwd=work,
                       env=env, capture_output=True, text=True, timeout=600)
    shown = f"exit {p.returncode}\n--- stderr ---\n{p.stderr}--- stdout ---\n{p.stdout}"
    assert p.returncode == code, shown
    assert p.stderr == line, shown
    if phase == "simulation":   # verify keeps a design it finished compiling
        assert not out.exists() or sorted(q.name for q in out.iterdir()) == sorted(
            ["digits_mlp_qdq.v", "manifest.json", "design.npz"]), shown
    else:
        assert not out.exists(), shown
    assert sorted(q.name for q in work.iterdir() if q != out) == [], shown
    # onnxruntime's library (imported by verify) keeps a session id in $TMPDIR/.ses
    left = [q.name for q in tmp.iterdir() if q.name != ".ses"]
    assert left == [], f"temporary files left: {left}"
