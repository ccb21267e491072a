/* s2c compile: attention modules as cubin, PTX, IR or AOT C sources. */
#include "compile_internal.h"
#include "dtype.h"
#include "kernel_abi.h"
#include "cli.h"
#include "launch_facts.h"
#include "s2c/aot.h"
#include "s2c/attention.h"
#include "s2c/codegen.h"
#include "s2c/kv_evict.h"
#include "s2c/layout.h"
#include "s2c/pattern.h"
#include "util.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- compile ---------------------------------------------------------------- */

typedef enum { EMIT_CUBIN, EMIT_C, EMIT_PTX, EMIT_LL } emit_kind;

static int parse_emit(const char *text, emit_kind *e)
{
    static const char *const names[] = {"cubin", "c", "ptx", "ll"};
    for (int i = 0; i < 4; i++)
        if (strcmp(text, names[i]) == 0) {
            *e = (emit_kind)i;
            return 0;
        }
    return -1;
}

static int parse_backend(const char *text, s2_cubin_backend *b)
{
    if (strcmp(text, "auto") == 0)
        *b = S2_CUBIN_AUTO;
    else if (strcmp(text, "ptxas") == 0)
        *b = S2_CUBIN_PTXAS;
    else if (strcmp(text, "nvjitlink") == 0)
        *b = S2_CUBIN_NVJITLINK;
    else
        return -1;
    return 0;
}

/* OUT's file name without its extension as a C identifier (other characters
 * become '_', a leading digit gets a '_' in front): the module name of the
 * AOT files, dumps and overrides. */
static char *module_ident(const char *out)
{
    const char *base = strrchr(out, '/');
    base = base ? base + 1 : out;
    const char *dot = strrchr(base, '.');
    size_t n = dot && dot != base ? (size_t)(dot - base) : strlen(base);
    char *id = malloc(n + 2);
    if (!id)
        return NULL;
    size_t j = 0;
    if (n == 0 || isdigit((unsigned char)base[0]))
        id[j++] = '_';
    for (size_t i = 0; i < n; i++)
        id[j++] = isalnum((unsigned char)base[i]) ? base[i] : '_';
    id[j] = '\0';
    return id;
}

/* OUT's directory: "." when it names none. */
static char *out_dir(const char *out)
{
    const char *slash = strrchr(out, '/');
    if (!slash)
        return strdup(".");
    if (slash == out)
        return strdup("/");
    char *d = malloc((size_t)(slash - out) + 1);
    if (d) {
        memcpy(d, out, (size_t)(slash - out));
        d[slash - out] = '\0';
    }
    return d;
}

/* Registers and spills as the assembler reported them, one line per kernel. */
static void print_resources(const s2_artifact *art)
{
    if (art->log && art->log[0])
        fputs(art->log, stderr);
    for (int k = 0; k < art->num_kernels; k++) {
        const s2_kernel_info *ki = &art->kernels[k];
        fprintf(stderr, "%s: %d registers, %d bytes spill stores, %d bytes spill loads, %d bytes stack, "
                "%d bytes static smem, via %s\n", ki->name, ki->registers, ki->spill_stores, ki->spill_loads,
                ki->stack_frame, ki->shared_static, s2_cubin_backend_name(art->backend_used));
    }
}

/* Launcher and symbol names of one AOT kernel (backward parts have suffixes). */
typedef struct aot_names {
    char name[256], symbol[256];
} aot_names;

/* The AOT launcher ABI of a manifest record, NULL for a kernel that has none. */
static const s2_aot_abi *aot_abi_of(const s2_kernel_record *r)
{
    bool tma = r->abi == S2_ABI_BWD_TMA;
    switch (r->role) {
    case S2_ROLE_FWD:
    case S2_ROLE_FWD_WIDE:
        return r->abi == S2_ABI_FWD_TMA_PERSISTENT ? s2_aot_abi_attn_fwd_tma_persistent()
               : r->abi == S2_ABI_FWD_TMA         ? s2_aot_abi_attn_fwd_tma()
                                                  : s2_aot_abi_attn_fwd();
    case S2_ROLE_BWD_PRE: return tma ? s2_aot_abi_attn_bwd_pre_tma() : s2_aot_abi_attn_bwd_pre();
    case S2_ROLE_BWD_DKDV: return tma ? s2_aot_abi_attn_bwd_dkdv_tma() : s2_aot_abi_attn_bwd_dkdv();
    case S2_ROLE_BWD_DQ: return tma ? s2_aot_abi_attn_bwd_dq_tma() : s2_aot_abi_attn_bwd_dq();
    case S2_ROLE_BWD_DQDS:
    case S2_ROLE_BWD_DQDS2: return tma ? s2_aot_abi_attn_bwd_dqds_tma() : s2_aot_abi_attn_bwd_dqds();
    case S2_ROLE_DECODE: return s2_aot_abi_attn_decode();
    case S2_ROLE_COMBINE: return s2_aot_abi_attn_combine();
    case S2_ROLE_FWD_SEQS: return s2_aot_abi_attn_seqs();
    default: return NULL;
    }
}

