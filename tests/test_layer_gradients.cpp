// Every layer's backward pass against central finite differences in double precision, on every
// enabled backend: input and parameter gradients within 1e-6 relative error.
#include "support/catch.hpp"

#include <Kokkos_Core.hpp>

#include <kformer/backends/spaces.hpp>
#include <kformer/layers/activation.hpp>
#include <kformer/layers/attention.hpp>
#include <kformer/layers/batch_norm.hpp>
#include <kformer/layers/conv1d.hpp>
#include <kformer/layers/dropout.hpp>
#include <kformer/layers/encoder.hpp>
#include <kformer/layers/encoder_layer.hpp>
#include <kformer/layers/feed_forward.hpp>
#include <kformer/layers/layer_norm.hpp>
#include <kformer/layers/linear.hpp>

#include "support/gradcheck.hpp"
#include "support/test_support.hpp"

using namespace kformer;
using namespace kformer::testing;

namespace {

// A layer without parameters, for the elementwise functions.
struct NoParameters {
  template <class F>
  void visit_parameters(F&&) {}
  template <class Space>
  void zero_grad(const Space&) {}
};

}  // namespace

TEMPLATE_LIST_TEST_CASE("Linear gradients", "[layers][gradcheck]", backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  for (bool bias : {true, false}) {
    Linear<double, Space> layer(Space(), 5, 4, {bias, 7});
    const int n = 6;
    const auto fwd = [&](const std::vector<double>& x) {
      Tensor2<double, M> y("y", n, 4);
      layer.forward(Space(), {}, device_from<double, Space>(x, n, 5), y);
      return host_values(y);
    };
    const auto bwd = [&](const std::vector<double>& x, const std::vector<double>& dy) {
      const auto xd = device_from<double, Space>(x, n, 5);
      Tensor2<double, M> y("y", n, 4), dx("dx", n, 5);
      layer.forward(Space(), {}, xd, y);
      layer.backward(Space(), {}, xd, device_from<double, Space>(dy, n, 4), dx);
      return host_values(dx);
    };
    check_gradients(gradcheck<Space>(layer, random_values(n * 5, 1), fwd, bwd, 2));
  }
}

TEMPLATE_LIST_TEST_CASE("Conv1dProjection gradients", "[layers][gradcheck]",
                        backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  struct Case {
    int k, stride, dilation;
    bool same;
    int padding;
  };
  for (const Case c : {Case{3, 1, 1, true, 0}, Case{4, 1, 2, true, 0}, Case{3, 2, 1, false, 1},
                       Case{2, 3, 2, false, 2}}) {
    CAPTURE(c.k, c.stride, c.dilation, c.same, c.padding);
    Conv1dOptions o;
    o.kernel_size = c.k;
    o.stride = c.stride;
    o.dilation = c.dilation;
    o.same_padding = c.same;
    o.padding = c.padding;
    o.seed = 3;
    Conv1dProjection<double, Space> layer(Space(), 3, 4, o);
    const int batch = 2, seq = 7, out = layer.output_length(seq);
    REQUIRE(out > 0);
    const auto fwd = [&](const std::vector<double>& x) {
      Tensor3<double, M> y("y", batch, out, 4);
      layer.forward(Space(), {}, device_from<double, Space>(x, batch, seq, 3), y);
      return host_values(y);
    };
    const auto bwd = [&](const std::vector<double>& x, const std::vector<double>& dy) {
      const auto xd = device_from<double, Space>(x, batch, seq, 3);
      Tensor3<double, M> y("y", batch, out, 4), dx("dx", batch, seq, 3);
      layer.forward(Space(), {}, xd, y);
      layer.backward(Space(), {}, xd, device_from<double, Space>(dy, batch, out, 4), dx);
      return host_values(dx);
    };
    check_gradients(gradcheck<Space>(layer, random_values(batch * seq * 3, 4), fwd, bwd, 5));
  }
}

TEMPLATE_LIST_TEST_CASE("GELU, ReLU and Dropout gradients", "[layers][gradcheck]",
                        backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  NoParameters none;
  // Inputs away from ReLU's kink at 0.
  auto x0 = random_values(40, 9, -3.0, 3.0);
  for (auto& v : x0)
    v += v > 0 ? 0.1 : -0.1;
  for (const Activation a : {Activation::GELU, Activation::ReLU}) {
    CAPTURE(activation_name(a));
    const auto fwd = [&](const std::vector<double>& x) {
      Tensor1<double, M> y("y", x.size());
      activation_forward(Space(), a, device_from<double, Space>(x, x.size()), y);
      return host_values(y);
    };
    const auto bwd = [&](const std::vector<double>& x, const std::vector<double>& dy) {
      Tensor1<double, M> dx("dx", x.size());
      activation_backward(Space(), a, device_from<double, Space>(x, x.size()),
                          device_from<double, Space>(dy, dy.size()), dx);
      return host_values(dx);
    };
    check_gradients(gradcheck<Space>(none, x0, fwd, bwd, 10));
  }
  // Dropout at a fixed step draws the same mask each time: a linear map, checked the same way.
  Dropout<double, Space> dropout(Space(), 0.3, 77);
  const RunContext ctx{true, 5};
  const auto fwd = [&](const std::vector<double>& x) {
    Tensor1<double, M> y("y", x.size());
    dropout.forward(Space(), ctx, device_from<double, Space>(x, x.size()), y);
    return host_values(y);
  };
  const auto bwd = [&](const std::vector<double>& x, const std::vector<double>& dy) {
    Tensor1<double, M> y("y", x.size()), dx("dx", x.size());
    dropout.forward(Space(), ctx, device_from<double, Space>(x, x.size()), y);
    dropout.backward(Space(), ctx, dx, device_from<double, Space>(dy, dy.size()), dx);
    return host_values(dx);
  };
  check_gradients(gradcheck<Space>(none, x0, fwd, bwd, 11));
}

