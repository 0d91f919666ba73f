"""Elementwise functions of one quantized tensor, as lookup tables.

QDQ form: ``DequantizeLinear → f → QuantizeLinear`` with ``f`` any unary elementwise op of
:data:`TABLE_OPS` (Sigmoid, Tanh, LeakyRelu, HardSwish, …); the handler makes a pending
:class:`Tabled` that the QuantizeLinear closes. QOperator form: onnxruntime's
``com.microsoft`` ``QLinearSigmoid`` / ``QLinearLeakyRelu``.

The table is what onnxruntime itself computes: a model of just ``DequantizeLinear → f →
QuantizeLinear`` (or the one QLinear node), with the layer's scales, zero points and
attributes, runs on every possible input value (at most :data:`MAX_TABLE_BITS` bits) in
onnxruntime with its default optimizations, as ``hwgen verify`` runs the whole model. So the
hardware equals onnxruntime by construction, whatever float arithmetic ``f`` uses. The
integer op is a :class:`TableOp`, one lookup-table block (``rtl_templates/lut.py``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

from hwgen.dataflow.context import REGISTRY, ImportContext, Unsupported
from hwgen.dataflow.intgraph import IntGraph, int_op
from hwgen.dataflow.loader import Node
from hwgen.dataflow.lower import Block, Builder, Folding, short_name
from hwgen.dataflow.ops_qdq import closed_nodes, out_params, qtype_of
from hwgen.dataflow.values import Deq, Int, Pending
from hwgen.rtl_templates.block import FoldSpace, divisors
from hwgen.rtl_templates.lut import LUTParams
from hwgen.rtl_templates.quant import QType

#: widest input a table takes (2**bits entries)
MAX_TABLE_BITS = 8
#: unary elementwise ai.onnx ops mapped to a table
TABLE_OPS = ("Sigmoid", "Tanh", "LeakyRelu", "HardSigmoid", "HardSwish", "Elu", "Selu",
             "Celu", "Softplus", "Softsign", "Gelu", "Erf", "Exp", "Log", "Neg", "Abs",
             "Sqrt", "Reciprocal", "ThresholdedRelu", "Mish", "Sin", "Cos")
#: onnxruntime's QOperator forms (com.microsoft)
MS = "com.microsoft"
QLINEAR_OPS = ("QLinearSigmoid", "QLinearLeakyRelu")


@int_op
@dataclass
class TableOp:
    """``out[k] = table[raw bits of in[k]]`` for every element."""
    name: str
    nodes: list[str]
    input: str
    output: str
    table: np.ndarray          # [2**in_bits] int64, indexed by the input's raw bits

    def channels(self, ig: IntGraph) -> int:
        t = ig.tensors[self.output]
        return t.shape[0] if len(t.shape) in (2, 3) else t.size

    def fold_space(self, ig: IntGraph) -> FoldSpace:
        size = ig.tensors[self.output].size
        return FoldSpace(divisors(self.channels(ig)), (1,), lambda pe, simd: size // pe)

    def in_per_beat(self, f: Folding) -> int:
        return f.pe

    def lower(self, b: Builder, ig: IntGraph, f: Folding) -> str:
        tin, tout = ig.tensors[self.input], ig.tensors[self.output]
        p = LUTParams(tuple(int(v) for v in self.table), tin.qtype, tout.qtype, f.pe,
                      tout.size, self.channels(ig))
        src, _ = b.read(self.input, f.pe)
        out = b.stream(short_name(self.output), tout.qtype, f.pe, tout.size)
        b.add(Block(self.name, "lut", p, [src], [out], self.name, tuple(self.nodes)))
        return out


def np_type(q: QType) -> np.dtype:
    return np.dtype(f"{'int' if q.signed else 'uint'}{8 if q.bits <= 8 else 16}")


def all_values(q: QType) -> np.ndarray:
    """Every value of ``q``, ordered by raw bit pattern (the table's index)."""
    raw = np.arange(1 << q.bits, dtype=np.int64)
    return q.from_unsigned(raw)


def ort_table(nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto], in_type: QType,
              out_dtype: np.dtype, opsets: dict[str, int]) -> np.ndarray:
    """onnxruntime's output for every input value of ``in_type`` (raw-bit order) of the model
    ``nodes`` from tensor ``q`` to tensor ``y``."""
    if in_type.bits > MAX_TABLE_BITS:
        raise Unsupported(f"a table needs an input of at most {MAX_TABLE_BITS} bits, not "
                          f"{in_type.name}")
    x = all_values(in_type).astype(np_type(in_type))
    return ort_eval(nodes, inits, {"q": x}, out_dtype, opsets)


