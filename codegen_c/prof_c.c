/* prof_c.c - `--profile` builds: the macros of the regions in which each OpenMP thread
 * reports its share of a kernel's parallel loops.
 *
 * The C renderer writes every parallel loop as such a region itself when the kernel is timed
 * (render_c.c's par_open and par_for, CgFunc.prof_site: a renderer option): the kernel IR's
 * loops, the ops' loops opened through cg_par_for, and the loops and regions the GEMM,
 * convolution and reduction emitters write after cg_par_open. Every thread notes the time,
 * runs its iterations (`omp for nowait`: the same iterations on the same threads as `omp
 * parallel for`) and reports its share (ctc_prof_thread); a region (a GEMM with its
 * epilogue) gets the same clock reads around its block. Nothing reads the text back. */
#include "cg_int.h"

/* The macros of the regions, for the file's prologue. */
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
