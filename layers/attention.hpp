// Multi-head self-attention with PyTorch's parameters and masks (nn.MultiheadAttention,
// batch_first).
//
//   qkv = x W_in^T + b_in                        x: (B, S, d), W_in: (3d, d) packed q, k, v
//   head h (dh = d/H): Q_h, K_h, V_h = columns [h dh, (h+1) dh) of the q, k, v blocks
//   A_h = Q_h K_h^T / sqrt(dh) + attn_mask       attn_mask: (S, S) additive, optional
//   A_h[i, j] = -inf where key_padding_mask[b, j] (true = ignore), optional
//   P_h = softmax_j(A_h),  P~_h = dropout(P_h),  O_h = P~_h V_h
//   y = concat_h(O_h) W_out^T + b_out
//
// A query whose keys are all masked attends to nothing: its row of P is zero (PyTorch returns NaN
// there), so its output is b_out and no gradient flows through it.
//
// backward, with dO = dy W_out (per head), dP~ = dO V^T:
//   dV = P~^T dO,  dP = dP~ * (dropout mask)/(1-p),  dA = P * (dP - rowsum(dP * P)) / sqrt(dh)
//   dQ = dA K,  dK = dA^T Q,  then through the input projection.
//
// The per-(batch, head) products are batched GEMMs reading Q, K, V in place in the packed qkv
// buffer. Memory held for backward: qkv (3 B S d), the head outputs (B S d), and on the staged
// path (GPUs) the probabilities P: B H S^2, the term that grows with the square of the sequence,
// with dropout also P~. The fused CPU path holds P only for probabilities() (keep_probabilities,
// PyTorch's need_weights) and reads it back in the backward; without it, it holds no B H S^2
// buffer and the backward recomputes P block by block from Q, K and copies of the forward's masks
// (B S bools, S^2 values: the caller may reuse the masks' memory before the backward). P~ it
// always recomputes from P and the dropout decisions, a counter hash of (seed, step, element).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include <Kokkos_Core.hpp>

#include "../backends/batched_gemm.hpp"
#include "../backends/device_info.hpp"
#include "../core/compat.hpp"
#include "../core/error.hpp"
#include "../core/math.hpp"
#include "../core/profiling.hpp"
#include "../core/random.hpp"
#include "../core/run_context.hpp"
#include "../core/tensor.hpp"
#include "../core/workspace.hpp"
#include "impl/attention_host.hpp"
#include "impl/attention_kernels.hpp"
#include "linear.hpp"

namespace kformer {

struct MultiHeadAttentionOptions {
  int heads = 8;
  double dropout = 0.0;  // on the attention probabilities
  std::uint64_t seed = 0;
  // On a CPU with a BLAS: each (batch, head)'s products and softmax in one task per block of
  // query rows, in cache (impl/attention_host.hpp). Off: one kernel per stage, as on a GPU.
  bool fused_cpu = true;
  // Whether a forward keeps P for probabilities() (PyTorch's need_weights). Where it does not, a
  // CPU backward recomputes P block by block and no (B, H, S, S) buffer is held; the staged (GPU)
  // path holds P either way.
  bool keep_probabilities = true;
};

template <class T, class ExecutionSpace>
class MultiHeadAttention {
 public:
  using memory_space = typename ExecutionSpace::memory_space;
  using Tensor3 = kformer::Tensor3<T, memory_space>;
  using ConstTensor3 = kformer::Tensor3<const T, memory_space>;
  using ConstMatrix = Tensor2<const T, memory_space>;
  using Mask = Kokkos::View<const bool**, Kokkos::LayoutRight, memory_space>;
  using member_type = typename Kokkos::TeamPolicy<ExecutionSpace>::member_type;

