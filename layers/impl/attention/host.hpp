// The CPU specialisation of fused attention (chosen in dispatch.hpp for host spaces with a BLAS):
// each task runs all of one (batch, head)'s work on a block of query rows while its scores are in
// cache. A task's block is at most kBlockScores scores (256 KiB of floats), so a block's scores,
// softmax and gradients stay in the first- and second-level caches.
//
// The products are host_products.hpp's vector loops for head widths 8, 16 and 32 (a BLAS call
// per product costs about 1 us of set-up, under a lock when threads call it at once),
// single-threaded BLAS calls otherwise; the softmax rows are host_softmax.hpp's, a block's rows a
// step at a time. The backward recomputes each block's scores and softmax from Q, K and each row's
// maximum and inverse sum, which the forward stored (2 values a row), as FlashAttention does: the
// same operations on each score give the forward's bits, and no (B, H, S, S) buffer is held.
// perf/NOTES.md has the measurements behind these choices.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include <Kokkos_Core.hpp>

#include "../../../backends/for_each.hpp"
#include "../../../backends/impl/host_blas.hpp"
#include "../../../core/profiling.hpp"
#include "host_products.hpp"
#include "host_softmax.hpp"

namespace kformer::impl {

// The packed buffers of one attention pass: qkv and d_qkv (B S, 3d), context and d_context
// (B S, d), and the (B, H, S, S) probabilities P where the caller asks for them (nullptr
// otherwise). P with dropout (P~), the gradients and P where it is not asked for are only ever a
// block of rows, in each task's scratch.
template <class T>
struct AttentionBuffers {
  int batch, heads, seq, d;
  const T* qkv;
  T* context;
  T* probs;
  T* d_qkv = nullptr;
  const T* d_context = nullptr;

