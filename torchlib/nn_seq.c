/* nn_seq.c - the sequence layers of torch.nn: RNN, LSTM, GRU and their Cell
 * forms, MultiheadAttention, TransformerEncoderLayer and TransformerEncoder.
 * No IR op of their own: each is composed from linear (matmul), elementwise ops,
 * slices, concat and softmax, and the recurrences are unrolled over the sequence
 * length, which is known at compile time; their derivatives are the primitives'.
 * Parameters are named, shaped, ordered and initialised as PyTorch 1.13's. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "torch_int.h"

#define ADD(a, b) t_binary(L, at, OP_ADD, (a), (b))
#define SUB(a, b) t_binary(L, at, OP_SUB, (a), (b))
#define MUL(a, b) t_binary(L, at, OP_MUL, (a), (b))
#define SIG(x) t_unary(L, at, IR_SIGMOID, (x))
#define TANH(x) t_unary(L, at, IR_TANH, (x))

static PV *seq_layer_new(L *L, PV *cls, Args *A) {
  if (L->T->fn) lower_error(L, A->at, "creating layers inside compiled code is not supported; create them in __init__");
  return module_new(L, cls);
}

static PV *seq_param(L *L, Span at, PV *o, const char *name, int n, int64_t d0, int64_t d1, int init, double a,
                     double b) {
  Type t = {0};
  t.dtype = DT_F32;
  t.ndim = n;
  t.dims[0] = d0;
  t.dims[1] = d1;
  for (int i = 0; i < n; i++)
    if (t.dims[i] <= 0)
      lower_error(L, at, "parameter '%s' would have a non-positive dimension (%lld)", name, (long long)t.dims[i]);
  PV *p = param_tensor(L, slot_new(L, at, t, init, a, b));
  module_setattr(L, at, o, name, p);
  return p;
}

static PV *attr(PV *o, const char *name) { return env_get(o->attrs, name); }
static int64_t attr_int(PV *o, const char *name) { return attr(o, name)->i; }
static void set_attr(L *L, PV *o, const char *name, PV *v) { env_set(L, o->attrs, name, v); }
static int is_none(PV *v) { return !v || v->k == PV_NONE; }

static PV *need_t(L *L, Span at, PV *v, const char *what, const char *who) {
  if (!v || v->k != PV_TENSOR) lower_error(L, at, "%s: %s must be a tensor, got '%s'", who, what, v ? pv_kind_name(v) : "nothing");
  return v;
}

static PV *reshape2(L *L, Span at, PV *x, int64_t a, int64_t b) {
  int64_t d[2] = {a, b};
  return t_reshape(L, at, x, d, 2);
}
static PV *reshape3(L *L, Span at, PV *x, int64_t a, int64_t b, int64_t c) {
  int64_t d[3] = {a, b, c};
  return t_reshape(L, at, x, d, 3);
}

/* ---- recurrent layers ------------------------------------------------------------ */

enum { M_RNN_TANH, M_RNN_RELU, M_LSTM, M_GRU };
static int gates_of(int mode) { return mode == M_LSTM ? 4 : mode == M_GRU ? 3 : 1; }

static int rnn_mode(L *L, Span at, int bi, PV *nonlin) {
  if (bi == BI_C_LSTM || bi == BI_C_LSTMCELL) return M_LSTM;
  if (bi == BI_C_GRU || bi == BI_C_GRUCELL) return M_GRU;
  if (is_none(nonlin)) return M_RNN_TANH;
  if (nonlin->k != PV_STR || (strcmp(nonlin->s, "tanh") && strcmp(nonlin->s, "relu")))
    lower_error(L, at, "Unknown nonlinearity '%s'. Select from 'tanh' or 'relu'.",
                nonlin->k == PV_STR ? nonlin->s : pv_kind_name(nonlin));
  return strcmp(nonlin->s, "relu") ? M_RNN_TANH : M_RNN_RELU;
}

/* One step of the cell: gi = x W_ih^T + b_ih (precomputed), h, c the state.
 * Returns the new h; *c updated for LSTM. */
