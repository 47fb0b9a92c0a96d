/* autograd.h - automatic differentiation as IR -> IR transforms.
 *
 * Reverse mode appends the adjoint sweep to a function: for each instruction,
 * in reverse order, the VJP rule of its primitive (vjp.c, one rule per row of
 * ir/ops.def) emits ordinary primitives computing the operands' adjoints from
 * the result's adjoint. Saved primal values are just SSA values the adjoint
 * instructions read; the memory planner decides how long they live. Every
 * emitted instruction carries the source span of the forward instruction it
 * differentiates, so backward code maps to the model line it came from. */
#ifndef CTC_AUTOGRAD_H
#define CTC_AUTOGRAD_H

#include "../ir/ir.h"

/* One differentiated output and the adjoint it starts with (seed = -1: ones,
 * i.e. d out/d out = 1 for a scalar, or `out.backward()` for a 0-d loss). */
typedef struct AdSeed {
  ValId value;
  ValId seed;
} AdSeed;

/* Appends to f the reverse sweep of f's instructions (those present when it is
 * called) for the sum over seeds of <seed, value>, and stores in grads[i] the
 * gradient with respect to wrt[i] (an all-zero tensor if wrt[i] does not
 * influence the seeds). Only floating-point paths are differentiated. */
void ad_reverse(Program *p, Func *f, const AdSeed *seeds, int nseeds, const ValId *wrt, int nwrt,
                ValId *grads);

#endif
