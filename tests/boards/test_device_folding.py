"""Device-aware folding (``boards/fold.py``): the budget holds, the interval is the smallest
the search can reach (checked against a brute-force search), no layer is faster than the
interval needs, a model too large is refused, and compile/inspect/verify report it."""
from __future__ import annotations

import dataclasses
import itertools
import json
import math

import numpy as np
import pytest
from conftest import EXAMPLES, run_hwgen

from hwgen import api
from hwgen.boards.devices import KINDS
from hwgen.boards.fold import DoesNotFit, FoldSearch, fold_for_device, resolve_target
from hwgen.dataflow.importer import load_model, to_int_graph
from hwgen.dataflow.lower import op_macs
from hwgen.inspect import format_text, inspect
from hwgen.rtl_templates.resources import total

MLP = EXAMPLES / "digits_mlp_qdq.onnx"
CNN = EXAMPLES / "digits_cnn_qdq.onnx"
RESNET = EXAMPLES / "digits_resnet_qdq.onnx"
BOARDS = ("icebreaker", "ulx3s-25f", "ulx3s-85f", "orangecrab-25f")


def _ig(path):
    return to_int_graph(load_model(path, upgrade=True))


@pytest.fixture(scope="module")
def graphs():
    return {p.stem: _ig(p) for p in (MLP, CNN, RESNET)}


def _fits_or_refused(ig, target):
    try:
        return fold_for_device(ig, target)
    except DoesNotFit:
        return None


@pytest.mark.parametrize("board", BOARDS)
def test_budget_respected_by_the_whole_design(graphs, board):
    target = resolve_target(board)
    for name, ig in graphs.items():
        got = _fits_or_refused(ig, target)
        if got is None:
            continue
        fold, dfg, rep = got
        dev = target.device
        limit = dev.limits(target.budget)
        est = dfg.estimate()
        use = dev.usage(est["resources"][dev.family])
        assert all(use[k] <= limit[k] for k in KINDS), (name, use, limit)
        assert use == rep.use and rep.fits
        assert not dev.shortfalls(est)
        assert rep.interval == est["cycles_per_frame"]
        assert set(fold) == {op.name for op in ig.ops}


def test_examples_fit_the_largest_board(graphs):
    for ig in graphs.values():
        _, _, rep = fold_for_device(ig, resolve_target("ulx3s-85f"))
        assert rep.fits and rep.target.board.id == "ulx3s-85f"


def _brute_force(s: FoldSearch) -> int | None:
    """The smallest interval over every combination of the ops' foldings whose summed
    per-op resources fit (the search's cost model, exhaustively)."""
    per_op = []
    for op in s.ops:
        opts = []
        for o, _ in s.space[op.name]:
            u = s.op_use(op, o)
            opts.append((u.cycles, u.res, u.soft))
        per_op.append(opts)
    best = None
    for combo in itertools.product(*per_op):
        t = max(c for c, _, _ in combo)
        if best is not None and t >= best:
            continue
        use = s.device.usage(total(r for _, r, _ in combo), sum(x for _, _, x in combo))
        if s.fits(use):
            best = t
    return best


@pytest.mark.parametrize("board,budget", [("ulx3s-25f", 0.85), ("icebreaker", 0.85),
                                          ("ulx3s-85f", 0.5), ("ulx3s-85f", 0.2)])
def test_interval_is_minimal_against_brute_force(graphs, board, budget):
    """Every product in a DSP tile: the search's interval is the brute force's; with
    products in logic cells allowed it is no longer, and it fits."""
    ig = graphs["digits_mlp_qdq"]
    target = dataclasses.replace(resolve_target(board, budget=budget), logic_lanes=False)
    s = FoldSearch(ig, target)
    best = _brute_force(s)
    fold, dfg, rep = fold_for_device(ig, target)
    assert best is not None
    assert rep.interval == best, (board, budget, rep.interval, best)
    assert not any(f.lut_lanes for f in fold.values())
    fold, dfg, rep = fold_for_device(ig, dataclasses.replace(target, logic_lanes=True))
    assert rep.interval <= best and rep.fits


