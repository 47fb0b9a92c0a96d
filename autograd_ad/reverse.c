/* reverse.c - reverse-mode AD: the adjoint sweep over a function's
 * instructions, accumulating adjoints; the per-primitive rules live in vjp.c. */
#include <stdlib.h>
#include <string.h>
#include "ad_int.h"

Type *ad_type(Ad *ad, ValId v) { return ir_type(ad->f, v); }

/* The complete adjoint g of forward value v (every use of v comes after its definition, so
 * the reverse sweep has added all contributions when it reaches v's instruction) is marked as
 * v's gradient, which names it in the generated code: grad_fc1, grad_sigmoid_3. Only a value
 * this sweep made (index nv or more), once (a sum shared by two operands keeps the later one). */
static void name_adjoint(Func *f, ValId g, ValId v, int nv) {
  Value *gv = &f->values.data[g];
  if (g < nv || gv->kind != V_INST || gv->adjoint_of) return;
  gv->adjoint_of = v + 1;
}

/* The values a VJP rule made on the way to operand a's gradient term g (those from index v0 on
 * that g reads, directly or through each other) are terms of a's gradient, which names them in
 * the generated code (grad_sub_3_term) instead of a bare number. A value that is not the rule's
 * own gradient arithmetic (a recomputed forward value, a mask) keeps its name; one that feeds the
 * terms of two operands keeps the first. */
static void name_terms(Func *f, ValId g, ValId a, int v0) {
  if (g < v0) return;
  Value *gv = &f->values.data[g];
  if (gv->kind != V_INST || gv->term_of || strcmp(gv->name, "grad")) return;
  gv->term_of = a + 1;
  const Inst *in = &f->insts.data[gv->def];
  for (int k = 0; k < in->nargs; k++) name_terms(f, in->args[k], a, v0);
}

ValId ad_emit(Ad *ad, Op op, const ValId *args, int nargs, Type res, const int64_t *attr, const char *name) {
  int nattr = ir_op_nattrs(op, &res, nargs > 0 ? ad_type(ad, args[0]) : NULL, attr);
  ValId small[8], *a = nargs <= 8 ? small : malloc(sizeof(ValId) * (size_t)nargs);
  if (!a) BUG("out of memory");
  for (int k = 0; k < nargs; k++) a[k] = ad_remat(ad, args[k]);   /* recomputed forward values */
  ValId r = ir_emit(ad->p, ad->f, op, a, nargs, res, attr, attr ? nattr : 0, 0, ad->loc, name);
  if (a != small) free(a);
  if (ad->clone && ir_ops[op].kind != K_ELEM && ir_ops[op].kind != K_CONST) ad_remat_forget(ad);   /* a kernel boundary */
  return r;
}

ValId ad_const(Ad *ad, DType dt, double v) { return ir_const(ad->p, ad->f, dt, v, ad->loc); }

int ad_is_const(Ad *ad, ValId v, double *val) {
  Value *x = ir_val(ad->f, v);
  if (x->kind != V_INST || ad->f->insts.data[x->def].op != IR_CONST) return 0;
  if (val) *val = ad->f->insts.data[x->def].fattr;
  return 1;
}

ValId ad_bin(Ad *ad, Op op, ValId a, ValId b) {
  Type r;
  if (ir_broadcast_shapes(ad_type(ad, a), ad_type(ad, b), &r) < 0) BUG("ad: shapes do not broadcast");
  r.dtype = ad_type(ad, a)->dtype;
  double c;
  /* small algebraic clean-ups keep the backward code readable */
  if (op == IR_MUL && ad_is_const(ad, b, &c) && c == 1 && ir_type_eq(&r, ad_type(ad, a))) return a;
  if (op == IR_MUL && ad_is_const(ad, a, &c) && c == 1 && ir_type_eq(&r, ad_type(ad, b))) return b;
  ValId args[2] = {a, b};
  return ad_emit(ad, op, args, 2, r, NULL, "grad");
}

ValId ad_un(Ad *ad, Op op, ValId a) { return ad_emit(ad, op, &a, 1, *ad_type(ad, a), NULL, "grad"); }

