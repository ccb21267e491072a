"""GPU tests of the Python package (skipped without CUDA or torch >= 2.4):
forward, backward, varlen, GQA, Sq < Sk, bidirectional ragged lengths, dense
heads, SparseAttention with a random mask, padded inference, decode, the fp8 forward,
torch.compile(fullgraph=True), CUDA-graph capture, and the transformers
backend against SDPA.  References are float32/float64 attention over the
token mask the C library's block decisions give; bf16 tolerances are stated
per test.  Inputs are fresh random tensors, outputs poisoned where the op
writes into a caller's tensor."""
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)
if not hasattr(torch.library, "custom_op"):
    pytest.skip(f"torch {torch.__version__} has no torch.library.custom_op (needs 2.4)", allow_module_level=True)

import s2c  # noqa: E402
from s2c.pattern import Pattern  # noqa: E402

DEV = "cuda"
BF16 = torch.bfloat16


def token_mask(pat, Sq, Sk):
    """[H, Sq, Sk] bool: query i (position Sk - Sq + i) keeps key j."""
    bs = pat.block_size
    nb = -(-Sk // bs)
    bm = torch.from_numpy(pat.block_mask(nb, nb)).bool().to(DEV)
    qpos = torch.arange(Sq, device=DEV) + (Sk - Sq)
    kpos = torch.arange(Sk, device=DEV)
    m = bm[:, qpos // bs][:, :, kpos // bs]
    if pat.causal:
        m = m & (kpos[None, None, :] <= qpos[None, :, None])
    return m


def ref_attention(q, k, v, mask, scale, dtype=torch.float64):
    """q [B, Sq, H, D], k, v [B, Sk, Hkv, D] -> o [B, Sq, H, D], lse [B, H, Sq]."""
    H, Hkv = q.shape[2], k.shape[2]
    k = k.repeat_interleave(H // Hkv, dim=2).to(dtype)
    v = v.repeat_interleave(H // Hkv, dim=2).to(dtype)
    s = torch.einsum("bqhd,bkhd->bhqk", q.to(dtype), k) * scale
    s = s.masked_fill(~mask[None], float("-inf"))
    lse = torch.logsumexp(s, -1)
    p = torch.exp(s - lse[..., None]).nan_to_num(0.0)
    return torch.einsum("bhqk,bkhd->bqhd", p, v), lse


def close(got, want, tol, what):
    err = (got.double() - want.double()).abs().max().item()
    scale = max(want.double().abs().max().item(), 1.0)
    assert err <= tol * scale, f"{what}: max error {err:.3e} > {tol} x {scale:.3g}"
    return err


def rand(*shape, requires_grad=False):
    return torch.randn(*shape, device=DEV, dtype=BF16).requires_grad_(requires_grad)


CASES = [
    # name, pattern, B, Sq, Sk, H, Hkv, D
    ("l4v4", lambda: Pattern.local_stride(4, 64, 4, 4), 2, 1024, 1024, 4, 4, 64),
    ("gqa_phi3", lambda: Pattern.local_stride(8, 64, 4, 8, num_kv_heads=2, head_sliding_offset=1), 1, 2048, 2048,
     8, 2, 128),
    ("dense_heads", lambda: Pattern.local_stride(8, 64, 2, 4, num_kv_heads=4, num_dense_heads=1), 1, 1024, 1024, 8,
     4, 128),
    ("b16_mergeq", lambda: Pattern.local_stride(4, 16, 8, 4), 1, 1024, 1024, 4, 4, 64),
    ("sq_lt_sk", lambda: Pattern.local_stride(4, 64, 4, 4), 2, 384, 1024, 4, 4, 64),
    ("d32", lambda: Pattern.local_stride(4, 32, 4, 4), 1, 512, 512, 4, 4, 32),
    ("d96_fwd", lambda: Pattern.local_stride(4, 64, 4, 4), 1, 512, 512, 4, 4, 96),
    ("bidir_ragged", lambda: Pattern.local_stride(4, 64, 2, 3, causal=False), 1, 1000, 1000, 4, 4, 64),
    ("d48_b16_mergeq_fwd", lambda: Pattern.local_stride(4, 16, 8, 4), 1, 500, 500, 4, 4, 48),
    ("d192_gqa_fwd", lambda: Pattern.local_stride(8, 32, 4, 4, num_kv_heads=2), 1, 400, 400, 8, 2, 192),
    ("d256_bidir_ragged_fwd", lambda: Pattern.local_stride(4, 64, 2, 3, causal=False), 1, 700, 700, 4, 4, 256),
]


@pytest.mark.parametrize("name,mk,B,Sq,Sk,H,Hkv,D", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
def test_forward(name, mk, B, Sq, Sk, H, Hkv, D, layout):
    torch.manual_seed(hash((name, layout)) % 2**31)
    pat = mk()
    q, k, v = rand(B, Sq, H, D), rand(B, Sk, Hkv, D), rand(B, Sk, Hkv, D)
    scale = 1 / math.sqrt(D)
    if layout == "bhsd":
        o, lse = s2c.sparse_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), pat,
                                      return_lse=True, layout="bhsd")
        o = o.transpose(1, 2)
    else:
        o, lse = s2c.sparse_attn_func(q, k, v, pat, return_lse=True)
    want, want_lse = ref_attention(q, k, v, token_mask(pat, Sq, Sk), scale)
    close(o, want, 2e-2, f"{name} o")
    close(lse, want_lse, 1e-3, f"{name} lse")


BWD = [c for c in CASES if c[7] % 16 == 0 and c[0] not in ("bidir_ragged",)]


@pytest.mark.parametrize("name,mk,B,Sq,Sk,H,Hkv,D", BWD, ids=[c[0] for c in BWD])
def test_backward(name, mk, B, Sq, Sk, H, Hkv, D):
    """Gradients against float32 autograd through the reference, same mask."""
    torch.manual_seed(7)
    pat = mk()
    q, k, v = rand(B, Sq, H, D, requires_grad=True), rand(B, Sk, Hkv, D, requires_grad=True), \
        rand(B, Sk, Hkv, D, requires_grad=True)
    do = rand(B, Sq, H, D)
    o = s2c.sparse_attn_func(q, k, v, pat)
    o.backward(do)
    q32, k32, v32 = (t.detach().float().requires_grad_() for t in (q, k, v))
    want, _ = ref_attention(q32, k32, v32, token_mask(pat, Sq, Sk), 1 / math.sqrt(D), torch.float32)
    want.backward(do.float())
    close(o, want, 2e-2, "o")
    for got, ref, n in ((q.grad, q32.grad, "dq"), (k.grad, k32.grad, "dk"), (v.grad, v32.grad, "dv")):
        close(got, ref, 3e-2, f"{name} {n}")
    # deterministic: a second backward is bitwise equal
    g1 = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    s2c.sparse_attn_func(q, k, v, pat).backward(do)
    assert all(torch.equal(a, t.grad) for a, t in zip(g1, (q, k, v)))


def test_backward_of_views_keeps_their_strides():
    """bhsd views of bshd projections (what transformers passes): gradients come
    back in the projections' order, equal to those of contiguous copies."""
    torch.manual_seed(8)
    pat = Pattern.local_stride(4, 64, 2, 4, num_kv_heads=2)
    base = [rand(1, 384, h, 64) for h in (4, 2, 2)]
    views = [b.transpose(1, 2).detach().requires_grad_(True) for b in base]
    conts = [b.transpose(1, 2).contiguous().requires_grad_(True) for b in base]
    do = rand(1, 384, 4, 64)
    for ins in (views, conts):
        s2c.sparse_attn_func(*ins, pat, layout="bhsd", out_layout="bshd").backward(do)
    for vw, ct, n in zip(views, conts, ("dq", "dk", "dv")):
        assert vw.grad.stride() == vw.stride() and ct.grad.stride() == ct.stride(), n
        close(vw.grad, ct.grad, 1e-2, n)


def test_lse_gradient():
    torch.manual_seed(3)
    pat = Pattern.local_stride(4, 64, 2, 4)
    q, k, v = (rand(1, 512, 4, 64, requires_grad=True) for _ in range(3))
    o, lse = s2c.sparse_attn_func(q, k, v, pat, return_lse=True)
    (o.float().sum() + lse.sum()).backward()
    q32, k32, v32 = (t.detach().float().requires_grad_() for t in (q, k, v))
    want, want_lse = ref_attention(q32, k32, v32, token_mask(pat, 512, 512), 1 / 8, torch.float32)
    (want.sum() + want_lse.sum()).backward()
    close(q.grad, q32.grad, 3e-2, "dq with dlse")
    close(k.grad, k32.grad, 3e-2, "dk with dlse")


def test_sparse_attention_random_mask_and_kv_groups():
    torch.manual_seed(11)
    H, Hkv, bs, nb = 4, 2, 64, 12
    mask = (torch.rand(H, nb, nb) < 0.35)
    mask |= torch.eye(nb, dtype=torch.bool)[None]          # keep every diagonal block
    attn = s2c.SparseAttention(bs, mask, seq_dim=1)
    S = nb * bs - 37
    q, k, v = rand(2, S, H, 64), rand(2, S, Hkv, 64), rand(2, S, Hkv, 64)
    o = attn(q, k, v)
    pat = Pattern.from_mask(bs, mask, num_heads=H, num_kv_heads=Hkv)
    want, _ = ref_attention(q, k, v, token_mask(pat, S, S), 1 / 8)
    close(o, want, 2e-2, "random mask")


def test_drop_in_layouts_packed_and_out():
    torch.manual_seed(5)
    attn = s2c.LocalStrideSparseAttention(8, 2048, 64, 4, 4, num_kv_heads=8, seq_dim=2)
    qkv = rand(1, 8 * 3, 1024, 64)                            # packed along heads, [B, 3H, S, D]
    split = lambda t: t.split(8, dim=1)                      # noqa: E731
    o = attn(qkv, split_qkv=split)
    q, k, v = split(qkv)
    pat = Pattern.local_stride(8, 64, 4, 4)
    want, want_lse = ref_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                   token_mask(pat, 1024, 1024), 1 / 8)
    close(o.transpose(1, 2), want, 2e-2, "packed qkv, seq_dim 2")
    out = torch.full_like(q, float("nan"))
    attn.kwargs["out"] = out
    o2, lse = attn(q, k, v, return_lse=True)
    del attn.kwargs["out"]
    assert o2.data_ptr() == out.data_ptr() and torch.equal(o2, o)
    close(lse, want_lse, 1e-3, "lse [B, H, S]")


def test_functional_out_is_written_in_place():
    torch.manual_seed(6)
    pat = Pattern.local_stride(4, 64, 2, 4)
    q, k, v = (rand(2, 4, 512, 64) for _ in range(3))              # bhsd in, bshd out
    want, _ = ref_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), token_mask(pat, 512, 512),
                            1 / 8)
    out = torch.full((2, 512, 4, 64), float("nan"), device="cuda", dtype=q.dtype)
    with torch.no_grad():
        o = s2c.sparse_attn_func(q, k, v, pat, layout="bhsd", out_layout="bshd", out=out)
    assert o is out
    close(out, want, 2e-2, "out= (bhsd -> bshd)")
    for bad in (torch.empty(2, 4, 512, 64, device="cuda", dtype=q.dtype),           # the input layout's shape
                torch.empty(2, 512, 4, 64, device="cuda", dtype=torch.float16),      # dtype
                torch.empty(2, 512, 64, 4, device="cuda", dtype=q.dtype).transpose(2, 3)):   # not contiguous
        with pytest.raises(ValueError, match="out must be a contiguous"):
            with torch.no_grad():
                s2c.sparse_attn_func(q, k, v, pat, layout="bhsd", out_layout="bshd", out=bad)
    qg = q.clone().requires_grad_(True)                             # with a gradient: o copied into out
    out.fill_(float("nan"))
    o = s2c.sparse_attn_func(qg, k, v, pat, layout="bhsd", out_layout="bshd", out=out)
    close(out, want, 2e-2, "out= with grad")
    o.float().sum().backward()
    assert qg.grad is not None and bool(qg.grad.isfinite().all())


