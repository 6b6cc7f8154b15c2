// Implementation of backends::gemm: Kokkos Kernels on the caller's execution space where kformer
// is built with it, the Kokkos-native kernel of gemm_native.hpp otherwise.
#pragma once

#include <cstdint>
#include <type_traits>

#include <Kokkos_Core.hpp>
#if defined(KFORMER_ENABLE_KOKKOS_KERNELS)
#include <KokkosBlas3_gemm.hpp>
#endif

#if defined(KOKKOS_ENABLE_OPENMP) && defined(_OPENMP)
#include <omp.h>
#endif

#include "../../core/compat.hpp"
#include "gemm_native.hpp"

namespace kformer::backends::impl {

// OpenBLAS (the OpenMP build) sizes its thread team by omp_get_max_threads() at each call. Pinning
// that to the execution space's concurrency for the duration of a call keeps Serial single-threaded
// and OpenMP on the threads Kokkos was given, instead of whatever OMP_NUM_THREADS says.
class HostBlasThreads {
 public:
  template <class ExecutionSpace>
  explicit HostBlasThreads([[maybe_unused]] const ExecutionSpace& exec) {
#if defined(KOKKOS_ENABLE_OPENMP) && defined(_OPENMP)
    if constexpr (Kokkos::SpaceAccessibility<Kokkos::HostSpace,
                                             typename ExecutionSpace::memory_space>::accessible) {
      saved_ = omp_get_max_threads();
      omp_set_num_threads(compat::concurrency(exec));
    }
#endif
  }
  ~HostBlasThreads() {
#if defined(KOKKOS_ENABLE_OPENMP) && defined(_OPENMP)
    if (saved_ > 0) omp_set_num_threads(saved_);
#endif
  }
  HostBlasThreads(const HostBlasThreads&) = delete;
  HostBlasThreads& operator=(const HostBlasThreads&) = delete;

 private:
#if defined(KOKKOS_ENABLE_OPENMP) && defined(_OPENMP)
  int saved_ = 0;
#endif
};

// kNative selects the Kokkos-native kernel even where Kokkos Kernels is available.
template <bool kNative, class ExecutionSpace, class T, class AViewType, class BViewType,
          class CViewType>
void gemm(const ExecutionSpace& exec, bool trans_a, bool trans_b, T alpha, const AViewType& A,
          const BViewType& B, T beta, const CViewType& C) {
  using memory_space = typename ExecutionSpace::memory_space;
  using device = Kokkos::Device<ExecutionSpace, memory_space>;
  using value_type = std::remove_const_t<typename CViewType::value_type>;
  using unmanaged = Kokkos::MemoryTraits<Kokkos::Unmanaged>;
  using ConstMatrix = Kokkos::View<const value_type**, Kokkos::LayoutRight, device, unmanaged>;
  using Matrix = Kokkos::View<value_type**, Kokkos::LayoutRight, device, unmanaged>;
  const ConstMatrix a(A.data(), A.extent(0), A.extent(1));
  const ConstMatrix b(B.data(), B.extent(0), B.extent(1));
  const Matrix c(C.data(), C.extent(0), C.extent(1));

  const auto k = trans_a ? a.extent(0) : a.extent(1);
  if (k == 0) {  // Kokkos Kernels returns early here without applying beta
    const value_type scale = static_cast<value_type>(beta);
    value_type* data = c.data();
    Kokkos::parallel_for(
        "kformer::gemm::scale_c",
        Kokkos::RangePolicy<ExecutionSpace, Kokkos::IndexType<std::int64_t>>(
            exec, 0, static_cast<std::int64_t>(c.size())),
        KOKKOS_LAMBDA(const std::int64_t i) {
          data[i] = scale == value_type(0) ? value_type(0) : scale * data[i];
        });
    return;
  }
#if defined(KFORMER_ENABLE_KOKKOS_KERNELS)
  if constexpr (!kNative) {
    const char* op_a = trans_a ? "T" : "N";
    const char* op_b = trans_b ? "T" : "N";
    const HostBlasThreads threads(exec);
    if constexpr (compat::kernels_blas_takes_instance) {
      KokkosBlas::gemm(exec, op_a, op_b, alpha, a, b, beta, c);
    } else {
      // Runs on the default instance: order it after the caller's work and before what follows.
      exec.fence();
      KokkosBlas::gemm(op_a, op_b, alpha, a, b, beta, c);
      ExecutionSpace().fence();
    }
    return;
  }
#endif
  native_gemm<ExecutionSpace, value_type>(
      exec, trans_a, trans_b, static_cast<value_type>(alpha), a.data(), a.extent(1), b.data(),
      b.extent(1), static_cast<value_type>(beta), c.data(), c.extent(1),
      static_cast<int>(c.extent(0)), static_cast<int>(c.extent(1)), static_cast<int>(k));
}

}  // namespace kformer::backends::impl
