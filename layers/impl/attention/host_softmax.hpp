// The softmax rows of the CPU specialisation of attention (host.hpp), forward and backward: each
// task's block of score rows in its scratch, a step at a time over the block's rows.
#pragma once

#include <cstdint>
#include <limits>
#include <type_traits>

#include <Kokkos_Core.hpp>

#include "../../../backends/impl/host_vector.hpp"
#include "../../../core/math.hpp"
#include "../../dropout.hpp"

namespace kformer::impl {

// The maximum (at least the lowest finite T) of a row on a CPU. With kMasked, a[j] is first set to
// minus_inf where masked[j] != 0 (masked is not read otherwise), which leaves it out. GCC made the
// scalar form's partial maxima, and a pass of its own for the mask, scalar code in the softmax;
// the vector form is 8 lanes wide on AVX2.
template <bool kMasked, class T>
KOKKOS_INLINE_FUNCTION T host_mask_and_max(T* a, const unsigned char* masked, const int n,
                                           const T minus_inf) {
  const T lowest = Kokkos::reduction_identity<T>::max();
  int j = 0;
  T m = lowest;
#if defined(KFORMER_HOST_VECTORS)
  namespace hv = backends::host_vector;
  constexpr int W = hv::kLanes<T>;
  hv::Vec<T> partial = hv::Vec<T>{} + lowest;
  for (; j + W <= n; j += W) {
    hv::Vec<T> x;
    hv::load(x, a + j);
    // GCC widens bytes to lanes element by element: only where a key of the W is masked.
    if (kMasked && hv::any_byte_set<W>(masked + j)) {
      hv::MaskVec<T> skip;
      for (int k = 0; k < W; ++k)
        skip[k] = masked[j + k];
      x = skip != 0 ? minus_inf : x;
      hv::store(a + j, x);
    }
    partial = x > partial ? x : partial;
  }
  for (int k = 0; k < W; ++k)
    m = partial[k] > m ? partial[k] : m;
#endif
  for (; j < n; ++j) {
    if (kMasked && masked[j] != 0) a[j] = minus_inf;
    m = a[j] > m ? a[j] : m;
  }
  return m;
}
// a[j] = minus_inf where masked[j] != 0, on a CPU: the key padding mask of a row whose maximum is
// known already. Groups of keys with none masked (the common case) cost one word test.
template <class T>
KOKKOS_INLINE_FUNCTION void host_mask_keys(T* a, const unsigned char* masked, const int n,
                                           const T minus_inf) {
  int j = 0;
#if defined(KFORMER_HOST_VECTORS)
  constexpr int W = backends::host_vector::kLanes<T>;
  for (; j + W <= n; j += W)
    if (backends::host_vector::any_byte_set<W>(masked + j))
      for (int k = 0; k < W; ++k)
        if (masked[j + k] != 0) a[j + k] = minus_inf;
#endif
  for (; j < n; ++j)
    if (masked[j] != 0) a[j] = minus_inf;
}
// The sum of a row on a CPU (of a[j] with kProducts false, of a[j] b[j] with it true), as the row
// helpers compute it: 8 interleaved partials combined in a fixed order. The partials are one
// vector of 8 lanes where the extension is there: inlined into the softmax, GCC made the scalar
// form's partials scalar additions through general registers.
template <bool kProducts, class T>
KOKKOS_INLINE_FUNCTION T host_row_sum(const T* a, const T* b, const int n) {
  T partial[8] = {};
  int j = 0;
#if defined(KFORMER_HOST_VECTORS)
  namespace hv = backends::host_vector;
  typename hv::VectorOf<T, 8 * sizeof(T)>::type sums{}, x, y;
  for (; j + 8 <= n; j += 8) {
    hv::load(x, a + j);
    if constexpr (kProducts) {
      hv::load(y, b + j);
      x = x * y;
    }
    sums += x;
  }
  hv::store(partial, sums);
#endif
  for (; j + 8 <= n; j += 8)
    for (int k = 0; k < 8; ++k)
      partial[k] += kProducts ? a[j + k] * b[j + k] : a[j + k];
  for (int k = 0; j + k < n; ++k)
    partial[k] += kProducts ? a[j + k] * b[j + k] : a[j + k];
  return ((partial[0] + partial[1]) + (partial[2] + partial[3])) +
         ((partial[4] + partial[5]) + (partial[6] + partial[7]));
}
template <class T>
KOKKOS_INLINE_FUNCTION T host_sum(const T* a, const int n) {
  return host_row_sum<false>(a, static_cast<const T*>(nullptr), n);
}
template <class T>
KOKKOS_INLINE_FUNCTION T host_dot(const T* a, const T* b, const int n) {
  return host_row_sum<true>(a, b, n);
}

// A softmax row's numerators on a CPU: a[j] <- exp(a[j] - max_score), 0 where a[j] = -inf. A
// plain loop: GCC vectorises the exponentials here, but not through the row helpers' lambdas (1.1
// against 0.6 ns a score on one core).
template <class T>
KOKKOS_INLINE_FUNCTION void host_exponentials(T* a, const int n, const T max_score,
                                              const T minus_inf) {
  for (int j = 0; j < n; ++j)
    a[j] = a[j] == minus_inf ? T(0) : math::exp_nonpositive(a[j] - max_score);
}

// A softmax row on a CPU from its known maximum and inverse sum: a[j] <- exp(a[j] - max_score) *
// inverse_sum, 0 where a[j] = -inf. host_exponentials and the normalisation's multiplication in
// one pass, the same operations on each score.
template <class T>
KOKKOS_INLINE_FUNCTION void host_normalised_exponentials(T* a, const int n, const T max_score,
                                                         const T inverse_sum, const T minus_inf) {
  for (int j = 0; j < n; ++j)
    a[j] = (a[j] == minus_inf ? T(0) : math::exp_nonpositive(a[j] - max_score)) * inverse_sum;
}

// Row `row` = (b, h, i) of the (B, H, S, S) scores: P = softmax_j(A[j] + attn_mask[i, j]), where
// keys masked by key_padding_mask[b, j] and scores of -inf (an additive mask's way to block a key)
// get exactly 0; a row with no other key is all 0. With dropout, dropped = P * m / (1 - p), m from
// `decide` at group row * ceil(S / 4) + j / 4, lane j % 4; otherwise dropped is not touched.
template <class T, class KeyMask, class AttnMask>
struct SoftmaxForwardRows {
  // The scores in, P out, and P with dropout (when drop): row `row` of each at
  // (row - first_row) * S, first_row 0 for a (B, H, S, S) buffer and a block's first row for a
  // block of rows in scratch.
  T* probs;
  std::int64_t probs_first_row;
  T* dropped;
  std::int64_t dropped_first_row;
  int heads, seq;
  KeyMask key_padding_mask;  // (B, S) or empty
  AttnMask attn_mask;        // (S, S) or empty
  bool drop;
  DropoutDecisions decide;
  T keep_scale;  // 1 / (1 - p)
  T neg_inf;     // numeric_limits is host-only for nvcc: set on the host
  // Each row's maximum and inverse sum, at the row's index, where host_rows stores them for
  // host_rows_from_stats (the backward's recomputation on a CPU); nullptr where nobody needs them.
  T* row_max = nullptr;
  T* row_inverse_sum = nullptr;

