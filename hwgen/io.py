"""Reading users' input files and writing output folders without losing anything of theirs."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import tempfile
import zipfile
import zlib
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from hwgen.errors import HwgenError, warn

#: the files of a compiled folder besides ``<top>.v`` (named by its manifest)
MANIFEST = "manifest.json"
DESIGN_NPZ = "design.npz"
#: the IP-XACT description written with ``--ip-xact`` (listed in the manifest's files then)
IPXACT = "component.xml"
#: the report of ``hwgen build`` in its folder
BUILD_JSON = "build.json"
_BUILD_FILE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.bit|\.bin|_board\.v|_board\.lpf|_board\.pcf)"
                         r"|yosys\.log|nextpnr\.log|timing_report\.json")
#: prefix of the temporary folder written inside an existing output folder
TMP_PREFIX = ".hwgen-tmp-"

_READ_ERRORS = (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error,
                NotImplementedError, UnicodeDecodeError)


# ---------------------------------------------------------------------------- input files

def available_memory() -> int:
    """Bytes of memory available to this process (MemAvailable, else free pages)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return 1 << 62


def _size(n: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} bytes"


def _npy_header(f, source: str) -> tuple[tuple[int, ...], bool, np.dtype]:
    """(shape, fortran order, dtype) from the header of an .npy stream; ``f`` is left at
    the first data byte."""
    try:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
        else:
            raise ValueError(f"unsupported .npy format version {version}")
    except _READ_ERRORS as e:
        raise HwgenError(f"{source}: not a readable NumPy .npy/.npz file of numbers "
                         f"({e})") from None
    if dtype.hasobject or dtype.kind not in "fiu" or dtype == np.bool_:
        raise HwgenError(f"{source}: input has element type {dtype}; numbers are needed")
    return tuple(int(d) for d in shape), fortran, dtype


