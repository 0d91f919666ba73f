"""ECP5 multiplier registers moved into the MULT18X18D tiles, on Yosys's JSON netlist.

``synth_ecp5`` maps a product to a combinational MULT18X18D and leaves the registers around it
in the fabric, so every registered product pays the routing into and out of the tile inside
one clock period (about 2.5 ns each way on an LFE5U-85F, next to the tile's own 3.9 ns: ~105
MHz). The tile has input registers on A and B and an output register on P; nextpnr times a
tile that uses them as clocked. Yosys has no pass that puts registers there for ECP5 (iCE40's
``ice40_dsp`` does it for SB_MAC16), so :func:`pack_dsp_registers` does it on the netlist,
before place and route.

A group — the A inputs, the B inputs, or the P outputs of one tile — moves into the tile when
every one of its bits is a flip-flop of the same kind: no clock enable, the same clock, a
synchronous reset to 0 from the same net or none (the tile's registers reset to 0 through
one of its RST inputs; ``RESETMODE`` SYNC). An input bit may also be a constant 0 (a register
of 0 is 0). An input of constant bits only (a weight the same in every fold) is registered
too, without reset, when the tile's other input moves: it holds the constant from the first
clock edge on, and nextpnr times a tile with one input registered and the other not as
combinational from the registered one. An input register stays in the fabric when it has
other loads (the tile then holds a copy); an output bit moves only when the flip-flop is its
one load. Each tile's behaviour cycle by cycle is that of the flip-flops it took: the move
changes placement and timing, never a value.
"""
from __future__ import annotations

from dataclasses import dataclass

#: bumped when what the packing does changes (place-and-route cache entries are keyed on it)
VERSION = 2

A_PINS = tuple(f"A{i}" for i in range(18))
B_PINS = tuple(f"B{i}" for i in range(18))
P_PINS = tuple(f"P{i}" for i in range(36))


@dataclass(frozen=True)
class PackStats:
    tiles: int = 0              # MULT18X18D tiles in the netlist
    inputs: int = 0             # A or B groups moved into their tile
    outputs: int = 0            # P groups moved into their tile
    flipflops: int = 0          # fabric flip-flops removed (no load left)

    def as_dict(self) -> dict:
        return dict(tiles=self.tiles, inputs=self.inputs, outputs=self.outputs,
                    flipflops=self.flipflops)


def netlist_top(netlist: dict) -> dict:
    """The top module of a Yosys JSON netlist."""
    for mod in netlist.get("modules", {}).values():
        if str(mod.get("attributes", {}).get("top", "0")).strip("0 ") not in ("",):
            return mod
    raise ValueError("the netlist has no top module")


def cell_param(cell: dict, name: str, default: str = "") -> str:
    return str(cell.get("parameters", {}).get(name, default)).strip()


def plain_ff(cell: dict) -> bool:
    """A TRELLIS_FF without clock enable or inversion, whose reset (if any) is synchronous
    and to 0."""
    if cell.get("type") != "TRELLIS_FF":
        return False
    conn = cell["connections"]
    if cell_param(cell, "CLKMUX", "CLK") != "CLK" or cell_param(cell, "CEMUX", "1") != "1":
        return False
    if "CE" in conn and conn["CE"] not in (["1"], [1]):
        return False
    lsr = conn.get("LSR")
    if lsr and isinstance(lsr[0], int):
        if (cell_param(cell, "LSRMUX", "LSR") != "LSR"
                or cell_param(cell, "REGSET", "RESET") != "RESET"
                or cell_param(cell, "SRMODE", "LSR_OVER_CE") != "LSR_OVER_CE"):
            return False
    elif lsr not in (None, ["0"], [0]):
        return False
    return "DI" in conn and "Q" in conn and "CLK" in conn


def _reset_net(cell: dict):
    lsr = cell["connections"].get("LSR")
    return lsr[0] if lsr and isinstance(lsr[0], int) else None


