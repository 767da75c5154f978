"""The pinned NCNN sdist: verified before use, unpacked atomically, never left half-made."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from flexnn_ncnn import fetch
from flexnn_ncnn.cli import UserError
from helpers import assert_user_error, run_module


@pytest.fixture(scope="session")
def pinned_sdist() -> Path:
    """The real locked sdist (downloaded through pip once, then cached in third_party/downloads)."""
    return fetch.download(fetch.Lock.load(), fetch.THIRD_PARTY / "downloads")


def make_third_party(tmp_path: Path, **lock_changes: str) -> Path:
    third_party = tmp_path / "third_party"
    third_party.mkdir()
    lock = json.loads((fetch.THIRD_PARTY / "ncnn.lock").read_text())
    lock.update(lock_changes)
    (third_party / "ncnn.lock").write_text(json.dumps(lock))
    return third_party


def leftovers(third_party: Path) -> list[str]:
    return sorted(p.name for p in third_party.iterdir() if p.name not in ("ncnn.lock", "downloads"))


def test_tampered_sdist_is_refused_and_nothing_is_unpacked(tmp_path: Path, pinned_sdist: Path) -> None:
    third_party = make_third_party(tmp_path)
    (third_party / "downloads").mkdir()
    tampered = bytearray(pinned_sdist.read_bytes())
    tampered[1000] ^= 0xFF
    (third_party / "downloads" / pinned_sdist.name).write_bytes(bytes(tampered))

    proc = run_module("fetch", "--third-party", str(third_party))

    assert_user_error(proc, "sha256", pinned_sdist.name)
    assert leftovers(third_party) == []


def test_lock_with_another_hash_is_refused_by_the_index_listing(tmp_path: Path) -> None:
    third_party = make_third_party(tmp_path, sha256="0" * 64)

    proc = run_module("fetch", "--third-party", str(third_party))

    assert_user_error(proc, "sha256", "0" * 64)
    assert leftovers(third_party) == []


def test_truncated_archive_leaves_no_half_made_tree(tmp_path: Path, pinned_sdist: Path) -> None:
    truncated = tmp_path / pinned_sdist.name
    truncated.write_bytes(pinned_sdist.read_bytes()[: 2_000_000])
    lock = fetch.Lock(**{**fetch.Lock.load().__dict__, "sha256": fetch.sha256_of(truncated)})
    dest = tmp_path / "src" / "ncnn"

    with pytest.raises(UserError, match="cannot unpack"):
        fetch.unpack(lock, truncated, dest)

    assert not dest.exists()
    assert list(dest.parent.iterdir()) == []


def test_fetch_unpacks_verified_tree_and_replaces_a_broken_one(tmp_path: Path, pinned_sdist: Path) -> None:
    third_party = make_third_party(tmp_path)
    (third_party / "downloads").mkdir()
    shutil.copy(pinned_sdist, third_party / "downloads")
    (third_party / "ncnn").mkdir()
    (third_party / "ncnn" / "half-made").write_text("left by an interrupted unpack")

    source = fetch.fetch(third_party=third_party)

    assert not (source / "half-made").exists()
    assert (source / "src" / "layer" / "arm" / "convolution_im2col_gemm.h").exists()
    record = fetch.read_source_record(source)
    assert record is not None and record["sha256"] == fetch.Lock.load().sha256
    # a second fetch is a no-op: the verified tree stays as it is
    marker = source / "src" / "net.h"
    mtime = marker.stat().st_mtime_ns
    assert fetch.fetch(third_party=third_party) == source
    assert marker.stat().st_mtime_ns == mtime
