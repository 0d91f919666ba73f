"""``hwgen flash``: the bitstream of a build folder onto its board through openFPGALoader.

A fake programmer (a script named by ``HWGEN_OPENFPGALOADER``) records the arguments it was
given and answers as openFPGALoader does with a board attached, or without one; the build
folder is the two files ``hwgen flash`` reads (``build.json`` and the bitstream), as
``hwgen build`` writes them.
"""
from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest
from conftest import run_hwgen as hwgen

from hwgen.boards import program
from hwgen.boards.boards import BOARDS, board_by_name
from hwgen.errors import HwgenError

FAKE = """#!{python}
import os, sys
with open(os.environ["FAKE_ARGS"], "w") as f:
    f.write("\\n".join(sys.argv[1:]))
mode = os.environ.get("FAKE_MODE", "ok")
if mode == "ok":
    print("write to ram\\nLoad SRAM: [==================================] 100.00%\\nDone")
    sys.exit(0)
if mode == "noboard":
    print("unable to open ftdi device: -3 (device not found)", file=sys.stderr)
    print("JTAG init failed with: unable to open ftdi device", file=sys.stderr)
    sys.exit(1)
print("Error: bitstream too large", file=sys.stderr)
sys.exit(1)
"""


@pytest.fixture
def fake(tmp_path, monkeypatch):
    exe = tmp_path / "openFPGALoader"
    exe.write_text(FAKE.format(python=sys.executable))
    exe.chmod(0o755)
    args = tmp_path / "args.txt"
    monkeypatch.setenv(program.PROGRAMMER_ENV, str(exe))
    monkeypatch.setenv("FAKE_ARGS", str(args))
    return exe, args


def build_dir(tmp: Path, board: str, bit: str) -> Path:
    d = tmp / f"build-{board}"
    d.mkdir()
    (d / bit).write_bytes(b"\xff\x00bitstream")
    (d / "build.json").write_text(json.dumps({
        "format": "hwgen-build", "version": 1, "board": {"id": board},
        "files": {"bitstream": bit}}))
    return d


@pytest.mark.parametrize("board, bit, name", [("icebreaker", "m.bin", "ice40_generic"),
                                              ("ulx3s-85f", "m.bit", "ulx3s"),
                                              ("ulx3s-25f", "m.bit", "ulx3s")])
def test_dry_run_prints_the_exact_command(tmp_path, fake, board, bit, name):
    exe, args = fake
    d = build_dir(tmp_path, board, bit)
    p = hwgen("flash", d, "--dry-run")
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == [shlex.join([str(exe), "-b", name, "--write-sram",
                                                 str(d / bit)])]
    assert not args.exists(), "a dry run ran the programmer"
    p = hwgen("flash", d, "--dry-run", "--write-flash")
    assert p.stdout.splitlines() == [shlex.join([str(exe), "-b", name, "--write-flash",
                                                 str(d / bit)])]


def test_flash_runs_the_programmer(tmp_path, fake):
    exe, args = fake
    d = build_dir(tmp_path, "icebreaker", "m.bin")
    p = hwgen("flash", d)
    assert p.returncode == 0, p.stderr
    assert args.read_text().splitlines() == ["-b", "ice40_generic", "--write-sram",
                                             str(d / "m.bin")]
    assert p.stdout == f"loaded {d / 'm.bin'} into the SRAM of the icebreaker\n"
    p = hwgen("flash", d, "--write-flash")
    assert p.returncode == 0, p.stderr
    assert args.read_text().splitlines()[2] == "--write-flash"
    assert "configuration flash" in p.stdout


def _one_line_error(p) -> str:
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert "Traceback" not in p.stderr
    assert p.stderr.startswith("hwgen: error: ") and p.stderr.count("\n") == 1, p.stderr
    return p.stderr


def test_no_board_attached_is_one_line(tmp_path, fake, monkeypatch):
    d = build_dir(tmp_path, "ulx3s-85f", "m.bit")
    monkeypatch.setenv("FAKE_MODE", "noboard")
    err = _one_line_error(hwgen("flash", d))
    assert "no ulx3s-85f found" in err and "plugged in" in err


def test_other_programmer_failures_name_its_error(tmp_path, fake, monkeypatch):
    d = build_dir(tmp_path, "ulx3s-85f", "m.bit")
    monkeypatch.setenv("FAKE_MODE", "fail")
    err = _one_line_error(hwgen("flash", d))
    assert "openFPGALoader failed (exit code 1): Error: bitstream too large" in err


def test_missing_library_says_what_to_install():
    msg = program.failure(board_by_name("icebreaker"), "openFPGALoader: error while loading "
                          "shared libraries: libftdi1.so.2: cannot open shared object "
                          "file", 127)
    assert "libftdi1.so.2" in msg and "apt-get install" in msg


def test_not_a_build_folder(tmp_path, fake):
    (tmp_path / "empty").mkdir()
    assert "build.json" in _one_line_error(hwgen("flash", tmp_path / "empty"))
    d = build_dir(tmp_path, "icebreaker", "m.bin")
    (d / "m.bin").unlink()
    assert "m.bin" in _one_line_error(hwgen("flash", d, "--dry-run"))


def test_flash_only_board_needs_write_flash():
    crab = board_by_name("orangecrab-25f")
    with pytest.raises(HwgenError, match="--write-flash"):
        program.command(crab, "x.bit", exe="openFPGALoader")
    assert program.command(crab, "x.bit", flash=True, exe="openFPGALoader") == [
        "openFPGALoader", "-b", "orangeCrab", "--write-flash", "x.bit"]


def test_every_board_has_a_programmer_name():
    assert all(b.programmer for b in BOARDS)


def test_build_write_flash_needs_flash(tmp_path):
    err = _one_line_error(hwgen("build", "model.onnx", "--board", "icebreaker", "-o",
                                tmp_path / "out", "--write-flash"))
    assert "--flash" in err
    assert not (tmp_path / "out").exists()


def test_packaged_programmer_is_found(monkeypatch):
    """Without the variable, the binary on the PATH or the one the package ships."""
    monkeypatch.delenv(program.PROGRAMMER_ENV, raising=False)
    exe = Path(program.programmer())
    assert exe.name == "openFPGALoader" and exe.is_file()


def test_board_name_suggestion():
    with pytest.raises(HwgenError, match="did you mean 'icebreaker'"):
        board_by_name("icebraker")
    with pytest.raises(HwgenError, match="did you mean 'orangecrab-25f'"):
        board_by_name("orangecrab")
