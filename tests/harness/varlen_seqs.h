/* What the variable-length GPU tests derive from a batch's sequence records
 * (s2_attn_seq): the reference's records and the query rows a launch writes. */
#ifndef S2C_TEST_VARLEN_SEQS_H
#define S2C_TEST_VARLEN_SEQS_H

#include "s2c/attn_runtime.h"
#include "s2c/ref.h"

#include <stdint.h>
#include <string.h>

/* The float64 reference's records of the n sequences. */
static inline void s2t_ref_seqs(const s2_attn_seq *seqs, int n, s2_ref_seq *rs)
{
    for (int i = 0; i < n; i++)
        rs[i] = (s2_ref_seq){seqs[i].q_start, seqs[i].q_len, seqs[i].k_start, seqs[i].kv_len};
}

/* mine[r] = 1 for the query rows of a sequence, 0 for the other rows (of
 * rows): the rows a launch writes, the rest stay poison. */
static inline void s2t_seq_rows(const s2_attn_seq *seqs, int n, uint8_t *mine, int64_t rows)
{
    memset(mine, 0, (size_t)rows);
    for (int i = 0; i < n; i++)
        memset(mine + seqs[i].q_start, 1, (size_t)seqs[i].q_len);
}

#endif
