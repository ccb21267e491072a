#!/usr/bin/env python3
"""The peers' measured times of PEERS.md as bench/plot.py rows.

  peers_to_csv.py PEERS_MD [--gpu H200|H100] [-o FILE]

H200: the "Forward (ms)" and "Forward + backward (ms)" tables; H100: the table
"The same rows on an H100".  Each (row, peer) with a time becomes
`kind,config,seq_len,impl,ms`; config is the bench's config family of the row's
(block, local, stride) (b64, mergeq16, b64_l16v8), as bench_fwd --csv writes it.
FA2 and cuDNN are dense causal attention at the same B, H, S.
"""
import argparse
import re
import sys

FAMILY = {(64, 8, 16): "b64", (16, 32, 16): "mergeq16", (64, 16, 8): "b64_l16v8"}
PEERS = ["FA2", "cuDNN", "Flex", "S2-Triton"]


def seq_len(text):
    m = re.fullmatch(r"(\d+)K", text.strip())
    if not m:
        raise ValueError(f"sequence length {text!r}")
    return int(m.group(1)) * 1024


def cells(line):
    return [c.strip() for c in line.strip().strip("|").split("|")]


def section(lines, title):
    """The table rows (cells) of the first section whose heading starts with title."""
    out, inside = [], False
    for line in lines:
        if line.startswith("## "):
            if inside:
                break
            inside = line[3:].startswith(title)
        elif inside and line.startswith("|") and not line.startswith("|---"):
            out.append(cells(line))
    if not out:
        raise ValueError(f"no table under '## {title}'")
    return out[0], out[1:]


def number(text):
    try:
        return float(text.split()[0])
    except (ValueError, IndexError):
        return None   # "—": not measured


def h200(lines):
    rows = []
    for title, kind in (("Forward (ms)", "fwd"), ("Forward + backward (ms)", "fwd_bwd")):
        head, body = section(lines, title)
        for r in body:
            b, h, s = r[0].split(",")
            fam = FAMILY[tuple(int(x) for x in re.findall(r"\d+", r[1])[:3])]
            for peer in PEERS:
                ms = number(r[head.index(peer)])
                if ms is not None:
                    rows.append((kind, fam, seq_len(s), peer, ms))
    return rows


def h100(lines):
    rows = []
    head, body = section(lines, "The same rows on an H100")
    for r in body:
        m = re.fullmatch(r"(fwd\+bwd|fwd) (\d+),(\d+),(\d+K) b(\d+)(?: L(\d+) V(\d+))?", r[0])
        if not m:
            continue   # decode rows
        kind = "fwd_bwd" if m.group(1) == "fwd+bwd" else "fwd"
        block = int(m.group(5))
        local, stride = (int(m.group(6)), int(m.group(7))) if m.group(6) else ((8, 16) if block == 64 else (32, 16))
        fam = FAMILY[(block, local, stride)]
        for peer in PEERS:
            ms = number(r[head.index(peer)])
            if ms is not None:
                rows.append((kind, fam, seq_len(m.group(4)), peer, ms))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("peers_md")
    ap.add_argument("--gpu", choices=["H200", "H100"], default="H200")
    ap.add_argument("-o", "--output")
    a = ap.parse_args()
    lines = open(a.peers_md, encoding="utf-8").read().splitlines()
    rows = h200(lines) if a.gpu == "H200" else h100(lines)
    out = open(a.output, "w") if a.output else sys.stdout
    out.write(f"# peers' times on the {a.gpu} from {a.peers_md} (torch 2.11.0+cu130, triton 3.6.0, bf16, head_dim 128,\n"
              "# causal, triton.testing.do_bench median; FA2 and cuDNN: dense causal SDPA at the same B, H, S),\n"
              f"# written by bench/peers_to_csv.py --gpu {a.gpu}\n")
    out.write("kind,config,seq_len,impl,ms\n")
    for r in rows:
        out.write(",".join(str(x) for x in r) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
