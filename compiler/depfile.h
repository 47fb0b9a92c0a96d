/* depfile.h - `ctc compile/build -MD` and `--depfile FILE`: the files a compile read, as a
 * make rule (`out.c out.h: model.py helper.py`), for make, ninja and CMake's DEPFILE. */
#ifndef CTC_DEPFILE_H
#define CTC_DEPFILE_H
#include "../ir/ir.h"
#include "opts.h"

/* -MD's file: OUT with its extension replaced by .d, as gcc names it (model.c -> model.d,
 * net -> net.d). */
const char *depfile_default(Arena *a, const char *out);

/* After the command line is parsed: -MD sets o->depfile to depfile_default(o->out); either
 * goes with 'compile' or 'build' and -o. 0, or -1 after a diagnostic. */
int depfile_check_opts(Arena *a, Diag *d, Opts *o);

/* Writes o->depfile (atomically): the files the command writes (-o first: the output of the
 * rule that runs it; then the generated .c/.cu and .h), then the model file, the local
 * modules p->imports lists, and the other files the output depends on (--embed-weights,
 * --calibrate, --quantize's --weights). 0, or CTC_EXIT_IO after a diagnostic. */
int depfile_write(Arena *a, Diag *d, const Opts *o, const Program *p);

#endif
