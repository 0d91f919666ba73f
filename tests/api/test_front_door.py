"""The front door: float models, calibration data and older models.

* ``hwgen quantize MODEL --calibration DATA -o Q`` (onnxruntime's ``quantize_static`` with its
  pre-processing) turns small float MLPs and CNNs into QDQ models that ``hwgen verify`` passes:
  RTL == golden on every sample, >= 99.9 % of the output elements identical to onnxruntime on
  the quantized model, none more than one step apart; per-tensor / per-channel, asymmetric /
  symmetric, uint8 / int8 activations.
* ``hwgen compile`` / ``hwgen verify`` with ``--calibration`` do the same in one step; verify
  also reports the top-1 agreement with the float model.
* Errors: a float model without ``--calibration``, calibration data of the wrong shape, a
  quantized model given to ``quantize``, ... are one line, exit code 2, nothing written.
* Older models: float CNNs with opset 4-12 operators (Reshape-1 with its shape attribute,
  BatchNormalization-1/6/7, Relu-1/6, Gemm-1/7/9, MaxPool-1/8/10/12, AveragePool-1/7/10/11,
  Flatten-9/11, Dropout) and IR 3 models whose initializers are also graph inputs are brought
  forward with ``onnx.version_converter``, quantized and verified; what the converter refuses
  (BatchNormalization with ``spatial=0``) is refused naming node, op and version. QDQ models
  at opsets 10-12 and IR 3 QDQ models load as they are.
* The onnx package's own ``backend/test/data/pytorch-converted`` models (IR 3, opset 6): the
  2-D ones are quantized on random calibration data and verified in Amaranth's simulator, or
  refused with a clear HwgenError whose reason is pinned here (``benchmarks/backend_models.py``
  prints the table for every model there).
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import run_hwgen as cli
from conftest import save_model as save
from onnx import TensorProto, helper, numpy_helper

import hwgen
from hwgen.dataflow.importer import load_model_proto
from hwgen.dataflow.loader import upgrade_opset
from hwgen.errors import HwgenError
from hwgen.quantize import quantize

try:  # tests/ on sys.path (pyproject.toml: pytest's pythonpath) ...
    from modelgen import float_mlp, quantize_qdq, random_inputs, random_mlp, run_model
except ImportError:  # ... or tests/ imported as a package
    from tests.modelgen import float_mlp, quantize_qdq, random_inputs, random_mlp, run_model

SIM = dict(simulator="amaranth", target_cycles=64)
COUNT = 20


# ------------------------------------------------------------------------------- helpers

def assert_ok(p: subprocess.CompletedProcess):
    assert p.returncode == 0 and "Traceback" not in p.stderr, \
        f"exit code {p.returncode}\n--- stderr ---\n{p.stderr}--- stdout ---\n{p.stdout}"


def assert_error(p: subprocess.CompletedProcess, *facts: str) -> str:
    """Exit code 2, one stderr line ``hwgen: error: ...`` holding every fact, no traceback."""
    shown = f"exit code {p.returncode}\n--- stderr ---\n{p.stderr}--- stdout ---\n{p.stdout}"
    assert "Traceback" not in p.stderr + p.stdout, shown
    assert p.returncode == 2, shown
    assert p.stderr.startswith("hwgen: error: ") and p.stderr.count("\n") == 1, shown
    msg = p.stderr[len("hwgen: error: "):-1]
    for f in facts:
        assert f in msg, f"{f!r} missing from the message:\n{shown}"
    return msg


def check_report(rep, min_identical: float = 0.999, max_step: int = 1):
    assert rep.rtl_equals_golden, f"{rep.golden_mismatched_samples} samples differ from golden"
    assert rep.ort_identical_fraction >= min_identical, rep.ort_identical_fraction
    assert rep.ort_max_step_diff <= max_step, rep.ort_max_step_diff


def zero_points(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """Zero points of the activation QuantizeLinear nodes."""
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    return {n.input[2]: inits[n.input[2]] for n in model.graph.node
            if n.op_type == "QuantizeLinear" and len(n.input) > 2}


def weight_scales(model: onnx.ModelProto) -> list[np.ndarray]:
    """Scales of the DequantizeLinear nodes that read int8 initializers (the weights)."""
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    return [inits[n.input[1]] for n in model.graph.node
            if n.op_type == "DequantizeLinear" and n.input[0] in inits
            and inits[n.input[0]].dtype == np.int8]


# -------------------------------------------------------------------------------- models

def mlp(seed: int = 0) -> onnx.ModelProto:
    ws, bs = random_mlp([16, 12, 6], seed=seed)
    return float_mlp(ws, bs)


def float_cnn(opset: int = 13, *, batch: int | str | None = None, ir_version: int | None = None,
              inits_as_inputs: bool = False, bn_spatial: int | None = None,
              seed: int = 0) -> onnx.ModelProto:
    """x[B, 1, 6, 6] → Conv 3×3 (4) → BatchNormalization → Relu → MaxPool 2×2 → Conv 3×3 (4)
    → Relu → AveragePool 3×3 → flatten → Dropout → Gemm (6), written with the operator
    versions of ``opset``: Reshape with a ``shape`` attribute below opset 5 (Reshape-5 with a
    shape initializer up to 8, Flatten from 9); ``consumed_inputs`` / ``is_test`` /
    ``spatial`` / ``broadcast`` attributes where those versions have them. The same ``seed``
    gives the same weights at every opset. Below opset 7 the batch is fixed to 1 (the
    converter's broadcast adapters need static shapes, as old exporters wrote them).

    The average pool divides by 9: onnxruntime gives a lone AveragePool the scale and zero
    point of its input, and with an even divisor the exact result is often a rounding tie
    that ORT's float arithmetic rounds either way (see tests/blocks/test_pool.py); an odd divisor
    has no ties."""
    rng = np.random.default_rng(seed)
    batch = batch if batch is not None else (1 if opset < 7 else "N")

    def arr(*shape, scale=1.0):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    inits = {
        "w1": arr(4, 1, 3, 3, scale=0.6), "b1": arr(4, scale=0.1),
        "bn_s": (1 + 0.2 * rng.standard_normal(4)).astype(np.float32), "bn_b": arr(4, scale=0.1),
        "bn_m": arr(4, scale=0.2), "bn_v": (0.5 + rng.random(4)).astype(np.float32),
        "w2": arr(4, 4, 3, 3, scale=0.3), "b2": arr(4, scale=0.1),
        "fw": arr(6, 4, scale=0.6), "fb": arr(6, scale=0.1),
    }
    bn = {"epsilon": 1e-5}
    if opset < 6:
        bn.update(consumed_inputs=[0, 0, 0, 1, 1], is_test=1)
    elif opset < 7:
        bn.update(is_test=1)
    if 6 <= opset < 9:
        bn["spatial"] = 1 if bn_spatial is None else bn_spatial
    relu = {"consumed_inputs": [0]} if opset < 6 else {}
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1],
                         kernel_shape=[3, 3]),
        helper.make_node("BatchNormalization", ["c1", "bn_s", "bn_b", "bn_m", "bn_v"], ["n1"],
                         name="bn1", **bn),
        helper.make_node("Relu", ["n1"], ["r1"], name="relu1", **relu),
        helper.make_node("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2],
                         strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1],
                         kernel_shape=[3, 3]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2", **relu),
        helper.make_node("AveragePool", ["r2"], ["p2"], name="pool2", kernel_shape=[3, 3]),
    ]
    if opset < 5:
        nodes.append(helper.make_node("Reshape", ["p2"], ["f"], name="flatten", shape=[0, -1]))
    elif opset < 9:
        inits["flat_shape"] = np.array([0, -1], dtype=np.int64)
        nodes.append(helper.make_node("Reshape", ["p2", "flat_shape"], ["f"], name="flatten"))
    else:
        nodes.append(helper.make_node("Flatten", ["p2"], ["f"], name="flatten", axis=1))
    drop = {"is_test": 1} if opset < 7 else {}
    nodes.append(helper.make_node("Dropout", ["f"], ["d"], name="drop", **drop))
    gemm = {"transB": 1, **({"broadcast": 1} if opset < 7 else {})}
    nodes.append(helper.make_node("Gemm", ["d", "fw", "fb"], ["y"], name="fc", **gemm))
    tensors = [numpy_helper.from_array(v, k) for k, v in inits.items()]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 1, 6, 6])]
    opsets = [helper.make_opsetid("", opset)]
    ir = ir_version if ir_version is not None else helper.find_min_ir_version_for(opsets)
    if inits_as_inputs or ir < 4:  # IR 3 requires it
        inputs += [helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                   for t in tensors]
    g = helper.make_graph(nodes, f"cnn_opset{opset}", inputs,
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 6])],
                          initializer=tensors)
    return helper.make_model(g, opset_imports=opsets, ir_version=ir,
                             producer_name="hwgen-tests")


def cnn_inputs(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, (n, 1, 6, 6)).astype(np.float32)


MODELS = {  # name: (float model, calibration rows, test rows)
    "mlp": (mlp, lambda: random_inputs(64, 16, seed=1), lambda: random_inputs(COUNT, 16, seed=2)),
    "cnn": (float_cnn, lambda: cnn_inputs(64, 1), lambda: cnn_inputs(COUNT, 2)),
}

VARIANTS = {  # name: (CLI flags, quantize() keywords)
    "default": ((), {}),
    "per_channel": (("--per-channel",), {"per_channel": True}),
    "symmetric": (("--symmetric",), {"symmetric": True}),
    "int8": (("--int8",), {"activation_type": "int8"}),
    "all": (("--per-channel", "--symmetric", "--int8"),
            {"per_channel": True, "symmetric": True, "activation_type": "int8"}),
}


@pytest.fixture
def files(tmp_path):
    """Write a model's float ONNX file, calibration .npz and test inputs .npz."""
    def write(kind: str) -> tuple[Path, Path, Path]:
        make, cal, x = MODELS[kind]
        m = save(make(), tmp_path / f"{kind}.onnx")
        name = onnx.load(str(m)).graph.input[0].name
        np.savez(tmp_path / f"{kind}_cal.npz", **{name: cal()})
        np.savez(tmp_path / f"{kind}_x.npz", **{name: x()})
        return m, tmp_path / f"{kind}_cal.npz", tmp_path / f"{kind}_x.npz"
    return write


# ------------------------------------------------------------ (a) hwgen quantize, verify

@pytest.mark.sim
@pytest.mark.parametrize("kind,variant", [("mlp", v) for v in VARIANTS]
                         + [("cnn", "default"), ("cnn", "all")])
def test_quantize_command_then_verify(files, tmp_path, kind, variant):
    model, cal, x = files(kind)
    flags, opts = VARIANTS[variant]
    out = tmp_path / f"{kind}.q.onnx"
    p = cli("quantize", model, "--calibration", cal, "-o", out, *flags, cwd=tmp_path)
    assert_ok(p)
    assert str(out.name) in p.stdout and p.stderr == "", p.stderr
    q = onnx.load(str(out))
    onnx.checker.check_model(q)
    ops = [n.op_type for n in q.graph.node]
    assert "QuantizeLinear" in ops and "DequantizeLinear" in ops
    zps = zero_points(q)
    act = np.int8 if opts.get("activation_type") == "int8" else np.uint8
    assert zps and all(z.dtype == act for z in zps.values())
    if opts.get("symmetric"):  # the middle of the range: 0 for int8, 128 for uint8
        assert all(np.all(z == (0 if act == np.int8 else 128)) for z in zps.values())
    scales = weight_scales(q)
    assert scales and all((s.size > 1) == bool(opts.get("per_channel")) for s in scales)

    rep = hwgen.verify(out, x, COUNT, **SIM)
    check_report(rep)
    if kind == "mlp" and variant == "default":  # the CLI's report too
        p = cli("verify", out, "--input", x, "--count", COUNT, "--simulator", "amaranth",
                "--target-cycles", 64, cwd=tmp_path)
        assert_ok(p)
        assert "RTL == golden" in p.stdout and "yes, every sample" in p.stdout
        assert p.stdout.rstrip().endswith("PASS")


def test_quantize_api_matches_command(files, tmp_path):
    model, cal, _ = files("mlp")
    a = quantize(model, cal, tmp_path / "a.onnx", per_channel=True)
    assert a == tmp_path / "a.onnx"
    assert_ok(cli("quantize", model, "--calibration", cal, "-o", tmp_path / "b.onnx",
                  "--per-channel", "--uint8"))
    assert a.read_bytes() == (tmp_path / "b.onnx").read_bytes()
    # an array works as calibration data too, and the result is the same
    name = onnx.load(str(model)).graph.input[0].name
    c = quantize(model, np.load(cal)[name], tmp_path / "c.onnx", per_channel=True)
    assert c.read_bytes() == a.read_bytes()
    # nothing but the output is left behind
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


@pytest.mark.sim
def test_quantize_qoperator_format(files, tmp_path):
    """``--qoperator`` / ``quant_format="qoperator"``: onnxruntime's QLinear ops, the same
    bytes from the command and the API, and a model hwgen maps."""
    model, cal, x = files("cnn")
    a = quantize(model, cal, tmp_path / "a.onnx", quant_format="qoperator")
    p = cli("quantize", model, "--calibration", cal, "-o", tmp_path / "b.onnx", "--qoperator")
    assert_ok(p)
    assert "QOperator" in p.stdout
    assert a.read_bytes() == (tmp_path / "b.onnx").read_bytes()
    ops = {n.op_type for n in onnx.load(str(a)).graph.node}
    assert "QLinearConv" in ops
    check_report(hwgen.verify(a, x, COUNT, **SIM))
    with pytest.raises(HwgenError, match="quantization format must be one of"):
        quantize(model, cal, tmp_path / "c.onnx", quant_format="qop")


def test_quantize_overwrites_atomically(files, tmp_path):
    model, cal, _ = files("mlp")
    out = tmp_path / "q.onnx"
    out.write_bytes(b"old")
    quantize(model, cal, out)
    assert onnx.load(str(out)).graph.node
    bad = tmp_path / "bad.npy"
    np.save(bad, np.zeros((4, 15), np.float32))
    before = out.read_bytes()
    with pytest.raises(HwgenError):
        quantize(model, bad, out)
    assert out.read_bytes() == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".q.onnx")]


