#!/usr/bin/env python3
"""Time against sequence length, s2c beside its peers: one panel for the
forward, one for forward + backward (grouped bars, as FlashAttention's README
shows its speed), written as a PNG.

  plot.py CSV [CSV..] [-o OUT.png] [--config FAMILY] [--title TEXT]

Input: CSV files of `kind,config,seq_len,impl,ms` rows (kind fwd or fwd_bwd;
lines starting with # are comments), e.g. `bench_fwd --csv FILE`,
`bench_bwd --csv FILE` and the peers' times from `peers_to_csv.py`.  Several
rows of one (kind, config, seq_len, impl) (variants, repeated runs) count as
their minimum.  --config picks the config family to plot (default: the one
with the most sequence lengths).  Each bar is labelled with its time; the
y axis is logarithmic (dense peers are 10-100 times slower than the sparse
ones at long sequences).
"""
import argparse
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

KINDS = (("fwd", "Forward"), ("fwd_bwd", "Forward + backward"))
ORDER = ["s2c", "S2-Triton", "Flex", "cuDNN", "FA2"]   # s2c first; others after these, by name
COLORS = {"s2c": "#d62728", "S2-Triton": "#1f77b4", "Flex": "#2ca02c", "cuDNN": "#9467bd", "FA2": "#8c564b"}


def read_rows(paths):
    best = {}
    for path in paths:
        with open(path, newline="") as f:
            lines = [ln for ln in f if ln.strip() and not ln.lstrip().startswith("#")]
        for i, r in enumerate(csv.DictReader(lines)):
            try:
                kind, config, impl = r["kind"].strip(), r["config"].strip(), r["impl"].strip()
                seq, ms = int(r["seq_len"]), float(r["ms"])
            except (KeyError, TypeError, ValueError) as e:
                raise SystemExit(f"{path}: row {i + 1}: expected kind,config,seq_len,impl,ms ({e})")
            if kind not in dict(KINDS) or seq < 1 or not ms > 0:
                raise SystemExit(f"{path}: row {i + 1}: kind {kind!r}, seq_len {seq}, ms {ms}")
            key = (kind, config, seq, impl)
            best[key] = min(ms, best.get(key, ms))
    return best


def seq_label(n):
    return f"{n // 1024}K" if n % 1024 == 0 else str(n)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv", nargs="+")
    ap.add_argument("-o", "--output", default="attention.png")
    ap.add_argument("--config", help="config family to plot (default: the one with the most sequence lengths)")
    ap.add_argument("--title", default="")
    a = ap.parse_args()
    best = read_rows(a.csv)
    if not best:
        raise SystemExit("no rows")
    configs = sorted({k[1] for k in best})
    config = a.config or max(configs, key=lambda c: (len({k[2] for k in best if k[1] == c}), c == "b64"))
    if config not in configs:
        raise SystemExit(f"no rows of config {config!r} (there are: {', '.join(configs)})")
    rows = {k: v for k, v in best.items() if k[1] == config}
    impls = sorted({k[3] for k in rows}, key=lambda i: (ORDER.index(i) if i in ORDER else len(ORDER), i))

    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
    for ax, (kind, name) in zip(axes, KINDS):
        seqs = sorted({k[2] for k in rows if k[0] == kind})
        width = 0.8 / max(1, len(impls))
        for j, impl in enumerate(impls):
            xs, ys = [], []
            for x, s in enumerate(seqs):
                if (kind, config, s, impl) in rows:
                    xs.append(x + (j - (len(impls) - 1) / 2) * width)
                    ys.append(rows[(kind, config, s, impl)])
            bars = ax.bar(xs, ys, width, label=impl, color=COLORS.get(impl))
            ax.bar_label(bars, labels=[f"{y:.3g}" for y in ys], fontsize=7, rotation=90, padding=2)
        ax.set_xticks(range(len(seqs)), [seq_label(s) for s in seqs])
        ax.set_yscale("log")
        ax.set_xlabel("sequence length")
        ax.set_ylabel("time (ms, lower is better)")
        ax.set_title(f"{name}: {config}")
        ax.margins(y=0.25)
        if not seqs:
            ax.text(0.5, 0.5, "no rows", ha="center", transform=ax.transAxes)
    axes[0].legend(fontsize=8)
    if a.title:
        fig.suptitle(a.title)
    fig.tight_layout()
    fig.savefig(a.output, dpi=110)
    print(f"{a.output}: config {config}, {len(rows)} times, implementations {', '.join(impls)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
