// The products of one attention head on a CPU, for fused host attention (attention_host.hpp):
//
//   nt: C (m, n)  = alpha A (m, dh) B (n, dh)^T     scores Q K^T, and dP~ = dO V^T
//   nn: C (m, dh) = A (m, k) B (k, dh)              O = P~ V, and dQ = dA K
//   tn: C (n, dh) = beta C + A (m, n)^T B (m, dh)   dV = P~^T dO, and dK = dA^T Q
//
// At the head widths of the TST models (dh = d_model / heads: 8 and 16 in the perf suite) each
// product is a few tens of thousands of multiply-adds, and OpenBLAS spends about 1 us of set-up
// per call, under a lock when threads call it at once: 2 threads did 256 (64, 8) x (8, 64)
// products in 0.23 ms, 1 thread in 0.28. For dh in {8, 16, 32} these loops do them instead, with
// dh fixed at compile time so that the compiler keeps the accumulators in vector registers; other
// widths go to the BLAS.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "../../../backends/impl/host_blas.hpp"
#include "../../../backends/impl/host_vector.hpp"

namespace kformer::impl::head {

#if defined(KOKKOSKERNELS_ENABLE_TPL_BLAS)

// The loops need GCC's vector extension (GCC, Clang and the compilers built on them) in a host
// pass; elsewhere every width goes to the BLAS.
#if defined(KFORMER_HOST_VECTORS)
using backends::host_vector::kLanes;
using backends::host_vector::kVectorBytes;
using backends::host_vector::load;
using backends::host_vector::store;
using backends::host_vector::Vec;
using backends::host_vector::VectorOf;

// block[l][w] = B(j0 + w, l): C columns of B's rows from j0, transposed, for the nt loops.
template <int DH, int C, class T>
void transpose_rows(const T* b, int ldb, int j0, T (&block)[DH][C]) {
  for (int w = 0; w < C; ++w)
    for (int l = 0; l < DH; ++l)
      block[l][w] = b[std::int64_t(j0 + w) * ldb + l];
}

// nt for C's columns [j0, j0 + kLanes): B's rows j0.. transposed into a local block, then every
// row of C in turn.
template <int DH, class T>
void nt_columns(int m, int j0, T alpha, const T* a, int lda, const T* b, int ldb, T* c, int ldc) {
  constexpr int W = kLanes<T>;
  T block[DH][W];
  transpose_rows(b, ldb, j0, block);
  Vec<T> bt[DH];
  for (int l = 0; l < DH; ++l)
    load(bt[l], block[l]);
  for (int r = 0; r < m; ++r) {
    const T* const ar = a + std::int64_t(r) * lda;
    Vec<T> acc = ar[0] * bt[0];
    for (int l = 1; l < DH; ++l)
      acc += ar[l] * bt[l];
    acc *= alpha;
    store(c + std::int64_t(r) * ldc + j0, acc);
  }
}

// Columns of C per nt_panel.
inline constexpr int kPanelColumns = 64;

// nt for C's columns [j0, j0 + kPanelColumns), DH = 8: B's rows j0.. transposed into a local
// block, then each row of C's panel, a whole vector at a time. The same sums in the same order as
// nt_columns, so the same bits, but each row's kPanelColumns results are stored together instead
// of one vector of each row in turn. With S columns, a block's rows of C are S floats apart, and
// column by column those stores ran 2x slower from S = 512 on (one core, 64 rows x 1024 columns:
// 16.5 -> 8.2 us; 128 x 512: 14.6 -> 7.1; 128 x 128 unchanged, 1.8). At DH = 16 it was slower at
// S = 128 (3.5 -> 5.8 us), and no faster at 1024.
template <int DH, class T>
void nt_panel(int m, int j0, T alpha, const T* a, int lda, const T* b, int ldb, T* c, int ldc) {
  constexpr int W = kLanes<T>;
  alignas(kVectorBytes) T block[DH][kPanelColumns];
  transpose_rows(b, ldb, j0, block);
  for (int r = 0; r < m; ++r) {
    const T* const ar = a + std::int64_t(r) * lda;
    T* const cr = c + std::int64_t(r) * ldc + j0;
    for (int w = 0; w < kPanelColumns; w += W) {
      Vec<T> bl;
      load(bl, &block[0][w]);
      Vec<T> acc = ar[0] * bl;
      for (int l = 1; l < DH; ++l) {
        load(bl, &block[l][w]);
        acc += ar[l] * bl;
      }
      acc *= alpha;
      store(cr + w, acc);
    }
  }
}

// Rows of C R at a time for two vectors of columns (from nt_column_pairs' block): each element
// of A is broadcast once for both vectors.
template <int DH, int R, class T>
void nt_pair_rows(int r0, int j0, T alpha, const T* a, int lda, const T (&block)[DH][2 * kLanes<T>],
                  T* c, int ldc) {
  constexpr int W = kLanes<T>;
  Vec<T> acc[R][2], b0, b1;
  load(b0, &block[0][0]);
  load(b1, &block[0][W]);
  for (int q = 0; q < R; ++q) {
    const T x = a[std::int64_t(r0 + q) * lda];
    acc[q][0] = x * b0;
    acc[q][1] = x * b1;
  }
  for (int l = 1; l < DH; ++l) {
    load(b0, &block[l][0]);
    load(b1, &block[l][W]);
    for (int q = 0; q < R; ++q) {
      const T x = a[std::int64_t(r0 + q) * lda + l];
      acc[q][0] += x * b0;
      acc[q][1] += x * b1;
    }
  }
  for (int q = 0; q < R; ++q) {
    T* const cr = c + std::int64_t(r0 + q) * ldc + j0;
    store(cr, acc[q][0] * alpha);
    store(cr + W, acc[q][1] * alpha);
  }
}

// Rows of C per nt_pair_rows.
inline constexpr int kPairRows = 6;

// nt for C's columns [j0, j0 + 2 kLanes): B's rows j0.. transposed into a local block, then
// kPairRows rows of C at a time (nt_pair_rows). The same sums in the same order as nt_columns, so
// the same bits. nt_columns holds its block in DH vector registers and broadcasts A's elements
// from memory, one a multiply: at DH = 32 its block does not fit in the registers, and at DH = 16
// with many columns its stores, rows of C S floats apart, go one vector of each row in turn. On
// one core (two alternated runs), DH = 32: 128 x 128 11.5-13.1 -> 6.9-7.0 us, 64 x 1024 51-53 ->
// 34; DH = 16: 64 x 1024 25-27 -> 17.1-17.5, while 128 x 512 (12.4-13.2 against 13.1-13.4) and
// 128 x 128 (3.4 against 3.8 in a harness) did not gain, so DH = 16 takes it from 1024 columns
// on. Of 4, 6 and 8 rows at a time, 6 was fastest.
template <int DH, class T>
void nt_column_pairs(int m, int j0, T alpha, const T* a, int lda, const T* b, int ldb, T* c,
                     int ldc) {
  alignas(kVectorBytes) T block[DH][2 * kLanes<T>];
  transpose_rows(b, ldb, j0, block);
  int r = 0;
  for (; r + kPairRows <= m; r += kPairRows)
    nt_pair_rows<DH, kPairRows>(r, j0, alpha, a, lda, block, c, ldc);
  for (; r < m; ++r)
    nt_pair_rows<DH, 1>(r, j0, alpha, a, lda, block, c, ldc);
}

template <int DH, class T>
void nt(int m, int n, T alpha, const T* a, int lda, const T* b, int ldb, T* c, int ldc) {
  constexpr int W = kLanes<T>;
  int j = 0;
  if constexpr (DH == 8) {
    for (; j + kPanelColumns <= n; j += kPanelColumns)
      nt_panel<DH>(m, j, alpha, a, lda, b, ldb, c, ldc);
  } else if (DH == 32 || n >= 1024) {
    for (; j + 2 * W <= n; j += 2 * W)
      nt_column_pairs<DH>(m, j, alpha, a, lda, b, ldb, c, ldc);
  }
  for (; j + W <= n; j += W)
    nt_columns<DH>(m, j, alpha, a, lda, b, ldb, c, ldc);
  for (; j < n; ++j)  // the last columns one at a time
    for (int r = 0; r < m; ++r) {
      T sum = 0;
      for (int l = 0; l < DH; ++l)
        sum += a[std::int64_t(r) * lda + l] * b[std::int64_t(j) * ldb + l];
      c[std::int64_t(r) * ldc + j] = alpha * sum;
    }
}

// Rows of DH elements as vectors: DH / (lanes of a vector) of them, or one narrower vector where
// a row is less than one (DH = 8 in float with AVX-512: a whole vector would read past the row).
template <int DH, class T>
struct HeadRow {
  static constexpr int kWidth =
      DH * int(sizeof(T)) >= kVectorBytes ? kVectorBytes : DH * int(sizeof(T));
  using V = typename VectorOf<T, kWidth>::type;
  static constexpr int kVectors = DH * int(sizeof(T)) / kWidth;
  V v[kVectors] = {};  // zero

