/* AOT C sources (include/s2c/aot.h): a header and a C file that embed a
 * cubin and launch its kernels through the Driver API.  The launchers are
 * generated from ABI descriptor tables (aot_abi.c), never from per-kernel C
 * text; their parameters are the kernels' own lists (abi/params.h). */
#include "launch_facts.h"
#include "s2c/aot.h"
#include "dtype.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What S2_AOT_MAPS_ATTN_FWD reads (and fills): name and type. */
static const s2_aot_param fwd_map_inputs[] = {
    {"q", S2_AOT_PTR},          {"k", S2_AOT_PTR},          {"v", S2_AOT_PTR},
    {"q_stride_b", S2_AOT_I64}, {"q_stride_s", S2_AOT_I64}, {"q_stride_h", S2_AOT_I64},
    {"k_stride_b", S2_AOT_I64}, {"k_stride_s", S2_AOT_I64}, {"k_stride_h", S2_AOT_I64},
    {"v_stride_b", S2_AOT_I64}, {"v_stride_s", S2_AOT_I64}, {"v_stride_h", S2_AOT_I64},
    {"q_len", S2_AOT_I32},      {"kv_rows", S2_AOT_I64},
    {"heads", S2_AOT_I32},      {"kv_heads", S2_AOT_I32},   {"batch", S2_AOT_I32},
    {"seqinfo", S2_AOT_PTR},
    {"q_map", S2_AOT_TMAP},     {"k_map", S2_AOT_TMAP},     {"v_map", S2_AOT_TMAP},
};

/* What S2_AOT_MAPS_ATTN_BWD reads (and fills). */
static const s2_aot_param bwd_map_inputs[] = {
    {"q", S2_AOT_PTR},            {"d_o", S2_AOT_PTR},
    {"q_stride_b", S2_AOT_I64},   {"q_stride_s", S2_AOT_I64},   {"q_stride_h", S2_AOT_I64},
    {"d_o_stride_b", S2_AOT_I64}, {"d_o_stride_s", S2_AOT_I64}, {"d_o_stride_h", S2_AOT_I64},
    {"q_len", S2_AOT_I32},        {"heads", S2_AOT_I32},        {"batch", S2_AOT_I32},
    {"seqinfo", S2_AOT_PTR},
    {"q_map", S2_AOT_TMAP},       {"do_map", S2_AOT_TMAP},
};

/* What S2_AOT_TABLE_COMBINE reads (and fills). */
static const s2_aot_param combine_table_inputs[] = {
    {"n_in", S2_AOT_I32}, {"o_in", S2_AOT_PTR_LIST}, {"lse_in", S2_AOT_PTR_LIST}, {"inputs", S2_AOT_BYTES},
};

/* ---- checks ---- */

static const char *const c_keywords[] = {
    "auto", "break", "case", "char", "const", "continue", "default", "do", "double", "else", "enum",
    "extern", "float", "for", "goto", "if", "inline", "int", "long", "register", "restrict", "return",
    "short", "signed", "sizeof", "static", "struct", "switch", "typedef", "union", "unsigned", "void",
    "volatile", "while", "_Alignas", "_Alignof", "_Atomic", "_Bool", "_Complex", "_Generic",
    "_Imaginary", "_Noreturn", "_Static_assert", "_Thread_local",
};

static bool is_ident(const char *s)
{
    if (!s || !(isalpha((unsigned char)s[0]) || s[0] == '_') || strlen(s) > 100)
        return false;
    for (const char *p = s; *p; p++)
        if (!(isalnum((unsigned char)*p) || *p == '_'))
            return false;
    for (size_t i = 0; i < sizeof c_keywords / sizeof c_keywords[0]; i++)
        if (strcmp(s, c_keywords[i]) == 0)
            return false;
    return true;
}

static const char *c_type(s2_aot_type t)
{
    switch (t) {
    case S2_AOT_PTR: return "CUdeviceptr";
    case S2_AOT_I32: return "int32_t";
    case S2_AOT_I64: return "int64_t";
    case S2_AOT_F32: return "float";
    case S2_AOT_TMAP: return "CUtensorMap";
    case S2_AOT_BYTES: return "uint64_t[]";
    case S2_AOT_PTR_LIST: return "const CUdeviceptr *";
    default: return NULL;
    }
}

/* The parameter or launch argument called name, or NULL. */
static const s2_aot_param *abi_find(const s2_aot_abi *abi, const char *name)
{
    for (int i = 0; i < abi->num_params; i++)
        if (strcmp(abi->params[i].name, name) == 0)
            return &abi->params[i];
    for (int i = 0; i < abi->num_launch_args; i++)
        if (strcmp(abi->launch_args[i].name, name) == 0)
            return &abi->launch_args[i];
    return NULL;
}

/* Names and types of one list; duplicates are checked once both lists are known good. */
static s2_status check_param_list(s2_ctx *ctx, const s2_aot_abi *abi, const s2_aot_param *list, int n)
{
    if (n < 0 || (n > 0 && !list))
        return s2_fail(ctx, S2_ERR_INVALID, "ABI %s: bad parameter list", abi->name);
    for (int i = 0; i < n; i++) {
        const char *name = list[i].name;
        /* "stream" is the launcher's first argument; s2_* are its locals */
        if (!is_ident(name) || strcmp(name, "stream") == 0 || strncmp(name, "s2_", 3) == 0)
            return s2_fail(ctx, S2_ERR_INVALID, "ABI %s: parameter name \"%s\" is not usable in C", abi->name,
                           name ? name : "(null)");
        if (!c_type(list[i].type))
            return s2_fail(ctx, S2_ERR_INVALID, "ABI %s: parameter %s has an unknown type %d", abi->name, name,
                           (int)list[i].type);
    }
    return S2_OK;
}

