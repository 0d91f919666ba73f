"""The integer graph: what the quantized ONNX model computes, in exact integers.

Tensors carry an integer element type plus the scale and zero point that relate them to the
real values of the ONNX model (``real = (q - zero_point) * scale``). Operators are typed
dataclasses registered with :func:`int_op`; each lives in its ``dataflow/ops_*.py`` module
with its fold space and its lowering to blocks, whose golden functions give its integer
semantics.
Shapes are per sample (no batch axis): the hardware handles one sample per frame.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields, is_dataclass

import numpy as np

from hwgen.rtl_templates.quant import QType
from hwgen.rtl_templates.xnor_mvau import is_bipolar

_OP_CLASSES: dict[str, type] = {}


def int_op(cls: type) -> type:
    """Class decorator: register an integer-graph op class under its name (the name the
    manifest records, so that a compiled design can be read back)."""
    if cls.__name__ in _OP_CLASSES:
        raise ValueError(f"integer op '{cls.__name__}' is already registered")
    _OP_CLASSES[cls.__name__] = cls
    return cls


def op_class(name: str) -> type:
    """The registered integer op class called ``name``; an unknown name is an error."""
    try:
        return _OP_CLASSES[name]
    except KeyError:
        raise KeyError(f"no integer op '{name}' is registered (known: "
                       f"{', '.join(sorted(_OP_CLASSES))})") from None


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
        """ONNX QuantizeLinear of float ``x`` (float32 arithmetic, round half to even,
        saturation). The clip happens in floating point before the cast to integers, so
        ±inf and values far out of range saturate to the type's ends as onnxruntime's do
        (NaN has no quantized value: callers refuse it)."""
        if is_bipolar(self.qtype):      # QONNX BipolarQuant: x >= 0 → +1, else -1
            return np.where(np.asarray(x, dtype=np.float32) >= 0, 1, -1).astype(np.int64)
        with np.errstate(over="ignore", invalid="ignore"):
            y = np.rint(np.asarray(x, dtype=np.float32) / np.float32(self.scale))
            y = np.clip(y.astype(np.float64) + self.zero_point, self.qtype.lo, self.qtype.hi)
        return np.nan_to_num(y, nan=self.zero_point).astype(np.int64)

    def dequantize(self, q: np.ndarray) -> np.ndarray:
        """ONNX DequantizeLinear of integer ``q`` (float32)."""
        return ((np.asarray(q, dtype=np.int64) - self.zero_point).astype(np.float32)
                * np.float32(self.scale))


@dataclass(frozen=True)
class PreOp:
    """``x = op(x, const)`` (``const_first``: ``op(const, x)``) on the host, in float32;
    ``const`` is flat, one value per input element (ONNX order) or a single value."""
    op: str
    const: np.ndarray
    const_first: bool = False


_NP = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide}


def apply_pre(pre, x: np.ndarray) -> np.ndarray:
    """The host preprocessing ``pre`` (a sequence of :class:`PreOp`) of float frames ``x``
    [N, elements] in ONNX order, in float32."""
    x = np.asarray(x, dtype=np.float32)
    with np.errstate(all="ignore"):
        for p in pre:
            c = np.asarray(p.const, np.float32).reshape(1, -1)
            x = (_NP[p.op](c, x) if p.const_first else _NP[p.op](x, c)).astype(np.float32)
    return x


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
    # the host's float32 preprocessing of the input before quantizing it (PreOp), and the
    # quantizer's narrower bounds (lo, hi) if it has them
    input_pre: tuple = ()
    input_bounds: tuple[int, int] | None = None
    # the output streams a layer's exact accumulator: its real value per output channel
    # (axis 0 of the per-sample shape) is the integer times this scale (None: the output
    # tensor's own scale and zero point)
    output_scale: np.ndarray | None = None
    # and a float bias the host adds to it per channel (None: none)
    output_offset: np.ndarray | None = None
    # the float ops the host runs on the output (``dataflow.host_tail``: a serialized ONNX
    # model from the output's real values to the graph output; empty: none)
    host_tail: bytes = b""

    def quantize_input(self, frames: np.ndarray) -> np.ndarray:
        """Float frames [N, elements] in ONNX order → the integer input in stream order: the
        preprocessing, then the input tensor's quantization (and its narrow bounds)."""
        x = apply_pre(self.input_pre, frames) if self.input_pre else frames
        q = self.tensors[self.input].quantize(self.to_stream(np.asarray(x)))
        if self.input_bounds is not None:
            q = np.clip(q, *self.input_bounds)
        return q

    def output_reals(self, y_onnx: np.ndarray) -> np.ndarray:
        """Output integers [N, elements] in ONNX order → the real values of the tensor the
        hardware computes (float32): dequantized by the output tensor's parameters, by the
        accumulator's scale per channel, or the integers themselves where the model returns
        integers."""
        y = np.asarray(y_onnx)
        if self.output_scale is not None:
            s, b = self._channel(self.output_scale), self._channel(self.output_offset)
            real = y.reshape((y.shape[0],) + self.tensors[self.output].shape).astype(
                np.float32) * s
            return (real + b if b is not None else real).reshape(y.shape)
        if self.output_dequantized:
            return self.tensors[self.output].dequantize(y)
        return y

    def output_integers(self, reals: np.ndarray) -> np.ndarray:
        """The inverse of :meth:`output_reals` on reference values [N, elements] (ONNX
        order): the integers the hardware should stream for them."""
        r = np.asarray(reals)
        if self.output_scale is not None:
            s, b = self._channel(self.output_scale), self._channel(self.output_offset)
            real = r.reshape((r.shape[0],) + self.tensors[self.output].shape).astype(
                np.float32)
            q = np.rint(((real - b) if b is not None else real) / s)
            return q.reshape(r.shape).astype(np.int64)
        if self.output_dequantized:
            return self.tensors[self.output].quantize(r)
        return r.astype(np.int64)

    def _channel(self, v) -> np.ndarray | None:
        """A per-channel vector of the output, shaped to broadcast over [N, *shape]."""
        if v is None:
            return None
        rank = len(self.tensors[self.output].shape)
        return np.asarray(v, np.float32).reshape((1, -1) + (1,) * (rank - 1))

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

    def canonical(self) -> tuple:
        """What the graph computes, without its names: every op's class and fields (weights,
        requantizer constants, windows, …) with the ONNX node names left out and each tensor
        replaced by its number in order of first use, together with that tensor's shape, type,
        scale and zero point. The ops come in a canonical topological order (among the ops
        whose inputs are ready, the smallest description first), so two orders of independent
        branches (a residual block's shortcut before or after its main path) give one value.
        Two models (one network from two exporters) map to the same integer graph exactly when
        their ``canonical()`` values are equal; :func:`canonical_close` allows the last bits of
        the float scales to differ."""
        numbers: dict[str, int] = {}

        def tensor(name: str, assign: bool) -> tuple:
            if name not in numbers and assign:
                numbers[name] = len(numbers)
            t = self.tensors[name]
            return ("tensor", numbers.get(name, -1), tuple(t.shape),
                    canonical_value(t.qtype), float(t.scale), int(t.zero_point))

        def value(v, assign: bool = True):
            if isinstance(v, str) and v in self.tensors:
                return tensor(v, assign)
            if is_dataclass(v) and not isinstance(v, type):
                return (type(v).__name__,) + tuple(
                    (f.name, value(getattr(v, f.name), assign)) for f in fields(v)
                    if f.name not in NAME_FIELDS)
            if isinstance(v, (list, tuple)):
                return tuple(value(x, assign) for x in v)
            return canonical_value(v)

        head = (tensor(self.input, True), value(self.input_pre), value(self.input_bounds),
                value(self.input_order))
        ops, left = [], list(self.ops)
        while left:
            ready = [op for op in left if all(t in numbers for t in op_inputs(op))]
            if not ready:
                raise ValueError("the integer graph has a cycle or an op reading no tensor "
                                 "of the graph")
            op = min(ready, key=lambda o: repr(value(o, assign=False)))
            left.remove(op)
            for t in op_inputs(op):
                tensor(t, True)
            tensor(op.output, True)
            ops.append(value(op))
        tail = (tensor(self.output, True), self.output_dequantized, value(self.output_order))
        return head + tuple(ops) + tail

    def producer(self, tensor: str):
        for op in self.ops:
            if op.output == tensor:
                return op
        return None

    def consumers(self, tensor: str) -> list:
        return [op for op in self.ops if tensor in op_inputs(op)]


NAME_FIELDS = ("name", "nodes")   # an op's ONNX node names: no part of what it computes


def canonical_value(v):
    """A comparable form of a field value: arrays by type, shape and bytes, mappings sorted,
    NumPy scalars as Python numbers, dataclasses field by field."""
    if isinstance(v, np.ndarray):
        return ("array", v.dtype.str, v.shape, v.tobytes())
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, dict):
        return tuple(sorted((k, canonical_value(x)) for k, x in v.items()))
    if isinstance(v, (list, tuple)):
        return tuple(canonical_value(x) for x in v)
    if is_dataclass(v) and not isinstance(v, type):
        return (type(v).__name__,) + tuple((f.name, canonical_value(getattr(v, f.name)))
                                           for f in fields(v))
    return v


def canonical_close(a, b, rel: float = 1e-6) -> bool:
    """Two :meth:`IntGraph.canonical` values equal but for floats (scales) and requantizer
    multipliers within ``rel`` of each other: the same integer graph up to the last bits of
    float32 arithmetic in the exporter or the calibration (a BatchNormalization folded by
    PyTorch or by the exporter, a mean summed by two onnxruntime kernels)."""
    if isinstance(a, tuple) and isinstance(b, tuple):
        if len(a) != len(b):
            return False
        if len(a) == 2 and a[0] == b[0] == "mult":
            return len(a[1]) == len(b[1]) and all(
                abs(x - y) <= rel * max(abs(x), abs(y)) for x, y in zip(a[1], b[1]))
        return all(canonical_close(x, y, rel) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b) <= rel * max(abs(a), abs(b))
    return type(a) is type(b) and a == b