static PV *cell_step(L *L, Span at, int mode, int64_t H, PV *gi, PV *h, PV **c, PV *whh, PV *bhh) {
  PV *gh = t_linear(L, at, h, whh, bhh);
  int ax = gi->t->type.ndim - 1;
#define CH(x, k) t_slice(L, at, (x), ax, (k) * H, ((k) + 1) * H, 1)
  switch (mode) {
  case M_LSTM: {
    PV *g = ADD(gi, gh);
    PV *i = SIG(CH(g, 0)), *f = SIG(CH(g, 1)), *gg = TANH(CH(g, 2)), *o = SIG(CH(g, 3));
    *c = ADD(MUL(f, *c), MUL(i, gg));
    return MUL(o, TANH(*c));
  }
  case M_GRU: {
    PV *r = SIG(ADD(CH(gi, 0), CH(gh, 0)));
    PV *z = SIG(ADD(CH(gi, 1), CH(gh, 1)));
    PV *n = TANH(ADD(CH(gi, 2), MUL(r, CH(gh, 2))));
    return ADD(n, MUL(z, SUB(h, n)));   /* (1 - z) * n + z * h */
  }
  case M_RNN_RELU: return t_unary(L, at, IR_RELU, ADD(gi, gh));
  default: return TANH(ADD(gi, gh));
  }
#undef CH
}

/* nn.RNN / nn.LSTM / nn.GRU */
PV *nn_rnn_new(L *L, PV *cls, Args *A) {
  PV *a[10], *o = seq_layer_new(L, cls, A);
  Span at = A->at;
  int bi = cls->bi;
  /* PyTorch 1.13: nonlinearity is keyword-only (RNN pops it from kwargs) */
  PV *b[11];
  bind_args(L, A, "input_size,hidden_size,num_layers=,bias=,batch_first=,dropout=,bidirectional=,proj_size=,device=,"
                  "dtype=,nonlinearity=", b);
  a[0] = b[0], a[1] = b[1], a[2] = b[2], a[3] = b[10], a[4] = b[3], a[5] = b[4], a[6] = b[5], a[7] = b[6];
  if (b[10] && bi != BI_C_RNN) lower_error(L, at, "%s() got an unexpected keyword argument 'nonlinearity'", cls->s);
  if (b[7] && bi != BI_C_LSTM) lower_error(L, at, "proj_size argument is only supported for LSTM, not RNN or GRU");
  if (b[7] && arg_int(L, at, b[7], "proj_size") != 0) lower_error(L, at, "nn.LSTM proj_size is not supported by ctc");
  int mode = rnn_mode(L, at, bi, a[3]);
  int64_t in = arg_int(L, at, a[0], "input_size"), H = arg_int(L, at, a[1], "hidden_size");
  int64_t nl = a[2] ? arg_int(L, at, a[2], "num_layers") : 1;
  int bias = !a[4] || arg_bool(L, at, a[4], "bias");
  int bf = a[5] && arg_bool(L, at, a[5], "batch_first");
  double p = a[6] ? arg_num(L, at, a[6], "dropout") : 0;
  int bid = a[7] && arg_bool(L, at, a[7], "bidirectional");
  if (H <= 0) lower_error(L, at, "hidden_size must be greater than zero");
  if (nl <= 0) lower_error(L, at, "num_layers must be greater than zero");
  if (in <= 0) lower_error(L, at, "input_size must be greater than zero");
  if (p < 0 || p > 1) lower_error(L, at, "dropout should be a number in range [0, 1] representing the probability of an element being zeroed");
  set_attr(L, o, "mode", pv_int(L, mode));
  set_attr(L, o, "input_size", pv_int(L, in));
  set_attr(L, o, "hidden_size", pv_int(L, H));
  set_attr(L, o, "num_layers", pv_int(L, nl));
  set_attr(L, o, "bias", pv_bool(L, bias));
  set_attr(L, o, "batch_first", pv_bool(L, bf));
  set_attr(L, o, "dropout", pv_float(L, p));
  set_attr(L, o, "bidirectional", pv_bool(L, bid));
  if (bi == BI_C_RNN) set_attr(L, o, "nonlinearity", pv_str(L, mode == M_RNN_RELU ? "relu" : "tanh"));
  double k = 1.0 / sqrt((double)H);
  int64_t G = gates_of(mode) * H;
  for (int64_t l = 0; l < nl; l++)
    for (int d = 0; d <= bid; d++) {
      const char *sfx = d ? "_reverse" : "";
      int64_t lin = l == 0 ? in : H * (bid ? 2 : 1);
      seq_param(L, at, o, arena_printf(L->a, "weight_ih_l%lld%s", (long long)l, sfx), 2, G, lin, PINIT_UNIFORM, -k, k);
      seq_param(L, at, o, arena_printf(L->a, "weight_hh_l%lld%s", (long long)l, sfx), 2, G, H, PINIT_UNIFORM, -k, k);
      if (bias) {
        seq_param(L, at, o, arena_printf(L->a, "bias_ih_l%lld%s", (long long)l, sfx), 1, G, 0, PINIT_UNIFORM, -k, k);
        seq_param(L, at, o, arena_printf(L->a, "bias_hh_l%lld%s", (long long)l, sfx), 1, G, 0, PINIT_UNIFORM, -k, k);
      }
    }
  return o;
}

