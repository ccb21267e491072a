#!/bin/sh
# Build the pattern-parser fuzzer with clang-22 (no Meson needed) and run it.
#   fuzz/run.sh [SECONDS] [JOBS]      default 60 s, 1 job
# New crash inputs land in fuzz/crashers/; the corpus grows in fuzz/corpus.new/
# (merge it back with: fuzz/run.sh merge).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
out=${S2C_FUZZ_BUILD:-$root/build-fuzz}
cc=${CC:-clang-22}
mkdir -p "$out" "$here/crashers" "$here/corpus"
flags="-g -O1 -std=c11 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all"
$cc $flags -I"$root/include" -I"$root/common" -I"$root/patterns" \
    "$here/fuzz_pattern.c" "$root"/patterns/parse.c "$root"/patterns/parse_tree.c \
    "$root"/patterns/parse_value.c "$root"/patterns/parse_rules.c "$root"/patterns/mask_file.c \
    "$root"/patterns/resolve.c "$root"/patterns/describe.c \
    "$root"/common/ctx.c "$root"/common/arena.c "$root"/common/file.c \
    -lyaml -o "$out/fuzz_pattern"
if [ "${1:-}" = merge ]; then
    rm -rf "$here/corpus.min" && mkdir "$here/corpus.min"
    "$out/fuzz_pattern" -merge=1 "$here/corpus.min" "$here/corpus" "$here/corpus.new"
    rm -rf "$here/corpus" && mv "$here/corpus.min" "$here/corpus"
    exit 0
fi
secs=${1:-60}
jobs=${2:-1}
mkdir -p "$here/corpus.new"
cd "$out"   # relative mask paths in inputs resolve here, not in the source tree
exec "$out/fuzz_pattern" -max_total_time="$secs" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
    -jobs="$jobs" -workers="$jobs" -artifact_prefix="$here/crashers/" \
    -print_final_stats=1 "$here/corpus.new" "$here/corpus"
