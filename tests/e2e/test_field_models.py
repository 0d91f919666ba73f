"""Models as other people's tools write them (``examples/field/``): QONNX with the historical
domains and no ``opset_import`` entry for them, datatype annotations on the graph input,
bipolar inputs, channel-last (tf2onnx-style) inputs, Softmax/LogSoftmax heads and float tails
that run on the host, symbolic output dimensions, qonnx's channels_last ops and a
channel-last Concat and Resize between transposes."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from hwgen import api
from hwgen.dataflow import golden
from hwgen.dataflow.host_tail import run_tail, tail_nodes
from hwgen.dataflow.importer import load_model, to_int_graph
from hwgen.dataflow.ops_qonnx import qonnx_reference
from hwgen.errors import HwgenError
from hwgen.inspect import inspect
from hwgen.rtl_templates.quant import QType
from hwgen.rtl_templates.xnor_mvau import BIPOLAR

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the helpers
from qonnx_models import DOMAIN, inputs, mlp  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
FIELD = ROOT / "examples" / "field"


def _ig(model: onnx.ModelProto, tmp_path: Path, name: str = "m.onnx"):
    path = tmp_path / name
    onnx.save(model, path)
    return to_int_graph(load_model(path, upgrade=True)), path


def _golden_reals(ig, x: np.ndarray) -> np.ndarray:
    """The integer graph on float inputs ``x``, as the model's output (host tail included)."""
    xq = ig.quantize_input(x.reshape(x.shape[0], -1))
    y = golden.run(ig, xq)[ig.output].reshape(x.shape[0], -1)
    reals = ig.output_reals(ig.from_stream(y)).reshape(
        (x.shape[0],) + tuple(ig.tensors[ig.output].shape))
    return run_tail(ig.host_tail, reals) if ig.host_tail else reals


# ------------------------------------------------------------------------- QONNX domains

def _legacy(model: onnx.ModelProto, domain: str) -> onnx.ModelProto:
    m = onnx.ModelProto.FromString(model.SerializeToString())
    for n in m.graph.node:
        if n.domain == DOMAIN:
            n.domain = domain
    keep = [o for o in m.opset_import if o.domain != DOMAIN]
    del m.opset_import[:]
    m.opset_import.extend(keep)
    return m


@pytest.mark.parametrize("domain", ["onnx.brevitas", "finn.custom_op.general"])
def test_historical_domains_without_an_import(tmp_path, domain):
    """FINN-era files: the quantizers' domain is not in opset_import. The model maps to the
    integer graph of the same model in qonnx's domain, and inspect says what it assumed."""
    qm = mlp(4, 2, batch=8)
    ig_new, _ = _ig(qm.model, tmp_path, "new.onnx")
    ig_old, path = _ig(_legacy(qm.model, domain), tmp_path, "old.onnx")
    assert ig_old.canonical() == ig_new.canonical()
    rep = inspect(path)
    assert rep.ok
    assert any(domain in n and "opset_import" in n for n in rep.notes), rep.notes
    # the reference runs them too: qonnx's execution of the legacy file
    x = inputs(8, qm.in_shape, seed=2)
    assert np.array_equal(qonnx_reference(path, x), qonnx_reference(tmp_path / "new.onnx", x))


# ---------------------------------------------------------------- annotated graph inputs

def _annotated(datatype: str, n_in: int = 12, seed: int = 0) -> onnx.ModelProto:
    """An input with a ``finn_datatype`` annotation and no quantizer, a 2-bit Quant'd
    weight MatMul, an 8-bit output Quant (qonnx's domain)."""
    rng = np.random.default_rng(seed)
    w = rng.integers(-1, 2, (n_in, 6)).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w"),
             numpy_helper.from_array(np.float32(1.0), "one"),
             numpy_helper.from_array(np.float32(0.0), "zero"),
             numpy_helper.from_array(np.float32(2.0), "b2"),
             numpy_helper.from_array(np.float32(0.5), "so"),
             numpy_helper.from_array(np.float32(8.0), "b8")]
    nodes = [helper.make_node("Quant", ["w", "one", "zero", "b2"], ["wq"], domain=DOMAIN,
                              signed=1, narrow=1, rounding_mode="ROUND"),
             helper.make_node("MatMul", ["x", "wq"], ["mm"]),
             helper.make_node("Quant", ["mm", "so", "zero", "b8"], ["y"], domain=DOMAIN,
                              signed=1, narrow=0, rounding_mode="ROUND")]
    g = helper.make_graph(nodes, "annotated",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, n_in])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6])], inits)
    ann = onnx.TensorAnnotation(tensor_name="x")
    ann.quant_parameter_tensor_names.append(
        onnx.StringStringEntryProto(key="finn_datatype", value=datatype))
    g.quantization_annotation.append(ann)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13),
                                               helper.make_opsetid(DOMAIN, 1)], ir_version=8)


@pytest.mark.parametrize("datatype, qtype, bounds, values", [
    ("BINARY", QType(1, False), None, [0.0, 1.0]),
    ("BIPOLAR", BIPOLAR, None, [-1.0, 1.0]),
    ("TERNARY", QType(2, True), (-1, 1), [-1.0, 0.0, 1.0]),
    ("INT4", QType(4, True), None, list(range(-8, 8))),
    ("UINT3", QType(3, False), None, list(range(8))),
])
def test_annotated_input_datatypes(tmp_path, datatype, qtype, bounds, values):
    """The annotation is the input's integer type; golden equals qonnx on inputs of it."""
    ig, path = _ig(_annotated(datatype), tmp_path)
    t = ig.tensors[ig.input]
    assert (t.qtype, t.scale, t.zero_point, ig.input_bounds) == (qtype, 1.0, 0, bounds)
    x = np.random.default_rng(1).choice(np.float32(values), (16, 12)).astype(np.float32)
    assert np.array_equal(ig.quantize_input(x), x.astype(np.int64))
    assert np.array_equal(_golden_reals(ig, x), qonnx_reference(path, x))


def test_bipolar_graph_input(tmp_path):
    """A BipolarQuant on the graph input (TFC-w1a1): the host sends x >= 0 as +1."""
    m = _annotated("FLOAT32")
    del m.graph.quantization_annotation[:]
    nodes = list(m.graph.node)
    nodes[1].input[0] = "xb"
    nodes.insert(0, helper.make_node("BipolarQuant", ["x", "one"], ["xb"], domain=DOMAIN))
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    ig, path = _ig(m, tmp_path)
    assert ig.tensors[ig.input].qtype == BIPOLAR
    x = np.random.default_rng(2).normal(size=(16, 12)).astype(np.float32)
    x[0, :3] = 0.0                                    # zero is +1
    assert np.array_equal(ig.quantize_input(x), np.where(x >= 0, 1, -1))
    assert np.array_equal(_golden_reals(ig, x), qonnx_reference(path, x))


# ------------------------------------------------------------------------- host tails

def _with_head(op: str, **attrs) -> onnx.ModelProto:
    m = onnx.load(str(ROOT / "examples" / "digits_mlp_qdq.onnx"))
    out = m.graph.output[0]
    m.graph.node.append(helper.make_node(op, [out.name], ["head"], **attrs))
    out.name = "head"
    if op == "ArgMax":
        out.type.tensor_type.elem_type = TensorProto.INT64
        del out.type.tensor_type.shape.dim[1:]
    return m


@pytest.mark.parametrize("op, attrs", [("Softmax", {"axis": -1}),
                                       ("LogSoftmax", {"axis": 1}),
                                       ("ArgMax", {"axis": 1, "keepdims": 0})])
def test_head_on_the_host_or_in_hardware(tmp_path, op, attrs):
    """A classifier's head after the last DequantizeLinear: Softmax and LogSoftmax run on
    the host (the hardware streams the logits); an ArgMax maps in hardware."""
    ig, path = _ig(_with_head(op, **attrs), tmp_path)
    if op == "ArgMax":
        assert not ig.host_tail
        return
    # the tail takes the logits' DequantizeLinear too: the hardware streams their integers
    assert tail_nodes(ig.host_tail) == ["DequantizeLinear", op]
    assert not ig.output_dequantized
    rows = {r.node: r.status for r in inspect(path).rows}
    assert list(rows.values()).count("host") == 2
    x = np.load(ROOT / "examples" / "digits_test.npz")
    x = x[x.files[0]][:40]
    import onnxruntime as ort
    m = onnx.load(str(path))
    m.graph.output.append(onnx.ValueInfoProto(name=ig.onnx_output))
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    ref, logits = sess.run(["head", ig.onnx_output], {sess.get_inputs()[0].name: x})
    # the tail on the reference's own (quantized) logits is the reference's output
    np.testing.assert_allclose(run_tail(ig.host_tail, logits), ref, rtol=0, atol=1e-6)
    got = _golden_reals(ig, x)
    assert got.shape == ref.shape
    assert np.mean(got.argmax(1) == ref.argmax(1)) >= 0.95


