#!/usr/bin/env python3
"""Time torch's attention on the PEERS.md forward rows next to s2c's bench_fwd.

For each configuration of bench_fwd (bf16, D 128, causal):
  * torch SDPA, dense causal, flash backend and cuDNN backend;
  * FlexAttention (torch.compile'd), block mask from the same S2 pattern
    (mask_mod below: causal, local blocks, vertical stride shifted per head,
    dense heads) with 128-token tiles;
and prints their medians (triton.testing.do_bench) with ratios s2c / peer.
s2c's numbers come from `bench_fwd --csv` (run here with --bench PATH, or
read from a saved CSV with --csv FILE).  Needs torch with CUDA; without it,
says so and exits 0.

  compare.py [--bench PATH | --csv FILE] [--config NAME,..] [--no-flex]
"""
import argparse
import csv
import io
import subprocess
import sys

# name: batch, heads, seq, block, local, stride, dense_heads (bench/bench_fwd.c)
CONFIGS = {
    "b64_8k": (4, 16, 8192, 64, 8, 16, 0),
    "mergeq16_8k": (4, 16, 8192, 16, 32, 16, 0),
    "b64_32k": (1, 16, 32768, 64, 8, 16, 0),
    "b64_128k": (1, 16, 131072, 64, 8, 16, 0),
    "b64_l16v8_16k": (2, 32, 16384, 64, 16, 8, 0),
    "dense_8k": (4, 16, 8192, 64, 8, 1, 0),
    "b64_8k_dense4": (4, 16, 8192, 64, 8, 16, 4),
}
D = 128


def s2c_rows(args):
    if args.csv:
        text = open(args.csv).read()
    else:
        cmd = [args.bench, "--csv", "--config", ",".join(args.configs)]
        text = subprocess.run(cmd, capture_output=True, text=True, check=False).stdout
    best = {}
    lines = [l for l in text.splitlines() if l.startswith("config,") or l.split(",")[0] in CONFIGS]
    for r in csv.DictReader(io.StringIO("\n".join(lines))):
        if r.get("check") != "ok":
            continue
        ms = float(r["ms_median"])
        if r["config"] not in best or ms < best[r["config"]][0]:
            best[r["config"]] = (ms, r.get("persistent", "?"))
    return best


def s2_mask_mod(heads, block, local, stride, dense_heads):
    """The S2 local + vertical-stride rule at token level (ir/predicate.c,
    absolute vertical position, head_sliding_offset 0, kv_heads = heads)."""
    step = max(1, stride // heads)

    def mask_mod(b, h, q, kv):
        qb, kb = q // block, kv // block
        local_hit = (qb - kb) < local
        stride_hit = ((kb + h * step) % stride) == 0
        dense = h >= heads - dense_heads
        return (kv <= q) & (local_hit | stride_hit | dense)

    return mask_mod


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", default="build/bench/bench_fwd")
    ap.add_argument("--csv")
    ap.add_argument("--config", default=",".join(CONFIGS))
    ap.add_argument("--no-flex", action="store_true")
    args = ap.parse_args()
    args.configs = [c for c in args.config.split(",") if c in CONFIGS]
    try:
        import torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
        from triton.testing import do_bench
    except ImportError as e:
        print(f"compare.py: no torch/triton ({e}): skipped")
        return 0
    if not torch.cuda.is_available():
        print("compare.py: no CUDA device: skipped")
        return 0
    flex = None
    if not args.no_flex:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        flex = torch.compile(flex_attention, dynamic=False)
    s2c = s2c_rows(args)
    dev = torch.cuda.get_device_name()
    print(f"device {dev}, torch {torch.__version__}; times: median ms (do_bench); ratio = s2c / peer (<1: s2c faster)")
    print(f"{'config':<14} {'s2c':>8} {'grid':>5} {'flash':>8} {'cudnn':>8} {'flex':>8} "
          f"{'/flash':>7} {'/cudnn':>7} {'/flex':>7}")
    for name in args.configs:
        B, H, S, blk, loc, strd, nd = CONFIGS[name]
        q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        res = {}
        for tag, be in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
            try:
                with sdpa_kernel([be]):
                    res[tag] = do_bench(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                                        warmup=25, rep=100, return_mode="median")
            except Exception as e:  # a backend the build or the shape lacks
                print(f"  {name} {tag}: {type(e).__name__}: {str(e)[:120]}", file=sys.stderr)
        if flex is not None:
            try:
                # _compile: evaluate the mask_mod block by block (the eager path materialises
                # [H, S, S] and runs out of memory at 32K)
                bm = create_block_mask(s2_mask_mod(H, blk, loc, strd, nd), B=None, H=H, Q_LEN=S, KV_LEN=S,
                                       BLOCK_SIZE=128, device="cuda", _compile=True)
                res["flex"] = do_bench(lambda: flex(q, k, v, block_mask=bm), warmup=25, rep=100,
                                       return_mode="median")
            except Exception as e:
                print(f"  {name} flex: {type(e).__name__}: {str(e)[:160]}", file=sys.stderr)
        ms, pers = s2c.get(name, (None, "?"))

        def fmt(x):
            return f"{x:8.3f}" if x is not None else f"{'-':>8}"

        def ratio(p):
            return f"{ms / res[p]:7.3f}" if ms is not None and p in res else f"{'-':>7}"

        grid = {"1": "pers", "0": "plain"}.get(str(pers), "?")
        print(f"{name:<14} {fmt(ms)} {grid:>5} {fmt(res.get('flash'))} {fmt(res.get('cudnn'))} "
              f"{fmt(res.get('flex'))} {ratio('flash')} {ratio('cudnn')} {ratio('flex')}", flush=True)
        del q, k, v
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