  MultiHeadAttention() = default;
  MultiHeadAttention(const ExecutionSpace& exec, int d_model,
                     const MultiHeadAttentionOptions& options = {},
                     std::string name = "kformer::MultiHeadAttention")
      : name_(std::move(name)),
        d_(d_model),
        heads_(options.heads),
        dropout_(options.dropout),
        seed_(derive_seed(options.seed, "attention_dropout")),
        fused_cpu_(options.fused_cpu),
        keep_probabilities_(options.keep_probabilities) {
    if (d_model < 1) fail(name_, "d_model must be at least 1, got ", d_model);
    if (heads_ < 1 || d_model % heads_ != 0)
      fail(name_, "heads (", heads_, ") must divide d_model (", d_model, ")");
    if (!(dropout_ >= 0.0 && dropout_ < 1.0))
      fail(name_, "dropout must be in [0, 1), got ", dropout_);
    in_proj_ =
        Linear<T, ExecutionSpace>(exec, d_model, 3 * d_model,
                                  {true, derive_seed(options.seed, "in_proj")}, name_ + ".in_proj");
    out_proj_ = Linear<T, ExecutionSpace>(
        exec, d_model, d_model, {true, derive_seed(options.seed, "out_proj")}, name_ + ".out_proj");
    // PyTorch initialises the packed projection with xavier_uniform and zero biases.
    const double bound = std::sqrt(6.0 / (d_model + 3.0 * d_model));
    fill_uniform(exec, in_proj_.weight().value, -bound, bound,
                 derive_seed(options.seed, "in_proj_weight"));
    Kokkos::deep_copy(exec, in_proj_.bias().value, T(0));
    Kokkos::deep_copy(exec, out_proj_.bias().value, T(0));
  }

  int d_model() const { return d_; }
  int heads() const { return heads_; }
  Linear<T, ExecutionSpace>& in_proj() { return in_proj_; }
  Linear<T, ExecutionSpace>& out_proj() { return out_proj_; }
  void set_keep_probabilities(bool keep) { keep_probabilities_ = keep; }

  // PyTorch names: in_proj_weight, in_proj_bias, out_proj.weight, out_proj.bias.
  template <class F>
  void visit_parameters(F&& f) {
    in_proj_.visit_parameters([&](const std::string& n, auto& p) { f("in_proj_" + n, p); });
    out_proj_.visit_parameters([&](const std::string& n, auto& p) { f("out_proj." + n, p); });
  }
  void zero_grad(const ExecutionSpace& exec) {
    in_proj_.zero_grad(exec);
    out_proj_.zero_grad(exec);
  }

  // Bytes held between forward and backward for a (batch, seq) input in training (where the
  // backward recomputes P, copies of the masks passed add B S bools and S^2 values).
  std::int64_t saved_bytes(std::int64_t batch, std::int64_t seq) const {
    return forward_bytes(batch, seq, true, keep_probabilities_ || !fused_on_cpu()).total();
  }

