#!/usr/bin/env python3
"""The s2c command line as scripts and build systems drive it (run by meson:
test_cli_scripting.py S2C_BINARY).

Each subcommand's --help / -h / `s2c help CMD`; options of another command
refused (exit 2, named); --format json documents (schema_version 1) checked
field by field against known values and against the text output; `-` for
stdin and stdout; -MD/-MF/-MT depfiles, exactly, and read by GNU make and
ninja with odd paths; -o into directories that do
not exist yet; --quiet; registers of every kernel of forward, backward and
decode modules read back by `info`; several --arch in one compile.

Every s2c run is bounded: 1 GiB of address space (not under sanitizers) and
60 s of wall time; each check states it."""
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile

S2C = os.path.abspath(sys.argv[1])
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PATTERNS = os.environ.get("S2C_PATTERNS", os.path.join(ROOT, "patterns"))
MASK_DATA = os.path.join(ROOT, "tests", "pattern", "data")
SANITIZED = os.environ.get("S2C_SANITIZED") == "1"
MEM = 1 << 30
TIMEOUT = 60

failures = []
count = 0


def check(name, cond, detail=""):
    global count
    count += 1
    if cond:
        print(f"ok {count} - {name}")
    else:
        print(f"not ok {count} - {name}\n# {detail}")
        failures.append(name)


def limit():
    if not SANITIZED:
        resource.setrlimit(resource.RLIMIT_AS, (MEM, MEM))


def run(*args, stdin=None, cwd=None, binary=False):
    """(rc, stdout, stderr) of s2c ARGS under the bounds; stdin bytes or str."""
    if isinstance(stdin, str):
        stdin = stdin.encode()
    p = subprocess.run([S2C, *args], input=stdin if stdin is not None else b"", capture_output=True,
                       timeout=TIMEOUT, preexec_fn=limit, cwd=cwd)
    out = p.stdout if binary else p.stdout.decode(errors="replace")
    return p.returncode, out, p.stderr.decode(errors="replace")


def pat(name):
    return os.path.join(PATTERNS, name + ".yaml")


# ---- help and options ---------------------------------------------------------

OPTIONS = {
    "check": ["--allow-mask-path", "--format", "--quiet", "--help"],
    "layout": ["--seq-len", "--kv-len", "--name", "--format", "--block-m", "--block-n", "--head-dim", "--dtype",
               "--max-bytes", "--allow-mask-path", "--quiet"],
    "compile": ["--arch", "--output", "--name", "--emit", "--kind", "--block-m", "--block-n", "--num-warps",
                "--num-stages", "--kv-gather", "--option", "--backend", "--dump-dir", "--override-dir", "--kernel",
                "-MD", "-MF", "-MT", "--verbose", "--allow-mask-path", "--quiet"],
    "info": ["--format", "--quiet"],
    "kv-memory": ["--seq-len", "--page-size", "--prefill", "--head-dim", "--dtype", "--name", "--format",
                  "--allow-mask-path", "--quiet"],
}


def test_help():
    for cmd, opts in OPTIONS.items():
        texts = []
        for args in ((cmd, "--help"), (cmd, "-h"), ("help", cmd), (cmd, pat("dense"), "--help")):
            rc, out, err = run(*args)
            check(f"{' '.join(args[:1] + args[-1:])}: exit 0, usage on stdout, nothing on stderr",
                  rc == 0 and out.startswith(f"usage: s2c {cmd} ") and err == "", f"rc={rc} {err!r}")
            texts.append(out)
        check(f"{cmd}: --help, -h and `help {cmd}` print the same text", len(set(texts)) == 1)
        missing = [o for o in opts if o not in texts[0]]
        check(f"{cmd} --help mentions each of its options", not missing, f"missing {missing}")
    rc, out, err = run("--help")
    check("s2c --help lists every subcommand", rc == 0 and all(re.search(rf"^  {c} ", out, re.M) for c in OPTIONS),
          out)
    rc, out, err = run("help", "frobnicate")
    check("s2c help of an unknown command: exit 2", rc == 2 and "frobnicate" in err, f"rc={rc} {err!r}")
    rc, out, err = run("--version")
    check("s2c --version", rc == 0 and re.fullmatch(r"s2c \S+\n", out), out)


