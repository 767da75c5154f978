"""`python -m flexnn_ncnn.slice MODEL.param --budget 100MB`: bottleneck-aware layer slicing.

Writes OUTDIR/MODEL.flexnn.param and OUTDIR/MODEL.flexnn.bin (an ordinary NCNN model: stock NCNN
runs it, unless it crops or concatenates int8 blobs, which the output says),
OUTDIR/MODEL.flexnn.slicing.json (each layer's kernel, slices, tiles and the numbers they were
chosen by) and, for the host target, OUTDIR/MODEL.flexnn.transformed (the layers'
pre-transformed weights) and OUTDIR/MODEL.flexnn.plan.json: the model is prepared on this machine
and planned for the budget; when the plan does not fit, every layer's
limit is tightened by the shortfall and the model sliced again, or the error names the smallest
feasible budget found. `--budget min` (host) finds the smallest budget a slicing fits by bisection
between the slicer's own lower bound and a budget confirmed to fit, each probe sliced, prepared and
planned, and reports the probes and their time (also recorded in the .slicing.json's `min_search`:
each probe [bytes, fits] in order, and the seconds). On a terminal, a status line counts the slicings
prepared (each runs the model) and names the budget being tried. With --analyze, prints the per-layer memory table
instead.

When part of the weights must be streamed on every inference, each Winograd layer is weighed against
im2col+GEMM by estimated compute + streamed bytes / --stream-bandwidth (docs/SLICING.md; off with
--no-stream-aware). --calibrate measures this machine's rates and bandwidth and prints the options.
With --map-weights the weights are mapped, not copied, and kernels are chosen by compute alone
unless --stream-bandwidth is given (docs/RUNTIME.md, mapped weights: streaming Winograd's 4x larger
weights costs less there than im2col's slower compute).

Budgets: 100MB is 10^6-based, 100MiB 2^20-based, a bare number is bytes.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Sequence

from .analysis import LayerAnalysis, analyze
from .cli import UserError, add_logging_args, run_main, setup_logging
from .ncnn_model import (BlobShape, Graph, ModelBin, NcnnParam, infer_shapes, parse_input_shapes, read_bin,
                         read_param)
from .ncnn_model.stock import check_loads
from .prepare import RuntimeOptions, prepare_model, transformed_path_for, write_plan_file
from .slicing import TARGETS, SlicingResult, slice_model, spatial, target_for
from .slicing.calibrate import calibrate
from .slicing.fit import Steps, fit_to_budget, smallest_budget
from .slicing.margins import fold_margins
from .slicing.rewrite import REFERENCE_LAYER_ID
from .slicing.slicer import write_sliced
from .slicing.streaming import DEFAULT_BANDWIDTH, DEFAULT_GEMM_RATE, DEFAULT_WINOGRAD_RATE, StreamModel
from .units import format_size, parse_size


def _mib(n: int) -> str:
    return f"{n / 2**20:.2f}"


def _table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [list(map(str, headers))] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def analysis_table(analyses: Sequence[LayerAnalysis], shapes: dict[str, BlobShape], budget: int | None) -> str:
    """Layers with weights or scratch, one row per candidate kernel (fastest first)."""
    rows = []
    for a in analyses:
        candidates = a.candidates()
        if not any(c.total for _, c in candidates):
            continue
        out = str(shapes[a.layer.tops[0]]) if a.layer.tops and a.layer.tops[0] in shapes else "?"
        for j, (kernel, cost) in enumerate(candidates):
            head = [a.index, a.layer.name, a.layer.type, out, _mib(a.live_bytes)] if j == 0 else [""] * 5
            limit = [] if budget is None else [_mib(budget - a.live_bytes) if j == 0 else ""]
            rows.append(head + [kernel, _mib(cost.weights), _mib(cost.intermediates), _mib(cost.total)] + limit)
    headers = ["#", "layer", "type", "output", "activations", "kernel", "weights", "intermediates", "total"]
    table = _table(headers + ([] if budget is None else ["limit"]), rows)
    return table + "\n(MiB; activations = all blobs live while the layer runs)"


def summary_table(result: SlicingResult) -> str:
    rows = [[d.layer, d.type, d.kernel, f"{d.slices}x{d.slice_width}" if d.slices > 1 else "-",
             d.tiles if d.tiles > 1 else "-", _mib(d.limit), _mib(d.before.total), _mib(d.after.total), d.reason]
            for d in result.sliced]
    if not rows:
        return "no layer needed slicing: every layer's fastest kernel fits its limit"
    return _table(["layer", "type", "kernel", "slices", "tiles", "limit", "before", "after", "why"], rows) + \
        "\n(MiB; before = fastest kernel unsliced, after = one sub-layer as sliced; weights + intermediates)"


def _compute_rates(text: str) -> tuple[float, float]:
    """`winograd=G,im2col_gemm=G` (GMAC/s per computing thread) -> (winograd, im2col_gemm) in MAC/s."""
    rates: dict[str, float] = {}
    for item in text.split(","):
        name, _, value = item.partition("=")
        try:
            rates[name.strip()] = float(value) * 1e9
        except ValueError:
            rates[name.strip()] = 0.0
    if set(rates) != {"winograd", "im2col_gemm"} or min(rates.values()) <= 0:
        raise UserError(f"cannot read --compute-rates {text!r}: write winograd=G,im2col_gemm=G in GMAC/s per thread")
    return rates["winograd"], rates["im2col_gemm"]


def _stream_options(stream: StreamModel) -> str:
    return (f"--stream-bandwidth {stream.bandwidth / 1e9:.2f}GB --compute-rates "
            f"winograd={stream.winograd_rate / 1e9:.1f},im2col_gemm={stream.gemm_rate / 1e9:.1f}")


def stream_line(result: SlicingResult) -> str:
    if result.stream is None:
        return "stream-aware kernel choice: off (kernels chosen by compute alone)"
    return (f"stream-aware kernel choice: {result.streamed_share:.1%} of the weights streamed on every inference "
            f"with the fastest kernels, loaded at {result.stream.bandwidth / 1e9:g} GB/s beside {result.stream.threads} computing "
            f"thread(s)")


def tiling_line(result: SlicingResult) -> str:
    if not result.tilings:
        return "spatial tiling: none (the budget holds every layer's whole input and output)"
    blocks = "; ".join(f"{t.describe()} ({t.recompute:.2f}x their MACs)" for t in result.tilings)
    return f"spatial tiling: {blocks}: their full-size blobs never exist"


def runtime_only_note(param: NcnnParam) -> str:
    """A line saying the sliced model asks for NCNN's reference layers (a tiling's crops of int8 blobs,
    a requantizing layer's slices), which stock NCNN does not read ("" when it does not)."""
    reference = sum(1 for layer in param if layer.params.get_int(REFERENCE_LAYER_ID, 0))
    if not reference:
        return ""
    return (f"{reference} Crop/Concat layers of int8 blobs run as NCNN's reference layers (param "
            f"{REFERENCE_LAYER_ID}=1), which stock NCNN ignores: the sliced model runs in the flexnn runtime only")



