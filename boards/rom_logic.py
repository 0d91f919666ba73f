"""Weight memories beyond the block RAM: a folding's weight ROMs moved into logic cells.

A matrix or vector unit keeps its weights in a ROM that Yosys maps by its own cost, to block
RAM for all but small ones. Where block RAM is the scarce resource and logic cells are not
(FINN's CNV-w2a2 on the ECP5-85F: 3.1 Mbit of 2-bit weights, fully folded 200 block RAM
tiles of the 176 the budget allows, 5,500 of 71,000 logic cells), a unit's weight ROM can be
built of LUTs instead (:class:`dataflow.lower.Folding` ``rom_logic``; about ``width · depth
/ 16`` LUT4 of the address space up to 128 words, 20 % more beyond: ``resources.rom_luts``).

The device search (:mod:`boards.fold`) chooses each op's PE and SIMD for a candidate interval;
when the block RAM tiles are then over the budget, :func:`spill` moves weight ROMs into logic,
those that free the most block RAM tiles per logic cell they add first, until the tiles fit,
skipping a ROM whose logic cells or flip-flops would not; then it gives back to block RAM
every moved ROM the tiles can take again (the dearest in logic first).
"""
from __future__ import annotations

import dataclasses

from hwgen.dataflow.lower import Folding

BRAM = "block RAM tiles"
LOGIC_KINDS = ("logic cells", "flip-flops")


def spill(search, fold: dict[str, Folding], uses: dict) -> tuple[dict[str, Folding], dict]:
    """``fold`` and ``uses`` (an op's :class:`~boards.fold.OpUse` at its folding) with weight
    ROMs moved into logic until the block RAM tiles are within ``search.limit`` (``search``: a
    :class:`~boards.fold.FoldSearch`); unchanged when they are within it already."""
    total = search.total_use(uses)
    limit = search.limit
    if total[BRAM] <= limit[BRAM]:
        return fold, uses
    moves = []
    for op in search.ops:
        f = fold.get(op.name)
        if op.name not in uses or f.spram or f.rom_logic:
            continue
        u = search.op_use(op, (f.pe, f.simd, f.lut_lanes), rom_logic=True)
        if u is None:
            continue                            # no weight memory of a unit
        saved = uses[op.name].use[BRAM] - u.use[BRAM]
        if saved <= 0:
            continue
        cells = max(1, u.use["logic cells"] - uses[op.name].use["logic cells"])
        moves.append((-saved / cells, op.name, u))
    if not moves:
        return fold, uses
    fold, uses = dict(fold), dict(uses)
    taken = []
    for _, name, u in sorted(moves, key=lambda mv: mv[:2]):
        trial = dict(uses, **{name: u})
        use = search.total_use(trial)
        if any(use[k] > limit[k] for k in LOGIC_KINDS if k in use):
            continue
        taken.append((name, uses[name]))
        uses[name] = u
        fold[name] = dataclasses.replace(fold[name], rom_logic=True)
        if use[BRAM] <= limit[BRAM]:
            break
    else:
        return fold, uses                       # over the block RAM even so
    for name, back in reversed(taken):          # the last taken add most logic per tile
        trial = dict(uses, **{name: back})
        if search.total_use(trial)[BRAM] <= limit[BRAM]:
            uses[name] = back
            fold[name] = dataclasses.replace(fold[name], rom_logic=False)
    return fold, uses