TEMPLATE_LIST_TEST_CASE("LayerNorm, RMSNorm and BatchNorm gradients", "[layers][gradcheck]",
                        backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  const int n = 7, d = 5;
  const auto x0 = random_values(n * d, 12, -2.0, 2.0);
  const auto run = [&](auto& layer, bool training) {
    const RunContext ctx{training, 0};
    const auto fwd = [&](const std::vector<double>& x) {
      Tensor2<double, M> y("y", n, d);
      layer.forward(Space(), ctx, device_from<double, Space>(x, n, d), y);
      return host_values(y);
    };
    const auto bwd = [&](const std::vector<double>& x, const std::vector<double>& dy) {
      const auto xd = device_from<double, Space>(x, n, d);
      Tensor2<double, M> y("y", n, d), dx("dx", n, d);
      layer.forward(Space(), ctx, xd, y);
      layer.backward(Space(), {}, xd, device_from<double, Space>(dy, n, d), dx);
      return host_values(dx);
    };
    // Non-trivial affine parameters.
    set_parameter(layer, 0, random_values(d, 13, 0.5, 1.5));
    set_parameter(layer, 1, random_values(d, 14));
    check_gradients(gradcheck<Space>(layer, x0, fwd, bwd, 15));
  };
  SECTION("LayerNorm") {
    LayerNorm<double, Space> layer(Space(), d);
    run(layer, true);
  }
  SECTION("RMSNorm") {
    RMSNorm<double, Space> layer(Space(), d);
    run(layer, true);
  }
  SECTION("BatchNorm, training (batch statistics)") {
    BatchNorm<double, Space> layer(Space(), d);
    run(layer, true);
  }
  SECTION("BatchNorm, eval (running statistics)") {
    BatchNorm<double, Space> layer(Space(), d);
    // Running statistics that are not the defaults: a few training steps on other data.
    for (int i = 0; i < 3; ++i) {
      Tensor2<double, M> y("y", n, d);
      layer.forward(Space(), RunContext{true, 0},
                    device_from<double, Space>(random_values(n * d, 20 + i), n, d), y);
    }
    run(layer, false);
  }
}

TEMPLATE_LIST_TEST_CASE("MultiHeadAttention gradients with and without masks",
                        "[layers][gradcheck][attention]", backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  struct Case {
    const char* name;
    bool padding, additive;
    double dropout;
  };
  // seq 21: rows long enough for the CPU softmax's vector loops (8 and 16 lanes), with a tail;
  // seq 70: two key tiles of the portable kernel, the second partial (with both kernels).
  for (const AttentionKernel kernel : {AttentionKernel::Best, AttentionKernel::Portable}) {
    // Where Best is the portable kernel too (no CPU specialisation here), check it once.
    if (kernel == AttentionKernel::Portable &&
        !impl::runs_host_specialisation<Space, double>(AttentionKernel::Best))
      continue;
    for (const int seq : {4, 21, 70})
      for (const Case c :
           {Case{"plain", false, false, 0.0}, Case{"key padding", true, false, 0.0},
            Case{"additive mask", false, true, 0.0}, Case{"both + dropout", true, true, 0.25}}) {
        if (seq == 70 && !c.padding) continue;  // the long rows once with each mask
        CAPTURE(kernel == AttentionKernel::Best ? "best" : "portable", seq, c.name);
        const int batch = 2, d = 6;
        const auto x0 = random_values(batch * seq * d, 30);
        MultiHeadAttentionOptions options{3, c.dropout, 31};
        options.kernel = kernel;
        MultiHeadAttention<double, Space> layer(Space(), d, options);
        // Non-zero biases so that their gradients are exercised.
        set_parameter(layer, 1, random_values(3 * d, 32));
        set_parameter(layer, 3, random_values(d, 33));
        const auto kpm =
            c.padding ? padding_mask<Space>(batch, seq, {seq, seq / 2}) : Mask<Space>();
        Tensor2<double, M> mask;
        if (c.additive)
          mask = device_from<double, Space>(random_values(seq * seq, 34, -1.0, 1.0), seq, seq);
        const RunContext ctx{true, 3};
        const auto fwd = [&](const std::vector<double>& x) {
          Tensor3<double, M> y("y", batch, seq, d);
          layer.forward(Space(), ctx, device_from<double, Space>(x, batch, seq, d), y, kpm, mask);
          return host_values(y);
        };
        const auto bwd = [&](const std::vector<double>& x, const std::vector<double>& dy) {
          const auto xd = device_from<double, Space>(x, batch, seq, d);
          Tensor3<double, M> y("y", batch, seq, d), dx("dx", batch, seq, d);
          layer.forward(Space(), ctx, xd, y, kpm, mask);
          layer.backward(Space(), {}, xd, device_from<double, Space>(dy, batch, seq, d), dx);
          return host_values(dx);
        };
        check_gradients(gradcheck<Space>(layer, x0, fwd, bwd, 35));
      }
  }
}

