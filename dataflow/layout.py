"""Channel-last graphs brought to the channel-first form the importer reads.

Two rewrites of the ONNX graph, done by the loader before shape inference:

* **channels_last ops** (qonnx's domain ``qonnx.custom_op.channels_last``: Conv, MaxPool,
  BatchNormalization on NHWC tensors, what qonnx's ``ConvertToChannelsLastAndClean``
  writes) become the ai.onnx op between two Transposes, NHWC → NCHW before and back after
  (and a Conv's OHWI weights → OIHW): the meaning qonnx's executor gives them.
* **Transpose sinking**: a Transpose moves down through the ops that do not care about
  layout (element-wise ops, quantizers, Concat, Resize; their axes, scales and per-channel
  parameters permuted with it) until it meets a Transpose that undoes it, and both go.
  A channel-last chain (Transpose → Quant → Transpose⁻¹ → Conv, or a Concat along the last
  axis between NHWC → NCHW transposes) then reads as the channel-first graph it computes.
  A Transpose that meets no inverse stays where it was, except below a channels_last op,
  where it sinks as far as it can (to the Flatten or graph output that reads it in order).
"""
from __future__ import annotations

import numpy as np
from onnx import GraphProto, ModelProto, NodeProto, helper, numpy_helper

CHANNELS_LAST = "qonnx.custom_op.channels_last"
#: channels_last ops and how many of their outputs are data (the rest stay as they are)
CHANNELS_LAST_OPS = {"Conv": 1, "MaxPool": 1, "BatchNormalization": 1}

#: element-wise ops a Transpose commutes with: op → the inputs that are parameters
#: (broadcast against the data, permuted with it); input 0 is the data
ELEMENTWISE = {
    "Relu": (), "LeakyRelu": (), "Sigmoid": (), "Tanh": (), "Identity": (), "Cast": (),
    "Neg": (), "Abs": (), "Floor": (), "Ceil": (), "Round": (), "Sign": (), "Exp": (),
    "Clip": (1, 2), "Quant": (1, 2, 3), "BipolarQuant": (1,), "Trunc": (1, 2, 3, 4, 5),
    "QuantizeLinear": (), "DequantizeLinear": (),
    "Mul": (1,), "Add": (1,), "Sub": (1,), "Div": (1,),
}
#: element-wise ops whose parameter may stand in either input position
COMMUTATIVE = {"Mul", "Add"}


def _inverse(perm: list[int]) -> list[int]:
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return inv


def _perm(node) -> list[int] | None:
    """A Transpose's ``perm`` if it is a permutation (None without one: reversed axes, which
    needs the rank, or a malformed one the loader refuses later)."""
    for a in node.attribute:
        if a.name == "perm":
            p = list(a.ints)
            return p if sorted(p) == list(range(len(p))) else None
    return None


def _attr(node, name):
    for a in node.attribute:
        if a.name == name:
            return a
    return None


class _Graph:
    """Producers, consumers and constants of a GraphProto, kept while it is rewritten."""

    def __init__(self, model: ModelProto):
        self.model = model
        self.g: GraphProto = model.graph
        #: constant tensors by name; one that cannot be read is left out (the loader's own
        #: checks name the problem later), so nothing is moved past it
        self.consts: dict[str, np.ndarray] = {}
        tensors = [(t.name, t) for t in self.g.initializer] + [
            (n.output[0], n.attribute[0].t) for n in model.graph.node
            if n.op_type == "Constant" and n.domain in ("", "ai.onnx") and len(n.attribute) == 1
            and n.attribute[0].name == "value" and len(n.output) == 1]
        for name, t in tensors:
            try:
                self.consts[name] = numpy_helper.to_array(t)
            except Exception:  # noqa: BLE001 -- any malformed tensor: not a constant here
                continue
        self.outputs = {o.name for o in self.g.output}
        self.counter = 0
        #: the nodes, owned here while rewritten (a repeated field copies what it takes)
        self.nodes = []
        for n in self.g.node:
            c = NodeProto()
            c.CopyFrom(n)
            self.nodes.append(c)

    def commit(self) -> None:
        del self.g.node[:]
        self.g.node.extend(self.nodes)

    def consumers(self, name: str) -> list:
        return [n for n in self.nodes if name in n.input]

    def fresh(self, base: str) -> str:
        names = {o for n in self.nodes for o in n.output} | set(self.consts) \
            | {i.name for i in self.g.input}
        while True:
            self.counter += 1
            name = f"{base}__{self.counter}"
            if name not in names:
                return name

    def add_const(self, base: str, arr: np.ndarray) -> str:
        name = self.fresh(base)
        self.g.initializer.append(numpy_helper.from_array(arr, name))
        self.consts[name] = arr
        return name

    def drop_value_info(self, names) -> None:
        keep = [vi for vi in self.g.value_info if vi.name not in names]
        del self.g.value_info[:]
        self.g.value_info.extend(keep)


