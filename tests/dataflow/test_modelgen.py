"""Quick checks that tests/modelgen.py builds valid float and QDQ models that onnxruntime runs."""
from __future__ import annotations

import logging

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

try:  # tests/ on sys.path (pyproject.toml: pytest's pythonpath) ...
    from modelgen import float_mlp, op_sequence, quantize_qdq, random_inputs, random_mlp, run_model
except ImportError:  # ... or tests/ imported as a package
    from tests.modelgen import (
        float_mlp,
        op_sequence,
        quantize_qdq,
        random_inputs,
        random_mlp,
        run_model,
    )

# onnxruntime.quantization logs a "please run pre-processing" style warning per call
logging.getLogger("root").setLevel(logging.ERROR)

SIZES = [16, 12, 8, 4]


def _reference(ws, bs, x, relu_last=False):
    h = x.reshape(x.shape[0], -1).astype(np.float64)
    for i, (w, b) in enumerate(zip(ws, bs)):
        h = h @ w.T.astype(np.float64) + b
        if i < len(ws) - 1 or relu_last:
            h = np.maximum(h, 0)
    return h


def _inits(model):
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def test_random_helpers_deterministic():
    ws, bs = random_mlp(SIZES, seed=3)
    ws2, bs2 = random_mlp(SIZES, seed=3)
    assert [w.shape for w in ws] == [(12, 16), (8, 12), (4, 8)]
    assert [b.shape for b in bs] == [(12,), (8,), (4,)]
    assert all(w.dtype == np.float32 for w in ws + bs)
    assert all(np.array_equal(a, b) for a, b in zip(ws + bs, ws2 + bs2))
    x = random_inputs(5, 16, seed=1)
    assert x.shape == (5, 16) and x.dtype == np.float32 and x.min() >= 0 and x.max() < 1
    assert np.array_equal(x, random_inputs(5, 16, seed=1))
    assert random_inputs(2, (1, 4, 4), seed=0).shape == (2, 1, 4, 4)


@pytest.mark.parametrize("style", ["gemm", "matmul"])
@pytest.mark.parametrize("relu_last", [False, True])
@pytest.mark.parametrize("flatten", [None, (1, 4, 4)])
def test_float_mlp_matches_numpy(style, relu_last, flatten):
    ws, bs = random_mlp(SIZES, seed=0)
    m = float_mlp(ws, bs, style=style, relu_last=relu_last, flatten_input=flatten)
    onnx.checker.check_model(m, full_check=True)
    ops = op_sequence(m)
    assert ops.count("Relu") == (3 if relu_last else 2)
    if style == "gemm":
        assert ops.count("Gemm") == 3 and "MatMul" not in ops
    else:
        assert ops.count("MatMul") == 3 and ops.count("Add") == 3 and "Gemm" not in ops
    if flatten:
        assert ops[0] == ("Flatten" if style == "gemm" else "Reshape")
    inp = m.graph.input[0]
    dims = inp.type.tensor_type.shape.dim
    assert inp.name == "input" and m.graph.output[0].name == "logits"
    assert dims[0].dim_param == "N"
    assert [d.dim_value for d in dims[1:]] == (list(flatten) if flatten else [16])

    x = random_inputs(7, flatten or 16, seed=5)
    y = run_model(m, x)
    assert y.shape == (7, 4)
    np.testing.assert_allclose(y, _reference(ws, bs, x, relu_last), rtol=1e-5, atol=1e-5)


def test_float_mlp_options_and_errors():
    ws, bs = random_mlp([6, 3], seed=0)
    m = float_mlp(ws, bs, input_name="x", output_name="y", batch=2, opset=13)
    assert m.graph.input[0].type.tensor_type.shape.dim[0].dim_value == 2
    assert m.opset_import[0].version == 13
    assert run_model(m, random_inputs(2, 6)).shape == (2, 3)
    with pytest.raises(ValueError):
        float_mlp(ws, bs, style="conv")
    with pytest.raises(ValueError):
        float_mlp([ws[0], ws[0]], bs * 2)            # 3 outputs into a 6-input layer
    with pytest.raises(ValueError):
        float_mlp(ws, bs, flatten_input=(2, 2))


ACT_CONFIGS = [("uint8", False), ("int8", True)]


