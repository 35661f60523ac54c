/* SPDX-License-Identifier: BSD-3-Clause */
/* cohort-bench --svg: plot bus bandwidth against message size from the JSON files that earlier
 * runs wrote with --json (see docs/bench.md for the schema). No communication, no library call.
 * Contains a small JSON reader (enough for any well-formed JSON file) and the SVG writer. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench.h"

/* ------------------------------------------------------------------------------------------ */
/* JSON reader                                                                                 */

typedef enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ } jtype_t;

typedef struct jv {
    jtype_t type;
    double num;            /* J_NUM, J_BOOL */
    char *str;             /* J_STR */
    size_t n;              /* J_ARR, J_OBJ: number of items */
    struct jv *items;      /* J_ARR, J_OBJ */
    char **keys;           /* J_OBJ */
} jv_t;

typedef struct {
    const char *p, *end;
    int depth;
    char err[128];
} jparser_t;

static void jv_free(jv_t *v)
{
    if (v->type == J_STR)
        free(v->str);
    if (v->type == J_ARR || v->type == J_OBJ) {
        for (size_t i = 0; i < v->n; i++) {
            jv_free(&v->items[i]);
            if (v->keys)
                free(v->keys[i]);
        }
        free(v->items);
        free(v->keys);
    }
    memset(v, 0, sizeof *v);
}

static void jskip(jparser_t *jp)
{
    while (jp->p < jp->end && (*jp->p == ' ' || *jp->p == '\t' || *jp->p == '\n' ||
                               *jp->p == '\r'))
        jp->p++;
}

static int jfail(jparser_t *jp, const char *what)
{
    if (!jp->err[0])
        snprintf(jp->err, sizeof jp->err, "%s", what);
    return -1;
}