static s2_status check_unique(s2_ctx *ctx, const s2_aot_abi *abi, const s2_aot_param *list, int n)
{
    for (int i = 0; i < n; i++)
        if (abi_find(abi, list[i].name) != &list[i])
            return s2_fail(ctx, S2_ERR_INVALID, "ABI %s: parameter %s appears twice", abi->name, list[i].name);
    return S2_OK;
}

static int count_maps(const s2_aot_abi *abi)
{
    int n = 0;
    for (int i = 0; i < abi->num_params; i++)
        n += abi->params[i].type == S2_AOT_TMAP;
    return n;
}

/* Tensor maps only where a known convention builds them, from parameters
 * that exist with the types it needs. */
static s2_status check_maps(s2_ctx *ctx, const s2_aot_abi *abi)
{
    int n = count_maps(abi);
    if (abi->maps == S2_AOT_MAPS_NONE)
        return n == 0 ? S2_OK : s2_fail(ctx, S2_ERR_INVALID, "ABI %s: tensor-map parameters but no way to build them",
                                        abi->name);
    bool fwd = abi->maps == S2_AOT_MAPS_ATTN_FWD;
    if (!fwd && abi->maps != S2_AOT_MAPS_ATTN_BWD)
        return s2_fail(ctx, S2_ERR_INVALID, "ABI %s: unknown tensor-map convention %d", abi->name, (int)abi->maps);
    if (n != (fwd ? 3 : 2))
        return s2_fail(ctx, S2_ERR_INVALID, "ABI %s: the %s", abi->name,
                       fwd ? "forward's tensor maps are q_map, k_map, v_map" : "backward's tensor maps are q_map, do_map");
    const s2_aot_param *in = fwd ? fwd_map_inputs : bwd_map_inputs;
    size_t nin = fwd ? sizeof fwd_map_inputs / sizeof fwd_map_inputs[0] : sizeof bwd_map_inputs / sizeof bwd_map_inputs[0];
    for (size_t i = 0; i < nin; i++) {
        const s2_aot_param *p = abi_find(abi, in[i].name);
        if (!p || p->type != in[i].type)
            return s2_fail(ctx, S2_ERR_INVALID, "ABI %s: the %s tensor maps need %s %s", abi->name,
                           fwd ? "forward's" : "backward's", c_type(in[i].type), in[i].name);
    }
    return S2_OK;
}

/* A by-value table only where a known convention builds it, from
 * parameters and launch arguments that exist with the types it needs; lists
 * of pointers only as launch arguments, and only for such a table. */
static s2_status check_table(s2_ctx *ctx, const s2_aot_abi *abi)
{
    int bytes = 0, lists = 0;
    for (int i = 0; i < abi->num_params; i++) {
        bytes += abi->params[i].type == S2_AOT_BYTES;
        if (abi->params[i].type == S2_AOT_PTR_LIST)
            return s2_fail(ctx, S2_ERR_INVALID, "ABI %s: parameter %s is a list of pointers (a launch argument only)",
                           abi->name, abi->params[i].name);
    }
    for (int i = 0; i < abi->num_launch_args; i++) {
        lists += abi->launch_args[i].type == S2_AOT_PTR_LIST;
        if (abi->launch_args[i].type == S2_AOT_BYTES)
            return s2_fail(ctx, S2_ERR_INVALID, "ABI %s: launch argument %s is a by-value table", abi->name,
                           abi->launch_args[i].name);
    }
    if (abi->table == S2_AOT_TABLE_NONE)
        return bytes == 0 && lists == 0
                   ? S2_OK
                   : s2_fail(ctx, S2_ERR_INVALID, "ABI %s: a by-value table or pointer lists but no way to build a table",
                             abi->name);
    if (abi->table != S2_AOT_TABLE_COMBINE)
        return s2_fail(ctx, S2_ERR_INVALID, "ABI %s: unknown table convention %d", abi->name, (int)abi->table);
    if (bytes != 1 || lists != 2)
        return s2_fail(ctx, S2_ERR_INVALID, "ABI %s: the combine's table is inputs, built from o_in and lse_in",
                       abi->name);
    for (size_t i = 0; i < sizeof combine_table_inputs / sizeof combine_table_inputs[0]; i++) {
        const s2_aot_param *p = abi_find(abi, combine_table_inputs[i].name);
        if (!p || p->type != combine_table_inputs[i].type)
            return s2_fail(ctx, S2_ERR_INVALID, "ABI %s: the combine's table needs %s %s", abi->name,
                           c_type(combine_table_inputs[i].type), combine_table_inputs[i].name);
    }
    return S2_OK;
}

