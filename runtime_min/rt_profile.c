/* rt_profile.c - the profiler of programs built with `ctc build --profile`.
 *
 * The generated entries time every kernel (ctc_prof_now before it,
 * ctc_prof_record after it) against a static description of the kernel (its
 * model line, ops, phase, FLOPs and bytes: ctc_prof_site). The profile keeps
 * per-site totals and, up to a fixed number, one event per kernel call for the
 * Chrome trace (ctc_prof_write_trace); ctc_prof_print_table prints the totals
 * per model line and op, like torch.profiler's key_averages().table().
 * Kernels whose loop runs on OpenMP threads also record each thread's share
 * (ctc_prof_thread, from inside the parallel region: lock-free, one slot per
 * call taken with an atomic counter): the trace shows them on one track per
 * thread, and the table's second part gives each such kernel's busiest and
 * idlest thread. Its third part sums the kernels by the user module whose code they run
 * (ctc_prof_site.module), each module with those inside it. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "ctc_rt.h"

double ctc_prof_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

typedef struct ProfEvent {
  const ctc_prof_site *site;
  double t0, dur;   /* ms */
} ProfEvent;

typedef struct ProfThreadEvent {   /* one thread's share of a parallel kernel call */
  const ctc_prof_site *site;
  int thread;
  double t0, dur;   /* ms */
} ProfThreadEvent;

typedef struct ProfTotal {
  const ctc_prof_site *site;
  long long calls;
  double ms;
} ProfTotal;

struct ctc_profile {
  double origin;            /* ms: the trace's time 0 */
  ProfEvent *ev;
  size_t nev, cap;          /* events kept (at most cap) */
  size_t dropped;           /* events past cap (counted in the totals only) */
  ProfTotal *tot;           /* open addressing by site pointer */
  size_t ntot, tcap;
  ProfThreadEvent *tev;     /* threads' shares, at most cap */
  atomic_size_t ntev;       /* slots taken (may pass cap: those are dropped) */
};

ctc_profile *ctc_prof_new(size_t max_events) {
  ctc_profile *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->cap = max_events;
  p->ev = max_events ? malloc(max_events * sizeof *p->ev) : NULL;
  p->tev = max_events ? malloc(max_events * sizeof *p->tev) : NULL;
  atomic_init(&p->ntev, 0);
  p->tcap = 1024;
  p->tot = calloc(p->tcap, sizeof *p->tot);
  if ((max_events && (!p->ev || !p->tev)) || !p->tot) {
    ctc_prof_free(p);
    return NULL;
  }
  p->origin = ctc_prof_now();
  return p;
}

void ctc_prof_free(ctc_profile *p) {
  if (!p) return;
  free(p->ev);
  free(p->tev);
  free(p->tot);
  free(p);
}

static ProfTotal *total_of(ctc_profile *p, const ctc_prof_site *s) {
  if (p->ntot * 2 >= p->tcap) {   /* grow (only when a new site shows up) */
    size_t ncap = p->tcap * 2;
    ProfTotal *nt = calloc(ncap, sizeof *nt);
    if (!nt) return NULL;
    for (size_t i = 0; i < p->tcap; i++)
      if (p->tot[i].site) {
        size_t h = ((size_t)p->tot[i].site >> 4) & (ncap - 1);
        while (nt[h].site) h = (h + 1) & (ncap - 1);
        nt[h] = p->tot[i];
      }
    free(p->tot);
    p->tot = nt;
    p->tcap = ncap;
  }
  size_t h = ((size_t)s >> 4) & (p->tcap - 1);
  while (p->tot[h].site && p->tot[h].site != s) h = (h + 1) & (p->tcap - 1);
  if (!p->tot[h].site) {
    p->tot[h].site = s;
    p->ntot++;
  }
  return &p->tot[h];
}

void ctc_prof_record(ctc_profile *p, const ctc_prof_site *site, double t0) {
  double t1 = ctc_prof_now();
  if (!p) return;
  ProfTotal *t = total_of(p, site);
  if (t) {
    t->calls++;
    t->ms += t1 - t0;
  }
  if (p->nev < p->cap) p->ev[p->nev++] = (ProfEvent){site, t0, t1 - t0};
  else p->dropped++;
}

void ctc_prof_thread(ctc_profile *p, const ctc_prof_site *site, int thread, double t0) {
  double t1 = ctc_prof_now();
  if (!p) return;
  size_t i = atomic_fetch_add(&p->ntev, 1);
  if (i < p->cap) p->tev[i] = (ProfThreadEvent){site, thread, t0, t1 - t0};
}

static size_t thread_events(const ctc_profile *p) {
  size_t n = atomic_load(&((ctc_profile *)p)->ntev);
  return n < p->cap ? n : p->cap;
}

