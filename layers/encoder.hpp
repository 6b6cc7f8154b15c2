// A stack of transformer-encoder layers (PyTorch's TransformerEncoder without a final norm, as
// TST uses it). Parameters are named layers.{i}.*.
#pragma once

#include <string>
#include <vector>

#include <Kokkos_Core.hpp>

#include "../core/error.hpp"
#include "../core/layer.hpp"
#include "../core/random.hpp"
#include "../core/view_adapters.hpp"
#include "../core/workspace.hpp"
#include "encoder_layer.hpp"

namespace kformer {

template <class T, class ExecutionSpace>
class TransformerEncoder {
 public:
  using memory_space = typename ExecutionSpace::memory_space;
  using Layer = TransformerEncoderLayer<T, ExecutionSpace>;
  using Tensor3 = RowMajorView<kformer::Tensor3<T, memory_space>>;
  using ConstTensor3 = RowMajorView<kformer::Tensor3<const T, memory_space>>;
  using ConstMatrix = RowMajorView<Tensor2<const T, memory_space>>;
  using Mask = typename Layer::Mask;

  TransformerEncoder() = default;
  TransformerEncoder(const ExecutionSpace& exec, int num_layers, const EncoderLayerOptions& options,
                     std::string name = "kformer::TransformerEncoder")
      : name_(std::move(name)), d_(options.d_model) {
    if (num_layers < 1) fail(name_, "num_layers must be at least 1, got ", num_layers);
    for (int i = 0; i < num_layers; ++i) {
      EncoderLayerOptions o = options;
      o.seed = derive_seed(options.seed, "layers." + std::to_string(i));
      layers_.emplace_back(exec, o, name_ + ".layers." + std::to_string(i));
      outputs_.emplace_back("kformer::TransformerEncoder::output");
    }
  }

  int num_layers() const { return static_cast<int>(layers_.size()); }
  Layer& layer(int i) { return layers_.at(i); }

  template <class F>
  void visit_parameters(F&& f) {
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      const std::string prefix = "layers." + std::to_string(i) + ".";
      layers_[i].visit_parameters([&](const std::string& n, auto& p) { f(prefix + n, p); });
    }
  }
  template <class F>
  void visit_buffers(F&& f) {
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      const std::string prefix = "layers." + std::to_string(i) + ".";
      layers_[i].visit_buffers([&](const std::string& n, auto& b) { f(prefix + n, b); });
    }
  }
  void zero_grad(const ExecutionSpace& exec) {
    for (auto& l : layers_)
      l.zero_grad(exec);
  }
  std::int64_t buffer_bytes() const {
    std::int64_t bytes = std::int64_t(grads_[0].bytes() + grads_[1].bytes());
    for (std::size_t i = 0; i < layers_.size(); ++i)
      bytes += layers_[i].buffer_bytes() + std::int64_t(outputs_[i].bytes());
    return bytes;
  }
  // Every layer checks its blocks' outputs and gradients for NaN/Inf (see TransformerEncoderLayer).
  void set_finite_checks(bool on) {
    for (auto& l : layers_)
      l.set_finite_checks(on);
  }

  // y = layers[L-1](... layers[0](x)).   x, y: (B, S, d), distinct
  void forward(const ExecutionSpace& exec, const RunContext& ctx, const ConstTensor3& x,
               const Tensor3& y, const Mask& key_padding_mask = {},
               const ConstMatrix& attn_mask = {}) {
    const Where where{name_, "::forward"};
    check_shape(where, "x", x, {-1, -1, d_});
    check_shape(where, "y", y, extents_of(x));
    const int batch = x.extent(0), seq = x.extent(1);
    ConstTensor3 in = x;
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      const Tensor3 out = i + 1 == layers_.size() ? y : Tensor3(outputs_[i].view(batch, seq, d_));
      layers_[i].forward(exec, ctx, in, out, key_padding_mask, attn_mask);
      in = out;
    }
  }

  // dx (+)= d encoder / dx; parameter gradients accumulate.   x: the forward's input
  void backward(const ExecutionSpace& exec, const RunContext& ctx, const ConstTensor3& x,
                const ConstTensor3& dy, const Tensor3& dx, WriteMode dx_mode = WriteMode::Assign) {
    const Where where{name_, "::backward"};
    check_shape(where, "x", x, {-1, -1, d_});
    check_shape(where, "dy", dy, extents_of(x));
    check_shape(where, "dx", dx, extents_of(x));
    const int batch = x.extent(0), seq = x.extent(1);
    ConstTensor3 grad = dy;
    for (int i = num_layers() - 1; i >= 0; --i) {
      const ConstTensor3 in = i == 0 ? x : ConstTensor3(outputs_[i - 1].view(batch, seq, d_));
      // Alternate between two buffers; the first layer writes dx.
      const Tensor3 out = i == 0 ? dx : Tensor3(grads_[i % 2].view(batch, seq, d_));
      layers_[i].backward(exec, ctx, in, grad, out, i == 0 ? dx_mode : WriteMode::Assign);
      grad = out;
    }
  }

 private:
  std::string name_;
  int d_ = 0;
  std::vector<Layer> layers_;
  std::vector<GrowingBuffer<T, memory_space>> outputs_;  // layer i's output, saved for backward
  GrowingBuffer<T, memory_space> grads_[2] = {
      GrowingBuffer<T, memory_space>("kformer::TransformerEncoder::grad0"),
      GrowingBuffer<T, memory_space>("kformer::TransformerEncoder::grad1")};
};

}  // namespace kformer
