// The softmax of multi-head attention, forward and backward, over the (B, H, S, S) score rows.
#pragma once

#include <cstdint>

#include <Kokkos_Core.hpp>

#include "../../backends/rows.hpp"
#include "../../core/math.hpp"
#include "../dropout.hpp"

namespace kformer::impl {

// Row (b, h, i) of probs: P = softmax_j(A[j] + attn_mask[i, j]) over the keys j not masked by
// key_padding_mask[b, j]; a row with no such key is zero. With dropout, dropped = P * m / (1 - p)
// (m from `decide` at element row * S + j), otherwise dropped is not touched.
template <class ExecutionSpace, class T, class KeyMask, class AttnMask>
void attention_softmax_forward(const ExecutionSpace& exec, T* probs, T* dropped, int batch, int heads, int seq,
                               const KeyMask& key_padding_mask, const AttnMask& attn_mask, bool drop,
                               const DropoutDecisions& decide, T keep_scale) {
  const bool has_kpm = key_padding_mask.data() != nullptr, has_mask = attn_mask.data() != nullptr;
  const std::int64_t rows_per_batch = std::int64_t(heads) * seq;
  backends::for_each_row(
      exec, "kformer::attention::softmax_fwd", std::int64_t(batch) * rows_per_batch,
      KOKKOS_LAMBDA(const typename Kokkos::TeamPolicy<ExecutionSpace>::member_type& team, const std::int64_t row) {
        const int b = static_cast<int>(row / rows_per_batch);
        const int i = static_cast<int>(row % seq);
        T* const a = probs + row * seq;
        const auto masked = [=](const int j) { return has_kpm && key_padding_mask(b, j); };
        const auto score = [=](const int j) { return has_mask ? a[j] + attn_mask(i, j) : a[j]; };
        // No unmasked finite score leaves the maximum at Max's identity, the lowest finite T.
        const T lowest = Kokkos::reduction_identity<T>::max();
        T max_score = lowest;
        Kokkos::parallel_reduce(
            Kokkos::ThreadVectorRange(team, seq),
            [=](const int j, T& m) {
              const T s = score(j);
              if (!masked(j) && s > m) m = s;
            },
            Kokkos::Max<T>(max_score));
        const bool none = !(max_score > lowest);
        // Each lane only reads back what it wrote: no synchronisation between the loops.
        Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, seq), [=](const int j) {
          a[j] = none || masked(j) ? T(0) : math::exp(score(j) - max_score);
        });
        T sum = 0;
        Kokkos::parallel_reduce(Kokkos::ThreadVectorRange(team, seq), [=](const int j, T& s) { s += a[j]; }, sum);
        const T inv = none ? T(0) : T(1) / sum;
        if (drop) {
          T* const out = dropped + row * seq;
          Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, seq), [=](const int j) {
            a[j] *= inv;
            bool keep[4];
            const std::int64_t element = row * seq + j;
            decide.keep4(static_cast<std::uint64_t>(element / 4), keep);
            out[j] = keep[element % 4] ? a[j] * keep_scale : T(0);
          });
        } else {
          Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, seq), [=](const int j) { a[j] *= inv; });
        }
      });
}

// d_probs <- dA = scale * P * (dP - rowsum(dP * P)), with dP = d_probs * m / (1 - p) where the
// entry was kept by dropout (dropped != 0) and 0 where it was dropped (or P was 0: the gradient is
// zero either way).
template <class ExecutionSpace, class T>
void attention_softmax_backward(const ExecutionSpace& exec, const T* probs, const T* dropped, T* d_probs,
                                std::int64_t rows, int seq, bool drop, T keep_scale, T scale) {
  backends::for_each_row(
      exec, "kformer::attention::softmax_bwd", rows,
      KOKKOS_LAMBDA(const typename Kokkos::TeamPolicy<ExecutionSpace>::member_type& team, const std::int64_t row) {
        const T* const pr = probs + row * seq;
        const T* const kept = dropped + row * seq;
        T* const g = d_probs + row * seq;
        const auto dp = [=](const int j) { return drop ? (kept[j] != T(0) ? g[j] * keep_scale : T(0)) : g[j]; };
        T dot = 0;
        Kokkos::parallel_reduce(
            Kokkos::ThreadVectorRange(team, seq), [=](const int j, T& s) { s += dp(j) * pr[j]; }, dot);
        Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, seq),
                             [=](const int j) { g[j] = scale * pr[j] * (dp(j) - dot); });
      });
}

}  // namespace kformer::impl
