"""End-to-end prefill of an 8B Llama-3-shaped model (32 layers, hidden 4096, GQA 32/8 of
head dim 128, random weights, bf16, batch 1, LlamaModel only, no lm_head,
use_cache=False) with attention through transformers' registry, all in one process:

  sdpa     SDPA with cuDNN and with flash (both reported; "sdpa" is the faster)
  zero     attention replaced by zeros (the rest of the model)
  dkernel  the S2 Triton library (only with DKERNEL_DIR), layers < DENSE on SDPA
  s2c      s2c.integrations.hf, config.s2c local 16 / stride 8 / block 64, layers < DENSE dense

Dense layers of dkernel and s2c run on the faster SDPA backend.  Also the attention
calls alone, L2 flushed, median: one dense layer (SDPA best) and one sparse layer
(s2c.sparse_attn_func), giving bound = zero + DENSE*dense_call + (32-DENSE)*s2c_call
and gap = s2c/bound - 1.  ALL_S2=1 adds every layer S2 at local 8 / stride 16 for
s2c and dkernel ("s2c_all", "dkernel_all", with bound_all = zero + 32*s2c_call_all).

Run on the GPU machine (S2C_LIBDIR: the libs2c build; DKERNEL_DIR: the folder that holds dkernel/):
  OUT=DIR SEQS=32768,131072 python3 bench/e2e/prefill.py
Env: DENSE (2), ONLY=sdpa,zero,dkernel,s2c, ALL_S2=1.  Writes OUT/prefill.json."""
import contextlib
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import s2c  # noqa: E402
from common import bench, do_bench, fmt  # noqa: E402 (bench/e2e/common.py)

OUT = os.environ.get("OUT", "/tmp")
SEQS = [int(x) for x in os.environ.get("SEQS", "32768,131072").split(",")]
DENSE = int(os.environ.get("DENSE", "2"))
ONLY = set(os.environ["ONLY"].split(",")) if os.environ.get("ONLY") else None
ALL_S2 = os.environ.get("ALL_S2") == "1"
LAYERS, H, HKV, D, BLOCK = 32, 32, 8, 128, 64
SPLIT = dict(dense=DENSE, local=16, stride=8)        # layers < dense on SDPA, the rest S2
ALL = dict(dense=0, local=8, stride=16)              # the paper's speed setting, every layer S2
MODE = dict(SPLIT)                                   # what the dkernel provider runs now




def wanted(group):
    return ONLY is None or group in ONLY