# ------------------------------------------------------- (b) compile / verify in one step

def test_compile_with_calibration_one_step(files, tmp_path):
    model, cal, _ = files("cnn")
    outs = []
    for k in range(2):
        out = tmp_path / f"out{k}"
        p = cli("compile", model, "--calibration", cal, "--per-channel", "-o", out,
                cwd=tmp_path)
        assert_ok(p)
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["top"] == "cnn" and manifest["model"]["file"] == "cnn.onnx"
        assert (out / "cnn.v").is_file()
        outs.append(out)
    # the same float model, data and options give the same files
    for f in ("cnn.v", "manifest.json"):
        assert (outs[0] / f).read_bytes() == (outs[1] / f).read_bytes()
    # ... the same as quantizing first and compiling the QDQ model of the same name
    (tmp_path / "q").mkdir()
    q = quantize(model, cal, tmp_path / "q" / "cnn.onnx", per_channel=True)
    hwgen.compile(q, tmp_path / "two_steps")
    assert (tmp_path / "two_steps" / "cnn.v").read_bytes() == (outs[0] / "cnn.v").read_bytes()
    two = json.loads((tmp_path / "two_steps" / "manifest.json").read_text())
    assert two["model"] == json.loads((outs[0] / "manifest.json").read_text())["model"]
    assert not list(tmp_path.glob(".out*"))


