// Noise masks for TST's masked pretraining (Zerveas et al., KDD 2021), generated on the device.
//
// A mask is a (B, S, F) uint8 View like TST's noise_mask: 1 = the input value is kept, 0 = it is
// masked (set to 0) and the model must predict it. Steps past a series' length (padding) and
// excluded features are always 1.
//
//   geometric:  per chain a two-state Markov chain over the observed steps. The first step is
//               masked with probability r; a masked step is followed by a kept one with
//               p_m = 1 / lm, a kept step by a masked one with p_u = p_m r / (1 - r). Masked runs
//               average lm steps, kept runs lm (1 - r) / r, and r is the stationary masked
//               fraction, so every step is masked with probability r.
//   bernoulli:  every step of a chain is masked independently with probability r.
//   mode:       separate = one chain per variable; concurrent = one chain per series, shared by
//               all its (non-excluded) variables. (TST ignores excluded features in concurrent
//               mode; here they are never masked in any mode.)
//   forecast:   the last `horizon` observed steps of every non-excluded variable are masked.
//
// Reproducibility: draw k of a chain is word k % 4 of Philox4x32-10 under `seed` at the counter
// (k / 4, lane, series id, stream), where lane is the variable (separate) or 0xFFFFFFFF
// (concurrent), the series id is the series' global index (so a series gets the same mask in any
// batch, at any row, and with any padding) and stream selects a fresh draw (the epoch). Step t of
// a geometric chain uses draws 0 .. t: a mask is a pure function of (seed, series, variable,
// stream, step), the same on every backend and thread count. Pass a seed derived for this purpose
// (derive_seed(seed, "noise_mask")), so that masks are independent of other draws.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <Kokkos_Core.hpp>

#include "../backends/reduce.hpp"
#include "../core/compat.hpp"
#include "../core/error.hpp"
#include "../core/profiling.hpp"
#include "../core/random.hpp"
#include "../core/tensor.hpp"

namespace kformer {

enum class MaskMode { Separate, Concurrent };
enum class MaskDistribution { Geometric, Bernoulli };

struct NoiseMaskOptions {
  double masking_ratio = 0.15;    // r: expected fraction of masked observed values
  double mean_mask_length = 3.0;  // lm: mean length of a masked run (geometric only)
  MaskMode mode = MaskMode::Separate;
  MaskDistribution distribution = MaskDistribution::Geometric;
  std::vector<int> exclude_features;  // never masked
};

namespace detail {

// Throws Error(where: "lengths(b) = L is outside [0, seq]") for the first such b.
template <class ExecutionSpace>
void check_lengths(
    const ExecutionSpace& exec, const Where& where,
    const Tensor1<const std::int32_t, typename ExecutionSpace::memory_space>& lengths,
    std::int64_t seq) {
  const auto bad = backends::first_outside(exec, KFORMER_LABEL("kformer::masking::check_lengths"),
                                           lengths, 0, seq);
  if (bad.index < std::int64_t(lengths.extent(0)))
    fail(where, "lengths(", bad.index, ") = ", bad.value, " is outside [0, ", seq, "]");
}

// The uniform draws u_0, u_1, ... of one chain, in order (see the header comment).
class ChainDraws {
 public:
  KOKKOS_INLINE_FUNCTION ChainDraws(std::uint64_t seed, std::uint32_t lane, std::uint32_t series,
                                    std::uint32_t stream)
      : rng_(seed), lane_(lane), series_(series), stream_(stream) {}

  KOKKOS_INLINE_FUNCTION double next() {
    if (next_ % 4 == 0) {
      words_[0] = next_ / 4;
      words_[1] = lane_;
      words_[2] = series_;
      words_[3] = stream_;
      rng_(words_);
    }
    return uniform01(words_[next_++ % 4]);
  }

 private:
  Philox4x32 rng_;
  std::uint32_t lane_, series_, stream_;
  std::uint32_t words_[4] = {0, 0, 0, 0};
  std::uint32_t next_ = 0;
};

}  // namespace detail

template <class ExecutionSpace>
class NoiseMask {
 public:
  using memory_space = typename ExecutionSpace::memory_space;
  using Mask = Kokkos::View<std::uint8_t***, Kokkos::LayoutRight, memory_space>;
  using ConstIndices = Tensor1<const std::int32_t, memory_space>;

  // The lane of a concurrent chain (a variable index never reaches it).
  static constexpr std::uint32_t kSharedLane = 0xFFFFFFFFu;

