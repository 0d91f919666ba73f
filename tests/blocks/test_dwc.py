# amaranth: UnusedElaboratable=no
"""Tests of the data-width converter (rtl_templates/dwc.py).

For a grid of (bits, in_elems, out_elems, frame) — integer ratios both ways, non-integer
ratios (4 → 6, 6 → 4, 7 → 3, 2 → 3 ...), 1-element beats, equal widths (wires), signed and unsigned,
odd element widths — the DWC wrapped in the AXI top level must

* reproduce the element sequence bit-exactly (golden: identity), with frames never mixing
  (output ``tlast`` every ``frame/out`` beats);
* sustain the maximal rate and match the cost/timing model (interval and latency within 2 %):
  one output beat per cycle when ``in ≥ out``, one input beat per cycle when ``in ≤ out``;
* lose or duplicate nothing under random valid/ready stalls.

The buffer size formula is checked to be the smallest that sustains the rate (one element less
measurably slows the converter), and chains of converters (4 → 6 → 4, 3 → 2 → 5) are exact.
"""
from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from hwgen.rtl_templates import dwc
from hwgen.rtl_templates.dwc import DWC, DWCParams
from hwgen.rtl_templates.quant import QType
from hwgen.sim.harness import run_block


@dataclasses.dataclass(frozen=True)
class Cfg:
    bits: int
    signed: bool
    i: int
    o: int
    frame: int

    @property
    def id(self) -> str:
        return f"{'int' if self.signed else 'uint'}{self.bits}-{self.i}to{self.o}-f{self.frame}"

    @property
    def qtype(self) -> QType:
        return QType(self.bits, self.signed)


GRID = [
    Cfg(8, False, 4, 6, 24),     # non-integer ratio up
    Cfg(8, True, 6, 4, 24),      # non-integer ratio down
    Cfg(8, False, 1, 4, 16),     # 1 → n
    Cfg(8, True, 4, 1, 16),      # n → 1
    Cfg(4, True, 3, 2, 12),
    Cfg(3, False, 2, 3, 12),     # odd element width
    Cfg(8, False, 5, 5, 10),     # equal: wires
    Cfg(8, True, 8, 12, 48),
    Cfg(16, True, 12, 8, 48),
    Cfg(8, False, 7, 3, 21),     # coprime
    Cfg(5, True, 2, 16, 32),     # wide up-conversion
    Cfg(8, False, 16, 2, 32),    # wide down-conversion
]
VL_GRID = [GRID[0], GRID[1], GRID[9]]
N_FRAMES = 8