# ------------------------------------------------------------- channels_last ops


def expand_channels_last(model: ModelProto, notes: list[str]) -> bool:
    """Each channels_last op becomes Transpose → ai.onnx op → Transpose, in place.
    True if the model had any."""
    g = _Graph(model)
    found = []
    new_nodes = []
    for n in g.nodes:
        if n.domain != CHANNELS_LAST or n.op_type not in CHANNELS_LAST_OPS:
            new_nodes.append(n)
            continue
        found.append(n.name or n.op_type)
        rank = _rank_of(g, n.input[0])
        to_first = [0, rank - 1] + list(range(1, rank - 1))
        to_last = _inverse(to_first)
        x_first = g.fresh(f"{n.input[0]}_nchw")
        y_first = g.fresh(f"{n.output[0]}_nchw")
        label = n.name or n.op_type
        new_nodes.append(helper.make_node("Transpose", [n.input[0]], [x_first],
                                          name=f"{label}/to_nchw", perm=to_first))
        rest = list(n.input[1:])
        if n.op_type == "Conv":   # its weights are channel-last too (O, H, W, I)
            w_first = g.fresh(f"{n.input[1]}_oihw")
            new_nodes.append(helper.make_node("Transpose", [n.input[1]], [w_first],
                                              name=f"{label}/weights_to_oihw", perm=to_first))
            rest[0] = w_first
        op = helper.make_node(n.op_type, [x_first] + rest,
                              [y_first] + list(n.output[1:]), name=label)
        op.attribute.extend(n.attribute)
        new_nodes.append(op)
        new_nodes.append(helper.make_node("Transpose", [y_first], [n.output[0]],
                                          name=f"{label}/to_nhwc", perm=to_last))
    if not found:
        return False
    g.nodes = new_nodes
    g.commit()
    keep = [o for o in model.opset_import if o.domain != CHANNELS_LAST]
    del model.opset_import[:]
    model.opset_import.extend(keep)
    notes.append(f"{len(found)} channels_last op(s) ({CHANNELS_LAST}) read as the ai.onnx op "
                 f"between NHWC ↔ NCHW transposes")
    return True


def _rank_of(g: _Graph, name: str) -> int:
    for vi in list(g.g.input) + list(g.g.value_info) + list(g.g.output):
        if vi.name == name and vi.type.tensor_type.HasField("shape"):
            return len(vi.type.tensor_type.shape.dim)
    return 4


# ------------------------------------------------------------- transpose sinking


def sink_transposes(model: ModelProto, everywhere: bool = False) -> int:
    """Move Transposes down through layout-free ops; cancel inverse pairs; merge the
    transposes of all of a Concat's inputs into one after it. A Transpose that would meet
    no inverse is left in place unless ``everywhere``. Returns the number of Transposes
    removed."""
    g = _Graph(model)
    steps = 0
    changed = True
    while changed:
        changed = False
        for t in list(g.nodes):
            if t.op_type == "Transpose" and _perm(t) is not None and _sink_one(g, t, everywhere):
                steps += 1
                changed = True
                break
    g.commit()
    return steps


def _chain(g: _Graph, t) -> tuple[list, object | None]:
    """The run of single-consumer layout-free ops below Transpose ``t`` and the node that
    ends it (a Transpose, a Concat fed only by like transposes, or None)."""
    chain = []
    name = t.output[0]
    perm = _perm(t)
    while True:
        if name in g.outputs:
            return chain, None
        cons = g.consumers(name)
        if len(cons) != 1:
            return chain, None
        c = cons[0]
        if c.op_type == "Transpose" and _perm(c) is not None and list(c.input) == [name]:
            return chain, c
        if c.op_type == "Concat":
            return chain, c
        if not _commutes(g, c, name, perm):
            return chain, None
        chain.append(c)
        name = c.output[0]


def _commutes(g: _Graph, c, name: str, perm: list[int]) -> bool:
    if c.op_type == "Resize":
        return c.input[0] == name and all(
            i == "" or i in g.consts for i in c.input[1:]) and len(c.output) == 1
    if c.op_type not in ELEMENTWISE or len(c.output) != 1:
        return False
    params = ELEMENTWISE[c.op_type]
    data = 0
    if c.input[0] != name:
        if c.op_type in COMMUTATIVE and len(c.input) == 2 and c.input[1] == name:
            data = 1
        else:
            return False
    for i, inp in enumerate(c.input):
        if i == data or inp == "":
            continue
        if inp == name or inp not in g.consts:
            return False
        if c.op_type in ("QuantizeLinear", "DequantizeLinear"):
            continue
        if i not in params and not (c.op_type in COMMUTATIVE and i == 0):
            return False
        if g.consts[inp].ndim > len(perm):
            return False
    return True


