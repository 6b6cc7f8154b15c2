// The one place where Kokkos / Kokkos Kernels version differences live.
//
// kformer codes against APIs present in Kokkos 3.4 and 4.x (and 5.x where they survive). Everything
// that moved between those versions is reached through the names below, never directly.
#pragma once

#include <Kokkos_Core.hpp>
#include <kformer/config.hpp>
#if KFORMER_ENABLE_KOKKOS_KERNELS
#include <KokkosKernels_config.h>
#endif

// The Kokkos headers this translation unit sees must be those kformer was configured with (a
// second Kokkos on the include path would otherwise fail at link time or, worse, at run time).
static_assert(KOKKOS_VERSION == KFORMER_KOKKOS_VERSION,
              "kformer was configured with another Kokkos version than the Kokkos_Core.hpp "
              "included here (KFORMER_KOKKOS_VERSION_STRING in kformer/config.hpp says which)");

namespace kformer::compat {

// Math functions: Kokkos::Experimental::sin etc. until 3.6; Kokkos::sin from 3.7 (4.x keeps only
// the latter).
#if KOKKOS_VERSION >= 30700
namespace math = ::Kokkos;
#else
namespace math = ::Kokkos::Experimental;
#endif

// View::HostMirror is deprecated in 5.0; host_mirror_type exists from 3.x on.
template <class ViewType>
using host_mirror_t = typename ViewType::host_mirror_type;

// Kokkos::Experimental::HIP became Kokkos::HIP in 4.0.
#if defined(KOKKOS_ENABLE_HIP)
#if KOKKOS_VERSION >= 40000
using HIP = ::Kokkos::HIP;
#else
using HIP = ::Kokkos::Experimental::HIP;
#endif
#endif

// Kokkos Kernels' BLAS entry points take an execution-space instance from 4.1 on. Before that
// they run on the default instance of the views' space, so callers fence around them.
#if defined(KOKKOSKERNELS_VERSION) && KOKKOSKERNELS_VERSION >= 40100
inline constexpr bool kernels_blas_takes_instance = true;
#else
inline constexpr bool kernels_blas_takes_instance = false;
#endif

// View::rank is an enum value in 3.x and an integral_constant in 4.x; both convert to int.
template <class ViewType>
inline constexpr int rank_v = static_cast<int>(ViewType::rank);

// ExecutionSpace::concurrency() is static before 4.0 and a member after; calling it through an
// instance works for both.
template <class ExecutionSpace>
int concurrency(const ExecutionSpace& exec) {
  return static_cast<int>(exec.concurrency());
}

}  // namespace kformer::compat
