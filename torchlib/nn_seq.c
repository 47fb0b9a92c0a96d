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

/* The dtype a recurrent layer or attention computes in: float64 where its weight (or query) is,
 * else float32 (PyTorch computes in the weights' dtype; bf16 and f16 storage is read as float32). A
 * `.double()` model's RNN once computed its input, state and masks in float32. */
static DType seq_dtype(const PV *w) { return w && w->t && w->t->type.dtype == DT_F64 ? DT_F64 : DT_F32; }

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
  if (H > ((int64_t)1 << 40) || in > ((int64_t)1 << 40) || nl > ((int64_t)1 << 20))
    lower_error(L, at, "%s is too large for ctc", cls->s);
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
static PV *state_at(L *L, Span at, PV *hx, int64_t idx, int64_t N, int64_t H, DType dt) {
  if (!hx) {
    Type t = {0};
    t.dtype = dt;
    t.ndim = 2;
    t.dims[0] = N;
    t.dims[1] = H;
    /* written here, before the steps: the first step then reads its state from memory as
     * every later one does (kernels/reroll.c makes it the state's step -1, one loop) */
    return t_wrap(L, t_val(L, at, t_const_tensor(L, at, t, 0)));
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
  const DType dt = seq_dtype(attr(o, "weight_ih_l0"));
  if (tx.dtype != dt) x = t_cast(L, at, x, dt);
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
      PV *h = state_at(L, at, h0, l * D + d, N, H, dt), *c = mode == M_LSTM ? state_at(L, at, c0, l * D + d, N, H, dt) : NULL;
      for (int64_t s = 0; s < T; s++) {
        int64_t t = d ? T - 1 - s : s;
        eval_charge(L, at, 1);   /* the unrolled steps count against the compile-time step limit */
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
  if (H <= 0 || in <= 0) lower_error(L, at, "input_size and hidden_size must be greater than zero");
  if (H > ((int64_t)1 << 40) || in > ((int64_t)1 << 40)) lower_error(L, at, "%s is too large for ctc", cls->s);
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

static PV *cell_state(L *L, Span at, PV *v, int64_t N, int64_t H, int unbatched, const char *who, DType dt) {
  if (is_none(v)) {
    Type t = {0};
    t.dtype = dt;
    t.ndim = 2;
    t.dims[0] = N;
    t.dims[1] = H;
    /* written here, before the steps: the first step then reads its state from memory as
     * every later one does (kernels/reroll.c makes it the state's step -1, one loop) */
    return t_wrap(L, t_val(L, at, t_const_tensor(L, at, t, 0)));
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
  const DType dt = seq_dtype(attr(o, "weight_ih"));
  if (tx.dtype != dt) x = t_cast(L, at, x, dt);
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
    h = cell_state(L, at, h0, N, H, unbatched, who, dt);
    c = cell_state(L, at, c0, N, H, unbatched, who, dt);
  } else
    h = cell_state(L, at, a[1], N, H, unbatched, who, dt);
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

/* ---- attention ------------------------------------------------------------------- */

static PV *make_child(L *L, Span at, int bi, PV **args, int n, const char **kn, PV **kv, int nkw) {
  return call_value(L, at, bi_value(L, bi, NULL), args, n, kn, kv, nkw);
}

/* The core of attention on [N, h, L, hd] / [N, h, S, hd]: softmax(q k^T * scale + mask) v.
 * masks: `add` (float, added; bool: True is masked out) broadcastable to [N, h, L, S];
 * keep: a bool mask whose False entries are masked out (F.scaled_dot_product_attention's);
 * causal: the upper triangle masked out. Returns the output and, in *weights, the
 * attention weights (after dropout, as PyTorch returns them). */
static PV *attend(L *L, Span at, PV *q, PV *k, PV *v, PV **masks, int nmasks, int causal, double scale, double p,
                  int training, PV **weights) {
  int64_t perm[4] = {0, 1, 3, 2};
  int nomask = 1;
  for (int i = 0; i < nmasks; i++) nomask &= !masks[i];
  if (L->T->dec && causal && nomask && !weights && !(p > 0 && training)) {   /* decode.c: the KV-cache entry */
    PV *r = dec_attend(L, at, q, k, v, scale);
    if (r) return r;
  }
  PV *s = t_matmul(L, at, MUL(q, pv_float(L, scale)), t_permute(L, at, k, perm, 4));
  Type ts = s->t->type;
  for (int i = 0; i < nmasks; i++) {
    PV *m = masks[i];
    if (!m) continue;
    if (m->t->type.dtype == DT_BOOL) s = t_where(L, at, m, pv_float(L, -INFINITY), s);
    else s = ADD(s, m);
  }
  if (causal) {
    Type t = {0};
    t.dtype = DT_F32;
    t.ndim = 2;
    t.dims[0] = ts.dims[2];
    t.dims[1] = ts.dims[3];
    PV *upper = t_compare(L, at, OP_GT, t_tri(L, at, t_const_tensor(L, at, t, 1), 1, 1), pv_float(L, 0.5));
    s = t_where(L, at, upper, pv_float(L, -INFINITY), s);
  }
  PV *w = t_softmax(L, at, s, 3, 0);
  if (p > 0 && training) w = t_dropout(L, at, w, p, 1);
  if (weights) *weights = w;
  return t_matmul(L, at, w, v);
}

/* [N, T, E] -> [N, h, T, E / h] */
static PV *split_heads(L *L, Span at, PV *x, int64_t h) {
  Type t = x->t->type;
  int64_t d[4] = {t.dims[0], t.dims[1], h, t.dims[2] / h}, perm[4] = {0, 2, 1, 3};
  return t_permute(L, at, t_reshape(L, at, x, d, 4), perm, 4);
}

PV *nn_mha_new(L *L, PV *cls, Args *A) {
  PV *a[11], *o = seq_layer_new(L, cls, A);
  Span at = A->at;
  bind_args(L, A, "embed_dim,num_heads,dropout=,bias=,add_bias_kv=,add_zero_attn=,kdim=,vdim=,batch_first=,device=,dtype=",
            a);
  int64_t E = arg_int(L, at, a[0], "embed_dim"), h = arg_int(L, at, a[1], "num_heads");
  double p = a[2] ? arg_num(L, at, a[2], "dropout") : 0;
  int bias = !a[3] || arg_bool(L, at, a[3], "bias");
  if (a[4] && arg_bool(L, at, a[4], "add_bias_kv")) lower_error(L, at, "MultiheadAttention add_bias_kv is not supported by ctc");
  if (a[5] && arg_bool(L, at, a[5], "add_zero_attn")) lower_error(L, at, "MultiheadAttention add_zero_attn is not supported by ctc");
  int64_t kd = is_none(a[6]) ? E : arg_int(L, at, a[6], "kdim"), vd = is_none(a[7]) ? E : arg_int(L, at, a[7], "vdim");
  int bf = a[8] && arg_bool(L, at, a[8], "batch_first");
  if (E <= 0 || h <= 0 || kd <= 0 || vd <= 0) lower_error(L, at, "embed_dim, num_heads, kdim and vdim must be positive");
  if (E > ((int64_t)1 << 40) || kd > ((int64_t)1 << 40) || vd > ((int64_t)1 << 40))
    lower_error(L, at, "MultiheadAttention is too large for ctc");
  if (E % h) lower_error(L, at, "embed_dim must be divisible by num_heads");
  if (p < 0 || p > 1) lower_error(L, at, "dropout probability has to be between 0 and 1, but got %g", p);
  set_attr(L, o, "embed_dim", pv_int(L, E));
  set_attr(L, o, "kdim", pv_int(L, kd));
  set_attr(L, o, "vdim", pv_int(L, vd));
  set_attr(L, o, "num_heads", pv_int(L, h));
  set_attr(L, o, "dropout", pv_float(L, p));
  set_attr(L, o, "batch_first", pv_bool(L, bf));
  set_attr(L, o, "head_dim", pv_int(L, E / h));
  int same = kd == E && vd == E;
  set_attr(L, o, "_qkv_same_embed_dim", pv_bool(L, same));
  /* xavier_uniform_: bound sqrt(6 / (fan_in + fan_out)) */
  if (!same) {
    seq_param(L, at, o, "q_proj_weight", 2, E, E, PINIT_UNIFORM, -sqrt(3.0 / E), sqrt(3.0 / E));
    seq_param(L, at, o, "k_proj_weight", 2, E, kd, PINIT_UNIFORM, -sqrt(6.0 / (E + kd)), sqrt(6.0 / (E + kd)));
    seq_param(L, at, o, "v_proj_weight", 2, E, vd, PINIT_UNIFORM, -sqrt(6.0 / (E + vd)), sqrt(6.0 / (E + vd)));
    set_attr(L, o, "in_proj_weight", pv_none(L));
  } else {
    seq_param(L, at, o, "in_proj_weight", 2, 3 * E, E, PINIT_UNIFORM, -sqrt(6.0 / (4 * E)), sqrt(6.0 / (4 * E)));
    set_attr(L, o, "q_proj_weight", pv_none(L));
    set_attr(L, o, "k_proj_weight", pv_none(L));
    set_attr(L, o, "v_proj_weight", pv_none(L));
  }
  if (bias) seq_param(L, at, o, "in_proj_bias", 1, 3 * E, 0, PINIT_ZERO, 0, 0);
  else set_attr(L, o, "in_proj_bias", pv_none(L));
  PV *la[2] = {pv_int(L, E), pv_int(L, E)}, *lb = pv_bool(L, bias);
  const char *kn[1] = {"bias"};
  PV *op = make_child(L, at, BI_C_LINEAR, la, 2, kn, &lb, 1);
  PV *ob = env_get(op->attrs, "bias");
  if (ob && ob->k == PV_TENSOR && ob->t->slot) ob->t->slot->init = PINIT_ZERO;   /* constant_(out_proj.bias, 0.) */
  module_setattr(L, at, o, "out_proj", op);
  set_attr(L, o, "bias_k", pv_none(L));
  set_attr(L, o, "bias_v", pv_none(L));
  set_attr(L, o, "add_zero_attn", pv_bool(L, 0));
  return o;
}

static PV *mha_mask(L *L, Span at, PV *m, int64_t N, int64_t h, int64_t T, int64_t S, const char *what, DType dt) {
  if (is_none(m)) return NULL;
  need_t(L, at, m, what, "MultiheadAttention");
  Type t = m->t->type;
  if (t.dtype != DT_BOOL && !ir_dtype_is_float(t.dtype))
    lower_error(L, at, "only bool and floating types of %s are supported", what);
  if (t.dtype != DT_BOOL && t.dtype != dt) m = t_cast(L, at, m, dt);
  if (!strcmp(what, "key_padding_mask")) {
    if (!((t.ndim == 2 && t.dims[0] == N && t.dims[1] == S) || (N == 1 && t.ndim == 1 && t.dims[0] == S)))
      lower_error(L, at, "key_padding_mask should have shape (%lld, %lld), got %s", (long long)N, (long long)S,
                  shape_str(L, &t));
    int64_t d[4] = {N, 1, 1, S};
    return t_reshape(L, at, m, d, 4);
  }
  if (t.ndim == 2) {
    if (t.dims[0] != T || t.dims[1] != S)
      lower_error(L, at, "The shape of the 2D attn_mask is %s, but should be (%lld, %lld).", shape_str(L, &t),
                  (long long)T, (long long)S);
    return m;
  }
  if (t.ndim == 3) {
    if (t.dims[0] != N * h || t.dims[1] != T || t.dims[2] != S)
      lower_error(L, at, "The shape of the 3D attn_mask is %s, but should be (%lld, %lld, %lld).", shape_str(L, &t),
                  (long long)(N * h), (long long)T, (long long)S);
    int64_t d[4] = {N, h, T, S};
    return t_reshape(L, at, m, d, 4);
  }
  lower_error(L, at, "attn_mask's dimension %d is not supported", t.ndim);
}

PV *nn_mha_forward(L *L, PV *o, Args *A) {
  PV *a[8];
  Span at = A->at;
  bind_args(L, A, "query,key,value,key_padding_mask=,need_weights=,attn_mask=,average_attn_weights=,is_causal=", a);
  PV *q = need_t(L, at, a[0], "query", "MultiheadAttention"), *k = need_t(L, at, a[1], "key", "MultiheadAttention"),
     *v = need_t(L, at, a[2], "value", "MultiheadAttention");
  int need_w = !a[4] || arg_bool(L, at, a[4], "need_weights"), avg = !a[6] || arg_bool(L, at, a[6], "average_attn_weights");
  int causal = a[7] && arg_bool(L, at, a[7], "is_causal");
  int64_t E = attr_int(o, "embed_dim"), h = attr_int(o, "num_heads"), kd = attr_int(o, "kdim"), vd = attr_int(o, "vdim");
  int bf = attr(o, "batch_first")->i != 0;
  Type tq = q->t->type, tk = k->t->type, tv = v->t->type;
  int unbatched = tq.ndim == 2;
  if ((tq.ndim != 2 && tq.ndim != 3) || tk.ndim != tq.ndim || tv.ndim != tq.ndim)
    lower_error(L, at, "MultiheadAttention: query, key and value must all be 2-D (unbatched) or 3-D, got %s, %s, %s",
                shape_str(L, &tq), shape_str(L, &tk), shape_str(L, &tv));
  if (tq.dims[tq.ndim - 1] != E || tk.dims[tk.ndim - 1] != kd || tv.dims[tv.ndim - 1] != vd)
    lower_error(L, at, "MultiheadAttention: expected query, key, value feature sizes %lld, %lld, %lld, got %s, %s, %s",
                (long long)E, (long long)kd, (long long)vd, shape_str(L, &tq), shape_str(L, &tk), shape_str(L, &tv));
  PV *xs[3] = {q, k, v};
  const DType dt = seq_dtype(is_none(attr(o, "in_proj_weight")) ? attr(o, "q_proj_weight") : attr(o, "in_proj_weight"));
  for (int i = 0; i < 3; i++) {
    Type t = xs[i]->t->type;
    if (t.dtype != dt) xs[i] = t_cast(L, at, xs[i], dt);
    if (unbatched) xs[i] = reshape3(L, at, xs[i], 1, t.dims[0], t.dims[1]);
    else if (!bf) xs[i] = t_transpose(L, at, xs[i], 0, 1);   /* [N, T, E] */
  }
  int64_t N = xs[0]->t->type.dims[0], T = xs[0]->t->type.dims[1], S = xs[1]->t->type.dims[1];
  if (xs[2]->t->type.dims[1] != S || xs[1]->t->type.dims[0] != N || xs[2]->t->type.dims[0] != N)
    lower_error(L, at, "MultiheadAttention: key and value must have the same batch and sequence sizes, got %s and %s",
                shape_str(L, &tk), shape_str(L, &tv));
  PV *b = attr(o, "in_proj_bias"), *W = attr(o, "in_proj_weight");
  PV *proj[3];
  static const char *const sep[3] = {"q_proj_weight", "k_proj_weight", "v_proj_weight"};
  for (int i = 0; i < 3; i++) {
    PV *w = !is_none(W) ? t_slice(L, at, W, 0, i * E, (i + 1) * E, 1) : attr(o, sep[i]);
    PV *bi = is_none(b) ? NULL : t_slice(L, at, b, 0, i * E, (i + 1) * E, 1);
    proj[i] = split_heads(L, at, t_linear(L, at, xs[i], w, bi), h);
  }
  PV *masks[2] = {mha_mask(L, at, a[5], N, h, T, S, "attn_mask", dt), mha_mask(L, at, a[3], N, h, T, S, "key_padding_mask", dt)};
  if (causal && !masks[0]) lower_error(L, at, "Need attn_mask if specifying the is_causal hint.");
  PV *w = NULL;
  PV *y = attend(L, at, proj[0], proj[1], proj[2], masks, 2, 0, 1.0 / sqrt((double)(E / h)), pv_num(attr(o, "dropout")),
                 o->mod->training, &w);
  int64_t perm[4] = {0, 2, 1, 3};
  y = reshape3(L, at, t_permute(L, at, y, perm, 4), N, T, E);
  y = call_value(L, at, attr(o, "out_proj"), &y, 1, NULL, NULL, 0);
  if (unbatched) y = reshape2(L, at, y, T, E);
  else if (!bf) y = t_transpose(L, at, y, 0, 1);
  PV *wr = pv_none(L);
  if (need_w) {
    if (avg) {
      int64_t d = 1;
      w = t_reduce(L, at, IR_REDUCE_SUM, w, &d, 1, 0, 1);
      if (unbatched) w = reshape2(L, at, w, T, S);
    } else if (unbatched) w = reshape3(L, at, w, h, T, S);
    wr = w;
  }
  PV *r[2] = {y, wr};
  return pv_tuple(L, r, 2);
}

/* F.scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
 * is_causal=False, scale=None) (PyTorch 2's): [..., L, E] x [..., S, E] x [..., S, Ev];
 * a bool attn_mask marks the entries that take part. */
PV *nnf_scaled_dot_product_attention(L *L, PV *fn, Args *A) {
  PV *a[7];
  Span at = A->at;
  bind_args(L, A, "query,key,value,attn_mask=,dropout_p=,is_causal=,scale=", a);
  const char *who = "scaled_dot_product_attention";
  PV *q = need_t(L, at, a[0], "query", who), *k = need_t(L, at, a[1], "key", who), *v = need_t(L, at, a[2], "value", who);
  Type tq = q->t->type, tk = k->t->type, tv = v->t->type;
  if (tq.ndim < 2 || tq.ndim > 4 || tk.ndim != tq.ndim || tv.ndim != tq.ndim || tq.dims[tq.ndim - 1] != tk.dims[tk.ndim - 1] ||
      tk.dims[tk.ndim - 2] != tv.dims[tv.ndim - 2])
    lower_error(L, at, "%s: incompatible shapes query %s, key %s, value %s", who, shape_str(L, &tq), shape_str(L, &tk),
                shape_str(L, &tv));
  for (int i = 0; i < tq.ndim - 2; i++)
    if (tq.dims[i] != tk.dims[i] || tq.dims[i] != tv.dims[i])
      lower_error(L, at, "%s: query, key and value must have the same batch dimensions, got %s, %s, %s", who,
                  shape_str(L, &tq), shape_str(L, &tk), shape_str(L, &tv));
  PV *xs[3] = {q, k, v};
  for (int i = 0; i < 3; i++) {
    Type t = xs[i]->t->type;
    int64_t d[4] = {1, 1, 1, 1};
    for (int j = 0; j < t.ndim; j++) d[4 - t.ndim + j] = t.dims[j];
    xs[i] = t_reshape(L, at, xs[i], d, 4);
  }
  int causal = a[5] && arg_bool(L, at, a[5], "is_causal");
  double p = a[4] ? arg_num(L, at, a[4], "dropout_p") : 0;
  double scale = is_none(a[6]) ? 1.0 / sqrt((double)tq.dims[tq.ndim - 1]) : arg_num(L, at, a[6], "scale");
  PV *m = NULL;
  if (!is_none(a[3])) {
    m = need_t(L, at, a[3], "attn_mask", who);
    if (causal) lower_error(L, at, "%s: explicit attn_mask should not be set when is_causal=True", who);
    if (m->t->type.dtype == DT_BOOL) m = t_logical(L, at, '!', m, NULL);   /* True: masked out, for attend */
    else if (m->t->type.dtype != seq_dtype(q)) m = t_cast(L, at, m, seq_dtype(q));
  }
  PV *y = attend(L, at, xs[0], xs[1], xs[2], &m, 1, causal, scale, p, p > 0, NULL);
  Type r = tq;
  r.dims[r.ndim - 1] = tv.dims[tv.ndim - 1];
  return t_reshape(L, at, y, r.dims, r.ndim);
}

/* ---- transformer encoder ----------------------------------------------------------- */

/* TransformerEncoderLayer / TransformerDecoderLayer(d_model, nhead, dim_feedforward=2048,
 * dropout=0.1, activation=relu, layer_norm_eps=1e-5, batch_first=False, norm_first=False):
 * self_attn (and, for a decoder, multihead_attn: cross-attention), linear1, dropout,
 * linear2, norm1..n, dropout1..n (n = 2, or 3 for a decoder), in PyTorch's order */
static PV *transformer_layer_new(L *L, PV *cls, Args *A, int decoder) {
  PV *a[10], *o = seq_layer_new(L, cls, A);
  Span at = A->at;
  bind_args(L, A, "d_model,nhead,dim_feedforward=,dropout=,activation=,layer_norm_eps=,batch_first=,norm_first=,device=,dtype=",
            a);
  int64_t dm = arg_int(L, at, a[0], "d_model"), nh = arg_int(L, at, a[1], "nhead");
  int64_t ff = a[2] ? arg_int(L, at, a[2], "dim_feedforward") : 2048;
  double p = a[3] ? arg_num(L, at, a[3], "dropout") : 0.1, eps = a[5] ? arg_num(L, at, a[5], "layer_norm_eps") : 1e-5;
  int bf = a[6] && arg_bool(L, at, a[6], "batch_first"), nf = a[7] && arg_bool(L, at, a[7], "norm_first");
  PV *act = a[4] ? a[4] : pv_str(L, "relu");
  if (act->k == PV_STR && strcmp(act->s, "relu") && strcmp(act->s, "gelu"))
    lower_error(L, at, "activation should be relu/gelu, not %s", act->s);
  PV *pp = pv_float(L, p), *bfv = pv_bool(L, bf);
  PV *ma[2] = {pv_int(L, dm), pv_int(L, nh)}, *mk[2] = {pp, bfv};
  const char *mkn[2] = {"dropout", "batch_first"};
  module_setattr(L, at, o, "self_attn", make_child(L, at, BI_C_MULTIHEADATTENTION, ma, 2, mkn, mk, 2));
  if (decoder)
    module_setattr(L, at, o, "multihead_attn", make_child(L, at, BI_C_MULTIHEADATTENTION, ma, 2, mkn, mk, 2));
  PV *l1[2] = {pv_int(L, dm), pv_int(L, ff)}, *l2[2] = {pv_int(L, ff), pv_int(L, dm)};
  module_setattr(L, at, o, "linear1", make_child(L, at, BI_C_LINEAR, l1, 2, NULL, NULL, 0));
  module_setattr(L, at, o, "dropout", make_child(L, at, BI_C_DROPOUT, &pp, 1, NULL, NULL, 0));
  module_setattr(L, at, o, "linear2", make_child(L, at, BI_C_LINEAR, l2, 2, NULL, NULL, 0));
  set_attr(L, o, "norm_first", pv_bool(L, nf));
  PV *dmv = pv_int(L, dm), *ev = pv_float(L, eps);
  const char *en[1] = {"eps"};
  int n = decoder ? 3 : 2;
  for (int i = 1; i <= n; i++)
    module_setattr(L, at, o, arena_printf(L->a, "norm%d", i), make_child(L, at, BI_C_LAYERNORM, &dmv, 1, en, &ev, 1));
  for (int i = 1; i <= n; i++)
    module_setattr(L, at, o, arena_printf(L->a, "dropout%d", i), make_child(L, at, BI_C_DROPOUT, &pp, 1, NULL, NULL, 0));
  module_setattr(L, at, o, "activation", act);
  return o;
}

PV *nn_tel_new(L *L, PV *cls, Args *A) { return transformer_layer_new(L, cls, A, 0); }

static PV *child(L *L, Span at, PV *o, const char *name, PV *x) {
  PV *m = attr(o, name);
  if (!m) lower_error(L, at, "%s has no attribute '%s'", o->cls->s, name);
  return call_value(L, at, m, &x, 1, NULL, NULL, 0);
}

PV *nn_tel_forward(L *L, PV *o, Args *A) {
  PV *a[4];
  Span at = A->at;
  bind_args(L, A, "src,src_mask=,src_key_padding_mask=,is_causal=", a);
  PV *x = need_t(L, at, a[0], "src", "TransformerEncoderLayer");
  int nf = attr(o, "norm_first")->i != 0;
  PV *act = attr(o, "activation");
  for (int part = 0; part < 2; part++) {
    PV *in = nf ? child(L, at, o, part ? "norm2" : "norm1", x) : x, *y;
    if (part == 0) {
      PV *args[3] = {in, in, in}, *kv[3] = {a[1] ? a[1] : pv_none(L), a[2] ? a[2] : pv_none(L), pv_bool(L, 0)};
      const char *kn[3] = {"attn_mask", "key_padding_mask", "need_weights"};
      PV *r = call_value(L, at, attr(o, "self_attn"), args, 3, kn, kv, 3);
      if ((r->k != PV_TUPLE && r->k != PV_LIST) || r->n < 1) lower_error(L, at, "self_attn must return a tuple");
      y = child(L, at, o, "dropout1", r->items[0]);
    } else {
      PV *hdn = child(L, at, o, "linear1", in);
      if (act->k == PV_STR) hdn = strcmp(act->s, "gelu") ? t_unary(L, at, IR_RELU, hdn) : t_gelu(L, at, hdn, 0);
      else hdn = call_value(L, at, act, &hdn, 1, NULL, NULL, 0);
      y = child(L, at, o, "dropout2", child(L, at, o, "linear2", child(L, at, o, "dropout", hdn)));
    }
    x = nf ? ADD(x, y) : child(L, at, o, part ? "norm2" : "norm1", ADD(x, y));
  }
  return x;
}

/* copy.deepcopy of a module tree (TransformerEncoder's clones of its layer, the
 * user's copy.deepcopy(model)): the parameters are new slots with the same
 * initialisation, in the same order. */
PV *module_clone(L *L, Span at, PV *m) {
  PV *c = module_new(L, m->cls);
  c->mod->training = m->mod->training;
  for (int i = 0; i < m->mod->regs.len; i++) {
    Reg r = m->mod->regs.data[i];
    PV *v = r.val;
    if (pv_is_module(v)) v = module_clone(L, at, v);
    else if (v && v->k == PV_TENSOR && v->t->slot) {
      Slot *s = arena_alloc(L->a, sizeof *s);
      *s = *v->t->slot;
      s->index = -1;
      PV *nv = param_tensor(L, s);
      nv->t->requires_grad = v->t->requires_grad;
      v = nv;
    }
    r.val = v;
    vec_push(L->a, &c->mod->regs, r);
    env_set(L, c->attrs, r.name, v);
  }
  Env *e = m->attrs;
  for (int i = 0; i < e->names.len; i++)
    if (!env_get(c->attrs, e->names.data[i])) env_set(L, c->attrs, e->names.data[i], e->vals.data[i]);
  return c;
}

PV *nn_te_new(L *L, PV *cls, Args *A) {
  PV *a[5], *o = seq_layer_new(L, cls, A);
  Span at = A->at;
  bind_args(L, A, "encoder_layer,num_layers,norm=,enable_nested_tensor=,mask_check=", a);
  if (!pv_is_module(a[0])) lower_error(L, at, "TransformerEncoder: encoder_layer must be a module");
  int64_t n = arg_int(L, at, a[1], "num_layers");
  if (n <= 0) lower_error(L, at, "TransformerEncoder: num_layers must be positive");
  PV *list = pv_list(L, NULL, 0);
  for (int64_t i = 0; i < n; i++) pv_list_append(L, list, module_clone(L, at, a[0]));
  module_setattr(L, at, o, "layers", make_child(L, at, BI_C_MODULELIST, &list, 1, NULL, NULL, 0));
  set_attr(L, o, "num_layers", pv_int(L, n));
  if (!is_none(a[2]) && !pv_is_module(a[2])) lower_error(L, at, "TransformerEncoder: norm must be a module or None");
  if (!is_none(a[2])) module_setattr(L, at, o, "norm", a[2]);
  else set_attr(L, o, "norm", pv_none(L));
  return o;
}

PV *nn_te_forward(L *L, PV *o, Args *A) {
  PV *a[4], **items;
  Span at = A->at;
  bind_args(L, A, "src,mask=,src_key_padding_mask=,is_causal=", a);
  PV *x = need_t(L, at, a[0], "src", "TransformerEncoder");
  int n = iter_items(L, at, attr(o, "layers"), &items);
  for (int i = 0; i < n; i++) {
    PV *kv[2] = {a[1] ? a[1] : pv_none(L), a[2] ? a[2] : pv_none(L)};
    const char *kn[2] = {"src_mask", "src_key_padding_mask"};
    x = call_value(L, at, items[i], &x, 1, kn, kv, 2);
  }
  PV *norm = attr(o, "norm");
  if (!is_none(norm)) x = call_value(L, at, norm, &x, 1, NULL, NULL, 0);
  return x;
}

/* ---- transformer decoder and nn.Transformer ---------------------------------------- */

PV *nn_tdl_new(L *L, PV *cls, Args *A) { return transformer_layer_new(L, cls, A, 1); }

/* attention child `name` on (q, kv, kv) with its masks, then dropout child `drop` */
static PV *attn_block(L *L, Span at, PV *o, const char *name, PV *q, PV *kv, PV *mask, PV *kpm, const char *drop) {
  PV *args[3] = {q, kv, kv}, *kvv[3] = {mask ? mask : pv_none(L), kpm ? kpm : pv_none(L), pv_bool(L, 0)};
  const char *kn[3] = {"attn_mask", "key_padding_mask", "need_weights"};
  PV *r = call_value(L, at, attr(o, name), args, 3, kn, kvv, 3);
  if ((r->k != PV_TUPLE && r->k != PV_LIST) || r->n < 1) lower_error(L, at, "%s must return a tuple", name);
  return child(L, at, o, drop, r->items[0]);
}

static PV *ff_block(L *L, Span at, PV *o, PV *in, const char *drop) {
  PV *act = attr(o, "activation");
  PV *hdn = child(L, at, o, "linear1", in);
  if (act->k == PV_STR) hdn = strcmp(act->s, "gelu") ? t_unary(L, at, IR_RELU, hdn) : t_gelu(L, at, hdn, 0);
  else hdn = call_value(L, at, act, &hdn, 1, NULL, NULL, 0);
  return child(L, at, o, drop, child(L, at, o, "linear2", child(L, at, o, "dropout", hdn)));
}

PV *nn_tdl_forward(L *L, PV *o, Args *A) {
  PV *a[8];
  Span at = A->at;
  bind_args(L, A, "tgt,memory,tgt_mask=,memory_mask=,tgt_key_padding_mask=,memory_key_padding_mask=,tgt_is_causal=,"
                  "memory_is_causal=", a);
  PV *x = need_t(L, at, a[0], "tgt", "TransformerDecoderLayer"), *mem = need_t(L, at, a[1], "memory", "TransformerDecoderLayer");
  int nf = attr(o, "norm_first")->i != 0;
  for (int part = 0; part < 3; part++) {
    const char *nn = part == 0 ? "norm1" : part == 1 ? "norm2" : "norm3";
    PV *in = nf ? child(L, at, o, nn, x) : x, *y;
    if (part == 0) y = attn_block(L, at, o, "self_attn", in, in, a[2], a[4], "dropout1");
    else if (part == 1) y = attn_block(L, at, o, "multihead_attn", in, mem, a[3], a[5], "dropout2");
    else y = ff_block(L, at, o, in, "dropout3");
    x = nf ? ADD(x, y) : child(L, at, o, nn, ADD(x, y));
  }
  return x;
}

static PV *clones_new(L *L, Span at, PV *o, PV *layer, PV *num, PV *norm, const char *who) {
  if (!pv_is_module(layer)) lower_error(L, at, "%s: its layer must be a module", who);
  int64_t n = arg_int(L, at, num, "num_layers");
  if (n <= 0) lower_error(L, at, "%s: num_layers must be positive", who);
  PV *list = pv_list(L, NULL, 0);
  for (int64_t i = 0; i < n; i++) pv_list_append(L, list, module_clone(L, at, layer));
  module_setattr(L, at, o, "layers", make_child(L, at, BI_C_MODULELIST, &list, 1, NULL, NULL, 0));
  set_attr(L, o, "num_layers", pv_int(L, n));
  if (!is_none(norm) && !pv_is_module(norm)) lower_error(L, at, "%s: norm must be a module or None", who);
  if (!is_none(norm)) module_setattr(L, at, o, "norm", norm);
  else set_attr(L, o, "norm", pv_none(L));
  return o;
}

PV *nn_td_new(L *L, PV *cls, Args *A) {
  PV *a[3], *o = seq_layer_new(L, cls, A);
  bind_args(L, A, "decoder_layer,num_layers,norm=", a);
  return clones_new(L, A->at, o, a[0], a[1], a[2], "TransformerDecoder");
}

PV *nn_td_forward(L *L, PV *o, Args *A) {
  PV *a[8], **items;
  Span at = A->at;
  bind_args(L, A, "tgt,memory,tgt_mask=,memory_mask=,tgt_key_padding_mask=,memory_key_padding_mask=,tgt_is_causal=,"
                  "memory_is_causal=", a);
  PV *x = need_t(L, at, a[0], "tgt", "TransformerDecoder");
  int n = iter_items(L, at, attr(o, "layers"), &items);
  for (int i = 0; i < n; i++) {
    PV *args[2] = {x, a[1]}, *kv[4];
    for (int k = 0; k < 4; k++) kv[k] = a[2 + k] ? a[2 + k] : pv_none(L);
    const char *kn[4] = {"tgt_mask", "memory_mask", "tgt_key_padding_mask", "memory_key_padding_mask"};
    x = call_value(L, at, items[i], args, 2, kn, kv, 4);
  }
  PV *norm = attr(o, "norm");
  if (!is_none(norm)) x = call_value(L, at, norm, &x, 1, NULL, NULL, 0);
  return x;
}

/* xavier_uniform_ on every parameter of more than one dimension (nn.Transformer's
 * _reset_parameters) */
static void xavier_all(L *L, PV *m) {
  for (int i = 0; i < m->mod->regs.len; i++) {
    Reg *r = &m->mod->regs.data[i];
    if (r->kind == REG_CHILD && pv_is_module(r->val)) xavier_all(L, r->val);
    if (r->kind != REG_PARAM || r->val->k != PV_TENSOR || !r->val->t->slot) continue;
    Slot *s = r->val->t->slot;
    if (s->type.ndim < 2) continue;
    int64_t fi = ir_numel(&s->type) / s->type.dims[0], fo = ir_numel(&s->type) / s->type.dims[1];
    double b = sqrt(6.0 / (double)(fi + fo));
    s->init = PINIT_UNIFORM;
    s->init_a = -b;
    s->init_b = b;
    s->data = NULL;
  }
}

/* nn.Transformer(d_model=512, nhead=8, num_encoder_layers=6, num_decoder_layers=6,
 * dim_feedforward=2048, dropout=0.1, activation=relu, custom_encoder=None,
 * custom_decoder=None, layer_norm_eps=1e-5, batch_first=False, norm_first=False) */
PV *nn_transformer_new(L *L, PV *cls, Args *A) {
  PV *a[14], *o = seq_layer_new(L, cls, A);
  Span at = A->at;
  bind_args(L, A, "d_model=,nhead=,num_encoder_layers=,num_decoder_layers=,dim_feedforward=,dropout=,activation=,"
                  "custom_encoder=,custom_decoder=,layer_norm_eps=,batch_first=,norm_first=,device=,dtype=", a);
  PV *dm = a[0] ? a[0] : pv_int(L, 512), *nh = a[1] ? a[1] : pv_int(L, 8);
  PV *ne = a[2] ? a[2] : pv_int(L, 6), *nd = a[3] ? a[3] : pv_int(L, 6);
  PV *lv[8] = {dm, nh, a[4] ? a[4] : pv_int(L, 2048), a[5] ? a[5] : pv_float(L, 0.1), a[6] ? a[6] : pv_str(L, "relu"),
               a[9] ? a[9] : pv_float(L, 1e-5), a[10] ? a[10] : pv_bool(L, 0), a[11] ? a[11] : pv_bool(L, 0)};
  const char *en[1] = {"eps"};
  for (int dec = 0; dec < 2; dec++) {
    PV *custom = a[7 + dec];
    PV *m;
    if (!is_none(custom)) {
      if (!pv_is_module(custom)) lower_error(L, at, "Transformer: custom_%s must be a module", dec ? "decoder" : "encoder");
      m = custom;
    } else {
      PV *layer = make_child(L, at, dec ? BI_C_TRANSFORMERDECODERLAYER : BI_C_TRANSFORMERENCODERLAYER, lv, 8, NULL, NULL, 0);
      PV *norm = make_child(L, at, BI_C_LAYERNORM, &dm, 1, en, &lv[5], 1);
      PV *args[3] = {layer, dec ? nd : ne, norm};
      m = make_child(L, at, dec ? BI_C_TRANSFORMERDECODER : BI_C_TRANSFORMERENCODER, args, 3, NULL, NULL, 0);
    }
    module_setattr(L, at, o, dec ? "decoder" : "encoder", m);
  }
  xavier_all(L, o);
  set_attr(L, o, "d_model", pv_int(L, arg_int(L, at, dm, "d_model")));
  set_attr(L, o, "nhead", pv_int(L, arg_int(L, at, nh, "nhead")));
  set_attr(L, o, "batch_first", pv_bool(L, arg_bool(L, at, lv[6], "batch_first")));
  return o;
}

PV *nn_transformer_forward(L *L, PV *o, Args *A) {
  PV *a[11];
  Span at = A->at;
  bind_args(L, A, "src,tgt,src_mask=,tgt_mask=,memory_mask=,src_key_padding_mask=,tgt_key_padding_mask=,"
                  "memory_key_padding_mask=,src_is_causal=,tgt_is_causal=,memory_is_causal=", a);
  PV *src = need_t(L, at, a[0], "src", "Transformer"), *tgt = need_t(L, at, a[1], "tgt", "Transformer");
  int bf = attr(o, "batch_first")->i != 0, sd = src->t->type.ndim;
  if (sd == 3 && tgt->t->type.ndim == 3 && src->t->type.dims[bf ? 0 : 1] != tgt->t->type.dims[bf ? 0 : 1])
    lower_error(L, at, "the batch number of src and tgt must be equal");
  if (src->t->type.dims[sd - 1] != attr_int(o, "d_model") || tgt->t->type.dims[tgt->t->type.ndim - 1] != attr_int(o, "d_model"))
    lower_error(L, at, "the feature number of src and tgt must be equal to d_model");
  PV *kv[2] = {a[2] ? a[2] : pv_none(L), a[5] ? a[5] : pv_none(L)};
  const char *kn[2] = {"mask", "src_key_padding_mask"};
  PV *mem = call_value(L, at, attr(o, "encoder"), &src, 1, kn, kv, 2);
  PV *args[2] = {tgt, mem}, *dk[4];
  int idx[4] = {3, 4, 6, 7};
  for (int k = 0; k < 4; k++) dk[k] = a[idx[k]] ? a[idx[k]] : pv_none(L);
  const char *dn[4] = {"tgt_mask", "memory_mask", "tgt_key_padding_mask", "memory_key_padding_mask"};
  return call_value(L, at, attr(o, "decoder"), args, 2, dn, dk, 4);
}
