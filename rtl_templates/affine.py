"""Per-channel affine requantizer: ``y = clamp(floor((x·mult[c] + offset[c]) / 2**shift), lo, hi)``
for every element ``x`` of channel ``c`` (a BatchNormalization of its own between two
quantized tensors).

The owner chooses integer ``mult`` (signed) and ``offset`` per channel; ``floor`` of a
fixed-point affine map, with the rounding's half folded into ``offset``, represents every
monotone staircase that onnxruntime's float32 arithmetic makes of one channel (see
:func:`fit_channels`, which finds constants reproducing a given table exactly when they exist).

Stream contract
    ``i``: channel-last elements of ``in_type``, ``pe`` per beat (``pe`` divides
    ``channels``; ``pixels · channels`` elements per frame); ``o``: the same positions, of
    ``out_type``.

Hardware (a beat taken at cycle t)
    The constants of the beat's channels come from a ROM word (one per ``channels / pe``
    beats of a pixel) read at t. t+1 operands and constants registered; t+2 the products
    ``x·mult``; t+3 plus ``offset``; t+4 the arithmetic shift and the clamp into the output
    stage (:mod:`output_stage`: its write register, then the FIFO); the earliest output
    transfer is t+7 (``LATENCY``). A credit counter keeps the FIFO from overflowing, so the
    pipeline never stalls; one beat per cycle.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from amaranth.hdl import Cat, Module, Mux, Signal, signed, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from hwgen.rtl_templates import output_stage
from hwgen.rtl_templates import resources as res
from hwgen.rtl_templates.block import Example, FoldSpace, Port, divisors, register_block
from hwgen.rtl_templates.cost import Cost
from hwgen.rtl_templates.memory import rom
from hwgen.rtl_templates.pipeline import counter_bits, reg
from hwgen.rtl_templates.quant import QType, signed_width
from hwgen.rtl_templates.resources import Mul
from hwgen.rtl_templates.words import lanes

#: cycles from an input transfer to the output transfer of that beat: four to the clamp (a
#: multiplexer, so the output stage's write register comes first), then the output stage's
LATENCY = 4 + output_stage.latency()


@dataclass(frozen=True, eq=False)
class AffineParams:
    """One affine requantizer (see the module documentation)."""
    in_type: QType
    out_type: QType
    mult: tuple[int, ...]        # per channel, signed
    offset: tuple[int, ...]      # per channel, signed
    shift: int
    lo: int
    hi: int
    pixels: int
    pe: int = 1

    def __post_init__(self):
        c = len(self.mult)
        if len(self.offset) != c or c < 1:
            raise ValueError("one multiplier and one offset per channel")
        if self.pe < 1 or c % self.pe:
            raise ValueError(f"PE={self.pe} does not divide the {c} channels")
        if self.shift < 0 or not (self.out_type.lo <= self.lo <= self.hi <= self.out_type.hi):
            raise ValueError("bad shift or clamp bounds")

    @property
    def channels(self) -> int:
        return len(self.mult)

    @property
    def mult_bits(self) -> int:
        return signed_width(min(self.mult), max(self.mult))

    @property
    def offset_bits(self) -> int:
        return signed_width(min(self.offset), max(self.offset))

    @property
    def prod_bounds(self) -> tuple[int, int]:
        t = self.in_type
        corners = [v * m for v in (t.lo, t.hi) for m in (min(self.mult), max(self.mult))]
        return min(corners), max(corners)

    @property
    def sum_bits(self) -> int:
        lo, hi = self.prod_bounds
        return signed_width(lo + min(self.offset), hi + max(self.offset))

    @property
    def beats(self) -> int:
        return self.pixels * self.channels // self.pe


def golden(p: AffineParams, x: np.ndarray) -> np.ndarray:
    """[N, pixels·channels] channel-last → the same shape."""
    x = np.asarray(x, dtype=np.int64)
    n = x.shape[0]
    x = x.reshape(n, -1, p.channels)
    v = x * np.asarray(p.mult, dtype=np.int64) + np.asarray(p.offset, dtype=np.int64)
    return np.clip(v >> p.shift, p.lo, p.hi).reshape(n, -1)


def fit_channel(values: np.ndarray, table: np.ndarray, lo: int, hi: int, shift: int,
                guess: int) -> tuple[int, int] | None:
    """Integers (mult, offset) with ``clamp(floor((v·mult + offset) / 2**shift), lo, hi) ==
    table`` for every input value ``v`` (numpy arrays), or None if there are none (one
    channel of :func:`fit_channels`)."""
    fits = fit_channels(values, np.asarray(table).reshape(-1, 1), lo, hi, shift, [guess])
    return fits[0]


def fit_channels(values: np.ndarray, tables: np.ndarray, lo: int, hi: int, shift: int,
                 guesses) -> list[tuple[int, int] | None]:
    """Per channel ``c`` (column of ``tables`` [values, channels]), integers (mult, offset)
    with ``clamp(floor((v·mult + offset) / 2**shift), lo, hi) == tables[:, c]`` for every
    input value ``v``, or None if there are none.

    For a fixed ``mult`` the offsets that work form an interval (from the lower and upper
    edge of every entry's step); its emptiness, ``g(mult) = max_v(L_v - v·mult) - min_v(U_v
    - v·mult)``, is convex in ``mult``, so a ternary search around each channel's guess finds
    its best multiplier (all channels searched at once, in lockstep)."""
    v = np.asarray(values, dtype=np.int64).reshape(-1, 1)
    t = np.asarray(tables, dtype=np.int64)
    guess = np.asarray(guesses, dtype=np.int64).reshape(-1)
    one = 1 << shift
    big = 1 << 62
    low = np.where(t > lo, t * one, -big)              # v·m + f >= low
    up = np.where(t < hi, (t + 1) * one - 1, big)      # v·m + f <= up

    def gap(m: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        vm = v * m
        a = np.max(low - vm, axis=0)
        b = np.min(up - vm, axis=0)
        return a - b, a, b

    span = np.maximum(np.abs(guess), one) + 2
    a, b = guess - span, guess + span
    while True:
        live = b - a > 2
        if not live.any():
            break
        m1, m2 = a + (b - a) // 3, b - (b - a) // 3
        left = gap(m1)[0] <= gap(m2)[0]
        b = np.where(live & left, m2, b)
        a = np.where(live & ~left, m1, a)
    # the best of the (at most three) multipliers left, the smallest on a tie
    cands = [np.minimum(a + k, b) for k in range(3)]
    gaps = np.stack([gap(m)[0] for m in cands])
    best = np.choose(np.argmin(gaps, axis=0), cands)
    g, f_lo, f_hi = gap(best)
    fits: list[tuple[int, int] | None] = []
    for c in range(t.shape[1]):
        if g[c] > 0:
            fits.append(None)
            continue
        lo_ok, hi_ok = f_lo[c] > -big // 2, f_hi[c] < big // 2
        # the offset nearest the middle of its interval (any works)
        off = (int(f_lo[c]) + int(f_hi[c])) // 2 if lo_ok and hi_ok else \
            int(f_lo[c] if lo_ok else f_hi[c])
        fits.append((int(best[c]), off))
    return fits


def timing(p: AffineParams, in_first: int, in_last: int) -> tuple[int, int]:
    return in_first + LATENCY, in_last + LATENCY


def multiplies(p: AffineParams) -> dict[Mul, int]:
    xw = p.in_type.bits + (0 if p.in_type.signed else 1)
    if p.channels == p.pe:          # one word: each lane multiplies by a constant
        return res.add_muls(*({m: 1} for m in (Mul.by_constant(xw, True, abs(v))
                                                for v in p.mult) if m))
    # each lane's multipliers come from its own ROM columns: the tools narrow a lane's
    # product to the widest multiplier of that lane (its columns above are sign copies)
    y = signed_width(*p.prod_bounds)
    return res.add_muls(*({Mul(xw, True, signed_width(min(p.mult[j::p.pe]),
                                                       max(p.mult[j::p.pe])), True,
                               y_bits=y): 1} for j in range(p.pe)))


def _words(p: AffineParams) -> list[int]:
    """ROM words: per lane its multiplier over its offset."""
    mb, fb = p.mult_bits, p.offset_bits
    consts = [((m & ((1 << mb) - 1)) << fb) | (f & ((1 << fb) - 1))
              for m, f in zip(p.mult, p.offset)]
    return [sum(consts[k * p.pe + j] << (j * (mb + fb)) for j in range(p.pe))
            for k in range(p.channels // p.pe)]


def cost(p: AffineParams) -> Cost:
    by_family, parts = res.estimate(resource_parts, p, RESOURCE_FIT, multiplies(p))
    word = p.mult_bits + p.offset_bits
    return Cost(cycles=p.beats, latency=timing(p, 0, p.beats - 1)[1] + 1, multipliers=p.pe,
                multiplier_widths=[(p.in_type.bits, p.mult_bits)] * p.pe,
                multiplies=multiplies(p),
                memory_bits=p.channels * word
                + output_stage.fifo_depth(LATENCY) * p.pe * p.out_type.bits,
                registers=max(r.ff for r in by_family.values()), by_family=by_family,
                parts=parts)


#: calibration of :func:`resource_parts` (``benchmarks/resources.py --fit``)
RESOURCE_FIT: res.Fit = {
    "ecp5": {
        "lut4": {"clanes": 0.603, "ctl": 0.992, "fifo": 1.01, "lanes": 0.688,
                  "mul_logic": 0.55, "rom": 1.219, "1": 0.001},
        "carry": {"clanes": 0.693, "ctl": 0.822, "fifo": 0.712, "lanes": 0.949,
                  "mul_logic": 0.817, "1": 0.0},
    },
    "ice40": {
        "lut4": {"clanes": 0.685, "ctl": 0.98, "fifo": 0.854, "lanes": 0.53,
                  "rom": 1.036, "1": 0.001},
        "carry": {"clanes": 0.763, "ctl": 1.026, "fifo": 0.961, "lanes": 0.862, "1": 0.0},
    },
}


def resource_parts(p: AffineParams, family: str) -> dict[str, res.Resources]:
    """The constants' ROM and their registers, per lane the operand, product, sum and
    clamp, the output FIFO.

    Registers as the tools keep them: the constants' registers copy the ROM's distinct
    non-constant columns (equal ones merge, constant ones go, but for one flip-flop of the
    constant ones), the sum only above the shift; with one word the constants are
    constants and the product is by each lane's ``|mult|``, whose trailing zeros are a
    shift."""
    mb, fb, pe = p.mult_bits, p.offset_bits, p.pe
    vb = p.channels // pe
    w, ob = p.sum_bits, p.out_type.bits
    xw = p.in_type.bits + (0 if p.in_type.signed else 1)
    lane = (res.add(w, family) + res.compare(w - p.shift, family, True) * 2
            + res.mux(ob, family, 3))
    keep = max(1, w - p.shift)
    if vb > 1:
        vals = np.array([[(c >> (j * (mb + fb))) & ((1 << (mb + fb)) - 1) for j in range(pe)]
                         for c in _words(p)], dtype=object)
        m_cols = res.bit_columns(vals.astype(np.int64) >> fb, mb) if mb + fb < 63 else None
        if m_cols is not None:
            f_cols = res.bit_columns(vals.astype(np.int64) & ((1 << fb) - 1), fb)
            _, mf_live = res.live_columns(np.concatenate([m_cols, f_cols]))
            _, f_live = res.live_columns(f_cols)
        else:
            mf_live, f_live = pe * (mb + fb), pe * fb
        consts = {"rom": res.rom(_words(p), pe * (mb + fb), family),
                  "cregs": res.Resources(ff=mf_live + f_live + 2)}
        lanes_ff = (xw + signed_width(*p.prod_bounds) + keep) * pe
    else:
        consts = {}
        lanes_ff = 0
        for v in p.mult:
            a = abs(v)
            tz = (a & -a).bit_length() - 1 if a else 0
            lanes_ff += xw + (signed_width(*p.prod_bounds) + 1 - tz if a else 0) + keep
    cb = counter_bits(vb)
    # the channel beat counter and the four valid stages (the credits: the output stage's);
    # the lanes of one word (constant operands) apart: the tools fold their constants
    return {**consts,
            "lanes" if vb > 1 else "clanes": lane * pe + res.Resources(ff=lanes_ff),
            "ctl": res.Resources(ff=cb + 4, lut4=cb, carry=cb),
            **output_stage.parts(pe * ob, LATENCY, family)}


class Affine(wiring.Component):
    """The affine requantizer. See the module documentation for the contract."""

    def __init__(self, p: AffineParams):
        self.p = p
        super().__init__({"i": In(stream.Signature(unsigned(p.pe * p.in_type.bits))),
                          "o": Out(stream.Signature(unsigned(p.pe * p.out_type.bits)))})

    def elaborate(self, platform):
        p = self.p
        m = Module()
        PE, VB = p.pe, p.channels // p.pe
        mb, fb = p.mult_bits, p.offset_bits
        out = output_stage.OutputStage(m, self.o, PE * p.out_type.bits, LATENCY)
        take = Signal()
        m.d.comb += [self.i.ready.eq(out.room), take.eq(self.i.valid & self.i.ready)]
        out.spend(take)

        # the constants of the beat's channels: a ROM word per channel beat, read at t
        cb = Signal(range(max(VB, 2)))
        with m.If(take):
            m.d.sync += cb.eq(Mux(cb == VB - 1, 0, cb + 1))
        words = _words(p)
        consts = Signal(PE * (mb + fb))
        if VB > 1:
            port, = rom(m, "consts", width=PE * (mb + fb), init=words)
            m.d.comb += [port.addr.eq(cb), consts.eq(port.data)]

        # t+1: operands; t+2: products; t+3: sums; t+4: shift and clamp → output stage
        v1 = Signal()
        x1 = Signal(PE * p.in_type.bits)
        m.d.sync += v1.eq(take)
        with m.If(take):
            m.d.sync += x1.eq(self.i.payload)
        outs = []
        pw = signed_width(*p.prod_bounds)
        xw = p.in_type.bits + (0 if p.in_type.signed else 1)
        for k, x in enumerate(lanes(x1, PE, p.in_type.bits, p.in_type.signed)):
            xm = reg(m, x, signed(xw), f"x_{k}")
            if VB == 1:
                # the lane's constants: a product by |mult| (a shift and a multiplier by its
                # odd part), added to or subtracted from the offset
                mk, fk = p.mult[k], p.offset[k]
                prod = reg(m, xm * abs(mk), signed(pw + 1), f"p_{k}")
                s = reg(m, fk + prod if mk >= 0 else fk - prod, signed(p.sum_bits), f"s_{k}")
            else:
                c = consts[k * (mb + fb):(k + 1) * (mb + fb)]
                mm = reg(m, c[fb:].as_signed(), signed(mb), f"m_{k}")
                ff = reg(m, c[:fb].as_signed(), signed(fb), f"f_{k}")
                prod = reg(m, xm * mm, signed(pw), f"p_{k}")
                f3 = reg(m, ff, signed(fb), f"f3_{k}")
                s = reg(m, prod + f3, signed(p.sum_bits), f"s_{k}")
            q = s >> p.shift
            y = Mux(q < p.lo, p.lo, Mux(q > p.hi, p.hi, q))
            outs.append(y.as_unsigned()[:p.out_type.bits])
        v = v1
        for k in range(3):
            v = reg(m, v, unsigned(1), f"v{k + 2}")
        out.write(Cat(*outs), v)
        return m


def manifest(p: AffineParams) -> dict:
    return {"folding": {"pe": p.pe}, "channels": p.channels, "shift": p.shift,
            "types": {"input": p.in_type.name, "output": p.out_type.name}}


def fold_space(p: AffineParams) -> FoldSpace:
    return FoldSpace(divisors(p.channels), (1,),
                     lambda pe, simd: p.pixels * p.channels // pe)



def examples() -> list[Example]:
    """Small instances for the conformance test: one lane, several lanes, one word."""
    rng = np.random.default_rng(11)
    u8, i8 = QType(8, False), QType(8, True)
    out = []
    for t, o, c, px, pe in ((u8, u8, 4, 6, 1), (i8, i8, 6, 3, 2), (i8, u8, 4, 2, 4)):
        mult = tuple(int(v) for v in rng.integers(-(1 << 20), 1 << 20, c))
        off = tuple(int(v) for v in rng.integers(-(1 << 26), 1 << 26, c))
        p = AffineParams(t, o, mult, off, 18, o.lo + 2, o.hi - 3, px, pe)
        out.append(Example(p, (Port(t, pe, c * px),), (Port(o, pe, c * px),),
                           f"{t.name}-{o.name}-c{c}-px{px}-pe{pe}"))
    return out


register_block("affine", params=AffineParams, component=Affine, golden=golden, cost=cost,
               timing=timing, manifest=manifest, fold_space=fold_space,
               examples=examples)
