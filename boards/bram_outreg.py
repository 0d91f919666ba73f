"""ECP5 block RAM read registers moved into the DP16KD tiles, on Yosys's JSON netlist.

A DP16KD's read data leaves the tile 5.8 ns after the clock when the tile does not register
it (``REGMODE NOREG``, what ``synth_ecp5`` always writes), which leaves about 2 ns of an 8 ns
period for the route to the first flip-flop. hwgen registers every block RAM read once more
in the fabric, a flip-flop that does nothing else (a FIFO's ``ram_q``, a weight ROM's
``w0``, a line buffer's ``data4``), and the tile has that register of its own: its output
register (``REGMODE OUTREG``), from which the data leaves the tile early, and nextpnr times
the tile so. :func:`pack_bram_registers` moves the fabric registers into the tile.

A read port's outputs move when every used bit drives one flip-flop and nothing else: a
plain flip-flop (no clock enable, no reset, initial value 0) clocked by the port's clock, and
the port's output enable and reset are constants 1 and 0. In the 36-bit pseudo-dual-port mode
(``DATA_WIDTH_A`` 36) both halves of the output are the read port's and move together (the
tile has one read register setting there, written to both ``REGMODE`` parameters). The tile's
output register then holds what the flip-flop held, cycle by cycle: the move changes
placement and timing, never a value.
"""
from __future__ import annotations

from hwgen.boards.dsp_pack import cell_param, netlist_top, plain_ff

#: bumped when what the packing does changes (place-and-route cache entries are keyed on it)
VERSION = 1


def _int(value) -> int:
    text = str(value).strip()
    try:
        return int(text, 2) if set(text) <= {"0", "1"} and len(text) > 8 else int(text)
    except ValueError:
        return 0


def _tied(conn: dict, pin: str, value: str) -> bool:
    return conn.get(pin, [value]) in ([value], [int(value)])


def pack_bram_registers(netlist: dict) -> int:
    """Move the register after every DP16KD read port of ``netlist`` (Yosys JSON, flattened
    top) into the tile where it qualifies (see the module documentation); edits ``netlist`` in
    place and returns the number of read ports moved."""
    mod = netlist_top(netlist)
    cells: dict = mod["cells"]
    loads: dict[int, list[tuple[str, str]]] = {}
    for name, c in cells.items():
        dirs = c.get("port_directions", {})
        for port, bits in c["connections"].items():
            if dirs.get(port) == "output":
                continue
            for b in bits:
                if isinstance(b, int):
                    loads.setdefault(b, []).append((name, port))
    port_bits = {b for p in mod.get("ports", {}).values() for b in p["bits"] if isinstance(b, int)}

    def register(bit: int, clock):
        """The flip-flop that is ``bit``'s one load, if it qualifies."""
        users = loads.get(bit, [])
        if bit in port_bits or len(users) != 1 or users[0][1] != "DI":
            return None
        ff = cells[users[0][0]]
        conn = ff["connections"]
        if (not plain_ff(ff) or "LSR" in conn and conn["LSR"] not in (["0"], [0])
                or cell_param(ff, "REGSET", "RESET") != "RESET"
                or cell_param(ff, "GSR", "DISABLED") != "DISABLED" or conn["CLK"] != [clock]):
            return None
        return users[0][0]

    moved = 0
    for name in sorted(n for n, c in cells.items() if c.get("type") == "DP16KD"):
        tile = cells[name]
        conn, params = tile["connections"], tile.setdefault("parameters", {})
        if any(cell_param(tile, f"REGMODE_{s}", "NOREG") != "NOREG" for s in "AB"):
            continue
        pdp = _int(params.get("DATA_WIDTH_A", 18)) == 36
        ports = [("B", ("DOA", "DOB"))] if pdp else [("A", ("DOA",)), ("B", ("DOB",))]
        for side, prefixes in ports:
            clock = conn.get(f"CLK{side}", ["0"])[0]
            if (not isinstance(clock, int) or cell_param(tile, f"CLK{side}MUX", f"CLK{side}")
                    != f"CLK{side}" or not _tied(conn, f"OCE{side}", "1")
                    or not _tied(conn, f"RST{side}", "0")
                    or (pdp and not _tied(conn, "RSTA", "0"))):
                continue
            pins = sorted(p for p in conn if p.startswith(prefixes) and p[3:].isdigit()
                          and isinstance(conn[p][0], int) and loads.get(conn[p][0]))
            ffs = {p: register(conn[p][0], clock) for p in pins}
            if not ffs or None in ffs.values():
                continue
            for pin, ff in ffs.items():
                q = cells[ff]["connections"]["Q"][0]
                loads.pop(conn[pin][0], None)
                conn[pin] = [q]
                del cells[ff]
            for s in ("AB" if pdp else side):
                params[f"REGMODE_{s}"] = "OUTREG"
            moved += 1
    return moved
