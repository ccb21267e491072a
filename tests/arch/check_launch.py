#!/usr/bin/env python3
"""Launch facts in one place (issue 30): no occupancy arithmetic or per-SM
constant outside abi/launch_facts.[ch], and include/s2c/launch.h's parameter
lists agree with abi/params.h.

  check_launch.py ROOT          check the tree at ROOT; one line per problem
  check_launch.py --self-test   the checker fails on trees that break a rule

launch.h writes each ABI's list after "Parameters of ABI NAME", up to the
next such line or "----" heading, as entries "I TYPE NAME" (TYPE as
params.h's, lower case; NAME may end in {a,b,c} for several: I..J then
covers them in order) and "I..J as ABI OTHER" (the same parameters as
OTHER's I..J)."""
import os
import re
import sys
import tempfile

# Where occupancy and the device's per-SM limits may be computed.
FACTS = {os.path.join("abi", "launch_facts.h"), os.path.join("abi", "launch_facts.c")}
SCANNED = ["common", "patterns", "ir", "abi", "codegen", "templates", "driver", "runtime", "jit", "ref",
           "tools", "bench", "examples", "fuzz"]
OCCUPANCY = [
    (re.compile(r"\*\s*1024\s*/"), "shared memory per SM arithmetic"),
    (re.compile(r"\b228\s*\*\s*1024\b|\b(?:233472|167936)\b"), "a shared-memory-per-SM constant"),
    (re.compile(r"\b(?:65536|2048)\s*/\s*[A-Za-z_(]"), "registers or threads per SM arithmetic"),
]
COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
# the ABIs launch.h documents (decode's and combine's are in decode.h)
LAUNCH_H_ABIS = ["fwd", "fwd_tma", "fwd_tma_persistent", "fwd_tma_fp8", "seqs", "bwd", "bwd_tma"]
# params.h's list macro of each ABI
LIST_OF = {"fwd": "S2_ABI_FWD_PARAMS", "fwd_tma": "S2_ABI_FWD_TMA_PARAMS",
           "fwd_tma_persistent": "S2_ABI_FWD_TMA_PERSISTENT_PARAMS", "fwd_tma_fp8": "S2_ABI_FWD_TMA_FP8_PARAMS",
           "seqs": "S2_ABI_SEQS_PARAMS",
           "bwd": "S2_ABI_BWD_PARAMS", "bwd_tma": "S2_ABI_BWD_TMA_PARAMS",
           "decode": "S2_ABI_DECODE_PARAMS", "combine": "S2_ABI_COMBINE_PARAMS"}


def strip_comments(text):
    return COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def check_occupancy(root):
    problems = []
    for d in SCANNED:
        top = os.path.join(root, d)
        for dirpath, _, names in os.walk(top):
            for n in sorted(names):
                rel = os.path.relpath(os.path.join(dirpath, n), root)
                if not n.endswith((".c", ".h")) or rel in FACTS:
                    continue
                text = strip_comments(open(os.path.join(root, rel), encoding="utf-8", errors="replace").read())
                for pat, what in OCCUPANCY:
                    for m in pat.finditer(text):
                        line = text.count("\n", 0, m.start()) + 1
                        problems.append("%s:%d: %s outside abi/launch_facts.c (ask s2_launch_facts_of)"
                                        % (rel, line, what))
    return problems


# ---- params.h: a small expander of its function-like macros ----

def split_args(s):
    args, depth, cur = [], 0, ""
    for c in s:
        if c == "," and depth == 0:
            args.append(cur.strip())
            cur = ""
            continue
        depth += c == "("
        depth -= c == ")"
        cur += c
    args.append(cur.strip())
    return args


def read_macros(text):
    text = text.replace("\\\n", " ")
    macros = {}
    for m in re.finditer(r"^\s*#\s*define\s+(\w+)\(([^)]*)\)(.*)$", text, re.M):
        macros[m.group(1)] = ([a.strip() for a in m.group(2).split(",")], m.group(3))
    return macros


