"""What the fuzzer (``benchmarks/fuzz.py``) found, each case reduced to its cause: every one
now ends with exit code 2 and one line ``hwgen: error: ...`` (or a report), no traceback,
nothing left behind."""
from __future__ import annotations

import resource
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import hwgen_command
from conftest import run_hwgen as hwgen
from conftest import save_model as save
from fuzz_mutants import mutant
from onnx import numpy_helper

from hwgen import api, cli
from hwgen.rtl_templates.quant import MAX_MULT_BITS, make_requant

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
MLP = EXAMPLES / "digits_mlp_qdq.onnx"


def one_line(p: subprocess.CompletedProcess, *facts: str) -> str:
    shown = f"exit code {p.returncode}\n--- stderr ---\n{p.stderr}--- stdout ---\n{p.stdout}"
    assert "Traceback" not in p.stderr, shown
    assert p.returncode == 2, shown
    assert p.stderr.startswith("hwgen: error: "), shown
    assert p.stderr.count("\n") == 1 and p.stderr.endswith("\n"), shown
    for f in facts:
        assert f in p.stderr, f"{f!r} missing:\n{shown}"
    return p.stderr


def refused(model: Path, tmp_path: Path, shown: str, *facts: str) -> None:
    """``inspect`` reports the model's problem (``shown`` in its table, exit 0, nothing on
    stderr) and ``compile`` refuses it in one line naming ``facts``, leaving no folder."""
    p = hwgen("inspect", model, cwd=tmp_path)
    assert p.returncode == 0 and p.stderr == "", p.stderr
    assert shown in p.stdout, p.stdout
    one_line(hwgen("compile", model, "-o", tmp_path / "out", cwd=tmp_path), *facts)
    assert not (tmp_path / "out").exists()


def test_requant_multiplier_width_is_bounded():
    assert max(make_requant([2.0 ** 37, 1.0], 0, 0, 255).mult).bit_length() <= MAX_MULT_BITS
    with pytest.raises(ValueError, match="out of proportion"):
        make_requant(3.4e38, 0, 0, 255)                   # a huge multiplier
    with pytest.raises(ValueError, match="out of proportion"):
        make_requant([2.0 ** 20, 2.0 ** -30], 0, 0, 255)  # channels 2**50 apart


def test_huge_per_channel_weight_scale(tmp_path):
    """One channel's weight scale 3.4e38: its requantization multiplier needed a 128-bit
    fixed-point form and the cost model overflowed int64 (OverflowError in inspect and
    compile)."""
    m = onnx.load(EXAMPLES / "digits_cnn_qdq_perchannel.onnx")
    t = next(t for t in m.graph.initializer if t.name == "fc.weight_scale")
    a = numpy_helper.to_array(t).copy()
    a[3] = 3.4e38
    t.CopyFrom(numpy_helper.from_array(a, t.name))
    model = save(m, tmp_path / "m.onnx")
    one_line(hwgen("compile", model, "-o", tmp_path / "out", cwd=tmp_path),
             "out of proportion")
    assert not (tmp_path / "out").exists()
    p = hwgen("inspect", model, cwd=tmp_path)
    assert p.returncode == 0 and p.stderr == "", p.stderr
    assert "out of proportion" in p.stdout


def test_verilog_back_end_out_of_memory(tmp_path):
    """Under an address-space limit the Verilog back end (Yosys in WebAssembly, which
    reserves 4 GiB) cannot start: one line, not Amaranth's YosysError traceback."""
    limit = 3 << 30

    def limited():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    out = tmp_path / "out"
    p = subprocess.run(hwgen_command() + ["compile", str(MLP), "-o", str(out),
                                          "--target-cycles", "4096"],
                       capture_output=True, text=True, cwd=tmp_path, preexec_fn=limited,
                       timeout=600)
    one_line(p, "Verilog back end (Yosys) failed")
    assert not out.exists()
    assert [q.name for q in tmp_path.iterdir()] == []


def test_out_of_memory_is_one_line(tmp_path, monkeypatch, capsys):
    def exhausted(*a, **k):
        raise MemoryError()

    monkeypatch.setattr(api, "compile", exhausted)
    with pytest.raises(SystemExit) as e:
        cli.main(["compile", str(MLP), "-o", str(tmp_path / "out")])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("hwgen: error: out of memory") and err.count("\n") == 1, err


