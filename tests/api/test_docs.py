"""The documentation stays true: docs/cli.md is what the argument parser generates, the
files hwgen writes follow the JSON Schemas in docs/schemas/, the README keeps its CI hooks
and its links point at files that exist."""
from __future__ import annotations

import copy
import json
import re

import jsonschema
import pytest
from conftest import ROOT

import hwgen
from hwgen import clidoc

SCHEMAS = ROOT / "docs" / "schemas"
EX = ROOT / "examples"
MLP = EX / "digits_mlp_qdq.onnx"


def test_cli_reference_is_generated_from_the_parser():
    doc = ROOT / "docs" / "cli.md"
    assert doc.read_text() == clidoc.markdown(), (
        f"docs/cli.md is out of date with hwgen's argument parser: run `{clidoc.REGENERATE}`")


def test_cli_reference_lists_every_command():
    text = clidoc.markdown()
    for cmd in ("compile", "simulate", "verify", "build", "run", "quantize", "inspect",
                "testbench", "cache", "boards"):
        assert f"## `hwgen {cmd}`" in text
    assert "hwgen compile MODEL -o DIR " in text


def _validator(name: str):
    schema = json.loads((SCHEMAS / name).read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _errors(v, doc) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message[:300]}"
            for e in sorted(v.iter_errors(doc), key=lambda e: list(e.absolute_path))]


FOLDS = {
    "spram": {n: {"pe": 1, "simd": 1, "spram": True} for n in ("fc0", "fc1", "fc2")},
    "sequential": {n: {"pe": 1, "simd": 1, "sequential": True} for n in ("fc0", "fc1", "fc2")},
}


@pytest.mark.parametrize("model, opts", [
    (MLP, {}),                                           # searched for the default board
    (MLP, {"fold": "spram", "device": "ice40-up5k", "ip_xact": True}),   # weight-load port
    (MLP, {"fold": "sequential", "device": "ice40-up5k"}),               # one engine
    (EX / "field" / "field_logsoftmax_head_qonnx.onnx", {}),             # a host tail
    (EX / "finn" / "tfc-w2a2.onnx", {}),                # thresholds, input preprocessing
], ids=["mlp", "mlp-spram", "mlp-sequential", "host-tail", "finn-tfc"])
def test_manifest_follows_its_schema(tmp_path, model, opts):
    opts = dict(opts)
    if "fold" in opts:
        fold = tmp_path / "fold.json"
        fold.write_text(json.dumps(FOLDS[opts["fold"]]))
        opts["fold"] = str(fold)
    res = hwgen.compile(model, tmp_path / "d", jobs=1, **opts)
    manifest = json.loads((res.out_dir / "manifest.json").read_text())
    v = _validator("manifest.schema.json")
    assert not _errors(v, manifest), (
        "manifest.json no longer follows docs/schemas/manifest.schema.json; update the "
        "schema and docs/formats.md: " + "; ".join(_errors(v, manifest)))


def test_manifest_schema_rejects_what_hwgen_never_writes(tmp_path):
    res = hwgen.compile(MLP, tmp_path / "d", jobs=1)
    good = json.loads((res.out_dir / "manifest.json").read_text())
    v = _validator("manifest.schema.json")
    for path, value in ((("version",), 1), (("files", "design.npz"), "abc"),
                        (("input", "element_type"), "float32"),
                        (("folding", "fc0", "pe"), 0), (("unknown_key",), 1),
                        (("estimate", "cycles_per_frame"), "many")):
        bad = copy.deepcopy(good)
        d = bad
        for k in path[:-1]:
            d = d[k]
        d[path[-1]] = value
        assert _errors(v, bad), path


def test_build_json_example_follows_its_schema():
    """The stored example (a real `hwgen build --board icebreaker` of the digits MLP) is
    what docs/formats.md shows."""
    v = _validator("build.schema.json")
    doc = json.loads((SCHEMAS / "build.example.json").read_text())
    assert not _errors(v, doc), _errors(v, doc)
    bad = copy.deepcopy(doc)
    del bad["clock"]["timing_met"]
    assert _errors(v, bad)


def _readme_command(tag: str) -> str:
    """What .ci/run reads: the first line of the code block after <!-- ci:TAG -->."""
    lines = (ROOT / "README.md").read_text().splitlines()
    k = lines.index(f"<!-- ci:{tag} -->")
    while not lines[k].startswith("```"):
        k += 1
    return lines[k + 1]


def test_readme_keeps_the_ci_hooks():
    assert _readme_command("install") == 'pip install ".[test]"'
    assert _readme_command("example").startswith("hwgen verify examples/digits_mlp_qdq.onnx")
    assert _readme_command("test") == "pytest"
    assert len((ROOT / "README.md").read_text().splitlines()) <= 200


@pytest.mark.parametrize("doc", ["README.md"] + sorted(
    str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")))
def test_relative_links_resolve(doc):
    path = ROOT / doc
    bad = []
    for target in re.findall(r"\]\(([^)\s]+)\)", path.read_text()):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        file = target.split("#")[0]
        if file and not (path.parent / file).exists():
            bad.append(target)
    assert not bad, f"{doc}: links to missing files: {bad}"
