"""Layer-sequential engine: a chain of layers computed one after another on one
multiply–accumulate datapath and one requantizer, for models that fit no device as a
pipeline of one block per layer (DS-CNN on the iCE40 UltraPlus).

Layers
    Each layer is a unit the lowering builds, with its window generator where it has one:
    a convolution (:mod:`swg` + :mod:`mvau`), a depthwise convolution (:mod:`swg` +
    :mod:`vvau`, one output channel per input channel), a pointwise convolution or a fully
    connected layer (:mod:`mvau` alone) and global average pooling (:mod:`gap`). Every one is
    a sum of products over the taps of a window, plus a bias, requantized:

        y[pixel, oc] = requant(sum_taps x[tap] · w[oc, tap] + bias[oc])

    where a tap outside the map reads the window generator's ``pad_value`` and global
    average pooling has weights 1. :func:`geometry` gives each layer's loop bounds and
    address steps; :class:`SeqEngineParams` gathers the weights of all layers (in the order
    the datapath uses them), the per-channel bias and multiplier, and one requantizer
    envelope for all layers: every layer's multipliers are scaled to the largest shift
    (``round24(p·2**k) = round24(p)·2**k``, so the result does not change) and the zero
    points and bounds are per layer (:class:`~rtl_templates.requant.RuntimeRequant`).

Stream contract
    ``i``: the first layer's input, one element per beat, in its stream order (channel-last).
    ``o``: the last layer's output, one element per beat. A frame's input is taken in full
    (one beat per cycle), then the layers run, then the output leaves; the next frame's input
    is taken after the last output beat. With ``spram`` the weights are in SPRAM, loaded
    from the weight-load stream (``wl_i``/``wl_o``/``loaded``, :mod:`spram`), and no input is
    taken before they are.

Hardware
    Two feature-map buffers of :attr:`SeqEngineParams.buffer_words` words, each read or
    written at one address per cycle (so SPRAM can hold them, :attr:`~SeqEngineParams.
    buffers_spram`; small ones are in block RAM): layer ``l`` reads buffer
    ``l mod 2`` and writes buffer ``(l + 1) mod 2``; the input goes to buffer 0. Words hold
    values as two's complement of :attr:`SeqEngineParams.buffer_bits` (every tensor's range).
    A layer's loop nest (output row, column, channel; kernel row, column, input channel) runs
    one step per cycle: t: counters → input address (pixel base + tap offset + channel for a
    depthwise layer) and pad flag; t+1: addresses registered into the buffer and the weight
    memory; t+2: the words (or the pad value, or weight 1); t+3: operands registered;
    t+4: product; t+5: the accumulator holds the sum (the first tap of an output replaces it),
    and the bias and multiplier of the channel are read; then the requantizer
    (:class:`~rtl_templates.requant.RequantPipeline`, its product over one DSP tile for several
    cycles when the layers' windows allow it) and the write of the result to the other buffer.
    After a layer's last step the engine waits for its last write, then starts the next
    layer: the descriptor of each layer is a constant selected by the layer number and
    registered, in one cycle (SETUP) before the layer's first step. Results and input words
    are written a cycle late from registers; the output leaves through the output stage
    (:mod:`output_stage`: the buffer's read word into its write register, then a
    credit-counted FIFO).

Cost
    ``cycles = I + sum_l (steps_l + DRAIN) + O + EMIT_DELAY - 1`` per frame (``I``, ``O``:
    input and output elements; ``steps_l`` = outputs × taps of layer ``l``; ``DRAIN`` = the
    setup cycle + the datapath's stages + the requantizer's; :data:`EMIT_DELAY` = 6), one
    product per cycle. Memory: two buffers, the weights, the bias and multiplier words.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np
from amaranth.hdl import Const, Module, Mux, Shape, Signal, signed, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from hwgen.rtl_templates import output_stage
from hwgen.rtl_templates import resources as res
from hwgen.rtl_templates.block import Example, Port, fixed_fold, register_block
from hwgen.rtl_templates.cost import Cost
from hwgen.rtl_templates.gap import GAPParams
from hwgen.rtl_templates.gap import golden as gap_golden
from hwgen.rtl_templates.memory import rom
from hwgen.rtl_templates.mvau import MVAUParams
from hwgen.rtl_templates.mvau import golden as mvau_golden
from hwgen.rtl_templates.pipeline import delay, reg
from hwgen.rtl_templates.quant import QType, Requant, make_requant, signed_width
from hwgen.rtl_templates.requant import LANE_FIT, RequantPipeline, RuntimeRequant
from hwgen.rtl_templates.resources import Mul, unsigned_muls
from hwgen.rtl_templates.spram import MARK, LoadLayout, load_ports, load_words, loaded_memory
from hwgen.rtl_templates.swg import SWGParams
from hwgen.rtl_templates.swg import golden as swg_golden
from hwgen.rtl_templates.vvau import VVAUParams
from hwgen.rtl_templates.vvau import golden as vvau_golden
from hwgen.rtl_templates.xnor_mvau import is_bipolar

#: stages from a step's counters to the accumulator holding its sum (module notes)
MAC_STAGES = 5
#: SPRAM tiles of the UltraPlus
SPRAM_TILES = 4
#: cycles from an output read issuing to its beat's earliest output transfer: the buffer's
#: read, then the output stage's (the read word is written: the write register comes first);
#: the output FIFO's depth follows (:func:`output_stage.fifo_depth`), one beat per cycle
EMIT_DEPTH = 1 + output_stage.latency()
#: cycles from the last layer's last write (its result's cycle; the late write lands in the
#: next, the setup cycle) to the first output transfer: one to the setup cycle, the setup
#: cycle, then the first read's :data:`EMIT_DEPTH`
EMIT_DELAY = 2 + EMIT_DEPTH
#: the loop nest, innermost first (the geometry's bounds)
LOOPS = ("ICT", "KW", "KH", "OC", "OW", "OH")
#: the largest feature-map buffer kept in block RAM beside weights in SPRAM (4 of the
#: UltraPlus's 30 tiles); a larger one goes to SPRAM
BUFFER_BRAM_BITS = 16 * 1024


@dataclass(frozen=True, eq=False)
class SeqLayer:
    """One layer of the engine: its unit and, for a convolution, its window generator."""
    name: str
    unit: MVAUParams | VVAUParams | GAPParams
    swg: SWGParams | None = None


@dataclass(frozen=True)
class Geometry:
    """A layer as the engine's loop nest sees it: input ``H×W×C``, output ``OH×OW×OC``,
    kernel, stride, dilation, top and left padding, taps per output (``KH·KW·ICT``: ``ICT``
    input channels per kernel position, 1 for a depthwise layer, whose input channel is its
    output channel), the pad value, weights 1 (``ones``: average pooling)."""
    H: int
    W: int
    C: int
    OH: int
    OW: int
    OC: int
    KH: int = 1
    KW: int = 1
    SH: int = 1
    SW: int = 1
    DH: int = 1
    DW: int = 1
    top: int = 0
    left: int = 0
    ICT: int = 1
    pad_value: int = 0
    depthwise: bool = False
    ones: bool = False

    @property
    def taps(self) -> int:
        return self.KH * self.KW * self.ICT

    @property
    def in_elements(self) -> int:
        return self.H * self.W * self.C

    @property
    def out_elements(self) -> int:
        return self.OH * self.OW * self.OC

    @property
    def steps(self) -> int:
        return self.out_elements * self.taps


def geometry(layer: SeqLayer) -> Geometry:
    """The loop nest of ``layer``; a layer the engine cannot run is a ValueError naming why."""
    u, s = layer.unit, layer.swg
    if isinstance(u, GAPParams):
        if s is not None:
            raise ValueError("average pooling takes no window generator")
        return Geometry(u.pixels, 1, u.channels, 1, 1, u.channels, KH=u.pixels,
                        depthwise=True, ones=True)
    if is_bipolar(u.in_type) or is_bipolar(u.out_type):
        raise ValueError("bipolar (1-bit) tensors")
    if getattr(u, "identity", False):
        raise ValueError("an accumulator passed on to a thresholding unit")
    if isinstance(u, VVAUParams):
        if s is None or not s.depthwise:
            raise ValueError("a depthwise unit without its window generator")
        if u.multiplier != 1:
            raise ValueError(f"a depthwise multiplier of {u.multiplier}")
        if u.pe != 1 or u.simd != 1 or s.simd != 1:
            raise ValueError("a folded depthwise layer (the engine takes PE = SIMD = 1)")
        H, W, C = s.in_shape
        OH, OW = s.out_shape
        return Geometry(H, W, C, OH, OW, C, *s.kernel, *s.stride, *s.dilation, s.pads[0],
                        s.pads[1], 1, s.pad_value, depthwise=True)
    if not isinstance(u, MVAUParams):
        raise ValueError(f"a {type(u).__name__} unit")
    if u.pe != 1 or u.simd != 1 or (s is not None and s.simd != 1):
        raise ValueError("a folded matrix layer (the engine takes PE = SIMD = 1)")
    if s is None:
        return Geometry(u.vectors, 1, u.mw, u.vectors, 1, u.mh, ICT=u.mw)
    if s.depthwise:
        raise ValueError("a matrix unit after a depthwise window generator")
    H, W, C = s.in_shape
    OH, OW = s.out_shape
    if u.mw != s.window_elems or u.vectors != OH * OW:
        raise ValueError("a matrix unit whose input is not its window generator's windows")
    return Geometry(H, W, C, OH, OW, u.mh, *s.kernel, *s.stride, *s.dilation, s.pads[0],
                    s.pads[1], C, s.pad_value)


def _chain_golden(layer: SeqLayer, x: np.ndarray) -> np.ndarray:
    u = layer.unit
    if layer.swg is not None:
        x = swg_golden(layer.swg, x)
    if isinstance(u, GAPParams):
        return gap_golden(u, x)
    if isinstance(u, VVAUParams):
        return vvau_golden(u, x)
    return mvau_golden(u, x)


def _unit_weights(u) -> np.ndarray:
    """The layer's weights in the order the datapath uses them: per output channel its taps."""
    if isinstance(u, GAPParams):
        return np.zeros(0, dtype=np.int64)
    return np.asarray(u.weights, dtype=np.int64).reshape(-1)


