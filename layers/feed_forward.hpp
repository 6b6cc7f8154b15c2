// The position-wise feed-forward block of a transformer-encoder layer.
//
//   h = x W1^T + b1,  a = dropout(act(h)),  y = a W2^T + b2        x, y: (N, d), h, a: (N, ff)
//   backward: da = dy W2 (and W2, b2 gradients), dh = dropout'(da) * act'(h), dx = dh W1
//
// Parameters are named as in PyTorch's TransformerEncoderLayer: linear1.*, linear2.*.
#pragma once

#include <cstdint>
#include <string>

#include <Kokkos_Core.hpp>

#include "../core/error.hpp"
#include "../core/layer.hpp"
#include "../core/profiling.hpp"
#include "../core/random.hpp"
#include "../core/run_context.hpp"
#include "../core/tensor.hpp"
#include "../core/view_adapters.hpp"
#include "../core/workspace.hpp"
#include "activation.hpp"
#include "dropout.hpp"
#include "linear.hpp"

namespace kformer {

struct FeedForwardOptions {
  int dim_feedforward = 256;
  Activation activation = Activation::GELU;
  double dropout = 0.1;
  std::uint64_t seed = 0;
};

template <class T, class ExecutionSpace>
class FeedForward {
 public:
  using memory_space = typename ExecutionSpace::memory_space;
  using Matrix = RowMajorView<Tensor2<T, memory_space>>;
  using ConstMatrix = RowMajorView<Tensor2<const T, memory_space>>;

  FeedForward() = default;
  FeedForward(const ExecutionSpace& exec, int d_model, const FeedForwardOptions& options,
              std::string name = "kformer::FeedForward")
      : name_(std::move(name)),
        d_(d_model),
        ff_(options.dim_feedforward),
        activation_(options.activation),
        linear1_(exec, d_model, options.dim_feedforward,
                 {true, derive_seed(options.seed, "linear1")}, name_ + ".linear1"),
        linear2_(exec, options.dim_feedforward, d_model,
                 {true, derive_seed(options.seed, "linear2")}, name_ + ".linear2"),
        dropout_(exec, options.dropout, derive_seed(options.seed, "dropout"), name_ + ".dropout") {}

  template <class F>
  void visit_parameters(F&& f) {
    linear1_.visit_parameters([&](const std::string& n, auto& p) { f("linear1." + n, p); });
    linear2_.visit_parameters([&](const std::string& n, auto& p) { f("linear2." + n, p); });
  }
  template <class F>
  void visit_buffers(F&&) {}
  void zero_grad(const ExecutionSpace& exec) {
    linear1_.zero_grad(exec);
    linear2_.zero_grad(exec);
  }
  std::int64_t buffer_bytes() const {
    return linear1_.buffer_bytes() + linear2_.buffer_bytes() + dropout_.buffer_bytes() +
           std::int64_t(hidden_.bytes() + activated_.bytes() + d_activated_.bytes());
  }

  // y = FF(x).   x, y: (N, d)
  void forward(const ExecutionSpace& exec, const RunContext& ctx, const ConstMatrix& x,
               const Matrix& y) {
    const Where where{name_, "::forward"};
    const ProfilingRegion region(where);
    check_shape(where, "x", x, {-1, d_});
    check_shape(where, "y", y, extents_of(x));
    const std::int64_t n = x.extent(0);
    const auto h = hidden_.view(n, ff_);
    const auto a = activated_.view(n, ff_);
    linear1_.forward(exec, ctx, x, h);
    activation_forward(exec, activation_, h, a);
    dropout_.forward(exec, ctx, a, a);
    linear2_.forward(exec, ctx, a, y);
  }

  // dx (+)= d FF / dx; parameter gradients accumulate.   x: the forward's input
  void backward(const ExecutionSpace& exec, const RunContext& ctx, const ConstMatrix& x,
                const ConstMatrix& dy, const Matrix& dx, WriteMode dx_mode = WriteMode::Assign) {
    const Where where{name_, "::backward"};
    const ProfilingRegion region(where);
    check_shape(where, "x", x, {-1, d_});
    check_shape(where, "dy", dy, extents_of(x));
    const std::int64_t n = x.extent(0);
    const auto h = hidden_.view(n, ff_);
    const auto a = activated_.view(n, ff_);
    const auto da = d_activated_.view(n, ff_);
    linear2_.backward(exec, ctx, a, dy, da);
    dropout_.backward(exec, ctx, a, da, da);
    activation_backward(exec, activation_, h, da, da);
    linear1_.backward(exec, ctx, x, da, dx, dx_mode);
  }

 private:
  std::string name_;
  int d_ = 0, ff_ = 0;
  Activation activation_ = Activation::GELU;
  Linear<T, ExecutionSpace> linear1_, linear2_;
  Dropout<T, ExecutionSpace> dropout_;
  GrowingBuffer<T, memory_space> hidden_{"kformer::FeedForward::hidden"};
  GrowingBuffer<T, memory_space> activated_{"kformer::FeedForward::activated"};
  GrowingBuffer<T, memory_space> d_activated_{"kformer::FeedForward::d_activated"};
};

}  // namespace kformer
