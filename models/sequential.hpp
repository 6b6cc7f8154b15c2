// A stack of layers applied in order, PyTorch's nn.Sequential for kformer's layers and a user's
// own: one forward, one backward, one contiguous parameter buffer for an optimizer, and
// state_dict names "<index>.<name>" as nn.Sequential gives them (so that a stack saved by
// add_state_dict loads into the same stack in PyTorch and back).
//
//   Sequential<T, ExecutionSpace, Layers...> net(exec, in_features, layer_0, layer_1, ...)
//   net.forward(exec, ctx, x, y)          x: (B, S, in_features), y: (B, S, out_features())
//   net.backward(exec, ctx, x, dy, dx)    x: the last forward's input; dx may be empty
//   net.parameters()                      a ParameterBuffer: values() and grads() for Optimizer
//
// Each layer follows the layer contract (core/layer.hpp) on (B, S, F) tensors, or on (B S, F)
// matrices where its forward takes matrices (Linear, LayerNorm, RMSNorm, FeedForward; a user's
// layer says so with `static constexpr bool takes_matrices = true`). A layer with an
// out_features() changes the width; any other keeps it. The stack keeps each layer's output for the
// backward in buffers that grow to the largest batch seen and are then reused: a steady-state
// step allocates nothing.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include <Kokkos_Core.hpp>

#include "../core/error.hpp"
#include "../core/layer.hpp"
#include "../core/parameter_buffer.hpp"
#include "../core/run_context.hpp"
#include "../core/tensor.hpp"
#include "../core/view_adapters.hpp"
#include "../core/workspace.hpp"
#include "../layers/elementwise.hpp"
#include "../layers/feed_forward.hpp"
#include "../layers/layer_norm.hpp"
#include "../layers/linear.hpp"
#include "../layers/rms_norm.hpp"

namespace kformer {

namespace detail {

template <class Layer, class = void>
struct declares_takes_matrices : std::false_type {};
template <class Layer>
struct declares_takes_matrices<Layer, std::void_t<decltype(Layer::takes_matrices)>>
    : std::bool_constant<Layer::takes_matrices> {};

template <class Layer>
struct takes_matrices : declares_takes_matrices<Layer> {};
template <class T, class E>
struct takes_matrices<Linear<T, E>> : std::true_type {};
template <class T, class E>
struct takes_matrices<LayerNorm<T, E>> : std::true_type {};
template <class T, class E>
struct takes_matrices<RMSNorm<T, E>> : std::true_type {};
template <class T, class E>
struct takes_matrices<FeedForward<T, E>> : std::true_type {};

template <class Layer, class = void>
struct has_out_features : std::false_type {};
template <class Layer>
struct has_out_features<Layer, std::void_t<decltype(std::declval<const Layer&>().out_features())>>
    : std::true_type {};

template <class Layer, class = void>
struct has_in_features : std::false_type {};
template <class Layer>
struct has_in_features<Layer, std::void_t<decltype(std::declval<const Layer&>().in_features())>>
    : std::true_type {};

// Linear skips the input gradient's GEMM when dx is empty; other layers are given a buffer.
template <class Layer>
struct skips_empty_dx : std::false_type {};
template <class T, class E>
struct skips_empty_dx<Linear<T, E>> : std::true_type {};

}  // namespace detail

template <class T, class ExecutionSpace, class... Layers>
class Sequential {
 public:
  static_assert(sizeof...(Layers) >= 1, "kformer::Sequential needs at least one layer");
  using memory_space = typename ExecutionSpace::memory_space;
  using Tensor3 = RowMajorView<kformer::Tensor3<T, memory_space>>;
  using ConstTensor3 = RowMajorView<kformer::Tensor3<const T, memory_space>>;
  static constexpr std::size_t kLayers = sizeof...(Layers);

  // Takes the layers (moved in) and gathers their parameters into one buffer on exec's memory.
  Sequential(const ExecutionSpace& exec, int in_features, Layers... layers)
      : layers_(std::move(layers)...) {
    if (in_features < 1) fail(where_, "in_features must be at least 1, got ", in_features);
    widths_[0] = in_features;
    set_widths_(std::index_sequence_for<Layers...>{});
    parameters_.gather(exec, *this);
  }
  Sequential(const Sequential&) = delete;  // the parameter buffer points into the layers
  Sequential& operator=(const Sequential&) = delete;