def _unit_bias(u, oc: int) -> np.ndarray:
    if isinstance(u, GAPParams):
        return np.full(oc, u.bias, dtype=np.int64)
    return np.asarray(u.bias, dtype=np.int64).reshape(-1)


def _unit_mults(u, oc: int) -> list[int]:
    m = [int(v) for v in u.requant.mult]
    return m * oc if len(m) == 1 else m


@dataclass(frozen=True, eq=False)
class SeqEngineParams:
    """Everything that defines one engine: its layers in order (each layer's input is the
    previous one's output) and where its memories live."""
    layers: tuple[SeqLayer, ...]
    #: weights and feature-map buffers in SPRAM, the weights loaded after reset
    spram: bool = field(default=False, metadata={"digest": "omit_default"})

    def __post_init__(self):
        if not self.layers:
            raise ValueError("an engine needs at least one layer")
        object.__setattr__(self, "layers", tuple(self.layers))
        for a, b in zip(self.layers, self.layers[1:]):
            if self.geometry(a).out_elements != self.geometry(b).in_elements:
                raise ValueError(f"layer {b.name} does not take layer {a.name}'s output")
        tiles = self.load_layout.tiles + 2 * self.buffers_spram if self.spram else 0
        if tiles > SPRAM_TILES:
            raise ValueError(f"{self.weights.size} weights take {self.load_layout.tiles} "
                             f"SPRAM tiles{' beside the two buffers' if self.buffers_spram else ''}"
                             f" ({SPRAM_TILES} in all)")

    @functools.cached_property
    def geometries(self) -> tuple[Geometry, ...]:
        return tuple(geometry(x) for x in self.layers)

    def geometry(self, layer: SeqLayer) -> Geometry:
        return geometry(layer)

    @property
    def in_type(self) -> QType:
        return self.layers[0].unit.in_type

    @property
    def out_type(self) -> QType:
        return self.layers[-1].unit.out_type

    @property
    def in_elements(self) -> int:
        return self.geometries[0].in_elements

    @property
    def out_elements(self) -> int:
        return self.geometries[-1].out_elements

    @functools.cached_property
    def shift(self) -> int:
        """The common shift of the layers' requantizers (the largest)."""
        return max(x.unit.requant.shift for x in self.layers)

    @functools.cached_property
    def weights(self) -> np.ndarray:
        return np.concatenate([_unit_weights(x.unit) for x in self.layers])

    @functools.cached_property
    def weight_bases(self) -> tuple[int, ...]:
        sizes = [_unit_weights(x.unit).size for x in self.layers]
        return tuple(int(v) for v in np.cumsum([0] + sizes[:-1]))

    @functools.cached_property
    def channel_bases(self) -> tuple[int, ...]:
        sizes = [g.OC for g in self.geometries]
        return tuple(int(v) for v in np.cumsum([0] + sizes[:-1]))

    @functools.cached_property
    def w_bits(self) -> int:
        """Bits of a stored weight (two's complement; at least 2, so weight 1 is one)."""
        w = self.weights
        return max(2, signed_width(int(w.min(initial=0)), int(w.max(initial=0))))

    @functools.cached_property
    def biases(self) -> np.ndarray:
        return np.concatenate([_unit_bias(x.unit, g.OC)
                               for x, g in zip(self.layers, self.geometries)])

    @functools.cached_property
    def mults(self) -> list[int]:
        """Each channel's multiplier scaled to the common :attr:`shift`."""
        out = []
        for x, g in zip(self.layers, self.geometries):
            k = self.shift - x.unit.requant.shift
            out += [v << k for v in _unit_mults(x.unit, g.OC)]
        return out

    @functools.cached_property
    def requant(self) -> Requant:
        """The requantizer envelope of all layers (:class:`RuntimeRequant`)."""
        rqs = [x.unit.requant for x in self.layers]
        zp = max((r.zero_point for r in rqs), key=abs)
        # a zero point of 0 added before the rounding changes nothing (round24 of a value
        # round24 gave is itself): only a non-zero one needs the second rounding
        return Requant(tuple(self.mults), self.shift, zp, min(r.lo for r in rqs),
                       max(r.hi for r in rqs), any(r.zp_first and r.zero_point for r in rqs))

    @functools.cached_property
    def acc_bits(self) -> int:
        return max(x.unit.acc_bits for x in self.layers)

    @functools.cached_property
    def buffer_bits(self) -> int:
        """Bits of a feature-map word: two's complement holding every tensor's range."""
        types = [self.in_type] + [x.unit.out_type for x in self.layers]
        return signed_width(min(t.lo for t in types), max(t.hi for t in types))

    @functools.cached_property
    def buffer_words(self) -> int:
        return max(max(g.in_elements, g.out_elements) for g in self.geometries)

    @property
    def buffers_spram(self) -> bool:
        """The feature-map buffers are in SPRAM (with ``spram``, when each would take more
        than :data:`BUFFER_BRAM_BITS` of block RAM); otherwise in block RAM."""
        return self.spram and self.buffer_bits * self.buffer_words > BUFFER_BRAM_BITS

    @property
    def spacing(self) -> int:
        """The fewest cycles between two outputs of the accumulator (the smallest window)."""
        return min(g.taps for g in self.geometries)

    @property
    def load_layout(self) -> LoadLayout | None:
        return LoadLayout(self.w_bits, max(1, self.weights.size)) if self.spram else None

    def weight_words(self) -> list[int]:
        mask = (1 << self.w_bits) - 1
        return (np.asarray(self.weights, dtype=np.int64) & mask).tolist() or [0]

    def load_words(self) -> list[int]:
        return load_words(self.load_layout, self.weight_words()) if self.spram else []

    def param_words(self) -> list[int]:
        """The bias (``acc_bits``, two's complement) and multiplier of every channel."""
        mask = (1 << self.acc_bits) - 1
        return [(int(b) & mask) | (int(mu) << self.acc_bits)
                for b, mu in zip(self.biases, self.mults)]

    @functools.cached_property
    def drain(self) -> int:
        """Cycles a layer takes beyond its steps: the cycle that loads its descriptor, and
        from its last step to its last write the datapath's stages and the requantizer's."""
        return 1 + MAC_STAGES + RequantPipeline.depth(self.requant, self.acc_bits,
                                                      spacing=self.spacing, runtime=True)

    @property
    def compute_cycles(self) -> int:
        return sum(g.steps + self.drain for g in self.geometries)


