"""Export a torch model to an NCNN `.param`/`.bin` pair with pnnx (PyPI `pnnx`)."""

from __future__ import annotations

import logging
import shutil
import tempfile
from pathlib import Path
from typing import Sequence

import torch

from ..cli import UserError

log = logging.getLogger(__name__)


def export_ncnn(model: torch.nn.Module, input_shape: Sequence[int], outdir: str | Path, name: str,
                fp16: bool = True) -> tuple[Path, Path]:
    """Write `outdir/name.param` and `outdir/name.bin`; `fp16` is pnnx's default fp16 weight storage."""
    try:
        import pnnx  # type: ignore[import-not-found]
    except ImportError:
        raise UserError("pnnx is needed to export torch models: pip install pnnx") from None
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    model = model.eval()
    example = torch.rand(*input_shape)
    with tempfile.TemporaryDirectory(prefix="flexnn-pnnx-") as tmp, torch.no_grad():
        pt = Path(tmp) / f"{name}.pt"
        # check_trace off: nn.MultiheadAttention traces differently on each call under torch 2.13
        pnnx.export(model, str(pt), example, fp16=fp16, check_trace=False)
        param, bin_ = Path(tmp) / f"{name}.ncnn.param", Path(tmp) / f"{name}.ncnn.bin"
        if not param.exists():
            raise UserError(f"pnnx did not write {param.name} for {name}")
        shutil.move(param, outdir / f"{name}.param")
        shutil.move(bin_, outdir / f"{name}.bin")
    log.info("exported %s (%s weights) to %s", name, "fp16" if fp16 else "fp32", outdir)
    return outdir / f"{name}.param", outdir / f"{name}.bin"
