"""The output stage every block ends in (``rtl_templates/output_stage.py``), in the Verilog.

Its behaviour under stalls, its latency and its cost are checked for every block kind by the
conformance test (``test_block_conformance.py``); here, what it must build: a write register
in front of the FIFO when the block's data is logic, none when it is already a register, and
a kept write enable per slice of a wide FIFO."""
from __future__ import annotations

import re

from amaranth.back import verilog

from hwgen.rtl_templates import output_stage
from hwgen.rtl_templates.block import block_spec
from hwgen.rtl_templates.memory import fifo_slices
from hwgen.rtl_templates.pool import pipeline_depth


def _verilog(kind: str, name: str) -> tuple[object, str]:
    spec = block_spec(kind)
    ex, = (e for e in spec.examples() if e.name == name)
    return ex.params, verilog.convert(spec.component(ex.params), name="top", emit_src=False)


def test_wide_fifo_is_written_on_a_kept_enable_per_slice():
    """A max-pool of 8 lanes of int8 (its compare chain is logic): the 64-bit word enters the
    FIFO from the write register, each 32-bit slice on a kept copy of the enable."""
    p, text = _verilog("pool", "max-c16-k4-px2-pe8")
    beats = output_stage.fifo_depth(pipeline_depth(p))
    n = len(fifo_slices(64, beats))
    assert n == 2
    kept = re.findall(r"\(\* keep = 32'd1 \*\)\s+reg out_en_(\d+) ", text)
    assert sorted(kept) == [str(k) for k in range(n)]
    assert re.search(r"assign w_en_slices = \{ out_en_1, out_en_0 \};", text)


def test_registered_data_goes_straight_in():
    """An average-pool ends in the requantizer's clamp, a register: no write register."""
    _, text = _verilog("pool", "avg-c3-k9-px2-pe1")
    assert "out_data" not in text and "out_en" not in text
