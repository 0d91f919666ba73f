"""The load phase of the blocks that hold a frame's vector or row in a RAM before they use it
(``bcast``, ``chanmul``, ``upsample``): while ``loading``, each beat of the input stream is
written to the next RAM word; the last word ends the phase. The block raises ``loading``
again (``m.d.sync += loading.eq(1)``) when it has used what it holds.
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
