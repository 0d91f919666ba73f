"""The importer's inspection modes: ``collect`` every problem, ``assume_quantized`` float models.

:func:`dataflow.importer.to_int_graph` raises on the first node it cannot map. For
``hwgen inspect`` two more modes exist (``to_int_graph(graph, collect=..., assume_quantized=...)``
delegates here):

``collect=True``
    Every node that cannot map is recorded as a :class:`Problem` and the walk goes on: the
    outputs of a failed node become :class:`Unknown` values, and a node fed by an Unknown value
    is *blocked* by the node that failed first (it is not a problem of its own). The result is
    the integer graph of everything that mapped plus an :class:`ImportReport` with a status for
    every node. When shape inference knows the shape of a failed node's output, the walk
    goes on past it with a :class:`StandIn` (read downstream as a quantized stream of that
    shape), so that problems further down are found too and the layers after it still get
    estimates; their status says which failed node they follow (``after``). Only outputs of
    unknown shape leave their consumers blocked.

``assume_quantized=True``
    A float model (no QuantizeLinear) is read as if it were quantized to 8 bits, to estimate
    what its hardware would cost: the float graph input is quantized to uint8; float constants
    used as Gemm/MatMul/Conv weights become int8, symmetric per tensor (scale = max|w|/127, 1 if
    all zero); a pending computation (a product, pooling or join awaiting its QuantizeLinear) is
    closed with an assumed uint8 type (scale 1, zero point 0: values do not matter for the
    estimates) where a node consumes it that cannot extend it — anything but
    BatchNormalization, Relu, Clip, Add/Mul with a constant, Cast, Identity and Dropout — where
    it has several consumers, and at the graph output. Dropout's unused mask output is
    ignored. With ``collect`` too, a node that fails to extend a pending value (a Mul by a
    negative scale, a BatchNormalization after pooling) first quantizes it, so that the
    layer before it still maps.

Memory: in both modes Gemm/MatMul weights of 8 bits stay 8 bits (int16 with a zero point)
instead of the int64 copies the registered handlers make, and their accumulator range is
computed without one (:data:`LEAN`, :func:`row_bounds`); a filled constant (ConstantOfShape)
stays a broadcast view through the weight quantization. The integer graph is the same
(tests compare it with the default mode's). Convolution weights take the registered handler
(they are small next to the fully connected layers of ImageNet-scale models).

The default mode (both False) is untouched and lives in ``dataflow.importer``.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from hwgen.dataflow.importer import (INT_TYPES, REGISTRY, ImportContext, Unsupported, _op_name,
                               _sample_shape)
from hwgen.dataflow.intgraph import Conv, IntGraph, MatVec
from hwgen.dataflow.loader import Graph, Node
from hwgen.rtl_templates.quant import UINT8, make_requant, signed_width
from hwgen.dataflow.values import (Clipped, Const, Deq, DeqConst, FloatInput, Int, Joined, Linear,
                             Pooled, channel_last_order)
from hwgen.errors import HwgenError

#: values awaiting their QuantizeLinear
PENDING = (Linear, Pooled, Joined, Clipped)
#: ops that extend a pending value of their (only) data input instead of consuming it
EXTENDERS = {"BatchNormalization", "Relu", "Clip", "Cast", "Identity", "Dropout"}
#: ops that extend a pending value when their other input is a constant
CONST_EXTENDERS = {"Add", "Mul"}
#: (op, input index) of weights that assume mode quantizes to int8
WEIGHT_INPUTS = {("Gemm", 1), ("MatMul", 1), ("Conv", 1)}
#: the type every assumed quantization uses (values do not matter for estimates)
ASSUMED = (UINT8, np.float32(1.0), 0)

QUANT_OPS = {"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "QLinearConv",
             "QLinearMatMul", "MatMulInteger", "ConvInteger"}


@dataclass
class Unknown:
    """A value that could not be computed: ``origin`` failed (a node label, or a graph input)."""
    origin: str


@dataclass
class StandIn:
    """The output of a node that failed, whose shape is known (shape inference): downstream
    nodes are still analysed, reading it as if it were a quantized stream (``shape`` per
    sample). ``origin``: the failed node."""
    origin: str
    shape: tuple[int, ...]


#: ops that only view their input (a stand-in passes through them)
VIEW_OPS = {"Reshape", "Flatten", "Identity", "Dropout", "Transpose", "Squeeze", "Unsqueeze"}


@dataclass
class Problem:
    """One reason the model cannot map: ``node`` is a node label (None: the graph itself)."""
    node: str | None
    op: str
    reason: str

    def __str__(self) -> str:
        if self.node is None:
            return self.reason
        return f"node {self.node} ({self.op}): {self.reason}"


@dataclass
class NodeStatus:
    """What became of one ONNX node.

    ``status``: ``mapped`` (the node is a layer: ``layer`` is its name), ``folded`` (into the
    layer ``layer``), ``constant`` (evaluated at import), ``no hardware`` (a view of a stream,
    a quantization boundary: ``detail`` says which), ``unsupported`` (``detail``: the reason),
    ``blocked`` (``blocked_by``: the node or input that failed first upstream) or ``unused``.
    """
    label: str
    op_type: str
    op: str
    status: str = ""
    detail: str = ""
    layer: str = ""
    blocked_by: str = ""
    after: str = ""           # analysed downstream of this unsupported node (a stand-in)


@dataclass
class ImportReport:
    nodes: list[NodeStatus]
    problems: list[Problem]
    assumed: bool = False
    notes: list[str] = field(default_factory=list)
    #: integer tensors standing in for outputs of failed nodes → the failed node
    stand_ins: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems


class AssumedWeights(DeqConst):
    """A float weight tensor read as int8 symmetric per tensor (assume mode)."""


# ------------------------------------------------------------------ memory-lean helpers

def compact(a: np.ndarray) -> np.ndarray:
    """The smallest array that broadcasts back to ``a``: axes of stride 0 (a broadcast view,
    e.g. a filled constant) are cut to length 1."""
    idx = tuple(slice(0, 1) if st == 0 and n > 1 else slice(None)
                for st, n in zip(a.strides, a.shape))
    return a[idx]


def row_bounds(w: np.ndarray, x_lo: int, x_hi: int,
               chunk: int = 1 << 22) -> tuple[np.ndarray, np.ndarray]:
    """Exactly :func:`rtl_templates.quant.dot_range` of a 2-D ``w`` (any integer dtype, possibly a
    broadcast view), without an int64 copy of ``w``: per row, the minimum of ``w @ x`` is
    ``x_lo·Σw⁺ + x_hi·Σw⁻`` and the maximum ``x_hi·Σw⁺ + x_lo·Σw⁻`` (x_lo <= x_hi)."""
    rows, cols = w.shape
    c = compact(w)
    rep = cols // max(c.shape[1], 1) if cols else 0
    pos = np.empty(c.shape[0], dtype=np.int64)
    neg = np.empty(c.shape[0], dtype=np.int64)
    step = max(1, chunk // max(c.shape[1], 1))
    for r in range(0, c.shape[0], step):
        part = c[r:r + step]
        pos[r:r + step] = np.where(part > 0, part, 0).sum(axis=1, dtype=np.int64)
        neg[r:r + step] = np.where(part < 0, part, 0).sum(axis=1, dtype=np.int64)
    pos, neg = pos * rep, neg * rep
    lo, hi = x_lo * pos + x_hi * neg, x_hi * pos + x_lo * neg
    if c.shape[0] != rows:
        lo, hi = np.broadcast_to(lo, (rows,)), np.broadcast_to(hi, (rows,))
    return lo, hi


def row_sums(w: np.ndarray) -> np.ndarray:
    c = compact(w)
    s = c.sum(axis=1, dtype=np.int64) * (w.shape[1] // max(c.shape[1], 1))
    return np.broadcast_to(s, (w.shape[0],)).copy()


def quantize_weights(arr: np.ndarray) -> AssumedWeights:
    """int8 symmetric per-tensor quantization of a float constant (a broadcast view stays
    one: the quantized tensor is computed on its distinct elements only)."""
    c = compact(np.asarray(arr))
    flat = c.reshape(-1)                 # (a copy only if c is not contiguous)
    step = 1 << 22
    m = max((float(np.max(np.abs(flat[k:k + step]))) for k in range(0, flat.size, step)),
            default=0.0)
    scale = np.float32(m / 127.0) if m > 0 and np.isfinite(m) else np.float32(1.0)
    q = np.empty(flat.size, dtype=np.int8)
    for k in range(0, flat.size, step):
        part = np.nan_to_num(flat[k:k + step].astype(np.float32))
        q[k:k + step] = np.clip(np.rint(part / scale), -127, 127)
    q = q.reshape(c.shape)
    if q.shape != arr.shape:
        q = np.broadcast_to(q, arr.shape)
    return AssumedWeights(q, np.array([scale], np.float32), np.zeros(1, np.int64), 0)


# ------------------------------------------------------------------ lean layer handlers

def _narrow_weights(w: DeqConst, axis: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(integer weights with the zero point subtracted, per-channel scales) of 8-bit
    constant weights, in a narrow dtype (int8 as stored when the zero point is 0, else
    int16) instead of int64; None for other weights (the registered handler takes them)."""
    if not isinstance(w, DeqConst) or w.q.dtype.itemsize != 1 or w.q.dtype.kind not in "iu":
        return None
    n = w.q.shape[axis]
    s_w, z_w = w.per_channel(axis, n, "the weight")
    q = w.q
    if np.any(z_w) or q.dtype.kind == "u":
        shape = [1] * q.ndim
        shape[axis] = n
        q = q.astype(np.int16) - z_w.astype(np.int16).reshape(shape)
    return q, s_w