/* The AOT kernels of one manifest entry, one per kernel record in the
 * entry's order (the backward's in launch order), from the records alone. */
static int aot_kernels_of(const s2_manifest_kernel *mk, s2_aot_kernel *ks, aot_names *nm)
{
    const char *base = strncmp(mk->name, "s2_", 3) == 0 ? mk->name + 3 : mk->name;
    int n = 0;
    for (int i = 0; i < mk->num_fns; i++) {
        const s2_kernel_record *r = &mk->fns[i];
        const s2_aot_abi *abi = aot_abi_of(r);
        if (!abi)
            continue;
        const s2_kspec *t = &r->spec;
        int gather = t->kv_gather > 1 ? t->kv_gather : 1;
        snprintf(nm[n].name, sizeof nm[n].name, "%s%s", base, s2_role_suffix(r->role));
        snprintf(nm[n].symbol, sizeof nm[n].symbol, "%s", r->symbol);
        ks[n] = (s2_aot_kernel){.name = nm[n].name, .symbol = nm[n].symbol, .abi = abi, .threads = r->threads,
                                .smem_bytes = r->smem_bytes, .dtype = t->dtype, .head_dim = t->head_dim,
                                /* the divisor of the record's grid rule (its sources are the ABI's) */
                                .grid_div = {s2_grid_x_div(r)}};
        if (t->kind == S2_KERNEL_FWD && r->role != S2_ROLE_FWD_SEQS && r->role != S2_ROLE_COMBINE)
            ks[n].kv_box_rows = t->block_n / gather;
        else if (r->abi == S2_ABI_BWD_TMA)
            ks[n].kv_box_rows = t->block_m;
        n++;
    }
    return n;
}

/* DIR/IDENT.h and DIR/IDENT.c: one launcher IDENT_<symbol without "s2_">
 * per kernel of the manifest (three for a backward module, four with NAME_dqds,
 * one more for a forward's NAME_seqs, one for its wide variant NAME_w). */
static int write_aot(s2_ctx *ctx, const s2_artifact *art, const s2_manifest *m, const char *ident, const char *dir,
                     FILE *info)
{
    int n = s2_manifest_num_kernels(m);
    /* the emitter knows the forward's pointer, tensor-map and persistent ABIs, the backward's and decode's
     * (attention.h, aot.h) */
    for (int i = 0; i < n; i++) {
        const s2_manifest_kernel *mk = s2_manifest_kernel_at(m, i);
        const s2_kernel_record *fr = s2_manifest_kernel_fn(mk, S2_ROLE_FWD);
        const char *why = mk->spec.kind != S2_KERNEL_FWD && mk->spec.kind != S2_KERNEL_BWD &&
                                  mk->spec.kind != S2_KERNEL_DECODE
                              ? "of an unknown kind"
                          : fr && fr->abi == S2_ABI_FWD_TMA_FP8 ? "an e4m3 forward (ABI fwd_tma_fp8)"
                                                                : NULL;
        if (why)
            return input_fail("--emit c: kernel %s is %s, which has no C launcher yet; C launchers exist for the "
                              "forward (sm_80/sm_90 pointer ABI, sm_90a tensor-map and persistent ABIs), the backward "
                              "module and decode", mk->name, why);
    }
    s2_aot_kernel *ks = calloc((size_t)n * S2_ROLE_COUNT_, sizeof *ks);
    aot_names *names = calloc((size_t)n * S2_ROLE_COUNT_, sizeof *names);
    if (!ks || !names) {
        free(ks);
        free(names);
        return input_fail("out of memory");
    }
    int nk = 0;
    for (int i = 0; i < n; i++)
        nk += aot_kernels_of(s2_manifest_kernel_at(m, i), ks + nk, names + nk);
    s2_aot_module mod = {.name = ident, .cubin = art->cubin, .cubin_size = art->cubin_size,
                         .manifest = art->manifest, .kernels = ks, .num_kernels = nk};
    int made = make_dirs(dir);
    s2_status st = made ? S2_ERR_IO : s2_aot_write(ctx, &mod, dir);
    if (st == S2_OK && info) {
        fprintf(info, "%s/%s.h, %s/%s.c: load_%s(), unload_%s()\n", dir, ident, dir, ident, ident, ident);
        for (int i = 0; i < nk; i++)
            fprintf(info, "launcher %s_%s\n", ident, ks[i].name);
    }
    free(ks);
    free(names);
    return made ? made : st == S2_OK ? EXIT_OK : input_error(ctx);
}

