"""The plan sidecar: round trip, validation on load, field-naming mismatches, atomic writes."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from flexnn_ncnn import planning, sidecar
from flexnn_ncnn.cli import UserError
from flexnn_ncnn.files import DIGEST_BLOCK_BYTES, DIGEST_BLOCKS, sampled_digest

from plan_fixtures import chain_sidecar


@pytest.fixture
def saved(tmp_path: Path) -> tuple[sidecar.Sidecar, Path]:
    sc = dataclasses.replace(chain_sidecar(), ladder=tuple(planning.plans_for(chain_sidecar().profile, [30_000, 200_000])))
    path = tmp_path / f"chain{sidecar.SUFFIX}"
    sidecar.save(sc, path)
    return sc, path


def test_round_trip_is_exact(saved: tuple[sidecar.Sidecar, Path]) -> None:
    sc, path = saved
    loaded = sidecar.load(path, sidecar.Expected.for_run(threads=2, machine={"isa": "x86_64", "cpu_features": "avx,fma,f16c,avx2", "l2_bytes": 1 << 20}))
    assert loaded == sc
    assert loaded.plan_for(30_000) == sc.ladder[0] and loaded.plan_for(12345) is None
    data = json.loads(path.read_text())
    assert data["schema"] == "flexnn-plan" and data["schema_version"] == sidecar.SCHEMA_VERSION
    assert data["plan"]["budget"] == 64_000
    assert len(data["plan"]["tensors"]["offset"].split()) == len(data["profile"]["tensors"]["size"].split()) == 16


def test_loading_makes_no_object_per_tensor(saved: tuple[sidecar.Sidecar, Path]) -> None:
    # a Session keeps what loading its sidecar touched: the profile is parsed into the planner's
    # columns and validated on them; per-tensor objects exist only once something asks for them
    sc, path = saved
    loaded = sidecar.load(path)
    assert "tensors" not in vars(loaded.profile) and "layers" not in vars(loaded.profile)
    assert loaded.profile.tensors == sc.profile.tensors and loaded.profile.layers == sc.profile.layers


@pytest.mark.parametrize("expected, field", [
    (sidecar.Expected(param_sha256="c" * 64), "model.param_sha256"),
    (sidecar.Expected(bin_digest="4096:" + "c" * 64), "model.bin_digest"),
    (sidecar.Expected(transformed_digest="8192:" + "c" * 64), "model.transformed_digest"),
    (sidecar.Expected(ncnn_version="19990101"), "build.ncnn_version"),
    (sidecar.Expected(patch_series_id="0123456789abcdef"), "build.patch_series_id"),
    (sidecar.Expected(runtime_version="0.0.1"), "build.runtime_version"),
    (sidecar.Expected(threads=4), "target.threads"),
    (sidecar.Expected(isa="aarch64"), "target.isa"),
    (sidecar.Expected(cpu_features="avx,fma,f16c,avx2,avx512"), "target.cpu_features"),
    (sidecar.Expected(l2_bytes=1 << 21), "target.l2_bytes"),
])
def test_a_mismatch_names_the_field(saved: tuple[sidecar.Sidecar, Path], expected: sidecar.Expected, field: str) -> None:
    _, path = saved
    with pytest.raises(UserError, match=rf"does not match: {field} is .*, expected "):
        sidecar.load(path, expected)


def test_expected_hashes_come_from_the_model_files(saved: tuple[sidecar.Sidecar, Path], tmp_path: Path) -> None:
    _, path = saved
    param = tmp_path / "other.param"
    param.write_text("7767517\n")
    with pytest.raises(UserError, match="model.param_sha256"):
        sidecar.load(path, sidecar.Expected.for_run(param=param))


def test_truncated_or_invalid_json_is_a_user_error(saved: tuple[sidecar.Sidecar, Path]) -> None:
    _, path = saved
    text = path.read_text()
    path.write_text(text[: len(text) // 2])
    with pytest.raises(UserError, match="is not valid JSON .*truncated or corrupt"):
        sidecar.load(path)
    path.write_text("[1, 2]")
    with pytest.raises(UserError, match="must be a JSON object"):
        sidecar.load(path)
    with pytest.raises(UserError, match="cannot read the plan sidecar"):
        sidecar.load(path.with_name("missing.json"))


def _edit(table: dict, name: str, change) -> None:
    """Apply `change` to the values of the text column `table[name]` (a list of their strings)."""
    values = table[name].split()
    change(values)
    table[name] = " ".join(values)


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.update(schema_version=99), "schema_version 99 is not supported"),
    (lambda d: d.update(schema="something"), "not a FlexNN plan sidecar"),
    (lambda d: d.pop("target"), "sidecar.target is missing"),
    (lambda d: d["target"].update(threads="2"), "target.threads must be an integer"),
    (lambda d: d.update(extra=1), "unknown field 'extra'"),
    (lambda d: _edit(d["profile"]["tensors"], "role", lambda v: v.__setitem__(3, "bias")), r"profile.tensors.role\[3\] is 'bias'"),
    (lambda d: _edit(d["profile"]["tensors"], "size", lambda v: v.__setitem__(0, "-5")), r"profile: tensor 0's size .* is out of range"),
    (lambda d: _edit(d["profile"]["tensors"], "size", lambda v: v.__setitem__(0, "0")), r"size 0 B is not in \[1, 2\^48\]"),
    (lambda d: _edit(d["profile"]["tensors"], "layer", lambda v: v.__setitem__(2, "1.5")), r"profile.tensors.layer\[2\] is '1.5', not an integer"),
    (lambda d: _edit(d["profile"]["tensors"], "size", lambda v: v.__setitem__(4, "1" * 20)), r"profile.tensors.size\[4\] is 1{20}, past 10\^18"),
    (lambda d: _edit(d["profile"]["tensors"], "last_use", lambda v: v.pop()), r"profile.tensors has columns of different lengths"),
    (lambda d: _edit(d["profile"]["layers"], "load_us", lambda v: v.__setitem__(1, "fast")), r"profile.layers.load_us\[1\] is 'fast', not a number"),
    (lambda d: d["profile"]["layers"].update(compute_us=[50.0] * 6), r"profile.layers.compute_us must be a string, not list"),
    (lambda d: d["plan"]["tensors"].pop("offset"), r"plan.tensors.offset is missing"),
    (lambda d: _edit(d["plan"]["tensors"], "load_after", lambda v: v.__setitem__(1, "true")), r"plan.tensors.load_after\[1\] is 'true', not an integer"),
    (lambda d: _edit(d["plan"]["dependencies"], "load", lambda v: v.append("1")), r"plan.dependencies has columns of different lengths \(comp \d+, load \d+\)"),
    (lambda d: d["plan"].update(pinned_weights="99"), r"plan.pinned_weights\[0\] is 99, not a tensor index"),
    (lambda d: d["inputs"].update(data=[0, 3]), "inputs.data must be a list of positive dimensions"),
    # an input shape the profile's copy of it cannot hold (found by python -m flexnn_ncnn.fuzz)
    (lambda d: d["inputs"].update(data=[2**31, 2, 2]), r"inputs.data \[2147483648, 2, 2\] takes .* B: they belong to different"),
    (lambda d: d.pop("schedule"), "sidecar.schedule is missing"),
    (lambda d: _edit(d["schedule"], "order", lambda v: v.append("99")), r"schedule.order\[4\] is 99, not a layer index of the 5 layers"),
    (lambda d: _edit(d["schedule"], "ranges", lambda v: v.pop()), r"schedule.ranges must hold a begin and an end per layer, not 9 numbers"),
    (lambda d: _edit(d["schedule"], "ranges", lambda v: v.__setitem__(2, "9999")), r"schedule.ranges\[1\] is \[9999, 4096\), not a \[begin, end\) pair"),
    (lambda d: _edit(d["schedule"], "order", lambda v: v.pop()), "profile.layers has 6 steps, the schedule 5"),
    (lambda d: d["target"].pop("winograd"), "target.winograd is missing"),
    (lambda d: d.pop("uncounted_rss_bytes"), "sidecar.uncounted_rss_bytes is missing"),
    (lambda d: d.update(uncounted_rss_bytes=-1), "sidecar.uncounted_rss_bytes is -1, less than 0"),
])
def test_a_malformed_field_is_named(saved: tuple[sidecar.Sidecar, Path], edit, message: str) -> None:
    _, path = saved
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    with pytest.raises(UserError, match=message):
        sidecar.load(path)


def test_a_version_4_sidecar_is_refused_in_one_line_naming_what_it_lacks(saved: tuple[sidecar.Sidecar, Path]) -> None:
    """Schema 4 had no uncounted_rss_bytes: its plans leave no room for the resident memory the runtime
    does not count, so it is refused, not read with a default."""
    _, path = saved
    data = json.loads(path.read_text())
    data["schema_version"] = 4
    del data["uncounted_rss_bytes"]
    path.write_text(json.dumps(data))
    with pytest.raises(UserError) as info:
        sidecar.load(path)
    message = str(info.value)
    assert "\n" not in message
    assert (f"schema_version 4 is not supported (this flexnn_ncnn reads {sidecar.SCHEMA_VERSION}, whose plans hold the "
            "uncounted RSS measured running them): prepare the model again") in message


@pytest.mark.parametrize("shape", [[16, 8, 4], [5, 5, 5, 4]])
def test_an_input_matching_its_copy_in_the_profile_is_accepted(shape: list[int]) -> None:
    """chain_profile()'s input copy is 2048 B: 16x8 floats in each of 4 channels, or a 4-D input of 5x5x5
    floats (500 B) per channel, each channel padded to 512 B as NCNN aligns it."""
    dataclasses.replace(chain_sidecar(), inputs={"data": shape}).validate()


def test_reserved_bytes_are_outside_bytes_and_the_uncounted_rss() -> None:
    sc = dataclasses.replace(chain_sidecar(), outside_bytes=4096, uncounted_rss_bytes=3_000_000)
    assert sc.reserved_bytes == 3_004_096


def test_a_corrupted_plan_is_refused_with_the_checkers_reason(saved: tuple[sidecar.Sidecar, Path]) -> None:
    _, path = saved
    data = json.loads(path.read_text())
    _edit(data["ladder"][1]["tensors"], "offset", lambda v: v.__setitem__(1, v[0]))  # two live tensors on one byte
    path.write_text(json.dumps(data))
    with pytest.raises(UserError, match=r"ladder\[1\] is invalid: layer \d \w+ 0 and layer \d \w+ 0 share bytes"):
        sidecar.load(path)


def test_save_is_atomic(saved: tuple[sidecar.Sidecar, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    sc, path = saved
    before = path.read_bytes()

    def crash(*args: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", crash)
    with pytest.raises(OSError, match="disk full"):
        sidecar.save(dataclasses.replace(sc, ladder=()), path)
    assert path.read_bytes() == before, "a failed write leaves the old file whole"
    assert [p.name for p in path.parent.iterdir()] == [path.name], "and no temporary file behind"


def _bytes_read() -> int:
    return int(next(l.split()[1] for l in Path("/proc/self/io").read_text().splitlines() if l.startswith("rchar:")))


def test_the_sampled_digest_tells_files_apart_without_reading_them_whole(tmp_path: Path) -> None:
    """Opening a plan identifies its weights by size and 32 sampled 64 KiB blocks: a changed block or
    length is seen, and a 256 MiB .bin costs at most 2 MiB of reads."""
    path = tmp_path / "model.bin"
    with open(path, "wb") as f:
        f.truncate(256 << 20)
    before = _bytes_read()
    digest = sampled_digest(path)
    assert _bytes_read() - before <= DIGEST_BLOCKS * DIGEST_BLOCK_BYTES + 4096  # and /proc/self/io's own text
    assert digest.startswith(f"{256 << 20}:")
    with open(path, "r+b") as f:
        f.seek(((256 << 20) - DIGEST_BLOCK_BYTES) * 16 // (DIGEST_BLOCKS - 1) + 7)  # inside the 17th block
        f.write(b"\x01")
    changed = sampled_digest(path)
    with open(path, "r+b") as f:
        f.truncate((256 << 20) - 1)
    assert len({digest, changed, sampled_digest(path)}) == 3
    small = tmp_path / "small.bin"
    small.write_bytes(bytes(1000))
    first = sampled_digest(small)
    small.write_bytes(bytes(999) + b"\x01")  # a small file is read whole
    assert sampled_digest(small) != first


def _json_values(node: object) -> int:
    """How many values a parsed JSON tree holds, containers included: what parsing it allocates."""
    if isinstance(node, dict):
        return 1 + sum(_json_values(v) for v in node.values())
    if isinstance(node, list):
        return 1 + sum(_json_values(v) for v in node)
    return 1


def test_a_large_sidecar_parses_into_few_python_objects(tmp_path: Path) -> None:
    """A Session keeps resident every page loading its sidecar touched, and Python's allocator keeps an
    arena while one object in it lives: each column is one string, parsed into an array, so 2,000
    layers (5,998 tensors: 48,000 values in the profile alone) make a JSON tree of a few dozen values,
    as 6 layers do."""
    sizes = []
    for layers in (6, 2000):
        sc = chain_sidecar(budget=10_000_000, layers=layers)
        path = tmp_path / f"chain{layers}{sidecar.SUFFIX}"
        sidecar.save(sc, path)
        sizes.append(_json_values(json.loads(path.read_text())))
        assert sidecar.load(path) == sc
    assert sizes[0] == sizes[1] < 100, sizes
