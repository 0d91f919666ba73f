"""Depthwise convolution folded over kernel positions (SIMD > 1): the window-parallel
generator in depthwise order feeding a vector unit that takes SIMD kernel positions of PE
channels per beat.

For a strided depthwise convolution (and one with a channel multiplier) at several (PE,
SIMD) foldings: the fold space offers SIMD over the kernel positions, the lowering picks the
right generator, the golden model of the folded graph equals the unfolded one (which
``test_cnn_ops`` / ``test_conv_family`` hold against onnxruntime), the RTL equals it with
random stalls, and back to back frames leave at the interval the cost model states. The
device search takes the new foldings up on DS-CNN.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_cnn_ops import Net, assert_agrees, golden_and_ort, import_, m_depthwise_s2
from test_conv_family import m_depthwise_multiplier, quantized

from hwgen.assemble import build_top
from hwgen.boards.fold import fold_for_device, resolve_target
from hwgen.dataflow import golden
from hwgen.dataflow.importer import to_int_graph
from hwgen.dataflow.loader import load_model
from hwgen.dataflow.lower import Folding, choose_folding, lower
from hwgen.sim.amaranth_sim import run_amaranth
from hwgen.sim.base import StreamJob
from hwgen.sim.packing import beats_to_frames, frames_to_beats

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
FRAMES = 3

def m_separable(seed):
    """Depthwise 3x3 → pointwise 1x1 (stride 1, unpadded: no window generator) → Relu."""
    n = Net((6, 6, 5), seed)
    d = n.relu(n.conv("x", 6, 3, "dw", group=6, pads=[1, 1, 1, 1]), "dw_relu")
    return n, n.relu(n.conv(d, 8, 1, "pw"), "pw_relu")


# name: (builder, foldings (PE, SIMD))
CASES = {
    "depthwise_s2": (m_depthwise_s2, [(1, 3), (2, 9), (4, 9)]),
    "depthwise_multiplier_2": (m_depthwise_multiplier, [(2, 3), (4, 9)]),
    "separable": (m_separable, [(3, 3), (6, 9)]),
}


def _graph(name):
    qm, x = quantized(CASES[name][0])
    ig = import_(qm)
    assert_agrees(ig, qm, x, min_levels=4)
    xq, y, _, _ = golden_and_ort(ig, qm, x)
    return ig, xq[:FRAMES], y[:FRAMES]


@pytest.mark.parametrize("name", list(CASES))
def test_fold_space_offers_kernel_positions(name):
    ig, _, _ = _graph(name)
    conv = ig.ops[0]
    space = conv.fold_space(ig)
    assert conv.depthwise and tuple(space.simd) == (1, 3, 9)
    assert tuple(space.pe) == tuple(d for d in range(1, 9) if conv.window.in_shape[0] % d == 0)
    c = conv.window.in_shape[0]
    px = int(np.prod(conv.window.out_hw))
    assert space.cycles(1, 1) == px * 9 * c
    # the vector unit's steps, or the generator's walk of the padded map when longer
    _, h, w = conv.window.in_shape
    t, l, b, r = conv.window.pads
    assert space.cycles(c, 9) == max(px, (h + t + b) * (w + l + r))


@pytest.mark.sim
@pytest.mark.parametrize("name", list(CASES))
def test_rtl_equals_golden_at_kernel_parallel_foldings(name):
    ig, xq, y = _graph(name)
    conv = ig.ops[0]
    for pe, simd in CASES[name][1]:
        dfg = lower(ig, folding={conv.name: Folding(pe, simd)})
        kinds = {b.kind: b for b in dfg.blocks}
        # a 1x1 window over every pixel needs no generator: one per depthwise layer only
        assert sum(b.kind in ("swg", "swg_par") for b in dfg.blocks) == 1
        assert "swg_par" in kinds and kinds["swg_par"].params.depthwise_pe == pe
        vvau = kinds["vvau"].params
        assert (vvau.pe, vvau.simd) == (pe, simd)
        assert dfg.streams[kinds["vvau"].inputs[0]].per_beat == pe * simd
        # the folded graph's golden model is the unfolded one
        assert np.array_equal(golden.run_graph(dfg, xq)[dfg.out_stream], y)
        est = dfg.estimate()
        assert est["cycles_per_frame"] == max(
            op.fold_space(ig).cycles(*((pe, simd) if op is conv else (1, 1))) for op in ig.ops)
        top = build_top(dfg)
        beats, last = frames_to_beats(xq, dfg.input.qtype, dfg.in_per_beat)
        per_frame = dfg.output.size // dfg.out_per_beat
        n_out = FRAMES * per_frame
        res = run_amaranth(top, StreamJob(top.in_width, top.out_width, beats, last, n_out,
                                          stall_in=0.25, stall_out=0.3, seed=pe * 10 + simd))
        out = beats_to_frames(res.out_beats, dfg.output.qtype, dfg.out_per_beat,
                              dfg.output.size)
        assert np.array_equal(out, y), (pe, simd)
        # without stalls: frames leave one interval apart
        res = run_amaranth(top, StreamJob(top.in_width, top.out_width, beats, last, n_out))
        assert np.array_equal(beats_to_frames(res.out_beats, dfg.output.qtype,
                                              dfg.out_per_beat, dfg.output.size), y)
        ends = [res.out_times[(f + 1) * per_frame - 1] for f in range(FRAMES)]
        assert {b - a for a, b in zip(ends, ends[1:])} == {est["cycles_per_frame"]}, \
            (pe, simd, ends)


def test_kernel_parallel_depthwise_lifts_the_floor():
    """DS-CNN's depthwise layers at SIMD 1 take pixels x K cycles at best (1,125): with SIMD
    over the kernel positions the floor is the stem's (708), and a target below 1,125 folds
    them over kernel positions."""
    ig = to_int_graph(load_model(EXAMPLES / "mlperf_tiny" / "dscnn_qdq.onnx"))
    _, _, rep = fold_for_device(ig, resolve_target("ulx3s-85f"))
    assert rep.floor == 708
    fold = choose_folding(ig, target_cycles=1_000)
    dw = [op for op in ig.ops if getattr(op, "depthwise", False)]
    assert dw and all(fold[op.name].simd > 1 for op in dw)
    dfg = lower(ig, fold)
    assert dfg.estimate()["cycles_per_frame"] <= 1_000
