"""Multiplier lanes built of logic (rtl_templates/lutmul.py) in the matrix–vector unit.

An MVAU with ``lut_lanes`` of its PE×SIMD products in logic must be bit-exact against the
golden function (``np.array_equal``), keep the cost model's interval and latency exactly,
survive random stalls, and leave those products out of the DSP tiles (no ``*`` in their
Verilog); with ``lut_lanes=0`` nothing changes (byte-identical Verilog).
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import test_vvau as tv
from amaranth.back import verilog
from amaranth.hdl import Module, Signal, signed, unsigned
from amaranth.sim import Simulator
from test_digits_e2e import EX, MODELS, TEST_SET, verify_folded
from test_mvau import Cfg, _check_cycles, _check_outputs, _job, _top, random_frames
from test_vvau import GRID

import hwgen
from hwgen.boards.dsp_pack import pack_dsp_registers
from hwgen.boards.synth import synthesize
from hwgen.errors import HwgenError
from hwgen.rtl_templates.lutmul import lut_mul, lut_mul_stages
from hwgen.rtl_templates.mvau import MVAU, cost, golden, pipeline_depth, spread_stages
from hwgen.rtl_templates.quant import INT8, UINT8
from hwgen.rtl_templates.resources import dsp_tiles
from hwgen.rtl_templates.vvau import VVAU
from hwgen.rtl_templates.vvau import cost as vcost
from hwgen.sim.amaranth_sim import run_amaranth
from hwgen.sim.verilator import run_verilator


@pytest.mark.parametrize("x_signed", [False, True])
@pytest.mark.parametrize("xb,wb", [(8, 8), (4, 3), (8, 9), (3, 2), (5, 16)])
def test_lut_mul_exact_every_pair(xb: int, wb: int, x_signed: bool):
    """Every operand pair (sampled for wide ones) against the integer product, the result
    after exactly lut_mul_stages registers."""
    rng = np.random.default_rng(xb * 100 + wb)
    xs = np.arange(-(1 << (xb - 1)), 1 << (xb - 1)) if x_signed else np.arange(1 << xb)
    ws = np.arange(-(1 << (wb - 1)), 1 << (wb - 1))
    pairs = [(int(a), int(b)) for a in xs for b in ws]
    if len(pairs) > 3000:
        pairs = [pairs[k] for k in rng.choice(len(pairs), 3000, replace=False)]
        pairs += [(int(xs[0]), int(ws[0])), (int(xs[-1]), int(ws[0])),
                  (int(xs[0]), int(ws[-1])), (int(xs[-1]), int(ws[-1]))]
    m = Module()
    x = Signal(signed(xb) if x_signed else unsigned(xb))
    w = Signal(signed(wb))
    p = Signal(signed(xb + wb + 1))
    m.d.comb += p.eq(lut_mul(m, x, w, "t")[:xb + wb + 1].as_signed())
    stages = lut_mul_stages(wb)
    got = []
    sim = Simulator(m)
    sim.add_clock(1e-6)

    async def bench(ctx):
        for k in range(len(pairs) + stages):
            if k < len(pairs):
                ctx.set(x, pairs[k][0])
                ctx.set(w, pairs[k][1])
            if k >= stages:
                got.append(ctx.get(p))
            await ctx.tick()
    sim.add_testbench(bench)
    sim.run()
    want = [a * b for a, b in pairs]
    assert got == want


LUT_GRID = [
    (Cfg(8, 8, 2, 4, UINT8, INT8, ties=True), 3),
    (Cfg(16, 12, 4, 3, INT8, UINT8, per_channel=True, relu=True), 12),    # all lanes
    (Cfg(10, 32, 5, 8, UINT8, UINT8, weight_zp=True), 17),                # 9-bit weights
    (Cfg(3, 5, 3, 1, UINT8, UINT8, relu=True), 1),
]


def _lut(cfg: Cfg, n: int):
    return dataclasses.replace(cfg.params, lut_lanes=n)


def _id(c):
    return f"{c[0].id}-lut{c[1]}"


@pytest.mark.sim
@pytest.mark.parametrize("case", LUT_GRID, ids=[_id(c) for c in LUT_GRID])
def test_lut_lanes_golden_and_cycles_amaranth(case):
    cfg, n = case
    p = _lut(cfg, n)
    if cfg.weight_zp:       # 9-bit weights: the products in logic take one stage more
        assert p.w_bits == 9 and pipeline_depth(p) == pipeline_depth(cfg.params) + 1
    x = random_frames(p, 8, seed=2)
    res = run_amaranth(_top(p), _job(p, x))
    _check_outputs(p, x, res)
    _check_cycles(p, x, res)


@pytest.mark.sim
@pytest.mark.parametrize("seed", [1, 2])
def test_lut_lanes_stalls_amaranth(seed: int):
    cfg, n = LUT_GRID[2]
    p = _lut(cfg, n)
    x = random_frames(p, 6, seed=seed)
    _check_outputs(p, x, run_amaranth(_top(p), _job(p, x, stall_in=0.3, stall_out=0.3,
                                                     seed=seed)))


@pytest.mark.verilator
def test_lut_lanes_golden_verilator():
    cfg, n = LUT_GRID[1]
    p = _lut(cfg, n)
    x = random_frames(p, 8, seed=2)
    res = run_verilator(verilog.convert(_top(p), name="mvau_top", emit_src=False), "mvau_top",
                        _job(p, x))
    _check_outputs(p, x, res)
    _check_cycles(p, x, res)


def test_lut_lanes_take_no_tiles():
    """The products in logic leave the DSP tiles (the model) and write no ``*`` (the RTL):
    a unit with every lane in logic has only its requantizer's multiplications."""
    cfg, _ = LUT_GRID[1]
    base = cfg.params
    full = _lut(cfg, base.pe * base.simd)
    c0, c1 = cost(base), cost(full)
    lanes = base.pe * base.simd
    dot = [m for m in c0.multiplies if m.b_signed]
    assert len(dot) == 1 and c0.multiplies[dot[0]] == lanes
    assert not any(m.b_signed for m in c1.multiplies)
    assert c0.resources("ecp5").dsp - c1.resources("ecp5").dsp == lanes * dsp_tiles(dot[0],
                                                                                    "ecp5")
    assert c1.resources("ecp5").lut4 + 2 * c1.resources("ecp5").carry > \
        c0.resources("ecp5").lut4 + 2 * c0.resources("ecp5").carry
    # the RTL: as many $mul cells fewer as lanes moved
    v0 = verilog.convert(_top(base), name="mvau_top", emit_src=False)
    v1 = verilog.convert(_top(full), name="mvau_top", emit_src=False)
    assert v0.count(" * ") - v1.count(" * ") == lanes
    # 8-bit weights: the same depth, but for the register splitting the route from an input
    # lane to the tiles of several PEs, which a unit without tiles has not
    assert base.pe > 1 and spread_stages(base) == 1 and spread_stages(full) == 0
    assert pipeline_depth(full) == pipeline_depth(base) - 1