def test_fuzz_mutant_file_roundtrip():
    """The mutants are a pure function of (seed, index)."""
    a, b = mutant(5, 17), mutant(5, 17)
    assert a.data == b.data and a.steps == b.steps
    assert mutant(5, 18).data != a.data or mutant(5, 18).steps != a.steps
    assert np.frombuffer(a.data, np.uint8).size > 0


def test_bias_zero_point_with_more_values_than_its_scale(tmp_path):
    """A bias DequantizeLinear whose inputs were swapped (x: the scalar zero point,
    zero point: the bias vector): a zero point of 10 values with one scale crashed the Gemm
    import (TypeError in the bias)."""
    m = onnx.load(MLP)
    n = next(n for n in m.graph.node if n.output[0] == "fc2.bias")
    n.input[0], n.input[2] = n.input[2], n.input[0]
    model = save(m, tmp_path / "m.onnx")
    one_line(hwgen("compile", model, "-o", tmp_path / "out", cwd=tmp_path),
             "fc2.bias_DequantizeLinear", "zero point has 10 values but the scale 1")
    assert not (tmp_path / "out").exists()
    p = hwgen("inspect", model, cwd=tmp_path)
    assert p.returncode == 0 and p.stderr == "", p.stderr
    assert "zero point has 10 values" in p.stdout


@pytest.mark.parametrize("attr,value,fact", [("pads", [-1, -1, -1, -1], "must not be negative"),
                                             ("strides", [0, 1], "must be at least 1")])
def test_window_attributes_out_of_range(tmp_path, attr, value, fact):
    """A 1×1 QLinearConv with pads -1 passes ONNX's shape inference; the window generator
    refused it with a ValueError traceback in compile."""
    m = onnx.load(EXAMPLES / "digits_resnet_qop.onnx")
    n = next(n for n in m.graph.node if n.name == "/pw/Conv_quant")
    a = next(a for a in n.attribute if a.name == attr)
    del a.ints[:]
    a.ints.extend(value)
    model = save(m, tmp_path / "m.onnx")
    p = hwgen("compile", model, "-o", tmp_path / "out", cwd=tmp_path)
    assert "Traceback" not in p.stderr, p.stderr
    assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
    if "shape inference" not in p.stderr:        # ONNX itself may refuse a zero stride
        assert "/pw/Conv_quant" in p.stderr and fact in p.stderr, p.stderr
    assert not (tmp_path / "out").exists()


def test_qop_weight_input_left_empty(tmp_path):
    """A QGemm whose weight input name is empty (an omitted optional input in ONNX terms)
    crashed the import with an AttributeError."""
    m = onnx.load(EXAMPLES / "digits_resnet_qop.onnx")
    n = next(n for n in m.graph.node if n.op_type == "QGemm")
    n.input[3] = ""
    model = save(m, tmp_path / "m.onnx")
    p = hwgen("compile", model, "-o", tmp_path / "out", cwd=tmp_path)
    assert "Traceback" not in p.stderr, p.stderr
    assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
    assert "weight input 3 is missing" in p.stderr, p.stderr
    assert not (tmp_path / "out").exists()


def test_batch_axis_of_zero(tmp_path):
    """A graph input whose batch axis is fixed at 0 compiled, and its design folder was
    then refused by ``simulate`` (manifest ``onnx_shape`` [0, 64]): the model declares no
    sample, and is refused at import."""
    m = onnx.load(MLP)
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 0
    model = save(m, tmp_path / "m.onnx")
    p = hwgen("inspect", model, cwd=tmp_path)
    assert "Traceback" not in p.stderr and "its batch axis holds no sample" in p.stdout, p
    one_line(hwgen("compile", model, "-o", tmp_path / "out", cwd=tmp_path),
             "batch axis holds no sample", "'input'")
    assert not (tmp_path / "out").exists()


