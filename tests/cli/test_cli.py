#!/usr/bin/env python3
"""End-to-end tests of the s2c command line (run by meson: test_cli.py S2C_BINARY).

Checks exit codes (0 ok, 1 bad input, 2 usage), that every golden mask of the
S2 library comes out of `s2c layout --format mask` exactly, that every bad
pattern file gives exactly one `file:line:col: message` line, and that the
stock patterns check, lay out and compile: every stock pattern x head dim
64/128 x bf16/fp16 x sm_80/sm_90a to a cubin without spills, `s2c info`
reading the manifest back, --emit c output that a strict C11 compiler
accepts, multi-pattern files, tunables and their errors."""
import concurrent.futures
import glob
import json
import os
import re
import subprocess
import sys
import shutil
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


LOC = re.compile(r"^(?P<file>[^:\n]+):(?P<line>\d+):(?P<col>\d+): error: \S.*$")


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
                 ("compile", os.path.join(PATTERNS, "phi3-small.yaml"), "--arch", "sm_90a", "-o", "x"),
                 ("compile", os.path.join(PATTERNS, "phi3-small.yaml"), "--arch", "sm_90a", "-o", "x",
                  "--head-dim", "64"),
                 ("compile", os.path.join(PATTERNS, "phi3-small.yaml"), "--arch", "sm_90a", "-o", "x",
                  "--head-dim", "64", "--dtype", "fp8"),
                 ("compile", os.path.join(PATTERNS, "phi3-small.yaml"), "--arch", "sm_90a", "-o", "x",
                  "--head-dim", "64", "--dtype", "bf16", "--emit", "so"),
                 ("compile", os.path.join(PATTERNS, "phi3-small.yaml"), "--arch", "sm_90a", "-o", "x",
                  "--kernel", "softmax", "--emit", "c"),
                 ("compile", os.path.join(PATTERNS, "phi3-small.yaml"), "--arch", "sm_90a", "-o", "x",
                  "--kernel", "softmax", "--head-dim", "64"),
                 ("compile", os.path.join(PATTERNS, "phi3-small.yaml"), "--arch", "sm_90a", "-o", "x",
                  "--kernel", "decode"),
                 ("layout", os.path.join(PATTERNS, "hhst-mixed.yaml"), "--seq-len", "64",
                  "--name", "dense-layer", "--name", "sparse-layer"),
                 ("info",), ("info", "a.cubin", "b.cubin"),
                 ("check", "--bogus")]:
        rc, out, err = run(*args)
        check(f"usage error {' '.join(args)[-50:]!r}: exit 2", rc == 2, f"rc={rc} {err!r}")
    rc, out, err = run("--help")
    check("--help exits 0 and lists the commands",
          rc == 0 and all(w in out for w in ("check", "layout", "compile", "info", "kv-memory")))
    rc, out, err = run("compile", "--help")
    check("compile --help lists its options", rc == 0 and "--emit cubin|c|ptx|ll" in out, out + err)
    rc, out, err = run("--version")
    check("--version", rc == 0 and out.startswith("s2c "), out)


def test_dtypes():
    """--dtype takes the dtype table's CLI spellings; e5m2 is named and refused until a template takes it;
    e4m3 compiles the sm_90a forward only."""
    phi3 = os.path.join(PATTERNS, "phi3-small.yaml")
    for cmd, args in [("compile", ("--head-dim", "64", "--arch", "sm_90a", "-o", "x")),
                      ("layout", ("--seq-len", "64")), ("kv-memory", ("--seq-len", "64"))]:
        for dt, title in [("e5m2", "fp8 e5m2")]:
            rc, out, err = run(cmd, phi3, *args, "--dtype", dt)
            want = f"s2c: error: {cmd}: --dtype {dt}: {title} is not supported by any template yet"
            check(f"{cmd} --dtype {dt}: refused by name", rc == 2 and want in err, f"rc={rc} {err!r}")
        rc, out, err = run(cmd, phi3, *args, "--dtype", "fp64")
        check(f"{cmd} --dtype fp64: the table's kernel dtypes listed",
              rc == 2 and f"{cmd}: --dtype must be fp32, fp16, bf16 or fp8_e4m3, got 'fp64'" in err,
              f"rc={rc} {err!r}")
    with tempfile.TemporaryDirectory() as d:
        rc, out, err = run("compile", phi3, "--head-dim", "64", "--arch", "sm_80", "--dtype", "fp8_e4m3", "--emit",
                           "ptx", "-o", os.path.join(d, "k.ptx"))
        check("compile --dtype fp8_e4m3 --arch sm_80: refused", rc != 0 and "sm_90a only" in err, f"rc={rc} {err!r}")
        rc, out, err = run("compile", phi3, "--head-dim", "64", "--arch", "sm_90a", "--dtype", "fp8_e4m3", "--emit",
                           "ptx", "-o", os.path.join(d, "k.ptx"))
        check("compile --dtype fp8_e4m3 --arch sm_90a", rc == 0 and "k32.f32.e4m3.e4m3" in open(os.path.join(d, "k.ptx")).read(),
              f"rc={rc} {err!r}")
    with tempfile.TemporaryDirectory() as d:
        for dt in ("fp16", "f16", "bf16", "fp32"):
            rc, out, err = run("compile", phi3, "--head-dim", "64", "--arch", "sm_80", "--dtype", dt, "--emit", "ptx",
                               "-o", os.path.join(d, "k.ptx"))
            check(f"compile --dtype {dt}", rc == 0, f"rc={rc} {err!r}")


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


KERNEL = re.compile(r"^kernel (\S+): pattern (\S+), fwd (\w+), head_dim (\d+), block_m (\d+), block_n (\d+), "
                    r"num_warps (\d+), num_stages (\d+), (\d+) threads, (\d+) bytes smem$", re.M)
RESOURCES = re.compile(r"^(\S+): (-?\d+) registers, (-?\d+) bytes spill stores, (-?\d+) bytes spill loads", re.M)
INFO_REGS = re.compile(r"^  registers (\d+) \(EIATTR_REGCOUNT\)$", re.M)
CUDA_INCLUDE = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"),
                                                                  "include")


def stock_files():
    return sorted(glob.glob(os.path.join(PATTERNS, "*.yaml")))


def pattern_names(path):
    rc, out, err = run("check", path)
    assert rc == 0, err
    return re.findall(r"^pattern (\S+) \(", out, re.M)


def symbol(pattern, dtype, head_dim):
    return "s2_fwd_" + re.sub(r"[^A-Za-z0-9_]", "_", pattern) + f"_{dtype}_d{head_dim}"


def kernels_of(text):
    """{symbol: (pattern, dtype, head_dim, block_m, block_n, num_warps, num_stages, threads, smem)}"""
    return {m[0]: (m[1], m[2]) + tuple(int(x) for x in m[3:]) for m in KERNEL.findall(text)}


def info_sections(text):
    """Pattern name -> the lines of its summary in `s2c info` output."""
    out, cur = {}, None
    for line in text.split("\n"):
        m = re.match(r"^pattern (\S+)$", line)
        if m:
            cur = out.setdefault(m.group(1), [])
        elif cur is not None and line.startswith("  "):
            cur.append(line[2:])
        elif not line.startswith("  "):
            cur = None
    return out