def test_varlen_forward_device_cu_seqlens():
    torch.manual_seed(9)
    pat = Pattern.local_stride(4, 64, 3, 4, num_kv_heads=2)
    lens = [700, 64, 1, 1500, 333]
    cu = torch.tensor([0] + list(np.cumsum(lens)), dtype=torch.int32, device=DEV)
    T = int(cu[-1])
    q, k, v = rand(T, 4, 64), rand(T, 2, 64), rand(T, 2, 64)
    o = s2c.sparse_attn_varlen_func(q, k, v, cu, cu, max(lens), max(lens), pat)
    for i, n in enumerate(lens):
        s = slice(int(cu[i]), int(cu[i + 1]))
        want, _ = ref_attention(q[None, s], k[None, s], v[None, s], token_mask(pat, n, n), 1 / 8)
        close(o[None, s], want, 2e-2, f"varlen sequence {i} ({n} tokens)")


def test_varlen_backward_matches_per_sequence_autograd():
    torch.manual_seed(10)
    pat = Pattern.local_stride(4, 64, 3, 4, num_kv_heads=2)
    lens = [1, 17, 300, 1000]
    cu = torch.tensor([0] + list(np.cumsum(lens)), dtype=torch.int32, device=DEV)
    T = int(cu[-1])
    q, k, v = (rand(T, h, 64).requires_grad_() for h in (4, 2, 2))
    do = rand(T, 4, 64)
    o = s2c.sparse_attn_varlen_func(q, k, v, cu, cu, max(lens), max(lens), pat)
    o.backward(do)
    grads = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    s2c.sparse_attn_varlen_func(q, k, v, cu, cu, max(lens), max(lens), pat).backward(do)
    for g, t in zip(grads, (q, k, v)):
        assert torch.equal(g, t.grad), "varlen backward not bitwise reproducible"
    for i, n in enumerate(lens):
        s = slice(int(cu[i]), int(cu[i + 1]))
        qs, ks, vs = (t.detach()[None, s].float().requires_grad_() for t in (q, k, v))
        want, _ = ref_attention(qs, ks, vs, token_mask(pat, n, n), 1 / 8)
        want.backward(do[None, s].float())
        for name, g, r in (("dq", grads[0], qs), ("dk", grads[1], ks), ("dv", grads[2], vs)):
            close(g[None, s], r.grad, 2e-2, f"varlen {name} of sequence {i} ({n} tokens)")


