/* The manifest writer: what a generated module says about itself, as
 * `key value` lines (format in include/s2c/manifest.h; parser in
 * abi/manifest_parse.c); the generator writes it, the runtime only reads. */
#include "kernel_abi.h"
#include "s2c/cache.h"
#include "s2c/manifest.h"
#include "util.h"

#include <inttypes.h>
#include <string.h>

static const char *kind_name(s2_kernel_kind k)
{
    return k == S2_KERNEL_FWD ? "fwd" : k == S2_KERNEL_BWD ? "bwd" : k == S2_KERNEL_DECODE ? "decode" : "?";
}

static const char *range_action_name(s2_range_action a)
{
    switch (a) {
    case S2_RANGE_SINK: return "sink";
    case S2_RANGE_STRIDE: return "stride";
    case S2_RANGE_DENSE: return "dense";
    case S2_RANGE_DROP: return "drop";
    }
    return "?";
}

/* Names are written as the rest of a line: they must not hold a line break. */
static bool one_line(const char *s) { return s && !strpbrk(s, "\r\n"); }

static void put_bits(s2_buf *b, const uint8_t *bits, int64_t n)
{
    /* 4 bits per hex digit, bit i of the digit = element 4*d + i */
    for (int64_t i = 0; i < n; i += 4) {
        unsigned d = 0;
        for (int j = 0; j < 4 && i + j < n; j++)
            d |= (bits[i + j] ? 1u : 0u) << j;
        s2_buf_printf(b, "%x", d);
    }
}

static void put_pattern(s2_buf *b, const s2_pattern *p)
{
    s2_buf_printf(b, "pattern %s\n", p->name ? p->name : "");
    s2_buf_printf(b, "pattern.heads %d\npattern.kv_heads %d\npattern.block_size %d\npattern.causal %d\n", p->heads,
                  p->kv_heads, p->block_size, p->causal ? 1 : 0);
    s2_buf_printf(b, "pattern.max_seq_len %" PRId64 "\npattern.vert_position %s\n", p->max_seq_len,
                  p->vert_position == S2_VERT_RELATIVE ? "relative" : "absolute");
    s2_buf_printf(b, "pattern.local %d %d\npattern.vert_stride %d\n", p->local_left, p->local_right, p->vert_stride);
    s2_buf_printf(b, "pattern.head_sliding %d %d %d\n", p->head_sliding_step, p->head_sliding_step_auto ? 1 : 0,
                  p->head_sliding_offset);
    s2_buf_printf(b, "pattern.homo_head %d\npattern.num_dense_heads %d\n", p->homo_head ? 1 : 0, p->num_dense_heads);
    for (int m = 0; m < p->num_masks; m++) {
        const s2_block_mask *mk = &p->masks[m];
        s2_buf_printf(b, "pattern.mask %d %d %" PRId64 " %" PRId64 " ", m, mk->heads, mk->rows, mk->cols);
        put_bits(b, mk->bits, (int64_t)mk->heads * mk->rows * mk->cols);
        s2_buf_puts(b, "\n");
    }
    /* rule: head dense left right stride shift mask mask_head */
    for (int q = 0; q < p->heads; q++) {
        const s2_head_rule *r = &p->rules[q];
        s2_buf_printf(b, "pattern.rule %d %d %d %d %d %" PRId64 " %d %d\n", q, r->dense ? 1 : 0, r->local_left,
                      r->local_right, r->vert_stride, r->shift, r->mask, r->mask_head);
    }
    /* range: action key_lo key_hi dist_lo dist_hi stride heads(hex bits) */
    for (int i = 0; i < p->num_ranges; i++) {
        const s2_range_rule *rr = &p->ranges[i];
        s2_buf_printf(b, "pattern.range %s %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 " %d ",
                      range_action_name(rr->action), rr->key_lo, rr->key_hi, rr->dist_lo, rr->dist_hi, rr->stride);
        put_bits(b, rr->heads, p->heads);
        s2_buf_puts(b, "\n");
    }
}

