/* rt_gradcheck.c - `./net gradcheck [ENTRY]` (programs built with ctc build --dtype f64).
 *
 * PyTorch's torch.autograd.gradcheck for a compiled entry E, on the hidden
 * entries ctc adds in f64 builds (autograd_ad/gradcheck.c):
 *   reverse mode: __grad_E(E's inputs, r) returns s = sum <r_j, out_j> (r random)
 *     and ds/dX for every floating input and trainable parameter X; each element
 *     X[i] (all of them, or --samples K drawn at random per tensor) is compared
 *     with the central difference (s(X[i] + eps) - s(X[i] - eps)) / (2 eps);
 *   forward mode: __jvp_E(E's inputs, tangents) returns E's outputs and their
 *     tangents; for each X, the tangent of every output element along a random
 *     direction u of X is compared with (out(X + eps u) - out(X - eps u)) / (2 eps).
 * A pair passes when |analytical - numerical| <= atol + rtol * |numerical|
 * (PyTorch's defaults: eps 1e-6, atol 1e-5, rtol 1e-3). The first mismatch is
 * reported as PyTorch reports it (the input, the element, numerical and
 * analytical values) and the program exits 1. Parameters are perturbed in the
 * model's arena (each restored right after); the hidden entries write no state,
 * so every call sees the same function. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt_driver_int.h"

typedef struct GcArgs {
  const char *entry, *weights;
  const char *in_name[64], *in_path[64];
  int nin;
  uint64_t seed;
  long long int_max, samples;
  double eps, atol, rtol;
  int help;
} GcArgs;

static void gc_usage(FILE *f, const char *prog) {
  fprintf(f,
          "usage: %s gradcheck [ENTRY] [--weights W] [--input NAME=X.npy] [--samples K] [--seed S]\n"
          "          [--int-max K] [--eps E] [--atol A] [--rtol R]\n"
          "\n"
          "Checks the compiled gradients of ENTRY (default: every entry that has them) against\n"
          "central finite differences of the compiled function, as torch.autograd.gradcheck does:\n"
          "reverse mode (the gradient of s = sum <r, outputs> for a random r, w.r.t. every float\n"
          "input and trainable parameter) and forward mode (the tangent of every output along a\n"
          "random direction of each of them). Needs a program built with `ctc build --dtype f64`.\n"
          "\n"
          "  --weights W     load the parameters first (default: the model's initialisation)\n"
          "  --input NAME=X.npy  an input of ENTRY from a file (default: random, floats in [-1, 1),\n"
          "                  integers in [0, --int-max))\n"
          "  --samples K     check K elements drawn at random per tensor (default 0: all of them)\n"
          "  --seed S        seed of the random inputs, r, directions and samples (default 0)\n"
          "  --int-max K     integer inputs (class labels) are drawn from [0, K) (default 2)\n"
          "  --eps E --atol A --rtol R   default 1e-6, 1e-5, 1e-3 (PyTorch's)\n"
          "\n"
          "exit status: 0 all gradients match, 1 a mismatch (reported) or a usage or data error,\n"
          "2 I/O error\n",
          prog);
}

static int parse_gc_args(int argc, char **argv, GcArgs *a, ctc_error *err) {
  memset(a, 0, sizeof *a);
  a->int_max = 2;
  a->eps = 1e-6;
  a->atol = 1e-5;
  a->rtol = 1e-3;
  for (int i = 0; i < argc; i++) {
    const char *arg = argv[i];
    if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) {
      a->help = 1;
      continue;
    }
    if (arg[0] != '-' || arg[1] == '\0') {
      if (a->entry) return ctc_fail(err, CTC_ERR_ARG, "unexpected argument '%s'", arg);
      a->entry = arg;
      continue;
    }
    static const char *const known[] = {"--weights", "--input", "--samples", "--seed", "--int-max",
                                        "--eps",     "--atol",  "--rtol",    NULL};
    char name[32];
    const char *val;
    int rc = ctc_drv_option_value(argc, argv, &i, known, name, &val, err);
    if (rc) return rc;
    char *end;
    if (!strcmp(name, "--weights")) {
      a->weights = val;
    } else if (!strcmp(name, "--input")) {
      const char *eq = strchr(val, '=');
      if (!eq || eq == val || !eq[1]) return ctc_fail(err, CTC_ERR_ARG, "--input needs NAME=X.npy, not '%s'", val);
      if (a->nin == 64) return ctc_fail(err, CTC_ERR_ARG, "too many --input options");
      char *nm = malloc((size_t)(eq - val) + 1);
      if (!nm) return ctc_fail(err, CTC_ERR_NOMEM, "out of memory");
      memcpy(nm, val, (size_t)(eq - val));
      nm[eq - val] = '\0';
      a->in_name[a->nin] = nm;
      a->in_path[a->nin++] = eq + 1;
    } else if (!strcmp(name, "--eps") || !strcmp(name, "--atol") || !strcmp(name, "--rtol")) {
      double v = strtod(val, &end);
      if (end == val || *end || !(v >= 0) || !isfinite(v) || (name[2] == 'e' && v == 0))
        return ctc_fail(err, CTC_ERR_ARG, "%s needs a %s number, not '%s'", name,
                        name[2] == 'e' ? "positive" : "non-negative", val);
      *(name[2] == 'e' ? &a->eps : name[2] == 'a' ? &a->atol : &a->rtol) = v;
    } else {
      long long v = strtoll(val, &end, 10);
      if (end == val || *end || v < (name[2] == 'i' ? 1 : 0))
        return ctc_fail(err, CTC_ERR_ARG, "%s needs a%s integer, not '%s'", name,
                        name[2] == 'i' ? " positive" : " non-negative", val);
      if (name[2] == 's' && name[3] == 'a') a->samples = v;
      else if (name[2] == 's') a->seed = (uint64_t)v;
      else a->int_max = v;
    }
  }
  return CTC_OK;
}

static double urand(uint64_t *s) { return (double)(ctc_drv_splitmix64(s) >> 11) * 0x1p-53 * 2.0 - 1.0; }

/* Fills an input of the entry: from a .npy (floats of any width or uint8 to f64,
 * integers to the input's integer type) or at random. */
