"""Reading users' input files and writing output folders atomically."""
from __future__ import annotations

import os
import shutil
import tempfile
import zipfile
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from hwgen.errors import HwgenError


def read_input(path, input_name: str) -> np.ndarray:
    """Float inputs from X.npy, or X.npz (under the ONNX input name, or its only array)."""
    p = Path(path)
    if not p.is_file():
        raise HwgenError(f"{p}: input file not found")
    try:
        data = np.load(p, allow_pickle=False)
    except (OSError, ValueError, zipfile.BadZipFile, EOFError):
        raise HwgenError(f"{p}: not a readable NumPy .npy/.npz file of numbers") from None
    if isinstance(data, np.lib.npyio.NpzFile):
        with data:
            if input_name in data.files:
                arr = data[input_name]
            elif len(data.files) == 1:
                arr = data[data.files[0]]
            else:
                raise HwgenError(f"{p}: holds arrays {', '.join(data.files)} but none named "
                                 f"'{input_name}' (the model's input)")
    else:
        arr = data
    if arr.dtype.kind not in "fiu" or arr.dtype == np.bool_:
        raise HwgenError(f"{p}: input has element type {arr.dtype}; numbers are needed")
    return arr.astype(np.float32)


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


@contextmanager
def atomic_dir(target):
    """Yield a temporary folder; on success it replaces ``target``, on failure it vanishes."""
    target = Path(target)
    if target.exists() and not target.is_dir():
        raise HwgenError(f"{target}: exists and is not a folder")
    parent = target.resolve().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise HwgenError(f"{target}: cannot create its folder ({e.strerror})") from None
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=parent))
    try:
        yield tmp
        if target.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old.", dir=parent))
            os.replace(target, old / "x")
            os.replace(tmp, target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


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
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, p)
    except OSError as e:
        raise HwgenError(f"{p}: cannot write ({e.strerror})") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
