// The softmax of multi-head attention, forward and backward, over the (B, H, S, S) score rows.
#pragma once

#include <cstdint>
#include <limits>

#include <Kokkos_Core.hpp>

#include "../../backends/rows.hpp"
#include "../../core/math.hpp"
#include "../dropout.hpp"

namespace kformer::impl {

// Row (b, h, i) of probs: P = softmax_j(A[j] + attn_mask[i, j]), where keys masked by
// key_padding_mask[b, j] and scores of -inf (an additive mask's way to block a key) get exactly 0;
// a row with no other key is all 0. With dropout, dropped = P * m / (1 - p), m from `decide` at
// group row * ceil(S / 4) + j / 4, lane j % 4; otherwise dropped is not touched.
template <class ExecutionSpace, class T, class KeyMask, class AttnMask>
void attention_softmax_forward(const ExecutionSpace& exec, T* probs, T* dropped, int batch,
                               int heads, int seq, const KeyMask& key_padding_mask,
                               const AttnMask& attn_mask, bool drop, const DropoutDecisions& decide,
                               T keep_scale) {
  using backends::row_for;
  const bool has_kpm = key_padding_mask.data() != nullptr, has_mask = attn_mask.data() != nullptr;
  const std::int64_t rows_per_batch = std::int64_t(heads) * seq;
  const int groups = (seq + 3) / 4;                       // dropout decisions come four at a time
  const T neg_inf = -std::numeric_limits<T>::infinity();  // numeric_limits is host-only for nvcc
  backends::for_each_row(
      exec, "kformer::attention::softmax_fwd", std::int64_t(batch) * rows_per_batch,
      KOKKOS_LAMBDA(const typename Kokkos::TeamPolicy<ExecutionSpace>::member_type& team,
                    const std::int64_t row) {
        const int b = static_cast<int>(row / rows_per_batch);
        const int i = static_cast<int>(row % seq);
        T* const a = probs + row * seq;
        // Separate passes (masks are the rare case) keep the main loops free of branches.
        if (has_mask) row_for(team, seq, [=](const int j) { a[j] += attn_mask(i, j); });
        if (has_kpm)
          row_for(team, seq, [=](const int j) { a[j] = key_padding_mask(b, j) ? neg_inf : a[j]; });
        const T max_score = backends::row_max<T>(team, seq, [=](const int j) { return a[j]; });
        // Each lane only reads back what it wrote: no synchronisation between the loops.
        row_for(team, seq,
                [=](const int j) { a[j] = a[j] == neg_inf ? T(0) : math::exp(a[j] - max_score); });
        const T sum = backends::row_sum<T>(team, seq, [=](const int j) { return a[j]; });
        const T inv = sum > T(0) ? T(1) / sum : T(0);
        if (!drop) {
          row_for(team, seq, [=](const int j) { a[j] *= inv; });
          return;
        }
        T* const out = dropped + row * seq;
        const std::uint64_t first_group = static_cast<std::uint64_t>(row) * groups;
        if constexpr (backends::runs_on_host<ExecutionSpace>) {
          decide.for_each_keep(first_group, seq, [=](const std::int64_t j, const bool keep) {
            a[j] *= inv;
            out[j] = keep ? a[j] * keep_scale : T(0);
          });
          return;
        }
        // On a GPU: whole groups of four (straight-line code), then the last partial group.
        row_for(team, seq / 4, [=](const int g) {
          bool keep[4];
          decide.keep4(first_group + g, keep);
          for (int k = 0; k < 4; ++k) {
            const int j = 4 * g + k;
            a[j] *= inv;
            out[j] = keep[k] ? a[j] * keep_scale : T(0);
          }
        });
        const int tail = seq - seq % 4;
        row_for(team, seq % 4, [=](const int k) {
          bool keep[4];
          decide.keep4(first_group + tail / 4, keep);
          a[tail + k] *= inv;
          out[tail + k] = keep[k] ? a[tail + k] * keep_scale : T(0);
        });
      });
}

// d_probs <- dA = scale * P * (dP - rowsum(dP * P)), with dP = d_probs * m / (1 - p) where the
// entry was kept by dropout (dropped != 0) and 0 where it was dropped (or P was 0: the gradient is
// zero either way).
template <class ExecutionSpace, class T>
void attention_softmax_backward(const ExecutionSpace& exec, const T* probs, const T* dropped,
                                T* d_probs, std::int64_t rows, int seq, bool drop, T keep_scale,
                                T scale) {
  backends::for_each_row(
      exec, "kformer::attention::softmax_bwd", rows,
      KOKKOS_LAMBDA(const typename Kokkos::TeamPolicy<ExecutionSpace>::member_type& team,
                    const std::int64_t row) {
        const T* const pr = probs + row * seq;
        const T* const kept = dropped + row * seq;
        T* const g = d_probs + row * seq;
        if (drop)
          backends::row_for(
              team, seq, [=](const int j) { g[j] = kept[j] != T(0) ? g[j] * keep_scale : T(0); });
        const T dot = backends::row_sum<T>(team, seq, [=](const int j) { return g[j] * pr[j]; });
        backends::row_for(team, seq, [=](const int j) { g[j] = scale * pr[j] * (g[j] - dot); });
      });
}

}  // namespace kformer::impl
