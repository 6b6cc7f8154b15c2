// Implementation of backends::gemm: Kokkos Kernels on the caller's execution space where kformer
// is built with it, the Kokkos-native kernel of gemm_native.hpp otherwise.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include <Kokkos_Core.hpp>

#include "../../core/compat.hpp"
#if KFORMER_ENABLE_KOKKOS_KERNELS
#include <KokkosBlas3_gemm.hpp>
#endif

#include "../../core/profiling.hpp"
#include "gemm_native.hpp"
#include "host_blas.hpp"

namespace kformer::backends::impl {

#if defined(KOKKOSKERNELS_ENABLE_TPL_BLAS)
// Reproducible mode of a host GEMM. A multithreaded BLAS sums in an order that depends on its
// thread count (OpenBLAS 0.3.21 differs between 1, 2, 3 and 4 threads on most shapes), so here C is
// cut into a grid of tiles fixed by the shape alone, and each tile is one single-threaded BLAS
// call (BLAS runs single-threaded inside a parallel region), the tiles run in parallel on the
// execution space. Every entry of C then comes from the same call with the same K for any number
// of threads.
inline constexpr int kReproducibleTileRows = 32, kReproducibleTileCols = 256;

template <class ExecutionSpace, class T, class ConstMatrix, class Matrix>
void reproducible_host_gemm(const ExecutionSpace& exec, bool trans_a, bool trans_b, T alpha,
                            const ConstMatrix& a, const ConstMatrix& b, T beta, const Matrix& c) {
  const int m = static_cast<int>(c.extent(0)), n = static_cast<int>(c.extent(1));
  const int k = static_cast<int>(trans_a ? a.extent(0) : a.extent(1));
  const int lda = static_cast<int>(a.extent(1)), ldb = static_cast<int>(b.extent(1)), ldc = n;
  const int tiles_m = (m + kReproducibleTileRows - 1) / kReproducibleTileRows;
  const int tiles_n = (n + kReproducibleTileCols - 1) / kReproducibleTileCols;
  const T* const a_data = a.data();
  const T* const b_data = b.data();
  T* const c_data = c.data();
  const HostBlasThreads threads(exec);
  // Host code calling BLAS inside a host parallel loop: only instantiated for host spaces.
  Kokkos::parallel_for(
      KFORMER_LABEL("kformer::gemm::reproducible_blas"),
      Kokkos::RangePolicy<ExecutionSpace>(exec, 0, tiles_m * tiles_n), [=](const int tile) {
        const int r0 = (tile / tiles_n) * kReproducibleTileRows;
        const int c0 = (tile % tiles_n) * kReproducibleTileCols;
        const int rows = m - r0 < kReproducibleTileRows ? m - r0 : kReproducibleTileRows;
        const int cols = n - c0 < kReproducibleTileCols ? n - c0 : kReproducibleTileCols;
        // Rows r0.. of op(A) and columns c0.. of op(B), in row-major storage.
        const T* const a_tile = trans_a ? a_data + r0 : a_data + std::int64_t(r0) * lda;
        const T* const b_tile = trans_b ? b_data + std::int64_t(c0) * ldb : b_data + c0;
        blas_gemm_row_major(trans_a, trans_b, rows, cols, k, alpha, a_tile, lda, b_tile, ldb, beta,
                            c_data + std::int64_t(r0) * ldc + c0, ldc);
      });
}
#endif

// The default host GEMM on more than one thread. OpenBLAS 0.3.21 shares a product between its
// threads poorly at the layers' shapes: on the 2-core development machine its 2-thread sgemm of
// (2048, 64) x (64, 64) reaches 49 GFLOP/s, below its own 1-thread rate (101), and (2048, 64) x
// (64, 256) 82. Here C is cut into one block of rows (or of columns, when it is wider than tall)
// per thread, each block one single-threaded BLAS call, the blocks run in parallel on the
// execution space: 150-205 GFLOP/s on those shapes and 204 on (1024)^3 (OpenBLAS: 191).
// Returns false, having done nothing, for a product too small to be worth sharing (under
// kMinFlopsPerBlock a thread) or too narrow to give each thread a block: the caller's BLAS call
// then threads it itself. Products of 2 MFLOP are cut in two: OpenBLAS's 2 threads took 19-39 us
// on (256, 64) x (64, 64), (512, 32) x (32, 64), (256, 16) x (16, 256) and the like, and 216 us on
// TST's output layer (32, 8192) x (8192, 4); two blocks 8-13 us and 16 us (Cooperlake kernels;
// Haswell's: 25-49 us against 15-16, 178 against 49). At 1 MFLOP OpenBLAS's single-threaded
// small-matrix kernels took 4.8-5.2 us, two blocks 6.1-7.7 (Haswell's: 17-21 us against 9.4-9.6).
inline constexpr double kMinFlopsPerBlock = 1 << 20;
inline constexpr int kBlockAlignment = 16;  // rows or columns: whole vector registers of floats

// How partitioned_host_gemm cuts a (m, n) = (m, k) (k, n) product for `threads` threads: blocks
// of `length` rows (by_rows) or columns, the last one shorter; blocks == 0: not cut.
struct HostGemmPartition {
  bool by_rows = true;
  int length = 0, blocks = 0;
};

inline HostGemmPartition partition_host_gemm(int threads, int m, int n, int k) {
  const double flops = 2.0 * m * n * k;
  const int wanted = static_cast<int>(std::min<double>(threads, flops / kMinFlopsPerBlock));
  if (wanted < 2) return {};
  HostGemmPartition p;
  p.by_rows = m >= n;
  const int extent = p.by_rows ? m : n;
  const int even = (extent + wanted - 1) / wanted;
  p.length = (even + kBlockAlignment - 1) / kBlockAlignment * kBlockAlignment;
  p.blocks = (extent + p.length - 1) / p.length;
  if (p.blocks < 2 || 2 * p.blocks < wanted) return {};
  return p;
}

#if defined(KOKKOSKERNELS_ENABLE_TPL_BLAS)
template <class ExecutionSpace, class T, class ConstMatrix, class Matrix>
bool partitioned_host_gemm(const ExecutionSpace& exec, bool trans_a, bool trans_b, T alpha,
                           const ConstMatrix& a, const ConstMatrix& b, T beta, const Matrix& c) {
  const int m = static_cast<int>(c.extent(0)), n = static_cast<int>(c.extent(1));
  const int k = static_cast<int>(trans_a ? a.extent(0) : a.extent(1));
  const HostGemmPartition p = partition_host_gemm(compat::concurrency(exec), m, n, k);
  if (p.blocks == 0) return false;
  const bool by_rows = p.by_rows;
  const int length = p.length, extent = by_rows ? m : n;
  const int lda = static_cast<int>(a.extent(1)), ldb = static_cast<int>(b.extent(1)), ldc = n;
  const T* const a_data = a.data();
  const T* const b_data = b.data();
  T* const c_data = c.data();
  const HostBlasThreads blas_threads(exec);
  // Host code calling BLAS inside a host parallel loop: only instantiated for host spaces.
  Kokkos::parallel_for(
      KFORMER_LABEL("kformer::gemm::partitioned_blas"),
      Kokkos::RangePolicy<ExecutionSpace>(exec, 0, p.blocks), [=](const int block) {
        const int first = block * length;
        const int count = extent - first < length ? extent - first : length;
        if (by_rows) {  // rows first.. of op(A) and of C
          const T* const a_rows = trans_a ? a_data + first : a_data + std::int64_t(first) * lda;
          blas_gemm_row_major(trans_a, trans_b, count, n, k, alpha, a_rows, lda, b_data, ldb, beta,
                              c_data + std::int64_t(first) * ldc, ldc);
        } else {  // columns first.. of op(B) and of C
          const T* const b_cols = trans_b ? b_data + std::int64_t(first) * ldb : b_data + first;
          blas_gemm_row_major(trans_a, trans_b, m, count, k, alpha, a_data, lda, b_cols, ldb, beta,
                              c_data + first, ldc);
        }
      });
  return true;
}
#endif

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
        KFORMER_LABEL("kformer::gemm::scale_c"),
        Kokkos::RangePolicy<ExecutionSpace, Kokkos::IndexType<std::int64_t>>(
            exec, 0, static_cast<std::int64_t>(c.size())),
        KOKKOS_LAMBDA(const std::int64_t i) {
          data[i] = scale == value_type(0) ? value_type(0) : scale * data[i];
        });
    return;
  }
