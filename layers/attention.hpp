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
// The products and the softmax run fused (impl/attention/: FlashAttention's tiles, online softmax
// and a backward that recomputes P from Q, K and each query row's maximum and inverse sum), so no
// (B, H, S, S) buffer exists in training or inference: memory held for the backward is qkv
// (3 B S d), the head outputs (B S d), two values per query row and head, and copies of the masks
// (B S bools, S^2 values) so that the caller may refill the masks before the backward. Dropout
// decisions are a counter hash of (seed, step, score), recomputed rather than stored. P itself is
// written to a (B, H, S, S) buffer only for probabilities() (keep_probabilities, PyTorch's
// need_weights).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include <Kokkos_Core.hpp>

#include "../backends/device_info.hpp"
#include "../core/compat.hpp"
#include "../core/error.hpp"
#include "../core/layer.hpp"
#include "../core/math.hpp"
#include "../core/profiling.hpp"
#include "../core/random.hpp"
#include "../core/run_context.hpp"
#include "../core/tensor.hpp"
#include "../core/view_adapters.hpp"
#include "../core/workspace.hpp"
#include "impl/attention/dispatch.hpp"
#include "linear.hpp"

namespace kformer {

struct MultiHeadAttentionOptions {
  int heads = 8;
  double dropout = 0.0;  // on the attention probabilities
  std::uint64_t seed = 0;
  // Whether a forward writes P to a (B, H, S, S) buffer for probabilities() (PyTorch's
  // need_weights); nothing else needs it.
  bool keep_probabilities = true;
  // The backend's specialised fused kernel where it has one, or the portable one everywhere.
  AttentionKernel kernel = AttentionKernel::Best;
};

template <class T, class ExecutionSpace>
class MultiHeadAttention {
 public:
  using memory_space = typename ExecutionSpace::memory_space;
  using Tensor3 = RowMajorView<kformer::Tensor3<T, memory_space>>;
  using ConstTensor3 = RowMajorView<kformer::Tensor3<const T, memory_space>>;
  using ConstMatrix = RowMajorView<Tensor2<const T, memory_space>>;
  using Mask = RowMajorView<Kokkos::View<const bool**, Kokkos::LayoutRight, memory_space>>;

