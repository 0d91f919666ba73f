"""Per-operator coverage of the CNN path: tiny float models built with onnx.helper, quantized
by onnxruntime's own quantizer (``quantize_static``, MinMax calibration on random inputs),
imported with ``to_int_graph``, and checked against onnxruntime and in RTL.

For every case:

* the golden model agrees with onnxruntime on 50 random inputs drawn from the calibration
  distribution (uniform in [-1, 1)): ≥ 99.9 % of the output elements identical, none more
  than one quantization step apart (ORT's float output is quantized with the output
  tensor's scale / zero point, as in ``test_qdq_import``);
* the RTL in the Amaranth simulator (folded with ``target_cycles=256``, three frames, random
  stalls on both streams) equals the golden model exactly (``*_rtl_equals_golden``: every
  QDQ conv, pooling, join, Gemm, Clip and integer-chain case, and a subset of the QOperator
  ones).

Sections: 1 Conv (3×3 pads 1 + Relu, 1×1, 5×5 stride 2 asymmetric pads, stride 3 without
pads, depthwise, auto_pad SAME_UPPER / SAME_LOWER, 1×3 without bias) in QDQ per tensor, per
channel and symmetric int8; 2 BatchNormalization after Conv; 3 MaxPool / AveragePool /
GlobalAveragePool / ReduceMean; 4 residual Add and channel Concat; 5 Conv → (Transpose) →
Flatten → Gemm; 6 Clip(0, 6); 7 the QOperator format (QLinearConv, QLinearAdd, QLinearConcat,
QLinearAveragePool, QLinearGlobalAveragePool, QGemm); 8 hand-built MatMulInteger /
ConvInteger chains; 9 unsupported forms refused with a HwgenError naming node and op;
10 importer bugs found here (those tests fail until fixed).

Where golden and ORT differ (never by more than one step):

* integer chains (8) and BN folded into a Conv (2): the importer puts a float bias / BN shift
  on the accumulator grid (``rint(shift / acc_scale)``, an error ≤ 0.5·multiplier steps), so
  values within ~1e-3 of a rounding tie may round the other way (≈ 0.04 %); ORT rounds those
  exactly;
* QDQ AveragePool with an even divisor: golden's integer sum is exact and rounds exact ties
  half to even; ORT sums dequantized values in float32 and can land just beside the tie
  (≈ 0.002–0.03 %; checked in ``_check_avgpool_differences``). ORT's QLinearAveragePool
  (QOperator) agrees with golden exactly.
"""
from __future__ import annotations

import logging
import tempfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from modelgen import op_sequence, quantize_qdq, run_model
from onnx import TensorProto, helper, numpy_helper

from hwgen.assemble import build_top
from hwgen.dataflow import golden
from hwgen.dataflow.host_tail import run_tail, tail_nodes
from hwgen.dataflow.importer import to_int_graph
from hwgen.dataflow.loader import load_model_proto
from hwgen.dataflow.lower import lower
from hwgen.dataflow.ops_affine import AffineOp
from hwgen.dataflow.ops_conv import Conv
from hwgen.dataflow.ops_join import AddOp, ConcatOp
from hwgen.dataflow.ops_linear import MatVec
from hwgen.dataflow.ops_pool import GlobalAvgPool, Pool
from hwgen.errors import HwgenError
from hwgen.sim.amaranth_sim import run_amaranth
from hwgen.sim.base import StreamJob
from hwgen.sim.packing import beats_to_frames, frames_to_beats

logging.getLogger("root").setLevel(logging.ERROR)

OPSET = 17
N_CALIB = 64
N_TEST = 50
RTL_FRAMES = 3
RTL_TARGET_CYCLES = 256


# ---------------------------------------------------------------------------------------------
# float models
# ---------------------------------------------------------------------------------------------

