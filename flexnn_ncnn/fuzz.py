"""`python -m flexnn_ncnn.fuzz --cases N --seed S`: fuzz what a user hands the tool — the `.param`
text, the `.bin` weights, the plan sidecar and the pre-transformed weights' header and index — and
require that every input is either accepted or refused in one line: a `UserError` from the Python
readers, a one-line `RuntimeError` from the native runtime. A traceback of any other exception, a
multi-line message, a crash of the process (segfault, abort, sanitizer) or a hang is a finding, saved
with the input that caused it.

The model is one of the project's structures (struct:resnet) with seeded weights, prepared here
once. Cases are mutations of its files drawn from the seed: byte flips, truncations,
insertions, deleted or duplicated lines, numbers replaced by boundary values, JSON values replaced by
other types, index counts and offsets of the transformed file set to huge values. They run in a
worker process that reads one case at a time; a worker that dies is replaced, and the case it was
running is the finding. Exit code 0 only with no finding.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import select
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

from tqdm import tqdm

from .cli import UserError, add_logging_args, run_main, setup_logging
from .files import atomic_write

log = logging.getLogger(__name__)

TARGETS = ("param", "bin", "sidecar", "transformed")
CASE_TIMEOUT_S = 30.0
BOUNDARY_NUMBERS = ("-1", "0", "1", "-2147483648", "2147483647", "2147483648", "4294967296", "9223372036854775807",
                    "18446744073709551616", "1e308", "-0", "nan", "inf", "0x10", "1.5", "")
MAX_ERROR_CHARS = 300  # of a finding's message in the report (a mutated name can be kilobytes)
MODEL = "struct:resnet"


@dataclass
class Tally:
    """What one target's cases gave."""

    cases: int = 0
    accepted: int = 0
    refused: int = 0
    findings: list[dict[str, Any]] = field(default_factory=list)


# --- the model every case mutates -------------------------------------------------------------

def make_model(folder: Path) -> dict[str, Path]:
    """The structure's .param/.bin, its prepared plan sidecar and pre-transformed weights in `folder`."""
    from .models import generate, read_description
    from .prepare import RuntimeOptions, prepare_model, write_plan_file

    d = read_description(generate(MODEL, folder))
    shapes = {i["name"]: tuple(i["shape"]) for i in d["inputs"]}
    content = prepare_model(d["param"], d["bin"], 1 << 30, shapes, RuntimeOptions(threads=1))
    plan = folder / f"{d['param'].stem}.flexnn.plan.json"
    write_plan_file(content, plan)
    # prepare's sidecar names its files by absolute paths until written
    return {"param": d["param"], "bin": d["bin"], "sidecar": plan, "transformed": Path(content.model.transformed)}


# --- mutations ----------------------------------------------------------------------------------

def _mutate_bytes(data: bytes, rng: random.Random, hot: tuple[int, int] | None = None) -> bytes:
    """A byte-level mutation, inside `hot` [begin, end) when given (where the structure is)."""
    b = bytearray(data)
    begin, end = hot or (0, len(b))
    end = max(begin + 1, min(end, len(b)))
    kind = rng.randrange(5)
    if kind == 0 and b:  # flip bits
        for _ in range(rng.randint(1, 8)):
            b[rng.randrange(begin, end)] ^= 1 << rng.randrange(8)
    elif kind == 1:  # truncate
        del b[rng.randrange(len(b) + 1):]
    elif kind == 2:  # insert bytes
        at = rng.randrange(begin, end + 1)
        b[at:at] = rng.randbytes(rng.randint(1, 64))
    elif kind == 3 and b:  # a 32- or 64-bit word to a boundary value
        width = rng.choice((4, 8))
        at = rng.randrange(begin, max(begin + 1, end - width))
        value = rng.choice((0, 1, 0x7FFFFFFF, 0xFFFFFFFF, 0x80000000, (1 << 63) - 1, (1 << 64) - 1))
        b[at:at + width] = (value % (1 << (8 * width))).to_bytes(width, "little")
    else:  # duplicate a span
        at = rng.randrange(begin, end)
        b[at:at] = b[at:at + rng.randint(1, 256)]
    return bytes(b)


