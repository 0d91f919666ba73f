"""``verify --trace`` and ``--vcd`` with Amaranth's simulator: the same per-stream report as
the native bench's, with no C++ build.

The digits MLP at the device's folding simulates in a few seconds for three frames.
"""
from __future__ import annotations

import numpy as np
import pytest
from amaranth.hdl import Fragment
from conftest import EXAMPLES, corrupt_fc1_golden, run_hwgen, vcd_header

import hwgen
from hwgen import api, design
from hwgen.assemble import build_observed
from hwgen.dataflow.lower import lower
from hwgen.simrun import WaveRequest, stream_taps

pytestmark = pytest.mark.sim

MLP = EXAMPLES / "digits_mlp_qdq.onnx"
DATA = EXAMPLES / "digits_test.npz"


@pytest.fixture(scope="module")
def x():
    return np.load(DATA)["input"][:3].astype(np.float32)


def test_amaranth_trace_names_the_block_whose_golden_face_is_wrong(monkeypatch, x):
    corrupt_fc1_golden(monkeypatch)
    rep = api.verify(MLP, x, simulator="amaranth", trace=True, chunk=2, jobs=1, stall=0.2,
                     board="ulx3s-85f")
    assert rep.rtl_equals_golden and not rep.trace.ok and not rep.ok
    first = rep.trace.first
    assert rep.trace.first_block == "fc1" and first.kind == "mvau"
    assert (first.frame, first.element) == (2, 5)
    assert first.golden_value == first.rtl_value + 1
    assert first.chunk_start == 2 and first.cycle is not None   # frame 2 opens chunk 2
    upstream = [c for c in rep.trace.streams if c.producer in (None, "fc0")]
    assert upstream and all(c.ok for c in upstream)
    assert "first diverging block fc1" in rep.trace.summary()


def test_amaranth_trace_of_a_correct_design_and_its_vcd(tmp_path, x):
    vcd = tmp_path / "w.vcd"
    rep = api.verify(MLP, x, simulator="amaranth", trace=True, chunk=2, jobs=1, stall=0.2,
                     wave=WaveRequest(vcd, "vcd", 0, 2), board="ulx3s-85f")
    manifest = rep.compiled.manifest
    assert rep.ok and rep.trace.ok
    assert {c.stream for c in rep.trace.streams} == set(manifest["streams"])
    for c in rep.trace.streams:
        assert c.rtl_elements == c.golden_elements == 3 * c.elements_per_frame
    head = vcd_header(vcd)
    for s in manifest["streams"]:
        for part in ("valid", "ready", "payload"):
            assert f" {s}__{part} " in head, (s, part)
    assert [p.name for p in tmp_path.iterdir()] == ["w.vcd"]


def test_taps_without_building_the_observed_design(tmp_path):
    hwgen.compile(MLP, tmp_path / "d", board="ulx3s-85f")
    _, ig, folding = design.load(tmp_path / "d")
    dfg = lower(ig, folding)
    obs = build_observed(dfg)
    assert stream_taps(dfg) == obs.taps
    Fragment.get(obs, None)  # used: no warning about an unelaborated component


def test_amaranth_waveforms_are_vcd_and_cocotb_has_no_taps(tmp_path):
    d = tmp_path / "d"
    hwgen.compile(MLP, d, board="ulx3s-85f")
    r = run_hwgen("simulate", d, "--input", DATA, "--count", 1, "--simulator", "amaranth",
                  "--fst", tmp_path / "w.fst", "-o", tmp_path / "y.npy")
    assert r.returncode == 2 and r.stderr.startswith("hwgen: error: --fst: Amaranth")
    with pytest.raises(hwgen.HwgenError, match="not cocotb"):
        api.simulate(d, np.zeros((1, 64), np.float32), "cocotb", observe=True)
