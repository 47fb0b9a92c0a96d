/* py_int.h - shared by the files of python/ (eval.c, exec.c). */
#ifndef CTC_PY_INT_H
#define CTC_PY_INT_H
#include "py.h"

PV *py_binop(L *L, Span at, int op, PV *a, PV *b);                  /* a op b */
PV *py_concat_str(L *L, Span at, const char *a, const char *b, int grow); /* grow: may append in place */
PV *py_lookup_name(L *L, Node *n);                                   /* a name in scope */
PV *py_make_function(L *L, Node *def);                               /* a def or lambda */
void py_assign_target(L *L, Node *t, PV *v);                         /* t = v */
/* The value a name (or the function's result) has after a staged `if`. */
PV *py_select_value(L *L, Span at, const char *what, PV *c, PV *a, PV *b);

#endif