class Net:
    """A float model under construction. The input ``x`` is [N, C, H, W]; every helper appends
    one node named ``name`` whose output tensor is ``<name>_out`` and returns that name."""

    def __init__(self, shape: tuple[int, ...], seed: int):
        self.shape = tuple(shape)
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.channels = {"x": shape[0]}

    def const(self, name: str, arr, dtype=np.float32) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(arr, dtype=dtype), name))
        return name

    def op(self, op_type: str, inputs: list[str], name: str, channels: int | None = None,
           **attrs) -> str:
        out = f"{name}_out"
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=name, **attrs))
        self.channels[out] = self.channels.get(inputs[0]) if channels is None else channels
        return out

    def conv(self, x: str, oc: int, k: int | tuple[int, int], name: str, group: int = 1,
             gain: float = 1.0, bias: bool = True, **attrs) -> str:
        """Conv with He-initialised weights (times ``gain``) and a small nonzero bias."""
        c = self.channels[x]
        kh, kw = (k, k) if isinstance(k, int) else k
        fan_in = (c // group) * kh * kw
        w = self.rng.standard_normal((oc, c // group, kh, kw)) * np.sqrt(2.0 / fan_in) * gain
        ins = [x, self.const(f"{name}.weight", w)]
        if bias:
            ins.append(self.const(f"{name}.bias", self.rng.uniform(-0.1, 0.1, oc)))
        if group != 1:
            attrs["group"] = group
        return self.op("Conv", ins, name, channels=oc, kernel_shape=[kh, kw], **attrs)

    def relu(self, x: str, name: str) -> str:
        return self.op("Relu", [x], name)

    def gemm(self, x: str, n_in: int, n_out: int, name: str) -> str:
        w = self.rng.standard_normal((n_out, n_in)) * np.sqrt(2.0 / n_in)
        b = self.rng.uniform(-0.1, 0.1, n_out)
        return self.op("Gemm", [x, self.const(f"{name}.weight", w), self.const(f"{name}.bias", b)],
                       name, channels=n_out, transB=1)

    def model(self, out: str) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes, "cnn_op",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", *self.shape])],
            [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)],
            initializer=self.inits)
        opsets = [helper.make_opsetid("", OPSET)]
        m = helper.make_model(graph, opset_imports=opsets, producer_name="test_cnn_ops",
                              ir_version=helper.find_min_ir_version_for(opsets))
        m = onnx.shape_inference.infer_shapes(m, strict_mode=True)
        onnx.checker.check_model(m, full_check=True)
        return m


def inputs(n: int, shape, seed: int) -> np.ndarray:
    """The input distribution of calibration and tests: uniform in [-1, 1)."""
    return np.random.default_rng(seed).uniform(-1.0, 1.0, (n,) + tuple(shape)).astype(np.float32)


# ---- conv cases (1) --------------------------------------------------------------------------

def m_conv3x3_relu(seed):
    n = Net((3, 6, 7), seed)
    return n, n.relu(n.conv("x", 4, 3, "conv", pads=[1, 1, 1, 1]), "relu")


def m_conv1x1(seed):
    n = Net((4, 5, 6), seed)
    return n, n.conv("x", 5, 1, "conv")


def m_conv5x5_s2_asym(seed):
    # ONNX 2-D pads are [top, left, bottom, right]: 7 rows → (7+0+2-5)//2+1 = 3,
    # 6 columns → (6+1+1-5)//2+1 = 2
    n = Net((3, 7, 6), seed)
    return n, n.conv("x", 4, 5, "conv", strides=[2, 2], pads=[0, 1, 2, 1])


def m_conv_s3_nopad(seed):
    # 7 → 2 rows/columns; the last input row and column are never read
    n = Net((3, 7, 7), seed)
    return n, n.conv("x", 4, 3, "conv", strides=[3, 3])


def m_depthwise_s2(seed):
    n = Net((4, 7, 7), seed)
    return n, n.relu(n.conv("x", 4, 3, "conv", group=4, strides=[2, 2], pads=[1, 1, 1, 1]),
                     "relu")


def m_conv_same_upper(seed):
    # 6 rows, stride 2, kernel 3: total padding (3-1)*2+3-6 = 1 → 0 before, 1 after
    n = Net((3, 6, 6), seed)
    return n, n.conv("x", 4, 3, "conv", strides=[2, 2], auto_pad="SAME_UPPER")


def m_conv_same_lower(seed):
    # as above, the extra row/column of padding goes first
    n = Net((3, 6, 6), seed)
    return n, n.conv("x", 4, 3, "conv", strides=[2, 2], auto_pad="SAME_LOWER")


def m_conv1x3_nobias(seed):
    # a non-square kernel, padding only left/right, no bias input
    n = Net((3, 5, 6), seed)
    return n, n.conv("x", 4, (1, 3), "conv", bias=False, pads=[0, 1, 0, 1])


# ---- batch norm (2) --------------------------------------------------------------------------

def m_conv_bn_relu(seed):
    n = Net((3, 6, 6), seed)
    c = n.conv("x", 4, 3, "conv", pads=[1, 1, 1, 1])
    r = n.rng
    ins = [c, n.const("bn.scale", r.uniform(0.5, 1.5, 4) * np.array([1, -1, 1, 1])),
           n.const("bn.bias", r.uniform(-0.3, 0.3, 4)), n.const("bn.mean", r.uniform(-0.3, 0.3, 4)),
           n.const("bn.var", r.uniform(0.5, 2.0, 4))]
    return n, n.relu(n.op("BatchNormalization", ins, "bn", epsilon=1e-5), "relu")


# ---- pooling (3) -----------------------------------------------------------------------------

def _pool_net(seed, op_type, relu=False, **attrs):
    n = Net((3, 6, 6), seed)
    c = n.conv("x", 4, 3, "conv", pads=[1, 1, 1, 1])
    if relu:
        c = n.relu(c, "relu")
    return n, n.op(op_type, [c], "pool", **attrs)


def m_maxpool2x2_s2(seed):
    return _pool_net(seed, "MaxPool", relu=True, kernel_shape=[2, 2], strides=[2, 2])


def m_maxpool3x3_s1_p1(seed):
    return _pool_net(seed, "MaxPool", relu=True, kernel_shape=[3, 3], pads=[1, 1, 1, 1])


def m_avgpool3x3_p1_excl(seed):
    return _pool_net(seed, "AveragePool", kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                     count_include_pad=0)


def m_avgpool3x3_p1_incl(seed):
    return _pool_net(seed, "AveragePool", kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                     count_include_pad=1)


def m_avgpool2x2_s2(seed):
    return _pool_net(seed, "AveragePool", kernel_shape=[2, 2], strides=[2, 2])


def _pool_net7(seed, op_type, **attrs):
    n = Net((3, 7, 7), seed)
    return n, n.op(op_type, [n.conv("x", 4, 3, "conv", pads=[1, 1, 1, 1])], "pool", **attrs)


def m_avgpool3x3_s2_asym_excl(seed):
    # asymmetric pads [top, left, bottom, right]: the divisors differ per row and column
    return _pool_net7(seed, "AveragePool", kernel_shape=[3, 3], strides=[2, 2],
                      pads=[0, 1, 2, 1], count_include_pad=0)


def m_avgpool2x2_s2_same_upper(seed):
    # 7 → 4 with one row/column of padding at the end (divisor 2 there, 1 in the corner)
    return _pool_net7(seed, "AveragePool", kernel_shape=[2, 2], strides=[2, 2],
                      auto_pad="SAME_UPPER")


def m_maxpool2x2_s2_same_upper(seed):
    return _pool_net7(seed, "MaxPool", kernel_shape=[2, 2], strides=[2, 2],
                      auto_pad="SAME_UPPER")


def m_global_avgpool(seed):
    return _pool_net(seed, "GlobalAveragePool")


def m_reducemean_hw(seed):
    return _pool_net(seed, "ReduceMean", axes=[2, 3], keepdims=1)


def m_reducemean_hw_nokeep(seed):
    return _pool_net(seed, "ReduceMean", axes=[-2, -1], keepdims=0)


# ---- joins (4) -------------------------------------------------------------------------------

def m_residual_add(seed):
    n = Net((3, 6, 6), seed)
    a = n.relu(n.conv("x", 4, 3, "conv0", pads=[1, 1, 1, 1]), "relu0")
    b = n.conv(a, 4, 3, "conv1", pads=[1, 1, 1, 1])
    return n, n.relu(n.op("Add", [a, b], "add"), "relu1")


def m_residual_add_input(seed):
    # the input itself is the skip branch: x + conv(x), so the input stream forks
    n = Net((4, 6, 6), seed)
    c = n.conv("x", 4, 3, "conv", pads=[1, 1, 1, 1])
    return n, n.relu(n.op("Add", ["x", c], "add"), "relu")


def m_concat_2_4(seed):
    n = Net((3, 6, 6), seed)
    a = n.conv("x", 2, 3, "conv_a", pads=[1, 1, 1, 1])
    b = n.conv("x", 4, 1, "conv_b")
    return n, n.op("Concat", [a, b], "concat", channels=6, axis=1)


# ---- gemm after conv (5) ---------------------------------------------------------------------

def m_conv_flatten_gemm(seed):
    n = Net((3, 6, 7), seed)
    c = n.relu(n.conv("x", 4, 3, "conv", strides=[2, 2]), "relu")       # 4 x 2 x 3
    return n, n.gemm(n.op("Flatten", [c], "flatten", axis=1), 24, 5, "fc")


def m_conv_transpose_flatten_gemm(seed):
    n = Net((3, 6, 7), seed)
    c = n.relu(n.conv("x", 4, 3, "conv", strides=[2, 2]), "relu")       # 4 x 2 x 3
    t = n.op("Transpose", [c], "transpose", perm=[0, 2, 3, 1])          # 2 x 3 x 4
    return n, n.gemm(n.op("Flatten", [t], "flatten", axis=1), 24, 5, "fc")


# ---- clip (6) --------------------------------------------------------------------------------

def m_conv_relu6(seed):
    # gain 8: conv outputs spread well beyond 6, so the upper clamp matters
    n = Net((3, 6, 6), seed)
    c = n.conv("x", 4, 3, "conv", gain=8.0, pads=[1, 1, 1, 1])
    lo, hi = n.const("clip.min", 0.0), n.const("clip.max", 6.0)
    return n, n.op("Clip", [c, lo, hi], "clip")


# ---- dilation (1, 3) ---------------------------------------------------------------------------

def m_conv_dilated(seed):
    n = Net((3, 7, 7), seed)
    return n, n.conv("x", 4, 3, "conv", dilations=[2, 2])


def m_conv_dilated_asym(seed):
    # span (3-1)*2+1 = 5 rows, (2-1)*3+1 = 4 columns: (6+1+0-5)//1+1 = 3, (7+0+2-4)//2+1 = 3
    n = Net((2, 6, 7), seed)
    return n, n.relu(n.conv("x", 4, (3, 2), "conv", dilations=[2, 3], strides=[1, 2],
                            pads=[1, 0, 0, 2]), "relu")


def m_maxpool_dilated(seed):
    return _pool_net(seed, "MaxPool", relu=True, kernel_shape=[2, 2], dilations=[2, 2],
                     pads=[1, 1, 1, 1])


def _maxpool_ceil(seed, size):
    n = Net((3, size, size), seed)
    c = n.relu(n.conv("x", 4, 3, "conv", pads=[1, 1, 1, 1]), "relu")
    return n, n.op("MaxPool", [c], "pool", kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)


def m_maxpool_ceil_exact(seed):
    return _maxpool_ceil(seed, 6)          # ceil_mode changes nothing here


def m_concat_axis2(seed):
    n = Net((3, 6, 6), seed)
    a = n.conv("x", 4, 3, "conv_a", pads=[1, 1, 1, 1])
    b = n.conv("x", 4, 1, "conv_b")
    return n, n.op("Concat", [a, b], "concat", axis=2)


# ---------------------------------------------------------------------------------------------
# quantization
# ---------------------------------------------------------------------------------------------

def ort_quantize(model: onnx.ModelProto, calib: np.ndarray, *, fmt: str = "qop",
                 per_channel: bool = False, preprocess: bool = True,
                 op_types: list[str] | None = None, activation_type: str = "uint8",
                 symmetric_activations: bool = False) -> onnx.ModelProto:
    """Like :func:`modelgen.quantize_qdq` (ORT pre-processing, MinMax calibration, int8
    weights) in QOperator (``fmt="qop"``) or QDQ format, optionally with an explicit
    ``op_types_to_quantize``."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )
    from onnxruntime.quantization.shape_inference import quant_pre_process

    name = model.graph.input[0].name

    class _Rows(CalibrationDataReader):
        def __init__(self):
            self._it = iter(range(0, calib.shape[0], 16))

        def get_next(self):
            k = next(self._it, None)
            return None if k is None else {name: calib[k:k + 16]}

    with tempfile.TemporaryDirectory(prefix="cnnops.") as tmp:
        f, p, q = (Path(tmp) / s for s in ("float.onnx", "pre.onnx", "quant.onnx"))
        onnx.save(model, f)
        if preprocess:
            quant_pre_process(str(f), str(p), skip_symbolic_shape=True)
        else:
            onnx.save(model, p)
        quantize_static(str(p), str(q), _Rows(),
                        quant_format=QuantFormat.QOperator if fmt == "qop" else QuantFormat.QDQ,
                        op_types_to_quantize=op_types, per_channel=per_channel,
                        activation_type=QuantType.QInt8 if activation_type == "int8"
                        else QuantType.QUInt8, weight_type=QuantType.QInt8,
                        calibrate_method=CalibrationMethod.MinMax,
                        extra_options={"ActivationSymmetric": symmetric_activations})
        return onnx.load(str(q))


def quantized(builder, fmt: str = "qdq", seed: int = 0, **opts):
    """(float model, quantized model, test inputs) of a case."""
    net, out = builder(seed)
    fm = net.model(out)
    calib = inputs(N_CALIB, net.shape, seed + 1)
    if fmt == "qdq" and "op_types" not in opts:
        qm = quantize_qdq(fm, calib, batch_size=16, **opts)
    else:
        qm = ort_quantize(fm, calib, fmt=fmt, **opts)
    return fm, qm, inputs(N_TEST, net.shape, seed + 2)


# ---------------------------------------------------------------------------------------------
# checks
# ---------------------------------------------------------------------------------------------

def golden_and_ort(ig, qm, x):
    """(xq stream order, golden output stream order, golden ONNX order, ORT quantized)."""
    n = x.shape[0]
    tin, tout = ig.tensors[ig.input], ig.tensors[ig.output]
    xq = tin.quantize(ig.to_stream(x.reshape(n, -1)))
    y_stream = golden.run(ig, xq)[ig.output]
    y = ig.from_stream(y_stream.reshape(n, -1))
    ort_out = run_model(qm, x).reshape(n, -1)
    ref = tout.quantize(ort_out) if ig.output_dequantized else ort_out.astype(np.int64)
    return xq, y_stream, y, ref


def assert_agrees(ig, qm, x, min_levels: int = 8):
    """Golden vs onnxruntime: ≥ 99.9 % identical, ≤ 1 step; returns (xq, golden stream)."""
    xq, y_stream, y, ref = golden_and_ort(ig, qm, x)
    diff = np.abs(y - ref)
    same = float(np.mean(diff == 0))
    print(f"golden vs ORT: {diff.size} elements, {int(np.sum(diff != 0))} differ "
          f"(max {int(diff.max())}), identical {same:.4%}")
    assert diff.max() <= 1, f"golden differs from ORT by up to {diff.max()} steps"
    assert same >= 0.999, f"only {same:.4%} of the elements agree with ORT"
    # not degenerate: the output spans many levels
    assert len(np.unique(y)) >= min_levels
    return xq, y_stream


def assert_rtl_equals_golden(ig, xq, y_stream, seed: int = 3):
    xq, y_stream = xq[:RTL_FRAMES], y_stream[:RTL_FRAMES]
    dfg = lower(ig, target_cycles=RTL_TARGET_CYCLES)
    top = build_top(dfg)
    beats, last = frames_to_beats(xq, dfg.input.qtype, dfg.in_per_beat)
    n_out = xq.shape[0] * dfg.output.size // dfg.out_per_beat
    res = run_amaranth(top, StreamJob(top.in_width, top.out_width, beats, last, n_out,
                                      stall_in=0.2, stall_out=0.3, seed=seed))
    out = beats_to_frames(res.out_beats, dfg.output.qtype, dfg.out_per_beat, dfg.output.size)
    assert np.array_equal(out, y_stream)
    assert res.out_last == [(k + 1) % (dfg.output.size // dfg.out_per_beat) == 0
                            for k in range(n_out)]
    return dfg


def op_types(ig) -> list[type]:
    return [type(op) for op in ig.ops]


def import_(qm):
    return to_int_graph(load_model_proto(qm))


# ---------------------------------------------------------------------------------------------
# 1. convolutions (QDQ, per tensor and per channel)
# ---------------------------------------------------------------------------------------------

CONV_CASES = {
    # name: (builder, the window the importer must derive: kernel, stride,
    #        pads [top, left, bottom, right], output height and width)
    "conv3x3_s1_p1_relu": (m_conv3x3_relu, (3, 3), (1, 1), (1, 1, 1, 1), (6, 7)),
    "conv1x1": (m_conv1x1, (1, 1), (1, 1), (0, 0, 0, 0), (5, 6)),
    "conv5x5_s2_asym_pads": (m_conv5x5_s2_asym, (5, 5), (2, 2), (0, 1, 2, 1), (3, 2)),
    "conv3x3_s3_nopad": (m_conv_s3_nopad, (3, 3), (3, 3), (0, 0, 0, 0), (2, 2)),
    "depthwise3x3_s2_relu": (m_depthwise_s2, (3, 3), (2, 2), (1, 1, 1, 1), (4, 4)),
    "conv3x3_s2_same_upper": (m_conv_same_upper, (3, 3), (2, 2), (0, 0, 1, 1), (3, 3)),
    "conv3x3_s2_same_lower": (m_conv_same_lower, (3, 3), (2, 2), (1, 1, 0, 0), (3, 3)),
    "conv1x3_nobias": (m_conv1x3_nobias, (1, 3), (1, 1), (0, 1, 0, 1), (5, 6)),
    "conv3x3_dilated_2": (m_conv_dilated, (3, 3), (1, 1), (0, 0, 0, 0), (3, 3)),
    "conv3x2_dilated_2x3_s1x2_relu": (m_conv_dilated_asym, (3, 2), (1, 2), (1, 0, 0, 2),
                                      (3, 3)),
}
QDQ_CONFIGS = {
    "u8-pertensor": dict(),
    "u8-perchannel": dict(per_channel=True),
    # symmetric int8 activations: ORT keeps Relu/Clip between DQ and Q
    "i8sym-perchannel": dict(per_channel=True, activation_type="int8",
                             symmetric_activations=True),
}


@pytest.mark.parametrize("config", list(QDQ_CONFIGS))
@pytest.mark.parametrize("name", list(CONV_CASES))
def test_conv_qdq_golden_matches_ort(name, config):
    builder, kernel, stride, pads, out_hw = CONV_CASES[name]
    _, qm, x = quantized(builder, **QDQ_CONFIGS[config])
    ops = op_sequence(qm)
    assert "Conv" in ops and "QLinearConv" not in ops
    ig = import_(qm)
    assert op_types(ig) == [Conv]
    conv = ig.ops[0]
    assert (conv.window.kernel, conv.window.stride, conv.window.pads) == (kernel, stride, pads)
    assert conv.window.out_hw == out_hw
    assert ig.tensors[conv.output].shape[1:] == out_hw
    assert conv.depthwise == name.startswith("depthwise")
    if "relu" in name:
        assert conv.requant.lo == ig.tensors[conv.output].zero_point
    assert_agrees(ig, qm, x)


@pytest.mark.sim
@pytest.mark.parametrize("config", ["u8-perchannel", "i8sym-perchannel"])
@pytest.mark.parametrize("name", list(CONV_CASES))
def test_conv_qdq_rtl_equals_golden(name, config):
    _, qm, x = quantized(CONV_CASES[name][0], **QDQ_CONFIGS[config])
    ig = import_(qm)
    xq, y = assert_agrees(ig, qm, x)
    dfg = assert_rtl_equals_golden(ig, xq, y)
    # target_cycles=256 folds the layer: neither fully serial nor fully parallel
    f = dfg.folding[ig.ops[0].name]
    assert f.pe * f.simd > 1


# ---------------------------------------------------------------------------------------------
# 2. BatchNormalization after Conv
# ---------------------------------------------------------------------------------------------

def test_conv_bn_preprocessed_is_fused_by_ort():
    """With ORT's pre-processing (the recommended flow) BN is fused into the Conv's weights
    before quantization: a plain quantized Conv."""
    _, qm, x = quantized(m_conv_bn_relu, per_channel=True)
    assert "BatchNormalization" not in op_sequence(qm)
    ig = import_(qm)
    assert op_types(ig) == [Conv]
    assert_agrees(ig, qm, x)


@pytest.mark.parametrize("per_channel", [False, True], ids=["pertensor", "perchannel"])
def test_conv_bn_unfused_is_quantized_separately_and_mapped(per_channel):
    """Without pre-processing ORT quantizes BatchNormalization as an op of its own
    (QDQNormalization): Conv → Q → DQ → BN → Q → DQ, the Conv's output with its own scale;
    BN's scale (gamma) stored int8 behind a DequantizeLinear (per tensor even with
    per_channel=True), its bias (beta) int32 with scale = input scale · gamma scale, mean
    and var float; the Relu after it is dropped as usual. BN does not directly follow the
    Conv (a Q/DQ pair is between them), so it is not folded: it becomes a per-channel affine
    requantizer of its own (``dataflow/ops_affine.py``), equal to onnxruntime everywhere."""
    _, qm, x = quantized(m_conv_bn_relu, per_channel=per_channel, preprocess=False)
    ops = op_sequence(qm)
    assert "BatchNormalization" in ops and "Relu" not in ops
    bn = next(n for n in qm.graph.node if n.op_type == "BatchNormalization")
    conv = next(n for n in qm.graph.node if n.op_type == "Conv")
    producers = {o: n for n in qm.graph.node for o in n.output}
    inits = {i.name: numpy_helper.to_array(i) for i in qm.graph.initializer}
    dq = producers[bn.input[0]]
    assert dq.op_type == "DequantizeLinear"
    assert producers[dq.input[0]].op_type == "QuantizeLinear"
    assert producers[dq.input[0]].input[0] == conv.output[0]
    gamma_dq, beta_dq = producers[bn.input[1]], producers[bn.input[2]]
    assert gamma_dq.op_type == beta_dq.op_type == "DequantizeLinear"
    assert inits[gamma_dq.input[0]].dtype == np.int8 and inits[gamma_dq.input[1]].size == 1
    assert inits[beta_dq.input[0]].dtype == np.int32
    assert inits[bn.input[3]].dtype == inits[bn.input[4]].dtype == np.float32
    ig = import_(qm)
    assert op_types(ig) == [Conv, AffineOp]
    _, _, y, ref = golden_and_ort(ig, qm, x)
    assert np.array_equal(y, ref)


def _conv_bn_direct(qm: onnx.ModelProto) -> onnx.ModelProto:
    """Rewire ORT's unfused QDQ model into the form the importer folds: BN reads the Conv's
    float output directly (the Q/DQ pair between them is removed) and its parameters are
    plain float constants (ORT's quantized gamma / beta are replaced by their dequantized
    values, so ORT computes the same BN)."""
    qm = onnx.ModelProto.FromString(qm.SerializeToString())
    g = qm.graph
    bn = next(n for n in g.node if n.op_type == "BatchNormalization")
    producers = {o: n for n in g.node for o in n.output}
    inits = {i.name: numpy_helper.to_array(i) for i in g.initializer}
    dq = producers[bn.input[0]]
    q = producers[dq.input[0]]
    bn.input[0] = q.input[0]
    drop = [dq, q]
    for k in (1, 2):
        p = producers.get(bn.input[k])
        if p is not None and p.op_type == "DequantizeLinear":
            w, s = inits[p.input[0]], inits[p.input[1]]
            z = inits[p.input[2]] if len(p.input) > 2 else 0
            real = ((w.astype(np.int64) - z).astype(np.float32) * s).astype(np.float32)
            name = f"{bn.input[k]}_float"
            g.initializer.append(numpy_helper.from_array(real.reshape(-1), name))
            bn.input[k] = name
            drop.append(p)
    for n in drop:
        g.node.remove(n)
    used = {i for n in g.node for i in n.input}
    for init in [i for i in g.initializer if i.name not in used]:
        g.initializer.remove(init)
    onnx.checker.check_model(qm)
    return qm


@pytest.mark.parametrize("per_channel", [False, True], ids=["pertensor", "perchannel"])
def test_conv_bn_folded_into_conv(per_channel):
    """Conv → BN (one negative gamma) → Relu → Q: BN folds into the Conv's accumulator scale
    and bias; golden agrees with ORT running Conv and BN in float.

    The folded shift ``beta - mean·g`` is put on the accumulator grid (``rint(shift /
    acc_scale)``), an error of at most half a multiplier (< 0.002 steps here): where the
    exact value lies that close to a rounding tie golden may round the other way (≈ 0.04 %
    of the elements; 2 of 7200 on the test inputs). ORT rounds those exactly."""
    _, qm, x = quantized(m_conv_bn_relu, per_channel=per_channel, preprocess=False)
    qm = _conv_bn_direct(qm)
    ig = import_(qm)
    assert op_types(ig) == [Conv]
    conv = ig.ops[0]
    assert "bn" in conv.nodes
    assert_agrees(ig, qm, x)

    # every difference is such a near-tie: compare with the exact value (float64)
    _, _, y, ref = golden_and_ort(ig, qm, x)
    differ = y != ref
    init = {i.name: numpy_helper.to_array(i).astype(np.float64) for i in qm.graph.initializer}
    nodes = {n.op_type: n for n in qm.graph.node if n.op_type in ("Conv", "BatchNormalization")}
    producers = {o: n for n in qm.graph.node for o in n.output}

    def dq(name):
        q, sc, zp = (init[k] for k in producers[name].input)
        shape = (-1,) + (1,) * (q.ndim - 1) if sc.size > 1 else ()
        return (q - zp.reshape(shape)) * sc.reshape(shape)

    tin, tout = ig.tensors[ig.input], ig.tensors[ig.output]
    xr = (tin.quantize(x) - tin.zero_point) * np.float64(np.float32(tin.scale))
    wr, br = dq(nodes["Conv"].input[1]), dq(nodes["Conv"].input[2])
    from numpy.lib.stride_tricks import sliding_window_view
    win = sliding_window_view(np.pad(xr, ((0, 0), (0, 0), (1, 1), (1, 1))), (3, 3), axis=(2, 3))
    c = np.einsum("nchwij,ocij->nohw", win, wr) + br[None, :, None, None]
    gamma, beta, mean, var = (init[k][None, :, None, None]
                              for k in nodes["BatchNormalization"].input[1:])
    eps = np.float64(np.float32(1e-5))
    real = ((c - mean) / np.sqrt(var + eps) * gamma + beta) / np.float64(np.float32(tout.scale))
    real = real.reshape(x.shape[0], -1)
    exact = np.clip(np.rint(real) + tout.zero_point, tout.qtype.lo, tout.qtype.hi)
    assert np.array_equal(ref[differ], exact[differ])
    mult = max(conv.requant.mult) / 2 ** conv.requant.shift
    assert np.all(np.abs(np.abs(real[differ] - np.floor(real[differ])) - 0.5) <= 0.5 * mult)


# ---------------------------------------------------------------------------------------------
# 3. pooling
# ---------------------------------------------------------------------------------------------

POOL_CASES = {
    # name: (builder, integer op, quantizer options)
    "maxpool2x2_s2": (m_maxpool2x2_s2, Pool, {}),
    "maxpool3x3_s1_p1": (m_maxpool3x3_s1_p1, Pool, {}),
    "avgpool3x3_s1_p1_exclude_pad": (m_avgpool3x3_p1_excl, Pool, {}),
    "avgpool3x3_s1_p1_include_pad": (m_avgpool3x3_p1_incl, Pool, {}),
    "avgpool2x2_s2": (m_avgpool2x2_s2, Pool, {}),
    "avgpool3x3_s2_asym_pads_exclude_pad": (m_avgpool3x3_s2_asym_excl, Pool, {}),
    "avgpool2x2_s2_same_upper": (m_avgpool2x2_s2_same_upper, Pool, {}),
    "maxpool2x2_s2_same_upper": (m_maxpool2x2_s2_same_upper, Pool, {}),
    "maxpool2x2_dilated_2_p1": (m_maxpool_dilated, Pool, {}),
    "global_avgpool": (m_global_avgpool, GlobalAvgPool, {}),
    # ReduceMean is not in ORT's default list of ops to quantize (see the test below):
    # ask for it explicitly
    "reducemean_hw_keepdims": (m_reducemean_hw, GlobalAvgPool,
                               dict(op_types=["Conv", "ReduceMean"])),
    "reducemean_hw_no_keepdims": (m_reducemean_hw_nokeep, GlobalAvgPool,
                                  dict(op_types=["Conv", "ReduceMean"])),
}
# asymmetric int8 activations: nonzero (negative) zero points, padding with them
POOL_CONFIGS = {"u8": dict(), "i8-asym": dict(activation_type="int8")}


def _onnx_avg_divisors(window, count_include_pad: bool) -> np.ndarray:
    """AveragePool's divisor per output pixel (raster order) from the ONNX definition: the
    kernel size, or the number of window positions inside the unpadded input."""
    c, h, w = window.in_shape
    (kh, kw), (sh, sw), (t, l, b, r) = window.kernel, window.stride, window.pads
    inside = np.pad(np.ones((h, w), np.int64), ((t, b), (l, r)))
    oh, ow = (h + t + b - kh) // sh + 1, (w + l + r - kw) // sw + 1
    return np.array([kh * kw if count_include_pad else
                     inside[i * sh:i * sh + kh, j * sw:j * sw + kw].sum()
                     for i in range(oh) for j in range(ow)])


@pytest.mark.parametrize("config", list(POOL_CONFIGS))
@pytest.mark.parametrize("name", list(POOL_CASES))
def test_pool_qdq_golden_matches_ort(name, config):
    builder, kind, opts = POOL_CASES[name]
    _, qm, x = quantized(builder, **opts, **POOL_CONFIGS[config])
    ig = import_(qm)
    assert op_types(ig) == [Conv, kind]
    pool = ig.ops[1]
    if kind is Pool:
        assert pool.kind == ("max" if name.startswith("max") else "avg")
        if pool.kind == "max":   # max pooling keeps the quantization of its input
            tin, tout = ig.tensors[pool.input], ig.tensors[pool.output]
            assert (tin.scale, tin.zero_point) == (tout.scale, tout.zero_point)
        if pool.kind == "avg":
            include = "include_pad" in name
            np.testing.assert_array_equal(pool.counts, _onnx_avg_divisors(pool.window, include))
        if name == "avgpool3x3_s1_p1_exclude_pad":
            # corners average 4 values, edges 6, the inside 9
            assert sorted(set(pool.counts.tolist())) == [4, 6, 9]
    else:
        shape = ig.tensors[pool.output].shape
        assert shape == ((4,) if "no_keepdims" in name else (4, 1, 1))
    assert_agrees(ig, qm, x, min_levels=4 if kind is GlobalAvgPool else 8)
    if kind is Pool and pool.kind == "avg":
        _check_avgpool_differences(ig, qm, x, "include_pad" in name)


def _check_avgpool_differences(ig, qm, x, count_include_pad: bool):
    """ORT runs a QDQ AveragePool in float (DQ → AveragePool → Q; the output shares the
    input's scale and zero point): it sums dequantized values in float32, so an average
    that is exactly a rounding tie (an even divisor) can come out a hair beside it. Golden
    sums exact integers. Check every difference is such an exact tie, golden rounding it
    half to even."""
    _, _, y, ref = golden_and_ort(ig, qm, x)
    differ = y != ref
    if not differ.any():
        return
    pool = ig.ops[-1]
    tin, tout = ig.tensors[pool.input], ig.tensors[pool.output]
    assert (np.float32(tin.scale), tin.zero_point) == (np.float32(tout.scale), tout.zero_point)
    c, h, w = pool.window.in_shape
    (kh, kw), (sh, sw), (t, l, b, r) = pool.window.kernel, pool.window.stride, pool.window.pads
    oh, ow = pool.window.out_hw
    xq = ig.tensors[ig.input].quantize(ig.to_stream(x.reshape(x.shape[0], -1)))
    xin = golden.run(ig, xq)[pool.input]                                    # channel-last
    xin = np.pad(xin.reshape(-1, h, w, c) - tin.zero_point, ((0, 0), (t, b), (l, r), (0, 0)))
    sums = np.stack([xin[:, i * sh:i * sh + kh, j * sw:j * sw + kw].sum(axis=(1, 2))
                     for i in range(oh) for j in range(ow)], axis=1)        # [N, pixels, C]
    real = sums / _onnx_avg_divisors(pool.window, count_include_pad)[None, :, None]
    real = real.transpose(0, 2, 1).reshape(x.shape[0], -1)                 # ONNX order
    assert np.all(real[differ] % 1 == 0.5)
    exact = np.rint(real) + tout.zero_point                                 # half to even
    assert np.array_equal(y[differ], exact[differ])


@pytest.mark.sim
@pytest.mark.parametrize("name,config", [(name, "u8") for name in POOL_CASES] + [
    ("avgpool3x3_s1_p1_exclude_pad", "i8-asym"), ("avgpool3x3_s2_asym_pads_exclude_pad", "i8-asym"),
    ("maxpool3x3_s1_p1", "i8-asym")])
def test_pool_qdq_rtl_equals_golden(name, config):
    builder, _, opts = POOL_CASES[name]
    _, qm, x = quantized(builder, **opts, **POOL_CONFIGS[config])
    ig = import_(qm)
    xq, y = assert_agrees(ig, qm, x, min_levels=4)
    assert_rtl_equals_golden(ig, xq, y)


@pytest.mark.parametrize("fmt", ["qdq", "qop"])
def test_reducemean_left_float_by_ort_is_refused(fmt):
    """With ORT's default op list ReduceMean is not quantized (DQ → ReduceMean → float
    output; QOperator has no quantized ReduceMean at all): the importer refuses the model,
    naming the float output."""
    _, qm, _ = quantized(m_reducemean_hw, fmt=fmt)
    ops = op_sequence(qm)
    assert ops[-1] == "ReduceMean" and ops[-2] == "DequantizeLinear"
    with pytest.raises(HwgenError, match=r"graph output 'pool_out' is not a quantized tensor"):
        import_(qm)


def test_maxpool_ceil_mode_without_partial_window_is_accepted():
    _, qm, x = quantized(m_maxpool_ceil_exact)
    ig = import_(qm)
    assert op_types(ig) == [Conv, Pool] and ig.ops[1].window.out_hw == (3, 3)
    xq, y = assert_agrees(ig, qm, x)
    assert_rtl_equals_golden(ig, xq, y)


# ---------------------------------------------------------------------------------------------
# 4. joins: residual Add, channel Concat
# ---------------------------------------------------------------------------------------------

JOIN_CASES = {"residual_add_relu": (m_residual_add, [Conv, Conv, AddOp]),
              "residual_add_input_relu": (m_residual_add_input, [Conv, AddOp]),
              "concat_2_and_4_channels": (m_concat_2_4, [Conv, Conv, ConcatOp])}


@pytest.mark.parametrize("config", list(QDQ_CONFIGS))
@pytest.mark.parametrize("name", list(JOIN_CASES))
def test_join_qdq_golden_matches_ort(name, config):
    builder, kinds = JOIN_CASES[name]
    _, qm, x = quantized(builder, **QDQ_CONFIGS[config])
    ig = import_(qm)
    assert op_types(ig) == kinds
    join = ig.ops[-1]
    if kinds[-1] is AddOp:
        assert join.lo == ig.tensors[join.output].zero_point       # the Relu after the Add
        # residual: the skip input is also what the last conv reads
        assert ig.ops[-2].output in join.inputs and ig.ops[-2].input in join.inputs
    else:
        assert [ig.tensors[t].shape[0] for t in join.inputs] == [2, 4]
        assert ig.tensors[join.output].shape == (6, 6, 6)
    assert_agrees(ig, qm, x)


@pytest.mark.sim
@pytest.mark.parametrize("name,config", [("residual_add_relu", "u8-perchannel"),
                                         ("residual_add_relu", "i8sym-perchannel"),
                                         ("residual_add_input_relu", "u8-perchannel"),
                                         ("concat_2_and_4_channels", "u8-perchannel")])
def test_join_qdq_rtl_equals_golden(name, config):
    _, qm, x = quantized(JOIN_CASES[name][0], **QDQ_CONFIGS[config])
    ig = import_(qm)
    xq, y = assert_agrees(ig, qm, x)
    dfg = assert_rtl_equals_golden(ig, xq, y)
    assert any(b.kind == "fork" for b in dfg.blocks)


# ---------------------------------------------------------------------------------------------
# 5. Conv → (Transpose) → Flatten → Gemm
# ---------------------------------------------------------------------------------------------

GEMM_CASES = {"conv_flatten_gemm": m_conv_flatten_gemm,
              "conv_transpose_flatten_gemm": m_conv_transpose_flatten_gemm}


@pytest.mark.parametrize("per_channel", [False, True], ids=["pertensor", "perchannel"])
@pytest.mark.parametrize("name", list(GEMM_CASES))
def test_conv_gemm_qdq_golden_matches_ort(name, per_channel):
    _, qm, x = quantized(GEMM_CASES[name], per_channel=per_channel)
    if "transpose" in name:
        assert "Transpose" in op_sequence(qm)
    ig = import_(qm)
    assert op_types(ig) == [Conv, MatVec]
    assert ig.ops[1].weights.shape == (5, 24)
    assert ig.output_order is None
    assert_agrees(ig, qm, x)


def test_conv_transpose_gemm_weights_permuted():
    """The Gemm's columns follow the stream (channel-last) order: after Transpose(0,2,3,1)
    ONNX's flattened order *is* the stream order, so the columns stay as they are; after a
    plain Flatten they are permuted from (c, h, w) to (h, w, c)."""
    _, qm_t, _ = quantized(m_conv_transpose_flatten_gemm)
    _, qm_f, _ = quantized(m_conv_flatten_gemm)
    wt = {i.name: numpy_helper.to_array(i) for i in qm_t.graph.initializer}
    wf = {i.name: numpy_helper.to_array(i) for i in qm_f.graph.initializer}
    wq_t, wq_f = wt["fc.weight_quantized"], wf["fc.weight_quantized"]
    ig_t, ig_f = import_(qm_t), import_(qm_f)
    np.testing.assert_array_equal(ig_t.ops[1].weights, wq_t.astype(np.int64))
    perm = np.arange(24).reshape(4, 2, 3).transpose(1, 2, 0).reshape(-1)
    np.testing.assert_array_equal(ig_f.ops[1].weights, wq_f.astype(np.int64)[:, perm])


@pytest.mark.sim
@pytest.mark.parametrize("name", list(GEMM_CASES))
def test_conv_gemm_rtl_equals_golden(name):
    _, qm, x = quantized(GEMM_CASES[name], per_channel=True)
    ig = import_(qm)
    xq, y = assert_agrees(ig, qm, x)
    assert_rtl_equals_golden(ig, xq, y)


# ---------------------------------------------------------------------------------------------
# 6. Clip(0, 6)
# ---------------------------------------------------------------------------------------------

RELU6_CONFIGS = {
    # asymmetric uint8: ORT drops the Clip; the output Q's range [0, 6] clamps
    "u8-asym": dict(),
    # symmetric int8: ORT keeps the Clip between DQ and Q; it folds into the requantizer
    "i8-sym": dict(activation_type="int8", symmetric_activations=True),
}


@pytest.mark.parametrize("config", list(RELU6_CONFIGS))
def test_relu6_qdq_golden_matches_ort(config):
    fm, qm, x = quantized(m_conv_relu6, per_channel=True, **RELU6_CONFIGS[config])
    # the float model really clips at 6 on these inputs
    c = run_model(fm, x)
    assert c.max() == np.float32(6.0) and np.mean(c == 6.0) > 0.05
    ig = import_(qm)
    assert op_types(ig) == [Conv]
    conv, tout = ig.ops[0], ig.tensors[ig.ops[0].output]
    assert conv.requant.lo == max(tout.qtype.lo, tout.zero_point)
    six = int(np.rint(np.float32(6.0) / np.float32(tout.scale))) + tout.zero_point
    assert conv.requant.hi == min(tout.qtype.hi, six)
    if config == "i8-sym":
        assert "Clip" in op_sequence(qm) and "clip" in conv.nodes
    xq, y = assert_agrees(ig, qm, x)
    # the clamp is reached
    assert np.mean(y == conv.requant.hi) > 0.05
    assert_rtl_equals_golden(ig, xq, y)


# ---------------------------------------------------------------------------------------------
# 7. QOperator format
# ---------------------------------------------------------------------------------------------

QOP_CASES = {
    # name: (builder, per_channel, expected QOperator ops, expected integer ops)
    "conv3x3_s1_p1_relu": (m_conv3x3_relu, True, {"QLinearConv"}, [Conv]),
    "conv5x5_s2_asym_pads": (m_conv5x5_s2_asym, False, {"QLinearConv"}, [Conv]),
    "conv3x3_s3_nopad": (m_conv_s3_nopad, True, {"QLinearConv"}, [Conv]),
    "depthwise3x3_s2_relu": (m_depthwise_s2, True, {"QLinearConv"}, [Conv]),
    "conv3x3_s2_same_upper": (m_conv_same_upper, False, {"QLinearConv"}, [Conv]),
    "conv1x1": (m_conv1x1, False, {"QLinearConv"}, [Conv]),
    "conv1x3_nobias": (m_conv1x3_nobias, True, {"QLinearConv"}, [Conv]),
    "conv_relu6": (m_conv_relu6, True, {"QLinearConv"}, [Conv]),
    "conv_transpose_flatten_gemm": (m_conv_transpose_flatten_gemm, True,
                                    {"QLinearConv", "Transpose", "Flatten", "QGemm"},
                                    [Conv, MatVec]),
    "maxpool2x2_s2": (m_maxpool2x2_s2, False, {"QLinearConv", "MaxPool"}, [Conv, Pool]),
    "maxpool3x3_s1_p1": (m_maxpool3x3_s1_p1, False, {"QLinearConv", "MaxPool"}, [Conv, Pool]),
    "avgpool3x3_s1_p1_exclude_pad": (m_avgpool3x3_p1_excl, False,
                                     {"QLinearConv", "QLinearAveragePool"}, [Conv, Pool]),
    "avgpool3x3_s1_p1_include_pad": (m_avgpool3x3_p1_incl, False,
                                     {"QLinearConv", "QLinearAveragePool"}, [Conv, Pool]),
    "avgpool2x2_s2": (m_avgpool2x2_s2, False, {"QLinearConv", "QLinearAveragePool"},
                      [Conv, Pool]),
    "global_avgpool": (m_global_avgpool, False, {"QLinearConv", "QLinearGlobalAveragePool"},
                       [Conv, GlobalAvgPool]),
    "residual_add_relu": (m_residual_add, True, {"QLinearConv", "QLinearAdd"},
                          [Conv, Conv, AddOp]),
    "residual_add_input_relu": (m_residual_add_input, False, {"QLinearConv", "QLinearAdd"},
                                [Conv, AddOp]),
    "concat_2_and_4_channels": (m_concat_2_4, True, {"QLinearConv", "QLinearConcat"},
                                [Conv, Conv, ConcatOp]),
}
_FLOAT_OPS = {"Conv", "AveragePool", "GlobalAveragePool", "Add", "Concat", "Relu",
              "BatchNormalization"}


@pytest.mark.parametrize("name", list(QOP_CASES))
def test_qoperator_golden_matches_ort(name):
    builder, per_channel, expect_ops, expect_ig = QOP_CASES[name]
    _, qm, x = quantized(builder, fmt="qop", per_channel=per_channel)
    ops = op_sequence(qm)
    assert ops[0] == "QuantizeLinear" and ops[-1] == "DequantizeLinear"
    assert set(ops[1:-1]) == expect_ops, ops
    assert not _FLOAT_OPS & set(ops)
    ig = import_(qm)
    assert op_types(ig) == expect_ig
    assert_agrees(ig, qm, x, min_levels=4)


@pytest.mark.sim
@pytest.mark.parametrize("name", ["conv3x3_s1_p1_relu", "depthwise3x3_s2_relu", "maxpool2x2_s2",
                                  "avgpool3x3_s1_p1_include_pad", "global_avgpool",
                                  "residual_add_relu", "concat_2_and_4_channels",
                                  "conv_transpose_flatten_gemm"])
def test_qoperator_rtl_equals_golden(name):
    builder, per_channel, _, _ = QOP_CASES[name]
    _, qm, x = quantized(builder, fmt="qop", per_channel=per_channel)
    ig = import_(qm)
    xq, y = assert_agrees(ig, qm, x, min_levels=4)
    assert_rtl_equals_golden(ig, xq, y)


# ---------------------------------------------------------------------------------------------
# 8. MatMulInteger / ConvInteger chains (hand-built, opset 13)
# ---------------------------------------------------------------------------------------------

def _integer_params(kind: str, seed: int = 0) -> dict:
    """Constants of the chain: uint8 input quantization covering [-1, 1), int8 weights with a
    nonzero zero point, the float scale x_scale·w_scale, a float bias, and the output
    quantization from the chain's real range on calibration inputs."""
    rng = np.random.default_rng(seed)
    p = dict(kind=kind, x_scale=np.float32(2.0 / 255), x_zp=np.uint8(128))
    if kind == "matmul":
        p.update(shape=(16,), w=rng.integers(-127, 128, (16, 8)).astype(np.int8),
                 w_zp=np.int8(3), bias=rng.uniform(-0.2, 0.2, 8).astype(np.float32), fan_in=16)
    else:
        p.update(shape=(3, 6, 7), w=rng.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8),
                 w_zp=np.int8(-2), bias=rng.uniform(-0.2, 0.2, (1, 4, 1, 1)).astype(np.float32),
                 fan_in=27)
    w_scale = np.float32(np.sqrt(2.0 / p["fan_in"]) / 64)          # He-like real weights
    p["mul"] = np.float32(p["x_scale"] * w_scale)
    p["y_scale"], p["y_zp"] = np.float32(1), np.uint8(0)
    yr = _chain_real(p, inputs(N_CALIB, p["shape"], seed + 1))
    lo, hi = min(float(yr.min()), 0.0), max(float(yr.max()), 0.0)
    p["y_scale"] = np.float32((hi - lo) / 255)
    p["y_zp"] = np.uint8(np.clip(np.rint(-lo / p["y_scale"]), 0, 255))
    return p


