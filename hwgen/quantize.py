"""Float ONNX models → QDQ models hwgen compiles, with onnxruntime's static quantization.

``quantize(model, calibration, out)`` does, in this order:

1. load and validate the float model (``dataflow.loader``, with older operator versions
   brought forward); refuse a model that is already quantized or does not have exactly one
   float input;
2. read the calibration data (.npy/.npz like ``hwgen simulate``'s input, batch axis first)
   and check its shape against the model's input;
3. prepare a working copy: ai.onnx opset < 13 is brought forward to 13 with
   ``onnx.version_converter`` (onnxruntime's quantizer would otherwise just relabel the
   opset), initializers listed as graph inputs (IR 3 style) become plain initializers and
   the IR version is raised to what opset 13 needs;
4. ``onnxruntime.quantization.quant_pre_process`` (symbolic shape inference skipped, so
   sympy is not needed) and ``quantize_static`` in QDQ format (or QOperator) with MinMax
   calibration: int8 weights (symmetric, ORT's default for int8), uint8 or int8 activations,
   per-tensor or per-channel weight scales, ``symmetric`` = ``ActivationSymmetric`` and
   ``WeightSymmetric``. ``ForceQuantizeNoInputCheck`` is on so that pooling and shape ops
   at the start of the model are quantized too (hwgen maps an all-integer graph);
5. the quantized model is written atomically.

Every failure is a one-line :class:`HwgenError`.
"""
from __future__ import annotations

import logging
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import onnx
from onnx import helper

from hwgen.dataflow.importer import load_model
from hwgen.dataflow.loader import UPGRADE_OPSET, upgrade_opset
from hwgen.dataflow.operators import is_float_model, quantized_node
from hwgen.errors import HwgenError
from hwgen.io import check_input_shape, check_writable_file, read_input, write_atomic
from hwgen.reference import run_batched

__all__ = ["ACTIVATION_TYPES", "QUANT_FORMATS", "float_model_error", "float_top1", "is_float_model",
           "quantize", "quantized_copy", "quantized_node"]

ACTIVATION_TYPES = ("uint8", "int8")
#: "qdq": QuantizeLinear/DequantizeLinear around float ops; "qoperator": onnxruntime's QLinear ops
QUANT_FORMATS = ("qdq", "qoperator")

#: rows per calibration batch when the model's batch axis is symbolic
_CALIB_BATCH = 64


def float_model_error(model, graph) -> HwgenError:
    """What compile/verify say about a float model given without calibration data."""
    layers = [n for n in graph.nodes if n.op_type in ("Conv", "Gemm", "MatMul")] or graph.nodes
    first = f" (node {layers[0].label}, {layers[0].op_type}, works on floats)" if layers else ""
    return HwgenError(f"{Path(model).name}: is a float model{first}: no QuantizeLinear, "
                      f"DequantizeLinear or QLinear node; pass --calibration DATA.npz "
                      f"(calibration= in the API) to quantize it with onnxruntime first, or "
                      f"run 'hwgen quantize'")


def _one_line(e, limit: int = 300) -> str:
    s = " ".join(str(e).split()) or type(e).__name__
    return s if len(s) <= limit else s[:limit - 3].rstrip() + "..."


def _load_float(model_path: Path):
    """Validated float model → (loaded graph, working ModelProto ready for ORT)."""
    graph = load_model(model_path, upgrade=True)
    q = quantized_node(graph)
    if q is not None:
        raise HwgenError(f"{model_path}: is already quantized (node {q.label} is "
                         f"{q.op_type}); hwgen quantize takes a float model; compile this "
                         f"one directly, without calibration data")
    if len(graph.inputs) != 1:
        raise HwgenError(f"{model_path}: has {len(graph.inputs)} graph inputs; hwgen quantizes "
                         f"models with exactly one input")
    inp = graph.inputs[0]
    if inp.dtype is None or inp.dtype.kind != "f":
        raise HwgenError(f"{model_path}: graph input '{inp.name}' has element type {inp.dtype}; "
                         f"a float model has a float input")
    if inp.shape is None:
        raise HwgenError(f"{model_path}: graph input '{inp.name}' has no known shape")
    try:
        model = onnx.load(str(model_path))  # external data was checked by the loader
    except Exception as e:  # pragma: no cover - the loader read it just before
        raise HwgenError(f"{model_path}: cannot read the model: {_one_line(e)}") from None
    model = upgrade_opset(model, UPGRADE_OPSET, str(model_path))
    g = model.graph
    inits = {t.name for t in g.initializer}
    if any(vi.name in inits for vi in g.input):  # IR 3: initializers are graph inputs too
        keep = [vi for vi in g.input if vi.name not in inits]
        del g.input[:]
        g.input.extend(keep)
    taken = {n.name for n in g.node if n.name}
    for i, n in enumerate(g.node):  # unnamed nodes (old exporters) get names: layer names
        if not n.name:
            name, k = f"{n.op_type}_{i}", 1
            while name in taken:
                k += 1
                name = f"{n.op_type}_{i}_{k}"
            n.name = name
            taken.add(name)
    ai = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")]
    if ai:
        need = helper.find_min_ir_version_for([helper.make_opsetid("", ai[0])])
        model.ir_version = max(int(model.ir_version), int(need))
    return graph, model


