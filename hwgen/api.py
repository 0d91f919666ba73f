"""The Python API: compile, simulate, verify. The CLI is a thin layer over these."""
from __future__ import annotations

import hashlib
import json
import re
import shutil
import tempfile
import weakref
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hwgen import design
from hwgen.assemble import ASSEMBLIES, to_verilog, whole_verilog
from hwgen.boards.boards import AUTO_BOARD
from hwgen.boards.devices import check_memory
from hwgen.boards.fold import (
    AutoBoard,
    FitReport,
    SearchMemo,
    fold_auto,
    fold_for_device,
    report,
    resolve_target,
)
from hwgen.dataflow import golden
from hwgen.dataflow.host_tail import run_tail, tail_nodes, tail_output
from hwgen.dataflow.importer import load_model, to_int_graph, walk
from hwgen.dataflow.lower import DEFAULT_TARGET_CYCLES, DataflowGraph, Folding, lower
from hwgen.dataflow.operators import is_float_model
from hwgen.dataflow.ops_qonnx import is_qonnx_model
from hwgen.dataflow.weight_load import loaders
from hwgen.errors import HwgenError
from hwgen.io import (
    DESIGN_NPZ,
    IPXACT,
    MANIFEST,
    check_input_shape,
    check_no_nan,
    check_output_dir,
    check_output_path,
    first_samples,
    output_dir,
    read_input,
    read_labels,
)
from hwgen.ipxact import component_xml
from hwgen.link_verify import LinkReport, verify_link
from hwgen.progress import QUIET, Progress
from hwgen.quantize import float_model_error, float_top1, quantized_copy
from hwgen.reference import (
    LayerReport,
    TailAgreement,
    check_reference_batch,
    layer_agreement,
    reference_outputs,
)
from hwgen.simrun import (  # noqa: F401 - SIMULATORS, parse_frames: for the CLI
    SIMULATORS,
    Batch,
    WaveRequest,
    parse_frames,
    run_frames,
)
from hwgen.trace import TraceReport, compare

# ------------------------------------------------------------------------------- compile

@dataclass
class CompileResult:
    out_dir: Path
    verilog: Path
    manifest: dict
    fit: FitReport | None = None
    #: ``out_dir`` is a temporary folder (:func:`verify` without ``out_dir``), removed when
    #: this result is garbage collected or the interpreter exits
    temporary: bool = False

    @property
    def estimate(self) -> dict:
        return self.manifest["estimate"]

    def __repr__(self) -> str:
        e, t = self.estimate, self.manifest.get("target") or {}
        where = (t.get("board") or {}).get("name") or (t.get("device") or {}).get("name")
        kept = ", temporary=True" if self.temporary else ""
        return (f"CompileResult(top={self.manifest['top']!r}, out_dir='{self.out_dir}'{kept}, "
                f"cycles_per_frame={e['cycles_per_frame']}, "
                f"bottleneck={e['bottleneck']!r}, latency_cycles={e['latency_cycles']}, "
                f"target={where!r}, fits={t.get('fits')})")

    @property
    def target(self) -> dict:
        """The board/device folded for, the budget, the use of each resource kind, the
        interval and its bound (the manifest's ``target``)."""
        return self.manifest["target"]


def read_folding(path) -> dict[str, Folding]:
    p = Path(path)
    try:
        doc = json.loads(p.read_text())
    except OSError as e:
        raise HwgenError(f"{p}: cannot read the folding file ({e.strerror})") from None
    except json.JSONDecodeError as e:
        raise HwgenError(f"{p}: not valid JSON (line {e.lineno}: {e.msg})") from None
    if not isinstance(doc, dict):
        raise HwgenError(f'{p}: expected an object {{"layer": {{"pe": P, "simd": S}}, ...}}')
    out = {}
    for name, f in doc.items():
        flags = ("spram", "rom_logic", "sequential")
        if not isinstance(f, dict) or set(f) - {"pe", "simd", "lut_lanes", *flags} or not all(
                isinstance(v, int) and not isinstance(v, bool) for k, v in f.items()
                if k not in flags) or not all(isinstance(f.get(k, False), bool)
                                              for k in flags):
            raise HwgenError(f'{p}: layer {name}: expected {{"pe": int, "simd": int}} '
                             f'(and "spram": true|false, "lut_lanes": int, "rom_logic": '
                             f'true|false, "sequential": true|false), got {f!r}')
        out[name] = Folding(**f)
    return out


