/* codegen_c.h - the C backend: IR (after DCE) + its schedule (kernels/: which
 * instructions fuse into one loop nest) + the memory plan over it -> model.c and model.h.
 *
 * The generated pair is C11 and links against runtime_min (ctc_rt.h). For a
 * program whose model_name is "net", model.h declares
 *
 *   typedef struct net_t { unsigned char *arena; size_t arena_bytes; } net_t;
 *   #define NET_ARENA_BYTES ((size_t)N)
 *   size_t net_arena_bytes(void);
 *   int net_init(net_t *m, void *arena, size_t bytes);   (no malloc; 64-byte aligned arena)
 *   int net_load(net_t *m, const char *safetensors_path);
 *   int net_save(const net_t *m, const char *path);
 *   int net_<entry>(net_t *m, const T *input..., T *output...);   one per Func
 *   extern const ctc_model_desc net_desc;
 *
 * An entry with parameter updates (Func.updates: a training step) computes
 * everything from the old parameter values, copies its outputs out and then
 * writes the new values into the parameters. Training state (Param.is_state,
 * the last parameters) is not in the state_dict net_save writes (the descriptor's
 * state_dict keys and kinds say what is), is loaded when a file has it and may be
 * missing (ctc_model_desc.noptional).
 *
 * and model.c defines them; with -DCTC_MAIN it also has a main() that runs the
 * runtime's command-line driver. Build switches of the generated code:
 * -DCTC_HAVE_CBLAS (+ -lopenblas) calls cblas_sgemm/dgemm for GEMMs, otherwise a
 * portable blocked kernel is used; -fopenmp parallelises the outer loops of the
 * heavy ops. Output is deterministic: the same IR gives the same text. */
#ifndef CTC_CODEGEN_C_H
#define CTC_CODEGEN_C_H

#include "../ir/ir.h"

/* Writes the model's C source to c_out and its header to h_out. The source
 * includes the header as `#include "<h_name>"`. Expects DCE to have run (it
 * emits every instruction) and `plan` to come from ir_plan_memory(p).
 * Returns 0, or -1 after printing the reason to stderr (a name clash between
 * an entry and the API, an unsupported construct). */
int cg_c_emit(const Program *p, const MemPlan *plan, FILE *c_out, FILE *h_out, const char *h_name);
/* The same from the kernel layer's schedules (kernels/kernels.h), one per
 * Program.funcs entry, which must be the ones `plan` was made with
 * (ir_plan_memory_hints with their hints). cg_c_emit uses unfused schedules. */
struct KnSchedule;
int cg_c_emit_sched(const Program *p, const MemPlan *plan, struct KnSchedule *const *sched, FILE *c_out,
                    FILE *h_out, const char *h_name);
/* Options of the generated code. */
typedef struct CgOptions {
  int profile;   /* `--profile`: every kernel timed into the model's ctc_profile (runtime_min/rt_profile.c);
                    0: no timing code at all */
  int anomaly;   /* `--anomaly`: every kernel's float outputs checked for NaN/Inf (CTC_ERR_ANOMALY) */
  /* `--freestanding` (freestanding_c.c): model.c/.h need only <stddef.h>, <stdint.h>, <string.h> and the
   * math functions the header names: no runtime (ctc_rt.h), no file I/O, load/save or descriptor, no
   * OpenMP or BLAS. Refused (-1 and a message): profiling, anomaly checks, distributed builds. */
  int freestanding;
  int no_libm;   /* `--no-libm` (with freestanding): ctc's own math functions, no libm at all */
  /* `--embed-weights` (with freestanding): per Program.params entry, its values in the parameter's dtype
   * (numel elements, host byte order), written as const arrays (flash); the arena then holds only the
   * activations. NULL: parameters live in the arena as usual. Entries that update parameters are refused. */
  const void *const *embed;
  /* The default build's forward with a batch of its own (compiler/main.c: the file's fixed batch B
   * staged as a run-time one): an entry with a batch_max keeps its fixed signature,
   * <m>_forward(m, x, out) at batch B, and <m>_forward_batch(m, batch, x, out) takes 1..B. */
  int batch_wrap;
} CgOptions;
/* The flash `--embed-weights` takes: the bytes of the parameters some entry reads (the
 * others get no array). */
int64_t cg_c_weight_bytes(const Program *p);
int cg_c_emit_opts(const Program *p, const MemPlan *plan, struct KnSchedule *const *sched, const CgOptions *opt,
                   FILE *c_out, FILE *h_out, const char *h_name);
/* The C prefix of the generated symbols ("net": net_t, net_forward, net_desc) into buf; returns buf. */
const char *cg_c_prefix(const Program *p, char *buf, size_t cap);

#endif
