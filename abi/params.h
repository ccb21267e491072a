/* Internal to s2c: every kernel ABI's parameter list, in order, written once.
 *
 * Each list is an X-macro of X(ENUM, "name", TYPE): the templates build their
 * LLVM function types and name their parameters from it (P_ENUM), the runtime
 * fills its argument arrays by it, and the AOT emitter (driver/emit_c.c)
 * writes its launchers' parameters from it.  TYPE is one of PTR (a global
 * pointer), I32, I64, F32, TMAP (a CUtensorMap by value), BYTES (a by-value
 * struct of the kernel's own).  The ABIs are documented in s2c/launch.h and
 * s2c/decode.h. */
#ifndef S2C_ABI_PARAMS_H
#define S2C_ABI_PARAMS_H

/* (batch, seq, head) strides in elements: three consecutive i64 parameters */
#define S2_ABI_STRIDES(X, E, n) X(E, n "_stride_b", I64) X(E##_S, n "_stride_s", I64) X(E##_H, n "_stride_h", I64)

/* the forward's parameters 0..24, shared by its three ABIs */
#define S2_ABI_FWD_BASE(X)                                                                                   \
    X(Q, "q", PTR) X(K, "k", PTR) X(V, "v", PTR) X(O, "o", PTR) X(LSE, "lse", PTR)                         \
    S2_ABI_STRIDES(X, QS, "q") S2_ABI_STRIDES(X, KS, "k") S2_ABI_STRIDES(X, VS, "v") S2_ABI_STRIDES(X, OS, "o") \
    X(QLEN, "q_len", I32) X(KVLEN, "kv_len", I32) X(SCALE_LOG2, "scale_log2", F32)                          \
    X(CLASS, "class_of_head", PTR) X(OFFSETS, "offsets", PTR) X(ENTRIES, "entries", PTR)                   \
    X(FIRST_Q_TILE, "first_q_tile", I32) X(Q_TILES, "q_tiles", I32)

/* S2_ABI_FWD: the mma.sync forward */
#define S2_ABI_FWD_PARAMS(X) S2_ABI_FWD_BASE(X) X(SEQINFO, "seqinfo", PTR)

/* S2_ABI_FWD_TMA: the sm_90a forward with the q, k, v tensor maps */
#define S2_ABI_FWD_MAPS(X) X(TMAP_Q, "q_map", TMAP) X(TMAP_K, "k_map", TMAP) X(TMAP_V, "v_map", TMAP)
#define S2_ABI_FWD_TMA_PARAMS(X) S2_ABI_FWD_BASE(X) S2_ABI_FWD_MAPS(X) X(SEQINFO, "seqinfo", PTR)

/* S2_ABI_FWD_TMA_PERSISTENT: the same on the persistent grid */
#define S2_ABI_FWD_WORK(X) \
    X(WORK, "work", PTR) X(NWORK, "n_work", I32) X(BATCH, "batch", I32) X(COUNTER, "counter", PTR)
#define S2_ABI_FWD_TMA_PERSISTENT_PARAMS(X) \
    S2_ABI_FWD_BASE(X) S2_ABI_FWD_MAPS(X) S2_ABI_FWD_WORK(X) X(SEQINFO, "seqinfo", PTR)

/* S2_ABI_FWD_TMA_FP8: the sm_90a forward on e4m3 q, k, v (bf16 o): as
 * S2_ABI_FWD_TMA, then the fp32 [batch][kv_heads] descales (null: 1) */
#define S2_ABI_FWD_DESCALES(X) \
    X(QDESCALE, "q_descale", PTR) X(KDESCALE, "k_descale", PTR) X(VDESCALE, "v_descale", PTR)
#define S2_ABI_FWD_TMA_FP8_PARAMS(X) S2_ABI_FWD_TMA_PARAMS(X) S2_ABI_FWD_DESCALES(X)

/* Every forward parameter by name: the runtime's values (s2_rt_fwd_vals) and the templates' enum */
#define S2_ABI_FWD_FAMILY(X) S2_ABI_FWD_TMA_PERSISTENT_PARAMS(X) S2_ABI_FWD_DESCALES(X)

/* the backward's parameters 0..50, shared by its two ABIs */
#define S2_ABI_BWD_BASE(X)                                                                                   \
    X(Q, "q", PTR) X(K, "k", PTR) X(V, "v", PTR) X(O, "o", PTR) X(DO, "d_o", PTR) X(LSE, "lse", PTR)        \
    X(DLSE, "dlse", PTR) X(DELTA, "delta", PTR) X(LSE2, "lse2", PTR)                                        \
    X(DQ, "dq", PTR) X(DK, "dk", PTR) X(DV, "dv", PTR)                                                     \
    S2_ABI_STRIDES(X, QS, "q") S2_ABI_STRIDES(X, KS, "k") S2_ABI_STRIDES(X, VS, "v") S2_ABI_STRIDES(X, OS, "o") \
    S2_ABI_STRIDES(X, DOS, "d_o") S2_ABI_STRIDES(X, DQS, "dq") S2_ABI_STRIDES(X, DKS, "dk")                \
    S2_ABI_STRIDES(X, DVS, "dv")                                                                            \
    X(QLEN, "q_len", I32) X(KVLEN, "kv_len", I32) X(SCALE_LOG2, "scale_log2", F32)                          \
    X(CLASS, "class_of_head", PTR) X(OFFSETS, "offsets", PTR) X(ENTRIES, "entries", PTR)                   \
    X(FIRST_Q_TILE, "first_q_tile", I32) X(Q_TILES, "q_tiles", I32)                                         \
    X(TCLASS, "t_class_of_head", PTR) X(TOFFSETS, "t_offsets", PTR) X(TENTRIES, "t_entries", PTR)          \
    X(KV_TILES, "kv_tiles", I32)                                                                            \
    X(DS, "ds", PTR) X(DS_HEAD, "ds_head", PTR) X(DS_MAP, "ds_map", PTR)