def _check_name(name: str) -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise HwgenError(f"module name '{name}' is not a plain Verilog identifier "
                         f"(letters, digits, _; not starting with a digit)")
    return name


def _int_graph(model: Path):
    """(loaded graph, integer graph) of the quantized ``model`` (a float model is refused in
    one line)."""
    graph = load_model(model, upgrade=True)
    if is_float_model(graph):
        raise float_model_error(model, graph)
    try:
        return graph, to_int_graph(graph)
    except HwgenError as e:
        raise HwgenError(f"{model.name}: {e}") from None


def _top_name(model_path: Path) -> str:
    base = "".join(c if c.isalnum() or c == "_" else "_" for c in model_path.stem)
    return base if base and not base[0].isdigit() else f"m_{base}"


def auto_board(model, fold=None, target_cycles: int | None = None, budget=None,
               logic_lanes=None, uart: bool = False) -> tuple[str, str]:
    """``--board auto`` before any other work: the board :func:`compile` folds the quantized
    ``model`` for (the smallest that fits; ``uart``: of the boards with a USB-serial UART)
    and why, in one phrase."""
    target = resolve_target(AUTO_BOARD, None, budget, logic_lanes, uart=uart)
    model = Path(model)
    _, ig = _int_graph(model)
    folding = read_folding(fold) if isinstance(fold, (str, Path)) else fold
    _, fit = fold_design(ig, model.name, fold, folding, target_cycles, target)
    return fit.target.label, fit.choice


def compile(model, out_dir, fold=None, name: str | None = None,
            target_cycles: int | None = None, *, calibration=None, per_channel: bool = False,
            symmetric: bool = False, activation_type: str = "uint8",
            force: bool = False, board: str | None = None, device: str | None = None,
            budget: float | None = None, jobs: int | None = None,
            cache: bool = True, assembly: str = "blocks",
            logic_lanes: str | bool | None = None, ip_xact: bool = False) -> CompileResult:
    """ONNX model → ``out_dir``/<name>.v + manifest.json + design.npz (atomically); with
    ``ip_xact`` also component.xml, the design's IP-XACT description for Vivado's IP catalog
    (:func:`hwgen.ipxact.component_xml`), in the same atomic write and in the manifest's files.

    ``out_dir`` must be new, empty or an earlier output of hwgen holding nothing else; with
    ``force`` it may hold other files, which are left alone (only hwgen's three files are
    replaced). The model's own folder, the current folder and their parents are refused.

    Folding: for the device of ``board`` or ``device`` at ``budget`` (a fraction of each
    resource, default 0.85), every layer's PE/SIMD chosen for the shortest interval that fits
    (:func:`hwgen.boards.fold.fold_for_device`); a model that fits at no folding is refused.
    Without ``board`` and ``device`` (or with ``board="auto"``) the board is chosen: the
    smallest listed board the model fits, at the shortest interval it fits there
    (:func:`hwgen.boards.fold.fold_auto`; ``result.fit.choice`` and the manifest's
    ``target.board_choice`` say which and why); a model that fits none is refused for the
    largest.
    ``logic_lanes``: where the search may build products of logic cells once the DSP tiles
    are spent (:data:`hwgen.boards.fold.LOGIC_LANES`): by default for targets down to the
    device's bound (the model's MACs ÷ its DSP lanes), "all" below it (such designs fill most of the
    device's logic and close a lower clock), "dsp" never.
    ``fold`` (a FOLD.json path or {layer: Folding}) or ``target_cycles`` overrides that: the
    layers ``fold`` fixes take it, the others the smallest PE/SIMD reaching ``target_cycles``
    per frame (default ``dataflow.lower.DEFAULT_TARGET_CYCLES``), and the fit on the device
    is only reported (the manifest's ``target``; chosen automatically, the board is the
    smallest that design fits).

    A float model needs ``calibration`` (.npy/.npz path or array, batch axis first): it is
    quantized with onnxruntime first (:func:`hwgen.quantize.quantize`, with
    ``per_channel``/``symmetric``/``activation_type``) into a temporary file of the same
    name, which is what gets compiled.

    The Verilog is converted block by block (:func:`hwgen.assemble.to_verilog`) in ``jobs``
    processes (default: the usable cores), reusing the per-block Verilog cache unless
    ``cache`` is false; the output is the same for any ``jobs`` and cache state.
    ``assembly="whole"`` converts the design as one Amaranth design instead
    (:func:`hwgen.assemble.whole_verilog`: slower, the same hardware cycle for cycle)."""
    check_output_path(out_dir, model)
    if jobs is not None and jobs < 1:
        raise HwgenError(f"jobs must be at least 1 (got {jobs})")
    if assembly not in ASSEMBLIES:
        raise HwgenError(f"assembly must be one of {', '.join(ASSEMBLIES)} (got {assembly!r})")
    resolve_target(board, device, budget, logic_lanes)   # a bad option fails before any work
    if calibration is not None:
        if isinstance(fold, (str, Path)):
            read_folding(fold)  # a bad folding file fails before the quantization
        with quantized_copy(model, calibration, per_channel, symmetric,
                            activation_type) as (qdq, _):
            return _compile(qdq, Path(out_dir), fold, name, target_cycles, model, force,
                            board, device, budget, jobs, cache, assembly, logic_lanes,
                            ip_xact)
    return _compile(Path(model), Path(out_dir), fold, name, target_cycles, model, force,
                    board, device, budget, jobs, cache, assembly, logic_lanes, ip_xact)