  // Rows first_row .. first_row + count on a CPU, one step at a time over all of them (masks and
  // maxima, exponentials, sums, normalisation, dropout) instead of all steps of one row and then
  // the next: a row's steps wait on each other (its maximum, its exponentials, their sum, the
  // division), different rows' do not, so the core overlaps them; and the dropout decisions of all
  // rows are one sweep. Each score goes through the same operations as row by row: the same bits.
  // On one core, 64 rows of S = 64: 2.1 -> 1.6 us without dropout, 3.2 -> 2.0 with it.
  KOKKOS_INLINE_FUNCTION void host_rows(const std::int64_t first_row, const int count) const {
    const int n = seq;
    const T minus_inf = neg_inf;
    T maxima[kHostChunk], inverses[kHostChunk];
    for (int c0 = 0; c0 < count; c0 += kHostChunk) {
      const int rows = count - c0 < kHostChunk ? count - c0 : kHostChunk;
      const std::int64_t chunk_row = first_row + c0;
      T* const chunk = probs + (chunk_row - probs_first_row) * n;
      for (int r = 0; r < rows; ++r) {
        T* const a = chunk + std::int64_t(r) * n;
        if (attn_mask.data() != nullptr) host_add_attn_mask(a, chunk_row + r);
        // The key padding mask is read inside the maximum's loop: as a pass of its own, GCC made
        // it a scalar loop of conditional stores, 42 % of the fused attention kernel's own time in
        // TST inference at (32, 128) h8.
        maxima[r] = key_padding_mask.data() != nullptr
                        ? host_mask_and_max<true>(a, host_key_mask(chunk_row + r), n, minus_inf)
                        : host_mask_and_max<false>(a, nullptr, n, minus_inf);
      }
      for (int r = 0; r < rows; ++r)
        host_exponentials(chunk + std::int64_t(r) * n, n, maxima[r], minus_inf);
      for (int r = 0; r < rows; ++r) {
        const T sum = host_sum(chunk + std::int64_t(r) * n, n);
        inverses[r] = sum > T(0) ? T(1) / sum : T(0);
      }
      if (row_max != nullptr)
        for (int r = 0; r < rows; ++r) {
          row_max[chunk_row + r] = maxima[r];
          row_inverse_sum[chunk_row + r] = inverses[r];
        }
      for (int r = 0; r < rows; ++r) {
        T* const a = chunk + std::int64_t(r) * n;
        const T inv = inverses[r];
        for (int j = 0; j < n; ++j)
          a[j] *= inv;
      }
      if (drop) host_dropout(chunk_row, rows, chunk);
    }
  }

