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

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* the code points of the UTF-8 text file at path (*cp malloc'ed, *n of them) */
static int read_utf8(const char *path, int32_t **cp, int64_t *n, ctc_error *err) {
  void *buf;
  size_t size;
  int rc = ctc_read_file(path, &buf, &size, err);
  if (rc) return rc;
  rc = utf8_decode(path, buf, size, cp, n, err);
  free(buf);
  return rc;
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
  int32_t *cp;
  int64_t n;
  int rc = read_utf8(path, &cp, &n, err);
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
  int32_t *cp;
  int64_t n;
  int rc = read_utf8(path, &cp, &n, err);
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

/* ---- sample ---------------------------------------------------------------------
 *
 *   ./net sample [--weights W] [--vocab V.txt] [--prompt TEXT | --prompt-tokens 1,2,3]
 *                [--tokens N] [--temperature T] [--top-k K] [--seed S] [--logits OUT.npy]
 *
 * Generates N tokens after the prompt as nanoGPT's generate does: the logits of the
 * last position of the window (the last S tokens, S = forward's T), divided by the
 * temperature, all but the top K set to -inf (ties with the K-th kept), softmax, and
 * one multinomial draw (a counter-based stream: splitmix64 of the seed and the step;
 * with K = 1 the first largest logit). With the model's `decode` entry (the KV-cache
 * entry ctc derives for causal attention) each token costs one call at its position;
 * once the text is longer than S the window slides and its cache is recomputed (S
 * calls). Without it the forward entry re-runs the window (right-padded: a causal
 * model's logits at position i do not depend on later tokens). Text is streamed to
 * stdout as it is generated: characters with a vocabulary (--vocab, or the file
 * beside the weights that `train --text` wrote), else token ids. */

typedef struct SampleArgs {
  const char *weights, *vocab, *prompt, *prompt_tokens, *logits;
  long long tokens, top_k;
  double temperature;
  unsigned long long seed;
  int help;
} SampleArgs;

static void sample_usage(FILE *f, const char *prog) {
  fprintf(f,
          "usage: %s sample [--weights W] [--prompt TEXT | --prompt-tokens 1,2,3] [options]\n"
          "\n"
          "Generates text as nanoGPT's generate does: temperature, top-k, a multinomial draw per token.\n"
          "\n"
          "options:\n"
          "  --weights W               the parameters (safetensors or a PyTorch checkpoint)\n"
          "  --vocab V.txt             the characters of the vocabulary (default: W.vocab.txt beside the\n"
          "                            weights, as `train --text` writes it); without one, tokens are ids\n"
          "  --prompt TEXT             the start of the text (default: a newline, or token 0)\n"
          "  --prompt-tokens 1,2,3     the start as token ids\n"
          "  --tokens N                tokens to generate (default 100)\n"
          "  --temperature T           divide the logits by T > 0 (default 1.0)\n"
          "  --top-k K                 sample among the K most likely tokens (default: all; 1: greedy)\n"
          "  --seed S                  the sampling stream (default 0)\n"
          "  --logits OUT.npy          write the logits of every generated token, f32 [N, V]\n"
          "\n"
          "The model's `decode` entry (ctc derives it from a forward with causal attention) keeps\n"
          "per-layer key/value caches: one call per token. Without it, forward re-runs the window.\n",
          prog);
}

static int parse_sample_args(int argc, char **argv, SampleArgs *a, ctc_error *err) {
  memset(a, 0, sizeof *a);
  a->tokens = 100;
  a->temperature = 1.0;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
      a->help = 1;
      continue;
    }
    static const char *const known[] = {"--weights", "--vocab", "--prompt", "--prompt-tokens", "--tokens",
                                        "--temperature", "--top-k", "--seed", "--logits", NULL};
    char name[32];
    const char *val;
    int rc = ctc_drv_option_value(argc, argv, &i, known, name, &val, err);
    if (rc) return rc;
    char *end;
    if (!strcmp(name, "--weights")) a->weights = val;
    else if (!strcmp(name, "--vocab")) a->vocab = val;
    else if (!strcmp(name, "--prompt")) a->prompt = val;
    else if (!strcmp(name, "--prompt-tokens")) a->prompt_tokens = val;
    else if (!strcmp(name, "--logits")) a->logits = val;
    else if (!strcmp(name, "--temperature")) {
      a->temperature = strtod(val, &end);
      if (end == val || *end || !(a->temperature > 0) || a->temperature > 1e30)
        return ctc_fail(err, CTC_ERR_ARG, "--temperature needs a positive number, not '%s'", val);
    } else if (!strcmp(name, "--seed")) {
      a->seed = strtoull(val, &end, 10);
      if (*val < '0' || *val > '9' || *end) return ctc_fail(err, CTC_ERR_ARG, "--seed needs a non-negative integer");
    } else {   /* --tokens, --top-k */
      long long v = strtoll(val, &end, 10);
      if (end == val || *end || v < 1 || v > (1LL << 30))
        return ctc_fail(err, CTC_ERR_ARG, "%s needs a positive integer, not '%s'", name, val);
      if (!strcmp(name, "--tokens")) a->tokens = v;
      else a->top_k = v;
    }
  }
  if (a->prompt && a->prompt_tokens) return ctc_fail(err, CTC_ERR_ARG, "--prompt and --prompt-tokens exclude each other");
  return CTC_OK;
}

