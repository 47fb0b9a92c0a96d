/* schedule.c - partitioning an entry into kernels (see kernels.h).
 *
 * One walk over the instructions in order keeps one open KN_ELEM kernel and
 * decides for each instruction whether it joins it (the fusion rule in
 * kernels.h) or closes it. Because kernels are contiguous runs, the kernel
 * index is a valid time step for the memory plan. Then the uses of every value
 * decide which kernel results are stored (outputs) and which stay scalar
 * locals (PlanHints.nostore). */
#include <string.h>
#include "kernels.h"

static const Inst *def_of(const Func *f, ValId v) {
  const Value *val = &f->values.data[v];
  if (val->kind != V_INST || val->def < 0 || val->def >= f->insts.len) return NULL;
  const Inst *in = &f->insts.data[val->def];
  return in->res == v ? in : NULL;
}

static int is_literal(const Func *f, ValId v) {
  const Inst *in = def_of(f, v);
  return in && in->op == IR_CONST;
}

static int same_shape(const Type *a, const Type *b) {
  if (a->ndim != b->ndim) return 0;
  for (int k = 0; k < a->ndim; k++)
    if (a->dims[k] != b->dims[k]) return 0;
  return 1;
}

KnSchedule *kn_schedule(const Program *p, const Func *f, int fuse) {
  Arena *A = p->arena;
  int ni = f->insts.len, nv = f->values.len;
  KnSchedule *s = arena_alloc(A, sizeof *s);
  s->kernel_of = arena_alloc(A, sizeof(int) * (size_t)(ni ? ni : 1));
  unsigned char *nostore = arena_alloc(A, (size_t)(nv ? nv : 1));
  int open = -1;   /* the KN_ELEM kernel instructions may still join, or -1 */
  for (int i = 0; i < ni; i++) {
    const Inst *in = &f->insts.data[i];
    const Type *rt = &f->values.data[in->res].type;
    if (in->op == IR_CONST && s->kernels.len) {   /* a literal: no code, no storage */
      s->kernel_of[i] = s->kernels.len - 1;
      s->kernels.data[s->kernels.len - 1].last = i;
      continue;
    }
    int k = s->kernels.len;
    if (fuse && open >= 0 && ir_ops[in->op].kind == K_ELEM && same_shape(rt, &s->kernels.data[open].space)) {
      Kernel *kn = &s->kernels.data[open];
      int ok = 1;
      for (int a = 0; a < in->nargs && ok; a++) {
        const Inst *d = def_of(f, in->args[a]);
        /* read as this kernel's local: its shape is the space, same element */
        if (d && d->op != IR_CONST && (int)(d - f->insts.data) >= kn->first) ok = same_shape(&f->values.data[in->args[a]].type, rt);
      }
      if (ok) {
        s->kernel_of[i] = open;
        kn->last = i;
        continue;
      }
    }
    /* a new kernel */
    Kernel kn;
    memset(&kn, 0, sizeof kn);
    kn.first = kn.last = i;
    kn.space = *rt;
    if (in->op == IR_CONST || ir_is_view(f, in->res)) kn.kind = KN_VIEW;
    else kn.kind = ir_ops[in->op].kind == K_ELEM ? KN_ELEM : KN_OP;
    vec_push(A, &s->kernels, kn);
    s->kernel_of[i] = k;
    open = kn.kind == KN_ELEM ? k : -1;   /* a view closes the open kernel (kernels are contiguous) */
  }
  /* Which results leave their kernel. */
  unsigned char *used_out = arena_alloc(A, (size_t)(nv ? nv : 1));
  for (int i = 0; i < ni; i++) {
    const Inst *in = &f->insts.data[i];
    for (int a = 0; a < in->nargs; a++) {
      const Inst *d = def_of(f, in->args[a]);
      if (!d) continue;
      int di = (int)(d - f->insts.data);
      if (s->kernel_of[di] != s->kernel_of[i] || ir_is_view(f, in->res) ||
          s->kernels.data[s->kernel_of[i]].kind != KN_ELEM)
        used_out[in->args[a]] = 1;
    }
  }
  for (int i = 0; i < f->outputs.len; i++) used_out[f->outputs.data[i]] = 1;
  for (int i = 0; i < f->updates.len; i++) used_out[f->updates.data[i]] = 1;
  for (int i = 0; i < ni; i++) {
    const Inst *in = &f->insts.data[i];
    Kernel *kn = &s->kernels.data[s->kernel_of[i]];
    if (in->op == IR_CONST) continue;
    if (kn->kind == KN_ELEM && !used_out[in->res]) nostore[in->res] = 1;
    else if (kn->kind != KN_VIEW) vec_push(A, &kn->outputs, in->res);
    for (int a = 0; a < in->nargs; a++) {
      ValId v = in->args[a];
      const Inst *d = def_of(f, v);
      if (is_literal(f, v) || (d && s->kernel_of[d - f->insts.data] == s->kernel_of[i] && kn->kind == KN_ELEM)) continue;
      int dup = 0;
      for (int j = 0; j < kn->inputs.len; j++) dup |= kn->inputs.data[j] == v;
      if (!dup) vec_push(A, &kn->inputs, v);
    }
  }
  for (int k = 0; k < s->kernels.len; k++) s->ncode += s->kernels.data[k].kind != KN_VIEW;
  s->hints.step = s->kernel_of;
  s->hints.nostore = nostore;
  return s;
}

static void print_val(FILE *out, const Func *f, ValId v) {
  fprintf(out, " %%%s.%d", f->values.data[v].name, v);
}

void kn_print(FILE *out, const Program *p, const Func *f, const KnSchedule *s) {
  char tb[256];
  static const char *const kind[] = {"elementwise", "op", "view"};
  fprintf(out, "func %s: %d instructions, %d kernels (%d with code)\n", f->name, f->insts.len, s->kernels.len,
          s->ncode);
  for (int k = 0; k < s->kernels.len; k++) {
    const Kernel *kn = &s->kernels.data[k];
    fprintf(out, "  kernel %d: %s over %s\n", k, kind[kn->kind], ir_type_str(&kn->space, tb, sizeof tb));
    fprintf(out, "    inputs:");
    for (int j = 0; j < kn->inputs.len; j++) print_val(out, f, kn->inputs.data[j]);
    fprintf(out, "\n    outputs:");
    for (int j = 0; j < kn->outputs.len; j++) print_val(out, f, kn->outputs.data[j]);
    fprintf(out, "\n");
    for (int i = kn->first; i <= kn->last; i++) {
      const Inst *in = &f->insts.data[i];
      if (in->op == IR_CONST) continue;
      fprintf(out, "    %%%s.%d = %s%s : %s", f->values.data[in->res].name, in->res, ir_ops[in->op].name,
              kn_internal(s, in->res) ? " (local)" : "", ir_type_str(&f->values.data[in->res].type, tb, sizeof tb));
      if (in->loc.line > 0) fprintf(out, "    ; line %d", in->loc.line);
      fprintf(out, "\n");
    }
  }
  (void)p;
}
