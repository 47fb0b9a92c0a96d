/* lexer.c - Python source to tokens.
 *
 * One pass over the bytes with an indentation stack, as Python's own tokenizer
 * does: at the start of each logical line (outside brackets, not after a
 * backslash continuation) the indentation is measured (tabs to the next
 * multiple of 8, and also with tabs counted as 1 so that tab/space mixes that
 * depend on the tab size are rejected) and INDENT / DEDENT tokens are emitted.
 * Blank and comment-only lines produce nothing; NEWLINE ends each logical line.
 *
 * The source text is NUL-terminated and NUL bytes inside it are rejected before
 * anything else, so within the scanner '\0' means end of file and looking one
 * byte ahead of a non-NUL byte is always in bounds. The first error is
 * reported and lexing stops (longjmp back to fe_lex). */
#include "frontend.h"

#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

enum {
  MAX_INDENT = 100,  /* indentation levels (Python's own limit) */
};

/* Model files are kilobytes; the limit keeps tokens and nodes (about 64 and 200
 * bytes each) within a sane amount of memory for any input. */
#define MAX_SOURCE_BYTES ((size_t)4 << 20)

/* An open bracket waiting for its closer. */
typedef struct Bracket {
  char ch;    /* '(', '[' or '{' */
  Span span;  /* where it was opened */
} Bracket;

/* A position in the file. */
typedef struct Pos {
  int line, col;
} Pos;

typedef struct Lexer {
  Arena *a;
  Diag *d;
  const SrcFile *f;
  const char *s;        /* f->text */
  size_t n;             /* f->len */
  size_t pos;           /* current byte */
  int line;             /* current line, 1-based */
  size_t bol;           /* offset of the first byte of the current line */
  TokenVec *out;        /* tokens so far */
  Vec(Bracket) br;      /* open brackets, innermost last */
  int ind[MAX_INDENT + 1];  /* indentation stack, columns with tabs to 8 */
  int alt[MAX_INDENT + 1];  /* the same with tabs counted as 1 */
  int nind;             /* ind[0..nind] are live; ind[0] == 0 */
  Vec(char) sb;         /* scratch buffer for string values */
  jmp_buf jb;           /* error exit */
} Lexer;

/* ---- positions and errors ----------------------------------------------------- */

static Pos lpos(Lexer *L) {
  return (Pos){L->line, (int)(L->pos - L->bol) + 1};
}

static Span mkspan(Lexer *L, Pos a, Pos b) {
  return (Span){L->f, a.line, a.col, b.line, b.col};
}

/* The span of bytes [from, from+len) on the current line. */
static Span here(Lexer *L, size_t from, size_t len) {
  int c = (int)(from - L->bol) + 1;
  return (Span){L->f, L->line, c, L->line, c + (int)len};
}

CTC_PRINTF(3, 4) CTC_NORETURN static void lerr(Lexer *L, Span at, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  diag_verror(L->d, at, fmt, ap);
  va_end(ap);
  longjmp(L->jb, 1);
}

/* Consume the '\n' at L->pos and start a new line. */
static void newline(Lexer *L) {
  L->pos++;
  L->line++;
  L->bol = L->pos;
}

static void emit(Lexer *L, TokKind k, Span sp, const char *text, size_t len) {
  Token t = {0};
  t.kind = k;
  t.span = sp;
  t.text = text;
  t.len = len;
  vec_push(L->a, L->out, t);
}

static Token *last_tok(Lexer *L) {
  return L->out->len ? &L->out->data[L->out->len - 1] : NULL;
}

/* "'$'" or "'\x01'" for messages. */
static const char *char_desc(Lexer *L, unsigned char c) {
  if (c >= 0x20 && c < 0x7F) return arena_printf(L->a, "'%c'", c);
  return arena_printf(L->a, "'\\x%02x'", c);
}