static int fill_input(const ctc_tensor *t, void *dst, const char *path, uint64_t *s, long long int_max, ctc_error *err) {
  int64_t n = ctc_tensor_numel(t);
  if (path) {
    ctc_tensor got;
    int rc = ctc_npy_read(path, &got, err);
    if (rc) return rc;
    if (ctc_tensor_numel(&got) != n) {
      ctc_tensor_free(&got);
      return ctc_fail(err, CTC_ERR_SHAPE, "%s: input '%s' has %lld elements, expected %lld", path, t->name,
                      (long long)ctc_tensor_numel(&got), (long long)n);
    }
    for (int64_t i = 0; i < n; i++) {
      double v;
      const unsigned char *p = got.data;
      switch (got.dtype) {
      case CTC_F32: { float x; memcpy(&x, p + 4 * i, 4); v = x; break; }
      case CTC_F64: memcpy(&v, p + 8 * i, 8); break;
      case CTC_I64: { int64_t x; memcpy(&x, p + 8 * i, 8); v = (double)x; break; }
      case CTC_I32: { int32_t x; memcpy(&x, p + 4 * i, 4); v = x; break; }
      default: v = p[i]; break; /* bool, uint8 */
      }
      unsigned char *o = dst;
      switch (t->dtype) {
      case CTC_F64: memcpy(o + 8 * i, &v, 8); break;
      case CTC_F32: { float x = (float)v; memcpy(o + 4 * i, &x, 4); break; }
      case CTC_I64: { int64_t x = (int64_t)v; memcpy(o + 8 * i, &x, 8); break; }
      case CTC_I32: { int32_t x = (int32_t)v; memcpy(o + 4 * i, &x, 4); break; }
      default: o[i] = v != 0; break;
      }
    }
    ctc_tensor_free(&got);
    return CTC_OK;
  }
  unsigned char *o = dst;
  for (int64_t i = 0; i < n; i++) {
    switch (t->dtype) {
    case CTC_F64: { double v = urand(s); memcpy(o + 8 * i, &v, 8); break; }
    case CTC_F32: { float v = (float)urand(s); memcpy(o + 4 * i, &v, 4); break; }
    case CTC_I64: { int64_t v = (int64_t)ctc_drv_rand_below(s, (uint64_t)int_max); memcpy(o + 8 * i, &v, 8); break; }
    case CTC_I32: { int32_t v = (int32_t)ctc_drv_rand_below(s, (uint64_t)int_max); memcpy(o + 4 * i, &v, 4); break; }
    default: o[i] = (unsigned char)(ctc_drv_splitmix64(s) & 1); break;
    }
  }
  return CTC_OK;
}

