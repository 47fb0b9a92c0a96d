/* support.h - the pieces every stage of ctc uses: arenas, growable arrays,
 * source files and spans, and the two error channels.
 *
 *   user errors   -> diag_error(): "path:line:col: error: ..." + source line + caret,
 *                    counted in a Diag; the driver exits 1 when any were reported.
 *   compiler bugs -> BUG(...): "internal error: this is a bug in ctc" with
 *                    __FILE__:__LINE__, exits with CTC_EXIT_BUG.
 *
 * No global mutable state: every function takes the context it works on. */
#ifndef CTC_SUPPORT_H
#define CTC_SUPPORT_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Process exit codes of the ctc driver (documented in README.md, "Exit status"). */
enum {
  CTC_EXIT_OK = 0,    /* success */
  CTC_EXIT_USER = 1,  /* error in the model file or the command line */
  CTC_EXIT_IO = 2,    /* a file could not be read or written, or the C compiler failed */
  CTC_EXIT_BUG = 3,   /* internal error: a bug in ctc */
};

#if defined(__GNUC__)
#define CTC_PRINTF(f, a) __attribute__((format(printf, f, a)))
#define CTC_NORETURN __attribute__((noreturn))
#else
#define CTC_PRINTF(f, a)
#define CTC_NORETURN
#endif

/* ---- arena.c ---------------------------------------------------------- */

/* A bump allocator. Memory is zeroed and 16-byte aligned, freed all at once. */
typedef struct Arena Arena;
Arena *arena_new(void);
void arena_free(Arena *a);
void *arena_alloc(Arena *a, size_t n);                   /* zeroed; aborts via BUG on OOM */
size_t arena_bytes(const Arena *a);                      /* bytes taken from malloc so far */
void *arena_dup(Arena *a, const void *p, size_t n);
char *arena_strdup(Arena *a, const char *s);
char *arena_strndup(Arena *a, const char *s, size_t n);
char *arena_printf(Arena *a, const char *fmt, ...) CTC_PRINTF(2, 3);

/* Growable array of T in an arena: `Vec(Node *) items;` then vec_push(A, &items, x).
 * Growth copies into a fresh arena block (the old block is simply abandoned). */
#define Vec(T) struct { T *data; int len, cap; }
#define vec_push(A, v, x)                                                        \
  do {                                                                           \
    if ((v)->len == (v)->cap) {                                                  \
      int ncap_ = (v)->cap ? 2 * (v)->cap : 8;                                   \
      void *nd_ = arena_alloc((A), (size_t)ncap_ * sizeof(*(v)->data));          \
      if ((v)->len) memcpy(nd_, (v)->data, (size_t)(v)->len * sizeof(*(v)->data)); \
      (v)->data = nd_;                                                           \
      (v)->cap = ncap_;                                                          \
    }                                                                            \
    (v)->data[(v)->len++] = (x);                                                 \
  } while (0)

/* ---- source.c --------------------------------------------------------- */

/* One source file, read whole. Text is NUL-terminated; embedded NULs are
 * diagnosed by the lexer. */
typedef struct SrcFile {
  const char *path;  /* as given on the command line */
  const char *text;  /* contents + terminating NUL */
  size_t len;        /* bytes, without the NUL */
} SrcFile;

/* A region of a source file. Lines and columns are 1-based; columns count bytes.
 * end_col is exclusive; a span on one line has end_line == line. */
typedef struct Span {
  const SrcFile *file;
  int line, col;
  int end_line, end_col;
} Span;

SrcFile *src_read(Arena *a, const char *path);            /* NULL if unreadable (errno set) */

/* An output file replaced atomically: out_open writes to a temporary file
 * beside path; out_commit flushes, fsyncs and renames it over path when ok
 * (returns 0), else removes it (returns -1, errno set) and path keeps its old
 * contents. A failed write never leaves a truncated model.c behind. */
typedef struct OutFile {
  FILE *f;
  const char *path;
  char *tmp;
} OutFile;
int out_open(Arena *a, OutFile *o, const char *path);      /* 0, or -1 with errno */
int out_commit(OutFile *o, int ok);
/* The two halves of out_commit, for files that must change together: out_close
 * flushes, fsyncs and closes (removing the temporary file and returning -1 on
 * failure or !ok); out_rename then puts a closed file in place. */
int out_close(OutFile *o, int ok);
int out_rename(OutFile *o);
SrcFile *src_from_string(Arena *a, const char *path, const char *text);
Span span_join(Span a, Span b);                           /* from a's start to b's end */

/* ---- diag.c ----------------------------------------------------------- */

/* Where diagnostics go and how many errors were seen. */
typedef struct Diag {
  FILE *out;       /* usually stderr */
  int nerrors;     /* errors reported so far */
  int color;       /* 1: ANSI colours (only when out is a terminal) */
} Diag;

void diag_init(Diag *d, FILE *out);
/* "path:line:col: error: msg", the source line, a caret/underline under the span. */
void diag_error(Diag *d, Span at, const char *fmt, ...) CTC_PRINTF(3, 4);
void diag_verror(Diag *d, Span at, const char *fmt, va_list ap);
/* "path:line:col: note: msg" (+ source line when the span has a file). */
void diag_note(Diag *d, Span at, const char *fmt, ...) CTC_PRINTF(3, 4);
/* An error without a location: "ctc: error: msg". */
void diag_plain(Diag *d, const char *fmt, ...) CTC_PRINTF(2, 3);

/* Internal errors: print where in ctc it happened and exit(CTC_EXIT_BUG). */
CTC_NORETURN void ctc_bug(const char *file, int line, const char *fmt, ...) CTC_PRINTF(3, 4);
#define BUG(...) ctc_bug(__FILE__, __LINE__, __VA_ARGS__)
#define CHECK(cond) do { if (!(cond)) BUG("check failed: %s", #cond); } while (0)

#endif
