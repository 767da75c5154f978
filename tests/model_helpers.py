"""Models and comparisons shared by the model I/O, analysis, slicing and runtime tests.

The structure corpus: `struct:NAME`, the project's own (flexnn_ncnn/ncnn_model/structures.py), always;
`bench:NAME`, NCNN's benchmark structures, also when BENCHMARK_DIR holds them. Tests parametrize
over what exists at collection time, so a clone without the benchmark folder skips nothing."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from flexnn_ncnn.models import BENCH_PREFIX, DEFAULT_BENCHMARK_DIR, STRUCT_PREFIX, file_stem, keeping_every_box
from flexnn_ncnn.ncnn_model import BlobShape, Graph, ModelBin, NcnnParam, infer_shapes, parse_input_shape, read_param, weight_specs
from flexnn_ncnn.ncnn_model.random_weights import random_modelbin
from flexnn_ncnn.ncnn_model.structures import STRUCTURES

# NCNN's benchmark structures: an extra corpus, run when present (the shared material beside the
# repository, DESIGN.md §5, or FLEXNN_BENCHMARK_DIR); the project's own structures always run
BENCHMARK_DIR = Path(os.environ.get("FLEXNN_BENCHMARK_DIR") or DEFAULT_BENCHMARK_DIR)

# input shapes as benchncnn feeds them (models/ncnn-benchmark/README.md), torch NCHW
BENCHMARK_INPUTS = {
    "alexnet": (1, 3, 227, 227), "blazeface": (1, 3, 128, 128), "efficientnet_b0": (1, 3, 224, 224),
    "googlenet": (1, 3, 224, 224), "mnasnet": (1, 3, 224, 224), "mobilenet": (1, 3, 224, 224),
    "mobilenet_ssd": (1, 3, 300, 300), "mobilenet_v2": (1, 3, 224, 224), "proxylessnasnet": (1, 3, 224, 224),
    "resnet18": (1, 3, 224, 224), "resnet50": (1, 3, 224, 224), "shufflenet": (1, 3, 224, 224),
    "shufflenet_v2": (1, 3, 224, 224), "squeezenet": (1, 3, 227, 227), "squeezenet_ssd": (1, 3, 300, 300),
    "vgg16": (1, 3, 224, 224), "vision_transformer": (1, 3, 384, 384), "yolo-fastestv2": (1, 3, 352, 352),
    # int8 structures: randbin writes their int8 weight records and scales
    "googlenet_int8": (1, 3, 224, 224), "mobilenet_ssd_int8": (1, 3, 300, 300), "squeezenet_int8": (1, 3, 227, 227),
}
LARGE_WEIGHTS = 64 * 10**6  # fp32 weight bytes above which a structure's .bin is written per test, not kept
# layers whose output rows depend on the values they read: compare what they read, not what they emit
DETECTION_TYPES = ("DetectionOutput", "YoloDetectionOutput", "Yolov3DetectionOutput")


def _benchmark_file(name: str) -> Path:
    return BENCHMARK_DIR / f"{name.removeprefix(BENCH_PREFIX)}.param"


def present(*names: str) -> list[str]:
    """`names` (struct:NAME or bench:NAME) less the bench: ones BENCHMARK_DIR does not hold."""
    return [n for n in names if not n.startswith(BENCH_PREFIX) or _benchmark_file(n).is_file()]


def load_param(name: str) -> NcnnParam:
    if name.startswith(STRUCT_PREFIX):
        return STRUCTURES[name.removeprefix(STRUCT_PREFIX)].build()
    return read_param(_benchmark_file(name))


@functools.cache
def is_large(name: str) -> bool:
    return sum(spec.count for layer in load_param(name) for spec in weight_specs(layer)) * 4 > LARGE_WEIGHTS


def corpus(large: bool = False) -> list[str]:
    """The project's structures, then NCNN's benchmark structures present: the small ones or the large ones."""
    names = present(*(STRUCT_PREFIX + s for s in STRUCTURES), *(BENCH_PREFIX + b for b in BENCHMARK_INPUTS))
    return [n for n in names if is_large(n) == large]


def input_shape(name: str) -> tuple[int, ...]:
    """The torch (NCHW) input shape a corpus structure is fed."""
    if name.startswith(STRUCT_PREFIX):
        return STRUCTURES[name.removeprefix(STRUCT_PREFIX)].input_shape
    return BENCHMARK_INPUTS[name.removeprefix(BENCH_PREFIX)]


def param_file(name: str, folder: Path) -> Path:
    """The .param of a corpus structure: NCNN's own file for bench:NAME, written into `folder` for struct:NAME."""
    if name.startswith(BENCH_PREFIX):
        return _benchmark_file(name)
    path = folder / f"{file_stem(name)}.param"
    path.write_text(load_param(name).format())
    return path


@dataclass(frozen=True)
class ModelFiles:
    name: str
    param: Path
    bin: Path
    input_shape: tuple[int, ...]


def write_model(name: str, folder: Path, seed: int, storage: str = "fp32") -> ModelFiles:
    """A corpus structure's .param and a seeded random .bin beside it (fp32 or fp16 storage) in `folder`;
    a benchmark structure's DetectionOutput head keeps every box (models.keeping_every_box), so that it
    returns rows (the project's own detectors' thresholds are set for random weights)."""
    param = param_file(name, folder)
    structure = read_param(param)
    if name.startswith(BENCH_PREFIX) and keeping_every_box(structure):
        param = folder / f"{file_stem(name)}.param"
        param.write_text(structure.format())
    bin_ = folder / f"{file_stem(name)}.bin"
    with open(bin_, "wb") as f:
        random_modelbin(read_param(param), seed, storage).write(f)
    return ModelFiles(name, param, bin_, input_shape(name))


