"""One build driver for every target: fetch → patch → NCNN (CMake + Ninja) → the project's native side.

    python -m flexnn_ncnn.build --target host|linux-aarch64|android-arm64

Layout (all under `build/<target>/`, git-ignored): `ncnn/` NCNN's build tree, `install/` its install
prefix, `native/` the project's runtime library, tools and C++ tests built against that prefix,
`*.log` the full output of each step. For host the pybind11 module is also copied into the package
as `flexnn_ncnn/_native*.so`. Every step is incremental: CMake re-configures only when its
arguments change, Ninja rebuilds only what changed (a changed patch series re-patches the touched
files only).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Sequence

from tqdm import tqdm

from . import archive_layout, fetch, patches
from .cli import UserError, add_logging_args, run_main, setup_logging

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parent.parent
BUILD_ROOT = REPO_ROOT / "build"
NATIVE_SOURCE = Path(__file__).resolve().parent / "csrc"
TOOLCHAINS = REPO_ROOT / "scripts" / "toolchains"
TARGETS = ("host", "linux-aarch64", "android-arm64")
# Android 7.0: the oldest API level with the full 64-bit file-offset API the weight store uses.
ANDROID_PLATFORM = "android-24"

# Sanitizer builds (host only) of the runtime's stress program: ThreadSanitizer cannot see inside
# GCC's libgomp, so NCNN builds its own small OpenMP runtime (SIMPLEOMP), which TSAN instruments; one
# ISA (no runtime dispatch) and only the layers the stress models use keep the build to minutes.
SANITIZERS = {"tsan": "thread", "asan": "address"}
SANITIZER_LAYERS = ("input", "convolution", "split", "binaryop", "relu", "pooling", "flatten", "innerproduct",
                    "padding", "gemm", "packing", "cast", "crop", "yolov3detectionoutput",
                    # the race hunt's models (racehunt.py)
                    "convolutiondepthwise", "concat", "interp", "mvn", "batchnorm", "scale", "eltwise", "softmax", "lrn", "clip")
SANITIZER_NCNN_ARGS = ["-DNCNN_SIMPLEOMP=ON", "-DNCNN_RUNTIME_CPU=OFF", "-DNCNN_AVX=OFF", "-DNCNN_AVX2=OFF",
                       "-DNCNN_AVX512=OFF", "-DNCNN_FMA=OFF", "-DNCNN_F16C=OFF", "-DNCNN_XOP=OFF"]

# The functions models run, measured on a target's build (code_trace.py), laid out first in its NCNN.
HOT_LISTS = {"host": Path(__file__).parent / "hot_code" / "x86.txt"}
# The code tracer's build (code_trace.py): the host build's NCNN objects, every function on pages of its
# own (archive_layout.page_aligned), linked into a Python module of its own; nothing compiled again.
CODE_TRACE_BUILD = "host-trace"

# What none of the targets needs from NCNN's tree (the sdist has no tools/, benchmark/ or tests/).
NCNN_COMMON_ARGS = [
    "-DCMAKE_BUILD_TYPE=Release",
    "-DNCNN_BUILD_BENCHMARK=OFF", "-DNCNN_BUILD_TOOLS=OFF", "-DNCNN_BUILD_EXAMPLES=OFF", "-DNCNN_BUILD_TESTS=OFF",
    "-DNCNN_VULKAN=OFF", "-DNCNN_PYTHON=OFF", "-DNCNN_SHARED_LIB=OFF",
    "-Wno-dev", "-Wno-deprecated",
]


@dataclass(frozen=True)
class Target:
    name: str
    toolchain_args: list[str] = field(default_factory=list)
    sanitizer: str | None = None  # a key of SANITIZERS: an instrumented host build of runtime_stress only

    @property
    def is_host(self) -> bool:
        return self.name == "host"

    @property
    def build_name(self) -> str:
        """The folder under build/: `host`, `linux-aarch64`, or `host-tsan` for a sanitizer build."""
        return f"{self.name}-{self.sanitizer}" if self.sanitizer else self.name


def resolve_target(name: str) -> Target:
    """The target's toolchain, checked to exist here; a missing toolchain is a UserError saying what to install."""
    if name == "host":
        return Target(name, ["-DCMAKE_POSITION_INDEPENDENT_CODE=ON"])
    if name == "linux-aarch64":
        if shutil.which("aarch64-linux-gnu-g++") is None:
            raise UserError("linux-aarch64 needs Debian's cross compiler: apt-get install g++-aarch64-linux-gnu")
        return Target(name, [f"-DCMAKE_TOOLCHAIN_FILE={TOOLCHAINS / 'aarch64-linux-gnu.toolchain.cmake'}"])
    if name == "android-arm64":
        ndk = os.environ.get("ANDROID_NDK") or os.environ.get("ANDROID_NDK_HOME")
        if not ndk:
            raise UserError("android-arm64 needs the Android NDK: set ANDROID_NDK to the NDK's folder "
                            "(the one holding build/cmake/android.toolchain.cmake)")
        toolchain = Path(ndk) / "build" / "cmake" / "android.toolchain.cmake"
        if not toolchain.is_file():
            raise UserError(f"ANDROID_NDK={ndk} is not an NDK: it has no build/cmake/android.toolchain.cmake")
        return Target(name, [f"-DCMAKE_TOOLCHAIN_FILE={toolchain}", "-DANDROID_ABI=arm64-v8a",
                             f"-DANDROID_PLATFORM={ANDROID_PLATFORM}", "-DANDROID_STL=c++_static"])
    raise UserError(f"unknown target {name!r}: choose one of {', '.join(TARGETS)}")


