"""Elementwise arithmetic of a quantized tensor and one constant number, as a lookup table.

QDQ form ``DequantizeLinear → Add / Sub / Mul / Div (with a constant) → QuantizeLinear``, the
tensor on either side (or a chain of such ops and table activations between the two, as
onnxruntime's quantizer leaves the ops it does not quantize), the constant one number: a
float constant, or a DequantizeLinear of an integer one (as onnxruntime's quantizer writes
the constant operand of an op it quantizes). The result is a function of the one quantized
input, so, like a table activation (:mod:`dataflow.ops_table`), it is a lookup table holding
onnxruntime's own result for every input value: a model of the DequantizeLinear, the ops with
their constants and the QuantizeLinear, run with onnxruntime's default optimizations as
``hwgen verify`` runs the whole model. Exact against onnxruntime by construction.

That is how PyTorch's GELU as the TorchScript exporter writes it below opset 20 maps once
quantized (``x · 0.5 · (1 + erf(x / √2))``: the Div and the Erf, the Add, the Mul by 0.5 are
tables, one chain where the quantizer leaves ops float; ``x · (1 + erf)`` a product of two
tensors).

QOperator form: onnxruntime's ``QLinearAdd`` / ``QLinearMul`` with one input a constant
number: the table of the node itself.

Everything else goes to the handler registered before: a constant on a pending layer (a
bias, a scale, QONNX thresholds), the float input's preprocessing, two tensors.
"""
from __future__ import annotations

import numpy as np
from onnx import helper, numpy_helper

from hwgen.dataflow.context import REGISTRY, ImportContext
from hwgen.dataflow.loader import Node
from hwgen.dataflow.ops_qdq import out_params, qtype_of
from hwgen.dataflow.ops_qonnx import QDeq
from hwgen.dataflow.ops_qop import MS
from hwgen.dataflow.ops_table import (
    Step,
    Tabled,
    TableOp,
    chain_input,
    np_type,
    ort_table,
    quantized_after,
)
from hwgen.dataflow.values import Const, DeqConst, Int

#: the binary elementwise ops taken here, and onnxruntime's QOperator forms (com.microsoft)
OPS = ("Add", "Sub", "Mul", "Div")
QLINEAR_OPS = ("QLinearAdd", "QLinearMul")


def _constant(c, tag: str) -> tuple[list, list] | None:
    """(nodes, initializers) defining the table model's input ``tag`` as the constant ``c``,
    or None if it is not one number."""
    if isinstance(c, Const) and c.array.size == 1 and c.array.dtype.kind == "f":
        return [], [numpy_helper.from_array(np.asarray(c.array), tag)]
    if isinstance(c, DeqConst) and c.q.size == 1 and np.asarray(c.scale).size == 1:
        q, s, z = (f"{tag}_{k}" for k in "qsz")
        inits = [numpy_helper.from_array(np.asarray(c.q), q),
                 numpy_helper.from_array(np.asarray(c.scale, np.float32).reshape(()), s),
                 numpy_helper.from_array(np.asarray(c.zero_point, c.q.dtype).reshape(()), z)]
        return [helper.make_node("DequantizeLinear", [q, s, z], [tag])], inits
    return None


def scalar_table(ctx: ImportContext, node: Node) -> Tabled | None:
    """The pending table of ``node`` if it reads a dequantized tensor (not a QONNX one) or a
    table chain, and a constant number, and its result is quantized; else None."""
    if node.attrs or len(node.inputs) != 2 or len([o for o in node.outputs if o]) != 1 or \
            not quantized_after(ctx, node):
        return None
    tag = f"c_{node.label}"
    for k in (0, 1):
        x = chain_input(ctx, node, k)
        consts = _constant(ctx.value(node, 1 - k), tag)
        if x is None or consts is None or isinstance(x, QDeq):
            continue
        step = Step(node, ("x", tag) if k == 0 else (tag, "x"), tuple(consts[0]),
                    tuple(consts[1]))
        return x.then(step) if isinstance(x, Tabled) else \
            Tabled(x.tensor, x.shape, x.order, [step], [node.label])
    return None


def qlinear_scalar(ctx: ImportContext, node: Node) -> bool:
    """QLinearAdd / QLinearMul (A, A_scale, A_zp, B, B_scale, B_zp, C_scale, C_zp) of an
    integer tensor and a constant number: the table of the node itself, with its constants
    (True); False if it is not that."""
    for k, c in ((0, 3), (3, 0)):
        x, const = ctx.value(node, k), ctx.value(node, c)
        if not (type(x) is Int and isinstance(const, Const) and const.array.size == 1):
            continue
        t = ctx.ig.tensors[x.tensor]
        s_in, z_in = out_params(ctx.scale(node, k + 1, "input scale"),
                                ctx.zero_point(node, k + 2, what="input zero point"))
        if (np.float32(t.scale), t.zero_point) != (s_in, z_in):
            return False
        names, inits = [], []
        for j, name in enumerate(node.inputs):
            if j == k or not name:
                names.append("q" if j == k else "")
                continue
            names.append(f"i{j}")
            inits.append(numpy_helper.from_array(np.asarray(ctx.values[name].array), f"i{j}"))
        zp_arr = ctx.zero_point(node, 7, what="output zero point")
        qtype = qtype_of(node, zp_arr)
        s, zp = out_params(ctx.scale(node, 6, "output scale"), zp_arr)
        fn = helper.make_node(node.op_type, names, ["y"], domain=MS, **dict(node.attrs))
        table = ort_table([fn], inits, t.qtype, np_type(qtype), {"": 13, MS: 1})
        out = ctx.new_tensor(node.outputs[0], x.shape, qtype, s, zp)
        ctx.ig.ops.append(TableOp(node.label, [node.label], x.tensor, out, table))
        ctx.set(node, Int(out, x.shape, x.order))
        return True
    return False


def _extend(before):
    def handler(ctx: ImportContext, node: Node):
        tabled = scalar_table(ctx, node)
        if tabled is None:
            before(ctx, node)
        else:
            ctx.set(node, tabled)
    return handler


def _extend_qlinear(before):
    def handler(ctx: ImportContext, node: Node):
        if not qlinear_scalar(ctx, node):
            before(ctx, node)
    return handler


for _op in OPS:
    for _v in REGISTRY.versions("", _op):
        REGISTRY.extend("", _op, _v)(_extend)
for _op in QLINEAR_OPS:
    REGISTRY.extend(MS, _op, 1)(_extend_qlinear)

__all__ = ["OPS", "QLINEAR_OPS", "qlinear_scalar", "scalar_table"]
