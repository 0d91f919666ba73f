"""The cost-model record every block returns."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Cost:
    """Analytic figures of one block instance for one frame.

    ``cycles``: cycles the block is busy per frame in steady state (its initiation interval);
    ``latency``: first input beat to last output beat of one frame on an idle block;
    ``multipliers``: hardware multipliers, with their operand widths in ``multiplier_widths``;
    ``memory_bits``: bits of ROM/RAM (weights, buffers, FIFOs); ``registers``: flip-flops
    (an estimate).
    """
    cycles: int
    latency: int
    multipliers: int = 0
    memory_bits: int = 0
    registers: int = 0
    multiplier_widths: list[tuple[int, int]] = field(default_factory=list)

    def as_dict(self) -> dict:
        widths = sorted({tuple(w) for w in self.multiplier_widths})
        return {"cycles": self.cycles, "latency": self.latency, "multipliers": self.multipliers,
                "multiplier_widths": [list(w) for w in widths],
                "memory_bits": self.memory_bits, "registers": self.registers}
