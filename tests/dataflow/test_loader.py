"""Tests for dataflow.loader (and dataflow.registry)."""

from __future__ import annotations

import os

import numpy as np
import onnx
import onnx.defs
import pytest
from onnx import TensorProto, helper, numpy_helper

from hwgen.dataflow.loader import (
    MAX_IR_VERSION,
    Graph,
    Node,
    TensorInfo,
    load_model,
    load_model_proto,
)
from hwgen.dataflow.registry import OpRegistry
from hwgen.errors import HwgenError

OPSET = 13


def vi(name, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def mlp_model(opset=OPSET, ir_version=None, big=False) -> onnx.ModelProto:
    """x[N,4] @ w[4,3] + b -> Relu -> y[N,3]; ``big`` makes w large (for truncation)."""
    k = 256 if big else 4
    w = numpy_helper.from_array(np.arange(k * 3, dtype=np.float32).reshape(k, 3), "w")
    b = numpy_helper.from_array(np.array([1, -2, 3], dtype=np.float32), "b")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
        helper.make_node("Add", ["m", "b"], ["a"], name="add"),
        helper.make_node("Relu", ["a"], ["y"], name="relu"),
    ]
    g = helper.make_graph(nodes, "mlp", [vi("x", ["N", k])], [vi("y", ["N", 3])], [w, b])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    if ir_version is not None:
        m.ir_version = ir_version
    return m


def save(model: onnx.ModelProto, path) -> str:
    """Serialize without running the checker."""
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
    return str(path)


def raises(fn, *args, must_contain=()):
    with pytest.raises(HwgenError) as ei:
        fn(*args)
    msg = str(ei.value)
    assert "\n" not in msg, msg
    for s in must_contain:
        assert str(s) in msg, f"{s!r} not in {msg!r}"
    return msg


# ------------------------------------------------------------------ valid models


def test_valid_model_loads(tmp_path):
    path = save(mlp_model(), tmp_path / "mlp.onnx")
    g = load_model(path)
    assert isinstance(g, Graph)
    assert g.path == os.path.abspath(path)
    assert g.name == "mlp"
    assert g.ir_version == onnx.IR_VERSION
    assert g.opsets == {"": OPSET}
    assert [n.op_type for n in g.nodes] == ["MatMul", "Add", "Relu"]
    assert [n.index for n in g.nodes] == [0, 1, 2]
    assert [i.name for i in g.inputs] == ["x"]
    assert g.inputs[0] == TensorInfo("x", np.dtype(np.float32), ("N", 4))
    assert g.outputs[0].name == "y" and g.outputs[0].shape == ("N", 3)
    assert set(g.constants) == {"w", "b"}
    np.testing.assert_array_equal(g.constants["b"], [1, -2, 3])
    assert g.constants["w"].shape == (4, 3)
    # shape inference filled intermediates and symbolic batch dims stay str
    assert g.value_info["m"].shape == ("N", 3)
    assert g.value_info["a"].dtype == np.float32
    assert g.value_info["w"].shape == (4, 3)
    assert {"x", "y", "m", "a", "w", "b"} <= set(g.value_info)
    for n in g.nodes:
        expected = onnx.defs.get_schema(
            n.op_type, max_inclusive_version=OPSET, domain=""
        ).since_version
        assert n.since_version == expected
        assert n.opset_version == OPSET
        assert n.domain == ""
    relu = g.nodes[2]
    assert relu.label == "relu"
    assert relu.inputs == ["a"] and relu.outputs == ["y"]
    assert [n.name for n in g.nodes if "a" in n.outputs] == ["add"]      # producer of a
    assert [n.name for n in g.nodes if "m" in n.inputs] == ["add"]       # consumers of m


def test_since_version_tracks_opset(tmp_path):
    for opset in (6, 13, 14):
        m = mlp_model(opset=opset)
        g = load_model_proto(m)
        relu = g.nodes[2]
        assert relu.since_version == onnx.defs.get_schema(
            "Relu", max_inclusive_version=opset, domain=""
        ).since_version
        assert relu.opset_version == opset


