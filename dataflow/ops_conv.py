"""Conv (1-D and 2-D, any group), Pad folded into the window after it, and BatchNormalization
folding, QDQ form.

A convolution becomes a pending ``Linear`` with a window geometry: its weight matrix has one
row per output channel and columns in (kh, kw, c) order, the order in which the sliding-window
generator streams a window of a channel-last feature map. Padding positions carry the input
zero point (real zero), so the input zero-point correction of the bias holds everywhere.

* A 1-D convolution or pooling over an [N, C, L] map is the 2-D one over a (C, 1, L) map
  (kernel 1×k); its [N, C, L] tensors stream channel-last like (C, H, W) maps
  (``values.channel_last_order``), so a Flatten after them keeps ONNX's C×L element order.
* Group 1 is one matrix–vector unit. Group = channels (depthwise) is a vector unit, also
  with a channel multiplier M (OC = M·C: output o reads input channel o // M; the unit
  computes M outputs from each window element). Any other group (1 < group < channels) is
  one matrix–vector unit with a block-diagonal weight matrix: output channel o of group
  g = o // (OC/group) has zero weights outside its group's input channels. That is exact and
  needs no new block (nor a block splitting the stream by channel groups, and one unit per
  group behind it); the price is the zero weights: the unit spends group× the
  multiply–accumulates (and weight memory) a per-group computation needs.
* A Pad (constant mode, on the spatial axes only) before a convolution or pooling has no
  block of its own: its pads join the window's (:func:`window_input`). For a convolution
  the pad value must be the input's zero point (real zero, what the window's own padding
  carries); for pooling see ``ops_pool``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from hwgen.dataflow.affine import record
from hwgen.dataflow.context import REGISTRY, ImportContext, Unsupported, check_attrs
from hwgen.dataflow.intgraph import IntGraph, Window, int_op
from hwgen.dataflow.loader import Node
from hwgen.dataflow.lower import FIFO_MARGIN, Block, Builder, Folding, row_fifo_depth, short_name
from hwgen.dataflow.ops_linear import Linear, add_bias
from hwgen.dataflow.values import (
    Const,
    Deq,
    DeqConst,
    FloatInput,
    Int,
    Padded,
    channel_last_order,
    map_shape,
)
from hwgen.errors import HwgenError
from hwgen.rtl_templates.block import FoldSpace, divisors
from hwgen.rtl_templates.fifo import FIFOParams
from hwgen.rtl_templates.mvau import MVAUParams
from hwgen.rtl_templates.mvau import frame_steps as mvau_steps
from hwgen.rtl_templates.quant import Requant
from hwgen.rtl_templates.swg import SWGParams
from hwgen.rtl_templates.swg_par import SWGParParams, frame_cycles, longest_gap
from hwgen.rtl_templates.vvau import VVAUParams
from hwgen.rtl_templates.vvau import frame_steps as vvau_steps


@int_op
@dataclass
class Conv:
    """Convolution (+ bias, folded batch norm, Relu/Clip) + QuantizeLinear: a sliding-window
    generator and a matrix–vector unit (a vector unit when ``depthwise``). ``weights`` is
    [OC, KH*KW*C] with columns in (kh, kw, c) order (block-diagonal for a grouped
    convolution), or [OC, KH*KW] when ``depthwise`` (group = channels C; OC = M·C, row o reads
    input channel o // M). A 1-D convolution has KH = 1 over a (C, 1, L) window."""
    name: str
    nodes: list[str]
    input: str
    output: str
    weights: np.ndarray
    bias: np.ndarray
    requant: Requant
    window: Window
    depthwise: bool = False
    # the window's padding in input integers (None: the input's zero point, a real zero); a
    # Pad with another constant before the convolution sets it
    pad_value: int | None = None

    @classmethod
    def from_linear(cls, lin: Linear, nodes: list[str], out: str, rq: Requant) -> Conv:
        return cls(lin.nodes[0], nodes, lin.src, out, lin.weights, lin.bias, rq, lin.window,
                   lin.depthwise, lin.pad_value)

    def pad(self, ig: IntGraph) -> int:
        """The integer the sliding window pads with."""
        return ig.tensors[self.input].zero_point if self.pad_value is None else self.pad_value

    def fold_space(self, ig: IntGraph) -> FoldSpace:
        """SIMD is any divisor of the window's KH*KW*C elements: a divisor of C reads the
        window a channel block per beat; any other (beyond C, or one not dividing C) reads it
        through the window-parallel generator, whose own steps (one per padded input
        position) then bound the cycles too. A depthwise convolution's PE divides the
        channels and its SIMD the kernel positions: SIMD > 1 reads the window-parallel
        generator's depthwise order, PE*SIMD elements per beat."""
        c = self.window.in_shape[0]
        px = int(np.prod(self.window.out_hw))
        k = self.window.kernel[0] * self.window.kernel[1]
        if self.depthwise:
            def dw_cycles(pe, simd):
                vvau = vvau_steps(c, k, px, pe, simd)
                return vvau if simd == 1 else \
                    max(vvau, frame_cycles(self.window_par(ig, simd * pe, pe)))
            return FoldSpace(divisors(c), divisors(k), dw_cycles)
        oc = self.weights.shape[0]

        def cycles(pe, simd):
            mvau = mvau_steps(oc, k * c, pe, simd, px)
            return mvau if c % simd == 0 else max(mvau, frame_cycles(self.window_par(ig, simd)))
        return FoldSpace(divisors(oc), divisors(k * c), cycles)

    def window_par(self, ig: IntGraph, simd: int, depthwise_pe: int = 0) -> SWGParParams:
        """The window-parallel generator this convolution reads through at a SIMD that does
        not divide C (a depthwise one: ``depthwise_pe`` channels by SIMD/PE positions)."""
        win, tin = self.window, ig.tensors[self.input]
        c, h, w = win.in_shape
        return SWGParParams((h, w, c), win.kernel, win.stride, win.pads, self.pad(ig),
                            tin.qtype, simd, win.dilation, depthwise_pe)

    def in_per_beat(self, f: Folding) -> int:
        if self.depthwise:
            return f.pe if f.simd == 1 else self.window.in_shape[0]
        c = self.window.in_shape[0]
        return f.simd if c % f.simd == 0 else c

    @property
    def multiplier(self) -> int:
        """Output channels per input channel of a depthwise convolution (1 otherwise)."""
        return self.weights.shape[0] // self.window.in_shape[0] if self.depthwise else 1

    def lower(self, b: Builder, ig: IntGraph, f: Folding) -> str:
        tin, tout = ig.tensors[self.input], ig.tensors[self.output]
        nodes = tuple(self.nodes)
        oh, ow = self.window.out_hw
        dw_par = self.depthwise and f.simd > 1
        try:
            if self.depthwise:
                kind = "vvau"
                p = VVAUParams(self.weights, self.bias, self.requant, tin.qtype, tout.qtype,
                               f.pe, oh * ow, self.multiplier, f.simd, lut_lanes=f.lut_lanes,
                               rom_logic=f.rom_logic)
                cycles = p.pixels * p.kernel_beats * p.nb
            else:
                kind = "mvau"
                p = MVAUParams(self.weights, self.bias, self.requant, tin.qtype, tout.qtype,
                               f.pe, f.simd, oh * ow, lut_lanes=f.lut_lanes, spram=f.spram,
                               rom_logic=f.rom_logic)
                cycles = p.nf * p.sf * p.vectors
        except ValueError as e:     # a folding the unit cannot take (products in logic)
            raise HwgenError(f"layer {self.name}: {e}") from None
        windows = add_window_generator(b, ig, self, self.pad(ig), self.in_per_beat(f),
                                       self.depthwise,
                                       window_par=f.simd * f.pe if dw_par else f.simd,
                                       depthwise_pe=f.pe if dw_par else 0,
                                       consumer_cycles=cycles)
        out = b.stream(short_name(self.output), tout.qtype, f.pe * self.multiplier, tout.size)
        b.add(Block(self.name, kind, p, [windows], [out], self.name, nodes))
        return out


def add_window_generator(b: Builder, ig: IntGraph, op, pad_value: int, per_beat: int,
                         depthwise: bool, window_par: int = 0, depthwise_pe: int = 0,
                         consumer_cycles: int = 0) -> str:
    """The sliding-window stage of a windowed op (convolution, pooling): the generator block
    reading ``op.input`` through a FIFO of one input row, and its window stream (returned);
    a 1×1 window with stride 1 and no pads needs no generator (the input read through a
    FIFO is its window stream).
    A ``window_par`` that does not divide the channels: the window-parallel generator, that
    many window elements per beat (its input one pixel per beat, ``per_beat`` = C). A
    ``depthwise_pe`` (a depthwise op reading several kernel positions per beat): the
    window-parallel generator in depthwise order, ``window_par`` elements per beat in channel
    blocks of ``depthwise_pe``.
    ``consumer_cycles``: cycles per frame of the unit reading the windows. When it is slower
    than the window-parallel generator, a FIFO between them holds the windows that keep it
    busy through the generator's longest run of steps without a window (the next frame's
    first rows; :func:`rtl_templates.swg_par.longest_gap`), so the unit's own cycles are
    the pair's interval."""
    tin = ig.tensors[op.input]
    win = op.window
    c, h, w = win.in_shape
    oh, ow = win.out_hw
    if win.kernel == (1, 1) and win.stride == (1, 1) and not any(win.pads) and \
            not depthwise_pe and (not window_par or c % window_par == 0):
        # a 1x1 window of every pixel, unpadded: the window stream is the input stream; the
        # FIFO holds two pixels, so that a unit taking a pixel's beats back to back (the
        # matrix unit's first neuron fold) finds the next pixel whole, whatever the producer
        return b.read(op.input, per_beat, 2 * c // per_beat + FIFO_MARGIN)[0]
    if depthwise_pe or (window_par and c % window_par and not depthwise):
        sp, kind, out_per_beat = SWGParParams((h, w, c), win.kernel, win.stride, win.pads,
                                              pad_value, tin.qtype, window_par,
                                              win.dilation, depthwise_pe), "swg_par", window_par
    else:
        sp = SWGParams((h, w, c), win.kernel, win.stride, win.pads, pad_value, tin.qtype,
                       per_beat, depthwise, win.dilation)
        kind, out_per_beat = "swg", per_beat
    src, _ = b.read(op.input, per_beat, row_fifo_depth(sp))
    windows = b.stream(f"{short_name(op.output)}_win", tin.qtype, out_per_beat,
                       oh * ow * win.kernel[0] * win.kernel[1] * c)
    b.add(Block(f"{op.name}_swg", kind, sp, [src], [windows], op.name, tuple(op.nodes)))
    if kind == "swg_par" and consumer_cycles > frame_cycles(sp):
        s = b.streams[windows]
        # beats the consumer takes during the gap, at its pace
        need = -(-longest_gap(sp) * s.beats // consumer_cycles)
        if need > 1:
            buffered = b.stream(f"{short_name(op.output)}_winq", s.qtype, s.per_beat,
                                s.elements)
            b.add(Block(f"fifo_{short_name(op.output)}_win", "fifo",
                        FIFOParams(s.width, need + FIFO_MARGIN, s.beats), [windows],
                        [buffered], op.name, tuple(op.nodes)))
            windows = buffered
    return windows


def spatial_attrs(node: Node, rank: int) -> tuple[tuple[int, int], tuple[int, ...], str]:
    """Strides (2-D), pads (top, left, bottom, right) and auto_pad of a Conv or pooling node
    over ``rank`` spatial axes (1: an [N, C, L] map seen as (C, 1, L))."""
    a = node.attrs
    dil = [int(d) for d in a.get("dilations", [1] * rank)]
    if any(d < 1 for d in dil):
        raise Unsupported(f"dilations {dil}: positive integers are needed")
    strides = [int(v) for v in a.get("strides", [1] * rank)]
    pads = [int(v) for v in a.get("pads", [0] * 2 * rank)]
    if len(strides) != rank or len(pads) != 2 * rank or len(dil) != rank:
        raise Unsupported(f"strides {strides}, pads {pads} or dilations {dil} do not match "
                          f"its {rank}-D window")
    if any(p < 0 for p in pads):
        raise Unsupported(f"pads {pads} must not be negative")
    if any(v < 1 for v in strides):
        raise Unsupported(f"strides {strides} must be at least 1")
    if rank == 1:
        return (1, strides[0]), (0, pads[0], 0, pads[1]), a.get("auto_pad", "NOTSET")
    return (strides[0], strides[1]), tuple(pads), a.get("auto_pad", "NOTSET")


def dilation_attr(node: Node, rank: int) -> tuple[int, int]:
    """Dilations (2-D) of a Conv or pooling node over ``rank`` spatial axes."""
    dil = [int(d) for d in node.attrs.get("dilations", [1] * rank)]
    return (1, dil[0]) if rank == 1 else (dil[0], dil[1])


@dataclass(frozen=True)
class WindowGeometry:
    """A window over an input that a Pad may precede: ``window`` reads the unpadded input
    with every pad (the Pad's ``explicit`` ones, the op's ``own``, and the ``ceil`` rows and
    columns that ceil mode adds at the bottom and right); all are (top, left, bottom,
    right) but ``ceil`` (bottom, right)."""
    window: Window
    explicit: tuple[int, int, int, int]
    own: tuple[int, int, int, int]
    ceil: tuple[int, int]


def window_geometry(node: Node, in_shape: tuple[int, int, int], kernel: tuple[int, int],
                    rank: int = 2, explicit=(0, 0, 0, 0)) -> WindowGeometry:
    """The window of a Conv or pooling node over a (C, H, W) map (``rank`` 1: (C, 1, L))
    that a Pad by ``explicit`` (top, left, bottom, right) precedes. auto_pad and ceil_mode
    are computed on the padded input, as ONNX defines them. ceil_mode (pooling) adds the
    rows/columns its partial last windows reach past the input (the last window starts
    inside the input or its leading pads, as onnxruntime computes the output size)."""
    strides, pads, auto = spatial_attrs(node, rank)
    dilation = dilation_attr(node, rank)
    span = tuple((k - 1) * d + 1 for k, d in zip(kernel, dilation))
    c, h, w = in_shape
    et, el, eb, er = explicit
    ph, pw = h + et + eb, w + el + er                  # the input the node sees
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        both = []
        for size, k, s in ((ph, span[0], strides[0]), (pw, span[1], strides[1])):
            total = max((math.ceil(size / s) - 1) * s + k - size, 0)
            small = total // 2
            both.append((total - small, small) if auto == "SAME_LOWER" else (small, total - small))
        pads = (both[0][0], both[1][0], both[0][1], both[1][1])
    elif auto == "VALID":
        pads = (0, 0, 0, 0)
    elif auto != "NOTSET":
        raise Unsupported(f"auto_pad={auto!r} is not supported")
    ceil = [0, 0]
    if node.attrs.get("ceil_mode", 0):
        for i, (size, k, s, p0, p1) in enumerate(((ph, span[0], strides[0], pads[0], pads[2]),
                                                  (pw, span[1], strides[1], pads[1], pads[3]))):
            rest = size + p0 + p1 - k
            if rest < 0 or rest % s == 0:
                continue                  # ceil mode adds an output only for a remainder
            out = -(-rest // s) + 1
            if (out - 1) * s >= size + p0:
                out -= 1                  # the last window must start inside the input
            ceil[i] = max((out - 1) * s + k - (size + p0 + p1), 0)
    t, l, b, r = pads
    win = Window(in_shape, kernel, strides,
                 (t + et, l + el, b + eb + ceil[0], r + er + ceil[1]), dilation)
    oh, ow = win.out_hw
    if oh < 1 or ow < 1:
        size = f"{pw}" if rank == 1 else f"{ph}x{pw}"
        klist = [kernel[1]] if rank == 1 else list(kernel)
        raise Unsupported(f"kernel {klist} does not fit the {size} input with its pads")
    return WindowGeometry(win, tuple(explicit), tuple(pads), tuple(ceil))


def feature_map(x, what: str = "input") -> Deq:
    """The node's data input must be a dequantized (C, H, W) or (C, L) map streamed
    channel-last."""
    if isinstance(x, FloatInput):
        raise Unsupported("its input is a float tensor that no QuantizeLinear quantized: "
                          "the model is not quantized here")
    if not isinstance(x, Deq) or len(x.shape) not in (2, 3):
        raise Unsupported(f"its {what} must be a quantized [N, C, H, W] or [N, C, L] feature "
                          f"map (got {type(x).__name__} of shape "
                          f"{list(getattr(x, 'shape', []))})")
    if not np.array_equal(x.order, channel_last_order(x.shape)):
        raise Unsupported(f"its {what} is a transposed or reshaped view; a feature map "
                          f"straight from a convolution, pooling or the input is needed")
    return x


@dataclass(frozen=True)
class WindowInput:
    """What a windowed op reads: the map ``x`` (unpadded), the pads and value of a Pad before
    it (``value`` None: no Pad) and that Pad's nodes."""
    x: Deq | Int
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)
    value: int | None = None
    nodes: tuple[str, ...] = ()

    @property
    def rank(self) -> int:
        """Spatial axes: 1 for an [N, C, L] map, 2 for [N, C, H, W]."""
        return len(self.x.shape) - 1

    @property
    def shape(self) -> tuple[int, int, int]:
        return map_shape(self.x.shape)

    def out_shape(self, channels: int, win: Window) -> tuple[int, ...]:
        """The ONNX shape (per sample) of the op's output."""
        return (channels, win.out_hw[1]) if self.rank == 1 else (channels,) + win.out_hw


def window_input(x, what: str = "input", integer: bool = False) -> WindowInput:
    """The input of a convolution or pooling: a feature map, possibly padded by a Pad
    (``integer``: a map whose integers the op reads as they are, as integer max pooling
    does: an Int, or a QONNX quantizer's output)."""
    pads, value, nodes = (0, 0, 0, 0), None, ()
    if isinstance(x, Padded):
        if x.value is None:
            raise Unsupported(f"the Pad before it ({', '.join(x.nodes)}) pads with "
                              f"{x.real}, which is no value of its input's quantization, and "
                              f"no QuantizeLinear after the Pad makes it one")
        pads, value, nodes = x.pads, x.value, tuple(x.nodes)
        x = x.inner
    if integer:
        if not isinstance(x, (Int, Deq)) or len(x.shape) not in (2, 3) or \
                not np.array_equal(x.order, channel_last_order(x.shape)):
            raise Unsupported(f"its {what} must be a (C, H, W) or (C, L) feature map")
    else:
        x = feature_map(x, what)
    return WindowInput(x, pads, value, nodes)


CONV_ATTRS = {"auto_pad": None, "dilations": None, "group": None, "kernel_shape": None,
               "pads": None, "strides": None}


def conv(ctx: ImportContext, node: Node):
    check_attrs(node, CONV_ATTRS)
    ctx.set(node, conv_linear(ctx, node, ctx.value(node, 0), ctx.value(node, 1),
                              ctx.value(node, 2)))


def conv_linear(ctx: ImportContext, node: Node, x, w, b) -> Linear:
    """The pending convolution of dequantized ``x`` with dequantized weights ``w`` (+ ``b``)."""
    wi = window_input(x)
    rank = wi.rank
    if not isinstance(w, DeqConst) or w.q.ndim != rank + 2:
        raise Unsupported(f"its weights must be a {rank + 2}-D constant integer tensor behind "
                          f"DequantizeLinear")
    t = ctx.ig.tensors[wi.x.tensor]
    # a Pad with another value than the real zero: the window emits that value's integer;
    # the accumulator subtracts the zero point from every element, pads included, so a pad
    # contributes w·(value − zero point), the convolution of the padded real map
    pad_value = None if wi.value is None or wi.value == t.zero_point else wi.value
    oc, cg = w.q.shape[:2]
    kh, kw = (1, w.q.shape[2]) if rank == 1 else w.q.shape[2:]
    c = wi.shape[0]
    group = int(node.attrs.get("group", 1))
    s_w, z_w = w.per_channel(0, oc, "the weight")
    wq = w.q.astype(np.int64).reshape(oc, cg, kh, kw) - z_w[:, None, None, None]
    if group < 1 or c % group or oc % group or cg * group != c:
        raise Unsupported(f"group={group} with {c} input and {oc} output channels and weights "
                          f"for {cg} input channels per group: the groups do not divide the "
                          f"channels")
    depthwise = group == c > 1 and oc % c == 0
    if group == 1:
        wm = wq.transpose(0, 2, 3, 1).reshape(oc, -1)          # columns (kh, kw, c)
    elif depthwise:
        wm = wq.reshape(oc, kh * kw)                           # row o reads channel o // M
    else:
        # block-diagonal: output channel o sees only the input channels of its group
        full = np.zeros((oc, kh, kw, c), np.int64)
        og = oc // group
        for g in range(group):
            full[g * og:(g + 1) * og, :, :, g * cg:(g + 1) * cg] = \
                wq[g * og:(g + 1) * og].transpose(0, 2, 3, 1)
        wm = full.reshape(oc, -1)
    win = window_geometry(node, wi.shape, (kh, kw), rank, wi.pads).window
    if pad_value is not None and tuple(win.pads) != tuple(wi.pads):
        raise Unsupported(f"the Pad before it pads with {wi.value}, the convolution's own pads "
                          f"with the zero point {t.zero_point}: one window cannot pad with two "
                          f"values")
    lin = Linear(src=wi.x.tensor, weights=wm,
                 acc_scale=(np.float32(t.scale) * s_w.astype(np.float32)).astype(np.float64),
                 bias=-t.zero_point * wm.sum(axis=1),
                 nodes=[node.label, *wi.nodes], shape=wi.out_shape(oc, win), window=win,
                 pad_value=pad_value, depthwise=depthwise, op=Conv)
    if b is not None:
        add_bias(lin, b, node, channel_vector=True)
        lin.nodes.pop()
    return lin


PAD_MODES = (b"constant", "constant")


def pad(ctx: ImportContext, node: Node):
    """Pad (constant mode, spatial axes only) of a feature map: a :class:`Padded` view that
    the convolution or pooling after it folds into its window."""
    check_attrs(node, {"mode": lambda v: v in PAD_MODES, "pads": None, "value": None})
    x = ctx.value(node, 0)
    inner = x.inner if isinstance(x, Padded) else x
    if not isinstance(inner, (Deq, Int)) or len(inner.shape) not in (2, 3) or \
            not np.array_equal(inner.order, channel_last_order(inner.shape)):
        raise Unsupported(f"its input must be a quantized [N, C, H, W] or [N, C, L] feature "
                          f"map (got {type(x).__name__} of shape "
                          f"{list(getattr(x, 'shape', []))})")
    rank = len(inner.shape) + 1                        # with the batch axis
    if node.since_version < 11:
        pads = [int(v) for v in node.attrs["pads"]]
        value = np.asarray(node.attrs.get("value", 0.0), np.float32)
    else:
        pads = [int(v) for v in np.asarray(ctx.const(node, 1, "pads")).reshape(-1)]
        cv = ctx.value(node, 2) if len(node.inputs) > 2 else None
        if cv is not None and not isinstance(cv, (Const, DeqConst)):
            raise Unsupported("its constant_value must be a constant")
        value = np.zeros((), np.float32) if cv is None else \
            cv.real() if isinstance(cv, DeqConst) else np.asarray(cv.array)
        axes = ctx.const(node, 3, "axes") if len(node.inputs) > 3 else None
        if axes is not None:
            axes = [int(a) % rank for a in np.asarray(axes).reshape(-1)]
            full = [0] * 2 * rank
            for i, a in enumerate(axes):
                full[a], full[rank + a] = pads[i], pads[len(axes) + i]
            pads = full
    if len(pads) != 2 * rank:
        raise Unsupported(f"pads {pads} do not match a rank-{rank} input")
    begin, end = pads[:rank], pads[rank:]
    if any(p < 0 for p in pads):
        raise Unsupported(f"negative pads {pads} (cropping) are not supported")
    if begin[:2] != [0, 0] or end[:2] != [0, 0]:
        raise Unsupported(f"pads {pads} pad the batch or channel axis; only the spatial axes "
                          f"can be padded")
    if value.size != 1:
        raise Unsupported("its constant_value must be a single value")
    t = ctx.ig.tensors[inner.tensor]
    if isinstance(inner, Int):
        if value.dtype.kind not in "iu":
            raise Unsupported(f"pads an integer tensor with a {value.dtype} value")
        q = int(value.reshape(-1)[0])
    else:
        v = np.float32(value.reshape(-1)[0])
        if not np.isfinite(v):
            raise Unsupported(f"pad value {float(v)} is not a finite number")
        q = int(np.rint(v / np.float32(t.scale))) + t.zero_point
        if not t.qtype.lo <= q <= t.qtype.hi or \
                (np.float32(q - t.zero_point) * np.float32(t.scale)) != v:
            q = None      # the QuantizeLinear after the Pad quantizes it (values.Padded)
    # (top, left, bottom, right); an [N, C, L] map is (C, 1, L)
    new = (0, begin[2], 0, end[2]) if rank == 3 else (begin[2], begin[3], end[2], end[3])
    real = None if q is not None else float(v)
    if isinstance(x, Padded):
        if (x.value, x.real) != (q, real):
            raise Unsupported(f"pads with {q if q is not None else real} after a Pad with "
                              f"{x.value if x.value is not None else x.real}: two pad values")
        new = tuple(a + b for a, b in zip(x.pads, new))
        nodes = x.nodes + [node.label]
    else:
        nodes = [node.label]
    ctx.set(node, Padded(inner, new, q, nodes, real))


def batch_norm(ctx: ImportContext, node: Node):
    """Fold inference-mode BatchNormalization into the convolution/Gemm before it:
    real' = real·g + (beta − mean·g), g = gamma / sqrt(var + eps), per channel."""
    check_attrs(node, {"epsilon": None, "momentum": None, "spatial": lambda v: v == 1,
                       "training_mode": lambda v: v == 0})
    x = ctx.value(node, 0)
    if not isinstance(x, Linear) or x.clip_lo > -np.inf or x.clip_hi < np.inf:
        raise Unsupported("BatchNormalization must directly follow a Conv or Gemm to be "
                          "folded into it")
    if len([o for o in node.outputs if o]) > 1:
        raise Unsupported("BatchNormalization in training mode is not supported")
    record(ctx, x, node, 0)
    gamma, beta, mean, var = (np.asarray(ctx.const(node, k, n), np.float64).reshape(-1)
                              for k, n in ((1, "scale"), (2, "bias"), (3, "mean"), (4, "var")))
    eps = float(node.attrs.get("epsilon", 1e-5))
    g = gamma / np.sqrt(var + eps)
    shift = beta - mean * g
    sign = np.where(g < 0, -1, 1)
    x.weights = x.weights * sign[:, None]
    x.bias = x.bias * sign
    x.acc_scale = x.acc_scale * np.abs(g)
    safe = np.where(x.acc_scale > 0, x.acc_scale, 1.0)
    x.bias = x.bias + np.rint(shift / safe).astype(np.int64)
    x.nodes.append(node.label)
    ctx.set(node, x)


for _v in (1, 11, 22):
    REGISTRY.register("", "Conv", _v)(conv)
for _v in (2, 11, 13, 18, 19, 21, 23, 24, 25):
    REGISTRY.register("", "Pad", _v)(pad)
for _v in (7, 9, 14, 15):
    REGISTRY.register("", "BatchNormalization", _v)(batch_norm)
