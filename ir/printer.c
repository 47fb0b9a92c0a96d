/* printer.c - the IR's text form (`ctc compile --emit ir`). */
#include "ir.h"

static void print_val(FILE *out, const Func *f, ValId v) {
  fprintf(out, "%%%s.%d", f->values.data[v].name, (int)v);
}

static int nattrs(const Func *f, const Inst *in) {
  const Type *r = &f->values.data[in->res].type;
  switch (in->op) {
  case IR_IOTA: return 2;
  case IR_REDUCE_SUM: case IR_REDUCE_MAX: case IR_CONCAT: return 1;
  case IR_PERMUTE: return r->ndim;
  case IR_SLICE: return 2 * r->ndim;
  case IR_MATMUL: return 2;
  case IR_CONV2D: return 6;
  case IR_MAXPOOL2D: case IR_MAXPOOL2D_BWD: case IR_MAXPOOL2D_JVP: return 8;
  case IR_AVGPOOL2D: case IR_AVGPOOL2D_BWD: return 7;
  case IR_CONV2D_BWD_INPUT: case IR_CONV2D_BWD_WEIGHT: return 6;
  case IR_UNSLICE: return 2 * f->values.data[in->args[0]].type.ndim;
  case IR_EMBEDDING: case IR_EMBEDDING_BWD: return in->attr[0] ? 2 : 0;
  default: return 0;
  }
}

void ir_print_func(FILE *out, const Program *p, const Func *f) {
  char tb[300];
  fprintf(out, "func %s(", f->name);
  for (int i = 0; i < f->inputs.len; i++) {
    if (i) fprintf(out, ", ");
    print_val(out, f, f->inputs.data[i]);
    fprintf(out, ": %s", ir_type_str(&f->values.data[f->inputs.data[i]].type, tb, sizeof tb));
  }
  fprintf(out, ") {\n");
  for (int i = 0; i < f->values.len; i++) {
    const Value *v = &f->values.data[i];
    if (v->kind != V_PARAM) continue;
    fprintf(out, "  ");
    print_val(out, f, i);
    fprintf(out, " = param \"%s\" : %s\n", p->params.data[v->index].name,
            ir_type_str(&v->type, tb, sizeof tb));
  }
  for (int i = 0; i < f->insts.len; i++) {
    const Inst *in = &f->insts.data[i];
    fprintf(out, "  ");
    print_val(out, f, in->res);
    fprintf(out, " = %s", ir_ops[in->op].name);
    int na = nattrs(f, in);
    if (na) {
      fprintf(out, "[");
      for (int k = 0; k < na; k++) fprintf(out, "%s%lld", k ? "," : "", (long long)in->attr[k]);
      fprintf(out, "]");
    }
    if (in->op == IR_CONST) fprintf(out, " %.9g", in->fattr);
    for (int k = 0; k < in->nargs; k++) {
      fprintf(out, k ? ", " : " ");
      print_val(out, f, in->args[k]);
    }
    fprintf(out, " : %s", ir_type_str(&f->values.data[in->res].type, tb, sizeof tb));
    if (in->nograd) fprintf(out, " %s", in->nograd == NG_ALL ? "inference_mode" : "no_grad");
    if (in->loc.file) fprintf(out, "    ; line %d", in->loc.line);
    fprintf(out, "\n");
  }
  for (int i = 0; i < f->updates.len; i++) {
    fprintf(out, "  update \"%s\" := ", p->params.data[f->update_params.data[i]].name);
    print_val(out, f, f->updates.data[i]);
    fprintf(out, "\n");
  }
  fprintf(out, "  return");
  for (int i = 0; i < f->outputs.len; i++) {
    fprintf(out, i ? ", " : " ");
    print_val(out, f, f->outputs.data[i]);
  }
  fprintf(out, "\n}\n");
}

void ir_print_program(FILE *out, const Program *p) {
  char tb[300];
  fprintf(out, "; model %s (class %s) from %s\n", p->model_name, p->class_name,
          p->src ? p->src->path : "?");
  for (int i = 0; i < p->params.len; i++)
    fprintf(out, "; %s \"%s\" : %s\n", p->params.data[i].is_buffer ? "buffer" : "param",
            p->params.data[i].name, ir_type_str(&p->params.data[i].type, tb, sizeof tb));
  for (int i = 0; i < p->funcs.len; i++) {
    fprintf(out, "\n");
    ir_print_func(out, p, p->funcs.data[i]);
  }
}
