"""Multiplier lanes beyond the DSP tiles: a folding's products moved into logic cells.

A device's DSP tiles bound how many products a design makes per cycle; its logic cells can
make more (:mod:`rtl_templates.lutmul`, a matrix unit's ``lut_lanes``). The device search
(:mod:`boards.fold`) chooses each op's PE and SIMD for a candidate interval as if every
product took a tile; when the DSP tiles are then over the budget, :func:`spill` moves as
many products as the excess needs into logic, from the ops with the most products in tiles
first (each op's last products: :class:`dataflow.lower.Folding` ``lut_lanes``). Whether the
logic cells and flip-flops then fit is the search's usual check, so the interval the search
finds may lie below the device bound (the model's MACs ÷ the DSP tiles' lanes).
"""
from __future__ import annotations

import dataclasses
import math

from hwgen.dataflow.lower import Folding, op_lanes

DSP = "DSP tiles"


def spill(search, fold: dict[str, Folding], uses: dict) -> tuple[dict[str, Folding], dict]:
    """``fold`` and ``uses`` (an op's :class:`~boards.fold.OpUse` at its folding) with the
    fewest products moved into logic that bring the DSP tiles within ``search.limit``
    (``search``: a :class:`~boards.fold.FoldSearch`); unchanged when they are within it or
    no op can take products in logic."""
    excess = search.total_use(uses)[DSP] - search.limit[DSP]
    if excess <= 0:
        return fold, uses
    fold, uses = dict(fold), dict(uses)

    def hard(op):
        f = fold[op.name]
        return op_lanes(op, f) - f.lut_lanes

    ops = [op for op in search.ops if op.name in uses and op_lanes(op, fold[op.name])]
    for op in sorted(ops, key=lambda op: (-hard(op), op.name)):
        if excess <= 0:
            break
        f, u0 = fold[op.name], uses[op.name]
        n = op_lanes(op, f)
        if hard(op) <= 0:
            continue
        u_all = search.op_use(op, (f.pe, f.simd, n), spram=f.spram, rom_logic=f.rom_logic)
        if u_all is None or u_all.cycles != u0.cycles:
            continue                            # no matrix unit of multipliers
        saved = u0.use[DSP] - u_all.use[DSP]
        if saved <= 0:
            continue
        k = min(hard(op), math.ceil(excess * hard(op) / saved))
        u = u_all if f.lut_lanes + k == n else search.op_use(
            op, (f.pe, f.simd, f.lut_lanes + k), spram=f.spram, rom_logic=f.rom_logic)
        if u is None:
            continue
        excess -= u0.use[DSP] - u.use[DSP]
        fold[op.name] = dataclasses.replace(f, lut_lanes=f.lut_lanes + k)
        uses[op.name] = u
    return fold, uses
