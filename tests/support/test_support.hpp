// Helpers shared by the tests: host copies, comparisons, seeded host data, and finite differences.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "catch.hpp"

#include <Kokkos_Core.hpp>

#include <kformer/backends/spaces.hpp>
#include <kformer/core/tensor.hpp>

namespace kformer::testing {

template <class ExecutionSpace>
using MemorySpaceOf = typename ExecutionSpace::memory_space;

// Host std::vector -> View in the space's memory with the given extents.
template <class T, class ExecutionSpace, class... Extents>
auto device_from(const std::vector<double>& values, Extents... extents) {
  using Traits = Kokkos::View<T*, Kokkos::LayoutRight, MemorySpaceOf<ExecutionSpace>>;
  constexpr int rank = sizeof...(Extents);
  using ViewType = std::conditional_t<
      rank == 1, Traits,
      std::conditional_t<rank == 2, Tensor2<T, MemorySpaceOf<ExecutionSpace>>,
                         std::conditional_t<rank == 3, Tensor3<T, MemorySpaceOf<ExecutionSpace>>,
                                            Tensor4<T, MemorySpaceOf<ExecutionSpace>>>>>;
  ViewType v("test::device_from", extents...);
  auto h = Kokkos::create_mirror_view(v);
  REQUIRE(values.size() == h.size());
  T* data = h.data();
  for (std::size_t i = 0; i < values.size(); ++i)
    data[i] = static_cast<T>(values[i]);
  Kokkos::deep_copy(v, h);
  return v;
}

// Any View -> flat host vector of doubles (row-major for LayoutRight).
template <class ViewType>
std::vector<double> host_values(const ViewType& v) {
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  std::vector<double> out(h.size());
  const auto* data = h.data();
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<double>(data[i]);
  return out;
}

inline std::vector<double> random_values(std::size_t n, std::uint64_t seed, double lo = -1.0,
                                         double hi = 1.0) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(n);
  for (auto& x : v)
    x = dist(gen);
  return v;
}

inline double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = std::abs(a[i] - b[i]);
    if (!(d <= m)) m = d;  // NaN propagates as the maximum
  }
  return m;
}

// max |a - b| / max(|b|_inf, floor): relative to the reference's scale.
inline double max_rel_diff(const std::vector<double>& a, const std::vector<double>& b,
                           double floor = 1e-30) {
  double scale = floor;
  for (double x : b)
    scale = std::max(scale, std::abs(x));
  return max_abs_diff(a, b) / scale;
}

inline bool bitwise_equal(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i]) && !(std::isnan(a[i]) && std::isnan(b[i]))) return false;
  return true;
}

template <class Space>
inline constexpr bool is_host_space_v =
    Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename Space::memory_space>::accessible;

// A backend's result against the first backend's (a host space). Host backends run the same
// code with the same rounding and must agree bit for bit; a GPU fuses multiply-adds and has its
// own libm, so it is held to a relative tolerance instead.
template <class Space>
void check_matches_first_backend(const std::vector<double>& result,
                                 const std::vector<double>& first, double device_tolerance = 1e-6) {
  if constexpr (is_host_space_v<Space>)
    CHECK(bitwise_equal(result, first));
  else
    CHECK(max_rel_diff(result, first, 1e-30) <= device_tolerance);
}

// Central finite differences of a scalar function of a host vector: d f / d x_i.
inline std::vector<double> numeric_gradient(
    const std::function<double(const std::vector<double>&)>& f, std::vector<double> x,
    double h = 1e-6) {
  std::vector<double> g(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double xi = x[i];
    x[i] = xi + h;
    const double fp = f(x);
    x[i] = xi - h;
    const double fm = f(x);
    x[i] = xi;
    g[i] = (fp - fm) / (2 * h);
  }
  return g;
}

// A (batch, seq) key padding mask, true (ignore) from lengths[b] on.
template <class Space>
using Mask = Kokkos::View<bool**, Kokkos::LayoutRight, MemorySpaceOf<Space>>;
template <class Space>
Mask<Space> padding_mask(int batch, int seq, const std::vector<int>& lengths) {
  Mask<Space> m("kpm", batch, seq);
  auto h = Kokkos::create_mirror_view(m);
  for (int b = 0; b < batch; ++b)
    for (int s = 0; s < seq; ++s)
      h(b, s) = s >= lengths[b];
  Kokkos::deep_copy(m, h);
  return m;
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    s += a[i] * b[i];
  return s;
}

}  // namespace kformer::testing
