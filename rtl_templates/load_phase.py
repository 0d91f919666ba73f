"""The phases of the blocks that hold a frame's vector or row in a RAM before they use it
(``bcast``, ``chanmul``, ``upsample``): while ``loading``, each beat of the input stream is
written to the next RAM word; the last word ends the phase. The block then uses what it
holds (``bcast`` and ``chanmul`` replay the words once per pixel, :func:`replay_phase`) and
raises ``loading`` again (``m.d.sync += loading.eq(1)``) when it is done.
"""
from __future__ import annotations

from amaranth.hdl import Module, Signal


def load_phase(m: Module, i, wr, depth: int) -> Signal:
    """Write ``depth`` beats of stream ``i`` into RAM write port ``wr`` (addresses 0 to
    ``depth`` − 1), taking beats only while the returned ``loading`` is high (it starts
    high and falls after the last word)."""
    loading = Signal(init=1)
    waddr = Signal(range(max(depth, 2)))
    load = Signal()
    m.d.comb += [i.ready.eq(loading), load.eq(i.valid & loading),
                 wr.addr.eq(waddr), wr.data.eq(i.payload), wr.en.eq(load)]
    with m.If(load):
        with m.If(waddr == depth - 1):
            m.d.sync += [waddr.eq(0), loading.eq(0)]
        with m.Else():
            m.d.sync += waddr.eq(waddr + 1)
    return loading


def replay_phase(m: Module, step, loading: Signal, rd, depth: int, passes: int) -> None:
    """Read the ``depth`` held words in order through RAM read port ``rd``, one per cycle of
    ``step``, ``passes`` times over; after the last word of the last pass, ``loading`` rises
    and the next load phase begins."""
    raddr = Signal(range(max(depth, 2)))
    pix = Signal(range(max(passes, 2)))
    m.d.comb += rd.addr.eq(raddr)
    with m.If(step):
        with m.If(raddr == depth - 1):
            m.d.sync += raddr.eq(0)
            with m.If(pix == passes - 1):
                m.d.sync += [pix.eq(0), loading.eq(1)]
            with m.Else():
                m.d.sync += pix.eq(pix + 1)
        with m.Else():
            m.d.sync += raddr.eq(raddr + 1)
