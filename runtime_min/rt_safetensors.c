/* rt_safetensors.c - reading and writing safetensors files.
 *
 * Format: an 8-byte little-endian u64 N, N bytes of JSON header, then the data
 * buffer. The header maps tensor names to
 *     {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}
 * (offsets relative to the start of the data buffer), plus an optional
 * "__metadata__" object that is checked for well-formedness and skipped.
 *
 * The reader holds the whole file in memory. Its JSON parser is small and
 * strict (RFC 8259 syntax, valid UTF-8, \uXXXX escapes with surrogate pairs)
 * and never reads past the N header bytes. Strings are decoded in place inside
 * the file buffer, so tensor names point into st->buf. Every tensor is checked
 * before it is exposed: supported dtype, at most CTC_MAX_DIMS non-negative dims,
 * no overflow in the size, begin <= end <= data size, end - begin == the size
 * implied by dtype and shape, BOOL bytes 0/1, and no duplicate names.
 * Every problem is CTC_ERR_FORMAT with a specific message (CTC_ERR_DTYPE for a
 * well-formed dtype that ctc does not support).
 *
 * Tensor data inside the buffer is not necessarily aligned for its type:
 * consumers copy it out with memcpy (as ctc_model_load does).
 *
 * The writer emits tensors in the given order with contiguous data and pads the
 * header with spaces to a multiple of 8 bytes, as the reference implementation does. */
#include "ctc_rt.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- dtype names ---------------------------------------------------------- */

static const char *const st_dtype_names[CTC_DTYPE_COUNT] = {
    [CTC_F32] = "F32", [CTC_F64] = "F64", [CTC_I64] = "I64",
    [CTC_I32] = "I32", [CTC_BOOL] = "BOOL", [CTC_U8] = "U8", [CTC_BF16] = "BF16", [CTC_F16] = "F16",
};

static int st_dtype_from_name(const char *s, ctc_dtype *out) {
  for (int i = 0; i < CTC_DTYPE_COUNT; i++)
    if (strcmp(s, st_dtype_names[i]) == 0) {
      *out = (ctc_dtype)i;
      return 1;
    }
  return 0;
}

/* ---- UTF-8 ---------------------------------------------------------------- */

/* Length of the valid UTF-8 sequence at s[0..n), or 0 if it is invalid
 * (bad lead byte, truncated, overlong, surrogate or above U+10FFFF). */