def check_sections(text):
    """Pattern name -> summary lines of `s2c check` (without the file line and the kv-cache line)."""
    out, cur = {}, None
    for line in text.split("\n"):
        m = re.match(r"^pattern (\S+) \(", line)
        if m:
            cur = out.setdefault(m.group(1), [])
        elif line.startswith("  kv-cache"):
            cur = None
        elif cur is not None:
            cur.append(line)
    return out


def without_line_numbers(lines):
    return [re.sub(r" \(line \d+\)", "", l) for l in lines]


def compile_and_inspect(d, path, head_dim, dtype, arch):
    """Compile a pattern file to a cubin with -v and read it back with info; a list of problems."""
    stem = os.path.basename(path)[:-5]
    out_path = os.path.join(d, f"{stem}_{head_dim}_{dtype}_{arch}.cubin")
    rc, out, err = run("compile", path, "--head-dim", str(head_dim), "--dtype", dtype, "--arch", arch,
                       "-o", out_path, "-v")
    if rc != 0:
        return [f"compile rc={rc}: {err.strip()[-300:]}"]
    problems = []
    names = pattern_names(path)
    dt = "f16" if dtype == "fp16" else dtype
    want = {symbol(n, dt, head_dim): n for n in names}
    got = kernels_of(out)
    if set(got) != set(want):
        problems.append(f"kernels {sorted(got)} want {sorted(want)}")
    for sym, k in got.items():
        if k[0] != want.get(sym) or k[1] != dt or k[2] != head_dim:
            problems.append(f"{sym}: {k}")
        bm, bn, warps, stages, threads = k[3:8]
        # mma.sync template: one 16-row slab per warp; sm_90a wgmma template (head dims 64 and
        # 128): a producer warpgroup plus one consumer warpgroup per 64 rows
        tma = arch == "sm_90a" and head_dim in (64, 128)
        want_warps = 4 * (bm // 64 + 1) if tma else bm // 16
        if warps != want_warps or threads != 32 * warps or not 1 <= stages <= 4 or bn not in (16, 32, 64, 128):
            problems.append(f"{sym}: inconsistent tunables {k}")
    res = {m[0]: tuple(int(x) for x in m[1:]) for m in RESOURCES.findall(err)}
    for sym in want:
        r = res.get(sym)
        if not r:
            problems.append(f"{sym}: no resource line in -v output")
        elif r[1] != 0 or r[2] != 0 or r[0] <= 0:
            problems.append(f"{sym}: {r[0]} registers, spill stores {r[1]}, spill loads {r[2]}")
    with open(out_path, "rb") as f:
        if f.read(4) != b"\x7fELF":
            problems.append("output is not an ELF cubin")
    rc, iout, ierr = run("info", out_path)
    if rc != 0:
        return problems + [f"info rc={rc}: {ierr}"]
    first = iout.split("\n", 1)[0]
    n = len(want)
    if f"arch {arch}" not in first or f" {n} kernel{'s' if n != 1 else ''}, {n} pattern" not in first:
        problems.append(f"info header: {first}")
    if kernels_of(iout) != got:
        problems.append(f"info kernels {kernels_of(iout)} differ from compile's {got}")
    # registers from the ELF's EIATTR_REGCOUNT, per kernel in manifest order, against ptxas's report
    order = [m[0] for m in KERNEL.findall(iout)]
    regs = [int(x) for x in INFO_REGS.findall(iout)]
    if len(regs) != len(order) or any(res.get(s, (None,))[0] != r for s, r in zip(order, regs)):
        problems.append(f"info registers {regs} for {order}, ptxas said {res}")
    if sorted(info_sections(iout)) != sorted(names):
        problems.append(f"info patterns {sorted(info_sections(iout))}")
    return problems


def test_compile_matrix():
    """Every stock pattern x head dim 64/128 x bf16/fp16 x sm_80/sm_90a: cubin, no spills, info round trip."""
    files = stock_files()
    check("there are stock patterns, hhst-mixed among them", len(files) >= 6 and any(
        f.endswith("hhst-mixed.yaml") for f in files), str(files))
    combos = [(f, hd, dt, arch) for f in files for hd in (64, 128) for dt in ("bf16", "fp16")
              for arch in ("sm_80", "sm_90a")]
    with tempfile.TemporaryDirectory() as d, concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 4) as pool:
        results = list(pool.map(lambda c: compile_and_inspect(d, *c), combos))
    for (f, hd, dt, arch), problems in zip(combos, results):
        check(f"compile {os.path.basename(f)} d{hd} {dt} {arch}: no spills, info matches",
              not problems, "; ".join(problems))


def test_multi_pattern():
    mixed = os.path.join(PATTERNS, "hhst-mixed.yaml")
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "mixed.cubin")
        rc, cout, err = run("compile", mixed, "--head-dim", "128", "--dtype", "bf16", "--arch", "sm_90a", "-o", out)
        rc2, iout, ierr = run("info", out)
        k = list(kernels_of(iout))
        check("hhst-mixed: one cubin holds both kernels, info lists them in file order",
              rc == 0 and rc2 == 0 and k == ["s2_fwd_dense_layer_bf16_d128", "s2_fwd_sparse_layer_bf16_d128"]
              and "2 kernels, 2 patterns" in iout, f"{rc} {rc2} {k} {err} {ierr}")
        # the patterns read back from the manifest describe like the pattern file
        rc, chk, err = run("check", mixed)
        want, got = check_sections(chk), info_sections(iout)
        same = sorted(want) == sorted(got) and all(
            without_line_numbers(want[n]) == without_line_numbers(got[n]) for n in want)
        check("manifest round trip: info's pattern summaries equal check's", same,
              f"check {want}\ninfo {got}")
        with open(out, "rb") as f:
            blob = f.read()
        check("both kernel symbols are in the cubin", all(s.encode() in blob for s in k), str(k))

        one = os.path.join(d, "sparse.cubin")
        rc, cout, err = run("compile", mixed, "--name", "sparse-layer", "--head-dim", "64", "--dtype", "fp16",
                            "--arch", "sm_80", "-o", one)
        rc2, iout, ierr = run("info", one)
        check("--name picks one pattern: one kernel, one pattern in the manifest",
              rc == 0 and list(kernels_of(iout)) == ["s2_fwd_sparse_layer_f16_d64"]
              and list(info_sections(iout)) == ["sparse-layer"] and "1 kernel, 1 pattern" in iout, iout + err)
        two = os.path.join(d, "two.cubin")
        rc, cout, err = run("compile", mixed, "--name", "sparse-layer", "--name", "dense-layer", "--head-dim", "64",
                            "--dtype", "bf16", "--arch", "sm_80", "-o", two)
        rc2, iout, ierr = run("info", two)
        check("repeated --name keeps the order given",
              rc == 0 and list(kernels_of(iout)) == ["s2_fwd_sparse_layer_bf16_d64", "s2_fwd_dense_layer_bf16_d64"],
              iout + err)
        rc, cout, err = run("compile", mixed, "--name", "dense-layer", "--name", "dense-layer", "--head-dim", "64",
                            "--dtype", "bf16", "--arch", "sm_80", "-o", two)
        check("the same --name twice is a usage error", rc == 2 and "twice" in err, f"rc={rc} {err}")
        rc, cout, err = run("compile", mixed, "--name", "nope", "--head-dim", "64", "--dtype", "bf16",
                            "--arch", "sm_80", "-o", os.path.join(d, "nope.cubin"))
        check("an unknown --name is bad input", rc == 1 and "'nope'" in err
              and not os.path.exists(os.path.join(d, "nope.cubin")), f"rc={rc} {err}")
        clash = os.path.join(d, "clash.yaml")
        with open(clash, "w") as f:
            f.write("patterns:\n  - {name: a-b, heads: 4, block_size: 64, dense: true}\n"
                    "  - {name: a_b, heads: 4, block_size: 64, dense: true}\n")
        rc, cout, err = run("compile", clash, "--head-dim", "64", "--dtype", "bf16", "--arch", "sm_80",
                            "-o", os.path.join(d, "clash.cubin"))
        check("two patterns with one kernel symbol: exit 1 naming both", rc == 1 and "a-b" in err and "a_b" in err
              and "s2_fwd_a_b_bf16_d64" in err, f"rc={rc} {err}")