static const char *elem_str(char *buf, size_t cap, const ctc_tensor *t, int64_t idx) {
  int64_t c[CTC_MAX_DIMS];
  for (int d = t->ndim - 1; d >= 0; d--) {
    c[d] = t->shape[d] ? idx % t->shape[d] : 0;
    idx = t->shape[d] ? idx / t->shape[d] : 0;
  }
  size_t k = (size_t)snprintf(buf, cap, "[");
  for (int d = 0; d < t->ndim && k < cap; d++) k += (size_t)snprintf(buf + k, cap - k, "%s%lld", d ? ", " : "", (long long)c[d]);
  if (k < cap) snprintf(buf + k, cap - k, "]");
  return buf;
}

typedef struct Gc {
  const char *prog;
  const ctc_model_desc *desc;
  const ctc_entry *e, *g, *j;
  ctc_drv_run *r;
  const GcArgs *a;
  void **gin, **gout, **jin, **jout;
  int nx;                 /* checked tensors: e's float inputs, then trainable parameters */
  double *x[256];         /* their data (an input buffer or the parameter in the arena) */
  const ctc_tensor *xt[256];
  int xin[256];           /* >= 0: input index of e; -1: a parameter */
} Gc;

static int call(Gc *c, const ctc_entry *e, void **in, void **out, ctc_error *err) {
  int rc = e->call(c->r->model, (const void *const *)in, (void *const *)out);
  return rc ? ctc_drv_entry_failed(c->desc, c->r->model, e, rc, "", err) : CTC_OK;
}

static const char *xname(const Gc *c, int i, char *buf, size_t cap) {
  if (c->xin[i] >= 0) snprintf(buf, cap, "input %d ('%s')", c->xin[i], c->xt[i]->name);
  else snprintf(buf, cap, "parameter '%s'", c->xt[i]->name);
  return buf;
}

static int mismatch(double a, double n, const GcArgs *g) { return !(fabs(a - n) <= g->atol + g->rtol * fabs(n)); }

/* Reverse mode; 0 ok, 1 mismatch (reported). */
static int check_reverse(Gc *c, uint64_t *s, int64_t *nchecked, ctc_error *err) {
  int rc;
  if ((rc = call(c, c->g, c->gin, c->gout, err))) return -rc;
  for (int i = 0; i < c->nx; i++) {
    int64_t n = ctc_tensor_numel(c->xt[i]);
    const double *ana = c->gout[1 + i];
    int64_t cnt = c->a->samples && c->a->samples < n ? c->a->samples : n;
    for (int64_t k = 0; k < cnt; k++) {
      int64_t idx = cnt == n ? k : (int64_t)ctc_drv_rand_below(s, (uint64_t)n);
      double v = c->x[i][idx], sp, sm;
      c->x[i][idx] = v + c->a->eps;
      if ((rc = call(c, c->g, c->gin, c->gout, err))) return -rc;
      sp = *(double *)c->gout[0];
      c->x[i][idx] = v - c->a->eps;
      if ((rc = call(c, c->g, c->gin, c->gout, err))) return -rc;
      sm = *(double *)c->gout[0];
      c->x[i][idx] = v;
      double num = (sp - sm) / (2 * c->a->eps);
      (*nchecked)++;
      if (mismatch(ana[idx], num, c->a)) {
        /* ana points into gout, overwritten by the calls: recompute it */
        if ((rc = call(c, c->g, c->gin, c->gout, err))) return -rc;
        char nb[300], eb[200];
        printf("gradcheck %s: reverse mode: Jacobian mismatch for output s = sum <r, outputs> with respect to %s,\n"
               "element %s:\nnumerical: %.10g\nanalytical: %.10g\n",
               c->e->name, xname(c, i, nb, sizeof nb), elem_str(eb, sizeof eb, c->xt[i], idx), num,
               ((const double *)c->gout[1 + i])[idx]);
        return 1;
      }
    }
  }
  return 0;
}

