/* foreach_c.c - a run of kernels that compute the same update on each parameter
 * (kernels/foreach.c: KnForeach) written as one loop over a static table of their
 * arrays' arena offsets and element counts, as PyTorch's foreach optimizers:
 *
 *   static const struct { int64_t n; size_t grad, exp_avg, param; } update_tab[11] = {
 *     {2080, 2126720, 687104, 0},   /- emb.weight -/  ...};
 *   for (int p = 0; p < 11; p++) {
 *     const float *grad = (const float *)(A + update_tab[p].grad);  ...
 *     <the largest kernel's loop, its count update_tab[p].n>
 *   }
 *
 * The loop is the kernel IR of the run's largest kernel rendered as any kernel
 * (its comments, OpenMP and SIMD marks: threads when the largest is worth them),
 * with the columns' values named by the table's pointers (CgFunc.cname swapped
 * while it is written) and its count the row's (CgFunc.trip). A column is named
 * after the first kernel's value with its parameter's name taken out:
 * "optimizer.emb.weight.exp_avg" -> exp_avg, "emb_weight_grad" -> grad,
 * "emb.weight" -> param. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cg_int.h"

typedef long long ll;

#define LINE(c, ...) (cg_printf((c)->out, "%*s", (c)->ind, ""), cg_printf((c)->out, __VA_ARGS__))

/* The model parameter (an nn.Parameter or buffer, not training state) kernel kn updates, or -1. */
static int updated_param(const Program *p, const Func *f, const Kernel *kn) {
  for (int u = 0; u < f->updates.len; u++) {
    const Param *pr = &p->params.data[f->update_params.data[u]];
    if (pr->is_state) continue;
    for (int j = 0; j < kn->outputs.len; j++)
      if (kn->outputs.data[j] == f->updates.data[u]) return f->update_params.data[u];
  }
  return -1;
}

/* The parameter that value v is, or whose update it is, or -1. */
static int param_named(const Func *f, ValId v) {
  if (f->values.data[v].kind == V_PARAM) return f->values.data[v].index;
  for (int u = 0; u < f->updates.len; u++)
    if (f->updates.data[u] == v) return f->update_params.data[u];
  return -1;
}

/* text with the identifier pn taken out where it is a whole part of it (between '_'):
 * what follows it, else what precedes it, else "param". */
static void strip_name(char *out, size_t cap, const char *text, const char *pn) {
  size_t lp = strlen(pn), lt = strlen(text);
  for (size_t at = 0; lp && at + lp <= lt; at++) {
    if (strncmp(text + at, pn, lp) || (at && text[at - 1] != '_') || (text[at + lp] && text[at + lp] != '_')) continue;
    if (text[at + lp]) snprintf(out, cap, "%s", text + at + lp + 1);
    else if (at > 1) snprintf(out, cap, "%.*s", (int)(at - 1), text);
    else snprintf(out, cap, "param");
    return;
  }
  snprintf(out, cap, "%s", text);
}

