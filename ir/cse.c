/* cse.c - common subexpression elimination over nearby instructions.
 *
 * Two instructions with the same op, operands, attributes and result type
 * compute the same value (every primitive is pure: RAND_UNIFORM's stream is a
 * function of its offset operand). Reverse mode recomputes forward values
 * (rematerialisation) once per use: softmax's backward rebuilt exp(x - max)
 * twice per element, in one kernel. The later copy's uses read the earlier one.
 *
 * Only copies in the same phase (forward, backward, optimizer), at most
 * CSE_WINDOW instructions apart and with no GEMM, convolution, other special
 * op or reduction over a leading axis between them merge, that is copies the kernel layer would fuse into one
 * loop nest anyway: a recomputation must not become a read of a value computed
 * in another kernel, which would store a value that is now recomputed in
 * registers (and a backward one must not read the forward value, kept alive
 * through the whole backward: rematerialisation undone). A one-element value is the
 * exception: keeping it alive costs one word, so its copies merge at any distance and
 * across GEMMs (an optimizer's bias corrections, computed once per parameter, become
 * one computation per step). An entry's outputs, updates and
 * synchronised gradients stay their own values (an all-reduce must not run twice
 * on one buffer). DCE then removes the copies.
 *
 * DETACH, which only matters to the AD sweeps (done before any pass), is a copy:
 * its uses read its operand, and it no longer splits the kernel around it
 * (softmax's detached row maximum). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "ir.h"

#define CSE_WINDOW 64

static uint64_t mix(uint64_t h, uint64_t x) {
  h ^= x + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0x100000001b3ull;
}

static uint64_t inst_hash(const Func *f, const Inst *in) {
  const Type *t = &f->values.data[in->res].type;
  uint64_t h = mix((uint64_t)in->op, (uint64_t)in->nargs);
  for (int k = 0; k < in->nargs; k++) h = mix(h, (uint64_t)(uint32_t)in->args[k]);
  for (int k = 0; k < IR_MAX_ATTRS; k++) h = mix(h, (uint64_t)in->attr[k]);
  uint64_t fb;
  memcpy(&fb, &in->fattr, sizeof fb);
  h = mix(h, fb);
  h = mix(h, (uint64_t)t->dtype);
  for (int k = 0; k < t->ndim; k++) h = mix(h, (uint64_t)t->dims[k]);
  /* splitmix64's finaliser: the table takes the low bits, which mix() alone
   * leaves clustered for operands numbered in sequence */
  h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
  h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
  return h ^ (h >> 31);
}

int ir_inst_same(const Func *f, const Inst *a, const Inst *b) {
  if (a->op != b->op || a->nargs != b->nargs || a->phase != b->phase) return 0;
  if (memcmp(a->args, b->args, sizeof *a->args * (size_t)a->nargs)) return 0;
  if (memcmp(a->attr, b->attr, sizeof a->attr) || memcmp(&a->fattr, &b->fattr, sizeof a->fattr)) return 0;
  return ir_type_eq(&f->values.data[a->res].type, &f->values.data[b->res].type);
}

/* A reduction over an axis before the last kept one (BatchNorm's sum over the batch of its per-image
 * channel sums): no row kernel holds it, so it ends the kernel before it, and a copy after it would
 * read the earlier one from memory. BatchNorm's backward recomputes x - mean for its input gradient
 * after the sums; merged with the sums' copy it was stored by their kernel and loaded again. */
static int across_rows(const Func *f, const Inst *in) {
  if (ir_ops[in->op].kind != K_REDUCE) return 0;
  const Type *t = &f->values.data[in->args[0]].type;
  int kept = 0;
  for (int k = t->ndim - 1; k >= 0; k--) {
    if (t->dims[k] == 1) continue;
    if (!((in->attr[0] >> k) & 1)) kept = 1;
    else if (kept) return 1;
  }
  return 0;
}

