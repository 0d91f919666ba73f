"""The board top simulated whole through its UART (``hwgen verify --link``) and the host end
of the link (``hwgen run``'s driver) against the protocol's golden replies."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import run_hwgen

from hwgen import api, design, host
from hwgen.board_run import run_board
from hwgen.boards.board_top import board_top_verilog
from hwgen.boards.boards import board_by_name
from hwgen.dataflow import golden
from hwgen.errors import HwgenError
from hwgen.link_verify import verify_link
from hwgen.rtl_templates import host_link as hl
from hwgen.sim.link import run_link
from hwgen.sim.packing import beats_to_frames, frames_to_beats

EX = Path(__file__).resolve().parents[2] / "examples"
MLP = EX / "digits_mlp_qdq.onnx"
DIGITS = EX / "digits_test.npz"


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    """The digits MLP compiled for the ULX3S-85F, with a build.json-like link record."""
    out = tmp_path_factory.mktemp("mlp") / "design"
    api.compile(MLP, out, board="ulx3s-85f")
    loaded = design.load(out)
    manifest, ig, _ = loaded
    xq = api.quantized_inputs(manifest, ig, DIGITS, 20)
    gold = golden.run(ig, xq, [ig.output])[ig.output].reshape(len(xq), -1)
    return out, loaded, xq, gold


def _core_fn(loaded, fr):
    """Input frame bytes → output frame bytes, by the golden model (the 'core' of the
    protocol's golden replies)."""
    manifest, ig, _ = loaded
    w_in, w_out = manifest["ports"]["input"]["bits"], manifest["ports"]["output"]["bits"]
    mi, mo = manifest["input"], manifest["output"]
    tin, tout = ig.tensors[ig.input], ig.tensors[ig.output]

    def fn(data: bytes) -> bytes:
        beats = [int(b) for b in hl.beats_from_bytes(data, w_in, mi["beats_per_frame"])]
        x = beats_to_frames(beats, tin.qtype, mi["elements_per_beat"], tin.size)
        y = golden.run(ig, x, [ig.output])[ig.output].reshape(1, -1)
        ob, _ = frames_to_beats(y, tout.qtype, mo["elements_per_beat"])
        return hl.frame_bytes(np.array(ob, dtype=np.uint64), w_out)
    return fn


@pytest.mark.verilator
def test_verify_link_20_frames(mlp):
    out, loaded, xq, gold = mlp
    rep = verify_link(out, loaded, xq, gold, "ulx3s-85f")
    assert rep.ok, rep.summary()
    assert np.array_equal(rep.outputs_int, gold)
    assert rep.frames == 20 and rep.mismatched_frames == 0
    # a core that computes something else is caught through the link too
    bad = gold.copy()
    bad[3, 0] ^= 1
    rep = verify_link(out, loaded, xq, bad, "ulx3s-85f")
    assert not rep.ok and rep.mismatched_frames == 1


@pytest.mark.verilator
def test_board_top_replies_equal_golden_replies_with_errors(mlp):
    """A corrupted payload byte (CRC error: 'E', the output discarded), a wrong length, an
    unknown type and garbage between requests, then good frames: the verilated board top's
    reply bytes equal the protocol's golden replies exactly."""
    out, loaded, xq, _ = mlp
    manifest = loaded[0]
    fr = host.conversation(manifest, loaded[1], xq[:3], [])
    corrupt = bytearray(fr.inputs[0])
    corrupt[20] ^= 0x40
    requests = [fr.ping, bytes(corrupt), fr.inputs[1],
                hl.encode_request("I", bytes(fr.in_bytes - 1)),
                b"\x00\x13\xa5", hl.encode_request("Q", b"xyz"), fr.inputs[2], fr.inputs[0]]
    want = hl.reference_replies(b"".join(requests), fr.in_bytes, _core_fn(loaded, fr))
    b = board_by_name("ulx3s-85f")
    text, top, _ = board_top_verilog(b, (out / manifest["verilog"]).read_text(),
                                     manifest["top"], manifest, b.clock_mhz, baud=2_500_000,
                                     bypass_pll=True)
    sizes = iter(len(hl.encode_reply(k, p)) for k, p in host.split_replies(want))
    # each request waits for the replies before it; the garbage gets none of its own
    segments, waited = [], 0
    for req in requests:
        segments.append((req, waited))
        if req != b"\x00\x13\xa5":
            waited += next(sizes)
    res = run_link(text, top, segments, len(want), 10, 2_000_000)
    assert res.status == "ok"
    assert res.reply == want
    kinds = [k for k, _ in host.split_replies(res.reply)]
    assert kinds == ["A", "E", "O", "E", "E", "O", "O"]


class GoldenLine:
    """A serial port whose other end is the protocol's golden link and core."""

    def __init__(self, in_bytes, fn, flip_byte: int | None = None, mute: bool = False,
                 out_bytes: int | None = None):
        self.in_bytes, self.fn, self.flip, self.mute = in_bytes, fn, flip_byte, mute
        self.out_bytes = out_bytes
        self.sent, self.pending = 0, b""

    def write(self, data: bytes):
        data = bytearray(data)
        if self.flip is not None and self.sent <= self.flip < self.sent + len(data):
            data[self.flip - self.sent] ^= 0x01
        self.sent += len(data)
        if not self.mute:
            self.pending += hl.reference_replies(bytes(data), self.in_bytes, self.fn,
                                                 out_bytes=self.out_bytes)

    def read(self, n: int) -> bytes:
        got, self.pending = self.pending[:n], self.pending[n:]
        return got


def test_run_board_driver_against_golden_link(mlp, tmp_path):
    out, loaded, xq, gold = mlp
    manifest, ig, _ = loaded
    fr = host.conversation(manifest, ig, xq, [])
    line = GoldenLine(fr.in_bytes, _core_fn(loaded, fr))
    res = run_board(out, "test", DIGITS, 20, baud=115200, line=line)
    assert np.array_equal(res.outputs_int, gold)
    assert np.array_equal(res.outputs, api.dequantized_outputs(manifest, ig, gold))
    assert res.stats.frames == 20
    assert res.stats.bytes_sent == sum(len(r) for r in fr.requests())


def test_run_board_driver_errors(mlp):
    out, loaded, xq, _ = mlp
    manifest, ig, _ = loaded
    fr = host.conversation(manifest, ig, xq[:2], [])
    fn = _core_fn(loaded, fr)
    # a byte of frame 1 corrupted on the line: the board's error reply, named
    at = len(fr.ping) + len(fr.inputs[0]) + 30
    with pytest.raises(HwgenError, match=r"frame 1: .*CRC"):
        run_board(out, "test", DIGITS, 2, baud=115200, line=GoldenLine(fr.in_bytes, fn, at))
    with pytest.raises(HwgenError, match=r"ping: no reply"):
        run_board(out, "test", DIGITS, 2, baud=115200,
                  line=GoldenLine(fr.in_bytes, fn, mute=True))
    # a board running another design: its ping names other frame sizes
    with pytest.raises(HwgenError, match="not this design's bitstream"):
        run_board(out, "test", DIGITS, 2, baud=115200,
                  line=GoldenLine(fr.in_bytes + 8, fn, out_bytes=fr.out_bytes))


def test_run_cli_errors(mlp, tmp_path):
    """``hwgen run``'s refusals are one line, exit 2: no build.json, a port that does not
    open, a line that echoes (pyserial's loop://) instead of replying."""
    out = tmp_path / "d"
    shutil.copytree(mlp[0], out)
    args = ["--input", str(DIGITS), "--count", "2"]
    r = run_hwgen("run", str(out), "--port", "loop://", *args)
    assert r.returncode == 2 and "no readable build.json" in r.stderr
    (out / "build.json").write_text(json.dumps({"format": "hwgen-build",
                                                "host_link": {"baud": 115200}}))
    r = run_hwgen("run", str(out), "--port", str(tmp_path / "nosuchtty"), *args)
    assert r.returncode == 2 and "cannot open the serial port" in r.stderr
    r = run_hwgen("run", str(out), "--port", "loop://", *args, "-o", str(tmp_path / "y.npy"))
    assert r.returncode == 2 and "not a reply of hwgen's link" in r.stderr
    assert not (tmp_path / "y.npy").exists()


@pytest.mark.sim
def test_verify_link_without_board_takes_the_board_chosen(monkeypatch):
    """``verify --link`` told no board simulates the top of the board the model was folded
    for (the smallest it fits, the iCEBreaker for the digits MLP); told a device, it asks for
    a board. (The board top's own run is ``test_verify_link_20_frames``; here its stand-in
    records the board.)"""
    seen = []

    def link(out_dir, loaded, xq, gold, board):
        seen.append(board)
        return _Ok()

    monkeypatch.setattr(api, "verify_link", link)
    x = np.load(DIGITS)["input"][:2]
    rep = api.verify(MLP, x, simulator="amaranth", link=True)
    assert seen == ["icebreaker"] == [rep.compiled.fit.target.board.id] and rep.ok
    with pytest.raises(HwgenError, match="--link .*give --board"):
        api.verify(MLP, x, simulator="amaranth", link=True, device="ice40-up5k")


class _Ok:
    ok = True