def test_inapplicable():
    dense = pat("dense")
    cases = [
        (("check", dense, "--seq-len", "64"), "--seq-len", "check"),
        (("check", dense, "-o", "x"), "-o", "check"),
        (("layout", dense, "--seq-len", "64", "--arch", "sm_80"), "--arch", "layout"),
        (("layout", dense, "--seq-len", "64", "--emit=c"), "--emit", "layout"),
        (("info", "x.cubin", "--head-dim", "64"), "--head-dim", "info"),
        (("info", "x.cubin", "-v"), "-v", "info"),
        (("info", "x.cubin", "-MD"), "-MD", "info"),
        (("kv-memory", dense, "--seq-len", "64", "--block-m", "64"), "--block-m", "kv-memory"),
        (("compile", dense, "--arch", "sm_80", "-o", "x", "--page-size", "64"), "--page-size", "compile"),
        (("check", dense, "-MF", "x.d"), "-MF", "check"),
    ]
    for args, opt, cmd in cases:
        rc, out, err = run(*args)
        check(f"{' '.join(args[:1])} {opt}: exit 2 naming the option", rc == 2 and out == "" and
              err.startswith(f"s2c: error: {cmd}: option '{opt}' does not apply to {cmd}\n"), f"rc={rc} {err!r}")
    for args, want in [(("check", dense, "--bogus"), "s2c: error: check: unknown option '--bogus'"),
                       (("layout", dense, "--seq-len"), "s2c: error: layout: option '--seq-len' needs a value"),
                       (("check", dense, "--quiet=1"), "s2c: error: check: option '--quiet' takes no value"),
                       (("compile", dense, "-MT"), "s2c: error: compile: option '-MT' needs a value")]:
        rc, out, err = run(*args)
        check(f"{' '.join(args[2:])}: exit 2, {want!r}", rc == 2 and err.split("\n")[0] == want, f"rc={rc} {err!r}")
    # an option's value is not an option: --name -MD names a pattern
    rc, out, err = run("layout", dense, "--seq-len", "64", "--name", "-MD")
    check("--name -MD is a value, not -MD", rc == 1 and "no pattern named '-MD'" in err, f"rc={rc} {err!r}")


# ---- JSON ---------------------------------------------------------------------

def test_check_json():
    rc, out, err = run("check", pat("hhst-mixed"), pat("dense"), "--format", "json")
    doc = json.loads(out) if rc == 0 else {}
    check("check --format json: exit 0, one document, schema_version 1",
          rc == 0 and doc.get("schema_version") == 1 and doc.get("command") == "check", f"rc={rc} {err}")
    files = doc.get("files", [])
    check("check json: one entry per file, in order",
          [f["path"] for f in files] == [pat("hhst-mixed"), pat("dense")] and all(f["ok"] and f["error"] is None
                                                                                 for f in files), str(files)[:300])
    want = [
        {"name": "dense-layer", "heads": 32, "kv_heads": 8, "block_size": 64, "causal": True, "max_seq_len": 0,
         "dense_heads": 32, "masks": 0, "ranges": 0, "line": 4, "kv_cache_efficient": True, "kv_checked_to": 32768,
         "kv_note": None},
        {"name": "sparse-layer", "heads": 32, "kv_heads": 8, "block_size": 64, "causal": True, "max_seq_len": 131072,
         "dense_heads": 4, "masks": 0, "ranges": 2, "line": 10, "kv_cache_efficient": True,
         "kv_checked_to": 131072, "kv_note": None},
    ]
    got = files[0]["patterns"] if files else None
    check("check json: hhst-mixed's two patterns, every field", got == want, f"{got}")
    check("check json: dense has 32 heads, all dense",
          len(files) == 2 and [(p["name"], p["heads"], p["dense_heads"]) for p in files[1]["patterns"]] ==
          [("dense", 32, 32)], str(files[1:]))
    # every stock pattern: the JSON's numbers equal the text summary's
    for f in sorted(os.listdir(PATTERNS)):
        if not f.endswith(".yaml"):
            continue
        rc, out, err = run("check", os.path.join(PATTERNS, f), "--format", "json")
        rc2, text, err2 = run("check", os.path.join(PATTERNS, f))
        pats = json.loads(out)["files"][0]["patterns"] if rc == 0 else []
        heads = [tuple(int(x) for x in m) for m in re.findall(r"^heads (\d+), kv_heads (\d+), block_size (\d+)",
                                                                 text, re.M)]
        dense = [tuple(int(x) for x in m) for m in re.findall(r"^dense heads: (\d+) of \d+; masks: (\d+); ranges: "
                                                                 r"(\d+)$", text, re.M)]
        check(f"check json {f}: heads, kv_heads, block_size, dense heads, masks, ranges as the text says",
              rc == 0 and rc2 == 0 and len(pats) == len(heads) > 0 and
              [(p["heads"], p["kv_heads"], p["block_size"]) for p in pats] == heads and
              [(p["dense_heads"], p["masks"], p["ranges"]) for p in pats] == dense, f"{pats} {heads} {dense}")
    # a bad file: ok false, the one-line message (also on stderr), exit 1
    bad = os.path.join(MASK_DATA, "mask-missing.yaml")
    rc, out, err = run("check", bad, pat("dense"), "--format", "json")
    doc = json.loads(out) if out else {}
    f0 = doc.get("files", [{}])[0]
    check("check json with a bad file: exit 1, ok false, its error as on stderr, the next file still checked",
          rc == 1 and f0.get("ok") is False and f0.get("error") == err.strip() and f0.get("patterns") == [] and
          doc["files"][1]["ok"] is True and err == f"{bad}:3:7: error: mask: mask file 'no-such-mask.txt': "
          "No such file or directory\n", f"rc={rc} {out[:300]} {err!r}")
    rc, out, err = run("check", pat("dense"), "--format", "yaml")
    check("check --format yaml: usage error", rc == 2 and "text or json" in err, f"rc={rc} {err!r}")


