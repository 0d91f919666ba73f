"""``hwgen inspect`` and ``hwgen compile`` are one import walk with two policies: on every
model compile accepts, inspect must report the very layers, folding and estimates (cycles
per frame, latency, multipliers, memory bits, registers) that compile writes to its
manifest, layer by layer, block by block and in total.

Models: the quantized examples (QDQ, per channel, QOperator), the float examples quantized
with their calibration data first (``hwgen quantize``, as ``compile --calibration`` does),
and the QONNX test models (tests/qonnx_models.py; inspect used to read them as float models).
"""
from __future__ import annotations

from pathlib import Path

import onnx
import pytest

import hwgen
from hwgen.inspect import inspect
from hwgen.quantize import quantize

try:
    import qonnx_models as Q
except ImportError:  # run from the repository root
    from tests import qonnx_models as Q

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
QUANTIZED = sorted(p.name for p in EXAMPLES.glob("digits_*_q*.onnx"))
#: float examples and the calibration data they are quantized with
FLOAT = {"digits_mlp.onnx": "digits_test.npz", "digits_cnn.onnx": "digits_images_test.npz",
         "digits_resnet.onnx": "digits_images_test.npz"}
QONNX = {"qonnx-mlp-4bit": lambda: Q.mlp(4, 4), "qonnx-mlp-2bit": lambda: Q.mlp(2, 2),
         "qonnx-cnn-4bit": lambda: Q.cnn("4bit"), "qonnx-cnn-2bit": lambda: Q.cnn("2bit"),
         "qonnx-bipolar": lambda: Q.bipolar_mlp(batch=4)}
COST_KEYS = ("cycles", "latency", "multipliers", "memory_bits", "registers")


def test_every_example_model_is_covered():
    """Every example model is one of the cases below (a new example must be added)."""
    assert sorted(p.name for p in EXAMPLES.glob("*.onnx")) == sorted(QUANTIZED + list(FLOAT))


def _model(case: str, tmp_path: Path) -> Path:
    if case in QONNX:
        path = tmp_path / f"{case.replace('-', '_')}.onnx"
        onnx.save(QONNX[case]().model, str(path))
        return path
    if case in FLOAT:
        return quantize(EXAMPLES / case, EXAMPLES / FLOAT[case],
                        tmp_path / case.replace(".onnx", "_q.onnx"))
    return EXAMPLES / case


def _cost(d) -> dict:
    d = d if isinstance(d, dict) else d.as_dict()
    return {k: d[k] for k in COST_KEYS}


@pytest.mark.parametrize("case", QUANTIZED + sorted(FLOAT) + sorted(QONNX))
def test_inspect_agrees_with_compile(case, tmp_path):
    model = _model(case, tmp_path)
    rep = inspect(model)
    manifest = hwgen.compile(model, tmp_path / "out").manifest
    # the same board chosen (neither is told one), for the same reason, the same fit
    assert rep.fit.as_dict() == manifest["target"] and rep.fit.choice

    # quantized models are read as they are, every node maps
    assert not rep.assumed
    assert rep.ok, [str(p) for p in rep.problems]
    assert rep.estimate.complete

    # the same layers, in the same order, with the same folding
    layers = list(manifest["folding"])
    assert list(rep.estimate.ops) == layers
    assert layers, "compile mapped no layer"
    for name in layers:
        f = rep.estimate.ops[name].folding
        assert f.as_dict() == manifest["folding"][name], name
    mapped = [r.node for r in rep.rows if r.status == "mapped"]
    assert mapped == layers

    # per layer: the same blocks with the same estimates, and their sum
    blocks = manifest["layers"]
    for name in layers:
        want = [(b["block"], _cost(b["estimate"])) for b in blocks if b.get("layer") == name]
        e = rep.estimate.ops[name]
        got = [(b.kind, _cost(b.cost)) for b in e.blocks]
        assert got == want, name
        row = next(r for r in rep.rows if r.node == name)
        if not want:    # on the layer-sequential engine, whose one block is the first layer's
            assert rep.fit.method.startswith("layer-sequential engine")
            assert row.cost is None and e.cost is None
            continue
        assert _cost(row.cost.as_dict()) == _cost(e.cost.as_dict())
        assert row.cost.cycles == max(c["cycles"] for _, c in want)
        for k in ("latency", "multipliers", "memory_bits", "registers"):
            assert getattr(row.cost, k) == sum(c[k] for _, c in want), (name, k)

    # plumbing (FIFOs, forks, width converters) and the totals
    want_plumbing = sorted((b["block"], tuple(_cost(b["estimate"]).values()))
                           for b in blocks if not b.get("layer"))
    got_plumbing = sorted((b.kind, tuple(_cost(b.cost).values()))
                          for b in rep.estimate.plumbing)
    assert got_plumbing == want_plumbing
    assert len(rep.estimate.blocks) == len(blocks)
    assert rep.estimate.totals == manifest["estimate"]