/* S2_ABI_BWD: every kernel of a backward module; seqinfo last, as in the forward's */
#define S2_ABI_BWD_PARAMS(X) S2_ABI_BWD_BASE(X) X(SEQINFO, "seqinfo", PTR)

/* S2_ABI_BWD_TMA: the same, with the q and do tensor maps before seqinfo */
#define S2_ABI_BWD_TMA_PARAMS(X) \
    S2_ABI_BWD_BASE(X) X(TMAP_Q, "q_map", TMAP) X(TMAP_DO, "do_map", TMAP) X(SEQINFO, "seqinfo", PTR)

/* S2_ABI_DECODE: the paged decode kernel */
#define S2_ABI_DECODE_PARAMS(X)                                                                              \
    X(Q, "q", PTR) X(K, "k_pages", PTR) X(V, "v_pages", PTR) X(O, "o", PTR) X(LSE, "lse", PTR)             \
    X(WS_O, "ws_o", PTR) X(WS_LSE, "ws_lse", PTR)                                                          \
    S2_ABI_STRIDES(X, QS, "q")                                                                              \
    X(KS, "k_stride_page", I64) X(KS_S, "k_stride_slot", I64) X(KS_H, "k_stride_h", I64)                   \
    X(VS, "v_stride_page", I64) X(VS_S, "v_stride_slot", I64) X(VS_H, "v_stride_h", I64)                   \
    S2_ABI_STRIDES(X, OS, "o")                                                                              \
    X(TABLE, "block_table", PTR) X(TBS, "table_stride_b", I64) X(THS, "table_stride_h", I64)               \
    X(SEQ_LENS, "seq_lens", PTR) X(N, "n", I32) X(PAGE, "page_size", I32) X(SCALE_LOG2, "scale_log2", F32) \
    X(CLASS, "class_of_kv_head", PTR) X(OFFSETS, "offsets", PTR) X(ENTRIES, "entries", PTR)                \
    X(QBLOCKS, "q_blocks", I32) X(SPLITS, "splits", I32) X(COUNTERS, "counters", PTR)                    \
    X(K_SCALE, "k_scale", PTR) X(V_SCALE, "v_scale", PTR)

/* S2_ABI_COMBINE: the combine kernel of a decode module (s2c/decode.h) */
#define S2_ABI_COMBINE_PARAMS(X)                                                                             \
    X(PTRS, "inputs", BYTES) X(OBASE, "o_base", PTR) X(LBASE, "lse_base", PTR)                             \
    X(OPART, "o_part", I64) X(LPART, "lse_part", I64) S2_ABI_STRIDES(X, IS, "in")                           \
    X(OUT, "out", PTR) S2_ABI_STRIDES(X, OS, "out") X(LSE_OUT, "lse_out", PTR)                               \
    X(N, "n_in", I32) X(S, "s", I32) X(H, "h", I32) X(ROWS, "rows", I32) X(SINKS, "sinks", PTR)

/* S2_ABI_SEQS: NAME_seqs of a forward module (s2c/launch.h): seqinfo[i] from
 * cu_q[i..i+1] and cu_k[i..i+1] (cu_k null: cu_q) for i < n, q_len = kv_len =
 * 0 for a sequence whose lengths are not valid (up to max_kv_len keys) */
#define S2_ABI_SEQS_PARAMS(X)                                                                                \
    X(CU_Q, "cu_q", PTR) X(CU_K, "cu_k", PTR) X(SEQINFO, "seqinfo", PTR) X(N, "n", I32)                    \
    X(MAX_KV, "max_kv_len", I32)

/* S2_ABI_ROWS: NAME_rows of a forward or backward module (s2c/decode.h,
 * s2_rows): per run of the table, rows of D elements summed over n_src
 * sources in order (fp32, rounded once) into dst rows (b, t, h) */
#define S2_ABI_ROWS_PARAMS(X)                                                                                \
    X(TABLE, "table", PTR) X(N_RUNS, "n_runs", I32) X(N_SRC, "n_src", I32) X(SRC, "src", PTR)             \
    X(SRC_ROWS, "src_rows", I64) X(DST, "dst", PTR) S2_ABI_STRIDES(X, DS, "dst") X(DST_T, "dst_tokens", I64) \
    X(DST_H, "dst_heads", I64) X(DST_ROWS, "dst_rows", I64)

/* The parameters a launch takes unchanged from its public arguments, as
 * X(ENUM, field of the args struct): the runtime copies them (S2_RT_FROM_ARGS
 * in runtime/attn_internal.h), so such a parameter is a line here, a line
 * in its ABI's list and a field of the struct, and no runtime code. */
#define S2_ABI_FWD_FROM_ARGS(X) \
    X(Q, q) X(K, k) X(V, v) X(O, o) X(LSE, lse) X(QDESCALE, q_descale) X(KDESCALE, k_descale) X(VDESCALE, v_descale)
#define S2_ABI_ROWS_FROM_ARGS(X) X(TABLE, table) X(N_SRC, n_src) X(SRC, src) X(SRC_ROWS, src_rows) X(DST, dst)
#define S2_ABI_COMBINE_FROM_ARGS(X) X(OUT, o) X(LSE_OUT, lse) X(N, n) X(H, heads) X(SINKS, sinks)

/* enum helpers: P_ENUM for a template's own parameters, or a prefix of the caller's */
#define S2_ABI_P_ENUM(e, n, t) P_##e,

#endif