def test_padded_inference_left_and_right():
    torch.manual_seed(4)
    attn = s2c.LocalStrideSparseAttention(4, 1024, 64, 2, 4)
    B, S = 3, 512
    q, k, v = rand(B, S, 4, 64), rand(B, S, 4, 64), rand(B, S, 4, 64)
    lp = torch.tensor([0, 100, 511], dtype=torch.int32, device=DEV)
    with torch.no_grad():
        o = attn(q, k, v, left_paddings=lp)
        o_r = attn(q, k, v, seqlens=torch.tensor([512, 300, 1], dtype=torch.int32, device=DEV))
    pat = Pattern.local_stride(4, 64, 2, 4)
    for b in range(B):
        p = int(lp[b])
        want, _ = ref_attention(q[b:b + 1, p:], k[b:b + 1, p:], v[b:b + 1, p:], token_mask(pat, S - p, S - p), 1 / 8)
        close(o[b:b + 1, p:], want, 2e-2, f"left padding {p}")
        assert torch.all(o[b, :p] == 0)
    for b, n in enumerate([512, 300, 1]):
        want, _ = ref_attention(q[b:b + 1, :n], k[b:b + 1, :n], v[b:b + 1, :n], token_mask(pat, n, n), 1 / 8)
        close(o_r[b:b + 1, :n], want, 2e-2, f"right padding, {n} tokens")


