"""Per-channel product of a feature map and a vector held for the frame (squeeze-and-excitation:
``x[C, H, W] · s[C, 1, 1]``, QDQ ``Mul`` with broadcasting or ``com.microsoft.QLinearMul``).

Semantics (one frame)::

    y[p, c] = clamp(round_half_even(round24((x[p, c] - zx)·(s[c] - zs)·mult) / 2**shift) + zy,
                    lo, hi)

the exact integer product of the two operands less their zero points, then the project's
requantizer (:class:`rtl_templates.quant.Requant`, ``mult / 2**shift`` the float32 value of
``f32(f32(sx·ss) / sy)``). This is onnxruntime's QLinearMul kernel on x86-64 (MLAS: the
integer product converted to float32, times the float32 scale ratio, rounded half to even,
plus the zero point, saturated): exact for products below 2**24 in magnitude, which 8-bit
operands always are.

Stream contract
    ``i0``: the feature map, channel-last, ``pe`` elements of ``x_type`` per beat
    (``pixels · channels / pe`` beats per frame); ``i1``: the vector, ``pe`` elements of
    ``s_type`` per beat (``channels / pe`` beats per frame); ``o``: like ``i0`` with
    ``out_type`` elements.

Hardware
    A RAM of ``channels / pe`` words holds the frame's vector. The block alternates two
    phases: *load* (``i1.ready`` high, ``i0.ready`` low) until the vector's last beat is
    written, then *run* (``i0.ready`` = a credit is left, ``i1.ready`` low) until the frame's
    last feature-map beat is taken. In run, a beat taken at cycle t reads its channels' word
    at t; t+1 operands registered; t+2 operands less their zero points; t+3 the lanes'
    products; then :class:`~rtl_templates.requant.RequantPipeline` (constant multiplier) into
    the output stage: the earliest output transfer is ``RUN_STAGES + depth + 2`` cycles
    after the take. One feature-map beat per cycle in run; one vector beat per cycle in load.

Deadlock: the vector usually derives from the same feature map (pooling, two 1×1 layers, a
sigmoid), so the FIFO in front of ``i0`` must hold every feature-map beat that arrives before
the vector's last beat (the lowering sizes it from the timing models).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from amaranth.hdl import Const, Module, Signal, signed, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from hwgen.rtl_templates import output_stage
from hwgen.rtl_templates import resources as res
from hwgen.rtl_templates.block import Example, FoldSpace, Port, divisors, register_block
from hwgen.rtl_templates.cost import Cost
from hwgen.rtl_templates.load_phase import load_phase, replay_phase
from hwgen.rtl_templates.memory import ram
from hwgen.rtl_templates.pipeline import counter_bits, reg
from hwgen.rtl_templates.quant import QType, Requant, make_requant, signed_width
from hwgen.rtl_templates.requant import LANE_FIT, RequantPipeline, delay
from hwgen.rtl_templates.resources import Mul, unsigned_muls
from hwgen.rtl_templates.words import lanes

#: registers from a feature-map take to the products (operands, less zero points, product)
RUN_STAGES = 3


@dataclass(frozen=True, eq=False)
class ChanMulParams:
    """One per-channel multiplier (see the module documentation)."""
    x_type: QType
    s_type: QType
    out_type: QType
    zx: int
    zs: int
    rq: Requant            # one multiplier (per tensor)
    channels: int
    pixels: int
    pe: int = 1

    def __post_init__(self):
        if self.pe < 1 or self.channels % self.pe:
            raise ValueError(f"PE={self.pe} does not divide the {self.channels} channels")
        if len(self.rq.mult) != 1:
            raise ValueError("the per-channel multiplier takes one requantization multiplier")
        if not (self.out_type.lo <= self.rq.lo <= self.rq.hi <= self.out_type.hi):
            raise ValueError(f"clamp bounds outside {self.out_type.name}")

    @property
    def vec_beats(self) -> int:
        return self.channels // self.pe

    @property
    def x_beats(self) -> int:
        return self.pixels * self.vec_beats

    @property
    def dx_bounds(self) -> tuple[int, int]:
        return self.x_type.lo - self.zx, self.x_type.hi - self.zx

    @property
    def ds_bounds(self) -> tuple[int, int]:
        return self.s_type.lo - self.zs, self.s_type.hi - self.zs

    @property
    def acc_bits(self) -> int:
        corners = [a * b for a in self.dx_bounds for b in self.ds_bounds]
        return signed_width(min(corners), max(corners))

    @property
    def depth(self) -> int:
        """Registers from a take to the FIFO write."""
        return RUN_STAGES + RequantPipeline.depth(self.rq, self.acc_bits)

    @property
    def latency(self) -> int:
        """Cycles from a take to the earliest output transfer of its beat."""
        return self.depth + output_stage.latency(registered=True)

    @property
    def fifo_depth(self) -> int:
        return output_stage.fifo_depth(self.latency)


def golden(p: ChanMulParams, x: np.ndarray, s: np.ndarray) -> np.ndarray:
    """[N, pixels·channels] channel-last feature maps and [N, channels] vectors → [N,
    pixels·channels]."""
    x = np.asarray(x, dtype=np.int64).reshape(-1, p.pixels, p.channels)
    s = np.asarray(s, dtype=np.int64).reshape(-1, 1, p.channels)
    return p.rq.apply((x - p.zx) * (s - p.zs)).reshape(x.shape[0], -1)


def timing(p: ChanMulParams, in_first: int, in_last: int) -> tuple[int, int]:
    """First and last output transfer, with ``in_first``/``in_last`` the later first and last
    transfers of the two inputs: the vector's beats are taken from ``in_first`` on, the
    feature map's after them, one per cycle at the earliest."""
    lat = p.latency
    run0 = in_first + p.vec_beats
    return run0 + lat, max(in_last, run0 + p.x_beats - 1) + lat


