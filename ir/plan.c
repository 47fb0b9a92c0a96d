/* plan.c - static memory planning.
 *
 * Every tensor gets a fixed place before any code is generated:
 *
 *   arena = [ parameters, state_dict order | activations of the running entry ]
 *
 * Parameters are laid out one after another, each 64-byte aligned. Each entry
 * point then packs its activations into the region after them by liveness:
 * a value lives from its defining instruction to its last use (outputs to the
 * end of the function), and is placed first-fit at the lowest offset that no
 * value live at the same time occupies. Intervals are closed, so an
 * instruction's result never overlaps any of its operands, nor its scratch
 * buffer: the generated loops may treat them as distinct objects.
 *
 * With hints from the kernel layer (ir_plan_memory_hints, PlanHints), time is
 * counted in kernels instead of instructions: a value lives from its kernel to
 * the kernel of its last use, so a fused loop's results never share bytes with
 * any array it reads, and values internal to a kernel (nostore) get no storage.
 *
 * In place: a kernel result may take over the bytes of an operand that dies
 * in the same kernel when the schedule allows it (PlanHints.inplace: same
 * shape, same element size, read only element by element), FuncPlan.shares.
 *
 * Time loops: the values at the same place of each step of a run of repeated
 * steps (PlanHints.family, from kernels/reroll.c) are placed as one block at one
 * stride, so that a C loop over the steps addresses step t's as base + t*stride
 * (see "families" below).
 *
 * Values that need no storage of their own:
 *   - scalar CONST results (LOC_NONE: the emitter writes them as literals);
 *   - views (RESHAPE or DETACH of a value in memory, and the SLICE/PERMUTE
 *     results the schedule folded into strided reads, PlanHints.strided): same
 *     Loc as the operand; the operand's lifetime is extended over the view's uses;
 *   - entry inputs (base = input index, in the caller's memory) and
 *     parameters (their offset in the parameter region).
 * Entries run one at a time, so they all share the activation region.
 *
 * Parameter updates (Func.updates, training steps) are written back after the
 * last instruction, so update values live to the end like outputs. An update
 * value that is an instruction result is an activation, which never shares
 * bytes with a parameter, unless the schedule lets it be computed directly in
 * its parameter's bytes (PlanHints.update_into: its Loc is the parameter's, no
 * write-back); one that is a parameter (or a view of one) is
 * ordered by the emitter so that it is read before it is overwritten.
 *
 * Scratch (ir_scratch_bytes) is the column matrix [C*KH*KW, OH*OW] of one image
 * for CONV2D, CONV2D_BWD_INPUT and CONV2D_BWD_WEIGHT; it lives only during its
 * instruction.
 *
 * Sizes: every value's type passed ir_type_problem when it was built (at most
 * CTC_MAX_ARENA_BYTES bytes), and planning stops at the first parameter or
 * instruction that takes the arena past CTC_MAX_ARENA_BYTES (MemPlan.error), so
 * offsets stay below 2**41 and no sum here can wrap. */
#include <stdlib.h>
#include <string.h>
#include "ir.h"

#define PLAN_ALIGN 64

static int64_t align_up(int64_t n) { return (n + PLAN_ALIGN - 1) / PLAN_ALIGN * PLAN_ALIGN; }

/* Bytes of a value; INT64_MAX if that does not fit (never for a checked type). */
static int64_t value_bytes(const Type *t) {
  int64_t b;
  return ir_type_bytes(t, &b) < 0 ? INT64_MAX : b;
}

/* Whether v is the result of a (live, compacted) instruction of f. */
static int is_inst_result(const Func *f, ValId v) {
  const Value *val = &f->values.data[v];
  return val->kind == V_INST && val->def >= 0 && val->def < f->insts.len &&
         f->insts.data[val->def].res == v;
}

static int is_scalar_const(const Func *f, ValId v) {
  return is_inst_result(f, v) && f->insts.data[f->values.data[v].def].op == IR_CONST;
}

/* Whether a convolution (or one of its gradients) reads its input image as the
 * column matrix directly: a 1x1 kernel, stride 1, no padding (and, defensively,
 * an output the size of the input). */
static int conv_is_pointwise(const Inst *in, int64_t kh, int64_t kw, int64_t h, int64_t w, int64_t oh, int64_t ow) {
  return kh == 1 && kw == 1 && in->attr[0] == 1 && in->attr[1] == 1 && in->attr[2] == 0 && in->attr[3] == 0 &&
         h == oh && w == ow;
}

static void conv_dims(const Func *f, const Inst *in, int64_t *N, int64_t *C, int64_t *O, int64_t *KH, int64_t *KW,
                      int64_t *OH, int64_t *OW);

