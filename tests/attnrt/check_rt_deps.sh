#!/bin/sh
# The attention runtime inside libs2rt.so brings schedules and the manifest
# parser, but must not bring libyaml (or LLVM, or libcuda: runtime-deps).
set -eu
lib=$1
needed=$(readelf -d "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\].*/\1/p')
echo "NEEDED: $(echo $needed)"
bad=0
for n in $needed; do
    case $n in
    libyaml*|libLLVM*|libcuda*|libstdc++*) echo "bad dependency: $n"; bad=1 ;;
    esac
done
undef=$(nm -D --undefined-only "$lib" | awk '{print $NF}' | grep -E '^(yaml_|LLVM|cu[A-Z])' || true)
if [ -n "$undef" ]; then
    echo "undefined yaml/LLVM/driver symbols:"; echo "$undef"; bad=1
fi
for sym in s2_attn_module_load s2_attn_find s2_attn_forward s2_attn_load s2_manifest_parse \
           s2_schedule_build s2_schedule_pack s2_cubin_find_manifest s2_attn_fwd_args_bshd; do
    nm -D --defined-only "$lib" | grep -qw "$sym" || { echo "missing export $sym"; bad=1; }
done
exit $bad
