#!/usr/bin/env python3
"""The stages' boundaries (ARCHITECTURE.md): every #include "..." of a
stage's sources names a header of a stage it may use, and the runtime's
build links no generator library.

  check_stages.py ROOT          check the tree at ROOT; one line per violation
  check_stages.py --self-test   the checker fails on trees that break a rule
"""
import os
import re
import sys
import tempfile

# Stages in dependency order, and which stages each may include.
ALLOWED = {
    "common": {"common"},
    "patterns": {"common", "patterns"},
    "ir": {"common", "patterns", "ir"},
    "abi": {"common", "patterns", "ir", "abi"},
    "codegen": {"common", "patterns", "abi", "codegen"},
    "templates": {"common", "patterns", "ir", "abi", "codegen", "templates"},
    "driver": {"common", "patterns", "ir", "abi", "codegen", "templates", "driver"},
    "runtime": {"common", "patterns", "ir", "abi", "runtime"},
    "jit": {"common", "patterns", "ir", "abi", "codegen", "driver", "runtime", "jit"},
    "ref": {"common", "patterns", "ir", "ref"},
    "dist": {"common", "patterns", "ir", "abi", "runtime", "dist"},
}

# Stages another may use through their public headers (include/s2c/) only.
PUBLIC_ONLY = {"dist": {"runtime"}}

# Public headers (include/s2c/) and the stage each belongs to.
PUBLIC = {
    "common.h": "common", "version.h": "common",
    "pattern.h": "patterns",
    "layout.h": "ir", "decode.h": "ir", "kv_evict.h": "ir",
    "spec.h": "abi", "manifest.h": "abi", "launch.h": "abi",
    "codegen.h": "codegen", "cache.h": "codegen",
    "compile.h": "driver", "attention.h": "driver", "aot.h": "driver",
    "runtime.h": "runtime", "attn_runtime.h": "runtime",
    "jit.h": "jit",
    "ref.h": "ref",
}

# Headers generated into the build directory, and their stage.
GENERATED = {"s2c_generator_id.h": "codegen"}

# Names in runtime/meson.build that would link the generator into libs2rt.
RUNTIME_MAY_NOT_LINK = ["s2_codegen", "s2_templates", "s2_driver", "s2_jit", "llvm_dep", "s2_gen_dep"]

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def header_stage(root, name, local_dir):
    """The stage a quoted include names, or None when it is unknown."""
    if name.startswith("s2c/"):
        return PUBLIC.get(name[4:])
    if name in GENERATED:
        return GENERATED[name]
    if os.path.exists(os.path.join(root, local_dir, name)):
        return local_dir
    owners = [s for s in ALLOWED if os.path.exists(os.path.join(root, s, name))]
    return owners[0] if len(owners) == 1 else None


def check(root):
    problems = []
    files = []
    for stage in ALLOWED:
        d = os.path.join(root, stage)
        if os.path.isdir(d):
            files += [(stage, stage, os.path.join(stage, f)) for f in sorted(os.listdir(d))
                      if f.endswith((".c", ".h"))]
    for name, stage in PUBLIC.items():
        path = os.path.join("include", "s2c", name)
        if os.path.exists(os.path.join(root, path)):
            files.append((stage, "include/s2c", path))
    for stage, local_dir, rel in files:
        text = open(os.path.join(root, rel), encoding="utf-8", errors="replace").read()
        for m in INCLUDE.finditer(text):
            inc = m.group(1)
            line = text.count("\n", 0, m.start()) + 1
            owner = header_stage(root, inc, local_dir)
            if owner is None:
                problems.append("%s:%d: \"%s\" belongs to no known stage (add it to tests/arch/check_stages.py)"
                                % (rel, line, inc))
            elif owner in PUBLIC_ONLY.get(stage, ()) and not inc.startswith("s2c/"):
                problems.append("%s:%d: %s includes \"%s\", a private header of %s; %s may use only its public "
                                "headers (s2c/...)" % (rel, line, stage, inc, owner, stage))
            elif owner not in ALLOWED[stage]:
                problems.append("%s:%d: %s includes \"%s\" of %s; %s may use only %s"
                                % (rel, line, stage, inc, owner, stage, ", ".join(sorted(ALLOWED[stage]))))
    listed = set(os.listdir(os.path.join(root, "include", "s2c"))) if os.path.isdir(
        os.path.join(root, "include", "s2c")) else set()
    for name in sorted(listed - set(PUBLIC)):
        if name.endswith(".h"):
            problems.append("include/s2c/%s: a public header of no stage (add it to tests/arch/check_stages.py)" % name)
    build = os.path.join(root, "runtime", "meson.build")
    if os.path.exists(build):
        text = open(build).read()
        for n in RUNTIME_MAY_NOT_LINK:
            for m in re.finditer(r"\b%s\b" % re.escape(n), text):
                line = text.count("\n", 0, m.start()) + 1
                problems.append("runtime/meson.build:%d: the runtime links %s" % (line, n))
    return problems


def self_test():
    """Each rule, broken once in a small tree, must be reported."""
    cases = {
        "runtime includes codegen": ("runtime/a.c", '#include "cg_internal.h"\n', "codegen/cg_internal.h"),
        "ir includes a template header": ("ir/a.c", '#include "template.h"\n', "templates/template.h"),
        "patterns includes ir": ("patterns/a.c", '#include "s2c/layout.h"\n', None),
        "codegen includes the runtime": ("codegen/a.c", '#include "s2c/attn_runtime.h"\n', None),
        "codegen includes templates": ("codegen/a.c", '#include "flash.h"\n', "templates/flash.h"),
        "runtime links codegen": ("runtime/meson.build", "link_with : [s2_codegen]\n", None),
        "dist includes the runtime's inside": ("dist/a.c", '#include "attn_internal.h"\n', "runtime/attn_internal.h"),
        "runtime includes dist": ("runtime/a.c", '#include "dist.h"\n', "dist/dist.h"),
        "dist includes codegen": ("dist/a.c", '#include "s2c/codegen.h"\n', None),
    }
    failed = 0
    for what, (path, text, other) in cases.items():
        with tempfile.TemporaryDirectory() as root:
            for stage in ALLOWED:
                os.makedirs(os.path.join(root, stage))
            os.makedirs(os.path.join(root, "include", "s2c"))
            for name in PUBLIC:
                open(os.path.join(root, "include", "s2c", name), "w").close()
            if other:
                open(os.path.join(root, other), "w").close()
            with open(os.path.join(root, path), "w") as f:
                f.write(text)
            found = check(root)
            print("self-test %-32s %s" % (what, "reported: " + found[0] if found else "NOT REPORTED"))
            failed += not found
    # and a clean tree passes
    with tempfile.TemporaryDirectory() as root:
        for stage in ALLOWED:
            os.makedirs(os.path.join(root, stage))
        with open(os.path.join(root, "templates", "a.c"), "w") as f:
            f.write('#include "s2c/layout.h"\n#include "s2c/codegen.h"\n')
        with open(os.path.join(root, "dist", "a.c"), "w") as f:
            f.write('#include "s2c/attn_runtime.h"\n#include "s2c/layout.h"\n')
        found = check(root)
        print("self-test %-32s %s" % ("a clean tree", "passes" if not found else "FAILS: " + found[0]))
        failed += bool(found)
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
    print("check_stages: %d violation%s" % (len(problems), "" if len(problems) == 1 else "s"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
