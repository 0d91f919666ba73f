"""The software references a design is compared with: onnxruntime, run in batches, on the
model's output and on every layer output the integer graph shares with the model."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from hwgen.dataflow.intgraph import IntGraph
from hwgen.dataflow.ops_qonnx import is_qonnx_model, qonnx_reference
from hwgen.dataflow.values import Int
from hwgen.errors import HwgenError
from hwgen.io import read_input

#: samples per onnxruntime run of the layer comparison (bounds the memory it takes)
LAYER_CHUNK = 256


def reference_session_options():
    """onnxruntime ``SessionOptions`` of every reference session: the default graph
    optimisations (QDQ groups fused into QLinearConv, QGemm, ... whose float32
    requantization golden follows), with ``session.x64quantprecision=1``.

    On an x86-64 CPU without VNNI (SSE4.1, AVX2, AVX-512 without VNNI) onnxruntime's u8 x s8
    kernels multiply with ``vpmaddubsw``, which adds each two neighbouring products into a
    *saturating* int16: where both activations and weights are large the accumulator is
    clipped and the output is off by tens of steps (a Conv 3x3 with uint8 activations and
    int8 weights: 241 of 8,400 outputs, up to 48 steps). That is not what the model says and
    depends on the machine (a CPU with VNNI accumulates exactly). The option makes the
    fused kernels take uint8 weights (the int8 ones plus 128, zero point plus 128), whose
    products cannot saturate: the exact sums, which a VNNI CPU computes anyway, with the
    same fused kernels and requantization (the graph keeps its QLinearConv, QGemm, ...)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.add_session_config_entry("session.x64quantprecision", "1")
    return so


def run_batched(sess, in_name: str, out_name: str, x: np.ndarray) -> np.ndarray:
    """onnxruntime session ``sess`` on ``x``: the whole batch at once, or in chunks of the
    model's fixed batch size if it has one."""
    return run_outputs(sess, in_name, [out_name], x)[0]


def run_outputs(sess, in_name: str, out_names: list[str], x: np.ndarray) -> list[np.ndarray]:
    """:func:`run_batched` for several outputs of the session: one array each."""
    n = sess.get_inputs()[0].shape[0]
    if not isinstance(n, int) or n <= 0:
        return sess.run(out_names, {in_name: x})
    if x.shape[0] % n:
        raise HwgenError(f"the model fixes its batch size to {n}; give a multiple of {n} "
                         f"samples (got {x.shape[0]})")
    runs = [sess.run(out_names, {in_name: x[k:k + n]}) for k in range(0, x.shape[0], n)]
    return [np.concatenate([r[i] for r in runs]) for i in range(len(out_names))]


def fixed_batch(m: onnx.ModelProto) -> int:
    """The batch size the model's first input fixes (0: symbolic)."""
    dims = m.graph.input[0].type.tensor_type.shape.dim if m.graph.input else []
    return dims[0].dim_value if dims and dims[0].HasField("dim_value") else 0


def free_batch(m: onnx.ModelProto) -> onnx.ModelProto:
    """``m`` with the batch axis of its inputs and outputs symbolic and the inferred shapes
    dropped: a model that fixes its batch size (often 1) run on any number of samples."""
    m = onnx.ModelProto.FromString(m.SerializeToString())
    for vi in list(m.graph.input) + list(m.graph.output):
        d = vi.type.tensor_type.shape.dim
        if len(d):
            d[0].Clear()
            d[0].dim_param = "N"
    del m.graph.value_info[:]
    return m


def check_reference_batch(model, x, count: int | None) -> None:
    """Before any work: the reference takes the number of samples of ``x`` (an array or an
    input file, ``count`` of them at most). A model that fixes its batch size B takes a
    multiple of B as it is, and other counts with its batch axis made symbolic
    (:func:`free_batch`) if it then still runs (tried on one sample); else one line says
    what to do."""
    try:
        if is_qonnx_model(model):
            return
        m = onnx.load(str(model), load_external_data=False)
    except Exception:  # noqa: BLE001 - an unreadable model: compile says why, in one line
        return
    b = fixed_batch(m)
    if not b:
        return
    inits = {t.name for t in m.graph.initializer}
    in_name = next(i.name for i in m.graph.input if i.name not in inits)
    if isinstance(x, (str, Path)):   # verify reads it again (and warns of a short file)
        x = read_input(x, in_name, count, count_warning=False)
    x = np.asarray(x, dtype=np.float32)[:count]
    if x.shape[0] % b == 0:
        return
    try:
        reference_outputs(model, in_name, [m.graph.output[0].name], x[:1])
    except HwgenError as e:
        raise HwgenError(f"{Path(model).name} fixes its batch size to {b:,} and onnxruntime "
                         f"cannot run it on another count: give a multiple of {b:,} samples "
                         f"(--count), or export the model with a dynamic batch axis "
                         f"({str(e).split(': ', 1)[-1][:160]})") from None


