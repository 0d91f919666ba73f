"""``hwgen compile --ip-xact``: component.xml, the design's IP-XACT (1685-2009) description for
Vivado's IP catalog: its interfaces, its ports as the Verilog declares them, its file set,
its place in the output folder and the manifest, and byte-identical output."""
from __future__ import annotations

import json
import shutil
import subprocess
import xml.etree.ElementTree as ET

import pytest
from conftest import EXAMPLES, run_hwgen

from hwgen import api, design
from hwgen.boards.synth import verilog_ports
from hwgen.errors import HwgenError
from hwgen.ipxact import SPIRIT, XILINX, component_xml

MLP = EXAMPLES / "digits_mlp_qdq.onnx"
TFC = EXAMPLES / "mlperf_tiny" / "tfc_bnfused_qdq.onnx"
NS = {"spirit": SPIRIT, "xilinx": XILINX}
DIRECTION = {"input": "in", "output": "out", "inout": "inout"}


def _compile_cli(model, out, *options):
    r = run_hwgen("compile", model, "-o", out, "--ip-xact", *options)
    assert r.returncode == 0, r.stderr
    return out


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    """digits_mlp_qdq compiled with --ip-xact by the command line (fast folding)."""
    return _compile_cli(MLP, tmp_path_factory.mktemp("ipx") / "mlp", "--target-cycles", "1024")


@pytest.fixture(scope="module")
def tfc(tmp_path_factory):
    """tfc_bnfused_qdq for the iCEBreaker: the layer-sequential engine, weights loaded into
    SPRAM after reset through s_wload."""
    out = tmp_path_factory.mktemp("ipx") / "tfc"
    api.compile(TFC, out, board="icebreaker", ip_xact=True)
    return out


def _parse(folder):
    manifest = json.loads((folder / "manifest.json").read_text())
    root = ET.parse(folder / "component.xml").getroot()
    return manifest, root


def _text(el, path):
    found = el.find(path, NS)
    assert found is not None, path
    return found.text


def _bus(root) -> dict:
    """{interface name: (bus type VLNV, abstraction name, mode, {logical: physical}, params)}"""
    out = {}
    for bi in root.findall("spirit:busInterfaces/spirit:busInterface", NS):
        bt = bi.find("spirit:busType", NS)
        vlnv = ":".join(bt.get(f"{{{SPIRIT}}}{k}") for k in ("vendor", "library", "name",
                                                              "version"))
        abstraction = bi.find("spirit:abstractionType", NS).get(f"{{{SPIRIT}}}name")
        mode = [m for m in ("master", "slave") if bi.find(f"spirit:{m}", NS) is not None]
        maps = {_text(pm, "spirit:logicalPort/spirit:name"):
                _text(pm, "spirit:physicalPort/spirit:name")
                for pm in bi.findall("spirit:portMaps/spirit:portMap", NS)}
        params = {_text(p, "spirit:name"): _text(p, "spirit:value")
                  for p in bi.findall("spirit:parameters/spirit:parameter", NS)}
        name = _text(bi, "spirit:name")
        assert name not in out
        out[name] = (vlnv, abstraction, mode, maps, params)
    return out


def _ports(root) -> list[tuple[str, str, int]]:
    out = []
    for p in root.findall("spirit:model/spirit:ports/spirit:port", NS):
        vec = p.find("spirit:wire/spirit:vector", NS)
        width = 1
        if vec is not None:
            width = int(_text(vec, "spirit:left")) - int(_text(vec, "spirit:right")) + 1
        out.append((_text(p, "spirit:name"), _text(p, "spirit:wire/spirit:direction"), width))
    return out