/* Forward mode; 0 ok, 1 mismatch (reported). */
static int check_forward(Gc *c, uint64_t *s, int64_t *nchecked, ctc_error *err) {
  int rc, ne = c->e->ninputs, nt = c->j->ninputs - ne, no = c->j->noutputs / 2;
  if (nt != c->nx) return 0; /* no tangents: nothing to check */
  size_t maxout = 0;
  for (int o = 0; o < no; o++) {
    size_t n = (size_t)ctc_tensor_numel(&c->j->outputs[o]);
    if (n > maxout) maxout = n;
  }
  double *plus = malloc(maxout * sizeof *plus * (size_t)no), *u = NULL;
  if (!plus) return -ctc_fail(err, CTC_ERR_NOMEM, "out of memory");
  for (int i = 0; i < c->nx; i++) {
    int64_t n = ctc_tensor_numel(c->xt[i]);
    for (int k = 0; k < nt; k++) memset(c->jin[ne + k], 0, ctc_tensor_bytes(&c->j->inputs[ne + k]));
    u = c->jin[ne + i];
    for (int64_t k = 0; k < n; k++) u[k] = urand(s);
    double *save = malloc((size_t)n * sizeof *save);
    if (!save) {
      free(plus);
      return -ctc_fail(err, CTC_ERR_NOMEM, "out of memory");
    }
    memcpy(save, c->x[i], (size_t)n * sizeof *save);
    for (int64_t k = 0; k < n; k++) c->x[i][k] = save[k] + c->a->eps * u[k];
    if ((rc = call(c, c->j, c->jin, c->jout, err))) goto fail;
    for (int o = 0; o < no; o++)
      memcpy(plus + (size_t)o * maxout, c->jout[o], ctc_tensor_bytes(&c->j->outputs[o]));
    for (int64_t k = 0; k < n; k++) c->x[i][k] = save[k] - c->a->eps * u[k];
    if ((rc = call(c, c->j, c->jin, c->jout, err))) goto fail;
    for (int o = 0; o < no; o++) {
      int64_t m = ctc_tensor_numel(&c->j->outputs[o]);
      double *minus = c->jout[o];
      for (int64_t k = 0; k < m; k++) minus[k] = (plus[(size_t)o * maxout + (size_t)k] - minus[k]) / (2 * c->a->eps);
    }
    /* the numerical JVPs are in jout[0..no); the analytical ones come at x */
    double *num = malloc(maxout * sizeof *num * (size_t)no);
    if (!num) {
      rc = ctc_fail(err, CTC_ERR_NOMEM, "out of memory");
      goto fail;
    }
    for (int o = 0; o < no; o++) memcpy(num + (size_t)o * maxout, c->jout[o], ctc_tensor_bytes(&c->j->outputs[o]));
    memcpy(c->x[i], save, (size_t)n * sizeof *save);
    if ((rc = call(c, c->j, c->jin, c->jout, err))) {
      free(num);
      goto fail;
    }
    for (int o = 0; o < no; o++) {
      int64_t m = ctc_tensor_numel(&c->j->outputs[o]);
      const double *ana = c->jout[no + o];
      for (int64_t k = 0; k < m; k++) {
        double nv = num[(size_t)o * maxout + (size_t)k];
        (*nchecked)++;
        if (mismatch(ana[k], nv, c->a)) {
          char nb[300], eb[200];
          printf("gradcheck %s: forward mode: Jacobian mismatch for output %d ('%s') with respect to %s\n"
                 "(along a random direction), element %s:\nnumerical: %.10g\nanalytical: %.10g\n",
                 c->e->name, o, c->j->outputs[o].name, xname(c, i, nb, sizeof nb),
                 elem_str(eb, sizeof eb, &c->j->outputs[o], k), nv, ana[k]);
          free(num);
          free(save);
          free(plus);
          return 1;
        }
      }
    }
    free(num);
    free(save);
    for (int64_t k = 0; k < n; k++) u[k] = 0;
  }
  free(plus);
  return 0;
fail:
  free(plus);
  return -rc;
}

