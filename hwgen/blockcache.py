"""The on-disk cache of per-block RTLIL (:mod:`hwgen.assemble`).

An entry is the RTLIL (Amaranth's output, before Yosys) of one block module, stored under a
key that covers everything the text depends on: the block's kind and parameters
(:func:`params_digest`), the source of hwgen's block library (``rtl_templates``) as this
process loaded it (:data:`hwgen.rtl_templates.source.LOADED`, taken when the library is first
imported) and the Amaranth and hwgen versions. Its first line holds the SHA-256 of the rest,
so a damaged entry is detected, dropped and rebuilt. When the library's files no longer carry
the stamps they had when it was loaded (edited, checked out or merged while the process ran),
the process's code may differ from every key it could compute: it then neither reads nor
writes entries (:func:`library_unchanged`), so no entry ever holds another code's output. The
folder is ``$HWGEN_CACHE/blocks`` if ``HWGEN_CACHE`` is set, else ``~/.cache/hwgen/blocks``;
it is kept under ``HWGEN_BLOCK_CACHE_MB`` megabytes (default 512) by removing the entries used
least recently.
"""
from __future__ import annotations

import dataclasses
import enum
import hashlib
import os
import tempfile
from importlib import metadata
from pathlib import Path

import numpy as np

from hwgen.rtl_templates import source

DEFAULT_LIMIT_MB = 512
_HEADER = "# hwgen block cache sha256 "


def cache_root() -> Path:
    """``$HWGEN_CACHE/blocks`` if ``HWGEN_CACHE`` is set, else ``~/.cache/hwgen/blocks``."""
    if os.environ.get("HWGEN_CACHE"):
        return Path(os.environ["HWGEN_CACHE"]) / "blocks"
    return Path.home() / ".cache" / "hwgen" / "blocks"


def limit_bytes() -> int:
    try:
        mb = float(os.environ.get("HWGEN_BLOCK_CACHE_MB", DEFAULT_LIMIT_MB))
    except ValueError:
        mb = DEFAULT_LIMIT_MB
    return int(mb * 1024 * 1024)


# ------------------------------------------------------------------------ content digests

def _feed(h, obj) -> None:
    """Feed a canonical, order-independent encoding of ``obj`` into hash ``h``."""
    if obj is None or isinstance(obj, (bool, int, str, float, complex)):
        h.update(f"{type(obj).__name__}:{obj!r};".encode())
    elif isinstance(obj, (np.ndarray, np.generic)):
        a = np.ascontiguousarray(obj)
        if a.dtype.kind in "iu" and (a.size == 0 or int(a.max()) < 1 << 63):
            # integers by value: a design folder keeps them as int64, and the design rebuilt
            # from it must name its modules as the compile did
            a = a.astype(np.int64)
        h.update(f"nd:{a.dtype.str}:{a.shape};".encode())
        h.update(a.tobytes())
    elif isinstance(obj, enum.Enum):
        h.update(f"enum:{type(obj).__qualname__}.{obj.name};".encode())
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        h.update(f"dc:{type(obj).__module__}.{type(obj).__qualname__}(".encode())
        for f in dataclasses.fields(obj):
            # a field added to a block later, at its default: the module keeps its name
            if f.metadata.get("digest_omit_default") and getattr(obj, f.name) == f.default:
                continue
            h.update(f"{f.name}=".encode())
            _feed(h, getattr(obj, f.name))
        h.update(b");")
    elif isinstance(obj, (tuple, list)):
        h.update(f"{type(obj).__name__}[{len(obj)}](".encode())
        for x in obj:
            _feed(h, x)
        h.update(b");")
    elif isinstance(obj, dict):
        items = sorted((_digest(k), _digest(v)) for k, v in obj.items())
        h.update(f"dict[{len(items)}]({items!r});".encode())
    elif isinstance(obj, (set, frozenset)):
        h.update(f"set({sorted(_digest(x) for x in obj)!r});".encode())
    else:
        text = repr(obj)
        if " at 0x" in text:
            raise TypeError(f"cannot digest a block parameter of type {type(obj).__name__}")
        h.update(f"obj:{type(obj).__module__}.{type(obj).__qualname__}:{text};".encode())


def _digest(obj) -> str:
    h = hashlib.sha256()
    _feed(h, obj)
    return h.hexdigest()


def params_digest(kind: str, params) -> str:
    """The SHA-256 of a block's kind and parameters: equal for equal blocks, in any run."""
    h = hashlib.sha256(f"kind:{kind};".encode())
    _feed(h, params)
    return h.hexdigest()


_SOURCE_DIGEST: str | None = None


def source_digest() -> str:
    """The SHA-256 of the block library's source as loaded and the Amaranth and hwgen
    versions."""
    global _SOURCE_DIGEST
    if _SOURCE_DIGEST is None:
        h = hashlib.sha256()
        for v in ("amaranth", "hwgen"):
            try:
                h.update(f"{v}={metadata.version(v)};".encode())
            except metadata.PackageNotFoundError:
                h.update(f"{v}=?;".encode())
        h.update(f"rtl_templates={source.LOADED.digest};".encode())
        _SOURCE_DIGEST = h.hexdigest()
    return _SOURCE_DIGEST


def library_unchanged() -> bool:
    """The block library's files are as this process loaded them (see the module notes)."""
    return source.unchanged(source.LOADED, source.FOLDER)


def entry_key(module: str, digest: str) -> str:
    return hashlib.sha256(f"{module};{digest};{source_digest()}".encode()).hexdigest()


# ------------------------------------------------------------------------------- storage

class BlockCache:
    """Texts by key in ``root``; every entry checked against its stored hash."""

    def __init__(self, root: Path | None = None, limit: int | None = None):
        self.root = Path(root) if root is not None else cache_root()
        self.limit = limit_bytes() if limit is None else limit
        self.hits = self.misses = 0

    def path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.il"

    def get(self, key: str) -> str | None:
        if not library_unchanged():
            self.misses += 1
            return None
        p = self.path(key)
        try:
            raw = p.read_text()
        except (OSError, UnicodeDecodeError):
            self.misses += 1
            return None
        first, _, text = raw.partition("\n")
        if first != _HEADER + hashlib.sha256(text.encode()).hexdigest():
            p.unlink(missing_ok=True)         # damaged: dropped, then rebuilt by the caller
            self.misses += 1
            return None
        try:
            os.utime(p)                       # least recently used goes first
        except OSError:
            pass
        self.hits += 1
        return text

    def put(self, key: str, text: str) -> None:
        """Store ``text`` (made by this process's block library) under ``key``; not when the
        library's files changed since it was loaded: the key would not describe the code."""
        if not library_unchanged():
            return
        p = self.path(key)
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=".tmp-", suffix=".il")
            with os.fdopen(fd, "w") as f:
                f.write(_HEADER + hashlib.sha256(text.encode()).hexdigest() + "\n" + text)
            os.replace(tmp, p)
        except OSError:
            return                            # a cache that cannot be written is no cache

    def evict(self) -> None:
        """Remove the least recently used entries beyond the size limit."""
        try:
            entries = [(st.st_mtime, st.st_size, p) for p in self.root.glob("*/*.il")
                       for st in [p.stat()]]
        except OSError:
            return
        total = sum(s for _, s, _ in entries)
        for _, size, p in sorted(entries):
            if total <= self.limit:
                break
            try:
                p.unlink(missing_ok=True)
            except OSError:
                continue
            total -= size