def stats_text(text):
    m = re.fullmatch(
        r"q_len (\d+) kv_len (\d+) heads (\d+) head_dim (\d+)\n"
        r"kept ([\d.]+)% \((\d+) of (\d+) token pairs\)\n"
        r"fwd ([\d.]+) GFLOP, fwd\+bwd ([\d.]+) GFLOP, tiles ([\d.]+) GFLOP \((\d+) entries\)\n"
        r"bytes (\d+) \(([\d.]+) MiB\) per batch element\n"
        r"per-head pairs min (\d+) max (\d+) mean ([\d.]+), imbalance ([\d.]+)\n", text)
    return m.groups() if m else None


def test_layout_json():
    for name, args in [("phi3-small", ["--seq-len", "8192"]),
                       ("hhst-mixed", ["--seq-len", "1024", "--kv-len", "4096", "--name", "sparse-layer",
                                       "--block-m", "64", "--head-dim", "64", "--dtype", "fp16"])]:
        rc, text, err = run("layout", pat(name), *args, "--format", "stats")
        rc2, out, err2 = run("layout", pat(name), *args, "--format", "json")
        t = stats_text(text)
        j = json.loads(out) if rc2 == 0 else {}
        check(f"layout {name} --format json: exit 0, schema_version 1, every number finite",
              rc == 0 and rc2 == 0 and t and j.get("schema_version") == 1 and j.get("command") == "layout" and
              all(isinstance(v, (int, float)) for k, v in j.items() if k not in ("command", "pattern", "dtype")),
              f"{rc} {rc2} {err} {err2} {text}")
        if not t or not j:
            continue
        same = (j["q_len"], j["kv_len"], j["heads"], j["head_dim"]) == tuple(int(x) for x in t[0:4]) and \
            f"{100 * j['kept_fraction']:.4f}" == t[4] and (j["kept_pairs"], j["dense_pairs"]) == (int(t[5]), int(t[6])) \
            and f"{j['fwd_flops'] * 1e-9:.3f}" == t[7] and f"{j['fwd_bwd_flops'] * 1e-9:.3f}" == t[8] \
            and f"{j['tile_flops'] * 1e-9:.3f}" == t[9] and j["entries"] == int(t[10]) \
            and j["bytes_read"] == int(t[11]) and (j["head_pairs_min"], j["head_pairs_max"]) == (int(t[13]), int(t[14])) \
            and f"{j['head_pairs_mean']:.1f}" == t[15] and f"{j['imbalance']:.3f}" == t[16]
        check(f"layout {name} json: every number equals the stats text", same, f"{j}\n# {t}")
    rc, out, err = run("layout", pat("phi3-small"), "--seq-len", "8192", "--format", "json")
    j = json.loads(out)
    check("layout phi3-small 8192 json: the README's numbers (438042624 of 1073872896 pairs, 56176 entries)",
          (j["pattern"], j["kept_pairs"], j["dense_pairs"], j["entries"], j["bytes_read"], j["block_m"], j["block_n"],
           j["dtype"]) == ("phi3-small", 438042624, 1073872896, 56176, 1974992896, 128, 64, "bf16"), str(j))


def test_kv_memory_json():
    path = pat("decode-l16v8")
    rc, out, err = run("kv-memory", path, "--seq-len", "32768,131072", "--page-size", "64", "--format", "json")
    rc2, text, err2 = run("kv-memory", path, "--seq-len", "32768,131072", "--page-size", "64")
    j = json.loads(out) if rc == 0 else {}
    check("kv-memory --format json: exit 0, schema_version 1",
          rc == 0 and j.get("schema_version") == 1 and j.get("command") == "kv-memory", f"rc={rc} {err}")
    check("kv-memory json: header fields", (j.get("pattern"), j.get("heads"), j.get("kv_heads"), j.get("page_size"),
                                            j.get("head_dim"), j.get("dtype"), j.get("page_bytes"), j.get("prefill"),
                                            j.get("kv_cache_efficient"), j.get("note")) ==
          ("decode-l16v8", 32, 32, 64, 128, "bf16", 32768, 0, True, None), str(j)[:300])
    rows = [l.split() for l in text.splitlines() if l.strip() and l.split()[0].isdigit()]
    for r, row in zip(j.get("rows", []), rows):
        seq = r["seq_len"]
        last = (seq - 1) // 64
        want = sum(1 for h in range(32) for n in range(last + 1) if last - n < 16 or (n + h) % 8 == 0)
        check(f"kv-memory json {seq}: held {want} of {32 * seq // 64} pages, as the text row",
              r["dense_pages"] == 32 * seq // 64 and r["held_pages"] == want == r["peak_pages"] and
              [str(seq), str(r["dense_pages"]), str(r["held_pages"]), f"{100 * r['held_fraction']:.2f}%",
               str(r["peak_pages"])] == row[:5], f"{r} {row}")
    check("kv-memory json: two rows", len(j.get("rows", [])) == 2 == len(rows), out + text)


