"""Seeded mutants of the example models, for the fuzzer (``benchmarks/fuzz.py``) and its
fixed seed set in the tests (``tests/e2e/test_fuzz.py``).

``mutant(seed, index)`` is a pure function of its two numbers: the same pair gives the same
bytes on every machine. A mutant is one of the small example models changed one to three
times, either through the onnx API (ops swapped, nodes duplicated, dropped or rewired,
attributes and initializers set to zero, negative, huge, NaN, inf or empty, dtypes and dims
changed, opsets and IR versions changed) or on its serialized bytes (bits flipped, bytes
overwritten, cut, inserted, repeated, or spliced with another example model).
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, numpy_helper

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"

#: (example model, weight): small models, the MLP most often (it compiles fastest)
BASES = (("digits_mlp_qdq.onnx", 5), ("digits_mlp_qdq_perchannel.onnx", 2),
         ("digits_cnn_qdq.onnx", 2), ("digits_cnn_qop.onnx", 2),
         ("digits_cnn_qdq_perchannel.onnx", 1), ("digits_resnet_qdq.onnx", 1),
         ("digits_resnet_qop.onnx", 1), ("digits_mlp.onnx", 1))

OPS = ("Relu", "Add", "Mul", "MatMul", "Gemm", "Conv", "QuantizeLinear", "DequantizeLinear",
       "QLinearConv", "QLinearMatMul", "MaxPool", "AveragePool", "GlobalAveragePool",
       "Reshape", "Flatten", "Transpose", "Concat", "Identity", "Sigmoid", "Clip", "Softmax",
       "Squeeze", "Unsqueeze", "Cast", "Constant", "BatchNormalization", "Sub", "Div",
       "LeakyRelu", "Tanh", "Pad", "Resize", "Split", "If", "Loop", "NoSuchOp", "")
DOMAINS = ("", "ai.onnx", "ai.onnx.ml", "com.microsoft", "qonnx.custom_op.general",
           "finn.custom_op.general", "made.up")
OPSETS = (0, 1, 6, 7, 9, 10, 11, 12, 13, 15, 17, 19, 21, 22, 23, 99, 2**31 - 1, -1)
IR_VERSIONS = (0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 11, 12, 99, -1, 2**40)
INTS = (0, -1, 1, 2, -2**31, 2**31 - 1, 2**62, 3, 7, 255, 65536)
FLOATS = (0.0, -0.0, -1.0, 1e-45, 1e-30, 1e30, 3.4e38, float("nan"), float("inf"),
          float("-inf"), 0.5)
ELEM_TYPES = (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.INT8,
              TensorProto.UINT8, TensorProto.INT16, TensorProto.INT32, TensorProto.INT64,
              TensorProto.BOOL, TensorProto.STRING, TensorProto.UINT4, TensorProto.INT4,
              TensorProto.FLOAT8E4M3FN, 0, 99)
DIMS = (0, 1, 2, 3, -1, 7, 64, 2**31, 2**40, None)


@dataclass(frozen=True)
class Mutant:
    seed: int
    index: int
    base: str          # example model file name
    steps: tuple       # what was done, in order (short descriptions)
    data: bytes        # the serialized mutant

    @property
    def label(self) -> str:
        return f"{self.seed}:{self.index} {self.base} " + " + ".join(self.steps)


@lru_cache(maxsize=None)
def _base_bytes(name: str) -> bytes:
    return (EXAMPLES / name).read_bytes()


def _model(name: str) -> onnx.ModelProto:
    m = onnx.ModelProto()
    m.ParseFromString(_base_bytes(name))
    return m


# ------------------------------------------------------------------ structural mutations

def _node(r: random.Random, g) -> int | None:
    return r.randrange(len(g.node)) if len(g.node) else None


def _names(g) -> list[str]:
    out = [i.name for i in g.input] + [t.name for t in g.initializer]
    for n in g.node:
        out += list(n.output)
    return out


def m_swap_op(r, m):
    g = m.graph
    k = _node(r, g)
    if k is None:
        return "no node"
    old, g.node[k].op_type = g.node[k].op_type, r.choice(OPS)
    return f"node {k} {old}->{g.node[k].op_type or '(empty)'}"


def m_domain(r, m):
    k = _node(r, m.graph)
    if k is None:
        return "no node"
    m.graph.node[k].domain = r.choice(DOMAINS)
    return f"node {k} domain {m.graph.node[k].domain!r}"


def m_duplicate_node(r, m):
    g = m.graph
    k = _node(r, g)
    if k is None:
        return "no node"
    n = onnx.NodeProto()
    n.CopyFrom(g.node[k])
    rename = r.random() < 0.5
    if rename:
        for j in range(len(n.output)):
            n.output[j] = n.output[j] + "_dup"
        n.name = n.name + "_dup"
    g.node.insert(r.randrange(len(g.node) + 1), n)
    return f"node {k} duplicated{' (renamed)' if rename else ''}"


def m_drop_node(r, m):
    g = m.graph
    k = _node(r, g)
    if k is None:
        return "no node"
    del g.node[k]
    return f"node {k} dropped"


def m_move_node(r, m):
    g = m.graph
    k = _node(r, g)
    if k is None:
        return "no node"
    n = onnx.NodeProto()
    n.CopyFrom(g.node[k])
    del g.node[k]
    j = r.randrange(len(g.node) + 1)
    g.node.insert(j, n)
    return f"node {k} moved to {j}"


def m_rewire(r, m):
    g = m.graph
    k = _node(r, g)
    if k is None:
        return "no node"
    n = g.node[k]
    how = r.choice(("other", "missing", "empty", "self", "drop", "add", "reverse", "output"))
    names = _names(g)
    if how == "other" and n.input:
        n.input[r.randrange(len(n.input))] = r.choice(names)
    elif how == "missing" and n.input:
        n.input[r.randrange(len(n.input))] = "no_such_tensor"
    elif how == "empty" and n.input:
        n.input[r.randrange(len(n.input))] = ""
    elif how == "self" and n.input and n.output:
        n.input[r.randrange(len(n.input))] = n.output[0]
    elif how == "drop" and n.input:
        del n.input[r.randrange(len(n.input))]
    elif how == "add":
        n.input.append(r.choice(names + [""]))
    elif how == "reverse":
        n.input.reverse()
    elif how == "output" and n.output:
        n.output[0] = r.choice(names + ["fresh_name", ""])
    return f"node {k} rewired ({how})"


def _attr_value(r, a: AttributeProto) -> str:
    t = a.type
    if t == AttributeProto.INT:
        a.i = r.choice(INTS)
        return str(a.i)
    if t == AttributeProto.FLOAT:
        a.f = r.choice(FLOATS)
        return str(a.f)
    if t == AttributeProto.INTS:
        how = r.choice(("empty", "zero", "neg", "huge", "longer", "shorter", "random"))
        vals = list(a.ints)
        if how == "empty":
            vals = []
        elif how == "zero":
            vals = [0] * len(vals)
        elif how == "neg":
            vals = [-abs(v) - 1 for v in vals]
        elif how == "huge":
            vals = [2**40] * max(1, len(vals))
        elif how == "longer":
            vals = vals + [r.choice(INTS)]
        elif how == "shorter":
            vals = vals[:-1]
        else:
            vals = [r.choice(INTS) for _ in vals]
        del a.ints[:]
        a.ints.extend(vals)
        return f"ints {how}"
    if t == AttributeProto.FLOATS:
        vals = [r.choice(FLOATS) for _ in range(r.choice((0, 1, len(a.floats))))]
        del a.floats[:]
        a.floats.extend(vals)
        return "floats"
    if t == AttributeProto.STRING:
        a.s = r.choice((b"", b"garbage", b"\xff\xfe", b"NOTSET", b"SAME_UPPER", b"VALID"))
        return f"string {a.s!r}"
    if t == AttributeProto.TENSOR:
        return "tensor " + _tensor_value(r, a.t)
    a.type = r.choice((AttributeProto.INT, AttributeProto.FLOAT, AttributeProto.STRING))
    return "retyped"


def m_attribute(r, m):
    g = m.graph
    with_attr = [k for k, n in enumerate(g.node) if n.attribute]
    how = r.choice(("value", "value", "value", "remove", "add", "retype"))
    if how == "add" or not with_attr:
        k = _node(r, g)
        if k is None:
            return "no node"
        a = g.node[k].attribute.add()
        a.name = r.choice(("axis", "alpha", "kernel_shape", "strides", "pads", "group",
                           "transA", "transB", "made_up"))
        a.type = AttributeProto.INT
        a.i = r.choice(INTS)
        return f"node {k} attribute {a.name} added"
    k = r.choice(with_attr)
    attrs = g.node[k].attribute
    j = r.randrange(len(attrs))
    if how == "remove":
        name = attrs[j].name
        del attrs[j]
        return f"node {k} attribute {name} removed"
    if how == "retype":
        attrs[j].type = r.choice((AttributeProto.INT, AttributeProto.FLOAT,
                                  AttributeProto.INTS, AttributeProto.STRING,
                                  AttributeProto.TENSOR, AttributeProto.GRAPH, 0, 99))
        return f"node {k} attribute {attrs[j].name} retyped {attrs[j].type}"
    return f"node {k} attribute {attrs[j].name} = {_attr_value(r, attrs[j])}"


def _tensor_value(r, t: TensorProto) -> str:
    """Change a tensor's values, dims or type in place."""
    how = r.choice(("zero", "neg", "huge", "nan", "inf", "ninf", "empty", "scalar", "dims",
                    "dtype", "random", "tiny", "one"))
    try:
        a = numpy_helper.to_array(t)
    except Exception:  # noqa: BLE001 - a tensor an earlier step already broke
        a = np.zeros(1, np.float32)
    name = t.name
    if how == "dims":
        dims = list(t.dims)
        choice = r.choice(("drop", "add", "set"))
        if choice == "drop" and dims:
            dims.pop(r.randrange(len(dims)))
        elif choice == "add":
            dims.insert(r.randrange(len(dims) + 1), r.choice((1, 2, 0)))
        elif dims:
            dims[r.randrange(len(dims))] = r.choice((0, 1, 2, 2**40, -1))
        del t.dims[:]
        t.dims.extend(dims)
        return f"dims {dims}"
    if how == "dtype":
        t.data_type = r.choice(ELEM_TYPES)
        return f"data_type {t.data_type}"
    if how == "empty":
        a = a.reshape(-1)[:0]
    elif how == "scalar":
        a = np.array(a.reshape(-1)[0] if a.size else 0, dtype=a.dtype)
    else:
        if a.dtype.kind == "f":
            v = {"zero": 0.0, "neg": -1.0, "huge": 3.4e38, "nan": np.nan, "inf": np.inf,
                 "ninf": -np.inf, "tiny": 1e-45, "one": 1.0}.get(how)
        elif a.dtype.kind in "iu":
            info = np.iinfo(a.dtype)
            v = {"zero": 0, "neg": info.min if info.min < 0 else 0, "huge": info.max,
                 "nan": info.min, "inf": info.max, "ninf": info.min, "tiny": 1,
                 "one": 1}.get(how)
        else:
            v = None
        a = a.copy()
        if how == "random" or v is None:
            if a.dtype.kind == "f":
                a = (np.float32(r.uniform(-100, 100)) * np.ones_like(a)).astype(a.dtype)
            elif a.dtype.kind in "iu":
                info = np.iinfo(a.dtype)
                a = np.full_like(a, r.randint(int(info.min), int(info.max)))
        elif a.size:
            flat = a.reshape(-1)
            if r.random() < 0.5:
                flat[:] = v
            else:
                flat[r.randrange(flat.size)] = v
    new = numpy_helper.from_array(a, name)
    t.CopyFrom(new)
    return how


