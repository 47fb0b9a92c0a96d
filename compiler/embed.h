/* embed.h - `ctc compile --freestanding --embed-weights W`: the parameters' values from a weights
 * file (safetensors or a PyTorch checkpoint, read with the runtime's readers as `ctc convert`
 * does), for codegen_c to write as const arrays (CgOptions.embed). */
#ifndef CTC_EMBED_H
#define CTC_EMBED_H
#include "../ir/ir.h"

/* Reads `spec` (a path, or PATH:KEY for a checkpoint's dict) and returns in *out, per
 * p->params entry, its numel values in the parameter's dtype (allocated from a). Tensors are
 * matched by state_dict name; shapes must agree; floating data converts to the parameter's
 * floating dtype, int32 to int64. Optimizer state and compile-time constants (Param.is_state)
 * missing from the file take their init values when those are not random. Extra tensors are
 * ignored. Returns 0, or an exit status after reporting through d. */
int ctc_embed_read(Arena *a, Diag *d, const Program *p, const char *spec, const void *const **out);
#endif