# ---------------------------------------------------------------------------- golden

def golden(p: SeqEngineParams, x: np.ndarray) -> np.ndarray:
    """Integer semantics: the layers' own golden functions in sequence."""
    x = np.asarray(x, dtype=np.int64)
    for layer in p.layers:
        x = _chain_golden(layer, x)
    return x


# ---------------------------------------------------------------------------- cost

def timing(p: SeqEngineParams, in_first: int, in_last: int) -> tuple[int, int]:
    """The layers start the cycle after the last input beat; the first output leaves
    :data:`EMIT_DELAY` cycles after the last layer's last write."""
    first = in_last + p.compute_cycles + EMIT_DELAY
    return first, first + p.out_elements - 1


def _counter(n: int) -> int:
    return max(1, int(n).bit_length())


def _buffers(p: SeqEngineParams, family: str) -> res.Resources:
    """The two feature-map buffers (:func:`_buffer`: plain memories, Yosys picks their cells
    by its own cost) and, for block RAM tiles stacked in depth, their read multiplexers and
    write enable decoders."""
    one = res.memory(p.buffer_bits, p.buffer_words, family, rom=False, plain=True,
                     rw="dont_care")
    if one.bram:
        one = one + res.block_depth_logic(p.buffer_bits, p.buffer_words, family, rom=False,
                                          rw="dont_care")
    return one * 2