def test_tunables():
    pat = os.path.join(PATTERNS, "phi3-small.yaml")
    base = ["compile", pat, "--head-dim", "128", "--dtype", "bf16", "--arch", "sm_90a"]
    with tempfile.TemporaryDirectory() as d:
        for extra, want in [(["--block-m", "128", "--block-n", "32", "--num-stages", "3"], (128, 32, 12, 3, 384)),  # wgmma: 1 producer + 2 consumer warpgroups
                            (["--num-warps", "2", "--block-n", "128", "--num-stages", "1"], (32, 128, 2, 1, 64)),
                            (["--block-m", "16"], (16, None, 1, None, 32))]:
            out = os.path.join(d, "t.cubin")
            rc, cout, err = run(*base, "-o", out, *extra)
            rc2, iout, ierr = run("info", out)
            k = list(kernels_of(iout).values())
            got = k[0][3:8] if len(k) == 1 else None
            ok = rc == 0 and rc2 == 0 and got is not None and all(
                w is None or g == w for g, w in zip(got, want)) and kernels_of(cout) == kernels_of(iout)
            check(f"tunables {' '.join(extra)} recorded in the manifest as {want}", ok, f"{got} {err} {ierr}")
        for extra, rc_want, words in [(["--block-m", "24"], 1, ["block_m 24"]),
                                      (["--num-warps", "3"], 1, ["3 warps"]),
                                      (["--num-stages", "5"], 1, ["num_stages 5"]),
                                      (["--block-m", "64", "--num-warps", "2"], 1, ["block_m 64", "2 warps"]),
                                      (["--block-m", "128", "--block-n", "128", "--num-stages", "4"], 1,
                                       ["shared memory"]),
                                      (["--block-n", "256"], 2, ["--block-n", "256"]),
                                      (["--num-warps", "x"], 2, ["--num-warps"]),
                                      (["--option", "persistnt=1"], 2, ["unknown kernel option", "persistnt"]),
                                      (["--option", "kv_gather=9"], 2, ["kv_gather", "0..4"]),
                                      (["--option", "bwd_tma"], 2, ["NAME=VALUE"])]:
            out = os.path.join(d, "bad.cubin")
            rc, cout, err = run(*base, "-o", out, *extra)
            lines = [l for l in err.strip().split("\n") if not l.startswith("s2c: note: ")]
            check(f"bad tunables {' '.join(extra)}: exit {rc_want}, one line naming the value",
                  rc == rc_want and len(lines) == 1 and all(w in err for w in words) and not os.path.exists(out),
                  f"rc={rc} {err!r}")


def test_template_options():
    """--option NAME=VALUE sets a template's own choice, and the manifest's kernel record carries it."""
    pat = os.path.join(PATTERNS, "phi3-small.yaml")
    base = ["compile", pat, "--head-dim", "128", "--dtype", "bf16", "--arch", "sm_90a"]
    with tempfile.TemporaryDirectory() as d:
        for opt, abi, grid in (("persistent=1", "fwd_tma_persistent", "persistent"), ("persistent=-1", "fwd_tma", "q_tiles")):
            out = os.path.join(d, "o.cubin")
            rc, cout, err = run(*base, "--option", opt, "-o", out)
            rc2, iout, ierr = run("info", out)
            want = f"  s2_fwd_phi3_small_bf16_d128: fwd, abi {abi}, grid {grid}, 256 threads"
            check(f"--option {opt}: the kernel record says abi {abi}, grid {grid}",
                  rc == 0 and rc2 == 0 and want in iout, cout + err + iout + ierr)


def cc_errors(cc, d, srcs):
    """Compile d/SRC for each of srcs with cc -std=c11 -Werror (the CUDA headers and d on the include path);
    the tail of each failure's stderr."""
    errs = []
    for src in srcs:
        p = subprocess.run([cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-c", "-I" + CUDA_INCLUDE, "-I" + d,
                            os.path.join(d, src), "-o", os.path.join(d, src + ".o")], capture_output=True, text=True)
        if p.returncode != 0:
            errs.append(p.stderr[-500:])
    return errs


