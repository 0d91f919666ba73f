"""Load and validate an ONNX model into a small typed IR.

``load_model(path)`` / ``load_model_proto(model, base_dir)`` return a :class:`Graph`
(nodes in topological order, constants as numpy arrays, tensor types after shape
inference). Every problem a user can cause raises :class:`hwgen.errors.HwgenError`
with a one-line message naming the file, node / value / tensor and the reason.

Order of the checks (each message is more specific than what onnx would say later):

1. the file: exists, is a file, is a protobuf ``ModelProto`` with a graph, an
   ``ir_version`` in ``3 .. onnx.IR_VERSION`` and an ``opset_import``;
2. ``opset_import``: ``""`` and ``"ai.onnx"`` are one domain; ONNX domains must not
   be newer than the installed onnx knows;
3. external tensor data: only relative locations that stay inside the model's
   folder (no absolute paths, no ``..``, no symlink leading outside); then loaded;
4. model-local functions are inlined (``onnx.inliner.inline_local_functions``);
5. every node: its domain is imported; for ONNX domains the operator exists at the
   imported opset (``since_version`` from ``onnx.defs.get_schema``);
6. SSA (one definition per value) and topological order (use before definition,
   cycles and undefined values are told apart);
7. ``onnx.checker.check_model`` and ``onnx.shape_inference.infer_shapes``
   (``strict_mode=True``), their errors collapsed to one line. Between the two,
   given ``handled`` (the operator versions hwgen's handlers cover, from
   :func:`dataflow.operators.handler_versions`; :func:`dataflow.importer.load_model`
   passes them), a model whose ai.onnx opset is older than ``UPGRADE_OPSET`` (13) and
   that uses an operator version not among them (Reshape-1, BatchNormalization-6,
   Gemm-6, ...) is brought forward to opset 13 with ``onnx.version_converter``
   (:func:`upgrade_opset`); what the converter refuses is reported with node, op
   and version. Models whose operator versions are all handled stay as they are.

Versioning of nodes: ``Node.opset_version`` is the version the model imports for the
node's domain; ``Node.since_version`` is the operator version in force. For ONNX
domains (``""``/``ai.onnx``, ``ai.onnx.ml``, the preview/training domains) it comes
from the onnx schema. Non-ONNX domains (``com.microsoft``, ``qonnx.custom_op.general``,
...) have no schema: their nodes get ``since_version = 1``, i.e. they are versioned by
their ``opset_import`` only; handlers for them register ``since_version`` 1 and check
``node.opset_version`` if they need to.

Initializers that also appear in ``graph.input`` (required for IR < 4; a "default
value" for an input in IR >= 4) are treated as constants in every IR version: they
are in ``Graph.constants`` and not in ``Graph.inputs`` (weights are baked into the
hardware).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
import onnx.checker
import onnx.defs
import onnx.external_data_helper
import onnx.inliner
import onnx.shape_inference
import onnx.version_converter
from google.protobuf.message import DecodeError
from onnx import (
    AttributeProto,
    GraphProto,
    ModelProto,
    NodeProto,
    SparseTensorProto,
    TensorProto,
    helper,
    numpy_helper,
)

from hwgen.dataflow.layout import CHANNELS_LAST, expand_channels_last, sink_transposes
from hwgen.dataflow.registry import display_domain, normalize_domain
from hwgen.errors import HwgenError

__all__ = [
    "TensorInfo",
    "Node",
    "Graph",
    "load_model",
    "load_model_proto",
    "MIN_IR_VERSION",
    "MAX_IR_VERSION",
    "UPGRADE_OPSET",
    "upgrade_opset",
    "MAX_TENSOR_BYTES",
    "MAX_TENSOR_ELEMENTS",
    "tensor_byte_limit",
    "size_problem",
]

MIN_IR_VERSION = 3

#: the domains QONNX quantizers (Quant, BipolarQuant, Trunc, MultiThreshold) have had:
#: Brevitas's and FINN's historical ones and qonnx's own. Exporters often leave them out of
#: ``opset_import``; a model that does is read as importing version 1 (qonnx does the same).
QONNX_DOMAINS = ("qonnx.custom_op.general", "onnx.brevitas", "finn.custom_op.general",
                 "finn")
MAX_IR_VERSION = onnx.IR_VERSION

_MSG_LIMIT = 300

#: the largest tensor (declared elements × bytes per element) hwgen reads or creates: an
#: initializer, a Constant, external data, a ConstantOfShape output (lower still if the
#: machine has less memory available, :func:`tensor_byte_limit`)
MAX_TENSOR_BYTES = 2**31
#: the most elements of one tensor (ONNX Runtime and protobuf index tensors with int32)
MAX_TENSOR_ELEMENTS = 2**31 - 1


def _available_memory() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def tensor_byte_limit() -> int:
    """The size limit of one tensor: ``MAX_TENSOR_BYTES``, or the memory available now if
    that is lower."""
    avail = _available_memory()
    return MAX_TENSOR_BYTES if not avail else min(MAX_TENSOR_BYTES, avail)


def size_problem(dims: Sequence[int], itemsize: int) -> str | None:
    """Why a tensor of shape ``dims`` with ``itemsize`` bytes per element must not be
    created (a negative dimension, too many elements or bytes), else None. Computed from
    the declared shape with Python integers: nothing is allocated."""
    dims = [int(d) for d in dims]
    if any(d < 0 for d in dims):
        return f"its shape {dims} has a negative dimension"
    n = 1
    for d in dims:
        n *= d
    if n > MAX_TENSOR_ELEMENTS:
        return f"its shape {dims} declares {n} elements, more than the limit of " \
               f"{MAX_TENSOR_ELEMENTS}"
    limit = tensor_byte_limit()
    if n * itemsize > limit:
        return f"its shape {dims} declares {n} elements of {itemsize} bytes ({n * itemsize} " \
               f"bytes), more than the limit of {limit} bytes"
    return None


# --------------------------------------------------------------------------- IR


@dataclass(frozen=True)
class TensorInfo:
    """Name, element type and shape of a tensor.

    ``dtype`` is None when the element type is unknown (or not a tensor type).
    ``shape`` is None when the rank is unknown; a dim is an ``int`` (fixed), a
    ``str`` (symbolic ``dim_param``, e.g. a batch axis) or ``None`` (unknown).
    """

    name: str
    dtype: np.dtype | None
    shape: tuple[int | str | None, ...] | None


@dataclass
class Node:
    """One ONNX node.

    ``domain`` is normalized (``"ai.onnx"`` -> ``""``). ``opset_version`` is the opset
    the model imports for the domain, ``since_version`` the operator version in force
    (1 for non-ONNX domains). ``inputs`` keeps ``''`` for absent optional inputs.
    ``attrs`` holds python values: ints/floats/lists, ``str`` for strings (``bytes``
    if not valid UTF-8), numpy arrays for tensors (also sparse ones, densified),
    ``GraphProto`` for subgraphs. ``index`` is the node's position in the model's
    graph after function inlining (Constant nodes folded away keep their index
    slots, so labels match what viewers like Netron show).
    """

    name: str
    op_type: str
    domain: str
    since_version: int
    opset_version: int
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any]
    index: int

    @property
    def label(self) -> str:
        return self.name if self.name else f"#{self.index} ({self.op_type})"


@dataclass
class Graph:
    """A loaded, validated model.

    ``inputs`` are the real graph inputs (initializers excluded); ``constants`` holds
    initializers and the outputs of folded ``Constant`` nodes; ``value_info`` has a
    :class:`TensorInfo` for every tensor whose type is known after shape inference
    (graph inputs, outputs, intermediates and constants); ``opsets`` maps normalized
    domains to imported versions; ``path`` is the absolute file path (None for
    in-memory models).
    """

    name: str
    nodes: list[Node]
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    constants: dict[str, np.ndarray]
    value_info: dict[str, TensorInfo]
    opsets: dict[str, int]
    ir_version: int
    path: str | None = None
    #: what loading changed or assumed, for ``inspect`` (a missing domain import, ...)
    notes: list[str] = field(default_factory=list)
    #: FINN/QONNX datatypes annotated on tensors (``graph.quantization_annotation``,
    #: key ``finn_datatype``): tensor name → datatype name ("BINARY", "INT4", ...)
    datatypes: dict[str, str] = field(default_factory=dict)


# ------------------------------------------------------------------- helpers


def _one_line(text: object, limit: int = _MSG_LIMIT) -> str:
    s = " ".join(str(text).split())
    if len(s) > limit:
        s = s[: limit - 3].rstrip() + "..."
    return s


def _proto_label(node: NodeProto, index: int) -> str:
    return node.name if node.name else f"#{index} ({node.op_type})"


def _onnx_domain_max_versions() -> dict[str, int]:
    """Domains the installed onnx has schemas for, with their newest opset."""
    try:
        return {d: int(v[1]) for d, v in onnx.defs.C.schema_version_map().items()}
    except Exception:  # pragma: no cover - private API moved
        return {"": onnx.defs.onnx_opset_version(), "ai.onnx.ml": onnx.defs.onnx_ml_opset_version()}


_ONNX_DOMAINS = _onnx_domain_max_versions()


def _np_dtype(elem_type: int) -> np.dtype | None:
    if elem_type == TensorProto.UNDEFINED:
        return None
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))
    except Exception:
        return None


def _tensor_info_from_value_info(vi: onnx.ValueInfoProto) -> TensorInfo:
    if not vi.type.HasField("tensor_type"):
        return TensorInfo(vi.name, None, None)
    tt = vi.type.tensor_type
    dtype = _np_dtype(tt.elem_type)
    if not tt.HasField("shape"):
        return TensorInfo(vi.name, dtype, None)
    dims: list[int | str | None] = []
    for d in tt.shape.dim:
        if d.HasField("dim_value"):
            dims.append(int(d.dim_value))
        elif d.HasField("dim_param") and d.dim_param:
            dims.append(d.dim_param)
        else:
            dims.append(None)
    return TensorInfo(vi.name, dtype, tuple(dims))


def _sparse_to_array(sp: SparseTensorProto) -> np.ndarray:
    values = numpy_helper.to_array(sp.values)
    dims = tuple(int(d) for d in sp.dims)
    dense = np.zeros(dims, dtype=values.dtype)
    if values.size:
        indices = numpy_helper.to_array(sp.indices).astype(np.int64)
        if indices.ndim == 1:  # linearized indices
            dense.reshape(-1)[indices] = values
        else:  # [NNZ, rank] coordinates
            dense[tuple(indices.T)] = values
    return dense


def _decode(b: bytes) -> str | bytes:
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return b


def _attr_value(attr: AttributeProto) -> Any:
    value = helper.get_attribute_value(attr)
    t = attr.type
    if t == AttributeProto.TENSOR:
        return numpy_helper.to_array(value)
    if t == AttributeProto.TENSORS:
        return [numpy_helper.to_array(v) for v in value]
    if t == AttributeProto.SPARSE_TENSOR:
        return _sparse_to_array(value)
    if t == AttributeProto.SPARSE_TENSORS:
        return [_sparse_to_array(v) for v in value]
    if t == AttributeProto.STRING:
        return _decode(value)
    if t == AttributeProto.STRINGS:
        return [_decode(v) for v in value]
    if t in (
        AttributeProto.INTS,
        AttributeProto.FLOATS,
        AttributeProto.GRAPHS,
        AttributeProto.TYPE_PROTOS,
    ):
        return list(value)
    return value


def _constant_value(node: NodeProto, where: str, label: str) -> np.ndarray:
    """Value of an ONNX ``Constant`` node as a numpy array."""
    if len(node.attribute) != 1:
        raise HwgenError(
            f"{where}: Constant node {label} must have exactly one value attribute, "
            f"has {len(node.attribute)}"
        )
    attr = node.attribute[0]
    name = attr.name
    v = _attr_value(attr)
    if name in ("value", "sparse_value"):
        return np.asarray(v)
    if name == "value_float":
        return np.array(v, dtype=np.float32)
    if name == "value_floats":
        return np.array(v, dtype=np.float32).reshape(-1)
    if name == "value_int":
        return np.array(v, dtype=np.int64)
    if name == "value_ints":
        return np.array(v, dtype=np.int64).reshape(-1)
    if name == "value_string":
        return np.array(v, dtype=object)
    if name == "value_strings":
        return np.array(v, dtype=object).reshape(-1)
    raise HwgenError(f"{where}: Constant node {label} has unknown attribute '{name}'")


# ------------------------------------------------------------ file reading


def load_model(
    path: str | os.PathLike, handled: Mapping[str, Sequence[int]] | None = None
) -> Graph:
    """Read, validate and convert the ONNX model file at ``path``.

    External tensor data is read relative to the model's folder (and only from
    inside it). ``handled`` (ai.onnx op type → the since_versions hwgen has handlers for)
    brings a model with operator versions older than those forward to opset
    ``UPGRADE_OPSET`` (see :func:`upgrade_opset`); by default (None) operator versions are
    kept as they are.
    """
    p = os.fspath(path)
    where = p
    if not os.path.exists(p):
        if os.path.islink(p):
            raise HwgenError(f"{where}: model file is a broken symbolic link")
        raise HwgenError(f"{where}: model file not found")
    if os.path.isdir(p):
        raise HwgenError(f"{where}: is a directory, not an ONNX model file")
    if not os.path.isfile(p):
        raise HwgenError(f"{where}: is not a regular file")
    try:
        with open(p, "rb") as f:
            data = f.read()
    except OSError as e:
        raise HwgenError(f"{where}: cannot read model file: {_one_line(e.strerror or e)}") from e
    if not data:
        raise HwgenError(f"{where}: file is empty, not an ONNX model")
    model = ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as e:
        raise HwgenError(
            f"{where}: not a valid ONNX model file (not an ONNX protobuf, or corrupt/truncated): "
            f"{_one_line(e, 120)}"
        ) from e
    abs_path = os.path.abspath(p)
    return _build(model, os.path.dirname(abs_path), where, abs_path, handled, data)


def load_model_proto(model: onnx.ModelProto, base_dir: str | None = None,
                     handled: Mapping[str, Sequence[int]] | None = None) -> Graph:
    """Validate and convert an in-memory model (same checks as :func:`load_model`).

    ``base_dir`` is the folder external tensor data is read from (refused if the
    model uses external data and ``base_dir`` is None). ``model`` is not modified.
    """
    if not isinstance(model, ModelProto):
        raise HwgenError(
            f"<in-memory model>: expected an onnx.ModelProto, got {type(model).__name__}"
        )
    copy = ModelProto()
    copy.CopyFrom(model)
    return _build(copy, base_dir, "<in-memory model>", None, handled)


# --------------------------------------------------------------- the checks


def _check_header(model: ModelProto, where: str) -> None:
    if not model.HasField("graph") or not model.HasField("ir_version") or model.ir_version == 0:
        missing = [
            what
            for what, ok in (
                ("graph", model.HasField("graph")),
                ("ir_version", model.HasField("ir_version") and model.ir_version != 0),
            )
            if not ok
        ]
        raise HwgenError(f"{where}: not an ONNX model (no {' and no '.join(missing)})")
    ir = model.ir_version
    if ir < MIN_IR_VERSION or ir > MAX_IR_VERSION:
        rel = "older" if ir < MIN_IR_VERSION else "newer"
        raise HwgenError(
            f"{where}: model IR version {ir} is {rel} than supported; supported IR versions are "
            f"{MIN_IR_VERSION}..{MAX_IR_VERSION} (installed onnx {onnx.__version__})"
        )
    if len(model.opset_import) == 0:
        raise HwgenError(f"{where}: not an ONNX model (IR version {ir} but no opset_import)")


def _string_fields(msg, path: str):
    """(field path, value) of every string field of ``msg`` and its sub-messages whose value
    protobuf could not decode as UTF-8 (it hands those out as bytes)."""
    for fd, value in msg.ListFields():
        if fd.type == fd.TYPE_STRING:
            values = value if _is_repeated(fd) else [value]
            for k, v in enumerate(values):
                if isinstance(v, bytes):
                    yield (f"{path}.{fd.name}[{k}]" if _is_repeated(fd) else
                           f"{path}.{fd.name}"), v
        elif fd.type == fd.TYPE_MESSAGE:
            if _is_repeated(fd):
                for k, sub in enumerate(value):
                    yield from _string_fields(sub, f"{path}.{fd.name}[{k}]")
            else:
                yield from _string_fields(value, f"{path}.{fd.name}")


def _is_repeated(fd) -> bool:
    rep = getattr(fd, "is_repeated", None)
    return bool(rep) if rep is not None else fd.label == fd.LABEL_REPEATED


def _check_utf8(model: ModelProto, where: str, data: bytes | None) -> None:
    """Every name and string of the model must be UTF-8: a byte-flipped name is refused
    with the field (node index) and its byte offset in the file."""
    for field_path, raw in _string_fields(model, "model"):
        node = ""
        if field_path.startswith("model.graph.node["):
            i = int(field_path[len("model.graph.node["):].split("]", 1)[0])
            op = model.graph.node[i].op_type
            node = f" (node #{i}" + (f", op '{op}')" if isinstance(op, str) else ")")
        offset = data.find(raw) if data is not None else -1
        at = f" at byte offset {offset} of the file" if offset >= 0 else ""
        raise HwgenError(
            f"{where}: {field_path}{node} is not valid UTF-8: {raw[:60]!r}{at}"
        )


def _check_declared_sizes(model: ModelProto, where: str) -> None:
    """Every tensor stored in the model (initializers, Constant and other attribute tensors,
    external data before it is read) against the size limit, from its declared shape; and
    node names unique (onnxruntime refuses a model with two nodes of one name)."""
    tensors = list(_iter_tensors(model.graph, ""))
    for f in model.functions:
        tensors.extend(_iter_node_tensors(f.node, f" in function '{f.domain}.{f.name}'"))
    for desc, t in tensors:
        dtype = _np_dtype(t.data_type)
        itemsize = 8 if dtype is None or dtype.kind == "O" else max(dtype.itemsize, 1)
        why = size_problem(t.dims, itemsize)
        if why is not None:
            named = desc if f"'{t.name}'" in desc else f"{desc} (tensor '{t.name}')"
            raise HwgenError(f"{where}: {named}: {why}")
    first: dict[str, int] = {}
    for i, node in enumerate(model.graph.node):
        if not node.name:
            continue
        j = first.setdefault(node.name, i)
        if j != i:
            raise HwgenError(
                f"{where}: node name '{node.name}' is used by node #{j} "
                f"(op '{model.graph.node[j].op_type}') and node #{i} (op '{node.op_type}'); "
                "node names must be unique"
            )


def _check_opsets(model: ModelProto, where: str) -> dict[str, int]:
    opsets: dict[str, int] = {}
    for imp in model.opset_import:
        dom = normalize_domain(imp.domain)
        ver = int(imp.version)
        if dom in opsets and opsets[dom] != ver:
            raise HwgenError(
                f"{where}: opset_import lists domain '{display_domain(dom)}' twice with different "
                f"versions ({opsets[dom]} and {ver}); '' and 'ai.onnx' are the same domain"
            )
        if ver < 1:
            raise HwgenError(
                f"{where}: opset_import for domain '{display_domain(dom)}' "
                f"has invalid version {ver}"
            )
        if dom in _ONNX_DOMAINS and ver > _ONNX_DOMAINS[dom]:
            raise HwgenError(
                f"{where}: model imports opset {ver} for domain '{display_domain(dom)}', "
                f"newer than the installed onnx {onnx.__version__} supports "
                f"(up to opset {_ONNX_DOMAINS[dom]})"
            )
        opsets[dom] = ver
    return opsets


def _iter_tensors(graph: GraphProto, path: str):
    """(description, TensorProto) for every tensor in a graph, its subgraphs and attributes."""
    for t in graph.initializer:
        yield f"initializer '{t.name}'", t
    for sp in graph.sparse_initializer:
        yield f"sparse initializer '{sp.values.name}' (values)", sp.values
        yield f"sparse initializer '{sp.values.name}' (indices)", sp.indices
    yield from _iter_node_tensors(graph.node, path)


def _iter_node_tensors(nodes, path: str):
    for i, node in enumerate(nodes):
        label = _proto_label(node, i)
        for a in node.attribute:
            desc = f"tensor in attribute '{a.name}' of node {label}{path}"
            if a.HasField("t"):
                yield desc, a.t
            for t in a.tensors:
                yield desc, t
            if a.HasField("sparse_tensor"):
                yield desc, a.sparse_tensor.values
                yield desc, a.sparse_tensor.indices
            for sp in a.sparse_tensors:
                yield desc, sp.values
                yield desc, sp.indices
            if a.HasField("g"):
                yield from _iter_tensors(a.g, f"{path} (subgraph of {label})")
            for g in a.graphs:
                yield from _iter_tensors(g, f"{path} (subgraph of {label})")


def _is_absolute(location: str) -> bool:
    return (
        os.path.isabs(location)
        or location.startswith(("/", "\\"))
        or (len(location) >= 2 and location[1] == ":" and location[0].isalpha())
    )


def _load_external_data(model: ModelProto, base_dir: str | None, where: str) -> None:
    tensors = list(_iter_tensors(model.graph, ""))
    for f in model.functions:
        tensors.extend(_iter_node_tensors(f.node, f" in function '{f.domain}.{f.name}'"))
    for desc, t in tensors:
        if not onnx.external_data_helper.uses_external_data(t):
            continue
        name = t.name or desc
        info = {e.key: e.value for e in t.external_data}
        location = info.get("location", "")
        if not location:
            raise HwgenError(
                f"{where}: {desc} (tensor '{name}') uses external data but has no location"
            )
        if base_dir is None:
            raise HwgenError(
                f"{where}: tensor '{name}' uses external data '{location}' "
                "but no base directory was given"
            )
        if _is_absolute(location):
            raise HwgenError(
                f"{where}: tensor '{name}' external data location '{location}' "
                "is an absolute path; only paths relative to the model's folder are allowed"
            )
        parts = location.replace("\\", "/").split("/")
        if ".." in parts:
            raise HwgenError(
                f"{where}: tensor '{name}' external data location '{location}' contains '..'; "
                "external data must be inside the model's folder"
            )
        base_real = os.path.realpath(base_dir)
        full = os.path.join(base_dir, location)
        real = os.path.realpath(full)
        if os.path.commonpath([base_real, real]) != base_real:
            raise HwgenError(
                f"{where}: tensor '{name}' external data location '{location}' resolves outside "
                f"the model's folder ({real}); external data must be inside the model's folder"
            )
        if not os.path.exists(real):
            raise HwgenError(
                f"{where}: external data file '{location}' for tensor '{name}' "
                f"not found in {base_dir}"
            )
        if not os.path.isfile(real):
            raise HwgenError(
                f"{where}: external data location '{location}' for tensor '{name}' "
                "is not a regular file"
            )
        try:
            onnx.external_data_helper.load_external_data_for_tensor(t, base_dir)
        except Exception as e:  # ValueError (offset/length), OSError, onnx C++ errors
            raise HwgenError(
                f"{where}: cannot read external data '{location}' for tensor '{name}': "
                f"{_one_line(e, 200)}"
            ) from e
        _check_raw_size(t, name, location, where)


_SUBBYTE_BITS = {
    getattr(TensorProto, n): b
    for n, b in (("INT4", 4), ("UINT4", 4), ("FLOAT4E2M1", 4), ("INT2", 2), ("UINT2", 2))
    if hasattr(TensorProto, n)
}


def _check_raw_size(t: TensorProto, name: str, location: str, where: str) -> None:
    if t.data_type in (TensorProto.STRING, TensorProto.UNDEFINED):
        return
    dtype = _np_dtype(t.data_type)
    if dtype is None:
        return
    count = int(np.prod([int(d) for d in t.dims], dtype=np.int64)) if len(t.dims) else 1
    bits = _SUBBYTE_BITS.get(t.data_type)
    expected = (count * bits + 7) // 8 if bits else count * dtype.itemsize
    if len(t.raw_data) != expected:
        raise HwgenError(
            f"{where}: external data '{location}' for tensor '{name}' has {len(t.raw_data)} bytes, "
            f"expected {expected} for shape {tuple(int(d) for d in t.dims)}"
        )


def _inline_functions(model: ModelProto, where: str) -> ModelProto:
    if len(model.functions) == 0:
        return model
    try:
        inlined = onnx.inliner.inline_local_functions(model)
    except Exception as e:
        raise HwgenError(f"{where}: inlining model-local functions failed: {_one_line(e)}") from e
    # The inliner silently skips calls whose function imports a different ONNX
    # opset version than the model: report them.
    local = {(normalize_domain(f.domain), f.name): f for f in model.functions}
    model_opsets = {normalize_domain(o.domain): o.version for o in model.opset_import}
    for i, node in enumerate(inlined.graph.node):
        f = local.get((normalize_domain(node.domain), node.op_type))
        if f is None:
            continue
        reason = ""
        for o in f.opset_import:
            d = normalize_domain(o.domain)
            if d in model_opsets and model_opsets[d] != o.version:
                reason = (
                    f": the function imports opset {o.version} for domain '{display_domain(d)}' "
                    f"but the model imports {model_opsets[d]}"
                )
                break
        raise HwgenError(
            f"{where}: node {_proto_label(node, i)} calls model-local function "
            f"'{f.name}' (domain '{f.domain}') that could not be inlined{reason}"
        )
    return inlined


def _resolve_versions(
    graph: GraphProto, opsets: dict[str, int], where: str
) -> list[tuple[int, int]]:
    """(since_version, opset_version) for every node of the main graph."""
    out = []
    for i, node in enumerate(graph.node):
        label = _proto_label(node, i)
        dom = normalize_domain(node.domain)
        if not node.op_type:
            raise HwgenError(f"{where}: node {label} has an empty op_type")
        if dom not in opsets:
            imported = ", ".join(f"'{display_domain(d)}'" for d in sorted(opsets)) or "none"
            raise HwgenError(
                f"{where}: node {label} (op '{node.op_type}') uses domain '{display_domain(dom)}' "
                f"which the model does not import in opset_import (imported domains: {imported})"
            )
        opset = opsets[dom]
        if dom not in _ONNX_DOMAINS:
            out.append((1, opset))
            continue
        what = f"node {label}: op '{node.op_type}' (domain '{display_domain(dom)}', opset {opset})"
        try:
            schema = onnx.defs.get_schema(node.op_type, max_inclusive_version=opset, domain=dom)
        except onnx.defs.SchemaError:
            try:
                later = onnx.defs.get_schema(node.op_type, domain=dom).since_version
            except onnx.defs.SchemaError:
                later = None
            if later is not None:
                raise HwgenError(
                    f"{where}: {what} does not exist at this opset; "
                    f"it was introduced in opset {later}"
                ) from None
            raise HwgenError(f"{where}: {what} is not a known operator") from None
        if schema.deprecated:
            raise HwgenError(
                f"{where}: {what} is deprecated at this opset "
                f"(operator version {schema.since_version})"
            )
        out.append((int(schema.since_version), opset))
    return out


def _check_ssa_and_order(graph: GraphProto, where: str) -> None:
    definer: dict[str, str] = {}

    def define(value: str, who: str) -> None:
        if value in definer:
            raise HwgenError(
                f"{where}: value '{value}' is defined twice, by {definer[value]} and by {who} "
                "(ONNX requires each value to be defined once)"
            )
        definer[value] = who

    init_names = set()
    for t in graph.initializer:
        define(t.name, "an initializer")
        init_names.add(t.name)
    for sp in graph.sparse_initializer:
        define(sp.values.name, "a sparse initializer")
        init_names.add(sp.values.name)
    seen_inputs = set()
    for vi in graph.input:
        if vi.name in seen_inputs:
            raise HwgenError(f"{where}: graph input '{vi.name}' is listed twice")
        seen_inputs.add(vi.name)
        if vi.name in init_names:  # IR<4 style: initializer listed as input too
            continue
        define(vi.name, "a graph input")
    labels = [_proto_label(n, i) for i, n in enumerate(graph.node)]
    producer_idx: dict[str, int] = {}
    for i, node in enumerate(graph.node):
        for o in node.output:
            if not o:
                continue
            define(o, f"node {labels[i]}")
            producer_idx[o] = i

    available = set(definer) - set(producer_idx)
    for i, node in enumerate(graph.node):
        for v in node.input:
            if not v or v in available:
                continue
            j = producer_idx.get(v)
            if j is None:
                raise HwgenError(
                    f"{where}: node {labels[i]} (op '{node.op_type}') input '{v}' is not defined: "
                    "no graph input, initializer or node output has that name"
                )
            if j == i:
                raise HwgenError(
                    f"{where}: cycle: node {labels[i]} (op '{node.op_type}') "
                    f"consumes its own output '{v}'"
                )
            path = _find_path(graph, i, j, producer_idx)
            if path is not None:
                steps = "".join(f"{labels[a]} --'{val}'--> " for a, val in path + [(j, v)])
                raise HwgenError(
                    f"{where}: cycle in the graph: {steps}{labels[i]}; ONNX graphs must be acyclic"
                )
            raise HwgenError(
                f"{where}: node {labels[i]} (op '{node.op_type}') uses value '{v}' before it is "
                f"defined by later node {labels[j]}; nodes must be in topological order"
            )
        for o in node.output:
            if o:
                available.add(o)
    for vi in graph.output:
        if vi.name not in definer:
            raise HwgenError(
                f"{where}: graph output '{vi.name}' is not defined: "
                "no graph input, initializer or node output has that name"
            )


def _find_path(graph: GraphProto, start: int, goal: int, producer_idx: dict[str, int]):
    """Path start -> ... -> goal along producer->consumer edges as [(node, value), ...]."""
    consumers: dict[str, list[int]] = {}
    for k, n in enumerate(graph.node):
        for v in n.input:
            if v in producer_idx:
                consumers.setdefault(v, []).append(k)
    prev: dict[int, tuple[int, str]] = {}
    stack = [start]
    seen = {start}
    while stack:
        a = stack.pop()
        if a == goal:
            path = []
            while a != start:
                p, val = prev[a]
                path.append((p, val))
                a = p
            return list(reversed(path))
        for o in graph.node[a].output:
            for b in consumers.get(o, []) if o else []:
                if b not in seen:
                    seen.add(b)
                    prev[b] = (a, o)
                    stack.append(b)
    return None


def _check_io_types(graph: GraphProto, where: str) -> None:
    init_names = {t.name for t in graph.initializer} | {
        sp.values.name for sp in graph.sparse_initializer
    }
    for kind, vis in (("input", graph.input), ("output", graph.output)):
        for vi in vis:
            if kind == "input" and vi.name in init_names:
                continue
            if not vi.HasField("type"):
                raise HwgenError(f"{where}: graph {kind} '{vi.name}' has no type")
            if vi.type.HasField("tensor_type"):
                tt = vi.type.tensor_type
                if tt.elem_type == TensorProto.UNDEFINED:
                    raise HwgenError(f"{where}: graph {kind} '{vi.name}' has no element type")
                if not tt.HasField("shape"):
                    raise HwgenError(
                        f"{where}: graph {kind} '{vi.name}' has no shape (rank unknown); "
                        "the onnx checker requires one"
                    )


def _normalize_domains(model: ModelProto, opsets: dict[str, int]) -> None:
    """Rewrite domain 'ai.onnx' to '' in place: the onnx checker treats the two as
    different domains for nodes although the IR spec says they are the same."""

    def fix_graph(graph: GraphProto) -> None:
        for node in graph.node:
            if node.domain == "ai.onnx":
                node.domain = ""
            for a in node.attribute:
                if a.HasField("g"):
                    fix_graph(a.g)
                for sub in a.graphs:
                    fix_graph(sub)

    fix_graph(model.graph)
    del model.opset_import[:]
    model.opset_import.extend(helper.make_opsetid(d, v) for d, v in opsets.items())


def _run_checker(model: ModelProto, where: str) -> None:
    try:
        onnx.checker.check_model(model)
    except (onnx.checker.ValidationError, ValueError, RuntimeError) as e:
        raise HwgenError(f"{where}: onnx checker: {_one_line(e)}") from e


def _run_shape_inference(model: ModelProto, where: str) -> ModelProto:
    try:
        return onnx.shape_inference.infer_shapes(
            model, check_type=True, strict_mode=True, data_prop=True
        )
    except (onnx.shape_inference.InferenceError, ValueError, RuntimeError) as e:
        raise HwgenError(f"{where}: shape inference failed: {_one_line(e)}") from e


# ------------------------------------------------------- older opsets

#: the ai.onnx opset older models are brought forward to (hwgen's handlers cover every
#: operator version in force at opset 13)
UPGRADE_OPSET = 13


def _converter_reason(e: Exception) -> str:
    """onnx.version_converter's message without its C++ file/assertion prefix."""
    s = _one_line(e, 10_000)
    if "failed: " in s:
        s = s.rsplit("failed: ", 1)[1]
    return _one_line(s, 200)