def test_ai_onnx_domain_is_default_domain():
    m = mlp_model()
    m.opset_import[0].domain = "ai.onnx"
    m.graph.node[2].domain = "ai.onnx"
    g = load_model_proto(m)
    assert g.opsets == {"": OPSET}
    assert all(n.domain == "" for n in g.nodes)


def test_unnamed_node_label_and_attrs():
    x = vi("x", [1, 3, 8, 8])
    c = helper.make_node(
        "Conv", ["x", "w"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], auto_pad="NOTSET"
    )
    w = numpy_helper.from_array(np.ones((2, 3, 3, 3), np.float32), "w")
    g = helper.make_graph([c], "g", [x], [vi("y", [1, 2, 8, 8])], [w])
    gr = load_model_proto(helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)]))
    n = gr.nodes[0]
    assert n.label == "#0 (Conv)"
    assert n.attrs["kernel_shape"] == [3, 3]
    assert n.attrs["pads"] == [1, 1, 1, 1]
    assert n.attrs["auto_pad"] == "NOTSET"


def test_constant_nodes_are_folded():
    x = vi("x", [2, 3])
    nodes = [
        helper.make_node(
            "Constant", [], ["c"], name="const",
            value=numpy_helper.from_array(np.full((2, 3), 5, np.float32), "cval"),
        ),
        helper.make_node("Constant", [], ["s"], value_int=7),
        helper.make_node("Mul", ["x", "c"], ["y"], name="mul"),
    ]
    g = helper.make_graph(nodes, "g", [x], [vi("y", [2, 3])])
    gr = load_model_proto(helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)]))
    assert [n.op_type for n in gr.nodes] == ["Mul"]
    assert gr.nodes[0].index == 2
    np.testing.assert_array_equal(gr.constants["c"], np.full((2, 3), 5, np.float32))
    assert gr.constants["s"] == 7 and gr.constants["s"].dtype == np.int64
    assert gr.value_info["c"].shape == (2, 3)


def test_ir3_initializers_listed_as_inputs_are_constants(tmp_path):
    m = mlp_model(opset=8, ir_version=3)
    m.graph.input.extend([vi("w", [4, 3]), vi("b", [3])])
    g = load_model(save(m, tmp_path / "ir3.onnx"))
    assert g.ir_version == 3
    assert [i.name for i in g.inputs] == ["x"]
    assert set(g.constants) == {"w", "b"}


def test_model_local_function_is_inlined():
    f = helper.make_function(
        "local.fn", "MyAct", ["a"], ["b"],
        [helper.make_node("Relu", ["a"], ["t"]), helper.make_node("Neg", ["t"], ["b"])],
        [helper.make_opsetid("", OPSET)],
    )
    g = helper.make_graph(
        [helper.make_node("MyAct", ["x"], ["y"], domain="local.fn", name="act")],
        "g", [vi("x", ["N", 4])], [vi("y", ["N", 4])],
    )
    m = helper.make_model(
        g,
        opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid("local.fn", 1)],
        functions=[f],
    )
    gr = load_model_proto(m)
    assert [n.op_type for n in gr.nodes] == ["Relu", "Neg"]
    assert gr.nodes[1].outputs == ["y"]
    assert gr.value_info[gr.nodes[0].outputs[0]].shape == ("N", 4)


def test_function_with_mismatched_opset_is_refused():
    f = helper.make_function(
        "local.fn", "MyAct", ["a"], ["b"], [helper.make_node("Relu", ["a"], ["b"])],
        [helper.make_opsetid("", 14)],
    )
    g = helper.make_graph(
        [helper.make_node("MyAct", ["x"], ["y"], domain="local.fn", name="act")],
        "g", [vi("x", [4])], [vi("y", [4])],
    )
    m = helper.make_model(
        g,
        opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid("local.fn", 1)],
        functions=[f],
    )
    raises(load_model_proto, m, must_contain=("act", "MyAct", "14", "13"))


