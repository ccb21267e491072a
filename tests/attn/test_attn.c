/* Attention kernels without a GPU: every stock-like pattern x head dim x
 * dtype x arch assembles with zero spills, the manifest survives in the
 * cubin and round-trips through the parser to the same pattern. */
#include "compile_internal.h"
#include "kernel_abi.h"
#include "pack_internal.h"
#include "patterns.h"
#include "s2c/attention.h"
#include "s2c/cache.h"
#include "s2c/codegen.h"
#include "s2c/layout.h"
#include "template.h"
#include "check_main.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const s2_arch archs[] = {S2_ARCH_SM80, S2_ARCH_SM90A};
static const int dims[] = {64, 128};
static const s2_dtype dtypes[] = {S2_DTYPE_BF16, S2_DTYPE_F16};
enum { NUM_VARIANTS = ATTN_NUM_PATTERNS * 2 * 2 * 2 };

static void assert_same_pattern(const s2_pattern *a, const s2_pattern *b)
{
    ck_assert_str_eq(a->name, b->name);
    ck_assert_int_eq(a->heads, b->heads);
    ck_assert_int_eq(a->kv_heads, b->kv_heads);
    ck_assert_int_eq(a->block_size, b->block_size);
    ck_assert_int_eq(a->causal, b->causal);
    ck_assert_int_eq(a->vert_position, b->vert_position);
    ck_assert_int_eq(a->local_left, b->local_left);
    ck_assert_int_eq(a->local_right, b->local_right);
    ck_assert_int_eq(a->vert_stride, b->vert_stride);
    ck_assert_int_eq(a->head_sliding_step, b->head_sliding_step);
    ck_assert_int_eq(a->head_sliding_offset, b->head_sliding_offset);
    ck_assert_int_eq(a->num_dense_heads, b->num_dense_heads);
    ck_assert_int_eq(a->num_ranges, b->num_ranges);
    for (int q = 0; q < a->heads; q++) {
        const s2_head_rule *x = &a->rules[q], *y = &b->rules[q];
        ck_assert_msg(x->dense == y->dense && x->local_left == y->local_left && x->local_right == y->local_right &&
                      x->vert_stride == y->vert_stride && x->shift == y->shift && x->mask == y->mask,
                      "rule of head %d differs", q);
        /* and the masks they give */
        for (int64_t m = 0; m < 40; m++)
            for (int64_t n = 0; n < 40; n++)
                ck_assert_msg(s2_block_kept(a, q, m, n) == s2_block_kept(b, q, m, n), "head %d block (%lld, %lld)",
                              q, (long long)m, (long long)n);
    }
}

/* The entry's record of role r, named NAME and the role's suffix as the assembler's kernel ki is, of ABI abi
 * and grid rule grid, launched without dynamic shared memory. */
static const s2_kernel_record *entry_record(const s2_manifest_kernel *mk, const s2_kernel_info *ki, s2_kernel_role r,
                                           s2_abi_id abi, s2_grid_rule grid)
{
    const s2_kernel_record *rec = s2_manifest_kernel_fn(mk, r);
    ck_assert_ptr_nonnull(rec);
    char name[160];
    snprintf(name, sizeof name, "%s%s", mk->name, s2_role_suffix(r));
    ck_assert_str_eq(rec->symbol, name);
    ck_assert_str_eq(ki->name, name);
    ck_assert_int_eq(rec->abi, abi);
    ck_assert_int_eq(rec->grid, grid);
    ck_assert_int_eq(rec->smem_bytes, 0);
    return rec;
}

