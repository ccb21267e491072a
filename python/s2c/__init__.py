"""s2c: sparsely-sharded (S2) attention kernels for PyTorch.

    import s2c
    o = s2c.sparse_attn_func(q, k, v, s2c.Pattern.local_stride(32, 64, 16, 8, num_kv_heads=8))

A drop-in for the S2 Triton library: `from s2c import SparseAttention,
LocalStrideSparseAttention, get_sparse_attn_mask, combine_attn_partitions`.
Kernels are generated for each pattern, dtype and head dim at first use and
kept in the on-disk cache (S2C_CACHE_DIR)."""
__version__ = "0.3.0.dev0"

from ._lib import S2Error, S2NotImplementedError, S2ValueError  # noqa: E402
from .pattern import Pattern, Rule  # noqa: E402


def lib_version() -> str:
    """The version of the loaded libs2c."""
    from . import _lib
    return _lib.version()


_LAZY = {"SparseAttention": "interface", "LocalStrideSparseAttention": "interface",
         "combine_attn_partitions": "interface", "get_sparse_attn_mask": "utils",
         "sparse_attn_func": "ops", "sparse_attn_varlen_func": "ops", "decode": "ops"}


def __getattr__(name):
    # torch-dependent parts load on first use, so `import s2c` works without torch;
    # once loaded, a name is a plain module attribute (no lookup per call)
    mod = _LAZY.get(name)
    if name == "cp":   # the context-parallel submodule (torch.distributed)
        import importlib
        return importlib.import_module(".cp", __name__)
    if mod is None:
        raise AttributeError(f"module 's2c' has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module("." + mod, __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "SparseAttention",
    "LocalStrideSparseAttention",
    "get_sparse_attn_mask",
    "combine_attn_partitions",
    "Pattern", "Rule", "sparse_attn_func", "sparse_attn_varlen_func", "decode",
    "S2Error", "S2ValueError", "S2NotImplementedError",
]
