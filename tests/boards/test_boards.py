"""Devices and boards: names, budgets, ``hwgen boards``."""
from __future__ import annotations

import pytest
from conftest import run_hwgen

from hwgen.boards.boards import BOARDS, board_by_name, boards_table
from hwgen.boards.devices import DEVICES, KINDS, by_name
from hwgen.boards.fold import DEFAULT_BUDGET, AutoBoard, resolve_target
from hwgen.errors import HwgenError

IDS = ("ice40-up5k", "ice40-hx8k", "ecp5-25f", "ecp5-45f", "ecp5-85f")


def test_devices_by_id_name_and_part_in_any_case():
    assert tuple(d.id for d in DEVICES) == IDS
    for d in DEVICES:
        for key in (d.id, d.id.upper(), d.name, d.name.lower(), d.part, d.part.lower()):
            assert by_name(key) is d
    with pytest.raises(HwgenError, match="unknown device 'xc7a35t'.*ecp5-85f"):
        by_name("xc7a35t")


def test_device_budgets():
    up5k, hx8k, e25, e45, e85 = DEVICES
    assert (up5k.luts, up5k.multipliers, up5k.bram_blocks, up5k.spram_blocks) == (5280, 8, 30, 4)
    assert up5k.spram_bits == 4 * 256 * 1024
    assert (hx8k.multipliers, hx8k.multiplier_lanes, hx8k.bram_blocks) == (0, 0, 32)
    assert [d.multipliers for d in (e25, e45, e85)] == [28, 72, 156]
    assert [d.bram_blocks for d in (e25, e45, e85)] == [56, 108, 208]
    assert e85.dsp_tile == "MULT18X18D" and any("9×9" in m for m in e85.dsp_modes)
    assert up5k.bram_tile == "SB_RAM40_4K" and "256×16" in up5k.bram_geometry
    assert e85.bram_tile_bits == 18 * 1024 and "1024×18" in e85.bram_geometry
    assert all(d.distributed_ram_bits for d in (e25, e45, e85))
    assert list(e85.capacity()) == list(KINDS)
    assert e85.limits(0.85) == {"logic cells": 71094, "flip-flops": 71094, "DSP tiles": 132,
                                "block RAM tiles": 176}
    assert up5k.limits(0.85)["DSP tiles"] == 6


def test_usage_of_an_estimate():
    up5k, hx8k, e25, *_ = DEVICES
    res = {"lut4": 100, "ff": 300, "carry": 10, "dsp": 2, "bram": 3, "dram": 5}
    assert e25.usage(res) == {"logic cells": 130, "flip-flops": 300, "DSP tiles": 2,
                              "block RAM tiles": 3}
    # iCE40: a logic cell holds a LUT4 and a flip-flop, but most flip-flops are not fed by
    # a LUT of their own and take a cell alone (ICE40_FF_ALONE)
    assert up5k.usage(res)["logic cells"] == 100 + 225
    # no hard multipliers: the products are logic (soft cells), no DSP tiles
    assert hx8k.usage(res, soft_cells=64) == {"logic cells": 389, "flip-flops": 300,
                                              "DSP tiles": 0, "block RAM tiles": 3}


def test_boards():
    assert [b.id for b in BOARDS] == ["icebreaker", "ulx3s-25f", "ulx3s-85f", "orangecrab-25f"]
    ice = board_by_name("iCEBreaker")
    assert ice.device is by_name("ice40-up5k") and ice.clock_mhz == 12.0
    assert ice.clock_pin == "35" and dict(ice.uart) == {"rx": "6", "tx": "9"}
    ulx = board_by_name("ulx3s-85f")
    assert ulx.device.id == "ecp5-85f" and ulx.clock_mhz == 25.0 and ulx.clock_pin == "G2"
    assert board_by_name("ulx3s-25f").device.id == "ecp5-25f"
    oc = board_by_name("orangecrab-25f")
    assert oc.device.id == "ecp5-25f" and oc.clock_mhz == 48.0 and oc.package == "CSFBGA285"
    assert not oc.uart and dict(oc.usb)["d_p"] == "N1"
    assert all(b.led_pin and b.package for b in BOARDS)
    with pytest.raises(HwgenError, match="unknown board 'nexys'"):
        board_by_name("nexys")


def test_resolve_target():
    # neither a board nor a device: the smallest board the model fits, chosen once read
    assert resolve_target() == AutoBoard(DEFAULT_BUDGET) == resolve_target(" Auto ")
    assert resolve_target(budget=0.5, uart=True) == AutoBoard(0.5, None, True)
    t = resolve_target(device="ICE40-UP5K", budget=0.7)
    assert t.board is None and t.device.id == "ice40-up5k" and t.budget == 0.7
    assert resolve_target("icebreaker", "ice40-up5k").board.id == "icebreaker"
    with pytest.raises(HwgenError, match="carries ice40-up5k"):
        resolve_target("icebreaker", "ecp5-85f")
    for bad in (0, -0.5, 1.5):
        with pytest.raises(HwgenError, match="--budget"):
            resolve_target(budget=bad)


def test_cli_boards_lists_boards_and_devices_deterministically():
    p = run_hwgen("boards")
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == boards_table()
    for name in [b.id for b in BOARDS] + list(IDS):
        assert name in p.stdout
    assert "MULT18X18D" in p.stdout and "SPRAM" in p.stdout and "25 MHz (G2)" in p.stdout
    assert run_hwgen("boards").stdout == p.stdout


def test_cli_unknown_board_and_bad_budget_are_one_line_errors(tmp_path):
    from conftest import EXAMPLES
    model = EXAMPLES / "digits_mlp_qdq.onnx"
    for args, fact in ((("--board", "nexys"), "unknown board"),
                       (("--device", "xc7"), "unknown device"),
                       (("--budget", "2"), "--budget")):
        p = run_hwgen("compile", str(model), "-o", str(tmp_path / "o"), *args)
        assert p.returncode == 2 and fact in p.stderr, p.stderr
        assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr
        assert not (tmp_path / "o").exists()
    p = run_hwgen("inspect", str(model), "--board", "icebreaker", "--device", "ecp5-85f")
    assert p.returncode == 2      # argparse: not allowed together
