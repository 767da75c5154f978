"""Stock NCNN (the `ncnn` wheel) as the oracle: run a model file pair and read back any blobs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..cli import UserError, child_error, ended_by_signal, run_main


def _ncnn():
    try:
        import ncnn  # type: ignore[import-not-found]
    except ImportError:
        raise UserError("stock NCNN is needed here: pip install ncnn==1.0.20261020") from None
    return ncnn


def check_loads(param_path: str | Path) -> None:
    """UserError unless stock NCNN loads the .param: a model our reader accepts but NCNN refuses (e.g.
    params older than the pinned NCNN reads) fails here, naming the user's file and NCNN's reason (what
    it printed to stderr, captured), not later on a sliced copy."""
    net = _ncnn().Net()
    net.opt.use_vulkan_compute = False
    with tempfile.TemporaryFile(mode="w+b") as said:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(said.fileno(), 2)
        try:
            ret = net.load_param(str(param_path))
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        said.seek(0)
        reason = "; ".join(line.strip() for line in said.read().decode(errors="replace").splitlines() if line.strip())
    if ret != 0:
        raise UserError(f"{param_path}: stock NCNN cannot load this .param ({reason or 'no reason given'}); "
                        "re-export the model for NCNN of this version")


def run_stock(param_path: str | Path, bin_path: str | Path, inputs: dict[str, np.ndarray],
              blobs: Sequence[str], *, fp32: bool = True, winograd: bool = True, sgemm: bool = True,
              num_threads: int = 1, element_bytes: dict[str, int] | None = None) -> dict[str, np.ndarray]:
    """Extract `blobs` (NCNN layout, batch-less: c,h,w / h,w / w) after feeding `inputs`.

    `fp32` turns off fp16/bf16 storage and arithmetic so the result is plain fp32 math. `element_bytes`,
    when given, receives each blob's bytes per element as NCNN stores it (1 for an int8 blob a
    requantizing layer wrote), read before the blob is converted to fp32.
    """
    ncnn = _ncnn()
    net = ncnn.Net()
    net.opt.use_vulkan_compute = False
    net.opt.num_threads = num_threads
    net.opt.lightmode = False  # keep every blob, so any can be extracted in any order
    net.opt.use_winograd_convolution = winograd
    net.opt.use_sgemm_convolution = sgemm
    if fp32:
        for flag in ("use_fp16_storage", "use_fp16_packed", "use_fp16_arithmetic", "use_bf16_storage", "use_bf16_packed"):
            setattr(net.opt, flag, False)
    if net.load_param(str(param_path)) != 0:
        raise UserError(f"{param_path}: stock NCNN cannot load this .param")
    if net.load_model(str(bin_path)) != 0:
        raise UserError(f"{bin_path}: stock NCNN cannot load this .bin")
    ex = net.create_extractor()
    for name, array in inputs.items():
        ex.input(name, input_mat(ncnn, array))
    out = {}
    for name in blobs:
        if element_bytes is not None:
            ret, stored = ex.extract(name, 1)  # 1: as stored, neither unpacked nor converted
            if ret == 0 and not stored.empty():
                element_bytes[name] = stored.elemsize // stored.elempack
        ret, mat = ex.extract(name)
        if ret != 0:
            raise UserError(f"stock NCNN failed to compute blob {name} (code {ret})")
        out[name] = output_array(mat)
    return out


def blob_shapes_isolated(param_path: str | Path, bin_path: str | Path, inputs: dict[str, np.ndarray], blobs: Sequence[str],
                         purpose: str = "") -> dict[str, tuple[tuple[int, ...], int]]:
    """Each of `blobs` after feeding `inputs` to stock NCNN (fp32): its numpy shape (run_stock's) and
    its bytes per element as stored, run in a child process: a model NCNN itself crashes on (a layer
    pnnx wrote that divides by zero, e.g. a Concat along axis -233) is a UserError naming the signal
    and `purpose`, not the end of this process. The request (inputs by position, their names, the
    blobs) goes through an .npz file, the answer through a JSON one."""
    with tempfile.TemporaryDirectory(prefix="flexnn-stock-") as tmp:
        request, answer = Path(tmp) / "request.npz", Path(tmp) / "answer.json"
        np.savez(request, *inputs.values(), names=np.array(list(inputs), dtype=str), blobs=np.array(list(blobs), dtype=str))
        proc = subprocess.run([sys.executable, "-m", "flexnn_ncnn.ncnn_model.stock", str(param_path), str(bin_path),
                               str(request), str(answer)], capture_output=True, text=True)
        if proc.returncode < 0:
            how = ended_by_signal(-proc.returncode)
            if how.startswith("was stopped"):
                raise UserError(f"stock NCNN {how} running the model{purpose}")
            raise UserError(f"stock NCNN {how} running the model{purpose}: NCNN cannot run it as written; re-export it")
        if proc.returncode != 0:
            raise UserError(f"stock NCNN running the model{purpose}: {child_error(proc)}")
        measured = json.loads(answer.read_text())
    return {b: (tuple(shape), size) for b, shape, size in zip(blobs, measured["shapes"], measured["element_bytes"])}


def _run_child(argv: Sequence[str] | None = None) -> int:
    """PARAM BIN REQUEST.npz ANSWER.json: blob_shapes_isolated's child."""
    args = sys.argv[1:] if argv is None else list(argv)
    if len(args) != 4:
        raise UserError("usage: python -m flexnn_ncnn.ncnn_model.stock PARAM BIN REQUEST.npz ANSWER.json "
                        "(blob_shapes_isolated's child)")
    param_path, bin_path, request, answer = args
    with np.load(request) as given:
        inputs = {str(name): given[f"arr_{i}"] for i, name in enumerate(given["names"])}
        blobs = [str(b) for b in given["blobs"]]
    element_bytes: dict[str, int] = {}
    out = run_stock(param_path, bin_path, inputs, blobs, element_bytes=element_bytes)
    Path(answer).write_text(json.dumps({"shapes": [list(out[b].shape) for b in blobs],
                                        "element_bytes": [element_bytes.get(b, 4) for b in blobs]}))
    return 0


def input_mat(ncnn: Any, array: np.ndarray) -> Any:
    """`array` copied into a Mat NCNN laid out itself. ncnn.Mat(array) wraps the array with its channels packed
    back to back, while Mat::channel_range (Crop, Slice) steps channels by NCNN's 16-byte aligned stride: a
    Crop of a wrapped c,h,w input whose h·w is not a multiple of 4 reads the wrong channels."""
    array = np.asarray(array, dtype=np.float32)
    mat = ncnn.Mat(*reversed(array.shape))
    np.array(mat, copy=False)[...] = array
    return mat


def output_array(mat: Any) -> np.ndarray:
    """A copy of an extracted blob (an ncnn.Mat); an empty Mat (e.g. DetectionOutput with no detection) has no buffer
    to convert (numpy reads through a null pointer): an empty array."""
    return np.zeros((0,), np.float32) if mat.empty() else np.array(mat, dtype=np.float32, copy=True)


if __name__ == "__main__":
    sys.exit(run_main(_run_child))
