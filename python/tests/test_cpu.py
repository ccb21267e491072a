"""CPU tests of the Python package: import, the ctypes mirrors against the C
headers, pattern and mask parity with the C library and the golden masks,
argument checks and their messages.  Needs libs2c (S2C_LIBDIR) and torch."""
import ctypes
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT, golden_cases

torch = pytest.importorskip("torch")
import s2c  # noqa: E402
from s2c import _structs as S  # noqa: E402
from s2c.pattern import Pattern, Rule  # noqa: E402


def test_import_and_version():
    assert s2c.lib_version().count(".") == 2
    assert set(s2c.__all__) >= {"SparseAttention", "LocalStrideSparseAttention", "get_sparse_attn_mask",
                                "combine_attn_partitions"}
    for name in s2c.__all__:
        assert getattr(s2c, name) is not None


# ---- the ctypes mirrors against the headers ------------------------------------------

def _c_layout_program():
    lines = ["#include <stddef.h>", "#include <stdio.h>", '#include "s2c/attn_runtime.h"',
             '#include "s2c/jit.h"', '#include "s2c/pattern.h"', '#include "s2c/cpplan.h"', "int main(void) {"]
    for cname, cls in S.STRUCTS.items():
        ctype = "struct " + cname if cname == "s2_pattern" else cname
        lines.append(f'printf("{cname} size %zu\\n", sizeof({ctype}));')
        for fname, _ in cls._fields_:
            lines.append(f'printf("{cname}.{fname} %zu\\n", offsetof({ctype}, {fname}));')
    for ename in S.ENUMS:
        lines.append(f'printf("{ename} %d\\n", (int){ename});')
    lines.append("return 0; }")
    return "\n".join(lines)


def test_mirrors_match_headers(tmp_path):
    inc = [os.path.join(ROOT, "include")]
    build = os.environ.get("S2C_LIBDIR")
    if build and os.path.isdir(os.path.join(build, "include")):
        inc.append(os.path.join(build, "include"))     # the generated s2c/version.h
    src = tmp_path / "layout.c"
    src.write_text(_c_layout_program())
    exe = tmp_path / "layout"
    cc = os.environ.get("CC", "cc")
    subprocess.run([cc, "-std=c11", *(f"-I{d}" for d in inc), str(src), "-o", str(exe)], check=True)
    out = dict(line.rsplit(" ", 1) for line in subprocess.run([str(exe)], capture_output=True, text=True,
                                                              check=True).stdout.splitlines())
    bad = []
    for cname, cls in S.STRUCTS.items():
        if cname != "s2_pattern" and int(out[f"{cname} size"]) != ctypes.sizeof(cls):
            bad.append(f"sizeof {cname}: C {out[cname + ' size']}, ctypes {ctypes.sizeof(cls)}")
        for fname, _ in cls._fields_:
            c_off, py_off = int(out[f"{cname}.{fname}"]), getattr(cls, fname).offset
            if c_off != py_off:
                bad.append(f"{cname}.{fname}: C offset {c_off}, ctypes {py_off}")
    for ename, value in S.ENUMS.items():
        if int(out[ename]) != value:
            bad.append(f"{ename}: C {out[ename]}, Python {value}")
    assert not bad, "\n".join(bad)


def test_mirror_check_catches_a_drift(tmp_path, monkeypatch):
    """The layout check fails when a mirror's field is off."""
    class Broken(ctypes.Structure):
        _fields_ = [("q_start", ctypes.c_int32), ("q_len", ctypes.c_int64), ("k_start", ctypes.c_int32),
                    ("kv_len", ctypes.c_int32)]
    monkeypatch.setitem(S.STRUCTS, "s2_attn_seq", Broken)
    with pytest.raises(AssertionError, match="s2_attn_seq"):
        test_mirrors_match_headers(tmp_path)


# ---- patterns and masks --------------------------------------------------------------

GOLDEN = golden_cases()


def _library_kwargs(kw):
    heads = kw["num_heads"]
    args = dict(num_kv_heads=kw.get("num_kv_heads"), homo_head=kw.get("homo_head", False),
                num_dense_heads=kw.get("num_dense_heads", 0), head_sliding_offset=kw.get("head_sliding_offset", 0),
                causal=kw.get("causal", True))
    return heads, kw["block_size"], kw["local_blocks"], kw["vert_stride"], args


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_masks_match_golden(name):
    kw, want = GOLDEN[name]
    heads, bs, local, stride, args = _library_kwargs(kw)
    m = s2c.get_sparse_attn_mask(heads, kw["seqlen"], bs, local, stride, device="cpu", dtype=torch.uint8,
                                 **args)[1].numpy()
    assert m.shape == want.shape, (m.shape, want.shape)
    assert np.array_equal(m, want)
    # the C library's decision for the same pattern, block by block
    pat = Pattern.local_stride(heads, bs, local, stride, **args)
    got = pat.block_mask(want.shape[1], want.shape[2])
    assert np.array_equal(got, np.broadcast_to(want, got.shape))


