// A transformer-encoder layer: self-attention and feed-forward blocks with residual connections.
//
// post-norm (TST with BatchNorm; PyTorch's TransformerEncoderLayer with LayerNorm):
//   x1 = norm1(x + dropout1(attn(x)))
//   y  = norm2(x1 + dropout2(ff(x1)))
// pre-norm (norm_first):
//   x1 = x + dropout1(attn(norm1(x)))
//   y  = x1 + dropout2(ff(norm2(x1)))
//
// x, y: (B, S, d). Parameter names follow PyTorch/TST: self_attn.*, linear1.*, linear2.*,
// norm1.*, norm2.* (and norm*.running_mean / running_var buffers with BatchNorm).
#pragma once

#include <cstdint>
#include <string>

#include <Kokkos_Core.hpp>

#include "../core/error.hpp"
#include "../core/finite.hpp"
#include "../core/layer.hpp"
#include "../core/profiling.hpp"
#include "../core/random.hpp"
#include "../core/run_context.hpp"
#include "../core/tensor.hpp"
#include "../core/view_adapters.hpp"
#include "../core/workspace.hpp"
#include "activation.hpp"
#include "attention.hpp"
#include "dropout.hpp"
#include "elementwise.hpp"
#include "feed_forward.hpp"
#include "norm.hpp"

namespace kformer {

struct EncoderLayerOptions {
  int d_model = 64;
  int heads = 8;
  int dim_feedforward = 256;
  double dropout = 0.1;
  Activation activation = Activation::GELU;
  NormType norm = NormType::BatchNorm;
  bool norm_first = false;
  std::uint64_t seed = 0;
};

template <class T, class ExecutionSpace>
class TransformerEncoderLayer {
 public:
  using memory_space = typename ExecutionSpace::memory_space;
  using Tensor3 = RowMajorView<kformer::Tensor3<T, memory_space>>;
  using ConstTensor3 = RowMajorView<kformer::Tensor3<const T, memory_space>>;
  using ConstMatrix = RowMajorView<Tensor2<const T, memory_space>>;
  using Mask = typename MultiHeadAttention<T, ExecutionSpace>::Mask;

  TransformerEncoderLayer() = default;
  TransformerEncoderLayer(const ExecutionSpace& exec, const EncoderLayerOptions& o,
                          std::string name = "kformer::TransformerEncoderLayer")
      : name_(std::move(name)),
        options_(o),
        self_attn_(exec, o.d_model, attention_options(o), name_ + ".self_attn"),
        ff_(exec, o.d_model,
            {o.dim_feedforward, o.activation, o.dropout, derive_seed(o.seed, "ff")}, name_ + ".ff"),
        norm1_(exec, o.norm, o.d_model, name_ + ".norm1"),
        norm2_(exec, o.norm, o.d_model, name_ + ".norm2"),
        dropout1_(exec, o.dropout, derive_seed(o.seed, "dropout1"), name_ + ".dropout1"),
        dropout2_(exec, o.dropout, derive_seed(o.seed, "dropout2"), name_ + ".dropout2") {}

  const EncoderLayerOptions& options() const { return options_; }
  MultiHeadAttention<T, ExecutionSpace>& self_attn() { return self_attn_; }
  Norm<T, ExecutionSpace>& norm1() { return norm1_; }
  Norm<T, ExecutionSpace>& norm2() { return norm2_; }

  template <class F>
  void visit_parameters(F&& f) {
    self_attn_.visit_parameters([&](const std::string& n, auto& p) { f("self_attn." + n, p); });
    ff_.visit_parameters(f);
    norm1_.visit_parameters([&](const std::string& n, auto& p) { f("norm1." + n, p); });
    norm2_.visit_parameters([&](const std::string& n, auto& p) { f("norm2." + n, p); });
  }
  template <class F>
  void visit_buffers(F&& f) {
    norm1_.visit_buffers([&](const std::string& n, auto& b) { f("norm1." + n, b); });
    norm2_.visit_buffers([&](const std::string& n, auto& b) { f("norm2." + n, b); });
  }
  void zero_grad(const ExecutionSpace& exec) {
    self_attn_.zero_grad(exec);
    ff_.zero_grad(exec);
    norm1_.zero_grad(exec);
    norm2_.zero_grad(exec);
  }
  std::int64_t buffer_bytes() const {
    return self_attn_.buffer_bytes() + ff_.buffer_bytes() + norm1_.buffer_bytes() +
           norm2_.buffer_bytes() + dropout1_.buffer_bytes() + dropout2_.buffer_bytes() +
           std::int64_t(attn_out_.bytes() + r1_.bytes() + x1_.bytes() + f_.bytes() + r2_.bytes() +
                        g1_.bytes() + g2_.bytes() + g3_.bytes());
  }

