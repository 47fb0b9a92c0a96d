/* reroll_c.c - repeated steps written as C loops (kernels/reroll.c found them).
 *
 * emit_entry writes every kernel as usual; for each run of repeated steps
 * (KnSchedule.runs) this reads the steps' texts back as tokens and keeps a range
 * of steps [t0, t1) as one loop when every step's text is step t0's with
 *   - the same tokens, up to the names of the locals the step's kernels gave out
 *     (renamed consistently: x_e_3 in one step is x_e_9 in the next);
 *   - tensors (by their C names) of the same element type whose addresses move by
 *     a constant number of elements per step (the memory plan lays a step's
 *     values out at one stride: PlanHints.family);
 *   - integers (slice offsets, a step's row in a sequence) that move by a constant
 *     per step, never in a preprocessor line.
 * Step t0 + t is then exactly step t0's text with each moving tensor read at
 * `(name + t * stride)` and each moving integer as `(n + t * d)`, so the loop
 *
 *   / * for t in range(31): model.py:14, a step of 14 kernels (steps 1..31 of 32) * /
 *   for (int64_t t = 0; t < 31; t++) {
 *     ... step 1's code ...
 *   }
 *
 * runs the same code in the same order as the unrolled steps. A step whose text
 * differs (the first, reading an initial state; one a name given out in another
 * step refers to) stays unrolled. The caller recomputes which tensors the body
 * names (only those are declared) and drops `restrict` on the activations of an
 * entry with loops, whose bytes a moved pointer may reach. */
#include <stdlib.h>
#include <string.h>
#include "cg_int.h"

typedef long long ll;

enum { TK_TEXT, TK_INT, TK_TENSOR, TK_LOCAL, TK_POISON };

typedef struct Tok {
  int kind;
  size_t pos, len;   /* in the body */
  int64_t num;       /* TK_INT: its value; TK_TENSOR: its byte offset; TK_LOCAL: its rename */
  ValId v;           /* TK_TENSOR */
  int pp;            /* in a preprocessor line */
} Tok;
typedef Vec(Tok) Toks;

/* Identifier -> int, open addressing over (pointer, length) keys into stable strings. */
typedef struct IdMap {
  const char **key;
  size_t *klen;
  int *val;
  size_t cap;
} IdMap;

static size_t id_hash(const char *s, size_t n) {
  size_t h = 1469598103934665603u;
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211u;
  return h;
}

static void idmap_init(IdMap *m, size_t n) {
  m->cap = 64;
  while (m->cap < 2 * n + 2) m->cap *= 2;
  m->key = calloc(m->cap, sizeof *m->key);
  m->klen = calloc(m->cap, sizeof *m->klen);
  m->val = calloc(m->cap, sizeof *m->val);
  CHECK(m->key && m->klen && m->val);
}

static void idmap_free(IdMap *m) {
  free(m->key);
  free(m->klen);
  free(m->val);
}

static int *idmap_slot(IdMap *m, const char *s, size_t n, int add) {
  size_t i = id_hash(s, n) & (m->cap - 1);
  while (m->key[i] && (m->klen[i] != n || memcmp(m->key[i], s, n))) i = (i + 1) & (m->cap - 1);
  if (!m->key[i]) {
    if (!add) return NULL;
    m->key[i] = s, m->klen[i] = n, m->val[i] = -1;
  }
  return &m->val[i];
}

static int id_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static int id_char(char c) { return id_start(c) || (c >= '0' && c <= '9'); }
static int is_digit(char c) { return c >= '0' && c <= '9'; }

/* The tokens of s[from, to): identifiers, integers, other literals and
 * punctuation; comments and blanks are left out. */
