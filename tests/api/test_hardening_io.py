"""Regressions found by using hwgen carelessly or with hostile files: output folders never
lose the user's files, design folders are validated before use (and their Verilog and
design.npz checked against the hashes recorded at compile time), inputs are read safely and
quantized with QuantizeLinear's saturation.

Command-line cases run the real console command (``conftest.run_hwgen``): exit code 2, one
stderr line ``hwgen: error: ...``, no traceback, nothing left behind.
"""
from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import time
import zipfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from conftest import hwgen_command
from conftest import run_hwgen as hwgen
from onnx import TensorProto, helper

from hwgen import api, design
from hwgen import io as hio
from hwgen.dataflow.intgraph import QTensor
from hwgen.errors import HwgenError
from hwgen.rtl_templates.quant import QType
from hwgen.sim.base import StreamJob
from hwgen.sim.native import run_native
from hwgen.sim.verilator import run_verilator

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
QDQ_MODEL = EXAMPLES / "digits_mlp_qdq.onnx"
FLOAT_MODEL = EXAMPLES / "digits_mlp.onnx"
TEST_NPZ = EXAMPLES / "digits_test.npz"
TOP = "digits_mlp_qdq"
HWGEN_FILES = [f"{TOP}.v", "design.npz", "manifest.json"]
N_IN = 64


def assert_error(p: subprocess.CompletedProcess, *facts: str) -> str:
    shown = f"exit code {p.returncode}\n--- stderr ---\n{p.stderr}--- stdout ---\n{p.stdout}"
    assert "Traceback" not in p.stderr and "Traceback" not in p.stdout, shown
    assert p.returncode == 2, shown
    assert p.stderr.startswith("hwgen: error: "), shown
    assert p.stderr.endswith("\n") and p.stderr.count("\n") == 1, shown
    msg = p.stderr[len("hwgen: error: "):-1]
    for f in facts:
        assert f in msg, f"{f!r} missing from the message:\n{shown}"
    return msg


def listing(d: Path) -> list[str]:
    return sorted(q.name for q in d.iterdir())


def snapshot(d: Path) -> dict[str, bytes]:
    """Every file under ``d`` (relative path → bytes), folders as None."""
    return {str(q.relative_to(d)): (q.read_bytes() if q.is_file() else None)
            for q in sorted(d.rglob("*"))}


def no_leftovers(d: Path):
    hidden = [q.name for q in d.iterdir() if q.name.startswith(".")]
    assert not hidden, f"temporary leftovers in {d}: {hidden}"


def user_folder(tmp_path: Path) -> Path:
    d = tmp_path / "mydir"
    (d / "subdir").mkdir(parents=True)
    (d / "precious.txt").write_text("years of work\n")
    (d / "subdir" / "notes.md").write_text("more\n")
    return d


# =========================================================== 1. output folders

def test_compile_refuses_a_folder_that_is_not_an_hwgen_output(tmp_path):
    d = user_folder(tmp_path)
    before = snapshot(d)
    p = hwgen("compile", QDQ_MODEL, "-o", d, cwd=tmp_path)
    assert_error(p, "mydir", "--force")
    assert snapshot(d) == before
    no_leftovers(tmp_path)
    no_leftovers(d)


