"""Joins, elementwise operators and views real models use (tiny float models quantized by
onnxruntime's ``quantize_static``, as in ``test_cnn_ops``):

* ``x · f(x)`` — HardSwish and SiLU as onnxruntime's quantizer splits them (HardSigmoid /
  Sigmoid, then Mul): one lookup table, equal to onnxruntime on every element (QDQ and
  QOperator: QLinearMul);
* squeeze-and-excitation ``x[C, H, W] · s[C, 1, 1]``: the ``chanmul`` block, equal to
  onnxruntime (MLAS's QLinearMul arithmetic), its feature-map FIFO holding a frame; the
  product of two maps of one shape (the second held whole);
* Add and Sub of a feature map and a per-channel vector (either order; the ``bcast`` block
  into the adder) and Sub of two maps (the adder with one input negated);
* BatchNormalization of its own (after a Relu; after a Gemm): the ``affine`` block with
  constants fitted to onnxruntime's float32 staircase, equal to onnxruntime everywhere;
* Concat of three and four feature maps (QDQ and QLinearConcat), equal to onnxruntime;
* nearest Resize by integer factors (the ``upsample`` block), the factors found by running
  onnxruntime's own Resize on a map of pixel numbers; other resizes refused by name;
* Reshape with ``allowzero=1`` (accepted without a 0 in the target, refused by name with
  one), and a Reshape between a ReduceMean and its QuantizeLinear;
* RTL == golden (``np.array_equal``) in Amaranth's simulator with random stalls for one model
  of each, and one model holding all of them (plus ArgMax) through ``hwgen.api.verify`` in
  the native Verilator simulator.
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from test_cnn_ops import (
    Net,
    assert_agrees,
    assert_rtl_equals_golden,
    golden_and_ort,
    import_,
    inputs,
    quantized,
)

from hwgen.api import verify
from hwgen.dataflow.lower import lower
from hwgen.dataflow.ops_affine import AffineOp
from hwgen.dataflow.ops_elementwise import ChanMulOp
from hwgen.dataflow.ops_join import ConcatOp
from hwgen.dataflow.ops_table import TableOp
from hwgen.errors import HwgenError
from hwgen.rtl_templates.affine import fit_channel

PADS = [1, 1, 1, 1]


# ------------------------------------------------------------------------- x · f(x)

def m_hardswish(seed):
    n = Net((3, 6, 6), seed)
    return n, n.op("HardSwish", [n.conv("x", 4, 3, "conv", pads=PADS)], "hswish")


def m_silu(seed):
    n = Net((3, 6, 6), seed)
    c = n.conv("x", 4, 3, "conv", pads=PADS)
    return n, n.op("Mul", [c, n.op("Sigmoid", [c], "sigmoid")], "silu")


GATED = {"hardswish": (m_hardswish, "HardSigmoid"), "silu": (m_silu, "Sigmoid")}


@pytest.mark.parametrize("fmt", ["qdq", "qop"])
@pytest.mark.parametrize("act", sorted(GATED))
def test_gated_activation_is_one_table_equal_to_onnxruntime(act, fmt):
    builder, gate = GATED[act]
    _, qm, x = quantized(builder, fmt=fmt)
    kinds = [n.op_type for n in qm.graph.node]
    assert ("Mul" if fmt == "qdq" else "QLinearMul") in kinds     # the quantizer split it
    assert any(k.endswith(gate) for k in kinds)
    ig = import_(qm)
    assert [type(op).__name__ for op in ig.ops] == ["Conv", "TableOp"]
    # the one table owns the gate, the product and the quantizers between them
    owned = {n.name or f"#{k} ({n.op_type})" for k, n in enumerate(qm.graph.node)
             if n.op_type.endswith((gate, "Mul"))}
    assert owned <= set(ig.ops[1].nodes)
    xq, y_stream, y, ref = golden_and_ort(ig, qm, x)
    assert np.array_equal(y, ref)                      # every element
    assert len(np.unique(y)) >= 32
    if fmt == "qdq":
        assert_rtl_equals_golden(ig, xq, y_stream)


def test_gate_read_elsewhere_is_kept():
    """When the gate f(x) has another reader, its table stays and the product is a second
    table of x."""
    def build(seed):
        n = Net((3, 6, 6), seed)
        c = n.conv("x", 4, 3, "conv", pads=PADS)
        s = n.op("Sigmoid", [c], "sigmoid")
        return n, n.op("Concat", [n.op("Mul", [c, s], "silu"), s], "cat", channels=8, axis=1)
    _, qm, x = quantized(build, fmt="qdq")
    ig = import_(qm)
    assert [type(op).__name__ for op in ig.ops] == ["Conv", "TableOp", "TableOp", "ConcatOp"]
    assert all(isinstance(op, TableOp) and op.input == ig.ops[0].output for op in ig.ops[1:3])
    assert_agrees(ig, qm, x)


# ------------------------------------------------------------------------- x · s[c]

def m_squeeze_excite(seed):
    n = Net((3, 6, 6), seed)
    c = n.relu(n.conv("x", 8, 3, "conv", pads=PADS), "relu")
    g = n.op("GlobalAveragePool", [c], "gap")
    f = n.relu(n.conv(g, 4, 1, "fc1"), "fc1_relu")
    s = n.op("Sigmoid", [n.conv(f, 8, 1, "fc2")], "gate")
    return n, n.op("Mul", [c, s], "excite")


@pytest.mark.parametrize("fmt", ["qdq", "qop"])
def test_squeeze_excitation_equals_onnxruntime(fmt):
    _, qm, x = quantized(m_squeeze_excite, fmt=fmt)
    ig = import_(qm)
    assert [type(op).__name__ for op in ig.ops] == ["Conv", "GlobalAvgPool", "Conv", "Conv",
                                                   "TableOp", "ChanMulOp"]
    xq, y_stream = assert_agrees(ig, qm, x)
    if fmt == "qdq":
        dfg = assert_rtl_equals_golden(ig, xq, y_stream)
        # the feature map waits for its vector: its FIFO holds a whole frame
        op = ig.ops[-1]
        blk = next(b for b in dfg.blocks if b.kind == "chanmul")
        fifo = next(b for b in dfg.blocks if b.outputs == [blk.inputs[0]])
        assert fifo.params.depth >= dfg.streams[blk.inputs[0]].beats
        assert isinstance(op, ChanMulOp)


def m_excite_join(op: str, vector_first: bool):
    def build(seed):
        n = Net((3, 6, 6), seed)
        c = n.relu(n.conv("x", 8, 3, "conv", pads=PADS), "relu")
        g = n.op("GlobalAveragePool", [c], "gap")
        v = n.conv(n.relu(n.conv(g, 4, 1, "fc1"), "fc1_relu"), 8, 1, "fc2")
        return n, n.op(op, [v, c] if vector_first else [c, v], "join")
    return build


def m_sub_same_shape(seed):
    n = Net((3, 6, 6), seed)
    return n, n.op("Sub", [n.conv("x", 4, 3, "a", pads=PADS), n.conv("x", 4, 1, "b")], "join")


JOINS = {"add-map-first": ("Add", False), "add-vector-first": ("Add", True),
         "sub-map-first": ("Sub", False), "sub-vector-first": ("Sub", True)}
#: onnxruntime's quantizer leaves Sub in float unless asked for it
SUB_OPS = ["Conv", "GlobalAveragePool", "Relu", "Sub"]


@pytest.mark.parametrize("case", sorted(JOINS))
def test_broadcast_add_and_sub_equal_onnxruntime(case):
    op, vector_first = JOINS[case]
    opts = {"op_types": SUB_OPS} if op == "Sub" else {}
    _, qm, x = quantized(m_excite_join(op, vector_first), fmt="qdq", **opts)
    assert op in [n.op_type for n in qm.graph.node]
    ig = import_(qm)
    assert [type(op).__name__ for op in ig.ops] == ["Conv", "GlobalAvgPool", "Conv", "Conv",
                                                   "AddOp"]
    xq, y_stream = assert_agrees(ig, qm, x)
    assert ig.ops[-1].inputs[0] == ig.ops[0].output          # the map first, the vector B
    if case == "sub-map-first":
        dfg = assert_rtl_equals_golden(ig, xq, y_stream)
        assert [b.kind for b in dfg.blocks].count("bcast") == 1


def test_broadcast_qlinear_add_equals_onnxruntime():
    _, qm, x = quantized(m_excite_join("Add", True), fmt="qop")
    assert "QLinearAdd" in [n.op_type for n in qm.graph.node]
    ig = import_(qm)
    assert type(ig.ops[-1]).__name__ == "AddOp"
    assert_agrees(ig, qm, x)


def test_sub_of_two_maps_equals_onnxruntime():
    _, qm, x = quantized(m_sub_same_shape, fmt="qdq", op_types=SUB_OPS)
    ig = import_(qm)
    assert [type(op).__name__ for op in ig.ops] == ["Conv", "Conv", "AddOp"]
    assert ig.ops[-1].negate == 1
    assert_agrees(ig, qm, x)


def test_squeeze_excitation_int8_with_relu_after():
    """Symmetric int8 activations: onnxruntime keeps the Relu after the product between a
    DequantizeLinear and a QuantizeLinear; it folds into the product's clamp."""
    def build(seed):
        n, out = m_squeeze_excite(seed)
        return n, n.relu(out, "after")
    _, qm, x = quantized(build, fmt="qdq", per_channel=True, activation_type="int8",
                         symmetric_activations=True)
    assert "Relu" in [n.op_type for n in qm.graph.node]
    ig = import_(qm)
    op = ig.ops[-1]
    assert isinstance(op, ChanMulOp) and op.lo == ig.tensors[op.output].zero_point
    assert_agrees(ig, qm, x)


