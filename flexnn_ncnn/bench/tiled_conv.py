"""`python -m flexnn_ncnn.bench.tiled_conv`: input slicing of Im2col+GEMM convolution (paper Fig. 11).

Every conv layer of VGG-19 at 224x224, one model each (seeded random weights), run through the
patched NCNN (`tests_native/conv_infer` of the target's build) stock (no param 26/27: NCNN's own
kernel choice) and with the im2col+GEMM kernel forced (param 26=2) in T = 1, 2, 4, 8, 16 tiles
(param 27, ncnn_patches/0002): median latency and the workspace peak (the counting allocator
behind `opt.workspace_allocator`), as a table on stdout and JSON with `--json`.
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from ..cli import UserError, add_logging_args, run_main, setup_logging

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_TILES = (1, 2, 4, 8, 16)


@dataclass(frozen=True)
class ConvShape:
    """One Convolution: input c×h×w, `out` channels, square kernel, stride, dilation, padding."""

    name: str
    c: int
    h: int
    w: int
    out: int
    k: int
    stride: int = 1
    dilation: int = 1
    pad: int = 0

    @property
    def out_hw(self) -> tuple[int, int]:
        extent = self.dilation * (self.k - 1) + 1
        return ((self.h + 2 * self.pad - extent) // self.stride + 1, (self.w + 2 * self.pad - extent) // self.stride + 1)

    @property
    def im2col_bytes(self) -> int:
        """fp32 bytes of the whole K×N im2col matrix (before NCNN's tile rounding)."""
        oh, ow = self.out_hw
        return 4 * self.c * self.k * self.k * oh * ow


def vgg19_convs(size: int = 224) -> list[ConvShape]:
    """VGG-19's 16 conv layers (3x3, pad 1, stride 1) at size×size input."""
    convs: list[ConvShape] = []
    c, hw = 3, size
    for stage, (width, n) in enumerate(((64, 2), (128, 2), (256, 4), (512, 4), (512, 4)), start=1):
        for i in range(1, n + 1):
            convs.append(ConvShape(f"conv{stage}_{i}", c, hw, hw, width, 3, pad=1))
            c = width
        hw //= 2
    return convs


def write_conv_model(folder: Path, shape: ConvShape, *, kernel: int | None = None, tiles: int | None = None,
                     seed: int = 0) -> tuple[Path, Path, np.ndarray]:
    """`folder/<name>.param/.bin`: Input -> Convolution (bias) -> output, seeded weights and input.

    `kernel` and `tiles` are written as param ids 26 and 27 when given (docs/SLICING.md).
    """
    rng = np.random.default_rng(seed)
    weights = shape.out * shape.c * shape.k * shape.k
    extra = "".join(f" {key}={value}" for key, value in ((26, kernel), (27, tiles)) if value is not None)
    param = (f"7767517\n2 2\n"
             f"Input data 0 1 data 0={shape.w} 1={shape.h} 2={shape.c}\n"
             f"Convolution conv 1 1 data output 0={shape.out} 1={shape.k} 2={shape.dilation} 3={shape.stride} "
             f"4={shape.pad} 5=1 6={weights}{extra}\n")
    scale = 1.0 / np.sqrt(shape.c * shape.k * shape.k)
    blob = (np.zeros(1, "<u4").tobytes() + (rng.standard_normal(weights) * scale).astype("<f4").tobytes()
            + rng.standard_normal(shape.out).astype("<f4").tobytes())
    stem = folder / f"{shape.name}.k{kernel}.t{tiles}"
    param_path, bin_path = stem.with_suffix(".param"), stem.with_suffix(".bin")
    param_path.write_text(param)
    bin_path.write_bytes(blob)
    return param_path, bin_path, rng.standard_normal((shape.c, shape.h, shape.w)).astype(np.float32)


def conv_infer(program: Path, param: Path, bin_: Path, x: np.ndarray, tmp: Path, *, threads: int = 1,
               winograd: bool = True, runs: int = 0, runner: Sequence[str] = ()) -> tuple[np.ndarray, dict]:
    """Run tests/native/conv_infer: (output, {workspace_peak_bytes, workspace_largest_bytes, median_ms})."""
    np.save(tmp / "in.npy", x)
    out = tmp / "out.npy"
    proc = subprocess.run([*runner, str(program), str(param), str(bin_), str(tmp / "in.npy"), str(out), str(threads),
                           str(int(winograd)), str(runs)], capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise UserError(f"{program.name} failed on {param.name}: {proc.stderr.strip()}")
    return np.load(out), json.loads(proc.stdout)


@dataclass
class Row:
    layer: str
    config: str  # "stock" (NCNN's own kernel choice) or "T=<tiles>" (im2col+GEMM forced, T tiles)
    median_ms: float
    workspace_peak_bytes: int
    workspace_largest_bytes: int
    im2col_bytes: int | None = None  # T rows: the peak minus the rest of the workspace (T=1's peak - its im2col)


def measure(shapes: Sequence[ConvShape], tiles: Sequence[int], program: Path, *, threads: int, runs: int) -> list[Row]:
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="tiled_conv.") as tmp_dir:
        tmp = Path(tmp_dir)
        for shape in shapes:
            configs: list[tuple[str, int | None, int | None]] = [("stock", None, None)]
            configs += [(f"T={t}", 2, t) for t in tiles]
            ref = None
            rest = None
            for config, kernel, t in configs:
                param, bin_, x = write_conv_model(tmp, shape, kernel=kernel, tiles=t)
                out, report = conv_infer(program, param, bin_, x, tmp, threads=threads, runs=runs)
                if ref is None:
                    ref = out
                elif float(np.max(np.abs(out - ref))) > 1e-4 * float(np.max(np.abs(ref))):
                    raise UserError(f"{shape.name} {config}: output differs from stock")
                peak, largest = report["workspace_peak_bytes"], report["workspace_largest_bytes"]
                if t == 1:
                    rest = peak - largest  # T=1: the whole im2col matrix is the largest allocation
                row = Row(shape.name, config, report["median_ms"], peak, largest)
                if t is not None and rest is not None:
                    row.im2col_bytes = peak - rest
                rows.append(row)
                log.info("%s %s: %.2f ms, workspace peak %d", shape.name, config, row.median_ms, peak)
                param.unlink()
                bin_.unlink()
    return rows


def table(rows: Sequence[Row]) -> str:
    lines = ["| layer | config | median ms | ratio to T=1 | workspace peak MB | im2col MB |", "|---|---|---|---|---|---|"]
    base = {r.layer: r.median_ms for r in rows if r.config == "T=1"}
    for r in rows:
        ratio = r.median_ms / base[r.layer] if base.get(r.layer) else float("nan")
        im2col = "" if r.im2col_bytes is None else f"{r.im2col_bytes / 1e6:.2f}"
        lines.append(f"| {r.layer} | {r.config} | {r.median_ms:.2f} | {ratio:.2f} | {r.workspace_peak_bytes / 1e6:.2f} | {im2col} |")
    configs = list(dict.fromkeys(r.config for r in rows))
    total_base = sum(base.values())
    for config in configs:
        mine = [r for r in rows if r.config == config]
        total = sum(r.median_ms for r in mine)
        ratio = total / total_base if total_base else float("nan")
        lines.append(f"| **all** | {config} | {total:.2f} | {ratio:.2f} | {max(r.workspace_peak_bytes for r in mine) / 1e6:.2f} (max) | |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flexnn_ncnn.bench.tiled_conv", description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="host", help="build whose tests_native/conv_infer runs (host only: timing)")
    parser.add_argument("--tiles", default=",".join(map(str, DEFAULT_TILES)), help="tile counts (default %(default)s)")
    parser.add_argument("--layers", default="", help="comma-separated VGG-19 layer names (default: all 16)")
    parser.add_argument("--size", type=int, default=224, help="input height and width (default %(default)s)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=5, help="timed inferences per configuration (median)")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    add_logging_args(parser)
    args = parser.parse_args(argv)
    setup_logging(args.verbose)

    program = REPO_ROOT / "build" / args.target / "native" / "tests_native" / "conv_infer"
    if not program.exists():
        raise UserError(f"{program} is missing: run `python -m flexnn_ncnn.build --target {args.target}` first")
    shapes = vgg19_convs(args.size)
    if args.layers:
        wanted = set(args.layers.split(","))
        shapes = [s for s in shapes if s.name in wanted]
        if not shapes:
            raise UserError(f"no VGG-19 conv layer named {args.layers}")
    tiles = [int(t) for t in args.tiles.split(",")]
    rows = measure(shapes, tiles, program, threads=args.threads, runs=args.runs)
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main))
