/* forward.c - forward-mode AD: one pass over the instructions in order,
 * emitting each primitive's JVP (jvp.c) where an operand carries a tangent. */
#include <stdlib.h>
#include "ad_int.h"

void ad_forward(Program *p, Func *f, int ninsts, const AdSeed *seeds, int nseeds, const ValId *outs, int nouts,
                ValId *touts, int as_reverse) {
  ir_pass_event(p, f, "ad_forward", 0);
  int nv = f->values.len, ni = ninsts >= 0 && ninsts < f->insts.len ? ninsts : f->insts.len;
  ValId *tan = malloc(sizeof(ValId) * ((size_t)nv + 1));
  if (!tan) BUG("out of memory");
  for (int i = 0; i < nv; i++) tan[i] = -1;
  Ad ad = {p, f, f->loc, NULL, NULL, 0, 0};
  for (int s = 0; s < nseeds; s++) {
    ValId v = seeds[s].value;
    if (!ir_type_eq(ir_type(f, seeds[s].seed), ir_type(f, v))) BUG("ad_forward: seed type differs from its value");
    tan[v] = tan[v] < 0 ? seeds[s].seed : ad_bin(&ad, IR_ADD, tan[v], seeds[s].seed);
  }
  int maxargs = 1;
  for (int i = 0; i < ni; i++)
    if (f->insts.data[i].nargs > maxargs) maxargs = f->insts.data[i].nargs;
  ValId *t = malloc(sizeof(ValId) * (size_t)maxargs);
  if (!t) BUG("out of memory");
  for (int i = 0; i < ni; i++) {
    Inst in = f->insts.data[i]; /* a copy: emitting grows f->insts */
    if (in.dead || !ir_dtype_is_float(f->values.data[in.res].type.dtype)) continue;
    /* stop-gradient: detach() and inference_mode() always; no_grad() only where
     * this sweep stands for reverse mode (PyTorch's forward AD ignores no_grad) */
    if (in.op == IR_DETACH || in.nograd == NG_ALL || (as_reverse && in.nograd == NG_REVERSE)) continue;
    int any = 0;
    for (int k = 0; k < in.nargs; k++) {
      ValId a = in.args[k];
      t[k] = ir_dtype_is_float(f->values.data[a].type.dtype) ? tan[a] : -1;
      any |= t[k] >= 0;
    }
    if (!any) continue;
    ad.loc = in.loc;
    ValId r = ad_jvp_rules[in.op](&ad, &in, t);
    if (r >= 0) r = ad_test_wrong_rule(&ad, "CTC_TEST_WRONG_JVP", in.op, r);
    if (r >= 0 && !ir_type_eq(ir_type(f, r), ir_type(f, in.res))) {
      char b1[128], b2[128];
      BUG("JVP of '%s' gave %s for a result of type %s", ir_ops[in.op].name, ir_type_str(ir_type(f, r), b1, sizeof b1),
          ir_type_str(ir_type(f, in.res), b2, sizeof b2));
    }
    tan[in.res] = r;
  }
  ad.loc = f->loc;
  for (int i = 0; i < nouts; i++) {
    ValId o = outs[i];
    touts[i] = o < nv && tan[o] >= 0 ? tan[o] : ad_zeros(&ad, ir_type(f, o));
    if (f->values.data[touts[i]].kind == V_INST)
      f->values.data[touts[i]].name = arena_printf(p->arena, "%s_tangent", f->values.data[o].name);
  }
  free(tan);
  free(t);
  ir_pass_event(p, f, "ad_forward", 1);
}
