"""Build our own versions of the MLPerf Tiny reference networks and FINN's TFC as ONNX models.

Optional dependencies: PyTorch and onnxscript (``pip install ".[torch]"``: ``torch==2.13.0``,
the CPU build; onnxscript for the new exporter), plus numpy, onnx and onnxruntime which hwgen
already needs. It downloads nothing: the data are synthetic.

The networks (architecture as in the MLPerf Tiny v1.x reference code, weights our own):

* ``resnet8``    image classification, input ``[N,3,32,32]`` (CIFAR-10 shape), 10 classes:
  Conv3x3(16)-BN-ReLU, three residual stages (16, 32, 64 channels; two Conv3x3-BN each,
  the second and third with stride 2 and a 1x1 stride-2 shortcut Conv, as in MLPerf Tiny
  without BN on the shortcut), ReLU after each join, global average pool, FC 10.
* ``dscnn``      keyword spotting, input ``[N,1,49,10]`` (49 frames x 10 MFCC), 12 classes:
  Conv(10x4, stride 2, 64)-BN-ReLU, four depthwise-separable blocks (DW3x3-BN-ReLU,
  PW1x1(64)-BN-ReLU), AveragePool 25x5, FC 12. Keras' ``padding="same"`` pads the first conv
  4 above and 5 below; PyTorch's Conv2d pads symmetrically, so it pads (5, 1): the same
  25x5 output, the window grid one row higher.
* ``mobilenet_v1_025`` visual wake words, input ``[N,3,96,96]``, 2 classes: MobileNetV1 with
  width multiplier 0.25: Conv3x3(8, stride 2)-BN-ReLU, 13 depthwise-separable blocks
  (pointwise channels 16, 32, 32, 64, 64, 128 x6, 256, 256; strides 1,2,1,2,1,2,1,1,1,1,1,2,1),
  global average pool, FC 2 (ReLU activations, as MLPerf's Keras model).
* ``autoencoder`` anomaly detection (ToyADMOS), input ``[N,640]`` (5 frames x 128 mel bins):
  FC 128-BN-ReLU x4, FC 8-BN-ReLU, FC 128-BN-ReLU x4, FC 640 (about 270k parameters).
* ``tfc``        FINN's TFC topology, input ``[N,1,28,28]`` (MNIST shape, flattened first):
  FC 64-BN-ReLU x3, FC 10, float (FINN's own TFC is Brevitas-quantized; this one is
  quantized by onnxruntime like the others).

The softmax at the end of the MLPerf classifiers is left out: the models output logits.

Weights: each network is trained briefly (a few epochs of Adam on a few hundred samples) on
synthetic, class-structured data, so activations and hence the calibrated quantization
scales have realistic ranges; accuracy is not the point. The classifiers' inputs are a
per-class random smooth template times a random gain plus noise (images in [0, 1]; MFCC-like
features standardised); the autoencoder's input is a low-rank signal (8 latent factors)
plus noise, trained to reconstruct itself.

For each network the script writes, next to itself:

* ``NAME.onnx``                     float, TorchScript exporter (``dynamo=False``), opset 17,
                                    BatchNormalization kept (constant folding off)
* ``NAME_qdq.onnx``                 QDQ, uint8 asymmetric activations, int8 per-tensor weights
* ``NAME_qdq_perchannel.onnx``      QDQ, uint8 activations, int8 per-channel weights
* ``NAME_qdq_int8.onnx``            QDQ, int8 asymmetric activations, int8 per-channel weights
* ``NAME_bnfused_qdq.onnx``, ``NAME_bnfused_qdq_perchannel.onnx``  (autoencoder and TFC
                                    only) as ``_qdq`` / ``_qdq_perchannel``, but each
                                    BatchNorm1d folded into its Linear in PyTorch before the
                                    export: onnxruntime's ``quant_pre_process`` folds
                                    BatchNormalization into a Conv but not into a Gemm, so the
                                    plain QDQ forms keep it as a quantized op of its own
* ``NAME_dynamo_qdq_perchannel.onnx``  the new exporter (``dynamo=True``), then QDQ as
                                    ``_qdq_perchannel`` (written only where that exporter works)
* ``NAME_test.npz``                 20 test inputs (``input`` float32, plus ``label`` for the
                                    classifiers), drawn from the training distribution with
                                    another seed, for ``hwgen verify --input``

Quantization: ``onnxruntime.quantization.quantize_static`` after ``quant_pre_process`` (which
folds BatchNormalization into the Conv/Gemm before it), MinMax calibration on 64 synthetic
inputs, symmetric int8 weights (onnxruntime's default).

Usage::

    nice -n 10 python examples/mlperf_tiny/make_models.py [NAME ...]

Without names it builds all five. It runs single-threaded; the whole run takes a few
minutes on one core. With the same torch / onnx / onnxruntime versions reruns give the same
files.
"""
from __future__ import annotations

