"""The pipelined executor under ThreadSanitizer and AddressSanitizer: >= 1000 inferences across
models and budgets with no report and no hang (the subprocess timeout is the watchdog).

The instrumented builds are `python -m flexnn_ncnn.build --sanitizer tsan|asan` (build/host-tsan,
build/host-asan): NCNN with its own OpenMP runtime, which TSAN instruments (it cannot see inside
GCC's libgomp), and only the layers these models use. A report goes to stderr, which must be empty.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import built
from test_runtime import WRITERS, write_wide
from test_runtime_bench import stress
from test_value_dependent import YOLOV3, seeded_input, write_model

INFERENCES_PER_MODEL = 350  # x 3 models = 1050 pipelined inferences per sanitizer


@pytest.mark.parametrize("sanitizer", ["tsan", "asan"])
@pytest.mark.parametrize("model", sorted(WRITERS))
def test_pipelined_inferences_under_a_sanitizer_report_nothing(sanitizer: str, model: str, tmp_path: Path) -> None:
    program = built(f"host-{sanitizer}", "native", "tests_native", "runtime_stress")
    report = stress([], program, tmp_path, 2, INFERENCES_PER_MODEL, WRITERS[model])
    assert report["inferences"] == INFERENCES_PER_MODEL and report["budgets"] == 3


@pytest.mark.parametrize("sanitizer", ["tsan", "asan"])
def test_direct_io_and_middle_cores_under_a_sanitizer_report_nothing(sanitizer: str, tmp_path: Path) -> None:
    """The O_DIRECT window's aligned reads and copies, and the loader's pinning, in pipelined runs."""
    program = built(f"host-{sanitizer}", "native", "tests_native", "runtime_stress")
    report = stress([], program, tmp_path, 2, 200, WRITERS["residual"], "direct_io=1", "loader=middle")
    assert report["inferences"] == 200 and report["budgets"] == 3


@pytest.mark.parametrize("sanitizer", ["tsan", "asan"])
@pytest.mark.parametrize("weights", ["pretransformed", "raw", "mapped"])
def test_computing_threads_loading_under_a_sanitizer_report_nothing(sanitizer: str, weights: str, tmp_path: Path) -> None:
    """loader=computing: no loading thread; the computing thread loads each layer before it computes, its
    large reads (the wide model's 2 MiB fc1, raw and pre-transformed) or a mapped record's faults split
    among the OpenMP team of 2."""
    program = built(f"host-{sanitizer}", "native", "tests_native", "runtime_stress")
    mapped = ["map_weights=1"] if weights == "mapped" else []
    report = stress([], program, tmp_path, 2, 200, write_wide, "loader=computing", *mapped, pretransform=weights != "raw",
                    budgets=("min", "6000000", "100000000"))
    assert report["inferences"] == 200 and report["budgets"] == 3
    assert (report["mapped_weight_bytes_total"] > 0) == (weights == "mapped")


@pytest.mark.parametrize("sanitizer", ["tsan", "asan"])
def test_heap_buffers_without_the_static_arena_under_a_sanitizer_report_nothing(sanitizer: str, tmp_path: Path) -> None:
    """The ablation w.o.mem: every buffer from the heap, each streamed layer released by the computing
    thread right after it computes while the loading thread builds the next ones."""
    program = built(f"host-{sanitizer}", "native", "tests_native", "runtime_stress")
    report = stress([], program, tmp_path, 2, 200, WRITERS["residual"], "static_arena=0")
    assert report["inferences"] == 200 and report["budgets"] == 3


@pytest.mark.parametrize("sanitizer", ["tsan", "asan"])
@pytest.mark.parametrize("model", ["residual", "convfc"])
@pytest.mark.parametrize("canaries", [True, False])
def test_mapped_weights_under_a_sanitizer_report_nothing(sanitizer: str, model: str, canaries: bool, tmp_path: Path) -> None:
    """Mapped weights: the loading thread maps a layer's records over their arena bytes and builds it
    on them while the computing threads run the layers before; the computing thread gives back the
    pages a written tensor takes next once the layer has computed (with canaries on the whole arena:
    every page), across budget switches."""
    program = built(f"host-{sanitizer}", "native", "tests_native", "runtime_stress")
    report = stress([], program, tmp_path, 2, 200, WRITERS[model], "map_weights=1", *(["canaries=1"] if canaries else []),
                    budgets=("min", "min*3", "100000000"))
    assert report["inferences"] == 200 and report["budgets"] == 3 and report["mapped_weight_bytes_total"] > 0


def write_detector(folder: Path):
    param, bin_ = write_model(folder, "yolov3", YOLOV3)
    return param, bin_, seeded_input(0)


@pytest.mark.parametrize("sanitizer", ["tsan", "asan"])
def test_a_detection_head_planned_at_its_bound_under_a_sanitizer_reports_nothing(sanitizer: str, tmp_path: Path) -> None:
    """The bounded slot a value-dependent layer computes in (taken before its forward, its top served
    from it, held to the end of the inference) across pipelined runs and budget switches."""
    program = built(f"host-{sanitizer}", "native", "tests_native", "runtime_stress")
    report = stress([], program, tmp_path, 2, 200, write_detector)
    assert report["inferences"] == 200 and report["budgets"] == 3
