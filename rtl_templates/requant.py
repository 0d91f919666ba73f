"""The requantizer's hardware: the pipeline tail every arithmetic block shares.

:class:`RequantPipeline` takes per lane a signed sum, its bias and its multiplier and
computes, in :meth:`RequantPipeline.depth` register stages,

    clamp(round_half_even(round24(p) / 2**shift) + zero_point, lo, hi)

of the product ``p = (sum + bias) * mult``, where ``round24`` rounds |p| to 24 significant
bits, half to even (a float32 product): the same formula as
:meth:`rtl_templates.quant.Requant.apply`, its golden function. Both roundings act on the
magnitude and the sign is put back afterwards (round half to even is symmetric).

Every step is registered, so no path holds more than one wide carry chain and a few LUT
levels, or one hard multiplier tile: sum + bias, its sign and magnitude, the product of
magnitude and multiplier in 16×16 tiles (:func:`~rtl_templates.pipeline.mul_pipe`), the
float32 rounding (:func:`round24_pipe`, three stages: the mask of bits to drop, then the
rounding add), the division by ``2**shift``, sign and zero point, the clamp. The pipeline
never stalls, so the stages need no enables; the blocks count
:meth:`RequantPipeline.depth` (or :func:`requant_stages`) into their latency.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value, signed, unsigned

from hwgen.rtl_templates import resources as res
from hwgen.rtl_templates.memory import lane_rom
from hwgen.rtl_templates.pipeline import (
    MUL_CHUNK,
    SeqMul,
    chunks,
    delay,
    mul_pipe,
    mul_pipe_registers,
    mul_stages,
    reg,
    seq_mul_registers,
    seq_mul_stages,
)
from hwgen.rtl_templates.quant import F32_BITS, Requant, signed_width
from hwgen.rtl_templates.words import lanes, pack_word
from hwgen.rtl_templates.xnor_mvau import sign_bit

#: register stages of :func:`round24_pipe`
ROUND24_STAGES = 5


def rhe_const(a, k: int):
    """round_half_even(a / 2**k) of an unsigned value ``a``, constant ``k``."""
    if k == 0:
        return a
    q = a >> k
    r = a[:k]
    half = 1 << (k - 1)
    return q + ((r > half) | ((r == half) & q[0]))


def rhe_pipe(m: Module, a, k: int, name: str):
    """:func:`rhe_const` of the unsigned value ``a``, registered in two stages: the quotient
    and the round-up decision (a compare of the ``k`` dropped bits), then the increment
    (a carry chain alone). ``max(1, len(a) - k + 1)`` bits."""
    w = max(1, len(a) - k + 1)
    if k == 0:
        return delay(m, a, 2, f"{name}_ymag")
    q = reg(m, a >> k, unsigned(max(1, len(a) - k)), f"{name}_yq")
    r = a[:k]
    half = 1 << (k - 1)
    odd = a[k] if len(a) > k else Const(0, 1)
    up = reg(m, (r > half) | ((r == half) & odd), unsigned(1), f"{name}_yup")
    return reg(m, q + up, unsigned(w), f"{name}_ymag")


def abs_pipe(m: Module, v, name: str):
    """(negative, |v|) of the signed value ``v``, registered (one stage)."""
    neg = reg(m, v.as_signed() < 0, unsigned(1), f"{name}_neg")
    mag = reg(m, Mux(v.as_signed() < 0, -v.as_signed(), v.as_signed()), unsigned(len(v)),
              f"{name}_mag")
    return neg, mag


def round24_pipe(m: Module, mag, name: str):
    """Unsigned ``mag`` rounded to 24 significant bits, half to even (one float32 rounding),
    after :data:`ROUND24_STAGES` registers; unsigned, one bit wider than ``mag``.

    No shifter: the bits to drop are those more than 23 places below the leading one, a mask
    ``low`` made by OR-smearing ``mag`` downwards (two stages of three OR levels each); the
    lowest kept bit is found in a third stage, and adding ``half - 1`` plus that bit (two
    stages of half the carry chain each) and clearing the ``low`` bits rounds half to even."""
    w = len(mag)
    if w <= F32_BITS:                   # exact already: the stages only delay
        return delay(m, mag, ROUND24_STAGES, f"{name}_r24")
    smear, k = mag, 1
    while k < w:                        # smear[j] = OR of mag[j..w-1]
        smear = smear | (smear >> k)
        k *= 2
        if k == 8:                      # a register after the first three levels (w > 24)
            smear = reg(m, smear, unsigned(w), f"{name}_smear")
            mag = reg(m, mag, unsigned(w), f"{name}_mag0")
    low = reg(m, smear >> F32_BITS, unsigned(w), f"{name}_low")    # the bits rounded away
    mag1 = reg(m, mag, unsigned(w), f"{name}_mag1")
    lsb = reg(m, (mag1 & ((low << 1) & ~low)).any(), unsigned(1), f"{name}_lsb")  # lowest kept
    low2 = reg(m, low, unsigned(w), f"{name}_low2")
    mag2 = reg(m, mag1, unsigned(w), f"{name}_mag2")
    # the rounding add in two halves, the carry between them registered
    h = (w + 1) // 2
    half = low2 >> 1
    lo = reg(m, mag2[:h] + half[:h] + lsb, unsigned(h + 1), f"{name}_rlo")
    hi_a = reg(m, mag2[h:], unsigned(w - h), f"{name}_rha")
    hi_b = reg(m, half[h:], unsigned(w - h), f"{name}_rhb")
    low3 = reg(m, low2, unsigned(w), f"{name}_low3")
    total = Cat(lo[:h], hi_a + hi_b + lo[h])
    return reg(m, total & ~Cat(low3, Const(0, 1)), unsigned(w + 1), f"{name}_r24")


def round24_registers(w: int) -> int:
    """Flip-flops of :func:`round24_pipe` of a ``w``-bit magnitude as the tools keep them:
    the smear register's bits at and above 24 (the others feed nothing), the magnitude
    three times, the mask three times (zero above ``w - 24``), the lowest kept bit, the
    halves of the rounding add, the result;
    for ``w <= 24`` the delays."""
    if w <= F32_BITS:
        return ROUND24_STAGES * w
    h = (w + 1) // 2
    return ((w - F32_BITS - 1) + (3 * w - 2) + 3 * (w - F32_BITS) + 1 + (w + 1)
            + (h + 1) + 2 * (w - h))


def round_clamp_registers(w: int, rq: Requant, out_bits: int) -> int:
    """Flip-flops of :func:`round_clamp_mag` of a ``w``-bit magnitude (its sign's delays
    included; a result bit above ``out_bits`` is not used)."""
    bits = round24_registers(w) + ROUND24_STAGES
    kept = w + 1 if w > F32_BITS else w
    zp = rq.zero_point
    if rq.zp_first:
        t = kept + abs(zp).bit_length() + rq.shift + 2
        bits += t + 1 + t + round24_registers(t) + ROUND24_STAGES
        kept = t + 1 if t > F32_BITS else t
        zp = 0
    ym = max(1, kept - rq.shift + 1)
    bits += (ym - 1) + 1 + 1                # the quotient, the round-up bit, the sign's delay
    bits += ym + 1 + ym + abs(zp).bit_length() + 1
    return bits + min(signed_width(rq.lo, rq.hi), out_bits)


def round24_logic(w: int, family: str) -> res.Resources:
    """Structural logic of :func:`round24_pipe`: the OR-smear below the leading one, the
    lowest kept bit, the rounding add and the mask."""
    if w <= F32_BITS:
        return res.Resources()
    b = w - F32_BITS
    return (res.Resources(lut4=b * max(1, (w - 1).bit_length()) / 2 + 2 * b)
            + res.reduce_or(b, family) + res.add(w, family))


def round_clamp_parts(w: int, rq: Requant, out_bits: int, family: str
                      ) -> dict[str, res.Resources]:
    """Structural parts of :func:`round_clamp_mag` of a ``w``-bit magnitude: ``rq_r24`` (the
    float32 rounding), ``rq_zpf`` (the zero point's own rounding, ``zp_first``) and
    ``rq_tail`` (division by ``2**shift`` rounding half to even, sign and zero point,
    clamp); flip-flops in ``rq_ff``."""
    kept = w + 1 if w > F32_BITS else w
    zp = rq.zero_point
    zpf = res.Resources()
    if rq.zp_first:
        t = kept + abs(zp).bit_length() + rq.shift + 2
        zpf = res.add_or_sub(t, family) + res.magnitude(t, family) + round24_logic(t, family)
        kept = t + 1 if t > F32_BITS else t
        zp = 0
    sh = rq.shift
    vw = max(1, kept - sh + 1) + abs(zp).bit_length() + 1
    tail = (res.reduce_or(sh, family) * 2 + res.add(max(1, kept - sh), family)
            + res.add_or_sub(vw, family) + res.compare(vw, family, True) * 2
            + res.mux(min(out_bits, signed_width(rq.lo, rq.hi)), family, 3))
    return {"rq_r24": round24_logic(w, family), "rq_zpf": zpf, "rq_tail": tail,
            "rq_ff": res.Resources(ff=round_clamp_registers(w, rq, out_bits))}


#: calibration of the requantizer's parts (``benchmarks/resources.py --fit`` on lanes alone)
LANE_FIT: res.Fit = {
    "ecp5": {"lut4": {"rq_front": 0.59, "rq_prod": 0.0, "rq_seq": 0.59, "rq_r24": 0.93,
                      "rq_zpf": 0.77, "rq_tail": 0.25, "rq_lanes": 21.25},
             "carry": {"rq_front": 1.08, "rq_prod": 0.43, "rq_seq": 0.94, "rq_r24": 1.24,
                       "rq_zpf": 0.83, "rq_tail": 0.37, "rq_lanes": 6.77}},
    "ice40": {"lut4": {"rq_front": 0.99, "rq_prod": 0.52, "rq_seq": 0.73, "rq_r24": 0.72,
                       "rq_zpf": 0.67, "rq_tail": 0.41, "rq_lanes": 24.33},
              "carry": {"rq_front": 0.98, "rq_prod": 0.44, "rq_seq": 0.96, "rq_r24": 1.19,
                        "rq_zpf": 0.83, "rq_tail": 0.40, "rq_lanes": 10.25}},
}


def clamp(m: Module, v, lo: int, hi: int, name: str):
    """``v`` clamped to [lo, hi], registered (one stage)."""
    return reg(m, Mux(v < lo, lo, Mux(v > hi, hi, v)), signed(signed_width(lo, hi)), name)


def passes_through(rq: Requant, acc_lo: int, acc_hi: int) -> bool:
    """Whether ``rq`` is the identity on every accumulator in [acc_lo, acc_hi] (multipliers
    1, no shift, zero point 0, bounds holding the range; ``round24`` is exact below 2**24):
    a layer that sends its accumulator on, to a thresholding block."""
    return (all(int(m) == 1 for m in rq.mult) and rq.shift == 0 and rq.zero_point == 0
            and not rq.zp_first and rq.lo <= acc_lo and acc_hi <= rq.hi
            and max(-acc_lo, acc_hi) < (1 << F32_BITS))


def requant_stages(rq: Requant, runtime: bool = False) -> int:
    """Register stages :func:`round_clamp` puts between its product and its result
    (``runtime``: with a :class:`RuntimeRequant`, whose clamp takes two)."""
    base = 1 + ROUND24_STAGES + 4          # |p|; round24; / 2**shift (2); sign + zp; clamp
    return base + (2 + ROUND24_STAGES if rq.zp_first else 0) + int(runtime)


def round_clamp(m: Module, p, rq: Requant, name: str):
    """Requantization of the signed product ``p``, pipelined: the clamped value, valid
    :func:`requant_stages` cycles after ``p``."""
    neg, mag = abs_pipe(m, p, name)
    return round_clamp_mag(m, neg, mag, rq, name)


@dataclass(frozen=True)
class RuntimeRequant:
    """The values of a requantizer that several layers share and that change from layer to
    layer (the layer-sequential engine's): signals for the zero point added before the
    rounding, already times ``2**shift`` (``zp_first`` layers; 0 for the others), the zero
    point added after it (0 for ``zp_first`` layers) and the clamp's bounds. The
    :class:`~rtl_templates.quant.Requant` given beside it is then the envelope of the layers:
    their common shift, their multipliers' width, the largest zero point (for widths) and
    the widest bounds; with ``zp_first`` if any layer has it (a zero addend and a second
    rounding leave the others' values alone: ``round24`` of a 24-bit value is itself)."""
    zs: Value
    zp: Value
    lo: Value
    hi: Value


def round_clamp_mag(m: Module, neg, mag, rq: Requant, name: str,
                    rt: RuntimeRequant | None = None):
    """:func:`round_clamp` of the product given as sign and magnitude: valid
    ``requant_stages(rq) - 1`` cycles after them. With ``rq.zp_first`` the zero point joins
    before the rounding, as float32 does it: round_half_even(round24(round24(p) +
    zp·2**shift) / 2**shift). ``rt``: the zero points and bounds are signals
    (:class:`RuntimeRequant`), ``rq`` their envelope."""
    kept = round24_pipe(m, mag, name)
    neg = delay(m, neg, ROUND24_STAGES, f"{name}_neg")
    zb = abs(rq.zero_point).bit_length() + 1
    if rq.zp_first:
        zs = rt.zs if rt is not None else (rq.zero_point << rq.shift)
        t = reg(m, Mux(neg, -kept, kept) + zs,
                signed(len(kept) + abs(rq.zero_point).bit_length() + rq.shift + 2),
                f"{name}_zpsum")
        neg, mag2 = abs_pipe(m, t, f"{name}_z")
        kept = round24_pipe(m, mag2, f"{name}_z")
        neg = delay(m, neg, ROUND24_STAGES, f"{name}_zneg")
        zp = 0
    else:
        zp = rq.zero_point
    if rt is not None:
        zp = rt.zp
    else:
        zb = abs(zp).bit_length() + 1
    ymag = rhe_pipe(m, kept, rq.shift, name)
    neg = delay(m, neg, 2, f"{name}_yneg")
    v = reg(m, Mux(neg, zp - ymag, zp + ymag), signed(len(ymag) + zb + 1), f"{name}_v")
    if rt is None:
        return clamp(m, v, rq.lo, rq.hi, name)
    # bounds that are signals: the compares (carry chains) in one stage, the choice in the next
    below = reg(m, v < rt.lo, unsigned(1), f"{name}_below")
    above = reg(m, v > rt.hi, unsigned(1), f"{name}_above")
    v2 = reg(m, v, v.shape(), f"{name}_v2")
    return reg(m, Mux(below, rt.lo, Mux(above, rt.hi, v2)), signed(signed_width(rq.lo, rq.hi)),
               name)


def sign_chain(w: int, family: str) -> res.Resources:
    """The sign of a ``w``-bit sum ``a + b`` whose other bits are unused (a sign
    requantizer's ``sum + bias`` with a positive zero point: ``2·s + 1 > 0`` is ``s >= 0``):
    once ABC has found the rest unused, the tools keep the carry chain, one LUT4 for the
    top bit (iCE40) and the sign's register (measured: QONNX bipolar MLP)."""
    if family == "ecp5":
        return res.add(w, family)
    return res.Resources(lut4=1, carry=w)


def late_mult(rq: Requant, sign: bool = False, identity: bool = False) -> bool:
    """Whether a unit gives its requantizer :class:`LateMults` (``mult_late``): multipliers
    that differ between channels, in a requantizer with a product. The lanes then carry only
    the parameter word's index to the product, not the multipliers (two registers per lane
    of the multiplier's width each, and a sequential product's latch)."""
    return not (sign or identity) and len({int(x) for x in rq.mult}) > 1


@dataclass(frozen=True)
class LateMults:
    """Per-channel multipliers a :class:`RequantPipeline` reads itself, where its product
    needs them: ``table[w][k]`` is lane ``k``'s multiplier in parameter word ``w``, and
    ``index`` (a signal valid with the sums) the word. A tiled product reads a ROM of the
    words with the magnitudes; a sequential one reads a ROM of their chunks step by step
    (:class:`~rtl_templates.pipeline.SeqMul`'s ``b_rom``)."""
    table: tuple
    index: Value


def late_mult_rom(table, mult_bits: int, seq: bool) -> tuple[np.ndarray, int]:
    """The words of :class:`LateMults`' ROM as lanes [words, lanes] of ``bits`` bits
    (returned beside them): each parameter word's multipliers, or (``seq``) their chunks,
    word ``w * 2**ceil(log2(chunks)) + j`` holding chunk ``j`` (:class:`SeqMul`'s ``b_rom``)."""
    t = np.asarray(table, dtype=np.int64)
    if not seq:
        return t, mult_bits
    cb, c = chunks(mult_bits), min(mult_bits, MUL_CHUNK)
    slots = 1 << (cb - 1).bit_length()
    out = np.zeros((t.shape[0] * slots, t.shape[1]), dtype=np.int64)
    for j in range(cb):
        out[j::slots] = (t >> (j * MUL_CHUNK)) & ((1 << c) - 1)
    return out, c


def late_mult_columns(table, mult_bits: int, seq: bool) -> tuple[int, int, int]:
    """(non-constant, distinct) bit columns and depth of :class:`LateMults`' ROM."""
    vals, bits = late_mult_rom(table, mult_bits, seq)
    return (*res.live_columns(res.bit_columns(vals, bits)), len(vals))


def late_mult_registered(table, mult_bits: int, seq: bool, columns=None) -> bool:
    """Whether :class:`LateMults`' ROM is read a cycle early and its data registered once
    more: where the tools put it in block RAM on either family (an ECP5 DP16KD's data
    leaves the tile 5.6 ns after the clock, as for the weight ROMs). ``columns``:
    :func:`late_mult_columns`, when known."""
    live, _, depth = columns or late_mult_columns(table, mult_bits, seq)
    return any(res.memory(live, depth, f, rom=True, plain=True).bram for f in res.FAMILIES)


def late_mult_registers(words: int, seq: bool, registered: bool) -> int:
    """Flip-flops of the index :class:`LateMults` carries beside the sums (two delays from
    the parameter read, one of them the unit's own) and on to its ROM's read (one more, none
    when read early; a sequential product's start and its latch, two)."""
    return (4 if seq else 2 + (not registered)) * max(1, (max(words, 2) - 1).bit_length())


def param_memories(p_live: int, p_distinct: int, words: int, family: str,
                   late=None) -> tuple[res.Resources, int]:
    """The channel parameter memories of :func:`channel_params` of ``words`` words and the
    flip-flops after them: one memory of ``p_live`` non-constant (``p_distinct`` distinct)
    bit columns; with ``late`` = ((live, distinct) bias columns, multipliers [words, lanes],
    multiplier bits, sequential product) the bias memory, the :class:`LateMults` ROM and
    its index's registers. A block RAM's read register is in the tile and the register
    after it keeps its live columns; a ROM in logic registers its address and the register
    after it keeps the distinct columns. The multipliers' ROM has a register after it only
    when :func:`late_mult_registered` (the product's operand registers are counted with
    the requantizer)."""
    def one(live, distinct, depth=words):
        mem = res.memory(live, depth, family, rom=True, plain=True, logic_width=distinct)
        return mem, live if mem.bram else distinct
    if late is None:
        return one(p_live, p_distinct)
    (b_live, b_distinct), table, mult_bits, seq = late
    bmem, breg = one(b_live, b_distinct)
    cols = late_mult_columns(table, mult_bits, seq)
    mmem, mreg = one(cols[0], cols[1], depth=cols[2])
    registered = late_mult_registered(table, mult_bits, seq, cols)
    return bmem + mmem, breg + (mreg if registered else 0) + late_mult_registers(
        words, seq, registered)


def channel_params(m: Module, bias, mults, n: int, acc_w: int, mult_w: int, addr,
                   late: bool) -> tuple[list, object]:
    """The channels' biases and multipliers in plain ROMs whose word ``w`` holds channels
    ``w*n .. w*n + n - 1`` (lane ``k``: channel ``w*n + k``), read at ``addr`` (stage 1).
    Returns the biases per lane, registered at stage 3 (the read and one register), and the
    multipliers: per lane beside them, or with ``late`` (:func:`late_mult`) as
    :class:`LateMults` whose index is valid at stage 3 too."""
    words = len(bias) // n
    bmask = (1 << acc_w) - 1
    if not late:
        lane_w = acc_w + mult_w
        init = [pack_word([(int(bias[c]) & bmask) | (int(mults[c]) << acc_w)
                           for c in range(w * n, (w + 1) * n)], lane_w) for w in range(words)]
        rd = lane_rom(m, "pmem", n * lane_w, init, [(0, n * lane_w)])[0]
        m.d.comb += rd.addr.eq(addr)
        params3 = lanes(reg(m, rd.data, unsigned(n * lane_w), "params3"), n, lane_w)
        return [w[:acc_w].as_signed() for w in params3], [w[acc_w:] for w in params3]
    binit = [pack_word([int(bias[c]) & bmask for c in range(w * n, (w + 1) * n)], acc_w)
             for w in range(words)]
    b_rd = lane_rom(m, "pmem", n * acc_w, binit, [(0, n * acc_w)])[0]
    m.d.comb += b_rd.addr.eq(addr)
    bias3 = lanes(reg(m, b_rd.data, unsigned(n * acc_w), "bias3"), n, acc_w, signed=True)
    table = tuple(tuple(int(mults[c]) for c in range(w * n, (w + 1) * n))
                  for w in range(words))
    return bias3, LateMults(table, delay(m, addr, 2, "pidx"))


class RequantPipeline:
    """The requantizer tail of ``len(sums)`` lanes, built into module ``m``.

    In cycle t: ``valid``, and per lane the signed sum ``sums[k]``, its ``bias[k]`` and its
    multiplier ``mult[k]`` (signals or constants; a single value, not a list, is one multiplier
    shared by all lanes). t+1: ``sum + bias`` (``acc_bits`` wide) and the multiplier are
    registered; t+2: its sign and magnitude; then the unsigned product of magnitude and
    multiplier (:func:`~rtl_templates.pipeline.mul_pipe`) and :func:`round_clamp_mag`:
    :attr:`data` (lanes of ``out_bits``, packed) is valid when :attr:`valid`, :meth:`depth`
    registers after the input. With ``sign`` (a bipolar output) a sign test replaces the
    product and each lane is one bit. ``spacing``: the fewest cycles between two valid
    inputs; when it allows, each lane's product takes one multiplier tile for several cycles
    (:meth:`sequential`). With ``identity`` (the requantizer :func:`passes_through` the
    accumulator's range) ``sum + bias`` itself is the output, registered once more. With
    ``mult_late`` ``mult`` is :class:`LateMults`: the pipeline reads the multipliers from
    a ROM of its own where the product takes them."""

    @staticmethod
    def sequential(rq: Requant, acc_bits: int, spacing: int) -> bool:
        """Whether the product is made one tile-sized partial product per cycle
        (:class:`~rtl_templates.pipeline.SeqMul`): when inputs come at least as many cycles
        apart as there are partial products."""
        n = chunks(acc_bits) * chunks(rq.mult_bits)
        return n > 1 and spacing >= n

    @staticmethod
    def depth(rq: Requant, acc_bits: int, sign: bool = False, spacing: int = 1,
              identity: bool = False, runtime: bool = False) -> int:
        """Registers from the input to :attr:`data` (``runtime``: built with a
        :class:`RuntimeRequant`)."""
        if sign or identity:
            return 2
        seq = RequantPipeline.sequential(rq, acc_bits, spacing)
        prod = seq_mul_stages(acc_bits, rq.mult_bits) if seq else \
            mul_stages(acc_bits, rq.mult_bits, copy=True)
        return 2 + prod + requant_stages(rq, runtime) - 1

    @staticmethod
    def multiplies(rq: Requant, acc_bits: int, lanes: int, sign: bool = False,
                   spacing: int = 1, identity: bool = False) -> list[tuple[int, int]]:
        """The hardware multiplies of ``lanes`` lanes, as unsigned operand widths (each at
        most a tile)."""
        if sign or identity:
            return []
        ca, cb = chunks(acc_bits), chunks(rq.mult_bits)

        def width(w, i):
            return min(w, (i + 1) * MUL_CHUNK) - i * MUL_CHUNK
        tiles = [(width(acc_bits, i), width(rq.mult_bits, j))
                 for i in range(ca) for j in range(cb)]
        if RequantPipeline.sequential(rq, acc_bits, spacing):
            tiles = [(min(acc_bits, MUL_CHUNK), min(rq.mult_bits, MUL_CHUNK))]
        return tiles * lanes

    @staticmethod
    def registers(rq: Requant, acc_bits: int, out_bits: int, lanes: int, sign: bool = False,
                  spacing: int = 1, mult_live: int | None = None, mult_copies: int | None = None,
                  identity: bool = False, mult_late: bool = False) -> int:
        """Flip-flops of ``lanes`` lanes as the tools keep them. ``mult_live``: bits of a
        lane's multiplier that are not constant (None: all ``rq.mult_bits``; 0: a constant
        multiplier, whose registers the tools remove); ``mult_copies``: distinct multiplier
        signals (None: one per lane; registers fed by the same signal are merged);
        ``mult_late``: :class:`LateMults` (no m1, m2; a sequential product reads the
        chunks from a ROM: its tile operands only)."""
        live = rq.mult_bits if mult_live is None else mult_live
        copies = lanes if mult_copies is None else mult_copies
        depth = RequantPipeline.depth(rq, acc_bits, sign, spacing, identity)
        carried = 0 if mult_late else copies * live         # m1 and m2 each
        bits = depth + lanes * acc_bits + carried           # valid delays, sum + bias, m1
        if sign:    # with a positive zero point only the sign of sum + bias is used
            return bits + lanes - (lanes * (acc_bits - 1) if rq.zero_point > 0 else 0)
        if identity:
            return bits + lanes * min(out_bits, acc_bits)
        bits += lanes * (1 + acc_bits) + carried            # sign and magnitude, m2
        seq = RequantPipeline.sequential(rq, acc_bits, spacing)
        stages = seq_mul_stages(acc_bits, rq.mult_bits) if seq else \
            mul_stages(acc_bits, rq.mult_bits, copy=True)
        bits += lanes * stages                              # the sign's delays
        if seq:
            b_per = min(live, MUL_CHUNK) if mult_late else live + 2 * min(live, MUL_CHUNK)
            bits += seq_mul_registers(acc_bits, rq.mult_bits, lanes, b_regs=False) \
                + copies * b_per - (rq.mult_bits + 2 * min(rq.mult_bits, MUL_CHUNK))
        else:
            bits += lanes * mul_pipe_registers(acc_bits, rq.mult_bits, b_regs=False,
                                               copy=True, b_fixed=live == 0) \
                + copies * live
        return bits + lanes * round_clamp_registers(acc_bits + rq.mult_bits, rq, out_bits)

    @staticmethod
    def parts(rq: Requant, acc_bits: int, out_bits: int, lanes: int, family: str,
              sign: bool = False, spacing: int = 1, mult_live: int | None = None,
              mult_copies: int | None = None, identity: bool = False, mult_late: bool = False
              ) -> dict[str, res.Resources]:
        """Structural parts of ``lanes`` lanes on ``family`` (calibrated by
        :data:`LANE_FIT`): ``rq_front`` (sum + bias, magnitude), ``rq_prod`` (the sum of a
        tiled product's partials) or ``rq_seq`` (the sequential product's multiplexers and
        accumulator), the parts of :func:`round_clamp_parts`, ``rq_lanes`` (one LUT4 or
        carry per lane: the calibration's constant), the flip-flops (:meth:`registers`) in
        ``rq_ff``. A sign requantizer is a comparison per lane."""
        a = acc_bits
        ff = res.Resources(ff=RequantPipeline.registers(rq, a, out_bits, lanes, sign, spacing,
                                                        mult_live, mult_copies, identity,
                                                        mult_late))
        if identity:
            return {"rq_front": res.add(a, family) * lanes, "rq_ff": ff}
        if sign:
            if rq.zero_point > 0:   # 2·s + 1 > 0 is s >= 0: the sign of sum + bias only
                return {"rq_sign": sign_chain(a, family) * lanes, "rq_ff": ff}
            return {"rq_sign": res.add(a, family) * lanes + res.compare(a + 1, family) * lanes,
                    "rq_ff": ff}
        w = a + rq.mult_bits
        ca, cb = chunks(a), chunks(rq.mult_bits)
        if RequantPipeline.sequential(rq, a, spacing):
            seq = (res.mux(min(a, MUL_CHUNK), family, ca) + res.mux(min(rq.mult_bits, MUL_CHUNK),
                                                                    family, cb)
                   + res.mux(w, family, ca * cb) + res.accumulate(w, family))
            prod = res.Resources()
        else:
            seq, prod = res.Resources(), res.add(w, family) * (ca * cb - 1)
        out = {"rq_front": (res.add(a, family) + res.magnitude(a, family)) * lanes,
               "rq_prod": prod * lanes, "rq_seq": seq * lanes,
               "rq_lanes": res.Resources(lut4=lanes, carry=lanes)}
        for k, v in round_clamp_parts(w, rq, out_bits, family).items():
            if k != "rq_ff":
                out[k] = v * lanes
        out["rq_ff"] = ff
        return out

    def __init__(self, m: Module, valid, sums, bias, mult, rq: Requant, acc_bits: int,
                 out_bits: int, sign: bool = False, spacing: int = 1, name: str = "rq",
                 identity: bool = False, rt: RuntimeRequant | None = None,
                 mult_late: bool = False):
        n, mult_w = len(sums), rq.mult_bits
        v1 = Signal(name=f"{name}_v1")
        s1 = [Signal(signed(acc_bits), name=f"{name}_s_{k}", reset_less=True) for k in range(n)]
        if mult_late:
            if sign or identity or not isinstance(mult, LateMults):
                raise ValueError("mult_late needs a product and LateMults")
            m1 = [Const(0, mult_w)] * n         # widths only: read below
        elif isinstance(mult, (list, tuple)):
            m1 = [Signal(unsigned(mult_w), name=f"{name}_m_{k}") for k in range(n)]
            m.d.sync += [r.eq(x) for r, x in zip(m1, mult)]
        else:
            m1 = [Signal(unsigned(mult_w), name=f"{name}_m")] * n
            m.d.sync += m1[0].eq(mult)
        m.d.sync += v1.eq(valid)
        m.d.sync += [s.eq(x + b) for s, x, b in zip(s1, sums, bias)]
        if identity:    # the accumulator itself (sign-extended to a wider output)
            outs = [reg(m, s, signed(max(out_bits, acc_bits)), f"{name}_a_{k}")[:out_bits]
                    for k, s in enumerate(s1)]
        elif sign:      # the sign requantizer as a comparison (no multiplier)
            outs = [Signal(name=f"{name}_b_{k}") for k in range(n)]
            m.d.sync += [b.eq(sign_bit(s, mm, rq.zero_point)) for b, s, mm in zip(outs, s1, m1)]
        else:
            seq = self.sequential(rq, acc_bits, spacing)
            stages = seq_mul_stages(acc_bits, mult_w) if seq else \
                mul_stages(acc_bits, mult_w, copy=True)
            b_rom = None
            if mult_late:       # a ROM read where the product needs the multipliers
                vals, bits = late_mult_rom(mult.table, mult_w, seq)
                init = [pack_word([int(v) for v in row], bits) for row in vals]
                port = lane_rom(m, f"{name}_mrom", n * bits, init, [(0, n * bits)])[0]
                early = late_mult_registered(mult.table, mult_w, seq)
                if seq:         # the index at the product's start, the chunks step by step
                    b_rom = (delay(m, mult.index, 2, f"{name}_midx"), port, early)
                else:           # the words with the magnitudes
                    m.d.comb += port.addr.eq(delay(m, mult.index, int(not early),
                                                   f"{name}_midx"))
                    m1 = lanes(reg(m, port.data, n * bits, f"{name}_mreg") if early
                               else port.data, n, mult_w)
            negs, mags, m2 = [], [], {}
            for k in range(n):
                neg, mag = abs_pipe(m, s1[k], f"{name}_{k}")
                if mult_late:                   # it arrives with the magnitude
                    m2[id(m1[k])] = m1[k]
                elif id(m1[k]) not in m2:       # a shared multiplier is delayed once
                    m2[id(m1[k])] = reg(m, m1[k], unsigned(mult_w), f"{name}_{k}_m2")
                negs.append(delay(m, neg, stages, f"{name}_{k}_pneg"))
                mags.append((mag, m2[id(m1[k])]))
            v2 = delay(m, v1, 1, f"{name}_v2")          # the magnitudes' valid
            if seq:
                prods = SeqMul(m, v2, mags, f"{name}_seq", b_rom=b_rom).products
            else:
                prods = [mul_pipe(m, a, b, f"{name}_{k}_mul", v2)
                         for k, (a, b) in enumerate(mags)]
            outs = [round_clamp_mag(m, neg, prod, rq, f"{name}_y_{k}", rt)[:out_bits]
                    for k, (neg, prod) in enumerate(zip(negs, prods))]
        self.valid = delay(m, v1, self.depth(rq, acc_bits, sign, spacing, identity,
                                             rt is not None) - 1,
                           f"{name}_v")
        self.data = Cat(*outs)
