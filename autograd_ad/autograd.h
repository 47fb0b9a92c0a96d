/* autograd.h - automatic differentiation as IR -> IR transforms.
 *
 * Reverse mode appends the adjoint sweep to a function: for each instruction,
 * in reverse order, the VJP rule of its primitive (vjp.c: the generic rule of
 * ir/ops.def's EW rows, which reads their derivative columns, or the row's own
 * vjp_<ID>) emits ordinary primitives computing the operands' adjoints from
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
 * influence the seeds). Only floating-point paths are differentiated; DETACH
 * results and instructions staged under no_grad()/inference_mode()
 * (Inst.nograd) are constants. */
/* Several sweeps over one function (a jacobian, one row at a time) need no
 * care: adjoints flow only backwards from the seeds, so the code an earlier
 * sweep appended is never reached. */
/* reached (NULL if not wanted): reached[i] = 1 if some seed depends on wrt[i]
 * through differentiable code, 0 if its gradient is "None" in PyTorch's terms. */
void ad_reverse(Program *p, Func *f, const AdSeed *seeds, int nseeds, const ValId *wrt, int nwrt,
                ValId *grads, int *reached);
/* ad_reverse over f's first `ninsts` instructions only (-1: all): the sweeps of a
 * jacobian pass the count from before the first, so that each sweep walks the
 * function once, not the code earlier sweeps appended (linear in the sweeps). The
 * seeds' values and wrt must be defined within them. */
void ad_reverse_upto(Program *p, Func *f, int ninsts, const AdSeed *seeds, int nseeds, const ValId *wrt, int nwrt,
                     ValId *grads, int *reached);

/* Forward mode: appends to f, for f's first `ninsts` instructions (-1: all
 * present when it is called), the tangent instructions (the JVP rule of each
 * primitive, jvp.c; EW rows share the generic one) given the tangents
 * seeds[i].seed of the values seeds[i].value, and stores in touts[i]
 * the tangent of outs[i] (an all-zero tensor if it does not depend on the
 * seeds). Several sweeps over one function (a forward-mode jacobian, one
 * direction at a time) pass the instruction count from before the first one as
 * `ninsts`, so that a sweep does not differentiate the tangent code an earlier
 * sweep appended (which depends on the same seeds). Composes with ad_reverse:
 * forward over reverse gives Hessian-vector products.
 * Stop-gradient: DETACH results and NG_ALL instructions carry no tangent;
 * NG_REVERSE (torch.no_grad()) instructions carry none only if `as_reverse` is
 * set, i.e. where the sweep computes what PyTorch computes by double backward
 * (torch.autograd.functional.jvp/hvp/vhp/hessian): PyTorch's forward-mode AD
 * (make_dual, torch.func.jvp/jacfwd) ignores no_grad. */
void ad_forward(Program *p, Func *f, int ninsts, const AdSeed *seeds, int nseeds, const ValId *outs, int nouts,
                ValId *touts, int as_reverse);

/* vmap.c (the batch axis): rewrites the instructions of f from index `from` to
 * the end (as present when called) that depend on the values in[i] so that they
 * compute B instances at once, given for each in[i] a value bin[i] of type [B] +
 * in[i]'s type; appends them, each by its primitive's batching rule
 * (ir/batch.def), and stores in bouts[i] the batched form of outs[i] (type [B] +
 * outs[i]'s; an output that does not depend on the inputs is broadcast). The
 * original instructions stay (DCE drops them when unused). Returns -1, or the
 * index of the first instruction that has no batching rule for its operands
 * (*why says what; everything appended is then marked dead): the caller
 * reports it at that instruction's line. */
int ad_batch(Program *p, Func *f, int from, const ValId *in, const ValId *bin, int nin, int64_t B, const ValId *outs,
             int nouts, ValId *bouts, const char **why);

/* gradcheck.c (ctc build --dtype f64): adds, for each entry E with floating
 * outputs (not scheduler or evaluation steps), the hidden entries
 * __grad_E(inputs, r...) -> (s = sum <r_j, out_j>, ds/d floating inputs, ds/d
 * trainable parameters) and __jvp_E(inputs, t_ per floating input and trainable
 * parameter) -> (outputs, their tangents), both without E's state writes, for
 * `./net gradcheck` (runtime_min/rt_gradcheck.c). */
void ad_gradcheck_entries(Program *p);

#endif
