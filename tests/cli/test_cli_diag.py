#!/usr/bin/env python3
"""s2c's diagnostics and `--version --verbose` (run by meson: test_cli_diag.py S2C_BINARY FAKE_LIBCUDA).

One style, as gcc's: every line on stderr is `s2c: error: ...`, `s2c: note: ...` or
`FILE:LINE:COL: error: ...`; exit 2 for usage errors (with a note naming --help), 1 for
bad input; "did you mean 'X'?" for misspelt subcommands, options, pattern keys and
--name; a layout longer than an explicit mask is reported at the mask's reference.
`--version --verbose` names the generator, LLVM, ptxas, nvJitLink, the driver (a
version, "stub" or "none") and the cache directory and whether it is trusted, each
checked against a controlled environment."""
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile

S2C = os.path.abspath(sys.argv[1])
FAKE_CUDA = os.path.abspath(sys.argv[2])
PATTERNS = os.environ.get("S2C_PATTERNS", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                                       "patterns"))

failures = []
count = 0

# the only shapes a line on stderr may take
LINE = re.compile(r"^(s2c: (error|note): \S.*|[^:\n]+:\d+:\d+: error: \S.*)$")


def check(name, cond, detail=""):
    global count
    count += 1
    if cond:
        print(f"ok {count} - {name}")
    else:
        print(f"not ok {count} - {name}\n# {detail}")
        failures.append(name)


def run(*args, env=None, cwd=None):
    p = subprocess.run([S2C, *args], capture_output=True, text=True, errors="replace", timeout=60,
                       env=env, cwd=cwd, stdin=subprocess.DEVNULL)
    return p.returncode, p.stdout, p.stderr


def pat(name):
    return os.path.join(PATTERNS, name + ".yaml")


def expect(name, args, rc_want, err_want, cwd=None):
    """s2c ARGS exits rc_want with exactly err_want on stderr, every line in the one style."""
    rc, out, err = run(*args, cwd=cwd)
    styled = all(LINE.match(l) for l in err.splitlines())
    check(f"{name}: exit {rc_want}, exactly the message", rc == rc_want and err == err_want and styled,
          f"rc={rc}\n# got  {err!r}\n# want {err_want!r}")


def usage(cmd, msg):
    return f"s2c: error: {msg}\ns2c: note: try 's2c {cmd + ' ' if cmd else ''}--help'\n"


def test_usage_errors():
    dense = pat("dense")
    cases = [
        ("misspelt command", ("layuot", dense), usage("", "unknown command 'layuot'; did you mean 'layout'?")),
        ("misspelt command after help", ("help", "compil"),
         usage("", "help: unknown command 'compil'; did you mean 'compile'?")),
        ("misspelt --version", ("--verison",), usage("", "unknown command '--verison'; did you mean '--version'?")),
        ("unknown command, nothing near", ("frobnicate",), usage("", "unknown command 'frobnicate'")),
        ("no command", (), usage("", "missing command")),
        ("misspelt option", ("check", dense, "--formt", "json"),
         usage("check", "check: unknown option '--formt'; did you mean '--format'?")),
        ("misspelt option of compile", ("compile", dense, "--head-dimm", "64"),
         usage("compile", "compile: unknown option '--head-dimm'; did you mean '--head-dim'?")),
        ("unknown option, nothing near", ("info", "x.cubin", "--bogus"), usage("info", "info: unknown option '--bogus'")),
        ("another command's option", ("layout", dense, "--seq-len", "64", "--arch", "sm_80"),
         usage("layout", "layout: option '--arch' does not apply to layout")),
        ("a bad number", ("layout", dense, "--seq-len", "abc"),
         usage("layout", "layout: --seq-len: expected an integer in 1..2147483648, got 'abc'")),
        ("a missing operand", ("layout", "--seq-len", "64"), usage("layout", "layout: missing PATTERN file")),
        ("kv-memory: --prefill past a length (usage, before the pattern is read)",
         ("kv-memory", "/nonexistent.yaml", "--seq-len", "64,128", "--prefill", "100"),
         usage("kv-memory", "kv-memory: --prefill 100 exceeds --seq-len 64")),
        ("kv-memory: --format before the pattern is read", ("kv-memory", "/nonexistent.yaml", "--seq-len", "64",
                                                            "--format", "yaml"),
         usage("kv-memory", "kv-memory: --format must be text or json, got 'yaml'")),
        ("compile: usage before the pattern is read", ("compile", "/nonexistent.yaml", "--arch", "sm_80", "-o", "x"),
         usage("compile", "compile: --head-dim and --dtype are required")),
    ]
    for name, args, want in cases:
        expect(name, args, 2, want)


