/* The compile driver: resolve a spec through the template table, name the
 * kernels, write the manifest, let each entry's template build its kernels,
 * and assemble the module (codegen). */
#include "s2c/compile.h"
#include "s2c/manifest.h"
#include "compile_internal.h"
#include "template.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

s2_status s2_kspec_resolve(s2_ctx *ctx, s2_kspec *spec, const s2_pattern *p)
{
    if (!spec || !p || !p->rules || p->heads < 1 || p->kv_heads < 1)
        return s2_fail(ctx, S2_ERR_INVALID, "spec: null spec or unresolved pattern");
    if (p->heads % p->kv_heads != 0)
        return s2_fail(ctx, S2_ERR_INVALID, "spec: %d heads are not a multiple of %d kv heads", p->heads, p->kv_heads);
    if (spec->kind != S2_KERNEL_FWD && spec->kind != S2_KERNEL_BWD && spec->kind != S2_KERNEL_DECODE)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "spec: kernel kind %d is not generated yet", (int)spec->kind);
    if (s2_dtype_check_kernel(ctx, spec->dtype, "spec") != S2_OK)
        return S2_ERR_UNSUPPORTED;
    if (!s2_arch_cpu((s2_arch)spec->arch))
        return s2_fail(ctx, S2_ERR_INVALID, "spec: invalid arch %d", spec->arch);
    /* the templates' dtypes and head dims (template.c) */
    const s2_template *t = NULL;
    s2_status st = s2_template_pick(ctx, spec, &t);
    return st == S2_OK ? t->resolve(ctx, spec, p) : st;
}

s2_status s2_kernel_spec_resolve(s2_ctx *ctx, s2_kernel_spec *spec, const s2_pattern *p)
{
    if (!spec)
        return s2_fail(ctx, S2_ERR_INVALID, "spec: null spec or unresolved pattern");
    s2_kspec k = s2_kspec_of(spec, NULL);
    s2_status st = s2_kspec_resolve(ctx, &k, p);
    if (st == S2_OK)
        *spec = s2_kspec_public(&k);
    return st;
}

/* s2_fwd_ / s2_bwd_<pattern>_<dtype>_d<D> (decode with fp8 pages: _<dtype>_kv<kv dtype>_d<D>),
 * identifier characters only. */
static void kernel_name(char *out, size_t cap, const s2_pattern *p, const s2_kspec *spec)
{
    const char *pn = p->name && p->name[0] ? p->name : "pattern";
    size_t n = (size_t)snprintf(out, cap, spec->kind == S2_KERNEL_BWD ? "s2_bwd_" : spec->kind == S2_KERNEL_DECODE ? "s2_dec_" : "s2_fwd_");
    for (const char *s = pn; *s && n + 1 < cap - (spec->kv_dtype ? 24 : 16); s++) {
        char c = *s;
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
        out[n++] = ok ? c : '_';
    }
    if (spec->kv_dtype != 0)
        snprintf(out + n, cap - n, "_%s_kv%s_d%d", s2_dtype_name(spec->dtype), s2_dtype_name(spec->kv_dtype),
                 spec->head_dim);
    else
        snprintf(out + n, cap - n, "_%s_d%d", s2_dtype_name(spec->dtype), spec->head_dim);
}

/* One pattern's kernel: its resolved spec, symbol and launch shape. */
typedef struct set_kernel {
    s2_kspec spec;
    const s2_template *tpl;      /* the template that builds it */
    char name[128];
    int n_var;                   /* its variants (NAME_w), as the template declares them */
    s2_kspec var[S2_TEMPLATE_MAX_VARIANTS];
    const char *var_name[S2_TEMPLATE_MAX_VARIANTS];   /* each one's record's symbol */
    const s2_template *var_tpl[S2_TEMPLATE_MAX_VARIANTS];
    s2_kernel_record recs[S2_ROLE_COUNT_];   /* every kernel of the entry, for the manifest */
    char syms[S2_ROLE_COUNT_][160];
} set_kernel;