static size_t utf8_seq_len(const unsigned char *s, size_t n) {
  unsigned char c = s[0];
  size_t len;
  uint32_t cp;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) { len = 2; cp = c & 0x1F; }
  else if (c >= 0xE0 && c <= 0xEF) { len = 3; cp = c & 0x0F; }
  else if (c >= 0xF0 && c <= 0xF4) { len = 4; cp = c & 0x07; }
  else return 0;
  if (len > n) return 0;
  for (size_t k = 1; k < len; k++) {
    if ((s[k] & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (s[k] & 0x3F);
  }
  if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000)) return 0; /* overlong */
  if ((cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return 0;
  return len;
}

static size_t utf8_encode(uint32_t cp, char *out) {
  if (cp < 0x80) { out[0] = (char)cp; return 1; }
  if (cp < 0x800) {
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = (char)(0xE0 | (cp >> 12));
    out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
  }
  out[0] = (char)(0xF0 | (cp >> 18));
  out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
  out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
  out[3] = (char)(0x80 | (cp & 0x3F));
  return 4;
}

/* ---- a strict JSON parser over the header bytes -------------------------- */

#define JSON_MAX_DEPTH 64

typedef struct Json {
  char *s;          /* the header (mutable: strings are decoded in place) */
  size_t n, i;      /* length and read position; s[i] is valid only if i < n */
  ctc_error *err;
} Json;

/* A syntax error at the current position (reported as an offset in the file). */
static int json_fail(Json *j, const char *what) {
  return ctc_fail(j->err, CTC_ERR_FORMAT, "header is not valid JSON at byte %zu: %s",
                  j->i + 8, what);
}

static int json_peek(const Json *j) { return j->i < j->n ? (unsigned char)j->s[j->i] : -1; }

static void json_ws(Json *j) {
  while (j->i < j->n) {
    char c = j->s[j->i];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
    j->i++;
  }
}

static int json_expect(Json *j, char c, const char *what) {
  json_ws(j);
  if (json_peek(j) != (unsigned char)c) return json_fail(j, what);
  j->i++;
  return CTC_OK;
}

static int hex4(const Json *j, size_t at, uint32_t *out) {
  if (at > j->n || j->n - at < 4) return 0;
  uint32_t v = 0;
  for (size_t k = 0; k < 4; k++) {
    char c = j->s[at + k];
    v <<= 4;
    if (c >= '0' && c <= '9') v |= (uint32_t)(c - '0');
    else if (c >= 'a' && c <= 'f') v |= (uint32_t)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') v |= (uint32_t)(c - 'A' + 10);
    else return 0;
  }
  *out = v;
  return 1;
}

/* Parses a string at the current position. With out != NULL it is decoded in
 * place (the decoded form is never longer than the source) and NUL-terminated
 * where the closing quote was; a string with \u0000 is then refused, naming it
 * (escaped): names are C strings from here on. */
static int json_string(Json *j, char **out) {
  json_ws(j);
  if (json_peek(j) != '"') return json_fail(j, "expected a string");
  size_t start = ++j->i, w = start;
  int nul = 0;
  for (;;) {
    if (j->i >= j->n) return json_fail(j, "unterminated string");
    unsigned char c = (unsigned char)j->s[j->i];
    if (c == '"' && out && nul) { /* names are C strings: refused, with the whole name */
      char esc[256];
      ctc_escape_name(esc, sizeof esc, j->s + start, w - start);
      return ctc_fail(j->err, CTC_ERR_FORMAT, "tensor name '%s' contains a NUL byte, which ctc does not support in names",
                      esc);
    }
    if (c == '"') {
      if (out) {
        j->s[w] = '\0';
        *out = j->s + start;
      }
      j->i++;
      return CTC_OK;
    }
    if (c < 0x20) return json_fail(j, "control character in string");
    if (c != '\\') {
      size_t len = utf8_seq_len((const unsigned char *)j->s + j->i, j->n - j->i);
      if (len == 0) return json_fail(j, "invalid UTF-8 in string");
      if (out) memmove(j->s + w, j->s + j->i, len);
      w += len;
      j->i += len;
      continue;
    }
    if (j->i + 1 >= j->n) return json_fail(j, "unterminated string");
    char e = j->s[j->i + 1], plain = 0;
    switch (e) {
      case '"': plain = '"'; break;
      case '\\': plain = '\\'; break;
      case '/': plain = '/'; break;
      case 'b': plain = '\b'; break;
      case 'f': plain = '\f'; break;
      case 'n': plain = '\n'; break;
      case 'r': plain = '\r'; break;
      case 't': plain = '\t'; break;
      case 'u': break;
      default: return json_fail(j, "invalid escape in string");
    }
    if (e != 'u') {
      if (out) j->s[w] = plain;
      w++;
      j->i += 2;
      continue;
    }
    uint32_t cp, lo;
    if (!hex4(j, j->i + 2, &cp)) return json_fail(j, "invalid \\u escape");
    j->i += 6;
    if (cp >= 0xDC00 && cp <= 0xDFFF) return json_fail(j, "unpaired surrogate in \\u escape");
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      if (j->i + 1 >= j->n || j->s[j->i] != '\\' || j->s[j->i + 1] != 'u' ||
          !hex4(j, j->i + 2, &lo) || lo < 0xDC00 || lo > 0xDFFF)
        return json_fail(j, "unpaired surrogate in \\u escape");
      j->i += 6;
      cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    }
    nul |= cp == 0;
    char tmp[4];
    size_t len = utf8_encode(cp, tmp);
    if (out) memcpy(j->s + w, tmp, len);
    w += len;
  }
}

static int is_digit(int c) { return c >= '0' && c <= '9'; }