def test_float_tail_streams_the_accumulator(tmp_path):
    """A Brevitas network whose last Gemm has a float bias and no quantizer after it: the
    hardware streams the exact accumulator; the host scales it and adds the bias."""
    path = FIELD / "field_float_tail.onnx"
    ig = to_int_graph(load_model(path, upgrade=True))
    assert ig.output_scale is not None and ig.output_offset is not None
    assert not ig.output_dequantized and not ig.host_tail
    x = np.load(FIELD / "field_float_tail_test.npz")["input"][:16]
    ref = qonnx_reference(path, x)
    got = _golden_reals(ig, x)
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-5 * max(1.0, np.abs(ref).max()))
    # the accumulator integers are the reference's, exactly, after the inverse map
    y = golden.run(ig, ig.quantize_input(x.reshape(16, -1)))[ig.output].reshape(16, -1)
    assert np.array_equal(ig.output_integers(ref.reshape(16, -1)), ig.from_stream(y))


# ------------------------------------------------------------------ channel-last models

def _keras_cnn() -> onnx.ModelProto:
    """tf2onnx's layout: NHWC input, Transpose to NCHW before the first Conv, Transpose back
    and Reshape [-1, K] before the dense layer, Softmax head."""
    rng = np.random.default_rng(0)
    consts = {"W1": rng.normal(0, .3, (4, 3, 3, 3)), "B1": rng.normal(0, .1, 4),
              "W2": rng.normal(0, .2, (36, 5)), "B2": rng.normal(0, .1, 5)}
    inits = [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in consts.items()]
    inits.append(numpy_helper.from_array(np.array([-1, 36], np.int64), "shape"))
    nodes = [helper.make_node("Transpose", ["input_1"], ["t0"], perm=[0, 3, 1, 2]),
             helper.make_node("Conv", ["t0", "W1", "B1"], ["c1"], kernel_shape=[3, 3],
                              pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Transpose", ["p1"], ["t1"], perm=[0, 2, 3, 1]),
             helper.make_node("Reshape", ["t1", "shape"], ["f"]),
             helper.make_node("MatMul", ["f", "W2"], ["m"]),
             helper.make_node("Add", ["m", "B2"], ["a"]),
             helper.make_node("Softmax", ["a"], ["dense_1"], axis=-1)]
    g = helper.make_graph(
        nodes, "keras", [helper.make_tensor_value_info("input_1", TensorProto.FLOAT,
                                                       ["unk__6", 6, 6, 3])],
        [helper.make_tensor_value_info("dense_1", TensorProto.FLOAT, ["unk__7", 5])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def test_channel_last_input_streams_channel_last(tmp_path):
    """The Transpose of the NHWC input becomes the host's input order: the first Conv reads
    a channel-last stream, golden equals onnxruntime on the quantized model."""
    from hwgen.quantize import quantize
    x = np.random.default_rng(3).normal(0, 1, (48, 6, 6, 3)).astype(np.float32)
    onnx.save(_keras_cnn(), tmp_path / "keras.onnx")
    np.savez(tmp_path / "cal.npz", input_1=x)
    quantize(tmp_path / "keras.onnx", tmp_path / "cal.npz", tmp_path / "keras_qdq.onnx")
    ig = to_int_graph(load_model(tmp_path / "keras_qdq.onnx", upgrade=True))
    assert ig.tensors[ig.input].shape == (3, 6, 6)
    # stream element k = (h, w, c) in raster order, channels innermost: NHWC's own order
    assert np.array_equal(ig.input_order, np.arange(6 * 6 * 3))
    assert tail_nodes(ig.host_tail)[:2] == ["DequantizeLinear", "Softmax"]
    import onnxruntime as ort
    sess = ort.InferenceSession(str(tmp_path / "keras_qdq.onnx"),
                                providers=["CPUExecutionProvider"])
    ref = sess.run(None, {"input_1": x})[0]
    got = _golden_reals(ig, x)
    assert got.shape == ref.shape
    assert np.mean(got.argmax(1) == ref.argmax(1)) >= 0.95
    assert np.max(np.abs(got - ref)) < 0.1


# ------------------------------------------------------------ symbolic output dimensions

@pytest.mark.sim
def test_symbolic_output_dimensions(tmp_path):
    """An output declared [N, M] (sizes only symbolic) compiles, simulates and verifies; its
    manifest shape is the batch and the computed size."""
    m = onnx.load(str(ROOT / "examples" / "digits_mlp_qdq.onnx"))
    dims = m.graph.output[0].type.tensor_type.shape.dim
    dims[0].dim_param, dims[1].dim_param = "N", "M"
    onnx.save(m, tmp_path / "sym.onnx")
    x = np.load(ROOT / "examples" / "digits_test.npz")
    x = x[x.files[0]][:4]
    rep = api.verify(tmp_path / "sym.onnx", x, simulator="amaranth", target_cycles=64)
    assert rep.ok and rep.sim.outputs.shape == (4, 10)
    assert rep.compiled.manifest["output"]["onnx_shape"] == ["N", 10]


# --------------------------------------------------------- the committed field examples

FIELD_MODELS = [
    # (model, ok identical fraction at the hardware output, host tail ops)
    ("field_tfc_w2a2_legacy", 1.0, None),
    ("field_mlp_finn_domain", 1.0, None),
    ("field_tfc_w1a1_bipolar", 1.0, None),
    ("field_int8_annotated", 1.0, None),
    ("field_unsw_annotated", 0.8, None),
    ("field_float_tail", 1.0, None),
    ("field_softmax_head_qonnx", 1.0, ["Softmax"]),
    ("field_logsoftmax_head_qonnx", 1.0, ["LogSoftmax"]),
    ("field_cnn_channels_last", 1.0, None),
]


@pytest.mark.sim
@pytest.mark.parametrize("name, identical, tail", FIELD_MODELS)
def test_field_examples_verify(name, identical, tail):
    """Each example from the field: RTL == golden (Amaranth's simulator), the agreement with
    the model's reference (qonnx) and, with a host tail, the whole output compared."""
    data = np.load(FIELD / f"{name}_test.npz")
    x = data[data.files[0]][:6]
    rep = api.verify(FIELD / f"{name}.onnx", x, simulator="amaranth", target_cycles=256)
    assert rep.ok and rep.reference == "qonnx"
    assert rep.ort_identical_fraction >= identical and rep.ort_max_step_diff <= 1
    if tail is None:
        assert rep.host_tail is None
    else:
        assert rep.host_tail.ops == tail and rep.host_tail.max_abs_diff < 1e-5


QDQ_FIELD_MODELS = [
    # (model, host tail ops); every one quantized by onnxruntime (hwgen quantize)
    ("field_keras_cnn", ["DequantizeLinear", "Softmax", "QuantizeLinear", "DequantizeLinear"]),
    ("field_keras_dense_bn",
     ["DequantizeLinear", "Softmax", "QuantizeLinear", "DequantizeLinear"]),
    ("field_keras_dense_muladd",
     ["DequantizeLinear", "Softmax", "QuantizeLinear", "DequantizeLinear"]),
    ("field_keras_conv1d", ["DequantizeLinear", "Softmax", "QuantizeLinear", "DequantizeLinear"]),
    ("field_flatten_axis0", None),
    ("field_torch_mean_ts", None),
    ("field_torch_mean_dynamo", None),
    ("field_torch_flatten_softmax_ts",
     ["DequantizeLinear", "Softmax", "QuantizeLinear", "DequantizeLinear"]),
    ("field_torch_flatten_softmax_dynamo",
     ["DequantizeLinear", "Softmax", "QuantizeLinear", "DequantizeLinear"]),
    ("field_torch_flatten_logsoftmax_ts", ["DequantizeLinear", "LogSoftmax"]),
    ("field_torch_flatten_logsoftmax_dynamo", ["DequantizeLinear", "LogSoftmax"]),
    ("field_keras_concat_upsample",
     ["DequantizeLinear", "Softmax", "QuantizeLinear", "DequantizeLinear"]),
]


@pytest.mark.sim
@pytest.mark.parametrize("name, tail", QDQ_FIELD_MODELS)
def test_field_qdq_examples_verify(name, tail):
    """tf2onnx-style (NHWC input, BatchNormalization on [N, C, 1] or as Mul/Add, Conv1D,
    Softmax) and PyTorch models (both exporters, dynamic batch), quantized by onnxruntime:
    RTL == golden, within one step of onnxruntime at the hardware output, and with a host
    tail the model's own output equal to onnxruntime's."""
    data = np.load(FIELD / f"{name}_test.npz")
    x = data[data.files[0]][:4]
    rep = api.verify(FIELD / f"{name}_qdq.onnx", x, simulator="amaranth", target_cycles=512)
    assert rep.ok and rep.reference == "onnxruntime"
    assert rep.ort_max_step_diff <= 1 and rep.ort_identical_fraction >= 0.95
    if tail is None:
        assert rep.host_tail is None
    else:
        assert rep.host_tail.ops == tail
        assert rep.host_tail.top1_agreement == 1.0
        if rep.ort_identical_fraction == 1.0:
            assert rep.host_tail.max_abs_diff == 0.0


# ----------------------------------------------------------------------- MultiThreshold

def _multithreshold_model(out_dtype: str, n: int, scale: float, bias: float) -> onnx.ModelProto:
    """FINN's streamlined form: Quant'd input → MatMul → MultiThreshold (domain
    finn.custom_op.general, not imported) → MatMul → Quant."""
    rng = np.random.default_rng(5)
    w1 = rng.integers(-3, 4, (10, 8)).astype(np.float32)
    w2 = rng.integers(-3, 4, (8, 4)).astype(np.float32)
    thr = np.sort(rng.normal(0, 6, (8, n)), axis=1).astype(np.float32)
    f32 = np.float32
    inits = [numpy_helper.from_array(a, k) for k, a in (
        ("w1", w1), ("w2", w2), ("thr", thr), ("s_in", f32(0.25)), ("zero", f32(0.0)),
        ("b4", f32(4.0)), ("b3", f32(3.0)), ("one", f32(1.0)), ("so", f32(0.5)),
        ("b8", f32(8.0)))]
    nodes = [helper.make_node("Quant", ["x", "s_in", "zero", "b4"], ["xq"], domain=DOMAIN,
                              signed=1, narrow=0, rounding_mode="ROUND"),
             helper.make_node("Quant", ["w1", "one", "zero", "b3"], ["w1q"], domain=DOMAIN,
                              signed=1, narrow=0, rounding_mode="ROUND"),
             helper.make_node("MatMul", ["xq", "w1q"], ["m1"]),
             helper.make_node("MultiThreshold", ["m1", "thr"], ["a1"],
                              domain="finn.custom_op.general", out_dtype=out_dtype,
                              out_scale=scale, out_bias=bias),
             helper.make_node("Quant", ["w2", "one", "zero", "b3"], ["w2q"], domain=DOMAIN,
                              signed=1, narrow=0, rounding_mode="ROUND"),
             helper.make_node("MatMul", ["a1", "w2q"], ["m2"]),
             helper.make_node("Quant", ["m2", "so", "zero", "b8"], ["y"], domain=DOMAIN,
                              signed=1, narrow=0, rounding_mode="ROUND")]
    g = helper.make_graph(nodes, "mt",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 10])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13),
                                               helper.make_opsetid(DOMAIN, 1)], ir_version=8)