@pytest.mark.sim
@pytest.mark.parametrize("kind", list(MODELS))
def test_verify_with_calibration_one_step(files, tmp_path, kind):
    model, cal, x = files(kind)
    rep = hwgen.verify(model, x, COUNT if kind == "mlp" else 10, calibration=cal, **SIM)
    check_report(rep)
    assert rep.float_top1_agreement is not None and rep.float_top1_agreement >= 0.7
    if kind == "mlp":
        p = cli("verify", model, "--input", x, "--calibration", cal, "--count", COUNT,
                "--simulator", "amaranth", "--target-cycles", 64, "--symmetric", cwd=tmp_path)
        assert_ok(p)
        assert "RTL vs float model: top-1 agreement" in p.stdout
        assert "RTL vs onnxruntime: identical elements" in p.stdout
        assert p.stdout.rstrip().endswith("PASS")


# ---------------------------------------------------------------------------- (c) errors

def test_compile_float_model_without_calibration(files, tmp_path):
    model, _, x = files("cnn")
    out = tmp_path / "out"
    msg = assert_error(cli("compile", model, "-o", out), "cnn.onnx", "--calibration", "float")
    assert "conv1" in msg
    assert not out.exists()
    assert_error(cli("verify", model, "--input", x, "--simulator", "amaranth"), "cnn.onnx",
                 "--calibration")
    with pytest.raises(HwgenError, match="calibration"):
        hwgen.compile(model, out)