def upgrade_opset(
    model: ModelProto, target: int = UPGRADE_OPSET, where: str = "<model>"
) -> ModelProto:
    """``model`` brought forward to ai.onnx opset ``target`` with ``onnx.version_converter``.

    The conversion goes one opset at a time with shape inference in between (the
    converter's adapters for old operators need input shapes, e.g. Gemm-6 -> 7 after a
    BatchNormalization-1 that the converter cannot infer through). Refusals (an operator
    version whose semantics have no newer equivalent, such as BatchNormalization-7 with
    ``spatial=0``) raise HwgenError naming the node, the op, its version and the reason.
    The IR version is raised to the target opset's minimum (IR 3 would require the
    initializers the converter adds to be graph inputs). A model at ``target`` or newer
    is returned unchanged (the same object). ``model`` is not modified.
    """

    opsets = {normalize_domain(o.domain): int(o.version) for o in model.opset_import}
    start = opsets.get("")
    if start is None or start >= target:
        return model
    work = ModelProto()
    work.CopyFrom(model)
    for o in work.opset_import:
        if normalize_domain(o.domain) == "":
            o.domain = ""
    # IR 3 requires every initializer to be a graph input too, which the initializers the
    # converter adds (Pad's pads, ...) are not: raise the IR version to the target opset's
    work.ir_version = max(int(work.ir_version),
                          int(helper.find_min_ir_version_for([helper.make_opsetid("", target)])))
    original_vi = list(model.graph.value_info)
    for v in range(start, target):
        try:
            shaped = onnx.shape_inference.infer_shapes(work)
        except Exception:  # the converter may still manage without shapes
            shaped = work
        try:
            work = onnx.version_converter.convert_version(shaped, v + 1)
        except Exception as e:
            raise HwgenError(
                f"{where}: {_step_culprit(shaped, v, start)} cannot be brought forward "
                f"to opset {target}: onnx.version_converter fails from opset {v} to "
                f"{v + 1} ({_converter_reason(e)})"
            ) from None
    del work.graph.value_info[:]
    work.graph.value_info.extend(original_vi)
    try:
        onnx.checker.check_model(work)
        onnx.shape_inference.infer_shapes(work, check_type=True, strict_mode=True)
    except Exception as e:
        raise HwgenError(f"{where}: the model brought forward from opset {start} to {target} by "
                         f"onnx.version_converter is not valid: {_one_line(e, 200)}") from None
    return work