@pytest.mark.parametrize("board", BOARDS)
def test_balance_no_layer_faster_than_needed(graphs, board):
    target = resolve_target(board)
    for ig in graphs.values():
        got = _fits_or_refused(ig, target)
        if got is None:
            continue
        fold, _, rep = got
        s = FoldSearch(ig, target)
        for op in ig.ops:
            f = fold[op.name]
            for (pe, simd), _ in s.space[op.name]:
                if (pe, simd) == (f.pe, f.simd) or pe > f.pe or simd > f.simd:
                    continue
                # a less parallel folding of this layer would miss the interval
                assert s.op_use(op, (pe, simd)).cycles > rep.interval, (op.name, f, pe, simd)


def test_interval_bound_and_floor(graphs):
    ig = graphs["digits_cnn_qdq"]
    _, _, rep = fold_for_device(ig, resolve_target("ulx3s-85f"))
    macs = sum(op_macs(ig, op) for op in ig.ops)
    assert rep.macs == macs > 0
    assert rep.bound == math.ceil(macs / 156)
    assert rep.floor <= rep.interval
    # fully folded, the CNN with its products in logic takes 6,940 of the HX8K's 7,680
    # cells: it fits a 95 % budget and is refused at 90 %
    hx = fold_for_device(ig, resolve_target(device="ice40-hx8k", budget=0.95))[2]
    assert hx.bound is None     # no hard multipliers
    assert hx.use["logic cells"] <= hx.limit["logic cells"]
    with pytest.raises(DoesNotFit):
        fold_for_device(ig, resolve_target(device="ice40-hx8k", budget=0.9))


#: interval, bound and floor at ulx3s-85f (85 % budget), every product in a DSP tile. The
#: window-parallel generator lifts the first layer's floor (pixels x K^2: 576, 9,216 and 5,000
#: cycles before); what is left is the DSP budget at the foldings the channel counts allow.
BOARD_INTERVALS = {
    EXAMPLES / "digits_cnn_qdq.onnx": (256, 152, 100),
    EXAMPLES / "mlperf_tiny" / "resnet8_qdq.onnx": (131_072, 80_139, 1_156),
    EXAMPLES / "mlperf_tiny" / "dscnn_qdq.onnx": (32_000, 17_031, 708),
}


@pytest.mark.parametrize("path", list(BOARD_INTERVALS), ids=lambda p: p.stem)
def test_first_layer_is_not_the_floor_on_ulx3s_85f(path):
    ig = _ig(path)
    target = dataclasses.replace(resolve_target("ulx3s-85f"), logic_lanes=False)
    fold, dfg, rep = fold_for_device(ig, target)
    assert (rep.interval, rep.bound, rep.floor) == BOARD_INTERVALS[path]
    first = ig.ops[0]
    space = first.fold_space(ig)
    fastest = min(space.cycles(pe, simd) for pe in space.pe for simd in space.simd)
    assert fastest < rep.interval and rep.floor < rep.interval
    # the window-parallel generator is in the design (ResNet-8 keeps its stem on the
    # standard one, its 3x3 convolutions read 9 or 18 window elements per beat)
    assert any(b.kind == "swg_par" for b in dfg.blocks)
    assert max(b.cost.cycles for b in dfg.blocks) == rep.interval


#: interval and bound at ulx3s-85f (85 % budget) with products in logic cells beyond the DSP
#: tiles: below the bound, which counts the tiles' lanes only
LOGIC_LANE_INTERVALS = {
    EXAMPLES / "digits_cnn_qdq.onnx": (100, 152),
    # (36,864 fitted the flip-flop budget with 1,040 to spare; the block RAM FIFOs' own
    # output registers, 1,502 flip-flops more, moved it one step down the fold space, and
    # the window generators' output shift registers (swg_par.shift_out) one more)
    EXAMPLES / "mlperf_tiny" / "resnet8_qdq.onnx": (73_728, 80_139),
    EXAMPLES / "mlperf_tiny" / "dscnn_qdq.onnx": (16_000, 17_031),
    EXAMPLES / "mlperf_tiny" / "mobilenet_v1_025_qdq.onnx": (41_472, 48_011),
    EXAMPLES / "mlperf_tiny" / "autoencoder_qdq.onnx": (1_024, 1_694),
}


