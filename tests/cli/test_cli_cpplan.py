#!/usr/bin/env python3
"""`s2c cp-plan`: every column of its rows against a model written here from
the pattern's rule (causal, absolute stripes: key block n is kept by query
block m iff n <= m and (m - n < local or (n + shift) % stride == 0), shift
one per kv group), for both shardings; the issue's 1/6 claim; its errors.

  test_cli_cpplan.py S2C_BINARY
"""
import subprocess
import sys

HEADS, KVH, BS, LOCAL, STRIDE, D, ELEM = 32, 8, 64, 16, 8, 128, 2


def run(binary, *args):
    return subprocess.run([binary, "cp-plan", *args], capture_output=True, text=True, timeout=300)


def owner_of(P, zig, nb):
    chunks = 2 * P if zig else P
    cb = nb // chunks
    return [(c if c < P else 2 * P - 1 - c) for c in (n // cb for n in range(nb))]


def model(P, zig, seq, tflops, gbps):
    nb = seq // BS
    own = owner_of(P, zig, nb)
    per_tok = 2 * D * ELEM
    recv, pairs = [0] * P, [0.0] * P
    for g in range(KVH):
        stripe = [(n + g + 1) % STRIDE == 0 for n in range(nb)]
        last_own = [-1] * P           # highest query block of each rank
        for m in range(nb):
            last_own[own[m]] = m
        for r in range(P):
            for n in range(nb):
                if own[n] == r:
                    continue
                window = any(own[m] == r for m in range(n, min(n + LOCAL, nb)))
                if window or (stripe[n] and n <= last_own[r]):
                    recv[r] += 1
        stripes_upto = [0] * (nb + 1)   # stripes among blocks < x
        for n in range(nb):
            stripes_upto[n + 1] = stripes_upto[n] + stripe[n]
        heads = HEADS // KVH
        for m in range(nb):
            kept = min(LOCAL, m + 1) + (stripes_upto[m - LOCAL + 1] if m >= LOCAL else 0)
            pairs[own[m]] += heads * (kept * BS * BS - BS * (BS - 1) // 2)
    mib = 1048576.0
    rb = [x * BS * per_tok for x in recv]
    ring = (seq - seq // P) * KVH * per_tok
    comp = [4 * p * D / (tflops * 1e12) for p in pairs]
    comm = [b / (gbps * 1e9) for b in rb]
    return [sum(rb) / P / mib, max(rb) / mib, ring / mib, max(rb) / ring, max(pairs) / (sum(pairs) / P),
            max(comp) * 1e3, max(comm) * 1e3, max(max(a, b) for a, b in zip(comp, comm)) * 1e3,
            ring / (gbps * 1e9) * 1e3, max(max(a, ring / (gbps * 1e9)) for a in comp) * 1e3]


def main():
    binary = sys.argv[1]
    failures = []

    def check(ok, what):
        if not ok:
            failures.append(what)

    seq, tflops, gbps = 65536, 500.0, 2.0
    p = run(binary, "--ranks", "2,4", "--seq-len", str(seq), "--sharding", "both", "--tflops", str(tflops),
            "--link-gbps", str(gbps))
    check(p.returncode == 0 and p.stderr == "", f"rows: exit {p.returncode}, stderr {p.stderr!r}")
    lines = p.stdout.splitlines()
    check(lines[0].startswith("# l16v8-gqa8: 32 heads, 8 kv heads, block 64, causal; bf16, D 128, tile 128 x 64"),
          f"first line {lines[0]!r}")
    check(lines[2].split()[:3] == ["ranks", "tokens", "sharding"], f"column line {lines[2]!r}")
    rows = [l.split() for l in lines[3:]]
    check([(r[0], r[1], r[2]) for r in rows] == [("2", "65536", "zigzag"), ("2", "65536", "contiguous"),
                                                ("4", "65536", "zigzag"), ("4", "65536", "contiguous")],
          f"rows {rows}")
    decimals = [1, 1, 1, 4, 4, 2, 2, 2, 2, 2]
    for r in rows:
        want = model(int(r[0]), r[2] == "zigzag", seq, tflops, gbps)
        for i, (got, w, d) in enumerate(zip(r[3:], want, decimals)):
            check(abs(float(got) - w) <= 0.6 * 10 ** -d, f"{r[:3]} column {i + 3}: {got}, model {w:.6f}")
        check(float(r[6]) <= 1 / 6, f"{r[:3]}: ratio {r[6]} above 1/6")
        if r[2] == "zigzag":
            check(float(r[7]) <= 1.05, f"{r[:3]}: zigzag balance {r[7]}")
    # quiet: the column line and the rows only
    q = run(binary, "-q", "--ranks", "2", "--seq-len", str(seq))
    check(q.returncode == 0 and q.stdout.splitlines()[0].startswith("ranks") and len(q.stdout.splitlines()) == 2,
          f"quiet: {q.stdout!r}")

    errors = [
        (["--ranks", "0"], 2, "s2c: error: cp-plan: --ranks: expected an integer in 1..4096, got '0'"),
        (["--ranks", "2,x"], 2, "s2c: error: cp-plan: --ranks: expected an integer in 1..4096, got 'x'"),
        (["--sharding", "ring"], 2, "s2c: error: cp-plan: --sharding must be zigzag, contiguous or both, got 'ring'"),
        (["--tflops", "0"], 2, "s2c: error: cp-plan: --tflops: expected a number in (0, 1e+06], got '0'"),
        (["--link-gbps", "fast"], 2, "s2c: error: cp-plan: --link-gbps: expected a number in (0, 1e+06], got 'fast'"),
        (["--name", "x"], 2, "s2c: error: cp-plan: --name needs a PATTERN file"),
        (["--arch", "sm_90a"], 2, "s2c: error: cp-plan: option '--arch' does not apply to cp-plan"),
        (["--ranks", "2", "--seq-len", "1000"], 1,
         "s2c: error: cp plan: seq_len 1000 is not 4 chunks of whole 128-token tiles (a multiple of 512)"),
        (["--ranks", "2", "--seq-len", "65536", "--block-n", "32"], 1,
         "s2c: error: cp plan: tile 128 x 32: each side a power of two in 64..128 (the pattern's block is 64)"),
        (["a.yaml", "b.yaml"], 2, "s2c: error: cp-plan: unexpected argument 'b.yaml'"),
    ]
    for args, code, first in errors:
        e = run(binary, *args)
        check(e.returncode == code and e.stdout == "" and e.stderr.splitlines()[0] == first,
              f"{args}: exit {e.returncode}, stdout {e.stdout!r}, stderr {e.stderr!r}")
    # a pattern file: its length bound is the pattern's
    import os
    here = os.path.dirname(os.path.abspath(__file__))
    phi3 = os.path.join(here, "..", "..", "patterns", "phi3-small.yaml")
    e = run(binary, phi3, "--ranks", "2", "--seq-len", "1048576")
    check(e.returncode == 1 and e.stderr.startswith("s2c: error: cp plan: seq_len 1048576 outside 1..131072"),
          f"phi3-small at 1M: {e.returncode} {e.stderr!r}")
    ok = run(binary, phi3, "--ranks", "2", "--seq-len", "131072", "-q")
    check(ok.returncode == 0 and len(ok.stdout.splitlines()) == 2, f"phi3-small at 128K: {ok.stdout!r} {ok.stderr!r}")

    for f in failures:
        print("FAIL:", f)
    print(f"cp-plan: {len(rows)} rows against the model, {len(errors) + 3} errors; {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
