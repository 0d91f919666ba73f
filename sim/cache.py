"""The cache of compiled Verilator simulators, bounded in size.

Each build (the cocotb bench's, the native bench's, with or without waveforms) is one
entry: a folder named by the hash of everything the build depends on, complete once it
holds the file ``ok``. Using an entry touches ``ok``, so its modification time is the
entry's last use. After each new build the least recently used entries are removed until
the cache is within its limit (``HWGEN_CACHE_MAX``, default :data:`DEFAULT_MAX_BYTES`);
the entry just built always stays. A simulator already running from a removed entry runs
on (its executable stays open).

Only entries are counted and removed: other files in the folder (``$HWGEN_CACHE`` may also
hold the synthesis cache, ``synth/``) are left alone, and unfinished builds (``.tmp-*``)
only when a day old.
"""
from __future__ import annotations

import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from hwgen.errors import HwgenError

DEFAULT_MAX_BYTES = 2 << 30
#: an entry's name: the first 24 hex digits of its SHA-256 key (a native bench's prefixed)
ENTRY_NAME = re.compile(r"(native-)?[0-9a-f]{24}")
#: an unfinished build this old (seconds) is a leftover of a killed process
STALE_TMP = 24 * 3600
_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "KIB": 1 << 10, "M": 1 << 20,
          "MB": 1 << 20, "MIB": 1 << 20, "G": 1 << 30, "GB": 1 << 30, "GIB": 1 << 30,
          "T": 1 << 40, "TB": 1 << 40, "TIB": 1 << 40}


def cache_root(build_dir: str | None = None) -> Path:
    """The cache folder: ``build_dir`` if given, else ``$HWGEN_CACHE``, else
    ``~/.cache/hwgen/verilator``."""
    if build_dir is not None:
        return Path(build_dir)
    if os.environ.get("HWGEN_CACHE"):
        return Path(os.environ["HWGEN_CACHE"])
    return Path.home() / ".cache" / "hwgen" / "verilator"


def parse_size(text: str) -> int:
    """``"2G"``, ``"500MiB"``, ``"1.5 GB"``, ``"1048576"`` → bytes (units are powers of
    1024)."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([A-Za-z]*)\s*", text)
    if m is None or m.group(2).upper() not in _UNITS:
        raise HwgenError(f"HWGEN_CACHE_MAX={text!r}: expected a size such as 2G, 500M or "
                         f"1073741824 (bytes)")
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


def max_bytes() -> int:
    """The cache's size limit: ``$HWGEN_CACHE_MAX`` or :data:`DEFAULT_MAX_BYTES`."""
    text = os.environ.get("HWGEN_CACHE_MAX", "").strip()
    return parse_size(text) if text else DEFAULT_MAX_BYTES


@dataclass
class Entry:
    path: Path
    size: int        # bytes of its files
    used: float      # last use (modification time of its ``ok``), seconds since the epoch


def _size(folder: Path) -> int:
    total = 0
    for dirpath, _, files in os.walk(folder):
        for f in files:
            try:
                total += os.lstat(os.path.join(dirpath, f)).st_size
            except OSError:
                pass
    return total


def entries(root: Path) -> list[Entry]:
    """The complete entries in ``root``, least recently used first."""
    out = []
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return []
    for name in names:
        p = root / name
        if not ENTRY_NAME.fullmatch(name):
            continue
        try:
            used = (p / "ok").stat().st_mtime
        except OSError:
            continue
        out.append(Entry(p, _size(p), used))
    out.sort(key=lambda e: (e.used, e.path.name))
    return out


def touch(entry: Path) -> None:
    """Mark ``entry`` used now."""
    try:
        os.utime(entry / "ok")
    except OSError:
        pass


def _remove_stale(root: Path) -> None:
    now = time.time()
    try:
        for name in os.listdir(root):
            p = root / name
            if name.startswith(".tmp-") and now - p.stat().st_mtime > STALE_TMP:
                shutil.rmtree(p, ignore_errors=True)
    except OSError:
        pass


def evict(root: Path, limit: int | None = None, keep: Path | None = None) -> list[Entry]:
    """Remove the least recently used entries until the rest take at most ``limit`` bytes
    (default :func:`max_bytes`), never ``keep``; also unfinished builds a day old. Returns
    the entries removed."""
    limit = max_bytes() if limit is None else limit
    _remove_stale(root)
    present = entries(root)
    total = sum(e.size for e in present)
    removed = []
    for e in present:
        if total <= limit:
            break
        if keep is not None and e.path == keep:
            continue
        shutil.rmtree(e.path, ignore_errors=True)
        total -= e.size
        removed.append(e)
    return removed


@dataclass
class CacheInfo:
    root: Path
    entries: int
    bytes: int
    limit: int


def info(root: Path | None = None) -> CacheInfo:
    root = cache_root() if root is None else root
    present = entries(root)
    return CacheInfo(root, len(present), sum(e.size for e in present), max_bytes())


def clear(root: Path | None = None) -> tuple[int, int]:
    """Remove every entry (and unfinished builds a day old; a build under way stays):
    (entries removed, bytes freed)."""
    root = cache_root() if root is None else root
    _remove_stale(root)
    present = entries(root)
    for e in present:
        shutil.rmtree(e.path, ignore_errors=True)
    return len(present), sum(e.size for e in present)
