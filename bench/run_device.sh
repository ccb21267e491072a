#!/usr/bin/env bash
# Run on the GPU machine from a folder holding bench_fwd.gz (and optionally
# test_fwd_gpu.gz): unpack, run the benchmark with the given arguments
# (default: every configuration, heuristic spec), disassemble the dumped
# cubins and summarise their SASS.  Results go to $OUT (or ./out).
#   bench/run_device.sh DIR [bench_fwd args...]
set -uo pipefail
dir=$1; shift
out=${OUT:-out}; mkdir -p "$out"
cd "$dir" || exit 1
for f in *.gz; do gunzip -kf "$f"; done
chmod +x bench_fwd test_fwd_gpu 2>/dev/null
export PATH=$PATH:/usr/local/cuda/bin
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader
mkdir -p /tmp/cubins
./bench_fwd --dump-dir /tmp/cubins "$@" 2>&1 | tee -a "$out/bench.txt"
# SASS summary: instruction counts that say whether the kernel is on the path we meant
for c in /tmp/cubins/*.cubin; do
    [ -f "$c" ] || continue
    s=/tmp/cubins/$(basename "$c" .cubin).sass
    cuobjdump -sass "$c" > "$s" 2>/dev/null
    printf '%-40s HGMMA %4d HMMA %4d LDSM %4d LDGSTS %4d LDL %3d STL %3d MUFU.EX2 %4d BAR %3d SHFL %4d FSEL %4d\n' \
        "$(basename "$c" .cubin)" "$(grep -c "HGMMA" "$s")" "$(grep -c "HMMA" "$s")" "$(grep -c 'LDSM' "$s")" "$(grep -c 'LDGSTS' "$s")" \
        "$(grep -c 'LDL' "$s")" "$(grep -c 'STL' "$s")" "$(grep -c 'MUFU.EX2' "$s")" "$(grep -c 'BAR' "$s")" \
        "$(grep -c 'SHFL' "$s")" "$(grep -c 'FSEL' "$s")" | tee -a "$out/sass_summary.txt"
done
