"""Integer frames through a compiled design: chunks, workers, taps and waveforms.

The batch is cut into chunks of consecutive frames (``hwgen.sim.batch``: the chunking and
the chunks' stall seeds depend on the batch and the design only, so the number of workers
never changes a result). With ``observe`` (per-stream trace, waveforms) the simulated design
is the compiled one rebuilt with every stream driven out of its top module
(:func:`hwgen.assemble.build_observed`); it is only used after the design rebuilt without
those ports was found byte-identical to the folder's Verilog.
"""
from __future__ import annotations

import functools
import hashlib
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from amaranth.back import verilog

from hwgen import cluster, design
from hwgen.assemble import Tap, build_observed, build_top, stream_idents, to_verilog, whole_verilog
from hwgen.dataflow.lower import DataflowGraph, lower
from hwgen.dataflow.weight_load import load_image
from hwgen.errors import HwgenError
from hwgen.io import DESIGN_NPZ, MANIFEST, check_writable_file, user_mode
from hwgen.progress import QUIET, Progress
from hwgen.sim.amaranth_sim import run_amaranth
from hwgen.sim.base import SimTimeout, StreamJob, StreamResult, Wave
from hwgen.sim.batch import chunk_frames, chunk_seed, chunks, default_jobs, run_chunks
from hwgen.sim.native import (
    build_native,
    missing_fst_headers,
    native_is_built,
    native_threads,
    run_native,
)
from hwgen.sim.packing import beats_to_frames, frames_to_beats
from hwgen.sim.verilator import build_verilator, run_verilator

SIMULATORS = ("verilator", "cocotb", "amaranth")
WAVE_KINDS = ("vcd", "fst")


@dataclass
class WaveRequest:
    """Waveforms of frames ``first`` .. ``stop - 1`` into ``path`` (``kind`` vcd or fst)."""
    path: Path
    kind: str
    first: int = 0
    stop: int = 1


@dataclass
class Batch:
    outputs_int: np.ndarray                 # [N, output elements]
    results: list[StreamResult]             # one per chunk
    ranges: list[range]                     # the frames of each chunk
    manifest: dict
    ig: object
    jobs: int
    dfg: DataflowGraph | None = None        # the simulated graph (with ``observe``)
    taps: dict[str, list[tuple[int, int, int]]] = field(default_factory=dict)
    timeout: SimTimeout | None = None       # with ``observe``: the chunk that timed out


def parse_frames(text: str) -> tuple[int, int]:
    """``A:B`` (frames A .. B-1), ``A:`` is refused, ``A`` is ``A:A+1``."""
    try:
        if ":" in text:
            a, b = text.split(":", 1)
            first, stop = int(a or 0), int(b)
        else:
            first = int(text)
            stop = first + 1
    except ValueError:
        raise HwgenError(f"--frames {text!r}: expected A:B (frames A to B-1) or A") from None
    if first < 0 or stop <= first:
        raise HwgenError(f"--frames {text!r}: expected 0 <= A < B")
    return first, stop


def _observed(out_dir: Path, manifest: dict, ig, folding, progress: Progress, fresh: bool,
              emit: bool = True) -> tuple[str, list[Tap], DataflowGraph]:
    """The observed design's Verilog (empty unless ``emit``), its taps and graph, after
    checking that the design rebuilt from the folder is the folder's Verilog (unless
    ``fresh``: this hwgen has just compiled the folder), as ``compile`` converts it by
    default (block by block) or with ``--assembly whole``."""
    with progress.step("rebuilding the design with its streams observable"):
        dfg = lower(ig, folding)
        want = manifest["files"][manifest["verilog"]]
        if not fresh and not any(
                hashlib.sha256(convert(dfg, manifest["top"])[0].encode()).hexdigest() == want
                for convert in (to_verilog, whole_verilog)):
            raise HwgenError(f"{out_dir}: the design rebuilt from {DESIGN_NPZ} is not "
                             f"{manifest['verilog']} (compiled by another hwgen version?); "
                             f"compile it again to trace its streams")
        if not emit:  # the simulator builds its own (in its workers)
            return "", stream_taps(dfg), dfg
        obs = build_observed(dfg)
        text = verilog.convert(obs, name=manifest["top"], emit_src=False)
    return text, obs.taps, dfg


def stream_taps(dfg: DataflowGraph) -> list[Tap]:
    """The taps :func:`hwgen.assemble.build_observed` gives ``dfg``'s design, without
    building it (a stream's payload is its elements per beat, packed)."""
    return [Tap(s, ident, dfg.streams[s].per_beat * dfg.streams[s].qtype.bits)
            for s, ident in stream_idents(dfg).items()]


