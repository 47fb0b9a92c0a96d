/* fake_model.c - a hand-written stand-in for a ctc-generated model, used by
 * the runtime tests. It describes itself with a ctc_model_desc like generated
 * code does and hands everything else to ctc_main.
 *
 * Parameters (arena offsets):  fc.weight f32[3, 4] @0, fc.bias f32[3] @64,
 *                              steps i64[] @128 (a scalar buffer)
 * Entries:
 *   forward(x f32[2, 4]) -> y f32[2, 3]            y = x @ W^T + b
 *   bump(delta f32[3], scale f32[])                b = b * scale + delta; steps += 1
 *   mix(a bool[4], u u8[4], d f64[2], n i32[3], m i64[2])
 *       -> o u8[4] = a + u, e f64[2] = 2 d, k i64[3] = 2 n, q i32[2] = m + 1, z bool[4] = !a
 *   fail()                                         returns CTC_ERR_SHAPE
 *
 * With FAKE_MODEL=train in the environment the program is another model, for
 * the `train` command: a softmax classifier (4 features, 3 classes, batch 4)
 * whose training step does plain SGD (lr 0.5) by hand and records what it saw.
 * Parameters (arena offsets):  fc.weight f32[3, 4] @0, fc.bias f32[3] @64,
 *                              seen_x f32[16, 4, 4] @128, seen_y i64[16, 4] @1152
 *                              (the inputs of step k go to slot k % 16),
 *                              nsteps i64[] @1664 (steps taken)
 * Entries:
 *   forward(x f32[4, 1, 2, 2]) -> logits f32[4, 3]     logits = x W^T + b
 *   train_step(x f32[4, 1, 2, 2], y i64[4]) -> loss f32[] (kind TRAIN)
 *        mean cross-entropy, then W -= 0.5 dW, b -= 0.5 db; fails (CTC_ERR_ARG)
 *        when x[0] is -999 or a label is outside 0..2
 *   train_other(...)  a second TRAIN entry that always fails (train uses the first) */
#include "ctc_rt.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct fake_t {
  void *arena;
  float *w, *b;
  int64_t *steps;
} fake_t;

enum { OFF_W = 0, OFF_B = 64, OFF_STEPS = 128, ARENA_BYTES = 192 };

static int fake_init(void *m, void *arena, size_t bytes) {
  fake_t *f = m;
  if (bytes < ARENA_BYTES) return CTC_ERR_ARENA;
  if ((uintptr_t)arena % 64 != 0) return CTC_ERR_ARENA;
  f->arena = arena;
  f->w = (float *)((char *)arena + OFF_W);
  f->b = (float *)((char *)arena + OFF_B);
  f->steps = (int64_t *)((char *)arena + OFF_STEPS);
  for (int i = 0; i < 3; i++) {
    for (int j = 0; j < 4; j++) f->w[i * 4 + j] = 0.25f * (float)(i + 1) - 0.125f * (float)j;
    f->b[i] = (float)i;
  }
  *f->steps = 7;
  return CTC_OK;
}

static void *fake_arena_of(void *m) { return ((fake_t *)m)->arena; }

static int fake_forward(void *m, const void *const *in, void *const *out) {
  const fake_t *f = m;
  const float *x = in[0];
  float *y = out[0];
  for (int r = 0; r < 2; r++)
    for (int i = 0; i < 3; i++) {
      float s = f->b[i];
      for (int j = 0; j < 4; j++) s += x[r * 4 + j] * f->w[i * 4 + j];
      y[r * 3 + i] = s;
    }
  return CTC_OK;
}

static int fake_bump(void *m, const void *const *in, void *const *out) {
  fake_t *f = m;
  const float *delta = in[0], *scale = in[1];
  for (int i = 0; i < 3; i++) f->b[i] = f->b[i] * scale[0] + delta[i];
  *f->steps += 1;
  return CTC_OK;
}

static int fake_mix(void *m, const void *const *in, void *const *out) {
  const bool *a = in[0];
  const uint8_t *u = in[1];
  const double *d = in[2];
  const int32_t *n = in[3];
  const int64_t *mm = in[4];
  uint8_t *o = out[0];
  double *e = out[1];
  int64_t *k = out[2];
  int32_t *q = out[3];
  bool *z = out[4];
  for (int i = 0; i < 4; i++) o[i] = (uint8_t)(a[i] + u[i]);
  for (int i = 0; i < 2; i++) e[i] = 2 * d[i];
  for (int i = 0; i < 3; i++) k[i] = 2 * (int64_t)n[i];
  for (int i = 0; i < 2; i++) q[i] = (int32_t)(mm[i] + 1);
  for (int i = 0; i < 4; i++) z[i] = !a[i];
  return CTC_OK;
}

