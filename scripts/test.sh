#!/usr/bin/env bash
# Installs what the tests need (the set-up, the aarch64 cross compiler and qemu, the test extras:
# pytest, hypothesis, stock NCNN as the oracle, torch and pnnx), builds host and linux-aarch64,
# and runs the whole test suite. Arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}

bash scripts/setup.sh g++-aarch64-linux-gnu qemu-user
echo "==> pip install -e .[test]"
"$PYTHON" -m pip install -q -e ".[test]"
"$PYTHON" -m flexnn_ncnn.build --target linux-aarch64
echo "==> pytest"
exec "$PYTHON" -m pytest -q "$@"
