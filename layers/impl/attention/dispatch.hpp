// The one place that decides how fused attention runs on an execution space: the portable kernel
// (flash.hpp) on every backend, or a backend's specialisation where it has one and the caller did
// not ask for the portable kernel. Today the only specialisation is the CPU one (host.hpp: vector
// loops and single-threaded BLAS calls per block of query rows), for host spaces with a BLAS.
// Both hold no (B, H, S, S) buffer; both write P there only when the caller asks for it.
#pragma once

#include <cstdint>
#include <type_traits>

#include <Kokkos_Core.hpp>

#include "flash.hpp"
#include "host.hpp"

namespace kformer {

// Which fused attention kernel a MultiHeadAttention runs.
enum class AttentionKernel {
  Best,      // the backend's specialisation where there is one, the portable kernel elsewhere
  Portable,  // the portable kernel on every backend (for comparisons and tests)
};

}  // namespace kformer

namespace kformer::impl {

// Whether attention of scalar T on ExecutionSpace runs the CPU specialisation for `kernel`.
template <class ExecutionSpace, class T>
constexpr bool runs_host_specialisation(AttentionKernel kernel) {
#if defined(KOKKOSKERNELS_ENABLE_TPL_BLAS)
  return kernel == AttentionKernel::Best && has_host_attention<ExecutionSpace, T>;
#else
  (void)kernel;
  return false;
#endif
}

// context = attention(qkv) for problem p, with each row's maximum and inverse sum in p's row
// statistics (for the backward, and for P); P into probs (B, H, S, S) when probs is not null.
template <class ExecutionSpace, class T, class KeyMask, class AttnMask>
void attention_forward(const ExecutionSpace& exec, [[maybe_unused]] AttentionKernel kernel,
                       const flash::Problem<T, KeyMask, AttnMask>& p, T* probs) {
#if defined(KOKKOSKERNELS_ENABLE_TPL_BLAS)
  if constexpr (has_host_attention<ExecutionSpace, T>) {
    if (runs_host_specialisation<ExecutionSpace, T>(kernel)) {
      auto rows =
          softmax_forward_rows(probs, static_cast<T*>(nullptr), p.heads, p.seq, p.key_padding_mask,
                               p.attn_mask, p.drop, p.decide, p.keep_scale);
      rows.row_max = p.row_max;
      rows.row_inverse_sum = p.row_inverse_sum;
      const AttentionBuffers<T> buffers{p.batch, p.heads, p.seq, p.d, p.qkv, p.context, probs};
      attention_forward_host(exec, buffers, rows, p.scale);
      return;
    }
  }
#endif
  flash::forward(exec, p);
  if (probs != nullptr) flash::probabilities(exec, p, probs);
}

// dQ, dK, dV into g.d_qkv from dO (g.d_context) for the forward of problem p (which stored its row
// statistics); g.row_dot is a (B H S) workspace of the portable kernel.
template <class ExecutionSpace, class T, class KeyMask, class AttnMask>
void attention_backward(const ExecutionSpace& exec, [[maybe_unused]] AttentionKernel kernel,
                        const flash::Problem<T, KeyMask, AttnMask>& p,
                        const flash::Gradients<T>& g) {
#if defined(KOKKOSKERNELS_ENABLE_TPL_BLAS)
  if constexpr (has_host_attention<ExecutionSpace, T>) {
    if (runs_host_specialisation<ExecutionSpace, T>(kernel)) {
      auto rows =
          softmax_forward_rows(static_cast<T*>(nullptr), static_cast<T*>(nullptr), p.heads, p.seq,
                               p.key_padding_mask, p.attn_mask, p.drop, p.decide, p.keep_scale);
      rows.row_max = p.row_max;
      rows.row_inverse_sum = p.row_inverse_sum;
      const AttentionBuffers<T> buffers{p.batch,   p.heads, p.seq,   p.d,        p.qkv,
                                        p.context, nullptr, g.d_qkv, g.d_context};
      const SoftmaxBackwardRows<T> softmax{nullptr, nullptr,      nullptr, p.seq,
                                           p.drop,  p.keep_scale, p.scale};
      attention_backward_host(exec, buffers, rows, p.scale, softmax);
      return;
    }
  }
#endif
  flash::backward(exec, p, g);
}

}  // namespace kformer::impl
