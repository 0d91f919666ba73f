"""Window pooling (MaxPool / AveragePool) on the depthwise window stream, folded by PE.

Stream contract
    ``i``: the sliding-window generator's depthwise order, exactly as for the VVAU
    (:mod:`rtl_templates.vvau`): per output pixel, per channel block ``cb < NB = C/PE``, the K
    kernel positions in raster order, one beat of PE channels each (element ``ci`` of a beat is
    channel ``cb*PE + ci``). ``o``: channel-last, PE channels per beat, NB beats per pixel.
    One frame = ``pixels`` output pixels. One input beat per cycle: ``pixels*K*NB`` cycles.

Max pooling (``kind="max"``)
    ``out[c] = max_k x[c, k]``. The maximum of integers is exact and commutes with the
    (monotonic) quantization only when input and output share scale and zero point, so the
    block requires ``in_type == out_type`` and no requantizer; the importer must check that
    the QuantizeLinear after the MaxPool has the input's scale and zero point.
    Padding: the window generator must pad with ``in_type.lo`` (the smallest value, never
    above a real element; ONNX MaxPool ignores pads). Every window must contain one real
    element (true for ONNX pads smaller than the kernel).

Average pooling (``kind="avg"``)
    ONNX QDQ semantics (DequantizeLinear → AveragePool → QuantizeLinear)::

        y = saturate(round_half_even( sum_{real k} (q_k - z_in) * s_in / count / s_out ) + z_out)

    The window generator pads with ``in_zero_point`` (the integer of real 0.0, which is what
    ONNX pads with), so pads add nothing to ``sum_k (q_k - z_in)`` and the sum can run over all
    K positions::

        acc = sum_{k<K} q_k - K * z_in                  (bias: a constant, -K*z_in)
        y   = requant_j(acc),  j = index of count[pixel] among the distinct counts

    ``count[pixel]`` is the divisor: K everywhere for ``count_include_pad=1`` (or no
    padding); the number of non-pad positions of that pixel's window for
    ``count_include_pad=0``. ``counts`` (int [pixels], None = all K) gives it per output
    pixel. Its distinct values, ascending, are ``count_values``; ``requant.mult[j]`` is the
    multiplier for ``count_values[j]``, the float32 value of ``s_in / s_out / count`` (one
    shared shift, zero point and clamp; the importer builds it). Rounding is
    :class:`rtl_templates.quant.Requant`'s: the float32 product, then half to even. In hardware, a
    ROM of ``pixels`` entries holds each pixel's index ``j`` (left out when there is one
    distinct count) and a small table the multipliers.

Pipeline (a step issued in cycle t)
    max: t+1: compare with the running maximum; on the last kernel position → output FIFO
    avg: t+1: add to the running sum (the count index arrives from its ROM);
         t+2: the sum moves on; t+3: add -K*z_in, select the multiplier;
         t+4: multiply; round half to even, zero point, clamp → output FIFO
As in the MVAU, a credit counter keeps the FIFO from overflowing, the pipeline never stalls
and ``valid`` on ``o`` never depends on ``ready``.

Cost
    ``cycles = pixels*K*NB``; ``latency = cycles + pipeline_depth(p)``;
    multipliers: none (max), PE of ``acc_bits × mult_bits`` (avg); memory: the output FIFO
    (:func:`output_stage.fifo_depth` beats of ``PE*out_bits``) plus, for avg with several
    counts, the index ROM (``pixels*ceil(log2(#counts))`` bits).
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import numpy as np
from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from hwgen.rtl_templates import output_stage
from hwgen.rtl_templates import resources as res
from hwgen.rtl_templates.block import Example, FoldSpace, Port, divisors, register_block
from hwgen.rtl_templates.cost import Cost
from hwgen.rtl_templates.memory import rom
from hwgen.rtl_templates.pipeline import Loop, counter_bits
from hwgen.rtl_templates.quant import QType, Requant, make_requant, signed_width
from hwgen.rtl_templates.requant import LANE_FIT, RequantPipeline
from hwgen.rtl_templates.resources import merge_fits, unsigned_muls
from hwgen.rtl_templates.vvau import stream_to_windows
from hwgen.rtl_templates.words import lanes

#: cycles from issuing the last step of an output beat to that beat's output transfer:
#: to the running maximum's compare (max, then the output stage's write register) or to the
#: requantizer's input (avg), plus the output stage's; the requantizer's own stages come on
#: top (:func:`pipeline_depth`)
BASE_DEPTH = {"max": 1 + output_stage.latency(), "avg": 2 + output_stage.latency(True)}


@dataclass(frozen=True)
class PoolPlan:
    """The unit's structure, computed once from its parameters (:func:`plan`): what
    :meth:`Pool.elaborate` builds and :func:`resource_parts`, :func:`cost` and
    :func:`timing` count."""
    #: cycles from issuing the last step of an output beat to that beat's output transfer
    depth: int
    #: the output FIFO's beats (:func:`output_stage.fifo_depth`)
    fifo_depth: int
    #: the last stage is a plain register (avg: the requantizer's clamp), so the output
    #: stage adds no write register; max writes its compare's result through one
    registered: bool
    #: avg with pixels of different window counts: a ROM of each pixel's count index
    count_rom: bool


def plan(p: PoolParams) -> PoolPlan:
    """The unit's :class:`PoolPlan` (cached on ``p``: :attr:`PoolParams.plan`)."""
    depth = BASE_DEPTH[p.kind]
    if p.kind == "avg":
        depth += RequantPipeline.depth(p.requant, p.acc_bits, spacing=p.kernel)
    return PoolPlan(depth=depth, fifo_depth=output_stage.fifo_depth(depth),
                    registered=p.kind == "avg",
                    count_rom=p.kind == "avg" and len(p.count_values) > 1)


