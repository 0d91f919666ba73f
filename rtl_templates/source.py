"""The block library's source as this process loaded it.

A block's Verilog depends on the library's code, so whatever stores converted blocks across
processes (``hwgen.blockcache``) keys them by the library's source. That key must describe
the code this process runs, not the files as they are when the key is needed: a process that
imported the library and then saw its files change (a checkout or merge in the source tree
while it ran) would otherwise store the old code's output under the new code's key, and
every later process would take it for the new code's.

:data:`LOADED` is taken when the package is first imported, before any block file is:
the SHA-256 of every ``*.py`` file of the folder and each file's size and modification
time. :func:`unchanged` tells whether the files still carry those stamps; while they do,
every block file this process imported (now or later) holds the code :data:`LOADED`
describes.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

FOLDER = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Fingerprint:
    digest: str                                  # SHA-256 over the files' names and contents
    stamps: tuple[tuple[str, int, int], ...]     # (name, size, mtime in ns) of each file


def stamps(folder: Path) -> tuple[tuple[str, int, int], ...]:
    out = []
    for p in sorted(folder.glob("*.py")):
        st = os.stat(p)
        out.append((p.name, st.st_size, st.st_mtime_ns))
    return tuple(out)


def fingerprint(folder: Path) -> Fingerprint:
    """The files' stamps, then their contents: a file changed while being read changes its
    stamps after them, which :func:`unchanged` then sees."""
    before = stamps(folder)
    h = hashlib.sha256()
    for name, _, _ in before:
        h.update(f"{name}:".encode())
        h.update(hashlib.sha256((folder / name).read_bytes()).digest())
    return Fingerprint(h.hexdigest(), before)


def unchanged(fp: Fingerprint, folder: Path) -> bool:
    """The files of ``folder`` still carry the stamps of ``fp``."""
    try:
        return stamps(folder) == fp.stamps
    except OSError:
        return False


#: the library's source when this process first imported it
LOADED = fingerprint(FOLDER)