import copy
import io
import logging
import sys
import tempfile
import time
import warnings
import zipfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper
from onnxruntime.quantization import (
    CalibrationDataReader,
    CalibrationMethod,
    QuantFormat,
    QuantType,
    quantize_static,
)
from onnxruntime.quantization.shape_inference import quant_pre_process

try:
    import torch
    from torch import nn
except ImportError:  # pragma: no cover - optional dependency
    sys.exit("make_models.py needs PyTorch: pip install '.[torch]'")

HERE = Path(__file__).resolve().parent
SEED = 0
N_TEST = 20
N_CALIB = 64
BATCH = 32
LR = 2e-3


# ------------------------------------------------------------------------------ networks

def conv_bn(cin: int, cout: int, k, stride=1, pad=0, groups: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, k, stride, pad, groups=groups, bias=False),
                         nn.BatchNorm2d(cout))


class ResBlock(nn.Module):
    """MLPerf Tiny's ResNet-8 stage: two 3x3 convs; a 1x1 conv shortcut where shape changes."""

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.a = conv_bn(cin, cout, 3, stride, 1)
        self.b = conv_bn(cout, cout, 3, 1, 1)
        self.short = nn.Conv2d(cin, cout, 1, stride) if (stride != 1 or cin != cout) else None

    def forward(self, x):
        y = self.b(torch.relu(self.a(x)))
        s = x if self.short is None else self.short(x)
        return torch.relu(s + y)


class ResNet8(nn.Module):
    def __init__(self, classes: int = 10):
        super().__init__()
        self.stem = conv_bn(3, 16, 3, 1, 1)
        self.s1 = ResBlock(16, 16, 1)
        self.s2 = ResBlock(16, 32, 2)
        self.s3 = ResBlock(32, 64, 2)
        self.pool = nn.AdaptiveAvgPool2d(1)               # exports as GlobalAveragePool
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(64, classes)

    def forward(self, x):
        x = torch.relu(self.stem(x))                     # [N, 16, 32, 32]
        x = self.s3(self.s2(self.s1(x)))                 # [N, 64, 8, 8]
        return self.fc(self.flatten(self.pool(x)))


class DSBlock(nn.Module):
    """Depthwise-separable block: DW3x3-BN-ReLU, PW1x1-BN-ReLU."""

    def __init__(self, cin: int, cout: int, stride: int = 1):
        super().__init__()
        self.dw = conv_bn(cin, cin, 3, stride, 1, groups=cin)
        self.pw = conv_bn(cin, cout, 1)

    def forward(self, x):
        return torch.relu(self.pw(torch.relu(self.dw(x))))


class DSCNN(nn.Module):
    def __init__(self, classes: int = 12, ch: int = 64):
        super().__init__()
        self.stem = conv_bn(1, ch, (10, 4), 2, (5, 1))   # [N, 64, 25, 5]
        self.blocks = nn.Sequential(*[DSBlock(ch, ch) for _ in range(4)])
        self.pool = nn.AvgPool2d((25, 5))                # MLPerf: AveragePooling2D(25, 5)
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(ch, classes)

    def forward(self, x):
        x = self.blocks(torch.relu(self.stem(x)))
        return self.fc(self.flatten(self.pool(x)))


