"""Atomic output: write temporary files beside the targets, then `os.replace` each into place."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import BinaryIO, Callable, Mapping

Writer = Callable[[BinaryIO], object]


def atomic_write_all(outputs: Mapping[str | Path, Writer]) -> None:
    """Create or replace every path with what its writer puts in a binary file.

    All files are written before any is replaced, so a failure while writing leaves every path as
    it was, and no temporary file behind.
    """
    umask = os.umask(0)
    os.umask(umask)
    temps: dict[Path, str] = {}
    try:
        for path, write in outputs.items():
            path = Path(path)
            fd, temps[path] = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
            with os.fdopen(fd, "wb") as f:
                write(f)
                f.flush()
                os.fsync(f.fileno())  # the data is on disk before a rename can expose it
            os.chmod(temps[path], 0o666 & ~umask)  # mkstemp's 0600 is not what a plain open() gives
        for path, tmp in temps.items():
            os.replace(tmp, path)
    finally:
        for tmp in temps.values():
            if os.path.exists(tmp):
                os.unlink(tmp)


def atomic_write(path: str | Path, write: Writer) -> None:
    atomic_write_all({path: write})