# ---- compile: stdin, stdout, directories, depfiles, quiet, registers ------------

def test_stdin_stdout():
    with tempfile.TemporaryDirectory() as d:
        for f in ("mask-base.yaml", "masks.txt"):
            shutil.copy(os.path.join(MASK_DATA, f), d)
        text = open(os.path.join(d, "mask-base.yaml")).read()
        base = ["--head-dim", "64", "--dtype", "bf16", "--arch", "sm_80"]
        rc, blob, err = run("compile", "-", *base, "-o", "-", stdin=text, cwd=d, binary=True)
        check("compile - -o -: a cubin on stdout (ELF magic), the summary on stderr",
              rc == 0 and blob[:4] == b"\x7fELF" and "wrote" in err and "s2_fwd_explicit_bf16_d64" in err,
              f"rc={rc} {err!r}")
        rc2, info, err2 = run("info", "-", stdin=blob)
        check("info - reads that cubin from stdin: the kernel and pattern",
              rc2 == 0 and info.startswith(f"<stdin>: {len(blob)} bytes,") and
              "kernel s2_fwd_explicit_bf16_d64: pattern explicit" in info and "\npattern explicit\n" in info,
              f"rc={rc2} {err2!r} {info[:200]}")
        # the same pattern read from its file, written to a file: the same bytes
        out = os.path.join(d, "file.cubin")
        rc3, o3, e3 = run("compile", os.path.join(d, "mask-base.yaml"), *base, "-o", out)
        check("the cubin from stdin equals the one compiled from the file",
              rc3 == 0 and open(out, "rb").read() == blob, f"rc={rc3} {e3}")
        # mask paths of a pattern from stdin resolve against the working directory
        rc, blob2, err = run("compile", "-", *base, "-o", "-", stdin=text, cwd=ROOT, binary=True)
        check("compile - elsewhere: the mask path is relative to the cwd, one <stdin>:line:col: line",
              rc == 1 and blob2 == b"" and
              err == "<stdin>:4:7: error: mask: mask file 'masks.txt': No such file or directory\n", f"rc={rc} {err!r}")
        for emit, magic in (("ptx", b"//"), ("ll", b"; ModuleID")):
            rc, data, err = run("compile", "-", *base, "-o", "-", "--emit", emit, stdin=text, cwd=d, binary=True)
            check(f"compile --emit {emit} -o -: the text on stdout", rc == 0 and data.startswith(magic), err)
        rc, data, err = run("compile", "-", *base, "-o", "-", "--emit", "c", stdin=text, cwd=d)
        check("--emit c -o -: usage error", rc == 2 and "--emit c" in err, f"rc={rc} {err!r}")
        rc, out, err = run("check", "-", stdin=text, cwd=d)
        check("check -: the pattern from stdin", rc == 0 and out.endswith("-: ok (1 pattern)\n"), f"rc={rc} {err}")
        rc, out, err = run("layout", "-", "--seq-len", "64", "--format", "mask", stdin=text, cwd=d)
        check("layout - --format mask: the per-head mask of masks.txt", rc == 0 and "shape 4 2 2" in out,
              f"rc={rc} {err}")
        # bounded stdin: 64 MiB at most
        rc, out, err = run("info", "-", stdin=b"\0" * ((64 << 20) + 1))
        check("info - with more than 64 MiB: exit 1, refused by size",
              rc == 1 and err == f"s2c: error: <stdin>: more than {64 << 20} bytes\n", f"rc={rc} {err!r}")
        rc, out, err = run("info", "-", stdin=b"not a cubin")
        check("info - with text: exit 1 naming <stdin>", rc == 1 and err.startswith("s2c: error: <stdin>: ELF"), f"rc={rc} {err!r}")


def test_directories():
    with tempfile.TemporaryDirectory() as d:
        base = ["compile", pat("dense"), "--head-dim", "64", "--dtype", "bf16", "--arch", "sm_80"]
        out = os.path.join(d, "newdir", "sub", "x.ll")
        rc, o, err = run(*base, "--emit", "ll", "-o", out)
        check("-o newdir/sub/x.ll: the directories are made", rc == 0 and os.path.isfile(out) and
              open(out).read().startswith("; ModuleID"), f"rc={rc} {err}")
        rc, o, err = run(*base, "--emit", "c", "-o", os.path.join(d, "cdir", "deeper", "mod.c"))
        check("--emit c -o newdir/x: both files in the new directory",
              rc == 0 and sorted(os.listdir(os.path.join(d, "cdir", "deeper"))) == ["mod.c", "mod.h"],
              f"rc={rc} {err}")
        open(os.path.join(d, "file"), "w").close()
        rc, o, err = run(*base, "-o", os.path.join(d, "file", "x.cubin"))
        check("-o under a regular file: exit 1, a clear message",
              rc == 1 and err == f"s2c: error: cannot create directory '{d}/file': a file is in the way\n", f"rc={rc} {err!r}")


