"""Models on the layer-sequential engine (``rtl_templates/seq_engine.py``): the device search
puts DS-CNN and the 8-bit TFC on it for the iCEBreaker (no pipeline folding fits the UP5K),
the design verifies bit-exact in Verilator with its weights loaded into SPRAM and its interval
exactly as estimated, the compiled folder rebuilds, Yosys fits it on the device, a fold file
asks for it, and what it cannot run is refused in one line.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import EXAMPLES, run_hwgen

from hwgen import api, design
from hwgen.boards.devices import by_name
from hwgen.boards.fold import ENGINE_METHOD
from hwgen.boards.synth import synthesize
from hwgen.dataflow.golden import run_graph
from hwgen.dataflow.importer import load_model, to_int_graph
from hwgen.dataflow.lower import Folding, lower

MLPERF = EXAMPLES / "mlperf_tiny"
DSCNN = MLPERF / "dscnn_qdq_perchannel.onnx"
TFC = MLPERF / "tfc_bnfused_qdq.onnx"


@pytest.fixture(scope="module")
def dscnn(tmp_path_factory):
    out = tmp_path_factory.mktemp("dscnn") / "d"
    return api.compile(DSCNN, out, board="icebreaker")


def test_dscnn_goes_on_the_engine_for_the_icebreaker(dscnn):
    t = dscnn.target
    assert t["folding"] == ENGINE_METHOD
    assert t["fits"] and t["device"]["id"] == "ice40-up5k"
    assert t["use"]["SPRAM tiles"] == 3        # weights, two feature-map buffers
    assert t["mac_utilisation"] > 0.99         # one multiplier, busy but for the drains
    blocks = dscnn.manifest["layers"]
    assert [b["block"] for b in blocks] == ["seq_engine"]
    assert dscnn.manifest["ports"]["weight_load"]["words"] == 11008
    # the same folder reads back (the folding says "sequential" for every layer)
    _, ig, folding = design.load(dscnn.out_dir)
    assert all(f.sequential and f.spram for f in folding.values())


def test_dscnn_engine_golden_is_the_pipelines(dscnn):
    """The engine's golden function (its layers' own, in sequence) gives what the pipeline's
    golden model gives."""
    _, ig, folding = design.load(dscnn.out_dir)
    eng, pipe = lower(ig, folding), lower(ig)
    x = np.random.default_rng(3).integers(0, 256, size=(4, ig.tensors[ig.input].size))
    assert np.array_equal(run_graph(eng, x)[eng.out_stream], run_graph(pipe, x)[pipe.out_stream])


@pytest.mark.verilator
@pytest.mark.parametrize("model,data,count", [(DSCNN, "dscnn_test.npz", 2),
                                              (TFC, "tfc_test.npz", 4)])
def test_engine_verifies_bit_exact(model, data, count, tmp_path):
    rep = api.verify(model, MLPERF / data, count=count, board="icebreaker",
                     out_dir=tmp_path / "v")
    assert rep.compiled.target["folding"] == ENGINE_METHOD
    assert rep.ok and rep.golden_mismatched_samples == 0
    assert rep.ort_max_step_diff == 0
    assert rep.sim.interval == rep.estimate["cycles_per_frame"]
    assert rep.sim.latency == rep.estimate["latency_cycles"]
    assert rep.sim.load_cycles == rep.compiled.manifest["ports"]["weight_load"]["words"]


def test_dscnn_engine_fits_per_yosys(dscnn):
    m = dscnn.manifest
    r = synthesize(dscnn.verilog.read_text(), m["top"], "ice40")
    dev = by_name("ice40-up5k")
    assert r.spram == 3 and r.dsp == 2
    assert r.lut4 <= dev.luts * 0.85 and r.ff <= dev.ffs * 0.85
    assert r.bram <= dev.bram_blocks * 0.85
    est = m["estimate"]["resources"]["ice40"]
    assert abs(r.lut4 - est["lut4"]) <= 0.15 * r.lut4
    assert abs(r.ff - est["ff"]) <= 0.15 * r.ff
    assert (r.dsp, r.bram, r.spram) == (est["dsp"], est["bram"], est["spram"])


def test_fold_file_asks_for_the_engine(tmp_path):
    ig = to_int_graph(load_model(TFC))
    fold = {op.name: {"pe": 1, "simd": 1, "sequential": True} for op in ig.ops}
    path = tmp_path / "fold.json"
    path.write_text(json.dumps(fold))
    r = run_hwgen("compile", TFC, "--device", "ecp5-25f", "--fold", path, "-o", tmp_path / "o")
    assert r.returncode == 0, r.stderr
    m = json.loads((tmp_path / "o" / "manifest.json").read_text())
    assert [b["block"] for b in m["layers"]] == ["seq_engine"]
    assert "weight_load" not in m["ports"]          # on ECP5 the weights are a ROM
    # one layer left out of the engine: one line, exit 2, nothing written
    first = next(iter(fold))
    fold[first]["sequential"] = False
    path.write_text(json.dumps(fold))
    r = run_hwgen("compile", TFC, "--device", "ecp5-25f", "--fold", path, "-o", tmp_path / "p")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "every layer or none" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "p").exists()


def test_engine_refuses_a_branching_model():
    ig = to_int_graph(load_model(EXAMPLES / "digits_resnet_qdq.onnx"))
    fold = {op.name: Folding(sequential=True) for op in ig.ops}
    with pytest.raises(Exception, match="chain of layers|has no"):
        lower(ig, fold)
