/* batch.h - a batch dimension chosen at run time (--input x=f32[N,...] --max N=M).
 *
 * ctc stages the model once per trace point N (M first: the program's memory
 * plan; then the next sizes up) and emits C for each with the plan of
 * N = M. Code whose structure is the same at every point differs only in its
 * numbers. batch_merge keeps the first trace's text and replaces each number
 * that differs by the expression of the entry's `batch` argument that gives it
 * at every point: an integer a*N + b, or a floating literal c/N, c/(k*N),
 * c*N, c*N/(N-1) or k*N/(k*N-1), computed as the generated code would
 * (in double, rounded to float in f32 code) so that it is exact at every N.
 * Anything else (a different structure, a size quadratic in N, a number that
 * fits no such form) is a located error: that model needs a static batch. */
#ifndef CTC_BATCH_H
#define CTC_BATCH_H

#include "../ir/ir.h"

#define BATCH_NPOINTS 4
/* The trace points for a maximum M: M, M + 1, M + 2, M + 3 (close together, so
 * that size thresholds of the passes rarely fall between them; four, so that a
 * number quadratic or piecewise in N does not pass for affine). */
void batch_points(int64_t max, int64_t pts[BATCH_NPOINTS]);

/* Checks that the staged programs (one per point) have the same structure and
 * sets each Func's batch_max / batch_n / batch_axis (inputs and outputs whose
 * shape scales with N). 0, or -1 after reporting through d. */
int batch_compare(Diag *d, Program *const *progs, const int64_t *pts, int n);

/* The IR's floating constants (Inst.fattr) that differ between the staged
 * programs, in double precision: batch_merge recognises a literal that differs
 * (printed as float in f32 code, where several forms fit its four values) from the
 * exact values it was rounded from, e.g. 1.0 / (double)(1024 * batch) for a mean
 * over N x 32 x 32. */
typedef struct BatchConsts {
  int len;
  double (*v)[BATCH_NPOINTS];
} BatchConsts;
BatchConsts batch_consts(Program *const *progs, int n);

/* Merges the generated texts (texts[i] emitted at pts[i]); the result is
 * malloc'ed. NULL after reporting through d (`what` names the file). */
char *batch_merge(Diag *d, const char *what, char *const *texts, const int64_t *pts, int n, const BatchConsts *bc);

#endif
