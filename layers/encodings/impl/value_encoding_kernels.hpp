// Kernels of the value encoding. Free functions rather than members of ValueEncoding: nvcc
// accepts a device lambda only in a function whose address can be taken and that is not private
// (so not in a constructor or a private helper).
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include <Kokkos_Core.hpp>

#include "../../../backends/for_each.hpp"
#include "../../../backends/streaming_store.hpp"
#include "../../../core/compat.hpp"
#include "../../../core/math.hpp"
#include "../../../core/profiling.hpp"
#include "../../../core/tensor.hpp"
#include "../sinusoid.hpp"

namespace kformer::impl {

template <class ExecutionSpace>
using TokenPolicy = Kokkos::RangePolicy<ExecutionSpace, Kokkos::IndexType<std::int64_t>>;

// w[i] = the angular frequency i of s, and w_parts(0, i) + w_parts(1, i) the same in two floats
// (float(w_i) and the rest) for math::sin_cos_product.
template <class ExecutionSpace, class M>
void value_encoding_frequencies(const ExecutionSpace& exec, const Sinusoid& s,
                                const Kokkos::View<double*, M>& w,
                                const Kokkos::View<float**, Kokkos::LayoutRight, M>& w_parts) {
  Kokkos::parallel_for(
      KFORMER_LABEL("kformer::value_encoding::frequencies"),
      Kokkos::RangePolicy<ExecutionSpace>(exec, 0, s.n_freq), KOKKOS_LAMBDA(const int i) {
        w(i) = s.frequency(i);
        w_parts(0, i) = static_cast<float>(w(i));
        w_parts(1, i) = static_cast<float>(w(i) - double(w_parts(0, i)));
      });
}

// How enc(v) of a T result computes its sines and cosines, chosen per token by its largest angle
// |v| w_0: float results by math::sin_cos_product while the angles allow, then math::sin_cos of
// the angle in double; double results (and angles beyond both) by the library's functions. CPUs
// take math::sin_cos_small_product (the same bits, half the work) for the chunks of frequencies
// whose angles are all below math::kSinCosSmallProductLimit: the lowest frequencies of m/z
// values, all of them for intensities in [0, 1].
enum class SinCosPath { SmallProduct, Product, DoubleAngle, Library };

template <class T>
KOKKOS_INLINE_FUNCTION SinCosPath sin_cos_path(const double largest_angle) {
  if (!std::is_same<T, float>::value) return SinCosPath::Library;
  if (largest_angle <= math::kSinCosProductLimit) return SinCosPath::Product;
  if (largest_angle <= math::kSinCosLimit) return SinCosPath::DoubleAngle;
  return SinCosPath::Library;
}

// The frequencies a CPU team computes and stores at a time (see value_encoding_apply).
inline constexpr int kChunkFrequencies = 64;

// The frequencies as a kernel reads them.
struct FrequencyPointers {
  const double* w;
  const float* w_hi;
  const float* w_lo;
};

// sin and cos of v w_i as T along kPath, for write_sinusoid_frequencies.
template <SinCosPath kPath, class T>
struct SinCosAlong {
  FrequencyPointers f;
  double v;

