"""FINN's BNN-PYNQ networks TFC and CNV at w1a1 and w2a2, built with Brevitas, trained
briefly on synthetic data and exported as QONNX (``brevitas.export.export_qonnx``).

The architectures are the public ones (FINN's ``bnn_pynq`` examples):

* **TFC**: 28×28 input, ``x = 2x - 1``, an 8-bit input quantizer, three fully connected
  layers of 64 (each: quantized weights, BatchNorm1d, quantized activation), a last fully
  connected layer of 10.
* **CNV**: 3×32×32 input, ``x = 2x - 1``, an 8-bit input quantizer, six 3×3 convolutions
  without padding (64, 64, max pool, 128, 128, max pool, 256, 256; each with BatchNorm2d
  and a quantized activation), two fully connected layers of 512 (BatchNorm1d, quantized
  activation) and a last one of 10.

Quantizers as in FINN's examples: constant scales, no zero point, narrow signed ranges,
weights of scale 1 (w1: ±1, ``BipolarQuant``; w2: {-1, 0, 1}), activations in [-1, 1]
(a1: ±1, ``BipolarQuant``; a2: {-1, 0, 1} with scale 1), the input at 8 bits (scale 1/127).
FINN ends both networks with ``TensorNorm`` (a learned float affine map); hwgen maps
integer outputs, so here the last layer's accumulator goes through an output quantizer of
scale 1 wide enough to hold it exactly (the logits in accumulator units; the class order is
the same as TensorNorm's with a positive scale).

Run (the torch extra: ``pip install torch==2.13.0 brevitas onnx onnxruntime qonnx``)::

    python examples/finn/make_models.py [--out examples/finn] [--only tfc-w1a1,...]

Writes ``<name>.onnx`` and ``<name>_test.npz`` (100 inputs under the key of the model's
input name) per network. ``--width-divisor k`` makes reduced-width variants (every layer's
channels / k) next to the true architecture's, named ``<name>-div<k>``.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import onnx
import torch
from brevitas.core.bit_width import BitWidthImplType
from brevitas.core.quant import QuantType
from brevitas.core.restrict_val import FloatToIntImplType, RestrictValueType
from brevitas.core.scaling import ScalingImplType
from brevitas.core.zero_point import ZeroZeroPoint
from brevitas.export import export_qonnx
from brevitas.inject import ExtendedInjector
from brevitas.nn import QuantConv2d, QuantIdentity, QuantLinear
from brevitas.quant.solver import ActQuantSolver, WeightQuantSolver
from dependencies import value
from torch import nn


class _Quant(ExtendedInjector):
    bit_width_impl_type = BitWidthImplType.CONST
    scaling_impl_type = ScalingImplType.CONST
    restrict_scaling_type = RestrictValueType.FP
    zero_point_impl = ZeroZeroPoint
    float_to_int_impl_type = FloatToIntImplType.ROUND
    scaling_per_output_channel = False
    narrow_range = True
    signed = True

    @value
    def quant_type(bit_width):
        if bit_width is None:
            return QuantType.FP
        return QuantType.BINARY if bit_width == 1 else QuantType.INT


class WeightQuant(_Quant, WeightQuantSolver):
    scaling_const = 1.0


class ActQuant(_Quant, ActQuantSolver):
    min_val = -1.0
    max_val = 1.0


def _out_quant(bits: int) -> QuantIdentity:
    """An output quantizer of scale 1 (narrow signed ``bits``): the accumulator exactly."""
    m = float((1 << (bits - 1)) - 1)
    return QuantIdentity(act_quant=ActQuant, bit_width=bits, min_val=-m, max_val=m)


class TFC(nn.Module):
    def __init__(self, w_bits: int, a_bits: int, hidden=(64, 64, 64), classes: int = 10):
        super().__init__()
        layers: list[nn.Module] = [QuantIdentity(act_quant=ActQuant, bit_width=8)]
        n_in = 28 * 28
        for n in hidden:
            layers += [QuantLinear(n_in, n, bias=False, weight_quant=WeightQuant,
                                   weight_bit_width=w_bits),
                       nn.BatchNorm1d(n),
                       QuantIdentity(act_quant=ActQuant, bit_width=a_bits)]
            n_in = n
        layers += [QuantLinear(n_in, classes, bias=False, weight_quant=WeightQuant,
                               weight_bit_width=w_bits), _out_quant(8)]
        self.features = nn.Sequential(*layers)

    def forward(self, x):
        x = torch.flatten(x, 1)
        return self.features(2.0 * x - 1.0)


class CNV(nn.Module):
    def __init__(self, w_bits: int, a_bits: int, div: int = 1, classes: int = 10):
        super().__init__()
        convs = [(64, False), (64, True), (128, False), (128, True), (256, False), (256, False)]
        layers: list[nn.Module] = [QuantIdentity(act_quant=ActQuant, bit_width=8)]
        c_in = 3
        for c, pool in convs:
            c //= div
            layers += [QuantConv2d(c_in, c, 3, bias=False, weight_quant=WeightQuant,
                                   weight_bit_width=w_bits),
                       nn.BatchNorm2d(c, eps=1e-4),
                       QuantIdentity(act_quant=ActQuant, bit_width=a_bits)]
            if pool:
                layers.append(nn.MaxPool2d(2))
            c_in = c
        layers.append(nn.Flatten())
        n_in = c_in
        for n in (512 // div, 512 // div):
            layers += [QuantLinear(n_in, n, bias=False, weight_quant=WeightQuant,
                                   weight_bit_width=w_bits),
                       nn.BatchNorm1d(n, eps=1e-4),
                       QuantIdentity(act_quant=ActQuant, bit_width=a_bits)]
            n_in = n
        layers += [QuantLinear(n_in, classes, bias=False, weight_quant=WeightQuant,
                               weight_bit_width=w_bits), _out_quant(12)]
        self.features = nn.Sequential(*layers)

    def forward(self, x):
        return self.features(2.0 * x - 1.0)


def synthetic(n: int, shape, classes: int, seed: int):
    """Images in [0, 1] whose class is the strongest response to one of ``classes`` fixed
    random patterns (smoothed noise)."""
    g = torch.Generator().manual_seed(seed)
    pats = torch.rand((classes,) + tuple(shape), generator=g) - 0.5
    x = torch.round(torch.rand((n,) + tuple(shape), generator=g) * 255) / 255   # 8-bit pixels
    y = torch.einsum("n...,c...->nc", x - 0.5, pats).argmax(1)
    return x, y


def train(model: nn.Module, shape, steps: int, batch: int, seed: int) -> float:
    """Adam on synthetic data. The float weights start uniform in [-1, 1] (with weight scale
    1 the usual small initial weights would all round to 0 in two bits); the logits, in
    accumulator units, are scaled down for the loss only."""
    torch.manual_seed(seed)
    for m in model.modules():
        if isinstance(m, (QuantLinear, QuantConv2d)):
            nn.init.uniform_(m.weight, -1.0, 1.0)
    x, y = synthetic(steps * batch, shape, 10, seed)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.train()
    for k in range(steps):
        xb, yb = x[k * batch:(k + 1) * batch], y[k * batch:(k + 1) * batch]
        loss = nn.functional.cross_entropy(model(xb).float() / 16, yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    return float(loss.detach())


def compact_weights(path: Path) -> None:
    """Replace each float weight behind a ``Quant``/``BipolarQuant`` by its quantized value
    (the quantizers are idempotent, so the model computes the same): the file then holds
    few distinct floats and compresses well in git."""
    from qonnx.custom_op.general.bipolar_quant import binary_quant
    from qonnx.custom_op.general.intquant import int_quant

    m = onnx.load(str(path))
    inits = {t.name: t for t in m.graph.initializer}
    arr = {k: onnx.numpy_helper.to_array(t) for k, t in inits.items()}
    for n in m.graph.node:
        if n.op_type not in ("Quant", "BipolarQuant") or n.input[0] not in inits \
                or any(i not in arr for i in n.input[1:]):
            continue
        w = arr[n.input[0]]
        if n.op_type == "BipolarQuant":
            q = binary_quant(w, arr[n.input[1]])
        else:
            at = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
            mode = at.get("rounding_mode", b"ROUND")
            q = int_quant(w, arr[n.input[1]], arr[n.input[2]], arr[n.input[3]],
                          at.get("signed", 1), at.get("narrow", 0),
                          mode.decode() if isinstance(mode, bytes) else mode)
        inits[n.input[0]].CopyFrom(onnx.numpy_helper.from_array(
            np.asarray(q, dtype=w.dtype), n.input[0]))
    onnx.save(m, str(path))


NETS = {
    "tfc-w1a1": (TFC, 1, 1, (1, 28, 28)), "tfc-w2a2": (TFC, 2, 2, (1, 28, 28)),
    "cnv-w1a1": (CNV, 1, 1, (3, 32, 32)), "cnv-w2a2": (CNV, 2, 2, (3, 32, 32)),
}


def make(name: str, out: Path, div: int = 1, steps: int = 0, seed: int = 0) -> Path:
    cls, wb, ab, shape = NETS[name]
    kw = {"div": div} if cls is CNV else {}
    model = cls(wb, ab, **kw)
    steps = steps or (300 if cls is TFC else 40)
    loss = train(model, shape, steps, 64 if cls is TFC else 32, seed)
    tag = name if div == 1 else f"{name}-div{div}"
    path = out / f"{tag}.onnx"
    with torch.no_grad():
        export_qonnx(model, torch.rand((1,) + shape), export_path=str(path), dynamo=False)
    compact_weights(path)
    m = onnx.load(str(path))
    x_test, _ = synthetic(100, shape, 10, seed + 1000)
    np.savez_compressed(out / f"{tag}_test.npz",
                        **{m.graph.input[0].name: x_test.numpy().astype(np.float32)})
    print(f"{tag}: {steps} steps, last loss {loss:.3f}, {path.stat().st_size} bytes")
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(Path(__file__).parent))
    ap.add_argument("--only", default=",".join(NETS))
    ap.add_argument("--width-divisor", type=int, default=1)
    ap.add_argument("--steps", type=int, default=0)
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in a.only.split(","):
        make(name, out, a.width_divisor, a.steps)


if __name__ == "__main__":
    main()
