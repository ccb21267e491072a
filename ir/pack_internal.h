/* Internal to s2c (not installed): the schedule packings only the
 * templates' kernels read, by the format their manifest record names
 * (KV_GATHER, the owned-pairs tile, the backward's dK/dV lists).  Callers
 * outside s2c get them through s2_manifest_schedule_pack (s2c/manifest.h);
 * the layouts are in s2c/launch.h. */
#ifndef S2C_PACK_INTERNAL_H
#define S2C_PACK_INTERNAL_H

#include "s2c/layout.h"

/* s2_schedule_pack_gathered_owned only (bits above S2_ENTRY_RAGGED): the
 * entry is read by query sub-block 0 (OWN0) or 1 (OWN1) alone, and
 * OWN_FULL when that sub-block keeps every pair of it */
enum {
    S2_ENTRY_OWN0 = 1u << 3,
    S2_ENTRY_OWN1 = 1u << 4,
    S2_ENTRY_OWN_FULL = 1u << 5,
};

/* Gathered key tiles (sm_90a forward, KV_GATHER in its manifest record): s is a forward
 * schedule whose key tiles are one pattern block (block_n = sub_n_size);
 * each list's entries, in order, are taken `group` at a time (2..4) into one
 * entry of group key blocks that fill one key tile of group * block_n rows.
 * Same buffer layout as s2_schedule_pack with s2_dev_gentry entries; the
 * offsets count gathered entries.  A list's last entry may hold fewer blocks:
 * the unused slots repeat its last block with no live bit. */
typedef struct s2_dev_gentry {
    int32_t block[4];    /* key tile of s (absolute index), slot j fills key rows [j*bn, (j+1)*bn) */
    uint32_t flags;      /* S2_ENTRY_FULL only when every slot is full and used */
    uint32_t live;       /* bit i*group + j: query sub-block i keeps slot j */
} s2_dev_gentry;

s2_status s2_schedule_pack_gathered(s2_ctx *ctx, const s2_schedule *s, int group, s2_packed_schedule *out);

/* Gathered pairs for a tile of two 64-row warpgroups (sm_90a forward,
 * block_m 128, kv_gather 2: sub-block i is warpgroup i's rows).  As
 * s2_schedule_pack_gathered with group 2, except in a list where exactly
 * one block A is read by sub-block 0 alone, one block B by sub-block 1
 * alone, and an odd number by both (an S2 local window: A its first block
 * for the upper rows, B the diagonal of the lower), the list is (A, c*)
 * marked OWN0, (c*, B) marked OWN1, then the blocks both read, c* left out,
 * two per entry in list order; c* is the last block both read whose entry
 * is not FULL (else the last).  A kernel that knows the marks runs one
 * entry fewer per warpgroup (each skips the other's), with no dead slot,
 * where union pairs leave four; one that does not runs them all, masked by
 * their live bits (the other sub-block has none): the same result.  Same
 * number of entries per list as group 2. */
s2_status s2_schedule_pack_gathered_owned(s2_ctx *ctx, const s2_schedule *s, s2_packed_schedule *out);

/* The resident key tiles of the backward's dK/dV kernel (launch.h,
 * backward ABI): t is a TRANSPOSED schedule whose key tiles are one pattern
 * block or part of one (sub_n 1), group 1..4.  Per kv head (heads /
 * kv_heads query heads), its key blocks are cut into groups of `group`
 * blocks read by the same query tiles: sorted by the last, then the first
 * query tile reading them (over the group's query heads), so that vertical
 * stripes share a tile with stripes and local-only blocks with their
 * neighbours.  Every key block is in exactly one group; *lists =
 * cdiv(kv blocks, group) groups per kv head, heaviest (most entries) first.
 * Buffer as s2_schedule_pack's: class_of_head[h] is the list class of head
 * h (kv heads whose query heads have the same classes share one), list x of
 * a class is the group's header, one s2_dev_kvgroup (its key blocks, -1 for
 * an unused slot; slot j is key rows [j*bs, (j+1)*bs) of the tile), then
 * its s2_dev_entry records: tile = query tile (absolute, increasing), live
 * bit i*group + j = query sub-block i keeps slot j, FULL when every slot is
 * used and full, row_mask and CAUSAL/RAGGED or-ed.  Offsets count records,
 * headers included.  The kv heads of one class share groups, so a kernel
 * reads the header of any of its query heads' lists. */
typedef struct s2_dev_kvgroup {
    int32_t block[4];
} s2_dev_kvgroup;

s2_status s2_schedule_pack_gathered_kv(s2_ctx *ctx, const s2_schedule *t, int kv_heads, int group,
                                       s2_packed_schedule *out, int32_t *lists);

#endif