def _step_culprit(model: ModelProto, v: int, start: int) -> str:
    """"node X: op 'Y' version N (model opset S)" for the first ai.onnx node whose operator
    changes between opsets v and v + 1 (the likely reason a conversion step failed; N is its
    version in the user's model), else "the model (opset S)"."""
    for i, node in enumerate(model.graph.node):
        if normalize_domain(node.domain) != "" or node.op_type == "Constant":  # (converter-made)
            continue
        try:
            old = onnx.defs.get_schema(
                node.op_type, max_inclusive_version=v, domain=""
            ).since_version
            new = onnx.defs.get_schema(
                node.op_type, max_inclusive_version=v + 1, domain=""
            ).since_version
            orig = onnx.defs.get_schema(
                node.op_type, max_inclusive_version=start, domain=""
            ).since_version
        except onnx.defs.SchemaError:
            continue
        if new != old:
            return (
                f"node {_proto_label(node, i)}: op '{node.op_type}' version {orig} "
                f"(model opset {start})"
            )
    return f"the model (opset {start})"


def _upgrade_if_needed(model: ModelProto, opsets: dict[str, int], versions, where: str,
                       handled: Mapping[str, Sequence[int]]):
    """Bring a model with an ai.onnx opset older than UPGRADE_OPSET forward when one of
    its nodes uses an operator version not in ``handled`` but a newer version is (Reshape-1
    with its shape attribute, BatchNormalization-6, Gemm-6, ...). Models whose operator
    versions are all handled are left exactly as they are."""
    if opsets.get("", UPGRADE_OPSET) >= UPGRADE_OPSET:
        return model, opsets, versions
    if not any(
        normalize_domain(n.domain) == ""
        and handled.get(n.op_type)
        and since not in handled[n.op_type]
        for n, (since, _) in zip(model.graph.node, versions)
    ):
        return model, opsets, versions
    model = upgrade_opset(model, UPGRADE_OPSET, where)
    opsets = _check_opsets(model, where)
    versions = _resolve_versions(model.graph, opsets, where)
    _check_ssa_and_order(model.graph, where)
    return model, opsets, versions