/* A module-level training loop's generate(context, max_new_tokens=N) after it: N tokens
 * after token 0 (its context, torch.zeros((1, 1))), with its temperature and top-k (the
 * compiler read them from generate's body, script.c), unless given. */
static void script_sample_defaults(const ctc_model_desc *desc, int argc, char **argv, SampleArgs *a) {
  const ctc_text_script *sc = desc->script;
  if (!sc) return;
  int tokens = 0, temp = 0, topk = 0;
  for (int i = 0; i < argc; i++) {
    tokens |= !strncmp(argv[i], "--tokens", 8);
    temp |= !strncmp(argv[i], "--temperature", 13);
    topk |= !strncmp(argv[i], "--top-k", 7);
  }
  if (!tokens && sc->sample_tokens) a->tokens = sc->sample_tokens;
  if (!a->prompt && !a->prompt_tokens) a->prompt_tokens = "0";
  if (!sc->gen_where) return;
  if (!temp) a->temperature = sc->sample_temperature;
  if (!topk) a->top_k = sc->sample_top_k;
}

typedef struct Sampler {
  ctc_drv_run r;
  const ctc_entry *dec, *fwd, *pre;   /* decode, forward, prefill (or NULL) */
  int64_t S, V;              /* the window, the vocabulary of the logits */
  void *din[2], *dout, **fout, *fin, *pin;
  int64_t pos;               /* decode: the position input */
  int32_t *ctx;              /* prompt and generated tokens */
  int64_t n, cap;
  int64_t w0, filled;        /* decode: ctx[w0 .. w0 + filled) are in the cache at positions 0.. */
  double *lg;                /* the logits of the current step */
  ctc_vocab vocab;
  int have_vocab;
} Sampler;

static void sampler_free(Sampler *s) {
  ctc_drv_run_free(&s->r);
  free(s->din[0]);
  free(s->dout);
  free(s->fin);
  free(s->pin);
  for (int j = 0; s->fout && j < s->fwd->noutputs; j++) free(s->fout[j]);
  free(s->fout);
  free(s->ctx);
  free(s->lg);
  ctc_vocab_free(&s->vocab);
}

static void put_int(void *p, ctc_dtype dt, int64_t k, int64_t v) {
  if (dt == CTC_I64) ((int64_t *)p)[k] = v;
  else ((int32_t *)p)[k] = (int32_t)v;
}

static void get_logits(Sampler *s, const void *src, ctc_dtype dt, int64_t row) {
  for (int64_t v = 0; v < s->V; v++)
    s->lg[v] = dt == CTC_F32 ? ((const float *)src)[row * s->V + v] : ((const double *)src)[row * s->V + v];
}

/* The logits of the last position of the window ctx[max(0, n - S) .. n) into s->lg. */
static int next_logits(const ctc_model_desc *desc, Sampler *s, ctc_error *err) {
  int64_t w0 = s->n > s->S ? s->n - s->S : 0;
  const ctc_text_script *sc = desc->script;
  if (w0 && sc && sc->gen_where && !sc->sample_crop)
    return ctc_fail(err, CTC_ERR_SHAPE, "the script's generate (%s) runs forward on the whole context, never cropped "
                    "to block_size, and the compiled forward takes %lld tokens: the context has %lld (crop it in "
                    "generate, idx[:, -block_size:], or ask for fewer --tokens)", sc->gen_where, (long long)s->S,
                    (long long)s->n);
  if (s->dec) {
    if (w0 != s->w0) s->w0 = w0, s->filled = 0;   /* the window slid: recompute its cache */
    ctc_dtype it = s->dec->inputs[0].dtype;
    int64_t len = s->n - w0;
    if (s->pre && s->filled == 0 && len > 1) {   /* one call for the window's keys and values (right-padded) */
      memset(s->pin, 0, ctc_tensor_bytes(&s->pre->inputs[0]));
      for (int64_t j = 0; j < len; j++) put_int(s->pin, s->pre->inputs[0].dtype, j, s->ctx[w0 + j]);
      const void *pi[1] = {s->pin};
      int rc = s->pre->call(s->r.model, pi, NULL);
      if (rc) return ctc_drv_entry_failed(desc, s->r.model, s->pre, rc, "", err);
      s->filled = len - 1;   /* the last token goes through decode, for its logits */
    }
    while (s->filled < s->n - w0) {
      put_int(s->din[0], it, 0, s->ctx[w0 + s->filled]);
      s->pos = s->filled;
      int rc = s->dec->call(s->r.model, (const void *const *)s->din, (void *const *)&s->dout);
      if (rc) return ctc_drv_entry_failed(desc, s->r.model, s->dec, rc, "", err);
      s->filled++;
    }
    get_logits(s, s->dout, s->dec->outputs[0].dtype, 0);
    return CTC_OK;
  }
  const ctc_tensor *in = &s->fwd->inputs[0], *o = &s->fwd->outputs[0];
  int64_t T = in->shape[1], len = s->n - w0;
  memset(s->fin, 0, ctc_tensor_bytes(in));
  for (int64_t j = 0; j < len; j++) put_int(s->fin, in->dtype, j, s->ctx[w0 + j]);
  const void *fi[1] = {s->fin};
  int rc = ctc_entry_call(s->fwd, s->r.model, in->shape[0], fi, (void *const *)s->fout);
  if (rc) return ctc_drv_entry_failed(desc, s->r.model, s->fwd, rc, "", err);
  int64_t rows = ctc_tensor_numel(o) / s->V / in->shape[0];   /* T, or 1 (the last position only) */
  if (rows == 1 && len != T)
    return ctc_fail(err, CTC_ERR_SHAPE, "forward entry '%s' returns the logits of its last position only, and the "
                    "window (%lld tokens) is shorter than its %lld: sampling needs a decode entry or the logits of "
                    "every position", s->fwd->name, (long long)len, (long long)T);
  get_logits(s, s->fout[0], o->dtype, rows == 1 ? 0 : len - 1);
  return CTC_OK;
}