def _lean_linear(ctx: ImportContext, node: Node, x, w, out_axis: int) -> Linear | None:
    """ops_linear._linear for 8-bit weights, keeping them narrow (None: not the simple case;
    the registered handler then decides, with its own messages)."""
    if not (isinstance(x, Deq) and isinstance(w, DeqConst) and w.q.ndim == 2
            and len(x.shape) == 1 and w.q.shape[1 - out_axis] == x.shape[0]):
        return None
    got = _narrow_weights(w, out_axis)
    if got is None:
        return None
    q, s_w = got
    wm = q if out_axis == 0 else q.T
    if x.order is not None and compact(wm).shape[1] != 1:
        wm = np.ascontiguousarray(wm[:, x.order])
    t = ctx.ig.tensors[x.tensor]
    acc_scale = (np.float32(t.scale) * s_w.astype(np.float32)).astype(np.float64)  # as ORT
    bias = -t.zero_point * row_sums(wm)
    return Linear(src=x.tensor, weights=wm, acc_scale=acc_scale, bias=bias,
                  nodes=[node.label], shape=(wm.shape[0],))


def _lean_gemm(ctx: ImportContext, node: Node) -> bool:
    from hwgen.dataflow.ops_linear import _GEMM_ATTRS, _add_bias
    from hwgen.dataflow.ops_qdq import check_attrs
    check_attrs(node, _GEMM_ATTRS)
    lin = _lean_linear(ctx, node, ctx.value(node, 0), ctx.value(node, 1),
                       0 if node.attrs.get("transB", 0) else 1)
    if lin is None:
        return False
    c = ctx.value(node, 2)
    if c is not None:
        _add_bias(lin, c, node)
        lin.nodes.pop()
    ctx.set(node, lin)
    return True


