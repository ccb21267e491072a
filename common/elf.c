/* A small, defensive ELF64 (little-endian) symbol reader for cubins.
 *
 * Cubins are ELF64 images (e_machine EM_CUDA) with one .symtab; a global
 * variable's symbol names its section (st_shndx) and, in ptxas output,
 * st_value is its offset inside that section (sh_addr is 0).  For images of
 * another type st_value is an address, so the offset is st_value - sh_addr.
 *
 * Everything read from the image is untrusted: each field is read byte-wise
 * (no unaligned loads), each offset/length pair is checked against the image
 * size without overflow, and the sections used must not overlap the ELF
 * header or the section header table. */
#include "elf.h"

#include "util.h"

#include <string.h>

enum {
    EHDR_SIZE = 64,
    SHDR_MIN = 64,
    SYM_MIN = 24,
    ET_REL = 1,
    EM_CUDA = 190,
    SHT_SYMTAB = 2,
    SHT_STRTAB = 3,
    SHT_NOBITS = 8,
    SHT_DYNSYM = 11,
    SHN_UNDEF = 0,
    SHN_LORESERVE = 0xff00,
};

static uint64_t rd_le(const uint8_t *p, int bytes)
{
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

typedef struct elf_image {
    const uint8_t *p;
    size_t size;
    unsigned type;       /* e_type */
    uint64_t shoff;      /* section header table */
    uint64_t shnum;
    uint64_t shentsize;
    uint64_t shstrndx;   /* e_shstrndx (extended: section 0's sh_link) */
} elf_image;

typedef struct elf_shdr {
    unsigned type;
    uint64_t addr, offset, size, entsize;
    uint32_t name, link;
} elf_shdr;

/* [off, off + len) lies inside the image. */
static bool in_image(const elf_image *e, uint64_t off, uint64_t len)
{
    return off <= e->size && len <= e->size - off;
}

static bool overlaps(uint64_t a, uint64_t alen, uint64_t b, uint64_t blen)
{
    return alen && blen && a < b + blen && b < a + alen;
}

static s2_status read_header(s2_ctx *ctx, elf_image *e, const void *image, size_t size)
{
    const uint8_t *p = image;
    e->p = p;
    e->size = size;
    if (size < EHDR_SIZE)
        return s2_fail(ctx, S2_ERR_PARSE, "ELF: image of %zu bytes is shorter than an ELF64 header", size);
    if (memcmp(p, "\177ELF", 4) != 0)
        return s2_fail(ctx, S2_ERR_PARSE, "ELF: bad magic (not an ELF image)");
    if (p[4] != 2)
        return s2_fail(ctx, S2_ERR_PARSE, "ELF: class %u is not ELF64", p[4]);
    if (p[5] != 1)
        return s2_fail(ctx, S2_ERR_PARSE, "ELF: data encoding %u is not little-endian", p[5]);
    e->type = (unsigned)rd_le(p + 16, 2);
    e->shoff = rd_le(p + 40, 8);
    e->shentsize = rd_le(p + 58, 2);
    e->shnum = rd_le(p + 60, 2);
    e->shstrndx = rd_le(p + 62, 2);
    if (e->shoff == 0)
        return s2_fail(ctx, S2_ERR_PARSE, "ELF: no section header table");
    if (e->shentsize < SHDR_MIN)
        return s2_fail(ctx, S2_ERR_PARSE, "ELF: section header size %u is below %d",
                       (unsigned)e->shentsize, SHDR_MIN);
    if (e->shoff < EHDR_SIZE || !in_image(e, e->shoff, SHDR_MIN))
        return s2_fail(ctx, S2_ERR_PARSE, "ELF: section header table offset %llu is outside the image",
                       (unsigned long long)e->shoff);
    /* Extended numbering: with e_shnum == 0 the count is section 0's sh_size. */
    if (e->shnum == 0)
        e->shnum = rd_le(p + e->shoff + 32, 8);
    if (e->shstrndx == 0xffff)
        e->shstrndx = rd_le(p + e->shoff + 40, 4);
    if (e->shnum == 0 || e->shnum > (size - e->shoff) / e->shentsize)
        return s2_fail(ctx, S2_ERR_PARSE, "ELF: %llu section headers of %u bytes at %llu exceed the image (%zu bytes)",
                       (unsigned long long)e->shnum, (unsigned)e->shentsize,
                       (unsigned long long)e->shoff, size);
    return S2_OK;
}

static void read_shdr(const elf_image *e, uint64_t i, elf_shdr *s)
{
    const uint8_t *h = e->p + e->shoff + i * e->shentsize;
    s->name = (uint32_t)rd_le(h, 4);
    s->type = (unsigned)rd_le(h + 4, 4);
    s->addr = rd_le(h + 16, 8);
    s->offset = rd_le(h + 24, 8);
    s->size = rd_le(h + 32, 8);
    s->link = (uint32_t)rd_le(h + 40, 4);
    s->entsize = rd_le(h + 56, 8);
}

/* The file contents of section i are inside the image and clear of the
 * ELF header and the section header table. */
static s2_status check_contents(s2_ctx *ctx, const elf_image *e, uint64_t i, const elf_shdr *s)
{
    if (!in_image(e, s->offset, s->size))
        return s2_fail(ctx, S2_ERR_PARSE, "ELF: section %llu (offset %llu, size %llu) exceeds the image (%zu bytes)",
                       (unsigned long long)i, (unsigned long long)s->offset,
                       (unsigned long long)s->size, e->size);
    if (overlaps(s->offset, s->size, 0, EHDR_SIZE) ||
        overlaps(s->offset, s->size, e->shoff, e->shnum * e->shentsize))
        return s2_fail(ctx, S2_ERR_PARSE, "ELF: section %llu overlaps the ELF or section headers",
                       (unsigned long long)i);
    return S2_OK;
}

/* Does the string at strtab[off] equal name (terminated inside strtab)? */
static bool name_is(const uint8_t *strtab, uint64_t strsz, uint64_t off, const char *name, size_t namelen)
{
    return off < strsz && strsz - off > namelen && memcmp(strtab + off, name, namelen) == 0 &&
           strtab[off + namelen] == 0;
}

/* The bytes of symbol `sym` (an entry of a validated table). */
static s2_status symbol_bytes(s2_ctx *ctx, const elf_image *e, const uint8_t *sym, const char *name,
                              const uint8_t **bytes, size_t *len)
{
    unsigned shndx = (unsigned)rd_le(sym + 6, 2);
    uint64_t value = rd_le(sym + 8, 8), ssize = rd_le(sym + 16, 8);
    if (shndx >= SHN_LORESERVE)
        return s2_fail(ctx, S2_ERR_PARSE, "ELF: symbol %s has the special section index 0x%x, not a section's bytes",
                       name, shndx);
    if (shndx >= e->shnum)
        return s2_fail(ctx, S2_ERR_PARSE, "ELF: symbol %s names section %u of %llu", name, shndx,
                       (unsigned long long)e->shnum);
    elf_shdr s;
    read_shdr(e, shndx, &s);
    if (s.type == SHT_NOBITS)
        return s2_fail(ctx, S2_ERR_PARSE, "ELF: symbol %s is in a section without contents (uninitialized)", name);
    s2_status st = check_contents(ctx, e, shndx, &s);
    if (st != S2_OK)
        return st;
    uint64_t off = value;
    if (e->type != ET_REL) {
        if (value < s.addr)
            return s2_fail(ctx, S2_ERR_PARSE, "ELF: symbol %s lies before its section", name);
        off = value - s.addr;
    }
    if (off > s.size || ssize > s.size - off)
        return s2_fail(ctx, S2_ERR_PARSE, "ELF: symbol %s (offset %llu, size %llu) exceeds its section (%llu bytes)",
                       name, (unsigned long long)off, (unsigned long long)ssize, (unsigned long long)s.size);
    *bytes = e->p + s.offset + off;
    *len = (size_t)ssize;
    return S2_OK;
}

/* Section i is a sound symbol table: entries inside the image, a string
 * table linked; *str receives that string table's header. */
static s2_status open_table(s2_ctx *ctx, const elf_image *e, uint64_t i, const elf_shdr *tab, elf_shdr *str)
{
    s2_status st = check_contents(ctx, e, i, tab);
    if (st != S2_OK)
        return st;
    if (tab->entsize < SYM_MIN || tab->size % tab->entsize != 0)
        return s2_fail(ctx, S2_ERR_PARSE, "ELF: symbol table %llu has entry size %llu for %llu bytes",
                       (unsigned long long)i, (unsigned long long)tab->entsize,
                       (unsigned long long)tab->size);
    if (tab->link >= e->shnum)
        return s2_fail(ctx, S2_ERR_PARSE, "ELF: symbol table %llu links to section %u of %llu",
                       (unsigned long long)i, tab->link, (unsigned long long)e->shnum);
    read_shdr(e, tab->link, str);
    if (str->type != SHT_STRTAB)
        return s2_fail(ctx, S2_ERR_PARSE, "ELF: symbol table %llu links to section %u, which is not a string table",
                       (unsigned long long)i, tab->link);
    return check_contents(ctx, e, tab->link, str);
}

/* The entry offset of defined symbol `name` in the sound table `tab`; false when absent. */
static bool table_lookup(const elf_image *e, const elf_shdr *tab, const elf_shdr *str, const char *name,
                         uint64_t *at)
{
    const uint8_t *syms = e->p + tab->offset, *strtab = e->p + str->offset;
    size_t namelen = strlen(name);
    for (uint64_t off = 0; off < tab->size; off += tab->entsize) {
        const uint8_t *sym = syms + off;
        if ((unsigned)rd_le(sym + 6, 2) == SHN_UNDEF)
            continue;
        if (name_is(strtab, str->size, rd_le(sym, 4), name, namelen)) {
            *at = off;
            return true;
        }
    }
    return false;
}

/* Look for `name` in the symbol table of section i.  S2_ERR_NOT_FOUND when
 * the table is sound but has no defined symbol of that name. */
static s2_status search_table(s2_ctx *ctx, const elf_image *e, uint64_t i, const elf_shdr *tab,
                              const char *name, const uint8_t **bytes, size_t *len)
{
    elf_shdr str;
    uint64_t at;
    s2_status st = open_table(ctx, e, i, tab, &str);
    if (st != S2_OK)
        return st;
    if (!table_lookup(e, tab, &str, name, &at))
        return S2_ERR_NOT_FOUND;
    return symbol_bytes(ctx, e, e->p + tab->offset + at, name, bytes, len);
}

s2_status s2_elf_find_symbol(s2_ctx *ctx, const void *image, size_t size, const char *name,
                             const uint8_t **bytes, size_t *len)
{
    if (!image || !name || !name[0] || !bytes || !len)
        return s2_fail(ctx, S2_ERR_INVALID, "s2_elf_find_symbol: invalid arguments");
    *bytes = NULL;
    *len = 0;
    elf_image e;
    s2_status st = read_header(ctx, &e, image, size);
    if (st != S2_OK)
        return st;
    bool any_table = false;
    for (uint64_t i = 0; i < e.shnum; i++) {
        elf_shdr s;
        read_shdr(&e, i, &s);
        if (s.type != SHT_SYMTAB && s.type != SHT_DYNSYM)
            continue;
        any_table = true;
        st = search_table(ctx, &e, i, &s, name, bytes, len);
        if (st != S2_ERR_NOT_FOUND)
            return st;
    }
    return s2_fail(ctx, S2_ERR_NOT_FOUND, any_table ? "ELF: no defined symbol %s" : "ELF: no symbol table (looking for %s)",
                   name);
}

/* ---- EIATTR_REGCOUNT from .nv.info ---- */

enum {
    EIFMT_NVAL = 1, EIFMT_BVAL = 2, EIFMT_HVAL = 3, EIFMT_SVAL = 4, /* record formats */
    EIATTR_REGCOUNT = 0x2f,
    MAX_REGS = 65535,
};

/* Walk the records of .nv.info section i for REGCOUNT of symbol index sym
 * (any symbol when !match: a kernel's own .nv.info.NAME).  Each record is a
 * format byte, an attribute byte and a 2-byte value, or for EIFMT_SVAL a
 * 2-byte size followed by that many bytes. */
static s2_status info_regcount(s2_ctx *ctx, const elf_image *e, uint64_t i, const elf_shdr *s, bool match,
                               uint64_t sym, int *regs)
{
    s2_status st = check_contents(ctx, e, i, s);
    if (st != S2_OK)
        return st;
    const uint8_t *d = e->p + s->offset;
    for (uint64_t o = 0; o < s->size;) {
        if (s->size - o < 4)
            return s2_fail(ctx, S2_ERR_PARSE, "ELF: section %llu: a %llu-byte record at offset %llu",
                           (unsigned long long)i, (unsigned long long)(s->size - o), (unsigned long long)o);
        unsigned fmt = d[o], attr = d[o + 1];
        uint64_t payload = 0;
        if (fmt == EIFMT_SVAL)
            payload = rd_le(d + o + 2, 2);
        else if (fmt != EIFMT_NVAL && fmt != EIFMT_BVAL && fmt != EIFMT_HVAL)
            return s2_fail(ctx, S2_ERR_PARSE, "ELF: section %llu: unknown record format %u at offset %llu",
                           (unsigned long long)i, fmt, (unsigned long long)o);
        if (payload > s->size - o - 4)
            return s2_fail(ctx, S2_ERR_PARSE, "ELF: section %llu: the record at offset %llu (%llu bytes) overruns "
                           "the section (%llu bytes)", (unsigned long long)i, (unsigned long long)o,
                           (unsigned long long)payload, (unsigned long long)s->size);
        if (attr == EIATTR_REGCOUNT && fmt == EIFMT_SVAL && payload >= 8 && (!match || rd_le(d + o + 4, 4) == sym)) {
            uint64_t v = rd_le(d + o + 8, 4);
            if (v > MAX_REGS)
                return s2_fail(ctx, S2_ERR_PARSE, "ELF: section %llu: a register count of %llu",
                               (unsigned long long)i, (unsigned long long)v);
            *regs = (int)v;
            return S2_OK;
        }
        o += 4 + payload;
    }
    return S2_ERR_NOT_FOUND;
}

s2_status s2_elf_regcount(s2_ctx *ctx, const void *image, size_t size, const char *name, int *regs)
{
    if (!image || !name || !name[0] || !regs)
        return s2_fail(ctx, S2_ERR_INVALID, "s2_elf_regcount: invalid arguments");
    *regs = -1;
    elf_image e;
    s2_status st = read_header(ctx, &e, image, size);
    if (st != S2_OK)
        return st;
    if (e.shstrndx == 0 || e.shstrndx >= e.shnum)
        return s2_fail(ctx, S2_ERR_PARSE, "ELF: section name table %llu of %llu sections",
                       (unsigned long long)e.shstrndx, (unsigned long long)e.shnum);
    elf_shdr names;
    read_shdr(&e, e.shstrndx, &names);
    if (names.type != SHT_STRTAB)
        return s2_fail(ctx, S2_ERR_PARSE, "ELF: section name table %llu is not a string table",
                       (unsigned long long)e.shstrndx);
    if ((st = check_contents(ctx, &e, e.shstrndx, &names)) != S2_OK)
        return st;
    const uint8_t *shstr = e.p + names.offset;
    /* the kernel's own section first, then the module's .nv.info by symbol index */
    size_t namelen = strlen(name);
    for (uint64_t i = 0; i < e.shnum; i++) {
        elf_shdr s;
        read_shdr(&e, i, &s);
        if (s.name < names.size && names.size - s.name > 9 + namelen && memcmp(shstr + s.name, ".nv.info.", 9) == 0 &&
            name_is(shstr, names.size, s.name + 9, name, namelen)) {
            st = info_regcount(ctx, &e, i, &s, false, 0, regs);
            if (st != S2_ERR_NOT_FOUND)
                return st;
        }
    }
    for (uint64_t i = 0; i < e.shnum; i++) {
        elf_shdr s, tab, str;
        read_shdr(&e, i, &s);
        if (!name_is(shstr, names.size, s.name, ".nv.info", 8))
            continue;
        /* its sh_link names the symbol table the records index */
        if (s.link == 0 || s.link >= e.shnum)
            return s2_fail(ctx, S2_ERR_PARSE, "ELF: .nv.info (section %llu) links to section %u of %llu",
                           (unsigned long long)i, s.link, (unsigned long long)e.shnum);
        read_shdr(&e, s.link, &tab);
        if (tab.type != SHT_SYMTAB)
            return s2_fail(ctx, S2_ERR_PARSE, "ELF: .nv.info (section %llu) links to section %u, not a symbol table",
                           (unsigned long long)i, s.link);
        if ((st = open_table(ctx, &e, s.link, &tab, &str)) != S2_OK)
            return st;
        uint64_t at;
        if (!table_lookup(&e, &tab, &str, name, &at))
            return s2_fail(ctx, S2_ERR_NOT_FOUND, "ELF: no defined symbol %s", name);
        st = info_regcount(ctx, &e, i, &s, true, at / tab.entsize, regs);
        if (st != S2_ERR_NOT_FOUND)
            return st;
    }
    return s2_fail(ctx, S2_ERR_NOT_FOUND, "ELF: no EIATTR_REGCOUNT for %s", name);
}
