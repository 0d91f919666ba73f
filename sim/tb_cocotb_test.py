"""cocotb test of a design exported by ``hwgen testbench``: plain cocotb 2, nothing else.

hwgen copies this file into an exported testbench folder (as ``test_<top>.py``); hwgen
itself never imports it. The folder's ``testbench.json`` names the top module and the
stream widths; ``input_beats.hex`` and ``expected_beats.hex`` hold one AXI4-Stream beat per
line, ``<tdata in hex> <tlast>``. The test resets the design, drives every input beat on
``s_axis``, takes the ``m_axis`` beats and compares them beat by beat (data and tlast) with
the expected ones, which come from hwgen's golden model.

Cycle discipline (the same on every simulator): inputs are written just after a falling
clock edge, then ``ReadOnly`` shows the settled values the next rising edge samples; a
transfer happens at that edge when valid and ready are both high.

A design whose weights live in SPRAM (``testbench.json``'s ``weight_load`` names a file of
16-bit words, one per line) is loaded first: after reset every word is offered on
``s_wload`` until taken; the design refuses frames until then.

Environment: ``TB_STALL`` (probability in [0, 1) that the source holds ``tvalid`` low or
the sink ``tready`` low in a cycle; default from ``testbench.json``), ``TB_SEED`` (the
stall pattern's seed).
"""
from __future__ import annotations

import json
import os
import random
from pathlib import Path

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, ReadOnly

HERE = Path(__file__).resolve().parent
RESET_CYCLES = 4
EXTRA_CYCLES = 32      # cycles watched after the last expected beat for surplus beats
SHOWN = 10             # mismatching beats listed in the log


def read_beats(name: str) -> list[tuple[int, int]]:
    """(data, tlast) of every beat in a hex file (``#`` starts a comment)."""
    beats = []
    for n, line in enumerate((HERE / name).read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            data, last = line.split()
            beats.append((int(data, 16), int(last)))
        except ValueError:
            raise ValueError(f"{name}, line {n}: expected '<hex data> <tlast>'") from None
    return beats


def elements(word: int, per_beat: int, bits: int, signed: bool) -> list[int]:
    """The elements of a beat: element k in bits [k*bits, (k+1)*bits)."""
    mask = (1 << bits) - 1
    out = []
    for k in range(per_beat):
        v = (word >> (k * bits)) & mask
        out.append(v - (1 << bits) if signed and v >> (bits - 1) else v)
    return out


def describe(k: int, got: tuple[int, int], want: tuple[int, int], out: dict) -> str:
    frame, beat = divmod(k, out["beats_per_frame"])
    g = elements(got[0], out["elements_per_beat"], out["element_bits"], out["signed"])
    w = elements(want[0], out["elements_per_beat"], out["element_bits"], out["signed"])
    lanes = [j for j in range(len(w)) if g[j] != w[j]]
    what = (f"element {beat * out['elements_per_beat'] + lanes[0]} of the frame: got "
            f"{g[lanes[0]]}, expected {w[lanes[0]]}" if lanes else
            f"tlast {got[1]}, expected {want[1]}")
    return (f"output beat {k} (frame {frame}, beat {beat}): got 0x{got[0]:x} tlast {got[1]}, "
            f"expected 0x{want[0]:x} tlast {want[1]}; {what}")


@cocotb.test()
async def stream(dut):
    cfg = json.loads((HERE / "testbench.json").read_text())
    out = cfg["output"]
    inputs = read_beats(cfg["input_beats"])
    expected = read_beats(cfg["expected_beats"])
    stall = float(os.environ.get("TB_STALL", cfg["stall"]))
    rng = random.Random(int(os.environ.get("TB_SEED", cfg["seed"])))
    max_cycles = int(cfg["max_cycles"] / max(0.05, (1 - stall) ** 2))

    dut.rst.value = 1
    dut.s_axis_tvalid.value = 0
    dut.s_axis_tdata.value = 0
    dut.s_axis_tlast.value = 0
    dut.m_axis_tready.value = 0
    if cfg.get("weight_load"):
        dut.s_wload_tvalid.value = 0
    Clock(dut.clk, 10, unit="ns").start(start_high=False)
    for _ in range(RESET_CYCLES):
        await FallingEdge(dut.clk)
    dut.rst.value = 0
    if cfg.get("weight_load"):
        words = [int(ln.split("#", 1)[0], 16) for ln in
                 (HERE / cfg["weight_load"]).read_text().splitlines()
                 if ln.split("#", 1)[0].strip()]
        k = 0
        while k < len(words):
            await FallingEdge(dut.clk)
            dut.s_wload_tdata.value = words[k]
            dut.s_wload_tvalid.value = 1
            await ReadOnly()
            if int(dut.s_wload_tready.value):
                k += 1
        await FallingEdge(dut.clk)
        dut.s_wload_tvalid.value = 0
        dut._log.info("weight load: %d words", len(words))

    got: list[tuple[int, int]] = []
    i, offering, cycle, stop_at, surplus = 0, False, 0, None, None
    while True:
        await FallingEdge(dut.clk)
        if not offering and i < len(inputs) and (not stall or rng.random() >= stall):
            dut.s_axis_tdata.value, dut.s_axis_tlast.value = inputs[i]
            offering = True
        dut.s_axis_tvalid.value = int(offering)
        ready = stop_at is not None or not stall or rng.random() >= stall
        dut.m_axis_tready.value = int(ready)
        await ReadOnly()
        if offering and int(dut.s_axis_tready.value):
            i += 1
            offering = False
        if ready and int(dut.m_axis_tvalid.value):
            beat = (int(dut.m_axis_tdata.value), int(dut.m_axis_tlast.value))
            if stop_at is not None:
                surplus = beat
                break
            got.append(beat)
            if len(got) == len(expected):
                stop_at = cycle + EXTRA_CYCLES
        cycle += 1
        if stop_at is not None and cycle >= stop_at:
            break
        if stop_at is None and cycle >= max_cycles:
            break
    await FallingEdge(dut.clk)  # leave the read-only phase before the test ends

    problems = [describe(k, g, w, out) for k, (g, w) in enumerate(zip(got, expected))
                if g != w]
    for p in problems[:SHOWN]:
        dut._log.error("MISMATCH %s", p)
    if len(problems) > SHOWN:
        dut._log.error("... and %d more mismatching beats", len(problems) - SHOWN)
    if len(got) < len(expected):
        problems.append(f"timeout: {len(got)} of {len(expected)} output beats arrived within "
                        f"{max_cycles} cycles ({i} of {len(inputs)} input beats consumed)")
        dut._log.error("%s", problems[-1])
    if surplus is not None:
        problems.append(f"a surplus output beat 0x{surplus[0]:x} after the "
                        f"{len(expected)} expected")
        dut._log.error("%s", problems[-1])
    assert not problems, (f"FAIL: {len(problems)} problem(s); first: {problems[0]}")
    dut._log.info("PASS: %d frames, %d output beats equal to the golden model's (%d cycles, "
                  "stall %.2f)", cfg["frames"], len(expected), cycle, stall)