int64_t ir_scratch_bytes(const Func *f, const Inst *in) {
  /* CONV2D x[N,C,H,W] w[O,C,KH,KW] -> y[N,O,OH,OW]: im2col of a tile of images, the
   * GEMM's result for the tile, then copied to y;
   * CONV2D_BWD_INPUT g[N,O,OH,OW] w -> dx[N,C,H,W]: a copy of the tile's g, w^T g, then col2im;
   * CONV2D_BWD_WEIGHT x g -> dw[O,C,KH,KW]: im2col of the tile and a copy of its g */
  if (in->op != IR_CONV2D && in->op != IR_CONV2D_BWD_INPUT && in->op != IR_CONV2D_BWD_WEIGHT) return 0;
  int64_t N, C, O, KH, KW, OH, OW;
  conv_dims(f, in, &N, &C, &O, &KH, &KW, &OH, &OW);
  const Type *x = &f->values.data[in->op == IR_CONV2D_BWD_INPUT ? in->res : in->args[0]].type;
  if (conv_is_pointwise(in, KH, KW, x->dims[2], x->dims[3], OH, OW) || ir_conv_direct(f, in) ||
      ir_conv_depthwise(f, in))
    return 0;
  /* The column matrices of ir_conv_slots images at once: [C*KH*KW, OH*OW] each,
   * and their outputs' (or gradients') [O, OH*OW], laid side by side. */
  int64_t per = ir_conv_image_bytes(f, in), b, S = ir_conv_slots(f, in);
  if (per == INT64_MAX) return INT64_MAX;
  if (S == 1 && f->conv_direct) {   /* the C target's tiles of one image use the outputs' own rows */
    int64_t k[5] = {C, KH, KW, OH * OW, (int64_t)ir_dtype_size(f->values.data[in->res].type.dtype)};
    b = ir_prod(k, 5, &b) < 0 ? INT64_MAX : b;
  } else {
    int64_t d[2] = {per, S};
    b = ir_prod(d, 2, &b) < 0 ? INT64_MAX : b;
  }
  if (ir_conv_wino(f, in)) {   /* either branch of the C (#ifdef CTC_CONV_WINO_f32) may run */
    int64_t K = in->op != IR_CONV2D_BWD_INPUT ? C : O, M = in->op != IR_CONV2D_BWD_INPUT ? O : C;
    const int64_t B = ir_conv_wino_block(f, in), room = in->op == IR_CONV2D_BWD_WEIGHT || B < 64 ? B : B + 32;
    int64_t w = 4 * 16 * (M * K + (K + M) * room + 2 * 16);   /* (+ CTC_WINO_PAD a plane) */
    if (b != INT64_MAX && w > b) b = w;
  }
  int64_t pb = ir_conv_phase_bytes(f, in);
  if (b != INT64_MAX && pb > b) b = pb;
  int64_t bb = ir_conv_bat_bytes(f, in);   /* (either branch may run) */
  if (b != INT64_MAX && bb > b) b = bb;
  if (b == INT64_MAX || !ir_conv_wgrad_t(f, in)) return b;
  int64_t e[5] = {C, KH, KW, O, 4}, more;   /* and dW^T [C*KH*KW, O] (ir_conv_wgrad_t) */
  return ir_prod(e, 5, &more) < 0 || more > INT64_MAX - b ? INT64_MAX : b + more;
}

/* The geometry numbers of a convolution instruction: N images, C channels in, O out,
 * KH x KW kernel, OH x OW outputs. */
static void conv_dims(const Func *f, const Inst *in, int64_t *N, int64_t *C, int64_t *O, int64_t *KH, int64_t *KW,
                      int64_t *OH, int64_t *OW) {
  const Type *a0 = &f->values.data[in->args[0]].type, *a1 = &f->values.data[in->args[1]].type;
  const Type *r = &f->values.data[in->res].type;
  const Type *x = in->op == IR_CONV2D_BWD_INPUT ? r : a0;
  const Type *w = in->op == IR_CONV2D_BWD_WEIGHT ? r : a1;
  const Type *y = in->op == IR_CONV2D ? r : in->op == IR_CONV2D_BWD_INPUT ? a0 : a1;
  *N = x->dims[0], *C = x->dims[1], *O = w->dims[0], *KH = w->dims[2], *KW = w->dims[3];
  *OH = y->dims[2], *OW = y->dims[3];
}

int64_t ir_conv_image_bytes(const Func *f, const Inst *in) {
  int64_t N, C, O, KH, KW, OH, OW, b;
  conv_dims(f, in, &N, &C, &O, &KH, &KW, &OH, &OW);
  int64_t k[3] = {C, KH, KW}, rows;   /* C*KH*KW + O (the outputs' or gradients' copy) */
  if (ir_prod(k, 3, &rows) < 0 || rows > INT64_MAX / 2 || O > INT64_MAX / 2) return INT64_MAX;
  rows += O;
  int64_t d[4] = {rows, OH, OW, (int64_t)ir_dtype_size(f->values.data[in->res].type.dtype)};
  return ir_prod(d, 4, &b) < 0 ? INT64_MAX : b;
}

int ir_conv_direct(const Func *f, const Inst *in) {
  if (!f->conv_direct || (in->op != IR_CONV2D && in->op != IR_CONV2D_BWD_WEIGHT)) return 0;
  int64_t N, C, O, KH, KW, OH, OW;
  conv_dims(f, in, &N, &C, &O, &KH, &KW, &OH, &OW);
  int64_t G = in->attr[6] > 0 ? in->attr[6] : 1;
  if (in->attr[0] != 1 || in->attr[1] != 1 || in->attr[4] != 1 || in->attr[5] != 1 || G != 1) return 0;
  if (C > IR_CONV_DIRECT_MAX_W || KH * KW > IR_CONV_DIRECT_MAX_W || O * C * KH * KW > IR_CONV_DIRECT_MAX_W) return 0;
  /* a forward GEMM of at least 32 rows beats the loops (a 3-channel stem: 10-13 -> 50-58 GFLOP/s);
   * so does the f32 weight gradient's dW^T = columns g^T (ir_conv_wgrad_t) for whole panels of
   * 32 output channels (a 3-channel stem: 17.5 -> 91 GFLOP/s, AVX-512); dW = g columns^T would be
   * a sliver of C*KH*KW < 32 columns that OpenBLAS computes, with other sums at other thread counts */
  if (in->op == IR_CONV2D && O >= 32) return 0;
  if (in->op == IR_CONV2D_BWD_WEIGHT && O % 32 == 0 && f->values.data[in->res].type.dtype == DT_F32) return 0;
  /* nor does the weight gradient of bf16 values, which an AVX-512 BF16 CPU computes as an
   * implicit GEMM (codegen_c/linalg_c.c; a 3-channel stem: 17 -> ~100 GFLOP/s) */
  if (in->op == IR_CONV2D_BWD_WEIGHT && ir_low_operands(f, in) == 1) return 0;
  /* the direct loops keep an O x OW (forward) or KW x OW (weight gradient) block on the stack */
  return in->op == IR_CONV2D ? OW >= 16 && O * OW <= 1024 : OW >= 8 && KW * OW <= 4096;
}

