"""Vector–vector unit (VVAU): depthwise convolution on a window stream, folded by PE
(channels) and SIMD (kernel positions).

Per output pixel and output channel ``o = c*M + j`` (``M`` outputs per input channel ``c``,
the channel multiplier; ``j < M``)::

    out[o] = requant( sum_k w[o, k] * x[c, k] + bias[o] ),   k = kh*KW + kw < K = KH*KW

Stream contract
    ``i``: the sliding-window generator's depthwise order. For each output pixel (raster
    order), for each channel block ``cb < NB = C/PE`` (channels ``c = cb*PE + ci``), the K
    kernel positions in raster order, ``SIMD`` positions of PE channels per beat (``KB =
    K/SIMD`` beats): flat element index ``((cb*K + k)*PE + ci)`` within the pixel, element
    ``e`` of a beat in bits ``[e*in_bits, (e+1)*in_bits)``. So a pixel is ``KB*NB`` beats
    (:func:`windows_to_stream` builds the flat order; ``swg`` emits it for SIMD = 1, the
    window-parallel ``swg_par`` with ``depthwise_pe = PE`` for any SIMD).
    ``o``: channel-last, PE*M channels per beat (the outputs of the beat's PE input
    channels, in order), ``NB`` beats per pixel.
    Elements are two's complement when their type is signed. One frame = ``pixels`` output
    pixels (OH*OW). Padding positions must carry the input zero point (real 0.0): the bias
    holds the input zero-point correction ``-z_in * sum_k w[c, k]`` for every position.

Schedule
    One step per input beat: PE*M*SIMD multiplies (input channel lane ``ci`` feeds output
    lanes ``ci*M .. ci*M + M - 1``), summed over the SIMD positions by an adder tree, then
    accumulated. Every KB-th step completes an output beat.
    The unit takes one beat per cycle, so a frame takes ``pixels*KB*NB`` cycles.

Pipeline (a step issued in cycle t; the structure of :mod:`rtl_templates.mvau`)
    t+1: the weights of (cb, kb) arrive from their ROM; PE*M*SIMD products, the adder tree
         over SIMD (:func:`~rtl_templates.pipeline.tree_stages` more stages)
    t+2: accumulate; on the last kernel position the sum moves on and the channel block's
         bias/multiplier are read
    t+3: add bias      t+4: multiply by the fixed-point multiplier
    t+5: round half to even, add zero point, clamp → output FIFO
The last ``lut_lanes`` of the L·SIMD products (lane ``l*SIMD + s``) are built of logic cells
(:func:`~rtl_templates.lutmul.lut_mul`) instead of DSP tiles, for weights of at most 8 bits
(as deep as a tile's product with its operand registers). With ``rom_logic`` the weight ROM
carries Yosys's ``rom_style = "logic"`` (LUTs instead of block RAM, the same read).
The pipeline never stalls: a credit counter lets a step that completes an output beat issue
only while the output FIFO is sure to have room. ``valid`` on ``o`` never depends on ``ready``.

Cost
    ``cycles = pixels*KB*NB``, ``latency = cycles + pipeline_depth(p)``; with ``L = PE*M``
    lanes, L·SIMD multipliers of ``in_bits × w_bits`` and the requantizer's (L of
    ``acc_bits × mult_bits``, fewer when its sums come far enough apart);
    memory: weights ``C*M*K*w_bits``, bias/multipliers ``C*M*(acc_bits + mult_bits)``,
    output FIFO ``depth*L*out_bits``.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np
from amaranth.hdl import Cat, Module, Mux, Signal, signed, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from hwgen.rtl_templates import output_stage
from hwgen.rtl_templates import resources as res
from hwgen.rtl_templates.block import Example, FoldSpace, Port, divisors, register_block
from hwgen.rtl_templates.cost import Cost
from hwgen.rtl_templates.lutmul import (
    const_lanes,
    lane_constants,
    lut_mul,
    lut_mul_const_parts,
    lut_mul_parts,
    lut_mul_stages,
    tile_operand,
)
from hwgen.rtl_templates.memory import LOGIC, lane_rom, lane_rom_slices
from hwgen.rtl_templates.pipeline import (
    Loop,
    counter_bits,
    delay,
    reg,
    rom_counter,
    rom_counter_registers,
    tree_stages,
    tree_sum,
    tree_sum_groups,
    tree_sum_registers,
)
from hwgen.rtl_templates.quant import QType, Requant, dot_range, make_requant, signed_width
from hwgen.rtl_templates.requant import (
    LANE_FIT,
    RequantPipeline,
    channel_params,
    late_mult,
    param_memories,
)
from hwgen.rtl_templates.resources import (
    Mul,
    add_muls,
    bias_live,
    merge_fits,
    param_live,
    rom_live,
    unsigned_muls,
)
from hwgen.rtl_templates.words import lanes, pack_word

#: registers from the operands to a lane's product register (a tile's operand registers
#: and product; a product in logic is as deep for weights of at most 8 bits)
LUT_PROD_STAGES = 2


@dataclass(frozen=True)
class VVAUPlan:
    """The unit's structure, computed once from its parameters (:func:`plan`): what
    :meth:`VVAU.elaborate` builds and :func:`resource_parts`, :func:`cost` and
    :func:`timing` count."""
    #: registers from the issue register (stage 1) to a lane's sum over its SIMD positions:
    #: the operands once more (the weight memory's data is slow), a tile's operand and
    #: product registers and one more, then the adder tree
    operand: int
    #: cycles from issuing the last step of an output beat to that beat's output transfer:
    #: the issue register, :attr:`operand`, the accumulator and the sum's register, the
    #: requantizer and the output stage
    depth: int
    #: the output FIFO's beats (:func:`output_stage.fifo_depth`)
    fifo_depth: int
    #: the weight ROM's pieces (:func:`~rtl_templates.memory.lane_rom_slices`), each read
    #: through a kept copy of the step counter (:func:`~rtl_templates.pipeline.rom_counter`)
    weight_slices: tuple[tuple[int, int], ...]
    #: (non-constant, distinct non-constant) bit columns of each piece
    weight_columns: tuple[tuple[int, int], ...]
    #: a piece of the weight ROM is block RAM: its read data is registered once more
    #: (``w0``, the input alike) before the operand registers, so the tile's operand is not
    #: the RAM's output register (the two are hard tiles often far apart)
    weights_in_bram: bool = False

    @property
    def rom_copies(self) -> int:
        return len(self.weight_slices)


def plan(p: VVAUParams) -> VVAUPlan:
    """The unit's :class:`VVAUPlan` (cached on ``p``: :attr:`VVAUParams.plan`)."""
    wb, w = p.w_bits, p.weight_rows()
    whole = rom_live(w, wb)
    slices = tuple(lane_rom_slices(p.simd * p.lanes, wb, p.nb * p.kernel_beats, whole[0],
                                   logic=p.rom_logic))
    columns = (whole,) if len(slices) == 1 else tuple(
        rom_live(w[:, lo // wb:hi // wb], wb) for lo, hi in slices)
    in_bram = not p.rom_logic and res.rom_in_bram(columns, p.nb * p.kernel_beats)
    operand = 4 + tree_stages(p.simd) + int(in_bram)
    depth = (1 + operand + 2 + output_stage.latency(registered=True)
             + RequantPipeline.depth(p.requant, p.acc_bits, spacing=p.kernel_beats))
    return VVAUPlan(operand=operand, depth=depth, fifo_depth=output_stage.fifo_depth(depth),
                    weight_slices=slices, weight_columns=columns, weights_in_bram=in_bram)


def pipeline_depth(p: VVAUParams) -> int:
    """Cycles from the last step of an output beat to that beat's output transfer
    (:attr:`VVAUPlan.depth`)."""
    return p.plan.depth


# ---------------------------------------------------------------------------- layout

def windows_to_stream(windows: np.ndarray, pe: int) -> np.ndarray:
    """``windows`` [..., pixels, C, K] → the depthwise stream [..., pixels*C*K], element order
    (pixel, cb, k, ci) with ``c = cb*pe + ci``."""
    w = np.asarray(windows)
    *lead, pixels, c, k = w.shape
    if c % pe:
        raise ValueError(f"PE={pe} does not divide {c} channels")
    w = w.reshape(*lead, pixels, c // pe, pe, k)
    w = np.swapaxes(w, -1, -2)                       # [..., pixels, NB, K, PE]
    return w.reshape(*lead, pixels * c * k)


def stream_to_windows(x: np.ndarray, pixels: int, channels: int, kernel: int,
                      pe: int) -> np.ndarray:
    """Inverse of :func:`windows_to_stream`: [..., pixels*C*K] → [..., pixels, C, K]."""
    x = np.asarray(x)
    lead = x.shape[:-1]
    if x.shape[-1] != pixels * channels * kernel:
        raise ValueError(f"a frame of {x.shape[-1]} elements is not {pixels} pixels x "
                         f"{channels} channels x {kernel} kernel positions")
    w = x.reshape(*lead, pixels, channels // pe, kernel, pe)
    return np.swapaxes(w, -1, -2).reshape(*lead, pixels, channels, kernel)


# ---------------------------------------------------------------------------- params

@dataclass(frozen=True, eq=False)
class VVAUParams:
    """Everything that defines one VVAU instance."""
    weights: np.ndarray      # [C*M, K] int (K = KH*KW raster order; weight zero point
    #                          subtracted); row o = c*M + j: output j of input channel c
    bias: np.ndarray         # [C*M] int (includes the input zero-point correction)
    requant: Requant         # per tensor (1 multiplier) or per output channel (C*M)
    in_type: QType
    out_type: QType
    pe: int = 1
    pixels: int = 1          # output pixels per frame (OH*OW)
    multiplier: int = 1      # M: output channels per input channel
    simd: int = 1            # kernel positions per beat (a divisor of K)
    # products built of logic cells instead of DSP tiles (the last lanes)
    lut_lanes: int = field(default=0, metadata={"digest": "omit_default"})
    #: the weight ROM is built of logic cells (LUTs) instead of block RAM
    rom_logic: bool = field(default=False, metadata={"digest": "omit_default"})

    def __post_init__(self):
        if np.ndim(self.weights) != 2:
            raise ValueError("weights must be [C*M, K]")
        co, _ = self.weights.shape
        if self.multiplier < 1 or co % self.multiplier:
            raise ValueError(f"the channel multiplier {self.multiplier} does not divide the "
                             f"{co} weight rows")
        if np.shape(self.bias) != (co,):
            raise ValueError(f"bias must have {co} elements")
        c = co // self.multiplier
        if self.pe < 1 or c % self.pe:
            raise ValueError(f"PE={self.pe} does not divide the {c} channels")
        if self.pixels < 1:
            raise ValueError("a frame needs at least one pixel")
        if self.simd < 1 or self.weights.shape[1] % self.simd:
            raise ValueError(f"SIMD={self.simd} does not divide the {self.weights.shape[1]} "
                             f"kernel positions")
        if len(self.requant.mult) not in (1, co):
            raise ValueError("requantizer multipliers must be per tensor or per channel")
        if not 0 <= self.lut_lanes <= self.lanes * self.simd:
            raise ValueError(f"lut_lanes={self.lut_lanes} is not within the "
                             f"{self.lanes * self.simd} products")
        if self.lut_lanes and lut_mul_stages(self.w_bits) > LUT_PROD_STAGES:
            raise ValueError(f"lut_lanes needs weights of at most 8 bits (not "
                             f"{self.w_bits})")

    @property
    def channels(self) -> int:
        """Input channels C."""
        return self.weights.shape[0] // self.multiplier

    @property
    def out_channels(self) -> int:
        return self.weights.shape[0]

    @property
    def lanes(self) -> int:
        """Output lanes (elements per output beat): PE*M."""
        return self.pe * self.multiplier

    @property
    def kernel(self) -> int:
        return self.weights.shape[1]

    @property
    def kernel_beats(self) -> int:
        """Beats per channel block of a window: KB = K/SIMD."""
        return self.kernel // self.simd

    @property
    def in_per_beat(self) -> int:
        return self.pe * self.simd

    @property
    def nb(self) -> int:
        """Channel blocks (output beats) per pixel."""
        return self.channels // self.pe

    @property
    def in_elements(self) -> int:
        return self.pixels * self.channels * self.kernel

    @property
    def out_elements(self) -> int:
        return self.pixels * self.out_channels

    @property
    def w_bits(self) -> int:
        w = self.weights
        return signed_width(int(w.min(initial=0)), int(w.max(initial=0)))

    @property
    def acc_bounds(self) -> tuple[int, int]:
        """Exact bounds of every partial sum and of sum + bias (interval arithmetic)."""
        # every term's range contains 0 (QType ranges do), so partial sums stay inside too
        lo, hi = dot_range(self.weights, self.in_type.lo, self.in_type.hi)
        b = np.asarray(self.bias, dtype=np.int64)
        return (int(min(lo.min(), (lo + b).min(), 0)), int(max(hi.max(), (hi + b).max(), 0)))

    @property
    def acc_bits(self) -> int:
        return signed_width(*self.acc_bounds)

    def weight_rows(self) -> np.ndarray:
        """The weight memory's words as rows: [NB·K words, S·L lanes] (lane s·L + l)."""
        NB, K, L, S = self.nb, self.kernel_beats, self.lanes, self.simd
        return np.asarray(self.weights).reshape(NB, L, K, S).transpose(0, 2, 3, 1) \
            .reshape(NB * K, S * L)

    @functools.cached_property
    def plan(self) -> VVAUPlan:
        """The unit's structure (:func:`plan`)."""
        return plan(self)

    def mult_per_channel(self) -> list[int]:
        m = list(self.requant.mult)
        return m * self.out_channels if len(m) == 1 else m


# ---------------------------------------------------------------------------- golden

def golden(p: VVAUParams, x: np.ndarray) -> np.ndarray:
    """Integer semantics. ``x`` is [..., pixels*C*K] in the stream order of the input (see
    :func:`windows_to_stream`); returns [..., pixels*C*M] channel-last."""
    win = stream_to_windows(np.asarray(x, dtype=np.int64), p.pixels, p.channels, p.kernel,
                            p.pe)
    win = np.repeat(win, p.multiplier, axis=-2)           # [..., pixels, C*M, K]
    acc = (win * p.weights.astype(np.int64)).sum(axis=-1) + p.bias.astype(np.int64)
    y = p.requant.apply(acc, channel_axis=-1)
    return y.reshape(*y.shape[:-2], p.out_elements)


# ---------------------------------------------------------------------------- cost

def frame_steps(channels: int, kernel: int, pixels: int, pe: int, simd: int) -> int:
    """Cycles of a frame: per output pixel, C/PE channel blocks of K/SIMD beats (the unit's
    one cycle formula, which the depthwise convolution's fold space uses)."""
    return pixels * (kernel // simd) * (channels // pe)


def cost(p: VVAUParams) -> Cost:
    """Cycles per frame, latency of an idle unit, and resources."""
    steps = frame_steps(p.channels, p.kernel, p.pixels, p.pe, p.simd)
    L = p.lanes
    rq_tiles = RequantPipeline.multiplies(p.requant, p.acc_bits, L, spacing=p.kernel_beats)
    dot = Mul(p.in_type.bits, p.in_type.signed, p.w_bits, True,
              y_bits=min(p.in_type.bits + p.w_bits, p.acc_bits))
    muls = add_muls({dot: L * p.simd - p.lut_lanes},
                    unsigned_muls(rq_tiles))
    # a requantizer's products by a constant multiplier (the same in every word of the
    # parameter memory: per tensor, or one word) fold where they are logic: the slices of
    # a 1-bit chunk of the magnitude are no gates at all (as the MVAU's)
    soft = add_muls({dot: L * p.simd - p.lut_lanes},
                    unsigned_muls(rq_tiles) if param_columns(p)[2] else {})
    by_family, parts = res.estimate(resource_parts, p, RESOURCE_FIT, muls, soft)
    return Cost(
        cycles=steps,
        latency=timing(p, 0, steps - 1)[1] + 1,
        multipliers=L * p.simd + len(rq_tiles),
        multiplier_widths=[(p.in_type.bits, p.w_bits)] * (L * p.simd) + rq_tiles,
        multiplies=muls,
        memory_bits=p.nb * p.kernel * L * p.w_bits
        + p.nb * L * (p.acc_bits + p.requant.mult_bits)
        + p.plan.fifo_depth * L * p.out_type.bits,
        registers=max(r.ff for r in by_family.values()),
        by_family=by_family, parts=parts,
    )


#: calibration of :func:`resource_parts` (``benchmarks/resources.py --fit``)
RESOURCE_FIT: res.Fit = merge_fits(LANE_FIT, {
    "ecp5": {
        # a weight ROM in logic (rom_logic), fitted on CNV-w2a2's units and random 8-bit
        # weights (tests/blocks/test_rom_logic.py)
        "lut4": {"rom_w": 1.12,
                 "acc": 0.995, "ctl": 1.005, "fifo": 1, "mem_p": 1.003, "mem_w": 1.001,
                 "mul_logic": 0.996, "rq_front": 0.581, "rq_lanes": 21.25,
                 "rq_r24": 0.907, "rq_seq": 0.506, "rq_tail": 0.234, "1": 0, "lut_mul": 0.83},
        "carry": {"acc": 0.991, "ctl": 0.994, "fifo": 0.995, "rq_front": 1.06, "rq_lanes": 6.769,
                  "rq_prod": 0.447, "rq_r24": 1.222, "rq_seq": 0.912,
                  "rq_tail": 0.361, "1": 0, "lut_mul": 1.0},
        "ff": {"lut_mul": 0.95},
    },
    "ice40": {
        "lut4": {"acc": 0.989, "ctl": 0.998, "fifo": 0.998, "mem_p": 1, "mem_w": 0.991,
                 "mul_logic": 0.997, "rq_front": 0.967, "rq_lanes": 24.33,
                 "rq_prod": 0.508, "rq_r24": 0.681, "rq_seq": 0.639,
                 "rq_tail": 0.374, "1": 0, "lut_mul": 0.82},
        "carry": {"acc": 0.995, "ctl": 0.998, "fifo": 0.997, "rq_front": 0.969, "rq_lanes": 10.25,
                  "rq_prod": 0.441, "rq_r24": 1.18, "rq_seq": 0.94,
                  "rq_tail": 0.396, "1": 0, "lut_mul": 0.9},
        "ff": {"lut_mul": 0.95},
    },
})


def param_columns(p: VVAUParams) -> tuple[int, int, float]:
    """(non-constant, distinct non-constant) bit columns of the bias and multiplier memory,
    and the non-constant multiplier bits per lane."""
    shape = (p.nb, p.lanes)
    return param_live(np.asarray(p.bias, dtype=np.int64).reshape(shape),
                      np.asarray(p.mult_per_channel(), dtype=np.int64).reshape(shape),
                      p.acc_bits, p.requant.mult_bits)


def resource_parts(p: VVAUParams, family: str) -> dict[str, res.Resources]:
    """The unit's hardware in the resource model's parts (see :mod:`rtl_templates.resources`):
    memories, output FIFO, control, operand and product registers, accumulators and the
    requantizers."""
    PE, NB, K, L, S = p.pe, p.nb, p.kernel_beats, p.lanes, p.simd
    ib, wb, A, ob = p.in_type.bits, p.w_bits, p.acc_bits, p.out_type.bits
    cbb = counter_bits(NB)
    pl = p.plan
    shape = (NB, L)
    p_live, p_distinct, m_live = param_columns(p)
    wmem, w_reg = res.Resources(), 0
    for live, distinct in pl.weight_columns:
        part = res.memory(live, NB * K, family, rom=True, logic_width=distinct,
                          **({"style": LOGIC} if p.rom_logic else {"plain": True}))
        wmem, w_reg = wmem + part, w_reg + (live if part.bram else distinct)
    late = late_mult(p.requant)
    pmem, p_reg = param_memories(
        p_live, p_distinct, NB, family,
        (bias_live(np.asarray(p.bias, dtype=np.int64).reshape(shape), A),
         np.asarray(p.mult_per_channel(), dtype=np.int64).reshape(shape), p.requant.mult_bits,
         RequantPipeline.sequential(p.requant, A, K)) if late else None)
    # the loop counters; pipeline.rom_counter: an address per weight ROM piece and their
    # next value
    ctl_bits = counter_bits(K) + cbb + rom_counter_registers(NB * K, pl.rom_copies)
    parts = {
        "rom_w" if p.rom_logic else "mem_w": wmem, "mem_p": pmem,
        **output_stage.parts(L * ob, pl.depth, family, registered=True),
        # the valid, flags and channel block along the issue register, the operands and the
        # accumulator
        # (+4: the two loop counters' first and last flags, ``pipeline.Loop``)
        "ctl": res.Resources(ff=ctl_bits + (3 + cbb) * (2 + pl.operand) + 3, lut4=ctl_bits + 4,
                             carry=ctl_bits / 2),
        # the operand registers of lanes reading one input lane are one (merged)
        "terms": res.Resources(ff=(3 + pl.weights_in_bram) * PE * S * ib
                               + (2 + pl.weights_in_bram) * w_reg
                               + 2 * (L * S - p.lut_lanes) * (ib + wb)),
        "acc": res.accumulate(A, family) * L + res.Resources(ff=3 * L * A + p_reg),
    }
    if p.lut_lanes:     # each delayed to the tiles' product stage, then one register
        pad = LUT_PROD_STAGES - lut_mul_stages(wb)
        v = np.asarray(p.weights).reshape(NB, L, K, S)
        l_zero, l_const = const_lanes(v.min(axis=(0, 2)), v.max(axis=(0, 2)), p.lut_lanes)
        live = p.lut_lanes - l_zero - l_const
        regs = res.Resources(ff=(pad + 1) * (ib + wb))
        parts["lut_mul"] = (lut_mul_parts(ib, wb, family) + regs) * live
        parts["lut_mul_const"] = (lut_mul_const_parts(ib, wb, family) + regs) * l_const
    if S > 1:
        tw = ib + wb + 1
        tree = res.Resources()
        for ops, tbits in tree_sum_groups(S, tw):
            tbits = min(tbits + 2, A)
            tree = tree + res.add(tbits, family) + res.Resources(lut4=(ops - 2) * tbits)
        parts["tree"] = tree * L + res.Resources(ff=L * tree_sum_registers(S, tw, A))
    parts.update(RequantPipeline.parts(p.requant, A, ob, L, family, spacing=K,
                                       mult_live=round(m_live),
                                       mult_copies=L if m_live else 1, mult_late=late))
    return parts


def timing(p: VVAUParams, in_first: int, in_last: int) -> tuple[int, int]:
    """Cycles of the first and last output transfer of a frame whose first and last input
    beats were taken at ``in_first`` and ``in_last`` (output never stalled). The first output
    beat needs KB input beats (assumed to arrive one per cycle); the last follows the last
    input beat."""
    steps = p.pixels * p.kernel_beats * p.nb
    d = p.plan.depth
    out_first = in_first + p.kernel_beats - 1 + d
    out_last = max(in_last, in_first + steps - 1) + d
    return out_first, out_last


# ---------------------------------------------------------------------------- hardware

class VVAU(wiring.Component):
    """The depthwise vector–vector unit. See the module documentation for the contract."""

    def __init__(self, p: VVAUParams):
        self.p = p
        super().__init__({
            "i": In(stream.Signature(unsigned(p.in_per_beat * p.in_type.bits))),
            "o": Out(stream.Signature(unsigned(p.lanes * p.out_type.bits))),
        })

    def elaborate(self, platform):
        p = self.p
        m = Module()
        PE, NB, K, L, M, S = p.pe, p.nb, p.kernel_beats, p.lanes, p.multiplier, p.simd
        ib, wb, ob = p.in_type.bits, p.w_bits, p.out_type.bits
        acc_w = p.acc_bits
        rq = p.requant
        mult_w = rq.mult_bits

        # --- memories: weights word (cb, kb) holds positions s, output lanes l (s*L + l);
        # bias/multiplier word cb --
        wwords = [pack_word(p.weights[cb * L:(cb + 1) * L, kb * S:(kb + 1) * S].T.reshape(-1),
                            wb)
                  for cb in range(NB) for kb in range(K)]
        pl = p.plan
        w_rds = lane_rom(m, "wmem", S * L * wb, wwords, list(pl.weight_slices),
                         logic=p.rom_logic)
        w_data = Cat(*(r.data for r in w_rds))


        # --- output FIFO and credits ---------------------------------------------------
        out = output_stage.OutputStage(m, self.o, L * ob, pl.depth, registered=True)

        # --- issue stage ---------------------------------------------------------------
        loop_k, loop_cb = Loop(m, K, "k"), Loop(m, NB, "cb")
        cb = loop_cb.value
        last_k = loop_k.last
        room = out.room
        issue = Signal()
        m.d.comb += [
            self.i.ready.eq(~last_k | room),
            issue.eq(self.i.valid & self.i.ready),
        ]
        assert len(w_rds) == pl.rom_copies
        _, waddrs = rom_counter(m, NB * K, issue, "widx", copies=pl.rom_copies)
        m.d.comb += [r.addr.eq(a) for r, a in zip(w_rds, waddrs)]
        loop_k.step(issue)
        loop_cb.step(issue & last_k)
        out.spend(issue & last_k)

        # --- stage 1: operands, products -------------------------------------------------
        v1, first1, last1 = Signal(), Signal(), Signal()
        cb1 = Signal.like(cb)
        x1 = Signal(S * PE * ib)
        m.d.sync += [v1.eq(issue), first1.eq(loop_k.first), last1.eq(last_k), cb1.eq(cb),
                     x1.eq(self.i.payload)]
        # --- stage 1b: operands registered (the weight memory's output is slow) ------------
        if pl.weights_in_bram:  # a register next to the block RAM, the input alike
            w_data = reg(m, w_data, unsigned(S * L * wb), "w0")
            x1 = reg(m, x1, unsigned(S * PE * ib), "x0")
        w1 = reg(m, w_data, unsigned(S * L * wb), "w1")
        x1 = reg(m, x1, unsigned(S * PE * ib), "x1b")
        v1, first1, last1, cb1 = (delay(m, x, 1, f"{n}_x") for x, n in
                                  ((v1, "v1"), (first1, "first1"), (last1, "last1"), (cb1, "cb1")))
        # element s*PE + ci of a beat is position s of channel lane ci; output lane l reads
        # channel lane l // M
        xall = lanes(x1, S * PE, ib, p.in_type.signed)
        wall = lanes(w1, S * L, wb, signed=True)

        # a lane in logic whose weight is the same in every fold multiplies by a constant
        vw = np.asarray(p.weights).reshape(NB, L, K, S)
        wconst = lane_constants(vw.min(axis=(0, 2)), vw.max(axis=(0, 2))) \
            if p.lut_lanes else []

        def product(s, l):
            # each hard multiplier with operand and product registers of its own, then one more
            x, w, n = xall[s * PE + l // M], wall[s * L + l], f"{s}_{l}" if S > 1 else f"{l}"
            tw = signed(ib + wb + 1)
            if l * S + s >= L * S - p.lut_lanes:     # built of logic, as deep
                prod = delay(m, lut_mul(m, x, w, f"lmul_{n}", wconst[l * S + s])[:tw.width]
                             .as_signed(),
                             LUT_PROD_STAGES - lut_mul_stages(wb), f"lmul_{n}_d")
                return reg(m, prod, tw, f"prodr_{n}")
            apart = bool(p.lut_lanes)
            return reg(m, reg(m, tile_operand(m, x, f"xt_{n}", apart) *
                              tile_operand(m, w, f"wt_{n}", apart), tw, f"prod_{n}"),
                       tw, f"prodr_{n}")
        # the adder tree over the SIMD positions of each lane
        prods = [tree_sum(m, [product(s, l) for s in range(S)], f"dot_{l}") for l in range(L)]
        v1, first1, last1, cb1 = (delay(m, x, pl.operand - 1, f"{n}_p") for x, n in
                                  ((v1, "v1"), (first1, "first1"), (last1, "last1"), (cb1, "cb1")))

        # --- stage 2: accumulate --------------------------------------------------------
        v2, first2, last2 = Signal(), Signal(), Signal()
        cb2 = Signal.like(cb)
        prod2 = [Signal(signed(acc_w), name=f"prod2_{ci}") for ci in range(L)]
        m.d.sync += [v2.eq(v1), first2.eq(first1), last2.eq(last1), cb2.eq(cb1)]
        m.d.sync += [d.eq(x) for d, x in zip(prod2, prods)]
        acc = [Signal(signed(acc_w), name=f"acc_{ci}", reset_less=True) for ci in range(L)]
        acc_next = [Mux(first2, 0, a) + d for a, d in zip(acc, prod2)]
        with m.If(v2):
            m.d.sync += [a.eq(n) for a, n in zip(acc, acc_next)]
        late = late_mult(rq)
        bias3, mult3 = channel_params(m, p.bias, p.mult_per_channel(), L, acc_w, mult_w, cb1,
                                      late)

        # --- stage 3: the sum moves on; the channels' bias and multiplier arrive -----------
        v3 = Signal()
        s3 = [Signal(signed(acc_w), name=f"s3_{ci}") for ci in range(L)]
        m.d.sync += v3.eq(v2 & last2)
        m.d.sync += [s.eq(n) for s, n in zip(s3, acc_next)]

        # --- stages 4, 5: bias, product; round half to even, zero point, clamp → FIFO ------
        rqp = RequantPipeline(m, v3, s3, bias3, mult3, rq, acc_w, ob, spacing=K,
                              mult_late=late)
        out.write(rqp.data, rqp.valid)
        return m


# ---------------------------------------------------------------------------- registration

def manifest(p: VVAUParams) -> dict:
    fold = {"pe": p.pe, "simd": p.simd} if p.simd > 1 else {"pe": p.pe}
    if p.lut_lanes:
        fold["lut_lanes"] = p.lut_lanes
    if p.rom_logic:
        fold["rom_logic"] = True
    if p.multiplier == 1:
        return {"folding": fold}
    return {"folding": fold, "channel_multiplier": p.multiplier}


def fold_space(p: VVAUParams) -> FoldSpace:
    """PE divides the channels, SIMD the kernel positions."""
    return FoldSpace(divisors(p.channels), divisors(p.kernel),
                     lambda pe, simd: frame_steps(p.channels, p.kernel, p.pixels, pe, simd))



def examples() -> list[Example]:
    """Small instances for the conformance test: depthwise 3×3 at PE = SIMD = 1, folded in
    both, with a channel multiplier, the whole kernel per beat, and weights in block RAM."""
    i8, u8 = QType(8, True), QType(8, False)
    rng = np.random.default_rng(9)
    out = []
    for c, m, k, pe, simd, pixels, t, o, per_channel in ((2, 1, 9, 1, 1, 2, u8, u8, False),
                                                         (4, 1, 9, 2, 3, 2, i8, i8, True),
                                                         (2, 2, 4, 1, 2, 3, u8, i8, True),
                                                         (3, 1, 4, 3, 4, 2, i8, u8, False),
                                                         (32, 1, 9, 1, 3, 2, i8, u8, True)):
        w = rng.integers(-128, 128, (c * m, k))
        b = rng.integers(-1000, 1000, c * m)
        scale = 0.5 * (o.hi - o.lo) / (np.sqrt(k) * 74 * 100)
        mult = rng.uniform(0.5, 1.5, c * m if per_channel else 1) * scale
        zp = (o.lo + o.hi + 1) // 2
        p = VVAUParams(w, b, make_requant(mult, zp, o.lo, o.hi), t, o, pe, pixels, m, simd)
        out.append(Example(p, (Port(t, p.in_per_beat, p.in_elements),),
                           (Port(o, p.lanes, p.out_elements),),
                           f"c{c}-m{m}-k{k}-pe{pe}-simd{simd}-px{pixels}"))
    return out


register_block("vvau", params=VVAUParams, component=VVAU, golden=golden, cost=cost,
               timing=timing, manifest=manifest, fold_space=fold_space,
               examples=examples)