def ort_eval(nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto],
             feeds: dict[str, np.ndarray], out_dtype: np.dtype,
             opsets: dict[str, int]) -> np.ndarray:
    """onnxruntime's output ``y`` of the model ``nodes`` fed the arrays ``feeds``, run with its
    default optimizations as ``hwgen verify`` runs a model."""
    import onnxruntime as ort

    elem = helper.np_dtype_to_tensor_dtype
    graph = helper.make_graph(
        nodes, "table", [helper.make_tensor_value_info(k, elem(v.dtype), list(v.shape))
                         for k, v in feeds.items()],
        [helper.make_tensor_value_info("y", elem(out_dtype), None)], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v)
                                                    for d, v in sorted(opsets.items())])
    model.ir_version = min(model.ir_version, 9)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    try:
        sess = ort.InferenceSession(model.SerializeToString(), so,
                                    providers=["CPUExecutionProvider"])
        return sess.run(["y"], feeds)[0].astype(np.int64)
    except Exception as e:  # noqa: BLE001 - onnxruntime's own refusal, reported on the node
        raise Unsupported(f"onnxruntime cannot evaluate its table ({type(e).__name__}: "
                          f"{str(e).splitlines()[0][:200]})") from None


def scalar_init(name: str, value, dtype) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value, dtype=dtype), name)


#: ops that may read a table's float result and extend it (the scalar arithmetic of
#: :mod:`dataflow.ops_scalar` among them)
CHAINABLE = frozenset(TABLE_OPS) | {"Add", "Sub", "Mul", "Div"}


@dataclass
class Step:
    """One elementwise op of a table chain: its node, its input names in the table model
    (``x``: the value so far; other names: constants), and the nodes and initializers that
    define those constants."""
    node: Node
    inputs: tuple[str, ...] = ("x",)
    const_nodes: tuple = ()
    const_inits: tuple = ()


@dataclass
class Tabled(Pending):
    """Elementwise ops of one dequantized tensor, each reading the one before (and
    constants), awaiting their QuantizeLinear."""
    tensor: str
    shape: tuple[int, ...]
    order: np.ndarray | None
    steps: list[Step]
    nodes: list[str]

    def then(self, step: Step) -> Tabled:
        """This chain extended by ``step``."""
        return Tabled(self.tensor, self.shape, self.order, self.steps + [step],
                      self.nodes + [step.node.label])

    def close(self, ctx, name, qtype, s, zp, closing) -> Int:
        t = ctx.ig.tensors[self.tensor]
        inits = [scalar_init("s_in", t.scale, np.float32),
                 scalar_init("z_in", t.zero_point, np_type(t.qtype)),
                 scalar_init("s_out", s, np.float32),
                 scalar_init("z_out", zp, np_type(qtype))]
        nodes = [helper.make_node("DequantizeLinear", ["q", "s_in", "z_in"], ["f"])]
        prev = "f"
        for k, st in enumerate(self.steps):
            nodes += st.const_nodes
            inits += st.const_inits
            nodes.append(helper.make_node(st.node.op_type,
                                          [prev if i == "x" else i for i in st.inputs],
                                          [f"f{k}"], **dict(st.node.attrs)))
            prev = f"f{k}"
        nodes.append(helper.make_node("QuantizeLinear", [prev, "s_out", "z_out"], ["y"]))
        version = max(st.node.opset_version for st in self.steps)
        table = ort_table(nodes, inits, t.qtype, np_type(qtype), {"": max(13, version)})
        out = ctx.new_tensor(name, self.shape, qtype, s, zp)
        ctx.ig.ops.append(TableOp(self.nodes[0], closed_nodes(self.nodes, closing),
                                  self.tensor, out, table))
        return Int(out, self.shape, self.order)


