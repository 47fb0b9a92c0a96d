/* rt_error.c - status codes, error messages, dtypes and small utilities.
 *
 * Everything here is pure and allocation-free except ctc_read_file, which
 * reads a whole file into memory for the safetensors, .npy, .pt and text
 * readers (regular files only, through ctc_open_regular: a directory, device,
 * fifo or socket is refused before anything is read, and no more than the
 * file's size is ever allocated), and
 * ctc_wopen/ctc_wcommit, which replace a file atomically (temporary file,
 * fsync, rename).
 * Sizes are computed with explicit overflow checks: a file may claim any
 * shape, and nothing may be allocated or indexed from an overflowed product. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* fileno, fstat */
#endif
#include "ctc_rt.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- status codes ------------------------------------------------------ */

const char *ctc_strerror(int code) {
  switch (code) {
    case CTC_OK: return "success";
    case CTC_ERR_IO: return "file could not be opened, read or written";
    case CTC_ERR_FORMAT: return "file is malformed";
    case CTC_ERR_MISSING: return "tensor is missing from the file";
    case CTC_ERR_SHAPE: return "tensor has the wrong shape";
    case CTC_ERR_DTYPE: return "tensor has the wrong dtype";
    case CTC_ERR_ARENA: return "arena is too small or misaligned";
    case CTC_ERR_ARG: return "bad argument";
    case CTC_ERR_NOMEM: return "out of memory";
    case CTC_ERR_ANOMALY: return "a kernel produced NaN or Inf (anomaly mode)";
    case CTC_ERR_DEVICE: return "CUDA or cuBLAS call failed";
    case CTC_ERR_INDEX: return "an index is out of range";
    case CTC_ERR_VALUE: return "a tensor's values differ from those the model was compiled for";
    default: return "unknown error";
  }
}

int ctc_fail(ctc_error *err, int code, const char *fmt, ...) {
  if (err) {
    va_list ap;
    va_start(ap, fmt);
    err->code = code;
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
  }
  return code;
}

int ctc_error_set(char *msg, size_t cap, int code, const char *fmt, ...) {
  if (msg && cap) {
    msg[0] = 0;
    if (code != CTC_OK) {
      va_list ap;
      va_start(ap, fmt);
      vsnprintf(msg, cap, fmt, ap);
      va_end(ap);
    }
  }
  return code;
}

void ctc_error_prefix(ctc_error *err, const char *prefix) {
  if (!err || !prefix) return;
  char out[sizeof err->msg];
  size_t cap = sizeof out - 1, len = 0;
  /* prefix, ": ", then the old message, truncated to fit */
  const char *parts[3] = {prefix, ": ", err->msg};
  for (int p = 0; p < 3; p++)
    for (const char *s = parts[p]; (p < 2 || s < err->msg + sizeof err->msg) && *s && len < cap; s++)
      out[len++] = *s;
  out[len] = '\0';
  memcpy(err->msg, out, len + 1);
}

int ctc_index_fail(char *msg, size_t cap, const ctc_index_site *site, const int64_t *idx, int64_t n, int64_t bound) {
  int64_t at = 0;
  while (at < n - 1 && idx && (uint64_t)idx[at] < (uint64_t)bound) at++;
  long long v = idx && n > 0 ? (long long)idx[at] : -1;
  if (site->phase == CTC_PROF_BACKWARD)
    snprintf(msg, cap, "index %lld is out of range [0, %lld) in '%s' (element %lld) read by %s in the backward pass of "
             "entry '%s', differentiating %s: %s", v, (long long)bound, site->index, (long long)at, site->op,
             site->entry, site->where, site->code);
  else
    snprintf(msg, cap, "index %lld is out of range [0, %lld) in '%s' (element %lld) read by %s at %s (%s of entry '%s'): %s",
             v, (long long)bound, site->index, (long long)at, site->op, site->where,
             site->phase == CTC_PROF_OPTIMIZER ? "optimizer step" : "forward", site->entry, site->code);
  return CTC_ERR_INDEX;
}