def test_custom_domain_since_version_1():
    nodes = [
        helper.make_node(
            "Quant", ["x", "s", "z", "bw"], ["y"], name="q", domain="qonnx.custom_op.general",
            rounding_mode="ROUND", signed=1, narrow=0,
        )
    ]
    inits = [
        numpy_helper.from_array(np.float32(v), n)
        for n, v in (("s", 0.5), ("z", 0.0), ("bw", 8.0))
    ]
    g = helper.make_graph(nodes, "g", [vi("x", [1, 4])], [vi("y", [1, 4])], inits)
    m = helper.make_model(
        g,
        opset_imports=[
            helper.make_opsetid("", OPSET),
            helper.make_opsetid("qonnx.custom_op.general", 2),
        ],
    )
    gr = load_model_proto(m)
    q = gr.nodes[0]
    assert (q.domain, q.since_version, q.opset_version) == ("qonnx.custom_op.general", 1, 2)
    assert q.attrs["rounding_mode"] == "ROUND"


# ----------------------------------------------------------------- external data


def external_model(location: str) -> onnx.ModelProto:
    m = mlp_model()
    w = m.graph.initializer[0]
    onnx.external_data_helper.set_external_data(w, location=location)
    w.data_location = TensorProto.EXTERNAL
    w.ClearField("raw_data")
    return m


W_BYTES = np.arange(12, dtype=np.float32).reshape(4, 3).tobytes()


def test_external_data_inside_folder_loads(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "w.bin").write_bytes(W_BYTES)
    path = save(external_model("data/w.bin"), tmp_path / "ext.onnx")
    g = load_model(path)
    np.testing.assert_array_equal(g.constants["w"], np.arange(12, dtype=np.float32).reshape(4, 3))


def test_external_data_parent_dir_refused(tmp_path):
    sub = tmp_path / "model"
    sub.mkdir()
    (tmp_path / "x.bin").write_bytes(W_BYTES)
    path = save(external_model("../x.bin"), sub / "m.onnx")
    msg = raises(load_model, path, must_contain=("'w'", "../x.bin", path))
    assert ".." in msg


def test_external_data_absolute_path_refused(tmp_path):
    target = tmp_path / "abs.bin"
    target.write_bytes(W_BYTES)
    path = save(external_model(str(target)), tmp_path / "m.onnx")
    raises(load_model, path, must_contain=("'w'", str(target), "absolute"))


def test_external_data_symlink_outside_refused(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "w.bin").write_bytes(W_BYTES)
    sub = tmp_path / "model"
    sub.mkdir()
    os.symlink(outside / "w.bin", sub / "w.bin")
    path = save(external_model("w.bin"), sub / "m.onnx")
    raises(load_model, path, must_contain=("'w'", "w.bin", "outside"))


def test_external_data_missing_file(tmp_path):
    path = save(external_model("nope.bin"), tmp_path / "m.onnx")
    raises(load_model, path, must_contain=("'w'", "nope.bin", "not found"))


def test_external_data_wrong_size(tmp_path):
    (tmp_path / "w.bin").write_bytes(W_BYTES[:20])
    path = save(external_model("w.bin"), tmp_path / "m.onnx")
    raises(load_model, path, must_contain=("'w'", "w.bin", "20 bytes", "48"))


def test_external_data_in_memory_without_base_dir():
    raises(load_model_proto, external_model("w.bin"), must_contain=("'w'", "base directory"))


# ------------------------------------------------------------------- bad files


def test_missing_file(tmp_path):
    p = str(tmp_path / "nothere.onnx")
    raises(load_model, p, must_contain=(p, "not found"))


def test_directory(tmp_path):
    raises(load_model, str(tmp_path), must_contain=(str(tmp_path), "directory"))


def test_text_file(tmp_path):
    p = tmp_path / "readme.onnx"
    p.write_text("This is not an ONNX model.\nJust some text.\n")
    raises(load_model, str(p), must_contain=(str(p), "not"))


def test_random_bytes(tmp_path):
    p = tmp_path / "random.onnx"
    p.write_bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    raises(load_model, str(p), must_contain=(str(p), "not"))