def _lean_matmul(ctx: ImportContext, node: Node) -> bool:
    from hwgen.dataflow.ops_qdq import check_attrs
    check_attrs(node, {})
    lin = _lean_linear(ctx, node, ctx.value(node, 0), ctx.value(node, 1), 1)
    if lin is None:
        return False
    ctx.set(node, lin)
    return True


def _lean_quantize(ctx: ImportContext, node: Node) -> bool:
    """QuantizeLinear closing a Gemm/MatMul/Conv: ops_qdq.quantize_linear through
    :func:`close_linear_lean`."""
    from hwgen.dataflow.ops_qdq import _Q_ATTRS, _qtype_of, check_attrs, out_params
    lin = ctx.value(node, 0)
    if not isinstance(lin, Linear):
        return False
    check_attrs(node, _Q_ATTRS)
    zp_arr = ctx.const(node, 2, "zero point")
    qtype = _qtype_of(node, zp_arr)
    s, zp = out_params(ctx.const(node, 1, "scale"), zp_arr)
    t = close_linear_lean(ctx, node.outputs[0], lin, qtype, s, zp, closing=node.label)
    ctx.set(node, Int(t, lin.shape, channel_last_order(lin.shape)))
    return True


#: memory-lean versions of handlers (False: not their case, the registered handler runs)
LEAN = {"Gemm": _lean_gemm, "MatMul": _lean_matmul, "QuantizeLinear": _lean_quantize}