def _calibration_array(calibration, input_name: str, shape) -> tuple[np.ndarray, str]:
    if isinstance(calibration, (str, Path)):
        source = str(calibration)
        x = read_input(calibration, input_name)
    else:
        source = "calibration array"
        x = np.asarray(calibration)
        if x.dtype.kind not in "fiu" or x.dtype == np.bool_:
            raise HwgenError(f"{source}: has element type {x.dtype}; numbers are needed")
        x = x.astype(np.float32)
    check_input_shape(x, list(shape), f"{source} (calibration data)")
    if x.shape[0] == 0:
        raise HwgenError(f"{source}: no calibration samples (the batch axis is empty)")
    if not np.all(np.isfinite(x)):
        raise HwgenError(f"{source}: calibration data holds NaN or infinite values")
    return x, source


def _batches(x: np.ndarray, batch) -> list[np.ndarray]:
    """Calibration batches: of the model's fixed batch size (the last one filled up with
    samples from the start, which does not change a min/max calibration), else of up to
    _CALIB_BATCH rows."""
    if isinstance(batch, int) and batch > 0:
        count = -(-x.shape[0] // batch) * batch
        rows = x[np.arange(count) % x.shape[0]]
        return [rows[k:k + batch] for k in range(0, count, batch)]
    return [x[k:k + _CALIB_BATCH] for k in range(0, x.shape[0], _CALIB_BATCH)]


def _run_ort(model: onnx.ModelProto, x: np.ndarray, work: Path, where: str, per_channel: bool,
             symmetric: bool, activation_type: str, quant_format: str = "qdq",
             op_types: list[str] | None = None) -> onnx.ModelProto:
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )
    from onnxruntime.quantization.shape_inference import quant_pre_process

    inp = model.graph.input[0]
    dims = inp.type.tensor_type.shape.dim
    batch = int(dims[0].dim_value) if len(dims) and dims[0].HasField("dim_value") else None
    batches = _batches(x, batch)

    class _Reader(CalibrationDataReader):
        def __init__(self):
            self._it = iter(batches)

        def get_next(self):
            b = next(self._it, None)
            return None if b is None else {inp.name: b}

    opts = {"ForceQuantizeNoInputCheck": True}
    if symmetric:
        opts.update(ActivationSymmetric=True, WeightSymmetric=True)
    act = QuantType.QUInt8 if activation_type == "uint8" else QuantType.QInt8
    f_path, p_path, q_path = work / "float.onnx", work / "preprocessed.onnx", work / "qdq.onnx"
    onnx.save(model, str(f_path))
    import onnxruntime

    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)  # ORT's advice ("consider pre-processing", ...) to stderr
    # onnxruntime's C++ log (also its error lines, which the HwgenError repeats) to stderr
    onnxruntime.set_default_logger_severity(4)
    try:
        quant_pre_process(str(f_path), str(p_path), skip_symbolic_shape=True)
        fmt = QuantFormat.QOperator if quant_format == "qoperator" else QuantFormat.QDQ
        quantize_static(str(p_path), str(q_path), _Reader(), quant_format=fmt,
                        op_types_to_quantize=op_types, per_channel=per_channel,
                        activation_type=act,
                        weight_type=QuantType.QInt8, calibrate_method=CalibrationMethod.MinMax,
                        extra_options=opts)
        qmodel = onnx.load(str(q_path))
    except HwgenError:
        raise
    except Exception as e:
        raise HwgenError(f"{where}: onnxruntime quantization failed: {_one_line(e)}") from None
    finally:
        logging.disable(previous)
        onnxruntime.set_default_logger_severity(2)  # onnxruntime's default (warnings)
    if not any(n.op_type == "QuantizeLinear" or n.op_type.startswith("QLinear")
               for n in qmodel.graph.node):
        ops = sorted({n.op_type for n in model.graph.node})
        raise HwgenError(f"{where}: onnxruntime quantized none of the model's nodes (ops: "
                         f"{', '.join(ops)}); hwgen maps models with Conv, Gemm or MatMul "
                         f"layers")
    return qmodel


