"""Place and route the host link (``rtl_templates/host_link.py``) alone: resources, fmax and
the critical path on the iCE40 UP5K (target 48 MHz) and the ECP5 LFE5U-85F (125 MHz).

    python benchmarks/link_pnr.py [--family ice40|ecp5] [--seed N] [--path]

The links measured: a wide one-beat input frame without a load port (512 bits in, 10 bytes
out, the iCEBreaker's divisor 417), a byte-wide 490-beat input with a load port, and the
digits MLP's (32 beats of 16 bits in, 10 bytes out). Each is wrapped by
``hwgen.boards.synth.timing_wrapper`` (wide ports become a shift register on one pin and
XOR-reduced outputs) and goes through Yosys and nextpnr (cached by content).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from amaranth.back import verilog

from hwgen.boards.synth import place_and_route, synthesize, timing_wrapper
from hwgen.rtl_templates.host_link import HostLink

#: (in_width, in_beats, out_width, out_beats, divisor, loads)
LINKS = {
    "wide512": (512, 1, 8, 10, 417, False),
    "bytes490+load": (8, 490, 8, 10, 417, True),
    "digits": (16, 32, 8, 10, 417, False),
}
TARGETS = {"ice40": ("ice40-up5k", 48.0), "ecp5": ("ECP5 LFE5U-85F", 125.0)}


def print_path(report: str) -> None:
    rep = json.loads(Path(report).read_text())
    paths = rep.get("critical_paths", [])
    for seg in paths[0].get("path", []) if paths else ():
        src = ";".join(s.split("|")[0].rsplit("/", 1)[-1] for s in seg.get("sources", ()))
        print(f"    {seg.get('type', ''):8} {seg['delay']:6.3f} ns  "
              f"{seg['from'].get('cell', '')[:50]}.{seg['from'].get('port', '')} -> "
              f"{seg['to'].get('cell', '')[:50]}.{seg['to'].get('port', '')}  {src[:80]}")


def run(name: str, family: str, seed: int, path: bool) -> float:
    text = verilog.convert(HostLink(*LINKS[name]), name="link", emit_src=True)
    wrapped, wtop = timing_wrapper(text, "link")
    s = synthesize(wrapped, wtop, family)
    dev, freq = TARGETS[family]
    p = place_and_route(s, dev, freq, seed)
    cp = p.critical_path
    print(f"{name:14} {family:5} lut4 {s.lut4:5} ff {s.ff:5} carry {s.carry:4} "
          f"fmax {p.fmax_mhz:6.1f} MHz  crit {cp.start if cp else '-'} -> "
          f"{cp.end if cp else '-'} ({cp.logic_ns if cp else 0:.1f} logic + "
          f"{cp.routing_ns if cp else 0:.1f} route ns)", flush=True)
    if path:
        print_path(p.report)
    return p.fmax_mhz


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--family", choices=sorted(TARGETS), action="append")
    ap.add_argument("--link", choices=sorted(LINKS), action="append")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--path", action="store_true", help="print the critical path")
    args = ap.parse_args(argv)
    for fam in args.family or sorted(TARGETS, reverse=True):
        for name in args.link or LINKS:
            run(name, fam, args.seed, args.path)


if __name__ == "__main__":
    main()
