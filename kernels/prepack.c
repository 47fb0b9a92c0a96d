/* prepack.c - the weights a time loop's GEMMs read, packed once before the loop.
 *
 * A GEMM packs its op(B) into panels before its tiles read them (ctc's GEMM kernels:
 * codegen_c/gemm_simd_c.c). In a time loop (reroll.c's KnLoops: an RNN's steps) the
 * recurrent weight is op(B) of a GEMM in every step, with few rows (the batch), so each
 * step packs the whole weight again for a few rows of tiles. Here such GEMMs are found: a
 * GEMM of the loop's step whose B is a parameter (f32, one matrix, read in place), the same
 * in every step (a parameter is not written before the entry's updates at its end). The
 * renderer packs each once before the loop into a region of the arena above the function's
 * activations (FuncPlan.pack_at, reserved by ir_plan_reserve before the code is written),
 * and the steps' GEMMs read the packed panels: the same sums in the same order. Each loop's
 * packs start at the region's start (the loops run one after another). */
#include <string.h>
#include "kir.h"

/* The GEMM instruction of kernel kn (a KN_GEMM's, or a kernel that is one MATMUL), or NULL. */
static const Inst *gemm_inst(const Func *f, const Kernel *kn) {
  const Inst *in = &f->insts.data[kn->first];
  if (in->op != IR_MATMUL || (kn->kind != KN_GEMM && kn->first != kn->last)) return NULL;
  return in;
}

KnPacks *kn_prepacks(Arena *a, const Func *f, const KnSchedule *s, const KnLoops *L) {
  KnPacks *P = arena_alloc(a, sizeof *P);
  for (int li = 0; L && li < L->loops.len; li++) {
    const KnLoop *lp = &L->loops.data[li];
    int64_t at = 0;   /* this loop's packs from the region's start */
    for (int j = 0; j < lp->len; j++) {
      const Kernel *kn = &s->kernels.data[lp->first + j];
      const Inst *in = gemm_inst(f, kn);
      if (!in || lp->count < 2) continue;
      ValId b = in->args[1];
      const Value *bv = &f->values.data[b];
      if (bv->kind != V_PARAM || bv->type.ndim != 2 || bv->type.dtype != DT_F32 ||
          f->values.data[in->res].type.dtype != DT_F32 || ir_low_operands(f, in) || kn_root(f, s, b) != b)
        continue;
      int same = 1;   /* every step's GEMM reads this weight */
      for (int t = 1; t < lp->count && same; t++) {
        const Inst *it = gemm_inst(f, &s->kernels.data[lp->first + t * lp->len + j]);
        same = it && it->args[1] == b;
      }
      Kir *k = same ? kir_build_gemm(a, f, s, kn, in) : NULL;
      if (!k) continue;
      const KirCall *g = k->body.data[0]->call;
      KnPack pk = {li, kn->first, b, (int)g->ints[0], (int)g->ints[1], g->ints[3], g->ints[4], g->ints[6], 0, 0};
      if (g->args[1] != b || g->off[1] || pk.K < 1) continue;
      int dup = 0;   /* two GEMMs of the step reading it the same way share one */
      for (int q = 0; q < P->packs.len && !dup; q++) {
        const KnPack *o = &P->packs.data[q];
        dup = o->loop == li && o->b == b && o->ta == pk.ta && o->tb == pk.tb;
      }
      if (dup) continue;
      pk.ldp = (pk.N + 31) / 32 * 32;
      pk.off = at;
      at += (pk.K * pk.ldp * 4 + 63) / 64 * 64;
      vec_push(a, &P->packs, pk);
    }
    if (at > P->bytes) P->bytes = at;
  }
  return P;
}
