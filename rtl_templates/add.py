"""Elementwise adder of two quantized streams with per-input rescaling (QDQ ``Add``,
``QLinearAdd``).

ONNX semantics (DequantizeLinear ×2 → Add → [Relu/Clip] → QuantizeLinear)::

    y = saturate(round(((a - za)·sa + (b - zb)·sb) / sy) + zy)   [clamped to lo..hi]

A fused Relu or Clip becomes the clamp bounds ``lo``/``hi`` (Relu: ``lo = zy``). Two integer
forms implement it (``AddParams.semantics``); both are exact integer arithmetic, golden and
hardware alike:

``"exact"`` — the real formula in fixed point::

    y = clamp(round_half_even(((a - za)·Ma + (b - zb)·Mb) / 2**S) + zy, lo, hi)

    with ``Ma ≈ sa/sy · 2**S``, ``Mb ≈ sb/sy · 2**S``. ``S`` gives the larger multiplier
    ``MULT_BITS`` (24) significant bits and is at least ``max(bits(a - za), bits(b - zb)) +
    ACC_GUARD_BITS``; each multiplier is within 1/2 of its exact value, so for every input pair
    the fixed-point sum is within ``(|a-za|max + |b-zb|max) / 2**(S+1) ≤ 2**-(ACC_GUARD_BITS+1)``
    (1/8192) of an output step of the exact real value ``((a-za)·sa + (b-zb)·sb)/sy`` (scales
    taken as their float32 values). Results differ from exact rounding only that close to a
    tie (and at exact ties when a ratio is not a dyadic fraction).

``"ort"`` — bit-exact onnxruntime: what ORT runs for ``com.microsoft.QLinearAdd`` and for a QDQ
    ``DequantizeLinear ×2 → Add → QuantizeLinear`` group, which its default graph optimizations
    fuse into QLinearAdd, on x86-64 with AVX2/FMA (MLAS ``MlasQLinearAddKernelAvx2Helper``)::

        rA = f32(sa / sy)   rB = f32(sb / sy)                 (float32 divisions)
        F  = f32(zy - fma(rA, za, f32(rB·zb)))                 (a constant)
        y  = clamp(rint(fma(a, rA, fma(b, rB, F))), lo, hi)    (float32 FMAs, half to even)

    Every float32 here is a dyadic rational, so with ``2**S`` the common denominator of
    ``rA, rB, F`` (``Ma = rA·2**S``, ``Mb = rB·2**S``, ``fixed = F·2**S``) and ``r24`` rounding
    a magnitude to 24 significant bits (half to even) — one float32 rounding —::

        y = clamp(round_half_even(r24(a·Ma + r24(b·Mb + fixed)) / 2**S), lo, hi)

    exactly. ORT's result is platform dependent: on ARM (NEON) MLAS uses a 22-bit integer
    kernel and without fusion (ORT_DISABLE_ALL) the float path rounds ``(a-za)·sa``,
    ``(b-zb)·sb``, their sum and ``/sy`` separately; a Relu between Add and QuantizeLinear also
    keeps ORT on the float path. ``tests/blocks/test_join_blocks.py`` measures all of these.

Stream contract
    ``i0``: ``pe`` elements of ``a_type`` per beat; ``i1``: ``pe`` elements of ``b_type`` per
    beat; ``o``: ``pe`` elements of ``out_type`` per beat. Element k of a beat in bits
    ``[k*bits, (k+1)*bits)``, two's complement when signed.

Join and pipeline (a beat pair taken in cycle t)
    A beat is taken from both inputs together, when both are valid and the output FIFO is
    sure to have room (credit counter, :meth:`~rtl_templates.output_stage.OutputStage.join`):
    ``i0.ready = i1.valid & room``, ``i1.ready = i0.valid & room``, each on a copy of
    ``room`` of its own. Each input's ready thus
    depends on the other input's valid and on the credits, never on ``o.ready``; ``o.valid`` is
    the output FIFO's ``r_rdy``. One beat per cycle.
    ``"exact"``: t+1 operands; t+2 products ``(a-za)·Ma``, ``(b-zb)·Mb``; t+3 sum, then
    rounding, zero point and clamp into the FIFO; earliest output transfer t+5.
    ``"ort"``: t+1 operands; t+2 ``a·Ma`` and ``b·Mb + fixed``; t+3 ``r24`` of the latter;
    t+4 the sum, then ``r24``, rounding and clamp into the FIFO; earliest output t+6.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from fractions import Fraction

import numpy as np
from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from hwgen.rtl_templates import output_stage
from hwgen.rtl_templates import resources as res
from hwgen.rtl_templates.block import Example, FoldSpace, Port, divisors, register_block
from hwgen.rtl_templates.cost import Cost
from hwgen.rtl_templates.pipeline import (
    MUL_CHUNK,
    chunk_widths,
    chunks,
    mul_pipe,
    mul_pipe_registers,
    mul_stages,
)
from hwgen.rtl_templates.quant import (
    ACC_GUARD_BITS,
    MULT_BITS,
    QType,
    Quantized,
    Requant,
    range_type,
    rhe,
    round24,
    round24_shift,
    signed_width,
)
from hwgen.rtl_templates.requant import (
    LANE_FIT,
    ROUND24_STAGES,
    abs_pipe,
    clamp,
    delay,
    reg,
    requant_stages,
    rhe_const,
    round24_logic,
    round24_pipe,
    round24_registers,
    round_clamp,
    round_clamp_parts,
)
from hwgen.rtl_templates.resources import Mul, merge_fits
from hwgen.rtl_templates.words import lanes

#: cycles from a (joined) input transfer to the output transfer of that beat, per semantics
#: (the requantizer's stages after the sum come on top for "ort": :meth:`AddParams.pipeline_depth`);
#: the output stage's included (the clamp is a register)
PIPELINE_DEPTHS = {"exact": 6 + output_stage.latency(registered=True),
                   "ort": 6 + ROUND24_STAGES + output_stage.latency(registered=True)}
#: the default semantics of :func:`make_add_requant`
DEFAULT_SEMANTICS = "ort"


@dataclass(frozen=True)
class AddParams:
    """One adder instance (see the module documentation for both formulas).

    ``"exact"``: ``y = clamp(rhe(((a-za)·ma + (b-zb)·mb) / 2**shift) + zy, lo, hi)``.
    ``"ort"``: ``y = clamp(rhe(r24(a·ma + r24(b·mb + fixed)) / 2**shift), lo, hi)`` (the zero
    points live in ``fixed``; ``za``/``zb``/``zy`` are kept for reference).
    """
    ma: int
    mb: int
    shift: int
    za: int
    zb: int
    zy: int
    lo: int
    hi: int
    a_type: QType
    b_type: QType
    out_type: QType
    pe: int = 1
    semantics: str = "exact"
    fixed: int = 0
    elements: int = 0        # elements per frame (per input); 0 = not set (no cost)
    channels: int = 0        # channels of a pixel (PE divides them); 0 = the whole frame
    neg_a: bool = False      # "exact" only: subtract a (its term is (za - a)·ma)
    neg_b: bool = False      # "exact" only: subtract b (a Sub: (zb - b)·mb)

    def __post_init__(self):
        if self.pe < 1:
            raise ValueError(f"PE={self.pe} must be at least 1")
        if self.semantics not in PIPELINE_DEPTHS:
            raise ValueError(f"unknown semantics {self.semantics!r}")
        if self.ma < 0 or self.mb < 0 or self.shift < 0:
            raise ValueError("multipliers and shift must be non-negative")
        if (self.neg_a or self.neg_b) and self.ort:
            raise ValueError("a difference has the \"exact\" semantics only")
        if not (self.out_type.lo <= self.lo <= self.hi <= self.out_type.hi):
            raise ValueError(f"clamp bounds [{self.lo}, {self.hi}] outside "
                             f"{self.out_type.name}")

    @property
    def ort(self) -> bool:
        return self.semantics == "ort"

    @property
    def pipeline_depth(self) -> int:
        if self.ort:
            return PIPELINE_DEPTHS["ort"] + self.const_stages + requant_stages(self.sum_requant)
        return PIPELINE_DEPTHS["exact"] + self.const_stages

    @property
    def const_stages(self) -> int:
        """Registers from the operands less their zero points to the products: sign and
        magnitude, the wider of the two tiled constant products, the sign back."""
        return 2 + max(mul_stages(self.da_bits, max(1, _odd(self.ma)[0].bit_length()), True),
                       mul_stages(self.db_bits, max(1, _odd(self.mb)[0].bit_length()), True))

    @property
    def sum_requant(self) -> Requant:
        """"ort": the requantizer's rounding of the sum, with multiplier 1 and zero point 0."""
        return Requant(mult=(1,), shift=self.shift, zero_point=0, lo=self.lo, hi=self.hi)

    # --- operand ranges (what multiplies the constants) -----------------------------------
    @property
    def da_bounds(self) -> tuple[int, int]:
        z = 0 if self.ort else self.za
        if self.neg_a:
            return z - self.a_type.hi, z - self.a_type.lo
        return self.a_type.lo - z, self.a_type.hi - z

    @property
    def db_bounds(self) -> tuple[int, int]:
        z = 0 if self.ort else self.zb
        if self.neg_b:
            return z - self.b_type.hi, z - self.b_type.lo
        return self.b_type.lo - z, self.b_type.hi - z

    @property
    def da_bits(self) -> int:
        return signed_width(*self.da_bounds)

    @property
    def db_bits(self) -> int:
        return signed_width(*self.db_bounds)

    @property
    def prod_bounds(self) -> tuple[tuple[int, int], tuple[int, int]]:
        """Bounds of the two lane products (``"ort"``: ``b·mb + fixed`` for the second)."""
        (alo, ahi), (blo, bhi) = self.da_bounds, self.db_bounds
        f = self.fixed if self.ort else 0
        return (alo * self.ma, ahi * self.ma), (blo * self.mb + f, bhi * self.mb + f)

    @property
    def sum_bounds(self) -> tuple[int, int]:
        (pa_lo, pa_hi), (pb_lo, pb_hi) = self.prod_bounds
        if self.ort:  # r24 may round the second term up by less than 2**-23 of it
            pb_lo, pb_hi = pb_lo - (abs(pb_lo) >> 23) - 1, pb_hi + (abs(pb_hi) >> 23) + 1
        return min(pa_lo + pb_lo, 0), max(pa_hi + pb_hi, 0)

    @property
    def sum_bits(self) -> int:
        return signed_width(*self.sum_bounds)

    @property
    def mult_bits(self) -> int:
        return max(1, self.ma.bit_length(), self.mb.bit_length())