  // y = MHA(x).   x, y: (B, S, d); key_padding_mask: (B, S) or empty; attn_mask: (S, S) or empty.
  void forward(const ExecutionSpace& exec, const RunContext& ctx, const ConstTensor3& x,
               const Tensor3& y, const Mask& key_padding_mask = {},
               const ConstMatrix& attn_mask = {}) {
    const std::string where = name_ + "::forward";
    const ProfilingRegion region(where);
    check_shape(where, "x", x, {-1, -1, d_});
    check_shape(where, "y", y, extents_of(x));
    const int batch = x.extent(0), seq = x.extent(1);
    if (key_padding_mask.data() != nullptr)
      check_shape(where, "key_padding_mask", key_padding_mask, {batch, seq});
    if (attn_mask.data() != nullptr) check_shape(where, "attn_mask", attn_mask, {seq, seq});
    check_distinct(where, "x", x, "y", y);
    // The staged path computes all scores in the (B, H, S, S) buffer whether kept or not.
    const bool keep_probs = keep_probabilities_ || !fused_on_cpu();
    check_memory(where, batch, seq, ctx.training, keep_probs);
    batch_ = batch;
    seq_ = seq;
    probs_kept_ = keep_probs;
    grad_ = ctx.grad;
    // Where P is not kept, the fused backward recomputes the softmax with the masks: from copies,
    // so that a caller who fills the next batch's masks into the same memory before this
    // backward still gets this forward's gradients.
    const bool recompute = ctx.grad && !keep_probs;
    key_padding_mask_ = recompute && key_padding_mask.data() != nullptr
                            ? copy_into(exec, key_padding_mask, key_padding_mask_copy_)
                            : Mask();
    attn_mask_ = recompute && attn_mask.data() != nullptr
                     ? copy_into(exec, attn_mask, attn_mask_copy_)
                     : ConstMatrix();
    const std::int64_t n = std::int64_t(batch) * seq;
    const int d = d_, h = heads_, dh = d_ / heads_;
    dropout_active_ = ctx.training && dropout_ > 0.0;

    const auto qkv = qkv_.view(n, 3 * d);
    T* const probs = keep_probs ? probs_.view(batch, h, seq, seq).data() : nullptr;
    // P with dropout: a (B, H, S, S) buffer on the staged path; the fused path keeps it in its
    // tasks' scratch.
    T* const dropped = !dropout_active_ ? probs
                       : fused_on_cpu() ? nullptr
                                        : dropped_.view(batch, h, seq, seq).data();
    const auto context = context_.view(n, d);
    in_proj_.forward(exec, as_matrix(x), qkv);

    const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(dh)));
    auto softmax = impl::softmax_forward_rows(
        probs, dropped, h, seq, key_padding_mask, attn_mask, dropout_active_,
        DropoutDecisions(seed_, ctx.step, dropout_), keep_scale());
    if (recompute) set_row_stats(softmax, n * h);
    step_ = ctx.step;
#if defined(KOKKOSKERNELS_ENABLE_TPL_BLAS)
    if constexpr (impl::has_host_attention<ExecutionSpace, T>)
      if (fused_cpu_) {
        const impl::AttentionBuffers<T> buffers{batch,          h,    seq, d, qkv.data(),
                                                context.data(), probs};
        impl::attention_forward_host(exec, buffers, softmax, scale);
        out_proj_.forward(exec, context, as_matrix(y));
        return;
      }
#endif
    // Scores: A[b, h] = Q K^T / sqrt(dh), written into probs.
    backends::gemm_batched<ExecutionSpace, T>(exec, backends::Op::N, backends::Op::T, scale,
                                              head_view(qkv.data(), 0), head_view(qkv.data(), d),
                                              T(0), score_view(probs), batch, h);
    impl::attention_softmax_forward(exec, softmax, batch);
    // O_h = P~ V_h, written into the head's columns of context.
    backends::gemm_batched<ExecutionSpace, T>(exec, backends::Op::N, backends::Op::N, T(1),
                                              score_view(dropped), head_view(qkv.data(), 2 * d),
                                              T(0), context_head_view(context.data()), batch, h);
    out_proj_.forward(exec, context, as_matrix(y));
  }

  // dx (+)= d MHA / dx, parameter gradients accumulate.   x: the forward's input; dy, dx: (B, S, d)
  void backward(const ExecutionSpace& exec, const ConstTensor3& x, const ConstTensor3& dy,
                const Tensor3& dx, bool accumulate_dx = false) {
    const std::string where = name_ + "::backward";
    const ProfilingRegion region(where);
    check_shape(where, "x", x, {batch_, seq_, d_});
    check_shape(where, "dy", dy, extents_of(x));
    if (dx.data() != nullptr) check_shape(where, "dx", dx, extents_of(x));
    if (!grad_)
      fail(where,
           "the last forward ran without grad (RunContext::grad false) and kept nothing for a "
           "backward");
    const int batch = batch_, seq = seq_, d = d_, h = heads_;
    const std::int64_t n = std::int64_t(batch) * seq;
    const auto qkv = qkv_.view(n, 3 * d);
    const auto context = context_.view(n, d);
    const auto d_context = d_context_.view(n, d);
    const auto d_qkv = d_qkv_.view(n, 3 * d);

    out_proj_.backward(exec, context, as_matrix(dy), d_context);
    const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(d_ / heads_)));
    // The row pointers are set below, per path.
    impl::SoftmaxBackwardRows<T> softmax{nullptr,         nullptr,      nullptr, seq,
                                         dropout_active_, keep_scale(), scale};
#if defined(KOKKOSKERNELS_ENABLE_TPL_BLAS)
    if constexpr (impl::has_host_attention<ExecutionSpace, T>)
      if (fused_cpu_) {
        T* const probs = probs_kept_ ? probs_.view(batch, h, seq, seq).data() : nullptr;
        const impl::AttentionBuffers<T> buffers{
            batch, h, seq, d, qkv.data(), context.data(), probs, d_qkv.data(), d_context.data()};
        auto forward_rows = impl::softmax_forward_rows(
            static_cast<T*>(nullptr), static_cast<T*>(nullptr), h, seq, key_padding_mask_,
            attn_mask_, dropout_active_, DropoutDecisions(seed_, step_, dropout_), keep_scale());
        if (!probs_kept_) set_row_stats(forward_rows, n * h);
        impl::attention_backward_host(exec, buffers, forward_rows, scale, softmax);
        in_proj_.backward(exec, as_matrix(x), d_qkv,
                          dx.data() ? as_matrix(dx) : Tensor2<T, memory_space>(), accumulate_dx);
        return;
      }