static void tokenize(Arena *A, const char *s, size_t from, size_t to, Toks *out) {
  int line_start = 1, pp = 0;
  for (size_t i = from; i < to;) {
    char c = s[i];
    if (c == '\n') {
      line_start = 1, pp = 0, i++;
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\r') {
      i++;
      continue;
    }
    if (line_start) pp = c == '#', line_start = 0;
    if (c == '/' && i + 1 < to && s[i + 1] == '*') {
      const char *e = strstr(s + i + 2, "*/");
      size_t end = e ? (size_t)(e - s) + 2 : to;
      for (size_t j = i; j < end && j < to; j++)   /* a comment running over lines ends none */
        if (s[j] == '\n') line_start = 1, pp = 0;
      i = end;
      continue;
    }
    if (c == '/' && i + 1 < to && s[i + 1] == '/') {
      while (i < to && s[i] != '\n') i++;
      continue;
    }
    Tok t = {TK_TEXT, i, 1, 0, -1, pp};
    if (c == '"' || c == '\'') {
      size_t j = i + 1;
      while (j < to && s[j] != c) j += s[j] == '\\' ? 2 : 1;
      t.len = (j < to ? j + 1 : to) - i;
    } else if (id_start(c)) {
      size_t j = i;
      while (j < to && id_char(s[j])) j++;
      t.len = j - i;
      t.kind = TK_LOCAL;   /* an identifier, classified by the caller */
    } else if (is_digit(c) || (c == '.' && i + 1 < to && is_digit(s[i + 1]))) {
      size_t j = i;
      int plain = 1;
      while (j < to && (id_char(s[j]) || s[j] == '.' ||
                        ((s[j] == '+' || s[j] == '-') && (s[j - 1] == 'e' || s[j - 1] == 'E') && s[i] != '0'))) {
        plain &= is_digit(s[j]);
        j++;
      }
      t.len = j - i;
      if (plain && t.len <= 17) {
        t.kind = TK_INT;
        t.num = strtoll(s + i, NULL, 10);
      }
    }
    i += t.len;
    vec_push(A, out, t);
  }
}

typedef struct Reroll {
  CgFunc *c;
  const char *text;
  const size_t *kstart;
  int nk;
  IdMap tensors;   /* C name -> value */
  IdMap owner;     /* a name given out while kernel k was written -> k */
  const char *tv;  /* the loops' variable */
} Reroll;

/* Kernel that gave out the identifier, -1 if none did (the entry's names). */
static int owner_of(Reroll *r, const char *s, size_t n) {
  int *o = idmap_slot(&r->owner, s, n, 0);
  return o ? *o : -1;
}

/* Classifies the identifiers of kernels [ka, kb)'s tokens (one step): tensors in
 * memory, locals of these kernels (renamed in order of appearance), names given
 * out by other kernels of the run from `run_first` on (poison: this step cannot be
 * in a loop), and other words (text). */
static void classify(Reroll *r, Toks *tk, int ka, int kb, int run_first) {
  const FuncPlan *fp = r->c->fp;
  IdMap ren;
  idmap_init(&ren, (size_t)tk->len);
  int nren = 0;
  for (int i = 0; i < tk->len; i++) {
    Tok *t = &tk->data[i];
    if (t->kind != TK_LOCAL) continue;
    const char *s = r->text + t->pos;
    int *tv = idmap_slot(&r->tensors, s, t->len, 0);
    int o = owner_of(r, s, t->len);
    if (ka < 0 && ((tv && fp->loc[*tv].base == LOC_LOCAL) || (!tv && o >= 0) ||
                   (r->tv && strlen(r->tv) == t->len && !memcmp(r->tv, s, t->len)))) {
      t->kind = TK_POISON;   /* a block of a kernel: locals, or inside a loop already */
      continue;
    }
    if (tv && fp->loc[*tv].base != LOC_LOCAL) {
      ValId v = *tv;
      t->kind = TK_TENSOR, t->v = v, t->num = fp->loc[v].offset;
      continue;
    }
    if (!tv && (o < ka || o >= kb)) {
      t->kind = o >= run_first ? TK_POISON : TK_TEXT;
      continue;
    }
    int *k = idmap_slot(&ren, s, t->len, 1);   /* a local of this step */
    if (*k < 0) *k = nren++;
    t->num = *k;
  }
  idmap_free(&ren);
}

/* Whether step b's tokens are step a's (same words, locals renamed alike, tensors
 * of the same type on the same base). */
static int same_shape(Reroll *r, const Toks *a, const Toks *b) {
  if (a->len != b->len) return 0;
  const Func *f = r->c->f;
  const FuncPlan *fp = r->c->fp;
  for (int i = 0; i < a->len; i++) {
    const Tok *x = &a->data[i], *y = &b->data[i];
    if (x->kind != y->kind || x->kind == TK_POISON) return 0;
    switch (x->kind) {
      case TK_TEXT:
        if (x->len != y->len || memcmp(r->text + x->pos, r->text + y->pos, x->len)) return 0;
        break;
      case TK_LOCAL:
        if (x->num != y->num) return 0;
        break;
      case TK_TENSOR:
        if (f->values.data[x->v].type.dtype != f->values.data[y->v].type.dtype ||
            fp->loc[x->v].base != fp->loc[y->v].base)
          return 0;
        break;
      default:
        break;
    }
  }
  return 1;
}