def _mutate_text(text: str, rng: random.Random) -> str:
    lines = text.split("\n")
    kind = rng.randrange(6)
    i = rng.randrange(len(lines))
    if kind == 0:
        del lines[i]
    elif kind == 1:
        lines.insert(i, lines[rng.randrange(len(lines))])
    elif kind == 2:
        j = rng.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
    elif kind == 3:  # a token to a boundary number, or a key=value's value
        tokens = lines[i].split()
        if tokens:
            k = rng.randrange(len(tokens))
            key, eq, _ = tokens[k].partition("=")
            tokens[k] = (key + "=" if eq else "") + rng.choice(BOUNDARY_NUMBERS)
            lines[i] = " ".join(tokens)
    elif kind == 4:  # a garbage token
        tokens = lines[i].split()
        tokens.insert(rng.randrange(len(tokens) + 1), rng.choice(("=", "-", "1=", "=1", "1,2", "\x00", "é", "x" * 300)))
        lines[i] = " ".join(tokens)
    else:
        return _mutate_bytes(text.encode(), rng).decode("utf-8", "replace")
    return "\n".join(lines)


def _json_paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    paths = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            paths += _json_paths(v, prefix + (k,))
    elif isinstance(value, list):
        for k, v in enumerate(value[:8]):  # the first elements stand for the rest
            paths += _json_paths(v, prefix + (k,))
    return paths


def _mutate_json(text: str, rng: random.Random) -> str:
    if rng.random() < 0.15:
        return _mutate_bytes(text.encode(), rng).decode("utf-8", "replace")
    data = json.loads(text)
    path = rng.choice(_json_paths(data)[1:])
    parent = data
    for key in path[:-1]:
        parent = parent[key]
    kind = rng.randrange(5)
    value = parent[path[-1]]
    if kind == 4 and isinstance(value, str) and value.split():  # a column of numbers: one value to a boundary or garbage
        tokens = value.split()
        tokens[rng.randrange(len(tokens))] = rng.choice((*BOUNDARY_NUMBERS, "x", "1.5", "1e3", "-", "nan", "9" * 25))
        parent[path[-1]] = " ".join(tokens)
    elif kind == 0 and isinstance(parent, dict):
        del parent[path[-1]]
    elif kind == 1 and isinstance(parent, dict):
        parent["unexpected_" + str(rng.randrange(100))] = 1
    else:
        parent[path[-1]] = rng.choice((None, True, -1, 0, 2**31, 2**63, 2**64, 1.5, float("nan"), "", "x" * 1000, [], {},
                                       [-1], ["a"], {"a": 1}))
    return json.dumps(data, allow_nan=True)


def mutate(target: str, base: bytes, rng: random.Random) -> bytes:
    if target == "param":
        return _mutate_text(base.decode(), rng).encode()
    if target == "sidecar":
        return _mutate_json(base.decode(), rng).encode()
    if target == "bin":
        return _mutate_bytes(base, rng, (0, 4096))
    # transformed: the header (first page) and the index (the last KB) hold its structure
    hot = rng.choice(((0, 4096), (max(0, len(base) - 1024), len(base))))
    return _mutate_bytes(base, rng, hot)


# --- running a case (in the worker) -------------------------------------------------------------