  void load(const T* p) { std::memcpy(v, p, sizeof(v)); }
  void store(T* p) const { std::memcpy(p, v, sizeof(v)); }
  void add_scaled(T s, const HeadRow& x) {
    for (int i = 0; i < kVectors; ++i)
      v[i] += s * x.v[i];
  }
};

// Rows of C per pass of nn and tn: independent accumulators, so that the additions' latency
// overlaps.
inline constexpr int kRows = 8;

// nn for C's rows [r0, r0 + R): R independent accumulator rows.
template <int DH, int R, class T>
void nn_rows(int r0, int k, const T* a, int lda, const T* b, int ldb, T* c, int ldc) {
  using Row = HeadRow<DH, T>;
  Row acc[R];
  for (int j = 0; j < k; ++j) {
    Row bj;
    bj.load(b + std::int64_t(j) * ldb);
    for (int q = 0; q < R; ++q)
      acc[q].add_scaled(a[std::int64_t(r0 + q) * lda + j], bj);
  }
  for (int q = 0; q < R; ++q)
    acc[q].store(c + std::int64_t(r0 + q) * ldc);
}

// tn for C's rows [j0, j0 + R), which are columns j0.. of A.
template <int DH, int R, class T>
void tn_rows(int m, int j0, const T* a, int lda, const T* b, int ldb, T beta, T* c, int ldc) {
  using Row = HeadRow<DH, T>;
  Row acc[R];
  for (int r = 0; r < m; ++r) {
    Row br;
    br.load(b + std::int64_t(r) * ldb);
    const T* const ar = a + std::int64_t(r) * lda + j0;
    for (int q = 0; q < R; ++q)
      acc[q].add_scaled(ar[q], br);
  }
  for (int q = 0; q < R; ++q) {
    T* const cj = c + std::int64_t(j0 + q) * ldc;
    if (beta != T(0)) {
      Row previous;
      previous.load(cj);
      acc[q].add_scaled(beta, previous);
    }
    acc[q].store(cj);
  }
}

// Where a head row is half a vector (DH = 8 in float with AVX-512), tn_rows' vectors are half
// empty. tn_row_pairs fills them: rows j0 + 2q and j0 + 2q + 1 of C share a vector, lanes
// interleaved, so that B's row r with each element twice multiplies the pair A(r, j0 + 2q),
// A(r, j0 + 2q + 1), broadcast as one double-width word. Each lane sums the same products in the
// same order as in tn_rows: the same bits. dV = P~^T dO at S = 64 took 0.46-0.48 us on one core
// against 0.73-0.75 with tn_rows. It needs __builtin_shufflevector (Clang, GCC 12 and later).
#if defined(__has_builtin)
#if __has_builtin(__builtin_shufflevector)
#define KFORMER_HOST_ROW_PAIRS 1

// The lane shuffles of the two pair loops below, on float vectors of 16 lanes and their halves
// (HalfVec: one head row of 8). Out-parameters, as everywhere here: see host_vector.hpp.
template <class T>
using HalfVec = typename VectorOf<T, kVectorBytes / 2>::type;

// pair = the two values at p, repeated through the vector: p[0], p[1], p[0], p[1], ...
template <class T>
void broadcast_pair(Vec<T>& pair, const T* p) {
  using PairWords = typename VectorOf<std::uint64_t, kVectorBytes>::type;
  std::uint64_t word;
  std::memcpy(&word, p, sizeof(word));
  const PairWords words = PairWords{} + word;  // the word in every lane
  std::memcpy(&pair, &words, sizeof(pair));
}

// out = x[0], y[0], x[1], y[1], ..., x[7], y[7].
template <class T>
void interleave(Vec<T>& out, const HalfVec<T>& x, const HalfVec<T>& y) {
  out = __builtin_shufflevector(x, y, 0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
}

// even = v's lanes 0, 2, ..., 14; odd = lanes 1, 3, ..., 15.
template <class T>
void split_lanes(HalfVec<T>& even, HalfVec<T>& odd, const Vec<T>& v) {
  even = __builtin_shufflevector(v, v, 0, 2, 4, 6, 8, 10, 12, 14);
  odd = __builtin_shufflevector(v, v, 1, 3, 5, 7, 9, 11, 13, 15);
}

// tn for C's rows [j0, j0 + 16), DH = 8, where a head row is half a vector (kLanes<T> == 16).
template <class T>
void tn_row_pairs(int m, int j0, const T* a, int lda, const T* b, int ldb, T beta, T* c, int ldc) {
  static_assert(kLanes<T> == 16 && sizeof(T) == 4, "two rows of 8 floats to a vector");
  using Row = HeadRow<8, T>;  // one vector of half width
  Vec<T> acc[8] = {};
  for (int r = 0; r < m; ++r) {
    Row br;
    br.load(b + std::int64_t(r) * ldb);
    Vec<T> b_twice;
    interleave<T>(b_twice, br.v[0], br.v[0]);
    const T* const ar = a + std::int64_t(r) * lda + j0;
    for (int q = 0; q < 8; ++q) {
      Vec<T> pair;
      broadcast_pair(pair, ar + 2 * q);
      acc[q] += pair * b_twice;
    }
  }
  for (int q = 0; q < 8; ++q) {
    Row rows[2];
    split_lanes<T>(rows[0].v[0], rows[1].v[0], acc[q]);
    for (int i = 0; i < 2; ++i) {  // as tn_rows stores its rows
      T* const cj = c + std::int64_t(j0 + 2 * q + i) * ldc;
      if (beta != T(0)) {
        Row previous;
        previous.load(cj);
        rows[i].add_scaled(beta, previous);
      }
      rows[i].store(cj);
    }
  }
}

// nn's vectors are half empty in the same way (C's rows are rows of 8). nn_k_pairs fills them by
// splitting the sum over k instead: for C's row r = r0 + q, lane 2l sums A(r, j) B(j, l) over the
// even j and lane 2l + 1 over the odd j, so that the pair A(r, j), A(r, j + 1), broadcast as one
// double-width word, multiplies B's rows j and j + 1 interleaved; the two halves are added at the
// end. That is another order of additions than one sum over j (other bits, as a BLAS would give).
// O = P~ V at S = 128 took 2.1 us on one core against 3.3 with nn_rows, at S = 64 0.49 against
// 0.80 (with 8 rows a pass instead of 16: 2.2 and 0.56).
template <int R, class T>
void nn_k_pairs(int r0, int k, const T* a, int lda, const T* b, int ldb, T* c, int ldc) {
  static_assert(kLanes<T> == 16 && sizeof(T) == 4, "two rows of 8 floats to a vector");
  using Row = HeadRow<8, T>;  // one vector of half width
  Vec<T> acc[R] = {};
  int j = 0;
  for (; j + 2 <= k; j += 2) {
    Row b_even, b_odd;
    b_even.load(b + std::int64_t(j) * ldb);
    b_odd.load(b + std::int64_t(j + 1) * ldb);
    Vec<T> b_pair;
    interleave<T>(b_pair, b_even.v[0], b_odd.v[0]);
    for (int q = 0; q < R; ++q) {
      Vec<T> pair;
      broadcast_pair(pair, a + std::int64_t(r0 + q) * lda + j);
      acc[q] += pair * b_pair;
    }
  }
  for (int q = 0; q < R; ++q) {
    HalfVec<T> even, odd;
    split_lanes<T>(even, odd, acc[q]);
    Row row;
    row.v[0] = even + odd;
    if (j < k) {  // an odd k's last term
      Row b_last;
      b_last.load(b + std::int64_t(j) * ldb);
      row.add_scaled(a[std::int64_t(r0 + q) * lda + j], b_last);
    }
    row.store(c + std::int64_t(r0 + q) * ldc);
  }
}
#endif
#endif

template <int DH, class T>
void nn(int m, int k, const T* a, int lda, const T* b, int ldb, T* c, int ldc) {
  int r = 0;
#if defined(KFORMER_HOST_ROW_PAIRS)
  if constexpr (DH == 8 && kLanes<T> == 16) {
    for (; r + 16 <= m; r += 16)
      nn_k_pairs<16>(r, k, a, lda, b, ldb, c, ldc);
    for (; r + 4 <= m; r += 4)
      nn_k_pairs<4>(r, k, a, lda, b, ldb, c, ldc);
    for (; r < m; ++r)
      nn_k_pairs<1>(r, k, a, lda, b, ldb, c, ldc);
    return;
  }
#endif
  for (; r + kRows <= m; r += kRows)
    nn_rows<DH, kRows>(r, k, a, lda, b, ldb, c, ldc);
  for (; r < m; ++r)
    nn_rows<DH, 1>(r, k, a, lda, b, ldb, c, ldc);
}

template <int DH, class T>
void tn(int m, int n, const T* a, int lda, const T* b, int ldb, T beta, T* c, int ldc) {
  int j = 0;
#if defined(KFORMER_HOST_ROW_PAIRS)
  if constexpr (DH == 8 && kLanes<T> == 16)
    for (; j + 16 <= n; j += 16)
      tn_row_pairs(m, j, a, lda, b, ldb, beta, c, ldc);
#endif
  for (; j + kRows <= n; j += kRows)
    tn_rows<DH, kRows>(m, j, a, lda, b, ldb, beta, c, ldc);
  for (; j < n; ++j)
    tn_rows<DH, 1>(m, j, a, lda, b, ldb, beta, c, ldc);
}

// Calls f with std::integral_constant<int, dh> for the widths with loops of their own; returns
// false (f not called) for the others.
template <class F>
bool with_head_width(int dh, const F& f) {
  switch (dh) {
    case 8:
      f(std::integral_constant<int, 8>());
      return true;
    case 16:
      f(std::integral_constant<int, 16>());
      return true;
    case 32:
      f(std::integral_constant<int, 32>());
      return true;
    default:
      return false;
  }
}
#endif

// The three products of one head, by head width.
template <class T>
void product_nt(int dh, int m, int n, T alpha, const T* a, int lda, const T* b, int ldb, T* c,
                int ldc) {
#if defined(KFORMER_HOST_VECTORS)
  if (with_head_width(
          dh, [&](auto width) { nt<decltype(width)::value>(m, n, alpha, a, lda, b, ldb, c, ldc); }))
    return;
#endif
  backends::impl::blas_gemm_row_major(false, true, m, n, dh, alpha, a, lda, b, ldb, T(0), c, ldc);
}

template <class T>
void product_nn(int dh, int m, int k, const T* a, int lda, const T* b, int ldb, T* c, int ldc) {
#if defined(KFORMER_HOST_VECTORS)
  if (with_head_width(
          dh, [&](auto width) { nn<decltype(width)::value>(m, k, a, lda, b, ldb, c, ldc); }))
    return;
#endif
  backends::impl::blas_gemm_row_major(false, false, m, dh, k, T(1), a, lda, b, ldb, T(0), c, ldc);
}

template <class T>
void product_tn(int dh, int m, int n, const T* a, int lda, const T* b, int ldb, T beta, T* c,
                int ldc) {
#if defined(KFORMER_HOST_VECTORS)
  if (with_head_width(
          dh, [&](auto width) { tn<decltype(width)::value>(m, n, a, lda, b, ldb, beta, c, ldc); }))
    return;
#endif
  backends::impl::blas_gemm_row_major(true, false, n, dh, m, T(1), a, lda, b, ldb, beta, c, ldc);
}

#endif

}  // namespace kformer::impl::head
