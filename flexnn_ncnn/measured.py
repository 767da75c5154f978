"""Measurements of this build on this machine, kept on disk: the same question gets the same answer.

What NCNN and the runtime hold is measured, not modelled (a fresh process, the OS's count), and such a
measurement varies by some 100 KB from one process to the next. A plan must not: the same slice
command names the same smallest budget every time, and a budget it names slices. So each answer is
stored under a key naming what it depends on — the question's own fields and the build (the native
module's bytes, the Python that loads it) — and asked again only when one of them changes.

The folder is $FLEXNN_NCNN_CACHE, else $XDG_CACHE_HOME/flexnn_ncnn, else ~/.cache/flexnn_ncnn. An entry
is one JSON file written atomically; an unreadable one is measured again, an unwritable folder only
costs the repeatability (logged once).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any, Callable

log = logging.getLogger(__name__)

CACHE_ENV = "FLEXNN_NCNN_CACHE"


def cache_dir() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "flexnn_ncnn"


@functools.cache
def build_key(native_module_path: str) -> str:
    """The build the measurements belong to: every byte of the native module (a relayout of its code
    may change only bytes a sampled digest skips, and what a process holds with it) and the
    interpreter running it. Hashed once per process."""
    with open(native_module_path, "rb") as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest()
    return f"{digest}|{sys.implementation.cache_tag}"


def source_digest(package: Path) -> str:
    """The .py files under `package`: their paths and bytes."""
    digest = hashlib.sha256()
    for source in sorted(package.rglob("*.py")):
        digest.update(source.relative_to(package).as_posix().encode() + b"\0")
        digest.update(source.read_bytes())
    return digest.hexdigest()[:16]


@functools.cache
def python_key() -> str:
    """This package's Python code: what a Session holds beside the arena depends on it too (how the
    sidecar is parsed and kept), not only on the native module."""
    return source_digest(Path(__file__).parent)


def _entry(kind: str, key: dict[str, Any]) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]
    return cache_dir() / kind / f"{digest}.json"


def stored(kind: str, key: dict[str, Any]) -> Any:
    """The stored answer of `kind` for `key`, else None."""
    try:
        entry = json.loads(_entry(kind, key).read_text())
        if entry.get("key") == key:
            return entry["value"]
    except (OSError, ValueError, AttributeError, KeyError):
        pass
    return None


def store(kind: str, key: dict[str, Any], value: Any) -> None:
    """Keep `value` (JSON values, not None) as the answer of `kind` for `key`, replacing any."""
    path = _entry(kind, key)
    scratch = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        scratch.write_text(json.dumps({"key": key, "value": value}, sort_keys=True))
        os.replace(scratch, path)
    except OSError as e:
        _warn_unwritable(str(path.parent), str(e))
        with contextlib.suppress(OSError):
            scratch.unlink()


def recalled(kind: str, key: dict[str, Any], measure: Callable[[], Any]) -> Any:
    """The stored answer of `kind` for `key` (JSON values; include the build_key), else measure() stored."""
    value = stored(kind, key)
    if value is None:
        value = measure()
        store(kind, key, value)
    return value


@functools.cache
def _warn_unwritable(folder: str, reason: str) -> None:
    log.warning("cannot keep measurements in %s (%s): set %s to a writable folder for repeatable plans", folder, reason, CACHE_ENV)
