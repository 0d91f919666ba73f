"""Train a small MLP on scikit-learn's 8x8 digits and export float + QDQ-quantized ONNX models.

Optional dependency: this example needs scikit-learn (``pip install scikit-learn``), which hwgen
itself does not need. It also uses numpy, onnx and onnxruntime (with onnxruntime.quantization).
It downloads nothing: ``load_digits`` ships with scikit-learn.

    python examples/train_digits_mlp.py

What it does:

1. ``load_digits`` (1797 images, 64 pixels 0..16), inputs scaled to [0, 1] by /16, a stratified
   75/25 train/test split with a fixed seed;
2. ``MLPClassifier(hidden_layer_sizes=(32, 32))`` with a fixed ``random_state``;
3. builds the float ONNX model by hand from ``coefs_`` / ``intercepts_``:
   ``input [N,64] -> Gemm(transB=1) -> Relu -> Gemm -> Relu -> Gemm -> logits [N,10]``
   (weights stored ``[out, in]`` as PyTorch exports ``nn.Linear``);
4. quantizes it with ``onnxruntime.quantization.quantize_static`` in QDQ format (uint8 asymmetric
   activations, int8 symmetric weights, MinMax calibration on the training images, after
   ``quant_pre_process``), once per-tensor and once per-channel;
5. prints the float accuracy and each quantized model's accuracy under onnxruntime.

Files written next to this script (running it again rewrites them byte for byte):

* ``digits_mlp.onnx``                 float model
* ``digits_mlp_qdq.onnx``             QDQ, per-tensor weight scales
* ``digits_mlp_qdq_perchannel.onnx``  QDQ, per-channel (per output neuron) weight scales
* ``digits_test.npz``                 the whole test split: ``input`` float32 [N,64] in [0,1],
                                      ``label`` int64 [N]
"""
from __future__ import annotations

import io
import logging
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import (
    CalibrationDataReader,
    CalibrationMethod,
    QuantFormat,
    QuantType,
    quantize_static,
)
from onnxruntime.quantization.shape_inference import quant_pre_process

try:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    from sklearn.neural_network import MLPClassifier
except ImportError:  # pragma: no cover - optional dependency
    sys.exit("train_digits_mlp.py needs scikit-learn: pip install scikit-learn")

HERE = Path(__file__).resolve().parent
SEED = 0
HIDDEN = (32, 32)


def train():
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)          # [1797, 64] in [0, 1]
    y = digits.target.astype(np.int64)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=0.25, random_state=SEED,
                                              stratify=y)
    clf = MLPClassifier(hidden_layer_sizes=HIDDEN, activation="relu", solver="adam",
                        max_iter=600, random_state=SEED)
    clf.fit(x_tr, y_tr)
    return clf, x_tr, x_te, y_tr, y_te


def build_float_model(clf) -> onnx.ModelProto:
    """Gemm(transB=1) + Relu layers from the classifier's coefs_ ([in, out]) and intercepts_."""
    nodes, inits = [], []
    x = "input"
    n_layers = len(clf.coefs_)
    for i, (w, b) in enumerate(zip(clf.coefs_, clf.intercepts_)):
        last = i == n_layers - 1
        out = "logits" if last else f"fc{i}_out"
        inits.append(numpy_helper.from_array(np.ascontiguousarray(w.T, dtype=np.float32),
                                             f"fc{i}.weight"))
        inits.append(numpy_helper.from_array(np.asarray(b, dtype=np.float32), f"fc{i}.bias"))
        nodes.append(helper.make_node("Gemm", [x, f"fc{i}.weight", f"fc{i}.bias"], [out],
                                      name=f"fc{i}", alpha=1.0, beta=1.0, transB=1))
        x = out
        if not last:
            nodes.append(helper.make_node("Relu", [x], [f"relu{i}_out"], name=f"relu{i}"))
            x = f"relu{i}_out"
    n_in, n_out = clf.coefs_[0].shape[0], clf.coefs_[-1].shape[1]
    graph = helper.make_graph(
        nodes, "digits_mlp",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", n_in])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", n_out])],
        initializer=inits)
    opsets = [helper.make_opsetid("", 17)]
    model = helper.make_model(graph, opset_imports=opsets, producer_name="hwgen-examples",
                              ir_version=helper.find_min_ir_version_for(opsets))
    onnx.checker.check_model(model, full_check=True)
    return model


class RowsReader(CalibrationDataReader):
    """Feeds the calibration images in batches."""

    def __init__(self, x: np.ndarray, batch: int = 32):
        self._batches = iter([x[i:i + batch] for i in range(0, len(x), batch)])

    def get_next(self):
        b = next(self._batches, None)
        return None if b is None else {"input": b}


def quantize(float_path: Path, out_path: Path, calib: np.ndarray, per_channel: bool):
    with tempfile.TemporaryDirectory(prefix="digits_q.") as tmp:
        pre = Path(tmp) / "pre.onnx"
        # symbolic shape inference needs sympy and only matters for transformer-like models
        quant_pre_process(str(float_path), str(pre), skip_symbolic_shape=True)
        quantize_static(str(pre), str(out_path), RowsReader(calib),
                        quant_format=QuantFormat.QDQ, per_channel=per_channel,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                        calibrate_method=CalibrationMethod.MinMax,
                        extra_options={"ActivationSymmetric": False, "WeightSymmetric": True})


def predict(path: Path, x: np.ndarray) -> np.ndarray:
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(None, {"input": x})[0].argmax(axis=1)


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
    clf, x_tr, x_te, y_tr, y_te = train()
    print(f"train {len(x_tr)} / test {len(x_te)} images; MLP 64-{HIDDEN[0]}-{HIDDEN[1]}-10, "
          f"{clf.n_iter_} epochs")
    print(f"sklearn float accuracy:           {clf.score(x_te, y_te):.4f}")

    f_path = HERE / "digits_mlp.onnx"
    q_path = HERE / "digits_mlp_qdq.onnx"
    qc_path = HERE / "digits_mlp_qdq_perchannel.onnx"
    onnx.save(build_float_model(clf), str(f_path))
    quantize(f_path, q_path, x_tr, per_channel=False)
    quantize(f_path, qc_path, x_tr, per_channel=True)
    save_npz_deterministic(HERE / "digits_test.npz", input=x_te.astype(np.float32),
                           label=y_te.astype(np.int64))

    p_float = predict(f_path, x_te)
    print(f"onnx float accuracy:              {(p_float == y_te).mean():.4f}")
    for label, path in (("per-tensor", q_path), ("per-channel", qc_path)):
        p = predict(path, x_te)
        print(f"onnx QDQ {label + ' accuracy:':24s} {(p == y_te).mean():.4f}  "
              f"(same prediction as float on {(p == p_float).sum()}/{len(p)})")
    for p in (f_path, q_path, qc_path, HERE / "digits_test.npz"):
        print(f"wrote {p.name} ({p.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
