// Central finite-difference gradient checks for layers, in double precision.
//
// The scalar checked is loss = sum(w * y) for fixed random weights w, so dL/dy = w. The layer's
// backward pass (run once with dy = w after zero_grad) must match finite differences of the loss
// with respect to every input element and every parameter element. Tensors larger than
// kMaxCheckedCoordinates are checked on a fixed random subset of that many elements plus
// kCheckedDirections random directions over all of them (a directional derivative sees an error
// in any element), which keeps the long-sequence cases affordable in unoptimised builds.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "catch.hpp"

#include <Kokkos_Core.hpp>

#include "test_support.hpp"

namespace kformer::testing {

struct GradcheckResult {
  double input_error = 0;                                        // max relative error over dx
  std::vector<std::pair<std::string, double>> parameter_errors;  // per parameter
};

// Host copies of every parameter of a layer, in visit order.
template <class Layer>
std::vector<std::vector<double>> parameter_values(Layer& layer) {
  std::vector<std::vector<double>> out;
  layer.visit_parameters([&](const std::string&, auto& p) { out.push_back(host_values(p.value)); });
  return out;
}

template <class Layer>
void set_parameter(Layer& layer, std::size_t index, const std::vector<double>& values) {
  std::size_t i = 0;
  layer.visit_parameters([&](const std::string&, auto& p) {
    if (i++ != index) return;
    auto h = Kokkos::create_mirror_view(p.value);
    for (std::size_t k = 0; k < values.size(); ++k)
      h(k) = values[k];
    Kokkos::deep_copy(p.value, h);
  });
}

// forward(x) returns the layer's output for host input x (with the layer's current parameters);
// backward(x, dy) runs forward and backward and returns dx (parameter gradients accumulate into
// the layer, zeroed here first).
inline constexpr std::size_t kMaxCheckedCoordinates = 128;
inline constexpr int kCheckedDirections = 2;

// Max relative error of the analytic gradient g of f at x against central finite differences:
// every element for small x, else the sampled elements and the random directions above.
inline double gradient_error(const std::function<double(const std::vector<double>&)>& f,
                             const std::vector<double>& x, const std::vector<double>& g, double h,
                             std::uint64_t seed) {
  if (x.size() <= kMaxCheckedCoordinates) return max_rel_diff(g, numeric_gradient(f, x, h), 1e-12);
  std::mt19937_64 rng(seed);
  std::vector<std::size_t> order(x.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::shuffle(order.begin(), order.end(), rng);
  order.resize(kMaxCheckedCoordinates);
  std::vector<double> numeric, analytic, probe = x;
  for (const std::size_t i : order) {
    probe[i] = x[i] + h;
    const double fp = f(probe);
    probe[i] = x[i] - h;
    const double fm = f(probe);
    probe[i] = x[i];
    numeric.push_back((fp - fm) / (2 * h));
    analytic.push_back(g[i]);
  }
  double error = max_rel_diff(analytic, numeric, 1e-12);
  double g_norm = 0;
  for (const double gi : g)
    g_norm += gi * gi;
  g_norm = std::sqrt(g_norm);
  std::bernoulli_distribution sign;
  for (int d = 0; d < kCheckedDirections; ++d) {
    std::vector<double> v(x.size()), plus(x), minus(x);
    double along = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      v[i] = sign(rng) ? 1.0 : -1.0;
      plus[i] += h * v[i];
      minus[i] -= h * v[i];
      along += g[i] * v[i];
    }
    const double numeric_along = (f(plus) - f(minus)) / (2 * h);
    error = std::max(error, std::abs(along - numeric_along) /
                                std::max({std::abs(numeric_along), g_norm, 1e-12}));
  }
  return error;
}

template <class Space, class Layer>
GradcheckResult gradcheck(
    Layer& layer, const std::vector<double>& x0,
    const std::function<std::vector<double>(const std::vector<double>&)>& forward,
    const std::function<std::vector<double>(const std::vector<double>&,
                                            const std::vector<double>&)>& backward,
    std::uint64_t seed, double h = 1e-6) {
  const std::vector<double> y0 = forward(x0);
  const std::vector<double> w = random_values(y0.size(), seed);
  const auto loss = [&](const std::vector<double>& x) { return dot(forward(x), w); };

  layer.zero_grad(Space());
  GradcheckResult result;
  const std::vector<double> dx = backward(x0, w);
  std::vector<std::vector<double>> grads;
  std::vector<std::string> names;
  layer.visit_parameters([&](const std::string& name, auto& p) {
    names.push_back(name);
    grads.push_back(host_values(p.grad));
  });

  if (!dx.empty()) result.input_error = gradient_error(loss, x0, dx, h, seed + 1);
  const auto values = parameter_values(layer);
  for (std::size_t i = 0; i < values.size(); ++i) {
    const double error = gradient_error(
        [&](const std::vector<double>& v) {
          set_parameter(layer, i, v);
          return loss(x0);
        },
        values[i], grads[i], h, seed + 2 + i);
    set_parameter(layer, i, values[i]);
    result.parameter_errors.emplace_back(names[i], error);
  }
  return result;
}

// CHECKs every error of a result against the tolerance, naming the parameter on failure.
inline void check_gradients(const GradcheckResult& r, double tolerance = 1e-6) {
  CHECK(r.input_error <= tolerance);
  for (const auto& [name, error] : r.parameter_errors) {
    CAPTURE(name);
    CHECK(error <= tolerance);
  }
}

}  // namespace kformer::testing