  // host_rows for rows whose maxima and inverse sums host_rows stored (row_max, row_inverse_sum):
  // the backward's recomputation of P and P~ without the passes that found them. The same
  // operations on each score: the same bits. On one core, 64 rows of S = 128 with a key padding
  // mask: 2.7 -> 1.9 us, 3.8 -> 3.0-3.5 us with dropout (the exponentials are most of the rest).
  KOKKOS_INLINE_FUNCTION void host_rows_from_stats(const std::int64_t first_row,
                                                   const int count) const {
    const int n = seq;
    const T minus_inf = neg_inf;
    for (int c0 = 0; c0 < count; c0 += kHostChunk) {
      const int rows = count - c0 < kHostChunk ? count - c0 : kHostChunk;
      const std::int64_t chunk_row = first_row + c0;
      T* const chunk = probs + (chunk_row - probs_first_row) * n;
      for (int r = 0; r < rows; ++r) {
        const std::int64_t row = chunk_row + r;
        T* const a = chunk + std::int64_t(r) * n;
        if (attn_mask.data() != nullptr) host_add_attn_mask(a, row);
        if (key_padding_mask.data() != nullptr) host_mask_keys(a, host_key_mask(row), n, minus_inf);
        host_normalised_exponentials(a, n, row_max[row], row_inverse_sum[row], minus_inf);
      }
      if (drop) host_dropout(chunk_row, rows, chunk);
    }
  }

  // Rows a CPU task's softmax takes a step at a time: their maxima and sums stay on the stack, and
  // 64 rows of up to 128 scores stay in the first-level cache between the steps.
  static constexpr int kHostChunk = 64;

  // Row `row`'s scores a += its row of the additive attention mask, on a CPU. A pass of its own
  // (attention masks are the rare case) keeps the main loops free of it.
  KOKKOS_INLINE_FUNCTION void host_add_attn_mask(T* a, const std::int64_t row) const {
    const int i = static_cast<int>(row % seq);
    for (int j = 0; j < seq; ++j)
      a[j] += attn_mask(i, j);
  }

  // The key padding mask's row for row `row`, as bytes: GCC vectorises no loads of bool.
  KOKKOS_INLINE_FUNCTION const unsigned char* host_key_mask(const std::int64_t row) const {
    static_assert(std::is_same_v<typename KeyMask::array_layout, Kokkos::LayoutRight>,
                  "the row of key_padding_mask is read as contiguous bools");
    const int b = static_cast<int>(row / (std::int64_t(heads) * seq));
    return reinterpret_cast<const unsigned char*>(&key_padding_mask(b, 0));
  }

  // P~ = P * keep_scale where kept, 0 where dropped, for `rows` rows of P from chunk_row at chunk.
  KOKKOS_INLINE_FUNCTION void host_dropout(const std::int64_t chunk_row, const int rows,
                                           const T* chunk) const {
    T* const out = dropped + (chunk_row - dropped_first_row) * seq;
    const T scale = keep_scale;
    decide.for_each_keep_in_rows(
        static_cast<std::uint64_t>(chunk_row), rows, seq,
        [=](const std::int64_t e, const bool keep) { out[e] = keep ? chunk[e] * scale : T(0); });
  }
};

template <class T, class KeyMask, class AttnMask>
SoftmaxForwardRows<T, KeyMask, AttnMask> softmax_forward_rows(
    T* probs, T* dropped, int heads, int seq, const KeyMask& key_padding_mask,
    const AttnMask& attn_mask, bool drop, const DropoutDecisions& decide, T keep_scale) {
  return {probs, 0,      dropped,          0,
          heads, seq,    key_padding_mask, attn_mask,
          drop,  decide, keep_scale,       -std::numeric_limits<T>::infinity()};
}

// Row `row` of the scores: d_probs <- dA = scale * P * (dP - rowsum(dP * P)), with
// dP = d_probs * m / (1 - p) where the entry was kept by dropout (dropped != 0) and 0 where it was
// dropped (or P was 0: the gradient is zero either way).
template <class T>
struct SoftmaxBackwardRows {
  const T* probs;
  const T* dropped;
  T* d_probs;
  int seq;
  bool drop;
  T keep_scale, scale;

  // Row `row` of the block (its first row is 0).
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t row) const {
    const T* const pr = probs + row * seq;
    const T* const kept = dropped + row * seq;
    T* const g = d_probs + row * seq;
    const T keep = keep_scale, s = scale;
    const int n = seq;
    if (drop)
      for (int j = 0; j < n; ++j)
        g[j] = kept[j] != T(0) ? g[j] * keep : T(0);
    const T dot = host_dot(g, pr, n);
    for (int j = 0; j < n; ++j)
      g[j] = s * pr[j] * (g[j] - dot);
  }
};

}  // namespace kformer::impl
