"""The board top: a compiled core, its clock, its reset, its host link and a status LED.

``BoardTop`` has only pins: ``clk_in`` (the board's oscillator), ``uart_rx`` (into the
FPGA, from the USB-serial bridge), ``uart_tx`` (out to it) and ``led``. Inside:

* **clock**: the oscillator through the family's PLL (:mod:`hwgen.boards.pll`: ECP5
  ``EHXPLLL`` fed back from CLKOP, iCE40 ``SB_PLL40_PAD`` on the oscillator's pad) drives
  the one clock domain ``sync`` (its clock net is ``clk``); a target equal to the oscillator
  takes the pin as it is (no PLL, "locked" from the start);
* **reset**: :class:`ResetSync` holds ``sync``'s reset while the PLL is not locked and for
  :data:`RESET_CYCLES` clock cycles after it locks: asserted asynchronously (a lost lock
  resets at once, with or without a clock), released synchronously to the PLL's clock. The
  core's ``rst`` (synchronous, active high) and the link's reset are that reset, each from a
  copy of its last register (released a cycle later; the copies split the fan-out);
* **register slices** (:func:`slice_stream`): 2-word FIFOs with registered flags on the
  streams from the core to the link (its output, the weight load), so neither side's
  control reaches the other's logic. The core's input takes the link's beat register
  directly: that register is held until taken and its valid is a flip-flop, and a slice
  between them would be another copy of a word that can be thousands of bits wide, read on
  one ready across every one of its FIFO slices;
* **host link**: a component with the interface of ``rtl_templates/host_link.py``'s
  ``HostLink`` (UART pins ``rx``/``tx``, the core's AXI4-Stream ports seen from the other
  side, the weight-load stream when the core has one, status ``busy`` and ``error``), in the
  same clock as the core. The pins connect to it directly: the link's UART receiver
  synchronizes ``rx`` (two flip-flops, ``rtl_templates/uart.py``);
* **the core**: ``Instance(core_top, i_clk=..., i_rst=..., ...)``: its Verilog follows the
  top's in the text :func:`board_top_verilog` returns;
* **the LED** (:func:`led_state`): off in reset (PLL not locked, or the reset still held);
  on, steady, when running and idle; blinking at about :data:`BUSY_BLINK_HZ` while the link
  is busy (a frame or a weight load in flight); blinking fast, about
  :data:`ERROR_BLINK_HZ`, while the link reports an error. The iCEBreaker's LED is lit by a
  low level (:data:`LED_ACTIVE_LOW`).

The UART runs at ``baud`` (default :data:`DEFAULT_BAUD`; at most the board's bridge allows,
:data:`MAX_BAUD`): ``divisor`` = round(clock / baud) cycles per bit, refused when the baud
rate it gives is more than :data:`MAX_BAUD_ERROR` off.
"""
from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from amaranth.back import verilog
from amaranth.hdl import Cat, ClockDomain, ClockSignal, Const, Instance, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hwgen.boards.boards import Board
from hwgen.boards.pll import PllSettings, pll_settings
from hwgen.boards.synth import check_identifier, verilog_ports
from hwgen.errors import HwgenError
from hwgen.rtl_templates.fifo import FIFOParams
from hwgen.rtl_templates.fifo import cost as fifo_cost
from hwgen.rtl_templates.host_link import HostLink, LinkParams
from hwgen.rtl_templates.host_link import resources as link_resources
from hwgen.rtl_templates.memory import BufferedFIFO
from hwgen.rtl_templates.spram import LOAD_BITS

#: cycles the reset is held after the PLL locks
RESET_CYCLES = 8
#: the UART's baud rate unless told
DEFAULT_BAUD = 115200
#: the fastest baud rate of each board's USB-serial bridge (iCEBreaker: FTDI FT2232H;
#: ULX3S: FTDI FT231X; both 3 Mbaud)
MAX_BAUD = {"icebreaker": 3_000_000, "ulx3s-25f": 3_000_000, "ulx3s-85f": 3_000_000}
#: the largest relative baud rate error the divisor may leave
MAX_BAUD_ERROR = 0.02
#: fewest clock cycles per UART bit (a receiver samples a bit in its middle)
MIN_DIVISOR = 4
#: boards whose LED lights at a low level
LED_ACTIVE_LOW = frozenset({"icebreaker"})
#: LED blink rates (Hz, about: a power of two of the clock) while busy and on an error
BUSY_BLINK_HZ = 4.0
ERROR_BLINK_HZ = 16.0
#: the name of the design's clock net (nextpnr reports fmax by it; without a PLL the pin's)
CLOCK_NET = "clk"


