"""Small QONNX models "from the field": Brevitas networks with Brevitas' default quantizers
(float scales from statistics or learned, not powers of two), trained for a few seconds and
exported with ``brevitas.export.export_qonnx``, then rewritten with ``onnx`` into the forms
that users' tools and older files have:

* ``field_tfc_w2a2_legacy``: TFC-like MLP on 8×8 digits ([1, 1, 8, 8] → Flatten → 64 → 64
  → 10), 8-bit input QuantIdentity, 2-bit weights, 2-bit QuantReLU, 8-bit output
  QuantIdentity; the quantizer nodes moved to domain ``onnx.brevitas`` and that domain
  removed from ``opset_import`` (as in the FINN-era model-zoo files).
* ``field_mlp_finn_domain``: the same kind of MLP on [1, 64], biases quantized to 32 bits
  (``Int32Bias``), an 8-bit output QuantIdentity; the quantizers in domain
  ``finn.custom_op.general``, not in ``opset_import``.
* ``field_unsw_annotated``: UNSW-NB15-style intrusion detection MLP (FINN's end-to-end
  notebook: QuantLinear → BatchNorm1d → QuantReLU, three times, then QuantLinear to one
  logit, here with an 8-bit output QuantIdentity): 64 binary features, NO input quantizer,
  the graph input annotated ``finn_datatype = BINARY`` in ``graph.quantization_annotation``.
* ``field_int8_annotated``: digits MLP whose graph input holds integers in [-128, 127]
  (float tensor), annotated ``INT8``, no input quantizer; 4-bit weights and activations.
* ``field_tfc_w1a1_bipolar``: TFC-w1a1-style: BipolarQuant on the input (x in [-1, 1]),
  ±1 weights (``SignedBinaryWeightPerTensorConst``), BatchNorm1d, bipolar activations
  (``SignedBinaryActPerTensorConst``, exported as BipolarQuant), 8-bit output
  QuantIdentity; legacy ``onnx.brevitas`` domain.
* ``field_float_tail``: 8-bit input, 2-bit layers, and a last QuantLinear with a float bias
  and no output quantizer: the graph ends in MatMul → Add (float logits).
* ``field_softmax_head_qonnx`` / ``field_logsoftmax_head_qonnx``: 4-bit MLP, last layer
  followed by an 8-bit QuantIdentity and a float Softmax / LogSoftmax.
* ``field_cnn_channels_last``: a CNN on [1, 1, 8, 8] (QuantConv2d → BatchNorm2d → QuantReLU,
  MaxPool2d, QuantConv2d → BatchNorm2d → QuantReLU, Flatten, QuantLinear; 4-bit weights and
  activations) put through qonnx's ``cleanup_model`` and ``ConvertToChannelsLastAndClean``:
  a Transpose of the input to NHWC, then Conv, BatchNormalization and MaxPool in domain
  ``qonnx.custom_op.channels_last`` and the last transpose absorbed into the MatMul's weights.

Every model is exported at batch 1 (as FINN's files are); ``<name>_test.npz`` holds 64
float32 samples under the key of the model's input name, batch axis first.

Run (``pip install torch==2.13.0 brevitas onnx qonnx scikit-learn``; without scikit-learn
the digits are replaced by synthetic 8×8 images)::

    python examples/field/make_qonnx_models.py [--out examples/field] [--only name,...]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
import torch
from brevitas.export import export_qonnx
from brevitas.nn import QuantConv2d, QuantIdentity, QuantLinear, QuantReLU
from brevitas.quant import (
    Int32Bias,
    SignedBinaryActPerTensorConst,
    SignedBinaryWeightPerTensorConst,
)
from torch import nn

QUANT_OPS = ("Quant", "BipolarQuant", "Trunc")
N_TEST = 64


# ---------------------------------------------------------------------------- data
def digits(seed: int = 0):
    """(x [N, 64] in [0, 1], y [N]): sklearn's 8×8 digits, or synthetic class templates."""
    try:
        from sklearn.datasets import load_digits
        d = load_digits()
        x, y = d.data.astype(np.float32) / 16.0, d.target.astype(np.int64)
    except ImportError:
        rng = np.random.default_rng(seed)
        templ = rng.uniform(0, 1, (10, 64)) > 0.6
        y = rng.integers(0, 10, 1800)
        x = np.clip(templ[y] * 0.8 + rng.normal(0, 0.25, (1800, 64)), 0, 1).astype(np.float32)
    perm = np.random.default_rng(seed).permutation(len(x))
    return x[perm], y[perm]


