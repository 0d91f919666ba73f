"""Deep block RAMs as columns (``memory.block_columns``): every tile holds all the words, so
no multiplexer of tiles stacked in depth follows a tile's slow data output, and the resource
model counts the tiles Yosys uses."""
from __future__ import annotations

import math

import pytest
from amaranth.back import verilog
from amaranth.hdl import Cat, Elaboratable, Module, Signal
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.sim import Simulator

from hwgen.boards.synth import synthesize
from hwgen.rtl_templates import memory as M


@pytest.mark.parametrize("width,depth,columns", [
    (8, 100, [8]), (8, 512, [8]), (40, 512, [40]),
    (8, 513, [8]), (40, 1000, [18, 18, 4]),
    (8, 1025, [8]), (20, 2048, [9, 9, 2]),
    (8, 2049, [4, 4]), (8, 4097, [2, 2, 2, 2]), (8, 9233, [1] * 8), (3, 16384, [1] * 3),
    (8, 16385, [8]),
])
def test_columns_hold_every_word_in_one_tile(width, depth, columns):
    assert M.block_columns(width, depth) == columns


class _RamTop(Elaboratable):
    """A block RAM from :func:`memory.ram` with its ports as the top's."""

    def __init__(self, width: int, depth: int):
        self.width, self.depth = width, depth
        self.waddr = Signal(range(depth))
        self.raddr = Signal(range(depth))
        self.wdata = Signal(width)
        self.we = Signal()
        self.rdata = Signal(width)

    def elaborate(self, platform):
        m = Module()
        wr, rd = M.ram(m, "mem", width=self.width, depth=self.depth, rw="dont_care",
                       style=M.BLOCK)
        m.d.comb += [wr.addr.eq(self.waddr), wr.data.eq(self.wdata), wr.en.eq(self.we),
                     rd.addr.eq(self.raddr), self.rdata.eq(rd.data)]
        return m


@pytest.mark.synth
@pytest.mark.parametrize("width,depth", [(8, 9233), (20, 1500), (36, 400)])
def test_yosys_builds_no_read_multiplexer(width, depth):
    """A deep RAM: the tiles the model counts, and no LUT after them (a multiplexer of tiles
    stacked in depth would be one per data bit and level)."""
    top = _RamTop(width, depth)
    ports = [top.waddr, top.raddr, top.wdata, top.we, top.rdata]
    got = synthesize(verilog.convert(top, name="top", ports=ports, emit_src=False), "top",
                     "ecp5")
    assert got.bram == M.bram_tiles(width, depth, "ecp5", style=M.BLOCK, rw="dont_care")
    assert got.lut4 == 0, f"{got.lut4} LUT4 after the tiles"


@pytest.mark.sim
def test_column_fifo_equals_syncfifobuffered():
    """A FIFO whose queue is a column RAM, cycle for cycle against Amaranth's FIFO."""
    width, depth = 20, 1100
    dut, ref = M.BufferedFIFO(width=width, depth=depth), SyncFIFOBuffered(width=width,
                                                                         depth=depth)
    assert len(M.block_columns(width, depth - 1)) > 1 and dut.inner_style == M.BLOCK
    m = Module()
    m.submodules.dut, m.submodules.ref = dut, ref
    sim = Simulator(m)
    sim.add_clock(1e-6)
    seen = []

    async def bench(ctx):
        state = 12345
        word = 0
        for cycle in range(3000):
            state = (state * 1103515245 + 12345) & 0x7FFFFFFF
            # fill most of the way first, then drain at random
            w_en = (state >> 3) % 4 != 0 if cycle < 1500 else (state >> 3) % 3 == 0
            r_en = (state >> 7) % 5 == 0 if cycle < 1500 else (state >> 7) % 3 != 0
            for f in (dut, ref):
                ctx.set(f.w_data, word % (1 << width))
                ctx.set(f.w_en, w_en)
                ctx.set(f.r_en, r_en)
            a = [ctx.get(getattr(dut, s)) for s in ("w_rdy", "r_rdy", "level")]
            b = [ctx.get(getattr(ref, s)) for s in ("w_rdy", "r_rdy", "level")]
            assert a == b, f"cycle {cycle}: {a} != {b}"
            if b[1]:
                assert ctx.get(dut.r_data) == ctx.get(ref.r_data), f"cycle {cycle}"
                seen.append(ctx.get(ref.r_data))
            if w_en and b[0]:
                word += 1
            await ctx.tick()

    sim.add_testbench(bench)
    sim.run()
    assert len(seen) > 1000


