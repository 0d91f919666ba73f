"""The committed CNN examples (examples/train_digits_cnn.py): valid ONNX, onnxruntime runs them on
the shipped test images with >= 85 % accuracy, and each quantized form has the expected ops.

Needs only onnx + onnxruntime (not torch): it checks the committed artifacts, it does not retrain.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

EX = Path(__file__).resolve().parents[2] / "examples"
TEST_SET = EX / "digits_images_test.npz"
NETS = ["digits_cnn", "digits_resnet"]
FORMS = ["", "_qdq", "_qdq_perchannel", "_qop"]
MODELS = [f"{net}{form}.onnx" for net in NETS for form in FORMS]


@pytest.fixture(scope="module")
def test_set():
    with np.load(TEST_SET) as z:
        return z["input"], z["label"]


def _ops(model: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in model.graph.node]


def test_test_set_shape(test_set):
    x, y = test_set
    assert x.dtype == np.float32 and x.ndim == 4 and x.shape[1:] == (1, 8, 8)
    assert len(x) >= 300 and y.shape == (len(x),)
    assert 0.0 <= x.min() and x.max() <= 1.0
    assert set(np.unique(y)) == set(range(10))


def test_same_images_as_mlp_test_set(test_set):
    """Same split (seed) as train_digits_mlp.py: the same images in the same order."""
    mlp = EX / "digits_test.npz"
    if not mlp.exists():
        pytest.skip("digits_test.npz not present")
    x, y = test_set
    with np.load(mlp) as z:
        np.testing.assert_array_equal(z["input"], x.reshape(len(x), 64))
        np.testing.assert_array_equal(z["label"], y)


@pytest.mark.parametrize("name", MODELS)
def test_model_checks_and_accuracy(name, test_set):
    path = EX / name
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)
    assert [i.name for i in model.graph.input] == ["input"]
    assert [o.name for o in model.graph.output] == ["logits"]
    x, y = test_set
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    logits = sess.run(None, {"input": x})[0]
    assert logits.shape == (len(x), 10)
    acc = float((logits.argmax(axis=1) == y).mean())
    assert acc >= 0.85, f"{name}: accuracy {acc:.4f}"


@pytest.mark.parametrize("net", NETS)
def test_float_models_are_plain(net):
    ops = _ops(onnx.load(str(EX / f"{net}.onnx")))
    assert "QuantizeLinear" not in ops and "DequantizeLinear" not in ops
    assert "Conv" in ops and "Relu" in ops and ops[-1] == "Gemm"
    if net == "digits_cnn":
        assert "BatchNormalization" in ops and ops.count("MaxPool") == 2
    else:
        assert "Add" in ops and "GlobalAveragePool" in ops


@pytest.mark.parametrize("net", NETS)
@pytest.mark.parametrize("form", ["_qdq", "_qdq_perchannel"])
def test_qdq_ops(net, form):
    model = onnx.load(str(EX / f"{net}{form}.onnx"))
    ops = _ops(model)
    assert "QuantizeLinear" in ops and "DequantizeLinear" in ops and "Conv" in ops
    assert "QLinearConv" not in ops
    assert all(n.domain in ("", "ai.onnx") for n in model.graph.node)
    if net == "digits_resnet":
        assert "Add" in ops and "GlobalAveragePool" in ops
        convs = [n for n in model.graph.node if n.op_type == "Conv"]
        assert any(a.name == "group" and a.i == 8 for n in convs for a in n.attribute)
    else:
        assert ops.count("MaxPool") == 2


@pytest.mark.parametrize("net", NETS)
def test_qop_ops(net):
    model = onnx.load(str(EX / f"{net}_qop.onnx"))
    ops = _ops(model)
    assert "QLinearConv" in ops and "Conv" not in ops
    assert ops[0] == "QuantizeLinear" and ops[-1] == "DequantizeLinear"
    ms = {n.op_type for n in model.graph.node if n.domain == "com.microsoft"}
    assert "QGemm" in ms
    if net == "digits_resnet":
        assert {"QLinearAdd", "QLinearGlobalAveragePool"} <= ms
