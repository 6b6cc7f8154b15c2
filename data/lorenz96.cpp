#include "lorenz96.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "../core/error.hpp"
#include "draws.hpp"

namespace kformer::data {
namespace {

class Lorenz96 {
 public:
  Lorenz96(std::int64_t k, double forcing, bool mirrored)
      : k_(k), forcing_(forcing), mirrored_(mirrored), k1_(k), k2_(k), k3_(k), k4_(k), tmp_(k) {}

  // One classical RK4 step of size h.
  void step(std::vector<double>& x, double h) {
    rhs(x, k1_);
    for (std::int64_t i = 0; i < k_; ++i)
      tmp_[i] = x[i] + 0.5 * h * k1_[i];
    rhs(tmp_, k2_);
    for (std::int64_t i = 0; i < k_; ++i)
      tmp_[i] = x[i] + 0.5 * h * k2_[i];
    rhs(tmp_, k3_);
    for (std::int64_t i = 0; i < k_; ++i)
      tmp_[i] = x[i] + h * k3_[i];
    rhs(tmp_, k4_);
    for (std::int64_t i = 0; i < k_; ++i)
      x[i] += h / 6.0 * (k1_[i] + 2.0 * k2_[i] + 2.0 * k3_[i] + k4_[i]);
  }

 private:
  void rhs(const std::vector<double>& x, std::vector<double>& dx) const {
    const auto at = [&](std::int64_t i) { return x[static_cast<std::size_t>((i + k_) % k_)]; };
    for (std::int64_t i = 0; i < k_; ++i) {
      const double advection =
          mirrored_ ? (at(i - 1) - at(i + 2)) * at(i + 1) : (at(i + 1) - at(i - 2)) * at(i - 1);
      dx[static_cast<std::size_t>(i)] = advection - x[static_cast<std::size_t>(i)] + forcing_;
    }
  }

