"""Grid tests of the depthwise vector–vector unit (rtl_templates/vvau.py).

The unit is fed window streams in the sliding-window generator's depthwise order, built here
with NumPy from random images (padding with the input zero point). For a grid of image
shapes, kernel sizes, strides, paddings, PE, int8/uint8 in and out, per-tensor and
per-channel requantization (with a Relu clamp, weight zero points and large biases) the
unit must

* be bit-exact against :func:`rtl_templates.vvau.golden` over several frames streamed back to
  back, with and without random valid/ready stalls, in Amaranth's simulator and (a subset)
  in Verilator;
* match its cost model: frame interval ``cost.cycles`` and latency ``cost.latency`` within
  2 %, one input beat per cycle;

(also with a channel multiplier: M outputs per input channel, and with SIMD kernel positions
per beat: an adder tree over them), and the golden model must
agree with an independent computation of the depthwise convolution: a direct int64 loop
over the image, and onnxruntime's float Conv (group = C), which is exact here because every
sum stays below 2**24.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import zlib

import numpy as np
import pytest

from hwgen.rtl_templates.quant import INT8, UINT8, QType, Requant, make_requant
from hwgen.rtl_templates.requant import RequantPipeline
from hwgen.rtl_templates.vvau import (
    VVAU,
    VVAUParams,
    cost,
    golden,
    stream_to_windows,
    timing,
    windows_to_stream,
)
from hwgen.sim.harness import run_block

N_FRAMES = 4


# ---------------------------------------------------------------------------- windows

def out_size(h: int, k: int, stride: int, pad: int) -> int:
    return (h + 2 * pad - k) // stride + 1


def image_windows(x: np.ndarray, kh: int, kw: int, stride: int, pad: int,
                  pad_value: int) -> np.ndarray:
    """A NumPy sliding-window generator: images ``x`` [N, H, W, C] → windows
    [N, OH*OW, C, KH*KW] (kernel positions in raster order), pads filled with ``pad_value``."""
    n, h, w, c = x.shape
    xp = np.full((n, h + 2 * pad, w + 2 * pad, c), pad_value, dtype=np.int64)
    xp[:, pad:pad + h, pad:pad + w] = x
    oh, ow = out_size(h, kh, stride, pad), out_size(w, kw, stride, pad)
    win = np.empty((n, oh * ow, c, kh * kw), dtype=np.int64)
    for i in range(oh):
        for j in range(ow):
            patch = xp[:, i * stride:i * stride + kh, j * stride:j * stride + kw]  # N,KH,KW,C
            win[:, i * ow + j] = patch.reshape(n, kh * kw, c).transpose(0, 2, 1)
    return win


# ---------------------------------------------------------------------------- grid

@dataclasses.dataclass(frozen=True)
class Cfg:
    c: int
    h: int
    w: int
    kh: int
    kw: int
    stride: int
    pad: int
    pe: int
    in_type: QType
    out_type: QType
    per_channel: bool = False
    relu: bool = False
    weight_zp: bool = False
    big_bias: bool = False
    mult: int = 1                    # channel multiplier: outputs per input channel
    simd: int = 1                    # kernel positions per beat

    @property
    def id(self) -> str:
        flags = "".join(f for f, on in (("-pc", self.per_channel), ("-relu", self.relu),
                                         ("-wzp", self.weight_zp), ("-bigb", self.big_bias),
                                         (f"-m{self.mult}", self.mult > 1),
                                         (f"-simd{self.simd}", self.simd > 1))
                        if on)
        return (f"c{self.c}-{self.h}x{self.w}-k{self.kh}x{self.kw}-s{self.stride}p{self.pad}"
                f"-pe{self.pe}-{self.in_type.name}-{self.out_type.name}{flags}")

    @property
    def pixels(self) -> int:
        return (out_size(self.h, self.kh, self.stride, self.pad)
                * out_size(self.w, self.kw, self.stride, self.pad))

    @property
    def seed(self) -> int:
        return zlib.crc32(self.id.encode())

    @functools.cached_property
    def z_in(self) -> int:
        rng = np.random.default_rng(self.seed + 7)
        t = self.in_type
        return int(rng.integers(t.lo + (t.hi - t.lo) // 4, t.hi - (t.hi - t.lo) // 4))

    @functools.cached_property
    def params(self) -> VVAUParams:
        return random_params(self)

    def images(self, n: int, seed: int) -> np.ndarray:
        """``n`` random images [N, H, W, C]; the first two all-lo and all-hi."""
        rng = np.random.default_rng(self.seed + seed)
        t = self.in_type
        x = rng.integers(t.lo, t.hi + 1, size=(n, self.h, self.w, self.c))
        if n >= 3:
            x[0], x[1] = t.lo, t.hi
        return x.astype(np.int64)

    def windows(self, images: np.ndarray) -> np.ndarray:
        return image_windows(images, self.kh, self.kw, self.stride, self.pad, self.z_in)

    def frames(self, n: int, seed: int) -> np.ndarray:
        return windows_to_stream(self.windows(self.images(n, seed)), self.pe)


def random_params(cfg: Cfg) -> VVAUParams:
    """Random depthwise weights (int8, or uint8 minus a weight zero point), a bias with the
    input zero point folded in (as the importer folds it), and requantizer multipliers
    calibrated on random windows so that the outputs spread over the output range."""
    rng = np.random.default_rng(cfg.seed)
    C, K, CO = cfg.c, cfg.kh * cfg.kw, cfg.c * cfg.mult
    if cfg.weight_zp:
        w_zp = int(rng.integers(0, 64) if rng.random() < 0.5 else rng.integers(192, 256))
        weights = rng.integers(0, 256, size=(CO, K)) - w_zp
        weights.flat[0], weights.flat[-1] = -w_zp, 255 - w_zp
    else:
        weights = rng.integers(-128, 128, size=(CO, K))
    weights = weights.astype(np.int64)
    t = cfg.in_type
    x_rms = math.sqrt((t.lo ** 2 + t.lo * t.hi + t.hi ** 2) / 3)
    typ = max(1.0, math.sqrt(K) * float(np.sqrt(np.mean(weights.astype(float) ** 2))) * x_rms)
    if cfg.big_bias:
        b = rng.integers(-(1 << 20), 1 << 20, size=CO)
        b[0] = (1 << 20) - 1
    else:
        b = rng.integers(-int(typ), int(typ) + 1, size=CO)
    bias = b.astype(np.int64) - cfg.z_in * weights.sum(axis=1)

    o = cfg.out_type
    lo, hi = o.lo, o.hi
    span = hi - lo
    if cfg.relu:
        zp = int(rng.integers(lo, lo + span // 4 + 1))
        lo = zp
    else:
        zp = int(rng.integers(lo + span // 4, hi - span // 4 + 1))
    dummy = Requant(mult=(1,), shift=0, zero_point=zp, lo=lo, hi=hi)
    p0 = VVAUParams(weights=weights, bias=bias, requant=dummy, in_type=t, out_type=o,
                    pe=cfg.pe, pixels=cfg.pixels, multiplier=cfg.mult, simd=cfg.simd)
    xs = np.repeat(rng.integers(t.lo, t.hi + 1, size=(256, C, K)), cfg.mult, axis=1)
    acc = (xs * weights).sum(axis=-1) + bias                       # [256, C*M]
    room = max(hi - zp, zp - lo, 1)
    if cfg.per_channel:
        spread = np.logspace(-1.3, 0.7, CO) if CO > 1 else np.ones(1)
        rng.shuffle(spread)
        mult = room / (np.percentile(np.abs(acc), 75, axis=0) + 1.0) * spread
    else:
        mult = room / (float(np.percentile(np.abs(acc), 75)) + 1.0)
    return dataclasses.replace(p0, requant=make_requant(mult, zp, lo, hi))


GRID = [
    Cfg(4, 5, 5, 3, 3, 1, 1, 1, INT8, INT8),                                 # PE=1, same pad
    Cfg(8, 4, 4, 3, 3, 1, 1, 2, UINT8, UINT8, per_channel=True, relu=True),
    Cfg(6, 6, 6, 3, 3, 2, 1, 6, INT8, UINT8, per_channel=True),              # PE=C, stride 2
    Cfg(3, 7, 5, 5, 5, 1, 2, 3, UINT8, INT8, weight_zp=True),                # 5x5, odd shape
    Cfg(12, 4, 4, 1, 1, 1, 0, 4, INT8, INT8, per_channel=True, big_bias=True),  # K=1
    Cfg(1, 6, 6, 3, 3, 1, 0, 1, UINT8, UINT8),                               # C=1, no pad
    Cfg(10, 3, 5, 3, 1, 1, 1, 5, INT8, INT8, per_channel=True, weight_zp=True),  # 3x1 kernel
    Cfg(16, 3, 3, 3, 3, 1, 1, 4, UINT8, INT8, big_bias=True),
    Cfg(4, 3, 3, 3, 3, 1, 0, 2, INT8, UINT8, relu=True),                     # one pixel
    Cfg(2, 4, 6, 2, 2, 2, 0, 1, UINT8, INT8, per_channel=True),              # 2x2 stride 2
    Cfg(4, 5, 5, 3, 3, 1, 1, 2, UINT8, INT8, per_channel=True, mult=2),      # multiplier 2
    Cfg(3, 4, 4, 3, 3, 2, 1, 1, INT8, UINT8, relu=True, mult=3),             # multiplier 3
    # SIMD kernel positions per beat (adder tree over them)
    Cfg(4, 5, 5, 3, 3, 1, 1, 2, INT8, INT8, per_channel=True, simd=3),
    Cfg(8, 4, 4, 3, 3, 1, 1, 8, UINT8, UINT8, relu=True, simd=9),           # whole window
    Cfg(3, 7, 5, 5, 5, 1, 2, 1, UINT8, INT8, weight_zp=True, simd=5),
    Cfg(4, 5, 5, 3, 3, 2, 1, 2, UINT8, INT8, per_channel=True, mult=2, simd=9),
    Cfg(6, 4, 6, 2, 2, 2, 0, 3, INT8, UINT8, big_bias=True, simd=4),        # K = SIMD = 4
]
VL_GRID = [GRID[6], GRID[13]]    # one build each (~40 s cold on a busy machine; cached afterwards)


def _ids(cfgs):
    return [c.id for c in cfgs]


def _run(cfg: Cfg, x: np.ndarray, simulator: str = "amaranth", **kw):
    p = cfg.params
    return run_block(VVAU(p), x, p.in_type, p.in_per_beat, p.out_type, p.lanes, p.out_elements,
                     simulator=simulator, name="vvau_top", **kw)


def _check_outputs(cfg: Cfg, x: np.ndarray, run) -> None:
    p = cfg.params
    want = golden(p, x)
    got = run.frames
    assert got.shape == want.shape
    if not np.array_equal(got, want):
        bad = np.argwhere(got != want)
        f, e = bad[0]
        raise AssertionError(f"{len(bad)} of {want.size} outputs differ; first at frame {f} "
                             f"element {e}: got {got[f, e]}, golden {want[f, e]}")
    nb = p.nb * p.pixels
    assert run.result.out_last == [(k % nb) == nb - 1 for k in range(len(x) * nb)]
    assert len(run.result.in_times) == len(x) * p.in_elements // p.in_per_beat


def _check_cycles(cfg: Cfg, x: np.ndarray, run) -> None:
    p = cfg.params
    c = cost(p)
    steps = p.pixels * p.kernel_beats * p.nb
    assert c.cycles == steps
    per = p.pixels * p.nb
    ends = run.frame_ends(per)
    for a, b in zip(ends, ends[1:]):
        assert abs((b - a) - c.cycles) <= 0.02 * c.cycles, f"interval {b - a} vs {c.cycles}"
    assert abs(run.latency - c.latency) <= 0.02 * c.latency, \
        f"latency {run.latency} vs cost model {c.latency}"
    t0 = run.result.in_times[0]
    assert run.result.in_times == list(range(t0, t0 + len(x) * steps)), \
        "the unit must take one input beat per cycle"
    first, _ = timing(p, t0, t0 + steps - 1)
    assert run.result.out_times[0] == first


def _assert_meaningful(cfg: Cfg, y: np.ndarray) -> None:
    rq = cfg.params.requant
    inside = (y > rq.lo) & (y < rq.hi)
    assert inside.mean() >= 0.2, f"only {inside.mean():.0%} of the outputs are unsaturated"
    if y.size >= 6:
        assert len(np.unique(y)) >= 3


# ---------------------------------------------------------------------------- tests

@pytest.mark.sim
@pytest.mark.parametrize("cfg", GRID, ids=_ids(GRID))
def test_golden_and_cycles_amaranth(cfg: Cfg):
    x = cfg.frames(N_FRAMES, seed=1)
    _assert_meaningful(cfg, golden(cfg.params, x[2:]))
    run = _run(cfg, x)
    _check_outputs(cfg, x, run)
    _check_cycles(cfg, x, run)


@pytest.mark.sim
@pytest.mark.parametrize("cfg", GRID, ids=_ids(GRID))
def test_stalls_amaranth(cfg: Cfg):
    x = cfg.frames(N_FRAMES, seed=2)
    _check_outputs(cfg, x, _run(cfg, x, stall_in=0.3, stall_out=0.4, seed=3))


@pytest.mark.verilator
@pytest.mark.parametrize("cfg", VL_GRID, ids=_ids(VL_GRID))
def test_verilator(cfg: Cfg):
    """One build per configuration: cycle-exact run, then random stalls."""
    x = cfg.frames(N_FRAMES, seed=1)
    run = _run(cfg, x, simulator="verilator")
    _check_outputs(cfg, x, run)
    _check_cycles(cfg, x, run)
    for seed in (1, 2):
        x = cfg.frames(2 * N_FRAMES, seed=10 + seed)
        _check_outputs(cfg, x, _run(cfg, x, simulator="verilator", stall_in=0.3,
                                    stall_out=0.4, seed=seed))


def test_output_backpressure_only():
    """A slow sink (ready 1 cycle in 4), an always-valid source and a unit that completes an
    output beat on every step (K = 1, PE = C): the credits must stop the issue in time."""
    cfg = Cfg(4, 3, 3, 1, 1, 1, 0, 4, INT8, INT8, per_channel=True)
    x = cfg.frames(6, seed=4)
    _check_outputs(cfg, x, _run(cfg, x, stall_out=0.75, seed=5))


# ---------------------------------------------------------------------------- semantics

def _direct_depthwise(cfg: Cfg, images: np.ndarray) -> np.ndarray:
    """int64 depthwise convolution straight from the image (no window stream):
    acc[n, oh, ow, c] = sum_{i,j} w[c, i*KW+j] * (x_pad[n, oh*s+i, ow*s+j, c] - z_in)."""
    p = cfg.params
    n, h, w, c = images.shape
    xp = np.zeros((n, h + 2 * cfg.pad, w + 2 * cfg.pad, c), dtype=np.int64)
    xp[:, cfg.pad:cfg.pad + h, cfg.pad:cfg.pad + w] = images - cfg.z_in
    oh, ow = out_size(h, cfg.kh, cfg.stride, cfg.pad), out_size(w, cfg.kw, cfg.stride, cfg.pad)
    acc = np.zeros((n, oh, ow, c * cfg.mult), dtype=np.int64)
    for i in range(cfg.kh):
        for j in range(cfg.kw):
            sl = xp[:, i:i + cfg.stride * (oh - 1) + 1:cfg.stride,
                    j:j + cfg.stride * (ow - 1) + 1:cfg.stride]
            # output channel c*M + m reads input channel c
            acc += np.repeat(sl, cfg.mult, axis=-1) * p.weights[:, i * cfg.kw + j]
    return acc


def _ort_depthwise(cfg: Cfg, images: np.ndarray) -> np.ndarray:
    """onnxruntime's float32 Conv with group = C on the integer values (exact: |sum| < 2**24)."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    p = cfg.params
    n, h, w, c = images.shape
    wt = p.weights.reshape(c * cfg.mult, 1, cfg.kh, cfg.kw).astype(np.float32)
    oh, ow = out_size(h, cfg.kh, cfg.stride, cfg.pad), out_size(w, cfg.kw, cfg.stride, cfg.pad)
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], group=c, kernel_shape=[cfg.kh, cfg.kw],
                          strides=[cfg.stride] * 2, pads=[cfg.pad] * 4)],
        "dw", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, c, h, w])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, c * cfg.mult, oh, ow])],
        [numpy_helper.from_array(wt, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    xf = (images - cfg.z_in).transpose(0, 3, 1, 2).astype(np.float32)
    y = sess.run(None, {"x": xf})[0]
    return np.rint(y).astype(np.int64).transpose(0, 2, 3, 1)


@pytest.mark.parametrize("cfg", GRID, ids=_ids(GRID))
def test_golden_is_depthwise_convolution(cfg: Cfg):
    p = cfg.params
    images = cfg.images(5, seed=9)
    y = golden(p, cfg.frames(5, seed=9))                            # [N, pixels*C]
    acc = _direct_depthwise(cfg, images)                            # [N, OH, OW, C]
    # the input zero point correction lives in the bias (b = b_q - z_in * sum(w))
    b_q = p.bias + cfg.z_in * p.weights.sum(axis=1)
    want = p.requant.apply(acc + b_q, channel_axis=-1).reshape(len(images), -1)
    assert np.array_equal(y, want)
    k_max = np.abs(p.weights).sum(axis=1).max() * max(abs(cfg.in_type.lo - cfg.z_in),
                                                      abs(cfg.in_type.hi - cfg.z_in))
    assert k_max < 1 << 24  # float32 is exact on every partial sum
    assert np.array_equal(_ort_depthwise(cfg, images), acc)


def test_stream_layout():
    """(pixel, cb, k, ci) order, and the inverse."""
    win = np.arange(2 * 3 * 6 * 4).reshape(2, 3, 6, 4)             # N, pixels, C, K
    s = windows_to_stream(win, 2)
    assert s.shape == (2, 3 * 6 * 4)
    # pixel 1, channel block 2, kernel position 3, lane 1 → channel 5
    assert s[1, ((1 * 3 + 2) * 4 + 3) * 2 + 1] == win[1, 1, 5, 3]
    assert np.array_equal(stream_to_windows(s, 3, 6, 4, 2), win)


def test_params_reject_bad_values():
    p = GRID[1].params                                              # C = 8
    for pe in (0, 3, 16):
        with pytest.raises(ValueError):
            dataclasses.replace(p, pe=pe)
    with pytest.raises(ValueError):
        dataclasses.replace(p, pixels=0)
    with pytest.raises(ValueError):
        dataclasses.replace(p, requant=dataclasses.replace(p.requant, mult=(1, 2, 3)))
    with pytest.raises(ValueError):
        dataclasses.replace(p, bias=p.bias[:3])
    assert dataclasses.replace(p, pe=8).nb == 1


def test_cost_formulas():
    p = GRID[3].params                                              # C=3, K=25, PE=3
    c = cost(p)
    assert c.cycles == p.pixels * 25 * 1
    assert c.latency == c.cycles + 9 + RequantPipeline.depth(p.requant, p.acc_bits,
                                                              spacing=p.kernel)
    assert c.multipliers == 2 * 3
    assert c.memory_bits >= 25 * 3 * p.w_bits
    p = GRID[11].params                                             # C=3, M=3, K=9, PE=1
    c = cost(p)
    assert (p.channels, p.out_channels, p.lanes, p.nb) == (3, 9, 3, 3)
    assert c.cycles == p.pixels * 9 * 3                             # as with M = 1
    assert c.multipliers == 2 * 3
    assert c.memory_bits >= 9 * 9 * p.w_bits
    p = GRID[15].params                                             # C=4, M=2, K=9, PE=2, SIMD=9
    c = cost(p)
    assert (p.kernel_beats, p.in_per_beat, p.nb) == (1, 18, 2)
    assert c.cycles == p.pixels * 1 * 2
    rq = RequantPipeline.multiplies(p.requant, p.acc_bits, 4, spacing=1)
    assert c.multipliers == 4 * 9 + len(rq)                         # lanes x SIMD, requantizers
