"""ONNX graph (loaded and validated) → integer graph: the one import walk.

The walk visits the nodes in topological order and asks the handler registered for each
node's (domain, op_type, since_version) (the catalogue :mod:`dataflow.operators`) to turn
the abstract values of its inputs (:mod:`dataflow.values`) into values for its outputs. A
:class:`Policy` says what happens on the way:

stop (the default: ``hwgen compile``)
    the first node that cannot map raises :class:`HwgenError` naming the node, its op and
    the reason.

``collect`` (``hwgen inspect``)
    every node that cannot map is recorded as a :class:`Problem` and the walk goes on: the
    outputs of a failed node become :class:`Unknown` values, and a node fed by an Unknown
    value is *blocked* by the node that failed first (it is not a problem of its own). The
    result is the integer graph of everything that mapped plus an :class:`ImportReport` with
    a status for every node. When shape inference knows the shape of a failed node's
    output, the walk goes on past it with a :class:`StandIn` (read downstream as a quantized
    stream of that shape), so that problems further down are found too and the layers after
    it still get estimates; their status says which failed node they follow (``after``).
    Only outputs of unknown shape leave their consumers blocked.

``assume_quantized`` (``hwgen inspect`` of a float model)
    a float model (no quantization op, :func:`dataflow.operators.is_float_model`) is read as
    if it were quantized to 8 bits, to estimate what its hardware would cost: the float graph
    input is quantized to uint8; float constants used as Gemm/MatMul/Conv weights become int8,
    symmetric per tensor (scale = max|w|/127, 1 if all zero); a pending computation (a
    product, pooling or join awaiting its QuantizeLinear) is closed with an assumed uint8 type
    (scale 1, zero point 0: values do not matter for the estimates) where a node consumes it
    that cannot extend it — anything but BatchNormalization, Relu, Clip, Add/Mul with a
    constant, Cast, Identity and Dropout — where it has several consumers, and at the graph
    output. Dropout's unused mask output is ignored. With ``collect`` too, a node that fails
    to extend a pending value (a Mul by a negative scale, a BatchNormalization after pooling)
    first quantizes it, so that the layer before it still maps.

Every policy runs the same handlers: Gemm/MatMul weights of 8 bits stay narrow and their
accumulator range is computed without an int64 copy (``ops_linear``), so ImageNet-scale
models import in bounded memory whatever the policy.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field

import numpy as np
import onnx

from hwgen.dataflow import host_tail, loader
from hwgen.dataflow.context import INT_TYPES, ImportContext, Unsupported, op_name, sample_shape
from hwgen.dataflow.intgraph import IntGraph, op_inputs
from hwgen.dataflow.loader import Graph, Node
from hwgen.dataflow.operators import (
    REGISTRY,
    annotated_input,
    handler_versions,
    is_quantization_op,
)
from hwgen.dataflow.ops_fold import fold_constant_node
from hwgen.dataflow.ops_qdq import close, out_params, qtype_of
from hwgen.dataflow.values import (
    Const,
    Deq,
    DeqConst,
    FloatInput,
    Int,
    Padded,
    Pending,
    channel_last_order,
)
from hwgen.errors import HwgenError
from hwgen.rtl_templates.quant import UINT8, compact


@dataclass(frozen=True)
class Policy:
    """How the walk treats problems and float models (see the module documentation)."""
    collect: bool = False            # record every problem and go on (with stand-ins)
    assume_quantized: bool = False   # read a float model as quantized to 8 bits


#: ``hwgen compile``: stop at the first problem
STOP = Policy()
#: ``hwgen inspect`` of a quantized model
COLLECT = Policy(collect=True)
#: ``hwgen inspect`` of a float model
COLLECT_ASSUMED = Policy(collect=True, assume_quantized=True)


# ------------------------------------------------------------------------ loading

def load_model(path: str | os.PathLike, upgrade: bool = False) -> Graph:
    """:func:`dataflow.loader.load_model`; ``upgrade=True`` (what ``hwgen compile`` uses)
    brings a model with operator versions older than hwgen's handlers forward to opset
    ``loader.UPGRADE_OPSET``."""
    return loader.load_model(path, handler_versions() if upgrade else None)


def load_model_proto(model: onnx.ModelProto, base_dir: str | None = None,
                     upgrade: bool = False) -> Graph:
    """:func:`dataflow.loader.load_model_proto`, with ``upgrade`` as in :func:`load_model`."""
    return loader.load_model_proto(model, base_dir, handler_versions() if upgrade else None)


# ------------------------------------------------------------------------ the report

#: ops that extend a pending value of their (only) data input instead of consuming it
EXTENDERS = {"BatchNormalization", "Relu", "Clip", "Cast", "Identity", "Dropout"}
#: ops that extend a pending value when their other input is a constant
CONST_EXTENDERS = {"Add", "Mul"}
#: (op, input index) of weights that assume mode quantizes to int8
WEIGHT_INPUTS = {("Gemm", 1), ("MatMul", 1), ("Conv", 1)}
#: the type every assumed quantization uses (values do not matter for estimates)
ASSUMED = (UINT8, np.float32(1.0), 0)
#: ops that only view their input (a stand-in passes through them)
VIEW_OPS = {"Reshape", "Flatten", "Identity", "Dropout", "Transpose", "Squeeze", "Unsqueeze"}


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
    #: the ONNX tensors that hold an integer tensor's values, in walk order: name → its
    #: ``Int`` (the integers) or ``Deq`` (their dequantized floats), with stream order
    views: dict[str, Int | Deq] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems


class AssumedWeights(DeqConst):
    """A float weight tensor read as int8 symmetric per tensor (assume mode)."""


def quantize_weights(arr: np.ndarray, name: str = "") -> AssumedWeights:
    """int8 symmetric per-tensor quantization of a float constant (a broadcast view stays
    one: the quantized tensor is computed on its distinct elements only). A tensor whose
    largest magnitude gives a scale below float32's normal range is refused."""
    c = compact(np.asarray(arr))
    flat = c.reshape(-1)                 # (a copy only if c is not contiguous)
    step = 1 << 22
    m = max((float(np.max(np.abs(flat[k:k + step]))) for k in range(0, flat.size, step)),
            default=0.0)
    scale = np.float32(m / 127.0) if m > 0 and np.isfinite(m) else np.float32(1.0)
    if scale < np.finfo(np.float32).tiny:
        raise ValueError(f"weight '{name}': its largest magnitude {m:.3g} is too small for an "
                         f"int8 scale (a float32 normal number)")
    q = np.empty(flat.size, dtype=np.int8)
    for k in range(0, flat.size, step):
        part = np.nan_to_num(flat[k:k + step].astype(np.float32))
        q[k:k + step] = np.clip(np.rint(part / scale), -127, 127)
    q = q.reshape(c.shape)
    if q.shape != arr.shape:
        q = np.broadcast_to(q, arr.shape)
    return AssumedWeights(q, np.array([scale], np.float32), np.zeros(1, np.int64), 0)