def test_depfiles():
    with tempfile.TemporaryDirectory() as t:
        d = os.path.join(t, "pat dir")  # a space, escaped in the depfile
        os.mkdir(d)
        for f in ("mask-override.yaml", "mask-base.yaml", "masks.txt"):
            shutil.copy(os.path.join(MASK_DATA, f), d)
        base = ["--head-dim", "64", "--dtype", "bf16", "--arch", "sm_80", "--emit", "ll"]
        esc = d.replace(" ", "\\ ")
        ovr = os.path.join(d, "mask-override.yaml")
        out = os.path.join(t, "o", "k.ll")
        rc, o, err = run("compile", ovr, *base, "-o", out, "-MD")
        dep = os.path.join(t, "o", "k.d")
        got = open(dep).read() if os.path.exists(dep) else None
        check("-MD: OUT.d next to OUT, 'OUT: PATTERN MASKFILE' (the mask file once, read twice)",
              rc == 0 and got == f"{t}/o/k.ll: {esc}/mask-override.yaml {esc}/masks.txt\n", f"rc={rc} {got!r} {err}")
        mf = os.path.join(t, "deps", "x.dep")
        rc, o, err = run("compile", os.path.join(d, "mask-base.yaml"), *base, "-o", out, "-MF", mf, "-MT", "all")
        got = open(mf).read() if os.path.exists(mf) else None
        check("-MF FILE implies -MD, its directory made; -MT names the target",
              rc == 0 and got == f"all: {esc}/mask-base.yaml {esc}/masks.txt\n", f"rc={rc} {got!r} {err}")
        rc, o, err = run("compile", pat("dense"), *base, "-o", os.path.join(t, "$x.ll"), f"-MF{t}/d2.d")
        got = open(f"{t}/d2.d").read() if os.path.exists(f"{t}/d2.d") else None
        check("a pattern without masks: the pattern alone; '$' doubled; -MFFILE joined",
              rc == 0 and got == f"{t}/$$x.ll: {pat('dense')}\n", f"rc={rc} {got!r} {err}")
        text = open(ovr).read()
        rc, blob, err = run("compile", "-", *base, "-o", "-", "-MF", "stdin.d", stdin=text, cwd=d, binary=True)
        got = open(os.path.join(d, "stdin.d")).read() if os.path.exists(os.path.join(d, "stdin.d")) else None
        check("pattern from stdin, -o -: target '-', the masks relative to the cwd, no pattern file",
              rc == 0 and got == "-: masks.txt\n", f"rc={rc} {got!r} {err}")
        rc, blob, err = run("compile", pat("dense"), *base, "-o", "-", "-MD")
        check("-MD with -o - and no -MF: usage error", rc == 2 and "-MF" in err, f"rc={rc} {err!r}")
        rc, blob, err = run("compile", pat("dense"), *base, "-o", "-", "-MF", "-")
        check("-MF - with -o -: usage error (exit 2), nothing on stdout",
              rc == 2 and blob == "" and err == "s2c: error: compile: -MF - and -o - would both write to stdout\n"
              "s2c: note: try 's2c compile --help'\n", f"rc={rc} {blob[:100]!r} {err!r}")
        rc, blob, err = run("compile", pat("dense"), *base, "-o", os.path.join(t, "s.ll"), "-MF", "-")
        check("-MF - alone: the depfile on stdout, the summary on stderr",
              rc == 0 and blob == f"{t}/s.ll: {pat('dense')}\n" and "wrote" in err, f"rc={rc} {blob!r} {err!r}")
        rc, o, err = run("compile", ovr, "--head-dim", "64", "--dtype", "bf16", "--arch", "sm_80", "--emit", "c",
                         "-o", os.path.join(t, "c", "mod.c"), "-MD")
        got = open(os.path.join(t, "c", "mod.d")).read() if os.path.exists(os.path.join(t, "c", "mod.d")) else None
        check("--emit c -MD: both files are targets",
              rc == 0 and got == f"{t}/c/mod.h {t}/c/mod.c: {esc}/mask-override.yaml {esc}/masks.txt\n",
              f"rc={rc} {got!r} {err}")
        rc, o, err = run("compile", os.path.join(d, "nope.yaml"), *base, "-o", os.path.join(t, "n.ll"), "-MD")
        check("a failed compile writes no depfile", rc == 1 and not os.path.exists(os.path.join(t, "n.d")), err)