def test_emit_c():
    cc = shutil.which("cc")
    check("a C compiler and cuda.h are present", cc and os.path.exists(os.path.join(CUDA_INCLUDE, "cuda.h")),
          f"cc={cc} include={CUDA_INCLUDE}")
    if not cc:
        return
    jobs = [(f, "128", "bf16", "sm_90") for f in stock_files()]
    jobs.append((os.path.join(PATTERNS, "hhst-mixed.yaml"), "64", "fp16", "sm_80"))
    with tempfile.TemporaryDirectory() as d:
        for i, (f, hd, dt, arch) in enumerate(jobs):
            stem = os.path.basename(f)[:-5]
            ident = re.sub(r"[^A-Za-z0-9_]", "_", stem)
            sub = os.path.join(d, str(i))
            os.mkdir(sub)
            rc, out, err = run("compile", f, "--head-dim", hd, "--dtype", dt, "--arch", arch, "--emit", "c",
                               "-o", os.path.join(sub, stem + ".c"))
            h, c = os.path.join(sub, ident + ".h"), os.path.join(sub, ident + ".c")
            launchers = re.findall(r"^launcher (\S+)$", out, re.M)
            dtn = "f16" if dt == "fp16" else dt
            # each forward, its NAME_seqs (cu_seqlens -> records) and NAME_combine (the LSE merge)
            want = [ident + "_" + symbol(n, dtn, int(hd))[3:] + sfx for n in pattern_names(f)
                    for sfx in ("", "_seqs", "_combine")]
            if rc != 0 or not os.path.exists(h) or not os.path.exists(c) or launchers != want:
                check(f"--emit c {stem} {dt} d{hd} {arch}", False, f"rc={rc} {launchers} want {want} {err}")
                continue
            # a user of the header: load, every launcher with its ABI, unload
            user = os.path.join(sub, "user.c")
            with open(user, "w") as u:
                u.write(f'#include "{ident}.h"\nint use(CUstream s);\nint use(CUstream s)\n{{\n'
                        f'    CUdeviceptr p = 0;\n    CUresult r = load_{ident}();\n')
                for name in launchers:
                    if name.endswith("_combine"):   # the combine launcher's call: tests/aot
                        continue
                    if name.endswith("_seqs"):   # cu_q, cu_k, seqinfo, n, max_kv_len
                        u.write(f"    if (r == CUDA_SUCCESS)\n        r = {name}(s, p, p, p, 1, 1);\n")
                        continue
                    u.write(f"    if (r == CUDA_SUCCESS)\n        r = {name}(s, p, p, p, p, p, 0, 0, 0, 0, 0, 0, "
                            "0, 0, 0, 0, 0, 0, 1, 1, 1.0f, p, p, p, 0, 1, p, 1, 1);\n")
                u.write(f"    (void)unload_{ident}();\n    return (int)r;\n}}\n")
            errs = []
            for src in (c, user):
                p = subprocess.run([cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-c", "-I" + CUDA_INCLUDE,
                                    "-I" + sub, src, "-o", src + ".o"], capture_output=True, text=True)
                if p.returncode != 0:
                    errs.append(p.stderr[-500:])
            with open(c) as fc:
                text = fc.read()
            has_manifest = f"{ident}_manifest[]" in text and "s2c-manifest 5" in text
            check(f"--emit c {stem} {dt} d{hd} {arch}: {len(launchers)} launcher(s), cc -std=c11 -Werror accepts",
                  not errs and has_manifest, "\n".join(errs))
        # sm_90a tensor-map kernels: the launcher builds the maps; it takes kv_heads and kv_rows besides.
        # A default-spec d128 forward of 64-token blocks also holds NAME_w (dense: the same ABI)
        tdir = os.path.join(d, "tma")
        os.mkdir(tdir)
        rc, out, err = run("compile", os.path.join(PATTERNS, "dense.yaml"), "--head-dim", "128", "--dtype", "bf16",
                           "--arch", "sm_90a", "--emit", "c", "-o", os.path.join(tdir, "tma.c"))
        launchers = re.findall(r"^launcher (\S+)$", out, re.M)
        errs = [f"rc={rc} {err}"] if rc != 0 or len(launchers) != 4 or launchers[1] != launchers[0] + "_seqs" or \
            launchers[2] != launchers[0] + "_combine" or launchers[3] != launchers[0] + "_w" else []
        if not errs:
            with open(os.path.join(tdir, "user.c"), "w") as u:
                u.write('#include "tma.h"\nint use(CUstream s);\nint use(CUstream s)\n{\n    CUdeviceptr p = 0;\n'
                        '    CUresult r = load_tma();\n')
                for name in (launchers[0], launchers[3]):
                    u.write(f'    if (r == CUDA_SUCCESS)\n        r = {name}(s, p, p, '
                            'p, p, p, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1.0f, p, p, p, 0, 1, p, 1, 1, 1, 1);\n')
                u.write('    (void)unload_tma();\n    return (int)r;\n}\n')
            errs += cc_errors(cc, tdir, ("tma.c", "user.c"))
            text = open(os.path.join(tdir, "tma.c")).read()
            if text.count("cuTensorMapEncodeTiled(") != 1 or text.count("tma_encode_map(&") != 6:
                errs.append("the launchers do not encode three maps each")
        check("--emit c of an sm_90a (tensor-map ABI) kernel and its wide variant: two launchers that encode q/k/v "
              "maps (and NAME_seqs's), cc accepts",
              not errs, "\n".join(errs))
        # an S2 pattern's wide variant runs on the persistent grid: its launcher takes the work list,
        # its length, batch and the counter pair, and sizes the grid from the device
        pdir = os.path.join(d, "tmap")
        os.mkdir(pdir)
        rc, out, err = run("compile", os.path.join(PATTERNS, "s2-l8v16.yaml"), "--head-dim", "128", "--dtype", "bf16",
                           "--arch", "sm_90a", "--emit", "c", "-o", os.path.join(pdir, "tmap.c"))
        launchers = re.findall(r"^launcher (\S+)$", out, re.M)
        errs = [f"rc={rc} {err}"] if rc != 0 or len(launchers) != 4 or not launchers[3].endswith("_w") else []
        if not errs:
            with open(os.path.join(pdir, "user.c"), "w") as u:
                u.write('#include "tmap.h"\nint use(CUstream s);\nint use(CUstream s)\n{\n    CUdeviceptr p = 0;\n'
                        f'    CUresult r = load_tmap();\n    if (r == CUDA_SUCCESS)\n        r = {launchers[3]}(s, p, p, '
                        'p, p, p, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1.0f, p, p, p, 0, 1, p, 1, 1, p, p, 1, 1, 1);\n'
                        '    (void)unload_tmap();\n    return (int)r;\n}\n')
            errs += cc_errors(cc, pdir, ("tmap.c", "user.c"))
            text = open(os.path.join(pdir, "tmap.c")).read()
            if "attn_fwd_tma_persistent" not in text or "CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT" not in text:
                errs.append("no persistent launcher")
        check("--emit c of an S2 pattern: the wide variant's persistent launcher sizes its grid from the device, "
              "cc accepts", not errs, "\n".join(errs))
        # the backward module: three launchers (pre, dkdv, dq) with one signature; on sm_90a with
        # block 64 dqds (dQ from the dS workspace) and dqds2 (two query tiles per CTA), each launched
        # with its own smem (and dqds2 with its own block and a grid of cdiv(q_tiles, 2))
        for arch, parts in (("sm_80", ("_pre", "_dkdv", "_dq")), ("sm_90a",
                                                                        ("_pre", "_dkdv", "_dq", "_dqds", "_dqds2"))):
            bdir = os.path.join(d, "bwd_" + arch)
            os.mkdir(bdir)
            rc, out, err = run("compile", os.path.join(PATTERNS, "dense.yaml"), "--head-dim", "64", "--dtype",
                               "bf16", "--arch", arch, "--kind", "bwd", "--emit", "c", "-o",
                               os.path.join(bdir, "bw.c"))
            launchers = re.findall(r"^launcher (\S+)$", out, re.M)
            want = ["bw_bwd_dense_bf16_d64" + part for part in parts]
            errs = [] if rc == 0 and launchers == want else [f"rc={rc} {launchers} {err}"]
            if not errs:
                args = ", ".join(["p"] * 12 + ["0"] * 24 + ["1", "1", "1.0f", "p", "p", "p", "0", "1", "p", "p",
                                                             "p", "1", "p", "p", "p", "p", "1", "1", "1"])
                with open(os.path.join(bdir, "user.c"), "w") as u:
                    u.write('#include "bw.h"\nint use(CUstream s);\nint use(CUstream s)\n{\n'
                            '    CUdeviceptr p = 0;\n    CUresult r = load_bw();\n')
                    for name in launchers:
                        u.write(f"    if (r == CUDA_SUCCESS)\n        r = {name}(s, {args});\n")
                    u.write('    (void)unload_bw();\n    return (int)r;\n}\n')
                errs += cc_errors(cc, bdir, ("bw.c", "user.c"))
                # dqds: 3 stages of a 64 x 64 K tile and a dS tile, 3 * 16384 bytes at d64
                if arch == "sm_90a" and "49152" not in open(os.path.join(bdir, "bw.c")).read():
                    errs.append("the dqds launcher does not take 49152 bytes of shared memory")
            check(f"--emit c of a backward module ({arch}): launchers {', '.join(parts)}, cc accepts", not errs,
                  "\n".join(errs))
        # decode: launchers for NAME and NAME_combine
        ddir = os.path.join(d, "dec")
        os.mkdir(ddir)
        rc, out, err = run("compile", os.path.join(PATTERNS, "dense.yaml"), "--head-dim", "128", "--dtype",
                           "bf16", "--arch", "sm_80", "--kind", "decode", "--emit", "c",
                           "-o", os.path.join(ddir, "dec.c"))
        launchers = re.findall(r"^launcher (\S+)$", out, re.M)
        want = ["dec_dec_dense_bf16_d128", "dec_dec_dense_bf16_d128_combine"]
        errs = [] if rc == 0 and launchers == want else [f"rc={rc} {launchers} {err}"]
        if not errs:
            args = ", ".join(["p"] * 7 + ["0"] * 12 + ["p", "0", "0", "p", "1", "16", "1.0f", "p", "p", "p", "1",
                                                        "1", "p", "p", "p", "1", "1"])   # ..., counters, k_scale, v_scale
            cargs = ", ".join(["p", "p", "0", "0", "0", "0", "0", "p", "0", "0", "0", "p", "2", "1", "1", "1",
                               "0", "ps", "ps"])   # ..., rows, sinks (none), o_in, lse_in
            with open(os.path.join(ddir, "user.c"), "w") as u:
                u.write('#include "dec.h"\nint use(CUstream s);\nint use(CUstream s)\n{\n    CUdeviceptr p = 0;\n'
                        '    const CUdeviceptr ps[2] = {0, 0};\n'
                        f'    CUresult r = load_dec();\n    if (r == CUDA_SUCCESS)\n        r = {launchers[0]}(s, {args});\n'
                        f'    if (r == CUDA_SUCCESS)\n        r = {launchers[1]}(s, {cargs});\n'
                        '    (void)unload_dec();\n    return (int)r;\n}\n')
            errs += cc_errors(cc, ddir, ("dec.c", "user.c"))
            # the combine's grid: cdiv(rows, 128 threads / (128 / 8 threads per row))
            if "((int64_t)rows + 7) / 8" not in open(os.path.join(ddir, "dec.c")).read():
                errs.append("the combine launcher's grid is not cdiv(rows, 8)")
        check("--emit c of a decode module: decode and combine launchers, cc accepts", not errs, "\n".join(errs))
        # OUT's name without extension, sanitised, names the files and symbols
        rc, out, err = run("compile", os.path.join(PATTERNS, "dense.yaml"), "--head-dim", "64", "--dtype", "bf16",
                           "--arch", "sm_80", "--emit", "c", "-o", os.path.join(d, "my-attn.v2.c"))
        check("--emit c -o my-attn.v2.c writes my_attn_v2.{h,c} with load_my_attn_v2",
              rc == 0 and os.path.exists(os.path.join(d, "my_attn_v2.h")) and "load_my_attn_v2" in open(
                  os.path.join(d, "my_attn_v2.h")).read(), err + str(os.listdir(d)))
        rc, out, err = run("compile", os.path.join(PATTERNS, "dense.yaml"), "--head-dim", "64", "--dtype", "bf16",
                           "--arch", "sm_80", "--emit", "c", "-o", os.path.join(d, "int.c"))
        check("--emit c with a C keyword as its name: exit 1", rc == 1 and "identifier" in err, f"rc={rc} {err}")


