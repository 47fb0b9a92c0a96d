/* dot.c - `ctc compile --emit dot`: the IR of every entry as a Graphviz graph.
 *
 * One cluster per entry; a node per value: the entry's inputs and the parameters
 * it reads (ellipses), every instruction (a box: op, result type, model line,
 * the line's text as tooltip) filled by its phase (Inst.phase: forward blue,
 * backward red, optimizer green), scalar literals as small plain text; edges
 * from operands to their users, then to the outputs and (dashed) to the
 * parameters a training step updates. The schedule shows as dashed boxes
 * around the instructions one fused kernel runs (kernels with two or more ops
 * that emit code). Render with `dot -Tsvg g.dot -o g.svg` (tooltips show the
 * source line) or `-Tpng`. Deterministic: the same IR gives the same text. */
#include <string.h>
#include "kernels.h"

static const char *const phase_name[] = {"forward", "backward", "optimizer"};
static const char *const phase_fill[] = {"#cfe2ff", "#f8d7da", "#d1e7dd"};

/* s inside a double-quoted DOT string (quotes, backslashes and line breaks escaped). */
static void put_esc(FILE *out, const char *s) {
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') fputc('\\', out);
    if (*s == '\n') fputs("\\n", out);
    else if (*s != '\r') fputc(*s, out);
  }
}

static const char *base_name(const char *path) {
  const char *b = strrchr(path, '/');
  return b ? b + 1 : path;
}

/* "model.py:14" of a span (empty when it has no line). */
static void where(char *buf, size_t cap, Span at) {
  if (at.line <= 0) {
    buf[0] = 0;
    return;
  }
  snprintf(buf, cap, "%s:%d", at.file && at.file->path ? base_name(at.file->path) : "?", at.line);
}

/* The text of the span's line, trimmed (the tooltip of its nodes). */
static void line_text(char *buf, size_t cap, Span at) {
  buf[0] = 0;
  if (at.line <= 0 || !at.file || !at.file->text) return;
  const char *t = at.file->text;
  for (int l = 1; l < at.line && *t; t++) l += *t == '\n';
  while (*t == ' ' || *t == '\t') t++;
  size_t n = strcspn(t, "\n");
  while (n && (t[n - 1] == ' ' || t[n - 1] == '\r')) n--;
  snprintf(buf, cap, "%.*s", (int)(n < cap ? n : cap - 1), t);
}

static int code_inst(const Func *f, const KnSchedule *s, const Inst *in) {
  return in->op != IR_CONST && !(s->fold && s->fold[in->res]) && !ir_is_view(f, in->res);
}

static void inst_node(FILE *out, const Program *p, int fi, const Func *f, const KnSchedule *s, const Inst *in,
                      const char *ind) {
  char tb[256], at[300], text[200];
  const Value *v = &f->values.data[in->res];
  int ph = in->phase >= PH_FORWARD && in->phase <= PH_OPTIMIZER ? in->phase : PH_FORWARD;
  if (in->op == IR_CONST && v->type.ndim == 0) {   /* a literal */
    fprintf(out, "%sf%d_v%d [label=\"%g\", shape=plaintext, style=\"\", fontsize=8];\n", ind, fi, in->res, in->fattr);
    return;
  }
  where(at, sizeof at, in->loc);
  line_text(text, sizeof text, in->loc);
  fprintf(out, "%sf%d_v%d [label=\"", ind, fi, in->res);
  put_esc(out, ir_ops[in->op].name);
  if (in->op == IR_CONST) fprintf(out, " %g", in->fattr);
  if (strcmp(v->name, ir_ops[in->op].name)) {
    fputc(' ', out);
    put_esc(out, v->name);
  }
  fprintf(out, "\\n%s", ir_type_str(&v->type, tb, sizeof tb));
  if (*at) {
    fputs("\\n", out);
    put_esc(out, at);
  }
  fprintf(out, "\", fillcolor=\"%s\", class=\"%s\"", phase_fill[ph], phase_name[ph]);
  if (!code_inst(f, s, in)) fputs(", style=\"rounded,filled,dotted\"", out);   /* a view: no code */
  fprintf(out, ", tooltip=\"%s", phase_name[ph]);
  if (*text) {
    fputs(": ", out);
    put_esc(out, text);
  }
  fputs("\"];\n", out);
  (void)p;
}

