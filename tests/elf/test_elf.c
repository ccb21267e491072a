/* ELF symbol reader (common/elf.c): the manifest of a ptxas-made cubin, and
 * every kind of malformed image, each in an exactly sized heap copy so that
 * ASan catches any read past the end.
 *
 *   test_elf            prebuilt cubin, malformations, fuzz crashers
 *   test_elf --ptxas    cubins assembled now from generated PTX (exit 77 without ptxas) */
#include "elf.h"
#include "s2c/manifest.h"
#include "util.h"
#include "check_main.h"

#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *data_dir(void)
{
    const char *d = getenv("S2C_TEST_DATA");
    return d ? d : "tests/data";
}

static uint8_t *load(const char *name, size_t *size)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/elf/%s", data_dir(), name);
    char *data;
    s2_ctx *ctx = s2_ctx_new();
    s2_status st = s2_read_file(ctx, path, &data, size);
    ck_assert_msg(st == S2_OK, "%s", s2_ctx_message(ctx));
    s2_ctx_free(ctx);
    return (uint8_t *)data;
}

/* ---- little-endian field access for building malformed images ---- */
static uint64_t get(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}
static void put(uint8_t *p, int n, uint64_t v)
{
    for (int i = 0; i < n; i++, v >>= 8)
        p[i] = (uint8_t)v;
}
static uint8_t *shdr(uint8_t *img, unsigned i) { return img + get(img + 40, 8) + (uint64_t)i * 64; }
static unsigned shnum(const uint8_t *img) { return (unsigned)get(img + 60, 2); }

static unsigned section_of_type(uint8_t *img, unsigned type)
{
    for (unsigned i = 0; i < shnum(img); i++)
        if (get(shdr(img, i) + 4, 4) == type)
            return i;
    ck_abort_msg("no section of type %u", type);
    return 0;
}

static uint8_t *symbol_entry(uint8_t *img, const char *name)
{
    uint8_t *tab = shdr(img, section_of_type(img, 2));
    uint8_t *str = shdr(img, (unsigned)get(tab + 40, 4));
    for (uint64_t o = 0; o < get(tab + 32, 8); o += 24) {
        uint8_t *sym = img + get(tab + 24, 8) + o;
        if (strcmp((char *)img + get(str + 24, 8) + get(sym, 4), name) == 0)
            return sym;
    }
    ck_abort_msg("no symbol %s", name);
    return NULL;
}

/* Run the reader on an exact-size copy of img[0..size). */
static s2_status manifest_of(const uint8_t *img, size_t size, char **text_copy, s2_ctx *ctx)
{
    uint8_t *copy = malloc(size ? size : 1);
    ck_assert_ptr_nonnull(copy);
    memcpy(copy, img, size);
    const char *text = NULL;
    size_t len = 0;
    s2_status st = s2_cubin_find_manifest(ctx, copy, size, &text, &len);
    if (text_copy)
        *text_copy = NULL;
    if (st == S2_OK) {
        ck_assert(text >= (const char *)copy && text + len < (const char *)copy + size);
        ck_assert_int_eq(text[len], 0);
        if (text_copy) {
            *text_copy = malloc(len + 1);
            memcpy(*text_copy, text, len + 1);
        }
    } else {
        ck_assert_ptr_null(text);
        ck_assert_uint_eq(len, 0);
        ck_assert_str_ne(s2_ctx_message(ctx), "");
    }
    free(copy);
    return st;
}