static s2_status check_abi(s2_ctx *ctx, const s2_aot_abi *abi)
{
    if (!abi || !abi->name)
        return s2_fail(ctx, S2_ERR_INVALID, "kernel without an ABI");
    s2_status st = check_param_list(ctx, abi, abi->params, abi->num_params);
    if (st == S2_OK)
        st = check_param_list(ctx, abi, abi->launch_args, abi->num_launch_args);
    if (st == S2_OK)
        st = check_unique(ctx, abi, abi->params, abi->num_params);
    if (st == S2_OK)
        st = check_unique(ctx, abi, abi->launch_args, abi->num_launch_args);
    for (int i = 0; st == S2_OK && i < abi->num_launch_args; i++)
        if (abi->launch_args[i].type == S2_AOT_TMAP)
            st = s2_fail(ctx, S2_ERR_INVALID, "ABI %s: launch argument %s is a tensor map", abi->name,
                         abi->launch_args[i].name);
    if (st == S2_OK)
        st = check_maps(ctx, abi);
    if (st == S2_OK)
        st = check_table(ctx, abi);
    for (int i = 0; st == S2_OK && abi->grid_persistent && i < 2; i++) {
        const char *nm = i ? "batch" : "n_work";
        const s2_aot_param *p = abi_find(abi, nm);
        if (!p || p->type != S2_AOT_I32)
            st = s2_fail(ctx, S2_ERR_INVALID, "ABI %s: a persistent grid needs the int32 parameter %s", abi->name, nm);
    }
    for (int d = 0; st == S2_OK && d < 3; d++) {
        if (!abi->grid[d])
            continue;
        const s2_aot_param *p = abi_find(abi, abi->grid[d]);
        if (abi->grid_persistent)
            st = s2_fail(ctx, S2_ERR_INVALID, "ABI %s: a persistent grid names no dimensions", abi->name);
        else if (!p || (p->type != S2_AOT_I32 && p->type != S2_AOT_I64))
            st = s2_fail(ctx, S2_ERR_INVALID, "ABI %s: grid dimension %c names %s, which is not an integer parameter",
                         abi->name, "xyz"[d], abi->grid[d]);
    }
    return st;
}

static s2_status check_module(s2_ctx *ctx, const s2_aot_module *m)
{
    if (!m || !is_ident(m->name))
        return s2_fail(ctx, S2_ERR_INVALID, "AOT module name \"%s\" is not a C identifier",
                       m && m->name ? m->name : "(null)");
    if (!m->cubin || m->cubin_size == 0)
        return s2_fail(ctx, S2_ERR_INVALID, "AOT module %s: no cubin", m->name);
    if (m->num_kernels < 1 || !m->kernels)
        return s2_fail(ctx, S2_ERR_INVALID, "AOT module %s: no kernels", m->name);
    static const char *const reserved[] = {"cubin", "cubin_size", "manifest", "module", "functions", "encode_map"};
    for (int i = 0; i < m->num_kernels; i++) {
        const s2_aot_kernel *k = &m->kernels[i];
        if (!is_ident(k->name))
            return s2_fail(ctx, S2_ERR_INVALID, "AOT module %s: kernel name \"%s\" is not a C identifier", m->name,
                           k->name ? k->name : "(null)");
        for (size_t r = 0; r < sizeof reserved / sizeof reserved[0]; r++)
            if (strcmp(k->name, reserved[r]) == 0)
                return s2_fail(ctx, S2_ERR_INVALID, "AOT module %s: kernel name %s is reserved", m->name, k->name);
        for (int j = 0; j < i; j++)
            if (strcmp(k->name, m->kernels[j].name) == 0)
                return s2_fail(ctx, S2_ERR_INVALID, "AOT module %s: two kernels are called %s", m->name, k->name);
        if (!k->symbol || !k->symbol[0])
            return s2_fail(ctx, S2_ERR_INVALID, "AOT module %s: kernel %s has no symbol", m->name, k->name);
        for (int d = 0; d < 3; d++)
            if (k->grid_div[d] < 0 || (k->grid_div[d] > 1 && (!k->abi || !k->abi->grid[d])))
                return s2_fail(ctx, S2_ERR_INVALID, "AOT module %s: kernel %s divides grid dimension %c by %d",
                               m->name, k->name, "xyz"[d], k->grid_div[d]);
        if (k->threads < 1 || k->threads > 1024 || k->smem_bytes < 0)
            return s2_fail(ctx, S2_ERR_INVALID, "AOT module %s: kernel %s launches %d threads with %d bytes of shared memory",
                           m->name, k->name, k->threads, k->smem_bytes);
        s2_status st = check_abi(ctx, k->abi);
        if (st != S2_OK)
            return st;
        const s2_dtype_info *dti = s2_dtype_info_of(k->dtype);
        if (k->abi->maps != S2_AOT_MAPS_NONE &&
            (!dti || !dti->kernels || dti->tensor_map < 0 || k->head_dim < 16 || k->head_dim % 16 != 0 ||
             k->head_dim > 256 || k->kv_box_rows < 1 || k->kv_box_rows > 256))
            return s2_fail(ctx, S2_ERR_INVALID, "AOT module %s: kernel %s: tensor maps of dtype %d, head_dim %d, "
                           "%d rows per box", m->name, k->name, (int)k->dtype, k->head_dim, k->kv_box_rows);
    }
    return S2_OK;
}

/* ---- emission helpers ---- */

/* A C string literal of n bytes, safe for any content: printable ASCII
 * except \ " ? is literal ('?' escaped against trigraphs), the rest octal. */