@pytest.mark.parametrize("D,dtype", [(128, BF16), (16, torch.float16), (80, BF16), (192, torch.float16),
                                     (256, BF16)])
def test_decode_paged(D, dtype):
    torch.manual_seed(6)
    pat = Pattern.local_stride(8, 64, 2, 4, num_kv_heads=2, max_seq_len=4096)
    B, page, pages_per_seq = 3, 64, 64   # rows cover max_seq_len
    lens = [1, 700, 2048]
    P = B * pages_per_seq + 5
    kc, vc = rand(P, page, 2, D).to(dtype), rand(P, page, 2, D).to(dtype)
    table = torch.randperm(P, device=DEV)[:B * pages_per_seq].view(B, pages_per_seq).to(torch.int32)
    seq_lens = torch.tensor(lens, dtype=torch.int32, device=DEV)
    q = rand(B, 1, 8, D).to(dtype)
    o = s2c.decode(q, kc, vc, table, seq_lens, pat, max_seq_len=4096)
    for b, n in enumerate(lens):
        kk = kc[table[b].long()].reshape(-1, 2, D)[:n][None]
        vv = vc[table[b].long()].reshape(-1, 2, D)[:n][None]
        want, _ = ref_attention(q[b:b + 1], kk, vv, token_mask(pat, 1, n), 1 / math.sqrt(D))
        close(o[b:b + 1], want, 2e-2, f"decode sequence {b} ({n} keys)")


@pytest.mark.skipif(not hasattr(torch, "float8_e4m3fn"), reason="torch without float8_e4m3fn (needs 2.1)")
@pytest.mark.skipif(torch.cuda.get_device_capability()[0] < 9, reason="fp8 pages need sm_90")
@pytest.mark.parametrize("D,dtype,n_new", [(128, BF16, 1), (64, torch.float16, 2)])
def test_decode_paged_fp8(D, dtype, n_new):
    """float8_e4m3fn caches with per-kv-head k_scale / v_scale (vLLM's fp8 KV
    cache) against float64 attention over the dequantized pages (x8 * scale):
    the 16-bit decode's tolerance."""
    torch.manual_seed(7)
    pat = Pattern.local_stride(8, 64, 2, 4, num_kv_heads=2, max_seq_len=4096)
    B, page, pages_per_seq = 3, 64, 64
    lens = [n_new, 700, 2047]
    P = B * pages_per_seq + 5
    kc = (torch.randn(P, page, 2, D, device=DEV) * 8).to(torch.float8_e4m3fn)
    vc = (torch.randn(P, page, 2, D, device=DEV) * 8).to(torch.float8_e4m3fn)
    k_scale = torch.tensor([0.05, 0.2], device=DEV)
    v_scale = torch.tensor([0.15, 0.03], device=DEV)
    table = torch.randperm(P, device=DEV)[:B * pages_per_seq].view(B, pages_per_seq).to(torch.int32)
    seq_lens = torch.tensor(lens, dtype=torch.int32, device=DEV)
    q = rand(B, n_new, 8, D).to(dtype)
    o = s2c.decode(q, kc, vc, table, seq_lens, pat, max_seq_len=4096, k_scale=k_scale, v_scale=v_scale)
    o1 = s2c.decode(q, kc, vc, table, seq_lens, pat, max_seq_len=4096)   # no scales: 1.0
    kd = kc.double() * k_scale.double()[None, None, :, None]
    vd = vc.double() * v_scale.double()[None, None, :, None]
    for b, n in enumerate(lens):
        kk = kd[table[b].long()].reshape(-1, 2, D)[:n][None]
        vv = vd[table[b].long()].reshape(-1, 2, D)[:n][None]
        want, _ = ref_attention(q[b:b + 1], kk, vv, token_mask(pat, n_new, n), 1 / math.sqrt(D))
        close(o[b:b + 1], want, 2e-2, f"fp8 decode sequence {b} ({n} keys)")
        kk = kc[table[b].long()].reshape(-1, 2, D)[:n][None].double()
        vv = vc[table[b].long()].reshape(-1, 2, D)[:n][None].double()
        want, _ = ref_attention(q[b:b + 1], kk, vv, token_mask(pat, n_new, n), 1 / math.sqrt(D))
        close(o1[b:b + 1], want, 2e-2, f"fp8 decode sequence {b} ({n} keys), unit scales")
    with pytest.raises(ValueError, match="k_scale must be a float32 tensor of 1 or 2"):
        s2c.decode(q, kc, vc, table, seq_lens, pat, max_seq_len=4096, k_scale=torch.ones(3, device=DEV))


