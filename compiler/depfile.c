/* depfile.c - the make rule of `ctc -MD` / `--depfile FILE` (depfile.h). */
#include "depfile.h"
#include <errno.h>
#include <string.h>

const char *depfile_default(Arena *a, const char *out) {
  const char *slash = strrchr(out, '/');
  const char *dot = strrchr(slash ? slash + 1 : out, '.');
  return dot ? arena_printf(a, "%.*s.d", (int)(dot - out), out) : arena_printf(a, "%s.d", out);
}

/* A path in make's syntax: spaces and '#' escaped with a backslash, '$' doubled (ninja's
 * depfile reader takes the same); "./" in front, which the module search adds for a model
 * in the current folder, dropped. */
static void put_path(FILE *f, const char *s, int space) {
  while (s[0] == '.' && s[1] == '/') s += 2;
  if (space) fputc(' ', f);
  for (; *s; s++) {
    if (*s == ' ' || *s == '#' || *s == '\\') fputc('\\', f);
    if (*s == '$') fputc('$', f);
    fputc(*s, f);
  }
}

int depfile_check_opts(Arena *a, Diag *d, Opts *o) {
  if (!o->md && !o->depfile) return 0;
  if ((strcmp(o->cmd, "compile") && strcmp(o->cmd, "build")) || !o->out) {
    diag_plain(d, "%s goes with 'compile' or 'build' and -o (the file its rule names)", o->md ? "-MD" : "--depfile");
    return -1;
  }
  if (o->emit && !strcmp(o->emit, "ast")) {   /* parsed only: no module is imported */
    diag_plain(d, "%s does not go with --emit ast (the file is parsed, not evaluated: it imports nothing)",
               o->md ? "-MD" : "--depfile");
    return -1;
  }
  if (!o->depfile) o->depfile = depfile_default(a, o->out);
  return 0;
}

/* OUT.c -> OUT.h, OUT.cu -> OUT.h, else OUT.h (main.c's header_path) */
static const char *with_h(Arena *a, const char *c) {
  size_t n = strlen(c);
  size_t k = n > 2 && !strcmp(c + n - 2, ".c") ? 2 : n > 3 && !strcmp(c + n - 3, ".cu") ? 3 : 0;
  return arena_printf(a, "%.*s.h", (int)(n - k), c);
}

int depfile_write(Arena *a, Diag *d, const Opts *o, const Program *p) {
  const char *targets[3] = {o->out, NULL, NULL};
  int ntargets = 1, cuda = o->target && !strcmp(o->target, "cuda");
  if (!strcmp(o->cmd, "build")) {   /* PROGRAM.c/.cu and .h (libNAME.so: libNAME.c and .h) */
    size_t n = strlen(o->out);
    const char *stem = (o->shared || o->python) && n > 3 && !strcmp(o->out + n - 3, ".so")
                           ? arena_strndup(a, o->out, n - 3) : o->out;
    targets[ntargets++] = arena_printf(a, "%s%s", stem, cuda && !o->shared && !o->python ? ".cu" : ".c");
    targets[ntargets++] = arena_printf(a, "%s.h", stem);
  } else if (!o->emit || !strcmp(o->emit, "c"))
    targets[ntargets++] = with_h(a, o->out);
  OutFile out;
  if (out_open(a, &out, o->depfile) < 0) {
    diag_plain(d, "cannot write '%s': %s", o->depfile, strerror(errno));
    return CTC_EXIT_IO;
  }
  for (int i = 0; i < ntargets; i++) {
    int dup = 0;
    for (int k = 0; k < i; k++) dup |= !strcmp(targets[k], targets[i]);
    if (!dup) put_path(out.f, targets[i], i > 0);
  }
  fputs(":", out.f);
  const char *deps[4] = {o->file, o->embed, o->calibrate, o->quantize ? o->weights : NULL};
  for (int i = 0; i < 4; i++) {
    if (!deps[i]) continue;
    const char *w = deps[i];
    const char *colon = strrchr(w, ':');   /* ckpt.pt:KEY names the file ckpt.pt */
    if (i && colon && !strchr(colon, '/')) w = arena_strndup(a, w, (size_t)(colon - w));
    fputs(i ? " \\\n " : "", out.f);
    put_path(out.f, w, 1);
    if (!i)
      for (int k = 0; k < p->imports.len; k++) {
        fputs(" \\\n ", out.f);
        put_path(out.f, p->imports.data[k], 1);
      }
  }
  fputs("\n", out.f);
  if (out_commit(&out, !ferror(out.f)) < 0) {
    diag_plain(d, "cannot write '%s': %s", o->depfile, strerror(errno));
    return CTC_EXIT_IO;
  }
  return 0;
}