s2_status s2_manifest_format(s2_ctx *ctx, int arch, const s2_manifest_kernel *kernels, int num_kernels,
                             const s2_pattern *const *patterns, int num_patterns, char **text)
{
    if (!text || (num_kernels > 0 && !kernels) || (num_patterns > 0 && !patterns))
        return s2_fail(ctx, S2_ERR_INVALID, "manifest: null argument");
    *text = NULL;
    const char *an = s2_arch_cpu((s2_arch)arch);
    if (!an)
        return s2_fail(ctx, S2_ERR_INVALID, "manifest: invalid arch %d", arch);
    s2_buf b;
    s2_buf_init(&b);
    s2_buf_printf(&b, "s2c-manifest %d\nrequires %d.%d\ngenerator %s\narch %s\n", S2_MANIFEST_VERSION,
                  S2_MANIFEST_REQUIRES_MAJOR, S2_MANIFEST_REQUIRES_MINOR, s2_generator_id(), an);
    for (int i = 0; i < num_kernels; i++) {
        const s2_manifest_kernel *k = &kernels[i];
        if (!one_line(k->name) || !one_line(k->pattern)) {
            s2_buf_free(&b);
            return s2_fail(ctx, S2_ERR_INVALID, "manifest: kernel or pattern name missing or with a line break");
        }
        s2_buf_printf(&b, "kernel %s\nkernel.kind %s\nkernel.pattern %s\nkernel.dtype %s\nkernel.head_dim %d\n",
                      k->name, kind_name(k->spec.kind), k->pattern, s2_dtype_name(k->spec.dtype), k->spec.head_dim);
        if (k->spec.kv_dtype != 0)
            s2_buf_printf(&b, "kernel.kv_dtype %s\n", s2_dtype_name(k->spec.kv_dtype));
        s2_buf_printf(&b, "kernel.block_m %d\nkernel.block_n %d\nkernel.num_warps %d\nkernel.num_stages %d\n",
                      k->spec.block_m, k->spec.block_n, k->spec.num_warps, k->spec.num_stages);
        s2_buf_printf(&b, "kernel.threads %d\nkernel.smem %d\n", k->threads, k->smem_bytes);
        for (int j = 0; j < k->num_fns; j++) {
            const s2_kernel_record *r = &k->fns[j];
            const s2_abi_desc *abi = s2_abi_get(r->abi);
            if (!one_line(r->symbol) || strchr(r->symbol, ' ') || !s2_role_name(r->role) || !abi ||
                !s2_grid_name(r->grid)) {
                s2_buf_free(&b);
                return s2_fail(ctx, S2_ERR_INVALID, "manifest: kernel %s: a bad kernel record", k->name);
            }
            const s2_kspec *t = &r->spec;
            s2_buf_printf(&b, "kernel.fn %s %s %s %s %d %d %d %d %d %d %d %d %d %d %d\n", r->symbol,
                          s2_role_name(r->role), abi->name, s2_grid_name(r->grid), r->threads, r->smem_bytes,
                          t->block_m, t->block_n, t->num_warps, t->num_stages, t->persistent, t->bwd_wgmma,
                          t->kv_gather, t->bwd_tma, r->min_keys);
        }
    }
    for (int i = 0; i < num_patterns; i++) {
        const s2_pattern *p = patterns[i];
        if (!p || !p->rules || !one_line(p->name)) {
            s2_buf_free(&b);
            return s2_fail(ctx, S2_ERR_INVALID, "manifest: pattern %d unresolved or its name has a line break", i);
        }
        put_pattern(&b, p);
    }
    s2_buf_puts(&b, "end\n");
    if (b.oom) {
        s2_buf_free(&b);
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    }
    *text = s2_buf_steal(&b, NULL);
    return S2_OK;
}

