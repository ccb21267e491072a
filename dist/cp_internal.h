/* What the executor derives from a plan on the host (dist/cp_lists.c):
 * its messages and the tables of NAME_rows that pack them per peer and sum
 * the returned dK/dV.  Private to dist/. */
#ifndef S2C_CP_INTERNAL_H
#define S2C_CP_INTERNAL_H

#include "s2c/cp.h"

/* Own token offset of key block n on rank r (-1 when r does not own it). */
int64_t s2_cp_own_row(const s2_cp_plan *plan, int rank, int64_t n, int block_size);

/* Runs of NAME_rows (s2_rows_args' table): int64 [n][2 + n_src], each
 * {dst row, rows, src row 0..n_src-1}, -1 for an absent source. */
typedef struct cp_table {
    int64_t *runs;
    int64_t n;
    int n_src;
} cp_table;

/* Where a rank's rows live, in rows of D elements: the K/V buffer (and the
 * dK/dV one) holds per (b, kv head) head_rows rows, an operation's from
 * first_row on (its recv receive slots, then own_tokens own rows); V (dV)
 * batch * kv_heads * head_rows rows after K. */
typedef struct cp_geom {
    int batch, kv_heads;
    int64_t head_rows, first_row, recv, own_tokens;
} cp_geom;

/* One operation's packing on this rank, from its plan's messages.  The
 * message to (from) peer p is one contiguous piece of the send (receive)
 * buffer: K rows then V rows, each batch entry after the other, and per
 * entry the runs in s2_cp_messages' order, so both ends agree on it.  The
 * backward sends its partial dK/dV of received blocks back in the receive
 * buffer's layout into the "return" rows of the dK/dV buffer (the send
 * buffer's layout), after dK and dV. */
typedef struct cp_pack {
    int ranks;
    int64_t *send_rows, *recv_rows;   /* [ranks]: K rows of the message to (from) peer p, all batch entries */
    int64_t *send_off, *recv_off;     /* [ranks]: its first row in the send (receive) buffer */
    int64_t send_total, recv_total;   /* the buffers' rows (K and V of every peer) */
    cp_table gather;                  /* K/V buffer -> send buffer */
    cp_table scatter;                 /* receive buffer -> K/V buffer's slots */
    cp_table ret;                     /* backward: dK/dV of the slots -> receive buffer (sent back) */
    cp_table sum[2];                  /* backward: dK (dV) buffer rows -> the caller's rows (b, t, h): the own
                                       * partial, then each peer's returned one in rank order */
} cp_pack;

s2_status s2_cp_pack_new(s2_ctx *ctx, const s2_cp_plan *plan, const s2_pattern *p, int rank, const cp_geom *g,
                         bool backward, cp_pack *out);
void s2_cp_pack_free(cp_pack *k);
/* Whether every run of t lies in src_rows and dst_rows with source 0 present (what NAME_rows would skip). */
bool s2_cp_table_ok(const cp_table *t, int64_t src_rows, int64_t dst_rows);

/* t's comm_ms and visible_comm_ms from its phases' intervals (start_ms < 0:
 * not run): the union of the communication phases (exchange, unpack, reduce), and
 * its part outside every attention phase (local, remote, combine, backward). */
void s2_cp_timeline_measure(s2_cp_timeline *t);

#endif