def m_initializer(r, m):
    g = m.graph
    if not g.initializer:
        consts = [n for n in g.node if n.op_type == "Constant" and n.attribute]
        if not consts:
            return "no initializer"
        return "constant " + _tensor_value(r, r.choice(consts).attribute[0].t)
    t = r.choice(list(g.initializer))
    how = r.random()
    if how < 0.08:
        g.initializer.remove(t)
        return f"initializer {t.name} removed"
    if how < 0.14:
        d = g.initializer.add()
        d.CopyFrom(t)
        return f"initializer {t.name} duplicated"
    if how < 0.2:
        t.name = r.choice(_names(g))
        return f"initializer renamed {t.name}"
    return f"initializer {t.name} " + _tensor_value(r, t)


def m_opset(r, m):
    if not m.opset_import:
        m.opset_import.add().version = r.choice(OPSETS)
        return "opset added"
    o = r.choice(list(m.opset_import))
    how = r.random()
    if how < 0.15:
        m.opset_import.remove(o)
        return f"opset {o.domain!r} removed"
    if how < 0.25:
        d = m.opset_import.add()
        d.domain, d.version = o.domain, r.choice(OPSETS)
        return "opset duplicated"
    if how < 0.35:
        d = m.opset_import.add()
        d.domain, d.version = r.choice(DOMAINS), r.choice(OPSETS)
        return f"opset {d.domain!r} {d.version} added"
    o.version = r.choice(OPSETS)
    return f"opset {o.domain!r} -> {o.version}"


