"""Matrix–vector unit (MVAU): ``y = requant(W @ x + b)`` on a stream, folded by PE and SIMD.

Stream contract
    ``i``: input vector of ``MW`` elements in ``SF = MW / SIMD`` beats, SIMD elements per beat,
    element ``sf*SIMD + s`` in bits ``[s*in_bits, (s+1)*in_bits)`` of beat ``sf``.
    ``o``: output vector of ``MH`` elements in ``NF = MH / PE`` beats, PE elements per beat,
    packed the same way. Elements are two's complement when their type is signed.

Schedule (as in FINN's MVAU)
    For each vector the unit runs NF neuron folds of SF synapse folds: one step per cycle,
    PE×SIMD multiply-accumulates per step. During neuron fold 0 each step takes one input beat
    from the stream and also stores it in an input buffer; folds 1..NF-1 replay the buffer.
    So the unit accepts one beat per cycle during fold 0 and a vector takes NF·SF cycles.

Pipeline (a step issued in cycle t)
    t+1: weights and buffered input arrive from their memories
    t+2: operands registered (memory outputs are slow)
    t+3: the PE×SIMD products (or ±1 terms) registered, then the adder tree of SIMD terms with
         a register after every level (:func:`~rtl_templates.pipeline.tree_stages`)
    then: dot products registered; accumulate; on the last synapse fold the sum moves on
         with the channel's bias and multiplier (read one cycle ahead and registered)
    then: the requantizer (:class:`~rtl_templates.requant.RequantPipeline`: bias, |x|, the
         product in hard-multiplier tiles, float32 rounding, shift, zero point, clamp, each
         step registered) → output FIFO. :func:`pipeline_depth` counts it all. A
         requantizer that passes the accumulator through (``MVAUParams.identity``: a
         thresholding block follows) is only ``sum + bias``, registered.
The pipeline never stalls. Instead a credit counter lets a step that completes an output beat
issue only while the output FIFO is sure to have room, so back-pressure stops the issue stage
and nothing is lost. ``valid`` on the output comes from the FIFO and never depends on ``ready``.

Multiplier lanes in logic (``MVAUParams.lut_lanes``)
    The last ``lut_lanes`` of the PE×SIMD products (lane ``pe*SIMD + s``) are built of logic
    cells (:func:`~rtl_templates.lutmul.lut_mul`, Booth partial products and an adder tree)
    instead of hard multiplier tiles: a device offers more multiplier lanes than DSP tiles.
    Their product arrives when the tiles' does (a shorter one is delayed; a longer one,
    weights wider than 8 bits, delays every lane by :func:`lut_extra_stages`).

Weights in logic (``MVAUParams.rom_logic``)
    The weight memory carries Yosys's ``rom_style = "logic"``: a multiplexer of constants
    built of LUTs instead of block RAM (Yosys otherwise maps it by its own cost), with the
    same synchronous read, so the schedule and the cycles stay. The resource model prices it
    as the part ``rom_w``. Where block RAM runs out and logic cells do not, the device search
    chooses it (``boards/rom_logic.py``).

Bipolar values (``rtl_templates/xnor_mvau.py``)
    Weights that are all ±1 are stored as one bit each; bipolar inputs travel as one bit each.
    The dot products then need no multiplier: XNOR-popcount when both are ±1, a sign select
    of the other operand otherwise (``MVAUParams.datapath``). A bipolar output is sent as one
    bit (1 = +1) from a sign requantizer. The golden function is the same integer formula.
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field

import numpy as np
from amaranth.hdl import Cat, Module, Mux, Signal, signed, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from hwgen.rtl_templates import output_stage, streams
from hwgen.rtl_templates import resources as res
from hwgen.rtl_templates.block import Example, FoldSpace, Port, divisors, register_block
from hwgen.rtl_templates.cost import Cost
from hwgen.rtl_templates.credits import Credits
from hwgen.rtl_templates.kept import kept_copy
from hwgen.rtl_templates.lutmul import (
    const_lanes,
    lane_constants,
    lut_mul,
    lut_mul_const_parts,
    lut_mul_parts,
    lut_mul_stages,
    tile_operand,
)
from hwgen.rtl_templates.memory import (
    BLOCK,
    LOGIC,
    choose_style,
    lane_rom,
    lane_rom_slices,
    ram,
)
from hwgen.rtl_templates.pipeline import (
    TREE_LEVELS_PER_STAGE,
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
    passes_through,
)
from hwgen.rtl_templates.resources import (
    EXACT_COLUMN_BITS,
    Mul,
    add_muls,
    bias_live,
    merge_fits,
    param_live,
    range_live,
    rom_live,
    unsigned_muls,
)
from hwgen.rtl_templates.spram import LoadLayout, load_ports, load_words, loaded_memory
from hwgen.rtl_templates.words import lanes, pack_word
from hwgen.rtl_templates.xnor_mvau import (
    check_sign_requant,
    is_bipolar,
    is_pm1,
    select_term,
)

#: cycles from issuing the last step of an output beat to the requantizer's input (stage 3)
#: plus the output stage's (the clamp is a register); the requantizer's own stages come on
#: top (:func:`pipeline_depth`)
BASE_DEPTH = 3 + output_stage.latency(registered=True)


#: registers from the operands to a hard multiplier lane's product (its operand registers,
#: the product), which one more register (the term) takes so the multiplier's registers can
#: sit next to it
PROD_STAGES = 2


#: widest slice of a one-word input buffer with a write enable of its own
IBUF_SLICE_BITS = 32


@dataclass(frozen=True)
class MVAUPlan:
    """The unit's structure, computed once from its parameters (:func:`plan`):
    :meth:`MVAU.elaborate` builds it, and :func:`resource_parts`, :func:`timing` and
    :func:`cost` count it, so a stage, a copy or a slice is decided in one place."""
    #: an operand register beside block RAM weights (0 or 1)
    bram: int
    #: 1 where an input lane's operand goes to the hard multiplier tiles of several PEs (a
    #: multiplier datapath, PE > 1, lanes in tiles): each tile's operand then comes through
    #: a kept register of its own (``xp_*``) before the tile's, so the route from the one
    #: lane register to tiles scattered over the die is split in two (in the digits CNN, 8 ns
    #: of route to the tiles of a lane's 4 PEs); the weights and the lanes in logic's
    #: products a register later alike. Else 0.
    spread: int
    #: stages a product in logic takes beyond a hard multiplier lane's (0 up to 8-bit
    #: weights): every lane is delayed by as many
    lut_extra: int
    #: registers between the memories and the dot products' register: the operands (and
    #: :attr:`bram`, :attr:`spread`), the products (:data:`PROD_STAGES` + 2 with
    #: multipliers, :attr:`lut_extra` more with lanes in logic), the adder tree's stages
    operand: int
    #: cycles from issuing the last step of an output beat to that beat's output transfer
    depth: int
    #: cycles the output's credits come back late (:class:`~output_stage.OutputStage`): one
    #: (the input ready's next value then waits on no other block's ready), two with copies
    #: of the ready (each copy's credits take the returned credit from a register of its
    #: own), none with weights in SPRAM
    late_return: int
    #: the output FIFO's beats (:func:`output_stage.fifo_depth`)
    fifo_depth: int
    #: the weight memory's read ports, each addressed by a kept copy of the step counter
    #: (:func:`~rtl_templates.pipeline.rom_counter`)
    rom_copies: int
    #: the input word's slices of at most :data:`IBUF_SLICE_BITS`: with NF > 1 each slice is
    #: selected (stream or buffer) by a kept copy of ``use_stream1`` (all but the first) and,
    #: SF = 1, written into the one-word buffer on a kept copy of the write enable
    in_slices: tuple[tuple[int, int], ...]
    #: copies of the issue control, one per slice of the sliced input stream
    ready_copies: int
    #: the input buffer (NF > 1, SF > 1) is in block RAM and the operands are registered
    #: twice (weights in block RAM): its read data and the stream word are registered apart
    #: (``x0b``, ``x0s``) and selected into ``x1`` by copies of the select a cycle later, so
    #: the buffer's register is the tile's own output register (``boards.bram_outreg``)
    ibuf_apart: bool = False

    @property
    def sel_copies(self) -> int:
        """Kept copies of ``use_stream1`` (one per input slice but the first, NF > 1)."""
        return len(self.in_slices) - 1 if self.in_slices else 0


def plan(p: MVAUParams) -> MVAUPlan:
    """The unit's :class:`MVAUPlan` (cached on ``p``: :attr:`MVAUParams.plan`)."""
    bram = 1 if p.weights_in_bram else 0
    lut_extra = max(0, lut_mul_stages(p.w_bits) - PROD_STAGES) if p.lut_lanes else 0
    spread = int(p.datapath == "mul" and p.pe > 1 and p.pe * p.simd > p.lut_lanes)
    if p.datapath == "mul":
        operand = 2 + bram + spread + PROD_STAGES + lut_extra + tree_stages(p.simd)
    else:
        operand = 2 + bram + tree_stages(p.simd)
    depth = (BASE_DEPTH + operand
             + RequantPipeline.depth(p.requant, p.acc_bits, is_bipolar(p.out_type), p.sf,
                                     p.identity))
    late_return = 0 if p.spram else 2 if p.ready_copies else 1
    width = p.simd * p.in_type.bits
    in_slices = tuple((lo, min(lo + IBUF_SLICE_BITS, width))
                      for lo in range(0, width, IBUF_SLICE_BITS)) if p.nf > 1 else ()
    ibuf_apart = bool(bram and p.nf > 1 and p.sf > 1 and choose_style(
        width, p.sf, rom=False, rw="dont_care") == BLOCK)
    return MVAUPlan(bram=bram, spread=spread, lut_extra=lut_extra, operand=operand,
                    depth=depth, late_return=late_return,
                    fifo_depth=output_stage.fifo_depth(depth, late_return),
                    rom_copies=1 if p.spram else len(p.weight_slices),
                    in_slices=in_slices, ready_copies=p.ready_copies, ibuf_apart=ibuf_apart)


