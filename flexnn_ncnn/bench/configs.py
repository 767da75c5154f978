"""What the benchmark runs: each configuration is one child process printing one JSON line.

Stock baselines (paper §5.1) run in bench/measure.py with the `ncnn` wheel. Everything the FlexNN
runtime runs (FlexNN at a budget, the ablations of Fig. 13, On-Demand, SwapNet-style block
streaming) plugs in HERE, through one command template (RUNTIME_COMMAND below, bench/flexnn_child.py;
`--runtime-command` replaces it): the template's tokens are formatted with the fields of
`runtime_fields`, and the command must print the JSON line bench/measure.py documents.
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from ..cli import UserError
from ..units import parse_size


@dataclass(frozen=True)
class StockOptions:
    winograd: bool
    sgemm: bool
    packing: bool
    # NCNN's Net on the memory-mapped .bin (load_model from memory: raw weights zero-copy, lightmode),
    # the patched build's, whose patches are inert without the runtime (runtime/mapped_net.h)
    mapped: bool = False


# NCNN-Default is first: every ratio is to it
STOCK_CONFIGS = {
    "ncnn-default": StockOptions(winograd=True, sgemm=True, packing=True),
    "ncnn-direct": StockOptions(winograd=False, sgemm=False, packing=True),
    "paper-parity": StockOptions(winograd=True, sgemm=True, packing=False),  # packing off, as the paper's NCNN 2023-03 runs
    "ncnn-mmap": StockOptions(winograd=True, sgemm=True, packing=True, mapped=True),  # the llama.cpp way
}
REFERENCE = "ncnn-default"

# runtime modes; those in BUDGETED run once per budget, the others once
RUNTIME_MODES = {
    "flexnn": "FlexNN under the budget",
    "flexnn-mapped": "FlexNN with the pre-transformed weights mapped from their file instead of read into the arena "
                     "(zero copy; prepare --map-weights)",
    "flexnn-computing": "FlexNN with no loading thread: the computing threads load each layer just before it computes, "
                        "splitting its reads (for a machine whose every core computes)",
    "flexnn-no-mem": "ablation w.o.mem: the same plan without the static arena, each buffer a heap block from request to "
                     "release",
    "flexnn-no-preload": "ablation w.o.preload: the same plan, each layer's load waiting for the previous computation",
    "flexnn-no-both": "ablation w.o.both: without the static arena and without preloading",
    "on-demand": "On-Demand: load a layer's weights just before it runs, release after, no overlap",
    "swapnet": "SwapNet-style block streaming (bench/swapnet.py): blocks of whole layers, two resident, the next "
               "loading while the current one computes",
}
BUDGETED = ("flexnn", "flexnn-mapped", "flexnn-computing", "flexnn-no-mem", "flexnn-no-preload", "flexnn-no-both", "swapnet")
# modes whose child runs the model as given, not sliced: the activation floor they report is the model's
UNSLICED = ("on-demand", "swapnet")
# baselines with a smallest budget of their own: a child reporting its budget infeasible is a result
# (nothing to measure there), not a failure; for every other mode it is a failure
MAY_BE_INFEASIBLE = ("swapnet",)
ABLATIONS = ("flexnn-no-mem", "flexnn-no-preload", "flexnn-no-both")  # Fig. 13, in its order
DEFAULT_RUNTIME_MODES = ("flexnn", "on-demand", "swapnet")

# The runtime's child (bench/flexnn_child.py): slice (flexnn) -> prepare -> plan -> Session at the budget.
RUNTIME_COMMAND = (
    "{python} -m flexnn_ncnn.bench.flexnn_child --model {model} --mode {mode} --budget {budget} --threads {threads} "
    "--warmup {warmup} --loops {loops} --seed {seed} --fp16 {fp16} --cpus {cpus} --cold {cold} --outputs {outputs}")


# a budget on --budgets: FlexNN's smallest, found by the child (`slice --budget min`); `flexnn` only
MIN = "min"
SEARCHED = ("flexnn",)


@dataclass(frozen=True)
class Budgets:
    """--budgets: sizes in bytes for every BUDGETED mode, and whether `min` was among them."""

    sizes: list[int]
    smallest: bool = False


def parse_budgets(text: str) -> Budgets:
    """`min,35MB,50MB` -> Budgets([35000000, 50000000], smallest=True)."""
    parts = [part.strip() for part in text.split(",") if part.strip()]
    return Budgets([parse_size(part) for part in parts if part != MIN], MIN in parts)


@dataclass(frozen=True)
class Configuration:
    family: str                 # a STOCK_CONFIGS key or a RUNTIME_MODES key
    budget: int | None = None   # bytes, for BUDGETED modes
    smallest: bool = False      # at the smallest budget the child finds (a SEARCHED mode; budget None)

    @property
    def name(self) -> str:
        if self.smallest:
            return f"{self.family}@{MIN}"
        return self.family if self.budget is None else f"{self.family}@{self.budget / 1e6:g}MB"

    @property
    def is_stock(self) -> bool:
        return self.family in STOCK_CONFIGS


@dataclass(frozen=True)
class ChildSettings:
    model_json: Path
    threads: int = 2
    warmup: int = 3
    loops: int = 10
    seed: int = 0
    fp16: bool = False
    cpus: str = ""              # computing CPUs ("" = any)
    cold: bool = False          # evict the model's files from the page cache before every inference


def configurations(budgets: Budgets, runtime_modes: list[str], baselines: list[str] | None = None) -> list[Configuration]:
    """The stock baselines (NCNN-Default always, first), then each runtime mode (per budget where budgeted:
    a SEARCHED mode first at `min` when asked, then at each size; the other budgeted modes at the sizes)."""
    for name in baselines or []:
        if name not in STOCK_CONFIGS:
            raise UserError(f"unknown baseline {name!r}: {', '.join(STOCK_CONFIGS)}")
    out = [Configuration(name) for name in STOCK_CONFIGS if name == REFERENCE or baselines is None or name in baselines]
    for mode in runtime_modes:
        if mode not in RUNTIME_MODES:
            raise UserError(f"unknown configuration {mode!r}: {', '.join(RUNTIME_MODES)}")
        if mode not in BUDGETED:
            out.append(Configuration(mode))
            continue
        if not budgets.sizes and mode not in SEARCHED:
            raise UserError(f"{mode} runs at budgets in bytes; {MIN} is for {', '.join(SEARCHED)} alone: "
                            f"add one, e.g. --budgets {MIN},35MB")
        if budgets.smallest and mode in SEARCHED:
            out.append(Configuration(mode, smallest=True))
        out += [Configuration(mode, b) for b in budgets.sizes]
    return out


def runtime_fields(config: Configuration, settings: ChildSettings, outputs: Path) -> dict[str, str]:
    """What a runtime command template may use; `{budget}` is bytes, `min` for the smallest the child
    finds, empty for unbudgeted modes."""
    budget = MIN if config.smallest else "" if config.budget is None else str(config.budget)
    return {"python": sys.executable, "model": str(settings.model_json), "mode": config.family, "budget": budget,
            "threads": str(settings.threads), "warmup": str(settings.warmup), "loops": str(settings.loops), "seed": str(settings.seed),
            "fp16": "1" if settings.fp16 else "0", "cpus": settings.cpus, "cold": "1" if settings.cold else "0",
            "outputs": str(outputs)}


def child_command(config: Configuration, settings: ChildSettings, outputs: Path, runtime_command: str | None) -> list[str]:
    if config.is_stock:
        command = [sys.executable, "-m", "flexnn_ncnn.bench.measure", "--model", str(settings.model_json),
                   "--config", config.family, "--threads", str(settings.threads), "--warmup", str(settings.warmup),
                   "--loops", str(settings.loops), "--seed", str(settings.seed), "--cold", "1" if settings.cold else "0",
                   "--outputs", str(outputs)]
        return command + (["--fp16"] if settings.fp16 else []) + (["--cpus", settings.cpus] if settings.cpus else [])
    template = runtime_command or RUNTIME_COMMAND
    fields = runtime_fields(config, settings, outputs)
    try:
        # split first, so a path with spaces stays one argument
        return [token.format(**fields) for token in shlex.split(template)]
    except (KeyError, ValueError) as e:
        raise UserError(f"--runtime-command {template!r}: {e} (fields: {', '.join(fields)})") from None