def _check_declared(shape, dtype, have: int, source: str, count: int | None):
    """The data an array header declares must be in the file and fit in memory."""
    declared = int(np.prod(shape, dtype=object)) * dtype.itemsize
    if declared > have:
        raise HwgenError(f"{source}: truncated or corrupt: its header declares {list(shape)} "
                         f"{dtype} ({_size(declared)}), the file holds {_size(have)} of data")
    rows = shape[0] if shape else 1
    used = min(rows, count) if count is not None else rows
    need = (declared // max(rows, 1)) * used // dtype.itemsize * 4  # as float32
    if need > available_memory():
        raise HwgenError(f"{source}: {used} samples need {_size(need)} of memory, "
                         f"{_size(available_memory())} are available (use --count)")
    return declared


def _read_npy(p: Path, count: int | None) -> tuple[np.ndarray, int]:
    with open(p, "rb") as f:
        shape, _, dtype = _npy_header(f, str(p))
        offset = f.tell()
    _check_declared(shape, dtype, p.stat().st_size - offset, str(p), count)
    if int(np.prod(shape)) == 0:
        return np.zeros(shape, dtype), _rows(shape)
    arr = np.load(p, mmap_mode="r", allow_pickle=False)
    return (arr[:count] if count is not None and arr.ndim else arr), _rows(shape)


def _read_npz(p: Path, input_name: str, count: int | None) -> tuple[np.ndarray, int]:
    with zipfile.ZipFile(p) as z:
        members = {(n[:-4] if n.endswith(".npy") else n): n for n in z.namelist()}
        if input_name in members:
            member = members[input_name]
        elif len(members) == 1:
            member = next(iter(members.values()))
        elif not members:
            raise HwgenError(f"{p}: holds no arrays")
        else:
            raise HwgenError(f"{p}: holds arrays {', '.join(members)} but none named "
                             f"'{input_name}' (the model's input)")
        source = f"{p} (array {member})"
        info = z.getinfo(member)
        with z.open(member) as f:
            shape, fortran, dtype = _npy_header(f, source)
            offset = f.tell()
            _check_declared(shape, dtype, info.file_size - offset, source, count)
            n = int(np.prod(shape))
            data = f.read(n * dtype.itemsize)
        if len(data) != n * dtype.itemsize:
            raise HwgenError(f"{source}: truncated (the data ends early)")
        arr = np.frombuffer(data, dtype).reshape(shape, order="F" if fortran else "C")
        return (arr[:count] if count is not None and arr.ndim else arr), _rows(shape)


def _rows(shape) -> int:
    return shape[0] if shape else 1


def first_samples(x: np.ndarray, count: int | None, source: str) -> np.ndarray:
    """The first ``count`` samples of the array ``x`` (all without ``count``); asking for
    more than it holds is a warning (:func:`warn_count`) and runs them all."""
    x = np.asarray(x, dtype=np.float32)
    if count is not None and x.ndim:
        warn_count(count, x.shape[0], source)
        return x[:count]
    return x


def warn_count(count: int | None, rows: int, source: str):
    """The warning for ``count`` samples asked of ``source``, which holds ``rows``."""
    if count is not None and count > rows:
        warn(f"{source}: holds {rows:,} samples, fewer than the {count:,} asked for; "
             f"using all {rows:,}")


def read_input(path, input_name: str, count: int | None = None, *,
               count_warning: bool = True) -> np.ndarray:
    """Float inputs from X.npy, or X.npz (under the ONNX input name, or its only array);
    with ``count`` only the first ``count`` samples are read (.npy files are memory-mapped),
    and a ``count`` beyond the file's samples is a warning (unless ``count_warning`` is
    false: a second read of the same file). Refused with one line: unreadable or
    inconsistent files, non-numbers, NaN."""
    p = Path(path)
    if not p.is_file():
        raise HwgenError(f"{p}: input file not found")
    try:
        with open(p, "rb") as f:
            magic = f.read(6)
        if magic.startswith(b"PK"):
            arr, rows = _read_npz(p, input_name, count)
        else:
            arr, rows = _read_npy(p, count)
        x = np.array(arr, dtype=np.float32)  # a copy: not the memory map or zip buffer
    except HwgenError:
        raise
    except MemoryError:
        raise HwgenError(f"{p}: does not fit in memory (use --count)") from None
    except _READ_ERRORS as e:
        raise HwgenError(f"{p}: not a readable NumPy .npy/.npz file of numbers "
                         f"({' '.join(str(e).split())[:120]})") from None
    check_no_nan(x, str(p))
    if count_warning:
        warn_count(count, rows, str(p))
    return x


#: names under which an input .npz may hold the samples' class labels, in this order
LABEL_KEYS = ("label", "labels", "y", "target", "targets")


def read_labels(path, input_name: str, count: int | None = None) -> np.ndarray | None:
    """The class labels an input .npz holds beside its inputs (an array named as in
    :data:`LABEL_KEYS`, not the input's own): [N] integers, or [N, C] one-hot / scores
    (their argmax); the first ``count``. None when there are none or they are not class
    labels (labels are an extra: they never stop a run)."""
    p = Path(path)
    try:
        with open(p, "rb") as f:
            if f.read(2) != b"PK":          # an .npy holds one array: the inputs
                return None
        with np.load(p, allow_pickle=False) as z:
            key = next((k for k in LABEL_KEYS if k in z.files and k != input_name), None)
            if key is None:
                return None
            y = np.asarray(z[key])[:count]
    except Exception:  # noqa: BLE001 - not an .npz, or an unreadable array: no labels
        return None
    if y.ndim == 2 and y.shape[1] > 1 and y.dtype.kind in "fiub":
        y = y.argmax(axis=1)
    if y.ndim != 1 or y.dtype.kind not in "iuf" or (
            y.dtype.kind == "f" and not np.all(np.isfinite(y) & (y == np.round(y)))):
        return None
    return y.astype(np.int64)


def check_no_nan(x: np.ndarray, source: str):
    """NaN has no quantized value (QuantizeLinear leaves it undefined): refused, naming the
    first sample that holds one. ±inf saturate and are accepted."""
    x = np.asarray(x)
    if x.dtype.kind == "f" and x.size and np.isnan(x).any():
        k = int(np.argmax(np.isnan(x.reshape(x.shape[0], -1) if x.ndim else x.reshape(1, 1))
                          .any(axis=1)))
        raise HwgenError(f"{source}: sample {k} holds NaN (not a number), which has no "
                         f"quantized value")


def check_input_shape(x: np.ndarray, onnx_shape: list, source: str) -> np.ndarray:
    """``x`` must be [N, *sample shape]. Any N is taken, even if the model fixes its batch
    size: the hardware processes one sample per frame."""
    want = [d if isinstance(d, int) and d > 0 else None for d in onnx_shape]
    sample = want[1:]
    if x.ndim != len(want) or any(w is not None and w != d for w, d in zip(sample, x.shape[1:])):
        shown = ", ".join("N" if k == 0 else str(d if d is not None else "?")
                          for k, d in enumerate(want))
        raise HwgenError(f"{source}: input has shape {list(x.shape)}, the model expects "
                         f"[{shown}] (batch axis first)")
    return x


# -------------------------------------------------------------------------- output folders

def umask() -> int:
    """The process's file mode creation mask (read without changing it where /proc
    tells it; else set and restored at once)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


def user_mode(mode: int) -> int:
    """``mode`` (0o666 for a file, 0o777 for a folder) less the umask: what ``open`` and
    ``mkdir`` give. Outputs made in a private temporary file or folder (``tempfile``'s
    0600/0700) and renamed into place get it, so they read as any other file the user
    makes."""
    return mode & ~umask()


def plain_file_name(name) -> bool:
    """A file name inside a folder: no separators, not '.', '..' or hidden."""
    return (isinstance(name, str) and name not in ("", ".", "..") and "/" not in name
            and "\\" not in name and "\0" not in name and not name.startswith("."))


def hwgen_files(folder: Path) -> set[str] | None:
    """Names of the files hwgen wrote in ``folder``, as its manifest records them (with the
    manifest itself); None if the folder holds no hwgen manifest."""
    try:
        doc = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("format") != "hwgen-manifest":
        return None
    names = {MANIFEST, DESIGN_NPZ}
    v = doc.get("verilog")
    if isinstance(v, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*\.v", v):
        names.add(v)  # only ever a Verilog file: a manifest cannot make hwgen claim others
    if isinstance(doc.get("files"), dict) and IPXACT in doc["files"]:
        names.add(IPXACT)
    return names | build_files(folder)


def build_files(folder: Path) -> set[str]:
    """The files ``hwgen build`` wrote in ``folder`` besides the compiled design's, as its
    ``build.json`` lists them: only names of the kinds a build writes (a bitstream, the
    board top and its constraints, the tools' logs and timing report), so a build.json
    cannot make hwgen claim other files."""
    try:
        doc = json.loads((folder / BUILD_JSON).read_text())
    except (OSError, ValueError):
        return set()
    if not isinstance(doc, dict) or doc.get("format") != "hwgen-build":
        return set()
    files = doc.get("files")
    names = {BUILD_JSON}
    for v in files.values() if isinstance(files, dict) else ():
        if isinstance(v, str) and _BUILD_FILE.fullmatch(v):
            names.add(v)
    return names


def check_output_path(target, model=None) -> Path:
    """Refuse, before any work, an output folder path that would put the user's files at
    risk: empty, an existing file, the current folder or a parent of it, the model's folder
    or a parent of it, or somewhere that cannot be written."""
    if str(target).strip() == "":
        raise HwgenError("the output folder name is empty")
    t = Path(target)
    if t.exists() and not t.is_dir():
        raise HwgenError(f"{t}: exists and is not a folder")
    res = t.resolve()
    cwd = Path.cwd().resolve()
    if res == cwd or cwd.is_relative_to(res):
        raise HwgenError(f"{target}: is the current folder or a parent of it; give the output "
                         f"a folder of its own")
    if model is not None:
        m = Path(model)
        for mdir in {m.absolute().parent, m.resolve().parent}:
            if mdir == res or mdir.is_relative_to(res):
                raise HwgenError(f"{target}: holds the model {m.name}; give the output a "
                                 f"folder of its own")
    probe = res
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise HwgenError(f"{target}: cannot create it, {probe} is not a folder")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise HwgenError(f"{target}: cannot write there ({probe} is not writable)")
    return t


def check_output_dir(target, model=None, force: bool = False) -> set[str]:
    """:func:`check_output_path`, then the folder's contents: an existing folder must be
    empty or an hwgen output holding only hwgen's files (``force`` lifts this; hwgen still
    replaces only its own files). Returns the names of hwgen's files present."""
    t = check_output_path(target, model)
    if not t.is_dir():
        return set()
    try:
        entries = {e for e in os.listdir(t) if not e.startswith(TMP_PREFIX)}
    except OSError as e:
        raise HwgenError(f"{t}: cannot read the folder ({e.strerror})") from None
    if not entries:
        return set()
    own = hwgen_files(t)
    if own is None and not force:
        raise HwgenError(f"{t}: exists and is not an hwgen output folder (no hwgen "
                         f"{MANIFEST}); give a new or empty folder, or --force to write "
                         f"hwgen's files into it (nothing else is touched)")
    foreign = sorted(entries - (own or set()))
    if foreign and not force:
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3
                                          else "")
        raise HwgenError(f"{t}: holds files hwgen did not write ({shown}); give a new or "
                         f"empty folder, or --force to replace only hwgen's files")
    return (own or set()) & entries


