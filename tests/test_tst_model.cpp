// The TST model: parameter names and shapes, the contiguous parameter buffer, gradients of the
// whole model by finite differences, and the representations.
#include "support/catch.hpp"

#include <Kokkos_Core.hpp>

#include <kformer/backends/spaces.hpp>
#include <kformer/models/tst.hpp>

#include "support/gradcheck.hpp"
#include "support/test_support.hpp"

using namespace kformer;
using namespace kformer::testing;

namespace {

TstConfig small_config(TstTask task, PositionalEncodingKind pe,
                       ProjectionKind projection = ProjectionKind::Linear) {
  TstConfig c;
  c.feat_dim = 3;
  c.max_len = 5;
  c.d_model = 4;
  c.n_heads = 2;
  c.num_layers = 2;
  c.dim_feedforward = 6;
  c.dropout = 0.1;
  c.pos_encoding = pe;
  c.projection = projection;
  c.task = task;
  c.num_outputs = task == TstTask::Classification ? 3 : task == TstTask::Regression ? 2 : 0;
  c.seed = 11;
  return c;
}

template <class Space>
Kokkos::View<std::uint8_t**, Kokkos::LayoutRight, typename Space::memory_space> keep_mask(
    int batch, int seq, const std::vector<int>& lengths) {
  Kokkos::View<std::uint8_t**, Kokkos::LayoutRight, typename Space::memory_space> keep("keep",
                                                                                       batch, seq);
  auto h = Kokkos::create_mirror_view(keep);
  for (int b = 0; b < batch; ++b)
    for (int s = 0; s < seq; ++s)
      h(b, s) = s < lengths[b];
  Kokkos::deep_copy(keep, h);
  return keep;
}

}  // namespace

TEST_CASE("TST parameters carry the reference state_dict names and shapes", "[tst]") {
  using Space = Kokkos::DefaultHostExecutionSpace;
  TstConfig c = small_config(TstTask::Classification, PositionalEncodingKind::Learnable);
  TimeSeriesTransformer<float, Space> model(Space(), c);
  std::map<std::string, std::vector<std::int64_t>> shapes;
  for (const auto& e : model.parameters().entries())
    shapes[e.name] = e.shape;
  const std::int64_t d = 4, F = 3, L = 5, ff = 6;
  CHECK(shapes.at("project_inp.weight") == std::vector<std::int64_t>{d, F});
  CHECK(shapes.at("project_inp.bias") == std::vector<std::int64_t>{d});
  CHECK(shapes.at("pos_enc.pe") == std::vector<std::int64_t>{L, 1, d});
  for (int i = 0; i < 2; ++i) {
    const std::string p = "transformer_encoder.layers." + std::to_string(i) + ".";
    CHECK(shapes.at(p + "self_attn.in_proj_weight") == std::vector<std::int64_t>{3 * d, d});
    CHECK(shapes.at(p + "self_attn.in_proj_bias") == std::vector<std::int64_t>{3 * d});
    CHECK(shapes.at(p + "self_attn.out_proj.weight") == std::vector<std::int64_t>{d, d});
    CHECK(shapes.at(p + "linear1.weight") == std::vector<std::int64_t>{ff, d});
    CHECK(shapes.at(p + "linear2.weight") == std::vector<std::int64_t>{d, ff});
    CHECK(shapes.at(p + "norm1.weight") == std::vector<std::int64_t>{d});
    CHECK(shapes.at(p + "norm2.bias") == std::vector<std::int64_t>{d});
  }
  CHECK(shapes.at("output_layer.weight") == std::vector<std::int64_t>{3, d * L});
  CHECK(shapes.size() == 5 + 2 * 12);
  // One contiguous buffer, the output layer last.
  const auto& entries = model.parameters().entries();
  std::int64_t expected_offset = 0;
  for (const auto& e : entries) {
    CHECK(e.offset == expected_offset);
    expected_offset += e.numel;
  }
  CHECK(expected_offset == model.parameters().size());
  CHECK(entries[entries.size() - 2].name == "output_layer.weight");
  CHECK(model.output_layer_offset() == entries[entries.size() - 2].offset);
  std::vector<std::string> buffers;
  model.visit_buffers([&](const std::string& n, auto&) { buffers.push_back(n); });
  CHECK(buffers.size() == 8);
  CHECK(buffers[0] == "transformer_encoder.layers.0.norm1.running_mean");
}

