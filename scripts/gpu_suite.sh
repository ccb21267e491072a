#!/usr/bin/env bash
# Run the GPU tests, the compute-sanitizer runs and the benches from a bundle
# made by scripts/gpu_bundle.sh, on a machine with a GPU and the CUDA driver
# (LLVM and meson are not needed; the toolkit's ptxas and compute-sanitizer
# are used from PATH or $CUDA_HOME/bin):
#
#   scripts/gpu_suite.sh BUNDLE_DIR [STEP...]
#
# Run it in the source tree the bundle was built from: the tests read
# patterns/, tests/data/, tests/cli/golden/ and tests/runtime/data/ there, as
# `meson test` points them to.  STEP names a step of the table below (shell
# patterns work: 'memcheck_*'); the default is every step, in order.
#
#   OUT=DIR               logs and summary (default ./out): DIR/logs/STEP.log,
#                         DIR/logs.tgz (packed after each step and at exit,
#                         also when interrupted), DIR/summary.txt
#   S2C_SUITE_BUDGET=S    seconds for the whole run (default 560, 0: none); a
#                         step's timeout is cut to what is left, and a step
#                         with less than a third of its timeout left is skipped
#   S2C_SEED=N            passed on to the tests (they print the seed they use)
#   S2C_SUITE_BIN=DIR     where the programs are unpacked (default /tmp/s2c-gpu-UID;
#                         give each of several runs at once its own)
#
# Exits 0 when every step that ran passed or skipped itself (77), else 1.
set -uo pipefail