# ------------------------------------------------------------------------ the walk

#: what a handler may raise for a node that cannot map
_REFUSALS = (Unsupported, ValueError, KeyError, HwgenError)


class _Walk:
    def __init__(self, graph: Graph, policy: Policy, tail: list[Node] = ()):
        self.graph, self.policy, self.tail = graph, policy, list(tail)
        self.failed: list[str | None] = []   # the node of each problem (None: the graph's)
        self.collect, self.assume = policy.collect, policy.assume_quantized
        self.ctx = ImportContext(graph, IntGraph(tensors={}),
                                 assume_quantized=policy.assume_quantized)
        self.report = ImportReport([], [], self.assume)
        self.status: dict[str, NodeStatus] = {}
        self.weights: dict[str, AssumedWeights] = {}
        self.outputs = {o.name for o in graph.outputs}
        self.after: dict[str, str] = {}      # value → the failed node it comes after

    # -------------------------------------------------------------- problems
    def problem(self, node: Node | None, reason: str, full: str | None = None):
        """Record (collect) or raise (stop) one problem."""
        p = Problem(node.label if node else None, op_name(node) if node else "", reason)
        self.failed.append(node.label if node else None)
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
        g, ctx = self.graph, self.ctx
        for node in g.nodes:
            self.status[node.label] = NodeStatus(node.label, node.op_type, op_name(node))
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
        is_float = inp.dtype is not None and inp.dtype.kind == "f"
        as_int = self.assume and inp.dtype in INT_TYPES
        type_problem = f"graph input '{inp.name}' has element type {inp.dtype}; hwgen " \
                       f"expects a float input that the model quantizes with QuantizeLinear"
        if not (is_float or as_int or self.collect):
            self.problem(None, type_problem)          # (stop: before the shape, as always)
        try:
            shape = sample_shape(inp, "input")
        except HwgenError as e:
            self.problem(None, str(e))
            return
        ctx.ig.onnx_input = inp.name
        self.report.notes.extend(g.notes)
        datatype = g.datatypes.get(inp.name)
        if datatype and is_float and not any(
                is_quantization_op(n) for n in g.nodes if inp.name in n.inputs):
            try:
                v = annotated_input(ctx, inp.name, shape, datatype)
            except Unsupported as e:
                self.problem(None, f"graph input '{inp.name}' (annotated {datatype}): {e}")
                return
            if v is not None:
                ctx.values[inp.name] = v
                self.report.notes.append(f"graph input '{inp.name}' is annotated {datatype}: "
                                         f"its values are taken as {datatype} integers")
                return
        if is_float:
            order = channel_last_order(shape)
            ctx.values[inp.name] = FloatInput(inp.name, shape, order, start_order=order)
        elif as_int:
            t = ctx.new_tensor(inp.name, shape, INT_TYPES[inp.dtype], 1.0, 0)
            ctx.ig.input, ctx.ig.input_order = t, channel_last_order(shape)
            ctx.values[inp.name] = Int(t, shape, channel_last_order(shape))
            self.report.notes.append(f"graph input '{inp.name}' is taken as {inp.dtype} "
                                     f"integers")
        else:
            self.problem(None, type_problem)

    # -------------------------------------------------------------- assume mode
    def close(self, name: str):
        """Quantize value ``name`` with the assumed type; it becomes a Deq view."""
        from_float = isinstance(self.ctx.values[name], FloatInput)
        res = close(self.ctx, self.ctx.values[name], name, *ASSUMED, None)
        if from_float:
            self.report.notes.append(f"float graph input '{name}' is taken as quantized to "
                                     f"uint8")
        self.ctx.values[name] = Deq(res.tensor, res.shape, res.order)

    def prepare(self, node: Node) -> dict[str, object]:
        """Assume mode, before ``node`` runs: close the pending inputs it cannot extend and
        quantize its float weights. Returns the values to restore afterwards (weights are
        swapped in for this node only)."""
        ctx, op = self.ctx, node.op_type
        if is_quantization_op(node):
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
                    self.weights[name] = quantize_weights(v.array, name)
                restore[name] = v
                ctx.values[name] = self.weights[name]
            elif isinstance(v, FloatInput) or (isinstance(v, Pending) and (
                    not extends or ctx.n_consumers.get(name, 0) > 1 or name in self.outputs)):
                self.close(name)
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
            except _REFUSALS as e:
                self._rollback(snap)
                self.problem(node, f"quantizing its input: {e}",
                             f"node {node.label} ({op_name(node)}): quantizing its input: {e}")
                return
        try:
            folded = fold_constant_node(ctx, node)
        except _REFUSALS as e:
            self._restore(restore)
            self.problem(node, str(e), f"node {node.label} ({op_name(node)}): {e}")
            return
        if folded:
            self._restore(restore)
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
            handler(ctx, run)
        except _REFUSALS as e:
            error = str(e)
        except (FloatingPointError, OverflowError) as e:
            error = f"its numbers cannot be computed ({e}): a constant or parameter is NaN, " \
                    f"infinite or out of range"
        except Exception as e:  # noqa: BLE001 - inspect reports, it does not crash
            if not self.collect:
                raise
            error = f"cannot be mapped ({type(e).__name__}: {e})"
        finally:
            self._restore(restore)
        if error is not None:
            pad = next((v for n in node.inputs if n and isinstance(v := ctx.values.get(n), Padded)),
                       None)
            if pad is not None:
                error += f" (its input is the output of Pad {', '.join(pad.nodes)}, which maps " \
                         f"only into the window of a Conv, MaxPool or AveragePool reading it)"
            self._rollback(snap)
            if self.assume and self.collect:
                # the layers before a failed extension still map: quantize them here
                for name in node.inputs:
                    if name and isinstance(ctx.values.get(name), Pending):
                        try:
                            self.close(name)
                        except _REFUSALS:
                            pass
            self.problem(node, error, f"node {node.label} ({op_name(node)}): {error}")

    def stand_in(self, node: Node) -> bool:
        """``node`` reads stand-ins. A view passes them on; a QuantizeLinear /
        DequantizeLinear gives them its own quantization; any other node reads them as
        integer tensors of the assumed type. True if ``node`` is done."""
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
                    zp_arr = ctx.zero_point(node, 2)
                    qtype = qtype_of(node, zp_arr)
                    s, zp = out_params(ctx.scale(node, 1), zp_arr)
                except (Unsupported, ValueError, KeyError) as e:
                    self.problem(node, str(e), f"node {node.label} ({op_name(node)}): {e}")
                    return True
            try:
                order = channel_last_order(v.shape)
            except ValueError as e:     # the failed node's shape cannot be streamed
                self.problem(node, str(e), f"node {node.label} ({op_name(node)}): {e}")
                return True
            t = ctx.new_tensor(name, v.shape, qtype, s, zp)
            self.report.stand_ins[t] = v.origin
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
            if self.assume and isinstance(v, (FloatInput, Pending)):
                try:
                    self.close(out.name)
                except (Unsupported, ValueError, HwgenError) as e:
                    self.problem(None, f"graph output '{out.name}': {e}")
                v = ctx.values.get(out.name)
            if isinstance(v, Pending) and hasattr(v, "close_raw"):
                # a layer the model never quantizes (a float tail): its exact accumulator,
                # which the host rescales (and adds a float bias to)
                try:
                    v, ctx.ig.output_scale, ctx.ig.output_offset = v.close_raw(ctx, out.name)
                    self.report.notes.append(
                        f"graph output '{out.name}' is a layer's float result: the hardware "
                        f"streams its exact accumulator, the host scales it"
                        + (" and adds the float bias" if ctx.ig.output_offset is not None
                           else ""))
                except Unsupported as e:
                    self.problem(None, f"graph output '{out.name}': {e}")
            if isinstance(v, (Deq, Int)):
                self.check_output_shape(out, v.shape)
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
        if not self.report.problems:
            self.check_connected()
        self.statuses()
        if self.weights:
            n = sum(int(np.prod(w.q.shape, dtype=np.int64)) for w in self.weights.values())
            self.report.notes.append(f"{len(self.weights)} float weight tensors ({n} weights) "
                                     f"are taken as int8, symmetric per tensor")

    def check_output_shape(self, out, sample: tuple[int, ...]):
        """The graph output's declared shape (where it gives sizes) is the one computed:
        a design's manifest states it, and ``simulate`` shapes its results by it."""
        if out.shape is None:
            return
        declared = list(out.shape)
        rest = declared[1:]
        sizes_ok = all(not isinstance(d, int) or d > 0 for d in declared)
        if sizes_ok and all(isinstance(d, int) for d in rest):
            # a scalar sample (ArgMax without keepdims) is one element: count, not rank
            sizes_ok = int(np.prod(rest, dtype=np.int64)) == int(np.prod(sample, dtype=np.int64))
        if not sizes_ok:
            shown = [d if d is not None else "?" for d in declared]
            self.problem(None, f"graph output '{out.name}' declares shape {shown}; the model "
                               f"computes {['N', *sample]}")

    def check_connected(self):
        """Every layer reads tensors that the graph input or an earlier layer writes, and its
        result is read by a later layer or is the graph output (a node duplicated under a
        new output name makes a layer nobody reads; lowering needs neither kind)."""
        ig = self.ctx.ig
        by_label = {n.label: n for n in self.graph.nodes}
        written = {ig.input} | set(self.report.stand_ins)
        read = {ig.output}
        for op in ig.ops:
            read.update(op_inputs(op))
        for op in ig.ops:
            node = by_label.get(op.name)
            for t in op_inputs(op):
                if t not in written:
                    self.problem(node, f"it reads '{t}', which no layer before it writes")
                    return
            written.add(op.output)
            if op.output not in read:
                self.problem(node, f"its result '{op.output}' is read by no other layer and "
                                   f"is not the graph output (a duplicated or dangling node?)")
                return

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
            pend = next((v for v in outs if isinstance(v, Pending)), None)
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