START_TEST(prebuilt_cubin)
{
    size_t size, tlen;
    uint8_t *img = load("manifest_sm80.cubin", &size);
    char *want = (char *)load("manifest.txt", &tlen);
    s2_ctx *ctx = s2_ctx_new();
    char *text;
    ck_assert_int_eq(manifest_of(img, size, &text, ctx), S2_OK);
    ck_assert_str_eq(text, want);
    free(text);

    /* the other global precedes the manifest in .nv.global.init */
    const uint8_t *b;
    size_t n;
    ck_assert_int_eq(s2_elf_find_symbol(ctx, img, size, "other_var", &b, &n), S2_OK);
    const uint8_t other[8] = {1, 0, 0, 0, 2, 0, 0, 0};
    ck_assert_uint_eq(n, 8);
    ck_assert_mem_eq(b, other, 8);
    ck_assert_int_eq(s2_elf_find_symbol(ctx, img, size, "s2c_test_kernel", &b, &n), S2_OK);
    ck_assert_uint_gt(n, 0);
    ck_assert_uint_eq(n % 16, 0); /* SASS instructions are 16 bytes */

    ck_assert_int_eq(s2_elf_find_symbol(ctx, img, size, "zero_var", &b, &n), S2_ERR_PARSE);
    ck_assert_ptr_nonnull(strstr(s2_ctx_message(ctx), "uninitialized"));
    ck_assert_int_eq(s2_elf_find_symbol(ctx, img, size, "no_such", &b, &n), S2_ERR_NOT_FOUND);
    ck_assert_ptr_null(b);
    ck_assert_int_eq(s2_elf_find_symbol(ctx, img, size, "s2c_manifes", &b, &n), S2_ERR_NOT_FOUND);
    ck_assert_int_eq(s2_elf_find_symbol(ctx, img, size, "s2c_manifest_", &b, &n), S2_ERR_NOT_FOUND);
    ck_assert_int_eq(s2_elf_find_symbol(ctx, img, size, "", &b, &n), S2_ERR_INVALID);
    /* the kernel's registers from .nv.info; a variable has none */
    int regs = -1;
    ck_assert_int_eq(s2_elf_regcount(ctx, img, size, "s2c_test_kernel", &regs), S2_OK);
    ck_assert_int_gt(regs, 0);
    ck_assert_int_eq(s2_elf_regcount(ctx, img, size, "other_var", &regs), S2_ERR_NOT_FOUND);
    ck_assert_int_eq(regs, -1);
    ck_assert_int_eq(s2_elf_regcount(ctx, img, size, "no_such", &regs), S2_ERR_NOT_FOUND);
    ck_assert_int_eq(s2_cubin_find_manifest(ctx, NULL, size, (const char **)&b, &n), S2_ERR_INVALID);
    s2_ctx_free(ctx);
    free(want);
    free(img);
}
END_TEST

/* Every prefix of the image: a parse error until the section header table
 * is whole, then the same manifest (nothing after it is read). */
START_TEST(every_truncation)
{
    size_t size, tlen;
    uint8_t *img = load("manifest_sm80.cubin", &size);
    char *want = (char *)load("manifest.txt", &tlen);
    size_t table_end = get(img + 40, 8) + 64 * (size_t)shnum(img);
    ck_assert_uint_le(table_end, size);
    s2_ctx *ctx = s2_ctx_new();
    for (size_t l = 0; l <= size; l++) {
        char *text;
        s2_status st = manifest_of(img, l, &text, ctx);
        if (l < table_end) {
            ck_assert_msg(st == S2_ERR_PARSE, "length %zu: %s", l, s2_status_name(st));
        } else {
            ck_assert_msg(st == S2_OK, "length %zu: %s", l, s2_ctx_message(ctx));
            ck_assert_str_eq(text, want);
            free(text);
        }
    }
    s2_ctx_free(ctx);
    free(want);
    free(img);
}
END_TEST

/* Flip bits in every byte: never a crash or an out-of-bounds read, only
 * OK / PARSE / NOT_FOUND; bytes the reader does not use change nothing. */
START_TEST(every_byte_flipped)
{
    size_t size, tlen;
    uint8_t *img = load("manifest_sm80.cubin", &size);
    char *want = (char *)load("manifest.txt", &tlen);
    s2_ctx *ctx = s2_ctx_new();
    static const uint8_t masks[] = {0x01, 0x10, 0x80, 0xff};
    int counts[S2_STATUS_COUNT_] = {0};
    uint64_t phoff = get(img + 32, 8);
    for (size_t pos = 0; pos < size; pos++) {
        for (size_t m = 0; m < sizeof masks; m++) {
            img[pos] ^= masks[m];
            char *text;
            s2_status st = manifest_of(img, size, &text, ctx);
            ck_assert_msg(st == S2_OK || st == S2_ERR_PARSE || st == S2_ERR_NOT_FOUND,
                          "byte %zu ^ 0x%02x: %s", pos, masks[m], s2_status_name(st));
            counts[st]++;
            int regs = 0;
            s2_status rst = s2_elf_regcount(ctx, img, size, "s2c_test_kernel", &regs);
            ck_assert_msg((rst == S2_OK && regs >= 0) || ((rst == S2_ERR_PARSE || rst == S2_ERR_NOT_FOUND) && regs == -1),
                          "regcount, byte %zu ^ 0x%02x: %s", pos, masks[m], s2_status_name(rst));
            /* the program headers are not part of the lookup */
            if (pos >= phoff && phoff >= get(img + 40, 8)) {
                ck_assert_int_eq(st, S2_OK);
                ck_assert_str_eq(text, want);
            }
            free(text);
            img[pos] ^= masks[m];
        }
    }
    ck_assert_int_gt(counts[S2_OK], 0);
    ck_assert_int_gt(counts[S2_ERR_PARSE], 0);
    ck_assert_int_gt(counts[S2_ERR_NOT_FOUND], 0);
    s2_ctx_free(ctx);
    free(want);
    free(img);
}
END_TEST

