"""Export every example network with both PyTorch exporters and quantize both the same way.

Optional dependencies: PyTorch and onnxscript (``pip install ".[torch]"``: ``torch==2.13.0``,
the CPU build), plus numpy, onnx and onnxruntime which hwgen already needs. Nothing is
trained and nothing is downloaded: each network's weights are read from its committed float
model (the TorchScript export with BatchNormalization kept, whose initializers carry the
PyTorch parameter names), so both exports hold the same trained weights.

For each network it

1. builds the PyTorch module (the classes of ``train_digits_cnn.py`` and
   ``mlperf_tiny/make_models.py``; for the digits MLP, which scikit-learn trained, a
   ``Linear-ReLU-Linear-ReLU-Linear`` sequence) and loads the float model's weights into it;
2. exports it with the TorchScript exporter (``dynamo=False``, opset 17) and with the new
   one (``dynamo=True``: torch.export and onnxscript, opset 20), dynamic batch axis;
3. quantizes both with ``onnxruntime.quantization.quantize_static`` after
   ``quant_pre_process``, QDQ, uint8 asymmetric activations, int8 symmetric per-tensor
   weights, MinMax calibration, on the same calibration inputs;
4. imports both quantized models with hwgen and prints whether they map to the same integer
   graph (``IntGraph.canonical``), and how far onnxruntime's outputs of the two differ.

Calibration inputs: the digits networks calibrate on the first 200 images of their committed
test split (``digits_test.npz``, ``digits_images_test.npz``; the training split needs
scikit-learn), the MLPerf Tiny ones on ``make_models.py``'s 64 synthetic calibration inputs.

Files written (``NAME_ts_qdq.onnx``, ``NAME_dynamo_qdq.onnx``) go to ``examples/exporters/``
(or ``--out DIR``); an MLPerf Tiny network's TorchScript form is not kept when it is
``mlperf_tiny/NAME_qdq.onnx`` byte for byte (the same export, weights and calibration).
Without names it writes the committed ones (the three digits networks, ResNet-8 and DS-CNN);
``--all`` exports all eight networks (MobileNet's and the autoencoder's files are 300 kB
each: not committed; the MLPerf Tiny folder holds their per-channel pairs)::

    nice -n 10 python examples/export_both.py                  # the committed files
    nice -n 10 python examples/export_both.py --all --out /tmp/both

It runs single-threaded; with the same torch / onnxscript / onnx / onnxruntime versions a
rerun writes byte-identical files.
"""
from __future__ import annotations

import argparse
import importlib.util
import logging
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from numpy.testing import assert_allclose
from onnx import numpy_helper
from onnxruntime.quantization import QuantType

try:
    import torch
    from torch import nn
except ImportError:  # pragma: no cover - optional dependency
    sys.exit("export_both.py needs PyTorch: pip install '.[torch]'")

from hwgen.dataflow.importer import load_model, to_int_graph
from hwgen.dataflow.intgraph import canonical_close

HERE = Path(__file__).resolve().parent
OUT = HERE / "exporters"
N_CALIB_DIGITS = 200


