"""The NCNN patch series: `ncnn_patches/series` lists patches applied in order to `third_party/ncnn`.

Invariant: `third_party/ncnn/.flexnn/applied/` holds a copy of every patch applied to the tree, in
order, listed in `applied.json`. Applying a series keeps the longest prefix already applied,
reverses the rest (newest first) and applies what follows, each patch checked before it is applied,
so re-applying is a no-op and an edited patch replaces its old version.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .cli import UserError
from .files import atomic_write

log = logging.getLogger(__name__)

PATCH_DIR = Path(__file__).resolve().parent.parent / "ncnn_patches"
STATE_DIR = Path(".flexnn") / "applied"


@dataclass(frozen=True)
class Patch:
    name: str
    data: bytes

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


def read_series(patch_dir: Path = PATCH_DIR) -> list[Patch]:
    series = patch_dir / "series"
    try:
        names = [l.split("#", 1)[0].strip() for l in series.read_text().splitlines()]
    except OSError as e:
        raise UserError(f"cannot read the patch series {series}: {e}") from None
    patches = []
    for name in filter(None, names):
        try:
            patches.append(Patch(name, (patch_dir / name).read_bytes()))
        except OSError as e:
            raise UserError(f"patch {name} listed in {series} cannot be read: {e}") from None
    return patches


def series_id(patches: list[Patch]) -> str:
    """A short id of the series' exact content: what a build's transformed layouts and plans are keyed by."""
    h = hashlib.sha256()
    for p in patches:
        h.update(p.name.encode() + b"\0" + p.data + b"\0")
    return h.hexdigest()[:16]


def _git_apply(source: Path, patch: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    # Ceiling the search so git treats `source` as a plain tree, never as part of an enclosing repository.
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(source.parent)}
    return subprocess.run(["git", "apply", "--whitespace=nowarn", *flags, str(patch)], cwd=source,
                          capture_output=True, text=True, env=env)


def _first_error(out: subprocess.CompletedProcess[str]) -> str:
    lines = [l.strip() for l in out.stderr.splitlines() if l.strip()]
    return "; ".join(lines[:2]) or f"git apply exited {out.returncode}"


def _read_applied(source: Path) -> list[Patch]:
    state = source / STATE_DIR
    try:
        names = json.loads((state / "applied.json").read_text())
    except (OSError, ValueError):
        return []
    return [Patch(n, (state / n).read_bytes()) for n in names]


def _write_applied(source: Path, applied: list[Patch]) -> None:
    state = source / STATE_DIR
    state.mkdir(parents=True, exist_ok=True)
    for p in applied:
        (state / p.name).write_bytes(p.data)
    listing = (json.dumps([p.name for p in applied], indent=2) + "\n").encode()
    atomic_write(state / "applied.json", lambda f: f.write(listing))


def apply_series(source: Path, patches: list[Patch]) -> list[str]:
    """Bring `source` to exactly `patches` applied; returns the names newly applied."""
    source = source.resolve()
    applied = _read_applied(source)
    keep = 0
    while keep < min(len(applied), len(patches)) and applied[keep] == patches[keep]:
        keep += 1
    state = source / STATE_DIR
    for p in reversed(applied[keep:]):
        out = _git_apply(source, state / p.name, "--reverse")
        if out.returncode != 0:
            raise UserError(f"cannot take back {p.name} from {source}: {_first_error(out)}; delete {source} to start afresh")
        applied.pop()
        _write_applied(source, applied)
        log.info("reversed %s", p.name)
    newly = []
    for p in patches[keep:]:
        state.mkdir(parents=True, exist_ok=True)
        (state / p.name).write_bytes(p.data)
        check = _git_apply(source, state / p.name, "--check")
        if check.returncode != 0:
            (state / p.name).unlink()
            raise UserError(f"patch {p.name} does not apply to {source}: {_first_error(check)}")
        out = _git_apply(source, state / p.name)
        if out.returncode != 0:
            raise UserError(f"patch {p.name} failed on {source}: {_first_error(out)}")
        applied.append(p)
        _write_applied(source, applied)
        newly.append(p.name)
        log.info("applied %s", p.name)
    return newly