def test_stages():
    pat = os.path.join(PATTERNS, "hhst-mixed.yaml")
    base = ["compile", pat, "--head-dim", "64", "--dtype", "bf16", "--arch", "sm_90a"]
    with tempfile.TemporaryDirectory() as d:
        dump = os.path.join(d, "dump")
        out = os.path.join(d, "k.cubin")
        rc, cout, err = run(*base, "-o", out, "--dump-dir", dump)
        files = sorted(os.listdir(dump)) if os.path.isdir(dump) else []
        same = rc == 0 and "k.cubin" in files and open(out, "rb").read() == open(os.path.join(dump, "k.cubin"),
                                                                                   "rb").read()
        check("--dump-dir writes k.pre.ll, k.ll, k.ptx, k.cubin (named after OUT), cubin = output",
              same and files == ["k.cubin", "k.ll", "k.pre.ll", "k.ptx"], f"{files} {err}")
        rc, ptx_out, err = run(*base, "-o", os.path.join(d, "k.ptx"), "--emit", "ptx")
        ptx = open(os.path.join(d, "k.ptx")).read() if rc == 0 else ""
        entries = re.findall(r"\.entry (s2_fwd_\w+)", ptx)
        check("--emit ptx: one .entry per pattern, one NAME_seqs, NAME_combine and NAME_rows each, the sparse one's "
              "wide variant NAME_w, and the manifest global",
              len(entries) == 9 and sum(e.endswith("_seqs") for e in entries) == 2 and
              sum(e.endswith("_rows") for e in entries) == 2 and
              [e for e in entries if e.endswith("_w")] == ["s2_fwd_sparse_layer_bf16_d64_w"] and
              sum(e.endswith("_combine") for e in entries) == 2 and "s2c_manifest" in ptx,
              f"{entries} {err}")
        rc, ll_out, err = run(*base, "-o", os.path.join(d, "k.ll"), "--emit", "ll")
        ll = open(os.path.join(d, "k.ll")).read() if rc == 0 else ""
        check("--emit ll: optimised IR with both kernels and the manifest",
              "@s2c_manifest" in ll and "s2_fwd_dense_layer_bf16_d64" in ll and "s2_fwd_sparse_layer_bf16_d64" in ll,
              err)
        # a hand-edited PTX replaces the stage's own output and is assembled
        ovr = os.path.join(d, "ovr")
        os.mkdir(ovr)
        with open(os.path.join(ovr, "k.ptx"), "w") as f:
            f.write(open(os.path.join(dump, "k.ptx")).read() + "\n// hand-edited\n")
        rc, cout, err = run(*base, "-o", os.path.join(d, "k.ptx"), "--emit", "ptx", "--override-dir", ovr)
        check("--override-dir: the edited PTX is what comes out",
              rc == 0 and open(os.path.join(d, "k.ptx")).read().endswith("// hand-edited\n"), err)
        with open(os.path.join(ovr, "k.ptx"), "w") as f:
            f.write(".version 8.3\n.target sm_90a\n.address_size 64\n.visible .entry broken( {\n")
        os.mkdir(os.path.join(d, "other"))
        rc, cout, err = run(*base, "-o", os.path.join(d, "other", "k.cubin"), "--override-dir", ovr)
        check("--override-dir with broken PTX: assembler error, exit 1", rc == 1 and err.strip(), f"rc={rc} {err}")


