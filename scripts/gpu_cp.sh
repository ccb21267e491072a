#!/usr/bin/env bash
# The context-parallel executor's two-GPU runs, from a bundle made by
# scripts/gpu_bundle.sh, on a machine with (at least) two GPUs:
#
#   scripts/gpu_cp.sh BUNDLE_DIR        (in the source tree the bundle was built from)
#
# Steps: the two-GPU test (forward and gradients against the single-GPU
# kernels, both shardings, bitwise-deterministic backward), the same under
# compute-sanitizer's memcheck (NCCL's own probing API errors at init not reported),
# and examples/cp at 64K tokens (correctness, the executor's bytes against the
# plan's and ring attention's, times against one GPU, the timeline).  Every command runs with NCCL_NVLS_ENABLE=0:
# never NVLink SHARP / multicast.  Logs in ${OUT:-out-cp}/.  Exits 0 when
# every step passed or skipped itself (77).
set -uo pipefail
export NCCL_NVLS_ENABLE=0

[ $# -ge 1 ] || { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2; }
bundle=$(realpath "$1")
out=$(realpath -m "${OUT:-out-cp}")
cd "$(dirname "$0")/.." || exit 2
[ -f "$bundle/s2c-gpu.xz" ] || { echo "gpu_cp: no s2c-gpu.xz in $bundle" >&2; exit 2; }
bin=/tmp/s2c-gpu-cp-$(id -u)
rm -rf "$bin" && mkdir -p "$bin" "$out"
xz -dc "$bundle/s2c-gpu.xz" >"$bin/s2c-gpu" && chmod +x "$bin/s2c-gpu" || exit 1
for p in test_cp_gpu cp_example; do
    ln "$bin/s2c-gpu" "$bin/$p" 2>/dev/null || ln -s s2c-gpu "$bin/$p"
done
export S2C_PATTERNS=$PWD/patterns S2C_TEST_DATA=$PWD/tests/data
export PATH=$bin:$PATH:${CUDA_HOME:-/usr/local/cuda}/bin
nvidia-smi --query-gpu=index,name --format=csv,noheader 2>&1 || true

fail=0
step() {   # name timeout command...
    local name=$1 tmo=$2
    shift 2
    local t0=$SECONDS
    env NCCL_NVLS_ENABLE=0 timeout "$tmo" "$@" >"$out/$name.log" 2>&1
    local rc=$?
    printf '%-16s rc %3d %4ss  %s\n' "$name" "$rc" $((SECONDS - t0)) "$(grep -aE 'PASS$|FAIL$|SKIP|ERROR SUMMARY' "$out/$name.log" | tail -1)"
    [ $rc = 0 ] || [ $rc = 77 ] || fail=1
}
step cp_gpu          180 test_cp_gpu
step memcheck_cp     600 compute-sanitizer --tool memcheck --report-api-errors no --target-processes all --error-exitcode 1 test_cp_gpu
step example_cp      300 cp_example --seq 65536 --reps 10
exit $fail
