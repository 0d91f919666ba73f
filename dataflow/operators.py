"""The catalogue of operators hwgen imports: the one list of ``ops_*`` modules.

Importing this module imports every operator family, whose handlers register themselves in
:data:`dataflow.context.REGISTRY` (re-exported here as :data:`REGISTRY`) and whose integer ops
register by name (:func:`op_class`, re-exported: what reads a design folder back looks its
ops up here, where all of them are known). The walk
(:mod:`dataflow.importer`) imports it; nothing below it does. It also holds the one
definition of a *quantization op* (what makes a model quantized) and of a *float model*,
used by ``hwgen compile``, ``hwgen quantize`` and ``hwgen inspect`` alike.
"""
from __future__ import annotations

from hwgen.dataflow import (
    ops_affine,
    ops_argmax,
    ops_clip,
    ops_conv,
    ops_elementwise,
    ops_fold,
    ops_join,
    ops_linear,
    ops_pool,
    ops_qdq,
    ops_qonnx,
    ops_qop,
    ops_resize,
    ops_scalar,
    ops_shape,
    ops_table,
    ops_thresh,
)
from hwgen.dataflow.context import REGISTRY
from hwgen.dataflow.intgraph import op_class
from hwgen.dataflow.loader import Graph, Node
from hwgen.dataflow.ops_qonnx import annotated_input

#: every operator module, in dependency order (each imports only those before it)
MODULES = (ops_qdq, ops_join, ops_linear, ops_clip, ops_conv, ops_pool, ops_shape, ops_fold,
           ops_thresh, ops_qop, ops_qonnx, ops_table, ops_elementwise, ops_argmax,
           ops_affine, ops_resize, ops_scalar)

#: ai.onnx / com.microsoft ops whose presence makes a model quantized (besides every
#: ``QLinear*`` op and every op of a QONNX domain)
QUANT_OPS = frozenset({"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear",
                       "MatMulInteger", "ConvInteger", "QGemm", "QAttention",
                       "DynamicQuantizeMatMul"})
#: domains whose nodes (QONNX quantizers, :mod:`dataflow.ops_qonnx`) make a model quantized
QUANT_DOMAINS = frozenset(ops_qonnx.DOMAINS)


def is_quantization_op(node: Node) -> bool:
    """Whether ``node`` quantizes: QDQ, QOperator (``QLinear*``, onnxruntime's contrib
    ``Q*`` ops) or QONNX."""
    return (node.op_type in QUANT_OPS or node.op_type.startswith("QLinear")
            or node.domain in QUANT_DOMAINS
            or (node.domain == ops_qop.MS and node.op_type.startswith("Q")))


def quantized_node(graph: Graph) -> Node | None:
    """The first node of a loaded graph that belongs to a quantized model, or None."""
    return next((n for n in graph.nodes if is_quantization_op(n)), None)


def is_float_model(graph: Graph) -> bool:
    """A loaded graph with no quantization node and a float first input."""
    if quantized_node(graph) is not None or not graph.inputs:
        return False
    dt = graph.inputs[0].dtype
    return dt is not None and dt.kind == "f"


def handler_versions() -> dict[str, list[int]]:
    """(op_type → sorted since_versions) of hwgen's ai.onnx handlers: what the loader
    brings an old model forward for (``loader.load_model(handled=...)``)."""
    out: dict[str, list[int]] = {}
    for dom, op, v in REGISTRY.supported():
        if dom == "":
            out.setdefault(op, []).append(v)
    return out


__all__ = ["annotated_input", "op_class", "MODULES", "QUANT_DOMAINS", "QUANT_OPS", "REGISTRY",
           "handler_versions", "is_float_model", "is_quantization_op", "quantized_node"]
