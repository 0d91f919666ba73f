"""The issue's end-to-end criteria on the shipped digits MLP, through the public API.

* per-tensor and per-channel QDQ models, 200 test images, Verilator: RTL == golden on every
  image; ≥ 99.9 % of output elements identical to onnxruntime, none more than one step apart;
  top-1 identical on every image;
* the measured steady-state interval is within 5 % of the slowest layer's (MH/PE)·(MW/SIMD),
  and the manifest's estimate says the same; the measured latency equals the estimate;
* the same in Amaranth's simulator with a folded design, and under random stalls.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import hwgen

pytestmark = pytest.mark.slow

EX = Path(__file__).resolve().parents[2] / "examples"
TEST_SET = EX / "digits_test.npz"
MODELS = ["digits_mlp_qdq.onnx", "digits_mlp_qdq_perchannel.onnx"]


def _slowest_layer(manifest: dict) -> int:
    worst = 0
    for layer in manifest["layers"]:
        if layer["block"] == "mvau":
            mh, mw = layer["matrix"]["rows_mh"], layer["matrix"]["cols_mw"]
            f = layer["folding"]
            worst = max(worst, (mh // f["pe"]) * (mw // f["simd"]))
    return worst


def _check(rep, n: int):
    assert rep.samples == n
    assert rep.rtl_equals_golden and rep.golden_mismatched_samples == 0
    assert rep.ort_identical_fraction >= 0.999
    assert rep.ort_max_step_diff <= 1
    assert rep.top1_agreement == 1.0
    manifest = rep.compiled.manifest
    bound = _slowest_layer(manifest)
    assert manifest["estimate"]["cycles_per_frame"] == bound
    assert abs(rep.sim.interval - bound) <= 0.05 * bound
    assert rep.sim.latency == manifest["estimate"]["latency_cycles"]


def verify_folded(tmp_path, model: str, fold: dict, count: int = 50):
    """``hwgen.verify`` of example ``model`` on ``count`` digits in Verilator with fold file
    ``fold`` (written to ``tmp_path``), checked by :func:`_check`; the manifest keeps the
    folding. Returns the report and the fold file's path."""
    path = tmp_path / "fold.json"
    path.write_text(json.dumps(fold))
    rep = hwgen.verify(EX / model, TEST_SET, count=count, simulator="verilator", fold=path)
    _check(rep, count)
    assert rep.compiled.manifest["folding"] == fold
    return rep, path


@pytest.mark.verilator
@pytest.mark.parametrize("model", MODELS)
def test_verify_200_images_verilator(model):
    rep = hwgen.verify(EX / model, TEST_SET, count=200, simulator="verilator",
                       board="ulx3s-85f")
    _check(rep, 200)


@pytest.mark.sim
@pytest.mark.parametrize("model", MODELS)
def test_verify_folded_amaranth(model):
    # Amaranth's simulator is slow on the per-channel requantizers' pipelines: 40 digits
    # here, the 200 run under Verilator above
    rep = hwgen.verify(EX / model, TEST_SET, count=40, simulator="amaranth",
                       fold=EX / "digits_mlp_fold.json")
    _check(rep, 40)
    assert rep.compiled.manifest["estimate"]["cycles_per_frame"] == 64


@pytest.mark.verilator
@pytest.mark.sim
def test_stalls_lose_nothing(tmp_path):
    out = tmp_path / "d"
    hwgen.compile(EX / MODELS[1], out, fold=EX / "digits_mlp_fold.json")
    x = np.load(TEST_SET)["input"][:40]
    calm = hwgen.simulate(out, x, simulator="verilator")
    for sim in ("verilator", "amaranth"):
        stalled = hwgen.simulate(out, x, simulator=sim, stall=0.4, seed=7)
        assert np.array_equal(stalled.outputs_int, calm.outputs_int)
        # the stalls really happened (they cost cycles); 8 input and 5 output beats a frame
        # leave the 64-cycle bottleneck enough slack to absorb most of them
        assert stalled.cycles != calm.cycles and stalled.latency != calm.latency


@pytest.mark.sim
def test_simulate_writes_onnx_style_outputs(tmp_path):
    out = tmp_path / "d"
    res = hwgen.compile(EX / MODELS[0], out, board="ulx3s-85f")
    m = json.loads((out / "manifest.json").read_text())
    assert m == res.manifest
    x = np.load(TEST_SET)["input"][:3]
    sim = hwgen.simulate(out, x, simulator="amaranth")
    assert sim.outputs.shape == (3, 10) and sim.outputs.dtype == np.float32
    o = m["output"]
    assert np.array_equal(
        sim.outputs,
        ((sim.outputs_int - o["zero_point"]) * np.float32(o["scale"])).astype(np.float32),
    )


@pytest.mark.sim
def test_unnamed_nodes_compile_and_verify(tmp_path):
    """ONNX node names are optional: layers are then named '#k (Op)', which must still make
    valid Verilog instance names."""
    import onnx
    m = onnx.load(EX / MODELS[0])
    for n in m.graph.node:
        n.name = ""
    path = tmp_path / "unnamed.onnx"
    onnx.save(m, path)
    rep = hwgen.verify(path, TEST_SET, count=3, simulator="amaranth", board="ulx3s-85f")
    assert rep.rtl_equals_golden and rep.ort_identical_fraction == 1.0
    assert rep.compiled.manifest["estimate"]["bottleneck"].startswith("#")
