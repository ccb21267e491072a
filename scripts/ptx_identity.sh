#!/usr/bin/env bash
# Prove a refactor left the generated code unchanged: compile every stock
# pattern x {fwd, bwd, decode} x {sm_80, sm_90a} x {d64, d128} with two
# generators and compare the PTX byte for byte.
#
#   scripts/ptx_identity.sh BASE [NEW]
#
# BASE and NEW are each an s2c executable or a git revision of this
# repository (built in a temporary worktree); NEW defaults to build/tools/s2c.
# The embedded manifest (the s2c_manifest global) is compared on its own: it
# holds the generator's identity, a hash of the sources, so it differs
# whenever the generator's sources do.  A combination both generators refuse
# with the same message counts as identical.  Prints one line per difference
# and a summary; exits 1 when any kernel's PTX differs.
#   KEEP=DIR   keep the PTX files under DIR/{base,new} (default: a temp dir)
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
    sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'
    exit 2
fi

work=${KEEP:-$(mktemp -d)}
mkdir -p "$work"
cleanup_tree=""
trap '[ -n "$cleanup_tree" ] && git -C "$root" worktree remove --force "$cleanup_tree" >/dev/null 2>&1; [ -z "${KEEP:-}" ] && rm -rf "$work"' EXIT

# An s2c executable for a path or a revision.
generator() {
    local what=$1 tag=$2
    if [ -x "$what" ] && [ -f "$what" ]; then
        realpath "$what"
        return
    fi
    local rev
    rev=$(git -C "$root" rev-parse --verify --quiet "$what^{commit}") || {
        echo "ptx_identity: '$what' is neither an executable nor a revision" >&2
        return 1
    }
    local tree="$work/tree-$tag"
    git -C "$root" worktree add --detach "$tree" "$rev" >/dev/null 2>&1 || return 1
    cleanup_tree=$tree
    (cd "$tree" && meson setup build -Dtests=disabled -Dtoolkit_dir="${CUDA_HOME:-/usr/local/cuda}" >/dev/null &&
        ninja -C build tools/s2c >/dev/null) >&2 || return 1
    echo "$tree/build/tools/s2c"
}

base=$(generator "$1" base) || exit 1
new=$(generator "${2:-build/tools/s2c}" new) || exit 1

# One PTX per combination; the manifest line split off into NAME.manifest.
emit() {
    local s2c=$1 dir=$2
    mkdir -p "$dir"
    for pat in patterns/*.yaml; do
        for kind in fwd bwd decode; do
            for arch in sm_80 sm_90a; do
                for d in 64 128; do
                    local name
                    name=$(basename "$pat" .yaml)-$kind-$arch-d$d
                    if "$s2c" compile "$pat" --kind "$kind" --arch "$arch" --head-dim "$d" --dtype bf16 \
                        --emit ptx -o "$dir/$name.ptx" >/dev/null 2>"$dir/$name.err"; then
                        grep -v '^\.visible \.global \.align 1 \.b8 s2c_manifest\[' "$dir/$name.ptx" >"$dir/$name.kernels"
                        grep '^\.visible \.global \.align 1 \.b8 s2c_manifest\[' "$dir/$name.ptx" >"$dir/$name.manifest"
                        rm -f "$dir/$name.err"
                    else
                        # the message without the program's own path
                        sed -i 's/^[^:]*s2c: //' "$dir/$name.err"
                    fi
                    rm -f "$dir/$name.ptx"
                done
            done
        done
    done
}

emit "$base" "$work/base"
emit "$new" "$work/new"

same=0 refused=0 differ=0 manifests=0 total=0
for f in "$work"/base/*.kernels "$work"/base/*.err; do
    [ -e "$f" ] || continue
    total=$((total + 1))
    stem=${f%.*}
    name=$(basename "$stem")
    case $f in
    *.kernels)
        if [ ! -f "$work/new/$name.kernels" ]; then
            echo "DIFFER  $name: the new generator refuses it: $(head -c 200 "$work/new/$name.err" 2>/dev/null)"
            differ=$((differ + 1))
        elif cmp -s "$f" "$work/new/$name.kernels"; then
            same=$((same + 1))
            cmp -s "$stem.manifest" "$work/new/$name.manifest" || manifests=$((manifests + 1))
        else
            echo "DIFFER  $name: $(cmp "$f" "$work/new/$name.kernels" | head -1)"
            differ=$((differ + 1))
        fi
        ;;
    *.err)
        if [ -f "$work/new/$name.err" ] && cmp -s "$f" "$work/new/$name.err"; then
            refused=$((refused + 1))
        else
            echo "DIFFER  $name: refused by the base ($(head -c 200 "$f")) but not in the same words by the new generator"
            differ=$((differ + 1))
        fi
        ;;
    esac
done
echo "ptx_identity: $total combinations: $same modules with identical kernel PTX ($manifests of them with another manifest), $refused refused alike, $differ different"
[ "$differ" -eq 0 ]
