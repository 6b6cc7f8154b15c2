// Many small GEMMs of the same shape, indexed by two batch indices (outer, inner): attention's
// per-(batch, head) products read Q, K, V straight out of the packed (batch*seq, 3*d) projection,
// where head h of batch element b starts at b*seq*3d + h*dh with leading dimension 3d.
//
//   C[o, i] = alpha op(A[o, i]) op(B[o, i]) + beta C[o, i]
//
// On host memory with a BLAS TPL, each product is one BLAS call, run in parallel across the batch
// on the execution space (the OpenMP build of OpenBLAS runs single-threaded inside a parallel
// region). Elsewhere a Kokkos team kernel computes them (one team per product).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include <Kokkos_Core.hpp>

#include "../core/compat.hpp"
#include "../core/error.hpp"
#include "for_each.hpp"
#include "gemm.hpp"
#include "impl/gemm_impl.hpp"

namespace kformer::backends {

// A batch of row-major (rows, cols) matrices: matrix (o, i) starts at
// data + o * outer_stride + i * inner_stride, and its rows are ld elements apart.
template <class T>
struct StridedMatrices {
  T* data = nullptr;
  std::int64_t rows = 0, cols = 0, ld = 0;
  std::int64_t outer_stride = 0, inner_stride = 0;

  KOKKOS_INLINE_FUNCTION T* at(int o, int i) const {
    return data + o * outer_stride + i * inner_stride;
  }
  // The same matrices, read-only.
  template <class U = T, std::enable_if_t<!std::is_const_v<U>, int> = 0>
  operator StridedMatrices<const U>() const {
    return {data, rows, cols, ld, outer_stride, inner_stride};
  }
};

namespace impl {

// Each thread computes whole entries of C (dot products over k). A team takes one product on a
// CPU, and a block of 256 consecutive entries of one product on a GPU: one team per product
// would leave most of a GPU idle (attention has batch x heads products, 32 in the perf suite's
// long case, against an H200's 132 multiprocessors).
template <class ExecutionSpace, class T>
void gemm_batched_native(const ExecutionSpace& exec, bool ta, bool tb, T alpha,
                         const StridedMatrices<const T>& A, const StridedMatrices<const T>& B,
                         T beta, const StridedMatrices<T>& C, int n_outer, int n_inner) {
  using member_type = typename Kokkos::TeamPolicy<ExecutionSpace>::member_type;
  const int m = static_cast<int>(C.rows), n = static_cast<int>(C.cols);
  const int k = static_cast<int>(ta ? A.rows : A.cols);
  const int per_team = runs_on_host<ExecutionSpace> ? m * n : std::min(m * n, 256);
  const int blocks = (m * n + per_team - 1) / per_team;
  Kokkos::parallel_for(
      "kformer::gemm_batched::native",
      Kokkos::TeamPolicy<ExecutionSpace>(exec, n_outer * n_inner * blocks, Kokkos::AUTO),
      KOKKOS_LAMBDA(const member_type& team) {
        const int product = team.league_rank() / blocks;
        const int o = product / n_inner, i = product % n_inner;
        const int first = (team.league_rank() % blocks) * per_team;
        const int count = first + per_team < m * n ? per_team : m * n - first;
        const T* const a = A.at(o, i);
        const T* const b = B.at(o, i);
        T* const c = C.at(o, i);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, count), [=](const int e) {
          const int r = (first + e) / n, col = (first + e) % n;
          T sum = 0;
          for (int l = 0; l < k; ++l)
            sum += (ta ? a[l * A.ld + r] : a[r * A.ld + l]) *
                   (tb ? b[col * B.ld + l] : b[l * B.ld + col]);
          T& out = c[r * C.ld + col];
          out = beta == T(0) ? alpha * sum : alpha * sum + beta * out;
        });
      });
}

}  // namespace impl

template <class ExecutionSpace, class T>
void gemm_batched(const ExecutionSpace& exec, Op op_a, Op op_b, T alpha,
                  const StridedMatrices<const T>& A, const StridedMatrices<const T>& B, T beta,
                  const StridedMatrices<T>& C, int n_outer, int n_inner) {
  const std::string where = "kformer::backends::gemm_batched";
  const bool ta = op_a == Op::T, tb = op_b == Op::T;
  const std::int64_t m = ta ? A.cols : A.rows, k = ta ? A.rows : A.cols;
  const std::int64_t kb = tb ? B.cols : B.rows, n = tb ? B.rows : B.cols;
  if (k != kb || C.rows != m || C.cols != n)
    fail(where, "shapes do not match: op(A) is (", m, ", ", k, "), op(B) is (", kb, ", ", n,
         "), C is (", C.rows, ", ", C.cols, ")");
  if (A.ld < A.cols || B.ld < B.cols || C.ld < C.cols)
    fail(where, "a leading dimension is smaller than its row length");
  if (n_outer <= 0 || n_inner <= 0 || m == 0 || n == 0) return;

#if defined(KOKKOSKERNELS_ENABLE_TPL_BLAS)
  if constexpr (Kokkos::SpaceAccessibility<Kokkos::HostSpace,
                                           typename ExecutionSpace::memory_space>::accessible &&
                (std::is_same_v<T, float> || std::is_same_v<T, double>)) {
    const impl::HostBlasThreads threads(exec);
    // Host code calling BLAS inside a host parallel loop: each call runs single-threaded.
    Kokkos::parallel_for(
        "kformer::gemm_batched::blas",
        Kokkos::RangePolicy<ExecutionSpace>(exec, 0, n_outer * n_inner), [=](const int e) {
          const int o = e / n_inner, i = e % n_inner;
          impl::blas_gemm_row_major(ta, tb, static_cast<int>(m), static_cast<int>(n),
                                    static_cast<int>(k), alpha, A.at(o, i), static_cast<int>(A.ld),
                                    B.at(o, i), static_cast<int>(B.ld), beta, C.at(o, i),
                                    static_cast<int>(C.ld));
        });
    return;
  }
#endif
  impl::gemm_batched_native(exec, ta, tb, alpha, A, B, beta, C, n_outer, n_inner);
}

}  // namespace kformer::backends
