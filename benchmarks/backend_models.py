"""Every model of the onnx package's ``backend/test/data/pytorch-converted`` through hwgen.

For each model (IR 3, opset 6 or 12, as PyTorch exported them long ago): quantize it with
``hwgen.quantize`` (onnxruntime's quantize_static, QDQ, uint8 activations, int8 weights,
calibrated on standard-normal inputs of the model's input shape) and run ``hwgen.verify``
on other standard-normal inputs (RTL in Amaranth's simulator, or Verilator) against the
golden model and onnxruntime on the quantized model. The table says, per model, whether it
verified (with the agreement numbers) or where and why hwgen refused it.

Where the agreement with onnxruntime is below 99.9 %, the model is verified a second time
quantized with symmetric int8 activations (zero point 0): a lone AveragePool gets its
input's scale and zero point from onnxruntime, and with an even divisor many exact results
are rounding ties that onnxruntime's QLinearAveragePool rounds with the zero point added
(hwgen rounds half to even, see tests/blocks/test_pool.py); with zero point 0 both agree.

    python benchmarks/backend_models.py [--simulator amaranth|verilator] [--count N]
                                        [--calibration N] [--target-cycles N] [--only TEXT]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import hwgen  # noqa: E402
from hwgen.errors import HwgenError  # noqa: E402
from hwgen.quantize import quantize  # noqa: E402

BACKEND = Path(onnx.__file__).parent / "backend" / "test" / "data" / "pytorch-converted"


def _input(model: onnx.ModelProto):
    inits = {t.name for t in model.graph.initializer}
    inp = [i for i in model.graph.input if i.name not in inits][0]
    tt = inp.type.tensor_type
    return [d.dim_value for d in tt.shape.dim], onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)


def run(name: str, simulator: str, count: int, n_cal: int, target_cycles: int,
        work: Path) -> dict:
    path = BACKEND / name / "model.onnx"
    m = onnx.load(str(path))
    shape, dtype = _input(m)
    row = {"model": name, "input": "x".join(str(d) for d in shape) + f" {np.dtype(dtype).name}",
           "ops": ",".join(dict.fromkeys(n.op_type for n in m.graph.node)),
           "opset": max(o.version for o in m.opset_import if o.domain in ("", "ai.onnx"))}
    size = int(np.prod(shape[1:])) if len(shape) > 1 else 1
    batch = shape[0] if shape and shape[0] > 0 else 1
    rng = np.random.default_rng(0)
    cal = rng.standard_normal((max(batch, min(n_cal, 2_000_000 // size)), *shape[1:]))
    n_x = batch * -(-min(count, max(1, 200_000 // size)) // batch)
    x = rng.standard_normal((n_x, *shape[1:])).astype(np.float32)
    t0 = time.time()
    stage = "quantize"

    def short(e):
        return str(e).replace(str(path), name)

    try:
        q = quantize(path, cal.astype(np.float32), work / f"{name}.q.onnx")
        stage = "compile/verify"
        rep = hwgen.verify(q, x, simulator=simulator, target_cycles=target_cycles)
        row.update(status="verified" if rep.rtl_equals_golden else "FAILED",
                   samples=rep.samples, rtl_golden=rep.rtl_equals_golden,
                   identical=rep.ort_identical_fraction, max_step=rep.ort_max_step_diff,
                   top1=rep.top1_agreement if rep.sim.outputs.ndim == 2 else None)
        if rep.ort_identical_fraction < 0.999:
            q0 = quantize(path, cal.astype(np.float32), work / f"{name}.s.onnx",
                          symmetric=True, activation_type="int8")
            r0 = hwgen.verify(q0, x, simulator=simulator, target_cycles=target_cycles)
            row["symmetric_int8"] = (r0.rtl_equals_golden, r0.ort_identical_fraction,
                                     r0.ort_max_step_diff)
    except HwgenError as e:
        row.update(status=f"refused ({stage})", reason=short(e))
    except Exception as e:  # a crash is a bug: show it
        row.update(status="CRASH", reason=f"{stage}: {type(e).__name__}: {short(e)}",
                   trace=traceback.format_exc())
    row["seconds"] = time.time() - t0
    return row


def describe(r: dict) -> str:
    if "reason" in r:
        return r["reason"]
    s = (f"RTL == golden: {'yes' if r['rtl_golden'] else 'NO'} ({r['samples']} samples); "
         f"vs onnxruntime: {100 * r['identical']:.3f} % identical, max {r['max_step']} step")
    if r.get("top1") is not None:
        s += f", top-1 {100 * r['top1']:.1f} %"
    if "symmetric_int8" in r:
        ok, ident, step = r["symmetric_int8"]
        s += (f"; quantized with symmetric int8 activations (zero point 0): RTL == golden "
              f"{'yes' if ok else 'NO'}, {100 * ident:.3f} % identical, max {step} step")
    return s


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--simulator", choices=("amaranth", "verilator"), default="amaranth")
    ap.add_argument("--count", type=int, default=20, help="test inputs per model (default 20)")
    ap.add_argument("--calibration", type=int, default=32,
                    help="calibration inputs per model (default 32)")
    ap.add_argument("--target-cycles", type=int, default=64)
    ap.add_argument("--only", help="models whose name contains TEXT")
    args = ap.parse_args(argv)
    if not BACKEND.is_dir():
        print(f"no backend test data at {BACKEND}", file=sys.stderr)
        return 2
    names = sorted(p.name for p in BACKEND.iterdir() if (p / "model.onnx").is_file())
    if args.only:
        names = [n for n in names if args.only in n]
    rows = []
    with tempfile.TemporaryDirectory(prefix="hwgen-backend-") as tmp:
        for n in names:
            r = run(n, args.simulator, args.count, args.calibration, args.target_cycles,
                    Path(tmp))
            rows.append(r)
            print(f"{n}: {r['status']} ({r['seconds']:.1f} s)", file=sys.stderr, flush=True)
    print(f"onnx {onnx.__version__} backend/test/data/pytorch-converted: {len(rows)} models; "
          f"simulator {args.simulator}, {args.count} test inputs, {args.calibration} "
          f"calibration inputs (standard normal), target cycles {args.target_cycles}\n")
    print("| model | input | opset | ops | status | result or reason |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['input']} | {r['opset']} | {r['ops']} | {r['status']} | "
              f"{describe(r).replace('|', '/')} |")
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    print("\n" + ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())))
    for r in rows:
        if "trace" in r:
            print(f"\n{r['model']}:\n{r['trace']}", file=sys.stderr)
    return 1 if any(r["status"] in ("FAILED", "CRASH") for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
