#include "cyclotron.hpp"

#include <cmath>
#include <complex>
#include <limits>

#include "../core/error.hpp"
#include "draws.hpp"

namespace kformer::data {
namespace {

using Complex = std::complex<double>;

// One RK4 step of dw/dt = u, du/dt = -i s Omega u.
void rk4(double sign, double omega, double h, Complex& w, Complex& u) {
  const Complex rotation(0.0, -sign * omega);
  const Complex u1 = rotation * u;
  const Complex u2 = rotation * (u + h / 2 * u1);
  const Complex u3 = rotation * (u + h / 2 * u2);
  const Complex u4 = rotation * (u + h * u3);
  w += h / 6 * (u + 2.0 * (u + h / 2 * u1) + 2.0 * (u + h / 2 * u2) + (u + h * u3));
  u += h / 6 * (u1 + 2.0 * u2 + 2.0 * u3 + u4);
}

void check(const CyclotronOptions& o, std::int64_t n_series, const char* where) {
  if (n_series < 1) fail(where, "n_series must be at least 1, got ", n_series);
  if (o.max_len < 2) fail(where, "max_len must be at least 2, got ", o.max_len);
  if (!(o.heavy_omega_min > 0 && o.heavy_omega_min <= o.heavy_omega_max &&
        o.heavy_omega_max <= o.light_omega_min && o.light_omega_min <= o.light_omega_max &&
        o.light_omega_max < 3.14159))
    fail(where,
         "need 0 < heavy_omega_min <= heavy_omega_max <= light_omega_min <= light_omega_max < pi");
  if (!(o.radius_min > 0 && o.radius_min <= o.radius_max))
    fail(where, "need 0 < radius_min <= radius_max, got [", o.radius_min, ", ", o.radius_max, "]");
  if (!(o.field_fluctuation >= 0 && o.field_fluctuation < 1))
    fail(where, "field_fluctuation must be in [0, 1), got ", o.field_fluctuation);
  if (!(o.noise >= 0)) fail(where, "noise must be non-negative, got ", o.noise);
  if (!(o.missing_fraction >= 0 && o.missing_fraction < 1))
    fail(where, "missing_fraction must be in [0, 1), got ", o.missing_fraction);
  if (!(o.min_length_fraction > 0 && o.min_length_fraction <= 1))
    fail(where, "min_length_fraction must be in (0, 1], got ", o.min_length_fraction);
}

constexpr int kFeatures = 5;

// Simulates and observes series s of `set` for the given charge sign and mean frequency.
void simulate(SeriesSet& set, std::int64_t s, double sign, double omega, const CyclotronOptions& o,
              Draws& draws) {
  const double two_pi = 6.283185307179586;
  // Orbit radius independent of the class: |u| = radius * Omega.
  Complex u =
      std::polar(draws.uniform(o.radius_min, o.radius_max) * omega, draws.uniform(0, two_pi));
  Complex w(draws.uniform(-1, 1), draws.uniform(-1, 1));
  const double z0 = draws.uniform(-1, 1), vz = draws.uniform(-0.02, 0.02);
  const double min_length = std::ceil(o.min_length_fraction * static_cast<double>(o.max_len));
  const std::int64_t length = draws.integer(static_cast<std::int64_t>(min_length), o.max_len);
  set.lengths[s] = static_cast<std::int32_t>(length);
  const double c1 = std::cos(two_pi / 6), s1 = std::sin(two_pi / 6);
  const double c2 = std::cos(two_pi / 3), s2 = std::sin(two_pi / 3);
  constexpr int substeps = 8;
  for (std::int64_t step = 0; step < length; ++step) {
    const double x = w.real(), y = w.imag();
    const double observed[kFeatures] = {x, y, z0 + vz * step, x * c1 + y * s1, x * c2 + y * s2};
    for (int f = 0; f < kFeatures; ++f) {
      const double noisy = observed[f] + o.noise * draws.normal();
      set.value(s, step, f) = draws.uniform() < o.missing_fraction
                                  ? std::numeric_limits<float>::quiet_NaN()
                                  : static_cast<float>(noisy);
    }
    // The field fluctuates from one observation interval to the next.
    const double omega_now = omega * std::max(0.2, 1.0 + o.field_fluctuation * draws.normal());
    for (int k = 0; k < substeps; ++k)
      rk4(sign, omega_now, 1.0 / substeps, w, u);
  }
}

}  // namespace

SeriesSet cyclotron_classification(std::int64_t n_series, std::uint64_t seed,
                                   const CyclotronOptions& o) {
  check(o, n_series, "kformer::data::cyclotron_classification");
  SeriesSet set;
  set.reset(n_series, o.max_len, kFeatures);
  set.class_names = {"heavy_positive", "heavy_negative", "light_positive", "light_negative"};
  set.labels.resize(static_cast<std::size_t>(n_series));
  for (std::int64_t s = 0; s < n_series; ++s) {
    Draws draws(derive(seed, static_cast<std::uint64_t>(s)));
    const int label = static_cast<int>(s % 4);
    set.labels[s] = label;
    const double omega = label < 2 ? draws.uniform(o.heavy_omega_min, o.heavy_omega_max)
                                   : draws.uniform(o.light_omega_min, o.light_omega_max);
    simulate(set, s, label % 2 == 0 ? 1.0 : -1.0, omega, o, draws);
  }
  return set;
}

SeriesSet cyclotron_regression(std::int64_t n_series, std::uint64_t seed,
                               const CyclotronOptions& o) {
  check(o, n_series, "kformer::data::cyclotron_regression");
  SeriesSet set;
  set.reset(n_series, o.max_len, kFeatures);
  set.n_targets = 1;
  set.targets.resize(static_cast<std::size_t>(n_series));
  for (std::int64_t s = 0; s < n_series; ++s) {
    Draws draws(derive(seed, static_cast<std::uint64_t>(s)));
    const double omega = draws.uniform(o.heavy_omega_min, o.light_omega_max);
    set.targets[s] = static_cast<float>(omega);
    simulate(set, s, draws.uniform() < 0.5 ? 1.0 : -1.0, omega, o, draws);
  }
  return set;
}

}  // namespace kformer::data
