"""A ``--count`` beyond the input's samples is one warning line and the run goes on with all
of them; what hwgen writes (output folders, reports, arrays, waveforms) gets the mode the
user's umask gives, as any file they make, not the private mode of a temporary file."""
from __future__ import annotations

import os
import stat
import warnings
from contextlib import contextmanager

import numpy as np
import pytest
from conftest import EXAMPLES

from hwgen import api
from hwgen.errors import HwgenWarning
from hwgen.io import atomic_dir, read_input, user_mode, write_atomic

MODEL = EXAMPLES / "digits_mlp_qdq.onnx"


@contextmanager
def umask(mask: int):
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def mode(p) -> int:
    return stat.S_IMODE(os.stat(p).st_mode)


def three_samples(tmp_path):
    d = np.load(EXAMPLES / "digits_test.npz")
    p = tmp_path / "three.npz"
    np.savez(p, input=d["input"][:3], label=d["label"][:3])
    return p


@pytest.mark.parametrize("mask", [0o022, 0o027, 0o077])
def test_written_files_and_folders_follow_the_umask(tmp_path, mask):
    with umask(mask):
        assert user_mode(0o666) == 0o666 & ~mask
        write_atomic(tmp_path / "a.bin", b"x")
        with atomic_dir(tmp_path / "new") as t:
            (t / "f.txt").write_text("y")
        (tmp_path / "old").mkdir()
        with atomic_dir(tmp_path / "old") as t:   # an existing folder keeps its own mode
            (t / "g.txt").write_text("z")
    assert mode(tmp_path / "a.bin") == 0o666 & ~mask
    assert mode(tmp_path / "new") == 0o777 & ~mask
    assert mode(tmp_path / "new" / "f.txt") == 0o666 & ~mask
    assert mode(tmp_path / "old" / "g.txt") == 0o666 & ~mask
    assert not [p for p in tmp_path.rglob(".*")]      # no temporary left behind


def test_read_input_warns_of_a_count_beyond_the_file(tmp_path):
    p = three_samples(tmp_path)
    with pytest.warns(HwgenWarning, match=r"holds 3 samples, fewer than the 100,000 asked "
                                          r"for; using all 3"):
        x = read_input(p, "input", 100_000)
    assert x.shape == (3, 64)
    np.save(tmp_path / "x.npy", x)
    with pytest.warns(HwgenWarning, match="x.npy: holds 3 samples"):
        assert read_input(tmp_path / "x.npy", "input", 4).shape == (3, 64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # no warning: within the file, or silenced
        assert read_input(p, "input", 3).shape == (3, 64)
        assert read_input(p, "input").shape == (3, 64)
        assert read_input(p, "input", 9, count_warning=False).shape == (3, 64)


@pytest.mark.verilator
def test_verify_count_beyond_the_data_warns_and_goes_on_verilator(cli, tmp_path):
    """The command line: one warning line on stderr, the run on all samples, and the output
    folder, report and waveform with the umask's modes."""
    data = three_samples(tmp_path)
    with umask(0o027):
        r = cli("verify", MODEL, "--input", data, "--count", "100000", "--jobs", "1",
                "--target-cycles", "1024",
                "-o", tmp_path / "design", "--report", tmp_path / "report.html",
                "--vcd", tmp_path / "wave.vcd")
    assert r.returncode == 0, r.stderr
    warned = [ln for ln in r.stderr.splitlines() if "warning" in ln]
    assert warned == [f"hwgen: warning: {data}: holds 3 samples, fewer than the 100,000 "
                      f"asked for; using all 3"], r.stderr
    assert "samples" in r.stdout and " 3\n" in r.stdout and "PASS" in r.stdout
    assert mode(tmp_path / "design") == 0o750
    for f in ["report.html", "wave.vcd", "design/manifest.json", "design/design.npz"]:
        assert mode(tmp_path / f) == 0o640, f
    # the API: an array shorter than count is the same warning, as a Python warning
    x = np.load(data)["input"]
    with pytest.warns(HwgenWarning, match="input array: holds 3 samples, fewer than the 5"):
        sim = api.simulate(tmp_path / "design", x, count=5, jobs=1)
    assert sim.outputs.shape == (3, 10)


def test_labels_beside_the_inputs(tmp_path):
    """An .npz's class labels (under label, labels, y or target(s); integers or one-hot),
    the first ``count``; none in an .npy or an .npz without them."""
    from hwgen.io import read_labels

    x = np.zeros((4, 3), np.float32)
    y = np.array([2, 0, 1, 1])
    np.savez(tmp_path / "a.npz", input=x, y=y)
    np.savez(tmp_path / "b.npz", input=x, labels=np.eye(3)[y])
    np.savez(tmp_path / "c.npz", input=x)
    np.savez(tmp_path / "d.npz", input=x, label=np.array([0.5, 1, 2, 3]))
    np.save(tmp_path / "e.npy", x)
    assert read_labels(tmp_path / "a.npz", "input").tolist() == [2, 0, 1, 1]
    assert read_labels(tmp_path / "a.npz", "input", 2).tolist() == [2, 0]
    assert read_labels(tmp_path / "b.npz", "input").tolist() == [2, 0, 1, 1]
    for f in ["c.npz", "d.npz", "e.npy"]:
        assert read_labels(tmp_path / f, "input") is None, f
