/* s2c — on-disk cache of compiled kernels (cubins), keyed by everything that
 * determines them.
 *
 * Directory: the `dir` argument of s2_cache_open, else $S2C_CACHE_DIR, else
 * $XDG_CACHE_HOME/s2c, else $HOME/.cache/s2c (empty variables count as
 * unset; a relative $XDG_CACHE_HOME is ignored, as the XDG spec says).
 * Missing directories are created like `mkdir -p`, mode 0700.
 *
 * Trust: other users must not be able to put entries in the directory.  One
 * that is owned by another user, or writable by group or others without the
 * sticky bit, is not used (as ccache does): s2_cache_untrusted says why,
 * every lookup misses and every store fails with that message.  In a sticky
 * shared directory an entry owned by another user is a miss.  Set
 * S2C_CACHE_TRUST_DIR=1 (or pass S2_CACHE_TRUST_DIR) to use a shared
 * directory anyway; then neither check is made.
 *
 * Key: SHA-256 over, in this order and each with its length, the generator
 * identity (s2_generator_id: version and a hash of the generating sources), the caller's pattern serialization, every field of the kernel
 * spec, the toolchain identity (s2_toolchain_version) and the arch name.
 *
 * Entry: one file DIR/<64 hex digits of the key>.s2ck:
 *   0   "S2CK"
 *   4   u32 format version (S2_CACHE_FORMAT)
 *   8   key (32 bytes)
 *   40  u64 payload length
 *   48  SHA-256 of key || u64 payload length || payload (32 bytes)
 *   80  payload
 * (integers little-endian).  The checksum covers the key, so a whole entry
 * copied or renamed to another key's file is a miss even with its header's
 * key rewritten; entries of another format version are misses.  Stores write a temporary file in the same
 * directory, fsync it and rename it over the entry, so concurrent writers
 * (threads or processes) both succeed and readers see a whole entry or none.
 * The temporary file, ENTRY.tmp.<16 random hex digits>, is created mode 0600
 * with O_EXCL|O_NOFOLLOW: a symlink or file planted at its name is never
 * followed or written (the store takes another name).  Each store removes
 * this user's temporary files older than S2_CACHE_STALE_TMP_SECONDS (left
 * by stores that died before their rename).
 * A lookup that finds a corrupt or truncated entry reports a miss (with the
 * reason in the ctx message); the next store replaces it.  Payloads are at
 * most S2_CACHE_MAX_PAYLOAD: a larger one is not stored, and an entry whose
 * file or header says more is a miss before anything is read or allocated.
 *
 * An s2_cache is immutable after s2_cache_open and may be shared between
 * threads; each thread uses its own s2_ctx.
 */
#ifndef S2C_CACHE_H
#define S2C_CACHE_H

#include "s2c/codegen.h"
#include "s2c/common.h"
#include "s2c/pattern.h"
#include "s2c/spec.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define S2_CACHE_FORMAT 2
#define S2_CACHE_KEY_BYTES 32
/* The largest payload an entry holds (cubins are far smaller): 64 MiB. */
#define S2_CACHE_MAX_PAYLOAD ((size_t)64 << 20)
/* Age after which a store's leftover temporary file is removed: 1 hour. */
#define S2_CACHE_STALE_TMP_SECONDS 3600

typedef struct s2_cache s2_cache;

typedef struct s2_cache_key {
    uint8_t bytes[S2_CACHE_KEY_BYTES];
} s2_cache_key;

/* What a key is made of.  Strings are NUL-terminated. */
typedef struct s2_cache_key_desc {
    const char *generator;        /* NULL: s2_generator_id() */
    const char *pattern;          /* the caller's serialization of the pattern(s); required */
    const s2_kernel_spec *spec;   /* required */
    const char *toolchain;        /* NULL: s2_toolchain_version(ctx, S2_CUBIN_AUTO) */
    const char *arch;             /* "sm_90a"; required */
} s2_cache_key_desc;

S2_API s2_status s2_cache_key_build(s2_ctx *ctx, const s2_cache_key_desc *desc, s2_cache_key *out);
/* 64 lowercase hex digits and a NUL. */
S2_API void s2_cache_key_hex(const s2_cache_key *key, char out[2 * S2_CACHE_KEY_BYTES + 1]);

/* The identity of the code generator: "VERSION+HASH+llvmX.Y.Z", HASH 16 hex
 * digits of a SHA-256 over the sources the generated PTX depends on (codegen,
 * templates, ir, patterns, common, the public headers), taken at build time,
 * and the version of the LLVM linked in.
 * Two builds of s2c that could generate different code have different
 * identities, so neither takes the other's cached kernels.  Also written as
 * the generator of every manifest.  Static storage. */
S2_API const char *s2_generator_id(void);

/* The identity of the assembler, for keys: "ptxas <its version line>" (from
 * `ptxas --version`, the program s2_ptx_to_cubin would run: $S2C_PTXAS,
 * $PATH, $CUDA_HOME/bin, /usr/local/cuda/bin), or "nvjitlink-MAJOR.MINOR".
 * S2_CUBIN_AUTO picks like s2_ptx_to_cubin.  Each back end is asked once per
 * process; *out is static storage.  S2_ERR_TOOLCHAIN when it is missing. */
S2_API s2_status s2_toolchain_version(s2_ctx *ctx, s2_cubin_backend backend, const char **out);

S2_API s2_status s2_cache_open(s2_ctx *ctx, const char *dir, s2_cache **out);
/* s2_cache_open's flags: use the directory whoever owns it and whatever its
 * permissions (as S2C_CACHE_TRUST_DIR=1 does). */
#define S2_CACHE_TRUST_DIR 1u
S2_API s2_status s2_cache_open_flags(s2_ctx *ctx, const char *dir, unsigned flags, s2_cache **out);
/* NULL when the cache is used; else why its directory is not (then lookups
 * miss and stores fail, each with this reason in the ctx message). */
S2_API const char *s2_cache_untrusted(const s2_cache *cache);
S2_API void s2_cache_close(s2_cache *cache); /* NULL is fine */
S2_API const char *s2_cache_dir(const s2_cache *cache);

/* S2_OK with *data (malloc'd; free()) and *size, or S2_ERR_NOT_FOUND when
 * there is no valid entry (the ctx message says why: absent, unreadable,
 * corrupt, another format version, another user's, an untrusted directory).
 * S2_ERR_NOMEM and S2_ERR_INVALID otherwise. */
S2_API s2_status s2_cache_lookup(s2_ctx *ctx, const s2_cache *cache, const s2_cache_key *key, void **data,
                          size_t *size);
/* Store (or replace) the entry; 0 < size <= S2_CACHE_MAX_PAYLOAD (else
 * S2_ERR_INVALID).  S2_ERR_IO when it cannot be written or the directory is
 * not trusted. */
S2_API s2_status s2_cache_store(s2_ctx *ctx, const s2_cache *cache, const s2_cache_key *key, const void *data,
                         size_t size);

#ifdef __cplusplus
}
#endif
#endif
