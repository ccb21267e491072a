"""End-to-end training step of a 1B Llama-shaped model (16 layers, hidden 2048,
intermediate 8192, 16 heads of 128, KV_HEADS kv heads, vocab 32000, random weights,
bf16, batch 1): forward + backward + fused AdamW step, with attention through
transformers' registry, all in one process:

  flash    SDPA, flash backend          cudnn  SDPA, cuDNN backend
  noop     a differentiable no-op (the rest of the step)
  dkernel  the S2 Triton library (only with DKERNEL_DIR)
  s2c      s2c.integrations.hf, config.s2c with no dense layers

The sparse providers run every layer local 16 / stride 8 / block 64, per-kv-head shifts.
With noop and s2c (and dkernel), one layer's attention forward + backward is also timed
alone (L2 flushed, median; q, k, v as the model passes them, and for s2c also as
contiguous [B, H, S, D] tensors: "s2c_contiguous"), giving each sparse
provider's bound = noop + 16 * call and its gap = step / bound - 1: how far the step is
from what its kernels allow.
Prints ms per step and tokens/s, the ratios of s2c to flash, cuDNN and dkernel, and a table.

Run on the GPU machine (S2C_LIBDIR: the libs2c build; DKERNEL_DIR: the folder that holds dkernel/):
  OUT=DIR SEQS=32768 python3 bench/e2e/train.py
Env: KV_HEADS (8; 16 for MHA), ONLY=flash,cudnn,noop,s2c,dkernel.  Writes OUT/train.json."""
import contextlib
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import s2c  # noqa: E402,F401
from common import H, bench, do_bench, fmt, llama_1b, load_dkernel, register_providers, train_step  # noqa: E402

OUT = os.environ.get("OUT", "/tmp")
SEQS = [int(x) for x in os.environ.get("SEQS", "32768").split(",")]
KV_HEADS = int(os.environ.get("KV_HEADS", "8"))
ONLY = set(os.environ["ONLY"].split(",")) if os.environ.get("ONLY") else None


def main():
    if not torch.cuda.is_available():
        print("no CUDA device: skipped"); sys.exit(77)
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import s2c.integrations.hf as s2hf

    LSSA = None
    if os.environ.get("DKERNEL_DIR") and (ONLY is None or "dkernel" in ONLY):
        LSSA = load_dkernel()
    dk_attn = register_providers(KV_HEADS, LSSA)
    cfg, model, opt = llama_1b(KV_HEADS)
    print(f"params {sum(p.numel() for p in model.parameters()) / 1e9:.2f}B on {torch.cuda.get_device_name()}, "
          f"GQA {H}/{KV_HEADS}", flush=True)

    def step(ids):
        train_step(model, opt, ids)

    # dkernel last: a fault in it (seen with GQA) ends the CUDA context for what follows
    provs = [("flash", "sdpa", SDPBackend.FLASH_ATTENTION), ("cudnn", "sdpa", SDPBackend.CUDNN_ATTENTION),
             ("noop", "noop", None), ("s2c", "s2c", None)] + ([("dkernel", "dkernel", None)] if LSSA else [])
    rows = []
    for S in SEQS:
        ids = torch.randint(0, 32000, (1, S), device="cuda")
        r = dict(S=S, kv_heads=KV_HEADS, gpu=torch.cuda.get_device_name(), torch=torch.__version__)
        for name, impl, be in provs:
            if ONLY is not None and name not in ONLY:
                continue
            model.config._attn_implementation = impl
            s2hf._cache.clear()     # so that the count of layers on s2c below is this run's
            try:
                with sdpa_kernel([be]) if be is not None else contextlib.nullcontext():
                    r[name] = bench(lambda: step(ids))
            except Exception as ex:
                r[name] = None; print("  fail", name, repr(ex)[:300], flush=True)
            if name == "s2c":   # the layers s2c ran (the others fell back to SDPA)
                r["s2c_layers"] = sum(p is not None for _, p in s2hf._cache.values())
            if r[name]:
                r[name + "_tok_s"] = S / (r[name] / 1e3)
            print(f"  S={S} {name}: {r[name]} ms", flush=True)
            torch.cuda.empty_cache()
        D = cfg.hidden_size // H
        # as the model passes them: [B, H, S, D] views of [B, S, H, D] projections
        q, k, v = (torch.randn(1, S, h, D, device="cuda", dtype=torch.bfloat16).transpose(1, 2).requires_grad_(True)
                   for h in (H, KV_HEADS, KV_HEADS))
        qc, kc, vc = (t.detach().contiguous().requires_grad_(True) for t in (q, k, v))
        do = torch.randn(1, S, H, D, device="cuda", dtype=torch.bfloat16)
        pat = s2hf.pattern_for_layer(model.config, 0, H, KV_HEADS)
        calls = {"s2c": lambda: s2c.sparse_attn_func(q, k, v, pat, layout="bhsd", out_layout="bshd"),
                 "s2c_contiguous": lambda: s2c.sparse_attn_func(qc, kc, vc, pat, layout="bhsd", out_layout="bshd")}
        if LSSA:
            calls["dkernel"] = lambda: dk_attn(None, q, k, v, None)[0]
        for name, fn in calls.items():
            if r.get(name.split("_")[0]) and r.get("noop"):
                try:
                    r["call_" + name] = do_bench(lambda: torch.autograd.backward(fn(), do))
                    r["bound_" + name] = r["noop"] + cfg.num_hidden_layers * r["call_" + name]
                    r["gap_" + name] = r[name.split("_")[0]] / r["bound_" + name] - 1
                    print(f"  S={S} {name}: one layer's fwd+bwd {r['call_' + name]:.3f} ms, bound "
                          f"{r['bound_' + name]:.0f} ms, step over bound {100 * r['gap_' + name]:.1f}%", flush=True)
                except Exception as ex:
                    print("  fail call", name, repr(ex)[:300], flush=True)
        del q, k, v, qc, kc, vc, do
        for a in ("flash", "cudnn", "dkernel"):
            if r.get(a) and r.get("s2c"):
                r["s2c_vs_" + a] = r[a] / r["s2c"]
        print(json.dumps(r), flush=True)
        rows.append(r)
        json.dump(rows, open(os.path.join(OUT, "train.json"), "w"), indent=1)

    f = fmt
    print(f"\n{'S':>7} {'flash':>7} {'cudnn':>7} {'noop':>7} {'dkernel':>8} {'s2c':>7} {'s2c tok/s':>10} "
          f"{'x flash':>8} {'x cudnn':>8} {'x dk':>6} {'s2c bound':>9} {'dk bound':>9}")
    for r in rows:
        print(f"{r['S']:>7} {f(r.get('flash')):>7} {f(r.get('cudnn')):>7} {f(r.get('noop')):>7} "
              f"{f(r.get('dkernel')):>8} {f(r.get('s2c')):>7} {f(r.get('s2c_tok_s')):>10} "
              f"{f(r.get('s2c_vs_flash'), 2):>8} {f(r.get('s2c_vs_cudnn'), 2):>8} {f(r.get('s2c_vs_dkernel'), 2):>6} "
              f"{f(r.get('bound_s2c')):>9} {f(r.get('bound_dkernel')):>9}")


if __name__ == "__main__":
    main()
