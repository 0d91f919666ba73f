"""Issue criteria for the example CNNs (digits CNN and the small ResNet), in every format:
QDQ per-tensor, QDQ per-channel and QOperator.

* 200 test images in Verilator: RTL == golden on every image; ≥ 99.9 % of output elements
  identical to onnxruntime, none more than one step apart; top-1 identical on ≥ 99.5 %;
* the measured steady-state interval is within 5 % of the bottleneck bound in the manifest,
  and the latency matches the estimate within 5 %;
* the residual network streams 100 frames back to back under random stalls on both AXI
  streams without deadlock, with the same outputs as without stalls.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import hwgen

pytestmark = pytest.mark.slow

EX = Path(__file__).resolve().parents[2] / "examples"
IMAGES = EX / "digits_images_test.npz"
MODELS = [f"digits_{net}_{fmt}.onnx" for net in ("cnn", "resnet")
          for fmt in ("qdq", "qdq_perchannel", "qop")]


@pytest.mark.verilator
@pytest.mark.parametrize("model", MODELS)
def test_verify_200_images(model):
    """Each format of both networks on 200 images; the per-tensor QDQ ones folded for the
    ULX3S-85F (the most parallel folding), the other formats of the same networks folded for
    the ULX3S-25F (what the default, the smallest board they fit, picks; a quicker simulator
    build; the format is what they test)."""
    board = "ulx3s-85f" if model.endswith("_qdq.onnx") else "ulx3s-25f"
    rep = hwgen.verify(EX / model, IMAGES, count=200, simulator="verilator", board=board)
    assert rep.samples == 200
    assert rep.rtl_equals_golden and rep.golden_mismatched_samples == 0
    assert rep.ort_identical_fraction >= 0.999
    assert rep.ort_max_step_diff <= 1
    assert rep.top1_agreement >= 0.995
    est = rep.compiled.manifest["estimate"]
    bound = max(layer["estimate"]["cycles"] for layer in rep.compiled.manifest["layers"])
    assert est["cycles_per_frame"] == bound
    assert abs(rep.sim.interval - bound) <= 0.05 * bound
    assert abs(rep.sim.latency - est["latency_cycles"]) <= 0.05 * est["latency_cycles"]


@pytest.mark.verilator
def test_resnet_100_frames_under_stalls(tmp_path):
    out = tmp_path / "resnet"
    comp = hwgen.compile(EX / "digits_resnet_qdq.onnx", out, board="ulx3s-85f")
    kinds = [layer["block"] for layer in comp.manifest["layers"]]
    assert "fork" in kinds and "add" in kinds        # a real fork/join
    x = np.load(IMAGES)["input"][:100]
    calm = hwgen.simulate(out, x, simulator="verilator")
    stalled = hwgen.simulate(out, x, simulator="verilator", stall=0.3, seed=3)
    assert np.array_equal(stalled.outputs_int, calm.outputs_int)
    # the stalls really happened (they cost cycles), yet the 64 input and 10 output beats a
    # frame are far from the 1024-cycle bottleneck, so the interval absorbs them (the run's
    # total too, when the slack hides the last stalls)
    assert stalled.cycles != calm.cycles or stalled.latency != calm.latency
    assert abs(stalled.interval - calm.interval) <= 0.05 * calm.interval


def test_target_cycles_sets_bottleneck(tmp_path):
    """Each layer takes the smallest PE·SIMD meeting the target, or its fastest folding when
    none does; the manifest's bottleneck is the slowest block."""
    from hwgen.dataflow.importer import to_int_graph
    from hwgen.dataflow.loader import load_model

    ig = to_int_graph(load_model(EX / "digits_cnn_qdq.onnx"))
    for target in (4096, 512):
        comp = hwgen.compile(EX / "digits_cnn_qdq.onnx", tmp_path / str(target),
                             target_cycles=target)
        m = comp.manifest
        assert m["estimate"]["cycles_per_frame"] == max(l["estimate"]["cycles"]
                                                         for l in m["layers"])
        for op in ig.ops:
            space = op.fold_space(ig)
            pes, simds, cycles = space.pe, space.simd, space.cycles
            f = m["folding"][op.name]
            got = cycles(f["pe"], f["simd"])
            options = [(pe * simd, cycles(pe, simd)) for pe in pes for simd in simds]
            if got <= target:
                assert all(size >= f["pe"] * f["simd"] for size, n in options if n <= target)
            else:
                assert got == min(n for _, n in options)