int ir_conv_wgrad_t(const Func *f, const Inst *in) {
  if (in->op != IR_CONV2D_BWD_WEIGHT || !f->conv_direct || f->values.data[in->res].type.dtype != DT_F32 ||
      ir_conv_direct(f, in) || ir_conv_depthwise(f, in))
    return 0;
  int64_t N, C, O, KH, KW, OH, OW;
  conv_dims(f, in, &N, &C, &O, &KH, &KW, &OH, &OW);
  const Type *x = &f->values.data[in->args[0]].type;
  /* (at least 32 output channels, a whole column panel of ctc's AVX-512 GEMM, and no more than
   * C*KH*KW, where ctc_matmul splits dW^T by rows, or a multiple of 32, where it splits the
   * columns in blocks of multiples of 32; otherwise blocks of dW^T could be slivers that go to
   * OpenBLAS when it is linked in, at some thread counts only, and the bits would depend on the
   * thread count) */
  return O >= 32 && (O <= C * KH * KW || O % 32 == 0) && (in->attr[6] > 0 ? in->attr[6] : 1) == 1 &&
         !conv_is_pointwise(in, KH, KW, x->dims[2], x->dims[3], OH, OW);
}

int ir_conv_wino(const Func *f, const Inst *in) {
  if (!f->conv_wino || (in->op != IR_CONV2D && in->op != IR_CONV2D_BWD_INPUT && in->op != IR_CONV2D_BWD_WEIGHT) ||
      f->values.data[in->res].type.dtype != DT_F32 || ir_low_operands(f, in) || ir_conv_direct(f, in) ||
      ir_conv_depthwise(f, in))
    return 0;
  int64_t N, C, O, KH, KW, OH, OW;
  conv_dims(f, in, &N, &C, &O, &KH, &KW, &OH, &OW);
  const Type *x = &f->values.data[in->op == IR_CONV2D_BWD_INPUT ? in->res : in->args[0]].type;
  const int64_t K = in->op != IR_CONV2D_BWD_INPUT ? C : O, M = in->op != IR_CONV2D_BWD_INPUT ? O : C;
  return (in->attr[6] > 0 ? in->attr[6] : 1) == 1 && KH == 3 && KW == 3 && in->attr[0] == 1 && in->attr[1] == 1 &&
         in->attr[2] == 1 && in->attr[3] == 1 && in->attr[4] == 1 && in->attr[5] == 1 && OH == x->dims[2] &&
         OW == x->dims[3] && OH % 2 == 0 && OW % 2 == 0 && OH > 0 && OW > 0 && K >= 16 && K <= IR_CONV_WINO_MAX_K &&
         M >= 16 && M * K <= IR_CONV_WINO_MAX_W && N * (OH / 2) * (OW / 2) >= IR_CONV_WINO_MIN_TILES;
}

/* Tiles a block at most (the scratch's room): its transformed inputs and products, 64 (K + M)
 * bytes a tile, near 1 MiB, in whole panels of 32 (ctc_gemm_tile_f32's columns); the same at every
 * batch. The program takes fewer where half of the core's L2 cache holds fewer (ctc_wino_fit). */
int64_t ir_conv_wino_block(const Func *f, const Inst *in) {
  int64_t N, C, O, KH, KW, OH, OW;
  conv_dims(f, in, &N, &C, &O, &KH, &KW, &OH, &OW);
  int64_t b = 16384 / (C + O) / 32 * 32;
  return b < 32 ? 32 : b;
}

int64_t ir_conv_phase_bytes(const Func *f, const Inst *in) {
  if (in->op != IR_CONV2D_BWD_INPUT || !f->conv_phases || f->values.data[in->res].type.dtype != DT_F32 ||
      ir_low_operands(f, in))
    return 0;
  int64_t N, C, O, KH, KW, OH, OW;
  conv_dims(f, in, &N, &C, &O, &KH, &KW, &OH, &OW);
  const Type *x = &f->values.data[in->res].type;
  if ((in->attr[6] > 0 ? in->attr[6] : 1) != 1 || in->attr[0] != 2 || in->attr[1] != 2 || in->attr[4] != 1 ||
      in->attr[5] != 1 || x->dims[2] != 2 * OH || x->dims[3] != 2 * OW || OH * OW % 16 || KH * KW > 64 ||
      C * O * KH * KW > ((int64_t)1 << 22))   /* (at most 16 MiB of weights) */
    return 0;
  int64_t S = (1024 + OH * OW - 1) / (OH * OW);   /* images for 1024 pixels, at least 8, at most the batch */
  if (S < 8) S = 8;
  if (S > N) S = N;
  return 4 * (C * O * KH * KW + 4 * S * C * OH * OW);
}