MAKEFILE = """include deps.d
%.ll:
\t@:$(info rebuild [$@] because [$?])
"""


def run_tool(tool, cwd, args=()):
    env = dict(os.environ, LC_ALL="C")
    p = subprocess.run([tool, *args], cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT, env=env)
    return p.returncode, p.stdout, p.stderr


def make_newer(path, *others):
    """path's modification time a minute after the others' (all in the past: no clock skew)."""
    import time
    now = time.time()
    for f in others:
        os.utime(f, (now - 600, now - 600))
    os.utime(path, (now - 540, now - 540))


def weird_tree(t):
    """A pattern and its mask file under a directory whose name holds a space, ':', '#', '$' and '\\', the
    mask's own name with a backslash before a space, '#' and ':' (which GNU make needs doubled); the output
    directory as odd.  (pattern, mask, output)."""
    d = os.path.join(t, "p a:t#h$x\\y")
    os.mkdir(d)
    mask_name = "m\\ a\\#b\\:c$d.txt"
    shutil.copy(os.path.join(MASK_DATA, "masks.txt"), os.path.join(d, mask_name))
    pattern = os.path.join(d, "pat.yaml")
    with open(pattern, "w") as f:
        f.write(f"heads: 4\nblock_size: 32\nmask: '{mask_name}'\nmask_case: per_head\n")
    return pattern, os.path.join(d, mask_name), os.path.join(t, "o u:t#$\\d", "k.ll")


def test_depfile_make():
    """GNU make includes a depfile whose paths hold a space, ':', '#', '$' and '\\' (also right before the
    others), reads the target and both prerequisites as the files they name, and remakes the target when
    either prerequisite is newer."""
    make = shutil.which("make")
    check("make is installed (scripts/setup.sh installs it)", make is not None)
    if not make:
        return
    with tempfile.TemporaryDirectory() as t:
        pattern, mask, out = weird_tree(t)
        rc, o, err = run("compile", pattern, "--head-dim", "64", "--dtype", "bf16", "--arch", "sm_80", "--emit",
                         "ll", "-o", out, "-MF", os.path.join(t, "deps.d"))
        dep = open(os.path.join(t, "deps.d")).read() if rc == 0 else ""
        esc = t.replace(" ", "\\ ")
        want = (f"{esc}/o\\ u\\:t\\#$$\\d/k.ll: {esc}/p\\ a\\:t\\#h$$x\\y/pat.yaml "
                f"{esc}/p\\ a\\:t\\#h$$x\\y/m\\\\\\ a\\\\\\#b\\\\\\:c$$d.txt\n")
        check("depfile of odd paths: each special character escaped, backslashes before them doubled",
              rc == 0 and dep == want, f"rc={rc} {err}\n# got  {dep!r}\n# want {want!r}")
        with open(os.path.join(t, "Makefile"), "w") as f:
            f.write(MAKEFILE)
        rc, mo, me = run_tool(make, t)
        check("make reads the depfile: the target is up to date", rc == 0 and "rebuild" not in mo and
              me == "" and f"'{out}' is up to date" in mo, f"rc={rc} {mo!r} {me!r}")
        for name, f in (("mask file", mask), ("pattern file", pattern)):
            make_newer(f, *({mask, pattern, out} - {f}))
            rc, mo, me = run_tool(make, t)
            check(f"make remakes the target when its {name} is newer, naming both exactly",
                  rc == 0 and me == "" and mo == f"rebuild [{out}] because [{f}]\n", f"rc={rc} {mo!r} {me!r}")


def test_depfile_ninja():
    """Ninja reads the same spelling (paths with a space, ':', '#', '$' and a lone '\\')."""
    ninja = shutil.which("ninja")
    if not ninja:
        return
    with tempfile.TemporaryDirectory() as t:
        d = os.path.join(t, "n a:t#h$x\\y")
        os.mkdir(d)
        for f in ("mask-base.yaml", "masks.txt"):
            shutil.copy(os.path.join(MASK_DATA, f), d)
        rc, o, err = run("compile", os.path.join(d, "mask-base.yaml"), "--head-dim", "64", "--dtype", "bf16",
                         "--arch", "sm_80", "--emit", "ll", "-o", "out.ll", "-MF", "out.d", cwd=t)
        with open(os.path.join(t, "build.ninja"), "w") as f:
            f.write("rule r\n  command = touch out.ll\n  depfile = out.d\nbuild out.ll: r\n")
        files = [os.path.join(t, "out.ll"), os.path.join(d, "mask-base.yaml"), os.path.join(d, "masks.txt")]
        make_newer(*files)  # the output newer than its inputs
        runs = [run_tool(ninja, t), run_tool(ninja, t)]
        make_newer(files[2], *files[:2])
        runs.append(run_tool(ninja, t))
        check("ninja: the depfile's prerequisites are seen (no work, then a rebuild after the mask changes)",
              rc == 0 and all(r[0] == 0 for r in runs) and "no work to do" in runs[1][1] and
              "touch out.ll" in runs[2][1], f"rc={rc} {err} {runs}")
        # the same without the depfile: a rebuild only because of it
        with open(os.path.join(t, "out.d"), "w") as f:
            f.write("out.ll:\n")
        make_newer(*files)
        run_tool(ninja, t)
        make_newer(files[2], *files[:2])
        rc, no, ne = run_tool(ninja, t)
        check("ninja without the depfile sees no change (the check above can fail)", "no work to do" in no, no + ne)