@pytest.mark.parametrize("fmt", ["qdq", "qop"])
def test_product_of_two_maps_equals_onnxruntime(fmt):
    """Two tensors of one shape: the second is held whole (a ``chanmul`` of one pixel)."""
    def build(seed):
        n = Net((3, 6, 6), seed)
        return n, n.op("Mul", [n.conv("x", 4, 3, "a", pads=PADS), n.conv("x", 4, 1, "b")],
                       "prod")
    _, qm, x = quantized(build, fmt=fmt)
    ig = import_(qm)
    assert [type(op).__name__ for op in ig.ops] == ["Conv", "Conv", "ChanMulOp"]
    xq, y_stream, y, ref = golden_and_ort(ig, qm, x)
    assert np.array_equal(y, ref)
    if fmt == "qdq":
        assert_rtl_equals_golden(ig, xq, y_stream)


def test_product_broadcast_over_channels_is_refused_by_name():
    def build(seed):
        n = Net((3, 6, 6), seed)
        return n, n.op("Mul", [n.conv("x", 4, 3, "a", pads=PADS), n.conv("x", 1, 1, "b")],
                       "prod")
    _, qm, _ = quantized(build, fmt="qdq")
    with pytest.raises(HwgenError, match=r"node prod \(Mul-\d+\).*one value per channel"):
        import_(qm)