/* --kernel softmax's options; 0 or a usage error. */
static int softmax_opts(const opts *o, emit_kind emit)
{
    if (o->head_dim || o->dtype || o->block_m || o->block_n || o->num_warps || o->num_stages || o->kv_gather ||
        o->num_options)
        return usage_error("%s", "compile: --kernel softmax takes no --head-dim, --dtype or tunables");
    if (emit == EMIT_C)
        return usage_error("%s", "compile: --kernel softmax has no --emit c");
    if (o->num_names > 1)
        return usage_error("%s", "compile: --kernel softmax compiles one pattern (one --name)");
    return 0;
}

static int compile_softmax(s2_ctx *ctx, const opts *o, s2_arch arch, emit_kind emit, s2_cubin_backend backend,
                           FILE *info, deps *d)
{
    s2_pattern_set *set = NULL;
    const s2_pattern *p = NULL;
    int np = 0;
    int rc = load_patterns(ctx, o, 1, &set, &p, &np);
    if (rc == 0)
        rc = deps_add_masks(d, set);
    s2_artifact *art = NULL;
    s2_target target;
    s2_target_default(&target, arch);
    if (rc == 0 && s2_compile_row_softmax(ctx, p, &target, backend, &art) != S2_OK)
        rc = input_error(ctx);
    if (rc == 0) {
        const void *data = emit == EMIT_CUBIN ? (const void *)art->cubin
                         : emit == EMIT_PTX ? (const void *)art->ptx : (const void *)art->ir;
        size_t size = emit == EMIT_CUBIN ? art->cubin_size : emit == EMIT_PTX ? art->ptx_len : strlen(art->ir);
        rc = write_output(o->output, data, size);
        if (rc == 0 && o->verbose)
            print_resources(art);
        if (rc == 0 && info)
            fprintf(info, "%s: wrote %zu bytes (row softmax, %s, %s, pattern %s)\n", o->output, size, o->emit,
                    s2_arch_name(arch), p->name);
        if (rc == 0)
            rc = deps_add_target(d, o->output);
    }
    s2_artifact_free(art);
    s2_pattern_set_free(set);
    return rc;
}

/* The attention kernel's spec from the options, every arch's but the arch; 0 or a usage error. */
static int attention_spec(s2_ctx *ctx, const opts *o, s2_kspec *spec)
{
    if (!o->head_dim || !o->dtype)
        return usage_error("%s", "compile: --head-dim and --dtype are required");
    s2_kernel_kind kind = S2_KERNEL_FWD;
    if (o->kind && strcmp(o->kind, "fwd") != 0) {
        if (strcmp(o->kind, "bwd") == 0)
            kind = S2_KERNEL_BWD;
        else if (strcmp(o->kind, "decode") == 0)
            kind = S2_KERNEL_DECODE;
        else
            return usage_error("compile: --kind must be fwd, bwd or decode, got '%s'", o->kind);
    }
    /* the template's own choices: --kv-gather, then each --option in order */
    s2_kernel_options kopt = {.kv_gather = (int)o->kv_gather};
    for (int i = 0; i < o->num_options; i++)
        if (s2_kernel_options_set(ctx, &kopt, o->options[i]) != S2_OK)
            return usage_error("compile: --option %s", s2_ctx_message(ctx));
    s2_kernel_spec pub = {.kind = kind, .head_dim = (int)o->head_dim, .block_m = (int)o->block_m,
                          .block_n = (int)o->block_n, .num_warps = (int)o->num_warps, .num_stages = (int)o->num_stages};
    *spec = s2_kspec_of(&pub, &kopt);
    int rc = parse_dtype(o->dtype, &spec->dtype);
    if (rc)
        return rc;
    if (o->kv_dtype) {
        const s2_dtype_info *r = s2_dtype_by_name(o->kv_dtype, true);
        if (!r || !r->kv_pages || kind != S2_KERNEL_DECODE)
            return usage_error("compile: --kv-dtype takes e4m3, with --kind decode; got '%s'", o->kv_dtype);
        spec->kv_dtype = r->dtype;
    }
    for (int i = 0; i < o->num_names; i++)
        for (int j = 0; j < i; j++)
            if (strcmp(o->names[i], o->names[j]) == 0)
                return usage_error("compile: --name %s is given twice", o->names[i]);
    return 0;
}

