/* SPDX-License-Identifier: BSD-3-Clause */
/* cohort-bench's output: the table (nccl-tests' columns) with its RESULT lines, printed by rank 0
 * as the rows come, and the JSON and CSV files written at the end. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cohort/cohort.h"
#include "bench.h"

/* Op names in RESULT lines: those of the peer drivers, bench/peers/ (bcast), ours elsewhere. */
static const char *const coll_result_names[C_COUNT] = {
    "allreduce", "bcast", "reduce", "allgather", "reduce_scatter", "alltoall", "barrier"
};

/* ------------------------------------------------------------------------------------------ */
/* The table                                                                                   */

static void fmt_time(char *buf, size_t len, double us)
{
    if (us >= 10000.0)
        snprintf(buf, len, "%7.0f", us);
    else if (us >= 100.0)
        snprintf(buf, len, "%7.1f", us);
    else
        snprintf(buf, len, "%7.2f", us);
}

static void print_place(const place_res_t *p)
{
    if (!p->valid) {
        printf("  %7s  %6s  %6s  %6s", "N/A", "N/A", "N/A", "N/A");
        return;
    }
    char t[32];
    fmt_time(t, sizeof t, p->time_us);
    if (p->wrong < 0)
        printf("  %7s  %6.2f  %6.2f  %6s", t, p->algbw, p->busbw, "N/A");
    else
        printf("  %7s  %6.2f  %6.2f  %6g", t, p->algbw, p->busbw, p->wrong);
}

/* Group titles above the columns: text centred in width columns. */
static void print_centered(const char *text, int width)
{
    int len = (int)strlen(text), left = (width - len + 1) / 2;
    printf("%*s%s%*s", left, "", text, width - len - left, "");
}

void bench_print_header(const bench_t *b, const char *transport)
{
    const opts_t *o = &b->o;
    printf("# cohort-bench: coll %s, np %d, nodes %d, transport %s, algo %s\n",
           bench_coll_names[o->coll], b->n, cohort_comm_node_count(b->comm), transport,
           o->algo ? o->algo : "auto");
    if (o->coll == C_BARRIER)
        printf("# cohort %s  warmup iters: %d iters: %d validation: %d average: %d\n",
               cohort_version(), o->warmup, o->iters, o->check, o->average);
    else if (o->additive)
        printf("# cohort %s  minBytes %zu maxBytes %zu step: %zu(bytes) warmup iters: %d "
               "iters: %d validation: %d average: %d\n", cohort_version(), o->minbytes,
               o->maxbytes, o->stepbytes, o->warmup, o->iters, o->check, o->average);
    else
        printf("# cohort %s  minBytes %zu maxBytes %zu step: %ld(factor) warmup iters: %d "
               "iters: %d validation: %d average: %d\n", cohort_version(), o->minbytes,
               o->maxbytes, o->stepfactor, o->warmup, o->iters, o->check, o->average);
    printf("#\n");
    printf("# %10s  %12s  %8s  %6s  %6s", "", "", "", "", "");
    print_centered("out-of-place", 33);
    print_centered("in-place", 33);
    print_centered("out-of-place", 20);
    printf("%*s%s\n", (20 - 8 + 1) / 2, "", "in-place");
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s  %8s  %8s  %8s"
           "  %8s  %s\n", "size", "count", "type", "redop", "root", "time", "algbw", "busbw",
           "#wrong", "time", "algbw", "busbw", "#wrong", "min", "max", "min", "max", "algo");
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s  %8s  %8s  %8s"
           "  %8s\n", "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)",
           "(GB/s)", "(GB/s)", "", "(us)", "(us)", "(us)", "(us)");
}