def test_input_errors():
    with tempfile.TemporaryDirectory() as d:
        top = os.path.join(d, "top.yaml")
        with open(top, "w") as f:
            f.write("hedas: 4\nblock_size: 64\ndense: true\n")
        expect("misspelt pattern key", ("check", top), 1,
               f"{top}:1:1: error: pattern: unknown key 'hedas'; did you mean 'heads'?\n")
        nested = os.path.join(d, "nested.yaml")
        with open(nested, "w") as f:
            f.write("heads: 4\nblock_size: 64\nlocal_stride:\n  local_blocks: 2\n  vert_strid: 4\n")
        expect("misspelt nested key", ("layout", nested, "--seq-len", "64"), 1,
               f"{nested}:5:3: error: local_stride: unknown key 'vert_strid'; did you mean 'vert_stride'?\n")
        far = os.path.join(d, "far.yaml")
        with open(far, "w") as f:
            f.write("heads: 4\nblock_size: 64\nstride_local: {local_blocks: 2, vert_stride: 4}\n")
        expect("unknown key with nothing near: the keys listed", ("check", far), 1,
               f"{far}:3:1: error: pattern: unknown key 'stride_local' (expected one of: name, heads, kv_heads, "
               "block_size, causal, max_seq_len, local_stride, dense, mask, mask_case, overrides, ranges)\n")
        expect("a missing pattern file", ("check", os.path.join(d, "nope.yaml")), 1,
               f"s2c: error: {d}/nope.yaml: No such file or directory\n")
        expect("misspelt --name", ("layout", pat("hhst-mixed"), "--seq-len", "64", "--name", "sparse-layr"), 1,
               f"s2c: error: {pat('hhst-mixed')}: no pattern named 'sparse-layr'; did you mean 'sparse-layer'?\n")
        # a layout longer than an explicit mask: at the mask's reference, base rule or override
        with open(os.path.join(d, "m.txt"), "w") as f:
            f.write("case c\nshape 1 2 2\n10\n11\nend\n")
        base = os.path.join(d, "base.yaml")
        with open(base, "w") as f:
            f.write("heads: 2\nblock_size: 64\nmask: m.txt\n")
        expect("layout past the base rule's mask", ("layout", base, "--seq-len", "256"), 1,
               f"{base}:3:7: error: mask: head 0: 4 blocks exceed the explicit mask 'c' (2 x 2 blocks)\n")
        expect("layout within the mask", ("layout", base, "--seq-len", "128", "--format", "mask"), 0, "")
        ovr = os.path.join(d, "ovr.yaml")
        with open(ovr, "w") as f:
            f.write("heads: 2\nblock_size: 64\nlocal_stride: {local_blocks: 2, vert_stride: 4}\n"
                    "overrides:\n  - heads: 1\n    mask: m.txt\n")
        expect("layout past an override's mask", ("layout", ovr, "--seq-len", "192", "--kv-len", "192"), 1,
               f"{ovr}:6:11: error: overrides[0].mask: head 1: 3 blocks exceed the explicit mask 'c' (2 x 2 blocks)\n")
        expect("kv-memory past the mask: the same place", ("kv-memory", base, "--seq-len", "256"), 1,
               f"{base}:3:7: error: mask: head 0: 4 blocks exceed the explicit mask 'c' (2 x 2 blocks)\n")
        expect("a file that is not a cubin", ("info", base), 1,
               f"s2c: error: {base}: ELF: image of {os.path.getsize(base)} bytes is shorter than an ELF64 header\n")


# ---- --version --verbose --------------------------------------------------------

# A stand-in for the CUDA toolkit's stub libcuda: cuGetProcAddress and cuInit answer
# CUDA_ERROR_STUB_LIBRARY (34), as the stub's every entry point does.
STUB_C = """
int cuGetProcAddress_v2(const char *s, void **f, int v, unsigned long long fl, int *st);
int cuInit(unsigned flags);
int cuGetProcAddress_v2(const char *s, void **f, int v, unsigned long long fl, int *st)
{ (void)s; (void)v; (void)fl; *f = 0; if (st) *st = 1; return 34; }
int cuInit(unsigned flags) { (void)flags; return 34; }
"""


def version_env(d, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("S2C_") or k in ("S2C_SANITIZED",)}
    env.update({"S2C_PTXAS": os.path.join(d, "ptxas"), "S2C_NVJITLINK": os.path.join(d, "no-nvjitlink.so"),
                "S2C_LIBCUDA": FAKE_CUDA, "S2C_CACHE_DIR": os.path.join(d, "cache")})
    env.update(extra)
    return env


