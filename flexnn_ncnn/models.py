"""`python -m flexnn_ncnn.models NAME... -o DIR`: the paper's evaluation models as NCNN files, seeded.

Zoo models are the plain-torch definitions in flexnn_ncnn/zoo, initialised from `--seed` and
exported with pnnx (fp32 weights unless --fp16); `struct:NAME` is one of the project's own NCNN
structures (flexnn_ncnn/ncnn_model/structures.py) and `bench:NAME` a structure from NCNN's benchmark
folder, both with seeded random weights (randbin). Each NAME writes DIR/NAME.param, DIR/NAME.bin and
DIR/NAME.json (input blob and shape, output blobs, storage, seed), the .json last: a model whose
.json exists is complete. `--tiny` builds small instances of the same architectures (smoke runs).
A benchmark structure whose Input declares no shape (vision_transformer) takes it from
`--input-shape [NAME=]SHAPE`, torch NCHW with a batch of 1, e.g. 1,3,384,384. Outputs that would check
nothing are made to: an SSD head keeps every box, and an output Softmax over an axis of one element
(every value 1) normalises over its last axis instead.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from tqdm import tqdm

from .cli import UserError, add_logging_args, run_main, setup_logging
from .ncnn_model import BlobShape, Graph, NcnnParam, infer_shapes, parse_input_shapes, read_param
from .ncnn_model.shapes import named_input_shapes
from .files import atomic_write, atomic_write_all
from .ncnn_model.random_weights import random_modelbin
from .ncnn_model.structures import STRUCTURES
from .units import format_size

log = logging.getLogger(__name__)

BENCH_PREFIX = "bench:"
CONFIDENCE_THRESHOLD_ID = 4  # DetectionOutput's
STRUCT_PREFIX = "struct:"
FILES_PREFIX = "files:"  # a user's MODEL.param and MODEL.bin, described in place (describe_files)
# the shared material beside a checkout (DESIGN.md §5); users point --benchmark-dir elsewhere
DEFAULT_BENCHMARK_DIR = Path(__file__).resolve().parents[2] / "shared" / "models" / "ncnn-benchmark"
GPT2_SEQ_LEN = 128


@dataclass(frozen=True)
class ZooModel:
    """A zoo architecture at the paper's size and as a tiny instance; shapes are torch's, batch 1."""

    description: str
    make: Callable[[], Any]
    input_shape: tuple[int, ...]
    make_tiny: Callable[[], Any]
    tiny_input_shape: tuple[int, ...]


def _zoo() -> dict[str, ZooModel]:
    from .zoo.models import gpt2, mobilenet_v2, resnet, squeezenet, vgg19, vit
    return {
        "vgg19": ZooModel("VGG-19 (config E), 224x224", vgg19, (1, 3, 224, 224),
                          lambda: vgg19(width=1 / 8, fc_dim=64, pool_size=1, num_classes=10), (1, 3, 32, 32)),
        "resnet152": ZooModel("ResNet-152 (bottleneck), 224x224", lambda: resnet(152), (1, 3, 224, 224),
                              lambda: resnet(50, width=8, num_classes=10), (1, 3, 32, 32)),
        # not one of the paper's six: the quick start's default, a real ResNet small enough for a minute
        "resnet50": ZooModel("ResNet-50 (bottleneck), 224x224", lambda: resnet(50), (1, 3, 224, 224),
                             lambda: resnet(50, width=8, num_classes=10), (1, 3, 32, 32)),
        "mobilenetv2": ZooModel("MobileNetV2 (width 1.0), 224x224", mobilenet_v2, (1, 3, 224, 224),
                                lambda: mobilenet_v2(width=0.25, num_classes=10), (1, 3, 32, 32)),
        "squeezenet": ZooModel("SqueezeNet 1.0, 224x224", squeezenet, (1, 3, 224, 224),
                               lambda: squeezenet(width=0.25, num_classes=10), (1, 3, 64, 64)),
        "vit_b16": ZooModel("ViT-B/16, 384x384", lambda: vit(image_size=384), (1, 3, 384, 384),
                            lambda: vit(image_size=32, patch=8, dim=64, depth=2, heads=4, mlp_dim=128, num_classes=10),
                            (1, 3, 32, 32)),
        "gpt2": ZooModel(f"GPT-2 small decoder, {GPT2_SEQ_LEN} token embeddings in, last position's logits out",
                         lambda: gpt2(seq_len=GPT2_SEQ_LEN), (1, GPT2_SEQ_LEN, 768),
                         lambda: gpt2(seq_len=8, vocab=100, context=16, dim=32, depth=2, heads=4), (1, 8, 32)),
    }


ZOO_NAMES = ("vgg19", "resnet152", "resnet50", "mobilenetv2", "squeezenet", "vit_b16", "gpt2")


def file_stem(name: str) -> str:
    """The file name a model is written under: `bench:resnet50` -> `bench-resnet50`."""
    return name.replace(":", "-")


def benchmark_names(benchmark_dir: Path) -> list[str]:
    return sorted(f"{BENCH_PREFIX}{p.stem}" for p in benchmark_dir.glob("*.param")) if benchmark_dir.is_dir() else []


@contextlib.contextmanager
def _native_output_to(log_path: Path) -> Iterator[None]:
    """Send what native code (pnnx) writes to fds 1 and 2 into `log_path`; shown only on failure."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with open(log_path, "wb") as f:
        os.dup2(f.fileno(), 1)
        os.dup2(f.fileno(), 2)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, copy in zip((1, 2), saved):
            os.dup2(copy, fd)
            os.close(copy)