@dataclass(frozen=True)
class CorePorts:
    """The stream ports of a compiled core (``manifest.json``'s ``ports`` and beats)."""
    in_width: int                # s_axis_tdata bits
    in_beats: int                # input beats per frame
    out_width: int               # m_axis_tdata bits
    out_beats: int               # output beats per frame
    loads: bool = False          # has the 16-bit weight-load input s_wload_*

    @classmethod
    def from_manifest(cls, manifest: dict) -> CorePorts:
        try:
            ports = manifest["ports"]
            return cls(int(ports["input"]["bits"]), int(manifest["input"]["beats_per_frame"]),
                       int(ports["output"]["bits"]),
                       int(manifest["output"]["beats_per_frame"]), "weight_load" in ports)
        except (KeyError, TypeError, ValueError):
            raise HwgenError("the manifest does not name the core's stream ports and beats "
                             "(ports.input.bits, input.beats_per_frame, ...)") from None

    def verilog_ports(self) -> dict[str, tuple[str, int]]:
        """The core's ports: name → (direction, width)."""
        ports = {"clk": ("input", 1), "rst": ("input", 1),
                 "s_axis_tdata": ("input", self.in_width), "s_axis_tvalid": ("input", 1),
                 "s_axis_tready": ("output", 1), "s_axis_tlast": ("input", 1),
                 "m_axis_tdata": ("output", self.out_width), "m_axis_tvalid": ("output", 1),
                 "m_axis_tready": ("input", 1), "m_axis_tlast": ("output", 1)}
        if self.loads:
            ports |= {"s_wload_tdata": ("input", 16), "s_wload_tvalid": ("input", 1),
                      "s_wload_tready": ("output", 1)}
        return ports


@dataclass(frozen=True)
class UartTiming:
    baud: int                    # asked for
    divisor: int                 # clock cycles per bit
    actual_baud: float           # clock / divisor
    clock_mhz: float

    @property
    def error_percent(self) -> float:
        return 100.0 * (self.actual_baud - self.baud) / self.baud

    def as_dict(self) -> dict:
        return {"baud": self.baud, "divisor": self.divisor,
                "actual_baud": round(self.actual_baud, 3),
                "baud_error_percent": round(self.error_percent, 4)}


def uart_timing(clock_mhz: float, baud: int, max_baud: int | None = None) -> UartTiming:
    """Cycles per UART bit at ``clock_mhz``; HwgenError when the baud rate is above
    ``max_baud``, too fast for the clock, or more than 2 % off."""
    if not isinstance(baud, int) or baud <= 0:
        raise HwgenError(f"the baud rate must be a positive whole number (got {baud!r})")
    if max_baud is not None and baud > max_baud:
        raise HwgenError(f"{baud} baud is above the board's USB-serial bridge's "
                         f"{max_baud} baud")
    divisor = round(clock_mhz * 1e6 / baud)
    if divisor < MIN_DIVISOR:
        raise HwgenError(f"{baud} baud is too fast for a {clock_mhz:g} MHz clock "
                         f"({MIN_DIVISOR} clock cycles per bit at least)")
    t = UartTiming(baud, divisor, clock_mhz * 1e6 / divisor, float(clock_mhz))
    if abs(t.actual_baud - baud) > MAX_BAUD_ERROR * baud:
        raise HwgenError(f"{baud} baud from a {clock_mhz:g} MHz clock is {t.error_percent:+.2f} "
                         f"% off (divisor {divisor}; 2 % at most): choose another baud rate "
                         f"or clock")
    return t


class ResetSync(wiring.Component):
    """``rst`` high while ``locked`` is low and for ``cycles`` cycles of the ``sync`` clock
    after it rises: asserted asynchronously, released on a ``sync`` clock edge (a chain of
    ``cycles`` flip-flops reset asynchronously by ``~locked``, shifting in 0). ``cycles`` >= 2
    (the first stages resolve a release close to a clock edge)."""

    def __init__(self, cycles: int = RESET_CYCLES):
        if cycles < 2:
            raise ValueError("a reset synchronizer needs 2 stages at least")
        self.cycles = cycles
        super().__init__({"locked": In(1), "rst": Out(1, init=1)})

    def elaborate(self, platform):
        m = Module()
        m.domains.hold = cd = ClockDomain("hold", async_reset=True, local=True)
        m.d.comb += [cd.clk.eq(ClockSignal("sync")), cd.rst.eq(~self.locked)]
        chain = Signal(self.cycles, init=(1 << self.cycles) - 1)
        m.d.hold += chain.eq(Cat(chain[1:], Const(0, 1)))
        m.d.comb += self.rst.eq(chain[0])
        return m