def _check(target: str, case: Path, model: dict[str, Path]) -> None:
    """Read (and for a sidecar, open and run) the case: returns when accepted, raises when refused."""
    import numpy as np

    from . import native, sidecar
    from .ncnn_model import Graph, read_bin, read_param

    if target == "param":
        Graph.build(read_param(case))
    elif target == "bin":
        read_bin(read_param(model["param"]), case)
    elif target == "sidecar":
        from .session import Session
        session = Session(case)
        inputs = {name: np.zeros(shape, np.float32) for name, shape in session.input_shapes.items()}
        session.run(inputs)
    else:  # the native reader of the transformed file, without the sidecar's digest in front of it
        content = sidecar.load(model["sidecar"])
        tensors, layers = content.profile.columns
        param, bin_ = content.model_files(model["sidecar"])
        native.load().Executor(str(param), str(bin_), content.executor_schedule(), tensors, layers,
                               threads=content.target.threads, transformed=str(case))


def _outcome(target: str, case: Path, model: dict[str, Path], abort_on: str | None = None) -> dict[str, Any]:
    if target == abort_on:
        os.abort()  # tests only: what a native crash does to the worker
    try:
        _check(target, case, model)
        return {"outcome": "accepted"}
    except UserError as e:
        message = str(e)
    except RuntimeError as e:  # the native runtime's Status
        if target not in ("transformed", "sidecar"):
            return {"outcome": "finding", "error": f"RuntimeError: {e}"}
        message = str(e)
    except Exception as e:  # noqa: BLE001 - any other exception is what the harness looks for
        return {"outcome": "finding", "error": f"{type(e).__name__}: {e}"}
    if "\n" in message.strip() or not message.strip():
        return {"outcome": "finding", "error": f"refused in more than one line or none: {message!r}"}
    return {"outcome": "refused", "error": message}


def worker(model_dir: Path, abort_on: str | None = None) -> int:
    """Answer one JSON line per case read from stdin ({target, path}) with one JSON line of outcome;
    abort on a case of target `abort_on` (tests only)."""
    model = json.loads((model_dir / "files.json").read_text())
    model = {k: Path(v) for k, v in model.items()}
    for line in sys.stdin:
        request = json.loads(line)
        result = _outcome(request["target"], Path(request["path"]), model, abort_on)
        print(json.dumps(result), flush=True)
    return 0


# --- the parent ---------------------------------------------------------------------------------