# ------------------------------------------------------------------------- BatchNormalization

def _bn(n: Net, x: str, c: int, seed: int) -> str:
    rng = np.random.default_rng(seed)
    consts = [n.const(f"bn.{k}", v) for k, v in (
        ("scale", rng.uniform(-2, 2, c)), ("bias", rng.uniform(-1, 1, c)),
        ("mean", rng.uniform(-1, 1, c)), ("var", rng.uniform(0.5, 2, c)))]
    return n.op("BatchNormalization", [x, *consts], "bn")


def m_relu_bn(seed):
    n = Net((3, 6, 6), seed)
    return n, _bn(n, n.relu(n.conv("x", 6, 3, "conv", pads=PADS), "relu"), 6, seed)


def m_gemm_bn(seed):
    n = Net((3, 4, 4), seed)
    z = n.gemm(n.op("Flatten", ["x"], "flatten"), 48, 16, "fc")
    return n, n.relu(_bn(n, z, 16, seed), "relu")


BN_CONFIGS = {"u8": {}, "i8sym-perchannel": dict(per_channel=True, activation_type="int8",
                                                 symmetric_activations=True)}


@pytest.mark.parametrize("config", sorted(BN_CONFIGS))
@pytest.mark.parametrize("model", ["relu_bn", "gemm_bn"])
def test_lone_batch_norm_equals_onnxruntime(model, config):
    builder = {"relu_bn": m_relu_bn, "gemm_bn": m_gemm_bn}[model]
    _, qm, x = quantized(builder, fmt="qdq", **BN_CONFIGS[config])
    assert "BatchNormalization" in [n.op_type for n in qm.graph.node]
    ig = import_(qm)
    assert isinstance(ig.ops[1], AffineOp)
    assert any(m < 0 for m in ig.ops[1].mult)          # negative gammas too
    xq, y_stream, y, ref = golden_and_ort(ig, qm, x)
    assert np.array_equal(y, ref)                      # every element
    assert len(np.unique(y)) >= 32
    if config == "u8":
        assert_rtl_equals_golden(ig, xq, y_stream)