@pytest.mark.parametrize("case", [
    dict(num_heads=16, seqlen=2048, block_size=32, local_blocks=3, vert_stride=5, num_kv_heads=4),
    dict(num_heads=12, seqlen=1536, block_size=64, local_blocks=2, vert_stride=3, num_dense_heads=1,
         num_kv_heads=6, head_sliding_offset=2),
    dict(num_heads=8, seqlen=1024, block_size=16, local_blocks=5, vert_stride=7, head_sliding_step=2),
    dict(num_heads=4, seqlen=1000, block_size=64, local_blocks=(2, 3), vert_stride=4, causal=False),
    dict(num_heads=6, seqlen=768, block_size=64, local_blocks=2, vert_stride=3, causal=False, num_dense_heads=2),
    dict(num_heads=4, seqlen=512, block_size=32, local_blocks=2, vert_stride=3, causal=False,
         vert_position_type="absolute"),
])
def test_masks_match_c_library(case):
    """get_sparse_attn_mask and Pattern.local_stride agree block for block with
    s2_block_kept on patterns the golden file does not hold."""
    case = dict(case)
    heads, seqlen, bs = case.pop("num_heads"), case.pop("seqlen"), case.pop("block_size")
    local, stride = case.pop("local_blocks"), case.pop("vert_stride")
    py = s2c.get_sparse_attn_mask(heads, seqlen, bs, local, stride, device="cpu", dtype=torch.uint8, **case)[1]
    vp = case.pop("vert_position_type", None)
    pat = Pattern.local_stride(heads, bs, local, stride, vert_position=vp, **case)
    c = pat.block_mask(py.shape[1], py.shape[2])
    assert np.array_equal(np.broadcast_to(py.numpy(), c.shape), c)


def test_active_head_range_matches_slice():
    full = s2c.get_sparse_attn_mask(32, 4096, 64, 16, 8, head_sliding_offset=1, device="cpu", dtype=torch.uint8)[1]
    part = Pattern.local_stride(32, 64, 16, 8, head_sliding_offset=1, active_head_range=(8, 24))
    assert part.heads == 16
    assert np.array_equal(part.block_mask(64), full[8:24].numpy())
    with pytest.raises(ValueError, match="splits a kv group"):
        Pattern.local_stride(32, 64, 16, 8, num_kv_heads=8, active_head_range=(2, 10))


