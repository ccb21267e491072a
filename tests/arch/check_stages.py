#!/usr/bin/env python3
"""The stages' boundaries (ARCHITECTURE.md): every #include "..." of a
stage's sources names a header of a stage it may use, and the runtime's
build links no generator library.  A template is one unit: its functions
are called only from templates/ (the driver reaches them through the
table's entries), and no template constant sits in driver/ or runtime/ (a
constant of templates/ named there, or a kernel's tunable compared with a
number: the driver asks the table, the runtime reads the manifest record).

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
    "layout.h": "ir", "decode.h": "ir", "kv_evict.h": "ir", "cpplan.h": "ir",
    "spec.h": "abi", "manifest.h": "abi", "launch.h": "abi",
    "codegen.h": "codegen", "cache.h": "codegen",
    "compile.h": "driver", "attention.h": "driver", "aot.h": "driver",
    "runtime.h": "runtime", "attn_runtime.h": "runtime",
    "jit.h": "jit",
    "ref.h": "ref",
    "cp.h": "dist",
}

# Headers generated into the build directory, and their stage.
GENERATED = {"s2c_generator_id.h": "codegen"}

# Names in runtime/meson.build that would link the generator into libs2rt.
RUNTIME_MAY_NOT_LINK = ["s2_codegen", "s2_templates", "s2_driver", "s2_jit", "llvm_dep", "s2_gen_dep"]

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)

# Folders that may not call a template's functions (tests/ may: it tests
# them one by one); the table's own interface (template.h) is s2_template_*.
NOT_TEMPLATES = ["common", "patterns", "ir", "abi", "codegen", "driver", "runtime", "jit", "ref", "tools", "bench",
                 "examples", "fuzz"]
TABLE_API = re.compile(r"^(s2_template_|S2_TEMPLATE_)")
# Where no template constant may sit.
NO_TEMPLATE_CONSTANTS = ["driver", "runtime"]
# A kernel's tunable (spec, record or pattern) compared with a number other than 0 or 1.
TUNABLE = r"\b(?:head_dim|block_m|block_n|num_warps|num_stages|kv_gather|block_size|min_keys)\b"
TUNABLE_VS_NUMBER = re.compile(r"%s\s*(?:==|!=|<=|>=|<|>)\s*(\d+)|\b(\d+)\s*(?:==|!=|<=|>=|<|>)\s*[\w>.\-]*%s"
                               % (TUNABLE, TUNABLE))
# Sites of the rule above that other parts of issue 30 remove (file, the line's text).
TUNABLE_KNOWN = {
    # the pre_rows grid rule (8 elements per thread), moving to abi/'s launch facts
    ("runtime/args.c", "int64_t rows_per_cta = in->head_dim >= 8 ? r->threads / (in->head_dim / 8) : 0;"),
    # the manifest's smallest tile, checked at load
    ("runtime/attn_module.c", "if ((d->spec.kind != S2_KERNEL_FWD && d->spec.kind != S2_KERNEL_BWD && "
     "d->spec.kind != S2_KERNEL_DECODE) || d->threads != 32 * d->spec.num_warps || d->spec.block_m < 16 ||"),
    ("runtime/attn_module.c", "d->spec.block_n < 16)"),
    # the tensor maps' own bounds (a box of at most 256 rows, 64-element swizzled boxes over rows of 16 to 256
    # elements), not a template's rule
    ("runtime/attn_fwd.c", "if (spec->head_dim % 16 != 0 || spec->head_dim < 16 || spec->head_dim > 256 || "
     "spec->block_n < 1 ||"),
    ("runtime/attn_fwd.c", "spec->block_n > 256)"),
    ("driver/emit_c.c", "(!dti || !dti->kernels || dti->tensor_map < 0 || k->head_dim < 16 || k->head_dim % 16 != 0 ||"),
    ("driver/emit_c.c", "k->head_dim > 256 || k->kv_box_rows < 1 || k->kv_box_rows > 256))"),
}


def code_of(text):
    """C text without comments and string literals (line breaks kept)."""
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r'"(?:\\.|[^"\\\n])*"', '""', text)


def sources(root, folder):
    d = os.path.join(root, folder)
    out = []
    for base, _, names in os.walk(d):
        out += [os.path.join(base, n) for n in sorted(names) if n.endswith((".c", ".h"))]
    return sorted(out)


def template_names(root):
    """The functions templates/'s headers declare and the constants templates/ defines (enums, #defines)."""
    funcs, consts = set(), set()
    for path in sources(root, "templates"):
        code = code_of(open(path, encoding="utf-8", errors="replace").read())
        for body in re.findall(r"\benum\b[^{;]*\{([^}]*)\}", code):
            for item in body.split(","):
                m = re.match(r"\s*([A-Za-z_]\w*)\s*(?:=|$)", item)
                if m:
                    consts.add(m.group(1))
        consts.update(re.findall(r"^\s*#\s*define\s+([A-Za-z_]\w*)", code, re.M))
        if path.endswith(".h"):
            for m in re.finditer(r"^([A-Za-z_][\w \t*]*?)\b(s2_\w+)\s*\(", code, re.M):
                if not m.group(1).lstrip().startswith("typedef"):
                    funcs.add(m.group(2))
    consts = {c for c in consts if not re.match(r"^S2C_\w+_H$", c)}   # include guards
    return ({f for f in funcs if not TABLE_API.match(f)}, {c for c in consts if not TABLE_API.match(c)})


