"""``hwgen build``: one small design through the whole flow (compile, board top, Yosys,
nextpnr with the board's constraints, icepack) and the refusals."""
from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from conftest import run_hwgen

EX = Path(__file__).resolve().parents[2] / "examples"
MLP = EX / "digits_mlp_qdq.onnx"
SCHEMAS = EX.parent / "docs" / "schemas"


@pytest.mark.synth
@pytest.mark.slow
def test_build_mlp_icebreaker(tmp_path):
    out = tmp_path / "ice"
    r = run_hwgen("build", str(MLP), "--board", "icebreaker", "-o", str(out), timeout=1800)
    assert r.returncode == 0, r.stderr
    assert "built" in r.stdout and "inferences/s" in r.stdout
    doc = json.loads((out / "build.json").read_text())
    assert doc["format"] == "hwgen-build" and doc["board"]["id"] == "icebreaker"
    # it follows its documented schema (docs/formats.md), key for key with the stored example
    schema = json.loads((SCHEMAS / "build.schema.json").read_text())
    errors = [e.message for e in jsonschema.Draft202012Validator(schema).iter_errors(doc)]
    assert not errors, ("build.json no longer follows docs/schemas/build.schema.json; update "
                        "the schema, docs/schemas/build.example.json and docs/formats.md: "
                        + "; ".join(errors))
    assert set(doc) == set(json.loads((SCHEMAS / "build.example.json").read_text()))
    bit = out / doc["files"]["bitstream"]
    data = bit.read_bytes()
    assert bit.suffix == ".bin" and b"\x7e\xaa\x99\x7e" in data[:64]   # iCE40 sync word
    for f in doc["files"].values():
        assert (out / f).is_file(), f
    # the tools' records of the run that made the bitstream are kept beside it
    assert {doc["files"][k] for k in ("yosys_log", "nextpnr_log", "timing_report")} == {
        "yosys.log", "nextpnr.log", "timing_report.json"}
    assert "Yosys" in (out / "yosys.log").read_text()
    assert "fmax" in json.loads((out / "timing_report.json").read_text())
    # the PLL makes the 45 MHz default from the 12 MHz oscillator
    clock = doc["clock"]
    assert clock["pll"]["primitive"] == "SB_PLL40_PAD" and clock["clock_mhz"] == 45.0
    assert clock["achieved_mhz"] > 0 and clock["timing_met"] == (clock["achieved_mhz"] >= 45)
    if not clock["timing_met"]:
        assert any("timing not met" in w for w in doc["warnings"])
    # resources: tiles exact, LUT4 and flip-flops within the resource model's 15 %
    res = doc["resources"]
    assert res["dsp"]["synthesized"] == res["dsp"]["estimated"]
    assert res["bram"]["synthesized"] == res["bram"]["estimated"]
    for k in ("lut4", "ff"):
        assert abs(res[k]["synthesized"] / res[k]["estimated"] - 1) <= 0.15, (k, res[k])
        assert res[k]["synthesized"] <= res[k]["available"]
    assert res["placed"]["ICESTORM_PLL"]["used"] == 1
    perf = doc["performance"]
    assert perf["inferences_per_second"] == pytest.approx(45e6 / perf["cycles_per_frame"])
    assert set(doc["steps_seconds"]) >= {"compile", "synthesis", "place_and_route", "pack"}
    assert doc["tools"]["yosys"] and doc["tools"]["nextpnr"]

    # the compiled folder builds again to the same bitstream (cached: seconds)
    again = tmp_path / "again"
    r = run_hwgen("build", str(out), "--board", "icebreaker", "-o", str(again), timeout=1800)
    assert r.returncode == 0, r.stderr
    assert (again / bit.name).read_bytes() == data
    assert json.loads((again / "build.json").read_text())["cached"]["place_and_route"]
    # and into its own folder, replacing only its files
    r = run_hwgen("build", str(out), "--board", "icebreaker", "-o", str(out), timeout=1800)
    assert r.returncode == 0, r.stderr
    assert (out / bit.name).read_bytes() == data
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in again.iterdir())


@pytest.mark.parametrize("args, message", [
    (["--board", "orangecrab-25f"], "no USB-serial UART"),
    (["--board", "nosuch"], "unknown board"),
    (["--board", "ulx3s-85f", "--freq", "48"], "PLL"),
    (["--board", "icebreaker", "--baud", "5000000"], "baud"),
    (["--board", "icebreaker", "--seeds", "0"], "--seeds"),
])
def test_build_refusals(tmp_path, args, message):
    out = tmp_path / "o"
    r = run_hwgen("build", str(MLP), "-o", str(out), *args)
    assert r.returncode == 2
    assert message in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert not out.exists()


def test_seeds_until_one_meets_the_clock():
    """``--seeds K``: seeds in turn until one meets the clock (kept, the rest not run), else
    the fastest (the first of equals); every seed tried is reported with its clock."""
    from types import SimpleNamespace

    from hwgen.build import first_to_meet

    fmax = {1: 42.9, 2: 47.3, 3: 44.1, 4: 49.0}
    ran = []

    def pnr_at(seed, k):
        ran.append((seed, k))
        return SimpleNamespace(seed=seed, fmax_mhz=fmax[seed], met=fmax[seed] >= 45)

    best, tried = first_to_meet(pnr_at, 1, 4, 45.0)
    assert best.seed == 2 and ran == [(1, 0), (2, 1)]
    assert tried == [{"seed": 1, "achieved_mhz": 42.9, "timing_met": False},
                     {"seed": 2, "achieved_mhz": 47.3, "timing_met": True}]
    ran.clear()
    best, tried = first_to_meet(pnr_at, 1, 3, 50.0)     # none meets 50 MHz: the fastest
    assert best.seed == 2 and [t["seed"] for t in tried] == [1, 2, 3] and len(ran) == 3
    best, tried = first_to_meet(pnr_at, 3, 1, 45.0)     # one seed: as --seed alone
    assert best.seed == 3 and tried == [{"seed": 3, "achieved_mhz": 44.1,
                                         "timing_met": False}]
