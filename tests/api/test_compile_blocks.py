"""Per-block conversion (hwgen/assemble.py, hwgen/blockcache.py): the same text for any job
count and cache state, equal blocks sharing one module, damaged cache entries rebuilt."""
from __future__ import annotations

import dataclasses
import os
import re

import numpy as np
import pytest
from conftest import EXAMPLES

from hwgen import api
from hwgen.blockcache import BlockCache, library_unchanged, params_digest
from hwgen.errors import HwgenError
from hwgen.rtl_templates import source

MODEL = EXAMPLES / "digits_mlp_qdq.onnx"


def _compile(tmp_path, tag: str, **kw) -> str:
    res = api.compile(MODEL, tmp_path / tag, **kw)
    return res.verilog.read_text()


def test_jobs_and_cache_give_identical_verilog(tmp_path, monkeypatch):
    monkeypatch.setenv("HWGEN_CACHE", str(tmp_path / "cache"))
    plain = _compile(tmp_path, "nocache", jobs=1, cache=False)
    assert not (tmp_path / "cache" / "blocks").exists()
    cold = _compile(tmp_path, "cold2", jobs=2)
    entries = sorted((tmp_path / "cache" / "blocks").glob("*/*.il"))
    warm = _compile(tmp_path, "warm1", jobs=1)
    assert plain == cold == warm
    modules = re.findall(r"^module (hwgen_\w+)\(", plain, re.M)
    assert len(entries) == len(modules) == len(set(modules)) > 0
    # the top instantiates every block module, and nothing else is left undefined
    for mod in modules:
        assert re.search(rf"^\s+{mod} \w+ \(", plain, re.M)