ValId ad_cmp(Ad *ad, Op op, ValId a, ValId b) {
  Type r;
  if (ir_broadcast_shapes(ad_type(ad, a), ad_type(ad, b), &r) < 0) BUG("ad: shapes do not broadcast");
  r.dtype = DT_BOOL;
  ValId args[2] = {a, b};
  return ad_emit(ad, op, args, 2, r, NULL, "mask");
}

ValId ad_where(Ad *ad, ValId c, ValId a, ValId b) {
  Type r;
  if (ir_broadcast_shapes(ad_type(ad, c), ad_type(ad, a), &r) < 0 || ir_broadcast_shapes(&r, ad_type(ad, b), &r) < 0)
    BUG("ad: where shapes");
  r.dtype = ad_type(ad, a)->dtype;
  ValId args[3] = {c, a, b};
  return ad_emit(ad, IR_WHERE, args, 3, r, NULL, "grad");
}

ValId ad_cast(Ad *ad, ValId a, DType dt) {
  Type t = *ad_type(ad, a);
  if (t.dtype == dt) return a;
  t.dtype = dt;
  return ad_emit(ad, IR_CAST, &a, 1, t, NULL, "grad");
}

ValId ad_reshape(Ad *ad, ValId a, const Type *t) {
  Type r = *t;
  r.dtype = ad_type(ad, a)->dtype;
  if (ir_type_eq(&r, ad_type(ad, a))) return a;
  return ad_emit(ad, IR_RESHAPE, &a, 1, r, NULL, "grad");
}

ValId ad_broadcast(Ad *ad, ValId a, const Type *t) {
  Type r = *t;
  r.dtype = ad_type(ad, a)->dtype;
  if (ir_type_eq(&r, ad_type(ad, a))) return a;
  return ad_emit(ad, IR_BROADCAST, &a, 1, r, NULL, "grad");
}

ValId ad_sum_to(Ad *ad, ValId g, const Type *t) {
  Type gt = *ad_type(ad, g);
  if (gt.ndim == t->ndim) {
    int same = 1;
    for (int i = 0; i < t->ndim; i++) same &= gt.dims[i] == t->dims[i];
    if (same) return g;
  }
  /* reduce the leading axes t lacks and the axes where t has size 1 */
  int lead = gt.ndim - t->ndim;
  int64_t mask = 0;
  Type kd = gt;
  for (int i = 0; i < gt.ndim; i++) {
    int j = i - lead;
    if (j < 0 || (t->dims[j] == 1 && gt.dims[i] != 1)) {
      mask |= (int64_t)1 << i;
      kd.dims[i] = 1;
    }
  }
  ValId r = g;
  if (mask) r = ad_emit(ad, IR_REDUCE_SUM, &g, 1, kd, &mask, "grad");
  return ad_reshape(ad, r, t);
}

ValId ad_zeros(Ad *ad, const Type *t) {
  ValId z = ad_const(ad, t->dtype, 0);
  if (t->ndim == 0) return z;
  return ad_broadcast(ad, z, t);
}

/* ---- the sweep -------------------------------------------------------------- */

void ad_reverse(Program *p, Func *f, const AdSeed *seeds, int nseeds, const ValId *wrt, int nwrt, ValId *grads,
                int *reached) {
  ad_reverse_upto(p, f, -1, seeds, nseeds, wrt, nwrt, grads, reached);
}

