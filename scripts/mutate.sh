#!/usr/bin/env bash
# Show that the CPU suite catches small bugs: plant each bug of the list below,
# one at a time, in a scratch copy of the tree (the tracked and untracked,
# not ignored files of this checkout), rebuild there in its own build
# directory, run the tests and print a table bug -> caught / missed.  On
# demand, not in CI: each bug is a rebuild and a test run.
#
#   scripts/mutate.sh [--subset] [--only NAME[,NAME...]] [--dir DIR] [--list]
#
#   (default)  run the whole cpu suite for every bug
#   --subset   run only each bug's own tests (its `tests:` line), faster
#   --only     plant only the named bugs
#   --dir DIR  scratch tree and build in DIR, kept (a later run reuses its
#              build); default: a temporary directory, removed at the end
#   --list     print the bugs and their tests, plant nothing
#
# A bug is one exact text substitution in one file.  When the old text no
# longer occurs exactly once there, the bug is "stale" (the list needs
# updating), an error like a missed bug.  A bug that does not build is
# "unbuildable", also an error.  Before the bugs, the same tests must pass on
# the unchanged copy.  Seeded tests run with S2C_SEED (default 1).
# Exit status: 0 every bug caught, 1 any missed, stale or unbuildable, 2 usage
# or a failing baseline.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

# ---- the bugs: name, file, old text (exactly once in the file), new text, the
# tests that catch it (--subset), why it matters -------------------------------
BUGS=$(cat <<'EOF'
name: decode-table-head-stride
file: runtime/checks.c
old: if (th != 0 && th < a->max_pages_per_seq)
new: if (0)
tests: decode_check
what: decode no longer refuses a block table whose kv-head rows overlap

name: manifest-rule-head-bound
file: abi/manifest_pattern.c
old: if (x[0] >= p->heads)
new: if (x[0] > p->heads)
tests: manifest-parse runtime manifest-fuzz
what: a manifest rule for head == heads writes one past the rules array

name: causal-rule
file: ir/predicate.c
old: if (p->causal && n > m)
new: if (p->causal && n >= m)
tests: ir kv_evict decode
what: causal patterns drop the diagonal block (kept iff n < m, not n <= m)

name: vert-stride-rule
file: ir/predicate.c
old: return s2_mod(n + r->shift, stride) == 0;
new: return s2_mod(n + r->shift, stride + 1) == 0;
tests: ir kv_evict decode example_paged example_paged_small_pages example_paged_decode_l16v8
what: absolute vertical stripes every stride + 1 blocks

name: head-shift
file: patterns/resolve.c
old: int h = p->homo_head ? 0 : q / group;
new: int h = p->homo_head ? 0 : q % group;
tests: ir kv_evict decode
what: the stripe shift from the head's index in its group, not its kv head

name: varlen-shape-off-by-one
file: runtime/varlen.c
old: if (q->q_len > q->kv_len)
new: if (q->q_len > q->kv_len + 1)
tests: attnrt
what: a varlen sequence with one query more than its keys is accepted

name: fwd-shape-off-by-one
file: runtime/checks.c
old: if (a->q_len > a->kv_len)
new: if (a->q_len > a->kv_len + 1)
tests: attnrt
what: a forward with one query more than its keys is accepted

name: schedule-entry-count
file: ir/schedule.c
old: s->offsets[c * lists + i + 1] = total;
new: s->offsets[c * lists + i + 1] = total - (n > 0);
tests: ir
what: every non-empty Merge-Q tile list loses its last entry

name: ref-softmax-scale
file: ref/attention.c
old: return scale != 0.0 ? scale : 1.0 / sqrt((double)head_dim);
new: return scale != 0.0 ? scale : 1.0 / (double)head_dim;
tests: ref decode
what: the reference's default softmax scale is 1/D, not 1/sqrt(D)

name: lse-overlap
file: runtime/checks.c
old: if (st == S2_OK && lse && extents_meet(o->ptr, o_bytes, lse, lse_bytes))
new: if (st == S2_OK && 0 && lse && extents_meet(o->ptr, o_bytes, lse, lse_bytes))
tests: attnrt
what: the forward, decode and combine no longer refuse an lse buffer that overlaps o (one check since the duplicates went)

name: aot-c-string-escape
file: driver/emit_c.c
old: if (c == '\\' || c == '"' || c == '?')
new: if (c == '"' || c == '?')
tests: aot
what: the AOT emitter writes backslashes unescaped into C string literals
EOF
)

usage() {
    sed -n '/^#   scripts/,/^#   --list/p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

subset=0 only="" only_raw="" dir="" list=0
while [ $# -gt 0 ]; do
    case "$1" in
    --subset) subset=1 ;;
    --only) [ $# -ge 2 ] || usage; only=",$2,"; only_raw=$2; shift ;;
    --dir) [ $# -ge 2 ] || usage; dir=$2; shift ;;
    --list) list=1 ;;
    *) usage ;;
    esac
    shift
done

# Parse BUGS into parallel arrays.
names=() files=() olds=() news=() tests=() whats=()
while IFS= read -r line; do
    case "$line" in
    "name: "*) names+=("${line#name: }") ;;
    "file: "*) files+=("${line#file: }") ;;
    "old: "*) olds+=("${line#old: }") ;;
    "new: "*) news+=("${line#new: }") ;;
    "tests: "*) tests+=("${line#tests: }") ;;
    "what: "*) whats+=("${line#what: }") ;;
    "") ;;
    *) echo "mutate: bad line in the bug list: $line" >&2; exit 2 ;;
    esac