def resource_parts(p: SeqEngineParams, family: str) -> dict[str, res.Resources]:
    """Structural parts: the buffers and memories, the loop counters and address adders,
    the descriptor (constants selected by the layer), the datapath, the requantizer."""
    gs = p.geometries
    aw = _counter(4 * p.buffer_words)
    cw = sum(_counter(max(getattr(g, k) for g in gs)) for k in ("OH", "OW", "OC", "KH", "KW",
                                                                "ICT"))
    parts: dict[str, res.Resources] = {}
    if p.spram and family == "ice40":
        L = p.load_layout
        parts["mem"] = res.Resources(spram=L.tiles, ff=_counter(L.rows) + 2,
                                     lut4=_counter(L.rows) + 2 * aw, carry=_counter(L.rows))
        parts["mem"] = parts["mem"] + (
            res.Resources(spram=2) if p.buffers_spram else _buffers(p, family))
    else:
        parts["mem"] = _buffers(p, family) + res.rom(p.weight_words(), p.w_bits, family) \
            + res.rom_depth_logic(p.weight_words(), p.w_bits, family)
    pw = p.acc_bits + p.requant.mult_bits
    parts["params"] = (res.rom(p.param_words(), pw, family)
                       + res.rom_depth_logic(p.param_words(), pw, family))
    # counters (value, end compare) and the incremental addresses (pixel, row, tap offset,
    # weight and channel addresses, row/column positions)
    adders = 5 * aw + 2 * _counter(p.weights.size + 1) + 4 * 8
    parts["ctrl"] = res.Resources(lut4=2 * cw + adders + 40, carry=cw + adders,
                                  ff=cw + adders + 12)
    parts["desc"] = res.Resources(lut4=descriptor_bits(p))
    # the layers' start values (:func:`start_bits`): each differing bit a function of the
    # layer number and one more input of its register's multiplexer
    parts["start"] = res.Resources(lut4=2 * start_bits(p))
    prod = p.buffer_bits + p.w_bits
    parts["mac"] = res.Resources(lut4=p.buffer_bits + p.w_bits + p.acc_bits,
                                 carry=p.acc_bits,
                                 ff=2 * (p.buffer_bits + p.w_bits) + prod + p.acc_bits + 12)
    rq = RequantPipeline.parts(p.requant, p.acc_bits, p.buffer_bits, 1, family,
                               spacing=p.spacing)
    parts.update(rq)
    # the late write (enable, buffer, address, word), the output's read address and count,
    # the loop's end flags and the issue flag, the runtime clamp's stage; the output stage
    ob = p.out_type.bits
    rq_v = p.acc_bits + p.requant.mult_bits - p.shift + abs(p.requant.zero_point).bit_length() + 3
    parts["out"] = res.Resources(lut4=p.buffer_bits + 2 * aw,
                                 ff=2 + 2 * aw + p.buffer_bits + _counter(p.out_elements)
                                 + len(LOOPS) + 2 + rq_v + 2)
    parts.update(output_stage.parts(ob, EMIT_DEPTH, family))
    return parts


#: calibration of the engine's control, layer start values and descriptor (the
#: requantizer's parts as calibrated on the units). ECP5: ``ctrl`` and ``start`` are their
#: own LUT4s in Yosys's netlist (those feeding the counters', positions' and addresses'
#: registers), least squares on the two examples, six more engines of one, two and four
#: layers and the 8-bit TFC's engine; iCE40: on the totals of those engines and DS-CNN's
#: (SPRAM weights); carry and flip-flops from DS-CNN and the TFC
ENGINE_FIT: res.Fit = res.merge_fits(LANE_FIT, {
    "ice40": {"lut4": {"ctrl": 1.487, "start": 0.861, "desc": 1.629}, "carry": {"ctrl": 1.38},
              "ff": {"ctrl": 0.29}},
    "ecp5": {"lut4": {"ctrl": 1.08, "start": 1.06, "desc": 0.1}, "carry": {"ctrl": 0.69},
             "ff": {"ctrl": 0.83}},
})


def multiplies(p: SeqEngineParams) -> dict[Mul, int]:
    mac = {Mul(p.buffer_bits, True, p.w_bits, True): 1}
    rq = unsigned_muls(RequantPipeline.multiplies(p.requant, p.acc_bits, 1,
                                                  spacing=p.spacing))
    for k, v in rq.items():
        mac[k] = mac.get(k, 0) + v
    return mac


def cost(p: SeqEngineParams) -> Cost:
    # the next frame's first input the cycle after the last output
    cycles = p.in_elements + p.compute_cycles + EMIT_DELAY - 1 + p.out_elements
    bits = (2 * p.buffer_bits * p.buffer_words + p.w_bits * p.weights.size
            + len(p.param_words()) * (p.acc_bits + p.requant.mult_bits))
    muls = multiplies(p)
    by_family, parts = {}, {}
    for f in ("ecp5", "ice40"):
        parts[f] = resource_parts(p, f)
        by_family[f] = res.fitted(parts[f], ENGINE_FIT.get(f)).rounded()
    regs = round(sum(r.ff for r in by_family.values()) / 2)
    _, last = timing(p, 0, p.in_elements - 1)
    return Cost(cycles=cycles, latency=last + 1, multipliers=1, memory_bits=bits,
                registers=regs, multiplier_widths=[(p.buffer_bits, p.w_bits)],
                multiplies=muls, by_family=by_family, parts=parts)


# ---------------------------------------------------------------------------- hardware

