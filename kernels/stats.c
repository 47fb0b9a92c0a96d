/* stats.c - what `ctc --stats` reports about an entry: FLOPs, and where the
 * arena's bytes go.
 *
 * FLOPs count a multiply-add as 2 (GEMMs and convolutions: 2*M*N*K), every
 * other op 1 per element it reads or writes (the larger), views and constants
 * 0: the figure a profiler divides by time (kn_flops).
 *
 * The activation region is broken down at its busiest kernel (the step where
 * the stored values live at the same time add up to the most bytes):
 *   gradients          values reverse mode made ("grad", "<param>_grad")
 *   saved activations  other values made before the first gradient and still
 *                      live at or after it (what backward reads)
 *   other              the rest (forward temporaries, optimizer arithmetic)
 *   scratch            convolution column buffers
 * The region can be larger than that sum where the first-fit packer leaves
 * holes (reported as fragmentation).
 *
 * The model's tensors are counted by kind (kn_param_kind): parameters as PyTorch's
 * sum(p.numel() for p in model.parameters()) counts them (a tied one once),
 * persistent buffers, training state, and tensors no file holds. */
#include <stdlib.h>
#include <string.h>
#include "kernels.h"

int64_t kn_flops(const Func *f, const Inst *in) {
  const Type *r = &f->values.data[in->res].type;
  int64_t out = ir_numel(r);
  switch (in->op) {
  case IR_CONST: case IR_RESHAPE: case IR_DETACH: return 0;
  case IR_MATMUL: {
    const Type *a = &f->values.data[in->args[0]].type;
    int64_t K = in->attr[0] ? a->dims[a->ndim - 2] : a->dims[a->ndim - 1];
    return 2 * out * K;
  }
  case IR_CONV2D: case IR_CONV2D_BWD_INPUT: case IR_CONV2D_BWD_WEIGHT: {
    /* every (image, output channel, output pixel, input channel of its group, tap) */
    const Type *x = in->op == IR_CONV2D_BWD_INPUT ? r : &f->values.data[in->args[0]].type;
    const Type *w = in->op == IR_CONV2D_BWD_WEIGHT ? r : &f->values.data[in->args[1]].type;
    const Type *y = in->op == IR_CONV2D ? r : &f->values.data[in->args[in->op == IR_CONV2D_BWD_INPUT ? 0 : 1]].type;
    (void)x;
    return 2 * ir_numel(y) * w->dims[1] * w->dims[2] * w->dims[3];
  }
  case IR_ATTENTION: case IR_ATTENTION_BWD: {
    /* as the GEMMs they replace: q k^T and p v (forward); backward recomputes q k^T twice (the
     * row statistics, then p) and forms dv, dp, dq, dk; a causal mask halves each */
    const Type *q = &f->values.data[in->args[0]].type;
    int64_t T = q->dims[q->ndim - 2], n = 2 * ir_numel(q) * T * (in->op == IR_ATTENTION ? 2 : 6);
    return in->attr[0] ? n / 2 : n;
  }
  default: {
    int64_t most = out;
    for (int k = 0; k < in->nargs; k++) {
      int64_t n = ir_numel(&f->values.data[in->args[k]].type);
      if (n > most) most = n;
    }
    return most;
  }
  }
}

int kn_param_kind(const Param *pr) {
  if (pr->not_persistent || (pr->is_state && !strncmp(pr->name, "ctc.", 4))) return KN_LOCAL;
  return pr->is_state ? KN_TRAINING : pr->is_buffer ? KN_BUFFER : KN_PARAMETER;
}

void kn_count_params(const Program *p, KnCounts *c) {
  memset(c, 0, sizeof *c);
  for (int i = 0; i < p->params.len; i++) {
    const Param *pr = &p->params.data[i];
    int k = kn_param_kind(pr);
    int64_t n = ir_numel(&pr->type);
    c->values[k] += n;
    c->bytes[k] += n * (int64_t)ir_dtype_size(pr->type.dtype);
    c->tensors[k]++;
    if (!p->state_dict.len && k <= KN_BUFFER) c->keys++, c->key_values += n;   /* no nn.Module: own names */
  }
  for (int i = 0; i < p->state_dict.len; i++)
    c->keys++, c->key_values += ir_numel(&p->params.data[p->state_dict.data[i].param].type);
}

void kn_print_counts(FILE *out, const KnCounts *c) {
  static const char *const what[KN_NKINDS] = {"parameters", "buffers", "training state", "not saved"};
  for (int k = 0; k < KN_NKINDS; k++)
    if (k < KN_TRAINING || c->tensors[k])
      fprintf(out, "%s%s %lld values in %d tensors", k ? ", " : "", what[k], (long long)c->values[k], c->tensors[k]);
}

