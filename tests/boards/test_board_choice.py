"""``--board auto``, the default: the smallest listed board a model fits, said with why; an
explicit board as given; inspect's devices each at its own folding; the utilisation lines
(used/device, share of the budget)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import run_hwgen as hwgen

from hwgen import api
from hwgen.boards.devices import DEVICES
from hwgen.boards.fold import AutoBoard, resolve_target
from hwgen.build import choose_board
from hwgen.errors import HwgenError
from hwgen.inspect import format_text, inspect, to_json

EX = Path(__file__).resolve().parents[2] / "examples"
MLP = EX / "digits_mlp_qdq.onnx"
CNN = EX / "digits_cnn_qdq.onnx"


def test_auto_picks_the_smallest_board_that_fits():
    rep = inspect(MLP, board="auto")
    assert rep.fit.target.board.id == "icebreaker" and rep.fit.fits
    assert rep.fit.choice.startswith("auto: the smallest board that fits; ulx3s-85f would "
                                     "take ")
    text = format_text(rep, "ice40")
    assert text.splitlines()[2].startswith("board: icebreaker (auto: the smallest board")
    # the CNN does not fit the UP5K (logic cells): the next board up, the ULX3S 25F before
    # the OrangeCrab of the same device (it has the UART 'hwgen build' needs)
    rep = inspect(CNN, board="AUTO")
    assert rep.fit.target.board.id == "ulx3s-25f" and rep.fit.fits
    # an explicit board is unchanged, and says no choice
    rep = inspect(CNN, board="icebreaker")
    assert rep.fit.choice == "" and not rep.fit.fits
    assert not any(ln.startswith("board:") for ln in format_text(rep, "ice40").splitlines())


def test_auto_compile_records_the_board_and_why(tmp_path):
    out = tmp_path / "c"
    r = hwgen("compile", MLP, "-o", out, "--board", "auto", "--target-cycles", "2048")
    assert r.returncode == 0, r.stderr
    assert "board: icebreaker (auto: the smallest board that fits)" in r.stdout
    t = json.loads((out / "manifest.json").read_text())["target"]
    assert t["board"]["id"] == "icebreaker" and t["board_choice"].startswith("auto:")
    # build --board auto on that folder takes the board it was compiled for
    assert choose_board(out, {}) == ("icebreaker", "auto: the board the folder was compiled for")


def test_auto_build_keeps_to_boards_with_a_uart():
    assert [b.id for b in AutoBoard(uart=True).boards()] == ["icebreaker", "ulx3s-25f",
                                                             "ulx3s-85f"]
    assert [b.id for b in AutoBoard().boards()] == ["icebreaker", "ulx3s-25f",
                                                    "orangecrab-25f", "ulx3s-85f"]
    assert api.auto_board(CNN, uart=True)[0] == "ulx3s-25f"


def test_auto_with_device_is_refused():
    with pytest.raises(HwgenError, match="--board auto"):
        resolve_target("auto", "ice40-up5k")


def test_utilisation_reads_used_of_device_and_budget_share():
    fit = inspect(MLP, board="ulx3s-85f").fit
    assert fit.use_text("DSP tiles") == "132/156 DSP tiles (100 % of the 85 % budget)"
    assert "132/156 DSP tiles (100 % of the 85 % budget)" in fit.summary()
    assert "fits: " in format_text(inspect(MLP, board="ulx3s-85f"), "ecp5")


# ------------------------------------------------- the default: no --board, no --device

def test_the_default_is_the_smallest_board_that_fits(tmp_path):
    """Told no board, compile folds the digits MLP for the iCEBreaker (not the ULX3S-85F)
    and says which and why; inspect and compile choose alike; a model the UP5K cannot hold
    goes to the next board up."""
    out = tmp_path / "c"
    r = hwgen("compile", MLP, "-o", out)
    assert r.returncode == 0, r.stderr
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("board:"))
    assert re.fullmatch(r"board: icebreaker \(auto: the smallest board that fits; ulx3s-85f "
                        r"would take [\d.]+x fewer cycles per frame\)", line), line
    assert "target: icebreaker (ice40-up5k) at 85 % budget" in r.stdout and " fits: " in r.stdout
    t = json.loads((out / "manifest.json").read_text())["target"]
    assert t["board"]["id"] == "icebreaker" and t["fits"] and t["folding"] == "device search"
    assert t["board_choice"] == line.removeprefix("board: icebreaker (")[:-1]
    rep = inspect(MLP)
    assert rep.fit.as_dict() == t
    assert format_text(rep, "ice40").splitlines()[2] == line
    # the CNN does not fit the UP5K: the ULX3S 25F, by default as with --board auto
    assert inspect(CNN).fit.target.board.id == "ulx3s-25f"


def test_an_explicit_board_or_device_is_folded_for_as_given():
    """--board/--device behave as before the default changed: that target, no choice."""
    r = hwgen("inspect", MLP, "--board", "ulx3s-85f", "--json")
    assert r.returncode == 0, r.stderr
    t = json.loads(r.stdout)["target"]
    assert t["board"]["id"] == "ulx3s-85f" and "board_choice" not in t and t["fits"]
    big, small = inspect(MLP, board="ulx3s-85f").fit, inspect(MLP).fit
    assert t == big.as_dict() and big.choice == "" and big.interval < small.interval
    fit = inspect(MLP, device="ecp5-25f").fit
    assert fit.choice == "" and fit.target.board is None and fit.device.id == "ecp5-25f"


def test_build_without_board_chooses_among_uart_boards(tmp_path):
    """``hwgen build`` needs no --board: the smallest board with a UART the model fits (the
    baud rate below is refused after that choice, before any synthesis)."""
    out = tmp_path / "o"
    r = hwgen("build", MLP, "-o", out, "--baud", "5000000")
    assert r.returncode == 2 and "baud" in r.stderr and "required" not in r.stderr, r.stderr
    assert not out.exists()


def test_inspect_judges_each_device_at_its_own_folding():
    """The device list refolds for every device: the digits MLP fits all five (not "only the
    85F", as judged by one folding for the largest device), each at its own interval, the
    larger the device the shorter; with --target-cycles, that one folding on each."""
    rep = inspect(MLP)
    fits = {f.device.id: f for f in rep.device_fits}
    assert list(fits) == [d.id for d in DEVICES]
    assert all(f.fits and f.method == "device search" for f in fits.values())
    assert fits["ice40-up5k"].interval == rep.fit.interval
    ecp5 = [fits[d].interval for d in ("ecp5-25f", "ecp5-45f", "ecp5-85f")]
    assert ecp5 == sorted(ecp5, reverse=True) and ecp5[0] > ecp5[-1]
    assert rep.devices() == [(d, []) for d in DEVICES]
    text = format_text(rep, "ice40").splitlines()
    k = text.index("devices that could hold it: " + ", ".join(d.name for d in DEVICES))
    assert text[k + 1].startswith("  each folded for itself")
    assert text[k + 2].split() == ["iCE40", "UP5K", f"{fits['ice40-up5k'].interval:,}",
                                   "cycles", "per", "frame", "(icebreaker)"]
    doc = to_json(rep)["devices"]
    assert [(d["id"], d["fits"], d["interval_cycles"]) for d in doc] == \
        [(i, True, f.interval) for i, f in fits.items()]
    # the CNN: the UP5K and HX8K lack logic cells at any folding, the ECP5s hold it
    rep = inspect(CNN)
    why = dict(rep.devices())
    assert [d.id for d in DEVICES if why[d]] == ["ice40-up5k", "ice40-hx8k"]
    assert all("logic cells" in " ".join(why[d]) for d in DEVICES[:2])
    # a fixed folding: the same folding, so the same interval on every device that holds it
    rep = inspect(CNN, target_cycles=4096)
    assert {f.interval for f in rep.device_fits} == {rep.fit.interval}
    assert all(f.method == "target cycles 4096" for f in rep.device_fits)
