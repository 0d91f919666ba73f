"""Train two small CNNs on scikit-learn's 8x8 digits and export float + quantized ONNX models.

Optional dependencies: this example needs PyTorch (CPU build) and scikit-learn, which hwgen
itself does not need, plus numpy, onnx and onnxruntime (with onnxruntime.quantization). It
downloads nothing: ``load_digits`` ships with scikit-learn. Keep it out of the project's dev
environment, e.g.::

    python3 -m venv /work/venv-train
    /work/venv-train/bin/pip install torch numpy onnx onnxruntime scikit-learn
    /work/venv-train/bin/python examples/train_digits_cnn.py

What it does:

1. ``load_digits`` (1797 images, 8x8 pixels 0..16), inputs scaled to [0, 1] by /16 and shaped
   ``[N, 1, 8, 8]``, the same stratified 75/25 train/test split (same seed) as
   ``train_digits_mlp.py``;
2. trains two small networks with Adam, seeded and deterministic (single thread,
   ``torch.use_deterministic_algorithms``):

   * ``digits_cnn``: Conv3x3(1->8, pad 1) -> BatchNorm -> Relu -> MaxPool2x2
     -> Conv3x3(8->16, pad 1) -> Relu -> MaxPool2x2 -> Flatten -> Gemm(64->10)
   * ``digits_resnet``: Conv3x3(1->8) -> Relu -> [Conv3x3(8->8) -> Relu -> Conv3x3(8->8)
     + skip] -> Relu -> depthwise Conv3x3(8, group 8, stride 2) -> Relu -> Conv1x1(8->16)
     -> Relu -> GlobalAveragePool -> Flatten -> Gemm(16->10)

3. exports each with the classic TorchScript exporter (``dynamo=False``), opset 17, input
   ``input`` ``[N,1,8,8]``, output ``logits`` ``[N,10]``, dynamic batch axis, *without* constant
   folding so the float ``digits_cnn.onnx`` keeps its ``BatchNormalization`` node (onnxruntime's
   ``quant_pre_process`` then folds it into the Conv before quantizing);
4. quantizes each with ``onnxruntime.quantization.quantize_static`` (uint8 asymmetric activations,
   int8 symmetric weights, MinMax calibration on 200 training images, after
   ``quant_pre_process``) in three forms: QDQ per-tensor, QDQ per-channel and QOperator
   (``QLinearConv``, ``QLinearAdd``, ``QGemm``, ... ; per-tensor);
5. prints the float and quantized accuracies (onnxruntime) and each quantized model's op list.

Files written next to this script (running it again rewrites them byte for byte):

* ``digits_cnn.onnx``, ``digits_resnet.onnx``                     float models
* ``digits_{cnn,resnet}_qdq.onnx``                                QDQ, per-tensor weight scales
* ``digits_{cnn,resnet}_qdq_perchannel.onnx``                     QDQ, per-output-channel scales
* ``digits_{cnn,resnet}_qop.onnx``                                QOperator, per-tensor
* ``digits_images_test.npz``  the whole test split: ``input`` float32 [N,1,8,8] in [0,1],
                              ``label`` int64 [N] (same images as ``digits_test.npz``)

Determinism: with the same torch / onnx / onnxruntime versions, reruns (from any working
directory) give byte-identical files. ``quant_pre_process``'s symbolic shape inference needs sympy
(which torch installs); without it the quantized files differ only in their ``value_info`` shape
annotations (same nodes, same initializers).
"""
from __future__ import annotations

import io
import logging
import sys
import tempfile
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
    sys.exit("train_digits_cnn.py needs PyTorch: pip install torch")

HERE = Path(__file__).resolve().parent
SEED = 0            # same split seed as train_digits_mlp.py
N_CALIB = 200       # calibration images (from the training split)
EPOCHS = 30
BATCH = 32
LR = 1e-2


def load_split():
    try:   # here, so that the networks below can be imported without scikit-learn
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split
    except ImportError:  # pragma: no cover - optional dependency
        sys.exit("train_digits_cnn.py needs scikit-learn: pip install scikit-learn")
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)          # [1797, 64] in [0, 1]
    y = digits.target.astype(np.int64)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=0.25, random_state=SEED,
                                              stratify=y)
    return (x_tr.reshape(-1, 1, 8, 8), x_te.reshape(-1, 1, 8, 8), y_tr, y_te)


class DigitsCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.pool1 = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.pool2 = nn.MaxPool2d(2)
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(16 * 2 * 2, 10)

    def forward(self, x):
        x = self.pool1(torch.relu(self.bn1(self.conv1(x))))    # [N, 8, 4, 4]
        x = self.pool2(torch.relu(self.conv2(x)))              # [N, 16, 2, 2]
        return self.fc(self.flatten(x))


class DigitsResNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(1, 8, 3, padding=1)
        self.block_a = nn.Conv2d(8, 8, 3, padding=1)
        self.block_b = nn.Conv2d(8, 8, 3, padding=1)
        self.dw = nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=8)
        self.pw = nn.Conv2d(8, 16, 1)
        self.gap = nn.AdaptiveAvgPool2d(1)                     # exports as GlobalAveragePool
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = torch.relu(self.stem(x))                            # [N, 8, 8, 8]
        y = self.block_b(torch.relu(self.block_a(x)))
        x = torch.relu(x + y)                                   # residual Add
        x = torch.relu(self.dw(x))                              # [N, 8, 4, 4]
        x = torch.relu(self.pw(x))                              # [N, 16, 4, 4]
        return self.fc(self.flatten(self.gap(x)))