static int is_gradient(const char *name) {
  size_t n = strlen(name);
  return !strcmp(name, "grad") || (n > 5 && !strcmp(name + n - 5, "_grad"));
}

void kn_stats(FILE *out, const Program *p, const MemPlan *mp, const Func *f, const KnSchedule *s, int index) {
  const FuncPlan *fp = &mp->funcs[index];
  int ni = f->insts.len, nk = s->kernels.len, first_grad = ni;
  int64_t gemm = 0, other = 0;
  for (int i = 0; i < ni; i++) {
    const Inst *in = &f->insts.data[i];
    int64_t fl = kn_flops(f, in);
    if (in->op == IR_MATMUL || in->op == IR_CONV2D || in->op == IR_CONV2D_BWD_INPUT || in->op == IR_CONV2D_BWD_WEIGHT)
      gemm += fl;
    else if (!ir_is_view(f, in->res) && !s->fold[in->res])
      other += fl;
    if (first_grad == ni && is_gradient(f->values.data[in->res].name)) first_grad = i;
  }
  /* lifetimes (in kernels) of the stored roots: definition to last use */
  int nv = f->values.len;
  int *born = calloc((size_t)nv + 1, sizeof *born), *dies = calloc((size_t)nv + 1, sizeof *dies);
  int64_t (*live)[4] = calloc((size_t)nk + 1, sizeof *live);
  CHECK(born && dies && live);
  for (int v = 0; v < nv; v++) born[v] = -1;
  for (int i = 0; i < ni; i++) {
    const Inst *in = &f->insts.data[i];
    ValId r = in->res;
    if (fp->loc[r].base == LOC_ARENA && fp->loc[r].offset >= mp->params_bytes && fp->shares[r] < 0 &&
        !ir_is_view(f, r) && !s->fold[r] && (!fp->hints.update_into || fp->hints.update_into[r] < 0))
      born[r] = dies[r] = s->kernel_of[i];
    for (int k = 0; k < in->nargs; k++) {
      ValId a = kn_root(f, s, in->args[k]);
      if (born[a] >= 0 && dies[a] < s->kernel_of[i]) dies[a] = s->kernel_of[i];
    }
  }
  for (int k = 0; k < f->outputs.len + f->updates.len; k++) {
    ValId a = kn_root(f, s, k < f->outputs.len ? f->outputs.data[k] : f->updates.data[k - f->outputs.len]);
    if (born[a] >= 0) dies[a] = nk - 1;
  }
  int grad_kernel = first_grad < ni ? s->kernel_of[first_grad] : nk;
  for (int v = 0; v < nv; v++) {
    if (born[v] < 0) continue;
    const Type *t = &f->values.data[v].type;
    int64_t b = ir_numel(t) * (int64_t)ir_dtype_size(t->dtype);
    int cat = is_gradient(f->values.data[v].name) ? 0 : born[v] < grad_kernel && dies[v] >= grad_kernel ? 1 : 2;
    for (int k = born[v]; k <= dies[v]; k++) live[k][cat] += b;
  }
  for (int i = 0; i < ni; i++)
    if (fp->scratch[i] >= 0) live[s->kernel_of[i]][3] += ir_scratch_bytes(f, &f->insts.data[i]);
  int busiest = 0;
  int64_t most = -1;
  for (int k = 0; k < nk; k++) {
    int64_t sum = live[k][0] + live[k][1] + live[k][2] + live[k][3];
    if (sum > most) most = sum, busiest = k;
  }
  if (most < 0) most = 0;
  fprintf(out, "ctc: entry %s: %.3f GFLOP (GEMM and convolution %.3f, other ops %.3f)\n", f->name,
          (double)(gemm + other) * 1e-9, (double)gemm * 1e-9, (double)other * 1e-9);
  const int64_t peak = ir_plan_values_peak(mp, index);   /* (not the packed weights) */
  fprintf(out, "ctc: entry %s: activations %lld bytes; at its busiest kernel (%d): gradients %lld, saved "
               "activations %lld, other %lld, scratch %lld, fragmentation %lld\n",
          f->name, (long long)peak, busiest, (long long)live[busiest][0], (long long)live[busiest][1],
          (long long)live[busiest][2], (long long)live[busiest][3], (long long)(peak - most));
  free(born);
  free(dies);
  free(live);
  (void)p;
}
