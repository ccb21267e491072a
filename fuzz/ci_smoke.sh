#!/bin/sh
# CI: each libFuzzer harness (pattern, manifest, elf) built and run briefly from its corpus
# (fuzz/run.sh smoke): one line per fuzzer with its executions; exit 1 when one fails to build,
# crashes, leaks, trips a sanitizer or a harness check.  Without a clang that has libFuzzer the
# fuzzers are skipped (exit 0): the CPU suite still replays every corpus (tests pattern, elf,
# manifest-fuzz).
#   fuzz/ci_smoke.sh [SECONDS]   per fuzzer, default 20
set -u
here=$(cd "$(dirname "$0")" && pwd)
secs=${1:-20}
if [ -z "${CC:-}" ]; then
    if command -v clang-22 >/dev/null 2>&1; then CC=clang-22; else CC=clang; fi
fi
export CC
probe=$(mktemp -d)
printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }\n' \
    >"$probe/p.c"
if ! command -v "$CC" >/dev/null 2>&1 || ! "$CC" -fsanitize=fuzzer "$probe/p.c" -o "$probe/p" >/dev/null 2>&1; then
    echo "fuzz: skipped ($CC with -fsanitize=fuzzer not available; the corpora are replayed by the CPU suite)"
    rm -rf "$probe"
    exit 0
fi
rm -rf "$probe"
status=0
for target in pattern manifest elf; do
    log=$(mktemp)
    if "$here/run.sh" smoke "$target" "$secs" >"$log" 2>&1; then
        tail -n 1 "$log"
    else
        # the build's or the run's own report
        tail -n 20 "$log"
        echo "fuzz $target: FAILED"
        status=1
    fi
    rm -f "$log"
done
exit $status