def reference_outputs(model, in_name: str, names: list[str], x: np.ndarray):
    """The values of the ONNX tensors ``names`` of ``model`` (a path) on ``x``, from the
    model's reference: qonnx's execution for a QONNX model, onnxruntime otherwise. Returns
    (the arrays, the reference's name). A model that fixes a batch size ``x``'s count is no
    multiple of runs with its batch axis symbolic. onnxruntime refusing the model is one
    line."""
    import onnxruntime as ort

    if is_qonnx_model(model):  # custom ops onnxruntime lacks: the qonnx package runs it
        return qonnx_reference(model, x, names), "qonnx"
    m = onnx.load(str(model))
    b = fixed_batch(m)
    if b and x.shape[0] % b:
        m = free_batch(m)
    have = {o.name for o in m.graph.output}
    for name in names:
        if name not in have:
            m.graph.output.append(onnx.ValueInfoProto(name=name))
    try:
        sess = ort.InferenceSession(m.SerializeToString(), reference_session_options(),
                                    providers=["CPUExecutionProvider"])
        return run_outputs(sess, in_name, names, x), "onnxruntime"
    except HwgenError:
        raise
    except Exception as e:  # noqa: BLE001 - onnxruntime's refusal, in one line
        first = (str(e).strip().splitlines() or [""])[0][:300]
        raise HwgenError(f"{Path(model).name}: onnxruntime cannot run the model, so the RTL "
                         f"is not compared with it ({type(e).__name__}: {first})") from None


@dataclass
class TailAgreement:
    """The model's whole output, the host tail run on the RTL's output, against the
    reference's: float outputs compared as floats."""
    ops: list[str]              # the tail's op types
    output: str                 # the graph output
    max_abs_diff: float         # largest |hardware + tail − reference|
    identical_fraction: float   # elements exactly equal
    top1_agreement: float | None  # classifiers ([N, C], C > 1): same argmax

    @classmethod
    def measure(cls, ops, output: str, ref: np.ndarray, got: np.ndarray) -> TailAgreement:
        ref = np.asarray(ref).reshape(ref.shape[0], -1)
        got = np.asarray(got).reshape(ref.shape[0], -1)
        diff = np.abs(got.astype(np.float64) - ref.astype(np.float64))
        top1 = None
        if ref.shape[1] > 1 and ref.dtype.kind == "f":
            top1 = float(np.mean(ref.argmax(axis=1) == got.argmax(axis=1)))
        return cls(list(ops), output, float(diff.max(initial=0.0)),
                   float(np.mean(diff == 0)), top1)


@dataclass
class LayerAgreement:
    """One layer output of the integer graph against onnxruntime's value of the ONNX tensor
    holding it: the differences (hardware − onnxruntime, in the tensor's quantization steps;
    integers for an integer tensor) → how many elements have each."""
    layer: str                  # the integer op writing the tensor
    tensor: str                 # the integer tensor
    onnx_tensor: str            # the ONNX tensor compared ("" if none)
    diffs: dict[int, int] = field(default_factory=dict)
    note: str = ""              # why it is not compared

    @property
    def elements(self) -> int:
        return sum(self.diffs.values())

    @property
    def identical_fraction(self) -> float | None:
        return self.diffs.get(0, 0) / self.elements if self.elements else None

    @property
    def max_step_diff(self) -> int:
        return max((abs(d) for d in self.diffs), default=0)


@dataclass
class LayerReport:
    layers: list[LayerAgreement]
    note: str = ""              # why no layer is compared (the model cannot be run so)


