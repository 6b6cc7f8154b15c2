// The learnable positional encoding of TST: a (max_len, dim) parameter added to the input.
//
//   forward:  y[b, p, :] = x[b, p, :] + pe[p, :]            p < seq <= max_len
//   backward: dx = dy,   d(pe)[p, :] += sum_b dy[b, p, :]   (summed in a fixed order: no atomics)
//
// A sequence longer than max_len is an error by default. On request:
//   Truncate     the sequence is cut to its first max_len steps: y is (batch, max_len, dim) and the
//                gradient of the dropped steps is zero;
//   Interpolate  the table is resampled linearly to seq rows: position p reads the table at
//                r = p (max_len - 1) / (seq - 1), i.e. (1 - t) pe[floor r] + t pe[floor r + 1].
#pragma once

#include <cstdint>
#include <string>

#include <Kokkos_Core.hpp>

#include "../../core/error.hpp"
#include "../../core/layer.hpp"
#include "../../core/param.hpp"
#include "../../core/random.hpp"
#include "../../core/run_context.hpp"
#include "../../core/tensor.hpp"
#include "../../core/view_adapters.hpp"
#include "../elementwise.hpp"
#include "impl/learnable_positional_encoding_kernels.hpp"

namespace kformer {

enum class LengthPolicy { Error, Truncate, Interpolate };

struct LearnablePositionalEncodingOptions {
  LengthPolicy length_policy = LengthPolicy::Error;
  double init_range = 0.02;  // pe ~ uniform(-init_range, init_range), as TST
  std::uint64_t seed = 0;
  double input_scale = 1.0;  // y = input_scale * x + pe (TST scales by sqrt(d_model))
};

template <class T, class ExecutionSpace>
class LearnablePositionalEncoding {
 public:
  using execution_space = ExecutionSpace;
  using memory_space = typename ExecutionSpace::memory_space;
  using Tensor3 = RowMajorView<kformer::Tensor3<T, memory_space>>;
  using ConstTensor3 = RowMajorView<kformer::Tensor3<const T, memory_space>>;

  LearnablePositionalEncoding(const ExecutionSpace& exec, int max_len, int dim,
                              const LearnablePositionalEncodingOptions& options = {})
      : options_(options) {
    constexpr const char* where = "kformer::LearnablePositionalEncoding";
    if (max_len < 1) fail(where, "max_len must be at least 1, got ", max_len);
    if (dim < 1) fail(where, "dim must be at least 1, got ", dim);
    max_len_ = max_len;
    dim_ = dim;
    pe_ = Param<T, memory_space>("pe", {max_len, dim});
    fill_uniform(exec, pe_.value, -options.init_range, options.init_range,
                 derive_seed(options.seed, "pe"));
  }

  int max_len() const { return max_len_; }
  int dim() const { return dim_; }
  Param<T, memory_space>& pe() { return pe_; }
  const Param<T, memory_space>& pe() const { return pe_; }

  // f(name, Param&) for the table, "pe".
  template <class F>
  void visit_parameters(F&& f) {
    f(std::string("pe"), pe_);
  }
  template <class F>
  void visit_buffers(F&&) {}
  void zero_grad(const ExecutionSpace& exec) { fill(exec, T(0), pe_.grad); }
  std::int64_t buffer_bytes() const { return 0; }

  // The number of steps the output has for an input of seq steps.
  int output_length(int seq) const {
    check_length("kformer::LearnablePositionalEncoding::output_length", seq);
    return options_.length_policy == LengthPolicy::Truncate && seq > max_len_ ? max_len_ : seq;
  }

  // y = input_scale * x[:, :out] + pe[:out] (or the interpolated table).   x: (batch, seq, dim),
  // y: (batch, output_length(seq), dim); y may be x itself unless the sequence is truncated.
  void forward(const ExecutionSpace& exec, const RunContext&, const ConstTensor3& x,
               const Tensor3& y) const {
    const T input_scale = static_cast<T>(options_.input_scale);
    constexpr const char* where = "kformer::LearnablePositionalEncoding::forward";
    check_shape(where, "x", x, {-1, -1, dim_});
    const int seq = static_cast<int>(x.extent(1));
    check_length(where, seq);
    check_shape(where, "y", y, {std::int64_t(x.extent(0)), output_length(seq), dim_});
    if (y.extent(1) != x.extent(1)) check_distinct(where, "x", x, "y", y);
    if (interpolating(seq))
      impl::learnable_pe_forward_interpolated(exec, x, y, table(), input_scale);
    else
      impl::learnable_pe_forward(exec, x, y, table(), input_scale);
  }

  // dx = input_scale * dy (zero past a truncation; += with WriteMode::Add) and pe.grad += sum
  // over the batch.   x: the forward's input (not read); dy: (batch, output_length(seq), dim),
  // dx: (batch, seq, dim); dx may be dy itself.
  void backward(const ExecutionSpace& exec, const RunContext&, const ConstTensor3&,
                const ConstTensor3& dy, const Tensor3& dx, WriteMode dx_mode = WriteMode::Assign) {
    const T input_scale = static_cast<T>(options_.input_scale);
    constexpr const char* where = "kformer::LearnablePositionalEncoding::backward";
    check_shape(where, "dx", dx, {-1, -1, dim_});
    const int seq = static_cast<int>(dx.extent(1));
    check_length(where, seq);
    check_shape(where, "dy", dy, {std::int64_t(dx.extent(0)), output_length(seq), dim_});
    if (dy.extent(1) != dx.extent(1)) check_distinct(where, "dy", dy, "dx", dx);
    const auto grad = matrix_of(pe_.grad, max_len_, dim_);
    if (interpolating(seq)) {
      impl::learnable_pe_backward_interpolated(exec, dy, grad, seq);
      write_scaled(exec, dx_mode, input_scale, dy, dx);
    } else if (dx_mode == WriteMode::Assign || dy.extent(1) != dx.extent(1)) {
      if (dx_mode == WriteMode::Add)
        fail(where, "WriteMode::Add is not supported with a truncated sequence");
      impl::learnable_pe_backward(exec, dy, dx, grad, input_scale);
    } else {
      // With dx = dy and scale 1 the kernel writes nothing but the table's gradient.
      impl::learnable_pe_backward(
          exec, dy, Tensor3(const_cast<T*>(dy.data()), dy.extent(0), dy.extent(1), dy.extent(2)),
          grad, T(1));
      write_scaled(exec, dx_mode, input_scale, dy, dx);
    }
  }

 private:
  bool interpolating(int seq) const {
    return options_.length_policy == LengthPolicy::Interpolate && seq > max_len_;
  }
  void check_length(const Where& where, int seq) const {
    if (seq > max_len_ && options_.length_policy == LengthPolicy::Error)
      fail(where, "sequence length ", seq, " exceeds max_len ", max_len_,
           " (choose LengthPolicy::Truncate or ::Interpolate to allow longer sequences)");
  }
  kformer::Tensor2<const T, memory_space> table() const {
    return matrix_of(pe_.value, max_len_, dim_);
  }

  LearnablePositionalEncodingOptions options_;
  int max_len_ = 0;
  int dim_ = 0;
  Param<T, memory_space> pe_;
};

}  // namespace kformer
