#!/usr/bin/env python3
"""The static libraries define no global symbol outside the s2_ / S2_
namespace, so that a static link with other libraries cannot clash.

  check_symbols.py NM ARCHIVE...            one line per offending symbol, exit 1 if any
  check_symbols.py --self-test NM ARCHIVE   ARCHIVE holds known offenders: they are all
                                            reported, and nothing else
"""
import subprocess
import sys

PREFIXES = ("s2_", "S2_")
# What sanitizer and coverage instrumentation adds to every object (reserved
# names of the implementation, not ours).
TOOL_PREFIXES = ("__asan", "___asan", "__odr_asan", "__ubsan", "__tsan", "__sanitizer", "__sancov", "__gcov",
                 "__llvm_")

# The self-test archive's globals (tests/install/bad_symbols.c): the ones
# that break the rule, one per kind of definition nm reports.
SELF_TEST_BAD = {"leaked_text": "T", "leaked_data": "D", "leaked_bss": "B", "leaked_rodata": "R"}


def defined_globals(nm, archive):
    """(member, name, type) of every defined global symbol of the archive."""
    r = subprocess.run([nm, "-P", "-A", "-g", "--defined-only", archive], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{nm} {archive} failed ({r.returncode}): {r.stderr.strip()}")
    out = []
    for line in r.stdout.splitlines():
        # "lib.a[member.o]: NAME TYPE VALUE SIZE"
        where, _, rest = line.partition(": ")
        fields = rest.split()
        if len(fields) < 2:
            continue
        member = where[where.find("[") + 1:where.rfind("]")] if "[" in where else where
        out.append((member, fields[0], fields[1]))
    return out


def offenders(nm, archive):
    return [(m, n, t) for m, n, t in defined_globals(nm, archive)
            if not n.startswith(PREFIXES) and not n.startswith(TOOL_PREFIXES)]


def check(nm, archives):
    bad = 0
    total = 0
    for a in archives:
        syms = defined_globals(nm, a)
        if not syms:
            print(f"{a}: no defined global symbols (not an archive of s2c's objects?)")
            bad += 1
        total += len(syms)
        for member, name, kind in offenders(nm, a):
            print(f"{a}({member}): {kind} {name}: a global without the s2_ prefix")
            bad += 1
    print(f"{total} global symbols in {len(archives)} archives, {bad} problems")
    return 1 if bad else 0


def self_test(nm, archive):
    found = {n: t for _, n, t in offenders(nm, archive)}
    failures = []
    if found != SELF_TEST_BAD:
        failures.append(f"reported {sorted(found.items())}, expected {sorted(SELF_TEST_BAD.items())}")
    r = subprocess.run([sys.executable, __file__, nm, archive], capture_output=True, text=True)
    if r.returncode != 1 or any(f" {n}: " not in r.stdout for n in SELF_TEST_BAD):
        failures.append(f"the check exited {r.returncode}, printed:\n{r.stdout}")
    for f in failures:
        print("FAIL:", f)
    if not failures:
        print(f"self-test: the check reports {', '.join(sorted(found))} and passes s2_ names")
    return 1 if failures else 0


def main(argv):
    if len(argv) == 3 and argv[0] == "--self-test":
        return self_test(argv[1], argv[2])
    if len(argv) < 2 or argv[0].startswith("-"):
        print(__doc__)
        return 2
    return check(argv[0], argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
