"""A batch of frames simulated in chunks, the chunks spread over worker processes.

The rule that makes results independent of the number of workers: a batch of N frames is cut
into chunks of ``frames_per_chunk`` consecutive frames (the last may be shorter); each chunk
is one stream job that starts from reset, and chunk ``k`` of a run with seed ``s`` draws its
stalls from ``random.Random(chunk_seed(s, k))`` (chunk 0: ``s`` itself, so a batch of one
chunk is exactly the run it always was). The chunking depends on the batch and the design
only, never on how many workers run it, so one worker and eight give byte-identical outputs
and identical cycles for every frame (counted from the start of its chunk).

Workers: the native bench is a process of its own, so chunks run from threads, each waiting
on its bench (the bench is built once, before they start). The back ends that simulate in
Python (cocotb's runner, Amaranth's simulator) run in a pool of processes. An interrupt ends
the running benches and workers and leaves nothing behind.
"""
from __future__ import annotations

import math
import multiprocessing
import os
import signal
import threading
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

from hwgen.sim.base import SimTimeout, StreamJob, StreamResult

__all__ = ["CHUNK_CYCLES", "chunk_frames", "chunk_seed", "chunks", "default_jobs", "run_chunks"]

#: cycles a chunk is made to last at least (from the design's cycles per frame), and the
#: multiple of the latency (so the pipeline's filling is a small part of each chunk)
CHUNK_CYCLES = 1 << 14
CHUNK_LATENCIES = 8


def default_jobs() -> int:
    """Worker count by default: the cores this process may use."""
    count = getattr(os, "process_cpu_count", None)
    return max(1, (count() if count else None) or os.cpu_count() or 1)


def chunk_frames(cycles_per_frame: int, latency: int) -> int:
    """Frames per chunk by default, from the design's estimate: enough to last
    ``CHUNK_CYCLES`` cycles and ``CHUNK_LATENCIES`` latencies."""
    return max(1, math.ceil(max(CHUNK_CYCLES, CHUNK_LATENCIES * latency)
                            / max(1, cycles_per_frame)))


def chunks(n_frames: int, per_chunk: int) -> list[range]:
    """The frames of each chunk."""
    if per_chunk < 1:
        raise ValueError(f"frames per chunk must be at least 1 (got {per_chunk})")
    return [range(a, min(a + per_chunk, n_frames)) for a in range(0, n_frames, per_chunk)]


def chunk_seed(seed: int, k: int) -> int:
    """The stall seed of chunk ``k`` of a run seeded ``seed``."""
    return seed if k == 0 else seed + (k << 64)


class _Progress:
    """Frames done, told to ``report(done, total, cycles)`` as chunks finish."""

    def __init__(self, report, total: int):
        self.report, self.total, self.done, self.cycles = report, total, 0, 0
        if report:
            report(0, total, 0)

    def add(self, frames: int, cycles: int):
        self.done += frames
        self.cycles += cycles
        if self.report:
            self.report(self.done, self.total, self.cycles)


def run_chunks(jobs: list[StreamJob], frames: list[int], run_one: Callable, workers: int, *,
               processes: bool = False, progress: Callable | None = None
               ) -> list[StreamResult]:
    """Run every job (``frames[k]`` frames each) with ``run_one(job)`` on ``workers`` workers;
    the results in job order. ``run_one`` (a module-level function if ``processes``) runs a
    native bench when not ``processes``: it is then called with ``running=`` a set its
    process is added to. ``progress(done_frames, total_frames, cycles)`` is told as chunks
    finish. The first failing chunk's error is raised (the others are stopped)."""
    prog = _Progress(progress, sum(frames))
    workers = max(1, min(workers, len(jobs)))
    if processes and workers > 1:
        return _in_processes(jobs, frames, run_one, workers, prog)
    return _in_threads(jobs, frames, run_one, workers, prog, native=not processes)


def _in_threads(jobs, frames, run_one, workers, prog, native: bool):
    if workers == 1 or not native:
        out = []
        for k, (job, n) in enumerate(zip(jobs, frames)):
            out.append(_chunk(k, run_one, job))
            prog.add(n, out[-1].cycles)
        return out
    running: set = set()
    stop = threading.Event()
    results: list[StreamResult | None] = [None] * len(jobs)

    def one(k):
        if stop.is_set():
            return None
        return _chunk(k, run_one, jobs[k], running=running)

    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="hwgen-sim")
    pending: dict = {}
    try:
        pending.update({pool.submit(one, k): k for k in range(len(jobs))})
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for f in done:
                k = pending.pop(f)
                results[k] = f.result()  # a chunk's error ends the batch (finally below)
                prog.add(frames[k], results[k].cycles)
    finally:
        if any(r is None for r in results):  # an error or an interrupt: stop the rest
            stop.set()
            for f in pending:
                f.cancel()
            for proc in list(running):
                proc.kill()
        pool.shutdown(wait=True, cancel_futures=True)
    return results


def _chunk(k: int, run_one, job, **kw) -> StreamResult:
    """``run_one(job)``; a :class:`SimTimeout` says which chunk (``chunk``)."""
    try:
        return run_one(job, **kw)
    except SimTimeout as e:
        e.chunk = k
        raise


def _ignore_interrupts():
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides what to do


def _in_processes(jobs, frames, run_one, workers, prog):
    ctx = multiprocessing.get_context("spawn")
    pool = ctx.Pool(workers, initializer=_ignore_interrupts)
    results: list[StreamResult | None] = [None] * len(jobs)
    try:
        asyncs = [pool.apply_async(run_one, (job,)) for job in jobs]
        for k, a in enumerate(asyncs):
            try:
                results[k] = a.get()
            except SimTimeout as e:
                e.chunk = k
                raise
            prog.add(frames[k], results[k].cycles)
        pool.close()
    finally:
        if any(r is None for r in results):
            pool.terminate()
        pool.join()
    return results