  std::int64_t k_;
  double forcing_;
  bool mirrored_;
  std::vector<double> k1_, k2_, k3_, k4_, tmp_;
};

void check(const Lorenz96Options& o, std::int64_t n_series, const char* where) {
  const double ratio = o.sample_interval / o.rk4_step;
  const bool ok = n_series >= 0 && o.n_variables >= 4 && o.max_len >= 1 && o.rk4_step > 0 &&
                  o.sample_interval > 0 && std::abs(ratio - std::round(ratio)) < 1e-9 &&
                  o.spin_up >= 0 && o.initial_spread >= 0 && o.noise >= 0 &&
                  o.missing_fraction >= 0 && o.missing_fraction < 1 && o.min_length_fraction > 0 &&
                  o.min_length_fraction <= 1 && o.periodic_forcing_min <= o.periodic_forcing_max &&
                  o.chaotic_forcing_min <= o.chaotic_forcing_max;
  if (!ok)
    fail(where,
         "options out of range: need n_series >= 0, n_variables >= 4, max_len >= 1, "
         "sample_interval a positive multiple of rk4_step, fractions in [0, 1), "
         "spread, noise and spin-up >= 0, and ordered forcing ranges");
}

// Fills series `s` of `set` from a trajectory with forcing F and the given coupling, played
// backwards in time when `backward` (the same states in the reverse order).
void simulate(SeriesSet& set, std::int64_t s, double forcing, bool mirrored, bool backward,
              Draws& draws, const Lorenz96Options& o) {
  const std::int64_t k = o.n_variables;
  Lorenz96 system(k, forcing, mirrored);
  std::vector<double> x(static_cast<std::size_t>(k));
  for (auto& xi : x)
    xi = forcing + o.initial_spread * draws.normal();
  const auto spin_up_steps = static_cast<std::int64_t>(std::llround(o.spin_up / o.rk4_step));
  for (std::int64_t n = 0; n < spin_up_steps; ++n)
    system.step(x, o.rk4_step);

  const auto min_length = static_cast<std::int64_t>(
      std::ceil(o.min_length_fraction * static_cast<double>(o.max_len) - 1e-9));
  const std::int64_t length = draws.integer(min_length, o.max_len);
  const auto substeps = static_cast<std::int64_t>(std::llround(o.sample_interval / o.rk4_step));
  std::vector<double> states(static_cast<std::size_t>(length * k));
  for (std::int64_t t = 0; t < length; ++t) {
    if (t > 0)
      for (std::int64_t n = 0; n < substeps; ++n)
        system.step(x, o.rk4_step);
    std::copy(x.begin(), x.end(), states.begin() + t * k);
  }
  for (std::int64_t t = 0; t < length; ++t) {
    const double* state = states.data() + (backward ? length - 1 - t : t) * k;
    for (std::int64_t f = 0; f < k; ++f) {
      const double observed = state[f] + o.noise * draws.normal();
      const bool missing = draws.uniform() < o.missing_fraction;
      set.value(s, t, f) =
          missing ? std::numeric_limits<float>::quiet_NaN() : static_cast<float>(observed);
    }
  }
  set.lengths[static_cast<std::size_t>(s)] = static_cast<std::int32_t>(length);
}

}  // namespace

SeriesSet lorenz96_classification(std::int64_t n_series, std::uint64_t seed,
                                  const Lorenz96Options& options) {
  check(options, n_series, "kformer::data::lorenz96_classification");
  SeriesSet set;
  set.reset(n_series, options.max_len, options.n_variables);
  set.class_names = {"periodic_forward_in_time", "periodic_backward_in_time",
                     "chaotic_forward_in_time", "chaotic_backward_in_time"};
  set.labels.resize(static_cast<std::size_t>(n_series));
  for (std::int64_t s = 0; s < n_series; ++s) {
    const auto label = static_cast<std::int32_t>(s % 4);
    const bool chaotic = label >= 2, backward = label % 2 == 1;
    Draws draws(derive(seed, static_cast<std::uint64_t>(s)));
    const double forcing =
        chaotic ? draws.uniform(options.chaotic_forcing_min, options.chaotic_forcing_max)
                : draws.uniform(options.periodic_forcing_min, options.periodic_forcing_max);
    simulate(set, s, forcing, /*mirrored=*/false, backward, draws, options);
    set.labels[static_cast<std::size_t>(s)] = label;
  }
  return set;
}

SeriesSet lorenz96_regression(std::int64_t n_series, std::uint64_t seed,
                              const Lorenz96Options& options) {
  check(options, n_series, "kformer::data::lorenz96_regression");
  SeriesSet set;
  set.reset(n_series, options.max_len, options.n_variables);
  set.n_targets = 1;
  set.targets.resize(static_cast<std::size_t>(n_series));
  for (std::int64_t s = 0; s < n_series; ++s) {
    Draws draws(derive(seed, static_cast<std::uint64_t>(s)));
    const double forcing = draws.uniform(options.periodic_forcing_min, options.chaotic_forcing_max);
    const bool mirrored = draws.uniform() < 0.5;
    simulate(set, s, forcing, mirrored, /*backward=*/false, draws, options);
    set.targets[static_cast<std::size_t>(s)] = static_cast<float>(forcing);
  }
  return set;
}

DefaultDatasets generate_default_datasets(std::uint64_t seed) {
  DefaultDatasets sets;
  sets.classification_train = lorenz96_classification(600, derive(seed, 1000));
  sets.classification_test = lorenz96_classification(200, derive(seed, 1001));
  sets.regression_train = lorenz96_regression(600, derive(seed, 1002));
  sets.regression_test = lorenz96_regression(200, derive(seed, 1003));
  return sets;
}

SeriesSet default_pool_dataset(std::int64_t n_series, std::uint64_t seed) {
  return lorenz96_classification(n_series, derive(seed, 1004));
}

}  // namespace kformer::data
