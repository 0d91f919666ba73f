"""PLL settings: a board's oscillator to the clock a design runs at.

``pll_settings(family, input_mhz, target_mhz)`` searches the dividers of the family's PLL
the way the vendor-independent calculators do (Project Trellis's ``ecppll``, IceStorm's
``icepll``, both shipped as ``yowasp-ecppll`` / ``yowasp-icepll``; the tests check that the
two agree), in exact rational arithmetic, so the result is deterministic:

ECP5 ``EHXPLLL``, feedback from CLKOP (``FEEDBK_PATH "CLKOP"``):
    f_pfd = f_in / CLKI_DIV (>= 3.125 MHz), f_out = f_pfd · CLKFB_DIV,
    f_vco = f_out · CLKOP_DIV in 400-800 MHz; CLKI_DIV 1-128, CLKFB_DIV 1-80, CLKOP_DIV 1-128.
    The closest f_out wins; among equally close ones the VCO nearest 600 MHz, then the first
    found (CLKI_DIV, CLKFB_DIV, CLKOP_DIV ascending), as ``ecppll`` chooses.
    ``CLKOP_CPHASE`` is CLKOP_DIV // 2 (``ecppll``'s half-period shift, computed exactly:
    ``ecppll`` truncates a float product and gives one less for some even dividers; with
    CLKOP as the feedback the phase does not change what the design sees).
    The output range is 3.125-400 MHz (ECP5 family data sheet, f_OUT).
iCE40 ``SB_PLL40_PAD`` (the iCEBreaker's 12 MHz oscillator is on pin 35, the pad that feeds
the PLL directly), ``FEEDBACK_PATH "SIMPLE"``:
    f_pfd = f_in / (DIVR + 1) in 10-133 MHz, f_vco = f_pfd · (DIVF + 1) in 533-1066 MHz,
    f_out = f_vco / 2^DIVQ; DIVR 0-15, DIVF 0-127, DIVQ 1-6. The closest f_out wins, the
    first found on a tie (DIVR, DIVF, DIVQ ascending), as ``icepll`` chooses. FILTER_RANGE
    follows f_pfd (``icepll``'s table). The output range is 16-275 MHz (iCE40 UltraPlus
    data sheet, f_OUT).

A target the PLL misses by more than :data:`TOLERANCE` (1 %) or outside the output range is
refused with one line; a target equal to the oscillator needs no PLL (``bypass``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from hwgen.errors import HwgenError

#: the largest relative distance between the target and the achieved clock
TOLERANCE = Fraction(1, 100)

#: family → (PLL primitive, lowest and highest output clock in MHz)
PLL_PRIMITIVE = {"ecp5": ("EHXPLLL", Fraction(3125, 1000), Fraction(400)),
                 "ice40": ("SB_PLL40_PAD", Fraction(16), Fraction(275))}

# ECP5 EHXPLLL ranges (ecppll: PFD_MIN/MAX, VCO_MIN/MAX)
ECP5_PFD = (Fraction(3125, 1000), Fraction(400))
ECP5_VCO = (Fraction(400), Fraction(800))
ECP5_VCO_CENTRE = Fraction(600)
# iCE40 SB_PLL40 ranges (icepll, SIMPLE feedback)
ICE40_PFD = (Fraction(10), Fraction(133))
ICE40_VCO = (Fraction(533), Fraction(1066))
#: iCE40 FILTER_RANGE by the PFD frequency: (below this many MHz, range)
ICE40_FILTER = ((17, 1), (26, 2), (44, 3), (66, 4), (101, 5))


@dataclass(frozen=True)
class PllSettings:
    """The PLL (or none) between a board's oscillator and the design's clock."""
    family: str                  # "ecp5" | "ice40"
    input_mhz: float             # the oscillator
    target_mhz: float            # what was asked for
    achieved_mhz: float          # what the dividers give (= input_mhz when bypassed)
    primitive: str = ""          # "EHXPLLL" | "SB_PLL40_PAD"; "" when bypassed
    pfd_mhz: float = 0.0         # phase detector input
    vco_mhz: float = 0.0
    #: the divider parameters, in the primitive's names: ECP5 CLKI_DIV, CLKFB_DIV,
    #: CLKOP_DIV, CLKOP_CPHASE; iCE40 DIVR, DIVF, DIVQ, FILTER_RANGE
    dividers: tuple[tuple[str, int], ...] = ()

    @property
    def bypass(self) -> bool:
        """No PLL: the oscillator is the design's clock."""
        return not self.primitive

    @property
    def error_percent(self) -> float:
        return 100.0 * (self.achieved_mhz - self.target_mhz) / self.target_mhz

    def divider(self, name: str) -> int:
        return dict(self.dividers)[name]

    def parameters(self) -> dict[str, int | str]:
        """The primitive's parameters (``Instance(primitive, p_<name>=value, ...)``)."""
        d = dict(self.dividers)
        if self.primitive == "EHXPLLL":
            return {"PLLRST_ENA": "DISABLED", "INTFB_WAKE": "DISABLED",
                    "STDBY_ENABLE": "DISABLED", "DPHASE_SOURCE": "DISABLED",
                    "OUTDIVIDER_MUXA": "DIVA", "OUTDIVIDER_MUXB": "DIVB",
                    "OUTDIVIDER_MUXC": "DIVC", "OUTDIVIDER_MUXD": "DIVD",
                    "CLKI_DIV": d["CLKI_DIV"], "CLKOP_ENABLE": "ENABLED",
                    "CLKOP_DIV": d["CLKOP_DIV"], "CLKOP_CPHASE": d["CLKOP_CPHASE"],
                    "CLKOP_FPHASE": 0, "FEEDBK_PATH": "CLKOP", "CLKFB_DIV": d["CLKFB_DIV"]}
        if self.primitive == "SB_PLL40_PAD":
            return {"FEEDBACK_PATH": "SIMPLE", "DIVR": d["DIVR"], "DIVF": d["DIVF"],
                    "DIVQ": d["DIVQ"], "FILTER_RANGE": d["FILTER_RANGE"]}
        return {}

    def as_dict(self) -> dict:
        return {"family": self.family, "primitive": self.primitive or None,
                "bypass": self.bypass, "input_mhz": self.input_mhz,
                "target_mhz": self.target_mhz, "achieved_mhz": round(self.achieved_mhz, 6),
                "error_percent": round(self.error_percent, 4),
                "pfd_mhz": round(self.pfd_mhz, 6), "vco_mhz": round(self.vco_mhz, 6),
                "dividers": dict(self.dividers)}