/* The pattern one of whose variants is the kernel `name`, or -1. */
static int variant_of(const set_kernel *ks, int n, const char *name)
{
    for (int j = 0; j < n; j++)
        for (int v = 0; v < ks[j].n_var; v++)
            if (strcmp(name, ks[j].var_name[v]) == 0)
                return j;
    return -1;
}

/* The variants the entry's template declares, each resolved through the
 * table (one that does not resolve, by its shared memory say, is left out)
 * and recorded after the entry's kernels under its role and rule. */
static int add_variants(s2_ctx *ctx, const s2_pattern *p, const s2_kspec *spec_in, set_kernel *k, int n_rec)
{
    s2_variant v[S2_TEMPLATE_MAX_VARIANTS];
    int nv = k->tpl->variants ? k->tpl->variants(p, spec_in, &k->spec, v) : 0;
    for (int i = 0; i < nv && i < S2_TEMPLATE_MAX_VARIANTS && n_rec < S2_ROLE_COUNT_; i++) {
        if (s2_kspec_resolve(ctx, &v[i].spec, p) != S2_OK) {
            s2_ctx_clear(ctx);
            continue;
        }
        const s2_template *vt = s2_template_for(&v[i].spec);
        s2_kernel_record rec[S2_ROLE_COUNT_];
        vt->kernels(p, &v[i].spec, rec);
        k->recs[n_rec] = rec[0];
        k->recs[n_rec].role = v[i].role;
        k->recs[n_rec].min_keys = v[i].min_keys;
        k->var[k->n_var] = v[i].spec;
        k->var_tpl[k->n_var] = vt;
        k->var_name[k->n_var++] = k->syms[n_rec++];
    }
    return n_rec;
}

/* Whether record r is built once per entry (its template's build_entry):
 * a forward's NAME_seqs and NAME_combine, a forward's or backward's NAME_rows. */
static bool entry_kernel(const s2_kernel_record *r)
{
    return r->role == S2_ROLE_FWD_SEQS || r->role == S2_ROLE_ROWS ||
           (r->role == S2_ROLE_COMBINE && r->spec.kind == S2_KERNEL_FWD);
}

/* The pass that builds an entry kernel: NAME_seqs, then NAME_combine, then NAME_rows. */
static int entry_pass(s2_kernel_role r) { return r == S2_ROLE_FWD_SEQS ? 0 : r == S2_ROLE_COMBINE ? 1 : 2; }

/* Whether the kernel `name` is such an entry kernel. */
static bool seqs_of(const set_kernel *ks, int n, const char *name)
{
    for (int j = 0; j < n; j++)
        for (int r = 0; r < S2_ROLE_COUNT_ && ks[j].recs[r].symbol; r++)
            if (entry_kernel(&ks[j].recs[r]) && strcmp(name, ks[j].recs[r].symbol) == 0)
                return true;
    return false;
}