static int compile_attention(s2_ctx *ctx, const opts *o, const s2_kspec *base, s2_arch arch, emit_kind emit,
                             s2_cubin_backend backend, FILE *info, deps *d)
{
    s2_kspec spec = *base;
    spec.arch = (int)arch;
    /* -o -: the module is named "stdout" (dumps, overrides) */
    bool to_stdout = strcmp(o->output, "-") == 0;
    char *ident = module_ident(to_stdout ? "stdout" : o->output), *dir = out_dir(o->output);
    s2_pattern_set *set = NULL;
    const s2_pattern *pats[MAX_NAMES];
    int np = 0;
    s2_artifact *art = NULL;
    s2_manifest *m = NULL;
    int rc = ident && dir ? 0 : input_fail("out of memory");
    if (rc == 0)
        rc = load_patterns(ctx, o, MAX_NAMES, &set, pats, &np);
    if (rc == 0)
        rc = deps_add_masks(d, set);
    if (rc == 0 && s2_pattern_set_count(set) > MAX_NAMES && o->num_names == 0)
        rc = input_fail("%s: more than %d patterns; pick some with --name", o->pattern, MAX_NAMES);
    /* every stage runs whatever is emitted, so that --emit ptx or ll still
     * reports assembler errors */
    if (rc == 0 && (s2_compile_kspec(ctx, ident, pats, np, &spec, backend, &art) != S2_OK ||
                    s2_manifest_parse(ctx, art->manifest, strlen(art->manifest), &m) != S2_OK))
        rc = input_error(ctx);
    if (rc == 0 && emit == EMIT_C) {
        rc = write_aot(ctx, art, m, ident, dir, info);
        char path[4096 + 300];
        for (int x = 0; x < 2 && rc == 0; x++) {
            snprintf(path, sizeof path, "%s/%s.%s", dir, ident, x ? "c" : "h");
            rc = deps_add_target(d, path);
        }
    } else if (rc == 0) {
        const void *data = emit == EMIT_CUBIN ? (const void *)art->cubin
                         : emit == EMIT_PTX ? (const void *)art->ptx : (const void *)art->ir;
        size_t size = emit == EMIT_CUBIN ? art->cubin_size : emit == EMIT_PTX ? art->ptx_len : strlen(art->ir);
        rc = write_output(o->output, data, size);
        if (rc == 0 && info)
            fprintf(info, "%s: wrote %zu bytes (%s, %s, %d kernel%s)\n", o->output, size, o->emit,
                    s2_arch_name(arch), np, np == 1 ? "" : "s");
        if (rc == 0)
            rc = deps_add_target(d, o->output);
    }
    if (rc == 0) {
        for (int i = 0; i < s2_manifest_num_kernels(m) && info; i++)
            print_kernel(info, s2_manifest_kernel_at(m, i));
        if (o->verbose)
            print_resources(art);
    }
    s2_manifest_free(m);
    s2_artifact_free(art);
    s2_pattern_set_free(set);
    free(ident);
    free(dir);
    return rc;
}

/* OUT with ".ARCH" before its extension: out.cubin -> out.sm_80.cubin. */
static char *arch_output(const char *out, const char *arch)
{
    const char *base = strrchr(out, '/');
    base = base ? base + 1 : out;
    const char *dot = strrchr(base, '.');
    size_t stem = dot && dot != base ? (size_t)(dot - out) : strlen(out);
    size_t n = strlen(out) + strlen(arch) + 2;
    char *s = malloc(n);
    if (s)
        snprintf(s, n, "%.*s.%s%s", (int)stem, out, arch, out + stem);
    return s;
}