  MultiHeadAttention() = default;
  MultiHeadAttention(const ExecutionSpace& exec, int d_model,
                     const MultiHeadAttentionOptions& options = {},
                     std::string name = "kformer::MultiHeadAttention")
      : name_(std::move(name)),
        d_(d_model),
        heads_(options.heads),
        dropout_(options.dropout),
        seed_(derive_seed(options.seed, "attention_dropout")),
        keep_probabilities_(options.keep_probabilities),
        kernel_(options.kernel) {
    if (d_model < 1) fail(name_, "d_model must be at least 1, got ", d_model);
    if (heads_ < 1 || d_model % heads_ != 0)
      fail(name_, "heads (", heads_, ") must divide d_model (", d_model, ")");
    if (d_model / heads_ > impl::flash::kMaxHeadWidth)
      fail(name_, "the head width d_model / heads must be at most ", impl::flash::kMaxHeadWidth,
           " (as in FlashAttention-2), got ", d_model, " / ", heads_, " = ", d_model / heads_,
           ": use more heads");
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
  // Whether the fused kernels are the backend's specialisation (impl/attention/dispatch.hpp).
  bool runs_specialised_kernel() const {
    return impl::runs_host_specialisation<ExecutionSpace, T>(kernel_);
  }

  // PyTorch names: in_proj_weight, in_proj_bias, out_proj.weight, out_proj.bias.
  template <class F>
  void visit_parameters(F&& f) {
    in_proj_.visit_parameters([&](const std::string& n, auto& p) { f("in_proj_" + n, p); });
    out_proj_.visit_parameters([&](const std::string& n, auto& p) { f("out_proj." + n, p); });
  }
  template <class F>
  void visit_buffers(F&&) {}
  void zero_grad(const ExecutionSpace& exec) {
    in_proj_.zero_grad(exec);
    out_proj_.zero_grad(exec);
  }
  std::int64_t buffer_bytes() const {
    return in_proj_.buffer_bytes() + out_proj_.buffer_bytes() +
           std::int64_t(qkv_.bytes() + probs_.bytes() + context_.bytes() + d_context_.bytes() +
                        d_qkv_.bytes() + row_stats_.bytes() + row_dots_.bytes() +
                        key_padding_mask_copy_.bytes() + attn_mask_copy_.bytes());
  }

  // Bytes held between forward and backward for a (batch, seq) input in training, the copies of
  // any masks aside.
  std::int64_t saved_bytes(std::int64_t batch, std::int64_t seq) const {
    return pass_bytes(batch, seq, keep_probabilities_).saved();
  }

  // y = MHA(x).   x, y: (B, S, d); key_padding_mask: (B, S) or empty; attn_mask: (S, S) or empty.
  void forward(const ExecutionSpace& exec, const RunContext& ctx, const ConstTensor3& x,
               const Tensor3& y, const Mask& key_padding_mask = {},
               const ConstMatrix& attn_mask = {}) {
    const Where where{name_, "::forward"};
    const ProfilingRegion region(where);
    check_shape(where, "x", x, {-1, -1, d_});
    check_shape(where, "y", y, extents_of(x));
    const int batch = x.extent(0), seq = x.extent(1);
    if (key_padding_mask.data() != nullptr)
      check_shape(where, "key_padding_mask", key_padding_mask, {batch, seq});
    if (attn_mask.data() != nullptr) check_shape(where, "attn_mask", attn_mask, {seq, seq});
    check_distinct(where, "x", x, "y", y);
    check_memory(where, batch, seq, ctx.grad);
    batch_ = batch;
    seq_ = seq;
    probs_kept_ = keep_probabilities_;
    grad_ = ctx.grad;
    dropout_active_ = ctx.training && dropout_ > 0.0;
    step_ = ctx.step;
    // The backward recomputes P with the masks: from copies, so that a caller who fills the next
    // batch's masks into the same memory before this backward still gets this forward's gradients.
    key_padding_mask_ = key_padding_mask;
    attn_mask_ = attn_mask;
    if (ctx.grad && key_padding_mask.data() != nullptr)
      key_padding_mask_ = copy_into(exec, key_padding_mask, key_padding_mask_copy_);
    if (ctx.grad && attn_mask.data() != nullptr)
      attn_mask_ = copy_into(exec, attn_mask, attn_mask_copy_);
    const std::int64_t n = std::int64_t(batch) * seq;
    const auto qkv = qkv_.view(n, 3 * d_);
    const auto context = context_.view(n, d_);
    in_proj_.forward(exec, ctx, as_matrix(x), qkv);
    T* const probs = probs_kept_ ? probs_.view(batch, heads_, seq, seq).data() : nullptr;
    impl::attention_forward(exec, kernel_, problem(), probs);
    out_proj_.forward(exec, ctx, context, as_matrix(y));
  }

  // dx (+)= d MHA / dx, parameter gradients accumulate.   x: the forward's input; dy, dx: (B, S, d)
  void backward(const ExecutionSpace& exec, const RunContext& ctx, const ConstTensor3& x,
                const ConstTensor3& dy, const Tensor3& dx, WriteMode dx_mode = WriteMode::Assign) {
    const Where where{name_, "::backward"};
    const ProfilingRegion region(where);
    check_shape(where, "x", x, {batch_, seq_, d_});
    check_shape(where, "dy", dy, extents_of(x));
    if (dx.data() != nullptr) check_shape(where, "dx", dx, extents_of(x));
    if (!grad_)
      fail(where,
           "the last forward ran without grad (RunContext::grad false) and kept nothing for a "
           "backward");
    const std::int64_t n = std::int64_t(batch_) * seq_;
    const auto context = context_.view(n, d_);
    const auto d_context = d_context_.view(n, d_);
    const auto d_qkv = d_qkv_.view(n, 3 * d_);
    out_proj_.backward(exec, ctx, context, as_matrix(dy), d_context);
    const impl::flash::Gradients<T> gradients{d_context.data(), d_qkv.data(),
                                              row_dots_.view(n * heads_).data()};
    impl::attention_backward(exec, kernel_, problem(), gradients);
    in_proj_.backward(exec, ctx, as_matrix(x), d_qkv,
                      dx.data() ? as_matrix(dx) : Tensor2<T, memory_space>(), dx_mode);
  }

  // The attention probabilities P of the last forward, (B, H, S, S), for inspection.
  kformer::Tensor4<T, memory_space> probabilities() {
    if (!probs_kept_)
      fail(name_ + "::probabilities",
           "the last forward did not keep them (set_keep_probabilities(true) keeps them)");
    return probs_.view(batch_, heads_, seq_, seq_);
  }

 private:
  // The fused kernels' description of the last forward, in the plain View types their instances
  // in layers/attention_instances.cpp are compiled for.
  using Problem = impl::flash::Problem<T, impl::flash::KeyMaskOf<ExecutionSpace>,
                                       impl::flash::AttnMaskOf<ExecutionSpace, T>>;
  Problem problem() {
    const std::int64_t rows = std::int64_t(batch_) * heads_ * seq_;
    const auto stats = row_stats_.view(2, rows);
    Problem p;
    p.batch = batch_;
    p.heads = heads_;
    p.seq = seq_;
    p.d = d_;
    p.qkv = qkv_.view(std::int64_t(batch_) * seq_, 3 * d_).data();
    p.context = context_.view(std::int64_t(batch_) * seq_, d_).data();
    p.row_max = stats.data();  // row 0 (data(), not &stats(0, 0): this runs on the host)
    p.row_inverse_sum = stats.data() + rows;
    p.key_padding_mask = key_padding_mask_;
    p.attn_mask = attn_mask_;
    p.drop = dropout_active_;
    p.decide = DropoutDecisions(seed_, step_, dropout_);
    p.keep_scale = static_cast<T>(dropout_active_ ? 1.0 / (1.0 - dropout_) : 1.0);
    const int head_width = d_ / heads_;
    p.scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(head_width)));
    p.neg_inf = -std::numeric_limits<T>::infinity();
    return p;
  }