# ---------------------------------------------------------------------------- parameters

def _dyadic_exponent(v: Fraction) -> int:
    """k such that v·2**k is an integer (v a dyadic rational)."""
    d = v.denominator
    assert d & (d - 1) == 0, "not a dyadic rational"
    return d.bit_length() - 1


def _f32(v: Fraction) -> Fraction:
    """The dyadic rational ``v`` rounded to the nearest float32 (half to even; normal
    range)."""
    k = _dyadic_exponent(v)
    return Fraction(round24(int(v * (1 << k))), 1 << k)


def make_add_requant(a: Quantized, b: Quantized, y: Quantized, *, lo: int | None = None,
                     hi: int | None = None, pe: int = 1, semantics: str = DEFAULT_SEMANTICS,
                     mult_bits: int = MULT_BITS, neg_a: bool = False,
                     neg_b: bool = False) -> AddParams:
    """Integer parameters of a QDQ Add / QLinearAdd of inputs ``a`` and ``b`` into ``y``
    (scales as in the model: float32 values).

    ``lo``/``hi`` are the integer clamp bounds (``None``: the output type's range; a fused
    Relu gives ``lo = zy``). ``y.qtype`` may be ``None``: the smallest type holding
    ``lo..hi``. ``semantics``: ``"ort"`` (bit-exact onnxruntime QLinearAdd on x86-64, the
    default) or ``"exact"`` (fixed point of the real formula); see the module documentation.
    ``neg_a``/``neg_b`` (``"exact"`` only) subtract that input instead: a QDQ Sub, which
    onnxruntime runs in float32 (there is no integer kernel), is ``neg_b``.
    """
    f32 = np.float32
    sa32, sb32, sy32 = (f32(s) for s in (a.scale, b.scale, y.scale))
    if not all(np.isfinite(s) and s > 0 for s in (sa32, sb32, sy32)):
        raise ValueError(f"scales must be finite and positive (got {a.scale}, {b.scale}, "
                         f"{y.scale})")
    out_type = y.qtype
    if out_type is None:
        if lo is None or hi is None:
            raise ValueError("give the output type or both clamp bounds")
        out_type = range_type(lo, hi)
    lo = out_type.lo if lo is None else int(lo)
    hi = out_type.hi if hi is None else int(hi)
    za, zb, zy = int(a.zero_point), int(b.zero_point), int(y.zero_point)
    common = dict(za=za, zb=zb, zy=zy, lo=lo, hi=hi, a_type=a.qtype, b_type=b.qtype,
                  out_type=out_type, pe=pe, semantics=semantics, neg_a=neg_a, neg_b=neg_b)
    if semantics == "ort":
        with np.errstate(over="ignore"):
            ra, rb = f32(sa32 / sy32), f32(sb32 / sy32)   # IEEE float32 divisions
        if not (np.isfinite(ra) and np.isfinite(rb)):
            raise ValueError(f"input scales {a.scale:g}, {b.scale:g} out of proportion to the "
                             f"output scale {y.scale:g} (their ratio overflows float32)")
        fa, fb = Fraction(float(ra)), Fraction(float(rb))
        inner = _f32(fa * za + _f32(fb * zb))             # fma(rA, za, rB*zb)
        fixed = _f32(zy - inner)
        shift = max(0, *(_dyadic_exponent(v) for v in (fa, fb, fixed)))
        scale = 1 << shift
        return AddParams(ma=int(fa * scale), mb=int(fb * scale), shift=shift,
                         fixed=int(fixed * scale), **common)
    if semantics != "exact":
        raise ValueError(f"unknown semantics {semantics!r}")
    ra, rb = float(sa32) / float(sy32), float(sb32) / float(sy32)
    ta, tb = a.qtype, b.qtype
    d_bits = max(signed_width(ta.lo - za, ta.hi - za), signed_width(tb.lo - zb, tb.hi - zb))
    exp_max = math.floor(math.log2(max(ra, rb)))
    shift = max(mult_bits - 1 - exp_max, d_bits + ACC_GUARD_BITS, 0)
    ma, mb = (int(round(r * 2.0 ** shift)) for r in (ra, rb))
    return AddParams(ma=ma, mb=mb, shift=shift, **common)