/* The initial state for (layer l, direction d): hx[l * D + d] or zeros, [N, H]. */
static PV *state_at(L *L, Span at, PV *hx, int64_t idx, int64_t N, int64_t H) {
  if (!hx) {
    Type t = {0};
    t.dtype = DT_F32;
    t.ndim = 2;
    t.dims[0] = N;
    t.dims[1] = H;
    return t_const_tensor(L, at, t, 0);
  }
  return reshape2(L, at, t_slice(L, at, hx, 0, idx, idx + 1, 1), N, H);
}

static PV *check_state(L *L, Span at, PV *hx, int64_t S0, int64_t N, int64_t H, int unbatched, const char *what) {
  if (is_none(hx)) return NULL;
  need_t(L, at, hx, what, "RNN");
  Type t = hx->t->type;
  int ok = unbatched ? t.ndim == 2 && t.dims[0] == S0 && t.dims[1] == H
                     : t.ndim == 3 && t.dims[0] == S0 && t.dims[1] == N && t.dims[2] == H;
  if (!ok) {
    if (unbatched)
      lower_error(L, at, "Expected %s size (%lld, %lld), got %s", what, (long long)S0, (long long)H, shape_str(L, &t));
    lower_error(L, at, "Expected %s size (%lld, %lld, %lld), got %s", what, (long long)S0, (long long)N, (long long)H,
                shape_str(L, &t));
  }
  return unbatched ? reshape3(L, at, hx, S0, 1, H) : hx;
}

