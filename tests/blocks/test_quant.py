"""The requantizer: integer golden == float32 arithmetic of onnxruntime's kernels, and the
hardware stage == golden, including values that the float32 product turns into ties."""
from __future__ import annotations

import numpy as np
import pytest
from amaranth.hdl import Module, Signal, signed
from amaranth.sim import Simulator

from hwgen.rtl_templates.quant import QType, make_requant, range_type, signed_width
from hwgen.rtl_templates.requant import requant_stages, round_clamp


def _f32_reference(acc, scale, zp, lo, hi):
    y = np.rint(np.float32(acc) * np.float32(scale)).astype(np.int64) + zp
    return np.clip(y, lo, hi)


@pytest.mark.parametrize("seed", range(4))
def test_golden_equals_float32_arithmetic(seed):
    rng = np.random.default_rng(seed)
    scales = rng.uniform(1e-5, 3e-2, 16).astype(np.float32)
    rq = make_requant(scales, 7, -128, 127)
    acc = rng.integers(-(1 << 23), 1 << 23, (4000, 16))
    acc[:, 0] = rng.integers(-20000, 20000, 4000)
    got = rq.apply(acc)
    want = _f32_reference(acc, scales[None, :], 7, -128, 127)
    assert np.array_equal(got, want)


def test_float32_product_ties_round_like_onnxruntime():
    """Accumulators whose exact product is not a tie but whose float32 product is (or
    crosses one): the golden requantizer follows float32, as onnxruntime does."""
    rng = np.random.default_rng(11)
    found = 0
    for _ in range(20):
        scale = np.float32(rng.uniform(1e-3, 1e-2))
        rq = make_requant(scale, 0, -(1 << 20), 1 << 20)
        acc = np.arange(1, 1 << 21, dtype=np.int64)
        f32 = np.float32(acc) * scale
        tie = (f32 - np.floor(f32)) == 0.5
        exact_tie = (acc * rq.mult[0]) % (1 << rq.shift) == (1 << (rq.shift - 1))
        cases = acc[tie & ~exact_tie][:50]
        found += cases.size
        assert np.array_equal(rq.apply(cases), _f32_reference(cases, scale, 0, -(1 << 20), 1 << 20))
    assert found > 100


def test_range_type():
    assert range_type(0, 255) == QType(8, False)
    assert range_type(-128, 127) == QType(8, True)
    assert range_type(-129, 0) == QType(9, True)
    assert signed_width(-128, 127) == 8 and signed_width(0, 128) == 9


def _run_pipeline(m, p, y, values, stages):
    """Feed ``values`` into ``p`` one per clock; the results, ``stages`` clocks later."""
    got = []

    async def bench(ctx):
        for a in list(values) + [0] * stages:
            ctx.set(p, a)
            await ctx.tick()
            got.append(ctx.get(y))

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return got[stages - 1:stages - 1 + len(values)]


def test_hardware_stage_equals_golden():
    rng = np.random.default_rng(5)
    scale = np.float32(0.0027427638)
    rq = make_requant(scale, 3, 0, 255)
    accs = [8568, -8568, 0, 1, -1] + [int(v) for v in rng.integers(-(1 << 20), 1 << 20, 300)]
    acc_w = 22
    p = Signal(signed(acc_w + rq.mult_bits + 1))
    m = Module()
    y = round_clamp(m, p, rq, "y")
    got = _run_pipeline(m, p, y, [a * rq.mult[0] for a in accs], requant_stages(rq))
    assert got == list(rq.apply(np.array(accs)))


@pytest.mark.parametrize("zp", [143, -7, 0, 1])
def test_zero_point_first_form(zp):
    """onnxruntime's average pooling: y = rint(fl32(fl32(acc*m) + zp)); golden and hardware."""
    import dataclasses
    lo, hi = (-128, 127) if zp < 0 else (0, 255)
    rq = dataclasses.replace(make_requant(np.float32(0.25 * 0.37), zp, lo, hi), zp_first=True)
    rng = np.random.default_rng(zp & 0xff)
    accs = [int(v) for v in rng.integers(-3000, 3000, 400)] + [2, 6, -2, 10, 14]
    ref = np.rint(np.float32(np.float32(np.array(accs, np.float32)
                                        * np.float32(rq.mult[0] / 2 ** rq.shift))
                             + np.float32(zp)))
    assert np.array_equal(rq.apply(np.array(accs)), np.clip(ref, lo, hi).astype(np.int64))
    p = Signal(signed(14 + rq.mult_bits + 1))
    m = Module()
    y = round_clamp(m, p, rq, "y")
    got = _run_pipeline(m, p, y, [a * rq.mult[0] for a in accs], requant_stages(rq))
    assert got == list(rq.apply(np.array(accs)))