def main():
    if not torch.cuda.is_available():
        print("no CUDA device: skipped"); sys.exit(77)
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from transformers import AttentionInterface, LlamaConfig, LlamaModel
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    import s2c.integrations.hf as s2hf

    LSSA = None
    if os.environ.get("DKERNEL_DIR") and wanted("dkernel"):
        import importlib.metadata as md     # dkernel asks for its own version at import: give it one
        orig = md.version
        md.version = lambda name: "0.0.2" if name == "dkernel" else orig(name)
        sys.path.insert(0, os.environ["DKERNEL_DIR"])
        from dkernel import LocalStrideSparseAttention as LSSA
    dk_mods = {}

    def zero_attn(module, query, key, value, attention_mask, **kw):
        return torch.zeros_like(query).transpose(1, 2).contiguous(), None

    def dk_attn(module, query, key, value, attention_mask, scaling=None, **kw):
        if module.layer_idx < MODE["dense"]:
            return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, **kw)
        k = (query.shape[2], MODE["local"], MODE["stride"])
        if k not in dk_mods:
            dk_mods[k] = LSSA(H, k[0], BLOCK, k[1], k[2], num_kv_heads=HKV, seq_dim=2).cuda()
        return dk_mods[k](query, key, value, scaling).transpose(1, 2).contiguous(), None

    AttentionInterface.register("zero", zero_attn)
    AttentionInterface.register("dkernel", dk_attn)
    s2hf.register()

    torch.backends.cuda.matmul.allow_tf32 = True
    cfg = LlamaConfig(hidden_size=4096, intermediate_size=14336, num_hidden_layers=LAYERS,
                      num_attention_heads=H, num_key_value_heads=HKV, vocab_size=128256,
                      max_position_embeddings=262144, rope_theta=500000.0, torch_dtype=torch.bfloat16)
    t0 = time.time()
    with torch.device("cuda"):
        cfg._attn_implementation = "sdpa"
        model = LlamaModel(cfg).to(torch.bfloat16).eval()
    print(f"model built in {time.time() - t0:.1f}s on {torch.cuda.get_device_name()}", flush=True)

    def use(impl, mode):
        model.config._attn_implementation = impl
        for l in model.layers:
            l.self_attn.config._attn_implementation = impl
        MODE.update(mode)
        model.config.s2c = {"block_size": BLOCK, "local_blocks": mode["local"], "vert_stride": mode["stride"],
                            "dense_layers": list(range(mode["dense"]))}
        s2hf._cache.clear()     # so that the count of layers on s2c below is this run's

    backends = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}
    rows = []
    for S in SEQS:
        r = dict(S=S, dense_layers=DENSE, gpu=torch.cuda.get_device_name(), torch=torch.__version__)
        # the attention calls alone, as the model makes them: bhsd views of bshd projections
        q = torch.randn(1, S, H, D, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
        k = torch.randn(1, S, HKV, D, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
        v = torch.randn(1, S, HKV, D, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
        with torch.no_grad():
            for name, be in backends.items():
                try:
                    with sdpa_kernel([be]):
                        r["call_" + name] = do_bench(lambda: F.scaled_dot_product_attention(
                            q, k, v, is_causal=True, enable_gqa=True))
                except Exception as ex:
                    r["call_" + name] = None; print("  fail call", name, repr(ex)[:300], flush=True)
            for key, m in [("s2c_call", SPLIT)] + ([("s2c_call_all", ALL)] if ALL_S2 else []):
                pat = s2c.Pattern.local_stride(H, BLOCK, m["local"], m["stride"], num_kv_heads=HKV)
                try:
                    r[key] = do_bench(lambda: s2c.sparse_attn_func(q, k, v, pat, layout="bhsd", out_layout="bshd"))
                except Exception as ex:
                    r[key] = None; print("  fail", key, repr(ex)[:300], flush=True)
        del q, k, v
        torch.cuda.empty_cache()
        calls = {n: r["call_" + n] for n in backends if r.get("call_" + n)}
        r["dense_call"] = min(calls.values()) if calls else None

        runs = []          # (result key, ONLY group, implementation, SDPA backend or "best", pattern mode)
        if wanted("sdpa"):
            runs += [("sdpa_cudnn", "sdpa", "sdpa", "cudnn", SPLIT), ("sdpa_flash", "sdpa", "sdpa", "flash", SPLIT)]
        runs += [("zero", "zero", "zero", None, SPLIT), ("s2c", "s2c", "s2c", "best", SPLIT)]
        if ALL_S2:
            runs += [("s2c_all", "s2c", "s2c", "best", ALL)]
        if LSSA is not None:   # last: a fault in it would end the CUDA context for what follows
            runs += [("dkernel", "dkernel", "dkernel", "best", SPLIT)]
            runs += [("dkernel_all", "dkernel", "dkernel", "best", ALL)] if ALL_S2 else []
        ids = torch.randint(0, 128000, (1, S), device="cuda")
        with torch.no_grad():
            for key, group, impl, be, mode in runs:
                if not wanted(group):
                    continue
                if be == "best":    # the dense layers: the faster SDPA backend (model runs first, else calls)
                    t = {n: r.get("sdpa_" + n) for n in backends if r.get("sdpa_" + n)} or calls
                    be = min(t, key=t.get) if t else None
                ctx = sdpa_kernel([backends[be]]) if be else contextlib.nullcontext()
                use(impl, mode)
                t1 = time.time()
                try:
                    with ctx:
                        r[key] = bench(lambda: model(input_ids=ids, use_cache=False))
                except Exception as ex:
                    r[key] = None; print("  fail", key, repr(ex)[:300], flush=True)
                if impl == "s2c":   # the layers s2c ran (the others fell back to SDPA)
                    r[key + "_layers"] = sum(p is not None for _, p in s2hf._cache.values())
                print(f"  S={S} {key}: {r[key]} ms ({time.time() - t1:.0f}s incl. warm-up, dense on {be})", flush=True)
                torch.cuda.empty_cache()
        sd = [r[x] for x in ("sdpa_cudnn", "sdpa_flash") if r.get(x)]
        r["sdpa"] = min(sd) if sd else None
        if r.get("zero") and r.get("dense_call") and r.get("s2c_call"):
            r["bound"] = r["zero"] + DENSE * r["dense_call"] + (LAYERS - DENSE) * r["s2c_call"]
            r["gap"] = r["s2c"] / r["bound"] - 1 if r.get("s2c") else None
        if r.get("zero") and r.get("s2c_call_all"):
            r["bound_all"] = r["zero"] + LAYERS * r["s2c_call_all"]
            r["gap_all"] = r["s2c_all"] / r["bound_all"] - 1 if r.get("s2c_all") else None
        for a, b in (("sdpa", "s2c"), ("dkernel", "s2c"), ("sdpa", "dkernel"), ("dkernel_all", "s2c_all")):
            if r.get(a) and r.get(b):
                r[f"{b}_vs_{a}"] = r[a] / r[b]
        print(json.dumps(r), flush=True)
        rows.append(r)
        json.dump(rows, open(os.path.join(OUT, "prefill.json"), "w"), indent=1)

    f = fmt
    print(f"\n{'S':>7} {'sdpa':>7} {'zero':>7} {'dkernel':>8} {'s2c':>7} {'x sdpa':>7} {'x dk':>6} "
          f"{'bound':>7} {'gap':>6}")
    for r in rows:
        print(f"{r['S']:>7} {f(r.get('sdpa')):>7} {f(r.get('zero')):>7} {f(r.get('dkernel')):>8} "
              f"{f(r.get('s2c')):>7} {f(r.get('s2c_vs_sdpa'), 2):>7} {f(r.get('s2c_vs_dkernel'), 2):>6} "
              f"{f(r.get('bound')):>7} {f(r.get('gap'), 3):>6}")
        if ALL_S2:
            print(f"{'all-S2':>7} {'':>7} {'':>7} {f(r.get('dkernel_all')):>8} {f(r.get('s2c_all')):>7} {'':>7} "
                  f"{f(r.get('s2c_all_vs_dkernel_all'), 2):>6} {f(r.get('bound_all')):>7} {f(r.get('gap_all'), 3):>6}")


if __name__ == "__main__":
    main()
