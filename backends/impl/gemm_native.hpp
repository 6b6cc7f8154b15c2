// The Kokkos-native GEMM: what backends::gemm runs when kformer is built without Kokkos Kernels
// (e.g. for HIP from Debian, which has no rocBLAS), and what the tests compare with a naive
// product on every backend so that it stays correct where Kokkos Kernels is used instead.
//
// C = alpha op(A) op(B) + beta C on row-major matrices. A team computes one kTile x kTile tile of
// C: it stages kTile x kTile blocks of op(A) and op(B) in scratch memory (each element of A and B
// is read from memory n/kTile or m/kTile times instead of n or m times) and keeps the tile's sums
// in scratch too. Every output is summed over k in increasing order, so the bits do not depend on
// the team size or the number of threads; beta = 0 ignores C's old contents (NaN too).
#pragma once

#include <cstdint>

#include <Kokkos_Core.hpp>

#include "../../core/profiling.hpp"

namespace kformer::backends::impl {

template <class ExecutionSpace, class T>
struct NativeGemm {
  static constexpr int kTile = 32;
  using policy_type = Kokkos::TeamPolicy<ExecutionSpace>;
  using member_type = typename policy_type::member_type;
  using ScratchTile =
      Kokkos::View<T*, typename ExecutionSpace::scratch_memory_space, Kokkos::MemoryUnmanaged>;

  const T* a;
  const T* b;
  T* c;
  std::int64_t lda, ldb, ldc;  // row strides of A, B and C as stored
  int m, n, k;
  bool trans_a, trans_b;
  T alpha, beta;
  int tiles_n;  // tiles across a row of C

  static std::size_t scratch_bytes() { return 3 * ScratchTile::shmem_size(kTile * kTile); }

  KOKKOS_INLINE_FUNCTION T op_a(int i, int l) const {
    return trans_a ? a[l * lda + i] : a[i * lda + l];
  }
  KOKKOS_INLINE_FUNCTION T op_b(int l, int j) const {
    return trans_b ? b[j * ldb + l] : b[l * ldb + j];
  }

  KOKKOS_INLINE_FUNCTION void operator()(const member_type& team) const {
    constexpr int kSize = kTile * kTile;
    const int i0 = (team.league_rank() / tiles_n) * kTile;
    const int j0 = (team.league_rank() % tiles_n) * kTile;
    ScratchTile a_tile(team.team_scratch(0), kSize);  // a_tile[ii * kTile + l] = op(A)(i0+ii, l0+l)
    ScratchTile b_tile(team.team_scratch(0), kSize);  // b_tile[l * kTile + jj] = op(B)(l0+l, j0+jj)
    ScratchTile sums(team.team_scratch(0), kSize);    // sums[ii * kTile + jj]
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kSize),
                         [&](const int e) { sums[e] = T(0); });
    for (int l0 = 0; l0 < k; l0 += kTile) {
      // Consecutive threads (consecutive s) read consecutive memory: along a row of A or B as
      // stored, whether or not it is transposed.
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kSize), [&](const int e) {
        const int r = e / kTile, s = e % kTile;
        const int ii = trans_a ? s : r, la = trans_a ? r : s;
        a_tile[ii * kTile + la] = i0 + ii < m && l0 + la < k ? op_a(i0 + ii, l0 + la) : T(0);
        const int lb = trans_b ? s : r, jj = trans_b ? r : s;
        b_tile[lb * kTile + jj] = l0 + lb < k && j0 + jj < n ? op_b(l0 + lb, j0 + jj) : T(0);
      });
      team.team_barrier();
      const int depth = k - l0 < kTile ? k - l0 : kTile;
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kSize), [&](const int e) {
        const int ii = e / kTile, jj = e % kTile;
        T sum = sums[e];
        for (int l = 0; l < depth; ++l)
          sum += a_tile[ii * kTile + l] * b_tile[l * kTile + jj];
        sums[e] = sum;
      });
      team.team_barrier();
    }
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kSize), [&](const int e) {
      const int i = i0 + e / kTile, j = j0 + e % kTile;
      if (i < m && j < n) {
        T& out = c[i * ldc + j];
        out = beta == T(0) ? alpha * sums[e] : alpha * sums[e] + beta * out;
      }
    });
  }
};

// C (m, n) = alpha op(A) op(B) + beta C for contiguous row-major A, B, C with k > 0.
template <class ExecutionSpace, class T>
void native_gemm(const ExecutionSpace& exec, bool trans_a, bool trans_b, T alpha, const T* a,
                 std::int64_t lda, const T* b, std::int64_t ldb, T beta, T* c, std::int64_t ldc,
                 int m, int n, int k) {
  using Kernel = NativeGemm<ExecutionSpace, T>;
  constexpr int tile = Kernel::kTile;
  const int tiles_m = (m + tile - 1) / tile, tiles_n = (n + tile - 1) / tile;
  const Kernel kernel{a, b, c, lda, ldb, ldc, m, n, k, trans_a, trans_b, alpha, beta, tiles_n};
  typename Kernel::policy_type policy(exec, tiles_m * tiles_n, Kokkos::AUTO);
  Kokkos::parallel_for(KFORMER_LABEL("kformer::gemm::native"),
                       policy.set_scratch_size(0, Kokkos::PerTeam(Kernel::scratch_bytes())),
                       kernel);
}

}  // namespace kformer::backends::impl
