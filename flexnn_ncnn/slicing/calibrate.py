"""Measure the stream-aware kernel choice's numbers on this machine (streaming.py).

`python -m flexnn_ncnn.slice MODEL.param --calibrate [--threads N]` prepares the unsliced model
(prepare.py: one sequential inference recording each layer's compute time) with NCNN's own kernels
and with im2col+GEMM forced on every Convolution (param 26 = 2). Over the Winograd-eligible
convolutions it takes, per kernel, the median of MACs / compute time per computing thread (each
layer's least time over two prepares of each, interleaved, against other load; MACs as
ConvModel.macs counts them for the slicer's fastest Winograd candidate and for im2col+GEMM, so the
Winograd rate is of whichever F(m,3) NCNN runs, in the slicer's count). The loader bandwidth is
the best of three reads of NCNN's kernels' transformed weights from the page cache into a 64 MiB
buffer, 4 MiB per pread, as the loading thread reads records into the arena; with --map-weights,
of three passes mapping them 4 MiB at a time, populated and unmapped, as it maps records.
"""

from __future__ import annotations

import logging
import mmap
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..analysis import ConvModel, analyze
from ..cli import UserError
from ..ncnn_model import BlobShape, Graph, NcnnParam
from ..prepare import RuntimeOptions, prepare_model
from .rewrite import with_kernel
from .streaming import StreamModel

log = logging.getLogger(__name__)

BUFFER_BYTES = 64 << 20
READ_BYTES = 4 << 20  # divides BUFFER_BYTES
READ_RUNS = 3
PREPARE_RUNS = 2  # per kernel; each layer's least compute time counts


@dataclass(frozen=True)
class Calibration:
    stream: StreamModel
    layers: int  # Winograd-eligible convolutions the rates are medians over


def calibrate(param: NcnnParam, param_path: Path, bin_path: Path, graph: Graph, shapes: dict[str, BlobShape],
              options: RuntimeOptions, scratch: Path) -> Calibration:
    """Rates and bandwidth measured here with `options.threads` computing threads; files go to `scratch`."""
    eligible = {a.layer.name: a.model for a in analyze(graph, shapes)
                if isinstance(a.model, ConvModel) and a.model.kernels[0].startswith("winograd")}
    if not eligible:
        raise UserError(f"{param_path}: no Winograd-eligible convolution (3x3, stride 1, dilation 1) to calibrate on")
    forced = scratch / "im2col.param"
    forced.write_text(NcnnParam([with_kernel(layer, "im2col_gemm", 1) for layer in param]).format())
    inputs = {name: tuple(shapes[name].numpy()) for name in graph.inputs}
    names = [layer.name for layer in param]
    runs = {"winograd": (param_path, scratch / "ncnn.transformed"), "im2col_gemm": (forced, scratch / "im2col.transformed")}
    fastest: dict[str, dict[str, float]] = {kernel: {} for kernel in runs}  # per kernel, layer: least compute_us
    for attempt in range(PREPARE_RUNS):  # interleaved, so that a burst of other load spoils one run of each at most
        for kernel, (path, out) in runs.items():
            log.info("preparing %s with %s kernels (%d of %d)", path.name,
                     "NCNN's own" if kernel == "winograd" else "im2col+GEMM", attempt + 1, PREPARE_RUNS)
            content = prepare_model(path, bin_path, None, inputs, options, transformed=out)
            # profile layer s + 1 is step s + 1: the layer at schedule.order[s]
            for s, i in enumerate(content.schedule.order):
                us = content.profile.layers[s + 1].compute_us
                fastest[kernel][names[i]] = min(us, fastest[kernel].get(names[i], us))
    rates = {kernel: statistics.median(
        m.macs(m.kernels[0] if kernel == "winograd" else kernel) / (fastest[kernel][name] * 1e-6) / options.threads
        for name, m in eligible.items()) for kernel in runs}
    bandwidth = (map_bandwidth if options.map_weights else pread_bandwidth)(runs["winograd"][1])
    return Calibration(StreamModel(bandwidth, rates["winograd"], rates["im2col_gemm"], options.threads), len(eligible))


def _best_bandwidth(path: Path, take: Callable[[int, int, int], object]) -> float:
    """Bytes/s of `take(fd, offset, length)` over `path` READ_BYTES at a time, best of READ_RUNS
    passes after one that brings the file into the page cache."""
    size = path.stat().st_size
    best = 0.0
    fd = os.open(path, os.O_RDONLY)
    try:
        for run in range(READ_RUNS + 1):
            start = time.perf_counter()
            for offset in range(0, size, READ_BYTES):
                take(fd, offset, min(READ_BYTES, size - offset))
            if run:
                best = max(best, size / (time.perf_counter() - start))
    finally:
        os.close(fd)
    return best


FAULT_AROUND_BYTES = 64 * 1024  # the window a read fault on a mapped file page maps (runtime/mapped_weights.h)


def _map_and_fault_in(fd: int, offset: int, length: int) -> None:
    mapped = mmap.mmap(fd, length, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ, offset=offset)
    try:
        for at in range(0, length, FAULT_AROUND_BYTES):
            mapped[at]  # the read faults the window in
    finally:
        mapped.close()


def map_bandwidth(path: Path) -> float:
    """Bytes/s mapping `path` from the page cache (one read fault a window, then unmapped), as the loader
    maps records."""
    return _best_bandwidth(path, _map_and_fault_in)


def pread_bandwidth(path: Path) -> float:
    """Bytes/s reading `path` from the page cache into a BUFFER_BYTES buffer, as the loader reads records."""
    buffer = memoryview(bytearray(BUFFER_BYTES))
    return _best_bandwidth(path, lambda fd, offset, length: os.preadv(
        fd, [buffer[offset % BUFFER_BYTES:offset % BUFFER_BYTES + length]], offset))