def fold_design(ig, model_name: str, fold, folding, target_cycles, target, *,
                partial: bool = False, sources=None, memo: SearchMemo | None = None,
                graph: bool = True):
    """The dataflow graph of ``ig`` and its :class:`~hwgen.boards.fold.FitReport` on
    ``target``: searched for the device unless ``folding``/``target_cycles`` are given (then
    only reported). A model that fits at no folding is refused (not with ``partial``).
    ``target`` an :class:`~hwgen.boards.fold.AutoBoard` (``--board auto``, the default): the
    smallest board the design fits (:func:`~hwgen.boards.fold.fold_auto`). ``memo``: what
    calls for other targets (same graph and options) share
    (:class:`~hwgen.boards.fold.SearchMemo`); without ``graph`` a search the model does not
    fit may give no graph, only the report (:func:`~hwgen.boards.fold.fold_for_device`)."""
    if isinstance(target, AutoBoard):
        memo = SearchMemo() if memo is None else memo
        return fold_auto(target, lambda t, graph: fold_design(
            ig, model_name, fold, folding, target_cycles, t, partial=partial, sources=sources,
            memo=memo, graph=graph))
    if folding is None and target_cycles is None:
        _, dfg, fit = fold_for_device(ig, target, partial=partial, sources=sources,
                                      refuse=not partial, what=model_name, memo=memo,
                                      graph=graph)
        return dfg, fit
    if target_cycles is not None and target_cycles < 1:
        raise HwgenError(f"target cycles must be at least 1 (got {target_cycles})")
    spram = sorted(n for n, f in (folding or {}).items() if f.spram)
    if spram and not target.device.spram_blocks:
        raise HwgenError(f"{fold}: layer {spram[0]}: \"spram\": true needs a device with SPRAM "
                         f"(ice40-up5k), not {target.device.id}")
    cycles = DEFAULT_TARGET_CYCLES if target_cycles is None else target_cycles
    if memo is not None and memo.lowered is not None:
        dfg = memo.lowered              # the same folding, lowered for an earlier target
    else:
        try:
            dfg = lower(ig, folding, cycles, partial=partial, sources=sources)
        except HwgenError as e:
            raise HwgenError(f"{fold}: {e}" if isinstance(fold, (str, Path))
                             else str(e)) from None
        if memo is not None:
            memo.lowered = dfg
    loaded = {b.layer for b in loaders(dfg)}
    if [n for n in spram if n not in loaded]:
        raise HwgenError(f"{fold}: layer {next(n for n in spram if n not in loaded)}: "
                         f"\"spram\": true applies to matrix layers (fully connected and "
                         f"non-depthwise convolutions) only")
    method = (f"fold file {Path(fold).name}" if isinstance(fold, (str, Path))
              else "fold" if folding else "")
    if folding is None or set(folding) != {op.name for op in ig.ops}:
        method = (method + ", " if method else "") + f"target cycles {cycles}"
    return dfg, report(dfg, ig, target, method, memo=memo)


