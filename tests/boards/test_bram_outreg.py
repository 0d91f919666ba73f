"""ECP5 block RAM read registers moved into the DP16KD tiles (``hwgen.boards.bram_outreg``).

The packed netlist is checked against Yosys's own by SAT, as the DSP packing is
(``test_dsp_pack.py``): both netlists with the ECP5 simulation models of the fabric cells and
a DP16KD model in a miter, every output equal for eight cycles (twelve for a FIFO) from
zeroed registers under free inputs. The model's read data is an arbitrary function of the
port's inputs, latched on its clock enable (the memory itself is the same on both sides;
what the packing changes is where the register after it is), followed by the output register
when ``REGMODE`` says so (the read port's clock and output enable; in the 36-bit mode, port
B's for both halves). A deliberately broken packing fails the same check.
"""
from __future__ import annotations

import json
from pathlib import Path

import netlist_miter
import numpy as np
import pytest
from amaranth.back import verilog
from amaranth.hdl import Cat, Module, Signal

from hwgen.boards.bram_outreg import pack_bram_registers
from hwgen.boards.synth import place_and_route, synthesize
from hwgen.rtl_templates.memory import BLOCK, BufferedFIFO, ram, rom
from hwgen.rtl_templates.pipeline import reg

pytestmark = pytest.mark.synth

def dp16kd_model(params: set[str]) -> str:
    """The DP16KD model (see the module documentation), declaring ``params``."""
    def bus(name, n):
        return ", ".join(f"{name}{i}" for i in reversed(range(n)))
    ports = []
    for s in "AB":
        ports += [f"input {bus('DI' + s, 18)}", f"input {bus('AD' + s, 14)}",
                  f"input CE{s}, OCE{s}, CLK{s}, WE{s}, RST{s}, CS{s}2, CS{s}1, CS{s}0",
                  f"output {bus('DO' + s, 18)}"]
    decl = "\n".join(f"    parameter {p} = " + ('"NOREG"' if p.startswith("REGMODE") else
                                              "18" if p.startswith("DATA_WIDTH") else "0") + ";"
                     for p in sorted(params | {"REGMODE_A", "REGMODE_B", "DATA_WIDTH_A"}))
    return f"""module DP16KD({", ".join(ports)});
{decl}
    wire [17:0] dia = {{{bus('DIA', 18)}}}, dib = {{{bus('DIB', 18)}}};
    wire [13:0] ada = {{{bus('ADA', 14)}}}, adb = {{{bus('ADB', 14)}}};
    wire pdp = DATA_WIDTH_A == 36;
    reg [17:0] la = 0, lb = 0, ra = 0, rb = 0;
    wire [17:0] fa = {{ada[3:0], ada}} ^ {{18{{^ada}}}} ^ dia ^ {{dib[8:0], dib[17:9]}} ^ WEA;
    wire [17:0] fb = {{adb[3:0], adb}} ^ {{18{{^adb}}}} ^ dib ^ {{dia[8:0], dia[17:9]}} ^ WEB;
    always @(posedge CLKA) if (pdp ? CEB : CEA) la <= pdp ? fa ^ {{adb, 4'b1}} : fa;
    always @(posedge CLKB) if (CEB) lb <= fb;
    always @(posedge CLKA) if (pdp ? OCEB : OCEA) ra <= la;
    always @(posedge CLKB) if (OCEB) rb <= lb;
    wire [17:0] doa = REGMODE_A == "OUTREG" ? ra : la;
    wire [17:0] dob = REGMODE_B == "OUTREG" ? rb : lb;
    assign {{{bus('DOA', 18)}}} = doa;
    assign {{{bus('DOB', 18)}}} = dob;
endmodule
"""