  NoiseMask(const ExecutionSpace& exec, const NoiseMaskOptions& options) : options_(options) {
    constexpr const char* where = "kformer::NoiseMask";
    const double r = options.masking_ratio, lm = options.mean_mask_length;
    if (options.distribution == MaskDistribution::Geometric) {
      if (!(lm >= 1.0)) fail(where, "mean_mask_length must be at least 1, got ", lm);
      // p_u = r / (lm (1 - r)) is a probability only up to r = lm / (1 + lm).
      if (!(r >= 0.0 && r <= lm / (1.0 + lm)))
        fail(where, "masking_ratio must be in [0, lm / (1 + lm)] = [0, ", lm / (1.0 + lm),
             "] for geometric masks of mean length ", lm, ", got ", r);
    } else if (!(r >= 0.0 && r <= 1.0)) {
      fail(where, "masking_ratio must be in [0, 1], got ", r);
    }
    int flags = 0;
    for (const int f : options.exclude_features) {
      if (f < 0) fail(where, "exclude_features contains ", f, ", expected feature indices >= 0");
      flags = std::max(flags, f + 1);
    }
    excluded_ = Kokkos::View<std::uint8_t*, memory_space>("kformer::NoiseMask::excluded", flags);
    const auto host = Kokkos::create_mirror_view(excluded_);
    for (std::size_t i = 0; i < host.size(); ++i)
      host(i) = 0;
    for (const int f : options.exclude_features)
      host(f) = 1;
    Kokkos::deep_copy(exec, excluded_, host);
    exec.fence();  // host is freed on return
  }

  const NoiseMaskOptions& options() const { return options_; }

  // A noise mask for a batch.   series_ids, lengths: (B); mask: (B, S, F), lengths in [0, S].
  void generate(const ExecutionSpace& exec, std::uint64_t seed, std::uint32_t stream,
                const ConstIndices& series_ids, const ConstIndices& lengths,
                const Mask& mask) const {
    constexpr const char* where = "kformer::NoiseMask::generate";
    const ProfilingRegion region(where);
    check_shape(where, "series_ids", series_ids, {static_cast<std::int64_t>(mask.extent(0))});
    check_batch(exec, where, lengths, mask);
    const std::int64_t batch = mask.extent(0);
    const std::int32_t seq = static_cast<std::int32_t>(mask.extent(1));
    const std::int32_t features = static_cast<std::int32_t>(mask.extent(2));
    const bool geometric = options_.distribution == MaskDistribution::Geometric;
    const bool concurrent = options_.mode == MaskMode::Concurrent;
    const double r = options_.masking_ratio;
    const double p_m = geometric ? 1.0 / options_.mean_mask_length : 0.0;
    const double p_u = geometric ? p_m * r / (1.0 - r) : 0.0;  // r < 1 for geometric masks
    const std::uint32_t shared_lane = kSharedLane;
    const auto excluded = excluded_;
    const std::int32_t n_flags = static_cast<std::int32_t>(excluded_.extent(0));
    // One thread per chain (series, variable), the variable fastest, so that the threads' writes
    // at a step are adjacent bytes; each walks its chain in time.
    Kokkos::parallel_for(
        KFORMER_LABEL("kformer::masking::noise_mask"),
        Kokkos::RangePolicy<ExecutionSpace, Kokkos::IndexType<std::int64_t>>(exec, 0,
                                                                             batch * features),
        KOKKOS_LAMBDA(const std::int64_t chain) {
          const std::int64_t b = chain / features;
          const std::int32_t v = static_cast<std::int32_t>(chain % features);
          const bool maskable = !(v < n_flags && excluded(v));
          const std::int32_t length = lengths(b);
          detail::ChainDraws draws(seed, concurrent ? shared_lane : static_cast<std::uint32_t>(v),
                                   static_cast<std::uint32_t>(series_ids(b)), stream);
          bool masked = maskable && geometric && draws.next() < r;
          for (std::int32_t t = 0; t < seq; ++t) {
            bool masked_here = false;
            if (maskable && t < length) {
              if (geometric) {
                masked_here = masked;
                if (draws.next() < (masked ? p_m : p_u)) masked = !masked;
              } else {
                masked_here = draws.next() < r;
              }
            }
            mask(b, t, v) = masked_here ? 0 : 1;
          }
        });
  }

