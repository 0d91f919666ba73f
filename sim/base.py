"""The simulation contract shared by every back end.

A design under simulation is always seen through its AXI4-Stream-style top level:

* clock ``clk``, synchronous active-high reset ``rst``;
* input  ``s_axis_tdata`` (unsigned, ``in_width`` bits), ``s_axis_tvalid``, ``s_axis_tready``,
  ``s_axis_tlast``;
* output ``m_axis_tdata`` (unsigned, ``out_width`` bits), ``m_axis_tvalid``, ``m_axis_tready``,
  ``m_axis_tlast``.

Beats are Python ints (they may be wider than 64 bits). Cycle numbers count rising clock
edges after reset is released; a transfer "happens at cycle t" when valid & ready are
both high at the edge that ends cycle t.
"""
from __future__ import annotations

from dataclasses import dataclass, field

#: cycles simulated after the last expected output beat, ``ready`` held high, watching for
#: surplus beats (every back end)
EXTRA_CYCLES = 32


@dataclass
class Wave:
    """Waveforms to dump: ``kind`` ``"vcd"`` or ``"fst"`` into ``path``, from the cycle in
    which input beat ``from_in_beat`` is next to be transferred through the cycle that
    transfers output beat ``to_out_beat - 1`` (beats counted within the job)."""
    path: str
    kind: str
    from_in_beat: int
    to_out_beat: int


@dataclass
class StreamJob:
    """What to feed and what to expect."""
    in_width: int
    out_width: int
    in_beats: list[int]
    in_last: list[bool]
    n_out_beats: int
    # probability that the source holds tvalid low in a cycle / the sink holds tready low
    stall_in: float = 0.0
    stall_out: float = 0.0
    seed: int = 0
    max_cycles: int = 0  # 0: derived from the job size (generous); exceeded -> SimTimeout
    # the observed streams of a design built for observation, in order: (identifier, payload
    # bits), the top module's ports <identifier>__valid/__ready/__payload; every transfer on
    # them is recorded (StreamResult.taps)
    taps: list[tuple[str, int]] = field(default_factory=list)
    wave: Wave | None = None
    # the weight-load stream's beats (16 bits each), sent on s_wload_* after reset and before
    # the first input beat, without stalls; the job's cycles count from the cycle after the
    # last of them (StreamResult.load_cycles: the cycles the load took)
    load_beats: list[int] = field(default_factory=list)

    def check(self) -> None:
        """A job a bench can run: one last flag per input beat, every beat within its width."""
        if len(self.in_last) != len(self.in_beats):
            raise ValueError("in_beats and in_last differ in length")
        for b in self.in_beats:
            if not 0 <= b < (1 << self.in_width):
                raise ValueError(f"input beat {b} does not fit in {self.in_width} bits")


@dataclass
class StreamResult:
    out_beats: list[int]
    out_last: list[bool]
    in_times: list[int] = field(default_factory=list)   # cycle of each input transfer
    out_times: list[int] = field(default_factory=list)  # cycle of each output transfer
    cycles: int = 0                                      # cycles simulated in total
    # per tapped stream of the job: (cycle of each transfer, its payload)
    taps: list[tuple[list[int], list[int]]] = field(default_factory=list)
    load_cycles: int = 0                                 # cycles of the weight load before


class SimTimeout(RuntimeError):
    """The design stopped producing output (deadlock or far too slow). ``result`` holds what
    was transferred until then, where the back end gives it."""

    def __init__(self, msg: str, result: StreamResult | None = None):
        super().__init__(msg)
        self.result = result


def check_status(top: str, job: StreamJob, max_cycles: int, status: str, n_out: int,
                 n_in: int, cycles: int, result: StreamResult | None = None) -> None:
    """Raise what a bench's final ``status`` means: ``"timeout"`` (``n_out`` output and
    ``n_in`` input beats transferred within ``max_cycles``; ``result`` goes with the error)
    or ``"extra"`` (a surplus output beat in the last of ``cycles``); ``"ok"`` passes."""
    if status == "timeout":
        raise SimTimeout(f"{top}: only {n_out} of {job.n_out_beats} output beats arrived "
                         f"within {max_cycles} cycles ({n_in} of {len(job.in_beats)} input "
                         f"beats were consumed)", result)
    if status == "extra":
        raise RuntimeError(f"{top}: produced more than the expected {job.n_out_beats} "
                           f"output beats (a surplus beat at cycle {cycles - 1})")


def default_max_cycles(job: StreamJob) -> int:
    if job.max_cycles:
        return job.max_cycles
    slow = 1.0 / max(1e-3, (1 - job.stall_in) * (1 - job.stall_out))
    return int(2000 + 64 * slow * (len(job.in_beats) + job.n_out_beats) * 8)