def address_shape(p: SeqEngineParams):
    """Signed shape of the input addresses and their steps (beyond the map with padding)."""
    span = max((g.H + g.KH * g.DH) * (g.W + g.KW * g.DW) * g.C for g in p.geometries)
    return signed(_counter(4 * max(span, p.buffer_words)) + 1)


def position_shape(p: SeqEngineParams):
    """Signed shape of the input rows and columns a window reaches (padding included)."""
    return signed(_counter(max(max(g.H, g.W) + max(g.KH * g.DH, g.KW * g.DW)
                               + max(g.top, g.left) for g in p.geometries)) + 2)


def descriptor(p: SeqEngineParams) -> list[tuple[str, object, list[int]]]:
    """The fields of the layer descriptor: (name, shape, one value per layer). The hardware
    selects them by the layer number; a field equal in every layer is a constant."""
    gs, A, P = p.geometries, address_shape(p), position_shape(p)
    rq = p.requant
    zb = abs(rq.zero_point).bit_length() + 1
    lohi = signed(signed_width(rq.lo, rq.hi))
    nw, nch = max(1, p.weights.size), max(1, len(p.biases))

    def bits(attr):
        return unsigned(_counter(max(getattr(g, attr) for g in gs)))
    rqs = [x.unit.requant for x in p.layers]
    loops = [(k, bits(k), [getattr(g, k) for g in gs]) for k in LOOPS]
    return [
        *((f"{k}m2", w, [max(v - 2, 0) for v in vs]) for k, w, vs in loops),
        *((f"{k}1", unsigned(1), [int(v == 1) for v in vs]) for k, w, vs in loops),
        ("OHm1", bits("OH"), [g.OH - 1 for g in gs]),
        ("OWm1", bits("OW"), [g.OW - 1 for g in gs]),
        ("OCm1", bits("OC"), [g.OC - 1 for g in gs]),
        ("KHm1", bits("KH"), [g.KH - 1 for g in gs]),
        ("KWm1", bits("KW"), [g.KW - 1 for g in gs]),
        ("ICTm1", bits("ICT"), [g.ICT - 1 for g in gs]),
        ("H", P, [g.H for g in gs]),
        ("W", P, [g.W for g in gs]),
        ("DH", P, [g.DH for g in gs]),
        ("DW", P, [g.DW for g in gs]),
        ("SH", P, [g.SH for g in gs]),
        ("SW", P, [g.SW for g in gs]),
        ("top", P, [-g.top for g in gs]),
        ("left", P, [-g.left for g in gs]),
        ("step_kx", A, [g.DW * g.C - (g.ICT - 1) for g in gs]),
        ("step_ky", A, [g.DH * g.W * g.C - (g.KW - 1) * g.DW * g.C - (g.ICT - 1)
                        for g in gs]),
        ("step_ox", A, [g.SW * g.C for g in gs]),
        ("step_oy", A, [g.SH * g.W * g.C for g in gs]),
        ("pix0", A, [(-g.top * g.W - g.left) * g.C for g in gs]),
        ("dw", unsigned(1), [int(g.depthwise) for g in gs]),
        ("ones", unsigned(1), [int(g.ones) for g in gs]),
        ("pad", signed(p.buffer_bits), [g.pad_value for g in gs]),
        ("wbase", unsigned(_counter(nw)), list(p.weight_bases)),
        ("pbase", unsigned(_counter(nch)), list(p.channel_bases)),
        ("outm2", unsigned(_counter(p.buffer_words)), [max(g.out_elements - 2, 0) for g in gs]),
        ("zs", signed(zb + rq.shift + 1), [(r.zero_point << p.shift) if r.zp_first else 0
                                           for r in rqs]),
        ("zp", signed(zb), [0 if r.zp_first else r.zero_point for r in rqs]),
        ("lo", lohi, [r.lo for r in rqs]),
        ("hi", lohi, [r.hi for r in rqs]),
    ]


def descriptor_bits(p: SeqEngineParams) -> int:
    """Bits of the descriptor that differ between layers (each a function of the layer
    number: one LUT4 up to 16 layers)."""
    out = 0
    for _, shape, values in descriptor(p):
        w = Shape.cast(shape).width
        raw = [v & ((1 << w) - 1) for v in values]
        out += sum(1 for b in range(w) if len({(v >> b) & 1 for v in raw}) > 1)
    return out


def start_bits(p: SeqEngineParams) -> int:
    """Bits of the values a layer starts its positions and addresses from (``start_layer``:
    the row and column bases, the pixel and row addresses, the weight and channel bases)
    that differ between layers; equal in every layer they are constants."""
    start = {name: values for name, _, values in descriptor(p)}
    A, P = Shape.cast(address_shape(p)).width, Shape.cast(position_shape(p)).width
    fields = [(start["top"], P), (start["left"], P), (start["pix0"], A), (start["pix0"], A),
              (list(p.weight_bases), _counter(max(1, p.weights.size) - 1)),
              (list(p.channel_bases), _counter(max(1, len(p.biases)) - 1))]
    out = 0
    for values, w in fields:
        raw = [v & ((1 << w) - 1) for v in values]
        out += sum(1 for b in range(w) if len({(v >> b) & 1 for v in raw}) > 1)
    return out


def _buffer(m: Module, name: str, p: SeqEngineParams):
    """A feature-map buffer read or written at one address per cycle; in SPRAM without an
    initial content (``spram.strip_load_init`` removes it by the name)."""
    big = p.buffers_spram
    attrs = {"ram_style": "huge", "no_rw_check": 1} if big else {"no_rw_check": 1}
    mem = Memory(shape=p.buffer_bits, depth=p.buffer_words, init=[], attrs=attrs)
    m.submodules[f"{name}_{MARK}" if big else name] = mem
    wr, rd = mem.write_port(), mem.read_port()
    addr = Signal(range(max(p.buffer_words, 2)), name=f"{name}_addr")
    m.d.comb += [wr.addr.eq(addr), rd.addr.eq(addr)]
    return addr, wr, rd


