"""The convolution family beyond group 1 / depthwise 2-D: grouped convolutions (a
block-diagonal matrix–vector unit), depthwise with a channel multiplier (a vector unit with
M outputs per input channel), 1-D Conv / MaxPool / AveragePool over [N, C, L] maps, Pad
folded into the window after it, and ceil_mode partial last windows.

Tiny float models built with onnx.helper, quantized by onnxruntime's ``quantize_static``
(QDQ, MinMax calibration on uniform inputs in [-1, 1), as ``test_cnn_ops`` does), imported
with ``to_int_graph``:

* every case: the golden model agrees with onnxruntime on 50 inputs (≥ 99.9 % identical
  elements, none more than one step apart; these cases measure 100 %) in QDQ (uint8 per
  tensor, int8 symmetric per channel) and most also in the QOperator format, and the
  importer derives the expected geometry (window, output shape, weight structure);
* two small models that hold the cases together (a 2-D one and a 1-D one ending in
  Flatten → Gemm): RTL == golden (``np.array_equal``) in Amaranth's simulator with random
  stalls; the 1-D one also through ``hwgen.verify`` in the native Verilator bench;
* forms that cannot map exactly are refused with one line naming node, op and reason.

A Pad before a Conv, MaxPool or AveragePool is fused into it by onnxruntime's optimizer in
``quant_pre_process``, so the Pad cases quantize without pre-processing (``preprocess=False``)
to keep the Pad node in the model, as an exporter that skips the optimizer leaves it.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import save_model
from modelgen import op_sequence, quantize_qdq
from test_cnn_ops import (
    N_CALIB,
    N_TEST,
    Net,
    assert_agrees,
    assert_rtl_equals_golden,
    import_,
    inputs,
    op_types,
    ort_quantize,
)

import hwgen
from hwgen.dataflow.lower import Folding, lower
from hwgen.dataflow.ops_conv import Conv
from hwgen.dataflow.ops_join import AddOp, ConcatOp
from hwgen.dataflow.ops_linear import MatVec
from hwgen.dataflow.ops_pool import GlobalAvgPool, Pool
from hwgen.errors import HwgenError

# ---------------------------------------------------------------------------------------------
# models
# ---------------------------------------------------------------------------------------------

def conv1d(n: Net, x: str, oc: int, k: int, name: str, group: int = 1, **attrs) -> str:
    """A 1-D Conv ([N, C, L] input) with He-initialised weights and a small bias."""
    c = n.channels[x]
    w = n.rng.standard_normal((oc, c // group, k)) * np.sqrt(2.0 / ((c // group) * k))
    ins = [x, n.const(f"{name}.weight", w), n.const(f"{name}.bias", n.rng.uniform(-0.1, 0.1, oc))]
    if group != 1:
        attrs["group"] = group
    return n.op("Conv", ins, name, channels=oc, kernel_shape=[k], **attrs)


def pad(n: Net, x: str, pads: list[int], name: str = "pad", value: float | None = None) -> str:
    ins = [x, n.const(f"{name}.pads", pads, np.int64)]
    if value is not None:
        ins.append(n.const(f"{name}.value", value))
    return n.op("Pad", ins, name, mode="constant")


def m_grouped(seed):
    # group 2 of 4 input channels, 6 outputs: 3 per group, each reading 2 input channels
    n = Net((4, 6, 6), seed)
    return n, n.relu(n.conv("x", 6, 3, "conv", group=2, pads=[1, 1, 1, 1]), "relu")


def m_depthwise_multiplier(seed):
    # group = channels = 4, 8 outputs: channel multiplier 2
    n = Net((4, 6, 6), seed)
    return n, n.conv("x", 8, 3, "conv", group=4, strides=[2, 2], pads=[1, 1, 1, 1])


def m_maxpool_ceil(seed):
    # 7 columns, kernel 2 stride 2: 3 whole windows and a partial one (ceil_mode)
    n = Net((3, 7, 7), seed)
    c = n.conv("x", 4, 3, "conv", pads=[1, 1, 1, 1])
    return n, n.op("MaxPool", [c], "pool", kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)


def m_maxpool_ceil_pads(seed):
    # own pads and a partial last window: 6 + 2 - 3 = 5, stride 2 → 4 outputs (ceil)
    n = Net((3, 6, 6), seed)
    c = n.conv("x", 4, 3, "conv", pads=[1, 1, 1, 1])
    return n, n.op("MaxPool", [c], "pool", kernel_shape=[3, 3], strides=[2, 2],
                   pads=[1, 1, 1, 1], ceil_mode=1)


def m_avgpool_ceil(seed):
    # the divisors count the input only (count_include_pad=0), not ceil mode's extension
    n = Net((3, 6, 6), seed)
    c = n.conv("x", 4, 3, "conv", pads=[1, 1, 1, 1])
    return n, n.op("AveragePool", [c], "pool", kernel_shape=[3, 3], strides=[2, 2],
                   pads=[1, 1, 1, 1], ceil_mode=1, count_include_pad=0)


def m_pad_conv(seed):
    n = Net((3, 6, 6), seed)
    c = n.relu(n.conv("x", 4, 3, "conv0", pads=[1, 1, 1, 1]), "relu")
    return n, n.conv(pad(n, c, [0, 0, 1, 2, 0, 0, 2, 1]), 4, 3, "conv1", pads=[0, 1, 0, 0])


def m_pad_maxpool(seed):
    # no Relu: the map has values below the zero point, so the pad value matters
    n = Net((3, 6, 6), seed)
    c = n.conv("x", 4, 3, "conv0", pads=[1, 1, 1, 1])
    return n, n.op("MaxPool", [pad(n, c, [0, 0, 1, 0, 0, 0, 0, 1])], "pool",
                   kernel_shape=[2, 2], strides=[2, 2])


def m_pad_avgpool(seed):
    n = Net((3, 6, 6), seed)
    c = n.conv("x", 4, 3, "conv0", pads=[1, 1, 1, 1])
    return n, n.op("AveragePool", [pad(n, c, [0, 0, 1, 0, 0, 0, 0, 1])], "pool",
                   kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=0)


def m_pad_relu_maxpool_pads(seed):
    # a Relu before the Pad: the map never goes below the pad value (the zero point), so
    # MaxPool's own pads may take the Pad's value too (int8 symmetric: zero point 0 > -128)
    n = Net((3, 6, 6), seed)
    c = n.relu(n.conv("x", 4, 3, "conv0", pads=[1, 1, 1, 1]), "relu")
    return n, n.op("MaxPool", [pad(n, c, [0, 0, 1, 0, 0, 0, 0, 1])], "pool",
                   kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1)


def m_conv1d(seed):
    n = Net((3, 12), seed)
    return n, n.relu(conv1d(n, "x", 4, 3, "conv", pads=[1, 2]), "relu")


def m_conv1d_grouped_s2(seed):
    n = Net((4, 13), seed)
    return n, conv1d(n, "x", 6, 3, "conv", group=2, strides=[2])


def m_maxpool1d_ceil(seed):
    n = Net((3, 11), seed)
    c = conv1d(n, "x", 4, 3, "conv", pads=[1, 1])
    return n, n.op("MaxPool", [c], "pool", kernel_shape=[2], strides=[2], ceil_mode=1)


def m_avgpool1d(seed):
    n = Net((3, 12), seed)
    c = conv1d(n, "x", 4, 3, "conv", pads=[1, 1])
    return n, n.op("AveragePool", [c], "pool", kernel_shape=[3], strides=[2], pads=[1, 1],
                   count_include_pad=0)


def m_gap1d(seed):
    n = Net((3, 12), seed)
    return n, n.op("GlobalAveragePool", [conv1d(n, "x", 4, 3, "conv")], "gap")


def m_concat1d_add(seed):
    # joins of 1-D maps: a channel Concat and a residual Add
    n = Net((3, 10), seed)
    a = conv1d(n, "x", 2, 3, "conv_a", pads=[1, 1])
    b = conv1d(n, "x", 4, 1, "conv_b")
    c = n.op("Concat", [a, b], "concat", channels=6, axis=1)
    return n, n.op("Add", [c, conv1d(n, c, 6, 3, "conv_c", pads=[1, 1])], "add")


def m_conv1d_flatten_gemm(seed):
    # flatten of a [N, 4, 5] map: the Gemm reads ONNX's C×L order from a channel-last stream
    n = Net((3, 11), seed)
    c = n.relu(conv1d(n, "x", 4, 3, "conv", strides=[2]), "relu")
    return n, n.gemm(n.op("Flatten", [c], "flatten", axis=1), 20, 5, "fc")


def m_model_2d(seed):
    """Pad → grouped conv, depthwise ×2, Pad → MaxPool with a partial last window."""
    n = Net((4, 5, 5), seed)
    c = n.relu(n.conv("x", 4, 3, "conv0", pads=[1, 1, 1, 1]), "relu0")
    c = n.relu(n.conv(pad(n, c, [0, 0, 1, 1, 0, 0, 1, 1]), 4, 3, "grouped", group=2), "relu1")
    c = n.relu(n.conv(c, 8, 3, "dw_x2", group=4, strides=[2, 2], pads=[1, 1, 1, 1]),
               "relu2")                                                          # 3 × 3
    c = pad(n, c, [0, 0, 0, 0, 0, 0, 0, 1], "pad2")                              # 3 × 4
    return n, n.op("MaxPool", [c], "pool", kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)


def m_model_1d(seed):
    """Conv1d → Pad → grouped Conv1d → depthwise ×2 Conv1d → MaxPool1d (ceil) →
    AveragePool1d → Flatten → Gemm."""
    n = Net((4, 16), seed)
    c = n.relu(conv1d(n, "x", 4, 3, "conv0", pads=[1, 1]), "relu0")
    c = n.relu(conv1d(n, pad(n, c, [0, 0, 2, 0, 0, 1]), 6, 3, "grouped", group=2), "relu1")
    c = n.relu(conv1d(n, c, 12, 3, "dw_x2", group=6, pads=[1, 1]), "relu2")     # 12 × 17
    c = n.op("MaxPool", [c], "maxpool", kernel_shape=[2], strides=[2], ceil_mode=1)  # 12 × 9
    c = n.op("AveragePool", [c], "avgpool", kernel_shape=[3], pads=[1, 1],
             count_include_pad=1)
    return n, n.gemm(n.op("Flatten", [c], "flatten", axis=1), 12 * 9, 5, "fc")


def m_pad_nonzero(seed):
    n = Net((3, 6, 6), seed)
    c = n.relu(n.conv("x", 4, 3, "conv0", pads=[1, 1, 1, 1]), "relu")
    return n, n.conv(pad(n, c, [0, 0, 1, 1, 0, 0, 1, 1], value=0.5), 4, 3, "conv1")


def m_pad_nonzero_own_pads(seed):
    n = Net((3, 6, 6), seed)
    c = n.relu(n.conv("x", 4, 3, "conv0", pads=[1, 1, 1, 1]), "relu")
    return n, n.conv(pad(n, c, [0, 0, 1, 1, 0, 0, 1, 1], value=0.5), 4, 3, "conv1",
                     pads=[1, 1, 1, 1])


# name: (builder, quantize options, op types of the integer graph)
CASES = {
    "grouped_2_of_4": (m_grouped, {}, [Conv]),
    "depthwise_multiplier_2": (m_depthwise_multiplier, {}, [Conv]),
    "maxpool_ceil_partial": (m_maxpool_ceil, {}, [Conv, Pool]),
    "maxpool_ceil_partial_pads": (m_maxpool_ceil_pads, {}, [Conv, Pool]),
    "avgpool_ceil_partial_excl": (m_avgpool_ceil, {}, [Conv, Pool]),
    "pad_conv": (m_pad_conv, {"preprocess": False}, [Conv, Conv]),
    "pad_maxpool": (m_pad_maxpool, {"preprocess": False}, [Conv, Pool]),
    "pad_avgpool_excl": (m_pad_avgpool, {"preprocess": False}, [Conv, Pool]),
    "pad_relu_maxpool_pads": (m_pad_relu_maxpool_pads, {"preprocess": False}, [Conv, Pool]),
    "pad_nonzero_conv": (m_pad_nonzero, {"preprocess": False}, [Conv, Conv]),
    "conv1d_relu": (m_conv1d, {}, [Conv]),
    "conv1d_grouped_s2": (m_conv1d_grouped_s2, {}, [Conv]),
    "maxpool1d_ceil": (m_maxpool1d_ceil, {}, [Conv, Pool]),
    "avgpool1d_excl": (m_avgpool1d, {}, [Conv, Pool]),
    "gap1d": (m_gap1d, {}, [Conv, GlobalAvgPool]),
    "conv1d_flatten_gemm": (m_conv1d_flatten_gemm, {}, [Conv, MatVec]),
    "concat1d_add": (m_concat1d_add, {}, [Conv, Conv, ConcatOp, Conv, AddOp]),
}
CONFIGS = {"u8": {}, "i8sym-perchannel": dict(per_channel=True, activation_type="int8",
                                               symmetric_activations=True)}


def quantized(builder, seed: int = 0, **opts):
    """(quantized model, test inputs) of a case."""
    net, out = builder(seed)
    calib = inputs(N_CALIB, net.shape, seed + 1)
    qm = quantize_qdq(net.model(out), calib, batch_size=16, **opts)
    return qm, inputs(N_TEST, net.shape, seed + 2)


# ---------------------------------------------------------------------------------------------
# golden vs onnxruntime, and the geometry the importer derives
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("name", list(CASES))
def test_golden_matches_ort(name, config):
    builder, opts, types = CASES[name]
    qm, x = quantized(builder, **opts, **CONFIGS[config])
    if name.startswith("pad"):
        assert "Pad" in op_sequence(qm)
    ig = import_(qm)
    assert op_types(ig) == types
    assert_agrees(ig, qm, x, min_levels=4)


QOP_CASES = ["grouped_2_of_4", "depthwise_multiplier_2", "maxpool_ceil_partial", "pad_conv",
             "pad_maxpool", "pad_avgpool_excl", "conv1d_grouped_s2", "avgpool1d_excl",
             "conv1d_flatten_gemm", "pad_nonzero_conv"]


@pytest.mark.parametrize("name", QOP_CASES)
def test_qoperator_golden_matches_ort(name):
    """The QOperator format: QLinearConv, QLinearAveragePool, a Pad of uint8 tensors (with
    the zero point as its value) and MaxPool of integers."""
    builder = CASES[name][0]
    net, out = builder(0)
    qm = ort_quantize(net.model(out), inputs(N_CALIB, net.shape, 1), fmt="qop",
                      preprocess=False)
    ops = op_sequence(qm)
    assert "Conv" not in ops and ("Pad" in ops) == name.startswith("pad")
    ig = import_(qm)
    assert op_types(ig) == CASES[name][2]
    assert_agrees(ig, qm, inputs(N_TEST, net.shape, 2), min_levels=4)


def test_grouped_weights_are_block_diagonal():
    qm, _ = quantized(m_grouped)
    conv = import_(qm).ops[0]
    assert not conv.depthwise
    w = conv.weights.reshape(6, 3, 3, 4)               # (oc, kh, kw, c)
    assert not np.any(w[:3, :, :, 2:]) and not np.any(w[3:, :, :, :2])
    assert np.any(w[:3, :, :, :2]) and np.any(w[3:, :, :, 2:])


def test_depthwise_multiplier_is_a_vector_unit():
    """Output o = 2c + j reads input channel c: one vector unit computing two outputs per
    window element (PE input channels in, 2·PE outputs per beat)."""
    qm, _ = quantized(m_depthwise_multiplier)
    ig = import_(qm)
    conv = ig.ops[0]
    assert conv.depthwise and conv.multiplier == 2 and conv.weights.shape == (8, 9)
    dfg = lower(ig, folding={conv.name: Folding(pe=2, simd=1)})
    vvau = next(b for b in dfg.blocks if b.kind == "vvau")
    assert vvau.params.multiplier == 2 and vvau.params.lanes == 4
    assert dfg.streams[vvau.outputs[0]].per_beat == 4
    assert vvau.cost.cycles == 3 * 3 * 9 * 4 // 2       # pixels · K · C/PE, as multiplier 1


def test_one_input_channel_is_a_dense_convolution():
    """Group 1 over one input channel stays a matrix–vector unit (not a depthwise one with a
    multiplier, though both compute the same)."""
    def m_one_channel(seed):
        n = Net((1, 6, 6), seed)
        return n, n.conv("x", 4, 3, "conv", pads=[1, 1, 1, 1])
    qm, x = quantized(m_one_channel)
    ig = import_(qm)
    assert not ig.ops[0].depthwise and ig.ops[0].multiplier == 1
    assert_agrees(ig, qm, x)


def test_ceil_mode_windows():
    ig = import_(quantized(m_maxpool_ceil)[0])
    pool = ig.ops[1]
    assert pool.window.pads == (0, 0, 1, 1) and pool.window.out_hw == (4, 4)
    ig = import_(quantized(m_maxpool_ceil_pads)[0])
    assert ig.ops[1].window.pads == (1, 1, 2, 2) and ig.ops[1].window.out_hw == (4, 4)
    ig = import_(quantized(m_avgpool_ceil)[0])
    pool = ig.ops[1]
    # divisors: the 3×3 window's positions inside the 6×6 input
    assert pool.counts.reshape(4, 4)[0].tolist() == [4, 6, 6, 2]
    assert pool.counts.reshape(4, 4)[3].tolist() == [2, 3, 3, 1]


def test_pad_joins_the_window():
    ig = import_(quantized(m_pad_conv, preprocess=False)[0])
    conv = ig.ops[1]
    # Pad [top 1, left 2, bottom 2, right 1] + the conv's own left pad
    assert conv.window.pads == (1, 3, 2, 1)
    assert "pad" in conv.nodes and conv.name == "conv1"
    ig = import_(quantized(m_pad_maxpool, preprocess=False)[0])
    pool = ig.ops[1]
    assert pool.window.pads == (1, 0, 0, 1)
    assert pool.pad_value == ig.tensors[pool.input].zero_point      # the Pad's real zero
    qm, _ = quantized(m_pad_relu_maxpool_pads, preprocess=False,
                      **CONFIGS["i8sym-perchannel"])
    ig = import_(qm)
    pool = ig.ops[1]
    assert ig.tensors[pool.input].qtype.lo == -128 and pool.pad_value == 0


@pytest.mark.verilator
@pytest.mark.sim
@pytest.mark.parametrize("config", list(CONFIGS))
def test_pad_value_joins_the_window_rtl_verilator(config, tmp_path):
    """A Pad with 0.5 (after a Relu: the map's real values are >= 0) before a Conv: the
    quantizer keeps the pad value as a dequantized constant of its own and puts a
    QuantizeLinear with the map's parameters after the Pad, which turns 0.5 into an integer
    of the map (not its zero point); the sliding window emits that integer. RTL == golden at
    the default folding (Amaranth) and at SIMD 3, which does not divide the 4 channels: the
    window-parallel generator (native Verilator)."""
    qm, x = quantized(m_pad_nonzero, preprocess=False, **CONFIGS[config])
    ig = import_(qm)
    conv = ig.ops[1]
    t = ig.tensors[conv.input]
    assert conv.pad_value == int(t.quantize(np.float32([0.5]))[0]) != t.zero_point
    assert conv.window.pads == (1, 1, 1, 1)
    xq, y = assert_agrees(ig, qm, x, min_levels=4)
    dfg = assert_rtl_equals_golden(ig, xq, y)
    assert any(b.kind in ("swg", "swg_par") and b.params.pad_value == conv.pad_value
               for b in dfg.blocks)
    if config == "u8":
        model = save_model(qm, tmp_path / "pad_value.onnx")
        fold = {ig.ops[0].name: Folding(pe=1, simd=3), conv.name: Folding(pe=2, simd=3)}
        par = [b for b in lower(ig, folding=fold).blocks if b.kind == "swg_par"]
        assert [b.params.pad_value for b in par] == [t.zero_point, conv.pad_value] or \
            [b.params.pad_value for b in par] == [conv.pad_value]
        rep = hwgen.verify(model, x[:3], simulator="verilator", fold=fold)
        assert rep.ok and rep.ort_identical_fraction == 1.0


def test_1d_shapes_and_order():
    ig = import_(quantized(m_conv1d_flatten_gemm)[0])
    conv, fc = ig.ops
    assert conv.window.in_shape == (3, 1, 11) and conv.window.kernel == (1, 3)
    assert ig.tensors[conv.output].shape == (4, 5)
    assert ig.tensors[ig.input].shape == (3, 11)
    # the input streams channel-last: position by position, channels innermost
    assert ig.input_order.tolist()[:6] == [0, 11, 22, 1, 12, 23]
    assert fc.weights.shape == (5, 20)
    ig = import_(quantized(m_gap1d)[0])
    assert ig.tensors[ig.output].shape == (4, 1)


# ---------------------------------------------------------------------------------------------
# RTL == golden on the two small models
# ---------------------------------------------------------------------------------------------

MODELS = {"2d": m_model_2d, "1d": m_model_1d}


@pytest.mark.sim
@pytest.mark.parametrize("name,config", [("2d", "u8"), ("2d", "i8sym-perchannel"),
                                         ("1d", "u8")])
def test_model_rtl_equals_golden_amaranth(name, config):
    qm, x = quantized(MODELS[name], preprocess=False, **CONFIGS[config])
    assert "Pad" in op_sequence(qm)
    ig = import_(qm)
    if name == "2d" and config != "u8":
        # int8 symmetric: the last Pad's value (0) is above the type's minimum; the Relu
        # before it lets MaxPool pad its partial windows with it too
        assert ig.ops[-1].pad_value == 0
    xq, y = assert_agrees(ig, qm, x)
    assert_rtl_equals_golden(ig, xq, y)


@pytest.mark.sim
def test_1d_joins_rtl_equals_golden_amaranth():
    qm, x = quantized(m_concat1d_add)
    ig = import_(qm)
    xq, y = assert_agrees(ig, qm, x)
    assert_rtl_equals_golden(ig, xq, y)


@pytest.mark.verilator
def test_model_1d_verify_verilator(tmp_path):
    """The 1-D model (every form but the 2-D geometry) in the native Verilator bench."""
    qm, x = quantized(m_model_1d, preprocess=False)
    model = save_model(qm, tmp_path / "conv_family_1d.onnx")
    res = hwgen.verify(model, x, count=8, target_cycles=256, out_dir=tmp_path / "design",
                       stall=0.2)
    assert res.ok and res.rtl_equals_golden and res.golden_mismatched_samples == 0
    assert res.ort_identical_fraction >= 0.999 and res.ort_max_step_diff <= 1
    manifest = json.loads((tmp_path / "design" / "manifest.json").read_text())
    assert manifest["input"]["element_order"].startswith("channel-last: positions")
    assert manifest["input"]["onnx_shape"] == ["N", 4, 16]


# ---------------------------------------------------------------------------------------------
# refused: what does not map exactly
# ---------------------------------------------------------------------------------------------

def m_pad_channels(seed):
    n = Net((3, 6, 6), seed)
    c = n.conv("x", 4, 3, "conv0", pads=[1, 1, 1, 1])
    return n, n.op("MaxPool", [pad(n, c, [0, 1, 0, 0, 0, 1, 0, 0])], "pool",
                   kernel_shape=[2, 2], strides=[2, 2])


def m_avgpool_ceil_incl(seed):
    n = Net((3, 6, 6), seed)
    c = n.conv("x", 4, 3, "conv", pads=[1, 1, 1, 1])
    return n, n.op("AveragePool", [c], "pool", kernel_shape=[3, 3], strides=[2, 2],
                   pads=[1, 1, 1, 1], ceil_mode=1, count_include_pad=1)


def m_pad_maxpool_own_pads(seed):
    # the Pad pads with the zero point, MaxPool's own pads with the type's minimum
    n = Net((3, 6, 6), seed)
    c = n.conv("x", 4, 3, "conv0", pads=[1, 1, 1, 1])
    return n, n.op("MaxPool", [pad(n, c, [0, 0, 1, 1, 0, 0, 0, 0])], "pool",
                   kernel_shape=[3, 3], pads=[1, 1, 1, 1])


def m_pad_reflect(seed):
    n = Net((3, 6, 6), seed)
    c = n.conv("x", 4, 3, "conv0", pads=[1, 1, 1, 1])
    p = n.op("Pad", [c, n.const("pad.pads", [0, 0, 1, 1, 0, 0, 1, 1], np.int64)], "pad",
             mode="reflect")
    return n, n.conv(p, 4, 3, "conv1")


def m_pad_add(seed):
    n = Net((4, 6, 6), seed)
    p = pad(n, n.conv("x", 4, 3, "conv", pads=[1, 1, 1, 1]), [0, 0, 1, 1, 0, 0, 1, 1])
    return n, n.op("Add", [p, p], "add")


REFUSED = {
    # name: (builder, node, op, reason (regex))
    "pad_nonzero_value_and_own_pads": (m_pad_nonzero_own_pads, "conv1", "Conv",
                                       r"the Pad before it pads with \d+, the convolution's "
                                       r"own pads with the zero point \d+: one window cannot "
                                       r"pad with two values"),
    "pad_channel_axis": (m_pad_channels, "pad", "Pad",
                         r"pads \[0, 1, 0, 0, 0, 1, 0, 0\] pad the batch or channel axis"),
    "pad_then_maxpool_with_own_pads": (m_pad_maxpool_own_pads, "pool", "MaxPool",
                                       r"the Pad before it pads with \d+, but MaxPool pads "
                                       r"its own pads .* one window cannot pad with two values"),
    "avgpool_ceil_partial_incl": (m_avgpool_ceil_incl, "pool", "AveragePool",
                                  r"AveragePool with count_include_pad=1 and a ceil_mode "
                                  r"partial last window is not supported"),
    "pad_then_add": (m_pad_add, "add", "Add", r".* \(its input is the output of Pad pad, which "
                                             r"maps only into the window of a Conv, MaxPool"),
    "pad_reflect": (m_pad_reflect, "pad", "Pad", r"attribute mode='reflect' is not supported"),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_refused(name):
    builder, node, op, reason = REFUSED[name]
    qm, _ = quantized(builder, preprocess=False)
    with pytest.raises(HwgenError, match=rf"^node {node} \({op}-\d+\): {reason}"):
        import_(qm)
