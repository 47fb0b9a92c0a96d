// infer.cpp - inference from C++ through a model compiled by `ctc build --shared`
// (the C++ counterpart of `./net infer`): loads weights by PyTorch state_dict name,
// reads an input .npy, runs the forward entry, writes the output .npy and prints
// the predicted class of the first rows.
//
//   ctc build examples/mlp_sequential.py --shared -o libmlp.so   # libmlp.so + libmlp.h
//   g++ -std=c++17 -Wall -Wextra -Werror -I. -I<ctc>/runtime_min infer.cpp -L. -lmlp
//       -Wl,-rpath,'$ORIGIN' -o infer
//   ./infer w.safetensors x.npy [y.npy]
//
// (examples/cpp_infer/build.sh runs both steps.) The generated header is plain C
// with extern "C" guards: the model is the struct mlp_t, its entries functions
// (mlp_forward), its description the table mlp_desc, which the runtime's generic
// functions (ctc_model_load, ctc_npy_read, ...) work from.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "libmlp.h"

namespace {

struct Free {
  void operator()(void *p) const { std::free(p); }
};

std::string shape_str(int ndim, const int64_t *shape) {
  char buf[256];
  return ctc_format_shape(buf, sizeof buf, ndim, shape);
}

// The compiled model with its own arena (parameters and activations: nothing is
// allocated after the constructor).
class Mlp {
 public:
  explicit Mlp(const char *weights) {
    const size_t align = mlp_desc.arena_align, bytes = (MLP_ARENA_BYTES + align - 1) / align * align;
    arena_.reset(static_cast<unsigned char *>(std::aligned_alloc(align, bytes)));
    if (!arena_) throw std::bad_alloc();
    check(mlp_init(&m_, arena_.get(), bytes));
    ctc_error err{};
    if (ctc_model_load(&mlp_desc, &m_, weights, &err) != CTC_OK) throw std::runtime_error(err.msg);
  }
  const ctc_tensor &input() const { return mlp_desc.entries[0].inputs[0]; }
  const ctc_tensor &output() const { return mlp_desc.entries[0].outputs[0]; }
  std::vector<float> forward(const float *x) {
    std::vector<float> y(static_cast<size_t>(ctc_tensor_numel(&output())));
    check(mlp_forward(&m_, x, y.data()));
    return y;
  }

 private:
  // A failed call's message, with its detail (the file, the tensor, both shapes), from the model.
  void check(int rc) const {
    if (rc != CTC_OK) throw std::runtime_error(*mlp_error(&m_) ? mlp_error(&m_) : ctc_strerror(rc));
  }
  mlp_t m_{};
  std::unique_ptr<unsigned char, Free> arena_;
};

// A .npy file read by the runtime, freed on scope exit.
struct Npy {
  ctc_tensor t{};
  explicit Npy(const char *path) {
    ctc_error err{};
    if (ctc_npy_read(path, &t, &err) != CTC_OK) throw std::runtime_error(err.msg);
  }
  ~Npy() { ctc_tensor_free(&t); }
  Npy(const Npy &) = delete;
  Npy &operator=(const Npy &) = delete;
};

}  // namespace

int main(int argc, char **argv) {
  if (argc < 3 || argc > 4) {
    std::fprintf(stderr, "usage: %s WEIGHTS.safetensors INPUT.npy [OUTPUT.npy]\n", argv[0]);
    return 1;
  }
  try {
    Mlp model(argv[1]);
    Npy x(argv[2]);
    const ctc_tensor &in = model.input(), &out = model.output();
    if (x.t.dtype != in.dtype || shape_str(x.t.ndim, x.t.shape) != shape_str(in.ndim, in.shape))
      throw std::runtime_error(std::string(argv[2]) + ": expected " + ctc_dtype_name(in.dtype) +
                               shape_str(in.ndim, in.shape) + ", got " + ctc_dtype_name(x.t.dtype) +
                               shape_str(x.t.ndim, x.t.shape));
    std::vector<float> y = model.forward(static_cast<const float *>(x.t.data));
    if (argc == 4) {
      ctc_tensor t = out;
      t.data = y.data();
      ctc_error err{};
      if (ctc_npy_write(argv[3], &t, &err) != CTC_OK) throw std::runtime_error(err.msg);
    }
    const int64_t rows = out.shape[0], cols = ctc_tensor_numel(&out) / rows;
    for (int64_t r = 0; r < rows && r < 4; r++) {
      int64_t best = 0;
      for (int64_t c = 1; c < cols; c++)
        if (y[r * cols + c] > y[r * cols + best]) best = c;
      std::printf("row %lld: class %lld (%g)\n", static_cast<long long>(r), static_cast<long long>(best),
                  static_cast<double>(y[r * cols + best]));
    }
  } catch (const std::exception &e) {
    std::fprintf(stderr, "%s: error: %s\n", argv[0], e.what());
    return 1;
  }
  return 0;
}
