// The embedded default data: multivariate series generated from the Lorenz-96 system, a ring of
// K variables with advection, damping and forcing F (Lorenz 1996),
//
//   forward coupling:   dx_k/dt = (x_{k+1} - x_{k-2}) x_{k-1} - x_k + F
//   mirrored coupling:  dx_k/dt = (x_{k-1} - x_{k+2}) x_{k+1} - x_k + F   (k -> -k)
//
// integrated with classical RK4. At K = 8 the system settles on periodic travelling waves for
// F in about [1, 3.5] (largest Lyapunov exponent ~0) and is chaotic for F >= 6 (exponent ~1-2.3).
// The mirrored system is the forward one with the ring read backwards, so every variable has the
// same distribution in both: the coupling shows only in how the variables move together (the
// waves run the other way round the ring), not in any per-feature mean or variance.
//
// Classification: four classes, regime x direction of time, in this order:
// periodic_forward_in_time, periodic_backward_in_time, chaotic_forward_in_time,
// chaotic_backward_in_time (forward coupling; F uniform in the regime's range). A series played
// backwards visits the same states as one played forwards, so each step, and the set of steps,
// has the same distribution in both directions: only the order of the steps tells them apart,
// which is what the positional encoding gives a transformer. Per-feature means tell the regime
// (they grow with F), so a nearest-centroid classifier on them stays near 50 %; the waves'
// direction round the ring (from consecutive steps) tells the direction of time.
// Regression: F uniform over both ranges and the gap between them, either coupling, played
// forwards; the target is F.
//
// Each series: x_k(0) = F + initial_spread * N(0, 1); spin_up time units integrated and dropped
// (the series starts on the attractor at a random phase); then one observation every
// sample_interval, with Gaussian noise, each value missing (NaN) with probability
// missing_fraction, and a length drawn uniformly from [ceil(min_length_fraction * max_len),
// max_len] (padding after it). Series i of a set depends only on the set's seed and i, through
// std::mt19937_64 and distributions written here (the standard ones differ between libraries).
// The data is identical for a given build and machine; the chaotic series amplify last-bit
// differences, so another compiler or CPU (FMA contraction) gives statistically the same data
// but not the same bits.
#pragma once

#include <cstdint>

#include "series_set.hpp"

namespace kformer::data {

struct Lorenz96Options {
  std::int64_t n_variables = 8;   // K, the features
  std::int64_t max_len = 96;      // observed steps of the longest series
  double sample_interval = 0.15;  // model time between observations
  double rk4_step = 0.025;        // integration step; sample_interval is a multiple of it
  double spin_up = 20.0;          // model time integrated before the first observation
  double initial_spread = 0.5;
  double noise = 0.1;  // standard deviation of the observation noise
  double missing_fraction = 0.03;
  double min_length_fraction = 0.6;
  double periodic_forcing_min = 1.5, periodic_forcing_max = 3.5;
  double chaotic_forcing_min = 6.0, chaotic_forcing_max = 10.0;
};

// n_series series, classes balanced (series i has class i % 4). Throws kformer::Error for
// options outside their ranges.
SeriesSet lorenz96_classification(std::int64_t n_series, std::uint64_t seed,
                                  const Lorenz96Options& options = {});
// n_series series with F uniform in [periodic_forcing_min, chaotic_forcing_max] as the target.
SeriesSet lorenz96_regression(std::int64_t n_series, std::uint64_t seed,
                              const Lorenz96Options& options = {});

struct DefaultDatasets {
  SeriesSet classification_train, classification_test;  // 600 and 200 series
  SeriesSet regression_train, regression_test;          // 600 and 200 series
};

// The default data of the kformer program: the four sets above with the default options
// (8 features, up to 96 steps), each from its own seed derived from `seed`. Sized so that a
// small TST (d_model 64, 3 layers) trains on it in about a minute on 2 cores.
DefaultDatasets generate_default_datasets(std::uint64_t seed = 2021);

// The default job's pool: n_series classification series generated as the default sets' (the
// four classes in turn), from a seed of their own derived from `seed`, so that none of them is one
// of the default sets' series.
SeriesSet default_pool_dataset(std::int64_t n_series, std::uint64_t seed = 2021);

}  // namespace kformer::data
