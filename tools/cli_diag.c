/* s2c's diagnostics: one style, as gcc's, on stderr.
 *
 *   s2c: error: MESSAGE             usage errors (exit 2) and bad input (exit 1)
 *   FILE:LINE:COL: error: MESSAGE   a pattern or mask file's error, where it is
 *   s2c: note: try 's2c CMD --help' after a usage error
 */
#include "cli.h"
#include "util.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *current_cmd; /* for the note after a usage error */

void cli_set_command(const char *name) { current_cmd = name; }

const char *cli_command_prefix(void) { return current_cmd ? current_cmd : ""; }

static void vdiag(const char *severity, const char *fmt, va_list ap)
{
    fprintf(stderr, "s2c: %s: ", severity);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

void diag(const char *severity, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vdiag(severity, fmt, ap);
    va_end(ap);
}

int usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vdiag("error", fmt, ap);
    va_end(ap);
    if (current_cmd)
        diag("note", "try 's2c %s --help'", current_cmd);
    else
        diag("note", "try 's2c --help'");
    return EXIT_USAGE;
}

int input_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vdiag("error", fmt, ap);
    va_end(ap);
    return EXIT_INPUT;
}

/* The length of a leading "FILE:LINE:COL: " (the library's pattern and mask
 * errors), 0 when msg has none: its first ": " must end a ":digits:digits". */
static size_t location_len(const char *msg)
{
    const char *end = strstr(msg, ": ");
    if (!end)
        return 0;
    const char *p = end;
    for (int field = 0; field < 2; field++) {
        const char *digits = p;
        while (p > msg && isdigit((unsigned char)p[-1]))
            p--;
        if (p == digits || p == msg || p[-1] != ':')
            return 0;
        p--;
    }
    return p > msg ? (size_t)(end - msg) + 2 : 0;
}

void diag_format(char *buf, size_t size, const char *severity, const char *msg)
{
    size_t loc = location_len(msg);
    if (loc)
        snprintf(buf, size, "%.*s%s: %s", (int)loc, msg, severity, msg + loc);
    else
        snprintf(buf, size, "s2c: %s: %s", severity, msg);
}

int input_error(s2_ctx *ctx)
{
    const char *msg = s2_ctx_message(ctx);
    char line[4096];
    diag_format(line, sizeof line, "error", msg[0] ? msg : s2_status_name(s2_ctx_status(ctx)));
    fprintf(stderr, "%s\n", line);
    return EXIT_INPUT;
}

const char *did_you_mean(char *buf, size_t size, const char *word, const char *const *names, size_t n)
{
    const char *near = word ? s2_suggest(word, strlen(word), names, n) : NULL;
    if (near)
        snprintf(buf, size, "; did you mean '%s'?", near);
    else if (size)
        buf[0] = '\0';
    return buf;
}
