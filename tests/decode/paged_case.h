/* What the paged-decode GPU tests (test_decode_gpu.c, 16-bit pages;
 * test_decode_fp8_gpu.c, e4m3 pages) share: a case's pattern, the paged
 * layout (random lengths, shuffled block tables, random q), the device
 * buffers and decode arguments of a problem, the float64 reference over the
 * test's pools, and the two decode runs (split 1, then the case's split
 * count) compared per (token, head) row.  Each test builds its own pools. */
#ifndef S2C_TESTS_DECODE_PAGED_CASE_H
#define S2C_TESTS_DECODE_PAGED_CASE_H

#include "s2c/attn_runtime.h"
#include "s2c/decode.h"
#include "s2c/pattern.h"
#include "s2c/ref.h"

#include <stdbool.h>
#include <stdint.h>

/* A stock pattern file's pattern `name` (NULL: its first; the file in
 * $S2C_PATTERNS), or attn_pattern_args(args) when file is NULL. */
s2_pattern_set *s2t_paged_pattern(s2_ctx *ctx, const char *file, const char *name, int args, const s2_pattern **p);

/* Does kv head g's group read key block n for sequence length len (n_new new tokens)? */
bool s2t_block_needed(const s2_pattern *p, int g, int64_t len, int n_new, int64_t n);

typedef struct s2t_paged {
    int B, H, HK, D, N, P;                      /* batch, heads, kv heads, head dim, new tokens, page size */
    s2_dtype dt;                                /* q and o */
    int64_t max_len, max_pages, num_pages, table_hs, table_bs;
    int64_t *lens;
    int32_t *lens32, *table;                    /* [rows][max_pages]: rows B, or B x HK per kv head */
    uint16_t *q;                                /* [B][N][H][D] */
} s2t_paged;

/* Lengths (the first max_len, the longest the lists allow; the others
 * random), shuffled distinct page ids per table row with `spare` pages
 * never referenced, q uniform in [-2, 2]. */
void s2t_paged_init(s2t_paged *pg, const s2_pattern *p, s2_dtype dt, int head_dim, int batch, int n_new,
                    int page_size, bool per_head, int64_t max_len, int spare, uint64_t *seed);
void s2t_paged_free(s2t_paged *pg);
/* Page j of sequence b's kv head g holds a key some new token reads. */
bool s2t_paged_slice_read(const s2t_paged *pg, const s2_pattern *p, int b, int g, int64_t j);
/* The page that slice is (the block table's entry). */
int32_t s2t_paged_page(const s2t_paged *pg, int b, int g, int64_t j);

/* The problem on the device: q, the pools (pool_bytes each), table and
 * lengths uploaded, o and lse allocated; *a its decode arguments
 * (contiguous bshd q, o and pools; splits and workspace left 0). */
typedef struct s2t_paged_dev {
    s2_devptr q, k, v, table, lens, o, lse, ws;
} s2t_paged_dev;
void s2t_paged_upload(s2_ctx *ctx, s2_device *dev, const s2t_paged *pg, const void *kp, const void *vp,
                      size_t pool_bytes, s2t_paged_dev *d, s2_attn_decode_args *a);
void s2t_paged_dev_free(s2_ctx *ctx, s2_device *dev, s2t_paged_dev *d);
s2_devptr s2t_upload(s2_ctx *ctx, s2_device *dev, const void *src, size_t bytes);

/* The float64 reference over pools tk, tv (any dtype s2_tensor reads):
 * ref_o [B][N][H][D], ref_lse [B][H][N], both malloc'd. */
void s2t_paged_reference(s2_ctx *ctx, const s2t_paged *pg, const s2_pattern *p, const s2_tensor *tk,
                         const s2_tensor *tv, double **ref_o, float **ref_lse);

/* Two launches of *a: split 1, then `splits` (0: the heuristic); o and lse
 * poisoned before each and compared with the reference (relative Frobenius
 * error of o per row, |lse - ref|).  used[run]: the split count in force
 * (-1: the heuristic's, more than 1).  True when both runs are within
 * o_tol and 2e-3. */
bool s2t_paged_runs(s2_ctx *ctx, s2_device *dev, s2_attn_kernel *k, const s2t_paged *pg, s2t_paged_dev *d,
                    s2_attn_decode_args *a, int splits, const double *ref_o, const float *ref_lse, double o_tol,
                    double o_err[2], double lse_err[2], int used[2]);

#endif
