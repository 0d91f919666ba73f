"""Amaranth's own simulator as a back end: no compiler needed, slower than Verilator."""
from __future__ import annotations

import random

from amaranth.sim import Simulator

from hwgen.sim.base import (
    EXTRA_CYCLES,
    SimTimeout,
    StreamJob,
    StreamResult,
    default_max_cycles,
)


def run_amaranth(top, job: StreamJob) -> StreamResult:
    """Simulate ``top`` (an :class:`rtl_templates.axis_top.AxisTop`-like component) on ``job``.

    ``job.taps``: ``top`` is a design built for observation; every transfer on each tapped
    stream (its ports ``<ident>__valid/__ready/__payload``) is recorded in ``res.taps``.
    ``job.wave`` (VCD only): Amaranth's VCD writer records the whole job, from reset, into
    ``job.wave.path`` (no file for an empty path). As in the Verilator benches, ``ready``
    stays high for ``EXTRA_CYCLES`` cycles after the last expected output beat (no stall
    drawn), so beats, transfer cycles and ``cycles`` are the same in every back end."""
    res = StreamResult(out_beats=[], out_last=[])
    limit = default_max_cycles(job)
    if job.wave is not None and job.wave.kind != "vcd":
        raise ValueError(f"Amaranth's simulator writes VCD waveforms, not {job.wave.kind}")
    tapped = [(getattr(top, f"{ident}__valid"), getattr(top, f"{ident}__ready"),
               getattr(top, f"{ident}__payload")) for ident, _ in job.taps]
    res.taps = [([], []) for _ in tapped]
    tap_signals = [sig for t in tapped for sig in t]

    async def bench(ctx):
        if job.load_beats:      # the weight load: one beat offered per cycle until taken
            ctx.set(top.s_wload_tvalid, 1)
            for word in job.load_beats:
                ctx.set(top.s_wload_tdata, word)
                while True:
                    _, _, took = await ctx.tick().sample(top.s_wload_tready)
                    res.load_cycles += 1
                    if took:
                        break
                    if res.load_cycles > limit:
                        raise SimTimeout(f"the weight load stopped after {res.load_cycles} "
                                         f"cycles", res)
            ctx.set(top.s_wload_tvalid, 0)
        rng = random.Random(job.seed)
        k, offering, cycle = 0, False, 0
        stop_at = EXTRA_CYCLES if job.n_out_beats == 0 else None
        n_in = len(job.in_beats)
        while True:
            if not offering and k < n_in and (job.stall_in == 0 or rng.random() >= job.stall_in):
                offering = True
                ctx.set(top.s_axis_tdata, job.in_beats[k])
                ctx.set(top.s_axis_tlast, job.in_last[k])
                ctx.set(top.s_axis_tvalid, 1)
            ready = stop_at is not None or job.stall_out == 0 or rng.random() >= job.stall_out
            ctx.set(top.m_axis_tready, ready)
            _, _, s_rdy, m_vld, m_data, m_last, *taps = await ctx.tick().sample(
                top.s_axis_tready, top.m_axis_tvalid, top.m_axis_tdata, top.m_axis_tlast,
                *tap_signals)
            for j, (times, payloads) in enumerate(res.taps):
                if taps[3 * j] and taps[3 * j + 1]:
                    times.append(cycle)
                    payloads.append(int(taps[3 * j + 2]))
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
                if len(res.out_beats) == job.n_out_beats:
                    stop_at = cycle + 1 + EXTRA_CYCLES
            cycle += 1
            if stop_at is not None and cycle >= stop_at:
                break
            if cycle > limit:
                raise SimTimeout(f"simulation stopped after {limit} cycles with "
                                 f"{len(res.out_beats)} of {job.n_out_beats} output beats",
                                 res)
        res.cycles = cycle

    sim = Simulator(top)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    if job.wave is not None and job.wave.path:
        with sim.write_vcd(job.wave.path):
            sim.run()
    else:
        sim.run()
    return res