def test_fit_channel():
    v = np.arange(-128, 128)
    # onnxruntime-like staircase: rint of a float32 affine map, clamped
    real = (v.astype(np.float32) * np.float32(0.37) + np.float32(3.25)).astype(np.float32)
    t = np.clip(np.rint(real), -20, 40).astype(np.int64)
    mult, off = fit_channel(v, t, -20, 40, 24, int(0.37 * 2 ** 24))
    assert np.array_equal(np.clip((v * mult + off) >> 24, -20, 40), t)
    falling = np.clip(np.rint(-0.8 * v), -128, 127).astype(np.int64)
    mult, off = fit_channel(v, falling, -128, 127, 20, int(-0.8 * 2 ** 20))
    assert np.array_equal(np.clip((v * mult + off) >> 20, -128, 127), falling)
    broken = t.copy()
    broken[100] += 3                                   # not a staircase of any affine map
    assert fit_channel(v, broken, -20, 40, 24, int(0.37 * 2 ** 24)) is None


# ------------------------------------------------------------------------- Concat of N

def m_concat3(seed):
    n = Net((3, 6, 6), seed)
    a = n.conv("x", 4, 3, "c1", pads=PADS)
    b = n.conv("x", 2, 1, "c2")
    return n, n.op("Concat", [a, b, n.conv("x", 6, 1, "c3")], "cat", channels=12, axis=1)


def m_concat4(seed):
    n = Net((3, 6, 6), seed)
    a = n.conv("x", 4, 3, "c1", pads=PADS)
    b = n.relu(n.conv("x", 2, 1, "c2"), "r")
    c = n.conv("x", 6, 1, "c3", gain=3.0)
    return n, n.op("Concat", [a, b, c, "x"], "cat", channels=15, axis=1)


@pytest.mark.parametrize("fmt", ["qdq", "qop"])
@pytest.mark.parametrize("model", ["concat3", "concat4"])
def test_concat_of_n_equals_onnxruntime(model, fmt):
    builder = {"concat3": m_concat3, "concat4": m_concat4}[model]
    _, qm, x = quantized(builder, fmt=fmt)
    ig = import_(qm)
    op = ig.ops[-1]
    assert isinstance(op, ConcatOp) and len(op.inputs) == int(model[-1])
    xq, y_stream, y, ref = golden_and_ort(ig, qm, x)
    assert np.array_equal(y, ref)
    dfg = lower(ig)
    assert sum(b.kind == "concat" for b in dfg.blocks) == len(op.inputs) - 1
    if model == "concat3" and fmt == "qdq":
        assert_rtl_equals_golden(ig, xq, y_stream)


