// Kernels of the value encoding. Free functions rather than members of ValueEncoding: nvcc
// accepts a device lambda only in a function whose address can be taken and that is not private
// (so not in a constructor or a private helper).
#pragma once

#include <cstdint>
#include <limits>
#include <type_traits>

#include <Kokkos_Core.hpp>

#include "../../../backends/for_each.hpp"
#include "../../../backends/streaming_store.hpp"
#include "../../../core/compat.hpp"
#include "../../../core/math.hpp"
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

// Whether enc(v) of a T result may use math::sin_cos (float results, angles within its range),
// given the token's largest angle |v| w_0.
template <class T>
KOKKOS_INLINE_FUNCTION bool fast_sin_cos(const double largest_angle) {
  return std::is_same<T, float>::value && largest_angle <= math::kSinCosLimit;
}

// sin and cos of angle as T: math::sin_cos when `fast`, the library's functions otherwise.
template <class T>
KOKKOS_INLINE_FUNCTION void sin_cos_as(const bool fast, const double angle, T& sin_v, T& cos_v) {
  if constexpr (std::is_same<T, float>::value) {
    if (fast) return math::sin_cos(angle, sin_v, cos_v);
  }
  sin_v = static_cast<T>(compat::math::sin(angle));
  cos_v = static_cast<T>(compat::math::cos(angle));
}

// y = (x or 0) + enc(values): the sine and cosine of v w_i (math::sin_cos for float results, the
// library's functions in double otherwise).
//
// CPUs: the tokens are cut into kLanes equal ranges, and a team (one thread) takes the same
// kTokensPerTeam steps of each: at each step it computes the lanes' tokens' encodings into rows in
// scratch by loops that vectorise, then adds them to their inputs and streams them out (large
// outputs around the caches) together, so that four input streams are in flight, not one
// (0.52-0.55x to 0.59-0.68x of a copy measured in alternation). GPUs: a thread per (token,
// frequency).
template <bool kAddInput, class ExecutionSpace, class T, class M>
void value_encoding_apply(const char* label, const ExecutionSpace& exec, const Sinusoid& s,
                          const Kokkos::View<const double*, M>& w,
                          const Tensor2<const T, M>& values, const Tensor3<const T, M>& x,
                          const Tensor3<T, M>& y) {
  using policy_type = Kokkos::TeamPolicy<ExecutionSpace>;
  using member_type = typename policy_type::member_type;
  using ScratchRow =
      Kokkos::View<T*, typename ExecutionSpace::scratch_memory_space, Kokkos::MemoryUnmanaged>;
  const std::int64_t tokens = std::int64_t(values.extent(0)) * values.extent(1);
  const int dim = s.dim;
  const double* const wp = w.data();
  const T* const vp = values.data();
  const T* const xp = x.data();  // read only when kAddInput (encode passes y)
  T* const yp = y.data();
  if constexpr (!backends::runs_on_host<ExecutionSpace>) {
    const std::int64_t per_token = s.n_freq;
    Kokkos::parallel_for(
        label, TokenPolicy<ExecutionSpace>(exec, 0, tokens * per_token),
        KOKKOS_LAMBDA(const std::int64_t k) {
          const std::int64_t token = k / per_token;
          const int i = static_cast<int>(k % per_token);
          const double v = vp[token];
          T sin_v, cos_v;
          sin_cos_as(fast_sin_cos<T>(compat::math::fabs(v) * wp[0]), v * wp[i], sin_v, cos_v);
          const T* const in = xp + token * dim;
          T* const out = yp + token * dim;
          const int cs = s.sin_column(i);
          out[cs] = (kAddInput ? in[cs] : T(0)) + sin_v;
          if (i < s.n_cos) {
            const int cc = s.cos_column(i);
            out[cc] = (kAddInput ? in[cc] : T(0)) + cos_v;
          }
        });
  } else {
    constexpr std::int64_t kTokensPerTeam = 16;
    const bool streaming = backends::use_streaming_stores(yp, kAddInput ? xp : nullptr,
                                                          std::size_t(tokens) * dim * sizeof(T));
    constexpr int kLanes = 4;
    const std::int64_t lane_tokens = (tokens + kLanes - 1) / kLanes;
    const std::size_t bytes = ScratchRow::shmem_size(std::size_t(kLanes) * dim);
    const int level = backends::team_scratch_level<ExecutionSpace>(bytes);
    Kokkos::parallel_for(
        label,
        policy_type(exec, (lane_tokens + kTokensPerTeam - 1) / kTokensPerTeam, 1)
            .set_scratch_size(level, Kokkos::PerTeam(bytes)),
        KOKKOS_LAMBDA(const member_type& team) {
          T* const rows = ScratchRow(team.team_scratch(level), std::size_t(kLanes) * dim).data();
          const std::int64_t begin = team.league_rank() * kTokensPerTeam;
          for (std::int64_t step = begin; step < begin + kTokensPerTeam && step < lane_tokens;
               ++step) {
            int lanes = 0;
            for (; lanes < kLanes; ++lanes) {
              const std::int64_t token = lanes * lane_tokens + step;
              if (token >= tokens) break;
              T* const row = rows + lanes * dim;
              const double v = vp[token];
              if (fast_sin_cos<T>(compat::math::fabs(v) * wp[0]))  // w_0 is the largest
                write_sinusoid_row(s, row, [=](const int i, T& sin_v, T& cos_v) {
                  sin_cos_as(true, v * wp[i], sin_v, cos_v);
                });
              else
                write_sinusoid_row(s, row, [=](const int i, T& sin_v, T& cos_v) {
                  sin_cos_as(false, v * wp[i], sin_v, cos_v);
                });
            }
            backends::store_batch_runs(
                0, lanes, dim, streaming,
                [=](const int lane) { return yp + (lane * lane_tokens + step) * dim; },
                [=](const int lane) {
                  const T* const in = xp + (lane * lane_tokens + step) * dim;
                  const T* const row = rows + lane * dim;
                  return [=](const std::int64_t k) { return kAddInput ? in[k] + row[k] : row[k]; };
                });
          }
          if (streaming) backends::streaming_fence();
        });
  }
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