def test_version():
    rc, out, err = run("--version")
    check("--version: one line", rc == 0 and re.fullmatch(r"s2c \d+\.\d+\.\d+\n", out) and err == "", out + err)
    version = out.split()[1] if rc == 0 else "?"
    with tempfile.TemporaryDirectory() as d:
        # the generator identity, as the manifest of a module this s2c compiles records it
        cub = os.path.join(d, "dense.cubin")
        rc1, o1, e1 = run("compile", pat("dense"), "--head-dim", "64", "--dtype", "bf16", "--arch", "sm_80", "-o", cub)
        rc2, info, e2 = run("info", cub)
        m = re.search(r"generator s2c (\S+),", info)
        gen = m.group(1) if rc1 == 0 and rc2 == 0 and m else None
        check("the generator identity from a compiled module's manifest", gen is not None, e1 + e2)
        llvm = gen.split("+llvm", 1)[1] if gen and "+llvm" in gen else "?"
        ptxas = os.path.join(d, "ptxas")
        with open(ptxas, "w") as f:
            f.write("#!/bin/sh\necho 'ptxas: NVIDIA (R) Ptx optimizing assembler'\n"
                    "echo 'Cuda compilation tools, release 99.1, V99.1.2'\n")
        os.chmod(ptxas, 0o755)
        os.mkdir(os.path.join(d, "cache"), 0o700)
        env = version_env(d)
        want = (f"s2c {version}\ngenerator: {gen}\nllvm: {llvm}\n"
                f"ptxas: {ptxas} (Cuda compilation tools, release 99.1, V99.1.2)\n"
                f"nvjitlink: none (tried {d}/no-nvjitlink.so)\n"
                f"driver: 12.8\n"
                f"cache: {d}/cache (trusted)\n")
        for flags in (("--version", "--verbose"), ("--version", "-v"), ("--verbose", "--version")):
            rc, out, err = run(*flags, env=env)
            check(f"s2c {' '.join(flags)}: every line, exactly (fake driver 12.8, a stand-in ptxas)",
                  rc == 0 and out == want and err == "", f"rc={rc} {err!r}\n# got  {out!r}\n# want {want!r}")
        # no ptxas, no driver library, a cache directory others may write
        os.chmod(os.path.join(d, "cache"), 0o777)
        env = version_env(d, S2C_PTXAS=os.path.join(d, "none"), S2C_LIBCUDA=os.path.join(d, "libcuda.so.1"))
        rc, out, err = run("--version", "--verbose", env=env)
        lines = dict(l.split(": ", 1) for l in out.splitlines()[1:]) if rc == 0 else {}
        check("no ptxas: none, and where it was looked for",
              lines.get("ptxas") == "none (not found: $S2C_PTXAS, $PATH, $CUDA_HOME/bin, /usr/local/cuda/bin)",
              repr(out))
        check("no driver library: none, and why",
              lines.get("driver", "").startswith(f"none (cannot load the CUDA driver {d}/libcuda.so.1: "), repr(out))
        check("a cache directory writable by others: not trusted, and why",
              lines.get("cache", "").startswith(f"{d}/cache (not trusted: cache directory {d}/cache is not used: it "
                                                "is writable by others (mode 0777) without the sticky bit"),
              repr(out))
        cc = shutil.which("cc")
        check("a C compiler for the stub driver", cc is not None)
        if cc:
            src, lib = os.path.join(d, "stub.c"), os.path.join(d, "libcuda_stub.so")
            with open(src, "w") as f:
                f.write(STUB_C)
            built = subprocess.run([cc, "-shared", "-fPIC", "-o", lib, src], capture_output=True, text=True)
            rc, out, err = run("--version", "--verbose", env=version_env(d, S2C_LIBCUDA=lib))
            drv = [l for l in out.splitlines() if l.startswith("driver: ")]
            check("the toolkit's stub libcuda: driver stub, and the runtime's reason", built.returncode == 0 and
                  rc == 0 and len(drv) == 1 and drv[0].startswith(f"driver: stub (the CUDA driver ({lib}) "),
                  built.stderr + repr(out))
        rc, out, err = run("--version", "--bogus")
        check("--version with another argument: usage error", rc == 2 and err == usage(
            "", "--version: unexpected argument '--bogus' (only --verbose)"), f"rc={rc} {err!r}")


def main():
    for t in (test_usage_errors, test_input_errors, test_version):
        try:
            t()
        except Exception as e:  # a crash in a test is a failure, not a pass
            import traceback
            traceback.print_exc()
            check(t.__name__ + " raised", False, repr(e))
    print(f"{count - len(failures)} of {count} CLI diagnostics checks passed")
    sys.exit(1 if failures else 0)


main()
