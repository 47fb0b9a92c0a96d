/* diag.c - user diagnostics in clang's style, and the internal-error exit.
 *
 *   model.py:3:9: error: expected ':' after the if condition
 *     if x > 1
 *             ^
 *
 * The source line is shown with tabs expanded (to multiples of 8) and every byte
 * that could upset a terminal (control characters, invalid UTF-8, bidi
 * overrides) escaped as \xNN, so any input file gives readable output. Very
 * long lines are cut to a window around the caret. */
#include "support.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define C_RESET "\033[0m"
#define C_BOLD "\033[1m"
#define C_RED "\033[1;31m"
#define C_CYAN "\033[1;36m"
#define C_GREEN "\033[1;32m"

enum {
  LINE_MAX_SHOWN = 160,  /* lines wider than this are shown as a window */
  WINDOW_BEFORE = 60,    /* columns kept before the caret in a window */
  WINDOW_WIDTH = 150,    /* columns shown in a window */
};

void diag_init(Diag *d, FILE *out) {
  d->out = out;
  d->nerrors = 0;
  const char *term = getenv("TERM");
  d->color = out && isatty(fileno(out)) && !getenv("NO_COLOR") && !(term && strcmp(term, "dumb") == 0);
}

/* ---- showing bytes safely ------------------------------------------------ */

/* Length of the valid, harmless UTF-8 sequence starting at s[0] (at most n bytes
 * available), or 0 when it must be escaped: invalid, overlong, surrogate, C1
 * control, bidi override/isolate, line/paragraph separator or BOM. */
static int utf8_printable(const unsigned char *s, size_t n) {
  unsigned c = s[0];
  int len;
  uint32_t cp;
  if (c < 0xC2) return 0;
  if (c < 0xE0) len = 2, cp = c & 0x1F;
  else if (c < 0xF0) len = 3, cp = c & 0x0F;
  else if (c < 0xF5) len = 4, cp = c & 0x07;
  else return 0;
  if ((size_t)len > n) return 0;
  for (int i = 1; i < len; i++) {
    if ((s[i] & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (s[i] & 0x3F);
  }
  if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF))) return 0;
  if (cp >= 0xD800 && cp <= 0xDFFF) return 0;
  if (cp < 0xA0) return 0;                                   /* C1 controls */
  if (cp == 0x200E || cp == 0x200F) return 0;                /* LRM, RLM */
  if ((cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069)) return 0; /* bidi */
  if (cp == 0x2028 || cp == 0x2029 || cp == 0xFEFF) return 0;
  return len;
}

/* Writes s[0..n) with every unsafe byte escaped as \xNN. */
static void put_escaped(FILE *out, const char *s, size_t n) {
  const unsigned char *u = (const unsigned char *)s;
  for (size_t i = 0; i < n;) {
    unsigned c = u[i];
    if (c >= 0x20 && c < 0x7F) {
      fputc((int)c, out);
      i++;
    } else if (c >= 0x80) {
      int k = utf8_printable(u + i, n - i);
      if (k) {
        fwrite(u + i, 1, (size_t)k, out);
        i += (size_t)k;
      } else {
        fprintf(out, "\\x%02x", c);
        i++;
      }
    } else {
      fprintf(out, "\\x%02x", c);
      i++;
    }
  }
}

/* ---- the source excerpt ---------------------------------------------------- */

/* Finds line `line` (1-based) of f; sets *start and *len (without the newline
 * and a trailing '\r'). Returns 0 when the file has no such line. */
static int find_line(const SrcFile *f, int line, size_t *start, size_t *len) {
  if (!f || !f->text || line < 1) return 0;
  const char *t = f->text;
  size_t n = f->len, pos = 0;
  for (int l = 1; l < line; l++) {
    const char *nl = memchr(t + pos, '\n', n - pos);
    if (!nl) return 0;
    pos = (size_t)(nl - t) + 1;
  }
  if (pos > n) return 0;
  const char *nl = memchr(t + pos, '\n', n - pos);
  size_t e = nl ? (size_t)(nl - t) : n;
  if (e > pos && t[e - 1] == '\r') e--;
  *start = pos;
  *len = e - pos;
  return 1;
}

