#!/usr/bin/env python3
"""End-to-end tests of the s2c command line (run by meson: test_cli.py S2C_BINARY).

Checks exit codes (0 ok, 1 bad input, 2 usage), that every golden mask of the
S2 library comes out of `s2c layout --format mask` exactly, that every bad
pattern file gives exactly one `file:line:col: message` line, and that the
stock patterns check, lay out and compile."""
import json
import os
import re
import subprocess
import sys
import tempfile

S2C = sys.argv[1]
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
GOLDEN = os.environ.get("S2C_GOLDEN", os.path.join(ROOT, "tests", "data", "s2_golden_masks.txt"))
PATTERNS = os.environ.get("S2C_PATTERNS", os.path.join(ROOT, "patterns"))
BAD_DIR = os.path.join(ROOT, "tests", "pattern", "bad")

failures = []
count = 0


def run(*args):
    p = subprocess.run([S2C, *args], capture_output=True, text=True, errors="replace", timeout=120)
    return p.returncode, p.stdout, p.stderr


def check(name, cond, detail=""):
    global count
    count += 1
    if cond:
        print(f"ok {count} - {name}")
    else:
        print(f"not ok {count} - {name}\n# {detail}")
        failures.append(name)


def golden_cases():
    lines = open(GOLDEN).read().split("\n")
    i = 0
    while i < len(lines):
        if lines[i].startswith("case "):
            name, js = lines[i][5:].split(" ", 1)
            h, m, n = map(int, lines[i + 1].split()[1:])
            rows = lines[i + 2:i + 2 + h * m]
            assert lines[i + 2 + h * m] == "end"
            yield name, json.loads(js), h, m, n, rows
            i += 3 + h * m
        else:
            i += 1


def parse_mask_output(text):
    lines = text.strip("\n").split("\n")
    assert lines[0].startswith("case "), lines[0]
    h, m, n = map(int, lines[1].split()[1:])
    rows = lines[2:2 + h * m]
    assert lines[2 + h * m] == "end" and len(lines) == 3 + h * m, "trailing output"
    return h, m, n, rows


def test_golden():
    cases = list(golden_cases())
    check("golden file has 10 cases", len(cases) == 10, str(len(cases)))
    for name, kw, h, m, n, rows in cases:
        rc, out, err = run("layout", os.path.join(HERE, "golden", name + ".yaml"),
                           "--seq-len", str(kw["seqlen"]), "--format", "mask")
        if rc != 0:
            check(f"golden {name}", False, err)
            continue
        oh, om, on, orows = parse_mask_output(out)
        heads = kw["num_heads"]
        # the file shares one mask (H = 1) when every query head has the same one
        want = rows if h == heads else [rows[r % (m)] for r in range(heads * m)] if h == 1 else None
        ok = (oh, om, on) == (heads, m, n) and orows == want
        detail = ""
        if not ok and (oh, om, on) == (heads, m, n):
            bad = next(i for i in range(len(want)) if orows[i] != want[i])
            detail = f"head {bad // m} row {bad % m}: got {orows[bad]} want {want[bad]}"
        check(f"golden {name} ({heads}x{m}x{n})", ok, detail or f"shape {(oh, om, on)}")


LOC = re.compile(r"^(?P<file>[^:\n]+):(?P<line>\d+):(?P<col>\d+): \S.*$")


def test_bad_files():
    files = sorted(f for f in os.listdir(BAD_DIR) if not f.startswith("."))
    check("there are bad pattern files", len(files) >= 10, str(len(files)))
    for f in files:
        path = os.path.join(BAD_DIR, f)
        rc, out, err = run("check", path)
        lines = err.strip("\n").split("\n")
        ok = rc == 1 and len(lines) == 1 and LOC.match(lines[0]) and lines[0].startswith(path + ":")
        check(f"bad file {f}: exit 1 and one file:line:col line", bool(ok), f"rc={rc} stderr={err!r}")
        rc, out, err = run("layout", path, "--seq-len", "1024")
        check(f"bad file {f}: layout exit 1", rc == 1 and len(err.strip().split("\n")) == 1, f"rc={rc} {err!r}")
    rc, out, err = run("check", os.path.join(BAD_DIR, "does-not-exist.yaml"))
    check("missing file: exit 1", rc == 1 and "does-not-exist.yaml" in err, err)


