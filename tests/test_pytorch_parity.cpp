// Forward and backward parity with PyTorch 1.13 on the golden values that
// tests/golden/make_layer_goldens.py computed (float32, dropout 0): outputs within 1e-5 and
// gradients within 1e-4, relative to the largest reference value, on every enabled backend.
#include "support/catch.hpp"

#include <Kokkos_Core.hpp>

#include <kformer/backends/spaces.hpp>
#include <kformer/kformer.hpp>

#include "support/golden.hpp"
#include "support/test_support.hpp"

using namespace kformer;
using namespace kformer::testing;

namespace {

constexpr double kForwardTolerance = 1e-5;
constexpr double kGradientTolerance = 1e-4;

const Golden& goldens() {
  static const Golden g(KFORMER_GOLDEN_DIR "/layers.safetensors");
  return g;
}

// The golden key padding mask (1.0 = ignore) as a device bool View.
template <class Space>
Mask<Space> golden_mask(const std::string& name) {
  const auto& t = goldens().tensor(name);
  Mask<Space> m("kpm", t.shape.at(0), t.shape.at(1));
  auto h = Kokkos::create_mirror_view(m);
  for (std::size_t i = 0; i < h.size(); ++i)
    h.data()[i] = t.values[i] != 0.0;
  Kokkos::deep_copy(m, h);
  return m;
}

// Loads "<case>.param.<prefix><name>" into every parameter of the layer.
template <class Layer>
void load_parameters(Layer& layer, const std::string& prefix, const Golden& golden = goldens()) {
  layer.visit_parameters([&](const std::string& name, auto& p) {
    const auto& t = golden.tensor(prefix + name);
    REQUIRE(static_cast<std::int64_t>(t.values.size()) == p.numel());
    auto h = Kokkos::create_mirror_view(p.value);
    for (std::size_t i = 0; i < t.values.size(); ++i)
      h(i) = static_cast<typename decltype(h)::value_type>(t.values[i]);
    Kokkos::deep_copy(p.value, h);
  });
}

// Every parameter gradient against "<case>.grad.<prefix><name>", relative to the tensor's largest
// value, with a floor of 1 % of the largest gradient of the layer: a bias feeding BatchNorm has a
// mathematically zero gradient, which both sides only approximate (~1e-8).
template <class Layer>
void check_parameter_gradients(Layer& layer, const std::string& prefix,
                               const Golden& golden = goldens()) {
  double scale = 0;
  layer.visit_parameters([&](const std::string& name, auto&) {
    for (double g : golden.tensor(prefix + name).values)
      scale = std::max(scale, std::abs(g));
  });
  layer.visit_parameters([&](const std::string& name, auto& p) {
    CAPTURE(name);
    CHECK(max_rel_diff(host_values(p.grad), golden.tensor(prefix + name).values, 0.01 * scale) <=
          kGradientTolerance);
  });
}

template <class Space, class Layer, class Forward, class Backward>
void check_case(const std::string& c, Layer& layer, const std::string& param_prefix,
                Forward forward, Backward backward, const Golden& golden = goldens()) {
  CAPTURE(c);
  const auto& x = golden.tensor(c + ".x");
  const auto& y_ref = golden.tensor(c + ".y");
  load_parameters(layer, c + ".param." + param_prefix, golden);
  layer.zero_grad(Space());
  const std::vector<double> y = forward(x);
  CHECK(max_rel_diff(y, y_ref.values) <= kForwardTolerance);
  const std::vector<double> dx = backward(x, golden.tensor(c + ".dy"));
  if (golden.has(c + ".dx"))
    CHECK(max_rel_diff(dx, golden.tensor(c + ".dx").values) <= kGradientTolerance);
  check_parameter_gradients(layer, c + ".grad." + param_prefix, golden);
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("PyTorch parity: Linear", "[parity]", backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  Linear<float, Space> layer(Space(), 5, 7);
  const int n = 6;
  check_case<Space>(
      "linear", layer, "",
      [&](const GoldenTensor& x) {
        Tensor2<float, M> y("y", n, 7);
        layer.forward(Space(), {}, device_from<float, Space>(x.values, n, 5), y);
        return host_values(y);
      },
      [&](const GoldenTensor& x, const GoldenTensor& dy) {
        Tensor2<float, M> dx("dx", n, 5);
        layer.backward(Space(), {}, device_from<float, Space>(x.values, n, 5),
                       device_from<float, Space>(dy.values, n, 7), dx);
        return host_values(dx);
      });
}

TEMPLATE_LIST_TEST_CASE("PyTorch parity: Conv1d projection", "[parity]", backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  for (const std::string c : {"conv1d_same", "conv1d_strided"}) {
    const auto h = goldens().hyper(c);
    Conv1dOptions o;
    o.kernel_size = h.at("kernel_size");
    o.stride = h.at("stride");
    o.dilation = h.at("dilation");
    o.same_padding = h.at("same");
    o.padding = h.at("padding");
    Conv1dProjection<float, Space> layer(Space(), 4, 6, o);
    const int batch = 2, seq = 9, out = layer.output_length(seq);
    check_case<Space>(
        c, layer, "conv.",
        [&](const GoldenTensor& x) {
          Tensor3<float, M> y("y", batch, out, 6);
          layer.forward(Space(), {}, device_from<float, Space>(x.values, batch, seq, 4), y);
          return host_values(y);
        },
        [&](const GoldenTensor& x, const GoldenTensor& dy) {
          Tensor3<float, M> dx("dx", batch, seq, 4);
          layer.backward(Space(), {}, device_from<float, Space>(x.values, batch, seq, 4),
                         device_from<float, Space>(dy.values, batch, out, 6), dx);
          return host_values(dx);
        });
  }
}

TEMPLATE_LIST_TEST_CASE("PyTorch parity: GELU and ReLU", "[parity]", backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  for (const auto& [c, a] :
       {std::pair{"gelu", Activation::GELU}, std::pair{"relu", Activation::ReLU}}) {
    CAPTURE(c);
    const auto& x = goldens().tensor(std::string(c) + ".x");
    const int n = x.values.size();
    Tensor1<float, M> y("y", n), dx("dx", n);
    const auto xd = device_from<float, Space>(x.values, n);
    activation_forward(Space(), a, xd, y);
    CHECK(max_rel_diff(host_values(y), goldens().tensor(std::string(c) + ".y").values) <=
          kForwardTolerance);
    activation_backward(
        Space(), a, xd,
        device_from<float, Space>(goldens().tensor(std::string(c) + ".dy").values, n), dx);
    CHECK(max_rel_diff(host_values(dx), goldens().tensor(std::string(c) + ".dx").values) <=
          kGradientTolerance);
  }
}

TEMPLATE_LIST_TEST_CASE("PyTorch parity: LayerNorm, RMSNorm and BatchNorm (training and eval)",
                        "[parity]", backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  static constexpr int n = 10, d = 8;  // static: Clang (hipcc) wants locals captured below
  const auto forward_of = [&](auto& layer, bool training) {
    return [&layer, training](const GoldenTensor& x) {
      Tensor2<float, M> y("y", n, d);
      layer.forward(Space(), RunContext{training, 0}, device_from<float, Space>(x.values, n, d), y);
      return host_values(y);
    };
  };
  const auto backward_of = [&](auto& layer) {
    return [&layer](const GoldenTensor& x, const GoldenTensor& dy) {
      Tensor2<float, M> dx("dx", n, d);
      layer.backward(Space(), {}, device_from<float, Space>(x.values, n, d),
                     device_from<float, Space>(dy.values, n, d), dx);
      return host_values(dx);
    };
  };
  SECTION("LayerNorm") {
    LayerNorm<float, Space> layer(Space(), d);
    check_case<Space>("layernorm", layer, "", forward_of(layer, true), backward_of(layer));
  }
  SECTION("RMSNorm (nn.RMSNorm needs a PyTorch newer than Debian's: a golden file of its own)") {
    static const Golden rms(KFORMER_GOLDEN_DIR "/rms_norm.safetensors");
    RMSNorm<float, Space> layer(Space(), d, 1e-5);
    check_case<Space>("rmsnorm", layer, "", forward_of(layer, true), backward_of(layer), rms);
  }
  SECTION("BatchNorm, training: batch statistics and running-statistics update") {
    BatchNorm<float, Space> layer(Space(), d);
    check_case<Space>("batchnorm_train", layer, "bn.", forward_of(layer, true), backward_of(layer));
    CHECK(max_rel_diff(host_values(layer.running_mean()),
                       goldens().tensor("batchnorm_train.buffer.bn.running_mean").values) <=
          kForwardTolerance);
    CHECK(max_rel_diff(host_values(layer.running_var()),
                       goldens().tensor("batchnorm_train.buffer.bn.running_var").values) <=
          kForwardTolerance);
    CHECK(layer.num_batches_tracked() == 1);
  }
  SECTION("BatchNorm, eval: running statistics") {
    BatchNorm<float, Space> layer(Space(), d);
    Kokkos::deep_copy(layer.running_mean(),
                      device_from<float, Space>(
                          goldens().tensor("batchnorm_eval.buffer.bn.running_mean").values, d));
    Kokkos::deep_copy(layer.running_var(),
                      device_from<float, Space>(
                          goldens().tensor("batchnorm_eval.buffer.bn.running_var").values, d));
    check_case<Space>("batchnorm_eval", layer, "bn.", forward_of(layer, false), backward_of(layer));
  }
}

TEMPLATE_LIST_TEST_CASE("PyTorch parity: MultiHeadAttention with and without masks",
                        "[parity][attention]", backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  const int batch = 3, seq = 6, d = 8;
  for (const std::string c : {"mha", "mha_padding", "mha_masks"}) {
    MultiHeadAttention<float, Space> layer(Space(), d, {2, 0.0, 0});
    const auto kpm = goldens().has(c + ".key_padding_mask")
                         ? golden_mask<Space>(c + ".key_padding_mask")
                         : Mask<Space>();
    Tensor2<float, M> mask;
    if (goldens().has(c + ".attn_mask"))
      mask = device_from<float, Space>(goldens().tensor(c + ".attn_mask").values, seq, seq);
    check_case<Space>(
        c, layer, "self_attn.",
        [&](const GoldenTensor& x) {
          Tensor3<float, M> y("y", batch, seq, d);
          layer.forward(Space(), RunContext{true, 0},
                        device_from<float, Space>(x.values, batch, seq, d), y, kpm, mask);
          return host_values(y);
        },
        [&](const GoldenTensor& x, const GoldenTensor& dy) {
          Tensor3<float, M> dx("dx", batch, seq, d);
          layer.backward(Space(), {}, device_from<float, Space>(x.values, batch, seq, d),
                         device_from<float, Space>(dy.values, batch, seq, d), dx);
          return host_values(dx);
        });
  }
}

TEMPLATE_LIST_TEST_CASE(
    "PyTorch parity: encoder layers (BatchNorm/LayerNorm, post/pre-norm) and a 2-layer stack",
    "[parity][encoder]", backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  const int batch = 3, seq = 5;
  for (const std::string c : {"encoder_layernorm_post", "encoder_layernorm_pre",
                              "encoder_batchnorm_post", "encoder_stack"}) {
    const auto h = goldens().hyper(c);
    EncoderLayerOptions o;
    o.d_model = h.at("d_model");
    o.heads = h.at("heads");
    o.dim_feedforward = h.at("dim_feedforward");
    o.dropout = 0.0;
    o.activation = parse_activation(h.at("activation").get<std::string>());
    o.norm = parse_norm(h.at("norm").get<std::string>());
    o.norm_first = h.at("norm_first");
    const int d = o.d_model;
    const auto kpm = golden_mask<Space>(c + ".key_padding_mask");
    TransformerEncoder<float, Space> encoder(Space(), h.at("layers").get<int>(), o);
    // A single layer's parameters carry no "layers.0." prefix in the golden file.
    const bool single = h.at("layers").get<int>() == 1;
    const auto run_forward = [&](const GoldenTensor& x) {
      Tensor3<float, M> y("y", batch, seq, d);
      encoder.forward(Space(), RunContext{true, 0},
                      device_from<float, Space>(x.values, batch, seq, d), y, kpm);
      return host_values(y);
    };
    const auto run_backward = [&](const GoldenTensor& x, const GoldenTensor& dy) {
      Tensor3<float, M> dx("dx", batch, seq, d);
      encoder.backward(Space(), {}, device_from<float, Space>(x.values, batch, seq, d),
                       device_from<float, Space>(dy.values, batch, seq, d), dx);
      return host_values(dx);
    };
    if (single)
      check_case<Space>(c, encoder.layer(0), "", run_forward, run_backward);
    else
      check_case<Space>(c, encoder, "", run_forward, run_backward);
  }
}
