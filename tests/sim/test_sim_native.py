"""Tests of the native Verilator bench (sim/native.py + sim/native_bench.cpp).

The native bench must give exactly what the cocotb bench (sim/verilator.py) gives: the same
beats, last flags, transfer cycles and cycle count, with and without random stalls, and the
same errors. Builds are cached like the cocotb ones (``$HWGEN_CACHE`` or
``~/.cache/hwgen/verilator``).
"""
from __future__ import annotations

import random
import subprocess
from pathlib import Path

import numpy as np
import pytest
from amaranth.back import verilog
from test_sim_verilator import CombAddOne, NeverValid, SkidAddOne

import hwgen
from hwgen import design
from hwgen.sim.base import SimTimeout, StreamJob
from hwgen.sim.native import native_cache_key, random_key, run_native
from hwgen.sim.packing import frames_to_beats
from hwgen.sim.verilator import cache_root, run_verilator

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
pytestmark = pytest.mark.verilator


def verilog_of(component) -> str:
    return verilog.convert(component, name="top", emit_src=False)


def make_job(width, beats, stall=0.0, seed=0, n_out=None, **kw) -> StreamJob:
    return StreamJob(in_width=width, out_width=width, in_beats=beats,
                     in_last=[i % 4 == 3 for i in range(len(beats))],
                     n_out_beats=len(beats) if n_out is None else n_out,
                     stall_in=stall, stall_out=stall, seed=seed, **kw)


def both(text, top, job):
    """(native result, cocotb result) of one job."""
    return run_native(text, top, job), run_verilator(text, top, job)


# ------------------------------------------------------------------ CPython's random.random

def test_random_draws_equal_cpython():
    """The bench's MT19937 gives random.Random(seed).random() bit for bit (2000 draws cross
    three regenerations of the 624-word state)."""
    text = verilog_of(SkidAddOne(8))
    job = make_job(8, [1])
    run_native(text, "top", job)  # builds the bench
    bench = cache_root(None) / native_cache_key(text, "top", job) / "bench"
    for seed in (0, 1, 5, 42, 2**31, 2**32 - 1, 2**32, 2**64 + 5, 2**200 + 123,
                 12345678901234567890, -7):
        out = subprocess.run([str(bench), "--random", "2000", *map(str, random_key(seed))],
                             capture_output=True, text=True, check=True).stdout.split()
        rand = random.Random(seed).random
        assert [float.fromhex(x) for x in out] == [rand() for _ in range(2000)], seed


def test_random_key_is_cpythons_init_by_array_key():
    assert random_key(0) == [0]
    assert random_key(1) == [1]
    assert random_key(2**32) == [0, 1]
    assert random_key(-5) == [5]
    assert random_key(2**64 - 1) == [0xFFFF_FFFF, 0xFFFF_FFFF]


# ------------------------------------------------------------------ same results as cocotb

@pytest.mark.parametrize("stall,seed", [(0.0, 0), (0.3, 0), (0.3, 1), (0.3, 2**40 + 3)])
def test_skid_matches_cocotb(stall, seed):
    beats = [random.Random(seed).getrandbits(100) for _ in range(80)]
    job = make_job(100, beats, stall=stall, seed=seed)
    native, cocotb = both(verilog_of(SkidAddOne(100)), "top", job)
    assert native == cocotb
    assert native.out_beats == [(b + 1) % (1 << 100) for b in beats]
    if stall:
        assert native.out_times[-1] > 80  # stalls did happen


@pytest.mark.sim
@pytest.mark.parametrize("n", [0, 40])
def test_amaranth_back_end_gives_the_same_result(n):
    """Amaranth's simulator on the same job: the same beats, transfer cycles and total
    cycles (it watches the same cycles after the last beat, with ``ready`` held high)."""
    from hwgen.sim.amaranth_sim import run_amaranth

    beats = [random.Random(n).getrandbits(16) for _ in range(n)]
    job = make_job(16, beats, stall=0.3, seed=5)
    native = run_native(verilog_of(SkidAddOne(16)), "top", job)
    assert run_amaranth(SkidAddOne(16), job) == native


@pytest.mark.parametrize("seed", [3, 9])
def test_combinational_paths_match_cocotb(seed):
    # 32 bits: the sign of 32-bit ports; the pass-through makes sampling errors visible
    beats = [0xFFFF_FFFF, 0x8000_0000, 0x7FFF_FFFF] + list(range(60))
    job = make_job(32, beats, stall=0.4, seed=seed)
    native, cocotb = both(verilog_of(CombAddOne(32)), "top", job)
    assert native == cocotb
    assert native.in_times == native.out_times
    assert native.out_beats[:3] == [0, 0x8000_0001, 0x8000_0000]


