// GeometricMachineLearning.jl's VolumePreservingTransformer(sys_dim, seq_length; n_blocks,
// n_linear, L, activation, init_upper): L units of volume-preserving attention followed by a
// volume-preserving feed-forward network applied to every time step, without residual
// connections (a residual around the attention would break the volume preservation).
//
//   x, y: (batch, seq_length, sys_dim)  (Julia's (sys_dim, seq_length, batch), column-major)
//
// Volume preservation, in the sense the Julia package and its paper give it: every feed-forward
// layer has det J = 1 exactly, and each attention, with its mixing matrix Λ held fixed, is the
// linear map Λᵀ ⊗ I with det 1; so the Jacobian with every Λ held (backward with
// MixingDerivative::Held) has det 1. The full Jacobian, through Λ(x), does not (see
// volume_preserving_attention.hpp). With kformer's PositionalEncoding in front (identity
// Jacobian), the same holds.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <Kokkos_Core.hpp>

#include "../core/error.hpp"
#include "../core/layer.hpp"
#include "../core/random.hpp"
#include "../core/tensor.hpp"
#include "../core/view_adapters.hpp"
#include "../core/workspace.hpp"
#include "../layers/volume_preserving_attention.hpp"
#include "../layers/volume_preserving_feed_forward.hpp"

namespace kformer {

struct VolumePreservingTransformerOptions {
  int n_blocks = 1;  // of each feed-forward network
  int n_linear = 1;
  int units = 2;  // Julia's L: attention + feed-forward units (its default)
  VolumePreservingActivation activation = VolumePreservingActivation::Tanh;
  bool init_upper = false;
  std::uint64_t seed = 0;
};

template <class T, class ExecutionSpace>
class VolumePreservingTransformer {
 public:
  using execution_space = ExecutionSpace;
  using memory_space = typename ExecutionSpace::memory_space;
  using Tensor3 = RowMajorView<kformer::Tensor3<T, memory_space>>;
  using ConstTensor3 = RowMajorView<kformer::Tensor3<const T, memory_space>>;
  using Matrix = RowMajorView<Tensor2<T, memory_space>>;
  using ConstMatrix = RowMajorView<Tensor2<const T, memory_space>>;

  VolumePreservingTransformer() = default;
  VolumePreservingTransformer(const ExecutionSpace& exec, int sys_dim, int seq_length,
                              const VolumePreservingTransformerOptions& options = {},
                              std::string name = "kformer::VolumePreservingTransformer")
      : name_(std::move(name)), sys_dim_(sys_dim), seq_length_(seq_length) {
    if (sys_dim < 2)
      fail(name_, "sys_dim must be at least 2 (the feed-forward layers are triangular), got ",
           sys_dim);
    if (seq_length < 1 || seq_length > VolumePreservingAttention<T, ExecutionSpace>::kMaxSeqLength)
      fail(name_, "seq_length must be between 1 and ",
           VolumePreservingAttention<T, ExecutionSpace>::kMaxSeqLength, ", got ", seq_length);
    if (options.units < 1) fail(name_, "units (L) must be at least 1, got ", options.units);
    for (int u = 0; u < options.units; ++u) {
      const std::string index = std::to_string(u);
      attention_.emplace_back(
          exec, sys_dim,
          VolumePreservingAttentionOptions{derive_seed(options.seed, "attention." + index)},
          name_ + ".attention." + index);
      feed_forward_.emplace_back(
          exec, sys_dim,
          VolumePreservingFeedForwardOptions{options.n_blocks, options.n_linear, options.activation,
                                             options.init_upper,
                                             derive_seed(options.seed, "feed_forward." + index)},
          name_ + ".feed_forward." + index);
    }
  }

  int sys_dim() const { return sys_dim_; }
  int seq_length() const { return seq_length_; }
  int units() const { return static_cast<int>(attention_.size()); }
  VolumePreservingAttention<T, ExecutionSpace>& attention(int u) { return attention_.at(u); }

  template <class F>
  void visit_parameters(F&& f) {
    for (std::size_t u = 0; u < attention_.size(); ++u) {
      const std::string index = std::to_string(u);
      const std::string attention = "attention." + index + ".";
      const std::string feed_forward = "feed_forward." + index + ".";
      attention_[u].visit_parameters([&](const std::string& n, auto& p) { f(attention + n, p); });
      feed_forward_[u].visit_parameters(
          [&](const std::string& n, auto& p) { f(feed_forward + n, p); });
    }
  }
  template <class F>
  void visit_buffers(F&&) {}
  void zero_grad(const ExecutionSpace& exec) {
    for (std::size_t u = 0; u < attention_.size(); ++u) {
      attention_[u].zero_grad(exec);
      feed_forward_[u].zero_grad(exec);
    }
  }
  std::int64_t buffer_bytes() const {
    std::int64_t bytes = std::int64_t(outputs_.bytes() + grads_.bytes());
    for (std::size_t u = 0; u < attention_.size(); ++u)
      bytes += attention_[u].buffer_bytes() + feed_forward_[u].buffer_bytes();
    return bytes;
  }