void ir_pass_cse(Program *p, Func *f) {
  (void)p;
  int ni = f->insts.len, nv = f->values.len;
  if (ni == 0) return;
  size_t cap = 16;
  while (cap < (size_t)ni * 2) cap *= 2;
  int *slot = malloc(sizeof(int) * cap);   /* instruction index + 1; 0 = empty */
  ValId *to = malloc(sizeof(ValId) * ((size_t)nv + 1));
  unsigned char *root = calloc((size_t)nv + 1, 1);
  CHECK(slot && to && root);
  for (int i = 0; i < f->outputs.len; i++) root[f->outputs.data[i]] = 1;
  for (int i = 0; i < f->updates.len; i++) root[f->updates.data[i]] = 1;
  for (int i = 0; i < f->sync.len; i++) root[f->sync.data[i]] = 1;
  memset(slot, 0, sizeof(int) * cap);
  for (int v = 0; v < nv; v++) to[v] = v;
  int any = 0, barrier = -1;   /* the last GEMM/convolution/special op */
  for (int i = 0; i < ni; i++) {
    Inst *in = &f->insts.data[i];
    if (in->dead) continue;
    if (ir_ops[in->op].kind == K_LINALG || ir_ops[in->op].kind == K_SPECIAL || across_rows(f, in)) barrier = i;
    for (int k = 0; k < in->nargs; k++) in->args[k] = to[in->args[k]];
    if (root[in->res]) continue;
    if (in->op == IR_DETACH) {   /* identity once AD has run (passes come after it): a copy */
      to[in->res] = in->args[0];
      in->dead = 1;
      any = 1;
      continue;
    }
    size_t h = (size_t)inst_hash(f, in) & (cap - 1);
    for (;; h = (h + 1) & (cap - 1)) {
      if (!slot[h]) {
        slot[h] = i + 1;
        break;
      }
      Inst *prev = &f->insts.data[slot[h] - 1];
      if (!ir_inst_same(f, prev, in)) continue;
      int near = i - (slot[h] - 1) <= CSE_WINDOW && slot[h] - 1 > barrier;
      if (near || ir_numel(&f->values.data[in->res].type) == 1) {
        to[in->res] = prev->res;
        in->dead = 1;
        any = 1;
      } else
        slot[h] = i + 1;   /* too far back: later copies merge with this one */
      break;
    }
  }
  if (any) ir_compact(f);
  free(root);
  free(slot);
  free(to);
}

void ir_value_numbers(const Func *f, ValId *canon) {
  int ni = f->insts.len, nv = f->values.len;
  for (int v = 0; v < nv; v++) canon[v] = v;
  size_t cap = 16;
  while (cap < (size_t)ni * 2) cap *= 2;
  int *slot = calloc(cap, sizeof(int));   /* instruction index + 1; 0 = empty */
  ValId *args = malloc(sizeof(ValId) * 64);
  CHECK(slot && args);
  for (int i = 0; i < ni; i++) {
    const Inst *in = &f->insts.data[i];
    if (in->dead || in->nargs > 64) continue;
    Inst key = *in;   /* the instruction with its operands' numbers */
    for (int k = 0; k < in->nargs; k++) args[k] = canon[in->args[k]];
    key.args = args;
    size_t h = (size_t)inst_hash(f, &key) & (cap - 1);
    for (;; h = (h + 1) & (cap - 1)) {
      if (!slot[h]) {
        slot[h] = i + 1;
        break;
      }
      const Inst *prev = &f->insts.data[slot[h] - 1];
      Inst pk = *prev;
      ValId pargs[64];
      for (int k = 0; k < prev->nargs && k < 64; k++) pargs[k] = canon[prev->args[k]];
      pk.args = pargs;
      if (prev->nargs <= 64 && ir_inst_same(f, &pk, &key)) {
        canon[in->res] = prev->res;
        break;
      }
    }
  }
  free(slot);
  free(args);
}