typedef void (*mutator)(uint8_t *img);

static void m_class32(uint8_t *img) { img[4] = 1; }
static void m_big_endian(uint8_t *img) { img[5] = 2; }
static void m_magic(uint8_t *img) { img[1] = 'e'; }
static void m_machine(uint8_t *img) { put(img + 18, 2, 62); }
static void m_shoff_huge(uint8_t *img) { put(img + 40, 8, UINT64_MAX - 10); }
static void m_shoff_zero(uint8_t *img) { put(img + 40, 8, 0); }
static void m_shoff_in_header(uint8_t *img) { put(img + 40, 8, 8); }
static void m_shnum_huge(uint8_t *img) { put(img + 60, 2, 0xffff); }
static void m_shentsize_small(uint8_t *img) { put(img + 58, 2, 40); }
static void m_symtab_offset_huge(uint8_t *img) { put(shdr(img, section_of_type(img, 2)) + 24, 8, UINT64_C(1) << 63); }
static void m_symtab_size_huge(uint8_t *img) { put(shdr(img, section_of_type(img, 2)) + 32, 8, UINT64_MAX - 23); }
static void m_symtab_entsize_zero(uint8_t *img) { put(shdr(img, section_of_type(img, 2)) + 56, 8, 0); }
static void m_symtab_entsize_odd(uint8_t *img) { put(shdr(img, section_of_type(img, 2)) + 56, 8, 25); }
static void m_symtab_link_out(uint8_t *img) { put(shdr(img, section_of_type(img, 2)) + 40, 4, 1000); }
static void m_symtab_link_self(uint8_t *img) { put(shdr(img, section_of_type(img, 2)) + 40, 4, section_of_type(img, 2)); }
static void m_symtab_over_shdrs(uint8_t *img) { put(shdr(img, section_of_type(img, 2)) + 24, 8, get(img + 40, 8)); }
static void m_symtab_over_ehdr(uint8_t *img) { put(shdr(img, section_of_type(img, 2)) + 24, 8, 0); }
static void m_sym_value_huge(uint8_t *img) { put(symbol_entry(img, "s2c_manifest") + 8, 8, UINT64_MAX - 2); }
static void m_sym_size_huge(uint8_t *img) { put(symbol_entry(img, "s2c_manifest") + 16, 8, UINT64_MAX); }
static void m_sym_shndx_out(uint8_t *img) { put(symbol_entry(img, "s2c_manifest") + 6, 2, 999); }
static void m_sym_shndx_abs(uint8_t *img) { put(symbol_entry(img, "s2c_manifest") + 6, 2, 0xfff1); }
static void m_sym_undefined(uint8_t *img) { put(symbol_entry(img, "s2c_manifest") + 6, 2, 0); }
static void m_sym_name_out(uint8_t *img) { put(symbol_entry(img, "s2c_manifest"), 4, 0xfffffff0u); }
static void m_sym_no_nul(uint8_t *img)
{
    uint8_t *sym = symbol_entry(img, "s2c_manifest");
    put(sym + 16, 8, get(sym + 16, 8) - 1);
}
static void m_sym_size_zero(uint8_t *img) { put(symbol_entry(img, "s2c_manifest") + 16, 8, 0); }
static void m_sym_nobits(uint8_t *img)
{
    uint8_t *sym = symbol_entry(img, "s2c_manifest");
    put(shdr(img, (unsigned)get(sym + 6, 2)) + 4, 4, 8);
}
static void m_data_over_shdrs(uint8_t *img)
{
    uint8_t *sym = symbol_entry(img, "s2c_manifest");
    put(shdr(img, (unsigned)get(sym + 6, 2)) + 24, 8, get(img + 40, 8) - 8);
}
static void m_strtab_cut(uint8_t *img)
{
    /* the string table ends inside "s2c_manifest": no terminated match */
    uint8_t *tab = shdr(img, section_of_type(img, 2));
    uint8_t *str = shdr(img, (unsigned)get(tab + 40, 4));
    put(str + 32, 8, get(symbol_entry(img, "s2c_manifest"), 4) + 5);
}
static void m_strtab_wrong_type(uint8_t *img)
{
    uint8_t *tab = shdr(img, section_of_type(img, 2));
    put(shdr(img, (unsigned)get(tab + 40, 4)) + 4, 4, 1);
}
static void m_no_symtab(uint8_t *img) { put(shdr(img, section_of_type(img, 2)) + 4, 4, 1); }
static void m_exec_addr_after(uint8_t *img)
{
    uint8_t *sym = symbol_entry(img, "s2c_manifest");
    put(shdr(img, (unsigned)get(sym + 6, 2)) + 16, 8, 0x1000);
}

