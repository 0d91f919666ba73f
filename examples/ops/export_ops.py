"""Small PyTorch models that together use every operator hwgen maps, through both exporters
and both of onnxruntime's quantized formats.

Optional dependencies: PyTorch and onnxscript (``pip install ".[torch]"``: ``torch==2.13.0``,
the CPU build). Nothing is trained or downloaded: weights, biases and BatchNorm statistics
are seeded random.

Each model of :data:`MODELS` is

1. exported with the TorchScript exporter (``dynamo=False``) and with the new one
   (``dynamo=True``: torch.export and onnxscript), each at the opset it chooses (20 for both
   with torch 2.13), dynamic batch axis; ``gelu`` only with the TorchScript exporter at
   opset 17, where GELU is arithmetic around Erf;
2. quantized with hwgen's own quantizer (``hwgen.quantize.quantize``: onnxruntime's
   ``quant_pre_process`` and ``quantize_static``, MinMax calibration on seeded random
   inputs, uint8 asymmetric activations, int8 symmetric per-tensor weights) in the QDQ
   format and in the QOperator format (onnxruntime's ``QLinear*`` ops; an op its quantizer
   has no QLinear kernel for stays ``DequantizeLinear → op → QuantizeLinear``), with the
   model's ``op_types_to_quantize`` where onnxruntime's default leaves an op in float.

Files written: ``NAME_{ts,dynamo}_{qdq,qop}.onnx`` (``gelu_ts17_{qdq,qop}.onnx``) in this
folder (or ``--out DIR``), and ``NAME_test.npz`` (seeded test inputs, ``input``). With the
same torch / onnxscript / onnx / onnxruntime versions a rerun writes byte-identical files::

    nice -n 10 python examples/ops/export_ops.py            # every model
    nice -n 10 python examples/ops/export_ops.py acts       # one

``tests/e2e/test_op_models.py`` checks the committed files (it needs neither torch nor this
script).
"""
from __future__ import annotations

import argparse
import importlib.util
import io
import logging
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
import onnx

try:
    import torch
    import torch.nn.functional as F
    from torch import nn
except ImportError:  # pragma: no cover - optional dependency
    sys.exit("export_ops.py needs PyTorch: pip install '.[torch]'")

from hwgen.quantize import quantize

HERE = Path(__file__).resolve().parent


