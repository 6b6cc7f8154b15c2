// The softmax of multi-head attention, forward and backward, over the (B, H, S, S) score rows: one
// row at a time (the functions a kernel or a CPU task calls per row), and as kernels over all rows.
#pragma once

#include <cstdint>
#include <limits>

#include <Kokkos_Core.hpp>

#include "../../backends/rows.hpp"
#include "../../core/math.hpp"
#include "../dropout.hpp"

namespace kformer::impl {

// The maximum (at least the lowest finite T) and the sum of a row on a CPU, as the row helpers
// compute them: 8 interleaved partials combined in a fixed order.
template <class T>
KOKKOS_INLINE_FUNCTION T host_max(const T* a, const int n) {
  const T lowest = Kokkos::reduction_identity<T>::max();
  T partial[8] = {lowest, lowest, lowest, lowest, lowest, lowest, lowest, lowest};
  int j = 0;
  for (; j + 8 <= n; j += 8)
    for (int k = 0; k < 8; ++k)
      partial[k] = a[j + k] > partial[k] ? a[j + k] : partial[k];
  for (int k = 0; j + k < n; ++k)
    partial[k] = a[j + k] > partial[k] ? a[j + k] : partial[k];
  T m = lowest;
  for (int k = 0; k < 8; ++k)
    m = partial[k] > m ? partial[k] : m;
  return m;
}
template <class T>
KOKKOS_INLINE_FUNCTION T host_sum(const T* a, const int n) {
  T partial[8] = {};
  int j = 0;
  for (; j + 8 <= n; j += 8)
    for (int k = 0; k < 8; ++k)
      partial[k] += a[j + k];
  for (int k = 0; j + k < n; ++k)
    partial[k] += a[j + k];
  return ((partial[0] + partial[1]) + (partial[2] + partial[3])) +
         ((partial[4] + partial[5]) + (partial[6] + partial[7]));
}
// The sum of a[j] b[j], in the same order.
template <class T>
KOKKOS_INLINE_FUNCTION T host_dot(const T* a, const T* b, const int n) {
  T partial[8] = {};
  int j = 0;
  for (; j + 8 <= n; j += 8)
    for (int k = 0; k < 8; ++k)
      partial[k] += a[j + k] * b[j + k];
  for (int k = 0; j + k < n; ++k)
    partial[k] += a[j + k] * b[j + k];
  return ((partial[0] + partial[1]) + (partial[2] + partial[3])) +
         ((partial[4] + partial[5]) + (partial[6] + partial[7]));
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

  template <class Member>
  KOKKOS_INLINE_FUNCTION void operator()(const Member& team, const std::int64_t row) const {
    using backends::row_for;
    const int b = static_cast<int>(row / (std::int64_t(heads) * seq));
    const int i = static_cast<int>(row % seq);
    const int n = seq;
    const T minus_inf = neg_inf;
    T* const a = probs + (row - probs_first_row) * seq;
    // Separate passes (masks are the rare case) keep the main loops free of branches.
    if (attn_mask.data() != nullptr) {
      const AttnMask mask = attn_mask;
      row_for(team, n, [=](const int j) { a[j] += mask(i, j); });
    }
    if (key_padding_mask.data() != nullptr) {
      const KeyMask mask = key_padding_mask;
      row_for(team, n, [=](const int j) { a[j] = mask(b, j) ? minus_inf : a[j]; });
    }
    T max_score, sum;
    if constexpr (backends::is_host_member<Member>) {
      // Plain loops over the row: GCC vectorised the exponentials here but not through the row
      // helpers' lambdas (1.1 against 0.6 ns a score on one core).
      max_score = host_max(a, n);
      for (int j = 0; j < n; ++j)
        a[j] = a[j] == minus_inf ? T(0) : math::exp_nonpositive(a[j] - max_score);
      sum = host_sum(a, n);
    } else {
      max_score = backends::row_max<T>(team, n, [=](const int j) { return a[j]; });
      // Each lane only reads back what it wrote: no synchronisation between the loops.
      row_for(team, n, [=](const int j) {
        a[j] = a[j] == minus_inf ? T(0) : math::exp_nonpositive(a[j] - max_score);
      });
      sum = backends::row_sum<T>(team, n, [=](const int j) { return a[j]; });
    }
    const T inv = sum > T(0) ? T(1) / sum : T(0);
    if (!drop) {
      row_for(team, n, [=](const int j) { a[j] *= inv; });
      return;
    }
    T* const out = dropped + (row - dropped_first_row) * seq;
    const T scale = keep_scale;
    const std::uint64_t first_group = static_cast<std::uint64_t>(row) * ((seq + 3) / 4);
    if constexpr (backends::is_host_member<Member>) {
      decide.for_each_keep(first_group, n, [=](const std::int64_t j, const bool keep) {
        a[j] *= inv;
        out[j] = keep ? a[j] * scale : T(0);
      });
    } else {
      // Whole groups of four (straight-line code), then the last partial group.
      const DropoutDecisions decisions = decide;
      row_for(team, n / 4, [=](const int g) {
        bool keep[4];
        decisions.keep4(first_group + g, keep);
        for (int k = 0; k < 4; ++k) {
          const int j = 4 * g + k;
          a[j] *= inv;
          out[j] = keep[k] ? a[j] * scale : T(0);
        }
      });
      const int tail = n - n % 4;
      row_for(team, n % 4, [=](const int k) {
        bool keep[4];
        decisions.keep4(first_group + tail / 4, keep);
        a[tail + k] *= inv;
        out[tail + k] = keep[k] ? a[tail + k] * scale : T(0);
      });
    }
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

  template <class Member>
  KOKKOS_INLINE_FUNCTION void operator()(const Member& team, const std::int64_t row) const {
    const T* const pr = probs + row * seq;
    const T* const kept = dropped + row * seq;
    T* const g = d_probs + row * seq;
    const T keep = keep_scale, s = scale;
    if constexpr (backends::is_host_member<Member>) {  // plain loops: see the forward
      const int n = seq;
      if (drop)
        for (int j = 0; j < n; ++j)
          g[j] = kept[j] != T(0) ? g[j] * keep : T(0);
      const T dot = host_dot(g, pr, n);
      for (int j = 0; j < n; ++j)
        g[j] = s * pr[j] * (g[j] - dot);
    } else {
      if (drop)
        backends::row_for(team, seq,
                          [=](const int j) { g[j] = kept[j] != T(0) ? g[j] * keep : T(0); });
      const T dot = backends::row_sum<T>(team, seq, [=](const int j) { return g[j] * pr[j]; });
      backends::row_for(team, seq, [=](const int j) { g[j] = s * pr[j] * (g[j] - dot); });
    }
  }
};

// The forward rows over all B H S rows as one kernel.
template <class ExecutionSpace, class T, class KeyMask, class AttnMask>
void attention_softmax_forward(const ExecutionSpace& exec,
                               const SoftmaxForwardRows<T, KeyMask, AttnMask>& rows, int batch) {
  backends::for_each_row(exec, "kformer::attention::softmax_fwd",
                         std::int64_t(batch) * rows.heads * rows.seq, rows);
}

// The backward rows over `rows` rows as one kernel.
template <class ExecutionSpace, class T>
void attention_softmax_backward(const ExecutionSpace& exec, const SoftmaxBackwardRows<T>& body,
                                std::int64_t rows) {
  backends::for_each_row(exec, "kformer::attention::softmax_bwd", rows, body);
}

}  // namespace kformer::impl
