/* source.c - reading source files whole, writing outputs atomically, and spans. */
#include "support.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int out_open(Arena *a, OutFile *o, const char *path) {
  o->path = path;
  o->tmp = arena_printf(a, "%s.tmp.XXXXXX", path);
  int fd = mkstemp(o->tmp);
  o->f = NULL;
  if (fd < 0) return -1;
  fchmod(fd, 0644);
  o->f = fdopen(fd, "w");
  if (!o->f) {
    int e = errno;
    close(fd);
    unlink(o->tmp);
    errno = e;
    return -1;
  }
  return 0;
}

int out_close(OutFile *o, int ok) {
  int e = ok ? 0 : EIO;
  if (!o->f) return -1;
  if (ok && (fflush(o->f) != 0 || ferror(o->f) || fsync(fileno(o->f)) != 0)) ok = 0, e = errno ? errno : EIO;
  if (fclose(o->f) != 0 && ok) ok = 0, e = errno;
  o->f = NULL;
  if (ok) return 0;
  unlink(o->tmp);
  errno = e;
  return -1;
}

int out_rename(OutFile *o) {
  if (rename(o->tmp, o->path) == 0) return 0;
  int e = errno;
  unlink(o->tmp);
  errno = e;
  return -1;
}

int out_commit(OutFile *o, int ok) { return out_close(o, ok) < 0 ? -1 : out_rename(o); }

/* Files bigger than this are refused (EFBIG): lines, columns and token counts
 * are ints, and no model file comes anywhere near it. */
#define SRC_MAX_BYTES ((size_t)256 << 20)

SrcFile *src_read(Arena *a, const char *path) {
  FILE *fp = fopen(path, "rb");
  if (!fp) return NULL;
  size_t cap = 1 << 16, len = 0;
  char *buf = malloc(cap);
  if (!buf) BUG("out of memory reading %s", path);
  for (;;) {
    if (len == cap) {
      if (cap >= SRC_MAX_BYTES) {
        free(buf);
        fclose(fp);
        errno = EFBIG;
        return NULL;
      }
      cap *= 2;
      char *nb = realloc(buf, cap);
      if (!nb) BUG("out of memory reading %s", path);
      buf = nb;
    }
    size_t got = fread(buf + len, 1, cap - len, fp);
    len += got;
    if (got == 0) break;
  }
  if (ferror(fp)) {
    int e = errno ? errno : EIO;
    free(buf);
    fclose(fp);
    errno = e;
    return NULL;
  }
  fclose(fp);
  if (len > SRC_MAX_BYTES) {
    free(buf);
    errno = EFBIG;
    return NULL;
  }
  SrcFile *f = arena_alloc(a, sizeof *f);
  f->path = arena_strdup(a, path);
  char *text = arena_alloc(a, len + 1); /* zeroed: the NUL terminator is there */
  if (len) memcpy(text, buf, len);
  free(buf);
  f->text = text;
  f->len = len;
  return f;
}

SrcFile *src_from_string(Arena *a, const char *path, const char *text) {
  SrcFile *f = arena_alloc(a, sizeof *f);
  f->path = arena_strdup(a, path);
  f->len = strlen(text);
  f->text = arena_strndup(a, text, f->len);
  return f;
}

Span span_join(Span a, Span b) {
  if (!a.file) return b;
  if (!b.file) return a;
  Span s = a;
  /* take whichever end is later, so joining in either order is safe */
  if (b.end_line > a.end_line || (b.end_line == a.end_line && b.end_col > a.end_col)) {
    s.end_line = b.end_line;
    s.end_col = b.end_col;
  }
  return s;
}
