"""Tests of the fork / join blocks: Fork (rtl_templates/fork.py), AddBlock (add.py) and
Concat (concat.py).

The harness (sim.harness.run_block) drives one input stream and reads one output stream, so
the two-input blocks are tested inside small graphs built here: :class:`Net` wraps named
blocks and stream edges into a component with ``i``/``o`` (connected with
``wiring.connect``). Test-only blocks make the two branches differ:

* :class:`Scramble` maps every element through a bijective-ish integer map into another type
  (so an adder sees two unrelated operands of possibly different types);
* :class:`Split` sends the first ``b0`` beats of each pixel to ``o0`` and the next ``b1`` to
  ``o1`` (the two channel groups a Concat joins again);
* :class:`Gate` passes beats only in cycles an LFSR allows (branches then accept at different
  times), :class:`Slow` one beat every ``period`` cycles, and :class:`Burst` holds ``k`` beats
  before releasing them (a block that needs a whole frame before it emits, as a pooling or
  transposing layer would).

Checked: bit-exact against the golden functions with and without random stalls on the outer
ports (and internal gates), in the Amaranth simulator for the grids and in Verilator for a
few; measured frame interval and latency against the blocks' cost/timing models (within 2 %);
deadlock freedom of fork → (short, long) → join over 60 frames with stalls, and that an
undersized short-branch FIFO does deadlock in front of a block that needs a whole frame.

Against onnxruntime (exhaustive over input pairs): the adder's ``"ort"`` semantics equals
com.microsoft.QLinearAdd and the optimized (fused) QDQ graph bit for bit; its ``"exact"``
semantics and ORT's unfused float path differ from it only at or within ~1e-5 of a step from
rounding ties (counts recorded). The concat's table mode equals ORT's QDQ Concat bit for bit.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from fractions import Fraction

import numpy as np
import pytest
from amaranth.hdl import Cat, Module, Mux, Signal, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from hwgen.rtl_templates import add, concat, fifo, fork
from hwgen.rtl_templates.add import AddBlock, AddParams, make_add_requant
from hwgen.rtl_templates.concat import Concat, make_concat
from hwgen.rtl_templates.fifo import FIFOParams, StreamFIFO
from hwgen.rtl_templates.fork import Fork, ForkParams
from hwgen.rtl_templates.quant import INT8, UINT8, QType, Quantized
from hwgen.sim.base import SimTimeout
from hwgen.sim.harness import run_block


def _fifo(width: int, depth: int) -> StreamFIFO:
    """A stream FIFO (its beats per frame only matter for the cost model)."""
    return StreamFIFO(FIFOParams(width, depth, beats=1))


def _fork(width: int, n_outputs: int = 2) -> Fork:
    return Fork(ForkParams(width, n_outputs, beats=1))


def exact_reference(sa, sb, sy, zy, za, zb, lo, hi, a, b):
    """The real formula in exact rational arithmetic (float32 scales taken as exact), with
    round half to even. Returns (y, tie) where ``tie`` marks exact halfway cases. For tests."""
    fa, fb, fy = (Fraction(float(np.float32(s))) for s in (sa, sb, sy))
    ra, rb = fa / fy, fb / fy
    a = np.asarray(a, dtype=np.int64).reshape(-1)
    b = np.asarray(b, dtype=np.int64).reshape(-1)
    y = np.empty(a.shape, dtype=np.int64)
    tie = np.zeros(a.shape, dtype=bool)
    for k, (x0, x1) in enumerate(zip(a.tolist(), b.tolist())):
        v = (x0 - za) * ra + (x1 - zb) * rb
        fl = v.numerator // v.denominator
        frac = v - fl
        if frac == Fraction(1, 2):
            tie[k] = True
            r = fl + (fl & 1)
        else:
            r = fl + (frac > Fraction(1, 2))
        y[k] = min(max(r + zy, lo), hi)
    return y, tie

INT4 = QType(4, True)
UINT4 = QType(4, False)
INT16 = QType(16, True)


# ============================================================================ test blocks

class Net(wiring.Component):
    """Named blocks joined by stream edges ``("src.member", "dst.member")``; ``"in"`` and
    ``"out"`` are the net's own ``i`` and ``o``."""

    def __init__(self, blocks: dict, edges: list[tuple[str, str]]):
        self.blocks, self.edges = blocks, edges
        src_in = next(self._port(d) for s, d in edges if s == "in")
        dst_out = next(self._port(s) for s, d in edges if d == "out")
        super().__init__({"i": In(src_in.signature.flip()), "o": Out(dst_out.signature)})

    def _port(self, ref: str):
        if ref == "in":
            return wiring.flipped(self.i)
        if ref == "out":
            return wiring.flipped(self.o)
        name, member = ref.split(".")
        return getattr(self.blocks[name], member)

    def elaborate(self, platform):
        m = Module()
        for name, b in self.blocks.items():
            m.submodules[name] = b
        for s, d in self.edges:
            wiring.connect(m, self._port(s), self._port(d))
        return m


def _stream_io(w_in: int, w_out: int) -> dict:
    return {"i": In(stream.Signature(unsigned(w_in))), "o": Out(stream.Signature(unsigned(w_out)))}


class Scramble(wiring.Component):
    """Per element: ``raw_out = (raw_in * mul + add) mod 2**out_bits`` (combinational)."""

    def __init__(self, in_type: QType, out_type: QType, n: int, mul: int = 37, add: int = 11):
        self.in_type, self.out_type, self.n, self.mul, self.add = in_type, out_type, n, mul, add
        super().__init__(_stream_io(n * in_type.bits, n * out_type.bits))

    def golden(self, x: np.ndarray) -> np.ndarray:
        raw = self.in_type.to_unsigned(x)
        return self.out_type.from_unsigned((raw * self.mul + self.add)
                                           & ((1 << self.out_type.bits) - 1))

    def elaborate(self, platform):
        m = Module()
        bi, bo = self.in_type.bits, self.out_type.bits
        lanes = [(self.i.payload[k * bi:(k + 1) * bi] * self.mul + self.add)[:bo]
                 for k in range(self.n)]
        m.d.comb += [self.o.payload.eq(Cat(*lanes)), self.o.valid.eq(self.i.valid),
                     self.i.ready.eq(self.o.ready)]
        return m


