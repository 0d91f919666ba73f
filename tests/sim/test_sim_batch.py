"""Verification at scale: chunked batches on several workers, per-stream trace, waveforms.

One compiled digits MLP serves the module; its Verilator builds (the design, and the design
built for observation with VCD) are cached by content hash, so after the first run of the
suite these tests take seconds.
"""
from __future__ import annotations

import io

import numpy as np
import pytest
from conftest import EXAMPLES, corrupt_fc1_golden, run_hwgen, vcd_header

import hwgen
from hwgen import api, simrun
from hwgen.progress import Progress
from hwgen.rtl_templates.words import pack_word
from hwgen.sim.batch import CHUNK_CYCLES, chunk_frames, chunk_seed, chunks, default_jobs
from hwgen.sim.native import missing_fst_headers
from hwgen.sim.packing import pack_rows
from hwgen.simrun import WaveRequest, parse_frames

MLP = EXAMPLES / "digits_mlp_qdq.onnx"
DATA = EXAMPLES / "digits_test.npz"


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    out = tmp_path_factory.mktemp("mlp") / "d"
    hwgen.compile(MLP, out, board="ulx3s-85f")
    return out


@pytest.fixture(scope="module")
def x():
    return np.load(DATA)["input"][:12].astype(np.float32)


# ----------------------------------------------------------------------------- chunking rule

def test_chunks_and_seeds():
    assert [list(r) for r in chunks(7, 3)] == [[0, 1, 2], [3, 4, 5], [6]]
    assert chunks(2, 5) == [range(0, 2)]
    assert chunk_seed(5, 0) == 5                      # one chunk: the run's own seed
    seeds = {chunk_seed(s, k) for s in range(4) for k in range(4)}
    assert len(seeds) == 16                           # no two chunks of small seeds share one
    assert chunk_frames(32, 168) == CHUNK_CYCLES // 32
    assert chunk_frames(100_000, 300_000) == 24       # eight latencies
    assert default_jobs() >= 1
    with pytest.raises(ValueError):
        chunks(3, 0)


def test_frames_option():
    assert parse_frames("2:5") == (2, 5)
    assert parse_frames("3") == (3, 4)
    for bad in ("5:2", "a:b", "-1:2", "3:3"):
        with pytest.raises(hwgen.HwgenError):
            parse_frames(bad)


# ------------------------------------------------------------------ workers change nothing

@pytest.mark.verilator
def test_jobs_give_identical_outputs_and_cycles(mlp, x):
    """--jobs 1 and --jobs 2: byte-identical outputs, identical cycles for every frame."""
    one = api.simulate(mlp, x, stall=0.3, seed=3, jobs=1, chunk=4)
    two = api.simulate(mlp, x, stall=0.3, seed=3, jobs=2, chunk=4)
    assert (one.jobs, two.jobs, one.chunk_frames) == (1, 2, 4)
    assert one.outputs.tobytes() == two.outputs.tobytes()
    assert np.array_equal(one.frame_cycles, two.frame_cycles)
    assert (one.cycles, one.latency, one.interval) == (two.cycles, two.latency, two.interval)
    # the chunks are streams of their own: each starts from reset with a seed of its own
    assert len(one.batch.results) == 3
    assert one.frame_cycles[4, 0] < one.frame_cycles[3, 0]
    # and the outputs are the unchunked run's
    whole = api.simulate(mlp, x, stall=0.3, seed=3, jobs=1, chunk=12)
    assert np.array_equal(whole.outputs_int, one.outputs_int)


@pytest.mark.verilator
def test_cli_jobs_and_no_progress_in_pipes(mlp, tmp_path):
    outs = []
    for jobs in (1, 2):
        y = tmp_path / f"y{jobs}.npy"
        r = run_hwgen("simulate", mlp, "--input", DATA, "--count", 10, "--chunk", 3,
                      "--jobs", jobs, "--stall", 0.2, "-o", y)
        assert r.returncode == 0, r.stderr
        assert r.stderr == ""  # no progress line when stderr is not a terminal
        assert f"chunks of 3 frames on {jobs} worker" in r.stdout
        outs.append((y.read_bytes(), r.stdout.split("simulated", 2)[2]))
    assert outs[0][0] == outs[1][0]


def test_progress_line_only_on_a_terminal():
    quiet = io.StringIO()
    p = Progress(stream=quiet)           # a StringIO is not a terminal
    with p.step("compiling"):
        p.frames(3, 10, 1000)
    assert quiet.getvalue() == ""
    shown = io.StringIO()
    p = Progress(enabled=True, stream=shown)
    with p.step("compiling"):
        pass
    p.frames(10, 10, 5000)
    p.clear()
    text = shown.getvalue()
    assert "hwgen: compiling" in text and "10/10 frames" in text and text.endswith("\r")


# ------------------------------------------------------------------------ per-stream trace

@pytest.fixture(scope="module")
def traced(tmp_path_factory, x):
    tmp = tmp_path_factory.mktemp("traced")
    wave = WaveRequest(tmp / "w.vcd", "vcd", 1, 3)
    rep = api.verify(MLP, x[:6], trace=True, wave=wave, chunk=4, jobs=2, stall=0.2,
                     board="ulx3s-85f")
    return rep, wave.path


@pytest.mark.verilator
def test_trace_of_a_correct_design_agrees_everywhere(traced):
    rep, _ = traced
    manifest = rep.compiled.manifest
    assert rep.ok and rep.trace.ok and rep.trace.first is None
    assert {c.stream for c in rep.trace.streams} == set(manifest["streams"])
    assert rep.trace.summary() == (f"all {len(manifest['streams'])} streams agree with the "
                                   f"golden model")
    for c in rep.trace.streams:
        assert c.rtl_elements == c.golden_elements == 6 * c.elements_per_frame