TEST_CASE("TST configs round-trip through JSON and bad ones are rejected", "[tst]") {
  TstConfig c =
      small_config(TstTask::Regression, PositionalEncodingKind::None, ProjectionKind::Conv1d);
  c.conv.kernel_size = 5;
  const TstConfig back = tst_config_from_json(to_json(c));
  CHECK(to_json(back) == to_json(c));
  CHECK_THROWS_WITH(tst_config_from_json("{\"d_model\": 10, \"n_heads\": 4}"),
                    ContainsText("n_heads (4) must divide d_model (10)"));
  CHECK_THROWS_WITH(tst_config_from_json("{\"colour\": 1}", "model.json"),
                    ContainsText("model.json: unknown key 'colour'"));
  CHECK_THROWS_WITH(tst_config_from_json("{\"d_model\": \"big\"}"),
                    ContainsText("key 'd_model' must be an integer"));
  // nlohmann's get<int>() and get<double>() read booleans as 0 and 1.
  CHECK_THROWS_WITH(
      tst_config_from_json("{\"conv_kernel_size\": false}"),
      ContainsText("key 'conv_kernel_size' must be an integer in [") && ContainsText("got false"));
  CHECK_THROWS_WITH(tst_config_from_json("{\"dropout\": true}"),
                    ContainsText("key 'dropout' must be a number, got true"));
  CHECK_THROWS_WITH(tst_config_from_json("{\"norm_first\": 1}"),
                    ContainsText("key 'norm_first' has the wrong type"));
  CHECK_THROWS_WITH(tst_config_from_json("{\"task\": \"classification\", \"num_outputs\": 1}"),
                    ContainsText("at least 2 classes"));
  CHECK_THROWS_WITH(tst_config_from_json("[1, 2"), ContainsText("not valid JSON"));
}

TEMPLATE_LIST_TEST_CASE("TST gradients match finite differences for every head and encoding",
                        "[tst][gradcheck]", backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  const int batch = 2, seq = 5, F = 3;
  const auto keep = keep_mask<Space>(batch, seq, {5, 3});
  struct Case {
    TstTask task;
    PositionalEncodingKind pe;
    ProjectionKind projection;
  };
  for (const Case c :
       {Case{TstTask::Imputation, PositionalEncodingKind::Fixed, ProjectionKind::Linear},
        Case{TstTask::Imputation, PositionalEncodingKind::Learnable, ProjectionKind::Conv1d},
        Case{TstTask::Classification, PositionalEncodingKind::Learnable, ProjectionKind::Linear},
        Case{TstTask::Regression, PositionalEncodingKind::None, ProjectionKind::Linear}}) {
    CAPTURE(to_string(c.task), to_string(c.pe), to_string(c.projection));
    TimeSeriesTransformer<double, Space> model(Space(), small_config(c.task, c.pe, c.projection));
    const auto shape = model.output_shape(batch, seq);
    const RunContext ctx{true, 4};
    const auto forward = [&](const std::vector<double>& x) {
      Tensor2<double, M> out("out", shape[0], shape[1]);
      model.forward(Space(), ctx, device_from<double, Space>(x, batch, seq, F), keep, out);
      return host_values(out);
    };
    // The model's backward gives parameter gradients only: the input gradient is not checked.
    const auto backward = [&](const std::vector<double>& x, const std::vector<double>& dy) {
      const auto xd = device_from<double, Space>(x, batch, seq, F);
      Tensor2<double, M> out("out", shape[0], shape[1]);
      model.forward(Space(), ctx, xd, keep, out);
      model.backward(Space(), {}, xd, keep, device_from<double, Space>(dy, shape[0], shape[1]));
      return std::vector<double>();
    };
    check_gradients(
        gradcheck<Space>(model, random_values(batch * seq * F, 12), forward, backward, 13));
  }
}

