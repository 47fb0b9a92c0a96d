/* rt_pt.c - PyTorch checkpoints (torch.save files): reading and writing.
 *
 * Formats read (told from the content, see ctc_pt_sniff):
 *  - the zip archive torch.save writes since PyTorch 1.6: PREFIX/data.pkl (a
 *    pickle whose tensors name their storages by persistent id
 *    ('storage', torch.FloatStorage, KEY, 'cpu', NUMEL)), one entry
 *    PREFIX/data/KEY per storage (stored, or deflated: inflated with zlib),
 *    ZIP64 records as PyTorch writes them;
 *  - the legacy format (_use_new_zipfile_serialization=False): the pickles of
 *    the magic number, the protocol version, sys_info, the object and the list
 *    of storage keys, then each storage as an int64 count and its bytes.
 *
 * The unpickler is restricted: it never executes anything. It builds a small
 * value tree (None, bools, ints, floats, strings, tuples, lists, dicts,
 * storages, tensors) and accepts only the opcodes such a tree needs and the
 * globals a state_dict holds: collections.OrderedDict (called with no
 * arguments), torch._utils._rebuild_tensor_v2, torch._utils._rebuild_parameter
 * (and _rebuild_parameter_with_state) and the torch.*Storage types. Any other
 * opcode or global is CTC_ERR_FORMAT naming it. Every offset and size (zip
 * records, pickle operands, memo keys, storage extents, tensor views with
 * their offsets and strides) is checked against the file before use; CRCs of
 * the records read are verified.
 *
 * Selecting the tensors: the object is a dict of tensors (a state_dict) or a
 * dict holding one under a key (nanoGPT's {'model': sd, 'optimizer': ..., ...}).
 * With a KEY (FILE.pt:KEY) that entry is taken; otherwise the dict (the top
 * level, or one under a top-level key) whose names match the wanted names
 * best; when none match, the top level if no dict under a key holds tensors,
 * the one such dict if it holds more tensors than the top level (nanoGPT's
 * checkpoint also holds the tensor 'best_val_loss'), else it is ambiguous. Names saved from a torch.compile'd or
 * DistributedDataParallel model ('_orig_mod.', 'module.' prefixes) match too.
 * The tensors found are materialised contiguous, in ctc dtypes: float32 and
 * float64, float16 and bfloat16 as they are (CTC_F16, CTC_BF16), int16/int8 as
 * int32, int64/int32/uint8/bool as they are, complex64 as float32 with a trailing
 * dimension of 2 (torch.view_as_real's layout); views (tied weights, storage
 * offsets, any strides) are gathered element by element.
 *
 * The writer (ctc_pt_write) emits what torch.save would for an OrderedDict of
 * contiguous tensors, each with its own storage, in the opcodes PyTorch 1.13's
 * torch.load(weights_only=True) accepts; records are stored (not deflated),
 * 64-byte aligned, with ZIP64 sizes (so no size limit applies). */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include "ctc_rt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#ifndef CTC_NO_ZLIB
#include <zlib.h>

/* zip's CRC-32 of n bytes */
static uint32_t crc_of(const void *data, size_t n) {
  uLong crc = crc32(0L, Z_NULL, 0);
  for (size_t off = 0; off < n;) {
    uInt chunk = n - off > 1u << 30 ? 1u << 30 : (uInt)(n - off);
    crc = crc32(crc, (const Bytef *)data + off, chunk);
    off += chunk;
  }
  return (uint32_t)crc;
}
#else
/* zip's CRC-32 (reflected, polynomial 0xEDB88320) a bit at a time: a runtime built without zlib (ctc
 * build found none for its compiler, as for a cross compiler), which reads stored records only */
static uint32_t crc_of(const void *data, size_t n) {
  const unsigned char *p = data;
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; i++) {
    c ^= p[i];
    for (int k = 0; k < 8; k++) c = c >> 1 ^ (0xedb88320u & (0u - (c & 1u)));
  }
  return ~c;
}
#endif

/* ---- PyTorch dtypes --------------------------------------------------------- */

typedef enum { PT_F32, PT_F64, PT_F16, PT_BF16, PT_I64, PT_I32, PT_I16, PT_I8, PT_U8, PT_BOOL, PT_C64, PT_NDTYPES } PtDtype;

static const struct {
  const char *storage;   /* torch.<storage> */
  const char *name;      /* for messages */
  size_t size;
  ctc_dtype to;          /* what it is materialised as */
} pt_dtypes[PT_NDTYPES] = {
    [PT_F32] = {"FloatStorage", "float32", 4, CTC_F32},   [PT_F64] = {"DoubleStorage", "float64", 8, CTC_F64},
    [PT_F16] = {"HalfStorage", "float16", 2, CTC_F16},    [PT_BF16] = {"BFloat16Storage", "bfloat16", 2, CTC_BF16},
    [PT_I64] = {"LongStorage", "int64", 8, CTC_I64},      [PT_I32] = {"IntStorage", "int32", 4, CTC_I32},
    [PT_I16] = {"ShortStorage", "int16", 2, CTC_I32},     [PT_I8] = {"CharStorage", "int8", 1, CTC_I32},
    [PT_U8] = {"ByteStorage", "uint8", 1, CTC_U8},        [PT_BOOL] = {"BoolStorage", "bool", 1, CTC_BOOL},
    /* complex64 (a rotary table buffer): float32 with a trailing dimension of 2, real and imaginary
     * parts, as torch.view_as_real lays it out and ctc's complex tensors are (torchlib/complex.c) */
    [PT_C64] = {"ComplexFloatStorage", "complex64", 8, CTC_F32},
};

/* ---- values --------------------------------------------------------------- */

enum { V_NONE, V_BOOL, V_INT, V_FLOAT, V_STR, V_TUPLE, V_LIST, V_DICT, V_GLOBAL, V_STORAGE, V_TENSOR };
static const char *const kind_names[] = {"None", "a bool", "an int", "a float", "a string", "a tuple", "a list",
                                         "a dict", "a global", "a storage", "a tensor"};

/* The globals that may be named (V_GLOBAL's i); storage types are G_STORAGE + PtDtype. */
enum { G_ODICT, G_REBUILD_TENSOR, G_REBUILD_PARAM, G_REBUILD_PARAM_STATE, G_STORAGE };

typedef struct Storage {
  int dtype;                      /* PtDtype */
  const char *key;                /* NUL-terminated (arena) */
  int64_t numel;                  /* as the pickle declares it */
  const unsigned char *data;      /* NULL until resolved */
  struct Storage *next;           /* all storages, in order of appearance */
} Storage;

typedef struct Tensor {
  Storage *st;
  int64_t offset;
  int ndim;
  int64_t shape[CTC_MAX_DIMS], stride[CTC_MAX_DIMS];
} Tensor;

typedef struct PV PV;
struct PV {
  int kind;
  int n, cap;                     /* tuple, list: n items; dict: n pairs in items[2k], items[2k + 1] */
  PV **items;
  int64_t i;                      /* BOOL, INT, GLOBAL */
  double f;
  const char *s;                  /* STR: NUL-terminated copy (arena) */
  size_t len;
  Storage *st;
  Tensor *t;
};

/* Everything the reader allocates, freed at once. */
typedef struct Block {
  struct Block *next;
  size_t used, cap;
  _Alignas(16) unsigned char data[];
} Block;

typedef struct Pt {
  Block *blocks;
  ctc_error *err;
  /* the zip archive */
  const unsigned char *buf;
  size_t size;
  struct ZEntry *entries;
  int nentries;
  const char *prefix;             /* "archive/" (with the slash) */
  size_t prefix_len;
  void **inflated;                /* buffers of deflated records */
  int ninflated, capinflated;
  int legacy;
  /* storages by key */
  Storage *storages, **st_last;
  Storage **st_hash;
  size_t st_hash_cap, nstorages;
  /* the unpickler */
  PV **stack;
  size_t sp, stack_cap;
  size_t *marks;
  size_t nmarks, marks_cap;
  PV **memo;
  size_t memo_cap, nputs;
  const char *what;               /* "data.pkl" */
} Pt;

static void *pt_alloc(Pt *p, size_t n) {
  n = (n + 15) & ~(size_t)15;
  Block *b = p->blocks;
  if (!b || b->cap - b->used < n) {
    size_t cap = n > 65536 ? n : 65536;
    b = malloc(sizeof *b + cap);
    if (!b) return NULL;
    b->next = p->blocks;
    b->used = 0;
    b->cap = cap;
    p->blocks = b;
  }
  void *r = b->data + b->used;
  b->used += n;
  memset(r, 0, n);
  return r;
}

static void pt_free(Pt *p) {
  for (Block *b = p->blocks, *nb; b; b = nb) {
    nb = b->next;
    free(b);
  }
  for (int i = 0; i < p->ninflated; i++) free(p->inflated[i]);
  free(p->inflated);
  free(p->entries);
  free(p->st_hash);
  free(p->stack);
  free(p->marks);
  free(p->memo);
  memset(p, 0, sizeof *p);
}

static int nomem(Pt *p) { return ctc_fail(p->err, CTC_ERR_NOMEM, "out of memory reading the checkpoint"); }

static PV *new_value(Pt *p, int kind) {
  PV *v = pt_alloc(p, sizeof *v);
  if (v) v->kind = kind;
  return v;
}

/* Makes room for `slots` item pointers in a tuple, list or dict (a dict uses 2 per pair). */
static int grow(Pt *p, PV *c, int slots) {
  if (slots <= c->cap) return CTC_OK;
  if (c->cap > (1 << 28)) return ctc_fail(p->err, CTC_ERR_FORMAT, "%s: a container is too large", p->what);
  int ncap = c->cap ? c->cap * 2 : 8;
  PV **ni = pt_alloc(p, (size_t)ncap * sizeof *ni);
  if (!ni) return nomem(p);
  if (c->items) memcpy(ni, c->items, (size_t)c->cap * sizeof *ni);
  c->items = ni;
  c->cap = ncap;
  return CTC_OK;
}