static int is_id_start(int c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
static int is_digit(int c) {
  return c >= '0' && c <= '9';
}
static int is_id_char(int c) {
  return is_id_start(c) || is_digit(c);
}
static int hex_val(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* ---- indentation -------------------------------------------------------------- */

/* At the start of a logical line: measure the indentation. Returns 0 when the
 * line is blank or comment-only (consumed entirely, including its newline) or
 * the file ended; 1 when the line has content (INDENT/DEDENTs emitted). */
static int line_start(Lexer *L) {
  int col = 0, alt = 0;
  size_t start = L->pos;
  for (;;) {
    char c = L->s[L->pos];
    if (c == ' ') col++, alt++;
    else if (c == '\t') col = (col / 8 + 1) * 8, alt++;
    else if (c == '\f') col = alt = 0;
    else break;
    L->pos++;
  }
  char c = L->s[L->pos];
  if (c == '#') {
    while (L->s[L->pos] && L->s[L->pos] != '\n') L->pos++;
    c = L->s[L->pos];
  }
  if (c == '\r' && L->s[L->pos + 1] == '\n') c = L->s[++L->pos];
  if (c == '\n') {
    newline(L);
    return 0;
  }
  if (c == '\0') return 0;

  Span ws = here(L, start, L->pos - start);   /* the indentation itself */
  Span at = here(L, L->pos, 1);               /* the first token of the line */
  if (ws.end_col <= ws.col) ws = at;
  int top = L->ind[L->nind];
  if (col == top) {
    if (alt != L->alt[L->nind]) lerr(L, ws, "inconsistent use of tabs and spaces in indentation");
  } else if (col > top) {
    if (alt <= L->alt[L->nind]) lerr(L, ws, "inconsistent use of tabs and spaces in indentation");
    if (L->nind == MAX_INDENT) lerr(L, at, "too many levels of indentation (the limit is %d)", MAX_INDENT);
    L->nind++;
    L->ind[L->nind] = col;
    L->alt[L->nind] = alt;
    emit(L, T_INDENT, at, "<indent>", 8);
  } else {
    while (L->nind > 0 && col < L->ind[L->nind]) {
      L->nind--;
      emit(L, T_DEDENT, at, "<dedent>", 8);
    }
    if (col != L->ind[L->nind]) lerr(L, ws, "unindent does not match any outer indentation level");
    if (alt != L->alt[L->nind]) lerr(L, ws, "inconsistent use of tabs and spaces in indentation");
  }
  return 1;
}

/* ---- numbers ------------------------------------------------------------------- */

/* Scans digits of the given base with single underscores between them, starting
 * at L->pos. `lead_us` allows one underscore before the first digit (after a
 * 0x/0o/0b prefix). Returns the number of digits. */
static int scan_digits(Lexer *L, int base, int lead_us, size_t tok_start) {
  int nd = 0;
  for (;;) {
    char c = L->s[L->pos];
    if (c == '_') {
      char nx = L->s[L->pos + 1];
      int ok = (nd > 0 || lead_us) && (base == 16 ? hex_val(nx) >= 0 : is_digit(nx) && nx - '0' < base);
      if (!ok) lerr(L, here(L, L->pos, 1), "invalid '_' in a number literal: '_' must separate two digits");
      L->pos++;
      continue;
    }
    int v = base == 16 ? hex_val(c) : (is_digit(c) ? c - '0' : -1);
    if (v < 0) break;
    if (v >= base) {
      const char *kind = base == 2 ? "binary" : "octal";
      lerr(L, here(L, L->pos, 1), "invalid digit '%c' in %s literal", c, kind);
    }
    nd++;
    L->pos++;
  }
  (void)tok_start;
  return nd;
}

/* The token after a number must not run into a name or another number. */
static void number_end(Lexer *L, size_t start, const char *what) {
  char c = L->s[L->pos];
  if (c == 'j' || c == 'J')   /* after a decimal number lex_number took it: 0x1j */
    lerr(L, here(L, start, L->pos + 1 - start), "invalid %s literal: only decimal numbers can be imaginary", what);
  if (is_id_char(c) || c == '.' || (unsigned char)c >= 0x80) {
    size_t e = L->pos;
    while (is_id_char(L->s[e])) e++;
    if (e == L->pos) e++;
    lerr(L, here(L, start, e - start), "invalid %s literal", what);
  }
}

/* The value of the decimal digits text [start, end) without their underscores. */
static double float_value(Lexer *L, size_t start, size_t end) {
  char *buf = arena_alloc(L->a, end - start + 1);
  size_t k = 0;
  for (size_t i = start; i < end; i++)
    if (L->s[i] != '_') buf[k++] = L->s[i];
  buf[k] = '\0';
  return strtod(buf, NULL);
}

static void lex_number(Lexer *L) {
  size_t start = L->pos;
  Pos p0 = lpos(L);
  const char *s = L->s;
  int base = 10;
  if (s[L->pos] == '0' && (s[L->pos + 1] == 'x' || s[L->pos + 1] == 'X')) base = 16;
  else if (s[L->pos] == '0' && (s[L->pos + 1] == 'o' || s[L->pos + 1] == 'O')) base = 8;
  else if (s[L->pos] == '0' && (s[L->pos + 1] == 'b' || s[L->pos + 1] == 'B')) base = 2;

  if (base != 10) {
    const char *what = base == 16 ? "hexadecimal" : base == 8 ? "octal" : "binary";
    L->pos += 2;
    int nd = scan_digits(L, base, 1, start);
    if (nd == 0) lerr(L, here(L, start, L->pos - start), "invalid %s literal: no digits after the prefix", what);
    number_end(L, start, what);
  } else {
    int is_float = 0;
    if (s[L->pos] != '.') scan_digits(L, 10, 0, start);
    if (s[L->pos] == '.' && !(s[L->pos + 1] == '.' && s[L->pos + 2] == '.' && L->pos > start)) {
      /* "1." / "1.5" / ".5"; "1..." is the int 1 followed by '...' (never valid anyway) */
      is_float = 1;
      L->pos++;
      if (is_digit(s[L->pos])) scan_digits(L, 10, 0, start);
      else if (s[L->pos] == '_') lerr(L, here(L, L->pos, 1), "invalid '_' in a number literal: '_' must separate two digits");
    }
    if (s[L->pos] == 'e' || s[L->pos] == 'E') {
      size_t save = L->pos;
      L->pos++;
      if (s[L->pos] == '+' || s[L->pos] == '-') L->pos++;
      if (!is_digit(s[L->pos])) {
        L->pos = save;
        number_end(L, start, "decimal");
      }
      scan_digits(L, 10, 0, start);
      is_float = 1;
    }
    if (s[L->pos] == 'j' || s[L->pos] == 'J') {   /* an imaginary literal: 1j, 2.5J, 1e-3j, 01j */
      size_t len = L->pos - start;
      double val = float_value(L, start, L->pos);
      L->pos++;
      number_end(L, start, "imaginary");
      Token t = {0};
      t.kind = T_IMAG;
      t.span = mkspan(L, p0, lpos(L));
      t.text = arena_strndup(L->a, s + start, len + 1);
      t.len = len + 1;
      t.fval = val;
      vec_push(L->a, L->out, t);
      return;
    }
    number_end(L, start, "decimal");
    if (!is_float) {
      /* leading zeros: "00" is fine, "012" is not */
      if (s[start] == '0') {
        for (size_t i = start; i < L->pos; i++)
          if (s[i] != '0' && s[i] != '_')
            lerr(L, here(L, start, L->pos - start),
                 "leading zeros in decimal integer literals are not permitted; use an 0o prefix for octal integers");
      }
    }
    if (is_float) {
      size_t len = L->pos - start;
      Token t = {0};
      t.kind = T_FLOAT;
      t.span = mkspan(L, p0, lpos(L));
      t.text = arena_strndup(L->a, s + start, len);
      t.len = len;
      t.fval = float_value(L, start, L->pos);
      vec_push(L->a, L->out, t);
      return;
    }
  }

  /* integer value, checked against int64 overflow */
  uint64_t v = 0;
  size_t i = start + (base == 10 ? 0 : 2);
  for (; i < L->pos; i++) {
    if (s[i] == '_') continue;
    uint64_t dgt = (uint64_t)hex_val(s[i]);
    if (v > ((uint64_t)INT64_MAX - dgt) / (uint64_t)base)
      lerr(L, here(L, start, L->pos - start), "integer literal is too large (it does not fit in a signed 64-bit integer)");
    v = v * (uint64_t)base + dgt;
  }
  Token t = {0};
  t.kind = T_INT;
  t.span = mkspan(L, p0, lpos(L));
  t.text = arena_strndup(L->a, s + start, L->pos - start);
  t.len = L->pos - start;
  t.ival = (int64_t)v;
  vec_push(L->a, L->out, t);
}

/* ---- strings ------------------------------------------------------------------- */

static void sb_put(Lexer *L, char c) {
  vec_push(L->a, &L->sb, c);
}

/* Appends code point cp as UTF-8 (surrogates are encoded as-is, like Python's
 * str holds them). */
static void sb_utf8(Lexer *L, uint32_t cp) {
  if (cp < 0x80) {
    sb_put(L, (char)cp);
  } else if (cp < 0x800) {
    sb_put(L, (char)(0xC0 | (cp >> 6)));
    sb_put(L, (char)(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    sb_put(L, (char)(0xE0 | (cp >> 12)));
    sb_put(L, (char)(0x80 | ((cp >> 6) & 0x3F)));
    sb_put(L, (char)(0x80 | (cp & 0x3F)));
  } else {
    sb_put(L, (char)(0xF0 | (cp >> 18)));
    sb_put(L, (char)(0x80 | ((cp >> 12) & 0x3F)));
    sb_put(L, (char)(0x80 | ((cp >> 6) & 0x3F)));
    sb_put(L, (char)(0x80 | (cp & 0x3F)));
  }
}

/* Decodes the escape sequence at L->pos (which is at the backslash) into sb. */
static void lex_escape(Lexer *L, int is_bytes) {
  const char *s = L->s;
  size_t at = L->pos;
  char c = s[L->pos + 1];
  L->pos += 2;
  switch (c) {
  case '\n': L->pos--; newline(L); return; /* line continuation inside the string */
  case '\r':
    if (s[L->pos] == '\n') newline(L);
    return;
  case '\\': sb_put(L, '\\'); return;
  case '\'': sb_put(L, '\''); return;
  case '"': sb_put(L, '"'); return;
  case 'a': sb_put(L, '\a'); return;
  case 'b': sb_put(L, '\b'); return;
  case 'f': sb_put(L, '\f'); return;
  case 'n': sb_put(L, '\n'); return;
  case 'r': sb_put(L, '\r'); return;
  case 't': sb_put(L, '\t'); return;
  case 'v': sb_put(L, '\v'); return;
  case '0': case '1': case '2': case '3': case '4': case '5': case '6': case '7': {
    uint32_t v = (uint32_t)(c - '0');
    for (int k = 0; k < 2 && s[L->pos] >= '0' && s[L->pos] <= '7'; k++) v = v * 8 + (uint32_t)(s[L->pos++] - '0');
    if (is_bytes) {
      if (v > 0xFF) lerr(L, here(L, at, L->pos - at), "octal escape value is larger than 0o377 in a bytes literal");
      sb_put(L, (char)v);
    } else {
      sb_utf8(L, v);
    }
    return;
  }
  case 'x': {
    int h1 = hex_val(s[L->pos]), h2 = h1 >= 0 ? hex_val(s[L->pos + 1]) : -1;
    if (h1 < 0 || h2 < 0) lerr(L, here(L, at, 2), "invalid \\x escape: expected two hexadecimal digits");
    L->pos += 2;
    if (is_bytes) sb_put(L, (char)(h1 * 16 + h2));
    else sb_utf8(L, (uint32_t)(h1 * 16 + h2));
    return;
  }
  case 'u': case 'U': {
    if (is_bytes) break;
    int nd = c == 'u' ? 4 : 8;
    uint32_t v = 0;
    for (int k = 0; k < nd; k++) {
      int h = hex_val(s[L->pos]);
      if (h < 0) lerr(L, here(L, at, 2), "invalid \\%c escape: expected %d hexadecimal digits", c, nd);
      v = v * 16 + (uint32_t)h;
      L->pos++;
    }
    if (v > 0x10FFFF) lerr(L, here(L, at, L->pos - at), "invalid \\U escape: code point is out of range");
    sb_utf8(L, v);
    return;
  }
  case 'N':
    if (is_bytes) break;
    lerr(L, here(L, at, 2), "\\N{...} escapes are not supported");
  default:
    break;
  }
  /* not an escape: keep the backslash and the character (Python does, with a warning) */
  L->pos = at + 1;
  sb_put(L, '\\');
}

/* At L->pos: an optional prefix (plen bytes) and the opening quote. */
static void lex_string(Lexer *L, size_t plen) {
  const char *s = L->s;
  size_t start = L->pos;
  Pos p0 = lpos(L);
  int raw = 0, is_bytes = 0, is_f = 0;
  for (size_t i = 0; i < plen; i++) {
    char c = s[start + i];
    if (c == 'r' || c == 'R') raw = 1;
    if (c == 'b' || c == 'B') is_bytes = 1;
    if (c == 'f' || c == 'F') is_f = 1;
  }
  L->pos += plen;
  char q = s[L->pos];
  int triple = s[L->pos + 1] == q && s[L->pos + 2] == q;
  size_t qlen = triple ? 3 : 1;
  Span open = here(L, start, plen + qlen);
  L->pos += qlen;
  size_t body = L->pos;
  L->sb.len = 0;
  for (;;) {
    char c = s[L->pos];
    if (c == '\0' || (c == '\n' && !triple) || (c == '\r' && !triple && s[L->pos + 1] == '\n')) {
      lerr(L, open, triple ? "unterminated triple-quoted string literal" : "unterminated string literal");
    }
    if (c == q && (!triple || (s[L->pos + 1] == q && s[L->pos + 2] == q))) break;
    if (c == '\\' && s[L->pos + 1] == '\0') lerr(L, open, triple ? "unterminated triple-quoted string literal" : "unterminated string literal");
    if (c == '\\' && !raw && !is_f) {
      lex_escape(L, is_bytes);
      continue;
    }
    if (c == '\\') {
      /* raw / f-string: the backslash stays, and protects the next character */
      sb_put(L, c);
      L->pos++;
      c = s[L->pos];
      if (c == '\r' && s[L->pos + 1] == '\n') {
        L->pos++;
        c = '\n';
      }
      if (c == '\n') {
        sb_put(L, '\n');
        newline(L);
      } else {
        sb_put(L, c);
        L->pos++;
      }
      continue;
    }
    if (c == '\r' && s[L->pos + 1] == '\n') {
      L->pos++; /* \r\n inside a triple-quoted string reads as \n */
      continue;
    }
    if (c == '\n') {
      sb_put(L, '\n');
      newline(L);
      continue;
    }
    sb_put(L, c);
    L->pos++;
  }
  (void)body;
  L->pos += qlen;
  size_t len = (size_t)L->sb.len;
  char *text = arena_alloc(L->a, len + 1);
  if (len) memcpy(text, L->sb.data, len);
  emit(L, is_f ? T_FSTRING : T_STRING, mkspan(L, p0, lpos(L)), text, len);
}

/* Is s[0..len) a string prefix Python accepts? (r u b f br rb fr rf, any case) */
static int string_prefix(const char *s, size_t len) {
  char a = (char)(s[0] | 0x20), b = len > 1 ? (char)(s[1] | 0x20) : 0;
  if (len == 1) return a == 'r' || a == 'u' || a == 'b' || a == 'f';
  if (len == 2)
    return (a == 'r' && (b == 'b' || b == 'f')) || (b == 'r' && (a == 'b' || a == 'f'));
  return 0;
}

/* ---- operators ------------------------------------------------------------------ */

/* Longest first within each length. */
static const char *const ops3[] = {"**=", "//=", ">>=", "<<=", "...", NULL};
static const char *const ops2[] = {"**", "//", ">>", "<<", "<=", ">=", "==", "!=", "->", ":=", "+=", "-=",
                                   "*=", "/=", "%=", "@=", "&=", "|=", "^=", NULL};
static const char *const ops1[] = {"+", "-", "*", "/", "%", "@", "&", "|", "^", "~", "<", ">", "(", ")",
                                   "[", "]", "{", "}", ",", ":", ".", ";", "=", NULL};

static const char *match_op(const char *s, size_t *len) {
  for (int i = 0; ops3[i]; i++)
    if (s[0] == ops3[i][0] && s[1] == ops3[i][1] && s[1] && s[2] == ops3[i][2]) return *len = 3, ops3[i];
  for (int i = 0; ops2[i]; i++)
    if (s[0] == ops2[i][0] && s[1] == ops2[i][1]) return *len = 2, ops2[i];
  for (int i = 0; ops1[i]; i++)
    if (s[0] == ops1[i][0]) return *len = 1, ops1[i];
  return NULL;
}

static char closer_of(char open) {
  return open == '(' ? ')' : open == '[' ? ']' : '}';
}

static void lex_op(Lexer *L) {
  size_t len = 0;
  const char *op = match_op(L->s + L->pos, &len);
  unsigned char c = (unsigned char)L->s[L->pos];
  if (!op) lerr(L, here(L, L->pos, 1), "unexpected character %s", char_desc(L, c));
  Span sp = here(L, L->pos, len);
  if (c == '(' || c == '[' || c == '{') {
    Bracket b = {(char)c, sp};
    vec_push(L->a, &L->br, b);
  } else if (c == ')' || c == ']' || c == '}') {
    if (L->br.len == 0) lerr(L, sp, "unmatched '%c'", c);
    Bracket *b = &L->br.data[L->br.len - 1];
    if (closer_of(b->ch) != (char)c) {
      diag_error(L->d, sp, "closing '%c' does not match the opening '%c'", c, b->ch);
      diag_note(L->d, b->span, "the '%c' opened here", b->ch);
      longjmp(L->jb, 1);
    }
    L->br.len--;
  }
  L->pos += len;
  emit(L, T_OP, sp, op, len);
}

/* ---- the main loop --------------------------------------------------------------- */

static void lex_all(Lexer *L) {
  const char *s = L->s;
  /* NUL bytes first: they would be read as the end of the text below. */
  const char *nul = memchr(s, '\0', L->n);
  if (nul) {
    size_t off = (size_t)(nul - s);
    for (size_t i = 0; i < off; i++)
      if (s[i] == '\n') L->line++, L->bol = i + 1;
    lerr(L, here(L, off, 1), "NUL byte in source (is this a binary file?)");
  }
  if ((unsigned char)s[0] == 0xEF && (unsigned char)s[1] == 0xBB && (unsigned char)s[2] == 0xBF) L->pos = 3;

  int at_line_start = 1;
  for (;;) {
    if (at_line_start) {
      if (!line_start(L)) {
        if (s[L->pos] == '\0') break;
        continue; /* blank line */
      }
      at_line_start = 0;
    }
    char c = s[L->pos];
    if (c == ' ' || c == '\t' || c == '\f' || c == '\r') {
      if (c == '\r' && s[L->pos + 1] != '\n') lerr(L, here(L, L->pos, 1), "unexpected carriage return (a lone '\\r' is not a line ending ctc accepts)");
      L->pos++;
      continue;
    }
    if (c == '#') {
      while (s[L->pos] && s[L->pos] != '\n') L->pos++;
      continue;
    }
    if (c == '\n') {
      if (L->br.len == 0) {
        Token *t = last_tok(L);
        if (t && t->kind != T_NEWLINE && t->kind != T_INDENT && t->kind != T_DEDENT)
          emit(L, T_NEWLINE, here(L, L->pos, 1), "<newline>", 9);
        at_line_start = 1;
      }
      newline(L);
      continue;
    }
    if (c == '\0') break;
    if (c == '\\') {
      size_t at = L->pos;
      L->pos++;
      if (s[L->pos] == '\r' && s[L->pos + 1] == '\n') L->pos++;
      if (s[L->pos] == '\n') {
        newline(L);
        if (s[L->pos] == '\0') lerr(L, here(L, at, 1), "unexpected end of file after a line continuation character");
        continue;
      }
      if (s[L->pos] == '\0') lerr(L, here(L, at, 1), "unexpected end of file after a line continuation character");
      lerr(L, here(L, at, 1), "unexpected character after a line continuation character ('\\' must end the line)");
    }
    if (c == '"' || c == '\'') {
      lex_string(L, 0);
      continue;
    }
    if (is_id_start(c)) {
      /* string prefix? */
      if ((s[L->pos + 1] == '"' || s[L->pos + 1] == '\'') && string_prefix(s + L->pos, 1)) {
        lex_string(L, 1);
        continue;
      }
      if (is_id_start(s[L->pos + 1]) && (s[L->pos + 2] == '"' || s[L->pos + 2] == '\'') && string_prefix(s + L->pos, 2)) {
        lex_string(L, 2);
        continue;
      }
      size_t start = L->pos;
      while (is_id_char(s[L->pos])) L->pos++;
      if ((unsigned char)s[L->pos] >= 0x80)
        lerr(L, here(L, start, L->pos + 1 - start), "non-ASCII identifiers are not supported");
      emit(L, T_NAME, here(L, start, L->pos - start), arena_strndup(L->a, s + start, L->pos - start), L->pos - start);
      continue;
    }
    if (is_digit(c) || (c == '.' && is_digit(s[L->pos + 1]))) {
      lex_number(L);
      continue;
    }
    if ((unsigned char)c >= 0x80) {
      size_t e = L->pos + 1;
      while ((unsigned char)s[e] >= 0x80 && (s[e] & 0xC0) == 0x80) e++;
      lerr(L, here(L, L->pos, e - L->pos), "non-ASCII character outside a string or comment (non-ASCII identifiers are not supported)");
    }
    lex_op(L);
  }

  /* end of file */
  if (L->br.len) {
    Bracket *b = &L->br.data[L->br.len - 1];
    lerr(L, b->span, "'%c' was never closed", b->ch);
  }
  Span eof = here(L, L->pos, 0);
  Token *t = last_tok(L);
  if (t && t->kind != T_NEWLINE && t->kind != T_INDENT && t->kind != T_DEDENT) emit(L, T_NEWLINE, eof, "<newline>", 9);
  while (L->nind > 0) {
    L->nind--;
    emit(L, T_DEDENT, eof, "<dedent>", 8);
  }
  emit(L, T_EOF, eof, "<eof>", 5);
}

int fe_lex(Arena *a, Diag *d, const SrcFile *f, TokenVec *out) {
  Lexer *L = arena_alloc(a, sizeof *L); /* on the heap: nothing to be clobbered by longjmp */
  L->a = a;
  L->d = d;
  L->f = f;
  L->s = f->text;
  L->n = f->len;
  L->line = 1;
  L->out = out;
  out->len = 0;
  if (f->len > MAX_SOURCE_BYTES) {
    diag_error(d, (Span){f, 1, 1, 1, 1}, "source file is too large (%zu bytes; the limit is %d MiB)", f->len,
               (int)(MAX_SOURCE_BYTES >> 20));
    return -1;
  }
  if (setjmp(L->jb)) return -1;
  lex_all(L);
  return 0;
}
