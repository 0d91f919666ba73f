"""Build small ONNX models on the fly for tests (no PyTorch needed).

Three layers of helpers:

* :func:`random_mlp` / :func:`random_inputs` -- deterministic float32 weights and inputs;
* :func:`float_mlp` -- a float ONNX MLP (Linear layers with Relu between them), either as
  PyTorch exports it (``Gemm`` with ``transB=1``) or as ``MatMul`` + ``Add``;
* :func:`quantize_qdq` -- quantize such a model with ``onnxruntime.quantization.quantize_static``
  in QDQ format, after ORT's recommended pre-processing.

Typical use::

    ws, bs = random_mlp([16, 12, 4], seed=0)
    fm = float_mlp(ws, bs)
    qm = quantize_qdq(fm, random_inputs(32, 16, seed=1))

What ORT's QDQ quantizer produces for an MLP (onnxruntime 1.32) is described in the
docstring of :func:`quantize_qdq`.
"""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = [
    "float_mlp",
    "quantize_qdq",
    "random_mlp",
    "random_inputs",
    "run_model",
    "op_sequence",
]


# ---------------------------------------------------------------------------------------------
# random weights and inputs
# ---------------------------------------------------------------------------------------------

def random_mlp(sizes: Sequence[int], seed: int = 0) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Random float32 weights/biases for an MLP with layer widths ``sizes`` (input first).

    ``sizes=[64, 32, 10]`` gives two layers: weights ``[32, 64]`` and ``[10, 32]`` (PyTorch's
    ``[out, in]`` layout) and biases ``[32]`` and ``[10]``. Weights use He (Kaiming normal)
    init, ``std = sqrt(2 / in)``, so activations keep roughly unit scale through Relu layers;
    biases are small (uniform in ``+-0.1``), and nonzero so bias handling gets exercised.
    """
    sizes = [int(s) for s in sizes]
    if len(sizes) < 2 or any(s <= 0 for s in sizes):
        raise ValueError(f"random_mlp: need at least two positive sizes, got {sizes}")
    rng = np.random.default_rng(seed)
    weights, biases = [], []
    for n_in, n_out in zip(sizes[:-1], sizes[1:]):
        w = rng.standard_normal((n_out, n_in)) * np.sqrt(2.0 / n_in)
        b = rng.uniform(-0.1, 0.1, size=n_out)
        weights.append(w.astype(np.float32))
        biases.append(b.astype(np.float32))
    return weights, biases


def random_inputs(n: int, dim: int | Sequence[int], seed: int = 0, *, low: float = 0.0,
                  high: float = 1.0) -> np.ndarray:
    """``n`` random float32 input rows, uniform in ``[low, high)`` (default ``[0, 1)``, like
    normalised pixels). ``dim`` is an int (rows of shape ``[n, dim]``) or a shape tuple
    (e.g. ``(1, 8, 8)`` gives ``[n, 1, 8, 8]``, for ``float_mlp(..., flatten_input=(1, 8, 8))``).
    """
    shape = (int(dim),) if np.isscalar(dim) else tuple(int(d) for d in dim)
    rng = np.random.default_rng(seed)
    return rng.uniform(low, high, size=(int(n),) + shape).astype(np.float32)


# ---------------------------------------------------------------------------------------------
# float model
# ---------------------------------------------------------------------------------------------

def float_mlp(weights: Sequence[np.ndarray], biases: Sequence[np.ndarray], *, style: str = "gemm",
              relu_last: bool = False, input_name: str = "input", output_name: str = "logits",
              opset: int = 17, batch: str | int = "N",
              flatten_input: tuple[int, ...] | None = None) -> onnx.ModelProto:
    """A float32 ONNX MLP: Linear layers with Relu between them.

    ``weights[i]`` is ``[out, in]`` (PyTorch layout), ``biases[i]`` is ``[out]``. A Relu follows
    every layer but the last (and the last too when ``relu_last``).

    ``style="gemm"`` (what ``torch.onnx.export`` emits for ``nn.Linear``)::

        Gemm(x, fcI.weight [out,in], fcI.bias [out]; transB=1) -> Relu -> ...

    ``style="matmul"``::

        MatMul(x, fcI.weight [in,out]) -> Add(., fcI.bias [out]) -> Relu -> ...

    The input is ``[batch, in]`` where ``batch`` is a symbolic dim_param (a str, default
    ``"N"``) or a fixed size (an int). With ``flatten_input=(C, H, W)`` (any shape whose product
    is ``in``) the input is ``[batch, C, H, W]`` and comes first through ``Flatten(axis=1)``
    (gemm style) or ``Reshape(x, [-1, in])`` with an int64 shape initializer (matmul style).

    Node names are ``fcI`` (``fcI_matmul`` / ``fcI_add`` for matmul style), ``reluI`` and
    ``flatten``; intermediate tensors are ``fcI_out`` / ``reluI_out``; the output is
    ``[batch, out_last]``. The model passes ``onnx.checker.check_model(full_check=True)``.
    """
    if style not in ("gemm", "matmul"):
        raise ValueError(f"float_mlp: style must be 'gemm' or 'matmul', got {style!r}")
    if len(weights) == 0 or len(weights) != len(biases):
        raise ValueError(f"float_mlp: need as many biases as weights (>=1), got "
                         f"{len(weights)} weights and {len(biases)} biases")
    weights = [np.asarray(w, dtype=np.float32) for w in weights]
    biases = [np.asarray(b, dtype=np.float32) for b in biases]
    for i, (w, b) in enumerate(zip(weights, biases)):
        if w.ndim != 2 or b.shape != (w.shape[0],):
            raise ValueError(f"float_mlp: layer {i}: weight must be [out, in] and bias [out], got "
                             f"{w.shape} and {b.shape}")
        if i and w.shape[1] != weights[i - 1].shape[0]:
            raise ValueError(f"float_mlp: layer {i} takes {w.shape[1]} inputs but layer {i - 1} "
                             f"gives {weights[i - 1].shape[0]}")
    n_in = weights[0].shape[1]
    n_out = weights[-1].shape[0]
    batch_dim: str | int = batch if isinstance(batch, str) else int(batch)

    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []

    if flatten_input is not None:
        flat = tuple(int(d) for d in flatten_input)
        if int(np.prod(flat)) != n_in:
            raise ValueError(f"float_mlp: flatten_input {flat} has {int(np.prod(flat))} elements "
                             f"but the first layer takes {n_in}")
        in_shape = [batch_dim, *flat]
        if style == "gemm":
            nodes.append(helper.make_node("Flatten", [input_name], ["flatten_out"], name="flatten",
                                          axis=1))
        else:
            inits.append(numpy_helper.from_array(np.array([-1, n_in], dtype=np.int64),
                                                 "flatten_shape"))
            nodes.append(helper.make_node("Reshape", [input_name, "flatten_shape"], ["flatten_out"],
                                          name="flatten"))
        x = "flatten_out"
    else:
        in_shape = [batch_dim, n_in]
        x = input_name

    n_layers = len(weights)
    for i, (w, b) in enumerate(zip(weights, biases)):
        last = i == n_layers - 1
        relu = (not last) or relu_last
        y = output_name if (last and not relu) else f"fc{i}_out"
        w_name, b_name = f"fc{i}.weight", f"fc{i}.bias"
        inits.append(numpy_helper.from_array(b, b_name))
        if style == "gemm":
            inits.append(numpy_helper.from_array(w, w_name))
            nodes.append(helper.make_node("Gemm", [x, w_name, b_name], [y], name=f"fc{i}",
                                          alpha=1.0, beta=1.0, transB=1))
        else:
            inits.append(numpy_helper.from_array(np.ascontiguousarray(w.T), w_name))
            nodes.append(helper.make_node("MatMul", [x, w_name], [f"fc{i}_mm"],
                                          name=f"fc{i}_matmul"))
            nodes.append(helper.make_node("Add", [f"fc{i}_mm", b_name], [y], name=f"fc{i}_add"))
        x = y
        if relu:
            r = output_name if last else f"relu{i}_out"
            nodes.append(helper.make_node("Relu", [x], [r], name=f"relu{i}"))
            x = r

    graph = helper.make_graph(
        nodes, f"mlp_{style}",
        [helper.make_tensor_value_info(input_name, TensorProto.FLOAT, in_shape)],
        [helper.make_tensor_value_info(output_name, TensorProto.FLOAT, [batch_dim, n_out])],
        initializer=inits,
    )
    opsets = [helper.make_opsetid("", int(opset))]
    # The lowest IR version the opset allows (8 for opset 17, as torch.onnx.export writes),
    # not onnx's newest, which onnxruntime may not read yet.
    model = helper.make_model(graph, opset_imports=opsets, producer_name="hwgen-tests-modelgen",
                              ir_version=helper.find_min_ir_version_for(opsets))
    onnx.checker.check_model(model, full_check=True)
    return model


# ---------------------------------------------------------------------------------------------
# quantization
# ---------------------------------------------------------------------------------------------

_QTYPES = {"uint8": "QUInt8", "int8": "QInt8"}


def _qtype(name: str, what: str):
    from onnxruntime.quantization import QuantType

    if name not in _QTYPES:
        raise ValueError(f"quantize_qdq: {what} must be 'uint8' or 'int8', got {name!r}")
    return getattr(QuantType, _QTYPES[name])


def quantize_qdq(model: onnx.ModelProto, calib: np.ndarray, *, per_channel: bool = False,
                 activation_type: str = "uint8", weight_type: str = "int8",
                 symmetric_activations: bool = False, symmetric_weights: bool | None = None,
                 path_dir: str | Path | None = None, batch_size: int = 1, preprocess: bool = True,
                 extra_options: dict | None = None) -> onnx.ModelProto:
    """Quantize a float model statically to QDQ format with onnxruntime; return the QDQ model.

    Steps, as the ORT quantization docs recommend:

    1. ``quant_pre_process`` (ORT basic graph optimisations + ONNX shape inference). Symbolic
       shape inference is skipped: it needs sympy, which is not installed here, and it only
       matters for transformer-like models (``preprocess=False`` skips the whole step).
    2. ``quantize_static(..., quant_format=QuantFormat.QDQ, calibrate_method=MinMax)``, with a
       ``CalibrationDataReader`` that feeds ``calib`` (an array whose first axis is rows, the
       rest matching the model's input) in batches of ``batch_size`` rows (default 1).

    ``activation_type`` / ``weight_type`` are ``"uint8"`` or ``"int8"``.
    ``symmetric_activations`` sets ``extra_options["ActivationSymmetric"]``;
    ``symmetric_weights`` sets ``extra_options["WeightSymmetric"]`` when not None (ORT's own
    default is symmetric for int8 weights, asymmetric for uint8). ``extra_options`` is merged
    in last (e.g. ``{"QDQKeepRemovableActivations": True}``).

    ``path_dir``: the working directory. When None a temporary one is used and removed; when
    given, the files ``float.onnx``, ``preprocessed.onnx`` and ``qdq.onnx`` are left there
    (``qdq.onnx`` is the returned model), e.g. for a test that needs a path on disk.

    What ORT 1.32 produces for ``float_mlp`` models (checked with 2- and 3-layer MLPs, both
    styles, per-tensor and per-channel, uint8/int8 activations)::

        DQ(b0) DQ(W0) DQ(b1) DQ(W1) ...              weight/bias DQs come first in node order
        Q(input) DQ  Gemm  Q DQ  Gemm  Q DQ          asymmetric activations: no Relu node
        Q(input) DQ  Gemm  Q DQ Relu Q DQ  Gemm  Q DQ    symmetric activations: Relu kept

    * Weights are stored already quantized (``fcI.weight_quantized``, int8 by default, same
      shape as the float weight) feeding a lone ``DequantizeLinear`` (no Q node); scales are
      float32, zero points have the weight type. Per tensor both are scalars (shape ``[]``);
      per channel both are ``[out]`` and the DQ has ``axis=0`` for Gemm(transB=1) weights
      ``[out, in]``, ``axis=1`` for ``[in, out]`` weights. int8 weights are symmetric by default
      (zero point 0).
    * Gemm biases are stored as **int32** ``fcI.bias_quantized`` with its own DQ; scale =
      input_scale * weight_scale (float32 shape ``[1]`` per tensor -- not a scalar -- or
      ``[out]`` per channel, DQ ``axis=0``), zero point int32 0 (shape ``[]`` / ``[out]``).
      The DQ's output keeps the original bias name (``fcI.bias``).
    * Activations: the graph input gets ``QuantizeLinear -> DequantizeLinear``; so does every
      layer output, including the final logits (the graph output is the last DQ's output,
      float32). Scale float32 ``[]``, zero point ``[]`` of the activation type. Asymmetric uint8
      after a Relu has zero point 0; symmetric int8 has zero point 0 everywhere.
    * Gemm stays Gemm (``transB=1``). ``style="matmul"``: pre-processing (ORT's basic
      optimisations, MatMulAddFusion) turns MatMul + Add into **Gemm** (``transA=0, transB=0``,
      node name ``fcI_matmul/MatMulAddFusion``, weight still ``[in, out]``), which then
      quantizes exactly like the gemm style (int32 bias). With ``preprocess=False`` MatMul and
      Add stay: the MatMul output gets its own Q/DQ pair, and the bias is quantized like an
      *activation* (activation type, e.g. uint8 with a nonzero zero point -- not int32).
    * Flatten / Reshape (``flatten_input``) stay at the front and take the *float* graph input;
      the first Q/DQ pair is on their output (``flatten_out``), not on the graph input.
    * Relu:
        - asymmetric activations (the default, uint8 or int8): the Relu node is **removed**; the
          Gemm now writes the Relu's output tensor (``reluI_out``) and the QuantizeLinear after
          it uses the Relu output's calibrated range (min 0, so uint8 zero point 0 / int8 zero
          point -128): the clamp at 0 is left to quantization's saturation.
        - ``symmetric_activations=True`` (or ``extra_options={"QDQKeepRemovableActivations":
          True}``): the Relu is **kept** as ``Gemm -> Q -> DQ -> Relu -> Q -> DQ``; the Q before
          it (on ``fcI_out``) is given the Relu output's range, so both Qs have the same scale
          and zero point.
        - a final Relu (``relu_last=True``) behaves the same way.
    * Pre-processing saves the model through ORT, which adds opset imports for all ORT domains
      (``ai.onnx.ml``, ``com.microsoft``, ...) although no node uses them; IR version is kept.
    """
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        quantize_static,
    )
    from onnxruntime.quantization.shape_inference import quant_pre_process

    act_q = _qtype(activation_type, "activation_type")
    w_q = _qtype(weight_type, "weight_type")
    calib = np.asarray(calib, dtype=np.float32)
    if calib.ndim < 2 or calib.shape[0] == 0:
        raise ValueError(f"quantize_qdq: calib must be [rows, ...] with at least one row, got "
                         f"{calib.shape}")
    input_name = model.graph.input[0].name
    batch_size = max(1, int(batch_size))

    class _Rows(CalibrationDataReader):
        def __init__(self):
            self._it = iter(range(0, calib.shape[0], batch_size))

        def get_next(self):
            start = next(self._it, None)
            if start is None:
                return None
            return {input_name: calib[start:start + batch_size]}

    opts: dict = {"ActivationSymmetric": bool(symmetric_activations)}
    if symmetric_weights is not None:
        opts["WeightSymmetric"] = bool(symmetric_weights)
    opts.update(extra_options or {})

    with tempfile.TemporaryDirectory(prefix="modelgen.") as tmp:
        work = Path(path_dir) if path_dir is not None else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        f_path, p_path, q_path = work / "float.onnx", work / "preprocessed.onnx", work / "qdq.onnx"
        onnx.save(model, f_path)
        if preprocess:
            quant_pre_process(str(f_path), str(p_path), skip_symbolic_shape=True)
        else:
            onnx.save(model, p_path)
        quantize_static(str(p_path), str(q_path), _Rows(), quant_format=QuantFormat.QDQ,
                        per_channel=per_channel, activation_type=act_q, weight_type=w_q,
                        calibrate_method=CalibrationMethod.MinMax, extra_options=opts)
        return onnx.load(str(q_path))


# ---------------------------------------------------------------------------------------------
# small conveniences for tests
# ---------------------------------------------------------------------------------------------

def run_model(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    """Run ``model`` on ``x`` (float32) with onnxruntime's CPU provider; return the first output.
    The session is hwgen's reference session (``hwgen.reference.reference_session_options``:
    the default optimisations, no int16 saturation of u8 x s8 products on CPUs without VNNI)."""
    import onnxruntime as ort

    from hwgen.reference import reference_session_options

    so = reference_session_options()
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: np.asarray(x, dtype=np.float32)})[0]


def op_sequence(model: onnx.ModelProto) -> list[str]:
    """The graph's node op types, in node order (e.g. ``['QuantizeLinear', 'DequantizeLinear',
    ...]``)."""
    return [n.op_type for n in model.graph.node]