@contextmanager
def _no_interrupt():
    """Hold back Ctrl-C (SIGINT) while files are renamed into place; it arrives after."""
    mask = getattr(signal, "pthread_sigmask", None)
    if mask is None:
        yield
        return
    old = mask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        mask(signal.SIG_SETMASK, old)


def _move_in(tmp: Path, target: Path, stale=()):
    """Rename every file of ``tmp`` into the existing folder ``target`` (the manifest last),
    then remove the ``stale`` names no longer written."""
    names = sorted(os.listdir(tmp), key=lambda n: (n == MANIFEST, n))
    for n in names:
        if (target / n).is_dir() and not (target / n).is_symlink():
            raise HwgenError(f"{target}: {n} is a folder, hwgen's file cannot replace it")
    for n in names:
        os.replace(tmp / n, target / n)
    for n in sorted(set(stale) - set(names)):
        if (target / n).is_file() or (target / n).is_symlink():
            os.unlink(target / n)


@contextmanager
def atomic_dir(target, replace=()):
    """Yield an empty temporary folder; on success its files go into ``target``: a new
    folder is renamed into place in one step, an existing one receives the files (each
    renamed in one step; ``replace`` names files of an earlier output to remove if not
    written again). Nothing else in ``target`` is touched; on failure or Ctrl-C the
    temporary folder vanishes and ``target`` is as it was."""
    target = Path(target)
    if target.exists() and not target.is_dir():
        raise HwgenError(f"{target}: exists and is not a folder")
    tmp = None
    try:
        if target.is_dir():
            tmp = Path(tempfile.mkdtemp(prefix=TMP_PREFIX, dir=target))
        else:
            parent = target.absolute().parent
            parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=parent))
            os.chmod(tmp, user_mode(0o777))   # renamed into place: the user's mode
    except OSError as e:
        raise HwgenError(f"{target}: cannot write there ({e.strerror})") from None
    try:
        yield tmp
        with _no_interrupt():
            if target.is_dir():
                _move_in(tmp, target, replace)
            else:
                os.replace(tmp, target)
    except OSError as e:
        raise HwgenError(f"{target}: cannot write ({e.strerror})") from None
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


@contextmanager
def output_dir(target, model=None, force: bool = False):
    """:func:`atomic_dir` for a compiled design, after :func:`check_output_dir`."""
    own = check_output_dir(target, model, force)
    with atomic_dir(target, replace=own) as tmp:
        yield tmp


def check_writable_file(path) -> Path:
    """Refuse, before any work, an output file path that cannot be written."""
    p = Path(path)
    if p.is_dir():
        raise HwgenError(f"{p}: is a folder; give a file name for the output")
    if not p.resolve().parent.is_dir():
        raise HwgenError(f"{p}: folder {p.resolve().parent} does not exist")
    return p


def write_atomic(path, data: bytes):
    p = check_writable_file(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", dir=p.resolve().parent)
    except OSError as e:
        raise HwgenError(f"{p}: cannot write ({e.strerror})") from None
    try:
        os.fchmod(fd, user_mode(0o666))
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, p)
    except OSError as e:
        raise HwgenError(f"{p}: cannot write ({e.strerror})") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
