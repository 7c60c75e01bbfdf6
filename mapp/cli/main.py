"""The ``mapp`` entry point: Ctrl-C is one line and exit 130, wherever it lands.

The handler is installed before the application (Typer, rich, then polars, DuckDB) is
imported. It does not unwind the program with ``KeyboardInterrupt``: raised at a random
instant, that escapes from finalizers as "Exception ignored" tracebacks, is turned into other
errors by native libraries, and leaves their worker threads running into the interpreter's
exit, where C++ aborts. Nothing mapp writes needs unwinding to stay consistent (inputs are
never written, outputs and the cache are published by one rename), so the handler says
``interrupted``, removes the temporary files being written and leaves at once.

The interactive SQL shell puts Python's own handler back while it runs: there Ctrl-C cancels
the running query and the shell goes on.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys

from mapp.errors import INTERRUPTED

__all__ = ["main"]


def _on_interrupt(signum, frame) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C changes nothing now
    try:
        sys.stderr.write("interrupted\n")
        sys.stderr.flush()
        from mapp.output import discard_scratch

        discard_scratch()
        atexit._run_exitfuncs()  # e.g. the temporary cache of a read-only bundle
    finally:
        os._exit(INTERRUPTED)


def main() -> None:
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not when SIGINT is ignored (nohup, &)
        signal.signal(signal.SIGINT, _on_interrupt)
    try:
        from mapp.cli.app import app

        app()
    finally:
        # The command is over. Python's exit puts the default action back on the signals it
        # handles, and Ctrl-C then would kill a finished run (exit -2); ignored, it cannot.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