START_TEST(assembles_without_spills_and_carries_manifest)
{
    int v = _i;
    int which = v % ATTN_NUM_PATTERNS;
    int D = dims[(v / ATTN_NUM_PATTERNS) % 2];
    s2_dtype dt = dtypes[(v / ATTN_NUM_PATTERNS / 2) % 2];
    s2_arch arch = archs[v / ATTN_NUM_PATTERNS / 4];
    s2_ctx *ctx = s2_ctx_new();
    s2_local_stride_args a;
    attn_pattern_args(which, &a);
    s2_pattern_set *set = NULL;
    ck_assert_msg(s2_pattern_from_args(ctx, &a, &set) == S2_OK, "%s", s2_ctx_message(ctx));
    const s2_pattern *p = s2_pattern_set_get(set, 0);

    s2_kspec spec = {.kind = S2_KERNEL_FWD, .dtype = dt, .head_dim = D, .arch = arch};
    s2_artifact *art = NULL;
    s2_status st = s2_compile_kspec1(ctx, p, &spec, S2_CUBIN_PTXAS, &art);
    ck_assert_msg(st == S2_OK, "%s d%d %s %s: %s", p->name, D, s2_dtype_name(dt), s2_arch_name(arch),
                  s2_ctx_message(ctx));
    s2_kspec aks;   /* the resolved spec, the template's choices included */
    ck_assert_int_eq(s2_artifact_kspec(ctx, art, &aks), S2_OK);
    /* the forward, NAME_seqs, NAME_combine and NAME_rows, and with the wide variant (sm_90a, block 64,
     * d80-d128, and up to d64 on sparse patterns) five: every one without spills */
    bool wide_expected = arch == S2_ARCH_SM90A && p->block_size == 64 &&
                         (D > 64 ? D <= 128 : !s2_pattern_is_dense(p));
    ck_assert_int_eq(art->num_kernels, wide_expected ? 5 : 4);
    const s2_kernel_info *ki = &art->kernels[0], *wi = NULL, *si = NULL, *ci = NULL, *ri = NULL;
    for (int i = 0; i < art->num_kernels; i++) {
        const s2_kernel_info *x = &art->kernels[i];
        size_t nl = strlen(x->name), sl = strlen(s2_role_suffix(S2_ROLE_FWD_WIDE));
        size_t ql = strlen(s2_role_suffix(S2_ROLE_FWD_SEQS)), cl = strlen(s2_role_suffix(S2_ROLE_COMBINE));
        size_t rl = strlen(s2_role_suffix(S2_ROLE_ROWS));
        if (nl > sl && strcmp(x->name + nl - sl, s2_role_suffix(S2_ROLE_FWD_WIDE)) == 0)
            wi = x;
        else if (nl > ql && strcmp(x->name + nl - ql, s2_role_suffix(S2_ROLE_FWD_SEQS)) == 0)
            si = x;
        else if (nl > cl && strcmp(x->name + nl - cl, s2_role_suffix(S2_ROLE_COMBINE)) == 0)
            ci = x;
        else if (nl > rl && strcmp(x->name + nl - rl, s2_role_suffix(S2_ROLE_ROWS)) == 0)
            ri = x;
        else
            ki = x;
        ck_assert_msg(x->registers > 0 && x->spill_stores == 0 && x->spill_loads == 0 && x->stack_frame == 0,
                      "%s: %d regs, spills %d/%d stack %d", x->name, x->registers, x->spill_stores, x->spill_loads,
                      x->stack_frame);
    }
    ck_assert_int_eq(wi != NULL, wide_expected);
    ck_assert_ptr_nonnull(si);
    ck_assert_int_eq(si->max_threads, 128);
    ck_assert_ptr_nonnull(ci);
    ck_assert_int_eq(ci->max_threads, 128);
    ck_assert_str_eq(art->kernels[0].name, ki->name);   /* the primary kernel first */
    printf("%-14s d%-3d %-4s %-6s bm%d bn%d w%d st%d: %3d regs, spill %d/%d, stack %d, smem %d\n", p->name, D,
           s2_dtype_name(dt), s2_arch_name(arch), art->spec.block_m, art->spec.block_n, art->spec.num_warps,
           art->spec.num_stages, ki->registers, ki->spill_stores, ki->spill_loads, ki->stack_frame, art->smem_bytes);
    ck_assert_msg(ki->registers > 0, "no resource line in the ptxas log:\n%s", art->log);
    ck_assert_msg(ki->spill_stores == 0 && ki->spill_loads == 0 && ki->stack_frame == 0,
                  "%s d%d %s %s spills: %d/%d stack %d", p->name, D, s2_dtype_name(dt), s2_arch_name(arch),
                  ki->spill_stores, ki->spill_loads, ki->stack_frame);
    char want[128];
    snprintf(want, sizeof want, "_%s_d%d", s2_dtype_name(dt), D);
    ck_assert_msg(strncmp(ki->name, "s2_fwd_", 7) == 0 && strstr(ki->name, want), "name %s", ki->name);
    /* sm_90a: the wgmma/TMA template (warp-specialised, setmaxnreg honoured,
     * no serialising fences injected by ptxas); sm_80: mma.sync/cp.async */
    bool tma = arch == S2_ARCH_SM90A;
    if (tma) {
        ck_assert_int_eq(art->spec.num_warps, 4 * (1 + art->spec.block_m / 64));
        ck_assert_ptr_nonnull(strstr(art->ptx, "wgmma.mma_async.sync.aligned.m64n"));
        ck_assert_ptr_nonnull(strstr(art->ptx, "cp.async.bulk.tensor.4d.shared::cluster.global.tile"));
        ck_assert_ptr_nonnull(strstr(art->ptx, "setmaxnreg.inc.sync.aligned.u32"));
        ck_assert_ptr_nonnull(strstr(art->ptx, ".param .align 64 .b8"));
        ck_assert_ptr_null(strstr(art->ptx, "mma.sync"));
        ck_assert_msg(!strstr(art->log, "C7508") && !strstr(art->log, "C7517") && !strstr(art->log, "C7519") &&
                      !strstr(art->log, "C7510") && !strstr(art->log, "C7515"),
                      "ptxas serialised or ignored something:\n%s", art->log);
    } else {
        ck_assert_ptr_nonnull(strstr(art->ptx, "mma.sync.aligned.m16n8k16.row.col.f32"));
        ck_assert_ptr_nonnull(strstr(art->ptx, "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"));
        ck_assert_ptr_nonnull(strstr(art->ptx, "cp.async.cg.shared.global"));
    }

    /* the manifest, from the cubin's symbol table */
    const char *text = NULL;
    size_t len = 0;
    ck_assert_msg(s2_cubin_find_manifest(ctx, art->cubin, art->cubin_size, &text, &len) == S2_OK, "%s",
                  s2_ctx_message(ctx));
    ck_assert_msg(len > 20 && strncmp(text, "s2c-manifest 5\nrequires 0.2\n", 28) == 0, "manifest text: %.*s", (int)len, text);
    s2_manifest *m = NULL;
    ck_assert_msg(s2_manifest_parse(ctx, text, len, &m) == S2_OK, "%s", s2_ctx_message(ctx));
    ck_assert_str_eq(s2_manifest_generator(m), s2_generator_id());
    ck_assert_int_eq(s2_manifest_arch(m), arch);
    ck_assert_int_eq(s2_manifest_num_kernels(m), 1);
    const s2_manifest_kernel *mk = s2_manifest_kernel_at(m, 0);
    ck_assert_str_eq(mk->name, ki->name);
    ck_assert_str_eq(mk->pattern, p->name);
    ck_assert_int_eq(mk->spec.dtype, dt);
    ck_assert_int_eq(mk->spec.head_dim, D);
    ck_assert_int_eq(mk->spec.block_m, art->spec.block_m);
    ck_assert_int_eq(mk->spec.block_n, art->spec.block_n);
    ck_assert_int_eq(mk->spec.num_warps, art->spec.num_warps);
    ck_assert_int_eq(mk->spec.num_stages, art->spec.num_stages);
    ck_assert_int_eq(mk->threads, art->threads_per_block);
    ck_assert_int_eq(mk->smem_bytes, art->smem_bytes);
    /* one record per kernel: the forward's ABI and grid, and the wide variant's own tile */
    ck_assert_int_eq(mk->num_fns, wide_expected ? 5 : 4);
    /* NAME_rows: one CTA per run of a table (ABI rows, grid runs) */
    entry_record(mk, ri, S2_ROLE_ROWS, S2_ABI_ROWS, S2_GRID_RUNS);
    /* NAME_combine: the LSE merge, the decode module's kernel (ABI combine, one row per D / 8 threads) */
    entry_record(mk, ci, S2_ROLE_COMBINE, S2_ABI_COMBINE, S2_GRID_ROWS);
    /* NAME_seqs: one thread per sequence, no shared memory */
    ck_assert_int_eq(entry_record(mk, si, S2_ROLE_FWD_SEQS, S2_ABI_SEQS, S2_GRID_SEQS)->threads, 128);
    const s2_kernel_record *fr = s2_manifest_kernel_fn(mk, S2_ROLE_FWD);
    ck_assert_ptr_nonnull(fr);
    ck_assert_str_eq(fr->symbol, mk->name);
    ck_assert_int_eq(fr->abi, !tma ? S2_ABI_FWD : aks.persistent > 0 ? S2_ABI_FWD_TMA_PERSISTENT : S2_ABI_FWD_TMA);
    ck_assert_int_eq(fr->grid, aks.persistent > 0 ? S2_GRID_PERSISTENT : S2_GRID_Q_TILES);
    ck_assert_int_eq(fr->threads, art->threads_per_block);
    ck_assert_int_eq(fr->smem_bytes, art->smem_bytes);
    ck_assert_int_eq(fr->spec.persistent, aks.persistent);
    ck_assert_int_eq(fr->spec.kv_gather, aks.kv_gather);
    /* the forward's ABIs end with the seqinfo parameter */
    const s2_abi_desc *fd = s2_abi_get(fr->abi);
    ck_assert_str_eq(fd->params[fd->num_params - 1].name, "seqinfo");
    const s2_kernel_record *wr = s2_manifest_kernel_fn(mk, S2_ROLE_FWD_WIDE);
    ck_assert_int_eq(wr != NULL, wide_expected);
    if (wi) {
        char wname[160];
        snprintf(wname, sizeof wname, "%s%s", mk->name, s2_role_suffix(S2_ROLE_FWD_WIDE));
        ck_assert_str_eq(wi->name, wname);
        ck_assert_str_eq(wr->symbol, wname);
        int wbm = D <= 64 ? 64 : 128;
        ck_assert_int_eq(wr->spec.block_m, wbm);
        ck_assert_int_eq(wr->spec.block_n, 128);
        ck_assert_int_eq(wr->spec.kv_gather, 2);
        ck_assert_int_eq(wr->spec.num_stages, 3);
        ck_assert_int_eq(wr->spec.num_warps, 4 * (1 + wbm / 64));
        ck_assert_int_eq(wr->threads, 32 * 4 * (1 + wbm / 64));
        /* the template's rule, on the variant's record alone */
        ck_assert_int_eq(wr->min_keys, 384);
        ck_assert_int_eq(fr->min_keys, 0);
        ck_assert_int_eq(wi->max_threads, 32 * 4 * (1 + wbm / 64));
        ck_assert_int_eq(wr->spec.dtype, dt);
        ck_assert_int_eq(wr->spec.head_dim, D);
        /* the persistent grid but for dense patterns */
        bool dense = s2_pattern_is_dense(p);
        ck_assert_int_eq(wr->spec.persistent, dense ? -1 : 1);
        ck_assert_int_eq(wr->abi, dense ? S2_ABI_FWD_TMA : S2_ABI_FWD_TMA_PERSISTENT);
        ck_assert_int_eq(wr->grid, dense ? S2_GRID_Q_TILES : S2_GRID_PERSISTENT);
        char *t0 = strndup(text, len);
        ck_assert_ptr_nonnull(t0);
        char line[256];
        snprintf(line, sizeof line, "\nkernel.fn %s fwd_wide %s %s %d ", wname, dense ? "fwd_tma" : "fwd_tma_persistent",
                 dense ? "q_tiles" : "persistent", 32 * 4 * (1 + wbm / 64));
        ck_assert_msg(strstr(t0, line) != NULL, "no '%s' in\n%s", line + 1, t0);
        char *eol = strchr(strstr(t0, line) + 1, '\n');
        snprintf(line, sizeof line, " %d", wr->min_keys);
        ck_assert_msg(eol && !strncmp(eol - strlen(line), line, strlen(line)), "MIN_KEYS %d not last in\n%s",
                      wr->min_keys, t0);
        free(t0);
        ck_assert_msg(wr->smem_bytes > art->smem_bytes && wr->smem_bytes <= 227 * 1024, "wide smem %d",
                      wr->smem_bytes);
    }
    ck_assert_int_eq(s2_manifest_num_patterns(m), 1);
    assert_same_pattern(p, s2_manifest_find_pattern(m, p->name));
    s2_manifest_free(m);
    s2_artifact_free(art);
    s2_pattern_set_free(set);
    s2_ctx_free(ctx);
}
END_TEST

