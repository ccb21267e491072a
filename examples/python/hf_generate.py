"""s2c as a Hugging Face transformers attention backend: attn_implementation="s2c" after
s2c.integrations.hf.register(), the pattern from config.s2c.  For each of a tiny Llama,
Mistral and Phi-3 (4 layers, hidden 256, 4 heads of 64, 2 kv heads, vocab 512, random
weights, bf16): a 2048-token prefill and greedy generate of 32 new tokens,

  - with "sdpa" (the reference);
  - with "s2c" on a dense pattern (vert_stride 1; layer 0 in dense_layers, so on SDPA):
    prefill logits must match SDPA's, max |diff| < 5e-2 x std(logits) (bf16 noise),
    and the greedy tokens must agree (a first difference is accepted only at a near tie:
    SDPA's logits of the two tokens within that same tolerance);
  - with "s2c" on a sparse pattern (local 4, vert_stride 4, block 64, dense_layers [0]):
    runs, and prints how far its logits are from the dense ones and its tokens.

Run on the GPU machine (S2C_LIBDIR: the libs2c build; transformers installed):
  python3 examples/python/hf_generate.py
Prints PASS or FAIL last; exit 0, 1 on a failed check, 77 without CUDA or transformers."""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import s2c  # noqa: E402,F401

PROMPT, NEW, VOCAB, TOL = 2048, 32, 512, 5e-2
SMALL = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=4, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=VOCAB, max_position_embeddings=4096,
             pad_token_id=0, bos_token_id=1, eos_token_id=2)
DENSE = {"block_size": 64, "local_blocks": 1, "vert_stride": 1, "dense_layers": [0]}
SPARSE = {"block_size": 64, "local_blocks": 4, "vert_stride": 4, "dense_layers": [0]}


def archs():
    """(name, config, model class) of the architectures this transformers has."""
    import transformers as T
    for name, cfg, model, extra in (("llama", "LlamaConfig", "LlamaForCausalLM", {}),
                                    ("mistral", "MistralConfig", "MistralForCausalLM", {"sliding_window": None}),
                                    ("phi3", "Phi3Config", "Phi3ForCausalLM", {})):
        if hasattr(T, cfg) and hasattr(T, model):
            yield name, getattr(T, cfg)(**SMALL, **extra), getattr(T, model)


def use(model, impl, spec=None):
    """Switch the attention implementation (and the s2c pattern) of a built model."""
    import s2c.integrations.hf as s2hf
    model.config._attn_implementation = impl
    for m in model.modules():
        if hasattr(m, "self_attn"):
            m.self_attn.config._attn_implementation = impl
    if spec is not None:
        model.config.s2c = dict(spec)
    s2hf._cache.clear()    # so that the count of layers on s2c below is this run's


def run(model, ids):
    """Prefill logits (float) and the greedy continuation with its per-step logits."""
    with torch.no_grad():
        logits = model(input_ids=ids, use_cache=False).logits.float()
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW, min_new_tokens=NEW,
                             do_sample=False, pad_token_id=0, return_dict_in_generate=True, output_logits=True)
    return logits, out.sequences[0, ids.shape[1]:].tolist(), [x[0].float() for x in out.logits]


def main():
    if not torch.cuda.is_available():
        print("no CUDA device: skipped"); sys.exit(77)
    try:
        import transformers
    except ImportError:
        print("transformers is not installed: skipped"); sys.exit(77)
    import s2c.integrations.hf as s2hf
    s2hf.register()
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, {torch.cuda.get_device_name()}")

    ok, names = True, []
    for name, cfg, cls in archs():
        names.append(name)
        cfg._attn_implementation = "sdpa"
        torch.manual_seed(0)
        with torch.device("cuda"):
            model = cls(cfg).to(torch.bfloat16).eval()
        g = torch.Generator(device="cuda").manual_seed(1)
        ids = torch.randint(3, VOCAB, (1, PROMPT), device="cuda", generator=g)

        use(model, "sdpa")
        ref_logits, ref_toks, ref_steps = run(model, ids)
        tol = TOL * ref_logits.std().item()

        use(model, "s2c", DENSE)
        d_logits, d_toks, _ = run(model, ids)
        s2c_layers = sum(p is not None for _, p in s2hf._cache.values())
        diff = (d_logits - ref_logits).abs().max().item()
        same = next((i for i, (a, b) in enumerate(zip(ref_toks, d_toks)) if a != b), NEW)
        tie = same < NEW and (ref_steps[same][ref_toks[same]] - ref_steps[same][d_toks[same]]).item() <= tol
        good = diff < tol and s2c_layers == cfg.num_hidden_layers - 1 and (same == NEW or tie)
        print(f"{name}: dense s2c ({s2c_layers} layers on s2c) vs sdpa: prefill logits max |diff| {diff:.3e} "
              f"(tolerance {tol:.3e} = {TOL:.0e} x std); greedy tokens agree {same}/{NEW}"
              f"{' then a near tie' if tie else ''}: {'ok' if good else 'FAIL'}")
        ok = ok and good

        use(model, "s2c", SPARSE)
        s_logits, s_toks, _ = run(model, ids)
        far = (s_logits - d_logits).abs().max().item()
        print(f"{name}: sparse s2c (local 4, vert_stride 4): logits max |diff| from dense {far:.3e}, "
              f"tokens {s_toks[:12]}..., sdpa tokens {ref_toks[:12]}...")
        ok = ok and torch.isfinite(s_logits).all().item() and len(s_toks) == NEW
        del model
        torch.cuda.empty_cache()
    print(("PASS" if ok and names else "FAIL") + f": {', '.join(names) or 'no architecture'}: dense s2c vs sdpa "
          f"(logits < {TOL:.0e} x std, greedy tokens), sparse s2c prefill and generate")
    sys.exit(0 if ok and names else 1)


if __name__ == "__main__":
    main()
