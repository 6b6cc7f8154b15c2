// The host BLAS (OpenBLAS) as kformer calls it directly: the Fortran prototypes, a row-major
// wrapper, the thread count it runs with, and the reproducible mode of backends::gemm.
#pragma once

#include <atomic>
#include <type_traits>

#include <Kokkos_Core.hpp>

#if defined(KOKKOS_ENABLE_OPENMP) && defined(_OPENMP)
#include <omp.h>
#endif

#include "../../core/compat.hpp"  // KokkosKernels_config.h where kformer uses Kokkos Kernels

namespace kformer::backends {

// Whether host GEMMs call a BLAS library (Kokkos Kernels' BLAS TPL).
#if defined(KOKKOSKERNELS_ENABLE_TPL_BLAS)
inline constexpr bool has_host_blas = true;
#else
inline constexpr bool has_host_blas = false;
#endif

}  // namespace kformer::backends

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

// backends::set_reproducible_gemm's setting (process-wide, like the BLAS thread count it works
// around).
inline std::atomic<bool>& reproducible_gemm_flag() {
  static std::atomic<bool> flag{false};
  return flag;
}

#if defined(KOKKOSKERNELS_ENABLE_TPL_BLAS)
extern "C" {
void F77_BLAS_MANGLE(sgemm, SGEMM)(const char*, const char*, const int*, const int*, const int*,
                                   const float*, const float*, const int*, const float*, const int*,
                                   const float*, float*, const int*);
void F77_BLAS_MANGLE(dgemm, DGEMM)(const char*, const char*, const int*, const int*, const int*,
                                   const double*, const double*, const int*, const double*,
                                   const int*, const double*, double*, const int*);
}

// Row-major C = alpha op(A) op(B) + beta C through column-major BLAS: C^T = op(B)^T op(A)^T.
template <class T>
void blas_gemm_row_major(bool ta, bool tb, int m, int n, int k, T alpha, const T* a, int lda,
                         const T* b, int ldb, T beta, T* c, int ldc) {
  const char op_b = tb ? 'T' : 'N', op_a = ta ? 'T' : 'N';
  if constexpr (std::is_same_v<T, float>) F77_BLAS_MANGLE(sgemm, SGEMM)
  (&op_b, &op_a, &n, &m, &k, &alpha, b, &ldb, a, &lda, &beta, c, &ldc);
  else F77_BLAS_MANGLE(dgemm, DGEMM)(&op_b, &op_a, &n, &m, &k, &alpha, b, &ldb, a, &lda, &beta, c,
                                     &ldc);
}
#endif

}  // namespace kformer::backends::impl
