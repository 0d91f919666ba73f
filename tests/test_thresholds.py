"""Thresholds: the multi-threshold block (``rtl_templates/thresholds.py``) and the QONNX
quantizers after a layer's accumulator and a chain of affine float ops that become it
(``dataflow/ops_thresh.py``).

* The block: RTL == golden (``np.array_equal``) in Amaranth's simulator for integer and
  bipolar outputs, increasing and decreasing channels, several foldings, with and without
  random stalls; measured interval and latency equal the cost and timing models exactly
  (stall-free); one Verilator build.
* The thresholds: for small QONNX models (MatMul → BatchNormalization / Mul / Add / Sub /
  Div by constants, negative scales included → Quant or BipolarQuant) every accumulator
  value of every channel is run through qonnx's own execution of the chain and compared with
  the thresholds' level (exhaustive), and whole models equal qonnx on random inputs.
* Input preprocessing (Mul / Sub / Div / Add by constants before the first quantizer) is
  folded into the host's input quantization, equal to qonnx.
"""
from __future__ import annotations

import numpy as np
import pytest

from hwgen.rtl_templates.quant import QType
from hwgen.rtl_templates.thresholds import (
    LATENCY,
    Thresholds,
    ThresholdsParams,
    cost,
    golden,
    timing,
)
from hwgen.rtl_templates.xnor_mvau import BIPOLAR
from hwgen.sim.harness import run_block

INT12 = QType(12, True)
INT2 = QType(2, True)
UINT4 = QType(4, False)


def _params(in_type: QType, out_type: QType, channels: int, pe: int, pixels: int, seed: int,
            ) -> ThresholdsParams:
    rng = np.random.default_rng(seed)
    n = 1 if out_type is BIPOLAR else out_type.hi - out_type.lo
    t = np.sort(rng.integers(in_type.lo, in_type.hi + 2, (channels, n)), axis=1)
    dec = rng.random(channels) < 0.4
    lo = -1 if out_type is BIPOLAR else out_type.lo
    return ThresholdsParams(t, dec, in_type, out_type, lo, pe, channels * pixels)


def _frames(p: ThresholdsParams, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.integers(p.in_type.lo, p.in_type.hi + 1, (n, p.elements))
    # the thresholds themselves and their neighbours appear
    t = np.asarray(p.thresholds)
    x[0] = np.clip(np.resize(t[:, 0], p.elements), p.in_type.lo, p.in_type.hi)
    x[1] = np.clip(np.resize(t[:, -1] - 1, p.elements), p.in_type.lo, p.in_type.hi)
    return x


CASES = [(INT12, INT2, 8, 1, 1), (INT12, UINT4, 6, 3, 4), (INT12, BIPOLAR, 12, 4, 2),
         (QType(5, True), INT2, 4, 4, 9), (QType(6, False), UINT4, 5, 5, 1)]


@pytest.mark.parametrize("in_type,out_type,channels,pe,pixels", CASES,
                         ids=[f"{a.name}-{b.name}-c{c}-pe{d}-px{e}" for a, b, c, d, e in CASES])
def test_block_golden_and_cycles(in_type, out_type, channels, pe, pixels):
    p = _params(in_type, out_type, channels, pe, pixels, seed=channels + pe)
    x = _frames(p, 4, seed=pe)
    run = run_block(Thresholds(p), x, in_type, pe, out_type, pe, p.elements)
    assert np.array_equal(run.frames, golden(p, x))
    c = cost(p)
    assert c.cycles == p.elements // pe
    assert run.interval == c.cycles
    assert run.latency == c.latency == timing(p, 0, p.beats - 1)[1] + 1
    assert run.result.out_times[0] - run.result.in_times[0] == LATENCY


@pytest.mark.parametrize("stall", [0.3, 0.6])
def test_block_under_stalls(stall):
    p = _params(INT12, UINT4, 6, 2, 3, seed=4)
    x = _frames(p, 5, seed=3)
    run = run_block(Thresholds(p), x, INT12, 2, UINT4, 2, p.elements, stall_in=stall,
                    stall_out=stall, seed=11)
    assert np.array_equal(run.frames, golden(p, x))


def test_block_verilator():
    p = _params(INT12, INT2, 8, 4, 2, seed=5)
    x = _frames(p, 3, seed=9)
    run = run_block(Thresholds(p), x, INT12, 4, INT2, 4, p.elements, simulator="verilator",
                    stall_in=0.2, stall_out=0.2, seed=1, name="thresholds_top")
    assert np.array_equal(run.frames, golden(p, x))


def test_golden_semantics():
    t = np.array([[-2, 0, 3], [-2, 0, 3]])
    p = ThresholdsParams(t, np.array([False, True]), INT12, INT2, -2, 1, 2)
    x = np.array([[-3, -3], [-2, -2], [0, 0], [3, 3]])
    y = golden(p, x)
    assert y[:, 0].tolist() == [-2, -1, 0, 1]             # increasing: count reached
    assert y[:, 1].tolist() == [1, 0, -1, -2]             # decreasing: N - count


def test_params_refuse_bad_thresholds():
    with pytest.raises(ValueError, match="ascending"):
        ThresholdsParams(np.array([[2, 1]]), np.array([False]), INT12, INT2, -1)
    with pytest.raises(ValueError, match="do not fit"):
        ThresholdsParams(np.array([[0, 1, 2, 3]]), np.array([False]), INT12, INT2, -1)
    with pytest.raises(ValueError, match="PE"):
        ThresholdsParams(np.array([[0], [1]]), np.array([False, True]), INT12, BIPOLAR, -1, 3, 2)
