#!/bin/sh
# Build one libFuzzer harness (no Meson needed) and run it.
#   fuzz/run.sh [TARGET] [SECONDS] [JOBS]   TARGET pattern (default) | elf | manifest; 60 s, 1 job
#   fuzz/run.sh merge [TARGET]              add the target's new inputs that add coverage to its corpus
#   fuzz/run.sh smoke TARGET [SECONDS]      one process, a scratch directory for new inputs and crashes;
#                                           prints "fuzz TARGET: N executions in S s, ..." and exits 0 or 1
# CC: clang-22 when installed, else clang (any clang with libFuzzer).
#   target    harness                corpus (replayed by the CPU tests)  crashers
#   pattern   fuzz_pattern.c         fuzz/corpus                         fuzz/crashers
#   elf       fuzz_elf.c             tests/data/elf/fuzz                 fuzz/crashers-elf
#   manifest  fuzz_manifest.c        fuzz/corpus-manifest                fuzz/crashers-manifest
# New inputs collect in build-fuzz/new-TARGET (merge them back with `merge`); libFuzzer's
# output (with -print_final_stats) is in build-fuzz/fuzz-0.log.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
out=${S2C_FUZZ_BUILD:-$root/build-fuzz}
cuda=${CUDA_HOME:-/usr/local/cuda}
if [ -z "${CC:-}" ]; then
    if command -v clang-22 >/dev/null 2>&1; then CC=clang-22; else CC=clang; fi
fi
cc=$CC

mode=run
case "${1:-}" in merge|smoke) mode=$1; shift ;; esac
target=pattern
case "${1:-}" in
    pattern|elf|manifest) target=$1; shift ;;
    ''|[0-9]*) ;;
    *) echo "usage: $0 [merge|smoke] [pattern|elf|manifest] [SECONDS] [JOBS]" >&2; exit 2 ;;
esac
case $target in
    pattern) corpus=$here/corpus; crashers=$here/crashers; max_len=4096 ;;
    elf) corpus=$root/tests/data/elf/fuzz; crashers=$here/crashers-elf; max_len=8192 ;;
    manifest) corpus=$here/corpus-manifest; crashers=$here/crashers-manifest; max_len=16384 ;;
esac
mkdir -p "$out" "$crashers" "$corpus"
# s2c/version.h, as meson.build's configure_file makes it (the version from project())
ver=$(sed -n "s/^ *version *: *'\([0-9.]*\)'.*/\1/p" "$root/meson.build" | head -1)
mkdir -p "$out/include/s2c"
sed -e "s/@MAJOR@/${ver%%.*}/; s/@MINOR@/$(echo "$ver" | cut -d. -f2)/; s/@PATCH@/${ver##*.}/; s/@VERSION@/$ver/" \
    "$root/include/s2c/version.h.in" > "$out/include/s2c/version.h"
flags="-g -O1 -std=c11 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -I$out/include"
c=$root/common
case $target in
pattern)
    $cc $flags -I"$root/include" -I"$c" -I"$root/patterns" \
        "$here/fuzz_pattern.c" "$root"/patterns/parse.c "$root"/patterns/parse_tree.c \
        "$root"/patterns/parse_value.c "$root"/patterns/parse_rules.c "$root"/patterns/mask_file.c \
        "$root"/patterns/resolve.c "$root"/patterns/describe.c \
        "$c"/ctx.c "$c"/arena.c "$c"/file.c "$c"/suggest.c \
        -lyaml -o "$out/fuzz_pattern" ;;
elf)
    $cc $flags -I"$root/include" -I"$c" -I"$root/abi" \
        "$here/fuzz_elf.c" "$c"/elf.c "$root"/abi/manifest_parse.c "$root"/abi/manifest_pattern.c "$root"/abi/abi.c "$root"/abi/arch.c \
        "$c"/ctx.c "$c"/arena.c "$c"/file.c "$c"/dtype.c "$c"/half.c -lm -o "$out/fuzz_elf" ;;
manifest)
    # the fake driver is not instrumented: it is the device, not the code under test
    $cc -g -O1 -std=c11 -D_GNU_SOURCE -shared -fPIC -I"$cuda/include" \
        "$root/tests/runtime/fake_cuda.c" -o "$out/libfakecuda.so"
    $cc $flags -I"$root/include" -I"$c" -I"$root/abi" -I"$root/ir" -I"$root/patterns" -I"$root/runtime" \
        -I"$cuda/include" \
        "$here/fuzz_manifest.c" "$here/manifest_pipeline.c" "$root"/abi/*.c "$root"/ir/*.c "$root"/runtime/*.c \
        "$root"/patterns/describe.c "$root"/patterns/resolve.c \
        "$c"/ctx.c "$c"/arena.c "$c"/file.c "$c"/half.c "$c"/dtype.c "$c"/elf.c "$c"/sha256.c "$c"/dl.c \
        -ldl -lpthread -lm -o "$out/fuzz_manifest" ;;
esac
bin=$out/fuzz_$target
new=$out/new-$target
if [ $mode = merge ]; then
    # adds the new inputs that cover something the corpus does not; keeps the corpus's own files
    mkdir -p "$new"
    "$bin" -merge=1 -max_len=$max_len "$corpus" "$new"
    exit 0
fi
secs=${1:-60}
jobs=${2:-1}
if [ $mode = smoke ]; then
    # the tree stays as it is: new inputs and any crash go to a scratch directory
    scratch=$(mktemp -d "$out/smoke-$target.XXXXXX")
    mkdir -p "$scratch/new" "$scratch/crash"
    log=$scratch/log
    rc=0
    (cd "$out" && "$bin" -max_total_time="$secs" -max_len=$max_len -timeout=10 -rss_limit_mb=2048 \
        -artifact_prefix="$scratch/crash/" -print_final_stats=1 "$scratch/new" "$corpus") >"$log" 2>&1 || rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    crashes=$(find "$scratch/crash" -type f | wc -l)
    if [ $rc -eq 0 ] && [ "$crashes" -eq 0 ] && [ -n "$execs" ]; then
        echo "fuzz $target: ${execs} executions in ${secs} s, no crash"
        rm -rf "$scratch"
        exit 0
    fi
    echo "fuzz $target: FAILED (exit $rc, ${execs:-?} executions, $crashes crash inputs in $scratch/crash; log $log)"
    grep -m 5 -E 'ERROR|SUMMARY|fuzz_manifest:|runtime error' "$log" | sed 's/^/    /'
    exit 1
fi
mkdir -p "$new"
cd "$out"   # relative mask paths in pattern inputs resolve here, not in the source tree
exec "$bin" -max_total_time="$secs" -max_len=$max_len -timeout=10 -rss_limit_mb=2048 \
    -jobs="$jobs" -workers="$jobs" -artifact_prefix="$crashers/" \
    -print_final_stats=1 "$new" "$corpus"