def op_inputs(op) -> list[str]:
    return list(op.inputs) if hasattr(op, "inputs") else [op.input]


@dataclass(frozen=True)
class Window:
    """2-D sliding-window geometry over a (C, H, W) input. Window position ``(kh, kw)`` of
    output pixel ``(oh, ow)`` reads input pixel ``(oh*SH + kh*DH - top, ow*SW + kw*DW -
    left)``; ``dilation`` is ``(DH, DW)``."""
    in_shape: tuple[int, int, int]
    kernel: tuple[int, int]
    stride: tuple[int, int]
    pads: tuple[int, int, int, int]          # top, left, bottom, right
    dilation: tuple[int, int] = (1, 1)

    @property
    def span(self) -> tuple[int, int]:
        """Rows and columns one window covers: ``(K - 1)*D + 1`` each way."""
        return tuple((k - 1) * d + 1 for k, d in zip(self.kernel, self.dilation))

    @property
    def out_hw(self) -> tuple[int, int]:
        c, h, w = self.in_shape
        t, l, b, r = self.pads
        sh, sw = self.span
        return ((h + t + b - sh) // self.stride[0] + 1,
                (w + l + r - sw) // self.stride[1] + 1)

    def counts(self) -> np.ndarray:
        """Per output pixel (raster order): how many window positions lie inside the input."""
        c, h, w = self.in_shape
        oh, ow = self.out_hw
        (kh, kw), (dh, dw) = self.kernel, self.dilation
        rows = np.array([sum(0 <= i * self.stride[0] - self.pads[0] + k * dh < h
                             for k in range(kh)) for i in range(oh)])
        cols = np.array([sum(0 <= j * self.stride[1] - self.pads[1] + k * dw < w
                             for k in range(kw)) for j in range(ow)])
        return (rows[:, None] * cols[None, :]).reshape(-1)
