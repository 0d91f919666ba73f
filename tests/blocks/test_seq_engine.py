"""The layer-sequential engine (``rtl_templates/seq_engine.py``): RTL == the layers' golden
functions in sequence, on random chains of the layer kinds it runs (convolution with padding,
stride and dilation, depthwise convolution, pointwise, global average pooling, fully
connected), with signed and unsigned tensors, per-tensor and per-channel requantizers and
average pooling's zero point before the rounding; the cycle model exact against simulation;
the layers it refuses.
"""
from __future__ import annotations

import numpy as np
import pytest

from hwgen.rtl_templates.gap import GAPParams
from hwgen.rtl_templates.mvau import MVAUParams
from hwgen.rtl_templates.quant import INT8, UINT8, Requant, make_requant
from hwgen.rtl_templates.seq_engine import (
    SeqEngine,
    SeqEngineParams,
    SeqLayer,
    cost,
    geometry,
    golden,
    timing,
)
from hwgen.rtl_templates.swg import SWGParams
from hwgen.rtl_templates.vvau import VVAUParams
from hwgen.sim.harness import run_block


def _rq(rng, n: int, per_channel: bool, out, zp: int, scale: float, zp_first=False):
    m = rng.uniform(0.5, 1.5, size=n if per_channel else 1) * scale
    rq = make_requant(m, zp, out.lo, out.hi)
    if zp_first:
        rq = Requant(rq.mult, rq.shift, rq.zero_point, rq.lo, rq.hi, True)
    return rq


def _scale(taps: int) -> float:
    """A requantizer scale that spreads a sum of ``taps`` random products over the output
    type (products of about 100 × 73 and random signs)."""
    return 50.0 / (100 * 73 * np.sqrt(taps))


def _conv(rng, name, shape, oc, kernel, stride, pads, dil, in_t, out_t, zp, per_channel):
    H, W, C = shape
    swg = SWGParams((H, W, C), kernel, stride, pads, zp if in_t is UINT8 else 0, in_t,
                    dilation=dil)
    oh, ow = swg.out_shape
    k = kernel[0] * kernel[1] * C
    w = rng.integers(-127, 128, size=(oc, k))
    b = rng.integers(-3000, 3000, size=oc)
    unit = MVAUParams(w, b, _rq(rng, oc, per_channel, out_t, 5 if out_t is INT8 else 0,
                                _scale(k)), in_t, out_t, vectors=oh * ow)
    return SeqLayer(name, unit, swg), (oh, ow, oc)


def _dw(rng, name, shape, t, per_channel):
    H, W, C = shape
    swg = SWGParams((H, W, C), (3, 3), (1, 1), (1, 1, 1, 1), 0, t, depthwise=True)
    oh, ow = swg.out_shape
    unit = VVAUParams(rng.integers(-127, 128, size=(C, 9)), rng.integers(-500, 500, size=C),
                      _rq(rng, C, per_channel, t, 0, _scale(9)), t, t,
                      pixels=oh * ow)
    return SeqLayer(name, unit, swg), (oh, ow, C)


def _pw(rng, name, shape, oc, in_t, out_t, per_channel):
    H, W, C = shape
    unit = MVAUParams(rng.integers(-127, 128, size=(oc, C)), rng.integers(-900, 900, size=oc),
                      _rq(rng, oc, per_channel, out_t, 0, _scale(C)), in_t, out_t,
                      vectors=H * W)
    return SeqLayer(name, unit, None), (H, W, oc)


def _gap(rng, name, shape, t, zp_in):
    H, W, C = shape
    rq = _rq(rng, C, False, t, 3, 1.0 / (H * W), zp_first=True)
    return SeqLayer(name, GAPParams(C, H * W, rq, t, t, in_zero_point=zp_in), None), (1, 1, C)


