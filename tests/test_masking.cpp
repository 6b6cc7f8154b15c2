// masking/: the statistics of geometric and Bernoulli noise masks over a large sample (masked
// fraction, run lengths, independence of variables against the closed forms), excluded
// features, the forecasting mask, padding, reproducibility across backends and batches, applying
// a mask with missing values, and errors.
#include "support/catch.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include <Kokkos_Core.hpp>

#include <kformer/backends/spaces.hpp>
#include <kformer/masking/noise_mask.hpp>

#include "support/allocation_counter.hpp"
#include "support/test_support.hpp"

using namespace kformer;
using namespace kformer::testing;

namespace {

template <class Space>
using Mask3 = Kokkos::View<std::uint8_t***, Kokkos::LayoutRight, MemorySpaceOf<Space>>;

template <class Space>
Tensor1<std::int32_t, MemorySpaceOf<Space>> indices_from(const std::vector<int>& values) {
  return device_from<std::int32_t, Space>(std::vector<double>(values.begin(), values.end()),
                                          values.size());
}

std::vector<int> iota(int n, int first = 0) {
  std::vector<int> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

// A host copy of a mask, indexable as (b, t, f).
struct HostMask {
  int batch, seq, features;
  std::vector<double> values;
  bool kept(int b, int t, int f) const { return values[(b * seq + t) * features + f] != 0.0; }
};

template <class Space>
HostMask make_mask(const NoiseMask<Space>& noise, int batch, int seq, int features,
                   std::uint64_t seed, std::uint32_t stream, const std::vector<int>& series,
                   const std::vector<int>& lengths) {
  Mask3<Space> mask("mask", batch, seq, features);
  noise.generate(Space(), seed, stream, indices_from<Space>(series), indices_from<Space>(lengths),
                 mask);
  return HostMask{batch, seq, features, host_values(mask)};
}

// Statistics of the chains (b, f) over their observed steps t < lengths[b].
//
// Mean run lengths: a series cuts the runs at its ends, so the plain average of the runs seen in
// L steps (steps in a state / runs of it) is not the mean of the geometric run length: it tends
// to the ratio of expectations r L / (r + (L - 1) r / lm) for masked runs and
// (1 - r) L / ((1 - r) + (L - 1) r / lm) for kept ones (a run starts at step 0, or after a switch
// into its state, which happens with probability r p_m = (1 - r) p_u per step): for r = 0.15,
// lm = 3, L = 256 that is 2.98 and 16.0 instead of 3 and 17. The run-length means themselves are
// estimated as for censored geometric durations, (steps in the state that have a successor) /
// (runs that ended there), which tends to 1 / p whatever the cuts.
struct ChainStatistics {
  double masked_fraction = 0, first_masked_fraction = 0;
  double mean_masked_run = 0, mean_kept_run = 0;              // censoring-corrected
  double plain_mean_masked_run = 0, plain_mean_kept_run = 0;  // steps / runs seen
};

ChainStatistics statistics(const HostMask& m, const std::vector<int>& lengths,
                           const std::vector<int>& features) {
  double masked = 0, observed = 0, first_masked = 0, chains = 0;
  double masked_runs_seen = 0, kept_runs_seen = 0;
  double masked_exposure = 0, masked_ended = 0, kept_exposure = 0, kept_ended = 0;
  for (int b = 0; b < m.batch; ++b)
    for (const int f : features) {
      chains += 1;
      for (int t = 0; t < lengths[b]; ++t) {
        const bool is_masked = !m.kept(b, t, f);
        observed += 1;
        masked += is_masked;
        if (t == 0) first_masked += is_masked;
        if (t == 0 || m.kept(b, t - 1, f) == is_masked)
          (is_masked ? masked_runs_seen : kept_runs_seen) += 1;
        if (t + 1 == lengths[b]) continue;
        const bool ends = m.kept(b, t + 1, f) == is_masked;
        (is_masked ? masked_exposure : kept_exposure) += 1;
        (is_masked ? masked_ended : kept_ended) += ends;
      }
    }
  ChainStatistics s;
  s.masked_fraction = masked / observed;
  s.first_masked_fraction = first_masked / chains;
  s.mean_masked_run = masked_exposure / masked_ended;
  s.mean_kept_run = kept_exposure / kept_ended;
  s.plain_mean_masked_run = masked / masked_runs_seen;
  s.plain_mean_kept_run = (observed - masked) / kept_runs_seen;
  return s;
}

// Steps of observed chains where variable f differs from variable 0 (concurrent: none), and
// where both are masked.
struct VariablePairs {
  int differ = 0;
  double both_masked_fraction = 0;
};

VariablePairs compare_variables(const HostMask& m, int f) {
  VariablePairs pairs;
  for (int b = 0; b < m.batch; ++b)
    for (int t = 0; t < m.seq; ++t) {
      pairs.differ += m.kept(b, t, f) != m.kept(b, t, 0);
      pairs.both_masked_fraction += !m.kept(b, t, f) && !m.kept(b, t, 0);
    }
  pairs.both_masked_fraction /= m.batch * m.seq;
  return pairs;
}

NoiseMaskOptions options(double r, double lm, MaskMode mode, MaskDistribution distribution,
                         std::vector<int> exclude = {}) {
  NoiseMaskOptions o;
  o.masking_ratio = r;
  o.mean_mask_length = lm;
  o.mode = mode;
  o.distribution = distribution;
  o.exclude_features = std::move(exclude);
  return o;
}

using DefaultSpace = Kokkos::DefaultExecutionSpace;

}  // namespace

TEST_CASE("Geometric masks: masked fraction r, masked runs lm, kept runs lm (1 - r) / r",
          "[masking][statistics]") {
  const int batch = 2000, seq = 256, features = 8;
  const auto series = iota(batch, 5000);
  const std::vector<int> full(batch, seq);
  for (const auto& [r, lm] : {std::pair{0.15, 3.0}, std::pair{0.5, 5.0}}) {
    for (const MaskMode mode : {MaskMode::Separate, MaskMode::Concurrent}) {
      const char* const mode_name = mode == MaskMode::Separate ? "separate" : "concurrent";
      CAPTURE(r, lm, mode_name);
      const NoiseMask<DefaultSpace> noise(DefaultSpace(),
                                          options(r, lm, mode, MaskDistribution::Geometric));
      const auto m = make_mask(noise, batch, seq, features, 42, 0, series, full);
      // Concurrent: one chain per series, repeated in every variable.
      const auto s =
          statistics(m, full, mode == MaskMode::Separate ? iota(features) : std::vector<int>{0});
      CHECK(std::abs(s.masked_fraction - r) <= 0.01);
      // The first step alone: within 4 standard deviations of r over the chains.
      const double chains = mode == MaskMode::Separate ? batch * features : batch;
      CHECK(std::abs(s.first_masked_fraction - r) <= 4 * std::sqrt(r * (1 - r) / chains));
      CHECK(std::abs(s.mean_masked_run / lm - 1) <= 0.05);
      CHECK(std::abs(s.mean_kept_run / (lm * (1 - r) / r) - 1) <= 0.05);
      const double switches = (seq - 1) * r / lm;  // expected switches into a state per chain
      CHECK(std::abs(s.plain_mean_masked_run / (r * seq / (r + switches)) - 1) <= 0.02);
      CHECK(std::abs(s.plain_mean_kept_run / ((1 - r) * seq / ((1 - r) + switches)) - 1) <= 0.02);
      // Concurrent: every variable repeats the shared chain. Separate: independent chains, so
      // two variables are both masked at a step with probability r^2.
      for (int f = 1; f < features; ++f) {
        const auto pairs = compare_variables(m, f);
        if (mode == MaskMode::Concurrent)
          CHECK(pairs.differ == 0);
        else
          CHECK(std::abs(pairs.both_masked_fraction - r * r) <= 0.005);
      }
    }
  }
}

TEST_CASE("Bernoulli masks: independent steps masked with probability r", "[masking][statistics]") {
  const int batch = 2000, seq = 256, features = 8;
  const auto series = iota(batch);
  const std::vector<int> full(batch, seq);
  const double r = 0.15;
  for (const MaskMode mode : {MaskMode::Separate, MaskMode::Concurrent}) {
    const char* const mode_name = mode == MaskMode::Separate ? "separate" : "concurrent";
    CAPTURE(mode_name);
    const NoiseMask<DefaultSpace> noise(DefaultSpace(),
                                        options(r, 3.0, mode, MaskDistribution::Bernoulli));
    const auto m = make_mask(noise, batch, seq, features, 7, 3, series, full);
    const auto s =
        statistics(m, full, mode == MaskMode::Separate ? iota(features) : std::vector<int>{0});
    CHECK(std::abs(s.masked_fraction - r) <= 0.01);
    // Independent steps: runs are geometric with means 1 / (1 - r) and 1 / r.
    CHECK(std::abs(s.mean_masked_run * (1 - r) - 1) <= 0.05);
    CHECK(std::abs(s.mean_kept_run * r - 1) <= 0.05);
    for (int f = 1; f < features; ++f) {
      const auto pairs = compare_variables(m, f);
      if (mode == MaskMode::Concurrent)
        CHECK(pairs.differ == 0);
      else
        CHECK(std::abs(pairs.both_masked_fraction - r * r) <= 0.005);
    }
  }
}

TEST_CASE("Excluded features are never masked, and padding is kept", "[masking]") {
  const int batch = 300, seq = 40, features = 5;
  std::vector<int> lengths(batch);
  for (int b = 0; b < batch; ++b)
    lengths[b] = (b * 7) % (seq + 1);  // 0 .. seq
  const std::vector<int> excluded = {1, 4};
  for (const auto distribution : {MaskDistribution::Geometric, MaskDistribution::Bernoulli})
    for (const MaskMode mode : {MaskMode::Separate, MaskMode::Concurrent}) {
      const NoiseMask<DefaultSpace> noise(DefaultSpace(),
                                          options(0.4, 2.0, mode, distribution, excluded));
      const auto m = make_mask(noise, batch, seq, features, 1, 0, iota(batch), lengths);
      int masked = 0, masked_where_never = 0;
      for (int b = 0; b < batch; ++b)
        for (int t = 0; t < seq; ++t)
          for (int f = 0; f < features; ++f) {
            const bool never = f == 1 || f == 4 || t >= lengths[b];
            masked += !m.kept(b, t, f);
            masked_where_never += never && !m.kept(b, t, f);
          }
      CHECK(masked > 0);
      CHECK(masked_where_never == 0);
    }
}

TEST_CASE("A mask is a pure function of (seed, series, variable, stream, step)",
          "[masking][determinism]") {
  const int batch = 64, seq = 50, features = 3;
  const auto series = iota(batch, 100);
  const std::vector<int> full(batch, seq);
  for (const auto distribution : {MaskDistribution::Geometric, MaskDistribution::Bernoulli})
    for (const MaskMode mode : {MaskMode::Separate, MaskMode::Concurrent}) {
      const auto o = options(0.3, 4.0, mode, distribution, {2});
      std::vector<HostMask> per_backend;
      backends::for_each_space([&](auto space) {
        using Space = decltype(space);
        CAPTURE(backends::space_name<Space>());
        const NoiseMask<Space> noise(Space(), o);
        const auto m = make_mask(noise, batch, seq, features, 9, 4, series, full);
        CHECK(bitwise_equal(m.values,
                            make_mask(noise, batch, seq, features, 9, 4, series, full).values));
        per_backend.push_back(m);
        // The allocation-free steady state: a second call allocates nothing.
        Mask3<Space> mask("mask", batch, seq, features);
        const auto ids = indices_from<Space>(series);
        const auto lengths = indices_from<Space>(full);
        noise.generate(Space(), 9, 4, ids, lengths, mask);
        Space().fence();
        const AllocationCounter counter;
        noise.generate(Space(), 9, 5, ids, lengths, mask);
        Space().fence();
        CHECK(counter.allocations() == 0);
      });
      for (const auto& m : per_backend)
        CHECK(bitwise_equal(m.values, per_backend[0].values));

      const NoiseMask<DefaultSpace> noise(DefaultSpace(), o);
      const auto reference = make_mask(noise, batch, seq, features, 9, 4, series, full);
      // Another stream (epoch) or seed draws another mask.
      CHECK(!bitwise_equal(reference.values,
                           make_mask(noise, batch, seq, features, 9, 5, series, full).values));
      CHECK(!bitwise_equal(reference.values,
                           make_mask(noise, batch, seq, features, 10, 4, series, full).values));

      // The same series in another row of another batch, and with a shorter length, keeps its
      // mask on its observed steps.
      const std::vector<int> picked = {series[17], series[3], series[40]};
      const std::vector<int> lengths = {seq, 20, 1};
      const auto other = make_mask(noise, 3, seq, features, 9, 4, picked, lengths);
      const int rows[] = {17, 3, 40};
      int differ = 0;
      for (int i = 0; i < 3; ++i)
        for (int t = 0; t < seq; ++t)
          for (int f = 0; f < features; ++f)
            differ +=
                other.kept(i, t, f) != (t < lengths[i] ? reference.kept(rows[i], t, f) : true);
      CHECK(differ == 0);
    }
}

TEMPLATE_LIST_TEST_CASE("The forecasting mask hides exactly the last steps of each series",
                        "[masking][forecast]", backends::EnabledSpaces) {
  using Space = TestType;
  const int batch = 4, seq = 10, features = 3, horizon = 3;
  const std::vector<int> lengths = {10, 6, 2, 0};
  const NoiseMask<Space> noise(
      Space(), options(0.15, 3.0, MaskMode::Separate, MaskDistribution::Geometric, {1}));
  Mask3<Space> mask("mask", batch, seq, features);
  noise.forecast(Space(), horizon, indices_from<Space>(lengths), mask);
  const HostMask m{batch, seq, features, host_values(mask)};
  // Row 0: steps 7-9 masked; row 1: 3-5; row 2 (shorter than the horizon): 0-1; row 3: none.
  const std::vector<std::vector<int>> masked_steps = {{7, 8, 9}, {3, 4, 5}, {0, 1}, {}};
  for (int b = 0; b < batch; ++b)
    for (int t = 0; t < seq; ++t)
      for (int f = 0; f < features; ++f) {
        CAPTURE(b, t, f);
        const bool in_horizon = std::count(masked_steps[b].begin(), masked_steps[b].end(), t) > 0;
        CHECK(m.kept(b, t, f) == (f == 1 || !in_horizon));
      }
  noise.forecast(Space(), 0, indices_from<Space>(lengths), mask);
  CHECK(host_values(mask) == std::vector<double>(batch * seq * features, 1.0));
}

TEMPLATE_LIST_TEST_CASE(
    "apply_noise_mask zeroes masked, missing and padded inputs and marks targets", "[masking]",
    backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // (2, 3, 2); series 1 has length 2.
  const std::vector<double> x = {1, 2, nan, 4, 5, 6, 7, 8, 9, nan, 11, 12};
  const std::vector<double> keep = {1, 0, 0, 1, 0, 1, 0, 1, 1, 0, 0, 0};
  Tensor3<float, M> x_masked("x_masked", 2, 3, 2);
  Mask3<Space> target("target", 2, 3, 2);
  apply_noise_mask<float>(Space(), device_from<float, Space>(x, 2, 3, 2),
                          device_from<std::uint8_t, Space>(keep, 2, 3, 2),
                          indices_from<Space>({3, 2}), x_masked, target);
  CHECK(host_values(x_masked) == std::vector<double>{1, 0, 0, 4, 0, 6, 0, 8, 9, 0, 0, 0});
  CHECK(host_values(target) == std::vector<double>{0, 1, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0});

  CHECK_THROWS_WITH(apply_noise_mask<float>(Space(), device_from<float, Space>(x, 2, 3, 2),
                                            device_from<std::uint8_t, Space>(keep, 2, 3, 2),
                                            indices_from<Space>({3, 4}), x_masked, target),
                    "kformer::apply_noise_mask: lengths(1) = 4 is outside [0, 3]");
  CHECK_THROWS_WITH(apply_noise_mask<float>(Space(), device_from<float, Space>(x, 2, 3, 2),
                                            Mask3<Space>("m", 2, 3, 1), indices_from<Space>({3, 2}),
                                            x_masked, target),
                    "kformer::apply_noise_mask: mask has shape (2, 3, 1), expected (2, 3, 2)");
}

TEMPLATE_LIST_TEST_CASE("Bad options and arguments throw before the mask is written",
                        "[masking][errors]", backends::EnabledSpaces) {
  using Space = TestType;
  const auto geometric = [](double r, double lm) {
    return options(r, lm, MaskMode::Separate, MaskDistribution::Geometric);
  };
  CHECK_THROWS_WITH(NoiseMask<Space>(Space(), geometric(0.8, 3.0)),
                    "kformer::NoiseMask: masking_ratio must be in [0, lm / (1 + lm)] = [0, 0.75] "
                    "for geometric masks of mean length 3, got 0.8");
  CHECK_THROWS_WITH(NoiseMask<Space>(Space(), geometric(0.15, 0.5)),
                    "kformer::NoiseMask: mean_mask_length must be at least 1, got 0.5");
  CHECK_THROWS_WITH(
      NoiseMask<Space>(Space(), options(1.5, 3, MaskMode::Separate, MaskDistribution::Bernoulli)),
      "kformer::NoiseMask: masking_ratio must be in [0, 1], got 1.5");
  CHECK_THROWS_WITH(
      NoiseMask<Space>(Space(),
                       options(0.15, 3, MaskMode::Separate, MaskDistribution::Geometric, {2, -1})),
      "kformer::NoiseMask: exclude_features contains -1, expected feature indices >= 0");

  const NoiseMask<Space> noise(
      Space(), options(0.15, 3, MaskMode::Separate, MaskDistribution::Geometric, {5}));
  Mask3<Space> mask("mask", 2, 4, 6);
  Kokkos::deep_copy(mask, 7);
  const auto ids = indices_from<Space>({0, 1});
  CHECK_THROWS_WITH(noise.generate(Space(), 1, 0, ids, indices_from<Space>({4, 5}), mask),
                    "kformer::NoiseMask::generate: lengths(1) = 5 is outside [0, 4]");
  CHECK_THROWS_WITH(noise.generate(Space(), 1, 0, ids, indices_from<Space>({-2, 3}), mask),
                    "kformer::NoiseMask::generate: lengths(0) = -2 is outside [0, 4]");
  CHECK_THROWS_WITH(
      noise.generate(Space(), 1, 0, indices_from<Space>({0}), indices_from<Space>({4, 4}), mask),
      "kformer::NoiseMask::generate: series_ids has shape (1), expected (2)");
  CHECK_THROWS_WITH(noise.forecast(Space(), 2, indices_from<Space>({4}), mask),
                    "kformer::NoiseMask::forecast: lengths has shape (1), expected (2)");
  CHECK_THROWS_WITH(noise.forecast(Space(), -1, indices_from<Space>({4, 4}), mask),
                    "kformer::NoiseMask::forecast: horizon must be at least 0, got -1");
  Mask3<Space> narrow("narrow", 2, 4, 5);
  CHECK_THROWS_WITH(noise.generate(Space(), 1, 0, ids, indices_from<Space>({4, 4}), narrow),
                    "kformer::NoiseMask::generate: exclude_features names feature 5 but mask has "
                    "shape (2, 4, 5) (5 features)");
  CHECK(host_values(mask) == std::vector<double>(48, 7.0));
}