static void emit_c_string(s2_buf *b, const char *s, size_t n)
{
    s2_buf_puts(b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\\' || c == '"' || c == '?')
            s2_buf_printf(b, "\\%c", c);
        else if (c == '\n')
            s2_buf_puts(b, "\\n");
        else if (c == '\t')
            s2_buf_puts(b, "\\t");
        else if (c < 0x20 || c >= 0x7f)
            s2_buf_printf(b, "\\%03o", c);
        else
            s2_buf_append(b, &s[i], 1);
    }
    s2_buf_puts(b, "\"");
}

/* The manifest as adjacent literals, one per line of text. */
static void emit_manifest(s2_buf *b, const char *name, const char *text)
{
    s2_buf_printf(b, "const char %s_manifest[] =", name);
    if (!text[0])
        s2_buf_puts(b, " \"\"");
    for (const char *p = text; *p;) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) + 1 : strlen(p);
        s2_buf_puts(b, "\n    ");
        emit_c_string(b, p, n);
        p += n;
    }
    s2_buf_puts(b, ";\n");
}

static void emit_bytes(s2_buf *b, const char *name, const uint8_t *data, size_t n)
{
    s2_buf_printf(b, "_Alignas(16) const unsigned char %s_cubin[%zu] = {\n", name, n);
    for (size_t i = 0; i < n; i += 16) {
        s2_buf_puts(b, "   ");
        for (size_t j = i; j < n && j < i + 16; j++)
            s2_buf_printf(b, " 0x%02x,", data[j]);
        s2_buf_puts(b, "\n");
    }
    s2_buf_puts(b, "};\n");
    s2_buf_printf(b, "const size_t %s_cubin_size = %zu;\n", name, n);
}

static void emit_params(s2_buf *b, const s2_aot_param *list, int n)
{
    for (int i = 0; i < n; i++)
        if (list[i].type != S2_AOT_TMAP && list[i].type != S2_AOT_BYTES)
            s2_buf_printf(b, ",\n    %s%s%s", c_type(list[i].type), list[i].type == S2_AOT_PTR_LIST ? "" : " ",
                          list[i].name);
}

/* "CUresult NAME_KERNEL(CUstream stream, ...)" without the terminator. */
static void emit_prototype(s2_buf *b, const char *module, const s2_aot_kernel *k)
{
    s2_buf_printf(b, "CUresult %s_%s(CUstream stream", module, k->name);
    emit_params(b, k->abi->params, k->abi->num_params);
    emit_params(b, k->abi->launch_args, k->abi->num_launch_args);
    s2_buf_puts(b, ")");
}

static void emit_kernel_comment(s2_buf *b, const s2_aot_kernel *k)
{
    s2_buf_printf(b, "/* %s (ABI %s): grid (", k->symbol, k->abi->name);
    if (k->abi->grid_persistent)
        s2_buf_puts(b, "min(SMs x resident CTAs per SM, n_work x batch), 1, 1");
    for (int d = 0; !k->abi->grid_persistent && d < 3; d++) {
        if (k->abi->grid[d] && k->grid_div[d] > 1)
            s2_buf_printf(b, "%scdiv(%s, %d)", d ? ", " : "", k->abi->grid[d], k->grid_div[d]);
        else
            s2_buf_printf(b, "%s%s", d ? ", " : "", k->abi->grid[d] ? k->abi->grid[d] : "1");
    }
    s2_buf_printf(b, "), %d threads, %d bytes of dynamic shared memory", k->threads, k->smem_bytes);
    if (k->abi->maps == S2_AOT_MAPS_ATTN_FWD)
        s2_buf_printf(b, ";\n * builds the q/k/v tensor maps (%s, D %d, k/v box rows %d; kv_rows = rows of k and v)",
                      s2_dtype_name(k->dtype), k->head_dim, k->kv_box_rows);
    else if (k->abi->maps == S2_AOT_MAPS_ATTN_BWD)
        s2_buf_printf(b, ";\n * builds the q/d_o tensor maps (%s, D %d, box rows %d)",
                      s2_dtype_name(k->dtype), k->head_dim, k->kv_box_rows);
    if (k->abi->table == S2_AOT_TABLE_COMBINE)
        s2_buf_puts(b, ";\n * builds inputs {o[64]; lse[64]} from n_in entries of o_in and lse_in (NULL: zeros)");
    s2_buf_puts(b, " */\n");
}

static bool used_in_grid(const s2_aot_abi *abi, const char *name)
{
    for (int d = 0; d < 3; d++)
        if (abi->grid[d] && strcmp(abi->grid[d], name) == 0)
            return true;
    return false;
}

/* ---- the two files ---- */

