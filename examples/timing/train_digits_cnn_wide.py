"""A digits CNN that is none of hwgen's example designs, for the timing table.

A user's own small CNN as a user would make it: two 3×3 convolutions with max pooling,
wider than ``examples/digits_cnn.onnx`` (16 and 32 channels), trained on scikit-learn's 8×8
digits and quantized with onnxruntime (QDQ, per-tensor, uint8 activations), with the same
training, export and quantization as ``examples/train_digits_cnn.py``:

    Conv3x3(1->16, pad 1) -> Relu -> MaxPool2x2 -> Conv3x3(16->32, pad 1) -> Relu
    -> MaxPool2x2 -> Flatten -> Gemm(128->10)

Needs PyTorch (CPU) and scikit-learn, like the other training scripts. Writes
``digits_cnn_wide.onnx`` and ``digits_cnn_wide_qdq.onnx`` next to this script (reruns give
identical bytes with the same library versions).
"""
from __future__ import annotations

import logging
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import torch  # noqa: E402
from torch import nn  # noqa: E402
from train_digits_cnn import (  # noqa: E402
    N_CALIB,
    SEED,
    QuantFormat,
    export,
    load_split,
    predict,
    quantize,
    train,
)


class DigitsCNNWide(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.pool1 = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.pool2 = nn.MaxPool2d(2)
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(32 * 2 * 2, 10)

    def forward(self, x):
        x = self.pool1(torch.relu(self.conv1(x)))              # [N, 16, 4, 4]
        x = self.pool2(torch.relu(self.conv2(x)))              # [N, 32, 2, 2]
        return self.fc(self.flatten(x))


def main() -> None:
    logging.getLogger().setLevel(logging.ERROR)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    x_tr, x_te, y_tr, y_te = load_split()
    torch.manual_seed(SEED)
    model = DigitsCNNWide()
    acc = train(model, x_tr, y_tr, x_te, y_te)
    float_path, q_path = HERE / "digits_cnn_wide.onnx", HERE / "digits_cnn_wide_qdq.onnx"
    export(model, float_path)
    with tempfile.TemporaryDirectory():
        quantize(float_path, q_path, x_tr[:N_CALIB], QuantFormat.QDQ, per_channel=False)
    q_acc = float((predict(q_path, x_te) == y_te).mean())
    print(f"digits_cnn_wide: float {acc:.4f}, QDQ {q_acc:.4f} (test accuracy, "
          f"{len(x_te)} images)")


if __name__ == "__main__":
    main()