  // The bytes of a pass's buffers for a (batch, seq) input: the forward's qkv, context and row
  // statistics (held for the backward), P where kept (B, H, S, S), and the backward's d_context,
  // d_qkv and row dots.
  struct Bytes {
    std::int64_t probabilities = 0, forward = 0, backward = 0;
    std::int64_t saved() const { return probabilities + forward; }
    std::int64_t total() const { return probabilities + forward + backward; }
  };
  Bytes pass_bytes(std::int64_t batch, std::int64_t seq, bool keep_probs) const {
    const std::int64_t t = sizeof(T);
    const std::int64_t rows = batch * seq * d_ * t, row_values = batch * heads_ * seq * t;
    return {keep_probs ? batch * heads_ * seq * seq * t : 0, 4 * rows + 2 * row_values,
            4 * rows + row_values};
  }

  // Refuses a (batch, seq) whose buffers would not fit in the memory space, before allocating
  // any: with P kept they grow with the square of seq and can need terabytes, which would
  // otherwise end in an out-of-memory crash (or the kernel's OOM killer on an overcommitting host).
  void check_memory(const Where& where, std::int64_t batch, std::int64_t seq, bool grad) const {
    const Bytes bytes = pass_bytes(batch, seq, keep_probabilities_);
    const std::int64_t need = grad ? bytes.total() : bytes.saved();
    const std::int64_t held =
        std::int64_t(qkv_.bytes() + probs_.bytes() + context_.bytes() + d_context_.bytes() +
                     d_qkv_.bytes() + row_stats_.bytes() + row_dots_.bytes());
    if (need <= held) return;
    const std::int64_t available = backends::available_bytes<memory_space>();
    if (available >= 0 && need - held > available)
      fail(where, "batch ", batch, ", seq ", seq, " and ", heads_, " heads need ",
           backends::format_bytes(double(need)), " of attention buffers (",
           backends::format_bytes(double(bytes.probabilities)),
           " of them the (batch, heads, seq, seq) probabilities kept for probabilities()), but "
           "only ",
           backends::format_bytes(double(available)), " of ", memory_space::name(),
           " is available: use shorter sequences or smaller batches, or do not keep the "
           "probabilities (set_keep_probabilities(false))");
  }

  // A copy of a (rows, cols) mask in buffer's storage, made on exec.
  template <class MaskView, class Buffer>
  static auto copy_into(const ExecutionSpace& exec, const MaskView& mask, Buffer& buffer) {
    auto copy = buffer.view(mask.extent(0), mask.extent(1));
    Kokkos::deep_copy(exec, copy, mask);
    return copy;
  }

  std::string name_ = "kformer::MultiHeadAttention";
  int d_ = 0, heads_ = 1;
  double dropout_ = 0.0;
  std::uint64_t seed_ = 0;
  bool keep_probabilities_ = true;
  AttentionKernel kernel_ = AttentionKernel::Best;
  bool probs_kept_ = true;  // by the last forward
  bool grad_ = false;       // whether the last forward ran with grad
  bool dropout_active_ = false;
  std::uint64_t step_ = 0;  // the last forward's, for the backward's dropout decisions
  // The last forward's masks (copies, where a backward may follow).
  impl::flash::KeyMaskOf<ExecutionSpace> key_padding_mask_;
  impl::flash::AttnMaskOf<ExecutionSpace, T> attn_mask_;
  int batch_ = 0, seq_ = 0;
  Linear<T, ExecutionSpace> in_proj_, out_proj_;
  GrowingBuffer<T, memory_space> qkv_{"kformer::MultiHeadAttention::qkv"};
  GrowingBuffer<T, memory_space> probs_{"kformer::MultiHeadAttention::probs"};
  GrowingBuffer<T, memory_space> context_{"kformer::MultiHeadAttention::context"};
  GrowingBuffer<T, memory_space> d_context_{"kformer::MultiHeadAttention::d_context"};
  GrowingBuffer<T, memory_space> d_qkv_{"kformer::MultiHeadAttention::d_qkv"};
  // Each query row's softmax maximum and inverse sum (2, B H S), written by the forward.
  GrowingBuffer<T, memory_space> row_stats_{"kformer::MultiHeadAttention::row_stats"};
  // D_i = dO_i . O_i (B H S), the portable backward's workspace.
  GrowingBuffer<T, memory_space> row_dots_{"kformer::MultiHeadAttention::row_dots"};
  GrowingBuffer<bool, memory_space> key_padding_mask_copy_{
      "kformer::MultiHeadAttention::key_padding_mask"};
  GrowingBuffer<T, memory_space> attn_mask_copy_{"kformer::MultiHeadAttention::attn_mask"};
};

}  // namespace kformer