int64_t ir_conv_bat_bytes(const Func *f, const Inst *in) {
  if (f->batch_ref && f->batch_ref != f && in >= f->insts.data && in < f->insts.data + f->insts.len) {
    /* the trace at the largest batch decides, for every batch */
    const Func *r = f->batch_ref;
    in = &r->insts.data[in - f->insts.data], f = r;
  }
  if ((in->op != IR_CONV2D && in->op != IR_CONV2D_BWD_INPUT && in->op != IR_CONV2D_BWD_WEIGHT) || !f->conv_phases ||
      f->values.data[in->res].type.dtype != DT_F32 || ir_low_operands(f, in) != 1)
    return 0;
  int64_t N, C, O, KH, KW, OH, OW;
  conv_dims(f, in, &N, &C, &O, &KH, &KW, &OH, &OW);
  const Type *x = &f->values.data[in->op == IR_CONV2D_BWD_INPUT ? in->res : in->args[0]].type;
  const int64_t st = in->attr[0];   /* 1, or 2 for a forward at a static batch */
  if ((in->attr[6] > 0 ? in->attr[6] : 1) != 1 || in->attr[1] != st ||
      (st != 1 && (st != 2 || in->op != IR_CONV2D || f->batch_max || KH * KW == 1)) || in->attr[4] != 1 || in->attr[5] != 1 ||
      x->dims[2] != st * OH || x->dims[3] != st * OW || KH - 1 != 2 * in->attr[2] || KW - 1 != 2 * in->attr[3] ||
      OH * OW % 16 || KH * KW > 64 || (!f->batch_max && N % 32) || (in->op == IR_CONV2D_BWD_INPUT ? O : C) < 8 ||
      C > ((int64_t)1 << 16) || O > ((int64_t)1 << 16) || OH * OW > (1 << 16))
    return 0;
  const int64_t Cq = ((in->op == IR_CONV2D ? C : O) + 1) / 2, M = in->op == IR_CONV2D ? O : C;
  const int64_t wq = (Cq + 15) / 16 * 16, nb = (N + 31) / 32, HW = x->dims[2] * x->dims[3];
  const int64_t dwt = (C * KH * KW * O + 15) / 16 * 16;   /* (the layouts after it 64-byte aligned) */
  const int64_t b = in->op == IR_CONV2D_BWD_WEIGHT ? 4 * (dwt + OH * OW * nb * 16 * (C + O + (O + 31) / 32 * 32))
                                                   : 4 * (KH * KW * M * wq + nb * 32 * (HW * Cq + OH * OW * M));
  return b <= IR_CONV_BAT_MAX_BYTES ? b : 0;
}

int ir_conv_depthwise(const Func *f, const Inst *in) {
  if (!f->conv_direct) return 0;
  int64_t N, C, O, KH, KW, OH, OW;
  conv_dims(f, in, &N, &C, &O, &KH, &KW, &OH, &OW);
  int64_t G = in->attr[6] > 0 ? in->attr[6] : 1;
  return G > 1 && C == G && KH * KW <= IR_CONV_DIRECT_MAX_W && OW <= 1024;
}

int64_t ir_conv_slots(const Func *f, const Inst *in) {
  int64_t N, C, O, KH, KW, OH, OW;
  conv_dims(f, in, &N, &C, &O, &KH, &KW, &OH, &OW);
  int64_t per = ir_conv_image_bytes(f, in);
  int64_t s = per == INT64_MAX || per <= 0 ? 1 : IR_CONV_SCRATCH_BYTES / per;
  int64_t k[5] = {C, KH, KW, OH * OW, (int64_t)ir_dtype_size(f->values.data[in->res].type.dtype)}, col;
  if (f->conv_direct && OH * OW > 0 && ir_prod(k, 5, &col) == 0 && col > 0) {
    /* the C target: tiles whose columns stay in the cache from im2col to the GEMM, but
     * wide enough for the GEMM */
    int64_t cap = IR_CONV_TILE_BYTES / col, least = (IR_CONV_TILE_COLS + OH * OW - 1) / (OH * OW);
    if (cap < least) cap = least;
    if (s > cap) s = cap;
  }
  return s < 1 ? 1 : s > N ? (N > 0 ? N : 1) : s;
}

int ir_is_view(const Func *f, ValId v) {
  if (!is_inst_result(f, v)) return 0;
  const Inst *in = &f->insts.data[f->values.data[v].def];
  return (in->op == IR_RESHAPE || in->op == IR_DETACH) && !is_scalar_const(f, in->args[0]);
}

/* ---- first-fit allocation over live intervals -------------------------- */

typedef struct Block {
  int64_t off, size;   /* bytes, relative to the activation region */
  int end;             /* last instruction index during which it is live */
} Block;

typedef struct Packer {
  Block *live;         /* blocks still live, sorted by offset */
  int n, cap;
  int64_t peak;
  int min_end;         /* the earliest end among live: nothing to drop before it */
  int64_t max_gap;     /* at least the largest hole between live blocks (below the top one) */
} Packer;

/* Places `size` bytes live over [t, end]; returns the offset. Near-linear when many
 * values are live at once (a 16000-way split): blocks are dropped only when one has
 * died, and a size that no hole can hold goes on top without a scan. */