def _chain_real(p: dict, x: np.ndarray) -> np.ndarray:
    """The chain's value before the output QuantizeLinear, exactly (float64, the integer
    accumulator exact), in units of the output scale: [N, elements] in ONNX order."""
    xq = np.clip(np.rint(x / p["x_scale"]) + int(p["x_zp"]), 0, 255) - int(p["x_zp"])
    w = p["w"].astype(np.float64) - int(p["w_zp"])
    if p["kind"] == "matmul":
        acc = xq @ w
    else:
        from numpy.lib.stride_tricks import sliding_window_view
        xp = np.pad(xq, ((0, 0), (0, 0), (1, 1), (1, 1)))
        acc = np.einsum("nchwij,ocij->nohw", sliding_window_view(xp, (3, 3), axis=(2, 3)), w)
    real = acc * np.float64(p["mul"]) + p["bias"].astype(np.float64)
    return (real / np.float64(p["y_scale"])).reshape(x.shape[0], -1)


def _integer_model(kind: str, seed: int = 0):
    """input → Q(uint8) → MatMulInteger/ConvInteger(int8 W, x_zp, w_zp) → Cast(float) →
    Mul(x_scale·w_scale) → Add(float bias) → Q(uint8) → DQ → output.
    Returns (model, input shape per sample, constants)."""
    p = _integer_params(kind, seed)
    arrays = {"x_scale": np.array(p["x_scale"], np.float32), "x_zp": np.array(p["x_zp"]),
              "w_q": p["w"], "w_zp": np.array(p["w_zp"]),
              "acc_scale": np.array(p["mul"], np.float32), "bias": p["bias"],
              "y_scale": np.array(p["y_scale"], np.float32), "y_zp": np.array(p["y_zp"])}
    inits = [numpy_helper.from_array(a, k) for k, a in arrays.items()]
    op = "MatMulInteger" if kind == "matmul" else "ConvInteger"
    attrs = {} if kind == "matmul" else {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}
    nodes = [helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zp"], ["xq"], name="q_in"),
             helper.make_node(op, ["xq", "w_q", "x_zp", "w_zp"], ["acc"], name="int_op",
                              **attrs),
             helper.make_node("Cast", ["acc"], ["acc_f"], name="cast", to=TensorProto.FLOAT),
             helper.make_node("Mul", ["acc_f", "acc_scale"], ["scaled"], name="mul"),
             helper.make_node("Add", ["scaled", "bias"], ["biased"], name="add_bias"),
             helper.make_node("QuantizeLinear", ["biased", "y_scale", "y_zp"], ["yq"],
                              name="q_out"),
             helper.make_node("DequantizeLinear", ["yq", "y_scale", "y_zp"], ["y"],
                              name="dq_out")]
    graph = helper.make_graph(
        nodes, f"{kind}_integer",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", *p["shape"]])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=inits)
    opsets = [helper.make_opsetid("", 13)]
    m = helper.make_model(graph, opset_imports=opsets, producer_name="test_cnn_ops",
                          ir_version=helper.find_min_ir_version_for(opsets))
    m = onnx.shape_inference.infer_shapes(m, strict_mode=True)
    onnx.checker.check_model(m, full_check=True)
    return m, p["shape"], p


@pytest.mark.parametrize("kind", ["matmul", "conv"])
def test_integer_ops_golden_matches_ort(kind):
    """ORT runs MatMulInteger/ConvInteger exactly in int32, then Mul and Add in float32, then
    QuantizeLinear. The importer keeps the exact accumulator but must put the float bias on
    the accumulator grid (``rint(bias / (x_scale·w_scale))``), an error of at most half a
    grid step = 0.5·mult output steps (mult ≈ 1e-3 here). So golden and ORT differ exactly
    where the real value lies that close to a rounding tie (x.5 steps): rarely (≈ 0.04 %),
    by one step, and there ORT (float32) equals the exactly rounded value."""
    m, shape, p = _integer_model(kind)
    ig = import_(m)
    assert op_types(ig) == ([MatVec] if kind == "matmul" else [Conv])
    op = ig.ops[0]
    assert op.name == "int_op" and op.nodes[-1] == "q_out"
    assert {"int_op", "mul", "add_bias", "q_out"} <= set(op.nodes)
    # the weight zero point is subtracted; columns in stream order ((kh, kw, c) for a conv)
    wm = p["w"].astype(np.int64) - int(p["w_zp"])
    wm = wm.T if kind == "matmul" else wm.transpose(0, 2, 3, 1).reshape(wm.shape[0], -1)
    np.testing.assert_array_equal(op.weights, wm)
    tout = ig.tensors[ig.output]
    assert (np.float32(tout.scale), tout.zero_point) == (p["y_scale"], int(p["y_zp"]))

    # the 50 test inputs: never more than one step
    _, _, y, ref = golden_and_ort(ig, m, inputs(N_TEST, shape, 2))
    assert np.abs(y - ref).max() <= 1
    print(f"golden vs ORT ({N_TEST} inputs): {y.size} elements, {int(np.sum(y != ref))} differ")
    # the rate and the cause, on 2000 inputs
    x = inputs(2000, shape, 3)
    _, _, y, ref = golden_and_ort(ig, m, x)
    differ = y != ref
    print(f"golden vs ORT (2000 inputs): {y.size} elements, {int(differ.sum())} differ "
          f"({differ.mean():.4%})")
    assert np.abs(y - ref).max() <= 1 and differ.mean() < 1e-3
    real = _chain_real(p, x)
    exact = np.clip(np.rint(real) + tout.zero_point, tout.qtype.lo, tout.qtype.hi)
    assert np.array_equal(ref[differ], exact[differ])           # ORT rounded right there
    mult = float(p["mul"]) / float(p["y_scale"])
    dist = np.abs(np.abs(real - np.floor(real)) - 0.5)           # distance from a tie
    assert np.all(dist[differ] <= 0.5 * mult + 1e-5)
    # and golden differs from the exact rounding nowhere else
    assert np.array_equal(y[~differ], exact[~differ])


@pytest.mark.parametrize("kind", ["matmul", "conv"])
def test_integer_chain_lists_every_folded_node(kind):
    """KNOWN BUG (dataflow/ops_qop.py, ``cast``): the Cast folded into the layer is not
    recorded in the op's ``nodes`` (``mul`` appends its label, ``cast`` does not), so the
    manifest's ``onnx_nodes`` of the layer misses it."""
    m, _, _ = _integer_model(kind)
    assert import_(m).ops[0].nodes == ["int_op", "cast", "mul", "add_bias", "q_out"]


@pytest.mark.sim
@pytest.mark.parametrize("kind", ["matmul", "conv"])
def test_integer_ops_rtl_equals_golden(kind):
    m, shape, _ = _integer_model(kind)
    ig = import_(m)
    xq, y, _, _ = golden_and_ort(ig, m, inputs(N_TEST, shape, 2))
    assert_rtl_equals_golden(ig, xq, y)


# ---------------------------------------------------------------------------------------------
# 9. refused with a clear error
# ---------------------------------------------------------------------------------------------

REFUSED = {
    # name: (builder, node, op, reason (regex))
    "concat_axis2": (m_concat_axis2, "concat", "Concat", r"Concat along axis 2"),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_unsupported_refused(name):
    builder, node, op, reason = REFUSED[name]
    _, qm, _ = quantized(builder)
    # ORT quantized around the op (the refusal is the importer's, not a float leftover)
    n = next(n for n in qm.graph.node if n.name == node)
    assert n.op_type == op
    producers = {o: p.op_type for p in qm.graph.node for o in p.output}
    assert producers[n.input[0]] == "DequantizeLinear"
    with pytest.raises(HwgenError, match=rf"^node {node} \({op}-\d+\): {reason}"):
        import_(qm)


# ---------------------------------------------------------------------------------------------
# 10. bugs found in the importer: these tests fail until it is fixed
# ---------------------------------------------------------------------------------------------

def _conv_integer_scaled(scale_shape: tuple[int, ...], bias_shape: tuple[int, ...],
                         cast_to: int = TensorProto.FLOAT, opset: int = 13):
    """ConvInteger (4 output channels) on a 3×5×4 map — width 4 = channels, so a constant of
    shape [4] is valid ONNX but broadcasts along the *width* — then Cast, Mul by per-channel
    scales, Add of a per-channel bias, Q, DQ."""
    rng = np.random.default_rng(7)
    oc, c, h, w = 4, 3, 5, 4
    ft = np.dtype(helper.tensor_dtype_to_np_dtype(cast_to)).type
    scale = np.float32(2 / 255 * 0.002) * np.array([1.0, 1.5, 0.7, 1.2], np.float32)
    bias = np.array([0.1, -0.2, 0.05, 0.3], np.float32)
    y_scale = np.float32(0.05)
    arrays = {"x_scale": np.array(2 / 255, np.float32), "x_zp": np.array(128, np.uint8),
              "w_q": rng.integers(-127, 128, (oc, c, 3, 3)).astype(np.int8),
              "w_zp": np.array(0, np.int8),
              # a shape of one element takes the first value (a per-tensor constant)
              "acc_scale": scale[:int(np.prod(scale_shape))].reshape(scale_shape).astype(ft),
              "bias": bias[:int(np.prod(bias_shape))].reshape(bias_shape).astype(ft),
              "y_scale": np.array(y_scale, ft), "y_zp": np.array(128, np.uint8),
              "y_scale_f32": np.array(np.float32(ft(y_scale)), np.float32)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zp"], ["xq"], name="q_in"),
             helper.make_node("ConvInteger", ["xq", "w_q", "x_zp", "w_zp"], ["acc"],
                              name="int_op", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Cast", ["acc"], ["acc_f"], name="cast", to=cast_to),
             helper.make_node("Mul", ["acc_f", "acc_scale"], ["scaled"], name="mul"),
             helper.make_node("Add", ["scaled", "bias"], ["biased"], name="add_bias"),
             helper.make_node("QuantizeLinear", ["biased", "y_scale", "y_zp"], ["yq"],
                              name="q_out"),
             helper.make_node("DequantizeLinear", ["yq", "y_scale_f32", "y_zp"], ["y"],
                              name="dq_out")]
    graph = helper.make_graph(
        nodes, "conv_integer_scaled",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", c, h, w])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", oc, h, w])],
        initializer=[numpy_helper.from_array(a, k) for k, a in arrays.items()])
    opsets = [helper.make_opsetid("", opset)]
    m = helper.make_model(graph, opset_imports=opsets, producer_name="test_cnn_ops",
                          ir_version=helper.find_min_ir_version_for(opsets))
    onnx.checker.check_model(m, full_check=True)
    return m, (c, h, w)