@pytest.mark.parametrize("path", list(LOGIC_LANE_INTERVALS), ids=lambda p: p.stem)
def test_logic_lanes_take_designs_below_the_bound(path):
    """The DSP tiles full, the products beyond them in logic: the interval under the bound,
    every kind within the budget, and the products in logic no more than the tiles'
    excess needs (moving any one of them back would leave the tiles over the budget)."""
    ig = _ig(path)
    target = resolve_target("ulx3s-85f", logic_lanes=True)
    fold, dfg, rep = fold_for_device(ig, target)
    assert (rep.interval, rep.bound) == LOGIC_LANE_INTERVALS[path]
    assert rep.fits and rep.interval < rep.bound
    lut = {n: f.lut_lanes for n, f in fold.items() if f.lut_lanes}
    assert lut
    units = {b.layer: b.params for b in dfg.blocks if b.kind in ("mvau", "vvau")}
    assert all(units[n].lut_lanes == k for n, k in lut.items())
    s = FoldSearch(ig, target)
    dsp = sum(s.op_use(op, (fold[op.name].pe, fold[op.name].simd, fold[op.name].lut_lanes))
              .use["DSP tiles"] for op in ig.ops)
    assert dsp <= s.limit["DSP tiles"]
    # one product fewer in logic: over the tiles' budget
    name = max(lut, key=lambda n: (lut[n], n))
    op = next(op for op in ig.ops if op.name == name)
    f = fold[name]
    back = s.op_use(op, (f.pe, f.simd, f.lut_lanes - 1)).use["DSP tiles"] - \
        s.op_use(op, (f.pe, f.simd, f.lut_lanes)).use["DSP tiles"]
    assert dsp + back > s.limit["DSP tiles"]


def test_refusal_names_the_numbers(graphs):
    with pytest.raises(DoesNotFit) as e:
        fold_for_device(graphs["digits_resnet_qdq"], resolve_target("icebreaker"),
                        what="digits_resnet_qdq.onnx")
    msg = str(e.value)
    assert "does not fit icebreaker" in msg and "even fully folded" in msg
    assert "needs" in msg and "the device has 5,280" in msg and "layer " in msg
    assert "\n" not in msg


@pytest.mark.slow
def test_cli_refuses_a_model_too_big_with_exit_2(tmp_path):
    out = tmp_path / "o"
    p = run_hwgen("compile", str(RESNET), "-o", str(out), "--board", "icebreaker")
    assert p.returncode == 2, p.stdout + p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "does not fit icebreaker" in lines[0], p.stderr
    assert "Traceback" not in p.stderr and not out.exists()
    # an explicit folding compiles anyway, and says it does not fit
    p = run_hwgen("compile", str(RESNET), "-o", str(out), "--board", "icebreaker",
                  "--target-cycles", "4096")
    assert p.returncode == 0, p.stderr
    assert "DOES NOT FIT" in p.stdout and "warning" in p.stderr
    m = json.loads((out / "manifest.json").read_text())
    assert m["target"]["fits"] is False and m["target"]["shortfalls"]
    assert m["target"]["folding"] == "target cycles 4096"