  KOKKOS_INLINE_FUNCTION void operator()(const int i, T& sin_v, T& cos_v) const {
    if constexpr (std::is_same<T, float>::value && kPath == SinCosPath::SmallProduct) {
      math::sin_cos_small_product(static_cast<float>(v), f.w_hi[i], f.w_lo[i], sin_v, cos_v);
    } else if constexpr (std::is_same<T, float>::value && kPath == SinCosPath::Product) {
      math::sin_cos_product(static_cast<float>(v), f.w_hi[i], f.w_lo[i], sin_v, cos_v);
    } else if constexpr (std::is_same<T, float>::value && kPath == SinCosPath::DoubleAngle) {
      math::sin_cos(v * f.w[i], sin_v, cos_v);
    } else {
      sin_v = static_cast<T>(compat::math::sin(v * f.w[i]));
      cos_v = static_cast<T>(compat::math::cos(v * f.w[i]));
    }
  }
};

// Frequencies [f_begin, f_end) of enc(v) into row (laid out as s), along `path`: one loop per path,
// so that each vectorises on CPUs.
template <class T>
KOKKOS_INLINE_FUNCTION void write_value_frequencies(const Sinusoid& s, const FrequencyPointers& f,
                                                    const SinCosPath path, const double v,
                                                    T* const row, const int f_begin,
                                                    const int f_end) {
  using P = SinCosPath;
  switch (path) {
    case P::SmallProduct:
      return write_sinusoid_frequencies(s, row, f_begin, f_end,
                                        SinCosAlong<P::SmallProduct, T>{f, v});
    case P::Product:
      return write_sinusoid_frequencies(s, row, f_begin, f_end, SinCosAlong<P::Product, T>{f, v});
    case P::DoubleAngle:
      return write_sinusoid_frequencies(s, row, f_begin, f_end,
                                        SinCosAlong<P::DoubleAngle, T>{f, v});
    default:
      return write_sinusoid_frequencies(s, row, f_begin, f_end, SinCosAlong<P::Library, T>{f, v});
  }
}

// y = (x or 0) + enc(values), the sines and cosines along each token's SinCosPath.
//
// CPUs: the tokens are cut into kLanes equal ranges, and a team (one thread) takes the same
// kTokensPerTeam steps of each. At each step it goes through the frequencies kChunkFrequencies at a
// time: it computes the lanes' columns of the chunk into rows in scratch by loops that vectorise,
// then adds them to their inputs and streams them out (large outputs around the caches) together,
// four input streams in flight. Chunks of 64 frequencies (eight cache lines per lane) overlap the
// memory traffic of one chunk with the computing of the next best. On the 2-core development
// machine, in alternation with a copy (m/z values, two runs), chunks of 16, 32, 64, 128 and 256
// (whole rows) frequencies gave 0.51-0.52x, 0.70-0.72x, 0.79-0.80x, 0.73x and 0.71-0.76x. Finer
// interleavings were slower still: storing the last chunk a lane at a time between the lanes of
// the next (0.56x), and adding the input while computing so that only scratch is streamed (0.68x).
// GPUs: a thread per (token, frequency).
template <bool kAddInput, class ExecutionSpace, class T, class M>
void value_encoding_apply(const std::string& label, const ExecutionSpace& exec, const Sinusoid& s,
                          const Kokkos::View<const double*, M>& w,
                          const Kokkos::View<const float**, Kokkos::LayoutRight, M>& w_parts,
                          const Tensor2<const T, M>& values, const Tensor3<const T, M>& x,
                          const Tensor3<T, M>& y) {
  using policy_type = backends::BalancedTeamPolicy<ExecutionSpace>;
  using member_type = typename policy_type::member_type;
  using ScratchRow =
      Kokkos::View<T*, typename ExecutionSpace::scratch_memory_space, Kokkos::MemoryUnmanaged>;
  const std::int64_t tokens = std::int64_t(values.extent(0)) * values.extent(1);
  const int dim = s.dim;
  const FrequencyPointers f{w.data(), w_parts.data(), w_parts.data() + w_parts.extent(1)};
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
          using P = SinCosPath;
          switch (sin_cos_path<T>(compat::math::fabs(v) * f.w[0])) {  // w_0 is the largest
            case P::Product:
              SinCosAlong<P::Product, T>{f, v}(i, sin_v, cos_v);
              break;
            case P::DoubleAngle:
              SinCosAlong<P::DoubleAngle, T>{f, v}(i, sin_v, cos_v);
              break;
            default:
              SinCosAlong<P::Library, T>{f, v}(i, sin_v, cos_v);
          }
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
    constexpr int kLanes = 4;
    const bool streaming = backends::use_streaming_stores(yp, kAddInput ? xp : nullptr,
                                                          std::size_t(tokens) * dim * sizeof(T));
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
            double v[kLanes];
            SinCosPath path[kLanes];
            for (; lanes < kLanes && lanes * lane_tokens + step < tokens; ++lanes) {
              v[lanes] = vp[lanes * lane_tokens + step];
              path[lanes] = sin_cos_path<T>(compat::math::fabs(v[lanes]) * f.w[0]);
            }
            for (int f_begin = 0; f_begin < s.n_freq; f_begin += kChunkFrequencies) {
              const int f_end =
                  f_begin + kChunkFrequencies < s.n_freq ? f_begin + kChunkFrequencies : s.n_freq;
              for (int lane = 0; lane < lanes; ++lane) {
                // w_hi[f_begin] is the chunk's largest frequency.
                const bool small =
                    path[lane] == SinCosPath::Product &&
                    compat::math::fabs(static_cast<float>(v[lane]) * f.w_hi[f_begin]) <=
                        math::kSinCosSmallProductLimit;
                write_value_frequencies(s, f, small ? SinCosPath::SmallProduct : path[lane],
                                        v[lane], rows + lane * dim, f_begin, f_end);
              }
              const SinusoidColumnRuns runs = sinusoid_column_runs(s, f_begin, f_end);
              for (int r = 0; r < runs.count; ++r) {
                const std::int64_t c = runs.begin[r];
                backends::store_batch_runs(
                    0, lanes, runs.end[r] - c, streaming,
                    [=](const int lane) { return yp + (lane * lane_tokens + step) * dim + c; },
                    [=](const int lane) {
                      const T* const in = xp + (lane * lane_tokens + step) * dim + c;
                      const T* const row = rows + lane * dim + c;
                      return
                          [=](const std::int64_t k) { return kAddInput ? in[k] + row[k] : row[k]; };
                    });
              }
            }
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
      KFORMER_LABEL("kformer::value_encoding::backward_values"),
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
      KFORMER_LABEL("kformer::value_encoding::check_finite"),
      TokenPolicy<ExecutionSpace>(exec, 0, std::int64_t(values.extent(0)) * seq),
      KOKKOS_LAMBDA(const std::int64_t k, std::int64_t& bad) {
        const T v = values(k / seq, k % seq);
        if (!compat::math::isfinite(v) && k < bad) bad = k;
      },
      Kokkos::Min<std::int64_t>(first_bad));
  return first_bad;
}

}  // namespace kformer::impl
