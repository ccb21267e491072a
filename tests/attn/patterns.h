/* Stock-like patterns shared by the attention tests (the S2 library's kwargs). */
#ifndef S2C_TEST_ATTN_PATTERNS_H
#define S2C_TEST_ATTN_PATTERNS_H

#include "s2c/pattern.h"

enum { ATTN_NUM_PATTERNS = 8 };

/* 0 causal local-stride (block 64, local 8, stride 16)
 * 1 Merge-Q (block 16, local 32, stride 16)
 * 2 bidirectional (block 64, local 3/2, stride 4)
 * 3 GQA 32/8 (block 32, local 4, stride 8)
 * 4 dense heads (block 32, last 2 kv heads dense)
 * 5 empty rows (block 16, no local window: early rows keep nothing)
 * 6 block 128 (local 2, stride 4, head offset)
 * 7 dense (block 64, stride 1: every visible block), GQA 4/2 */
static inline void attn_pattern_args(int which, s2_local_stride_args *a)
{
    s2_local_stride_args_default(a);
    switch (which) {
    case 0: a->name = "causal_l8v16"; a->num_heads = 4; a->block_size = 64; a->local_blocks = 8; a->vert_stride = 16; break;
    case 1: a->name = "mergeq_b16"; a->num_heads = 4; a->block_size = 16; a->local_blocks = 32; a->vert_stride = 16; break;
    case 2: a->name = "bidir"; a->num_heads = 4; a->block_size = 64; a->local_blocks = 3; a->local_right = 2;
            a->vert_stride = 4; a->causal = false; break;
    case 3: a->name = "gqa-32/8"; a->num_heads = 32; a->num_kv_heads = 8; a->block_size = 32; a->local_blocks = 4;
            a->vert_stride = 8; break;
    case 4: a->name = "dense2"; a->num_heads = 8; a->num_kv_heads = 4; a->block_size = 32; a->local_blocks = 2;
            a->vert_stride = 8; a->num_dense_heads = 2; break;
    case 5: a->name = "empty_rows"; a->num_heads = 4; a->block_size = 16; a->local_blocks = 0; a->vert_stride = 4;
            a->head_sliding_offset = 1; break;
    case 7: a->name = "dense_b64"; a->num_heads = 4; a->num_kv_heads = 2; a->block_size = 64; a->local_blocks = 1;
            a->vert_stride = 1; break;
    default: a->name = "b128"; a->num_heads = 4; a->block_size = 128; a->local_blocks = 2; a->vert_stride = 4;
             a->head_sliding_offset = 1; break;
    }
}

#endif