/* An integer (no fraction or exponent) that fits in int64_t. */
static int json_int(Json *j, int64_t *v) {
  json_ws(j);
  int neg = 0;
  if (json_peek(j) == '-') {
    neg = 1;
    j->i++;
  }
  if (!is_digit(json_peek(j))) return json_fail(j, "expected an integer");
  if (json_peek(j) == '0' && j->i + 1 < j->n && is_digit((unsigned char)j->s[j->i + 1]))
    return json_fail(j, "leading zero in number");
  uint64_t mag = 0;
  while (is_digit(json_peek(j))) {
    unsigned d = (unsigned)(j->s[j->i] - '0');
    if (mag > ((uint64_t)INT64_MAX + 1 - d) / 10) return json_fail(j, "integer is too large");
    mag = mag * 10 + d;
    j->i++;
  }
  int c = json_peek(j);
  if (c == '.' || c == 'e' || c == 'E') return json_fail(j, "expected an integer, not a fraction");
  if (!neg && mag > (uint64_t)INT64_MAX) return json_fail(j, "integer is too large");
  *v = neg ? (mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag) : (int64_t)mag;
  return CTC_OK;
}

/* Any JSON number, only checked for syntax. */
static int json_skip_number(Json *j) {
  if (json_peek(j) == '-') j->i++;
  if (!is_digit(json_peek(j))) return json_fail(j, "invalid number");
  if (json_peek(j) == '0') j->i++;
  else
    while (is_digit(json_peek(j))) j->i++;
  if (json_peek(j) == '.') {
    j->i++;
    if (!is_digit(json_peek(j))) return json_fail(j, "invalid number");
    while (is_digit(json_peek(j))) j->i++;
  }
  if (json_peek(j) == 'e' || json_peek(j) == 'E') {
    j->i++;
    if (json_peek(j) == '+' || json_peek(j) == '-') j->i++;
    if (!is_digit(json_peek(j))) return json_fail(j, "invalid number");
    while (is_digit(json_peek(j))) j->i++;
  }
  return CTC_OK;
}

static int json_skip_literal(Json *j, const char *lit) {
  size_t len = strlen(lit);
  if (j->n - j->i < len || memcmp(j->s + j->i, lit, len) != 0) return json_fail(j, "invalid value");
  j->i += len;
  return CTC_OK;
}

/* Skips any value (used for __metadata__ and unknown fields). */
static int json_skip_value(Json *j, int depth) {
  if (depth > JSON_MAX_DEPTH) return json_fail(j, "nested too deeply");
  json_ws(j);
  int c = json_peek(j), rc;
  if (c == '"') return json_string(j, NULL);
  if (c == '-' || is_digit(c)) return json_skip_number(j);
  if (c == 't') return json_skip_literal(j, "true");
  if (c == 'f') return json_skip_literal(j, "false");
  if (c == 'n') return json_skip_literal(j, "null");
  if (c != '{' && c != '[') return json_fail(j, "expected a value");
  char close = c == '{' ? '}' : ']';
  j->i++;
  json_ws(j);
  if (json_peek(j) == (unsigned char)close) {
    j->i++;
    return CTC_OK;
  }
  for (;;) {
    if (close == '}') {
      if ((rc = json_string(j, NULL)) || (rc = json_expect(j, ':', "expected ':'"))) return rc;
    }
    if ((rc = json_skip_value(j, depth + 1))) return rc;
    json_ws(j);
    c = json_peek(j);
    if (c == (unsigned char)close) {
      j->i++;
      return CTC_OK;
    }
    if (c != ',') return json_fail(j, close == '}' ? "expected ',' or '}'" : "expected ',' or ']'");
    j->i++;
  }
}

/* An array of at most max integers; *count receives how many there were.
 * Returns -1 (with no error set) when there are more than max. */
static int json_int_array(Json *j, int64_t *vals, int max, int *count) {
  int rc;
  *count = 0;
  if ((rc = json_expect(j, '[', "expected '['"))) return rc;
  json_ws(j);
  if (json_peek(j) == ']') {
    j->i++;
    return CTC_OK;
  }
  for (;;) {
    int64_t v = 0;
    if ((rc = json_int(j, &v))) return rc;
    if (*count == max) return -1;
    vals[(*count)++] = v;
    json_ws(j);
    if (json_peek(j) == ']') {
      j->i++;
      return CTC_OK;
    }
    if (json_peek(j) != ',') return json_fail(j, "expected ',' or ']'");
    j->i++;
  }
}

/* ---- tensor entries ------------------------------------------------------ */