def test_float_weights_too_small_for_a_scale(tmp_path):
    """A float model's weight tensor whose largest magnitude is a float32 subnormal: its int8
    scale underflowed and the division raised FloatingPointError (a traceback in inspect)."""
    m = onnx.load(EXAMPLES / "digits_mlp.onnx")
    t = next(t for t in m.graph.initializer if t.name == "fc1.weight")
    a = np.full_like(numpy_helper.to_array(t), 1.4e-45)
    t.CopyFrom(numpy_helper.from_array(a, t.name))
    model = save(m, tmp_path / "m.onnx")
    p = hwgen("inspect", model, cwd=tmp_path)
    assert p.returncode == 0 and p.stderr == "", p.stderr
    assert "weight 'fc1.weight': its largest magnitude" in p.stdout, p.stdout


def test_add_input_scale_out_of_proportion(tmp_path):
    """A residual Add whose input scale is 3.4e38: the ratio of its input and output scales
    overflowed float32 and the exact fraction of infinity raised OverflowError (a traceback
    in inspect)."""
    m = onnx.load(EXAMPLES / "digits_resnet_qdq.onnx")
    t = next(t for t in m.graph.initializer if t.name == "/block_b/Conv_output_0_scale")
    t.CopyFrom(numpy_helper.from_array(np.array(3.4e38, np.float32), t.name))
    model = save(m, tmp_path / "m.onnx")
    p = hwgen("inspect", model, cwd=tmp_path)
    assert p.returncode == 0 and p.stderr == "", p.stderr
    assert "(their ratio overflows float32)" in p.stdout, p.stdout
    one_line(hwgen("compile", model, "-o", tmp_path / "out", cwd=tmp_path), "out of proportion")
    assert not (tmp_path / "out").exists()


def test_output_declared_with_a_negative_size(tmp_path):
    """The QOperator CNN with its graph output declared [N, -1]: it compiled, and the design
    folder was then refused by ``simulate`` (manifest ``onnx_shape`` ['N', -1]). A declared
    output shape that is not the computed one is refused at import (fuzz seed 13 case 40)."""
    m = onnx.load(EXAMPLES / "digits_cnn_qop.onnx")
    m.graph.output[0].type.tensor_type.shape.dim[-1].dim_value = -1
    model = save(m, tmp_path / "m.onnx")
    p = hwgen("inspect", model, cwd=tmp_path)
    assert "Traceback" not in p.stderr and "declares shape ['N', -1]; the model computes " \
        "['N', 10]" in p.stdout, p
    one_line(hwgen("compile", model, "-o", tmp_path / "out", cwd=tmp_path),
             "graph output 'logits' declares shape ['N', -1]")
    assert not (tmp_path / "out").exists()


def test_huge_pads_behind_a_failed_node(tmp_path):
    """The QOperator ResNet's ``/block_b/Conv_quant`` with pads 2**40: the node is refused,
    and inspect's stand-in for its output (the shape it would have, 8×2**41×2**41) crashed
    the next node's import with a ValueError traceback (fuzz seed 14 case 2083)."""
    m = onnx.load(EXAMPLES / "digits_resnet_qop.onnx")
    n = next(n for n in m.graph.node if n.name == "/block_b/Conv_quant")
    a = next(a for a in n.attribute if a.name == "pads")
    del a.ints[:]
    a.ints.extend([2 ** 40] * 4)
    refused(save(m, tmp_path / "m.onnx"), tmp_path, "more than the limit",
            "/block_b/Conv_quant", "more than the limit")


@pytest.mark.parametrize("op", ["Flatten", "Reshape"])
def test_reshape_of_a_dequantized_weight(tmp_path, op):
    """The QDQ ResNet's Flatten rewired to read a dequantized weight crashed compile with an
    AttributeError (fuzz seed 15 case 807); a Reshape likewise. (The fully connected layer's
    own weight keeps the shapes valid for ONNX.)"""
    m = onnx.load(EXAMPLES / "digits_resnet_qdq.onnx")
    n = next(n for n in m.graph.node if n.name == "/flatten/Flatten")
    n.input[0] = "fc.weight_DequantizeLinear_Output"
    del m.graph.value_info[:]
    if op == "Reshape":
        m.graph.initializer.append(numpy_helper.from_array(np.array([-1, 16], np.int64), "shp"))
        n.op_type = "Reshape"
        n.input.append("shp")
        del n.attribute[:]
    refused(save(m, tmp_path / "m.onnx"), tmp_path, "dequantized constant",
            "/flatten/Flatten", "dequantized constant")
