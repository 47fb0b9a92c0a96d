/* unslice.c - sums of gradient pieces become one concatenation.
 *
 * The VJP of a slice is UNSLICE: zeros except where the slice was taken. When
 * a value is split into pieces along one axis and each piece is used (the
 * fused q/k/v projection of an attention, `x.split(C, dim=2)`), reverse mode
 * adds the pieces' UNSLICEs: three zero-filled full-size arrays and two adds.
 * An ADD whose operands are UNSLICEs (or such sums) of disjoint ranges of one
 * axis that together cover it is the CONCAT of the pieces in order: this pass
 * rewrites that ADD in place (same result), and DCE removes what it no longer
 * needs. Each element is a sum of exactly one piece and zeros, so the values
 * are the same (x + 0 = x, -0 + 0 = +0 aside: a concatenation keeps -0). */
#include <stdlib.h>
#include <string.h>
#include "ir.h"

/* A sum of pieces, sorted by start: any number of them (a recurrence's backward adds one
 * per step, the input projection's gradient of every step). Arrays in the arena; a sum
 * that grows by one piece per ADD copies its operands' (quadratic in the pieces, which
 * are a few thousand at most). */
typedef struct Pieces {
  int axis, n;                 /* -1: not a sum of pieces */
  int64_t *start;
  ValId *val;                  /* the piece's values (UNSLICE operands) */
} Pieces;

/* An UNSLICE that is one contiguous range of one axis: its Pieces. */
static int as_piece(Arena *A, const Func *f, const Inst *in, Pieces *p) {
  const Type *r = &f->values.data[in->res].type, *o = &f->values.data[in->args[0]].type;
  p->axis = -1;
  for (int k = 0; k < r->ndim; k++) {
    if (in->attr[2 * k + 1] != 1) return 0;
    if (in->attr[2 * k] == 0 && o->dims[k] == r->dims[k]) continue;
    if (p->axis >= 0) return 0;
    p->axis = k;
  }
  if (p->axis < 0) return 0;
  p->n = 1;
  p->start = arena_alloc(A, sizeof *p->start);
  p->val = arena_alloc(A, sizeof *p->val);
  p->start[0] = in->attr[2 * p->axis];
  p->val[0] = in->args[0];
  return 1;
}

static int64_t count(const Func *f, ValId v, int axis) { return f->values.data[v].type.dims[axis]; }

void ir_pass_unslice(Program *p, Func *f) {
  int nv = f->values.len;
  Pieces *pc = malloc(sizeof(Pieces) * (size_t)(nv + 1));
  CHECK(pc != NULL);
  for (int v = 0; v < nv; v++) pc[v].axis = -1;
  for (int i = 0; i < f->insts.len; i++) {
    Inst *in = &f->insts.data[i];
    if (in->dead) continue;
    if (in->op == IR_UNSLICE) {
      as_piece(p->arena, f, in, &pc[in->res]);
      continue;
    }
    if (in->op != IR_ADD || in->nargs != 2) continue;
    const Pieces *a = &pc[in->args[0]], *b = &pc[in->args[1]];
    const Type *r = &f->values.data[in->res].type;
    if (a->axis < 0 || a->axis != b->axis ||
        !ir_type_eq(r, &f->values.data[in->args[0]].type) || !ir_type_eq(r, &f->values.data[in->args[1]].type))
      continue;
    Pieces s = *a;   /* merge, sorted by start */
    s.start = arena_alloc(p->arena, sizeof *s.start * (size_t)(a->n + b->n));
    s.val = arena_alloc(p->arena, sizeof *s.val * (size_t)(a->n + b->n));
    memcpy(s.start, a->start, sizeof *s.start * (size_t)a->n);
    memcpy(s.val, a->val, sizeof *s.val * (size_t)a->n);
    for (int k = 0; k < b->n; k++) {
      int at = s.n;
      while (at > 0 && s.start[at - 1] > b->start[k]) {
        s.start[at] = s.start[at - 1];
        s.val[at] = s.val[at - 1];
        at--;
      }
      s.start[at] = b->start[k];
      s.val[at] = b->val[k];
      s.n++;
    }
    int64_t end = 0;
    int ok = 1;
    for (int k = 0; k < s.n && ok; k++) {   /* disjoint: each piece starts at or after the last one's end */
      ok = s.start[k] >= end;
      end = s.start[k] + count(f, s.val[k], s.axis);
    }
    if (!ok) continue;
    pc[in->res] = s;
    end = 0;
    int full = 1;
    for (int k = 0; k < s.n && full; k++) {
      full = s.start[k] == end;
      end += count(f, s.val[k], s.axis);
    }
    if (!full || end != r->dims[s.axis]) continue;
    /* the pieces tile the axis: this sum is their concatenation */
    ValId *args = arena_alloc(p->arena, sizeof(ValId) * (size_t)s.n);
    for (int k = 0; k < s.n; k++) args[k] = s.val[k];
    in->op = IR_CONCAT;
    in->nargs = s.n;
    in->args = args;
    for (int k = 0; k < IR_MAX_ATTRS; k++) in->attr[k] = 0;
    in->attr[0] = s.axis;
    pc[in->res].axis = -1;
  }
  free(pc);
}