class MobileNetV1(nn.Module):
    # (pointwise channels at width 1.0, stride of the depthwise conv)
    CFG = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2),
           (512, 1), (512, 1), (512, 1), (512, 1), (512, 1), (1024, 2), (1024, 1)]

    def __init__(self, alpha: float = 0.25, classes: int = 2):
        super().__init__()
        c = int(32 * alpha)
        self.stem = conv_bn(3, c, 3, 2, 1)               # [N, 8, 48, 48]
        blocks = []
        for ch, s in self.CFG:
            blocks.append(DSBlock(c, int(ch * alpha), s))
            c = int(ch * alpha)
        self.blocks = nn.Sequential(*blocks)             # [N, 256, 3, 3]
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(c, classes)

    def forward(self, x):
        x = self.blocks(torch.relu(self.stem(x)))
        return self.fc(self.flatten(self.pool(x)))


def fc_bn_relu(cin: int, cout: int) -> list[nn.Module]:
    return [nn.Linear(cin, cout), nn.BatchNorm1d(cout), nn.ReLU()]


class AutoEncoder(nn.Module):
    def __init__(self, dim: int = 640, hidden: int = 128, code: int = 8):
        super().__init__()
        layers = fc_bn_relu(dim, hidden)
        for _ in range(3):
            layers += fc_bn_relu(hidden, hidden)
        layers += fc_bn_relu(hidden, code)
        layers += fc_bn_relu(code, hidden)
        for _ in range(3):
            layers += fc_bn_relu(hidden, hidden)
        layers.append(nn.Linear(hidden, dim))
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)


class TFC(nn.Module):
    """FINN's TFC: 784 -> 64 -> 64 -> 64 -> 10 (here float, BN + ReLU)."""

    def __init__(self, classes: int = 10, hidden: int = 64):
        super().__init__()
        self.flatten = nn.Flatten()
        self.net = nn.Sequential(*fc_bn_relu(784, hidden), *fc_bn_relu(hidden, hidden),
                                 *fc_bn_relu(hidden, hidden), nn.Linear(hidden, classes))

    def forward(self, x):
        return self.net(self.flatten(x))


# ------------------------------------------------------------------------------ data

def _smooth(rng: np.random.Generator, shape: tuple[int, ...], passes: int) -> np.ndarray:
    """Random field smoothed along its last two axes (box filter, `passes` times)."""
    t = rng.standard_normal(shape)
    for _ in range(passes):
        for ax in (-1, -2):
            t = (t + np.roll(t, 1, ax) + np.roll(t, -1, ax)) / 3.0
    return t / (t.std() + 1e-9)


def data_for(name: str, n: int, seed: int):
    """The same templates (seed SEED) for training, calibration and test; samples by `seed`."""
    spec = NETS[name]
    rng_t = np.random.default_rng(SEED)                   # the class templates / basis
    rng_s = np.random.default_rng(seed)                   # the samples
    if spec["kind"] == "lowrank":
        basis = rng_t.standard_normal((8, spec["shape"][0])) / np.sqrt(8)
        z = rng_s.standard_normal((n, 8))
        x = z @ basis + 0.1 * rng_s.standard_normal((n, spec["shape"][0]))
        return x.astype(np.float32), None
    shape = spec["shape"]
    tmpl = np.stack([_smooth(rng_t, shape, spec["passes"]) for _ in range(spec["classes"])])
    y = rng_s.integers(0, spec["classes"], n)
    gain = rng_s.uniform(0.5, 1.5, (n,) + (1,) * len(shape))
    x = tmpl[y] * gain + 0.5 * rng_s.standard_normal((n,) + shape)
    if spec["unit"]:                                      # 8-bit images scaled to [0, 1]
        x = np.round(np.clip(0.5 + 0.2 * x, 0.0, 1.0) * 255.0) / 255.0
    return x.astype(np.float32), y.astype(np.int64)