/* nanoGPT's step: logits / temperature, top-k, softmax, multinomial (u from the seed and step). */
static int64_t sample_token(Sampler *s, const SampleArgs *a, long long step) {
  double *l = s->lg;
  int64_t V = s->V, best = 0;
  for (int64_t v = 1; v < V; v++)
    if (l[v] > l[best]) best = v;
  if (a->top_k == 1) return best;
  for (int64_t v = 0; v < V; v++) l[v] /= a->temperature;
  if (a->top_k > 0 && a->top_k < V) {   /* the K-th largest value: everything below it is dropped */
    double *sorted = malloc((size_t)V * sizeof *sorted);
    if (sorted) {
      memcpy(sorted, l, (size_t)V * sizeof *sorted);
      for (int64_t k = 0; k < a->top_k; k++) {   /* partial selection sort, K small */
        int64_t m = k;
        for (int64_t v = k + 1; v < V; v++)
          if (sorted[v] > sorted[m]) m = v;
        double t = sorted[k];
        sorted[k] = sorted[m];
        sorted[m] = t;
      }
      double kth = sorted[a->top_k - 1];
      for (int64_t v = 0; v < V; v++)
        if (l[v] < kth) l[v] = -INFINITY;
      free(sorted);
    }
  }
  double mx = l[best], sum = 0;   /* the largest (kept by any top-k) */
  for (int64_t v = 0; v < V; v++) sum += l[v] = exp(l[v] - mx);
  uint64_t st = a->seed ^ ((uint64_t)step + 1) * 0xD1B54A32D192ED03ULL;
  double u = (double)(ctc_drv_splitmix64(&st) >> 11) * 0x1.0p-53 * sum, c = 0;
  for (int64_t v = 0; v < V; v++) {
    c += l[v];
    if (u < c && l[v] > 0) return v;
  }
  for (int64_t v = V - 1; v >= 0; v--)
    if (l[v] > 0) return v;
  return best;
}

static void emit_token(const Sampler *s, int32_t tok) {
  if (s->have_vocab && tok >= 0 && tok < s->vocab.n) {
    unsigned char o[4];
    fwrite(o, 1, utf8_put(o, (uint32_t)s->vocab.cp[tok]), stdout);
  } else {
    printf("%d ", (int)tok);
  }
  fflush(stdout);
}

static int push_token(Sampler *s, int32_t tok, ctc_error *err) {
  if (s->n == s->cap) {
    int64_t cap = s->cap ? 2 * s->cap : 256;
    int32_t *c = realloc(s->ctx, (size_t)cap * sizeof *c);
    if (!c) return ctc_fail(err, CTC_ERR_NOMEM, "out of memory");
    s->ctx = c;
    s->cap = cap;
  }
  s->ctx[s->n++] = tok;
  return CTC_OK;
}