PV *nn_rnn_forward(L *L, PV *o, Args *A) {
  PV *a[2];
  Span at = A->at;
  bind_args(L, A, "input,hx=", a);
  const char *who = o->cls->s;
  PV *x = need_t(L, at, a[0], "input", who);
  int mode = (int)attr_int(o, "mode");
  int64_t in = attr_int(o, "input_size"), H = attr_int(o, "hidden_size"), nl = attr_int(o, "num_layers");
  int bf = attr(o, "batch_first")->i != 0, bid = attr(o, "bidirectional")->i != 0, D = bid ? 2 : 1;
  double p = pv_num(attr(o, "dropout"));
  Type tx = x->t->type;
  if (tx.ndim != 2 && tx.ndim != 3)
    lower_error(L, at, "%s: Expected input to be 2-D or 3-D but received %d-D tensor", who, tx.ndim);
  if (tx.dims[tx.ndim - 1] != in)
    lower_error(L, at, "input.size(-1) must be equal to input_size. Expected %lld, got %lld", (long long)in,
                (long long)tx.dims[tx.ndim - 1]);
  if (tx.dtype != DT_F32) x = t_cast(L, at, x, DT_F32);
  int unbatched = tx.ndim == 2;
  if (unbatched) x = reshape3(L, at, x, tx.dims[0], 1, in);
  else if (bf) x = t_transpose(L, at, x, 0, 1);
  int64_t T = x->t->type.dims[0], N = x->t->type.dims[1];
  PV *h0 = NULL, *c0 = NULL;
  if (!is_none(a[1])) {
    if (mode == M_LSTM) {
      if ((a[1]->k != PV_TUPLE && a[1]->k != PV_LIST) || a[1]->n != 2)
        lower_error(L, at, "nn.LSTM expects hx as a tuple (h_0, c_0)");
      h0 = check_state(L, at, a[1]->items[0], nl * D, N, H, unbatched, "hidden[0]");
      c0 = check_state(L, at, a[1]->items[1], nl * D, N, H, unbatched, "hidden[1]");
    } else
      h0 = check_state(L, at, a[1], nl * D, N, H, unbatched, "hidden");
  }
  PV **hn = arena_alloc(L->a, sizeof(PV *) * (size_t)(nl * D)), **cn = arena_alloc(L->a, sizeof(PV *) * (size_t)(nl * D));
  PV **outs = arena_alloc(L->a, sizeof(PV *) * (size_t)T), *dir_out[2];
  for (int64_t l = 0; l < nl; l++) {
    if (l > 0 && p > 0 && o->mod->training) x = t_dropout(L, at, x, p, 1);
    for (int d = 0; d < D; d++) {
      const char *sfx = d ? "_reverse" : "";
      PV *wih = attr(o, arena_printf(L->a, "weight_ih_l%lld%s", (long long)l, sfx));
      PV *whh = attr(o, arena_printf(L->a, "weight_hh_l%lld%s", (long long)l, sfx));
      PV *bih = attr(o, arena_printf(L->a, "bias_ih_l%lld%s", (long long)l, sfx));
      PV *bhh = attr(o, arena_printf(L->a, "bias_hh_l%lld%s", (long long)l, sfx));
      if (!wih || !whh) lower_error(L, at, "%s: missing weights of layer %lld", who, (long long)l);
      PV *gi = t_linear(L, at, x, wih, is_none(bih) ? NULL : bih);   /* [T, N, G*H] for all steps */
      int64_t G = gi->t->type.dims[2];
      PV *h = state_at(L, at, h0, l * D + d, N, H), *c = mode == M_LSTM ? state_at(L, at, c0, l * D + d, N, H) : NULL;
      for (int64_t s = 0; s < T; s++) {
        int64_t t = d ? T - 1 - s : s;
        PV *git = reshape2(L, at, t_slice(L, at, gi, 0, t, t + 1, 1), N, G);
        h = cell_step(L, at, mode, H, git, h, &c, whh, is_none(bhh) ? NULL : bhh);
        outs[t] = reshape3(L, at, h, 1, N, H);
      }
      hn[l * D + d] = reshape3(L, at, h, 1, N, H);
      if (c) cn[l * D + d] = reshape3(L, at, c, 1, N, H);
      dir_out[d] = T == 1 ? outs[0] : t_concat(L, at, outs, (int)T, 0);
    }
    x = D == 1 ? dir_out[0] : t_concat(L, at, dir_out, 2, 2);
  }
  PV *out = x, *h_n = nl * D == 1 ? hn[0] : t_concat(L, at, hn, (int)(nl * D), 0);
  PV *c_n = mode == M_LSTM ? (nl * D == 1 ? cn[0] : t_concat(L, at, cn, (int)(nl * D), 0)) : NULL;
  if (unbatched) {
    out = reshape2(L, at, out, T, D * H);
    h_n = reshape2(L, at, h_n, nl * D, H);
    if (c_n) c_n = reshape2(L, at, c_n, nl * D, H);
  } else if (bf)
    out = t_transpose(L, at, out, 0, 1);
  PV *st = h_n;
  if (c_n) {
    PV *hc[2] = {h_n, c_n};
    st = pv_tuple(L, hc, 2);
  }
  PV *r[2] = {out, st};
  return pv_tuple(L, r, 2);
}