def _check_options(activation_type: str, quant_format: str = "qdq"):
    if activation_type not in ACTIVATION_TYPES:
        raise HwgenError(f"activation type must be one of {', '.join(ACTIVATION_TYPES)} "
                         f"(got {activation_type!r})")
    if quant_format not in QUANT_FORMATS:
        raise HwgenError(f"quantization format must be one of {', '.join(QUANT_FORMATS)} "
                         f"(got {quant_format!r})")


def _quantize(model_path: Path, calibration, work: Path, per_channel: bool, symmetric: bool,
              activation_type: str, quant_format: str = "qdq",
              op_types: list[str] | None = None) -> tuple[onnx.ModelProto, int]:
    """→ (quantized model, calibration samples); leaves work/float.onnx (the prepared float
    model)."""
    _check_options(activation_type, quant_format)
    graph, model = _load_float(model_path)
    inp = graph.inputs[0]
    x, _ = _calibration_array(calibration, inp.name, inp.shape)
    return _run_ort(model, x, work, str(model_path), per_channel, symmetric,
                    activation_type, quant_format, op_types), x.shape[0]


def quantize(model_path, calibration, out_path, per_channel: bool = False,
             symmetric: bool = False, activation_type: str = "uint8",
             quant_format: str = "qdq", op_types: list[str] | None = None) -> Path:
    """Quantize the float ONNX model at ``model_path`` with onnxruntime (QDQ format, or
    ``quant_format="qoperator"``: onnxruntime's QLinear ops), calibrated on ``calibration``
    (a .npy/.npz path or an array, batch axis first); write it atomically to ``out_path``
    and return that path. ``op_types``: onnxruntime's ``op_types_to_quantize`` (its default:
    every op its quantizer has a rule for)."""
    model_path = Path(model_path)
    out = check_writable_file(out_path)
    with tempfile.TemporaryDirectory(prefix="hwgen-quantize-") as tmp:
        qmodel, _ = _quantize(model_path, calibration, Path(tmp), per_channel, symmetric,
                              activation_type, quant_format, op_types)
    write_atomic(out, qmodel.SerializeToString())
    return out


@contextmanager
def quantized_copy(model_path, calibration, per_channel: bool = False, symmetric: bool = False,
                   activation_type: str = "uint8"):
    """For compile/verify --calibration: yield (QDQ model path, prepared float model path)
    in a temporary folder removed afterwards. The QDQ file has the float model's file name,
    so the design's top name and manifest name the user's model."""
    model_path = Path(model_path)
    tmp = Path(tempfile.mkdtemp(prefix="hwgen-quantize-"))
    try:
        qmodel, _ = _quantize(model_path, calibration, tmp, per_channel, symmetric,
                              activation_type)
        qdir = tmp / "qdq"
        qdir.mkdir()
        qpath = qdir / model_path.name
        onnx.save(qmodel, str(qpath))
        yield qpath, tmp / "float.onnx"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def float_top1(float_model, x: np.ndarray, rtl_outputs: np.ndarray) -> float | None:
    """Top-1 agreement of the RTL's outputs with onnxruntime on the float model, for
    classifiers ([N, C] outputs with C > 1); None otherwise."""
    import onnxruntime as ort

    y = np.asarray(rtl_outputs).reshape(x.shape[0], -1)
    if np.asarray(rtl_outputs).ndim != 2 or y.shape[1] < 2:
        return None
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(str(float_model), so, providers=["CPUExecutionProvider"])
    ref = run_batched(sess, sess.get_inputs()[0].name, sess.get_outputs()[0].name, x)
    ref = np.asarray(ref).reshape(x.shape[0], -1)
    return float(np.mean(ref.argmax(axis=1) == y.argmax(axis=1)))