static void emit_header(s2_buf *b, const s2_aot_module *m)
{
    s2_buf_printf(b, "/* %s.h: generated by s2c %s; do not edit. */\n", m->name, s2_version());
    s2_buf_puts(b, "#ifndef ");
    for (const char *p = m->name; *p; p++)
        s2_buf_printf(b, "%c", toupper((unsigned char)*p));
    s2_buf_puts(b, "_H\n#define ");
    for (const char *p = m->name; *p; p++)
        s2_buf_printf(b, "%c", toupper((unsigned char)*p));
    s2_buf_puts(b, "_H\n\n#include <cuda.h>\n#include <stddef.h>\n#include <stdint.h>\n\n");
    s2_buf_puts(b, "#ifdef __cplusplus\nextern \"C\" {\n#endif\n\n");
    s2_buf_printf(b, "extern const unsigned char %s_cubin[];\n", m->name);
    s2_buf_printf(b, "extern const size_t %s_cubin_size;\n", m->name);
    s2_buf_printf(b, "extern const char %s_manifest[];\n\n", m->name);
    s2_buf_printf(b, "/* Load the module into the current context; CUDA_SUCCESS if already loaded. */\n");
    s2_buf_printf(b, "CUresult load_%s(void);\n", m->name);
    s2_buf_printf(b, "CUresult unload_%s(void);\n", m->name);
    for (int i = 0; i < m->num_kernels; i++) {
        s2_buf_puts(b, "\n");
        emit_kernel_comment(b, &m->kernels[i]);
        emit_prototype(b, m->name, &m->kernels[i]);
        s2_buf_puts(b, ";\n");
    }
    s2_buf_puts(b, "\n#ifdef __cplusplus\n}\n#endif\n#endif\n");
}

static void emit_unload(s2_buf *b, const s2_aot_module *m)
{
    s2_buf_printf(b, "CUresult unload_%s(void)\n{\n", m->name);
    s2_buf_puts(b, "    CUresult r = CUDA_SUCCESS;\n    int i;\n");
    s2_buf_printf(b, "    if (%s_module != NULL)\n        r = cuModuleUnload(%s_module);\n", m->name, m->name);
    s2_buf_printf(b, "    %s_module = NULL;\n", m->name);
    s2_buf_printf(b, "    for (i = 0; i < %d; i++)\n        %s_functions[i] = NULL;\n", m->num_kernels, m->name);
    s2_buf_puts(b, "    return r;\n}\n\n");
}

static void emit_check(s2_buf *b, const char *call_fmt, ...) S2_PRINTF(2, 3);
static void emit_check(s2_buf *b, const char *call_fmt, ...)
{
    va_list ap;
    va_start(ap, call_fmt);
    s2_buf_puts(b, "    r = ");
    s2_buf_vprintf(b, call_fmt, ap);
    va_end(ap);
    s2_buf_puts(b, ";\n    if (r != CUDA_SUCCESS)\n        goto fail;\n");
}

static void emit_load(s2_buf *b, const s2_aot_module *m)
{
    const char *n = m->name;
    s2_buf_printf(b, "CUresult load_%s(void)\n{\n    CUresult r;\n", n);
    s2_buf_printf(b, "    if (%s_module != NULL)\n        return CUDA_SUCCESS;\n", n);
    s2_buf_printf(b, "    r = cuModuleLoadData(&%s_module, %s_cubin);\n", n, n);
    s2_buf_printf(b, "    if (r != CUDA_SUCCESS) {\n        %s_module = NULL;\n        return r;\n    }\n", n);
    for (int i = 0; i < m->num_kernels; i++) {
        const s2_aot_kernel *k = &m->kernels[i];
        s2_buf printable;
        s2_buf_init(&printable);
        emit_c_string(&printable, k->symbol, strlen(k->symbol));
        emit_check(b, "cuModuleGetFunction(&%s_functions[%d], %s_module, %s)", n, i, n,
                   printable.data ? printable.data : "\"\"");
        b->oom |= printable.oom;
        s2_buf_free(&printable);
        if (k->smem_bytes > 0)
            emit_check(b, "cuFuncSetAttribute(%s_functions[%d], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, %d)",
                       n, i, k->smem_bytes);
    }
    s2_buf_printf(b, "    return CUDA_SUCCESS;\nfail:\n    (void)unload_%s();\n    return r;\n}\n", n);
}

static bool module_has_maps(const s2_aot_module *m)
{
    for (int i = 0; i < m->num_kernels; i++)
        if (m->kernels[i].abi->maps != S2_AOT_MAPS_NONE)
            return true;
    return false;
}

/* The encoder of S2_AOT_MAPS_ATTN_FWD, the rules of s2_attn_fwd_tensor_maps
 * (runtime/attn_fwd.c) in generated C: element strides (batch, seq, head) become
 * byte strides of dims 1..3, and a dimension of extent 1 is never stepped
 * over, so its stride (possibly anything) is replaced by one the driver
 * accepts. */
static void emit_map_encoder(s2_buf *b, const s2_aot_module *m)
{
    s2_buf_printf(b, "\nstatic CUresult %s_encode_map(CUtensorMap *map, CUtensorMapDataType type, CUdeviceptr base,\n"
                     "    int64_t d, int64_t elem, int64_t rows, int64_t heads, int64_t batch,\n"
                     "    int64_t stride_b, int64_t stride_s, int64_t stride_h, cuuint32_t box_rows)\n{\n", m->name);
    s2_buf_puts(b, "    cuuint64_t dims[4];\n    cuuint64_t strides[3];\n"
                   "    cuuint32_t box[4];\n    cuuint32_t step[4] = {1, 1, 1, 1};\n"
                   "    int64_t extent[3];\n    int64_t elems[3];\n    int i;\n"
                   "    dims[0] = (cuuint64_t)d; dims[1] = (cuuint64_t)rows;\n"
                   "    dims[2] = (cuuint64_t)heads; dims[3] = (cuuint64_t)batch;\n"
                   "    extent[0] = rows; extent[1] = heads; extent[2] = batch;\n"
                   "    elems[0] = stride_s; elems[1] = stride_h; elems[2] = stride_b;\n"
                   "    for (i = 0; i < 3; i++)\n"
                   "        strides[i] = (cuuint64_t)(extent[i] < 2 || elems[i] <= 0 ? d * elem : elems[i] * elem);\n"
                   "    box[0] = 64; box[1] = box_rows; box[2] = 1; box[3] = 1;\n"
                   "    return cuTensorMapEncodeTiled(map, type, 4, (void *)(uintptr_t)base, dims, strides, box, step,\n"
                   "                                  CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,\n"
                   "                                  CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);\n"
                   "}\n");
}