TEMPLATE_LIST_TEST_CASE("TST with a frozen encoder computes only the output layer's gradients",
                        "[tst]", backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  const int batch = 2, seq = 5;
  TimeSeriesTransformer<float, Space> model(
      Space(), small_config(TstTask::Classification, PositionalEncodingKind::Fixed));
  const auto keep = keep_mask<Space>(batch, seq, {5, 4});
  const auto x = device_from<float, Space>(random_values(batch * seq * 3, 1), batch, seq, 3);
  Tensor2<float, M> out("out", batch, 3);
  model.zero_grad(Space());
  model.forward(Space(), RunContext{true, 0}, x, keep, out);
  model.backward(Space(), {}, x, keep,
                 device_from<float, Space>(random_values(batch * 3, 2), batch, 3), true);
  const auto grads = host_values(model.parameters().grads());
  const std::int64_t tail = model.output_layer_offset();
  for (std::int64_t i = 0; i < tail; ++i)
    REQUIRE(grads[i] == 0.0);
  double tail_norm = 0;
  for (std::size_t i = tail; i < grads.size(); ++i)
    tail_norm += grads[i] * grads[i];
  CHECK(tail_norm > 0);
}

TEMPLATE_LIST_TEST_CASE("TST representations: per-step vectors and their mean over kept steps",
                        "[tst]", backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  const int batch = 2, seq = 5, d = 4;
  TimeSeriesTransformer<double, Space> model(
      Space(), small_config(TstTask::Imputation, PositionalEncodingKind::Fixed));
  const auto keep = keep_mask<Space>(batch, seq, {5, 2});
  const auto x = device_from<double, Space>(random_values(batch * seq * 3, 5), batch, seq, 3);
  Tensor2<double, M> out("out", batch * seq, 3), pooled("pooled", batch, d);
  Tensor3<double, M> steps("steps", batch, seq, d);
  model.forward(Space(), RunContext{false, 0}, x, keep, out);
  model.representations(Space(), keep, steps, pooled);
  const auto z = host_values(steps), p = host_values(pooled);
  const int lengths[2] = {5, 2};
  for (int b = 0; b < batch; ++b)
    for (int j = 0; j < d; ++j) {
      double sum = 0;
      for (int s = 0; s < lengths[b]; ++s)
        sum += z[(b * seq + s) * d + j];
      CHECK(p[b * d + j] == Approx(sum / lengths[b]).epsilon(1e-12));
    }
  // In eval mode the imputation output is the output layer applied to the representations.
  const auto outputs = host_values(out);
  bool any_nonzero = false;
  for (double v : outputs)
    any_nonzero |= v != 0.0;
  CHECK(any_nonzero);
}

TEMPLATE_LIST_TEST_CASE("TST rejects inputs that do not fit its configuration", "[tst][errors]",
                        backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  TimeSeriesTransformer<float, Space> classifier(
      Space(), small_config(TstTask::Classification, PositionalEncodingKind::Learnable));
  const auto keep = keep_mask<Space>(2, 4, {4, 4});
  Tensor3<float, M> short_x("x", 2, 4, 3), wrong_features("x", 2, 5, 2);
  Tensor2<float, M> out("out", 2, 3);
  CHECK_THROWS_WITH(classifier.forward(Space(), RunContext{}, short_x, keep, out),
                    ContainsText("x must have max_len = 5 steps, got x of shape (2, 4, 3)"));
  CHECK_THROWS_WITH(classifier.forward(Space(), RunContext{}, wrong_features,
                                       keep_mask<Space>(2, 5, {5, 5}), out),
                    ContainsText("x has shape (2, 5, 2), expected (*, *, 3)"));
  TimeSeriesTransformer<float, Space> imputer(
      Space(), small_config(TstTask::Imputation, PositionalEncodingKind::Learnable));
  Tensor3<float, M> long_x("x", 1, 7, 3);
  Tensor2<float, M> long_out("out", 7, 3);
  CHECK_THROWS_WITH(
      imputer.forward(Space(), RunContext{}, long_x, keep_mask<Space>(1, 7, {7}), long_out),
      ContainsText("sequence length 7 exceeds the learnable encoding's max_len 5"));
}