/* Parses {"dtype": ..., "shape": [...], "data_offsets": [b, e]} for tensor
 * `name` and validates it against the data buffer [data, data + data_len). */
static int parse_tensor(Json *j, const char *name, char *data, size_t data_len, ctc_tensor *t,
                        ctc_error *err) {
  int rc, have_dtype = 0, have_shape = 0, have_offsets = 0, n;
  char *dtype = NULL;
  int64_t off[2] = {0, 0};
  memset(t, 0, sizeof *t);
  t->name = name;

  json_ws(j);
  if (json_peek(j) != '{')
    return ctc_fail(err, CTC_ERR_FORMAT, "tensor '%s': expected an object with dtype, shape and data_offsets", name);
  j->i++;
  json_ws(j);
  if (json_peek(j) == '}') j->i++;
  else
    for (;;) {
      char *key;
      if ((rc = json_string(j, &key)) || (rc = json_expect(j, ':', "expected ':'"))) return rc;
      if (strcmp(key, "dtype") == 0) {
        if (have_dtype++) return ctc_fail(err, CTC_ERR_FORMAT, "tensor '%s' has two \"dtype\" fields", name);
        if ((rc = json_string(j, &dtype))) return rc;
      } else if (strcmp(key, "shape") == 0) {
        if (have_shape++) return ctc_fail(err, CTC_ERR_FORMAT, "tensor '%s' has two \"shape\" fields", name);
        rc = json_int_array(j, t->shape, CTC_MAX_DIMS, &t->ndim);
        if (rc < 0)
          return ctc_fail(err, CTC_ERR_FORMAT, "tensor '%s' has more than %d dimensions", name, CTC_MAX_DIMS);
        if (rc) return rc;
      } else if (strcmp(key, "data_offsets") == 0) {
        if (have_offsets++)
          return ctc_fail(err, CTC_ERR_FORMAT, "tensor '%s' has two \"data_offsets\" fields", name);
        rc = json_int_array(j, off, 2, &n);
        if (rc > 0) return rc;
        if (rc < 0 || n != 2)
          return ctc_fail(err, CTC_ERR_FORMAT, "tensor '%s': data_offsets must be [begin, end]", name);
      } else if ((rc = json_skip_value(j, 1))) {
        return rc; /* unknown fields are allowed and ignored */
      }
      json_ws(j);
      if (json_peek(j) == '}') {
        j->i++;
        break;
      }
      if (json_peek(j) != ',') return json_fail(j, "expected ',' or '}'");
      j->i++;
    }

  if (!have_dtype) return ctc_fail(err, CTC_ERR_FORMAT, "tensor '%s' has no \"dtype\"", name);
  if (!have_shape) return ctc_fail(err, CTC_ERR_FORMAT, "tensor '%s' has no \"shape\"", name);
  if (!have_offsets) return ctc_fail(err, CTC_ERR_FORMAT, "tensor '%s' has no \"data_offsets\"", name);
  if (!strcmp(dtype, "C64")) {   /* complex64: its float32 parts, a trailing dimension of 2 */
    if (t->ndim + 1 > CTC_MAX_DIMS)
      return ctc_fail(err, CTC_ERR_FORMAT, "tensor '%s': a complex64 tensor of %d dimensions is more than ctc's %d "
                      "as float32 parts", name, t->ndim, CTC_MAX_DIMS - 1);
    t->dtype = CTC_F32;
    t->shape[t->ndim++] = 2;
    t->complex64 = 1;
  } else if (!st_dtype_from_name(dtype, &t->dtype))
    return ctc_fail(err, CTC_ERR_DTYPE,
                    "tensor '%s' has dtype \"%s\", which ctc does not support (F32, F64, BF16, F16, I64, I32, BOOL, U8, C64)",
                    name, dtype);
  for (int d = 0; d < t->ndim; d++)
    if (t->shape[d] < 0)
      return ctc_fail(err, CTC_ERR_FORMAT, "tensor '%s' has a negative dimension (%lld)", name,
                      (long long)t->shape[d]);
  char sh[128];
  ctc_format_shape(sh, sizeof sh, t->ndim, t->shape);
  size_t bytes = ctc_tensor_bytes(t);
  if (bytes == SIZE_MAX)
    return ctc_fail(err, CTC_ERR_FORMAT, "tensor '%s': shape %s is too large (size overflows)", name, sh);
  if (off[0] < 0 || off[1] < 0)
    return ctc_fail(err, CTC_ERR_FORMAT, "tensor '%s' has negative data_offsets [%lld, %lld]", name,
                    (long long)off[0], (long long)off[1]);
  if (off[1] < off[0])
    return ctc_fail(err, CTC_ERR_FORMAT, "tensor '%s': data_offsets [%lld, %lld] end before they begin",
                    name, (long long)off[0], (long long)off[1]);
  if ((uint64_t)off[1] > data_len)
    return ctc_fail(err, CTC_ERR_FORMAT,
                    "tensor '%s': data_offsets end %lld is beyond the end of the data (%zu bytes)", name,
                    (long long)off[1], data_len);
  size_t span = (size_t)(off[1] - off[0]);
  if (span != bytes)
    return ctc_fail(err, CTC_ERR_FORMAT,
                    "tensor '%s': data_offsets [%lld, %lld] hold %zu bytes, but %s %s needs %zu", name,
                    (long long)off[0], (long long)off[1], span, ctc_dtype_name(t->dtype), sh, bytes);
  t->offset = (size_t)off[0];
  t->data = data + off[0];
  if (t->dtype == CTC_BOOL) {
    const unsigned char *b = t->data;
    for (size_t k = 0; k < bytes; k++)
      if (b[k] > 1)
        return ctc_fail(err, CTC_ERR_FORMAT, "tensor '%s': BOOL data contains a byte other than 0 or 1", name);
  }
  return CTC_OK;
}