/* The three maps of S2_AOT_MAPS_ATTN_FWD; a failure returns unlaunched. */
static void emit_fwd_maps(s2_buf *b, const s2_aot_module *m, const s2_aot_kernel *k)
{
    const char *type = s2_dtype_info_of(k->dtype)->tensor_map_name;
    static const struct { const char *t, *rows, *heads; } maps[3] = {
        {"q", "q_len", "heads"}, {"k", "kv_rows", "kv_heads"}, {"v", "kv_rows", "kv_heads"}};
    /* a packed (variable-length) batch is one tensor of token rows */
    s2_buf_puts(b, "    s2_tb = seqinfo != 0 ? 1 : (int64_t)batch;\n");
    for (int i = 0; i < 3; i++) {
        s2_buf_printf(b, "    s2_r = %s_encode_map(&%s_map, %s, %s, %d, 2, (int64_t)%s, (int64_t)%s, s2_tb,\n"
                         "        %s_stride_b, %s_stride_s, %s_stride_h, %d);\n",
                      m->name, maps[i].t, type, maps[i].t, k->head_dim, maps[i].rows, maps[i].heads, maps[i].t,
                      maps[i].t, maps[i].t, i == 0 ? 64 : k->kv_box_rows);
        s2_buf_puts(b, "    if (s2_r != CUDA_SUCCESS)\n        return s2_r;\n");
    }
}

/* The two maps of S2_AOT_MAPS_ATTN_BWD; a failure returns unlaunched. */
static void emit_bwd_maps(s2_buf *b, const s2_aot_module *m, const s2_aot_kernel *k)
{
    const char *type = s2_dtype_info_of(k->dtype)->tensor_map_name;
    static const char *const t[2][2] = {{"q", "q"}, {"do", "d_o"}};
    /* a packed (variable-length) batch is one tensor of token rows */
    s2_buf_puts(b, "    s2_tb = seqinfo != 0 ? 1 : (int64_t)batch;\n");
    for (int i = 0; i < 2; i++) {
        s2_buf_printf(b, "    s2_r = %s_encode_map(&%s_map, %s, %s, %d, 2, (int64_t)q_len, (int64_t)heads, s2_tb,\n"
                         "        %s_stride_b, %s_stride_s, %s_stride_h, %d);\n",
                      m->name, t[i][0], type, t[i][1], k->head_dim, t[i][1], t[i][1], t[i][1], k->kv_box_rows);
        s2_buf_puts(b, "    if (s2_r != CUDA_SUCCESS)\n        return s2_r;\n");
    }
}

/* The table of S2_AOT_TABLE_COMBINE, as s2_combine fills it; n_in outside
 * 1..64 returns unlaunched. */
static void emit_combine_table(s2_buf *b)
{
    s2_buf_puts(b, "    if (n_in < 1 || n_in > 64)\n        return CUDA_ERROR_INVALID_VALUE;\n"
                   "    for (s2_i = 0; s2_i < 128; s2_i++)\n        inputs[s2_i] = 0;\n"
                   "    for (s2_i = 0; s2_i < n_in; s2_i++) {\n"
                   "        inputs[s2_i] = o_in != NULL ? (uint64_t)o_in[s2_i] : 0;\n"
                   "        inputs[64 + s2_i] = lse_in != NULL ? (uint64_t)lse_in[s2_i] : 0;\n"
                   "    }\n");
}

/* Launch arguments the grid, the tensor maps or the table read need no (void). */
static bool launch_arg_used(const s2_aot_abi *abi, const char *name)
{
    if (used_in_grid(abi, name))
        return true;
    if (abi->maps == S2_AOT_MAPS_ATTN_FWD)
        for (size_t i = 0; i < sizeof fwd_map_inputs / sizeof fwd_map_inputs[0]; i++)
            if (strcmp(fwd_map_inputs[i].name, name) == 0)
                return true;
    if (abi->maps == S2_AOT_MAPS_ATTN_BWD)
        for (size_t i = 0; i < sizeof bwd_map_inputs / sizeof bwd_map_inputs[0]; i++)
            if (strcmp(bwd_map_inputs[i].name, name) == 0)
                return true;
    if (abi->table == S2_AOT_TABLE_COMBINE)
        for (size_t i = 0; i < sizeof combine_table_inputs / sizeof combine_table_inputs[0]; i++)
            if (strcmp(combine_table_inputs[i].name, name) == 0)
                return true;
    return false;
}

static bool module_has_persistent(const s2_aot_module *m)
{
    for (int i = 0; i < m->num_kernels; i++)
        if (m->kernels[i].abi->grid_persistent)
            return true;
    return false;
}

/* s2_ctas_per_sm: the runtime's occupancy rule, written from its one
 * definition (abi/launch_facts.h), a statement a line. */
