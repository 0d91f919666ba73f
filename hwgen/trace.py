"""Per-stream trace: every stream of the simulated design against the golden model's values.

The simulation taps every stream of the dataflow graph (a design built for observation,
:func:`hwgen.assemble.build_observed`); the golden model gives every stream's values for the
same frames (:func:`hwgen.dataflow.golden.run_graph` on the same folded graph, so each
stream carries, element for element, what the hardware's stream carries). Each stream's
transfers, unpacked into elements in stream order over all frames, must equal the golden
values. The report names the first diverging block: in the graph's topological order, the
first block with an output stream that differs, with the frame, the element, both values and
the cycle of the beat that carried it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hwgen.dataflow.lower import DataflowGraph
from hwgen.rtl_templates.words import unpack_word


@dataclass
class StreamCheck:
    """One stream, RTL against golden."""
    stream: str
    producer: str | None          # the block writing it (None: the design's input)
    kind: str | None              # that block's kind
    elements_per_frame: int
    rtl_elements: int             # elements the RTL transferred
    golden_elements: int
    frame: int | None = None      # first difference: frame, element within it, values,
    element: int | None = None    # and the cycle of its beat (counted from its chunk's
    rtl_value: int | None = None  # start; chunk_start: that chunk's first frame)
    golden_value: int | None = None
    cycle: int | None = None
    chunk_start: int | None = None

    @property
    def ok(self) -> bool:
        return self.frame is None and self.rtl_elements == self.golden_elements

    def describe(self) -> str:
        where = f"stream {self.stream}" + (f" (output of {self.kind} block {self.producer})"
                                           if self.producer else " (the design's input)")
        if self.frame is not None:
            at = (f" at cycle {self.cycle}" + (f" of the chunk from frame {self.chunk_start}"
                                               if self.chunk_start else "")
                  if self.cycle is not None else "")
            return (f"{where}: frame {self.frame}, element {self.element}: RTL "
                    f"{self.rtl_value}, golden {self.golden_value}{at}")
        return (f"{where}: the RTL transferred {self.rtl_elements} elements, the golden model "
                f"has {self.golden_elements}")


@dataclass
class TraceReport:
    streams: list[StreamCheck]    # every stream, in the graph's order

    @property
    def ok(self) -> bool:
        return all(s.ok for s in self.streams)

    @property
    def first(self) -> StreamCheck | None:
        """The first diverging stream: the output of the first block (in topological order)
        whose output differs; the input stream if that differs."""
        return next((s for s in self.streams if not s.ok), None)

    @property
    def first_block(self) -> str | None:
        f = self.first
        return f.producer if f is not None else None

    def summary(self) -> str:
        if self.ok:
            return f"all {len(self.streams)} streams agree with the golden model"
        bad = sum(not s.ok for s in self.streams)
        return (f"{bad} of {len(self.streams)} streams differ; first diverging block "
                f"{self.first.producer or '(input)'}: {self.first.describe()}")


def _elements(beats: list[int], per_beat: int, qtype) -> np.ndarray:
    raw = np.array([v for w in beats for v in unpack_word(w, per_beat, qtype.bits)],
                   dtype=np.int64)
    return qtype.from_unsigned(raw)


def compare(dfg: DataflowGraph, taps: dict[str, list[tuple[int, int, int]]],
            golden: dict[str, np.ndarray], frame_offset: int = 0) -> TraceReport:
    """``taps``: per stream, its transfers in order as (chunk's first frame, cycle within the
    chunk, payload); ``golden``: per stream [N, elements] for the same frames, the first of
    which is frame ``frame_offset`` of the batch."""
    producer = {s: b for b in dfg.blocks for s in b.outputs}
    order = [dfg.in_stream] + [s for b in dfg.blocks for s in b.outputs]
    checks = []
    for s in order:
        st = dfg.streams[s]
        transfers = taps.get(s, [])
        rtl = _elements([p for _, _, p in transfers], st.per_beat, st.qtype)
        gold = np.asarray(golden[s], dtype=np.int64).reshape(-1)
        b = producer.get(s)
        c = StreamCheck(s, b.name if b else None, b.kind if b else None, st.elements,
                        rtl.size, gold.size)
        n = min(rtl.size, gold.size)
        diff = np.flatnonzero(rtl[:n] != gold[:n])
        if diff.size:
            k = int(diff[0])
            start, cycle, _ = transfers[k // st.per_beat]
            c.frame, c.element = divmod(k, st.elements)
            c.frame += frame_offset
            c.rtl_value, c.golden_value = int(rtl[k]), int(gold[k])
            c.cycle, c.chunk_start = cycle, start
        checks.append(c)
    return TraceReport(checks)
