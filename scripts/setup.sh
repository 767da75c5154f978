#!/usr/bin/env bash
# Everything a fresh Debian machine with Python 3.11 needs to use flexnn_ncnn on the host:
# system packages, the Python package (editable), and the host build of the patched NCNN with the
# project's native side. Safe to run again: every step is incremental.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo

apt_install() {
    local missing=()
    for pkg in "$@"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
    [ ${#missing[@]} -eq 0 ] && return 0
    echo "==> apt-get install ${missing[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# CMake: Debian's 3.25 configures the pinned NCNN (it declares cmake_minimum_required 2.8.12...3.10).
apt_install cmake ninja-build ccache git g++ "$@"
echo "==> pip install -e .[models]"
"$PYTHON" -m pip install -q -e ".[models]"
"$PYTHON" -m flexnn_ncnn.build --target host
