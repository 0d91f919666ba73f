"""The Verilator build cache: bounded by ``HWGEN_CACHE_MAX`` (least recently used entries
go), ``hwgen cache info`` and ``hwgen cache clear``. Entries are stand-in folders (nothing
is compiled); every test works in a cache folder of its own."""
from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from conftest import hwgen_command

from hwgen.errors import HwgenError
from hwgen.sim import cache
from hwgen.sim.verilator import build_verilator, cache_key, publish_build

KEYS = [f"{k:024x}" for k in range(1, 6)]


def _entry(root: Path, name: str, size: int, age: float) -> Path:
    """A complete entry of ``size`` bytes last used ``age`` seconds ago."""
    p = root / name
    p.mkdir(parents=True)
    (p / "bench").write_bytes(b"x" * size)
    (p / "ok").write_text("v\n")
    t = time.time() - age
    os.utime(p / "ok", (t, t))
    return p


def test_parse_size():
    assert cache.parse_size("2G") == 2 << 30
    assert cache.parse_size("500MiB") == 500 << 20
    assert cache.parse_size("1.5 GB") == 3 << 29
    assert cache.parse_size("1048576") == 1 << 20
    assert cache.parse_size("64k") == 64 << 10
    for bad in ("", "lots", "2X", "-1G", "1e9"):
        with pytest.raises(HwgenError, match="HWGEN_CACHE_MAX"):
            cache.parse_size(bad)


def test_max_bytes_default_and_env(monkeypatch):
    monkeypatch.delenv("HWGEN_CACHE_MAX", raising=False)
    assert cache.max_bytes() == cache.DEFAULT_MAX_BYTES == 2 << 30
    monkeypatch.setenv("HWGEN_CACHE_MAX", "3M")
    assert cache.max_bytes() == 3 << 20


def test_evict_least_recently_used_first(tmp_path):
    root = tmp_path / "c"
    ages = [500, 100, 400, 200, 300]          # KEYS[0] is the least recently used
    for k, a in zip(KEYS, ages):
        _entry(root, k, 1000, a)
    _entry(root, "native-" + KEYS[0], 1000, 50)
    (root / "synth").mkdir()                  # the synthesis cache: not an entry
    (root / "synth" / "big").write_bytes(b"y" * 10_000)
    (root / "notes.txt").write_text("mine")
    incomplete = root / ("f" * 24)
    incomplete.mkdir()                        # no ok: not counted, not removed
    old_tmp, new_tmp = root / ".tmp-aaaa-1", root / ".tmp-bbbb-2"
    old_tmp.mkdir()
    new_tmp.mkdir()
    t = time.time() - cache.STALE_TMP - 10
    os.utime(old_tmp, (t, t))

    before = cache.entries(root)
    assert [e.path.name for e in before] == [KEYS[0], KEYS[2], KEYS[4], KEYS[3], KEYS[1],
                                             "native-" + KEYS[0]]
    assert all(e.size == 1002 for e in before)   # with its ok
    removed = cache.evict(root, limit=3500, keep=root / KEYS[2])
    # KEYS[2] is the second oldest but kept: the next oldest go instead
    assert [e.path.name for e in removed] == [KEYS[0], KEYS[4], KEYS[3]]
    left = sorted(os.listdir(root))
    assert left == sorted([KEYS[1], KEYS[2], "native-" + KEYS[0], "synth", "notes.txt",
                           "f" * 24, ".tmp-bbbb-2"])
    assert cache.evict(root, limit=10**9) == []


def test_publish_evicts_and_keeps_the_new_build(tmp_path, monkeypatch):
    root = tmp_path / "c"
    for k, a in zip(KEYS[:3], (300, 200, 100)):
        _entry(root, k, 4000, a)
    monkeypatch.setenv("HWGEN_CACHE_MAX", "10000")
    tmp = root / ".tmp-new"
    tmp.mkdir()
    (tmp / "bench").write_bytes(b"z" * 9000)
    publish_build(tmp, root / KEYS[4], "v")
    # the new entry alone is near the limit: every older one goes, the new one stays
    assert sorted(os.listdir(root)) == [KEYS[4]]


def test_cache_hit_marks_the_entry_used(tmp_path):
    text = "module top(input clk); endmodule\n"
    entry = _entry(tmp_path, cache_key(text, "top"), 10, 10_000)
    old = (entry / "ok").stat().st_mtime
    assert build_verilator(text, "top", str(tmp_path)) == entry   # found, not built
    assert (entry / "ok").stat().st_mtime > old + 9_000


def _hwgen(*args, env):
    return subprocess.run(hwgen_command() + list(args), capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=120)


def test_cli_info_and_clear(tmp_path):
    root = tmp_path / "c"
    for k in KEYS[:3]:
        _entry(root, k, 1 << 20, 10)
    (root / "synth").mkdir()
    env = {"HWGEN_CACHE": str(root), "HWGEN_CACHE_MAX": "1G"}
    p = _hwgen("cache", "info", env=env)
    assert p.returncode == 0, p.stderr
    assert f"location: {root}" in p.stdout
    assert "entries:  3" in p.stdout
    assert "size:     3.0 MiB of 1024.0 MiB" in p.stdout
    p = _hwgen("cache", "clear", env=env)
    assert p.returncode == 0, p.stderr
    assert f"removed 3 entries (3.0 MiB) from {root}" in p.stdout
    assert os.listdir(root) == ["synth"]
    p = _hwgen("cache", "info", env=env)
    assert "entries:  0" in p.stdout
    p = _hwgen("cache", "info", env={"HWGEN_CACHE": str(root), "HWGEN_CACHE_MAX": "huge"})
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == [
        "hwgen: error: HWGEN_CACHE_MAX='huge': expected a size such as 2G, 500M or "
        "1073741824 (bytes)"]
    p = _hwgen("cache", "info", env={"HWGEN_CACHE": str(tmp_path / "none")})
    assert p.returncode == 0 and "entries:  0" in p.stdout