def test_empty_file(tmp_path):
    p = tmp_path / "empty.onnx"
    p.write_bytes(b"")
    raises(load_model, str(p), must_contain=(str(p), "empty"))


def test_truncated_file(tmp_path):
    data = mlp_model(big=True).SerializeToString()
    p = tmp_path / "cut.onnx"
    p.write_bytes(data[: len(data) // 2])
    raises(load_model, str(p), must_contain=(str(p), "truncated"))


def test_bytes_parsing_as_empty_model(tmp_path):
    # protobuf happily parses some garbage (here: just field 1 = ir_version 7)
    p = tmp_path / "tiny.onnx"
    p.write_bytes(b"\x08\x07")
    raises(load_model, str(p), must_contain=(str(p), "not an ONNX model", "no graph"))


def test_input_without_shape():
    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g", [vi("x", None)], [vi("y", [4])]
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)])
    raises(load_model_proto, m, must_contain=("input 'x'", "no shape"))


def test_ml_domain_since_version():
    g = helper.make_graph(
        [helper.make_node("Normalizer", ["x"], ["y"], domain="ai.onnx.ml", norm="MAX", name="nrm")],
        "g", [vi("x", [2, 4])], [vi("y", [2, 4])],
    )
    m = helper.make_model(
        g, opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid("ai.onnx.ml", 3)]
    )
    n = load_model_proto(m).nodes[0]
    expected = onnx.defs.get_schema(
        "Normalizer", max_inclusive_version=3, domain="ai.onnx.ml"
    ).since_version
    assert (n.domain, n.since_version, n.opset_version) == ("ai.onnx.ml", expected, 3)


def test_empty_model_proto():
    raises(load_model_proto, onnx.ModelProto(), must_contain=("not an ONNX model",))


# -------------------------------------------------------------------- versions


def test_ir_version_too_new(tmp_path):
    p = save(mlp_model(ir_version=MAX_IR_VERSION + 1), tmp_path / "new.onnx")
    raises(
        load_model, p,
        must_contain=(p, f"IR version {MAX_IR_VERSION + 1}", f"3..{onnx.IR_VERSION}"),
    )


def test_ir_version_too_old():
    raises(
        load_model_proto, mlp_model(ir_version=2),
        must_contain=("IR version 2", f"3..{onnx.IR_VERSION}"),
    )


def test_opset_too_new():
    newest = onnx.defs.onnx_opset_version()
    raises(
        load_model_proto, mlp_model(opset=newest + 1),
        must_contain=(f"opset {newest + 1}", str(newest), "ai.onnx"),
    )


def test_unknown_op():
    m = mlp_model()
    m.graph.node[2].op_type = "Frobnicate"
    raises(load_model_proto, m, must_contain=("relu", "Frobnicate", "ai.onnx", "opset 13"))


def test_op_newer_than_model_opset():
    m = mlp_model()
    m.graph.node[2].op_type = "Gelu"
    since = onnx.defs.get_schema("Gelu", domain="").since_version
    raises(load_model_proto, m, must_contain=("relu", "Gelu", "opset 13", f"opset {since}"))


def test_unimported_domain():
    m = mlp_model()
    m.graph.node[2].domain = "com.microsoft"
    raises(load_model_proto, m, must_contain=("relu", "Relu", "com.microsoft", "opset_import"))


def test_conflicting_default_domain_imports():
    m = mlp_model()
    m.opset_import.append(helper.make_opsetid("ai.onnx", 14))
    raises(load_model_proto, m, must_contain=("13", "14", "ai.onnx"))


# ----------------------------------------------------------------- graph checks


def test_value_defined_twice():
    m = mlp_model()
    m.graph.node[1].output[0] = "m"  # Add now also defines 'm'
    raises(load_model_proto, m, must_contain=("'m'", "mm", "add", "twice"))


def test_node_output_shadows_initializer():
    m = mlp_model()
    m.graph.node[2].output[0] = "b"
    raises(load_model_proto, m, must_contain=("'b'", "initializer", "relu"))