/* Prints "  <line>\n  <caret line>\n" for span `at`. */
static void show_excerpt(Diag *d, Span at) {
  size_t ls, len;
  if (!find_line(at.file, at.line, &ls, &len)) {
    if (!at.file || at.line < 1) return;
    ls = 0, len = 0; /* e.g. end of file after the last newline: an empty line */
  }
  const unsigned char *s = (const unsigned char *)at.file->text + ls;

  /* dc[i]: display column (0-based) where byte i of the line starts. */
  size_t *dc = malloc((len + 1) * sizeof *dc);
  if (!dc) BUG("out of memory printing a diagnostic");
  size_t col = 0;
  for (size_t i = 0; i < len;) {
    dc[i] = col;
    unsigned c = s[i];
    if (c == '\t') {
      col = (col / 8 + 1) * 8;
      i++;
    } else if (c >= 0x20 && c < 0x7F) {
      col++;
      i++;
    } else if (c >= 0x80 && utf8_printable(s + i, len - i)) {
      int k = utf8_printable(s + i, len - i);
      for (int j = 1; j < k; j++) dc[i + (size_t)j] = col + 1;
      col++;
      i += (size_t)k;
    } else {
      col += 4; /* \xNN */
      i++;
    }
  }
  dc[len] = col;

  size_t c0 = at.col >= 1 ? (size_t)at.col - 1 : 0;
  if (c0 > len) c0 = len;
  size_t e0 = c0 + 1;
  if (at.end_line == at.line && at.end_col - 1 > at.col - 1 && at.end_col >= 1) e0 = (size_t)at.end_col - 1;
  if (e0 > len) e0 = len;

  /* window [b0, b1) of bytes to show */
  size_t b0 = 0, b1 = len;
  if (dc[len] > LINE_MAX_SHOWN) {
    while (b0 < c0 && dc[c0] - dc[b0] > WINDOW_BEFORE) b0++;
    while (b0 < c0 && (s[b0] & 0xC0) == 0x80) b0++; /* not inside a UTF-8 sequence */
    b1 = b0;
    while (b1 < len && dc[b1 + 1] - dc[b0] <= WINDOW_WIDTH) b1++;
    if (b1 < c0) b1 = c0;
    while (b1 < len && (s[b1] & 0xC0) == 0x80) b1++;
  }

  FILE *out = d->out;
  fputs("  ", out);
  if (b0 > 0) fputs("...", out);
  for (size_t i = b0; i < b1;) {
    if (s[i] == '\t') {
      for (size_t k = dc[i]; k < dc[i + 1]; k++) fputc(' ', out);
      i++;
      continue;
    }
    size_t j = i + 1;
    while (j < b1 && s[j] != '\t') j++;
    put_escaped(out, (const char *)s + i, j - i);
    i = j;
  }
  if (b1 < len) fputs("...", out);
  fputc('\n', out);

  size_t pad = (b0 > 0 ? 3 : 0) + dc[c0] - dc[b0];
  size_t stop = e0 < b1 ? e0 : b1;
  size_t tildes = stop > c0 && dc[stop] > dc[c0] + 1 ? dc[stop] - dc[c0] - 1 : 0;
  fputs("  ", out);
  for (size_t k = 0; k < pad; k++) fputc(' ', out);
  if (d->color) fputs(C_GREEN, out);
  fputc('^', out);
  for (size_t k = 0; k < tildes; k++) fputc('~', out);
  if (d->color) fputs(C_RESET, out);
  fputc('\n', out);
  free(dc);
}

/* ---- the public printers ----------------------------------------------------- */

static void report(Diag *d, Span at, int is_error, const char *fmt, va_list ap) {
  FILE *out = d->out ? d->out : stderr;
  Diag dd = *d;
  dd.out = out;
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap);
  char *msg = malloc(n > 0 ? (size_t)n + 1 : 1);
  if (!msg) BUG("out of memory printing a diagnostic");
  if (n > 0) vsnprintf(msg, (size_t)n + 1, fmt, ap2);
  else msg[0] = '\0';
  va_end(ap2);

  if (d->color) fputs(C_BOLD, out);
  if (at.file) {
    put_escaped(out, at.file->path, strlen(at.file->path));
    if (at.line >= 1) fprintf(out, ":%d:%d", at.line, at.col);
    fputs(": ", out);
  } else {
    fputs("ctc: ", out);
  }
  if (d->color) fputs(is_error ? C_RED : C_CYAN, out);
  fputs(is_error ? "error: " : "note: ", out);
  if (d->color) fputs(C_RESET C_BOLD, out);
  put_escaped(out, msg, strlen(msg));
  if (d->color) fputs(C_RESET, out);
  fputc('\n', out);
  free(msg);
  if (at.file && at.line >= 1) show_excerpt(&dd, at);
  fflush(out);
  if (is_error) d->nerrors++;
}

void diag_verror(Diag *d, Span at, const char *fmt, va_list ap) {
  report(d, at, 1, fmt, ap);
}

void diag_error(Diag *d, Span at, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  report(d, at, 1, fmt, ap);
  va_end(ap);
}

void diag_note(Diag *d, Span at, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  report(d, at, 0, fmt, ap);
  va_end(ap);
}

void diag_plain(Diag *d, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  Span none = {0};
  report(d, none, 1, fmt, ap);
  va_end(ap);
}

void ctc_bug(const char *file, int line, const char *fmt, ...) {
  fflush(stdout);
  va_list ap;
  va_start(ap, fmt);
  fputs("ctc: internal error: ", stderr);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n  at %s:%d\n  this is a bug in ctc; please report it with the input file\n", file, line);
  fflush(stderr);
  exit(CTC_EXIT_BUG);
}