def blink_bit(clock_hz: float, hz: float) -> int:
    """The bit of a free-running counter that toggles at about ``hz`` (a square wave of
    clock / 2^(bit+1))."""
    return max(0, round(math.log2(clock_hz / (2 * hz))))


def led_state(in_reset, busy, error, slow, fast):
    """The LED's lit state: off in reset; the fast square wave on an error; the slow one
    while busy; else on."""
    return Mux(in_reset, 0, Mux(error, fast, Mux(busy, slow, 1)))


class BoardTop(wiring.Component):
    """A board's pins around a core (``core_top``, a Verilog module given later), a host
    ``link`` and the PLL of ``pll`` (see the module's notes)."""

    def __init__(self, core_top: str, ports: CorePorts, link, pll: PllSettings, *,
                 led_active_low: bool = False, reset_cycles: int = RESET_CYCLES):
        self.core_top = check_identifier(core_top, "core module")
        self.ports = ports
        self.link = link
        self.pll = pll
        self.led_active_low = bool(led_active_low)
        self.reset_cycles = reset_cycles
        super().__init__({"clk_in": In(1), "uart_rx": In(1), "uart_tx": Out(1),
                          "led": Out(1)})

    def _pll(self, m: Module, clk: Signal, locked: Signal):
        p = self.pll
        if p.bypass:
            m.d.comb += [clk.eq(self.clk_in), locked.eq(1)]
            return
        params = {f"p_{k}": v for k, v in p.parameters().items()}
        if p.primitive == "EHXPLLL":
            m.submodules.pll = Instance(
                "EHXPLLL",
                a_FREQUENCY_PIN_CLKI=f"{p.input_mhz:g}",
                a_FREQUENCY_PIN_CLKOP=f"{p.achieved_mhz:.6g}",
                a_ICP_CURRENT="12", a_LPF_RESISTOR="8", a_MFG_ENABLE_FILTEROPAMP="1",
                a_MFG_GMCREF_SEL="2", **params,
                i_RST=0, i_STDBY=0, i_CLKI=self.clk_in, o_CLKOP=clk, i_CLKFB=clk,
                i_PHASESEL0=0, i_PHASESEL1=0, i_PHASEDIR=1, i_PHASESTEP=1,
                i_PHASELOADREG=1, i_PLLWAKESYNC=0, i_ENCLKOP=0, o_LOCK=locked)
        elif p.primitive == "SB_PLL40_PAD":
            m.submodules.pll = Instance(
                "SB_PLL40_PAD", **params,
                i_PACKAGEPIN=self.clk_in, o_PLLOUTGLOBAL=clk, i_RESETB=1, i_BYPASS=0,
                o_LOCK=locked)
        else:
            raise HwgenError(f"no board top for the PLL primitive {p.primitive!r}")

    def _global_reset(self, m: Module, rst: Signal, side: str):
        """``rst`` for the core or the link side: on ECP5 through a global buffer (DCCA),
        so that it reaches the synchronous resets of every flip-flop over the clock network
        (the core's reset register driving them through the fabric routed 7.9 ns across an
        LFE5U-85F in the digits CNN and 12.5 ns in ResNet-8; the link side's reached the
        digits MLP's input FIFO in 7.4 ns); elsewhere (iCE40, a simulation without the
        PLL) as it is."""
        if self.pll.bypass or self.pll.primitive != "EHXPLLL":
            return rst
        out = Signal(name=f"rst_{side}_global")
        m.submodules[f"rst_{side}_global"] = Instance("DCCA", i_CLKI=rst, i_CE=1, o_CLKO=out)
        return out

    def elaborate(self, platform):
        m = Module()
        m.domains.sync = cd = ClockDomain("sync")
        locked = Signal()
        self._pll(m, cd.clk, locked)

        m.submodules.reset = rs = ResetSync(self.reset_cycles)
        m.d.comb += rs.locked.eq(locked)
        # the synchronizer's last stage copied once for the link side and once for the core,
        # each register kept (boards/synth.py: KEEP_COPIES) so the tools place it near its
        # loads: one reset register driving every flip-flop routed 7 ns on an LFE5U-85F.
        # Asserted asynchronously with the synchronizer, released one cycle after it.
        m.domains.rst_fanout = fo = ClockDomain("rst_fanout", async_reset=True, local=True)
        m.d.comb += [fo.clk.eq(cd.clk), fo.rst.eq(~locked)]
        rst_link = Signal(init=1, attrs={"keep": 1}, name="rst_link")
        rst_core = Signal(init=1, attrs={"keep": 1}, name="rst_core")
        m.d.rst_fanout += [rst_link.eq(rs.rst), rst_core.eq(rs.rst)]
        m.d.comb += cd.rst.eq(self._global_reset(m, rst_link, "link"))

        link = self.link
        m.submodules.link = link
        m.d.comb += [link.rx.eq(self.uart_rx), self.uart_tx.eq(link.tx)]

        # the input: the link's beat register (held until taken, valid from a flip-flop)
        # straight into the core's input FIFO, each of whose slices decides its own write
        # enable from the one valid. Register slices (2-word FIFOs, both sides' flags from
        # flip-flops) on the output and the weight load.
        s_out_data = Signal(self.ports.out_width)
        s_out_last, s_out_valid, s_out_ready = Signal(), Signal(), Signal()
        out = slice_stream(m, "slice_out", s_out_data, s_out_last, s_out_valid, s_out_ready)
        m.d.comb += [link.m_axis_tdata.eq(out.data), link.m_axis_tlast.eq(out.last),
                     link.m_axis_tvalid.eq(out.valid), out.ready.eq(link.m_axis_tready)]
        conns = dict(i_clk=cd.clk, i_rst=self._global_reset(m, rst_core, "core"),
                     i_s_axis_tdata=link.s_axis_tdata, i_s_axis_tvalid=link.s_axis_tvalid,
                     o_s_axis_tready=link.s_axis_tready, i_s_axis_tlast=link.s_axis_tlast,
                     o_m_axis_tdata=s_out_data, o_m_axis_tvalid=s_out_valid,
                     i_m_axis_tready=s_out_ready, o_m_axis_tlast=s_out_last)
        if self.ports.loads:
            w = slice_stream(m, "slice_wload", link.s_wload_tdata, None,
                             link.s_wload_tvalid, link.s_wload_tready)
            conns |= dict(i_s_wload_tdata=w.data, i_s_wload_tvalid=w.valid,
                          o_s_wload_tready=w.ready)
        m.submodules.core = Instance(self.core_top, **conns)

        hz = self.pll.achieved_mhz * 1e6
        slow, fast = blink_bit(hz, BUSY_BLINK_HZ), blink_bit(hz, ERROR_BLINK_HZ)
        count = Signal(max(slow, fast) + 1)
        m.d.sync += count.eq(count + 1)
        lit = led_state(cd.rst, link.busy, link.error, count[slow], count[fast])
        m.d.comb += self.led.eq(~lit if self.led_active_low else lit)
        return m