/* The manifest of one forward kernel "kern" (mma.sync ABI, 64 x 64 tiles)
 * for pattern p, its entry naming pattern `pattern` (malloc'd text). */
static char *one_kernel_manifest(s2_ctx *ctx, int arch, const s2_pattern *p, const char *pattern)
{
    s2_kspec ks = {.dtype = S2_DTYPE_BF16, .head_dim = 64, .block_m = 64, .block_n = 64, .num_warps = 4,
                   .num_stages = 2};
    s2_kernel_record fn = {.symbol = "kern", .role = S2_ROLE_FWD, .abi = S2_ABI_FWD, .grid = S2_GRID_Q_TILES,
                           .threads = 128, .smem_bytes = 1024, .spec = ks};
    s2_manifest_kernel k = {.name = "kern", .pattern = (char *)pattern, .threads = 128, .smem_bytes = 1024,
                            .spec = s2_kspec_public(&ks), .fns = &fn, .num_fns = 1};
    char *text = NULL;
    ck_assert_int_eq(s2_manifest_format(ctx, arch, &k, 1, &p, 1, &text), S2_OK);
    return text;
}

START_TEST(manifest_rejects_damage)
{
    s2_ctx *ctx = s2_ctx_new();
    s2_local_stride_args a;
    attn_pattern_args(3, &a);
    s2_pattern_set *set = NULL;
    ck_assert_int_eq(s2_pattern_from_args(ctx, &a, &set), S2_OK);
    const s2_pattern *p = s2_pattern_set_get(set, 0);
    char *text = one_kernel_manifest(ctx, S2_ARCH_SM90A, p, p->name);
    size_t n = strlen(text);
    s2_manifest *m = NULL;
    ck_assert_int_eq(s2_manifest_parse(ctx, text, n, &m), S2_OK);
    assert_same_pattern(p, s2_manifest_pattern_at(m, 0));
    ck_assert_int_eq(s2_manifest_kernel_at(m, 0)->num_fns, 1);
    s2_manifest_free(m);
    ck_assert_ptr_nonnull(strstr(text, "\nkernel.fn kern fwd fwd q_tiles 128 1024 64 64 4 2 0 0 0 0 0\n"));
    /* damaged kernel records: each refused with a message naming the line */
    static const struct { const char *from, *to, *why; } damage[] = {
        {"kernel.fn kern fwd fwd q_tiles", "kernel.fn kern fwd bwd q_tiles", "do not fit"},      /* ABI of another kind */
        {"kernel.fn kern fwd fwd q_tiles", "kernel.fn kern fwd fwd kv_tiles", "do not fit"},     /* grid of another role */
        {"kernel.fn kern fwd fwd q_tiles", "kernel.fn kerX fwd fwd q_tiles", "symbol"},          /* not the entry's */
        {"kernel.fn kern fwd fwd q_tiles", "kernel.fn kern fwx fwd q_tiles", "unknown role"},
        {"kernel.fn kern fwd fwd q_tiles", "kernel.fx kern fwd fwd q_tiles", "unknown key"},     /* a nested unknown key */
        {"kernel.fn kern fwd fwd q_tiles 128 1024 64 64 4 2 0 0 0 0 0\n", "", "no fwd kernel"},  /* no record at all */
        {"q_tiles 128 1024 64 64 4 2 0 0 0 0", "q_tiles 128 1024 64 64 4 2 0 0 9 0", "KV_GATHER out of range (0..4): 9"},
        {"q_tiles 128 1024 64 64 4 2 0 0 0 0", "q_tiles 128 1024 64 64 4 2 0 0 0", "expected SYMBOL ROLE ABI GRID"},
        {"q_tiles 128 1024 64", "q_tiles 256 1024 64", "main kernel's launch shape"},                             /* not the entry's shape */
        {"q_tiles 128 1024 64 64 4 2 0 0 0 0 0", "q_tiles 128 1024 64 64 4 2 0 0 0 0 7", "MIN_KEYS 7 for role fwd"},
        {"s2c-manifest 5", "s2c-manifest 4", "older s2c"},
    };
    for (size_t i = 0; i < sizeof damage / sizeof damage[0]; i++) {
        char *d = malloc(n + 16);
        ck_assert_ptr_nonnull(d);
        char *at = strstr(text, damage[i].from);
        ck_assert_ptr_nonnull(at);
        size_t pre = (size_t)(at - text), fl = strlen(damage[i].from);
        snprintf(d, n + 16, "%.*s%s%s", (int)pre, text, damage[i].to, at + fl);
        ck_assert_int_eq(s2_manifest_parse(ctx, d, strlen(d), &m), S2_ERR_PARSE);
        ck_assert_ptr_null(m);
        ck_assert_msg(strstr(s2_ctx_message(ctx), damage[i].why), "damage %zu: %s", i, s2_ctx_message(ctx));
        free(d);
    }
    /* a second record of one role */
    char *twice = malloc(2 * n);
    ck_assert_ptr_nonnull(twice);
    char *fl = strstr(text, "kernel.fn ");
    char *eol = strchr(fl, '\n');
    snprintf(twice, 2 * n, "%.*s%.*s%s", (int)(eol + 1 - text), text, (int)(eol + 1 - fl), fl, eol + 1);
    ck_assert_int_eq(s2_manifest_parse(ctx, twice, strlen(twice), &m), S2_ERR_PARSE);
    ck_assert_ptr_nonnull(strstr(s2_ctx_message(ctx), "a second kernel of one role"));
    free(twice);
    /* truncated: no end line, and a missing rule */
    ck_assert_int_eq(s2_manifest_parse(ctx, text, n / 2, &m), S2_ERR_PARSE);
    ck_assert_ptr_null(m);
    char *cut = strdup(text);
    char *rule = strstr(cut, "pattern.rule 5 ");
    ck_assert_ptr_nonnull(rule);
    rule[8] = 'X'; /* pattern.Xule: an unknown key inside a pattern block */
    ck_assert_int_eq(s2_manifest_parse(ctx, cut, n, &m), S2_ERR_PARSE);
    ck_assert_msg(strstr(s2_ctx_message(ctx), "unknown key (written by a newer s2c? this runtime reads manifest "
                                               "version 5): pattern.Xule"), "%s", s2_ctx_message(ctx));
    char *rule_end = strchr(rule, '\n');
    memmove(rule, rule_end + 1, strlen(rule_end + 1) + 1); /* the line dropped: head 5 has no rule */
    ck_assert_int_eq(s2_manifest_parse(ctx, cut, strlen(cut), &m), S2_ERR_PARSE);
    ck_assert_msg(strstr(s2_ctx_message(ctx), "incomplete"), "%s", s2_ctx_message(ctx));
    /* wrong version */
    cut[13] = '9';
    ck_assert_int_eq(s2_manifest_parse(ctx, cut, strlen(cut), &m), S2_ERR_PARSE);
    /* a kernel naming an unknown pattern */
    free(cut);
    free(text);
    text = one_kernel_manifest(ctx, S2_ARCH_SM80, p, "nope");
    ck_assert_int_eq(s2_manifest_parse(ctx, text, strlen(text), &m), S2_ERR_PARSE);
    free(text);
    /* a cubin without the symbol */
    static const unsigned char junk[64] = {0x7f, 'E', 'L', 'F', 2};
    const char *t;
    size_t tl;
    ck_assert_int_ne(s2_cubin_find_manifest(ctx, junk, sizeof junk, &t, &tl), S2_OK);
    s2_pattern_set_free(set);
    s2_ctx_free(ctx);
}
END_TEST

/* Untrusted manifests: a head given two rules and another none (s2c info
 * crashed on it), masks and ranges claiming more than their lines hold, and
 * more ranges than a pattern may have: each refused with a message, before
 * any memory is taken for what the line claims; many ranges parse in linear
 * time. */
