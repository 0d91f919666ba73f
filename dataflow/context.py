"""What every import handler works with: the handler registry, the import context, the
``Unsupported`` refusal and small helpers shared by the ``ops_*`` modules.

This module is the bottom of the importer: the ``ops_*`` modules import from here (and from
each other, downwards), :mod:`dataflow.operators` imports every ``ops_*`` module (so that
their handlers are registered in :data:`REGISTRY`), and the walk (:mod:`dataflow.importer`)
imports the catalogue.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hwgen.dataflow.intgraph import IntGraph, QTensor
from hwgen.dataflow.loader import Graph, Node
from hwgen.dataflow.registry import OpRegistry
from hwgen.dataflow.values import Const
from hwgen.errors import HwgenError
from hwgen.rtl_templates.quant import QType

#: the handlers of every operator hwgen imports (filled by the ``ops_*`` modules; the
#: catalogue :mod:`dataflow.operators` imports them all)
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
    #: the walk quantizes pending values itself where a float model needs it (inspect)
    assume_quantized: bool = False

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


def check_attrs(node: Node, known: dict):
    """Refuse attributes this handler does not understand or values it does not map."""
    for name, value in node.attrs.items():
        if name not in known:
            raise Unsupported(f"attribute '{name}' is not supported")
        ok = known[name]
        if ok is not None and not ok(value):
            raise Unsupported(f"attribute {name}={value!r} is not supported")


def op_name(node: Node) -> str:
    """``domain::Op-version`` of a node, for messages."""
    dom = f"{node.domain}::" if node.domain else ""
    return f"{dom}{node.op_type}-{node.since_version}"


def sample_shape(t, what: str) -> tuple[int, ...]:
    """The per-sample shape of a graph input/output (batch axis dropped; the rest fixed)."""
    if t.shape is None or len(t.shape) == 0:
        raise HwgenError(f"graph {what} '{t.name}' has no known shape")
    rest = t.shape[1:]
    if any(not isinstance(d, int) or d <= 0 for d in rest):
        raise HwgenError(f"graph {what} '{t.name}' has shape {list(t.shape)}: every axis but "
                         f"the first (batch) must be a fixed size")
    return tuple(rest)
