"""docs/python_api.md: its example, every ``python`` block in order as one script, runs as
written from a folder laid out like the repository (``examples/`` beside it), and the result
objects print as short summaries."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest
from conftest import ROOT

pytestmark = pytest.mark.verilator

DOC = ROOT / "docs" / "python_api.md"


def doc_code() -> str:
    return "\n".join(re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S))


def test_python_api_doc_example_runs_verilator(tmp_path):
    code = doc_code()
    assert "hwgen.verify(" in code and "hwgen.simulate(" in code
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    # the result objects print in a line each (their reprs), and the temporary design of
    # verify is gone once the report is
    code += ("\nimport gc\nfor r in (ins, res, sim, rep):\n    print('REPR', len(repr(r)))\n"
             "gone = rep.compiled.out_dir\ndel rep, r\ngc.collect()\n"
             "print('GONE', not gone.exists())\n")
    run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    out = run.stdout
    assert "InspectReport(model='digits_mlp_qdq.onnx', ok=True" in out
    assert "CompileResult(top='digits_mlp_qdq', out_dir='build/digits'" in out
    assert "SimulationResult(samples=8, simulator='verilator', outputs=float32[8, 10]" in out
    assert "VerifyReport(ok=True, samples=8, rtl_equals_golden=True" in out
    assert "accuracy against the labels: 1.0" in out or "accuracy against the labels: 0." \
        in out
    sizes = [int(n) for n in re.findall(r"^REPR (\d+)$", out, re.M)]
    assert len(sizes) == 4 and max(sizes) < 500, sizes
    assert "GONE True" in out
    assert (tmp_path / "build" / "digits" / "manifest.json").is_file()
    html = (tmp_path / "build" / "report.html").read_text()
    assert "accuracy against the labels" in html