def pipeline_depth(p: PoolParams) -> int:
    """Cycles from the last step of an output beat to that beat's output transfer
    (:attr:`PoolPlan.depth`)."""
    return p.plan.depth


# ---------------------------------------------------------------------------- params

@dataclass(frozen=True, eq=False)
class PoolParams:
    """Everything that defines one pooling unit."""
    kind: str                # "max" | "avg"
    channels: int            # C
    kernel: int              # K = KH*KW
    in_type: QType
    out_type: QType
    pe: int = 1
    pixels: int = 1          # output pixels per frame (OH*OW)
    # avg only:
    requant: Requant | None = None     # mult[j] for count_values[j] (or one multiplier)
    in_zero_point: int = 0             # z_in; pads arrive as z_in
    counts: np.ndarray | None = None   # [pixels] divisor per output pixel; None = all K

    @functools.cached_property
    def plan(self) -> PoolPlan:
        """The unit's structure (:func:`plan`)."""
        return plan(self)

    def __post_init__(self):
        if self.kind not in ("max", "avg"):
            raise ValueError(f"pooling kind must be 'max' or 'avg', not {self.kind!r}")
        if self.channels < 1 or self.kernel < 1 or self.pixels < 1:
            raise ValueError("channels, kernel and pixels must be positive")
        if self.pe < 1 or self.channels % self.pe:
            raise ValueError(f"PE={self.pe} does not divide the {self.channels} channels")
        if self.kind == "max":
            if self.in_type != self.out_type:
                raise ValueError("max pooling needs the same input and output type "
                                 "(same scale and zero point)")
            if self.requant is not None or self.counts is not None:
                raise ValueError("max pooling takes no requantizer and no counts")
            return
        if self.requant is None:
            raise ValueError("average pooling needs a requantizer")
        if not self.in_type.lo <= self.in_zero_point <= self.in_type.hi:
            raise ValueError(f"input zero point {self.in_zero_point} outside {self.in_type}")
        if self.counts is not None:
            c = np.asarray(self.counts)
            if c.shape != (self.pixels,):
                raise ValueError(f"counts must have one entry per output pixel "
                                 f"({self.pixels}), got shape {c.shape}")
            if c.min() < 1 or c.max() > self.kernel:
                raise ValueError(f"counts must be in 1..{self.kernel}")
        if len(self.requant.mult) not in (1, len(self.count_values)):
            raise ValueError(f"need one multiplier per distinct count "
                             f"({len(self.count_values)}) or one in all")

    @property
    def nb(self) -> int:
        return self.channels // self.pe

    @property
    def in_elements(self) -> int:
        return self.pixels * self.channels * self.kernel

    @property
    def out_elements(self) -> int:
        return self.pixels * self.channels

    @property
    def count_per_pixel(self) -> np.ndarray:
        if self.counts is None:
            return np.full(self.pixels, self.kernel, dtype=np.int64)
        return np.asarray(self.counts, dtype=np.int64)

    @property
    def count_values(self) -> np.ndarray:
        """The distinct divisors, ascending."""
        return np.unique(self.count_per_pixel)

    @property
    def count_index(self) -> np.ndarray:
        """[pixels] index into ``count_values`` (and ``requant.mult``)."""
        return np.searchsorted(self.count_values, self.count_per_pixel)

    @property
    def bias(self) -> int:
        return -self.kernel * self.in_zero_point

    @property
    def acc_bounds(self) -> tuple[int, int]:
        """Bounds of every running sum and of sum + bias (avg)."""
        k, lo, hi = self.kernel, self.in_type.lo, self.in_type.hi
        return min(k * lo, k * lo + self.bias, 0), max(k * hi, k * hi + self.bias, 0)

    @property
    def acc_bits(self) -> int:
        return signed_width(*self.acc_bounds)

    def mult_per_index(self) -> list[int]:
        m = list(self.requant.mult)
        return m * len(self.count_values) if len(m) == 1 else m

    @property
    def index_bits(self) -> int:
        return (len(self.count_values) - 1).bit_length()


