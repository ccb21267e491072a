#!/usr/bin/env python3
"""The public C API: the functions the headers in include/s2c declare, split
into the two libraries that export them.

  public_api.py list LIB INCLUDE_DIR         one name per line (LIB: s2rt or s2c)
  public_api.py map LIB INCLUDE_DIR OUT      a linker version script exporting them
  public_api.py check LIB INCLUDE_DIR SO     nm -D of SO equals the list (exit 1 if not)
"""
import re
import subprocess
import sys
from pathlib import Path

# Which library implements each header's functions.  libs2rt needs neither
# LLVM nor libyaml; libs2c (patterns, generator, JIT, reference) links it.
HEADERS = {
    "s2rt": ["common.h", "runtime.h", "attn_runtime.h", "launch.h", "decode.h", "layout.h",
             "kv_evict.h", "manifest.h", "spec.h"],
    "s2c": ["pattern.h", "compile.h", "codegen.h", "cache.h", "jit.h", "aot.h", "ref.h"],
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


def main(argv):
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
        nm = subprocess.run(["nm", "-D", "--defined-only", argv[4]], capture_output=True, text=True, check=True)
        exported = {l.split()[-1] for l in nm.stdout.splitlines() if l.strip()}
        exported = {n.split("@")[0] for n in exported if not n.startswith("S2C_")}
        missing, extra = sorted(set(names) - exported), sorted(exported - set(names))
        for n in missing:
            print(f"{argv[4]}: {n} is declared in a public header but not exported")
        for n in extra:
            print(f"{argv[4]}: {n} is exported but in no public header of lib{lib}")
        if missing or extra:
            return 1
        print(f"{argv[4]}: {len(names)} exported symbols, each declared in a public header")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