def chain(seed: int, signed_mid: bool = False, per_channel: bool = True):
    """A small DS-CNN-like chain: conv (stride, padding, dilation), depthwise, pointwise,
    global average, fully connected."""
    rng = np.random.default_rng(seed)
    mid = INT8 if signed_mid else UINT8
    layers = []
    l0, s = _conv(rng, "conv", (7, 5, 2), 4, (3, 2), (2, 1), (1, 0, 2, 1), (1, 2), UINT8, mid,
                  17, per_channel)
    layers.append(l0)
    l1, s = _dw(rng, "dw", s, mid, per_channel)
    layers.append(l1)
    l2, s = _pw(rng, "pw", s, 6, mid, UINT8, per_channel)
    layers.append(l2)
    l3, s = _gap(rng, "gap", s, UINT8, 0)
    layers.append(l3)
    l4, s = _pw(rng, "fc", s, 3, UINT8, INT8, per_channel)
    layers.append(l4)
    return SeqEngineParams(tuple(layers))


def _run(p: SeqEngineParams, x, **kw):
    return run_block(SeqEngine(p), x, p.in_type, 1, p.out_type, 1, p.out_elements,
                     name="seq_top", **kw)


@pytest.mark.parametrize("seed,signed_mid,per_channel", [(0, False, True), (1, True, False),
                                                          (2, True, True)])
def test_engine_equals_the_layers_goldens(seed, signed_mid, per_channel):
    p = chain(seed, signed_mid, per_channel)
    rng = np.random.default_rng(seed + 10)
    x = rng.integers(p.in_type.lo, p.in_type.hi + 1, size=(2, p.in_elements))
    want = golden(p, x)
    assert want.shape == (2, p.out_elements)
    assert len(np.unique(want)) > 1
    run = _run(p, x)
    assert np.array_equal(run.frames, want)
    # the cycle model: input every cycle, output always ready
    r = run.result
    first, last = timing(p, r.in_times[0], r.in_times[p.in_elements - 1])
    assert r.out_times[0] == first and r.out_times[p.out_elements - 1] == last
    assert r.in_times[p.in_elements] - r.in_times[0] == cost(p).cycles


@pytest.mark.sim
def test_engine_with_stalls():
    p = chain(3)
    x = np.random.default_rng(4).integers(0, 256, size=(2, p.in_elements))
    run = _run(p, x, stall_in=0.3, stall_out=0.5, seed=5)
    assert np.array_equal(run.frames, golden(p, x))


def test_layers_the_engine_refuses():
    rng = np.random.default_rng(0)
    layer, _ = _pw(rng, "pw", (2, 1, 4), 4, UINT8, UINT8, True)
    folded = SeqLayer("pw", MVAUParams(layer.unit.weights, layer.unit.bias, layer.unit.requant,
                                       UINT8, UINT8, pe=2, vectors=2))
    with pytest.raises(ValueError, match="PE = SIMD = 1"):
        geometry(folded)
    a, _ = _pw(rng, "a", (2, 1, 4), 4, UINT8, UINT8, True)
    b, _ = _pw(rng, "b", (3, 1, 4), 4, UINT8, UINT8, True)
    with pytest.raises(ValueError, match="does not take"):
        SeqEngineParams((a, b))


def _single(kind: str, seed: int) -> SeqEngineParams:
    rng = np.random.default_rng(seed)
    if kind == "conv":      # stride 2, uneven padding, dilation, signed output
        layer, _ = _conv(rng, "c", (6, 7, 3), 5, (2, 3), (2, 2), (0, 2, 1, 1), (2, 1), UINT8,
                         INT8, 9, True)
    elif kind == "dw":
        layer, _ = _dw(rng, "d", (4, 3, 5), INT8, True)
    elif kind == "pw":
        layer, _ = _pw(rng, "p", (3, 2, 7), 4, INT8, UINT8, False)
    else:
        layer, _ = _gap(rng, "g", (3, 4, 6), UINT8, 11)
    return SeqEngineParams((layer,))


@pytest.mark.parametrize("kind", ["conv", "dw", "pw", "gap"])
def test_single_layer_engines(kind):
    """Each layer kind alone: every output element of the layer itself is compared."""
    p = _single(kind, 7)
    x = np.random.default_rng(8).integers(p.in_type.lo, p.in_type.hi + 1,
                                          size=(2, p.in_elements))
    want = golden(p, x)
    assert len(np.unique(want)) > 3
    assert np.array_equal(_run(p, x).frames, want)