def m_ir_version(r, m):
    m.ir_version = r.choice([v for v in IR_VERSIONS if 0 <= v < 2**63])
    return f"ir_version {m.ir_version}"


def _value_info(r, vi) -> str:
    tt = vi.type.tensor_type
    how = r.choice(("elem", "dim", "dim", "rank", "notype"))
    if how == "elem":
        tt.elem_type = r.choice(ELEM_TYPES)
        return f"elem_type {tt.elem_type}"
    if how == "notype":
        vi.ClearField("type")
        return "type cleared"
    dims = tt.shape.dim
    if how == "rank":
        if dims and r.random() < 0.5:
            del dims[r.randrange(len(dims))]
            return "rank -1"
        dims.add().dim_value = r.choice((1, 2))
        return "rank +1"
    if not dims:
        return "no dims"
    d = dims[r.randrange(len(dims))]
    v = r.choice(DIMS)
    if v is None:
        d.dim_param = r.choice(("N", "", "batch"))
        return f"dim param {d.dim_param!r}"
    d.dim_value = v
    return f"dim {v}"


def m_io(r, m):
    g = m.graph
    how = r.random()
    if how < 0.1 and g.output:
        del g.output[r.randrange(len(g.output))]
        return "output removed"
    if how < 0.15:
        vi = g.input.add()
        vi.CopyFrom(r.choice(list(g.input) or list(g.output)))
        vi.name = r.choice(("second_input", vi.name))
        return "input added"
    if how < 0.2 and g.output:
        g.output[0].name = r.choice(_names(g) + ["nowhere"])
        return f"output renamed {g.output[0].name}"
    if how < 0.25:
        del g.input[:]
        return "inputs removed"
    pool = [("input", v) for v in g.input] + [("output", v) for v in g.output] + \
           [("value_info", v) for v in g.value_info]
    if not pool:
        return "no value info"
    where, vi = r.choice(pool)
    return f"{where} {vi.name} " + _value_info(r, vi)