def _verilog(dfg, name: str, jobs, cache: bool, assembly: str = "blocks"):
    """The Verilog of ``dfg`` and its top (:func:`hwgen.assemble.to_verilog`, or
    :func:`~hwgen.assemble.whole_verilog` for ``assembly="whole"``); Yosys failing (e.g. out
    of memory under a resource limit) is one line."""
    try:
        if assembly == "whole":
            return whole_verilog(dfg, name)
        return to_verilog(dfg, name, jobs, cache)
    except Exception as e:
        if type(e).__name__ != "YosysError":
            raise
        last = ([s.strip() for s in str(e).splitlines() if s.strip()] or ["no message"])[-1]
        raise HwgenError(f"the Verilog back end (Yosys) failed: {last[:300]}") from None


def _compile(model: Path, out_dir: Path, fold, name, target_cycles, origin,
             force: bool, board=None, device=None, budget=None, jobs=None,
             cache: bool = True, assembly: str = "blocks",
             logic_lanes: str | bool | None = None,
             ip_xact: bool = False) -> CompileResult:
    """:func:`compile` of a quantized ``model``; ``origin`` is the model the user gave."""
    target = resolve_target(board, device, budget, logic_lanes)
    folding = read_folding(fold) if isinstance(fold, (str, Path)) else fold
    graph, ig = _int_graph(model)
    check_output_dir(out_dir, origin, force)  # before the slow part
    dfg, fit = fold_design(ig, model.name, fold, folding, target_cycles, target)
    # refuse what no device holds, before any Verilog
    check_memory(sum(b.cost.memory_bits for b in dfg.blocks), f"{model.name}: model")
    name = _check_name(name) if name is not None else _top_name(model)
    text, top = _verilog(dfg, name, jobs, cache, assembly)
    sha = hashlib.sha256(model.read_bytes()).hexdigest()
    onnx_in = [d if isinstance(d, int) else "N" for d in graph.inputs[0].shape]
    out_info = graph.value_info.get(ig.onnx_output) or graph.outputs[0]
    onnx_out = _output_shape(out_info.shape, ig.tensors[ig.output].shape)
    with output_dir(out_dir, origin, force) as tmp:
        (tmp / f"{name}.v").write_text(text)
        design.save_npz(tmp / DESIGN_NPZ, design.intgraph_json(ig)[1])
        files = {f: design.file_hash(tmp / f) for f in (f"{name}.v", DESIGN_NPZ)}
        manifest = design.manifest_json(name, model.name, sha, ig, dfg, onnx_in, onnx_out,
                                        top.in_width, top.out_width, files, fit.as_dict())
        if ip_xact:
            (tmp / IPXACT).write_text(component_xml(manifest, text))
            manifest["files"] = dict(sorted((manifest["files"] | {
                IPXACT: design.file_hash(tmp / IPXACT)}).items()))
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return CompileResult(out_dir, out_dir / f"{name}.v", manifest, fit)


# ------------------------------------------------------------------------------ simulate

@dataclass
class SimulationResult:
    outputs: np.ndarray          # as the ONNX model returns them (floats if dequantized)
    outputs_int: np.ndarray      # [N, output elements] integers from the RTL, stream order
    inputs_int: np.ndarray       # [N, input elements] the quantized inputs fed, stream order
    latency: int                 # cycles: first input beat to last output beat of frame 0
    interval: float | None       # cycles per frame in steady state (None for one frame)
    cycles: int                  # cycles simulated in total (all chunks)
    simulator: str
    # per frame: cycle of its first input beat and of its last output beat, counted from the
    # start of its chunk (hwgen.sim.batch: the same for any number of workers)
    frame_cycles: np.ndarray | None = None
    chunk_frames: int = 0        # frames per chunk (each chunk starts from reset)
    jobs: int = 1                # workers that ran the chunks
    wave: Path | None = None     # the waveform file written
    batch: Batch | None = field(default=None, repr=False)
    #: cycles of the weight load after reset, before frame 0 (weights in SPRAM; 0 without):
    #: a one-off, outside ``latency`` and the frame cycles
    load_cycles: int = 0

    def __repr__(self) -> str:
        o = self.outputs
        interval = "None" if self.interval is None else f"{self.interval:.1f}"
        wave = "" if self.wave is None else f", wave='{self.wave}'"
        return (f"SimulationResult(samples={o.shape[0]}, simulator={self.simulator!r}, "
                f"outputs={o.dtype}{list(o.shape)}, latency={self.latency}, "
                f"interval={interval}, cycles={self.cycles}{wave})")