static void put_utf8(char *out, size_t *len, unsigned cp)
{
    if (cp < 0x80) {
        out[(*len)++] = (char)cp;
    } else if (cp < 0x800) {
        out[(*len)++] = (char)(0xc0 | (cp >> 6));
        out[(*len)++] = (char)(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
        out[(*len)++] = (char)(0xe0 | (cp >> 12));
        out[(*len)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[(*len)++] = (char)(0x80 | (cp & 0x3f));
    } else {
        out[(*len)++] = (char)(0xf0 | (cp >> 18));
        out[(*len)++] = (char)(0x80 | ((cp >> 12) & 0x3f));
        out[(*len)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[(*len)++] = (char)(0x80 | (cp & 0x3f));
    }
}

static int hex4(const char *s, unsigned *out)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char ch = s[i];
        v <<= 4;
        if (ch >= '0' && ch <= '9')
            v |= (unsigned)(ch - '0');
        else if (ch >= 'a' && ch <= 'f')
            v |= (unsigned)(ch - 'a' + 10);
        else if (ch >= 'A' && ch <= 'F')
            v |= (unsigned)(ch - 'A' + 10);
        else
            return -1;
    }
    *out = v;
    return 0;
}

/* At the opening quote. The decoded string is never longer than the encoded one. */
static int jstring(jparser_t *jp, char **out)
{
    const char *s = ++jp->p;
    const char *q = s;
    while (q < jp->end && *q != '"') {
        if (*q == '\\')
            q++;
        q++;
    }
    if (q >= jp->end)
        return jfail(jp, "unterminated string");
    char *buf = malloc((size_t)(q - s) + 1);
    if (!buf)
        return jfail(jp, "out of memory");
    size_t len = 0;
    while (s < q) {
        if (*s != '\\') {
            buf[len++] = *s++;
            continue;
        }
        s++;
        switch (*s) {
        case '"': case '\\': case '/': buf[len++] = *s; s++; break;
        case 'b': buf[len++] = '\b'; s++; break;
        case 'f': buf[len++] = '\f'; s++; break;
        case 'n': buf[len++] = '\n'; s++; break;
        case 'r': buf[len++] = '\r'; s++; break;
        case 't': buf[len++] = '\t'; s++; break;
        case 'u': {
            unsigned cp, lo;
            if (q - s < 5 || hex4(s + 1, &cp)) {
                free(buf);
                return jfail(jp, "bad \\u escape");
            }
            s += 5;
            if (cp >= 0xd800 && cp < 0xdc00 && q - s >= 6 && s[0] == '\\' && s[1] == 'u' &&
                !hex4(s + 2, &lo) && lo >= 0xdc00 && lo < 0xe000) {
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                s += 6;
            }
            put_utf8(buf, &len, cp);
            break;
        }
        default:
            free(buf);
            return jfail(jp, "bad escape in string");
        }
    }
    buf[len] = 0;
    jp->p = q + 1;
    *out = buf;
    return 0;
}

static int jvalue(jparser_t *jp, jv_t *v);

static int jdigits(jparser_t *jp, const char **q)
{
    const char *start = *q;
    while (*q < jp->end && **q >= '0' && **q <= '9')
        (*q)++;
    return *q > start;
}

/* A number in JSON's own grammar (RFC 8259: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?),
 * finite. strtod alone also took -nan, -inf, hex and 1e999 (inf), which were drawn as "-nan"
 * points. */
static int jnumber(jparser_t *jp, double *out)
{
    const char *q = jp->p;
    if (q < jp->end && *q == '-')
        q++;
    if (q < jp->end && *q == '0')
        q++;
    else if (!jdigits(jp, &q))
        return jfail(jp, "bad number");
    if (q < jp->end && *q == '.') {
        q++;
        if (!jdigits(jp, &q))
            return jfail(jp, "bad number (no digit after '.')");
    }
    if (q < jp->end && (*q == 'e' || *q == 'E')) {
        q++;
        if (q < jp->end && (*q == '+' || *q == '-'))
            q++;
        if (!jdigits(jp, &q))
            return jfail(jp, "bad number (no digit in the exponent)");
    }
    char *end;
    errno = 0;
    *out = strtod(jp->p, &end);
    if (end != q)
        return jfail(jp, "bad number");
    if (!isfinite(*out))
        return jfail(jp, "number out of range");
    jp->p = q;
    return 0;
}

static int jappend(jparser_t *jp, jv_t *v, size_t *cap, char *key, jv_t *item)
{
    if (v->n == *cap) {
        size_t nc = *cap ? 2 * *cap : 8;
        jv_t *ni = realloc(v->items, nc * sizeof *ni);
        if (!ni)
            return jfail(jp, "out of memory");
        v->items = ni;
        if (v->type == J_OBJ) {
            char **nk = realloc(v->keys, nc * sizeof *nk);
            if (!nk)
                return jfail(jp, "out of memory");
            v->keys = nk;
        }
        *cap = nc;
    }
    v->items[v->n] = *item;
    if (v->type == J_OBJ)
        v->keys[v->n] = key;
    v->n++;
    return 0;
}

static int jcontainer(jparser_t *jp, jv_t *v, int obj)
{
    size_t cap = 0;
    char close = obj ? '}' : ']';
    v->type = obj ? J_OBJ : J_ARR;
    jp->p++;
    jskip(jp);
    if (jp->p < jp->end && *jp->p == close) {
        jp->p++;
        return 0;
    }
    for (;;) {
        char *key = NULL;
        jv_t item;
        memset(&item, 0, sizeof item);
        jskip(jp);
        if (obj) {
            if (jp->p >= jp->end || *jp->p != '"')
                return jfail(jp, "expected a key");
            if (jstring(jp, &key))
                return -1;
            jskip(jp);
            if (jp->p >= jp->end || *jp->p != ':') {
                free(key);
                return jfail(jp, "expected ':'");
            }
            jp->p++;
        }
        if (jvalue(jp, &item) || jappend(jp, v, &cap, key, &item)) {
            jv_free(&item);
            free(key);
            return -1;
        }
        jskip(jp);
        if (jp->p < jp->end && *jp->p == ',') {
            jp->p++;
            continue;
        }
        if (jp->p < jp->end && *jp->p == close) {
            jp->p++;
            return 0;
        }
        return jfail(jp, obj ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static int jvalue(jparser_t *jp, jv_t *v)
{
    memset(v, 0, sizeof *v);
    jskip(jp);
    if (jp->p >= jp->end)
        return jfail(jp, "unexpected end of file");
    if (++jp->depth > 64)
        return jfail(jp, "nested too deep");
    int rc = 0;
    char ch = *jp->p;
    if (ch == '{' || ch == '[') {
        rc = jcontainer(jp, v, ch == '{');
    } else if (ch == '"') {
        v->type = J_STR;
        rc = jstring(jp, &v->str);
        if (rc)
            v->type = J_NULL;
    } else if (!strncmp(jp->p, "true", 4) || !strncmp(jp->p, "false", 5)) {
        v->type = J_BOOL;
        v->num = *jp->p == 't';
        jp->p += *jp->p == 't' ? 4 : 5;
    } else if (!strncmp(jp->p, "null", 4)) {
        v->type = J_NULL;
        jp->p += 4;
    } else if (ch == '-' || (ch >= '0' && ch <= '9')) {
        v->type = J_NUM;
        rc = jnumber(jp, &v->num);
    } else {
        rc = jfail(jp, "unexpected character");
    }
    jp->depth--;
    return rc;
}

/* buf must be NUL-terminated (strtod, strncmp). */
static int jparse(const char *buf, size_t len, jv_t *v, char *err, size_t errlen)
{
    jparser_t jp;
    memset(&jp, 0, sizeof jp);
    jp.p = buf;
    jp.end = buf + len;
    int rc = jvalue(&jp, v);
    if (!rc) {
        jskip(&jp);
        if (jp.p != jp.end)
            rc = jfail(&jp, "trailing data after the value");
    }
    if (rc) {
        jv_free(v);
        snprintf(err, errlen, "%s at byte %zu", jp.err, (size_t)(jp.p - buf));
    }
    return rc;
}

static const jv_t *jget(const jv_t *obj, const char *key)
{
    if (!obj || obj->type != J_OBJ)
        return NULL;
    for (size_t i = 0; i < obj->n; i++)
        if (!strcmp(obj->keys[i], key))
            return &obj->items[i];
    return NULL;
}

static const char *jgetstr(const jv_t *obj, const char *key)
{
    const jv_t *v = jget(obj, key);
    return v && v->type == J_STR ? v->str : NULL;
}

static int jgetnum(const jv_t *obj, const char *key, double *out)
{
    const jv_t *v = jget(obj, key);
    if (!v || v->type != J_NUM)
        return -1;
    *out = v->num;
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Series and plot                                                                             */

typedef struct {
    char *label;
    size_t n;
    double *x;      /* bytes */
    double *y;      /* busbw GB/s */
} series_t;

typedef struct {
    series_t *s;
    size_t n, cap;
} plot_t;

static void plot_free(plot_t *p)
{
    for (size_t i = 0; i < p->n; i++) {
        free(p->s[i].label);
        free(p->s[i].x);
        free(p->s[i].y);
    }
    free(p->s);
}

static char *xstrdup(const char *s)
{
    size_t l = strlen(s) + 1;
    char *d = malloc(l);
    if (d)
        memcpy(d, s, l);
    return d;
}

/* Largest --from file read: a run's JSON holds a few hundred results of a few hundred bytes. */
#define JSON_MAX_BYTES ((size_t)64 << 20)

/* The whole of a regular file of at most JSON_MAX_BYTES, NUL-terminated; NULL with why filled
 * otherwise (/dev/zero grew the buffer past 8 GB; a FIFO would block in open). */
static char *read_file(const char *path, size_t *len, char *why, size_t whylen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0) {
        snprintf(why, whylen, "cannot read %s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    if (!S_ISREG(sb.st_mode) || (uintmax_t)sb.st_size > JSON_MAX_BYTES) {
        if (!S_ISREG(sb.st_mode))
            snprintf(why, whylen, "%s is not a regular file (a %s): give the JSON file a run "
                     "wrote with --json", path, S_ISDIR(sb.st_mode) ? "directory"
                     : S_ISCHR(sb.st_mode) ? "character device" : S_ISFIFO(sb.st_mode) ? "pipe"
                     : "special file");
        else
            snprintf(why, whylen, "%s is %jd bytes, more than the %zu a --json file can be: is "
                     "it the right file?", path, (intmax_t)sb.st_size, JSON_MAX_BYTES);
        close(fd);
        return NULL;
    }
    size_t cap = (size_t)sb.st_size + 2, n = 0;
    char *buf = malloc(cap);
    while (buf && n <= JSON_MAX_BYTES) {
        if (n + 1 >= cap) {   /* it grew while read: up to the cap, then refused below */
            size_t nc = cap > JSON_MAX_BYTES / 2 ? JSON_MAX_BYTES + 2 : 2 * cap;
            char *nb = realloc(buf, nc);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap = nc;
        }
        ssize_t got = read(fd, buf + n, cap - n - 1);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0) {
            if (got < 0) {
                snprintf(why, whylen, "cannot read %s: %s", path, strerror(errno));
                free(buf);
                close(fd);
                return NULL;
            }
            break;
        }
        n += (size_t)got;
    }
    close(fd);
    if (!buf) {
        snprintf(why, whylen, "cannot read %s: out of memory", path);
        return NULL;
    }
    if (n > JSON_MAX_BYTES) {
        snprintf(why, whylen, "%s grew past %zu bytes while it was read", path, JSON_MAX_BYTES);
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

/* Splits a comma list in place; returns the count (entries point into s). */
static size_t split_commas(char *s, char **out, size_t max)
{
    size_t n = 0;
    while (s && n < max) {
        out[n++] = s;
        s = strchr(s, ',');
        if (s)
            *s++ = 0;
    }
    return n;
}

/* Adds one series per (dtype, op) group found in a file's results. */
static int add_file(plot_t *p, const char *path, const char *label_override, char *coll,
                    size_t colllen, char *err, size_t errlen)
{
    size_t len;
    char *buf = read_file(path, &len, err, errlen);
    if (!buf)
        return -1;
    jv_t root;
    char perr[192];
    if (jparse(buf, len, &root, perr, sizeof perr)) {
        snprintf(err, errlen, "%s is not valid JSON: %s", path, perr);
        free(buf);
        return -1;
    }
    free(buf);
    const jv_t *results = jget(&root, "results");
    if (!results || results->type != J_ARR) {
        snprintf(err, errlen, "%s has no \"results\" array: is it a cohort-bench --json file?",
                 path);
        jv_free(&root);
        return -1;
    }
    const char *co = jgetstr(&root, "coll");
    snprintf(coll, colllen, "%s", co ? co : "");
    /* Default label: the run's --result-label, else transport, collective, np, algorithm. */
    char base[256];
    const char *lab = jgetstr(&root, "label");
    double np = 0;
    jgetnum(&root, "np", &np);
    if (label_override && *label_override) {
        snprintf(base, sizeof base, "%s", label_override);
    } else if (lab) {
        snprintf(base, sizeof base, "%s", lab);
    } else {
        const char *tr = jgetstr(&root, "transport"), *al = jgetstr(&root, "algo");
        int n = snprintf(base, sizeof base, "%s %s np=%.0f", tr ? tr : "?", co ? co : "?", np);
        if (al && strcmp(al, "auto") && n > 0 && (size_t)n < sizeof base)
            snprintf(base + n, sizeof base - (size_t)n, " algo=%s", al);
    }

    /* Distinct (dtype, op) groups, in order of appearance. */
    const char *groups[64][2];
    size_t ngroups = 0;
    for (size_t i = 0; i < results->n; i++) {
        const char *dt = jgetstr(&results->items[i], "dtype"),
                   *op = jgetstr(&results->items[i], "op");
        dt = dt ? dt : "?";
        op = op ? op : "?";
        size_t g;
        for (g = 0; g < ngroups; g++)
            if (!strcmp(groups[g][0], dt) && !strcmp(groups[g][1], op))
                break;
        if (g == ngroups && ngroups < 64) {
            groups[ngroups][0] = dt;
            groups[ngroups][1] = op;
            ngroups++;
        }
    }
    int rc = 0;
    for (size_t g = 0; g < ngroups && !rc; g++) {
        if (p->n == p->cap) {
            size_t nc = p->cap ? 2 * p->cap : 8;
            series_t *ns = realloc(p->s, nc * sizeof *ns);
            if (!ns) {
                rc = -1;
                break;
            }
            p->s = ns;
            p->cap = nc;
        }
        series_t *s = &p->s[p->n];
        memset(s, 0, sizeof *s);
        char lbl[400];
        if (ngroups > 1)
            snprintf(lbl, sizeof lbl, "%s %s%s%s", base, groups[g][0],
                     strcmp(groups[g][1], "none") ? " " : "",
                     strcmp(groups[g][1], "none") ? groups[g][1] : "");
        else
            snprintf(lbl, sizeof lbl, "%s", base);
        s->label = xstrdup(lbl);
        s->x = malloc((results->n + 1) * sizeof *s->x);
        s->y = malloc((results->n + 1) * sizeof *s->y);
        p->n++;
        if (!s->label || !s->x || !s->y) {
            rc = -1;
            break;
        }
        for (size_t i = 0; i < results->n; i++) {
            const jv_t *r = &results->items[i];
            const char *dt = jgetstr(r, "dtype"), *op = jgetstr(r, "op");
            if (strcmp(dt ? dt : "?", groups[g][0]) || strcmp(op ? op : "?", groups[g][1]))
                continue;
            double bytes, bw;
            const jv_t *pl = jget(r, "out_of_place");
            if (!pl || pl->type != J_OBJ)
                pl = jget(r, "in_place");
            if (jgetnum(r, "bytes", &bytes) || jgetnum(pl, "busbw", &bw))
                continue;
            /* numbers are finite (jnumber); a negative one is no size or bandwidth */
            if (bytes < 0 || bw < 0) {
                snprintf(err, errlen, "%s: results[%zu]: %s %g is negative; is it a cohort-bench "
                         "--json file?", path, i, bytes < 0 ? "bytes" : "busbw",
                         bytes < 0 ? bytes : bw);
                rc = -1;
                break;
            }
            if (bytes == 0)   /* no place on a log2 axis */
                continue;
            s->x[s->n] = bytes;
            s->y[s->n] = bw;
            s->n++;
        }
    }
    if (rc && !err[0])
        snprintf(err, errlen, "out of memory reading %s", path);
    jv_free(&root);
    return rc;
}

static void xml_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*s, f);
        }
    }
}

static void size_label(char *buf, size_t len, double bytes)
{
    static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
    int u = 0;
    while (bytes >= 1024 && u < 4) {
        bytes /= 1024;
        u++;
    }
    snprintf(buf, len, "%g %s", bytes, units[u]);
}

static double nice_step(double range, int target)
{
    double raw = range / target, mag = pow(10, floor(log10(raw))), f = raw / mag;
    return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * mag;
}

static const char *const palette[] = {
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf"
};

static int write_svg(const plot_t *p, const char *out, const char *title, int ylog)
{
    const double W = 960, H = 600, ml = 80, mr = 30, mt = 50, mb = 70;
    const double pw = W - ml - mr, ph = H - mt - mb;
    double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = 0;
    for (size_t i = 0; i < p->n; i++)
        for (size_t k = 0; k < p->s[i].n; k++) {
            double x = log2(p->s[i].x[k]), y = p->s[i].y[k];
            xmin = fmin(xmin, x);
            xmax = fmax(xmax, x);
            ymax = fmax(ymax, y);
            if (y > 0)
                ymin = fmin(ymin, y);
        }
    if (!isfinite(xmin)) {
        xmin = 3;
        xmax = 26;
    }
    xmin = floor(xmin);
    xmax = ceil(xmax);
    if (xmax <= xmin)
        xmax = xmin + 1;
    double y0, y1, ystep;
    if (ylog) {
        if (!isfinite(ymin) || ymax <= 0) {
            ymin = 0.001;
            ymax = 1;
        }
        y0 = floor(log10(ymin));
        y1 = ceil(log10(ymax));
        if (y1 <= y0)
            y1 = y0 + 1;
        ystep = 1;
    } else {
        if (!(ymax > 0))
            ymax = 1;
        ystep = nice_step(ymax, 6);
        y0 = 0;
        y1 = ceil(ymax / ystep) * ystep;
        if (y1 < ymax * 1.02)
            y1 += ystep;
    }
#define XP(v) (ml + ((v) - xmin) / (xmax - xmin) * pw)
#define YP(v) (mt + ph - ((v) - y0) / (y1 - y0) * ph)

    FILE *f = fopen(out, "w");
    if (!f) {
        fprintf(stderr, "cohort-bench: cannot write %s: %s\n", out, strerror(errno));
        return -1;
    }
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
            "viewBox=\"0 0 %.0f %.0f\" font-family=\"Helvetica, Arial, sans-serif\" "
            "font-size=\"13\">\n", W, H, W, H);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fputs("<text x=\"480\" y=\"28\" text-anchor=\"middle\" font-size=\"17\" "
          "font-weight=\"bold\">", f);
    xml_text(f, title);
    fputs("</text>\n", f);

    /* Grid and ticks. */
    fputs("<g stroke=\"#dddddd\" stroke-width=\"1\">\n", f);
    for (double x = xmin; x <= xmax + 1e-9; x += 1)
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", XP(x), mt, XP(x),
                mt + ph);
    for (double y = y0; y <= y1 + ystep * 1e-9; y += ystep)
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", ml, YP(y),
                ml + pw, YP(y));
    fputs("</g>\n", f);
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
            "stroke=\"black\"/>\n", ml, mt, pw, ph);
    int nx = (int)(xmax - xmin) + 1, stride = (nx + 11) / 12;
    fputs("<g text-anchor=\"middle\">\n", f);
    for (int i = 0; i < nx; i++) {
        double x = xmin + i;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n",
                XP(x), mt + ph, XP(x), mt + ph + (i % stride ? 3 : 6));
        if (i % stride)
            continue;
        char lb[32];
        size_label(lb, sizeof lb, pow(2, x));
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">%s</text>\n", XP(x), mt + ph + 20, lb);
    }
    fputs("</g>\n<g text-anchor=\"end\">\n", f);
    for (double y = y0; y <= y1 + ystep * 1e-9; y += ystep) {
        char lb[32];
        if (ylog)
            snprintf(lb, sizeof lb, "%g", pow(10, y));
        else
            snprintf(lb, sizeof lb, "%g", fabs(y) < ystep * 1e-9 ? 0.0 : y);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n",
                ml - 6, YP(y), ml, YP(y));
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">%s</text>\n", ml - 9, YP(y) + 4, lb);
    }
    fputs("</g>\n", f);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"14\">"
            "Message size (bytes, log2 scale)</text>\n", ml + pw / 2, H - 22);
    fprintf(f, "<text x=\"20\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"14\" "
            "transform=\"rotate(-90 20 %.1f)\">Bus bandwidth (GB/s%s)</text>\n", mt + ph / 2,
            mt + ph / 2, ylog ? ", log10 scale" : "");

    /* Series. */
    for (size_t i = 0; i < p->n; i++) {
        const series_t *s = &p->s[i];
        const char *col = palette[i % (sizeof palette / sizeof palette[0])];
        const char *dash = i >= 10 ? " stroke-dasharray=\"6 3\"" : "";
        fprintf(f, "<g stroke=\"%s\" fill=\"%s\">\n<polyline fill=\"none\" stroke-width=\"2\"%s "
                "points=\"", col, col, dash);
        for (size_t k = 0; k < s->n; k++) {
            double y = ylog ? (s->y[k] > 0 ? log10(s->y[k]) : y0) : s->y[k];
            fprintf(f, "%s%.1f,%.1f", k ? " " : "", XP(log2(s->x[k])), YP(y));
        }
        fputs("\"/>\n", f);
        for (size_t k = 0; k < s->n; k++) {
            double y = ylog ? (s->y[k] > 0 ? log10(s->y[k]) : y0) : s->y[k];
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\"/>\n", XP(log2(s->x[k])), YP(y));
        }
        fputs("</g>\n", f);
    }

    /* Legend, top left inside the plot (bandwidth grows to the right). */
    double lw = 0;
    for (size_t i = 0; i < p->n; i++)
        lw = fmax(lw, 7.5 * (double)strlen(p->s[i].label));
    lw += 50;
    double lh = 10 + 20.0 * (double)p->n;
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"white\" "
            "fill-opacity=\"0.85\" stroke=\"#999999\"/>\n", ml + 10, mt + 10, lw, lh);
    for (size_t i = 0; i < p->n; i++) {
        const char *col = palette[i % (sizeof palette / sizeof palette[0])];
        double ly = mt + 25 + 20.0 * (double)i;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                "stroke-width=\"2\"%s/>\n", ml + 18, ly, ml + 42, ly, col,
                i >= 10 ? " stroke-dasharray=\"6 3\"" : "");
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", ml + 30, ly, col);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">", ml + 50, ly + 4);
        xml_text(f, p->s[i].label);
        fputs("</text>\n", f);
    }
    fputs("</svg>\n", f);
