/* rt_npy.c - reading and writing NumPy .npy files.
 *
 * Format: "\x93NUMPY", major and minor version bytes, a little-endian header
 * length (u16 for version 1.0, u32 for 2.0 and 3.0), then a Python dict literal
 *     {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
 * padded with spaces and ended by '\n', then the raw array data.
 *
 * Supported descr: '<f4' '<f8' '<i8' '<i4' '|b1' '|u1' '<u1'. Fortran order,
 * big-endian data and every other descr are rejected with a message saying so.
 * The reader holds the whole file in memory; the header parser never reads
 * past the header, the shape is checked for overflow, and the data must be
 * exactly numel * itemsize bytes (a truncated file or trailing bytes are
 * CTC_ERR_FORMAT). Bool data must be 0/1 bytes.
 *
 * The writer writes version 1.0 and pads the header so that the data starts at
 * a multiple of 64 bytes, as numpy does. */
#include "ctc_rt.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#error "the ctc runtime assumes a little-endian machine"
#endif

static const char npy_magic[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};

/* descr strings, by dtype (the ones written), plus the extra '<u1' accepted. */
static const char *const npy_descr[CTC_DTYPE_COUNT] = {
    [CTC_F32] = "<f4", [CTC_F64] = "<f8", [CTC_I64] = "<i8",
    [CTC_I32] = "<i4", [CTC_BOOL] = "|b1", [CTC_U8] = "|u1",
};   /* none for the 16-bit floats: data sets and inputs are float32 or float64 */

static int npy_dtype_from_descr(const char *d, ctc_dtype *out) {
  for (int i = 0; i < CTC_DTYPE_COUNT; i++)
    if (npy_descr[i] && strcmp(d, npy_descr[i]) == 0) {
      *out = (ctc_dtype)i;
      return 1;
    }
  if (strcmp(d, "<u1") == 0) {
    *out = CTC_U8;
    return 1;
  }
  return 0;
}

/* ---- the header dict ------------------------------------------------------ */

typedef struct Lit {
  const char *s;
  size_t n, i;       /* s[i] is valid only if i < n */
  size_t base;       /* file offset of s[0], for messages */
  ctc_error *err;
} Lit;

static int lit_fail(Lit *p, const char *what) {
  return ctc_fail(p->err, CTC_ERR_FORMAT, "invalid .npy header at byte %zu: %s", p->base + p->i, what);
}

static int lit_peek(const Lit *p) { return p->i < p->n ? (unsigned char)p->s[p->i] : -1; }

static void lit_ws(Lit *p) {
  while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' ||
                         p->s[p->i] == '\r'))
    p->i++;
}

/* A quoted string without escapes, copied into out[cap] (NUL-terminated). */
static int lit_string(Lit *p, char *out, size_t cap) {
  lit_ws(p);
  int q = lit_peek(p);
  if (q != '\'' && q != '"') return lit_fail(p, "expected a quoted string");
  size_t len = 0;
  for (p->i++;; p->i++) {
    int c = lit_peek(p);
    if (c < 0 || c == '\n') return lit_fail(p, "unterminated string");
    if (c == '\\') return lit_fail(p, "escapes in strings are not supported");
    if (c == q) break;
    if (len + 1 < cap) out[len++] = (char)c;
    else return lit_fail(p, "string is too long");
  }
  p->i++;
  out[len] = '\0';
  return CTC_OK;
}

static int lit_bool(Lit *p, int *v) {
  lit_ws(p);
  if (p->n - p->i >= 4 && memcmp(p->s + p->i, "True", 4) == 0) {
    p->i += 4;
    *v = 1;
  } else if (p->n - p->i >= 5 && memcmp(p->s + p->i, "False", 5) == 0) {
    p->i += 5;
    *v = 0;
  } else {
    return lit_fail(p, "expected True or False");
  }
  return CTC_OK;
}

/* A non-negative integer that fits in int64_t. */
static int lit_dim(Lit *p, int64_t *v) {
  lit_ws(p);
  if (lit_peek(p) == '-') return ctc_fail(p->err, CTC_ERR_FORMAT, "the shape has a negative dimension");
  if (lit_peek(p) < '0' || lit_peek(p) > '9') return lit_fail(p, "expected an integer");
  int64_t x = 0;
  while (lit_peek(p) >= '0' && lit_peek(p) <= '9') {
    int d = p->s[p->i] - '0';
    if (x > (INT64_MAX - d) / 10) return lit_fail(p, "integer is too large");
    x = x * 10 + d;
    p->i++;
  }
  *v = x;
  return CTC_OK;
}

