// Linear (fully connected) layer with PyTorch's parameter layout.
//
//   forward:   y = x W^T + b                x: (N, in), y: (N, out), W: (out, in), b: (out)
//   backward:  dW += dy^T x,  db += sum_n dy,  dx = dy W  (WriteMode::Add: dx += dy W)
//
// N is batch*seq: (batch, seq, features) activations are passed as (N, features) matrices over
// the same memory (as_matrix). Weights are initialised as PyTorch does (kaiming_uniform with
// a = sqrt(5), which is uniform(-1/sqrt(in), 1/sqrt(in)), and the same range for the bias).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include <Kokkos_Core.hpp>

#include "../backends/gemm.hpp"
#include "../backends/reduce.hpp"
#include "../core/error.hpp"
#include "../core/layer.hpp"
#include "../core/param.hpp"
#include "../core/profiling.hpp"
#include "../core/random.hpp"
#include "../core/run_context.hpp"
#include "../core/tensor.hpp"
#include "../core/view_adapters.hpp"
#include "../core/workspace.hpp"
#include "elementwise.hpp"

namespace kformer {

struct LinearOptions {
  bool bias = true;
  std::uint64_t seed = 0;
};

template <class T, class ExecutionSpace>
class Linear {
 public:
  using execution_space = ExecutionSpace;
  using memory_space = typename ExecutionSpace::memory_space;
  using Matrix = RowMajorView<Tensor2<T, memory_space>>;
  using ConstMatrix = RowMajorView<Tensor2<const T, memory_space>>;

  Linear() = default;
  Linear(const ExecutionSpace& exec, int in_features, int out_features,
         const LinearOptions& options = {}, std::string name = "kformer::Linear")
      : name_(std::move(name)), in_(in_features), out_(out_features), has_bias_(options.bias) {
    if (in_features < 1 || out_features < 1)
      fail(name_, "in_features and out_features must be at least 1, got ", in_features, " and ",
           out_features);
    weight_ = Param<T, memory_space>("weight", {out_features, in_features});
    const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
    fill_uniform(exec, weight_.value, -bound, bound, derive_seed(options.seed, "weight"));
    if (has_bias_) {
      bias_ = Param<T, memory_space>("bias", {out_features});
      fill_uniform(exec, bias_.value, -bound, bound, derive_seed(options.seed, "bias"));
    }
  }

  int in_features() const { return in_; }
  int out_features() const { return out_; }
  bool has_bias() const { return has_bias_; }
  Param<T, memory_space>& weight() { return weight_; }
  Param<T, memory_space>& bias() { return bias_; }
  ConstMatrix weight_matrix() const { return matrix_of(weight_.value, out_, in_); }

  // f(name, Param&) for "weight" and "bias", in PyTorch's state_dict order.
  template <class F>
  void visit_parameters(F&& f) {
    f(std::string("weight"), weight_);
    if (has_bias_) f(std::string("bias"), bias_);
  }
  template <class F>
  void visit_buffers(F&&) {}
  void zero_grad(const ExecutionSpace& exec) {
    fill(exec, T(0), weight_.grad);
    if (has_bias_) fill(exec, T(0), bias_.grad);
  }
  std::int64_t buffer_bytes() const { return std::int64_t(partial_.bytes()); }

  // y = x W^T + b.   x: (N, in), y: (N, out)
  void forward(const ExecutionSpace& exec, const RunContext&, const ConstMatrix& x,
               const Matrix& y) const {
    const Where where{name_, "::forward"};
    const ProfilingRegion region(where);
    check_shape(where, "x", x, {-1, in_});
    check_shape(where, "y", y, {std::int64_t(x.extent(0)), out_});
    if (has_bias_) {
      fill_rows(exec, bias_.value, y);
      backends::gemm(exec, backends::Op::N, backends::Op::T, T(1), x, weight_matrix(), T(1), y);
    } else {
      backends::gemm(exec, backends::Op::N, backends::Op::T, T(1), x, weight_matrix(), T(0), y);
    }
  }

  // dW += dy^T x, db += sum_n dy, and dx = dy W (+= with WriteMode::Add); dx may be empty (no
  // input gradient wanted).   x: (N, in), dy: (N, out), dx: (N, in)
  void backward(const ExecutionSpace& exec, const RunContext&, const ConstMatrix& x,
                const ConstMatrix& dy, const Matrix& dx, WriteMode dx_mode = WriteMode::Assign) {
    const Where where{name_, "::backward"};
    const ProfilingRegion region(where);
    check_shape(where, "x", x, {-1, in_});
    check_shape(where, "dy", dy, {std::int64_t(x.extent(0)), out_});
    if (dx.data() != nullptr) check_shape(where, "dx", dx, extents_of(x));
    backends::gemm(exec, backends::Op::T, backends::Op::N, T(1), dy, x, T(1),
                   matrix_of(weight_.grad, out_, in_));
    if (has_bias_) backends::column_sum(exec, dy, bias_.grad, true, partial_);
    if (dx.data() != nullptr)
      backends::gemm(exec, backends::Op::N, backends::Op::N, T(1), dy, weight_matrix(),
                     dx_mode == WriteMode::Add ? T(1) : T(0), dx);
  }

 private:
  std::string name_ = "kformer::Linear";
  int in_ = 0, out_ = 0;
  bool has_bias_ = true;
  Param<T, memory_space> weight_, bias_;
  GrowingBuffer<T, memory_space> partial_{"kformer::Linear::partial"};
};

}  // namespace kformer
