"""cocotb test bench implementing the :class:`sim.base.StreamJob` semantics.

Loaded inside the Verilator simulation process by :func:`sim.verilator.run_verilator`; it
talks to the caller only through two JSON files named by environment variables:

* ``HWGEN_VL_JOB``: the job (beats as hex strings, since they can exceed 64 bits, plus the
  resolved ``max_cycles`` and ``extra_cycles``);
* ``HWGEN_VL_RESULT``: written at the end with ``status`` = ``"ok"``, ``"timeout"`` or
  ``"extra"`` (more output beats than expected), the collected beats and the timings.

Timing model (relies on how cocotb drives Verilator, see ``verilator.cpp`` of cocotb):
the ``RisingEdge(clk)`` callback runs *before* Verilator evaluates that edge, so the values
read there are the settled pre-edge values, i.e. exactly what the design samples at the
edge. Writes made there are inertial (``COCOTB_TRUST_INERTIAL_WRITES=1``, set by the
runner): they are applied after the edge and hence hold for the next one. So one
``await RisingEdge`` per cycle suffices: read what transferred at this edge, then drive the
next cycle.
"""
from __future__ import annotations

import json
import os
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import RisingEdge

RESET_CYCLES = 4


@cocotb.test()
async def stream(dut):
    with open(os.environ["HWGEN_VL_JOB"]) as f:
        job = json.load(f)
    beats = [int(b, 16) for b in job["in_beats"]]
    lasts = [int(bool(b)) for b in job["in_last"]]
    n_in, n_out = len(beats), job["n_out_beats"]
    stall_in, stall_out = job["stall_in"], job["stall_out"]
    max_cycles, extra_cycles = job["max_cycles"], job["extra_cycles"]
    rng = random.Random(job["seed"])
    rand = rng.random

    # Handle look-ups are not free: do them once.
    clk, rst = dut.clk, dut.rst
    s_data, s_valid, s_ready, s_last = (dut.s_axis_tdata, dut.s_axis_tvalid,
                                        dut.s_axis_tready, dut.s_axis_tlast)
    m_data, m_valid, m_ready, m_last = (dut.m_axis_tdata, dut.m_axis_tvalid,
                                        dut.m_axis_tready, dut.m_axis_tlast)

    rst.value = 1
    s_valid.value = 0
    s_data.value = 0
    s_last.value = 0
    m_ready.value = 0
    Clock(clk, 10, unit="ns").start(start_high=False)
    edge = RisingEdge(clk)
    for _ in range(RESET_CYCLES):
        await edge
    rst.value = 0  # applies after this edge: the next edge is cycle 0

    in_times: list[int] = []
    out_beats: list[int] = []
    out_last: list[int] = []
    out_times: list[int] = []
    i = 0                 # next input beat to offer
    offering = False      # s_axis_tvalid is high with beats[i] on the bus
    valid_hi = False      # value currently driven on s_axis_tvalid
    ready_hi = False      # value currently driven on m_axis_tready
    # Cycle at which to stop; set once all outputs arrived (then m_axis_tready stays
    # high for `extra_cycles` more cycles to catch surplus beats).
    stop_at = extra_cycles if n_out == 0 else -1
    status = "timeout"
    cycle = 0
    while True:
        # Drive the inputs for `cycle` (they take effect after the previous edge).
        if not offering and i < n_in and (not stall_in or rand() >= stall_in):
            # AXI: a beat once offered stays on the bus until it is taken, so the
            # random stall only decides when to start offering the next beat.
            s_data.value = beats[i]
            s_last.value = lasts[i]
            offering = True
        if offering != valid_hi:
            valid_hi = offering
            s_valid.value = int(offering)
        ready = stop_at >= 0 or not stall_out or rand() >= stall_out
        if ready != ready_hi:
            ready_hi = ready
            m_ready.value = int(ready)

        await edge
        # Pre-edge values: what the design sees at the edge ending `cycle`.
        if offering and s_ready.value:
            in_times.append(cycle)
            i += 1
            offering = False
        if ready and m_valid.value:
            if stop_at >= 0:
                status = "extra"  # a beat beyond the expected n_out
                cycle += 1
                break
            out_beats.append(int(m_data.value))
            out_last.append(int(m_last.value))
            out_times.append(cycle)
            if len(out_beats) == n_out:
                stop_at = cycle + extra_cycles
        cycle += 1
        if cycle >= stop_at >= 0:
            status = "ok"
            break
        if cycle >= max_cycles and stop_at < 0:
            break

    result = {
        "status": status,
        "cycles": cycle,
        "out_beats": [format(b, "x") for b in out_beats],
        "out_last": out_last,
        "in_times": in_times,
        "out_times": out_times,
    }
    tmp = os.environ["HWGEN_VL_RESULT"] + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f)
    os.replace(tmp, os.environ["HWGEN_VL_RESULT"])