def multiplies(p: ChanMulParams) -> dict[Mul, int]:
    dxb, dsb = signed_width(*p.dx_bounds), signed_width(*p.ds_bounds)
    rq_tiles = RequantPipeline.multiplies(p.rq, p.acc_bits, p.pe)
    return res.add_muls({Mul(dxb, True, dsb, True): p.pe}, unsigned_muls(rq_tiles))


def cost(p: ChanMulParams) -> Cost:
    by_family, parts = res.estimate(resource_parts, p, RESOURCE_FIT, multiplies(p))
    cycles = p.vec_beats + p.x_beats
    return Cost(cycles=cycles, latency=timing(p, 0, 0)[1] + 1, multipliers=p.pe,
                multiplier_widths=[(signed_width(*p.dx_bounds), signed_width(*p.ds_bounds))]
                * p.pe, multiplies=multiplies(p),
                memory_bits=p.channels * p.s_type.bits + p.fifo_depth * p.pe * p.out_type.bits,
                registers=max(r.ff for r in by_family.values()), by_family=by_family,
                parts=parts)


#: calibration of :func:`resource_parts` (the requantizer's lanes as calibrated; the rest
#: structural counts, not yet fitted to Yosys)
RESOURCE_FIT: res.Fit = LANE_FIT


def resource_parts(p: ChanMulParams, family: str) -> dict[str, res.Resources]:
    """The vector RAM, the output FIFO, the phase control, per lane the operand registers and
    subtractions, and the requantizer lanes."""
    PE, xb, sb = p.pe, p.x_type.bits, p.s_type.bits
    dxb, dsb = signed_width(*p.dx_bounds), signed_width(*p.ds_bounds)
    cb = counter_bits(p.vec_beats) + counter_bits(p.pixels)
    parts = {"vec": res.memory(PE * sb, p.vec_beats, family, rom=False,
                                 rw="dont_care"),
             **output_stage.parts(PE * p.out_type.bits, p.latency, family, registered=True),
             "ctl": res.Resources(ff=2 * cb + RUN_STAGES - 1, lut4=2 * cb, carry=cb),
             "lanes": (res.sub(dxb, family) + res.sub(dsb, family)
                       + res.Resources(ff=xb + sb + dxb + dsb + p.acc_bits)) * PE}
    parts.update(RequantPipeline.parts(p.rq, p.acc_bits, p.out_type.bits, PE, family,
                                       mult_live=0, mult_copies=1))
    return parts


