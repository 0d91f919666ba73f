"""What a compiled output folder holds, and how to read it back.

``DIR/<top>.v``       the Verilog (one file, top module ``<top>``)
``DIR/manifest.json`` interfaces, layers, folding, estimates and the integer graph's parameters
``DIR/design.npz``    the integer graph's arrays (weights, biases), so the design can be rebuilt
                      (Amaranth simulation, golden model) without the ONNX model
"""
from __future__ import annotations

import dataclasses
import io
import json
import zipfile
from pathlib import Path

import numpy as np

from hwgen import __version__
from hwgen.dataflow.intgraph import IntGraph, QTensor, Window
from hwgen.dataflow.lower import DataflowGraph, Folding
from hwgen.dataflow.operators import op_class
from hwgen.dataflow.values import channel_last_order
from hwgen.errors import HwgenError
from hwgen.rtl_templates.quant import QType, Requant
from hwgen.rtl_templates.xnor_mvau import BIPOLAR

MANIFEST_VERSION = 1


def element_order(onnx_shape, order) -> str:
    if order is None:
        return "row-major (C order) over the ONNX shape without its batch axis"
    if len(onnx_shape) == 4 and np.array_equal(order, channel_last_order(tuple(onnx_shape[1:]))):
        return "channel-last: pixels in raster order (H, then W), channels innermost"
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
                           "stride": list(v.stride), "pads": list(v.pads)}}
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
                      tuple(w["pads"]))
    return v


def intgraph_json(ig: IntGraph) -> tuple[dict, dict[str, np.ndarray]]:
    """The integer graph as JSON (small fields) + arrays (weights, biases, counts)."""
    arrays = {}
    for key in ("input_order", "output_order"):
        if getattr(ig, key) is not None:
            arrays[key] = np.asarray(getattr(ig, key), dtype=np.int64)
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
    return doc, arrays


def _qtype(name: str) -> QType:
    """Inverse of ``QType.name``: "int8" → QType(8, True), "uint4" → QType(4, False)."""
    if name == "bipolar":  # ±1, one bit per element (rtl_templates/xnor_mvau.py)
        return BIPOLAR
    signed = name.startswith("int")
    return QType(int(name[3:] if signed else name[4:]), signed)


def intgraph_from(doc: dict, arrays) -> IntGraph:
    ig = IntGraph(tensors={})
    for t in doc["tensors"]:
        ig.tensors[t["name"]] = QTensor(t["name"], tuple(t["shape"]), _qtype(t["type"]),
                                        t["scale"], t["zero_point"])
    for o in doc["ops"]:
        cls = op_class(o["op"])
        ig.ops.append(cls(**{f.name: _field_from(o[f.name], arrays)
                             for f in dataclasses.fields(cls)}))
    for key in ("input", "output", "onnx_input", "onnx_output", "output_dequantized"):
        setattr(ig, key, doc[key])
    ig.input_order = arrays.get("input_order")
    ig.output_order = arrays.get("output_order")
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


def load(out_dir) -> tuple[dict, IntGraph, dict[str, Folding]]:
    """Read a compiled folder: (manifest, integer graph, folding)."""
    d = Path(out_dir)
    mpath = d / "manifest.json"
    if not mpath.is_file():
        raise HwgenError(f"{d}: not a compiled hwgen folder (no manifest.json)")
    try:
        manifest = json.loads(mpath.read_text())
        if manifest.get("format") != "hwgen-manifest":
            raise ValueError("not an hwgen manifest")
        with np.load(d / "design.npz", allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        ig = intgraph_from(manifest["integer_graph"], arrays)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise HwgenError(f"{d}: cannot read the compiled design ({e})") from None
    folding = {name: Folding(**f) for name, f in manifest["folding"].items()}
    return manifest, ig, folding


def manifest_json(name: str, model_file: str, model_sha: str, ig: IntGraph,
                  dfg: DataflowGraph, onnx_in_shape, onnx_out_shape, in_width: int,
                  out_width: int) -> dict:
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
        "ports": {
            "clock": "clk", "reset": "rst (synchronous, active high)",
            "input": {"tdata": "s_axis_tdata", "bits": in_width, "tvalid": "s_axis_tvalid",
                      "tready": "s_axis_tready",
                      "tlast": "s_axis_tlast (accepted, not used: frames are counted)"},
            "output": {"tdata": "m_axis_tdata", "bits": out_width, "tvalid": "m_axis_tvalid",
                       "tready": "m_axis_tready",
                       "tlast": "m_axis_tlast (high on the last beat of each frame)"},
        },
        "input": tensor_json(dfg.input, ig.onnx_input, onnx_in_shape, dfg.in_per_beat,
                             ig.input_order),
        "output": dict(tensor_json(dfg.output, ig.onnx_output, onnx_out_shape,
                                   dfg.out_per_beat, ig.output_order),
                       dequantized=ig.output_dequantized),
        "folding": {name: {"pe": f.pe, "simd": f.simd} for name, f in dfg.folding.items()},
        "layers": layers,
        "streams": {n: {"type": st.qtype.name, "elements_per_beat": st.per_beat,
                        "elements_per_frame": st.elements, "bits": st.width}
                    for n, st in dfg.streams.items()},
        "estimate": dfg.estimate(),
        "integer_graph": intgraph_json(ig)[0],
    }
