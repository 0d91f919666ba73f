"""Pin and clock constraints of a board top (``boards/board_top.py``): an LPF for ECP5
(nextpnr-ecp5 ``--lpf``), a PCF for iCE40 (nextpnr-ice40 ``--pcf``).

The top's pins: ``clk_in`` (the oscillator), ``uart_rx`` / ``uart_tx`` (the USB-serial
bridge, FPGA side) and ``led``, on the balls :mod:`hwgen.boards.boards` lists.

* ECP5 (ULX3S): ``LOCATE COMP`` and ``IOBUF PORT ... IO_TYPE=LVCMOS33`` for each pin (the
  ULX3S's banks run at 3.3 V), ``PULLMODE=UP`` on ``uart_rx`` (an idle line reads high
  while the bridge is not driving it, as amaranth-boards sets it), and
  ``FREQUENCY PORT "clk_in" <MHz> MHZ``: nextpnr-ecp5 carries the oscillator's frequency
  through the PLL to its output.
* iCE40 (iCEBreaker): ``set_io`` for each pin (``-pullup yes`` on ``uart_rx``) and
  ``set_frequency clk_in <MHz>``, which nextpnr-ice40 (0.11) takes in a PCF and carries
  through ``SB_PLL40_PAD`` to its output as it does for the ECP5 PLL.

The design's clock target itself is nextpnr's ``--freq`` (``place_and_route``), which
applies to every clock no constraint names.
"""
from __future__ import annotations

from hwgen.boards.boards import Board
from hwgen.errors import HwgenError

#: the ULX3S's I/O standard (all its FPGA banks at 3.3 V)
ECP5_IO_TYPE = "LVCMOS33"


def board_pins(board: Board) -> dict[str, str]:
    """The board top's port → the board's pin; HwgenError for a board without a UART."""
    uart = dict(board.uart)
    if not ("rx" in uart and "tx" in uart):
        raise HwgenError(f"board {board.id} has no USB-serial UART: hwgen's host link needs "
                         f"one (no constraints for a board top on it)")
    if not board.led_pin:
        raise HwgenError(f"board {board.id} has no user LED for the board top's status")
    return {"clk_in": board.clock_pin, "uart_rx": uart["rx"], "uart_tx": uart["tx"],
            "led": board.led_pin}


def lpf(board: Board) -> str:
    """The ECP5 LPF of ``board``'s top."""
    lines = [f"# {board.name}: pins of the hwgen board top (hwgen.boards.constraints)"]
    for port, pin in board_pins(board).items():
        pull = " PULLMODE=UP" if port == "uart_rx" else ""
        lines += [f'LOCATE COMP "{port}" SITE "{pin}";',
                  f'IOBUF PORT "{port}" IO_TYPE={ECP5_IO_TYPE}{pull};']
    lines.append(f'FREQUENCY PORT "clk_in" {board.clock_mhz:g} MHZ;')
    return "\n".join(lines) + "\n"


def pcf(board: Board) -> str:
    """The iCE40 PCF of ``board``'s top."""
    lines = [f"# {board.name}: pins of the hwgen board top (hwgen.boards.constraints)"]
    for port, pin in board_pins(board).items():
        pull = "-pullup yes " if port == "uart_rx" else ""
        lines.append(f"set_io {pull}{port} {pin}")
    lines.append(f"set_frequency clk_in {board.clock_mhz:g}")
    return "\n".join(lines) + "\n"


def constraints_file(board: Board, top: str) -> tuple[str, str]:
    """(file name, text) of the constraints of ``board``'s top ``top``: ``<top>.lpf`` for
    ECP5, ``<top>.pcf`` for iCE40."""
    family = board.device.family
    if family == "ecp5":
        return f"{top}.lpf", lpf(board)
    if family == "ice40":
        return f"{top}.pcf", pcf(board)
    raise HwgenError(f"no constraints format for FPGA family {family!r}")
