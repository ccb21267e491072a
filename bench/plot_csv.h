/* The rows bench/plot.py reads (`kind,config,seq_len,impl,ms`), shared by
 * bench_fwd and bench_bwd.  Header only. */
#ifndef S2C_BENCH_PLOT_CSV_H
#define S2C_BENCH_PLOT_CSV_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --csv FILE: opened for appending; the column line when it is empty. */
static inline FILE *plot_csv_open(const char *path, const char *bench)
{
    FILE *f = fopen(path, "a");
    if (!f) {
        fprintf(stderr, "%s: --csv %s: cannot open it for appending\n", bench, path);
        return NULL;
    }
    if (ftell(f) == 0)
        fprintf(f, "# s2c times from %s (median ms)\nkind,config,seq_len,impl,ms\n", bench);
    return f;
}

/* A config's name without its length suffix (b64_8k -> b64): one line per
 * family in the plot. */
static inline void plot_family(const char *name, char *out, size_t cap)
{
    snprintf(out, cap, "%s", name);
    char *u = strrchr(out, '_'), *end = NULL;
    if (u && u[1] >= '0' && u[1] <= '9' && (strtol(u + 1, &end, 10), !strcmp(end, "k")))
        *u = 0;
}

#endif
