"""Weight memories in iCE40 UltraPlus SPRAM, loaded after reset from the weight-load stream:
the layout and load image, RTL == golden in both simulators with the load streamed first, the
refusal of frames before the load ends, the resource model and the device-aware folding.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import field, make_dataclass

import numpy as np
import pytest
from amaranth.back import rtlil, verilog
from amaranth.hdl import Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator
from conftest import EXAMPLES, run_hwgen

from hwgen import api, design
from hwgen.assemble import build_top, to_verilog
from hwgen.blockcache import params_digest
from hwgen.boards.devices import SPRAM, by_name
from hwgen.boards.fold import fold_for_device, resolve_target
from hwgen.boards.synth import synthesize
from hwgen.dataflow import golden
from hwgen.dataflow.golden import run_graph
from hwgen.dataflow.importer import load_model, to_int_graph
from hwgen.dataflow.lower import Folding, lower
from hwgen.dataflow.weight_load import load_image, load_manifest, loaders
from hwgen.rtl_templates.resources import total
from hwgen.rtl_templates.spram import LoadLayout, load_words, loaded_memory, strip_load_init
from hwgen.sim.amaranth_sim import run_amaranth
from hwgen.sim.base import StreamJob
from hwgen.sim.native import run_native
from hwgen.sim.packing import beats_to_frames, frames_to_beats
from hwgen.sim.verilator import setup_verilator

MLP = EXAMPLES / "digits_mlp_qdq.onnx"
#: every layer in SPRAM: two lanes per row (fc1), one column (fc0), four columns (fc2)
FOLD = {"fc0": Folding(1, 2, spram=True), "fc1": Folding(1, 1, spram=True),
        "fc2": Folding(2, 4, spram=True)}


@pytest.fixture(scope="module")
def mlp():
    ig = to_int_graph(load_model(MLP))
    dfg = lower(ig, FOLD)
    rng = np.random.default_rng(7)
    t = ig.tensors[ig.input]
    x = rng.integers(t.qtype.lo, t.qtype.hi + 1, size=(3, t.size))
    want = run_graph(dfg, x)[dfg.out_stream]
    return ig, dfg, x, want


def _job(dfg, top, x, **kw) -> StreamJob:
    beats, last = frames_to_beats(x, dfg.input.qtype, dfg.in_per_beat)
    n_out = len(x) * dfg.output.size // dfg.out_per_beat
    return StreamJob(top.in_width, top.out_width, beats, last, n_out,
                     load_beats=load_image(dfg), **kw)


def _frames(dfg, res):
    return beats_to_frames(res.out_beats, dfg.output.qtype, dfg.out_per_beat, dfg.output.size)


def _intervals(dfg, res, n):
    per = dfg.output.size // dfg.out_per_beat
    ends = [res.out_times[(k + 1) * per - 1] for k in range(n)]
    return [b - a for a, b in zip(ends, ends[1:])]


# ------------------------------------------------------------------------- layout, image

def test_load_layout_packs_lanes_and_counts_tiles():
    assert (LoadLayout(2, 50176).pack, LoadLayout(2, 50176).rows) == (8, 6272)
    assert LoadLayout(2, 50176).tiles == 1                  # TFC's first layer, serial
    assert (LoadLayout(8, 4096).pack, LoadLayout(8, 4096).tiles) == (2, 1)
    assert (LoadLayout(32, 3136).columns, LoadLayout(32, 3136).tiles) == (2, 2)
    assert LoadLayout(16, 16385).tiles == 2                 # deeper than one tile
    assert LoadLayout(256, 64).tiles == 16                  # ⌈256/16⌉ columns
    lay = LoadLayout(3, 5)                                  # 4 lanes of 3 bits in a row
    assert (lay.pack, lay.rows, lay.columns, lay.load_words) == (4, 2, 1, 2)
    assert load_words(lay, [1, 2, 3, 4, 5]) == [1 | 2 << 3 | 3 << 6 | 4 << 9, 5]
    wide = LoadLayout(24, 2)                                # two columns, low bits first
    assert load_words(wide, [0xABCDEF, 0x123456]) == [0xCDEF, 0xAB, 0x3456, 0x12]
    with pytest.raises(ValueError):
        load_words(lay, [1, 2])


def test_load_image_is_the_loaders_words_in_chain_order(mlp):
    _, dfg, _, _ = mlp
    blocks = loaders(dfg)
    assert [b.name for b in blocks] == ["fc0", "fc1", "fc2"]
    image = load_image(dfg)
    assert image == [w for b in blocks for w in b.params.load_words()]
    assert all(0 <= w < 1 << 16 for w in image)
    man = load_manifest(dfg)
    assert man["words"] == len(image) and man["bits"] == 16
    assert [(m["order"], m["block"]) for m in man["memories"]] == \
        [(0, "fc0"), (1, "fc1"), (2, "fc2")]
    assert [m["pack"] for m in man["memories"]] == [1, 2, 1]
    assert load_manifest(lower(to_int_graph(load_model(MLP)))) is None


# ------------------------------------------------------------------------- simulation

@pytest.mark.sim
def test_spram_rtl_equals_golden_amaranth(mlp):
    _, dfg, x, want = mlp
    top = build_top(dfg)
    res = run_amaranth(top, _job(dfg, top, x, stall_in=0.2, stall_out=0.2, seed=3))
    assert np.array_equal(_frames(dfg, res), want)
    assert res.load_cycles == len(load_image(dfg))   # one word per cycle, never refused
    clean = run_amaranth(top, _job(dfg, top, x))
    assert np.array_equal(_frames(dfg, clean), want)
    # the per-frame interval is the cycle model's: the load is a one-off before cycle 0
    assert set(_intervals(dfg, clean, len(x))) == {dfg.estimate()["cycles_per_frame"]}


@pytest.mark.verilator
@pytest.mark.sim
def test_spram_rtl_equals_golden_verilator(mlp):
    _, dfg, x, want = mlp
    text, top = to_verilog(dfg, "spram_mlp", jobs=1, cache=False)
    assert "input [15:0] s_wload_tdata" in text and "output s_wload_tready" in text
    # the loaded memories carry no initial content (SPRAM has none); the ROMs do
    assert "spram_load" in text and re.search(r"spram_load\d+\[\d+\] = ", text) is None
    assert re.search(r"\[\d+\] = \d+'h", text)
    job = _job(dfg, top, x, stall_in=0.2, stall_out=0.2, seed=3)
    res = run_native(text, "spram_mlp", job)
    assert np.array_equal(_frames(dfg, res), want)
    assert res.load_cycles == len(load_image(dfg))
    amaranth = run_amaranth(build_top(dfg), job)   # cycle for cycle the same
    assert (res.out_times, res.in_times) == (amaranth.out_times, amaranth.in_times)


@pytest.mark.sim
def test_frames_wait_for_the_load_amaranth(mlp):
    """Before its memories are loaded the design refuses frames (``s_axis_tready`` low);
    a partial load is not enough; the words beyond the image are not taken."""
    _, dfg, x, want = mlp
    top = build_top(dfg)
    image = load_image(dfg)
    beats, _ = frames_to_beats(x[:1], dfg.input.qtype, dfg.in_per_beat)
    got = []

    async def bench(ctx):
        ctx.set(top.s_axis_tvalid, 1)
        ctx.set(top.s_axis_tdata, beats[0])
        ctx.set(top.m_axis_tready, 1)
        for _ in range(20):                         # no load: frames refused
            _, _, rdy = await ctx.tick().sample(top.s_axis_tready)
            assert not rdy
        ctx.set(top.s_wload_tvalid, 1)
        for k, w in enumerate(image):
            ctx.set(top.s_wload_tdata, w)
            _, _, rdy, wrdy = await ctx.tick().sample(top.s_axis_tready, top.s_wload_tready)
            assert wrdy and not rdy, k              # every word taken, no frame yet
        ctx.set(top.s_wload_tdata, 0xFFFF)          # a surplus word: passed on, dropped
        k = 0
        for _ in range(4000):
            _, _, rdy, vld, data = await ctx.tick().sample(
                top.s_axis_tready, top.m_axis_tvalid, top.m_axis_tdata)
            if rdy:
                k += 1
                ctx.set(top.s_axis_tdata, beats[k] if k < len(beats) else 0)
                ctx.set(top.s_axis_tvalid, int(k < len(beats)))
            if vld:
                got.append(int(data))
        ctx.set(top.s_wload_tvalid, 0)

    sim = Simulator(top)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    out = beats_to_frames(got, dfg.output.qtype, dfg.out_per_beat, dfg.output.size)
    assert np.array_equal(out, want[:1])


@pytest.mark.sim
def test_compiled_folder_streams_the_load_amaranth(tmp_path):
    """A design folder whose fold file puts layers in SPRAM: the manifest lists the load
    port and memories, and simulating the folder streams the image first."""
    fold = tmp_path / "fold.json"
    fold.write_text(json.dumps({n: f.as_dict() for n, f in FOLD.items()}))
    out = tmp_path / "d"
    api.compile(MLP, out, fold=str(fold), device="ice40-up5k", jobs=1)
    m = json.loads((out / "manifest.json").read_text())
    assert m["folding"]["fc1"] == {"pe": 1, "simd": 1, "spram": True}
    assert m["ports"]["weight_load"]["tdata"] == "s_wload_tdata"
    assert [x["block"] for x in m["ports"]["weight_load"]["memories"]] == ["fc0", "fc1", "fc2"]
    x = np.load(EXAMPLES / "digits_test.npz")
    x = x[x.files[0]][:2]
    r = api.verify(MLP, x, simulator="amaranth", fold=str(fold), device="ice40-up5k", jobs=1)
    assert r.rtl_equals_golden
    assert r.sim.load_cycles == m["ports"]["weight_load"]["words"]   # reported apart


# ------------------------------------------------------------------------- no SPRAM

def test_without_spram_nothing_changes(mlp):
    ig, _, _, _ = mlp
    dfg = lower(ig, {n: Folding(f.pe, f.simd) for n, f in FOLD.items()})
    assert load_image(dfg) == [] and load_manifest(dfg) is None
    text, top = to_verilog(dfg, "plain_mlp", jobs=1)
    assert "wload" not in text and "wl_i" not in text and not top.loads


def test_a_field_added_at_its_default_leaves_digests_alone():
    """Block module names (parameter digests) of designs without SPRAM stay as they were."""
    def params(extra: bool):
        fs = [("x", int)] + ([("spram", bool, field(default=False,
                                                    metadata={"digest": "omit_default"}))]
                             if extra else [])
        return make_dataclass("P", fs, frozen=True)

    old, new = params(False), params(True)
    assert params_digest("mvau", old(3)) == params_digest("mvau", new(3))
    assert params_digest("mvau", new(3, True)) != params_digest("mvau", old(3))


# ------------------------------------------------------------------------- resources, folding

def test_resource_estimate_counts_spram_tiles(mlp):
    _, dfg, _, _ = mlp
    plain = lower(to_int_graph(load_model(MLP)), {n: Folding(f.pe, f.simd)
                                                  for n, f in FOLD.items()})
    for b, q in zip(dfg.blocks, plain.blocks):
        if b.kind != "mvau":
            continue
        r, r0 = b.cost.resources("ice40"), q.cost.resources("ice40")
        assert r.spram == b.params.load_layout.tiles and r0.spram == 0
        assert r.bram <= r0.bram
        assert "spram" in r.as_dict() and "spram" not in r0.as_dict()
    up5k = by_name("ice40-up5k")
    use = up5k.usage(total(b.cost.resources("ice40") for b in dfg.blocks))
    assert use[SPRAM] == sum(b.params.load_layout.tiles for b in loaders(dfg))
    assert SPRAM not in by_name("ecp5-85f").capacity()
    assert up5k.capacity()[SPRAM] == 4 and up5k.limits(0.85)[SPRAM] == 3


def test_device_folding_moves_the_largest_weights_to_spram():
    ig = to_int_graph(load_model(EXAMPLES / "finn" / "tfc-w2a2.onnx", upgrade=True))
    fold, dfg, rep = fold_for_device(ig, resolve_target("icebreaker"))
    assert rep.fits and rep.use[SPRAM] <= rep.limit[SPRAM] == 3
    moved = [n for n, f in fold.items() if f.spram]
    assert moved and [b.layer for b in loaders(dfg)] == moved
    # the first layer holds most of the weights: it moves first
    first = max((op for op in ig.ops if hasattr(op, "weights")), key=lambda op: op.weights.size)
    assert first.name in moved
    assert "SPRAM tiles" in rep.as_dict()["use"]
    # a device without SPRAM never loads weights
    fold, dfg, rep = fold_for_device(ig, resolve_target("ulx3s-85f"))
    assert not any(f.spram for f in fold.values()) and not loaders(dfg)


# ------------------------------------------------------------------------- Yosys

class _Loaded(wiring.Component):
    """One loaded memory on its own, for synthesis."""

    def __init__(self, layout):
        self.layout = layout
        super().__init__({"wl_i": In(stream.Signature(16)), "wl_o": Out(stream.Signature(16)),
                          "addr": In(range(layout.depth)), "data": Out(layout.width),
                          "loaded": Out(1)})

    def elaborate(self, platform):
        m = Module()
        addr, data, loaded = loaded_memory(m, "w", self.layout, self.wl_i, self.wl_o)
        m.d.comb += [addr.eq(self.addr), self.data.eq(data), self.loaded.eq(loaded)]
        return m


@pytest.mark.synth
def test_loaded_memory_maps_to_spram(tmp_path):
    lay = LoadLayout(8, 3000)           # two lanes per row: 1500 rows, one tile
    text = strip_load_init(rtlil.convert(_Loaded(lay), name="loaded", emit_src=False))
    assert "$meminit" not in text
    res = synthesize(verilog._convert_rtlil_text(text), "loaded", "ice40", cache_dir=tmp_path)
    assert (res.spram, res.bram) == (lay.tiles, 0)
    wide = LoadLayout(24, 100)          # two columns: two tiles
    text = strip_load_init(rtlil.convert(_Loaded(wide), name="wide", emit_src=False))
    res = synthesize(verilog._convert_rtlil_text(text), "wide", "ice40", cache_dir=tmp_path)
    assert (res.spram, res.bram) == (wide.tiles, 0) == (2, 0)


# ------------------------------------------------------------------------- cocotb benches

@pytest.fixture(scope="module")
def spram_folder(tmp_path_factory):
    d = tmp_path_factory.mktemp("spram")
    fold = d / "fold.json"
    fold.write_text(json.dumps({n: f.as_dict() for n, f in FOLD.items()}))
    api.compile(MLP, d / "design", fold=str(fold), device="ice40-up5k", jobs=1)
    return d / "design"


@pytest.mark.verilator
def test_spram_rtl_equals_golden_cocotb_verilator(spram_folder):
    x = np.load(EXAMPLES / "digits_test.npz")
    x = x[x.files[0]][:2]
    r = api.simulate(spram_folder, x, simulator="cocotb", jobs=1)
    _, ig, _ = design.load(spram_folder)
    want = golden.run(ig, r.inputs_int)[ig.output].reshape(2, -1)
    assert np.array_equal(r.outputs_int, want)


@pytest.mark.verilator
@pytest.mark.slow
def test_exported_testbench_loads_the_weights_verilator(spram_folder, tmp_path):
    tb = tmp_path / "tb"
    p = run_hwgen("testbench", spram_folder, "-o", tb, "--input",
                  EXAMPLES / "digits_test.npz", "--count", 2)
    assert p.returncode == 0, p.stderr
    cfg = json.loads((tb / "testbench.json").read_text())
    words = [ln for ln in (tb / cfg["weight_load"]).read_text().splitlines()
             if not ln.startswith("#")]
    man = json.loads((spram_folder / "manifest.json").read_text())
    assert len(words) == man["ports"]["weight_load"]["words"]
    setup_verilator()
    env = {**os.environ, "MAKEFLAGS": "OPT_FAST=-O0 OPT_SLOW=-O0 OPT_GLOBAL=-O0"}
    r = subprocess.run([sys.executable, str(tb / "run.py")], capture_output=True, text=True,
                       cwd=tb.parent, timeout=900, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert f"weight load: {len(words)} words" in r.stdout + r.stderr
    assert "TESTS=1 PASS=1 FAIL=0" in r.stdout + r.stderr


def test_spram_on_a_device_without_it_is_refused_in_one_line(tmp_path):
    fold = tmp_path / "fold.json"
    fold.write_text(json.dumps({"fc1": {"pe": 1, "simd": 1, "spram": True}}))
    p = run_hwgen("compile", MLP, "-o", tmp_path / "d", "--fold", fold, "--device", "ecp5-85f")
    assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
    assert "layer fc1" in p.stderr and "SPRAM" in p.stderr and "ecp5-85f" in p.stderr
    fold.write_text(json.dumps({"fc1": {"pe": 1, "simd": 1, "spram": 1}}))
    p = run_hwgen("compile", MLP, "-o", tmp_path / "d", "--fold", fold, "--device", "ice40-up5k")
    assert p.returncode == 2 and "spram" in p.stderr and p.stderr.count("\n") == 1, p.stderr
    fold.write_text(json.dumps({"/pool1/MaxPool": {"pe": 1, "simd": 1, "spram": True}}))
    p = run_hwgen("compile", EXAMPLES / "digits_cnn_qdq.onnx", "-o", tmp_path / "d", "--fold",
                  fold, "--device", "ice40-up5k")
    assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
    assert "layer /pool1/MaxPool" in p.stderr and "matrix layers" in p.stderr
