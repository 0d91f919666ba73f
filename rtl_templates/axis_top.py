"""The AXI4-Stream top level around a chain of stream blocks.

Ports (Verilog names): ``clk``; ``rst`` (synchronous, active high);
``s_axis_tdata``/``s_axis_tvalid``/``s_axis_tready``/``s_axis_tlast`` in;
``m_axis_tdata``/``m_axis_tvalid``/``m_axis_tready``/``m_axis_tlast`` out.
``tdata`` is the block stream's payload zero-padded to a whole number of bytes: element k of a
beat sits in bits ``[k*bits, (k+1)*bits)``, two's complement if its type is signed.
``m_axis_tlast`` marks the last beat of each output frame. ``s_axis_tlast`` is accepted and
ignored: frames are delimited by their beat count, which the manifest states.

A design with memories loaded after reset (``rtl_templates/spram.py``; its inner component has
the stream ``wl`` and the flag ``loaded``) also has the weight-load input
``s_wload_tdata`` (16 bits)/``s_wload_tvalid``/``s_wload_tready``, and holds
``s_axis_tready`` low until every memory is loaded.
"""
from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out


def axis_width(bits: int) -> int:
    return max(8, (bits + 7) // 8 * 8)


class Chain(wiring.Component):
    """Blocks connected in order: ``blocks[k].o`` → ``blocks[k+1].i``."""

    def __init__(self, blocks: list):
        self.blocks = blocks
        # blocks[0].i as seen from outside carries a flipped signature: flip it back
        super().__init__({"i": In(blocks[0].i.signature.flip()),
                          "o": Out(blocks[-1].o.signature)})

    def elaborate(self, platform):
        m = Module()
        for k, b in enumerate(self.blocks):
            m.submodules[f"b{k}"] = b
        for a, b in zip(self.blocks, self.blocks[1:]):
            wiring.connect(m, a.o, b.i)
        wiring.connect(m, wiring.flipped(self.i), self.blocks[0].i)
        wiring.connect(m, self.blocks[-1].o, wiring.flipped(self.o))
        return m


class AxisTop(wiring.Component):
    """Wraps a component with stream members ``i`` and ``o`` in AXI4-Stream ports."""

    def __init__(self, inner, out_beats_per_frame: int):
        self.inner = inner
        self.in_bits = len(inner.i.payload)
        self.out_bits = len(inner.o.payload)
        self.out_beats = out_beats_per_frame
        self.in_width = axis_width(self.in_bits)
        self.out_width = axis_width(self.out_bits)
        super().__init__({
            "s_axis_tdata": In(self.in_width), "s_axis_tvalid": In(1),
            "s_axis_tready": Out(1), "s_axis_tlast": In(1),
            "m_axis_tdata": Out(self.out_width), "m_axis_tvalid": Out(1),
            "m_axis_tready": In(1), "m_axis_tlast": Out(1),
        } | ({"s_wload_tdata": In(len(inner.wl.payload)), "s_wload_tvalid": In(1),
              "s_wload_tready": Out(1)} if self.loads else {}))

    @property
    def loads(self) -> bool:
        """The design has a weight-load input."""
        return "wl" in self.inner.signature.members

    def elaborate(self, platform):
        m = Module()
        m.submodules.core = core = self.inner
        m.d.comb += [
            core.i.payload.eq(self.s_axis_tdata[:self.in_bits]),
            core.i.valid.eq(self.s_axis_tvalid & core.loaded if self.loads
                            else self.s_axis_tvalid),
            self.s_axis_tready.eq(core.i.ready & core.loaded if self.loads else core.i.ready),
            self.m_axis_tdata.eq(core.o.payload),
            self.m_axis_tvalid.eq(core.o.valid),
            core.o.ready.eq(self.m_axis_tready),
        ]
        if self.loads:
            m.d.comb += [core.wl.payload.eq(self.s_wload_tdata),
                         core.wl.valid.eq(self.s_wload_tvalid),
                         self.s_wload_tready.eq(core.wl.ready)]
        beat = Signal(range(max(self.out_beats, 2)))
        last = beat == self.out_beats - 1
        m.d.comb += self.m_axis_tlast.eq(last)
        with m.If(core.o.valid & self.m_axis_tready):
            m.d.sync += beat.eq(Mux(last, 0, beat + 1))
        return m
