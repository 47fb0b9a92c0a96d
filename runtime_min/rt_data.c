/* rt_data.c - data sets for the driver's `train`: loading and batching.
 *
 * ctc_dataset_load reads a whole data set into memory. The format is told
 * from the content, not the name:
 *   - .npy ("\x93NUMPY" magic), through ctc_npy_read;
 *   - IDX, the MNIST container: two zero bytes, a type byte (0x08 u8, 0x09 i8,
 *     0x0B i16, 0x0C i32, 0x0D f32, 0x0E f64), a byte with the number of
 *     dimensions, one big-endian u32 per dimension, then the big-endian data
 *     in C order (MNIST images: magic 0x00000803 [N, 28, 28]; labels:
 *     0x00000801 [N]). i8 and i16 data become i32.
 * Either may be gzipped: files are read through zlib's gzread, which passes
 * uncompressed files through unchanged (a gzipped .npy is rejected). Only
 * regular files are read (a directory, /dev/zero or a fifo is refused before
 * any reading), and never more than the IDX header promises (one byte more
 * tells trailing bytes) nor more than an uncompressed file holds; a gzipped
 * file's promise beyond 1032 times its size (gzip's most) is refused before
 * anything is allocated. The
 * header must describe exactly the bytes that follow it: truncated files,
 * trailing bytes, unknown types and overflowing shapes are CTC_ERR_FORMAT.
 *
 * ctc_dataset_gather copies chosen samples into a batch buffer, converting
 * to the entry's dtype (u8 images to floats as x / 255, like torchvision's
 * ToTensor, then an optional (x - mean) / std, like transforms.Normalize,
 * both in float arithmetic for f32 as torchvision does). */
#include "ctc_rt.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifndef CTC_NO_ZLIB
#include <zlib.h>
#else
/* A runtime built without zlib (ctc build found none for its C compiler, as for a cross compiler):
 * the few gz* calls below over a plain file descriptor, which read uncompressed files as zlib does
 * and refuse a gzipped one (its first two bytes 1f 8b) with a clear message. */
#define Z_OK 0
#define Z_ERRNO (-1)
#define Z_DATA_ERROR (-3)
#define Z_MEM_ERROR (-4)
typedef struct {
  int fd, err;     /* err: Z_OK, Z_ERRNO (errno says why) or Z_DATA_ERROR (a gzipped file) */
  long long pos;   /* bytes read so far */
} ctc_plainfile;
typedef ctc_plainfile *gzFile;
static gzFile gzdopen(int fd, const char *mode) {
  (void)mode;
  gzFile f = calloc(1, sizeof *f);
  if (f) f->fd = fd;
  return f;
}
static int gzread(gzFile f, void *buf, unsigned n) {
  if (f->err) return -1;
  size_t got = 0;
  while (got < n) {
    const ssize_t r = read(f->fd, (char *)buf + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      f->err = Z_ERRNO;
      return -1;
    }
    if (r == 0) break;
    got += (size_t)r;
  }
  const unsigned char *b = buf;
  if (f->pos == 0 && got >= 2 && b[0] == 0x1f && b[1] == 0x8b) {
    f->err = Z_DATA_ERROR;
    return -1;
  }
  f->pos += (long long)got;
  return (int)got;
}
static int gzdirect(gzFile f) {
  (void)f;
  return 1;
}
static const char *gzerror(gzFile f, int *err) {
  *err = f->err;
  return f->err == Z_DATA_ERROR ? "a gzipped file, and this program was built without zlib (ctc build found none "
                                  "for its C compiler): decompress it first (gunzip)"
                                : "";
}
static int gzclose(gzFile f) {
  const int r = close(f->fd);
  free(f);
  return r;
}
#endif

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#error "the ctc runtime assumes a little-endian machine"
#endif

/* ---- reading a (possibly gzipped) file ------------------------------------ */

