"""FINN's TFC network at w1a1 and w2a2, as Brevitas exports it (``examples/finn/``, made by
``examples/finn/make_models.py``; no torch is needed here: the QONNX files are committed).

* The import: input preprocessing (``2x - 1``) on the host with the 8-bit narrow input
  quantizer, then per layer a matrix–vector unit writing its accumulator and a thresholding
  block for BatchNormalization → BipolarQuant (w1a1) or → 2-bit Quant (w2a2), the last
  layer with its requantizer.
* golden == qonnx's execution (``qonnx.core.onnx_exec``), bit for bit, on the 100 test
  inputs of each model.
* RTL == golden on a few inputs in Amaranth's simulator (the whole network, folded to
  1024 cycles per frame).
"""
from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest

from hwgen import api
from hwgen.dataflow import golden
from hwgen.dataflow.importer import to_int_graph
from hwgen.dataflow.loader import load_model
from hwgen.dataflow.ops_qonnx import qonnx_reference

FINN = Path(__file__).resolve().parents[2] / "examples" / "finn"
TFC = ["tfc-w1a1", "tfc-w2a2"]


@functools.lru_cache(maxsize=None)
def _ig(name: str):
    return to_int_graph(load_model(FINN / f"{name}.onnx"))


def _inputs(name: str) -> np.ndarray:
    z = np.load(FINN / f"{name}_test.npz")
    return z[z.files[0]]


@pytest.mark.parametrize("name", TFC)
def test_tfc_structure(name):
    ig = _ig(name)
    kinds = [type(op).__name__ for op in ig.ops]
    assert kinds == ["MatVec", "Thresholding"] * 3 + ["MatVec"]
    act = "bipolar" if name.endswith("w1a1") else "int2"
    assert [ig.tensors[op.output].qtype.name for op in ig.ops[1:-1:2]] == [act] * 3
    assert [p.op for p in ig.input_pre] == ["Mul", "Sub"]
    assert ig.input_bounds == (-127, 127)
    th = ig.ops[1]
    assert th.thresholds.shape == (64, 1 if act == "bipolar" else 2)


@pytest.mark.parametrize("name", TFC)
def test_tfc_golden_equals_qonnx(name):
    pytest.importorskip("qonnx")
    ig = _ig(name)
    x = _inputs(name)
    n = x.shape[0]
    assert n == 100
    y = ig.from_stream(golden.run(ig, ig.quantize_input(x.reshape(n, -1)))[ig.output]
                       .reshape(n, -1))
    ref = qonnx_reference(FINN / f"{name}.onnx", x).reshape(n, -1)
    t = ig.tensors[ig.output]
    want = np.rint(ref / np.float32(t.scale)).astype(np.int64) + t.zero_point
    assert np.array_equal(y, want)
    assert len(np.unique(y.argmax(axis=1))) > 1          # not a constant network


@pytest.mark.sim
@pytest.mark.parametrize("name", TFC)
def test_tfc_rtl_equals_golden(name):
    rep = api.verify(FINN / f"{name}.onnx", _inputs(name)[:2], target_cycles=1024,
                     simulator="amaranth")
    assert rep.rtl_equals_golden and rep.golden_mismatched_samples == 0
    assert rep.ort_identical_fraction == 1.0             # qonnx is the reference here
