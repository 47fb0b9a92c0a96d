/* quantize.h - `--quantize int8 --calibrate X.npy`: post-training quantization of the forward
 * entry (see codegen_c/quant_c.h for the scheme and the plan it makes). */
#ifndef CTC_QUANTIZE_H
#define CTC_QUANTIZE_H
#include "../codegen_c/quant_c.h"

/* Calibrates entry p->funcs[fi] on the samples of `calib` (an .npy of [S, ...the input's shape
 * without its batch axis]; f32, f64, or u8 read as x / 255) with the parameters `weights` (per
 * Program.params entry, as ctc_embed_read gives them): the float model runs in the compiler, a
 * batch at a time, and every value's min/max is kept. Then picks the scales, quantizes the
 * weights and plans the buffers. Returns NULL with *rc an exit status after a located
 * diagnostic (an op with neither an int8 kernel nor a float fallback, bad data). */
QuantPlan *quant_plan(Arena *a, Diag *d, const Program *p, int fi, const void *const *weights, const char *calib,
                      int no_libm, int *rc);
/* --stats: flash and RAM of the int8 build and of the float one (the entry's float parameters as
 * --embed-weights would embed them, its activations' peak in `plan`). */
void quant_print_stats(Arena *a, FILE *out, const char *file, const Program *p, int fi, const QuantPlan *q,
                       const MemPlan *plan);
#endif