static int64_t pack(Packer *pk, int t, int end, int64_t size) {
  if (pk->n && pk->min_end < t) {   /* drop blocks that died before t; the holes are known again */
    int k = 0;
    int64_t top = 0;
    pk->min_end = INT32_MAX, pk->max_gap = 0;
    for (int i = 0; i < pk->n; i++)
      if (pk->live[i].end >= t) {
        Block b = pk->live[i];
        pk->live[k++] = b;
        if (b.off - top > pk->max_gap) pk->max_gap = b.off - top;
        if (b.off + b.size > top) top = b.off + b.size;
        if (b.end < pk->min_end) pk->min_end = b.end;
      }
    pk->n = k;
  }
  size = align_up(size);
  int64_t off = 0;
  int at = 0;
  if (pk->n && size > pk->max_gap) {   /* no hole fits: above the top block */
    at = pk->n;
    off = pk->live[at - 1].off + pk->live[at - 1].size;
  }
  for (; at < pk->n; at++) {
    if (pk->live[at].off - off >= size) break;
    int64_t e = pk->live[at].off + pk->live[at].size;
    if (e > off) off = e;
  }
  if (pk->n == pk->cap) {
    pk->cap = pk->cap ? 2 * pk->cap : 64;
    pk->live = realloc(pk->live, sizeof(Block) * (size_t)pk->cap);
    CHECK(pk->live != NULL);
  }
  memmove(pk->live + at + 1, pk->live + at, sizeof(Block) * (size_t)(pk->n - at));
  pk->live[at] = (Block){off, size, end};
  if (!pk->n || end < pk->min_end) pk->min_end = end;
  pk->n++;
  if (off + size > pk->peak) pk->peak = off + size;
  return off;
}

/* Extends the block at `off` that is live up to step t to `end` (an in-place
 * result taking over its operand's bytes). Returns 0 if there is none. */
static int extend(Packer *pk, int64_t off, int t, int end) {
  int lo = 0, hi = pk->n;   /* the first block at `off` or above (sorted by offset) */
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (pk->live[mid].off < off) lo = mid + 1;
    else hi = mid;
  }
  for (int i = lo; i < pk->n && pk->live[i].off == off; i++)
    if (pk->live[i].end == t) {
      pk->live[i].end = end;
      return 1;
    }
  return 0;
}

/* ---- repacking: largest blocks first ----------------------------------------
 *
 * First-fit in definition order leaves holes where a short-lived value sits
 * below long-lived ones (17 MB of the gpt training step's 81 MB). Once every
 * block's interval is known, placing them largest first, each at the lowest
 * offset free over its whole interval, packs tighter; the plan keeps whichever
 * of the two peaks is lower. */

typedef struct Ivl {
  int start, end;      /* closed interval of time steps */
  int64_t size, off;   /* bytes (aligned); offset in the activation region */
} Ivl;
typedef Vec(Ivl) IvlVec;

static int by_size(const void *a, const void *b) {
  const Ivl *x = *(Ivl *const *)a, *y = *(Ivl *const *)b;
  if (x->size != y->size) return x->size < y->size ? 1 : -1;
  if (x->start != y->start) return x->start > y->start ? 1 : -1;
  return x < y ? -1 : x > y;
}

/* The scans repack may make in all (each placement scans the placed intervals): past it,
 * repacking gives up and the first-fit plan stands, so a program of tens of thousands of
 * values all live at once (a 16000-way split) does not take seconds here. Deterministic:
 * a count, not a clock. */
#define REPACK_MAX_SCANS 40000000LL

/* Places every interval, largest first, at the lowest offset where it fits
 * beside the placed intervals live at the same time; returns the peak (INT64_MAX when
 * it gave up). The placed ones are kept sorted by offset (an insertion per interval),
 * so each placement is one scan in offset order: no sort per interval. */
static int64_t repack(Ivl *v, int n) {
  Ivl **order = malloc(sizeof(Ivl *) * (size_t)(n ? n : 1)), **byoff = malloc(sizeof(Ivl *) * (size_t)(n ? n : 1));
  CHECK(order && byoff);
  for (int i = 0; i < n; i++) order[i] = &v[i];
  qsort(order, (size_t)n, sizeof *order, by_size);
  int64_t peak = 0, scans = 0;
  for (int i = 0; i < n; i++) {
    Ivl *b = order[i];
    int64_t off = 0;
    if ((scans += i) > REPACK_MAX_SCANS) {
      peak = INT64_MAX;
      break;
    }
    for (int j = 0; j < i; j++) {
      const Ivl *o = byoff[j];
      if (o->start > b->end || b->start > o->end) continue;   /* not live at the same time */
      if (o->off - off >= b->size) break;                    /* b fits below it */
      if (o->off + o->size > off) off = o->off + o->size;
    }
    b->off = off;
    if (off + b->size > peak) peak = off + b->size;
    int lo = 0, hi = i;   /* insert after the placed ones at offsets <= off */
    while (lo < hi) {
      int mid = (lo + hi) / 2;
      if (byoff[mid]->off <= off) lo = mid + 1;
      else hi = mid;
    }
    memmove(byoff + lo + 1, byoff + lo, sizeof *byoff * (size_t)(i - lo));
    byoff[lo] = b;
  }
  free(order);
  free(byoff);
  return peak;
}

static int new_ivl(IvlVec *v, int start, int end, int64_t size) {
  if (v->len == v->cap) {
    v->cap = v->cap ? 2 * v->cap : 64;
    v->data = realloc(v->data, sizeof(Ivl) * (size_t)v->cap);
    CHECK(v->data != NULL);
  }
  v->data[v->len] = (Ivl){start, end, align_up(size), 0};
  return v->len++;
}