/* A tuple of dimensions: "()", "(3,)", "(2, 3)", "(2, 3,)". */
static int lit_shape(Lit *p, int *ndim, int64_t *shape) {
  int rc, trailing_comma = 0;
  *ndim = 0;
  lit_ws(p);
  if (lit_peek(p) != '(') return lit_fail(p, "the shape must be a tuple");
  p->i++;
  for (;;) {
    lit_ws(p);
    if (lit_peek(p) == ')') break;
    if (*ndim == CTC_MAX_DIMS)
      return ctc_fail(p->err, CTC_ERR_FORMAT, "the shape has more than %d dimensions", CTC_MAX_DIMS);
    if ((rc = lit_dim(p, &shape[(*ndim)++]))) return rc;
    lit_ws(p);
    trailing_comma = 0;
    if (lit_peek(p) == ',') {
      p->i++;
      trailing_comma = 1;
    } else if (lit_peek(p) != ')') {
      return lit_fail(p, "expected ',' or ')' in the shape");
    }
  }
  if (*ndim == 1 && !trailing_comma) return lit_fail(p, "the shape must be a tuple like (3,)");
  p->i++;
  return CTC_OK;
}

/* Parses the dict into descr/fortran/shape; all three keys are required. */
static int parse_dict(Lit *p, char *descr, size_t dcap, int *fortran, int *ndim, int64_t *shape) {
  int rc, have_descr = 0, have_fortran = 0, have_shape = 0;
  lit_ws(p);
  if (lit_peek(p) != '{') return lit_fail(p, "expected '{'");
  p->i++;
  for (;;) {
    lit_ws(p);
    if (lit_peek(p) == '}') break;
    char key[32];
    if ((rc = lit_string(p, key, sizeof key))) return rc;
    lit_ws(p);
    if (lit_peek(p) != ':') return lit_fail(p, "expected ':'");
    p->i++;
    lit_ws(p);
    if (strcmp(key, "descr") == 0 && !have_descr++) {
      if (lit_peek(p) == '[') return ctc_fail(p->err, CTC_ERR_DTYPE, "structured dtypes are not supported");
      if ((rc = lit_string(p, descr, dcap))) return rc;
    } else if (strcmp(key, "fortran_order") == 0 && !have_fortran++) {
      if ((rc = lit_bool(p, fortran))) return rc;
    } else if (strcmp(key, "shape") == 0 && !have_shape++) {
      if ((rc = lit_shape(p, ndim, shape))) return rc;
    } else {
      return ctc_fail(p->err, CTC_ERR_FORMAT, "unexpected or repeated key '%s' in the .npy header", key);
    }
    lit_ws(p);
    if (lit_peek(p) == ',') p->i++;
    else if (lit_peek(p) != '}') return lit_fail(p, "expected ',' or '}'");
  }
  p->i++;
  lit_ws(p);
  if (p->i != p->n) return lit_fail(p, "unexpected characters after the dict");
  if (!have_descr || !have_fortran || !have_shape)
    return ctc_fail(p->err, CTC_ERR_FORMAT, "the .npy header lacks '%s'",
                    !have_descr ? "descr" : !have_fortran ? "fortran_order" : "shape");
  return CTC_OK;
}