static s2_status resolve_set(s2_ctx *ctx, const s2_pattern *const *patterns, int n, const s2_kspec *spec_in,
                             set_kernel *ks, s2_manifest_kernel *mk)
{
    for (int i = 0; i < n; i++) {
        ks[i].spec = *spec_in;
        if (!patterns[i])
            return s2_fail(ctx, S2_ERR_INVALID, "compile_attention: pattern %d is null", i);
        s2_status st = s2_kspec_resolve(ctx, &ks[i].spec, patterns[i]);
        if (st != S2_OK) {
            /* name the pattern whose tile does not fit (the message is copied: s2_fail writes over it) */
            char why[512];
            snprintf(why, sizeof why, "%s", s2_ctx_message(ctx));
            return s2_fail(ctx, st, "pattern %s: %s", patterns[i]->name ? patterns[i]->name : "", why);
        }
        if (ks[i].spec.arch != ks[0].spec.arch)
            return s2_fail(ctx, S2_ERR_INVALID, "compile_attention: one module holds one arch");
        kernel_name(ks[i].name, sizeof ks[i].name, patterns[i], &ks[i].spec);
        /* pattern names differing only in non-identifier characters map to one symbol */
        for (int j = 0; j < i; j++)
            if (strcmp(ks[i].name, ks[j].name) == 0)
                return s2_fail(ctx, S2_ERR_INVALID, "patterns '%s' and '%s' both give kernel %s", patterns[j]->name,
                               patterns[i]->name, ks[i].name);
        const s2_template *t = s2_template_for(&ks[i].spec);
        ks[i].tpl = t;
        int n_rec = t->kernels(patterns[i], &ks[i].spec, ks[i].recs);
        n_rec = add_variants(ctx, patterns[i], spec_in, &ks[i], n_rec);
        for (int j = 0; j < n_rec; j++) {
            snprintf(ks[i].syms[j], sizeof ks[i].syms[j], "%s%s", ks[i].name, s2_role_suffix(ks[i].recs[j].role));
            ks[i].recs[j].symbol = ks[i].syms[j];
        }
        mk[i] = (s2_manifest_kernel){.name = ks[i].name, .pattern = patterns[i]->name ? patterns[i]->name : "",
                                     .spec = s2_kspec_public(&ks[i].spec), .threads = ks[i].spec.num_warps * 32,
                                     .smem_bytes = t->smem_bytes(patterns[i], &ks[i].spec), .fns = ks[i].recs,
                                     .num_fns = n_rec};
    }
    return S2_OK;
}

s2_status s2_compile_kspec(s2_ctx *ctx, const char *module_name, const s2_pattern *const *patterns, int n,
                          const s2_kspec *spec_in, s2_cubin_backend backend, s2_artifact **out)
{
    if (!out || !spec_in || !patterns || n < 1)
        return s2_fail(ctx, S2_ERR_INVALID, "compile_attention: null argument or no pattern");
    *out = NULL;
    set_kernel *ks = calloc((size_t)n, sizeof *ks);
    s2_manifest_kernel *mk = calloc((size_t)n, sizeof *mk);
    s2_artifact *art = NULL;
    s2_cg cg;
    memset(&cg, 0, sizeof cg);
    s2_status st = ks && mk ? S2_OK : s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    if (st == S2_OK)
        st = resolve_set(ctx, patterns, n, spec_in, ks, mk);
    if (st != S2_OK)
        goto done;

    s2_target target;
    s2_target_default(&target, (s2_arch)ks[0].spec.arch);
    art = s2_artifact_new(&target, module_name ? module_name : n == 1 ? ks[0].name : "s2_attention_set");
    if (!art) {
        st = s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
        goto done;
    }
    art->spec = s2_kspec_public(&ks[0].spec);
    art->threads_per_block = mk[0].threads;
    art->rows_per_block = ks[0].spec.block_m;
    art->smem_bytes = mk[0].smem_bytes;
    st = s2_manifest_format(ctx, ks[0].spec.arch, mk, n, patterns, n, &art->manifest);
    if (st == S2_OK)
        st = s2_cg_init(ctx, &cg, &target, art->name);
    for (int i = 0; i < n && st == S2_OK; i++)
        st = ks[i].tpl->build(ctx, &cg, patterns[i], &ks[i].spec, ks[i].name);
    for (int i = 0; i < n && st == S2_OK; i++)
        for (int v = 0; v < ks[i].n_var && st == S2_OK; v++)
            st = ks[i].var_tpl[v]->build(ctx, &cg, patterns[i], &ks[i].var[v], ks[i].var_name[v]);
    /* the entry's own helpers after the kernels the others name: every NAME_seqs, then every NAME_combine,
     * then every NAME_rows (so the kernels before them keep their PTX) */
    for (int pass = 0; pass < 3; pass++)
        for (int i = 0; i < n && st == S2_OK; i++)
            for (int r = 0; r < mk[i].num_fns && ks[i].tpl->build_entry && st == S2_OK; r++)
                if (entry_kernel(&ks[i].recs[r]) && entry_pass(ks[i].recs[r].role) == pass)
                    st = ks[i].tpl->build_entry(ctx, &cg, &ks[i].recs[r]);
    if (st == S2_OK)
        st = s2_cg_add_text_global(ctx, &cg, S2_MANIFEST_SYMBOL, art->manifest);
    if (st == S2_OK)
        st = s2_cg_finish(ctx, &cg, backend, art);
    /* the assembler lists the kernels in its own order: the primary kernels
     * first (art->kernels[0] of a one-pattern forward is its kernel),
     * variants and NAME_seqs after them */
    for (int i = 0, placed = 0; st == S2_OK && i < art->num_kernels; i++) {
        if (variant_of(ks, n, art->kernels[i].name) >= 0 || seqs_of(ks, n, art->kernels[i].name))
            continue;
        s2_kernel_info keep = art->kernels[i];
        memmove(&art->kernels[placed + 1], &art->kernels[placed], (size_t)(i - placed) * sizeof *art->kernels);
        art->kernels[placed++] = keep;
    }
    /* each kernel's launch bound, from its record */
    for (int i = 0; st == S2_OK && i < art->num_kernels; i++)
        for (int j = 0; j < n; j++)
            for (int r = 0; r < mk[j].num_fns; r++)
                if (strcmp(art->kernels[i].name, ks[j].recs[r].symbol) == 0)
                    art->kernels[i].max_threads = ks[j].recs[r].threads;
done:
    s2_cg_destroy(&cg);
    if (st == S2_OK)
        *out = art;
    else
        s2_artifact_free(art);
    free(ks);
    free(mk);
    return st;
}

