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
from hwgen.dataflow.loader import QONNX_DOMAINS, Graph, Node
from hwgen.dataflow.registry import OpRegistry
from hwgen.dataflow.values import Const, check_stream_shape
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


_F32 = np.finfo(np.float32)


def scale_problem(a: np.ndarray) -> str | None:
    """Why ``a`` is not a valid quantization scale (every element a finite, positive float32
    normal number: zero, negative, NaN, infinite and subnormal scales give requantizers
    of no meaning or of absurd width), else None."""
    a = np.asarray(a)
    if a.size == 0:
        return "is empty"
    if a.dtype.kind != "f":
        return f"has type {a.dtype}, not a float type"
    with np.errstate(all="ignore"):
        v = a.astype(np.float64).reshape(-1)
        bad = ~(np.isfinite(v) & (v >= _F32.tiny) & (v <= _F32.max))
    if bad.any():
        x = float(v[int(np.argmax(bad))])
        what = "not finite" if not np.isfinite(x) else "not positive" if x <= 0 else \
            "below the smallest normal float32" if x < _F32.tiny else "beyond float32"
        return f"holds {x!r} ({what}); a scale must be a finite, positive, normal float32"
    return None


def zero_point_problem(a: np.ndarray, dtype: np.dtype | None) -> str | None:
    """Why ``a`` is not a valid zero point of integers of ``dtype`` (None: any integer
    type), else None."""
    a = np.asarray(a)
    if a.dtype.kind not in "iu":
        return f"has type {a.dtype}, not an integer type"
    if dtype is not None and a.dtype != np.dtype(dtype):
        return f"has type {a.dtype}, but the integers it belongs to are {np.dtype(dtype)}"
    return None


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

    def scale(self, node: Node, k: int, what: str = "scale") -> np.ndarray | None:
        """Constant input ``k`` of ``node``, a quantization scale, as float32; refused
        (naming the tensor) unless finite, positive and normal (:func:`scale_problem`)."""
        a = self.const(node, k, what)
        if a is None:
            return None
        why = scale_problem(a)
        if why is not None:
            raise Unsupported(f"{what} '{node.inputs[k]}' {why}")
        return np.asarray(a, np.float32)

    def zero_point(self, node: Node, k: int, dtype: np.dtype | None = None,
                   what: str = "zero point") -> np.ndarray | None:
        """Constant input ``k`` of ``node``, a zero point of integers of ``dtype``; refused
        (naming the tensor) unless of that integer type (:func:`zero_point_problem`)."""
        a = self.const(node, k, what)
        if a is None:
            return None
        why = zero_point_problem(a, dtype)
        if why is not None:
            raise Unsupported(f"{what} '{node.inputs[k]}' {why}")
        return a

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


def unquantized_input(ctx: ImportContext) -> Unsupported:
    """The refusal of a layer reading the float graph input that nothing quantized, with
    what the model's own format offers to quantize it."""
    if any(n.domain in QONNX_DOMAINS for n in ctx.graph.nodes):
        how = ("put a Quant on the input, or declare its datatype with a finn_datatype "
               "quantization annotation on the graph input (INT8, UINT8, BINARY, BIPOLAR, ...)")
    else:
        how = "quantize the model in QDQ format first (hwgen quantize)"
    return Unsupported(f"its input is a float tensor that no quantizer quantized: the model is "
                       f"not quantized here ({how})")


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
    if isinstance(t.shape[0], int) and t.shape[0] <= 0:
        raise HwgenError(f"graph {what} '{t.name}' has shape {list(t.shape)}: its batch axis "
                         f"holds no sample")
    if any(not isinstance(d, int) or d <= 0 for d in rest):
        raise HwgenError(f"graph {what} '{t.name}' has shape {list(t.shape)}: every axis but "
                         f"the first (batch) must be a fixed size")
    try:
        check_stream_shape(tuple(rest))
    except ValueError as e:
        raise HwgenError(f"graph {what} '{t.name}': {e}") from None
    return tuple(rest)