  int in_features() const { return widths_[0]; }
  int out_features() const { return widths_[kLayers]; }
  template <std::size_t I>
  auto& layer() {
    return std::get<I>(layers_);
  }
  ParameterBuffer<T, memory_space>& parameters() { return parameters_; }

  // f(name, Param&) with nn.Sequential's names: "0.weight", "2.layers.0.self_attn.in_proj_weight".
  template <class F>
  void visit_parameters(F&& f) {
    visit_(std::index_sequence_for<Layers...>{}, [&](auto index, auto& layer) {
      const std::string prefix = std::to_string(decltype(index)::value) + ".";
      layer.visit_parameters([&](const std::string& n, auto& p) { f(prefix + n, p); });
    });
  }
  void zero_grad(const ExecutionSpace& exec) { fill(exec, T(0), parameters_.grads()); }
  std::int64_t buffer_bytes() const {
    std::int64_t bytes = std::int64_t(grads_[0].bytes() + grads_[1].bytes() + scratch_.bytes());
    for (const auto& o : outputs_)
      bytes += std::int64_t(o.bytes());
    return bytes;
  }

  // y = layer_{L-1}( ... layer_0(x)).   x: (B, S, in_features()), y: (B, S, out_features())
  void forward(const ExecutionSpace& exec, const RunContext& ctx, const ConstTensor3& x,
               const Tensor3& y) {
    check_shape(where_forward_, "x", x, {-1, -1, widths_[0]});
    check_shape(where_forward_, "y", y,
                {std::int64_t(x.extent(0)), std::int64_t(x.extent(1)), widths_[kLayers]});
    forward_(exec, ctx, x, y, std::index_sequence_for<Layers...>{});
  }

  // Parameter gradients accumulate (+=); dx (+)= d net / dx, or is skipped when empty.
  //   x: the last forward's input, dy: (B, S, out_features()), dx: like x or empty
  void backward(const ExecutionSpace& exec, const RunContext& ctx, const ConstTensor3& x,
                const ConstTensor3& dy, const Tensor3& dx, WriteMode dx_mode = WriteMode::Assign) {
    check_shape(where_backward_, "x", x, {-1, -1, widths_[0]});
    check_shape(where_backward_, "dy", dy,
                {std::int64_t(x.extent(0)), std::int64_t(x.extent(1)), widths_[kLayers]});
    if (dx.data() != nullptr) check_shape(where_backward_, "dx", dx, extents_of(x));
    backward_<kLayers - 1>(exec, ctx, x, dy, dx, dx_mode);
  }

 private:
  template <class F, std::size_t... I>
  void visit_(std::index_sequence<I...>, F&& f) {
    (f(std::integral_constant<std::size_t, I>{}, std::get<I>(layers_)), ...);
  }

  template <std::size_t... I>
  void set_widths_(std::index_sequence<I...>) {
    ((widths_[I + 1] = width_after_(I, std::get<I>(layers_), widths_[I])), ...);
  }
  // The width after `layer` (layer `index`) given its input width; a layer with an in_features()
  // must take that width.
  template <class Layer>
  static int width_after_(std::size_t index, const Layer& layer, int width) {
    if constexpr (detail::has_in_features<Layer>::value) {
      if (layer.in_features() != width)
        fail(where_, "layer ", index, " takes ", layer.in_features(),
             " features, but its input has ", width);
    }
    if constexpr (detail::has_out_features<Layer>::value)
      return layer.out_features();
    else
      return width;
  }

  // Layer I's output (B, S, widths_[I + 1]): y for the last layer, else its saved buffer.
  template <std::size_t I>
  Tensor3 output_(const Tensor3& y, int batch, int seq) {
    if constexpr (I + 1 == kLayers)
      return y;
    else
      return outputs_[I].view(batch, seq, widths_[I + 1]);
  }
  // Layer I's input as the last forward left it.
  template <std::size_t I>
  ConstTensor3 input_(const ConstTensor3& x) {
    if constexpr (I == 0)
      return x;
    else
      return outputs_[I - 1].view(x.extent(0), x.extent(1), widths_[I]);
  }