static const struct {
    const char *what;
    mutator fn;
    s2_status want;
    const char *msg; /* a fragment of the message */
} malformed[] = {
    {"class 32", m_class32, S2_ERR_PARSE, "ELF64"},
    {"big endian", m_big_endian, S2_ERR_PARSE, "little-endian"},
    {"magic", m_magic, S2_ERR_PARSE, "magic"},
    {"machine", m_machine, S2_ERR_PARSE, "CUDA"},
    {"shoff huge", m_shoff_huge, S2_ERR_PARSE, "outside"},
    {"shoff zero", m_shoff_zero, S2_ERR_PARSE, "no section header"},
    {"shoff in header", m_shoff_in_header, S2_ERR_PARSE, "outside"},
    {"shnum huge", m_shnum_huge, S2_ERR_PARSE, "exceed"},
    {"shentsize small", m_shentsize_small, S2_ERR_PARSE, "section header size"},
    {"symtab offset huge", m_symtab_offset_huge, S2_ERR_PARSE, "exceeds the image"},
    {"symtab size huge", m_symtab_size_huge, S2_ERR_PARSE, "exceeds the image"},
    {"symtab entsize 0", m_symtab_entsize_zero, S2_ERR_PARSE, "entry size"},
    {"symtab entsize 25", m_symtab_entsize_odd, S2_ERR_PARSE, "entry size"},
    {"symtab link out", m_symtab_link_out, S2_ERR_PARSE, "links to section"},
    {"symtab link self", m_symtab_link_self, S2_ERR_PARSE, "not a string table"},
    {"symtab over shdrs", m_symtab_over_shdrs, S2_ERR_PARSE, "overlaps"},
    {"symtab over ehdr", m_symtab_over_ehdr, S2_ERR_PARSE, "overlaps"},
    {"st_value huge", m_sym_value_huge, S2_ERR_PARSE, "exceeds its section"},
    {"st_size huge", m_sym_size_huge, S2_ERR_PARSE, "exceeds its section"},
    {"st_shndx out", m_sym_shndx_out, S2_ERR_PARSE, "names section"},
    {"st_shndx abs", m_sym_shndx_abs, S2_ERR_PARSE, "special section"},
    {"undefined", m_sym_undefined, S2_ERR_NOT_FOUND, "no defined symbol"},
    {"st_name out", m_sym_name_out, S2_ERR_NOT_FOUND, "no defined symbol"},
    {"no NUL", m_sym_no_nul, S2_ERR_PARSE, "NUL"},
    {"size zero", m_sym_size_zero, S2_ERR_PARSE, "NUL"},
    {"nobits", m_sym_nobits, S2_ERR_PARSE, "uninitialized"},
    {"data over shdrs", m_data_over_shdrs, S2_ERR_PARSE, "overlaps"},
    {"strtab cut", m_strtab_cut, S2_ERR_NOT_FOUND, "no defined symbol"},
    {"strtab type", m_strtab_wrong_type, S2_ERR_PARSE, "not a string table"},
    {"no symtab", m_no_symtab, S2_ERR_NOT_FOUND, "no symbol table"},
    {"addr after value", m_exec_addr_after, S2_ERR_PARSE, "before its section"},
};