void cg_emit_foreach(CgFunc *c, const KnForeach *fe) {
  const Program *p = c->p;
  const Func *f = c->f;
  int nc = fe->ncol, nk = fe->count;
  const Kernel *k0 = &c->s->kernels.data[fe->first];
  int p0 = updated_param(p, f, k0);
  char pn[256], text[200], hint[256];
  cg_ident(pn, sizeof pn, p0 >= 0 ? p->params.data[p0].name : "");
  /* the columns' fields (unique among themselves) and their pointers' names */
  const char **field = calloc((size_t)nc + 1, sizeof *field), **ptr = calloc((size_t)nc + 1, sizeof *ptr);
  CHECK(field && ptr);
  for (int col = 0; col < nc; col++) {
    ValId v = fe->val[col];
    int q = param_named(f, v);
    cg_ident(text, sizeof text, q >= 0 ? p->params.data[q].name : c->cname[v]);
    strip_name(hint, sizeof hint, text, pn);
    cg_ident(text, sizeof text, hint);
    snprintf(hint, sizeof hint, "%s", text);
    for (int d = 2, clash = 1; clash; d++) {
      clash = !strcmp(hint, "n");
      for (int e = 0; e < col && !clash; e++) clash = !strcmp(field[e], hint);
      if (clash) snprintf(hint, sizeof hint, "%s_%d", text, d);
    }
    field[col] = arena_printf(p->arena, "%s", hint);
    if (cg_name_given(c->ns, hint)) snprintf(text, sizeof text, "%s_p", field[col]);   /* "grad" is often taken */
    ptr[col] = cg_name(c->ns, cg_name_given(c->ns, hint) ? text : hint);
  }
  const char *tab = cg_name(c->ns, "update_tab"), *pv = cg_name(c->ns, "p");
  char where[256] = "";
  for (int i = k0->first; i <= k0->last && !where[0]; i++) cg_where(where, sizeof where, f->insts.data[i].loc);
  if (c->out->len) cg_puts(c->out, "\n");
  LINE(c, "/* kernels %d..%d: the same update of %d parameters%s%s, one loop over the table of their arrays\n", fe->first,
       fe->first + nk - 1, nk, where[0] ? " at " : "", where);
  LINE(c, "   (each row runs kernel %d's loop, below, on its arrays) */\n", fe->first + fe->big);
  LINE(c, "static const struct { int64_t n; size_t");
  for (int col = 0; col < nc; col++) cg_printf(c->out, "%s %s", col ? "," : "", field[col]);
  cg_printf(c->out, "; } %s[%d] = {\n", tab, nk);
  for (int j = 0; j < nk; j++) {
    const Kernel *kn = &c->s->kernels.data[fe->first + j];
    LINE(c, "  {%lld", (ll)fe->n[j]);
    for (int col = 0; col < nc; col++) cg_printf(c->out, ", %lld", (ll)fe->off[j * nc + col]);
    int q = updated_param(p, f, kn);
    char cm[256], tb[128];
    cg_printf(c->out, "},   /* %s %s */\n", cg_comment_text(cm, sizeof cm, q >= 0 ? p->params.data[q].name : "?"),
              ir_type_str(&kn->space, tb, sizeof tb));
  }
  LINE(c, "};\n");
  LINE(c, "for (int %s = 0; %s < %d; %s++) {\n", pv, pv, nk, pv);
  c->ind += 2;
  for (int col = 0; col < nc; col++) {
    const char *ct = cg_ctype(f->values.data[fe->val[col]].type.dtype), *cq = fe->store[col] ? "" : "const ";
    LINE(c, "%s%s *%s = (%s%s *)(A + %s[%s].%s);\n", cq, ct, ptr[col], cq, ct, tab, pv, field[col]);
  }
  /* the largest kernel, its values of the columns named by their pointers */
  int ns = fe->nslot;
  const ValId *sl = fe->slot + fe->big * ns;
  const char **saved = calloc((size_t)ns + 1, sizeof *saved);
  unsigned char *ref = calloc((size_t)ns + 1, 1);
  CHECK(saved && ref);
  for (int q = 0; q < ns; q++) saved[q] = c->cname[sl[q]], ref[q] = c->ref[sl[q]];
  for (int q = 0; q < ns; q++)
    if (fe->slot_col[q] >= 0) c->cname[sl[q]] = ptr[fe->slot_col[q]];
  char trip[160];
  snprintf(trip, sizeof trip, "%s[%s].n", tab, pv);
  c->trip = trip;
  cg_emit_kernel(c, fe->first + fe->big);
  c->trip = NULL;
  for (int q = ns - 1; q >= 0; q--)   /* in reverse: a value in several slots gets its first saved name */
    if (fe->slot_col[q] >= 0) c->cname[sl[q]] = saved[q], c->ref[sl[q]] = ref[q];
  c->ind -= 2;
  LINE(c, "}\n");
  free(saved);
  free(ref);
  free(field);
  free(ptr);
}
