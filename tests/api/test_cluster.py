"""Dask as the execution engine (hwgen.cluster, hwgen.explore).

One local cluster (2 worker processes on 127.0.0.1) serves the module: simulation chunks
sent to it give byte-identical results to a local run, a worker killed while it runs a chunk
has that chunk recomputed with the same result, and ``hwgen explore`` streams its rows,
resumes from its results file, keeps the best point and writes a failed point as a row. The
sweeps here build with a cheap point function (a real sweep of place-and-route runs is
``benchmarks/explore_speedup.py``)."""
from __future__ import annotations

import functools
import json
import logging
import os
import signal
import sys
from pathlib import Path

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")
cloudpickle = pytest.importorskip("cloudpickle")

from hwgen import api, cluster, explore  # noqa: E402
from hwgen.cli import main as _main  # noqa: E402
from hwgen.errors import HwgenError  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "examples" / "digits_mlp_qdq.onnx"
INPUTS = ROOT / "examples" / "digits_test.npz"
EXAMPLE_BUILD = ROOT / "docs" / "schemas" / "build.example.json"

# the workers run this module's functions (they cannot import the tests): send them by value
cloudpickle.register_pickle_by_value(sys.modules[__name__])

_native_chunk = cluster.native_chunk


def main(argv) -> int:
    """The command line in this process: its exit code."""
    with pytest.raises(SystemExit) as e:
        _main(argv)
    return e.value.code


@pytest.fixture(scope="module")
def scheduler():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  host="127.0.0.1", dashboard_address=None,
                                  silence_logs=logging.ERROR) as c:
        yield c.scheduler_address


def _kill_once(marker: str):
    """Kill this worker process the first time (the marker file does not exist yet)."""
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return
    os.close(fd)
    os.kill(os.getpid(), signal.SIGKILL)


def _dies_once(marker: str, verilog: str, top: str, job):
    _kill_once(marker)
    return _native_chunk(verilog, top, job)


@pytest.mark.verilator
def test_verify_on_the_cluster_equals_the_local_run(scheduler):
    opts = dict(count=90, chunk=20, stall=0.3, seed=5, board="ulx3s-85f")
    local = api.verify(MODEL, INPUTS, jobs=1, **opts)
    remote = api.verify(MODEL, INPUTS, scheduler=scheduler, **opts)
    assert local.ok and remote.ok
    assert remote.sim.jobs == 2 and len(remote.sim.batch.ranges) == 5
    assert np.array_equal(remote.sim.outputs_int, local.sim.outputs_int)
    assert np.array_equal(remote.sim.outputs, local.sim.outputs)
    assert np.array_equal(remote.sim.frame_cycles, local.sim.frame_cycles)
    assert (remote.sim.cycles, remote.sim.latency, remote.sim.interval) == \
        (local.sim.cycles, local.sim.latency, local.sim.interval)


@pytest.mark.verilator
def test_simulate_command_on_the_cluster_writes_the_same_bytes(scheduler, tmp_path, capsys):
    design = tmp_path / "d"
    api.compile(MODEL, design, board="ulx3s-85f")
    args = ["simulate", str(design), "--input", str(INPUTS), "--count", "40", "--chunk", "15",
            "--stall", "0.2"]
    assert main(args + ["-o", str(tmp_path / "a.npy"), "-j", "1"]) == 0
    assert main(args + ["-o", str(tmp_path / "b.npy"), "--scheduler", scheduler]) == 0
    assert (tmp_path / "a.npy").read_bytes() == (tmp_path / "b.npy").read_bytes()
    assert "on 2 workers" in capsys.readouterr().out