/* Duplicate names: sort pointers by name and compare neighbours. */
static int cmp_tensor_name(const void *a, const void *b) {
  const ctc_tensor *x = *(const ctc_tensor *const *)a, *y = *(const ctc_tensor *const *)b;
  return strcmp(x->name, y->name);
}

static int check_duplicates(int n, const ctc_tensor *ts, ctc_error *err, int code) {
  if (n < 2) return CTC_OK;
  const ctc_tensor **p = malloc((size_t)n * sizeof *p);
  if (!p) return ctc_fail(err, CTC_ERR_NOMEM, "out of memory");
  for (int i = 0; i < n; i++) p[i] = &ts[i];
  qsort(p, (size_t)n, sizeof *p, cmp_tensor_name);
  int rc = CTC_OK;
  for (int i = 1; i < n && rc == CTC_OK; i++)
    if (strcmp(p[i - 1]->name, p[i]->name) == 0)
      rc = ctc_fail(err, code, "duplicate tensor name '%s'", p[i]->name);
  free(p);
  return rc;
}

/* ---- reading ------------------------------------------------------------- */

static int parse_header(ctc_safetensors *st, char *hdr, size_t hlen, char *data, size_t data_len,
                        ctc_error *err) {
  Json j = {hdr, hlen, 0, err};
  int rc, have_meta = 0, cap = 0;
  if ((rc = json_expect(&j, '{', "expected '{' at the start of the header"))) return rc;
  json_ws(&j);
  if (json_peek(&j) == '}') j.i++;
  else
    for (;;) {
      char *name;
      if ((rc = json_string(&j, &name)) || (rc = json_expect(&j, ':', "expected ':'"))) return rc;
      if (strcmp(name, "__metadata__") == 0) {
        if (have_meta++) return ctc_fail(err, CTC_ERR_FORMAT, "header has two \"__metadata__\" entries");
        json_ws(&j);
        if (json_peek(&j) != '{') return json_fail(&j, "\"__metadata__\" must be an object");
        if ((rc = json_skip_value(&j, 1))) return rc;
      } else {
        if (st->ntensors == cap) {
          if (cap > INT32_MAX / 2) return ctc_fail(err, CTC_ERR_FORMAT, "too many tensors");
          int ncap = cap ? cap * 2 : 16;
          ctc_tensor *nt = realloc(st->tensors, (size_t)ncap * sizeof *nt);
          if (!nt) return ctc_fail(err, CTC_ERR_NOMEM, "out of memory reading the header");
          st->tensors = nt;
          cap = ncap;
        }
        if ((rc = parse_tensor(&j, name, data, data_len, &st->tensors[st->ntensors], err))) return rc;
        st->ntensors++;
      }
      json_ws(&j);
      if (json_peek(&j) == '}') {
        j.i++;
        break;
      }
      if (json_peek(&j) != ',') return json_fail(&j, "expected ',' or '}'");
      j.i++;
    }
  json_ws(&j);
  if (j.i != j.n) return json_fail(&j, "unexpected characters after the header object");
  return check_duplicates(st->ntensors, st->tensors, err, CTC_ERR_FORMAT);
}