def _module(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


MM = _module(HERE.parent / "mlperf_tiny" / "make_models.py")   # the dynamo exporter, npz writer
SEED = 0
N_CALIB, N_TEST = 64, 16


def conv(cin: int, cout: int, k: int = 3, **kw) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, k, padding=kw.pop("padding", k // 2), **kw)


class Acts(nn.Module):
    """Every table activation after a convolution: LeakyRelu, Sigmoid, Tanh, HardSwish,
    HardSigmoid, SiLU (Sigmoid · x), GELU; a last convolution (onnxruntime's QOperator form
    leaves an op it has no QLinear kernel for in float, so a graph ending in GELU would
    output floats)."""

    def __init__(self):
        super().__init__()
        self.acts = [nn.LeakyReLU(0.1), nn.Sigmoid(), nn.Tanh(), nn.Hardswish(),
                     nn.Hardsigmoid(), nn.SiLU(), nn.GELU()]
        self.convs = nn.ModuleList([conv(3 if k == 0 else 4, 4)
                                    for k in range(len(self.acts) + 1)])

    def forward(self, x):
        for c, a in zip(self.convs, self.acts):
            x = a(c(x))
        return self.convs[-1](x)


class Convs(nn.Module):
    """The convolution family and the window ops: grouped, dilated and depthwise (channel
    multiplier 2) convolutions, BatchNormalization after a ReLU and after a pooling (of its
    own), explicit zero and constant Pad, MaxPool with ceil_mode, and ArgMax as the output.
    Each BatchNormalization is followed by a convolution: onnxruntime's QOperator form keeps
    it in float up to the next op it quantizes."""

    def __init__(self):
        super().__init__()
        self.grouped = conv(4, 8, groups=2)
        self.bn_relu = nn.BatchNorm2d(8)
        self.dilated = conv(8, 8, padding=2, dilation=2)
        self.depthwise = conv(8, 16, padding=0, groups=8)
        self.mix = conv(16, 8, padding=0)
        self.bn_pool = nn.BatchNorm2d(8)
        self.squeeze = conv(8, 4, k=1)
        self.head = nn.Linear(64, 5)

    def forward(self, x):
        x = self.bn_relu(F.relu(self.grouped(x)))                       # [8, 8, 8]
        x = F.relu(self.dilated(x))                                      # [8, 8, 8]
        x = F.relu(self.depthwise(F.pad(x, (1, 1, 1, 1))))               # zero pad: [16, 8, 8]
        x = F.relu(self.mix(F.pad(x, (1, 1, 1, 1), value=0.25)))         # [8, 8, 8]
        x = self.bn_pool(F.max_pool2d(x, 3, 2, ceil_mode=True))          # [8, 4, 4]
        x = F.relu(self.squeeze(x)).flatten(1)                           # [64]
        return self.head(x).argmax(dim=1)


class Joins(nn.Module):
    """Nearest upsampling by 2 (to a size computed from the input's shape), Concat of three
    maps, and squeeze-and-excitation: the map times a gate (a Linear layer's sigmoid, viewed as
    [N, C, 1, 1] and expanded to the map's shape, as PyTorch code often writes it), plus and
    minus per-channel vectors broadcast over H×W (Mul, Add, Sub)."""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = conv(3, 4), conv(3, 4, stride=2), conv(3, 4, k=1)
        self.squeeze, self.excite = conv(12, 4, k=1), nn.Linear(4, 12)
        self.shift, self.tilt = conv(4, 12, k=1), conv(4, 12, k=1)
        self.out = conv(12, 4)

    def forward(self, x):
        n, _, h, w = x.shape
        up = F.interpolate(F.relu(self.b(x)), size=(h, w), mode="nearest")   # 4×4 → 8×8
        x = torch.cat([F.relu(self.a(x)), up, self.c(x)], dim=1)           # [12, 8, 8]
        s = F.relu(self.squeeze(F.adaptive_avg_pool2d(x, 1)))             # [4, 1, 1]
        gate = torch.sigmoid(self.excite(s.flatten(1))).view(n, -1, 1, 1)
        x = x * gate.expand_as(x) + self.shift(s) - self.tilt(s)
        return self.out(x)


class Seq1d(nn.Module):
    """1-D convolution and pooling: Conv1d, MaxPool1d, a dilated Conv1d, AvgPool1d (kernel 3:
    an odd divisor, see tests/e2e/test_op_models.py)."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv1d(4, 8, 3, padding=1)
        self.c2 = nn.Conv1d(8, 8, 3, padding=2, dilation=2)
        self.c3 = nn.Conv1d(8, 4, 1)

    def forward(self, x):
        x = F.max_pool1d(F.relu(self.c1(x)), 2)                  # [8, 16]
        x = F.avg_pool1d(F.relu(self.c2(x)), 3, 2, padding=1)    # [8, 8]
        return self.c3(x)


class Gelu(nn.Module):
    """GELU between two convolutions, for the TorchScript exporter at opset 17 (as
    ``examples/export_both.py`` uses it), which writes it as ``x · 0.5 · (1 + erf(x / √2))``
    (Div, Erf, Add, Mul, Mul)."""

    def __init__(self):
        super().__init__()
        self.c1, self.c2 = conv(3, 4), conv(4, 4)

    def forward(self, x):
        return self.c2(F.gelu(self.c1(x)))


# name: (module, input shape, output name, op types to quantize beyond onnxruntime's default,
#        exports: file tag → (exporter, opset; None: the exporter's choice))
BOTH = {"ts": ("ts", None), "dynamo": ("dynamo", None)}
MODELS = {
    "acts": (Acts, (3, 8, 8), "y", ["Tanh", "HardSwish", "HardSigmoid", "Gelu"], BOTH),
    "convs": (Convs, (4, 8, 8), "cls", [], BOTH),
    "joins": (Joins, (3, 8, 8), "y", ["Sub"], BOTH),
    "seq1d": (Seq1d, (4, 32), "y", [], BOTH),
    "gelu": (Gelu, (3, 8, 8), "y", [], {"ts17": ("ts", 17)}),
}
FORMATS = {"qdq": "qdq", "qop": "qoperator"}


def _export_ts(model: nn.Module, shape, out: str, path: Path, opset: int | None) -> None:
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # the TorchScript exporter's deprecation notice
        torch.onnx.export(model, torch.zeros((1,) + tuple(shape)), buf, dynamo=False,
                          opset_version=opset, input_names=["input"], output_names=[out],
                          dynamic_axes={"input": {0: "N"}, out: {0: "N"}},
                          training=torch.onnx.TrainingMode.EVAL)
    m = onnx.load_from_string(buf.getvalue())
    onnx.checker.check_model(m, full_check=True)
    onnx.save(m, str(path))


def _seeded_weights(model: nn.Module, gen: torch.Generator) -> None:
    """He-normal weights (the signal keeps its spread through the layers, so the outputs,
    ArgMax's among them, vary with the input), small biases, random BatchNorm statistics."""
    for m in model.modules():
        if isinstance(m, (nn.Conv1d, nn.Conv2d, nn.Linear)):
            fan_in = m.weight[0].numel()
            m.weight.data.copy_(torch.randn(m.weight.shape, generator=gen) * (2 / fan_in) ** 0.5)
            m.bias.data.copy_(torch.randn(m.bias.shape, generator=gen) * 0.1)
        elif isinstance(m, nn.BatchNorm2d):
            c = m.num_features
            m.running_mean.copy_(torch.randn(c, generator=gen) * 0.3)
            m.running_var.copy_(torch.rand(c, generator=gen) + 0.5)
            m.weight.data.copy_(torch.rand(c, generator=gen) + 0.5)
            m.bias.data.copy_(torch.randn(c, generator=gen) * 0.2)


def inputs(shape, n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, (n,) + tuple(shape)).astype(np.float32)


def _default_op_types() -> list[str]:
    from onnxruntime.quantization.registry import QDQRegistry, QLinearOpsRegistry

    return sorted(set(QDQRegistry) | set(QLinearOpsRegistry))


def build(name: str, out: Path) -> list[Path]:
    cls, shape, out_name, extra, exports = MODELS[name]
    torch.manual_seed(SEED)
    model = cls()
    _seeded_weights(model, torch.Generator().manual_seed(SEED + 1))
    model.eval()
    x_cal, x_te = inputs(shape, N_CALIB, SEED + 2), inputs(shape, N_TEST, SEED + 3)
    op_types = sorted(set(_default_op_types()) | set(extra)) if extra else None
    written = []
    with tempfile.TemporaryDirectory(prefix="export_ops.") as tmp:
        for kind, (exporter, opset) in exports.items():
            f_path = Path(tmp) / f"{name}_{kind}.onnx"
            if exporter == "ts":
                _export_ts(model, shape, out_name, f_path, opset)
            else:
                MM.export_dynamo(model, shape, out_name, f_path)
            fm = onnx.load(str(f_path))
            ops = sorted({n.op_type for n in fm.graph.node})
            opset = next(o.version for o in fm.opset_import if o.domain in ("", "ai.onnx"))
            print(f"  {kind:7s} opset {opset}, float ops: {' '.join(ops)}")
            for suffix, fmt in FORMATS.items():
                q_path = out / f"{name}_{kind}_{suffix}.onnx"
                quantize(f_path, x_cal, q_path, quant_format=fmt, op_types=op_types)
                print(f"    wrote {q_path.name} ({q_path.stat().st_size} bytes)")
                written.append(q_path)
    npz = out / f"{name}_test.npz"
    MM.save_npz_deterministic(npz, input=x_te)
    written.append(npz)
    return written


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help=f"models (default: all of {' '.join(MODELS)})")
    ap.add_argument("--out", type=Path, default=HERE, help="output folder")
    args = ap.parse_args(argv)
    names = args.names or list(MODELS)
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        sys.exit(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(MODELS)}")
    logging.getLogger().setLevel(logging.ERROR)
    logging.getLogger("torch").setLevel(logging.ERROR)   # "torchvision is not installed"
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    torch.use_deterministic_algorithms(True)
    args.out.mkdir(parents=True, exist_ok=True)
    for name in names:
        print(name)
        build(name, args.out)


if __name__ == "__main__":
    main(sys.argv[1:])
