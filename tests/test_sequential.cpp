// models/sequential.hpp: a stack of layers against the same layers chained by hand (forward,
// backward, parameter gradients, bit for bit), finite differences in double, nn.Sequential's
// state_dict names and a save/load round trip, every backend alike, and no allocation in steady
// state.
#include "support/catch.hpp"

#include <string>
#include <vector>

#include <Kokkos_Core.hpp>

#include <kformer/backends/spaces.hpp>
#include <kformer/core/safetensors.hpp>
#include <kformer/layers/activation.hpp>
#include <kformer/layers/encoder.hpp>
#include <kformer/layers/linear.hpp>
#include <kformer/models/sequential.hpp>
#include <kformer/training/state_dict.hpp>

#include "support/allocation_counter.hpp"
#include "support/gradcheck.hpp"
#include "support/test_support.hpp"

using namespace kformer;
using namespace kformer::testing;

namespace {

constexpr int kIn = 3, kWidth = 8, kOut = 2;

EncoderLayerOptions encoder_options() {
  return EncoderLayerOptions{kWidth, 2, 16, 0.0, Activation::GELU, NormType::LayerNorm, false, 5};
}

// Linear(3 -> 8), GELU, a 2-layer encoder, Linear(8 -> 2).
template <class T, class Space>
auto make_stack(const Space& exec) {
  return Sequential<T, Space, Linear<T, Space>, ActivationLayer<T, Space>,
                    TransformerEncoder<T, Space>, Linear<T, Space>>(
      exec, kIn, Linear<T, Space>(exec, kIn, kWidth, {true, 1}),
      ActivationLayer<T, Space>(exec, Activation::GELU),
      TransformerEncoder<T, Space>(exec, 2, encoder_options()),
      Linear<T, Space>(exec, kWidth, kOut, {true, 2}));
}

// The same layers, chained by hand.
template <class T, class Space>
struct ByHand {
  using M = MemorySpaceOf<Space>;
  explicit ByHand(const Space& exec)
      : up(exec, kIn, kWidth, {true, 1}),
        act(exec, Activation::GELU),
        encoder(exec, 2, encoder_options()),
        down(exec, kWidth, kOut, {true, 2}) {}
  Linear<T, Space> up;
  ActivationLayer<T, Space> act;
  TransformerEncoder<T, Space> encoder;
  Linear<T, Space> down;

  // Returns (y, dx) for x, dy, with the parameter gradients in the layers.
  std::pair<std::vector<double>, std::vector<double>> run(const Space& exec,
                                                          const std::vector<double>& x_values,
                                                          const std::vector<double>& dy_values,
                                                          int b, int s) {
    const auto x = device_from<T, Space>(x_values, b * s, kIn);
    Tensor2<T, M> h0("h0", b * s, kWidth), h1("h1", b * s, kWidth), h2("h2", b * s, kWidth),
        y("y", b * s, kOut), g2("g2", b * s, kWidth), g1("g1", b * s, kWidth),
        g0("g0", b * s, kWidth), dx("dx", b * s, kIn);
    const auto as3 = [&](const Tensor2<T, M>& m) { return Tensor3<T, M>(m.data(), b, s, kWidth); };
    up.forward(exec, {}, x, h0);
    act.forward(exec, {}, h0, h1);
    encoder.forward(exec, {}, as3(h1), as3(h2));
    down.forward(exec, {}, h2, y);
    down.backward(exec, {}, h2, device_from<T, Space>(dy_values, b * s, kOut), g2);
    encoder.backward(exec, {}, as3(h1), as3(g2), as3(g1));
    act.backward(exec, {}, h0, g1, g0);
    up.backward(exec, {}, x, g0, dx);
    return {host_values(y), host_values(dx)};
  }
  std::vector<double> grads() {
    std::vector<double> all;
    const auto add = [&](const std::string&, auto& p) {
      const auto g = host_values(p.grad);
      all.insert(all.end(), g.begin(), g.end());
    };
    up.visit_parameters(add);
    act.visit_parameters(add);
    encoder.visit_parameters(add);
    down.visit_parameters(add);
    return all;
  }
};

}  // namespace

TEMPLATE_LIST_TEST_CASE("Sequential gives the layers' own results, bit for bit", "[sequential]",
                        backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  const Space exec;
  auto net = make_stack<float, Space>(exec);
  ByHand<float, Space> reference(exec);
  CHECK(net.in_features() == kIn);
  CHECK(net.out_features() == kOut);
  const int b = 3, s = 5;
  const auto x_values = random_values(b * s * kIn, 11);
  const auto dy_values = random_values(b * s * kOut, 12);
  const auto [y_ref, dx_ref] = reference.run(exec, x_values, dy_values, b, s);

  const auto x = device_from<float, Space>(x_values, b, s, kIn);
  Tensor3<float, M> y("y", b, s, kOut), dx("dx", b, s, kIn);
  net.zero_grad(exec);
  net.forward(exec, {}, x, y);
  net.backward(exec, {}, x, device_from<float, Space>(dy_values, b, s, kOut), dx);
  CHECK(host_values(y) == y_ref);
  CHECK(host_values(dx) == dx_ref);
  // The gradient buffer holds the layers' gradients in visit order.
  CHECK(host_values(net.parameters().grads()) == reference.grads());

  // An empty dx skips the input gradient; parameter gradients accumulate (+=).
  net.backward(exec, {}, x, device_from<float, Space>(dy_values, b, s, kOut), Tensor3<float, M>());
  const auto twice = host_values(net.parameters().grads());
  const auto once = reference.grads();
  REQUIRE(twice.size() == once.size());
  for (std::size_t i = 0; i < once.size(); ++i)
    CHECK(twice[i] == Approx(2 * once[i]).margin(1e-6));

  // A steady-state step allocates nothing.
  {
    const AllocationCounter counter;
    net.zero_grad(exec);
    net.forward(exec, {}, x, y);
    net.backward(exec, {}, x, device_from<float, Space>(dy_values, b, s, kOut), dx);
    exec.fence();
    // device_from allocated dy (one View); the stack itself nothing.
    CHECK(counter.allocations() == 1);
  }
}