  // y = layer(x).   x, y: (B, S, d), distinct; key_padding_mask: (B, S), true = ignore
  void forward(const ExecutionSpace& exec, const RunContext& ctx, const ConstTensor3& x,
               const Tensor3& y, const Mask& key_padding_mask = {},
               const ConstMatrix& attn_mask = {}) {
    const Where where{name_, "::forward"};
    const ProfilingRegion region(where);
    check_shape(where, "x", x, {-1, -1, options_.d_model});
    check_shape(where, "y", y, extents_of(x));
    check_distinct(where, "x", x, "y", y);
    const int batch = x.extent(0), seq = x.extent(1), d = options_.d_model;
    const std::int64_t n = std::int64_t(batch) * seq;
    tokens_ = n;
    const auto xm = as_matrix(x);
    const auto ym = as_matrix(y);
    const auto a = attn_out_.view(batch, seq, d);
    const auto r1 = r1_.view(n, d);
    const auto x1 = x1_.view(n, d);
    const auto f = f_.view(n, d);
    if (!options_.norm_first) {
      self_attn_.forward(exec, ctx, x, a, key_padding_mask, attn_mask);
      check(exec, a, "self_attn", "forward");
      dropout1_.forward(exec, ctx, a, a);
      add(exec, xm, as_matrix(a), r1);
      norm1_.forward(exec, ctx, r1, x1);
      check(exec, x1, "norm1", "forward");
      ff_.forward(exec, ctx, x1, f);
      check(exec, f, "ff", "forward");
      dropout2_.forward(exec, ctx, f, f);
      add(exec, x1, f, r1_2());
      norm2_.forward(exec, ctx, r1_2(), ym);
      check(exec, ym, "norm2", "forward");
    } else {
      const auto n1 = x1_.view(batch, seq, d);  // norm1(x)
      norm1_.forward(exec, ctx, xm, as_matrix(n1));
      check(exec, n1, "norm1", "forward");
      self_attn_.forward(exec, ctx, n1, a, key_padding_mask, attn_mask);
      check(exec, a, "self_attn", "forward");
      dropout1_.forward(exec, ctx, a, a);
      add(exec, xm, as_matrix(a), r1);        // x1 = x + dropout1(attn(norm1(x)))
      norm2_.forward(exec, ctx, r1, r1_2());  // norm2(x1)
      check(exec, r1_2(), "norm2", "forward");
      ff_.forward(exec, ctx, r1_2(), f);
      check(exec, f, "ff", "forward");
      dropout2_.forward(exec, ctx, f, f);
      add(exec, r1, f, ym);
    }
  }

  // With checks on, forward and backward verify the output (or input gradient) of every block
  // and stop with the first block that produced a NaN or Inf (one reduction per block).
  void set_finite_checks(bool on) { check_finite_ = on; }

