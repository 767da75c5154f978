#!/usr/bin/env bash
# Installs what the tests need (the set-up, the aarch64 cross compiler and qemu, the test extras:
# pytest, hypothesis, stock NCNN as the oracle, torch and pnnx), builds host (with the code tracer's
# module), linux-aarch64 and the ThreadSanitizer / AddressSanitizer variants of the runtime's stress
# program, and runs the whole test suite. Arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}

bash scripts/setup.sh g++-aarch64-linux-gnu qemu-user
echo "==> pip install -e .[test]"
"$PYTHON" -m pip install -q -e ".[test]"
"$PYTHON" -m flexnn_ncnn.build --target host --code-trace
"$PYTHON" -m flexnn_ncnn.build --target linux-aarch64
"$PYTHON" -m flexnn_ncnn.build --sanitizer tsan
"$PYTHON" -m flexnn_ncnn.build --sanitizer asan
echo "==> pytest"
exec "$PYTHON" -m pytest -q "$@"
