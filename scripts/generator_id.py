#!/usr/bin/env python3
"""The identity of the code that generates kernels: the version and a hash of
the sources the generated PTX depends on (abi, codegen, templates, driver, ir, patterns,
common and the public headers), so that a kernel cache written by another
build of s2c is never taken for this one's.

  generator_id.py --list ROOT           the sources, one a line (for meson)
  generator_id.py OUT ROOT VERSION      writes OUT: #define S2C_GENERATOR_ID
                                        "VERSION+<16 hex digits>" (rewritten
                                        only when it changes)
"""
import hashlib
import os
import sys

DIRS = ["abi", "codegen", "templates", "driver", "ir", "patterns", "common", "include/s2c"]


def sources(root):
    out = []
    for d in DIRS:
        for name in sorted(os.listdir(os.path.join(root, d))):
            if name.endswith((".c", ".h")):
                out.append(d + "/" + name)
    return out


def main(argv):
    if len(argv) == 3 and argv[1] == "--list":
        print("\n".join(sources(argv[2])))
        return 0
    if len(argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    out, root, version = argv[1:]
    h = hashlib.sha256()
    for rel in sources(root):
        with open(os.path.join(root, rel), "rb") as f:
            data = f.read()
        h.update(rel.encode() + b"\0" + len(data).to_bytes(8, "little") + data)
    text = '#define S2C_GENERATOR_ID "%s+%s"\n' % (version, h.hexdigest()[:16])
    try:
        with open(out) as f:
            if f.read() == text:
                return 0
    except OSError:
        pass
    with open(out, "w") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