int cmd_compile(s2_ctx *ctx, int argc, char **argv)
{
    opts o = {.emit = "cubin", .backend = "auto", .kernel = "attention"};
    int rc = parse_one_file(argc, argv, &o, "PATTERN");
    if (rc)
        return rc;
    if (!o.num_archs)
        return usage_error("%s", "compile: --arch is required (sm_80, sm_90 or sm_90a)");
    if (!o.output)
        return usage_error("%s", "compile: -o OUT is required");
    s2_arch archs[8];
    for (int i = 0; i < o.num_archs; i++) {
        if (s2_arch_parse(o.archs[i], &archs[i]) != S2_OK)
            return usage_error("compile: --arch must be sm_80, sm_90 or sm_90a, got '%s'", o.archs[i]);
        for (int j = 0; j < i; j++)
            if (archs[j] == archs[i])
                return usage_error("compile: --arch %s is given twice", o.archs[i]);
    }
    emit_kind emit;
    if (parse_emit(o.emit, &emit) != 0)
        return usage_error("compile: --emit must be cubin, c, ptx or ll, got '%s'", o.emit);
    s2_cubin_backend backend;
    if (parse_backend(o.backend, &backend) != 0)
        return usage_error("compile: --backend must be auto, ptxas or nvjitlink, got '%s'", o.backend);
    bool softmax = strcmp(o.kernel, "softmax") == 0;
    if (!softmax && strcmp(o.kernel, "attention") != 0)
        return usage_error("compile: --kernel must be attention or softmax, got '%s'", o.kernel);
    bool to_stdout = strcmp(o.output, "-") == 0;
    if (to_stdout && emit == EMIT_C)
        return usage_error("%s", "compile: --emit c writes two files; -o - is not for it");
    if (to_stdout && o.num_archs > 1)
        return usage_error("%s", "compile: -o - takes one --arch");
    if (to_stdout && o.depfile && !o.depfile_path)
        return usage_error("%s", "compile: -MD with -o - needs -MF FILE");
    if (to_stdout && o.depfile_path && strcmp(o.depfile_path, "-") == 0)
        return usage_error("%s", "compile: -MF - and -o - would both write to stdout");
    s2_kspec spec = {0};
    if ((rc = softmax ? softmax_opts(&o, emit) : attention_spec(ctx, &o, &spec)) != 0)
        return rc;
    if (strcmp(o.pattern, "-") == 0 && !o.stdin_text) {
        uint8_t *text = NULL;
        if ((rc = read_input("-", CLI_MAX_STDIN, &text, &o.stdin_len)) != 0)
            return rc;
        o.stdin_text = (const char *)text;
    }
    if ((o.dump_dir && s2_ctx_set_dump_dir(ctx, o.dump_dir) != S2_OK) ||
        (o.override_dir && s2_ctx_set_override_dir(ctx, o.override_dir) != S2_OK)) {
        free((char *)o.stdin_text);
        return input_error(ctx);
    }
    /* the summary goes to stdout, to stderr when stdout carries the module or depfile, nowhere with --quiet */
    bool dep_stdout = o.depfile_path && strcmp(o.depfile_path, "-") == 0;
    FILE *info = o.quiet ? NULL : to_stdout || dep_stdout ? stderr : stdout;
    deps d = {.wanted = o.depfile, .pattern = strcmp(o.pattern, "-") == 0 ? NULL : o.pattern};
    if ((rc = deps_check(&d, o.dep_target ? "-" : o.output)) != 0) { /* -MT: OUT is not written there */
        free((char *)o.stdin_text);
        return rc;
    }
    const char *out = o.output;
    for (int i = 0; i < o.num_archs && rc == 0; i++) {
        char *path = o.num_archs > 1 ? arch_output(out, o.archs[i]) : NULL;
        if (o.num_archs > 1 && !path) {
            rc = input_fail("out of memory");
            break;
        }
        o.output = path ? path : out;
        o.arch = o.archs[i];
        rc = softmax ? compile_softmax(ctx, &o, archs[i], emit, backend, info, &d)
                     : compile_attention(ctx, &o, &spec, archs[i], emit, backend, info, &d);
        free(path);
    }
    o.output = out;
    if (rc == 0 && o.depfile) {
        char *dep = o.depfile_path ? NULL : deps_default_path(out);
        if (!o.depfile_path && !dep)
            rc = input_fail("out of memory");
        else
            rc = deps_write(&d, o.dep_target ? o.dep_target : to_stdout ? "-" : NULL, o.depfile_path ? o.depfile_path : dep);
        free(dep);
    }
    deps_free(&d);
    free((char *)o.stdin_text);
    return rc;
}
