"""cocotb test bench implementing the :class:`sim.base.StreamJob` semantics.

Loaded inside the Verilator simulation process by :func:`sim.verilator.run_verilator`; it
talks to the caller only through two JSON files named by environment variables:

* ``HWGEN_VL_JOB``: the job (beats as hex strings, since they can exceed 64 bits, plus the
  resolved ``max_cycles`` and ``extra_cycles``);
* ``HWGEN_VL_RESULT``: written at the end with ``status`` = ``"ok"``, ``"timeout"`` or
  ``"extra"`` (more output beats than expected), the collected beats and the timings.

Timing model (relies on how cocotb drives Verilator, see cocotb's ``verilator.cpp``): the
``RisingEdge(clk)`` callback runs *before* Verilator evaluates that edge, so the values read
there are the settled pre-edge values, i.e. exactly what the design samples at the edge.
Writes made there are inertial (``COCOTB_TRUST_INERTIAL_WRITES=1``, set by the runner):
they are applied after the edge and hence hold for the next one. So one ``await
RisingEdge`` per cycle suffices: first read what transferred at this edge, then drive the
next cycle.

Stall randomness (one ``random.Random(seed)`` stream), per cycle in this order: if no input
beat is on the bus and beats remain, one draw decides whether to offer the next beat
(stall if ``< stall_in``); then one draw decides ``m_axis_tready`` (low if ``< stall_out``).
A probability of 0 consumes no draws.

Weight load (``load_beats``, a design with the ``s_wload_*`` input): after reset the words
are offered one per cycle until each is taken, before the stream loop; ``load_cycles`` counts
those cycles, and the stream loop's cycles count from the cycle after.
"""
from __future__ import annotations

import functools
import json
import os
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import RisingEdge

RESET_CYCLES = 4
_DEPOSIT = 0  # cocotb.handle._GPISetAction.DEPOSIT


def _accessors(handle):
    """Return ``(get, set)`` functions moving Python ints in/out of a signal.

    cocotb's public ``.value`` builds ``Logic``/``LogicArray`` objects on every access, which
    costs about half of the per-cycle time. When the runner trusts inertial writes, a
    ``.value = x`` is just a call on the underlying GPI object, so calling it directly is
    equivalent; we do that and fall back to the public API if the GPI object looks
    different (other cocotb version) or writes are not trusted.
    """
    width = len(handle)
    raw = getattr(handle, "_handle", None)
    trusted = os.environ.get("COCOTB_TRUST_INERTIAL_WRITES", "").strip().lower()
    fast = (trusted in ("1", "yes", "y", "on", "true", "enable")
            and all(hasattr(raw, a) for a in ("get_signal_val_long", "set_signal_val_int",
                                               "get_signal_val_binstr",
                                               "set_signal_val_binstr")))
    if not fast:
        def get():
            return int(handle.value)

        def set_(v):
            handle.value = v
    elif width <= 32:
        # Bound methods / partials are C calls: no Python frame per access.
        get_long = raw.get_signal_val_long
        if width < 32:
            get = get_long  # non-negative below 32 bits
        else:
            def get():
                return get_long() & 0xFFFF_FFFF  # may come back signed
        set_ = functools.partial(raw.set_signal_val_int, _DEPOSIT)
    else:
        get_bin, set_bin, fmt = raw.get_signal_val_binstr, raw.set_signal_val_binstr, f"0{width}b"

        def get():
            return int(get_bin(), 2)

        def set_(v):
            set_bin(_DEPOSIT, format(v, fmt))
    return get, set_