class _RomTop(Elaboratable):
    """A plain lane ROM from :func:`memory.lane_rom` with its ports as the top's."""

    def __init__(self, width: int, init: list[int], slices=None):
        self.width, self.init = width, init
        self.slices = slices or [(0, width)]
        self.addr = Signal(range(len(init)))
        self.data = Signal(width)

    def elaborate(self, platform):
        m = Module()
        rds = M.lane_rom(m, "rom", self.width, self.init, self.slices)
        assert len(rds) == len(self.slices)
        # one address register per piece, as the units' rom_counter keeps them
        for k, rd in enumerate(rds):
            a = Signal.like(self.addr, name=f"addr{k}", attrs={"keep": 1}, reset_less=True)
            m.d.sync += a.eq(self.addr)
            m.d.comb += rd.addr.eq(a)
        m.d.comb += self.data.eq(Cat(*(rd.data for rd in rds)))
        return m


@pytest.mark.synth
@pytest.mark.parametrize("width,depth", [(40, 1152), (24, 3000)])
def test_deep_lane_rom_as_columns(width, depth):
    """A deep weight ROM (some columns constant): the tiles the model counts from its live
    columns, and no LUT after them."""
    import random

    from hwgen.rtl_templates import resources as res
    rng = random.Random(width * depth)
    const = (1 << 3) | (1 << 17)          # two constant columns
    init = [(rng.getrandbits(width) & ~const) | (1 << 17) for _ in range(depth)]
    top = _RomTop(width, init)
    got = synthesize(verilog.convert(top, name="top", ports=[top.addr, top.data],
                                     emit_src=False), "top", "ecp5")
    est = res.memory(width - 2, depth, "ecp5", rom=True, plain=True)
    assert got.bram == est.bram
    assert got.lut4 == 0, f"{got.lut4} LUT4 after the tiles"
    assert len(M.block_columns(width - 2, depth)) > 1


def _read_every_word(top: _RomTop, depth: int) -> list[int]:
    """Every word of the ROM read once, in address order (each word one sample after its
    address, behind the read register)."""
    sim = Simulator(top)
    sim.add_clock(1e-6)
    got = []

    async def bench(ctx):
        for a in range(depth + 2):
            ctx.set(top.addr, a % depth)
            await ctx.tick()
            got.append(ctx.get(top.data))

    sim.add_testbench(bench)
    sim.run()
    return got[1:depth + 1]


@pytest.mark.sim
def test_deep_lane_rom_reads_every_word():
    width, depth = 20, 700
    init = [(k * 2654435761) % (1 << width) | 1 for k in range(depth)]   # bit 0 constant
    top = _RomTop(width, init)
    assert _read_every_word(top, depth) == init


