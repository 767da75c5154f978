"""A small conv+FC NCNN model written by hand, with seeded weights: the foundation's smoke test.

Input 3x16x16 -> Convolution 3x3 (16 out, pad 1, bias) -> ReLU -> Pooling max 2x2 s2
-> InnerProduct (10, bias). Its .bin is laid out as NCNN's loaders read it: each weight matrix is
a 4-byte storage flag (0 = raw fp32) then its floats; each bias is raw floats with no flag.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

INPUT_SHAPE = (3, 16, 16)  # c, h, w
CONV_OUT = 16
FC_OUT = 10

PARAM = f"""7767517
5 5
Input            data     0 1 data 0={INPUT_SHAPE[2]} 1={INPUT_SHAPE[1]} 2={INPUT_SHAPE[0]}
Convolution      conv1    1 1 data conv1 0={CONV_OUT} 1=3 4=1 5=1 6={CONV_OUT * INPUT_SHAPE[0] * 9}
ReLU             relu1    1 1 conv1 relu1
Pooling          pool1    1 1 relu1 pool1 0=0 1=2 2=2
InnerProduct     fc       1 1 pool1 output 0={FC_OUT} 1=1 2={FC_OUT * CONV_OUT * 8 * 8}
"""


def write(folder: Path, seed: int = 0) -> tuple[Path, Path, np.ndarray]:
    """Write smoke.param/.bin into `folder`; returns their paths and a seeded input (c, h, w)."""
    rng = np.random.default_rng(seed)
    flag = np.zeros(1, dtype="<u4").tobytes()

    def floats(*shape: int) -> bytes:
        return rng.standard_normal(shape).astype("<f4").tobytes()

    blob = (flag + floats(CONV_OUT * INPUT_SHAPE[0] * 9) + floats(CONV_OUT)
            + flag + floats(FC_OUT * CONV_OUT * 8 * 8) + floats(FC_OUT))
    param, bin_ = folder / "smoke.param", folder / "smoke.bin"
    param.write_text(PARAM)
    bin_.write_bytes(blob)
    return param, bin_, rng.standard_normal(INPUT_SHAPE).astype(np.float32)


def weight_bytes() -> int:
    """Bytes of fp32 weights and biases in the model (storage flags excluded)."""
    return 4 * (CONV_OUT * INPUT_SHAPE[0] * 9 + CONV_OUT + FC_OUT * CONV_OUT * 8 * 8 + FC_OUT)