def quantized_after(ctx: ImportContext, node: Node) -> bool:
    """``node``'s float result is quantized: every reader is a QuantizeLinear, or its one
    reader an elementwise op that may extend the table (and it is no graph output)."""
    y = node.outputs[0]
    readers = [n for n in ctx.graph.nodes if y in n.inputs]
    if not readers or y in {o.name for o in ctx.graph.outputs}:
        return False
    return all(n.op_type == "QuantizeLinear" for n in readers) or (
        len(readers) == 1 and readers[0].domain == "" and readers[0].op_type in CHAINABLE)


def chain_input(ctx: ImportContext, node: Node, k: int = 0):
    """Input ``k`` of ``node`` if a table can start or go on from it: a dequantized tensor,
    or a table chain read by this node alone; else None."""
    x = ctx.value(node, k)
    if isinstance(x, Deq):
        return x
    if isinstance(x, Tabled) and ctx.n_consumers.get(node.inputs[k], 0) == 1:
        return x
    return None


def unary(ctx: ImportContext, node: Node):
    x = chain_input(ctx, node)
    if x is None:
        raise Unsupported(f"its input is a {type(ctx.value(node, 0)).__name__}; a table "
                          f"activation needs a dequantized tensor (DequantizeLinear before it)")
    if len([o for o in node.outputs if o]) != 1:
        raise Unsupported("only its first output is supported")
    if not (quantized_after(ctx, node) or ctx.assume_quantized):
        raise Unsupported(f"op '{node.op_type}' as a table activation needs a QuantizeLinear "
                          f"after it; its float result '{node.outputs[0]}' is not supported")
    step = Step(node)
    ctx.set(node, x.then(step) if isinstance(x, Tabled) else
            Tabled(x.tensor, x.shape, x.order, [step], [node.label]))


def qlinear_unary(ctx: ImportContext, node: Node):
    """QLinearSigmoid / QLinearLeakyRelu (X, X_scale, X_zero_point, Y_scale, Y_zero_point)."""
    x = ctx.value(node, 0)
    if not isinstance(x, Int):
        raise Unsupported(f"its input is a {type(x).__name__}, not an integer tensor")
    t = ctx.ig.tensors[x.tensor]
    zp_arr = ctx.zero_point(node, 4, what="output zero point")
    qtype = qtype_of(node, zp_arr)
    s, zp = out_params(ctx.scale(node, 3, "output scale"), zp_arr)
    s_in, z_in = out_params(ctx.scale(node, 1, "input scale"),
                            ctx.zero_point(node, 2, what="input zero point"))
    if (np.float32(t.scale), t.zero_point) != (s_in, z_in):
        raise Unsupported(f"reads '{x.tensor}' with scale {s_in} zero point {z_in}, but it "
                          f"was quantized with scale {t.scale} zero point {t.zero_point}")
    inits = [scalar_init("s_in", s_in, np.float32), scalar_init("z_in", z_in, np_type(t.qtype)),
             scalar_init("s_out", s, np.float32), scalar_init("z_out", zp, np_type(qtype))]
    fn = helper.make_node(node.op_type, ["q", "s_in", "z_in", "s_out", "z_out"], ["y"],
                          domain=MS, **dict(node.attrs))
    table = ort_table([fn], inits, t.qtype, np_type(qtype), {"": 13, MS: 1})
    out = ctx.new_tensor(node.outputs[0], x.shape, qtype, s, zp)
    ctx.ig.ops.append(TableOp(node.label, [node.label], x.tensor, out, table))
    ctx.set(node, Int(out, x.shape, x.order))


_VERSIONS: dict[str, set[int]] = {}
for _schema in onnx.defs.get_all_schemas_with_history():
    if _schema.domain == "" and _schema.name in TABLE_OPS:
        _VERSIONS.setdefault(_schema.name, set()).add(_schema.since_version)
for _op in TABLE_OPS:
    for _v in sorted(_VERSIONS.get(_op, ())):
        REGISTRY.register("", _op, _v)(unary)
for _op in QLINEAR_OPS:
    REGISTRY.register(MS, _op, 1)(qlinear_unary)

__all__ = ["CHAINABLE", "MAX_TABLE_BITS", "QLINEAR_OPS", "TABLE_OPS", "Step", "TableOp", "Tabled",
           "all_values", "chain_input", "np_type", "ort_eval", "ort_table", "quantized_after",
           "scalar_init"]
