/* convert.h - `ctc convert IN -o OUT`: weights between safetensors and PyTorch
 * checkpoints, with the runtime's readers and writers (runtime_min/rt_pt.c,
 * rt_safetensors.c), which ctc links. */
#ifndef CTC_CONVERT_H
#define CTC_CONVERT_H
#include "../support/support.h"

/* Converts IN (safetensors or a torch.save file, told from the content; "IN:KEY"
 * names the dict of a checkpoint) to OUT, whose extension picks the format:
 * .safetensors, or .pt/.pth/.bin (a zip that torch.load(weights_only=True) reads).
 * Returns the exit status: 0, CTC_EXIT_USER (malformed input, bad name) or CTC_EXIT_IO. */
int ctc_convert(Diag *d, const char *in, const char *out);
#endif
