// 1-D convolution over time as an input projection (features -> d_model), PyTorch's Conv1d
// applied to (batch, features, seq) and returned as (batch, seq_out, d_model).
//
//   y[b, o, c] = bias[c] + sum_{f, t} W[c, f, t] x[b, o*stride - pad_left + t*dilation, f]
//   seq_out = (seq + pad_left + pad_right - dilation (k - 1) - 1) / stride + 1
//
// Positions outside [0, seq) read zero. "same" padding (stride 1) pads dilation (k-1) in total,
// the left half rounded down (PyTorch's padding='same').
//
// Computed as im2col + GEMM: cols[(b, o), f*k + t] = x[b, o*stride - pad_left + t*dilation, f],
// y = cols W^T + b with W viewed as (d, F*k). Backward: dW += dy^T cols, db += sum dy,
// dcols = dy W, and dx gathers dcols back (each input position sums the taps that read it, in a
// fixed order: no atomics).
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

struct Conv1dOptions {
  int kernel_size = 3;
  int stride = 1;
  int dilation = 1;
  bool same_padding = true;  // otherwise `padding` on both sides
  int padding = 0;
  std::uint64_t seed = 0;
};

template <class T, class ExecutionSpace>
class Conv1dProjection {
 public:
  using memory_space = typename ExecutionSpace::memory_space;
  using Tensor3 = RowMajorView<kformer::Tensor3<T, memory_space>>;
  using ConstTensor3 = RowMajorView<kformer::Tensor3<const T, memory_space>>;

  Conv1dProjection() = default;
  Conv1dProjection(const ExecutionSpace& exec, int in_features, int out_features,
                   const Conv1dOptions& options = {},
                   std::string name = "kformer::Conv1dProjection")
      : name_(std::move(name)), in_(in_features), out_(out_features), o_(options) {
    if (in_features < 1 || out_features < 1)
      fail(name_, "in_features and out_features must be at least 1, got ", in_features, " and ",
           out_features);
    if (o_.kernel_size < 1 || o_.stride < 1 || o_.dilation < 1 || o_.padding < 0)
      fail(name_,
           "kernel_size, stride and dilation must be at least 1 and padding non-negative, got ",
           o_.kernel_size, ", ", o_.stride, ", ", o_.dilation, ", ", o_.padding);
    if (o_.same_padding && o_.stride != 1)
      fail(name_, "'same' padding needs stride 1, got stride ", o_.stride);
    const int total = o_.dilation * (o_.kernel_size - 1);
    pad_left_ = o_.same_padding ? total / 2 : o_.padding;
    pad_right_ = o_.same_padding ? total - total / 2 : o_.padding;
    weight_ = Param<T, memory_space>("weight", {out_features, in_features, o_.kernel_size});
    bias_ = Param<T, memory_space>("bias", {out_features});
    const double bound = 1.0 / std::sqrt(static_cast<double>(in_features) * o_.kernel_size);
    fill_uniform(exec, weight_.value, -bound, bound, derive_seed(options.seed, "weight"));
    fill_uniform(exec, bias_.value, -bound, bound, derive_seed(options.seed, "bias"));
  }

  int output_length(int seq) const {
    const int span = o_.dilation * (o_.kernel_size - 1) + 1;
    const int padded = seq + pad_left_ + pad_right_;
    return padded < span ? 0 : (padded - span) / o_.stride + 1;
  }

  template <class F>
  void visit_parameters(F&& f) {
    f(std::string("weight"), weight_);
    f(std::string("bias"), bias_);
  }
  template <class F>
  void visit_buffers(F&&) {}
  void zero_grad(const ExecutionSpace& exec) {
    fill(exec, T(0), weight_.grad);
    fill(exec, T(0), bias_.grad);
  }
  std::int64_t buffer_bytes() const {
    return std::int64_t(cols_.bytes() + dcols_.bytes() + partial_.bytes());
  }

  // y = conv(x).   x: (B, S, in), y: (B, output_length(S), out)
  void forward(const ExecutionSpace& exec, const RunContext&, const ConstTensor3& x,
               const Tensor3& y) {
    const Where where{name_, "::forward"};
    const ProfilingRegion region(where);
    check_shape(where, "x", x, {-1, -1, in_});
    const int seq = x.extent(1);
    check_shape(where, "y", y, {std::int64_t(x.extent(0)), output_length(seq), out_});
    const auto cols = im2col(exec, x);
    const auto ym = as_matrix(y);
    fill_rows(exec, bias_.value, ym);
    backends::gemm(exec, backends::Op::N, backends::Op::T, T(1), cols, weight_matrix(), T(1), ym);
  }