NETS = {
    "resnet8": dict(cls=ResNet8, kind="classes", shape=(3, 32, 32), classes=10, passes=3,
                    unit=True, n_train=512, epochs=4, out="logits"),
    "dscnn": dict(cls=DSCNN, kind="classes", shape=(1, 49, 10), classes=12, passes=2,
                  unit=False, n_train=512, epochs=4, out="logits"),
    "mobilenet_v1_025": dict(cls=MobileNetV1, kind="classes", shape=(3, 96, 96), classes=2,
                             passes=6, unit=True, n_train=256, epochs=3, out="logits"),
    "autoencoder": dict(cls=AutoEncoder, kind="lowrank", shape=(640,), n_train=512, epochs=6,
                        out="output"),
    "tfc": dict(cls=TFC, kind="classes", shape=(1, 28, 28), classes=10, passes=2, unit=True,
                n_train=512, epochs=4, out="logits"),
}


# ------------------------------------------------------------------------------ steps

def train(model: nn.Module, x: np.ndarray, y: np.ndarray | None, epochs: int) -> float:
    """Adam on shuffled mini-batches; returns the last epoch's mean loss."""
    gen = torch.Generator().manual_seed(SEED)
    xt = torch.from_numpy(x)
    yt = None if y is None else torch.from_numpy(y)
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    loss_fn = nn.MSELoss() if y is None else nn.CrossEntropyLoss()
    last = 0.0
    for _ in range(epochs):
        model.train()
        perm = torch.randperm(len(xt), generator=gen)
        total, count = 0.0, 0
        for i in range(0, len(xt), BATCH):
            idx = perm[i:i + BATCH]
            if len(idx) < 2:                              # BatchNorm needs two samples
                continue
            opt.zero_grad()
            out = model(xt[idx])
            loss = loss_fn(out, xt[idx] if yt is None else yt[idx])
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(idx)
            count += len(idx)
        last = total / count
    # BatchNorm's running statistics, averaged over the whole training set with the final
    # weights (a few epochs leave the exponential averages far from them)
    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    for bn in bns:
        bn.reset_running_stats()
        bn.momentum = None                                # cumulative average
    with torch.no_grad():
        for i in range(0, len(xt), BATCH):
            if len(xt[i:i + BATCH]) > 1:
                model(xt[i:i + BATCH])
    for bn in bns:
        bn.momentum = 0.1
    model.eval()
    return last


def fuse_linear_bn(model: nn.Module) -> nn.Module:
    """A copy of `model` with every Linear -> BatchNorm1d pair of an nn.Sequential folded into
    the Linear (what a user does when the quantizer keeps BatchNormalization after a Gemm)."""
    from torch.nn.utils.fusion import fuse_linear_bn_eval
    model = copy.deepcopy(model).eval()
    for mod in list(model.modules()):
        if not isinstance(mod, nn.Sequential):
            continue
        layers, out = list(mod), []
        for layer in layers:
            if isinstance(layer, nn.BatchNorm1d) and out and isinstance(out[-1], nn.Linear):
                out[-1] = fuse_linear_bn_eval(out[-1], layer)
            else:
                out.append(layer)
        for k in list(mod._modules):
            del mod._modules[k]
        for k, layer in enumerate(out):
            mod.add_module(str(k), layer)
    return model


def inline_identity_initializers(model: onnx.ModelProto) -> None:
    """The TorchScript exporter may dedupe equal parameters and re-create them with Identity
    nodes (e.g. BatchNorm running_var equal to its weight); make them plain initializers."""
    inits = {i.name: i for i in model.graph.initializer}
    keep = []
    for node in model.graph.node:
        if node.op_type == "Identity" and node.input[0] in inits:
            arr = numpy_helper.to_array(inits[node.input[0]])
            model.graph.initializer.append(numpy_helper.from_array(arr, node.output[0]))
        else:
            keep.append(node)
    del model.graph.node[:]
    model.graph.node.extend(keep)


