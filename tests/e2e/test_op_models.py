"""Per-operator models from PyTorch, end to end: both exporters, both quantized formats.

``examples/ops/export_ops.py`` builds five small PyTorch models that together use every
operator below, exports each with the TorchScript exporter (``dynamo=False``) and the new one
(``dynamo=True``), and quantizes each export with onnxruntime (``hwgen.quantize``: QDQ and
QOperator), eighteen files in all (``examples/ops/NAME_{ts,dynamo}_{qdq,qop}.onnx``,
``gelu_ts17_{qdq,qop}.onnx``):

* ``acts``: LeakyRelu, Sigmoid, Tanh, HardSwish, HardSigmoid, SiLU (Sigmoid · x), GELU, each
  after a convolution (lookup tables);
* ``convs``: grouped, dilated and depthwise (channel multiplier 2) convolutions,
  BatchNormalization after a ReLU and after a MaxPool (of its own), explicit zero and
  constant Pad, MaxPool with ceil_mode, ArgMax as the graph output;
* ``joins``: nearest Upsample by 2 (to a size computed from the input's shape), Concat of
  three maps, squeeze-and-excitation (the map times a gate expanded to its shape, plus and
  minus per-channel vectors broadcast over H×W);
* ``seq1d``: Conv1d, MaxPool1d, a dilated Conv1d, AvgPool1d;
* ``gelu``: GELU between two convolutions, TorchScript exporter at opset 17 only (as
  ``examples/export_both.py`` exports): Div, Erf, Add and Mul instead of one Gelu op.

For every file: it maps, each operator it is meant to cover is in it, and the golden model
agrees with onnxruntime (≥ 99.9 % of the output elements identical, none more than one step
apart; the table activations: 100 %), at the output and at every layer (measured: 100 % of
the elements of every layer of every file, 64 frames). Both exporters' forms map to the same
integer graph. The RTL equals the golden model (np.array_equal) in Verilator once per distinct
integer graph and in Amaranth's simulator on the smallest design. Needs neither torch nor the
script.

The AvgPool1d has kernel 3: with an even divisor onnxruntime's QDQ form runs AveragePool in
float32 on dequantized values (its optimized session does not fuse it), so an exact tie
(``(a + b) / 2`` with ``a + b`` odd: half of all outputs when the pooling keeps its input's
scale, as the QDQ form does) lands a float rounding error beside the tie and rounds either
way, where hwgen's exact sum rounds half to even (as onnxruntime's QLinearAveragePool
does); ``test_cnn_ops`` measures that case.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from conftest import golden_vs_onnxruntime
from onnx import numpy_helper

import hwgen
from hwgen.dataflow import golden
from hwgen.dataflow.importer import load_model, load_model_proto, to_int_graph, walk
from hwgen.dataflow.intgraph import canonical_close
from hwgen.dataflow.ops_table import TableOp
from hwgen.errors import HwgenError
from hwgen.reference import layer_agreement

OPS = Path(__file__).resolve().parents[2] / "examples" / "ops"
MODELS = ("acts", "convs", "joins", "seq1d")          # both exporters
EXPORTERS = ("ts", "dynamo")
FORMATS = ("qdq", "qop")
# GELU as the TorchScript exporter writes it at opset 17: Div, Erf, Add, Mul, Mul
GELU17 = [f"gelu_ts17_{f}" for f in FORMATS]
FILES = [f"{m}_{e}_{f}" for m in MODELS for e in EXPORTERS for f in FORMATS] + GELU17
EXTRA_FRAMES = 48          # seeded inputs beyond the committed test frames, same distribution

# what each model must contain, in every one of its four files (see ``features``)
COVERS = {
    "acts": {"LeakyRelu", "Sigmoid", "Tanh", "HardSwish", "HardSigmoid", "SiLU", "Gelu"},
    "convs": {"Conv:grouped", "Conv:dilated", "Conv:depthwise-multiplier",
              "Pad:zero", "Pad:constant", "MaxPool:ceil", "BatchNormalization:after-relu",
              "BatchNormalization:after-maxpool", "ArgMax:output"},
    "joins": {"Resize:nearest", "Concat:3", "Mul:broadcast", "Add:broadcast",
              "Sub:broadcast", "Expand", "Shape"},
    "seq1d": {"Conv:1d", "Conv:1d-dilated", "MaxPool:1d", "AveragePool:1d"},
    "gelu": {"Div", "Erf", "Add", "Mul"},
}
# the new exporter writes a zero F.pad before a convolution as the convolution's own pads (no
# Pad node): the integer graph is the same (test_both_exporters_give_the_same_integer_graph)
DYNAMO_FOLDS = {"Pad:zero"}
# table activations in the integer graph of "acts": its seven activations (SiLU, HardSwish:
# x · f(x) is one table)
ACTS_TABLES = 7

# exporters: the TorchScript export reads a global average pool as GlobalAveragePool, the new
# one as ReduceMean; onnxruntime's calibration of the squeeze-and-excitation mean then sees
# float32 means that differ in the last bit, and so does one scale (canonical_close)
EXPORTERS_EXACT = {"acts": True, "convs": True, "joins": False, "seq1d": True}
# formats: onnxruntime's QDQ and QOperator quantizers give the same integer graph where their
# rules agree (acts, joins). They do not for
# * convs: the QDQ form quantizes a BatchNormalization's scale and bias (int8 / int32
#   behind DequantizeLinear), the QOperator form has no QLinear kernel for it and keeps it in
#   float with its float parameters: two different per-channel affine maps;
# * seq1d: the QDQ form gives AveragePool's output its input's scale and zero point, the
#   QOperator form (QLinearAveragePool) a calibrated scale of its own.
FORMATS_SAME = {"acts": True, "convs": False, "joins": True, "seq1d": False, "gelu": True}
# one file per distinct integer graph for the RTL (both exporters among them)
RTL_FILES = ["acts_dynamo_qdq", "convs_ts_qdq", "convs_dynamo_qop", "joins_ts_qop",
             "seq1d_dynamo_qdq", "seq1d_ts_qop"]
RTL_FRAMES = 2
AMARANTH_FILES = ["gelu_ts17_qop"]


def path(name: str) -> Path:
    return OPS / f"{name}.onnx"


def int_graph(name: str):
    return to_int_graph(load_model(path(name)))


def inputs(model: str, extra: int = 0) -> np.ndarray:
    with np.load(OPS / f"{model}_test.npz") as z:
        x = z["input"].astype(np.float32)
    more = np.random.default_rng(100).uniform(-1, 1, (extra,) + x.shape[1:]).astype(np.float32)
    return np.concatenate([x, more])


def _attr(node: onnx.NodeProto, name: str, default=None):
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def _pad_value(pad: onnx.NodeProto, consts: dict, producer: dict) -> float:
    """The real value a Pad pads with: a float constant behind a DequantizeLinear (QDQ), or
    an integer constant at its data's quantization (QOperator: the QLinearConv writing the
    data gives its zero point and scale)."""
    value = pad.input[2] if len(pad.input) > 2 else ""
    if not value:
        return 0.0
    if value not in consts:                          # QDQ: DequantizeLinear of a constant
        dq = producer[value]
        q, s, z = (consts[t] for t in dq.input)
        return float((int(q) - int(z)) * s)
    conv = producer[pad.input[0]]                    # QOperator: QLinearConv's output params
    s, z = consts[conv.input[6]], consts[conv.input[7]]
    return float((int(consts[value]) - int(z)) * s)


def tensor_shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    """Every tensor's shape for one input frame, as onnxruntime computes it (ONNX shape
    inference knows no com.microsoft QLinear ops)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    names = [o for n in m.graph.node for o in n.output if o]
    del m.graph.output[:]
    m.graph.output.extend(onnx.helper.make_empty_tensor_value_info(o) for o in names)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    inp = sess.get_inputs()[0]
    x = np.zeros([1] + [int(d) for d in inp.shape[1:]], np.float32)
    shapes = {k: v.shape for k, v in zip(names, sess.run(None, {inp.name: x}))}
    return shapes | {t.name: t.dims for t in model.graph.initializer}