def quant_e4m3(x, groups, descale=True):
    """x [B, S, Hx, D] -> (e4m3 x, float32 descales [B, groups] or None, the
    dequantized x in float32): one descale per (batch, kv head group),
    amax / 448 (FlashAttention-3's FP8 recipe); descale=False casts as is."""
    B, S_, Hx, D = x.shape
    xg = x.float().view(B, S_, groups, Hx // groups, D)
    if not descale:
        x8 = x.to(torch.float8_e4m3fn)
        return x8, None, x8.float()
    ds = (xg.abs().amax(dim=(1, 3, 4)).clamp_min(1e-6) / 448).contiguous()
    x8 = (xg / ds[:, None, :, None, None]).to(torch.float8_e4m3fn)
    return x8.view(B, S_, Hx, D), ds, (x8.float() * ds[:, None, :, None, None]).view(B, S_, Hx, D)


def fp8_close(name, o, lse, want, want_lse, o_tol=4e-2, lse_tol=4e-2):
    """o: relative Frobenius error; lse: max |error| over rows with keys
    (-inf where none), both against the float32 attention of the dequantized
    inputs (fp8 products and P in e4m3: test_fwd_fp8_gpu.c's comment)."""
    assert o.dtype == BF16, f"{name}: o is {o.dtype}, not bfloat16"
    rel = ((o.float() - want.float()).norm() / want.float().norm()).item()
    fin = torch.isfinite(want_lse)
    assert torch.equal(fin, torch.isfinite(lse)), f"{name}: lse is finite on other rows than the reference's"
    lerr = (lse[fin] - want_lse[fin]).abs().max().item()
    ok = rel <= o_tol and lerr <= lse_tol
    print(f"{'PASS' if ok else 'FAIL'} fp8 {name}: o rel. Frobenius {rel:.3e} (tol {o_tol}), lse max err {lerr:.3e} "
          f"(tol {lse_tol})")
    assert ok, f"{name}: o rel. error {rel:.3e} > {o_tol} or lse error {lerr:.3e} > {lse_tol}"


def _fp8_sm90a_or_skip(q8, pat):
    if torch.cuda.get_device_capability() != (9, 0):
        with pytest.raises(NotImplementedError, match="sm_90a"):
            s2c.sparse_attn_func(q8, q8, q8, pat)
        pytest.skip("the fp8 forward runs on sm_90a only (off it: NotImplementedError, checked)")


FP8 = [
    # name, pattern, B, Sq, Sk, H, Hkv, D, descales, layout
    ("causal_d256", lambda: Pattern.local_stride(4, 64, 4, 4), 2, 512, 512, 4, 4, 256, True, "bshd"),
    ("gqa_d64_ragged", lambda: Pattern.local_stride(8, 64, 4, 8, num_kv_heads=2, head_sliding_offset=1), 1, 1000,
     1000, 8, 2, 64, True, "bshd"),
    ("null_descales_bhsd_sq_lt_sk", lambda: Pattern.local_stride(4, 64, 2, 3), 1, 384, 1024, 4, 4, 128, False,
     "bhsd"),
    ("b16_mergeq_gqa_d128", lambda: Pattern.local_stride(8, 16, 8, 4, num_kv_heads=4), 1, 500, 500, 8, 4, 128,
     True, "bshd"),
]


@pytest.mark.skipif(not hasattr(torch, "float8_e4m3fn"), reason="torch without float8_e4m3fn (needs 2.1)")
@pytest.mark.parametrize("name,mk,B,Sq,Sk,H,Hkv,D,descale,layout", FP8, ids=[c[0] for c in FP8])
def test_fp8_forward(name, mk, B, Sq, Sk, H, Hkv, D, descale, layout):
    """float8_e4m3fn q, k, v quantized per (batch, kv head) from random bf16
    (or cast as they are with null descales: 1.0), o in bf16 written into a
    NaN-poisoned `out`, against the float32 attention of the dequantized inputs."""
    torch.manual_seed(hash(("fp8", name)) % 2**31)
    pat = mk()
    q8, qd, q32 = quant_e4m3(rand(B, Sq, H, D), Hkv, descale)
    k8, kd, k32 = quant_e4m3(rand(B, Sk, Hkv, D), Hkv, descale)
    v8, vd, v32 = quant_e4m3(rand(B, Sk, Hkv, D), Hkv, descale)
    _fp8_sm90a_or_skip(q8, pat)
    want, want_lse = ref_attention(q32, k32, v32, token_mask(pat, Sq, Sk), 1 / math.sqrt(D), torch.float32)
    if layout == "bhsd":
        out = torch.full((B, H, Sq, D), float("nan"), dtype=BF16, device=DEV)
        o, lse = s2c.sparse_attn_func(q8.transpose(1, 2), k8.transpose(1, 2), v8.transpose(1, 2), pat,
                                      return_lse=True, layout="bhsd", out=out, q_descale=qd, k_descale=kd,
                                      v_descale=vd)
        assert o is out
        o = o.transpose(1, 2)
    else:
        out = torch.full((B, Sq, H, D), float("nan"), dtype=BF16, device=DEV)
        o, lse = s2c.sparse_attn_func(q8, k8, v8, pat, return_lse=True, out=out, q_descale=qd, k_descale=kd,
                                      v_descale=vd)
        assert o is out
    fp8_close(name, o, lse, want, want_lse)
    o2 = s2c.sparse_attn_func(q8, k8, v8, pat, q_descale=qd, k_descale=kd, v_descale=vd)   # the cached launch
    assert o2.dtype == BF16 and o2.shape == (B, Sq, H, D)
    if layout == "bshd":
        assert torch.equal(o2, o), f"{name}: a second launch differs"


@pytest.mark.skipif(not hasattr(torch, "float8_e4m3fn"), reason="torch without float8_e4m3fn (needs 2.1)")
def test_fp8_varlen_and_compile():
    """The packed variable-length fp8 forward (descales [sequences, kv heads],
    GQA) against per-sequence references, and torch.compile(fullgraph=True)
    of the fp8 op: bf16 o of q's shape, equal to the eager call."""
    torch.manual_seed(11)
    pat = Pattern.local_stride(8, 64, 3, 4, num_kv_heads=2)
    lens = [300, 64, 1, 777]
    cu = torch.tensor([0] + list(np.cumsum(lens)), dtype=torch.int32, device=DEV)
    parts = [[quant_e4m3(rand(1, n, h, 128), 2) for h in (8, 2, 2)] for n in lens]
    q8, k8, v8 = (torch.cat([p[i][0][0] for p in parts]) for i in range(3))
    qd, kd, vd = (torch.cat([p[i][1] for p in parts]).contiguous() for i in range(3))
    _fp8_sm90a_or_skip(q8[None], pat)
    o, lse = s2c.sparse_attn_varlen_func(q8, k8, v8, cu, cu, max(lens), max(lens), pat, return_lse=True,
                                         q_descale=qd, k_descale=kd, v_descale=vd)
    for i, (n, p) in enumerate(zip(lens, parts)):
        s = slice(int(cu[i]), int(cu[i + 1]))
        want, want_lse = ref_attention(p[0][2], p[1][2], p[2][2], token_mask(pat, n, n), 1 / math.sqrt(128),
                                       torch.float32)
        fp8_close(f"varlen sequence {i} ({n} tokens)", o[None, s], lse[None, :, s], want, want_lse)
    q4, k4, v4 = (t[None, :1024] for t in (q8, k8, v8))
    ds = [d[:1] for d in (qd, kd, vd)]
    f = torch.compile(lambda q, k, v, a, b, c: s2c.sparse_attn_func(q, k, v, pat, q_descale=a, k_descale=b,
                                                                     v_descale=c), fullgraph=True)
    oc, oe = f(q4, k4, v4, *ds), s2c.sparse_attn_func(q4, k4, v4, pat, q_descale=ds[0], k_descale=ds[1],
                                                      v_descale=ds[2])
    assert oc.dtype == BF16 and oc.shape == q4.shape and torch.equal(oc, oe), "compiled fp8 call differs from eager"


FP32 = [
    # name, pattern, B, Sq, Sk, H, Hkv, D
    ("l4v4_d64", lambda: Pattern.local_stride(4, 64, 4, 4), 2, 1000, 1000, 4, 4, 64),
    ("gqa_d128", lambda: Pattern.local_stride(8, 64, 4, 8, num_kv_heads=2), 1, 1024, 1024, 8, 2, 128),
    ("b16_mergeq_d32", lambda: Pattern.local_stride(4, 16, 8, 4), 1, 700, 700, 4, 4, 32),
    ("bidir_d256", lambda: Pattern.local_stride(4, 64, 2, 3, causal=False), 1, 500, 500, 4, 4, 256),
    ("sq_lt_sk_d48", lambda: Pattern.local_stride(4, 64, 4, 4), 1, 200, 700, 4, 4, 48),
]


@pytest.mark.parametrize("name,mk,B,Sq,Sk,H,Hkv,D", FP32, ids=[c[0] for c in FP32])
def test_fp32_forward_tf32(name, mk, B, Sq, Sk, H, Hkv, D):
    """float32 inputs on the tf32 forward against float64: tf32's 10-bit
    mantissa (Q, K, P rounded, V truncated) bounds the error at 4e-3 of the
    output's scale, the LSE at 2e-3; fp32_compute="bf16" at bf16's 2e-2."""
    torch.manual_seed(hash(name) % 2**31)
    pat = mk()
    q = torch.randn(B, Sq, H, D, device=DEV)
    k, v = torch.randn(B, Sk, Hkv, D, device=DEV), torch.randn(B, Sk, Hkv, D, device=DEV)
    o, lse = s2c.sparse_attn_func(q, k, v, pat, return_lse=True)
    assert o.dtype == torch.float32 and lse.dtype == torch.float32
    want, want_lse = ref_attention(q, k, v, token_mask(pat, Sq, Sk), 1 / math.sqrt(D))
    close(o, want, 4e-3, f"{name} o")
    close(lse, want_lse, 2e-3, f"{name} lse")
    if D in s2c._runtime.FWD_HEAD_DIMS:   # the bf16 kernels' head dims
        o16 = s2c.sparse_attn_func(q, k, v, pat, fp32_compute="bf16")
        assert o16.dtype == torch.float32
        close(o16, want, 2e-2, f"{name} o (bf16 compute)")


def test_fp32_backward_through_bf16():
    """float32 gradients (computed by the bf16 kernels on converted copies)
    against float32 autograd through the reference, at bf16's tolerance."""
    torch.manual_seed(11)
    pat = Pattern.local_stride(4, 64, 4, 4, num_kv_heads=2)
    B, S, H, Hkv, D = 1, 512, 4, 2, 64
    q, k, v = (torch.randn(B, S, h, D, device=DEV, requires_grad=True) for h in (H, Hkv, Hkv))
    do = torch.randn(B, S, H, D, device=DEV)
    o = s2c.sparse_attn_func(q, k, v, pat)
    o.backward(do)
    q32, k32, v32 = (t.detach().clone().requires_grad_() for t in (q, k, v))
    want, _ = ref_attention(q32, k32, v32, token_mask(pat, S, S), 1 / math.sqrt(D), torch.float32)
    want.backward(do)
    for got, ref, n in ((q.grad, q32.grad, "dq"), (k.grad, k32.grad, "dk"), (v.grad, v32.grad, "dv")):
        assert got.dtype == torch.float32
        close(got, ref, 3e-2, f"fp32 {n}")


def test_not_covered_raises():
    pat = Pattern.local_stride(4, 64, 2, 4)
    with pytest.raises(NotImplementedError, match="head_dim 72"):
        s2c.sparse_attn_func(rand(1, 128, 4, 72), rand(1, 128, 4, 72), rand(1, 128, 4, 72), pat)
    q = torch.randn(1, 128, 4, 64, device=DEV, dtype=torch.float64)
    with pytest.raises(NotImplementedError, match="float64"):
        s2c.sparse_attn_func(q, q, q, pat)
    q = torch.randn(1, 128, 4, 64, device=DEV)
    with pytest.raises(ValueError, match="fp32_compute"):
        s2c.sparse_attn_func(q, q, q, pat, fp32_compute="fp16")


class _Block(torch.nn.Module):
    def __init__(self, pat):
        super().__init__()
        self.pat = pat
        self.proj = torch.nn.Linear(64 * 4, 64 * 4 * 3, device=DEV, dtype=BF16)

    def forward(self, x):
        B, S, _ = x.shape
        q, k, v = self.proj(x).view(B, S, 3, 4, 64).unbind(2)
        return s2c.sparse_attn_func(q, k, v, self.pat).reshape(B, S, -1)


def test_torch_compile_fullgraph():
    torch.manual_seed(12)
    m = _Block(Pattern.local_stride(4, 64, 2, 4))
    x = rand(2, 512, 256, requires_grad=True)
    eager = m(x)
    eager.float().square().sum().backward()
    g_eager = x.grad.clone()
    x.grad = None
    cm = torch.compile(m, fullgraph=True)
    out = cm(x)
    out.float().square().sum().backward()
    assert torch.equal(out, eager)
    close(x.grad, g_eager, 1e-2, "compiled backward")


def test_cuda_graph_forward_backward_and_varlen():
    torch.manual_seed(13)
    pat = Pattern.local_stride(4, 64, 2, 4, num_kv_heads=2)
    q, k, v = rand(1, 1024, 4, 64, requires_grad=True), rand(1, 1024, 2, 64, requires_grad=True), \
        rand(1, 1024, 2, 64, requires_grad=True)
    do = rand(1, 1024, 4, 64)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):                        # warm-up: compiles and prepares the plans
        for _ in range(2):
            for t in (q, k, v):
                t.grad = None
            s2c.sparse_attn_func(q, k, v, pat).backward(do)
    torch.cuda.current_stream().wait_stream(s)
    for t in (q, k, v):
        t.grad = None
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        o = s2c.sparse_attn_func(q, k, v, pat)
        o.backward(do)
    mask = token_mask(pat, 1024, 1024)
    for rep in range(3):
        with torch.no_grad():
            for t in (q, k, v, do):
                t.copy_(torch.randn_like(t))
            for t in (q, k, v):
                t.grad.fill_(float("nan"))
            o.fill_(float("nan"))
        g.replay()
        q32, k32, v32 = (t.detach().float().requires_grad_() for t in (q, k, v))
        want, _ = ref_attention(q32, k32, v32, mask, 1 / 8, torch.float32)
        want.backward(do.float())
        close(o, want, 2e-2, f"graph replay {rep} o")
        close(q.grad, q32.grad, 3e-2, f"graph replay {rep} dq")
        close(v.grad, v32.grad, 3e-2, f"graph replay {rep} dv")
    # varlen with cu_seqlens read on the device inside the graph
    T = 2048
    qv, kv_, vv = rand(T, 4, 64), rand(T, 2, 64), rand(T, 2, 64)
    cu = torch.tensor([0, 1000, 2048], dtype=torch.int32, device=DEV)
    with torch.no_grad():
        s2c.sparse_attn_varlen_func(qv, kv_, vv, cu, cu, 2048, 2048, pat)
        g2 = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g2):
            ov = s2c.sparse_attn_varlen_func(qv, kv_, vv, cu, cu, 2048, 2048, pat)
    for lens in ([1000, 1048], [5, 2043], [2048, 0]):
        cu.copy_(torch.tensor([0, lens[0], lens[0] + lens[1]], dtype=torch.int32))
        ov.fill_(float("nan"))
        g2.replay()
        for i, n in enumerate(lens):
            if n == 0:
                continue
            a = lens[0] if i else 0
            want, _ = ref_attention(qv[None, a:a + n], kv_[None, a:a + n], vv[None, a:a + n], token_mask(pat, n, n),
                                    1 / 8)
            close(ov[None, a:a + n], want, 2e-2, f"graph varlen {lens} sequence {i}")


