"""Channel concatenation of two channel-last streams (QDQ ``Concat`` on the channel axis).

Stream contract
    ``i0``: pixels × ``c0`` channels, ``pe`` elements per beat (``c0/pe`` beats per pixel);
    ``i1``: the same pixels × ``c1`` channels, ``pe`` per beat; ``o``: pixels × ``c0 + c1``,
    ``pe`` per beat. For every pixel the block emits ``c0/pe`` beats taken from ``i0`` and then
    ``c1/pe`` beats taken from ``i1``; only the input whose turn it is sees ``ready``.

Requantization (ONNX QDQ: DequantizeLinear(x_i) → Concat → QuantizeLinear(sy, zy), or
``com.microsoft.QLinearConcat``), three modes (``ConcatParams.mode``):

``"pass"``: both inputs already have the output's type, scale and zero point (what ORT's
    quantizer normally produces): a multiplexer into a small FIFO.
``"table"`` (inputs of ≤ ``TABLE_MAX_BITS`` bits): every element goes through a lookup table
    per input holding onnxruntime's float32 arithmetic exactly::

        y = clamp(rint(f32(f32((x - z_i)·s_i) / sy)) + zy, lo, hi)

    (DequantizeLinear's float32 product, QuantizeLinear's float32 division, round half to
    even) — bit-exact to ORT's unfused QDQ graph and to its QLinearConcat, whose kernel also
    builds such tables. One ROM of ``2**bits0 + 2**bits1`` entries per lane.
``"requant"`` (wider inputs): :func:`rtl_templates.quant.make_requant` of ``s_i / sy`` applied to
    ``x - z_i`` — the project's requantizer (float32 multiplier, float32 product rounding),
    which equals the float32 path above except, rarely, within a float32 rounding of a tie.
    The two inputs share one shift (the larger; the other mantissa is shifted up exactly).

Pipeline (beat taken in cycle t)
    pass: FIFO write at t, earliest output transfer t+2.
    table: ROM read at t, FIFO write at t+1, earliest output t+3.
    requant: t+1 operand registered; t+2 product registered, rounded/clamped into the FIFO;
    earliest output transfer t+4. A credit counter keeps the FIFO from overflowing, so the
    pipeline never stalls. In every mode one beat per cycle, ``o.valid`` is the FIFO's
    ``r_rdy`` and the inputs' ready depend only on registered state.

Deadlock: the two inputs are read in alternation per pixel, so branches feeding them from a
common source (fork or split) need buffering for the beats one branch runs ahead.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from hwgen.rtl_templates import output_stage
from hwgen.rtl_templates import resources as res
from hwgen.rtl_templates.block import Example, FoldSpace, Port, divisors, register_block
from hwgen.rtl_templates.cost import Cost
from hwgen.rtl_templates.memory import plain_rom_attrs
from hwgen.rtl_templates.pipeline import (
    chunk_widths,
    counter_bits,
    mul_pipe,
    mul_pipe_registers,
    mul_stages,
    reg,
)
from hwgen.rtl_templates.quant import QType, Quantized, Requant, make_requant, signed_width
from hwgen.rtl_templates.requant import (
    LANE_FIT,
    abs_pipe,
    delay,
    requant_stages,
    round_clamp,
    round_clamp_parts,
)
from hwgen.rtl_templates.resources import Mul, merge_fits
from hwgen.rtl_templates.words import lanes

#: cycles from an input transfer to that beat's output transfer: a pass writes the taken beat
#: (an input FIFO's output register) into the output FIFO; a table's read data passes the
#: output stage's write register; the requantizer's operand register, then its product and
#: rounding stages (:attr:`ConcatParams.product_stages`, ``requant_stages``) come before the
#: output stage (:attr:`ConcatParams.latency`)
PASS_LATENCY = output_stage.latency(registered=True)
TABLE_LATENCY = 1 + output_stage.latency()
REQUANT_LATENCY = 1 + output_stage.latency(registered=True)
LATENCIES = {"pass": PASS_LATENCY, "table": TABLE_LATENCY, "requant": REQUANT_LATENCY}
#: inputs up to this width are requantized by lookup table
TABLE_MAX_BITS = 8


@dataclass(frozen=True, eq=False)
class ConcatParams:
    """One concat instance: a pure pass, or per input a lookup table (``tables[i][raw]``,
    indexed by the element's raw bit pattern) or a requantizer (``requant[i]`` applied to
    ``x - zero_points[i]``)."""
    c0: int
    c1: int
    pe: int
    in_types: tuple[QType, QType]
    out_type: QType
    requant: tuple[Requant, Requant] | None = None
    zero_points: tuple[int, int] = (0, 0)
    tables: tuple[tuple[int, ...], tuple[int, ...]] | None = None
    pixels: int = 0          # pixels per frame; 0 = not set (no cost)

    def __post_init__(self):
        if self.pe < 1 or self.c0 < 1 or self.c1 < 1:
            raise ValueError("channel counts and PE must be positive")
        for c in (self.c0, self.c1):
            if c % self.pe:
                raise ValueError(f"PE={self.pe} does not divide the {c} channels of an input")
        if self.requant is not None and self.tables is not None:
            raise ValueError("give requantizers or tables, not both")
        if self.tables is not None:
            for t, tab in zip(self.in_types, self.tables):
                if len(tab) != 1 << t.bits:
                    raise ValueError(f"a {t.name} input needs a table of {1 << t.bits} entries")
                if min(tab) < self.out_type.lo or max(tab) > self.out_type.hi:
                    raise ValueError(f"table values outside {self.out_type.name}")
        elif self.requant is None:
            if any(t != self.out_type for t in self.in_types):
                raise ValueError("a pass-through concat needs equal input and output types")
        else:
            for r in self.requant:
                if len(r.mult) != 1:
                    raise ValueError("concat requantizers are per tensor")
                if not (self.out_type.lo <= r.lo <= r.hi <= self.out_type.hi):
                    raise ValueError(f"clamp bounds outside {self.out_type.name}")
            r0, r1 = self.requant
            if (r0.zero_point, r0.lo, r0.hi) != (r1.zero_point, r1.lo, r1.hi):
                raise ValueError("both requantizers must share the output zero point and "
                                 "bounds")

    @property
    def b0(self) -> int:
        return self.c0 // self.pe

    @property
    def b1(self) -> int:
        return self.c1 // self.pe

    @property
    def beats_per_pixel(self) -> int:
        return self.b0 + self.b1

    @property
    def mode(self) -> str:
        if self.tables is not None:
            return "table"
        return "pass" if self.requant is None else "requant"

    @property
    def passthrough(self) -> bool:
        return self.mode == "pass"

    @property
    def latency(self) -> int:
        if self.mode == "requant":
            return (LATENCIES["requant"] + self.product_stages
                    + requant_stages(self.hw_requant))
        return LATENCIES[self.mode]

    @property
    def product_stages(self) -> int:
        """Registers from the operand ``x - z_i`` to its signed product: sign and magnitude,
        :func:`~rtl_templates.pipeline.mul_pipe` (tiles with operand registers of their own,
        a copy of each partial product, the sums), the sign back."""
        return 1 + mul_stages(self.d_bits, self.mult_bits, copy=True) + 1

    @property
    def hw_requant(self) -> Requant:
        """The hardware's requantizer after the selected multiplier (shared shift, zero point
        and clamp of both inputs)."""
        r0 = self.requant[0]
        return Requant(mult=(1,), shift=self.shift, zero_point=r0.zero_point, lo=r0.lo,
                       hi=r0.hi)

    @property
    def d_bounds(self) -> tuple[int, int]:
        """Bounds of ``x - z_i`` over both inputs."""
        los = [t.lo - z for t, z in zip(self.in_types, self.zero_points)]
        his = [t.hi - z for t, z in zip(self.in_types, self.zero_points)]
        return min(los), max(his)

    @property
    def d_bits(self) -> int:
        return signed_width(*self.d_bounds)

    @property
    def shift(self) -> int:
        return max(r.shift for r in self.requant)

    @property
    def mults(self) -> tuple[int, int]:
        """The two multipliers at the common shift."""
        s = self.shift
        return tuple(int(r.mult[0]) << (s - r.shift) for r in self.requant)

    @property
    def mult_bits(self) -> int:
        return max(1, max(m.bit_length() for m in self.mults))


def float32_table(t: QType, s, z: int, sy, zy: int, lo: int, hi: int) -> tuple[int, ...]:
    """onnxruntime's DequantizeLinear → QuantizeLinear in float32 for every raw pattern of
    ``t``: ``clamp(rint(f32(f32((x - z)·s) / sy)) + zy, lo, hi)``."""
    f32 = np.float32
    x = t.from_unsigned(np.arange(1 << t.bits))
    v = (x - int(z)).astype(np.float32) * f32(s)          # float32 product, one rounding
    q = np.rint(v / f32(sy)).astype(np.int64) + int(zy)   # float32 division, half to even
    return tuple(int(y) for y in np.clip(q, lo, hi))


def make_concat(x0: Quantized, x1: Quantized, y: Quantized, *, c0: int, c1: int, pe: int = 1,
                lo: int | None = None, hi: int | None = None,
                mode: str | None = None) -> ConcatParams:
    """Parameters of a QDQ channel Concat of ``x0`` (``c0`` channels) and ``x1`` (``c1``)
    into ``y``; ``lo``/``hi`` clamp bounds (default the output type's range). Equal
    parameters everywhere give a pure pass; otherwise ``mode`` (default: ``"table"`` when
    both inputs have at most ``TABLE_MAX_BITS`` bits, else ``"requant"``)."""
    ty, sy, zy = y.qtype, y.scale, y.zero_point
    lo = ty.lo if lo is None else int(lo)
    hi = ty.hi if hi is None else int(hi)
    f32 = np.float32
    ins = (x0, x1)
    types = (x0.qtype, x1.qtype)
    zps = (int(x0.zero_point), int(x1.zero_point))
    same = all((x.qtype, f32(x.scale), int(x.zero_point)) == (ty, f32(sy), int(zy)) for x in ins)
    if mode is None:
        if same and (lo, hi) == (ty.lo, ty.hi):
            mode = "pass"
        else:
            mode = "table" if max(t.bits for t in types) <= TABLE_MAX_BITS else "requant"
    if mode == "pass":
        if not (same and (lo, hi) == (ty.lo, ty.hi)):
            raise ValueError("a pass-through concat needs equal input and output parameters")
        return ConcatParams(c0, c1, pe, types, ty)
    if mode == "table":
        tables = tuple(float32_table(x.qtype, x.scale, x.zero_point, sy, zy, lo, hi)
                       for x in ins)
        return ConcatParams(c0, c1, pe, types, ty, tables=tables, zero_points=zps)
    if mode != "requant":
        raise ValueError(f"unknown concat mode {mode!r}")
    rqs = tuple(make_requant(np.float64(f32(x.scale)) / np.float64(f32(sy)), zy, lo, hi)
                for x in ins)
    return ConcatParams(c0, c1, pe, types, ty, rqs, zps)


# ---------------------------------------------------------------------------- golden

def requantize_input(p: ConcatParams, k: int, x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.int64)
    if p.mode == "pass":
        return x
    if p.mode == "table":
        return np.asarray(p.tables[k], dtype=np.int64)[p.in_types[k].to_unsigned(x)]
    return p.requant[k].apply(x - p.zero_points[k])


def golden(p: ConcatParams, x0: np.ndarray, x1: np.ndarray) -> np.ndarray:
    """Frames ``x0`` [N, pixels·c0] and ``x1`` [N, pixels·c1] (channels last; any shape
    [N, ..., c] is accepted) → [N, pixels·(c0 + c1)]."""
    x0, x1 = np.asarray(x0), np.asarray(x1)
    n = x0.shape[0]
    if x0[0].size % p.c0 or x1[0].size % p.c1 or x0[0].size // p.c0 != x1[0].size // p.c1:
        raise ValueError(f"shapes {x0.shape} and {x1.shape} do not match c0={p.c0}, "
                         f"c1={p.c1}")
    x0, x1 = x0.reshape(n, -1, p.c0), x1.reshape(n, -1, p.c1)
    y = np.concatenate([requantize_input(p, 0, x0), requantize_input(p, 1, x1)], axis=-1)
    return y.reshape(n, -1)


# ---------------------------------------------------------------------------- cost

def timing(p: ConcatParams, in_first: int, in_last: int) -> tuple[int, int]:
    """First and last output transfer of a frame whose first input transfer (on ``i0``) and
    last input transfer (on ``i1``) happened at ``in_first`` and ``in_last``. The block moves
    one beat per cycle in total: with both branches offering data early the last output
    follows ``in_first + pixels·beats_per_pixel - 1``, not ``in_last``."""
    last = max(in_last, in_first + p.pixels * p.beats_per_pixel - 1)
    return in_first + p.latency, last + p.latency


def multiplies(p: ConcatParams) -> dict[Mul, int]:
    """Per lane the tiles of :func:`~rtl_templates.pipeline.mul_pipe`: the magnitude of ``x -
    z_i`` times the selected multiplier, chunk by chunk (none but a pass or tables)."""
    if p.mode != "requant":
        return {}
    out: dict[Mul, int] = {}
    for wa in chunk_widths(p.d_bits):
        for wb in chunk_widths(p.mult_bits):
            k = Mul(wa, False, wb, False)
            out[k] = out.get(k, 0) + p.pe
    return out


def cost(p: ConcatParams) -> Cost:
    pixels = p.pixels
    if pixels < 1:
        raise ValueError("the concat's pixels per frame are not set")
    beats = pixels * p.beats_per_pixel
    depth = output_stage.fifo_depth(p.latency)
    ob = p.out_type.bits
    muls = multiplies(p)
    by_family, parts = res.estimate(resource_parts, p, RESOURCE_FIT, muls)
    common = dict(cycles=beats, latency=timing(p, 0, beats - 1)[1] + 1,
                  registers=max(r.ff for r in by_family.values()), by_family=by_family,
                  parts=parts)
    if p.passthrough:
        return Cost(memory_bits=depth * p.pe * ob, **common)
    if p.mode == "table":
        rom = sum(1 << t.bits for t in p.in_types) * ob
        return Cost(memory_bits=depth * p.pe * ob + p.pe * rom, **common)
    return Cost(multipliers=p.pe, multiplier_widths=[(p.d_bits, p.mult_bits)] * p.pe,
                multiplies=muls,
                memory_bits=depth * p.pe * ob, **common)


#: calibration of :func:`resource_parts` (``benchmarks/resources.py --fit``)
RESOURCE_FIT: res.Fit = merge_fits(LANE_FIT, {
    "ecp5": {
        "lut4": {"ctl": 1.259, "fifo": 1.297, "lanes": 1.023, "mux": 1.068, "rq_front": 0.737,
                 "rq_r24": 1.073, "rq_tail": 0.357, "tables": 1.263, "1": 0.031},
        "carry": {"ctl": 0.869, "fifo": 0.435, "lanes": 1.024, "rq_front": 1.156, "rq_r24": 1.316,
                  "rq_tail": 0.538, "1": 0},
    },
    "ice40": {
        "lut4": {"ctl": 0.969, "fifo": 0.854, "lanes": 0.992, "mul_logic": 0.932, "mux": 1.012,
                 "rq_front": 0.995, "rq_r24": 0.708, "rq_tail": 0.435,
                 "tables": 0.894, "1": 0},
        "carry": {"ctl": 0.887, "fifo": 0.545, "lanes": 0.997, "mul_logic": 0.913,
                  "rq_front": 0.99, "rq_r24": 1.201, "rq_tail": 0.449, "1": 0},
    },
})


def resource_parts(p: ConcatParams, family: str) -> dict[str, res.Resources]:
    """The concat's hardware in the resource model's parts (see
    :mod:`rtl_templates.resources`): output FIFO, control, and per lane the tables (plain
    memories, two inputs' tables in one) or the product and its rounding."""
    PE, ob = p.pe, p.out_type.bits
    kb = counter_bits(p.beats_per_pixel)
    parts = output_stage.parts(PE * ob, p.latency, family, p.mode != "table")
    parts["ctl"] = res.Resources(ff=kb, lut4=kb + 2, carry=kb / 2)
    if p.passthrough:
        parts["mux"] = res.mux(PE * ob, family)
        return parts
    if p.mode == "table":
        n = sum(1 << t.bits for t in p.in_types)
        mask = (1 << ob) - 1
        init = [v & mask for v in p.tables[0]] + [v & mask for v in p.tables[1]]
        live, distinct = res.rom_live(np.asarray(init).reshape(n, 1), ob)
        parts["tables"] = (res.memory(live, n, family, rom=True, plain=True,
                                      logic_width=distinct)
                           + res.mux(n.bit_length(), family)) * PE
        return parts
    rq = p.hw_requant
    db, mw = p.d_bits, p.mult_bits
    w = db + mw + 1
    ms = mul_stages(db, mw, copy=True)
    n_tiles = len(chunk_widths(db)) * len(chunk_widths(mw))
    # x - z_i selected; sign and magnitude; the tiles' registers and sums; the sign's delay
    # and the signed product
    parts["lanes"] = (res.sub(db, family) + res.mux(db, family) + res.magnitude(db, family)
                      + res.add(w, family) * (n_tiles - 1) + res.magnitude(w, family)
                      + res.Resources(ff=db + 1 + db + ms + w
                                      + mul_pipe_registers(db, mw, b_regs=False, copy=True))
                      ) * PE
    # the selected multiplier, its copy and the tiles' operand registers of it (one set for
    # the lanes); the valid's delays
    parts["ctl"] = parts["ctl"] + res.Resources(ff=3 * mw + 2 + ms + 1)
    parts["rq_front"] = res.magnitude(w, family) * PE + res.Resources(ff=PE * (1 + w))
    for k, v in round_clamp_parts(w, rq, ob, family).items():
        parts[k] = v * PE
    return parts


# ---------------------------------------------------------------------------- hardware

class Concat(wiring.Component):
    """Channel concat of ``i0`` and ``i1`` into ``o``. See the module documentation."""

    def __init__(self, p: ConcatParams):
        self.p = p
        t0, t1 = p.in_types
        super().__init__({
            "i0": In(stream.Signature(unsigned(p.pe * t0.bits))),
            "i1": In(stream.Signature(unsigned(p.pe * t1.bits))),
            "o": Out(stream.Signature(unsigned(p.pe * p.out_type.bits))),
        })

    def elaborate(self, platform):
        p = self.p
        m = Module()
        PE, ob = p.pe, p.out_type.bits
        out = output_stage.OutputStage(m, self.o, PE * ob, p.latency,
                                       registered=p.mode != "table")

        # position within the pixel: beats 0..b0-1 from i0, then b1 beats from i1
        bpp = p.beats_per_pixel
        k = Signal(range(max(bpp, 2)))
        sel0 = Signal()
        m.d.comb += sel0.eq(k < p.b0)
        valid = Mux(sel0, self.i0.valid, self.i1.valid)

        # a pass writes in the cycle it takes a beat: the FIFO's own w_rdy is the room
        room = out.fifo.w_rdy if p.passthrough else out.room
        take = Signal()
        m.d.comb += [
            take.eq(valid & room),
            self.i0.ready.eq(sel0 & room),
            self.i1.ready.eq(~sel0 & room),
        ]
        with m.If(take):
            m.d.sync += k.eq(Mux(k == bpp - 1, 0, k + 1))

        if p.passthrough:
            out.write(Mux(sel0, self.i0.payload, self.i1.payload), take)
            return m

        out.spend(take)
        t0, t1 = p.in_types

        if p.mode == "table":
            # one ROM per lane: input 0's table, then input 1's, indexed by the raw element
            n0 = 1 << t0.bits
            mask = (1 << ob) - 1
            init = [v & mask for v in p.tables[0]] + [v & mask for v in p.tables[1]]
            outs = []
            raw0, raw1 = lanes(self.i0.payload, PE, t0.bits), lanes(self.i1.payload, PE, t1.bits)
            for j in range(PE):
                rom = Memory(shape=unsigned(ob), depth=len(init), init=init,
                             attrs=plain_rom_attrs(len(init)))
                m.submodules[f"rom{j}"] = rom
                rd = rom.read_port()
                m.d.comb += rd.addr.eq(Mux(sel0, raw0[j], n0 + raw1[j]))
                outs.append(rd.data)
            v1 = Signal()
            m.d.sync += v1.eq(take)
            out.write(Cat(*outs), v1)
            return m

        # --- t+1: operands (x - z_i) and the multiplier of the selected input ---------------
        z0, z1 = p.zero_points
        m0, m1 = p.mults
        mw = p.mult_bits
        d1 = [Signal(signed(p.d_bits), name=f"d1_{j}", reset_less=True) for j in range(PE)]
        mult1 = Signal(unsigned(mw), reset_less=True)
        v1 = Signal()
        m.d.sync += v1.eq(take)
        with m.If(take):
            m.d.sync += mult1.eq(Mux(sel0, Const(m0, unsigned(mw)), Const(m1, unsigned(mw))))
            for j, (x0, x1) in enumerate(zip(lanes(self.i0.payload, PE, t0.bits, t0.signed),
                                             lanes(self.i1.payload, PE, t1.bits, t1.signed))):
                m.d.sync += d1[j].eq(Mux(sel0, x0 - z0, x1 - z1))

        # --- t+2: sign and magnitude; the product in multiplier tiles; the sign back -------
        v2 = reg(m, v1, 1, "v2")
        mult2 = reg(m, mult1, unsigned(mw), "mult2")
        ms = mul_stages(p.d_bits, mw, copy=True)
        w = p.d_bits + mw + 1
        ys = []
        rq = p.hw_requant
        for j in range(PE):
            neg, mag = abs_pipe(m, d1[j], f"d2_{j}")
            prod = mul_pipe(m, mag, mult2, f"p_{j}", v2)
            neg = delay(m, neg, ms, f"neg_{j}")
            p2 = reg(m, Mux(neg, -prod.as_signed(), prod.as_signed()), signed(w), f"p2_{j}")
            ys.append(round_clamp(m, p2, rq, name=f"y_{j}")[:ob])
        v_p = delay(m, v2, ms + 1, "v_p")
        out.write(Cat(*ys), delay(m, v_p, requant_stages(rq), "v_rq"))
        return m


# ---------------------------------------------------------------------------- registration

def manifest(p: ConcatParams) -> dict:
    return {"folding": {"pe": p.pe}}


def fold_space(p: ConcatParams) -> FoldSpace:
    c = math.gcd(p.c0, p.c1)
    return FoldSpace(divisors(c), (1,), lambda pe, simd: p.pixels * (p.c0 + p.c1) // pe)



def examples() -> list[Example]:
    """Small instances for the conformance test: a pure pass, tables, requantizers."""
    i8, u8, i12 = QType(8, True), QType(8, False), QType(12, True)
    out = []
    for pe, px, c0, c1, t0, t1, ty, q0, q1, qy in (
            (1, 4, 2, 3, i8, i8, i8, (0.1, 0), (0.1, 0), (0.1, 0)),
            (2, 3, 4, 6, u8, u8, u8, (0.05, 128), (0.07, 120), (0.05, 128)),
            (4, 2, 8, 4, i8, u8, i8, (0.02, 0), (0.05, 130), (0.03, -4)),
            (1, 3, 2, 1, i12, i12, i8, (0.01, 0), (0.02, 5), (0.05, 1))):
        p = make_concat(Quantized(t0, *q0), Quantized(t1, *q1), Quantized(ty, *qy), c0=c0,
                        c1=c1, pe=pe)
        p = replace(p, pixels=px)
        out.append(Example(p, (Port(t0, pe, px * c0), Port(t1, pe, px * c1)),
                           (Port(ty, pe, px * (c0 + c1)),), f"{p.mode}-pe{pe}-c{c0}+{c1}"))
    return out


register_block("concat", params=ConcatParams, component=Concat, golden=golden,
               cost=cost, timing=timing, manifest=manifest, fold_space=fold_space,
               examples=examples)