static const char *too_large(Program *p, int64_t need) {
  if (need == INT64_MAX)
    return arena_printf(p->arena, "the model needs more memory than ctc's limit of %lld bytes (2**40)",
                        (long long)CTC_MAX_ARENA_BYTES);
  return arena_printf(p->arena, "the model needs at least %lld bytes of memory here, more than ctc's limit of "
                      "%lld bytes (2**40)", (long long)need, (long long)CTC_MAX_ARENA_BYTES);
}

/* Whether `size` more bytes at the end of an activation region with peak
 * `peak` could still fit (a cheap bound that keeps pack() from wrapping). */
static int fits(const MemPlan *mp, int64_t peak, int64_t size) {
  return size <= CTC_MAX_ARENA_BYTES && mp->params_bytes + peak + size <= CTC_MAX_ARENA_BYTES + PLAN_ALIGN;
}

/* Instruction i's time step: its kernel, or i itself without hints. */
static int step_of(const PlanHints *h, int i) { return h->step ? h->step[i] : i; }

/* ---- families: the values of a time loop's steps (PlanHints.family) ------------
 *
 * A family's members are the values at the same place of each step of a run the
 * kernel layer found (kernels/reroll.c). They are placed as one block, member i at
 * the block's offset + i * stride, so a loop over the steps addresses step t's
 * value as base + t*stride. The stride is 0 (one slot, reused) when each member
 * dies before the next is defined, or dies in the kernel that defines the next
 * and that kernel may write it in place (an accumulation over the steps);
 * otherwise it is the member's size and the block holds them all. The block
 * lives from the first member's kernel to the last use of any member. A family
 * takes only stored results of the same size, one per step, every step present;
 * else its values are placed one by one as usual. */
typedef struct Families {
  int *of;             /* per value: its family, or -1; NULL when there are none */
  int n;               /* families */
  int *count, *base, *end, *blk;
  int64_t *stride, *off;
  ValId *member;       /* member[base[g] + i]: family g's value of step i */
} Families;

static void families_free(Families *fm) {
  free(fm->of);
  free(fm->count);
  free(fm->base);
  free(fm->end);
  free(fm->blk);
  free(fm->stride);
  free(fm->off);
  free(fm->member);
  memset(fm, 0, sizeof *fm);
}

static void families(const Func *f, const PlanHints *h, const ValId *root, const int *last, Families *fm) {
  memset(fm, 0, sizeof *fm);
  int nv = f->values.len;
  if (!h->family || !h->family_ix) return;
  for (int v = 0; v < nv; v++)
    if (h->family[v] >= fm->n) fm->n = h->family[v] + 1;
  if (!fm->n) return;
  int n = fm->n;
  fm->of = malloc(sizeof(int) * (size_t)nv);
  fm->count = calloc((size_t)n, sizeof(int));
  fm->base = calloc((size_t)n, sizeof(int));
  fm->end = calloc((size_t)n, sizeof(int));
  fm->blk = malloc(sizeof(int) * (size_t)n);
  fm->stride = calloc((size_t)n, sizeof(int64_t));
  fm->off = calloc((size_t)n, sizeof(int64_t));
  int64_t *size = calloc((size_t)n, sizeof(int64_t));
  unsigned char *bad = calloc((size_t)n, 1);
  CHECK(fm->of && fm->count && fm->base && fm->end && fm->blk && fm->stride && fm->off && size && bad);
  for (int g = 0; g < n; g++) fm->blk[g] = -1, size[g] = -1;
  for (int v = 0; v < nv; v++) {   /* which values may be members: the others are placed alone */
    int g = h->family[v];
    fm->of[v] = -1;
    if (g < 0) continue;
    int64_t vb = value_bytes(&f->values.data[v].type);
    if (!is_inst_result(f, v) || is_scalar_const(f, v) || root[v] != v || (h->nostore && h->nostore[v]) ||
        (h->update_into && h->update_into[v] >= 0) || (size[g] >= 0 && size[g] != vb) || vb == INT64_MAX)
      continue;
    fm->of[v] = g;
    size[g] = vb;
    if (h->family_ix[v] + 1 > fm->count[g]) fm->count[g] = h->family_ix[v] + 1;
  }
  int total = 0;
  for (int g = 0; g < n; g++) fm->base[g] = total, total += fm->count[g];
  fm->member = malloc(sizeof(ValId) * (size_t)(total ? total : 1));
  CHECK(fm->member);
  for (int k = 0; k < total; k++) fm->member[k] = -1;
  for (int v = 0; v < nv; v++) {
    int g = fm->of[v];
    if (g < 0) continue;
    ValId *m = &fm->member[fm->base[g] + h->family_ix[v]];
    if (*m >= 0) bad[g] = 1;
    *m = v;
  }
  for (int g = 0; g < n; g++) {
    int apart = 1;   /* each member dead (or taken over in place) when the next is defined */
    ValId prev = -1;
    fm->end[g] = -1;
    if (size[g] > CTC_MAX_ARENA_BYTES / (fm->count[g] + 1)) bad[g] = 1;
    for (int i = 0; i < fm->count[g] && !bad[g]; i++) {
      ValId v = fm->member[fm->base[g] + i];
      if (v < 0) continue;   /* a step whose value is placed alone */
      if (last[v] > fm->end[g]) fm->end[g] = last[v];
      if (prev >= 0) {
        int born = step_of(h, f->values.data[v].def);
        if (!(last[prev] < born || (last[prev] == born && h->inplace && h->inplace[v] == prev))) apart = 0;
      }
      prev = v;
    }
    if (!bad[g]) fm->stride[g] = apart ? 0 : align_up(size[g]);
  }
  for (int v = 0; v < nv; v++)
    if (fm->of[v] >= 0 && bad[fm->of[v]]) fm->of[v] = -1;
  free(size);
  free(bad);
}

