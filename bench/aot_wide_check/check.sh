#!/usr/bin/env bash
# A GPU check of the AOT launcher of a forward's persistent wide variant (NAME_w):
#   bench/aot_wide_check/check.sh BUILD_DIR OUT_DIR     on a machine with the build (LLVM, ptxas or nvJitLink):
#     writes OUT_DIR/attn.{c,h} (s2c compile pat.yaml --emit c), the inputs, the owned-pairs schedule, the
#     work list and the float64 reference (gen.c, linked with the build's static libraries);
#   then on the GPU machine, in OUT_DIR with run.c:
#     gcc -std=c11 -O2 -I/usr/local/cuda/include run.c attn.c -o runaot -L/usr/local/cuda/lib64/stubs -lcuda -lm
#     ./runaot        (prints the errors against the reference and PASS/FAIL; bench/RESULTS.md run 72)
set -eu
b=$(cd "$1" && pwd)
mkdir -p "$2"
here=$(cd "$(dirname "$0")" && pwd)
cp "$here/run.c" "$2/"
cd "$2"
cc -std=c11 -O2 -I"$here/../../include" -I"$here/../../ir" "$here/gen.c" -o gen "$b/ref/libs2ref.a" "$b/ir/libs2ir.a" \
   "$b/patterns/libs2patterns.a" "$b/common/libs2common.a" -lm -lpthread
./gen
"$b/tools/s2c" compile "$here/pat.yaml" --name aotw --head-dim 128 --dtype bf16 --arch sm_90a --emit c -o attn.c
