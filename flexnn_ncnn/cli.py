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
import threading
from typing import Callable, Sequence

USER_ERROR_EXIT = 2


class UserError(Exception):
    """An error the user can fix; its message is one readable line."""


class Stopped(BaseException):
    """SIGTERM or SIGHUP reached the process (a `timeout`, a closed terminal, a job manager): raised in the
    main thread like KeyboardInterrupt, so that every `with` unwinds (temporary folders, half-written
    outputs) before the verb exits, as it does for Ctrl-C."""

    def __init__(self, number: int) -> None:
        super().__init__(signal.Signals(number).name)
        self.number = number


def _raise_stopped(number: int, _frame: object) -> None:
    raise Stopped(number)


def run_main(main: Callable[[Sequence[str] | None], int | None], argv: Sequence[str] | None = None) -> int:
    """Run a verb's `main`, mapping `UserError` to exit code 2 and one line on stderr, and an interrupt
    (Ctrl-C, SIGTERM, SIGHUP) to one line and 128 + the signal, after its cleanup ran."""
    handled = (signal.SIGTERM, signal.SIGHUP) if threading.current_thread() is threading.main_thread() else ()
    previous = {number: signal.signal(number, _raise_stopped) for number in handled}
    try:
        return int(main(argv) or 0)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return USER_ERROR_EXIT
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 128 + signal.SIGINT
    except Stopped as e:
        print(f"error: stopped ({e})", file=sys.stderr)
        return 128 + e.number
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


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
