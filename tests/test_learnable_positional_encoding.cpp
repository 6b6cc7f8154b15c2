// The learnable positional encoding: initialisation, forward values, gradients by finite
// differences, length policies, errors, determinism across backends, and allocations.
#include "support/catch.hpp"

#include <Kokkos_Core.hpp>

#include <kformer/backends/spaces.hpp>
#include <kformer/layers/encodings/learnable_positional_encoding.hpp>

#include "support/allocation_counter.hpp"
#include "support/test_support.hpp"

using namespace kformer;
using namespace kformer::testing;

namespace {

// Host reference: the table row (or linear interpolation between rows) position p reads.
double table_at(const std::vector<double>& pe, int max_len, int dim, int seq, int p, int j,
                bool interpolate) {
  if (!interpolate) return pe[p * dim + j];
  const double pos = seq > 1 ? double(p) * (max_len - 1) / (seq - 1) : 0.0;
  const int r0 = std::min(int(std::floor(pos)), max_len - 1);
  const int r1 = std::min(r0 + 1, max_len - 1);
  const double t = pos - r0;
  return (1 - t) * pe[r0 * dim + j] + t * pe[r1 * dim + j];
}

template <class Layer>
void set_table(Layer& layer, const std::vector<double>& values) {
  auto h = Kokkos::create_mirror_view(layer.pe().value);
  for (std::size_t i = 0; i < values.size(); ++i)
    h(i) = values[i];
  Kokkos::deep_copy(layer.pe().value, h);
}

}  // namespace

TEMPLATE_LIST_TEST_CASE(
    "LearnablePositionalEncoding initialises uniform(-0.02, 0.02) from its seed",
    "[encoding][learnable]", backends::EnabledSpaces) {
  using Space = TestType;
  LearnablePositionalEncodingOptions opt;
  opt.seed = 1234;
  const LearnablePositionalEncoding<float, Space> a(Space(), 1024, 64, opt),
      b(Space(), 1024, 64, opt);
  opt.seed = 1235;
  const LearnablePositionalEncoding<float, Space> c(Space(), 1024, 64, opt);
  const auto va = host_values(a.pe().value);
  CHECK(bitwise_equal(va, host_values(b.pe().value)));
  CHECK(!bitwise_equal(va, host_values(c.pe().value)));
  double lo = 1, hi = -1, mean = 0, var = 0;
  for (double v : va)
    lo = std::min(lo, v), hi = std::max(hi, v), mean += v;
  mean /= va.size();
  for (double v : va)
    var += (v - mean) * (v - mean);
  var /= va.size();
  CHECK(lo >= -0.02);
  CHECK(hi < 0.02);
  CHECK(lo < -0.0199);
  CHECK(hi > 0.0199);
  CHECK(std::abs(mean) < 2e-4);                          // 65536 draws: sd of mean ~4.5e-5
  CHECK(var == Approx(0.04 * 0.04 / 12).epsilon(0.02));  // uniform variance (b-a)^2/12
  CHECK(a.pe().shape == std::vector<std::int64_t>{1024, 64});
  for (double g : host_values(a.pe().grad))
    REQUIRE(g == 0.0);
}

TEST_CASE("LearnablePositionalEncoding initialises the same bits on every backend",
          "[encoding][learnable][backends]") {
  std::vector<std::vector<double>> tables;
  backends::for_each_space([&](auto space) {
    LearnablePositionalEncodingOptions opt;
    opt.seed = 99;
    const LearnablePositionalEncoding<double, decltype(space)> layer(space, 300, 17, opt);
    tables.push_back(host_values(layer.pe().value));
    check_matches_first_backend<decltype(space)>(tables.back(), tables.front(), 1e-15);
  });
}

TEMPLATE_LIST_TEST_CASE("LearnablePositionalEncoding forward adds pe[:seq]",
                        "[encoding][learnable]", backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  const int max_len = 50, dim = 6, batch = 3;
  LearnablePositionalEncoding<double, Space> layer(Space(), max_len, dim);
  const auto table = host_values(layer.pe().value);
  for (int seq : {1, 17, 50}) {
    const auto x_values = random_values(batch * seq * dim, seq);
    const auto x = device_from<double, Space>(x_values, batch, seq, dim);
    Tensor3<double, M> y("y", batch, seq, dim);
    layer.forward(Space(), {}, x, y);
    std::vector<double> expected(x_values.size());
    for (int b = 0; b < batch; ++b)
      for (int p = 0; p < seq; ++p)
        for (int j = 0; j < dim; ++j)
          expected[(b * seq + p) * dim + j] =
              x_values[(b * seq + p) * dim + j] + table[p * dim + j];
    CHECK(max_abs_diff(host_values(y), expected) == 0.0);
    layer.forward(Space(), {}, x, x);  // in place
    CHECK(max_abs_diff(host_values(x), expected) == 0.0);
  }
}