/* Appends x to a tuple or list. */
static int append(Pt *p, PV *c, PV *x) {
  int rc = grow(p, c, c->n + 1);
  if (rc) return rc;
  c->items[c->n++] = x;
  return CTC_OK;
}

/* d[k] = v: appended (a key given twice is resolved where it is read: the last one counts). */
static int dict_set(Pt *p, PV *d, PV *k, PV *v) {
  int rc = grow(p, d, d->n * 2 + 2);
  if (rc) return rc;
  d->items[d->n * 2] = k;
  d->items[d->n * 2 + 1] = v;
  d->n++;
  return CTC_OK;
}

static int is_str(const PV *v, const char *s) { return v && v->kind == V_STR && strcmp(v->s, s) == 0; }

/* The value of string key `key` in dict d (the last one, as Python's dict keeps it). */
static PV *dict_get(const PV *d, const char *key) {
  for (int k = d->n - 1; k >= 0; k--)
    if (is_str(d->items[2 * k], key)) return d->items[2 * k + 1];
  return NULL;
}

/* ---- the zip archive -------------------------------------------------------- */

typedef struct ZEntry {
  const char *name;               /* not NUL-terminated: name_len bytes in the file */
  size_t name_len;
  int method;
  uint32_t crc;
  uint64_t csize, usize, local;
} ZEntry;

static uint16_t rd16(const unsigned char *b) { return (uint16_t)(b[0] | b[1] << 8); }
static uint32_t rd32(const unsigned char *b) { return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24; }
static uint64_t rd64(const unsigned char *b) { return rd32(b) | (uint64_t)rd32(b + 4) << 32; }

static int zfail(Pt *p, const char *fmt, const char *detail) {
  return ctc_fail(p->err, CTC_ERR_FORMAT, fmt, detail);
}

static int cmp_entry(const void *a, const void *b) {
  const ZEntry *x = a, *y = b;
  size_t n = x->name_len < y->name_len ? x->name_len : y->name_len;
  int c = memcmp(x->name, y->name, n);
  return c ? c : (x->name_len > y->name_len) - (x->name_len < y->name_len);
}

static const ZEntry *zip_find(const Pt *p, const char *name, size_t len) {
  ZEntry key = {.name = name, .name_len = len};
  return p->nentries ? bsearch(&key, p->entries, (size_t)p->nentries, sizeof key, cmp_entry) : NULL;
}

/* Reads the central directory into p->entries (sorted by name). */
static int zip_open(Pt *p) {
  const unsigned char *b = p->buf;
  size_t n = p->size;
  if (n < 22) return zfail(p, "the zip archive is truncated (%s)", "no end of central directory record");
  size_t eocd = SIZE_MAX;
  for (size_t i = n - 22 + 1, stop = n - 22 > 65535 ? n - 22 - 65535 : 0; i-- > stop;)
    if (rd32(b + i) == 0x06054b50 && i + 22 + rd16(b + i + 20) <= n) {
      eocd = i;
      break;
    }
  if (eocd == SIZE_MAX)
    return zfail(p, "the zip archive is truncated or damaged (%s)", "no end of central directory record");
  uint64_t count = rd16(b + eocd + 10), cd_size = rd32(b + eocd + 12), cd_off = rd32(b + eocd + 16);
  if (eocd >= 20 && rd32(b + eocd - 20) == 0x07064b50) {   /* ZIP64 locator */
    uint64_t z = rd64(b + eocd - 20 + 8);
    if (z > eocd - 20 || eocd - 20 - z < 56 || rd32(b + z) != 0x06064b50)
      return zfail(p, "the zip archive is damaged (%s)", "bad ZIP64 end of central directory record");
    count = rd64(b + z + 32);
    cd_size = rd64(b + z + 40);
    cd_off = rd64(b + z + 48);
  }
  if (cd_off > n || cd_size > n - cd_off)
    return zfail(p, "the zip archive is truncated (%s)", "its central directory lies past the end of the file");
  if (count > cd_size / 46) return zfail(p, "the zip archive is damaged (%s)", "bad entry count");
  p->entries = calloc(count ? count : 1, sizeof *p->entries);
  if (!p->entries) return nomem(p);
  const unsigned char *c = b + cd_off, *end = c + cd_size;
  for (uint64_t k = 0; k < count; k++) {
    if (end - c < 46 || rd32(c) != 0x02014b50)
      return zfail(p, "the zip archive is damaged (%s)", "bad central directory entry");
    ZEntry *e = &p->entries[p->nentries++];
    size_t nl = rd16(c + 28), xl = rd16(c + 30), cl = rd16(c + 32);
    if ((size_t)(end - c) - 46 < nl + xl + cl)
      return zfail(p, "the zip archive is damaged (%s)", "a central directory entry runs past its end");
    if (rd16(c + 8) & 1) return zfail(p, "the zip archive holds an encrypted entry (%s)", "not supported");
    e->method = rd16(c + 10);
    e->crc = rd32(c + 16);
    e->csize = rd32(c + 20);
    e->usize = rd32(c + 24);
    e->local = rd32(c + 42);
    e->name = (const char *)c + 46;
    e->name_len = nl;
    /* the ZIP64 extra field holds the fields saturated above, in this order */
    for (const unsigned char *x = c + 46 + nl, *xe = x + xl; xe - x >= 4;) {
      size_t id = rd16(x), len = rd16(x + 2);
      if ((size_t)(xe - x) - 4 < len) break;
      if (id == 1) {
        const unsigned char *f = x + 4, *fe = f + len;
        uint64_t *fields[] = {&e->usize, &e->csize, &e->local};
        for (int q = 0; q < 3; q++)
          if (*fields[q] == 0xFFFFFFFFu) {
            if (fe - f < 8) return zfail(p, "the zip archive is damaged (%s)", "short ZIP64 extra field");
            *fields[q] = rd64(f);
            f += 8;
          }
      }
      x += 4 + len;
    }
    c += 46 + nl + xl + cl;
  }
  qsort(p->entries, (size_t)p->nentries, sizeof *p->entries, cmp_entry);
  return CTC_OK;
}

/* The uncompressed bytes of an entry (checked: inside the file, CRC). */
static int zip_data(Pt *p, const ZEntry *e, const unsigned char **out) {
  const unsigned char *b = p->buf;
  char nm[256];
  snprintf(nm, sizeof nm, "%.*s", (int)(e->name_len < 200 ? e->name_len : 200), e->name);
  if (e->local > p->size || p->size - e->local < 30 || rd32(b + e->local) != 0x04034b50)
    return ctc_fail(p->err, CTC_ERR_FORMAT, "the zip archive is truncated or damaged: record '%s' has no local header "
                    "inside the file", nm);
  uint64_t start = e->local + 30 + (uint64_t)rd16(b + e->local + 26) + rd16(b + e->local + 28);
  if (start > p->size || e->csize > p->size - start)
    return ctc_fail(p->err, CTC_ERR_FORMAT, "the zip archive is truncated: record '%s' (%llu bytes at offset %llu) "
                    "runs past the end of the file (%zu bytes)", nm, (unsigned long long)e->csize,
                    (unsigned long long)start, p->size);
  const unsigned char *src = b + start;
  if (e->method == 0) {
    if (e->usize != e->csize)
      return ctc_fail(p->err, CTC_ERR_FORMAT, "the zip archive is damaged: stored record '%s' has two sizes", nm);
    *out = src;
  } else if (e->method == 8) {
#ifdef CTC_NO_ZLIB
    (void)src;
    return ctc_fail(p->err, CTC_ERR_FORMAT, "record '%s' is deflated, and this program was built without zlib (ctc "
                    "build found none for its C compiler): save the checkpoint with torch.save, which stores its "
                    "records, or build where zlib is installed", nm);
#else
    if (e->usize > SIZE_MAX / 2 || e->usize / 1032 > e->csize)   /* deflate compresses at most 1032:1 */
      return ctc_fail(p->err, CTC_ERR_FORMAT, "the zip archive is damaged: record '%s' has a bad size", nm);
    if (p->ninflated == p->capinflated) {
      int ncap = p->capinflated ? p->capinflated * 2 : 16;
      void **ni = realloc(p->inflated, (size_t)ncap * sizeof *ni);
      if (!ni) return nomem(p);
      p->inflated = ni;
      p->capinflated = ncap;
    }
    unsigned char *dst = malloc(e->usize ? (size_t)e->usize : 1);
    if (!dst) return ctc_fail(p->err, CTC_ERR_NOMEM, "out of memory inflating record '%s' (%llu bytes)", nm,
                              (unsigned long long)e->usize);
    p->inflated[p->ninflated++] = dst;
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit2(&z, -MAX_WBITS) != Z_OK) return nomem(p);
    uint64_t in_left = e->csize, out_left = e->usize;
    const unsigned char *ip = src;
    unsigned char *op = dst;
    int zr = Z_OK;
    while (zr == Z_OK) {
      uInt ci = in_left > 1u << 30 ? 1u << 30 : (uInt)in_left, co = out_left > 1u << 30 ? 1u << 30 : (uInt)out_left;
      z.next_in = (Bytef *)ip;
      z.avail_in = ci;
      z.next_out = op;
      z.avail_out = co;
      zr = inflate(&z, Z_NO_FLUSH);
      ip += ci - z.avail_in;
      in_left -= ci - z.avail_in;
      op += co - z.avail_out;
      out_left -= co - z.avail_out;
      if (zr == Z_BUF_ERROR && (in_left == 0 || out_left == 0)) break;
      if (zr == Z_OK && ci == z.avail_in && co == z.avail_out) break;   /* no progress */
    }
    inflateEnd(&z);
    if (zr != Z_STREAM_END || out_left != 0)
      return ctc_fail(p->err, CTC_ERR_FORMAT, "the zip archive is damaged: record '%s' does not inflate to its "
                      "%llu bytes", nm, (unsigned long long)e->usize);
    *out = dst;
#endif
  } else {
    return ctc_fail(p->err, CTC_ERR_FORMAT, "record '%s' uses zip compression method %d (only stored and deflated "
                    "records are read)", nm, e->method);
  }
  if (crc_of(*out, (size_t)e->usize) != e->crc)
    return ctc_fail(p->err, CTC_ERR_FORMAT, "the zip archive is damaged: record '%s' fails its CRC check", nm);
  return CTC_OK;
}