START_TEST(malformed_fields)
{
    size_t size;
    uint8_t *orig = load("manifest_sm80.cubin", &size);
    uint8_t *img = malloc(size);
    s2_ctx *ctx = s2_ctx_new();
    for (size_t i = 0; i < sizeof malformed / sizeof malformed[0]; i++) {
        memcpy(img, orig, size);
        malformed[i].fn(img);
        s2_status st = manifest_of(img, size, NULL, ctx);
        ck_assert_msg(st == malformed[i].want, "%s: %s (%s)", malformed[i].what, s2_status_name(st),
                      s2_ctx_message(ctx));
        ck_assert_msg(strstr(s2_ctx_message(ctx), malformed[i].msg) != NULL, "%s: message \"%s\"",
                      malformed[i].what, s2_ctx_message(ctx));
    }
    s2_ctx_free(ctx);
    free(img);
    free(orig);
}
END_TEST

/* e_shnum == 0 with the count in section 0's sh_size (extended numbering). */
START_TEST(extended_section_count)
{
    size_t size, tlen;
    uint8_t *img = load("manifest_sm80.cubin", &size);
    char *want = (char *)load("manifest.txt", &tlen);
    put(shdr(img, 0) + 32, 8, shnum(img));
    put(img + 60, 2, 0);
    s2_ctx *ctx = s2_ctx_new();
    char *text;
    ck_assert_int_eq(manifest_of(img, size, &text, ctx), S2_OK);
    ck_assert_str_eq(text, want);
    free(text);
    put(shdr(img, 0) + 32, 8, UINT64_MAX);
    ck_assert_int_eq(manifest_of(img, size, NULL, ctx), S2_ERR_PARSE);
    s2_ctx_free(ctx);
    free(want);
    free(img);
}
END_TEST

/* Inputs the fuzzer once crashed on (or found interesting), kept as a
 * regression set: each must be accepted or rejected cleanly. */
START_TEST(fuzz_regressions)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/elf/fuzz", data_dir());
    DIR *d = opendir(dir);
    ck_assert_msg(d != NULL, "%s", dir);
    s2_ctx *ctx = s2_ctx_new();
    int files = 0;
    struct dirent *ent;
    while ((ent = readdir(d)) != NULL) {
        if (ent->d_name[0] == '.')
            continue;
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", dir, ent->d_name);
        char *data;
        size_t size;
        ck_assert_int_eq(s2_read_file(ctx, path, &data, &size), S2_OK);
        s2_status st = manifest_of((uint8_t *)data, size, NULL, ctx);
        ck_assert_msg(st == S2_OK || st == S2_ERR_PARSE || st == S2_ERR_NOT_FOUND, "%s: %s", path,
                      s2_status_name(st));
        free(data);
        files++;
    }
    closedir(d);
    ck_assert_int_gt(files, 0);
    s2_ctx_free(ctx);
}
END_TEST

/* ---- --ptxas: fresh cubins with random manifests ---- */

static char *find_ptxas(void)
{
    const char *env = getenv("S2C_PTXAS");
    if (env && env[0])
        return access(env, X_OK) == 0 ? strdup(env) : NULL;
    const char *home = getenv("CUDA_HOME");
    char path[4096];
    if (home && home[0]) {
        snprintf(path, sizeof path, "%s/bin/ptxas", home);
        if (access(path, X_OK) == 0)
            return strdup(path);
    }
    return access("/usr/local/cuda/bin/ptxas", X_OK) == 0 ? strdup("/usr/local/cuda/bin/ptxas") : NULL;
}