  // y = FF_{L-1}(Att_{L-1}(... FF_0(Att_0(x)))).   x, y: (batch, seq_length, sys_dim), distinct
  void forward(const ExecutionSpace& exec, const RunContext& ctx, const ConstTensor3& x,
               const Tensor3& y) {
    const Where where{name_, "::forward"};
    check_shape(where, "x", x, {-1, seq_length_, sys_dim_});
    check_shape(where, "y", y, extents_of(x));
    check_distinct(where, "x", x, "y", y);
    const int batch = x.extent(0);
    // outputs(2u): attention u's output; outputs(2u + 1): feed-forward u's (the last is y)
    auto kept = outputs_.view(2 * units(), batch, seq_length_, sys_dim_);
    ConstTensor3 in = x;
    for (int u = 0; u < units(); ++u) {
      const Tensor3 mixed = slot(kept, 2 * u);
      attention_[u].forward(exec, ctx, in, mixed);
      const Tensor3 out = u + 1 == units() ? y : slot(kept, 2 * u + 1);
      feed_forward_[u].forward(exec, ctx, as_matrix(mixed), as_matrix(out));
      in = out;
    }
  }

  // Through the units in reverse; parameter gradients accumulate. With MixingDerivative::Held
  // every Λ is a constant (the Jacobian of the volume-preservation claim) and the attention
  // weights get no gradient.   x: the last forward's input; dy, dx: like x (dx may be empty)
  void backward(const ExecutionSpace& exec, const RunContext& ctx, const ConstTensor3& x,
                const ConstTensor3& dy, const Tensor3& dx, WriteMode dx_mode = WriteMode::Assign,
                MixingDerivative derivative = MixingDerivative::Full) {
    const Where where{name_, "::backward"};
    check_shape(where, "x", x, {-1, seq_length_, sys_dim_});
    check_shape(where, "dy", dy, extents_of(x));
    if (dx.data() != nullptr) check_shape(where, "dx", dx, extents_of(x));
    const int batch = x.extent(0);
    auto kept = outputs_.view(2 * units(), batch, seq_length_, sys_dim_);
    auto ping = grads_.view(2, batch, seq_length_, sys_dim_);
    ConstTensor3 upstream = dy;
    for (int u = units() - 1; u >= 0; --u) {
      const Tensor3 d_mixed = slot(ping, 0);
      feed_forward_[u].backward(exec, ctx, as_matrix(ConstTensor3(slot(kept, 2 * u))),
                                as_matrix(upstream), as_matrix(d_mixed));
      const ConstTensor3 in = u == 0 ? x : ConstTensor3(slot(kept, 2 * u - 1));
      const Tensor3 down = u == 0 ? dx : slot(ping, 1);
      attention_[u].backward(exec, ctx, in, d_mixed, down, u == 0 ? dx_mode : WriteMode::Assign,
                             derivative);
      upstream = down;
    }
  }

 private:
  template <class View4>
  Tensor3 slot(const View4& v, int i) const {
    return Tensor3(&v(i, 0, 0, 0), v.extent(1), v.extent(2), v.extent(3));
  }
  static ConstMatrix as_matrix(const ConstTensor3& x) {
    return ConstMatrix(x.data(), x.extent(0) * x.extent(1), x.extent(2));
  }
  static Matrix as_matrix(const Tensor3& x) {
    return Matrix(x.data(), x.extent(0) * x.extent(1), x.extent(2));
  }

  std::string name_ = "kformer::VolumePreservingTransformer";
  int sys_dim_ = 0, seq_length_ = 0;
  std::vector<VolumePreservingAttention<T, ExecutionSpace>> attention_;
  std::vector<VolumePreservingFeedForward<T, ExecutionSpace>> feed_forward_;
  GrowingBuffer<T, memory_space> outputs_{"kformer::VolumePreservingTransformer::outputs"};
  GrowingBuffer<T, memory_space> grads_{"kformer::VolumePreservingTransformer::grads"};
};

}  // namespace kformer
