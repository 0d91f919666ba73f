"""The ``hwgen`` command on bad input: one line on stderr, exit code 2, no traceback, and no
half-written output (compile writes to a temporary folder, then renames it).

Every test runs the real console command in a subprocess (the ``hwgen`` script installed next
to the Python running the tests, else ``python -m hwgen.cli``). Broken models are built by
editing the example model's ModelProto and serializing it without running the checker.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import run_hwgen as hwgen
from conftest import save_model as save
from onnx import TensorProto, helper

from hwgen import __version__ as hwgen_version

try:  # tests/ on sys.path (pyproject.toml: pytest's pythonpath) ...
    from modelgen import float_mlp, random_mlp
except ImportError:  # ... or tests/ imported as a package
    from tests.modelgen import float_mlp, random_mlp

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
QDQ_MODEL = EXAMPLES / "digits_mlp_qdq.onnx"
TEST_NPZ = EXAMPLES / "digits_test.npz"
N_IN = 64          # digits: input [N, 64], output [N, 10]
N_OUT = 10


# ------------------------------------------------------------------------------- helpers

def assert_error(p: subprocess.CompletedProcess, *facts: str, nocase: tuple[str, ...] = ()) -> str:
    """Exit code 2, exactly one stderr line ``hwgen: error: ...`` holding every fact (exact
    case) and every ``nocase`` word (any case); no traceback anywhere. Returns the message."""
    shown = f"exit code {p.returncode}\n--- stderr ---\n{p.stderr}--- stdout ---\n{p.stdout}"
    assert "Traceback" not in p.stderr and "Traceback" not in p.stdout, shown
    assert p.returncode == 2, shown
    assert p.stderr.startswith("hwgen: error: "), shown
    assert p.stderr.endswith("\n") and p.stderr.count("\n") == 1, \
        f"stderr is not exactly one line:\n{shown}"
    msg = p.stderr[len("hwgen: error: "):-1]
    assert msg.strip(), shown
    for f in facts:
        assert f in msg, f"{f!r} missing from the message:\n{shown}"
    for w in nocase:
        assert w.lower() in msg.lower(), f"{w!r} missing from the message:\n{shown}"
    return msg


def assert_no_output_dir(out: Path):
    """``out`` was not created and no temporary folder of it was left beside it."""
    assert not out.exists(), f"{out} exists after a failed compile: {_listing(out)}"
    if out.parent.exists():
        leftovers = [q.name for q in out.parent.iterdir() if q.name.startswith(f".{out.name}.")]
        assert not leftovers, f"temporary leftovers in {out.parent}: {leftovers}"


def assert_no_output_file(y: Path):
    assert not y.exists(), f"{y} was written although the command failed"
    if y.parent.exists():
        leftovers = [q.name for q in y.parent.iterdir() if q.name.startswith(f".{y.name}.")]
        assert not leftovers, f"temporary leftovers in {y.parent}: {leftovers}"


def _listing(d: Path):
    return sorted(q.name for q in d.iterdir()) if d.is_dir() else "(a file)"


def base_model() -> onnx.ModelProto:
    return onnx.load(str(QDQ_MODEL))


def node(model: onnx.ModelProto, name: str) -> onnx.NodeProto:
    for n in model.graph.node:
        if n.name == name:
            return n
    raise KeyError(name)


def compile_error(tmp_path: Path, model: Path, *facts, nocase=(), extra=()) -> str:
    out = tmp_path / "build" / "out"
    p = hwgen("compile", model, "-o", out, *extra, cwd=tmp_path)
    msg = assert_error(p, *facts, nocase=nocase)
    assert_no_output_dir(out)
    return msg


# ---------------------------------------------------------------- compile: the model file

def test_compile_text_file(tmp_path):
    m = tmp_path / "notes.onnx"
    m.write_text("this is a text file, not an ONNX model\n")
    compile_error(tmp_path, m, "notes.onnx", nocase=("onnx",))


def test_compile_random_bytes(tmp_path):
    m = tmp_path / "noise.onnx"
    m.write_bytes(np.random.default_rng(0).bytes(4096))
    compile_error(tmp_path, m, "noise.onnx", nocase=("onnx",))


def test_compile_truncated_model(tmp_path):
    data = QDQ_MODEL.read_bytes()
    m = tmp_path / "half.onnx"
    m.write_bytes(data[: len(data) // 2])
    compile_error(tmp_path, m, "half.onnx", nocase=("truncated",))


def test_compile_empty_file(tmp_path):
    m = tmp_path / "empty.onnx"
    m.write_bytes(b"")
    compile_error(tmp_path, m, "empty.onnx", nocase=("empty",))


def test_compile_missing_file(tmp_path):
    compile_error(tmp_path, tmp_path / "nowhere.onnx", "nowhere.onnx", nocase=("not found",))


def test_compile_directory_as_model(tmp_path):
    d = tmp_path / "model_dir.onnx"
    d.mkdir()
    compile_error(tmp_path, d, "model_dir.onnx", nocase=("directory",))


# ------------------------------------------------------------ compile: the model's content

@pytest.mark.parametrize("op, attrs", [("Sin", {}), ("Erf", {})])
def test_compile_unsupported_op_on_output_path(tmp_path, op, attrs):
    """An op hwgen maps neither in hardware nor on the host (a Softmax there runs on the
    host: tests/e2e/test_field_models.py)."""
    m = base_model()
    m.graph.node.append(helper.make_node(op, ["logits"], ["probs"], name=f"head_{op.lower()}",
                                         **attrs))
    m.graph.output[0].name = "probs"
    path = save(m, tmp_path / "unsupported.onnx")
    compile_error(tmp_path, path, f"head_{op.lower()}", f"'{op}'", nocase=("not supported",))


def test_compile_unknown_op(tmp_path):
    m = base_model()
    m.graph.node.append(helper.make_node("Frobnicate", ["logits"], ["probs"], name="frob"))
    m.graph.output[0].name = "probs"
    path = save(m, tmp_path / "unknown_op.onnx")
    compile_error(tmp_path, path, "unknown_op.onnx", "frob", "Frobnicate")


def test_compile_opset_too_new(tmp_path):
    m = base_model()
    for imp in m.opset_import:
        if imp.domain in ("", "ai.onnx"):
            imp.version = 99
    path = save(m, tmp_path / "opset99.onnx")
    compile_error(tmp_path, path, "opset99.onnx", "99", nocase=("opset",))


def test_compile_ir_version_too_new(tmp_path):
    m = base_model()
    m.ir_version = 99
    path = save(m, tmp_path / "ir99.onnx")
    compile_error(tmp_path, path, "ir99.onnx", "99", "IR")


def test_compile_cycle(tmp_path):
    m = base_model()
    # fc0 now reads the output of fc1's requantization: fc0 → ... → fc1 → ... → fc0
    node(m, "fc0").input[0] = "relu1_out_DequantizeLinear_Output"
    path = save(m, tmp_path / "cycle.onnx")
    compile_error(tmp_path, path, "cycle.onnx", "fc0", "fc1", nocase=("cycle",))


def test_compile_self_loop(tmp_path):
    m = base_model()
    n = node(m, "relu0_out_QuantizeLinear")
    n.input[0] = n.output[0]
    path = save(m, tmp_path / "selfloop.onnx")
    compile_error(tmp_path, path, "selfloop.onnx", "relu0_out_QuantizeLinear", nocase=("cycle",))


def test_compile_value_defined_twice(tmp_path):
    m = base_model()
    node(m, "fc1").output[0] = "relu0_out"      # fc0 already defines relu0_out
    path = save(m, tmp_path / "twice.onnx")
    compile_error(tmp_path, path, "twice.onnx", "'relu0_out'", "fc0", "fc1",
                  nocase=("twice",))


def test_compile_missing_initializer(tmp_path):
    m = base_model()
    keep = [t for t in m.graph.initializer if t.name != "fc1.weight_scale"]
    del m.graph.initializer[:]
    m.graph.initializer.extend(keep)
    path = save(m, tmp_path / "noinit.onnx")
    compile_error(tmp_path, path, "noinit.onnx", "'fc1.weight_scale'",
                  "fc1.weight_DequantizeLinear", nocase=("not defined",))


def _externalize(m: onnx.ModelProto, tensor: str, location: str) -> bytes:
    """Move initializer ``tensor`` to external data at ``location``; return its bytes."""
    for t in m.graph.initializer:
        if t.name == tensor:
            raw = t.raw_data
            t.ClearField("raw_data")
            t.data_location = TensorProto.EXTERNAL
            for k, v in (("location", location), ("offset", "0"), ("length", str(len(raw)))):
                e = t.external_data.add()
                e.key, e.value = k, v
            return raw
    raise KeyError(tensor)


def test_compile_external_data_dotdot(tmp_path):
    m = base_model()
    raw = _externalize(m, "fc0.weight_quantized", "../weights.bin")
    (tmp_path / "weights.bin").write_bytes(raw)         # exists, but outside the model folder
    path = save(m, tmp_path / "model" / "ext.onnx")
    compile_error(tmp_path, path, "ext.onnx", "../weights.bin", "fc0.weight_quantized")


def test_compile_external_data_absolute(tmp_path):
    m = base_model()
    outside = tmp_path / "weights.bin"
    outside.write_bytes(_externalize(m, "fc0.weight_quantized", str(outside)))
    path = save(m, tmp_path / "model" / "ext_abs.onnx")
    compile_error(tmp_path, path, "ext_abs.onnx", str(outside), "fc0.weight_quantized")


@pytest.mark.skipif(os.name == "nt", reason="symbolic links")
def test_compile_external_data_symlink_outside(tmp_path):
    m = base_model()
    raw = _externalize(m, "fc0.weight_quantized", "weights.bin")
    (tmp_path / "secret.bin").write_bytes(raw)
    path = save(m, tmp_path / "model" / "ext_link.onnx")
    (tmp_path / "model" / "weights.bin").symlink_to(tmp_path / "secret.bin")
    compile_error(tmp_path, path, "ext_link.onnx", "weights.bin", "fc0.weight_quantized",
                  nocase=("outside",))


def test_compile_external_data_inside_folder_works(tmp_path):
    """Control for the three tests above: external data next to the model is fine."""
    m = base_model()
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "weights.bin").write_bytes(
        _externalize(m, "fc0.weight_quantized", "weights.bin"))
    path = save(m, tmp_path / "model" / "ext_ok.onnx")
    out = tmp_path / "out"
    p = hwgen("compile", path, "-o", out, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert (out / "manifest.json").is_file()


def test_compile_float_model_not_quantized(tmp_path):
    ws, bs = random_mlp([16, 8, 4], seed=0)
    path = save(float_mlp(ws, bs), tmp_path / "float_mlp.onnx")
    compile_error(tmp_path, path, "fc0", nocase=("quantiz",))


def test_compile_example_float_model_not_quantized(tmp_path):
    compile_error(tmp_path, EXAMPLES / "digits_mlp.onnx", "fc0", nocase=("quantiz",))


# ------------------------------------------------------------------- compile: --fold file

def _fold(tmp_path: Path, text: str, name: str = "fold.json") -> Path:
    f = tmp_path / name
    f.write_text(text)
    return f


def test_fold_unknown_layer(tmp_path):
    f = _fold(tmp_path, json.dumps({"fc9": {"pe": 1, "simd": 1}}))
    msg = compile_error(tmp_path, QDQ_MODEL, "fc9", extra=("--fold", f))
    assert "fc0" in msg        # names the layers there are


def test_fold_pe_not_dividing_rows(tmp_path):
    f = _fold(tmp_path, json.dumps({"fc0": {"pe": 3, "simd": 1}}))   # fc0 has 32 rows
    compile_error(tmp_path, QDQ_MODEL, "fc0", "PE", "3", "32", extra=("--fold", f))


def test_fold_malformed_json(tmp_path):
    f = _fold(tmp_path, '{"fc0": {"pe": 2,', name="broken_fold.json")
    compile_error(tmp_path, QDQ_MODEL, "broken_fold.json", nocase=("json",),
                  extra=("--fold", f))


def test_fold_wrong_structure(tmp_path):
    f = _fold(tmp_path, json.dumps({"fc0": {"pe": "two"}}), name="typed_fold.json")
    compile_error(tmp_path, QDQ_MODEL, "typed_fold.json", "fc0", extra=("--fold", f))


def test_fold_missing_file(tmp_path):
    compile_error(tmp_path, QDQ_MODEL, "absent_fold.json",
                  extra=("--fold", tmp_path / "absent_fold.json"))


# ----------------------------------------------------------- compile: the output folder

def test_compile_output_is_a_file(tmp_path):
    out = tmp_path / "taken"
    out.write_text("keep me\n")
    p = hwgen("compile", QDQ_MODEL, "-o", out, cwd=tmp_path)
    assert_error(p, "taken")
    assert out.read_text() == "keep me\n"
    assert not [q.name for q in tmp_path.iterdir() if q.name.startswith(".taken.")]


def test_failed_compile_leaves_existing_output_untouched(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.txt").write_text("previous build\n")
    bad = tmp_path / "bad.onnx"
    bad.write_text("garbage")
    p = hwgen("compile", bad, "-o", out, cwd=tmp_path)
    assert_error(p, "bad.onnx")
    assert _listing(out) == ["old.txt"]
    assert (out / "old.txt").read_text() == "previous build\n"
    assert not [q.name for q in tmp_path.iterdir() if q.name.startswith(".out.")]


@pytest.mark.parametrize("name", ["a b", "bad-name!"])
def test_compile_invalid_top_name(tmp_path, name):
    """--name that is not a Verilog identifier: refused with one line (or sanitized)."""
    out = tmp_path / "out"
    p = hwgen("compile", QDQ_MODEL, "-o", out, "--name", name, cwd=tmp_path)
    if p.returncode == 0:     # sanitized into a valid name: also acceptable
        assert (out / "manifest.json").is_file()
        return
    assert_error(p, name)
    assert_no_output_dir(out)


def test_compile_top_name_with_path_separator(tmp_path):
    """--name '../evil' must not write files outside the output folder."""
    out = tmp_path / "build" / "out"
    p = hwgen("compile", QDQ_MODEL, "-o", out, "--name", "../evil", cwd=tmp_path)
    assert not (tmp_path / "build" / "evil.v").exists(), \
        "compile --name ../evil wrote build/evil.v outside the output folder"
    if p.returncode == 0:
        manifest = json.loads((out / "manifest.json").read_text())
        v = (out / manifest["verilog"]).resolve()
        assert v.is_file() and v.is_relative_to(out.resolve()), v
    else:
        assert_error(p, "../evil")
        assert_no_output_dir(out)


# --------------------------------------------------------------------- compile: success

def test_compile_success_deterministic_and_replaces(tmp_path):
    out1, out2 = tmp_path / "a" / "out", tmp_path / "b" / "out"
    p1 = hwgen("compile", QDQ_MODEL, "-o", out1, cwd=tmp_path)
    assert p1.returncode == 0, p1.stderr
    assert p1.stderr == ""
    assert (out1 / "digits_mlp_qdq.v").is_file()
    assert (out1 / "manifest.json").is_file()
    manifest = json.loads((out1 / "manifest.json").read_text())
    assert manifest["verilog"] == "digits_mlp_qdq.v"
    assert "module digits_mlp_qdq" in (out1 / "digits_mlp_qdq.v").read_text()

    p2 = hwgen("compile", QDQ_MODEL, "-o", out2, cwd=tmp_path)
    assert p2.returncode == 0, p2.stderr
    for f in ("digits_mlp_qdq.v", "manifest.json"):
        assert (out1 / f).read_bytes() == (out2 / f).read_bytes(), f"{f} differs between runs"

    # compile again onto its own output folder: hwgen's files are replaced, nothing else
    p3 = hwgen("compile", QDQ_MODEL, "-o", out1, cwd=tmp_path)
    assert p3.returncode == 0, p3.stderr
    assert _listing(out1) == _listing(out2)
    # a file hwgen did not write is never deleted: refused without --force, kept with it
    (out1 / "stale.txt").write_text("from an older build\n")
    p4 = hwgen("compile", QDQ_MODEL, "-o", out1, cwd=tmp_path)
    assert p4.returncode == 2 and "--force" in p4.stderr, p4.stderr
    assert (out1 / "stale.txt").read_text() == "from an older build\n"
    p5 = hwgen("compile", QDQ_MODEL, "-o", out1, "--force", cwd=tmp_path)
    assert p5.returncode == 0, p5.stderr
    assert (out1 / "stale.txt").read_text() == "from an older build\n"
    for f in ("digits_mlp_qdq.v", "manifest.json"):
        assert (out1 / f).read_bytes() == (out2 / f).read_bytes()
    hidden = [q.name for q in (tmp_path / "a").iterdir() if q.name.startswith(".")]
    assert not hidden, f"temporary leftovers: {hidden}"


def test_atomic_dir_removes_partial_output_on_failure(tmp_path):
    """In-process: an exception while the folder is being written leaves nothing behind,
    and an existing folder is kept as it was."""
    from hwgen.io import atomic_dir

    out = tmp_path / "out"
    with pytest.raises(RuntimeError):
        with atomic_dir(out) as tmp:
            (tmp / "half.v").write_text("module half")
            raise RuntimeError("crash while writing")
    assert_no_output_dir(out)

    out.mkdir()
    (out / "old.v").write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_dir(out) as tmp:
            (tmp / "new.v").write_text("new")
            raise RuntimeError("crash while writing")
    assert _listing(out) == ["old.v"]
    assert not [q.name for q in tmp_path.iterdir() if q.name.startswith(".out.")]


# ---------------------------------------------------------------------------- simulate

@pytest.fixture(scope="module")
def design(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("design") / "digits"
    p = hwgen("compile", QDQ_MODEL, "-o", d, "--board", "ulx3s-85f")
    assert p.returncode == 0, p.stderr
    return d


def simulate(design_dir, x, y, *extra, cwd):
    return hwgen("simulate", design_dir, "--input", x, "-o", y, "--simulator", "amaranth",
                 *extra, cwd=cwd)


def sim_error(tmp_path, design_dir, x, *facts, nocase=(), extra=()) -> str:
    y = tmp_path / "Y.npy"
    p = simulate(design_dir, x, y, *extra, cwd=tmp_path)
    msg = assert_error(p, *facts, nocase=nocase)
    assert_no_output_file(y)
    return msg


def test_simulate_wrong_shape(tmp_path, design):
    x = tmp_path / "x_5x63.npy"
    np.save(x, np.zeros((5, 63), np.float32))
    sim_error(tmp_path, design, x, "x_5x63.npy", "[5, 63]", "64")


def test_simulate_wrong_rank(tmp_path, design):
    x = tmp_path / "flat.npy"
    np.save(x, np.zeros((N_IN,), np.float32))
    sim_error(tmp_path, design, x, "flat.npy", "[64]")


def test_simulate_npz_named_array_wrong_shape(tmp_path, design):
    x = tmp_path / "named.npz"
    np.savez(x, input=np.zeros((3, 8, 8), np.float32))
    sim_error(tmp_path, design, x, "named.npz", "[3, 8, 8]", "64")


@pytest.mark.parametrize("kind, arr", [
    ("strings", np.array([["a"] * N_IN] * 3)),
    ("bool", np.ones((3, N_IN), dtype=bool)),
    ("complex", np.zeros((3, N_IN), dtype=np.complex64)),
])
def test_simulate_wrong_element_type(tmp_path, design, kind, arr):
    x = tmp_path / f"x_{kind}.npy"
    np.save(x, arr)
    sim_error(tmp_path, design, x, f"x_{kind}.npy", str(arr.dtype), nocase=("element type",))


def test_simulate_object_array(tmp_path, design):
    x = tmp_path / "objects.npy"
    np.save(x, np.array([[1, "a"]], dtype=object), allow_pickle=True)
    sim_error(tmp_path, design, x, "objects.npy")


def test_simulate_npz_without_model_input(tmp_path, design):
    x = tmp_path / "two.npz"
    np.savez(x, a=np.zeros((3, N_IN), np.float32), b=np.zeros((3, N_IN), np.float32))
    sim_error(tmp_path, design, x, "two.npz", "a", "b", "'input'")


def test_simulate_missing_input(tmp_path, design):
    sim_error(tmp_path, design, tmp_path / "absent.npy", "absent.npy", nocase=("not found",))


@pytest.mark.parametrize("name, data", [
    ("text.npy", b"this is not numpy\n"),
    ("text.npz", b"this is not a zip\n"),
    ("truncated.npz", TEST_NPZ.read_bytes()[:500]),
])
def test_simulate_not_numpy(tmp_path, design, name, data):
    x = tmp_path / name
    x.write_bytes(data)
    sim_error(tmp_path, design, x, name, nocase=("numpy",))


def test_simulate_empty_batch(tmp_path, design):
    x = tmp_path / "none.npy"
    np.save(x, np.zeros((0, N_IN), np.float32))
    sim_error(tmp_path, design, x, "none.npy")


@pytest.mark.parametrize("what", ["empty", "missing", "corrupt", "model_file"])
def test_simulate_not_a_compiled_folder(tmp_path, what):
    if what == "empty":
        d = tmp_path / "empty_dir"
        d.mkdir()
    elif what == "missing":
        d = tmp_path / "missing_dir"
    elif what == "corrupt":
        d = tmp_path / "corrupt_dir"
        d.mkdir()
        (d / "manifest.json").write_text("{not json")
    else:
        d = QDQ_MODEL          # a model file where the compiled folder belongs
    sim_error(tmp_path, d, TEST_NPZ, d.name)


def test_simulate_folder_without_design_npz(tmp_path, design):
    d = tmp_path / "partial"
    shutil.copytree(design, d)
    (d / "design.npz").unlink()
    sim_error(tmp_path, d, TEST_NPZ, "partial")


def test_simulate_count_zero(tmp_path, design):
    sim_error(tmp_path, design, TEST_NPZ, "--count", "0", extra=("--count", "0"))


def test_simulate_stall_out_of_range(tmp_path, design):
    sim_error(tmp_path, design, TEST_NPZ, "--stall", "1.5", extra=("--stall", "1.5"))


@pytest.mark.sim
def test_simulate_success(tmp_path, design):
    """Control for the tests above: a good call writes Y.npy."""
    y = tmp_path / "Y.npy"
    p = simulate(design, TEST_NPZ, y, "--count", "2", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    out = np.load(y)
    assert out.shape == (2, N_OUT)
    assert not [q.name for q in tmp_path.iterdir() if q.name.startswith(".Y.npy.")]


def test_simulate_output_in_missing_folder(tmp_path, design):
    y = tmp_path / "no_such_dir" / "Y.npy"
    p = simulate(design, TEST_NPZ, y, "--count", "1", cwd=tmp_path)
    assert_error(p, "no_such_dir")
    assert not y.exists()


def test_simulate_output_is_a_folder(tmp_path, design):
    y = tmp_path / "Ydir"
    y.mkdir()
    p = simulate(design, TEST_NPZ, y, "--count", "1", cwd=tmp_path)
    assert_error(p, "Ydir")
    assert y.is_dir() and _listing(y) == []
    assert not [q.name for q in tmp_path.iterdir() if q.name.startswith(".Ydir.")]


# ------------------------------------------------------------------------------ verify

def test_verify_wrong_shape(tmp_path):
    x = tmp_path / "x_5x63.npy"
    np.save(x, np.zeros((5, 63), np.float32))
    p = hwgen("verify", QDQ_MODEL, "--input", x, "--simulator", "amaranth", cwd=tmp_path)
    assert_error(p, "x_5x63.npy", "[5, 63]", "64")


def test_verify_bad_model(tmp_path):
    m = tmp_path / "junk.onnx"
    m.write_text("junk")
    p = hwgen("verify", m, "--input", TEST_NPZ, "--simulator", "amaranth", cwd=tmp_path)
    assert_error(p, "junk.onnx")


def test_verify_count_zero(tmp_path):
    p = hwgen("verify", QDQ_MODEL, "--input", TEST_NPZ, "--count", "0",
              "--simulator", "amaranth", cwd=tmp_path)
    assert_error(p, "--count")


def test_version_and_what_compile_wrote(tmp_path):
    p = hwgen("--version")
    assert p.returncode == 0 and p.stdout.strip() == f"hwgen {hwgen_version}"
    p = hwgen("compile", QDQ_MODEL, "-o", tmp_path / "out", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    first = p.stdout.splitlines()[0]
    assert first.startswith("wrote ") and all(
        name in first for name in ("digits_mlp_qdq.v", "manifest.json", "design.npz"))