def _sink_one(g: _Graph, t, everywhere: bool) -> int:
    perm = _perm(t)
    chain, end = _chain(g, t)
    if end is not None and end.op_type == "Transpose":
        composed = [perm[q] for q in _perm(end)]
        _move_below(g, t, chain, perm)
        # t now sits directly above `end`: fold the two into one (or none)
        if composed == list(range(len(composed))):
            _bypass(g, t)
            _bypass(g, end)
            return 2
        t_in = t.input[0]
        _bypass(g, t)
        end.input[0] = t_in
        del end.attribute[:]
        end.attribute.extend([helper.make_attribute("perm", composed)])
        return 1
    if end is not None and end.op_type == "Concat":
        # down to the Concat; once every input arrives through a like Transpose, merge
        _move_below(g, t, chain, perm)
        return 1 if _merge_concat(g, end) or chain else 0
    if everywhere and chain and _below_channels_last(t):
        _move_below(g, t, chain, perm)
        return 1
    return 0


def _below_channels_last(t) -> bool:
    return t.name.endswith("/to_nhwc")


def _move_below(g: _Graph, t, chain: list, perm: list[int]) -> None:
    """``t`` → chain… becomes chain… → ``t``, parameters permuted."""
    if not chain:
        return
    inv = _inverse(perm)
    x, old = t.input[0], t.output[0]
    first, last = chain[0], chain[-1]
    out = last.output[0]
    for c in chain:
        _permute_params(g, c, perm, inv)
    # rewire: first reads x; t reads last's (renamed) output and writes the old name
    idx = list(first.input).index(old)
    first.input[idx] = x
    inner = g.fresh(f"{out}_pre")
    last.output[0] = inner
    t.input[0] = inner
    t.output[0] = out
    # keep topological order: t right after last
    g.nodes.remove(t)
    g.nodes.insert(g.nodes.index(last) + 1, t)
    g.drop_value_info({c.output[0] for c in chain} | {old, out})


def _permute_params(g: _Graph, c, perm: list[int], inv: list[int]) -> None:
    rank = len(perm)
    if c.op_type == "Resize":
        for i in (1, 2, 3):
            if i < len(c.input) and c.input[i] and g.consts[c.input[i]].size:
                arr = g.consts[c.input[i]]
                if i == 1:   # roi: starts then ends, one per axis
                    arr = np.concatenate([arr[:rank][inv], arr[rank:][inv]])
                else:
                    arr = arr[inv]
                c.input[i] = g.add_const(c.input[i], arr)
        return
    if c.op_type in ("QuantizeLinear", "DequantizeLinear"):
        a = _attr(c, "axis")
        if a is not None and g.consts[c.input[1]].ndim == 1 and g.consts[c.input[1]].size > 1:
            a.i = perm[a.i % rank]
        return
    for i, inp in enumerate(c.input):
        if inp not in g.consts or g.consts[inp].ndim == 0:
            continue
        arr = g.consts[inp]
        full = arr.reshape((1,) * (rank - arr.ndim) + arr.shape)
        c.input[i] = g.add_const(inp, np.transpose(full, inv))


def _bypass(g: _Graph, t) -> None:
    """Remove the one-input node ``t``: its readers read its input (or, at a graph output,
    its input's producer writes the output's name)."""
    src, dst = t.input[0], t.output[0]
    g.nodes.remove(t)
    if dst in g.outputs:
        prod = [n for n in g.nodes if src in n.output]
        if prod and src not in g.outputs and len(g.consumers(src)) == 0 \
                and src not in {i.name for i in g.g.input}:
            p = prod[0]
            p.output[list(p.output).index(src)] = dst
            g.drop_value_info({src, dst})
            return
        g.nodes.append(helper.make_node("Identity", [src], [dst], name=f"{t.name}/kept"))
        return
    for n in g.nodes:
        for i, inp in enumerate(n.input):
            if inp == dst:
                n.input[i] = src
    g.drop_value_info({dst})


def _merge_concat(g: _Graph, cat) -> bool:
    """Concat whose inputs are all single-use Transposes with one perm: Concat of their
    inputs along the permuted axis, then one Transpose."""
    prods = []
    for inp in cat.input:
        p = [n for n in g.nodes if inp in n.output]
        if not p or p[0].op_type != "Transpose" or _perm(p[0]) is None \
                or len(g.consumers(inp)) != 1 or inp in g.outputs:
            return False
        prods.append(p[0])
    perms = {tuple(_perm(p)) for p in prods}
    if len(perms) != 1:
        return False
    perm = list(perms.pop())
    a = _attr(cat, "axis")
    a.i = perm[a.i % len(perm)]
    for i, p in enumerate(prods):
        cat.input[i] = p.input[0]
        g.nodes.remove(p)
    out = cat.output[0]
    inner = g.fresh(f"{out}_pre")
    cat.output[0] = inner
    t = helper.make_node("Transpose", [inner], [out], name=f"{cat.name or 'Concat'}/after",
                         perm=perm)
    g.nodes.insert(g.nodes.index(cat) + 1, t)
    g.drop_value_info({out} | {p.output[0] for p in prods})
    return True