def test_calibration_of_the_wrong_shape(files, tmp_path):
    model, _, _ = files("mlp")
    bad = tmp_path / "bad.npy"
    np.save(bad, np.zeros((8, 15), np.float32))
    out = tmp_path / "q.onnx"
    assert_error(cli("quantize", model, "--calibration", bad, "-o", out), "bad.npy",
                 "[8, 15]", "[N, 16]")
    assert not out.exists()
    assert_error(cli("compile", model, "--calibration", bad, "-o", tmp_path / "out"),
                 "bad.npy", "[8, 15]")
    assert not (tmp_path / "out").exists()
    cnn, _, _ = files("cnn")
    np.save(bad, np.zeros((8, 1, 6), np.float32))  # a rank short
    assert_error(cli("quantize", cnn, "--calibration", bad, "-o", out), "[N, 1, 6, 6]")


def test_quantize_refuses_a_quantized_model(files, tmp_path):
    model, cal, _ = files("mlp")
    q = quantize(model, cal, tmp_path / "q.onnx")
    msg = assert_error(cli("quantize", q, "--calibration", cal, "-o", tmp_path / "qq.onnx"),
                       "q.onnx", "already quantized")
    assert "QuantizeLinear" in msg or "DequantizeLinear" in msg
    assert_error(cli("compile", q, "--calibration", cal, "-o", tmp_path / "out"),
                 "already quantized")
    assert not (tmp_path / "qq.onnx").exists() and not (tmp_path / "out").exists()