static int fake_fail(void *m, const void *const *in, void *const *out) { return CTC_ERR_SHAPE; }

static const ctc_tensor params[] = {
    {.name = "fc.weight", .dtype = CTC_F32, .ndim = 2, .shape = {3, 4}, .offset = OFF_W},
    {.name = "fc.bias", .dtype = CTC_F32, .ndim = 1, .shape = {3}, .offset = OFF_B},
    {.name = "steps", .dtype = CTC_I64, .ndim = 0, .offset = OFF_STEPS},
};
static const ctc_tensor fwd_in[] = {{.name = "x", .dtype = CTC_F32, .ndim = 2, .shape = {2, 4}}};
static const ctc_tensor fwd_out[] = {{.name = "y", .dtype = CTC_F32, .ndim = 2, .shape = {2, 3}}};
static const ctc_tensor bump_in[] = {
    {.name = "delta", .dtype = CTC_F32, .ndim = 1, .shape = {3}},
    {.name = "scale", .dtype = CTC_F32, .ndim = 0},
};
static const ctc_tensor mix_in[] = {
    {.name = "a", .dtype = CTC_BOOL, .ndim = 1, .shape = {4}},
    {.name = "u", .dtype = CTC_U8, .ndim = 1, .shape = {4}},
    {.name = "d", .dtype = CTC_F64, .ndim = 1, .shape = {2}},
    {.name = "n", .dtype = CTC_I32, .ndim = 1, .shape = {3}},
    {.name = "m", .dtype = CTC_I64, .ndim = 1, .shape = {2}},
};
static const ctc_tensor mix_out[] = {
    {.name = "o", .dtype = CTC_U8, .ndim = 1, .shape = {4}},
    {.name = "e", .dtype = CTC_F64, .ndim = 1, .shape = {2}},
    {.name = "k", .dtype = CTC_I64, .ndim = 1, .shape = {3}},
    {.name = "q", .dtype = CTC_I32, .ndim = 1, .shape = {2}},
    {.name = "z", .dtype = CTC_BOOL, .ndim = 1, .shape = {4}},
};
static const ctc_entry entries[] = {
    {"forward", 1, 1, fwd_in, fwd_out, fake_forward, CTC_ENTRY_FORWARD, 0, NULL},
    {"bump", 2, 0, bump_in, NULL, fake_bump, CTC_ENTRY_FORWARD, 0, NULL},
    {"mix", 5, 5, mix_in, mix_out, fake_mix, CTC_ENTRY_FORWARD, 0, NULL},
    {"fail", 0, 0, NULL, NULL, fake_fail, CTC_ENTRY_FORWARD, 0, NULL},
};

static const ctc_model_desc desc = {
    .name = "fake",
    .source = "fake_model.py",
    .model_size = sizeof(fake_t),
    .arena_bytes = ARENA_BYTES,
    .arena_align = 64,
    .nparams = 3,
    .params = params,
    .nentries = 4,
    .entries = entries,
    .init = fake_init,
    .arena_of = fake_arena_of,
};

/* ---- the training model (FAKE_MODEL=train) ---- */

enum { TB = 4, TF = 4, TC = 3, TSLOTS = 16 };
enum { T_W = 0, T_B = 64, T_SX = 128, T_SY = T_SX + TSLOTS * TB * TF * 4, T_N = T_SY + TSLOTS * TB * 8,
       T_ARENA = T_N + 64 };

typedef struct faket_t {
  unsigned char *arena;
} faket_t;

static int faket_init(void *m, void *arena, size_t bytes) {
  if (bytes < T_ARENA || (uintptr_t)arena % 64 != 0) return CTC_ERR_ARENA;
  ((faket_t *)m)->arena = arena;
  memset(arena, 0, T_ARENA);
  float *w = (float *)((char *)arena + T_W);
  for (int i = 0; i < TC * TF; i++) w[i] = 0.1f * (float)((i * 7) % 5) - 0.2f;
  return CTC_OK;
}

static void *faket_arena_of(void *m) { return ((faket_t *)m)->arena; }

static void faket_logits(const unsigned char *a, const float *x, float *out) {
  const float *w = (const float *)(a + T_W), *b = (const float *)(a + T_B);
  for (int r = 0; r < TB; r++)
    for (int i = 0; i < TC; i++) {
      float s = b[i];
      for (int j = 0; j < TF; j++) s += x[r * TF + j] * w[i * TF + j];
      out[r * TC + i] = s;
    }
}

