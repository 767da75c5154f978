"""The build driver's target handling: toolchains found or a clear error, and the exact commands it runs."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

from flexnn_ncnn import fetch
from flexnn_ncnn.archive_layout import generic, grouped, hot_renames, isa_group, original_name, specific
from helpers import REPO_ROOT, assert_user_error, built, run_module

ANDROID_SCRIPT = REPO_ROOT / "scripts" / "build_android.sh"


def run_android_script(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in ("ANDROID_NDK", "ANDROID_NDK_HOME")}
    return subprocess.run(["bash", str(ANDROID_SCRIPT), *args], capture_output=True, text=True, env={**clean, **env})


def stub_ndk(root: Path) -> Path:
    toolchain = root / "build" / "cmake" / "android.toolchain.cmake"
    toolchain.parent.mkdir(parents=True)
    toolchain.write_text("# stub: the build driver only checks that the NDK's toolchain file exists\n")
    return root


def cmake_commands(stdout: str) -> list[list[str]]:
    return [shlex.split(l) for l in stdout.splitlines() if l.startswith("cmake ")]


def test_android_without_ndk_is_a_clear_error() -> None:
    assert_user_error(run_android_script({}, "--dry-run"), "ANDROID_NDK")


def test_android_with_a_folder_that_is_no_ndk_is_a_clear_error(tmp_path: Path) -> None:
    assert_user_error(run_android_script({"ANDROID_NDK": str(tmp_path)}, "--dry-run"), "android.toolchain.cmake", str(tmp_path))


def test_android_cmake_commands_with_a_stub_ndk(tmp_path: Path) -> None:
    ndk = stub_ndk(tmp_path / "ndk")

    build_root = tmp_path / "build"
    proc = run_android_script({"ANDROID_NDK": str(ndk)}, "--dry-run", "--build-root", str(build_root))

    assert proc.returncode == 0, proc.stderr
    assert not build_root.exists()  # a dry run runs nothing
    ncnn, native = cmake_commands(proc.stdout)
    lock = fetch.Lock.load()
    for command in (ncnn, native):
        assert command[:3] == ["cmake", "-G", "Ninja"]
        assert f"-DCMAKE_TOOLCHAIN_FILE={ndk}/build/cmake/android.toolchain.cmake" in command
        assert "-DANDROID_ABI=arm64-v8a" in command
        assert "-DANDROID_PLATFORM=android-24" in command
        assert "-DANDROID_STL=c++_static" in command
    assert ncnn[ncnn.index("-S") + 1] == str(fetch.THIRD_PARTY / "ncnn")
    for flag in ("-DNCNN_VULKAN=OFF", "-DNCNN_BUILD_TOOLS=OFF", "-DNCNN_BUILD_BENCHMARK=OFF",
                 "-DNCNN_BUILD_TESTS=OFF", "-DNCNN_BUILD_EXAMPLES=OFF", f"-DNCNN_VERSION={lock.ncnn_version}"):
        assert flag in ncnn
    install = build_root / "android-arm64" / "install"
    assert f"-DCMAKE_INSTALL_PREFIX={install}" in ncnn
    assert f"-Dncnn_DIR={install}/lib/cmake/ncnn" in native
    assert "-DFLEXNN_PYTHON=ON" not in native  # the Python module is host-only
    assert "ninja -C" in proc.stdout


def test_linux_aarch64_uses_the_projects_toolchain_file() -> None:
    proc = run_module("build", "--target", "linux-aarch64", "--dry-run")

    assert proc.returncode == 0, proc.stderr
    toolchain = REPO_ROOT / "scripts" / "toolchains" / "aarch64-linux-gnu.toolchain.cmake"
    for command in cmake_commands(proc.stdout):
        assert f"-DCMAKE_TOOLCHAIN_FILE={toolchain}" in command


def test_host_builds_the_python_module_with_position_independent_ncnn() -> None:
    proc = run_module("build", "--target", "host", "--dry-run")

    assert proc.returncode == 0, proc.stderr
    ncnn, native = cmake_commands(proc.stdout)
    assert "-DCMAKE_POSITION_INDEPENDENT_CODE=ON" in ncnn
    assert "-DFLEXNN_PYTHON=ON" in native
    assert not any(a.startswith("-DCMAKE_TOOLCHAIN_FILE") for a in ncnn)


def test_unknown_target_is_rejected_by_the_cli() -> None:
    proc = run_module("build", "--target", "riscv")
    assert proc.returncode == 2 and "invalid choice" in proc.stderr


def test_sanitizer_build_is_host_only_with_its_own_root_and_a_layer_subset(tmp_path: Path) -> None:
    proc = run_module("build", "--sanitizer", "tsan", "--dry-run", "--build-root", str(tmp_path))

    assert proc.returncode == 0, proc.stderr
    ncnn, native = cmake_commands(proc.stdout)
    assert ncnn[ncnn.index("-B") + 1] == str(tmp_path / "host-tsan" / "ncnn")
    assert "-DNCNN_SIMPLEOMP=ON" in ncnn  # TSAN cannot see inside libgomp
    assert "-DCMAKE_CXX_FLAGS=-fsanitize=thread -g -fno-omit-frame-pointer" in ncnn
    assert "-DWITH_LAYER_lstm=OFF" in ncnn and "-DWITH_LAYER_convolution=OFF" not in ncnn
    assert "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=thread" in native
    assert "-DFLEXNN_PYTHON=ON" not in native
    assert proc.stdout.rstrip().endswith("runtime_stress fault_injection")  # the sanitizer workloads only

    assert_user_error(run_module("build", "--target", "linux-aarch64", "--sanitizer", "asan", "--dry-run"), "host-only")


def test_objects_are_grouped_by_instruction_set_in_ncnns_order() -> None:
    members = ["net.cpp.o", "absval.cpp.o", "absval_x86.cpp.o", "absval_x86_avx512.cpp.o", "absval_x86_fma.cpp.o",
               "relu.cpp.o", "relu_x86.cpp.o", "relu_x86_avx512.cpp.o", "relu_x86_fma.cpp.o", "relu_arm_arm82.cpp.o"]
    assert grouped(members) == ["net.cpp.o", "absval.cpp.o", "relu.cpp.o", "relu_arm_arm82.cpp.o", "absval_x86.cpp.o",
                                "relu_x86.cpp.o", "absval_x86_avx512.cpp.o", "relu_x86_avx512.cpp.o",
                                "absval_x86_fma.cpp.o", "relu_x86_fma.cpp.o"]


def test_the_built_library_holds_each_instruction_sets_variants_together() -> None:
    """What the runtime links: the variants one CPU runs lie together (archive_layout.py), the portable objects first."""
    members = subprocess.run(["ar", "t", str(built("host", "install", "lib", "libncnn.a"))], capture_output=True, text=True,
                             check=True).stdout.split()
    groups = [isa_group(m) for m in members]
    assert len(set(groups)) > 3 and groups[0] == "" and groups == sorted(groups)


FORWARD_AVX512 = ".text._ZNK4ncnn22Convolution_x86_avx5127forwardERKNS_3MatERS1_RKNS_6OptionE"


def test_a_hot_function_of_one_variant_names_the_same_function_of_every_variant() -> None:
    entry = generic("convolution_x86_avx512.cpp.o", FORWARD_AVX512)
    assert entry == ("convolution_x86{isa}.cpp.o", ".text._ZNK4ncnn{Convolution_x86}7forwardERKNS_3MatERS1_RKNS_6OptionE")
    assert specific(entry, "convolution_x86_avx512.cpp.o") == FORWARD_AVX512
    assert specific(entry, "convolution_x86_fma.cpp.o") == ".text._ZNK4ncnn19Convolution_x86_fma7forwardERKNS_3MatERS1_RKNS_6OptionE"
    assert specific(entry, "convolution_x86.cpp.o") == ".text._ZNK4ncnn15Convolution_x867forwardERKNS_3MatERS1_RKNS_6OptionE"
    assert specific(entry, "deconvolution_x86_fma.cpp.o") is None
    # a static function's name carries no extension; a portable object's entry is itself
    assert generic("pooling_x86_avx512.cpp.o", ".text._ZN4ncnnL8pooling2E") == ("pooling_x86{isa}.cpp.o", ".text._ZN4ncnnL8pooling2E")
    assert generic("net.cpp.o", ".text._ZN4ncnn3Net7forwardEv") == ("net.cpp.o", ".text._ZN4ncnn3Net7forwardEv")


def test_hot_functions_are_ranked_within_their_instruction_sets_group() -> None:
    members = ["net.cpp.o", "convolution_x86.cpp.o", "convolution_x86_avx512.cpp.o", "convolution_x86_fma.cpp.o"]
    hot = [generic("convolution_x86_avx512.cpp.o", FORWARD_AVX512), ("net.cpp.o", ".text._ZN4ncnn3Net7forwardEv")]
    renames = hot_renames(members, hot)
    assert renames["net.cpp.o"] == {".text._ZN4ncnn3Net7forwardEv": ".text.sorted.00.00001._ZN4ncnn3Net7forwardEv"}
    assert renames["convolution_x86_avx512.cpp.o"] == {FORWARD_AVX512: ".text.sorted.02.00000." + FORWARD_AVX512[6:]}
    assert [n[:22] for n in renames["convolution_x86_fma.cpp.o"].values()] == [".text.sorted.03.00000."]
    assert [n[:22] for n in renames["convolution_x86.cpp.o"].values()] == [".text.sorted.01.00000."]
    # a trace of a laid-out build names the functions as the compiler did
    assert original_name(renames["net.cpp.o"][".text._ZN4ncnn3Net7forwardEv"]) == ".text._ZN4ncnn3Net7forwardEv"
