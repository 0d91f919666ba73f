"""Run each ``field_*.onnx`` with the qonnx reference (``execute_onnx``) on its
``<name>_test.npz``, one sample at a time (the models have batch 1), and print
``hwgen inspect``'s first problem line.

The reference runs on a cleaned copy: quantizer nodes of the legacy domains (``onnx.brevitas``,
``finn.custom_op.general``) are moved to ``qonnx.custom_op.general`` with that domain in
``opset_import``, then qonnx's ``cleanup_model`` and shape inference. The committed files are
not changed.

    python examples/field/check_models.py [model.onnx ...]
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from qonnx.core.modelwrapper import ModelWrapper
from qonnx.core.onnx_exec import execute_onnx
from qonnx.transformation.infer_shapes import InferShapes
from qonnx.util.cleanup import cleanup_model

HERE = Path(__file__).parent
QDOMAIN = "qonnx.custom_op.general"


def reference_model(path: Path) -> ModelWrapper:
    m = onnx.load(str(path))
    for n in m.graph.node:
        if n.op_type in ("Quant", "BipolarQuant", "Trunc"):
            n.domain = QDOMAIN
    if not any(o.domain == QDOMAIN for o in m.opset_import):
        m.opset_import.append(onnx.helper.make_opsetid(QDOMAIN, 1))
    w = cleanup_model(ModelWrapper(m))
    return w.transform(InferShapes())


def run_reference(path: Path) -> np.ndarray:
    w = reference_model(path)
    iname, oname = w.graph.input[0].name, w.graph.output[0].name
    x = np.load(str(path).replace(".onnx", "_test.npz"))
    x = x[onnx.load(str(path)).graph.input[0].name]
    outs = [execute_onnx(w, {iname: x[i:i + 1]})[oname] for i in range(len(x))]
    return np.concatenate(outs)


def inspect_first_problem(path: Path) -> str:
    """The line after ``problems (n):`` (or ``problems: none ...``) of ``hwgen inspect``."""
    r = subprocess.run(["hwgen", "inspect", str(path)], capture_output=True, text=True)
    lines = (r.stdout + r.stderr).splitlines()
    for i, ln in enumerate(lines):
        if ln.startswith("problems"):
            if ln.startswith("problems ("):
                return f"{ln.strip()} {lines[i + 1].strip()}"
            return ln.strip()
    return f"rc={r.returncode}: " + next((ln for ln in reversed(lines) if ln.strip()), "")


def main():
    paths = [Path(p) for p in sys.argv[1:]] or sorted(HERE.glob("field_*.onnx"))
    for p in paths:
        try:
            y = run_reference(p)
            ref = f"ok, output {y.shape} {y.dtype} range [{y.min():.4g}, {y.max():.4g}]"
        except Exception as e:  # noqa: BLE001 -- report and go on
            ref = f"FAILED: {type(e).__name__}: {e}"
        print(f"{p.name}\n  qonnx reference: {ref}\n  hwgen inspect: {inspect_first_problem(p)}")


if __name__ == "__main__":
    main()
