"""Amaranth's own simulator as a back end: no compiler needed, slower than Verilator."""
from __future__ import annotations

import random

from amaranth.sim import Simulator

from hwgen.sim.base import SimTimeout, StreamJob, StreamResult, default_max_cycles


def run_amaranth(top, job: StreamJob) -> StreamResult:
    """Simulate ``top`` (an :class:`rtl_templates.axis_top.AxisTop`-like component) on ``job``."""
    res = StreamResult(out_beats=[], out_last=[])
    limit = default_max_cycles(job)

    async def bench(ctx):
        rng = random.Random(job.seed)
        k, offering, cycle, idle_after = 0, False, 0, None
        n_in = len(job.in_beats)
        while True:
            if not offering and k < n_in and (job.stall_in == 0 or rng.random() >= job.stall_in):
                offering = True
                ctx.set(top.s_axis_tdata, job.in_beats[k])
                ctx.set(top.s_axis_tlast, job.in_last[k])
                ctx.set(top.s_axis_tvalid, 1)
            ready = job.stall_out == 0 or rng.random() >= job.stall_out
            ctx.set(top.m_axis_tready, ready)
            _, _, s_rdy, m_vld, m_data, m_last = await ctx.tick().sample(
                top.s_axis_tready, top.m_axis_tvalid, top.m_axis_tdata, top.m_axis_tlast)
            if offering and s_rdy:
                res.in_times.append(cycle)
                k += 1
                offering = False
                ctx.set(top.s_axis_tvalid, 0)
            if ready and m_vld:
                if len(res.out_beats) >= job.n_out_beats:
                    raise RuntimeError(f"design produced more than the {job.n_out_beats} "
                                       f"expected output beats")
                res.out_beats.append(int(m_data))
                res.out_last.append(bool(m_last))
                res.out_times.append(cycle)
            cycle += 1
            if len(res.out_beats) == job.n_out_beats and idle_after is None:
                idle_after = cycle + 8  # watch a few more cycles for surplus beats
            if idle_after is not None and cycle >= idle_after:
                break
            if cycle > limit:
                raise SimTimeout(f"simulation stopped after {limit} cycles with "
                                 f"{len(res.out_beats)} of {job.n_out_beats} output beats")
        res.cycles = cycle

    sim = Simulator(top)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return res