def test_unequal_in_and_out_stall_probabilities_match_cocotb():
    job = make_job(100, list(range(50)), seed=11)
    job.stall_in, job.stall_out = 0.0, 0.5  # only the sink draws
    native, cocotb = both(verilog_of(SkidAddOne(100)), "top", job)
    assert native == cocotb
    job.stall_in, job.stall_out = 0.6, 0.0  # only the source draws
    native, cocotb = both(verilog_of(SkidAddOne(100)), "top", job)
    assert native == cocotb


@pytest.mark.parametrize("width", [40, 100, 200])
def test_wide_beats_round_trip_exactly(width):
    top = (1 << width) - 1
    beats = [0, 1, top, top - 1, (1 << 63) - 1, 1 << 63, (1 << 32) - 1, 1 << 32,
             (1 << (width - 1)) + 12345] + [random.Random(width).getrandbits(width)
                                            for _ in range(20)]
    beats = [b & top for b in beats]
    job = make_job(width, beats, stall=0.3, seed=width)
    native, cocotb = both(verilog_of(SkidAddOne(width)), "top", job)
    assert native == cocotb
    assert native.out_beats == [(b + 1) & top for b in beats]
    assert native.out_last == job.in_last


def test_empty_job_runs_the_surplus_watch_only():
    job = make_job(8, [], n_out=0)
    native, cocotb = both(verilog_of(SkidAddOne(8)), "top", job)
    assert native == cocotb and native.cycles == 32


# ----------------------------------------------------------------------------- errors

def test_surplus_output_beat_is_the_same_error():
    job = make_job(32, list(range(10)), n_out=9)
    text = verilog_of(CombAddOne(32))
    with pytest.raises(RuntimeError, match="more than the expected 9") as native:
        run_native(text, "top", job)
    with pytest.raises(RuntimeError) as cocotb:
        run_verilator(text, "top", job)
    assert str(native.value) == str(cocotb.value)


def test_run_folder_removed_while_the_bench_runs(monkeypatch):
    """Another program deleting the bench's temporary folder mid-run (a cleanup of /tmp)
    is one clear error, not a traceback from writing the bench's log there."""
    import shutil

    from hwgen.errors import HwgenError
    from hwgen.sim import native

    class Bench:
        returncode = 1

        def __init__(self, argv, cwd, **kw):
            self.cwd = cwd

        def communicate(self):
            shutil.rmtree(self.cwd)
            return "", None

        def poll(self):
            return self.returncode

    monkeypatch.setattr(native, "_build", lambda *a: Path("bench"))
    monkeypatch.setattr(native.subprocess, "Popen", Bench)
    with pytest.raises(HwgenError, match="was removed while the bench ran"):
        run_native("module top; endmodule", "top", make_job(8, [1, 2], n_out=2))


def test_timeout_is_the_same_error():
    job = make_job(8, [1, 2, 3, 4], max_cycles=300)
    text = verilog_of(NeverValid(8))
    with pytest.raises(SimTimeout, match="0 of 4 output beats arrived within 300 cycles") as e:
        run_native(text, "top", job)
    with pytest.raises(SimTimeout) as cocotb:
        run_verilator(text, "top", job)
    assert str(e.value) == str(cocotb.value)
    assert "(1 of 4 input beats were consumed)" in str(e.value)


def test_build_error_reports_compiler_output(tmp_path):
    with pytest.raises(RuntimeError, match="(?s)build of 'top' failed.*syntax error"):
        run_native("module top(input clk; endmodule\n", "top", make_job(8, [1]),
                   build_dir=str(tmp_path))


def test_beat_too_wide_for_the_port_is_refused():
    with pytest.raises(ValueError, match="does not fit in 8 bits"):
        run_native(verilog_of(SkidAddOne(8)), "top", make_job(8, [256]))


def test_second_run_reuses_the_cached_build(tmp_path):
    text = verilog_of(SkidAddOne(100))
    job = make_job(100, list(range(8)))
    first = run_native(text, "top", job, build_dir=str(tmp_path))
    entry = tmp_path / native_cache_key(text, "top", job)
    assert (entry / "ok").is_file() and (entry / "top.v").read_text() == text
    assert [p.name for p in tmp_path.iterdir()] == [entry.name]  # nothing else left behind

    def mtimes():
        return [(entry / f).stat().st_mtime_ns for f in (".", "bench")]

    before, used = mtimes(), (entry / "ok").stat().st_mtime_ns
    assert run_native(text, "top", job, build_dir=str(tmp_path)) == first
    assert mtimes() == before  # not rebuilt: the cache entry was reused ...
    assert (entry / "ok").stat().st_mtime_ns > used  # ... and its use recorded (LRU)
    # the cocotb build is a different entry
    run_verilator(text, "top", job, build_dir=str(tmp_path))
    assert len(list(tmp_path.iterdir())) == 2 and mtimes() == before