@dataclass(frozen=True)
class Step:
    """One CMake project configured into `build_dir` and built (and installed) with Ninja."""
    title: str
    source: Path
    build_dir: Path
    args: list[str]
    ninja_targets: list[str]
    # (as built, as installed): a static library the step installs, laid out once built
    # (archive_layout.py): grouped by instruction set, and with a hot list the functions it names first
    layout: tuple[Path, Path] | None = None
    hot_list: Path | None = None

    def configure_command(self) -> list[str]:
        return ["cmake", "-G", "Ninja", "-S", str(self.source), "-B", str(self.build_dir), *self.args]

    def build_command(self) -> list[str]:
        return ["ninja", "-C", str(self.build_dir), *self.ninja_targets]


def sanitizer_layer_args(source: Path) -> list[str]:
    """`-DWITH_LAYER_x=OFF` for every NCNN layer but SANITIZER_LAYERS (NCNN's option names are lower case)."""
    try:
        cmake = (source / "src" / "CMakeLists.txt").read_text()
    except OSError as e:
        raise UserError(f"a sanitizer build needs the NCNN source to list its layers: {e}") from None
    layers = [m.lower() for m in re.findall(r"^ncnn_add_layer\((\w+)", cmake, re.MULTILINE)]
    return [f"-DWITH_LAYER_{name}=OFF" for name in layers if name not in SANITIZER_LAYERS]


def plan_steps(target: Target, build_root: Path, series_id: str, ncnn_version: str, source: Path) -> list[Step]:
    root = build_root / target.build_name
    install = root / "install"
    variant_ncnn_args: list[str] = []
    variant_native_args: list[str] = []
    native_targets: list[str] = []
    if target.sanitizer:
        flags = f"-fsanitize={SANITIZERS[target.sanitizer]} -g -fno-omit-frame-pointer"
        variant_ncnn_args = [*SANITIZER_NCNN_ARGS, f"-DCMAKE_C_FLAGS={flags}", f"-DCMAKE_CXX_FLAGS={flags}",
                             *sanitizer_layer_args(source)]
        variant_native_args = [f"-DCMAKE_CXX_FLAGS={flags}", f"-DCMAKE_EXE_LINKER_FLAGS=-fsanitize={SANITIZERS[target.sanitizer]}"]
        native_targets = ["runtime_stress", "fault_injection"]
    hot_list = HOT_LISTS.get(target.name) if not target.sanitizer else None
    if hot_list is not None:  # every function a section of its own, so the hot ones can be moved
        variant_ncnn_args = ["-DCMAKE_C_FLAGS=-ffunction-sections", "-DCMAKE_CXX_FLAGS=-ffunction-sections"]
    ncnn = Step(f"NCNN ({target.build_name})", source, root / "ncnn",
                [*NCNN_COMMON_ARGS, f"-DNCNN_VERSION={ncnn_version}", f"-DCMAKE_INSTALL_PREFIX={install}",
                 *target.toolchain_args, *variant_ncnn_args],
                ["install"], (root / "ncnn" / "src" / "libncnn.a", install / "lib" / "libncnn.a"), hot_list)
    native_args = [
        "-DCMAKE_BUILD_TYPE=Release", f"-Dncnn_DIR={install / 'lib' / 'cmake' / 'ncnn'}",
        f"-DFLEXNN_PATCH_SERIES_ID={series_id}", f"-DFLEXNN_NCNN_VERSION={ncnn_version}",
        f"-DFLEXNN_TARGET={target.name}", *target.toolchain_args, *variant_native_args,
    ]
    if target.is_host and not target.sanitizer:
        import pybind11

        native_args += ["-DFLEXNN_PYTHON=ON", f"-Dpybind11_DIR={pybind11.get_cmake_dir()}",
                        f"-DPython_EXECUTABLE={sys.executable}"]
    native = Step(f"flexnn native ({target.build_name})", NATIVE_SOURCE, root / "native", native_args, native_targets)
    return [ncnn, native]