/* ---- storages --------------------------------------------------------------- */

static uint64_t hash_str(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

static Storage **st_slot(Pt *p, const char *key) {
  for (size_t i = hash_str(key) & (p->st_hash_cap - 1);; i = (i + 1) & (p->st_hash_cap - 1))
    if (!p->st_hash[i] || strcmp(p->st_hash[i]->key, key) == 0) return &p->st_hash[i];
}

/* The storage of a persistent id ('storage', torch.XStorage, KEY, LOCATION, NUMEL[, VIEW]). */
static int persistent_load(Pt *p, PV *pid, PV **out) {
  if (pid->kind != V_TUPLE || pid->n < 5 || pid->n > 6 || !is_str(pid->items[0], "storage"))
    return ctc_fail(p->err, CTC_ERR_FORMAT, "%s: a persistent id that is not ('storage', type, key, location, numel)",
                    p->what);
  PV *ty = pid->items[1], *key = pid->items[2], *num = pid->items[4];
  if (ty->kind != V_GLOBAL || ty->i < G_STORAGE)
    return ctc_fail(p->err, CTC_ERR_FORMAT, "%s: a persistent id whose storage type is not a torch.*Storage", p->what);
  if (key->kind != V_STR || num->kind != V_INT || num->i < 0)
    return ctc_fail(p->err, CTC_ERR_FORMAT, "%s: a persistent id with a bad storage key or size", p->what);
  if (pid->n == 6 && pid->items[5]->kind != V_NONE)
    return ctc_fail(p->err, CTC_ERR_FORMAT, "%s: storage '%s' is a view of another storage (pre-1.0 files; "
                    "load and save it again with a newer PyTorch)", p->what, key->s);
  int dt = (int)(ty->i - G_STORAGE);
  if (p->nstorages * 2 >= p->st_hash_cap) {   /* grow the table */
    size_t ncap = p->st_hash_cap ? p->st_hash_cap * 2 : 64;
    Storage **nh = calloc(ncap, sizeof *nh);
    if (!nh) return nomem(p);
    free(p->st_hash);
    p->st_hash = nh;
    p->st_hash_cap = ncap;
    for (Storage *s = p->storages; s; s = s->next) *st_slot(p, s->key) = s;
  }
  Storage **slot = st_slot(p, key->s), *s = *slot;
  if (s) {
    if (s->dtype != dt || s->numel != num->i)
      return ctc_fail(p->err, CTC_ERR_FORMAT, "%s: storage '%s' is named twice with different types or sizes",
                      p->what, key->s);
  } else {
    if (!(s = pt_alloc(p, sizeof *s))) return nomem(p);
    s->dtype = dt;
    s->key = key->s;
    s->numel = num->i;
    *slot = s;
    if (!p->st_last) p->st_last = &p->storages;
    *p->st_last = s;
    p->st_last = &s->next;
    p->nstorages++;
    if (!p->legacy) {   /* the zip record data/KEY, now */
      size_t kl = strlen(key->s);
      char *nm = pt_alloc(p, p->prefix_len + 5 + kl + 1);
      if (!nm) return nomem(p);
      memcpy(nm, p->prefix, p->prefix_len);
      memcpy(nm + p->prefix_len, "data/", 5);
      memcpy(nm + p->prefix_len + 5, key->s, kl);
      const ZEntry *e = zip_find(p, nm, p->prefix_len + 5 + kl);
      if (!e) return ctc_fail(p->err, CTC_ERR_FORMAT, "the archive has no record '%s' for storage '%s'", nm, key->s);
      int rc = zip_data(p, e, &s->data);
      if (rc) return rc;
      uint64_t esz = pt_dtypes[dt].size;
      if ((uint64_t)s->numel > e->usize / esz)
        return ctc_fail(p->err, CTC_ERR_FORMAT, "record '%s' holds %llu bytes, but storage '%s' has %lld %s values "
                        "(%llu bytes)", nm, (unsigned long long)e->usize, key->s, (long long)s->numel,
                        pt_dtypes[dt].name, (unsigned long long)s->numel * esz);
    }
  }
  PV *v = new_value(p, V_STORAGE);
  if (!v) return nomem(p);
  v->st = s;
  *out = v;
  return CTC_OK;
}

/* ---- tensors ---------------------------------------------------------------- */

static int int_tuple(const PV *v, int64_t *out, int *n) {
  if (v->kind != V_TUPLE || v->n > CTC_MAX_DIMS) return 0;
  for (int k = 0; k < v->n; k++) {
    if (v->items[k]->kind != V_INT) return 0;
    out[k] = v->items[k]->i;
  }
  *n = v->n;
  return 1;
}

/* _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks[, metadata]) */
static int rebuild_tensor(Pt *p, PV *args, PV **out) {
  if (args->kind != V_TUPLE || args->n < 4 || args->items[0]->kind != V_STORAGE || args->items[1]->kind != V_INT)
    return ctc_fail(p->err, CTC_ERR_FORMAT, "%s: _rebuild_tensor_v2 called with arguments other than (storage, "
                    "offset, size, stride, ...)", p->what);
  Tensor *t = pt_alloc(p, sizeof *t);
  if (!t) return nomem(p);
  t->st = args->items[0]->st;
  t->offset = args->items[1]->i;
  int ns = 0, nd = 0;
  if (!int_tuple(args->items[2], t->shape, &ns) || !int_tuple(args->items[3], t->stride, &nd) || ns != nd)
    return ctc_fail(p->err, CTC_ERR_FORMAT, "%s: a tensor's size and stride are not tuples of at most %d ints of "
                    "the same length", p->what, CTC_MAX_DIMS);
  t->ndim = ns;
  char sh[128];
  ctc_format_shape(sh, sizeof sh, t->ndim, t->shape);
  int64_t numel = 1, last = t->offset;
  for (int d = 0; d < t->ndim; d++) {
    if (t->shape[d] < 0 || t->stride[d] < 0)
      return ctc_fail(p->err, CTC_ERR_FORMAT, "%s: a tensor of shape %s has a negative size or stride", p->what, sh);
    if (t->shape[d] == 0) numel = 0;
  }
  if (t->offset < 0)
    return ctc_fail(p->err, CTC_ERR_FORMAT, "%s: a tensor of shape %s has a negative storage offset", p->what, sh);
  int over = 0;
  for (int d = 0; d < t->ndim && numel; d++) {
    int64_t span;
    over |= __builtin_mul_overflow(t->shape[d] - 1, t->stride[d], &span);
    over |= __builtin_add_overflow(last, span, &last);
    over |= __builtin_mul_overflow(numel, t->shape[d], &numel);
  }
  if (over || (numel ? last >= t->st->numel : t->offset > t->st->numel))
    return ctc_fail(p->err, CTC_ERR_FORMAT, "%s: a tensor of shape %s at storage offset %lld reads past the end of "
                    "storage '%s' (%lld %s values)", p->what, sh, (long long)t->offset, t->st->key,
                    (long long)t->st->numel, pt_dtypes[t->st->dtype].name);
  PV *v = new_value(p, V_TENSOR);
  if (!v) return nomem(p);
  v->t = t;
  *out = v;
  return CTC_OK;
}

/* A call (REDUCE) of an allowed global. */
static int call_global(Pt *p, PV *fn, PV *args, PV **out) {
  if (fn->kind != V_GLOBAL || fn->i >= G_STORAGE)
    return ctc_fail(p->err, CTC_ERR_FORMAT, "%s: REDUCE calls %s, which is not a function ctc allows", p->what,
                    fn->kind == V_GLOBAL ? "a storage type" : kind_names[fn->kind]);
  if (args->kind != V_TUPLE) return ctc_fail(p->err, CTC_ERR_FORMAT, "%s: REDUCE arguments are not a tuple", p->what);
  switch (fn->i) {
    case G_ODICT:
      if (args->n != 0)
        return ctc_fail(p->err, CTC_ERR_FORMAT, "%s: collections.OrderedDict is called with arguments", p->what);
      return (*out = new_value(p, V_DICT)) ? CTC_OK : nomem(p);
    case G_REBUILD_TENSOR: return rebuild_tensor(p, args, out);
    default:   /* _rebuild_parameter(data, requires_grad, hooks[, state]) */
      if (args->n < 1 || args->items[0]->kind != V_TENSOR)
        return ctc_fail(p->err, CTC_ERR_FORMAT, "%s: _rebuild_parameter is not given a tensor", p->what);
      *out = args->items[0];
      return CTC_OK;
  }
}

static int find_global(Pt *p, const char *mod, size_t ml, const char *name, size_t nl, PV **out) {
  int g = -1;
#define IS(s, l, lit) ((l) == sizeof(lit) - 1 && memcmp((s), (lit), (l)) == 0)
  if (IS(mod, ml, "collections") && IS(name, nl, "OrderedDict")) g = G_ODICT;
  else if (IS(mod, ml, "torch._utils") && IS(name, nl, "_rebuild_tensor_v2")) g = G_REBUILD_TENSOR;
  else if (IS(mod, ml, "torch._utils") && IS(name, nl, "_rebuild_parameter")) g = G_REBUILD_PARAM;
  else if (IS(mod, ml, "torch._utils") && IS(name, nl, "_rebuild_parameter_with_state")) g = G_REBUILD_PARAM_STATE;
  else if (IS(mod, ml, "torch"))
    for (int d = 0; d < PT_NDTYPES; d++)
      if (nl == strlen(pt_dtypes[d].storage) && memcmp(name, pt_dtypes[d].storage, nl) == 0) g = G_STORAGE + d;
#undef IS
  if (g < 0) {
    int cm = ml > 100 ? 100 : (int)ml, cn = nl > 100 ? 100 : (int)nl;
    return ctc_fail(p->err, CTC_ERR_FORMAT, "%s: the pickle names the global '%.*s.%.*s', which ctc does not allow "
                    "(it reads state_dicts only: tensors, OrderedDict, dicts, lists, tuples, numbers, strings; save "
                    "model.state_dict(), not the model)", p->what, cm, mod, cn, name);
  }
  PV *v = new_value(p, V_GLOBAL);
  if (!v) return nomem(p);
  v->i = g;
  *out = v;
  return CTC_OK;
}

/* ---- the unpickler ---------------------------------------------------------- */

static const char *opcode_name(int op) {
  switch (op) {
    case '(': return "MARK"; case '.': return "STOP"; case '0': return "POP"; case '1': return "POP_MARK";
    case '2': return "DUP"; case 'F': return "FLOAT"; case 'I': return "INT"; case 'J': return "BININT";
    case 'K': return "BININT1"; case 'L': return "LONG"; case 'M': return "BININT2"; case 'N': return "NONE";
    case 'P': return "PERSID"; case 'Q': return "BINPERSID"; case 'R': return "REDUCE"; case 'S': return "STRING";
    case 'T': return "BINSTRING"; case 'U': return "SHORT_BINSTRING"; case 'V': return "UNICODE";
    case 'X': return "BINUNICODE"; case 'a': return "APPEND"; case 'b': return "BUILD"; case 'c': return "GLOBAL";
    case 'd': return "DICT"; case '}': return "EMPTY_DICT"; case 'e': return "APPENDS"; case 'g': return "GET";
    case 'h': return "BINGET"; case 'i': return "INST"; case 'j': return "LONG_BINGET"; case 'l': return "LIST";
    case ']': return "EMPTY_LIST"; case 'o': return "OBJ"; case 'p': return "PUT"; case 'q': return "BINPUT";
    case 'r': return "LONG_BINPUT"; case 's': return "SETITEM"; case 't': return "TUPLE"; case ')': return "EMPTY_TUPLE";
    case 'u': return "SETITEMS"; case 'G': return "BINFLOAT"; case 'B': return "BINBYTES"; case 'C': return "SHORT_BINBYTES";
    case 0x80: return "PROTO"; case 0x81: return "NEWOBJ"; case 0x82: return "EXT1"; case 0x83: return "EXT2";
    case 0x84: return "EXT4"; case 0x85: return "TUPLE1"; case 0x86: return "TUPLE2"; case 0x87: return "TUPLE3";
    case 0x88: return "NEWTRUE"; case 0x89: return "NEWFALSE"; case 0x8a: return "LONG1"; case 0x8b: return "LONG4";
    case 0x8c: return "SHORT_BINUNICODE"; case 0x8d: return "BINUNICODE8"; case 0x8e: return "BINBYTES8";
    case 0x8f: return "EMPTY_SET"; case 0x90: return "ADDITEMS"; case 0x91: return "FROZENSET"; case 0x92: return "NEWOBJ_EX";
    case 0x93: return "STACK_GLOBAL"; case 0x94: return "MEMOIZE"; case 0x95: return "FRAME";
    case 0x96: return "BYTEARRAY8"; case 0x97: return "NEXT_BUFFER"; case 0x98: return "READONLY_BUFFER";
    default: return NULL;
  }
}

static int push(Pt *p, PV *v) {
  if (!v) return nomem(p);
  if (p->sp == p->stack_cap) {
    size_t ncap = p->stack_cap ? p->stack_cap * 2 : 64;
    PV **ns = realloc(p->stack, ncap * sizeof *ns);
    if (!ns) return nomem(p);
    p->stack = ns;
    p->stack_cap = ncap;
  }
  p->stack[p->sp++] = v;
  return CTC_OK;
}

/* Decodes a pickle from b[0..n) into *out; *used: the bytes up to and including STOP. */
static int unpickle(Pt *p, const unsigned char *b, size_t n, size_t *used, PV **out) {
  size_t i = 0, base = p->sp;
  p->nmarks = 0;
  /* memo keys: a pickler numbers them 0, 1, ..., so a key is at most the number of puts before it */
  free(p->memo);
  p->memo = NULL;
  p->memo_cap = p->nputs = 0;
#define FAIL(...) return ctc_fail(p->err, CTC_ERR_FORMAT, __VA_ARGS__)
#define NEED(k)                                                                                        \
  do {                                                                                                 \
    if (n - i < (size_t)(k)) FAIL("%s is truncated (opcode %s at byte %zu)", p->what, name, at);       \
  } while (0)
#define DEPTH(k)                                                                                       \
  do {                                                                                                 \
    if (p->sp - top_base < (size_t)(k)) FAIL("%s: opcode %s at byte %zu finds too few values on the stack", p->what, name, at); \
  } while (0)
  for (;;) {
    if (i >= n) FAIL("%s is truncated (no STOP opcode)", p->what);
    size_t at = i;
    int op = b[i++];
    const char *name = opcode_name(op);
    size_t top_base = p->nmarks ? p->marks[p->nmarks - 1] : base;
    PV *v = NULL, *a, *c;
    int rc = CTC_OK;
    switch (op) {
      case 0x80: NEED(1); if (b[i] > 5) FAIL("%s: pickle protocol %d is not supported", p->what, b[i]); i++; break;
      case 0x95: NEED(8); i += 8; break;   /* FRAME: the frame's bytes follow inline */
      case '.': {
        if (p->nmarks) FAIL("%s: STOP at byte %zu inside a MARK", p->what, at);
        if (p->sp != base + 1) FAIL("%s: STOP at byte %zu with %zu values on the stack", p->what, at, p->sp - base);
        *out = p->stack[--p->sp];
        *used = i;
        return CTC_OK;
      }
      case '(':
        if (p->nmarks == p->marks_cap) {
          size_t ncap = p->marks_cap ? p->marks_cap * 2 : 16;
          size_t *nm = realloc(p->marks, ncap * sizeof *nm);
          if (!nm) return nomem(p);
          p->marks = nm;
          p->marks_cap = ncap;
        }
        p->marks[p->nmarks++] = p->sp;
        break;
      case '0': DEPTH(1); p->sp--; break;
      case '1': if (!p->nmarks) FAIL("%s: POP_MARK at byte %zu without MARK", p->what, at); p->sp = p->marks[--p->nmarks]; break;
      case 'N': rc = push(p, new_value(p, V_NONE)); break;
      case 0x88: case 0x89:
        if ((v = new_value(p, V_BOOL))) v->i = op == 0x88;
        rc = push(p, v);
        break;
      case 'J': case 'K': case 'M': {
        size_t k = op == 'J' ? 4 : op == 'K' ? 1 : 2;
        NEED(k);
        int64_t x = op == 'J' ? (int64_t)(int32_t)rd32(b + i) : op == 'K' ? b[i] : rd16(b + i);
        i += k;
        if ((v = new_value(p, V_INT))) v->i = x;
        rc = push(p, v);
        break;
      }
      case 0x8a: {   /* LONG1: little-endian two's complement of n bytes */
        NEED(1);
        size_t k = b[i++];
        NEED(k);
        if (k > 8) FAIL("%s: an integer of %zu bytes at byte %zu is too large", p->what, k, at);
        uint64_t u = 0;
        for (size_t q = 0; q < k; q++) u |= (uint64_t)b[i + q] << (8 * q);
        if (k > 0 && k < 8 && (b[i + k - 1] & 0x80)) u |= ~(uint64_t)0 << (8 * k);   /* sign-extend */
        i += k;
        if ((v = new_value(p, V_INT))) memcpy(&v->i, &u, sizeof u);
        rc = push(p, v);
        break;
      }
      case 'G': {   /* BINFLOAT: big-endian double */
        NEED(8);
        uint64_t u = 0;
        for (int q = 0; q < 8; q++) u = u << 8 | b[i + q];
        i += 8;
        if ((v = new_value(p, V_FLOAT))) memcpy(&v->f, &u, sizeof u);
        rc = push(p, v);
        break;
      }
      case 'X': case 0x8c: case 0x8d: {   /* BINUNICODE, SHORT_BINUNICODE, BINUNICODE8 */
        size_t k = op == 'X' ? 4 : op == 0x8c ? 1 : 8;
        NEED(k);
        uint64_t len = k == 4 ? rd32(b + i) : k == 1 ? b[i] : rd64(b + i);
        i += k;
        if (len > n - i) FAIL("%s is truncated (a string of %llu bytes at byte %zu)", p->what, (unsigned long long)len, at);
        char *s = pt_alloc(p, (size_t)len + 1);
        if (!s) return nomem(p);
        memcpy(s, b + i, (size_t)len);
        i += (size_t)len;
        if ((v = new_value(p, V_STR))) {
          v->s = s;
          v->len = (size_t)len;
        }
        rc = push(p, v);
        break;
      }
      case 'c': {   /* GLOBAL module\nname\n */
        const unsigned char *m = b + i, *e1 = memchr(m, '\n', n - i);
        if (!e1) FAIL("%s is truncated (GLOBAL at byte %zu)", p->what, at);
        const unsigned char *nm = e1 + 1, *e2 = memchr(nm, '\n', n - (size_t)(nm - b));
        if (!e2) FAIL("%s is truncated (GLOBAL at byte %zu)", p->what, at);
        i = (size_t)(e2 + 1 - b);
        if ((rc = find_global(p, (const char *)m, (size_t)(e1 - m), (const char *)nm, (size_t)(e2 - nm), &v))) return rc;
        rc = push(p, v);
        break;
      }
      case 0x93: {   /* STACK_GLOBAL: module and name strings on the stack */
        DEPTH(2);
        PV *mo = p->stack[p->sp - 2], *na = p->stack[p->sp - 1];
        if (mo->kind != V_STR || na->kind != V_STR) FAIL("%s: STACK_GLOBAL at byte %zu without two strings", p->what, at);
        p->sp -= 2;
        if ((rc = find_global(p, mo->s, mo->len, na->s, na->len, &v))) return rc;
        rc = push(p, v);
        break;
      }
      case ')': rc = push(p, new_value(p, V_TUPLE)); break;
      case ']': rc = push(p, new_value(p, V_LIST)); break;
      case '}': rc = push(p, new_value(p, V_DICT)); break;
      case 't': case 'l': case 'd': {   /* TUPLE, LIST, DICT from MARK */
        if (!p->nmarks) FAIL("%s: %s at byte %zu without MARK", p->what, name, at);
        size_t m = p->marks[--p->nmarks];
        if (!(v = new_value(p, op == 't' ? V_TUPLE : op == 'l' ? V_LIST : V_DICT))) return nomem(p);
        if (op == 'd' && (p->sp - m) % 2) FAIL("%s: DICT at byte %zu with an odd number of values", p->what, at);
        for (size_t q = m; q < p->sp && rc == CTC_OK; q += op == 'd' ? 2 : 1)
          rc = op == 'd' ? dict_set(p, v, p->stack[q], p->stack[q + 1]) : append(p, v, p->stack[q]);
        if (rc) return rc;
        p->sp = m;
        rc = push(p, v);
        break;
      }
      case 0x85: case 0x86: case 0x87: {   /* TUPLE1..3 */
        int k = op - 0x84;
        DEPTH(k);
        if (!(v = new_value(p, V_TUPLE))) return nomem(p);
        for (int q = 0; q < k && rc == CTC_OK; q++) rc = append(p, v, p->stack[p->sp - (size_t)k + (size_t)q]);
        if (rc) return rc;
        p->sp -= (size_t)k;
        rc = push(p, v);
        break;
      }
      case 'a': case 'e': {   /* APPEND, APPENDS */
        size_t m = op == 'a' ? p->sp - 1 : 0;
        if (op == 'a') DEPTH(2);
        else {
          if (!p->nmarks) FAIL("%s: APPENDS at byte %zu without MARK", p->what, at);
          m = p->marks[--p->nmarks];
          top_base = p->nmarks ? p->marks[p->nmarks - 1] : base;
          if (m <= top_base) FAIL("%s: APPENDS at byte %zu finds no list", p->what, at);
        }
        c = p->stack[m - 1];
        if (c->kind != V_LIST) FAIL("%s: %s at byte %zu appends to %s, not a list", p->what, name, at, kind_names[c->kind]);
        for (size_t q = m; q < p->sp && rc == CTC_OK; q++) rc = append(p, c, p->stack[q]);
        if (rc) return rc;
        p->sp = m;
        break;
      }
      case 's': case 'u': {   /* SETITEM, SETITEMS */
        size_t m = p->sp - 2;
        if (op == 's') DEPTH(3);
        else {
          if (!p->nmarks) FAIL("%s: SETITEMS at byte %zu without MARK", p->what, at);
          m = p->marks[--p->nmarks];
          top_base = p->nmarks ? p->marks[p->nmarks - 1] : base;
          if (m <= top_base) FAIL("%s: SETITEMS at byte %zu finds no dict", p->what, at);
          if ((p->sp - m) % 2) FAIL("%s: SETITEMS at byte %zu with an odd number of values", p->what, at);
        }
        c = p->stack[m - 1];
        if (c->kind != V_DICT) FAIL("%s: %s at byte %zu sets an item of %s, not a dict", p->what, name, at, kind_names[c->kind]);
        for (size_t q = m; q < p->sp && rc == CTC_OK; q += 2) rc = dict_set(p, c, p->stack[q], p->stack[q + 1]);
        if (rc) return rc;
        p->sp = m;
        break;
      }
      case 'q': case 'r': case 0x94: {   /* BINPUT, LONG_BINPUT, MEMOIZE */
        uint64_t key = p->nputs;
        if (op != 0x94) {
          size_t k = op == 'q' ? 1 : 4;
          NEED(k);
          key = k == 1 ? b[i] : rd32(b + i);
          i += k;
        }
        DEPTH(1);
        if (key > p->nputs) FAIL("%s: memo key %llu at byte %zu is too large", p->what, (unsigned long long)key, at);
        if (key >= p->memo_cap) {
          size_t ncap = p->memo_cap ? p->memo_cap * 2 : 64;
          if (ncap <= key) ncap = (size_t)key + 1;
          PV **nm = realloc(p->memo, ncap * sizeof *nm);
          if (!nm) return nomem(p);
          memset(nm + p->memo_cap, 0, (ncap - p->memo_cap) * sizeof *nm);
          p->memo = nm;
          p->memo_cap = ncap;
        }
        p->memo[key] = p->stack[p->sp - 1];
        p->nputs++;
        break;
      }
      case 'h': case 'j': {   /* BINGET, LONG_BINGET */
        size_t k = op == 'h' ? 1 : 4;
        NEED(k);
        uint64_t key = k == 1 ? b[i] : rd32(b + i);
        i += k;
        if (key >= p->memo_cap || !p->memo[key]) FAIL("%s: %s at byte %zu reads memo key %llu, which was never set", p->what, name, at, (unsigned long long)key);
        rc = push(p, p->memo[key]);
        break;
      }
      case 'Q': {   /* BINPERSID */
        DEPTH(1);
        if ((rc = persistent_load(p, p->stack[p->sp - 1], &v))) return rc;
        p->stack[p->sp - 1] = v;
        break;
      }
      case 'R': {   /* REDUCE */
        DEPTH(2);
        a = p->stack[p->sp - 1];
        if ((rc = call_global(p, p->stack[p->sp - 2], a, &v))) return rc;
        p->sp--;
        p->stack[p->sp - 1] = v;
        break;
      }
      case 'b': {   /* BUILD: the state of an OrderedDict (its _metadata) or a Parameter: kept out */
        DEPTH(2);
        c = p->stack[p->sp - 2];
        if (c->kind != V_DICT && c->kind != V_TENSOR)
          FAIL("%s: BUILD at byte %zu sets the state of %s (only dicts and tensors may have one)", p->what, at, kind_names[c->kind]);
        p->sp--;
        break;
      }
      default:
        if (name)
          FAIL("%s: the pickle opcode %s (0x%02x) at byte %zu is not allowed (ctc reads state_dicts only)", p->what,
               name, op, at);
        FAIL("%s: byte %zu holds 0x%02x, which is not a pickle opcode", p->what, at, op);
    }
    if (rc) return rc;
  }
#undef FAIL
#undef NEED
#undef DEPTH
}

/* ---- choosing the dict of tensors ------------------------------------------- */

static const char *const strip_prefixes[] = {"", "_orig_mod.", "module."};
enum { NPREFIX = 3 };

/* Number of string-keyed tensor values in dict d (cached in d->i: the pickle is complete). */
static int count_tensors(PV *d) {
  if (!d || d->kind != V_DICT) return 0;
  if (d->i == 0) {
    int k = 0;
    for (int q = 0; q < d->n; q++) k += d->items[2 * q]->kind == V_STR && d->items[2 * q + 1]->kind == V_TENSOR;
    d->i = k + 1;
  }
  return (int)d->i - 1;
}

/* How many wanted names d holds, with prefix strip_prefixes[pre]. */
static int score(const PV *d, int nnames, const char *const *names, int pre, char *tmp, size_t tmpn) {
  int hits = 0;
  for (int w = 0; w < nnames; w++) {
    if (snprintf(tmp, tmpn, "%s%s", strip_prefixes[pre], names[w]) >= (int)tmpn) continue;
    PV *v = dict_get(d, tmp);
    hits += v && v->kind == V_TENSOR;
  }
  return hits;
}

/* A short list of d's string keys for messages. */
static void list_keys(PV *d, char *buf, size_t n, int tensors_only) {
  size_t len = 0;
  buf[0] = 0;
  int shown = 0;
  for (int q = 0; q < d->n && len + 40 < n; q++) {
    PV *k = d->items[2 * q], *v = d->items[2 * q + 1];
    if (k->kind != V_STR || (tensors_only && count_tensors(v) == 0)) continue;
    len += (size_t)snprintf(buf + len, n - len, "%s'%.60s'", shown++ ? ", " : "", k->s);
  }
  if (!shown) snprintf(buf, n, "none");
}

static int select_dict(Pt *p, PV *root, const char *key, int nnames, const char *const *names, PV **out, int *pre) {
  char keys[512];
  *pre = 0;
  if (root->kind != V_DICT)
    return ctc_fail(p->err, CTC_ERR_FORMAT, "the checkpoint holds %s, not a dict of tensors (a state_dict)",
                    kind_names[root->kind]);
  if (key) {
    PV *d = dict_get(root, key);
    list_keys(root, keys, sizeof keys, 0);
    if (!d) return ctc_fail(p->err, CTC_ERR_MISSING, "the checkpoint has no key '%s' (its keys: %s)", key, keys);
    if (d->kind == V_DICT && count_tensors(d) == 0)
      return ctc_fail(p->err, CTC_ERR_FORMAT, "'%s' in the checkpoint is a dict with no tensor values (not a "
                      "state_dict)", key);
    if (d->kind != V_DICT)
      return ctc_fail(p->err, CTC_ERR_FORMAT, "'%s' in the checkpoint is %s, not a dict of tensors (a state_dict)",
                      key, kind_names[d->kind]);
    *out = d;
  } else {
    /* candidates: the top level, then each top-level dict of tensors */
    PV *best = NULL;
    int best_score = 0, ncand = 0;
    PV *only = NULL;
    char tmp[1024];
    for (int q = -1; q < root->n; q++) {
      PV *d = q < 0 ? root : root->items[2 * q + 1];
      if (q >= 0 && root->items[2 * q]->kind != V_STR) continue;
      if (count_tensors(d) == 0 || d->f != 0) continue;   /* f marks a dict seen (memo may repeat one) */
      d->f = 1;
      if (q >= 0) {
        ncand++;
        only = d;
      }
      for (int pr = 0, plain = 0; pr < NPREFIX && plain < nnames; pr++) {   /* prefixes only if names lack */
        int s = score(d, nnames, names, pr, tmp, sizeof tmp);
        if (pr == 0) plain = s;
        if (s > best_score) best = d, best_score = s, *pre = pr;
      }
    }
    if (!best) {   /* no name matches: the top level, or the one nested dict with more tensors */
      *pre = 0;
      if (ncand == 0 && count_tensors(root)) best = root;
      else if (ncand == 1) best = count_tensors(root) > count_tensors(only) ? root : only;
      else if (ncand == 0) {
        list_keys(root, keys, sizeof keys, 0);
        return ctc_fail(p->err, CTC_ERR_FORMAT, "the checkpoint holds no dict of tensors, at the top level or under "
                        "a key (its keys: %s)", keys);
      } else {
        list_keys(root, keys, sizeof keys, 1);
        return ctc_fail(p->err, CTC_ERR_FORMAT, "the checkpoint holds several dicts of tensors (%s): name one as "
                        "FILE:KEY", keys);
      }
    }
    *out = best;
  }
  return CTC_OK;
}

/* ---- materialising ------------------------------------------------------------ */

/* Element k of storage s, as the bytes of dtype pt_dtypes[s->dtype].to at dst. */
static int convert_elem(const Storage *s, int64_t k, unsigned char *dst) {
  const unsigned char *src = s->data + (size_t)k * pt_dtypes[s->dtype].size;
  switch (s->dtype) {
    case PT_I16: { int32_t x = (int16_t)rd16(src); memcpy(dst, &x, 4); return 1; }
    case PT_I8: { int32_t x = (int8_t)src[0]; memcpy(dst, &x, 4); return 1; }
    case PT_BOOL: dst[0] = src[0]; return src[0] <= 1;
    default: memcpy(dst, src, pt_dtypes[s->dtype].size); return 1;
  }
}

/* Copies tensor t (any strides) into dst, contiguous, in its ctc dtype. */
static int gather(Pt *p, const Tensor *t, const char *name, unsigned char *dst) {
  const Storage *s = t->st;
  int64_t numel = 1, idx[CTC_MAX_DIMS] = {0};
  for (int d = 0; d < t->ndim; d++) numel *= t->shape[d];
  if (numel == 0) return CTC_OK;
  if (!s->data)
    return ctc_fail(p->err, CTC_ERR_FORMAT, "tensor '%s': the file holds no data for storage '%s'", name, s->key);
  size_t osz = ctc_dtype_size(pt_dtypes[s->dtype].to) * (s->dtype == PT_C64 ? 2 : 1), isz = pt_dtypes[s->dtype].size;
  int contiguous = 1;
  int64_t expect = 1;
  for (int d = t->ndim - 1; d >= 0; d--) {
    if (t->shape[d] != 1 && t->stride[d] != expect) contiguous = 0;
    expect *= t->shape[d];
  }
  if (contiguous && osz == isz && s->dtype != PT_BOOL) {
    memcpy(dst, s->data + (size_t)t->offset * isz, (size_t)numel * isz);
    return CTC_OK;
  }
  int64_t pos = t->offset;
  for (int64_t k = 0; k < numel; k++) {
    if (!convert_elem(s, pos, dst + (size_t)k * osz))
      return ctc_fail(p->err, CTC_ERR_FORMAT, "tensor '%s': bool data holds a byte other than 0 or 1", name);
    for (int d = t->ndim - 1; d >= 0; d--) {   /* the next index, row-major */
      pos += t->stride[d];
      if (++idx[d] < t->shape[d]) break;
      pos -= t->stride[d] * t->shape[d];
      idx[d] = 0;
    }
  }
  return CTC_OK;
}

typedef struct Pick {
  const char *name;   /* the name written out (a prefix stripped) */
  int q;              /* its entry in the dict */
} Pick;

static int cmp_pick_name(const void *a, const void *b) {
  const Pick *x = a, *y = b;
  int c = strcmp(x->name, y->name);
  return c ? c : (x->q > y->q) - (x->q < y->q);
}
static int cmp_pick_q(const void *a, const void *b) {
  const Pick *x = a, *y = b;
  return (x->q > y->q) - (x->q < y->q);
}

/* st <- the tensors of dict d, contiguous in one buffer (data 64-byte aligned, then names). */
static int materialise(Pt *p, const PV *d, int pre, ctc_safetensors *st) {
  int n = 0;
  Pick *pk = malloc((size_t)(d->n ? d->n : 1) * sizeof *pk);
  if (!pk) return nomem(p);
  size_t plen = strlen(strip_prefixes[pre]);
  for (int q = 0; q < d->n; q++) {
    PV *k = d->items[2 * q], *v = d->items[2 * q + 1];
    if (k->kind != V_STR || v->kind != V_TENSOR) continue;
    if (strlen(k->s) != k->len) { /* names are C strings everywhere after this */
      char esc[256];
      ctc_escape_name(esc, sizeof esc, k->s, k->len);
      free(pk);
      return ctc_fail(p->err, CTC_ERR_FORMAT, "tensor name '%s' contains a NUL byte, which ctc does not support in names",
                      esc);
    }
    pk[n].name = plen && strncmp(k->s, strip_prefixes[pre], plen) == 0 ? k->s + plen : k->s;
    pk[n++].q = q;
  }
  /* a name given twice: the last one counts, as in the Python dict */
  qsort(pk, (size_t)n, sizeof *pk, cmp_pick_name);
  int m = 0;
  for (int k = 0; k < n; k++)
    if (k + 1 == n || strcmp(pk[k].name, pk[k + 1].name) != 0) pk[m++] = pk[k];
  n = m;
  qsort(pk, (size_t)n, sizeof *pk, cmp_pick_q);
  size_t total = 0;
  int rc = CTC_OK;
  st->tensors = calloc((size_t)(n ? n : 1), sizeof *st->tensors);
  if (!st->tensors) rc = nomem(p);
  for (int k = 0; k < n && rc == CTC_OK; k++) {
    const Tensor *t = d->items[2 * pk[k].q + 1]->t;
    ctc_tensor *o = &st->tensors[k];
    o->dtype = pt_dtypes[t->st->dtype].to;
    o->ndim = t->ndim;
    memcpy(o->shape, t->shape, sizeof o->shape);
    if (t->st->dtype == PT_C64) {   /* complex64: its parts as a trailing dimension of 2 */
      if (t->ndim + 1 > CTC_MAX_DIMS) {
        rc = ctc_fail(p->err, CTC_ERR_FORMAT, "tensor '%s': a complex64 tensor of %d dimensions is more than ctc's %d "
                      "as float32 parts", pk[k].name, t->ndim, CTC_MAX_DIMS - 1);
        break;
      }
      o->shape[o->ndim++] = 2;
      o->complex64 = 1;
    }
    size_t bytes = ctc_tensor_bytes(o), nl = strlen(pk[k].name) + 1;
    if (bytes == SIZE_MAX || bytes > SIZE_MAX / 2 - total - 64 - nl) {
      rc = ctc_fail(p->err, CTC_ERR_FORMAT, "tensor '%s' is too large", pk[k].name);
      break;
    }
    o->offset = total;
    total += (bytes + 63) & ~(size_t)63;
  }
  size_t names_at = total;
  /* many names for one storage (memo references) could make a small file ask for any size */
  if (!rc && total / 64 > p->size + (1u << 20))
    rc = ctc_fail(p->err, CTC_ERR_FORMAT, "the tensors would take %zu bytes, more than 64 times the file's size "
                  "(%zu bytes): too many names for the same data", total, p->size);
  for (int k = 0; k < n && rc == CTC_OK; k++) total += strlen(pk[k].name) + 1;
  unsigned char *buf = rc ? NULL : malloc(total ? total : 1);
  if (!rc && !buf) rc = ctc_fail(p->err, CTC_ERR_NOMEM, "out of memory: the tensors need %zu bytes", total);
  for (int k = 0; k < n && rc == CTC_OK; k++) {
    ctc_tensor *o = &st->tensors[k];
    size_t nl = strlen(pk[k].name) + 1;
    memcpy(buf + names_at, pk[k].name, nl);
    o->name = (const char *)buf + names_at;
    names_at += nl;
    o->data = buf + o->offset;
    o->offset = 0;
    rc = gather(p, d->items[2 * pk[k].q + 1]->t, o->name, o->data);
  }
  free(pk);
  if (rc) {
    free(buf);
    free(st->tensors);
    memset(st, 0, sizeof *st);
    return rc;
  }
  st->buf = buf;
  st->size = total;
  st->ntensors = n;
  return CTC_OK;
}

/* ---- the two containers --------------------------------------------------------- */

static const unsigned char legacy_magic[15] = {0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20,
                                               0x6a, 0xa8, 0x50, 0x19, 0x2e};

int ctc_pt_sniff(const void *buf, size_t size) {
  const unsigned char *b = buf;
  if (size >= 4 && b[0] == 'P' && b[1] == 'K' && ((b[2] == 3 && b[3] == 4) || (b[2] == 5 && b[3] == 6))) return 1;
  if (size >= 4 && memcmp(b, legacy_magic, 4) == 0) return 2;
  if (size >= 262 && memcmp(b + 257, "ustar", 5) == 0) return 3;
  return 0;
}

static int read_zip(Pt *p, PV **root) {
  int rc = zip_open(p);
  if (rc) return rc;
  /* PREFIX/data.pkl, PREFIX the archive's one folder */
  const ZEntry *pkl = NULL;
  for (int k = 0; k < p->nentries && !pkl; k++) {
    const ZEntry *e = &p->entries[k];
    const char *slash = memchr(e->name, '/', e->name_len);
    if (slash && (size_t)(e->name + e->name_len - slash) == 9 && memcmp(slash, "/data.pkl", 9) == 0) pkl = e;
  }
  if (!pkl) return ctc_fail(p->err, CTC_ERR_FORMAT, "the zip archive has no data.pkl record (not a torch.save file)");
  p->prefix = pkl->name;
  p->prefix_len = pkl->name_len - 8;
  char bo[64];
  snprintf(bo, sizeof bo, "%.*sbyteorder", (int)(p->prefix_len < 40 ? p->prefix_len : 40), p->prefix);
  const ZEntry *be = p->prefix_len < 40 ? zip_find(p, bo, strlen(bo)) : NULL;
  const unsigned char *bytes;
  if (be) {
    if ((rc = zip_data(p, be, &bytes))) return rc;
    if (be->usize == 3 && memcmp(bytes, "big", 3) == 0)
      return ctc_fail(p->err, CTC_ERR_FORMAT, "the checkpoint was saved on a big-endian machine (not supported)");
  }
  if ((rc = zip_data(p, pkl, &bytes))) return rc;
  size_t used;
  if ((rc = unpickle(p, bytes, (size_t)pkl->usize, &used, root))) return rc;
  return CTC_OK;
}

static int read_legacy(Pt *p, PV **root) {
  const unsigned char *b = p->buf;
  size_t n = p->size, i = sizeof legacy_magic, used;
  PV *v;
  int rc;
  p->legacy = 1;
  if (n < i || memcmp(b, legacy_magic, i) != 0)
    return ctc_fail(p->err, CTC_ERR_FORMAT, "not a PyTorch file (bad legacy magic number)");
  p->what = "the protocol version";
  if ((rc = unpickle(p, b + i, n - i, &used, &v))) return rc;
  if (v->kind != V_INT || v->i != 1001)
    return ctc_fail(p->err, CTC_ERR_FORMAT, "legacy checkpoint with an unknown protocol version");
  i += used;
  p->what = "sys_info";
  if ((rc = unpickle(p, b + i, n - i, &used, &v))) return rc;
  i += used;
  PV *le = v->kind == V_DICT ? dict_get(v, "little_endian") : NULL;
  if (le && (le->kind != V_BOOL || !le->i))
    return ctc_fail(p->err, CTC_ERR_FORMAT, "the checkpoint was saved on a big-endian machine (not supported)");
  p->what = "the checkpoint's pickle";
  if ((rc = unpickle(p, b + i, n - i, &used, root))) return rc;
  i += used;
  p->what = "the storage key list";
  if ((rc = unpickle(p, b + i, n - i, &used, &v))) return rc;
  i += used;
  if (v->kind != V_LIST) return ctc_fail(p->err, CTC_ERR_FORMAT, "legacy checkpoint: the storage keys are not a list");
  for (int k = 0; k < v->n; k++) {
    PV *key = v->items[k];
    if (key->kind != V_STR) return ctc_fail(p->err, CTC_ERR_FORMAT, "legacy checkpoint: a storage key is not a string");
    Storage *s = p->st_hash_cap ? *st_slot(p, key->s) : NULL;
    if (!s) return ctc_fail(p->err, CTC_ERR_FORMAT, "legacy checkpoint: storage '%s' is listed but not used", key->s);
    if (n - i < 8)
      return ctc_fail(p->err, CTC_ERR_FORMAT, "the checkpoint is truncated (storage '%s' at byte %zu)", key->s, i);
    uint64_t cnt = rd64(b + i);
    i += 8;
    size_t esz = pt_dtypes[s->dtype].size;
    if (cnt != (uint64_t)s->numel)
      return ctc_fail(p->err, CTC_ERR_FORMAT, "legacy checkpoint: storage '%s' holds %llu values, the pickle says %lld",
                      key->s, (unsigned long long)cnt, (long long)s->numel);
    if (cnt > (n - i) / esz)
      return ctc_fail(p->err, CTC_ERR_FORMAT, "the checkpoint is truncated: storage '%s' (%llu %s values at byte %zu) "
                      "runs past the end of the file (%zu bytes)", key->s, (unsigned long long)cnt,
                      pt_dtypes[s->dtype].name, i, n);
    if (!s->data) s->data = b + i;
    i += (size_t)cnt * esz;
  }
  return CTC_OK;
}

int ctc_pt_parse(ctc_safetensors *st, void *buf, size_t size, const char *key, int nnames, const char *const *names,
                 ctc_error *err) {
  if (!st || (!buf && size)) {
    free(buf);
    return ctc_fail(err, CTC_ERR_ARG, "ctc_pt_parse: NULL argument");
  }
  memset(st, 0, sizeof *st);
  Pt p;
  memset(&p, 0, sizeof p);
  p.err = err;
  p.buf = buf;
  p.size = size;
  p.what = "data.pkl";
  PV *root = NULL, *d = NULL;
  int pre = 0, rc, kind = ctc_pt_sniff(buf, size);
  if (kind == 1) rc = read_zip(&p, &root);
  else if (kind == 2) rc = read_legacy(&p, &root);
  else if (kind == 3)
    rc = ctc_fail(err, CTC_ERR_FORMAT, "a checkpoint in PyTorch's pre-0.4 tar format (not supported: load and save it "
                  "again with a newer PyTorch)");
  else rc = ctc_fail(err, CTC_ERR_FORMAT, "not a PyTorch checkpoint (neither a torch.save zip archive nor the legacy format)");
  if (!rc) rc = select_dict(&p, root, key, names ? nnames : 0, names, &d, &pre);
  if (!rc) rc = materialise(&p, d, pre, st);
  pt_free(&p);
  free(buf);
  return rc;
}

int ctc_pt_read(ctc_safetensors *st, const char *path, const char *key, int nnames, const char *const *names,
                ctc_error *err) {
  void *buf;
  size_t size;
  if (st) memset(st, 0, sizeof *st);
  int rc = ctc_read_file(path, &buf, &size, err);
  if (rc) return rc;
  rc = ctc_pt_parse(st, buf, size, key, nnames, names, err);
  if (rc) ctc_error_prefix(err, path);
  return rc;
}

int ctc_weights_read(ctc_safetensors *st, const char *spec, int nnames, const char *const *names, ctc_error *err) {
  if (!st || !spec) return ctc_fail(err, CTC_ERR_ARG, "ctc_weights_read: NULL argument");
  memset(st, 0, sizeof *st);
  /* FILE:KEY, unless FILE:KEY is itself a file */
  struct stat sb;
  const char *colon = strrchr(spec, ':'), *key = NULL;
  char *path = NULL;
  if (colon && stat(spec, &sb) != 0) {
    if (!(path = malloc((size_t)(colon - spec) + 1))) return ctc_fail(err, CTC_ERR_NOMEM, "out of memory");
    memcpy(path, spec, (size_t)(colon - spec));
    path[colon - spec] = 0;
    key = colon + 1;
    if (stat(path, &sb) != 0) {   /* neither exists: report the whole name */
      free(path);
      path = NULL;
      key = NULL;
    }
  }
  const char *file = path ? path : spec;
  void *buf;
  size_t size;
  int rc = ctc_read_file(file, &buf, &size, err);
  if (!rc) {
    if (ctc_pt_sniff(buf, size)) rc = ctc_pt_parse(st, buf, size, key, nnames, names, err);
    else if (key) {
      free(buf);
      rc = ctc_fail(err, CTC_ERR_ARG, "':%s' names a key of a PyTorch checkpoint, but this is not one", key);
    } else {
      size_t fl = strlen(file);
      int pt_name = (fl > 3 && !strcmp(file + fl - 3, ".pt")) || (fl > 4 && !strcmp(file + fl - 4, ".pth")) ||
                    (fl > 5 && !strcmp(file + fl - 5, ".ckpt"));
      if ((rc = ctc_st_parse(st, buf, size, err)) && pt_name)
        ctc_error_prefix(err, "neither a PyTorch checkpoint (torch.save) nor a safetensors file");
    }
    if (rc) ctc_error_prefix(err, file);
  }
  free(path);
  return rc;
}

/* ---- writing ---------------------------------------------------------------------- */

typedef struct Out {
  unsigned char *s;
  size_t len, cap;
  int failed;
} Out;

static void out_add(Out *o, const void *data, size_t n) {
  if (o->failed) return;
  if (n > SIZE_MAX / 2 - o->len) {
    o->failed = 1;
    return;
  }
  if (o->len + n > o->cap) {
    size_t cap = o->cap ? o->cap : 4096;
    while (cap < o->len + n) cap *= 2;
    unsigned char *ns = realloc(o->s, cap);
    if (!ns) {
      o->failed = 1;
      return;
    }
    o->s = ns;
    o->cap = cap;
  }
  memcpy(o->s + o->len, data, n);
  o->len += n;
}
static void out_byte(Out *o, int c) {
  unsigned char b = (unsigned char)c;
  out_add(o, &b, 1);
}
static void out_le(Out *o, uint64_t v, int n) {
  unsigned char b[8];
  for (int k = 0; k < n; k++) b[k] = (unsigned char)(v >> (8 * k));
  out_add(o, b, (size_t)n);
}
static void pk_int(Out *o, int64_t v) {
  if (v >= 0 && v < 256) out_byte(o, 'K'), out_byte(o, (int)v);
  else if (v >= 0 && v < 65536) out_byte(o, 'M'), out_le(o, (uint64_t)v, 2);
  else if (v >= INT32_MIN && v <= INT32_MAX) out_byte(o, 'J'), out_le(o, (uint64_t)v, 4);
  else out_byte(o, 0x8a), out_byte(o, 8), out_le(o, (uint64_t)v, 8);
}
static void pk_str(Out *o, const char *s) {
  size_t n = strlen(s);
  out_byte(o, 'X');
  out_le(o, n, 4);
  out_add(o, s, n);
}
static void pk_global(Out *o, const char *mod_name, uint32_t *memo, uint32_t *next) {
  if (*memo) {   /* LONG_BINGET memo - 1 */
    out_byte(o, 'j');
    out_le(o, *memo - 1, 4);
    return;
  }
  out_byte(o, 'c');
  out_add(o, mod_name, strlen(mod_name));
  out_byte(o, 'r');   /* LONG_BINPUT */
  out_le(o, *next, 4);
  *memo = ++*next;
}

static int pt_storage_dtype(ctc_dtype t) {
  switch (t) {
    case CTC_F32: return PT_F32;
    case CTC_F64: return PT_F64;
    case CTC_I64: return PT_I64;
    case CTC_I32: return PT_I32;
    case CTC_U8: return PT_U8;
    case CTC_BOOL: return PT_BOOL;
    case CTC_BF16: return PT_BF16;
    case CTC_F16: return PT_F16;
    default: return -1;
  }
}

/* data.pkl: OrderedDict(name -> _rebuild_tensor_v2(storage k, 0, shape, stride, False, OrderedDict())). */
static void build_pickle(Out *o, int n, const ctc_tensor *ts) {
  uint32_t next = 0, m_odict = 0, m_rebuild = 0, m_storage[PT_NDTYPES] = {0};
  char tmp[64];
  out_byte(o, 0x80), out_byte(o, 2);
  pk_global(o, "collections\nOrderedDict\n", &m_odict, &next);
  out_byte(o, ')'), out_byte(o, 'R');
  out_byte(o, '(');
  for (int i = 0; i < n; i++) {
    const ctc_tensor *t = &ts[i];
    int dt = pt_storage_dtype(t->dtype);
    int c64 = t->complex64 && t->dtype == CTC_F32 && t->ndim >= 1 && t->shape[t->ndim - 1] == 2;
    if (c64) dt = PT_C64;   /* float32 parts S + [2] as the complex64 tensor S */
    int nd = t->ndim - c64;
    pk_str(o, t->name);
    pk_global(o, "torch._utils\n_rebuild_tensor_v2\n", &m_rebuild, &next);
    out_byte(o, '(');
    out_byte(o, '(');   /* the persistent id */
    pk_str(o, "storage");
    snprintf(tmp, sizeof tmp, "torch\n%s\n", pt_dtypes[dt].storage);
    pk_global(o, tmp, &m_storage[dt], &next);
    snprintf(tmp, sizeof tmp, "%d", i);
    pk_str(o, tmp);
    pk_str(o, "cpu");
    pk_int(o, ctc_tensor_numel(t) / (c64 ? 2 : 1));
    out_byte(o, 't'), out_byte(o, 'Q');
    pk_int(o, 0);
    out_byte(o, '(');
    for (int d = 0; d < nd; d++) pk_int(o, t->shape[d]);
    out_byte(o, 't');
    out_byte(o, '(');
    int64_t stride[CTC_MAX_DIMS], s = 1;
    for (int d = nd - 1; d >= 0; d--) stride[d] = s, s *= t->shape[d] > 0 ? t->shape[d] : 1;
    for (int d = 0; d < nd; d++) pk_int(o, stride[d]);
    out_byte(o, 't');
    out_byte(o, 0x89);
    pk_global(o, "collections\nOrderedDict\n", &m_odict, &next);
    out_byte(o, ')'), out_byte(o, 'R');
    out_byte(o, 't'), out_byte(o, 'R');
  }
  out_byte(o, 'u'), out_byte(o, '.');
}

typedef struct ZOut {
  ctc_wfile w;
  uint64_t pos;
  int ok;
  Out cd;        /* the central directory */
  uint64_t count;
} ZOut;

static void zw(ZOut *z, const void *data, size_t n) {
  if (z->ok && n) z->ok = ctc_wwrite(&z->w, data, n);
  z->pos += n;
}

/* One stored record, its data 64-byte aligned; sizes and offset in ZIP64 fields. */
static void zip_record(ZOut *z, const char *name, const void *data, size_t n) {
  size_t nl = strlen(name);
  uint32_t crc = crc_of(data, n);
  uint64_t local = z->pos;
  size_t pad = (size_t)((64 - (local + 30 + nl + 20 + 4) % 64) % 64);
  Out h = {0};
  out_le(&h, 0x04034b50, 4), out_le(&h, 45, 2), out_le(&h, 0, 2), out_le(&h, 0, 2);   /* version 4.5, stored */
  out_le(&h, 0, 4);                                                                    /* time, date */
  out_le(&h, crc, 4), out_le(&h, 0xFFFFFFFFu, 4), out_le(&h, 0xFFFFFFFFu, 4);
  out_le(&h, nl, 2), out_le(&h, 20 + 4 + pad, 2);
  out_add(&h, name, nl);
  out_le(&h, 1, 2), out_le(&h, 16, 2), out_le(&h, n, 8), out_le(&h, n, 8);            /* ZIP64: sizes */
  out_le(&h, 0x4246, 2), out_le(&h, pad, 2);                                           /* "FB": padding */
  for (size_t k = 0; k < pad; k++) out_byte(&h, 'Z');
  if (h.failed) z->ok = 0;
  zw(z, h.s, h.len);
  zw(z, data, n);
  free(h.s);
  Out *c = &z->cd;
  out_le(c, 0x02014b50, 4), out_le(c, 45, 2), out_le(c, 45, 2), out_le(c, 0, 2), out_le(c, 0, 2);
  out_le(c, 0, 4), out_le(c, crc, 4), out_le(c, 0xFFFFFFFFu, 4), out_le(c, 0xFFFFFFFFu, 4);
  out_le(c, nl, 2), out_le(c, 28, 2), out_le(c, 0, 2), out_le(c, 0, 2), out_le(c, 0, 2), out_le(c, 0, 4);
  out_le(c, 0xFFFFFFFFu, 4);
  out_add(c, name, nl);
  out_le(c, 1, 2), out_le(c, 24, 2), out_le(c, n, 8), out_le(c, n, 8), out_le(c, local, 8);
  z->count++;
}

int ctc_pt_write(const char *path, int n, const ctc_tensor *tensors, ctc_error *err) {
  if (!path || n < 0 || (n > 0 && !tensors)) return ctc_fail(err, CTC_ERR_ARG, "ctc_pt_write: bad arguments");
  for (int i = 0; i < n; i++) {
    const ctc_tensor *t = &tensors[i];
    if (!t->name) return ctc_fail(err, CTC_ERR_ARG, "%s: a tensor without a name", path);
    if ((unsigned)t->dtype >= CTC_DTYPE_COUNT || pt_storage_dtype(t->dtype) < 0)
      return ctc_fail(err, CTC_ERR_ARG, "%s: tensor '%s' has a dtype PyTorch files cannot hold", path, t->name);
    size_t bytes = ctc_tensor_bytes(t);
    if (bytes == SIZE_MAX) return ctc_fail(err, CTC_ERR_ARG, "%s: tensor '%s' has an invalid shape", path, t->name);
    if (bytes && !t->data) return ctc_fail(err, CTC_ERR_ARG, "%s: tensor '%s' has no data", path, t->name);
  }
  Out pkl = {0};
  build_pickle(&pkl, n, tensors);
  if (pkl.failed) {
    free(pkl.s);
    return ctc_fail(err, CTC_ERR_NOMEM, "%s: out of memory", path);
  }
  ZOut z;
  memset(&z, 0, sizeof z);
  int rc = ctc_wopen(&z.w, path, err);
  if (rc) {
    free(pkl.s);
    return rc;
  }
  z.ok = 1;
  char name[64];
  zip_record(&z, "archive/data.pkl", pkl.s, pkl.len);
  free(pkl.s);
  for (int i = 0; i < n; i++) {
    snprintf(name, sizeof name, "archive/data/%d", i);
    zip_record(&z, name, tensors[i].data, ctc_tensor_bytes(&tensors[i]));
  }
  zip_record(&z, "archive/version", "3\n", 2);
  uint64_t cd_off = z.pos, cd_size = z.cd.len;
  Out e = {0};
  out_le(&e, 0x06064b50, 4), out_le(&e, 44, 8), out_le(&e, 45, 2), out_le(&e, 45, 2), out_le(&e, 0, 4);
  out_le(&e, 0, 4), out_le(&e, z.count, 8), out_le(&e, z.count, 8), out_le(&e, cd_size, 8), out_le(&e, cd_off, 8);
  out_le(&e, 0x07064b50, 4), out_le(&e, 0, 4), out_le(&e, cd_off + cd_size, 8), out_le(&e, 1, 4);
  uint64_t c16 = z.count < 0xFFFF ? z.count : 0xFFFF;
  out_le(&e, 0x06054b50, 4), out_le(&e, 0, 4), out_le(&e, c16, 2), out_le(&e, c16, 2);
  out_le(&e, cd_size < 0xFFFFFFFFu ? cd_size : 0xFFFFFFFFu, 4), out_le(&e, cd_off < 0xFFFFFFFFu ? cd_off : 0xFFFFFFFFu, 4);
  out_le(&e, 0, 2);
  if (z.cd.failed || e.failed) z.ok = 0;
  zw(&z, z.cd.s, z.cd.len);
  zw(&z, e.s, e.len);
  free(z.cd.s);
  free(e.s);
  return ctc_wcommit(&z.w, z.ok, err);
}