int ctc_st_parse(ctc_safetensors *st, void *buf, size_t size, ctc_error *err) {
  if (!st) {
    free(buf);
    return ctc_fail(err, CTC_ERR_ARG, "ctc_st_parse: NULL argument");
  }
  memset(st, 0, sizeof *st);
  if (!buf && size) return ctc_fail(err, CTC_ERR_ARG, "ctc_st_parse: NULL buffer");
  const unsigned char *b = buf;
  int rc;
  if (size < 8) {
    rc = ctc_fail(err, CTC_ERR_FORMAT, "file is too short (%zu bytes) to be safetensors", size);
  } else {
    uint64_t hlen = 0;
    for (int k = 7; k >= 0; k--) hlen = (hlen << 8) | b[k];
    if (hlen > size - 8) {
      rc = ctc_fail(err, CTC_ERR_FORMAT,
                    "header length %llu is larger than the rest of the file (%zu bytes)",
                    (unsigned long long)hlen, size - 8);
    } else {
      char *hdr = (char *)buf + 8;
      rc = parse_header(st, hdr, (size_t)hlen, hdr + hlen, size - 8 - (size_t)hlen, err);
    }
  }
  if (rc != CTC_OK) {
    free(st->tensors);
    free(buf);
    memset(st, 0, sizeof *st);
    return rc;
  }
  st->buf = buf;
  st->size = size;
  return CTC_OK;
}

int ctc_st_read(ctc_safetensors *st, const char *path, ctc_error *err) {
  void *buf;
  size_t size;
  if (st) memset(st, 0, sizeof *st);
  int rc = ctc_read_file(path, &buf, &size, err);
  if (rc) return rc;
  rc = ctc_st_parse(st, buf, size, err);
  if (rc) ctc_error_prefix(err, path);
  return rc;
}

const ctc_tensor *ctc_st_find(const ctc_safetensors *st, const char *name) {
  if (!st || !name) return NULL;
  for (int i = 0; i < st->ntensors; i++)
    if (strcmp(st->tensors[i].name, name) == 0) return &st->tensors[i];
  return NULL;
}

void ctc_st_free(ctc_safetensors *st) {
  if (!st) return;
  free(st->tensors);
  free(st->buf);
  memset(st, 0, sizeof *st);
}

/* ---- writing -------------------------------------------------------------- */

/* A growable string for the header; `failed` records an allocation failure. */
typedef struct StrBuf {
  char *s;
  size_t len, cap;
  int failed;
} StrBuf;

static void sb_add(StrBuf *b, const char *s, size_t n) {
  if (b->failed) return;
  if (n > SIZE_MAX - b->len - 1) {
    b->failed = 1;
    return;
  }
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n + 1) cap = cap > SIZE_MAX / 2 ? b->len + n + 1 : cap * 2;
    char *ns = realloc(b->s, cap);
    if (!ns) {
      b->failed = 1;
      return;
    }
    b->s = ns;
    b->cap = cap;
  }
  memcpy(b->s + b->len, s, n);
  b->len += n;
  b->s[b->len] = '\0';
}

static void sb_puts(StrBuf *b, const char *s) { sb_add(b, s, strlen(s)); }

static void sb_json_string(StrBuf *b, const char *s) {
  sb_puts(b, "\"");
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    char esc[8];
    if (c == '"' || c == '\\') {
      esc[0] = '\\';
      esc[1] = (char)c;
      sb_add(b, esc, 2);
    } else if (c < 0x20) {
      snprintf(esc, sizeof esc, "\\u%04x", c);
      sb_add(b, esc, 6);
    } else {
      sb_add(b, s, 1);
    }
  }
  sb_puts(b, "\"");
}