def test_compile_force_replaces_only_hwgen_files(tmp_path):
    d = user_folder(tmp_path)
    (d / "manifest.json").write_text('{"mine": true}\n')   # not hwgen's: --force replaces it
    p = hwgen("compile", QDQ_MODEL, "-o", d, "--force", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert (d / "precious.txt").read_text() == "years of work\n"
    assert (d / "subdir" / "notes.md").read_text() == "more\n"
    assert listing(d) == sorted(HWGEN_FILES + ["precious.txt", "subdir"])
    assert json.loads((d / "manifest.json").read_text())["format"] == "hwgen-manifest"
    no_leftovers(tmp_path)
    no_leftovers(d)
    # a folder holding hwgen's output and the user's file: refused without --force
    p = hwgen("compile", QDQ_MODEL, "-o", d, cwd=tmp_path)
    assert_error(p, "precious.txt")
    assert (d / "precious.txt").read_text() == "years of work\n"


def test_compile_hwgen_output_with_a_stray_file_refused(tmp_path):
    d = tmp_path / "out"
    assert hwgen("compile", QDQ_MODEL, "-o", d, cwd=tmp_path).returncode == 0
    (d / "stale.txt").write_text("mine\n")
    before = snapshot(d)
    p = hwgen("compile", QDQ_MODEL, "-o", d, cwd=tmp_path)
    assert_error(p, "out", "stale.txt")
    assert snapshot(d) == before


def test_a_forged_manifest_cannot_make_hwgen_delete_files(tmp_path):
    d = user_folder(tmp_path)
    (d / "manifest.json").write_text(json.dumps({
        "format": "hwgen-manifest", "verilog": "precious.txt",
        "files": {"precious.txt": "0" * 64, "subdir": "0" * 64}}))
    p = hwgen("compile", QDQ_MODEL, "-o", d, cwd=tmp_path)
    assert_error(p, "precious.txt")
    p = hwgen("compile", QDQ_MODEL, "-o", d, "--force", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert (d / "precious.txt").read_text() == "years of work\n"
    assert (d / "subdir" / "notes.md").is_file()


def test_compile_replaces_its_own_output(tmp_path):
    d = tmp_path / "out"
    assert hwgen("compile", QDQ_MODEL, "-o", d, cwd=tmp_path).returncode == 0
    first = snapshot(d)
    p = hwgen("compile", QDQ_MODEL, "-o", d, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert snapshot(d) == first
    # another top name: the old Verilog (hwgen's) goes, the new one comes
    p = hwgen("compile", QDQ_MODEL, "-o", d, "--name", "other", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert listing(d) == ["design.npz", "manifest.json", "other.v"]
    no_leftovers(d)
    no_leftovers(tmp_path)


def test_compile_into_an_empty_existing_folder(tmp_path):
    d = tmp_path / "empty"
    d.mkdir()
    p = hwgen("compile", QDQ_MODEL, "-o", d, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert listing(d) == sorted(HWGEN_FILES)


@pytest.mark.parametrize("where", ["model_folder", "parent_of_model_folder"])
@pytest.mark.parametrize("force", [False, True])
def test_compile_refuses_the_models_folder(tmp_path, where, force):
    models = tmp_path / "proj" / "models"
    models.mkdir(parents=True)
    model = models / "m.onnx"
    shutil.copy(QDQ_MODEL, model)
    out = models if where == "model_folder" else tmp_path / "proj"
    before = snapshot(tmp_path / "proj")
    p = hwgen("compile", model, "-o", out, *(["--force"] if force else []), cwd=tmp_path)
    assert_error(p, "m.onnx")
    assert snapshot(tmp_path / "proj") == before
    no_leftovers(tmp_path)


@pytest.mark.parametrize("out", [".", "", "..", "./"])
def test_compile_refuses_current_folder_and_empty_name(tmp_path, out):
    work = tmp_path / "work"
    work.mkdir()
    (work / "keep.txt").write_text("keep\n")
    p = hwgen("compile", QDQ_MODEL, "-o", out, "--force", cwd=work)
    assert_error(p)
    assert listing(work) == ["keep.txt"]
    assert listing(tmp_path) == ["work"]


@pytest.mark.skipif(not Path("/sys/kernel").is_dir(), reason="needs Linux's /sys")
def test_compile_unwritable_target(tmp_path):
    p = hwgen("compile", QDQ_MODEL, "-o", "/sys/hwgen_out", cwd=tmp_path)
    assert_error(p, "/sys/hwgen_out")
    p = hwgen("compile", QDQ_MODEL, "-o", "/sys/kernel", "--force", cwd=tmp_path)
    assert_error(p, "/sys/kernel")


def test_verify_output_follows_the_same_rules(tmp_path):
    d = user_folder(tmp_path)
    before = snapshot(d)
    p = hwgen("verify", QDQ_MODEL, "--input", TEST_NPZ, "--count", "1", "--simulator",
              "amaranth", "-o", d, cwd=tmp_path)
    assert_error(p, "mydir", "--force")
    assert snapshot(d) == before
    models = tmp_path / "models"
    models.mkdir()
    shutil.copy(QDQ_MODEL, models / "m.onnx")
    p = hwgen("verify", models / "m.onnx", "--input", TEST_NPZ, "--count", "1",
              "--simulator", "amaranth", "-o", models, "--force", cwd=tmp_path)
    assert_error(p, "m.onnx")
    assert listing(models) == ["m.onnx"]
    p = hwgen("verify", QDQ_MODEL, "--input", TEST_NPZ, "--count", "1", "--simulator",
              "amaranth", "-o", ".", cwd=d)
    assert_error(p)
    assert snapshot(d) == before


def test_verify_force_keeps_other_files(tmp_path):
    d = user_folder(tmp_path)
    p = hwgen("verify", QDQ_MODEL, "--input", TEST_NPZ, "--count", "1", "--simulator",
              "amaranth", "-o", d, "--force", "--board", "ulx3s-85f", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert (d / "precious.txt").read_text() == "years of work\n"
    assert listing(d) == sorted(HWGEN_FILES + ["precious.txt", "subdir"])


@pytest.mark.parametrize("existing", [False, True])
def test_keyboard_interrupt_while_writing_leaves_nothing(tmp_path, monkeypatch, existing):
    out = tmp_path / "out"
    if existing:
        api.compile(QDQ_MODEL, out)
    before = snapshot(out) if existing else None

    def interrupted(path, arrays):
        Path(path).write_bytes(b"half")
        raise KeyboardInterrupt

    monkeypatch.setattr(design, "save_npz", interrupted)
    with pytest.raises(KeyboardInterrupt):
        api.compile(QDQ_MODEL, out)
    if existing:
        assert snapshot(out) == before
        no_leftovers(out)
    else:
        assert not out.exists()
    no_leftovers(tmp_path)


def test_ctrl_c_during_compile(tmp_path):
    """SIGINT at several moments of a real compile: either the complete output or none."""
    for k, delay in enumerate((0.8, 1.3, 1.7)):
        out = tmp_path / f"out{k}"
        proc = subprocess.Popen(hwgen_command() + ["compile", str(QDQ_MODEL), "-o", str(out)],
                                cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=120)
        # interrupted before the files were renamed into place: no folder; during or after
        # (Ctrl-C is held back while renaming, then exits 130; or it lands while the finished
        # process shuts down, which ends it by the signal): the complete output
        if proc.returncode == 0 or out.exists():
            assert proc.returncode in (0, 130, -signal.SIGINT), proc.returncode
            assert listing(out) == sorted(HWGEN_FILES)
            design.load(out)
    no_leftovers(tmp_path)


# ===================================================== 2. design folders validated

@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("design") / "digits"
    api.compile(QDQ_MODEL, d, target_cycles=1024)
    return d


def _manifest(d: Path) -> dict:
    return json.loads((d / "manifest.json").read_text())


def _edit(**changes):
    """A tampering that edits manifest fields (dotted paths → new value)."""
    def apply(d: Path):
        m = _manifest(d)
        for path, v in changes.items():
            *head, last = path.split(".")
            node = m
            for k in head:
                node = node[int(k)] if isinstance(node, list) else node[k]
            if v is _DELETE:
                del node[last]
            elif isinstance(node, list):
                node[int(last)] = v
            else:
                node[last] = v
        (d / "manifest.json").write_text(json.dumps(m))
    return apply


_DELETE = object()


def _write(name: str, data):
    def apply(d: Path):
        (d / name).write_bytes(data(d / name) if callable(data) else data)
    return apply


def _flip(p: Path) -> bytes:
    b = bytearray(p.read_bytes())
    b[len(b) // 2] ^= 0x40
    return bytes(b)


def _set_file_hash(d: Path, value):
    m = _manifest(d)
    m["files"]["design.npz"] = value
    (d / "manifest.json").write_text(json.dumps(m))


def _raw_manifest(text: str):
    def apply(d: Path):
        (d / "manifest.json").write_text(text)
    return apply


def _unlink(name):
    def apply(d: Path):
        (d / name).unlink()
    return apply


TAMPERINGS = {
    "manifest_a_list": (_raw_manifest("[1, 2, 3]"), "list"),
    "manifest_not_json": (_raw_manifest("{nope"), "JSON"),
    "manifest_wrong_format": (_edit(format="other"), "format"),
    "manifest_old_version": (_edit(version=1), "version"),
    "files_missing": (_edit(files=_DELETE), "files"),
    "files_bad_hash": (lambda d: _set_file_hash(d, "xyz"), "files"),
    "top_path_traversal": (_edit(top="../../X", verilog="../../X.v"), "top"),
    "verilog_other_file": (_edit(verilog="/etc/passwd"), "verilog"),
    "verilog_edited": (_write(f"{TOP}.v", lambda p: p.read_bytes() + b"// edited\n"),
                       f"{TOP}.v was changed after compile (hash mismatch)"),
    "npz_truncated": (_write("design.npz", lambda p: p.read_bytes()[:300]),
                      "design.npz was changed after compile (hash mismatch)"),
    "npz_bit_flipped": (_write("design.npz", _flip),
                        "design.npz was changed after compile (hash mismatch)"),
    "npz_missing": (_unlink("design.npz"), "design.npz"),
    "folding_missing": (_edit(folding=_DELETE), "folding"),
    "folding_mistyped": (_edit(folding=[1, 2]), "folding"),
    "folding_pe_string": (_edit(**{"folding.fc0.pe": "2"}), "folding.fc0.pe"),
    "folding_pe_zero": (_edit(**{"folding.fc0.pe": 0}), "folding.fc0.pe"),
    "folding_wrong": (_edit(**{"folding.fc0.simd": 4}), "elements_per_beat"),
    "estimate_missing": (_edit(estimate=_DELETE), "estimate"),
    "estimate_mistyped": (_edit(estimate="fast"), "estimate"),
    "estimate_latency_string": (_edit(**{"estimate.latency_cycles": "10"}), "latency_cycles"),
    "estimate_wrong_latency": (_edit(**{"estimate.latency_cycles": 10**9}), "latency_cycles"),
    "epb_zero": (_edit(**{"input.elements_per_beat": 0}), "elements_per_beat"),
    "epb_three": (_edit(**{"input.elements_per_beat": 3}), "elements_per_beat"),
    "epb_consistent_but_wrong": (_edit(**{"output.elements_per_beat": 2,
                                          "output.beats_per_frame": 5,
                                          "ports.output.bits": 16}), "elements_per_beat"),
    "type_int99": (_edit(**{"output.element_type": "int99"}), "int99"),
    "tensor_type_int99": (_edit(**{"integer_graph.tensors.0.type": "int99"}), "int99"),
    "negative_shift": (_edit(**{"integer_graph.ops.0.requant.requant.shift": -3}), "shift"),
    "beats_per_frame_too_many": (_edit(**{"output.beats_per_frame": 1000}), "beats_per_frame"),
    "port_bits_wrong": (_edit(**{"ports.input.bits": 64}), "bits"),
    "zero_point_out_of_range": (_edit(**{"input.zero_point": 300}), "zero_point"),
    "scale_nan": (_raw_manifest("SCALE_NAN"), "scale"),
    "unknown_op": (_edit(**{"integer_graph.ops.0.op": "Evil"}), "Evil"),
    "missing_array": (_edit(**{"integer_graph.ops.0.weights": {"array": "nope"}}), "nope"),
    "onnx_shape_mistyped": (_edit(**{"input.onnx_shape": "N,64"}), "onnx_shape"),
    "bool_as_int": (_edit(**{"input.frame_elements": True}), "frame_elements"),
}


@pytest.mark.parametrize("case", sorted(TAMPERINGS))
def test_tampered_design_folder(tmp_path, compiled, case):
    tamper, fact = TAMPERINGS[case]
    d = tmp_path / "design"
    shutil.copytree(compiled, d)
    if case == "scale_nan":
        text = (d / "manifest.json").read_text()
        m = _manifest(d)
        text = text.replace(f'"scale": {json.dumps(m["input"]["scale"])}', '"scale": NaN', 1)
        tamper = _raw_manifest(text)
    tamper(d)
    cache = tmp_path / "cache"
    y = tmp_path / "Y.npy"
    env_args = ("simulate", d, "--input", TEST_NPZ, "-o", y, "--count", "1")
    p = subprocess.run(hwgen_command() + [str(a) for a in env_args], capture_output=True,
                       text=True, cwd=tmp_path, timeout=300,
                       env=dict(os.environ, HWGEN_CACHE=str(cache)))
    msg = assert_error(p, fact)
    assert str(d) in msg or "design" in msg
    assert not y.exists()
    assert not cache.exists(), "the simulator was started on a tampered design"
    assert not (tmp_path / "X.v").exists() and not (ROOT / "X.v").exists()


def test_verilog_symlinked_outside_refused(tmp_path, compiled):
    d = tmp_path / "design"
    shutil.copytree(compiled, d)
    outside = tmp_path / "elsewhere.v"
    shutil.move(d / f"{TOP}.v", outside)
    (d / f"{TOP}.v").symlink_to(outside)
    with pytest.raises(HwgenError, match="outside the folder"):
        design.load(d)


def test_untampered_design_loads(compiled):
    manifest, ig, folding = design.load(compiled)
    assert set(manifest["files"]) == {f"{TOP}.v", "design.npz"}
    assert manifest["files"]["design.npz"] == design.file_hash(compiled / "design.npz")
    assert set(folding) == {"fc0", "fc1", "fc2"}


@pytest.mark.parametrize("top", ["../../X", "a/b", "", "1abc", None])
def test_simulators_refuse_a_top_that_is_no_identifier(tmp_path, top):
    job = StreamJob(8, 8, [1], [True], 1)
    for run in (run_native, run_verilator):
        with pytest.raises(HwgenError, match="identifier"):
            run("module x; endmodule", top, job, build_dir=str(tmp_path / "cache"))
    assert not (tmp_path / "X.v").exists()


# ============================================= 3. quantization and input files

def _ort_quantize(x: np.ndarray, scale: float, zp: int, signed: bool) -> np.ndarray:
    ty = TensorProto.INT8 if signed else TensorProto.UINT8
    g = helper.make_graph(
        [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])], "q",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("y", ty, list(x.shape))],
        [helper.make_tensor("s", TensorProto.FLOAT, [], [scale]),
         helper.make_tensor("z", ty, [], [zp])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0].astype(np.int64)


@pytest.mark.parametrize("signed, zp, scale", [(False, 0, 1.0), (True, 0, 1.0),
                                               (False, 3, 0.5), (True, -5, 0.25)])
def test_quantize_saturates_like_quantizelinear(signed, zp, scale):
    x = np.array([np.inf, -np.inf, 1e30, -1e30, 3e19, -3e19, 9.3e18, 2.0**63, -(2.0**63),
                  254.5, 255.5, -128.5, 127.5, 0.5, 1.5, -0.5, 2.5, 1e-30],
                 dtype=np.float32)
    t = QTensor("x", x.shape, QType(8, signed), scale, zp)
    assert np.array_equal(t.quantize(x), _ort_quantize(x, scale, zp, signed))


@pytest.mark.sim
def test_simulate_saturates_inf_and_huge_inputs(compiled):
    x = np.zeros((3, N_IN), np.float32)
    x[0] = np.inf
    x[1] = 1e30
    x[2] = -np.inf
    r = api.simulate(compiled, x, "amaranth")
    assert (r.inputs_int[0] == 255).all() and (r.inputs_int[1] == 255).all()
    assert (r.inputs_int[2] == 0).all()


def test_simulate_refuses_nan_naming_the_sample(tmp_path, compiled):
    x = tmp_path / "nan.npy"
    a = np.zeros((4, N_IN), np.float32)
    a[2, 7] = np.nan
    np.save(x, a)
    y = tmp_path / "Y.npy"
    p = hwgen("simulate", compiled, "--input", x, "-o", y, "--simulator", "amaranth",
              cwd=tmp_path)
    assert_error(p, "nan.npy", "sample 2", "NaN")
    assert not y.exists()
    # only the samples asked for are read: NaN in sample 2 does not matter for --count 2
    p = hwgen("simulate", compiled, "--input", x, "-o", y, "--simulator", "amaranth",
              "--count", "2", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    with pytest.raises(HwgenError, match="sample 2"):
        api.simulate(compiled, a, "amaranth")


def test_verify_refuses_nan(tmp_path):
    x = tmp_path / "nan.npz"
    a = np.zeros((3, N_IN), np.float32)
    a[1, 0] = np.nan
    np.savez(x, input=a)
    p = hwgen("verify", QDQ_MODEL, "--input", x, "--simulator", "amaranth", cwd=tmp_path)
    assert_error(p, "nan.npz", "sample 1", "NaN")


def test_quantize_calibration_refuses_nan(tmp_path):
    x = tmp_path / "cal.npy"
    a = np.zeros((5, N_IN), np.float32)
    a[3, 3] = np.nan
    np.save(x, a)
    out = tmp_path / "m.q.onnx"
    p = hwgen("quantize", FLOAT_MODEL, "--calibration", x, "-o", out, cwd=tmp_path)
    assert_error(p, "cal.npy", "sample 3", "NaN")
    assert not out.exists()


def _npy_header(shape, dtype="<f4") -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buf, {"descr": dtype, "fortran_order": False, "shape": shape})
    return buf.getvalue()


def _bad_inputs(tmp_path: Path) -> dict[str, Path]:
    files = {}
    p = tmp_path / "objects.npz"
    with zipfile.ZipFile(p, "w") as z:
        buf = io.BytesIO()
        np.save(buf, np.array([[1, "a"]], dtype=object), allow_pickle=True)
        z.writestr("input.npy", buf.getvalue())
    files["objects_in_npz"] = p

    p = tmp_path / "deflate.npz"
    np.savez_compressed(p, input=np.random.default_rng(0).random((50, N_IN), np.float32))
    raw = bytearray(p.read_bytes())
    with zipfile.ZipFile(p) as z:
        info = z.getinfo("input.npy")
    start = info.header_offset + 30 + len(info.filename) + len(info.extra)
    for k in range(start + 40, start + 200):
        raw[k] ^= 0x5A
    p.write_bytes(bytes(raw))
    files["corrupt_deflate"] = p

    p = tmp_path / "huge.npy"   # declares [2**40, 64] float32 = 256 TiB, holds 64 bytes
    p.write_bytes(_npy_header((2**40, N_IN)) + bytes(64))
    files["huge_npy_header"] = p

    p = tmp_path / "huge.npz"
    with zipfile.ZipFile(p, "w") as z:
        z.writestr("input.npy", _npy_header((2**38, N_IN)) + bytes(64))
    files["huge_npz_member"] = p

    p = tmp_path / "notnpy.npz"
    with zipfile.ZipFile(p, "w") as z:
        z.writestr("input.npy", b"hello, I am text\n" * 10)
    files["member_not_npy"] = p

    p = tmp_path / "empty.npz"
    with zipfile.ZipFile(p, "w"):
        pass
    files["empty_npz"] = p

    p = tmp_path / "truncated.npy"
    full = _npy_header((10, N_IN)) + bytes(10 * N_IN * 4)
    p.write_bytes(full[:-100])
    files["truncated_npy"] = p
    return files


@pytest.mark.parametrize("case", ["objects_in_npz", "corrupt_deflate", "huge_npy_header",
                                  "huge_npz_member", "member_not_npy", "empty_npz",
                                  "truncated_npy"])
def test_simulate_bad_input_files(tmp_path, compiled, case):
    x = _bad_inputs(tmp_path)[case]
    y = tmp_path / "Y.npy"
    p = hwgen("simulate", compiled, "--input", x, "-o", y, "--simulator", "amaranth",
              cwd=tmp_path, timeout=120)
    assert_error(p, x.name)
    assert not y.exists()


@pytest.mark.parametrize("case", ["corrupt_deflate", "huge_npy_header", "member_not_npy"])
def test_verify_and_quantize_bad_input_files(tmp_path, case):
    x = _bad_inputs(tmp_path)[case]
    p = hwgen("verify", QDQ_MODEL, "--input", x, "--simulator", "amaranth", cwd=tmp_path)
    assert_error(p, x.name)
    p = hwgen("quantize", FLOAT_MODEL, "--calibration", x, "-o", tmp_path / "q.onnx",
              cwd=tmp_path)
    assert_error(p, x.name)


def test_read_input_checks_memory_and_reads_only_count(tmp_path, monkeypatch):
    x = tmp_path / "x.npy"
    a = np.arange(100 * N_IN, dtype=np.float32).reshape(100, N_IN)
    np.save(x, a)
    got = hio.read_input(x, "input", count=3)
    assert got.dtype == np.float32 and np.array_equal(got, a[:3])
    monkeypatch.setattr(hio, "available_memory", lambda: 4 * N_IN * 10)
    with pytest.raises(HwgenError, match="memory"):
        hio.read_input(x, "input")
    assert hio.read_input(x, "input", count=5).shape == (5, N_IN)
    z = tmp_path / "x.npz"
    np.savez(z, input=a)
    with pytest.raises(HwgenError, match="memory"):
        hio.read_input(z, "input")


def test_layer_names_with_dots_load(tmp_path):
    """TorchScript names layers of an nn.Sequential "/net/net.0/Gemm": the manifest's folding
    is keyed by such names, and loading the design must not read the dots as a path."""
    m = onnx.load(str(QDQ_MODEL))
    for node in m.graph.node:
        node.name = node.name.replace("fc", "/net/net.").replace("_", ".")
    src = tmp_path / "dotted.onnx"
    onnx.save(m, str(src))
    api.compile(src, tmp_path / "d")
    _, _, folding = design.load(tmp_path / "d")
    assert folding and all("." in name for name in folding)