def expand(text, macros, out):
    """Expand text; each X(E, NAME, TYPE) appends (NAME, TYPE) to out."""
    pos = 0
    while True:
        m = re.compile(r"\b(\w+)\s*\(").search(text, pos)
        if not m:
            return
        depth, i = 1, m.end()
        while depth:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        args = split_args(text[m.end():i - 1])
        name = m.group(1)
        if name == "X":
            out.append(("".join(re.findall(r'"([^"]*)"', args[1])), args[2].lower()))
        elif name in macros:
            params, body = macros[name]
            for p, a in zip(params, args):
                body = re.sub(r"\b%s\s*##\s*" % re.escape(p), a, body)
                body = re.sub(r"\b%s\b" % re.escape(p), a, body)
            expand(body, macros, out)
        pos = i


def params_of(root):
    macros = read_macros(open(os.path.join(root, "abi", "params.h"), encoding="utf-8").read())
    lists = {}
    for abi, mac in LIST_OF.items():
        if mac in macros:
            out = []
            expand(mac + "(X)", macros, out)
            lists[abi] = out
    return lists


# ---- launch.h's lists ----

ENTRY = re.compile(r"(?<![\w.])(\d+)(?:\.\.(\d+))?\s+(?:as ABI (\w+)|(ptr|i32|i64|f32|tmap|bytes)\s+(\w+)(\{[\w,]+\})?)")


def documented(text):
    """{abi: [(line, first, last, other abi or None, type, [names])]}"""
    blocks = {}
    heads = list(re.finditer(r"Parameters of ABI (\w+)", text))
    for k, h in enumerate(heads):
        end = heads[k + 1].start() if k + 1 < len(heads) else len(text)
        rule = re.compile(r"^\s*\*\s*----", re.M).search(text, h.end())
        if rule and rule.start() < end:
            end = rule.start()
        entries = []
        for m in ENTRY.finditer(text, h.end(), end):
            line = text.count("\n", 0, m.start()) + 1
            first = int(m.group(1))
            last = int(m.group(2)) if m.group(2) else first
            names = [m.group(5)]
            if m.group(6):
                names = [m.group(5) + alt for alt in m.group(6)[1:-1].split(",")]
            entries.append((line, first, last, m.group(3), m.group(4), names))
        blocks[h.group(1)] = (text.count("\n", 0, h.start()) + 1, entries)
    return blocks


def check_launch_h(root):
    problems = []
    path = os.path.join("include", "s2c", "launch.h")
    lists = params_of(root)
    blocks = documented(open(os.path.join(root, path), encoding="utf-8").read())
    for abi in LAUNCH_H_ABIS:
        if abi not in blocks:
            problems.append("%s: no \"Parameters of ABI %s\" list" % (path, abi))
    for abi, (hline, entries) in sorted(blocks.items()):
        if abi not in lists:
            problems.append("%s:%d: ABI %s is not in abi/params.h" % (path, hline, abi))
            continue
        want, seen = lists[abi], {}
        for line, first, last, other, typ, names in entries:
            if other:
                ref = lists.get(other)
                if ref is None or last >= len(ref) or ref[first:last + 1] != want[first:last + 1]:
                    problems.append("%s:%d: ABI %s's %d..%d are not ABI %s's" % (path, line, abi, first, last, other))
                for i in range(first, last + 1):
                    seen[i] = seen.get(i, 0) + 1
                continue
            if len(names) != last - first + 1:
                problems.append("%s:%d: %d..%d names %d parameters" % (path, line, first, last, len(names)))
                continue
            for i, n in zip(range(first, last + 1), names):
                seen[i] = seen.get(i, 0) + 1
                if i >= len(want):
                    problems.append("%s:%d: ABI %s has %d parameters, not %d" % (path, line, abi, len(want), i + 1))
                elif want[i] != (n, typ):
                    problems.append("%s:%d: ABI %s parameter %d is %s %s in abi/params.h, not %s %s"
                                    % (path, line, abi, i, want[i][1], want[i][0], typ, n))
        for i in range(len(want)):
            if seen.get(i, 0) != 1:
                problems.append("%s:%d: ABI %s parameter %d (%s) is listed %d times"
                                % (path, hline, abi, i, want[i][0], seen.get(i, 0)))
    return problems


def check(root):
    return check_occupancy(root) + check_launch_h(root)


