"""The timing example (``examples/timing/``, a digits CNN that is none of the other
examples) at its ULX3S-85F folding, whose second window generator feeds its matrix unit with
no FIFO in between: the generator's output FIFO hands each slice to a copy of the unit's
issue control (a sliced stream straight between two blocks), and the FIFO before each
generator gives a copy of its valid per copy of the generator's step control. 20 test images
in Verilator: RTL == golden and onnxruntime, the interval exactly the estimate."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

import hwgen

pytestmark = [pytest.mark.slow, pytest.mark.verilator]

EX = Path(__file__).resolve().parents[2] / "examples"


def _ports(text: str, inst: str) -> dict[str, str]:
    body = re.search(rf"^\s+\S+ {inst} \((.*?)\);", text, re.M | re.S).group(1)
    return dict(re.findall(r"\.(\w+)\(([^()]*)\)", body))


def test_wide_cnn_on_sliced_and_copied_handshakes():
    rep = hwgen.verify(EX / "timing" / "digits_cnn_wide_qdq.onnx", EX / "digits_images_test.npz",
                       count=20, simulator="verilator", board="ulx3s-85f")
    assert rep.samples == 20 and rep.rtl_equals_golden and rep.golden_mismatched_samples == 0
    assert rep.ort_identical_fraction == 1.0
    assert rep.sim.interval == rep.compiled.manifest["estimate"]["cycles_per_frame"]
    text = rep.compiled.verilog.read_text()
    swg, unit = _ports(text, "conv2_Conv_swg"), _ports(text, "conv2_Conv")
    assert swg["o__ready_slices"] == unit["i__ready_slices"]
    assert swg["o__valid_slices"] == unit["i__valid_slices"]
    assert re.search(rf"wire \[35:0\] {re.escape(unit['i__ready_slices'])};", text)
    fifo = _ports(text, "fifo_1_MaxPool_output_0_QuantizeLinear_Output")
    assert fifo["o__valid_copies"] == swg["i__valid_copies"]
