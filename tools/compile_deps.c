/* s2c compile -MD: the Make depfile, "TARGETS: PATTERN MASKFILE...", with
 * paths escaped as GNU make reads them. */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A path with a newline, or ending in a backslash (the line's continuation, or
 * half of an escape), has no spelling Make reads back: refused. */
static int dep_path_check(const char *path)
{
    const char *nl = strchr(path, '\n');
    size_t n = strlen(path);
    if (!nl && !(n && path[n - 1] == '\\'))
        return 0;
    char shown[300];
    size_t o = 0;
    const char *c = path;
    for (; *c && o + 6 < sizeof shown; c++) {
        if (*c == '\n')
            shown[o++] = '\\', shown[o++] = 'n';
        else
            shown[o++] = *c;
    }
    snprintf(shown + o, sizeof shown - o, "%s", *c ? "..." : "");
    return input_fail("cannot write '%s' in a depfile: Make cannot read a path %s", shown,
                      nl ? "with a newline" : "ending in a backslash");
}

static int dep_add(char **list, int *n, int max, const char *path)
{
    for (int i = 0; i < *n; i++)
        if (strcmp(list[i], path) == 0)
            return 0;
    if (*n >= max || !(list[*n] = strdup(path)))
        return input_fail("out of memory");
    (*n)++;
    return 0;
}

int deps_add_target(deps *d, const char *path)
{
    return dep_add(d->targets, &d->num_targets, (int)(sizeof d->targets / sizeof d->targets[0]), path);
}

int deps_add_masks(deps *d, const s2_pattern_set *set)
{
    for (int i = 0; i < s2_pattern_set_count(set); i++) {
        const s2_pattern *p = s2_pattern_set_get(set, i);
        for (int m = 0; m < p->num_masks; m++) {
            const char *f = p->masks[m].file;
            if (f && ((d->wanted && dep_path_check(f)) ||
                      dep_add(d->masks, &d->num_masks, (int)(sizeof d->masks / sizeof d->masks[0]), f)))
                return EXIT_INPUT;
        }
    }
    return 0;
}

int deps_check(const deps *d, const char *output)
{
    if (!d->wanted)
        return 0;
    int rc = d->pattern ? dep_path_check(d->pattern) : 0;
    return rc ? rc : strcmp(output, "-") != 0 ? dep_path_check(output) : 0;
}

void deps_free(deps *d)
{
    for (int i = 0; i < d->num_targets; i++)
        free(d->targets[i]);
    for (int i = 0; i < d->num_masks; i++)
        free(d->masks[i]);
}

/* A path as GNU make reads it in a rule: a space, tab, '#' and ':' get a '\'
 * and the backslashes right before them are doubled (make reads 2N+1
 * backslashes and the character as N backslashes and the character itself);
 * '$' is "$$"; other backslashes stay single.  This is GCC's spelling, except
 * that GCC neither escapes ':' nor doubles the backslashes before '#'. */
static void make_escape(s2_buf *b, const char *path)
{
    size_t slashes = 0;
    for (const char *c = path; *c; c++) {
        if (*c == '\\') {
            slashes++;
            continue;
        }
        bool special = *c == ' ' || *c == '\t' || *c == '#' || *c == ':';
        for (size_t i = 0; i < (special ? 2 * slashes + 1 : slashes); i++)
            s2_buf_puts(b, "\\");
        slashes = 0;
        if (*c == '$')
            s2_buf_puts(b, "$");
        s2_buf_append(b, c, 1);
    }
    for (size_t i = 0; i < slashes; i++) /* not reached: dep_path_check refuses a trailing backslash */
        s2_buf_puts(b, "\\");
}

int deps_write(const deps *d, const char *target, const char *path)
{
    s2_buf b;
    s2_buf_init(&b);
    if (target) {
        s2_buf_puts(&b, target);
    } else {
        for (int i = 0; i < d->num_targets; i++) {
            if (i)
                s2_buf_puts(&b, " ");
            make_escape(&b, d->targets[i]);
        }
    }
    s2_buf_puts(&b, ":");
    if (d->pattern) {
        s2_buf_puts(&b, " ");
        make_escape(&b, d->pattern);
    }
    for (int i = 0; i < d->num_masks; i++) {
        s2_buf_puts(&b, " ");
        make_escape(&b, d->masks[i]);
    }
    s2_buf_puts(&b, "\n");
    int rc = b.oom ? input_fail("out of memory") : write_output(path, b.data, b.len);
    s2_buf_free(&b);
    return rc;
}

char *deps_default_path(const char *out)
{
    const char *base = strrchr(out, '/');
    base = base ? base + 1 : out;
    const char *dot = strrchr(base, '.');
    size_t stem = dot && dot != base ? (size_t)(dot - out) : strlen(out);
    char *s = malloc(stem + 3);
    if (s)
        snprintf(s, stem + 3, "%.*s.d", (int)stem, out);
    return s;
}