  // dW += dy^T cols, db += sum dy, dx = col2im(dy W) (+= with WriteMode::Add; dx may be empty).
  void backward(const ExecutionSpace& exec, const RunContext&, const ConstTensor3& x,
                const ConstTensor3& dy, const Tensor3& dx, WriteMode dx_mode = WriteMode::Assign) {
    const Where where{name_, "::backward"};
    const ProfilingRegion region(where);
    check_shape(where, "x", x, {-1, -1, in_});
    check_shape(where, "dy", dy, {std::int64_t(x.extent(0)), output_length(x.extent(1)), out_});
    if (dx.data() != nullptr) check_shape(where, "dx", dx, extents_of(x));
    const auto cols = im2col(exec, x);
    const auto dym = as_matrix(dy);
    backends::gemm(exec, backends::Op::T, backends::Op::N, T(1), dym, cols, T(1),
                   matrix_of(weight_.grad, out_, in_ * o_.kernel_size));
    backends::column_sum(exec, dym, bias_.grad, true, partial_);
    if (dx.data() == nullptr) return;
    const auto dcols = dcols_.view(cols.extent(0), cols.extent(1));
    backends::gemm(exec, backends::Op::N, backends::Op::N, T(1), dym, weight_matrix(), T(0), dcols);
    col2im(exec, dcols, dx, dx_mode == WriteMode::Add);
  }

 private:
  Tensor2<const T, memory_space> weight_matrix() const {
    return matrix_of(weight_.value, out_, in_ * o_.kernel_size);
  }

 public:
  // Public only because nvcc accepts a device lambda (KOKKOS_LAMBDA) only in a member function
  // that is not private; not part of the interface.

  Tensor2<T, memory_space> im2col(const ExecutionSpace& exec, const ConstTensor3& x) {
    const int batch = x.extent(0), seq = x.extent(1), f_in = in_, k = o_.kernel_size;
    const int seq_out = output_length(seq), stride = o_.stride, dil = o_.dilation, pad = pad_left_;
    auto cols = cols_.view(std::int64_t(batch) * seq_out, std::int64_t(f_in) * k);
    Kokkos::parallel_for(
        KFORMER_LABEL("kformer::conv1d::im2col"),
        Kokkos::MDRangePolicy<ExecutionSpace, Kokkos::Rank<2>>(
            exec, {0, 0}, {long(batch) * seq_out, long(f_in) * k}),
        KOKKOS_LAMBDA(const long row, const long col) {
          const int b = static_cast<int>(row / seq_out), o = static_cast<int>(row % seq_out);
          const int f = static_cast<int>(col / k), t = static_cast<int>(col % k);
          const int s = o * stride - pad + t * dil;
          cols(row, col) = s >= 0 && s < seq ? x(b, s, f) : T(0);
        });
    return cols;
  }

  // dx[b, s, f] (+)= sum over (o, t) with o*stride - pad + t*dilation = s of dcols[(b, o), f*k +
  // t].
  void col2im(const ExecutionSpace& exec, const Tensor2<T, memory_space>& dcols, const Tensor3& dx,
              bool add) const {
    const int batch = dx.extent(0), seq = dx.extent(1), f_in = in_, k = o_.kernel_size;
    const int seq_out = output_length(seq), stride = o_.stride, dil = o_.dilation, pad = pad_left_;
    Kokkos::parallel_for(
        KFORMER_LABEL("kformer::conv1d::col2im"),
        Kokkos::MDRangePolicy<ExecutionSpace, Kokkos::Rank<3>>(
            exec, {0, 0, 0}, {long(batch), long(seq), long(f_in)}),
        KOKKOS_LAMBDA(const long b, const long s, const long f) {
          T sum = 0;
          for (int t = 0; t < k; ++t) {
            const long shifted = s + pad - long(t) * dil;  // = o * stride
            if (shifted < 0 || shifted % stride != 0) continue;
            const long o = shifted / stride;
            if (o < seq_out) sum += dcols(b * seq_out + o, f * k + t);
          }
          dx(b, s, f) = add ? dx(b, s, f) + sum : sum;
        });
  }

 private:
  std::string name_ = "kformer::Conv1dProjection";
  int in_ = 0, out_ = 0;
  Conv1dOptions o_;
  int pad_left_ = 0, pad_right_ = 0;
  Param<T, memory_space> weight_, bias_;
  GrowingBuffer<T, memory_space> cols_{"kformer::Conv1dProjection::cols"};
  GrowingBuffer<T, memory_space> dcols_{"kformer::Conv1dProjection::dcols"};
  GrowingBuffer<T, memory_space> partial_{"kformer::Conv1dProjection::partial"};
};

}  // namespace kformer
