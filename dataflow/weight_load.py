"""The weight-load stream of a dataflow graph: which blocks hold weights loaded after reset
(SPRAM, ``rtl_templates/spram.py``), in the order the stream passes through them, and the load
image, the 16-bit beats that fill them. Every simulator and the board's host link stream
:func:`load_image` into ``s_wload_*`` before the first frame; the manifest lists
:func:`load_manifest`.
"""
from __future__ import annotations

from hwgen.dataflow.lower import DataflowGraph, Folding, lower
from hwgen.rtl_templates.spram import LOAD_BITS


def loaders(dfg: DataflowGraph) -> list:
    """The blocks with a loaded memory, in chain order (the graph's block order)."""
    return [b for b in dfg.blocks if getattr(b.params, "spram", False)]


def load_image(dfg: DataflowGraph) -> list[int]:
    """The weight-load stream's beats (empty: the design has no loaded memory)."""
    return [w for b in loaders(dfg) for w in b.params.load_words()]


def folded_load_image(ig, folding: dict[str, Folding]) -> list[int]:
    """:func:`load_image` of ``ig`` lowered at ``folding`` (a compiled design's); empty,
    without lowering, when no layer keeps its weights in SPRAM."""
    if not any(f.spram for f in folding.values()):
        return []
    return load_image(lower(ig, folding))


def load_manifest(dfg: DataflowGraph) -> dict | None:
    """The manifest's ``ports.weight_load`` (None without loaded memories)."""
    blocks = loaders(dfg)
    if not blocks:
        return None
    mems = []
    for k, b in enumerate(blocks):
        lay = b.params.load_layout
        mems.append({"order": k, "block": b.name, "layer": b.layer, "words": lay.load_words,
                     "width": lay.width, "depth": lay.depth, "pack": lay.pack,
                     "spram_tiles": lay.tiles})
    return {"tdata": "s_wload_tdata", "bits": LOAD_BITS, "tvalid": "s_wload_tvalid",
            "tready": "s_wload_tready", "words": sum(m["words"] for m in mems),
            "memories": mems}