def m_output_symbolic(r, m):
    """Every dimension of the graph output symbolic (``['N', 'N']``, as some exporters
    declare it): the sizes come from the computation."""
    if not m.graph.output:
        return "no output"
    for d in m.graph.output[0].type.tensor_type.shape.dim:
        d.dim_param = r.choice(("N", "M", "unk__7"))
    return "output dims symbolic"


def m_raw_bits(r, m):
    """Flip bits inside one initializer's stored values (the model stays well formed)."""
    ts = [t for t in m.graph.initializer if t.raw_data]
    if not ts:
        return "no raw data"
    t = r.choice(ts)
    raw = bytearray(t.raw_data)
    n = r.choice((1, 1, 2, 8))
    for _ in range(n):
        raw[r.randrange(len(raw))] ^= 1 << r.randrange(8)
    t.raw_data = bytes(raw)
    return f"initializer {t.name} {n} value bits flipped"


def m_values(r, m):
    """Set a few elements of one initializer to special values of its type."""
    if not m.graph.initializer:
        return "no initializer"
    t = r.choice(list(m.graph.initializer))
    try:
        a = numpy_helper.to_array(t).copy()
    except Exception:  # noqa: BLE001 - an earlier step broke it
        return "unreadable initializer"
    if not a.size or a.dtype.kind not in "fiu":
        return "no values"
    flat = a.reshape(-1)
    if a.dtype.kind == "f":
        pool = FLOATS + (1e-7, 7.0, -3.5, 1e6)
    else:
        info = np.iinfo(a.dtype)
        pool = (info.min, info.max, 0, 1, -1 if info.min < 0 else 2, info.max // 2)
    k = r.choice((1, 1, 2, max(1, flat.size // 4)))
    for _ in range(k):
        flat[r.randrange(flat.size)] = r.choice(pool)
    t.CopyFrom(numpy_helper.from_array(a, t.name))
    return f"initializer {t.name} {k} values set"


STRUCTURAL = ((m_raw_bits, 5), (m_values, 5), (m_swap_op, 3), (m_domain, 1),
              (m_duplicate_node, 2), (m_drop_node, 2),
              (m_move_node, 1), (m_rewire, 3), (m_attribute, 4), (m_initializer, 6),
              (m_opset, 2), (m_ir_version, 1), (m_io, 3), (m_output_symbolic, 1))


# -------------------------------------------------------------------- byte mutations

def b_flip(r, data: bytearray, other: bytes) -> str:
    n = r.choice((1, 1, 2, 4, 8, 32))
    for _ in range(n):
        k = r.randrange(len(data))
        data[k] ^= 1 << r.randrange(8)
    return f"{n} bits flipped"


def b_set(r, data, other):
    k = r.randrange(len(data))
    n = r.choice((1, 2, 4, 8))
    v = r.choice((0x00, 0xff, 0x7f, 0x80, r.randrange(256)))
    data[k:k + n] = bytes([v]) * len(data[k:k + n])
    return f"{n} bytes at {k} = {v:#x}"


def b_truncate(r, data, other):
    k = r.randrange(len(data))
    del data[k:]
    return f"cut at {k}"


def b_insert(r, data, other):
    k = r.randrange(len(data) + 1)
    n = r.choice((1, 3, 16, 200))
    data[k:k] = bytes(r.randrange(256) for _ in range(n))
    return f"{n} bytes inserted at {k}"


def b_delete(r, data, other):
    k = r.randrange(len(data))
    n = r.choice((1, 2, 8, 64))
    del data[k:k + n]
    return f"{n} bytes deleted at {k}"


def b_repeat(r, data, other):
    k = r.randrange(len(data))
    n = r.choice((2, 16, 256))
    data[k:k] = data[k:k + n]
    return f"{n} bytes repeated at {k}"


def b_splice(r, data, other):
    k = r.randrange(len(data))
    j = r.randrange(len(other))
    data[k:] = other[j:]
    return f"spliced at {k} with another model from {j}"


BYTES = ((b_flip, 4), (b_set, 2), (b_truncate, 1), (b_insert, 1), (b_delete, 1),
         (b_repeat, 1), (b_splice, 1))


def _pick(r: random.Random, table):
    fns, weights = zip(*table)
    return r.choices(fns, weights)[0]


def mutant(seed: int, index: int) -> Mutant:
    """The ``index``-th mutant of ``seed``: 1–3 structural mutations (70 %) or byte-level
    ones (30 %), sometimes a structural then a byte mutation."""
    r = random.Random(f"hwgen-fuzz:{seed}:{index}")
    names, weights = zip(*BASES)
    base = r.choices(names, weights)[0]
    steps = []
    mode = r.random()
    data = _base_bytes(base)
    if mode < 0.75:
        m = _model(base)
        for _ in range(r.choice((1, 1, 1, 2, 2, 3))):
            fn = _pick(r, STRUCTURAL)
            try:
                steps.append(fn(r, m))
            except Exception as e:  # noqa: BLE001 - the onnx API refusing a combination
                steps.append(f"{fn.__name__} skipped ({type(e).__name__})")
        data = m.SerializeToString()
    if mode >= 0.65:
        buf = bytearray(data)
        other = _base_bytes(r.choice(names))
        for _ in range(r.choice((1, 1, 2))):
            if not buf:
                break
            fn = _pick(r, BYTES)
            steps.append(fn(r, buf, other))
        data = bytes(buf)
    return Mutant(seed, index, base, tuple(steps), data)