# ---------------------------------------------------------------------------- golden

def golden(p: PoolParams, x: np.ndarray) -> np.ndarray:
    """Integer semantics. ``x`` is [..., pixels*C*K] in the depthwise stream order
    (:func:`rtl_templates.vvau.windows_to_stream`); returns [..., pixels*C] channel-last."""
    win = stream_to_windows(np.asarray(x, dtype=np.int64), p.pixels, p.channels, p.kernel,
                            p.pe)                                    # [..., pixels, C, K]
    if p.kind == "max":
        y = win.max(axis=-1)
    else:
        acc = win.sum(axis=-1) + p.bias                              # [..., pixels, C]
        mults = p.mult_per_index()
        per_pixel = [mults[j] for j in p.count_index]
        rq = p.requant
        y = dataclasses.replace(rq, mult=tuple(per_pixel)).apply(
            acc, channel_axis=-2) if len(set(per_pixel)) > 1 else rq.apply(acc)
    return y.reshape(*y.shape[:-2], p.out_elements)


# ---------------------------------------------------------------------------- cost

def frame_steps(channels: int, kernel: int, pixels: int, pe: int) -> int:
    """Cycles of a frame: per output pixel, C/PE channel blocks of K window beats (the block's
    one cycle formula, which the pooling op's fold space uses)."""
    return pixels * kernel * (channels // pe)


def cost(p: PoolParams) -> Cost:
    """Cycles per frame, latency of an idle unit, and resources."""
    steps = frame_steps(p.channels, p.kernel, p.pixels, p.pe)
    fifo_bits = p.plan.fifo_depth * p.pe * p.out_type.bits
    rq_tiles = [] if p.kind == "max" else \
        RequantPipeline.multiplies(p.requant, p.acc_bits, p.pe, spacing=p.kernel)
    by_family, parts = res.estimate(resource_parts, p, RESOURCE_FIT, unsigned_muls(rq_tiles))
    regs = max(r.ff for r in by_family.values())
    if p.kind == "max":
        return Cost(cycles=steps, latency=timing(p, 0, steps - 1)[1] + 1,
                    memory_bits=fifo_bits, registers=regs, by_family=by_family, parts=parts)
    idx_rom = p.pixels * p.index_bits if p.plan.count_rom else 0
    return Cost(
        cycles=steps,
        latency=timing(p, 0, steps - 1)[1] + 1,
        multipliers=len(rq_tiles),
        multiplier_widths=rq_tiles,
        multiplies=unsigned_muls(rq_tiles),
        memory_bits=idx_rom + fifo_bits,
        registers=regs, by_family=by_family, parts=parts,
    )


#: calibration of :func:`resource_parts` (``benchmarks/resources.py --fit``)
RESOURCE_FIT: res.Fit = merge_fits(LANE_FIT, {
    "ecp5": {
        "lut4": {"acc": 1.003, "ctl": 1.2, "fifo": 1.142, "idx": 0.919, "rq_front": 0.596,
                 "rq_lanes": 21.25, "rq_r24": 0.948, "rq_seq": 0.621,
                 "rq_tail": 0.271, "run": 1.104, "1": 0.014},
        "carry": {"acc": 1.003, "ctl": 0.696, "fifo": 0.531, "idx": 1.003, "rq_front": 1.087,
                  "rq_lanes": 6.77, "rq_r24": 1.247, "rq_seq": 0.947,
                  "rq_tail": 0.377, "run": 0.715, "1": 0},
    },
    "ice40": {
        "lut4": {"acc": 1.003, "ctl": 0.985, "fifo": 0.892, "idx": 0.962, "rq_front": 0.996,
                 "rq_lanes": 24.33, "rq_r24": 0.732, "rq_seq": 0.747,
                 "rq_tail": 0.43, "run": 1.006, "1": 0},
        "carry": {"acc": 0.998, "ctl": 0.837, "fifo": 0.659, "idx": 1.002, "rq_front": 0.976,
                  "rq_lanes": 10.25, "rq_r24": 1.182, "rq_seq": 0.952,
                  "rq_tail": 0.369, "run": 0.907, "1": 0},
    },
})


def resource_parts(p: PoolParams, family: str) -> dict[str, res.Resources]:
    """The unit's hardware in the resource model's parts (see :mod:`rtl_templates.resources`):
    output FIFO, control, the running maximum or sum, the count ROM and the requantizers."""
    PE, NB, K = p.pe, p.nb, p.kernel
    ib, ob = p.in_type.bits, p.out_type.bits
    ctl_bits = counter_bits(K) + counter_bits(NB)
    pl = p.plan
    parts = output_stage.parts(PE * ob, pl.depth, family, pl.registered)
    # (+4: the two loop counters' first and last flags, ``pipeline.Loop``)
    parts["ctl"] = res.Resources(ff=ctl_bits + 5, lut4=ctl_bits + 2, carry=ctl_bits / 2)
    if p.kind == "max":
        parts["run"] = (res.compare(ib, family) + res.mux(ib, family)) * PE \
            + res.Resources(ff=2 * PE * ib)
        return parts
    A, rq = p.acc_bits, p.requant
    parts["acc"] = res.accumulate(A, family) * PE + res.Resources(ff=PE * (ib + 2 * A) + 1)
    mults = p.mult_per_index()
    n_idx = len(p.count_values)
    m_live = 0
    if pl.count_rom:
        pxb = counter_bits(p.pixels)
        m_live = sum(len({(v >> b) & 1 for v in mults}) > 1 for b in range(rq.mult_bits))
        parts["idx"] = (res.rom([int(j) for j in p.count_index], p.index_bits, family)
                        + res.mux(m_live, family, n_idx)
                        + res.Resources(ff=pxb + p.index_bits, lut4=pxb, carry=pxb / 2))
    parts.update(RequantPipeline.parts(rq, A, ob, PE, family, spacing=K, mult_live=m_live,
                                       mult_copies=1))
    return parts
def timing(p: PoolParams, in_first: int, in_last: int) -> tuple[int, int]:
    """Cycles of the first and last output transfer of a frame whose first and last input
    beats were taken at ``in_first`` and ``in_last`` (output never stalled). The first output
    beat needs K input beats (assumed to arrive one per cycle); the last follows the last
    input beat."""
    steps = frame_steps(p.channels, p.kernel, p.pixels, p.pe)
    d = p.plan.depth
    return in_first + p.kernel - 1 + d, max(in_last, in_first + steps - 1) + d


# ---------------------------------------------------------------------------- hardware

class Pool(wiring.Component):
    """Max or average pooling unit. See the module documentation for the contract."""

    def __init__(self, p: PoolParams):
        self.p = p
        super().__init__({
            "i": In(stream.Signature(unsigned(p.pe * p.in_type.bits))),
            "o": Out(stream.Signature(unsigned(p.pe * p.out_type.bits))),
        })

    def elaborate(self, platform):
        p = self.p
        m = Module()
        PE, NB, K = p.pe, p.nb, p.kernel
        ib, ob = p.in_type.bits, p.out_type.bits

        # --- output FIFO and credits ---------------------------------------------------
        pl = p.plan
        out = output_stage.OutputStage(m, self.o, PE * ob, pl.depth, registered=pl.registered)

        # --- issue stage ---------------------------------------------------------------
        loop_k, loop_cb = Loop(m, K, "k"), Loop(m, NB, "cb")
        last_k = loop_k.last
        issue = Signal()
        m.d.comb += [
            self.i.ready.eq(~last_k | out.room),
            issue.eq(self.i.valid & self.i.ready),
        ]
        loop_k.step(issue)
        loop_cb.step(issue & last_k)
        out.spend(issue & last_k)

        # --- stage 1: the running maximum / sum ------------------------------------------
        v1, first1, last1 = Signal(), Signal(), Signal()
        x1 = Signal(PE * ib)
        m.d.sync += [v1.eq(issue), first1.eq(loop_k.first), last1.eq(last_k), x1.eq(self.i.payload)]
        xs = lanes(x1, PE, ib, p.in_type.signed)

        if p.kind == "max":
            shape = signed(ib) if p.in_type.signed else unsigned(ib)
            run = [Signal(shape, name=f"max_{ci}") for ci in range(PE)]
            nxt = [Mux(first1 | (x > r), x, r) for x, r in zip(xs, run)]
            with m.If(v1):
                m.d.sync += [r.eq(n) for r, n in zip(run, nxt)]
            out.write(Cat(*[n[:ob] for n in nxt]), v1 & last1)
            return m

        rq = p.requant
        acc_w, mult_w = p.acc_bits, rq.mult_bits
        acc = [Signal(signed(acc_w), name=f"acc_{ci}", reset_less=True) for ci in range(PE)]
        acc_next = [Mux(first1, 0, a) + x for a, x in zip(acc, xs)]
        with m.If(v1):
            m.d.sync += [a.eq(n) for a, n in zip(acc, acc_next)]

        # count index of the pixel of the beat issued at t: ROM read at t, data at t+1
        if pl.count_rom:
            px = Signal(range(max(p.pixels, 2)))
            with m.If(issue & last_k & loop_cb.last):
                m.d.sync += px.eq(Mux(px == p.pixels - 1, 0, px + 1))
            idx_rd, = rom(m, "idxrom", width=p.index_bits, init=p.count_index)
            m.d.comb += idx_rd.addr.eq(px)
            idx1 = idx_rd.data

        # --- stage 2: the sum moves on --------------------------------------------------
        v2 = Signal()
        s2 = [Signal(signed(acc_w), name=f"s2_{ci}") for ci in range(PE)]
        m.d.sync += v2.eq(v1 & last1)
        m.d.sync += [s.eq(n) for s, n in zip(s2, acc_next)]
        mults = p.mult_per_index()
        if pl.count_rom:
            idx2 = Signal(p.index_bits)
            m.d.sync += idx2.eq(idx1)
            mult_sel = Array([Const(v, unsigned(mult_w)) for v in mults])[idx2]
        else:
            mult_sel = Const(mults[0], unsigned(mult_w))

        # --- stages 3, 4: bias, product; round half to even, zero point, clamp → FIFO ------
        rqp = RequantPipeline(m, v2, s2, [p.bias] * PE, mult_sel, rq, acc_w, ob, spacing=K)
        out.write(rqp.data, rqp.valid)
        return m


# ---------------------------------------------------------------------------- registration

def manifest(p: PoolParams) -> dict:
    return {"folding": {"pe": p.pe}}


def fold_space(p: PoolParams) -> FoldSpace:
    return FoldSpace(divisors(p.channels), (1,),
                     lambda pe, simd: frame_steps(p.channels, p.kernel, p.pixels, pe))



def examples() -> list[Example]:
    """Small instances for the conformance test: max and average (every window full, and
    windows of two sizes), one lane and several, and a max-pool whose 64-bit output FIFO is
    two slices (the output stage's write register and a kept enable per slice)."""
    i8, u8 = QType(8, True), QType(8, False)
    out = []
    for kind, c, k, px, pe, t, o, counts in (("max", 4, 4, 3, 2, i8, i8, None),
                                             ("max", 16, 4, 2, 8, i8, i8, None),
                                             ("avg", 3, 9, 2, 1, u8, u8, None),
                                             ("avg", 4, 6, 3, 4, i8, i8, (4, 6, 4))):
        rq, zin = None, 0
        if kind == "avg":
            zin = (t.lo + t.hi + 1) // 2 + 7
            n = np.unique(np.asarray(counts if counts else (k,)))
            rq = make_requant(0.7 / n, (o.lo + o.hi + 1) // 2 - 3, o.lo, o.hi)
        p = PoolParams(kind, c, k, t, o, pe, px, rq, zin,
                       None if counts is None else np.asarray(counts))
        out.append(Example(p, (Port(t, pe, px * c * k),), (Port(o, pe, px * c),),
                           f"{kind}-c{c}-k{k}-px{px}-pe{pe}"))
    return out


register_block("pool", params=PoolParams, component=Pool, golden=golden, cost=cost,
               timing=timing, manifest=manifest, fold_space=fold_space,
               examples=examples)