/* p packed as `expect` (a packer of ir/pack_internal.h or s2_schedule_pack) byte for byte. */
static void assert_same_packing(const s2_packed_schedule *got, const s2_packed_schedule *want, const char *what)
{
    ck_assert_msg(got->size == want->size && got->num_entries == want->num_entries &&
                  got->entries_off == want->entries_off && memcmp(got->data, want->data, want->size) == 0,
                  "%s: %zu bytes, %lld entries; want %zu, %lld", what, got->size, (long long)got->num_entries,
                  want->size, (long long)want->num_entries);
}

/* s2_manifest_schedule_pack: each kernel's schedule in the format its record
 * names (plain, gathered, owned pairs for NAME_w, the backward's kv groups),
 * the same bytes as the packers the runtime uses; a kernel that reads none,
 * an unknown symbol and a layout of another pattern are refused. */
START_TEST(schedule_packed_by_record)
{
    s2_ctx *ctx = s2_ctx_new();
    s2_local_stride_args a0, a1;
    attn_pattern_args(0, &a0);    /* block 64: NAME_w at d128 */
    attn_pattern_args(1, &a1);    /* block 16: gathered key tiles */
    s2_pattern_set *s0 = NULL, *s1 = NULL;
    ck_assert_int_eq(s2_pattern_from_args(ctx, &a0, &s0), S2_OK);
    ck_assert_int_eq(s2_pattern_from_args(ctx, &a1, &s1), S2_OK);
    const s2_pattern *pats[2] = {s2_pattern_set_get(s0, 0), s2_pattern_set_get(s1, 0)};
    for (int kind = 0; kind < 2; kind++) {
        s2_kspec in = {.kind = kind ? S2_KERNEL_BWD : S2_KERNEL_FWD, .dtype = S2_DTYPE_BF16, .head_dim = 128,
                       .arch = S2_ARCH_SM90A};
        char *text = NULL;
        ck_assert_msg(s2_compile_kspec_manifest(ctx, pats, 2, &in, &text) == S2_OK, "%s", s2_ctx_message(ctx));
        s2_manifest *m = NULL;
        ck_assert_int_eq(s2_manifest_parse(ctx, text, strlen(text), &m), S2_OK);
        int checked = 0;
        for (int e = 0; e < 2; e++) {
            const s2_manifest_kernel *k = s2_manifest_kernel_at(m, e);
            const s2_pattern *p = s2_manifest_find_pattern(m, k->pattern);
            s2_layout *lay = NULL;
            ck_assert_int_eq(s2_layout_new(ctx, p, 700, 1000, &lay), S2_OK);
            for (int f = 0; f < k->num_fns; f++) {
                const s2_kernel_record *r = &k->fns[f];
                s2_packed_schedule got = {0}, want = {0};
                int32_t lists = -1, want_lists = -2;
                s2_status st = s2_manifest_schedule_pack(ctx, k, r->symbol, lay, false, &got, &lists);
                if (r->role == S2_ROLE_FWD_SEQS || r->role == S2_ROLE_COMBINE || r->role == S2_ROLE_ROWS) {
                    /* no tile schedule */
                    ck_assert_int_eq(st, S2_ERR_INVALID);
                    continue;
                }
                ck_assert_msg(st == S2_OK, "%s: %s", r->symbol, s2_ctx_message(ctx));
                int g = r->spec.kv_gather > 1 ? r->spec.kv_gather : 1;
                s2_schedule *sc = NULL;
                ck_assert_int_eq(s2_schedule_build(ctx, lay, (s2_tile_spec){r->spec.block_m, r->spec.block_n / g},
                                                   false, &sc), S2_OK);
                bool owned = r->role == S2_ROLE_FWD_WIDE;
                ck_assert_int_eq(owned, s2_kernel_spec_owned_pairs(&r->spec));
                ck_assert_int_eq(s2_kernel_spec_owned_pairs(&r->spec) ? s2_schedule_pack_gathered_owned(ctx, sc, &want)
                                 : g > 1 ? s2_schedule_pack_gathered(ctx, sc, g, &want)
                                         : s2_schedule_pack(ctx, sc, &want), S2_OK);
                assert_same_packing(&got, &want, r->symbol);
                checked += 1 + owned + (g > 1);
                s2_schedule_free(sc);
                s2_packed_schedule_free(&got);
                s2_packed_schedule_free(&want);
                if (kind == 1) {
                    int bs = p->block_size < r->spec.block_m ? p->block_size : r->spec.block_m;
                    ck_assert_int_eq(s2_manifest_schedule_pack(ctx, k, r->symbol, lay, true, &got, &lists), S2_OK);
                    ck_assert_int_eq(s2_schedule_build(ctx, lay, (s2_tile_spec){r->spec.block_m, bs}, true, &sc), S2_OK);
                    ck_assert_int_eq(s2_schedule_pack_gathered_kv(ctx, sc, p->kv_heads, r->spec.block_m / bs, &want,
                                                                  &want_lists), S2_OK);
                    assert_same_packing(&got, &want, r->symbol);
                    ck_assert_int_eq(lists, want_lists);
                    s2_schedule_free(sc);
                    s2_packed_schedule_free(&got);
                    s2_packed_schedule_free(&want);
                } else {
                    ck_assert_int_eq(s2_manifest_schedule_pack(ctx, k, r->symbol, lay, true, &got, &lists),
                                     S2_ERR_INVALID);
                }
            }
            s2_packed_schedule got = {0};
            int32_t lists = 0;
            ck_assert_int_eq(s2_manifest_schedule_pack(ctx, k, "no_such_kernel", lay, false, &got, &lists),
                             S2_ERR_NOT_FOUND);
            const s2_manifest_kernel *other = s2_manifest_kernel_at(m, 1 - e);
            ck_assert_int_eq(s2_manifest_schedule_pack(ctx, other, other->fns[0].symbol, lay, false, &got, &lists),
                             S2_ERR_INVALID);
            ck_assert_ptr_nonnull(strstr(s2_ctx_message(ctx), "not of pattern"));
            s2_layout_free(lay);
        }
        /* forward: NAME (block 64, plain), NAME_w (owned), NAME (gathered); backward: NAME_pre, _dkdv, _dq of
         * each, block 16 gathered, and the dS kernels of block 64 */
        ck_assert_int_ge(checked, kind ? 8 : 5);
        s2_manifest_free(m);
        free(text);
    }
    s2_pattern_set_free(s0);
    s2_pattern_set_free(s1);
    s2_ctx_free(ctx);
}
END_TEST