/* The zlib error of a gzFile as a ctc status: I/O for system errors, format otherwise. */
static int gz_fail(gzFile f, const char *path, const char *what, ctc_error *err) {
  int zerr = Z_OK;
  const char *msg = gzerror(f, &zerr);
  if (zerr == Z_ERRNO) return ctc_fail(err, CTC_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
  if (zerr == Z_MEM_ERROR) return ctc_fail(err, CTC_ERR_NOMEM, "%s: out of memory while decompressing", path);
  /* zlib's message is "PATH: what went wrong": drop the path. */
  size_t pl = strlen(path);
  if (msg && strncmp(msg, path, pl) == 0 && msg[pl] == ':' && msg[pl + 1] == ' ') msg += pl + 2;
  return ctc_fail(err, CTC_ERR_FORMAT, "%s: %s: %s", path, what, msg && *msg ? msg : "corrupt gzip data");
}

/* Reads the decompressed content of a gzip file, at most limit bytes, into a
 * malloc'ed buffer. The first `nhead` bytes were already read into head. */
static int gz_read_all(gzFile f, const char *path, const unsigned char *head, size_t nhead, size_t limit,
                       unsigned char **bufp, size_t *sizep, ctc_error *err) {
  size_t cap = limit < ((size_t)1 << 20) ? (limit > nhead ? limit : nhead) : (size_t)1 << 20, len = nhead;
  unsigned char *buf = malloc(cap ? cap : 1);
  if (!buf) return ctc_fail(err, CTC_ERR_NOMEM, "%s: out of memory", path);
  memcpy(buf, head, nhead);
  while (len < limit) {
    if (len == cap) {
      if (cap > SIZE_MAX / 2) {
        free(buf);
        return ctc_fail(err, CTC_ERR_NOMEM, "%s: decompressed data is too large", path);
      }
      size_t ncap = cap * 2 < limit ? cap * 2 : limit;
      unsigned char *nb = realloc(buf, ncap);
      if (!nb) {
        free(buf);
        return ctc_fail(err, CTC_ERR_NOMEM, "%s: out of memory decompressing (%zu bytes so far)", path, len);
      }
      buf = nb;
      cap = ncap;
    }
    size_t want = cap - len;
    if (want > (size_t)INT_MAX / 2) want = (size_t)INT_MAX / 2;
    int got = gzread(f, buf + len, (unsigned)want);
    if (got < 0) {
      free(buf);
      return gz_fail(f, path, "cannot decompress", err);
    }
    if (got == 0) break;
    len += (size_t)got;
  }
  /* gzread returns 0 both at the end and after a truncated stream: ask. */
  int zerr = Z_OK;
  gzerror(f, &zerr);
  if (zerr != Z_OK) {
    free(buf);
    return gz_fail(f, path, "cannot decompress", err);
  }
  *bufp = buf;
  *sizep = len;
  return CTC_OK;
}

/* ---- IDX ---------------------------------------------------------------------- */

static uint32_t be32(const unsigned char *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* IDX element types: size in the file, and the dtype they are loaded as. */
static int idx_type(int code, size_t *fsize, ctc_dtype *dt, const char **name) {
  switch (code) {
    case 0x08: *fsize = 1; *dt = CTC_U8; *name = "u8"; return 1;
    case 0x09: *fsize = 1; *dt = CTC_I32; *name = "i8"; return 1;
    case 0x0B: *fsize = 2; *dt = CTC_I32; *name = "i16"; return 1;
    case 0x0C: *fsize = 4; *dt = CTC_I32; *name = "i32"; return 1;
    case 0x0D: *fsize = 4; *dt = CTC_F32; *name = "f32"; return 1;
    case 0x0E: *fsize = 8; *dt = CTC_F64; *name = "f64"; return 1;
    default: return 0;
  }
}

/* Parses an IDX file held in buf (malloc'ed; taken: freed or kept as out->data). */
static int idx_parse(const char *path, unsigned char *buf, size_t size, ctc_tensor *out, ctc_error *err) {
  int rc = CTC_OK;
  char sh[256];
  size_t fsize = 0;
  const char *tname = "";
  ctc_tensor t;
  memset(&t, 0, sizeof t);
  if (size < 4) {
    rc = ctc_fail(err, CTC_ERR_FORMAT, "%s: not a .npy or IDX file (%zu bytes, too short for a header)", path, size);
    goto fail;
  }
  uint32_t magic = be32(buf);
  int ndim = buf[3];
  if (buf[0] != 0 || buf[1] != 0 || !idx_type(buf[2], &fsize, &t.dtype, &tname)) {
    rc = ctc_fail(err, CTC_ERR_FORMAT,
                  "%s: not a .npy or IDX file (magic 0x%08X; IDX files start with 0x000008NN for u8 data "
                  "with NN dimensions, e.g. 0x00000803 for MNIST images and 0x00000801 for labels)",
                  path, (unsigned)magic);
    goto fail;
  }
  if (ndim < 1 || ndim > CTC_MAX_DIMS) {
    rc = ctc_fail(err, CTC_ERR_FORMAT, "%s: IDX magic 0x%08X declares %d dimensions (1 to %d supported)", path,
                  (unsigned)magic, ndim, CTC_MAX_DIMS);
    goto fail;
  }
  size_t hdr = 4 + 4 * (size_t)ndim;
  if (size < hdr) {
    rc = ctc_fail(err, CTC_ERR_FORMAT, "%s: IDX file is truncated in the header (%zu bytes, %d dimensions need %zu)",
                  path, size, ndim, hdr);
    goto fail;
  }
  t.ndim = ndim;
  for (int d = 0; d < ndim; d++) t.shape[d] = be32(buf + 4 + 4 * d);
  int64_t n = ctc_tensor_numel(&t);
  if (n < 0 || (uint64_t)n > SIZE_MAX / fsize) {
    rc = ctc_fail(err, CTC_ERR_FORMAT, "%s: IDX shape %s is too large", path,
                  ctc_format_shape(sh, sizeof sh, t.ndim, t.shape));
    goto fail;
  }
  size_t want = (size_t)n * fsize, have = size - hdr;
  if (have != want) {
    ctc_format_shape(sh, sizeof sh, t.ndim, t.shape);
    if (have < want)
      rc = ctc_fail(err, CTC_ERR_FORMAT, "%s: IDX file is truncated: %s %s needs %zu bytes of data, found %zu",
                    path, tname, sh, want, have);
    else
      rc = ctc_fail(err, CTC_ERR_FORMAT, "%s: IDX file has %zu unexpected bytes after the %s %s data", path,
                    have - want, tname, sh);
    goto fail;
  }

  /* Convert in place to the native layout at the start of the buffer. */
  size_t esize = ctc_dtype_size(t.dtype), nn = (size_t)n;
  unsigned char *data = buf;
  if (esize > fsize) { /* i8/i16 -> i32: needs a new buffer */
    if (nn > SIZE_MAX / esize || !(data = malloc(nn > 0 ? nn * esize : 1))) {
      rc = ctc_fail(err, CTC_ERR_NOMEM, "%s: out of memory", path);
      goto fail;
    }
    const unsigned char *s = buf + hdr;
    for (size_t i = 0; i < nn; i++) {
      int32_t v = fsize == 1 ? (int32_t)(int8_t)s[i] : (int32_t)(int16_t)(uint16_t)(s[2 * i] << 8 | s[2 * i + 1]);
      memcpy(data + 4 * i, &v, 4);
    }
    free(buf);
    buf = NULL;
  } else {
    memmove(data, buf + hdr, want);
    for (size_t i = 0; fsize > 1 && i < nn; i++) { /* big-endian to little-endian */
      unsigned char *e = data + i * fsize;
      for (size_t a = 0, b = fsize - 1; a < b; a++, b--) {
        unsigned char c = e[a];
        e[a] = e[b];
        e[b] = c;
      }
    }
    if (want) {
      unsigned char *nb = realloc(data, want);
      if (nb) data = nb;
    }
  }
  t.data = data;
  *out = t;
  return CTC_OK;
fail:
  free(buf);
  return rc;
}

/* ---- loading -------------------------------------------------------------------- */

/* How many bytes an IDX file whose first n bytes are h holds, header and data,
 * as its header says; SIZE_MAX when the header is not a valid one (idx_parse
 * then says what is wrong) or its size overflows. */
static size_t idx_promise(const unsigned char *h, size_t n) {
  size_t fsize = 0;
  ctc_dtype dt;
  const char *name;
  if (n < 4 || h[0] || h[1] || !idx_type(h[2], &fsize, &dt, &name) || h[3] < 1 || h[3] > CTC_MAX_DIMS) return SIZE_MAX;
  size_t hdr = 4 + 4 * (size_t)h[3], total = fsize;
  if (n < hdr) return SIZE_MAX;
  for (int d = 0; d < h[3]; d++) {
    uint32_t e = be32(h + 4 + 4 * d);
    if (e && total > SIZE_MAX / 2 / e) return SIZE_MAX;
    total *= e;
  }
  return hdr + total;
}

/* gzip never expands data more than about 1032 times: more data than that
 * from a file is a header that promises what the file cannot hold. */
#define GZ_MAX_RATIO 1032

int ctc_dataset_load(const char *path, ctc_tensor *out, ctc_error *err) {
  if (!path || !out) return ctc_fail(err, CTC_ERR_ARG, "ctc_dataset_load: NULL argument");
  memset(out, 0, sizeof *out);
  int fd;
  uint64_t fbytes;
  int rc = ctc_open_regular(path, &fd, &fbytes, err);
  if (rc) return rc;
  errno = 0;
  gzFile f = gzdopen(fd, "rb");
  if (!f) {
    close(fd);
    return ctc_fail(err, errno == 0 ? CTC_ERR_NOMEM : CTC_ERR_IO, "%s: cannot open: %s", path,
                    errno ? strerror(errno) : "out of memory");
  }
  unsigned char head[4 + 4 * CTC_MAX_DIMS];
  int got = gzread(f, head, 6);
  if (got < 0) {
    rc = gz_fail(f, path, "cannot decompress", err);
    gzclose(f);
    return rc;
  }
  if (got == 6 && memcmp(head, "\x93NUMPY", 6) == 0) {
    int direct = gzdirect(f);
    gzclose(f);
    if (!direct)
      return ctc_fail(err, CTC_ERR_FORMAT, "%s: gzipped .npy files are not supported; decompress it first", path);
    return ctc_npy_read(path, out, err);
  }
  /* the rest of an IDX header, then no more than it promises (and one byte
   * more, so that idx_parse can tell trailing bytes) */
  if (got == 6 && head[3] >= 1 && head[3] <= CTC_MAX_DIMS) {
    int more = gzread(f, head + 6, (unsigned)(4 + 4 * head[3] - 6));
    if (more < 0) {
      rc = gz_fail(f, path, "cannot decompress", err);
      gzclose(f);
      return rc;
    }
    got += more;
  }
  size_t promise = idx_promise(head, (size_t)got), limit = promise == SIZE_MAX ? (size_t)got : promise + 1;
  /* (an uncompressed file is read up to its end at most: idx_parse then says what is missing) */
  if (!gzdirect(f) && promise != SIZE_MAX && promise > fbytes * GZ_MAX_RATIO + 4096) {
    char sh[256];
    int64_t shape[CTC_MAX_DIMS];
    for (int d = 0; d < head[3]; d++) shape[d] = be32(head + 4 + 4 * d);
    gzclose(f);
    return ctc_fail(err, CTC_ERR_FORMAT, "%s: IDX file is truncated: its header promises %s data (%zu bytes), more "
                    "than a gzipped file of %llu bytes can hold", path, ctc_format_shape(sh, sizeof sh, head[3], shape),
                    promise - 4 - 4 * (size_t)head[3], (unsigned long long)fbytes);
  }
  unsigned char *buf = NULL;
  size_t size = 0;
  rc = gz_read_all(f, path, head, (size_t)got, limit, &buf, &size, err);
  gzclose(f);
  if (rc) return rc;
  return idx_parse(path, buf, size, out, err);
}

/* ---- batches ---------------------------------------------------------------------- */

/* Element i of src as an integer; 0 when it is a float that is not integral
 * or out of the i64 range (*ok cleared). */
static int64_t get_i(const unsigned char *p, ctc_dtype dt, size_t i, int *ok) {
  switch (dt) {
    case CTC_I64: { int64_t v; memcpy(&v, p + 8 * i, 8); return v; }
    case CTC_I32: { int32_t v; memcpy(&v, p + 4 * i, 4); return v; }
    case CTC_F32: case CTC_F64: {
      double v = ctc_elem_f64(p, dt, i);
      if (!(v == floor(v) && v >= -9.2e18 && v <= 9.2e18)) {
        *ok = 0;
        return 0;
      }
      return (int64_t)v;
    }
    default: return p[i];
  }
}

int ctc_dataset_gather(const ctc_tensor *ds, const int64_t *rows, int64_t n, ctc_dtype dtype,
                       const ctc_data_xform *xf, void *dst, ctc_error *err) {
  if (!ds || !dst || n < 0 || ds->ndim < 1 || (!ds->data && ds->shape[0] > 0))
    return ctc_fail(err, CTC_ERR_ARG, "ctc_dataset_gather: bad argument");
  int64_t total = ctc_tensor_numel(ds), nsamples = ds->shape[0];
  if (total < 0) return ctc_fail(err, CTC_ERR_ARG, "ctc_dataset_gather: bad data set shape");
  size_t per = nsamples ? (size_t)(total / nsamples) : 0;
  size_t ssize = ctc_dtype_size(ds->dtype), dsize = ctc_dtype_size(dtype);
  if (!ssize || !dsize) return ctc_fail(err, CTC_ERR_ARG, "ctc_dataset_gather: bad dtype");
  int to_float = dtype == CTC_F32 || dtype == CTC_F64;
  if (!to_float && dtype != ds->dtype && dtype != CTC_I64 && dtype != CTC_I32)
    return ctc_fail(err, CTC_ERR_DTYPE, "cannot convert %s data to %s", ctc_dtype_name(ds->dtype),
                    ctc_dtype_name(dtype));
  int scale = ds->dtype == CTC_U8 && to_float && xf && xf->scale_u8;
  int norm = to_float && xf && xf->std != 0;
  float mean32 = norm ? (float)xf->mean : 0.f, std32 = norm ? (float)xf->std : 1.f;
  unsigned char *out = dst;
  const unsigned char *src = ds->data;
  for (int64_t r = 0; r < n; r++) {
    int64_t row = rows ? rows[r] : r;
    if (row < 0 || row >= nsamples)
      return ctc_fail(err, CTC_ERR_ARG, "sample %lld is out of range (the data set has %lld)", (long long)row,
                      (long long)nsamples);
    const unsigned char *s = src + (size_t)row * per * ssize;
    unsigned char *d = out + (size_t)r * per * dsize;
    if (dtype == ds->dtype && !scale && !norm) {
      memcpy(d, s, per * dsize);
    } else if (dtype == CTC_F32) {
      /* In float, as torchvision does: x.float().div(255), then sub(mean).div(std). */
      for (size_t i = 0; i < per; i++) {
        float v = scale ? (float)s[i] / 255.0f : (float)ctc_elem_f64(s, ds->dtype, i);
        if (norm) v = (v - mean32) / std32;
        memcpy(d + 4 * i, &v, 4);
      }
    } else if (dtype == CTC_F64) {
      for (size_t i = 0; i < per; i++) {
        double v = scale ? (double)s[i] / 255.0 : ctc_elem_f64(s, ds->dtype, i);
        if (norm) v = (v - xf->mean) / xf->std;
        memcpy(d + 8 * i, &v, 8);
      }
    } else { /* to I64 / I32 */
      for (size_t i = 0; i < per; i++) {
        int ok = 1;
        int64_t v = get_i(s, ds->dtype, i, &ok);
        if (!ok)
          return ctc_fail(err, CTC_ERR_DTYPE, "sample %lld: value %g is not an integer", (long long)row,
                          ctc_elem_f64(s, ds->dtype, i));
        if (dtype == CTC_I64) {
          memcpy(d + 8 * i, &v, 8);
        } else {
          if (v < INT32_MIN || v > INT32_MAX)
            return ctc_fail(err, CTC_ERR_DTYPE, "sample %lld: value %lld does not fit in i32", (long long)row,
                            (long long)v);
          int32_t x = (int32_t)v;
          memcpy(d + 4 * i, &x, 4);
        }
      }
    }
  }
  return CTC_OK;
}