def written_text_model(text: str, shape: tuple[int, ...], seed: int, folder: Path
                       ) -> tuple[NcnnParam, ModelBin, Graph, dict[str, BlobShape]]:
    """A .param text with seeded fp32 weights, written to FOLDER/a.param and a.bin, and its graph and
    blob shapes for `shape` at its one input."""
    param = NcnnParam.parse(text)
    graph = Graph.build(param)
    shapes = infer_shapes(param, graph, {graph.inputs[0]: parse_input_shape(",".join(map(str, shape)))})
    modelbin = random_modelbin(param, seed=seed, storage="fp32")
    (folder / "a.param").write_text(param.format())
    (folder / "a.bin").write_bytes(modelbin.to_bytes())
    return param, modelbin, graph, shapes


def zoo_specs() -> dict[str, tuple]:
    """Small instances of the zoo architectures: name -> (constructor, torch input shape)."""
    from flexnn_ncnn.zoo import MLP, gpt2, resnet, vgg19, vit
    return {
        # small instances of the same architectures; widths keep every slice width a SIMD multiple
        "vgg19": (lambda: vgg19(width=1 / 8, fc_dim=256, pool_size=2, num_classes=10), (1, 3, 32, 32)),
        "resnet50": (lambda: resnet(50, width=8, num_classes=10), (1, 3, 32, 32)),
        "mlp": (lambda: MLP(64, (256, 256), 10), (1, 64)),
        "vit": (lambda: vit(image_size=32, patch=8, dim=64, depth=2, heads=4, mlp_dim=512, num_classes=10), (1, 3, 32, 32)),
        # attention written as MatMuls (heads.py): 4 heads of 16, 24 tokens
        "gpt2": (lambda: gpt2(seq_len=24, vocab=100, context=32, dim=64, depth=2, heads=4), (1, 24, 64)),
    }


def random_input(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """A batch-less NCNN input (c,h,w or w) of the torch shape `shape`."""
    return np.random.default_rng(seed).standard_normal(shape[1:]).astype(np.float32)


def relative_error(ref: np.ndarray, got: np.ndarray) -> float:
    """max |got - ref| / max |ref|: the tolerance measure DESIGN.md §5 uses."""
    assert ref.shape == got.shape
    scale = float(np.abs(ref).max())
    return float(np.abs(got - ref).max()) / scale if scale else float(np.abs(got).max())


def scaled_inputs(name: str, shape: tuple[int, ...], seeds: int) -> list[dict[str, np.ndarray]]:
    """`seeds` feeds of input `name` (its batch-less NCNN shape), seeded and scaled by 1, 2, 3..."""
    return [{name: np.random.default_rng(seed).standard_normal(shape).astype(np.float32) * (1 + seed)}
            for seed in range(seeds)]


def rewrite_error(original: tuple[NcnnParam, ModelBin], rewritten: tuple[NcnnParam, ModelBin], folder: Path,
                  feeds: list[dict[str, np.ndarray]], blobs: list[str]) -> float:
    """The largest relative error of `blobs`, over `feeds`, of stock NCNN running the rewritten model
    against the original (both written to `folder` as a.* and b.*)."""
    from flexnn_ncnn.ncnn_model.stock import run_stock
    paths = []
    for name, (param, modelbin) in (("a", original), ("b", rewritten)):
        paths.append((folder / f"{name}.param", folder / f"{name}.bin"))
        paths[-1][0].write_text(param.format())
        paths[-1][1].write_bytes(modelbin.to_bytes())
    worst = 0.0
    for feed in feeds:
        ref, got = (run_stock(*files, feed, blobs) for files in paths)
        worst = max([worst] + [relative_error(ref[b], got[b]) for b in blobs])
    return worst


def runtime_error(plan: Path, param: Path, bin_: Path, feeds: list[dict[str, np.ndarray]], blobs: list[str]) -> float:
    """The largest relative error of `blobs`, over `feeds`, of a Session on `plan` against stock NCNN on the
    model `param`/`bin_`; the Session's counted memory is within its budget."""
    from flexnn_ncnn import Session
    from flexnn_ncnn.ncnn_model.stock import run_stock
    from helpers import assert_counted_within_budget
    session = Session(plan)
    worst = 0.0
    for feed in feeds:
        got, ref = session.run(feed), run_stock(param, bin_, feed, blobs)
        worst = max([worst] + [relative_error(ref[b], got[b]) for b in blobs])
    assert_counted_within_budget(session.stats())
    return worst


def sliced_at_min(text: str, input_shape: str, folder: Path) -> tuple[dict, Path, Path, Path]:
    """A .param text with seeded weights written to FOLDER/t.*, sliced by `slice --budget min --threads 2
    --no-fp16` into FOLDER/out: its .slicing.json record, its plan, and the original .param and .bin."""
    import json
    from helpers import run_module
    param = NcnnParam.parse(text)
    param_path, bin_path = folder / "t.param", folder / "t.bin"
    param_path.write_text(param.format())
    bin_path.write_bytes(random_modelbin(param, seed=1).to_bytes())
    out = folder / "out"
    proc = run_module("slice", str(param_path), "--input-shape", input_shape, "--budget", "min", "--threads", "2",
                      "--no-fp16", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    return json.loads((out / "t.flexnn.slicing.json").read_text()), out / "t.flexnn.plan.json", param_path, bin_path


def plan_arena(plan: Path) -> int:
    """The arena bytes of the plan sliced_at_min wrote: what a slicing is checked by. (Not the record's
    budget: that is the fit attempt's, which adds the process's uncounted memory, and varies by run.)"""
    import json
    return int(json.loads(plan.read_text())["plan"]["arena_bytes"])