def unsw_like(n: int = 2000, feats: int = 64, seed: int = 0):
    """Binary features in {0, 1}; the label: attack (1) or normal (0), from a sparse rule."""
    rng = np.random.default_rng(seed)
    x = (rng.uniform(0, 1, (n, feats)) < rng.uniform(0.1, 0.6, feats)).astype(np.float32)
    w = np.zeros(feats)
    w[rng.choice(feats, 12, replace=False)] = rng.choice([-1.0, 1.0], 12)
    y = ((x @ w + 0.3 * rng.standard_normal(n)) > 0.5).astype(np.int64)
    return x, y


# ---------------------------------------------------------------------------- models
class TFCLegacy(nn.Module):
    """[N, 1, 8, 8] → flatten → QuantIdentity(8) → (QuantLinear(w2) → QuantReLU(2)) ×2 →
    QuantLinear(w2) → QuantIdentity(8)."""

    def __init__(self):
        super().__init__()
        self.inp = QuantIdentity(bit_width=8)
        self.fc1 = QuantLinear(64, 64, bias=False, weight_bit_width=2)
        self.act1 = QuantReLU(bit_width=2)
        self.fc2 = QuantLinear(64, 64, bias=False, weight_bit_width=2)
        self.act2 = QuantReLU(bit_width=2)
        self.fc3 = QuantLinear(64, 10, bias=False, weight_bit_width=2)
        self.out = QuantIdentity(bit_width=8)

    def forward(self, x):
        x = self.inp(torch.flatten(x, 1))
        x = self.act1(self.fc1(x))
        x = self.act2(self.fc2(x))
        return self.out(self.fc3(x))


class MLPQuantBias(nn.Module):
    """[N, 64] → QuantIdentity(8) → QuantLinear(w2, Int32Bias) → QuantReLU(2) ... →
    QuantLinear(w2, Int32Bias) → QuantIdentity(8); quant tensors passed between layers."""

    def __init__(self):
        super().__init__()
        kw = dict(bias=True, weight_bit_width=2, bias_quant=Int32Bias)
        self.inp = QuantIdentity(bit_width=8, return_quant_tensor=True)
        self.fc1 = QuantLinear(64, 64, **kw)
        self.act1 = QuantReLU(bit_width=2, return_quant_tensor=True)
        self.fc2 = QuantLinear(64, 64, **kw)
        self.act2 = QuantReLU(bit_width=2, return_quant_tensor=True)
        self.fc3 = QuantLinear(64, 10, **kw)
        self.out = QuantIdentity(bit_width=8)

    def forward(self, x):
        x = self.inp(x)
        x = self.act1(self.fc1(x))
        x = self.act2(self.fc2(x))
        return self.out(self.fc3(x))


class UNSW(nn.Module):
    """FINN's UNSW-NB15 notebook network, narrowed: no input quantizer; (QuantLinear(w2) →
    BatchNorm1d → Dropout → QuantReLU(2)) ×3 → QuantLinear(w2, 1 output) → QuantIdentity(8)."""

    def __init__(self, feats: int = 64, hidden: int = 64):
        super().__init__()
        layers: list[nn.Module] = []
        n_in = feats
        for _ in range(3):
            layers += [QuantLinear(n_in, hidden, bias=True, weight_bit_width=2),
                       nn.BatchNorm1d(hidden), nn.Dropout(0.3), QuantReLU(bit_width=2)]
            n_in = hidden
        layers += [QuantLinear(n_in, 1, bias=True, weight_bit_width=2),
                   QuantIdentity(bit_width=8)]
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)


class Int8Input(nn.Module):
    """[N, 64] integers in [-128, 127], no input quantizer → QuantLinear(w4) → QuantReLU(4)
    → QuantLinear(w4) → QuantReLU(4) → QuantLinear(w4) → QuantIdentity(8)."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            QuantLinear(64, 32, bias=False, weight_bit_width=4), QuantReLU(bit_width=4),
            QuantLinear(32, 32, bias=False, weight_bit_width=4), QuantReLU(bit_width=4),
            QuantLinear(32, 10, bias=False, weight_bit_width=4), QuantIdentity(bit_width=8))

    def forward(self, x):
        return self.net(x)


class TFCBipolar(nn.Module):
    """[N, 64] in [-1, 1] → BipolarQuant → (binary QuantLinear → BatchNorm1d → bipolar
    QuantIdentity) ×2 → binary QuantLinear → QuantIdentity(8)."""

    def __init__(self):
        super().__init__()
        wq = dict(bias=False, weight_quant=SignedBinaryWeightPerTensorConst)
        self.net = nn.Sequential(
            QuantIdentity(act_quant=SignedBinaryActPerTensorConst),
            QuantLinear(64, 64, **wq), nn.BatchNorm1d(64),
            QuantIdentity(act_quant=SignedBinaryActPerTensorConst),
            QuantLinear(64, 64, **wq), nn.BatchNorm1d(64),
            QuantIdentity(act_quant=SignedBinaryActPerTensorConst),
            QuantLinear(64, 10, **wq), QuantIdentity(bit_width=8))

    def forward(self, x):
        return self.net(x)


class FloatTail(nn.Module):
    """[N, 64] → QuantIdentity(8) → QuantLinear(w2) → QuantReLU(2) → QuantLinear(w2) →
    QuantReLU(2) → QuantLinear(w2, float bias, no output quantizer): float logits."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            QuantIdentity(bit_width=8),
            QuantLinear(64, 64, bias=False, weight_bit_width=2), QuantReLU(bit_width=2),
            QuantLinear(64, 64, bias=False, weight_bit_width=2), QuantReLU(bit_width=2),
            QuantLinear(64, 10, bias=True, weight_bit_width=2))

    def forward(self, x):
        return self.net(x)