static int sample_setup(const char *prog, const ctc_model_desc *desc, const SampleArgs *a, Sampler *s,
                        ctc_error *err) {
  for (int i = 0; i < desc->nentries; i++) {
    const ctc_entry *e = &desc->entries[i];
    if (!s->fwd && e->kind == CTC_ENTRY_FORWARD) s->fwd = e;
    if (!strcmp(e->name, "decode") && e->ninputs == 2 && e->noutputs == 1 && e->inputs[1].dtype == CTC_I64 &&
        ctc_tensor_numel(&e->inputs[0]) == 1 && ctc_tensor_numel(&e->inputs[1]) == 1)
      s->dec = e;
    if (!strcmp(e->name, "prefill") && e->ninputs == 1 && e->noutputs == 0 && e->inputs[0].ndim == 2 &&
        e->inputs[0].shape[0] == 1)
      s->pre = e;
  }
  const ctc_tensor *in = s->fwd && s->fwd->ninputs == 1 ? &s->fwd->inputs[0] : NULL;
  if (!in || in->ndim != 2 || (in->dtype != CTC_I64 && in->dtype != CTC_I32) || s->fwd->noutputs < 1)
    return ctc_fail(err, CTC_ERR_ARG, "sample needs a forward entry taking token windows [B, T] (integers)");
  const ctc_tensor *o = &s->fwd->outputs[0];
  s->S = in->shape[1];
  s->V = o->shape[o->ndim - 1];
  if (o->ndim < 2 || (o->dtype != CTC_F32 && o->dtype != CTC_F64))
    return ctc_fail(err, CTC_ERR_ARG, "sample needs a forward entry returning logits [B, T, V]");
  if (s->dec && ctc_tensor_numel(&s->dec->outputs[0]) != s->V) s->dec = NULL;
  if (!s->dec || (s->pre && s->pre->inputs[0].shape[1] != s->S)) s->pre = NULL;
  int rc;
  if ((rc = ctc_drv_make_model(desc, &s->r, err))) return rc;
  if (a->weights && (rc = ctc_model_load(desc, s->r.model, a->weights, err))) return rc;
  char vpath[4096];
  const char *vp = a->vocab;
  if (!vp && a->weights && ctc_vocab_path(a->weights, vpath, sizeof vpath)) {
    if (access(vpath, R_OK) == 0) vp = vpath; /* (a probe that never opens: a fifo there must not block) */
  }
  if (!vp && desc->script) {   /* a module-level training loop: the vocabulary of its text */
    if (!(s->vocab.cp = malloc((size_t)desc->script->nvocab * sizeof *s->vocab.cp)))
      return ctc_fail(err, CTC_ERR_NOMEM, "out of memory");
    memcpy(s->vocab.cp, desc->script->vocab, (size_t)desc->script->nvocab * sizeof *s->vocab.cp);
    s->vocab.n = desc->script->nvocab;
    vp = desc->script->where;
  }
  if (vp && !s->vocab.cp) {
    if ((rc = ctc_vocab_read(vp, &s->vocab, err))) return rc;
  }
  if (vp) {
    if (s->vocab.n > s->V)
      return ctc_fail(err, CTC_ERR_SHAPE, "%s has %d characters, more than the model's %lld logits", vp,
                      (int)s->vocab.n, (long long)s->V);
    s->have_vocab = 1;
  }
  if (!(s->lg = malloc((size_t)s->V * sizeof *s->lg))) return ctc_fail(err, CTC_ERR_NOMEM, "out of memory");
  if (s->dec) {
    s->din[0] = ctc_drv_alloc_aligned(CTC_DRV_IO_ALIGN, 8);
    s->din[1] = &s->pos;
    s->dout = ctc_drv_alloc_aligned(CTC_DRV_IO_ALIGN, ctc_tensor_bytes(&s->dec->outputs[0]));
    if (s->pre) s->pin = ctc_drv_alloc_aligned(CTC_DRV_IO_ALIGN, ctc_tensor_bytes(&s->pre->inputs[0]));
    if (!s->din[0] || !s->dout || (s->pre && !s->pin)) return ctc_fail(err, CTC_ERR_NOMEM, "out of memory");
    s->w0 = -1;
  } else {
    fprintf(stderr, "%s: note: this program has no KV-cache decode entry (ctc derives one when it recognises the "
            "model's attention as causal): re-running the window of %lld tokens for every token\n", prog,
            (long long)s->S);
    s->fin = ctc_drv_alloc_aligned(CTC_DRV_IO_ALIGN, ctc_tensor_bytes(in));
    if (!s->fin || (rc = ctc_drv_alloc_outputs(s->fwd, &s->fout, err))) return rc ? rc : CTC_ERR_NOMEM;
  }
  /* the prompt */
  if (a->prompt_tokens) {
    const char *p = a->prompt_tokens;
    while (*p) {
      char *end;
      long long v = strtoll(p, &end, 10);
      if (end == p || v < 0 || v >= s->V)
        return ctc_fail(err, CTC_ERR_ARG, "--prompt-tokens: '%s' is not a list of token ids in [0, %lld)",
                        a->prompt_tokens, (long long)s->V);
      if ((rc = push_token(s, (int32_t)v, err))) return rc;
      p = *end == ',' ? end + 1 : end;
      if (*end && *end != ',') return ctc_fail(err, CTC_ERR_ARG, "--prompt-tokens: ids are separated by commas");
    }
  } else if (a->prompt) {
    if (!s->have_vocab)
      return ctc_fail(err, CTC_ERR_ARG, "--prompt TEXT needs the vocabulary (--vocab V.txt, or %s beside the weights "
                      "as `train --text` writes it); or give --prompt-tokens", a->weights ? vpath : "W.vocab.txt");
    size_t n = strlen(a->prompt);
    for (size_t i = 0; i < n;) {
      int32_t c = utf8_next((const unsigned char *)a->prompt, n, &i);
      int32_t t = c < 0 ? -1 : ctc_vocab_index(&s->vocab, c);
      if (t < 0) return ctc_fail(err, CTC_ERR_ARG, "--prompt: character %zu is not in the vocabulary", i);
      if ((rc = push_token(s, t, err))) return rc;
    }
  }
  if (s->n == 0) {   /* nanoGPT's sample.py starts from "\n" */
    int32_t t = s->have_vocab ? ctc_vocab_index(&s->vocab, '\n') : 0;
    if ((rc = push_token(s, t < 0 ? 0 : t, err))) return rc;
  }
  return CTC_OK;
}

