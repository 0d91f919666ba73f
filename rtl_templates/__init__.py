"""The block library. One block per file; each file holds three faces of the block:

* the Amaranth component: stream members ``i`` (input; ``i0``/``i1`` for two-input blocks)
  and ``o`` (output), ``amaranth.lib.stream`` signatures with unsigned payloads. A beat packs
  ``n`` elements, element k in bits ``[k*bits, (k+1)*bits)``, two's complement if the element
  type is signed. A transfer happens on valid & ready; valid never waits for ready;
* ``golden(...)``: NumPy with identical integer semantics;
* ``cost(...)`` → :class:`rtl_templates.cost.Cost` and ``timing(..., in_first, in_last)`` →
  (first, last) output transfer cycles of a frame, used for the design's latency estimate.

Feature maps stream channel-last: pixels in raster order (row by row), each pixel's channels
innermost.
"""

# first, before any block file: the fingerprint of the source this process runs
from hwgen.rtl_templates import source  # noqa: E402,F401
