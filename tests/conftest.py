"""Shared fixtures and the test markers.

Markers (select with ``-m``; ``pytest -m "not slow and not verilator and not sim"`` is the fast
set, about a minute on two cores):

``verilator``
    builds or runs a Verilator simulation (a C++ build of the design: seconds to minutes);
``sim``
    simulates RTL in Amaranth's simulator (seconds per test);
``slow``
    takes more than about ten seconds on its own (end-to-end runs, large grids, model zoos);
``synth``
    runs Yosys or nextpnr.

Tests whose id names the Verilator back end are marked ``verilator`` automatically, and so are
the tests of modules that simulate through the API's default back end (Verilator); tests whose
id names Amaranth's simulator, stalls, cycle measurements or an RTL comparison are marked
``sim``.
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

#: modules whose simulations run through the API or CLI with the default back end
VERILATOR_MODULES = {"test_sim_verilator", "test_digits_e2e", "test_cnn_e2e",
                     "test_examples_cnn", "test_front_door", "test_cli_errors"}
#: words in a test id that mean an RTL simulation in Amaranth's simulator
SIM_WORDS = ("amaranth", "rtl_equals_golden", "stalls", "golden_and_cycles", "_rtl")
#: modules or tests that take long (see ``pytest --durations``)
SLOW = ("test_digits_e2e.py", "test_cnn_e2e.py", "test_examples_cnn.py",
        "test_inspect.py::test_light_model_zoo_complete_report",
        "test_inspect.py::test_compile_refuses_a_model_no_device_holds",
        "test_inspect_agrees.py",
        "test_inspect.py::test_examples_map_completely_with_the_manifest_estimates",
        "test_inspect.py::test_examples_with_folding_and_target",
        "test_qonnx.py::test_manifest_multipliers_are_narrow",
        "test_join_blocks.py::test_add_golden_vs_onnxruntime",
        "test_join_blocks.py::test_add_golden_matches_exact_rational",
        "test_exporters.py::test_golden_matches_onnxruntime[mobilenet",
        "test_exporters.py::test_golden_matches_onnxruntime[resnet8")


def pytest_collection_modifyitems(config, items):
    for item in items:
        name = item.nodeid.split("/")[-1]
        module = name.split(".py")[0]
        if "verilator" in item.nodeid.lower() or module in VERILATOR_MODULES:
            item.add_marker(pytest.mark.verilator)
        if any(name.startswith(s) for s in SLOW):
            item.add_marker(pytest.mark.slow)
        if any(w in item.nodeid.lower() for w in SIM_WORDS):
            item.add_marker(pytest.mark.sim)


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