# ----------------------------------------------------------------- compiled example models

def model_job(out_dir, data: str, frames: int, stall: float, seed: int):
    """The job the API runs for the first ``frames`` samples of an example data set."""
    manifest, ig, _ = design.load(out_dir)
    x = np.load(EXAMPLES / data)["input"][:frames].astype(np.float32)
    flat = x.reshape(frames, manifest["input"]["frame_elements"])
    xq = ig.tensors[ig.input].quantize(ig.to_stream(flat))
    beats, last = frames_to_beats(xq, ig.tensors[ig.input].qtype,
                                  manifest["input"]["elements_per_beat"])
    text = (out_dir / manifest["verilog"]).read_text()
    return text, manifest["top"], StreamJob(
        manifest["ports"]["input"]["bits"], manifest["ports"]["output"]["bits"], beats, last,
        frames * manifest["output"]["beats_per_frame"], stall, stall, seed)


@pytest.fixture(scope="module", params=[("digits_mlp_qdq.onnx", "digits_test.npz"),
                                        ("digits_cnn_qdq.onnx", "digits_images_test.npz")],
                ids=["mlp", "cnn"])
def compiled(request, tmp_path_factory):
    model, data = request.param
    out = tmp_path_factory.mktemp(model.split(".")[0]) / "d"
    hwgen.compile(EXAMPLES / model, out, board="ulx3s-25f")   # folded small: a quick build
    return out, data


@pytest.mark.slow
@pytest.mark.parametrize("stall,seed", [(0.0, 0), (0.3, 1), (0.3, 7)])
def test_example_model_matches_cocotb(compiled, stall, seed):
    out, data = compiled
    text, top, job = model_job(out, data, 3, stall, seed)
    native, cocotb = both(text, top, job)
    assert native == cocotb
    assert len(native.out_beats) == job.n_out_beats


@pytest.mark.slow
def test_api_verilator_is_native_and_agrees_with_cocotb(compiled):
    out, data = compiled
    x = np.load(EXAMPLES / data)["input"][:4]
    native = hwgen.simulate(out, x, simulator="verilator", stall=0.3, seed=5)
    cocotb = hwgen.simulate(out, x, simulator="cocotb", stall=0.3, seed=5)
    assert np.array_equal(native.outputs_int, cocotb.outputs_int)
    assert (native.cycles, native.latency, native.interval) == (
        cocotb.cycles, cocotb.latency, cocotb.interval)
    assert (native.simulator, cocotb.simulator) == ("verilator", "cocotb")


@pytest.mark.slow
def test_chunked_batches_agree_with_cocotb_under_stalls(compiled):
    """The same design through both benches, a few frames with stalls, cut into chunks and
    run on two workers: identical outputs and cycles for every frame. (A registered ``room``
    signal in the output credits, logically identical, once deadlocked the native bench
    only: both benches must see one design the same way, cycle for cycle.)"""
    out, data = compiled
    x = np.load(EXAMPLES / data)["input"][:5]
    native = hwgen.simulate(out, x, simulator="verilator", stall=0.3, seed=9, chunk=2, jobs=2)
    cocotb = hwgen.simulate(out, x, simulator="cocotb", stall=0.3, seed=9, chunk=2, jobs=2)
    assert len(native.batch.results) == 3 and cocotb.jobs == 2
    assert np.array_equal(native.outputs_int, cocotb.outputs_int)
    assert np.array_equal(native.frame_cycles, cocotb.frame_cycles)
    assert [r.cycles for r in native.batch.results] == [r.cycles for r in cocotb.batch.results]
    assert (native.cycles, native.latency, native.interval) == (
        cocotb.cycles, cocotb.latency, cocotb.interval)


def test_the_simulators_optimisation_level_comes_from_the_environment(monkeypatch):
    from hwgen.errors import HwgenError
    from hwgen.sim.verilator import cxx_opt, opt_makeflags
    monkeypatch.delenv("HWGEN_SIM_OPT", raising=False)
    assert cxx_opt("-O2") == "-O2" and cxx_opt(None) is None and opt_makeflags(None) == ""
    monkeypatch.setenv("HWGEN_SIM_OPT", "-O0")
    assert cxx_opt("-O2") == "-O0"
    assert opt_makeflags("-O0") == "OPT_FAST=-O0 OPT_SLOW=-O0 OPT_GLOBAL=-O0"
    monkeypatch.setenv("HWGEN_SIM_OPT", "-O9")
    with pytest.raises(HwgenError, match="HWGEN_SIM_OPT"):
        cxx_opt("-O2")