def close_linear_lean(ctx: ImportContext, name: str, lin: Linear, qtype, s, zp: int,
                      closing: str | None = None) -> str:
    """``ops_qdq._close_linear`` (same op, same requantizer) with the accumulator range from
    :func:`row_bounds` instead of an int64 copy of the weights. ``closing``: the label of
    the QuantizeLinear node (None where the quantization is assumed)."""
    from hwgen.dataflow.ops_qdq import _clamp_bounds
    lo, hi = _clamp_bounds(qtype, s, zp, lin.clip_lo, lin.clip_hi)
    mult = lin.acc_scale.astype(np.float32) / np.float32(s)
    out = ctx.new_tensor(name, lin.shape, qtype, s, zp)
    t_in = ctx.ig.tensors[lin.src].qtype
    a_lo, a_hi = row_bounds(lin.weights, t_in.lo, t_in.hi)
    acc_bits = signed_width(int(min(a_lo.min(), (a_lo + lin.bias).min(), 0)),
                            int(max(a_hi.max(), (a_hi + lin.bias).max(), 0)))
    rq = make_requant(mult, zp, lo, hi, acc_bits)
    nodes = list(lin.nodes) + ([closing] if closing else [])
    if lin.window is not None:
        ctx.ig.ops.append(Conv(lin.nodes[0], nodes, lin.src, out, lin.weights, lin.bias, rq,
                               lin.window, lin.depthwise))
    else:
        ctx.ig.ops.append(MatVec(name=lin.nodes[0], nodes=nodes, input=lin.src, output=out,
                                 weights=lin.weights, bias=lin.bias, requant=rq))
    return out


# ------------------------------------------------------------------------ the walk