  // dx (+)= d layer / dx; parameter gradients accumulate.   x: the forward's input; dy, dx: (B, S,
  // d)
  void backward(const ExecutionSpace& exec, const RunContext& ctx, const ConstTensor3& x,
                const ConstTensor3& dy, const Tensor3& dx, WriteMode dx_mode = WriteMode::Assign) {
    const Where where{name_, "::backward"};
    const ProfilingRegion region(where);
    check_shape(where, "x", x, {-1, -1, options_.d_model});
    check_shape(where, "dy", dy, extents_of(x));
    check_shape(where, "dx", dx, extents_of(x));
    const int batch = x.extent(0), seq = x.extent(1), d = options_.d_model;
    const std::int64_t n = std::int64_t(batch) * seq;
    if (n != tokens_)
      fail(where, "x has shape ", shape_of(x), " but the last forward saw ", tokens_, " tokens");
    const auto xm = as_matrix(x);
    const auto dym = as_matrix(dy);
    const auto dxm = as_matrix(dx);
    const auto a = attn_out_.view(n, d);
    const auto r1 = r1_.view(n, d);
    const auto x1 = x1_.view(n, d);
    const auto f = f_.view(n, d);
    const auto g1 = g1_.view(n, d);
    const auto g2 = g2_.view(n, d);
    const auto g3 = g3_.view(batch, seq, d);
    if (!options_.norm_first) {
      norm2_.backward(exec, ctx, r1_2(), dym, g1);          // g1 = d(x1 + dropout2(f))
      dropout2_.backward(exec, ctx, f, g1, g2);             // g2 = df
      ff_.backward(exec, ctx, x1, g2, g1, WriteMode::Add);  // g1 = dx1
      norm1_.backward(exec, ctx, r1, g1, g2);               // g2 = d(x + dropout1(a))
      dropout1_.backward(exec, ctx, a, g2, as_matrix(g3));  // g3 = da
      write_scaled(exec, dx_mode, T(1), g2, dxm);           // dx (+)= the residual's
      self_attn_.backward(exec, ctx, x, g3, dx, WriteMode::Add);
    } else {
      const auto n1 = x1_.view(batch, seq, d);
      dropout2_.backward(exec, ctx, f, dym, g1);  // g1 = df
      ff_.backward(exec, ctx, r1_2(), g1, g2);    // g2 = d norm2(x1)
      check(exec, g2, "ff", "backward");
      copy(exec, dym, as_matrix(g3));
      norm2_.backward(exec, ctx, r1, g2, as_matrix(g3), WriteMode::Add);  // g3 = dx1
      check(exec, g3, "norm2", "backward");
      dropout1_.backward(exec, ctx, a, as_matrix(g3), g1);  // g1 = da
      self_attn_.backward(exec, ctx, n1, Tensor3(g1.data(), batch, seq, d),
                          Tensor3(g2.data(), batch, seq, d));
      check(exec, g2, "self_attn", "backward");
      write_scaled(exec, dx_mode, T(1), as_matrix(g3), dxm);  // dx (+)= dx1 + d norm1 / dx
      norm1_.backward(exec, ctx, xm, g2, dxm, WriteMode::Add);
      check(exec, dxm, "norm1", "backward");
    }
  }

 private:
  // As in PyTorch's TransformerEncoderLayer (need_weights=False), a forward without grad keeps no
  // attention probabilities: self_attn().set_keep_probabilities(true) keeps them for inspection.
  static MultiHeadAttentionOptions attention_options(const EncoderLayerOptions& o) {
    MultiHeadAttentionOptions options;
    options.heads = o.heads;
    options.dropout = o.dropout;
    options.seed = derive_seed(o.seed, "self_attn");
    options.keep_probabilities = false;
    return options;
  }

  template <class ViewType>
  void check(const ExecutionSpace& exec, const ViewType& v, const char* block,
             const char* pass) const {
    if (check_finite_)
      require_finite(exec, v, "kformer: non-finite value", name_ + "." + block + " (" + pass + ")");
  }

  // The second residual sum (post-norm: x1 + dropout2(f); pre-norm: norm2(x1)).
  Tensor2<T, memory_space> r1_2() { return r2_.view(tokens_, options_.d_model); }

  std::string name_;
  EncoderLayerOptions options_;
  std::int64_t tokens_ = 0;  // batch * seq of the last forward
  bool check_finite_ = false;
  MultiHeadAttention<T, ExecutionSpace> self_attn_;
  FeedForward<T, ExecutionSpace> ff_;
  Norm<T, ExecutionSpace> norm1_, norm2_;
  Dropout<T, ExecutionSpace> dropout1_, dropout2_;
  // Saved for backward: the attention output, both residual sums, the block inputs.
  GrowingBuffer<T, memory_space> attn_out_{"kformer::EncoderLayer::attn_out"};
  GrowingBuffer<T, memory_space> r1_{"kformer::EncoderLayer::residual1"};
  GrowingBuffer<T, memory_space> x1_{"kformer::EncoderLayer::x1"};
  GrowingBuffer<T, memory_space> f_{"kformer::EncoderLayer::ff_out"};
  GrowingBuffer<T, memory_space> r2_{"kformer::EncoderLayer::residual2"};
  // Gradient temporaries.
  GrowingBuffer<T, memory_space> g1_{"kformer::EncoderLayer::grad1"},
      g2_{"kformer::EncoderLayer::grad2"}, g3_{"kformer::EncoderLayer::grad3"};
};

}  // namespace kformer
