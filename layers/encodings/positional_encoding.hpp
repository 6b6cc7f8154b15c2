// The fixed sinusoidal positional encoding (Vaswani et al.), as a matrix and as a layer.
//
//   PE[p, sin_column(i)] = sin((p + first_position) w_i)
//   PE[p, cos_column(i)] = cos((p + first_position) w_i),   w_i = base^(-2i/dim)
//
// The layer has no parameters and reads the sequence length from its input at every call, so the
// same layer serves trajectories of any length. Its Jacobian is the identity: backward passes the
// gradient through unchanged (a structure-preserving network keeps its structure with it in front).
#pragma once

#include <cstdint>
#include <string>

#include <Kokkos_Core.hpp>

#include "../../core/error.hpp"
#include "../../core/layer.hpp"
#include "../../core/profiling.hpp"
#include "../../core/run_context.hpp"
#include "../../core/tensor.hpp"
#include "../../core/view_adapters.hpp"
#include "../elementwise.hpp"
#include "impl/positional_encoding_kernels.hpp"
#include "sinusoid.hpp"

namespace kformer {

struct PositionalEncodingOptions {
  SinusoidLayout layout = SinusoidLayout::Interleaved;
  double base = 10000.0;
  // Position of the first row. GeometricMachineLearning counts from 1 and subtracts 1, which is
  // the default 0; a streaming caller continuing a sequence passes the number of steps seen.
  std::int64_t first_position = 0;
  // The layer computes y = input_scale * x + PE (TST scales its projected input by sqrt(d_model)
  // before adding the encoding); the matrix functions ignore it.
  double input_scale = 1.0;
};

// Writes the encoding matrix into pe: (seq_length, dim), in exec's memory space. A caller that
// refreshes a table (a new first_position, a longer sequence) reuses its memory this way.
template <class ExecutionSpace, class T, class M>
void positional_encoding(const ExecutionSpace& exec, const Tensor2<T, M>& pe,
                         const PositionalEncodingOptions& options = {}) {
  static_assert(Kokkos::SpaceAccessibility<ExecutionSpace, M>::accessible,
                "positional_encoding: pe must be accessible from the execution space");
  constexpr const char* where = "kformer::positional_encoding";
  const Sinusoid sinusoid(where, static_cast<int>(pe.extent(1)), {options.layout, options.base});
  if (!pe.span_is_contiguous()) fail(where, "pe must be contiguous (an unpadded LayoutRight View)");
  const Tensor3<T, M> pe3 = as_batch(pe);
  impl::PositionalEncodingFunctor<T, ExecutionSpace, false>::launch(
      KFORMER_LABEL("kformer::positional_encoding::matrix"), exec, pe3, pe3, sinusoid,
      static_cast<double>(options.first_position));
}

// The (seq_length, dim) encoding matrix in exec's memory space, for reuse and inspection.
template <class T, class ExecutionSpace>
Tensor2<T, typename ExecutionSpace::memory_space> positional_encoding(
    const ExecutionSpace& exec, int dim, int seq_length,
    const PositionalEncodingOptions& options = {}) {
  using memory_space = typename ExecutionSpace::memory_space;
  constexpr const char* where = "kformer::positional_encoding";
  Sinusoid(where, dim, {options.layout, options.base});  // dim and base refused before allocating
  if (seq_length < 0) fail(where, "seq_length must be non-negative, got ", seq_length);
  Tensor2<T, memory_space> pe(
      Kokkos::view_alloc(exec, Kokkos::WithoutInitializing, "kformer::positional_encoding"),
      seq_length, dim);
  positional_encoding(exec, pe, options);
  return pe;
}

template <class T, class ExecutionSpace>
class PositionalEncoding {
 public:
  using execution_space = ExecutionSpace;
  using memory_space = typename ExecutionSpace::memory_space;
  using Tensor3 = RowMajorView<kformer::Tensor3<T, memory_space>>;
  using ConstTensor3 = RowMajorView<kformer::Tensor3<const T, memory_space>>;
  using Tensor2 = kformer::Tensor2<T, memory_space>;
  using ConstTensor2 = kformer::Tensor2<const T, memory_space>;

  explicit PositionalEncoding(int dim, const PositionalEncodingOptions& options = {})
      : sinusoid_("kformer::PositionalEncoding", dim, {options.layout, options.base}),
        options_(options) {}
  PositionalEncoding(const ExecutionSpace&, int dim, const PositionalEncodingOptions& options = {})
      : PositionalEncoding(dim, options) {}

  int dim() const { return sinusoid_.dim; }
  const PositionalEncodingOptions& options() const { return options_; }
  template <class F>
  void visit_parameters(F&&) {}
  template <class F>
  void visit_buffers(F&&) {}
  void zero_grad(const ExecutionSpace&) {}
  std::int64_t buffer_bytes() const { return 0; }

  // y = input_scale * x + PE[:seq].   x, y: (batch, seq, dim); y may be x itself.
  void forward(const ExecutionSpace& exec, const RunContext&, const ConstTensor3& x,
               const Tensor3& y) const {
    constexpr const char* where = "kformer::PositionalEncoding::forward";
    check_shape(where, "x", x, {-1, -1, dim()});
    check_shape(where, "y", y, extents_of(x));
    impl::PositionalEncodingFunctor<T, ExecutionSpace, true>::launch(
        KFORMER_LABEL("kformer::positional_encoding::add"), exec, x, y, sinusoid_, first_position(),
        static_cast<T>(options_.input_scale));
  }
  // A single (seq, dim) sequence, as a batch of one.
  void forward(const ExecutionSpace& exec, const RunContext& ctx, const ConstTensor2& x,
               const Tensor2& y) const {
    constexpr const char* where = "kformer::PositionalEncoding::forward";
    check_shape(where, "x", x, {-1, dim()});
    check_shape(where, "y", y, extents_of(x));
    forward(exec, ctx, ConstTensor3(x.data(), 1, x.extent(0), x.extent(1)), as_batch(y));
  }

  // dx = input_scale * dy (the Jacobian is the identity, scaled), += with WriteMode::Add. Nothing
  // to do when dx is dy and the scale is 1.   x: the forward's input (not read).
  void backward(const ExecutionSpace& exec, const RunContext&, const ConstTensor3&,
                const ConstTensor3& dy, const Tensor3& dx,
                WriteMode dx_mode = WriteMode::Assign) const {
    constexpr const char* where = "kformer::PositionalEncoding::backward";
    check_shape(where, "dy", dy, {-1, -1, dim()});
    check_shape(where, "dx", dx, extents_of(dy));
    write_scaled(exec, dx_mode, static_cast<T>(options_.input_scale), dy, dx);
  }

 private:
  double first_position() const { return static_cast<double>(options_.first_position); }

  Sinusoid sinusoid_;
  PositionalEncodingOptions options_;
};

}  // namespace kformer
