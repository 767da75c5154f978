#!/usr/bin/env bash
# Build the patched NCNN and the project's native side for android-arm64 with the NDK in $ANDROID_NDK (see `python -m flexnn_ncnn.build --help`).
# Extra arguments go to the build driver, e.g. --dry-run to print the commands without running them.
set -euo pipefail
cd "$(dirname "$0")/.."
exec "${PYTHON:-python3}" -m flexnn_ncnn.build --target android-arm64 "$@"
