// Kernels of the value encoding. Free functions rather than members of ValueEncoding: nvcc
// accepts a device lambda only in a function whose address can be taken and that is not private
// (so not in a constructor or a private helper).
#pragma once

#include <cstdint>
#include <limits>

#include <Kokkos_Core.hpp>

#include "../../../core/compat.hpp"
#include "../../../core/tensor.hpp"
#include "../sinusoid.hpp"

namespace kformer::impl {

template <class ExecutionSpace>
using TokenPolicy = Kokkos::RangePolicy<ExecutionSpace, Kokkos::IndexType<std::int64_t>>;

// w[i] = the angular frequency i of s.
template <class ExecutionSpace, class M>
void value_encoding_frequencies(const ExecutionSpace& exec, const Sinusoid& s,
                                const Kokkos::View<double*, M>& w) {
  Kokkos::parallel_for(
      "kformer::value_encoding::frequencies",
      Kokkos::RangePolicy<ExecutionSpace>(exec, 0, s.n_freq),
      KOKKOS_LAMBDA(const int i) { w(i) = s.frequency(i); });
}

// y = (x or 0) + enc(values). One work item per (token, frequency): the sine and cosine of
// v w_i, in double.
template <bool kAddInput, class ExecutionSpace, class T, class M>
void value_encoding_apply(const char* label, const ExecutionSpace& exec, const Sinusoid& s,
                          const Kokkos::View<const double*, M>& w,
                          const Tensor2<const T, M>& values, const Tensor3<const T, M>& x,
                          const Tensor3<T, M>& y) {
  const int seq = values.extent(1);
  const std::int64_t per_token = s.n_freq;
  Kokkos::parallel_for(
      label, TokenPolicy<ExecutionSpace>(exec, 0, std::int64_t(values.extent(0)) * seq * per_token),
      KOKKOS_LAMBDA(const std::int64_t k) {
        const std::int64_t token = k / per_token;
        const int i = static_cast<int>(k % per_token);
        const int b = static_cast<int>(token / seq), p = static_cast<int>(token % seq);
        const double angle = static_cast<double>(values(b, p)) * w(i);
        const int cs = s.sin_column(i);
        const T sin_v = static_cast<T>(compat::math::sin(angle));
        y(b, p, cs) = kAddInput ? x(b, p, cs) + sin_v : sin_v;
        if (i < s.n_cos) {
          const int cc = s.cos_column(i);
          const T cos_v = static_cast<T>(compat::math::cos(angle));
          y(b, p, cc) = kAddInput ? x(b, p, cc) + cos_v : cos_v;
        }
      });
}

// dvalues[b, p] = sum_i w_i (dy[b, p, sin_i] cos(v w_i) - dy[b, p, cos_i] sin(v w_i)).
template <class ExecutionSpace, class T, class M>
void value_encoding_backward_values(const ExecutionSpace& exec, const Sinusoid& s,
                                    const Kokkos::View<const double*, M>& w,
                                    const Tensor2<const T, M>& values,
                                    const Tensor3<const T, M>& dy, const Tensor2<T, M>& dvalues) {
  const int seq = values.extent(1);
  Kokkos::parallel_for(
      "kformer::value_encoding::backward_values",
      TokenPolicy<ExecutionSpace>(exec, 0, std::int64_t(values.extent(0)) * seq),
      KOKKOS_LAMBDA(const std::int64_t token) {
        const int b = static_cast<int>(token / seq), p = static_cast<int>(token % seq);
        const double v = values(b, p);
        double sum = 0;
        for (int i = 0; i < s.n_freq; ++i) {
          const double angle = v * w(i);
          sum += w(i) * dy(b, p, s.sin_column(i)) * compat::math::cos(angle);
          if (i < s.n_cos) sum -= w(i) * dy(b, p, s.cos_column(i)) * compat::math::sin(angle);
        }
        dvalues(b, p) = static_cast<T>(sum);
      });
}

// The flat index of the first NaN or Inf in values, or the largest int64 when all are finite.
template <class ExecutionSpace, class T, class M>
std::int64_t first_non_finite(const ExecutionSpace& exec, const Tensor2<const T, M>& values) {
  const int seq = values.extent(1);
  std::int64_t first_bad = std::numeric_limits<std::int64_t>::max();
  Kokkos::parallel_reduce(
      "kformer::value_encoding::check_finite",
      TokenPolicy<ExecutionSpace>(exec, 0, std::int64_t(values.extent(0)) * seq),
      KOKKOS_LAMBDA(const std::int64_t k, std::int64_t& bad) {
        const T v = values(k / seq, k % seq);
        if (!compat::math::isfinite(v) && k < bad) bad = k;
      },
      Kokkos::Min<std::int64_t>(first_bad));
  return first_bad;
}

}  // namespace kformer::impl
