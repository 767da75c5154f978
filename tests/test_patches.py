"""The patch series applies to the pinned tree, re-applies as a no-op, and a bad patch names itself."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from flexnn_ncnn import fetch, patches
from flexnn_ncnn.cli import UserError


@pytest.fixture()
def pristine(tmp_path: Path) -> Path:
    """A fresh unpack of the pinned sdist."""
    lock = fetch.Lock.load()
    source = tmp_path / "ncnn"
    fetch.unpack(lock, fetch.download(lock, fetch.THIRD_PARTY / "downloads"), source)
    return source


def tree_digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file() and ".flexnn" not in p.parts:
            h.update(str(p.relative_to(root)).encode() + p.read_bytes())
    return h.hexdigest()


def series_dir(tmp_path: Path, extra: dict[str, str]) -> Path:
    """The project's series plus `extra` patches (name -> text) appended after it."""
    folder = tmp_path / "patches"
    shutil.copytree(patches.PATCH_DIR, folder)
    with open(folder / "series", "a") as series:
        for name, text in extra.items():
            (folder / name).write_text(text)
            series.write(name + "\n")
    return folder


BROKEN = """--- a/src/net.cpp
+++ b/src/net.cpp
@@ -1,2 +1,2 @@
-this line is not in net.cpp
+neither is this one
 nor this
"""


def edit_of(source: Path, path: str, old: str, new: str) -> str:
    """A patch replacing the first line of `path`, `old`, by `new` (two lines of context after it)."""
    lines = (source / path).read_text().splitlines()
    assert lines[0] == old
    return f"--- a/{path}\n+++ b/{path}\n@@ -1,3 +1,3 @@\n-{old}\n+{new}\n {lines[1]}\n {lines[2]}\n"


def test_series_applies_to_the_pin_and_reapplying_is_a_noop(pristine: Path) -> None:
    series = patches.read_series()
    assert series, "the series is empty"
    before = tree_digest(pristine)

    assert patches.apply_series(pristine, series) == [p.name for p in series]
    applied = tree_digest(pristine)
    assert applied != before
    assert patches.apply_series(pristine, series) == []
    assert tree_digest(pristine) == applied


def test_broken_patch_fails_naming_itself_and_its_hunk(pristine: Path, tmp_path: Path) -> None:
    folder = series_dir(tmp_path, {"0999-broken.patch": BROKEN})

    with pytest.raises(UserError) as failure:
        patches.apply_series(pristine, patches.read_series(folder))

    message = str(failure.value)
    assert "0999-broken.patch" in message and "src/net.cpp" in message
    # what applied before it stays applied and recorded; the broken one is not recorded
    assert patches.apply_series(pristine, patches.read_series()) == []


def test_edited_patch_replaces_its_old_version(pristine: Path, tmp_path: Path) -> None:
    first_line = (pristine / "src/net.cpp").read_text().splitlines()[0]
    v1 = series_dir(tmp_path / "v1", {"0999-edit.patch": edit_of(pristine, "src/net.cpp", first_line, "// v1")})
    v2 = series_dir(tmp_path / "v2", {"0999-edit.patch": edit_of(pristine, "src/net.cpp", first_line, "// v2")})
    patches.apply_series(pristine, patches.read_series(v1))
    assert (pristine / "src/net.cpp").read_text().splitlines()[0] == "// v1"

    assert patches.apply_series(pristine, patches.read_series(v2)) == ["0999-edit.patch"]
    assert (pristine / "src/net.cpp").read_text().splitlines()[0] == "// v2"

    patches.apply_series(pristine, patches.read_series())
    assert (pristine / "src/net.cpp").read_text().splitlines()[0] == first_line


def test_series_id_follows_content(tmp_path: Path) -> None:
    series = patches.read_series()
    folder = series_dir(tmp_path, {})
    assert patches.series_id(patches.read_series(folder)) == patches.series_id(series)
    first = folder / series[0].name
    first.write_bytes(first.read_bytes() + b"\n")
    assert patches.series_id(patches.read_series(folder)) != patches.series_id(series)


def test_missing_patch_in_series_is_a_user_error(tmp_path: Path) -> None:
    folder = series_dir(tmp_path, {})
    (folder / "series").write_text("0404-missing.patch\n")
    with pytest.raises(UserError, match="0404-missing.patch"):
        patches.read_series(folder)
