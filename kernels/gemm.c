/* gemm.c - the kernel IR of a GEMM (ops.def's MATMUL): one KS_CALL "gemm" of a batch of
 * C[M,N] = op(A) op(B) over the result's batch axes (Kir.space). Each operand is read in
 * place through its layout (kn_layout: a folded slice of a fused projection, a head
 * transpose), its matrix axes as BLAS's transpose and leading dimension (kn_gemm_operand),
 * its batch axes as strides (0 where it is broadcast). How a batch runs is the renderer's:
 * the C target a loop of ctc_matmul calls or one call with the batch in the rows
 * (codegen_c/linalg_c.c), the CUDA target cuBLAS's strided batches (codegen_cuda/ops_cuda.c).
 * When both operands hold bf16 (f16) values (KirCall.low: ir_low_operands), a renderer may
 * multiply them in that precision with float sums: the C target's AVX-512 BF16 GEMM, the CUDA
 * one's tensor cores. */
#include "kir.h"

Kir *kir_build_gemm(Arena *a, const Func *f, const KnSchedule *s, const Kernel *kn, const Inst *in) {
  const Type *r = &f->values.data[in->res].type;
  if (in->op != IR_MATMUL || r->ndim < 2) return NULL;
  Type batch = *r;
  batch.ndim -= 2;   /* the batch axes */
  Kir *k = kir_call_new(a, f, kn, in, &batch, "gemm");
  KirCall *c = k->body.data[0]->call;
  int nb = k->space.ndim;
  int64_t M = r->dims[r->ndim - 2], N = r->dims[r->ndim - 1];
  for (int j = 0; j < 2; j++) {
    ValId v = in->args[j];
    const Type *t = &f->values.data[v].type;
    KnLayout l;
    int bt;
    int64_t ld;
    int folded = s && kn_root(f, s, v) != kn_root(f, NULL, v);
    if (t->ndim < 2) return NULL;
    if (kn_layout(f, s, v, &l) < 0) {   /* a view no strides express: read as stored (not folded) */
      if (folded) return NULL;
      l.root = v, l.off = 0;
      int64_t w = 1;
      for (int x = t->ndim - 1; x >= 0; x--) l.st[x] = w, w *= t->dims[x];
    }
    if (kn_gemm_operand(t, &l, (int)in->attr[j], &bt, &ld) < 0) return NULL;
    c->args[j] = l.root;
    c->off[j] = l.off;
    c->vals[j] = v;
    c->ints[j] = bt;
    c->ints[5 + j] = ld;
    c->folded |= folded;
    for (int x = 0; x < nb; x++) {   /* its batch axes are the result's last ones */
      int ax = x - (nb - (t->ndim - 2));
      c->bst[j + 1][x] = ax >= 0 && t->dims[ax] != 1 ? l.st[ax] : 0;
    }
  }
  int64_t cs = M * N;
  for (int x = nb - 1; x >= 0; x--) c->bst[0][x] = cs, cs *= r->dims[x];
  const Type *ta = &f->values.data[in->args[0]].type;
  c->nargs = 2;
  c->ints[2] = M;
  c->ints[3] = N;
  c->ints[4] = in->attr[0] ? ta->dims[ta->ndim - 2] : ta->dims[ta->ndim - 1];   /* K */
  c->nint = 7;
  c->low = ir_low_operands(f, in);
  return k;
}
