"""What a compiled output folder holds, and how to read it back.

``DIR/<top>.v``       the Verilog (one file, top module ``<top>``)
``DIR/manifest.json`` interfaces, layers, folding, estimates and the integer graph's parameters
``DIR/design.npz``    the integer graph's arrays (weights, biases), so the design can be rebuilt
                      (Amaranth simulation, golden model) without the ONNX model
"""
from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import math
import re
import zipfile
import zlib
from pathlib import Path

import numpy as np

from hwgen import __version__
from hwgen.dataflow.host_tail import tail_nodes, tail_output
from hwgen.dataflow.intgraph import IntGraph, PreOp, QTensor, Window
from hwgen.dataflow.lower import DataflowGraph, Folding, lower
from hwgen.dataflow.operators import op_class
from hwgen.dataflow.values import channel_last_order
from hwgen.dataflow.weight_load import load_manifest
from hwgen.errors import HwgenError
from hwgen.io import DESIGN_NPZ, IPXACT, MANIFEST, plain_file_name
from hwgen.rtl_templates.axis_top import axis_width
from hwgen.rtl_templates.quant import QType, Requant
from hwgen.rtl_templates.xnor_mvau import BIPOLAR
from hwgen.sim.base import StreamJob
from hwgen.sim.native import port_widths