static void free_bufs(void **b, int n) {
  if (!b) return;
  for (int i = 0; i < n; i++) free(b[i]);
  free(b);
}

static int alloc_bufs(const ctc_tensor *ts, int n, void ***out, ctc_error *err) {
  *out = calloc((size_t)n + 1, sizeof **out);
  if (!*out) return ctc_fail(err, CTC_ERR_NOMEM, "out of memory");
  for (int i = 0; i < n; i++) {
    size_t b = ctc_tensor_bytes(&ts[i]);
    (*out)[i] = b == SIZE_MAX ? NULL : ctc_drv_alloc_aligned(CTC_DRV_IO_ALIGN, b);
    if (!(*out)[i]) return ctc_fail(err, CTC_ERR_NOMEM, "cannot allocate '%s'", ts[i].name);
  }
  return CTC_OK;
}

/* Checks entry e; returns 0 ok, 1 mismatch, or -status on an error. */
static int check_entry(const char *prog, const ctc_model_desc *desc, const ctc_entry *e, const GcArgs *a,
                       ctc_error *err) {
  char gname[300], jname[300];
  snprintf(gname, sizeof gname, "__grad_%s", e->name);
  snprintf(jname, sizeof jname, "__jvp_%s", e->name);
  Gc c;
  memset(&c, 0, sizeof c);
  ctc_drv_run r;
  memset(&r, 0, sizeof r);
  c.prog = prog;
  c.desc = desc;
  c.e = e;
  c.a = a;
  c.r = &r;
  c.g = ctc_model_entry(desc, gname);
  c.j = ctc_model_entry(desc, jname);
  int rc, res = 0;
  if ((rc = ctc_drv_make_model(desc, &r, err))) goto out;
  if (a->weights && (rc = ctc_model_load(desc, r.model, a->weights, err))) goto out;
  ctc_drv_seed_rng(desc, r.model, a->seed);
  if ((rc = alloc_bufs(c.g->inputs, c.g->ninputs, &c.gin, err)) ||
      (rc = alloc_bufs(c.g->outputs, c.g->noutputs, &c.gout, err)))
    goto out;
  uint64_t s = a->seed ^ 0x243F6A8885A308D3ULL;
  for (int k = 0; k < a->nin; k++) {
    int found = 0;
    for (int i = 0; i < e->ninputs; i++) found |= !strcmp(e->inputs[i].name, a->in_name[k]);
    if (!found) {
      rc = ctc_fail(err, CTC_ERR_ARG, "--input %s: entry %s has no input named '%s'", a->in_name[k], e->name,
                    a->in_name[k]);
      goto out;
    }
  }
  for (int i = 0; i < c.g->ninputs; i++) { /* e's inputs, then the cotangents r */
    const char *path = NULL;
    for (int k = 0; i < e->ninputs && k < a->nin; k++)
      if (!strcmp(e->inputs[i].name, a->in_name[k])) path = a->in_path[k];
    if ((rc = fill_input(&c.g->inputs[i], c.gin[i], path, &s, a->int_max, err))) goto out;
  }
  /* the checked tensors, in __grad_'s output order */
  unsigned char *arena = desc->arena_of ? desc->arena_of(r.model) : r.arena;
  for (int i = 0; i < e->ninputs; i++)
    if (e->inputs[i].dtype == CTC_F64 && c.nx < 256) {
      c.xin[c.nx] = i;
      c.xt[c.nx] = &c.g->inputs[i];
      c.x[c.nx++] = c.gin[i];
    }
  for (int o = 1 + c.nx; o < c.g->noutputs; o++) {
    const ctc_tensor *p = NULL;
    for (int k = 0; k < desc->nparams && !p; k++)
      if (!strcmp(desc->params[k].name, c.g->outputs[o].name + 2)) p = &desc->params[k];
    if (!p || p->dtype != CTC_F64 || c.nx == 256) {
      rc = ctc_fail(err, CTC_ERR_ARG, "%s: output '%s' names no f64 parameter", gname, c.g->outputs[o].name);
      goto out;
    }
    c.xin[c.nx] = -1;
    c.xt[c.nx] = p;
    c.x[c.nx++] = (double *)(void *)(arena + p->offset);
  }
  int64_t nrev = 0, nfwd = 0;
  res = check_reverse(&c, &s, &nrev, err);
  if (res == 0 && c.j) {
    if ((rc = alloc_bufs(c.j->inputs, c.j->ninputs, &c.jin, err)) ||
        (rc = alloc_bufs(c.j->outputs, c.j->noutputs, &c.jout, err)))
      goto out;
    for (int i = 0; i < e->ninputs; i++) { /* the same inputs; the checked ones now live in jin */
      memcpy(c.jin[i], c.gin[i], ctc_tensor_bytes(&e->inputs[i]));
      for (int k = 0; k < c.nx; k++)
        if (c.xin[k] == i) c.x[k] = c.jin[i];
    }
    res = check_forward(&c, &s, &nfwd, err);
  }
  if (res < 0) {
    rc = -res;
    goto out;
  }
  if (res == 0)
    printf("gradcheck %s: ok: reverse mode %lld elements of %d tensors, forward mode %lld output elements "
           "(eps %g, atol %g, rtol %g)\n",
           e->name, (long long)nrev, c.nx, (long long)nfwd, a->eps, a->atol, a->rtol);
out:
  fflush(stdout);
  if (c.g) free_bufs(c.gin, c.g->ninputs), free_bufs(c.gout, c.g->noutputs);
  if (c.j) free_bufs(c.jin, c.j->ninputs), free_bufs(c.jout, c.j->noutputs);
  ctc_drv_run_free(&r);
  return rc ? -rc : res;
}