static int do_sample(const char *prog, const ctc_model_desc *desc, const SampleArgs *a, Sampler *s, ctc_error *err) {
  int rc = sample_setup(prog, desc, a, s, err);
  if (rc) return rc;
  float *keep = NULL;
  if (a->logits && !(keep = malloc((size_t)(a->tokens * s->V) * sizeof *keep)))
    return ctc_fail(err, CTC_ERR_NOMEM, "out of memory for --logits");
  for (int64_t i = 0; i < s->n; i++) emit_token(s, s->ctx[i]);
  double t0 = ctc_drv_now_ms();
  for (long long step = 0; step < a->tokens && rc == CTC_OK; step++) {
    if ((rc = next_logits(desc, s, err))) break;
    if (keep)
      for (int64_t v = 0; v < s->V; v++) keep[step * s->V + v] = (float)s->lg[v];
    int32_t tok = (int32_t)sample_token(s, a, step);
    if ((rc = push_token(s, tok, err))) break;
    emit_token(s, tok);
  }
  double ms = ctc_drv_now_ms() - t0;
  printf("\n");
  fflush(stdout);
  if (rc == CTC_OK && keep) {
    ctc_tensor t = {0};
    t.name = "logits";
    t.dtype = CTC_F32;
    t.ndim = 2;
    t.shape[0] = a->tokens;
    t.shape[1] = s->V;
    t.data = keep;
    rc = ctc_npy_write(a->logits, &t, err);
  }
  free(keep);
  if (rc == CTC_OK)
    fprintf(stderr, "%s: %lld tokens in %.3f s (%.1f tokens/s, %s)\n", prog, a->tokens, ms / 1e3,
            ms > 0 ? (double)a->tokens * 1e3 / ms : 0, s->dec ? "KV cache" : "re-running the window");
  return rc;
}

int ctc_drv_sample(const char *prog, const ctc_model_desc *desc, int argc, char **argv) {
  ctc_error err = {0, ""};
  SampleArgs a;
  Sampler s;
  memset(&s, 0, sizeof s);
  int rc = parse_sample_args(argc, argv, &a, &err);
  if (rc == CTC_OK) script_sample_defaults(desc, argc, argv, &a);
  if (rc == CTC_OK && a.help) {
    sample_usage(stdout, prog);
    return 0;
  }
  if (rc == CTC_OK) rc = do_sample(prog, desc, &a, &s, &err);
  sampler_free(&s);
  if (rc == CTC_OK) return 0;
  int status = ctc_drv_report(prog, &err);
  if (err.code == CTC_ERR_ARG) fprintf(stderr, "%s: try '%s sample --help'\n", prog, prog);
  return status;
}

/* ---- a script that trains at module level ------------------------------------------
 *
 *   ./net train [--text FILE] [--steps N] [--eval-interval K] [--eval-iters M] [--seed S]
 *               [--weights W] [--save OUT]
 *
 * runs the loop of the file (ctc_text_script): at each step `iter` (0-based), first,
 * when iter % K == 0 (or it is the last step and the loop says so), the evaluation:
 * the mean of the eval entry's loss over M windows of the training tokens, then of the
 * validation tokens, printed with the loop's own format; then B windows of the
 * training tokens (get_batch's, drawn as `train --text` draws them) through the
 * training entry. The tokens are those of the text ctc read at compile time, or of
 * --text FILE encoded with the same vocabulary (a character outside it is an error)
 * and split where the script split its own. */

typedef struct ScriptArgs {
  const char *text, *weights, *save;
  long long steps, eval_interval, eval_iters;
  unsigned long long seed;
  int help;
} ScriptArgs;

