"""Progress of long steps on stderr: one line, redrawn in place, only on a terminal.

``Progress(enabled)`` (by default: stderr is a terminal) gives ``step(label)``, a context in
which a step runs (its line shows the label while it runs), and ``frames(done, total,
cycles)`` for a simulation's frames (with the simulated cycles per second). The line is
removed when a step ends, so it never mixes with the results; when stderr is not a terminal
(tests, pipes, logs) nothing is written.
"""
from __future__ import annotations

import contextlib
import sys
import time


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

    def _show(self, text: str, force: bool = False):
        if not self.enabled:
            return
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
        if self.enabled and self._shown:
            self.stream.write("\r" + " " * self._shown + "\r")
            self.stream.flush()
            self._shown = 0

    @contextlib.contextmanager
    def step(self, label: str):
        self._show(f"hwgen: {label} …", force=True)
        try:
            yield self
        finally:
            self.clear()

    def start_frames(self):
        self._start = time.monotonic()

    def frames(self, done: int, total: int, cycles: int):
        """A simulation's progress: ``done`` of ``total`` frames, ``cycles`` simulated."""
        dt = max(1e-9, time.monotonic() - self._start)
        rate = f", {cycles / dt:,.0f} cycles/s" if cycles else ""
        self._show(f"hwgen: simulating: {done}/{total} frames{rate}", force=done == total)


class _Off(Progress):
    def __init__(self):
        super().__init__(enabled=False)


#: a progress that shows nothing
QUIET = _Off()
