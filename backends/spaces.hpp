// The execution spaces compiled into Kokkos, as one type list, so that tests and benchmarks run
// the same code on each of them in one binary.
#pragma once

#include <cctype>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include <Kokkos_Core.hpp>

#include "../core/compat.hpp"
#include "../core/error.hpp"

namespace kformer::backends {

namespace detail {
#if defined(KOKKOS_ENABLE_SERIAL)
using serial_list = std::tuple<Kokkos::Serial>;
#else
using serial_list = std::tuple<>;
#endif
#if defined(KOKKOS_ENABLE_OPENMP)
using openmp_list = std::tuple<Kokkos::OpenMP>;
#else
using openmp_list = std::tuple<>;
#endif
#if defined(KOKKOS_ENABLE_THREADS)
using threads_list = std::tuple<Kokkos::Threads>;
#else
using threads_list = std::tuple<>;
#endif
#if defined(KOKKOS_ENABLE_CUDA)
using cuda_list = std::tuple<Kokkos::Cuda>;
#else
using cuda_list = std::tuple<>;
#endif
#if defined(KOKKOS_ENABLE_HIP)
using hip_list = std::tuple<compat::HIP>;
#else
using hip_list = std::tuple<>;
#endif
}  // namespace detail

// std::tuple<Kokkos::Serial, Kokkos::OpenMP, ...> in that order: the host spaces first, so that a
// test's first space is the reference the others are compared with.
using EnabledSpaces =
    decltype(std::tuple_cat(detail::serial_list{}, detail::openmp_list{}, detail::threads_list{},
                            detail::cuda_list{}, detail::hip_list{}));

// "serial", "openmp", "threads", "cuda", "hip": lower-case Space::name().
template <class ExecutionSpace>
std::string space_name() {
  std::string name = ExecutionSpace::name();
  for (auto& ch : name)
    ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return name;
}

// Calls f(ExecutionSpace{}) for every enabled space, in EnabledSpaces order.
template <class F>
void for_each_space(F&& f) {
  std::apply([&](auto... spaces) { (f(spaces), ...); }, EnabledSpaces{});
}

inline std::vector<std::string> enabled_space_names() {
  std::vector<std::string> names;
  for_each_space([&](auto space) { names.push_back(space_name<decltype(space)>()); });
  return names;
}

// Runs f(ExecutionSpace{}) for the space called `name` ("default" = Kokkos' default space).
template <class F>
void dispatch(const std::string& name, F&& f) {
  bool found = false;
  const std::string wanted = name == "default" ? space_name<Kokkos::DefaultExecutionSpace>() : name;
  for_each_space([&](auto space) {
    if (!found && space_name<decltype(space)>() == wanted) {
      found = true;
      f(space);
    }
  });
  if (!found) {
    std::string known;
    for (const auto& n : enabled_space_names())
      known += (known.empty() ? "" : ", ") + n;
    fail("kformer::backends::dispatch", "backend '", name, "' is not enabled (enabled: ", known,
         ", default)");
  }
}

}  // namespace kformer::backends
