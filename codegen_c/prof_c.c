/* prof_c.c - `--profile` builds: each OpenMP thread's share of a kernel's loops.
 *
 * The C renderer writes the kernel IR's parallel loops and every loop opened through
 * cg_par_for as these regions itself (render_c.c, CgFunc.prof_site: a renderer option).
 * What is left here is for the loops the GEMM, convolution and reduction emitters still
 * write as text: they mark a loop that runs in parallel with a line `CTC_OMP_FOR` (or
 * `CTC_OMP_FOR_SIMD`) before its `for`. In a profile build, after a kernel is
 * emitted, each such loop becomes a parallel region in which every thread
 * notes the time, runs its iterations (`omp for nowait`) and reports its share
 * (ctc_prof_thread): the same iterations on the same threads as
 * `omp parallel for`, plus one clock read per thread at each end. A region
 * (`CTC_OMP_PARALLEL` before a braced block: a GEMM with its epilogue) gets the
 * same clock reads around its block. The loop's
 * extent is read from the emitters' layout: the `for` line at the marker's
 * indentation, then either its braced block (up to the `}` at that
 * indentation) or the more-indented lines of its body. */
#include <stdlib.h>
#include <string.h>
#include "cg_int.h"

void cg_prof_threads(Buf *b, size_t from, const char *site) {
  if (!b->s || from >= b->len) return;
  /* the kernel's lines */
  size_t n = b->len - from;
  char *text = malloc(n + 1);
  CHECK(text != NULL);
  memcpy(text, b->s + from, n);
  text[n] = 0;
  CgLines L;
  cg_lines(text, &L);
  const char **ls = L.s;
  const size_t *ll = L.n, k = L.len;
  Buf out = {0};
  for (size_t i = 0; i < k; i++) {
    int simd = cg_line_is(ls[i], ll[i], "CTC_OMP_FOR_SIMD"), region = cg_line_is(ls[i], ll[i], "CTC_OMP_PARALLEL");
    if (!(simd || region || cg_line_is(ls[i], ll[i], "CTC_OMP_FOR")) || i + 1 >= k) {
      cg_printf(&out, "%.*s\n", (int)ll[i], ls[i]);
      continue;
    }
    int ind = cg_line_indent(ls[i], ll[i]);
    size_t first = i + 1, last = cg_stmt_last(&L, first);
    /* the statement found must be whole: its braces (outside comments) balance */
    int depth = 0, comment = 0;
    for (size_t j = first; j <= last; j++)
      for (size_t q = 0; q < ll[j]; q++) {
        char ch = ls[j][q], nx = q + 1 < ll[j] ? ls[j][q + 1] : 0;
        if (comment && ch == '*' && nx == '/') comment = 0, q++;
        else if (!comment && ch == '/' && nx == '*') comment = 1, q++;
        else if (!comment && ch == '{') depth++;
        else if (!comment && ch == '}') CHECK(--depth >= 0);
      }
    CHECK(depth == 0 && !comment);
    cg_printf(&out, "%*sCTC_PROF_PARALLEL\n%*s{\n", ind, "", ind, "");
    cg_printf(&out, "%*sconst double ctc_thread_t0 = ctc_prof_now();\n", ind + 2, "");
    if (!region) cg_printf(&out, "%*s%s\n", ind + 2, "", simd ? "CTC_PROF_FOR_SIMD" : "CTC_PROF_FOR");
    for (size_t j = first; j <= last; j++) cg_printf(&out, "  %.*s\n", (int)ll[j], ls[j]);
    cg_printf(&out, "%*sctc_prof_thread(m->prof, %s, ctc_prof_thread_num(), ctc_thread_t0);\n", ind + 2, "", site);
    cg_printf(&out, "%*s}\n", ind, "");
    i = last;
  }
  /* the text ended without a newline: so does the result */
  if (n && text[n - 1] != '\n' && out.len) out.s[--out.len] = 0;
  b->len = from;
  if (b->s) b->s[from] = 0;
  if (out.s) cg_puts(b, out.s);
  cg_buf_free(&out);
  cg_lines_free(&L);
  free(text);
}

/* The macros of the regions above, for the file's prologue. */
const char cg_prof_macros[] =
    "/* --profile: a parallel loop as a region whose threads each report their share */\n"
    "#ifdef _OPENMP\n"
    "#include <omp.h>\n"
    "#define CTC_PROF_PARALLEL _Pragma(\"omp parallel\")\n"
    "#define CTC_PROF_FOR _Pragma(\"omp for nowait\")\n"
    "#define CTC_PROF_FOR_SIMD _Pragma(\"omp for simd nowait\")\n"
    "#define ctc_prof_thread_num() omp_get_thread_num()\n"
    "#else\n"
    "#define CTC_PROF_PARALLEL\n"
    "#define CTC_PROF_FOR\n"
    "#define CTC_PROF_FOR_SIMD\n"
    "#define ctc_prof_thread_num() 0\n"
    "#endif\n\n";