def _io_description(graph: Graph, input_shapes: dict[str, tuple[int, ...]], where: str) -> dict[str, Any]:
    missing = [b for b in graph.inputs if b not in input_shapes]
    if missing:
        raise UserError(f"{where}: no input shape known for blob(s) {', '.join(missing)}")
    return {"inputs": [{"name": b, "shape": list(input_shapes[b])} for b in graph.inputs], "outputs": graph.outputs}


def _export_zoo(spec: ZooModel, outdir: Path, stem: str, seed: int, fp16: bool, tiny: bool) -> dict[str, Any]:
    import torch

    from .zoo import export_ncnn
    torch.manual_seed(seed)
    model = spec.make_tiny() if tiny else spec.make()
    shape = spec.tiny_input_shape if tiny else spec.input_shape
    parameters = sum(p.numel() for p in model.parameters())
    with tempfile.TemporaryDirectory(prefix=f".{stem}.", dir=outdir) as tmp:
        pnnx_log = Path(tmp) / "pnnx.log"
        try:
            with _native_output_to(pnnx_log):
                param, bin_ = export_ncnn(model, shape, tmp, stem, fp16=fp16)
        except Exception:
            log.error("pnnx output:\n%s", pnnx_log.read_text(errors="replace")[-4000:])
            raise
        # every zoo model has one input (pnnx names it first); NCNN's blob shape is torch's without the batch
        graph = Graph.build(read_param(param))
        io = _io_description(graph, {graph.inputs[0]: tuple(shape[1:])}, stem)
        os.replace(param, outdir / f"{stem}.param")
        os.replace(bin_, outdir / f"{stem}.bin")
    return {"source": "zoo", "description": spec.description + (" (tiny instance)" if tiny else ""),
            "parameters": parameters, **io}


def _write_with_random_weights(param: NcnnParam, text: bytes, input_shapes: dict[str, tuple[int, ...]], where: str,
                               outdir: Path, stem: str, seed: int, fp16: bool) -> dict[str, Any]:
    """`text` (the .param) and seeded random weights as STEM.param/.bin; returns the inputs and outputs."""
    io = _io_description(Graph.build(param), input_shapes, where)
    modelbin = random_modelbin(param, seed, "fp16" if fp16 else "fp32")
    atomic_write_all({outdir / f"{stem}.param": lambda f: f.write(text), outdir / f"{stem}.bin": modelbin.write})
    return io


def keeping_every_box(param: NcnnParam) -> bool:
    """Set `param`'s DetectionOutput heads to keep every box scoring above 0 (up to their keep_top_k);
    whether one changed. NCNN's SSD heads keep what a class scores above 0.25, and random weights score
    each of 21 classes near 1/21: the head would return no rows, and an output of no rows checks nothing
    computed before it."""
    heads = [layer for layer in param if layer.type == "DetectionOutput" and layer.params.get(CONFIDENCE_THRESHOLD_ID, 0.5) != 0]
    for layer in heads:
        layer.params.set(CONFIDENCE_THRESHOLD_ID, 0.0)
    return bool(heads)


def softmax_over_classes(param: NcnnParam, inputs: dict[str, BlobShape]) -> bool:
    """Set `param`'s output Softmax layers that normalise over an axis of one element to normalise over
    their last axis; whether one changed. Such an output is 1 everywhere whatever was computed before it
    (NCNN's vision_transformer: 0=0 on its 1x1000 scores), so it checks nothing."""
    graph = Graph.build(param)
    heads = [layer for layer in param if layer.type == "Softmax" and layer.tops[0] in graph.outputs]
    if not heads:
        return False
    shapes = infer_shapes(param, graph, inputs)
    changed = False
    for layer in heads:
        dims = shapes[layer.tops[0]].numpy()
        axis = layer.params.get_int(0, 0) % len(dims)
        if dims[axis] == 1 and max(dims) > 1:
            layer.params.set(0, len(dims) - 1)
            layer.params.set(1, 1)  # fixbug0: NCNN reads a non-zero axis only with it
            changed = True
    return changed