def test_lut_lanes_zero_is_the_plain_unit():
    cfg, _ = LUT_GRID[0]
    p = cfg.params
    assert verilog.convert(_top(p), name="t", emit_src=False) == \
        verilog.convert(_top(_lut(cfg, 0)), name="t", emit_src=False)


def test_lut_lanes_rejected_out_of_range():
    cfg, _ = LUT_GRID[0]
    with pytest.raises(ValueError, match="lut_lanes"):
        _lut(cfg, cfg.pe * cfg.simd + 1)


def test_golden_unchanged_by_lut_lanes():
    cfg, n = LUT_GRID[0]
    x = random_frames(cfg.params, 4, seed=3)
    assert np.array_equal(golden(cfg.params, x), golden(_lut(cfg, n), x))


@pytest.mark.synth
@pytest.mark.parametrize("family", ["ecp5", "ice40"])
def test_lut_lanes_estimate_against_yosys(family):
    """A unit with its products in logic: Yosys puts only the requantizer's products in DSP
    tiles (as estimated) and the LUT4s and flip-flops are within 15 % of the estimate."""
    p = dataclasses.replace(Cfg(8, 24, 2, 6, INT8, INT8).params, lut_lanes=12)
    est = cost(p).resources(family)
    res = synthesize(verilog.convert(MVAU(p), name="m", emit_src=False), "m", family)
    assert est.dsp == res.dsp == 2
    assert abs(est.lut4 / res.lut4 - 1) <= 0.15, (est.lut4, res.lut4)
    assert abs(est.ff / res.ff - 1) <= 0.15, (est.ff, res.ff)


@pytest.mark.synth
def test_tile_operands_apart_from_logic_lanes():
    """Beside lanes in logic, each tile has operand registers of its own. A plain operand
    register merges (Yosys ``opt_merge``) into a logic lane's kept copy of the same input,
    which then feeds tiles besides its lane's logic: no flip-flop of a lane in logic may
    drive a multiplier tile, and every tile's operand registers move into it."""
    p = dataclasses.replace(Cfg(8, 24, 4, 6, INT8, INT8).params, lut_lanes=6)
    res = synthesize(verilog.convert(MVAU(p), name="m", emit_src=False), "m", "ecp5")
    netlist = json.loads(Path(res.netlist).read_text())
    mod = netlist["modules"]["m"]
    lane_bits = {b for n, v in mod["netnames"].items() if "lmul_" in n for b in v["bits"]
                 if isinstance(b, int) and b > 1}      # not the constants
    tiles = [c for c in mod["cells"].values() if c["type"] == "MULT18X18D"]
    fed = [c for c in tiles for pin, bits in c["connections"].items()
           if pin[0] in "AB" and pin[1:].isdigit() and bits[0] in lane_bits]
    assert len(tiles) == 18 + p.pe and not fed
    stats = pack_dsp_registers(netlist)
    assert stats.inputs >= 2 * 18            # both operands of every dot-product tile