@cocotb.test()
async def stream(dut):
    with open(os.environ["HWGEN_VL_JOB"]) as f:
        job = json.load(f)
    beats = [int(b, 16) for b in job["in_beats"]]
    lasts = [int(bool(b)) for b in job["in_last"]]
    n_in, n_out = len(beats), job["n_out_beats"]
    stall_in, stall_out = job["stall_in"], job["stall_out"]
    max_cycles, extra_cycles = job["max_cycles"], job["extra_cycles"]
    rand = random.Random(job["seed"]).random

    dut.rst.value = 1
    dut.s_axis_tvalid.value = 0
    dut.s_axis_tdata.value = 0
    dut.s_axis_tlast.value = 0
    dut.m_axis_tready.value = 0
    if job.get("load_beats"):
        dut.s_wload_tvalid.value = 0
    Clock(dut.clk, 10, unit="ns").start(start_high=False)
    edge = RisingEdge(dut.clk)
    for _ in range(RESET_CYCLES):
        await edge
    dut.rst.value = 0  # applies after this edge: the next edge is cycle 0

    _, set_s_data = _accessors(dut.s_axis_tdata)
    _, set_s_valid = _accessors(dut.s_axis_tvalid)
    _, set_s_last = _accessors(dut.s_axis_tlast)
    get_s_ready, _ = _accessors(dut.s_axis_tready)
    get_m_data, _ = _accessors(dut.m_axis_tdata)
    get_m_valid, _ = _accessors(dut.m_axis_tvalid)
    get_m_last, _ = _accessors(dut.m_axis_tlast)
    _, set_m_ready = _accessors(dut.m_axis_tready)

    load_cycles = 0
    if job.get("load_beats"):
        _, set_w_data = _accessors(dut.s_wload_tdata)
        _, set_w_valid = _accessors(dut.s_wload_tvalid)
        get_w_ready, _ = _accessors(dut.s_wload_tready)
        set_w_valid(1)
        for word in job["load_beats"]:
            set_w_data(word)
            while True:
                await edge
                load_cycles += 1
                if get_w_ready():
                    break
                if load_cycles >= max_cycles:
                    raise RuntimeError(f"the weight load stopped after {load_cycles} cycles")
        set_w_valid(0)

    in_times: list[int] = []
    out_beats: list[int] = []
    out_last: list[int] = []
    out_times: list[int] = []
    i = 0                 # next input beat to offer
    offering = False      # s_axis_tvalid is high with beats[i] on the bus
    valid_hi = False      # value currently driven on s_axis_tvalid
    ready_hi = False      # value currently driven on m_axis_tready
    last_hi = 0           # value currently driven on s_axis_tlast
    # Cycle at which to stop; set once all outputs arrived (from then on m_axis_tready
    # stays high for `extra_cycles` more cycles to catch surplus beats).
    stop_at = extra_cycles if n_out == 0 else -1
    status = "timeout"
    cycle = 0
    while True:
        # Drive the inputs for `cycle` (they take effect after the previous edge).
        if not offering and i < n_in and (not stall_in or rand() >= stall_in):
            # AXI: a beat once offered stays on the bus until it is taken, so the
            # random stall only decides when to start offering the next beat.
            set_s_data(beats[i])
            if lasts[i] != last_hi:
                last_hi = lasts[i]
                set_s_last(last_hi)
            offering = True
        if offering != valid_hi:
            valid_hi = offering
            set_s_valid(int(offering))
        ready = stop_at >= 0 or not stall_out or rand() >= stall_out
        if ready != ready_hi:
            ready_hi = ready
            set_m_ready(int(ready))

        await edge
        # Pre-edge values: what the design sees at the edge ending `cycle`.
        if offering and get_s_ready():
            in_times.append(cycle)
            i += 1
            offering = False
        if ready and get_m_valid():
            if stop_at >= 0:
                status = "extra"  # a beat beyond the expected n_out
                cycle += 1
                break
            out_beats.append(get_m_data())
            out_last.append(get_m_last())
            out_times.append(cycle)
            if len(out_beats) == n_out:
                stop_at = cycle + 1 + extra_cycles
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
        "load_cycles": load_cycles,
    }
    path = os.environ["HWGEN_VL_RESULT"]
    with open(path + ".tmp", "w") as f:
        f.write(json.dumps(result))  # json.dump(obj, file) is the slow pure-Python encoder
    os.replace(path + ".tmp", path)  # the file appears only when complete