@pytest.mark.parametrize("shapes", [((4, 1, 1), (4, 1, 1)), ((4,), (1,)), ((1,), (4,))],
                         ids=["per-channel-[4,1,1]", "mul-[4]-along-width",
                              "bias-[4]-along-width"])
def test_integer_chain_constants_broadcast_like_onnx(shapes):
    """BUG (dataflow/ops_qop.py ``mul``, dataflow/ops_linear.py ``_add_bias`` via ``add``):
    a Mul scale or Add bias constant with as many elements as output channels is taken per
    channel whatever its shape. On an [N, C, H, W] result ONNX broadcasting aligns trailing
    axes, so shape [C] scales along the width (valid when W == C, as here): golden then
    differs from ORT by up to ~20 steps on most elements. Only shapes whose non-1 axis is
    the channel axis ([C, 1, 1], [1, C, 1, 1]) may be folded per channel; others must be
    refused."""
    m, shape = _conv_integer_scaled(*shapes)
    try:
        ig = import_(m)
    except HwgenError as e:
        assert "mul" in str(e) or "add_bias" in str(e)
        return
    x = inputs(N_TEST, shape, 2)
    if ig.host_tail:
        # the constants do not act per channel: the hardware streams the accumulator and
        # the host runs the float ops after it as the model does, to the same output
        assert tail_nodes(ig.host_tail)[0] in ("Cast", "Mul") and shapes != ((4, 1, 1), (4, 1, 1))
        n = x.shape[0]
        acc = golden.run(ig, ig.quantize_input(x.reshape(n, -1)))[ig.output].reshape(n, -1)
        reals = ig.output_reals(ig.from_stream(acc)).reshape((n,) + ig.tensors[ig.output].shape)
        assert np.array_equal(run_tail(ig.host_tail, reals), run_model(m, x))
        return
    assert_agrees(ig, m, x)