def export_torchscript(model: nn.Module, shape, out: str, path: Path) -> None:
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # the TorchScript exporter's deprecation notice
        torch.onnx.export(model, torch.zeros((1,) + tuple(shape)), buf, dynamo=False,
                          opset_version=17, input_names=["input"], output_names=[out],
                          dynamic_axes={"input": {0: "N"}, out: {0: "N"}},
                          do_constant_folding=False,   # keep BatchNormalization in the float model
                          training=torch.onnx.TrainingMode.EVAL)
    m = onnx.load_from_string(buf.getvalue())
    inline_identity_initializers(m)
    onnx.checker.check_model(m, full_check=True)
    onnx.save(m, str(path))


def export_dynamo(model: nn.Module, shape, out: str, path: Path) -> None:
    """The new exporter (torch.export + onnxscript), dynamic batch axis."""
    batch = torch.export.Dim("N", min=1, max=1024)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prog = torch.onnx.export(model, (torch.zeros((2,) + tuple(shape)),), dynamo=True,
                                 input_names=["input"], output_names=[out],
                                 dynamic_shapes=({0: batch},), verbose=False)
    m = prog.model_proto
    # its nodes carry the Python stack trace (absolute paths, line numbers) of the code that
    # made them: drop it, so the files neither leak paths nor change with this script's lines
    for node in m.graph.node:
        del node.metadata_props[:]
        node.doc_string = ""
    onnx.checker.check_model(m, full_check=True)
    onnx.save(m, str(path))


class RowsReader(CalibrationDataReader):
    def __init__(self, x: np.ndarray, batch: int = 16):
        self._batches = iter([x[i:i + batch] for i in range(0, len(x), batch)])

    def get_next(self):
        b = next(self._batches, None)
        return None if b is None else {"input": b}


def quantize(float_path: Path, out_path: Path, calib: np.ndarray, per_channel: bool,
             act: QuantType) -> None:
    with tempfile.TemporaryDirectory(prefix="mlperf_q.") as tmp:
        pre = Path(tmp) / "pre.onnx"
        quant_pre_process(str(float_path), str(pre))
        quantize_static(str(pre), str(out_path), RowsReader(calib),
                        quant_format=QuantFormat.QDQ, per_channel=per_channel,
                        activation_type=act, weight_type=QuantType.QInt8,
                        calibrate_method=CalibrationMethod.MinMax,
                        extra_options={"ActivationSymmetric": False, "WeightSymmetric": True})
    m = onnx.load(str(out_path))
    onnx.checker.check_model(m, full_check=True)


def run(path: Path, x: np.ndarray) -> np.ndarray:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: x})[0]


def score(out: np.ndarray, x: np.ndarray, y: np.ndarray | None) -> str:
    if y is None:
        return f"mse {float(((out - x) ** 2).mean()):.4f}"
    return f"acc {float((out.argmax(1) == y).mean()):.2f}"


