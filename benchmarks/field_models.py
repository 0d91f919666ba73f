"""Models as other people's tools write them (``examples/field/``): does each map, does
``hwgen verify`` pass, and at what interval and resources.

    python benchmarks/field_models.py [--count 64] [--simulator verilator]
        [--board ulx3s-85f] [--only STEMS]

For each model: the pattern it stands for, whether ``inspect`` maps every node (and which run
on the host), ``verify`` on the model's test inputs (RTL == golden; agreement with the
model's reference, onnxruntime or qonnx, at the hardware's output; with a host tail, the
whole model's output against the reference's: max |difference| and top-1 agreement), the
interval (cycles per frame) and the estimated LUT4 / flip-flops / DSP / block RAM tiles on
the board's family. Prints one Markdown table.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from hwgen import api
from hwgen.errors import HwgenError
from hwgen.inspect import inspect

FIELD = Path(__file__).resolve().parent.parent / "examples" / "field"

#: (pattern, model file in examples/field, its test inputs)
MODELS = [
    ("QONNX, domain onnx.brevitas not imported (FINN-era TFC w2a2)",
     "field_tfc_w2a2_legacy.onnx", "field_tfc_w2a2_legacy_test.npz"),
    ("QONNX, domain finn.custom_op.general not imported",
     "field_mlp_finn_domain.onnx", "field_mlp_finn_domain_test.npz"),
    ("bipolar graph input, ±1 weights and activations (TFC w1a1)",
     "field_tfc_w1a1_bipolar.onnx", "field_tfc_w1a1_bipolar_test.npz"),
    ("input annotated BINARY, no input quantizer (UNSW-NB15 MLP)",
     "field_unsw_annotated.onnx", "field_unsw_annotated_test.npz"),
    ("input annotated INT8, no input quantizer",
     "field_int8_annotated.onnx", "field_int8_annotated_test.npz"),
    ("float tail: last Gemm with a float bias, no quantizer after it",
     "field_float_tail.onnx", "field_float_tail_test.npz"),
    ("Softmax head (QONNX)", "field_softmax_head_qonnx.onnx",
     "field_softmax_head_qonnx_test.npz"),
    ("LogSoftmax head (QONNX)", "field_logsoftmax_head_qonnx.onnx",
     "field_logsoftmax_head_qonnx_test.npz"),
    ("qonnx channels_last Conv/BatchNormalization/MaxPool (ConvertToChannelsLastAndClean)",
     "field_cnn_channels_last.onnx", "field_cnn_channels_last_test.npz"),
    ("tf2onnx CNN: NHWC input Transpose, Transpose+Reshape before dense, Softmax",
     "field_keras_cnn_qdq.onnx", "field_keras_cnn_test.npz"),
    ("tf2onnx dense: BatchNormalization on [N, C, 1] (Unsqueeze/Squeeze), Softmax",
     "field_keras_dense_bn_qdq.onnx", "field_keras_dense_bn_test.npz"),
    ("tf2onnx dense: BatchNormalization as Mul and Add by per-channel constants",
     "field_keras_dense_muladd_qdq.onnx", "field_keras_dense_muladd_test.npz"),
    ("tf2onnx Conv1D: [N, L, C] input, BatchNormalization on [N, C, L], Softmax",
     "field_keras_conv1d_qdq.onnx", "field_keras_conv1d_test.npz"),
    ("tf2onnx unoptimized: Concat on the last axis, Resize with NHWC scales, Softmax",
     "field_keras_concat_upsample_qdq.onnx", "field_keras_concat_upsample_test.npz"),
    ("Flatten axis=0 at batch 1", "field_flatten_axis0_qdq.onnx",
     "field_flatten_axis0_test.npz"),
    ("PyTorch x.mean((2, 3)), TorchScript exporter", "field_torch_mean_ts_qdq.onnx",
     "field_torch_mean_ts_test.npz"),
    ("PyTorch x.mean((2, 3)), dynamo exporter, dynamic batch",
     "field_torch_mean_dynamo_qdq.onnx", "field_torch_mean_dynamo_test.npz"),
    ("PyTorch flatten + softmax, TorchScript exporter",
     "field_torch_flatten_softmax_ts_qdq.onnx", "field_torch_flatten_softmax_ts_test.npz"),
    ("PyTorch flatten + softmax, dynamo exporter, dynamic batch",
     "field_torch_flatten_softmax_dynamo_qdq.onnx",
     "field_torch_flatten_softmax_dynamo_test.npz"),
    ("PyTorch flatten + log_softmax, TorchScript exporter",
     "field_torch_flatten_logsoftmax_ts_qdq.onnx",
     "field_torch_flatten_logsoftmax_ts_test.npz"),
    ("PyTorch flatten + log_softmax, dynamo exporter, dynamic batch",
     "field_torch_flatten_logsoftmax_dynamo_qdq.onnx",
     "field_torch_flatten_logsoftmax_dynamo_test.npz"),
]


def _res(est: dict) -> str:
    r = {k: int(round(v)) for k, v in est["resources"]["ecp5"].items()}
    return f"{r['lut4']:,} / {r['ff']:,} / {r['dsp']} / {r['bram']}"


def row(pattern: str, model: Path, data: Path, count: int, simulator: str, board: str):
    rep = inspect(model, board=board)
    host = [r.op_type for r in rep.rows if r.status == "host"]
    maps = "yes" if rep.ok else f"no: {rep.problems[0]}"
    if not rep.ok:
        return [pattern, model.name, maps, "–", "–", "–", "–"]
    arrays = np.load(data)
    x = arrays[arrays.files[0]][:count]
    try:
        v = api.verify(model, x, simulator=simulator, board=board)
    except HwgenError as e:
        return [pattern, model.name, maps, f"error: {e}", "–", "–", "–"]
    verdict = ("PASS" if v.ok else "FAIL") + (
        f", {v.reference}: {100 * v.ort_identical_fraction:.1f} % identical, "
        f"max {v.ort_max_step_diff} steps")
    if v.host_tail is not None:
        t = v.host_tail
        verdict += (f"; output after {'+'.join(t.ops)} on the host: max |diff| "
                    f"{t.max_abs_diff:.2g}" + (f", top-1 {100 * t.top1_agreement:.0f} %"
                                                if t.top1_agreement is not None else ""))
    return [pattern, model.name, maps + (f" ({', '.join(host)} on the host)" if host else ""),
            verdict, str(v.estimate["cycles_per_frame"]), _res(v.estimate),
            f"{x.shape[0]}"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=64)
    ap.add_argument("--simulator", default="verilator")
    ap.add_argument("--board", default="ulx3s-85f")
    ap.add_argument("--only", default="", help="comma-separated model file stems to run")
    a = ap.parse_args()
    only = [s for s in a.only.split(",") if s]
    models = [m for m in MODELS if not only or any(m[1].startswith(s) for s in only)]
    head = ["pattern", "model", "maps", "verify", "interval", "LUT4 / FF / DSP / BRAM (ECP5)",
            "samples"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    t0 = time.monotonic()
    for pattern, model, data in models:
        print("| " + " | ".join(row(pattern, FIELD / model, FIELD / data, a.count,
                                     a.simulator, a.board)) + " |", flush=True)
    print(f"\n{len(models)} models in {time.monotonic() - t0:.0f} s")


if __name__ == "__main__":
    main()