def check_templates(root):
    problems = []
    funcs, consts = template_names(root)
    for folder in NOT_TEMPLATES:
        for path in sources(root, folder):
            rel = os.path.relpath(path, root)
            code = code_of(open(path, encoding="utf-8", errors="replace").read())
            names = funcs | (consts if folder in NO_TEMPLATE_CONSTANTS else set())
            for m in re.finditer(r"\b[A-Za-z_]\w*\b", code):
                if m.group(0) in names:
                    line = code.count("\n", 0, m.start()) + 1
                    what = "template function" if m.group(0) in funcs else "template constant"
                    problems.append("%s:%d: %s %s outside templates/ (ask the table, template.h)"
                                    % (rel, line, what, m.group(0)))
            if folder not in NO_TEMPLATE_CONSTANTS:
                continue
            for i, text in enumerate(code.split("\n")):
                for m in TUNABLE_VS_NUMBER.finditer(text):
                    if int(m.group(1) or m.group(2)) > 1 and (rel, text.strip()) not in TUNABLE_KNOWN:
                        problems.append("%s:%d: a template's rule (a tunable compared with %s): ask the table or "
                                        "the manifest record" % (rel, i + 1, m.group(1) or m.group(2)))
    return problems


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
    return problems + check_templates(root)


def self_test():
    """Each rule, broken once in a small tree, must be reported."""
    cases = {
        "runtime includes codegen": ("runtime/a.c", '#include "cg_internal.h"\n', "codegen/cg_internal.h"),
        "ir includes a template header": ("ir/a.c", '#include "template.h"\n', "templates/template.h"),
        "patterns includes ir": ("patterns/a.c", '#include "s2c/layout.h"\n', None),
        "codegen includes the runtime": ("codegen/a.c", '#include "s2c/attn_runtime.h"\n', None),
        "codegen includes templates": ("codegen/a.c", '#include "flash.h"\n', "templates/flash.h"),
        "runtime links codegen": ("runtime/meson.build", "link_with : [s2_codegen]\n", None),
        "driver calls a template": ("driver/a.c", "int f(void) { return s2_fwd_build(0); }\n",
                                    ("templates/template.h", "s2_status s2_fwd_build(s2_ctx *ctx);\n")),
        "runtime holds a template constant": ("runtime/a.c", "enum { WIDE_MIN_KEYS = 384 };\n",
                                              ("templates/template.c", "enum { WIDE_MIN_KEYS = 384 };\n")),
        "driver hard-codes a head dim": ("driver/a.c", "int f(const s *spec) { return spec->head_dim != 128; }\n",
                                         None),
        "runtime hard-codes a threshold": ("runtime/a.c", "bool f(int keys) { return 384 <= r->min_keys; }\n",
                                           None),
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
                other_path, other_text = other if isinstance(other, tuple) else (other, "")
                with open(os.path.join(root, other_path), "w") as f:
                    f.write(other_text)
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
            f.write('#include "s2c/layout.h"\n#include "s2c/codegen.h"\nenum { WIDE_MIN_KEYS = 384 };\n')
        with open(os.path.join(root, "templates", "template.h"), "w") as f:
            f.write("s2_status s2_fwd_build(s2_ctx *ctx);\nconst s2_template *s2_template_for(const s2_kspec *s);\n")
        with open(os.path.join(root, "driver", "a.c"), "w") as f:
            f.write("/* s2_fwd_build, WIDE_MIN_KEYS */ int f(const s2_kspec *spec) { return s2_template_for(spec) && "
                    "spec->block_m > 0 && spec->num_warps != 1; }\n")
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
