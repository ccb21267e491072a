#!/usr/bin/env bash
# Build one wheel of the Python package that bundles libs2rt and libs2c (LLVM,
# libyaml, zstd, zlib and libstdc++ linked in), so that a machine with only
# torch and the CUDA driver installs it with pip:
#
#   scripts/wheel.sh [OUT_DIR]        (default wheelhouse/)
#
# The libraries come from build-wheel/ (configured here: release, static
# LLVM); the wheel is tagged py3-none-manylinux_2_N_x86_64, N the newest glibc
# symbol version they need.  JIT needs ptxas at run time: $S2C_PTXAS, the CUDA
# toolkit, or the one Triton ships (found by the package).
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(realpath -m "${1:-wheelhouse}")
build=build-wheel
opts=(-Dstatic_llvm=true -Dprefer_static=true -Dbuildtype=release -Dtests=disabled -Dwerror=false)
[ -f "$build/build.ninja" ] || meson setup "$build" -Dtoolkit_dir="${CUDA_HOME:-/usr/local/cuda}" "${opts[@]}" >/dev/null
ninja -C "$build" jit/libs2c.so.0.2.0 runtime/libs2rt.so.0.2.0 >/dev/null

libs=python/s2c/_libs
rm -rf "$libs" python/build python/*.egg-info
mkdir -p "$libs"
# the sonames (what libs2c's DT_NEEDED names), stripped of debug info
cp "$build/runtime/libs2rt.so.0.2.0" "$libs/libs2rt.so.0.2"
cp "$build/jit/libs2c.so.0.2.0" "$libs/libs2c.so.0.2"
strip --strip-unneeded "$libs"/*.so.0.2
# nothing beyond glibc, libm, libdl, libpthread, librt may be needed
if objdump -p "$libs"/*.so.0.2 | awk '/NEEDED/ {print $2}' | grep -vE '^(libc|libm|libdl|libpthread|librt|libs2rt)\.so|^ld-linux' ; then
    echo "wheel: the libraries need more than glibc (listed above)" >&2
    exit 1
fi
glibc=$(objdump -T "$libs"/*.so.0.2 | grep -o 'GLIBC_2\.[0-9]*' | sort -t. -k2 -n | tail -1 | cut -d. -f2)
plat=manylinux_2_${glibc}_x86_64
py=
for p in python3 /usr/bin/python3; do
    if "$p" -c 'import setuptools, wheel' 2>/dev/null; then py=$p; break; fi
done
[ -n "$py" ] || { echo "wheel: no python3 with setuptools and wheel (Debian: python3-setuptools python3-wheel)" >&2; exit 1; }
(cd python && "$py" setup.py -q bdist_wheel --python-tag py3 --plat-name "$plat" -d "$out" >/dev/null)
rm -rf python/build python/*.egg-info "$libs"
ls "$out"/s2c-*-py3-none-"$plat".whl