@pytest.mark.parametrize("lanes,lane_bits,depth", [
    (32, 8, 1152), (64, 4, 600), (16, 8, 1152), (40, 8, 300), (33, 3, 5000), (7, 20, 2000),
])
def test_deep_rom_pieces_of_few_tiles(lanes, lane_bits, depth):
    """A ROM pinned to block RAM is cut at lane boundaries into pieces of at most
    ``ROM_ADDRESS_TILES`` tiles (one address copy each), and the pieces use no more tiles
    than the ROM whole wherever a whole number of lanes fills whole tiles."""
    width = lanes * lane_bits
    pieces = M.lane_rom_slices(lanes, lane_bits, depth, width)
    assert pieces[0][0] == 0 and pieces[-1][1] == width
    assert all(a[1] == b[0] for a, b in zip(pieces, pieces[1:]))
    assert all(lo % lane_bits == 0 for lo, _ in pieces)
    tiles = [len(M.block_columns(hi - lo, depth)) if depth > 512
             else -(-(hi - lo) // M.tile_width(depth)) for lo, hi in pieces]
    if lane_bits <= M.ROM_ADDRESS_TILES * M.tile_width(depth):
        assert max(tiles) <= M.ROM_ADDRESS_TILES
    whole = M.tile_width(depth) // math.gcd(M.tile_width(depth), lane_bits)
    if whole * lane_bits <= M.ROM_ADDRESS_TILES * M.tile_width(depth):
        assert sum(tiles) == -(-width // M.tile_width(depth))
    assert (len(pieces) > 1) == (width > M.ROM_ADDRESS_TILES * M.tile_width(depth))


def test_narrow_live_rom_stays_one_piece():
    """Few live columns fit the tiles one address drives: one piece."""
    assert M.lane_rom_slices(32, 8, 1152, 60) == [(0, 256)]


@pytest.mark.synth
def test_deep_rom_pieces_synthesize_to_the_modelled_tiles():
    """A deep ROM in pieces (one address copy each): Yosys uses the tiles the model counts
    piece by piece, and no LUT after them."""
    import random

    from hwgen.rtl_templates import resources as res
    lanes, lane_bits, depth = 24, 8, 1152
    width = lanes * lane_bits
    rng = random.Random(7)
    init = [rng.getrandbits(width) for _ in range(depth)]
    pieces = M.lane_rom_slices(lanes, lane_bits, depth, width)
    assert len(pieces) == 3
    top = _RomTop(width, init, pieces)
    got = synthesize(verilog.convert(top, name="top", ports=[top.addr, top.data],
                                     emit_src=False), "top", "ecp5")
    est = sum(res.memory(hi - lo, depth, "ecp5", rom=True, plain=True).bram
              for lo, hi in pieces)
    assert got.bram == est == 22
    assert got.lut4 == 0, f"{got.lut4} LUT4 after the tiles"


@pytest.mark.sim
def test_deep_rom_pieces_read_every_word():
    width, depth = 160, 600
    init = [(k * 0x9E3779B97F4A7C15 * 0x1000193) % (1 << width) for k in range(depth)]
    pieces = M.lane_rom_slices(20, 8, depth, width)
    assert len(pieces) == 2
    top = _RomTop(width, init, pieces)
    assert _read_every_word(top, depth) == init


def test_deep_zero_rams_lose_their_initial_content():
    """memory.strip_ram_init: a deep RAM's all-zero content goes (a line per word in the
    Verilog otherwise), a shallow RAM's and every ROM's stays."""
    from amaranth.back import rtlil

    outs = [Signal(4, name=f"{n}_q") for n in ("deep", "shallow", "table")]

    class _Two(Elaboratable):
        def elaborate(self, platform):
            m = Module()
            for q, (name, depth) in zip(outs, (("deep", 600), ("shallow", 100))):
                wr, rd = M.ram(m, name, width=4, depth=depth, rw="dont_care")
                a = Signal(range(depth), name=f"{name}_a")
                m.d.sync += a.eq(a + 1)
                m.d.comb += [wr.addr.eq(a), wr.data.eq(a), wr.en.eq(1), rd.addr.eq(a),
                             q.eq(rd.data)]
            (r,) = M.rom(m, "table", width=4, init=[k % 16 for k in range(600)])
            a = Signal(range(600), name="table_a")
            m.d.sync += a.eq(a + 1)
            m.d.comb += [r.addr.eq(a), outs[2].eq(r.data)]
            return m

    text = rtlil.convert(_Two(), name="top", emit_src=False, ports=outs)
    stripped = M.strip_ram_init(text)
    inits = [line for line in stripped.splitlines() if "MEMID" in line and "meminit" not in line]
    assert text.count("$meminit_v2") == stripped.count("$meminit_v2") + 1
    kept = stripped.split("cell $meminit_v2")[1:]
    assert not any('"\\\\deep' in c.split("\n")[1] for c in kept)
    assert any('"\\\\shallow' in c.split("\n")[1] for c in kept)
    assert any('"\\\\table' in c.split("\n")[1] for c in kept)
    assert inits