/* The end of the steps t0.. (before t1) over which token i moves affinely, *d its
 * move per step (elements for a tensor): t0 + 1 when it moves in a preprocessor line
 * or by a part of an element. */
static int affine(Reroll *r, Toks *tk, int t0, int t1, int i, int64_t *d) {
  const Tok *x = &tk[t0].data[i];
  *d = 0;
  if (x->kind != TK_INT && x->kind != TK_TENSOR) return t1;
  int64_t step = tk[t0 + 1].data[i].num - x->num;
  int t = t0 + 2;
  while (t < t1 && tk[t].data[i].num == x->num + (int64_t)(t - t0) * step) t++;
  if (step && x->pp) return t0 + 1;
  if (step && x->kind == TK_TENSOR && r->c->f->values.data[kn_root(r->c->f, r->c->s, x->v)].kind == V_PARAM)
    return t0 + 1;   /* a loop's steps share their weights */
  if (x->kind == TK_TENSOR) {
    int64_t es = (int64_t)ir_dtype_size(r->c->f->values.data[x->v].type.dtype);
    if (step % es) return t0 + 1;
    step /= es;
  }
  *d = step;
  return t;
}

/* Appends s[0..n) to b with every line that has text indented two more spaces
 * (preprocessor lines stay where they are). */
static void put_indented(Buf *b, const char *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    size_t e = i;
    while (e < n && s[e] != '\n') e++;
    size_t k = i;
    while (k < e && s[k] == ' ') k++;
    if (k < e && s[k] != '#') cg_puts(b, "  ");
    cg_printf(b, "%.*s", (int)(e - i), s + i);
    if (e < n) cg_puts(b, "\n");
    i = e + 1;
  }
}

/* Whether a block's tokens can be a loop's body: braces and parentheses balanced, not
 * the continuation of a statement (else), ending a statement. */
static int whole_block(const Reroll *r, const Toks *tk) {
  int depth = 0;
  for (int i = 0; i < tk->len; i++) {
    const Tok *t = &tk->data[i];
    if (t->kind == TK_POISON) return 0;
    if (t->kind != TK_TEXT || t->len != 1) continue;
    char ch = r->text[t->pos];
    depth += (ch == '{' || ch == '(') - (ch == '}' || ch == ')');
    if (depth < 0) return 0;
  }
  if (depth || !tk->len) return 0;
  const Tok *a = &tk->data[0], *z = &tk->data[tk->len - 1];
  if (a->pp || (a->len == 4 && !memcmp(r->text + a->pos, "else", 4))) return 0;
  return z->kind == TK_TEXT && z->len == 1 && (r->text[z->pos] == ';' || r->text[z->pos] == '}');
}

/* The second pass: blocks of one kernel's text (between blank lines) that repeat with
 * affine offsets, as a concatenation's parts (one per step) or their gradients' slices,
 * become loops too, when they name no local of the kernel (each block is then a
 * statement of its own) and are not inside a loop already. */