#endif
    const auto probs = probs_.view(batch, h, seq, seq);
    softmax.probs = probs.data();
    const auto dropped = dropout_active_ ? dropped_.view(batch, h, seq, seq) : probs;
    const auto d_probs = d_probs_.view(batch, h, seq, seq);
    softmax.dropped = dropped.data();
    softmax.d_probs = d_probs.data();
    // dP~ = dO V^T and dV = P~^T dO.
    backends::gemm_batched<ExecutionSpace, T>(
        exec, backends::Op::N, backends::Op::T, T(1), context_head_view(d_context.data()),
        head_view(qkv.data(), 2 * d), T(0), score_view(d_probs.data()), batch, h);
    backends::gemm_batched<ExecutionSpace, T>(
        exec, backends::Op::T, backends::Op::N, T(1), score_view(dropped.data()),
        context_head_view(d_context.data()), T(0), head_view(d_qkv.data(), 2 * d), batch, h);
    impl::attention_softmax_backward(exec, softmax, std::int64_t(batch) * h * seq);
    // dQ = dA K and dK = dA^T Q (dA already carries the 1/sqrt(dh) scale).
    backends::gemm_batched<ExecutionSpace, T>(exec, backends::Op::N, backends::Op::N, T(1),
                                              score_view(d_probs.data()), head_view(qkv.data(), d),
                                              T(0), head_view(d_qkv.data(), 0), batch, h);
    backends::gemm_batched<ExecutionSpace, T>(exec, backends::Op::T, backends::Op::N, T(1),
                                              score_view(d_probs.data()), head_view(qkv.data(), 0),
                                              T(0), head_view(d_qkv.data(), d), batch, h);
    in_proj_.backward(exec, as_matrix(x), d_qkv,
                      dx.data() ? as_matrix(dx) : Tensor2<T, memory_space>(), accumulate_dx);
  }

  // The attention probabilities P of the last forward, (B, H, S, S), for inspection.
  kformer::Tensor4<T, memory_space> probabilities() {
    if (!probs_kept_)
      fail(name_ + "::probabilities",
           "the last forward ran without grad and did not keep them "
           "(set_keep_probabilities(true) keeps them)");
    return probs_.view(batch_, heads_, seq_, seq_);
  }

  // Whether forward and backward take the fused CPU path (impl/attention_host.hpp).
  bool fused_on_cpu() const {
#if defined(KOKKOSKERNELS_ENABLE_TPL_BLAS)
    if constexpr (impl::has_host_attention<ExecutionSpace, T>) return fused_cpu_;
#endif
    return false;
  }

 private:
  T keep_scale() const {
    return static_cast<T>(dropout_active_ ? 1.0 / (1.0 - dropout_) : 1.0);
  }
  // Head h's (S, dh) block of q (offset 0), k (d) or v (2d) for every batch element, in place in
  // the packed (B*S, 3d) buffer.
  backends::StridedMatrices<T> head_view(T* qkv, int offset) const {
    const int dh = d_ / heads_;
    return {qkv + offset, seq_, dh, 3 * d_, std::int64_t(seq_) * 3 * d_, dh};
  }
  // Head h's (S, dh) columns of a (B*S, d) matrix.
  backends::StridedMatrices<T> context_head_view(T* m) const {
    const int dh = d_ / heads_;
    return {m, seq_, dh, d_, std::int64_t(seq_) * d_, dh};
  }
  // The (S, S) matrix of (b, h) in a (B, H, S, S) buffer.
  backends::StridedMatrices<T> score_view(T* s) const {
    const std::int64_t square = std::int64_t(seq_) * seq_;
    return {s, seq_, seq_, seq_, heads_ * square, square};
  }

  std::string name_ = "kformer::MultiHeadAttention";
  int d_ = 0, heads_ = 1;
  double dropout_ = 0.0;
  std::uint64_t seed_ = 0;
  bool fused_cpu_ = true;
  bool keep_probabilities_ = true;
  bool probs_kept_ = true;  // by the last forward
  bool grad_ = false;       // whether the last forward ran with grad
  bool dropout_active_ = false;
  std::uint64_t step_ = 0;  // the last forward's, for the fused backward's dropout decisions
  Mask key_padding_mask_;   // the last forward's masks, for a fused backward that recomputes P:
  ConstMatrix attn_mask_;   // views of the copies below, empty otherwise
  int batch_ = 0, seq_ = 0;
  Linear<T, ExecutionSpace> in_proj_, out_proj_;
  // The bytes of a pass's buffers for a (batch, seq) input: the (batch, heads, seq, seq) score
  // matrices and the (batch * seq, d) rows.
  struct Bytes {
    std::int64_t squares = 0, rows = 0;
    std::int64_t total() const { return squares + rows; }
  };
  // The forward's: probabilities where kept (and, on the staged path, their dropout copy in
  // training), qkv and context, and where training recomputes P each score row's maximum and
  // inverse sum.
  Bytes forward_bytes(std::int64_t batch, std::int64_t seq, bool training, bool keep_probs) const {
    const std::int64_t square = batch * heads_ * seq * seq * std::int64_t(sizeof(T));
    const std::int64_t row = batch * seq * d_ * std::int64_t(sizeof(T));
    const std::int64_t row_stats =
        training && !keep_probs ? 2 * batch * heads_ * seq * std::int64_t(sizeof(T)) : 0;
    const int squares = !keep_probs ? 0 : training && dropout_ > 0.0 && !fused_on_cpu() ? 2 : 1;
    return {square * squares, 4 * row + row_stats};
  }

  // Refuses a (batch, seq) whose buffers would not fit in the memory space, before allocating
  // any: with the square of seq in them they can need terabytes, which would otherwise end in an
  // out-of-memory crash (or the kernel's OOM killer on an overcommitting host).
  void check_memory(const std::string& where, std::int64_t batch, std::int64_t seq, bool training,
                    bool keep_probs) const {
    Bytes need = forward_bytes(batch, seq, training, keep_probs);
    if (training) {
      // The backward's own buffers (d_probs, d_context, d_qkv) have the shapes of the eval
      // forward's (probs, context, qkv); the fused CPU path has no d_probs.
      const Bytes backward = forward_bytes(batch, seq, false, true);
      if (!fused_on_cpu()) need.squares += backward.squares;
      need.rows += backward.rows;
    }
    const std::int64_t held =
        std::int64_t(qkv_.bytes() + probs_.bytes() + dropped_.bytes() + context_.bytes() +
                     d_context_.bytes() + d_probs_.bytes() + d_qkv_.bytes() + row_stats_.bytes());
    if (need.total() <= held) return;
    const std::int64_t available = backends::available_bytes<memory_space>();
    if (available >= 0 && need.total() - held > available)
      fail(where, "batch ", batch, ", seq ", seq, " and ", heads_, " heads need ",
           backends::format_bytes(double(need.total())), " of attention buffers (",
           backends::format_bytes(double(need.squares)),
           " of them (batch, heads, seq, seq) score matrices), but only ",
           backends::format_bytes(double(available)), " of ", memory_space::name(),
           " is available: use shorter sequences or smaller batches");
  }

  GrowingBuffer<T, memory_space> qkv_{"kformer::MultiHeadAttention::qkv"};
  GrowingBuffer<T, memory_space> probs_{"kformer::MultiHeadAttention::probs"};
  GrowingBuffer<T, memory_space> dropped_{"kformer::MultiHeadAttention::dropped_probs"};
  GrowingBuffer<T, memory_space> context_{"kformer::MultiHeadAttention::context"};
  GrowingBuffer<T, memory_space> d_context_{"kformer::MultiHeadAttention::d_context"};
  GrowingBuffer<T, memory_space> d_probs_{"kformer::MultiHeadAttention::d_probs"};
  GrowingBuffer<T, memory_space> d_qkv_{"kformer::MultiHeadAttention::d_qkv"};
  // Each score row's maximum and inverse sum (2, B H S), from the fused forward for the backward
  // that recomputes P.
  GrowingBuffer<T, memory_space> row_stats_{"kformer::MultiHeadAttention::row_stats"};
  GrowingBuffer<bool, memory_space> key_padding_mask_copy_{
      "kformer::MultiHeadAttention::key_padding_mask"};
  GrowingBuffer<T, memory_space> attn_mask_copy_{"kformer::MultiHeadAttention::attn_mask"};

  // Points the softmax rows at row_stats_ for `rows` score rows: the fused forward stores each
  // row's maximum and inverse sum there, the backward recomputes P from them.
  template <class Rows>
  void set_row_stats(Rows& softmax, std::int64_t rows) {
    const auto stats = row_stats_.view(2, rows);
    softmax.row_max = &stats(0, 0);
    softmax.row_inverse_sum = &stats(1, 0);
  }

  // A copy of a (rows, cols) mask in buffer's storage, made on exec.
  template <class MaskView, class Buffer>
  static auto copy_into(const ExecutionSpace& exec, const MaskView& mask, Buffer& buffer) {
    const auto copy = buffer.view(mask.extent(0), mask.extent(1));
    Kokkos::deep_copy(exec, copy, mask);
    return copy;
  }
};

}  // namespace kformer