def small_design() -> str:
    """Block RAM reads as the blocks write them: a 36-bit RAM (the pseudo-dual-port mode)
    read every cycle into a plain register, a weight ROM read into a register, a deep RAM
    (a tile per bit) into a register; a RAM whose register has an enable, and one whose data has a
    second load (both must stay)."""
    m = Module()
    addr, waddr = Signal(9), Signal(9)
    wdata, we, en = Signal(36), Signal(), Signal()
    y1, y2, y3, y4, y5 = Signal(36), Signal(18), Signal(2), Signal(18), Signal(18)
    wr, rd = ram(m, "pdp", width=36, depth=512, rw="dont_care", style=BLOCK)
    m.d.comb += [wr.addr.eq(waddr), wr.data.eq(wdata), wr.en.eq(we), rd.addr.eq(addr)]
    m.d.comb += y1.eq(reg(m, rd.data, 36, "ram_q"))
    rport, = rom(m, "wmem", width=18, style=BLOCK,
                 init=[(k * 2654435761) % (1 << 18) for k in range(1024)])
    m.d.comb += [rport.addr.eq(Cat(addr, waddr[0])), y2.eq(reg(m, rport.data, 18, "w0"))]
    wr1, rd1 = ram(m, "deep", width=2, depth=16384, rw="dont_care", style=BLOCK)
    a14, w14 = Signal(14), Signal(14)
    m.d.comb += [wr1.addr.eq(w14), wr1.data.eq(wdata[:2]), wr1.en.eq(we), rd1.addr.eq(a14)]
    m.d.comb += y3.eq(reg(m, rd1.data, 2, "deep_q"))
    wr2, rd2 = ram(m, "gated", width=18, depth=1024, rw="dont_care", style=BLOCK)
    m.d.comb += [wr2.addr.eq(waddr), wr2.data.eq(wdata[:18]), wr2.en.eq(we),
                 rd2.addr.eq(addr)]
    with m.If(en):
        m.d.sync += y4.eq(rd2.data)
    wr3, rd3 = ram(m, "shared", width=18, depth=1024, rw="dont_care", style=BLOCK)
    m.d.comb += [wr3.addr.eq(waddr), wr3.data.eq(wdata[18:]), wr3.en.eq(we),
                 rd3.addr.eq(addr)]
    m.d.sync += y5.eq(rd3.data ^ Signal(18, name="other"))
    both = Signal(18)
    m.d.comb += both.eq(reg(m, rd3.data, 18, "shared_q") + rd3.data)
    return verilog.convert(m, name="t", ports=[addr, waddr, wdata, we, en, a14, w14,
                                               y1, y2, y3, y4, y5, both])


@pytest.fixture(scope="module")
def netlist(tmp_path_factory):
    res = synthesize(small_design(), "t", "ecp5", cache_dir=tmp_path_factory.mktemp("synth"))
    return res, json.loads(Path(res.netlist).read_text())


def tiles(netlist: dict) -> dict[str, dict]:
    return {n: c for n, c in netlist["modules"]["t"]["cells"].items() if c["type"] == "DP16KD"}


def equivalent(tmp: Path, gold: dict, gate: dict, seq: int = 8) -> bool:
    params = {p for c in tiles(gold).values() for p in c["parameters"]}
    return netlist_miter.equivalent(tmp, gold, gate, {"dp16kd_model.v": dp16kd_model(params)},
                                    seq)


def test_read_registers_move_into_the_tiles_and_nothing_changes(netlist, tmp_path):
    res, gold = netlist
    gate = json.loads(json.dumps(gold))
    moved = pack_bram_registers(gate)
    modes = {n: (c["parameters"]["REGMODE_A"], c["parameters"]["REGMODE_B"])
             for n, c in tiles(gate).items()}
    outreg = {n.split(".")[0].split("_c")[0] for n, m in modes.items() if "OUTREG" in m}
    # the 36-bit RAM, the ROM and the deep RAM's tiles; not the gated or shared ones
    assert outreg == {"pdp", "wmem", "deep"}, modes
    assert moved == sum("OUTREG" in m for m in modes.values())
    pdp = [m for n, m in modes.items() if n.startswith("pdp")]
    assert pdp and all(m == ("OUTREG", "OUTREG") for m in pdp)
    ffs = sum(c["type"] == "TRELLIS_FF" for c in gate["modules"]["t"]["cells"].values())
    assert ffs == res.ff - 36 - 18 - 2
    assert equivalent(tmp_path, gold, gate)


