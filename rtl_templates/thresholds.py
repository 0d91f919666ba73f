"""Multi-threshold activation: every element of a stream becomes the number of its channel's
thresholds it reaches (FINN's thresholding layer).

Stream contract
    ``i``: ``pe`` elements of ``in_type`` (a layer's accumulator) per beat; ``o``: ``pe``
    elements of ``out_type`` per beat, element k in bits ``[k*bits, (k+1)*bits)`` on both
    sides. A frame is ``elements`` elements; element k belongs to channel ``k % channels``
    (channel-last streams), so beat b holds channels ``(b % (channels/pe))·pe + lane``.

Semantics (per element ``x`` of channel ``c``, ``N`` thresholds ``T[c, 0..N-1]`` ascending)
    ``n = #{k : x >= T[c, k]}``; the level is ``n`` for an increasing channel and ``N - n``
    for a decreasing one (``decreasing[c]``); the output is ``out_lo + level``, or for a
    bipolar output (``rtl_templates/xnor_mvau.BIPOLAR``, ``N = 1``) ``2·level - 1`` (one
    bit, 1 = +1, on the stream). The thresholds are computed by their owner
    (``dataflow/ops_thresh.py``) so that this equals the float computation it replaces.

Hardware
    A ROM of ``channels/pe`` words holds each lane's ``N`` thresholds and direction bit. An
    input beat is taken at cycle t while a credit is left; at t+1 the beat and the ROM word
    are registered; at t+2 the ``N`` comparisons of each lane (a carry chain each) are
    registered; their count, its direction and the offset enter the output stage
    (:mod:`output_stage`: its write register, then the FIFO), from which the beat can leave
    at t + :data:`LATENCY`. One beat per cycle; ``valid`` never waits for ``ready``.
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
from hwgen.rtl_templates.words import lanes, pack_word
from hwgen.rtl_templates.xnor_mvau import is_bipolar

#: cycles from an input transfer to the output transfer of that beat (output ready): two to
#: the comparisons, then the output stage's (the level is a sum and a multiplexer of them:
#: the write register comes first)
LATENCY = 2 + output_stage.latency()


@dataclass(frozen=True, eq=False)
class ThresholdsParams:
    """One thresholding instance."""
    thresholds: np.ndarray   # [channels, N] int64, ascending along N
    decreasing: np.ndarray   # [channels] bool
    in_type: QType
    out_type: QType
    out_lo: int              # the output at level 0 (ignored for a bipolar output: -1)
    pe: int = 1
    elements: int = 1        # elements per frame (a multiple of the channels)

    def __post_init__(self):
        t = np.asarray(self.thresholds)
        c, n = t.shape
        if n < 1:
            raise ValueError("a thresholding needs at least one threshold per channel")
        if np.any(np.diff(t, axis=1) < 0):
            raise ValueError("thresholds must be ascending per channel")
        if len(self.decreasing) != c:
            raise ValueError("one direction per channel is needed")
        top = 1 if is_bipolar(self.out_type) else self.out_lo + n
        if is_bipolar(self.out_type) and n != 1:
            raise ValueError("a bipolar output takes one threshold per channel")
        if not is_bipolar(self.out_type) and (self.out_lo < self.out_type.lo
                                              or top > self.out_type.hi):
            raise ValueError(f"levels {self.out_lo}..{top} do not fit {self.out_type.name}")
        if self.pe < 1 or c % self.pe or self.elements % c:
            raise ValueError(f"PE={self.pe} does not divide the {c} channels, or the "
                             f"{self.elements} elements are not whole pixels")

    @property
    def channels(self) -> int:
        return int(np.asarray(self.thresholds).shape[0])

    @property
    def n(self) -> int:
        return int(np.asarray(self.thresholds).shape[1])

    @property
    def beats(self) -> int:
        return self.elements // self.pe

    @property
    def t_bits(self) -> int:
        """Bits of a stored threshold (two's complement; the input fits too)."""
        t = np.asarray(self.thresholds)
        return signed_width(min(int(t.min()), self.in_type.lo),
                            max(int(t.max()), self.in_type.hi))


def golden(p: ThresholdsParams, x: np.ndarray) -> np.ndarray:
    """[N, elements] → [N, elements]: each element's level, offset (see the module)."""
    x = np.asarray(x, dtype=np.int64)
    n = x.shape[0]
    v = x.reshape(n, -1, p.channels)
    t = np.asarray(p.thresholds, dtype=np.int64)
    cnt = (v[..., None] >= t[None, None]).sum(axis=-1)
    level = np.where(np.asarray(p.decreasing, bool)[None, None], p.n - cnt, cnt)
    y = 2 * level - 1 if is_bipolar(p.out_type) else p.out_lo + level
    return y.reshape(n, -1).astype(np.int64)


def timing(p: ThresholdsParams, in_first: int, in_last: int) -> tuple[int, int]:
    return in_first + LATENCY, in_last + LATENCY


def _words(p: ThresholdsParams) -> list[int]:
    """ROM words: per lane its N thresholds (``t_bits`` each), then its direction bit."""
    tb, nf = p.t_bits, p.channels // p.pe
    t = np.asarray(p.thresholds)
    words = []
    for f in range(nf):
        entry = []
        for lane in range(p.pe):
            c = f * p.pe + lane
            entry.append(pack_word(list(t[c]) + [int(bool(p.decreasing[c]))], tb)
                         & ((1 << (p.n * tb + 1)) - 1))
        words.append(pack_word(entry, p.n * tb + 1))
    return words


def cost(p: ThresholdsParams) -> Cost:
    width = p.pe * (p.n * p.t_bits + 1)
    by_family, parts = res.estimate(resource_parts, p, RESOURCE_FIT)
    return Cost(cycles=p.beats, latency=timing(p, 0, p.beats - 1)[1] + 1,
                memory_bits=(p.channels // p.pe) * width
                + output_stage.fifo_depth(LATENCY) * p.pe * p.out_type.bits,
                registers=max(r.ff for r in by_family.values()), by_family=by_family,
                parts=parts)


#: calibration of :func:`resource_parts` (``benchmarks/resources.py --fit``)
RESOURCE_FIT: res.Fit = {
    "ecp5": {
        "lut4": {"cmp": 1.853, "count": 1.105, "ctl": 0.945, "fifo": 0.666, "rom": 1.055, "1": 0.0},
        "carry": {"cmp": 0.605, "count": 0.0, "ctl": 0.924, "fifo": 0.171, "1": 0.0},
    },
    "ice40": {
        "lut4": {"cmp": 0.106, "count": 0.187, "ctl": 1.049, "fifo": 1.062,
                  "rom": 1.394, "1": 0.007},
        "carry": {"cmp": 0.715, "count": 0.0, "ctl": 1.035, "fifo": 0.201, "1": 0.0},
    },
}


def resource_parts(p: ThresholdsParams, family: str) -> dict[str, res.Resources]:
    """The block's hardware in the resource model's parts (see
    :mod:`rtl_templates.resources`): the threshold ROM, the comparisons, the level count,
    the output stage and the control."""
    tb, ob = p.t_bits, p.out_type.bits
    width = p.n * tb + 1
    nf = p.channels // p.pe
    cb = counter_bits(nf)
    const = nf == 1
    cmp = res.compare(tb, family, constant=const) * (p.n * p.pe)
    count = res.add(max(1, p.n.bit_length()), family) * (p.pe * max(0, p.n - 1)) \
        + res.mux(ob, family) * p.pe
    # the beat, the comparisons and the direction bits (the ROM's read register holds the
    # thresholds: the "rom" part)
    ff = p.pe * (p.in_type.bits + p.n) + 3
    return {"rom": res.rom(_words(p), p.pe * width, family),
            "cmp": cmp, "count": count + res.Resources(ff=ff),
            **output_stage.parts(p.pe * ob, LATENCY, family),
            "ctl": res.Resources(ff=cb, lut4=cb, carry=cb / 2)}


def manifest(p: ThresholdsParams) -> dict:
    return {"folding": {"pe": p.pe}, "channels": p.channels, "thresholds_per_channel": p.n,
            "types": {"input": p.in_type.name, "output": p.out_type.name,
                      "threshold_bits": p.t_bits}}


def fold_space(p: ThresholdsParams) -> FoldSpace:
    return FoldSpace(divisors(p.channels), (1,), lambda pe, simd: p.elements // pe)


class Thresholds(wiring.Component):
    """The thresholding unit. See the module documentation for the contract."""

    def __init__(self, p: ThresholdsParams):
        self.p = p
        super().__init__({"i": In(stream.Signature(unsigned(p.pe * p.in_type.bits))),
                          "o": Out(stream.Signature(unsigned(p.pe * p.out_type.bits)))})

    def elaborate(self, platform):
        p = self.p
        m = Module()
        tb, n, ob = p.t_bits, p.n, p.out_type.bits
        width = n * tb + 1
        nf = p.channels // p.pe
        out = output_stage.OutputStage(m, self.o, p.pe * ob, LATENCY)
        take = Signal()
        m.d.comb += [self.i.ready.eq(out.room), take.eq(self.i.valid & self.i.ready)]
        out.spend(take)
        (port,) = rom(m, "thr", width=p.pe * width, init=_words(p))
        fold = Signal(range(max(nf, 2)))
        with m.If(take):
            m.d.sync += fold.eq(Mux(fold == nf - 1, 0, fold + 1))
        m.d.comb += port.addr.eq(fold)
        # t+1: the beat and its thresholds
        v1 = reg(m, take, unsigned(1), "thr_v1")
        x1 = reg(m, self.i.payload, unsigned(p.pe * p.in_type.bits), "thr_x1")
        xs = lanes(x1, p.pe, p.in_type.bits, p.in_type.signed)
        # t+2: the comparisons
        v2 = reg(m, v1, unsigned(1), "thr_v2")
        ys = []
        for lane, word in enumerate(lanes(port.data, p.pe, width)):
            ts = lanes(word, n, tb, True)
            hits = reg(m, Cat(*(xs[lane] >= t for t in ts)), unsigned(n), f"thr_hit_{lane}")
            dec = reg(m, word[n * tb], unsigned(1), f"thr_dec_{lane}")
            cnt = sum(hits[k] for k in range(n)) if n > 1 else hits[0]
            level = Mux(dec, n - cnt, cnt)
            if is_bipolar(p.out_type):
                ys.append(level[0])
            else:
                y = Signal(signed(ob + 1), name=f"thr_y_{lane}")
                m.d.comb += y.eq(p.out_lo + level)
                ys.append(y[:ob])
        out.write(Cat(*ys), v2)
        return m



def examples() -> list[Example]:
    """Small instances for the conformance test: 15 thresholds into 4 bits, one lane; 3
    thresholds into 2 signed bits, three lanes."""
    rng = np.random.default_rng(3)
    out = []
    for in_type, out_type, n, channels, pixels, pe in (
            (QType(8, True), QType(4, False), 15, 4, 3, 1),
            (QType(12, True), QType(2, True), 3, 6, 2, 3)):
        t = np.sort(rng.integers(in_type.lo, in_type.hi + 2, (channels, n)), axis=1)
        dec = rng.random(channels) < 0.4
        p = ThresholdsParams(t, dec, in_type, out_type, out_type.lo, pe, channels * pixels)
        out.append(Example(p, (Port(in_type, pe, p.elements),),
                           (Port(out_type, pe, p.elements),), f"n{n}-c{channels}-pe{pe}"))
    return out


register_block("thresholds", params=ThresholdsParams, component=Thresholds, golden=golden,
               cost=cost, timing=timing, manifest=manifest, fold_space=fold_space,
               examples=examples)