def features(model: onnx.ModelProto) -> set[str]:
    """The operators a quantized model uses, as ``op`` or ``op:variant``, read from its ONNX
    nodes in either format (QLinearConv counts as Conv, QLinearConcat as Concat, …)."""
    g = model.graph
    consts = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    shapes = tensor_shapes(model)
    producer = {o: n for n in g.node for o in n.output}

    def source(t: str) -> onnx.NodeProto:
        """The op behind tensor t, through quantize/dequantize nodes."""
        n = producer.get(t)
        while n is not None and n.op_type in ("QuantizeLinear", "DequantizeLinear"):
            n = producer.get(n.input[0])
        return n

    def unexpanded(t: str):
        """The shape of tensor t, or of the tensor an Expand (behind Q/DQ) broadcast to it."""
        n = source(t)
        return shapes.get(n.input[0] if n is not None and n.op_type == "Expand" else t)

    out = set()
    outputs = {o.name for o in g.output}
    for n in g.node:
        op = n.op_type.removeprefix("QLinear")
        out.add(op)
        if op == "Conv":
            w = consts.get(n.input[3] if n.op_type == "QLinearConv" else n.input[1])
            if w is None:
                wp = producer.get(n.input[1])
                w = consts.get(wp.input[0]) if wp is not None else None
            group = _attr(n, "group", 1)
            dil = _attr(n, "dilations", [1])
            if w.ndim == 3:
                out.add("Conv:1d-dilated" if max(dil) > 1 else "Conv:1d")
            elif 1 < group and w.shape[1] == 1 and w.shape[0] > group:
                out.add("Conv:depthwise-multiplier")
            elif 1 < group:
                out.add("Conv:grouped")
            if w.ndim == 4 and max(dil) > 1:
                out.add("Conv:dilated")
        elif op == "Pad":
            out.add("Pad:zero" if _pad_value(n, consts, producer) == 0 else "Pad:constant")
        if op == "MaxPool":
            if _attr(n, "ceil_mode", 0):
                out.add("MaxPool:ceil")
            if len(_attr(n, "kernel_shape")) == 1:
                out.add("MaxPool:1d")
        elif op == "AveragePool" and len(_attr(n, "kernel_shape")) == 1:
            out.add("AveragePool:1d")
        elif op == "BatchNormalization":
            # onnxruntime's pre-processing folds a BatchNormalization that reads a Conv into
            # it: one still reading a Conv had a ReLU between them, which the quantizer
            # absorbed into the Conv's output range
            src = source(n.input[0]).op_type.removeprefix("QLinear")
            after = "relu" if src in ("Conv", "Relu") else src.lower()
            out.add(f"BatchNormalization:after-{after}")
        elif op == "ArgMax" and n.output[0] in outputs:
            out.add("ArgMax:output")
        elif op == "Resize" and _attr(n, "mode", b"nearest") == b"nearest":
            out.add("Resize:nearest")
        elif op == "Concat":
            k = len(n.input) if n.op_type == "Concat" else (len(n.input) - 2) // 3
            out.add(f"Concat:{k}")
        if op == "Mul":                  # x · f(x): SiLU, and HardSwish as ORT splits it
            a, b = (source(t) for t in (n.input[0], n.input[1] if n.op_type == "Mul"
                                          else n.input[3]))
            for x, f in ((a, b), (b, a)):
                kind = f.op_type.removeprefix("QLinear") if f is not None else None
                if kind in ("Sigmoid", "HardSigmoid") and source(f.input[0]) is x:
                    out.add("SiLU" if kind == "Sigmoid" else "HardSwish")
        if op in ("Mul", "Add", "Sub"):
            a, b = (n.input[0], n.input[1]) if n.op_type in ("Mul", "Add", "Sub") else \
                (n.input[0], n.input[3])
            sa, sb = (unexpanded(t) for t in (a, b))
            if sa is not None and sb is not None and len(sa) == len(sb) == 4 and \
                    sa[2:] != sb[2:] and 1 in (sa[2] * sa[3], sb[2] * sb[3]):
                out.add(f"{op}:broadcast")
    return out


