// The value encoding: values against the host reference in both frequency modes, agreement with
// the positional encoding when the values are positions, gradients, NaN rejection, backends.
#include "support/catch.hpp"

#include <cmath>

#include <Kokkos_Core.hpp>

#include <kformer/backends/spaces.hpp>
#include <kformer/layers/encodings/positional_encoding.hpp>
#include <kformer/layers/encodings/value_encoding.hpp>

#include "support/allocation_counter.hpp"
#include "support/reference_encodings.hpp"
#include "support/test_support.hpp"

using namespace kformer;
using namespace kformer::testing;

namespace {

std::vector<double> reference_encoding(const ReferenceSinusoid& ref,
                                       const std::vector<double>& values) {
  std::vector<double> out;
  for (double v : values)
    for (int j = 0; j < ref.dim; ++j)
      out.push_back(ref(v, j));
  return out;
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("ValueEncoding matches the reference in both frequency modes",
                        "[encoding][value]", backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  const int batch = 3, seq = 50;
  // Intensities in [0, 1] and m/z values in [50, 1000], as in spectra.
  const auto intensities = random_values(batch * seq, 1, 0.0, 1.0);
  const auto mz = random_values(batch * seq, 2, 50.0, 1000.0);
  // Largest angles (|v| w_0, w_0 = 1) on both sides of the float encoding's limits: the product
  // path up to math::kSinCosProductLimit, then math::sin_cos of the angle up to kSinCosLimit,
  // then the library's sin and cos.
  auto limits = random_values(batch * seq, 3, -1.5 * math::kSinCosProductLimit,
                              1.5 * math::kSinCosProductLimit);
  for (int i = 0; i < batch * seq; i += 3)
    limits[i] = (i % 2 ? -1.0 : 1.0) * math::kSinCosLimit * (0.9 + 0.2 * i / (batch * seq));
  struct Case {
    int dim;
    SinusoidOptions opt;
    const std::vector<double>* values;
  };
  SinusoidOptions split;
  split.layout = SinusoidLayout::SplitHalves;
  SinusoidOptions wavelengths;
  wavelengths.min_wavelength = 0.001;
  wavelengths.max_wavelength = 10000;
  SinusoidOptions split_wavelengths = wavelengths;
  split_wavelengths.layout = SinusoidLayout::SplitHalves;
  const Case cases[] = {
      {16, {}, &intensities},       {33, {}, &mz},    {16, split, &mz}, {64, wavelengths, &mz},
      {31, split_wavelengths, &mz}, {18, {}, &limits}};
  for (const auto& c : cases) {
    CAPTURE(c.dim, int(c.opt.layout), c.opt.min_wavelength);
    ReferenceSinusoid ref{c.dim, c.opt.layout == SinusoidLayout::Interleaved, c.opt.base,
                          c.opt.min_wavelength, c.opt.max_wavelength};
    const auto expected = reference_encoding(ref, *c.values);
    const ValueEncoding<double, Space> enc64(Space(), c.dim, c.opt);
    const ValueEncoding<float, Space> enc32(Space(), c.dim, c.opt);
    Tensor3<double, M> y64("y64", batch, seq, c.dim);
    Tensor3<float, M> y32("y32", batch, seq, c.dim);
    enc64.encode(Space(), device_from<double, Space>(*c.values, batch, seq), y64);
    enc32.encode(Space(), device_from<float, Space>(*c.values, batch, seq), y32);
    // Reference angles use the same (float-rounded, for y32) values.
    std::vector<double> rounded(c.values->begin(), c.values->end());
    for (auto& v : rounded)
      v = static_cast<float>(v);
    // sin(v w) is conditioned by the angle: a 1-ulp difference in w moves it by ~|v w| 1e-16, so
    // the double tolerance grows with the largest angle (m/z 1000 at wavelength 0.001: 6e6 rad).
    double max_angle = 0;
    for (double v : *c.values)
      max_angle = std::max(max_angle, std::abs(v) * ref.frequency(0));
    CHECK(max_abs_diff(host_values(y64), expected) <= 1e-12 + 1e-15 * max_angle);
    CHECK(max_abs_diff(host_values(y32), reference_encoding(ref, rounded)) <= 2e-7);
  }
}

TEMPLATE_LIST_TEST_CASE("ValueEncoding of positions is the positional encoding",
                        "[encoding][value]", backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  const int seq = 300, dim = 20;
  std::vector<double> positions(seq);
  for (int p = 0; p < seq; ++p)
    positions[p] = p;
  const ValueEncoding<double, Space> enc(Space(), dim);
  Tensor3<double, M> y("y", 1, seq, dim);
  enc.encode(Space(), device_from<double, Space>(positions, 1, seq), y);
  CHECK(max_abs_diff(host_values(y), host_values(positional_encoding<double>(Space(), dim, seq))) <=
        1e-12);
}

TEMPLATE_LIST_TEST_CASE(
    "ValueEncoding forward adds to the tokens and its gradients match finite differences",
    "[encoding][value][gradcheck]", backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  const int batch = 2, seq = 3, dim = 7;
  const ValueEncoding<double, Space> enc(Space(), dim);
  const auto values0 = random_values(batch * seq, 5, 0.0, 3.0);
  const auto x_values = random_values(batch * seq * dim, 6);
  const auto weights = random_values(batch * seq * dim, 7);

  const auto x = device_from<double, Space>(x_values, batch, seq, dim);
  Tensor3<double, M> y("y", batch, seq, dim), e("e", batch, seq, dim);
  const auto values = device_from<double, Space>(values0, batch, seq);
  enc.forward(Space(), {}, values, x, y);
  enc.encode(Space(), values, e);
  const auto yh = host_values(y), eh = host_values(e);
  for (std::size_t i = 0; i < yh.size(); ++i)
    REQUIRE(yh[i] == x_values[i] + eh[i]);

  const auto loss = [&](const std::vector<double>& v) {
    Tensor3<double, M> out("out", batch, seq, dim);
    enc.forward(Space(), {}, device_from<double, Space>(v, batch, seq), x, out);
    return dot(host_values(out), weights);
  };
  const auto dv_numeric = numeric_gradient(loss, values0);
  Tensor2<double, M> dv("dv", batch, seq);
  enc.backward_values(Space(), values, device_from<double, Space>(weights, batch, seq, dim), dv);
  CHECK(max_rel_diff(host_values(dv), dv_numeric) <= 1e-6);

  Tensor3<double, M> dx("dx", batch, seq, dim);
  enc.backward(Space(), {}, dx, device_from<double, Space>(weights, batch, seq, dim), dx);
  CHECK(bitwise_equal(host_values(dx), weights));
}

TEMPLATE_LIST_TEST_CASE(
    "ValueEncoding rejects non-finite values (when asked) and bad shapes untouched",
    "[encoding][value][errors]", backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  ValueEncoding<float, Space> enc(Space(), 8);
  auto values = random_values(2 * 5, 3);
  values[7] = std::numeric_limits<double>::quiet_NaN();
  Tensor3<float, M> y("y", 2, 5, 8);
  // Unchecked by default (no reduction read back on the host): the NaN reaches its token only.
  enc.encode(Space(), device_from<float, Space>(values, 2, 5), y);
  const auto unchecked = host_values(y);
  for (std::size_t i = 0; i < unchecked.size(); ++i)
    REQUIRE(std::isnan(unchecked[i]) == (i / 8 == 7));

  enc.set_finite_checks(true);
  Kokkos::deep_copy(y, 3.0f);
  CHECK_THROWS_WITH(enc.encode(Space(), device_from<float, Space>(values, 2, 5), y),
                    ContainsText("kformer::ValueEncoding::encode") &&
                        ContainsText("values[1, 2] = nan is not finite"));
  values[7] = std::numeric_limits<double>::infinity();
  CHECK_THROWS_WITH(enc.forward(Space(), {}, device_from<float, Space>(values, 2, 5), y, y),
                    ContainsText("values[1, 2] = inf"));
  for (double v : host_values(y))
    REQUIRE(v == 3.0);
  Tensor2<float, M> good("good", 2, 4);
  CHECK_THROWS_WITH(enc.encode(Space(), good, y),
                    ContainsText("y has shape (2, 5, 8), expected (2, 4, 8)"));
  SinusoidOptions bad;
  bad.min_wavelength = 10;
  bad.max_wavelength = 1;
  CHECK_THROWS_WITH((ValueEncoding<float, Space>(Space(), 8, bad)), ContainsText("wavelength"));
}

TEST_CASE("ValueEncoding gives the same bits on every backend", "[encoding][value][backends]") {
  const int batch = 4, seq = 64, dim = 48;
  const auto values = random_values(batch * seq, 8, 50.0, 1000.0);
  std::vector<std::vector<double>> results;
  backends::for_each_space([&](auto space) {
    using Space = decltype(space);
    const ValueEncoding<float, Space> enc(space, dim);
    Tensor3<float, MemorySpaceOf<Space>> y("y", batch, seq, dim);
    enc.encode(space, device_from<float, Space>(values, batch, seq), y);
    results.push_back(host_values(y));
    check_matches_first_backend<Space>(results.back(), results.front());
  });
}

TEMPLATE_LIST_TEST_CASE("ValueEncoding allocates nothing in steady state",
                        "[encoding][value][allocations]", backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  const ValueEncoding<float, Space> enc(Space(), 32);
  Tensor2<float, M> values("values", 4, 100);
  Tensor3<float, M> x("x", 4, 100, 32), y("y", 4, 100, 32);
  Tensor2<float, M> dv("dv", 4, 100);
  enc.forward(Space(), {}, values, x, y);
  Space().fence();
  const AllocationCounter counter;
  for (int i = 0; i < 3; ++i) {
    enc.forward(Space(), {}, values, x, y);
    enc.encode(Space(), values, y);
    enc.backward_values(Space(), values, y, dv);
  }
  Space().fence();
  CHECK(counter.allocations() == 0);
}