def test_cycle():
    nodes = [
        helper.make_node("Relu", ["x", ], ["a"], name="r0"),
        helper.make_node("Add", ["a", "c"], ["b"], name="r1"),
        helper.make_node("Relu", ["b"], ["c"], name="r2"),
        helper.make_node("Relu", ["c"], ["y"], name="r3"),
    ]
    g = helper.make_graph(nodes, "g", [vi("x", [4])], [vi("y", [4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)])
    msg = raises(load_model_proto, m, must_contain=("cycle", "r1", "r2", "'c'"))
    assert "r0" not in msg


def test_self_loop():
    nodes = [
        helper.make_node("Add", ["x", "a"], ["a"], name="acc"),
        helper.make_node("Relu", ["a"], ["y"]),
    ]
    g = helper.make_graph(nodes, "g", [vi("x", [4])], [vi("y", [4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)])
    raises(load_model_proto, m, must_contain=("cycle", "acc", "'a'"))


def test_not_topologically_sorted():
    m = mlp_model()
    nodes = list(m.graph.node)
    del m.graph.node[:]
    m.graph.node.extend([nodes[1], nodes[0], nodes[2]])
    msg = raises(load_model_proto, m, must_contain=("add", "'m'", "mm", "topological"))
    assert "cycle" not in msg


def test_missing_initializer():
    m = mlp_model()
    del m.graph.initializer[1]  # 'b'
    raises(load_model_proto, m, must_contain=("add", "'b'", "not defined"))


def test_undefined_graph_output():
    m = mlp_model()
    m.graph.output[0].name = "zzz"
    raises(load_model_proto, m, must_contain=("'zzz'", "output"))


def test_checker_error_is_one_line():
    m = mlp_model()
    m.graph.node[0].attribute.append(helper.make_attribute("bogus", 1))
    raises(load_model_proto, m, must_contain=("checker", "bogus"))


def test_shape_inference_error_is_one_line():
    m = mlp_model()
    m.graph.output[0].type.tensor_type.shape.dim[1].dim_value = 5  # inferred is 3
    raises(load_model_proto, m, must_contain=("shape inference",))


# --------------------------------------------------------------------- registry


def _node(op="Gemm", domain="", since=13, name="g1"):
    return Node(name=name, op_type=op, domain=domain, since_version=since, opset_version=since,
                inputs=[], outputs=[], attrs={}, index=3)


def test_registry_lookup_and_errors():
    reg = OpRegistry()

    @reg.register("ai.onnx", "Gemm", 13)
    def gemm13(node):
        return "gemm13"

    @reg.register("", "Gemm", 11)
    def gemm11(node):
        return "gemm11"

    assert reg.lookup(_node()) is gemm13
    assert reg.lookup(_node(domain="ai.onnx", since=11)) is gemm11
    assert reg.find(_node(since=9)) is None
    assert reg.supported() == [("", "Gemm", 11), ("", "Gemm", 13)]
    assert ("ai.onnx", "Gemm", 13) in reg
    msg = raises(
        reg.lookup, _node(since=9),
        must_contain=("g1", "Gemm", "ai.onnx", "since_version 9", "11, 13"),
    )
    assert "\n" not in msg
    raises(reg.lookup, _node(op="Foo", name=""), must_contain=("#3 (Foo)", "Foo", "not supported"))
    with pytest.raises(ValueError):
        reg.register("", "Gemm", 13)(gemm13)


def test_registry_with_loaded_model():
    reg = OpRegistry()
    for op in ("MatMul", "Add"):
        v = onnx.defs.get_schema(op, max_inclusive_version=OPSET, domain="").since_version
        reg.register("", op, v)(lambda node: node.op_type)
    g = load_model_proto(mlp_model())
    assert [reg.lookup(n)(n) for n in g.nodes[:2]] == ["MatMul", "Add"]
    relu_v = onnx.defs.get_schema("Relu", max_inclusive_version=OPSET, domain="").since_version
    raises(
        reg.lookup, g.nodes[2],
        must_contain=("relu", "Relu", f"since_version {relu_v}", "not supported"),
    )