TEMPLATE_LIST_TEST_CASE("FeedForward gradients", "[layers][gradcheck]", backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  const int n = 5, d = 4;
  for (const Activation a : {Activation::GELU, Activation::ReLU}) {
    FeedForward<double, Space> layer(Space(), d, {7, a, 0.2, 40});
    const RunContext ctx{true, 2};
    const auto fwd = [&](const std::vector<double>& x) {
      Tensor2<double, M> y("y", n, d);
      layer.forward(Space(), ctx, device_from<double, Space>(x, n, d), y);
      return host_values(y);
    };
    const auto bwd = [&](const std::vector<double>& x, const std::vector<double>& dy) {
      const auto xd = device_from<double, Space>(x, n, d);
      Tensor2<double, M> y("y", n, d), dx("dx", n, d);
      layer.forward(Space(), ctx, xd, y);
      layer.backward(Space(), {}, xd, device_from<double, Space>(dy, n, d), dx);
      return host_values(dx);
    };
    check_gradients(gradcheck<Space>(layer, random_values(n * d, 41), fwd, bwd, 42));
  }
}

TEMPLATE_LIST_TEST_CASE("TransformerEncoderLayer gradients: both norms, post- and pre-norm",
                        "[layers][gradcheck][encoder]", backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  const int batch = 2, seq = 3, d = 4;
  const auto kpm = padding_mask<Space>(batch, seq, {3, 2});
  for (const auto& kind : kNormKinds) {  // every kind in the registry
    const NormType norm = kind.type;
    for (const bool norm_first : {false, true}) {
      CAPTURE(norm_name(norm), norm_first);
      EncoderLayerOptions o;
      o.d_model = d;
      o.heads = 2;
      o.dim_feedforward = 5;
      o.dropout = 0.1;
      o.norm = norm;
      o.norm_first = norm_first;
      o.seed = 50;
      TransformerEncoderLayer<double, Space> layer(Space(), o);
      const RunContext ctx{true, 1};
      const auto fwd = [&](const std::vector<double>& x) {
        Tensor3<double, M> y("y", batch, seq, d);
        layer.forward(Space(), ctx, device_from<double, Space>(x, batch, seq, d), y, kpm);
        return host_values(y);
      };
      const auto bwd = [&](const std::vector<double>& x, const std::vector<double>& dy) {
        const auto xd = device_from<double, Space>(x, batch, seq, d);
        Tensor3<double, M> y("y", batch, seq, d), dx("dx", batch, seq, d);
        layer.forward(Space(), ctx, xd, y, kpm);
        layer.backward(Space(), {}, xd, device_from<double, Space>(dy, batch, seq, d), dx);
        return host_values(dx);
      };
      check_gradients(gradcheck<Space>(layer, random_values(batch * seq * d, 51), fwd, bwd, 52));
    }
  }
}

TEMPLATE_LIST_TEST_CASE("A 2-layer encoder stack with a padding mask: gradients",
                        "[layers][gradcheck][encoder]", backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  const int batch = 3, seq = 4, d = 4;
  const auto kpm = padding_mask<Space>(batch, seq, {4, 2, 3});
  EncoderLayerOptions o;
  o.d_model = d;
  o.heads = 2;
  o.dim_feedforward = 6;
  o.dropout = 0.1;
  o.seed = 60;
  TransformerEncoder<double, Space> encoder(Space(), 2, o);
  const RunContext ctx{true, 9};
  const auto fwd = [&](const std::vector<double>& x) {
    Tensor3<double, M> y("y", batch, seq, d);
    encoder.forward(Space(), ctx, device_from<double, Space>(x, batch, seq, d), y, kpm);
    return host_values(y);
  };
  const auto bwd = [&](const std::vector<double>& x, const std::vector<double>& dy) {
    const auto xd = device_from<double, Space>(x, batch, seq, d);
    Tensor3<double, M> y("y", batch, seq, d), dx("dx", batch, seq, d);
    encoder.forward(Space(), ctx, xd, y, kpm);
    encoder.backward(Space(), {}, xd, device_from<double, Space>(dy, batch, seq, d), dx);
    return host_values(dx);
  };
  check_gradients(gradcheck<Space>(encoder, random_values(batch * seq * d, 61), fwd, bwd, 62));
}
