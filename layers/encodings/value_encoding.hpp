// The sinusoid of a real value per token: m/z or intensity of a peak (IDSL_MINT encodes a peak's
// intensity this way), or the time stamp of an irregular time series.
//
//   enc(v)[sin_column(i)] = sin(v w_i),   enc(v)[cos_column(i)] = cos(v w_i)
//
// with the frequencies of Sinusoid (base mode: exactly the positional encoding's, so encoding the
// values 0, 1, 2, ... reproduces PositionalEncoding; wavelength mode: geometric wavelengths between
// min_wavelength and max_wavelength, as depthcharge's mass encoders).
//
//   forward:          y = x + enc(values)        values (batch, seq), x, y (batch, seq, dim)
//   encode:           y = enc(values)
//   backward:         dx = dy
//   backward_values:  dvalues[b, s] = sum_i w_i (dy[b,s,sin_i] cos(v w_i) - dy[b,s,cos_i] sin(v
//   w_i))
//
// Values must be finite. With set_finite_checks(true) a NaN or Inf is reported with its index
// before anything is written; the check is a reduction read back on the host, so it is off by
// default (a caller whose values come from its own state or from a checked reader opts in).
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include <Kokkos_Core.hpp>

#include "../../core/compat.hpp"
#include "../../core/error.hpp"
#include "../../core/layer.hpp"
#include "../../core/profiling.hpp"
#include "../../core/run_context.hpp"
#include "../../core/tensor.hpp"
#include "../../core/view_adapters.hpp"
#include "../elementwise.hpp"
#include "impl/value_encoding_kernels.hpp"
#include "sinusoid.hpp"

namespace kformer {

template <class T, class ExecutionSpace>
class ValueEncoding {
 public:
  using execution_space = ExecutionSpace;
  using memory_space = typename ExecutionSpace::memory_space;
  using Tensor3 = RowMajorView<kformer::Tensor3<T, memory_space>>;
  using ConstTensor3 = RowMajorView<kformer::Tensor3<const T, memory_space>>;
  using Tensor2 = kformer::Tensor2<T, memory_space>;
  using ConstTensor2 = kformer::Tensor2<const T, memory_space>;

  ValueEncoding(const ExecutionSpace& exec, int dim, const SinusoidOptions& options = {})
      : sinusoid_("kformer::ValueEncoding", dim, options),
        frequencies_(Kokkos::view_alloc(exec, Kokkos::WithoutInitializing,
                                        "kformer::ValueEncoding::frequencies"),
                     sinusoid_.n_freq),
        frequency_parts_(Kokkos::view_alloc(exec, Kokkos::WithoutInitializing,
                                            "kformer::ValueEncoding::frequency_parts"),
                         2, sinusoid_.n_freq) {
    impl::value_encoding_frequencies(exec, sinusoid_, frequencies_, frequency_parts_);
  }

  int dim() const { return sinusoid_.dim; }
  // Whether forward and encode first check that the values are finite (off by default).
  void set_finite_checks(bool on) { check_finite_ = on; }
  // The n_freq = ceil(dim/2) angular frequencies w_i, in the space's memory.
  Kokkos::View<const double*, memory_space> frequencies() const { return frequencies_; }
  template <class F>
  void visit_parameters(F&&) {}
  template <class F>
  void visit_buffers(F&&) {}
  void zero_grad(const ExecutionSpace&) {}
  std::int64_t buffer_bytes() const {
    return std::int64_t(frequencies_.span() * sizeof(double) +
                        frequency_parts_.span() * sizeof(float));
  }

  // y = x + enc(values); y may be x itself.
  void forward(const ExecutionSpace& exec, const RunContext&, const ConstTensor2& values,
               const ConstTensor3& x, const Tensor3& y) const {
    constexpr const char* where = "kformer::ValueEncoding::forward";
    check_shape(where, "x", x,
                {std::int64_t(values.extent(0)), std::int64_t(values.extent(1)), dim()});
    check_shape(where, "y", y, extents_of(x));
    if (check_finite_) require_finite_values(where, exec, values);
    impl::value_encoding_apply<true>(KFORMER_LABEL("kformer::value_encoding::add"), exec, sinusoid_,
                                     frequencies(), frequency_parts(), values, x, y);
  }

  // y = enc(values).   y: (batch, seq, dim)
  void encode(const ExecutionSpace& exec, const ConstTensor2& values, const Tensor3& y) const {
    constexpr const char* where = "kformer::ValueEncoding::encode";
    check_shape(where, "y", y,
                {std::int64_t(values.extent(0)), std::int64_t(values.extent(1)), dim()});
    if (check_finite_) require_finite_values(where, exec, values);
    impl::value_encoding_apply<false>(KFORMER_LABEL("kformer::value_encoding::encode"), exec,
                                      sinusoid_, frequencies(), frequency_parts(), values,
                                      ConstTensor3(y), y);
  }

  // dx = dy (the encoding does not depend on x), += with WriteMode::Add. Nothing to do when dx
  // is dy.   x: the forward's input (not read).
  void backward(const ExecutionSpace& exec, const RunContext&, const ConstTensor3&,
                const ConstTensor3& dy, const Tensor3& dx,
                WriteMode dx_mode = WriteMode::Assign) const {
    constexpr const char* where = "kformer::ValueEncoding::backward";
    check_shape(where, "dy", dy, {-1, -1, dim()});
    check_shape(where, "dx", dx, extents_of(dy));
    write_scaled(exec, dx_mode, T(1), dy, dx);
  }

  // dvalues = d(sum dy * enc(values)) / dvalues, for values that are themselves computed.
  void backward_values(const ExecutionSpace& exec, const ConstTensor2& values,
                       const ConstTensor3& dy, const Tensor2& dvalues) const {
    constexpr const char* where = "kformer::ValueEncoding::backward_values";
    check_shape(where, "dy", dy,
                {std::int64_t(values.extent(0)), std::int64_t(values.extent(1)), dim()});
    check_shape(where, "dvalues", dvalues, extents_of(values));
    impl::value_encoding_backward_values(exec, sinusoid_, frequencies(), values, dy, dvalues);
  }

 private:
  Kokkos::View<const float**, Kokkos::LayoutRight, memory_space> frequency_parts() const {
    return frequency_parts_;
  }

  void require_finite_values(const Where& where, const ExecutionSpace& exec,
                             const ConstTensor2& values) const {
    const std::int64_t first_bad = impl::first_non_finite(exec, values);
    if (first_bad != std::numeric_limits<std::int64_t>::max()) {
      const int seq = values.extent(1);
      const auto host = to_host(Kokkos::subview(values, first_bad / seq, first_bad % seq));
      fail(where, "values[", first_bad / seq, ", ", first_bad % seq, "] = ", host(),
           " is not finite; values must be finite");
    }
  }

  Sinusoid sinusoid_;
  bool check_finite_ = false;
  Kokkos::View<double*, memory_space> frequencies_;
  Kokkos::View<float**, Kokkos::LayoutRight, memory_space>
      frequency_parts_;  // float(w_i), the rest
};

}  // namespace kformer