@dataclass
class Sliced:
    """The far side of a register slice: the stream's data, last, valid (outputs of the
    slice) and ready (its input)."""
    data: object
    last: object
    valid: Signal
    ready: Signal


def slice_stream(m: Module, name: str, data, last, valid, ready) -> Sliced:
    """A register slice on a stream whose producer drives ``data``/``last``/``valid`` and
    takes ``ready`` (driven here): a 2-word :class:`~rtl_templates.memory.BufferedFIFO`,
    whose ``w_rdy`` and ``r_rdy`` are flip-flops, full throughput. ``last`` None: no last."""
    width = len(data) + (0 if last is None else 1)
    m.submodules[name] = fifo = BufferedFIFO(width=width, depth=2)
    m.d.comb += [fifo.w_data.eq(data if last is None else Cat(data, last)),
                 fifo.w_en.eq(valid), ready.eq(fifo.w_rdy)]
    out = Sliced(fifo.r_data[:len(data)], None if last is None else fifo.r_data[-1],
                 fifo.r_rdy, Signal(name=f"{name}_ready"))
    m.d.comb += fifo.r_en.eq(out.ready)
    return out


def check_core(core_verilog: str, core_top: str, ports: CorePorts) -> None:
    """HwgenError unless module ``core_top`` of ``core_verilog`` has the ports the manifest
    describes."""
    want = ports.verilog_ports()
    have = {p.name: (p.direction, p.width) for p in verilog_ports(core_verilog, core_top)}
    if have != want:
        diff = sorted(set(have.items()) ^ set(want.items()))
        raise HwgenError(f"module {core_top}'s ports do not match its manifest: "
                         + ", ".join(f"{n} {d} {w}" for n, (d, w) in diff))