#if defined(KOKKOSKERNELS_ENABLE_TPL_BLAS)
  if constexpr (!kNative &&
                Kokkos::SpaceAccessibility<Kokkos::HostSpace, memory_space>::accessible &&
                (std::is_same_v<value_type, float> || std::is_same_v<value_type, double>)) {
    if (reproducible_gemm_flag().load(std::memory_order_relaxed)) {
      reproducible_host_gemm(exec, trans_a, trans_b, static_cast<value_type>(alpha), a, b,
                             static_cast<value_type>(beta), c);
      return;
    }
    if (partitioned_host_gemm(exec, trans_a, trans_b, static_cast<value_type>(alpha), a, b,
                              static_cast<value_type>(beta), c))
      return;
    // One BLAS call, threaded by the BLAS, as Kokkos Kernels' BLAS specialisation makes it, but
    // without its wrapper, which names a profiling region with a std::string on the heap at every
    // call. Host execution spaces run kernels to completion before returning, so the call is
    // ordered after the caller's work without a fence.
    const HostBlasThreads threads(exec);
    blas_gemm_row_major(trans_a, trans_b, static_cast<int>(c.extent(0)),
                        static_cast<int>(c.extent(1)), static_cast<int>(k),
                        static_cast<value_type>(alpha), a.data(), static_cast<int>(a.extent(1)),
                        b.data(), static_cast<int>(b.extent(1)), static_cast<value_type>(beta),
                        c.data(), static_cast<int>(c.extent(1)));
    return;
  }
#endif
#if KFORMER_ENABLE_KOKKOS_KERNELS
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