def test_capture_of_an_unprepared_shape_is_an_error():
    pat = Pattern.local_stride(4, 64, 2, 4)
    q = rand(1, 320, 4, 64)
    s2c.sparse_attn_func(q, q, q, pat)                 # compiles the kernel
    q2 = rand(1, 448, 4, 64)
    g = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="not launched before CUDA-graph capture"):
        with torch.cuda.graph(g):
            s2c.sparse_attn_func(q2, q2, q2, pat)


def _tiny_llama(spec, seed):
    """A 2-layer Llama (GQA 4/2, head dim 64) with random weights and the s2c backend registered."""
    transformers = pytest.importorskip("transformers")
    import s2c.integrations.hf as s2hf
    s2hf.register()
    cfg = transformers.LlamaConfig(hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, vocab_size=1000,
                                   max_position_embeddings=4096)
    cfg.s2c = spec
    torch.manual_seed(seed)
    return transformers.LlamaForCausalLM(cfg).to(DEV, BF16).eval()


def _use(model, impl):
    model.config._attn_implementation = impl
    for layer in model.model.layers:
        layer.self_attn.config._attn_implementation = impl


def test_transformers_backend_matches_sdpa():
    model = _tiny_llama({"block_size": 64, "local_blocks": 1, "vert_stride": 1}, 0)   # dense: every causal block
    ids = torch.randint(0, 1000, (1, 1000), device=DEV)
    out = {}
    for impl in ("sdpa", "s2c"):
        _use(model, impl)
        with torch.no_grad():
            out[impl] = model(input_ids=ids).logits.float()
    err = (out["s2c"] - out["sdpa"]).abs().max().item()
    assert err <= 5e-2 * out["sdpa"].std().item() * 10, f"logits differ by {err}"
    assert (out["s2c"].argmax(-1) == out["sdpa"].argmax(-1)).float().mean() > 0.98