PARAMS_H = """#define S2_ABI_STRIDES(X, E, n) X(E, n "_stride_b", I64) X(E##_S, n "_stride_s", I64) X(E##_H, n "_stride_h", I64)
#define S2_ABI_BASE(X) X(Q, "q", PTR) S2_ABI_STRIDES(X, QS, "q") \\
    X(N, "n", I32)
#define S2_ABI_FWD_PARAMS(X) S2_ABI_BASE(X)
#define S2_ABI_FWD_TMA_PARAMS(X) S2_ABI_BASE(X) X(M, "q_map", TMAP)
"""
LAUNCH_H = """/* ---- fwd
 * Parameters of ABI fwd:
 *    0 ptr q   1..3 i64 q_stride_{b,s,h} (128 bytes, box 64 rows)
 *    4 i32 n
 * Parameters of ABI fwd_tma: 0..4 as ABI fwd, then 5 tmap q_map
 * ---- the rest
 *    7 ptr z */
"""


def self_test():
    """Each rule, broken once in a small tree, must be reported."""
    cases = {
        "occupancy in the runtime": ("runtime/a.c", "int n = 228 * 1024 / (smem + 1024);\n"),
        "smem arithmetic in bench": ("bench/a.c", "int n = 164 * 1024 / cta;\n"),
        "register arithmetic": ("driver/a.c", "int r = 65536 / (warps * regs);\n"),
        "a launch.h name": ("include/s2c/launch.h", LAUNCH_H.replace("4 i32 n", "4 i32 m")),
        "a launch.h type": ("include/s2c/launch.h", LAUNCH_H.replace("4 i32 n", "4 i64 n")),
        "a launch.h gap": ("include/s2c/launch.h", LAUNCH_H.replace("4 i32 n", "")),
        "a launch.h index twice": ("include/s2c/launch.h", LAUNCH_H.replace("4 i32 n", "3 i64 q_stride_h 4 i32 n")),
        "a launch.h extra index": ("include/s2c/launch.h", LAUNCH_H.replace("4 i32 n", "4 i32 n 5 ptr x")),
        "a launch.h inherited range": ("include/s2c/launch.h", LAUNCH_H.replace("0..4 as ABI fwd", "0..5 as ABI fwd")),
        "params.h grew": ("abi/params.h", PARAMS_H.replace('X(N, "n", I32)', 'X(N, "n", I32) X(D, "descale", PTR)')),
    }
    failed = 0

    def tree(root):
        for d in SCANNED + [os.path.join("include", "s2c")]:
            os.makedirs(os.path.join(root, d), exist_ok=True)
        with open(os.path.join(root, "abi", "params.h"), "w") as f:
            f.write(PARAMS_H)
        with open(os.path.join(root, "include", "s2c", "launch.h"), "w") as f:
            f.write(LAUNCH_H)
        with open(os.path.join(root, "abi", "launch_facts.c"), "w") as f:
            f.write("int n = sm_smem / cta; /* 228 * 1024 / x */ int m = 228 * 1024 / y;\n")

    global LAUNCH_H_ABIS
    saved, LAUNCH_H_ABIS = LAUNCH_H_ABIS, ["fwd", "fwd_tma"]
    try:
        for what, (path, text) in cases.items():
            with tempfile.TemporaryDirectory() as root:
                tree(root)
                with open(os.path.join(root, path), "w") as f:
                    f.write(text)
                found = check(root)
                print("self-test %-28s %s" % (what, "reported: " + found[0] if found else "NOT REPORTED"))
                failed += not found
        with tempfile.TemporaryDirectory() as root:
            tree(root)
            with open(os.path.join(root, "runtime", "a.c"), "w") as f:
                f.write("/* not 228 * 1024 / n here */ int n = 2 * 1024;\n")
            found = check(root)
            print("self-test %-28s %s" % ("a clean tree", "passes" if not found else "FAILS: " + found[0]))
            failed += bool(found)
    finally:
        LAUNCH_H_ABIS = saved
    return failed


def main(argv):
    if len(argv) == 2 and argv[1] == "--self-test":
        return 1 if self_test() else 0
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    problems = check(argv[1])
    for p in problems:
        print(p)
    print("check_launch: %d problem%s" % (len(problems), "" if len(problems) == 1 else "s"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