TEMPLATE_LIST_TEST_CASE("LearnablePositionalEncoding gradients match finite differences",
                        "[encoding][learnable][gradcheck]", backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  const int max_len = 6, dim = 3, batch = 2;
  for (const auto policy :
       {LengthPolicy::Error, LengthPolicy::Truncate, LengthPolicy::Interpolate}) {
    for (int seq : {4, 6, 11}) {
      if (policy == LengthPolicy::Error && seq > max_len) continue;
      const double scale = seq == 6 ? 3.0 : 1.0;  // the input scale TST applies (sqrt(d_model))
      CAPTURE(int(policy), seq, scale);
      LearnablePositionalEncodingOptions opt;
      opt.length_policy = policy;
      opt.seed = 3;
      opt.input_scale = scale;
      LearnablePositionalEncoding<double, Space> layer(Space(), max_len, dim, opt);
      const int out = layer.output_length(seq);
      const auto x0 = random_values(batch * seq * dim, 31);
      const auto table0 = host_values(layer.pe().value);
      const auto weights = random_values(batch * out * dim, 32);  // loss = sum(weights * y)

      const auto loss = [&](const std::vector<double>& x, const std::vector<double>& table) {
        set_table(layer, table);
        Tensor3<double, M> y("y", batch, out, dim);
        layer.forward(Space(), {}, device_from<double, Space>(x, batch, seq, dim), y);
        return dot(host_values(y), weights);
      };
      const auto dx_numeric = numeric_gradient([&](const auto& x) { return loss(x, table0); }, x0);
      const auto dpe_numeric = numeric_gradient([&](const auto& t) { return loss(x0, t); }, table0);
      set_table(layer, table0);

      layer.zero_grad(Space());
      Tensor3<double, M> dx("dx", batch, seq, dim);
      Kokkos::deep_copy(dx, 7.0);  // every element must be written (the truncated steps too)
      layer.backward(Space(), {}, dx, device_from<double, Space>(weights, batch, out, dim), dx);
      CHECK(max_rel_diff(host_values(dx), dx_numeric) <= 1e-6);
      CHECK(max_rel_diff(host_values(layer.pe().grad), dpe_numeric) <= 1e-6);

      // Gradients accumulate across calls until zero_grad.
      layer.backward(Space(), {}, dx, device_from<double, Space>(weights, batch, out, dim), dx);
      auto twice = dpe_numeric;
      for (auto& g : twice)
        g *= 2;
      CHECK(max_rel_diff(host_values(layer.pe().grad), twice) <= 1e-6);
      layer.zero_grad(Space());
      for (double g : host_values(layer.pe().grad))
        REQUIRE(g == 0.0);
    }
  }
}

TEMPLATE_LIST_TEST_CASE("LearnablePositionalEncoding length policies", "[encoding][learnable]",
                        backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  const int max_len = 8, dim = 4, batch = 2, seq = 13;
  const auto x_values = random_values(batch * seq * dim, 8);
  const auto x = device_from<double, Space>(x_values, batch, seq, dim);

  SECTION("error (default) names both lengths and leaves y untouched") {
    const LearnablePositionalEncoding<double, Space> layer(Space(), max_len, dim);
    Tensor3<double, M> y("y", batch, seq, dim);
    Kokkos::deep_copy(y, 7.0);
    CHECK_THROWS_WITH(layer.forward(Space(), {}, x, y),
                      ContainsText("kformer::LearnablePositionalEncoding::forward") &&
                          ContainsText("sequence length 13 exceeds max_len 8"));
    for (double v : host_values(y))
      REQUIRE(v == 7.0);
  }
  SECTION("truncate keeps the first max_len steps") {
    LearnablePositionalEncodingOptions opt;
    opt.length_policy = LengthPolicy::Truncate;
    const LearnablePositionalEncoding<double, Space> layer(Space(), max_len, dim, opt);
    REQUIRE(layer.output_length(seq) == max_len);
    REQUIRE(layer.output_length(5) == 5);
    Tensor3<double, M> y("y", batch, max_len, dim);
    layer.forward(Space(), {}, x, y);
    const auto table = host_values(layer.pe().value);
    std::vector<double> expected;
    for (int b = 0; b < batch; ++b)
      for (int p = 0; p < max_len; ++p)
        for (int j = 0; j < dim; ++j)
          expected.push_back(x_values[(b * seq + p) * dim + j] + table[p * dim + j]);
    CHECK(max_abs_diff(host_values(y), expected) == 0.0);
    Tensor3<double, M> y_full("y_full", batch, seq, dim);
    CHECK_THROWS_WITH(layer.forward(Space(), {}, x, y_full),
                      ContainsText("y has shape (2, 13, 4), expected (2, 8, 4)"));
  }
  SECTION("interpolate resamples the table linearly") {
    LearnablePositionalEncodingOptions opt;
    opt.length_policy = LengthPolicy::Interpolate;
    const LearnablePositionalEncoding<double, Space> layer(Space(), max_len, dim, opt);
    Tensor3<double, M> y("y", batch, seq, dim);
    layer.forward(Space(), {}, x, y);
    const auto table = host_values(layer.pe().value);
    std::vector<double> expected;
    for (int b = 0; b < batch; ++b)
      for (int p = 0; p < seq; ++p)
        for (int j = 0; j < dim; ++j)
          expected.push_back(x_values[(b * seq + p) * dim + j] +
                             table_at(table, max_len, dim, seq, p, j, true));
    CHECK(max_abs_diff(host_values(y), expected) <= 1e-15);
    // The ends of the sequence read the ends of the table exactly.
    const auto yh = host_values(y);
    for (int j = 0; j < dim; ++j) {
      CHECK(yh[j] - x_values[j] == Approx(table[j]).margin(1e-15));
      CHECK(yh[(seq - 1) * dim + j] - x_values[(seq - 1) * dim + j] ==
            Approx(table[(max_len - 1) * dim + j]).margin(1e-15));
    }
  }
}