@pytest.mark.parametrize("out_dtype, n, scale, bias", [("UINT2", 3, 1.0, 0.0),
                                                       ("INT2", 3, 1.0, -2.0),
                                                       ("BIPOLAR", 1, 2.0, -1.0)])
def test_multithreshold(tmp_path, out_dtype, n, scale, bias):
    """MultiThreshold after a layer becomes its thresholds; golden equals qonnx."""
    ig, path = _ig(_multithreshold_model(out_dtype, n, scale, bias), tmp_path)
    assert [type(op).__name__ for op in ig.ops].count("Thresholding") == 1
    x = np.random.default_rng(6).normal(0, 1, (32, 10)).astype(np.float32)
    assert np.array_equal(_golden_reals(ig, x), qonnx_reference(path, x))


def test_constant_subgraphs_are_evaluated(tmp_path):
    """Any ai.onnx op whose inputs are all constants is evaluated at import: a weight scale
    computed as ``Pow(s, 1)`` (FINN's exports compute scales with Pow) maps like the plain
    constant."""
    m = onnx.load(str(ROOT / "examples" / "digits_mlp_qdq.onnx"))
    ig_plain, _ = _ig(m, tmp_path, "plain.onnx")
    dq = next(n for n in m.graph.node if n.op_type == "DequantizeLinear"
              and n.input[1] in {i.name for i in m.graph.initializer})
    m.graph.initializer.append(numpy_helper.from_array(np.float32(1.0), "pow_one"))
    m.graph.node.insert(0, helper.make_node("Pow", [dq.input[1], "pow_one"], ["pow_scale"]))
    dq.input[1] = "pow_scale"
    ig_pow, path = _ig(m, tmp_path, "pow.onnx")
    assert ig_pow.canonical() == ig_plain.canonical()
    assert {r.status for r in inspect(path).rows if r.op_type == "Pow"} == {"constant"}