START_TEST(manifest_untrusted_counts)
{
    s2_ctx *ctx = s2_ctx_new();
    s2_local_stride_args a;
    attn_pattern_args(3, &a);
    s2_pattern_set *set = NULL;
    ck_assert_int_eq(s2_pattern_from_args(ctx, &a, &set), S2_OK);
    const s2_pattern *p = s2_pattern_set_get(set, 0);
    ck_assert_int_ge(p->heads, 2);
    char *text = one_kernel_manifest(ctx, S2_ARCH_SM90A, p, p->name);
    size_t n = strlen(text);
    s2_manifest *m = NULL;
    /* head 1's rule line names head 0: head 0 twice, head 1 never */
    char *dup = strdup(text);
    char *r1 = strstr(dup, "\npattern.rule 1 ");
    ck_assert_ptr_nonnull(r1);
    r1[14] = '0';
    ck_assert_int_eq(s2_manifest_parse(ctx, dup, n, &m), S2_ERR_PARSE);
    ck_assert_ptr_null(m);
    ck_assert_msg(strstr(s2_ctx_message(ctx), "a second rule for one head"), "%s", s2_ctx_message(ctx));
    free(dup);
    /* what a line claims against what it holds: a 4096 x 1M x 1M mask of two digits, range heads too short */
    char *end = strstr(text, "\nend\n");
    ck_assert_ptr_nonnull(end);
    size_t head_len = (size_t)(end - text) + 1;
    static const struct { const char *line, *why; } bad[] = {
        {"pattern.mask 0 4096 1024 1024 ff\n", "bad mask"},
        {"pattern.range sink 0 1 0 1 0 f\n", "bad range heads"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        size_t cap = head_len + strlen(bad[i].line) + 8;
        char *t = malloc(cap);
        ck_assert_ptr_nonnull(t);
        snprintf(t, cap, "%.*s%send\n", (int)head_len, text, bad[i].line);
        ck_assert_int_eq(s2_manifest_parse(ctx, t, strlen(t), &m), S2_ERR_PARSE);
        ck_assert_msg(strstr(s2_ctx_message(ctx), bad[i].why), "%zu: %s", i, s2_ctx_message(ctx));
        free(t);
    }
    /* 4096 ranges parse (appends linear); one more is refused */
    char hex[S2_MAX_HEADS / 4 + 2];
    int digits = (p->heads + 3) / 4;
    memset(hex, '0', (size_t)digits);
    hex[digits] = '\0';
    char line[2 * S2_MAX_HEADS];
    int ll = snprintf(line, sizeof line, "pattern.range drop 0 1 0 1 0 %s\n", hex);
    for (int count = 4096; count <= 4097; count++) {
        size_t cap = head_len + (size_t)count * (size_t)ll + 8;
        char *t = malloc(cap);
        ck_assert_ptr_nonnull(t);
        memcpy(t, text, head_len);
        size_t at = head_len;
        for (int i = 0; i < count; i++, at += (size_t)ll)
            memcpy(t + at, line, (size_t)ll);
        memcpy(t + at, "end\n", 5);
        s2_status st = s2_manifest_parse(ctx, t, strlen(t), &m);
        if (count == 4096) {
            ck_assert_msg(st == S2_OK, "%s", s2_ctx_message(ctx));
            ck_assert_int_eq(s2_manifest_pattern_at(m, 0)->num_ranges, 4096);
            s2_manifest_free(m);
        } else {
            ck_assert_int_eq(st, S2_ERR_PARSE);
            ck_assert_msg(strstr(s2_ctx_message(ctx), "more ranges"), "%s", s2_ctx_message(ctx));
        }
        free(t);
    }
    free(text);
    s2_pattern_set_free(set);
    s2_ctx_free(ctx);
}
END_TEST

START_TEST(spec_heuristic_and_limits)
{
    s2_ctx *ctx = s2_ctx_new();
    s2_local_stride_args a;
    attn_pattern_args(1, &a);
    s2_pattern_set *set = NULL;
    ck_assert_int_eq(s2_pattern_from_args(ctx, &a, &set), S2_OK);
    const s2_pattern *p = s2_pattern_set_get(set, 0);
    s2_kspec s = {.dtype = S2_DTYPE_BF16, .head_dim = 128, .arch = S2_ARCH_SM80};
    ck_assert_int_eq(s2_kspec_resolve(ctx, &s, p), S2_OK);
    ck_assert_int_eq(s.block_m, 64);
    ck_assert_int_eq(s.num_warps, 4);
    ck_assert_int_eq(s.block_n, 16);   /* block-16 pattern: one pattern block per key tile */
    ck_assert_int_eq(s.num_stages, 2);
    s2_local_stride_args a64;
    attn_pattern_args(0, &a64);
    s2_pattern_set *set64 = NULL;
    ck_assert_int_eq(s2_pattern_from_args(ctx, &a64, &set64), S2_OK);
    s2_kspec s64 = {.dtype = S2_DTYPE_BF16, .head_dim = 128, .arch = S2_ARCH_SM90A};
    ck_assert_int_eq(s2_kspec_resolve(ctx, &s64, s2_pattern_set_get(set64, 0)), S2_OK);
    /* sm_90a: the wgmma template, producer + 1 consumer warpgroup, 3 stages */
    ck_assert_int_eq(s64.block_m, 64);
    ck_assert_int_eq(s64.block_n, 64);
    ck_assert_int_eq(s64.num_warps, 8);
    ck_assert_int_eq(s64.num_stages, 3);
    s2_kspec s128 = {.dtype = S2_DTYPE_BF16, .head_dim = 128, .block_m = 128, .arch = S2_ARCH_SM90A};
    ck_assert_int_eq(s2_kspec_resolve(ctx, &s128, s2_pattern_set_get(set64, 0)), S2_OK);
    ck_assert_int_eq(s128.num_warps, 12);
    /* sm_90a with a shape that template does not take (block_m 32, one
     * stage) keeps the mma.sync template's rule; head dim 96 is the wgmma
     * template's (test_fwd_sm90_dims: every dim) */
    s2_kspec s32 = {.dtype = S2_DTYPE_BF16, .head_dim = 128, .block_m = 32, .arch = S2_ARCH_SM90A};
    ck_assert_int_eq(s2_kspec_resolve(ctx, &s32, s2_pattern_set_get(set64, 0)), S2_OK);
    ck_assert_int_eq(s32.num_warps, 2);
    s2_kspec s96 = {.dtype = S2_DTYPE_BF16, .head_dim = 96, .arch = S2_ARCH_SM90A};
    ck_assert_int_eq(s2_kspec_resolve(ctx, &s96, s2_pattern_set_get(set64, 0)), S2_OK);
    ck_assert_int_eq(s96.num_warps, 8);
    s2_kspec s1 = {.dtype = S2_DTYPE_BF16, .head_dim = 64, .block_m = 64, .num_stages = 1, .arch = S2_ARCH_SM90A};
    ck_assert_int_eq(s2_kspec_resolve(ctx, &s1, s2_pattern_set_get(set64, 0)), S2_OK);
    ck_assert_int_eq(s1.num_warps, 4);
    s2_kspec s64n = {.dtype = S2_DTYPE_BF16, .head_dim = 64, .block_m = 64, .arch = S2_ARCH_SM90A};
    ck_assert_int_eq(s2_kspec_resolve(ctx, &s64n, s2_pattern_set_get(set64, 0)), S2_OK);
    ck_assert_int_eq(s64n.num_warps, 8);
    s2_pattern_set_free(set64);
    /* a dense pattern at d128 on sm_90a: 128 x 64 st3 (K/V tiles shared by two
     * consumer warpgroups); at d64, on sm_80, or with any tunable given: as before */
    s2_local_stride_args ad;
    attn_pattern_args(7, &ad);
    s2_pattern_set *setd = NULL;
    ck_assert_int_eq(s2_pattern_from_args(ctx, &ad, &setd), S2_OK);
    const s2_pattern *pd = s2_pattern_set_get(setd, 0);
    ck_assert(s2_pattern_is_dense(pd));
    static const struct {
        int head_dim, block_m, num_stages;
        s2_arch arch;
        int want_bm, want_stages;
    } dense_cases[] = {
        {128, 0, 0, S2_ARCH_SM90A, 128, 3},
        {128, 0, 4, S2_ARCH_SM90A, 128, 4},
        {64, 0, 0, S2_ARCH_SM90A, 64, 3},
        {128, 64, 0, S2_ARCH_SM90A, 64, 3},
        {128, 0, 0, S2_ARCH_SM80, 64, 2},
    };
    for (size_t i = 0; i < sizeof dense_cases / sizeof dense_cases[0]; i++) {
        s2_kspec sd = {.dtype = S2_DTYPE_BF16, .head_dim = dense_cases[i].head_dim,
                             .block_m = dense_cases[i].block_m, .num_stages = dense_cases[i].num_stages,
                             .arch = dense_cases[i].arch};
        ck_assert_int_eq(s2_kspec_resolve(ctx, &sd, pd), S2_OK);
        ck_assert_msg(sd.block_m == dense_cases[i].want_bm && sd.num_stages == dense_cases[i].want_stages,
                      "dense case %zu: %d x %d st%d", i, sd.block_m, sd.block_n, sd.num_stages);
        ck_assert_int_eq(sd.block_n, 64);
        if (sd.arch == S2_ARCH_SM90A) {
            ck_assert_int_eq(sd.num_warps, 4 * (1 + sd.block_m / 64));
            ck_assert_int_le(sd.kv_gather, 1);
        }
    }
    /* its wide variant stays on the plain grid (ABI fwd_tma; S2 patterns'
     * go persistent: fwd_tma_persistent, checked above) */
    s2_kspec sw = {.kind = S2_KERNEL_FWD, .dtype = S2_DTYPE_BF16, .head_dim = 128, .arch = S2_ARCH_SM90A};
    s2_artifact *aw = NULL;
    ck_assert_msg(s2_compile_kspec1(ctx, pd, &sw, S2_CUBIN_AUTO, &aw) == S2_OK, "%s", s2_ctx_message(ctx));
    const char *wt = NULL;
    size_t wl = 0;
    s2_manifest *mw = NULL;
    ck_assert_int_eq(s2_cubin_find_manifest(ctx, aw->cubin, aw->cubin_size, &wt, &wl), S2_OK);
    ck_assert_int_eq(s2_manifest_parse(ctx, wt, wl, &mw), S2_OK);
    const s2_kernel_record *wrec = s2_manifest_kernel_fn(s2_manifest_kernel_at(mw, 0), S2_ROLE_FWD_WIDE);
    ck_assert_ptr_nonnull(wrec);
    ck_assert_int_eq(wrec->spec.persistent, -1);
    s2_manifest_free(mw);
    s2_artifact_free(aw);
    s2_pattern_set_free(setd);
    /* the sparse ones are not dense: the local-stride pattern, and dense heads mixed with sparse ones */
    ck_assert(!s2_pattern_is_dense(p));
    s2_local_stride_args amix;
    attn_pattern_args(4, &amix);
    s2_pattern_set *setm = NULL;
    ck_assert_int_eq(s2_pattern_from_args(ctx, &amix, &setm), S2_OK);
    ck_assert(!s2_pattern_is_dense(s2_pattern_set_get(setm, 0)));
    s2_pattern_set_free(setm);
    ck_assert(!s2_pattern_is_dense(NULL));
    s2_kspec t = {.dtype = S2_DTYPE_BF16, .head_dim = 64, .block_m = 128};
    ck_assert_int_eq(s2_kspec_resolve(ctx, &t, p), S2_OK);
    ck_assert_int_eq(t.num_warps, 8);
    /* block 16: 128 x 128 tile = 64 sub-blocks is the limit, fine */
    t.block_n = 128;
    ck_assert_int_eq(s2_kspec_resolve(ctx, &t, p), S2_OK);
    s2_kspec u = {.dtype = S2_DTYPE_BF16, .head_dim = 64, .block_m = 64, .num_warps = 2};
    ck_assert_int_eq(s2_kspec_resolve(ctx, &u, p), S2_ERR_UNSUPPORTED);
    s2_kspec f32 = {.dtype = S2_DTYPE_F32, .head_dim = 64};   /* the fp32 forward (fwd_tf32) */
    ck_assert_int_eq(s2_kspec_resolve(ctx, &f32, p), S2_OK);
    s2_kspec d72 = {.dtype = S2_DTYPE_F16, .head_dim = 72};   /* not a multiple of 16 */
    ck_assert_int_eq(s2_kspec_resolve(ctx, &d72, p), S2_ERR_UNSUPPORTED);
    s2_kspec big = {.dtype = S2_DTYPE_F16, .head_dim = 128, .block_n = 128, .num_stages = 4, .arch = S2_ARCH_SM80};
    ck_assert_int_eq(s2_kspec_resolve(ctx, &big, p), S2_ERR_UNSUPPORTED);
    s2_pattern_set_free(set);
    s2_ctx_free(ctx);
}
END_TEST

/* The mma.sync forward's head dims (every multiple of 16 to 256) and its
 * tiles past d128: 32-key tiles, one stage where two CTAs of two stages
 * exceed the arch's shared memory; given tunables are kept. */
START_TEST(fwd_head_dims_tiles)
{
    s2_ctx *ctx = s2_ctx_new();
    s2_pattern_set *sets[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++) {
        s2_local_stride_args a;
        attn_pattern_args(i, &a);   /* 0: block 64, 1: block 16 */
        ck_assert_int_eq(s2_pattern_from_args(ctx, &a, &sets[i]), S2_OK);
    }
    static const struct {
        int pattern, head_dim;
        s2_arch arch;
        int block_n, num_stages;   /* given (0: heuristic) */
        int want_bn, want_stages;  /* 0: refused */
    } cases[] = {
        {0, 16, S2_ARCH_SM80, 0, 0, 64, 2},    {0, 48, S2_ARCH_SM80, 0, 0, 64, 2},
        {0, 112, S2_ARCH_SM90, 0, 0, 64, 2},   {0, 144, S2_ARCH_SM80, 0, 0, 32, 2},
        {0, 208, S2_ARCH_SM80, 0, 0, 32, 2},   {0, 224, S2_ARCH_SM80, 0, 0, 32, 1},
        {0, 256, S2_ARCH_SM80, 0, 0, 32, 1},   {0, 256, S2_ARCH_SM90, 0, 0, 32, 2},
        {0, 256, S2_ARCH_SM80, 0, 3, 32, 3},   {0, 256, S2_ARCH_SM80, 64, 0, 64, 2},
        {1, 256, S2_ARCH_SM80, 0, 0, 16, 2},   {0, 256, S2_ARCH_SM80, 128, 2, 0, 0},
        {0, 272, S2_ARCH_SM80, 0, 0, 0, 0},    {0, 8, S2_ARCH_SM80, 0, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const s2_pattern *p = s2_pattern_set_get(sets[cases[i].pattern], 0);
        s2_kspec s = {.kind = S2_KERNEL_FWD, .dtype = S2_DTYPE_F16, .head_dim = cases[i].head_dim,
                      .arch = cases[i].arch, .block_n = cases[i].block_n, .num_stages = cases[i].num_stages};
        s2_status st = s2_kspec_resolve(ctx, &s, p);
        if (!cases[i].want_bn) {
            ck_assert_msg(st == S2_ERR_UNSUPPORTED, "case %zu: d%d resolved", i, cases[i].head_dim);
            continue;
        }
        ck_assert_msg(st == S2_OK, "case %zu: %s", i, s2_ctx_message(ctx));
        ck_assert_msg(s.block_m == 64 && s.num_warps == 4 && s.block_n == cases[i].want_bn &&
                          s.num_stages == cases[i].want_stages,
                      "case %zu d%d: %d x %d w%d st%d", i, s.head_dim, s.block_m, s.block_n, s.num_warps,
                      s.num_stages);
        ck_assert_int_le(s2_fwd_smem_bytes(p, &s), s2_template_smem_limit(s.arch));
    }
    s2_pattern_set_free(sets[0]);
    s2_pattern_set_free(sets[1]);
    s2_ctx_free(ctx);
}
END_TEST

/* The mma.sync forward at head dims that are not a multiple of 32 (a lone
 * last k-step) and past d128 (Q read from shared memory) assembles without
 * spills, with exactly the tensor-core products its tile needs: BN/8 x D/16
 * for Q·Kᵀ and BN/16 x D/8 for P·V, none padded to 32 columns. */
START_TEST(fwd_head_dims_assemble)
{
    static const struct {
        int pattern, head_dim;
        s2_arch arch;
    } cases[] = {{0, 48, S2_ARCH_SM80}, {1, 80, S2_ARCH_SM90}, {0, 192, S2_ARCH_SM80}, {0, 256, S2_ARCH_SM90},
                 {1, 208, S2_ARCH_SM80}};
    int i = _i;
    s2_ctx *ctx = s2_ctx_new();
    s2_local_stride_args a;
    attn_pattern_args(cases[i].pattern, &a);
    s2_pattern_set *set = NULL;
    ck_assert_int_eq(s2_pattern_from_args(ctx, &a, &set), S2_OK);
    const s2_pattern *p = s2_pattern_set_get(set, 0);
    s2_kspec spec = {.kind = S2_KERNEL_FWD, .dtype = i % 2 ? S2_DTYPE_BF16 : S2_DTYPE_F16,
                     .head_dim = cases[i].head_dim, .arch = cases[i].arch};
    s2_artifact *art = NULL;
    ck_assert_msg(s2_compile_kspec1(ctx, p, &spec, S2_CUBIN_PTXAS, &art) == S2_OK, "%s", s2_ctx_message(ctx));
    const s2_kernel_info *ki = &art->kernels[0];
    printf("fwd d%-3d %-4s %-6s bm%d bn%d st%d: %3d regs, spill %d/%d, stack %d, smem %d\n", cases[i].head_dim,
           s2_dtype_name(spec.dtype), s2_arch_name(cases[i].arch), art->spec.block_m, art->spec.block_n,
           art->spec.num_stages, ki->registers, ki->spill_stores, ki->spill_loads, ki->stack_frame, art->smem_bytes);
    ck_assert_msg(ki->registers > 0 && ki->spill_stores == 0 && ki->spill_loads == 0 && ki->stack_frame == 0,
                  "d%d %s: %d regs, spills %d/%d stack %d", cases[i].head_dim, s2_arch_name(cases[i].arch),
                  ki->registers, ki->spill_stores, ki->spill_loads, ki->stack_frame);
    int mma = 0, D = cases[i].head_dim, BN = art->spec.block_n;
    for (const char *t = art->ptx; (t = strstr(t, "mma.sync.aligned.m16n8k16")) != NULL; t++)
        mma++;
    ck_assert_msg(mma == BN / 8 * (D / 16) + BN / 16 * (D / 8), "d%d bn%d: %d mma.sync in the PTX", D, BN, mma);
    s2_artifact_free(art);
    s2_pattern_set_free(set);
    s2_ctx_free(ctx);
}
END_TEST

/* fp8 (rows of the dtype table no template takes): every template's accepts
 * refuses it where it takes the same spec in bf16, and the spec resolver
 * (internal and public) names the dtype. */
/* e4m3 is taken by its forward entry only (fwd_wgmma_fp8); e5m2 by none. */
START_TEST(fp8_refused_by_every_template)
{
    static const s2_kernel_kind kinds[] = {S2_KERNEL_FWD, S2_KERNEL_BWD, S2_KERNEL_DECODE};
    static const s2_dtype fp8[] = {S2_DTYPE_E4M3, S2_DTYPE_E5M2};
    for (int t = 0; t < s2_template_count(); t++) {
        if (!s2_template_at(t)->accepts)   /* asked by name only (the row softmax) */
            continue;
        bool fp8_entry = strcmp(s2_template_at(t)->name, "fwd_wgmma_fp8") == 0;
        int took_own = 0;
        /* the fp32 entry takes f32 only, the fp8 one e4m3 only */
        unsigned dts = s2_template_at(t)->dtypes;
        s2_dtype own = dts & S2_TEMPLATE_DTYPE(S2_DTYPE_BF16) ? S2_DTYPE_BF16
                       : dts & S2_TEMPLATE_DTYPE(S2_DTYPE_F32) ? S2_DTYPE_F32 : S2_DTYPE_E4M3;
        for (int k = 0; k < 3; k++)
            for (int a = 0; a < 2; a++)
                for (int d = 64; d <= 128; d += 64) {
                    s2_kspec s = {.kind = kinds[k], .dtype = own, .head_dim = d, .arch = archs[a]};
                    took_own += s2_template_at(t)->accepts(&s);
                    for (int f = 0; f < 2; f++) {
                        s.dtype = fp8[f];
                        bool want = fp8_entry && f == 0 && kinds[k] == S2_KERNEL_FWD;
                        ck_assert_msg(s2_template_at(t)->accepts(&s) == want, "template %s %s %s", s2_template_at(t)->name,
                                      want ? "refuses" : "takes", s2_dtype_name(fp8[f]));
                    }
                }
        ck_assert_msg(took_own > 0, "template %s took no spec of its own dtype", s2_template_at(t)->name);
    }
    s2_ctx *ctx = s2_ctx_new();
    s2_local_stride_args a;
    attn_pattern_args(0, &a);
    s2_pattern_set *set = NULL;
    ck_assert_int_eq(s2_pattern_from_args(ctx, &a, &set), S2_OK);
    s2_kspec ks = {.dtype = S2_DTYPE_E5M2, .head_dim = 128, .arch = S2_ARCH_SM90A};
    ck_assert_int_eq(s2_kspec_resolve(ctx, &ks, s2_pattern_set_get(set, 0)), S2_ERR_UNSUPPORTED);
    ck_assert_str_eq(s2_ctx_message(ctx), "spec: fp8 e5m2 is not supported by any template yet");
    s2_kernel_spec pub = {.kind = S2_KERNEL_DECODE, .dtype = S2_DTYPE_E5M2, .head_dim = 64};
    ck_assert_int_eq(s2_kernel_spec_resolve(ctx, &pub, s2_pattern_set_get(set, 0)), S2_ERR_UNSUPPORTED);
    ck_assert_str_eq(s2_ctx_message(ctx), "spec: fp8 e5m2 is not supported by any template yet");
    ck_assert_int_eq(pub.block_m, 0); /* left as given */
    /* e4m3 decode and backward: no template of that kind takes it */
    s2_kspec dec = {.kind = S2_KERNEL_DECODE, .dtype = S2_DTYPE_E4M3, .head_dim = 64, .arch = S2_ARCH_SM90A};
    ck_assert_int_eq(s2_kspec_resolve(ctx, &dec, s2_pattern_set_get(set, 0)), S2_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(s2_ctx_message(ctx), "dtype e4m3"));
    s2_pattern_set_free(set);
    s2_ctx_free(ctx);
}
END_TEST

/* e4m3: the sm_90a wgmma forward's fp8 path (ABI fwd_tma_fp8): default
 * tiles by block size, NAME and NAME_seqs only, k32 e4m3 wgmma, the P
 * conversion and the producer's byte permutes in the PTX, no spills; other
 * archs, persistent grids and key tiles other than 64 or 128 refused. */
START_TEST(e4m3_forward_on_wgmma)
{
    static const struct { int pattern, d, bm, bn, gather; } want[] = {
        {0, 128, 128, 128, 2}, {0, 64, 128, 128, 2}, {0, 256, 128, 64, 1}, {1, 128, 128, 64, 4}, {3, 128, 128, 128, 4},
    };
    s2_ctx *ctx = s2_ctx_new();
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        s2_local_stride_args a;
        attn_pattern_args(want[i].pattern, &a);
        s2_pattern_set *set = NULL;
        ck_assert_int_eq(s2_pattern_from_args(ctx, &a, &set), S2_OK);
        const s2_pattern *p = s2_pattern_set_get(set, 0);
        s2_kspec spec = {.kind = S2_KERNEL_FWD, .dtype = S2_DTYPE_E4M3, .head_dim = want[i].d, .arch = S2_ARCH_SM90A};
        const s2_template *t = s2_template_for(&spec);
        ck_assert_ptr_nonnull(t);
        ck_assert_str_eq(t->name, "fwd_wgmma_fp8");
        s2_kspec r = spec;
        ck_assert_msg(s2_kspec_resolve(ctx, &r, p) == S2_OK, "%s", s2_ctx_message(ctx));
        ck_assert_int_eq(r.block_m, want[i].bm);
        ck_assert_int_eq(r.block_n, want[i].bn);
        ck_assert_int_eq(r.kv_gather, want[i].gather);
        ck_assert_int_eq(r.persistent, -1);
        if (i < 4) {   /* one of each tile shape through ptxas */
            s2_artifact *art = NULL;
            ck_assert_msg(s2_compile_kspec1(ctx, p, &spec, S2_CUBIN_PTXAS, &art) == S2_OK, "d%d: %s", want[i].d,
                          s2_ctx_message(ctx));
            ck_assert_int_eq(art->num_kernels, 2);   /* NAME, NAME_seqs: no 16-bit LSE merge */
            for (int j = 0; j < art->num_kernels; j++) {
                const s2_kernel_info *x = &art->kernels[j];
                ck_assert_msg(x->registers > 0 && x->spill_stores == 0 && x->spill_loads == 0, "%s: spills %d/%d",
                              x->name, x->spill_stores, x->spill_loads);
            }
            char mma[96];
            snprintf(mma, sizeof mma, "wgmma.mma_async.sync.aligned.m64n%dk32.f32.e4m3.e4m3", r.block_n);
            ck_assert_ptr_nonnull(strstr(art->ptx, mma));   /* S = Q·Kᵀ */
            snprintf(mma, sizeof mma, "wgmma.mma_async.sync.aligned.m64n%dk32.f32.e4m3.e4m3", want[i].d);
            ck_assert_ptr_nonnull(strstr(art->ptx, mma));   /* O += P·Vᵀᵀ, N = D */
            ck_assert_ptr_null(strstr(art->ptx, "k16.f32"));
            ck_assert_ptr_nonnull(strstr(art->ptx, "cvt.rn.satfinite.e4m3x2.f32"));
            ck_assert_ptr_nonnull(strstr(art->ptx, "prmt.b32"));
            ck_assert_ptr_nonnull(strstr(art->ptx, "fence.proxy.async.shared::cta"));
            ck_assert_ptr_nonnull(strstr(art->ptx, "cvt.rn.bf16x2.f32"));   /* o in bf16 */
            ck_assert_ptr_nonnull(strstr(art->manifest, "fwd_tma_fp8"));
            s2_artifact_free(art);
        }
        s2_pattern_set_free(set);
    }
    s2_local_stride_args a;
    attn_pattern_args(0, &a);
    s2_pattern_set *set = NULL;
    ck_assert_int_eq(s2_pattern_from_args(ctx, &a, &set), S2_OK);
    const s2_pattern *p = s2_pattern_set_get(set, 0);
    s2_kspec bad[] = {{.kind = S2_KERNEL_FWD, .dtype = S2_DTYPE_E4M3, .head_dim = 128, .arch = S2_ARCH_SM80},
                      {.kind = S2_KERNEL_FWD, .dtype = S2_DTYPE_E4M3, .head_dim = 128, .arch = S2_ARCH_SM90A, .persistent = 1},
                      {.kind = S2_KERNEL_FWD, .dtype = S2_DTYPE_E4M3, .head_dim = 128, .arch = S2_ARCH_SM90A, .block_n = 32},
                      {.kind = S2_KERNEL_FWD, .dtype = S2_DTYPE_E4M3, .head_dim = 80, .arch = S2_ARCH_SM90A}};
    static const char *const msg[] = {"sm_90a only", "no persistent grid", "block_n 64 or 128", "head_dim 80"};
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(s2_kspec_resolve(ctx, &bad[i], p), S2_ERR_UNSUPPORTED);
        ck_assert_msg(strstr(s2_ctx_message(ctx), msg[i]), "%s", s2_ctx_message(ctx));
    }
    s2_pattern_set_free(set);
    s2_ctx_free(ctx);
}
END_TEST

