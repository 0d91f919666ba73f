"""The cost-model record every block returns."""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from hwgen.rtl_templates.resources import FAMILIES, Mul, Resources, dsp_tiles, mul_tiles_total


@dataclass
class Cost:
    """Analytic figures of one block instance for one frame.

    ``cycles``: cycles the block is busy per frame in steady state (its initiation interval);
    ``latency``: first input beat to last output beat of one frame on an idle block;
    ``multipliers``: the multiplications of the datapath, with their operand widths in
    ``multiplier_widths`` (a wide product counts once, as written);
    ``memory_bits``: bits of ROM/RAM (weights, buffers, FIFOs); ``registers``: flip-flops
    (an estimate, the mean of the two families' figures below).

    ``multiplies``: every multiplication the hardware writes, as the synthesis tools see it
    (:class:`~rtl_templates.resources.Mul` → count; a wide product appears as its tiles);
    ``by_family``: per FPGA family the estimated :class:`~rtl_templates.resources.Resources`
    (LUT4, flip-flops, carry cells, DSP tiles, block RAM tiles, distributed RAM cells); read
    them with :meth:`resources`. ``parts``: per family the structural counts the estimate is
    calibrated from (part name → Resources; ``benchmarks/resources.py --fit``).
    """
    cycles: int
    latency: int
    multipliers: int = 0
    memory_bits: int = 0
    registers: int = 0
    multiplier_widths: list[tuple[int, int]] = field(default_factory=list)
    multiplies: dict[Mul, int] = field(default_factory=dict)
    by_family: dict[str, Resources] = field(default_factory=dict)
    parts: dict[str, dict[str, Resources]] = field(default_factory=dict)

    def __post_init__(self):
        # the DSP tiles are always those of the multiplications (the family rule)
        self.by_family = {f: replace(r, dsp=mul_tiles_total(self.multiplies, f))
                          for f, r in self.by_family.items()}

    def resources(self, family: str) -> Resources:
        """The estimated resources on ``family`` ("ecp5" or "ice40"). A block without a
        resource estimate of its own gets its DSP tiles from :attr:`multiplies` and its
        flip-flops from :attr:`registers`."""
        if family not in FAMILIES:
            raise ValueError(f"unknown FPGA family {family!r} (choose {', '.join(FAMILIES)})")
        if family in self.by_family:
            return self.by_family[family]
        return Resources(ff=self.registers, dsp=sum(n * dsp_tiles(m, family)
                                                    for m, n in self.multiplies.items()))

    def as_dict(self) -> dict:
        widths = sorted({tuple(w) for w in self.multiplier_widths})
        return {"cycles": self.cycles, "latency": self.latency, "multipliers": self.multipliers,
                "multiplier_widths": [list(w) for w in widths],
                "memory_bits": self.memory_bits, "registers": self.registers,
                "multiplies": [dict(m.as_dict(), count=n)
                               for m, n in sorted(self.multiplies.items())],
                "resources": {f: self.resources(f).as_dict() for f in FAMILIES}}
