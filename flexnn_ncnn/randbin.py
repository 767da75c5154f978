"""`python -m flexnn_ncnn.randbin model.param -o model.bin --seed N`: seeded random weights.

Like benchncnn, which runs structures without weights: every layer gets records of exactly the
layout NCNN's loader reads, with values that keep activations finite.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

from .cli import add_logging_args, run_main, setup_logging
from .ncnn_model import read_param
from .files import atomic_write
from .ncnn_model.random_weights import random_modelbin
from .units import format_size


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flexnn_ncnn.randbin", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("param", type=Path, help="NCNN text .param")
    parser.add_argument("-o", "--output", type=Path, required=True, help="the .bin to write")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--storage", choices=("fp32", "fp16"), default="fp32",
                        help="how tagged weights are stored: fp32 (flag 0) or fp16 (pnnx's default)")
    add_logging_args(parser)
    args = parser.parse_args(argv)
    setup_logging(args.verbose)
    param = read_param(args.param)
    modelbin = random_modelbin(param, args.seed, args.storage)
    atomic_write(args.output, modelbin.write)
    layers = sum(1 for _ in modelbin)
    print(f"wrote {args.output}: {format_size(modelbin.nbytes)}, {layers} weighted layers, seed {args.seed}")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
