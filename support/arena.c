/* arena.c - a bump allocator: memory comes from big zeroed chunks and is freed
 * all at once by arena_free. Every block is 16-byte aligned and zeroed. Sizes
 * are checked for overflow; running out of memory is reported through BUG. */
#include "support.h"

#include <stdlib.h>
#include <string.h>

enum {
  ARENA_ALIGN = 16,
  ARENA_CHUNK = 64 * 1024,  /* default chunk payload */
};

/* One malloc'd block. The payload starts at the first 16-aligned address after
 * the header; `cap` counts payload bytes. */
typedef struct Chunk {
  struct Chunk *next;  /* chunks are kept in a list for arena_free */
  size_t cap;          /* payload bytes */
} Chunk;

struct Arena {
  Chunk *chunks;  /* every chunk, newest first */
  char *cur;      /* next free byte in the current chunk */
  char *end;      /* end of the current chunk's payload */
  size_t total;   /* bytes obtained from malloc so far (arena_bytes) */
};

static char *chunk_data(Chunk *c) {
  uintptr_t p = (uintptr_t)(c + 1);
  p = (p + ARENA_ALIGN - 1) & ~(uintptr_t)(ARENA_ALIGN - 1);
  return (char *)p;
}

/* A new zeroed chunk with at least `payload` usable bytes, linked into a. */
static Chunk *chunk_new(Arena *a, size_t payload) {
  size_t extra = sizeof(Chunk) + ARENA_ALIGN;
  if (payload > SIZE_MAX - extra) BUG("arena: allocation size overflow (%zu bytes)", payload);
  Chunk *c = calloc(1, payload + extra);
  if (!c) BUG("out of memory (allocating %zu bytes)", payload);
  c->cap = payload;
  a->total += payload + extra;
  c->next = a->chunks;
  a->chunks = c;
  return c;
}

Arena *arena_new(void) {
  Arena *a = calloc(1, sizeof *a);
  if (!a) BUG("out of memory (allocating an arena)");
  return a;
}

void arena_free(Arena *a) {
  if (!a) return;
  for (Chunk *c = a->chunks, *next; c; c = next) {
    next = c->next;
    free(c);
  }
  free(a);
}

size_t arena_bytes(const Arena *a) { return a->total; }

void *arena_alloc(Arena *a, size_t n) {
  if (n == 0) n = 1;
  if (n > SIZE_MAX - (ARENA_ALIGN - 1)) BUG("arena: allocation size overflow (%zu bytes)", n);
  n = (n + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
  if ((size_t)(a->end - a->cur) >= n) {
    void *p = a->cur;
    a->cur += n;
    return p;
  }
  if (n >= ARENA_CHUNK / 4) {
    /* Big block: a chunk of its own, so the current chunk keeps serving small ones. */
    Chunk *c = chunk_new(a, n);
    return chunk_data(c);
  }
  Chunk *c = chunk_new(a, ARENA_CHUNK);
  a->cur = chunk_data(c);
  a->end = a->cur + ARENA_CHUNK;
  void *p = a->cur;
  a->cur += n;
  return p;
}

void *arena_dup(Arena *a, const void *p, size_t n) {
  void *q = arena_alloc(a, n);
  if (n) memcpy(q, p, n);
  return q;
}

char *arena_strdup(Arena *a, const char *s) {
  return arena_strndup(a, s, strlen(s));
}

/* Copies at most n bytes of s (stopping early at a NUL) and NUL-terminates. */
char *arena_strndup(Arena *a, const char *s, size_t n) {
  size_t len = 0;
  while (len < n && s[len]) len++;
  if (len == SIZE_MAX) BUG("arena: string too long");
  char *q = arena_alloc(a, len + 1);
  memcpy(q, s, len);
  q[len] = '\0';
  return q;
}

char *arena_printf(Arena *a, const char *fmt, ...) {
  va_list ap, ap2;
  va_start(ap, fmt);
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0) BUG("arena_printf: bad format \"%s\"", fmt);
  char *q = arena_alloc(a, (size_t)n + 1);
  vsnprintf(q, (size_t)n + 1, fmt, ap2);
  va_end(ap2);
  return q;
}