# shellcheck disable=SC2016  # expanded by the step's shell
# name               timeout  command (run by bash with the programs on PATH)
# The timeouts are about 3 times what the step took on an H200 (every step
# together: about 5 minutes), so that the default budget runs them all.
STEPS='
paged_example              60  S2C_SEED=1 paged --len 700 --page 32
codegen_gpu                60  test_codegen_gpu
runtime_gpu                60  test_runtime_gpu
fwd_gpu                   300  test_fwd_gpu
fwd_gpu_sm80              270  S2C_FWD_ARCH=sm_80 test_fwd_gpu
fwd_gpu_hdim_sm80         150  S2C_FWD_ARCH=sm_80 S2C_FWD_CASES=hdim_ test_fwd_gpu
fwd_gpu_persistent        270  S2C_FWD_PERSISTENT=1 test_fwd_gpu
bwd_gpu                   300  test_bwd_gpu
fwd_gpu_f32                60  S2C_FWD_CASES=_f32 test_fwd_gpu
fwd_gpu_f32_sm80           60  S2C_FWD_ARCH=sm_80 S2C_FWD_CASES=_f32 test_fwd_gpu
attnrt_gpu                 90  test_attn_gpu
varlen_gpu                 90  test_varlen_gpu
fwd_fp8_gpu               180  test_fwd_fp8_gpu
varlen_bwd_gpu            150  test_varlen_bwd_gpu
seams_gpu                  90  test_seams_gpu
rows_gpu                   90  test_rows_gpu
cp_gpu                    180  NCCL_NVLS_ENABLE=0 test_cp_gpu
graph_gpu                 150  test_graph_gpu
patterns_gpu              180  test_patterns_gpu
decode_gpu                240  test_decode_gpu
decode_fp8_gpu             90  test_decode_fp8_gpu
aot_gpu                   120  test_aot_gpu
paged_gpu                 300  test_paged_gpu
example_embed              60  embed "$S2C_BUNDLE/data/examples/embed"
example_jit                60  jit examples/jit/layer.yaml
example_train              90  train examples/train/train.yaml
example_cp                180  NCCL_NVLS_ENABLE=0 cp_example --seq 16384 --reps 3
memcheck_codegen           60  compute-sanitizer --tool memcheck --error-exitcode 1 test_codegen_gpu
racecheck_codegen          60  compute-sanitizer --tool racecheck --error-exitcode 1 test_codegen_gpu
memcheck_runtime           60  CK_FORK=no compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 1 test_runtime_gpu
memcheck_fwd              120  S2C_FWD_CASES=d64 compute-sanitizer --tool memcheck --error-exitcode 1 test_fwd_gpu
racecheck_fwd              60  S2C_FWD_CASES=d32 compute-sanitizer --tool racecheck --error-exitcode 1 test_fwd_gpu
memcheck_fwd_sm80          120  S2C_FWD_ARCH=sm_80 S2C_FWD_CASES=d64 compute-sanitizer --tool memcheck --error-exitcode 1 test_fwd_gpu
racecheck_fwd_sm80          60  S2C_FWD_ARCH=sm_80 S2C_FWD_CASES=d32 compute-sanitizer --tool racecheck --error-exitcode 1 test_fwd_gpu
memcheck_fwd_hdim_sm80    150  S2C_FWD_ARCH=sm_80 S2C_FWD_CASES=_d80_ compute-sanitizer --tool memcheck --error-exitcode 1 test_fwd_gpu
memcheck_fwd_f32           90  S2C_FWD_CASES=d64_f32 compute-sanitizer --tool memcheck --error-exitcode 1 test_fwd_gpu
racecheck_fwd_f32          90  S2C_FWD_CASES=d32_f32 compute-sanitizer --tool racecheck --error-exitcode 1 test_fwd_gpu
memcheck_fwd_dense         90  S2C_FWD_CASES=dense64_d128 compute-sanitizer --tool memcheck --error-exitcode 1 test_fwd_gpu
racecheck_fwd_dense        90  S2C_FWD_CASES=dense64_d128 compute-sanitizer --tool racecheck --error-exitcode 1 test_fwd_gpu
memcheck_fwd_d256         120  S2C_FWD_CASES=_d256_ compute-sanitizer --tool memcheck --error-exitcode 1 test_fwd_gpu
racecheck_fwd_d256        150  S2C_FWD_CASES=hdim_gqa32_8_b32_d256 compute-sanitizer --tool racecheck --error-exitcode 1 test_fwd_gpu
memcheck_fwd_persistent_d256 120  S2C_FWD_PERSISTENT=1 S2C_FWD_CASES=_d256_ compute-sanitizer --tool memcheck --error-exitcode 1 test_fwd_gpu
fwd_gpu_persistent_d80    90  S2C_FWD_PERSISTENT=1 S2C_FWD_CASES=_d80 test_fwd_gpu
memcheck_fwd_persistent   120  S2C_FWD_PERSISTENT=1 S2C_FWD_CASES=mergeq16_d64_f16_g4 compute-sanitizer --tool memcheck --error-exitcode 1 test_fwd_gpu
memcheck_fwd_wide         120  S2C_FWD_PERSISTENT=1 S2C_FWD_CASES=_wide compute-sanitizer --tool memcheck --error-exitcode 1 test_fwd_gpu
racecheck_fwd_wide        150  S2C_FWD_PERSISTENT=1 S2C_FWD_CASES=_wide compute-sanitizer --tool racecheck --error-exitcode 1 test_fwd_gpu
memcheck_bwd               90  S2C_BWD_CASES=d64_f16 compute-sanitizer --tool memcheck --error-exitcode 1 test_bwd_gpu
racecheck_bwd             240  S2C_BWD_CASES=16_d compute-sanitizer --tool racecheck --error-exitcode 1 test_bwd_gpu
racecheck_bwd_ds           90  S2C_BWD_CASES=causal64_d64 compute-sanitizer --tool racecheck --error-exitcode 1 test_bwd_gpu
memcheck_varlen_bwd       240  S2C_VLBWD_CASES=packed_causal_bf16_d64 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 1 test_varlen_bwd_gpu
memcheck_bwd_rt           120  S2C_BWD_CASES=runtime_ compute-sanitizer --tool memcheck --error-exitcode 1 test_bwd_gpu
memcheck_bwd_hd_mma       150  S2C_BWD_CASES=hd80_causal64 compute-sanitizer --tool memcheck --error-exitcode 1 test_bwd_gpu
memcheck_bwd_hd_wg        240  S2C_BWD_CASES=hd256_gqa8_2_b64 compute-sanitizer --tool memcheck --error-exitcode 1 test_bwd_gpu
memcheck_bwd_hd_rt        240  S2C_BWD_CASES=hd256_rt compute-sanitizer --tool memcheck --error-exitcode 1 test_bwd_gpu
racecheck_bwd_hd          300  S2C_BWD_CASES=hd192_rt compute-sanitizer --tool racecheck --error-exitcode 1 test_bwd_gpu
memcheck_fwd_fp8          180  S2C_FP8_CASES=causal64_d128_b2 compute-sanitizer --tool memcheck --error-exitcode 1 test_fwd_fp8_gpu
racecheck_fwd_fp8         240  S2C_FP8_CASES=mergeq16_d128 compute-sanitizer --tool racecheck --error-exitcode 1 test_fwd_fp8_gpu
memcheck_seams            120  compute-sanitizer --tool memcheck --error-exitcode 1 test_seams_gpu
memcheck_rows             120  compute-sanitizer --tool memcheck --error-exitcode 1 test_rows_gpu
memcheck_attnrt            90  compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 1 test_attn_gpu
memcheck_decode            90  S2C_DECODE_SMALL=1 compute-sanitizer --tool memcheck --error-exitcode 1 test_decode_gpu
memcheck_decode_hd        150  S2C_DECODE_CASES=hd144 compute-sanitizer --tool memcheck --error-exitcode 1 test_decode_gpu
memcheck_decode_fp8        90  S2C_DECODE_SMALL=1 compute-sanitizer --tool memcheck --error-exitcode 1 test_decode_fp8_gpu
racecheck_decode_fp8      150  S2C_DECODE_CASES=dense2 compute-sanitizer --tool racecheck --error-exitcode 1 test_decode_fp8_gpu
memcheck_decode_fp8_d256  120  S2C_DECODE_CASES=d256 compute-sanitizer --tool memcheck --error-exitcode 1 test_decode_fp8_gpu
memcheck_concurrency      180  S2C_GRAPH_CASES=concurrency compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 1 test_graph_gpu
memcheck_graph           120  S2C_GRAPH_CASES=varlen,backward,decode S2C_GRAPH_REPLAYS=3 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 1 test_graph_gpu
bench_fwd                 120  bench_fwd --reps 30 --rows 12 --config b64_8k,mergeq16_8k,b64_32k,b64_128k,b64_l16v8_16k,dense_8k
bench_fwd_fp8             150  bench_fwd --reps 30 --rows 4 --config b64_32k,b64_128k --dtype e4m3
bench_fwd_hdim            120  bench_fwd --reps 30 --rows 4 --config b64_32k --head-dim 64,192,256
bench_bwd                 150  bench_bwd --reps 30
bench_bwd_d256             90  bench_bwd --reps 30 --config d256_b64_32k
bench_varlen_bwd           90  bench_varlen_bwd --reps 30
bench_decode               60  bench_decode --reps 30
bench_decode_fp8           90  bench_decode --reps 30 --rows 1,2,4 --kv-dtype bf16,e4m3
bench_launch               60  bench_launch
bench_graph_decode        120  bench_graph_decode
bench_graph_decode_split  120  bench_graph_decode --splits 4
'