# ---------------------------------------------------------------- building


def _build(model: ModelProto, base_dir: str | None, where: str, path: str | None,
           handled: Mapping[str, Sequence[int]] | None = None,
           data: bytes | None = None) -> Graph:
    _check_header(model, where)
    _check_utf8(model, where, data)
    _check_declared_sizes(model, where)
    opsets = _check_opsets(model, where)
    _load_external_data(model, base_dir, where)
    model = _inline_functions(model, where)
    opsets = _check_opsets(model, where)  # the inliner may add imports of function domains
    notes: list[str] = []
    _import_qonnx_domains(model, opsets, notes)
    graph = model.graph
    versions = _resolve_versions(graph, opsets, where)
    _check_ssa_and_order(graph, where)
    _check_io_types(graph, where)
    _normalize_domains(model, opsets)
    _run_checker(model, where)
    # channel-last graphs read channel-first (on a model the checks above passed)
    if expand_channels_last(model, notes):
        opsets.pop(CHANNELS_LAST, None)
        sink_transposes(model, everywhere=True)
    else:
        sink_transposes(model)
    versions = _resolve_versions(graph, opsets, where)
    if handled is not None:
        model, opsets, versions = _upgrade_if_needed(model, opsets, versions, where, handled)
    inferred = _run_shape_inference(model, where)
    g = inferred.graph

    constants: dict[str, np.ndarray] = {}
    value_info: dict[str, TensorInfo] = {}
    try:
        for t in g.initializer:
            constants[t.name] = numpy_helper.to_array(t)
        for sp in g.sparse_initializer:
            constants[sp.values.name] = _sparse_to_array(sp)
    except Exception as e:
        raise HwgenError(
            f"{where}: cannot convert initializer to an array: {_one_line(e, 200)}"
        ) from e

    for vi in list(g.input) + list(g.value_info) + list(g.output):
        info = _tensor_info_from_value_info(vi)
        if info.dtype is not None or info.shape is not None:
            value_info[vi.name] = info
    for t in g.initializer:
        value_info[t.name] = TensorInfo(
            t.name, _np_dtype(t.data_type), tuple(int(d) for d in t.dims)
        )
    for sp in g.sparse_initializer:
        value_info[sp.values.name] = TensorInfo(
            sp.values.name, _np_dtype(sp.values.data_type), tuple(int(d) for d in sp.dims)
        )

    nodes: list[Node] = []
    for i, (node, (since, opset)) in enumerate(zip(g.node, versions)):
        label = _proto_label(node, i)
        dom = normalize_domain(node.domain)
        if dom == "" and node.op_type == "Constant":
            try:
                arr = _constant_value(node, where, label)
            except HwgenError:
                raise
            except Exception as e:
                raise HwgenError(
                    f"{where}: Constant node {label}: cannot read its value: {_one_line(e, 200)}"
                ) from e
            out = node.output[0]
            constants[out] = arr
            if out not in value_info:
                value_info[out] = TensorInfo(
                    out, arr.dtype if arr.dtype != object else None, tuple(arr.shape)
                )
            continue
        attrs: dict[str, Any] = {}
        for a in node.attribute:
            try:
                attrs[a.name] = _attr_value(a)
            except Exception as e:
                raise HwgenError(
                    f"{where}: node {label} (op '{node.op_type}'): "
                    f"cannot read attribute '{a.name}': {_one_line(e, 200)}"
                ) from e
        nodes.append(
            Node(
                name=node.name,
                op_type=node.op_type,
                domain=dom,
                since_version=since,
                opset_version=opset,
                inputs=list(node.input),
                outputs=list(node.output),
                attrs=attrs,
                index=i,
            )
        )

    init_names = {t.name for t in g.initializer} | {sp.values.name for sp in g.sparse_initializer}
    inputs = [_tensor_info_from_value_info(vi) for vi in g.input if vi.name not in init_names]
    outputs = [_tensor_info_from_value_info(vi) for vi in g.output]
    return Graph(
        name=g.name,
        nodes=nodes,
        inputs=inputs,
        outputs=outputs,
        constants=constants,
        value_info=value_info,
        opsets=opsets,
        ir_version=int(inferred.ir_version),
        path=path,
        notes=notes,
        datatypes=_datatypes(g),
    )


def _import_qonnx_domains(model: ModelProto, opsets: dict[str, int], notes: list[str]) -> None:
    """A QONNX domain that nodes use but ``opset_import`` leaves out is imported at version 1
    (as qonnx reads such files), with a note."""
    used = sorted({n.domain for n in model.graph.node if n.domain in QONNX_DOMAINS} - set(opsets))
    for dom in used:
        opsets[dom] = 1
        model.opset_import.append(helper.make_opsetid(dom, 1))
        notes.append(f"domain '{dom}' (QONNX quantizers) is not in opset_import; read as "
                     f"version 1")


def _datatypes(g: GraphProto) -> dict[str, str]:
    """``finn_datatype`` annotations of ``graph.quantization_annotation``."""
    out = {}
    for ann in g.quantization_annotation:
        for kv in ann.quant_parameter_tensor_names:
            if kv.key == "finn_datatype" and kv.value:
                out[ann.tensor_name] = kv.value.strip().upper()
    return out