def compiler_cache_env() -> dict[str, str]:
    """Use ccache when installed: a first configure picks the launcher up from the environment (so
    it is no build input), and paths below the checkout are hashed relative to it, so a rebuild in
    a fresh clone reuses the objects of an earlier one."""
    if shutil.which("ccache") is None:
        return {}
    return {"CMAKE_C_COMPILER_LAUNCHER": "ccache", "CMAKE_CXX_COMPILER_LAUNCHER": "ccache",
            "CCACHE_BASEDIR": str(REPO_ROOT), "CCACHE_NOHASHDIR": "1"}


def _run_logged(command: list[str], log_path: Path, title: str) -> None:
    """Run `command`, its output to `log_path`; Ninja's `[done/total]` status drives a progress bar."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "NINJA_STATUS": "[%f/%t] ", **compiler_cache_env()}
    status = re.compile(r"^\[(\d+)/(\d+)\] ")
    with open(log_path, "a") as out, tqdm(desc=title, unit="step", disable=None, leave=False) as bar:
        out.write("$ " + shlex.join(command) + "\n")
        out.flush()
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        assert proc.stdout is not None
        for line in proc.stdout:
            out.write(line)
            m = status.match(line)
            if m:
                bar.total = int(m.group(2))
                bar.n = int(m.group(1))
                bar.refresh()
        if proc.wait() != 0:
            out.flush()
            tail = log_path.read_text().splitlines()[-25:]
            log.error("last lines of %s:\n%s", log_path, "\n".join(tail))
            raise UserError(f"{title}: `{command[0]}` failed (exit {proc.returncode}); full output in {log_path}")


def _configure_stamp(command: list[str]) -> str:
    """What a configure depends on: its command and the content of the toolchain file it names."""
    toolchains = [a.split("=", 1)[1] for a in command if a.startswith("-DCMAKE_TOOLCHAIN_FILE=")]
    return json.dumps({"command": command, "toolchain": [Path(t).read_text() for t in toolchains]})


def run_step(step: Step) -> None:
    """Configure afresh when the command or its toolchain file changed (or it never ran), then build."""
    stamp_path = step.build_dir / ".flexnn-configure.json"
    configure = step.configure_command()
    stamp = _configure_stamp(configure)
    try:
        configured = stamp_path.read_text() == stamp and (step.build_dir / "build.ninja").exists()
    except OSError:
        configured = False
    log_path = step.build_dir.parent / f"{step.build_dir.name}.log"
    if not configured:
        # --fresh drops cached results (found libraries, compiler checks) a changed toolchain may change
        _run_logged([*configure, "--fresh"], log_path, f"configure {step.title}")
        stamp_path.write_text(stamp)
    _run_logged(step.build_command(), log_path, f"build {step.title}")
    if step.layout is not None:
        hot = archive_layout.read_hot_list(step.hot_list) if step.hot_list else []
        built, installed = step.layout
        if archive_layout.lay_out(built, installed, _cache_value(step.build_dir, "CMAKE_AR"),
                                  _cache_value(step.build_dir, "CMAKE_OBJCOPY"), hot):
            print(f"==> {installed}: objects grouped by instruction set, {len(hot)} hot functions first", flush=True)


def _cache_value(build_dir: Path, key: str) -> str:
    """A value of the CMakeCache.txt in `build_dir`."""
    for line in (build_dir / "CMakeCache.txt").read_text().splitlines():
        name, _, value = line.partition("=")
        if name.split(":")[0] == key:
            return value
    raise UserError(f"{build_dir / 'CMakeCache.txt'} has no {key}")


def python_modules(build_dir: Path) -> list[Path]:
    """The extension modules (`_native`, `_planner`, ...) a host native build produced."""
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    return sorted(p for p in build_dir.rglob(f"_*{suffix}") if "CMakeFiles" not in p.parts)


def build_code_trace(build_root: Path, host_steps: Sequence[Step]) -> Path:
    """The code tracer's module, from the host build `host_steps` made: its NCNN install copied to
    build/host-trace/install with the archive page-aligned, the module linked against it in
    build/host-trace/native (never copied into the package). Returns that folder."""
    ncnn, native = host_steps
    assert ncnn.layout is not None
    built, installed = ncnn.layout
    root = build_root / CODE_TRACE_BUILD
    prefix = root / "install"
    # the headers and CMake files as installed (their times kept, so nothing recompiles), the archive aligned
    shutil.copytree(installed.parent.parent, prefix, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns(installed.name, installed.name + ".*"))
    if archive_layout.page_aligned(built, prefix / "lib" / installed.name, _cache_value(ncnn.build_dir, "CMAKE_AR"),
                                   _cache_value(ncnn.build_dir, "CMAKE_OBJCOPY")):
        print(f"==> {prefix / 'lib' / installed.name}: every function on pages of its own", flush=True)
    args = [f"-Dncnn_DIR={prefix / 'lib' / 'cmake' / 'ncnn'}" if a.startswith("-Dncnn_DIR=") else a for a in native.args]
    step = Step(f"flexnn native ({CODE_TRACE_BUILD})", NATIVE_SOURCE, root / "native", args, ["_native"])
    print(f"==> {step.title}: {step.build_dir}", flush=True)
    run_step(step)
    return step.build_dir


def build(target_name: str, build_root: Path = BUILD_ROOT, dry_run: bool = False, sanitizer: str | None = None,
          code_trace: bool = False) -> Path:
    """Build `target_name`; returns its build root. With `dry_run`, print the commands instead. With
    `code_trace` (host), also the code tracer's module (build_code_trace)."""
    target = resolve_target(target_name)
    if code_trace and (not target.is_host or sanitizer):
        raise UserError("--code-trace goes with the host build only")
    if sanitizer:
        if not target.is_host:
            raise UserError(f"sanitizer builds are host-only, not {target_name}")
        target = replace(target, sanitizer=sanitizer)
    lock = fetch.Lock.load()
    series = patches.read_series()
    sid = patches.series_id(series)
    source = fetch.THIRD_PARTY / "ncnn"
    if target.sanitizer and not dry_run:
        fetch.fetch(lock)  # the layer subset is read from the source
    steps = plan_steps(target, build_root, sid, lock.ncnn_version, source)
    if dry_run:
        print(f"# fetch {lock.filename} (sha256 {lock.sha256}) to {source}")
        print(f"# apply {len(series)} patch(es) from ncnn_patches/series (series id {sid})")
        for step in steps:
            print(shlex.join(step.configure_command()))
            print(shlex.join(step.build_command()))
        if code_trace:
            print(f"# page-align NCNN's archive into {build_root / CODE_TRACE_BUILD / 'install'} and link _native "
                  f"against it in {build_root / CODE_TRACE_BUILD / 'native'}")
        return build_root / target.build_name
    for tool in ("cmake", "ninja", "git"):
        if shutil.which(tool) is None:
            raise UserError(f"{tool} is not installed: apt-get install cmake ninja-build git")
    print(f"==> NCNN {lock.version}: fetch and verify", flush=True)
    fetch.fetch(lock)
    applied = patches.apply_series(source, series)
    print(f"==> patch series {sid}: {len(series)} patch(es), {len(applied)} newly applied", flush=True)
    for step in steps:
        print(f"==> {step.title}: {step.build_dir}", flush=True)
        run_step(step)
    if target.is_host and not target.sanitizer:
        package = Path(__file__).resolve().parent
        for built in python_modules(steps[-1].build_dir):
            tmp = package / (built.name + ".tmp")
            shutil.copy2(built, tmp)
            os.replace(tmp, package / built.name)  # atomic: a running interpreter keeps its mapped copy
            print(f"==> python module: {package / built.name}", flush=True)
    if code_trace:
        build_code_trace(build_root, steps)
    return build_root / target.build_name


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m flexnn_ncnn.build",
        description="Fetch the pinned NCNN sdist, apply ncnn_patches/series, build NCNN and the project's "
        "native side (runtime library, tools, C++ tests; on host also the Python module) for one target. "
        "Incremental: run it again after any change.",
    )
    parser.add_argument("--target", choices=TARGETS, default="host",
                        help="host: x86_64 with NCNN's runtime CPU dispatch; linux-aarch64: Debian's "
                        "g++-aarch64-linux-gnu, run under qemu-aarch64; android-arm64: $ANDROID_NDK (default: %(default)s)")
    parser.add_argument("--sanitizer", choices=sorted(SANITIZERS),
                        help="host only: build the runtime's stress program with ThreadSanitizer or AddressSanitizer "
                        "into build/host-tsan or build/host-asan (NCNN with its own OpenMP runtime and a layer subset)")
    parser.add_argument("--code-trace", action="store_true",
                        help=f"host: also the code tracer's module, into build/{CODE_TRACE_BUILD}: the same NCNN objects "
                        "with every function on pages of its own (python -m flexnn_ncnn.code_trace runs it)")
    parser.add_argument("--build-root", type=Path, default=BUILD_ROOT, help="where build trees go (default: %(default)s)")
    parser.add_argument("--dry-run", action="store_true", help="print the commands the build would run, run nothing")
    add_logging_args(parser)
    args = parser.parse_args(argv)
    setup_logging(args.verbose)
    build(args.target, args.build_root, args.dry_run, args.sanitizer, args.code_trace)
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
