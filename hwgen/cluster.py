"""Dask as an execution engine: simulation chunks and sweep points on a cluster.

``hwgen verify|simulate --scheduler ADDRESS`` sends a batch's chunks (:mod:`hwgen.sim.batch`:
the chunking and each chunk's stall seed depend on the batch and the design only) to the
workers of a Dask cluster, so the outputs and cycles are byte-identical to a local run for
any number of workers. ``hwgen explore`` (:mod:`hwgen.explore`) runs one build per task.

What goes to the workers: the design's Verilog once per batch (held by a task of its own,
:func:`send`, and referred to by every chunk), and per chunk its
:class:`~hwgen.sim.base.StreamJob`. A worker builds the design's simulator once (a file
lock in the simulator cache, ``$HWGEN_CACHE`` or ``~/.cache/hwgen/verilator``, makes the
worker processes of one machine, or of machines sharing that folder, build it once and
fetch it after) and runs each chunk from it. With
Amaranth's simulator the compiled folder's three files travel instead and are unpacked once
per worker process.

Failures: a worker that dies (killed, out of memory) has its chunks run again on another
worker by the scheduler; a task that raises something unexpected is retried
(:data:`RETRIES`). A timeout or a user error in a chunk is a result, not a retry: it comes
back and ends the batch as it would locally. An interrupt (Ctrl-C) cancels the batch's
tasks on the cluster.

Dask is optional (``pip install 'hwgen[cluster]'``): it is imported only when a scheduler
is used, and without it ``--scheduler`` is a one-line error.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from hwgen import __version__
from hwgen.errors import HwgenError
from hwgen.sim.base import SimTimeout, StreamJob, StreamResult
from hwgen.sim.batch import default_jobs
from hwgen.sim.cache import cache_root
from hwgen.sim.native import build_native, native_cache_key, native_is_built, run_native

__all__ = ["INSTALL", "RETRIES", "distributed", "connect", "run_chunks", "native_chunk",
           "in_folder", "cluster_workers", "send"]

#: what to install for ``--scheduler`` and ``hwgen explore``
INSTALL = "pip install 'hwgen[cluster]'"
#: times a task that raised an unexpected error is run again (a worker's death is the
#: scheduler's to handle: it runs the task elsewhere, up to its ``allowed-failures``)
RETRIES = 2
#: seconds to wait for a scheduler to answer
CONNECT_TIMEOUT = 30


def distributed():
    """The ``distributed`` module, or a one-line error naming the install."""
    try:
        import distributed as d
    except ImportError:
        raise HwgenError(f"--scheduler and 'hwgen explore' need Dask's distributed "
                         f"scheduler: {INSTALL}") from None
    return d


def _hwgen_version() -> str:
    return __version__


@contextlib.contextmanager
def connect(scheduler=None, workers: int | None = None) -> Iterator:
    """A Dask client: of the scheduler at address ``scheduler`` (``tcp://host:8786``), of
    ``scheduler`` itself if it is a client already, or (None) of a local cluster of
    ``workers`` processes (default: the cores) on 127.0.0.1, closed on leaving. Workers
    running another hwgen version are refused."""
    d = distributed()
    if scheduler is not None and not isinstance(scheduler, str):
        yield scheduler
        return
    with contextlib.ExitStack() as stack:
        if scheduler is None:
            if workers is not None and workers < 1:
                raise HwgenError(f"--workers must be at least 1 (got {workers})")
            cluster = stack.enter_context(d.LocalCluster(
                n_workers=workers or default_jobs(), threads_per_worker=1, processes=True,
                host="127.0.0.1", dashboard_address=None, silence_logs=logging.ERROR))
            client = stack.enter_context(d.Client(cluster))
        else:
            try:
                client = stack.enter_context(d.Client(scheduler, timeout=CONNECT_TIMEOUT))
            except (OSError, TimeoutError, ValueError) as e:
                raise HwgenError(f"--scheduler {scheduler}: no Dask scheduler answers there "
                                 f"({str(e).splitlines()[0] if str(e) else type(e).__name__})"
                                 ) from None
            versions = client.run(_hwgen_version)
            other = sorted({v for v in versions.values() if v != __version__})
            if other:
                raise HwgenError(f"--scheduler {scheduler}: workers run hwgen "
                                 f"{', '.join(other)}, this is hwgen {__version__}: install "
                                 f"the same version on every worker")
            if not versions:
                raise HwgenError(f"--scheduler {scheduler}: the cluster has no workers")
        yield client


def cluster_workers(client) -> int:
    """Threads the cluster's workers run tasks on, in all."""
    return max(1, sum(w.get("nthreads", 1)
                      for w in client.scheduler_info()["workers"].values()))


# --------------------------------------------------------------------------- on a worker

_build_lock = threading.Lock()
_folders: dict[str, Path] = {}


def _ensure_native(verilog: str, top: str, job: StreamJob) -> None:
    """Build the native bench of ``job`` on ``verilog`` unless cached: once per cache key on
    this machine (or on machines sharing the cache folder), whatever the worker count."""
    if native_is_built(verilog, top, job):
        return
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    lock = root / f".lock-{native_cache_key(verilog, top, job)}"
    with _build_lock, open(lock, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            if not native_is_built(verilog, top, job):
                build_native(verilog, top, job)
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
    with contextlib.suppress(OSError):
        lock.unlink()


def native_chunk(verilog: str, top: str, job: StreamJob) -> StreamResult:
    """One chunk on the native Verilator bench, built first if this worker needs it."""
    _ensure_native(verilog, top, job)
    return run_native(verilog, top, job)


def in_folder(files: dict[str, bytes], run: Callable, *args):
    """``run(folder, *args)`` with ``files`` written into a folder of this worker process
    (once per content)."""
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    key = h.hexdigest()[:24]
    with _build_lock:
        folder = _folders.get(key)
        if folder is None:
            folder = Path(tempfile.mkdtemp(prefix=f"hwgen-design-{key}-"))
            for name, data in files.items():
                (folder / name).write_bytes(data)
            _folders[key] = folder
    return run(str(folder), *args)


def _value(v):
    return v


def send(client, value, key: str):
    """``value`` held on the cluster as the result of a task that returns it: sent once,
    referred to by every task that uses it, and computed again if the worker holding it
    dies (scattered data would be lost with it)."""
    return client.submit(_value, value, key=key, pure=False)


def _chunk_task(run_one: Callable, *args):
    """``run_one(*args)`` on a worker; a timeout and a user error come back as values (a
    retry would only repeat them), anything else raises, for the scheduler to retry."""
    try:
        return ("ok", run_one(*args))
    except SimTimeout as e:
        return ("timeout", str(e), e.result)
    except HwgenError as e:
        return ("error", str(e))


# --------------------------------------------------------------------------- on the client

def run_chunks(client, jobs: list[StreamJob], frames: list[int], run_one: Callable,
               shared: tuple = (), progress: Callable | None = None) -> list[StreamResult]:
    """Every job as a task ``run_one(*shared, job)`` on the cluster (``shared``: values sent
    once, see :func:`send`); the results in job order.
    ``progress(done_frames, total_frames, cycles)`` is told as chunks finish. The first
    failing chunk's error is raised (a :class:`SimTimeout` naming its ``chunk``), and the
    batch's other tasks are cancelled, as on an interrupt."""
    d = distributed()
    total, done, cycles = sum(frames), 0, 0
    if progress:
        progress(0, total, 0)
    tag = uuid.uuid4().hex[:12]
    sent = [send(client, v, f"hwgen-shared-{tag}-{k}") for k, v in enumerate(shared)]
    futures = [client.submit(_chunk_task, run_one, *sent, job, key=f"hwgen-chunk-{tag}-{k}",
                             retries=RETRIES, pure=False)
               for k, job in enumerate(jobs)]
    index = {f.key: k for k, f in enumerate(futures)}
    results: list[StreamResult | None] = [None] * len(jobs)
    try:
        for fut in d.as_completed(futures):
            k = index[fut.key]
            if results[k] is not None:   # a result lost with its worker, computed again
                continue
            try:
                out = fut.result()
            except d.KilledWorker:
                raise HwgenError(f"chunk {k}: the Dask workers running it died again and "
                                 f"again (out of memory?); the scheduler gave up") from None
            if out[0] == "timeout":
                e = SimTimeout(out[1], out[2])
                e.chunk = k
                raise e
            if out[0] == "error":
                raise HwgenError(out[1])
            results[k] = out[1]
            done += frames[k]
            cycles += out[1].cycles
            if progress:
                progress(done, total, cycles)
    finally:
        if any(r is None for r in results):     # an error or an interrupt: stop the rest
            client.cancel(futures, force=True)
        for f in sent:
            if hasattr(f, "release"):
                f.release()
    return results