def _output_shape(declared, sample) -> list:
    """The output's ONNX shape for the manifest: as declared where it gives every size after
    the batch axis ("N" for the batch), else the batch and the sample shape computed."""
    if declared and all(isinstance(d, int) and d > 0 for d in declared[1:]):
        return [declared[0] if isinstance(declared[0], int) else "N", *declared[1:]]
    return ["N", *sample]


def _frames(manifest: dict, x: np.ndarray, source: str) -> np.ndarray:
    check_input_shape(x, manifest["input"]["onnx_shape"], source)
    if x.shape[0] == 0:
        raise HwgenError(f"{source}: no samples (the batch axis is empty)")
    return x.reshape(x.shape[0], manifest["input"]["frame_elements"])


def _timing(batch: Batch) -> tuple[np.ndarray, int, float | None]:
    """Per-frame (first input, last output) cycles, the latency of frame 0 and the
    steady-state interval: the mean cycles between consecutive frames' ends within chunks."""
    ib = batch.manifest["input"]["beats_per_frame"]
    ob = batch.manifest["output"]["beats_per_frame"]
    rows, span, gaps = [], 0, 0
    for res, r in zip(batch.results, batch.ranges):
        n = min(len(r), len(res.out_times) // ob)
        ends = [res.out_times[(k + 1) * ob - 1] for k in range(n)]
        rows += [(res.in_times[k * ib], e) for k, e in enumerate(ends)]
        if n > 1:
            span += ends[-1] - ends[0]
            gaps += n - 1
    fc = np.array(rows, dtype=np.int64).reshape(-1, 2)
    latency = int(fc[0, 1] - fc[0, 0] + 1)
    return fc, latency, (span / gaps if gaps else None)


def quantized_inputs(manifest: dict, ig, x, count: int | None = None) -> np.ndarray:
    """Float inputs ``x`` (array or .npy/.npz path) → the integer frames [N, input elements]
    in stream order the design takes, as :func:`simulate` quantizes them."""
    source = str(x) if isinstance(x, (str, Path)) else "input array"
    return _quantized_inputs(manifest, ig, x, count, source)


def dequantized_outputs(manifest: dict, ig, y: np.ndarray) -> np.ndarray:
    """Output frames [N, output elements] (stream order, integers) → the model's output as
    onnxruntime returns it (dequantized where the model dequantizes it)."""
    out = ig.output_reals(ig.from_stream(y))
    out = out.reshape([y.shape[0]] + list(ig.tensors[ig.output].shape))
    if ig.host_tail:
        return run_tail(ig.host_tail, out)
    return out.reshape([y.shape[0]] + [d if isinstance(d, int) else -1
                                       for d in manifest["output"]["onnx_shape"][1:]])


def _quantized_inputs(manifest, ig, x, count, source):
    if isinstance(x, (str, Path)):
        x = read_input(x, manifest["input"]["onnx_name"], count)
    else:
        x = first_samples(x, count, source)
    check_no_nan(x, source)
    frames = _frames(manifest, x, source)
    return ig.quantize_input(frames)


def simulate(out_dir, x, simulator: str = "verilator", count: int | None = None,
             stall: float = 0.0, seed: int = 0, *, jobs: int | None = None,
             chunk: int | None = None, wave: WaveRequest | None = None,
             observe: bool = False, progress: Progress = QUIET,
             scheduler=None) -> SimulationResult:
    """Run float inputs ``x`` (array or .npy/.npz path) through the compiled design.
    NaN inputs are refused; ±inf and out-of-range values saturate as in QuantizeLinear.

    The batch runs in chunks of ``chunk`` frames (default: from the design's estimate,
    :func:`hwgen.sim.batch.chunk_frames`), each from reset, chunk k's stalls seeded by
    ``chunk_seed(seed, k)``, on ``jobs`` workers (default: the cores); results do not depend
    on ``jobs``. ``wave``: waveforms of a frame range (the design built with its streams
    observable, verilator only); ``observe`` taps every stream (``result.batch.taps``).
    ``scheduler``: the chunks run on that Dask cluster (an address such as
    ``tcp://host:8786``, or a ``distributed.Client``) instead of local workers, with the
    same results (:mod:`hwgen.cluster`; ``pip install 'hwgen[cluster]'``)."""
    loaded = design.load(out_dir)
    manifest, ig, _ = loaded
    source = str(x) if isinstance(x, (str, Path)) else "input array"
    xq = _quantized_inputs(manifest, ig, x, count, source)
    batch = run_frames(out_dir, xq, simulator, stall, seed, jobs=jobs, chunk=chunk,
                       observe=observe, wave=wave, progress=progress, loaded=loaded,
                       scheduler=scheduler)
    if batch.timeout is not None:
        raise batch.timeout
    return _result(batch, xq, simulator, wave)


def _result(batch: Batch, xq: np.ndarray, simulator: str, wave) -> SimulationResult:
    ig, manifest, y = batch.ig, batch.manifest, batch.outputs_int
    frame_cycles, latency, interval = _timing(batch)
    return SimulationResult(dequantized_outputs(manifest, ig, y), y, xq, latency, interval,
                            sum(r.cycles for r in batch.results), simulator, frame_cycles,
                            len(batch.ranges[0]), batch.jobs,
                            wave.path if wave is not None else None, batch,
                            batch.results[0].load_cycles if batch.results else 0)


# -------------------------------------------------------------------------------- verify

def _layers(model, ig, values: dict, x: np.ndarray) -> LayerReport:
    """Each layer output of ``ig`` (golden ``values``) against onnxruntime on ``model``."""
    if is_qonnx_model(model):
        return LayerReport([], "the model has QONNX custom operators, which onnxruntime "
                               "cannot run")
    _, walked = walk(load_model(model, upgrade=True))
    return layer_agreement(model, ig, walked.views, values, x)


def _label_accuracy(labels, outputs) -> float | None:
    """The fraction of samples whose ``outputs`` [N, C] (C > 1) argmax is the label; None
    without labels, for other outputs or a label count that is not N."""
    if labels is None:
        return None
    y = np.asarray(labels)
    if y.ndim == 2 and y.shape[1] > 1:
        y = y.argmax(axis=1)
    out = np.asarray(outputs)
    n = out.shape[0] if out.ndim else 0
    if y.ndim != 1 or len(y) < n or n == 0:
        return None
    out = out.reshape(n, -1)
    if out.shape[1] < 2:
        return None
    return float(np.mean(out.argmax(axis=1) == y[:n]))


@dataclass
class VerifyReport:
    samples: int
    rtl_equals_golden: bool
    golden_mismatched_samples: int
    ort_identical_fraction: float      # of output elements (RTL vs onnxruntime, quantized)
    ort_max_step_diff: int             # in output quantization steps
    top1_agreement: float | None       # for classifiers ([N, C] outputs, C > 1)
    estimate: dict
    sim: SimulationResult
    compiled: CompileResult
    details: dict = field(default_factory=dict)
    float_top1_agreement: float | None = None   # with calibration: RTL vs the float model
    trace: TraceReport | None = None            # with ``trace``: every stream vs golden
    layers: LayerReport | None = None           # with ``layers``: each layer vs onnxruntime
    dfg: DataflowGraph | None = None            # with ``layers``: the graph simulated
    link: LinkReport | None = None              # with ``link``: the board top via its UART
    #: what ran as the reference: "onnxruntime", or "qonnx" for QONNX models
    reference: str = "onnxruntime"
    #: with a host tail: the model's whole output (the tail run on the RTL's) vs the reference
    host_tail: TailAgreement | None = None
    #: with class labels (``labels``, or the input .npz's): the fraction of samples whose
    #: output's argmax is the label, for the RTL and for the reference
    label_accuracy: float | None = None
    reference_label_accuracy: float | None = None

    def __repr__(self) -> str:
        def pct(f):
            return "None" if f is None else f"{round(f, 4)}"
        parts = [f"ok={self.ok}", f"samples={self.samples}",
                 f"rtl_equals_golden={self.rtl_equals_golden}",
                 f"ort_identical_fraction={pct(self.ort_identical_fraction)}",
                 f"ort_max_step_diff={self.ort_max_step_diff}",
                 f"top1_agreement={pct(self.top1_agreement)}"]
        if self.label_accuracy is not None:
            parts.append(f"label_accuracy={pct(self.label_accuracy)}")
        if self.trace is not None:
            parts.append(f"trace_ok={self.trace.ok}")
        if self.link is not None:
            parts.append(f"link_ok={self.link.ok}")
        iv = self.sim.interval
        parts += [f"latency={self.sim.latency}",
                  f"interval={'None' if iv is None else f'{iv:.1f}'}",
                  f"compiled={self.compiled!r}"]
        return f"VerifyReport({', '.join(parts)})"

    @property
    def ok(self) -> bool:
        """RTL == golden on every sample (and, traced, on every stream; with the link, the
        board top's outputs through its UART too)."""
        return (self.rtl_equals_golden and (self.trace is None or self.trace.ok)
                and (self.link is None or self.link.ok))


def verify(model, x, count: int | None = None, simulator: str = "verilator", fold=None,
           out_dir=None, stall: float = 0.0, target_cycles: int | None = None, *,
           calibration=None, per_channel: bool = False, symmetric: bool = False,
           activation_type: str = "uint8", force: bool = False, board: str | None = None,
           device: str | None = None, budget: float | None = None, jobs: int | None = None,
           chunk: int | None = None, trace: bool = False, wave: WaveRequest | None = None,
           seed: int = 0, layers: bool = False, progress: Progress = QUIET,
           logic_lanes: str | bool | None = None, link: bool = False,
           labels=None, scheduler=None) -> VerifyReport:
    """Compile, simulate, and compare RTL with the golden model and with onnxruntime.

    ``jobs``, ``chunk``, ``wave``, ``seed``, ``scheduler``: as for :func:`simulate`.
    ``trace``: every stream of the design is tapped in simulation and compared with the
    golden model's values for it (``report.trace``: the first diverging block, frame, element
    and both values).
    ``layers``: every layer output is also compared with onnxruntime's value of the ONNX
    tensor holding it (``report.layers``, :func:`hwgen.reference.layer_agreement`), and
    ``report.dfg`` keeps the dataflow graph (for :mod:`hwgen.report`). ``link``: the board
    top ``hwgen build`` makes for the board folded for (``board``, or the one chosen
    without it) is also simulated whole, the frames sent and the outputs read through its
    UART as ``hwgen run`` does with a board (:func:`hwgen.link_verify.verify_link`,
    ``report.link``).

    With ``calibration`` the float ``model`` is quantized first (see :func:`compile`); the
    RTL is compared with onnxruntime on the quantized model (what the hardware implements),
    and ``float_top1_agreement`` gives the top-1 agreement with the float model for
    classifiers ([N, C] outputs).

    ``labels``: the samples' class labels ([N] integers, or [N, C] one-hot), for classifiers
    ``report.label_accuracy`` (the RTL's argmax against them) and
    ``report.reference_label_accuracy`` (the reference's); by default an input .npz's array
    named ``label``, ``labels``, ``y`` or ``target(s)`` (:func:`hwgen.io.read_labels`).

    Without ``out_dir`` the design is compiled into a temporary folder that lives as long as
    ``report.compiled`` (``report.compiled.temporary`` is true): removed when that result is
    garbage collected, or when the interpreter exits. Give ``out_dir`` to keep it."""
    if out_dir is not None:
        check_output_path(out_dir, model)
    resolve_target(board, device, budget, logic_lanes)
    if link and device is not None and board is None:
        raise HwgenError("--link simulates a board's top: give --board, not --device")
    if calibration is not None:
        if isinstance(fold, (str, Path)):
            read_folding(fold)
        with quantized_copy(model, calibration, per_channel, symmetric,
                            activation_type) as (qdq, float_model):
            rep = verify(qdq, x, count, simulator, fold, out_dir, stall, target_cycles,
                         force=force, board=board, device=device, budget=budget, jobs=jobs,
                         chunk=chunk, trace=trace, wave=wave, seed=seed, layers=layers,
                         progress=progress, logic_lanes=logic_lanes, link=link,
                         labels=labels, scheduler=scheduler)
            if isinstance(x, (str, Path)):
                x = read_input(x, rep.compiled.manifest["input"]["onnx_name"], count,
                               count_warning=False)   # the inner verify warned
            x = np.asarray(x, dtype=np.float32)[:count]
            rep.float_top1_agreement = float_top1(float_model, x, rep.sim.outputs)
            return rep
    check_reference_batch(model, x, count)
    tmp = None
    if out_dir is None:
        tmp = Path(tempfile.mkdtemp(prefix="hwgen-verify-"))
        out_dir = tmp / "design"
    try:
        with progress.step("compiling"):
            comp = compile(model, out_dir, fold, target_cycles=target_cycles, force=force,
                           board=board, device=device, budget=budget,
                           logic_lanes=logic_lanes)
        manifest = comp.manifest
        source = str(x) if isinstance(x, (str, Path)) else "input array"
        if isinstance(x, (str, Path)):
            if labels is None:
                labels = read_labels(x, manifest["input"]["onnx_name"], count)
            x = read_input(x, manifest["input"]["onnx_name"], count)
        else:
            x = first_samples(x, count, source)
        check_no_nan(x, source)
        check_input_shape(x, manifest["input"]["onnx_shape"], source)
        loaded = design.load(out_dir)
        ig = loaded[1]
        xq = _quantized_inputs(manifest, ig, x, None, source)
        batch = run_frames(out_dir, xq, simulator, stall, seed, jobs=jobs, chunk=chunk,
                           observe=trace, wave=wave, progress=progress, fresh=True,
                           loaded=loaded, scheduler=scheduler)
        traced = None
        if trace:
            r0, r1 = batch.ranges[0].start, batch.ranges[-1].stop
            traced = compare(batch.dfg, batch.taps, golden.run_graph(batch.dfg, xq[r0:r1]),
                             frame_offset=r0)
        if batch.timeout is not None:
            if traced is not None:
                counts = ", ".join(f"{c.stream} {c.rtl_elements}/{c.golden_elements}"
                                   for c in traced.streams)
                raise HwgenError(f"{batch.timeout}; elements each stream transferred of the "
                                 f"chunk's: {counts}")
            raise batch.timeout
        sim = _result(batch, xq, simulator, wave)
        # only what is compared: the output, or with ``layers`` each layer's output
        wanted = [ig.output] + ([op.output for op in ig.ops if op.output != ig.output]
                                if layers else [])
        values = golden.run(ig, sim.inputs_int, wanted)
        gold = values[ig.output].reshape(sim.outputs_int.shape)
        bad = int(np.sum(np.any(gold != sim.outputs_int, axis=1)))

        onnx_in = manifest["input"]["onnx_name"]
        final = tail_output(ig.host_tail) if ig.host_tail else None
        names = [ig.onnx_output] + ([final] if final else [])
        refs, ref_name = reference_outputs(model, onnx_in, names, x)
        ref = refs[0].reshape(x.shape[0], -1)
        ref_q = ig.output_integers(ref)
        rtl = ig.from_stream(sim.outputs_int)
        diff = np.abs(ref_q - rtl)
        top1 = None
        if ref.shape[1] > 1:
            top1 = float(np.mean(ref.argmax(axis=1) == rtl.argmax(axis=1)))
        tail = None
        if final:
            tail = TailAgreement.measure(tail_nodes(ig.host_tail), final, refs[1], sim.outputs)
        acc = _label_accuracy(labels, sim.outputs), _label_accuracy(labels, refs[-1])
        rep = VerifyReport(
            samples=x.shape[0], rtl_equals_golden=np.array_equal(gold, sim.outputs_int),
            golden_mismatched_samples=bad,
            ort_identical_fraction=float(np.mean(diff == 0)),
            ort_max_step_diff=int(diff.max(initial=0)), top1_agreement=top1,
            estimate=manifest["estimate"], sim=sim, compiled=comp, trace=traced,
            reference=ref_name, host_tail=tail, label_accuracy=acc[0],
            reference_label_accuracy=acc[1])
        if link:
            linked = comp.fit.target.board
            if not linked.uart:
                raise HwgenError(f"--link simulates the UART host link, which {linked.id} "
                                 f"has not: give --board with one ('hwgen boards')")
            with progress.step("simulating the board top through its UART"):
                rep.link = verify_link(out_dir, loaded, sim.inputs_int, gold, linked.id)
        if layers:
            with progress.step("comparing the layers with onnxruntime"):
                rep.layers = _layers(model, ig, values, x)
            rep.dfg = batch.dfg or lower(ig, loaded[2])
        if tmp is not None:   # the design stays while the result that names it does
            comp.temporary = True
            weakref.finalize(comp, shutil.rmtree, str(tmp), ignore_errors=True)
            tmp = None
        return rep
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