class SeqEngine(wiring.Component):
    """The engine of :class:`SeqEngineParams` (module notes)."""

    def __init__(self, p: SeqEngineParams):
        self.p = p
        members = {"i": In(stream.Signature(unsigned(p.in_type.bits))),
                   "o": Out(stream.Signature(unsigned(p.out_type.bits)))}
        if p.spram:     # the weight-load stream through the block, and its weights' state
            members.update(load_ports())
        super().__init__(members)

    def elaborate(self, platform):
        p = self.p
        m = Module()
        gs = p.geometries
        L = len(gs)
        BB, WB, AB = p.buffer_bits, p.w_bits, p.acc_bits
        A, P = address_shape(p), position_shape(p)
        nw = max(1, p.weights.size)
        nch = max(1, len(p.biases))

        # ---- the layer's descriptor: constants selected by the layer number
        layer = Signal(range(max(L, 2)), name="layer")
        table = descriptor(p)
        start = {name: values for name, _, values in table}   # the values a layer starts from
        fields = [(Signal(shape, name=f"d_{name}_sel"), values) for name, shape, values in table]
        # registered (the layer's steps start a cycle after its number is set: SETUP), so the
        # loop's compares and steps start at flip-flops, not at the selection's logic
        d = {s.name[2:-4]: reg(m, s, s.shape(), s.name[:-4]) for s, _ in fields}
        rq = p.requant
        lohi = signed(signed_width(rq.lo, rq.hi))
        with m.Switch(layer):
            for k in range(L):
                with m.Case(k):
                    m.d.comb += [s.eq(v[k]) for s, v in fields]

        # ---- memories
        a0, wr0, rd0 = _buffer(m, "fm0", p)
        a1, wr1, rd1 = _buffer(m, "fm1", p)
        if p.spram:
            w_addr, w_data, loaded = loaded_memory(m, "wmem", p.load_layout, self.wl_i,
                                                   self.wl_o)
            m.d.comb += self.loaded.eq(loaded)
        else:
            w_rd, = rom(m, "wrom", width=WB, init=p.weight_words())
            w_addr, w_data, loaded = w_rd.addr, w_rd.data, Const(1, 1)
        pwords = p.param_words()
        p_rd, = rom(m, "prom", width=AB + rq.mult_bits, init=pwords)

        # ---- phases
        LOAD, SETUP, RUN, EMIT = range(4)
        phase = Signal(range(4), name="phase")
        done = Signal(name="done")          # the last layer has written its last output
        odd = Signal(name="odd")            # the layer reads buffer 1 (writes buffer 0)

        # ---- loop counters (stage 0)
        def ctr(name, like):
            return Signal(len(like), name=name)
        oy, ox, oc = ctr("oy", d["OHm1"]), ctr("ox", d["OWm1"]), ctr("oc", d["OCm1"])
        ky, kx, ic = ctr("ky", d["KHm1"]), ctr("kx", d["KWm1"]), ctr("ic", d["ICTm1"])
        by, bx = Signal(P, name="by"), Signal(P, name="bx")       # oy·SH - top, ox·SW - left
        ty, tx = Signal(P, name="ty"), Signal(P, name="tx")       # ky·DH, kx·DW
        row, pix = Signal(A, name="row"), Signal(A, name="pix")   # (by·W + bx)·C at ox 0 / now
        toff = Signal(A, name="toff")                             # (ty·W + tx)·C + ic
        wa = Signal(range(max(nw, 2)), name="wa")
        pa = Signal(range(max(nch, 2)), name="pa")

        # each counter's "at its last value" as a register of its own (set from the compare
        # with the bound less one as the counter steps): the loop's carries start at
        # flip-flops, not at six compares
        ends = {k: Signal(name=f"end_{c.name}") for k, c in zip(LOOPS, (ic, kx, ky, oc, ox, oy))}
        end_ic, end_kx, end_ky = ends["ICT"], ends["KW"], ends["KH"]
        end_oc, end_ox, end_oy = ends["OC"], ends["OW"], ends["OH"]
        tap_end = end_ic & end_kx & end_ky
        layer_end = tap_end & end_oc & end_ox & end_oy
        first0 = (ic == 0) & (kx == 0) & (ky == 0)

        iy, ix = Signal(P, name="iy"), Signal(P, name="ix")
        addr0 = Signal(A, name="addr0")
        m.d.comb += [iy.eq(by + ty), ix.eq(bx + tx),
                     addr0.eq(pix + toff + Mux(d["dw"], oc, 0))]
        outside = (iy < 0) | (iy >= d["H"]) | (ix < 0) | (ix >= d["W"])
        # a step issues in every cycle of RUN: a flip-flop of its own (it enables every counter)
        issue = Signal(name="issue")

        def restart(k: int):
            """Counters at the start of layer ``k``."""
            g = gs[k]
            return [oy.eq(0), ox.eq(0), oc.eq(0), ky.eq(0), kx.eq(0), ic.eq(0), ty.eq(0),
                    tx.eq(0), toff.eq(0)] + [ends[n].eq(int(getattr(g, n) == 1)) for n in LOOPS]

        def step(c, n):
            """Counter ``c`` of loop ``n`` steps on (its end flag from the bound less two)."""
            return [c.eq(c + 1), ends[n].eq(c == d[f"{n}m2"])]

        def wrap(c, n):
            return [c.eq(0), ends[n].eq(d[f"{n}1"])]

        with m.If(issue & layer_end):       # the layer's last step
            m.d.sync += issue.eq(0)
        with m.If(issue):
            with m.If(~end_ic):
                m.d.sync += [*step(ic, "ICT"), toff.eq(toff + 1)]
            with m.Elif(~end_kx):
                m.d.sync += [*wrap(ic, "ICT"), *step(kx, "KW"), tx.eq(tx + d["DW"]),
                             toff.eq(toff + d["step_kx"])]
            with m.Elif(~end_ky):
                m.d.sync += [*wrap(ic, "ICT"), *wrap(kx, "KW"), tx.eq(0), *step(ky, "KH"),
                             ty.eq(ty + d["DH"]), toff.eq(toff + d["step_ky"])]
            with m.Else():
                m.d.sync += [*wrap(ic, "ICT"), *wrap(kx, "KW"), *wrap(ky, "KH"), tx.eq(0),
                             ty.eq(0), toff.eq(0)]
                with m.If(~end_oc):
                    m.d.sync += [*step(oc, "OC"), pa.eq(pa + 1)]
                with m.Else():
                    m.d.sync += [*wrap(oc, "OC"), pa.eq(d["pbase"])]
                    with m.If(~end_ox):
                        m.d.sync += [*step(ox, "OW"), bx.eq(bx + d["SW"]),
                                     pix.eq(pix + d["step_ox"])]
                    with m.Else():
                        m.d.sync += [*wrap(ox, "OW"), bx.eq(d["left"]), *step(oy, "OH"),
                                     by.eq(by + d["SH"]), row.eq(row + d["step_oy"]),
                                     pix.eq(row + d["step_oy"])]
            with m.If(tap_end & end_oc):
                m.d.sync += wa.eq(d["wbase"])
            with m.Else():
                m.d.sync += wa.eq(wa + 1)

        # ---- datapath: t+1 addresses, t+2 words, t+3 operands, t+4 product, t+5 sum
        v1 = reg(m, issue, unsigned(1), "v1")
        first1 = reg(m, first0, unsigned(1), "first1")
        last1 = reg(m, tap_end, unsigned(1), "last1")
        pad1 = reg(m, outside, unsigned(1), "pad1")
        ra1 = reg(m, addr0[:len(a0)], unsigned(len(a0)), "ra1")
        wa1 = reg(m, wa, unsigned(len(wa)), "wa1")
        pa1 = reg(m, pa, unsigned(len(pa)), "pa1")
        m.d.comb += w_addr.eq(wa1)
        v2, first2, last2, pad2 = (delay(m, s, 1, f"{s.name}_") for s in (v1, first1, last1,
                                                                           pad1))
        pa2 = delay(m, pa1, 1, "pa2")
        rdata = Mux(odd, rd1.data, rd0.data).as_signed()
        x3 = reg(m, Mux(pad2, d["pad"], rdata), signed(BB), "x3")
        w3 = reg(m, Mux(d["ones"], 1, w_data.as_signed()), signed(WB), "w3")
        v3, first3, last3 = (delay(m, s, 1, f"{s.name}_") for s in (v2, first2, last2))
        pa3 = delay(m, pa2, 1, "pa3")
        prod4 = reg(m, x3 * w3, signed(BB + WB), "prod4")
        v4, first4, last4 = (delay(m, s, 1, f"{s.name}_") for s in (v3, first3, last3))
        m.d.comb += p_rd.addr.eq(delay(m, pa3, 1, "pa4"))
        acc = Signal(signed(AB), name="acc", reset_less=True)
        with m.If(v4):
            m.d.sync += acc.eq(Mux(first4, prod4, acc + prod4))
        done5 = reg(m, v4 & last4, unsigned(1), "done5")
        bias5 = p_rd.data[:AB].as_signed()
        mult5 = p_rd.data[AB:]
        rt = RuntimeRequant(d["zs"], d["zp"], d["lo"], d["hi"])
        rqp = RequantPipeline(m, done5, [acc], [bias5], mult5, rq, AB, BB,
                              spacing=p.spacing, rt=rt)
        result = Signal(lohi, name="result")         # the clamped value, sign-extended below
        m.d.comb += result.eq(rqp.data)

        # ---- writes of the layer's results and of the input, a cycle late from registers
        # (the buffers' address multiplexer then selects by a flip-flop); the output
        oaddr = Signal(range(max(p.buffer_words, 2)), name="oaddr")
        at_last = Signal(name="at_last")    # oaddr is the layer's last output
        wen = Signal(name="wen")
        wdata = Signal(BB, name="wdata")
        to1 = Signal(name="to1")            # the write goes to buffer 1
        wen_r = reg(m, wen, unsigned(1), "wen_r")
        to1_r = reg(m, to1, unsigned(1), "to1_r")
        waddr_r = reg(m, oaddr, oaddr.shape(), "waddr_r")
        wdata_r = reg(m, wdata, unsigned(BB), "wdata_r")
        emitting = Signal(name="emitting")
        # counts to out_elements, which is buffer_words when the last layer's output is the
        # largest tensor: one more value than a buffer address
        eaddr = Signal(range(max(p.buffer_words, 2) + 1), name="eaddr")
        rd_addr = Signal.like(oaddr, name="rd_addr")
        m.d.comb += [wr0.data.eq(wdata_r), wr1.data.eq(wdata_r),
                     wr0.en.eq(wen_r & ~to1_r), wr1.en.eq(wen_r & to1_r),
                     a0.eq(Mux(wen_r & ~to1_r, waddr_r, rd_addr)),
                     a1.eq(Mux(wen_r & to1_r, waddr_r, rd_addr)),
                     rd_addr.eq(Mux(emitting, eaddr, ra1))]
        take = Signal(name="take")
        m.d.comb += [self.i.ready.eq((phase == LOAD) & loaded),
                     take.eq(self.i.valid & self.i.ready)]
        in_val = (self.i.payload.as_signed() if p.in_type.signed else self.i.payload)
        last_layer = layer == L - 1

        # the output: the last layer's buffer read in order into the output stage, as credits
        # allow (the read address is a register; o.valid never depends on o.ready)
        out = output_stage.OutputStage(m, self.o, p.out_type.bits, EMIT_DEPTH)
        ereq = Signal(name="ereq")
        m.d.comb += ereq.eq(emitting & out.room & (eaddr != p.out_elements))
        out.spend(ereq)
        out.write(Mux(odd, rd1.data, rd0.data)[:p.out_type.bits],
                  reg(m, ereq, unsigned(1), "ereq1"))
        sent = Signal(range(max(p.out_elements, 2)), name="sent")

        def start_layer(k: int):
            """Counters and positions at the start of layer ``k``."""
            g = gs[k]
            return restart(k) + [
                by.eq(start["top"][k]), bx.eq(start["left"][k]),
                row.eq(start["pix0"][k]), pix.eq(start["pix0"][k]),
                wa.eq(p.weight_bases[k]), pa.eq(p.channel_bases[k]),
                at_last.eq(int(g.out_elements == 1))]

        with m.Switch(phase):
            with m.Case(LOAD):
                m.d.comb += [wen.eq(take), to1.eq(0), wdata.eq(in_val)]
                with m.If(take):
                    with m.If(oaddr == p.in_elements - 1):
                        m.d.sync += [oaddr.eq(0), phase.eq(SETUP), layer.eq(0), odd.eq(0)]
                        m.d.sync += start_layer(0)
                    with m.Else():
                        m.d.sync += oaddr.eq(oaddr + 1)
            with m.Case(SETUP):
                m.d.sync += [phase.eq(Mux(done, EMIT, RUN)), issue.eq(~done)]
                with m.If(done):
                    m.d.sync += [emitting.eq(1), eaddr.eq(0)]
            with m.Case(RUN):        # steps issue until the layer's last, then it drains
                m.d.comb += [wen.eq(rqp.valid), to1.eq(~odd), wdata.eq(result)]
                with m.If(rqp.valid):
                    with m.If(at_last):
                        m.d.sync += [oaddr.eq(0), phase.eq(SETUP), odd.eq(~odd)]
                        with m.If(last_layer):
                            m.d.sync += done.eq(1)
                        with m.Else():
                            m.d.sync += layer.eq(layer + 1)
                            with m.Switch(layer):
                                for k in range(L - 1):
                                    with m.Case(k):
                                        m.d.sync += start_layer(k + 1)
                    with m.Else():
                        m.d.sync += [oaddr.eq(oaddr + 1), at_last.eq(oaddr == d["outm2"])]
            with m.Case(EMIT):
                with m.If(ereq):
                    m.d.sync += eaddr.eq(eaddr + 1)
                with m.If(self.o.valid & self.o.ready):
                    with m.If(sent == p.out_elements - 1):
                        m.d.sync += [sent.eq(0), phase.eq(LOAD), emitting.eq(0), done.eq(0),
                                     odd.eq(0)]
                    with m.Else():
                        m.d.sync += sent.eq(sent + 1)
        return m


