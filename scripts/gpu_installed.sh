#!/usr/bin/env bash
# The installed-prefix examples on a GPU machine without LLVM, meson or CMake:
#
#   scripts/gpu_installed.sh pack BUILD_DIR OUT_DIR   (here) install BUILD_DIR (a
#       -Dstatic_llvm=true build: libs2c.so then carries LLVM) into a DESTDIR,
#       build examples/installed against it with pkg-config and CMake only, and
#       pack the prefix and the programs into OUT_DIR/installed.tar.xz
#   scripts/gpu_installed.sh run OUT_DIR              (on the GPU machine) unpack
#       and run each example; prints one PASS/FAIL/SKIP line each, exits 1 on a FAIL
set -euo pipefail
cmd=${1:-}
if [ "$cmd" = pack ] && [ $# -eq 3 ]; then
    build=$(realpath "$2")
    out=$(realpath -m "$3")
    root=$(cd "$(dirname "$0")/.." && pwd)
    work=$build/installed-examples   # not in OUT_DIR: only the archive travels
    rm -rf "$work" && mkdir -p "$work"
    ninja -C "$build" runtime/libs2rt.so.0.2.0 runtime/libs2rt.a jit/libs2c.so.0.2.0 jit/libs2c.a tools/s2c >/dev/null
    meson install -C "$build" --destdir "$work/dest" --no-rebuild --quiet
    pc=$(dirname "$(find "$work/dest" -name s2rt.pc -print -quit)")
    export PKG_CONFIG_PATH=$pc
    prefix=$(cd "$(pkg-config --variable=prefix s2rt)" && pwd)
    libdir=$(pkg-config --variable=libdir s2rt)
    export LD_LIBRARY_PATH=$libdir CMAKE_PREFIX_PATH=$prefix
    src=$root/examples/installed
    meson setup "$work/cubin-meson" "$src/cubin-meson" >/dev/null && ninja -C "$work/cubin-meson" >/dev/null
    meson setup "$work/jit-meson" "$src/jit-meson" >/dev/null && ninja -C "$work/jit-meson" >/dev/null
    "$prefix/bin/s2c" compile "$src/cubin-meson/model.yaml" --head-dim 64 --dtype bf16 --arch sm_80 --arch sm_90a \
        -o "$work/embed.cubin" --quiet
    cmake -S "$src/embed-cmake" -B "$work/embed-cmake" >/dev/null && cmake --build "$work/embed-cmake" >/dev/null
    meson setup "$work/aot-sparse" "$src/aot-sparse" -Dtoolkit_dir="${CUDA_HOME:-/usr/local/cuda}" >/dev/null \
        && ninja -C "$work/aot-sparse" >/dev/null
    strip --strip-unneeded "$libdir"/libs2c.so.*.*.* "$libdir"/libs2rt.so.*.*.* "$prefix/bin/s2c"
    rm -f "$libdir"/*.a
    # the programs and what they read, at paths relative to $work
    (cd "$work" && tar -cJf "$out/installed.tar.xz" dest cubin-meson/cubin-demo cubin-meson/model.cubin \
        jit-meson/jit-at-load embed.sm_80.cubin embed.sm_90a.cubin embed-cmake/embed-cubin aot-sparse/aot-sparse \
        && echo "$work" >"$out/installed.prefix")
    ls -la "$out/installed.tar.xz"
elif [ "$cmd" = run ] && [ $# -eq 2 ]; then
    out=$(realpath "$2")
    old=$(cat "$out/installed.prefix")
    work=$(mktemp -d)
    tar -xJf "$out/installed.tar.xz" -C "$work"
    # the prefix is relocatable; the programs find the libraries by LD_LIBRARY_PATH
    libdir=$(dirname "$(find "$work/dest" -name 'libs2rt.so.*' -print -quit)")
    bin=$(dirname "$(find "$work/dest" -name s2c -type f -print -quit)")
    export LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} PATH=$bin:$PATH
    root=$(cd "$(dirname "$0")/.." && pwd)
    fails=0
    run() {
        local name=$1 rc
        shift
        echo "== $name: $*"
        (cd "$work" && "$@") && rc=0 || rc=$?
        case $rc in 0) r=PASS ;; 77) r=SKIP ;; *) r="FAIL (exit $rc)"; fails=$((fails + 1)) ;; esac
        echo "$name: $r"
    }
    run cubin-meson ./cubin-meson/cubin-demo cubin-meson/model.cubin
    run jit-meson ./jit-meson/jit-at-load "$root/examples/installed/jit-meson/layer.yaml"
    run embed-cmake-multiarch ./embed-cmake/embed-cubin embed.sm_80.cubin embed.sm_90a.cubin masked
    run aot-sparse ./aot-sparse/aot-sparse
    echo "(built at $old; $fails failed)"
    rm -rf "$work"
    [ $fails -eq 0 ]
else
    sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi
