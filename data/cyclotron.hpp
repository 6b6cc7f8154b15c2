// Generated classification data where the order of the steps matters: charged particles gyrating
// in a uniform magnetic field B along z (a cyclotron), observed through position sensors.
//
//   du/dt = -i s Omega(t) u,   dw/dt = u,   u = v_x + i v_y,  w = x + i y,   z = z_0 + v_z t
//
// s = +1 or -1 is the sign of the charge, which decides the sense of rotation, and
// Omega = |q| B / m the gyration frequency, which tells light from heavy particles. The field
// fluctuates: Omega(t) = Omega (1 + 0.25 N(0, 1)) anew in every observation interval. Integrated
// with RK4, 8 steps per observation interval; the initial orbit radius |u| / Omega is drawn
// independently of the class.
//
// Features (5): x, y, z and two pick-up coils p1 = x cos 60deg + y sin 60deg and
// p2 = x cos 120deg + y sin 120deg. A single step says nothing about the class (a point on an
// orbit of random phase and radius), and the fluctuating field scrambles the regular angular
// pattern a steady orbit would leave in the set of points. Sense and frequency show in how
// consecutive steps move, which a transformer sees through its positional encoding; its encoder
// without one is permutation-equivariant, and only the flattening output layer knows positions.
//
// Classes (balanced, series i has class i % 4): heavy_positive, heavy_negative, light_positive,
// light_negative (heavy: Omega in [0.30, 0.42], light: [0.58, 0.70] radians per observation).
// Regression target: Omega, uniform over [0.30, 0.70]. Noise, missing values (NaN) and unequal
// lengths as in the Lorenz-96 sets. Series i depends only on the set's seed and i.
#pragma once

#include <cstdint>

#include "series_set.hpp"

namespace kformer::data {

struct CyclotronOptions {
  std::int64_t max_len = 64;
  double heavy_omega_min = 0.30, heavy_omega_max = 0.42;  // radians per observation interval
  double light_omega_min = 0.58, light_omega_max = 0.70;
  double radius_min = 0.5, radius_max = 1.5;  // initial orbit radius |u| / Omega
  double field_fluctuation = 0.25;  // relative standard deviation of Omega per observation interval
  double noise = 0.15;              // standard deviation of the sensor noise
  double missing_fraction = 0.03;
  double min_length_fraction = 0.7;
};

// n_series series of the four classes. Throws kformer::Error for options outside their ranges.
SeriesSet cyclotron_classification(std::int64_t n_series, std::uint64_t seed,
                                   const CyclotronOptions& options = {});
// n_series series (either charge) with Omega uniform over [heavy_omega_min, light_omega_max] as
// the target.
SeriesSet cyclotron_regression(std::int64_t n_series, std::uint64_t seed,
                               const CyclotronOptions& options = {});

}  // namespace kformer::data
