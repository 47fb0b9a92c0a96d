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
 *   fail()                                         returns CTC_ERR_SHAPE */
#include "ctc_rt.h"

#include <stdbool.h>
#include <stdint.h>
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
    {"forward", 1, 1, fwd_in, fwd_out, fake_forward, CTC_ENTRY_FORWARD},
    {"bump", 2, 0, bump_in, NULL, fake_bump, CTC_ENTRY_FORWARD},
    {"mix", 5, 5, mix_in, mix_out, fake_mix, CTC_ENTRY_FORWARD},
    {"fail", 0, 0, NULL, NULL, fake_fail, CTC_ENTRY_FORWARD},
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

int main(int c, char **v) { return ctc_main(c, v, &desc); }
