"""The committed MLPerf Tiny / TFC example models (examples/mlperf_tiny/make_models.py).

Cheap: loads each committed model with onnx, runs the checker, checks its test inputs, and runs
``hwgen inspect`` on it. Each model's problems (op and reason, with their counts) must be
exactly the ones recorded below, as examples/mlperf_tiny/README.md lists them: when hwgen
learns to map one of them (or stops mapping something), this test fails and the table here
and in the README must be updated on purpose. Needs neither torch nor a simulator.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest

from hwgen.inspect import inspect

EX = Path(__file__).resolve().parents[2] / "examples" / "mlperf_tiny"

NETS = {   # name: (input shape without the batch axis, output shape without it)
    "resnet8": ((3, 32, 32), (10,)),
    "dscnn": ((1, 49, 10), (12,)),
    "mobilenet_v1_025": ((3, 96, 96), (2,)),
    "autoencoder": ((640,), (640,)),
    "tfc": ((1, 28, 28), (10,)),
}
FORMS = ["", "_qdq", "_qdq_perchannel", "_qdq_int8", "_dynamo_qdq_perchannel"]
BN_FUSED = ["_bnfused_qdq", "_bnfused_qdq_perchannel"]     # the nets with BatchNorm1d only

# model file -> its problems as hwgen inspect reports them ((op, reason) -> count); every model
# not listed maps completely (BatchNormalization after a Gemm that onnxruntime quantized as an
# op of its own, and the new exporter's Reshape with allowzero=1, map too)
EXPECTED: dict[str, Counter] = {}

MODELS = [f"{net}{form}.onnx" for net in NETS for form in FORMS] + \
         [f"{net}{form}.onnx" for net in ("autoencoder", "tfc") for form in BN_FUSED]


def _dims(vi: onnx.ValueInfoProto) -> tuple:
    return tuple(d.dim_value if d.HasField("dim_value") else d.dim_param
                 for d in vi.type.tensor_type.shape.dim)


def test_every_committed_model_is_listed():
    assert sorted(p.name for p in EX.glob("*.onnx")) == sorted(MODELS)
    assert set(EXPECTED) <= set(MODELS)


@pytest.mark.parametrize("name", MODELS)
def test_model_checks_and_inspects(name):
    path = EX / name
    assert path.stat().st_size < 1_200_000
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)
    net = next(n for n in sorted(NETS, key=len, reverse=True) if name.startswith(n))
    in_shape, out_shape = NETS[net]
    assert [_dims(i)[1:] for i in model.graph.input] == [in_shape]
    assert [_dims(o)[1:] for o in model.graph.output] == [out_shape]
    quantized = name != f"{net}.onnx"
    assert any(n.op_type == "QuantizeLinear" for n in model.graph.node) == quantized

    # a fixed target (not a device's budget): the problems do not depend on it, and a
    # device-aware folding search would cost seconds per model
    rep = inspect(path, target_cycles=1024)
    assert rep.assumed == (not quantized)
    got = Counter((p.op, p.reason) for p in rep.problems)
    assert got == EXPECTED.get(name, Counter()), "\n".join(map(str, rep.problems))
    assert rep.ok == (name not in EXPECTED)
    assert rep.counts().get("mapped", 0) > 0


@pytest.mark.parametrize("net", sorted(NETS))
def test_test_inputs(net):
    in_shape, out_shape = NETS[net]
    with np.load(EX / f"{net}_test.npz") as z:
        x = z["input"]
        assert x.dtype == np.float32 and x.shape == (20,) + in_shape
        assert np.isfinite(x).all()
        if net == "autoencoder":
            assert set(z.files) == {"input"}
        else:
            y = z["label"]
            assert y.shape == (20,) and 0 <= y.min() and y.max() < out_shape[0]