def _ecp5(f_in: Fraction, target: Fraction):
    best = None                  # (error, |vco - 600|, clki, clkfb, clkop, fout, vco, pfd)
    for clki in range(1, 129):
        pfd = f_in / clki
        if not ECP5_PFD[0] <= pfd <= ECP5_PFD[1]:
            continue
        for clkfb in range(1, 81):
            fout = pfd * clkfb
            err = abs(fout - target)
            if best is not None and err > best[0]:
                continue
            # CLKOP_DIV ascending over the dividers that put the VCO in range
            for clkop in range(max(1, math.ceil(ECP5_VCO[0] / fout)),
                               min(128, math.floor(ECP5_VCO[1] / fout)) + 1):
                vco = fout * clkop
                key = (err, abs(vco - ECP5_VCO_CENTRE))
                if best is None or key < best[:2]:
                    best = (*key, clki, clkfb, clkop, fout, vco, pfd)
    if best is None:
        return None
    _, _, clki, clkfb, clkop, fout, vco, pfd = best
    return fout, pfd, vco, (("CLKI_DIV", clki), ("CLKFB_DIV", clkfb), ("CLKOP_DIV", clkop),
                            ("CLKOP_CPHASE", clkop // 2))


def _ice40(f_in: Fraction, target: Fraction):
    best = None                  # (error, divr, divf, divq, fout, vco, pfd)
    for divr in range(16):
        pfd = f_in / (divr + 1)
        if not ICE40_PFD[0] <= pfd <= ICE40_PFD[1]:
            continue
        for divf in range(128):
            vco = pfd * (divf + 1)
            if not ICE40_VCO[0] <= vco <= ICE40_VCO[1]:
                continue
            for divq in range(1, 7):
                fout = vco / 2 ** divq
                err = abs(fout - target)
                if best is None or err < best[0]:
                    best = (err, divr, divf, divq, fout, vco, pfd)
    if best is None:
        return None
    _, divr, divf, divq, fout, vco, pfd = best
    filt = next((r for below, r in ICE40_FILTER if pfd < below), 6)
    return fout, pfd, vco, (("DIVR", divr), ("DIVF", divf), ("DIVQ", divq),
                            ("FILTER_RANGE", filt))


def pll_settings(family: str, input_mhz: float, target_mhz: float) -> PllSettings:
    """The PLL settings of ``family`` ("ecp5" | "ice40") making ``target_mhz`` from an
    oscillator of ``input_mhz`` (see the module's notes); HwgenError if none is within 1 %."""
    if family not in PLL_PRIMITIVE:
        raise HwgenError(f"no PLL settings for FPGA family {family!r} "
                         f"(families: {', '.join(PLL_PRIMITIVE)})")
    if not (target_mhz > 0 and input_mhz > 0):
        raise HwgenError(f"clock frequencies must be positive (oscillator {input_mhz} MHz, "
                         f"target {target_mhz} MHz)")
    f_in, target = Fraction(input_mhz), Fraction(target_mhz)
    if f_in == target:
        return PllSettings(family, float(input_mhz), float(target_mhz), float(input_mhz))
    primitive, lo, hi = PLL_PRIMITIVE[family]
    if not lo <= target <= hi:
        raise HwgenError(f"a clock of {target_mhz:g} MHz is outside the {family} PLL's range "
                         f"({float(lo):g}-{float(hi):g} MHz; the oscillator's "
                         f"{input_mhz:g} MHz needs no PLL)")
    found = (_ecp5 if family == "ecp5" else _ice40)(f_in, target)
    if found is None or abs(found[0] - target) > TOLERANCE * target:
        near = f" (nearest {float(found[0]):.3f} MHz)" if found else ""
        raise HwgenError(f"the {family} PLL cannot make {target_mhz:g} MHz from the "
                         f"{input_mhz:g} MHz oscillator within 1 %{near}: choose another "
                         f"--freq")
    fout, pfd, vco, dividers = found
    return PllSettings(family, float(input_mhz), float(target_mhz), float(fout), primitive,
                       float(pfd), float(vco), dividers)
