"""Input-sliced Im2col+GEMM convolution (ncnn_patches/0002): same output, im2col buffer / T.

One Convolution per model (odd channels, stride 2, dilation 2, padding, 1x1 to 7x7), param 26=2
(im2col+GEMM forced) and 27=T (tiles). The patched NCNN must equal stock NCNN (the `ncnn` wheel,
which ignores both ids) and its im2col matrix — a conv layer's largest workspace allocation,
counted by the allocator behind `opt.workspace_allocator` — must shrink to 1/T of the whole one
plus one tile's rounding. On host through the native module, on ARM through the cross-built
`conv_infer` under qemu-aarch64: `-cpu cortex-a72` (fp32 NEON kernels) and qemu's default CPU
(fp16 arithmetic: NCNN's fp16 im2col kernel, half-size matrix, fp16 tolerance).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import pytest

from flexnn_ncnn import native
from flexnn_ncnn.bench.tiled_conv import ConvShape, conv_infer, write_conv_model
from helpers import QEMU, assert_close, built, run_stock

RTOL = 1e-4
# qemu's default CPU has fp16 arithmetic, which NCNN then uses (tests/test_aarch64.py): ~11-bit mantissa
FP16_RTOL = 3e-2
# NCNN rounds a slice up to whole N tiles (at most 16 columns: AVX-512's tile granule) and K up to
# its SIMD width; one column of the rounded matrix is at most whole_bytes / N
ROUNDING_COLUMNS = 17

SHAPES = [
    ConvShape("3x3s1p1", 13, 23, 21, 19, 3, pad=1),
    ConvShape("3x3s2p1", 13, 31, 29, 23, 3, stride=2, pad=1),
    ConvShape("3x3d2p2", 11, 25, 27, 21, 3, dilation=2, pad=2),
    ConvShape("1x1", 13, 19, 17, 29, 1),
    ConvShape("1x1s2", 21, 30, 26, 18, 1, stride=2),
    ConvShape("5x5p2", 7, 27, 25, 18, 5, pad=2),
    ConvShape("7x7s2p3", 5, 33, 35, 17, 7, stride=2, pad=3),
    ConvShape("3x3pack8", 24, 20, 20, 40, 3, pad=1),
]
TILES = (2, 3, 5)


def n_pixels(shape: ConvShape) -> int:
    oh, ow = shape.out_hw
    return oh * ow


Run = Callable[[int | None, int | None], tuple[np.ndarray, dict]]


def check_tiles(shape: ConvShape, ref: np.ndarray, run: Run, rtol: float = RTOL, value_bytes: int = 4) -> None:
    """`run(kernel, tiles) -> (output, workspace counts)`; the whole and the sliced im2col compared.

    The whole im2col matrix is the layer's largest workspace allocation; the rest of the workspace
    live with it (the padded input, layout conversions) does not depend on the tiles, so the peak
    with T tiles minus that rest is the sliced matrix.
    """
    out, whole = run(2, 1)
    assert_close(out, ref, rtol)
    whole_bytes = whole["largest_bytes"]
    assert whole_bytes >= shape.im2col_bytes // 4 * value_bytes
    rest = whole["peak_bytes"] - whole_bytes
    column = whole_bytes / n_pixels(shape)
    for tiles in TILES:
        out, sliced = run(2, tiles)
        assert_close(out, ref, rtol)
        sliced_bytes = sliced["peak_bytes"] - rest
        assert sliced_bytes <= whole_bytes / tiles + ROUNDING_COLUMNS * column, (tiles, sliced, whole)


@pytest.fixture(scope="module")
def native_module():
    return native.load()


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape", SHAPES, ids=[s.name for s in SHAPES])
def test_tiled_conv_equals_stock_on_host(native_module, shape: ConvShape, threads: int, tmp_path: Path) -> None:
    param, bin_, x = write_conv_model(tmp_path, shape)
    ref = run_stock(param, bin_, {"data": x}, ["output"], num_threads=threads)["output"]

    def run(kernel: int | None, tiles: int | None) -> tuple[np.ndarray, dict]:
        p, b, _ = write_conv_model(tmp_path, shape, kernel=kernel, tiles=tiles)
        outputs, stats = native_module.run_stock(str(p), str(b), {"data": x}, ["output"], threads=threads,
                                                 count_workspace=True)
        return outputs["output"], stats["workspace"]

    # without the ids the patched build is stock NCNN
    out, _ = run(None, None)
    assert_close(out, ref, RTOL)
    check_tiles(shape, ref, run)


@pytest.mark.parametrize("shape, sliced", [(SHAPES[0], False), (SHAPES[3], True)], ids=["winograd", "im2col"])
def test_param_27_alone_slices_only_what_ncnn_runs_as_im2col(native_module, shape: ConvShape, sliced: bool,
                                                             tmp_path: Path) -> None:
    """Without 26=2, a 3x3 stride-1 conv stays Winograd (27 has nothing to slice); a 1x1 is im2col+GEMM anyway."""
    peaks = {}
    for tiles in (None, 4):
        p, b, x = write_conv_model(tmp_path, shape, tiles=tiles)
        _, stats = native_module.run_stock(str(p), str(b), {"data": x}, ["output"], count_workspace=True)
        peaks[tiles] = stats["workspace"]["peak_bytes"]
    assert (peaks[4] < peaks[None]) == sliced, peaks


@pytest.mark.parametrize("cpu, rtol, value_bytes", [("cortex-a72", RTOL, 4), (None, FP16_RTOL, 2)], ids=["cortex-a72", "fp16-cpu"])
@pytest.mark.parametrize("shape", SHAPES, ids=[s.name for s in SHAPES])
def test_tiled_conv_equals_stock_under_qemu_aarch64(shape: ConvShape, cpu: str | None, rtol: float, value_bytes: int,
                                                    tmp_path: Path) -> None:
    program = built("linux-aarch64", "native", "tests_native", "conv_infer")
    param, bin_, x = write_conv_model(tmp_path, shape)
    ref = run_stock(param, bin_, {"data": x}, ["output"])["output"]

    def run(kernel: int | None, tiles: int | None) -> tuple[np.ndarray, dict]:
        p, b, _ = write_conv_model(tmp_path, shape, kernel=kernel, tiles=tiles)
        out, report = conv_infer(program, p, b, x, tmp_path, threads=2, runner=QEMU + (["-cpu", cpu] if cpu else []))
        assert report["isa"] == "aarch64"
        return out, {"largest_bytes": report["workspace_largest_bytes"], "peak_bytes": report["workspace_peak_bytes"]}

    if cpu:  # without the ids: stock NCNN (with fp16 arithmetic its Winograd F(6,3) is off by ~5% of max|ref|)
        out, _ = run(None, None)
        assert_close(out, ref, rtol)
    check_tiles(shape, ref, run, rtol, value_bytes)


def test_a_padded_tiled_conv_makes_no_bordered_copy_of_its_input(tmp_path: Path) -> None:
    """A padded 3x3 conv at 224x224x64, input-sliced: prepare records its intermediates (the workspace
    of its step) below one input's size, where the whole bordered copy alone (226x226x64) is larger;
    each slice borders only the rows it reads. The output equals stock NCNN's."""
    from flexnn_ncnn.prepare import prepare_model

    shape = ConvShape("3x3p1-224", 64, 224, 224, 64, 3, pad=1)
    param, bin_, x = write_conv_model(tmp_path, shape, kernel=2, tiles=64)
    input_bytes = x.nbytes
    assert 4 * 64 * 226 * 226 > input_bytes  # what the bordered copy alone would take
    content = prepare_model(param, bin_, None, {"data": x.shape})
    conv_step = content.schedule.order.index(1) + 1  # layer 1 is the Convolution
    intermediates = [t.size for t in content.profile.tensors if t.role == "intermediate" and t.layer == conv_step]
    assert intermediates and sum(intermediates) < input_bytes, intermediates
    out, _ = native.load().run_stock(str(param), str(bin_), {"data": x}, ["output"])
    assert_close(out["output"], run_stock(param, bin_, {"data": x}, ["output"])["output"], RTOL)