def test_damaged_cache_entry_is_rebuilt(tmp_path, monkeypatch):
    monkeypatch.setenv("HWGEN_CACHE", str(tmp_path / "cache"))
    first = _compile(tmp_path, "a", jobs=1)
    entry = max((tmp_path / "cache" / "blocks").glob("*/*.il"), key=lambda p: p.stat().st_size)
    good = entry.read_text()
    entry.write_text(good.replace("assign", "assign ", 1))     # still Verilog, but changed
    cache = BlockCache()
    assert cache.get(entry.stem) is None and not entry.exists()
    entry.parent.mkdir(parents=True, exist_ok=True)
    entry.write_text(good[:len(good) // 2])                    # truncated
    assert _compile(tmp_path, "b", jobs=1) == first
    assert entry.read_text() == good                           # rebuilt and stored again
    assert BlockCache().get(entry.stem) is not None


def test_cache_keeps_its_size_bound(tmp_path):
    cache = BlockCache(tmp_path, limit=3000)
    for k in range(5):
        key = f"{k:02d}" + "0" * 62
        cache.put(key, "x" * 1000)
        os.utime(cache.path(key), (k, k))                      # k-th oldest
    cache.evict()
    left = sorted(p.stem[:2] for p in tmp_path.glob("*/*.il"))
    assert left == ["03", "04"]                                # 2 entries (+ headers) ≤ 3000


@dataclasses.dataclass(frozen=True)
class _P:
    w: np.ndarray
    table: dict
    n: int = 1


def test_params_digest_is_canonical():
    a = _P(np.arange(6).reshape(2, 3), {"x": 1, "y": (2, 3)})
    b = _P(np.arange(6).reshape(2, 3).copy(order="F"), {"y": (2, 3), "x": 1})
    assert params_digest("k", a) == params_digest("k", b)
    assert params_digest("k", a) != params_digest("other", a)
    assert params_digest("k", a) != params_digest("k", _P(np.arange(6).reshape(3, 2), a.table))
    assert params_digest("k", a) != params_digest("k", dataclasses.replace(a, n=2))
    # integers by value (a design folder stores them as int64), other types apart
    assert params_digest("k", a) == params_digest(
        "k", _P(np.arange(6, dtype=np.int8).reshape(2, 3), a.table))
    assert params_digest("k", a) != params_digest(
        "k", _P(np.arange(6, dtype=np.float32).reshape(2, 3), a.table))


def test_jobs_must_be_positive(tmp_path):
    with pytest.raises(HwgenError, match="jobs"):
        api.compile(MODEL, tmp_path / "x", jobs=0)


def test_cache_untouched_once_the_library_changed_on_disk(tmp_path, monkeypatch):
    """A process whose block library's files changed after it loaded them (a checkout or
    merge while it ran) may run other code than any key it computes says: it neither stores
    its output nor takes entries, so no entry holds one code's Verilog under another's key."""
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "block.py").write_text("A = 1\n")
    monkeypatch.setattr(source, "FOLDER", lib)
    monkeypatch.setattr(source, "LOADED", source.fingerprint(lib))
    cache = BlockCache(tmp_path / "cache")
    cache.put("aa" + "0" * 62, "old")
    assert cache.get("aa" + "0" * 62) == "old"
    (lib / "block.py").write_text("A = 2\n")                  # same size, new content
    st = os.stat(lib / "block.py")
    os.utime(lib / "block.py", ns=(st.st_atime_ns, source.LOADED.stamps[0][2] + 1))
    assert not library_unchanged()
    assert cache.get("aa" + "0" * 62) is None
    cache.put("bb" + "0" * 62, "new")
    assert not cache.path("bb" + "0" * 62).exists()


@pytest.mark.verilator
@pytest.mark.parametrize("model,test_set,exact", [
    ("digits_mlp_qdq.onnx", "digits_test.npz", True),
    ("digits_cnn_qdq.onnx", "digits_images_test.npz", False)])
def test_blocks_and_whole_assembly_same_cycles_verilator(tmp_path, monkeypatch, model,
                                                         test_set, exact):
    """The per-block Verilog and the whole design's, simulated natively: the same outputs
    and the same cycle of every frame's first and last beat; the latency the estimate's
    (exact for the MLP; the CNN's sliding windows are modelled within 5 %, as in
    test_cnn_e2e)."""
    monkeypatch.setenv("HWGEN_CACHE", str(tmp_path / "cache"))
    data = np.load(EXAMPLES / test_set)
    x = data[data.files[0]][:4]
    runs = {}
    for assembly in ("blocks", "whole"):
        res = api.compile(EXAMPLES / model, tmp_path / assembly, jobs=1, assembly=assembly,
                          board="ulx3s-25f")
        runs[assembly] = (res, api.simulate(res.out_dir, x, simulator="verilator", jobs=1))
    (cb, sb), (cw, sw) = runs["blocks"], runs["whole"]
    assert "module hwgen_" in cb.verilog.read_text()
    assert "module hwgen_" not in cw.verilog.read_text()
    assert cb.estimate == cw.estimate
    assert np.array_equal(sb.outputs_int, sw.outputs_int)
    assert np.array_equal(sb.frame_cycles, sw.frame_cycles)
    assert sb.latency == sw.latency
    est = cb.estimate["latency_cycles"]
    assert sb.latency == est if exact else abs(sb.latency - est) <= 0.05 * est


def test_unknown_assembly_refused(tmp_path):
    with pytest.raises(HwgenError, match="assembly"):
        api.compile(MODEL, tmp_path / "x", assembly="flat")


@pytest.fixture(scope="module")
def cnn_verilog(tmp_path_factory) -> str:
    """The digits CNN's Verilog at its ULX3S-85F folding."""
    res = api.compile(EXAMPLES / "digits_cnn_qdq.onnx", tmp_path_factory.mktemp("cnn") / "cnn",
                      jobs=1, cache=False, board="ulx3s-85f")
    return res.verilog.read_text()


def _instance_ports(text: str, inst: str) -> dict[str, str]:
    """The connections of instance ``inst`` (port → net) in Yosys's Verilog."""
    body = re.search(rf"^\s+\S+ {inst} \((.*?)\);", text, re.M | re.S).group(1)
    return dict(re.findall(r"\.(\w+)\(([^()]*)\)", body))


def _module_body(text: str, inst: str) -> str:
    mod = re.search(rf"^\s+(hwgen_\w+) {inst} \(", text, re.M).group(1)
    body = text[text.index(f"module {mod}("):]
    return body[:body.index("endmodule")]


def test_wide_fifo_reads_on_copies_of_its_readers_ready(cnn_verilog):
    """A FIFO of several slices in front of a matrix unit reads each slice on a copy of the
    unit's input ready of its own, each from a copy of the unit's issue control fed that
    slice's valid: the digits CNN's 576-bit window FIFO before its second convolution has
    18 slices, wired to 18 copies."""
    text = cnn_verilog

    def ports(inst: str) -> dict[str, str]:
        return _instance_ports(text, inst)

    fifo, unit = ports("fifo_Relu_1_output_0_QuantizeLinear_Output_win"), ports("conv2_Conv")
    assert fifo["o__ready_slices"] == unit["i__ready_slices"]
    assert fifo["o__valid_slices"] == unit["i__valid_slices"]
    assert re.search(rf"wire \[17:0\] {re.escape(unit['i__ready_slices'])};", text)
    mod = re.search(r"^\s+(hwgen_mvau_\w+) conv2_Conv \(", text, re.M).group(1)
    body = text[text.index(f"module {mod}("):]
    body = body[:body.index("endmodule")]
    copies = set(re.findall(r"reg take_c(\d+) ", body))
    assert copies == {str(k) for k in range(576 // 32)}
    # the returned credits reach each copy through a kept register of its own
    assert len(re.findall(r"\(\* keep = 32'd1 \*\)\s+reg taken_c\d+ ", body)) == 18


def test_fifo_gives_a_valid_copy_per_step_control_copy(cnn_verilog):
    """The FIFO before the second convolution's window generator keeps a copy of its valid
    per copy of the generator's step control (17), each a kept register of its own, and the
    generator's copies read them: no one flip-flop's net spans the copies."""
    fifo, swg = (_instance_ports(cnn_verilog, n) for n in
                 ("fifo_1_MaxPool_output_0_QuantizeLinear_Output", "conv2_Conv_swg"))
    assert fifo["o__valid_copies"] == swg["i__valid_copies"]
    assert re.search(rf"wire \[16:0\] {re.escape(swg['i__valid_copies'])};", cnn_verilog)
    mod = re.search(r"^\s+(hwgen_\w+) fifo_1_MaxPool_output_0_QuantizeLinear_Output \(",
                    cnn_verilog, re.M).group(1)
    copies = 0          # the copies sit in the FIFO's slices (its submodules' modules)
    for name in re.findall(rf"^module (\\?{mod}\S*)\s*\(", cnn_verilog, re.M):
        body = cnn_verilog[cnn_verilog.index(f"module {name}"):]
        body = body[:body.index("endmodule")]
        kept = re.findall(r"\(\* keep = 32'd1 \*\)\s+output (r_rdy_c\d+);", body)
        assert sorted(kept) == sorted(re.findall(r"reg (r_rdy_c\d+) ", body))
        copies += len(kept)
    assert copies == 17


def test_sliced_fifos_hand_over_slice_by_slice(cnn_verilog):
    """The window generator's 576-bit output FIFO and the window FIFO after it have the same
    18 slices: each slice's valid and ready go to its twin only, and each slice of the
    generator's FIFO is written on a valid register of its own, the registered emit of the
    copy of the step control beside the slice's bits (the first slice: the main control's)."""
    swg, fifo = (_instance_ports(cnn_verilog, n) for n in
                 ("conv2_Conv_swg", "fifo_Relu_1_output_0_QuantizeLinear_Output_win"))
    assert swg["o__valid_slices"] == fifo["i__valid_slices"]
    assert swg["o__ready_slices"] == fifo["i__ready_slices"]
    assert re.search(rf"wire \[17:0\] {re.escape(fifo['i__ready_slices'])};", cnn_verilog)
    body = _module_body(cnn_verilog, "conv2_Conv_swg")
    valids = re.findall(r"reg (sh_\d+_\d+_valid) ", body)
    assert len(valids) == len(set(valids)) == 17
    # the FIFO's 18 write enables: the 17 copies and the main control's ``valid``
    en = re.search(r"assign w_en_slices = \{ (.*?) \};", body).group(1).split(", ")
    assert sorted(en) == sorted(valids + ["valid"])
