/* gradcheck.c - the hidden entries `./net gradcheck` checks (ctc build --dtype f64).
 *
 * For every entry E with floating outputs (except scheduler and evaluation
 * steps), a copy of E without its state writes (no parameter update, no
 * optimizer or BatchNorm statistics, dropout's stream position kept) becomes
 *
 *   __grad_E(E's inputs..., r_0..r_k) -> (s, d_<input>..., d_<param>...)
 *       s = sum_j <r_j, out_j> over E's floating outputs; the gradients of s
 *       (reverse mode, ad_reverse seeded with r_j) w.r.t. E's floating inputs
 *       and every trainable parameter (not buffers, not optimizer state);
 *   __jvp_E(E's inputs..., t_<input>..., t_<param>...) -> (out_j..., tangent_j...)
 *       E's floating outputs and their tangents (forward mode, ad_forward) in
 *       the direction of the t_ inputs.
 *
 * The driver (runtime_min/rt_gradcheck.c) compares both with central
 * differences of s and of out_j. A training step's gradients are the ones its
 * backward() computes, as the same reverse sweep over the same forward code;
 * for an entry that already returns gradients (torch.autograd.grad, hvp) this
 * differentiates them once more (gradgradcheck). */
#include <stdlib.h>
#include <string.h>

#include "ad_int.h"

static Func *clone_func(Program *p, const Func *f, const char *name) {
  Func *g = ir_func_new(p, name, f->loc);
  const char *nm = g->name;
  *g = *f;
  g->name = nm;
  g->kind = FK_FUNCTION;
  memset(&g->values, 0, sizeof g->values);
  memset(&g->insts, 0, sizeof g->insts);
  memset(&g->inputs, 0, sizeof g->inputs);
  memset(&g->outputs, 0, sizeof g->outputs);
  memset(&g->out_names, 0, sizeof g->out_names);
  memset(&g->updates, 0, sizeof g->updates);
  memset(&g->update_params, 0, sizeof g->update_params);
  memset(&g->sync, 0, sizeof g->sync);
  memset(&g->sync_params, 0, sizeof g->sync_params);
  for (int i = 0; i < f->values.len; i++) vec_push(p->arena, &g->values, f->values.data[i]);
  for (int i = 0; i < f->insts.len; i++) {
    Inst in = f->insts.data[i];
    if (in.nargs) {
      ValId *a = arena_alloc(p->arena, (size_t)in.nargs * sizeof *a);
      memcpy(a, in.args, (size_t)in.nargs * sizeof *a);
      in.args = a;
    }
    vec_push(p->arena, &g->insts, in);
  }
  for (int i = 0; i < f->inputs.len; i++) vec_push(p->arena, &g->inputs, f->inputs.data[i]);
  return g;
}

/* "t_conv1.weight" -> "t_conv1_weight" (entry argument names are C-like) */
static const char *ident(Program *p, const char *pre, const char *name) {
  char *s = arena_printf(p->arena, "%s%s", pre, name);
  for (char *c = s; *c; c++)
    if (*c == '.') *c = '_';
  return s;
}

static int trainable(const Param *pr) {
  return !pr->is_buffer && !pr->is_state && ir_dtype_is_float(pr->type.dtype);
}