/* fp32 tensors: the fwd_tf32 entry builds the forward (the dtype row's
 * m16n8k8 tf32 mma, fp32 stores), NAME and NAME_seqs, without spills on both
 * archs at every head dim step the tiling allows; backward and decode
 * refuse f32 naming the dtype. */
START_TEST(fp32_forward_on_tf32)
{
    static const int fdims[] = {16, 32, 48, 64, 128, 192, 256};
    s2_ctx *ctx = s2_ctx_new();
    ck_assert_int_eq(s2_dtype_info_of(S2_DTYPE_F32)->mma, S2_MMA_TF32);
    for (int pi = 0; pi < 2; pi++) {   /* causal block 64; Merge-Q block 16 */
        s2_local_stride_args a;
        attn_pattern_args(pi, &a);
        s2_pattern_set *set = NULL;
        ck_assert_int_eq(s2_pattern_from_args(ctx, &a, &set), S2_OK);
        const s2_pattern *p = s2_pattern_set_get(set, 0);
        for (int ar = 0; ar < 2; ar++)
            for (size_t di = 0; di < sizeof fdims / sizeof fdims[0]; di++) {
                if (pi == 1 && fdims[di] != 64 && fdims[di] != 128)
                    continue;
                s2_kspec spec = {.kind = S2_KERNEL_FWD, .dtype = S2_DTYPE_F32, .head_dim = fdims[di], .arch = archs[ar]};
                const s2_template *t = s2_template_for(&spec);
                ck_assert_ptr_nonnull(t);
                ck_assert_str_eq(t->name, "fwd_tf32");
                s2_artifact *art = NULL;
                ck_assert_msg(s2_compile_kspec1(ctx, p, &spec, S2_CUBIN_PTXAS, &art) == S2_OK, "d%d %s: %s",
                              fdims[di], s2_arch_name(archs[ar]), s2_ctx_message(ctx));
                s2_kspec aks;
                ck_assert_int_eq(s2_artifact_kspec(ctx, art, &aks), S2_OK);
                ck_assert_int_eq(aks.block_m, 64);
                ck_assert_int_eq(aks.block_n % 16, 0);
                ck_assert_int_eq(aks.persistent, 0);
                ck_assert_int_eq(art->num_kernels, 2);   /* NAME, NAME_seqs: no 16-bit LSE merge */
                for (int i = 0; i < art->num_kernels; i++) {
                    const s2_kernel_info *x = &art->kernels[i];
                    ck_assert_msg(x->registers > 0 && x->spill_stores == 0 && x->spill_loads == 0, "%s: spills %d/%d",
                                  x->name, x->spill_stores, x->spill_loads);
                }
                ck_assert_ptr_nonnull(strstr(art->ptx, "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"));
                /* rounded to nearest: ties to even where cvt.rn.tf32 exists (sm_90), else ties away */
                bool rn = archs[ar] != S2_ARCH_SM80;
                ck_assert_ptr_nonnull(strstr(art->ptx, rn ? "cvt.rn.tf32.f32" : "cvt.rna.tf32.f32"));
                ck_assert_ptr_null(strstr(art->ptx, rn ? "cvt.rna.tf32.f32" : "cvt.rn.tf32.f32"));
                ck_assert_ptr_null(strstr(art->ptx, "m16n8k16"));
                ck_assert_ptr_null(strstr(art->ptx, "wgmma"));
                /* V's B fragments of four (two) n-tiles a load; O's rows as 16-byte groups */
                ck_assert_ptr_nonnull(strstr(art->ptx, fdims[di] % 32 ? "ld.shared.v2.b32" : "ld.shared.v4.b32"));
                ck_assert_ptr_nonnull(strstr(art->ptx, "st.global.v4.b32"));
                s2_artifact_free(art);
            }
        s2_kspec b = {.kind = S2_KERNEL_BWD, .dtype = S2_DTYPE_F32, .head_dim = 64, .arch = S2_ARCH_SM90A};
        ck_assert_int_eq(s2_kspec_resolve(ctx, &b, p), S2_ERR_UNSUPPORTED);
        ck_assert_ptr_nonnull(strstr(s2_ctx_message(ctx), "dtype f32"));
        s2_kspec dec = {.kind = S2_KERNEL_DECODE, .dtype = S2_DTYPE_F32, .head_dim = 64, .arch = S2_ARCH_SM80};
        ck_assert_int_eq(s2_kspec_resolve(ctx, &dec, p), S2_ERR_UNSUPPORTED);
        s2_kspec wide = {.kind = S2_KERNEL_FWD, .dtype = S2_DTYPE_F32, .head_dim = 64, .arch = S2_ARCH_SM90A,
                         .persistent = 1};
        ck_assert_int_eq(s2_kspec_resolve(ctx, &wide, p), S2_ERR_UNSUPPORTED);
        s2_pattern_set_free(set);
    }
    s2_ctx_free(ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("attn");
    TCase *tc = tcase_create("fwd");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, assembles_without_spills_and_carries_manifest, 0, NUM_VARIANTS);
    tcase_add_test(tc, manifest_rejects_damage);
    tcase_add_test(tc, manifest_untrusted_counts);
    tcase_add_test(tc, schedule_packed_by_record);
    tcase_add_test(tc, spec_heuristic_and_limits);
    tcase_add_test(tc, fp8_refused_by_every_template);
    tcase_add_test(tc, fwd_head_dims_tiles);
    tcase_add_loop_test(tc, fwd_head_dims_assemble, 0, 5);
    tcase_add_test(tc, fp32_forward_on_tf32);
    tcase_add_test(tc, e4m3_forward_on_wgmma);
    suite_add_tcase(s, tc);
    return s2t_run_suite(s);
}