static int reroll_blocks(Reroll *r, Buf *body) {
  if (!body->s) return 0;
  Arena *A = r->c->p->arena;
  r->text = body->s;
  Vec(size_t) at = {0};   /* block starts, then the end */
  vec_push(A, &at, (size_t)0);
  for (const char *q = body->s; (q = strstr(q, "\n\n")); q++) vec_push(A, &at, (size_t)(q - body->s) + 2);
  vec_push(A, &at, body->len);
  int nb = at.len - 1, loops = 0;
  Toks *tk = arena_alloc(A, sizeof *tk * (size_t)(nb + 1));
  unsigned char *ok = arena_alloc(A, (size_t)nb + 1);
  for (int b = 0; b < nb; b++) {
    tokenize(A, body->s, at.data[b], at.data[b + 1], &tk[b]);
    classify(r, &tk[b], -1, -1, 0);
    ok[b] = whole_block(r, &tk[b]);
  }
  Buf out = {0};
  size_t done = 0;
  for (int b0 = 0; b0 < nb;) {
    int b1 = b0 + 1;
    while (ok[b0] && b1 < nb && ok[b1] && same_shape(r, &tk[b0], &tk[b1])) b1++;
    int64_t *d = arena_alloc(A, sizeof *d * (size_t)(tk[b0].len + 1));
    for (int i = 0; i < tk[b0].len && b1 - b0 >= 2; i++) b1 = affine(r, tk, b0, b1, i, &d[i]);
    if (b1 - b0 < KN_REROLL_MIN) {
      b0++;
      continue;
    }
    cg_printf(&out, "%.*s", (int)(at.data[b0] - done), body->s + done);
    size_t s0 = at.data[b0];
    int ind = 0;
    while (body->s[s0 + (size_t)ind] == ' ') ind++;
    cg_printf(&out, "%*s/* for %s in range(%d): the %d blocks alike below as one */\n", ind, "", r->tv, b1 - b0, b1 - b0);
    cg_printf(&out, "%*sfor (int64_t %s = 0; %s < %d; %s++) {\n", ind, "", r->tv, r->tv, b1 - b0, r->tv);
    Buf step = {0};
    size_t pos = s0;
    for (int i = 0; i < tk[b0].len; i++) {
      const Tok *x = &tk[b0].data[i];
      if (!d[i]) continue;
      cg_printf(&step, "%.*s", (int)(x->pos - pos), body->s + pos);
      cg_printf(&step, "(%.*s %c %s * %lld)", (int)x->len, body->s + x->pos, d[i] < 0 ? '-' : '+', r->tv,
                (ll)(d[i] < 0 ? -d[i] : d[i]));
      pos = x->pos + x->len;
    }
    size_t end = at.data[b0 + 1];
    while (end > pos && body->s[end - 1] == '\n') end--;
    cg_printf(&step, "%.*s", (int)(end - pos), body->s + pos);
    if (step.s) put_indented(&out, step.s, step.len);
    cg_buf_free(&step);
    cg_printf(&out, "\n%*s}\n\n", ind, "");
    done = at.data[b1];
    loops++;
    b0 = b1;
  }
  if (loops) {
    cg_printf(&out, "%s", body->s + done);
    cg_buf_free(body);
    *body = out;
  } else {
    cg_buf_free(&out);
  }
  return loops;
}

