"""``--board auto``: the smallest listed board a model fits, said with why; the utilisation
lines (used/device, share of the budget)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_hwgen as hwgen

from hwgen import api
from hwgen.boards.fold import AutoBoard, resolve_target
from hwgen.build import choose_board
from hwgen.errors import HwgenError
from hwgen.inspect import format_text, inspect

EX = Path(__file__).resolve().parent.parent / "examples"
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
