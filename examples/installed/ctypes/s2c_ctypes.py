#!/usr/bin/env python3
"""libs2c loaded by its absolute path with ctypes, as a Python package loads
it: no LD_LIBRARY_PATH, libs2c finds libs2rt beside it through its RUNPATH.
Checks s2_version() against the expected version and parses patterns from
memory (libs2c) with a context and messages (libs2rt).  Needs no GPU.

  s2c_ctypes.py LIBDIR VERSION      e.g. VERSION from `pkg-config --modversion s2c`
"""
import ctypes
import os
import re
import sys

TWO_PATTERNS = b"""patterns:
  - name: sparse
    heads: 8
    block_size: 64
    local_stride: {local_blocks: 4, vert_stride: 8}
  - name: dense
    heads: 8
    block_size: 64
    dense: true
"""
BAD_BLOCK = b"heads: 8\nblock_size: 24\ndense: true\n"


def soname_file(libdir):
    """LIBDIR/libs2c.so.MAJOR.MINOR (the soname), as an absolute path."""
    names = [n for n in os.listdir(libdir) if re.fullmatch(r"libs2c\.so\.\d+\.\d+", n)]
    if len(names) != 1:
        raise SystemExit(f"expected one libs2c.so.MAJOR.MINOR in {libdir}, found {names}")
    return os.path.join(os.path.abspath(libdir), names[0])


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    libdir, want = sys.argv[1], sys.argv[2]
    if os.environ.get("LD_LIBRARY_PATH"):
        print(f"LD_LIBRARY_PATH is set ({os.environ['LD_LIBRARY_PATH']}): this checks loading without it")
        return 1
    try:
        lib = ctypes.CDLL(soname_file(libdir))
    except OSError as e:
        print(f"FAIL: loading {soname_file(libdir)}: {e}")
        return 1
    lib.s2_version.restype = ctypes.c_char_p
    lib.s2_ctx_new.restype = ctypes.c_void_p
    lib.s2_ctx_free.argtypes = [ctypes.c_void_p]
    lib.s2_ctx_message.restype = ctypes.c_char_p
    lib.s2_ctx_message.argtypes = [ctypes.c_void_p]
    lib.s2_status_name.restype = ctypes.c_char_p
    lib.s2_status_name.argtypes = [ctypes.c_int]
    lib.s2_pattern_parse.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t,
                                     ctypes.POINTER(ctypes.c_void_p)]
    lib.s2_pattern_set_count.argtypes = [ctypes.c_void_p]
    lib.s2_pattern_set_free.argtypes = [ctypes.c_void_p]

    failures = []
    version = lib.s2_version().decode()
    if version != want:
        failures.append(f"s2_version() is {version!r}, expected {want!r}")
    ctx = lib.s2_ctx_new()
    out = ctypes.c_void_p()
    st = lib.s2_pattern_parse(ctx, b"two.yaml", TWO_PATTERNS, len(TWO_PATTERNS), ctypes.byref(out))
    if st != 0 or lib.s2_pattern_set_count(out) != 2:
        failures.append(f"two patterns: {lib.s2_status_name(st).decode()} {lib.s2_ctx_message(ctx).decode()}")
    lib.s2_pattern_set_free(out)
    out = ctypes.c_void_p()
    st = lib.s2_pattern_parse(ctx, b"bad.yaml", BAD_BLOCK, len(BAD_BLOCK), ctypes.byref(out))
    msg = lib.s2_ctx_message(ctx).decode()
    if lib.s2_status_name(st) != b"S2_ERR_PARSE" or not msg.startswith("bad.yaml:2:13: block_size:") or out.value:
        failures.append(f"block_size 24: {lib.s2_status_name(st).decode()} {msg!r}")
    lib.s2_ctx_free(ctx)
    for f in failures:
        print("FAIL:", f)
    if not failures:
        print(f"libs2c {version} loaded from {soname_file(libdir)}: two patterns parsed, block_size 24 refused")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