def walk(graph: Graph, policy: Policy = STOP) -> tuple[IntGraph, ImportReport]:
    """The integer graph of ``graph`` and the report of the walk, under ``policy``; with
    the stop policy the first problem raises :class:`HwgenError` instead.

    A model that does not map whole is tried with a host tail cut off (the shortest that
    maps, :mod:`dataflow.host_tail`), where each of its problems is at a node that the tail
    could take or at the graph output."""
    w = _Walk(graph, policy)
    try:
        ig, report = _run(w, graph)
        if report.ok:
            return ig, report
        error = None
    except HwgenError as e:
        error = e
    cuts = host_tail.candidates(graph)
    reachable = {None} | {n.label for _, tail in cuts for n in tail}
    if cuts and set(w.failed) <= reachable:
        for hw, tail in cuts:
            wt = _Walk(hw, policy, tail)
            try:
                ig_t, rep_t = _run(wt, hw)
            except HwgenError:
                continue
            if rep_t.ok:
                return _with_tail(graph, ig_t, rep_t, tail, wt.status)
    if error is not None:
        raise error
    return ig, report


def _run(w: _Walk, graph: Graph) -> tuple[IntGraph, ImportReport]:
    # NumPy's floating point warnings are errors here (underflow to zero is not): a NaN,
    # infinite or out-of-range number refuses its node instead of printing a warning
    with np.errstate(all="raise", under="ignore"):
        w.start()
        for node in graph.nodes:
            w.run_node(node)
        w.finish()
    w.report.nodes = [w.status[n.label] for n in graph.nodes]
    w.report.views = {n: v for n, v in w.ctx.values.items() if isinstance(v, (Int, Deq))}
    return w.ctx.ig, w.report