void ad_reverse_upto(Program *p, Func *f, int ninsts, const AdSeed *seeds, int nseeds, const ValId *wrt, int nwrt,
                     ValId *grads, int *reached) {
  ir_pass_event(p, f, "ad_reverse", 0);
  int phase = f->phase, scope = f->scope;   /* restored at the end */
  if (f->phase == PH_FORWARD) f->phase = PH_BACKWARD;
  int nv = f->values.len, ni = ninsts >= 0 && ninsts < f->insts.len ? ninsts : f->insts.len;
  char *active = calloc((size_t)nv + 1, 1);   /* depends on some wrt value */
  ValId *adj = malloc(sizeof(ValId) * ((size_t)nv + 1));
  if (!active || !adj) BUG("out of memory");
  for (int i = 0; i < nv; i++) adj[i] = -1;
  for (int i = 0; i < nwrt; i++) active[wrt[i]] = 1;
  for (int i = 0; i < ni; i++) {
    const Inst *in = &f->insts.data[i];
    if (in->dead || !ir_dtype_is_float(f->values.data[in->res].type.dtype)) continue;
    /* stop-gradient: detach() and code staged under no_grad()/inference_mode()
     * are constants (their result is active only if it is itself a wrt value) */
    if (in->op == IR_DETACH || in->nograd != NG_NONE) continue;
    for (int k = 0; k < in->nargs; k++)
      if (active[in->args[k]]) active[in->res] = 1;
  }
  Ad ad = {p, f, f->loc, NULL, NULL, 0, 0};
  ad_remat_init(&ad, ni);
  for (int s = 0; s < nseeds; s++) {
    ValId v = seeds[s].value, g = seeds[s].seed;
    if (g < 0) {
      ad.loc = f->values.data[v].kind == V_INST ? f->insts.data[f->values.data[v].def].loc : f->loc;
      g = ad_const(&ad, f->values.data[v].type.dtype, 1);
      g = ad_broadcast(&ad, g, ir_type(f, v));
    }
    adj[v] = adj[v] < 0 ? g : ad_bin(&ad, IR_ADD, adj[v], g);
  }
  int maxargs = 1;
  for (int i = 0; i < ni; i++)
    if (f->insts.data[i].nargs > maxargs) maxargs = f->insts.data[i].nargs;
  int *need = malloc(sizeof(int) * (size_t)maxargs);
  ValId *dargs = malloc(sizeof(ValId) * (size_t)maxargs);
  if (!need || !dargs) BUG("out of memory");
  for (int i = ni - 1; i >= 0; i--) {
    Inst in = f->insts.data[i];   /* a copy: emitting grows f->insts */
    if (in.dead || adj[in.res] < 0 || !active[in.res]) continue;
    if (in.op == IR_DETACH || in.nograd != NG_NONE) continue;
    name_adjoint(f, adj[in.res], in.res, nv);
    int any = 0;
    for (int k = 0; k < in.nargs; k++) {
      ValId a = in.args[k];
      need[k] = active[a] && ir_dtype_is_float(f->values.data[a].type.dtype);
      any |= need[k];
      dargs[k] = -1;
    }
    if (!any) continue;
    ad.loc = in.loc;
    f->scope = in.scope;   /* a gradient belongs to the module of what it differentiates */
    if (!ad_vjp_rules[in.op]) BUG("no VJP rule for '%s'", ir_ops[in.op].name);
    int v0 = f->values.len;   /* the rule's values: from here on */
    ad_vjp_rules[in.op](&ad, &in, adj[in.res], need, dargs);
    if (need[0] && dargs[0] >= 0) dargs[0] = ad_test_wrong_rule(&ad, "CTC_TEST_WRONG_VJP", in.op, dargs[0]);
    for (int k = 0; k < in.nargs; k++) {
      if (!need[k] || dargs[k] < 0) continue;
      ValId a = in.args[k];
      if (!ir_type_eq(ir_type(f, dargs[k]), ir_type(f, a))) {
        char b1[128], b2[128];
        BUG("VJP of '%s' gave %s for an operand of type %s", ir_ops[in.op].name,
            ir_type_str(ir_type(f, dargs[k]), b1, sizeof b1), ir_type_str(ir_type(f, a), b2, sizeof b2));
      }
      name_terms(f, dargs[k], a, v0);
      int vs = f->values.len;
      adj[a] = adj[a] < 0 ? dargs[k] : ad_bin(&ad, IR_ADD, adj[a], dargs[k]);
      name_terms(f, adj[a], a, vs);   /* a partial sum (the whole one becomes grad_<a> later) */
    }
  }
  ad.loc = f->loc;
  f->scope = scope;
  for (int i = 0; i < nwrt; i++) {
    if (reached) reached[i] = adj[wrt[i]] >= 0;
    grads[i] = adj[wrt[i]] >= 0 ? adj[wrt[i]] : ad_zeros(&ad, ir_type(f, wrt[i]));
    if (f->values.data[grads[i]].kind == V_INST) {
      const Value *w = &f->values.data[wrt[i]];
      f->values.data[grads[i]].name = arena_printf(p->arena, "%s_grad", w->name);
    }
  }
  ad_remat_free(&ad);
  free(active);
  free(adj);
  free(need);
  free(dargs);
  f->phase = phase;
  f->scope = scope;
  ir_pass_event(p, f, "ad_reverse", 1);
}
