"""Progress of long steps on stderr: one line, redrawn in place, only on a terminal.

``Progress(enabled)`` (by default: stderr is a terminal) gives ``step(label)``, a context in
which a step runs: its line shows the label, the time since the step began (redrawn twice a
second) and, once the step reports how far it is (``update(fraction, detail)``: a tool's
pass, its placer iteration, the share of arcs routed, of objects compiled), an estimate of
the time left. ``frames(done, total, cycles)`` shows a simulation's frames (with the
simulated cycles per second and the time left). The line is removed when a step ends, so it
never mixes with the results; when stderr is not a terminal (tests, pipes, logs) nothing is
written.
"""
from __future__ import annotations

import contextlib
import sys
import threading
import time


def clock(seconds: float) -> str:
    """``42 s``, ``3:07``, ``1:02:03``."""
    s = int(seconds)
    if s < 60:
        return f"{s} s"
    m, s = divmod(s, 60)
    return f"{m}:{s:02d}" if m < 60 else f"{m // 60}:{m % 60:02d}:{s:02d}"


def time_left(elapsed: float, fraction: float | None) -> str:
    """``, about 1:10 left`` from the share done so far (nothing before 3 % or after 99 %)."""
    if fraction is None or not 0.03 <= fraction < 0.995:
        return ""
    return f", about {clock(elapsed * (1 - fraction) / fraction)} left"


class Progress:
    def __init__(self, enabled: bool | None = None, stream=None):
        self.stream = stream or sys.stderr
        if enabled is None:
            isatty = getattr(self.stream, "isatty", None)
            enabled = bool(isatty and isatty())
        self.enabled = enabled
        self._shown = 0        # characters on the current line
        self._last = 0.0
        self._start = time.monotonic()
        self._lock = threading.Lock()
        self._step: list | None = None    # [label, began, fraction, detail] of a running step

    def _show(self, text: str, force: bool = False):
        if not self.enabled:
            return
        with self._lock:
            now = time.monotonic()
            if not force and now - self._last < 0.1:
                return
            self._last = now
            pad = max(0, self._shown - len(text))
            self.stream.write("\r" + text + " " * pad)
            self.stream.flush()
            self._shown = len(text)

    def clear(self):
        """Remove the line (before other output, or at the end)."""
        if not self.enabled:
            return
        with self._lock:
            if self._shown:
                self.stream.write("\r" + " " * self._shown + "\r")
                self.stream.flush()
                self._shown = 0

    def _step_line(self) -> str:
        label, began, fraction, detail = self._step
        elapsed = time.monotonic() - began
        what = f"{label}: {detail}" if detail else label
        done = f" {100 * fraction:.0f} %" if fraction is not None else ""
        return f"hwgen: {what}{done} · {clock(elapsed)}{time_left(elapsed, fraction)}"

    @contextlib.contextmanager
    def step(self, label: str):
        """Run a step under ``label``; its line is redrawn with the elapsed time."""
        outer = self._step
        self._step = [label, time.monotonic(), None, ""]
        stop = threading.Event()
        ticker = None
        if self.enabled:
            self._show(self._step_line(), force=True)

            def tick():
                while not stop.wait(0.5):
                    if self._step is not None:
                        self._show(self._step_line(), force=True)
            ticker = threading.Thread(target=tick, name="hwgen-progress", daemon=True)
            ticker.start()
        try:
            yield self
        finally:
            stop.set()
            if ticker is not None:
                ticker.join()
            self._step = outer
            self.clear()

    def update(self, fraction: float | None = None, detail: str | None = None):
        """How far the running step is (0..1, None: unknown) and what it does now."""
        if self._step is None:
            return
        if fraction is not None:
            self._step[2] = max(0.0, min(1.0, fraction))
        if detail is not None:
            self._step[3] = detail
        self._show(self._step_line())

    def start_frames(self):
        self._start = time.monotonic()

    def frames(self, done: int, total: int, cycles: int):
        """A simulation's progress: ``done`` of ``total`` frames, ``cycles`` simulated."""
        dt = max(1e-9, time.monotonic() - self._start)
        rate = f", {cycles / dt:,.0f} cycles/s" if cycles else ""
        left = time_left(dt, done / total if total else None)
        self._show(f"hwgen: simulating: {done}/{total} frames{rate} · {clock(dt)}{left}",
                   force=done == total)


class _Off(Progress):
    def __init__(self):
        super().__init__(enabled=False)


#: a progress that shows nothing
QUIET = _Off()
