"""A small GPT (4 layers, d_model 256, 4 heads of 64, byte vocabulary, context 1024,
plain PyTorch below) trained twice from one seed on the same batches: attention through
s2c.sparse_attn_func on a dense pattern (vert_stride 1 keeps every causal block), and
through torch's scaled_dot_product_attention(is_causal=True).  fp32 weights, bf16
autocast, AdamW.  The two loss curves are printed side by side and must agree within
bf16 noise: |loss_s2c - loss_sdpa| < TOL (2e-2) at every step.  Then (SPARSE=1, the
default) a third run with a real S2 pattern (local 4, vertical stride 4, block 64) must
bring its loss down by at least 20%.

The task: 1024 bytes made of one 128-byte segment repeated (Zipf-distributed symbols),
so a model gains first from the byte frequencies, then from copying 128 positions back.

Run on the GPU machine (S2C_LIBDIR: the libs2c build):
  STEPS=50 python3 examples/python/train_gpt.py
Prints PASS or FAIL last; exit 0, 1 on a failed check, 77 without CUDA."""
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import s2c  # noqa: E402

STEPS = int(os.environ.get("STEPS", "50"))
SPARSE = os.environ.get("SPARSE", "1") == "1"
SEED, TOL = 20261128, 2e-2
LAYERS, DM, HEADS, VOCAB, CTX, BATCH, SEG, BLOCK = 4, 256, 4, 256, 1024, 8, 128, 64


class Block(nn.Module):
    def __init__(self, attn):
        super().__init__()
        self.attn = attn
        self.ln1, self.ln2 = nn.LayerNorm(DM), nn.LayerNorm(DM)
        self.qkv = nn.Linear(DM, 3 * DM, bias=False)
        self.proj = nn.Linear(DM, DM, bias=False)
        self.mlp = nn.Sequential(nn.Linear(DM, 4 * DM), nn.GELU(), nn.Linear(4 * DM, DM))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, T, 3, HEADS, C // HEADS).unbind(2)   # [B, T, H, D] views
        x = x + self.proj(self.attn(q, k, v).reshape(B, T, C))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, attn):
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, DM), nn.Embedding(CTX, DM)
        self.blocks = nn.ModuleList(Block(attn) for _ in range(LAYERS))
        self.ln, self.head = nn.LayerNorm(DM), nn.Linear(DM, VOCAB, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x))


def sdpa_attn(q, k, v):
    # SDPA takes [B, H, T, D]; the block works in [B, T, H, D]
    return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                          is_causal=True).transpose(1, 2)


def s2c_attn(pattern):
    return lambda q, k, v: s2c.sparse_attn_func(q, k, v, pattern)      # [B, T, H, D] in and out, read in place


def batches(steps):
    """The same batches for every run: a 128-byte Zipf segment repeated to CTX + 1 bytes."""
    g = torch.Generator().manual_seed(SEED)
    zipf = 1.0 / torch.arange(1, 65, dtype=torch.float64)
    for _ in range(steps):
        seg = 32 + torch.multinomial(zipf.expand(BATCH, -1), SEG, replacement=True, generator=g)
        x = seg.repeat(1, (CTX + SEG) // SEG)[:, :CTX + 1].cuda()
        yield x[:, :-1], x[:, 1:]


def train(attn, steps):
    torch.manual_seed(SEED)   # the same initial weights in every run
    model = GPT(attn).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 10))   # 10 warm-up steps
    losses = []
    for x, y in batches(steps):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(x)
        loss = F.cross_entropy(logits.float().view(-1, VOCAB), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step(); sched.step(); opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses


def main():
    if not torch.cuda.is_available():
        print("no CUDA device: skipped"); sys.exit(77)
    print(f"GPT {LAYERS} layers, d_model {DM}, {HEADS} heads of {DM // HEADS}, context {CTX}, batch {BATCH}, "
          f"{STEPS} steps on {torch.cuda.get_device_name()}")
    dense = s2c.Pattern.local_stride(HEADS, BLOCK, 1, 1)       # vert_stride 1: every causal block
    ls = train(s2c_attn(dense), STEPS)
    lr = train(sdpa_attn, STEPS)
    print(f"{'step':>4} {'s2c dense':>10} {'sdpa':>10} {'|delta|':>9}")
    for i, (a, b) in enumerate(zip(ls, lr)):
        print(f"{i:>4} {a:>10.5f} {b:>10.5f} {abs(a - b):>9.2e}")
    worst = max(abs(a - b) for a, b in zip(ls, lr))
    ok = worst < TOL and all(math.isfinite(x) for x in ls + lr)
    print(f"dense S2 vs SDPA: max |delta loss| {worst:.2e} (tolerance {TOL:.0e}): {'ok' if ok else 'FAIL'}")
    msg = f"dense S2 vs SDPA max |delta loss| {worst:.1e} (tolerance {TOL:.0e})"

    if SPARSE:
        sparse = s2c.Pattern.local_stride(HEADS, BLOCK, 4, 4)
        sp = train(s2c_attn(sparse), STEPS)
        first, last = sp[0], sum(sp[-5:]) / len(sp[-5:])
        print("sparse S2 (local 4, vert_stride 4, block 64): " +
              " ".join(f"{x:.3f}" for x in sp[::max(1, STEPS // 10)]))
        fell = math.isfinite(last) and last < 0.8 * first
        print(f"sparse S2 loss {first:.3f} -> {last:.3f} (mean of the last 5): {'ok' if fell else 'FAIL'}")
        ok = ok and fell
        msg += f", sparse S2 loss {first:.2f} -> {last:.2f} (needs < 0.8x)"
    print(("PASS: " if ok else "FAIL: ") + msg)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
