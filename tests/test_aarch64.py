"""The linux-aarch64 cross build: the C++ smoke program runs under qemu-aarch64 and matches host.

qemu's default CPU (`max`) reports fp16 arithmetic, so NCNN switches to fp16 there: compare
`-cpu cortex-a72` (no fp16) tightly, and the default CPU within fp16's precision.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

import smoke_model
from helpers import QEMU, built
from helpers import stock_output
from test_smoke import assert_close, run_smoke_program

PT_INTERP = 3
# fp16 storage and arithmetic keep ~11 bits of mantissa; accumulated over a 3x3x3 conv and a
# 1024-long dot product the relative error stays within a few 1e-3 of max|ref|
FP16_RTOL = 3e-2


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory):
    param, bin_, x = smoke_model.write(tmp_path_factory.mktemp("smoke"))
    return param, bin_, x, stock_output(param, bin_, x)


@pytest.mark.parametrize("cpu, rtol", [("cortex-a72", 1e-5), (None, FP16_RTOL)], ids=["cortex-a72", "fp16-cpu"])
def test_cross_built_program_under_qemu_equals_stock_ncnn(model, tmp_path: Path, cpu: str | None, rtol: float) -> None:
    param, bin_, x, ref = model
    program = built("linux-aarch64", "native", "tests_native", "smoke_infer")
    runner = QEMU + (["-cpu", cpu] if cpu else [])
    got, report = run_smoke_program(runner, program, param, bin_, x, tmp_path, "2", "count-weights")
    assert report["isa"] == "aarch64"
    assert report["weights_total_bytes"] > smoke_model.weight_bytes()
    assert report["weights_live_after_clear"] == 0
    assert_close(got, ref, rtol)


def test_cross_built_program_is_static() -> None:
    program = built("linux-aarch64", "native", "tests_native", "smoke_infer").read_bytes()
    assert program[:4] == b"\x7fELF" and program[18] == 0xB7  # EM_AARCH64
    # no PT_INTERP program header: no dynamic loader needed, runs on any aarch64 Linux as it is
    phoff, = struct.unpack_from("<Q", program, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", program, 0x36)
    types = [struct.unpack_from("<I", program, phoff + i * phentsize)[0] for i in range(phnum)]
    assert types and PT_INTERP not in types

