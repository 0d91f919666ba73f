"""Weight ROMs built of logic cells (``Folding.rom_logic``, ``MVAUParams.rom_logic``,
``VVAUParams.rom_logic``; the search's spill in ``boards/rom_logic.py``).

A unit whose weights are a ROM of LUTs must be bit-exact against the golden function
(``np.array_equal``) with the same cycles, take no block RAM for them (as estimated, and as
Yosys maps it), leave the Verilog of a unit without it byte-identical, and the device search
must move weights into logic where block RAM is what a model lacks (FINN's CNV-w2a2 on the
ULX3S-85F).
"""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import test_vvau as tv
from amaranth.back import verilog
from test_digits_e2e import EX, MODELS, TEST_SET, verify_folded
from test_mvau import Cfg
from test_vvau import GRID

import hwgen
from hwgen.boards.fold import fold_for_device, resolve_target
from hwgen.dataflow.importer import load_model, to_int_graph
from hwgen.errors import HwgenError
from hwgen.rtl_templates.mvau import MVAU, cost
from hwgen.rtl_templates.quant import INT8
from hwgen.rtl_templates.vvau import VVAU
from hwgen.rtl_templates.vvau import cost as vcost

CNV_W2A2 = EX / "finn" / "cnv-w2a2.onnx"


@pytest.mark.verilator
def test_digits_mlp_with_weights_in_logic_verilator(tmp_path):
    """A design whose first layer keeps its weights (2,048 words of 8 bits, a block RAM tile
    otherwise) in logic, end to end: RTL == golden in Verilator on every image at the
    estimate's interval and latency, the manifest keeps the folding, one block RAM tile
    fewer, and the Verilog of the same folding with ``rom_logic`` false byte-identical to
    the plain one's."""
    plain_fold = {"fc0": {"pe": 1, "simd": 1}, "fc1": {"pe": 1, "simd": 1},
                  "fc2": {"pe": 2, "simd": 4}}
    fold = dict(plain_fold, fc0={"pe": 1, "simd": 1, "rom_logic": True})
    rep, path = verify_folded(tmp_path, MODELS[0], fold)
    manifest = rep.compiled.manifest
    spilled = hwgen.compile(EX / MODELS[0], tmp_path / "d", fold=path)
    assert 'rom_style = "logic"' in spilled.verilog.read_text()
    x = np.load(TEST_SET)["input"][:4]         # read back from its folder, stalled
    res = hwgen.simulate(tmp_path / "d", x, simulator="verilator", stall=0.3, seed=3)
    assert np.array_equal(res.outputs_int,
                          hwgen.simulate(tmp_path / "d", x, simulator="verilator").outputs_int)
    path.write_text(json.dumps(plain_fold))
    plain = hwgen.compile(EX / MODELS[0], tmp_path / "plain", fold=path)
    bram = [m["estimate"]["resources"]["ecp5"]["bram"] for m in (plain.manifest, manifest)]
    assert bram[0] - bram[1] == 1
    path.write_text(json.dumps(dict(plain_fold, fc0={"pe": 1, "simd": 1, "rom_logic": False})))
    same = hwgen.compile(EX / MODELS[0], tmp_path / "off", fold=path)
    assert same.verilog.read_bytes() == plain.verilog.read_bytes()
    # the plain 2,048-word ROM is pinned to block RAM (memory.plain_rom_attrs), not logic
    assert 'rom_style = "logic"' not in plain.verilog.read_text()
    assert 'rom_style = "block"' in plain.verilog.read_text()


