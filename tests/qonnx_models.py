"""QONNX test models built with ``onnx.helper`` (no PyTorch), as Brevitas exports them.

Quantizers are nodes of the domain ``qonnx.custom_op.general``: ``Quant`` (scale, zero point
and bit width as initializers; attributes ``signed``, ``narrow``, ``rounding_mode``),
``BipolarQuant`` and ``Trunc``. Weights are float initializers behind a ``Quant`` (per output
channel scales), biases are quantized to the accumulator grid (``Quant`` with scale = input
scale · weight scale, 16 bits), activations are ``Relu`` → ``Quant``.

All scales are powers of two, as FINN-style Brevitas quantizers make them: then the float32
arithmetic of the QONNX graph is exact and its integer results are well defined. Activation
scales are calibrated on a batch of random inputs (a small NumPy interpreter follows the
graph as it is built) so that the integer ranges are used, not saturated.

Model builders (each returns a :class:`QModel`):

* :func:`mlp` -- MatMul/Gemm layers at a given activation and weight width (4-bit, 2-bit);
* :func:`cnn` -- Conv 3×3 → Relu → Quant → MaxPool → Conv → Relu → Quant →
  GlobalAveragePool → Trunc → Flatten → MatMul → Quant, with mixed precision;
* :func:`bipolar_mlp` -- 8-bit input, bipolar weights and activations (BipolarQuant and a
  signed 1-bit Quant), 8-bit output.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

DOMAIN = "qonnx.custom_op.general"


@dataclass
class QModel:
    model: onnx.ModelProto
    batch: int                 # the model's fixed batch size
    in_shape: tuple            # per sample
    description: str


def po2_scale(amax: float, qmax: int, nearest: bool = False) -> float:
    """The smallest power of two s with amax / s <= qmax (``nearest``: the power of two
    nearest to amax / qmax in the log domain; some values saturate)."""
    amax = max(float(amax), 1e-6)
    e = np.log2(amax / qmax)
    return float(2.0 ** (np.round(e) if nearest else np.ceil(e)))


def int_range(bits: int, signed: bool, narrow: bool) -> tuple[int, int]:
    if signed:
        return -(1 << (bits - 1)) + int(narrow), (1 << (bits - 1)) - 1
    return 0, (1 << bits) - 1 - int(narrow)


def _conv(x, w, pads):
    """NumPy Conv (float64): x [N, C, H, W], w [O, C, KH, KW], pads (t, l, b, r)."""
    t, l, b, r = pads
    xp = np.pad(x, ((0, 0), (0, 0), (t, b), (l, r)))
    kh, kw = w.shape[2:]
    win = np.lib.stride_tricks.sliding_window_view(xp, (kh, kw), axis=(2, 3))
    return np.einsum("nchwij,ocij->nohw", win, w)


class Builder:
    """Adds nodes and initializers and follows the float values of a calibration batch."""

    def __init__(self, name: str, x_calib: np.ndarray, seed: int):
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.nodes: list = []
        self.inits: list = []
        self.vals = {"x": np.asarray(x_calib, np.float64)}
        self.scales: dict[str, float] = {}
        self.k = 0

    def _n(self, base: str) -> str:
        self.k += 1
        return f"{base}{self.k}"

    def init(self, arr, base: str) -> str:
        name = self._n(base)
        self.inits.append(numpy_helper.from_array(np.asarray(arr, np.float32), name))
        return name

    def node(self, op: str, inputs, base: str, domain: str = "", **attrs) -> str:
        out = self._n(base)
        self.nodes.append(helper.make_node(op, list(inputs), [out], name=out, domain=domain,
                                           **attrs))
        return out

    # ------------------------------------------------------------------ quantizers
    @staticmethod
    def fake_quant(x, scale, zp, bits, signed, narrow):
        y = np.asarray(x, np.float64) / scale + zp
        if bits == 1 and signed:
            return np.where(y >= 0, 1.0, -1.0) * scale
        lo, hi = int_range(bits, signed, narrow)
        return (np.round(np.clip(y, lo, hi)) - zp) * scale

    def quant(self, x: str, bits: int, signed: bool, narrow: bool = False, scale=None,
              zp: int = 0, pct: float = 99.5, rounding_mode: str = "ROUND") -> str:
        """Activation Quant; the scale (a power of two) is calibrated unless given."""
        v = self.vals[x]
        if scale is None:
            lo, hi = int_range(bits, signed, narrow)
            amax = np.percentile(np.abs(v), pct) if signed else np.percentile(v, pct)
            scale = po2_scale(amax, hi, nearest=True)
        out = self.node("Quant", [x, self.init(scale, "s"), self.init(zp, "z"),
                                  self.init(bits, "bw")], "q", DOMAIN, signed=int(signed),
                        narrow=int(narrow), rounding_mode=rounding_mode)
        self.vals[out] = self.fake_quant(v, scale, zp, bits, signed, narrow)
        self.scales[out] = float(scale)
        return out

    def bipolar(self, x: str, scale: float = 1.0, as_quant: bool = False) -> str:
        """Bipolar activation: BipolarQuant, or (``as_quant``) a signed 1-bit Quant."""
        if as_quant:
            out = self.node("Quant", [x, self.init(scale, "s"), self.init(0, "z"),
                                      self.init(1, "bw")], "bq", DOMAIN, signed=1, narrow=0,
                            rounding_mode="ROUND")
        else:
            out = self.node("BipolarQuant", [x, self.init(scale, "s")], "bq", DOMAIN)
        self.vals[out] = np.where(self.vals[x] >= 0, 1.0, -1.0) * scale
        self.scales[out] = float(scale)
        return out

    def weight(self, w: np.ndarray, bits: int, axis: int, narrow: bool = True,
               bipolar: str = "") -> tuple[str, np.ndarray, np.ndarray]:
        """Quantized weight initializer, per output channel along ``axis``:
        (name, dequantized value, scale per channel). ``bipolar``: "BipolarQuant" or
        "Quant1" (a signed 1-bit Quant)."""
        w = np.asarray(w, np.float32)
        red = tuple(a for a in range(w.ndim) if a != axis)
        shape = [1] * w.ndim
        shape[axis] = -1
        if bipolar:
            s = np.array([po2_scale(v, 1) for v in np.abs(w).mean(axis=red)]).reshape(shape)
            wi = self.init(w, "w")
            if bipolar == "BipolarQuant":
                out = self.node("BipolarQuant", [wi, self.init(s, "ws")], "wq", DOMAIN)
            else:
                out = self.node("Quant", [wi, self.init(s, "ws"), self.init(0, "wz"),
                                          self.init(1, "wbw")], "wq", DOMAIN, signed=1,
                                narrow=0, rounding_mode="ROUND")
            deq = np.where(w >= 0, 1.0, -1.0) * s
        else:
            _, hi = int_range(bits, True, narrow)
            s = np.array([po2_scale(v, hi) for v in np.abs(w).max(axis=red)]).reshape(shape)
            out = self.node("Quant", [self.init(w, "w"), self.init(s, "ws"), self.init(0, "wz"),
                                      self.init(bits, "wbw")], "wq", DOMAIN, signed=1,
                            narrow=int(narrow), rounding_mode="ROUND")
            deq = self.fake_quant(w, s, 0, bits, True, narrow)
        self.vals[out] = deq
        return out, deq, s.reshape(-1)

    def bias(self, b: np.ndarray, acc_scale: np.ndarray) -> tuple[str, np.ndarray]:
        """Bias on the accumulator grid: Quant(b, scale = s_in·s_w per channel, 16 bits)."""
        acc_scale = np.asarray(acc_scale, np.float32).reshape(-1)
        scale = np.broadcast_to(acc_scale, b.shape).astype(np.float32)
        out = self.node("Quant", [self.init(b, "b"), self.init(scale, "bs"), self.init(0, "bz"),
                                  self.init(16, "bbw")], "bq", DOMAIN, signed=1, narrow=0,
                        rounding_mode="ROUND")
        deq = self.fake_quant(b, scale, 0, 16, True, False)
        return out, deq

    # ------------------------------------------------------------------ layers
    def dense(self, x: str, n_out: int, bits: int, *, gemm: bool = False, bias: bool = True,
              bipolar: str = "", bias_spread: float = 0.5) -> str:
        """MatMul (+ Add) or Gemm(transB=1) with quantized weights and bias."""
        v = self.vals[x]
        n_in = v.shape[1]
        w = self.rng.standard_normal((n_out, n_in)) * np.sqrt(2.0 / n_in)
        if gemm:
            wq, wd, sw = self.weight(w, bits, 0, bipolar=bipolar)
        else:
            wq, wd, sw = self.weight(w.T, bits, 1, bipolar=bipolar)
            wd = wd.T
        acc = v @ wd.T
        acc_scale = self.scales[x] * sw
        b = None
        if bias:
            b = self.rng.uniform(-bias_spread, bias_spread, n_out) * acc.std(axis=0)
            bq, bd = self.bias(b, acc_scale)
            acc = acc + bd
        if gemm:
            out = self.node("Gemm", [x, wq] + ([bq] if bias else []), "gemm", transB=1)
        else:
            out = self.node("MatMul", [x, wq], "mm")
            if bias:
                out = self.node("Add", [out, bq], "add")
        self.vals[out] = acc
        return out

    def conv(self, x: str, n_out: int, bits: int, k: int = 3, pad: int = 1) -> str:
        v = self.vals[x]
        c = v.shape[1]
        w = self.rng.standard_normal((n_out, c, k, k)) * np.sqrt(2.0 / (c * k * k))
        wq, wd, sw = self.weight(w, bits, 0)
        acc = _conv(v, wd, (pad,) * 4)
        b = self.rng.uniform(-0.3, 0.3, n_out) * acc.std(axis=(0, 2, 3))
        bq, bd = self.bias(b, self.scales[x] * sw)
        out = self.node("Conv", [x, wq, bq], "conv", kernel_shape=[k, k], pads=[pad] * 4)
        self.vals[out] = acc + bd[None, :, None, None]
        return out

    def relu(self, x: str) -> str:
        out = self.node("Relu", [x], "relu")
        self.vals[out] = np.maximum(self.vals[x], 0)
        return out

    def maxpool(self, x: str, k: int = 2) -> str:
        v = self.vals[x]
        n, c, h, w = v.shape
        out = self.node("MaxPool", [x], "maxpool", kernel_shape=[k, k], strides=[k, k])
        self.vals[out] = v.reshape(n, c, h // k, k, w // k, k).max(axis=(3, 5))
        self.scales[out] = self.scales[x]
        return out

    def gap(self, x: str) -> str:
        out = self.node("GlobalAveragePool", [x], "gap")
        self.vals[out] = self.vals[x].mean(axis=(2, 3), keepdims=True)
        return out

    def trunc(self, x: str, scale: float, in_bits: int, out_bits: int, mode: str,
              version: int, out_scale: float | None = None, signed: bool = False,
              narrow: bool = False) -> str:
        """Trunc version 1 (x, scale, zeropt, in_bits, out_bits) or 2 (…, out_scale, out_bits)."""
        ins = [x, self.init(scale, "ts"), self.init(0, "tz"), self.init(in_bits, "tib")]
        rnd = {"ROUND": np.round, "FLOOR": np.floor, "CEIL": np.ceil}[mode]
        r = np.round(self.vals[x] / scale)
        if version == 1:
            out = self.node("Trunc", ins + [self.init(out_bits, "tob")], "trunc", DOMAIN,
                            rounding_mode=mode)
            self.vals[out] = rnd(r / 2.0 ** (in_bits - out_bits)) * scale
            self.scales[out] = scale
        else:
            out = self.node("Trunc", ins + [self.init(out_scale, "tos"),
                                            self.init(out_bits, "tob")], "trunc", DOMAIN,
                            rounding_mode=mode, signed=int(signed), narrow=int(narrow))
            lo, hi = int_range(out_bits, signed, narrow)
            ts = 2.0 ** np.round(np.log2(out_scale / scale))
            self.vals[out] = rnd(np.clip(r / ts, lo, hi)) * out_scale
            self.scales[out] = out_scale
        return out

    def flatten(self, x: str) -> str:
        out = self.node("Flatten", [x], "flatten", axis=1)
        self.vals[out] = self.vals[x].reshape(self.vals[x].shape[0], -1)
        self.scales[out] = self.scales[x]
        return out

    def build(self, out: str, batch: int, in_shape, qonnx_opset: int = 1) -> onnx.ModelProto:
        out_shape = [batch] + list(self.vals[out].shape[1:])
        # the graph output gets its own name
        final = self.node("Identity", [out], "y")
        g = helper.make_graph(
            self.nodes, self.name,
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch] + list(in_shape))],
            [helper.make_tensor_value_info(final, TensorProto.FLOAT, out_shape)], self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13),
                                                helper.make_opsetid(DOMAIN, qonnx_opset)])
        m.ir_version = 8
        onnx.checker.check_model(m)
        return m


def inputs(n: int, shape, seed: int) -> np.ndarray:
    """Random float32 inputs in [-1, 1]: noise with a random gain per sample and a random
    offset per sample and channel (so that pooled features differ between samples)."""
    rng = np.random.default_rng(seed)
    shape = tuple(shape)
    gain = rng.uniform(0.2, 0.7, (n,) + (1,) * len(shape))
    offset = rng.uniform(-0.4, 0.4, (n, shape[0]) + (1,) * (len(shape) - 1))
    x = rng.standard_normal((n,) + shape) * gain + offset
    return np.clip(x, -1, 1).astype(np.float32)


def mlp(act_bits: int, w_bits: int, sizes=(16, 24, 16, 8), batch: int = 64,
        seed: int = 0) -> QModel:
    """Input Quant (act_bits, signed) → [dense(w_bits) → Relu → Quant(act_bits, unsigned)]* →
    dense → Quant(8 bits, signed). The first layer is a MatMul + Add, the others Gemm."""
    b = Builder(f"mlp_{act_bits}b", inputs(256, (sizes[0],), seed + 100), seed)
    x = b.quant("x", act_bits, True)
    for k, n in enumerate(sizes[1:]):
        last = k == len(sizes) - 2
        x = b.dense(x, n, w_bits, gemm=k > 0)
        if last:
            x = b.quant(x, 8, True)
        else:
            x = b.quant(b.relu(x), act_bits, False)
    return QModel(b.build(x, batch, (sizes[0],)), batch, (sizes[0],),
                  f"MLP {'-'.join(map(str, sizes))}, {act_bits}-bit activations, "
                  f"{w_bits}-bit weights")


def cnn(variant: str, batch: int = 32, seed: int = 1) -> QModel:
    """``"4bit"``: 8-bit input, 4-bit weights and activations, GAP → Trunc (version 2, ROUND,
    Brevitas-style: scale s/16 → output scale s). ``"2bit"``: mixed precision: 8-bit input,
    4-bit weights and activations in the first layer, 2-bit (ternary) weights and 2-bit
    activations after, GAP → Trunc (version 1, FLOOR)."""
    shape = (2, 8, 8)
    b = Builder(f"cnn_{variant}", inputs(128, shape, seed + 100), seed)
    x = b.quant("x", 8, True)
    if variant == "4bit":
        (w1, a1), (w2, a2), w3 = (4, 4), (4, 4), 4
    else:
        (w1, a1), (w2, a2), w3 = (4, 4), (2, 2), 2
    x = b.quant(b.relu(b.conv(x, 4, w1)), a1, False)
    x = b.maxpool(x)
    x = b.quant(b.relu(b.conv(x, 8, w2)), a2, False)
    s = b.scales[x]
    x = b.gap(x)                                       # 4x4 = 16 pixels
    if variant == "4bit":  # r = Σq exactly, 4 bits dropped with rounding → the mean
        x = b.trunc(x, s / 16, a2 + 4, a2, "ROUND", version=2, out_scale=s)
    else:                   # floor(Σq / 4): 2 of the 6 bits of the sum dropped
        x = b.trunc(x, s / 16, a2 + 4, a2 + 2, "FLOOR", version=1)
    x = b.flatten(x)
    x = b.quant(b.dense(x, 6, w3), 8, True)
    return QModel(b.build(x, batch, shape, qonnx_opset=2 if variant == "4bit" else 1),
                  batch, shape, f"CNN {variant}")


def bipolar_mlp(sizes=(16, 32, 24, 10), batch: int = 64, seed: int = 2) -> QModel:
    """8-bit input → dense(bipolar weights) → BipolarQuant → dense(±1 weights by a signed
    1-bit Quant) → signed 1-bit Quant activation → dense(bipolar) → Quant(8 bits, signed)."""
    b = Builder("bipolar_mlp", inputs(256, (sizes[0],), seed + 100), seed)
    x = b.quant("x", 8, True)
    x = b.bipolar(b.dense(x, sizes[1], 1, bipolar="BipolarQuant"))
    x = b.bipolar(b.dense(x, sizes[2], 1, bipolar="Quant1", gemm=True), as_quant=True)
    x = b.quant(b.dense(x, sizes[3], 1, bipolar="BipolarQuant"), 8, True)
    return QModel(b.build(x, batch, (sizes[0],)), batch, (sizes[0],), "bipolar MLP")


# ---------------------------------------------------------------------- qonnx execution

def run_qonnx(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    """The float output of the ``qonnx`` package's own execution of ``model``."""
    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.core.onnx_exec import execute_onnx
    from qonnx.transformation.infer_shapes import InferShapes

    w = ModelWrapper(model).transform(InferShapes())
    inp = w.graph.input[0].name
    out = w.graph.output[0].name
    return execute_onnx(w, {inp: np.asarray(x, np.float32)})[out]