/* ---- dtypes and tensors ------------------------------------------------- */

size_t ctc_dtype_size(ctc_dtype t) {
  switch (t) {
    case CTC_F32: return 4;
    case CTC_F64: return 8;
    case CTC_I64: return 8;
    case CTC_I32: return 4;
    case CTC_BOOL: return 1;
    case CTC_U8: return 1;
    case CTC_BF16: return 2;
    case CTC_F16: return 2;
    default: return 0;
  }
}

const char *ctc_dtype_name(ctc_dtype t) {
  switch (t) {
    case CTC_F32: return "f32";
    case CTC_F64: return "f64";
    case CTC_I64: return "i64";
    case CTC_I32: return "i32";
    case CTC_BOOL: return "bool";
    case CTC_U8: return "u8";
    case CTC_BF16: return "bf16";
    case CTC_F16: return "f16";
    default: return "?";
  }
}

int ctc_dtype_is_float(ctc_dtype t) { return t == CTC_F32 || t == CTC_F64 || t == CTC_BF16 || t == CTC_F16; }

int64_t ctc_tensor_numel(const ctc_tensor *t) {
  if (!t || t->ndim < 0 || t->ndim > CTC_MAX_DIMS) return -1;
  int64_t n = 1;
  for (int i = 0; i < t->ndim; i++) {
    int64_t d = t->shape[i];
    if (d < 0) return -1;
    if (d != 0 && n > INT64_MAX / d) return -1;
    n *= d;
  }
  return n;
}

size_t ctc_tensor_bytes(const ctc_tensor *t) {
  int64_t n = ctc_tensor_numel(t);
  size_t es = t ? ctc_dtype_size(t->dtype) : 0;
  if (n < 0 || es == 0) return SIZE_MAX;
  if ((uint64_t)n > SIZE_MAX / es) return SIZE_MAX;
  return (size_t)n * es;
}

double ctc_elem_f64(const void *data, ctc_dtype dt, size_t i) {
  const unsigned char *p = data;
  switch (dt) {
    case CTC_F32: { float v; memcpy(&v, p + 4 * i, 4); return v; }
    case CTC_F64: { double v; memcpy(&v, p + 8 * i, 8); return v; }
    case CTC_I64: { int64_t v; memcpy(&v, p + 8 * i, 8); return (double)v; }
    case CTC_I32: { int32_t v; memcpy(&v, p + 4 * i, 4); return v; }
    case CTC_BF16: { uint16_t v; memcpy(&v, p + 2 * i, 2); return ctc_bf16_to_f32(v); }
    case CTC_F16: { uint16_t v; memcpy(&v, p + 2 * i, 2); return ctc_f16_to_f32(v); }
    default: return p[i]; /* BOOL, U8 */
  }
}

/* ---- 16-bit floats: bfloat16 and IEEE binary16 (float16) ------------------
 * A model computes on float32; these convert a file's BF16 / F16 tensors to it (exactly)
 * and a .bfloat16() / .half() model's float32 parameters back (ctc_tensor.low), rounding to
 * nearest even as PyTorch's conversions do. */

float ctc_bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

float ctc_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
  if (exp == 0x1f) bits = sign | 0x7f800000u | man << 13;   /* inf, NaN */
  else if (exp) bits = sign | (exp + 112) << 23 | man << 13;
  else if (!man) bits = sign;
  else {   /* subnormal: normalise */
    int e = -1;
    do {
      man <<= 1;
      e++;
    } while (!(man & 0x400));
    bits = sign | (uint32_t)(112 - e) << 23 | (man & 0x3ff) << 13;
  }
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

uint16_t ctc_f32_to_bf16(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;   /* NaN: PyTorch's canonical bfloat16 NaN */
  u += 0x7fffu + ((u >> 16) & 1u);                       /* to nearest, ties to even */
  return (uint16_t)(u >> 16);
}