TEMPLATE_LIST_TEST_CASE("LearnablePositionalEncoding rejects bad arguments",
                        "[encoding][learnable][errors]", backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  CHECK_THROWS_WITH((LearnablePositionalEncoding<float, Space>(Space(), 0, 4)),
                    ContainsText("max_len must be at least 1, got 0"));
  CHECK_THROWS_WITH((LearnablePositionalEncoding<float, Space>(Space(), 4, 0)),
                    ContainsText("dim must be at least 1, got 0"));
  LearnablePositionalEncoding<float, Space> layer(Space(), 16, 4);
  Tensor3<float, M> x("x", 2, 5, 3), y("y", 2, 5, 4), dx("dx", 2, 5, 4), dy_bad("dy", 2, 6, 4);
  CHECK_THROWS_WITH(layer.forward(Space(), {}, x, y),
                    ContainsText("x has shape (2, 5, 3), expected (*, *, 4)"));
  Kokkos::deep_copy(layer.pe().grad, 1.0f);
  CHECK_THROWS_WITH(layer.backward(Space(), {}, dx, dy_bad, dx),
                    ContainsText("kformer::LearnablePositionalEncoding::backward") &&
                        ContainsText("dy has shape (2, 6, 4), expected (2, 5, 4)"));
  for (double g : host_values(layer.pe().grad))
    REQUIRE(g == 1.0);  // nothing accumulated
}

TEST_CASE("LearnablePositionalEncoding gives the same bits on every backend",
          "[encoding][learnable][backends]") {
  const int batch = 7, seq = 90, dim = 33, max_len = 128;
  const auto x_values = random_values(batch * seq * dim, 41);
  const auto dy_values = random_values(batch * seq * dim, 42);
  std::vector<std::vector<double>> ys, grads;
  backends::for_each_space([&](auto space) {
    using Space = decltype(space);
    LearnablePositionalEncoding<float, Space> layer(space, max_len, dim);
    auto x = device_from<float, Space>(x_values, batch, seq, dim);
    auto dy = device_from<float, Space>(dy_values, batch, seq, dim);
    layer.forward(space, {}, x, x);
    layer.backward(space, {}, x, dy, dy);
    ys.push_back(host_values(x));
    grads.push_back(host_values(layer.pe().grad));
    check_matches_first_backend<Space>(ys.back(), ys.front());
    check_matches_first_backend<Space>(grads.back(), grads.front());
  });
}

TEMPLATE_LIST_TEST_CASE("LearnablePositionalEncoding allocates nothing in steady state",
                        "[encoding][learnable][allocations]", backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  LearnablePositionalEncoding<float, Space> layer(Space(), 512, 32);
  Tensor3<float, M> x("x", 4, 200, 32), y("y", 4, 200, 32), dx("dx", 4, 200, 32);
  layer.forward(Space(), {}, x, y);
  layer.backward(Space(), {}, x, y, dx);
  Space().fence();
  const AllocationCounter counter;
  for (int i = 0; i < 3; ++i) {
    layer.forward(Space(), {}, x, y);
    layer.backward(Space(), {}, x, y, dx);
    layer.zero_grad(Space());
  }
  Space().fence();
  CHECK(counter.allocations() == 0);
}
