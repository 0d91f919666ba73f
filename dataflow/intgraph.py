"""The integer graph: what the quantized ONNX model computes, in exact integers.

Tensors carry an integer element type plus the scale and zero point that relate them to the
real values of the ONNX model (``real = (q - zero_point) * scale``). Operators are typed
dataclasses; their integer semantics live with their hardware block in ``rtl_templates``.
Shapes are per sample (no batch axis): the hardware handles one sample per frame.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from dataflow.quant import QType, Requant


@dataclass
class QTensor:
    name: str
    shape: tuple[int, ...]
    qtype: QType
    scale: float
    zero_point: int

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def quantize(self, x: np.ndarray) -> np.ndarray:
        """ONNX QuantizeLinear of float ``x`` (float32 arithmetic, round half to even)."""
        y = np.rint(np.asarray(x, dtype=np.float32) / np.float32(self.scale))
        y = y.astype(np.int64) + self.zero_point
        return np.clip(y, self.qtype.lo, self.qtype.hi)

    def dequantize(self, q: np.ndarray) -> np.ndarray:
        """ONNX DequantizeLinear of integer ``q`` (float32)."""
        return ((np.asarray(q, dtype=np.int64) - self.zero_point).astype(np.float32)
                * np.float32(self.scale))


@dataclass
class MatVec:
    """``out = requant(weights @ in + bias)``: Gemm / MatMul (+ Add) (+ Relu) + QuantizeLinear."""
    name: str                 # the ONNX node of the product (Gemm/MatMul): the layer's name
    nodes: list[str]          # every ONNX node folded into it
    input: str
    output: str
    weights: np.ndarray       # [MH, MW] int64, weight zero point subtracted
    bias: np.ndarray          # [MH] int64, input zero point folded in
    requant: Requant


@dataclass
class IntGraph:
    tensors: dict[str, QTensor]
    ops: list = field(default_factory=list)
    input: str = ""
    output: str = ""
    onnx_input: str = ""      # the ONNX graph input the integer input quantizes
    onnx_output: str = ""     # the ONNX graph output the integer output dequantizes to
    output_dequantized: bool = True  # ONNX returns floats (DequantizeLinear) or the integers
    # stream order of the graph input / output: entry k is the row-major flat index (ONNX
    # order, batch axis dropped) of the k-th element on the stream; None = row-major
    input_order: np.ndarray | None = None
    output_order: np.ndarray | None = None

    def to_stream(self, x_flat: np.ndarray) -> np.ndarray:
        """[N, elements] in ONNX order → stream order of the input."""
        return x_flat if self.input_order is None else x_flat[:, self.input_order]

    def from_stream(self, y: np.ndarray) -> np.ndarray:
        """[N, elements] in the output's stream order → ONNX order."""
        if self.output_order is None:
            return y
        out = np.empty_like(y)
        out[:, self.output_order] = y
        return out

    def producer(self, tensor: str):
        for op in self.ops:
            if op.output == tensor:
                return op
        return None

    def consumers(self, tensor: str) -> list:
        return [op for op in self.ops if tensor in op_inputs(op)]


def op_inputs(op) -> list[str]:
    return [op.input]