def test_usage():
    for args in [(), ("frobnicate",), ("layout",), ("layout", "x.yaml"),
                 ("layout", os.path.join(PATTERNS, "phi3-small.yaml"), "--seq-len", "abc"),
                 ("layout", os.path.join(PATTERNS, "phi3-small.yaml"), "--seq-len", "64", "--format", "pdf"),
                 ("compile", os.path.join(PATTERNS, "phi3-small.yaml")),
                 ("compile", os.path.join(PATTERNS, "phi3-small.yaml"), "--arch", "sm_12", "-o", "x"),
                 ("check", "--bogus")]:
        rc, out, err = run(*args)
        check(f"usage error {' '.join(args)[-50:]!r}: exit 2", rc == 2, f"rc={rc} {err!r}")
    rc, out, err = run("--help")
    check("--help exits 0 and lists the commands", rc == 0 and "layout" in out and "compile" in out)
    rc, out, err = run("--version")
    check("--version", rc == 0 and out.startswith("s2c "), out)


def test_stock():
    stock = ["phi3-small", "s2-l8v16", "mergeq-b16", "dense", "sliding-window"]
    for s in stock:
        path = os.path.join(PATTERNS, s + ".yaml")
        rc, out, err = run("check", path)
        check(f"check {s}", rc == 0 and "ok" in out, err)
        rc, out, err = run("layout", path, "--seq-len", "4096", "--format", "schedule")
        check(f"layout {s} schedule", rc == 0 and len(out) > 0, err)
    rc, out, err = run("layout", os.path.join(PATTERNS, "phi3-small.yaml"), "--seq-len", "8192", "--format", "stats")
    check("phi3-small stats print kept fraction and FLOPs",
          rc == 0 and re.search(r"kept", out, re.I) and re.search(r"FLOP", out), out + err)
    rc, out, err = run("layout", os.path.join(PATTERNS, "phi3-small.yaml"), "--seq-len", "64",
                       "--kv-len", "8192", "--format", "mask")
    check("decode-shaped layout (64 queries at the end of 8192 keys)", rc == 0 and "shape 32 1 128" in out, out[:200] + err)
    rc, out, err = run("layout", os.path.join(PATTERNS, "phi3-small.yaml"), "--seq-len", "262144")
    check("seq-len beyond max_seq_len is bad input", rc == 1, f"rc={rc} {err}")


def test_compile():
    with tempfile.TemporaryDirectory() as d:
        pat = os.path.join(PATTERNS, "s2-l8v16.yaml")
        for arch in ["sm_80", "sm_90a"]:
            ptx = os.path.join(d, f"k_{arch}.ptx")
            rc, out, err = run("compile", pat, "--arch", arch, "--emit", "ptx", "-o", ptx)
            ok = rc == 0 and os.path.exists(ptx) and ".entry" in open(ptx).read()
            check(f"compile --emit ptx {arch}", ok, err)
            cub = os.path.join(d, f"k_{arch}.cubin")
            rc, out, err = run("compile", pat, "--arch", arch, "-o", cub)
            ok = rc == 0 and os.path.exists(cub) and open(cub, "rb").read(4) == b"\x7fELF"
            check(f"compile cubin {arch}", ok, err)
        dump = os.path.join(d, "dump")
        os.mkdir(dump)
        rc, out, err = run("compile", pat, "--arch", "sm_90a", "--emit", "ll", "-o", os.path.join(d, "k.ll"),
                           "--dump-dir", dump)
        check("compile --emit ll with --dump-dir writes stage files",
              rc == 0 and any(f.endswith(".ll") for f in os.listdir(dump)), err + str(os.listdir(dump)))


def main():
    for t in (test_golden, test_bad_files, test_usage, test_stock, test_compile):
        try:
            t()
        except Exception as e:  # a crash in a test is a failure, not a pass
            check(t.__name__ + " raised", False, repr(e))
    print(f"{count - len(failures)} of {count} CLI checks passed")
    sys.exit(1 if failures else 0)


main()