@pytest.mark.parametrize("style", ["gemm", "matmul"])
@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("act,sym", ACT_CONFIGS, ids=["u8asym", "i8sym"])
def test_quantize_qdq(style, per_channel, act, sym):
    ws, bs = random_mlp(SIZES, seed=0)
    fm = float_mlp(ws, bs, style=style)
    calib = random_inputs(64, 16, seed=1)
    qm = quantize_qdq(fm, calib, per_channel=per_channel, activation_type=act,
                      symmetric_activations=sym)
    onnx.checker.check_model(qm, full_check=True)

    ops = op_sequence(qm)
    # pre-processing fuses MatMul + Add into Gemm; asymmetric activations drop the Relus
    assert ops.count("Gemm") == 3 and "MatMul" not in ops and "Add" not in ops
    assert ops.count("Relu") == (2 if sym else 0)
    compute = [o for o in ops if o not in ("QuantizeLinear", "DequantizeLinear")]
    assert compute == (["Gemm", "Relu", "Gemm", "Relu", "Gemm"] if sym else ["Gemm"] * 3)

    inits = _inits(qm)
    act_dtype = np.uint8 if act == "uint8" else np.int8
    assert inits["input_zero_point"].dtype == act_dtype
    for i, (w, _b) in enumerate(zip(ws, bs)):
        wq = inits[f"fc{i}.weight_quantized"]
        assert wq.dtype == np.int8
        assert wq.shape == (w.shape if style == "gemm" else w.T.shape)
        assert inits[f"fc{i}.bias_quantized"].dtype == np.int32
        n_scales = w.shape[0] if per_channel else 1
        assert inits[f"fc{i}.weight_scale"].size == n_scales
        assert inits[f"fc{i}.bias_quantized_scale"].size == n_scales
        assert not inits[f"fc{i}.weight_zero_point"].any()      # int8 weights: symmetric

    # rows inside the calibrated ranges (fresh rows may saturate a Q and be off by more)
    x = calib[::4]
    yq, yf = run_model(qm, x), run_model(fm, x)
    assert yq.shape == (16, 4) and yq.dtype == np.float32
    assert np.abs(yq - yf).max() < 0.05 * max(1.0, np.abs(yf).max())


def test_quantize_qdq_flatten_int8_asym_and_path_dir(tmp_path):
    ws, bs = random_mlp([16, 8, 3], seed=7)
    fm = float_mlp(ws, bs, style="matmul", flatten_input=(1, 4, 4), relu_last=True)
    calib = random_inputs(20, (1, 4, 4), seed=1)
    qm = quantize_qdq(fm, calib, activation_type="int8", batch_size=4, path_dir=tmp_path)
    onnx.checker.check_model(qm, full_check=True)
    assert {p.name for p in tmp_path.iterdir()} >= {"float.onnx", "preprocessed.onnx", "qdq.onnx"}
    assert onnx.load(str(tmp_path / "qdq.onnx")).SerializeToString() == qm.SerializeToString()
    ops = op_sequence(qm)
    assert "Reshape" in ops and "Relu" not in ops
    inits = _inits(qm)
    # the graph input stays float into Reshape; the first Q/DQ pair sits on Reshape's output
    assert "input_zero_point" not in inits and inits["flatten_out_zero_point"].dtype == np.int8
    x = calib[:5]
    assert np.abs(run_model(qm, x) - run_model(fm, x)).max() < 0.05


def test_quantize_qdq_keep_relu_without_preprocess():
    ws, bs = random_mlp([16, 8, 3], seed=7)
    fm = float_mlp(ws, bs, style="matmul")
    calib = random_inputs(20, 16, seed=1)
    qm = quantize_qdq(fm, calib, preprocess=False,
                      extra_options={"QDQKeepRemovableActivations": True})
    onnx.checker.check_model(qm, full_check=True)
    compute = [o for o in op_sequence(qm) if o not in ("QuantizeLinear", "DequantizeLinear")]
    assert compute == ["MatMul", "Add", "Relu", "MatMul", "Add"]
    assert run_model(qm, calib[:3]).shape == (3, 3)


def test_quantize_qdq_rejects_bad_types():
    ws, bs = random_mlp([4, 2], seed=0)
    with pytest.raises(ValueError):
        quantize_qdq(float_mlp(ws, bs), random_inputs(4, 4), activation_type="int16")
