"""ECP5 flip-flops of a constant input, one copy per load, on Yosys's JSON netlist.

A register whose input is a constant but whose initial value is not (a pipeline register
that carries a bit every word or every product has the same: the sign bits of a lane in
logic by a constant negative digit, a parameter bit equal in every fold) is not a constant
to Yosys: it holds its initial value for one cycle. ``opt_merge`` then merges every such
register of the design into one flip-flop, whose output reaches hundreds of loads all over
the die (the digits CNN with products in logic: one flip-flop, 616 loads, its route the
design's critical path at 10.7 ns). :func:`split_constant_flops` gives each load cell a copy
of its own, before place and route. The copies have the same inputs (the constant, the
clock, no enable, no reset or a constant one) as the flip-flop, so every copy holds what it
held, cycle by cycle: the split changes placement and timing, never a value.
"""
from __future__ import annotations

from hwgen.boards.dsp_pack import netlist_top

#: bumped when what the split does changes (place-and-route cache entries are keyed on it)
VERSION = 1


def _constant_input_ff(cell: dict) -> bool:
    """A TRELLIS_FF whose every input but the clock is a constant."""
    if cell.get("type") != "TRELLIS_FF":
        return False
    conn = cell["connections"]
    return all(all(not isinstance(b, int) for b in conn.get(p, ())) for p in ("DI", "CE", "LSR",
                                                                            "M"))


def split_constant_flops(netlist: dict) -> int:
    """Give every load cell of a flip-flop with constant inputs (see the module
    documentation) a copy of its own; edits ``netlist`` in place and returns the copies
    added. A flip-flop that drives a port of the top keeps those loads."""
    mod = netlist_top(netlist)
    cells: dict = mod["cells"]
    sources = {c["connections"]["Q"][0]: name for name, c in cells.items()
               if _constant_input_ff(c) and isinstance(c["connections"].get("Q", [None])[0], int)}
    if not sources:
        return 0
    # the load cells of each such flip-flop's output, in the netlist's order
    loads: dict[int, dict[str, list[tuple[str, int]]]] = {}
    top_bit = 0
    for name, c in cells.items():
        dirs = c.get("port_directions", {})
        for port, bits in c["connections"].items():
            for i, b in enumerate(bits):
                if isinstance(b, int):
                    top_bit = max(top_bit, b)
                    if b in sources and dirs.get(port) != "output":
                        loads.setdefault(b, {}).setdefault(name, []).append((port, i))
    for p in mod.get("ports", {}).values():
        top_bit = max([top_bit, *(b for b in p["bits"] if isinstance(b, int))])
    added = 0
    for bit in sorted(loads):
        by_cell = loads[bit]
        if len(by_cell) < 2:
            continue
        src = sources[bit]
        for k, (load, pins) in enumerate(by_cell.items()):
            if k == 0:
                continue    # the flip-flop itself keeps its first load cell (and any port)
            top_bit += 1
            copy = {**cells[src], "connections": {**cells[src]["connections"], "Q": [top_bit]}}
            cells[f"{src}$split{k}"] = copy
            conn = cells[load]["connections"]
            for port, i in pins:
                conn[port] = [top_bit if j == i else b for j, b in enumerate(conn[port])]
            added += 1
    return added