class SoftmaxHead(nn.Module):
    """[N, 64] → QuantIdentity(8) → (QuantLinear(w4) → QuantReLU(4)) ×2 → QuantLinear(w4) →
    QuantIdentity(8) → Softmax or LogSoftmax (float)."""

    def __init__(self, log: bool):
        super().__init__()
        self.log = log
        self.net = nn.Sequential(
            QuantIdentity(bit_width=8),
            QuantLinear(64, 32, bias=False, weight_bit_width=4), QuantReLU(bit_width=4),
            QuantLinear(32, 32, bias=False, weight_bit_width=4), QuantReLU(bit_width=4),
            QuantLinear(32, 10, bias=False, weight_bit_width=4), QuantIdentity(bit_width=8))
        self.head = nn.LogSoftmax(dim=-1) if log else nn.Softmax(dim=-1)

    def forward(self, x):
        return self.head(self.net(x))


class CNNChannelsLast(nn.Module):
    """[N, 1, 8, 8] → QuantIdentity(8) → QuantConv2d(8, 3, pad 1) → BN → QuantReLU(4) →
    MaxPool(2) → QuantConv2d(16, 3) → BN → QuantReLU(4) → Flatten → QuantLinear(10)."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            QuantIdentity(bit_width=8),
            QuantConv2d(1, 8, 3, padding=1, bias=False, weight_bit_width=4),
            nn.BatchNorm2d(8), QuantReLU(bit_width=4), nn.MaxPool2d(2),
            QuantConv2d(8, 16, 3, bias=False, weight_bit_width=4),
            nn.BatchNorm2d(16), QuantReLU(bit_width=4), nn.Flatten(),
            QuantLinear(64, 10, bias=False, weight_bit_width=4))

    def forward(self, x):
        return self.net(x)


# ---------------------------------------------------------------------------- training
def train(model: nn.Module, x: np.ndarray, y: np.ndarray, epochs: int, binary: bool = False,
          head: str = "", seed: int = 0) -> float:
    torch.manual_seed(seed)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3 if not head == "bipolar" else 5e-3)
    model.train()
    for _ in range(epochs):
        perm = torch.randperm(len(xt))
        for i in range(0, len(xt), 64):
            idx = perm[i:i + 64]
            out = model(xt[idx])
            if binary:
                loss = nn.functional.binary_cross_entropy_with_logits(
                    out.reshape(-1), yt[idx].float())
            elif head == "softmax":
                loss = nn.functional.nll_loss(torch.log(out + 1e-9), yt[idx])
            elif head == "logsoftmax":
                loss = nn.functional.nll_loss(out, yt[idx])
            else:
                loss = nn.functional.cross_entropy(out, yt[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        out = model(xt).reshape(len(xt), -1)
        pred = (out[:, 0] > 0).long() if binary else out.argmax(1)
        return float((pred == yt).float().mean())


# ---------------------------------------------------------------------------- rewrites
def set_quant_domain(m: onnx.ModelProto, domain: str) -> None:
    """Quant/BipolarQuant/Trunc nodes into ``domain``; every custom domain of those nodes
    (and ``domain`` itself) removed from opset_import, as in FINN-era files."""
    old = set()
    for n in m.graph.node:
        if n.op_type in QUANT_OPS:
            old.add(n.domain)
            n.domain = domain
    drop = old | {domain}
    keep = [o for o in m.opset_import if o.domain not in drop]
    del m.opset_import[:]
    m.opset_import.extend(keep)


def annotate_input(m: onnx.ModelProto, dtype: str) -> None:
    """qonnx/FINN datatype annotation of the graph input (ModelWrapper.set_tensor_datatype)."""
    name = m.graph.input[0].name
    ann = onnx.TensorAnnotation(tensor_name=name)
    ann.quant_parameter_tensor_names.append(
        onnx.StringStringEntryProto(key="finn_datatype", value=dtype))
    m.graph.quantization_annotation.append(ann)


def to_channels_last(m: onnx.ModelProto) -> None:
    """qonnx's channels-last conversion (what FINN's flows and qonnx users run), in place."""
    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.transformation.channels_last import ConvertToChannelsLastAndClean
    from qonnx.util.cleanup import cleanup_model
    w = cleanup_model(ModelWrapper(m)).transform(ConvertToChannelsLastAndClean())
    m.CopyFrom(w.model)


# ---------------------------------------------------------------------------- models
def _spec(name):
    x, y = digits()
    xi = np.clip(np.round(x * 255.0) - 128.0, -128, 127).astype(np.float32)
    specs = {
        "field_tfc_w2a2_legacy": dict(
            net=TFCLegacy, x=x.reshape(-1, 1, 8, 8), y=y, epochs=6,
            post=lambda m: set_quant_domain(m, "onnx.brevitas"), legacy=True),
        "field_mlp_finn_domain": dict(
            net=MLPQuantBias, x=x, y=y, epochs=6,
            post=lambda m: set_quant_domain(m, "finn.custom_op.general")),
        "field_unsw_annotated": dict(
            net=UNSW, data=unsw_like(), epochs=6, binary=True,
            post=lambda m: annotate_input(m, "BINARY")),
        "field_int8_annotated": dict(
            net=Int8Input, x=xi, y=y, epochs=8,
            post=lambda m: annotate_input(m, "INT8")),
        "field_tfc_w1a1_bipolar": dict(
            net=TFCBipolar, x=2.0 * x - 1.0, y=y, epochs=8, head="bipolar",
            post=lambda m: set_quant_domain(m, "onnx.brevitas"), legacy=True),
        "field_float_tail": dict(net=FloatTail, x=x, y=y, epochs=6),
        "field_softmax_head_qonnx": dict(
            net=lambda: SoftmaxHead(False), x=x, y=y, epochs=6, head="softmax"),
        "field_logsoftmax_head_qonnx": dict(
            net=lambda: SoftmaxHead(True), x=x, y=y, epochs=6, head="logsoftmax"),
        "field_cnn_channels_last": dict(
            net=CNNChannelsLast, x=x.reshape(-1, 1, 8, 8), y=y, epochs=4,
            post=to_channels_last, legacy=True),
    }
    s = specs[name]
    if "data" in s:
        s["x"], s["y"] = s.pop("data")
    s["x"] = s["x"].astype(np.float32)
    return s


NAMES = ["field_tfc_w2a2_legacy", "field_mlp_finn_domain", "field_unsw_annotated",
         "field_int8_annotated", "field_tfc_w1a1_bipolar", "field_float_tail",
         "field_softmax_head_qonnx", "field_logsoftmax_head_qonnx", "field_cnn_channels_last"]


def make(name: str, out: Path, seed: int = 0) -> Path:
    s = _spec(name)
    torch.manual_seed(seed)
    net = s["net"]()
    x, y = s["x"], s["y"]
    x_train, y_train, x_test = x[N_TEST:], y[N_TEST:], x[:N_TEST]
    acc = train(net, x_train, y_train, s["epochs"], binary=s.get("binary", False),
                head=s.get("head", ""), seed=seed)
    path = out / f"{name}.onnx"
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "raw.onnx"
        # FINN-era files: opset 11 and FINN's tensor names; the others: opset 20 (the
        # exporter's default) and plain names
        kw = dict(input_names=["global_in"], output_names=["global_out"], opset_version=11) \
            if s.get("legacy") else dict(input_names=["input"], output_names=["output"])
        export_qonnx(net, torch.from_numpy(x_test[:1]), export_path=str(raw), dynamo=False,
                     **kw)
        m = onnx.load(str(raw))
    if s.get("post"):
        s["post"](m)
    m.producer_name = m.producer_name or "brevitas"
    onnx.save(m, str(path))
    np.savez_compressed(out / f"{name}_test.npz", **{m.graph.input[0].name: x_test})
    with torch.no_grad():
        y_torch = net(torch.from_numpy(x_test)).numpy().reshape(len(x_test), -1)
    msg = ""
    try:  # the qonnx reference on the written file must reproduce Brevitas' output
        sys.path.insert(0, str(Path(__file__).parent))
        from check_models import run_reference
        y_ref = run_reference(path).reshape(len(x_test), -1)
        msg = f", qonnx vs torch max |diff| {np.abs(y_ref - y_torch).max():.3g}"
    except ImportError:
        pass
    print(f"{name}: train accuracy {acc:.3f}, {path.stat().st_size} bytes{msg}")
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(Path(__file__).parent))
    ap.add_argument("--only", default=",".join(NAMES))
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in a.only.split(","):
        make(name, out)


if __name__ == "__main__":
    main()
