"""How a command reports the error that stops it: one ``error:`` line, on a line of its own.

A start-up error (a config key, a tool, the cluster's address or token, room for the roles) is
the user's to fix, and its message says what to check; so a command prints ``error: <message>``
and exits non-zero, without the traceback. ``AGENTRL_DEBUG=1`` prints the traceback, chained
causes included, above that line. The line starts a line of its own even when a progress bar was
drawing: the bars still open on the console are closed first, and the line they leave is ended.
"""

from __future__ import annotations

import os
import sys
import traceback
from typing import TextIO

from tqdm import tqdm

DEBUG_ENV = "AGENTRL_DEBUG"
_OFF = ("", "0", "false", "no", "off")


class StartupError(RuntimeError):
    """A run cannot start for a reason in its set-up (where the cluster is, its token, room for the
    roles); the message names the setting and what to check, so it is shown without a traceback."""


def debugging() -> bool:
    """Whether ``AGENTRL_DEBUG`` asks for the traceback of an error that stops a command."""
    return os.environ.get(DEBUG_ENV, "").strip().lower() not in _OFF


def _on_console(bar: tqdm, stream: TextIO) -> bool:
    # tqdm.write's rule: a bar on stdout and a message on stderr share one terminal
    console = (sys.stdout, sys.stderr)
    return bar.fp == stream or (bar.fp in console and stream in console)


def _start_line(stream: TextIO) -> None:
    """Close the progress bars still open on ``stream``'s console and end the line they leave."""
    sys.stdout.flush()  # what was printed before the error stays before it in a shared log
    # tqdm keeps its open bars in a class-level set (tqdm.write reads the same one). A bar left open
    # (an exception inside a `for ... in tqdm(...)` keeps it alive in the traceback's frames) would
    # otherwise be redrawn over the error line, or after it when it is collected at exit.
    bars = [bar for bar in list(tqdm._instances) if not bar.disable and _on_console(bar, stream)]
    for bar in sorted(bars, key=lambda bar: -abs(bar.pos)):  # innermost first, as they nest
        bar.close()
    if bars:
        # A closed bar may leave the cursor inside a line it drew (a nested bar moves the cursor
        # back up): on a terminal, go to its start and clear it; in a log file, start a new line.
        terminal = getattr(stream, "isatty", lambda: False)()
        stream.write("\r\x1b[K" if terminal else "\n")


def print_error(message: str, stream: TextIO | None = None) -> None:
    """Print ``error: message`` to ``stream`` (stderr by default) on a line of its own."""
    stream = sys.stderr if stream is None else stream
    _start_line(stream)
    stream.write(f"error: {message}\n")
    stream.flush()


def report_error(error: BaseException, code: int = 2, what: str = "", stream: TextIO | None = None) -> int:
    """Print ``error`` as one ``error:`` line (``what`` before its message), with its traceback
    above it under ``AGENTRL_DEBUG``; returns ``code``, the command's exit status."""
    stream = sys.stderr if stream is None else stream
    if debugging():
        _start_line(stream)
        traceback.print_exception(type(error), error, error.__traceback__, file=stream)
    print_error(what + (str(error) or type(error).__name__), stream)
    return code