# ---------------------------------------------------------------------------- golden

def _one(p: AddParams, a: int, b: int) -> int:
    if p.ort:
        y = round24_shift(a * p.ma + round24(b * p.mb + p.fixed), p.shift)
    else:
        da = p.za - a if p.neg_a else a - p.za
        db = p.zb - b if p.neg_b else b - p.zb
        y = rhe(da * p.ma + db * p.mb, p.shift) + p.zy
    return min(max(y, p.lo), p.hi)


def golden(p: AddParams, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise integer semantics (frames, or any shape; ``a`` and ``b`` broadcast)."""
    a, b = np.broadcast_arrays(np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64))
    f = np.vectorize(lambda x, y: _one(p, int(x), int(y)), otypes=[np.int64])
    return f(a, b) if a.size else np.zeros(a.shape, dtype=np.int64)


# ---------------------------------------------------------------------------- cost

def timing(p: AddParams, in_first: int, in_last: int) -> tuple[int, int]:
    """First and last output transfer of a frame whose first and last beat pairs were taken
    (both inputs valid) at ``in_first`` and ``in_last``; with two branches arriving at
    different times pass the later first and later last transfer of the two."""
    return in_first + p.pipeline_depth, in_last + p.pipeline_depth


def cost(p: AddParams) -> Cost:
    """``p.elements`` per frame (per input): one beat of ``pe`` elements per cycle."""
    elements = p.elements
    if elements < 1:
        raise ValueError("the adder's elements per frame are not set")
    if elements % p.pe:
        raise ValueError(f"PE={p.pe} does not divide the {elements} elements of a frame")
    beats = elements // p.pe
    depth = output_stage.fifo_depth(p.pipeline_depth)
    by_family, parts = res.estimate(resource_parts, p, RESOURCE_FIT, multiplies(p))
    return Cost(
        cycles=beats,
        latency=timing(p, 0, beats - 1)[1] + 1,
        multipliers=2 * p.pe,
        multiplier_widths=[(p.da_bits, _odd(p.ma)[0].bit_length() or 1),
                           (p.db_bits, _odd(p.mb)[0].bit_length() or 1)] * p.pe,
        multiplies=multiplies(p),
        memory_bits=depth * p.pe * p.out_type.bits,
        registers=max(r.ff for r in by_family.values()),
        by_family=by_family, parts=parts,
    )


#: calibration of :func:`resource_parts` (``benchmarks/resources.py --fit``; the ECP5
#: LUT4 constant set by the conformance examples, 0.92 to 1.06 of Yosys)
RESOURCE_FIT: res.Fit = merge_fits(LANE_FIT, {
    "ecp5": {
        "lut4": {"ctl": 1.028, "fifo": 1.071, "lanes": 0.549, "mul_logic": 1.029,
                 "rq_front": 0.349, "rq_r24": 0.601, "rq_tail": 0.255,
                 "t_r24": 0.683, "1": 10},
        "carry": {"ctl": 0.902, "fifo": 0.456, "lanes": 0.377, "rq_front": 1.517, "rq_r24": 1.357,
                  "rq_tail": 0, "t_r24": 1.115, "1": 0},
    },
    "ice40": {
        "lut4": {"ctl": 0.908, "fifo": 0.602, "lanes": 0.397, "mul_logic": 0.762,
                 "rq_front": 1.376, "rq_r24": 0.757, "rq_tail": 0, "t_r24": 1.036,
                 "1": 0},
        "carry": {"ctl": 0.918, "fifo": 0.474, "lanes": 0.261, "mul_logic": 1.187,
                  "rq_front": 1.531, "rq_r24": 1.374, "rq_tail": 0,
                  "t_r24": 1.183, "1": 0},
    },
})


def _const_product_parts(bits: int, mult: int, stages: int, out_bits: int, family: str
                         ) -> res.Resources:
    """One lane's :func:`_times_const_pipe` of a ``bits``-bit operand into an ``out_bits``
    register: sign and magnitude, the tiled product, its delays, the sign back."""
    odd = max(1, _odd(mult)[0].bit_length())
    w = bits + odd
    ff = (1 + bits + mul_pipe_registers(bits, odd, b_regs=False, copy=True,
                                        b_const=_odd(mult)[0]) + 1
          + (stages - 2 - mul_stages(bits, odd, True)) * w + (stages - 2) + out_bits)
    logic = (res.magnitude(bits, family) + res.magnitude(w, family)
             + res.add(w, family) * (chunks(bits) * chunks(odd) - 1))
    return logic + res.Resources(ff=ff)


def resource_parts(p: AddParams, family: str) -> dict[str, res.Resources]:
    """The adder's hardware in the resource model's parts (see
    :mod:`rtl_templates.resources`): output FIFO, control, per lane the operands less their
    zero points, the two constant products, the sum and its rounding (``"ort"``: the float32
    rounding of the second product first)."""
    PE, ob = p.pe, p.out_type.bits
    (pa_lo, pa_hi), (pb_lo, pb_hi) = p.prod_bounds
    pa_bits = signed_width(pa_lo, pa_hi)
    blo, bhi = p.db_bounds
    pb_bits = signed_width(blo * p.mb, bhi * p.mb)
    cs = p.const_stages
    lane = (res.sub(p.da_bits, family) + res.sub(p.db_bits, family)
            + res.Resources(ff=p.a_type.bits + p.b_type.bits + p.da_bits + p.db_bits)
            + _const_product_parts(p.da_bits, p.ma, cs, pa_bits, family)
            + _const_product_parts(p.db_bits, p.mb, cs, pb_bits, family)
            + res.add(max(pa_bits, pb_bits), family) + res.Resources(ff=p.sum_bits))
    parts = output_stage.parts(PE * ob, p.pipeline_depth, family, registered=True)
    parts["ctl"] = res.Resources(ff=p.pipeline_depth - 2, lut4=2) + output_stage.join_cost(2)
    if p.ort:
        tb = signed_width(pb_lo, pb_hi)
        n_st = 2 + ROUND24_STAGES
        lane = lane + res.add(tb, family) + res.magnitude(tb, family) * 2 + res.Resources(
            ff=pa_bits + tb + 1 + tb + ROUND24_STAGES + tb + 2 + n_st * pa_bits
            + round24_registers(tb))
        parts["t_r24"] = round24_logic(tb, family) * PE
        parts["lanes"] = lane * PE
        w = p.sum_bits
        parts["rq_front"] = res.magnitude(w, family) * PE + res.Resources(ff=PE * (1 + w))
        for k, v in round_clamp_parts(w, p.sum_requant, ob, family).items():
            parts[k] = v * PE
    else:
        w = p.sum_bits
        vw = w + abs(p.zy).bit_length() + 1
        parts["lanes"] = lane * PE
        parts["rq_tail"] = (res.reduce_or(p.shift, family) * 2 + res.add(w, family)
                            + res.add(vw, family) + res.compare(vw, family, True) * 2
                            + res.mux(ob, family, 3)) * PE
        parts["rq_ff"] = res.Resources(ff=PE * (w + vw + min(ob, signed_width(p.lo, p.hi))))
    return parts


def multiplies(p: AddParams) -> dict[Mul, int]:
    """Per lane the tiles of the two constant products: the magnitude of ``a - za`` (``b -
    zb``) times the odd part of ``ma`` (``mb``) in :func:`~rtl_templates.pipeline.mul_pipe`
    (the constant reaches the tiles through registers). A register bit that holds 0 equals
    its initial value, so the tools make it a constant: a tile's constant operand is its
    chunk of the odd part without the chunk's leading and trailing zeros (a chunk that is 0
    makes no product; one that is a power of two, a shift in logic). A tile's product bits
    above what the product register keeps (its width less the constant's trailing zeros)
    are not used, and the tools drop them."""
    blo, bhi = p.db_bounds
    out: dict[Mul, int] = {}
    for bits, mult, reg_bits in ((p.da_bits, p.ma, signed_width(*p.prod_bounds[0])),
                                 (p.db_bits, p.mb, signed_width(blo * p.mb, bhi * p.mb))):
        odd, tz = _odd(mult)
        used = reg_bits - tz
        for i, wa in enumerate(chunk_widths(bits)):
            for j in range(len(chunk_widths(max(1, odd.bit_length())))):
                c, ctz = _odd((odd >> (MUL_CHUNK * j)) & ((1 << MUL_CHUNK) - 1))
                y = min(wa + c.bit_length(), used - MUL_CHUNK * (i + j) - ctz)
                if c and y > 0:
                    m = Mul(wa, False, c.bit_length(), False, y_bits=y)
                    out[m] = out.get(m, 0) + p.pe
    return out


# ---------------------------------------------------------------------------- hardware

def _odd(m: int) -> tuple[int, int]:
    """``m = odd · 2**tz`` → (odd, tz): constant multipliers without their trailing zeros."""
    if m == 0:
        return 0, 0
    tz = (m & -m).bit_length() - 1
    return m >> tz, tz


def _times_const_pipe(m: Module, x, valid, mult: int, stages: int, name: str):
    """``x · mult`` of the signed ``x`` and a constant, ``stages`` registers later (the last
    one is the caller's): sign and magnitude, the magnitude times the constant's odd part in
    multiplier tiles (:func:`~rtl_templates.pipeline.mul_pipe`), delays to ``stages``, the
    sign and the trailing zeros put back. ``valid``: high when ``x`` holds an operand (the
    partial products' copies load only then; see :func:`~rtl_templates.pipeline.mul_pipe`:
    without them, Yosys's ``ice40_dsp`` takes the tiles' sum into an SB_MAC16 and resolves
    its carry out to a constant)."""
    odd, tz = _odd(mult)
    neg, mag = abs_pipe(m, x, name)
    odd_c = Const(odd, unsigned(max(1, odd.bit_length())))
    prod = mul_pipe(m, mag, odd_c, name, valid)
    prod = delay(m, prod, stages - 2 - mul_stages(len(mag), len(odd_c), copy=True), f"{name}_al")
    neg = delay(m, neg, stages - 2, f"{name}_neg")
    return Mux(neg, -prod, prod) << tz


class AddBlock(wiring.Component):
    """The two-input adder. See the module documentation for the contract."""

    def __init__(self, p: AddParams):
        self.p = p
        super().__init__({
            "i0": In(stream.Signature(unsigned(p.pe * p.a_type.bits))),
            "i1": In(stream.Signature(unsigned(p.pe * p.b_type.bits))),
            "o": Out(stream.Signature(unsigned(p.pe * p.out_type.bits))),
        })

    def elaborate(self, platform):
        p = self.p
        m = Module()
        PE = p.pe

        out = output_stage.OutputStage(m, self.o, PE * p.out_type.bits, p.pipeline_depth,
                                       registered=True)

        # --- join -------------------------------------------------------------------------
        take = out.join([self.i0, self.i1])

        # --- t+1: operands ----------------------------------------------------------------
        v1 = Signal()
        a1 = Signal(PE * p.a_type.bits)
        b1 = Signal(PE * p.b_type.bits)
        m.d.sync += v1.eq(take)
        with m.If(take):
            m.d.sync += [a1.eq(self.i0.payload), b1.eq(self.i1.payload)]

        # --- t+2: operands less their zero points; t+3: products ("ort": t+4: + fixed) -------
        (pa_lo, pa_hi), (pb_lo, pb_hi) = p.prod_bounds
        pa = [Signal(signed(signed_width(pa_lo, pa_hi)), name=f"pa_{k}", reset_less=True)
              for k in range(PE)]
        (blo, bhi), f = p.db_bounds, (p.fixed if p.ort else 0)
        pb = [Signal(signed(signed_width(blo * p.mb, bhi * p.mb)), name=f"pb_{k}")
              for k in range(PE)]            # "ort": the fixed term joins one stage later
        za, zb = (0, 0) if p.ort else (p.za, p.zb)
        v_mag = delay(m, v1, 2, "v_mag")     # the cycles the products' magnitudes are valid
        for k, (x, y) in enumerate(zip(lanes(a1, PE, p.a_type.bits, p.a_type.signed),
                                       lanes(b1, PE, p.b_type.bits, p.b_type.signed))):
            da = reg(m, za - x if p.neg_a else x - za, signed(p.da_bits), f"da_{k}")
            db = reg(m, zb - y if p.neg_b else y - zb, signed(p.db_bits), f"db_{k}")
            cs = p.const_stages
            m.d.sync += [pa[k].eq(_times_const_pipe(m, da, v_mag, p.ma, cs, f"pa_{k}")),
                         pb[k].eq(_times_const_pipe(m, db, v_mag, p.mb, cs, f"pb_{k}"))]
        v2 = delay(m, v1, 1 + p.const_stages, "v2")
        if p.ort:
            pa = [delay(m, x, 1, f"pa_{k}") for k, x in enumerate(pa)]
            pb = [reg(m, x + f, signed(signed_width(pb_lo, pb_hi)), f"pbf_{k}")
                  for k, x in enumerate(pb)]
            v2 = delay(m, v2, 1, "v2f")

        v_last = v2
        if p.ort:
            # --- t+3..t+6: the inner FMA's float32 rounding (|t|, round24, sign) ------------
            n_st = 2 + ROUND24_STAGES
            t3 = []
            for k in range(PE):
                neg, mag = abs_pipe(m, pb[k], f"t_{k}")
                r = round24_pipe(m, mag, f"t_{k}")
                neg = delay(m, neg, ROUND24_STAGES, f"t_{k}_neg")
                t3.append(reg(m, Mux(neg, -r, r), signed(len(pb[k]) + 2), f"t3_{k}"))
            pa = [delay(m, x, n_st, f"pa_{k}") for k, x in enumerate(pa)]
            pb, v_last = t3, delay(m, v2, n_st, "v_t")

        # --- sum; rounding (ort: float32 rounding first), zero point, clamp → FIFO --------
        vs = Signal()
        m.d.sync += vs.eq(v_last)
        s = [Signal(signed(p.sum_bits), name=f"s_{k}") for k in range(PE)]
        m.d.sync += [x.eq(a + b) for x, a, b in zip(s, pa, pb)]
        outs = []
        for k in range(PE):
            if p.ort:
                y = round_clamp(m, s[k], p.sum_requant, f"y_{k}")
            else:
                r = reg(m, rhe_const(s[k], p.shift), signed(p.sum_bits), f"r_{k}")
                v = reg(m, r + p.zy, signed(p.sum_bits + abs(p.zy).bit_length() + 1), f"v_{k}")
                y = clamp(m, v, p.lo, p.hi, f"y_{k}")
            outs.append(y[:p.out_type.bits])
        vs = delay(m, vs, requant_stages(p.sum_requant) if p.ort else 3, "vs")
        out.write(Cat(*outs), vs)
        return m


# ---------------------------------------------------------------------------- registration

def manifest(p: AddParams) -> dict:
    return {"folding": {"pe": p.pe}}


def fold_space(p: AddParams) -> FoldSpace:
    return FoldSpace(divisors(p.channels or p.elements), (1,), lambda pe, simd: p.elements // pe)



def examples() -> list[Example]:
    """Small instances for the conformance test: both semantics, mixed types, a clamp."""
    i8, u8 = QType(8, True), QType(8, False)
    out = []
    for pe, elements, ta, tb, ty, sa, za, sb, zb, sy, zy, relu, sem in (
            (1, 12, i8, i8, i8, 0.05, 3, 0.1, -2, 0.1, 0, False, "ort"),
            (2, 12, u8, i8, u8, 0.02, 128, 0.03, 0, 0.04, 60, True, "ort"),
            (4, 16, i8, u8, i8, 0.0213, -5, 0.0371, 120, 0.047, -3, False, "exact")):
        p = make_add_requant(Quantized(ta, sa, za), Quantized(tb, sb, zb), Quantized(ty, sy, zy),
                             lo=zy if relu else None, pe=pe, semantics=sem)
        p = replace(p, elements=elements)
        out.append(Example(p, (Port(ta, pe, elements), Port(tb, pe, elements)),
                           (Port(ty, pe, elements),), f"{sem}-pe{pe}-{ta.name}+{tb.name}"))
    return out


register_block("add", params=AddParams, component=AddBlock, golden=golden, cost=cost,
               timing=timing, manifest=manifest, fold_space=fold_space,
               examples=examples)
