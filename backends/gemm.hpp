// The GEMM entry point every layer uses: C = alpha op(A) op(B) + beta C on 2-D LayoutRight views
// (activations seen as (batch*seq, feature) matrices, weights in PyTorch's (out, in) layout).
//
// It runs on the given execution space through KokkosBlas::gemm, which hands host memory to the
// BLAS TPL (OpenBLAS) and device memory to cuBLAS/rocBLAS where Kokkos Kernels has them; without
// Kokkos Kernels (KFORMER_ENABLE_KOKKOS_KERNELS off) through kformer's own Kokkos kernel. On a host
// space with several threads and a BLAS TPL, a large enough product is cut into one block of C per
// thread instead, each a single-threaded BLAS call (impl::partitioned_host_gemm says why).
#pragma once

#include <cstdint>
#include <string>

#include <Kokkos_Core.hpp>

#include "../core/compat.hpp"
#include "../core/error.hpp"
#include "impl/gemm_impl.hpp"

namespace kformer::backends {

enum class Op { N, T };  // op(X) = X or X^T

namespace detail {

// The checks of gemm and gemm_native; false when C is empty (nothing to do).
template <class AViewType, class BViewType, class CViewType>
bool check_gemm(const char* where, Op op_a, Op op_b, const AViewType& A, const BViewType& B,
                const CViewType& C) {
  static_assert(compat::rank_v<AViewType> == 2 && compat::rank_v<BViewType> == 2 &&
                    compat::rank_v<CViewType> == 2,
                "kformer::backends::gemm takes 2-D views");
  static_assert(std::is_same_v<typename AViewType::array_layout, Kokkos::LayoutRight> &&
                    std::is_same_v<typename BViewType::array_layout, Kokkos::LayoutRight> &&
                    std::is_same_v<typename CViewType::array_layout, Kokkos::LayoutRight>,
                "kformer::backends::gemm takes LayoutRight views");
  const std::int64_t m = op_a == Op::N ? A.extent(0) : A.extent(1);
  const std::int64_t k = op_a == Op::N ? A.extent(1) : A.extent(0);
  const std::int64_t kb = op_b == Op::N ? B.extent(0) : B.extent(1);
  const std::int64_t n = op_b == Op::N ? B.extent(1) : B.extent(0);
  if (k != kb)
    fail(where, "inner dimensions differ: op(A) is (", m, ", ", k, ") from A ", shape_of(A),
         ", op(B) is (", kb, ", ", n, ") from B ", shape_of(B));
  check_shape(where, "C", C, {m, n});
  if (!A.span_is_contiguous() || !B.span_is_contiguous() || !C.span_is_contiguous())
    fail(where, "A, B and C must be contiguous (got spans ", A.span(), ", ", B.span(), ", ",
         C.span(), " for sizes ", A.size(), ", ", B.size(), ", ", C.size(), ")");
  check_distinct(where, "A", A, "C", C);
  check_distinct(where, "B", B, "C", C);
  return m != 0 && n != 0;
}

}  // namespace detail

// Reproducible mode (off by default; process-wide). A multithreaded host BLAS gives results that
// depend on its thread count; with this mode on, host GEMMs run as a fixed grid of single-threaded
// BLAS calls in parallel instead, so that training gives the same bits for any OMP_NUM_THREADS
// (perf: gemm.*.reproducible shows the cost). Kokkos-native and GPU GEMMs are not affected: the
// native kernel already sums in a fixed order, and cuBLAS/rocBLAS do not depend on host threads.
inline void set_reproducible_gemm(bool on) {
  impl::reproducible_gemm_flag().store(on);
}
inline bool reproducible_gemm() {
  return impl::reproducible_gemm_flag().load();
}

// C (m, n) = alpha op(A) (m, k) op(B) (k, n) + beta C.   beta = 0 ignores C's old contents (NaN
// too).
template <class ExecutionSpace, class AViewType, class BViewType, class CViewType>
void gemm(const ExecutionSpace& exec, Op op_a, Op op_b, typename CViewType::const_value_type alpha,
          const AViewType& A, const BViewType& B, typename CViewType::const_value_type beta,
          const CViewType& C) {
  if (!detail::check_gemm("kformer::backends::gemm", op_a, op_b, A, B, C)) return;
  impl::gemm<false>(exec, op_a == Op::T, op_b == Op::T, alpha, A, B, beta, C);
}

// The same product through kformer's Kokkos-native kernel, which gemm uses when kformer is built
// without Kokkos Kernels. Callable directly so that the tests keep it correct on every backend of
// builds that do have Kokkos Kernels.
template <class ExecutionSpace, class AViewType, class BViewType, class CViewType>
void gemm_native(const ExecutionSpace& exec, Op op_a, Op op_b,
                 typename CViewType::const_value_type alpha, const AViewType& A, const BViewType& B,
                 typename CViewType::const_value_type beta, const CViewType& C) {
  if (!detail::check_gemm("kformer::backends::gemm_native", op_a, op_b, A, B, C)) return;
  impl::gemm<true>(exec, op_a == Op::T, op_b == Op::T, alpha, A, B, beta, C);
}

}  // namespace kformer::backends
