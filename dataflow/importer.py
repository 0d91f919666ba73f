"""ONNX graph (loaded and validated) → integer graph.

The importer walks the nodes in topological order and asks the handler registered for each
node's (domain, op_type, since_version) to turn the abstract values of its inputs
(``dataflow.values``) into values for its outputs. Handlers live in ``dataflow/ops_*.py``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hwgen.dataflow.intgraph import IntGraph, QTensor
from hwgen.dataflow.loader import Graph, Node
from hwgen.rtl_templates.quant import QType
from hwgen.dataflow.registry import OpRegistry
from hwgen.dataflow.values import Const, Deq, FloatInput, Int, channel_last_order
from hwgen.errors import HwgenError

REGISTRY = OpRegistry()

#: ONNX element types an integer tensor may have, by numpy dtype
INT_TYPES = {np.dtype(np.int8): QType(8, True), np.dtype(np.uint8): QType(8, False),
             np.dtype(np.int16): QType(16, True), np.dtype(np.uint16): QType(16, False)}


class Unsupported(Exception):
    """Raised by a handler: the node is valid ONNX but cannot be mapped (reason inside)."""


@dataclass
class ImportContext:
    graph: Graph
    ig: IntGraph
    values: dict = field(default_factory=dict)
    n_consumers: dict = field(default_factory=dict)

    def value(self, node: Node, k: int, what: str = "input"):
        name = node.inputs[k] if k < len(node.inputs) else ""
        if not name:
            return None
        return self.values[name]

    def const(self, node: Node, k: int, what: str) -> np.ndarray | None:
        v = self.value(node, k)
        if v is None:
            return None
        if not isinstance(v, Const):
            raise Unsupported(f"its {what} must be a constant")
        return v.array

    def new_tensor(self, base: str, shape, qtype: QType, scale: float, zp: int) -> str:
        name, k = base, 1
        while name in self.ig.tensors:
            k += 1
            name = f"{base}_{k}"
        self.ig.tensors[name] = QTensor(name, tuple(int(d) for d in shape), qtype,
                                        float(scale), int(zp))
        return name

    def set(self, node: Node, value, k: int = 0):
        self.values[node.outputs[k]] = value


def to_int_graph(graph: Graph, collect: bool = False, assume_quantized: bool = False):
    """Build the integer graph; unmappable nodes raise HwgenError naming node, op and reason.

    ``collect=True`` records every problem instead and returns ``(IntGraph, ImportReport)``;
    ``assume_quantized=True`` reads a float model as if quantized to 8 bits (for estimates).
    Both are the inspection modes of :mod:`dataflow.survey`."""
    from hwgen.dataflow import (ops_conv, ops_fold, ops_join, ops_linear, ops_pool,  # noqa: F401
                          ops_qdq, ops_qonnx, ops_qop, ops_shape)  # (registers the handlers)

    if collect or assume_quantized:
        from hwgen.dataflow.survey import survey
        return survey(graph, collect=collect, assume_quantized=assume_quantized)

    if len(graph.inputs) != 1:
        raise HwgenError(f"model has {len(graph.inputs)} graph inputs; hwgen maps models with "
                         f"exactly one input")
    if len(graph.outputs) != 1:
        raise HwgenError(f"model has {len(graph.outputs)} graph outputs; hwgen maps models "
                         f"with exactly one output")
    ctx = ImportContext(graph, IntGraph(tensors={}))
    for node in graph.nodes:
        for name in node.inputs:
            if name:
                ctx.n_consumers[name] = ctx.n_consumers.get(name, 0) + 1
    for name, arr in graph.constants.items():
        ctx.values[name] = Const(np.asarray(arr))
    inp = graph.inputs[0]
    if inp.dtype is None or inp.dtype.kind != "f":
        raise HwgenError(f"graph input '{inp.name}' has element type {inp.dtype}; hwgen expects "
                         f"a float input that the model quantizes with QuantizeLinear")
    shape = _sample_shape(inp, "input")
    ctx.values[inp.name] = FloatInput(inp.name, shape, channel_last_order(shape))
    ctx.ig.onnx_input = inp.name

    for node in graph.nodes:
        handler = REGISTRY.lookup(node)  # HwgenError if (domain, op, version) is unknown
        try:
            handler(ctx, node)
        except Unsupported as e:
            raise HwgenError(f"node {node.label} ({_op_name(node)}): {e}") from None
        except (ValueError, KeyError) as e:
            raise HwgenError(f"node {node.label} ({_op_name(node)}): {e}") from None

    out = graph.outputs[0]
    v = ctx.values.get(out.name)
    if isinstance(v, (Deq, Int)):
        ctx.ig.output = v.tensor
        ctx.ig.output_dequantized = isinstance(v, Deq)
        ctx.ig.output_order = v.order
    else:
        raise HwgenError(f"graph output '{out.name}' is not a quantized tensor (it is "
                         f"{type(v).__name__}); hwgen needs the model's output to come from "
                         f"QuantizeLinear/DequantizeLinear")
    ctx.ig.onnx_output = out.name
    if not ctx.ig.input:
        raise HwgenError(f"graph input '{inp.name}' never reaches a QuantizeLinear")
    if not ctx.ig.ops:
        raise HwgenError("the model has no layer hwgen can map to hardware (no quantized "
                         "Gemm/MatMul/Conv)")
    return ctx.ig


def _op_name(node: Node) -> str:
    dom = f"{node.domain}::" if node.domain else ""
    return f"{dom}{node.op_type}-{node.since_version}"


def _sample_shape(t, what: str) -> tuple[int, ...]:
    if t.shape is None or len(t.shape) == 0:
        raise HwgenError(f"graph {what} '{t.name}' has no known shape")
    rest = t.shape[1:]
    if any(not isinstance(d, int) or d <= 0 for d in rest):
        raise HwgenError(f"graph {what} '{t.name}' has shape {list(t.shape)}: every axis but "
                         f"the first (batch) must be a fixed size")
    return tuple(rest)