def board_clock(board: Board, freq_mhz: float) -> PllSettings:
    """The PLL settings making ``freq_mhz`` from ``board``'s oscillator."""
    return pll_settings(board.device.family, board.clock_mhz, freq_mhz)


def board_top_verilog(board: Board, core_verilog: str, core_top: str, manifest: dict,
                      freq_mhz: float, baud: int | None = None, *,
                      link: Callable[[CorePorts, int], object] | None = None,
                      bypass_pll: bool = False) -> tuple[str, str, dict]:
    """The board top around a compiled core → (Verilog of the top followed by the core's,
    the top's name ``<core_top>_board``, info).

    ``info`` (JSON-ready): ``pll`` (:meth:`PllSettings.as_dict`), ``clock_mhz`` (the clock
    the design runs at), ``clock_net`` (its net, for nextpnr's report), ``link`` (baud rate,
    divisor, error, pins, LED), ``link_estimate`` (:func:`link_estimate`: the host link's
    resources, per kind); :func:`board_clock` gives the :class:`PllSettings` object itself.
    ``link``: the function building the host link for the core's ports and the divisor,
    ``link(ports: CorePorts, divisor: int)`` → a component with the interface of
    ``HostLink`` (see the module's notes); None: :func:`host_link`. ``bypass_pll``: no
    PLL, the clock pin is taken as a ``freq_mhz`` clock (a simulation of the top, which has
    no model of the PLL primitives)."""
    if not board.uart:
        raise HwgenError(f"board {board.id} has no USB-serial UART: hwgen's host link needs "
                         f"one (boards with one: "
                         f"{', '.join(sorted(MAX_BAUD))})")
    ports = CorePorts.from_manifest(manifest)
    check_core(core_verilog, core_top, ports)
    pll = (PllSettings(board.device.family, float(freq_mhz), float(freq_mhz),
                       float(freq_mhz)) if bypass_pll else board_clock(board, freq_mhz))
    uart = uart_timing(pll.achieved_mhz, DEFAULT_BAUD if baud is None else baud,
                       MAX_BAUD.get(board.id))
    name = f"{core_top}_board"
    if re.search(rf"\bmodule\s+\\?{re.escape(name)}\b", core_verilog):
        raise HwgenError(f"the core's Verilog already has a module named {name}")
    make_link = host_link if link is None else link
    top = BoardTop(core_top, ports, make_link(ports, uart.divisor), pll,
                   led_active_low=board.id in LED_ACTIVE_LOW)
    text = verilog.convert(top, name=name, emit_src=False)
    pins = dict(board.uart)
    info = {"pll": pll.as_dict(), "clock_mhz": pll.achieved_mhz,
            "clock_net": "clk_in" if pll.bypass else CLOCK_NET,
            "link": uart.as_dict() | {
                "rx_pin": pins.get("rx"), "tx_pin": pins.get("tx"),
                "led_pin": board.led_pin,
                "led": "off in reset, on when idle, blinking ~4 Hz while busy, "
                       "~16 Hz on an error"},
            "link_estimate": link_estimate(ports, uart.divisor, board.device.family)}
    return text.rstrip("\n") + "\n\n" + core_verilog, name, info


def host_link(ports: CorePorts, divisor: int) -> HostLink:
    """The host link (``rtl_templates/host_link.py``) for a core with ``ports``, ``divisor``
    clock cycles per UART bit."""
    return HostLink(ports.in_width, ports.in_beats, ports.out_width, ports.out_beats,
                    divisor, ports.loads)


def link_estimate(ports: CorePorts, divisor: int, family: str) -> dict:
    """The host link's estimated resources on ``family``, with the register slices between
    it and the core (lut4, ff, carry, ... as the core's estimate counts them)."""
    total = link_resources(LinkParams(ports.in_width, ports.in_beats, ports.out_width,
                                      ports.out_beats, divisor, ports.loads), family)
    widths = [ports.out_width + 1] + ([LOAD_BITS] if ports.loads else [])
    for w in widths:        # the register slices between the link and the core
        total = total + fifo_cost(FIFOParams(w, 2, 1)).resources(family)
    return total.as_dict()
