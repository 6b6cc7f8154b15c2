// Checks for NaN and Inf on the device, for the inputs that must be finite and for the optional
// guard that stops training at the first layer producing a non-finite value.
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include <Kokkos_Core.hpp>

#include "compat.hpp"
#include "error.hpp"
#include "profiling.hpp"
#include "tensor.hpp"

namespace kformer {

// The flat index of the first non-finite element of a contiguous view, or -1.
template <class ExecutionSpace, class ViewType>
std::int64_t first_non_finite(const ExecutionSpace& exec, const ViewType& v) {
  const auto* const data = v.data();
  std::int64_t first = std::numeric_limits<std::int64_t>::max();
  Kokkos::parallel_reduce(
      KFORMER_LABEL("kformer::first_non_finite"),
      Kokkos::RangePolicy<ExecutionSpace, Kokkos::IndexType<std::int64_t>>(exec, 0,
                                                                           std::int64_t(v.size())),
      KOKKOS_LAMBDA(const std::int64_t i, std::int64_t& f) {
        if (!compat::math::isfinite(data[i]) && i < f) f = i;
      },
      Kokkos::Min<std::int64_t>(first));
  return first == std::numeric_limits<std::int64_t>::max() ? -1 : first;
}

// Throws "<where>: <what> holds <value> at element i of shape (...)" for the first non-finite
// element.
template <class ExecutionSpace, class ViewType>
void require_finite(const ExecutionSpace& exec, const ViewType& v, const Where& where,
                    const std::string& what) {
  const std::int64_t i = first_non_finite(exec, v);
  if (i < 0) return;
  const auto one = Kokkos::subview(
      Kokkos::View<const typename ViewType::value_type*, typename ViewType::memory_space>(v.data(),
                                                                                          v.size()),
      i);
  fail(where, what, " holds ", to_host(one)(), " at element ", i, " of shape ", shape_of(v));
}

}  // namespace kformer