static void add_grad_entry(Program *p, const Func *f) {
  int nout = 0;
  for (int j = 0; j < f->outputs.len; j++) nout += ir_dtype_is_float(ir_type((Func *)f, f->outputs.data[j])->dtype);
  if (!nout) return;
  Func *g = clone_func(p, f, arena_printf(p->arena, "__grad_%s", f->name));
  int n0 = f->inputs.len;
  AdSeed *seeds = arena_alloc(p->arena, (size_t)nout * sizeof *seeds);
  int ns = 0;
  ValId s = -1;
  Type scalar = {0};
  scalar.dtype = DT_F64;
  for (int j = 0; j < f->outputs.len; j++) {
    ValId o = f->outputs.data[j];
    Type t = *ir_type(g, o);
    if (!ir_dtype_is_float(t.dtype)) continue;
    ValId r = ir_add_input(p, g, arena_printf(p->arena, "__r%d", ns), t);
    seeds[ns++] = (AdSeed){o, r};
    ValId m = ir_emit(p, g, IR_MUL, (ValId[]){o, r}, 2, t, NULL, 0, 0, f->loc, "gc_prod");
    if (t.ndim) {
      Type k = t;
      for (int d = 0; d < k.ndim; d++) k.dims[d] = 1;
      int64_t mask = ((int64_t)1 << t.ndim) - 1;
      m = ir_emit(p, g, IR_REDUCE_SUM, &m, 1, k, &mask, 1, 0, f->loc, "gc_sum");
      Type st = scalar;
      st.dtype = t.dtype;
      m = ir_emit(p, g, IR_RESHAPE, &m, 1, st, NULL, 0, 0, f->loc, "gc_s");
    }
    if (t.dtype != DT_F64) {
      m = ir_emit(p, g, IR_CAST, &m, 1, scalar, NULL, 0, 0, f->loc, "gc_s");
    }
    s = s < 0 ? m : ir_emit(p, g, IR_ADD, (ValId[]){s, m}, 2, scalar, NULL, 0, 0, f->loc, "gc_s");
  }
  /* what to differentiate: floating inputs, then trainable parameters */
  ValId *wrt = arena_alloc(p->arena, (size_t)(n0 + p->params.len + 1) * sizeof *wrt);
  const char **names = arena_alloc(p->arena, (size_t)(n0 + p->params.len + 1) * sizeof *names);
  int nw = 0;
  for (int i = 0; i < n0; i++) {
    ValId v = g->inputs.data[i];
    if (!ir_dtype_is_float(ir_type(g, v)->dtype)) continue;
    names[nw] = arena_printf(p->arena, "d_%s", ir_val(g, v)->name);
    wrt[nw++] = v;
  }
  for (int k = 0; k < p->params.len; k++) {
    if (!trainable(&p->params.data[k])) continue;
    names[nw] = arena_printf(p->arena, "d_%s", p->params.data[k].name);
    wrt[nw++] = ir_param_value(p, g, k);
  }
  ValId *grads = arena_alloc(p->arena, (size_t)(nw + 1) * sizeof *grads);
  if (nw) ad_reverse(p, g, seeds, ns, wrt, nw, grads, NULL);
  ir_add_output(p, g, s, "s");
  for (int i = 0; i < nw; i++) ir_add_output(p, g, grads[i], names[i]);
}

static void add_jvp_entry(Program *p, const Func *f) {
  int nout = 0;
  for (int j = 0; j < f->outputs.len; j++) nout += ir_dtype_is_float(ir_type((Func *)f, f->outputs.data[j])->dtype);
  if (!nout) return;
  Func *g = clone_func(p, f, arena_printf(p->arena, "__jvp_%s", f->name));
  int n0 = f->inputs.len, ninst = g->insts.len;
  AdSeed *seeds = arena_alloc(p->arena, (size_t)(n0 + p->params.len + 1) * sizeof *seeds);
  int ns = 0;
  for (int i = 0; i < n0; i++) {
    ValId v = g->inputs.data[i];
    Type t = *ir_type(g, v);
    if (!ir_dtype_is_float(t.dtype)) continue;
    const char *nm = ir_val(g, v)->name;
    seeds[ns++] = (AdSeed){v, ir_add_input(p, g, ident(p, "t_", nm), t)};
  }
  for (int k = 0; k < p->params.len; k++) {
    if (!trainable(&p->params.data[k])) continue;
    ValId v = ir_param_value(p, g, k);
    seeds[ns++] = (AdSeed){v, ir_add_input(p, g, ident(p, "t_", p->params.data[k].name),
                                           p->params.data[k].type)};
  }
  ValId *outs = arena_alloc(p->arena, (size_t)nout * sizeof *outs);
  ValId *touts = arena_alloc(p->arena, (size_t)nout * sizeof *touts);
  const char **names = arena_alloc(p->arena, (size_t)nout * sizeof *names);
  int no = 0;
  for (int j = 0; j < f->outputs.len; j++) {
    ValId o = f->outputs.data[j];
    if (!ir_dtype_is_float(ir_type(g, o)->dtype)) continue;
    names[no] = f->out_names.data[j];
    outs[no++] = o;
  }
  if (ns) ad_forward(p, g, ninst, seeds, ns, outs, no, touts, 0);
  for (int j = 0; j < no; j++) ir_add_output(p, g, outs[j], names[j]);
  for (int j = 0; j < no; j++)
    if (ns) ir_add_output(p, g, touts[j], arena_printf(p->arena, "tangent_%s", names[j]));
}

void ad_gradcheck_entries(Program *p) {
  int n = p->funcs.len;
  for (int i = 0; i < n; i++) {
    const Func *f = p->funcs.data[i];
    if (f->kind == FK_SCHED || f->kind == FK_EVAL || f->derived) continue;   /* derived: KV-cache decode/prefill */
    add_grad_entry(p, f);
    add_jvp_entry(p, p->funcs.data[i]);
  }
}

ValId ad_test_wrong_rule(Ad *ad, const char *env, Op op, ValId d) {
  const char *w = getenv(env);
  if (!w || strcmp(w, ir_ops[op].name)) return d;
  return ad_bin(ad, IR_MUL, d, ad_const(ad, ir_type(ad->f, d)->dtype, 1.1));
}