class Split(wiring.Component):
    """Per pixel of ``b0 + b1`` beats: the first ``b0`` to ``o0``, the rest to ``o1``."""

    def __init__(self, width: int, b0: int, b1: int):
        self.b0, self.b1 = b0, b1
        super().__init__({"i": In(stream.Signature(unsigned(width))),
                          "o0": Out(stream.Signature(unsigned(width))),
                          "o1": Out(stream.Signature(unsigned(width)))})

    def elaborate(self, platform):
        m = Module()
        n = self.b0 + self.b1
        k = Signal(range(max(n, 2)))
        first = k < self.b0
        m.d.comb += [
            self.o0.payload.eq(self.i.payload), self.o1.payload.eq(self.i.payload),
            self.o0.valid.eq(self.i.valid & first), self.o1.valid.eq(self.i.valid & ~first),
            self.i.ready.eq(Mux(first, self.o0.ready, self.o1.ready)),
        ]
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += k.eq(Mux(k == n - 1, 0, k + 1))
        return m


class Gate(wiring.Component):
    """Passes beats only in cycles a 16-bit LFSR allows (probability ~``1 - 2**-hold``)."""

    def __init__(self, width: int, seed: int, hold: int = 2):
        self.seed, self.hold = (seed * 2654435761) & 0xFFFF or 1, hold
        super().__init__(_stream_io(width, width))

    def elaborate(self, platform):
        m = Module()
        lfsr = Signal(16, init=self.seed)
        fb = lfsr[15] ^ lfsr[13] ^ lfsr[12] ^ lfsr[10]
        m.d.sync += lfsr.eq(Cat(fb, lfsr[:15]))
        en = ~lfsr[:self.hold].all()
        m.d.comb += [self.o.payload.eq(self.i.payload), self.o.valid.eq(self.i.valid & en),
                     self.i.ready.eq(self.o.ready & en)]
        return m


class Slow(wiring.Component):
    """One beat at most every ``period`` cycles."""

    def __init__(self, width: int, period: int):
        self.period = period
        super().__init__(_stream_io(width, width))

    def elaborate(self, platform):
        m = Module()
        cnt = Signal(range(self.period + 1))
        en = cnt == 0
        m.d.comb += [self.o.payload.eq(self.i.payload), self.o.valid.eq(self.i.valid & en),
                     self.i.ready.eq(self.o.ready & en)]
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += cnt.eq(self.period - 1)
        with m.Elif(~en):
            m.d.sync += cnt.eq(cnt - 1)
        return m


class Burst(wiring.Component):
    """Collects ``k`` beats, then releases all ``k`` (then collects again)."""

    def __init__(self, width: int, k: int):
        assert k >= 2
        self.width, self.k = width, k
        super().__init__(_stream_io(width, width))

    def elaborate(self, platform):
        m = Module()
        m.submodules.fifo = f = SyncFIFOBuffered(width=self.width, depth=self.k)
        draining = Signal()
        n = Signal(range(self.k + 1))
        m.d.comb += [
            f.w_data.eq(self.i.payload), f.w_en.eq(self.i.valid & ~draining),
            self.i.ready.eq(f.w_rdy & ~draining),
            self.o.payload.eq(f.r_data), self.o.valid.eq(f.r_rdy & draining),
            f.r_en.eq(self.o.ready & draining),
        ]
        moved = Mux(draining, self.o.valid & self.o.ready, self.i.valid & self.i.ready)
        with m.If(moved):
            with m.If(n == self.k - 1):
                m.d.sync += [n.eq(0), draining.eq(~draining)]
            with m.Else():
                m.d.sync += n.eq(n + 1)
        return m


# ============================================================================ adder graphs

@dataclasses.dataclass(frozen=True)
class AddCfg:
    pe: int
    elems: int
    a_type: QType
    b_type: QType
    out_type: QType
    sa: float
    za: int
    sb: float
    zb: int
    sy: float
    zy: int
    relu: bool = False
    saturating: bool = False   # deliberately: outputs mostly at the bounds
    semantics: str = "ort"

    @property
    def id(self) -> str:
        return (f"{self.semantics}-pe{self.pe}-e{self.elems}-{self.a_type.name}+"
                f"{self.b_type.name}-{self.out_type.name}{'-relu' if self.relu else ''}")

    @functools.cached_property
    def params(self) -> AddParams:
        lo = self.zy if self.relu else None
        return make_add_requant(Quantized(self.a_type, self.sa, self.za),
                                Quantized(self.b_type, self.sb, self.zb),
                                Quantized(self.out_type, self.sy, self.zy), lo=lo, pe=self.pe,
                                semantics=self.semantics)

    @property
    def beats(self) -> int:
        return self.elems // self.pe


ADD_GRID = [
    # ratios 1/2 and 1: many exact ties (round half to even in hardware)
    AddCfg(1, 16, INT8, INT8, INT8, 0.05, 3, 0.1, -2, 0.1, 0),
    AddCfg(2, 24, UINT8, INT8, UINT8, 0.02, 128, 0.03, 0, 0.04, 60, relu=True),
    AddCfg(4, 32, INT8, UINT8, INT8, 0.0213, -5, 0.0371, 120, 0.047, -3, semantics="exact"),
    AddCfg(3, 18, UINT8, UINT8, UINT8, 0.011, 100, 0.017, 140, 0.02, 128),
    AddCfg(8, 64, INT8, INT8, INT8, 0.5, 0, 0.25, 1, 0.01, 2, saturating=True),
    AddCfg(1, 5, INT4, UINT8, INT8, 0.3, 1, 0.013, 17, 0.05, -10, semantics="exact"),
    AddCfg(5, 20, INT16, INT8, INT16, 0.001, 100, 0.3, -1, 0.002, 5),      # 16-bit a
    AddCfg(2, 8, UINT4, UINT4, UINT8, 1.0, 0, 1.0, 0, 1.0, 0, semantics="exact"),  # a + b
    AddCfg(4, 16, UINT8, UINT8, UINT8, 0.0236, 131, 0.0141, 118, 0.0302, 7),  # ResNet-like
    AddCfg(2, 12, INT8, INT8, INT8, 0.0213, -5, 0.0371, 7, 0.047, -3, relu=True,
           semantics="exact"),
]
VL_ADD = [ADD_GRID[1], ADD_GRID[2], ADD_GRID[8]]