def test_integer_chain_cast_to_float16_on_the_host():
    """Cast of the int32 accumulator to float16 (then float16 Mul / Add / QuantizeLinear,
    opset 19) is not taken as an exact requantizer (float16 keeps 11 significant bits: ORT
    rounds the accumulator); the hardware streams the accumulator and the host runs the
    float16 chain as the model does."""
    m, _ = _conv_integer_scaled((4, 1, 1), (4, 1, 1), cast_to=TensorProto.FLOAT16, opset=19)
    ig = import_(m)
    assert tail_nodes(ig.host_tail)[0] == "Cast"


def m_concat_three(seed):
    n = Net((3, 6, 6), seed)
    a = n.conv("x", 2, 3, "conv_a", pads=[1, 1, 1, 1])
    b = n.conv("x", 2, 1, "conv_b")
    c = n.conv("x", 2, 1, "conv_c")
    return n, n.op("Concat", [a, b, c], "concat", channels=6, axis=1)


@pytest.mark.parametrize("fmt", ["qdq", "qop"])
def test_concat_of_three_tensors_refused_at_import(fmt):
    """BUG (dataflow/ops_join.py ``concat``, dataflow/ops_qop.py ``qlinear_concat``): a
    Concat of three feature maps is accepted into the integer graph, but golden.run then
    crashes (``ValueError: too many values to unpack`` in ``golden.concat_params``) and only
    ``lower`` refuses it ("Concat of 3 tensors; two are supported"). The importer should
    refuse it by name (or golden and the blocks should support N inputs)."""
    _, qm, x = quantized(m_concat_three, fmt=fmt)
    try:
        ig = import_(qm)
    except HwgenError as e:
        assert "concat" in str(e)
        return
    assert_agrees(ig, qm, x)