@pytest.mark.verilator
def test_digits_mlp_with_lut_lanes_verilator(tmp_path):
    """A design with products in logic, end to end: compiled from a fold file with
    ``lut_lanes``, verified in Verilator (RTL == golden on every image, the measured interval
    and latency those of the estimate), read back from its folder (the manifest keeps the
    folding), with as many DSP tiles fewer as products moved."""
    fold = {"fc0": {"pe": 4, "simd": 8, "lut_lanes": 20},
            "fc1": {"pe": 4, "simd": 4, "lut_lanes": 16},
            "fc2": {"pe": 2, "simd": 4}}
    rep, path = verify_folded(tmp_path, MODELS[1], fold)
    manifest = rep.compiled.manifest
    plain = hwgen.compile(EX / MODELS[1], tmp_path / "plain", fold=EX / "digits_mlp_fold.json")
    dsp = [m["estimate"]["resources"]["ecp5"]["dsp"] for m in (plain.manifest, manifest)]
    assert dsp[0] - dsp[1] == 36
    out = tmp_path / "d"
    hwgen.compile(EX / MODELS[1], out, fold=path)
    x = np.load(TEST_SET)["input"][:8]
    res = hwgen.simulate(out, x, simulator="verilator", stall=0.3, seed=3)
    assert np.array_equal(res.outputs_int, hwgen.simulate(out, x, simulator="verilator")
                          .outputs_int)


class _VCfg:
    """A vector-unit configuration of tests/blocks/test_vvau.py with products in logic."""

    def __init__(self, cfg, n: int):
        self.cfg = cfg
        self.params = dataclasses.replace(cfg.params, lut_lanes=n)

    def frames(self, n: int, seed: int):
        return self.cfg.frames(n, seed)


def _vgrid():
    return [(GRID[10], 3), (GRID[13], 72), (GRID[15], 20)]


@pytest.mark.sim
@pytest.mark.parametrize("k", range(3))
def test_vvau_lut_lanes_golden_and_cycles_amaranth(k: int):
    """The depthwise unit with some (or all) of its products in logic: RTL == golden, the
    cost model's interval and latency, fewer DSP tiles by as many products."""
    cfg, n = _vgrid()[k]
    vc = _VCfg(cfg, n)
    x = cfg.frames(4, seed=1)
    run = tv._run(vc, x)
    tv._check_outputs(vc, x, run)
    tv._check_cycles(vc, x, run)
    assert vcost(cfg.params).resources("ecp5").dsp - vcost(vc.params).resources("ecp5").dsp \
        == n


def test_vvau_lut_lanes_need_narrow_weights():
    cfg = GRID[3]                       # 9-bit weights (a weight zero point)
    assert cfg.params.w_bits == 9
    with pytest.raises(ValueError, match="at most 8 bits"):
        dataclasses.replace(cfg.params, lut_lanes=1)


@pytest.mark.synth
@pytest.mark.parametrize("family", ["ecp5", "ice40"])
def test_vvau_lut_lanes_estimate_against_yosys(family):
    """The vector unit with its products in logic (one lane of constant weights, one whose
    weights vary): the tiles as estimated, LUT4 and flip-flops within 15 %."""
    for cfg, n in ((GRID[7], 4), (GRID[13], 72)):
        p = dataclasses.replace(cfg.params, lut_lanes=n)
        est = vcost(p).resources(family)
        res = synthesize(verilog.convert(VVAU(p), name="v", emit_src=False), "v", family)
        assert est.dsp == res.dsp
        assert abs(est.lut4 / res.lut4 - 1) <= 0.15, (cfg.id, est.lut4, res.lut4)
        assert abs(est.ff / res.ff - 1) <= 0.15, (cfg.id, est.ff, res.ff)


@pytest.mark.parametrize("model,fold,msg", [
    ("digits_mlp_qdq.onnx", {"fc0": {"pe": 4, "simd": 8, "lut_lanes": 99}},
     "lut_lanes=99 must be within its 32 products"),
    ("digits_cnn_qdq.onnx", {"/pool1/MaxPool": {"pe": 8, "simd": 1, "lut_lanes": 1}},
     "must be within its 0 products"),
])
def test_fold_file_lut_lanes_refused_in_one_line(tmp_path, model, fold, msg):
    path = tmp_path / "fold.json"
    path.write_text(json.dumps(fold))
    with pytest.raises(HwgenError, match=msg) as e:
        hwgen.compile(EX / model, tmp_path / "d", fold=path)
    assert "\n" not in str(e.value) and not (tmp_path / "d").exists()