def _views(ig: IntGraph, views: dict, onnx_names: set[str]) -> dict[str, list[tuple]]:
    """Per layer output tensor, the ONNX tensors holding it, best first: the last ones in
    walk order holding its integers (a clamp folded into the layer makes a later
    QuantizeLinear the one with the layer's values), then the last holding its dequantized
    floats."""
    found: dict[str, list[tuple[str, object]]] = {}
    for name, v in views.items():
        if name in onnx_names:
            found.setdefault(v.tensor, []).append((name, v))
    return {t: [c for c in reversed(cands) if isinstance(c[1], Int)]
            + [c for c in reversed(cands) if not isinstance(c[1], Int)]
            for t, cands in found.items()}


def layer_agreement(model, ig: IntGraph, views: dict, values: dict[str, np.ndarray],
                    x: np.ndarray) -> LayerReport:
    """Every layer output of ``ig`` against onnxruntime on ``model`` run with the ONNX tensors
    holding them added as graph outputs. ``views``: the walk's ONNX tensors of integer tensors
    (``ImportReport.views``); ``values``: the golden model's tensors ([N, elements], stream
    order) for float inputs ``x`` [N, ...]. Of a layer's ONNX tensors the best one with as
    many elements as the layer output is compared (an ``Expand`` that its readers broadcast
    anyway stands for its input, but its tensor is larger)."""
    import onnxruntime as ort

    proto = onnx.load(str(model))
    produced = {o for n in proto.graph.node for o in n.output if o}
    found = _views(ig, views, produced)
    rows, cands = [], {}
    for op in ig.ops:
        t = op.output
        fits = [c for c in found.get(t, ())
                if ig.tensors[t].size == int(np.prod(c[1].shape, dtype=np.int64))]
        if t not in found:
            rows.append(LayerAgreement(op.name, t, "", note="no ONNX tensor of the model "
                                                            "holds this layer's output"))
        elif not fits:
            rows.append(LayerAgreement(op.name, t, found[t][0][0],
                                       note="element counts differ"))
        else:
            rows.append(LayerAgreement(op.name, t, fits[0][0]))
            cands[t] = fits
    names = sorted({c[0] for fits in cands.values() for c in fits})
    have = {o.name for o in proto.graph.output}
    proto.graph.output.extend(onnx.ValueInfoProto(name=n) for n in names if n not in have)
    try:
        sess = ort.InferenceSession(proto.SerializeToString(), reference_session_options(),
                                    providers=["CPUExecutionProvider"])
        in_name = sess.get_inputs()[0].name
        n = sess.get_inputs()[0].shape[0]
        step = LAYER_CHUNK if not isinstance(n, int) or n <= 0 else max(1, LAYER_CHUNK // n) * n
        chosen: dict[str, tuple] = {}
        for k in range(0, x.shape[0], step):
            got = dict(zip(names, run_outputs(sess, in_name, names, x[k:k + step])))
            for r in rows:
                if r.note:
                    continue
                if r.tensor not in chosen:   # the first whose tensor has the layer's size
                    size = ig.tensors[r.tensor].size
                    fit = [c for c in cands[r.tensor]
                           if got[c[0]].size == size * got[c[0]].shape[0]]
                    if not fit:
                        r.note = "element counts differ"
                        continue
                    chosen[r.tensor] = fit[0]
                    r.onnx_tensor = fit[0][0]
                name, view = chosen[r.tensor]
                _add(r, ig, view, got[name], values[r.tensor][k:k + step])
    except HwgenError:
        raise
    except Exception as e:  # noqa: BLE001 - onnxruntime's refusal, in one line
        first = (str(e).strip().splitlines() or [""])[0][:300]
        return LayerReport([], f"onnxruntime cannot run the model with its layer outputs as "
                               f"graph outputs ({type(e).__name__}: {first})")
    for r in rows:
        r.diffs = dict(sorted(r.diffs.items()))
    return LayerReport(rows)


def _add(r: LayerAgreement, ig: IntGraph, view, ref: np.ndarray, hw: np.ndarray):
    """Count the differences of one chunk: onnxruntime's ``ref`` (ONNX order; integers, or
    floats quantized with the tensor's parameters) in stream order against ``hw``."""
    ref = ref.reshape(ref.shape[0], -1)
    q = ref.astype(np.int64) if isinstance(view, Int) else ig.tensors[r.tensor].quantize(ref)
    if view.order is not None:
        q = q[:, view.order]
    d, c = np.unique(hw.astype(np.int64) - q, return_counts=True)
    for di, ci in zip(d.tolist(), c.tolist()):
        r.diffs[di] = r.diffs.get(di, 0) + ci