static void script_usage(FILE *f, const char *prog, const ctc_text_script *s) {
  fprintf(f,
          "usage: %s train [--text FILE] [--steps N] [--eval-interval K] [--eval-iters M] [--seed S]\n"
          "                [--weights W] [--save OUT.safetensors]\n"
          "\n"
          "Runs the training loop of %s: %lld steps of get_batch windows through '%s'",
          prog, s->where, (long long)s->steps, s->train_entry);
  if (s->eval_entry)
    fprintf(f, ", '%s' on %lld windows of each split every %lld steps", s->eval_entry, (long long)s->eval_iters,
            (long long)s->eval_interval);
  fprintf(f,
          ".\n\noptions:\n"
          "  --text FILE               train on this UTF-8 text (default: the text read at compile time, %lld\n"
          "                            tokens); its characters must be in the script's vocabulary (%d)\n"
          "  --steps N                 steps (default: the loop's)\n"
          "  --eval-interval K         evaluate every K steps (default: the loop's)\n"
          "  --eval-iters M            windows per split and evaluation (default: the script's)\n"
          "  --seed S                  the windows' stream and dropout's (default 0)\n"
          "  --weights W               start from these parameters\n"
          "  --save OUT                write the parameters, and the vocabulary beside them (OUT.vocab.txt)\n"
          "\n"
          "--data FILE or --tokens FILE.bin train as for any model (`%s train --data` ...).\n",
          (long long)(s->ntrain + s->nval), (int)s->nvocab, prog);
}

static int parse_script_args(int argc, char **argv, ScriptArgs *a, ctc_error *err) {
  memset(a, 0, sizeof *a);
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
      a->help = 1;
      continue;
    }
    static const char *const known[] = {"--text", "--weights", "--save", "--steps", "--eval-interval",
                                        "--eval-iters", "--seed", NULL};
    char name[32];
    const char *val;
    int rc = ctc_drv_option_value(argc, argv, &i, known, name, &val, err);
    if (rc) return rc;
    char *end;
    if (!strcmp(name, "--text")) a->text = val;
    else if (!strcmp(name, "--weights")) a->weights = val;
    else if (!strcmp(name, "--save")) a->save = val;
    else if (!strcmp(name, "--seed")) {
      a->seed = strtoull(val, &end, 10);
      if (*val < '0' || *val > '9' || *end) return ctc_fail(err, CTC_ERR_ARG, "--seed needs a non-negative integer");
    } else {
      long long v = strtoll(val, &end, 10);
      if (end == val || *end || v < 1 || v > (1LL << 40))
        return ctc_fail(err, CTC_ERR_ARG, "%s needs a positive integer, not '%s'", name, val);
      if (!strcmp(name, "--steps")) a->steps = v;
      else if (!strcmp(name, "--eval-interval")) a->eval_interval = v;
      else a->eval_iters = v;
    }
  }
  return CTC_OK;
}

/* Python's format spec of one field ([sign][width][.precision][type], type f e g d %)
 * applied to v; a float field without a spec prints as a 0-d tensor does. */
static void put_field(FILE *f, const char *spec, size_t len, double v, int is_int) {
  char fmt[48], sp[24];
  if (len >= sizeof sp) len = sizeof sp - 1;
  memcpy(sp, spec, len);
  sp[len] = 0;
  char type = len && strchr("fFeEgGd%", sp[len - 1]) ? sp[len - 1] : 0;
  if (type) sp[--len] = 0;
  for (size_t k = 0; k < len; k++)
    if (!strchr("+- 0123456789.", sp[k])) sp[0] = 0, len = 0;   /* fill, align, ',': not kept */
  if (type == '%') {
    snprintf(fmt, sizeof fmt, "%%%sf%%%%", sp);
    fprintf(f, fmt, v * 100);
  } else if (type == 'd' || (!type && is_int)) {
    snprintf(fmt, sizeof fmt, "%%%slld", sp);
    fprintf(f, fmt, (long long)v);
  } else if (!type && !len) {
    fprintf(f, "tensor(%.4f)", v);
  } else {
    snprintf(fmt, sizeof fmt, "%%%s%c", sp, type ? type : 'g');
    fprintf(f, fmt, v);
  }
}

static void put_format(FILE *f, const char *fmt, const double *vals) {
  for (const char *p = fmt; *p; p++) {
    if ((*p == '{' || *p == '}') && p[1] == *p) {
      fputc(*p++, f);
      continue;
    }
    if (*p != '{' || p[1] < '0' || p[1] > '2') {
      fputc(*p, f);
      continue;
    }
    int k = p[1] - '0';
    const char *close = strchr(p, '}');
    if (!close) break;
    const char *spec = p[2] == ':' ? p + 3 : close;
    put_field(f, spec, (size_t)(close - spec), vals[k], k == 0);
    p = close;
  }
  fputc('\n', f);
  fflush(f);
}

