"""The host tail: cheap float ops after the model's last quantized tensor, run on the host.

Classifier heads end in float ops that hardware gains nothing from: a Softmax or LogSoftmax,
the last layer's float rescale and bias (a Brevitas layer with no output quantizer),
ArgMax/TopK, element-wise arithmetic by constants, transposes and reshapes. When the model
does not map with these in hardware, the walk (:mod:`dataflow.importer`) cuts the graph
before them: the hardware computes the *cut* tensor exactly, and the host runs the rest in
onnxruntime's CPU kernels, on the cut's float values.

The tail is the shortest run of such ops at the end of the graph that makes the rest map
(:func:`candidates` gives the cuts, shortest first). It is a chain: each tail node reads one
streamed tensor (its other inputs are constants) and its output is read by the next tail node
only. The tail is kept as a small ONNX model (:func:`tail_model`): its input is the cut
tensor, its output the graph output; a design folder stores it, and ``simulate``, ``verify``
and ``run`` apply it (:func:`run_tail`).

A cut at a layer's accumulator (a product whose result the model never quantizes) streams
the exact integer accumulator; its real value is the accumulator times a scale per output
channel (``IntGraph.output_scale``), which the host applies before the tail.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from hwgen.dataflow.loader import Graph, Node, TensorInfo

#: ops the host runs after the hardware (float ops whose other inputs are constants)
HOST_OPS = frozenset({
    "Softmax", "LogSoftmax", "ArgMax", "ArgMin", "TopK", "Sigmoid", "Tanh",
    "Add", "Sub", "Mul", "Div", "Transpose", "Reshape", "Flatten", "Squeeze", "Unsqueeze",
    "Identity", "Dropout", "Cast", "QuantizeLinear", "DequantizeLinear",
})
#: the most tail nodes tried
MAX_TAIL = 12
#: ops a tail does not consist of alone: a model whose quantization fails at its output (a
#: broken scale) is not mended by moving its quantizers to the host
PASSIVE = frozenset({"QuantizeLinear", "DequantizeLinear", "Identity", "Dropout"})


def _chain(graph: Graph) -> list[Node]:
    """The tail-able nodes at the end of the graph, last first: each one host-able, reading
    one non-constant tensor whose only reader it is."""
    if len(graph.outputs) != 1:
        return []
    producer = {o: n for n in graph.nodes for o in n.outputs if o}
    readers: dict[str, int] = {}
    for n in graph.nodes:
        for i in n.inputs:
            if i:
                readers[i] = readers.get(i, 0) + 1
    chain: list[Node] = []
    name = graph.outputs[0].name
    while len(chain) < MAX_TAIL:
        node = producer.get(name)
        if node is None or node.op_type not in HOST_OPS or node.domain != "":
            break
        if readers.get(name, 0) > (0 if name == graph.outputs[0].name else 1):
            break
        if any(o and o != name and readers.get(o) for o in node.outputs):
            break
        data = [i for i in node.inputs if i and i not in graph.constants]
        if len(data) != 1:
            break
        chain.append(node)
        name = data[0]
    return chain


def candidates(graph: Graph) -> list[tuple[Graph, list[Node]]]:
    """Each way to cut a host tail off ``graph``, the shortest tail first: (the graph that
    the hardware computes, whose one output is the cut tensor; the tail nodes in graph
    order)."""
    chain = _chain(graph)
    out = []
    for k in range(1, len(chain) + 1):
        if k < len(chain) and chain[k].op_type == "DequantizeLinear":
            # the tail takes the DequantizeLinear before it too: onnxruntime then runs the
            # tail as it runs it inside the model (DequantizeLinear → Softmax →
            # QuantizeLinear fused into one integer kernel)
            continue
        tail = chain[:k][::-1]
        if all(n.op_type in PASSIVE for n in tail) or not all(
                np.all(np.isfinite(graph.constants[i])) for n in tail for i in n.inputs
                if i in graph.constants and graph.constants[i].dtype.kind == "f"):
            continue
        cut = next(i for i in tail[0].inputs if i and i not in graph.constants)
        if cut in {i.name for i in graph.inputs}:
            break
        info = graph.value_info.get(cut) or TensorInfo(cut, np.dtype(np.float32), None)
        labels = {n.label for n in tail}
        hw = dataclasses.replace(graph, nodes=[n for n in graph.nodes if n.label not in labels],
                                 outputs=[info])
        out.append((hw, tail))
    return out


def tail_model(graph: Graph, tail: list[Node], cut: str, cut_shape) -> bytes:
    """The tail as a serialized ONNX model: input ``cut`` ([N, *cut_shape], of the cut's
    element type: float32, or the integers of a quantized tensor), the tail's nodes and
    constants, output the graph output."""
    consts, nodes = [], []
    info = graph.value_info.get(cut)
    cut_type = helper.np_dtype_to_tensor_dtype(info.dtype) if info is not None and \
        info.dtype is not None else TensorProto.FLOAT
    for n in tail:
        for i in n.inputs:
            if i in graph.constants and i not in {c.name for c in consts}:
                consts.append(numpy_helper.from_array(np.asarray(graph.constants[i]), i))
        nodes.append(helper.make_node(n.op_type, n.inputs, n.outputs, name=n.name or None,
                                      **n.attrs))
    out = graph.outputs[0]
    elem = helper.np_dtype_to_tensor_dtype(out.dtype) if out.dtype is not None \
        else TensorProto.FLOAT
    g = helper.make_graph(
        nodes, "host_tail",
        [helper.make_tensor_value_info(cut, cut_type, ["N", *cut_shape])],
        [helper.make_tensor_value_info(out.name, elem, None)], consts)
    opset = graph.opsets.get("", 13)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)],
                          producer_name="hwgen")
    m.ir_version = min(m.ir_version, onnx.IR_VERSION)
    return m.SerializeToString()


def tail_nodes(tail_bytes: bytes) -> list[str]:
    """The op types of a stored tail, in order."""
    return [n.op_type for n in onnx.load_from_string(tail_bytes).graph.node]


def tail_output(tail_bytes: bytes) -> str:
    """The graph output a stored tail computes."""
    return onnx.load_from_string(tail_bytes).graph.output[0].name


def run_tail(tail_bytes: bytes, x: np.ndarray) -> np.ndarray:
    """The tail (a serialized model from :func:`tail_model`) on the cut's float values
    ``x`` [N, *cut_shape], with onnxruntime on the host's CPU (the kernels the reference
    runs, at the model's own opset)."""
    import onnxruntime as ort  # slow to import; only where a tail runs

    sess = ort.InferenceSession(tail_bytes, providers=["CPUExecutionProvider"])
    dtype = onnx.helper.tensor_dtype_to_np_dtype(
        onnx.load_from_string(tail_bytes).graph.input[0].type.tensor_type.elem_type)
    return np.asarray(sess.run(None, {sess.get_inputs()[0].name: np.asarray(x, dtype)})[0])