static void plan_func(Program *p, Func *f, MemPlan *mp, FuncPlan *fp) {
  const PlanHints *h = &fp->hints;
  int nsteps = f->insts.len ? step_of(h, f->insts.len - 1) + 1 : 0;
  int nv = f->values.len, ni = f->insts.len;
  fp->loc = arena_alloc(p->arena, sizeof(Loc) * (size_t)(nv ? nv : 1));
  fp->scratch = arena_alloc(p->arena, sizeof(int64_t) * (size_t)(ni ? ni : 1));
  fp->shares = arena_alloc(p->arena, sizeof(ValId) * (size_t)(nv ? nv : 1));
  unsigned char *taken = arena_alloc(p->arena, (size_t)(nv ? nv : 1));   /* bytes taken over in place */
  for (int v = 0; v < nv; v++) fp->shares[v] = -1;
  ValId *root = malloc(sizeof(ValId) * (size_t)(nv ? nv : 1));
  int *last = malloc(sizeof(int) * (size_t)(nv ? nv : 1));
  CHECK(root && last);

  for (int v = 0; v < nv; v++) {
    const Value *val = &f->values.data[v];
    root[v] = -1;
    last[v] = -1;
    fp->loc[v] = (Loc){LOC_NONE, 0};
    if (val->kind == V_INPUT) {
      fp->loc[v] = (Loc){val->index, 0};
      root[v] = v;
    } else if (val->kind == V_PARAM) {
      fp->loc[v] = (Loc){LOC_ARENA, mp->param_offset[val->index]};
      root[v] = v;
    }
  }
  /* Storage roots: a view stores nothing, it reads its operand's root. */
  for (int i = 0; i < ni; i++) {
    const Inst *in = &f->insts.data[i];
    fp->scratch[i] = -1;
    if (in->op == IR_CONST || (h->nostore && h->nostore[in->res])) continue;
    root[in->res] = ir_is_view(f, in->res) || (h->strided && h->strided[in->res]) ? root[in->args[0]] : in->res;
    if (last[in->res] < step_of(h, i)) last[in->res] = step_of(h, i);
  }
  /* Lifetimes of the roots: every use of the root or of one of its views. */
  for (int i = 0; i < ni; i++) {
    const Inst *in = &f->insts.data[i];
    for (int k = 0; k < in->nargs; k++) {
      ValId r = root[in->args[k]];
      if (r >= 0 && last[r] < step_of(h, i)) last[r] = step_of(h, i);
    }
  }
  /* Outputs are copied out, and update values written back to their
   * parameters, after the last instruction: they live to the end. */
  for (int i = 0; i < f->outputs.len; i++) {
    ValId r = root[f->outputs.data[i]];
    if (r >= 0) last[r] = nsteps;
  }
  for (int i = 0; i < f->updates.len; i++) {
    ValId r = root[f->updates.data[i]];
    if (r >= 0) last[r] = nsteps;
  }

  Packer pk = {0};
  IvlVec ivl = {0};   /* the blocks pack() placed, for repack() */
  int *blk = malloc(sizeof(int) * (size_t)(nv ? nv : 1)), *sblk = malloc(sizeof(int) * (size_t)(ni ? ni : 1));
  int64_t *boff = calloc((size_t)(nv ? nv : 1), sizeof *boff);   /* offset inside its block (a family's) */
  CHECK(blk && sblk && boff);
  for (int v = 0; v < nv; v++) blk[v] = -1;
  Families fm;
  families(f, h, root, last, &fm);
  for (int i = 0; i < ni; i++) sblk[i] = -1;
  for (int i = 0; i < ni; i++) {
    const Inst *in = &f->insts.data[i];
    ValId r = in->res;
    int t = step_of(h, i);
    if (in->op == IR_CONST) continue;
    if (h->nostore && h->nostore[r]) {   /* a scalar local of its kernel */
      fp->loc[r] = (Loc){LOC_LOCAL, 0};
      continue;
    }
    int64_t vb = root[r] != r ? 0 : value_bytes(&f->values.data[r].type), sb = ir_scratch_bytes(f, in);
    if (!fits(mp, pk.peak, vb) || !fits(mp, pk.peak, sb) || !fits(mp, pk.peak + vb, sb)) {
      int64_t need = INT64_MAX;
      if (vb < INT64_MAX && sb < INT64_MAX) need = mp->params_bytes + pk.peak + vb + sb;
      mp->error = too_large(p, need);
      mp->error_at = in->loc;
      break;
    }
    ValId ip = h->inplace ? h->inplace[r] : -1;
    if (h->update_into && h->update_into[r] >= 0 && root[r] == r) {
      fp->loc[r] = (Loc){LOC_ARENA, mp->param_offset[h->update_into[r]]};   /* computed into its parameter */
    } else if (root[r] != r) {
      fp->loc[r] = fp->loc[root[r]];   /* a view: defined after its root */
    } else if (fm.of && fm.of[r] >= 0) {   /* a step's value of a time loop: its family's block */
      int g = fm.of[r], ix = h->family_ix[r];
      int64_t st = fm.stride[g], size = st ? st * fm.count[g] : align_up(vb);
      if (fm.blk[g] < 0) {
        if (!fits(mp, pk.peak, size)) {
          mp->error = too_large(p, INT64_MAX);
          mp->error_at = in->loc;
          break;
        }
        fm.off[g] = pack(&pk, t, fm.end[g], size);
        fm.blk[g] = new_ivl(&ivl, t, fm.end[g], size);
      }
      fp->loc[r] = (Loc){LOC_ARENA, mp->params_bytes + fm.off[g] + ix * st};
      blk[r] = fm.blk[g];
      boff[r] = ix * st;
      ValId prev = -1;
      for (int k = ix - 1; k >= 0 && prev < 0; k--) prev = fm.member[fm.base[g] + k];
      if (!st && prev >= 0 && last[prev] == t) {   /* in place over the step before's (an accumulation) */
        fp->shares[r] = prev;
        taken[prev] = 1;
      }
    } else if (ip >= 0 && root[ip] == ip && is_inst_result(f, ip) && fp->loc[ip].base == LOC_ARENA && !taken[ip] &&
               last[ip] == t && value_bytes(&f->values.data[ip].type) == vb &&
               extend(&pk, fp->loc[ip].offset - mp->params_bytes, t, last[r])) {
      fp->loc[r] = fp->loc[ip];   /* in place: ip dies in this kernel, which reads it element by element */
      fp->shares[r] = ip;
      taken[ip] = 1;
      blk[r] = blk[ip];
      boff[r] = boff[ip];
      if (blk[r] >= 0) ivl.data[blk[r]].end = last[r];
    } else {
      int64_t off = pack(&pk, t, last[r], vb);
      fp->loc[r] = (Loc){LOC_ARENA, mp->params_bytes + off};
      blk[r] = new_ivl(&ivl, t, last[r], vb);
    }
    if (sb > 0) {
      fp->scratch[i] = mp->params_bytes + pack(&pk, t, t, sb);
      sblk[i] = new_ivl(&ivl, t, t, sb);
    }
    if (mp->params_bytes + pk.peak > CTC_MAX_ARENA_BYTES) {
      mp->error = too_large(p, mp->params_bytes + pk.peak);
      mp->error_at = in->loc;
      break;
    }
  }
  fp->peak = pk.peak;
  if (!mp->error && ivl.len && repack(ivl.data, ivl.len) < pk.peak) {
    fp->peak = 0;
    for (int k = 0; k < ivl.len; k++)
      if (ivl.data[k].off + ivl.data[k].size > fp->peak) fp->peak = ivl.data[k].off + ivl.data[k].size;
    for (int v = 0; v < nv; v++)
      if (blk[v] >= 0) fp->loc[v].offset = mp->params_bytes + ivl.data[blk[v]].off + boff[v];
    for (int i = 0; i < ni; i++) {
      if (sblk[i] >= 0) fp->scratch[i] = mp->params_bytes + ivl.data[sblk[i]].off;
      ValId r = f->insts.data[i].res;   /* views follow their roots (defined earlier) */
      if (root[r] >= 0 && root[r] != r && !(h->update_into && h->update_into[r] >= 0)) fp->loc[r] = fp->loc[root[r]];
    }
  }
  free(ivl.data);
  free(boff);
  families_free(&fm);
  free(blk);
  free(sblk);
  free(pk.live);
  free(root);
  free(last);
}