  template <std::size_t... I>
  void forward_(const ExecutionSpace& exec, const RunContext& ctx, const ConstTensor3& x,
                const Tensor3& y, std::index_sequence<I...>) {
    const int batch = x.extent(0), seq = x.extent(1);
    (call_forward_(std::get<I>(layers_), exec, ctx, input_<I>(x), output_<I>(y, batch, seq)), ...);
  }

  template <std::size_t I>
  void backward_(const ExecutionSpace& exec, const RunContext& ctx, const ConstTensor3& x,
                 const ConstTensor3& dy, const Tensor3& dx, WriteMode dx_mode) {
    const int batch = x.extent(0), seq = x.extent(1);
    using Layer = std::tuple_element_t<I, std::tuple<Layers...>>;
    Tensor3 d_in;
    WriteMode mode = WriteMode::Assign;
    if constexpr (I == 0) {
      mode = dx_mode;
      d_in = dx;
      if (dx.data() == nullptr && !detail::skips_empty_dx<Layer>::value)
        d_in = scratch_.view(batch, seq, widths_[0]);
    } else {
      d_in = grads_[I % 2].view(batch, seq, widths_[I]);
    }
    call_backward_(std::get<I>(layers_), exec, ctx, input_<I>(x), dy, d_in, mode);
    if constexpr (I > 0) backward_<I - 1>(exec, ctx, x, ConstTensor3(d_in), dx, dx_mode);
  }

  static Tensor2<const T, memory_space> matrix_(const ConstTensor3& v) {
    return Tensor2<const T, memory_space>(v.data(), v.extent(0) * v.extent(1), v.extent(2));
  }
  static Tensor2<T, memory_space> matrix_(const Tensor3& v) {
    return Tensor2<T, memory_space>(v.data(), v.extent(0) * v.extent(1), v.extent(2));
  }

  template <class Layer>
  static void call_forward_(Layer& layer, const ExecutionSpace& exec, const RunContext& ctx,
                            const ConstTensor3& in, const Tensor3& out) {
    if constexpr (detail::takes_matrices<Layer>::value)
      layer.forward(exec, ctx, matrix_(in), matrix_(out));
    else
      layer.forward(exec, ctx, in, out);
  }
  template <class Layer>
  static void call_backward_(Layer& layer, const ExecutionSpace& exec, const RunContext& ctx,
                             const ConstTensor3& in, const ConstTensor3& d_out, const Tensor3& d_in,
                             WriteMode mode) {
    if constexpr (detail::takes_matrices<Layer>::value)
      layer.backward(exec, ctx, matrix_(in), matrix_(d_out),
                     d_in.data() ? matrix_(d_in) : Tensor2<T, memory_space>(), mode);
    else
      layer.backward(exec, ctx, in, d_out, d_in, mode);
  }

  static constexpr const char* where_ = "kformer::Sequential";
  static constexpr const char* where_forward_ = "kformer::Sequential::forward";
  static constexpr const char* where_backward_ = "kformer::Sequential::backward";
  std::tuple<Layers...> layers_;
  std::array<int, kLayers + 1> widths_{};
  std::array<GrowingBuffer<T, memory_space>, kLayers> outputs_ =
      make_buffers_("kformer::Sequential::output", std::make_index_sequence<kLayers>{});
  GrowingBuffer<T, memory_space> grads_[2] = {
      GrowingBuffer<T, memory_space>("kformer::Sequential::grad0"),
      GrowingBuffer<T, memory_space>("kformer::Sequential::grad1")};
  GrowingBuffer<T, memory_space> scratch_{"kformer::Sequential::scratch"};
  ParameterBuffer<T, memory_space> parameters_;

  template <std::size_t... I>
  static std::array<GrowingBuffer<T, memory_space>, kLayers> make_buffers_(
      const char* label, std::index_sequence<I...>) {
    return {((void)I, GrowingBuffer<T, memory_space>(label))...};
  }
};

}  // namespace kformer