#undef XP
#undef YP
    if (fclose(f)) {
        fprintf(stderr, "cohort-bench: cannot write %s: %s\n", out, strerror(errno));
        return -1;
    }
    return 0;
}

int bench_svg(const char *out, const char *from, const char *labels, const char *title, int ylog)
{
    enum { MAXF = 256 };
    char *fromcopy = xstrdup(from), *labcopy = labels ? xstrdup(labels) : NULL;
    char *files[MAXF], *labs[MAXF];
    plot_t p;
    memset(&p, 0, sizeof p);
    int rc = 1;
    if (!fromcopy || (labels && !labcopy)) {
        fprintf(stderr, "cohort-bench: out of memory\n");
        goto out;
    }
    size_t nf = split_commas(fromcopy, files, MAXF);
    size_t nl = labcopy ? split_commas(labcopy, labs, MAXF) : 0;
    if (labcopy && nl != nf) {
        fprintf(stderr, "cohort-bench: --labels has %zu entries but --from has %zu files\n", nl,
                nf);
        goto out;
    }
    for (size_t i = 0; i < nf; i++)
        if (!*files[i]) {   /* before any file is read: a list with no empty entries */
            fprintf(stderr, "cohort-bench: --from '%s' has an empty file name (two commas in a "
                    "row, or one at an end)\n", from);
            goto out;
        }
    char deftitle[160] = "cohort-bench: bus bandwidth";
    for (size_t i = 0; i < nf; i++) {
        char err[512] = "";
        char coll[64];
        if (add_file(&p, files[i], nl ? labs[i] : NULL, coll, sizeof coll, err, sizeof err)) {
            fprintf(stderr, "cohort-bench: %s\n", err);
            goto out;
        }
        if (i == 0 && *coll)
            snprintf(deftitle, sizeof deftitle, "cohort-bench: %s bus bandwidth", coll);
    }
    size_t points = 0;
    for (size_t i = 0; i < p.n; i++)
        points += p.s[i].n;
    if (!points)
        fprintf(stderr, "cohort-bench: warning: no result with bytes > 0 in %s\n", from);
    if (!write_svg(&p, out, title ? title : deftitle, ylog))
        rc = 0;
out:
    plot_free(&p);
    free(fromcopy);
    free(labcopy);
    return rc;
}