uint16_t ctc_f32_to_f16(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);   /* NaN */
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);  /* 65520 and above: inf */
  if (a >= 0x38800000u) {                                   /* 2^-14 and above: normal */
    uint32_t r = a - 0x38000000u;                           /* the exponent rebiased from 127 to 15 */
    r += 0xfffu + ((r >> 13) & 1u);                         /* to nearest at bit 13, ties to even */
    return (uint16_t)(sign | r >> 13);
  }
  if (a <= 0x33000000u) return (uint16_t)sign;              /* up to 2^-25 (a tie, to the even 0): zero */
  /* subnormal: a multiple of 2^-24; the value is m * 2^(e - 150), m with its leading 1 */
  uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
  int shift = 126 - (int)e;                                 /* 14 .. 24 */
  uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u))) q++;         /* 1024 is the smallest normal, as it should be */
  return (uint16_t)(sign | q);
}

void ctc_float_copy(void *dst, ctc_dtype dt, const void *src, ctc_dtype st, size_t n, int low) {
  unsigned char *out = dst;
  for (size_t i = 0; i < n; i++) {
    double v = ctc_elem_f64(src, st, i);
    if (dt == CTC_F64) {
      memcpy(out + 8 * i, &v, 8);
      continue;
    }
    float f = (float)v;   /* float64 to a 16-bit float goes through float32, as PyTorch's conversion */
    if (dt == CTC_F32) {
      if (low == CTC_LOW_BF16) f = ctc_bf16_to_f32(ctc_f32_to_bf16(f));
      else if (low == CTC_LOW_F16) f = ctc_f16_to_f32(ctc_f32_to_f16(f));
      memcpy(out + 4 * i, &f, 4);
    } else {
      uint16_t h = dt == CTC_BF16 ? ctc_f32_to_bf16(f) : ctc_f32_to_f16(f);
      memcpy(out + 2 * i, &h, 2);
    }
  }
}

/* ---- utilities ---------------------------------------------------------- */

char *ctc_format_shape(char *buf, size_t n, int ndim, const int64_t *shape) {
  if (!buf || n == 0) return buf;
  size_t len = 0;
  buf[0] = '\0';
  /* Appends while there is room; snprintf truncates safely at the end. */
  for (int i = -1; i <= ndim && len < n; i++) {
    int w;
    if (i < 0) w = snprintf(buf + len, n - len, "[");
    else if (i == ndim) w = snprintf(buf + len, n - len, "]");
    else w = snprintf(buf + len, n - len, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (w < 0) break;
    len += (size_t)w;
  }
  return buf;
}

int ctc_wopen(ctc_wfile *w, const char *path, ctc_error *err) {
  w->f = NULL;
  w->path = path;
  if (snprintf(w->tmp, sizeof w->tmp, "%s.tmp.XXXXXX", path) >= (int)sizeof w->tmp)
    return ctc_fail(err, CTC_ERR_IO, "%s: path too long", path);
  int fd = mkstemp(w->tmp);
  if (fd < 0) return ctc_fail(err, CTC_ERR_IO, "%s: cannot open for writing: %s", path, strerror(errno));
  fchmod(fd, 0644);   /* as fopen would create it (before the umask) */
  w->f = fdopen(fd, "wb");
  if (!w->f) {
    int saved = errno;
    close(fd);
    unlink(w->tmp);
    return ctc_fail(err, CTC_ERR_IO, "%s: cannot open for writing: %s", path, strerror(saved));
  }
  return CTC_OK;
}

int ctc_wwrite(ctc_wfile *w, const void *data, size_t n) {
  return w->f && (n == 0 || fwrite(data, 1, n, (FILE *)w->f) == n);
}

int ctc_wcommit(ctc_wfile *w, int ok, ctc_error *err) {
  int saved = ok ? 0 : (errno ? errno : EIO);
  if (!w->f) return ctc_fail(err, CTC_ERR_IO, "%s: not open", w->path);
  FILE *f = w->f;
  if (ok && (fflush(f) != 0 || fsync(fileno(f)) != 0)) ok = 0, saved = errno;
  if (fclose(f) != 0 && ok) ok = 0, saved = errno;
  w->f = NULL;
  if (ok && rename(w->tmp, w->path) != 0) ok = 0, saved = errno;
  if (!ok) {
    unlink(w->tmp);
    return ctc_fail(err, CTC_ERR_IO, "%s: cannot write: %s (the previous file, if any, is unchanged)", w->path,
                    strerror(saved ? saved : EIO));
  }
  return CTC_OK;
}

int ctc_open_regular(const char *path, int *fdp, uint64_t *sizep, ctc_error *err) {
  *fdp = -1;
  *sizep = 0;
  /* O_NONBLOCK: opening a fifo must not wait for a writer before it is refused */
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == EISDIR) return ctc_fail(err, CTC_ERR_IO, "%s: is a directory, not a file", path);
    return ctc_fail(err, CTC_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  }
  struct stat sb;
  if (fstat(fd, &sb) != 0) {
    int e = errno;
    close(fd);
    return ctc_fail(err, CTC_ERR_IO, "%s: cannot read: %s", path, strerror(e));
  }
  if (!S_ISREG(sb.st_mode)) {
    const char *kind = S_ISDIR(sb.st_mode)    ? "a directory"
                       : S_ISCHR(sb.st_mode)  ? "a character device"
                       : S_ISBLK(sb.st_mode)  ? "a block device"
                       : S_ISFIFO(sb.st_mode) ? "a fifo (pipe)"
                       : S_ISSOCK(sb.st_mode) ? "a socket"
                                              : "not a regular file";
    close(fd);
    return ctc_fail(err, CTC_ERR_IO, "%s: is %s; ctc reads data and weights from regular files only", path, kind);
  }
  int fl = fcntl(fd, F_GETFL);
  if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  *fdp = fd;
  *sizep = sb.st_size > 0 ? (uint64_t)sb.st_size : 0;
  return CTC_OK;
}

