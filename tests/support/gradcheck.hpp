// Central finite-difference gradient checks for layers, in double precision.
//
// The scalar checked is loss = sum(w * y) for fixed random weights w, so dL/dy = w. The layer's
// backward pass (run once with dy = w after zero_grad) must match finite differences of the loss
// with respect to every input element and every parameter element.
#pragma once

#include <functional>
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

  if (!dx.empty()) result.input_error = max_rel_diff(dx, numeric_gradient(loss, x0, h), 1e-12);
  const auto values = parameter_values(layer);
  for (std::size_t i = 0; i < values.size(); ++i) {
    const auto numeric = numeric_gradient(
        [&](const std::vector<double>& v) {
          set_parameter(layer, i, v);
          return loss(x0);
        },
        values[i], h);
    set_parameter(layer, i, values[i]);
    result.parameter_errors.emplace_back(names[i], max_rel_diff(grads[i], numeric, 1e-12));
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