def _randomise_benchmark(name: str, benchmark_dir: Path, outdir: Path, stem: str, seed: int, fp16: bool,
                         input_shapes: Sequence[str]) -> dict[str, Any]:
    source = benchmark_dir / f"{name[len(BENCH_PREFIX):]}.param"
    if not source.is_file():
        known = ", ".join(benchmark_names(benchmark_dir)) or f"none: {benchmark_dir} has no .param files"
        raise UserError(f"{name}: no {source.name} in {benchmark_dir} (known: {known})")
    param = read_param(source)
    try:
        inputs = parse_input_shapes(input_shapes, param, Graph.build(param), "--input-shape")
    except UserError as e:
        raise UserError(f"{name}: {e}") from None
    every_box = keeping_every_box(param)
    over_classes = softmax_over_classes(param, inputs)
    text = param.format().encode() if every_box or over_classes else source.read_bytes()
    io = _write_with_random_weights(param, text, {b: s.numpy() for b, s in inputs.items()}, str(source), outdir, stem,
                                    seed, fp16)
    return {"source": f"ncnn-benchmark {source}", "description": f"NCNN benchmark structure {source.stem}, random weights"
            + (", its detection head keeping every box" if every_box else "")
            + (", its output Softmax over its last axis (the structure's normalises an axis of one element)"
               if over_classes else ""), **io}


def _randomise_structure(name: str, outdir: Path, stem: str, seed: int, fp16: bool) -> dict[str, Any]:
    structure = STRUCTURES.get(name[len(STRUCT_PREFIX):])
    if structure is None:
        raise UserError(f"{name}: no such structure (known: {', '.join(STRUCT_PREFIX + s for s in STRUCTURES)})")
    param = structure.build()
    io = _write_with_random_weights(param, param.format().encode(), {structure.input_blob: structure.input_shape[1:]},
                                    name, outdir, stem, seed, fp16)
    return {"source": "flexnn_ncnn.ncnn_model.structures", "description": f"{structure.description}, random weights", **io}


def generate(name: str, outdir: Path, seed: int = 0, fp16: bool = False, tiny: bool = False,
             benchmark_dir: Path = DEFAULT_BENCHMARK_DIR, input_shapes: Sequence[str] = ()) -> Path:
    """Write `outdir/STEM.{param,bin,json}` for `name`; returns the .json path (written last).
    `input_shapes` (`[NAME=]SHAPE`, as slice's --input-shape) set a benchmark structure's input shapes."""
    outdir.mkdir(parents=True, exist_ok=True)
    stem = file_stem(name)
    if tiny and name.startswith((BENCH_PREFIX, STRUCT_PREFIX)):
        raise UserError(f"{name}: --tiny applies to zoo models only")
    if input_shapes and not name.startswith(BENCH_PREFIX):
        raise UserError(f"{name}: --input-shape applies to bench:NAME structures only (the others have their shapes)")
    if name.startswith(BENCH_PREFIX):
        info = _randomise_benchmark(name, benchmark_dir, outdir, stem, seed, fp16, input_shapes)
    elif name.startswith(STRUCT_PREFIX):
        info = _randomise_structure(name, outdir, stem, seed, fp16)
    elif name in ZOO_NAMES:
        info = _export_zoo(_zoo()[name], outdir, stem, seed, fp16, tiny)
    else:
        raise UserError(f"unknown model {name!r}: one of {', '.join(ZOO_NAMES)}, struct:NAME or bench:NAME (see --list)")
    description = {"name": name, "param": f"{stem}.param", "bin": f"{stem}.bin",
                   "storage": "fp16" if fp16 else "fp32", "seed": seed, "tiny": tiny, **info,
                   "bin_bytes": (outdir / f"{stem}.bin").stat().st_size}
    json_path = outdir / f"{stem}.json"
    atomic_write(json_path, lambda f: f.write((json.dumps(description, indent=2) + "\n").encode()))
    return json_path