@functools.lru_cache(maxsize=2)
def _amaranth_top(out_dir: str, observe: bool = False):
    _, ig, folding = design.load(out_dir)
    dfg = lower(ig, folding)
    return build_observed(dfg) if observe else build_top(dfg)


def _amaranth_chunk(out_dir: str, observe: bool, job: StreamJob) -> StreamResult:
    """One chunk in Amaranth's simulator (a module-level function: it runs in workers)."""
    return run_amaranth(_amaranth_top(out_dir, observe), job)


def run_frames(out_dir, xq: np.ndarray, simulator: str = "verilator", stall: float = 0.0,
               seed: int = 0, *, jobs: int | None = None, chunk: int | None = None,
               observe: bool = False, wave: WaveRequest | None = None,
               progress: Progress = QUIET, fresh: bool = False, loaded=None,
               scheduler=None) -> Batch:
    """Feed integer frames ``xq`` [N, elements] to the compiled design in ``out_dir``
    (``fresh``: compiled by this process just now, see :func:`_observed`; ``loaded``: what
    ``design.load(out_dir)`` gave, if the caller has it; ``scheduler``: run the chunks on
    the Dask cluster of that address, or that ``distributed.Client``, see
    :mod:`hwgen.cluster`)."""
    if simulator not in SIMULATORS:
        raise HwgenError(f"unknown simulator '{simulator}' (choose {', '.join(SIMULATORS)})")
    if jobs is not None and jobs < 1:
        raise HwgenError(f"--jobs must be at least 1 (got {jobs})")
    if chunk is not None and chunk < 1:
        raise HwgenError(f"--chunk must be at least 1 (got {chunk})")
    observe = observe or wave is not None
    if scheduler is not None:
        if jobs is not None:
            raise HwgenError("--jobs and --scheduler: the cluster's workers run the chunks "
                             "(give one of them)")
        if wave is not None:
            raise HwgenError("--vcd/--fst are written on this machine: run without "
                             "--scheduler")
        cluster.distributed()   # installed, or the one-line error before any work
    if observe and simulator == "cocotb":
        raise HwgenError("tracing streams and waveforms need the verilator or the amaranth "
                         "simulator (not cocotb)")
    out_dir = Path(out_dir)
    manifest, ig, folding = loaded or design.load(out_dir)
    tin, tout = ig.tensors[ig.input], ig.tensors[ig.output]
    mi, mo = manifest["input"], manifest["output"]
    est = manifest["estimate"]
    n = xq.shape[0]
    per_chunk = chunk or chunk_frames(est["cycles_per_frame"], est["latency_cycles"])
    ranges = chunks(n, per_chunk)
    workers = jobs or default_jobs()

    wave_chunk = None
    if wave is not None:
        if wave.kind not in WAVE_KINDS:
            raise HwgenError(f"unknown waveform format {wave.kind!r}")
        if wave.kind == "fst" and simulator == "amaranth":
            raise HwgenError("--fst: Amaranth's simulator writes VCD only; use --vcd")
        if wave.kind == "fst" and missing_fst_headers():
            raise HwgenError(f"--fst: Verilator's FST writer needs the C headers "
                             f"{', '.join(missing_fst_headers())}, which the C++ compiler "
                             f"cannot find (system packages, e.g. liblz4-dev); use --vcd")
        check_writable_file(wave.path)
        if wave.stop > n:
            raise HwgenError(f"--frames {wave.first}:{wave.stop}: the batch has {n} frames")
        wave_chunk = wave.first // per_chunk
        if (wave.stop - 1) // per_chunk != wave_chunk:
            raise HwgenError(f"--frames {wave.first}:{wave.stop} spans chunks of {per_chunk} "
                             f"frames: choose frames within one chunk, or a larger --chunk")

    taps: list[Tap] = []
    dfg = None
    if observe:
        text, taps, dfg = _observed(out_dir, manifest, ig, folding, progress, fresh,
                                    emit=simulator == "verilator")
    elif simulator != "amaranth":
        text = (out_dir / manifest["verilog"]).read_text()

    # the weight-load image, streamed before each chunk's frames (each chunk starts from reset)
    load = load_image(dfg or lower(ig, folding)) if any(
        f.spram for f in folding.values()) else []
    tmp_wave = None
    job_list = []
    for k, r in enumerate(ranges):
        beats, last = frames_to_beats(xq[r.start:r.stop], tin.qtype, mi["elements_per_beat"])
        m = len(r)
        w = None
        if wave is not None:
            if k == wave_chunk:
                fd, tmp_wave = tempfile.mkstemp(prefix=f".{wave.path.name}.",
                                                dir=wave.path.resolve().parent)
                os.close(fd)
                base = r.start
                w = Wave(tmp_wave, wave.kind, (wave.first - base) * mi["beats_per_frame"],
                         (wave.stop - base) * mo["beats_per_frame"])
            else:
                w = Wave("", wave.kind, 0, 0)
        job_list.append(StreamJob(
            manifest["ports"]["input"]["bits"], manifest["ports"]["output"]["bits"],
            beats, last, m * mo["beats_per_frame"], stall, stall, chunk_seed(seed, k),
            max_cycles=int((est["latency_cycles"] + (m + 2) * est["cycles_per_frame"])
                           * 4 / max(0.05, (1 - stall) ** 2) + 10000),
            taps=[(t.ident, t.bits) for t in taps], wave=w, load_beats=load))

    if jobs is None and simulator == "verilator":
        workers = max(1, workers // native_threads(text))  # a threaded model's threads count
    workers = min(workers, len(ranges))
    processes = simulator != "verilator"
    if scheduler is not None:
        timeout = None
        try:
            results, workers = _on_cluster(scheduler, out_dir, manifest, text if simulator
                                           != "amaranth" else "", simulator, observe,
                                           job_list, ranges, progress)
        except SimTimeout as e:
            if not observe or e.result is None:
                raise
            timeout, results, ranges = e, [e.result], [ranges[e.chunk]]
        return _batch(results, ranges, manifest, ig, workers, dfg, taps, tout, mo, timeout)
    if simulator == "amaranth":
        run_one = functools.partial(_amaranth_chunk, str(out_dir), observe)
    elif simulator == "cocotb":
        with progress.step("building the Verilator model (cocotb)"):
            build_verilator(text, manifest["top"])
        run_one = functools.partial(run_verilator, text, manifest["top"])
    else:
        if not native_is_built(text, manifest["top"], job_list[0]):
            what = f" with {wave.kind.upper()} waveforms" if wave else ""
            with progress.step(f"building the Verilator model{what}"):
                build_native(text, manifest["top"], job_list[0], report=progress.update)
        run_one = functools.partial(run_native, text, manifest["top"])

    timeout = None
    try:
        progress.start_frames()
        try:
            results = run_chunks(job_list, [len(r) for r in ranges], run_one, workers,
                                 processes=processes, progress=progress.frames)
        except SimTimeout as e:
            if not observe or e.result is None:
                raise
            # keep what was transferred: the trace shows where the design stopped
            timeout, results = e, [e.result]
            ranges = [ranges[e.chunk]]
        if tmp_wave is not None and timeout is None:
            os.chmod(tmp_wave, user_mode(0o666))   # mkstemp's 0600 → the user's mode
            os.replace(tmp_wave, wave.path)
            tmp_wave = None
    finally:
        progress.clear()
        if tmp_wave is not None and os.path.exists(tmp_wave):
            os.unlink(tmp_wave)

    return _batch(results, ranges, manifest, ig, workers, dfg, taps, tout, mo, timeout)


def _on_cluster(scheduler, out_dir: Path, manifest: dict, text: str, simulator: str,
                observe: bool, job_list: list[StreamJob], ranges: list[range],
                progress: Progress) -> tuple[list[StreamResult], int]:
    """The chunks on a Dask cluster (:mod:`hwgen.cluster`): the results and the worker
    count."""
    with cluster.connect(scheduler) as client:
        if simulator == "amaranth":
            files = {f: (out_dir / f).read_bytes()
                     for f in (MANIFEST, DESIGN_NPZ, manifest["verilog"])}
            run_one, shared = cluster.in_folder, (files, _amaranth_chunk, observe)
        elif simulator == "cocotb":
            run_one, shared = run_verilator, (text, manifest["top"])
        else:
            run_one, shared = cluster.native_chunk, (text, manifest["top"])
        try:
            progress.start_frames()
            results = cluster.run_chunks(client, job_list, [len(r) for r in ranges],
                                         run_one, shared, progress=progress.frames)
        finally:
            progress.clear()
        return results, cluster.cluster_workers(client)


def _batch(results, ranges, manifest, ig, workers, dfg, taps, tout, mo, timeout) -> Batch:
    outs = [beats_to_frames(res.out_beats, tout.qtype, mo["elements_per_beat"], tout.size)
            if res.out_beats else np.zeros((0, tout.size), np.int64) for res in results]
    batch = Batch(np.concatenate(outs) if timeout is None else outs[0], results, ranges,
                  manifest, ig, workers, dfg, timeout=timeout)
    for t, j in zip(taps, range(len(taps))):
        batch.taps[t.stream] = [(r.start, cyc, p) for res, r in zip(results, ranges)
                                for cyc, p in zip(*res.taps[j])]
    return batch