def add_net(cfg: AddCfg, *, short: str = "fifo", depth: int = 4, long_extra=(),
            gates: bool = False) -> tuple[Net, Scramble]:
    """in → Fork → o0 → Scramble → [extra blocks] → FIFO(depth) → add.i1 (b)
                   o1 → [FIFO(depth) | direct] → add.i0 (a);   add.o → out"""
    p = cfg.params
    wa, wb = p.pe * p.a_type.bits, p.pe * p.b_type.bits
    scr = Scramble(p.a_type, p.b_type, p.pe)
    blocks = {"fork": _fork(wa), "scr": scr, "lfifo": _fifo(wb, depth), "add": AddBlock(p)}
    edges = [("in", "fork.i"), ("fork.o0", "scr.i")]
    prev = "scr.o"
    for k, mk in enumerate(long_extra):
        blocks[f"x{k}"] = mk(wb)
        edges.append((prev, f"x{k}.i"))
        prev = f"x{k}.o"
    if gates:
        blocks["g0"] = Gate(wb, 3)
        edges.append((prev, "g0.i"))
        prev = "g0.o"
    edges += [(prev, "lfifo.i"), ("lfifo.o", "add.i1")]
    prev = "fork.o1"
    if gates:
        blocks["g1"] = Gate(wa, 7)
        edges.append((prev, "g1.i"))
        prev = "g1.o"
    if short == "fifo":
        blocks["sfifo"] = _fifo(wa, depth)
        edges += [(prev, "sfifo.i"), ("sfifo.o", "add.i0")]
    else:
        edges.append((prev, "add.i0"))
    edges.append(("add.o", "out"))
    return Net(blocks, edges), scr