def save_npz_deterministic(path: Path, **arrays: np.ndarray) -> None:
    """Like np.savez_compressed, but with a fixed zip timestamp so reruns give identical bytes."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, arr in arrays.items():
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.ascontiguousarray(arr), allow_pickle=False)
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, buf.getvalue())


VARIANTS = (("qdq", False, QuantType.QUInt8),
            ("qdq_perchannel", True, QuantType.QUInt8),
            ("qdq_int8", True, QuantType.QInt8))


def build(name: str) -> list[Path]:
    spec = NETS[name]
    t0 = time.perf_counter()
    torch.manual_seed(SEED)
    model = spec["cls"]()
    params = sum(p.numel() for p in model.parameters())
    x_tr, y_tr = data_for(name, spec["n_train"], SEED + 1)
    x_cal, _ = data_for(name, N_CALIB, SEED + 2)
    x_te, y_te = data_for(name, N_TEST, SEED + 3)
    loss = train(model, x_tr, y_tr, spec["epochs"])
    print(f"{name}: {params} parameters, {spec['epochs']} epochs on {len(x_tr)} samples, "
          f"last loss {loss:.4f} ({time.perf_counter() - t0:.1f} s)")
    written = []
    f_path = HERE / f"{name}.onnx"
    export_torchscript(model, spec["shape"], spec["out"], f_path)
    written.append(f_path)
    ref = run(f_path, x_te)
    print(f"  float (TorchScript)        {score(ref, x_te, y_te)}")
    for suffix, per_channel, act in VARIANTS:
        q_path = HERE / f"{name}_{suffix}.onnx"
        quantize(f_path, q_path, x_cal, per_channel, act)
        out = run(q_path, x_te)
        print(f"  {suffix:26s} {score(out, x_te, y_te)}  max |q - float| "
              f"{float(np.abs(out - ref).max()):.4f}")
        written.append(q_path)
    if any(isinstance(m, nn.BatchNorm1d) for m in model.modules()):
        # onnxruntime's quant_pre_process folds BatchNormalization into a Conv, not into a
        # Gemm: the QDQ models above keep it as a quantized op of its own. These variants fold
        # it in PyTorch before the (TorchScript) export; their float model is not kept.
        with tempfile.TemporaryDirectory(prefix="mlperf_fused.") as tmp:
            fused = fuse_linear_bn(model)
            b_float = Path(tmp) / f"{name}_bnfused.onnx"
            export_torchscript(fused, spec["shape"], spec["out"], b_float)
            b_ref = run(b_float, x_te)
            print(f"  float (Linear+BN fused)    {score(b_ref, x_te, y_te)}  max |fused - "
                  f"unfused| {float(np.abs(b_ref - ref).max()):.2e}")
            for suffix, per_channel, act in VARIANTS[:2]:
                q_path = HERE / f"{name}_bnfused_{suffix}.onnx"
                quantize(b_float, q_path, x_cal, per_channel, act)
                out = run(q_path, x_te)
                print(f"  {'bnfused_' + suffix:26s} {score(out, x_te, y_te)}")
                written.append(q_path)
    # the new exporter: its float model is not kept, only its quantized form
    q_path = HERE / f"{name}_dynamo_qdq_perchannel.onnx"
    q_path.unlink(missing_ok=True)                        # no stale file if the export fails
    with tempfile.TemporaryDirectory(prefix="mlperf_dyn.") as tmp:
        d_float = Path(tmp) / f"{name}_dynamo.onnx"
        try:
            export_dynamo(model, spec["shape"], spec["out"], d_float)
        except Exception as e:  # noqa: BLE001 - record why, go on
            print(f"  dynamo=True export failed: {type(e).__name__}: {str(e)[:300]}")
        else:
            d_out = run(d_float, x_te)
            print(f"  float (dynamo=True)        {score(d_out, x_te, y_te)}  max |dynamo - "
                  f"TorchScript| {float(np.abs(d_out - ref).max()):.2e}")
            try:
                quantize(d_float, q_path, x_cal, True, QuantType.QUInt8)
            except Exception as e:  # noqa: BLE001
                print(f"  dynamo=True quantization failed: {type(e).__name__}: {str(e)[:300]}")
            else:
                out = run(q_path, x_te)
                print(f"  {'dynamo_qdq_perchannel':26s} {score(out, x_te, y_te)}")
                written.append(q_path)
    npz = HERE / f"{name}_test.npz"
    arrays = {"input": x_te} if y_te is None else {"input": x_te, "label": y_te}
    save_npz_deterministic(npz, **arrays)
    written.append(npz)
    print(f"  done in {time.perf_counter() - t0:.1f} s")
    return written


def main(argv: list[str]) -> None:
    logging.getLogger().setLevel(logging.ERROR)   # quantize_static's advisory warnings
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    torch.use_deterministic_algorithms(True)
    names = argv or list(NETS)
    unknown = [n for n in names if n not in NETS]
    if unknown:
        sys.exit(f"unknown network(s) {', '.join(unknown)}; choose from {', '.join(NETS)}")
    written = []
    for name in names:
        written += build(name)
    print()
    for p in written:
        print(f"wrote {p.relative_to(HERE.parent.parent)} ({p.stat().st_size} bytes)")


if __name__ == "__main__":
    main(sys.argv[1:])
