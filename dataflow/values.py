"""What the importer knows about each ONNX tensor while it walks the graph.

The QDQ format describes integer computation with float operators between
QuantizeLinear/DequantizeLinear pairs. The importer interprets the graph abstractly: every
ONNX tensor becomes one of the values below, or a :class:`Pending` computation (defined with
the handlers that create it) that a QuantizeLinear closes into an integer op. Shapes are
per sample (batch axis dropped).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: the most elements one streamed tensor (per sample) may have
MAX_STREAM_ELEMENTS = 1 << 28


def check_stream_shape(shape: tuple[int, ...]) -> None:
    """A per-sample shape of a streamed tensor: every axis positive and at most
    ``MAX_STREAM_ELEMENTS`` elements in all (ValueError otherwise, checked without
    allocating)."""
    dims = [int(d) for d in shape]
    if any(d <= 0 for d in dims):
        raise ValueError(f"a streamed tensor of shape {dims} per sample: every axis must be "
                         f"positive")
    n = 1
    for d in dims:
        n *= d
    if n > MAX_STREAM_ELEMENTS:
        raise ValueError(f"a streamed tensor of shape {dims} per sample has {n} elements, "
                         f"more than the limit of {MAX_STREAM_ELEMENTS}")


def channel_last_order(shape: tuple[int, ...]) -> np.ndarray | None:
    """Stream order of a per-sample tensor: for (C, H, W) feature maps the hardware streams
    pixels in raster order with channels innermost, and a 1-D (C, L) map likewise (as a
    (C, 1, L) map: positions in order, channels innermost); other ranks stream row-major
    (None). Entry k is the row-major flat index (in ``shape``) of the k-th streamed element.
    A shape with an empty axis or beyond ``MAX_STREAM_ELEMENTS`` is a ValueError."""
    check_stream_shape(shape)
    if len(shape) not in (2, 3):
        return None
    c, rest = shape[0], tuple(shape[1:])
    n = int(np.prod(rest))
    return np.arange(c * n).reshape(c, n).T.reshape(-1)


def map_shape(shape: tuple[int, ...]) -> tuple[int, int, int]:
    """The (C, H, W) geometry of a feature map: a 1-D (C, L) map is (C, 1, L)."""
    return (shape[0], 1, shape[1]) if len(shape) == 2 else tuple(shape)


@dataclass
class FloatInput:
    """A float graph input (must be quantized before use). ``pre``: the host preprocessing
    applied to it so far (``affine.PreOp``s); ``viewed``: reshaped or transposed since the
    graph input (element-wise constants no longer line up with it)."""
    name: str
    shape: tuple[int, ...]
    order: np.ndarray | None = None
    pre: tuple = ()
    viewed: bool = False
    #: ``order`` as the graph input had it, before any view (None: row-major)
    start_order: np.ndarray | None = None


def view_positions(n: int, order, start) -> np.ndarray:
    """For each row-major element of a view streamed in ``order`` (of ``n`` elements), its
    row-major position in the graph input streamed in ``start`` (None: row-major)."""
    now = np.arange(n) if order is None else np.asarray(order)
    out = np.empty(n, dtype=np.int64)
    out[now] = np.arange(n) if start is None else np.asarray(start)
    return out


def input_positions(x: FloatInput) -> np.ndarray:
    """:func:`view_positions` of the view ``x`` of the float graph input."""
    return view_positions(int(np.prod(x.shape, dtype=np.int64)), x.order, x.start_order)


@dataclass
class Int:
    """An integer tensor of the integer graph, seen with ONNX shape ``shape``; ``order`` is
    its stream order (see :func:`channel_last_order`; None = row-major)."""
    tensor: str
    shape: tuple[int, ...]
    order: np.ndarray | None = None


@dataclass
class Deq:
    """DequantizeLinear of an integer tensor: real = (q - zp) * scale."""
    tensor: str
    shape: tuple[int, ...]
    order: np.ndarray | None = None


@dataclass
class Padded:
    """A feature map with constant padding on its spatial axes not yet applied (a Pad node):
    ``inner`` is the unpadded map (an :class:`Int`, or a :class:`Deq` of one), ``pads`` the
    padding (top, left, bottom, right; a 1-D map has top = bottom = 0) and ``value`` the pad
    value in the inner tensor's integers. It has no hardware of its own: the sliding window of
    the convolution or pooling that reads it takes the pads (``ops_conv.window_input``);
    QuantizeLinear / DequantizeLinear with the inner tensor's own parameters pass it on, and
    every other consumer refuses it. A pad value that is no value of the inner quantization
    (``value`` None, ``real`` the float pad value) becomes one at the QuantizeLinear after the
    Pad (which rounds and clamps it as ONNX does); a window reading it before that refuses it."""
    inner: Int | Deq
    pads: tuple[int, int, int, int]
    value: int | None
    nodes: list[str]
    real: float | None = None

    @property
    def shape(self) -> tuple[int, ...]:
        t, l, b, r = self.pads
        s = self.inner.shape
        if len(s) == 2:
            return (s[0], s[1] + l + r)
        return (s[0], s[1] + t + b, s[2] + l + r)


@dataclass
class Const:
    """A constant: initializer, Constant node, or a constant folded from them."""
    array: np.ndarray


@dataclass
class DeqConst:
    """DequantizeLinear of a constant integer array (weights, bias)."""
    q: np.ndarray
    scale: np.ndarray
    zero_point: np.ndarray
    axis: int

    def per_channel(self, axis: int, n: int, what: str) -> tuple[np.ndarray, np.ndarray]:
        """(scale, zero point) broadcast to ``n`` channels along ``axis`` of ``q``."""
        s = np.asarray(self.scale, dtype=np.float32).reshape(-1)
        z = np.asarray(self.zero_point, dtype=np.int64).reshape(-1)
        if s.size > 1 and (self.axis % self.q.ndim) != axis % self.q.ndim:
            raise ValueError(f"{what} is quantized per channel along axis {self.axis}, "
                             f"not along its output-channel axis {axis}")
        return np.broadcast_to(s, (n,)).copy(), np.broadcast_to(z, (n,)).copy()

    def real(self) -> np.ndarray:
        shape = [1] * self.q.ndim
        if np.size(self.scale) > 1:
            shape[self.axis] = -1
        s = np.asarray(self.scale, np.float32).reshape(shape)
        z = np.asarray(self.zero_point, np.int64).reshape(shape)
        return (self.q.astype(np.int64) - z).astype(np.float32) * s


class Pending:
    """A computation of dequantized values awaiting the QuantizeLinear that makes it an
    integer op (a matrix product, a pooling, a join, a clip). Each kind lives with the
    handlers that create it (``ops_linear.Linear``, ``ops_pool.Pooled``, ``ops_join.Joined``,
    ``ops_clip.Clipped``) and knows how to close itself."""

    def close(self, ctx, name: str, qtype, scale, zero_point: int,
              closing: str | None) -> Int:
        """Quantize to (``qtype``, ``scale``, ``zero_point``): add the integer op writing a new
        tensor named after ``name`` to ``ctx.ig`` and return it as an :class:`Int`.
        ``closing``: the label of the quantizing node (None where the quantization is
        assumed)."""
        raise NotImplementedError(type(self).__name__)
