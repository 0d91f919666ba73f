"""Integer graph + folding → dataflow graph: blocks, the streams between them, and FIFOs.

Every integer op adds its own blocks (its ``lower()`` method, with the op in its
``dataflow/ops_*.py`` module; a convolution is a sliding-window generator and a matrix–vector
unit, a depthwise convolution or pooling a window generator and a per-channel unit). A tensor
read by several ops is duplicated by a fork; a stream whose elements per beat
differ between producer and consumer passes a width converter; every consumer reads through a
FIFO whose depth comes from the cost models (see :func:`_size_join_fifos`).

The folding choice lives in :func:`choose_folding` alone, so a smarter (budget-aware) search
can replace it without touching the rest.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from hwgen.dataflow.intgraph import IntGraph, QTensor, op_inputs
from hwgen.errors import HwgenError
from hwgen.rtl_templates.block import block_spec
from hwgen.rtl_templates.cost import Cost
from hwgen.rtl_templates.dwc import DWCParams
from hwgen.rtl_templates.fifo import FIFOParams
from hwgen.rtl_templates.fork import ForkParams
from hwgen.rtl_templates.quant import QType
from hwgen.rtl_templates.resources import FAMILIES, total
from hwgen.rtl_templates.seq_engine import SeqEngineParams, SeqLayer

#: beats a FIFO holds beyond what the analysis asks for. At least 3: a FIFO of 2 words
#: (``rtl_templates/memory.py: BufferedFIFO``, an inner queue of one word whose ``w_rdy`` does
#: not look at reads, and the output register) passes only one beat every other cycle, which
#: halved the interval where a full-rate producer feeds a full-rate consumer through it
FIFO_MARGIN = 3
#: default steady-state target, cycles per frame, when none is given
DEFAULT_TARGET_CYCLES = 1024


@dataclass
class Folding:
    """An op's parallelism: PE and SIMD, and of its PE·SIMD products how many are built of
    logic cells instead of DSP tiles (``lut_lanes``: a matrix unit's multipliers only)."""
    pe: int = 1
    simd: int = 1
    lut_lanes: int = 0
    #: the layer's weights live in SPRAM, loaded after reset (iCE40 UltraPlus; an op whose
    #: blocks hold no weight memory ignores it)
    spram: bool = False
    #: the layer's weight memory is built of logic cells (a ROM of LUTs) instead of block RAM
    #: (a matrix or vector unit's only)
    rom_logic: bool = False
    #: the layer runs on the layer-sequential engine (``rtl_templates/seq_engine.py``) with
    #: every other layer, one after another (all layers or none)
    sequential: bool = False

    def as_dict(self) -> dict:
        """As a folding file and the manifest write it (``spram``, ``lut_lanes`` and
        ``rom_logic`` only when set)."""
        d = {"pe": self.pe, "simd": self.simd}
        if self.spram:
            d["spram"] = True
        if self.lut_lanes:
            d["lut_lanes"] = self.lut_lanes
        if self.rom_logic:
            d["rom_logic"] = True
        if self.sequential:
            d["sequential"] = True
        return d


@dataclass
class Stream:
    name: str
    qtype: QType           # of the elements
    per_beat: int
    elements: int          # per frame

    @property
    def beats(self) -> int:
        return self.elements // self.per_beat

    @property
    def width(self) -> int:
        return self.per_beat * self.qtype.bits


@dataclass(eq=False)
class Block:
    """One hardware block of a registered kind (:mod:`hwgen.rtl_templates.block`);
    ``inputs``/``outputs`` are stream names in port order. Its cost and timing come from the
    kind's description."""
    name: str
    kind: str
    params: object
    inputs: list[str]
    outputs: list[str]
    layer: str = ""                          # the integer op it implements ("" for plumbing)
    onnx_nodes: tuple[str, ...] = ()

    def __post_init__(self):
        self.spec = block_spec(self.kind)
        self.spec.check(self.params)
        self._cost: tuple[object, Cost] | None = None
        #: family → the output bits its consumer uses, where not all (:func:`mark_live`)
        self.out_live: dict[str, object] = {}

    @property
    def cost(self) -> Cost:
        """The kind's cost of the parameters; on a family where the consumer uses only some
        output bits, the resources the tools leave (the kind's ``resources_live``)."""
        if self._cost is None or self._cost[0] is not self.params:
            c = self.spec.cost(self.params)
            if self.out_live:
                c = dataclasses.replace(c, by_family={
                    f: self.spec.resources_live(self.params, f, self.out_live[f])
                    if f in self.out_live else r for f, r in c.by_family.items()})
            self._cost = (self.params, c)
        return self._cost[1]

    def timing(self, first: int, last: int) -> tuple[int, int]:
        return self.spec.timing(self.params, first, last)


def mark_live(blocks: list[Block]) -> None:
    """Tell each block with a ``resources_live`` face whose one output another block of
    ``blocks`` reads which of its output bits that reader uses, where it does not use all
    (``input_live``): a window FIFO in front of a unit whose input lanes have zero weights
    loses the block RAM tiles of those lanes' columns."""
    readers = {s: (b, k) for b in blocks for k, s in enumerate(b.inputs)}
    for b in blocks:
        live = {}
        if b.spec.resources_live is not None and len(b.outputs) == 1 \
                and b.outputs[0] in readers:
            c, k = readers[b.outputs[0]]
            if c.spec.input_live is not None:
                for f in FAMILIES:
                    mask = c.spec.input_live(c.params, f)[k]
                    if mask is not None:
                        live[f] = mask
        if live != b.out_live:
            b.out_live, b._cost = live, None


def mark_sliced_streams(blocks: list[Block]) -> None:
    """Make each stream between a FIFO of several slices and a neighbour that can drive the
    slices one by one a sliced stream
    (:class:`~hwgen.rtl_templates.streams.SlicedSignature`), when both ends' ``slice_ports``
    faces agree: a matrix unit reading the FIFO keeps a copy of its input ready per slice
    (its one ready flip-flop no longer reaches every slice's enables); a window generator
    writing it hands its own output FIFO's slices over one by one (its one valid no longer
    reaches every slice's enables, nor the FIFO's first ready every slice of its own).
    Between two blocks with no FIFO in between the FIFO is the producer's own output FIFO
    (its parameters' ``slice_widths``): a window generator read straight by a matrix unit
    hands each slice to a copy of the unit's issue control."""
    producers = {s: b for b in blocks for s in b.outputs}
    for c in blocks:
        p = producers.get(c.inputs[0]) if len(c.inputs) == 1 else None
        if p is None or len(p.outputs) != 1 or p.kind == c.kind == "fifo":
            continue
        widths = getattr((c if c.kind == "fifo" else p).params, "slice_widths", ())
        if len(widths) < 2 or p.spec.slice_ports is None or c.spec.slice_ports is None:
            continue
        out = p.spec.slice_ports(p.params, "o", widths)
        inp = c.spec.slice_ports(c.params, "i", widths)
        if out is not None and inp is not None:
            p.params, c.params = out, inp


def mark_valid_copies(blocks: list[Block]) -> None:
    """Give each block that asks for copies of its input's valid (its ``valid_copies``
    face) the FIFO before it keeping that many (``FIFOParams.valid_copies``)."""
    producers = {s: b for b in blocks for s in b.outputs}
    for c in blocks:
        p = producers.get(c.inputs[0]) if len(c.inputs) == 1 else None
        if p is None or p.kind != "fifo" or c.spec.valid_copies is None:
            continue
        asked = c.spec.valid_copies(c.params)
        if asked is not None:
            c.params, n = asked
            p.params = dataclasses.replace(p.params, valid_copies=n)


def link_neighbours(blocks: list[Block]) -> None:
    """What a block takes from its neighbours: the output bits its reader uses
    (:func:`mark_live`), sliced streams beside wide FIFOs (:func:`mark_sliced_streams`) and
    copies of a FIFO's valid (:func:`mark_valid_copies`)."""
    mark_live(blocks)
    mark_sliced_streams(blocks)
    mark_valid_copies(blocks)


@dataclass
class DataflowGraph:
    blocks: list[Block]
    streams: dict[str, Stream]
    input: QTensor
    output: QTensor
    in_stream: str
    out_stream: str
    folding: dict[str, Folding] = field(default_factory=dict)
    #: the stream carrying each integer tensor (as its producer writes it)
    tensor_streams: dict[str, str] = field(default_factory=dict)
    #: streams offered from cycle 0 besides ``in_stream`` (stand-ins of a partial graph)
    extra_sources: list[str] = field(default_factory=list)
    #: partial lowering: ops left out (→ the reason) and ops downstream of one (→ that op)
    op_errors: dict[str, str] = field(default_factory=dict)
    op_after: dict[str, str] = field(default_factory=dict)
    op_unreached: list[str] = field(default_factory=list)   # ops with an input never computed
    complete: bool = True

    @property
    def in_per_beat(self) -> int:
        return self.streams[self.in_stream].per_beat

    @property
    def out_per_beat(self) -> int:
        return self.streams[self.out_stream].per_beat

    @property
    def bottleneck(self) -> Block:
        return max(self.blocks, key=lambda b: b.cost.cycles)

    def stream_times(self) -> dict[str, tuple[int, int]]:
        """First/last transfer cycle of one frame on every stream, through the idle graph
        with the input offered every cycle and the output always ready."""
        t = {src: (0, self.streams[src].beats - 1)
             for src in [self.in_stream, *self.extra_sources]}
        for b in self.blocks:
            first = max(t[s][0] for s in b.inputs)
            last = max(t[s][1] for s in b.inputs)
            out = b.timing(first, last)
            for s in b.outputs:
                t[s] = out
        return t

    def latency(self) -> int:
        return self.stream_times()[self.out_stream][1] + 1

    def estimate(self) -> dict:
        """Whole-design figures; the latency only for a complete graph."""
        costs = [b.cost for b in self.blocks]
        resources = {f: total(c.resources(f) for c in costs).as_dict() for f in FAMILIES}
        if not costs:
            return {"cycles_per_frame": 0, "bottleneck": None, "latency_cycles": None,
                    "multipliers": 0, "memory_bits": 0, "registers": 0,
                    "resources": resources}
        return {
            "cycles_per_frame": self.bottleneck.cost.cycles,
            "bottleneck": self.bottleneck.name,
            "latency_cycles": self.latency() if self.complete else None,
            "multipliers": sum(c.multipliers for c in costs),
            "memory_bits": sum(c.memory_bits for c in costs),
            "registers": sum(c.registers for c in costs),
            "resources": resources,
        }


# ------------------------------------------------------------------------------ folding

def choose_folding(ig: IntGraph, requested: dict[str, Folding] | None = None,
                   target_cycles: int | None = None) -> dict[str, Folding]:
    """Per op PE/SIMD. Requested values win; the others take the smallest PE·SIMD (then the
    smallest PE) whose cycles per frame are at most ``target_cycles`` (the most parallel
    choice if none is; fully serial without a target). The choices are the op's fold space:
    a convolution's SIMD may exceed its channels (a window-parallel generator then reads
    the window), so a small-C first layer can meet a short target too."""
    requested = dict(requested or {})
    names = [op.name for op in ig.ops]
    unknown = sorted(set(requested) - set(names))
    if unknown:
        raise HwgenError(f"folding names unknown layer(s) {', '.join(unknown)}; layers are "
                         f"{', '.join(names)}")
    out = {}
    for op in ig.ops:
        space = op.fold_space(ig)
        pes, simds, cycles = space.pe, space.simd, space.cycles
        if op.name in requested:
            f = requested[op.name]
            if f.pe not in pes:
                raise HwgenError(f"layer {op.name}: PE={f.pe} must be a divisor of its "
                                 f"{pes[-1]} output channels")
            if f.simd not in simds:
                raise HwgenError(f"layer {op.name}: SIMD={f.simd} must be one of "
                                 f"{', '.join(map(str, simds))}")
            if not 0 <= f.lut_lanes <= op_lanes(op, f):
                raise HwgenError(f"layer {op.name}: lut_lanes={f.lut_lanes} must be within "
                                 f"its {op_lanes(op, f)} products at PE={f.pe}, "
                                 f"SIMD={f.simd}")
            out[op.name] = f
            continue
        if target_cycles is None:
            out[op.name] = Folding()
            continue
        def rank(c, target=target_cycles, cycles=cycles):
            size, pe, simd = c
            n = cycles(pe, simd)
            # meeting the target first; then fewest cycles if it cannot; then smallest
            return (n > target, n if n > target else 0, size, pe)
        _, pe, simd = min(((pe * simd, pe, simd) for pe in pes for simd in simds), key=rank)
        out[op.name] = Folding(pe, simd)
    return out


# ------------------------------------------------------------------------------ lowering

class Builder:
    """What an op's ``lower()`` uses to add its blocks: named streams, blocks, the stream of
    an input tensor (through a width converter if needed, and a FIFO), and joins whose FIFOs
    are sized once the whole graph is known."""

    def __init__(self, ig: IntGraph, folding: dict[str, Folding]):
        self.ig, self.fold = ig, folding
        self.blocks: list[Block] = []
        self.streams: dict[str, Stream] = {}
        self.pending: dict[str, list[str]] = {}   # tensor → unread streams carrying it
        self.tensor_streams: dict[str, str] = {}
        self.join_fifos: list[tuple[Block, list[Block], int, tuple[int, ...]]] = []

    def stream(self, name: str, qtype, per_beat: int, elements: int) -> str:
        base, k = name, 1
        while name in self.streams:
            k += 1
            name = f"{base}_{k}"
        self.streams[name] = Stream(name, qtype, per_beat, elements)
        return name

    def add(self, block: Block) -> Block:
        names = {b.name for b in self.blocks}
        base, k = block.name, 1
        while block.name in names:
            k += 1
            block.name = f"{base}_{k}"
        self.blocks.append(block)
        return block

    def produce(self, tensor: str, stream: str, n_readers: int):
        """Register ``stream`` as carrying ``tensor``; fork it if several ops read it."""
        self.tensor_streams[tensor] = stream
        if n_readers <= 1:
            self.pending[tensor] = [stream]
            return
        s = self.streams[stream]
        outs = [self.stream(f"{tensor}_fork{k}", s.qtype, s.per_beat, s.elements)
                for k in range(n_readers)]
        self.add(Block(f"fork_{short_name(tensor)}", "fork",
                       ForkParams(s.width, n_readers, s.beats), [stream], outs))
        self.pending[tensor] = list(outs)  # read() pops from it

    def read(self, tensor: str, per_beat: int, fifo_depth: int = FIFO_MARGIN) -> tuple[str, Block]:
        """A stream of ``tensor`` with ``per_beat`` elements per beat, through a FIFO."""
        src = self.pending[tensor].pop(0)
        s = self.streams[src]
        if s.per_beat != per_beat:
            dst = self.stream(f"{short_name(tensor)}_x{per_beat}", s.qtype, per_beat, s.elements)
            self.add(Block(f"dwc_{short_name(tensor)}", "dwc",
                           DWCParams(s.qtype.bits, s.per_beat, per_beat, s.elements), [src],
                           [dst]))
            src, s = dst, self.streams[dst]
        dst = self.stream(f"{short_name(tensor)}_q", s.qtype, per_beat, s.elements)
        f = self.add(Block(f"fifo_{short_name(tensor)}", "fifo",
                           FIFOParams(s.width, fifo_depth, s.beats), [src], [dst]))
        return dst, f

    def join(self, block: Block, fifos: list[Block], beats_per_pixel: int,
             hold_frame: tuple[int, ...] = ()):
        """``block`` joins the streams read through ``fifos``: size them (see
        :func:`_size_join_fifos`). ``hold_frame``: the inputs whose FIFO must hold a whole
        frame (a feature map waiting for a vector computed from it)."""
        self.join_fifos.append((block, list(fifos), beats_per_pixel, tuple(hold_frame)))

    def snapshot(self):
        return (len(self.blocks), dict(self.streams), len(self.join_fifos),
                {k: list(v) for k, v in self.pending.items()}, dict(self.tensor_streams))

    def rollback(self, snap):
        n, self.streams, nj, self.pending, self.tensor_streams = snap
        del self.blocks[n:]
        del self.join_fifos[nj:]


def lower_op(ig: IntGraph, op, f: Folding) -> list[Block]:
    """The blocks ``op`` adds at folding ``f`` on its own: its compute blocks and the FIFOs
    (and a width converter or fork, if it needs one) through which it reads inputs offered
    at its own elements per beat. What a folding search prices an op by; the whole graph
    adds the plumbing between ops and sizes the FIFOs of joins (:func:`lower`)."""
    b = Builder(ig, {op.name: f})
    ins = op_inputs(op)
    for t in dict.fromkeys(ins):
        qt = ig.tensors[t]
        s = b.stream(f"src_{short_name(t)}", qt.qtype, op.in_per_beat(f), qt.size)
        b.produce(t, s, ins.count(t))
    op.lower(b, ig, f)
    check_lut_lanes(op, f, b.blocks)
    link_neighbours(b.blocks)
    return b.blocks


def check_lut_lanes(op, f: Folding, blocks) -> None:
    """A folding with ``lut_lanes`` (or ``rom_logic``) is for an op that lowers to a matrix or
    vector unit taking them."""
    if f.lut_lanes and not any(getattr(b.params, "lut_lanes", 0) == f.lut_lanes
                               for b in blocks if b.layer == op.name):
        raise HwgenError(f"layer {op.name}: lut_lanes={f.lut_lanes}, but it has no "
                         f"unit of multipliers to build them in logic")
    if f.rom_logic and not any(getattr(b.params, "rom_logic", False)
                               for b in blocks if b.layer == op.name):
        raise HwgenError(f"layer {op.name}: rom_logic=true, but it has no matrix or vector "
                         f"unit whose weights could be built of logic")


def op_macs(ig: IntGraph, op) -> int:
    """Multiply–accumulates per frame of an op with a weight matrix (its cycles per frame
    fully folded, one product per cycle, times the products each cycle makes per lane: a
    depthwise convolution's channel multiplier); 0 for ops without weights."""
    if getattr(op, "weights", None) is None:
        return 0
    return int(op.fold_space(ig).cycles(1, 1)) * getattr(op, "multiplier", 1)


def op_lanes(op, f: Folding) -> int:
    """Multipliers of an op with a weight matrix at folding ``f`` that compute its
    multiply–accumulates (PE·SIMD, times a depthwise convolution's channel multiplier): the
    lanes whose busy cycles MAC utilisation counts; 0 for ops without weights."""
    if getattr(op, "weights", None) is None:
        return 0
    return f.pe * f.simd * getattr(op, "multiplier", 1)


def short_name(name: str) -> str:
    """A stream or block name made of ``name``'s last 40 alphanumeric characters."""
    keep = "".join(c if c.isalnum() else "_" for c in name)
    return keep.strip("_")[-40:] or "t"


def lower(ig: IntGraph, folding: dict[str, Folding] | None = None,
          target_cycles: int | None = None, partial: bool = False,
          sources: dict[str, str] | None = None) -> DataflowGraph:
    """The dataflow graph of ``ig`` at the chosen folding.

    By default every op must lower (an op that cannot is an HwgenError). ``partial=True`` is
    ``hwgen inspect``'s policy: an op that cannot be lowered is recorded in ``op_errors`` and
    left out, its result becoming a source for the ops after it; ``sources`` names further
    source tensors (stand-ins for the outputs of unsupported ONNX nodes → that node). Every
    source offers its first beat at cycle 0; ``complete`` says whether the graph runs from
    the input to the output with nothing left out."""
    fold = choose_folding(ig, folding, target_cycles)
    sources = dict(sources or {})
    b = Builder(ig, fold)
    readers: dict[str, int] = {}
    for op in ig.ops:
        for t in op_inputs(op):
            readers[t] = readers.get(t, 0) + 1
    if ig.output:
        readers[ig.output] = readers.get(ig.output, 0) + 1
    starts: list[str] = []

    def source(t: str, name: str, ops):
        reader = next((op for op in ops if t in op_inputs(op)), None)
        if reader is None:
            return
        qt = ig.tensors[t]
        s = b.stream(name, qt.qtype, reader.in_per_beat(fold[reader.name]), qt.size)
        b.produce(t, s, readers.get(t, 0))
        starts.append(s)

    if ig.input:
        source(ig.input, "input", ig.ops)
    for t in sources:
        if t != ig.input:
            source(t, f"standin_{short_name(t)}", ig.ops)
    errors: dict[str, str] = {}
    after: dict[str, str] = {}               # tensor → the op left out upstream of it
    op_after: dict[str, str] = {}
    unreached: list[str] = []
    for k, op in enumerate(ig.ops):
        up = next((after[t] for t in op_inputs(op) if t in after), "")
        if up:
            op_after[op.name] = up
            after[op.output] = up
        if partial and any(t not in b.pending for t in op_inputs(op)):
            unreached.append(op.name)
            continue
        snap = b.snapshot()
        try:
            out = op.lower(b, ig, fold[op.name])
            check_lut_lanes(op, fold[op.name], b.blocks)
            b.produce(op.output, out, readers.get(op.output, 0))
        except (HwgenError, ValueError) as err:
            if not partial:
                raise
            # left out: its result becomes a source, like a stand-in, for the ops after it
            b.rollback(snap)
            errors[op.name] = str(err)
            after.setdefault(op.output, op.name)
            source(op.output, f"standin_{short_name(op.output)}", ig.ops[k + 1:])
    complete = bool(ig.output) and not errors and not unreached and not sources and \
        bool(ig.ops) and bool(b.pending.get(ig.output))
    if complete:
        out_stream = b.pending[ig.output].pop(0)
    elif not partial:
        raise HwgenError("the integer graph's output is not computed")
    else:
        out_stream = starts[0] if starts else ""
    dfg = DataflowGraph(b.blocks, b.streams,
                        ig.tensors[ig.input] if ig.input else None,
                        ig.tensors[ig.output] if ig.output else None,
                        starts[0] if starts else "", out_stream, fold, dict(b.tensor_streams),
                        starts[1:], errors, op_after, unreached, complete)
    _size_join_fifos(dfg, b.join_fifos)
    if any(f.sequential for f in fold.values()):
        return engine_graph(dfg, ig)
    link_neighbours(dfg.blocks)
    return dfg


#: the block kinds the layer-sequential engine runs (with the FIFOs between them dropped)
ENGINE_KINDS = ("swg", "mvau", "vvau", "gap")


def engine_graph(dfg: DataflowGraph, ig: IntGraph) -> DataflowGraph:
    """``dfg`` (lowered fully serial, every op's folding ``sequential``) as one
    layer-sequential engine between its input and output streams. A graph the engine cannot
    run (a branch, a block kind it lacks, a folded layer) is an HwgenError naming the layer."""
    fold = dfg.folding
    mixed = sorted(n for n, f in fold.items() if not f.sequential)
    if mixed:
        raise HwgenError(f"layer {mixed[0]}: the layer-sequential engine runs every layer or "
                         f"none (mark all layers \"sequential\")")
    if not dfg.complete:
        raise HwgenError("the layer-sequential engine needs the whole graph")
    layers, swg, at = [], None, dfg.in_stream
    for blk in dfg.blocks:
        where = f"layer {blk.layer or blk.name}"
        if len(blk.inputs) != 1 or blk.inputs[0] != at or len(blk.outputs) != 1:
            raise HwgenError(f"{where}: the layer-sequential engine runs a chain of layers, "
                             f"not branches or joins ({blk.kind})")
        at = blk.outputs[0]
        if blk.kind == "fifo":
            continue
        if blk.kind not in ENGINE_KINDS:
            raise HwgenError(f"{where}: the layer-sequential engine has no {blk.kind} "
                             f"(it runs convolutions, depthwise and pointwise, global average "
                             f"pooling and fully connected layers)")
        if blk.kind == "swg":
            swg = blk.params
            continue
        layers.append(SeqLayer(blk.layer, blk.params, swg))
        swg = None
    try:
        params = SeqEngineParams(tuple(layers), any(f.spram for f in fold.values()))
    except ValueError as e:
        raise HwgenError(f"the layer-sequential engine cannot run this model: {e}") from None
    streams = {s: dfg.streams[s] for s in (dfg.in_stream, dfg.out_stream)}
    engine = Block("engine", "seq_engine", params, [dfg.in_stream], [dfg.out_stream],
                   layer=layers[0].name,
                   onnx_nodes=tuple(dict.fromkeys(n for b in dfg.blocks for n in b.onnx_nodes)))
    return DataflowGraph([engine], streams, dfg.input, dfg.output, dfg.in_stream,
                         dfg.out_stream, fold, {ig.input: dfg.in_stream,
                                                ig.output: dfg.out_stream})


def row_fifo_depth(sp) -> int:
    """FIFO depth in front of a sliding-window generator: it takes its input row by row,
    pausing while it emits the windows of a row, so the FIFO holds one input row
    (W·C/SIMD beats) so that the producer never waits for it."""
    h, w, c = sp.in_shape
    return w * c // sp.simd + FIFO_MARGIN


def beats_per_pixel(t: QTensor, per_beat: int) -> int:
    """Beats of one pixel (a vector: one beat per ``per_beat`` elements) on a stream."""
    channels = t.shape[0] if len(t.shape) in (2, 3) else t.size
    return max(1, channels // per_beat)


def _size_join_fifos(dfg: DataflowGraph,
                     joins: list[tuple[Block, list[Block], int, tuple[int, ...]]]):
    """Deadlock-free, full-rate depths for the FIFOs in front of each join.

    A join consumes its inputs in lockstep and a fork feeds its outputs in lockstep, so the
    branch whose data reaches the join first must hold every beat that arrives before the
    other branch's first beat: at most one per cycle of the difference of their first
    arrival times, which the blocks' timing models give. A margin of two pixels' beats covers
    bursts (a block emitting a pixel's channels back to back). The FIFOs of a join's
    ``hold_frame`` inputs hold a whole frame: the join reads them only once a vector derived
    from that very frame (squeeze-and-excitation) is complete, whatever the timing models say.
    """
    for _ in range(2 if joins else 0):  # a depth changes no FIFO's timing; a second pass
        times = dfg.stream_times()
        for _join, fifos, beats_per_pixel, hold_frame in joins:
            firsts = [times[f.inputs[0]][0] for f in fifos]
            latest = max(firsts)
            for k, (f, first) in enumerate(zip(fifos, firsts)):
                depth = latest - first + 2 * beats_per_pixel + FIFO_MARGIN
                if k in hold_frame:
                    depth = max(depth, dfg.streams[f.inputs[0]].beats + FIFO_MARGIN)
                f.params = dataclasses.replace(f.params, depth=depth)