def _check_component(folder, loads: bool):
    manifest, root = _parse(folder)
    top = manifest["top"]
    assert root.tag == f"{{{SPIRIT}}}component"
    assert [_text(root, f"spirit:{k}") for k in ("vendor", "library", "name", "version")] == \
        ["hwgen", "hwgen", top, "1.0"]

    bus = _bus(root)
    axis = "xilinx.com:interface:axis:1.0"
    assert bus["s_axis"] == (axis, "axis_rtl", ["slave"], {
        "TDATA": "s_axis_tdata", "TVALID": "s_axis_tvalid", "TREADY": "s_axis_tready",
        "TLAST": "s_axis_tlast"}, {})
    assert bus["m_axis"] == (axis, "axis_rtl", ["master"], {
        "TDATA": "m_axis_tdata", "TVALID": "m_axis_tvalid", "TREADY": "m_axis_tready",
        "TLAST": "m_axis_tlast"}, {})
    streams = "s_axis:m_axis"
    if loads:
        assert bus["s_wload"] == (axis, "axis_rtl", ["slave"], {
            "TDATA": "s_wload_tdata", "TVALID": "s_wload_tvalid",
            "TREADY": "s_wload_tready"}, {})
        streams += ":s_wload"
    else:
        assert "s_wload" not in bus
    assert bus["clk"] == ("xilinx.com:signal:clock:1.0", "clock_rtl", ["slave"],
                          {"CLK": "clk"},
                          {"ASSOCIATED_BUSIF": streams, "ASSOCIATED_RESET": "rst"})
    assert bus["rst"] == ("xilinx.com:signal:reset:1.0", "reset_rtl", ["slave"],
                          {"RST": "rst"}, {"POLARITY": "ACTIVE_HIGH"})
    assert set(bus) == {"s_axis", "m_axis", "clk", "rst"} | ({"s_wload"} if loads else set())

    # every Verilog port exactly once, as declared; every port map names one of them
    verilog = (folder / f"{top}.v").read_text()
    declared = [(p.name, DIRECTION[p.direction], p.width) for p in verilog_ports(verilog, top)]
    ports = _ports(root)
    assert sorted(ports) == sorted(declared)
    assert len({n for n, _, _ in ports}) == len(ports)
    names = {n for n, _, _ in ports}
    assert all(set(m[3].values()) <= names for m in bus.values())
    width = dict((n, w) for n, _, w in ports)
    assert width["s_axis_tdata"] == manifest["ports"]["input"]["bits"]
    assert width["m_axis_tdata"] == manifest["ports"]["output"]["bits"]
    if loads:
        assert width["s_wload_tdata"] == 16

    # views → file sets → the Verilog file, relative, present in the folder
    views = root.findall("spirit:model/spirit:views/spirit:view", NS)
    assert views
    sets = {_text(fs, "spirit:name"): fs
            for fs in root.findall("spirit:fileSets/spirit:fileSet", NS)}
    for v in views:
        assert _text(v, "spirit:modelName") == top
        assert _text(v, "spirit:language") == "Verilog"
        fs = sets[_text(v, "spirit:fileSetRef/spirit:localName")]
        files = [(_text(f, "spirit:name"), _text(f, "spirit:fileType"))
                 for f in fs.findall("spirit:file", NS)]
        assert files == [(f"{top}.v", "verilogSource")]
        assert (folder / files[0][0]).is_file()

    desc = _text(root, "spirit:description")
    assert manifest["model"]["file"] in desc
    assert f"{manifest['input']['beats_per_frame']} beats" in desc
    assert f"{manifest['output']['beats_per_frame']} beats" in desc
    assert root.find("spirit:vendorExtensions/xilinx:coreExtensions/xilinx:supportedFamilies/"
                     "xilinx:family", NS) is not None

    raw = (folder / "component.xml").read_text()
    assert raw.startswith('<?xml version="1.0" encoding="UTF-8"?>\n')
    assert str(folder) not in raw and str(folder.resolve()) not in raw
    # in the manifest's files, with its hash; the folder still loads
    assert manifest["files"]["component.xml"] == design.file_hash(folder / "component.xml")
    design.load(folder)
    if shutil.which("xmllint"):
        subprocess.run(["xmllint", "--noout", str(folder / "component.xml")], check=True)


