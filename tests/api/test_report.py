"""``hwgen verify --report``: the HTML page, its contents and bytes, rendered by a real
headless browser (Debian's chromium) with no console error and a screenshot that is not
blank."""
from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import tempfile
import zlib
from pathlib import Path

import numpy as np
import pytest
from conftest import EXAMPLES

from hwgen import api, report
from hwgen.dataflow import golden
from hwgen.dataflow.importer import load_model, to_int_graph, walk
from hwgen.dataflow.lower import lower
from hwgen.reference import layer_agreement
from hwgen.report_svg import histogram, wrap

MODEL = EXAMPLES / "digits_mlp_qdq.onnx"
DATA = EXAMPLES / "digits_test.npz"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync",
                  "--enable-logging=stderr", "--v=0", "--window-size=1000,700"]


def chromium() -> str:
    """Debian's chromium; its absence fails the test (it is a test requirement)."""
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.fail("chromium is missing: the report tests render the page in a headless "
                    "browser; install Debian's chromium (apt-get install -y chromium)")
    return path


def render(page: Path, png: Path) -> list[str]:
    """Screenshot ``page`` into ``png``; the browser's console lines (messages, errors)."""
    with tempfile.TemporaryDirectory(prefix="hwgen-chromium-") as profile:
        run = subprocess.run([chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
                              f"--screenshot={png}", page.resolve().as_uri()],
                             capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    return [ln for ln in run.stderr.splitlines()
            if ":CONSOLE" in ln or "Uncaught" in ln or "net::ERR" in ln]


def png_pixels(data: bytes) -> np.ndarray:
    """[H, W, channels] uint8 of an 8-bit, non-interlaced RGB or RGBA PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat = 8, b""
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    assert depth == 8 and ctype in (2, 6) and interlace == 0
    bpp = 3 if ctype == 2 else 4
    raw = np.frombuffer(zlib.decompress(idat), np.uint8).reshape(h, 1 + w * bpp)
    out = np.zeros((h, w * bpp), np.int32)
    prev = np.zeros(w * bpp, np.int32)
    for y in range(h):
        f, row = raw[y, 0], raw[y, 1:].astype(np.int32)
        if f == 0:
            cur = row
        elif f == 2:
            cur = (row + prev) & 255
        elif f == 1:   # each byte adds the one bpp before it: a running sum per channel
            cur = (np.cumsum(row.reshape(w, bpp), axis=0) & 255).reshape(-1)
        else:          # Average and Paeth depend on the reconstructed left neighbour
            cur = row.copy()
            for i in range(w * bpp):
                a = cur[i - bpp] if i >= bpp else 0
                b, c = prev[i], (prev[i - bpp] if i >= bpp else 0)
                if f == 3:
                    pred = (a + b) // 2
                else:
                    p = a + b - c
                    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                    pred = a if pa <= pb and pa <= pc else b if pb <= pc else c
                cur[i] = (row[i] + pred) & 255
        out[y] = cur
        prev = cur
    return out.astype(np.uint8).reshape(h, w, bpp)


@pytest.fixture(scope="module")
def verified(tmp_path_factory):
    """The digits MLP verified on a few frames with ``layers``, and its page."""
    where = tmp_path_factory.mktemp("report")
    rep = api.verify(MODEL, DATA, count=6, jobs=1, layers=True, out_dir=where / "design",
                     board="ulx3s-85f")
    page = where / "report.html"
    report.write(rep, page)
    return rep, page


@pytest.mark.verilator
def test_report_renders_in_chromium_verilator(verified, tmp_path):
    _, page = verified
    png = tmp_path / "shot.png"
    console = render(page, png)
    assert console == []
    pixels = png_pixels(png.read_bytes())
    assert pixels.shape[:2] == (700, 1000)
    colours, counts = np.unique(pixels[..., :3].reshape(-1, 3), axis=0, return_counts=True)
    assert len(colours) > 50 and counts.max() < 0.95 * counts.sum()


def test_console_errors_are_seen(tmp_path):
    """The console check catches a page's script error (so its silence above means none)."""
    page = tmp_path / "bad.html"
    page.write_text('<!DOCTYPE html><html><body><p>x</p><script>undefinedFunction();'
                    '</script></body></html>')
    console = render(page, tmp_path / "bad.png")
    assert any("Uncaught ReferenceError" in ln for ln in console)


@pytest.mark.verilator
def test_report_contents_verilator(verified):
    rep, page = verified
    html = page.read_text()
    # self-contained: nothing fetched, no script
    assert not re.search(r"(?i)\b(src|href)=|https?://|<script|@import|url\((?!#)", html)
    # 8 busy bars, the latency strip and the graph (identical layers need no histogram)
    assert "PASS" in html and html.count("<svg") == 8 + 1 + 1
    for label, value in report.summary_rows(rep):
        assert f'<td>{label}</td><td class="w">{value}</td>' in html
    # every layer compared, and the last one is the output the table compares
    layers = rep.layers.layers
    assert [r.layer for r in layers] == ["fc0", "fc1", "fc2"] and not rep.layers.note
    assert all(r.onnx_tensor and r.elements for r in layers)
    last = layers[-1]
    assert last.elements == 6 * 10
    assert last.identical_fraction == rep.ort_identical_fraction
    assert last.max_step_diff == rep.ort_max_step_diff
    for r in layers:
        assert f"<code>{r.onnx_tensor}</code>" in html
    # the cycle budget: the bottleneck, and the latency parts summing to the estimate
    dfg = rep.dfg
    assert f"<b>{rep.estimate['bottleneck']}</b>" in html
    entry, path = report.latency_path(dfg)
    assert entry + sum(c for _, c in path) == dfg.latency() == rep.estimate["latency_cycles"]
    assert [n for n, _ in path][-1] == "fc2"
    for b in dfg.blocks:   # every block drawn, its full name in its hover text
        assert f"<title>{b.name}\n{b.kind}" in html
    fc0 = next(b for b in dfg.blocks if b.kind == "mvau")   # its folding, as drawn
    lanes = f"LUT_LANES {fc0.params.lut_lanes} " if fc0.params.lut_lanes else ""
    assert f"mvau {lanes}PE {fc0.params.pe} SIMD {fc0.params.simd}" in html


@pytest.mark.verilator
def test_report_bytes_are_deterministic_verilator(verified, tmp_path):
    rep, page = verified
    again = api.verify(MODEL, DATA, count=6, jobs=1, layers=True, board="ulx3s-85f")
    out = tmp_path / "again.html"
    report.write(again, out)
    assert out.read_bytes() == page.read_bytes()


@pytest.mark.verilator
def test_simulate_report_verilator(verified, cli, tmp_path):
    """``hwgen simulate --report``: the run, the cycle budget and the graph, in chromium."""
    rep, page = verified
    design_dir = page.parent / "design"
    r = cli("simulate", design_dir, "--input", DATA, "--count", "3", "--jobs", "1",
            "-o", tmp_path / "y.npy", "--report", tmp_path / "sim.html")
    assert r.returncode == 0, r.stderr
    html = (tmp_path / "sim.html").read_text()
    assert "<h1>hwgen simulate: digits_mlp_qdq.onnx</h1>" in html
    assert f"<td>latency</td><td>{rep.sim.latency} cycles</td>" in html
    for b in rep.dfg.blocks:
        assert f"<title>{b.name}\n{b.kind}" in html
    assert "onnxruntime" not in html and "frames/s" in html
    assert render(tmp_path / "sim.html", tmp_path / "sim.png") == []


def test_histogram_bins():
    svg = histogram({-12: 1, -1: 3, 0: 10, 2: 5})
    assert svg.count("<rect") == 2 * 8 + 1 + 2           # -8..8 and one bin each side
    assert "<title>&lt;-8 steps: 1 elements</title>" in svg
    assert "<title>+2 steps: 5 elements</title>" in svg
    assert "<title>&gt;8 steps: 0 elements</title>" in svg
    assert 'class="zero"' in histogram({0: 4}) and "&lt;" not in histogram({0: 4})


@pytest.mark.parametrize("name", ["digits_cnn_qdq.onnx", "digits_resnet_qop.onnx"])
def test_layer_comparison_in_stream_order(name):
    """Each layer of a CNN against onnxruntime: identical in stream order (channel-last maps,
    a flattened map), and one element changed on the hardware side is one difference of
    one step, counted where it is."""
    model = EXAMPLES / name
    ig, walked = walk(load_model(model, upgrade=True))
    x = np.load(EXAMPLES / "digits_images_test.npz")["input"][:3].astype(np.float32)
    values = golden.run(ig, ig.quantize_input(x.reshape(3, -1)))
    rep = layer_agreement(model, ig, walked.views, values, x)
    assert not rep.note and len(rep.layers) == len(ig.ops)
    for r in rep.layers:
        assert r.diffs == {0: values[r.tensor].size}, r
    t = ig.ops[1].output
    values[t] = values[t].copy()
    values[t][1, 5] += 1
    r = layer_agreement(model, ig, walked.views, values, x).layers[1]
    assert r.diffs == {0: values[t].size - 1, 1: 1} and r.max_step_diff == 1


def test_latency_path_of_a_branching_graph():
    """The residual network: the critical path follows the later input of the join."""
    dfg = lower(to_int_graph(load_model(EXAMPLES / "digits_resnet_qdq.onnx", upgrade=True)))
    entry, path = report.latency_path(dfg)
    assert entry + sum(c for _, c in path) == dfg.latency()
    names = [n for n, _ in path]
    assert "/Add" in names and "/block_b/Conv" in names


def test_report_path_refused_before_work(cli, tmp_path):
    r = cli("verify", MODEL, "--input", DATA, "--count", "1", "--report", tmp_path)
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert "is a folder" in r.stderr


# ------------------------------------------------------------------ layout in the browser

PROBE = ("<script>document.body.setAttribute('data-layout', JSON.stringify({"
         "page: document.documentElement.scrollWidth, view: document.documentElement"
         ".clientWidth, tables: Array.from(document.querySelectorAll('.wide:not(.graph-box)'))"
         ".map(e => e.scrollWidth - e.clientWidth), graph: Array.from(document"
         ".querySelectorAll('.graph-box')).map(e => e.scrollWidth - e.clientWidth)}));"
         "</script>")


def layout(page: Path, width: int, tmp_path: Path) -> dict:
    """``page`` laid out by chromium in a window ``width`` px wide: the page's scroll and
    client widths, and by how many px each scrolling box (the tables, the graph) overflows
    its width (0: it fits)."""
    probe = tmp_path / f"probe-{width}.html"
    probe.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
    with tempfile.TemporaryDirectory(prefix="hwgen-chromium-") as profile:
        run = subprocess.run([chromium(), *CHROMIUM_FLAGS[:-1], f"--window-size={width},900",
                              f"--user-data-dir={profile}", "--dump-dom", probe.as_uri()],
                             capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    m = re.search(r'data-layout="([^"]*)"', run.stdout)
    assert m, run.stdout[:500]
    return json.loads(m.group(1).replace("&quot;", '"'))


def shot(page: Path, png: Path, width: int, height: int = 1600) -> np.ndarray:
    with tempfile.TemporaryDirectory(prefix="hwgen-chromium-") as profile:
        run = subprocess.run([chromium(), *CHROMIUM_FLAGS[:-1], "--hide-scrollbars",
                              f"--window-size={width},{height}", f"--user-data-dir={profile}",
                              f"--screenshot={png}", page.as_uri()],
                             capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    return png_pixels(png.read_bytes())


@pytest.fixture(scope="module")
def resnet_page(tmp_path_factory):
    """The residual CNN's page: long block names, a fork and a join, 30 blocks."""
    page = tmp_path_factory.mktemp("resnet") / "report.html"
    rep = api.verify(EXAMPLES / "digits_resnet_qdq.onnx", EXAMPLES / "digits_images_test.npz",
                     count=2, jobs=1, layers=True, board="ulx3s-85f")
    report.write(rep, page)
    return rep, page


@pytest.mark.verilator
@pytest.mark.parametrize("width", [1400, 800])
@pytest.mark.parametrize("which", ["mlp", "resnet"])
def test_report_fits_the_window_verilator(verified, resnet_page, tmp_path, which, width):
    """At 1,400 and 800 px nothing makes the page scroll sideways and every table fits
    (names wrap); at 1,400 px the graph fits too, at 800 it may scroll in its own box. The
    screenshot's right edge is the page's plain background: nothing is cut off there."""
    page = (verified if which == "mlp" else resnet_page)[1]
    box = layout(page, width, tmp_path)
    assert box["page"] <= box["view"], box
    assert box["tables"] and all(d <= 0 for d in box["tables"]), box
    if width == 1400:
        assert box["graph"] == [0], box
    pixels = shot(page, tmp_path / f"{which}-{width}.png", width)
    assert pixels.shape[:2] == (1600, width)
    right = pixels[:, -8:, :3].reshape(-1, 3)
    assert (right == right[0]).all(), "something reaches the window's right edge"
    colours = np.unique(pixels[..., :3].reshape(-1, 3), axis=0)
    assert len(colours) > 50


@pytest.mark.verilator
def test_report_summary_and_states_verilator(verified, resnet_page):
    """The summary at the top (outcome, accuracy against the labels, throughput at the
    board's clock, resources), the identical state of a histogram, no red for the busiest
    block, and no label cut short."""
    rep, page = verified
    html = page.read_text()
    top = html[:html.index("<h2>")]
    assert rep.label_accuracy is not None          # digits_test.npz holds "label"
    m = rep.compiled.manifest
    clock = m["target"]["clock_mhz"]
    fps = clock * 1e6 / rep.sim.interval
    for text in ["result", "PASS", f"bit for bit on all {rep.samples} samples",
                 "accuracy against the labels", f"{100 * rep.label_accuracy:.2f} %",
                 f"throughput at {clock:g} MHz", f"{fps:,.0f} frames/s",
                 f"resources on {m['target']['board']['name']}",
                 f"DSP tiles {m['target']['use']['DSP tiles']:,}/"]:
        assert text in top, text
    assert '<td>accuracy against the labels</td><td class="w">' in html
    for r in rep.layers.layers:      # all identical here: said in words, not one lone bar
        assert r.diffs == {0: r.elements}
        assert f"all {r.elements:,} elements identical" in html
    assert 'class="hist"' not in html
    # the busiest block: a deep blue, outlined, no red anywhere
    assert "#c0392b" not in html and "hsl(0," not in html and "fill:red" not in html
    assert 'class="box bottleneck"' in html and "(sets the interval)" in html
    # nothing in the graph is cut short with an ellipsis (the latency strip's narrow parts
    # are, with their full names in hover text and in the table below); long names wrap
    for _, p in (verified, resnet_page):
        drawn = p.read_text()
        assert "…" not in drawn[drawn.index('<svg class="graph"'):]
    name = "fifo_Relu_1_output_0_QuantizeLinear_Output_win"
    assert "".join(wrap(name, 100)) == name and len(wrap(name, 100)) > 1
