"""Mutants of the example models (what a mutation fuzzer of ``hwgen inspect`` / ``hwgen
compile`` found): every number the integer graph depends on is checked where it enters, sizes
are checked from the declared shapes before anything is allocated, and broken names or
dangling nodes are refused at import. Each refusal is one line ``hwgen: error: ...`` naming
the tensor or node, exit code 2, no traceback, no output folder; ``inspect`` lists the
problem (exit 0) or gives the same one line.

Each mutant is the example model loaded with the onnx API, changed, and saved without the
checker (``conftest.save_model``).
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import run_hwgen as hwgen
from conftest import save_model as save
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
CNN_QDQ = EXAMPLES / "digits_cnn_qdq.onnx"
CNN_QOP = EXAMPLES / "digits_cnn_qop.onnx"


# ------------------------------------------------------------------------------- helpers

def one_line_error(p, *facts: str) -> str:
    shown = f"exit code {p.returncode}\n--- stderr ---\n{p.stderr}--- stdout ---\n{p.stdout}"
    assert "Traceback" not in p.stderr and "Traceback" not in p.stdout, shown
    assert p.returncode == 2, shown
    assert p.stderr.startswith("hwgen: error: "), shown
    assert p.stderr.count("\n") == 1 and p.stderr.endswith("\n"), shown
    assert "Warning" not in p.stderr, shown
    for f in facts:
        assert f in p.stderr, f"{f!r} missing:\n{shown}"
    return p.stderr


def compile_refused(tmp_path: Path, model: Path, *facts: str) -> str:
    out = tmp_path / "out"
    msg = one_line_error(hwgen("compile", model, "-o", out, cwd=tmp_path), *facts)
    assert not out.exists()
    assert not [q for q in tmp_path.iterdir() if q.name.startswith(".out")]
    return msg


def inspect_lists_or_refuses(tmp_path: Path, model: Path, *facts: str):
    """inspect: the problem listed with exit 0, or the same clean one-line refusal."""
    p = hwgen("inspect", model, cwd=tmp_path)
    assert "Traceback" not in p.stderr and "Traceback" not in p.stdout, p.stderr
    assert "Warning" not in p.stderr, p.stderr
    if p.returncode == 0:
        assert p.stderr == "", p.stderr
        for f in facts:
            assert f in p.stdout, f"{f!r} missing:\n{p.stdout}"
    else:
        one_line_error(p, *facts)


def set_init(m: onnx.ModelProto, name: str, arr: np.ndarray):
    for t in m.graph.initializer:
        if t.name == name:
            t.CopyFrom(numpy_helper.from_array(np.asarray(arr), name))
            return
    raise KeyError(name)


def mutant(tmp_path: Path, base: Path, name: str, change) -> Path:
    m = onnx.load(str(base))
    change(m)
    return save(m, tmp_path / f"{name}.onnx")


# ----------------------------------------------------------------- scales and zero points

def test_bias_scale_inf_refused(tmp_path):
    """Compiled (with RTL differing from golden) before: refused at its DequantizeLinear."""
    path = mutant(tmp_path, CNN_QDQ, "bias_inf", lambda m: set_init(
        m, "fc.bias_quantized_scale", np.array([np.inf], np.float32)))
    compile_refused(tmp_path, path, "fc.bias_DequantizeLinear", "'fc.bias_quantized_scale'",
                    "not finite")
    inspect_lists_or_refuses(tmp_path, path, "'fc.bias_quantized_scale'")


@pytest.mark.parametrize("name, value, why", [
    ("fc.weight_scale", 1e-38, "below the smallest normal float32"),    # subnormal: slow
    ("fc.weight_scale", 0.0, "not positive"),
    ("conv2.weight_scale", -0.1, "not positive"),
    ("logits_scale", np.nan, "not finite"),
    ("input_scale", np.inf, "not finite"),
    ("/Relu_output_0_scale", 1e-45, "below the smallest normal float32"),
])
def test_qdq_bad_scale_refused(tmp_path, name, value, why):
    path = mutant(tmp_path, CNN_QDQ, "scale", lambda m: set_init(m, name, np.float32(value)))
    t0 = time.monotonic()
    compile_refused(tmp_path, path, f"'{name}'", why)
    assert time.monotonic() - t0 < 30


@pytest.mark.parametrize("name, value, what", [
    ("conv2.weight_scale", np.inf, "weight scale"),
    ("/conv2/Conv_output_0_scale", 1e-39, "output scale"),
    ("input_scale", 0.0, "scale"),
])
def test_qop_bad_scale_refused(tmp_path, name, value, what):
    path = mutant(tmp_path, CNN_QOP, "qop_scale", lambda m: set_init(m, name, np.float32(value)))
    compile_refused(tmp_path, path, f"{what} '{name}'")


def test_bias_scale_huge_no_warning(tmp_path):
    """A finite but huge bias scale overflows the bias: refused at the Gemm (a NumPy error,
    not a RuntimeWarning on stderr)."""
    path = mutant(tmp_path, CNN_QDQ, "bias_huge", lambda m: set_init(
        m, "fc.bias_quantized_scale", np.array([3e38], np.float32)))
    compile_refused(tmp_path, path, "/fc/Gemm", "cannot be computed")


def test_complex_zero_point_refused(tmp_path):
    path = mutant(tmp_path, CNN_QDQ, "zp_complex", lambda m: set_init(
        m, "fc.weight_zero_point", np.array(0, np.complex64)))
    compile_refused(tmp_path, path, "fc.weight_DequantizeLinear", "complex64")


# ------------------------------------------------------------------------------ sizes

def test_constant_of_shape_huge_refused_fast(tmp_path):
    def change(m):
        m.graph.initializer.append(numpy_helper.from_array(
            np.array([2147483648, 2], np.int64), "big_shape"))
        m.graph.node.insert(0, helper.make_node(
            "ConstantOfShape", ["big_shape"], ["big"], name="fill",
            value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0])))
    path = mutant(tmp_path, CNN_QDQ, "cos", change)
    t0 = time.monotonic()
    compile_refused(tmp_path, path, "fill", "'big'", "2147483648")
    assert time.monotonic() - t0 < 30
    inspect_lists_or_refuses(tmp_path, path, "'big'")


def test_weight_declaring_2_31_elements_refused(tmp_path):
    def change(m):
        t = next(t for t in m.graph.initializer if t.name == "fc.weight_quantized")
        del t.dims[:]
        t.dims.extend([2**31, 1])
    path = mutant(tmp_path, CNN_QDQ, "w_huge", change)
    compile_refused(tmp_path, path, "'fc.weight_quantized'", "2147483648 elements")
    inspect_lists_or_refuses(tmp_path, path, "'fc.weight_quantized'")


def test_external_data_declaring_huge_shape_refused_before_reading(tmp_path):
    (tmp_path / "w.bin").write_bytes(np.zeros(640, np.int8).tobytes())

    def change(m):
        t = next(t for t in m.graph.initializer if t.name == "fc.weight_quantized")
        onnx.external_data_helper.set_external_data(t, location="w.bin")
        t.data_location = TensorProto.EXTERNAL
        t.ClearField("raw_data")
        del t.dims[:]
        t.dims.extend([100000, 100000])
    path = mutant(tmp_path, CNN_QDQ, "ext_huge", change)
    compile_refused(tmp_path, path, "'fc.weight_quantized'", "[100000, 100000]")


def test_negative_dim_refused(tmp_path):
    def change(m):
        t = next(t for t in m.graph.initializer if t.name == "fc.weight_quantized")
        del t.dims[:]
        t.dims.extend([-10, -64])
    path = mutant(tmp_path, CNN_QDQ, "neg_dim", change)
    compile_refused(tmp_path, path, "'fc.weight_quantized'", "negative")


# ------------------------------------------------------------------------------ names

def byte_flipped(tmp_path: Path, base: Path, text: bytes, name: str) -> Path:
    data = base.read_bytes()
    k = data.find(text)
    assert k >= 0
    path = tmp_path / f"{name}.onnx"
    path.write_bytes(data[:k] + b"\xff" + data[k + 1:])
    return path


def test_node_name_not_utf8_refused(tmp_path):
    path = byte_flipped(tmp_path, CNN_QDQ, b"/conv2/Conv", "badnode")
    msg = compile_refused(tmp_path, path, "node #", "UTF-8", "byte offset")
    assert "graph.node[" in msg
    one_line_error(hwgen("inspect", path, cwd=tmp_path), "UTF-8", "byte offset")


def test_value_name_not_utf8_refused(tmp_path):
    path = byte_flipped(tmp_path, CNN_QDQ, b"fc.weight_quantized", "badvalue")
    compile_refused(tmp_path, path, "UTF-8", "byte offset")
    one_line_error(hwgen("inspect", path, cwd=tmp_path), "UTF-8")


def test_duplicate_node_names_refused(tmp_path):
    def change(m):
        m.graph.node[3].name = m.graph.node[2].name
    path = mutant(tmp_path, CNN_QOP, "dupname", change)
    compile_refused(tmp_path, path, "'/pool1/MaxPool'", "node #2", "node #3", "unique")


def test_duplicated_node_with_renamed_output_refused(tmp_path):
    """A QLinearConv duplicated under new node and output names made a layer nobody reads
    (a KeyError in lowering before)."""
    def change(m):
        n = [x for x in m.graph.node if x.op_type == "QLinearConv"][1]
        d = onnx.NodeProto()
        d.CopyFrom(n)
        d.name = n.name + "_dup"
        d.output[0] = n.output[0] + "_dup"
        m.graph.node.insert(list(m.graph.node).index(n) + 1, d)
    path = mutant(tmp_path, CNN_QOP, "dup", change)
    compile_refused(tmp_path, path, "/conv2/Conv_quant_dup", "read by no other layer")
    inspect_lists_or_refuses(tmp_path, path, "/conv2/Conv_quant_dup", "read by no other layer")


# ------------------------------------------------------------------------------ quiet runs

def test_successful_compile_prints_no_warning(tmp_path):
    out = tmp_path / "out"
    p = hwgen("compile", CNN_QDQ, "-o", out, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stderr == "", p.stderr
    p = hwgen("inspect", CNN_QOP, cwd=tmp_path)
    assert p.returncode == 0 and p.stderr == "", p.stderr


def test_verify_duplicate_node_names_one_line(tmp_path):
    """onnxruntime refuses two nodes of one name; verify refuses the model at load first."""
    def change(m):
        m.graph.node[3].name = m.graph.node[2].name
    path = mutant(tmp_path, CNN_QOP, "dupname", change)
    p = hwgen("verify", path, "--input", EXAMPLES / "digits_images_test.npz", "--count", "2",
              cwd=tmp_path)
    one_line_error(p, "'/pool1/MaxPool'", "unique")