# ------------------------------------------------------------------------- Reshape

def _reshape_model(target, allowzero: int, pooled: bool = False):
    def build(seed):
        n = Net((3, 6, 6), seed)
        c = n.relu(n.conv("x", 4, 3, "conv", pads=PADS), "relu")
        if pooled:
            c = n.op("ReduceMean", [c], "mean", axes=[2, 3], keepdims=1)
        r = n.op("Reshape", [c, n.const("shape", target, np.int64)], "reshape",
                 allowzero=allowzero)
        return n, n.gemm(r, 4 if pooled else 144, 5, "fc")
    return build


def test_reshape_allowzero_without_zero_maps():
    _, qm, x = quantized(_reshape_model([-1, 144], 1), fmt="qdq")
    r = next(n for n in qm.graph.node if n.op_type == "Reshape")
    assert helper.get_attribute_value(r.attribute[0]) == 1
    assert_agrees(import_(qm), qm, x)


def test_reshape_of_reduce_mean_before_its_quantizer():
    """The new PyTorch exporter's ``mean → view``: ReduceMean → Reshape(allowzero=1) →
    QuantizeLinear; the reshape views the pooled result."""
    _, qm, x = quantized(_reshape_model([-1, 4], 1, pooled=True), fmt="qdq")
    kinds = [n.op_type for n in qm.graph.node]
    assert kinds.index("Reshape") == kinds.index("ReduceMean") + 1
    ig = import_(qm)
    assert [type(op).__name__ for op in ig.ops] == ["Conv", "GlobalAvgPool", "MatVec"]
    assert "reshape" in ig.ops[1].nodes
    assert_agrees(ig, qm, x, min_levels=4)


def test_reshape_allowzero_with_zero_is_refused_by_name():
    n = Net((3, 6, 6), 0)
    c = n.relu(n.conv("x", 4, 3, "conv", pads=PADS), "relu")
    r = n.op("Reshape", [c, n.const("shape", [0, 144], np.int64)], "reshape", allowzero=1)
    fm = n.model(n.gemm(r, 144, 5, "fc"))
    from test_cnn_ops import ort_quantize
    # onnxruntime's quantizer cannot run the model's empty batch either: quantize a twin
    # with allowzero=0 and set it back
    twin = onnx.ModelProto()
    twin.CopyFrom(fm)
    rs = next(x for x in twin.graph.node if x.op_type == "Reshape")
    rs.attribute[0].i = 0
    qm = ort_quantize(twin, inputs(32, (3, 6, 6), 1), fmt="qdq")
    next(x for x in qm.graph.node if x.op_type == "Reshape").attribute[0].i = 1
    with pytest.raises(HwgenError, match=r"node reshape \(Reshape-\d+\): allowzero=1 with a 0 "
                                         r"in shape \[0, 144\]"):
        import_(qm)


# ------------------------------------------------------------------------- Resize

def _resize_model(scales, mode: str = "nearest", **attrs):
    def build(seed):
        n = Net((3, 4, 4), seed)
        c = n.relu(n.conv("x", 4, 3, "conv", pads=PADS), "relu")
        r = n.op("Resize", [c, "", n.const("scales", scales)], "resize", mode=mode, **attrs)
        return n, n.conv(r, 3, 3, "after", pads=PADS)
    return build


RESIZES = {"2x3-half-pixel": ((1, 1, 2, 3), {}, (2, 3)),
           "2x2-asymmetric-floor": ((1, 1, 2, 2), dict(coordinate_transformation_mode="asymmetric",
                                                       nearest_mode="floor"), (2, 2))}


@pytest.mark.parametrize("fmt", ["qdq", "qop"])
@pytest.mark.parametrize("case", sorted(RESIZES))
def test_nearest_resize_equals_onnxruntime(case, fmt):
    scales, attrs, factors = RESIZES[case]
    _, qm, x = quantized(_resize_model(scales, **attrs), fmt=fmt)
    ig = import_(qm)
    assert [type(op).__name__ for op in ig.ops] == ["Conv", "UpsampleOp", "Conv"]
    assert (ig.ops[1].fh, ig.ops[1].fw) == factors
    xq, y_stream, y, ref = golden_and_ort(ig, qm, x)
    assert np.array_equal(y, ref)
    if case == "2x3-half-pixel" and fmt == "qdq":
        assert_rtl_equals_golden(ig, xq, y_stream)