def test_compile_softmax():
    """The row-softmax kernel stays reachable with --kernel softmax (toolchain debugging)."""
    with tempfile.TemporaryDirectory() as d:
        pat = os.path.join(PATTERNS, "s2-l8v16.yaml")
        for arch in ["sm_80", "sm_90a"]:
            ptx = os.path.join(d, f"k_{arch}.ptx")
            rc, out, err = run("compile", pat, "--kernel", "softmax", "--arch", arch, "--emit", "ptx", "-o", ptx)
            ok = rc == 0 and os.path.exists(ptx) and ".entry" in open(ptx).read()
            check(f"compile --kernel softmax --emit ptx {arch}", ok, err)
            cub = os.path.join(d, f"k_{arch}.cubin")
            rc, out, err = run("compile", pat, "--kernel", "softmax", "--arch", arch, "-o", cub)
            ok = rc == 0 and os.path.exists(cub) and open(cub, "rb").read(4) == b"\x7fELF"
            check(f"compile --kernel softmax cubin {arch}", ok, err)
        rc, out, err = run("info", os.path.join(d, "k_sm_80.cubin"))
        check("info on a cubin without a manifest: exit 1", rc == 1 and "no s2c manifest" in err, f"rc={rc} {err}")


def test_info_errors():
    with tempfile.TemporaryDirectory() as d:
        rc, out, err = run("info", os.path.join(d, "missing.cubin"))
        check("info on a missing file: exit 1", rc == 1 and "missing.cubin" in err, f"rc={rc} {err}")
        text = os.path.join(d, "text.cubin")
        with open(text, "w") as f:
            f.write("not a cubin\n")
        rc, out, err = run("info", text)
        check("info on a file that is not ELF: exit 1", rc == 1 and "ELF" in err, f"rc={rc} {err}")
        cub = os.path.join(d, "ok.cubin")
        rc, out, err = run("compile", os.path.join(PATTERNS, "dense.yaml"), "--head-dim", "64", "--dtype", "bf16",
                           "--arch", "sm_80", "-o", cub)
        blob = open(cub, "rb").read() if rc == 0 else b""
        bad = 0
        # cut before the end of the section header table (e_shoff, 64-byte entries)
        shoff = int.from_bytes(blob[0x28:0x30], "little") if blob else 0
        for cut in (64, len(blob) // 3, len(blob) // 2, shoff + 100):
            with open(text, "wb") as f:
                f.write(blob[:cut])
            rc, out, err = run("info", text)
            bad += rc != 1 or not err.strip()
        check("info on truncated cubins: exit 1 with a message", blob and bad == 0, f"{bad} cuts misbehaved")


def test_info_escapes():
    """Control bytes in a cubin's manifest text (its generator) reach neither
    info's text output nor its JSON raw: \\xNN and \\u00NN."""
    with tempfile.TemporaryDirectory() as d:
        cub = os.path.join(d, "ok.cubin")
        rc, out, err = run("compile", os.path.join(PATTERNS, "dense.yaml"), "--head-dim", "64", "--dtype", "bf16",
                           "--arch", "sm_80", "-o", cub)
        blob = open(cub, "rb").read() if rc == 0 else b""
        at = blob.find(b"\ngenerator ") + len(b"\ngenerator ")
        gen = blob[at:blob.find(b"\n", at)]
        # same length: an ANSI clear-screen and a bell in place of the generator's first 5 bytes
        evil = b"\x1b[2J\x07" + gen[5:]
        with open(cub, "wb") as f:
            f.write(blob[:at] + evil + blob[at + len(gen):])
        rc, out, err = run("info", cub)
        want = "generator s2c \\x1b[2J\\x07" + gen[5:].decode()
        clean = all(c == "\n" or " " <= c <= "~" for c in out)
        check("info escapes control bytes of the manifest in its text output",
              rc == 0 and len(gen) > 5 and clean and want in out, f"rc={rc} {err}\n{out!r}")
        rc, out, err = run("info", cub, "--format", "json")
        ok = rc == 0 and json.loads(out)["generator"] == evil.decode() and "\x1b" not in out
        check("info --format json escapes them as JSON", ok, f"rc={rc} {err}\n{out!r}")


def test_kv_memory():
    """kv-memory on the decode pattern against a closed form: kv head h keeps
    the 16-block window and the blocks n with (n + h) % 8 == 0."""
    path = os.path.join(PATTERNS, "decode-l16v8.yaml")
    rc, out, err = run("kv-memory", path, "--seq-len", "32768,131072", "--page-size", "64")
    rows = [l.split() for l in out.splitlines() if l.strip() and l.split()[0].isdigit()]
    check("kv-memory: exit 0, one row per length", rc == 0 and len(rows) == 2, err + out)
    for row in rows:
        seq = int(row[0])
        last = (seq - 1) // 64
        want = sum(1 for h in range(32) for n in range(last + 1) if last - n < 16 or (n + h) % 8 == 0)
        check(f"kv-memory decode-l16v8 {seq}: held {want} of {32 * seq // 64} pages",
              int(row[1]) == 32 * seq // 64 and int(row[2]) == want and int(row[4]) == want, " ".join(row))
    check("kv-memory: efficient", "kv-cache efficient: yes" in out, out)
    for args in (("--seq-len", "1024", "--page-size", "24"), ("--page-size", "64"),
                 ("--seq-len", "100", "--prefill", "200"), ("--seq-len", "1,x")):
        rc, out, err = run("kv-memory", path, *args)
        check(f"kv-memory {' '.join(args)}: usage error", rc == 2 and err.strip(), f"rc {rc} {err}")


CLI_MEM = 1 << 30   # a hostile pattern must not take the CLI past 1 GiB ...
CLI_SECS = 20       # ... nor past 20 s


def run_bounded(*args, cwd=None):
    """s2c under RLIMIT_AS (not in sanitizer builds) and RLIMIT_CPU; returns
    (rc, stdout, stderr, seconds, peak KiB of this child alone, from wait4)."""
    import resource
    import time

    def limit():
        if os.environ.get("S2C_SANITIZED") != "1":
            resource.setrlimit(resource.RLIMIT_AS, (CLI_MEM, CLI_MEM))
        resource.setrlimit(resource.RLIMIT_CPU, (CLI_SECS, CLI_SECS))

    with tempfile.TemporaryFile() as fo, tempfile.TemporaryFile() as fe:
        t0 = time.monotonic()
        p = subprocess.Popen([os.path.abspath(S2C), *args], stdout=fo, stderr=fe, preexec_fn=limit, cwd=cwd)
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        secs = time.monotonic() - t0
        fo.seek(0)
        fe.seek(0)
        return (p.returncode, fo.read().decode(errors="replace"), fe.read().decode(errors="replace"), secs,
                ru.ru_maxrss)


def check_rejected(name, args, want, cwd=None):
    """s2c ARGS exits 1 with exactly the one line `want`, within the bounds."""
    rc, out, err, secs, kib = run_bounded(*args, cwd=cwd)
    bound = CLI_MEM // 1024 + (512 * 1024 if os.environ.get("S2C_SANITIZED") == "1" else 0)
    check(f"{name}: exit 1, one exact line, {secs:.2f} s < {CLI_SECS} s, {kib} KiB < {bound} KiB",
          rc == 1 and err == want + "\n" and secs < CLI_SECS and kib < bound,
          f"rc={rc} {secs:.2f} s {kib} KiB\n# got  {err!r}\n# want {want!r}")


def test_hostile_patterns():
    """The pattern parser's caps through the CLI: a 62 MB flow list, a mask
    file named 63 times, errors inside a mask file and mask shapes that do not
    fit are one `file:line:col:` line at the pattern file's location; a mask
    path leaving the pattern file's directory is refused unless
    --allow-mask-path names its directory, for every command that reads a
    pattern."""
    with tempfile.TemporaryDirectory() as d:
        flow = os.path.join(d, "flow.yaml")
        with open(flow, "w") as f:
            f.write("heads: 4\nblock_size: 64\nlocal_stride: {local_blocks: 1, vert_stride: 1}\n"
                    "overrides:\n  - heads: [" + "1," * 31000000 + "1]\n")
        # 16 nodes before the list; the (2**20 + 1)-th node is item 2**20 - 15, at column 13 + 2 (k - 1)
        k = (1 << 20) + 1 - 16
        check_rejected("62 MB flow list", ["check", flow],
                       f"{flow}:5:{13 + 2 * (k - 1)}: error: more than 1048576 YAML nodes in one file")

        n = 2900
        with open(os.path.join(d, "big.txt"), "w") as f:
            f.write(f"case big\nshape 1 {n} {n}\n" + ("1" * n + "\n") * n + "end\n")
        size = os.path.getsize(os.path.join(d, "big.txt"))
        many = os.path.join(d, "many.yaml")
        with open(many, "w") as f:
            f.write("heads: 4\nblock_size: 16\nlocal_stride: {local_blocks: 1, vert_stride: 1}\noverrides:\n" +
                    "  - heads: 0\n    mask: big.txt\n" * 63)
        over = (64 << 20) // size
        check_rejected("8 MB mask named 63 times", ["check", many],
                       f"{many}:{6 + 2 * over}:11: error: overrides[{over}].mask: mask file 'big.txt': its {size} bytes "
                       f"would take the mask files read for this pattern file past {64 << 20} bytes")

        with open(os.path.join(d, "sq.txt"), "w") as f:
            f.write("case sq\nshape 1 2 2\n10\n1x\nend\n")
        with open(os.path.join(d, "ok.txt"), "w") as f:
            f.write("case ok\nshape 1 2 2\n10\n11\nend\n")
        bad_row = os.path.join(d, "badrow.yaml")
        with open(bad_row, "w") as f:
            f.write("heads: 2\nblock_size: 64\nmask: sq.txt\n")
        check_rejected("error inside a mask file", ["check", bad_row],
                       f"{bad_row}:3:7: error: mask: mask file 'sq.txt': line 4, col 2: expected '0' or '1', got 'x'")
        shape = os.path.join(d, "shape.yaml")
        with open(shape, "w") as f:
            f.write("heads: 2\nblock_size: 64\nmax_seq_len: 8192\nmask: ok.txt\n")
        want = (f"{shape}:4:7: error: mask: mask file 'ok.txt': case 'ok' has shape 1 2 2, max_seq_len 8192 needs "
                "128 x 128 blocks of 64 tokens")
        check_rejected("mask smaller than max_seq_len: check", ["check", shape], want)
        check_rejected("mask smaller than max_seq_len: layout", ["layout", shape, "--seq-len", "8192"], want)

        # mask paths: relative to the pattern file's directory, from any cwd
        os.makedirs(os.path.join(d, "pat"))
        os.makedirs(os.path.join(d, "outside"))
        with open(os.path.join(d, "outside", "m.txt"), "w") as f:
            f.write("case m\nshape 1 4 4\n1000\n1100\n1110\n1111\nend\n")
        up = os.path.join(d, "pat", "up.yaml")
        with open(up, "w") as f:
            f.write("heads: 1\nblock_size: 16\nmask: ../outside/m.txt\n")
        tail = " (a mask path must stay in the pattern file's directory unless its directory is allowed)"
        check_rejected("mask path climbing out", ["check", up],
                       f"{up}:3:7: error: mask: mask file '../outside/m.txt': outside the pattern file's directory{tail}")
        passwd = os.path.join(d, "pat", "passwd.yaml")
        with open(passwd, "w") as f:
            f.write("heads: 1\nblock_size: 16\nmask: ../../../../../../../../etc/passwd\n")
        check_rejected("mask path to /etc/passwd", ["check", passwd],
                       f"{passwd}:3:7: error: mask: mask file '../../../../../../../../etc/passwd': outside the pattern "
                       f"file's directory{tail}")
        absolute = os.path.join(d, "pat", "abs.yaml")
        with open(absolute, "w") as f:
            f.write(f"heads: 1\nblock_size: 16\nmask: {d}/outside/m.txt\n")
        check_rejected("absolute mask path", ["layout", absolute, "--seq-len", "64"],
                       f"{absolute}:3:7: error: mask: mask file '{d}/outside/m.txt': an absolute path{tail}")
        check_rejected("mask path: allowed elsewhere is not enough",
                       ["check", "--allow-mask-path", os.path.join(d, "pat"), up],
                       f"{up}:3:7: error: mask: mask file '../outside/m.txt': outside the pattern file's directory{tail}")
        allow = ["--allow-mask-path", os.path.join(d, "outside")]
        for f in (up, absolute):
            rc, out, err, secs, kib = run_bounded("check", f, *allow)
            check(f"check --allow-mask-path: {os.path.basename(f)} loads", rc == 0 and "ok (1 pattern)" in out,
                  f"rc={rc} {err}")
        # relative to the cwd, given with '=' and beside another
        rc, out, err, secs, kib = run_bounded("layout", "pat/up.yaml", "--allow-mask-path=pat",
                                              "--allow-mask-path=outside", "--seq-len", "64", "--format", "mask",
                                              cwd=d)
        check("layout --allow-mask-path (relative): the outside mask", rc == 0 and
              out.split("\n")[2:6] == ["1000", "1100", "1110", "1111"], f"rc={rc} {err}{out}")
        rc, out, err, secs, kib = run_bounded("kv-memory", up, *allow, "--seq-len", "64", "--page-size", "16")
        check("kv-memory --allow-mask-path", rc == 0, f"rc={rc} {err}")
        ll = os.path.join(d, "k.ll")
        rc, out, err, secs, kib = run_bounded("compile", up, *allow, "--head-dim", "64", "--dtype", "bf16",
                                              "--arch", "sm_80", "--emit", "ll", "-o", ll)
        check("compile --allow-mask-path", rc == 0 and os.path.exists(ll), f"rc={rc} {err}")
        rc, out, err = run("compile", up, "--head-dim", "64", "--dtype", "bf16", "--arch", "sm_80", "--emit", "ll",
                           "-o", ll + "2")
        check("compile without --allow-mask-path: exit 1", rc == 1 and err.startswith(f"{up}:3:7: error: mask: "), err)
        rc, out, err = run("check", up, "--allow-mask-path", "")
        check("--allow-mask-path '': usage error", rc == 2, f"rc={rc} {err}")


def run_limited(args, mem=1 << 30, timeout=60):
    """s2c under RLIMIT_AS (unless sanitized): (rc, out, err, seconds, peak KiB of this child)."""
    import resource
    import time

    def limit():
        if os.environ.get("S2C_SANITIZED") != "1":
            resource.setrlimit(resource.RLIMIT_AS, (mem, mem))

    with tempfile.TemporaryFile() as fo, tempfile.TemporaryFile() as fe:
        t0 = time.monotonic()
        p = subprocess.Popen([S2C, *args], stdout=fo, stderr=fe, preexec_fn=limit)
        # reap it with wait4: this child's own peak, not the largest of every earlier child
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - t0 > timeout:
                p.kill()
            time.sleep(0.01)
        p.returncode = rc = os.waitstatus_to_exitcode(status)
        secs, peak = time.monotonic() - t0, ru.ru_maxrss
        fo.seek(0)
        fe.seek(0)
        return rc, fo.read().decode(errors="replace"), fe.read().decode(errors="replace"), secs, peak


FAR_CONTEXT = """name: far-context
heads: 256
block_size: 64
causal: true
local_stride:
  local_blocks: 4
  vert_stride: 8
ranges:
  - distance: [512, end]
    vert_stride: 32
  - distance: [2048, end]
    keep: none
"""


def far_context_pairs(seq):
    """Kept token pairs of FAR_CONTEXT: head q keeps block n <= m at distance d = m - n
    when d < 4, 4 <= d < 8 with (n + q) % 8 == 0, 8 <= d < 32 with (n + q) % 32 == 0."""
    blocks, total = seq // 64, 0
    for q in range(32):  # shifts q = 0..255 repeat modulo 32: 8 heads each
        for m in range(blocks):
            for n in range(max(0, m - 31), m + 1):
                d = m - n
                if d < 4 or (d < 8 and (n + q) % 8 == 0) or (d >= 8 and (n + q) % 32 == 0):
                    total += 2080 if d == 0 else 4096
    return 8 * total


def test_layout_limits():
    """Huge but valid layout requests: a schedule or mask text over the 1 GiB cap is
    refused at once (exit 1, a message naming the size and --max-bytes) under a 1 GiB
    address-space limit; --max-bytes moves the cap; stats with two range rules over
    262144 tokens take well under 10 s and match a closed form."""
    sanitized = os.environ.get("S2C_SANITIZED") == "1"
    with tempfile.TemporaryDirectory() as d:
        big = os.path.join(d, "big.yaml")
        with open(big, "w") as f:
            f.write("name: big\nheads: 4096\nblock_size: 16\nlocal_stride:\n  local_blocks: 8\n  vert_stride: 16\n")
        for fmt in ("schedule", "mask"):
            rc, out, err, secs, peak = run_limited(["layout", big, "--seq-len", "1048576", "--format", fmt])
            m = re.fullmatch(r"s2c: error: layout: the " + fmt + r" would be about (\d+)\.\d MiB, over the 1024\.0 MiB cap; "
                             r"raise it with --max-bytes\n", err)
            check(f"layout 4096 heads, block 16, 1M tokens, {fmt}: refused (exit 1, size named) in {secs:.1f} s, "
                  f"{peak // 1024} MiB peak",
                  rc == 1 and out == "" and m and int(m.group(1)) > 1024 and secs < 10
                  and (sanitized or peak < 256 * 1024), f"rc={rc} {secs:.1f}s {peak} KiB {err!r}")
        path = os.path.join(PATTERNS, "s2-l8v16.yaml")
        for fmt in ("schedule", "mask"):
            rc, full, err = run("layout", path, "--seq-len", "4096", "--format", fmt)
            check(f"layout s2-l8v16 {fmt} under the default cap", rc == 0 and len(full) > 100000, err)
            rc, out, err = run("layout", path, "--seq-len", "4096", "--format", fmt, "--max-bytes", "100000")
            check(f"layout {fmt} over --max-bytes 100000: refused",
                  rc == 1 and out == "" and "over the 0.1 MiB cap; raise it with --max-bytes" in err, f"rc={rc} {err}")
            rc, out, err = run("layout", path, "--seq-len", "4096", "--format", fmt, "--max-bytes", str(4 * len(full)))
            check(f"layout {fmt} with a raised --max-bytes: the same text", rc == 0 and out == full, f"rc={rc} {err}")
        rc, full, err = run("layout", path, "--seq-len", "4096", "--format", "mask")
        rc2, out, err2 = run("layout", path, "--seq-len", "4096", "--format", "mask", "--max-bytes", str(len(full)))
        rc3, out3, err3 = run("layout", path, "--seq-len", "4096", "--format", "mask", "--max-bytes", str(len(full) - 1))
        check("mask size is exact: --max-bytes of its length passes, one less is refused",
              rc2 == 0 and out == full and rc3 == 1 and "cap" in err3, f"{rc2} {rc3} {err2} {err3}")
        for bad in ("0", "-5", "12k"):
            rc, out, err = run("layout", path, "--seq-len", "64", "--max-bytes", bad)
            check(f"--max-bytes {bad}: usage error", rc == 2 and "--max-bytes" in err, f"rc={rc} {err}")
        far = os.path.join(d, "far.yaml")
        with open(far, "w") as f:
            f.write(FAR_CONTEXT)
        rc, out, err = run("layout", far, "--seq-len", "8192", "--format", "stats")
        m = re.search(r"kept [\d.]+% \((\d+) of (\d+) token pairs\)", out)
        want = far_context_pairs(8192)
        check("far-context stats (two range rules) at 8192 tokens equal the closed form",
              rc == 0 and m and int(m.group(1)) == want, f"want {want}: {out}{err}")
        rc, out, err, secs, peak = run_limited(["layout", far, "--seq-len", "262144", "--format", "stats"])
        m = re.search(r"kept [\d.]+% \((\d+) of", out)
        check(f"far-context stats at 262144 tokens in {secs:.1f} s (under 10 s), exact",
              rc == 0 and secs < 10 and m and int(m.group(1)) == far_context_pairs(262144), f"rc={rc} {err}")


def main():
    for t in (test_golden, test_bad_files, test_usage, test_dtypes, test_stock, test_compile_softmax,
              test_compile_matrix, test_multi_pattern, test_tunables, test_template_options, test_emit_c, test_stages,
              test_info_errors, test_info_escapes,
              test_kv_memory, test_hostile_patterns, test_layout_limits):
        try:
            t()
        except Exception as e:  # a crash in a test is a failure, not a pass
            check(t.__name__ + " raised", False, repr(e))
    print(f"{count - len(failures)} of {count} CLI checks passed")
    sys.exit(1 if failures else 0)


main()