/* --text FILE encoded with the script's vocabulary. */
static int script_text(const char *path, const ctc_text_script *s, ctc_text *t, ctc_error *err) {
  int32_t *cp;
  int64_t n;
  int rc = read_utf8(path, &cp, &n, err);
  if (rc) return rc;
  ctc_vocab v = {(int32_t *)s->vocab, s->nvocab};
  for (int64_t i = 0; i < n; i++) {
    int32_t tok = ctc_vocab_index(&v, cp[i]);
    if (tok < 0) {
      unsigned char o[5] = {0};
      utf8_put(o, (uint32_t)cp[i]);
      rc = ctc_fail(err, CTC_ERR_FORMAT, "%s: character %lld ('%s', U+%04X) is not in the vocabulary (the %d characters of "
                    "the text the script read at compile time, its loop at %s): the model has no token for it", path,
                    (long long)i, cp[i] == '\n' ? "\\n" : (const char *)o, (unsigned)cp[i], (int)s->nvocab, s->where);
      free(cp);
      return rc;
    }
    cp[i] = tok;
  }
  t->tok = cp;
  t->n = n;
  return CTC_OK;
}

typedef struct ScriptRun {
  ctc_drv_run r;
  const ctc_entry *tr, *ev;
  void *x, *y, *it, *loss;
  ctc_text all;            /* --text: the whole text (tr and va point into it) */
  ctc_text tr_tok, va_tok;
} ScriptRun;

static void script_run_free(ScriptRun *s) {
  ctc_drv_run_free(&s->r);
  free(s->x);
  free(s->y);
  free(s->it);
  free(s->loss);
  ctc_text_free(&s->all);
}

static const ctc_entry *entry_named(const ctc_model_desc *desc, const char *name) {
  for (int i = 0; name && i < desc->nentries; i++)
    if (!strcmp(desc->entries[i].name, name)) return &desc->entries[i];
  return NULL;
}

/* The mean loss of the eval entry over M windows of one split. */
static int script_eval(const ctc_model_desc *desc, ScriptRun *s, const ctc_text *t, uint64_t base, long long M,
                       double *mean, ctc_error *err) {
  const ctc_tensor *in = &s->ev->inputs[0];
  double sum = 0;
  for (long long k = 0; k < M; k++) {
    ctc_text_windows(t, in->shape[1], CTC_TEXT_VAL_STATE(base, k), in->shape[0], in->dtype, s->x, s->y);
    const void *ins[2] = {s->x, s->y};
    void *outs[1] = {s->loss};
    int rc = s->ev->call(s->r.model, ins, outs);
    if (rc) return ctc_drv_entry_failed(desc, s->r.model, s->ev, rc, "", err);
    sum += s->ev->outputs[0].dtype == CTC_F64 ? *(double *)s->loss : *(float *)s->loss;
  }
  *mean = sum / (double)M;
  return CTC_OK;
}