class Worker:
    """A worker process; `run` answers a case or reports how the worker failed on it."""

    def __init__(self, model_dir: Path, abort_on: str | None):
        command = [sys.executable, "-m", "flexnn_ncnn.fuzz", "--worker", str(model_dir)]
        if abort_on:
            command += ["--abort-on", abort_on]
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def run(self, target: str, path: Path, timeout: float) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write(json.dumps({"target": target, "path": str(path)}) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            self.proc.kill()
            self.proc.wait()
            return {"outcome": "finding", "error": f"hang: no answer in {timeout:.0f} s"}
        line = self.proc.stdout.readline()
        if not line:
            code = self.proc.wait()
            stderr = self.proc.stderr.read() if self.proc.stderr else ""
            tail = " | ".join(stderr.strip().splitlines()[-3:])
            return {"outcome": "finding", "error": f"the process died (exit {code}): {tail}"}
        return json.loads(line)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@dataclass
class Report:
    seed: int
    cases: int
    seconds: float
    targets: dict[str, Tally]

    @property
    def findings(self) -> int:
        return sum(len(t.findings) for t in self.targets.values())

    def to_dict(self) -> dict[str, Any]:
        return {"seed": self.seed, "cases": self.cases, "seconds": round(self.seconds, 1), "findings": self.findings,
                "targets": {name: asdict(t) for name, t in self.targets.items()}}

    def markdown(self) -> str:
        rows = ["| target | cases | accepted | refused in one line | findings |", "|---|---|---|---|---|"]
        rows += [f"| {name} | {t.cases} | {t.accepted} | {t.refused} | {len(t.findings)} |" for name, t in self.targets.items()]
        return "\n".join(rows)


def fuzz(cases: int, seed: int, targets: Sequence[str], workdir: Path, timeout: float = CASE_TIMEOUT_S,
         abort_on: str | None = None, progress: bool = False) -> Report:
    """Run `cases` cases spread over `targets` in `workdir` (model, cases, findings); see the module doc.
    `abort_on` (tests only): the worker aborts on every case of that target, as a native crash would."""
    started = time.monotonic()
    model_dir, case_dir, found_dir = workdir / "model", workdir / "cases", workdir / "findings"
    for d in (model_dir, case_dir, found_dir):
        d.mkdir(parents=True, exist_ok=True)
    model = make_model(model_dir)
    (model_dir / "files.json").write_text(json.dumps({k: str(v) for k, v in model.items()}))
    bases = {t: model[t].read_bytes() for t in targets}
    rng = random.Random(seed)
    tallies = {t: Tally() for t in targets}
    worker_ = Worker(model_dir, abort_on)
    try:
        for i in tqdm(range(cases), desc="fuzz", unit="case", disable=not progress):
            target = targets[i % len(targets)]
            data = mutate(target, bases[target], rng)
            suffix = {"param": ".param", "bin": ".bin", "sidecar": ".flexnn.plan.json", "transformed": ".transformed"}[target]
            # a sidecar names its model files relative to its folder: it sits beside them
            path = (model_dir if target == "sidecar" else case_dir) / f"case{i}{suffix}"
            path.write_bytes(data)
            if not worker_.alive():
                worker_ = Worker(model_dir, abort_on)
            result = worker_.run(target, path, timeout)
            tally = tallies[target]
            tally.cases += 1
            if result["outcome"] == "accepted":
                tally.accepted += 1
            elif result["outcome"] == "refused":
                tally.refused += 1
            else:
                kept = found_dir / path.name
                shutil.copyfile(path, kept)
                error = result["error"] if len(result["error"]) <= MAX_ERROR_CHARS else result["error"][:MAX_ERROR_CHARS] + "..."
                tally.findings.append({"case": i, "input": str(kept), "error": error})
                log.warning("finding in %s case %d: %s (input kept in %s)", target, i, result["error"], kept)
            path.unlink()
    finally:
        worker_.close()
    return Report(seed, cases, time.monotonic() - started, tallies)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flexnn_ncnn.fuzz", description=__doc__.split("\n\n")[0],
                                     epilog="The findings' inputs are kept in WORKDIR/findings.")
    parser.add_argument("--cases", type=int, default=1000, help="cases to run, spread over the targets (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the mutations (default: %(default)s)")
    parser.add_argument("--target", choices=(*TARGETS, "all"), default="all", help="what to fuzz (default: all)")
    parser.add_argument("--report", type=Path, help="write the report here as JSON (and PATH.md as a table)")
    parser.add_argument("--workdir", type=Path, help="keep the model, cases and findings here (default: a temporary folder)")
    parser.add_argument("--timeout", type=float, default=CASE_TIMEOUT_S, help="seconds a case may take (default: %(default)s)")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--abort-on", choices=TARGETS, help=argparse.SUPPRESS)
    add_logging_args(parser)
    args = parser.parse_args(argv)
    setup_logging(args.verbose)
    if args.worker:
        return worker(args.worker, args.abort_on)
    if args.cases < 1:
        raise UserError("--cases must be at least 1")
    targets = TARGETS if args.target == "all" else (args.target,)
    with tempfile.TemporaryDirectory(prefix="flexnn-fuzz-") as scratch:
        workdir = args.workdir or Path(scratch)
        report = fuzz(args.cases, args.seed, targets, workdir, args.timeout, progress=True)
        if args.report:
            atomic_write(args.report, lambda f: f.write((json.dumps(report.to_dict(), indent=1) + "\n").encode()))
            atomic_write(args.report.with_suffix(".md"), lambda f: f.write((report.markdown() + "\n").encode()))
    print(report.markdown())
    print(f"{report.cases} cases in {report.seconds:.0f} s (seed {report.seed}): {report.findings} finding(s)")
    return 1 if report.findings else 0


if __name__ == "__main__":
    sys.exit(run_main(main))