class _Survey:
    def __init__(self, graph: Graph, collect: bool, assume: bool):
        self.graph, self.collect, self.assume = graph, collect, assume
        self.ctx = ImportContext(graph, IntGraph(tensors={}))
        self.report = ImportReport([], [], assume)
        self.status: dict[str, NodeStatus] = {}
        self.weights: dict[str, AssumedWeights] = {}
        self.outputs = {o.name for o in graph.outputs}
        self.after: dict[str, str] = {}      # value → the failed node it comes after

    # -------------------------------------------------------------- problems
    def problem(self, node: Node | None, reason: str, full: str | None = None):
        """Record (collect) or raise (otherwise) one problem."""
        p = Problem(node.label if node else None, _op_name(node) if node else "", reason)
        if not self.collect:
            raise HwgenError(full or str(p))
        self.report.problems.append(p)
        if node is not None:
            st = self.status[node.label]
            st.status, st.detail = "unsupported", reason
            for o in node.outputs:
                if o:
                    self.after.setdefault(o, node.label)
            for o in node.outputs:
                if o:
                    self.ctx.values[o] = self._failed_value(o, node.label)

    def _failed_value(self, name: str, origin: str):
        """What a failed node's output ``name`` becomes: a stand-in if its shape is known."""
        info = self.graph.value_info.get(name)
        shape = getattr(info, "shape", None)
        if self.collect and shape and all(isinstance(d, int) and d > 0 for d in shape[1:]) \
                and info.dtype is not None and info.dtype.kind in "fiu" and len(shape) > 1:
            return StandIn(origin, tuple(int(d) for d in shape[1:]))
        return Unknown(origin)

    # -------------------------------------------------------------- the graph input
    def start(self):
        from hwgen.dataflow import (ops_conv, ops_fold, ops_join, ops_linear, ops_pool,  # noqa: F401
                              ops_qdq, ops_qop, ops_shape)
        g, ctx = self.graph, self.ctx
        for node in g.nodes:
            self.status[node.label] = NodeStatus(node.label, node.op_type, _op_name(node))
            for name in node.inputs:
                if name:
                    ctx.n_consumers[name] = ctx.n_consumers.get(name, 0) + 1
        for name, arr in g.constants.items():
            ctx.values[name] = Const(np.asarray(arr))
        if len(g.inputs) != 1:
            self.problem(None, f"model has {len(g.inputs)} graph inputs; hwgen maps models with "
                               f"exactly one input")
            for t in g.inputs[1:]:
                ctx.values[t.name] = Unknown(f"graph input '{t.name}'")
        if len(g.outputs) != 1:
            self.problem(None, f"model has {len(g.outputs)} graph outputs; hwgen maps models "
                               f"with exactly one output")
        if not g.inputs:
            return
        inp = g.inputs[0]
        ctx.values[inp.name] = Unknown(f"graph input '{inp.name}'")
        try:
            shape = _sample_shape(inp, "input")
        except HwgenError as e:
            self.problem(None, str(e))
            return
        ctx.ig.onnx_input = inp.name
        if inp.dtype is not None and inp.dtype.kind == "f":
            ctx.values[inp.name] = FloatInput(inp.name, shape, channel_last_order(shape))
        elif self.assume and inp.dtype in INT_TYPES:
            t = ctx.new_tensor(inp.name, shape, INT_TYPES[inp.dtype], 1.0, 0)
            ctx.ig.input, ctx.ig.input_order = t, channel_last_order(shape)
            ctx.values[inp.name] = Int(t, shape, channel_last_order(shape))
            self.report.notes.append(f"graph input '{inp.name}' is taken as {inp.dtype} "
                                     f"integers")
        else:
            self.problem(None, f"graph input '{inp.name}' has element type {inp.dtype}; hwgen "
                               f"expects a float input that the model quantizes with "
                               f"QuantizeLinear")

    # -------------------------------------------------------------- assume mode
    def close(self, name: str, node: Node):
        """Quantize pending value ``name`` with the assumed type; it becomes a Deq view."""
        from hwgen.dataflow.ops_qdq import close
        ctx = self.ctx
        v = ctx.values[name]
        qtype, s, zp = ASSUMED
        if isinstance(v, Linear):
            t = close_linear_lean(ctx, name, v, qtype, s, zp)
            res = Int(t, v.shape, channel_last_order(v.shape))
        else:
            tag = f"\x00assumed quantization of {name}"
            pseudo = Node(name=tag, op_type="QuantizeLinear", domain="", since_version=13,
                          opset_version=13, inputs=[name], outputs=[name], attrs={}, index=-1)
            res = close(ctx, pseudo, v, qtype, s, zp)
            for op in ctx.ig.ops:
                if tag in op.nodes:
                    op.nodes.remove(tag)
        if isinstance(v, FloatInput):
            self.report.notes.append(f"float graph input '{name}' is taken as quantized to "
                                     f"uint8")
        ctx.values[name] = Deq(res.tensor, res.shape, res.order)

    def prepare(self, node: Node) -> dict[str, object]:
        """Assume mode, before ``node`` runs: close the pending inputs it cannot extend and
        quantize its float weights. Returns the values to restore afterwards (weights are
        swapped in for this node only)."""
        ctx, op = self.ctx, node.op_type
        if op in QUANT_OPS:
            return {}
        names = [n for n in node.inputs if n]
        consts = [isinstance(ctx.values.get(n), (Const, DeqConst)) for n in names]
        extends = op in EXTENDERS or (op in CONST_EXTENDERS and len(names) == 2 and any(consts))
        restore = {}
        for k, name in enumerate(node.inputs):
            if not name:
                continue
            v = ctx.values[name]
            if isinstance(v, Const) and (op, k) in WEIGHT_INPUTS and v.array.dtype.kind == "f":
                if name not in self.weights:
                    self.weights[name] = quantize_weights(v.array)
                restore[name] = v
                ctx.values[name] = self.weights[name]
            elif isinstance(v, FloatInput) or (isinstance(v, PENDING) and (
                    not extends or ctx.n_consumers.get(name, 0) > 1 or name in self.outputs)):
                self.close(name, node)
        return restore

    # -------------------------------------------------------------- one node
    def run_node(self, node: Node):
        ctx = self.ctx
        st = self.status[node.label]
        unknown = next((v for n in node.inputs if n and isinstance(v := ctx.values.get(n),
                                                                     Unknown)), None)
        if unknown is not None:
            st.status, st.blocked_by = "blocked", unknown.origin
            for o in node.outputs:
                if o:
                    ctx.values[o] = Unknown(unknown.origin)
            return
        after = next((self.after[n] for n in node.inputs if n in self.after), "")
        if after:
            st.after = after
            for o in node.outputs:
                if o:
                    self.after[o] = after
        if any(isinstance(ctx.values.get(n), StandIn) for n in node.inputs if n):
            if self.stand_in(node):
                return
        missing = [n for n in node.inputs if n and n not in ctx.values]
        if missing:
            self.problem(node, f"input '{missing[0]}' is not computed by the node that "
                               f"should produce it")
            return
        restore = {}
        if self.assume:
            snap = self._snap()
            try:
                restore = self.prepare(node)
            except (Unsupported, ValueError, KeyError, HwgenError) as e:
                self._rollback(snap)
                self.problem(node, f"quantizing its input: {e}",
                             f"node {node.label} ({_op_name(node)}): quantizing its input: {e}")
                return
        if self.assume and node.op_type == "Concat" and all(
                isinstance(ctx.values.get(n), Const) for n in node.inputs if n):
            # constant folding (a shape built by Shape/Gather/Unsqueeze/Concat)
            arrays = [ctx.values[n].array for n in node.inputs if n]
            ctx.values[node.outputs[0]] = Const(np.concatenate(
                arrays, axis=int(node.attrs.get("axis", 0))))
            return
        handler = REGISTRY.find(node)
        if handler is None:
            self._restore(restore)
            try:
                REGISTRY.lookup(node)
            except HwgenError as e:
                msg = str(e)
                self.problem(node, msg.split(": ", 1)[1] if msg.startswith("node ") else msg, msg)
            return
        run = node
        if self.assume and node.op_type == "Dropout" and len(node.outputs) > 1 and \
                node.outputs[1] and not ctx.n_consumers.get(node.outputs[1]) and \
                node.outputs[1] not in self.outputs:
            run = dataclasses.replace(node, outputs=node.outputs[:1])
        snap = self._snap()
        error = None
        try:
            lean = LEAN.get(node.op_type)
            if lean is None or not lean(ctx, run):
                handler(ctx, run)
        except (Unsupported, ValueError, KeyError, HwgenError) as e:
            error = str(e)
        except Exception as e:  # noqa: BLE001 - inspect reports, it does not crash
            if not self.collect:
                raise
            error = f"cannot be mapped ({type(e).__name__}: {e})"
        finally:
            self._restore(restore)
        if error is not None:
            self._rollback(snap)
            if self.assume and self.collect:
                # the layers before a failed extension still map: quantize them here
                for name in node.inputs:
                    if name and isinstance(ctx.values.get(name), PENDING):
                        try:
                            self.close(name, node)
                        except (Unsupported, ValueError, KeyError, HwgenError):
                            pass
            self.problem(node, error, f"node {node.label} ({_op_name(node)}): {error}")

    def stand_in(self, node: Node) -> bool:
        """``node`` reads stand-ins. A view passes them on; a QuantizeLinear /
        DequantizeLinear gives them its own quantization; any other node reads them as
        integer tensors of the assumed type. True if ``node`` is done."""
        from hwgen.dataflow.ops_qdq import _qtype_of, out_params
        ctx, st = self.ctx, self.status[node.label]
        first = next(ctx.values[n] for n in node.inputs if n and
                     isinstance(ctx.values.get(n), StandIn))
        view = node.op_type in VIEW_OPS and isinstance(ctx.values.get(node.inputs[0]), StandIn)
        # an op that would have been folded into the failed node's layer fails with it
        folded = (node.op_type in EXTENDERS and isinstance(ctx.values.get(node.inputs[0]),
                                                           StandIn)) or (
            node.op_type in CONST_EXTENDERS and len([n for n in node.inputs if n]) == 2 and
            any(isinstance(ctx.values.get(n), (Const, DeqConst)) for n in node.inputs if n))
        if view or folded:
            if view and node.op_type not in EXTENDERS:
                st.status, st.detail = "no hardware", "stream view (no data changes)"
            elif view and node.op_type in ("Identity", "Dropout"):
                st.status, st.detail = "no hardware", "pass-through"
            else:
                st.status, st.blocked_by = "blocked", first.origin
            for o in node.outputs[:1]:
                v = self._failed_value(o, first.origin)
                ctx.values[o] = v if isinstance(v, StandIn) else Unknown(first.origin)
            return True
        for k, name in enumerate(node.inputs):
            v = ctx.values.get(name) if name else None
            if not isinstance(v, StandIn):
                continue
            qtype, s, zp = ASSUMED
            if node.op_type in ("QuantizeLinear", "DequantizeLinear") and k == 0:
                try:
                    zp_arr = ctx.const(node, 2, "zero point")
                    qtype = _qtype_of(node, zp_arr)
                    s, zp = out_params(ctx.const(node, 1, "scale"), zp_arr)
                except (Unsupported, ValueError, KeyError) as e:
                    self.problem(node, str(e), f"node {node.label} ({_op_name(node)}): {e}")
                    return True
            t = ctx.new_tensor(name, v.shape, qtype, s, zp)
            self.report.stand_ins[t] = v.origin
            order = channel_last_order(v.shape)
            if node.op_type == "QuantizeLinear" and k == 0:
                ctx.values[node.outputs[0]] = Int(t, v.shape, order)
                st.status, st.detail = "no hardware", f"quantizes the stand-in for " \
                                                      f"{v.origin}'s output"
                return True
            ctx.values[name] = Int(t, v.shape, order) if node.op_type == "DequantizeLinear" \
                else Deq(t, v.shape, order)
        return False

    def _restore(self, restore: dict):
        for name, v in restore.items():
            self.ctx.values[name] = v

    def _snap(self):
        ig = self.ctx.ig
        return len(ig.ops), set(ig.tensors), ig.input, ig.input_order

    def _rollback(self, snap):
        ig = self.ctx.ig
        n_ops, names, ig.input, ig.input_order = snap
        del ig.ops[n_ops:]
        for t in set(ig.tensors) - names:
            del ig.tensors[t]

    # -------------------------------------------------------------- the graph output
    def finish(self):
        g, ctx = self.graph, self.ctx
        if g.outputs:
            out = g.outputs[0]
            v = ctx.values.get(out.name)
            if self.assume and isinstance(v, (FloatInput,) + PENDING):
                try:
                    self.close(out.name, None)
                except (Unsupported, ValueError, HwgenError) as e:
                    self.problem(None, f"graph output '{out.name}': {e}")
                v = ctx.values.get(out.name)
            if isinstance(v, (Deq, Int)):
                ctx.ig.output = v.tensor
                ctx.ig.output_dequantized = isinstance(v, Deq)
                ctx.ig.output_order = v.order
            elif not isinstance(v, (Unknown, StandIn)):
                self.problem(None, f"graph output '{out.name}' is not a quantized tensor (it "
                                   f"is {type(v).__name__}); hwgen needs the model's output to "
                                   f"come from QuantizeLinear/DequantizeLinear")
            ctx.ig.onnx_output = out.name
        inp = g.inputs[0].name if g.inputs else None
        if inp is not None and not ctx.ig.input and \
                not isinstance(ctx.values.get(inp), Unknown) and ctx.ig.onnx_input:
            self.problem(None, f"graph input '{inp}' never reaches a QuantizeLinear")
        if not ctx.ig.ops and not self.report.problems:
            self.problem(None, "the model has no layer hwgen can map to hardware (no "
                               "quantized Gemm/MatMul/Conv)")
        self.statuses()
        if self.weights:
            n = sum(int(np.prod(w.q.shape, dtype=np.int64)) for w in self.weights.values())
            self.report.notes.append(f"{len(self.weights)} float weight tensors ({n} weights) "
                                     f"are taken as int8, symmetric per tensor")

    def statuses(self):
        """Status of every node that neither failed nor was blocked."""
        ctx = self.ctx
        owner = {}
        for op in ctx.ig.ops:
            for lab in op.nodes:
                owner.setdefault(lab, op.name)
        consumers: dict[str, list[Node]] = {}
        for n in self.graph.nodes:
            for i in n.inputs:
                if i:
                    consumers.setdefault(i, []).append(n)
        for node in self.graph.nodes:
            st = self.status[node.label]
            if st.status:
                continue
            if node.label in owner:
                st.layer = owner[node.label]
                st.status = "mapped" if st.layer == node.label else "folded"
                continue
            outs = [ctx.values.get(o) for o in node.outputs if o]
            if outs and all(isinstance(v, (Const, DeqConst)) for v in outs):
                st.status, st.detail = "constant", "evaluated at import"
                continue
            pend = next((v for v in outs if isinstance(v, PENDING)), None)
            if pend is not None:
                st.status, st.blocked_by = self._stuck(pend, consumers)
                continue
            if any(isinstance(v, Int) and v.tensor == ctx.ig.input for v in outs):
                st.status, st.detail = "no hardware", "quantizes the graph input"
            elif node.op_type in ("QuantizeLinear", "DequantizeLinear"):
                st.status, st.detail = "no hardware", "quantization boundary"
            elif not any(ctx.n_consumers.get(o) or o in self.outputs for o in node.outputs if o):
                st.status = "unused"
            else:
                st.status, st.detail = "no hardware", "stream view (no data changes)"

    def _stuck(self, pend, consumers) -> tuple[str, str]:
        """A pending value that never became an op: blocked by the consumer that failed."""
        names = [n for n, v in self.ctx.values.items() if v is pend]
        nodes = set(getattr(pend, "nodes", [getattr(pend, "node", "")]))
        for name in names:
            if name in self.outputs:
                return "blocked", f"graph output '{name}'"
            for c in consumers.get(name, []):
                if c.label in nodes:
                    continue
                cs = self.status[c.label]
                if cs.status == "unsupported":
                    return "blocked", c.label
                if cs.status == "blocked":
                    return "blocked", cs.blocked_by
        return "unused", ""


def survey(graph: Graph, collect: bool = True, assume_quantized: bool = False):
    """See the module documentation. ``collect``: (IntGraph, ImportReport); otherwise the
    IntGraph, raising HwgenError on the first problem."""
    s = _Survey(graph, collect, assume_quantized)
    s.start()
    for node in graph.nodes:
        s.run_node(node)
    s.finish()
    s.report.nodes = [s.status[n.label] for n in graph.nodes]
    return (s.ctx.ig, s.report) if collect else s.ctx.ig