int ir_plan_reserve(MemPlan *mp, int fi, int64_t bytes) {
  FuncPlan *fp = &mp->funcs[fi];
  int64_t at = align_up(fp->peak);
  if (bytes <= 0 || bytes > CTC_MAX_ARENA_BYTES || at + bytes > CTC_MAX_ARENA_BYTES - mp->params_bytes) return -1;
  fp->pack_at = mp->params_bytes + at, fp->pack_bytes = bytes;
  fp->peak = at + bytes;
  if (mp->params_bytes + fp->peak > mp->arena_bytes) mp->arena_bytes = mp->params_bytes + fp->peak;
  return 0;
}

int64_t ir_plan_values_peak(const MemPlan *mp, int fi) {
  const FuncPlan *fp = &mp->funcs[fi];
  return fp->pack_bytes ? fp->pack_at - mp->params_bytes : fp->peak;
}

MemPlan *ir_plan_memory(Program *p) { return ir_plan_memory_hints(p, NULL); }

MemPlan *ir_plan_memory_hints(Program *p, const PlanHints *hints) {
  MemPlan *mp = arena_alloc(p->arena, sizeof *mp);
  int np = p->params.len;
  mp->param_offset = arena_alloc(p->arena, sizeof(int64_t) * (size_t)(np ? np : 1));
  int64_t off = 0;
  for (int i = 0; i < np; i++) {
    mp->param_offset[i] = off;
    int64_t b = value_bytes(&p->params.data[i].type);
    if (b > CTC_MAX_ARENA_BYTES || off + b > CTC_MAX_ARENA_BYTES) {
      mp->error = too_large(p, b > CTC_MAX_ARENA_BYTES ? INT64_MAX : off + b);
      mp->error_at = p->params.data[i].loc;
      return mp;
    }
    off = align_up(off + b);
  }
  mp->params_bytes = off;
  mp->funcs = arena_alloc(p->arena, sizeof(FuncPlan) * (size_t)(p->funcs.len ? p->funcs.len : 1));
  int64_t peak = 0;
  for (int i = 0; i < p->funcs.len; i++) {
    if (hints) mp->funcs[i].hints = hints[i];
    plan_func(p, p->funcs.data[i], mp, &mp->funcs[i]);
    if (mp->error) return mp;
    if (mp->funcs[i].peak > peak) peak = mp->funcs[i].peak;
  }
  mp->arena_bytes = mp->params_bytes + peak;
  return mp;
}