if [ $# -lt 1 ] || [ "$1" = "-h" ] || [ "$1" = "--help" ]; then
    sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'
    echo "steps:"
    while read -r n t c; do
        [ -z "$n" ] || printf '  %-20s %4ss  %s\n' "$n" "$t" "$c"
    done <<<"$STEPS"
    exit 2
fi
bundle=$(realpath "$1")
shift
out=$(realpath -m "${OUT:-out}")
budget=${S2C_SUITE_BUDGET:-560}
cd "$(dirname "$0")/.." || exit 2
root=$(pwd)
if [ ! -f "$bundle/s2c-gpu.xz" ]; then
    echo "gpu_suite: no s2c-gpu.xz in $bundle (made by scripts/gpu_bundle.sh)" >&2
    exit 2
fi

# the steps to run
names=() tmos=() cmds=()
while read -r name tmo cmd; do
    [ -n "$name" ] || continue
    if [ $# -gt 0 ]; then
        want=0
        for a in "$@"; do
            # shellcheck disable=SC2053  # a pattern on purpose
            [[ $name == $a ]] && want=1
        done
        [ $want = 1 ] || continue
    fi
    names+=("$name") tmos+=("$tmo") cmds+=("$cmd")
done <<<"$STEPS"
for a in "$@"; do
    found=0
    for n in "${names[@]}"; do
        # shellcheck disable=SC2053
        [[ $n == $a ]] && found=1
    done
    if [ $found = 0 ]; then
        echo "gpu_suite: no step matches '$a' (see $0 --help)" >&2
        exit 2
    fi
done

nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 || echo "nvidia-smi failed"

# the programs: links to one executable, in /tmp
bin=${S2C_SUITE_BIN:-/tmp/s2c-gpu-$(id -u)}
rm -rf "$bin"
mkdir -p "$bin"
xz -dc "$bundle/s2c-gpu.xz" >"$bin/s2c-gpu" && chmod +x "$bin/s2c-gpu" || exit 1
programs=$("$bin/s2c-gpu" --list) || exit 1
# hard links (symbolic ones where that fails): the name survives tools that
# resolve links before they run a program
for p in $programs; do
    ln "$bin/s2c-gpu" "$bin/$p" 2>/dev/null || ln -s s2c-gpu "$bin/$p"
done
sed -n 's/^commit: /bundle of /p' "$bundle/programs.txt" 2>/dev/null
for p in $programs; do
    printf '%s\n' "${cmds[@]}" | grep -qw -- "$p" || [ $# -gt 0 ] || echo "note: no step runs $p"
done

# what `meson test` sets (tests/meson.build), pointing into this tree
export S2C_PATTERNS=$root/patterns
export S2C_GOLDEN=$root/tests/data/s2_golden_masks.txt
export S2C_TEST_DATA=$root/tests/data
export S2C_GOLDEN_PATTERNS=$root/tests/cli/golden
export S2C_RUNTIME_DATA=$root/tests/runtime/data
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export S2C_BUNDLE=$bundle
export PATH=$bin:$PATH:${CUDA_HOME:-/usr/local/cuda}/bin

logs=$out/logs
rm -rf "$logs" "$out/logs.tgz" "$out/summary.txt"
mkdir -p "$logs"

r_name=() r_rc=() r_secs=() r_last=()
running_pid='' running_name='' running_t0=0
t_start=$SECONDS

# The line that says how a step went: a sanitizer's summary, Check's
# "N%: Checks: ...", a program's own count, a skip; else the last line.
last_line() {
    local l='' re
    for re in 'ERROR SUMMARY|RACECHECK SUMMARY' '[0-9]+%: Checks: ' \
              '[0-9]+ cases|failure\(s\)|[0-9]+/[0-9]+ (checks|cases|pass)|passed' 'skipped'; do
        l=$(grep -aE -- "$re" "$1" 2>/dev/null | tail -1)
        [ -n "$l" ] && break
    done
    [ -n "$l" ] || l=$(grep -av '^[[:space:]]*$' "$1" 2>/dev/null | tail -1)
    l=${l#========= }
    l=$(printf '%s' "$l" | tr -s ' \t' ' ' | sed 's/^ //')
    printf '%.90s' "$l"
}

summary() {
    local i pass=0 fail=0 skip=0 status
    printf '%-20s %6s %6s  %s\n' step rc secs result
    for i in "${!r_name[@]}"; do
        printf '%-20s %6s %6s  %s\n' "${r_name[$i]}" "${r_rc[$i]}" "${r_secs[$i]}" "${r_last[$i]}"
        case ${r_rc[$i]} in
            0) case ${r_last[$i]} in
                   *skipped*) skip=$((skip + 1)) ;; # the benches without a GPU
                   *) pass=$((pass + 1)) ;;
               esac ;;
            77 | -) skip=$((skip + 1)) ;;
            *) fail=$((fail + 1)) ;;
        esac
    done
    status=$([ $fail = 0 ] && echo OK || echo FAILED)
    printf '%s: %d passed, %d failed, %d skipped, %d s\n' "$status" $pass $fail $skip $((SECONDS - t_start))
}