def test_mvau_rom_logic_estimate():
    """Weights in logic: no block RAM for them, LUT4 in their place, the same cycles and
    latency; the Verilog carries Yosys's ``rom_style = "logic"``."""
    p = Cfg(8, 512, 2, 1, INT8, INT8).params           # 256 words of 32 bits: block RAM
    q = dataclasses.replace(p, rom_logic=True)
    a, b = cost(p), cost(q)
    assert (a.cycles, a.latency) == (b.cycles, b.latency)
    ra, rb = a.resources("ecp5"), b.resources("ecp5")
    assert ra.bram > rb.bram and rb.lut4 > ra.lut4
    v = verilog.convert(MVAU(q), name="m", emit_src=False)
    assert 'rom_style = "logic"' in v
    assert 'rom_style = "logic"' not in verilog.convert(MVAU(p), name="m", emit_src=False)


@pytest.mark.sim
def test_vvau_rom_logic_golden_and_cycles_amaranth():
    """The depthwise unit with its weights in logic: RTL == golden, the model's cycles."""
    cfg = GRID[10]

    class VC:
        params = dataclasses.replace(cfg.params, rom_logic=True)
        frames = cfg.frames

    x = cfg.frames(3, seed=2)
    run = tv._run(VC, x)
    tv._check_outputs(VC, x, run)
    tv._check_cycles(VC, x, run)
    assert vcost(VC.params).resources("ecp5").bram <= vcost(cfg.params).resources("ecp5").bram
    assert 'rom_style = "logic"' in verilog.convert(VVAU(VC.params), name="v", emit_src=False)


def test_rom_logic_with_spram_refused():
    with pytest.raises(ValueError, match="rom_logic"):
        dataclasses.replace(Cfg(8, 16, 2, 2, INT8, INT8).params, spram=True, rom_logic=True)


@pytest.mark.parametrize("fold,msg", [
    ({"/pool1/MaxPool": {"pe": 8, "simd": 1, "rom_logic": True}},
     "rom_logic=true, but it has no matrix or vector unit"),
    ({"/conv1/Conv": {"pe": 1, "simd": 1, "rom_logic": 1}}, '"rom_logic": true|false'),
])
def test_fold_file_rom_logic_refused_in_one_line(tmp_path, fold, msg):
    path = tmp_path / "fold.json"
    path.write_text(json.dumps(fold))
    with pytest.raises(HwgenError, match=msg) as e:
        hwgen.compile(EX / "digits_cnn_qdq.onnx", tmp_path / "d", fold=path)
    assert "\n" not in str(e.value) and not (tmp_path / "d").exists()


def test_search_spills_cnv_w2a2_weights_into_logic():
    """FINN's CNV-w2a2 needs 200 block RAM tiles of the ULX3S-85F's 176 fully folded: with
    weight ROMs in logic it fits, far below the device bound, its multipliers busy ≥ 80 %
    of the interval."""
    ig = to_int_graph(load_model(CNV_W2A2, upgrade=True))
    target = dataclasses.replace(resolve_target("ulx3s-85f"), logic_lanes=True)
    fold, _, rep = fold_for_device(ig, target)
    assert rep.fits and rep.interval < rep.bound
    assert rep.mac_utilisation >= 0.8
    assert any(f.rom_logic for f in fold.values())
    assert rep.use["block RAM tiles"] <= rep.limit["block RAM tiles"]


@pytest.mark.synth
def test_rom_logic_estimate_against_yosys():
    """A unit with 2,048 words of 16-bit weights in logic: Yosys maps them to no block RAM
    (as estimated; two tiles without ``rom_logic``), LUT4 and flip-flops within 15 %."""
    from hwgen.boards.synth import synthesize

    p = dataclasses.replace(Cfg(8, 512, 2, 1, INT8, INT8).params, rom_logic=True)
    est = cost(p).resources("ecp5")
    res = synthesize(verilog.convert(MVAU(p), name="m", emit_src=False), "m", "ecp5")
    assert est.bram == res.bram == 1               # the input buffer's
    assert cost(dataclasses.replace(p, rom_logic=False)).resources("ecp5").bram == 3
    assert abs(est.lut4 / res.lut4 - 1) <= 0.15, (est.lut4, res.lut4)
    assert abs(est.ff / res.ff - 1) <= 0.15, (est.ff, res.ff)
