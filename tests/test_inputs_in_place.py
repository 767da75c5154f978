"""Inputs NCNN reads where the caller's array lies (csrc/runtime/read_only_input.h).

An fp32 input of 3 or 4 dims whose channel planes are whole multiples of 16 bytes is handed to NCNN
as it is: prepare records it in schedule.input_uses (the bytes, and the last step NCNN holds them), the
profile holds no copy of it in the arena, and a layer that would compute in place on it clones it
first, so the caller's array is never written. Any other input is copied into the arena at step 0.
"""

from __future__ import annotations

import ctypes
import mmap
from pathlib import Path

import numpy as np
import pytest

from helpers import assert_close, stock_output
from model_helpers import written_text_model
from flexnn_ncnn import sidecar
from flexnn_ncnn.ncnn_model import BlobShape
from flexnn_ncnn.prepare import prepare_model, write_plan_file
from flexnn_ncnn.session import Session

pytest.importorskip("ncnn")

# the input goes to a ReLU, which NCNN computes in place, and to a padded conv, which reads it; 6
# channels stay unpacked on every SIMD width (no packed copy of the input stands between)
MODEL = """7767517
5 6
Input data 0 1 data 0={w} 1={h} 2=6
Split split 1 2 data a b
ReLU relu 1 1 a r
Convolution conv 1 1 b c 0=6 1=3 4=1 5=1 6=324
BinaryOp add 2 1 r c output 0=0
"""
RTOL = 1e-4


def _prepared(folder: Path, w: int, h: int) -> tuple[Path, Path, Path, sidecar.Sidecar]:
    written_text_model(MODEL.format(w=w, h=h), (1, 6, h, w), 5, folder)
    param, bin_ = folder / "a.param", folder / "a.bin"
    content = prepare_model(param, bin_, None)
    path = folder / f"a{sidecar.SUFFIX}"
    write_plan_file(content, path)
    return param, bin_, path, content


def _input_copies(content: sidecar.Sidecar) -> list[int]:
    return [t.size for t in content.profile.tensors if t.layer == 0 and t.role == "activation"]


def test_an_input_of_whole_16_byte_planes_is_read_in_place_and_never_written(tmp_path: Path) -> None:
    param, bin_, path, content = _prepared(tmp_path, 16, 12)  # planes of 768 B
    assert BlobShape.from_numpy((6, 12, 16)).read_in_place
    ((read, last_use),) = content.schedule.input_uses
    assert read == 6 * 12 * 16 * 4 and _input_copies(content) == []
    # held by the Split's outputs until the ReLU cloned it and the conv read it, not to the outputs
    assert 2 <= last_use < len(content.schedule.order) + 1
    session = Session(path, canaries=True)
    for seed in range(4):
        x = np.random.default_rng(seed).standard_normal((6, 12, 16)).astype(np.float32)
        before = x.copy()
        assert_close(session.run({"data": x})["output"], stock_output(param, bin_, before), RTOL)
        assert np.array_equal(x, before), "the ReLU computed in place on the caller's array"
    # an array at an offset numpy's allocator never gives is copied first, by the session
    raw = np.zeros(6 * 12 * 16 + 1, np.float32)
    shifted = raw[1:].reshape(6, 12, 16)
    shifted[...] = before
    assert shifted.ctypes.data % 16 != 0
    assert_close(session.run({"data": shifted})["output"], stock_output(param, bin_, before), RTOL)
    # the runtime itself refuses one (its C++ callers get the error, not a misaligned read)
    with pytest.raises(RuntimeError, match="16-byte aligned"):
        session._executor.run({"data": shifted})


def test_an_input_ending_where_its_mapping_ends_is_copied_first(tmp_path: Path) -> None:
    """NCNN's kernels may read 64 bytes past a buffer (NCNN_MALLOC_OVERREAD), which its own allocations
    leave room for: an array whose last bytes end a mapping is copied by the session and refused by the
    runtime, never read past."""
    param, bin_, path, _ = _prepared(tmp_path, 16, 12)
    libc = ctypes.CDLL(None)
    libc.mmap.restype, libc.mmap.argtypes = ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                                                               ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    page, n = mmap.PAGESIZE, 6 * 12 * 16
    base = libc.mmap(None, 3 * page, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    try:
        assert libc.munmap(base + 2 * page, page) == 0
        at_end = np.ctypeslib.as_array((ctypes.c_float * n).from_address(base + 2 * page - 4 * n)).reshape(6, 12, 16)
        at_end[...] = np.random.default_rng(9).standard_normal((6, 12, 16))
        session = Session(path)
        assert_close(session.run({"data": at_end})["output"], stock_output(param, bin_, at_end.copy()), RTOL)
        with pytest.raises(RuntimeError, match="64 readable bytes"):
            session._executor.run({"data": at_end})
    finally:
        libc.munmap(base, 2 * page)


def test_an_input_of_other_planes_is_copied_into_the_arena(tmp_path: Path) -> None:
    param, bin_, path, content = _prepared(tmp_path, 13, 7)  # planes of 364 B: NCNN pads each to 368
    assert not BlobShape.from_numpy((6, 7, 13)).read_in_place
    assert content.schedule.input_uses == ((0, -1),)
    assert _input_copies(content) and _input_copies(content)[0] >= 6 * 7 * 13 * 4
    session = Session(path, canaries=True)
    x = np.random.default_rng(7).standard_normal((6, 7, 13)).astype(np.float32)
    before = x.copy()
    assert_close(session.run({"data": x})["output"], stock_output(param, bin_, before), RTOL)
    assert np.array_equal(x, before)
