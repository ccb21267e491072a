/* What the executor derives from a plan on the host (dist/cp_lists.c):
 * its messages and the copies that build and unpack the reduce-scatter's
 * segments of dK/dV.  Private to dist/. */
#ifndef S2C_CP_INTERNAL_H
#define S2C_CP_INTERNAL_H

#include "s2c/cp.h"

/* Rows (tokens) of one kv head, copied from src to dst: for a gather of
 * received blocks src counts from slot 0 of the receive buffer, for the
 * owner's own rows from its first own token; dst (or src, unpacking) from
 * the start of segment seg of batch entry 0 (add b * seg_batch_rows[seg]). */
typedef struct cp_copy {
    int seg, kv_head;
    int64_t src, dst, rows;
} cp_copy;

typedef struct cp_grad_map {
    int ranks;
    int64_t *seg_batch_rows;     /* [ranks]: owner o's segment rows per batch entry */
    int64_t seg_rows;            /* one segment: batch * the most of seg_batch_rows */
    cp_copy *partial;            /* this rank's received blocks into the owners' segments */
    int64_t n_partial;
    cp_copy *own;                /* its own rows of blocks others read, into its segment */
    int64_t n_own;
} cp_grad_map;

/* Own token offset of key block n on rank r (-1 when r does not own it). */
int64_t s2_cp_own_row(const s2_cp_plan *plan, int rank, int64_t n, int block_size);
s2_status s2_cp_grad_map_new(s2_ctx *ctx, const s2_cp_plan *plan, const s2_pattern *p, int rank, int batch,
                             cp_grad_map *out);
void s2_cp_grad_map_free(cp_grad_map *m);

/* t's comm_ms and visible_comm_ms from its phases' intervals (start_ms < 0:
 * not run): the union of the communication phases (exchange, reduce), and
 * its part outside every attention phase (local, remote, combine, backward). */
void s2_cp_timeline_measure(s2_cp_timeline *t);

#endif