TEMPLATE_LIST_TEST_CASE("Sequential gradients match finite differences in double",
                        "[sequential][gradcheck]", backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  const Space exec;
  auto net = make_stack<double, Space>(exec);
  const int b = 2, s = 3;
  const auto fwd = [&](const std::vector<double>& x) {
    Tensor3<double, M> y("y", b, s, kOut);
    net.forward(exec, {}, device_from<double, Space>(x, b, s, kIn), y);
    return host_values(y);
  };
  const auto bwd = [&](const std::vector<double>& x, const std::vector<double>& dy) {
    const auto xd = device_from<double, Space>(x, b, s, kIn);
    Tensor3<double, M> y("y", b, s, kOut), dx("dx", b, s, kIn);
    net.forward(exec, {}, xd, y);
    net.backward(exec, {}, xd, device_from<double, Space>(dy, b, s, kOut), dx);
    return host_values(dx);
  };
  check_gradients(gradcheck<Space>(net, random_values(b * s * kIn, 21), fwd, bwd, 22), 1e-5);
}

TEMPLATE_LIST_TEST_CASE("Sequential's state_dict: nn.Sequential's names, saved and loaded",
                        "[sequential][state_dict]", backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  const Space exec;
  auto saved = make_stack<float, Space>(exec);
  std::vector<std::string> names;
  saved.visit_parameters([&](const std::string& n, auto&) { names.push_back(n); });
  CHECK(names.front() == "0.weight");
  CHECK(names[1] == "0.bias");
  CHECK(names[2] == "2.layers.0.self_attn.in_proj_weight");
  CHECK(names.back() == "3.bias");

  safetensors::Writer writer;
  add_state_dict(exec, writer, saved);
  // Another initialisation, then the saved weights loaded into it: the same outputs.
  auto loaded = Sequential<float, Space, Linear<float, Space>, ActivationLayer<float, Space>,
                           TransformerEncoder<float, Space>, Linear<float, Space>>(
      exec, kIn, Linear<float, Space>(exec, kIn, kWidth, {true, 91}),
      ActivationLayer<float, Space>(exec, Activation::GELU),
      TransformerEncoder<float, Space>(exec, 2, encoder_options()),
      Linear<float, Space>(exec, kWidth, kOut, {true, 92}));
  const auto x = device_from<float, Space>(random_values(2 * 4 * kIn, 31), 2, 4, kIn);
  Tensor3<float, M> y_saved("y_saved", 2, 4, kOut), y_loaded("y_loaded", 2, 4, kOut);
  saved.forward(exec, {}, x, y_saved);
  loaded.forward(exec, {}, x, y_loaded);
  CHECK(host_values(y_saved) != host_values(y_loaded));
  const auto report =
      load_state_dict(exec, loaded, safetensors::File::parse(writer.serialize(), "stack"));
  CHECK(report.loaded.size() == names.size());
  loaded.forward(exec, {}, x, y_loaded);
  CHECK(host_values(y_saved) == host_values(y_loaded));
}

TEMPLATE_LIST_TEST_CASE("Sequential refuses shapes that are not its own, writing nothing",
                        "[sequential][errors]", backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  const Space exec;
  auto net = make_stack<float, Space>(exec);
  Tensor3<float, M> y("y", 2, 4, kOut);
  Kokkos::deep_copy(y, 7.0f);
  CHECK_THROWS_WITH(net.forward(exec, {}, Tensor3<float, M>("x", 2, 4, kIn + 1), y),
                    "kformer::Sequential::forward: x has shape (2, 4, 4), expected (*, *, 3)");
  CHECK_THROWS_WITH(net.forward(exec, {}, Tensor3<float, M>("x", 2, 5, kIn), y),
                    "kformer::Sequential::forward: y has shape (2, 4, 2), expected (2, 5, 2)");
  CHECK(host_values(y) == std::vector<double>(16, 7.0));
  CHECK_THROWS_WITH(net.backward(exec, {}, Tensor3<float, M>("x", 2, 4, kIn),
                                 Tensor3<float, M>("dy", 2, 4, kOut + 1), Tensor3<float, M>()),
                    "kformer::Sequential::backward: dy has shape (2, 4, 3), expected (2, 4, 2)");
  CHECK_THROWS_WITH(
      (Sequential<float, Space, Linear<float, Space>>(exec, 0, Linear<float, Space>(exec, 1, 1))),
      "kformer::Sequential: in_features must be at least 1, got 0");
  CHECK_THROWS_WITH(
      (Sequential<float, Space, Linear<float, Space>, Linear<float, Space>>(
          exec, 3, Linear<float, Space>(exec, 3, 4), Linear<float, Space>(exec, 5, 1))),
      "kformer::Sequential: layer 1 takes 5 features, but its input has 4");
}