@pytest.mark.sim
def test_a_fixed_batch_size_is_checked_before_any_work(tmp_path):
    """A model that declares a fixed, implausible batch size (a PyTorch export did: 789,444):
    the reference runs it with the batch axis made symbolic; where the graph itself depends
    on that size, verify refuses in one line before compiling anything."""
    m = onnx.load(str(ROOT / "examples" / "digits_mlp_qdq.onnx"))
    for vi in list(m.graph.input) + list(m.graph.output):
        vi.type.tensor_type.shape.dim[0].dim_value = 789444
    onnx.save(m, tmp_path / "fixed.onnx")
    x = np.load(ROOT / "examples" / "digits_test.npz")
    x = x[x.files[0]][:4]
    rep = api.verify(tmp_path / "fixed.onnx", x, simulator="amaranth", target_cycles=64)
    assert rep.ok and rep.samples == 4
    # a Reshape to the fixed size: onnxruntime cannot run 4 samples of it
    x_name = m.graph.input[0].name
    for n in m.graph.node:
        n.input[:] = ["x_r" if i == x_name else i for i in n.input]
    m.graph.initializer.append(numpy_helper.from_array(np.array([789444, 64], np.int64),
                                                       "fixed_shape"))
    m.graph.node.insert(0, helper.make_node("Reshape", [x_name, "fixed_shape"], ["x_r"]))
    onnx.save(m, tmp_path / "fixed2.onnx")
    out = tmp_path / "never"
    with pytest.raises(HwgenError, match=r"fixes its batch size to 789,444.*--count"):
        api.verify(tmp_path / "fixed2.onnx", x, simulator="amaranth", out_dir=out)
    assert not out.exists()


