/* distributed.c - torch.nn.parallel.DistributedDataParallel, the one place
 * that knows the wrapper.
 *
 * DDP(model) is transparent to staging: it returns the module itself (its
 * forward, parameters and state_dict names are the model's; `ddp.module` is the
 * module again, HostObj.ddp) and makes the program distributed
 * (Program.distributed, as `ctc build --distributed mpi` does): every reverse
 * sweep then records its gradients in Func.sync (training.c), which the C
 * emitter all-reduces in buckets while backward runs (codegen_c/dist_c.c). Its
 * bucket_cap_mb gives the bucket size unless --bucket-mb does.
 * torch.distributed (init_process_group, get_rank, ...) and DistributedSampler
 * stay opaque: the driver's code that calls them does not run, and the
 * runtime does their work (runtime_min/rt_mpi.c, `./net train` under mpirun). */
#include <string.h>
#include "torch_int.h"

static PV *ddp_wrap(L *L, PV *fn, Args *A) {
  (void)fn;
  PV *a[11];
  bind_args(L, A, "module,device_ids=,output_device=,dim=,broadcast_buffers=,process_group=,bucket_cap_mb=,"
                  "find_unused_parameters=,check_reduction=,gradient_as_bucket_view=,static_graph=", a);
  if (!pv_is_module(a[0]) || !a[0]->mod)
    lower_error(L, A->at, "DistributedDataParallel() wraps an nn.Module, not '%s'", pv_kind_name(a[0]));
  Program *p = L->T->prog;
  if (!p->distributed) p->distributed = CTC_DIST_MPI;
  if (a[6] && a[6]->k != PV_NONE && a[6]->k != PV_OPAQUE && p->bucket_mb <= 0) {
    double mb = arg_num(L, A->at, a[6], "bucket_cap_mb");
    if (!(mb > 0) || mb > 1e6) lower_error(L, A->at, "bucket_cap_mb must be a positive number of MiB, not %g", mb);
    p->bucket_mb = mb;
  }
  a[0]->mod->ddp = 1;
  return a[0];
}

PV *dist_ns_getattr(L *L, Span at, const char *m, const char *name) {
  (void)at;
  if (!strcmp(m, "torch.nn") && !strcmp(name, "parallel")) return pv_ns(L, "torch.nn.parallel");
  if (!strcmp(m, "torch.nn.parallel") && !strcmp(name, "distributed")) return pv_ns(L, "torch.nn.parallel");
  if (!strcmp(m, "torch.nn.parallel") && !strcmp(name, "DistributedDataParallel"))
    return pv_native(L, ddp_wrap, 0, "DistributedDataParallel", NULL);
  return NULL;
}