def test_component_of_a_pipeline(mlp):
    _check_component(mlp, loads=False)


def test_component_with_weight_load(tfc):
    _check_component(tfc, loads=True)


def test_byte_identical(mlp, tmp_path):
    """The API gives the same bytes as the command line did, and the same manifest."""
    again = tmp_path / "again"
    api.compile(MLP, again, target_cycles=1024, ip_xact=True)
    for f in ("component.xml", "manifest.json"):
        assert (again / f).read_bytes() == (mlp / f).read_bytes(), f


def test_recompile_claims_and_drops_component(tmp_path):
    """component.xml is hwgen's: compiling again into the folder needs no --force, and
    without --ip-xact the old one is removed with the rest of the earlier output."""
    out = tmp_path / "d"
    api.compile(MLP, out, target_cycles=1024, ip_xact=True)
    api.compile(MLP, out, target_cycles=1024, ip_xact=True)
    assert (out / "component.xml").is_file()
    api.compile(MLP, out, target_cycles=1024)
    assert sorted(p.name for p in out.iterdir()) == ["design.npz", "digits_mlp_qdq.v",
                                                     "manifest.json"]
    assert not (out / "component.xml").exists()
    assert "component.xml" not in json.loads((out / "manifest.json").read_text())["files"]


def test_component_xml_from_manifest_and_verilog():
    """The unit: a manifest and a Verilog header are enough; a manifest port missing from
    the Verilog is refused."""
    verilog = """module tiny(clk, rst, s_axis_tdata, s_axis_tvalid, s_axis_tready, s_axis_tlast,
  m_axis_tdata, m_axis_tvalid, m_axis_tready, m_axis_tlast, s_wload_tdata, s_wload_tvalid,
  s_wload_tready);
  input clk; input rst;
  input [23:0] s_axis_tdata; input s_axis_tvalid; output s_axis_tready; input s_axis_tlast;
  output [7:0] m_axis_tdata; output m_axis_tvalid; input m_axis_tready; output m_axis_tlast;
  input [15:0] s_wload_tdata; input s_wload_tvalid; output s_wload_tready;
endmodule
"""
    side = {"onnx_name": "x", "onnx_shape": ["N", 6], "elements_per_beat": 3,
            "beats_per_frame": 2, "element_type": "uint8"}
    manifest = {
        "top": "tiny", "verilog": "tiny.v", "model": {"file": "tiny.onnx"},
        "ports": {"clock": "clk", "reset": "rst (synchronous, active high)",
                  "input": {"tdata": "s_axis_tdata", "bits": 24, "tvalid": "s_axis_tvalid",
                            "tready": "s_axis_tready", "tlast": "s_axis_tlast (ignored)"},
                  "output": {"tdata": "m_axis_tdata", "bits": 8, "tvalid": "m_axis_tvalid",
                             "tready": "m_axis_tready", "tlast": "m_axis_tlast"},
                  "weight_load": {"tdata": "s_wload_tdata", "bits": 16,
                                  "tvalid": "s_wload_tvalid", "tready": "s_wload_tready",
                                  "words": 12}},
        "input": side, "output": dict(side, onnx_name="y", elements_per_beat=1,
                                      beats_per_frame=6)}
    text = component_xml(manifest, verilog)
    assert text == component_xml(manifest, verilog)
    root = ET.fromstring(text)
    bus = _bus(root)
    assert bus["clk"][4]["ASSOCIATED_BUSIF"] == "s_axis:m_axis:s_wload"
    assert ("s_axis_tdata", "in", 24) in _ports(root)
    assert ("s_wload_tready", "out", 1) in _ports(root)
    assert "12 words of 16 bits on s_wload" in _text(root, "spirit:description")

    bad = verilog.replace("s_wload_tready", "s_wload_rdy")
    with pytest.raises(HwgenError, match="s_wload_tready"):
        component_xml(manifest, bad)