@pytest.mark.verilator
def test_a_killed_workers_chunk_is_recomputed(scheduler, tmp_path, monkeypatch):
    marker = tmp_path / "killed"
    design = tmp_path / "d"
    api.compile(MODEL, design, board="ulx3s-85f")
    x = np.load(INPUTS)["input"][:60]
    local = api.simulate(design, x, chunk=10, stall=0.25, seed=2, jobs=1)
    monkeypatch.setattr(cluster, "native_chunk", functools.partial(_dies_once, str(marker)))
    remote = api.simulate(design, x, chunk=10, stall=0.25, seed=2, scheduler=scheduler)
    assert marker.exists()         # a worker did die running a chunk
    assert remote.outputs_int.shape == (60, local.outputs_int.shape[1])
    assert np.array_equal(remote.outputs_int, local.outputs_int)
    assert np.array_equal(remote.frame_cycles, local.frame_cycles)


def test_without_dask_scheduler_is_one_line(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "distributed", None)
    with pytest.raises(HwgenError, match=r"pip install 'hwgen\[cluster\]'"):
        cluster.distributed()
    code = main(["verify", str(MODEL), "--input", str(INPUTS), "--count", "2",
                 "--board", "ulx3s-85f", "--scheduler", "tcp://127.0.0.1:1"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "hwgen[cluster]" in err


def test_an_unreachable_scheduler_is_one_line(capsys, tmp_path):
    design = tmp_path / "d"
    api.compile(MODEL, design, board="ulx3s-85f")
    cluster.CONNECT_TIMEOUT, old = 2, cluster.CONNECT_TIMEOUT
    try:
        code = main(["simulate", str(design), "--input", str(INPUTS), "--count", "2", "-o",
                     str(tmp_path / "y.npy"), "--scheduler", "tcp://127.0.0.1:9"])
    finally:
        cluster.CONNECT_TIMEOUT = old
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("hwgen: error: --scheduler tcp://127.0.0.1:9: no Dask")
    assert not (tmp_path / "y.npy").exists()


# ----------------------------------------------------------------------------- explore

def _fake_build(model: bytes, name: str, board: str, point, freq, marker=None, calls=None):
    """A point without Yosys and nextpnr: resources and clock from the options; budget 0.3
    'fails to route'. With ``marker``, the first call kills its worker; with ``calls``, each
    call leaves a file there."""
    if calls is not None:
        Path(calls, point.key).touch()
    if marker is not None:
        _kill_once(marker)
    row = {"point": point.key, "options": {"budget": point.budget, "lanes": point.lanes}}
    if point.budget == 0.3:
        return row | {"status": "failed", "reason": "nextpnr: failed to route 12 nets"}
    scale = point.budget * (2 if point.lanes == "logic" else 1)
    cycles = int(64 / scale)
    fmax = 50.0 - 10 * scale + point.seed
    report = {"resources": {"lut4": {"synthesized": int(4000 * scale), "available": 5280},
                            "ff": {"synthesized": int(2000 * scale), "available": 5280},
                            "dsp": {"synthesized": 0 if point.lanes == "logic" else 4,
                                    "available": 8},
                            "bram": {"synthesized": 3, "available": 30}},
              "performance": {"cycles_per_frame": cycles, "latency_cycles": 3 * cycles},
              "clock": {"clock_mhz": 45.0, "achieved_mhz": fmax, "timing_met": fmax >= 45}}
    return row | explore.row_of(report) | {"seconds": 0.0, "files": {
        "model.bin": f"{point.key}".encode(), "build.json": json.dumps(report).encode()}}


def test_row_of_a_real_build_report():
    row = explore.row_of(json.loads(EXAMPLE_BUILD.read_text()))
    assert row["status"] == "ok" and row["cycles_per_frame"] == 1024
    assert row["fmax_mhz"] == pytest.approx(46.85) and row["timing_met"] is True
    assert row["inferences_per_second"] == pytest.approx(46.852e6 / 1024, abs=0.1)
    assert all(isinstance(row[k], int) for k in explore.KINDS)


def test_explore_streams_rows_keeps_the_best_and_survives_a_dead_worker(scheduler, tmp_path):
    points = explore.grid([0.3, 0.5, 0.9], [], ["auto", "logic"], [1, 2])
    assert len(points) == 12 and len({p.key for p in points}) == 12
    marker = tmp_path / "killed"
    seen = []
    res = explore.explore(MODEL, "icebreaker", tmp_path / "x", points, scheduler=scheduler,
                          point_fn=functools.partial(_fake_build, marker=str(marker)),
                          on_row=seen.append)
    assert marker.exists()
    assert res.ran == 12 and len(seen) == 12 and not res.pending
    assert [r["point"] for r in res.rows] == [p.key for p in points]
    failed = [r for r in res.rows if r["status"] == "failed"]
    assert {r["point"] for r in failed} == {p.key for p in points if p.budget == 0.3}
    assert all(r["reason"] == "nextpnr: failed to route 12 nets" for r in failed)
    # the most inferences/s among the points that meet the clock
    ok = [r for r in res.rows if r["status"] == "ok" and r["timing_met"]]
    want = max(ok, key=lambda r: r["inferences_per_second"])["point"]
    assert res.best == want == "b0.5-auto-s2-router1"
    assert (tmp_path / "x" / "best" / "model.bin").read_bytes() == want.encode()
    doc = json.loads((tmp_path / "x" / "explore.json").read_text())
    assert doc["best"] == want and len(doc["points"]) == 12 and want in doc["pareto"]
    assert all("files" not in r for r in doc["points"])
    html = (tmp_path / "x" / "explore.html").read_text()
    assert html.count("<svg") == 3 and "failed to route" in html
    text = explore.table(res.rows, res.best)
    assert f"{want}" in text and "nextpnr: failed to route" in text


def test_explore_resumes_from_what_finished(scheduler, tmp_path, capsys):
    points = explore.grid([0.5, 0.9], [64], ["auto", "dsp"])
    out = tmp_path / "x"
    first = explore.explore(MODEL, "icebreaker", out, points, scheduler=scheduler,
                            point_fn=_fake_build)
    assert first.ran == 6
    doc = json.loads((out / "explore.json").read_text())
    before = (out / "explore.json").read_bytes()
    # an interrupted sweep: only two points had finished
    doc["points"] = [r for r in doc["points"] if r["point"] in ("b0.5-auto-s1-router1",
                                                                "t64-dsp-s1-router1")]
    (out / "explore.json").write_text(json.dumps(doc))
    calls = tmp_path / "calls"
    calls.mkdir()
    again = explore.explore(MODEL, "icebreaker", out, points, scheduler=scheduler,
                            point_fn=functools.partial(_fake_build, calls=str(calls)))
    assert again.ran == 4
    assert sorted(os.listdir(calls)) == sorted(
        p.key for p in points if p.key not in ("b0.5-auto-s1-router1", "t64-dsp-s1-router1"))
    assert again.best == first.best
    assert json.loads((out / "explore.json").read_bytes())["points"] == \
        json.loads(before)["points"]
    assert [r["point"] for r in again.rows] == [p.key for p in points]
    # finished: nothing to run, no cluster needed
    done = explore.explore(MODEL, "icebreaker", out, points, scheduler="tcp://127.0.0.1:9",
                           point_fn=_fake_build)
    assert done.ran == 0 and done.best == first.best
    # the dry run lists them as finished; another board's sweep is refused
    assert main(["explore", str(MODEL), "--board", "icebreaker", "-o", str(out), "--budget",
                 "0.5", "0.9", "--target-cycles", "64", "--lanes", "auto", "dsp",
                 "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == "6 points, 6 finished" and len(lines) == 7
    with pytest.raises(HwgenError, match="another board"):
        explore.explore(MODEL, "ulx3s-85f", out, points, scheduler=scheduler,
                        point_fn=_fake_build)


def test_explore_refuses_bad_values():
    with pytest.raises(HwgenError, match="--budget"):
        explore.grid([1.5])
    with pytest.raises(HwgenError, match="--lanes"):
        explore.grid([0.5], lanes=["some"])
    assert [p.key for p in explore.grid()] == ["b0.85-auto-s1-router1"]
