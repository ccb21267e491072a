#!/bin/sh
# libs2rt.so must load where there is neither LLVM nor a CUDA driver: no
# DT_NEEDED entry for them, and no undefined cu*/LLVM* symbol to bind.
set -eu
lib=$1
[ -f "$lib" ] || { echo "no such library: $lib"; exit 1; }
needed=$(readelf -d "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\].*/\1/p')
echo "NEEDED: $(echo $needed)"
bad=0
for n in $needed; do
    case $n in
    libcuda*|libLLVM*|libcudart*|libnvJitLink*|libnvrtc*) echo "bad dependency: $n"; bad=1 ;;
    esac
done
undef=$(nm -D --undefined-only "$lib" | awk '{print $NF}' | grep -E '^(cu[A-Z]|LLVM)' || true)
if [ -n "$undef" ]; then
    echo "undefined driver/LLVM symbols:"; echo "$undef"; bad=1
fi
# The exports we promise must be there.
for sym in s2_device_open s2_device_set_allocator s2_mem_alloc; do
    nm -D --defined-only "$lib" | grep -qw "$sym" || { echo "missing export $sym"; bad=1; }
done
exit $bad
