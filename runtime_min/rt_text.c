/* rt_text.c - text data for `./net train --text / --tokens` and `./net sample`:
 * character-level tokenisation (the vocabulary is the sorted set of the file's
 * characters, Unicode code points decoded from UTF-8, as Python's
 * sorted(set(text))), the vocabulary file written beside the weights, nanoGPT's
 * uint16 token files, and the (x, y) windows of nanoGPT's get_batch. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include "ctc_rt.h"
#include "rt_driver_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Decodes one UTF-8 code point at s[*i] (n bytes); -1 on a malformed sequence. */
static int32_t utf8_next(const unsigned char *s, size_t n, size_t *i) {
  unsigned c = s[*i];
  int len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
  if (!len || *i + (size_t)len > n) return -1;
  uint32_t cp = len == 1 ? c : len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
  for (int k = 1; k < len; k++) {
    unsigned b = s[*i + (size_t)k];
    if ((b & 0xC0) != 0x80) return -1;
    cp = cp << 6 | (b & 0x3F);
  }
  static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < min_cp[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return -1;   /* overlong, surrogate */
  *i += (size_t)len;
  return (int32_t)cp;
}

static size_t utf8_put(unsigned char *o, uint32_t cp) {
  if (cp < 0x80) return o[0] = (unsigned char)cp, 1;
  if (cp < 0x800) return o[0] = (unsigned char)(0xC0 | cp >> 6), o[1] = (unsigned char)(0x80 | (cp & 0x3F)), 2;
  if (cp < 0x10000) {
    o[0] = (unsigned char)(0xE0 | cp >> 12);
    o[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
    o[2] = (unsigned char)(0x80 | (cp & 0x3F));
    return 3;
  }
  o[0] = (unsigned char)(0xF0 | cp >> 18);
  o[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
  o[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
  o[3] = (unsigned char)(0x80 | (cp & 0x3F));
  return 4;
}

/* The code points of a UTF-8 buffer (malloc'ed). */
static int utf8_decode(const char *path, const unsigned char *s, size_t n, int32_t **out, int64_t *count,
                       ctc_error *err) {
  int32_t *cp = malloc((n ? n : 1) * sizeof *cp);
  if (!cp) return ctc_fail(err, CTC_ERR_NOMEM, "%s: out of memory", path);
  int64_t m = 0;
  for (size_t i = 0; i < n;) {
    size_t at = i;
    int32_t c = utf8_next(s, n, &i);
    if (c < 0) {
      free(cp);
      return ctc_fail(err, CTC_ERR_FORMAT, "%s: byte %zu (0x%02x) is not valid UTF-8: a text file for --text must be "
                      "UTF-8", path, at, s[at]);
    }
    cp[m++] = c;
  }
  *out = cp;
  *count = m;
  return CTC_OK;
}

static int cmp_i32(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

/* The token of code point c in a sorted vocabulary; -1 when it is not there. */
int32_t ctc_vocab_index(const ctc_vocab *v, int32_t c) {
  int32_t lo = 0, hi = v->n - 1;
  while (lo <= hi) {
    int32_t mid = lo + (hi - lo) / 2;
    if (v->cp[mid] == c) return mid;
    if (v->cp[mid] < c) lo = mid + 1;
    else hi = mid - 1;
  }
  return -1;
}

void ctc_vocab_free(ctc_vocab *v) {
  free(v->cp);
  v->cp = NULL;
  v->n = 0;
}

void ctc_text_free(ctc_text *t) {
  free(t->tok);
  t->tok = NULL;
  t->n = 0;
}

int ctc_text_load_chars(const char *path, ctc_text *t, ctc_vocab *v, ctc_error *err) {
  void *buf;
  size_t size;
  int rc = ctc_read_file(path, &buf, &size, err);
  if (rc) return rc;
  int32_t *cp;
  int64_t n;
  rc = utf8_decode(path, buf, size, &cp, &n, err);
  free(buf);
  if (rc) return rc;
  int32_t *sorted = malloc((size_t)(n ? n : 1) * sizeof *sorted);
  if (!sorted) {
    free(cp);
    return ctc_fail(err, CTC_ERR_NOMEM, "%s: out of memory", path);
  }
  memcpy(sorted, cp, (size_t)n * sizeof *sorted);
  qsort(sorted, (size_t)n, sizeof *sorted, cmp_i32);
  int32_t m = 0;
  for (int64_t i = 0; i < n; i++)
    if (i == 0 || sorted[i] != sorted[m - 1]) sorted[m++] = sorted[i];
  v->cp = sorted;
  v->n = m;
  for (int64_t i = 0; i < n; i++) cp[i] = ctc_vocab_index(v, cp[i]);
  t->tok = cp;
  t->n = n;
  return CTC_OK;
}

int ctc_text_load_u16(const char *path, ctc_text *t, ctc_error *err) {
  void *buf;
  size_t size;
  int rc = ctc_read_file(path, &buf, &size, err);
  if (rc) return rc;
  if (size % 2) {
    free(buf);
    return ctc_fail(err, CTC_ERR_FORMAT, "%s: %zu bytes is not a whole number of uint16 tokens (nanoGPT's train.bin "
                    "format)", path, size);
  }
  int64_t n = (int64_t)(size / 2);
  int32_t *tok = malloc((size_t)(n ? n : 1) * sizeof *tok);
  if (!tok) {
    free(buf);
    return ctc_fail(err, CTC_ERR_NOMEM, "%s: out of memory", path);
  }
  const unsigned char *b = buf;
  for (int64_t i = 0; i < n; i++) tok[i] = (int32_t)(b[2 * i] | (unsigned)b[2 * i + 1] << 8);   /* little-endian */
  free(buf);
  t->tok = tok;
  t->n = n;
  return CTC_OK;
}

int ctc_vocab_write(const char *path, const ctc_vocab *v, ctc_error *err) {
  ctc_wfile w;
  int rc = ctc_wopen(&w, path, err);
  if (rc) return rc;
  int ok = 1;
  for (int32_t i = 0; i < v->n && ok; i++) {
    unsigned char o[4];
    ok = ctc_wwrite(&w, o, utf8_put(o, (uint32_t)v->cp[i]));
  }
  return ctc_wcommit(&w, ok, err);
}

int ctc_vocab_read(const char *path, ctc_vocab *v, ctc_error *err) {
  void *buf;
  size_t size;
  int rc = ctc_read_file(path, &buf, &size, err);
  if (rc) return rc;
  int32_t *cp;
  int64_t n;
  rc = utf8_decode(path, buf, size, &cp, &n, err);
  free(buf);
  if (rc) return rc;
  for (int64_t i = 1; i < n; i++)
    if (cp[i] <= cp[i - 1]) {
      free(cp);
      return ctc_fail(err, CTC_ERR_FORMAT, "%s: not a vocabulary file (its characters must be sorted and distinct, "
                      "as `train --text` writes them)", path);
    }
  if (n == 0 || n > INT32_MAX) {
    free(cp);
    return ctc_fail(err, CTC_ERR_FORMAT, "%s: an empty vocabulary", path);
  }
  v->cp = cp;
  v->n = (int32_t)n;
  return CTC_OK;
}

int ctc_vocab_path(const char *weights, char *out, size_t cap) {
  const char *slash = strrchr(weights, '/');
  const char *base = slash ? slash + 1 : weights;
  const char *dot = strrchr(base, '.');
  size_t stem = dot && dot != base ? (size_t)(dot - weights) : strlen(weights);
  int n = snprintf(out, cap, "%.*s.vocab.txt", (int)stem, weights);
  return n > 0 && (size_t)n < cap;
}

void ctc_text_windows(const ctc_text *t, int64_t T, uint64_t state, int64_t B, ctc_dtype dt, void *x, void *y) {
  for (int64_t b = 0; b < B; b++) {
    int64_t off = (int64_t)ctc_drv_rand_below(&state, (uint64_t)(t->n - T));
    for (int64_t j = 0; j < T; j++) {
      int64_t k = b * T + j;
      int32_t xv = t->tok[off + j], yv = t->tok[off + j + 1];
      if (dt == CTC_I64) ((int64_t *)x)[k] = xv, ((int64_t *)y)[k] = yv;
      else ((int32_t *)x)[k] = xv, ((int32_t *)y)[k] = yv;
    }
  }
}