def test_quantize_other_errors(files, tmp_path):
    model, cal, _ = files("mlp")
    nan = tmp_path / "nan.npy"
    np.save(nan, np.full((4, 16), np.nan, np.float32))
    assert_error(cli("quantize", model, "--calibration", nan, "-o", tmp_path / "q.onnx"), "NaN")
    empty = tmp_path / "empty.npy"
    np.save(empty, np.zeros((0, 16), np.float32))
    assert_error(cli("quantize", model, "--calibration", empty, "-o", tmp_path / "q.onnx"),
                 "no calibration samples")
    assert_error(cli("quantize", model, "--calibration", tmp_path / "missing.npz", "-o",
                     tmp_path / "q.onnx"), "missing.npz", "not found")
    assert_error(cli("quantize", model, "--calibration", cal, "-o",
                     tmp_path / "nowhere" / "q.onnx"), "nowhere")
    # quantization options need --calibration
    assert_error(cli("compile", model, "-o", tmp_path / "out", "--per-channel", "--int8"),
                 "--per-channel", "--int8", "--calibration")
    # a model onnxruntime quantizes nothing of
    relu = helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="r")], "relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 16])]),
        opset_imports=[helper.make_opsetid("", 13)], ir_version=7)
    save(relu, tmp_path / "relu.onnx")
    assert_error(cli("quantize", tmp_path / "relu.onnx", "--calibration", cal, "-o",
                     tmp_path / "q.onnx"), "relu.onnx", "quantized none", "Relu")
    # a model with an integer input is not a float model
    emb = helper.make_model(helper.make_graph(
        [helper.make_node("Gather", ["table", "idx"], ["y"], name="g")], "emb",
        [helper.make_tensor_value_info("idx", TensorProto.INT64, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, 3])],
        initializer=[numpy_helper.from_array(np.ones((10, 3), np.float32), "table")]),
        opset_imports=[helper.make_opsetid("", 13)], ir_version=7)
    save(emb, tmp_path / "emb.onnx")
    assert_error(cli("quantize", tmp_path / "emb.onnx", "--calibration", cal, "-o",
                     tmp_path / "q.onnx"), "emb.onnx", "int64")
    assert not (tmp_path / "q.onnx").exists()
    with pytest.raises(HwgenError, match="activation type"):
        quantize(model, cal, tmp_path / "q.onnx", activation_type="int4")


# ------------------------------------------------------------------------ (d) old opsets