int ctc_drv_gradcheck(const char *prog, const ctc_model_desc *desc, int argc, char **argv) {
  ctc_error err = {0, ""};
  GcArgs a;
  int rc = parse_gc_args(argc, argv, &a, &err), res = 0, n = 0;
  if (rc == CTC_OK && a.help) {
    gc_usage(stdout, prog);
    goto done;
  }
  for (int i = 0; rc == CTC_OK && i < desc->nentries; i++) {
    const ctc_entry *e = &desc->entries[i];
    if (!strncmp(e->name, "__", 2) || (a.entry && strcmp(a.entry, e->name))) continue;
    char gname[300];
    snprintf(gname, sizeof gname, "__grad_%s", e->name);
    if (!ctc_model_entry(desc, gname)) {
      if (a.entry)
        rc = ctc_fail(&err, CTC_ERR_ARG, "entry '%s' has no gradients to check%s", e->name,
                      desc->nparams && desc->params[0].dtype == CTC_F32
                          ? " (gradcheck needs a program built with `ctc build --dtype f64`)" : "");
      continue;
    }
    n++;
    int r = check_entry(prog, desc, e, &a, &err);
    if (r < 0) rc = -r;
    else if (r > 0) res = 1;
    if (res) break;
  }
  if (rc == CTC_OK && !n && !a.help)
    rc = a.entry && !ctc_model_entry(desc, a.entry)
             ? ctc_fail(&err, CTC_ERR_ARG, "no entry '%s'", a.entry)
             : ctc_fail(&err, CTC_ERR_ARG, "no entry with gradients to check (gradcheck needs a program built "
                                           "with `ctc build --dtype f64`%s)",
                        desc->nparams && desc->params[0].dtype == CTC_F64
                            ? ", and static shapes: a run-time batch (--max) gets no gradient entries" : "");
done:
  for (int k = 0; k < a.nin; k++) free((void *)a.in_name[k]);
  if (rc == CTC_OK) return res;
  int status = ctc_drv_report(prog, &err);
  if (err.code == CTC_ERR_ARG) fprintf(stderr, "%s: try '%s gradcheck --help'\n", prog, prog);
  return status;
}