int ctc_read_file(const char *path, void **bufp, size_t *sizep, ctc_error *err) {
  *bufp = NULL;
  *sizep = 0;
  int fd;
  uint64_t fsize;
  int rc = ctc_open_regular(path, &fd, &fsize, err);
  if (rc) return rc;
  /* Exactly the bytes the file holds when it was opened: never more, so a
   * file that grows while it is read cannot make this allocate without bound. */
  if (fsize >= SIZE_MAX) {
    close(fd);
    return ctc_fail(err, CTC_ERR_NOMEM, "%s: the file is too large (%llu bytes)", path, (unsigned long long)fsize);
  }
  size_t cap = (size_t)fsize;
  char *buf = malloc(cap + 1);
  if (!buf) {
    close(fd);
    return ctc_fail(err, CTC_ERR_NOMEM, "%s: out of memory reading %zu bytes", path, cap);
  }
  size_t len = 0;
  while (len < cap) {
    ssize_t got = read(fd, buf + len, cap - len > (1u << 30) ? (1u << 30) : cap - len);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      int e = errno;
      free(buf);
      close(fd);
      return ctc_fail(err, CTC_ERR_IO, "%s: cannot read: %s", path, strerror(e));
    }
    if (got == 0) break; /* the file shrank: what is left is read (and checked by its parser) */
    len += (size_t)got;
  }
  close(fd);
  *bufp = buf;
  *sizep = len;
  return CTC_OK;
}

size_t ctc_escape_name(char *out, size_t cap, const char *s, size_t len) {
  static const char hex[] = "0123456789abcdef";
  size_t w = 0;
  if (!cap) return 0;
  for (size_t i = 0; i < len && w + 5 < cap; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c == '\\' || c == '\'') {
      out[w++] = '\\';
      out[w++] = (char)c;
    } else if (c < 0x20 || c == 0x7f) {
      out[w++] = '\\';
      out[w++] = 'x';
      out[w++] = hex[c >> 4];
      out[w++] = hex[c & 15];
    } else
      out[w++] = (char)c;
  }
  out[w] = 0;
  return w;
}