#: 2: the manifest records the SHA-256 of the Verilog and of design.npz (``files``)
MANIFEST_VERSION = 2
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: widest element type a design folder may name (the block library's types are narrower)
MAX_ELEMENT_BITS = 32


def element_order(onnx_shape, order) -> str:
    if order is None:
        return "row-major (C order) over the ONNX shape without its batch axis"
    if len(onnx_shape) == 4 and np.array_equal(order, channel_last_order(tuple(onnx_shape[1:]))):
        return "channel-last: pixels in raster order (H, then W), channels innermost"
    if len(onnx_shape) == 3 and np.array_equal(order, channel_last_order(tuple(onnx_shape[1:]))):
        return "channel-last: positions in order (L), channels innermost"
    return "permuted: stream element k is ONNX element design.npz[input_order|output_order][k]"


def tensor_json(t: QTensor, onnx_name: str, onnx_shape, per_beat: int, order=None) -> dict:
    return {
        "onnx_name": onnx_name,
        "onnx_shape": list(onnx_shape),
        "frame_elements": t.size,
        "element_type": t.qtype.name,
        "scale": float(t.scale),
        "zero_point": int(t.zero_point),
        "element_order": element_order(onnx_shape, order),
        "elements_per_beat": per_beat,
        "beats_per_frame": t.size // per_beat,
        "packing": f"element k of a beat in tdata[{t.qtype.bits}*k +: {t.qtype.bits}]"
                   + (", two's complement" if t.qtype.signed else ""),
        "tensor": t.name,
    }


def _field_json(name: str, v, k: int, arrays: dict):
    if isinstance(v, np.ndarray):
        arrays[f"op{k}_{name}"] = np.asarray(v, dtype=np.int64)
        return {"array": f"op{k}_{name}"}
    if isinstance(v, Requant):
        return {"requant": {"mult": [int(m) for m in v.mult], "shift": v.shift,
                            "zero_point": v.zero_point, "lo": v.lo, "hi": v.hi,
                            "zp_first": v.zp_first}}
    if isinstance(v, Window):
        return {"window": {"in_shape": list(v.in_shape), "kernel": list(v.kernel),
                           "stride": list(v.stride), "pads": list(v.pads),
                           "dilation": list(v.dilation)}}
    return v


def _field_from(v, arrays):
    if isinstance(v, dict) and "array" in v:
        return arrays[v["array"]]
    if isinstance(v, dict) and "requant" in v:
        r = v["requant"]
        return Requant(tuple(r["mult"]), r["shift"], r["zero_point"], r["lo"], r["hi"],
                       r.get("zp_first", False))
    if isinstance(v, dict) and "window" in v:
        w = v["window"]
        return Window(tuple(w["in_shape"]), tuple(w["kernel"]), tuple(w["stride"]),
                      tuple(w["pads"]), tuple(w.get("dilation", (1, 1))))
    return v


def intgraph_json(ig: IntGraph) -> tuple[dict, dict[str, np.ndarray]]:
    """The integer graph as JSON (small fields) + arrays (weights, biases, counts)."""
    arrays = {}
    for key in ("input_order", "output_order"):
        if getattr(ig, key) is not None:
            arrays[key] = np.asarray(getattr(ig, key), dtype=np.int64)
    for key in ("output_scale", "output_offset"):
        if getattr(ig, key) is not None:
            arrays[key] = np.asarray(getattr(ig, key), dtype=np.float32)
    if ig.host_tail:
        arrays["host_tail"] = np.frombuffer(ig.host_tail, dtype=np.uint8)
    pre = []
    for k, p in enumerate(ig.input_pre):
        arrays[f"input_pre_{k}"] = np.asarray(p.const, dtype=np.float32)
        pre.append({"op": p.op, "const_first": bool(p.const_first)})
    ops = []
    for k, op in enumerate(ig.ops):
        entry = {"op": type(op).__name__}
        for f in dataclasses.fields(op):
            entry[f.name] = _field_json(f.name, getattr(op, f.name), k, arrays)
        ops.append(entry)
    doc = {
        "tensors": [{"name": t.name, "shape": list(t.shape), "type": t.qtype.name,
                     "scale": float(t.scale), "zero_point": int(t.zero_point)}
                    for t in ig.tensors.values()],
        "ops": ops,
        "input": ig.input, "output": ig.output, "onnx_input": ig.onnx_input,
        "onnx_output": ig.onnx_output, "output_dequantized": ig.output_dequantized,
    }
    if pre:
        doc["input_pre"] = pre
    if ig.input_bounds is not None:
        doc["input_bounds"] = [int(v) for v in ig.input_bounds]
    return doc, arrays


def _qtype(name) -> QType:
    """Inverse of ``QType.name``: "int8" → QType(8, True), "uint4" → QType(4, False);
    anything else (or wider than MAX_ELEMENT_BITS) is a ValueError."""
    if name == "bipolar":  # ±1, one bit per element (rtl_templates/xnor_mvau.py)
        return BIPOLAR
    m = re.fullmatch(r"(u?)int([1-9][0-9]?)", name) if isinstance(name, str) else None
    if not m or int(m.group(2)) > MAX_ELEMENT_BITS:
        raise ValueError(f"element type {name!r} is not one of uint1..uint{MAX_ELEMENT_BITS}, "
                         f"int1..int{MAX_ELEMENT_BITS}, bipolar")
    return QType(int(m.group(2)), not m.group(1))


def intgraph_from(doc: dict, arrays) -> IntGraph:
    ig = IntGraph(tensors={})
    for t in doc["tensors"]:
        ig.tensors[t["name"]] = QTensor(t["name"], tuple(t["shape"]), _qtype(t["type"]),
                                        t["scale"], t["zero_point"])
    for o in doc["ops"]:
        cls = op_class(o["op"])
        # a field with a default that an older hwgen did not write takes its default
        ig.ops.append(cls(**{f.name: _field_from(o[f.name], arrays)
                             for f in dataclasses.fields(cls)
                             if f.name in o or (f.default is dataclasses.MISSING
                                                and f.default_factory is dataclasses.MISSING)}))
    for key in ("input", "output", "onnx_input", "onnx_output", "output_dequantized"):
        setattr(ig, key, doc[key])
    ig.input_order = arrays.get("input_order")
    ig.output_order = arrays.get("output_order")
    ig.output_scale = arrays.get("output_scale")
    ig.output_offset = arrays.get("output_offset")
    if "host_tail" in arrays:
        ig.host_tail = np.asarray(arrays["host_tail"], np.uint8).tobytes()
    ig.input_pre = tuple(PreOp(p["op"], np.asarray(arrays[f"input_pre_{k}"], np.float32),
                               bool(p["const_first"]))
                         for k, p in enumerate(doc.get("input_pre", [])))
    if doc.get("input_bounds") is not None:
        ig.input_bounds = tuple(int(v) for v in doc["input_bounds"])
    return ig


def save_npz(path: Path, arrays: dict[str, np.ndarray]):
    """Like ``np.savez`` but byte-for-byte deterministic (fixed zip timestamps)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name in sorted(arrays):
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.ascontiguousarray(arrays[name]), allow_pickle=False)
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, buf.getvalue())


def file_hash(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class _Bad(Exception):
    """A field of the manifest is missing or wrong (message: what and why)."""


def _at(doc, path: str, kind, check=None, why: str = "", within: str = ""):
    """The manifest field ``path`` ("input.elements_per_beat") of ``doc`` (itself at
    ``within``): of type ``kind`` (int excludes bool) and passing ``check``."""
    v = doc
    keys = path.split(".")
    path = ".".join([within] + keys) if within else path
    for k in keys:
        if not isinstance(v, dict) or k not in v:
            raise _Bad(f"{path} is missing")
        v = v[k]
    ok = isinstance(v, kind) and not (isinstance(v, bool) and bool not in
                                      (kind if isinstance(kind, tuple) else (kind,)))
    if ok and isinstance(v, float):
        ok = math.isfinite(v)
    if not ok or (check is not None and not check(v)):
        raise _Bad(f"{path} must be {why or getattr(kind, '__name__', kind)} (got {v!r:.60})")
    return v


def _pos(v) -> bool:
    return v >= 1


def _check_stream(m: dict, side: str):
    """The interface fields of ``input`` or ``output``, and their consistency."""
    _at(m, f"{side}.onnx_name", str)
    _at(m, f"{side}.onnx_shape", list, lambda s: all(
        (isinstance(d, int) and not isinstance(d, bool) and d >= 1) or d == "N" for d in s),
        "a list of positive integers and \"N\"")
    n = _at(m, f"{side}.frame_elements", int, _pos, "an integer ≥ 1")
    qt = _at(m, f"{side}.element_type", str)
    try:
        qt = _qtype(qt)
    except ValueError as e:
        raise _Bad(f"{side}.element_type: {e}") from None
    _at(m, f"{side}.scale", (int, float), lambda v: v > 0, "a positive number")
    _at(m, f"{side}.zero_point", int, lambda v: qt.lo <= v <= qt.hi,
        f"an integer in [{qt.lo}, {qt.hi}]")
    epb = _at(m, f"{side}.elements_per_beat", int, lambda v: v >= 1 and n % v == 0,
              f"an integer ≥ 1 dividing frame_elements {n}")
    _at(m, f"{side}.beats_per_frame", int, lambda v: v == n // epb,
        f"frame_elements / elements_per_beat = {n // epb}")
    port = "input" if side == "input" else "output"
    _at(m, f"ports.{port}.bits", int, lambda v: v == axis_width(epb * qt.bits),
        f"{axis_width(epb * qt.bits)} ({epb} elements of {qt.name}, whole bytes)")


def _check_manifest(m):
    """Every field :func:`load` and the simulators read, before anything is built."""
    if not isinstance(m, dict):
        raise _Bad(f"is a JSON {type(m).__name__}, not an hwgen manifest (an object)")
    if m.get("format") != "hwgen-manifest":
        raise _Bad('is not an hwgen manifest ("format" is not "hwgen-manifest")')
    _at(m, "version", int, lambda v: v == MANIFEST_VERSION,
        f"{MANIFEST_VERSION} (compile the model again with this hwgen)")
    top = _at(m, "top", str, IDENTIFIER.fullmatch,
              "a Verilog identifier (letters, digits, _; not starting with a digit)")
    _at(m, "verilog", str, lambda v: v == f"{top}.v", f'"{top}.v" (the top module\'s file)')
    _at(m, "files", dict, lambda f: set(f) - {IPXACT} == {f"{top}.v", DESIGN_NPZ} and all(
        isinstance(h, str) and re.fullmatch(r"[0-9a-f]{64}", h) for h in f.values()),
        f'{{"{top}.v": sha256, "{DESIGN_NPZ}": sha256}} (and "{IPXACT}": sha256)')
    for side in ("input", "output"):
        _check_stream(m, side)
    _at(m, "output.dequantized", bool)
    _at(m, "estimate.latency_cycles", int, lambda v: v >= 0, "an integer ≥ 0")
    _at(m, "estimate.cycles_per_frame", int, _pos, "an integer ≥ 1")
    _at(m, "estimate.bottleneck", str)
    _at(m, "folding", dict)
    for name in m["folding"]:
        for k in ("pe", "simd"):
            # a layer name may hold dots ("/net/net.0/Gemm"): no dotted path through it
            _at(m["folding"][name], k, int, _pos, "an integer ≥ 1", f"folding.{name}")
        if not {"pe", "simd"} <= set(m["folding"][name]) <= {"pe", "simd", "spram", "lut_lanes",
                                                              "rom_logic", "sequential"}:
            raise _Bad(f"folding.{name} must hold pe and simd (and spram, lut_lanes, "
                       f"rom_logic, sequential)")
        for flag in ("spram", "rom_logic", "sequential"):
            if flag in m["folding"][name]:
                _at(m["folding"][name], flag, bool, within=f"folding.{name}")
        if "lut_lanes" in m["folding"][name]:
            _at(m["folding"][name], "lut_lanes", int, _pos, "an integer ≥ 1",
                f"folding.{name}")
    ig = _at(m, "integer_graph", dict)
    for key in ("input", "output", "onnx_input", "onnx_output"):
        _at(ig, key, str, within="integer_graph")
    _at(ig, "output_dequantized", bool, within="integer_graph")
    for k, t in enumerate(_at(m, "integer_graph.tensors", list)):
        at = f"integer_graph.tensors[{k}]"
        if not isinstance(t, dict):
            raise _Bad(f"{at} must be an object")
        _at(t, "name", str, within=at)
        _at(t, "shape", list, lambda s: all(isinstance(d, int) and not isinstance(d, bool)
                                            and d >= 1 for d in s), "positive integers", at)
        try:
            qt = _qtype(_at(t, "type", str, within=at))
        except ValueError as e:
            raise _Bad(f"{at}.type: {e}") from None
        _at(t, "scale", (int, float), lambda v: v > 0, "a positive number", at)
        _at(t, "zero_point", int, lambda v, qt=qt: qt.lo <= v <= qt.hi,
            f"in [{qt.lo}, {qt.hi}]", at)
    for k, o in enumerate(_at(m, "integer_graph.ops", list)):
        at = f"integer_graph.ops[{k}]"
        if not isinstance(o, dict):
            raise _Bad(f"{at} must be an object")
        for name, v in o.items():
            if isinstance(v, dict) and "requant" in v:
                r, at_r = v["requant"], f"{at}.{name}.requant"
                _at(r, "mult", list, lambda ms: all(isinstance(x, int) and
                                                    not isinstance(x, bool) for x in ms),
                    "a list of integers", at_r)
                _at(r, "shift", int, lambda x: 0 <= x <= 128, "an integer in [0, 128]", at_r)
                lo = _at(r, "lo", int, within=at_r)
                _at(r, "hi", int, lambda x, lo=lo: x >= lo, "an integer ≥ lo", at_r)
                _at(r, "zero_point", int, within=at_r)


def _check_files(d: Path, m: dict):
    """The Verilog and design.npz are plain files in ``d`` with the hashes compile recorded
    (component.xml is not read: Vivado's IP packager may rewrite it)."""
    root = d.resolve()
    for name, sha in m["files"].items():
        if name == IPXACT:
            continue
        p = d / name
        if not plain_file_name(name) or not p.resolve().is_relative_to(root):
            raise HwgenError(f"{d}: {MANIFEST} names the file {name!r} outside the folder")
        if not p.is_file():
            raise HwgenError(f"{d}: {name} is missing")
        try:
            if file_hash(p) != sha:
                raise HwgenError(f"{d}: {name} was changed after compile (hash mismatch)")
        except OSError as e:
            raise HwgenError(f"{d}: cannot read {name} ({e.strerror})") from None


def _check_rebuilt(d: Path, m: dict, ig: IntGraph, folding: dict[str, Folding]):
    """The rebuilt design must have the interface and estimate the manifest states, and the
    Verilog the port widths."""
    dfg = lower(ig, folding)
    for side, t, per_beat in (("input", dfg.input, dfg.in_per_beat),
                              ("output", dfg.output, dfg.out_per_beat)):
        mine = m[side]
        want = {"frame_elements": t.size, "element_type": t.qtype.name,
                "zero_point": int(t.zero_point), "elements_per_beat": per_beat,
                "scale": float(t.scale)}
        for k, v in want.items():
            if mine[k] != v:
                raise _Bad(f"{side}.{k} is {mine[k]!r}, the integer graph gives {v!r}")
    est = dfg.estimate()
    for k in ("latency_cycles", "cycles_per_frame", "bottleneck"):
        if m["estimate"][k] != est[k]:
            raise _Bad(f"estimate.{k} is {m['estimate'][k]!r}, the design gives {est[k]!r}")
    text = (d / m["verilog"]).read_text(errors="replace")
    widths = port_widths(text, m["top"], StreamJob(0, 0, [], [], 0))
    for port, side in (("s_axis_tdata", "input"), ("m_axis_tdata", "output")):
        if widths[port] != m["ports"][side]["bits"]:
            raise _Bad(f"ports.{side}.bits is {m['ports'][side]['bits']}, the Verilog's "
                       f"{port} has {widths[port]}")


def load(out_dir) -> tuple[dict, IntGraph, dict[str, Folding]]:
    """Read a compiled folder: (manifest, integer graph, folding). Every field used is
    checked first, and the Verilog and design.npz against the hashes recorded at compile
    time; whatever is wrong is one :class:`HwgenError` line."""
    d = Path(out_dir)
    mpath = d / MANIFEST
    if not mpath.is_file():
        raise HwgenError(f"{d}: not a compiled hwgen folder (no {MANIFEST})")
    try:
        manifest = json.loads(mpath.read_text())
    except OSError as e:
        raise HwgenError(f"{d}: cannot read {MANIFEST} ({e.strerror})") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise HwgenError(f"{d}: {MANIFEST} is not valid JSON ({e})") from None
    try:
        _check_manifest(manifest)
    except _Bad as e:
        raise HwgenError(f"{d}: {MANIFEST}: {e}") from None
    _check_files(d, manifest)
    try:
        with np.load(d / DESIGN_NPZ, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as e:
        raise HwgenError(f"{d}: cannot read {DESIGN_NPZ} ({e})") from None
    try:
        ig = intgraph_from(manifest["integer_graph"], arrays)
        folding = {name: Folding(**f) for name, f in manifest["folding"].items()}
        _check_rebuilt(d, manifest, ig, folding)
    except _Bad as e:
        raise HwgenError(f"{d}: {MANIFEST}: {e}") from None
    except (HwgenError, KeyError, TypeError, ValueError, AttributeError, IndexError,
            ZeroDivisionError, OverflowError, RecursionError) as e:
        msg = str(e) or type(e).__name__
        raise HwgenError(f"{d}: cannot rebuild the compiled design ({msg})") from None
    return manifest, ig, folding


def manifest_json(name: str, model_file: str, model_sha: str, ig: IntGraph,
                  dfg: DataflowGraph, onnx_in_shape, onnx_out_shape, in_width: int,
                  out_width: int, files: dict[str, str], target: dict | None = None) -> dict:
    """The manifest; ``files`` maps the Verilog's and design.npz's names to their SHA-256."""
    layers = []
    for b in dfg.blocks:
        entry = {"name": b.name, "block": b.kind, "inputs": list(b.inputs),
                 "outputs": list(b.outputs)}
        if b.layer:
            entry["layer"] = b.layer
            entry["onnx_nodes"] = list(b.onnx_nodes)
        entry.update(b.spec.manifest(b.params))
        entry["estimate"] = b.cost.as_dict()
        layers.append(entry)
    return {
        "format": "hwgen-manifest",
        "version": MANIFEST_VERSION,
        "hwgen": __version__,
        "model": {"file": model_file, "sha256": model_sha},
        "top": name,
        "verilog": f"{name}.v",
        "files": dict(sorted(files.items())),
        "ports": {
            "clock": "clk", "reset": "rst (synchronous, active high)",
            "input": {"tdata": "s_axis_tdata", "bits": in_width, "tvalid": "s_axis_tvalid",
                      "tready": "s_axis_tready",
                      "tlast": "s_axis_tlast (accepted, not used: frames are counted)"},
            "output": {"tdata": "m_axis_tdata", "bits": out_width, "tvalid": "m_axis_tvalid",
                       "tready": "m_axis_tready",
                       "tlast": "m_axis_tlast (high on the last beat of each frame)"},
        } | ({"weight_load": load} if (load := load_manifest(dfg)) else {}),
        "input": tensor_json(dfg.input, ig.onnx_input, onnx_in_shape, dfg.in_per_beat,
                             ig.input_order),
        "output": dict(tensor_json(dfg.output, ig.onnx_output, onnx_out_shape,
                                   dfg.out_per_beat, ig.output_order),
                       dequantized=ig.output_dequantized,
                       **({"scale_per_channel": [float(v) for v in ig.output_scale]}
                          if ig.output_scale is not None else {}),
                       **({"float_bias_per_channel": [float(v) for v in ig.output_offset]}
                          if ig.output_offset is not None else {})),
        "folding": {name: f.as_dict() for name, f in dfg.folding.items()},
        "layers": layers,
        "streams": {n: {"type": st.qtype.name, "elements_per_beat": st.per_beat,
                        "elements_per_frame": st.elements, "bits": st.width}
                    for n, st in dfg.streams.items()},
        "estimate": dfg.estimate(),
        "target": target,
        "integer_graph": intgraph_json(ig)[0],
    } | ({"host_tail": {"ops": tail_nodes(ig.host_tail), "input": ig.onnx_output,
                        "output": tail_output(ig.host_tail), "file": f"{DESIGN_NPZ}:host_tail",
                        "runs": "on the host, in float, on the output's real values"}}
         if ig.host_tail else {})