def _with_tail(graph: Graph, ig: IntGraph, report: ImportReport, tail: list[Node],
               status: dict[str, NodeStatus]):
    """The walk's results for the graph without ``tail``, completed with the tail: its
    nodes' statuses (``host``), a note, and the tail model in the integer graph."""
    cut = ig.onnx_output
    ig.host_tail = host_tail.tail_model(graph, tail, cut, ig.tensors[ig.output].shape)
    for n in tail:
        status[n.label] = NodeStatus(n.label, n.op_type, op_name(n), "host",
                                     "runs on the host, in float, after the hardware")
    report.nodes = [status[n.label] for n in graph.nodes]
    what = "its accumulator" if ig.output_scale is not None else "its real values"
    report.notes.append(f"{len(tail)} node{'s' if len(tail) > 1 else ''} after '{cut}' run on "
                        f"the host ({', '.join(n.op_type for n in tail)}); the hardware "
                        f"streams {what}")
    return ig, report


def to_int_graph(graph: Graph, collect: bool = False, assume_quantized: bool = False):
    """Build the integer graph; unmappable nodes raise HwgenError naming node, op and reason.

    ``collect=True`` records every problem instead and returns ``(IntGraph, ImportReport)``;
    ``assume_quantized=True`` reads a float model as if quantized to 8 bits (for estimates).
    See the module documentation."""
    ig, report = walk(graph, Policy(collect, assume_quantized))
    return (ig, report) if collect else ig