def _ort_float(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    """onnxruntime on a float model with a fixed batch of 1 or a symbolic one."""
    dims = model.graph.input[0].type.tensor_type.shape.dim
    if dims[0].HasField("dim_value") and dims[0].dim_value == 1:
        return np.concatenate([run_model(model, x[k:k + 1]) for k in range(len(x))])
    return run_model(model, x)


def _design(out: Path) -> tuple:
    """What defines a compiled design's hardware: the integer graph, the blocks and the
    integer parameters."""
    man = json.loads((out / "manifest.json").read_text())
    with np.load(out / "design.npz") as z:
        arrays = {k: z[k].tolist() for k in sorted(z.files)}
    return man["integer_graph"], man["layers"], man["estimate"], arrays


@pytest.fixture(scope="module")
def reference_cnn(tmp_path_factory):
    """The design of the opset 13 CNN (seed 3) quantized on the calibration data of the
    old-opset test."""
    d = tmp_path_factory.mktemp("reference")
    (d / "q").mkdir()
    q = quantize(save(float_cnn(13, seed=3), d / "cnn.onnx"), cnn_inputs(48, 1),
                 d / "q" / "cnn.onnx")
    hwgen.compile(q, d / "out", target_cycles=SIM["target_cycles"])
    return _design(d / "out")


@pytest.mark.sim
@pytest.mark.parametrize("opset", [4, 6, 7, 8, 9, 10, 11, 12])
def test_old_opset_cnn_quantized_and_verified(tmp_path, opset, reference_cnn):
    """Opset 4-8 models are IR 3 with their initializers also listed as graph inputs. Brought
    forward and quantized, each gives exactly the hardware of the opset 13 model (so a few
    samples in simulation suffice here)."""
    old = opset < 9
    m = float_cnn(opset, ir_version=3 if old else None, inits_as_inputs=old, seed=3)
    onnx.checker.check_model(m)
    path = save(m, tmp_path / f"cnn{opset}.onnx")
    # the conversion keeps the float semantics: onnxruntime on the model brought forward
    # equals onnxruntime on the same network written for opset 13
    x = cnn_inputs(COUNT, 2)
    up = upgrade_opset(m, 13, "test")
    assert [o.version for o in up.opset_import if o.domain == ""] == [13]
    twin = float_cnn(13, batch=1 if opset < 7 else "N", seed=3)
    np.testing.assert_allclose(_ort_float(up, x), _ort_float(twin, x), rtol=1e-5, atol=1e-5)
    if opset >= 7:  # onnxruntime runs opset 7+ models as they are
        np.testing.assert_allclose(_ort_float(m, x), _ort_float(twin, x), rtol=1e-5, atol=1e-5)

    np.save(tmp_path / "cal.npy", cnn_inputs(48, 1))
    (tmp_path / "q").mkdir()
    q = tmp_path / "q" / "cnn.onnx"  # the reference's file name: the same top module name
    assert_ok(cli("quantize", path, "--calibration", tmp_path / "cal.npy", "-o", q))
    qm = onnx.load(str(q))
    assert [o.version for o in qm.opset_import if o.domain in ("", "ai.onnx")] == [13]
    assert qm.ir_version >= 7
    inits = {t.name for t in qm.graph.initializer}
    assert [i.name for i in qm.graph.input if i.name not in inits] == ["x"]
    rep = hwgen.verify(q, x, 6, out_dir=tmp_path / "out", **SIM)
    check_report(rep)
    assert _design(tmp_path / "out") == reference_cnn


def test_old_opset_loader_upgrade():
    """load_model(upgrade=True) brings Reshape-1, BatchNormalization-1, Gemm-1 forward; by
    default the operator versions stay as the model has them."""
    m = float_cnn(4, ir_version=3, inits_as_inputs=True)
    kept = load_model_proto(m)
    since = {n.name: n.since_version for n in kept.nodes}
    assert since["flatten"] == 1 and since["bn1"] == 1 and since["fc"] == 1
    assert kept.opsets[""] == 4
    up = load_model_proto(m, upgrade=True)
    since = {n.name: (n.op_type, n.since_version) for n in up.nodes}
    assert since["flatten"] == ("Reshape", 13) and since["bn1"][1] == 9
    assert since["fc"] == ("Gemm", 13) and up.opsets[""] == 13
    assert [t.name for t in up.inputs] == ["x"]  # the initializers stay constants
    assert "w1" in up.constants and "bn_v" in up.constants
    # models whose versions are all handled are not touched
    m9 = float_cnn(9)
    assert load_model_proto(m9, upgrade=True).opsets[""] == 9


def test_old_model_refused_naming_node_op_and_version(tmp_path):
    # BatchNormalization with spatial=0 (per-activation statistics) has no opset 9 form
    m = float_cnn(7, bn_spatial=0)
    path = save(m, tmp_path / "spatial0.onnx")
    np.save(tmp_path / "cal.npy", cnn_inputs(8, 1))
    msg = assert_error(cli("quantize", path, "--calibration", tmp_path / "cal.npy", "-o",
                           tmp_path / "q.onnx"),
                       "spatial0.onnx", "node bn1", "BatchNormalization", "version 7",
                       "spatial")
    assert "opset 13" in msg
    assert not (tmp_path / "q.onnx").exists()
    # the loader (compile) says the same when a node needs bringing forward (Gemm-6)
    m6 = float_cnn(6, bn_spatial=0)
    with pytest.raises(HwgenError, match=r"node bn1: op 'BatchNormalization' version 6 "
                                         r"\(model opset 6\).*spatial"):
        load_model_proto(m6, upgrade=True)
    save(m6, tmp_path / "spatial0_6.onnx")
    assert_error(cli("compile", tmp_path / "spatial0_6.onnx", "-o", tmp_path / "out"),
                 "node bn1", "BatchNormalization", "version 6")
    # a float model brought forward fine reaches the "pass --calibration" message
    save(float_cnn(4, ir_version=3, inits_as_inputs=True), tmp_path / "old.onnx")
    assert_error(cli("compile", tmp_path / "old.onnx", "-o", tmp_path / "out"),
                 "old.onnx", "--calibration")


@pytest.mark.sim
@pytest.mark.parametrize("opset", [10, 11, 12])
def test_qdq_models_at_opsets_10_to_12(tmp_path, opset):
    """QuantizeLinear/DequantizeLinear exist since opset 10: such models load as they are
    (quantize_static's pre-processing brings opset 10 to 11, so opset 10 is quantized without
    it)."""
    ws, bs = random_mlp([16, 12, 6], seed=4)
    fm = float_mlp(ws, bs, opset=opset)
    qm = quantize_qdq(fm, random_inputs(64, 16, seed=1), preprocess=opset > 10)
    assert [o.version for o in qm.opset_import if o.domain in ("", "ai.onnx")] == [opset]
    g = load_model_proto(qm, upgrade=True)
    assert g.opsets[""] == opset
    assert {n.since_version for n in g.nodes if n.op_type == "QuantizeLinear"} == {10}
    path = save(qm, tmp_path / f"mlp{opset}.q.onnx")
    check_report(hwgen.verify(path, random_inputs(COUNT, 16, seed=2), COUNT, **SIM))


@pytest.mark.sim
def test_ir3_qdq_model_with_initializers_as_inputs(tmp_path, files):
    model, cal, x = files("cnn")
    q = onnx.load(str(quantize(model, cal, tmp_path / "q.onnx")))
    q.ir_version = 3
    for t in q.graph.initializer:
        q.graph.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    onnx.checker.check_model(q)
    path = save(q, tmp_path / "ir3.onnx")
    g = load_model_proto(q, upgrade=True)
    assert [t.name for t in g.inputs] == ["x"] and g.ir_version == 3
    check_report(hwgen.verify(path, x, 8, **SIM))


# --------------------------------------------------- (e) onnx's pytorch-converted models

BACKEND = Path(onnx.__file__).parent / "backend" / "test" / "data" / "pytorch-converted"

#: the 2-D models (and Linear, ReLU, PixelShuffle): "ok", or the words of the refusal
EXPECTED = {
    "test_AvgPool2d": "ok",
    "test_AvgPool2d_stride": "ok",
    "test_BatchNorm2d_eval": "ok",
    "test_BatchNorm2d_momentum_eval": "ok",
    # a Pad alone: no convolution or pooling window takes its pads
    "test_ConstantPad2d": "is not a quantized tensor (it is Padded)",
    "test_Conv2d": "ok",
    "test_Conv2d_depthwise": "ok",
    "test_Conv2d_depthwise_padded": "ok",
    "test_Conv2d_depthwise_strided": "ok",
    "test_Conv2d_depthwise_with_multiplier": "ok",
    "test_Conv2d_dilated": "ok",
    "test_Conv2d_groups": "ok",
    "test_Conv2d_groups_thnn": "ok",
    "test_Conv2d_no_bias": "ok",
    "test_Conv2d_padding": "ok",
    "test_Conv2d_strided": "ok",
    "test_ConvTranspose2d": "'ConvTranspose'",
    "test_ConvTranspose2d_no_bias": "'ConvTranspose'",
    "test_Linear": "ok",
    "test_Linear_no_bias": "ok",
    "test_MaxPool2d": "ok",
    # a 1000x1000 map under a 60x80 window dilated 10: 591 rows of line buffer
    "test_MaxPool2d_stride_padding_dilation": "of weight/buffer memory",
    "test_PReLU_2d": "quantized none of the model's nodes (ops: PRelu)",
    "test_PReLU_2d_multiparam": "onnxruntime quantization failed",
    "test_PixelShuffle": "no layer hwgen can map",
    "test_ReLU": "quantized none of the model's nodes (ops: Relu)",
    "test_ReflectionPad2d": "mode='reflect' is not supported",
    "test_ReplicationPad2d": "mode='edge' is not supported",
    # a Pad alone: nothing to fold it into
    "test_ZeroPad2d": "is not a quantized tensor (it is Padded)",
}


def _backend_input(model: onnx.ModelProto):
    inits = {t.name for t in model.graph.initializer}
    inp = [i for i in model.graph.input if i.name not in inits][0]
    return inp.name, [d.dim_value for d in inp.type.tensor_type.shape.dim]


def _avgpool_ties_only(qpath: Path, x: np.ndarray, rep) -> None:
    """For Q → AveragePool → Q with one scale and zero point z (what ORT writes for a lone
    AveragePool): every element where the RTL and onnxruntime differ is an exact rounding
    tie, mean(q − z) = k + 1/2. ORT's fused QLinearAveragePool rounds v + z half to even, the
    golden model v half to even; with an odd z those ties go opposite ways (see
    tests/blocks/test_pool.py). Away from ties both are the exact result."""
    import onnxruntime as ort

    q = onnx.load(str(qpath))
    inits = {t.name: numpy_helper.to_array(t) for t in q.graph.initializer}
    qn = next(n for n in q.graph.node if n.op_type == "QuantizeLinear")
    pool = next(n for n in q.graph.node if n.op_type == "AveragePool")
    attrs = {a.name: helper.get_attribute_value(a) for a in pool.attribute}
    s, z = np.float32(inits[qn.input[1]]), int(inits[qn.input[2]])
    assert all(p == 0 for p in attrs.get("pads", [0]))
    (kh, kw), (sh, sw) = attrs["kernel_shape"], attrs.get("strides", [1, 1])
    xq = np.clip(np.rint(x / s) + z, 0, 255).astype(np.int64) - z       # uint8 activations
    n, c, h, w = xq.shape
    oh, ow = (h - kh) // sh + 1, (w - kw) // sw + 1
    acc = np.zeros((n, c, oh, ow), np.int64)
    for i in range(kh):
        for j in range(kw):
            acc += xq[:, :, i:i + sh * oh:sh, j:j + sw * ow:sw]
    tie = (2 * (acc % (kh * kw))) == kh * kw
    sess = ort.InferenceSession(str(qpath), providers=["CPUExecutionProvider"])
    bsz = sess.get_inputs()[0].shape[0]
    ref = np.concatenate([sess.run(None, {sess.get_inputs()[0].name: x[k:k + bsz]})[0]
                          for k in range(0, n, bsz)])
    to_q = lambda y: np.rint(y / s).astype(np.int64)                   # noqa: E731
    diff = to_q(ref) != to_q(rep.sim.outputs.reshape(ref.shape))
    assert np.all(tie[diff]), "a difference away from a rounding tie"
    assert z % 2 == 1 or not diff.any()


@pytest.mark.sim
@pytest.mark.skipif(not BACKEND.is_dir(), reason="onnx's backend test data is not installed")
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_pytorch_converted_2d_models(tmp_path, name):
    path = BACKEND / name / "model.onnx"
    m = onnx.load(str(path))
    _, shape = _backend_input(m)
    size = int(np.prod(shape[1:]))
    batch = shape[0]
    rng = np.random.default_rng(0)
    n_cal = max(batch, min(32, 2_000_000 // size))
    n_x = batch * -(-min(COUNT, max(1, 200_000 // size)) // batch)
    cal = rng.standard_normal((n_cal, *shape[1:])).astype(np.float32)
    x = rng.standard_normal((n_x, *shape[1:])).astype(np.float32)
    want = EXPECTED[name]
    try:
        q = quantize(path, cal, tmp_path / f"{name}.q.onnx")
        rep = hwgen.verify(q, x, **SIM)
    except HwgenError as e:
        msg = str(e)
        assert want != "ok", f"{name} refused: {msg}"
        assert want in msg, f"{name}: {msg}"
        assert "\n" not in msg and len(msg.replace(str(path), "")) < 400
        return
    assert want == "ok", f"{name} was expected to be refused ({want}) but verified"
    if name.startswith("test_AvgPool2d"):  # ORT's ties, see _avgpool_ties_only
        check_report(rep, min_identical=0.0)
        _avgpool_ties_only(q, x, rep)
        # with zero points 0 (symmetric int8) ORT and hwgen round the same way
        q0 = quantize(path, cal, tmp_path / f"{name}.s.onnx", symmetric=True,
                      activation_type="int8")
        check_report(hwgen.verify(q0, x, **SIM))
    else:
        check_report(rep)