def _frames(cfg: Cfg, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = cfg.qtype
    x = rng.integers(t.lo, t.hi + 1, size=(n, cfg.frame))
    x[0, :] = t.lo
    x[0, ::3] = t.hi
    return x


def _run(cfg: Cfg, x: np.ndarray, sim: str = "amaranth", capacity=None, **kw):
    blk = DWC(DWCParams(cfg.bits, cfg.i, cfg.o, cfg.frame, capacity=capacity))
    return run_block(blk, x, cfg.qtype, cfg.i, cfg.qtype, cfg.o, cfg.frame, simulator=sim,
                     name="dwc", **kw)


def _check(cfg: Cfg, x: np.ndarray, r):
    assert np.array_equal(
        r.frames, dwc.golden(DWCParams(cfg.bits, cfg.i, cfg.o, cfg.frame), x)
    ), "element sequence changed"
    per = cfg.frame // cfg.o
    assert r.result.out_last == [(k % per) == per - 1 for k in range(len(x) * per)]
    assert len(r.result.in_times) == len(x) * cfg.frame // cfg.i


def _check_cycles(cfg: Cfg, r):
    c = dwc.cost(DWCParams(cfg.bits, cfg.i, cfg.o, cfg.frame))
    assert c.cycles == max(cfg.frame // cfg.i, cfg.frame // cfg.o)
    assert abs(r.interval - c.cycles) <= 0.02 * c.cycles, \
        f"interval {r.interval}, cost model {c.cycles}"
    assert abs(r.latency - c.latency) <= 0.02 * c.latency, \
        f"latency {r.latency}, cost model {c.latency}"
    # the maximal rate on the faster side, cycle by cycle
    t_in, t_out = r.result.in_times, r.result.out_times
    if cfg.i <= cfg.o:
        assert t_in == list(range(t_in[0], t_in[0] + len(t_in))), "input not every cycle"
    if cfg.i >= cfg.o:
        assert t_out == list(range(t_out[0], t_out[0] + len(t_out))), "output not every cycle"


@pytest.mark.sim
@pytest.mark.parametrize("cfg", GRID, ids=[c.id for c in GRID])
def test_dwc_amaranth(cfg: Cfg):
    x = _frames(cfg, N_FRAMES, seed=1)
    r = _run(cfg, x)
    _check(cfg, x, r)
    _check_cycles(cfg, r)


@pytest.mark.sim
@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("cfg", GRID, ids=[c.id for c in GRID])
def test_dwc_stalls_amaranth(cfg: Cfg, seed: int):
    x = _frames(cfg, N_FRAMES, seed=10 + seed)
    r = _run(cfg, x, stall_in=0.3, stall_out=0.5, seed=seed)
    _check(cfg, x, r)


@pytest.mark.verilator
@pytest.mark.parametrize("cfg", VL_GRID, ids=[c.id for c in VL_GRID])
def test_dwc_verilator(cfg: Cfg):
    x = _frames(cfg, N_FRAMES, seed=1)
    r = _run(cfg, x, sim="verilator")
    _check(cfg, x, r)
    _check_cycles(cfg, r)
    for seed in (1, 2):
        x = _frames(cfg, 3 * N_FRAMES, seed=20 + seed)
        r = _run(cfg, x, sim="verilator", stall_in=0.3, stall_out=0.5, seed=seed)
        _check(cfg, x, r)


def _steady_rate(i: int, o: int, n: int, cycles: int = 4000) -> tuple[float, float]:
    """Cycle model of the converter's control (input always offered, output always ready)."""
    level = ins = outs = 0
    for _ in range(cycles):
        pop, push = level >= o, level <= n - i
        level += push * i - pop * o
        ins, outs = ins + push, outs + pop
    return ins / cycles, outs / cycles


def test_capacity_is_minimal_model():
    """For every in/out up to 16: the formula's capacity reaches the maximal rate and one
    slot less does not."""
    for i in range(1, 17):
        for o in range(1, 17):
            if i == o:
                continue
            want = (min(1.0, o / i), min(1.0, i / o))
            n = dwc.capacity(i, o)
            assert _steady_rate(i, o, n) == pytest.approx(want, abs=1e-2), (i, o)
            assert _steady_rate(i, o, n - 1) != pytest.approx(want, abs=1e-2), (i, o)


@pytest.mark.parametrize("cfg", [GRID[0], GRID[1], GRID[9]], ids=lambda c: c.id)
def test_capacity_is_minimal_hardware(cfg: Cfg):
    """The hardware with one slot less is still exact but slower than the cost model."""
    n = dwc.capacity(cfg.i, cfg.o)
    x = _frames(cfg, N_FRAMES, seed=4)
    r = _run(cfg, x, capacity=n - 1)
    _check(cfg, x, r)
    assert r.interval > dwc.cost(DWCParams(cfg.bits, cfg.i, cfg.o, cfg.frame)).cycles * 1.02


@pytest.mark.parametrize("chain", [(4, 6, 4), (3, 2, 5), (1, 12, 4)])
def test_dwc_chain(chain):
    """Converters back to back, with stalls: the sequence survives every re-packing."""
    frame, bits = 60, 8
    t = QType(bits, True)
    x = np.random.default_rng(len(chain)).integers(t.lo, t.hi + 1, size=(6, frame))
    for kw in ({}, dict(stall_in=0.4, stall_out=0.4, seed=7)):
        blocks = [DWC(DWCParams(bits, a, b, frame)) for a, b in zip(chain, chain[1:])]
        r = run_block(blocks, x, t, chain[0], t, chain[-1], frame, **kw)
        assert np.array_equal(r.frames, x)


@pytest.mark.sim
def test_sliced_output_writes_each_slice_on_its_own_valid():
    """A converter from 4 to 12 elements of 8 bits before a FIFO of three 32-bit slices,
    joined as a sliced stream through both blocks' ``slice_ports`` faces: each slice is
    written on its own copy of the converter's valid register; with random stalls the
    sequence survives (a copy out of step with the others would write a slice early or
    late)."""
    from amaranth.back import verilog  # noqa: PLC0415

    from hwgen.rtl_templates import fifo  # noqa: PLC0415
    t = QType(8, True)
    p0, fp0 = DWCParams(8, 4, 12, 48), fifo.FIFOParams(96, 4, 4)
    widths = fp0.slice_widths
    p, fp = dwc.slice_ports(p0, "o", widths), fifo.slice_ports(fp0, "i", widths)
    assert (p.valid_copies, fp.in_slice_ports) == (3, True)
    assert dwc.slice_ports(p0, "i", widths) is None
    assert dwc.slice_ports(DWCParams(8, 12, 12, 48), "o", widths) is None
    text = verilog.convert(DWC(p), name="dwc", emit_src=False)
    assert len(set(re.findall(r"reg valid_c_(\d+) ", text))) == 3
    x = np.random.default_rng(3).integers(t.lo, t.hi + 1, size=(5, 48))
    for kw in ({}, dict(stall_in=0.3, stall_out=0.4, seed=5)):
        r = run_block([DWC(p), fifo.StreamFIFO(fp)], x, t, 4, t, 12, 48, **kw)
        assert np.array_equal(r.frames, x)


def test_dwc_rejects_bad_sizes():
    with pytest.raises(ValueError):
        DWC(DWCParams(8, 4, 6, 20))      # 6 does not divide 20
    with pytest.raises(ValueError):
        DWC(DWCParams(8, 0, 2, 4))
    with pytest.raises(ValueError):
        DWC(DWCParams(8, 4, 6, 24, capacity=5))
    assert dwc.capacity(4, 6) == 4 + 6 + 4 - 2
    assert dwc.capacity(5, 5) == 0
    c = dwc.cost(DWCParams(8, 5, 5, 10))
    assert (c.cycles, c.latency, c.registers) == (2, 2, 0)
