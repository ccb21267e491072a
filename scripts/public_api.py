#!/usr/bin/env python3
"""The public C API: the functions the headers in include/s2c declare, split
into the three libraries that export them.

  public_api.py list LIB INCLUDE_DIR         one name per line (LIB: s2rt, s2c or s2dist)
  public_api.py map LIB INCLUDE_DIR OUT      a linker version script exporting them
  public_api.py check LIB INCLUDE_DIR SO     nm -D of SO equals the list (exit 1 if not)
  public_api.py counts INCLUDE_DIR [README LIBS2RT_SO LIBS2C_SO LIBS2DIST_SO]
                                             the exports per public header; with README and
                                             the built libraries, checks that each exports its
                                             list and that README's table (between the marks
                                             below) is this one (exit 1 if not)
"""
import re
import subprocess
import sys
from pathlib import Path

# Which library implements each header's functions.  libs2rt needs neither
# LLVM nor libyaml; libs2c (patterns, generator, JIT, reference) links it, as
# libs2dist (the context-parallel executor over NCCL) does.
HEADERS = {
    "s2rt": ["common.h", "runtime.h", "attn_runtime.h", "launch.h", "decode.h", "layout.h",
             "kv_evict.h", "manifest.h", "spec.h", "cpplan.h"],
    "s2c": ["pattern.h", "compile.h", "codegen.h", "cache.h", "jit.h", "aot.h", "ref.h"],
    "s2dist": ["cp.h"],
}


def declared(path):
    text = Path(path).read_text()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    text = "\n".join(l for l in text.split("\n") if not l.lstrip().startswith("#"))
    text = text.replace('extern "C" {', " ")
    names = set()
    depth = 0
    stmt = ""
    for ch in text:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                stmt = ""
            continue
        if depth:
            continue
        if ch == ";":
            s = " ".join(stmt.split())
            stmt = ""
            if s.startswith(("typedef", "static", "struct", "enum", "union")):
                continue
            m = re.search(r"\b(s2_\w+)\s*\(", s)
            if m:
                names.add(m.group(1))
        else:
            stmt += ch
    return names


# Declared in one library's header, implemented in the other.
MOVED = {"s2_manifest_format": "s2c"}


def names_of(lib, inc):
    out = set()
    for other, headers in HEADERS.items():
        for h in headers:
            for n in declared(Path(inc) / "s2c" / h):
                if MOVED.get(n, other) == lib:
                    out.add(n)
    return out


def exported(so):
    nm = subprocess.run(["nm", "-D", "--defined-only", so], capture_output=True, text=True, check=True)
    names = {l.split()[-1] for l in nm.stdout.splitlines() if l.strip()}
    return {n.split("@")[0] for n in names if not n.startswith("S2C_")}


def check(lib, inc, so):
    names = names_of(lib, inc)
    have = exported(so)
    errors = [f"{so}: {n} is declared in a public header but not exported" for n in sorted(names - have)]
    errors += [f"{so}: {n} is exported but in no public header of lib{lib}" for n in sorted(have - names)]
    return names, errors


COUNTS_BEGIN = "<!-- exports: scripts/public_api.py counts -->"
COUNTS_END = "<!-- /exports -->"


def counts_table(inc):
    """README's table: each public header's exported functions, by library."""
    rows = ["| header | library | exported functions |", "|---|---|---|"]
    errors = []
    listed = {h for hs in HEADERS.values() for h in hs}
    for h in sorted(p.name for p in (Path(inc) / "s2c").glob("*.h")):
        if h not in listed and declared(Path(inc) / "s2c" / h):
            errors.append(f"{h} declares functions but belongs to no library (scripts/public_api.py HEADERS)")
    for lib, headers in HEADERS.items():
        for h in headers:
            names = declared(Path(inc) / "s2c" / h)
            moved = sorted(n for n in names if MOVED.get(n, lib) != lib)
            note = "".join(f" ({n}: lib{MOVED[n]})" for n in moved)
            rows.append(f"| `{h}` | lib{lib}{note} | {len(names)} |")
    totals = {lib: len(names_of(lib, inc)) for lib in HEADERS}
    for lib, n in totals.items():
        rows.append(f"| all | lib{lib} | {n} |")
    rows.append(f"| all | every library | {sum(totals.values())} |")
    return "\n".join(rows), errors


def counts(argv):
    inc = argv[2]
    table, errors = counts_table(inc)
    print(table)
    if len(argv) > 3:
        if len(argv) != 4 + len(HEADERS):
            print(__doc__, file=sys.stderr)
            return 2
        for lib, so in zip(HEADERS, argv[4:]):
            errors += check(lib, inc, so)[1]
        text = Path(argv[3]).read_text()
        if COUNTS_BEGIN not in text or COUNTS_END not in text:
            errors.append(f"{argv[3]}: no table between {COUNTS_BEGIN} and {COUNTS_END}")
        else:
            have = text.split(COUNTS_BEGIN, 1)[1].split(COUNTS_END, 1)[0].strip()
            if have != table:
                errors.append(f"{argv[3]}: the export counts are stale; put the table above between its marks")
    for e in errors:
        print(e)
    return 1 if errors else 0


def main(argv):
    if len(argv) >= 3 and argv[1] == "counts":
        return counts(argv)
    if len(argv) < 4 or argv[1] not in ("list", "map", "check") or argv[2] not in HEADERS:
        print(__doc__, file=sys.stderr)
        return 2
    cmd, lib, inc = argv[1], argv[2], argv[3]
    names = sorted(names_of(lib, inc))
    if cmd == "list":
        print("\n".join(names))
    elif cmd == "map":
        body = "".join(f"    {n};\n" for n in names)
        Path(argv[4]).write_text(f"S2C_0 {{\n  global:\n{body}  local:\n    *;\n}};\n")
    else:
        errors = check(lib, inc, argv[4])[1]
        for e in errors:
            print(e)
        if errors:
            return 1
        print(f"{argv[4]}: {len(names)} exported symbols, each declared in a public header")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
