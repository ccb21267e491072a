"""A Hugging Face transformers attention backend: `attn_implementation="s2c"`.

    import s2c.integrations.hf as s2hf
    s2hf.register()                                   # once per process
    config.s2c = {"block_size": 64, "local_blocks": 16, "vert_stride": 8,
                  "dense_layers": [0, 1]}             # or {"pattern_file": ..., "layers": {...}}
    model = LlamaForCausalLM(config, attn_implementation="s2c")

The pattern comes from `config.s2c` (a dict; `S2C_PATTERN` in the
environment names a YAML file instead):
  - local-stride keys of `s2c.Pattern.local_stride` (block_size,
    local_blocks, vert_stride, head_sliding_offset, homo_head,
    num_dense_heads, ...); heads and kv heads come from the model;
  - or `pattern_file` (a YAML pattern file) with optional `layers`, a map
    from layer index (or "default") to a pattern name in that file;
  - `dense_layers`: layers that stay dense; they run SDPA.
Dense layers, and calls with a padding mask s2c cannot express, take SDPA."""
import os
from typing import Optional

import torch

from .. import ops
from ..pattern import Pattern

NAME = "s2c"
_cache = {}


def _spec(config):
    spec = getattr(config, "s2c", None)
    if spec is None and os.environ.get("S2C_PATTERN"):
        spec = {"pattern_file": os.environ["S2C_PATTERN"]}
    if spec is None:
        raise ValueError("s2c backend: the model config has no `s2c` pattern (a dict; see s2c.integrations.hf)")
    return dict(spec)


def pattern_for_layer(config, layer_idx: int, heads: int, kv_heads: int) -> Optional[Pattern]:
    """The pattern of one layer, or None when the layer is dense."""
    spec_obj = getattr(config, "s2c", None)
    key = (id(spec_obj), layer_idx, heads, kv_heads)
    hit = _cache.get(key)
    if hit is not None and hit[0] is spec_obj:      # the same spec object (a new dict is a new spec)
        return hit[1]
    spec = _spec(config)
    dense = set(int(x) for x in spec.pop("dense_layers", ()))
    if layer_idx in dense:
        p = None
    elif "pattern_file" in spec:
        layers = {str(k): v for k, v in spec.get("layers", {}).items()}
        name = layers.get(str(layer_idx), layers.get("default"))
        p = None if name == "dense" else Pattern.from_file(spec["pattern_file"], name).for_heads(heads, kv_heads)
    else:
        block = spec.pop("block_size", 64)
        local, stride = spec.pop("local_blocks"), spec.pop("vert_stride")
        spec.setdefault("num_kv_heads", kv_heads)
        p = Pattern.local_stride(heads, block, local, stride, name=f"hf-layer{layer_idx}", **spec)
    _cache[key] = (spec_obj, p)
    return p


def _padding_mask_4d(mask2d, q_len, k_len):
    """SDPA's boolean mask [B, 1, Sq, Sk] from a 2-D padding mask: causal
    (queries last) and the real keys."""
    qpos = torch.arange(q_len, device=mask2d.device) + (k_len - q_len)
    causal = torch.arange(k_len, device=mask2d.device)[None, :] <= qpos[:, None]
    return causal[None, None] & mask2d[:, None, None, -k_len:].bool()


def _sdpa(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout,
                                  **kwargs)


def attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """transformers' attention-function signature: query [B, H, Sq, D], key and
    value [B, Hkv, Sk, D] (not repeated); returns [B, Sq, H, D] and no weights.
    attention_mask is None or the 2-D padding mask (the registered mask function
    gives FlashAttention's)."""
    layer = getattr(module, "layer_idx", 0) or 0
    pat = pattern_for_layer(module.config, layer, query.shape[1], key.shape[1])
    causal = getattr(module, "is_causal", True)
    padded = attention_mask is not None and attention_mask.dim() == 2 and not bool(attention_mask.all())
    if pat is None or dropout or not causal or query.shape[2] > key.shape[2]:
        if attention_mask is not None and attention_mask.dim() == 2:
            attention_mask = _padding_mask_4d(attention_mask, query.shape[2], key.shape[2]) if padded else None
        return _sdpa(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs)
    scale = scaling or query.shape[-1] ** -0.5
    if padded:
        m = attention_mask[:, -key.shape[2]:].bool()
        if bool(m[:, -1].all()):            # left padding (generation)
            o = ops.padded_attn(query, key, value, pat, scale, 2, left_paddings=(~m).sum(-1).to(torch.int32))
        elif bool(m[:, 0].all()):           # right padding
            o = ops.padded_attn(query, key, value, pat, scale, 2, seqlens=m.sum(-1).to(torch.int32))
        else:                               # holes s2c's records cannot express
            return _sdpa(module, query, key, value, _padding_mask_4d(attention_mask, query.shape[2], key.shape[2]),
                         scaling=scaling, dropout=dropout, **kwargs)
        return o.transpose(1, 2).contiguous(), None
    o = ops.sparse_attn_func(query, key, value, pat, softmax_scale=scale, layout="bhsd", out_layout="bshd")
    return o, None


def _mask(*args, **kwargs):
    """Masks as FlashAttention takes them: None, or the 2-D padding mask."""
    from transformers.masking_utils import flash_attention_mask
    return flash_attention_mask(*args, **kwargs)


def register(name: str = NAME):
    """Register the backend (and its mask function) with transformers."""
    from transformers import AttentionInterface
    AttentionInterface.register(name, attention)
    try:
        from transformers import AttentionMaskInterface
        AttentionMaskInterface.register(name, _mask)
    except ImportError:   # transformers before the mask registry
        pass