def describe_files(param_path: Path, outdir: Path, input_shapes: Sequence[str] = ()) -> Path:
    """Write outdir/files-STEM.json describing a user's own MODEL.param and the MODEL.bin beside it where
    they are (their own weights, which are never copied or changed); returns the .json path.
    `input_shapes` (`[NAME=]SHAPE`) give inputs the model declares no shape for, or override them."""
    bin_path = param_path.with_suffix(".bin")
    for path in (param_path, bin_path):
        if not path.is_file():
            raise UserError(f"{param_path}: no {path.name} beside it" if path == bin_path else f"{path}: no such file")
    param = read_param(param_path)
    graph = Graph.build(param)
    inputs = parse_input_shapes(input_shapes, param, graph, "--input-shape")
    name = FILES_PREFIX + param_path.stem
    description = {"name": name, "param": str(param_path.resolve()), "bin": str(bin_path.resolve()), "storage": "own",
                   "source": f"files {param_path}", "description": f"{param_path.name} and its own weights",
                   **_io_description(graph, {b: s.numpy() for b, s in inputs.items()}, str(param_path)),
                   "bin_bytes": bin_path.stat().st_size}
    outdir.mkdir(parents=True, exist_ok=True)
    json_path = outdir / f"{file_stem(name)}.json"
    atomic_write(json_path, lambda f: f.write((json.dumps(description, indent=2) + "\n").encode()))
    return json_path


def has_input_shapes(description: dict[str, Any], input_shapes: Sequence[str]) -> bool:
    """Whether a model's description has the input shapes `input_shapes` (`[NAME=]SHAPE`, as
    named_input_shapes reads them) name."""
    have = {i["name"]: tuple(i["shape"]) for i in description["inputs"]}
    named = named_input_shapes(input_shapes, list(have), "--input-shape")
    return all(have[name] == shape.numpy() for name, shape in named.items())


def read_description(json_path: str | Path) -> dict[str, Any]:
    """A model's .json as `generate` wrote it, with `param`/`bin` resolved to paths beside it."""
    json_path = Path(json_path)
    try:
        description = json.loads(json_path.read_text())
    except (OSError, ValueError) as e:
        raise UserError(f"cannot read model description {json_path}: {e}") from None
    missing = [k for k in ("name", "param", "bin", "inputs", "outputs") if not isinstance(description, dict) or k not in description]
    if missing:
        raise UserError(f"{json_path} is not a model description (no {', '.join(missing)}): write it with python -m flexnn_ncnn.models")
    for key in ("param", "bin"):
        description[key] = json_path.parent / description[key]
    return description


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flexnn_ncnn.models", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"{', '.join(ZOO_NAMES)}, struct:NAME or bench:NAME")
    parser.add_argument("-o", "--output", type=Path, help="folder to write the models into")
    parser.add_argument("--seed", type=int, default=0, help="weight seed (default 0)")
    parser.add_argument("--fp16", action="store_true", help="store weights as fp16 (default fp32, as the paper)")
    parser.add_argument("--tiny", action="store_true", help="small instances of the zoo architectures")
    parser.add_argument("--input-shape", action="append", default=[], metavar="[NAME=]SHAPE",
                        help="a bench:NAME structure's input shape, torch NCHW with a batch of 1 (e.g. 1,3,384,384), "
                             "where its Input declares none or to override it; NAME=SHAPE once per input for several")
    parser.add_argument("--benchmark-dir", type=Path, default=DEFAULT_BENCHMARK_DIR,
                        help=f"NCNN's benchmark .param files for bench:NAME (default {DEFAULT_BENCHMARK_DIR})")
    parser.add_argument("--list", action="store_true", help="list the models and exit")
    add_logging_args(parser)
    args = parser.parse_args(argv)
    setup_logging(args.verbose)
    if args.list:
        for name, spec in _zoo().items():
            print(f"{name:22} {spec.description}; input {'x'.join(map(str, spec.input_shape))}")
        for structure in STRUCTURES.values():
            print(f"{STRUCT_PREFIX + structure.name:22} {structure.description}; input "
                  f"{'x'.join(map(str, structure.input_shape))}, seeded random weights")
        for name in benchmark_names(args.benchmark_dir):
            print(f"{name:22} NCNN benchmark structure, seeded random weights")
        if not benchmark_names(args.benchmark_dir):
            print(f"(no bench:NAME models: {args.benchmark_dir} has no .param files)")
        return 0
    if not args.names or args.output is None:
        raise UserError("give model NAME(s) and -o DIR (or --list)")
    for name in tqdm(args.names, desc="models", unit="model", disable=len(args.names) < 2):
        json_path = generate(name, args.output, args.seed, args.fp16, args.tiny, args.benchmark_dir, args.input_shape)
        d = read_description(json_path)
        inputs = ", ".join(f"{i['name']} {'x'.join(map(str, i['shape']))}" for i in d["inputs"])
        print(f"{name}: {d['param']}, {d['bin']} ({format_size(d['bin_bytes'])}, {d['storage']}, seed {args.seed}); "
              f"input {inputs}; outputs {', '.join(d['outputs'])}")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