/* Checks the preamble and header; on success *data_off is where the data starts. */
static int parse_npy(const unsigned char *b, size_t size, ctc_tensor *t, size_t *data_off, ctc_error *err) {
  if (size < 10 || memcmp(b, npy_magic, 6) != 0)
    return ctc_fail(err, CTC_ERR_FORMAT, "not a .npy file (no \\x93NUMPY magic)");
  int major = b[6], minor = b[7];
  if ((major != 1 && major != 2 && major != 3) || minor != 0)
    return ctc_fail(err, CTC_ERR_FORMAT, "unsupported .npy version %d.%d", major, minor);
  size_t hstart = major == 1 ? 10 : 12, hlen;
  if (size < hstart) return ctc_fail(err, CTC_ERR_FORMAT, "file is truncated in the preamble");
  if (major == 1) hlen = (size_t)b[8] | (size_t)b[9] << 8;
  else hlen = (size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 | (size_t)b[11] << 24;
  if (hlen > size - hstart)
    return ctc_fail(err, CTC_ERR_FORMAT, "header length %zu is larger than the rest of the file (%zu bytes)",
                    hlen, size - hstart);

  char descr[32];
  int fortran = 0, rc;
  Lit p = {(const char *)b + hstart, hlen, 0, hstart, err};
  memset(t, 0, sizeof *t);
  if ((rc = parse_dict(&p, descr, sizeof descr, &fortran, &t->ndim, t->shape))) return rc;
  if (descr[0] == '>')
    return ctc_fail(err, CTC_ERR_DTYPE, "big-endian data (descr '%s') is not supported; save it with "
                    "arr.astype(arr.dtype.newbyteorder('<'))", descr);
  if (!npy_dtype_from_descr(descr, &t->dtype))
    return ctc_fail(err, CTC_ERR_DTYPE, "unsupported dtype (descr '%s'); supported: <f4 <f8 <i8 <i4 |b1 |u1",
                    descr);
  if (fortran)
    return ctc_fail(err, CTC_ERR_FORMAT, "Fortran-order arrays are not supported; save "
                    "np.ascontiguousarray(arr) instead");

  char sh[128];
  size_t bytes = ctc_tensor_bytes(t), have = size - hstart - hlen;
  if (bytes == SIZE_MAX)
    return ctc_fail(err, CTC_ERR_FORMAT, "shape %s is too large (size overflows)",
                    ctc_format_shape(sh, sizeof sh, t->ndim, t->shape));
  if (have < bytes)
    return ctc_fail(err, CTC_ERR_FORMAT, "file is truncated: %s %s needs %zu bytes of data, found %zu",
                    ctc_dtype_name(t->dtype), ctc_format_shape(sh, sizeof sh, t->ndim, t->shape), bytes, have);
  if (have > bytes)
    return ctc_fail(err, CTC_ERR_FORMAT, "%zu unexpected bytes after the data", have - bytes);
  if (t->dtype == CTC_BOOL)
    for (size_t k = 0; k < bytes; k++)
      if (b[hstart + hlen + k] > 1)
        return ctc_fail(err, CTC_ERR_FORMAT, "bool data contains a byte other than 0 or 1");
  *data_off = hstart + hlen;
  return CTC_OK;
}

int ctc_npy_read(const char *path, ctc_tensor *out, ctc_error *err) {
  if (!path || !out) return ctc_fail(err, CTC_ERR_ARG, "ctc_npy_read: NULL argument");
  memset(out, 0, sizeof *out);
  void *buf;
  size_t size, off = 0;
  int rc = ctc_read_file(path, &buf, &size, err);
  if (rc) return rc;
  ctc_tensor t;
  if ((rc = parse_npy(buf, size, &t, &off, err))) {
    free(buf);
    ctc_error_prefix(err, path);
    return rc;
  }
  /* Keep only the data: move it to the start of the buffer and shrink it. */
  size_t bytes = size - off;
  memmove(buf, (char *)buf + off, bytes);
  if (bytes) {
    void *nb = realloc(buf, bytes);
    if (nb) buf = nb;
  }
  t.data = buf;
  *out = t;
  return CTC_OK;
}

void ctc_tensor_free(ctc_tensor *t) {
  if (!t) return;
  free(t->data);
  t->data = NULL;
}

/* ---- writing -------------------------------------------------------------- */

int ctc_npy_write(const char *path, const ctc_tensor *t, ctc_error *err) {
  if (!path || !t) return ctc_fail(err, CTC_ERR_ARG, "ctc_npy_write: NULL argument");
  if ((unsigned)t->dtype >= CTC_DTYPE_COUNT)
    return ctc_fail(err, CTC_ERR_ARG, "%s: invalid dtype (%d)", path, (int)t->dtype);
  if (!npy_descr[t->dtype])
    return ctc_fail(err, CTC_ERR_DTYPE, "%s: a %s tensor cannot be written as .npy by ctc", path,
                    ctc_dtype_name(t->dtype));
  size_t bytes = ctc_tensor_bytes(t);
  if (bytes == SIZE_MAX) return ctc_fail(err, CTC_ERR_ARG, "%s: invalid shape", path);
  if (bytes && !t->data) return ctc_fail(err, CTC_ERR_ARG, "%s: tensor has no data", path);

  /* The dict, as numpy writes it: 1-d shapes keep their trailing comma. */
  char shape[CTC_MAX_DIMS * 24 + 8] = "", hdr[512];
  size_t sl = 0;
  for (int d = 0; d < t->ndim; d++)
    sl += (size_t)snprintf(shape + sl, sizeof shape - sl, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
  if (t->ndim == 1) snprintf(shape + sl, sizeof shape - sl, ",");
  int len = snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }",
                     npy_descr[t->dtype], shape);
  if (len < 0 || (size_t)len + 64 >= sizeof hdr) return ctc_fail(err, CTC_ERR_ARG, "%s: header too long", path);
  /* Pad with spaces so that 10 + header (ending in '\n') is a multiple of 64. */
  size_t hl = (size_t)len;
  while ((10 + hl + 1) % 64 != 0) hdr[hl++] = ' ';
  hdr[hl++] = '\n';

  unsigned char pre[10];
  memcpy(pre, npy_magic, 6);
  pre[6] = 1;
  pre[7] = 0;
  pre[8] = (unsigned char)(hl & 0xFF);
  pre[9] = (unsigned char)(hl >> 8);

  ctc_wfile w;
  int rc = ctc_wopen(&w, path, err);
  if (rc) return rc;
  int ok = ctc_wwrite(&w, pre, 10) && ctc_wwrite(&w, hdr, hl) && ctc_wwrite(&w, t->data, bytes);
  return ctc_wcommit(&w, ok, err);
}
