"""The console command ``hwgen``: loads the command line (:mod:`hwgen.cli`) so that a Ctrl-C
or a memory limit met while its modules load ends the command with one line, as during a
command (no traceback): ``hwgen: interrupted`` and exit code 130, or ``hwgen: error: ...``
and exit code 2. Nothing has been written at that point."""
from __future__ import annotations

import importlib
import os
import signal
import sys


def _interrupted(signum, frame):
    os.write(2, b"hwgen: interrupted\n")
    os._exit(130)


def main(argv=None):
    signal.signal(signal.SIGINT, _interrupted)
    try:
        cli = importlib.import_module("hwgen.cli")
    except MemoryError:
        sys.stderr.write("hwgen: error: out of memory while starting (a memory limit "
                         "too low for Python and hwgen's libraries?)\n")
        sys.exit(2)
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    cli.main(argv)


if __name__ == "__main__":
    main()
