"""The reference onnxruntime session computes what the QDQ model says, on any x86-64 CPU.

Without VNNI, onnxruntime's u8 x s8 kernels add each two neighbouring products in a
saturating int16 (``vpmaddubsw``); ``hwgen.reference.reference_session_options`` sets
``session.x64quantprecision=1`` so the fused kernels take uint8 weights and sum exactly. Here
every pair of products is 255 * 127 * 2 = 64,770 > 32,767: a saturating kernel gives about
half the exact sum. On a CPU with VNNI the check holds with or without the option."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from hwgen.dataflow import golden
from hwgen.dataflow.importer import load_model, to_int_graph
from hwgen.reference import reference_outputs

C, K = 4, 3                  # input channels, kernel: 36 products per output
Y_SCALE = 36 / 100           # all inputs 1.0: the exact output, 36.0, is 100 output steps


def _saturating_conv(path):
    """Q(x; 1/255, 0) → DQ → Conv(int8 weights 127 and -127, scale 1/127) → Q → DQ."""
    w = np.full((2, C, K, K), 127, np.int8)
    w[1] = -127
    inits = [numpy_helper.from_array(np.array(1 / 255, np.float32), "x_s"),
             numpy_helper.from_array(np.array(0, np.uint8), "x_z"),
             numpy_helper.from_array(w, "w_q"),
             numpy_helper.from_array(np.array(1 / 127, np.float32), "w_s"),
             numpy_helper.from_array(np.array(0, np.int8), "w_z"),
             numpy_helper.from_array(np.array(Y_SCALE, np.float32), "y_s"),
             numpy_helper.from_array(np.array(0, np.int8), "y_z")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "x_s", "x_z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "x_s", "x_z"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w_q", "w_s", "w_z"], ["wd"]),
             helper.make_node("Conv", ["xd", "wd"], ["acc"], kernel_shape=[K, K]),
             helper.make_node("QuantizeLinear", ["acc", "y_s", "y_z"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "y_s", "y_z"], ["y"])]
    g = helper.make_graph(nodes, "saturating_conv",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", C, K, K])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2, 1, 1])],
                          initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, path)


def test_reference_sums_u8_s8_products_exactly(tmp_path):
    path = tmp_path / "saturating_conv.onnx"
    _saturating_conv(path)
    x = np.ones((3, C, K, K), np.float32)           # every activation quantizes to 255
    x[1] *= 0.5                                     # 128: pairs of 32,512 fit in int16
    x[2, :, 0] = 0.0
    (ref,), name = reference_outputs(path, "x", ["yq"], x)
    assert name == "onnxruntime"
    xq = np.rint(x * 255).astype(np.int64)
    exact = np.stack([xq.sum(axis=(1, 2, 3)), -xq.sum(axis=(1, 2, 3))], axis=1) * 127
    want = np.clip(np.rint(exact / 255 / 127 / Y_SCALE), -128, 127)
    assert want.tolist() == [[100, -100], [50, -50], [67, -67]]    # saturating: about [51, -51]
    assert np.array_equal(ref.reshape(3, 2).astype(np.int64), want)
    ig = to_int_graph(load_model(path))
    y = golden.run(ig, ig.quantize_input(x.reshape(3, -1)))[ig.output].reshape(3, -1)
    assert np.array_equal(y, want)