void bench_print_row(const bench_t *b, const result_t *r)
{
    char a[32], c[32], d[32], e[32];
    printf("%12zu  %12zu  %8s  %6s  %6d", r->bytes, r->count,
           r->has_dtype ? bench_dtype_names[r->dtype] : "none",
           r->has_op ? bench_op_names[r->op] : "none", r->root);
    print_place(&r->oop);
    print_place(&r->ip);
    fmt_time(a, sizeof a, r->oop.min_us);
    fmt_time(c, sizeof c, r->oop.max_us);
    if (r->ip.valid) {
        fmt_time(d, sizeof d, r->ip.min_us);
        fmt_time(e, sizeof e, r->ip.max_us);
    } else {
        snprintf(d, sizeof d, "N/A");
        snprintf(e, sizeof e, "N/A");
    }
    printf("  %8s  %8s  %8s  %8s  %s\n", a, c, d, e, r->algo);
    if (b->o.label && !(r->bytes == 0 && b->o.coll != C_BARRIER)) {
        /* bench/peers/ format: time = median of the repetitions' max over ranks. */
        const place_res_t *p = &r->oop;
        double algbw = p->med_us > 0 ? (double)r->bytes / (p->med_us * 1e-6) / 1e9 : 0;
        const char *ck = p->wrong < 0 ? "skip" : p->wrong > 0 ? "FAIL" : "ok";
        printf("RESULT,%s,%d,%s,%zu,%d,%.3f,%.3f,%.4f,%.4f,%s\n", b->o.label, b->n,
               coll_result_names[b->o.coll], r->bytes, b->o.iters, p->med_us, p->best_us, algbw,
               algbw * bench_busbw_factor(b->o.coll, b->n), ck);
    }
    fflush(stdout);
}

/* ------------------------------------------------------------------------------------------ */
/* JSON and CSV                                                                                */

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; s && *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch == '\n')
            fputs("\\n", f);
        else if (ch == '\t')
            fputs("\\t", f);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

static void json_num(FILE *f, double v, const char *fmt)
{
    if (isfinite(v))
        fprintf(f, fmt, v);
    else
        fputs("null", f);
}

static void json_place(FILE *f, const place_res_t *p)
{
    if (!p->valid) {
        fputs("null", f);
        return;
    }
    fputs("{\"time_us\": ", f);
    json_num(f, p->time_us, "%.3f");
    fputs(", \"algbw\": ", f);
    json_num(f, p->algbw, "%.6f");
    fputs(", \"busbw\": ", f);
    json_num(f, p->busbw, "%.6f");
    fputs(", \"wrong\": ", f);
    if (p->wrong < 0)
        fputs("null", f);
    else
        fprintf(f, "%.0f", p->wrong);
    fputs(", \"min_us\": ", f);
    json_num(f, p->min_us, "%.3f");
    fputs(", \"avg_us\": ", f);
    json_num(f, p->avg_us, "%.3f");
    fputs(", \"max_us\": ", f);
    json_num(f, p->max_us, "%.3f");
    fputs(", \"median_us\": ", f);
    json_num(f, p->med_us, "%.3f");
    fputs(", \"best_us\": ", f);
    json_num(f, p->best_us, "%.3f");
    fputc('}', f);
}