@pytest.mark.slow
def test_manifest_records_the_target_and_is_deterministic(tmp_path):
    a = api.compile(MLP, tmp_path / "a", board="ulx3s-85f")
    b = api.compile(MLP, tmp_path / "b", board="ulx3s-85f")
    assert (tmp_path / "a" / "manifest.json").read_bytes() == \
        (tmp_path / "b" / "manifest.json").read_bytes()
    assert (tmp_path / "a" / a.verilog.name).read_bytes() == \
        (tmp_path / "b" / b.verilog.name).read_bytes()
    t = a.manifest["target"]
    assert t["board"]["id"] == "ulx3s-85f" and t["device"]["id"] == "ecp5-85f"
    assert t["budget"] == 0.85 and t["folding"] == "device search" and t["fits"]
    assert set(t["use"]) == set(t["limit"]) == set(t["capacity"]) == set(KINDS)
    assert all(t["use"][k] <= t["limit"][k] for k in KINDS)
    assert t["interval_cycles"] == a.estimate["cycles_per_frame"]
    assert t["interval_bound_cycles"] == math.ceil(t["macs_per_frame"] / 156)
    assert t["multiplier_lanes"] == 156 and t["clock_mhz"] == 25.0
    # an explicit target: no search, the fit still reported, the old folding kept
    c = api.compile(MLP, tmp_path / "c", target_cycles=1024, device="ice40-up5k", budget=0.7)
    t = c.manifest["target"]
    assert t["board"] is None and t["device"]["id"] == "ice40-up5k" and t["budget"] == 0.7
    assert t["folding"] == "target cycles 1024" and c.estimate["cycles_per_frame"] == 1024


def test_inspect_shows_folding_fit_and_interval_fast():
    for path in (MLP, CNN, RESNET):
        rep = inspect(path, board="icebreaker")
        # the board's search and every device's own (the ResNet: about 1.3 s on two idle
        # cores, 5 s on two busy ones)
        assert rep.seconds < 10
        text = format_text(rep, rep.fit.device.family)
        assert "target icebreaker (ice40-up5k) at 85 % budget: interval" in text
        assert ("fits:" in text) != ("DOES NOT FIT" in text)
        assert "searched for icebreaker" in text
    rep = inspect(CNN)
    assert rep.fit.fits and rep.target_cycles is None
    assert rep.estimate.totals["cycles_per_frame"] == rep.fit.interval
    p = run_hwgen("inspect", str(CNN), "--board", "ulx3s-25f", "--json")
    doc = json.loads(p.stdout)
    assert doc["target"]["board"]["id"] == "ulx3s-25f" and doc["target"]["fits"]
    assert doc["target_cycles"] is None


@pytest.mark.slow
@pytest.mark.verilator
def test_verify_on_icebreaker_rtl_equals_golden(tmp_path):
    """The digits MLP folded for the UP5K (the CNN does not fit it: 5,360 logic cells after
    packing even fully folded)."""
    x = np.load(EXAMPLES / "digits_test.npz")
    x = x[x.files[0]][:3]
    rep = api.verify(MLP, x, board="icebreaker")
    assert rep.ok and rep.rtl_equals_golden
    t = rep.compiled.manifest["target"]
    assert t["board"]["id"] == "icebreaker" and t["fits"]
    assert rep.sim.interval == pytest.approx(rep.estimate["cycles_per_frame"], rel=0.02)


def test_mac_utilisation(graphs):
    """Busy multiplier-cycles ÷ (the layers' dot-product lanes × the interval), per layer and
    overall, in the report, its manifest form and ``hwgen inspect``."""
    ig = graphs["digits_cnn_qdq"]
    fold, dfg, rep = fold_for_device(ig, resolve_target("ulx3s-85f"))
    macs = {op.name: op_macs(ig, op) for op in ig.ops if op_macs(ig, op)}
    lanes = {n: fold[n].pe * fold[n].simd for n in macs}
    assert rep.layer_macs == {n: (macs[n], lanes[n]) for n in macs}
    util = sum(macs.values()) / (sum(lanes.values()) * rep.interval)
    assert rep.mac_utilisation == pytest.approx(util) and 0 < util <= 1
    for n, u in rep.layer_utilisation().items():
        # no layer is busier than the interval allows; the bottleneck's lanes are all busy
        assert 0 < u <= 1
        assert u == pytest.approx(macs[n] / (lanes[n] * rep.interval))
    d = rep.as_dict()
    assert d["mac_utilisation"] == round(util, 4)
    assert [x["name"] for x in d["layers"]] == list(macs)
    text = format_text(inspect(CNN, board="ulx3s-85f"))
    assert "MAC use" in text and f"MAC utilisation {100 * util:.0f} %" in text
