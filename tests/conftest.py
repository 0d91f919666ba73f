"""Shared fixtures and helpers; the folder map and the test markers.

Folders, one per layer of the project (modules import each other by name: ``pyproject.toml``
puts ``tests/`` and every folder on ``sys.path``, so a module's basename is unique):

``dataflow/``
    ONNX import, the integer graph, layout, lowering, the golden model, quantization
    formats (QDQ, QOperator, QONNX) and the operators' paths to RTL;
``blocks/``
    the block library (``rtl_templates/``): each unit against its golden and cost model,
    memory, FIFOs, the output stage, conformance of every block kind, resources;
``sim/``
    the simulation back ends: Verilator (cocotb and native benches), batches, traces,
    the link bench, exported testbenches;
``boards/``
    devices, boards, device folding, synthesis, the board top, UART, host link, flash;
``api/``
    the public API and command line: build, cache, inspect, report, cluster, progress,
    IP-XACT, errors and interrupts, the docs and the import layering;
``e2e/``
    example and field models end to end, both exporters, FINN models, the fuzzer.

Shared helpers stay in ``tests/``: this file, ``modelgen.py`` (small float and QDQ models),
``qonnx_models.py`` (QONNX models), ``fuzz_mutants.py`` and ``fuzz_run.py`` (the fuzzer), and
``data/``.

Markers (declared in ``pyproject.toml``; select with ``-m``; ``pytest -m "not slow and not
verilator and not sim"`` is the fast set):

``verilator``
    builds or runs a Verilator simulation (a C++ build of the design: seconds to minutes);
``sim``
    simulates RTL in Amaranth's simulator (seconds per test);
``slow``
    takes more than about ten seconds on its own (end-to-end runs, large grids, model zoos);
``synth``
    runs Yosys or nextpnr.

Every module says which of its tests carry which marker, in its own source: ``pytestmark``
for a marker of all its tests, ``@pytest.mark.<name>`` on a test, ``pytest.param(...,
marks=...)`` on the parameters of one test that differ (a test run in both simulators).
Nothing here assigns markers from test names: a test that simulates marks itself, and one
that simulates through the API's or the command line's default back end runs Verilator.
"""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from hwgen.dataflow import golden
from hwgen.reference import reference_session_options
from hwgen.rtl_templates import block as block_registry

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"

# The suite compiles hundreds of simulators and runs each for a few frames: build them at
# -O0 (about 60 % of the build time, slower runs that these short runs do not notice).
# Child processes (the command line under test) inherit it.
os.environ.setdefault("HWGEN_SIM_OPT", "-O0")


def hwgen_command() -> list[str]:
    """The ``hwgen`` console command of this interpreter's environment (or the module)."""
    script = Path(sys.executable).parent / ("hwgen.exe" if os.name == "nt" else "hwgen")
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    return [sys.executable, "-m", "hwgen.cli"]


def run_hwgen(*args, cwd=None, timeout=600) -> subprocess.CompletedProcess:
    """Run the command line as a user does: ``run_hwgen("compile", model, "-o", out)``."""
    return subprocess.run(hwgen_command() + [str(a) for a in args], capture_output=True,
                          text=True, cwd=cwd, timeout=timeout)


@pytest.fixture
def cli():
    """The command line as a user runs it (see :func:`run_hwgen`)."""
    return run_hwgen


def save_model(model: onnx.ModelProto, path: Path) -> Path:
    """Serialize ``model`` to ``path`` (its folder created; no checker) and return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(model.SerializeToString())
    return path


def corrupt_fc1_golden(monkeypatch) -> None:
    """A fault injected into the digits MLP: the MVAU golden face of fc1 (32×32 weights) is
    one too high at frame 2, element 5, in this process; the hardware is unchanged, so a
    per-stream trace must name fc1's output there."""
    spec = block_registry.block_spec("mvau")

    def corrupt(p, xs):
        y = spec.golden(p, xs)
        if p.weights.shape == (32, 32):      # fc1 only (fc0 is 32x64, fc2 10x32)
            y = np.array(y, copy=True)
            y[2, 5] += 1
        return y

    monkeypatch.setitem(block_registry._BLOCKS, "mvau",
                        dataclasses.replace(spec, golden=corrupt))


def vcd_header(path: Path) -> str:
    """The declarations of a VCD file: its text up to ``$enddefinitions`` (which it must
    have)."""
    text = path.read_text()
    assert "$enddefinitions" in text, f"{path}: no $enddefinitions"
    return text[:text.index("$enddefinitions")]


def golden_vs_onnxruntime(ig, model: Path, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(|golden − onnxruntime| per output element in output quantization steps, golden
    outputs) of integer graph ``ig`` imported from ``model`` on float inputs ``x`` [N, ...]
    (onnxruntime on one thread)."""
    import onnxruntime as ort

    n = x.shape[0]
    xq = ig.quantize_input(x.reshape(n, -1))
    y = ig.from_stream(golden.run(ig, xq, [ig.output])[ig.output].reshape(n, -1))
    so = reference_session_options()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"])
    ref = sess.run(None, {sess.get_inputs()[0].name: x})[0].reshape(n, -1)
    ref = ig.tensors[ig.output].quantize(ref) if ig.output_dequantized else \
        ref.astype(np.int64)
    return np.abs(ref - y), y