def test_the_check_fails_on_a_wrong_packing(netlist, tmp_path):
    _, gold = netlist
    gate = json.loads(json.dumps(gold))
    for c in tiles(gate).values():       # the gated RAM's register taken, its enable lost
        if c["parameters"].get("REGMODE_B") == "NOREG":
            c["parameters"]["REGMODE_A"] = c["parameters"]["REGMODE_B"] = "OUTREG"
            break
    assert not equivalent(tmp_path, gold, gate)


def test_packing_twice_changes_nothing(netlist):
    _, gold = netlist
    once = json.loads(json.dumps(gold))
    pack_bram_registers(once)
    twice = json.loads(json.dumps(once))
    assert pack_bram_registers(twice) == 0 and twice == once


def test_a_block_ram_fifo_keeps_its_face(tmp_path):
    """The staged FIFO of a block RAM queue: its RAM data register moves into the tiles, and
    the FIFO is the same cycle for cycle (with its LUT RAM and counters)."""
    f = BufferedFIFO(width=4, depth=600)
    text = verilog.convert(f, name="t", ports=[f.w_data, f.w_en, f.w_rdy, f.r_data, f.r_en,
                                               f.r_rdy, f.level])
    res = synthesize(text, "t", "ecp5", cache_dir=tmp_path / "synth")
    gold = json.loads(Path(res.netlist).read_text())
    gate = json.loads(json.dumps(gold))
    assert pack_bram_registers(gate) == len(tiles(gate)) > 0
    # a word reaches the RAM once the small FIFO holds five: twelve cycles see one out
    assert equivalent(tmp_path, gold, gate, seq=12)
    broken = json.loads(json.dumps(gold))
    for c in tiles(broken).values():
        c["parameters"]["REGMODE_A"] = c["parameters"]["REGMODE_B"] = "OUTREG"
    assert not equivalent(tmp_path, gold, broken, seq=12)


def test_nextpnr_places_the_packed_tiles(netlist, tmp_path):
    res, _ = netlist
    pnr = place_and_route(res, "ECP5 LFE5U-25F", 125, cache_dir=tmp_path)
    assert pnr.bram_registers == 4 and pnr.used("DP16KD") == res.bram
    assert pnr.used("TRELLIS_FF") < res.ff
    plain = place_and_route(res, "ECP5 LFE5U-25F", 125, cache_dir=tmp_path, pack_dsp=False)
    assert plain.bram_registers == 0 and plain.key != pnr.key


def test_a_matrix_units_input_buffer_moves_into_its_tiles():
    """A matrix unit with its input buffer in block RAM (``MVAUPlan.ibuf_apart``): the
    buffer's read data is registered apart from the stream word, so its tiles take that
    register, as the weight ROM's take ``w0``."""
    from hwgen.rtl_templates.mvau import MVAU, MVAUParams
    from hwgen.rtl_templates.quant import INT8, make_requant
    rng = np.random.default_rng(3)
    p = MVAUParams(rng.integers(-128, 128, (8, 256)), rng.integers(-999, 999, 8),
                   make_requant(0.001, 0, -128, 127), INT8, INT8, 4, 4)
    assert p.plan.ibuf_apart
    unit = MVAU(p)
    text = verilog.convert(unit, name="t")
    res = synthesize(text, "t", "ecp5")
    gate = json.loads(Path(res.netlist).read_text())
    moved = pack_bram_registers(gate)
    ibuf = {n: c["parameters"] for n, c in tiles(gate).items() if "ibuf" in n}
    assert ibuf and all("OUTREG" in (q["REGMODE_A"], q["REGMODE_B"]) for q in ibuf.values())
    assert moved == sum("OUTREG" in (q["REGMODE_A"], q["REGMODE_B"])
                        for q in (c["parameters"] for c in tiles(gate).values()))