int bench_write_json(const bench_t *b, const meta_t *m, const char *path, int argc, char **argv)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "cohort-bench: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    fputs("{\n  \"tool\": \"cohort-bench\",\n  \"version\": ", f);
    json_str(f, cohort_version());
    fputs(",\n  \"date\": ", f);
    json_str(f, m->date);
    fputs(",\n  \"host\": ", f);
    json_str(f, m->host);
    fputs(",\n  \"command\": ", f);
    {
        size_t len = 1;
        for (int i = 0; i < argc; i++)
            len += strlen(argv[i]) + 1;
        char *cmd = malloc(len);
        if (cmd) {
            cmd[0] = 0;
            for (int i = 0; i < argc; i++) {
                if (i)
                    strcat(cmd, " ");
                strcat(cmd, argv[i]);
            }
        }
        json_str(f, cmd ? cmd : "");
        free(cmd);
    }
    fputs(",\n  \"coll\": ", f);
    json_str(f, bench_coll_names[b->o.coll]);
    fprintf(f, ",\n  \"np\": %d,\n  \"nodes\": %d,\n  \"transport\": ", b->n, m->nodes);
    json_str(f, m->transport);
    fputs(",\n  \"algo\": ", f);
    json_str(f, b->o.algo ? b->o.algo : "auto");
    fputs(",\n  \"label\": ", f);
    if (b->o.label)
        json_str(f, b->o.label);
    else
        fputs("null", f);
    fprintf(f, ",\n  \"iters\": %d,\n  \"warmup_iters\": %d,\n  \"check\": %d,\n"
            "  \"average\": %d,\n  \"results\": [", b->o.iters, b->o.warmup, b->o.check,
            b->o.average);
    for (size_t i = 0; i < b->nres; i++) {
        const result_t *r = &b->res[i];
        fprintf(f, "%s\n    {\"bytes\": %zu, \"count\": %zu, \"dtype\": ", i ? "," : "", r->bytes,
                r->count);
        json_str(f, r->has_dtype ? bench_dtype_names[r->dtype] : "none");
        fputs(", \"op\": ", f);
        json_str(f, r->has_op ? bench_op_names[r->op] : "none");
        fprintf(f, ", \"root\": %d, \"algo\": ", r->root);
        json_str(f, r->algo);
        fputs(",\n     \"out_of_place\": ", f);
        json_place(f, &r->oop);
        fputs(",\n     \"in_place\": ", f);
        json_place(f, &r->ip);
        fputc('}', f);
    }
    fprintf(f, "\n  ],\n  \"out_of_bounds\": %d,\n  \"avg_busbw\": ", m->out_of_bounds);
    json_num(f, m->avg_busbw, "%.6f");
    fputs(",\n  \"status\": ", f);
    json_str(f, b->failed ? "FAILED" : m->out_of_bounds ? "WRONG" : "OK");
    fputs(",\n  \"error\": ", f);
    if (b->failed)
        json_str(f, b->failmsg);
    else
        fputs("null", f);
    fputs("\n}\n", f);
    if (fclose(f)) {
        fprintf(stderr, "cohort-bench: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}

static void csv_field(FILE *f, const char *s)
{
    if (strpbrk(s, ",\"\n")) {
        fputc('"', f);
        for (; *s; s++) {
            if (*s == '"')
                fputc('"', f);
            fputc(*s, f);
        }
        fputc('"', f);
    } else {
        fputs(s, f);
    }
}

static void csv_place(FILE *f, const place_res_t *p)
{
    if (!p->valid) {
        fputs(",,,,,,", f);
        return;
    }
    fprintf(f, ",%.3f,%.6f,%.6f,", p->time_us, p->algbw, p->busbw);
    if (p->wrong >= 0)
        fprintf(f, "%.0f", p->wrong);
    fprintf(f, ",%.3f,%.3f,%.3f", p->min_us, p->avg_us, p->max_us);
}

int bench_write_csv(const bench_t *b, const meta_t *m, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "cohort-bench: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    fputs("coll,np,nodes,transport,version,date,bytes,count,dtype,op,root,algo,"
          "oop_time_us,oop_algbw_GBs,oop_busbw_GBs,oop_wrong,oop_min_us,oop_avg_us,oop_max_us,"
          "ip_time_us,ip_algbw_GBs,ip_busbw_GBs,ip_wrong,ip_min_us,ip_avg_us,ip_max_us\n", f);
    for (size_t i = 0; i < b->nres; i++) {
        const result_t *r = &b->res[i];
        fprintf(f, "%s,%d,%d,", bench_coll_names[b->o.coll], b->n, m->nodes);
        csv_field(f, m->transport);
        fputc(',', f);
        csv_field(f, cohort_version());
        fprintf(f, ",%s,%zu,%zu,%s,%s,%d,", m->date, r->bytes, r->count,
                r->has_dtype ? bench_dtype_names[r->dtype] : "none",
                r->has_op ? bench_op_names[r->op] : "none", r->root);
        csv_field(f, r->algo);
        csv_place(f, &r->oop);
        csv_place(f, &r->ip);
        fputc('\n', f);
    }
    if (fclose(f)) {
        fprintf(stderr, "cohort-bench: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}