static void entry_graph(FILE *out, const Program *p, int fi, const Func *f, const KnSchedule *s) {
  static const char *const kind[] = {"elementwise", "row", "op", "view"};
  char tb[256];
  fprintf(out, "  subgraph cluster_f%d {\n    label=\"entry ", fi);
  put_esc(out, f->name);
  fprintf(out, "\";\n    style=rounded; color=\"#888888\"; fontsize=14;\n");
  /* the values that are not instructions: inputs, and the parameters read */
  for (int v = 0; v < f->values.len; v++) {
    const Value *val = &f->values.data[v];
    if (val->kind == V_INST) continue;
    int used = val->kind == V_INPUT;
    for (int i = 0; i < f->insts.len && !used; i++)
      for (int j = 0; j < f->insts.data[i].nargs && !used; j++) used = f->insts.data[i].args[j] == v;
    for (int j = 0; j < f->outputs.len && !used; j++) used = f->outputs.data[j] == v;
    if (!used) continue;
    const char *name = val->kind == V_PARAM ? p->params.data[val->index].name : val->name;
    fprintf(out, "    f%d_v%d [label=\"%s ", fi, v, val->kind == V_INPUT ? "input" : "param");
    put_esc(out, name);
    fprintf(out, "\\n%s\", shape=ellipse, fillcolor=\"%s\"];\n", ir_type_str(&val->type, tb, sizeof tb),
            val->kind == V_INPUT ? "#ffffff" : "#eeeeee");
  }
  /* instructions, in a cluster per fused kernel */
  for (int k = 0; k < s->kernels.len; k++) {
    const Kernel *kn = &s->kernels.data[k];
    int ncode = 0;
    for (int i = kn->first; i <= kn->last; i++) ncode += f->insts.data[i].op != IR_CONST;
    const char *ind = "    ";
    if (ncode >= 2) {
      fprintf(out, "    subgraph cluster_f%d_k%d {\n      label=\"kernel %d: %s over %s\"; style=dashed; color=\"#666666\"; "
                   "fontsize=9;\n", fi, k, k, kind[kn->kind], ir_type_str(&kn->space, tb, sizeof tb));
      ind = "      ";
    }
    for (int i = kn->first; i <= kn->last; i++) {
      const Inst *in = &f->insts.data[i];
      if (in->dead || (ncode >= 2 && in->op == IR_CONST)) continue;
      inst_node(out, p, fi, f, s, in, ind);
    }
    if (ncode >= 2) {
      fprintf(out, "    }\n");
      for (int i = kn->first; i <= kn->last; i++)   /* its literals outside the box */
        if (!f->insts.data[i].dead && f->insts.data[i].op == IR_CONST) inst_node(out, p, fi, f, s, &f->insts.data[i], "    ");
    }
  }
  /* outputs and updates */
  for (int j = 0; j < f->outputs.len; j++) {
    fprintf(out, "    f%d_out%d [label=\"output ", fi, j);
    put_esc(out, j < f->out_names.len && f->out_names.data[j] ? f->out_names.data[j] : "?");
    fprintf(out, "\", shape=ellipse, fillcolor=\"#ffffff\", penwidth=2];\n");
  }
  for (int j = 0; j < f->updates.len; j++) {
    fprintf(out, "    f%d_upd%d [label=\"update ", fi, j);
    put_esc(out, p->params.data[f->update_params.data[j]].name);
    fprintf(out, "\", shape=ellipse, fillcolor=\"#eeeeee\", penwidth=2];\n");
  }
  /* edges: operands to users */
  for (int i = 0; i < f->insts.len; i++) {
    const Inst *in = &f->insts.data[i];
    if (in->dead) continue;
    for (int j = 0; j < in->nargs; j++)
      if (in->args[j] >= 0) fprintf(out, "    f%d_v%d -> f%d_v%d;\n", fi, in->args[j], fi, in->res);
  }
  for (int j = 0; j < f->outputs.len; j++) fprintf(out, "    f%d_v%d -> f%d_out%d;\n", fi, f->outputs.data[j], fi, j);
  for (int j = 0; j < f->updates.len; j++)
    fprintf(out, "    f%d_v%d -> f%d_upd%d [style=dashed];\n", fi, f->updates.data[j], fi, j);
  fprintf(out, "  }\n");
}

void kn_dot(FILE *out, const Program *p, KnSchedule *const *sched) {
  const char *src = p->src && p->src->path ? base_name(p->src->path) : "?";
  fprintf(out, "// generated by ctc --emit dot from %s; render: dot -Tsvg FILE -o FILE.svg\n", src);
  fprintf(out, "digraph ctc {\n  graph [rankdir=TB, fontname=\"Helvetica\", labelloc=t, label=\"");
  put_esc(out, src);
  fprintf(out, " (class ");
  put_esc(out, p->class_name ? p->class_name : "?");
  fprintf(out, ")\"];\n  node [shape=box, style=\"rounded,filled\", fontname=\"Helvetica\", fontsize=10];\n"
               "  edge [color=\"#555555\", arrowsize=0.6];\n");
  fprintf(out, "  subgraph cluster_legend {\n    label=\"phase\"; style=rounded; fontsize=10;\n");
  for (int ph = 0; ph < 3; ph++)
    fprintf(out, "    legend_%s [label=\"%s\", fillcolor=\"%s\", class=\"%s\"];\n", phase_name[ph], phase_name[ph],
            phase_fill[ph], phase_name[ph]);
  fprintf(out, "    legend_forward -> legend_backward -> legend_optimizer [style=invis];\n  }\n");
  for (int i = 0; i < p->funcs.len; i++) entry_graph(out, p, i, p->funcs.data[i], sched[i]);
  fprintf(out, "}\n");
}