def tiling_table(options: Sequence[spatial.Option], budget: int | None) -> str:
    """Per block, each grid (per MLP width): the most any layer of the model so tiled needs, and the
    recomputation."""
    if not options:
        return "spatial tiling: no block of spatial layers to tile, no MLP or sliced Gemm to split"
    rows = [[o.describe(), _mib(o.need), f"{o.recompute:.2f}"]
            + ([] if budget is None else ["yes" if o.need <= budget else "no"]) for o in options]
    headers = ["spatial tiling or split", "model needs", "MACs x"] + ([] if budget is None else ["fits"])
    return _table(headers, rows) + "\n(MiB; model needs = the most live activations + smallest working set of any layer)"


def tiling_levels(tiler: spatial.Tiler) -> str:
    """Block by block: the need of the model with each further block tiled, as far as tiling goes."""
    least = tiler.smallest_need()  # makes the steps
    root = tiler.root[0]
    lines = [f"tiled block by block: {_mib(tiler.need(root))} MiB untiled"]
    deepest = max(tiler.models.values(), key=lambda m: len(m[0].tilings))[0]
    for k, t in enumerate(deepest.tilings, start=1):
        model = tiler.models[deepest.tilings[:k]][0]
        lines.append(f"  then {t.describe()}: "
                     f"{_mib(tiler.need(model))} MiB")
    lines.append(f"  the least any tiling reaches: {_mib(least)} MiB")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flexnn_ncnn.slice", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("param", type=Path, metavar="MODEL.param", help="NCNN text .param")
    parser.add_argument("--budget", help="memory budget, e.g. 100MB, 100MiB or bytes (required unless --analyze); "
                                         "`min` (host): the smallest budget a slicing fits, found by bisection")
    parser.add_argument("--bin", type=Path, help="weights (default: the .param's sibling .bin)")
    parser.add_argument("--input-shape", action="append", metavar="[NAME=]SHAPE",
                        help="input shape, torch NCHW with a batch of 1, e.g. 1,3,224,224; a model with several inputs: "
                             "once per input, in the model's input order or as NAME=SHAPE (default: from the Input layers "
                             "or shape hints)")
    parser.add_argument("--target", choices=TARGETS, default="host", help="target CPU, for SIMD widths (default host)")
    parser.add_argument("--threads", type=int, default=RuntimeOptions().threads,
                        help="computing threads the plan is made for (transformed weights depend on it; default %(default)s)")
    parser.add_argument("--no-pretransform", action="store_true",
                        help="host: write no MODEL.flexnn.transformed (pre-transformed weights); every load transforms again")
    parser.add_argument("--map-weights", action="store_true",
                        help="host: plan and run with the pre-transformed weights mapped from their file (zero copy) "
                             "instead of read into the arena (prepare --map-weights)")
    parser.add_argument("--no-fp16", action="store_true",
                        help="host: prepare and fit for fp32 storage and arithmetic (default: NCNN's fp16 where the CPU has it)")
    parser.add_argument("-o", "--outdir", type=Path, help="output directory (default: the .param's directory)")
    parser.add_argument("--analyze", action="store_true", help="print per-layer memory per candidate kernel; write nothing")
    parser.add_argument("--stream-bandwidth", default=None,
                        help=f"bytes per second the loading thread copies streamed weights at (default "
                             f"{DEFAULT_BANDWIDTH / 1e9:g}GB; with --map-weights, kernels are chosen by compute alone "
                             "unless this is given)")
    parser.add_argument("--compute-rates",
                        default=f"winograd={DEFAULT_WINOGRAD_RATE / 1e9:g},im2col_gemm={DEFAULT_GEMM_RATE / 1e9:g}",
                        help="GMAC/s per computing thread of each kernel (default %(default)s)")
    parser.add_argument("--no-stream-aware", action="store_true",
                        help="choose kernels by compute alone, even when weights are streamed")
    parser.add_argument("--calibrate", action="store_true",
                        help="host: measure this machine's --compute-rates and --stream-bandwidth on the model; write nothing")
    add_logging_args(parser)
    args = parser.parse_args(argv)
    setup_logging(args.verbose)

    smallest = args.budget == "min"
    budget = parse_size(args.budget) if args.budget is not None and not smallest else None
    if budget is None and not (smallest or args.analyze or args.calibrate):
        raise UserError("--budget is required (e.g. --budget 100MB, or min)")
    if budget is not None:
        print(f"budget: {format_size(budget)}")
    target = target_for(args.target)
    param = fold_margins(read_param(args.param))
    bin_path = args.bin or args.param.with_suffix(".bin")
    graph = Graph.build(param)
    inputs = parse_input_shapes(args.input_shape or [], param, graph, "--input-shape")
    have_bin = bin_path.exists()
    if not have_bin and not args.analyze:
        raise UserError(f"{bin_path}: no such file (give --bin)")
    modelbin = read_bin(param, bin_path) if have_bin else None
    check_loads(args.param)
    shapes = infer_shapes(param, graph, inputs, bin_path if have_bin else None)

    if args.analyze:
        analyses = analyze(graph, shapes)
        print(analysis_table(analyses, shapes, budget))
        weights = modelbin if modelbin is not None else ModelBin([])  # the tiles' copies of no weights
        tiler = spatial.Tiler(spatial.TiledModel(param, weights, graph, shapes, analyses, ()), target)
        print(tiling_table(tiler.root[1], budget))
        print(tiling_levels(tiler))
        return 0
    options = RuntimeOptions(threads=args.threads, fp16=not args.no_fp16, pretransform=not args.no_pretransform,
                             map_weights=args.map_weights)
    if args.calibrate:
        if target.name != "host":
            raise UserError("--calibrate measures this machine: use --target host")
        with tempfile.TemporaryDirectory(prefix="flexnn-calibrate-") as scratch:
            found = calibrate(param, args.param, bin_path, graph, shapes, options, Path(scratch))
        print(f"measured with {args.threads} computing thread(s), rates the median over {found.layers} "
              f"Winograd-eligible convolutions:\n{_stream_options(found.stream)}")
        return 0

    assert modelbin is not None
    if smallest and args.target != "host":
        raise UserError("--budget min prepares each candidate here: use --target host")
    winograd_rate, gemm_rate = _compute_rates(args.compute_rates)
    compute_alone = args.no_stream_aware or (args.map_weights and args.stream_bandwidth is None)
    bandwidth = args.stream_bandwidth or f"{DEFAULT_BANDWIDTH / 1e9:g}GB"
    stream = None if compute_alone else StreamModel(float(parse_size(bandwidth)), winograd_rate, gemm_rate, args.threads)
    outdir = args.outdir or args.param.parent
    stem = args.param.name.removesuffix(".param")
    outputs = [outdir / f"{stem}.flexnn.{suffix}" for suffix in ("param", "bin", "slicing.json", "plan.json")]
    for out in outputs:
        if out.resolve() in (args.param.resolve(), bin_path.resolve()):
            raise UserError(f"{out} would overwrite an input: choose another -o")
    min_search = None  # with --budget min, the search, recorded in MODEL.flexnn.slicing.json
    if target.name == "host":
        outdir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=outdir, prefix=f".{stem}.slicing-") as scratch:
            if smallest:
                with Steps(True) as steps:
                    found = smallest_budget(param, modelbin, graph, shapes, target, options, Path(scratch), stream, steps=steps)
                budget, result, min_search = found.budget, found.result, found.search_json()
                probes = ", ".join(f"{format_size(p.budget)} {'fits' if p.fits else 'no'}" for p in found.probes)
                print(f"smallest budget: {format_size(budget)}, found in {len(found.probes)} probes and "
                      f"{found.seconds:.1f} s ({probes})")
            else:
                assert budget is not None
                result = fit_to_budget(param, modelbin, graph, shapes, budget, target, options, Path(scratch), progress=True,
                                       stream=stream)
    else:
        assert budget is not None
        result = slice_model(param, modelbin, graph, shapes, budget, target, progress=True, stream=stream)
    out_param, out_bin, out_json = write_sliced(result, outdir, stem, min_search)
    print(summary_table(result))
    print(stream_line(result))
    print(tiling_line(result))
    note = runtime_only_note(result.param)
    if note:
        print(note)
    print(f"{len(result.sliced)} of {len(result.decisions)} conv/matrix layers sliced or re-kerneled for target "
          f"{target.name} (SIMD width {target.simd_width}); the slicer's own smallest budget {format_size(result.min_budget)}")
    print(f"wrote {out_param}, {out_bin}, {out_json}")
    if target.name != "host":
        print(f"prepare and plan on the {target.name} device: its profile decides the plan")
        return 0
    # prepared again from the final files, so the plan names them (the fit's attempts were scratch)
    content = prepare_model(out_param, out_bin, budget, {n: tuple(shapes[n].numpy()) for n in graph.inputs}, options,
                            transformed=transformed_path_for(outputs[3]))
    write_plan_file(content, outputs[3])
    plan = content.plan
    transformed = f"{content.model.transformed} and " if content.model.transformed else ""
    print(f"plan: arena {format_size(plan.arena_bytes)} within {format_size(budget)}, "
          f"{options.threads} thread(s); wrote {transformed}{outputs[3]}")
    return 0

if __name__ == "__main__":
    sys.exit(run_main(main))
