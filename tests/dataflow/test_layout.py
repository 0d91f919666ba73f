"""Channel-last graphs (``dataflow/layout.py``): qonnx's channels_last ops expanded, and
Transposes sunk through layout-free ops until they cancel. Every rewrite must compute what
the original graph computes (onnxruntime runs both)."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from hwgen.dataflow.layout import expand_channels_last, sink_transposes

N = helper.make_node
TO_NCHW, TO_NHWC = [0, 3, 1, 2], [0, 2, 3, 1]


def _model(nodes, inits, in_shape, out_shape, opset=13, domains=()):
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, in_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
        initializer=[numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]
                          + [helper.make_opsetid(d, 1) for d in domains])
    onnx.checker.check_model(m)
    return m


def _run(m, x):
    s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, {"x": x})[0]


def _sunk(m, everywhere=False):
    r = onnx.ModelProto.FromString(m.SerializeToString())
    steps = sink_transposes(r, everywhere)
    onnx.checker.check_model(r)
    return r, steps


def _ops(m):
    return [n.op_type for n in m.graph.node]


def test_transposes_cancel_through_elementwise_ops_with_per_channel_parameters():
    rng = np.random.default_rng(0)
    c = rng.normal(size=(1, 1, 1, 4)).astype(np.float32)    # per-channel, NHWC broadcast
    b = rng.normal(size=(4,)).astype(np.float32)            # trailing-axis broadcast
    m = _model([N("Transpose", ["x"], ["t"], perm=TO_NHWC), N("Relu", ["t"], ["r"]),
                N("Mul", ["r", "c"], ["m"]), N("Add", ["b", "m"], ["a"]),
                N("Transpose", ["a"], ["y"], perm=TO_NCHW)],
               {"c": c, "b": b}, [2, 4, 3, 5], [2, 4, 3, 5])
    r, steps = _sunk(m)
    assert steps == 1 and "Transpose" not in _ops(r)
    x = rng.normal(size=(2, 4, 3, 5)).astype(np.float32)
    assert np.array_equal(_run(r, x), _run(m, x))


def test_a_concat_along_the_last_axis_merges_its_transposes():
    rng = np.random.default_rng(1)
    m = _model([N("Transpose", ["x"], ["a"], perm=TO_NHWC),
                N("Relu", ["x"], ["x2"]), N("Transpose", ["x2"], ["b"], perm=TO_NHWC),
                N("Concat", ["a", "b"], ["c"], axis=-1),
                N("Transpose", ["c"], ["y"], perm=TO_NCHW)],
               {}, [1, 3, 4, 5], [1, 6, 4, 5])
    r, _ = _sunk(m)
    assert _ops(r) == ["Relu", "Concat"]
    assert r.graph.node[1].attribute[0].i == 1        # the channel axis of NCHW
    x = rng.normal(size=(1, 3, 4, 5)).astype(np.float32)
    assert np.array_equal(_run(r, x), _run(m, x))


def test_a_resize_with_nhwc_scales_and_a_per_axis_quantizer_move_with_the_transpose():
    rng = np.random.default_rng(2)
    scale = np.array([0.05, 0.1, 0.2], np.float32)
    m = _model([N("Transpose", ["x"], ["t"], perm=TO_NHWC),
                N("QuantizeLinear", ["t", "s", "z"], ["q"], axis=3),
                N("DequantizeLinear", ["q", "s", "z"], ["d"], axis=3),
                N("Resize", ["d", "", "scales"], ["u"], mode="nearest",
                  coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
                N("Transpose", ["u"], ["y"], perm=TO_NCHW)],
               {"s": scale, "z": np.zeros(3, np.uint8),
                "scales": np.array([1, 2, 3, 1], np.float32)}, [2, 3, 4, 5], [2, 3, 8, 15])
    r, _ = _sunk(m)
    assert "Transpose" not in _ops(r)
    x = rng.uniform(0, 20, size=(2, 3, 4, 5)).astype(np.float32)
    assert np.array_equal(_run(r, x), _run(m, x))


def test_a_transpose_with_no_inverse_below_stays():
    m = _model([N("Transpose", ["x"], ["t"], perm=TO_NHWC), N("Relu", ["t"], ["r"]),
                N("Flatten", ["r"], ["y"])], {}, [1, 3, 4, 5], [1, 60])
    r, steps = _sunk(m)
    assert steps == 0 and _ops(r) == ["Transpose", "Relu", "Flatten"]


def test_a_forked_transpose_stays():
    m = _model([N("Transpose", ["x"], ["t"], perm=TO_NHWC), N("Relu", ["t"], ["a"]),
                N("Neg", ["t"], ["b"]), N("Add", ["a", "b"], ["s"]),
                N("Transpose", ["s"], ["y"], perm=TO_NCHW)], {}, [1, 3, 4, 5], [1, 3, 4, 5])
    r, steps = _sunk(m)
    assert steps == 0 and _ops(r).count("Transpose") == 2


@pytest.mark.parametrize("op", ["Conv", "MaxPool", "BatchNormalization"])
def test_channels_last_ops_expand_to_the_onnx_op_between_transposes(op):
    """A channels_last op (qonnx's domain) on NHWC data: the expansion computes in NHWC what
    the ai.onnx op computes on the NCHW tensor (Conv's weights are OHWI)."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(1, 6, 6, 3)).astype(np.float32)
    if op == "Conv":
        w = rng.normal(size=(4, 3, 3, 3)).astype(np.float32)     # OIHW
        inits = {"w": np.transpose(w, TO_NHWC)}                  # OHWI, as qonnx keeps it
        attrs = dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1],
                     dilations=[1, 1], group=1)
        inputs, out_c = ["x", "w"], 4
        ref = _model([N("Conv", ["x", "w"], ["y"], **attrs)], {"w": w}, [1, 3, 6, 6],
                     [1, 4, 6, 6])
    elif op == "MaxPool":
        inits, attrs, inputs, out_c = {}, dict(kernel_shape=[2, 2], strides=[2, 2]), ["x"], 3
        ref = _model([N("MaxPool", ["x"], ["y"], **attrs)], {}, [1, 3, 6, 6], [1, 3, 3, 3])
    else:
        p = {k: rng.uniform(0.5, 1.5, 3).astype(np.float32) for k in "sbmv"}
        inits, attrs, inputs, out_c = p, dict(epsilon=1e-5), ["x", "s", "b", "m", "v"], 3
        ref = _model([N(op, inputs, ["y"], **attrs)], p, [1, 3, 6, 6], [1, 3, 6, 6])
    hw = 6 if op != "MaxPool" else 3
    cl = _model([N(op, inputs, ["y"], domain="qonnx.custom_op.channels_last", **attrs)],
                inits, [1, 6, 6, 3], [1, hw, hw, out_c],
                domains=["qonnx.custom_op.channels_last"])
    notes = []
    assert expand_channels_last(cl, notes) and "channels_last" in notes[0]
    assert all(n.domain == "" for n in cl.graph.node)
    got = _run(cl, x)
    want = np.transpose(_run(ref, np.ascontiguousarray(np.transpose(x, TO_NCHW))), TO_NHWC)
    assert np.array_equal(got, want)