def pack_dsp_registers(netlist: dict) -> PackStats:
    """Move the registers around every MULT18X18D of ``netlist`` (Yosys JSON, flattened top)
    into the tile where they qualify (see the module documentation); edits ``netlist`` in
    place and returns what moved."""
    mod = netlist_top(netlist)
    cells: dict = mod["cells"]
    drivers: dict[int, tuple[str, str]] = {}
    loads: dict[int, list[tuple[str, str]]] = {}
    for name, c in cells.items():
        dirs = c.get("port_directions", {})
        for port, bits in c["connections"].items():
            for b in bits:
                if not isinstance(b, int):
                    continue
                if dirs.get(port) == "output":
                    drivers[b] = (name, port)
                else:
                    loads.setdefault(b, []).append((name, port))
    port_bits = {b for p in mod.get("ports", {}).values() for b in p["bits"] if isinstance(b, int)}

    def ff_driving(bit):
        d = drivers.get(bit)
        if d is None or d[1] != "Q" or not plain_ff(cells[d[0]]):
            return None
        return d[0]

    tiles = inputs = outputs = 0
    removed: set[str] = set()
    moved: set[str] = set()       # input flip-flops with a load moved into a tile
    for name in sorted(n for n, c in cells.items() if c.get("type") == "MULT18X18D"):
        tile = cells[name]
        tiles += 1
        conn = tile["connections"]
        if any(cell_param(tile, f"REG_{g}_CLK", "NONE") != "NONE"
               for g in ("INPUTA", "INPUTB", "INPUTC", "PIPELINE", "OUTPUT")):
            continue
        plan = {}                               # group → (clock, reset, {pin: ff})
        constant = []                           # input groups of constant bits only
        for group, pins in (("INPUTA", A_PINS), ("INPUTB", B_PINS)):
            ffs, ok = {}, True
            for pin in pins:
                bits = conn.get(pin, ["0"])
                if bits in (["0"], [0], ["x"]):
                    continue
                ff = ff_driving(bits[0]) if isinstance(bits[0], int) else None
                if ff is None or ff in removed:
                    ok = False
                    break
                ffs[pin] = ff
            if ok and ffs:
                plan[group] = ffs
            elif all(not isinstance(conn.get(pin, ["0"])[0], int) for pin in pins):
                constant.append(group)
        ffs, ok = {}, True
        for pin in P_PINS:
            bits = conn.get(pin)
            if not bits or not isinstance(bits[0], int):
                continue
            users = loads.get(bits[0], [])
            if bits[0] in port_bits or len(users) > 1:
                ok = False
                break
            if not users:
                continue
            ff, port = users[0]
            if port != "DI" or not plain_ff(cells[ff]) or ff in removed:
                ok = False
                break
            ffs[pin] = ff
        if ok and ffs:
            plan["OUTPUT"] = ffs
        # one clock for the tile; a reset net per group among RST0..RST3
        clocks = {cells[f]["connections"]["CLK"][0] for ffs in plan.values() for f in ffs.values()}
        if not plan or len(clocks) != 1:
            continue
        resets = {}
        for group, ffs in list(plan.items()):
            nets = {_reset_net(cells[f]) for f in ffs.values()}
            if len(nets) != 1:
                del plan[group]
                continue
            resets[group] = nets.pop()
        if not plan:
            continue
        # an input of constants is registered too (without reset: from the first clock edge
        # on it holds the constant, before any operand reaches the tile): nextpnr times a
        # tile with one input registered and the other not as combinational from the first
        constant = [g for g in constant if any(k.startswith("INPUT") for k in plan)]
        for group in constant:
            plan[group] = {}
            resets[group] = None
        # one RST input per distinct reset of the groups (no reset: an input tied to 0)
        rst_pins = {}
        for net in sorted(set(resets.values()), key=lambda n: (n is None, n or 0)):
            rst_pins[net] = f"RST{len(rst_pins)}"
        dirs = tile.setdefault("port_directions", {})
        params = tile.setdefault("parameters", {})
        conn["CLK0"] = [clocks.pop()]
        conn["CE0"] = ["1"]
        dirs["CLK0"] = dirs["CE0"] = "input"
        for k in range(4):
            conn[f"RST{k}"] = ["0"]
            dirs[f"RST{k}"] = "input"
        for net, pin in rst_pins.items():
            if net is not None:
                conn[pin] = [net]
        for group, ffs in plan.items():
            params[f"REG_{group}_CLK"] = "CLK0"
            params[f"REG_{group}_CE"] = "CE0"
            params[f"REG_{group}_RST"] = rst_pins[resets[group]]
            for pin, ff in ffs.items():
                f = cells[ff]["connections"]
                if group == "OUTPUT":
                    old = conn[pin][0]
                    conn[pin] = [f["Q"][0]]
                    drivers[f["Q"][0]] = (name, pin)
                    loads.pop(old, None)
                    removed.add(ff)
                else:
                    q, d = f["Q"][0], f["DI"][0]
                    conn[pin] = [d]
                    if isinstance(d, int):
                        loads.setdefault(d, []).append((name, pin))
                    loads[q] = [u for u in loads.get(q, []) if u != (name, pin)]
                    moved.add(ff)
            if group == "OUTPUT":
                outputs += 1
            elif ffs:
                inputs += 1
        params["RESETMODE"] = "SYNC"
    # input flip-flops whose every load moved into tiles
    for ff in sorted(moved - removed):
        q = cells[ff]["connections"]["Q"][0]
        if not loads.get(q) and q not in port_bits:
            removed.add(ff)
    for ff in removed:
        del cells[ff]
    return PackStats(tiles=tiles, inputs=inputs, outputs=outputs, flipflops=len(removed))

