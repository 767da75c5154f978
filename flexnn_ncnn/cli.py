"""The command-line contract shared by every `python -m flexnn_ncnn.<verb>`.

A user error (bad input, infeasible budget, missing tool) is raised as `UserError` anywhere in the
library and becomes exit code 2 with one `error: ...` line on stderr, never a traceback. Anything
else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import logging
import signal
import subprocess
import sys
from typing import Callable, Sequence

USER_ERROR_EXIT = 2


class UserError(Exception):
    """An error the user can fix; its message is one readable line."""


def run_main(main: Callable[[Sequence[str] | None], int | None], argv: Sequence[str] | None = None) -> int:
    """Run a verb's `main`, mapping `UserError` to exit code 2 and one line on stderr."""
    try:
        return int(main(argv) or 0)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return USER_ERROR_EXIT
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130


def ended_by_signal(number: int) -> str:
    """How signal `number` ended a process: "was stopped (SIGKILL)" for one sent to stop it (the OOM
    killer's, a user's), else "crashed (SIGSEGV)"; a signal Python has no name for by its number."""
    name = signal.Signals(number).name if number in set(signal.Signals) else f"signal {number}"
    stopped = number in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT)
    return f"{'was stopped' if stopped else 'crashed'} ({name})"


def child_error(proc: "subprocess.CompletedProcess[str]") -> str:
    """The one line a verb run as a child printed for its error (run_main), the signal that ended it
    (whatever it printed before is not the reason), or its exit code."""
    if proc.returncode < 0:
        return f"it {ended_by_signal(-proc.returncode)}"
    last = next((l for l in reversed(proc.stderr.splitlines()) if l.strip()), f"exit code {proc.returncode}")
    return last.removeprefix("error: ")


def add_logging_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-vv for debug)")


def setup_logging(verbosity: int) -> None:
    level = logging.WARNING if verbosity <= 0 else logging.INFO if verbosity == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