s2_status s2_compile_kspec_manifest(s2_ctx *ctx, const s2_pattern *const *patterns, int n, const s2_kspec *spec_in,
                                    char **text)
{
    if (!text || !spec_in || !patterns || n < 1)
        return s2_fail(ctx, S2_ERR_INVALID, "compile_attention: null argument or no pattern");
    *text = NULL;
    set_kernel *ks = calloc((size_t)n, sizeof *ks);
    s2_manifest_kernel *mk = calloc((size_t)n, sizeof *mk);
    s2_status st = ks && mk ? S2_OK : s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    if (st == S2_OK)
        st = resolve_set(ctx, patterns, n, spec_in, ks, mk);
    if (st == S2_OK)
        st = s2_manifest_format(ctx, ks[0].spec.arch, mk, n, patterns, n, text);
    free(ks);
    free(mk);
    return st;
}

s2_status s2_compile_attention_set(s2_ctx *ctx, const char *module_name, const s2_pattern *const *patterns, int n,
                                   const s2_kernel_spec *spec, s2_cubin_backend backend, s2_artifact **out)
{
    if (!spec)
        return s2_fail(ctx, S2_ERR_INVALID, "compile_attention: null argument or no pattern");
    s2_kspec k = s2_kspec_of(spec, NULL);
    return s2_compile_kspec(ctx, module_name, patterns, n, &k, backend, out);
}

s2_status s2_compile_attention(s2_ctx *ctx, const s2_pattern *pattern, const s2_kernel_spec *spec,
                               s2_cubin_backend backend, s2_artifact **out)
{
    return s2_compile_attention_set(ctx, NULL, &pattern, 1, spec, backend, out);
}

s2_status s2_artifact_kspec(s2_ctx *ctx, const s2_artifact *art, s2_kspec *out)
{
    const char *text = art ? art->manifest : NULL;
    s2_manifest *m = NULL;
    s2_status st = text ? s2_manifest_parse(ctx, text, strlen(text), &m)
                        : s2_fail(ctx, S2_ERR_INVALID, "artifact without a manifest");
    const s2_manifest_kernel *k = st == S2_OK ? s2_manifest_kernel_at(m, 0) : NULL;
    if (k)
        *out = k->fns[0].spec;
    s2_manifest_free(m);
    return st;
}