static const char *phase_name(int ph) {
  return ph == CTC_PROF_ENTRY ? "entry" : ph == CTC_PROF_BACKWARD ? "backward" : ph == CTC_PROF_OPTIMIZER ? "optimizer"
                                                                                                         : "forward";
}

static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; s && *s; s++) {
    if (*s == '"' || *s == '\\') fprintf(f, "\\%c", *s);
    else if ((unsigned char)*s < 0x20) fprintf(f, "\\u%04x", *s);
    else fputc(*s, f);
  }
  fputc('"', f);
}

int ctc_prof_write_trace(const ctc_profile *p, const char *path, ctc_error *err) {
  ctc_wfile w;
  int rc = ctc_wopen(&w, path, err);
  if (rc) return rc;
  FILE *f = w.f;
  fprintf(f, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n");
  fprintf(f, "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": 1, \"args\": {\"name\": \"ctc\"}}");
  for (size_t i = 0; i < p->nev; i++) {
    const ProfEvent *e = &p->ev[i];
    const ctc_prof_site *s = e->site;
    fprintf(f, ",\n{\"name\": ");
    json_str(f, s->name);
    fprintf(f, ", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": 1, \"tid\": %d, \"ts\": %.3f, \"dur\": %.3f, \"args\": {\"line\": ",
            phase_name(s->phase), s->phase == CTC_PROF_ENTRY ? 0 : 1, (e->t0 - p->origin) * 1e3, e->dur * 1e3);
    json_str(f, s->where);
    fprintf(f, ", \"entry\": ");
    json_str(f, s->entry);
    if (s->module && s->module[0]) fprintf(f, ", \"module\": "), json_str(f, s->module);
    if (s->flops > 0) fprintf(f, ", \"flops\": %.0f", s->flops);
    if (s->bytes > 0) fprintf(f, ", \"bytes\": %.0f", s->bytes);
    fprintf(f, "}}");
  }
  /* the threads' shares of parallel kernels: track 2 + thread */
  size_t nt = thread_events(p);
  int maxt = -1;
  for (size_t i = 0; i < nt; i++) maxt = p->tev[i].thread > maxt ? p->tev[i].thread : maxt;
  for (int t = 0; t <= maxt; t++)
    fprintf(f, ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": %d, \"args\": {\"name\": \"OpenMP thread %d\"}}",
            2 + t, t);
  for (size_t i = 0; i < nt; i++) {
    const ProfThreadEvent *e = &p->tev[i];
    fprintf(f, ",\n{\"name\": ");
    json_str(f, e->site->name);
    fprintf(f, ", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": 1, \"tid\": %d, \"ts\": %.3f, \"dur\": %.3f, \"args\": {\"line\": ",
            phase_name(e->site->phase), 2 + e->thread, (e->t0 - p->origin) * 1e3, e->dur * 1e3);
    json_str(f, e->site->where);
    fprintf(f, ", \"entry\": ");
    json_str(f, e->site->entry);
    fprintf(f, ", \"thread\": %d}}", e->thread);
  }
  fprintf(f, "\n]}\n");
  return ctc_wcommit(&w, 1, err);
}

/* One row of the table: the sites of one (entry, model line, name, phase). */
typedef struct Row {
  const ctc_prof_site *site;
  long long calls;
  double ms, flops, bytes;
} Row;

static int same_row(const ctc_prof_site *a, const ctc_prof_site *b) {
  return a->phase == b->phase && !strcmp(a->entry, b->entry) && !strcmp(a->where, b->where) && !strcmp(a->name, b->name);
}

/* The table's third part, where the sites name modules: per (entry, module, phase), the
 * kernel time of that module's code and of the modules inside it (h.0 holds h.0.attn), in the
 * order of the sites' tables (the model's: a module's forward, later its backward). */
typedef struct ModRow {
  const ctc_prof_site *site;   /* the first of its sites (the tables' order) */
  const ctc_prof_site *first;  /* the first site of it or of a module inside it */
  int depth;                   /* the dots in its path */
  double ms, own;              /* with the modules inside it; its own kernels only */
} ModRow;

static int mod_before(const ModRow *a, const ModRow *b) {   /* a module before those inside it */
  return a->first != b->first ? a->first < b->first : a->depth < b->depth;
}

static int inside(const char *m, const char *outer) {   /* m is outer or a module inside it */
  size_t n = strlen(outer);
  return !strncmp(m, outer, n) && (m[n] == 0 || m[n] == '.');
}

static void print_modules(const ctc_profile *p, FILE *out, double all) {
  size_t nm = 0;
  ModRow *rows = calloc(p->ntot + 1, sizeof *rows);
  if (!rows) return;
  for (size_t i = 0; i < p->tcap; i++) {
    const ctc_prof_site *s = p->tot[i].site;
    if (!s || s->phase == CTC_PROF_ENTRY || !s->module || !s->module[0]) continue;
    size_t r = 0;
    while (r < nm && !(rows[r].site->phase == s->phase && !strcmp(rows[r].site->entry, s->entry) &&
                       !strcmp(rows[r].site->module, s->module))) r++;
    if (r == nm) rows[nm++].site = s;
    else if (s < rows[r].site) rows[r].site = s;   /* a table's earlier site: the model's order */
    rows[r].own += p->tot[i].ms;
  }
  for (size_t r = 0; r < nm; r++) {
    rows[r].first = rows[r].site;
    for (const char *c = rows[r].site->module; *c; c++) rows[r].depth += *c == '.';
    for (size_t q = 0; q < nm; q++)
      if (rows[q].site->phase == rows[r].site->phase && !strcmp(rows[q].site->entry, rows[r].site->entry) &&
          inside(rows[q].site->module, rows[r].site->module)) {
        rows[r].ms += rows[q].own;
        if (rows[q].site < rows[r].first) rows[r].first = rows[q].site;
      }
  }
  for (size_t r = 1; r < nm; r++)   /* in the tables' order (each entry's sites are one array) */
    for (size_t q = r; q > 0 && mod_before(&rows[q], &rows[q - 1]); q--) {
      ModRow t = rows[q];
      rows[q] = rows[q - 1];
      rows[q - 1] = t;
    }
  int base = nm ? rows[0].depth : 0;   /* the outermost modules' depth: not indented */
  for (size_t r = 0; r < nm; r++) base = rows[r].depth < base ? rows[r].depth : base;
  if (nm) {
    const char *rule = "-------------------------------------------------------------------------------------";
    fprintf(out, "\nModules: kernel time of each call of your modules' code, with the modules inside it\n%s\n"
                 "%-36s %-14s %-9s %11s %11s %7s\n%s\n", rule, "Module", "Entry", "Phase", "Total ms", "Own ms", "%", rule);
    for (size_t r = 0; r < nm; r++) {
      const ctc_prof_site *s = rows[r].site;
      int depth = rows[r].depth - base < 8 ? rows[r].depth - base : 8;
      char name[37];
      snprintf(name, sizeof name, "%*s%s", 2 * depth, "", s->module);
      fprintf(out, "%-36s %-14s %-9s %11.3f %11.3f %6.2f%%\n", name, s->entry, phase_name(s->phase), rows[r].ms,
              rows[r].own, all > 0 ? 100 * rows[r].ms / all : 0);
    }
    fprintf(out, "%s\n", rule);
  }
  free(rows);
}

static int cmp_row(const void *x, const void *y) {
  const Row *a = x, *b = y;
  return (a->ms < b->ms) - (a->ms > b->ms);
}

/* The table's second part: per row with parallel loops, each OpenMP thread's busy
 * time (its shares of the row's calls, from the kept events), busiest and idlest. */
#define PROF_MAX_THREADS 256
static void print_threads(const ctc_profile *p, FILE *out, const Row *rows, size_t n, int max_rows) {
  size_t nt = thread_events(p);
  if (!nt) return;
  double *busy = calloc(n * PROF_MAX_THREADS + 1, sizeof *busy);
  if (!busy) return;
  int maxt = 0;
  for (size_t i = 0; i < nt; i++) {
    const ProfThreadEvent *e = &p->tev[i];
    if (e->thread < 0 || e->thread >= PROF_MAX_THREADS) continue;
    for (size_t r = 0; r < n; r++)
      if (same_row(rows[r].site, e->site)) {
        busy[r * PROF_MAX_THREADS + (size_t)e->thread] += e->dur;
        maxt = e->thread + 1 > maxt ? e->thread + 1 : maxt;
        break;
      }
  }
  const char *rule = "----------------------------------------------------------------------------------------------------";
  fprintf(out, "\nParallel kernels: busy ms per OpenMP thread (the shares of their loops; %d thread%s)\n%s\n"
               "%-44s %-14s %-9s %11s %11s %10s\n%s\n", maxt, maxt == 1 ? "" : "s", rule, "Name (ops)", "Model line",
          "Phase", "Busiest ms", "Idlest ms", "Imbalance", rule);
  int shown = 0;
  for (size_t r = 0; r < n && (max_rows <= 0 || shown < max_rows); r++) {
    const double *b = &busy[r * PROF_MAX_THREADS];
    double hi = 0, lo = -1, sum = 0;
    for (int t = 0; t < maxt; t++) {
      hi = b[t] > hi ? b[t] : hi;
      lo = lo < 0 || b[t] < lo ? b[t] : lo;
      sum += b[t];
    }
    if (sum <= 0) continue;
    char name[45];
    snprintf(name, sizeof name, "%s", rows[r].site->name);
    fprintf(out, "%-44s %-14s %-9s %11.3f %11.3f %9.2fx\n", name, rows[r].site->where, phase_name(rows[r].site->phase),
            hi, lo, hi / (sum / maxt));
    shown++;
  }
  fprintf(out, "%s\n(Imbalance: the busiest thread's time over the mean; 1.00x is an even split.)\n", rule);
  free(busy);
}

void ctc_prof_print_table(const ctc_profile *p, void *file, int max_rows) {
  FILE *out = file;
  Row *rows = calloc(p->ntot + 1, sizeof *rows);
  if (!rows) return;
  size_t n = 0;
  double entry_ms = 0, kernel_ms = 0;
  for (size_t i = 0; i < p->tcap; i++) {
    const ProfTotal *t = &p->tot[i];
    if (!t->site) continue;
    if (t->site->phase == CTC_PROF_ENTRY) {
      entry_ms += t->ms;
      continue;
    }
    kernel_ms += t->ms;
    size_t r = 0;
    while (r < n && !same_row(rows[r].site, t->site)) r++;
    if (r == n) rows[n++].site = t->site;
    rows[r].calls += t->calls;
    rows[r].ms += t->ms;
    rows[r].flops += t->site->flops * (double)t->calls;
    rows[r].bytes += t->site->bytes * (double)t->calls;
  }
  qsort(rows, n, sizeof *rows, cmp_row);
  double all = entry_ms > 0 ? entry_ms : kernel_ms;
  const char *rule = "---------------------------------------------------------------------------------------------"
                     "-------------------------------";
  fprintf(out, "%s\n%-44s %-14s %-9s %7s %11s %11s %7s %9s %8s\n%s\n", rule, "Name (ops)", "Model line", "Phase", "Calls",
          "Total ms", "Avg us", "%", "GFLOP/s", "GB/s", rule);
  for (size_t r = 0; r < n && (max_rows <= 0 || (int)r < max_rows); r++) {
    const Row *w = &rows[r];
    char name[45];
    snprintf(name, sizeof name, "%s", w->site->name);
    char gf[16] = "", gb[16] = "";
    if (w->flops > 0 && w->ms > 0) snprintf(gf, sizeof gf, "%.1f", w->flops / (w->ms * 1e6));
    if (w->bytes > 0 && w->ms > 0) snprintf(gb, sizeof gb, "%.1f", w->bytes / (w->ms * 1e6));
    fprintf(out, "%-44s %-14s %-9s %7lld %11.3f %11.1f %6.2f%% %9s %8s\n", name, w->site->where,
            phase_name(w->site->phase), w->calls, w->ms, w->ms * 1e3 / (double)w->calls, all > 0 ? 100 * w->ms / all : 0,
            gf, gb);
  }
  fprintf(out, "%s\n", rule);
  if (n > (size_t)max_rows && max_rows > 0) fprintf(out, "(%zu more rows)\n", n - (size_t)max_rows);
  fprintf(out, "Kernels total: %.3f ms; entries total: %.3f ms (the rest: copies of outputs and updates, call overhead)\n",
          kernel_ms, entry_ms);
  if (p->dropped) fprintf(out, "(%zu kernel calls past the trace's %zu events are in the totals only)\n", p->dropped, p->cap);
  print_threads(p, out, rows, n, max_rows);
  print_modules(p, out, all);
  free(rows);
}

int ctc_anomaly_check(char *msg, size_t cap, const ctc_prof_site *site, const char *value, const void *data,
                      ctc_dtype dtype, int64_t n) {
  int64_t at = -1;
  double v = 0;
  if (dtype == CTC_F32) {
    const float *p = data;
    for (int64_t i = 0; i < n && at < 0; i++)
      if (!isfinite(p[i])) at = i, v = p[i];
  } else if (dtype == CTC_F64) {
    const double *p = data;
    for (int64_t i = 0; i < n && at < 0; i++)
      if (!isfinite(p[i])) at = i, v = p[i];
  }
  if (at < 0) return CTC_OK;
  const char *what = isnan(v) ? "NaN" : v > 0 ? "Inf" : "-Inf";
  if (site->phase == CTC_PROF_BACKWARD)
    snprintf(msg, cap, "%s in '%s' (element %lld) computed by %s in the backward pass of entry '%s', "
             "differentiating %s: %s", what, value, (long long)at, site->name, site->entry, site->where, site->code);
  else
    snprintf(msg, cap, "%s in '%s' (element %lld) computed by %s at %s (%s of entry '%s'): %s", what, value,
             (long long)at, site->name, site->where, site->phase == CTC_PROF_OPTIMIZER ? "optimizer step" : "forward",
             site->entry, site->code);
  return CTC_ERR_ANOMALY;
}
