/* Host side of a one-off GPU check of the AOT wide launcher: inputs, the
 * owned-pairs schedule and work list of NAME_w, and the float64 reference,
 * written to files for run.c on the GPU machine. */
#include "s2c/layout.h"
#include "pack_internal.h"
#include "s2c/pattern.h"
#include "s2c/ref.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
enum { B = 2, H = 4, D = 128 };
static const int64_t S = 1500;
static bool mask(const void *user, int q, int64_t qpos, int64_t kpos) { return s2_token_kept(user, q, qpos, kpos); }
static void put(const char *name, const void *p, size_t n)
{
    FILE *f = fopen(name, "wb");
    if (!f || fwrite(p, 1, n, f) != n) { perror(name); exit(1); }
    fclose(f);
}
int main(void)
{
    s2_pattern_set *set = NULL;
    s2_local_stride_args a;
    s2_local_stride_args_default(&a);
    a.num_heads = H; a.block_size = 64; a.local_blocks = 8; a.vert_stride = 16;
    if (s2_pattern_from_args(NULL, &a, &set) != S2_OK) return 1;
    const s2_pattern *p = s2_pattern_set_get(set, 0);
    s2_layout *l = NULL;
    s2_schedule *sc = NULL;
    s2_packed_schedule pk;
    int32_t *work = NULL;
    int64_t n_work = 0;
    if (s2_layout_new(NULL, p, S, S, &l) != S2_OK || s2_schedule_build(NULL, l, (s2_tile_spec){128, 64}, false, &sc) != S2_OK ||
        s2_schedule_pack_gathered_owned(NULL, sc, &pk) != S2_OK || s2_schedule_work_list(NULL, sc, &work, &n_work) != S2_OK)
        return 2;
    int32_t hdr[8] = {(int32_t)pk.size, (int32_t)pk.class_of_head_off, (int32_t)pk.offsets_off, (int32_t)pk.entries_off,
                      (int32_t)sc->geom.first_q_tile, (int32_t)sc->geom.q_tiles, (int32_t)n_work, 0};
    int64_t owned = 0, nl = (int64_t)sc->num_classes * sc->geom.q_tiles;
    const int32_t *po = (const int32_t *)((char *)pk.data + pk.offsets_off);
    const s2_dev_gentry *pe = (const s2_dev_gentry *)((char *)pk.data + pk.entries_off);
    for (int64_t i = 0; i < nl; i++)
        owned += po[i + 1] > po[i] && (pe[po[i]].flags & S2_ENTRY_OWN0);
    hdr[7] = (int32_t)owned;
    put("hdr.bin", hdr, sizeof hdr);
    put("sched.bin", pk.data, pk.size);
    put("work.bin", work, (size_t)n_work * 4);
    size_t n = (size_t)B * S * H * D;
    uint16_t *q = malloc(n * 2), *k = malloc(n * 2), *v = malloc(n * 2);
    double *o = malloc(n * 8);
    float *lse = malloc((size_t)B * H * S * 4);
    s2_tensor tq = s2_tensor_bshd(q, S2_DTYPE_BF16, S, H, D), tk = s2_tensor_bshd(k, S2_DTYPE_BF16, S, H, D),
              tv = s2_tensor_bshd(v, S2_DTYPE_BF16, S, H, D), to = s2_tensor_bshd(o, S2_DTYPE_F64, S, H, D);
    int64_t ext[4] = {B, S, H, D};
    s2_tensor_fill_random(&tq, ext, 11, -1.5, 1.5);
    s2_tensor_fill_random(&tk, ext, 12, -1.5, 1.5);
    s2_tensor_fill_random(&tv, ext, 13, -1.0, 1.0);
    s2_ref_problem pr = {.batch = B, .heads = H, .kv_heads = H, .head_dim = D, .q_len = S, .kv_len = S,
                         .causal = true, .mask = mask, .mask_user = p};
    if (s2_ref_forward(NULL, &pr, &tq, &tk, &tv, &to, lse) != S2_OK) return 3;
    put("q.bin", q, n * 2); put("k.bin", k, n * 2); put("v.bin", v, n * 2);
    put("oref.bin", o, n * 8); put("lseref.bin", lse, (size_t)B * H * S * 4);
    printf("schedule %zu bytes, %lld lists (%lld owned), %lld work items\n", pk.size, (long long)nl, (long long)owned,
           (long long)n_work);
    return 0;
}