  int head_dim() const { return d / heads; }
  // Query rows per task: whole (S, S) blocks up to kBlockScores scores.
  static constexpr std::int64_t kBlockScores = 1 << 16;
  int block_rows() const {
    return static_cast<int>(std::clamp<std::int64_t>(kBlockScores / seq, 1, seq));
  }
};

#if defined(KOKKOSKERNELS_ENABLE_TPL_BLAS)

// Whether attention on ExecutionSpace with scalar T can take this path.
template <class ExecutionSpace, class T>
inline constexpr bool has_host_attention = backends::runs_on_host<ExecutionSpace> &&
                                           (std::is_same_v<T, float> || std::is_same_v<T, double>);

// A task's block of rows x S scores in its scratch.
template <class ExecutionSpace, class T>
using ScoreScratch = Kokkos::View<T*, typename ExecutionSpace::scratch_memory_space,
                                  Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

// Forward, one task per (b, h, block of query rows r0 .. r0 + R):
//   A = Q[r] K^T / sqrt(dh) into probs (or the task's scratch),  softmax row by row (P~, with
//   dropout, into the task's scratch),  O[r] = P~[r] V.
template <class ExecutionSpace, class T, class KeyMask, class AttnMask>
void attention_forward_host(const ExecutionSpace& exec, const AttentionBuffers<T>& buf,
                            const SoftmaxForwardRows<T, KeyMask, AttnMask>& softmax, T scale) {
  using policy_type = backends::BalancedTeamPolicy<ExecutionSpace>;
  using scratch_view = ScoreScratch<ExecutionSpace, T>;
  const int heads = buf.heads, seq = buf.seq, d = buf.d, dh = buf.head_dim();
  const int rows_per_block = buf.block_rows();
  const int blocks = (seq + rows_per_block - 1) / rows_per_block;
  const std::size_t block_scores = std::size_t(rows_per_block) * seq;
  const bool probs_in_scratch = buf.probs == nullptr;
  const std::size_t scratch_scores =
      block_scores * ((probs_in_scratch ? 1 : 0) + (softmax.drop ? 1 : 0));
  const std::size_t scratch_bytes =
      scratch_scores > 0 ? scratch_view::shmem_size(scratch_scores) : 0;
  const int level = backends::team_scratch_level<ExecutionSpace>(scratch_bytes);
  const backends::impl::HostBlasThreads blas_threads(exec);
  // Host code calling BLAS inside a host parallel loop: only instantiated for host spaces.
  Kokkos::parallel_for(
      KFORMER_LABEL("kformer::attention::forward_host"),
      policy_type(exec, buf.batch * heads * blocks, 1)
          .set_scratch_size(level, Kokkos::PerTeam(scratch_bytes)),
      [=](const typename policy_type::member_type& team) {
        const int task = team.league_rank();
        const int bh = task / blocks, b = bh / heads, h = bh % heads;
        const int r0 = (task % blocks) * rows_per_block;
        const int rows = std::min(rows_per_block, seq - r0);
        const T* const q = buf.qkv + std::int64_t(b) * seq * 3 * d + h * dh;
        const T* const k = q + d;
        const T* const v = q + 2 * d;
        const std::int64_t first_row = std::int64_t(bh) * seq + r0;
        T* const scratch = scratch_scores > 0
                               ? scratch_view(team.team_scratch(level), scratch_scores).data()
                               : nullptr;
        SoftmaxForwardRows<T, KeyMask, AttnMask> block = softmax;
        if (probs_in_scratch) {
          block.probs = scratch;
          block.probs_first_row = first_row;
        }
        T* const a = block.probs + (first_row - block.probs_first_row) * seq;
        if (block.drop) {
          block.dropped = probs_in_scratch ? scratch + block_scores : scratch;
          block.dropped_first_row = first_row;
        }
        const T* const p_dropped = block.drop ? block.dropped : a;
        head::product_nt(dh, rows, seq, scale, q + std::int64_t(r0) * 3 * d, 3 * d, k, 3 * d, a,
                         seq);
        block.host_rows(first_row, rows);
        head::product_nn(dh, rows, seq, p_dropped, seq, v, 3 * d,
                         buf.context + (std::int64_t(b) * seq + r0) * d + h * dh, d);
      });
}

// Backward, one task per (b, h), its query rows block by block (dK and dV sum over the blocks),
// with the block's P, P~, dP~ and dA in the task's scratch, P recomputed as the forward made it
// (`forward_rows` holds its masks, dropout decisions and rows' maxima and inverse sums):
//   P = softmax rows of Q[r] K^T / sqrt(dh),  P~ = P m / (1 - p),
//   dP~ = dO[r] V^T,  dV (+)= P~[r]^T dO[r],  dA = softmax backward row by row,
//   dQ[r] = dA K,  dK (+)= dA^T Q[r].
// `softmax` gives the backward's row constants (dropout, scales); pointers are set per block.
template <class ExecutionSpace, class T, class KeyMask, class AttnMask>
void attention_backward_host(const ExecutionSpace& exec, const AttentionBuffers<T>& buf,
                             const SoftmaxForwardRows<T, KeyMask, AttnMask>& forward_rows, T scale,
                             const SoftmaxBackwardRows<T>& softmax) {
  using policy_type = backends::BalancedTeamPolicy<ExecutionSpace>;
  using scratch_view = ScoreScratch<ExecutionSpace, T>;
  const int heads = buf.heads, seq = buf.seq, d = buf.d, dh = buf.head_dim();
  const int rows_per_block = buf.block_rows();
  const std::size_t block_scores = std::size_t(rows_per_block) * seq;
  const bool drop = softmax.drop;
  const std::size_t block_buffers = drop ? 3 : 2;  // dP~ and dA, P, P~
  const std::size_t scratch_bytes = scratch_view::shmem_size(block_scores * block_buffers);
  const int level = backends::team_scratch_level<ExecutionSpace>(scratch_bytes);
  const backends::impl::HostBlasThreads blas_threads(exec);
  Kokkos::parallel_for(
      KFORMER_LABEL("kformer::attention::backward_host"),
      policy_type(exec, buf.batch * heads, 1)
          .set_scratch_size(level, Kokkos::PerTeam(scratch_bytes)),
      [=](const typename policy_type::member_type& team) {
        const int bh = team.league_rank(), b = bh / heads, h = bh % heads;
        const std::int64_t qkv_offset = std::int64_t(b) * seq * 3 * d + h * dh;
        const T* const q = buf.qkv + qkv_offset;
        const T* const k = q + d;
        const T* const v = q + 2 * d;
        T* const dq = buf.d_qkv + qkv_offset;
        T* const dk = dq + d;
        T* const dv = dq + 2 * d;
        T* const g = scratch_view(team.team_scratch(level), block_scores * block_buffers).data();
        T* const p = g + block_scores;
        T* const kept = g + 2 * block_scores;  // P~, when drop
        for (int r0 = 0; r0 < seq; r0 += rows_per_block) {
          const int rows = std::min(rows_per_block, seq - r0);
          const T beta = r0 == 0 ? T(0) : T(1);
          const std::int64_t first_row = std::int64_t(bh) * seq + r0;
          SoftmaxForwardRows<T, KeyMask, AttnMask> block_rows = forward_rows;
          block_rows.probs = p;
          block_rows.probs_first_row = first_row;
          block_rows.dropped = kept;
          block_rows.dropped_first_row = first_row;
          head::product_nt(dh, rows, seq, scale, q + std::int64_t(r0) * 3 * d, 3 * d, k, 3 * d, p,
                           seq);
          block_rows.host_rows_from_stats(first_row, rows);
          const T* const p_dropped = drop ? kept : p;
          const T* const d_out = buf.d_context + (std::int64_t(b) * seq + r0) * d + h * dh;
          head::product_nt(dh, rows, seq, T(1), d_out, d, v, 3 * d, g, seq);
          head::product_tn(dh, rows, seq, p_dropped, seq, d_out, d, beta, dv, 3 * d);
          SoftmaxBackwardRows<T> block = softmax;
          block.probs = p;
          block.dropped = p_dropped;
          block.d_probs = g;
          for (int i = 0; i < rows; ++i)
            block(i);
          head::product_nn(dh, rows, seq, g, seq, k, 3 * d, dq + std::int64_t(r0) * 3 * d, 3 * d);
          head::product_tn(dh, rows, seq, g, seq, q + std::int64_t(r0) * 3 * d, 3 * d, beta, dk,
                           3 * d);
        }
      });
}

#endif

}  // namespace kformer::impl
