"""``hwgen flash``: the bitstream of a folder ``hwgen build`` wrote onto its board, through
openFPGALoader (:mod:`hwgen.boards.program`).

``build.json`` names the board and the bitstream. By default the bitstream goes to the
FPGA's configuration SRAM (running at once, gone at power-off); ``write_flash`` writes the
configuration flash instead (the board loads it at every power-on). ``dry_run`` only gives
the command line.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from hwgen.boards import program
from hwgen.boards.boards import Board, board_by_name
from hwgen.errors import HwgenError
from hwgen.io import BUILD_JSON


@dataclass(frozen=True)
class Flashed:
    board: Board
    bitstream: Path
    memory: str                  # "sram" | "flash"
    command: list[str]
    ran: bool                    # False: a dry run

    @property
    def command_line(self) -> str:
        return program.shell_line(self.command)

    def summary(self) -> str:
        where = "configuration flash" if self.memory == "flash" else "SRAM"
        if not self.ran:
            return self.command_line
        return f"loaded {self.bitstream} into the {where} of the {self.board.id}"


def build_target(build_dir) -> tuple[Board, Path]:
    """The board and the bitstream ``build_dir``'s ``build.json`` names."""
    d = Path(build_dir)
    if not d.is_dir():
        raise HwgenError(f"{d}: no such folder (give a folder 'hwgen build' wrote)")
    try:
        doc = json.loads((d / BUILD_JSON).read_text())
        board_id, bit = doc["board"]["id"], doc["files"]["bitstream"]
    except (OSError, ValueError, KeyError, TypeError):
        raise HwgenError(f"{d}: no readable {BUILD_JSON} naming a board and a bitstream (a "
                         f"folder 'hwgen build' wrote)") from None
    bitstream = d / bit
    if not bitstream.is_file():
        raise HwgenError(f"{d}: the bitstream {bit} that {BUILD_JSON} names is missing")
    return board_by_name(board_id), bitstream


def flash(build_dir, *, write_flash: bool = False, dry_run: bool = False,
          echo=None) -> Flashed:
    """Load the bitstream of ``build_dir`` onto its board (see the module's note)."""
    board, bitstream = build_target(build_dir)
    memory = "flash" if write_flash else "sram"
    if dry_run:
        cmd = program.command(board, bitstream, flash=write_flash)
        return Flashed(board, bitstream, memory, cmd, False)
    done = program.program(board, bitstream, flash=write_flash, echo=echo)
    return Flashed(board, bitstream, memory, done.command, True)
