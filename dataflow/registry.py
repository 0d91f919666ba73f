"""Operator handler registry keyed by ``(domain, op_type, since_version)``.

The ONNX specification versions every operator: a model's ``opset_import`` picks
the opset in force for each domain, and the operator version used is the newest
``since_version`` of that operator that is ``<=`` the imported opset. The loader
(:mod:`dataflow.loader`) resolves this for every node and stores it in
``Node.since_version``; handlers are registered for exactly those versions::

    reg = OpRegistry()

    @reg.register("", "Gemm", 13)
    def gemm_13(node, graph): ...

    handler = reg.lookup(node)   # HwgenError if (domain, op, since_version) is unknown

Domains ``""`` and ``"ai.onnx"`` are the same domain and are normalized to ``""``.
Non-ONNX domains (``com.microsoft``, ``qonnx.custom_op.general``, ...) have no
schemas in the onnx package; the loader gives their nodes ``since_version = 1``, so
handlers for them register ``since_version`` 1 and, if they care, check
``node.opset_version`` (the version the model imports for that domain) themselves.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from hwgen.errors import HwgenError

if TYPE_CHECKING:  # pragma: no cover
    from hwgen.dataflow.loader import Node

Handler = Callable[..., Any]
Key = tuple[str, str, int]

__all__ = ["OpRegistry", "normalize_domain", "display_domain"]


def normalize_domain(domain: str | None) -> str:
    """``""``, ``None`` and ``"ai.onnx"`` are the default ONNX domain ``""``."""
    if domain is None or domain == "ai.onnx":
        return ""
    return domain


def display_domain(domain: str) -> str:
    """Human-readable domain name for messages (``""`` -> ``ai.onnx``)."""
    return "ai.onnx" if normalize_domain(domain) == "" else domain


class OpRegistry:
    """Maps ``(domain, op_type, since_version)`` to a handler."""

    def __init__(self) -> None:
        self._handlers: dict[Key, Handler] = {}

    def register(
        self, domain: str, op_type: str, since_version: int
    ) -> Callable[[Handler], Handler]:
        """Decorator registering a handler: ``@reg.register("", "Gemm", 13)``.

        Registering the same key twice is a programming error (``ValueError``).
        """
        if not isinstance(op_type, str) or not op_type:
            raise ValueError(f"op_type must be a non-empty string, got {op_type!r}")
        if (
            isinstance(since_version, bool)
            or not isinstance(since_version, int)
            or since_version < 1
        ):
            raise ValueError(f"since_version must be an int >= 1, got {since_version!r}")
        key = (normalize_domain(domain), op_type, since_version)

        def decorator(handler: Handler) -> Handler:
            if key in self._handlers:
                raise ValueError(
                    f"handler for op '{op_type}' (domain '{display_domain(key[0])}', "
                    f"since_version {since_version}) is already registered"
                )
            self._handlers[key] = handler
            return handler

        return decorator

    def extend(
        self, domain: str, op_type: str, since_version: int
    ) -> Callable[[Callable[[Handler], Handler]], Handler]:
        """Decorator for a handler factory that widens an op's registered meaning: the
        factory is called with the handler registered for the key and returns the handler
        that takes its place (typically taking some cases itself and passing the others to
        the one it replaces). Extending a key that has no handler is a programming error."""
        key = (normalize_domain(domain), op_type, since_version)

        def decorator(factory: Callable[[Handler], Handler]) -> Handler:
            if key not in self._handlers:
                raise ValueError(f"no handler for op '{op_type}' (domain "
                                 f"'{display_domain(key[0])}', since_version {since_version}) "
                                 f"to extend")
            self._handlers[key] = handler = factory(self._handlers[key])
            return handler

        return decorator

    def find(self, node: "Node") -> Handler | None:
        """The handler for ``node``'s exact (domain, op_type, since_version), or None."""
        return self._handlers.get((normalize_domain(node.domain), node.op_type, node.since_version))

    def lookup(self, node: "Node") -> Handler:
        """The handler for ``node``; HwgenError naming node, op, domain and versions if none."""
        handler = self.find(node)
        if handler is not None:
            return handler
        domain = normalize_domain(node.domain)
        versions = self.versions(domain, node.op_type)
        where = (
            f"node {node.label}: op '{node.op_type}' (domain '{display_domain(domain)}', "
            f"opset {node.opset_version}, operator since_version {node.since_version})"
        )
        if versions:
            listed = ", ".join(str(v) for v in versions)
            raise HwgenError(
                f"{where} is not supported in this version; "
                f"supported versions of '{node.op_type}': since_version {listed}"
            )
        raise HwgenError(f"{where} is not supported (no handler for this op in any version)")

    def versions(self, domain: str, op_type: str) -> list[int]:
        """Sorted since_versions registered for ``(domain, op_type)``."""
        domain = normalize_domain(domain)
        return sorted(v for (d, o, v) in self._handlers if d == domain and o == op_type)

    def supported(self) -> list[Key]:
        """All registered ``(domain, op_type, since_version)`` keys, sorted."""
        return sorted(self._handlers)

    def __contains__(self, key: object) -> bool:
        if not (isinstance(key, tuple) and len(key) == 3):
            return False
        domain, op_type, since_version = key
        return (normalize_domain(domain), op_type, since_version) in self._handlers

    def __len__(self) -> int:
        return len(self._handlers)