@pytest.mark.parametrize("scales,attrs,why", [
    ((1, 1, 2, 2), dict(mode="linear"), "mode='linear'"),
    ((1, 1, 0.5, 0.5), {}, "integer factors"),
    # asymmetric coordinates with round_prefer_floor take rows 0, 0, 1, 1, 1, 2, …
    ((1, 1, 3, 3), dict(coordinate_transformation_mode="asymmetric"), "integer factors")],
    ids=["linear", "downscale", "asymmetric-round"])
def test_other_resizes_are_refused_by_name(scales, attrs, why):
    attrs = dict(attrs)
    mode = attrs.pop("mode", "nearest")
    _, qm, _ = quantized(_resize_model(scales, mode, **attrs), fmt="qdq")
    with pytest.raises(HwgenError, match=rf"node resize \(Resize-\d+\).*{why}"):
        import_(qm)


# ------------------------------------------------------------------------- all of them

def m_everything(seed):
    """Conv → HardSwish → squeeze-and-excitation → Relu → BatchNormalization, concatenated
    with two more convolutions of the input, plus a per-channel vector of itself (Add with
    broadcasting) → Resize ×2 → Flatten → Gemm → ArgMax (small: the Verilator build takes
    most of the time)."""
    n = Net((2, 4, 4), seed)
    c = n.op("HardSwish", [n.conv("x", 4, 3, "conv", pads=PADS)], "hswish")
    g = n.op("GlobalAveragePool", [c], "gap")
    s = n.op("Sigmoid", [n.conv(n.relu(n.conv(g, 2, 1, "fc1"), "fc1_relu"), 4, 1, "fc2")],
             "gate")
    e = _bn(n, n.relu(n.op("Mul", [c, s], "excite"), "excite_relu"), 4, seed)
    cat = n.op("Concat", [e, n.conv("x", 2, 1, "side1"), n.conv("x", 2, 3, "side2",
                                                                 pads=PADS)],
               "cat", channels=8, axis=1)
    v = n.conv(n.op("GlobalAveragePool", [cat], "gap2"), 8, 1, "fc3")
    up = n.op("Resize", [n.op("Add", [cat, v], "shift"), "", n.const("scales", [1, 1, 2, 2])],
              "resize", mode="nearest")
    z = n.gemm(n.op("Flatten", [up], "flatten"), 512, 6, "fc")
    out = n.op("ArgMax", [z], "argmax", axis=1, keepdims=1)

    def model(o):
        graph = helper.make_graph(
            n.nodes, "everything",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", *n.shape])],
            [helper.make_tensor_value_info(o, TensorProto.INT64, None)], initializer=n.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              ir_version=8)
        return onnx.shape_inference.infer_shapes(m, strict_mode=True)
    n.model = model
    return n, out


@pytest.mark.verilator
def test_everything_in_verilator(tmp_path):
    _, qm, x = quantized(m_everything, fmt="qdq")
    ig = import_(qm)
    kinds = {type(op).__name__ for op in ig.ops}
    assert {"TableOp", "ChanMulOp", "AffineOp", "ConcatOp", "AddOp", "UpsampleOp",
            "ArgMaxOp"} <= kinds
    path = tmp_path / "everything.onnx"
    onnx.save(qm, str(path))
    rep = verify(path, x[:8], target_cycles=256)
    assert rep.rtl_equals_golden
    assert rep.ort_identical_fraction == 1.0 and rep.ort_max_step_diff == 0
    assert rep.sim.outputs.shape == (8, 1)             # one index per frame
    assert set(np.unique(rep.sim.outputs)) <= set(range(6))