class ChanMul(wiring.Component):
    """The per-channel multiplier. See the module documentation for the contract."""

    def __init__(self, p: ChanMulParams):
        self.p = p
        super().__init__({
            "i0": In(stream.Signature(unsigned(p.pe * p.x_type.bits))),
            "i1": In(stream.Signature(unsigned(p.pe * p.s_type.bits))),
            "o": Out(stream.Signature(unsigned(p.pe * p.out_type.bits))),
        })

    def elaborate(self, platform):
        p = self.p
        m = Module()
        PE, VB = p.pe, p.vec_beats
        out = output_stage.OutputStage(m, self.o, PE * p.out_type.bits, p.latency,
                                       registered=True)
        wr, rd = ram(m, "vec", width=PE * p.s_type.bits, depth=VB, rw="dont_care")
        # (written only while loading, read only after: never both in one cycle)

        # --- load phase: the vector's beats into the RAM ------------------------------------
        loading = load_phase(m, self.i1, wr, VB)

        # --- run phase: feature-map beats against their channels' word ---------------------
        take = Signal()
        m.d.comb += [self.i0.ready.eq(~loading & out.room), take.eq(self.i0.valid & self.i0.ready)]
        out.spend(take)
        replay_phase(m, take, loading, rd, VB, p.pixels)

        # --- t+1 operands; t+2 less their zero points; t+3 products ------------------------
        v1 = Signal()
        x1 = Signal(PE * p.x_type.bits)
        m.d.sync += v1.eq(take)
        with m.If(take):
            m.d.sync += x1.eq(self.i0.payload)
        dxb, dsb = signed_width(*p.dx_bounds), signed_width(*p.ds_bounds)
        prods = []
        v2 = delay(m, v1, 1, "v2")
        for k, (x, s) in enumerate(zip(lanes(x1, PE, p.x_type.bits, p.x_type.signed),
                                       lanes(rd.data, PE, p.s_type.bits, p.s_type.signed))):
            dx = reg(m, x - p.zx, signed(dxb), f"dx_{k}")
            ds = reg(m, s - p.zs, signed(dsb), f"ds_{k}")
            # loads only when its operands are valid: Yosys's ice40_dsp takes this product
            # register into the SB_MAC16 correctly then (a plain one, followed by the
            # requantizer's plain sum register, it resolves to a constant: Yosys 0.70)
            prod = Signal(signed(p.acc_bits), name=f"prod_{k}", reset_less=True)
            with m.If(v2):
                m.d.sync += prod.eq(dx * ds)
            prods.append(prod)
        v3 = delay(m, v2, 1, "v3")
        rq = RequantPipeline(m, v3, prods, [Const(0, 1)] * PE, Const(p.rq.mult[0], p.rq.mult_bits),
                             p.rq, p.acc_bits, p.out_type.bits)
        out.write(rq.data, rq.valid)
        return m


def manifest(p: ChanMulParams) -> dict:
    return {"folding": {"pe": p.pe}, "channels": p.channels,
            "types": {"input": p.x_type.name, "vector": p.s_type.name,
                      "output": p.out_type.name}}


def fold_space(p: ChanMulParams) -> FoldSpace:
    return FoldSpace(divisors(p.channels), (1,),
                     lambda pe, simd: (p.pixels + 1) * p.channels // pe)



def examples() -> list[Example]:
    """Small instances for the conformance test (``i0`` the feature map, ``i1`` the vector)."""
    i8, u8 = QType(8, True), QType(8, False)
    out = []
    for t, o, c, px, pe in ((u8, u8, 8, 9, 1), (i8, i8, 8, 4, 2), (i8, u8, 4, 1, 4)):
        rq = make_requant(np.float32(0.0173), o.lo + 9 if not o.signed else -3, o.lo, o.hi)
        p = ChanMulParams(t, t, o, zx=t.lo + 7 if not t.signed else 2,
                          zs=t.lo + 11 if not t.signed else -5, rq=rq, channels=c, pixels=px,
                          pe=pe)
        out.append(Example(p, (Port(t, pe, c * px), Port(t, pe, c)), (Port(o, pe, c * px),),
                           f"{t.name}-{o.name}-c{c}-px{px}-pe{pe}"))
    return out


register_block("chanmul", params=ChanMulParams, component=ChanMul, golden=golden, cost=cost,
               timing=timing, manifest=manifest, fold_space=fold_space,
               examples=examples)