static void assemble_and_check(const char *ptxas, const char *arch, unsigned seed, size_t mlen)
{
    srand(seed);
    char *manifest = malloc(mlen + 1);
    for (size_t i = 0; i < mlen; i++)
        manifest[i] = (i % 61 == 60) ? '\n' : (char)(' ' + rand() % 95);
    manifest[mlen] = 0;

    s2_buf ptx;
    s2_buf_init(&ptx);
    s2_buf_printf(&ptx, ".version 8.0\n.target %s\n.address_size 64\n", arch);
    s2_buf_printf(&ptx, ".global .align 8 .u64 before[3] = {7, 8, 9};\n");
    s2_buf_printf(&ptx, ".visible .global .align 1 .b8 s2c_manifest[%zu] = {", mlen + 1);
    for (size_t i = 0; i <= mlen; i++)
        s2_buf_printf(&ptx, "%s%u", i ? ", " : "", (unsigned char)manifest[i]);
    s2_buf_puts(&ptx, "};\n.visible .entry k(.param .u64 p)\n{\n .reg .u64 %rd<4>;\n"
                      " ld.param.u64 %rd1, [p];\n cvta.to.global.u64 %rd2, %rd1;\n"
                      " ld.global.u64 %rd3, [before+8];\n st.global.u64 [%rd2], %rd3;\n ret;\n}\n");
    ck_assert(!ptx.oom);

    char dir[] = "/tmp/s2c-elf-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char in[64], out[64], cmd[8192];
    snprintf(in, sizeof in, "%s/m.ptx", dir);
    snprintf(out, sizeof out, "%s/m.cubin", dir);
    s2_ctx *ctx = s2_ctx_new();
    ck_assert_int_eq(s2_write_file_atomic(ctx, in, ptx.data, ptx.len), S2_OK);
    snprintf(cmd, sizeof cmd, "'%s' -arch=%s -o '%s' '%s'", ptxas, arch, out, in);
    ck_assert_msg(system(cmd) == 0, "%s", cmd);
    char *cubin;
    size_t size;
    ck_assert_int_eq(s2_read_file(ctx, out, &cubin, &size), S2_OK);
    char *text;
    ck_assert_msg(manifest_of((uint8_t *)cubin, size, &text, ctx) == S2_OK, "seed %u %s: %s", seed, arch,
                  s2_ctx_message(ctx));
    ck_assert_msg(strcmp(text, manifest) == 0, "seed %u %s: manifest differs", seed, arch);
    const uint8_t *b;
    size_t n;
    ck_assert_int_eq(s2_elf_find_symbol(ctx, cubin, size, "before", &b, &n), S2_OK);
    ck_assert_uint_eq(n, 24);
    ck_assert_uint_eq(get(b + 8, 8), 8);
    free(text);
    free(cubin);
    s2_ctx_free(ctx);
    s2_buf_free(&ptx);
    free(manifest);
    unlink(in);
    unlink(out);
    rmdir(dir);
}

START_TEST(ptxas_cubins)
{
    char *ptxas = find_ptxas();
    ck_assert_ptr_nonnull(ptxas);
    unsigned seed = (unsigned)getpid();
    printf("ptxas_cubins: seed %u\n", seed);
    static const char *archs[] = {"sm_80", "sm_90a"};
    static const size_t lens[] = {1, 100, 5000, 70000};
    for (int a = 0; a < 2; a++)
        for (int l = 0; l < 4; l++)
            assemble_and_check(ptxas, archs[a], seed + (unsigned)(a * 4 + l), lens[l]);
    free(ptxas);
}
END_TEST

/* The committed manifest.ptx still assembles to the committed manifest. */
START_TEST(ptxas_committed_ptx)
{
    char *ptxas = find_ptxas();
    ck_assert_ptr_nonnull(ptxas);
    char dir[] = "/tmp/s2c-elf-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char out[64], cmd[8192];
    snprintf(out, sizeof out, "%s/m.cubin", dir);
    snprintf(cmd, sizeof cmd, "'%s' -arch=sm_80 -o '%s' '%s/elf/manifest.ptx'", ptxas, out, data_dir());
    ck_assert_msg(system(cmd) == 0, "%s", cmd);
    s2_ctx *ctx = s2_ctx_new();
    char *cubin, *text;
    size_t size, tlen;
    ck_assert_int_eq(s2_read_file(ctx, out, &cubin, &size), S2_OK);
    char *want = (char *)load("manifest.txt", &tlen);
    ck_assert_int_eq(manifest_of((uint8_t *)cubin, size, &text, ctx), S2_OK);
    ck_assert_str_eq(text, want);
    free(text);
    free(want);
    free(cubin);
    s2_ctx_free(ctx);
    unlink(out);
    rmdir(dir);
    free(ptxas);
}
END_TEST

int main(int argc, char **argv)
{
    bool with_ptxas = argc > 1 && strcmp(argv[1], "--ptxas") == 0;
    Suite *s = suite_create("elf");
    TCase *tc = tcase_create("elf");
    tcase_set_timeout(tc, 120);
    if (with_ptxas) {
        char *ptxas = find_ptxas();
        if (!ptxas) {
            printf("no ptxas: skipped\n");
            return 77;
        }
        free(ptxas);
        tcase_add_test(tc, ptxas_cubins);
        tcase_add_test(tc, ptxas_committed_ptx);
    } else {
        tcase_add_test(tc, prebuilt_cubin);
        tcase_add_test(tc, every_truncation);
        tcase_add_test(tc, every_byte_flipped);
        tcase_add_test(tc, malformed_fields);
        tcase_add_test(tc, extended_section_count);
        tcase_add_test(tc, fuzz_regressions);
    }
    suite_add_tcase(s, tc);
    return s2t_run_suite(s);
}
