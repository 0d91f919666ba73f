"""Device-aware folding: every layer's PE/SIMD chosen for the shortest interval (cycles per
frame of the bottleneck) that fits a device's budget, with no layer faster than that interval
needs.

The search (:func:`fold_for_device`):

1. Each op's fold space (``op.fold_space``: its legal PE and SIMD and cycles per frame) gives
   the candidate intervals: every cycles-per-frame value any op can take, from the slowest
   op's fastest folding up.
2. For a candidate interval ``T`` each op takes its cheapest folding meeting ``T`` among the
   *least parallel* ones: foldings meeting ``T`` with no other folding of smaller or equal
   PE and SIMD that also meets it (so no op is faster than ``T`` needs: balance). Cheapest is
   the sum over the resource kinds (logic cells, flip-flops, DSP tiles, block RAM tiles) of
   its use divided by the budget's limit of that kind. An op's use at a folding is the
   resource model (:meth:`rtl_templates.cost.Cost.resources` of the device's family) of the
   blocks it lowers to on its own (:func:`dataflow.lower.lower_op`: its compute blocks and
   input FIFOs), computed once per folding and cached.
3. When the DSP tiles are over the budget, products move into logic cells
   (:func:`boards.lut_lanes.spill`: the fewest that bring the tiles within it); when the
   block RAM tiles are, weight ROMs move into logic cells (:func:`boards.rom_logic.spill`:
   those freeing most tiles per logic cell first). The ops' uses are summed and checked
   against the budget (a fraction of each kind of the device:
   :meth:`devices.Device.limits`). Feasibility mostly grows with ``T``: a binary
   search over the candidates finds a feasible one, and the candidates below it are then
   tried downwards until :data:`SCAN_MISSES` in a row do not fit (an op's cheapest folding
   may trade one kind of resource for another from one candidate to the next, so a shorter
   interval can fit where a longer one does not).
4. The whole graph is lowered at that folding (plumbing, forks, width converters and join
   FIFOs included) and checked again; if the plumbing tips it over, the next candidate is
   taken.

A model that fits no folding of a pipeline but whose layers are a chain the layer-sequential
engine runs (``rtl_templates/seq_engine.py``: convolutions, depthwise and pointwise, global
average pooling, fully connected) is put on that engine when the engine fits: one
multiply–accumulate datapath running the layers one after another, its feature maps and
weights in SPRAM on the UltraPlus (:func:`_engine`; the fit report's method says so).

On a device with SPRAM (iCE40 UltraPlus), when the ops' block RAM tiles exceed their limit
at a candidate, the weight memories that free the most block RAM tiles move into SPRAM, one
by one, while the SPRAM tiles stay within their limit (:meth:`FoldSearch.move_to_spram`; the
design then loads them after reset, ``rtl_templates/spram.py``).

A model that does not fit at the slowest candidate (every op at its cheapest folding) is
refused (:class:`DoesNotFit`) naming the resource, what it needs, what the budget allows and
the op that takes most of it.

The interval bound of a device is the model's multiply–accumulates per frame divided by the
multipliers the device offers (:attr:`devices.Device.multiplier_lanes`; products built of
logic cells can take a design below it); the floor is the fastest any folding reaches (the
slowest op at its most parallel folding).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from hwgen.boards.boards import AUTO_BOARD, BOARDS, Board, board_by_name
from hwgen.boards.devices import DEVICES, SPRAM, Device, by_name, check_memory
from hwgen.boards.lut_lanes import spill
from hwgen.boards.rom_logic import spill as spill_roms
from hwgen.dataflow.intgraph import IntGraph
from hwgen.dataflow.lower import (
    DataflowGraph,
    Folding,
    lower,
    lower_op,
    op_lanes,
    op_macs,
)
from hwgen.errors import HwgenError
from hwgen.rtl_templates.resources import Resources, add_muls, total

#: the share of each resource kind a design may take unless told (``--budget``)
DEFAULT_BUDGET = 0.85
#: infeasible candidates in a row that end the search below the binary search's answer
SCAN_MISSES = 8


#: where the device search may build products of logic cells once the DSP tiles are spent:
#: never ("dsp"), for targets down to the device's bound ("bound", the default: the bound
#: itself is the shortest target, the model's MACs ÷ the DSP lanes), or as far as the logic
#: allows ("all")
LOGIC_LANES = ("dsp", "bound", "all")


@dataclass(frozen=True)
class Target:
    """What to fold for: a device (on a board, or bare) and the share of it to fill;
    ``logic_lanes``: where products may be built of logic cells beyond the DSP tiles (one of
    :data:`LOGIC_LANES`; True is "all", False "dsp", None the default "bound")."""
    device: Device
    board: Board | None = None
    budget: float = DEFAULT_BUDGET
    logic_lanes: str = "bound"

    def __post_init__(self):
        mode = {True: "all", False: "dsp", None: "bound"}.get(self.logic_lanes,
                                                              self.logic_lanes)
        if mode not in LOGIC_LANES:
            raise HwgenError(f"logic lanes must be one of {', '.join(LOGIC_LANES)} "
                             f"(got {self.logic_lanes!r})")
        object.__setattr__(self, "logic_lanes", mode)

    @property
    def label(self) -> str:
        return self.board.id if self.board else self.device.id

    def describe(self) -> str:
        on = f"{self.board.id} ({self.device.id})" if self.board else self.device.id
        return f"{on} at {_pct(self.budget)} budget"


@dataclass(frozen=True)
class AutoBoard:
    """``--board auto``: the smallest listed board the model fits at ``budget``, chosen once
    the model is read (:func:`fold_auto`); ``uart``: only boards with a USB-serial UART
    (what ``hwgen build`` needs)."""
    budget: float = DEFAULT_BUDGET
    logic_lanes: str | bool | None = None
    uart: bool = False

    def boards(self) -> list[Board]:
        """The candidate boards, smallest device first (logic cells, then DSP and block RAM
        tiles; boards of one device in the table's order)."""
        cands = [b for b in BOARDS if b.uart or not self.uart]
        return sorted(cands, key=lambda b: (b.device.luts, b.device.multipliers,
                                            b.device.bram_blocks))

    def target(self, board: Board) -> Target:
        return Target(board.device, board, self.budget, self.logic_lanes)


def fold_auto(auto: AutoBoard, fold_on) -> tuple:
    """``fold_on(target, graph)`` (→ (dataflow graph, :class:`FitReport`); ``graph`` false:
    the graph may be None where the model does not fit, :func:`fold_for_device`) on each of
    ``auto``'s boards, smallest first, until the model fits one: that board's result, its
    report's :attr:`FitReport.choice` saying which and why (and how much faster the largest
    board would be). Where it fits none, the largest board's result (or its refusal). A
    board whose device an earlier board carries is not tried again (it folds the same)."""
    boards = auto.boards()
    got = None
    tried = set()
    for b in boards[:-1]:
        if b.device_id in tried:
            continue
        tried.add(b.device_id)
        try:
            got = fold_on(auto.target(b), False)
        except HwgenError:
            continue
        if got[1].fits:
            break
    else:
        dfg, fit = fold_on(auto.target(boards[-1]), True)
        fit.choice = ("auto: the largest board; the model fits none" if not fit.fits else
                      "auto: the smallest board that fits")
        return dfg, fit
    dfg, fit = got
    big = boards[-1]
    try:
        _, top = fold_on(auto.target(big), False)
    except HwgenError:
        top = None
    more = ""
    if top is not None and top.fits and top.interval and fit.interval > top.interval:
        more = f"; {big.id} would take {fit.interval / top.interval:.3g}x fewer cycles per frame"
    fit.choice = f"auto: the smallest board that fits{more}"
    return dfg, fit


def _pct(x: float) -> str:
    return f"{100 * x:g} %"


def resolve_target(board: str | None = None, device: str | None = None,
                   budget: float | None = None, logic_lanes: str | bool | None = None,
                   uart: bool = False) -> Target | AutoBoard:
    """The target of ``--board``/``--device``/``--budget``/``--logic-lanes``/``--dsp-only``:
    an :class:`AutoBoard` for ``--board auto`` and without either (the default: the smallest
    board the model fits); ``uart``: auto chooses among boards with a USB-serial UART."""
    if budget is None:
        budget = DEFAULT_BUDGET
    if not (isinstance(budget, (int, float)) and 0 < budget <= 1):
        raise HwgenError(f"--budget must be a fraction in (0, 1] (got {budget})")
    if (board is None and device is None) or (
            board is not None and board.strip().lower() == AUTO_BOARD):
        if device:
            raise HwgenError("--board auto chooses a board: give it or --device, not both")
        Target(DEVICES[0], None, float(budget), logic_lanes)   # checks logic_lanes
        return AutoBoard(float(budget), logic_lanes, uart)
    b = board_by_name(board) if board else None
    d = by_name(device) if device else None
    if b and d and d.id != b.device_id:
        raise HwgenError(f"--board {b.id} carries {b.device_id}, not --device {d.id} "
                         f"(give one of them)")
    return Target(d or b.device, b, float(budget), logic_lanes)


@dataclass
class OpUse:
    """One op at one folding: its blocks' cycles (the slowest), resources and products."""
    cycles: int
    res: Resources
    soft: int                        # logic cells of products a DSP-less device builds
    use: dict[str, int]              # the device's resource kinds
    multiplies: dict = field(default_factory=dict)
    memory_bits: int = 0
    loads: bool = False              # its weights are loaded after reset (SPRAM)


@dataclass
class FitReport:
    """How a design at a folding sits on a target: the manifest's ``target``."""
    target: Target
    method: str                      # "device search" | "target cycles N" | "fold file"
    interval: int                    # cycles per frame of the bottleneck
    bottleneck: str | None
    use: dict[str, int]
    limit: dict[str, int]
    capacity: dict[str, int]
    macs: int
    floor: int                       # the fastest interval any folding reaches
    candidates: int = 0              # intervals the search evaluated
    largest: dict[str, str] = field(default_factory=dict)   # kind → op taking most of it
    #: op → (multiply–accumulates per frame, multiplier lanes at its folding)
    layer_macs: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: the layers share these multiplier lanes (the layer-sequential engine's), 0: each layer
    #: has its own
    shared_lanes: int = 0
    #: why this board (``--board auto``: :func:`fold_auto`), else ""
    choice: str = ""

    @property
    def lanes(self) -> int:
        """The dot-product multipliers of the design."""
        return self.shared_lanes or sum(n for _, n in self.layer_macs.values())

    @property
    def device(self) -> Device:
        return self.target.device

    @property
    def bound(self) -> int | None:
        """The model's MACs ÷ the device's multiplier lanes (None: no hard multipliers)."""
        lanes = self.device.multiplier_lanes
        return math.ceil(self.macs / lanes) if lanes and self.macs else None

    @property
    def mac_utilisation(self) -> float | None:
        """Busy multiplier-cycles ÷ (the layers' multiplier lanes × the interval): the share
        of the cycles the dot-product multipliers work (None: no layer multiplies)."""
        lanes = self.lanes
        if not lanes or not self.interval:
            return None
        return sum(m for m, _ in self.layer_macs.values()) / (lanes * self.interval)

    def layer_utilisation(self) -> dict[str, float]:
        """Each multiplying layer's MAC utilisation at the design's interval (on shared
        lanes: the share of the interval the layer keeps them busy)."""
        return {n: m / (k * self.interval) for n, (m, k) in self.layer_macs.items()
                if k and self.interval}

    @property
    def over(self) -> list[str]:
        return [k for k in self.device.kinds if self.use[k] > self.limit[k]]

    @property
    def fits(self) -> bool:
        return not self.over

    def shortfalls(self) -> list[str]:
        return [f"{self.use[k]:,} {k} > {self.limit[k]:,} ({_pct(self.target.budget)} of "
                f"{self.capacity[k]:,})" for k in self.over]

    def use_text(self, kind: str) -> str:
        """``used/device kind (share of the budget)``, e.g. "132/156 DSP tiles (100 % of the
        85 % budget)"."""
        use, cap, lim = self.use[kind], self.capacity[kind], self.limit[kind]
        if not cap:
            return f"{use:,}/0 {kind}"
        share = f"{100 * use / lim:.0f} %" if lim else "over"
        return f"{use:,}/{cap:,} {kind} ({share} of the {_pct(self.target.budget)} budget)"

    def summary(self) -> str:
        """One line: the target, the interval and its bound, the use of each kind."""
        bound = f"bound {self.bound:,}" if self.bound else "no hard multipliers"
        use = ", ".join(self.use_text(k) for k in self.device.kinds)
        fit = "fits" if self.fits else "DOES NOT FIT (" + "; ".join(self.shortfalls()) + ")"
        return (f"{self.target.describe()}: interval {self.interval:,} cycles ({bound}, "
                f"floor {self.floor:,}), {fit}: {use}")

    def as_dict(self) -> dict:
        t = self.target
        d = self.device
        return {
            "board": t.board.as_dict() if t.board else None,
            "device": {"id": d.id, "name": d.name, "part": d.part, "family": d.family},
            "budget": t.budget,
            "folding": self.method,
            "interval_cycles": self.interval,
            "bottleneck": self.bottleneck,
            "interval_bound_cycles": self.bound,
            "interval_floor_cycles": self.floor,
            "macs_per_frame": self.macs,
            "multiplier_lanes": d.multiplier_lanes,
            "mac_utilisation": _round(self.mac_utilisation),
            "shared_multiplier_lanes": self.shared_lanes or None,
            "layers": [{"name": n, "macs_per_frame": m, "multiplier_lanes": k,
                        "mac_utilisation": _round(m / (k * self.interval))
                        if k and self.interval else None}
                       for n, (m, k) in self.layer_macs.items()],
            "use": dict(self.use), "limit": dict(self.limit), "capacity": dict(self.capacity),
            "fits": self.fits, "shortfalls": self.shortfalls(),
            "clock_mhz": t.board.clock_mhz if t.board else d.clock_mhz,
        } | ({"board_choice": self.choice} if self.choice else {})


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


class DoesNotFit(HwgenError):
    """The model cannot fit the target at any folding."""


@dataclass
class SearchMemo:
    """What device searches of one integer graph (with one ``partial``/``sources``) share
    across targets; none of it depends on the device, and a block computes its cost once:
    the blocks each op lowers to at each folding (``blocks``), each op's fold space
    (``spaces``), each target's result (``results``, :func:`fold_for_device`), and the graph
    at the folding of callers that fold independently of the device (``lowered``)."""
    blocks: dict = field(default_factory=dict)
    spaces: dict = field(default_factory=dict)
    results: dict = field(default_factory=dict)
    lowered: DataflowGraph | None = None


class FoldSearch:
    """The per-op costs of ``ig``'s ops on ``target`` (cached per folding) and the search.

    ``skip``: ops left at Folding() and not priced (an op that cannot be lowered).
    ``memo``: the ops' fold spaces and lowered blocks per folding, shared with searches of
    ``ig`` for other targets (:class:`SearchMemo`)."""

    def __init__(self, ig: IntGraph, target: Target, memo: SearchMemo | None = None):
        self.ig, self.target = ig, target
        self.memo = memo = SearchMemo() if memo is None else memo
        self._blocks = memo.blocks
        self.device = target.device
        self.limit = self.device.limits(target.budget)
        self.ops = []
        self.space = {}
        self.skip: set[str] = set()
        self._cache: dict[tuple[str, int, int], OpUse | None] = {}
        for op in ig.ops:
            if op.name not in memo.spaces:
                sp = op.fold_space(ig)
                opts = sorted(((pe, simd) for pe in sp.pe for simd in sp.simd),
                              key=lambda o: (o[0] * o[1], o[0]))
                memo.spaces[op.name] = [(o, int(sp.cycles(*o))) for o in opts]
            self.space[op.name] = memo.spaces[op.name]
            self.ops.append(op)
        self.macs = sum(op_macs(ig, op) for op in ig.ops)
        lanes = self.device.multiplier_lanes
        #: the device's bound (MACs ÷ DSP lanes), None without hard multipliers
        self.bound = math.ceil(self.macs / lanes) if lanes and self.macs else None

    # ----------------------------------------------------------------- per op, per folding
    def op_use(self, op, o: tuple[int, ...], spram: bool = False,
               rom_logic: bool = False) -> OpUse | None:
        """``op`` at PE, SIMD (and ``lut_lanes``) ``o`` with its weights in SPRAM or logic:
        None if it cannot be lowered so."""
        f = Folding(*o, spram=spram, rom_logic=rom_logic)
        key = (op.name, f.pe, f.simd, f.lut_lanes, spram, rom_logic)
        if key not in self._cache:
            if key not in self._blocks:
                try:
                    self._blocks[key] = lower_op(self.ig, op, f)
                except (HwgenError, ValueError):
                    self._blocks[key] = None
            blocks = self._blocks[key]
            if blocks is None:
                self._cache[key] = None
            else:
                fam = self.device.family
                costs = [b.cost for b in blocks]
                res = total(c.resources(fam) for c in costs)
                muls = add_muls(*(c.multiplies for c in costs))
                soft = self.device.soft_multiplier_cells(muls)
                self._cache[key] = OpUse(max(c.cycles for c in costs), res, soft,
                                         self.device.usage(res, soft), muls,
                                         sum(c.memory_bits for c in costs),
                                         any(getattr(b.params, "spram", False)
                                             for b in blocks))
        return self._cache[key]

    def weight(self, u: OpUse) -> float:
        return sum(u.use[k] / self.limit[k] for k in self.device.kinds if self.limit[k] > 0)

    def choose_op(self, op, t: int) -> tuple[tuple[int, int], OpUse] | None:
        """The cheapest of the least parallel foldings of ``op`` meeting ``t`` cycles."""
        minimal: list[tuple[tuple[int, int], OpUse]] = []
        for o, cyc in self.space[op.name]:
            if cyc > t or any(m[0] <= o[0] and m[1] <= o[1] for m, _ in minimal):
                continue
            u = self.op_use(op, o)
            if u is not None and u.cycles <= t:
                minimal.append((o, u))
        if not minimal:
            return None
        return min(minimal, key=lambda mu: (self.weight(mu[1]), mu[0][0] * mu[0][1], mu[0]))

    def choose(self, t: int) -> tuple[dict[str, Folding], dict[str, OpUse]] | None:
        fold, uses = {}, {}
        for op in self.ops:
            if op.name in self.skip:
                fold[op.name] = Folding()
                continue
            got = self.choose_op(op, t)
            if got is None:
                if self.op_use(op, (1, 1)) is None:     # cannot be lowered at all
                    self.skip.add(op.name)
                    fold[op.name] = Folding()
                    continue
                return None
            fold[op.name] = Folding(*got[0])
            uses[op.name] = got[1]
        if self.device.spram_blocks:
            self.move_to_spram(fold, uses)
        mode = self.target.logic_lanes
        if mode == "all" or (mode == "bound" and self.bound and t >= self.bound):
            fold, uses = spill(self, fold, uses)
        return spill_roms(self, fold, uses)

    def move_to_spram(self, fold: dict[str, Folding], uses: dict[str, OpUse]) -> None:
        """While block RAM is over its limit, move the weight memory that frees the most
        block RAM tiles into SPRAM (loaded after reset), as long as the SPRAM tiles stay
        within theirs (``fold`` and ``uses`` updated in place)."""
        bram = "block RAM tiles"
        if self.total_use(uses)[bram] <= self.limit[bram]:
            return
        moves = []
        for op in self.ops:
            if op.name not in uses:
                continue
            f = fold[op.name]
            u = self.op_use(op, (f.pe, f.simd), spram=True)
            if u is None or not u.loads:
                continue
            saved = uses[op.name].use[bram] - u.use[bram]
            if saved > 0:
                moves.append((-saved, u.use[SPRAM], op.name, u))
        for _, _, name, u in sorted(moves, key=lambda mv: mv[:3]):
            trial = dict(uses, **{name: u})
            use = self.total_use(trial)
            if use[SPRAM] > self.limit[SPRAM]:
                continue
            uses[name] = u
            fold[name] = Folding(fold[name].pe, fold[name].simd, spram=True)
            if use[bram] <= self.limit[bram]:
                return

    def total_use(self, uses: dict[str, OpUse]) -> dict[str, int]:
        res = total(u.res for u in uses.values())
        return self.device.usage(res, sum(u.soft for u in uses.values()))

    def fits(self, use: dict[str, int]) -> bool:
        return all(use[k] <= self.limit[k] for k in self.device.kinds)

    # --------------------------------------------------------------------------- search
    def candidates(self) -> list[int]:
        """The intervals to try: every op's cycle counts at or above the floor, and in the
        "bound" mode the bound itself (layers folded to meet it, their products in logic
        cells where the DSP tiles run out, land at or below it: with foldings in powers of two
        the next candidate above can be 1.5x the bound)."""
        floor = self.floor()
        cands = {c for op in self.ops for _, c in self.space[op.name] if c >= floor}
        if self.target.logic_lanes == "bound" and self.bound and self.bound >= floor:
            cands.add(self.bound)
        return sorted(cands)

    def floor(self) -> int:
        return max((min(c for _, c in self.space[op.name]) for op in self.ops), default=0)

    def largest(self, uses: dict[str, OpUse]) -> dict[str, str]:
        out = {}
        for k in self.device.kinds:
            top = max(uses.items(), key=lambda nu: (nu[1].use[k], nu[0]), default=None)
            if top is not None and top[1].use[k] > 0:
                out[k] = top[0]
        return out


def _dfg_use(dfg: DataflowGraph, device: Device) -> dict[str, int]:
    costs = [b.cost for b in dfg.blocks]
    res = total(c.resources(device.family) for c in costs)
    soft = device.soft_multiplier_cells(add_muls(*(c.multiplies for c in costs)))
    return device.usage(res, soft)


def _layer_use(dfg: DataflowGraph, device: Device) -> dict[str, dict[str, int]]:
    out = {}
    for name in dict.fromkeys(b.layer or "(plumbing)" for b in dfg.blocks):
        blocks = [b for b in dfg.blocks if (b.layer or "(plumbing)") == name]
        res = total(b.cost.resources(device.family) for b in blocks)
        soft = device.soft_multiplier_cells(add_muls(*(b.cost.multiplies for b in blocks)))
        out[name] = device.usage(res, soft)
    return out


def report(dfg: DataflowGraph, ig: IntGraph, target: Target, method: str,
           candidates: int = 0, memo: SearchMemo | None = None) -> FitReport:
    """The fit of the lowered ``dfg`` on ``target`` (``memo``: what it shares with other
    reports and searches of ``ig``, :class:`SearchMemo`)."""
    search = FoldSearch(ig, target, memo)
    est = dfg.estimate()
    layers = _layer_use(dfg, target.device)
    largest = {}
    for k in target.device.kinds:
        top = max(layers.items(), key=lambda nu: (nu[1][k], nu[0]), default=None)
        if top is not None and top[1][k] > 0:
            largest[k] = top[0]
    shared = 1 if any(f.sequential for f in dfg.folding.values()) else 0
    layer_macs = {op.name: (op_macs(ig, op), shared or op_lanes(op, dfg.folding[op.name]))
                  for op in ig.ops if op.name in dfg.folding and op.name not in dfg.op_errors
                  and op_macs(ig, op)}
    return FitReport(target, method, int(est["cycles_per_frame"]), est["bottleneck"],
                     _dfg_use(dfg, target.device), dict(search.limit),
                     target.device.capacity(), search.macs, search.floor(), candidates,
                     largest, layer_macs, shared)


def fold_for_device(ig: IntGraph, target: Target, *, partial: bool = False,
                    sources: dict[str, str] | None = None, refuse: bool = True,
                    what: str = "model", memo: SearchMemo | None = None,
                    graph: bool = True
                    ) -> tuple[dict[str, Folding], DataflowGraph | None, FitReport]:
    """The folding of every op of ``ig`` for ``target`` (see the module documentation), the
    graph lowered at it (``partial``/``sources`` as :func:`dataflow.lower.lower`) and its
    report. A model that fits at no folding raises :class:`DoesNotFit` (``refuse``), or is
    returned at its cheapest folding. ``memo``: what searches of ``ig`` (with the same
    ``partial`` and ``sources``) for other targets share (:class:`SearchMemo`); a device
    searched before at the same budget and logic lanes gives its result again.

    Without ``graph`` (for a caller that needs only the report where the model does not
    fit), a model whose layers alone exceed the budget at their cheapest folding comes
    back with no graph and the report of its layers (:func:`_layers_report`), the whole
    graph never lowered."""
    memo = SearchMemo() if memo is None else memo
    key = (target.device.id, target.budget, target.logic_lanes, partial, refuse)
    if key not in memo.results:
        memo.results[key] = _fold_for_device(ig, target, partial, sources, refuse, what, memo,
                                             graph)
    fold, dfg, fit = memo.results[key]
    if dfg is None and graph:
        dfg = lower(ig, fold, partial=partial, sources=sources)
        fit = report(dfg, ig, target, fit.method, fit.candidates, memo)
        memo.results[key] = fold, dfg, fit
    return fold, dfg, dataclasses.replace(fit, target=target, choice="")


def _layers_report(s: FoldSearch, fold: dict[str, Folding], uses: dict[str, OpUse],
                   candidates: int) -> FitReport:
    """The fit of ``s``'s ops alone at ``fold`` (``uses``: each op's), without the FIFOs,
    forks and width converters between them: what a model that does not fit even so uses
    at least."""
    ig, t = s.ig, s.target
    slowest = max(uses.items(), key=lambda nu: (nu[1].cycles, nu[0]), default=None)
    layer_macs = {op.name: (op_macs(ig, op), op_lanes(op, fold[op.name])) for op in ig.ops
                  if op.name in uses and op_macs(ig, op)}
    return FitReport(t, "device search", slowest[1].cycles if slowest else 0,
                     slowest[0] if slowest else None, s.total_use(uses), dict(s.limit),
                     t.device.capacity(), s.macs, s.floor(), candidates, s.largest(uses),
                     layer_macs)


def _fold_for_device(ig, target, partial, sources, refuse, what, memo: SearchMemo,
                     graph: bool = True):
    s = FoldSearch(ig, target, memo)
    cands = s.candidates()
    evaluated = 0

    def feasible(t):
        nonlocal evaluated
        evaluated += 1
        got = s.choose(t)
        return got is not None and s.fits(s.total_use(got[1])), got

    if not cands:       # no ops
        dfg = lower(ig, {}, partial=partial, sources=sources)
        return {}, dfg, report(dfg, ig, target, "device search", 0, memo)
    ok, got = feasible(cands[-1])
    if not ok:
        if got is None:
            raise HwgenError(f"{what}: no folding of its layers lowers")
        engine = None if sources else _engine(ig, s, sum(u.memory_bits
                                                          for u in got[1].values()))
        if engine is not None:
            fold, dfg = engine
            return fold, dfg, report(dfg, ig, target, ENGINE_METHOD, evaluated, memo)
        if refuse:
            # more memory than any device holds: say so first
            check_memory(sum(u.memory_bits for u in got[1].values()), f"{what}: model")
            raise _refusal(s, got[1], s.total_use(got[1]), target, what)
        fold = got[0]
        if not graph:
            return fold, None, _layers_report(s, fold, got[1], evaluated)
        dfg = lower(ig, fold, partial=partial, sources=sources)
        return fold, dfg, report(dfg, ig, target, "device search", evaluated, memo)
    lo, hi = 0, len(cands) - 1          # cands[hi] is feasible
    while lo < hi:
        mid = (lo + hi) // 2
        if feasible(cands[mid])[0]:
            hi = mid
        else:
            lo = mid + 1
    # feasibility is not monotone in the interval (each op's cheapest folding changes kind
    # of resource from one candidate to the next): shorter candidates may fit after all,
    # tried downwards until SCAN_MISSES in a row do not
    misses, k = 0, hi - 1
    while k >= 0 and misses < SCAN_MISSES:
        if feasible(cands[k])[0]:
            hi, misses = k, 0
        else:
            misses += 1
        k -= 1
    # the whole graph, plumbing included; a step slower while the plumbing tips it over
    best = None
    for k in range(hi, len(cands)):
        ok, got = feasible(cands[k])
        if not ok:
            continue
        fold = got[0]
        dfg = lower(ig, fold, partial=partial, sources=sources)
        use = _dfg_use(dfg, target.device)
        if s.fits(use):
            return fold, dfg, report(dfg, ig, target, "device search", evaluated, memo)
        over = max(use[k] / max(s.limit[k], 1) for k in s.device.kinds)
        if best is None or over < best[0]:
            best = (over, fold, dfg, use)
    _, fold, dfg, use = best
    if refuse:
        raise _refusal(s, None, use, target, what, _layer_use(dfg, target.device),
                       "at any folding (the FIFOs between its layers included)")
    return fold, dfg, report(dfg, ig, target, "device search", evaluated, memo)


#: the fit report's method when the layer-sequential engine holds the model
ENGINE_METHOD = "layer-sequential engine (no folding of a pipeline fits)"


def _engine(ig: IntGraph, s: FoldSearch, memory_bits: int
            ) -> tuple[dict[str, Folding], DataflowGraph] | None:
    """The model on the layer-sequential engine (``rtl_templates/seq_engine.py``; weights and
    feature maps in SPRAM where the device has it), if the engine runs it and it fits; None
    otherwise. ``memory_bits``: the slowest pipeline's, weights included; a model whose
    memory is beyond all the device's RAM is not tried (the engine holds the weights too)."""
    if memory_bits > s.device.memory_bits:
        return None
    spram = bool(s.device.spram_blocks)
    fold = {op.name: Folding(sequential=True, spram=spram) for op in ig.ops}
    try:
        dfg = lower(ig, fold)
    except (HwgenError, ValueError):
        return None
    return (fold, dfg) if s.fits(_dfg_use(dfg, s.device)) else None


def _refusal(s: FoldSearch, uses: dict[str, OpUse] | None, use: dict[str, int],
             target: Target, what: str, layers: dict[str, dict[str, int]] | None = None,
             how: str = "even fully folded") -> DoesNotFit:
    kind = next(k for k in s.device.kinds if use[k] > s.limit[k])
    if layers is None:
        layers = {n: u.use for n, u in (uses or {}).items()}
    top, top_use = max(layers.items(), key=lambda nu: (nu[1][kind], nu[0]))
    top = ("the FIFOs, forks and width converters between layers take" if top == "(plumbing)"
           else f"layer {top} alone takes")
    cap = s.device.capacity()[kind]
    others = [f"{use[k]:,} {k} (of {s.limit[k]:,})" for k in s.device.kinds
              if k != kind and use[k] > s.limit[k]]
    also = f"; also {', '.join(others)}" if others else ""
    return DoesNotFit(
        f"{what} does not fit {target.label} ({s.device.name}) {how}: it needs "
        f"{use[kind]:,} {kind}, the device has {cap:,} ({s.limit[kind]:,} at the "
        f"{_pct(target.budget)} budget){also}; {top} {top_use[kind]:,} {kind} "
        f"(use a larger --board/--device, --budget, or --target-cycles/--fold to compile "
        f"anyway)")