def _module(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


MM = _module(HERE / "mlperf_tiny" / "make_models.py")   # networks, exporters, quantizer
CNN = _module(HERE / "train_digits_cnn.py")              # the digits CNN and ResNet


class DigitsMLP(nn.Module):
    """The digits MLP (64-32-32-10, ReLU) as ``train_digits_mlp.py`` builds it by hand."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(),
                                 nn.Linear(32, 10))

    def forward(self, x):
        return self.net(x)


# name: (module class, float model, its input shape, output name, parameter renaming)
MLP_NAMES = {"fc0.weight": "net.0.weight", "fc0.bias": "net.0.bias",
             "fc1.weight": "net.2.weight", "fc1.bias": "net.2.bias",
             "fc2.weight": "net.4.weight", "fc2.bias": "net.4.bias"}
NETS = {
    "digits_mlp": (DigitsMLP, HERE / "digits_mlp.onnx", (64,), "logits", MLP_NAMES),
    "digits_cnn": (CNN.DigitsCNN, HERE / "digits_cnn.onnx", (1, 8, 8), "logits", {}),
    "digits_resnet": (CNN.DigitsResNet, HERE / "digits_resnet.onnx", (1, 8, 8), "logits", {}),
    **{name: (spec["cls"], HERE / "mlperf_tiny" / f"{name}.onnx", spec["shape"], spec["out"],
              {})
       for name, spec in MM.NETS.items()},
}
# onnxruntime's quant_pre_process folds BatchNormalization into a Conv but not into a Gemm, so
# the TorchScript export's BatchNorm1d after a Linear is quantized as an op of its own; the
# new exporter folds it into the Gemm itself: two different quantized models
BN_AFTER_GEMM = {"autoencoder", "tfc"}
COMMITTED = ["digits_mlp", "digits_cnn", "digits_resnet", "resnet8", "dscnn"]


def load_weights(model: nn.Module, float_path: Path, rename: dict[str, str]) -> None:
    """The float model's initializers into the module's parameters and buffers; every one
    of them must be set (BatchNorm's ``num_batches_tracked`` aside)."""
    onnx_model = onnx.load(str(float_path))
    state = {rename.get(i.name, i.name): torch.from_numpy(numpy_helper.to_array(i).copy())
             for i in onnx_model.graph.initializer}
    missing, _ = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.endswith("num_batches_tracked")]
    if missing:
        raise SystemExit(f"{float_path.name}: no initializer for {', '.join(missing)}")
    model.eval()


def calibration(name: str) -> tuple[np.ndarray, np.ndarray]:
    """(calibration inputs, test inputs) of a network."""
    if name.startswith("digits_"):
        npz = HERE / ("digits_test.npz" if name == "digits_mlp" else "digits_images_test.npz")
        with np.load(npz) as z:
            x = z["input"].astype(np.float32)
        return x[:N_CALIB_DIGITS], x[N_CALIB_DIGITS:]
    x_cal, _ = MM.data_for(name, MM.N_CALIB, MM.SEED + 2)
    x_te, _ = MM.data_for(name, MM.N_TEST, MM.SEED + 3)
    return x_cal, x_te


def int_graph(path: Path):
    return to_int_graph(load_model(path))


def build(name: str, out: Path) -> bool:
    cls, float_path, shape, out_name, rename = NETS[name]
    torch.manual_seed(0)
    model = cls()
    load_weights(model, float_path, rename)
    x_cal, x_te = calibration(name)
    with torch.no_grad():
        ref = model(torch.from_numpy(x_te)).numpy()
    assert_allclose(MM.run(float_path, x_te), ref, atol=1e-4)      # the same weights
    paths = {}
    with tempfile.TemporaryDirectory(prefix="export_both.") as tmp:
        for kind, export in (("ts", MM.export_torchscript), ("dynamo", MM.export_dynamo)):
            f_path = Path(tmp) / f"{name}_{kind}.onnx"
            export(model, shape, out_name, f_path)
            paths[kind] = out / f"{name}_{kind}_qdq.onnx"
            MM.quantize(f_path, paths[kind], x_cal, False, QuantType.QUInt8)
            ops = sorted({n.op_type for n in onnx.load(str(f_path)).graph.node})
            print(f"  {kind:7s} float ops: {' '.join(ops)}")
    y_ts, y_dyn = (MM.run(paths[k], x_te) for k in ("ts", "dynamo"))
    ig_ts, ig_dyn = (int_graph(paths[k]).canonical() for k in ("ts", "dynamo"))
    same = "exactly" if ig_ts == ig_dyn else \
        "up to the float scales' last bits" if canonical_close(ig_ts, ig_dyn) else None
    print(f"  same integer graph: {same or 'no'}; onnxruntime outputs differ by at most "
          f"{float(np.abs(y_ts - y_dyn).max()):.3g}")
    # the MLPerf Tiny folder holds the TorchScript export's QDQ form already: the same bytes
    twin = HERE / "mlperf_tiny" / f"{name}_qdq.onnx"
    if twin.exists() and twin.read_bytes() == paths["ts"].read_bytes():
        paths["ts"].unlink()
        print(f"  {paths['ts'].name} is mlperf_tiny/{twin.name} byte for byte: not kept")
        del paths["ts"]
    for p in paths.values():
        print(f"  wrote {p} ({p.stat().st_size} bytes)")
    return same is not None


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help=f"networks (default: {' '.join(COMMITTED)})")
    ap.add_argument("--all", action="store_true", help="every network")
    ap.add_argument("--out", type=Path, default=OUT, help="output folder")
    args = ap.parse_args(argv)
    names = list(NETS) if args.all else (args.names or COMMITTED)
    unknown = [n for n in names if n not in NETS]
    if unknown:
        sys.exit(f"unknown network(s) {', '.join(unknown)}; choose from {', '.join(NETS)}")
    logging.getLogger().setLevel(logging.ERROR)   # quantize_static's advisory warnings
    logging.getLogger("torch").setLevel(logging.ERROR)   # "torchvision is not installed"
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    torch.use_deterministic_algorithms(True)
    args.out.mkdir(parents=True, exist_ok=True)
    differ = []
    for name in names:
        print(name)
        if not build(name, args.out) and name not in BN_AFTER_GEMM:
            differ.append(name)
    if differ:
        sys.exit(f"different integer graphs: {', '.join(differ)}")


if __name__ == "__main__":
    main(sys.argv[1:])