static void emit_ctas_per_sm(s2_buf *b)
{
    static const char text[] = S2_CTAS_PER_SM_TEXT(s2_ctas_per_sm);
    int depth = 0;
    bool line_start = false;   /* indentation is written before a line's first character */
    s2_buf_puts(b, "/* resident CTAs per SM: s2c's launch facts' rule */\n");
    for (const char *p = text; *p; p++) {
        if (line_start && *p == ' ')
            continue;
        if (*p == '}') {
            depth--;
            if (!line_start)
                s2_buf_puts(b, "\n");
            line_start = true;
        }
        if (line_start)
            s2_buf_printf(b, "%*s", 4 * depth, "");
        line_start = false;
        s2_buf_printf(b, "%c", *p);
        if (*p == '{' || *p == ';') {
            depth += *p == '{';
            s2_buf_puts(b, "\n");
            line_start = true;
        }
    }
    s2_buf_puts(b, "\n");
}

/* s2_gx of a persistent grid: SMs x resident CTAs per SM (s2_ctas_per_sm
 * over the current device's limits and the kernel's registers and static
 * shared memory, as the runtime's launch facts), at most n_work x batch work
 * items, at least 1. */
static void emit_persistent_grid(s2_buf *b, const s2_aot_module *m, int index)
{
    const s2_aot_kernel *k = &m->kernels[index];
    static const char *const dev_attr[6][2] = {
        {"s2_sms", "MULTIPROCESSOR_COUNT"},
        {"s2_sm_smem", "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR"},
        {"s2_reserved", "RESERVED_SHARED_MEMORY_PER_BLOCK"},
        {"s2_sm_regs", "MAX_REGISTERS_PER_MULTIPROCESSOR"},
        {"s2_sm_threads", "MAX_THREADS_PER_MULTIPROCESSOR"},
        {"s2_sm_blocks", "MAX_BLOCKS_PER_MULTIPROCESSOR"},
    };
    s2_buf_puts(b, "    {\n"
                   "        CUdevice s2_dev;\n"
                   "        int s2_sms = 0, s2_sm_smem = 0, s2_reserved = 0, s2_sm_regs = 0, s2_sm_threads = 0;\n"
                   "        int s2_sm_blocks = 0, s2_regs = 0, s2_static = 0;\n"
                   "        CUresult s2_e = cuCtxGetDevice(&s2_dev);\n");
    for (int i = 0; i < 6; i++)
        s2_buf_printf(b, "        if (s2_e == CUDA_SUCCESS)\n"
                         "            s2_e = cuDeviceGetAttribute(&%s, CU_DEVICE_ATTRIBUTE_%s, s2_dev);\n",
                      dev_attr[i][0], dev_attr[i][1]);
    s2_buf_printf(b,
        "        if (s2_e == CUDA_SUCCESS)\n"
        "            s2_e = cuFuncGetAttribute(&s2_regs, CU_FUNC_ATTRIBUTE_NUM_REGS, %s_functions[%d]);\n"
        "        if (s2_e == CUDA_SUCCESS)\n"
        "            s2_e = cuFuncGetAttribute(&s2_static, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, %s_functions[%d]);\n"
        "        if (s2_e != CUDA_SUCCESS)\n"
        "            return s2_e;\n"
        "        int s2_per = s2_ctas_per_sm(s2_sm_regs, s2_sm_smem, s2_sm_threads, s2_sm_blocks, s2_reserved, %d, %d,\n"
        "                                    s2_regs, s2_static);\n"
        "        int64_t s2_items = (int64_t)n_work * (int64_t)batch;\n"
        "        if (n_work < 0 || batch < 0 || s2_items > 2147483647)\n"
        "            return CUDA_ERROR_INVALID_VALUE;\n"
        "        s2_gx = (int64_t)s2_sms * s2_per;\n"
        "        s2_gx = s2_gx < s2_items ? s2_gx : s2_items > 0 ? s2_items : 1;\n"
        "    }\n",
        m->name, index, m->name, index, k->threads, k->smem_bytes);
}