/* Checks one tensor to be written; returns its byte size through *bytes. */
static int check_write_tensor(const ctc_tensor *t, size_t *bytes, ctc_error *err) {
  if (!t->name) return ctc_fail(err, CTC_ERR_ARG, "tensor without a name");
  for (size_t k = 0, n = strlen(t->name); k < n;) {
    size_t len = utf8_seq_len((const unsigned char *)t->name + k, n - k);
    if (!len) return ctc_fail(err, CTC_ERR_ARG, "tensor name '%s' is not valid UTF-8", t->name);
    k += len;
  }
  if ((unsigned)t->dtype >= CTC_DTYPE_COUNT)
    return ctc_fail(err, CTC_ERR_ARG, "tensor '%s' has an invalid dtype (%d)", t->name, (int)t->dtype);
  *bytes = ctc_tensor_bytes(t);
  if (*bytes == SIZE_MAX)
    return ctc_fail(err, CTC_ERR_ARG, "tensor '%s' has an invalid shape", t->name);
  if (*bytes && !t->data) return ctc_fail(err, CTC_ERR_ARG, "tensor '%s' has no data", t->name);
  return CTC_OK;
}

/* A complex64 tensor held as float32 S + [2] (ctc_tensor.complex64): written as "C64" S. */
static int st_complex64(const ctc_tensor *t) {
  return t->complex64 && t->dtype == CTC_F32 && t->ndim >= 1 && t->shape[t->ndim - 1] == 2;
}

/* Builds the padded header; returns CTC_OK and the header in *hb. */
static int build_header(int n, const ctc_tensor *ts, StrBuf *hb, ctc_error *err) {
  size_t pos = 0;
  char tmp[64];
  int rc;
  sb_puts(hb, "{");
  for (int i = 0; i < n; i++) {
    const ctc_tensor *t = &ts[i];
    size_t bytes = 0;
    if ((rc = check_write_tensor(t, &bytes, err))) return rc;
    if (bytes > SIZE_MAX - pos) return ctc_fail(err, CTC_ERR_ARG, "tensors are too large to write");
    if (i) sb_puts(hb, ",");
    sb_json_string(hb, t->name);
    sb_puts(hb, ":{\"dtype\":\"");
    int c64 = st_complex64(t);   /* its float32 parts as complex64, the trailing 2 dropped */
    sb_puts(hb, c64 ? "C64" : st_dtype_names[t->dtype]);
    sb_puts(hb, "\",\"shape\":[");
    for (int d = 0; d < t->ndim - c64; d++) {
      snprintf(tmp, sizeof tmp, "%s%lld", d ? "," : "", (long long)t->shape[d]);
      sb_puts(hb, tmp);
    }
    snprintf(tmp, sizeof tmp, "],\"data_offsets\":[%zu,%zu]}", pos, pos + bytes);
    sb_puts(hb, tmp);
    pos += bytes;
  }
  sb_puts(hb, "}");
  while (!hb->failed && hb->len % 8 != 0) sb_puts(hb, " ");
  if (hb->failed || !hb->s) return ctc_fail(err, CTC_ERR_NOMEM, "out of memory building the header");
  return check_duplicates(n, ts, err, CTC_ERR_ARG);
}

int ctc_st_write(const char *path, int n, const ctc_tensor *tensors, ctc_error *err) {
  if (!path || n < 0 || (n > 0 && !tensors)) return ctc_fail(err, CTC_ERR_ARG, "ctc_st_write: bad arguments");
  StrBuf hb = {0};
  int rc = build_header(n, tensors, &hb, err);
  if (rc) {
    free(hb.s);
    ctc_error_prefix(err, path);
    return rc;
  }
  ctc_wfile w;
  rc = ctc_wopen(&w, path, err);
  if (rc) {
    free(hb.s);
    return rc;
  }
  unsigned char len8[8];
  for (int k = 0; k < 8; k++) len8[k] = (unsigned char)((uint64_t)hb.len >> (8 * k));
  int ok = ctc_wwrite(&w, len8, 8) && ctc_wwrite(&w, hb.s, hb.len);
  for (int i = 0; ok && i < n; i++) ok = ctc_wwrite(&w, tensors[i].data, ctc_tensor_bytes(&tensors[i]));
  free(hb.s);
  return ctc_wcommit(&w, ok, err);
}