def lut_extra_stages(p: MVAUParams) -> int:
    """:attr:`MVAUPlan.lut_extra`."""
    return p.plan.lut_extra


def spread_stages(p: MVAUParams) -> int:
    """:attr:`MVAUPlan.spread`."""
    return p.plan.spread


def operand_stages(p: MVAUParams) -> int:
    """:attr:`MVAUPlan.operand`."""
    return p.plan.operand


def pipeline_depth(p: MVAUParams) -> int:
    """:attr:`MVAUPlan.depth`: cycles from issuing the last step of an output beat to that
    beat's output transfer."""
    return p.plan.depth


@dataclass(frozen=True, eq=False)
class MVAUParams:
    """Everything that defines one MVAU instance."""
    weights: np.ndarray      # [MH, MW] int (weight zero point already subtracted)
    bias: np.ndarray         # [MH] int (includes the input zero-point correction)
    requant: Requant
    in_type: QType
    out_type: QType
    pe: int = 1
    simd: int = 1
    vectors: int = 1         # input vectors per frame (output pixels of a convolution)
    #: the weights live in SPRAM, loaded from the weight-load stream (``rtl_templates/spram.py``)
    spram: bool = field(default=False, metadata={"digest": "omit_default"})
    # products built of logic cells instead of DSP tiles (the last lanes)
    lut_lanes: int = field(default=0, metadata={"digest": "omit_default"})
    #: the weight ROM is built of logic cells (LUTs) instead of block RAM
    rom_logic: bool = field(default=False, metadata={"digest": "omit_default"})
    #: copies of the input's ready, one per slice of the wide FIFO before the unit, each from
    #: an issue control of its own (``i`` a sliced stream: ``i.ready_slices``,
    #: ``i.valid_slices``; the ``slice_ports`` face)
    ready_copies: int = field(default=0, metadata={"digest": "omit_default"})

    def __post_init__(self):
        mh, mw = self.weights.shape
        if self.vectors < 1:
            raise ValueError("a frame needs at least one vector")
        if self.pe < 1 or mh % self.pe:
            raise ValueError(f"PE={self.pe} does not divide the {mh} output channels")
        if self.simd < 1 or mw % self.simd:
            raise ValueError(f"SIMD={self.simd} does not divide the {mw} input elements")
        if len(self.requant.mult) not in (1, mh):
            raise ValueError("requantizer multipliers must be per tensor or per output channel")
        if is_bipolar(self.out_type):
            check_sign_requant(self.requant)
        if not 0 <= self.lut_lanes <= self.pe * self.simd:
            raise ValueError(f"lut_lanes={self.lut_lanes} is not within the {self.pe}×"
                             f"{self.simd} products")
        if self.lut_lanes and self.datapath != "mul":
            raise ValueError("lut_lanes needs a datapath of multipliers")
        if self.rom_logic and self.spram:
            raise ValueError("weights in SPRAM are not a ROM of logic (rom_logic)")
        if self.ready_copies and self.spram:
            raise ValueError("a unit with weights in SPRAM keeps no copies of its ready")

    @property
    def mh(self) -> int:
        return self.weights.shape[0]

    @property
    def mw(self) -> int:
        return self.weights.shape[1]

    @property
    def nf(self) -> int:
        return self.mh // self.pe

    @property
    def sf(self) -> int:
        return self.mw // self.simd

    @functools.cached_property
    def plan(self) -> MVAUPlan:
        """The unit's structure (:func:`plan`)."""
        return plan(self)

    @functools.cached_property
    def datapath(self) -> str:
        """"mul" (multipliers in_bits × w_bits), or without multipliers: "xnor" (bipolar inputs,
        ±1 weights: XNOR-popcount), "select" (±1 weights select x or −x), "bipolar_in"
        (bipolar inputs select w or −w)."""
        pm1 = is_pm1(self.weights)
        if is_bipolar(self.in_type):
            return "xnor" if pm1 else "bipolar_in"
        return "select" if pm1 else "mul"

    @functools.cached_property
    def w_bits(self) -> int:
        """Stored bits per weight: 1 for ±1 weights (bit 1 = +1), else two's complement."""
        if self.datapath in ("xnor", "select"):
            return 1
        w = self.weights
        return signed_width(int(w.min(initial=0)), int(w.max(initial=0)))

    @functools.cached_property
    def acc_bounds(self) -> tuple[int, int]:
        """Exact bounds of every partial sum and of sum + bias (interval arithmetic)."""
        lo, hi = dot_range(self.weights, self.in_type.lo, self.in_type.hi)
        b = self.bias.astype(np.int64)
        return (int(min(lo.min(), (lo + b).min(), 0)), int(max(hi.max(), (hi + b).max(), 0)))

    @functools.cached_property
    def acc_bits(self) -> int:
        return signed_width(*self.acc_bounds)

    @functools.cached_property
    def identity(self) -> bool:
        """The requantizer passes the accumulator through (a thresholding block follows):
        no product, no rounding (``requant.passes_through``)."""
        if is_bipolar(self.out_type):
            return False
        lo, hi = dot_range(self.weights, self.in_type.lo, self.in_type.hi)
        b = self.bias.astype(np.int64)
        return passes_through(self.requant, int((lo + b).min()), int((hi + b).max()))

    def weight_words(self) -> list[int]:
        """The weight memory's words in address order (neuron fold, synapse fold): lane
        ``pe·SIMD + s`` in bits ``[lane·w_bits, (lane+1)·w_bits)``."""
        words = []
        for nf in range(self.nf):
            for sf in range(self.sf):
                blk = self.weights[nf * self.pe:(nf + 1) * self.pe,
                                   sf * self.simd:(sf + 1) * self.simd]
                if self.w_bits == 1:  # ±1 weights: bit 1 = +1
                    blk = blk > 0
                words.append(pack_word(blk.reshape(-1), self.w_bits))
        return words

    @property
    def load_layout(self) -> LoadLayout | None:
        """Where the weights sit in SPRAM (None: a ROM)."""
        return LoadLayout(self.pe * self.simd * self.w_bits, self.nf * self.sf) \
            if self.spram else None

    def load_words(self) -> list[int]:
        """The weight-load stream's beats for this block (empty without SPRAM)."""
        return load_words(self.load_layout, self.weight_words()) if self.spram else []

    def mult_per_channel(self) -> list[int]:
        m = list(self.requant.mult)
        return m * self.mh if len(m) == 1 else m

    @functools.cached_property
    def weight_columns(self) -> tuple[int, int]:
        """(non-constant, distinct non-constant) bit columns of the weight memory (words
        (nf, sf), lanes (pe, s)): what of it the tools keep (:func:`resources.rom_live`)."""
        return _per_folding(self, "columns", self._weight_columns)

    def _weight_columns(self, lo: int = 0, hi: int | None = None) -> tuple[int, int]:
        """Of lanes ``lo`` to ``hi`` (all by default)."""
        w = np.asarray(self.weights > 0 if self.w_bits == 1 else self.weights)
        v = w.reshape(self.nf, self.pe, self.sf, self.simd)
        if w.size * self.w_bits > EXACT_COLUMN_BITS:     # per lane (pe, s): its range
            return range_live(v.min(axis=(0, 2)).reshape(-1)[lo:hi],
                              v.max(axis=(0, 2)).reshape(-1)[lo:hi], self.w_bits)
        v = v.transpose(0, 2, 1, 3).reshape(self.nf * self.sf, self.pe * self.simd)
        return rom_live(v[:, lo:hi], self.w_bits)

    @property
    def weight_slices(self) -> list[tuple[int, int]]:
        """Bit ranges of the weight word stored as memories of their own
        (:func:`~rtl_templates.memory.lane_rom_slices`)."""
        return _per_folding(self, f"slices{int(self.rom_logic)}", lambda: lane_rom_slices(
            self.pe * self.simd, self.w_bits, self.nf * self.sf, self.weight_columns[0],
            logic=self.rom_logic))

    @property
    def weights_in_bram(self) -> bool:
        """Whether the weight ROM's read data is registered once more (``w0``, the input
        ``x0`` alike) before the operand registers: where the tools put a slice of it in
        block RAM, on either family (its data leaves the tile late: an ECP5 DP16KD's
        clock-to-output is 5.6 ns of the 8 ns at 125 MHz), and a ROM in logic by
        ``rom_logic`` (the block search's stand-in for block RAM, with the same schedule)."""
        if self.spram:
            return False
        if self.rom_logic:
            return True
        return _per_folding(self, "in_bram", lambda: res.rom_in_bram(
            self.weight_slice_columns, self.nf * self.sf))

    @property
    def weight_slice_columns(self) -> list[tuple[int, int]]:
        """:attr:`weight_columns` of each of :attr:`weight_slices`."""
        sl = self.weight_slices
        if len(sl) == 1:
            return [self.weight_columns]
        wb = self.w_bits
        return _per_folding(self, f"slice_columns{int(self.rom_logic)}", lambda: [
            self._weight_columns(lo // wb, hi // wb) for lo, hi in sl])

    @functools.cached_property
    def weight_lanes(self) -> tuple[int, int, int]:
        """Lanes (pe, s) of the weight memory whose weights are all zero, all one other
        value, or not all equal: a product by a constant lane is folded by the tools where
        the product is logic (not a DSP tile), by zero it is nothing."""
        return _per_folding(self, "lanes", self._weight_lanes)

    def _weight_lanes(self) -> tuple[int, int, int]:
        v = np.asarray(self.weights).reshape(self.nf, self.pe, self.sf, self.simd)
        lo, hi = v.min(axis=(0, 2)), v.max(axis=(0, 2))
        const = lo == hi
        zero = int((const & (lo == 0)).sum())
        return zero, int(const.sum()) - zero, int((~const).sum())

    @functools.cached_property
    def param_columns(self) -> tuple[int, int, float]:
        """(non-constant, distinct non-constant) bit columns of the bias and multiplier
        memory, and the non-constant multiplier bits per lane."""
        shape = (self.nf, self.pe)
        return param_live(np.asarray(self.bias, dtype=np.int64).reshape(shape),
                          np.asarray(self.mult_per_channel(), dtype=np.int64).reshape(shape),
                          self.acc_bits, self.requant.mult_bits)

    @functools.cached_property
    def late_params(self) -> tuple | None:
        """:func:`requant.param_memories`' ``late`` when the multipliers are
        :class:`~rtl_templates.requant.LateMults` (:func:`requant.late_mult`), else None."""
        rq = self.requant
        if not late_mult(rq, is_bipolar(self.out_type), self.identity):
            return None
        shape = (self.nf, self.pe)
        return (bias_live(np.asarray(self.bias, dtype=np.int64).reshape(shape), self.acc_bits),
                np.asarray(self.mult_per_channel(), dtype=np.int64).reshape(shape),
                rq.mult_bits, RequantPipeline.sequential(rq, self.acc_bits, self.sf))


#: figures of a weight matrix at one PE/SIMD, shared by the units that differ only in
#: other parameters (a folding search prices one folding with several ``lut_lanes``)
_FOLDING_MEMO: dict[tuple, tuple] = {}


def frame_steps(mh: int, mw: int, pe: int, simd: int, vectors: int = 1) -> int:
    """Cycles of a frame of ``vectors`` vectors through an ``mh``×``mw`` unit folded by
    ``pe``×``simd`` (NF = MH/PE neuron folds of SF = MW/SIMD steps each, one step a cycle):
    the unit's one cycle formula, which the convolution and linear ops' fold spaces use."""
    return vectors * (mh // pe) * (mw // simd)


def _per_folding(p: MVAUParams, what: str, compute):
    key = (id(p.weights), p.pe, p.simd, what)
    hit = _FOLDING_MEMO.get(key)
    if hit is None or hit[0] is not p.weights:     # the entry holds the array: ids stay
        if len(_FOLDING_MEMO) >= 4096:
            _FOLDING_MEMO.clear()
        hit = _FOLDING_MEMO[key] = (p.weights, compute())
    return hit[1]


# ---------------------------------------------------------------------------- golden

def golden(p: MVAUParams, x: np.ndarray) -> np.ndarray:
    """Integer semantics on frames: ``x`` [N, vectors·MW] ints in ``in_type`` → [N,
    vectors·MH]."""
    x = np.asarray(x, dtype=np.int64)
    n = x.shape[0]
    acc = x.reshape(n, p.vectors, p.mw) @ p.weights.astype(np.int64).T \
        + p.bias.astype(np.int64)
    return p.requant.apply(acc, channel_axis=-1).reshape(n, -1)


# ---------------------------------------------------------------------------- cost

def cost(p: MVAUParams) -> Cost:
    """Cycles for the ``p.vectors`` input vectors of a frame, latency, and resources."""
    steps = p.nf * p.sf
    # ±1 operands need no multiplier; a bipolar output is a sign test, not a requantizer
    n_dot = p.pe * p.simd if p.datapath == "mul" else 0
    n_hard = n_dot - p.lut_lanes
    rq_tiles = RequantPipeline.multiplies(p.requant, p.acc_bits, p.pe, is_bipolar(p.out_type),
                                          p.sf, p.identity)
    dot = Mul(p.in_type.bits, p.in_type.signed, p.w_bits, True,
              y_bits=min(p.in_type.bits + p.w_bits, p.acc_bits))
    muls = add_muls({dot: n_hard},
                    unsigned_muls(rq_tiles))
    live = max(0, p.weight_lanes[2] - p.lut_lanes) if n_dot else 0
    soft = add_muls({dot: live}, unsigned_muls(rq_tiles) if p.param_columns[2] else {})
    by_family, parts = res.estimate(resource_parts, p, RESOURCE_FIT, muls, soft)
    return Cost(
        cycles=frame_steps(p.mh, p.mw, p.pe, p.simd, p.vectors),
        latency=timing(p, 0, p.sf - 1)[1] + 1,
        multipliers=n_dot + len(rq_tiles),
        multiplier_widths=[(p.in_type.bits, p.w_bits)] * n_dot + rq_tiles,
        multiplies=muls,
        memory_bits=steps * p.pe * p.simd * p.w_bits
        + (p.sf * p.simd * p.in_type.bits if p.nf > 1 else 0)
        + p.nf * p.pe * (p.acc_bits + p.requant.mult_bits)
        + p.plan.fifo_depth * p.pe * p.out_type.bits,
        registers=max(r.ff for r in by_family.values()),
        by_family=by_family, parts=parts,
    )


def timing(p: MVAUParams, in_first: int, in_last: int) -> tuple[int, int]:
    """Cycles of the first and last output transfer of a frame of ``p.vectors`` vectors whose
    first and last input beats were taken at ``in_first`` and ``in_last`` (output never
    stalled). A vector's fold 0 ends when its last input beat is in (for several vectors the
    first one is taken to arrive as a burst); every fold then takes SF cycles."""
    vectors = p.vectors
    first_in_done = in_last if vectors == 1 else in_first + p.sf - 1
    d = p.plan.depth
    out_first = max(first_in_done, in_first + p.sf - 1) + d
    out_last = max(in_last + (p.nf - 1) * p.sf, in_first + vectors * p.nf * p.sf - 1) + d
    return out_first, out_last


def slice_ports(p: MVAUParams, port: str, widths: list[int]) -> MVAUParams | None:
    """``p`` reading a sliced input stream of the slices ``widths``: a copy of the input's
    ready per slice (None for the output, and with weights in SPRAM, whose ready waits for
    the load and is no register)."""
    if port != "i" or p.spram or len(widths) < 2:
        return None
    return dataclasses.replace(p, ready_copies=len(widths))


#: calibration of :func:`resource_parts` (``benchmarks/resources.py --fit``); the weight
#: ROM in LUTs (``mem_w``) is structural (``resources.rom_luts``, measured) and not scaled
RESOURCE_FIT: res.Fit = merge_fits(LANE_FIT, {
    "ecp5": {
        # a weight ROM in logic (rom_logic), fitted on CNV-w2a2's units and random 8-bit
        # weights (tests/blocks/test_rom_logic.py)
        "lut4": {"rom_w": 1.12,
                 "acc": 1.005, "ctl": 1.114, "fifo": 1.074, "mem_i": 1.101, "mem_p": 1.038,
                 "mul_logic": 1.002, "rq_front": 0.579,
                 "rq_lanes": 21.25, "rq_r24": 0.968, "rq_seq": 0.478,
                 "rq_sign": 1.002, "rq_tail": 0.31, "terms": 1.017, "tree": 1.171,
                 "1": 0.004, "lut_mul": 0.83},
        "carry": {"acc": 0.822, "ctl": 0.668, "fifo": 0.692, "rq_front": 1.124, "rq_lanes": 6.766,
                  "rq_prod": 0.483, "rq_r24": 1.301, "rq_seq": 0.972,
                  "rq_sign": 0.542, "rq_tail": 0.31, "terms": 0.922,
                  "tree": 0.911, "1": 0, "lut_mul": 1.0},
        "ff": {"lut_mul": 0.95},
    },
    "ice40": {
        "lut4": {"acc": 0.991, "ctl": 0.969, "fifo": 0.938, "mem_i": 0.959, "mem_p": 1.006,
                 "mul_logic": 0.792, "rq_front": 0.958,
                 "rq_lanes": 24.327, "rq_prod": 0.563, "rq_r24": 0.788,
                 "rq_seq": 0.687, "rq_sign": 1.003, "rq_tail": 0.281,
                 "terms": 0.995, "tree": 1.011, "1": 0, "lut_mul": 0.82},
        "carry": {"acc": 0.922, "ctl": 0.884, "fifo": 0.838, "mul_logic": 0.814, "rq_front": 1,
                  "rq_lanes": 10.244, "rq_prod": 0.476, "rq_r24": 1.284,
                  "rq_seq": 1.023, "rq_sign": 0.792, "rq_tail": 0.238,
                  "terms": 0.948, "tree": 0.899, "1": 0, "lut_mul": 0.9},
        "ff": {"lut_mul": 0.95},
    },
})


def _lane_keys(p: MVAUParams) -> np.ndarray:
    """(PE, SIMD) keys of a ±1-term unit's lanes: a lane whose weight is the same in every
    fold has a key of that weight (its offset from the smallest), every other lane a negative
    key of its own, so lanes (and sums of lanes) with equal keys compute the same value."""
    v = np.asarray(p.weights, dtype=np.int64).reshape(p.nf, p.pe, p.sf, p.simd)
    lo, hi = v.min(axis=(0, 2)), v.max(axis=(0, 2))
    return np.where(lo == hi, lo - int(lo.min(initial=0)), _own_keys(lo.shape))


def _own_keys(shape) -> np.ndarray:
    """Negative keys, a different one for every lane."""
    return -1 - np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)


#: widest sum (result bits) Yosys leaves to plain gates: wider ones become carry chains
#: (``$__ICE40_CARRY_WRAPPER`` on iCE40: its ``arith_map.v`` fails for ``Y_WIDTH <= 2``;
#: ECP5 keeps sums of up to 4 bits in LUTs, measured on XNOR popcounts)
GATE_SUM_BITS = {"ice40": 2, "ecp5": 4}


def tree_cost(live: np.ndarray, width: int, keep: int, family: str,
              keys: np.ndarray | None = None, early: np.ndarray | None = None,
              pad: int = 2) -> res.Resources:
    """:func:`tree_sum` of every row of ``live`` (rows: PEs, columns: ``width``-bit terms,
    False where the term is a constant zero), its sums registered after every level but the
    last, the low ``keep`` bits kept: a sum with a zero side is its other side (no adder), a
    sum of zeros is nothing (no register). An adder of ``w``-bit operands is
    ``res.add(w + pad)`` (``pad`` 2: a product term, one bit wider than ``width``; 0: a ±1
    term of exactly ``width`` bits), up to 3 bits LUTs only.

    With ``keys`` (same shape), rows whose keys agree over a lane are the same term
    register (the tools merge equal registers), and the tree is built as Yosys merges it:

    - ``early`` (same shape, default none): terms Yosys knows in its coarse passes (a
      constant weight whose stored bits are all 0, the weight register's initial value;
      the other bits of that register stay flip-flops until the fine-grained passes). A
      sum whose terms are all early is merged with every equal one, register and all.
    - In the fine-grained passes the other equal terms merge, and so do the sums built of
      gates (up to :data:`GATE_SUM_BITS` result bits) and their registers; a wider sum is a
      carry chain, which ``opt_merge`` does not merge (not a cell type it knows), so its
      register stays one per row and so does every sum above it.
    - ABC then merges equal logic between registers: an adder is counted once per distinct
      pair of operand registers."""
    assert TREE_LEVELS_PER_STAGE == 1
    rows, n = live.shape
    live = np.asarray(live, bool)
    if keys is None:
        ids = _own_keys(live.shape)
    else:   # a term register: the lane's (column, key), or one of its own (negative key)
        keys = np.asarray(keys, dtype=np.int64)
        ids = np.where(keys >= 0, np.arange(n)[None, :] * (int(keys.max(initial=0)) + 1)
                       + keys, -1 - np.arange(rows * n).reshape(rows, n))
    early = np.zeros(live.shape, bool) if early is None else np.asarray(early, bool) & live
    early = early | ~live       # a zero term is a constant too
    out, k, w, level, total = res.Resources(), n, width, 0, max(0, (n - 1).bit_length())
    fresh = int(ids.max(initial=0)) + 1

    def number(values: np.ndarray) -> np.ndarray:
        """New register ids for ``values`` (rows; equal rows get the same id)."""
        nonlocal fresh
        if len(values) == 0:
            return np.zeros(0, np.int64)
        _, inv = np.unique(values, axis=0, return_inverse=True)
        inv = np.asarray(inv).reshape(-1)
        out_ids = fresh + inv
        fresh += int(inv.max()) + 1
        return out_ids

    while k > 1:
        level, k2 = level + 1, (k + 1) // 2
        # sums of terms up to 3 bits (an XNOR popcount's first levels) are LUTs, one per
        # result bit, no carry chain (measured in Yosys)
        adder = res.Resources(lut4=w + 1) if w <= 3 else res.add(min(w + pad, keep), family)
        gates = w + 1 <= GATE_SUM_BITS.get(family, 0)
        w += 1
        if k % 2:       # an odd count: the last term is passed on alone
            ids = np.concatenate([ids, np.zeros((rows, 1), np.int64)], axis=1)
            live = np.concatenate([live, np.zeros((rows, 1), bool)], axis=1)
            early = np.concatenate([early, np.ones((rows, 1), bool)], axis=1)
        la, lb, ea, eb = live[:, 0::2], live[:, 1::2], early[:, 0::2], early[:, 1::2]
        ia, ib = ids[:, 0::2], ids[:, 1::2]
        both = la & lb
        nids = np.zeros((rows, k2), np.int64)
        regs = 0
        for j in range(k2):
            pair = np.stack([ia[:, j], ib[:, j]], axis=1)
            if both[:, j].any():
                out = out + adder * len(np.unique(pair[both[:, j]], axis=0))
            # equal sums merge in the coarse passes (all terms early) or as gates
            merge = both[:, j] & (gates | (ea[:, j] & eb[:, j]))
            alone = both[:, j] & ~merge
            passed = la[:, j] ^ lb[:, j]        # the other side is zero: passed on
            nids[merge, j] = number(pair[merge])
            nids[alone, j] = number(np.arange(int(alone.sum()))[:, None])
            nids[passed, j] = number(np.where(la[passed, j], ia[passed, j],
                                              ib[passed, j])[:, None])
            if level < total:
                regs += len(np.unique(nids[la[:, j] | lb[:, j], j]))
        if level < total:
            out = out + res.Resources(ff=regs * min(w, keep))
        ids, live, early, k = nids, la | lb, ea & eb, k2
    return out


def _zero_products(p: MVAUParams) -> np.ndarray:
    """(PE, SIMD): 1 where the lane's weight is zero in every row and fold."""
    v = np.asarray(p.weights).reshape(p.nf, p.pe, p.sf, p.simd)
    return (v == 0).all(axis=(0, 2)).astype(np.int8)


def dead_input_lanes(p: MVAUParams, family: str) -> np.ndarray:
    """(SIMD,) bool: the input lanes no product uses on ``family`` — a lane whose weight is
    zero in every row and fold, where the products are logic (the tools fold a product by
    zero there, and the lane's operand registers with it; a DSP tile's operand stays)."""
    none = np.zeros(p.simd, dtype=bool)
    if p.datapath != "mul" or p.lut_lanes or not p.weight_lanes[0]:
        return none
    dot = Mul(p.in_type.bits, p.in_type.signed, p.w_bits, True,
              y_bits=min(p.in_type.bits + p.w_bits, p.acc_bits))
    if res.dsp_tiles(dot, family):
        return none
    return _zero_products(p).all(axis=0)


def input_live(p: MVAUParams, family: str) -> list:
    """The input bits the unit uses on ``family`` (None: all): not those of
    :func:`dead_input_lanes`."""
    dead = dead_input_lanes(p, family)
    return [np.repeat(~dead, p.in_type.bits) if dead.any() else None]


def resource_parts(p: MVAUParams, family: str) -> dict[str, res.Resources]:
    """The unit's hardware in the resource model's parts (see :mod:`rtl_templates.resources`):
    memories, output FIFO, control, operand and product registers, adder trees,
    accumulators and the requantizers."""
    PE, SIMD, NF, SF = p.pe, p.simd, p.nf, p.sf
    ib, wb, A, ob = p.in_type.bits, p.w_bits, p.acc_bits, p.out_type.bits
    pl = p.plan
    nfb = counter_bits(NF)
    p_live, p_distinct, m_live = p.param_columns
    wmem, w_reg = res.Resources(), 0
    for live, distinct in p.weight_slice_columns:
        part = res.memory(live, NF * SF, family, rom=True, logic_width=distinct,
                          **({"style": LOGIC} if p.rom_logic else {"plain": True}))
        wmem, w_reg = wmem + part, w_reg + (live if part.bram else distinct)
    pmem, p_reg = param_memories(p_live, p_distinct, NF, family, p.late_params)
    if p.spram and family == "ice40":   # SPRAM tiles, their load counters and lane select
        L = p.load_layout
        lane_bits = L.pack.bit_length() - 1
        count = counter_bits(L.rows) + counter_bits(L.columns)
        wmem = res.Resources(spram=L.tiles, ff=count + 1 + lane_bits,
                             lut4=2 * count + L.columns + L.width * (L.pack - 1),
                             carry=count)
        w_reg = PE * SIMD * wb
    parts = {"rom_w" if p.rom_logic else "mem_w": wmem, "mem_p": pmem,
             **output_stage.parts(PE * ob, pl.depth, family, registered=True,
                                  late_return=pl.late_return)}
    if NF > 1:
        parts["mem_i"] = res.memory(SIMD * ib, SF, family, rom=False, rw="dont_care") \
            + res.mux(SIMD * ib, family)
        if SF > 1:      # the late write's registers
            parts["mem_i"] = parts["mem_i"] + res.Resources(ff=SIMD * ib + counter_bits(SF) + 1)
        else:           # the one word's kept write enables, one per slice
            parts["mem_i"] = parts["mem_i"] + res.Resources(ff=len(pl.in_slices))
    # the loop counters; pipeline.rom_counter: an address per weight ROM piece and their
    # next value
    ctl_bits = counter_bits(SF) + nfb + rom_counter_registers(NF * SF, pl.rom_copies)
    # the valid, flags and fold delayed along the operand stages; the select's kept copies
    parts["ctl"] = res.Resources(ff=ctl_bits + (3 + nfb) * (2 + pl.operand)
                                 - pl.late_return + pl.sel_copies
                                 + pl.ibuf_apart * len(pl.in_slices),
                                 lut4=ctl_bits + 4, carry=ctl_bits / 2)
    if pl.ready_copies:  # each copy of the issue control: its counters, flags and credits
        bits = counter_bits(SF) + nfb + counter_bits(pl.fifo_depth + 1)
        parts["ctl"] = parts["ctl"] + res.Resources(ff=bits + 6, lut4=bits + 8,
                                                    carry=bits / 2) * pl.ready_copies
    # operands, products or ±1 terms, adder trees
    ff = (2 * SIMD * ib + w_reg) * (2 if p.weights_in_bram else 1)
    ff += pl.ibuf_apart * SIMD * ib     # the buffer's word and the stream's apart
    kept = None     # (PE, SIMD): the lanes whose products are left (None: all)
    early = None    # (PE, SIMD): ±1 terms Yosys knows in its coarse passes (tree_cost)
    if p.datapath == "mul":
        tw = ib + wb
        dot = Mul(ib, p.in_type.signed, wb, True, y_bits=min(tw, A))
        zero, const, _ = p.weight_lanes
        # products in logic by a constant weight are folded: by zero nothing is left, nor
        # the sums it enters, nor (zero in every row) the input lane's registers
        hard = PE * SIMD - p.lut_lanes
        lanes = hard - (zero if res.dsp_tiles(dot, family) == 0 else 0)
        extra = pl.lut_extra
        # the tiles' operands: one register per input lane (the tools merge the PE copies),
        # or, beside lanes in logic, a copy per tile (lutmul.tile_operand)
        ff += (hard if p.lut_lanes else SIMD) * ib + w_reg + (2 + extra) * lanes * tw
        if pl.spread:    # each tile's operands a register earlier
            ff += hard * (ib + wb)
        if zero and res.dsp_tiles(dot, family) == 0 and not p.lut_lanes:
            kept = _zero_products(p) == 0
            dead = int(dead_input_lanes(p, family).sum())
            ff -= dead * ib * (1 + 2 * (2 if p.weights_in_bram else 1) + pl.ibuf_apart)
            if NF > 1:
                parts["mem_i"] = res.memory((SIMD - dead) * ib, SF, family, rom=False,
                                            rw="dont_care") + res.mux((SIMD - dead) * ib, family)
                if SF > 1:
                    parts["mem_i"] = parts["mem_i"] + res.Resources(
                        ff=(SIMD - dead) * ib + counter_bits(SF) + 1)
        terms = res.Resources()
        if p.lut_lanes:     # the lanes in logic, each delayed to the tiles' term stage
            pad = PROD_STAGES + extra + pl.spread - lut_mul_stages(wb)
            v = np.asarray(p.weights).reshape(NF, PE, SF, SIMD)
            l_zero, l_const = const_lanes(v.min(axis=(0, 2)), v.max(axis=(0, 2)), p.lut_lanes)
            live = p.lut_lanes - l_zero - l_const
            regs = res.Resources(ff=(pad + 1) * tw)
            parts["lut_mul"] = (lut_mul_parts(ib, wb, family) + regs) * live
            parts["lut_mul_const"] = (lut_mul_const_parts(ib, wb, family) + regs) * l_const
    else:   # ±1 terms: a lane whose weight is the same in every fold is x or −x (w or −w),
        # kept once for all the rows that have it (the tools merge equal registers)
        tw = 1 if p.datapath == "xnor" else (ib if p.datapath == "select" else wb) + 1
        varying = res.Resources(lut4=1) if p.datapath == "xnor" else res.magnitude(tw, family)
        keys = _lane_keys(p)
        terms = res.Resources()
        for col in keys.T:
            distinct = np.unique(col)
            const = distinct[distinct >= 0]
            terms = terms + (varying + res.Resources(ff=tw)) * int((distinct < 0).sum())
            if p.datapath == "bipolar_in":      # ±w of a constant w: bits of x, ~x or constant
                terms = terms + res.Resources(ff=2 * bool(const.size))
            else:                               # x (a wire) or −x (select: a negation)
                terms = terms + res.Resources(ff=tw * const.size)
                if p.datapath == "select" and (const == 0).any():
                    terms = terms + varying
        if p.datapath in ("xnor", "select") and (keys >= 0).any():     # equal sums merge
            kept = np.ones(keys.shape, bool)
            # a weight of -1 is stored as a 0 bit, the weight register's initial value:
            # Yosys knows those terms (~x, -x) in its coarse passes (tree_cost)
            v = np.asarray(p.weights).reshape(NF, PE, SF, SIMD)
            early = (keys >= 0) & (v == -1).all(axis=(0, 2))
    tree = res.Resources()
    for ops, w in tree_sum_groups(SIMD, tw):
        w = min(w + 2, A)
        tree = tree + res.add(w, family) + res.Resources(lut4=(ops - 2) * w)
    parts["terms"] = terms + res.Resources(ff=ff)
    parts["tree"] = tree * PE + res.Resources(ff=PE * tree_sum_registers(SIMD, tw, A)) \
        if kept is None else tree_cost(kept, tw, A, family, keys, early, pad=0) \
        if p.datapath in ("xnor", "select") else tree_cost(kept, tw, A, family)
    parts["acc"] = res.accumulate(A, family) * PE + res.Resources(ff=3 * PE * A + p_reg)
    parts.update(RequantPipeline.parts(
        p.requant, A, ob, PE, family, sign=is_bipolar(p.out_type), spacing=SF,
        mult_live=round(m_live), mult_copies=PE if m_live else 1, identity=p.identity,
        mult_late=p.late_params is not None))
    return parts


# ---------------------------------------------------------------------------- hardware

def _slice_of_piece(lo: int, hi: int, w_bits: int, simd: int, slices: int) -> int:
    """The input slice (of ``slices`` equal ones over the ``simd`` lanes of a beat) that the
    weight ROM piece of bits ``[lo, hi)`` meets: the one holding its middle lane's input
    (lane ``pe·SIMD + s`` reads input lane ``s``)."""
    s = ((lo // w_bits + (hi - 1) // w_bits) // 2) % simd
    return min(slices - 1, s * slices // simd)


class IssueControl:
    """The unit's issue control: the synapse and neuron fold counters ``sf`` and ``nf``, their
    flags (``sf == SF - 1``, ``nf == 0``, ``nf == NF - 1``) kept in registers, the
    spending of ``credits`` (:class:`~hwgen.rtl_templates.credits.Credits`) and the input's
    ready ``take``: a register kept equal to ``first_nf & (~last_sf | room)``, so it
    reaches the enables of every slice of the wide word before the unit from a flip-flop;
    with ``loaded`` (weights in SPRAM) a gate, nothing taken or issued before the load.
    A copy fed the same ``valid`` and credits keeps the same state (each copy has its own
    feedback, so the tools keep them apart)."""

    def __init__(self, m: Module, SF: int, NF: int, credits: Credits, valid, loaded=None,
                 suffix: str = ""):
        self.sf = sf = Signal(range(max(SF, 2)), name=f"sf{suffix}")
        self.nf = nf = Signal(range(max(NF, 2)), name=f"nf{suffix}")
        self.last_sf = last_sf = Signal(init=int(SF == 1), name=f"last_sf{suffix}")
        self.first_nf = first_nf = Signal(init=1, name=f"first_nf{suffix}")
        last_nf = Signal(init=int(NF == 1), name=f"last_nf{suffix}")
        room = credits.room
        self.can_issue = can_issue = Signal(name=f"can_issue{suffix}")
        issue = (~first_nf | valid) & (~last_sf | room)
        if loaded is not None:
            issue, self.take = issue & loaded, first_nf & (~last_sf | room) & loaded
        else:
            self.take = Signal(init=1, name=f"take{suffix}")
        m.d.comb += can_issue.eq(issue)
        first_nf_next = Mux(can_issue & last_sf, last_nf, first_nf)
        last_sf_next = Mux(can_issue, Mux(last_sf, SF == 1, sf == SF - 2), last_sf)
        last_nf_next = Mux(can_issue & last_sf, nf == NF - 2 if NF > 1 else 1, last_nf)
        m.d.sync += [first_nf.eq(first_nf_next), last_sf.eq(last_sf_next),
                     last_nf.eq(last_nf_next)]
        with m.If(can_issue):
            with m.If(last_sf):
                m.d.sync += [sf.eq(0), nf.eq(Mux(nf == NF - 1, 0, nf + 1))]
            with m.Else():
                m.d.sync += sf.eq(sf + 1)
        credits.spend(can_issue & last_sf)
        if loaded is None:
            m.d.sync += self.take.eq(first_nf_next & (~last_sf_next | credits.room_next))


class MVAU(wiring.Component):
    """The matrix–vector unit. See the module documentation for the contract."""

    def __init__(self, p: MVAUParams):
        self.p = p
        members = {
            # with ready copies, the input's ready and valid also per slice of the FIFO
            "i": In(streams.signature(p.simd * p.in_type.bits, p.ready_copies)),
            "o": Out(stream.Signature(unsigned(p.pe * p.out_type.bits))),
        }
        if p.spram:     # the weight-load stream through the block, and its weights' state
            members.update(load_ports())
        super().__init__(members)

    def elaborate(self, platform):
        p = self.p
        m = Module()
        pl = p.plan
        PE, SIMD, NF, SF = p.pe, p.simd, p.nf, p.sf
        ib, wb, ob = p.in_type.bits, p.w_bits, p.out_type.bits
        acc_w = p.acc_bits
        rq = p.requant
        mult_w = rq.mult_bits

        # --- memories -------------------------------------------------------------
        if p.spram:
            w_addr, w_data, loaded = loaded_memory(m, "wmem", p.load_layout, self.wl_i,
                                                   self.wl_o)
            m.d.comb += self.loaded.eq(loaded)
            w_addr = [w_addr]
        else:
            w_rds = lane_rom(m, "wmem", PE * SIMD * wb, p.weight_words(), p.weight_slices,
                             logic=p.rom_logic)
            w_addr, w_data, loaded = [r.addr for r in w_rds], Cat(*(r.data for r in w_rds)), None


        if NF > 1 and SF > 1:
            # written in neuron fold 0 only, read (and used) in folds 1..NF-1 only
            ib_wr, ib_rd = ram(m, "ibuf", width=SIMD * ib, depth=SF, rw="dont_care")

        # --- output FIFO and credits -------------------------------------------------
        out = output_stage.OutputStage(m, self.o, PE * ob, pl.depth, registered=True,
                                       late_return=pl.late_return)
        depth = out.depth

        # --- issue stage ---------------------------------------------------------------
        ctl = IssueControl(m, SF, NF, out, self.i.valid, loaded)
        sf, nf, last_sf, first_nf, can_issue = (ctl.sf, ctl.nf, ctl.last_sf, ctl.first_nf,
                                                ctl.can_issue)
        m.d.comb += self.i.ready.eq(ctl.take)
        copy_issues = []
        for k in range(pl.ready_copies):
            # a copy of the control beside slice k of the FIFO before the unit, fed that
            # slice's valid and the returned credits from a register of its own: the same
            # state as ctl, its take equal to ctl's
            taken = kept_copy(m, out.taken_late, f"taken_c{k}", reset=True)
            copy = IssueControl(m, SF, NF, Credits(m, depth, taken, f"_c{k}"),
                                self.i.valid_slices[k], suffix=f"_c{k}")
            m.d.comb += self.i.ready_slices[k].eq(copy.take)
            copy_issues.append(copy.can_issue)
        assert len(w_addr) == pl.rom_copies
        # several ROM pieces: each piece's address steps on the issue of the control copy
        # of the input slice its lanes read (the middle lane's), not on the one issue whose
        # net would reach every piece (cnn_wide: the input's valid → the issue → 36 address
        # copies, 5.2 ns of route)
        steps = None
        if copy_issues and pl.rom_copies > 1:
            steps = [copy_issues[_slice_of_piece(lo, hi, wb, SIMD, len(copy_issues))]
                     for lo, hi in p.weight_slices]
        _, waddrs = rom_counter(m, NF * SF, can_issue, "widx", copies=pl.rom_copies,
                                steps=steps)
        m.d.comb += [a.eq(w) for a, w in zip(w_addr, waddrs)]
        if NF > 1 and SF > 1:
            m.d.comb += ib_rd.addr.eq(sf)
            # the write comes a cycle late, from registers (its enable reaches every LUT RAM
            # cell of a wide buffer from a flip-flop): fold 1 reads word k no sooner than the
            # cycle after fold 0's last word, when the late write of word k < SF - 1 is done
            m.d.sync += [
                ib_wr.addr.eq(sf),
                ib_wr.data.eq(self.i.payload),
                ib_wr.en.eq(self.i.valid & self.i.ready),
            ]

        # --- stage 1: operands ---------------------------------------------------------
        v1, first1, last1 = Signal(), Signal(), Signal()
        nf1 = Signal.like(nf)
        use_stream1 = Signal()
        x_reg = Signal(SIMD * ib, reset_less=True)
        m.d.sync += [
            v1.eq(can_issue), first1.eq(sf == 0), last1.eq(last_sf), nf1.eq(nf),
            use_stream1.eq(first_nf), x_reg.eq(self.i.payload),
        ]
        if NF > 1 and SF == 1:
            # one word, kept from x_reg a cycle after its beat is taken (fold 1 reads it a
            # cycle later still); each slice has a copy of the write enable of its own: one
            # would drive hundreds of flip-flops across the die
            ib_word = Signal(SIMD * ib, name="ibuf_word")
            for lo, hi in pl.in_slices:
                we = kept_copy(m, self.i.valid & self.i.ready, f"ibuf_we_{lo}", reset=True)
                with m.If(we):
                    m.d.sync += ib_word[lo:hi].eq(x_reg[lo:hi])
        if NF > 1:
            # the stream or the buffer: each slice selected by a kept copy of ``use_stream1``
            # of its own (one flip-flop selecting hundreds of bits: 12 ns of route seen)
            buffered = ib_word if SF == 1 else ib_rd.data
            parts = []
            for lo, hi in pl.in_slices:
                sel = use_stream1
                if lo:
                    sel = kept_copy(m, first_nf, f"use_stream1_{lo}", reset=True)
                stream, buf = x_reg[lo:hi], buffered[lo:hi]
                if pl.ibuf_apart:   # stage 1b per source; the select follows a cycle later
                    sel = kept_copy(m, sel, f"use_stream2_{lo}", reset=True)
                    stream = reg(m, stream, unsigned(hi - lo), f"x0s_{lo}")
                    buf = reg(m, buf, unsigned(hi - lo), f"x0b_{lo}")
                parts.append(Mux(sel, stream, buf))
            x_word = Cat(*parts)
        else:
            x_word = x_reg

        # --- stage 1b: operands registered (memory outputs are slow) ----------------------
        if p.weights_in_bram:   # a register next to the block RAM, the input alike
            if not pl.ibuf_apart:
                x_word = reg(m, x_word, unsigned(SIMD * ib), "x0")
            w_data = reg(m, w_data, unsigned(PE * SIMD * wb), "w0")
        x1 = reg(m, x_word, unsigned(SIMD * ib), "x1")
        w1 = reg(m, w_data, unsigned(PE * SIMD * wb), "w1")
        xs = lanes(x1, SIMD, ib, p.in_type.signed)

        # --- stage 1c: products (or ±1 terms) registered; then the adder tree -------------
        # a lane in logic whose weight is the same in every fold multiplies by a constant
        vw = np.asarray(p.weights).reshape(NF, PE, SF, SIMD) if p.lut_lanes else None
        self._wconst = lane_constants(vw.min(axis=(0, 2)), vw.max(axis=(0, 2))) \
            if p.lut_lanes else []
        dots = []
        for pe in range(PE):
            wl = lanes(w1[pe * SIMD * wb:(pe + 1) * SIMD * wb], SIMD, wb)
            if p.datapath == "xnor":
                bits = reg(m, ~(x1[:SIMD] ^ w1[pe * SIMD:(pe + 1) * SIMD]), unsigned(SIMD),
                           f"xnor_{pe}")
                dots.append(tree_sum(m, [bits[s] for s in range(SIMD)], f"pop_{pe}") * 2 - SIMD)
                continue
            if p.datapath == "select":
                terms = [select_term(wl[s][0], xs[s]) for s in range(SIMD)]
            elif p.datapath == "bipolar_in":
                terms = [select_term(x1[s], wl[s].as_signed()) for s in range(SIMD)]
            else:   # each hard multiplier with operand and product registers of its own
                terms = [self._product(m, pe * SIMD + s, xs[s], wl[s].as_signed(),
                                       f"{pe}_{s}") for s in range(SIMD)]
            terms = [reg(m, t, t.shape(), f"term_{pe}_{s}") for s, t in enumerate(terms)]
            dots.append(tree_sum(m, terms, f"dot_{pe}"))
        extra = pl.operand
        v1, first1, last1, nf1 = (delay(m, x, extra, f"{n}_x") for x, n in
                                  ((v1, "v1"), (first1, "first1"), (last1, "last1"), (nf1, "nf1")))

        # --- stage 2: accumulate; the channels' bias and multiplier are read ----------------
        v2, first2, last2 = Signal(), Signal(), Signal()
        nf2 = Signal.like(nf)
        dot2 = [Signal(signed(acc_w), name=f"dot2_{pe}", reset_less=True) for pe in range(PE)]
        m.d.sync += [v2.eq(v1), first2.eq(first1), last2.eq(last1), nf2.eq(nf1)]
        m.d.sync += [d.eq(x) for d, x in zip(dot2, dots)]
        acc = [Signal(signed(acc_w), name=f"acc_{pe}", reset_less=True) for pe in range(PE)]
        acc_next = [Mux(first2, 0, a) + d for a, d in zip(acc, dot2)]
        with m.If(v2):
            m.d.sync += [a.eq(n) for a, n in zip(acc, acc_next)]
        late = late_mult(rq, is_bipolar(p.out_type), p.identity)
        bias3, mult3 = channel_params(m, p.bias, p.mult_per_channel(), PE, acc_w, mult_w, nf1,
                                      late)

        # --- stage 3: the sum moves on; the channels' bias and multiplier arrive -----------
        v3 = Signal()
        s3 = [Signal(signed(acc_w), name=f"s3_{pe}") for pe in range(PE)]
        m.d.sync += v3.eq(v2 & last2)
        m.d.sync += [s.eq(n) for s, n in zip(s3, acc_next)]

        # --- stages 4, 5: bias, product; round half to even, zero point, clamp → FIFO ------
        rqp = RequantPipeline(m, v3, s3, bias3, mult3, rq, acc_w, ob,
                              sign=is_bipolar(p.out_type), spacing=SF, identity=p.identity,
                              mult_late=late)
        out.write(rqp.data, rqp.valid)
        return m

    def _product(self, m: Module, lane: int, x, w, name: str):
        """Lane ``lane``'s product ``x × w``, one stage before its term register: in a hard
        multiplier tile (operand registers, product), or of logic for the last
        ``lut_lanes`` lanes (:func:`~rtl_templates.lutmul.lut_mul`); both delayed to
        :data:`PROD_STAGES` + :func:`lut_extra_stages` registers after the operands."""
        p = self.p
        pl = p.plan
        extra = pl.lut_extra
        tw = signed(p.in_type.bits + p.w_bits + 1)
        if lane >= p.pe * p.simd - p.lut_lanes:
            prod = lut_mul(m, x, w, f"lmul_{name}", self._wconst[lane])[:tw.width].as_signed()
            return delay(m, prod, PROD_STAGES + extra + pl.spread
                         - lut_mul_stages(p.w_bits), f"lmul_{name}_d")
        apart = bool(p.lut_lanes)
        if pl.spread:
            x = kept_copy(m, x, f"xp_{name}")
            w = reg(m, w, w.shape(), f"wp_{name}")
        prod = reg(m, tile_operand(m, x, f"xt_{name}", apart) *
                   tile_operand(m, w, f"wt_{name}", apart), tw, f"prod_{name}")
        return delay(m, prod, extra, f"prod_{name}_d")


# ---------------------------------------------------------------------------- registration

def manifest(p: MVAUParams) -> dict:
    return {"matrix": {"rows_mh": p.mh, "cols_mw": p.mw}, "vectors_per_frame": p.vectors,
            "folding": {"pe": p.pe, "simd": p.simd,
                        **({"lut_lanes": p.lut_lanes} if p.lut_lanes else {}),
                        **({"rom_logic": True} if p.rom_logic else {})},
            "types": {"input": p.in_type.name, "output": p.out_type.name,
                      "weight_bits": p.w_bits, "accumulator_bits": p.acc_bits,
                      "multiplier_bits": p.requant.mult_bits, "shift": p.requant.shift,
                      "datapath": p.datapath}}


def fold_space(p: MVAUParams) -> FoldSpace:
    return FoldSpace(divisors(p.mh), divisors(p.mw),
                     lambda pe, simd: frame_steps(p.mh, p.mw, pe, simd, p.vectors))



def examples() -> list[Example]:
    """Small instances for the conformance test: PE = SIMD = 1; both folded; NF = SF = 1;
    several vectors per frame (a convolution); per-channel multipliers."""
    i8, u8 = QType(8, True), QType(8, False)
    rng = np.random.default_rng(5)
    out = []
    for mh, mw, pe, simd, vectors, t, o, per_channel in ((4, 6, 1, 1, 1, u8, i8, False),
                                                        (8, 12, 2, 4, 1, i8, u8, True),
                                                        (6, 8, 6, 8, 1, i8, i8, False),
                                                        (4, 6, 2, 3, 3, u8, u8, True)):
        w = rng.integers(-128, 128, (mh, mw))
        b = rng.integers(-2000, 2000, mh)
        scale = 0.5 * (o.hi - o.lo) / (np.sqrt(mw) * 74 * 100)
        mult = rng.uniform(0.5, 1.5, mh if per_channel else 1) * scale
        zp = (o.lo + o.hi + 1) // 2
        p = MVAUParams(w, b, make_requant(mult, zp, o.lo, o.hi), t, o, pe, simd, vectors)
        out.append(Example(p, (Port(t, simd, vectors * mw),), (Port(o, pe, vectors * mh),),
                           f"{mh}x{mw}-pe{pe}-simd{simd}-v{vectors}"))
    return out


register_block("mvau", params=MVAUParams, component=MVAU, golden=golden, cost=cost,
               timing=timing, manifest=manifest, fold_space=fold_space, input_live=input_live,
               slice_ports=slice_ports,
               examples=examples)
