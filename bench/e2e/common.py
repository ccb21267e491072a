"""What the end-to-end benches share: the model-level timer, the one-call timer, the table printer, and the
training step's setup (train.py, profile_step.py): the 1B Llama-shaped model, its attention providers and its step."""
import os
import statistics
import sys

import torch


def bench(fn, reps=3):
    """Median of `reps` timed runs after one warm-up (one model forward or step each), ms."""
    fn(); torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        s = torch.cuda.Event(enable_timing=True); e = torch.cuda.Event(enable_timing=True)
        s.record(); fn(); e.record(); torch.cuda.synchronize(); ts.append(s.elapsed_time(e))
    return statistics.median(ts)


_flush = None


def do_bench(fn, reps=15):
    """One kernel call: L2 flushed (a 256 MB write) before each of `reps` timed
    calls, CUDA events around the call only, median in ms."""
    global _flush
    if _flush is None:
        _flush = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    fn(); torch.cuda.synchronize()
    ev = []
    for _ in range(reps):
        _flush.zero_()
        s = torch.cuda.Event(enable_timing=True); e = torch.cuda.Event(enable_timing=True)
        s.record(); fn(); e.record(); ev.append((s, e))
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in ev)


def fmt(x, p=0):
    return "-" if x is None else f"{x:.{p}f}"


# the sparse providers' pattern: every layer local 16 / stride 8 / block 64
H, BLOCK, LOCAL, STRIDE = 16, 64, 16, 8


def load_dkernel():
    """The S2 Triton library's LocalStrideSparseAttention from DKERNEL_DIR (the folder that holds dkernel/)."""
    import importlib.metadata as md     # dkernel asks for its own version at import: give it one
    orig = md.version
    md.version = lambda name: "0.0.2" if name == "dkernel" else orig(name)
    sys.path.insert(0, os.environ["DKERNEL_DIR"])
    from dkernel import LocalStrideSparseAttention
    return LocalStrideSparseAttention


def register_providers(kv_heads, lssa=None):
    """Registers the attention providers "noop", "dkernel" (over lssa) and "s2c" in transformers' registry;
    returns dkernel's attention function."""
    from transformers import AttentionInterface
    import s2c.integrations.hf as s2hf
    dk_mods = {}

    def noop_attn(module, query, key, value, attention_mask, **kw):
        # zeros that still carry a gradient to q and v, so the projections' backward runs
        return (query * 0 + value.mean() * 0).transpose(1, 2).contiguous(), None

    def dk_attn(module, query, key, value, attention_mask, scaling=None, **kw):
        S = query.shape[2]
        if S not in dk_mods:
            dk_mods[S] = lssa(H, S, BLOCK, LOCAL, STRIDE, num_kv_heads=kv_heads, seq_dim=2).cuda()
        return dk_mods[S](query, key, value, scaling).transpose(1, 2).contiguous(), None

    AttentionInterface.register("noop", noop_attn)
    AttentionInterface.register("dkernel", dk_attn)
    s2hf.register()
    return dk_attn


def llama_1b(kv_heads):
    """The 1B Llama-shaped model (16 layers, hidden 2048, intermediate 8192, 16 heads of 128, kv_heads kv heads,
    vocab 32000, random bf16 weights) on the GPU, its s2c pattern config and its fused AdamW: (cfg, model, opt)."""
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=H,
                      num_key_value_heads=kv_heads, vocab_size=32000, max_position_embeddings=131072,
                      torch_dtype=torch.bfloat16)
    with torch.device("cuda"):
        cfg._attn_implementation = "sdpa"
        model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.config.s2c = {"block_size": BLOCK, "local_blocks": LOCAL, "vert_stride": STRIDE, "dense_layers": []}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)
    return cfg, model, opt


def train_step(model, opt, ids):
    """One training step: forward, backward, optimizer step."""
    out = model(input_ids=ids, labels=ids, use_cache=False)
    out.loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
