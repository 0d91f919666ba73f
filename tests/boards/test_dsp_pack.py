"""ECP5 multiplier registers moved into the MULT18X18D tiles (``hwgen.boards.dsp_pack``), and
flip-flops of constant input copied per load (``hwgen.boards.const_flops``).

The packed netlist is checked against Yosys's own by SAT: both netlists with the ECP5
simulation models of the fabric cells and a behavioural MULT18X18D
(``tests/data/mult18x18d_model.v``) in a miter, every output equal for six cycles from
zeroed registers under free inputs (reset included). A deliberately broken packing fails the
same check, so the check can fail. The split of constant-input flip-flops passes the same
check.
"""
from __future__ import annotations

import json
from pathlib import Path

import netlist_miter
import pytest
from amaranth.back import verilog
from amaranth.hdl import Cat, Const, Module, Signal, signed, unsigned

from hwgen.boards.const_flops import split_constant_flops
from hwgen.boards.dsp_pack import pack_dsp_registers
from hwgen.boards.synth import place_and_route, synthesize
from hwgen.rtl_templates.pipeline import reg

pytestmark = pytest.mark.synth

MODEL = Path(__file__).resolve().parents[1] / "data" / "mult18x18d_model.v"

def small_design() -> str:
    """Registered products as the blocks write them (operand and product registers, reset
    by ``rst``), an input register with another load, a product register with an enable
    (which must stay in the fabric), and a product by a constant (a weight the same in every
    fold)."""
    m = Module()
    a, b = Signal(signed(3)), Signal(signed(3))
    c, d = Signal(unsigned(3)), Signal(unsigned(2))
    e, q = Signal(signed(5)), Signal(signed(10))
    y, z, w = Signal(signed(6)), Signal(5), Signal(3)
    p = reg(m, reg(m, a, signed(3), "ra") * reg(m, b, signed(3), "rb"), signed(6), "p")
    m.d.sync += y.eq(p + 1)
    m.d.sync += q.eq(reg(m, reg(m, e, signed(5), "re") * Const(-11, signed(5)), signed(10),
                         "pe"))
    rc = reg(m, c, unsigned(3), "rc")
    m.d.comb += w.eq(rc)
    with m.If(c[0]):
        m.d.sync += z.eq(rc * d)
    return verilog.convert(m, name="t", ports=[a, b, c, d, e, q, y, z, w])


@pytest.fixture(scope="module")
def netlist(tmp_path_factory):
    res = synthesize(small_design(), "t", "ecp5",
                     cache_dir=tmp_path_factory.mktemp("synth-cache"))
    assert res.dsp == 3
    return res, json.loads(Path(res.netlist).read_text())


def equivalent(tmp: Path, gold: dict, gate: dict) -> bool:
    return netlist_miter.equivalent(tmp, gold, gate, {MODEL.name: MODEL.read_text()}, seq=6)


def tiles(netlist: dict) -> list[dict]:
    return [c for c in netlist["modules"]["t"]["cells"].values() if c["type"] == "MULT18X18D"]


def test_registers_move_into_the_tiles_and_nothing_changes(netlist, tmp_path):
    res, gold = netlist
    gate = json.loads(json.dumps(gold))
    stats = pack_dsp_registers(gate)
    # the signed product takes both operand registers and its product register; the other
    # keeps its enabled product register in the fabric and copies the shared input register;
    # the product by a constant takes its operand and product registers and registers the
    # constant too (three tiles with both inputs registered, one with A only)
    assert stats.as_dict() == {"tiles": 3, "inputs": 4, "outputs": 2,
                               "flipflops": stats.flipflops}
    ffs = [c for c in gate["modules"]["t"]["cells"].values() if c["type"] == "TRELLIS_FF"]
    assert len(ffs) == res.ff - stats.flipflops and stats.flipflops > 0
    regs = sorted(tuple(sorted(k for k, v in t["parameters"].items()
                               if k.endswith("_CLK") and v == "CLK0")) for t in tiles(gate))
    assert regs == [("REG_INPUTA_CLK",),
                    ("REG_INPUTA_CLK", "REG_INPUTB_CLK", "REG_OUTPUT_CLK"),
                    ("REG_INPUTA_CLK", "REG_INPUTB_CLK", "REG_OUTPUT_CLK")]
    assert equivalent(tmp_path, gold, gate)


