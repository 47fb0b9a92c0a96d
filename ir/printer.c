/* printer.c - the IR's text form (`ctc compile --emit ir`). */
#include "ir.h"

static void print_val(FILE *out, const Func *f, ValId v) {
  fprintf(out, "%%%s.%d", f->values.data[v].name, (int)v);
}

/* ops.def's nattr column, evaluated */
int ir_op_nattrs(Op op, const Type *res, const Type *a0, const int64_t *attr) {
  switch (ir_ops[op].nattr) {
  case NA_RANK: return res->ndim;
  case NA_2RANK: return 2 * res->ndim;
  case NA_2RANK_A: return a0 ? 2 * a0->ndim : 0;
  case NA_FLAG2: return attr && attr[0] ? 2 : 0;
  case NA_RANK1: return 1 + res->ndim;
  default: return ir_ops[op].nattr;
  }
}

int ir_nattrs(const Func *f, const Inst *in) {
  return ir_op_nattrs(in->op, &f->values.data[in->res].type,
                      in->nargs > 0 ? &f->values.data[in->args[0]].type : NULL, in->attr);
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
    int na = ir_nattrs(f, in);
    if (na) {
      fprintf(out, "[");
      for (int k = 0; k < na; k++) fprintf(out, "%s%lld", k ? "," : "", (long long)in->attr[k]);
      fprintf(out, "]");
    }
    if (in->op == IR_CONST || (in->op == IR_PAD && in->attr[0] == 0) || in->op == IR_ATTENTION || in->op == IR_ATTENTION_BWD) fprintf(out, " %.9g", in->fattr);
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
          ir_source_name(p));
  for (int i = 0; i < p->params.len; i++)
    fprintf(out, "; %s \"%s\" : %s\n", p->params.data[i].is_buffer ? "buffer" : "param",
            p->params.data[i].name, ir_type_str(&p->params.data[i].type, tb, sizeof tb));
  for (int i = 0; i < p->funcs.len; i++) {
    fprintf(out, "\n");
    ir_print_func(out, p, p->funcs.data[i]);
  }
}
