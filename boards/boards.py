"""Boards hwgen folds designs for: the device on them, its package, the oscillator and the
pins a design talks to the host and the world through.

Pin names are the package balls of the public board definitions (the vendors' schematics,
as amaranth-boards lists them): iCEBreaker (iCE40 UP5K, SG48), ULX3S (ECP5 25F/85F,
CABGA381), OrangeCrab r0.2 (ECP5 25F, CSFBGA285, speed grade 8). The iCEBreaker's and the
ULX3S's USB-serial bridges (FTDI FT2232H / FT231X) give a UART; the OrangeCrab has no
bridge: its USB lines go straight to the FPGA (a USB core in the design is the host link),
so its ``uart`` is empty and ``usb`` names the pins.

``hwgen boards`` lists them (:func:`boards_table`); ``--board`` takes an id (case ignored).
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass

from hwgen.boards.devices import DEVICES, Device, by_name, fmt_bits
from hwgen.errors import HwgenError


@dataclass(frozen=True)
class Board:
    id: str                      # e.g. "icebreaker"
    name: str                    # e.g. "1BitSquared iCEBreaker"
    device_id: str               # a devices.Device id
    package: str                 # the FPGA's package on this board (nextpnr's name)
    clock_mhz: float             # the on-board oscillator
    clock_pin: str
    uart: tuple[tuple[str, str], ...] = ()   # USB-serial bridge: (signal, pin), FPGA side
    led_pin: str = ""            # one user LED
    usb: tuple[tuple[str, str], ...] = ()    # USB lines wired to the FPGA itself
    speed: int | None = None     # speed grade of the fitted part (ECP5)
    #: openFPGALoader's name for the board (``-b``), its programming cable as it knows it
    programmer: str = ""
    #: the programmer can load the configuration SRAM (False: it writes the flash only)
    sram: bool = True

    @property
    def device(self) -> Device:
        return by_name(self.device_id)

    @property
    def host_link(self) -> str:
        if self.uart:
            return "USB-serial UART (" + ", ".join(f"{s} {p}" for s, p in self.uart) + ")"
        if self.usb:
            return "USB to the FPGA (" + ", ".join(f"{s} {p}" for s, p in self.usb) + ")"
        return "none"

    def as_dict(self) -> dict:
        return {"id": self.id, "name": self.name, "device": self.device_id,
                "part": self.device.part, "package": self.package, "speed": self.speed,
                "clock_mhz": self.clock_mhz, "clock_pin": self.clock_pin,
                "uart": dict(self.uart), "usb": dict(self.usb), "led_pin": self.led_pin}


BOARDS: tuple[Board, ...] = (
    Board("icebreaker", "1BitSquared iCEBreaker", "ice40-up5k", "sg48", 12.0, "35",
          uart=(("rx", "6"), ("tx", "9")), led_pin="11", programmer="ice40_generic"),
    Board("ulx3s-25f", "Radiona ULX3S (LFE5U-25F)", "ecp5-25f", "CABGA381", 25.0, "G2",
          uart=(("rx", "M1"), ("tx", "L4")), led_pin="B2", speed=6, programmer="ulx3s"),
    Board("ulx3s-85f", "Radiona ULX3S (LFE5U-85F)", "ecp5-85f", "CABGA381", 25.0, "G2",
          uart=(("rx", "M1"), ("tx", "L4")), led_pin="B2", speed=6, programmer="ulx3s"),
    # no JTAG cable on the board: its DFU bootloader writes the flash
    Board("orangecrab-25f", "Good Stuff Department OrangeCrab r0.2 (LFE5U-25F)", "ecp5-25f",
          "CSFBGA285", 48.0, "A9", led_pin="K4 (RGB red)",
          usb=(("d_p", "N1"), ("d_n", "M2"), ("pullup", "N2")), speed=8,
          programmer="orangeCrab", sram=False),
)

#: ``--board auto``, also what hwgen folds for when told neither a board nor a device: the
#: smallest board the model fits (``boards.fold.AutoBoard``)
AUTO_BOARD = "auto"


def board_by_name(name: str) -> Board:
    key = name.strip().lower()
    for b in BOARDS:
        if key == b.id:
            return b
    ids = [b.id for b in BOARDS]
    near = difflib.get_close_matches(key, ids, n=1, cutoff=0.5)
    if not near:   # a family or vendor name: "ulx3s", "orangecrab"
        near = [i for i in ids if key and i.startswith(key)][:1]
    hint = f"did you mean '{near[0]}'? " if near else ""
    raise HwgenError(f"unknown board '{name}' ({hint}boards: {', '.join(ids)})")


def _table(head: list[str], rows: list[list[str]], right: set[int]) -> list[str]:
    widths = [max(len(head[k]), *(len(r[k]) for r in rows)) for k in range(len(head))]

    def fmt(r):
        return "  ".join(v.rjust(w) if k in right else v.ljust(w)
                         for k, (v, w) in enumerate(zip(r, widths))).rstrip()
    return [fmt(head), fmt(["-" * w for w in widths]), *(fmt(r) for r in rows)]


def boards_table() -> str:
    """``hwgen boards``: the boards, then the devices with their resources (deterministic)."""
    lines = ["boards:"]
    rows = [[b.id, b.device_id, b.package, f"{b.clock_mhz:g} MHz ({b.clock_pin})",
             b.led_pin, b.host_link] for b in BOARDS]
    lines += ["  " + x for x in _table(["board", "device", "package", "clock (pin)", "LED",
                                        "host link"], rows, set())]
    lines += ["", "devices:"]
    rows = []
    for d in DEVICES:
        dsp = f"{d.multipliers} {d.dsp_tile}" if d.multipliers else "0 (LUT multipliers)"
        bram = f"{d.bram_blocks} {d.bram_tile} ({fmt_bits(d.bram_bits)})"
        extra = []
        if d.distributed_ram_bits:
            extra.append(f"LUT RAM {fmt_bits(d.distributed_ram_bits)}")
        if d.spram_blocks:
            extra.append(f"SPRAM {d.spram_blocks}×256 kbit")
        rows.append([d.id, d.part, f"{d.luts:,}", f"{d.ffs:,}", dsp, bram,
                     ", ".join(extra) or "-", f"{d.io_pins} ({d.package})"])
    lines += ["  " + x for x in _table(["device", "part", "LUT4", "FF", "DSP tiles",
                                        "block RAM", "other RAM", "I/O (package)"], rows,
                                       {2, 3})]
    lines += ["", "DSP tile modes:"]
    for d in DEVICES:
        if d.dsp_modes:
            lines.append(f"  {d.id}: " + "; ".join(d.dsp_modes))
    lines += ["block RAM tile geometry (depth×width):"]
    seen = set()
    for d in DEVICES:
        if d.bram_tile not in seen:
            seen.add(d.bram_tile)
            lines.append(f"  {d.bram_tile} ({fmt_bits(d.bram_tile_bits)}): "
                         + ", ".join(d.bram_geometry))
    lines.append("hwgen counts one multiplier per DSP tile, as Yosys maps products; SPRAM "
                 "holds weights (loaded after reset) and the layer-sequential engine's "
                 "feature maps; 'hwgen build' needs a board with a USB-serial UART.")
    return "\n".join(lines)