def test_the_check_fails_on_a_wrong_packing(netlist, tmp_path):
    _, gold = netlist
    gate = json.loads(json.dumps(gold))
    pack_dsp_registers(gate)
    for t in tiles(gate):                   # the output register dropped: one cycle early
        if t["parameters"].get("REG_OUTPUT_CLK") == "CLK0":
            t["parameters"]["REG_OUTPUT_CLK"] = "NONE"
    assert not equivalent(tmp_path, gold, gate)


def test_packing_twice_changes_nothing(netlist):
    _, gold = netlist
    once = json.loads(json.dumps(gold))
    pack_dsp_registers(once)
    twice = json.loads(json.dumps(once))
    stats = pack_dsp_registers(twice)
    assert twice == once and stats.inputs == stats.outputs == stats.flipflops == 0


def test_nextpnr_places_the_packed_tiles(netlist, tmp_path):
    res, _ = netlist
    pnr = place_and_route(res, "ECP5 LFE5U-25F", 125, cache_dir=tmp_path)
    assert pnr.dsp_registers["outputs"] == 2 and pnr.used("MULT18X18D") == 3
    assert pnr.used("TRELLIS_FF") == res.ff - pnr.dsp_registers["flipflops"]
    plain = place_and_route(res, "ECP5 LFE5U-25F", 125, cache_dir=tmp_path, pack_dsp=False)
    assert plain.dsp_registers == {} and plain.key != pnr.key


def constant_flop_design() -> str:
    """Registers whose input is a constant but whose initial value is not (Yosys keeps them:
    they differ in the first cycle), with loads in separate cells, and one with a port load."""
    m = Module()
    a, b, c = Signal(4), Signal(4), Signal(4)
    y0, y1, y2 = Signal(4), Signal(4), Signal(4)
    k0, k1 = Signal(2, reset_less=True), Signal(2, reset_less=True)
    m.d.sync += [k0.eq(3), k1.eq(3)]
    m.d.sync += [y0.eq(a + k0), y1.eq(b ^ Cat(k1, k1)), y2.eq(c & Cat(k0, k1))]
    return verilog.convert(m, name="t", ports=[a, b, c, y0, y1, y2, k0])


def test_constant_flops_split_per_load_and_nothing_changes(tmp_path):
    res = synthesize(constant_flop_design(), "t", "ecp5", cache_dir=tmp_path / "cache")
    gold = json.loads(Path(res.netlist).read_text())
    gate = json.loads(json.dumps(gold))
    cells = gate["modules"]["t"]["cells"]

    def constant_ffs():
        return {n: c for n, c in cells.items() if c["type"] == "TRELLIS_FF"
                and all(not isinstance(b, int) for b in c["connections"]["DI"])}

    merged = constant_ffs()
    assert merged                           # Yosys kept (and merged) the registers
    added = split_constant_flops(gate)
    assert added > 0
    ffs = constant_ffs()
    assert len(ffs) == len(merged) + added
    # every copy drives the loads of one cell
    loads: dict[int, set[str]] = {}
    for n, c in cells.items():
        for port, bits in c["connections"].items():
            if c["port_directions"][port] == "input":
                for b in bits:
                    loads.setdefault(b, set()).add(n)
    assert all(len(loads.get(c["connections"]["Q"][0], ())) <= 1 for c in ffs.values())
    assert equivalent(tmp_path, gold, gate)
    assert split_constant_flops(gate) == 0      # once is enough
