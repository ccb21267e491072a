#!/usr/bin/env bash
# On a GPU machine with torch: install the wheel from WHEEL_DIR (scripts/wheel.sh)
# with pip, check that the installed package runs a kernel on its own, then run
# the package's GPU tests and the given bench commands.
#
#   scripts/gpu_python.sh WHEEL_DIR [BENCH_CMD...]
#
# OUT=DIR gets pytest's log and the benches' output (default ./out).
set -uo pipefail
cd "$(dirname "$0")/.."
wheels=$1
shift
out=${OUT:-out}
mkdir -p "$out"
site=/tmp/s2c-site
rm -rf "$site"
python3 -m pip install -q --no-index --no-deps --target "$site" "$wheels"/s2c-*.whl || exit 1
export S2C_CACHE_DIR=${S2C_CACHE_DIR:-/tmp/s2c-cache} PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0   # the context-parallel tests and benches: never NVLink multicast
status=0

echo "== the installed wheel, alone (no S2C_LIBDIR, no tree)"
(cd /tmp && env -u S2C_LIBDIR PYTHONPATH="$site" python3 - <<'PY'
import torch, s2c
p = s2c.Pattern.local_stride(4, 64, 2, 4)
q = torch.randn(1, 256, 4, 64, device="cuda", dtype=torch.bfloat16)
o = s2c.sparse_attn_func(q, q, q, p)
print("wheel:", s2c.__file__, "lib", s2c.lib_version(), "out", tuple(o.shape), "finite", bool(o.isfinite().all()))
PY
) || status=1

echo "== python/tests on the GPU"
export S2C_LIBDIR=$site/s2c/_libs
python3 -m pytest -q -p no:cacheprovider -rs python/tests 2>&1 | tee "$out/pytest.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

for cmd in "$@"; do
    echo "== $cmd"
    bash -c "$cmd" 2>&1 | tee -a "$out/bench.log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
done
exit $status
