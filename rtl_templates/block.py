"""The block registry: every block kind registers one description with all of its faces.

A block file ends with one :func:`register_block` call. The description is the only way the
rest of hwgen reaches a block: lowering builds its parameters, estimation asks its cost and
timing, assembly its component, the golden model its golden function, the manifest its
entry. Every face is required and has one signature for all kinds:

``params``
    the parameters dataclass of one instance (everything that defines it, folding included);
``component(p)``
    the Amaranth component; stream ports ``i`` (or ``i0``, ``i1``, … for several inputs) and
    ``o`` (or ``o0``, ``o1``, … for several outputs);
``golden(p, *xs)``
    the block's integer semantics on whole frames: each input ``[N, elements]`` in stream
    order, returns one ``[N, elements]`` array (a list of them for several outputs);
``cost(p)``
    :class:`~hwgen.rtl_templates.cost.Cost` of one frame;
``timing(p, in_first, in_last)``
    first and last output transfer cycle of a frame whose first and last input transfers
    happened at ``in_first`` and ``in_last`` (the later of several inputs);
``manifest(p)``
    the block's own fields of its manifest entry (JSON-ready dict);
``fold_space(p)``
    :class:`FoldSpace`: the PE and SIMD values the block accepts and its cycles per frame
    for each (plumbing blocks have the single choice PE = SIMD = 1).

``examples()`` is asked of every kind by the conformance test
(``tests/blocks/test_block_conformance.py``), not by the flow: a few small representative instances,
each an :class:`Example` (parameters and the element type, elements per beat and elements per
frame of each port). A kind registered without it fails that test.

Four faces are optional, for what a block alone cannot see of its neighbours:

``input_live(p, family)``
    per input port, which bits of a beat the block ever uses (a bool array of the port's
    width), or None where it uses all; the tools remove what computes the others upstream;
``resources_live(p, family, live)``
    the block's :class:`~hwgen.rtl_templates.resources.Resources` on ``family`` when its
    consumer uses only the output bits ``live`` marks (one-output blocks);
``slice_ports(p, port, widths)``
    the parameters of the same block whose port ``port`` (``"i"`` of a one-input block,
    ``"o"`` of a one-output block) is a sliced stream
    (:class:`~hwgen.rtl_templates.streams.SlicedSignature`) of the slices ``widths``, each
    slice's enables driven by that slice's own valid and ready; None where the block cannot
    (a matrix unit keeps a copy of its issue control per slice of the wide FIFO before it; a
    window generator hands its own output FIFO's slices over one by one when they are
    ``widths``; a FIFO takes either side). The lowering makes a stream between a FIFO of
    several slices and its neighbour sliced when both faces agree
    (:func:`~hwgen.dataflow.lower.mark_sliced_streams`);
``valid_copies(p)``
    ``(p', n)``: the parameters of the same block reading ``n`` copies of its input's valid
    (``i.valid_copies``, each a register of the FIFO before it, equal to ``i.valid``), and
    ``n``; None where it has no use for them (a window generator with copies of its step
    control takes one per copy). The lowering gives them when a FIFO is the block's
    producer (:func:`~hwgen.dataflow.lower.mark_valid_copies`).

An unknown kind, a missing face or a parameters object of the wrong type is an error, never
a silent default.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hwgen.rtl_templates.cost import Cost
from hwgen.rtl_templates.quant import QType

__all__ = ["BlockSpec", "Example", "FoldSpace", "Port", "block_spec", "divisors", "fixed_fold",
           "register_block", "registered_kinds"]


@dataclass(frozen=True)
class FoldSpace:
    """Legal PE and SIMD values of a block and its cycles per frame at each choice."""
    pe: tuple[int, ...]
    simd: tuple[int, ...]
    cycles: Callable[[int, int], int]


@dataclass(frozen=True)
class Port:
    """One stream port of an instance: its element type, elements per beat and per frame."""
    qtype: QType
    per_beat: int
    elements: int

    @property
    def beats(self) -> int:
        return self.elements // self.per_beat


@dataclass(frozen=True)
class Example:
    """A representative instance of a kind: its parameters and its ports in order (``i`` or
    ``i0``, ``i1``, …; ``o`` or ``o0``, ``o1``, …)."""
    params: Any
    inputs: tuple[Port, ...]
    outputs: tuple[Port, ...]
    name: str = ""
    #: the instance's (PE, SIMD) as its ``fold_space`` counts them; None: the parameters'
    #: own ``pe`` and ``simd`` (1 where they have none)
    fold: tuple[int, int] | None = None

    @property
    def folding(self) -> tuple[int, int]:
        if self.fold is not None:
            return self.fold
        return getattr(self.params, "pe", 1), getattr(self.params, "simd", 1)


@dataclass(frozen=True)
class BlockSpec:
    kind: str
    params: type
    component: Callable[[Any], Any]
    golden: Callable[..., Any]
    cost: Callable[[Any], Cost]
    timing: Callable[[Any, int, int], tuple[int, int]]
    manifest: Callable[[Any], dict]
    fold_space: Callable[[Any], FoldSpace]
    input_live: Callable[[Any, str], list] | None = None
    resources_live: Callable[[Any, str, Any], Any] | None = None
    slice_ports: Callable[[Any, str, list], Any] | None = None
    valid_copies: Callable[[Any], Any] | None = None
    examples: Callable[[], list[Example]] | None = None

    def check(self, p) -> None:
        if not isinstance(p, self.params):
            raise TypeError(f"block kind '{self.kind}' takes {self.params.__name__}, not "
                            f"{type(p).__name__}")


_BLOCKS: dict[str, BlockSpec] = {}


def register_block(kind: str, *, params: type, component, golden, cost, timing, manifest,
                   fold_space, input_live=None, resources_live=None,
                   slice_ports=None, valid_copies=None, examples=None) -> BlockSpec:
    """Register block ``kind``; every face is required but ``input_live``,
    ``resources_live``, ``slice_ports``, ``valid_copies`` and ``examples`` (the last
    required by the conformance test; see the module documentation)."""
    if kind in _BLOCKS:
        raise ValueError(f"block kind '{kind}' is already registered")
    if not dataclasses.is_dataclass(params):
        raise TypeError(f"block kind '{kind}': parameters must be a dataclass")
    faces = {"component": component, "golden": golden, "cost": cost, "timing": timing,
             "manifest": manifest, "fold_space": fold_space}
    for face, fn in faces.items():
        if not callable(fn):
            raise TypeError(f"block kind '{kind}': face '{face}' must be callable")
    for face, fn in (("input_live", input_live), ("resources_live", resources_live),
                     ("slice_ports", slice_ports), ("valid_copies", valid_copies),
                     ("examples", examples)):
        if fn is not None and not callable(fn):
            raise TypeError(f"block kind '{kind}': face '{face}' must be callable")
    spec = BlockSpec(kind, params, **faces, input_live=input_live,
                     resources_live=resources_live, slice_ports=slice_ports,
                     valid_copies=valid_copies, examples=examples)
    _BLOCKS[kind] = spec
    return spec


def block_spec(kind: str) -> BlockSpec:
    """The description of ``kind``; an unregistered kind is an error."""
    try:
        return _BLOCKS[kind]
    except KeyError:
        raise KeyError(f"no block kind '{kind}' is registered (known: "
                       f"{', '.join(sorted(_BLOCKS))})") from None


def registered_kinds() -> list[str]:
    return sorted(_BLOCKS)


def divisors(n: int) -> tuple[int, ...]:
    return tuple(d for d in range(1, int(n) + 1) if n % d == 0)


def fixed_fold(cycles: int) -> FoldSpace:
    """The fold space of a block without folding of its own (plumbing): PE = SIMD = 1, busy
    ``cycles`` per frame."""
    return FoldSpace((1,), (1,), lambda pe, simd: cycles)
