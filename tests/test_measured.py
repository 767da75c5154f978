"""The measurement store (flexnn_ncnn/measured.py): an answer is measured once per key and recalled
after, in this process or another; a changed key, or a damaged entry, is measured again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from flexnn_ncnn import measured


@pytest.fixture
def store(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv(measured.CACHE_ENV, str(tmp_path / "store"))
    return tmp_path / "store"


def _counting(value):
    calls = []

    def measure():
        calls.append(1)
        return value
    return measure, calls


def test_an_answer_is_measured_once_and_recalled(store) -> None:
    measure, calls = _counting(12345)
    key = {"build": "b", "model": "m", "shape": [3, 8, 8]}
    assert measured.recalled("thing", key, measure) == 12345
    assert measured.recalled("thing", dict(key), _counting(999)[0]) == 12345
    assert len(calls) == 1
    assert len(list((store / "thing").glob("*.json"))) == 1


def test_another_key_or_kind_is_measured_again(store) -> None:
    key = {"build": "b", "model": "m"}
    measured.recalled("thing", key, lambda: 1)
    assert measured.recalled("thing", {**key, "build": "c"}, lambda: 2) == 2
    assert measured.recalled("other", key, lambda: 3) == 3
    assert measured.recalled("thing", key, lambda: 4) == 1


def test_another_process_recalls_the_same_answer(store) -> None:
    measured.recalled("thing", {"k": 1}, lambda: [1, 2])
    code = "from flexnn_ncnn import measured; print(measured.recalled('thing', {'k': 1}, lambda: 'measured again'))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[1, 2]"


@pytest.mark.parametrize("damage", ["", "{", "[]", '{"key": {"k": 2}, "value": 7}'])
def test_a_damaged_or_foreign_entry_is_measured_again(store, damage: str) -> None:
    measured.recalled("thing", {"k": 1}, lambda: 5)
    entry = next((store / "thing").glob("*.json"))
    entry.write_text(damage)
    assert measured.recalled("thing", {"k": 1}, lambda: 6) == 6
    assert json.loads(entry.read_text())["value"] == 6


def test_an_unwritable_store_still_answers(tmp_path, monkeypatch, caplog) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv(measured.CACHE_ENV, str(blocker / "store"))
    assert measured.recalled("thing", {"k": 1}, lambda: 8) == 8
    assert "cannot keep measurements" in caplog.text


def test_the_python_key_follows_the_package_sources(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "a.py").write_text("A = 1\n")
    (package / "sub" / "b.py").write_text("B = 2\n")
    (package / "notes.txt").write_text("not code")
    before = measured.source_digest(package)
    (package / "notes.txt").write_text("still not code")
    assert measured.source_digest(package) == before
    (package / "sub" / "b.py").write_text("B = 3\n")
    assert measured.source_digest(package) != before
    assert len(measured.python_key()) == 16


def test_the_build_key_sees_a_change_anywhere_in_the_module(tmp_path) -> None:
    """A byte changed between the blocks a sampled digest reads (files.sampled_digest) is another build:
    a relayout of the module's code can change only such bytes, and measurements of the old build
    must not be recalled for it."""
    from flexnn_ncnn.files import DIGEST_BLOCK_BYTES, sampled_digest
    data = bytearray(os.urandom(4 << 20))
    before, after = tmp_path / "a" / "_native.so", tmp_path / "b" / "_native.so"
    before.parent.mkdir()
    after.parent.mkdir()
    before.write_bytes(data)
    data[DIGEST_BLOCK_BYTES + 100] ^= 0xFF  # past the first block, before the second (at about 1/31 of the file)
    after.write_bytes(data)
    assert sampled_digest(before) == sampled_digest(after)  # the change lies where sampling does not look
    assert measured.build_key(str(before)) != measured.build_key(str(after))