def train(model: nn.Module, x_tr, y_tr, x_te, y_te) -> float:
    """Adam on shuffled mini-batches; returns the torch float test accuracy."""
    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED)
    xt, yt = torch.from_numpy(x_tr), torch.from_numpy(y_tr)
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    loss_fn = nn.CrossEntropyLoss()
    for _ in range(EPOCHS):
        model.train()
        perm = torch.randperm(len(xt), generator=gen)
        for i in range(0, len(xt), BATCH):
            idx = perm[i:i + BATCH]
            opt.zero_grad()
            loss_fn(model(xt[idx]), yt[idx]).backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        pred = model(torch.from_numpy(x_te)).argmax(dim=1).numpy()
    return float((pred == y_te).mean())


def inline_identity_initializers(model: onnx.ModelProto) -> None:
    """The exporter may dedupe equal parameters and re-create them with Identity nodes (e.g.
    BatchNorm running_var equal to its weight); turn those back into plain initializers."""
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


def export(model: nn.Module, path: Path) -> None:
    model.eval()
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # the TorchScript exporter's deprecation notice
        torch.onnx.export(model, torch.zeros(1, 1, 8, 8), buf, dynamo=False, opset_version=17,
                          input_names=["input"], output_names=["logits"],
                          dynamic_axes={"input": {0: "N"}, "logits": {0: "N"}},
                          do_constant_folding=False,   # keep BatchNormalization in the float model
                          training=torch.onnx.TrainingMode.EVAL)
    m = onnx.load_from_string(buf.getvalue())
    inline_identity_initializers(m)
    onnx.checker.check_model(m, full_check=True)
    onnx.save(m, str(path))


class RowsReader(CalibrationDataReader):
    """Feeds the calibration images in batches."""

    def __init__(self, x: np.ndarray, batch: int = 32):
        self._batches = iter([x[i:i + batch] for i in range(0, len(x), batch)])

    def get_next(self):
        b = next(self._batches, None)
        return None if b is None else {"input": b}


def _has_sympy() -> bool:
    try:
        import sympy  # noqa: F401
    except ImportError:
        return False
    return True


def quantize(float_path: Path, out_path: Path, calib: np.ndarray, fmt: QuantFormat,
             per_channel: bool) -> None:
    with tempfile.TemporaryDirectory(prefix="digits_q.") as tmp:
        pre = Path(tmp) / "pre.onnx"
        # folds BatchNormalization into the Conv, infers shapes (symbolic inference needs sympy)
        quant_pre_process(str(float_path), str(pre), skip_symbolic_shape=not _has_sympy())
        quantize_static(str(pre), str(out_path), RowsReader(calib),
                        quant_format=fmt, per_channel=per_channel,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                        calibrate_method=CalibrationMethod.MinMax,
                        extra_options={"ActivationSymmetric": False, "WeightSymmetric": True})


def predict(path: Path, x: np.ndarray) -> np.ndarray:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    return sess.run(None, {"input": x})[0].argmax(axis=1)


def op_list(path: Path) -> str:
    m = onnx.load(str(path))
    return " ".join(f"{n.domain}.{n.op_type}" if n.domain not in ("", "ai.onnx") else n.op_type
                    for n in m.graph.node)


def save_npz_deterministic(path: Path, **arrays: np.ndarray) -> None:
    """Like np.savez_compressed, but with a fixed zip timestamp so reruns give identical bytes."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, arr in arrays.items():
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.ascontiguousarray(arr), allow_pickle=False)
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, buf.getvalue())


def main() -> None:
    logging.getLogger().setLevel(logging.ERROR)  # quantize_static's advisory warnings
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    x_tr, x_te, y_tr, y_te = load_split()
    calib = x_tr[:N_CALIB]
    print(f"train {len(x_tr)} / test {len(x_te)} images, {EPOCHS} epochs of Adam each, "
          f"calibration on {len(calib)} training images")

    written = []
    for name, cls in (("digits_cnn", DigitsCNN), ("digits_resnet", DigitsResNet)):
        torch.manual_seed(SEED)
        model = cls()
        acc = train(model, x_tr, y_tr, x_te, y_te)
        print(f"\n{name}: torch float accuracy        {acc:.4f}")
        f_path = HERE / f"{name}.onnx"
        export(model, f_path)
        p_float = predict(f_path, x_te)
        print(f"{name}: onnx float accuracy         {(p_float == y_te).mean():.4f}")
        written.append(f_path)
        for suffix, fmt, per_channel in (("qdq", QuantFormat.QDQ, False),
                                         ("qdq_perchannel", QuantFormat.QDQ, True),
                                         ("qop", QuantFormat.QOperator, False)):
            q_path = HERE / f"{name}_{suffix}.onnx"
            quantize(f_path, q_path, calib, fmt, per_channel)
            p = predict(q_path, x_te)
            print(f"{name}: onnx {suffix + ' accuracy':24s}{(p == y_te).mean():.4f}  "
                  f"(same prediction as float on {(p == p_float).sum()}/{len(p)})")
            print(f"    ops: {op_list(q_path)}")
            written.append(q_path)

    npz = HERE / "digits_images_test.npz"
    save_npz_deterministic(npz, input=x_te.astype(np.float32), label=y_te.astype(np.int64))
    written.append(npz)
    print()
    for p in written:
        print(f"wrote {p.name} ({p.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