int cg_reroll(CgFunc *c, Buf *body, const size_t *kstart, const int *kname) {
  const KnSchedule *s = c->s;
  const Func *f = c->f;
  int nk = s->kernels.len;
  if (!s->runs.len || !body->s) return 0;
  Arena *A = c->p->arena;
  Reroll r = {c, body->s, kstart, nk, {0}, {0}, NULL};
  idmap_init(&r.tensors, (size_t)f->values.len);
  for (int v = 0; v < f->values.len; v++)
    if (c->cname[v]) *idmap_slot(&r.tensors, c->cname[v], strlen(c->cname[v]), 1) = v;
  idmap_init(&r.owner, (size_t)c->ns->n);
  for (int k = -1, i = 0; i < kname[nk]; i++) {   /* the first time a name was given out; -1 before kernel 0 */
    while (k + 1 <= nk && i >= kname[k + 1]) k++;
    const char *nm = c->ns->used[i];
    int *o = idmap_slot(&r.owner, nm, strlen(nm), 0);
    if (o || !cg_name_given(c->ns, nm)) continue;
    *idmap_slot(&r.owner, nm, strlen(nm), 1) = k < nk ? k : -1;
  }
  /* late[k]: the last kernel whose text names something kernel k gave out */
  int *late = malloc(sizeof(int) * (size_t)(nk + 1));
  CHECK(late);
  for (int k = 0; k < nk; k++) late[k] = k;
  for (int k = 0; k < nk; k++) {
    Toks tk = {0};
    tokenize(A, r.text, kstart[k], kstart[k + 1], &tk);
    for (int i = 0; i < tk.len; i++)
      if (tk.data[i].kind == TK_LOCAL) {
        int o = owner_of(&r, r.text + tk.data[i].pos, tk.data[i].len);
        if (o >= 0 && late[o] < k) late[o] = k;
      }
  }
  Buf out = {0};
  size_t done = 0;   /* body text written to out so far */
  int loops = 0;
  const char *tv = NULL;   /* the loop variable */
  for (int ri = 0; ri < s->runs.len; ri++) {
    const KnRun *run = &s->runs.data[ri];
    Toks *tk = arena_alloc(A, sizeof *tk * (size_t)run->count);
    for (int t = 0; t < run->count; t++) {
      int ka = run->first + t * run->len;
      tokenize(A, r.text, kstart[ka], kstart[ka + run->len], &tk[t]);
      classify(&r, &tk[t], ka, ka + run->len, run->first);
    }
    for (int t0 = 0; t0 < run->count;) {
      int t1 = t0 + 1;
      while (t1 < run->count && same_shape(&r, &tk[t0], &tk[t1])) t1++;
      int64_t *d = arena_alloc(A, sizeof *d * (size_t)(tk[t0].len + 1));
      for (int i = 0; i < tk[t0].len && t1 - t0 >= 2; i++) t1 = affine(&r, tk, t0, t1, i, &d[i]);
      for (int ok = 0; !ok && t1 - t0 >= KN_REROLL_MIN; t1 -= !ok) {   /* no name of the loop's steps read after it */
        int ka = run->first + t0 * run->len, kb = run->first + t1 * run->len;
        ok = 1;
        for (int k = ka; k < kb && ok; k++) ok = late[k] < kb;
      }
      if (t1 - t0 < KN_REROLL_MIN) {
        t0++;
        continue;
      }
      /* steps [t0, t1) as one loop over step t0's text */
      int ka = run->first + t0 * run->len;
      if (!tv) tv = r.tv = cg_name(c->ns, "t");
      cg_printf(&out, "%.*s", (int)(kstart[ka] - done), r.text + done);
      char where[256] = "";
      for (int k = ka; k < ka + run->len && !where[0]; k++)
        for (int i = s->kernels.data[k].first; i <= s->kernels.data[k].last && !where[0]; i++)
          cg_where(where, sizeof where, f->insts.data[i].loc);
      cg_printf(&out, "  /* for %s in range(%d): %s%sa step of %d kernel%s (steps %d..%d of %d) */\n", tv, t1 - t0,
                where, where[0] ? ", " : "", run->len, run->len == 1 ? "" : "s", t0, t1 - 1, run->count);
      cg_printf(&out, "  for (int64_t %s = 0; %s < %d; %s++) {\n", tv, tv, t1 - t0, tv);
      Buf step = {0};
      size_t at = kstart[ka];
      for (int i = 0; i < tk[t0].len; i++) {
        const Tok *x = &tk[t0].data[i];
        if (!d[i]) continue;
        cg_printf(&step, "%.*s", (int)(x->pos - at), r.text + at);
        cg_printf(&step, "(%.*s %c %s * %lld)", (int)x->len, r.text + x->pos, d[i] < 0 ? '-' : '+', tv,
                  (ll)(d[i] < 0 ? -d[i] : d[i]));
        at = x->pos + x->len;
      }
      size_t end = kstart[ka + run->len];
      while (end > at && (r.text[end - 1] == '\n')) end--;   /* the blank line between kernels */
      cg_printf(&step, "%.*s", (int)(end - at), r.text + at);
      if (step.s) put_indented(&out, step.s, step.len);
      cg_buf_free(&step);
      cg_puts(&out, "\n  }\n");
      done = kstart[run->first + t1 * run->len];
      loops++;
      t0 = t1;
    }
  }
  if (loops) {
    cg_printf(&out, "%s", r.text + done);
    cg_buf_free(body);
    *body = out;
  } else {
    cg_buf_free(&out);
  }
  if (!r.tv) r.tv = cg_name(c->ns, "t");
  loops += reroll_blocks(&r, body);
  if (loops) {
    /* declared are the tensors the body names */
    memset(c->ref, 0, (size_t)f->values.len);
    Toks all = {0};
    tokenize(A, body->s, 0, body->len, &all);
    for (int i = 0; i < all.len; i++) {
      int *v = all.data[i].kind == TK_LOCAL ? idmap_slot(&r.tensors, body->s + all.data[i].pos, all.data[i].len, 0) : NULL;
      if (v && c->fp->loc[*v].base != LOC_LOCAL && c->fp->loc[*v].base != LOC_NONE && !cg_is_literal(c, *v))
        c->ref[*v] = 1;
    }
  }
  free(late);
  idmap_free(&r.tensors);
  idmap_free(&r.owner);
  return loops;
}
