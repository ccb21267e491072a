#!/usr/bin/env bash
# Install what s2c needs on Debian 12 (when missing), configure and build.
#   scripts/setup.sh [BUILD_DIR [meson options...]]
# Needs the CUDA toolkit's headers and ptxas (default /usr/local/cuda); no GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
builddir=${1:-build}
shift || true

pkgs=(meson ninja-build make pkg-config gcc g++ llvm-22-dev libzstd-dev zlib1g-dev libyaml-dev check python3
      python3-torch python3-numpy python3-pytest)   # the Python package's CPU tests
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    echo "setup: installing ${missing[*]}"
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

cuda=${CUDA_HOME:-/usr/local/cuda}
if [ ! -f "$cuda/include/cuda.h" ]; then
    echo "setup: cuda.h not found under $cuda/include; install the CUDA toolkit or set CUDA_HOME" >&2
    exit 1
fi

if [ ! -f "$builddir/build.ninja" ]; then
    log=$(mktemp)
    if ! meson setup "$builddir" -Dtoolkit_dir="$cuda" "$@" >"$log" 2>&1; then
        cat "$log" >&2
        rm -f "$log"
        exit 1
    fi
    rm -f "$log"
fi
ninja -C "$builddir" --quiet
echo "setup: built in $builddir"