def test_mask_pattern_and_past_len_trim():
    torch.manual_seed(0)
    mask = (torch.rand(3, 9, 9) < 0.4).to(torch.uint8)
    pat = Pattern.from_mask(32, mask, causal=True)
    want = (mask.numpy() & np.tril(np.ones((9, 9), dtype=np.uint8)))[None] if False else \
        mask.numpy() & np.tril(np.ones((9, 9), dtype=np.uint8))
    assert np.array_equal(pat.block_mask(9), want)
    crow_col, trimmed, dense = s2c.get_sparse_attn_mask(4, 1024, 64, 4, 4, past_len=200, device="cpu",
                                                        return_dense=True, dtype=torch.uint8)
    assert trimmed.shape == (4, 16 - 4 + 0, 16) or trimmed.shape[1] == 16 - math.ceil(200 / 64)
    assert dense.shape == (4, 1024 - 200, 1024)
    # a token keeps a key iff its block keeps the key's block and the key is not in its future
    qpos, kpos = 300, 250
    blk = s2c.get_sparse_attn_mask(4, 1024, 64, 4, 4, device="cpu", dtype=torch.uint8)[1]
    assert dense[2, qpos - 200, kpos] == blk[2, qpos // 64, kpos // 64]
    assert dense[2, qpos - 200, qpos + 1] == 0
    crow, col = crow_col
    assert crow.shape == (4, trimmed.shape[1] + 1)
    for h in range(4):
        for r in range(trimmed.shape[1]):
            cols = col[h, crow[h, r]:crow[h, r + 1]].tolist()
            assert cols == trimmed[h, r].nonzero().flatten().tolist()


def test_file_pattern(tmp_path):
    pat = Pattern.from_file(os.path.join(ROOT, "patterns", "phi3-small.yaml"))
    assert (pat.heads, pat.kv_heads, pat.block_size, pat.name) == (32, 8, 64, "phi3-small")
    # the file's base rule, then its override: query heads 28-31 (kv head 7) dense
    lib = Pattern.local_stride(32, 64, 16, 8, num_kv_heads=8, head_sliding_offset=1, num_dense_heads=1)
    assert np.array_equal(pat.block_mask(40), lib.block_mask(40))
    assert pat.max_seq_len == 131072 and pat.rules[5].shift == 5 // 4 + 1
    bad = tmp_path / "bad.yaml"
    bad.write_text("heads: 8\nblock_size: 24\nlocal_stride: {local_blocks: 4, vert_stride: 4}\n")
    with pytest.raises(s2c.S2ValueError, match=r"bad.yaml:2:13: .*block_size"):
        Pattern.from_file(str(bad))


# ---- argument checks and messages -------------------------------------------------------

def test_pattern_errors_come_from_the_c_checks():
    with pytest.raises(s2c.S2ValueError, match=r"rules\[1\]: attends to nothing"):
        Pattern([Rule(local_left=1), Rule()], block_size=64)
    with pytest.raises(ValueError, match="block_size must be one of"):
        Pattern([Rule(local_left=1)], block_size=48)
    with pytest.raises(s2c.S2ValueError, match=r"heads \(6\) must be a multiple of kv_heads \(4\)"):
        Pattern([Rule(local_left=1)] * 6, block_size=64, kv_heads=4)
    with pytest.raises(ValueError, match="vert_stride must be >= 1"):
        Pattern.local_stride(8, 64, 4, 0)


def test_decode_head_dims():
    """Paged decode takes every multiple of 16 from 16 to 256 (the C table's
    decode entry), and names them when refusing another."""
    from s2c import _runtime as R
    for d in range(16, 257, 16):
        R.check_head_dim(d, "decode")
    pat = Pattern.local_stride(4, 64, 2, 4, num_kv_heads=2)
    table, lens = torch.zeros(1, 4, dtype=torch.int32), torch.ones(1, dtype=torch.int32)
    for d in (8, 40, 272):
        q, kc = torch.zeros(1, 1, 4, d, dtype=torch.bfloat16), torch.zeros(4, 16, 2, d, dtype=torch.bfloat16)
        with pytest.raises(NotImplementedError, match=rf"head_dim {d} is not covered yet by the decode kernels: "
                                                      r"they take 16, 32, 48, .*, 240, 256$"):
            s2c.decode(q, kc, kc, table, lens, pat, max_seq_len=64)


def test_decode_cache_dtype_checks():
    """The pools are q's dtype or float8_e4m3fn, K and V alike; scales only for
    fp8 pools, float32 with 1 or Hkv elements; refused before any GPU work."""
    pat = Pattern.local_stride(4, 64, 2, 4, num_kv_heads=2)
    table, lens = torch.zeros(1, 4, dtype=torch.int32), torch.ones(1, dtype=torch.int32)
    q = torch.zeros(1, 1, 4, 64, dtype=torch.bfloat16)
    kc = torch.zeros(4, 16, 2, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="k_cache and v_cache of one dtype"):
        s2c.decode(q, kc, kc.half(), table, lens, pat, max_seq_len=64)
    with pytest.raises(ValueError, match=r"caches of q's dtype \(torch.bfloat16\) or torch.float8_e4m3fn"):
        s2c.decode(q, kc.half(), kc.half(), table, lens, pat, max_seq_len=64)
    with pytest.raises(ValueError, match="k_scale and v_scale are for torch.float8_e4m3fn caches"):
        s2c.decode(q, kc, kc, table, lens, pat, max_seq_len=64, v_scale=torch.ones(2))
    f8 = getattr(torch, "float8_e4m3fn", None)
    if f8 is None:
        pytest.skip(f"torch {torch.__version__} has no float8_e4m3fn (the fp8 checks need 2.1)")
    k8 = torch.zeros(4, 16, 2, 64, dtype=f8)
    for bad in (torch.ones(3), torch.ones(2, dtype=torch.float64), torch.ones(2, 2)):
        with pytest.raises(ValueError, match="k_scale must be a float32 tensor of 1 or 2 .kv heads. elements"):
            s2c.decode(q, k8, k8, table, lens, pat, max_seq_len=64, k_scale=bad)
    with pytest.raises(NotImplementedError, match="float8_e4m3fn caches, not torch.float8_e5m2"):
        e5 = k8.to(torch.float8_e5m2)
        s2c.decode(q, e5, e5, table, lens, pat, max_seq_len=64)
    with pytest.raises(NotImplementedError, match="decode kernels take torch.float16 and torch.bfloat16"):
        s2c.decode(q.float(), k8, k8, table, lens, pat, max_seq_len=64)


def test_fp8_forward_argument_checks():
    """sparse_attn_func / sparse_attn_varlen_func on float8_e4m3fn: all three
    inputs fp8, descales contiguous float32 [batch, kv_heads] on the inputs'
    device and only with fp8 inputs, no gradients, head_dim a multiple of 32;
    refused before any GPU work (CPU tensors reach the device checks last)."""
    pat = Pattern.local_stride(4, 64, 2, 4, num_kv_heads=2)
    q, k = torch.zeros(1, 64, 4, 64, dtype=torch.bfloat16), torch.zeros(1, 64, 2, 64, dtype=torch.bfloat16)
    ds = torch.ones(1, 2)
    for kw in ({"q_descale": ds}, {"v_descale": ds}):
        with pytest.raises(ValueError, match="descale are for torch.float8_e4m3fn inputs, not torch.bfloat16"):
            s2c.sparse_attn_func(q, k, k, pat, **kw)
    cu = torch.tensor([0, 64], dtype=torch.int32)
    with pytest.raises(ValueError, match="descale are for torch.float8_e4m3fn inputs, not torch.bfloat16"):
        s2c.sparse_attn_varlen_func(q[0], k[0], k[0], cu, cu, 64, 64, pat, k_descale=ds)
    f8 = getattr(torch, "float8_e4m3fn", None)
    if f8 is None:
        pytest.skip(f"torch {torch.__version__} has no float8_e4m3fn (the fp8 checks need 2.1)")
    q8, k8 = q.to(f8), k.to(f8)
    with pytest.raises(ValueError, match=r"q, k, v all torch.float8_e4m3fn, got torch.float8_e4m3fn, "
                                         r"torch.bfloat16, torch.float8_e4m3fn"):
        s2c.sparse_attn_func(q8, k, k8, pat)
    with pytest.raises(ValueError, match=r"must share a dtype, got torch.bfloat16, torch.float8_e4m3fn"):
        s2c.sparse_attn_func(q, k8, k8, pat)
    with pytest.raises(NotImplementedError, match="fp8 forward has no backward"):
        s2c.sparse_attn_func(q8.clone().requires_grad_(), k8, k8, pat)
    with pytest.raises(NotImplementedError, match=r"head_dim 48 is not covered yet by the forward kernels: they "
                                                  r"take 32, 64, 96, 128, 160, 192, 224, 256$"):
        s2c.sparse_attn_func(q8[..., :48], k8[..., :48], k8[..., :48], pat)
    bad = (torch.ones(1, 2, dtype=torch.float64), torch.ones(2), torch.ones(2, 1), torch.ones(1, 4)[:, ::2],
           torch.ones(1, 2, device="meta"), 1.0)
    for d in bad:
        with pytest.raises(ValueError, match=r"k_descale must be a contiguous float32 tensor of shape \(1, 2\) "
                                             r"\[batch, kv_heads\] on cpu"):
            s2c.sparse_attn_func(q8, k8, k8, pat, q_descale=ds, k_descale=d)
    with pytest.raises(ValueError, match="must be on one CUDA device"):        # the descales pass
        s2c.sparse_attn_func(q8, k8, k8, pat, q_descale=ds, k_descale=ds, v_descale=ds)
    with pytest.raises(ValueError, match=r"v_descale must be a contiguous float32 tensor of shape \(1, 2\)"):
        s2c.sparse_attn_varlen_func(q8[0], k8[0], k8[0], cu, cu, 64, 64, pat, v_descale=torch.ones(2, 2))
    with pytest.raises(NotImplementedError, match="fp8 .e4m3. forward runs on sm_90a"):
        s2c.sparse_attn_varlen_func(q8[0], k8[0], k8[0], cu, cu, 64, 64, pat, v_descale=ds)
    with pytest.raises(NotImplementedError, match="float8_e4m3fn: sparse_attn_func and sparse_attn_varlen_func"):
        s2c.LocalStrideSparseAttention(4, 64, 64, 2, 4, num_kv_heads=2)(q8, k8, k8)
    with pytest.raises(NotImplementedError, match="float8_e4m3fn: sparse_attn_func and sparse_attn_varlen_func"):
        s2c.decode(q8[:, :1], k8, k8, torch.zeros(1, 4, dtype=torch.int32), torch.ones(1, dtype=torch.int32), pat,
                   max_seq_len=64)


def test_drop_in_argument_checks():
    with pytest.raises(ValueError, match="block_size must be a power of 2 and at least 16"):
        s2c.SparseAttention(24, torch.ones(4, 4))
    with pytest.raises(ValueError, match="block_m must be a power of 2"):
        s2c.LocalStrideSparseAttention(8, 1024, 64, 4, 4, block_m=48)
    with pytest.raises(NotImplementedError, match="block_size 256 is not covered"):
        s2c.LocalStrideSparseAttention(8, 4096, 256, 4, 4)
    with pytest.warns(UserWarning, match="not efficient for KV cache"):
        s2c.SparseAttention(64, torch.tensor([[1, 0, 0], [0, 1, 0], [1, 0, 1]]))
    attn = s2c.LocalStrideSparseAttention(8, 1000, 64, 4, 4)
    assert attn.max_seq_len == 1024 and attn.max_seqlen == 1024
    q = torch.zeros(1, 64, 8, 40, dtype=torch.bfloat16)
    with pytest.raises(NotImplementedError, match=r"head_dim 40 is not covered yet .* 16, 32, 48, .*, 240, 256"):
        attn(q, q, q)
    q = torch.zeros(1, 64, 8, 64, dtype=torch.float64)
    with pytest.raises(NotImplementedError, match=r"dtype torch.float64 is not covered yet"):
        attn(q, q, q)
    # fp32 (the tf32 forward) passes the dtype and head-dim checks, every multiple of 16 up to 256
    for d in (48, 64, 256):
        q = torch.zeros(1, 64, 8, d, dtype=torch.float32)
        with pytest.raises(ValueError, match="must be on one CUDA device"):
            attn(q, q, q)
    q = torch.zeros(1, 64, 8, 40, dtype=torch.float32)
    with pytest.raises(NotImplementedError, match=r"head_dim 40 is not covered yet"):
        attn(q, q, q)
    with pytest.raises(NotImplementedError, match="decode kernels take torch.float16 and torch.bfloat16"):
        s2c._runtime.check_head_dim(64, "decode", torch.float32)
    q = torch.zeros(1, 2048, 8, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"Input length 2048 is larger than the maximum length allowed \(1024\)"):
        attn(q, q, q)
    q = torch.zeros(1, 64, 8, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="must be on one CUDA device"):
        attn(q, q, q)
    with pytest.raises(ValueError, match="split_qkv"):
        attn(q, q)
    with pytest.raises(ValueError, match="pattern has 8 heads, the inputs have 4|heads in the sparse pattern is 8"):
        attn._pattern_for(4, 4)


def test_combine_attn_partitions_matches_float64():
    torch.manual_seed(1)
    B, H, S, D = 2, 3, 5, 8
    parts = [(torch.randn(B, H, S, D), torch.randn(B, H, S) * 3) for _ in range(3)]
    got = s2c.combine_attn_partitions(*parts)
    lse = torch.stack([l.double() for _, l in parts])
    w = torch.exp(lse - torch.logsumexp(lse, 0))
    want = sum(w[i][..., None] * parts[i][0].double() for i in range(3))
    assert torch.allclose(got.double(), want, atol=1e-5)
    with pytest.raises(ValueError, match="two or more"):
        s2c.combine_attn_partitions(parts[0])


def test_import_without_torch():
    """`import s2c` and its patterns need no torch (a build system's use)."""
    code = ("import sys; sys.modules['torch'] = None; import s2c; "
            "p = s2c.Pattern.local_stride(4, 64, 2, 2); print(p.heads)")
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "4"


def test_varlen_with_gradients_checks_its_arguments():
    # differentiable now: inputs that want a gradient reach the same checks as inference
    pat = s2c.Pattern.local_stride(4, 64, 3, 4, num_kv_heads=2)
    cu = torch.tensor([0, 17, 40], dtype=torch.int32)
    q = torch.zeros(40, 4, 64, dtype=torch.bfloat16, requires_grad=True)
    k = torch.zeros(40, 2, 64, dtype=torch.bfloat16, requires_grad=True)
    with pytest.raises(ValueError, match=r"varlen q, k, v are \[tokens, heads, head_dim\]"):
        s2c.sparse_attn_varlen_func(q[None], k, k, cu, cu, 23, 23, pat)
    with pytest.raises(ValueError, match="cu_seqlens_q must be a 1-D int32 tensor"):
        s2c.sparse_attn_varlen_func(q, k, k, cu.long(), cu, 23, 23, pat)
    with pytest.raises(NotImplementedError, match=r"head_dim 40 is not covered yet"):
        q40 = torch.zeros(40, 4, 40, dtype=torch.bfloat16, requires_grad=True)
        s2c.sparse_attn_varlen_func(q40, q40[:, :2], q40[:, :2], cu, cu, 23, 23, pat)