  // The forecasting mask: the last `horizon` observed steps of every non-excluded variable are
  // masked (all of them when a series is shorter than horizon).
  //   lengths: (B); mask: (B, S, F), lengths in [0, S]; horizon >= 0.
  void forecast(const ExecutionSpace& exec, std::int32_t horizon, const ConstIndices& lengths,
                const Mask& mask) const {
    constexpr const char* where = "kformer::NoiseMask::forecast";
    const ProfilingRegion region(where);
    if (horizon < 0) fail(where, "horizon must be at least 0, got ", horizon);
    check_batch(exec, where, lengths, mask);
    const auto excluded = excluded_;
    const std::int32_t n_flags = static_cast<std::int32_t>(excluded_.extent(0));
    Kokkos::parallel_for(
        KFORMER_LABEL("kformer::masking::forecast_mask"),
        Kokkos::MDRangePolicy<ExecutionSpace, Kokkos::Rank<3>, Kokkos::IndexType<std::int64_t>>(
            exec, {0, 0, 0},
            {static_cast<std::int64_t>(mask.extent(0)), static_cast<std::int64_t>(mask.extent(1)),
             static_cast<std::int64_t>(mask.extent(2))}),
        KOKKOS_LAMBDA(const std::int64_t b, const std::int64_t t, const std::int64_t v) {
          const bool maskable = !(v < n_flags && excluded(v));
          const std::int32_t length = lengths(b);
          mask(b, t, v) = maskable && t < length && t >= length - horizon ? 0 : 1;
        });
  }

 private:
  void check_batch(const ExecutionSpace& exec, const Where& where, const ConstIndices& lengths,
                   const Mask& mask) const {
    check_shape(where, "lengths", lengths, {static_cast<std::int64_t>(mask.extent(0))});
    if (static_cast<std::int64_t>(excluded_.extent(0)) > static_cast<std::int64_t>(mask.extent(2)))
      fail(where, "exclude_features names feature ", excluded_.extent(0) - 1,
           " but mask has shape ", shape_of(mask), " (", mask.extent(2), " features)");
    detail::check_lengths(exec, where, lengths, static_cast<std::int64_t>(mask.extent(1)));
  }

  NoiseMaskOptions options_;
  Kokkos::View<std::uint8_t*, memory_space> excluded_;  // excluded_(f) = 1: never mask f
};

// Applies a noise mask to a batch and marks what the loss must count, in one pass:
//   x_masked = x       where mask = 1, the step is observed (t < length) and x is not NaN,
//              0       elsewhere (masked, padded or missing values: TST sets masked inputs to 0);
//   target   = 1       where mask = 0, t < length and x is not NaN (the values to predict),
//              0       elsewhere,
// so that Losses::masked_mse(pred, x, target) averages over exactly the masked observed values.
//   x, x_masked: (B, S, F); mask, target: (B, S, F); lengths: (B) in [0, S]. x_masked may be x.
template <class T, class ExecutionSpace>
void apply_noise_mask(
    const ExecutionSpace& exec, const Tensor3<const T, typename ExecutionSpace::memory_space>& x,
    const Kokkos::View<const std::uint8_t***, Kokkos::LayoutRight,
                       typename ExecutionSpace::memory_space>& mask,
    const Tensor1<const std::int32_t, typename ExecutionSpace::memory_space>& lengths,
    const Tensor3<T, typename ExecutionSpace::memory_space>& x_masked,
    const Kokkos::View<std::uint8_t***, Kokkos::LayoutRight, typename ExecutionSpace::memory_space>&
        target) {
  constexpr const char* where = "kformer::apply_noise_mask";
  const ProfilingRegion region(where);
  check_shape(where, "mask", mask, extents_of(x));
  check_shape(where, "x_masked", x_masked, extents_of(x));
  check_shape(where, "target", target, extents_of(x));
  check_shape(where, "lengths", lengths, {static_cast<std::int64_t>(x.extent(0))});
  detail::check_lengths(exec, where, lengths, static_cast<std::int64_t>(x.extent(1)));
  Kokkos::parallel_for(
      KFORMER_LABEL("kformer::masking::apply_noise_mask"),
      Kokkos::MDRangePolicy<ExecutionSpace, Kokkos::Rank<3>, Kokkos::IndexType<std::int64_t>>(
          exec, {0, 0, 0},
          {static_cast<std::int64_t>(x.extent(0)), static_cast<std::int64_t>(x.extent(1)),
           static_cast<std::int64_t>(x.extent(2))}),
      KOKKOS_LAMBDA(const std::int64_t b, const std::int64_t t, const std::int64_t f) {
        const T value = x(b, t, f);
        const bool observed = t < lengths(b) && !compat::math::isnan(value);
        const bool kept = mask(b, t, f) != 0;
        x_masked(b, t, f) = observed && kept ? value : T(0);
        target(b, t, f) = observed && !kept ? 1 : 0;
      });
}

}  // namespace kformer