done <<<"$BUGS"
n=${#names[@]}
if [ ${#files[@]} -ne "$n" ] || [ ${#olds[@]} -ne "$n" ] || [ ${#news[@]} -ne "$n" ] || [ ${#tests[@]} -ne "$n" ]; then
    echo "mutate: every bug needs name, file, old, new and tests" >&2
    exit 2
fi

selected=()
for ((i = 0; i < n; i++)); do
    if [ -z "$only" ] || [[ $only == *",${names[i]},"* ]]; then
        selected+=("$i")
    fi
done
if [ ${#selected[@]} -eq 0 ]; then
    echo "mutate: no bug named $only_raw (--list names them)" >&2
    exit 2
fi

if [ "$list" -eq 1 ]; then
    for i in "${selected[@]}"; do
        printf '%s (%s): %s\n    tests: %s\n' "${names[i]}" "${files[i]}" "${whats[i]}" "${tests[i]}"
    done
    exit 0
fi

# ---- the scratch tree ---------------------------------------------------------------
if [ -n "$dir" ]; then
    mkdir -p "$dir" || exit 2
    scratch=$(cd "$dir" && pwd)
else
    scratch=$(mktemp -d "${TMPDIR:-/tmp}/s2c-mutate.XXXXXX") || exit 2
    trap 'rm -rf "$scratch"' EXIT
fi
build=$scratch/build-mutate
logs=$scratch/logs
mkdir -p "$logs" "$scratch/orig"
export S2C_SEED=${S2C_SEED:-1}
echo "mutate: scratch tree $scratch, S2C_SEED=$S2C_SEED, $([ $subset -eq 1 ] && echo "each bug's tests" || echo "the cpu suite")"

# tar keeps the files' times, so a kept build stays incremental; a file a
# stopped run left planted gets a new time, so that it is recompiled
(cd "$root" && git ls-files -z --cached --others --exclude-standard |
    tar --null -T - --ignore-failed-read -cf - 2>/dev/null) | tar -xf - -C "$scratch" || exit 2
if [ -f "$scratch/planted" ]; then
    touch "$scratch/$(cat "$scratch/planted")"
    rm -f "$scratch/planted"
fi
if ! (cd "$scratch" && scripts/setup.sh build-mutate) >"$logs/setup.log" 2>&1; then
    echo "mutate: the unchanged copy does not build; see $logs/setup.log" >&2
    exit 2
fi

# Run tests ($@: names; none: the cpu suite) into log $1; prints the failing names.
run_tests() {
    local log=$1
    shift
    local sel=(--suite cpu)
    [ $# -gt 0 ] && sel=("$@")
    meson test -C "$build" --no-rebuild --print-errorlogs "${sel[@]}" >"$log" 2>&1
    local rc=$?
    sed -nE 's#^ *[0-9]+/[0-9]+ +[^ ]+ / ([^ ]+) +(FAIL|TIMEOUT|ERROR|UNEXPECTEDPASS|INTERRUPT).*#\1#p' "$log" |
        sort -u | tr '\n' ' '
    return $rc
}

# The baseline: the same tests pass before any bug.
if [ "$subset" -eq 1 ]; then
    base=$(for i in "${selected[@]}"; do printf '%s\n' ${tests[i]}; done | sort -u | tr '\n' ' ')
else
    base=""
fi
# shellcheck disable=SC2086
if ! failed=$(run_tests "$logs/baseline.log" $base); then
    echo "mutate: the baseline fails without any bug (${failed:-see the log}); see $logs/baseline.log" >&2
    exit 2
fi

# Exact substitution: the old text must occur exactly once.
substitute() {
    python3 - "$1" "$2" "$3" <<'PY'
import sys
path, old, new = sys.argv[1:]
with open(path, encoding="utf-8") as f:
    text = f.read()
if text.count(old) != 1:
    sys.exit(3)
with open(path, "w", encoding="utf-8") as f:
    f.write(text.replace(old, new, 1))
PY
}

results=() bad=0
for i in "${selected[@]}"; do
    name=${names[i]} file=${files[i]} path=$scratch/${files[i]}
    mode=full
    [ "$subset" -eq 1 ] && mode=subset
    echo "mutate: $name ($file) ..."
    if [ ! -f "$path" ]; then
        results+=("$name|$file|$mode|stale|no such file")
        bad=1
        continue
    fi
    cp "$path" "$scratch/orig/$name"
    printf '%s\n' "$file" >"$scratch/planted"
    if ! substitute "$path" "${olds[i]}" "${news[i]}"; then
        rm -f "$scratch/planted"
        results+=("$name|$file|$mode|stale|old text not found exactly once")
        bad=1
        continue
    fi
    if ! ninja -C "$build" >"$logs/$name.build.log" 2>&1; then
        status=unbuildable
        detail="see $logs/$name.build.log"
        bad=1
    else
        sel=()
        # shellcheck disable=SC2206
        [ "$subset" -eq 1 ] && sel=(${tests[i]})
        if failed=$(run_tests "$logs/$name.log" "${sel[@]}"); then
            status=missed
            detail="every test passed"
            bad=1
        else
            status=caught
            detail=${failed:-see $logs/$name.log}
        fi
    fi
    results+=("$name|$file|$mode|$status|$detail")
    # restored with a new time, so that the next build recompiles it
    cp "$scratch/orig/$name" "$path"
    touch "$path"
    rm -f "$scratch/planted"
done
ninja -C "$build" >"$logs/restore.build.log" 2>&1 || true

echo
printf '%-26s %-22s %-7s %-12s %s\n' bug file tests result "failing tests"
for r in "${results[@]}"; do
    IFS='|' read -r a b c d e <<<"$r"
    printf '%-26s %-22s %-7s %-12s %s\n' "$a" "$b" "$c" "$d" "$e"
done
[ -n "$dir" ] && echo "logs: $logs"
exit "$bad"
