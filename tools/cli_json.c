/* JSON output of the s2c commands (--format json): strings and numbers that
 * every JSON parser takes, and the pattern object check and info share. */
#include "cli.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* The length of the valid UTF-8 sequence at s (0: not one). */
static int utf8_len(const unsigned char *s)
{
    if (s[0] < 0x80)
        return 1;
    int n = s[0] >= 0xc2 && s[0] <= 0xdf ? 2 : (s[0] & 0xf0) == 0xe0 ? 3 : s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : 0;
    for (int i = 1; i < n; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    /* overlong 3- and 4-byte forms, surrogates, past U+10FFFF */
    if ((n == 3 && s[0] == 0xe0 && s[1] < 0xa0) || (n == 3 && s[0] == 0xed && s[1] >= 0xa0) ||
        (n == 4 && s[0] == 0xf0 && s[1] < 0x90) || (n == 4 && s[0] == 0xf4 && s[1] >= 0x90))
        return 0;
    return n;
}

void json_str(FILE *f, const char *s)
{
    if (!s) {
        fputs("null", f);
        return;
    }
    fputc('"', f);
    for (const unsigned char *c = (const unsigned char *)s; *c;) {
        int n = utf8_len(c);
        if (n == 0) {
            fputs("\\ufffd", f); /* a byte that is not UTF-8 */
            c++;
        } else if (n > 1) {
            fwrite(c, 1, (size_t)n, f);
            c += n;
        } else {
            if (*c == '"' || *c == '\\')
                fprintf(f, "\\%c", *c);
            else if (*c == '\n')
                fputs("\\n", f);
            else if (*c == '\t')
                fputs("\\t", f);
            else if (*c < 0x20 || *c == 0x7f)
                fprintf(f, "\\u%04x", *c);
            else
                fputc(*c, f);
            c++;
        }
    }
    fputc('"', f);
}

void json_num(FILE *f, double v)
{
    if (!isfinite(v))
        fputs("null", f);
    else if (v == floor(v) && fabs(v) < 9007199254740992.0)
        fprintf(f, "%.0f", v);
    else
        fprintf(f, "%.17g", v);
}

/* "name", "heads", "kv_heads", "block_size", "causal", "max_seq_len" (0:
 * none), "dense_heads", "masks", "ranges": the members of a pattern object */
void json_pattern_fields(FILE *f, const s2_pattern *p)
{
    int dense = 0;
    for (int q = 0; p->rules && q < p->heads; q++)
        dense += p->rules[q].dense;
    fputs("\"name\": ", f);
    json_str(f, p->name);
    fprintf(f, ", \"heads\": %d, \"kv_heads\": %d, \"block_size\": %d, \"causal\": %s, \"max_seq_len\": %lld, "
               "\"dense_heads\": %d, \"masks\": %d, \"ranges\": %d",
            p->heads, p->kv_heads, p->block_size, p->causal ? "true" : "false", (long long)p->max_seq_len, dense,
            p->num_masks, p->num_ranges);
}

void json_pattern(FILE *f, const s2_pattern *p)
{
    fputc('{', f);
    json_pattern_fields(f, p);
    fputc('}', f);
}