def test_growing_kv_length_keeps_plans_bounded():
    """Generation without a static cache: a new key length each step.  Plans
    stay bounded (oldest uncaptured freed) and every step is right."""
    from s2c import _runtime as R
    torch.manual_seed(14)
    pat = Pattern.local_stride(4, 64, 2, 4, num_kv_heads=2)
    k, v = rand(1, 1200, 2, 64), rand(1, 1200, 2, 64)
    kern = None
    for n in range(1000, 1000 + R.MAX_PLANS + 20):
        q = rand(1, 1, 4, 64)
        o = s2c.sparse_attn_func(q, k[:, :n], v[:, :n], pat)
        if n % 16 == 0:
            want, _ = ref_attention(q, k[:, :n], v[:, :n], token_mask(pat, 1, n), 1 / 8)
            close(o, want, 2e-2, f"step with {n} keys")
        kern = kern or next(kk for kk in R.device(0).kernels.values() if kk.pattern.key == pat.key)
    assert len(kern.plans) <= R.MAX_PLANS


def test_mask_rows_of_a_query_chunk():
    """A chunk's mask (rows = the chunk's query blocks, as get_sparse_attn_mask
    gives with q_start_position) over keys 0..end: rows start at the chunk."""
    torch.manual_seed(15)
    bs, H = 64, 2
    full = s2c.get_sparse_attn_mask(H, 1024, bs, 2, 4, device="cpu", dtype=torch.uint8)[1]     # [H, 16, 16]
    chunk = full[:, 8:12, :12]                                       # queries 512..767, keys 0..767
    attn = s2c.SparseAttention(bs, chunk, seq_dim=1)
    q, k, v = rand(1, 256, H, 64), rand(1, 768, H, 64), rand(1, 768, H, 64)
    o = attn(q, k, v)
    pat = Pattern.from_mask(bs, full, num_heads=H)
    want, _ = ref_attention(q, k, v, token_mask(pat, 1024, 1024)[:, 512:768, :768], 1 / 8)
    close(o, want, 2e-2, "chunk mask")


def test_transformers_left_padded_batch_matches_single_sequences():
    model = _tiny_llama({"block_size": 64, "local_blocks": 2, "vert_stride": 4, "dense_layers": [1]}, 1)
    _use(model, "s2c")
    a = torch.randint(0, 1000, (1, 500), device=DEV)
    b = torch.randint(0, 1000, (1, 300), device=DEV)
    ids = torch.full((2, 500), 0, device=DEV, dtype=torch.long)
    mask = torch.zeros((2, 500), device=DEV, dtype=torch.long)
    ids[0], mask[0] = a[0], 1
    ids[1, 200:], mask[1, 200:] = b[0], 1
    with torch.no_grad():
        pos = (mask.cumsum(-1) - 1).clamp(min=0)           # positions count real tokens, as generate does
        batch = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits.float()
        one_a = model(input_ids=a).logits.float()
        one_b = model(input_ids=b).logits.float()
    tol = 5e-2 * one_a.std().item() * 10
    assert (batch[0] - one_a[0]).abs().max().item() <= tol
    assert (batch[1, 200:] - one_b[0]).abs().max().item() <= tol
