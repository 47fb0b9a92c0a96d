/* build.h - `ctc build`: the system C compiler (or nvcc) over the generated source and ctc's
 * runtime (runtime_min/rt_*.c).
 *
 * The runtime's objects are compiled once per compiler, flag set and runtime version and
 * kept in a cache folder: $CTC_CACHE_DIR, else $XDG_CACHE_HOME/ctc, else ~/.cache/ctc (an
 * empty CTC_CACHE_DIR turns the cache off). A folder rt-<key> holds one set of objects;
 * the key hashes the compiler's --version, the flags, the CPU's flags when -march=native
 * is among them, and every rt_*.c and *.h file of runtime_min, so an edited runtime or
 * another compiler never reuses stale objects. Folders are written whole under a
 * temporary name and renamed into place, so concurrent builds share them safely. Without
 * a writable cache folder the sources are compiled into the program as before. */
#ifndef CTC_BUILD_H
#define CTC_BUILD_H
#include "opts.h"

/* Where the runtime sources are: $CTC_RUNTIME_DIR, else <dir of ctc>/../runtime_min. */
const char *runtime_dir(Arena *a);
const char *pylib_dir(Arena *a);   /* ctc's own Python packages (torchvision's models): $CTC_PYLIB_DIR or ../pylib */
/* The C target: model.c at c_path (C prefix `prefix`) with the runtime into o->out: a
 * program, or with --shared / --python a library. 0, or an exit code after a diagnostic. */
int build_c_program(Arena *a, Diag *d, const Opts *o, const char *c_path, int distributed, const char *prefix);
/* The CUDA target: model.cu at cu_path with nvcc and cuBLAS, or with o->emulate as C++
 * against runtime_min/cuda_emu on the CPU. 0, or an exit code after a diagnostic. */
int build_cuda_program(Arena *a, Diag *d, const Opts *o, const char *cu_path, int distributed);
#endif