# ---------------------------------------------------------------------------- registration

def manifest(p: SeqEngineParams) -> dict:
    out = {"layers": [{"name": x.name, "kind": x.unit.__class__.__name__.replace(
        "Params", "").lower(), "taps": g.taps, "outputs": g.out_elements}
        for x, g in zip(p.layers, p.geometries)],
        "weights": int(p.weights.size), "buffer_words": p.buffer_words}
    if p.spram:
        out["spram"] = True
    return out


def fold_space(p: SeqEngineParams):
    return fixed_fold(cost(p).cycles)



def examples() -> list[Example]:
    """Small instances for the conformance test: one pointwise layer; a padded strided
    convolution, a depthwise 3×3, a global average and a fully connected layer in a chain."""
    u8, i8 = QType(8, False), QType(8, True)
    rng = np.random.default_rng(13)

    def rq(n, o, zp, scale):
        return make_requant(rng.uniform(0.5, 1.5, n) * scale, zp, o.lo, o.hi)

    def pw(shape, oc, t, o):
        h, w, c = shape
        unit = MVAUParams(rng.integers(-127, 128, (oc, c)), rng.integers(-900, 900, oc),
                          rq(oc, o, 0, 50.0 / (7300 * np.sqrt(c))), t, o, vectors=h * w)
        return SeqLayer(f"pw{len(layers)}", unit), (h, w, oc)

    out = []
    layers: list[SeqLayer] = []
    layers.append(pw((2, 2, 3), 4, i8, u8)[0])
    p = SeqEngineParams(tuple(layers))
    out.append(Example(p, (Port(p.in_type, 1, p.in_elements),),
                       (Port(p.out_type, 1, p.out_elements),), "pw"))
    layers = []
    conv = SWGParams((5, 4, 2), (3, 3), (2, 1), (1, 1, 1, 0), 17, u8)
    oh, ow = conv.out_shape
    layers.append(SeqLayer("conv", MVAUParams(
        rng.integers(-127, 128, (3, 18)), rng.integers(-3000, 3000, 3),
        rq(3, u8, 5, 50.0 / (7300 * np.sqrt(18))), u8, u8, vectors=oh * ow), conv))
    dw = SWGParams((oh, ow, 3), (3, 3), (1, 1), (1, 1, 1, 1), 0, u8, depthwise=True)
    layers.append(SeqLayer("dw", VVAUParams(
        rng.integers(-127, 128, (3, 9)), rng.integers(-500, 500, 3),
        rq(3, u8, 0, 50.0 / (7300 * 3)), u8, u8, pixels=oh * ow), dw))
    layers.append(SeqLayer("gap", GAPParams(3, oh * ow, make_requant(1.0 / (oh * ow), 3, 0, 255),
                                            u8, u8)))
    layers.append(SeqLayer("fc", MVAUParams(
        rng.integers(-127, 128, (2, 3)), rng.integers(-900, 900, 2),
        rq(2, i8, 0, 50.0 / (7300 * np.sqrt(3))), u8, i8, vectors=1)))
    p = SeqEngineParams(tuple(layers))
    out.append(Example(p, (Port(p.in_type, 1, p.in_elements),),
                       (Port(p.out_type, 1, p.out_elements),), "conv-dw-gap-fc"))
    return out


register_block("seq_engine", params=SeqEngineParams, component=SeqEngine, golden=golden,
               cost=cost, timing=timing, manifest=manifest, fold_space=fold_space,
               examples=examples)