def test_depfile_refused():
    """A path Make cannot read back is an error (exit 1) before anything is written."""
    with tempfile.TemporaryDirectory() as t:
        base = ["--head-dim", "64", "--dtype", "bf16", "--arch", "sm_80", "--emit", "ll"]
        out = os.path.join(t, "new\nline", "k.ll")
        rc, o, err = run("compile", pat("dense"), *base, "-o", out, "-MD")
        check("-MD with a newline in OUT: exit 1, one line, nothing written",
              rc == 1 and err == f"s2c: error: cannot write '{t}/new\\nline/k.ll' in a depfile: Make cannot read a "
              "path with a newline\n" and os.listdir(t) == [], f"rc={rc} {err!r} {os.listdir(t)}")
        rc, o, err = run("compile", pat("dense"), *base, "-o", os.path.join(t, "k\\"), "-MD")
        check("-MD with OUT ending in a backslash: exit 1", rc == 1 and "ending in a backslash" in err and
              os.listdir(t) == [], f"rc={rc} {err!r}")
        shutil.copy(os.path.join(MASK_DATA, "masks.txt"), os.path.join(t, "a\nb.txt"))
        with open(os.path.join(t, "nl.yaml"), "w") as f:
            f.write('heads: 4\nblock_size: 32\nmask: "a\\nb.txt"\nmask_case: per_head\n')
        rc, o, err = run("compile", os.path.join(t, "nl.yaml"), *base, "-o", os.path.join(t, "m.ll"), "-MD")
        check("-MD with a newline in a mask file's name: exit 1, no module, no depfile",
              rc == 1 and "Make cannot read a path with a newline" in err and
              not os.path.exists(os.path.join(t, "m.ll")) and not os.path.exists(os.path.join(t, "m.d")),
              f"rc={rc} {err!r}")
        rc, o, err = run("compile", os.path.join(t, "nl.yaml"), *base, "-o", os.path.join(t, "m.ll"))
        check("without -MD the same compile succeeds", rc == 0, err)


def test_quiet():
    with tempfile.TemporaryDirectory() as d:
        rc, out, err = run("compile", pat("hhst-mixed"), "--head-dim", "64", "--dtype", "bf16", "--arch", "sm_80",
                           "-o", os.path.join(d, "q.cubin"), "--quiet")
        check("compile --quiet: nothing on stdout or stderr, the cubin written",
              rc == 0 and out == "" and err == "" and os.path.getsize(os.path.join(d, "q.cubin")) > 0, out + err)
        rc, out, err = run("compile", pat("dense"), "--head-dim", "64", "--dtype", "bf16", "--arch", "sm_80",
                           "-o", "-", "-q", binary=True)
        check("compile -q -o -: only the cubin", rc == 0 and out[:4] == b"\x7fELF" and err == "", err)
        rc, out, err = run("check", "-q", pat("hhst-mixed"), pat("dense"))
        check("check --quiet: nothing printed, exit 0", rc == 0 and out == "" and err == "", out + err)
        bad = os.path.join(MASK_DATA, "mask-missing.yaml")
        rc, out, err = run("check", "-q", bad)
        check("check --quiet on a bad file: exit 1, only the error line",
              rc == 1 and out == "" and len(err.strip().split("\n")) == 1 and err.startswith(bad + ":"), err)


def regs_of_verbose(err):
    return {m[0]: int(m[1]) for m in re.findall(r"^(\S+): (\d+) registers, ", err, re.M)}