@pytest.mark.verilator
def test_vcd_names_the_manifests_streams(traced):
    rep, path = traced
    text = path.read_text()
    head = text[:text.index("$enddefinitions")]
    assert text.startswith("$version") and "$timescale 1ns $end" in head
    for s in rep.compiled.manifest["streams"]:
        for part in ("valid", "ready", "payload"):
            assert f" {s}__{part} " in head
    assert "#10\n" in text or "#0\n" in text  # value changes follow


@pytest.mark.verilator
def test_trace_names_the_block_whose_golden_face_is_wrong(monkeypatch, tmp_path, x):
    """A fault in one block (here its golden face, in this process) is found at that block:
    the first diverging stream is its output, at the corrupted frame and element."""
    corrupt_fc1_golden(monkeypatch)
    rep = api.verify(MLP, x[:6], trace=True, wave=WaveRequest(tmp_path / "w.vcd", "vcd", 1, 3),
                     chunk=4, jobs=2, stall=0.2, board="ulx3s-85f")
    # the +1 on one hidden element is lost by the output layer: only the trace sees it, and
    # it fails the verification
    assert rep.rtl_equals_golden and not rep.trace.ok and not rep.ok
    first = rep.trace.first
    assert rep.trace.first_block == "fc1" and first.kind == "mvau"
    assert (first.frame, first.element) == (2, 5)
    assert first.golden_value == first.rtl_value + 1
    assert first.cycle is not None
    upstream = [c for c in rep.trace.streams if c.producer in (None, "fc0")]
    assert upstream and all(c.ok for c in upstream)
    assert "first diverging block fc1" in rep.trace.summary()


@pytest.mark.verilator
def test_cli_simulate_writes_waveforms(traced, mlp, tmp_path):
    """``simulate --vcd`` on a compiled folder (the design rebuilt for observation is checked
    against the folder's Verilog first); the build is ``traced``'s, from the cache."""
    vcd = tmp_path / "s.vcd"
    r = run_hwgen("simulate", mlp, "--input", DATA, "--count", 4, "--chunk", 4, "--vcd", vcd,
                  "--frames", "0:2", "-o", tmp_path / "y.npy")
    assert r.returncode == 0, r.stderr
    assert f"wrote waveforms to {vcd}" in r.stdout
    assert " relu0_out_QuantizeLinear_Output__valid " in vcd_header(vcd)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    r = run_hwgen("simulate", mlp, "--input", DATA, "--count", 4, "--frames", "0:2",
                  "-o", tmp_path / "y.npy")
    assert r.returncode == 2 and "--frames selects the frames of --vcd or --fst" in r.stderr


def test_trace_needs_taps_the_cocotb_bench_lacks(mlp, x):
    with pytest.raises(hwgen.HwgenError, match="need the verilator or the amaranth simulator"):
        api.simulate(mlp, x[:2], "cocotb", observe=True)


def test_wave_frames_must_lie_in_one_chunk(mlp, x, tmp_path):
    with pytest.raises(hwgen.HwgenError, match="spans chunks of 4 frames"):
        api.simulate(mlp, x, chunk=4, wave=WaveRequest(tmp_path / "w.vcd", "vcd", 3, 6))
    assert not (tmp_path / "w.vcd").exists()


def test_vectorised_packing_is_pack_word():
    rng = np.random.default_rng(1)
    for bits in (1, 3, 8, 9, 16, 31, 32):
        for per in (1, 3, 64):
            raw = rng.integers(0, 1 << bits, size=(40, per), dtype=np.uint64)
            assert pack_rows(raw, bits, block=7) == [pack_word(r, bits) for r in raw.tolist()]


@pytest.mark.verilator
def test_fst_is_written_or_refused_in_one_line(mlp, tmp_path):
    """FST needs C headers outside the Verilator package (lz4, zlib): without them --fst is
    one error line before any build; with them the file is written."""
    fst = tmp_path / "w.fst"
    r = run_hwgen("simulate", mlp, "--input", DATA, "--count", 2, "--fst", fst,
                  "-o", tmp_path / "y.npy")
    if missing_fst_headers():
        assert r.returncode == 2 and "Traceback" not in r.stderr
        assert r.stderr.startswith("hwgen: error: --fst: ") and "use --vcd" in r.stderr
        assert not fst.exists()
    else:
        assert r.returncode == 0, r.stderr
        assert fst.read_bytes()[:1] == b"\x00"  # an FST header block


@pytest.mark.verilator
def test_trace_of_a_stopped_design_counts_each_streams_elements(monkeypatch, tmp_path, x):
    """A design that stops (here: a cycle limit far too short) is reported with what each
    stream transferred; no waveform file is left behind."""
    class Short(simrun.StreamJob):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            self.max_cycles = 100

    monkeypatch.setattr(simrun, "StreamJob", Short)
    vcd = tmp_path / "w.vcd"
    with pytest.raises(hwgen.HwgenError) as e:
        api.verify(MLP, x[:6], trace=True, wave=WaveRequest(vcd, "vcd", 1, 3), chunk=4,
                   jobs=2, stall=0.2, board="ulx3s-85f")
    msg = str(e.value)
    assert "output beats arrived within 100 cycles" in msg
    assert "elements each stream transferred of the chunk's: input " in msg
    assert " logits_QuantizeLinear_Output " in msg
    assert list(tmp_path.iterdir()) == []