def add_frames(cfg: AddCfg, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = cfg.a_type
    x = rng.integers(t.lo, t.hi + 1, size=(n, cfg.elems))
    if n >= 3:
        x[0, :], x[1, :] = t.lo, t.hi
    return x


def add_golden(cfg: AddCfg, scr: Scramble, x: np.ndarray) -> np.ndarray:
    return add.golden(cfg.params, x, scr.golden(x))


def run_add(cfg: AddCfg, x: np.ndarray, sim: str = "amaranth", **kw):
    net_kw = {k: kw.pop(k) for k in ("short", "depth", "long_extra", "gates") if k in kw}
    net, scr = add_net(cfg, **net_kw)
    p = cfg.params
    r = run_block(net, x, p.a_type, p.pe, p.out_type, p.pe, cfg.elems, simulator=sim,
                  name="add_net", **kw)
    return r, add_golden(cfg, scr, x)


def _assert_equal(got, want):
    if not np.array_equal(got, want):
        bad = np.argwhere(got != want)
        f, c = bad[0]
        raise AssertionError(f"{len(bad)} of {want.size} outputs differ; first at frame {f} "
                             f"element {c}: got {got[f, c]}, golden {want[f, c]}")


def _within(measured: float, model: float, what: str):
    assert abs(measured - model) <= 0.02 * model, f"{what}: measured {measured}, model {model}"


@pytest.mark.sim
@pytest.mark.parametrize("cfg", ADD_GRID, ids=[c.id for c in ADD_GRID])
def test_add_golden_and_cycles_amaranth(cfg: AddCfg):
    x = add_frames(cfg, 8, seed=1)
    r, want = run_add(cfg, x)
    _assert_equal(r.frames, want)
    y = want
    if not cfg.saturating:
        inside = (y > cfg.params.lo) & (y < cfg.params.hi)
        assert inside.mean() >= 0.3 and len(np.unique(y)) >= min(5, y.size // 4)
    # cost model: one beat per cycle; latency through fork → FIFO → add
    c = add.cost(dataclasses.replace(cfg.params, elements=cfg.elems))
    assert c.cycles == cfg.beats
    _within(r.interval, c.cycles, "frame interval")
    t = (0, cfg.beats - 1)
    fp, kp = FIFOParams(1, 1, cfg.beats), ForkParams(1, 2, cfg.beats)
    t = add.timing(cfg.params, *fifo.timing(fp, *fork.timing(kp, *t)))
    _within(r.latency, t[1] + 1, "latency")
    assert r.latency == c.latency + fifo.LATENCY + fork.LATENCY


@pytest.mark.sim
@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("cfg", ADD_GRID, ids=[c.id for c in ADD_GRID])
def test_add_stalls_amaranth(cfg: AddCfg, seed: int):
    x = add_frames(cfg, 6, seed=10 + seed)
    r, want = run_add(cfg, x, stall_in=0.3, stall_out=0.5, seed=seed, gates=True,
                      short="direct" if seed == 2 else "fifo")
    _assert_equal(r.frames, want)


@pytest.mark.verilator
@pytest.mark.parametrize("cfg", VL_ADD, ids=[c.id for c in VL_ADD])
def test_add_verilator(cfg: AddCfg):
    x = add_frames(cfg, 8, seed=1)
    r, want = run_add(cfg, x, sim="verilator")
    _assert_equal(r.frames, want)
    c = add.cost(dataclasses.replace(cfg.params, elements=cfg.elems))
    _within(r.interval, c.cycles, "frame interval")
    assert r.latency == c.latency + fifo.LATENCY
    x = add_frames(cfg, 24, seed=5)
    r, want = run_add(cfg, x, sim="verilator", stall_in=0.3, stall_out=0.5, seed=3)
    _assert_equal(r.frames, want)


def test_add_direct_short_branch_is_correct_but_slow():
    """Without a FIFO on the short branch the join waits for each beat to cross the long
    one (FIFO latency 2): a third of the rate, still exact."""
    cfg = ADD_GRID[2]
    x = add_frames(cfg, 6, seed=3)
    r, want = run_add(cfg, x, short="direct")
    _assert_equal(r.frames, want)
    assert r.interval == pytest.approx(3 * cfg.beats, rel=0.02)


# ---------------------------------------------------------------------------- deadlock

@pytest.mark.sim
def test_fork_join_deadlock_free_under_stalls():
    """fork → (short: direct, long: gated slow block + deep FIFO) → add: 60 frames back to
    back, random stalls on both ports and on both branches."""
    cfg = ADD_GRID[1]
    x = add_frames(cfg, 60, seed=4)
    r, want = run_add(cfg, x, short="direct", depth=64, gates=True,
                      long_extra=[lambda w: Slow(w, 3)], stall_in=0.3, stall_out=0.5, seed=9)
    _assert_equal(r.frames, want)
    # the slow block sets the rate: a beat every 3 cycles at best
    assert r.interval >= 3 * cfg.beats * 0.98


@pytest.mark.parametrize("short_depth,ok", [(None, True), (4, False)])
def test_fork_join_with_whole_frame_block(short_depth, ok):
    """A long branch that emits nothing before it has a whole frame needs a short-branch FIFO
    of at least a frame: with one it completes 60 frames under stalls, with a 4-deep one the
    graph deadlocks (the sizing rule is the graph builder's, not the blocks')."""
    cfg = ADD_GRID[1]
    k = cfg.beats
    depth = k + 3 if short_depth is None else short_depth
    n = 60 if ok else 3
    x = add_frames(cfg, n, seed=6)
    kw = dict(short="fifo", depth=depth, long_extra=[lambda w: Burst(w, k)],
              stall_in=0.3, stall_out=0.5, seed=2)
    if ok:
        r, want = run_add(cfg, x, **kw)
        _assert_equal(r.frames, want)
    else:
        with pytest.raises(SimTimeout):
            run_add(cfg, x, max_cycles=3000, **kw)


# ---------------------------------------------------------------------------- fork alone

def test_fork_three_outputs_cascaded_joins():
    """Fork(3): y = add2(add1(x, s1(x)), s2(x)); branches gated differently so the three
    outputs accept at different times."""
    t = INT8
    pe, elems = 2, 16
    p1 = make_add_requant(Quantized(t, 0.02, 1), Quantized(t, 0.03, -1), Quantized(t, 0.04, 3),
                          pe=pe)
    p2 = make_add_requant(Quantized(t, 0.04, 3), Quantized(t, 0.05, 4), Quantized(t, 0.06, -2),
                          pe=pe)
    w = pe * 8

    def net():
        blocks = {"fork": _fork(w, 3), "g0": Gate(w, 1), "g1": Gate(w, 2), "g2": Gate(w, 3),
                  "s1": Scramble(t, t, pe, 37, 11), "s2": Scramble(t, t, pe, 91, 5),
                  "f0": _fifo(w, 4), "f1": _fifo(w, 4), "f2": _fifo(w, 16),
                  "add1": AddBlock(p1), "add2": AddBlock(p2)}
        edges = [("in", "fork.i"),
                 ("fork.o0", "g0.i"), ("g0.o", "f0.i"), ("f0.o", "add1.i0"),
                 ("fork.o1", "g1.i"), ("g1.o", "s1.i"), ("s1.o", "f1.i"), ("f1.o", "add1.i1"),
                 ("fork.o2", "g2.i"), ("g2.o", "s2.i"), ("s2.o", "f2.i"), ("f2.o", "add2.i1"),
                 ("add1.o", "add2.i0"), ("add2.o", "out")]
        return Net(blocks, edges), blocks["s1"], blocks["s2"]

    x = np.random.default_rng(0).integers(-128, 128, size=(10, elems))
    for kw in ({}, dict(stall_in=0.3, stall_out=0.5, seed=4)):
        n, s1, s2 = net()
        want = add.golden(p2, add.golden(p1, x, s1.golden(x)), s2.golden(x))
        r = run_block(n, x, t, pe, t, pe, elems, **kw)
        _assert_equal(r.frames, want)


@pytest.mark.parametrize("pe,c", [(1, 3), (4, 8)])
def test_fork_into_concat_duplicates_pixels(pe, c):
    """in → Fork → Concat(pass): every pixel twice, full rate (Concat reads its inputs in
    turn, so one branch runs a pixel ahead: it needs a FIFO of c/pe beats + margin)."""
    t = UINT8
    p = make_concat(Quantized(t, 0.1, 5), Quantized(t, 0.1, 5), Quantized(t, 0.1, 5), c0=c, c1=c,
                    pe=pe)
    assert p.passthrough
    w = pe * 8
    blocks = {"fork": _fork(w), "f1": _fifo(w, c // pe + 3), "cat": Concat(p)}
    edges = [("in", "fork.i"), ("fork.o0", "cat.i0"), ("fork.o1", "f1.i"), ("f1.o", "cat.i1"),
             ("cat.o", "out")]
    pixels = 4
    x = np.random.default_rng(pe).integers(0, 256, size=(6, pixels * c))
    r = run_block(Net(blocks, edges), x, t, pe, t, pe, 2 * pixels * c)
    want = concat.golden(p, x.reshape(6, pixels, c), x.reshape(6, pixels, c)).reshape(6, -1)
    _assert_equal(r.frames, want)
    _within(r.interval, concat.cost(dataclasses.replace(p, pixels=pixels)).cycles, "frame interval")
    _within(r.interval, fork.cost(ForkParams(w, 2, pixels * c // pe)).cycles * 2, "fork rate")


def test_fork_cost():
    c = fork.cost(ForkParams(16, 3, 10))
    assert (c.cycles, c.latency, c.multipliers, c.memory_bits) == (10, 10, 0, 0)
    x = np.arange(6)
    assert all(np.array_equal(y, x) for y in fork.golden(ForkParams(16, 3, 10), x))


# ============================================================================ concat graphs

@dataclasses.dataclass(frozen=True)
class CatCfg:
    pe: int
    pixels: int
    c0: int
    c1: int
    t_in: QType           # the graph input's type (and input 0's)
    t1: QType             # input 1's type (Scramble maps to it if it differs... or not)
    out: QType
    s0: float = 0.1
    z0: int = 0
    s1: float = 0.1
    z1: int = 0
    sy: float = 0.1
    zy: int = 0
    swap: bool = False    # concat.i0 gets the pixel's *last* c1 channels (channel rotation)
    scramble: bool = False  # input 1 goes through a Scramble (to type t1)
    mode: str | None = None

    @property
    def id(self) -> str:
        mode = self.params.mode
        return (f"pe{self.pe}-p{self.pixels}-c{self.c0}+{self.c1}-{self.t_in.name}/"
                f"{self.t1.name}-{self.out.name}-{mode}{'-swap' if self.swap else ''}"
                f"{'-scr' if self.scramble else ''}")

    @functools.cached_property
    def params(self):
        return make_concat(Quantized(self.t_in, self.s0, self.z0),
                           Quantized(self.t1, self.s1, self.z1),
                           Quantized(self.out, self.sy, self.zy), c0=self.c0, c1=self.c1,
                           pe=self.pe, mode=self.mode)

    @property
    def beats(self) -> int:
        return self.pixels * (self.c0 + self.c1) // self.pe


CAT_GRID = [
    CatCfg(1, 4, 2, 3, INT8, INT8, INT8),                                         # pass
    CatCfg(2, 3, 4, 6, UINT8, UINT8, UINT8, 0.05, 128, 0.05, 128, 0.05, 128, swap=True),
    CatCfg(4, 2, 8, 4, INT8, UINT8, INT8, 0.02, 0, 0.05, 130, 0.03, -4, scramble=True),
    CatCfg(1, 5, 3, 1, UINT8, UINT8, UINT8, 0.1, 10, 0.2, 20, 0.1, 10),           # one input exact
    CatCfg(3, 2, 6, 9, INT8, INT8, UINT8, 0.013, 7, 0.021, -9, 0.02, 120, swap=True),
    CatCfg(2, 4, 2, 2, INT4, UINT8, INT8, 0.5, 1, 0.01, 100, 0.03, 0, scramble=True),
    CatCfg(8, 2, 16, 8, INT8, INT8, INT8, 0.1, 0, 0.1, 0, 0.1, 0, swap=True),     # pass, wide
    CatCfg(4, 2, 8, 4, INT8, UINT8, INT8, 0.02, 0, 0.05, 130, 0.03, -4, scramble=True,
           mode="requant"),
    CatCfg(3, 2, 6, 9, INT8, INT8, UINT8, 0.013, 7, 0.021, -9, 0.02, 120, swap=True,
           mode="requant"),
    CatCfg(2, 3, 2, 4, INT16, INT16, INT8, 0.001, 0, 0.002, 10, 0.1, 0),         # requant
]
VL_CAT = [CAT_GRID[2], CAT_GRID[4], CAT_GRID[8]]


def cat_net(cfg: CatCfg, depth: int | None = None) -> tuple[Net, Scramble | None]:
    """in → Split(c0 | c1 channels) → FIFOs → [Scramble] → Concat; with ``swap`` the split's
    first group (cfg.c1 channels) feeds Concat.i1 and its second group (cfg.c0) Concat.i0."""
    p = cfg.params
    pe, b = cfg.pe, cfg.t_in.bits
    w = pe * b
    g_first, g_second = (cfg.c1, cfg.c0) if cfg.swap else (cfg.c0, cfg.c1)
    # the branch read second per pixel must hold a pixel's worth of the branch read first
    d = depth or max(g_first, g_second) // pe + 3
    blocks = {"split": Split(w, g_first // pe, g_second // pe), "fa": _fifo(w, d),
              "fb": _fifo(w, d), "cat": Concat(p)}
    edges = [("in", "split.i"), ("split.o0", "fa.i"), ("split.o1", "fb.i")]
    to_i0, to_i1 = ("fb.o", "fa.o") if cfg.swap else ("fa.o", "fb.o")
    scr = None
    if cfg.scramble:
        scr = Scramble(cfg.t_in, cfg.t1, pe)
        blocks["scr"] = scr
        edges += [(to_i1, "scr.i"), ("scr.o", "cat.i1")]
    else:
        assert cfg.t1 == cfg.t_in
        edges.append((to_i1, "cat.i1"))
    edges += [(to_i0, "cat.i0"), ("cat.o", "out")]
    return Net(blocks, edges), scr


def cat_frames(cfg: CatCfg, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = cfg.t_in
    x = rng.integers(t.lo, t.hi + 1, size=(n, cfg.pixels * (cfg.c0 + cfg.c1)))
    if n >= 3:
        x[0, :], x[1, :] = t.lo, t.hi
    return x


def cat_golden(cfg: CatCfg, scr, x: np.ndarray) -> np.ndarray:
    n = len(x)
    px = x.reshape(n, cfg.pixels, cfg.c0 + cfg.c1)
    if cfg.swap:
        x0, x1 = px[..., cfg.c1:], px[..., :cfg.c1]
    else:
        x0, x1 = px[..., :cfg.c0], px[..., cfg.c0:]
    if scr is not None:
        x1 = scr.golden(x1)
    return concat.golden(cfg.params, x0, x1).reshape(n, -1)


def run_cat(cfg: CatCfg, x: np.ndarray, sim: str = "amaranth", depth=None, **kw):
    net, scr = cat_net(cfg, depth)
    r = run_block(net, x, cfg.t_in, cfg.pe, cfg.out, cfg.pe,
                  cfg.pixels * (cfg.c0 + cfg.c1), simulator=sim, name="cat_net", **kw)
    return r, cat_golden(cfg, scr, x)


@pytest.mark.sim
@pytest.mark.parametrize("cfg", CAT_GRID, ids=[c.id for c in CAT_GRID])
def test_concat_golden_and_cycles_amaranth(cfg: CatCfg):
    x = cat_frames(cfg, 6, seed=1)
    r, want = run_cat(cfg, x)
    _assert_equal(r.frames, want)
    p = cfg.params
    c = concat.cost(dataclasses.replace(p, pixels=cfg.pixels))
    assert c.cycles == cfg.beats
    _within(r.interval, c.cycles, "frame interval")
    if not cfg.swap:
        # split (0) → FIFO (2) → concat: the concat's inputs arrive at the input's pace
        t = concat.timing(p, *fifo.timing(FIFOParams(1, 1, cfg.beats), 0, cfg.beats - 1))
        _within(r.latency, t[1] + 1, "latency")
        assert r.latency == c.latency + fifo.LATENCY
    else:
        # the input's last beat ends the pixel's second group, which feeds concat.i0; the
        # c1/pe beats of concat.i1 (buffered in their FIFO) are taken after it
        t = concat.timing(p, 0, cfg.beats - 1 + fifo.LATENCY + cfg.c1 // cfg.pe)
        _within(r.latency, t[1] + 1, "latency")


@pytest.mark.sim
@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("cfg", CAT_GRID, ids=[c.id for c in CAT_GRID])
def test_concat_stalls_amaranth(cfg: CatCfg, seed: int):
    x = cat_frames(cfg, 6, seed=20 + seed)
    r, want = run_cat(cfg, x, stall_in=0.3, stall_out=0.5, seed=seed)
    _assert_equal(r.frames, want)


@pytest.mark.verilator
@pytest.mark.parametrize("cfg", VL_CAT, ids=[c.id for c in VL_CAT])
def test_concat_verilator(cfg: CatCfg):
    x = cat_frames(cfg, 6, seed=1)
    r, want = run_cat(cfg, x, sim="verilator")
    _assert_equal(r.frames, want)
    _within(r.interval, concat.cost(dataclasses.replace(cfg.params, pixels=cfg.pixels)).cycles,
            "frame interval")
    x = cat_frames(cfg, 20, seed=7)
    r, want = run_cat(cfg, x, sim="verilator", stall_in=0.3, stall_out=0.5, seed=5)
    _assert_equal(r.frames, want)


def test_concat_split_deadlocks_without_buffer():
    """Concat reads i0's group first; if the split sends the other group first (swap) and
    its branch cannot hold it, nothing moves."""
    cfg = CAT_GRID[4]   # groups of 9 and 6 channels, pe 3: 3 beats must wait
    x = cat_frames(cfg, 2, seed=1)
    with pytest.raises(SimTimeout):
        run_cat(cfg, x, depth=2, max_cycles=2000)
    r, want = run_cat(cfg, x, depth=3 + 1)  # 3 beats + the FIFO's slack
    _assert_equal(r.frames, want)


def test_concat_params():
    p = make_concat(Quantized(INT8, 0.1, 0), Quantized(INT8, 0.1, 0), Quantized(INT8, 0.1, 0), c0=4,
                    c1=8, pe=4)
    assert p.mode == "pass" and p.beats_per_pixel == 3
    q = make_concat(Quantized(INT8, 0.1, 0), Quantized(INT8, 0.1, 0), Quantized(INT8, 0.1, 0), c0=4,
                    c1=4, pe=4, lo=0)  # relu-ish clamp
    assert q.mode == "table"
    x = np.arange(-128, 128).reshape(32, 8)
    assert np.array_equal(concat.golden(q, x[:, :4], x[:, 4:]), np.maximum(x, 0))
    r = make_concat(Quantized(INT8, 0.1, 0), Quantized(UINT8, 0.2, 128), Quantized(INT8, 0.1, 0),
                    c0=4, c1=8, pe=4, mode="requant")
    assert r.mode == "requant" and r.mults[0] == 1 << r.shift and r.mults[1] == 2 << r.shift
    x0 = np.arange(-128, 128).reshape(64, 4)
    x1 = np.arange(0, 512).reshape(64, 8) % 256
    for mode in ("requant", "table"):
        y = concat.golden(dataclasses.replace(r) if mode == "requant" else
                          make_concat(Quantized(INT8, 0.1, 0), Quantized(UINT8, 0.2, 128),
                                      Quantized(INT8, 0.1, 0), c0=4, c1=8, pe=4),
                          x0, x1)
        assert np.array_equal(y[:, :4], x0)
        assert np.array_equal(y[:, 4:], np.clip(2 * (x1 - 128), -128, 127))
    assert make_concat(Quantized(INT16, 0.1, 0), Quantized(INT16, 0.2, 0), Quantized(INT16, 0.1, 0),
                       c0=2, c1=2, pe=1).mode == "requant"
    with pytest.raises(ValueError):
        make_concat(Quantized(INT8, 0.1, 0), Quantized(INT8, 0.1, 0), Quantized(INT8, 0.1, 0), c0=4,
                    c1=6, pe=4)
    with pytest.raises(ValueError):
        concat.ConcatParams(4, 4, 2, (INT8, UINT8), INT8)
    with pytest.raises(ValueError):
        make_concat(Quantized(INT8, 0.1, 0), Quantized(INT8, 0.2, 0), Quantized(INT8, 0.1, 0), c0=4,
                    c1=4, pe=2, mode="pass")
    c = concat.cost(dataclasses.replace(q, pixels=10))
    assert c.memory_bits >= 4 * 512 * 8 and c.multipliers == 0 and c.cycles == 20
    c = concat.cost(dataclasses.replace(r, pixels=10))
    assert c.multipliers == 4 and c.cycles == 30


# ============================================================================ adder params

def test_add_requant_precision():
    """≥ 24 significant bits for the larger multiplier; the fixed-point sum is within
    2**-13 of a step of the exact real value for every input pair (checked exhaustively
    against exact rationals on int8 × uint8)."""
    rng = np.random.default_rng(0)
    for _ in range(20):
        sa, sb, sy = (float(np.float32(v)) for v in 10.0 ** rng.uniform(-3, 0, size=3))
        za, zb = int(rng.integers(-20, 20)), int(rng.integers(100, 156))
        p = make_add_requant(Quantized(INT8, sa, za), Quantized(UINT8, sb, zb),
                             Quantized(INT8, sy, 0), semantics="exact")
        assert max(p.ma, p.mb).bit_length() >= 24
        ra, rb = Fraction(sa) / Fraction(sy), Fraction(sb) / Fraction(sy)
        ea = abs(Fraction(p.ma, 1 << p.shift) - ra)
        eb = abs(Fraction(p.mb, 1 << p.shift) - rb)
        worst = ea * max(abs(INT8.lo - za), abs(INT8.hi - za)) \
            + eb * max(abs(UINT8.lo - zb), abs(UINT8.hi - zb))
        assert worst <= Fraction(1, 1 << 13)
    # degenerate and bad inputs
    with pytest.raises(ValueError):
        make_add_requant(Quantized(INT8, 0.0, 0), Quantized(INT8, 0.1, 0), Quantized(INT8, 0.1, 0))
    with pytest.raises(ValueError):
        AddParams(1, 1, 0, 0, 0, 0, -200, 0, INT8, INT8, INT8)


@pytest.mark.slow
def test_add_golden_matches_exact_rational():
    """Exhaustive int8 × int8: golden = exact rational rounding (half to even) except within
    the documented 2**-13 of a step from a tie."""
    for cfg in (ADD_GRID[0], ADD_GRID[2], ADD_GRID[4]):
        p = dataclasses.replace(cfg, semantics="exact", pe=1).params
        a, b = _all_pairs(p.a_type, p.b_type)
        g = add.golden(p, a, b)
        ex, tie = exact_reference(cfg.sa, cfg.sb, cfg.sy, p.zy, p.za, p.zb, p.lo, p.hi, a, b)
        bad = np.nonzero(g != ex)[0]
        fa, fb, fy = (Fraction(float(np.float32(s))) for s in (cfg.sa, cfg.sb, cfg.sy))
        for k in bad:
            v = (int(a[k]) - p.za) * fa / fy + (int(b[k]) - p.zb) * fb / fy
            assert abs(v - math.floor(v) - Fraction(1, 2)) <= Fraction(1, 1 << 13)


def _all_pairs(ta: QType, tb: QType):
    a = np.repeat(np.arange(ta.lo, ta.hi + 1), tb.hi - tb.lo + 1)
    b = np.tile(np.arange(tb.lo, tb.hi + 1), ta.hi - ta.lo + 1)
    return a, b


# ============================================================================ onnxruntime

def _np_dtype(t: QType):
    return {INT8: np.int8, UINT8: np.uint8}[t]


def _tp(t: QType):
    from onnx import TensorProto
    return {INT8: TensorProto.INT8, UINT8: TensorProto.UINT8}[t]


def _qdq_add_model(sa, za, sb, zb, sy, zy, ta, tb, ty, relu=False):
    from onnx import helper, numpy_helper
    c = lambda v, dt, n: numpy_helper.from_array(np.array(v, dtype=dt), n)  # noqa: E731
    inits = [c(sa, np.float32, "sa"), c(za, _np_dtype(ta), "za"), c(sb, np.float32, "sb"),
             c(zb, _np_dtype(tb), "zb"), c(sy, np.float32, "sy"), c(zy, _np_dtype(ty), "zy")]
    nodes = [helper.make_node("DequantizeLinear", ["A", "sa", "za"], ["fa"]),
             helper.make_node("DequantizeLinear", ["B", "sb", "zb"], ["fb"]),
             helper.make_node("Add", ["fa", "fb"], ["s"])]
    last = "s"
    if relu:
        nodes.append(helper.make_node("Relu", ["s"], ["r"]))
        last = "r"
    nodes.append(helper.make_node("QuantizeLinear", [last, "sy", "zy"], ["Y"]))
    g = helper.make_graph(nodes, "qdq_add",
                          [helper.make_tensor_value_info("A", _tp(ta), [None]),
                           helper.make_tensor_value_info("B", _tp(tb), [None])],
                          [helper.make_tensor_value_info("Y", _tp(ty), [None])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    m.ir_version = 9
    return m


def _qlinear_add_model(sa, za, sb, zb, sy, zy, t):
    from onnx import helper, numpy_helper
    dt = _np_dtype(t)
    c = lambda v, d, n: numpy_helper.from_array(np.array(v, dtype=d), n)  # noqa: E731
    inits = [c(sa, np.float32, "sa"), c(za, dt, "za"), c(sb, np.float32, "sb"),
             c(zb, dt, "zb"), c(sy, np.float32, "sy"), c(zy, dt, "zy")]
    node = helper.make_node("QLinearAdd", ["A", "sa", "za", "B", "sb", "zb", "sy", "zy"], ["Y"],
                            domain="com.microsoft")
    g = helper.make_graph([node], "qlinear_add",
                          [helper.make_tensor_value_info("A", _tp(t), [None]),
                           helper.make_tensor_value_info("B", _tp(t), [None])],
                          [helper.make_tensor_value_info("Y", _tp(t), [None])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19),
                                            helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 9
    return m


def _ort(model, feeds: dict, optimize: bool) -> np.ndarray:
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize
                                   else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    s = ort.InferenceSession(model.SerializeToString(), so,
                             providers=["CPUExecutionProvider"])
    return s.run(None, feeds)[0].astype(np.int64)


ORT_CASES = [
    # sa, za, sb, zb, sy, zy, ta, tb, ty, relu
    (0.05, 3, 0.1, -2, 0.1, 0, INT8, INT8, INT8, False),         # ratios 1/2, 1: ties galore
    (0.0213, -5, 0.0371, 7, 0.047, -3, INT8, INT8, INT8, False),
    (0.02, 128, 0.03, 120, 0.04, 0, UINT8, UINT8, UINT8, False),
    (1 / 64, 0, 3 / 128, 0, 1 / 32, 10, INT8, INT8, INT8, False),  # dyadic: everything exact
    (0.1, 0, 0.3, 0, 0.2, 0, INT8, INT8, INT8, False),             # 0.3/0.2 ≈ 1.5 (not exact)
    # cases where how ORT's compiled kernel folds the zero points (fma(rA, za, rB*zb), not
    # two roundings nor fma(rB, zb, rA*za)) decides an output
    (0.1554974913597107, 231, 0.0044875238090753555, 69, 0.07744444906711578, 92,
     UINT8, UINT8, UINT8, False),
    (0.20379364490509033, 125, 0.33274346590042114, -36, 0.007623643148690462, 54,
     INT8, INT8, INT8, False),
    (0.033811189234256744, 241, 0.29313233494758606, 117, 0.03015400841832161, 199,
     UINT8, UINT8, UINT8, False),
    # not fusable into QLinearAdd (mixed types / Relu between Add and Q): ORT's float path
    (0.011, 100, 0.017, -3, 0.02, 128, UINT8, INT8, UINT8, True),
    (0.003, 0, 0.0041, 0, 0.005, -20, INT8, INT8, INT8, True),
    (0.02, 128, 0.03, 0, 0.04, 60, UINT8, INT8, UINT8, False),
]

#: mismatches between float32 arithmetic and the exact value: only this close to a tie
NEAR_TIE = 1e-4


def _tie_report(y, g, tie, a, b, case) -> dict:
    """Where ``y`` and ``g`` differ: at exact ties, or how close to one (steps)."""
    sa, za, sb, zb, sy, _zy = case[:6]
    fa, fb, fy = (Fraction(float(np.float32(s))) for s in (sa, sb, sy))
    bad = np.nonzero(y != g)[0]
    assert np.abs(y - g).max(initial=0) <= 1
    near, far = 0, 0.0
    for k in bad:
        if tie[k]:
            continue
        v = (int(a[k]) - za) * fa / fy + (int(b[k]) - zb) * fb / fy
        dist = abs(v - math.floor(v) - Fraction(1, 2))
        assert dist <= NEAR_TIE, f"{a[k]}+{b[k]} differs, {float(dist)} steps from a tie"
        near, far = near + 1, max(far, float(dist))
    return {"differ": int(bad.size), "at_ties": int(bad.size - near), "near_ties": near,
            "max_distance_from_tie": far}


@pytest.mark.slow
@pytest.mark.parametrize("case", ORT_CASES, ids=[f"ort{k}" for k in range(len(ORT_CASES))])
def test_add_golden_vs_onnxruntime(case, record_property):
    """Exhaustive over all input pairs.

    * ``semantics="ort"`` is bit-exact to com.microsoft.QLinearAdd and to the QDQ graph under
      ORT's default optimizations, which fuse it into QLinearAdd (x86-64 AVX2 kernel), when
      the group is fusable (one type, no Relu between Add and QuantizeLinear).
    * Everything else differs only at exact ties or within NEAR_TIE of a step from one, by
      one step: ``"exact"`` vs ORT, and ORT's float path (no optimization, or not fusable)
      vs either; the counts are recorded (``-s`` prints them)."""
    sa, za, sb, zb, sy, zy, ta, tb, ty, relu = case
    lo = zy if relu else None
    g = {sem: None for sem in ("ort", "exact")}
    a, b = _all_pairs(ta, tb)
    for sem in g:
        p = make_add_requant(Quantized(ta, sa, za), Quantized(tb, sb, zb), Quantized(ty, sy, zy),
                             lo=lo, semantics=sem)
        g[sem] = add.golden(p, a, b)
    _, tie = exact_reference(sa, sb, sy, zy, za, zb, lo if relu else ty.lo, ty.hi, a, b)
    feeds = {"A": a.astype(_np_dtype(ta)), "B": b.astype(_np_dtype(tb))}
    qdq = _qdq_add_model(sa, za, sb, zb, sy, zy, ta, tb, ty, relu)
    ort = {"qdq_float": _ort(qdq, feeds, False), "qdq_optimized": _ort(qdq, feeds, True)}
    fusable = ta == tb == ty and not relu
    if fusable:
        ort["qlinearadd"] = _ort(_qlinear_add_model(sa, za, sb, zb, sy, zy, ta), feeds, False)
        assert np.array_equal(g["ort"], ort["qlinearadd"])
        assert np.array_equal(g["ort"], ort["qdq_optimized"])
    else:
        assert np.array_equal(ort["qdq_optimized"], ort["qdq_float"])  # not fused
    report = {"pairs": int(a.size), "exact_ties": int(tie.sum())}
    for sem in g:
        for name, y in ort.items():
            report[f"{sem}_vs_{name}"] = _tie_report(y, g[sem], tie, a, b, case)
    report["exact_vs_exact_rational"] = _tie_report(
        exact_reference(sa, sb, sy, zy, za, zb, lo if relu else ty.lo, ty.hi, a, b)[0],
        g["exact"], tie, a, b, case)
    record_property("ort", report)
    print(case[:6], {k: (v if not isinstance(v, dict) else
                         (v["differ"], v["at_ties"], f"{v['max_distance_from_tie']:.1e}"))
                     for k, v in report.items()})


def test_add_ort_semantics_random_scales():
    """``"ort"`` == QLinearAdd on random scales and zero points (6000 random pairs each)."""
    rng = np.random.default_rng(3)
    for k in range(12):
        t = INT8 if k % 2 else UINT8
        sa, sb, sy = (float(np.float32(v)) for v in 10.0 ** rng.uniform(-2.5, 0, 3))
        za, zb, zy = (int(rng.integers(t.lo, t.hi + 1)) for _ in range(3))
        a, b = _all_pairs(t, t)
        idx = rng.choice(a.size, 6000, replace=False)
        a, b = a[idx], b[idx]
        p = make_add_requant(Quantized(t, sa, za), Quantized(t, sb, zb), Quantized(t, sy, zy),
                             semantics="ort")
        feeds = {"A": a.astype(_np_dtype(t)), "B": b.astype(_np_dtype(t))}
        want = _ort(_qlinear_add_model(sa, za, sb, zb, sy, zy, t), feeds, False)
        assert np.array_equal(add.golden(p, a, b), want), (sa, za, sb, zb, sy, zy)


def _qdq_concat_model(s0, z0, t0, s1, z1, t1, sy, zy, ty, n0=256, n1=256):
    from onnx import helper, numpy_helper
    c = lambda v, d, n: numpy_helper.from_array(np.array(v, dtype=d), n)  # noqa: E731
    inits = [c(s0, np.float32, "s0"), c(z0, _np_dtype(t0), "z0"), c(s1, np.float32, "s1"),
             c(z1, _np_dtype(t1), "z1"), c(sy, np.float32, "sy"), c(zy, _np_dtype(ty), "zy")]
    nodes = [helper.make_node("DequantizeLinear", ["A", "s0", "z0"], ["fa"]),
             helper.make_node("DequantizeLinear", ["B", "s1", "z1"], ["fb"]),
             helper.make_node("Concat", ["fa", "fb"], ["s"], axis=1),
             helper.make_node("QuantizeLinear", ["s", "sy", "zy"], ["Y"])]
    g = helper.make_graph(nodes, "qdq_cat",
                          [helper.make_tensor_value_info("A", _tp(t0), [n0, 1]),
                           helper.make_tensor_value_info("B", _tp(t1), [n1, 1])],
                          [helper.make_tensor_value_info("Y", _tp(ty), [256, 2])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    m.ir_version = 9
    return m


def test_concat_golden_vs_onnxruntime(record_property):
    """QDQ Concat (DequantizeLinear ×2 → Concat → QuantizeLinear), random scales, every input
    value: the table mode is bit-exact to ORT (float path and optimized); the multiplier
    ("requant") mode differs at most by one step, rarely."""
    rng = np.random.default_rng(1)
    requant_diffs = 0
    for _ in range(60):
        t0, t1, ty = (INT8 if rng.random() < 0.5 else UINT8 for _ in range(3))
        s0, s1, sy = (float(np.float32(v)) for v in 10.0 ** rng.uniform(-2.5, -0.5, 3))
        z0, z1, zy = (int(rng.integers(t.lo, t.hi + 1)) for t in (t0, t1, ty))
        a = np.arange(t0.lo, t0.hi + 1).reshape(256, 1)
        b = np.arange(t1.lo, t1.hi + 1).reshape(256, 1)
        m = _qdq_concat_model(s0, z0, t0, s1, z1, t1, sy, zy, ty)
        feeds = {"A": a.astype(_np_dtype(t0)), "B": b.astype(_np_dtype(t1))}
        table = make_concat(Quantized(t0, s0, z0), Quantized(t1, s1, z1), Quantized(ty, sy, zy),
                            c0=1, c1=1, pe=1)
        assert table.mode == "table"
        want = concat.golden(table, a, b)
        for opt in (False, True):
            assert np.array_equal(_ort(m, feeds, opt), want)
        rq = make_concat(Quantized(t0, s0, z0), Quantized(t1, s1, z1), Quantized(ty, sy, zy), c0=1,
                         c1=1, pe=1, mode="requant")
        y = concat.golden(rq, a, b)
        assert np.abs(y - want).max() <= 1
        requant_diffs += int(np.sum(y != want))
    record_property("requant_mode_differences", requant_diffs)
    assert requant_diffs <= 5