save() {
    summary >"$out/summary.txt"
    tar -czf "$out/logs.tgz.tmp" -C "$out" logs summary.txt 2>/dev/null && mv -f "$out/logs.tgz.tmp" "$out/logs.tgz"
}

record() { # name rc secs last
    r_name+=("$1") r_rc+=("$2") r_secs+=("$3") r_last+=("$4")
}

interrupted=''
finish() {
    trap - EXIT INT TERM HUP
    if [ -n "$running_pid" ]; then
        kill -TERM "$running_pid" 2>/dev/null
        wait "$running_pid" 2>/dev/null
        record "$running_name" killed $((SECONDS - running_t0)) "interrupted: $(last_line "$logs/$running_name.log")"
    fi
    save
    echo
    cat "$out/summary.txt"
    local failed=0
    for r in "${r_rc[@]}"; do
        case $r in 0 | 77 | -) ;; *) failed=1 ;; esac
    done
    [ -n "$interrupted" ] && exit "$interrupted"
    exit $failed
}
trap finish EXIT
trap 'interrupted=129; exit' HUP
trap 'interrupted=130; exit' INT
trap 'interrupted=143; exit' TERM

for i in "${!names[@]}"; do
    name=${names[$i]} tmo=${tmos[$i]} cmd=${cmds[$i]}
    elapsed=$((SECONDS - t_start))
    # a step runs when at least a third of its timeout is left (the
    # timeouts are ~3x the usual time), cut to what is left
    if [ "$budget" -gt 0 ]; then
        left=$((budget - elapsed))
        if [ $((3 * left)) -lt "$tmo" ]; then
            record "$name" - 0 "not run: ${left}s left of the budget ${budget}s, timeout ${tmo}s"
            printf '[%4ds] %-20s skipped (budget)\n' "$elapsed" "$name"
            continue
        fi
        [ "$tmo" -le "$left" ] || tmo=$left
    fi
    log=$logs/$name.log
    printf '$ %s\n' "$cmd" >"$log"
    running_name=$name running_t0=$SECONDS
    # in the background, so that a signal reaches the trap at once
    timeout -k 10 "$tmo" bash -c "$cmd" >>"$log" 2>&1 </dev/null &
    running_pid=$!
    wait "$running_pid"
    rc=$?
    running_pid=''
    secs=$((SECONDS - running_t0))
    last=$(last_line "$log")
    case $rc in
        124 | 137) last="TIMEOUT after ${tmo}s: $last" ;;
    esac
    echo "exit $rc after ${secs}s" >>"$log"
    record "$name" "$rc" "$secs" "$last"
    printf '[%4ds] %-20s rc %-3s %4ds  %s\n' "$elapsed" "$name" "$rc" "$secs" "$last"
    save
done
