/* dist_c.c - distributed builds (Program.distributed): the gradient buckets of
 * an entry and the hooks that all-reduce them while backward runs.
 *
 * Lowering records the gradients of every reverse sweep in Func.sync; the
 * schedule (kernels/schedule.c) ends a kernel after each of them, so each is
 * stored (in the arena, at its memory plan offset) and read only by later
 * kernels. Here, from the schedule:
 *   - each gradient's producer: the kernel that writes its storage (the
 *     storage root through reshape/detach views), i.e. where it is final;
 *   - its first reader: the first later kernel reading that storage (or the
 *     end of the entry for outputs and write-backs);
 *   - buckets: the gradients in the order their producers run (the order
 *     backward finishes them), a new bucket when the next one would pass the
 *     bucket size (--bucket-mb, DDP's bucket_cap_mb; 25 MiB by default), has
 *     another dtype, or is final only after a gradient of the bucket is read
 *     (then the bucket could not wait for it);
 *   - after the producer of a bucket's last gradient: ctc->start(bucket);
 *     before the first reader of any of its gradients: ctc->wait(bucket).
 * The bucket tables (arena offsets and element counts) are static data of
 * model.c; the communicator is the runtime's (ctc_comm_world, rt_mpi.c), so
 * model.c itself calls only these two hooks. The CUDA target (codegen_cuda/)
 * emits the same plan and hooks on its device arena (CgDist.arena) and gives
 * the communicator, rt_nccl.c, the stream its kernels run on (CgDist.stream). */
#include <stdlib.h>
#include <string.h>
#include "cg_int.h"

typedef long long ll;

static const Inst *def_of(const Func *f, ValId v) { return ir_def(f, v); }

typedef struct Grad {
  ValId v, root;
  int param, order;
  int kprod, kread;      /* producer kernel; first reader kernel (kernels.len: the end) */
  int64_t off, n;
  DType dt;
} Grad;

static int by_producer(const void *a, const void *b) {
  const Grad *x = a, *y = b;
  if (x->kprod != y->kprod) return x->kprod < y->kprod ? -1 : 1;
  return x->order < y->order ? -1 : x->order > y->order;
}

/* Whether x reads the data of v: x is v or a view (chain) of it. */
static int descends(const Func *f, const KnSchedule *s, ValId x, ValId v) {
  for (;;) {
    if (x == v) return 1;
    const Inst *d = def_of(f, x);
    if (!d || !(ir_is_view(f, x) || (s->fold && s->fold[x]))) return 0;
    x = d->args[0];
  }
}

static void fail(const Program *p, const Func *f, const char *param, const char *why) {
  fprintf(stderr, "ctc: error: entry '%s': distributed training cannot average the gradient of '%s': %s\n", f->name,
          param, why);
  (void)p;
}

int cg_dist_plan(const CgFunc *c, const char *fname, int first_id, CgDist *d) {
  return cg_dist_plan_for(c, fname, first_id, NULL, d);
}