def test_every_file_is_listed_and_small():
    assert sorted(p.stem for p in OPS.glob("*.onnx")) == sorted(FILES)
    for name in FILES:
        assert path(name).stat().st_size < 32_000, name


@pytest.mark.parametrize("name", FILES)
def test_file_covers_its_operators(name):
    model, exporter, _ = name.split("_")
    want = COVERS[model] - (DYNAMO_FOLDS if exporter == "dynamo" else set())
    if model == "gelu":     # no Gelu op: its arithmetic
        assert "Gelu" not in features(onnx.load(str(path(name))))
    missing = want - features(onnx.load(str(path(name))))
    assert not missing, f"{name} lacks {sorted(missing)}"


def golden_vs_ort(name: str, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(|golden − onnxruntime| per output element in output steps, golden outputs)."""
    return golden_vs_onnxruntime(int_graph(name), path(name), x)


@pytest.mark.parametrize("name", FILES)
def test_golden_matches_onnxruntime(name):
    model = name.split("_")[0]
    diff, y = golden_vs_ort(name, inputs(model, EXTRA_FRAMES))
    same = float(np.mean(diff == 0))
    assert diff.max() <= 1, f"{name}: up to {diff.max()} steps apart"
    assert same >= 0.999, f"{name}: {same:.4%} identical"
    if model == "acts":                  # tables hold onnxruntime's own values
        assert same == 1.0
        assert sum(isinstance(op, TableOp) for op in int_graph(name).ops) == ACTS_TABLES
    # not degenerate: the outputs take many values (ArgMax: several classes)
    assert len(np.unique(y)) >= (3 if model == "convs" else 64)


@pytest.mark.parametrize("name", FILES)
def test_every_layer_matches_onnxruntime(name):
    """Each layer's output against onnxruntime's value of the ONNX tensor holding it (the
    model run with those tensors as outputs): the ops before ArgMax are checked too."""
    x = inputs(name.split("_")[0], EXTRA_FRAMES)
    ig, walked = walk(load_model(path(name)))
    values = golden.run(ig, ig.quantize_input(x.reshape(x.shape[0], -1)))
    rep = layer_agreement(path(name), ig, walked.views, values, x)
    assert not rep.note and len(rep.layers) == len(ig.ops)
    tables = {op.name for op in ig.ops if isinstance(op, TableOp)}
    for r in rep.layers:
        assert not r.note, (r.layer, r.note)
        assert r.max_step_diff <= 1, (r.layer, r.diffs)
        assert r.identical_fraction >= (1.0 if r.layer in tables else 0.999), (r.layer, r.diffs)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("model", MODELS)
def test_both_exporters_give_the_same_integer_graph(model, fmt):
    ts, dyn = (f"{model}_{e}_{fmt}" for e in EXPORTERS)
    nodes = [[(n.name, n.op_type) for n in onnx.load(str(path(f))).graph.node]
             for f in (ts, dyn)]
    assert nodes[0] != nodes[1]                 # the ONNX graphs do differ
    a, b = int_graph(ts).canonical(), int_graph(dyn).canonical()
    assert (a == b) == EXPORTERS_EXACT[model]
    assert canonical_close(a, b)


@pytest.mark.parametrize("model", MODELS + ("gelu",))
def test_formats_agree_where_the_quantizers_do(model):
    tag = "ts17" if model == "gelu" else "ts"
    qdq, qop = (int_graph(f"{model}_{tag}_{f}") for f in FORMATS)
    assert [type(op) for op in qdq.ops] == [type(op) for op in qop.ops]
    assert canonical_close(qdq.canonical(), qop.canonical()) == FORMATS_SAME[model]


def test_rtl_files_cover_every_integer_graph():
    graphs = [int_graph(n).canonical() for n in RTL_FILES + AMARANTH_FILES]
    for name in FILES:
        c = int_graph(name).canonical()
        assert sum(canonical_close(c, g) for g in graphs) == 1, name


@pytest.mark.verilator
@pytest.mark.parametrize("name", RTL_FILES)
def test_rtl_equals_golden_verilator(name):
    """A slow folding keeps each design and its Verilator build small."""
    rep = hwgen.verify(path(name), inputs(name.split("_")[0])[:RTL_FRAMES],
                       simulator="verilator", target_cycles=4096)
    assert rep.ok and rep.golden_mismatched_samples == 0, name
    assert rep.ort_identical_fraction == 1.0 and rep.ort_max_step_diff == 0


@pytest.mark.sim
@pytest.mark.parametrize("name", ["seq1d_ts_qop"] + AMARANTH_FILES)
def test_rtl_equals_golden_amaranth(name):
    """Small designs in Amaranth's simulator, one frame, stalls on both streams (the opset 17
    GELU only here: its blocks are the tables and the product of two tensors that the
    Verilator designs hold too)."""
    rep = hwgen.verify(path(name), inputs(name.split("_")[0])[:1], simulator="amaranth",
                       target_cycles=4096, stall=0.2)
    assert rep.ok and rep.ort_identical_fraction == 1.0


def test_expand_read_other_than_by_broadcasting_is_refused():
    """An Expand maps only where its readers broadcast its input themselves: one whose
    quantized result is the graph output is refused in one line naming the node."""
    h, tp = onnx.helper, onnx.TensorProto
    nodes = [h.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             h.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             h.make_node("Expand", ["xd", "shape"], ["e"], name="widen"),
             h.make_node("QuantizeLinear", ["e", "s", "z"], ["y"])]
    inits = [numpy_helper.from_array(np.float32(0.1), "s"),
             numpy_helper.from_array(np.uint8(128), "z"),
             numpy_helper.from_array(np.array([1, 4, 2, 2], np.int64), "shape")]
    g = h.make_graph(nodes, "expand", [h.make_tensor_value_info("x", tp.FLOAT, [1, 4, 1, 1])],
                     [h.make_tensor_value_info("y", tp.UINT8, [1, 4, 2, 2])], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 20)])
    with pytest.raises(HwgenError, match=r"node widen \(Expand.*from \[4, 1, 1\] to "
                                         r"\[4, 2, 2\].*it is a graph output"):
        to_int_graph(load_model_proto(m))