static int faket_forward(void *m, const void *const *in, void *const *out) {
  faket_logits(((faket_t *)m)->arena, in[0], out[0]);
  return CTC_OK;
}

static int faket_train(void *m, const void *const *in, void *const *out) {
  unsigned char *a = ((faket_t *)m)->arena;
  const float *x = in[0];
  const int64_t *y = in[1];
  float *w = (float *)(a + T_W), *b = (float *)(a + T_B), logits[TB * TC], g[TB * TC], loss = 0;
  int64_t *n = (int64_t *)(a + T_N);
  if (x[0] == -999.0f) return CTC_ERR_ARG;
  for (int r = 0; r < TB; r++)
    if (y[r] < 0 || y[r] >= TC) return CTC_ERR_ARG;
  int slot = (int)(*n % TSLOTS);
  memcpy(a + T_SX + (size_t)slot * TB * TF * 4, x, TB * TF * 4);
  memcpy(a + T_SY + (size_t)slot * TB * 8, y, TB * 8);
  faket_logits(a, x, logits);
  for (int r = 0; r < TB; r++) {
    float mx = logits[r * TC], sum = 0;
    for (int i = 1; i < TC; i++) mx = logits[r * TC + i] > mx ? logits[r * TC + i] : mx;
    for (int i = 0; i < TC; i++) sum += expf(logits[r * TC + i] - mx);
    loss += logf(sum) + mx - logits[r * TC + y[r]];
    for (int i = 0; i < TC; i++) g[r * TC + i] = (expf(logits[r * TC + i] - mx) / sum - (i == y[r])) / TB;
  }
  for (int i = 0; i < TC; i++) {
    float db = 0;
    for (int r = 0; r < TB; r++) db += g[r * TC + i];
    for (int j = 0; j < TF; j++) {
      float dw = 0;
      for (int r = 0; r < TB; r++) dw += g[r * TC + i] * x[r * TF + j];
      w[i * TF + j] -= 0.5f * dw;
    }
    b[i] -= 0.5f * db;
  }
  *(float *)out[0] = loss / TB;
  *n += 1;
  return CTC_OK;
}

static int faket_fail(void *m, const void *const *in, void *const *out) { return CTC_ERR_SHAPE; }

static const ctc_tensor t_params[] = {
    {.name = "fc.weight", .dtype = CTC_F32, .ndim = 2, .shape = {TC, TF}, .offset = T_W},
    {.name = "fc.bias", .dtype = CTC_F32, .ndim = 1, .shape = {TC}, .offset = T_B},
    {.name = "seen_x", .dtype = CTC_F32, .ndim = 3, .shape = {TSLOTS, TB, TF}, .offset = T_SX},
    {.name = "seen_y", .dtype = CTC_I64, .ndim = 2, .shape = {TSLOTS, TB}, .offset = T_SY},
    {.name = "nsteps", .dtype = CTC_I64, .ndim = 0, .offset = T_N},
};
static const ctc_tensor t_fwd_in[] = {{.name = "x", .dtype = CTC_F32, .ndim = 4, .shape = {TB, 1, 2, 2}}};
static const ctc_tensor t_fwd_out[] = {{.name = "logits", .dtype = CTC_F32, .ndim = 2, .shape = {TB, TC}}};
static const ctc_tensor t_train_in[] = {
    {.name = "x", .dtype = CTC_F32, .ndim = 4, .shape = {TB, 1, 2, 2}},
    {.name = "target", .dtype = CTC_I64, .ndim = 1, .shape = {TB}},
};
static const ctc_tensor t_train_out[] = {{.name = "loss", .dtype = CTC_F32, .ndim = 0}};
static const ctc_entry t_entries[] = {
    {"forward", 1, 1, t_fwd_in, t_fwd_out, faket_forward, CTC_ENTRY_FORWARD, 0, NULL},
    {"train_step", 2, 1, t_train_in, t_train_out, faket_train, CTC_ENTRY_TRAIN, 0, NULL},
    {"train_other", 2, 1, t_train_in, t_train_out, faket_fail, CTC_ENTRY_TRAIN, 0, NULL},
};

static const ctc_model_desc train_desc = {
    .name = "faket",
    .source = "faket.py",
    .model_size = sizeof(faket_t),
    .arena_bytes = T_ARENA,
    .arena_align = 64,
    .nparams = 5,
    .params = t_params,
    .nentries = 3,
    .entries = t_entries,
    .init = faket_init,
    .arena_of = faket_arena_of,
};

int main(int c, char **v) {
  const char *which = getenv("FAKE_MODEL");
  return ctc_main(c, v, which && !strcmp(which, "train") ? &train_desc : &desc);
}