int cg_dist_plan_for(const CgFunc *c, const char *fname, int first_id, const char *build, CgDist *d) {
  const Program *p = c->p;
  const Func *f = c->f;
  const KnSchedule *s = c->s;
  memset(d, 0, sizeof *d);
  if (!p->distributed || !f->sync.len) return 0;
  int nk = s->kernels.len, ng = 0;
  Grad *g = calloc((size_t)f->sync.len, sizeof *g);
  CHECK(g);
  for (int i = 0; i < f->sync.len; i++) {
    ValId v = f->sync.data[i];
    const char *pn = p->params.data[f->sync_params.data[i]].name;
    int dup = 0;
    for (int j = 0; j < ng; j++) dup |= g[j].v == v;
    if (dup || !def_of(f, v)) continue;   /* removed by DCE: nothing reads it */
    ValId root = kn_root(f, s, v);
    const Inst *rd = def_of(f, root);
    const Type *t = &f->values.data[v].type, *rt = &f->values.data[root].type;
    if (rd && rd->op == IR_CONST) continue;   /* a constant: the same on every rank */
    if (!rd || c->fp->loc[root].base != LOC_ARENA) {
      fail(p, f, pn, "it is an input or a parameter itself, not a value the step computes");
      free(g);
      return -1;
    }
    if (t->dtype != DT_F32 && t->dtype != DT_F64) {
      fail(p, f, pn, "it is not a float32 or float64 tensor");
      free(g);
      return -1;
    }
    if (ir_numel(rt) != ir_numel(t) || rt->dtype != t->dtype) {
      fail(p, f, pn, "its storage is part of a larger array");
      free(g);
      return -1;
    }
    Grad *x = &g[ng];
    x->v = v, x->root = root, x->param = f->sync_params.data[i], x->order = ng;
    x->kprod = s->kernel_of[rd - f->insts.data];
    x->kread = nk;
    x->off = c->fp->loc[root].offset, x->n = ir_numel(t), x->dt = t->dtype;
    for (int k = 0; k < f->insts.len; k++) {
      const Inst *in = &f->insts.data[k];
      if (ir_is_view(f, in->res) || (s->fold && s->fold[in->res]) || in->res == root) continue;
      for (int a = 0; a < in->nargs; a++) {
        ValId y = in->args[a];
        if (kn_root(f, s, y) != root) continue;
        if (!descends(f, s, y, v)) {
          fail(p, f, pn, "the step also reads the same storage as another value");
          free(g);
          return -1;
        }
        int kr = s->kernel_of[k];
        if (kr <= x->kprod) BUG("dist_c: gradient of %s read in its own kernel", pn);
        if (kr < x->kread) x->kread = kr;
      }
    }
    ng++;
  }
  qsort(g, (size_t)ng, sizeof *g, by_producer);
  double mb = p->bucket_mb > 0 ? p->bucket_mb : 25;
  int64_t cap = (int64_t)(mb * 1048576.0);
  d->start_k = calloc((size_t)ng + 1, sizeof(int));
  d->wait_k = calloc((size_t)ng + 1, sizeof(int));
  CHECK(d->start_k && d->wait_k);
  d->first_id = first_id;
  Buf off = {0}, cnt = {0}, names = {0}, tbl = {0};
  int64_t bytes = 0, total = 0;
  int nin = 0, minread = nk;
  char tname[160];
  snprintf(tname, sizeof tname, "ctc_bk_%s", fname);
  for (int i = 0; i <= ng; i++) {
    int64_t gb = i < ng ? g[i].n * (int64_t)ir_dtype_size(g[i].dt) : 0;
    if (nin && (i == ng || bytes + gb > cap || g[i].dt != g[i - 1].dt || minread <= g[i].kprod)) {
      int b = d->nb++;   /* close bucket b: gradients i - nin .. i - 1 */
      d->start_k[b] = g[i - 1].kprod;
      d->wait_k[b] = minread;
      cg_printf(&d->tables, "static const int64_t %s_%d_off[] = {%s};\n", tname, b, off.s);
      cg_printf(&d->tables, "static const int64_t %s_%d_n[] = {%s};\n", tname, b, cnt.s);
      cg_printf(&tbl, "  {%d, %d, %s_%d_off, %s_%d_n, %s, %lld, \"%s\"},\n", first_id + b, nin, tname, b, tname, b,
                cg_rt_dtype(g[i - 1].dt), (ll)total, names.s);
      cg_buf_free(&off);
      cg_buf_free(&cnt);
      cg_buf_free(&names);
      bytes = total = 0;
      nin = 0;
      minread = nk;
    }
    if (i == ng) break;
    cg_printf(&off, "%s%lld", nin ? ", " : "", (ll)g[i].off);
    cg_printf(&cnt, "%s%lld", nin ? ", " : "", (ll)g[i].n);
    char id[256];
    cg_ident(id, sizeof id, p->params.data[g[i].param].name);   /* safe in a C string */
    const char *pn = p->params.data[g[i].param].name;
    int plain = 1;
    for (const char *q = pn; *q; q++) plain &= (*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') ||
                                                (*q >= '0' && *q <= '9') || *q == '_' || *q == '.';
    cg_printf(&names, "%s%s", nin ? " " : "", plain ? pn : id);
    bytes += gb;
    total += g[i].n;
    if (g[i].kread < minread) minread = g[i].kread;
    nin++;
  }
  if (d->nb) {
    cg_printf(&d->tables, "/* %s: %d gradient bucket%s of at most %g MiB, all-reduced while backward runs\n"
                          " * (ctc_comm_world(): %s) */\n", f->name, d->nb, d->nb == 1 ? "" : "s", mb,
              build ? build : "build with mpicc -DCTC_MPI and $RT/rt_mpi.c, as `ctc build\n * --distributed mpi` does");
    cg_printf(&d->tables, "static const ctc_bucket %s[] = {\n%s};\n\n", tname, tbl.s);
    snprintf(d->table, sizeof d->table, "%s", tname);
  }
  cg_buf_free(&tbl);
  free(g);
  return 0;
}

void cg_dist_hooks(CgFunc *c, CgDist *d, int k, int after) {
  if (!d->nb) return;
  if (!after && k == 0) {
    d->comm = cg_name(c->ns, "ctc_comm");
    cg_printf(c->out, "  ctc_comm *const %s = ctc_comm_world();  /* the ranks (ctc build --distributed) */\n",
              d->comm);
    if (d->stream)
      cg_printf(c->out, "  %s->stream = (void *)%s;  /* the buckets' events are on the kernels' stream */\n", d->comm,
                d->stream);
  }
  for (int b = 0; b < d->nb; b++) {
    if ((after ? d->start_k[b] : d->wait_k[b]) != k) continue;
    cg_printf(c->out, "  %s->%s(%s, %s, &%s[%d]);  /* bucket %d: %s */\n", d->comm, after ? "start" : "wait",
              d->comm, d->arena ? d->arena : "m->arena", d->table, b, d->first_id + b,
              after ? "its gradients are final: all-reduce them while backward goes on"
                    : "its mean over the ranks, before the first reader");
  }
}

void cg_dist_free(CgDist *d) {
  free(d->start_k);
  free(d->wait_k);
  cg_buf_free(&d->tables);
}