static void emit_launcher(s2_buf *b, const s2_aot_module *m, int index)
{
    const s2_aot_kernel *k = &m->kernels[index];
    const s2_aot_abi *abi = k->abi;
    static const char *const limit[3] = {"2147483647", "65535", "65535"};
    s2_buf_puts(b, "\n");
    emit_kernel_comment(b, k);
    emit_prototype(b, m->name, k);
    s2_buf_puts(b, "\n{\n");
    if (abi->maps == S2_AOT_MAPS_ATTN_FWD)
        s2_buf_puts(b, "    CUtensorMap q_map, k_map, v_map;\n    int64_t s2_tb;\n    CUresult s2_r;\n");
    else if (abi->maps == S2_AOT_MAPS_ATTN_BWD)
        s2_buf_puts(b, "    CUtensorMap q_map, do_map;\n    int64_t s2_tb;\n    CUresult s2_r;\n");
    if (abi->table == S2_AOT_TABLE_COMBINE)
        s2_buf_puts(b, "    uint64_t inputs[128];\n    int32_t s2_i;\n");
    for (int d = 0; d < 3; d++) {
        if (abi->grid[d] && k->grid_div[d] > 1) /* a negative source stays negative: refused below */
            s2_buf_printf(b, "    int64_t s2_g%c = %s < 0 ? -1 : ((int64_t)%s + %d) / %d;\n", "xyz"[d], abi->grid[d],
                          abi->grid[d], k->grid_div[d] - 1, k->grid_div[d]);
        else
            s2_buf_printf(b, "    int64_t s2_g%c = %s%s;\n", "xyz"[d], abi->grid[d] ? "(int64_t)" : "",
                          abi->grid[d] ? abi->grid[d] : "1");
    }
    if (abi->num_params > 0) {
        s2_buf_printf(b, "    void *s2_args[%d] = {", abi->num_params);
        for (int i = 0; i < abi->num_params; i++)
            s2_buf_printf(b, "%s%s&%s", i ? "," : "", i % 8 == 0 ? "\n        " : " ", abi->params[i].name);
        s2_buf_puts(b, "\n    };\n");
    }
    for (int i = 0; i < abi->num_launch_args; i++)
        if (!launch_arg_used(abi, abi->launch_args[i].name))
            s2_buf_printf(b, "    (void)%s;\n", abi->launch_args[i].name);
    s2_buf_printf(b, "    if (%s_functions[%d] == NULL)\n        return CUDA_ERROR_NOT_INITIALIZED;\n", m->name, index);
    if (abi->grid_persistent)
        emit_persistent_grid(b, m, index);
    s2_buf_puts(b, "    if (");
    for (int d = 0; d < 3; d++)
        s2_buf_printf(b, "%ss2_g%c < 0 || s2_g%c > %s", d ? " ||\n        " : "", "xyz"[d], "xyz"[d], limit[d]);
    s2_buf_puts(b, ")\n        return CUDA_ERROR_INVALID_VALUE;\n");
    s2_buf_puts(b, "    if (s2_gx == 0 || s2_gy == 0 || s2_gz == 0)\n        return CUDA_SUCCESS;\n");
    if (abi->maps == S2_AOT_MAPS_ATTN_FWD)
        emit_fwd_maps(b, m, k);
    else if (abi->maps == S2_AOT_MAPS_ATTN_BWD)
        emit_bwd_maps(b, m, k);
    if (abi->table == S2_AOT_TABLE_COMBINE)
        emit_combine_table(b);
    s2_buf_printf(b, "    return cuLaunchKernel(%s_functions[%d], (unsigned int)s2_gx, (unsigned int)s2_gy, "
                     "(unsigned int)s2_gz,\n                          %d, 1, 1, %d, stream, %s, NULL);\n}\n",
                  m->name, index, k->threads, k->smem_bytes, abi->num_params > 0 ? "s2_args" : "NULL");
}

static void emit_source(s2_buf *b, const s2_aot_module *m)
{
    s2_buf_printf(b, "/* %s.c: generated by s2c %s from a cubin of %zu bytes; do not edit. */\n", m->name,
                  s2_version(), m->cubin_size);
    s2_buf_printf(b, "#include \"%s.h\"\n\n", m->name);
    emit_bytes(b, m->name, m->cubin, m->cubin_size);
    s2_buf_puts(b, "\n");
    emit_manifest(b, m->name, m->manifest ? m->manifest : "");
    s2_buf_printf(b, "\nstatic CUmodule %s_module;\nstatic CUfunction %s_functions[%d];\n\n", m->name, m->name,
                  m->num_kernels);
    emit_unload(b, m);
    emit_load(b, m);
    if (module_has_maps(m))
        emit_map_encoder(b, m);
    if (module_has_persistent(m))
        emit_ctas_per_sm(b);
    for (int i = 0; i < m->num_kernels; i++)
        emit_launcher(b, m, i);
}

s2_status s2_aot_emit(s2_ctx *ctx, const s2_aot_module *m, char **header, char **source)
{
    if (!header || !source)
        return s2_fail(ctx, S2_ERR_INVALID, "s2_aot_emit: no output");
    *header = *source = NULL;
    s2_status st = check_module(ctx, m);
    if (st != S2_OK)
        return st;
    s2_buf h, c;
    s2_buf_init(&h);
    s2_buf_init(&c);
    emit_header(&h, m);
    emit_source(&c, m);
    if (h.oom || c.oom) {
        s2_buf_free(&h);
        s2_buf_free(&c);
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    }
    *header = s2_buf_steal(&h, NULL);
    *source = s2_buf_steal(&c, NULL);
    return S2_OK;
}

s2_status s2_aot_write(s2_ctx *ctx, const s2_aot_module *m, const char *dir)
{
    if (!dir || !dir[0])
        return s2_fail(ctx, S2_ERR_INVALID, "s2_aot_write: no directory");
    char *header, *source;
    s2_status st = s2_aot_emit(ctx, m, &header, &source);
    if (st != S2_OK)
        return st;
    s2_buf path;
    s2_buf_init(&path);
    s2_buf_printf(&path, "%s/%s.h", dir, m->name);
    if (path.oom)
        st = s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    if (st == S2_OK)
        st = s2_write_file_atomic(ctx, path.data, header, strlen(header));
    s2_buf_reset(&path);
    s2_buf_printf(&path, "%s/%s.c", dir, m->name);
    if (st == S2_OK && path.oom)
        st = s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    if (st == S2_OK)
        st = s2_write_file_atomic(ctx, path.data, source, strlen(source));
    s2_buf_free(&path);
    free(header);
    free(source);
    return st;
}