@pytest.mark.sim
def test_command_line_applies_the_host_tail(tmp_path):
    """``hwgen inspect`` marks the Softmax ``host``; ``compile`` records the tail in the
    manifest; ``simulate`` writes the model's own output (the probabilities), equal to
    qonnx's execution on the same inputs."""
    from conftest import run_hwgen
    model = FIELD / "field_softmax_head_qonnx.onnx"
    p = run_hwgen("inspect", model, cwd=tmp_path)
    assert p.returncode == 0 and "host: runs on the host" in p.stdout, p.stdout
    out = tmp_path / "design"
    p = run_hwgen("compile", model, "-o", out, "--target-cycles", "256", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    import json
    man = json.loads((out / "manifest.json").read_text())
    assert man["host_tail"]["ops"] == ["Softmax"] and man["host_tail"]["output"] == "output"
    data = np.load(FIELD / "field_softmax_head_qonnx_test.npz")
    x = data[data.files[0]][:4]
    np.save(tmp_path / "x.npy", x)
    p = run_hwgen("simulate", out, "--input", tmp_path / "x.npy", "-o", tmp_path / "y.npy",
                  "--simulator", "amaranth", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    y = np.load(tmp_path / "y.npy")
    np.testing.assert_allclose(y, qonnx_reference(model, x), rtol=0, atol=1e-6)
    assert np.allclose(y.sum(axis=1), 1.0, atol=1e-5)