static int do_script_train(const char *prog, const ctc_model_desc *desc, const ScriptArgs *a, ScriptRun *s,
                           ctc_error *err) {
  const ctc_text_script *sc = desc->script;
  s->tr = entry_named(desc, sc->train_entry);
  s->ev = entry_named(desc, sc->eval_entry);
  if (!s->tr || s->tr->ninputs < 2 || s->tr->inputs[0].ndim != 2 || s->tr->noutputs < 1)
    return ctc_fail(err, CTC_ERR_ARG, "this program has no training entry '%s' taking windows [B, T]",
                    sc->train_entry);
  const ctc_tensor *in = &s->tr->inputs[0];
  int64_t B = in->shape[0], T = in->shape[1];
  long long steps = a->steps ? a->steps : sc->steps;
  long long K = a->eval_interval ? a->eval_interval : sc->eval_interval, M = a->eval_iters ? a->eval_iters : sc->eval_iters;
  if (a->text) {
    int rc = script_text(a->text, sc, &s->all, err);
    if (rc) return rc;
    int64_t ntr = (int64_t)(sc->train_fraction * (double)s->all.n);
    s->tr_tok.tok = s->all.tok, s->tr_tok.n = ntr;
    s->va_tok.tok = s->all.tok + ntr, s->va_tok.n = s->all.n - ntr;
  } else {
    s->tr_tok.tok = (int32_t *)sc->train, s->tr_tok.n = sc->ntrain;
    s->va_tok.tok = (int32_t *)sc->val, s->va_tok.n = sc->nval;
  }
  const char *src = a->text ? a->text : "the text compiled in";
  if (s->tr_tok.n <= T)
    return ctc_fail(err, CTC_ERR_SHAPE, "%s: the training part has %lld tokens; windows of %lld need more",
                    src, (long long)s->tr_tok.n, (long long)T);
  if (s->ev && s->va_tok.n <= s->ev->inputs[0].shape[1])
    return ctc_fail(err, CTC_ERR_SHAPE, "%s: the validation part has %lld tokens; windows of %lld need more "
                    "(get_batch('val') would fail)", src, (long long)s->va_tok.n,
                    (long long)s->ev->inputs[0].shape[1]);
  int rc;
  if ((rc = ctc_drv_make_model(desc, &s->r, err))) return rc;
  if (a->weights && (rc = ctc_model_load(desc, s->r.model, a->weights, err))) return rc;
  ctc_drv_seed_rng(desc, s->r.model, a->seed);
  size_t wb = ctc_tensor_bytes(in);
  if (s->ev && ctc_tensor_bytes(&s->ev->inputs[0]) > wb) wb = ctc_tensor_bytes(&s->ev->inputs[0]);
  s->x = ctc_drv_alloc_aligned(CTC_DRV_IO_ALIGN, wb);
  s->y = ctc_drv_alloc_aligned(CTC_DRV_IO_ALIGN, wb);
  s->it = ctc_drv_alloc_aligned(CTC_DRV_IO_ALIGN, 8);
  s->loss = ctc_drv_alloc_aligned(CTC_DRV_IO_ALIGN, 64);
  if (!s->x || !s->y || !s->it || !s->loss) return ctc_fail(err, CTC_ERR_NOMEM, "out of memory");
  void **outs = NULL;
  if ((rc = ctc_drv_alloc_outputs(s->tr, &outs, err))) return rc;
  double t0 = ctc_drv_now_ms(), last = 0;
  for (long long it = 0; it < steps && rc == CTC_OK; it++) {
    if (s->ev && (it % K == 0 || (sc->eval_last && it == steps - 1))) {
      double v[3] = {(double)it, 0, 0};
      uint64_t base = a->seed ^ ((uint64_t)it + 1) * 0x9E3779B97F4A7C15ULL;
      if ((rc = script_eval(desc, s, &s->tr_tok, base, M, &v[1], err)) ||
          (rc = script_eval(desc, s, &s->va_tok, ~base, M, &v[2], err)))
        break;
      put_format(stdout, sc->eval_format, v);
    }
    ctc_text_windows(&s->tr_tok, T, CTC_TEXT_TRAIN_STATE(a->seed, it), B, in->dtype, s->x, s->y);
    const void *ins[3] = {s->x, s->y, s->it};
    if (s->tr->ninputs >= 3) {   /* the loop variable */
      if (s->tr->inputs[2].dtype == CTC_I64) *(int64_t *)s->it = it;
      else if (s->tr->inputs[2].dtype == CTC_I32) *(int32_t *)s->it = (int32_t)it;
      else if (s->tr->inputs[2].dtype == CTC_F64) *(double *)s->it = (double)it;
      else *(float *)s->it = (float)it;
    }
    rc = s->tr->call(s->r.model, ins, outs);
    if (rc) {
      char when[64];
      snprintf(when, sizeof when, " at step %lld", it);
      rc = ctc_drv_entry_failed(desc, s->r.model, s->tr, rc, when, err);
      break;
    }
    last = s->tr->outputs[0].dtype == CTC_F64 ? *(double *)outs[0] : *(float *)outs[0];
  }
  for (int j = 0; outs && j < s->tr->noutputs; j++) free(outs[j]);
  free(outs);
  if (rc) return rc;
  double ms = ctc_drv_now_ms() - t0;
  fprintf(stderr, "%s: %lld steps in %.1f s (%.0f tokens/s), last loss %.4f\n", prog, steps, ms / 1e3,
          ms > 0 ? (double)(steps * B * T) * 1e3 / ms : 0, last);
  if (a->save) {
    if ((rc = ctc_model_save(desc, s->r.model, a->save, err))) return rc;
    char vpath[4096];
    ctc_vocab v = {(int32_t *)sc->vocab, sc->nvocab};
    if (!ctc_vocab_path(a->save, vpath, sizeof vpath)) return ctc_fail(err, CTC_ERR_ARG, "--save: path too long");
    if ((rc = ctc_vocab_write(vpath, &v, err))) return rc;
  }
  return CTC_OK;
}

int ctc_drv_script_train(const char *prog, const ctc_model_desc *desc, int argc, char **argv) {
  for (int i = 0; i < argc; i++)   /* other data: `train` as for any model */
    if (!strncmp(argv[i], "--data", 6) || !strncmp(argv[i], "--tokens", 8)) return ctc_drv_train(prog, desc, argc, argv);
  ctc_error err = {0, ""};
  ScriptArgs a;
  ScriptRun s;
  memset(&s, 0, sizeof s);
  int rc = parse_script_args(argc, argv, &a, &err);
  if (rc == CTC_OK && a.help) {
    script_usage(stdout, prog, desc->script);
    return 0;
  }
  if (rc == CTC_OK) rc = do_script_train(prog, desc, &a, &s, &err);
  script_run_free(&s);
  if (rc == CTC_OK) return 0;
  int status = ctc_drv_report(prog, &err);
  if (err.code == CTC_ERR_ARG) fprintf(stderr, "%s: try '%s train --help'\n", prog, prog);
  return status;
}