def test_registers():
    """info's registers for every kernel of forward, backward (with the dS path on sm_90a) and decode modules,
    in text and JSON, equal to what the assembler reported at compile time."""
    cases = [("fwd", "sm_80", "phi3-small", {"fwd", "fwd_seqs", "combine", "rows"}),
             ("fwd", "sm_90a", "phi3-small", {"fwd", "fwd_seqs", "fwd_wide", "combine", "rows"}),
             ("bwd", "sm_80", "dense", {"bwd_pre", "bwd_dkdv", "bwd_dq", "rows"}),
             ("bwd", "sm_90a", "phi3-small", {"bwd_pre", "bwd_dkdv", "bwd_dq", "bwd_dqds", "bwd_dqds2", "rows"}),
             ("decode", "sm_80", "decode-l16v8", {"decode", "combine"}),
             ("decode", "sm_90a", "decode-l16v8", {"decode", "combine"})]
    with tempfile.TemporaryDirectory() as d:
        for kind, arch, name, roles in cases:
            out = os.path.join(d, f"{kind}_{arch}.cubin")
            rc, o, err = run("compile", pat(name), "--kind", kind, "--head-dim", "128", "--dtype", "bf16",
                             "--arch", arch, "-o", out, "-v")
            ptxas = regs_of_verbose(err)
            rc2, js, err2 = run("info", out, "--format", "json")
            rc3, text, err3 = run("info", out)
            j = json.loads(js) if rc2 == 0 else {}
            fns = [k for e in j.get("entries", []) for k in e["kernels"]]
            got = {k["symbol"]: k["registers"] for k in fns}
            check(f"info {kind} {arch}: kernels of roles {sorted(roles)}, each with registers > 0 equal to ptxas's",
                  rc == 0 and rc2 == 0 and {k["role"] for k in fns} == roles and
                  all(isinstance(r, int) and r > 0 for r in got.values()) and got == ptxas,
                  f"rc={rc} {rc2} {got} ptxas {ptxas} {err2}")
            keys = {k["role"]: k["min_keys"] for k in fns}
            check(f"info {kind} {arch}: the wide variant's rule (384 keys per query tile) on its record alone",
                  all(v == (384 if r == "fwd_wide" else 0) for r, v in keys.items()) and
                  (("launched from 384 keys per query tile" in text) == ("fwd_wide" in roles)), f"{keys}")
            text_regs = {m[0]: int(m[1]) for m in re.findall(r"^  (\S+): registers (\d+)$", text, re.M)}
            main = re.findall(r"^  registers (\d+) \(EIATTR_REGCOUNT\)$", text, re.M)
            check(f"info {kind} {arch} text: no 'unknown', every kernel's registers as in JSON",
                  rc3 == 0 and "unknown" not in text and len(main) == 1 and
                  len(text_regs) + 1 == len(got) and all(got[s] == r for s, r in text_regs.items()),
                  f"{text_regs} {main} {got}")
            check(f"info {kind} {arch} json: header", (j.get("schema_version"), j.get("command"), j.get("arch"),
                                                       j.get("path"), j.get("bytes")) ==
                  (1, "info", arch, out, os.path.getsize(out)) and
                  [p["name"] for p in j.get("patterns", [])] == [name] and
                  j["entries"][0]["kind"] == kind and j["entries"][0]["head_dim"] == 128, str(j)[:300])


def test_multi_arch():
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "m", "out.cubin")
        rc, o, err = run("compile", pat("dense"), "--head-dim", "64", "--dtype", "bf16", "--arch", "sm_80",
                         "--arch", "sm_90a", "-o", out, "-MD")
        files = sorted(os.listdir(os.path.join(d, "m"))) if rc == 0 else []
        check("--arch sm_80 --arch sm_90a: out.sm_80.cubin and out.sm_90a.cubin",
              rc == 0 and files == ["out.d", "out.sm_80.cubin", "out.sm_90a.cubin"], f"rc={rc} {files} {err}")
        for arch in ("sm_80", "sm_90a"):
            rc, js, err = run("info", os.path.join(d, "m", f"out.{arch}.cubin"), "--format", "json")
            check(f"out.{arch}.cubin is built for {arch}", rc == 0 and json.loads(js)["arch"] == arch, err)
        dep = open(os.path.join(d, "m", "out.d")).read() if rc == 0 else ""
        check("one depfile names both modules", dep == f"{d}/m/out.sm_80.cubin {d}/m/out.sm_90a.cubin: "
              f"{pat('dense')}\n", repr(dep))
        rc, o, err = run("compile", pat("dense"), "--head-dim", "64", "--dtype", "bf16", "--arch", "sm_80",
                         "--arch", "sm_80", "-o", out)
        check("the same --arch twice: usage error", rc == 2 and "twice" in err, f"rc={rc} {err!r}")
        rc, o, err = run("compile", pat("dense"), "--head-dim", "64", "--dtype", "bf16", "--arch", "sm_80",
                         "--arch", "sm_90a", "-o", "-")
        check("several --arch with -o -: usage error", rc == 2 and "one --arch" in err, f"rc={rc} {err!r}")


def main():
    for t in (test_help, test_inapplicable, test_check_json, test_layout_json, test_kv_memory_json,
              test_stdin_stdout, test_directories, test_depfiles, test_depfile_make, test_depfile_ninja,
              test_depfile_refused, test_quiet, test_registers, test_multi_arch):
        try:
            t()
        except Exception as e:  # a crash in a test is a failure, not a pass
            import traceback
            traceback.print_exc()
            check(t.__name__ + " raised", False, repr(e))
    print(f"{count - len(failures)} of {count} CLI scripting checks passed "
          f"(each run under {'no' if SANITIZED else '1 GiB'} address-space limit, {TIMEOUT} s)")
    sys.exit(1 if failures else 0)


main()
