/* "Did you mean ...?": the closest of a few known names to a misspelt word. */
#include "util.h"

#include <string.h>

enum { MAX_WORD = 64 }; /* longer words get no suggestion */

size_t s2_edit_distance(const char *a, size_t an, const char *b, size_t bn)
{
    if (an > MAX_WORD || bn > MAX_WORD)
        return SIZE_MAX;
    /* three rows of the optimal-string-alignment table: i - 2, i - 1, i */
    size_t rows[3][MAX_WORD + 1];
    for (size_t j = 0; j <= bn; j++)
        rows[0][j] = rows[1][j] = j;
    for (size_t i = 1; i <= an; i++) {
        size_t *pp = rows[(i + 1) % 3], *prev = rows[(i + 2) % 3], *cur = rows[i % 3];
        cur[0] = i;
        for (size_t j = 1; j <= bn; j++) {
            size_t cost = a[i - 1] != b[j - 1];
            size_t d = prev[j - 1] + cost;
            if (prev[j] + 1 < d)
                d = prev[j] + 1;
            if (cur[j - 1] + 1 < d)
                d = cur[j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && pp[j - 2] + 1 < d)
                d = pp[j - 2] + 1; /* a transposition */
            cur[j] = d;
        }
    }
    return rows[an % 3][bn];
}

/* The most edits a suggestion may be away, as GCC's spellchecker allows:
 * a third of the longer length, at least 1, none between one-letter words. */
static size_t cutoff(size_t a, size_t b)
{
    size_t hi = a > b ? a : b, lo = a < b ? a : b;
    if (hi <= 1)
        return 0;
    if (hi - lo <= 1)
        return hi / 3 > 1 ? hi / 3 : 1;
    return (hi + 2) / 3;
}

const char *s2_suggest(const char *word, size_t len, const char *const *names, size_t n)
{
    const char *best = NULL;
    size_t best_d = SIZE_MAX;
    for (size_t i = 0; i < n; i++) {
        size_t nl = strlen(names[i]);
        size_t d = s2_edit_distance(word, len, names[i], nl);
        if (d > 0 && d <= cutoff(len, nl) && d < best_d) {
            best = names[i];
            best_d = d;
        }
    }
    return best;
}