/* nn.RNNCell / nn.LSTMCell / nn.GRUCell */
PV *nn_rnncell_new(L *L, PV *cls, Args *A) {
  PV *a[6], *o = seq_layer_new(L, cls, A);
  Span at = A->at;
  bind_args(L, A, cls->bi == BI_C_RNNCELL ? "input_size,hidden_size,bias=,nonlinearity=,device=,dtype="
                                          : "input_size,hidden_size,bias=,device=,dtype=", a);
  int mode = rnn_mode(L, at, cls->bi, cls->bi == BI_C_RNNCELL ? a[3] : NULL);
  int64_t in = arg_int(L, at, a[0], "input_size"), H = arg_int(L, at, a[1], "hidden_size");
  int bias = !a[2] || arg_bool(L, at, a[2], "bias");
  set_attr(L, o, "mode", pv_int(L, mode));
  set_attr(L, o, "input_size", pv_int(L, in));
  set_attr(L, o, "hidden_size", pv_int(L, H));
  set_attr(L, o, "bias", pv_bool(L, bias));
  if (cls->bi == BI_C_RNNCELL) set_attr(L, o, "nonlinearity", pv_str(L, mode == M_RNN_RELU ? "relu" : "tanh"));
  double k = H > 0 ? 1.0 / sqrt((double)H) : 0;
  int64_t G = gates_of(mode) * H;
  seq_param(L, at, o, "weight_ih", 2, G, in, PINIT_UNIFORM, -k, k);
  seq_param(L, at, o, "weight_hh", 2, G, H, PINIT_UNIFORM, -k, k);
  if (bias) {
    seq_param(L, at, o, "bias_ih", 1, G, 0, PINIT_UNIFORM, -k, k);
    seq_param(L, at, o, "bias_hh", 1, G, 0, PINIT_UNIFORM, -k, k);
  } else {
    module_setattr(L, at, o, "bias_ih", pv_none(L));
    module_setattr(L, at, o, "bias_hh", pv_none(L));
  }
  return o;
}

static PV *cell_state(L *L, Span at, PV *v, int64_t N, int64_t H, int unbatched, const char *who) {
  if (is_none(v)) {
    Type t = {0};
    t.dtype = DT_F32;
    t.ndim = 2;
    t.dims[0] = N;
    t.dims[1] = H;
    return t_const_tensor(L, at, t, 0);
  }
  need_t(L, at, v, "hx", who);
  Type t = v->t->type;
  if (unbatched ? t.ndim != 1 || t.dims[0] != H : t.ndim != 2 || t.dims[0] != N || t.dims[1] != H)
    lower_error(L, at, "%s: hidden state has shape %s, expected [%lld, %lld]", who, shape_str(L, &t), (long long)N,
                (long long)H);
  return unbatched ? reshape2(L, at, v, 1, H) : v;
}

PV *nn_rnncell_forward(L *L, PV *o, Args *A) {
  PV *a[2];
  Span at = A->at;
  const char *who = o->cls->s;
  bind_args(L, A, "input,hx=", a);
  PV *x = need_t(L, at, a[0], "input", who);
  int mode = (int)attr_int(o, "mode");
  int64_t in = attr_int(o, "input_size"), H = attr_int(o, "hidden_size");
  Type tx = x->t->type;
  if ((tx.ndim != 1 && tx.ndim != 2) || tx.dims[tx.ndim - 1] != in)
    lower_error(L, at, "%s: expected input of shape [N, %lld] or [%lld], got %s", who, (long long)in, (long long)in,
                shape_str(L, &tx));
  if (tx.dtype != DT_F32) x = t_cast(L, at, x, DT_F32);
  int unbatched = tx.ndim == 1;
  if (unbatched) x = reshape2(L, at, x, 1, in);
  int64_t N = x->t->type.dims[0];
  PV *h, *c = NULL;
  if (mode == M_LSTM) {
    PV *h0 = NULL, *c0 = NULL;
    if (!is_none(a[1])) {
      if ((a[1]->k != PV_TUPLE && a[1]->k != PV_LIST) || a[1]->n != 2)
        lower_error(L, at, "nn.LSTMCell expects hx as a tuple (h_0, c_0)");
      h0 = a[1]->items[0], c0 = a[1]->items[1];
    }
    h = cell_state(L, at, h0, N, H, unbatched, who);
    c = cell_state(L, at, c0, N, H, unbatched, who);
  } else
    h = cell_state(L, at, a[1], N, H, unbatched, who);
  PV *bih = attr(o, "bias_ih"), *bhh = attr(o, "bias_hh");
  PV *gi = t_linear(L, at, x, attr(o, "weight_ih"), is_none(bih) ? NULL : bih);
  h = cell_step(L, at, mode, H, gi, h, &c, attr(o, "weight_hh"), is_none(bhh) ? NULL : bhh);
  if (unbatched) {
    h = t_reshape(L, at, h, &H, 1);
    if (c) c = t_reshape(L, at, c, &H, 1);
  }
  if (mode != M_LSTM) return h;
  PV *r[2] = {h, c};
  return pv_tuple(L, r, 2);
}
