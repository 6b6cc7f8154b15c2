// The fixed sinusoidal encoding: values against the host reference, the layer's algebra
// (identity Jacobian, batch invariance), why it exists (breaking permutation equivariance), and
// agreement between backends.
#include "support/catch.hpp"

#include <Kokkos_Core.hpp>

#include <kformer/backends/gemm.hpp>
#include <kformer/backends/spaces.hpp>
#include <kformer/layers/encodings/positional_encoding.hpp>

#include "support/allocation_counter.hpp"
#include "support/reference_encodings.hpp"
#include "support/test_support.hpp"

using namespace kformer;
using namespace kformer::testing;

namespace {

template <class T, class Space>
std::vector<double> encoding_matrix(int dim, int seq, PositionalEncodingOptions opt = {}) {
  return host_values(positional_encoding<T>(Space(), dim, seq, opt));
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("positional_encoding matches the double-precision reference",
                        "[encoding][fixed]", backends::EnabledSpaces) {
  using Space = TestType;
  struct Case {
    int dim, seq;
    SinusoidLayout layout;
  };
  const Case cases[] = {
      {4, 16, SinusoidLayout::Interleaved},
      {7, 33, SinusoidLayout::Interleaved},
      {64, 4096, SinusoidLayout::Interleaved},
      {1024, 4096, SinusoidLayout::Interleaved},
      {513, 700, SinusoidLayout::Interleaved},
      {6, 40, SinusoidLayout::SplitHalves},
      {9, 40, SinusoidLayout::SplitHalves},
      {256, 1000, SinusoidLayout::SplitHalves},
      // Whole groups of rotated frequencies on CPUs, then a partial one (and a last sine).
      {81, 1100, SinusoidLayout::Interleaved},
      {100, 1100, SinusoidLayout::SplitHalves}};
  for (const auto& c : cases) {
    CAPTURE(c.dim, c.seq, int(c.layout));
    PositionalEncodingOptions opt;
    opt.layout = c.layout;
    const ReferenceSinusoid ref{c.dim, c.layout == SinusoidLayout::Interleaved};
    const auto expected = ref.matrix(c.seq);
    CHECK(max_abs_diff(encoding_matrix<float, Space>(c.dim, c.seq, opt), expected) <= 2e-6);
    CHECK(max_abs_diff(encoding_matrix<double, Space>(c.dim, c.seq, opt), expected) <= 1e-12);
  }
}

TEMPLATE_LIST_TEST_CASE("positional_encoding: base and first position options", "[encoding][fixed]",
                        backends::EnabledSpaces) {
  using Space = TestType;
  PositionalEncodingOptions opt;
  opt.base = 500.0;
  opt.first_position = 1000;
  ReferenceSinusoid ref{10};
  ref.base = 500.0;
  CHECK(max_abs_diff(encoding_matrix<double, Space>(10, 77, opt), ref.matrix(77, 1000)) <= 1e-12);
  // A continuation is the tail of the longer matrix.
  PositionalEncodingOptions tail;
  tail.first_position = 50;
  const auto whole = encoding_matrix<double, Space>(8, 80);
  const auto rest = encoding_matrix<double, Space>(8, 30, tail);
  CHECK(max_abs_diff(rest, std::vector<double>(whole.begin() + 50 * 8, whole.end())) <= 1e-13);
}

TEMPLATE_LIST_TEST_CASE("positional_encoding writes into the caller's matrix without allocating",
                        "[encoding][fixed][allocations]", backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  const int seq = 1500, dim = 18;  // two anchor blocks on CPUs
  Tensor2<double, M> pe("pe", seq, dim);
  Tensor2<float, M> pe_float("pe_float", seq, dim);
  PositionalEncodingOptions opt;
  opt.layout = SinusoidLayout::SplitHalves;
  opt.first_position = 321;
  positional_encoding(Space(), pe, opt);  // warm-up: first use of team scratch may size its pool
  Space().fence();
  const AllocationCounter counter;
  positional_encoding(Space(), pe, opt);
  positional_encoding(Space(), pe_float, opt);
  Space().fence();
  CHECK(counter.allocations() == 0);
  const ReferenceSinusoid ref{dim, false};
  CHECK(max_abs_diff(host_values(pe), ref.matrix(seq, 321)) <= 1e-12);
  CHECK(max_abs_diff(host_values(pe_float), ref.matrix(seq, 321)) <= 2e-6);
  CHECK_THROWS_WITH(positional_encoding(Space(), Tensor2<float, M>("empty", 4, 0)),
                    ContainsText("kformer::positional_encoding") && ContainsText("dim"));
}

TEMPLATE_LIST_TEST_CASE("positional_encoding: the documented dim-4 example", "[encoding][fixed]",
                        backends::EnabledSpaces) {
  // Position 0 of a dim-4 encoding is (sin 0, cos 0, sin 0, cos 0) = (0, 1, 0, 1): the first row
  // here, the first column of GeometricMachineLearning's (dim, seq) matrix (the same memory).
  const auto m = encoding_matrix<float, TestType>(4, 3);
  CHECK(m[0] == 0.0);
  CHECK(m[1] == 1.0);
  CHECK(m[2] == 0.0);
  CHECK(m[3] == 1.0);
  // Position 1: (sin 1, cos 1, sin 0.01, cos 0.01).
  CHECK(m[4] == Approx(std::sin(1.0)).epsilon(1e-7));
  CHECK(m[5] == Approx(std::cos(1.0)).epsilon(1e-7));
  CHECK(m[6] == Approx(std::sin(0.01)).epsilon(1e-7));
  CHECK(m[7] == Approx(std::cos(0.01)).epsilon(1e-7));
}

TEMPLATE_LIST_TEST_CASE("positional_encoding stays in [-1, 1] and finite up to 1e6 positions",
                        "[encoding][fixed]", backends::EnabledSpaces) {
  using Space = TestType;
  const int dim = 16, seq = 1000000;
  const auto pe = positional_encoding<float>(Space(), dim, seq);
  REQUIRE(pe.extent(0) == std::size_t(seq));
  REQUIRE(pe.extent(1) == std::size_t(dim));
  float max_abs = 0;
  int non_finite = 0;
  Kokkos::parallel_reduce(
      "test::bounds", Kokkos::RangePolicy<Space>(0, seq * dim),
      KOKKOS_LAMBDA(const int i, float& m) {
        const float v = pe.data()[i];
        const float a = v < 0 ? -v : v;
        if (a > m) m = a;
      },
      Kokkos::Max<float>(max_abs));
  Kokkos::parallel_reduce(
      "test::finite", Kokkos::RangePolicy<Space>(0, seq * dim),
      KOKKOS_LAMBDA(const int i, int& n) { n += compat::math::isfinite(pe.data()[i]) ? 0 : 1; },
      non_finite);
  CHECK(non_finite == 0);
  CHECK(max_abs <= 1.0f);
  // The last rows still match the reference (angles up to 1e6 rad).
  const ReferenceSinusoid ref{dim};
  const auto tail = host_values(Kokkos::subview(pe, std::make_pair(seq - 3, seq), Kokkos::ALL));
  CHECK(max_abs_diff(tail, ref.matrix(3, seq - 3)) <= 2e-6);
}

TEMPLATE_LIST_TEST_CASE("PositionalEncoding adds the same rows to every batch element",
                        "[encoding][fixed]", backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  const int batch = 5, seq = 70, dim = 76;  // on CPUs a group of 32 rotated frequencies and 6 more
  const PositionalEncoding<float, Space> layer(dim);
  const auto x_values = random_values(batch * seq * dim, 7);
  const auto x = device_from<float, Space>(x_values, batch, seq, dim);
  Tensor3<float, M> y("y", batch, seq, dim);
  layer.forward(Space(), {}, x, y);
  REQUIRE(y.extent(0) == std::size_t(batch));
  REQUIRE(y.extent(1) == std::size_t(seq));
  REQUIRE(y.extent(2) == std::size_t(dim));

  // y - x equals the matrix exactly (the same float rows are added to every element).
  const auto pe = host_values(positional_encoding<float>(Space(), dim, seq));
  const auto xh = host_values(x), yh = host_values(y);
  int mismatches = 0;
  for (int b = 0; b < batch; ++b)
    for (int i = 0; i < seq * dim; ++i)
      mismatches += yh[b * seq * dim + i] !=
                    static_cast<double>(static_cast<float>(
                        static_cast<float>(xh[b * seq * dim + i]) + static_cast<float>(pe[i])));
  CHECK(mismatches == 0);

  // In place gives the same bits; a single (seq, dim) sequence is batch element 0.
  layer.forward(Space(), {}, x, x);
  CHECK(bitwise_equal(host_values(x), yh));
  const auto x2 = device_from<float, Space>(
      std::vector<double>(x_values.begin(), x_values.begin() + seq * dim), seq, dim);
  Tensor2<float, M> y2("y2", seq, dim);
  layer.forward(Space(), {}, x2, y2);
  CHECK(bitwise_equal(host_values(y2), std::vector<double>(yh.begin(), yh.begin() + seq * dim)));
}

TEMPLATE_LIST_TEST_CASE("PositionalEncoding reads the sequence length at every call",
                        "[encoding][fixed]", backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  const PositionalEncoding<double, Space> layer(6);
  const ReferenceSinusoid ref{6};
  for (int seq : {1, 3, 31, 32, 33, 100, 257}) {
    Tensor3<double, M> x("x", 2, seq, 6);
    layer.forward(Space(), {}, x, x);
    auto expected = ref.matrix(seq);
    expected.insert(expected.end(), expected.begin(), expected.end());
    CHECK(max_abs_diff(host_values(x), expected) <= 1e-12);
  }
  // Empty batches and sequences are fine and write nothing.
  Tensor3<double, M> empty("empty", 0, 5, 6), no_steps("no_steps", 3, 0, 6);
  layer.forward(Space(), {}, empty, empty);
  layer.forward(Space(), {}, no_steps, no_steps);
}

TEMPLATE_LIST_TEST_CASE("PositionalEncoding has the identity as its Jacobian", "[encoding][fixed]",
                        backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  const int batch = 2, seq = 3, dim = 4, n = batch * seq * dim;
  const PositionalEncoding<double, Space> layer(dim);
  const auto x0 = random_values(n, 11);
  // Finite differences of y_i with respect to x_j: column j of the Jacobian.
  const double h = 1e-5;
  double worst = 0;
  for (int j = 0; j < n; ++j) {
    auto xp = x0, xm = x0;
    xp[j] += h;
    xm[j] -= h;
    Tensor3<double, M> yp("yp", batch, seq, dim), ym("ym", batch, seq, dim);
    layer.forward(Space(), {}, device_from<double, Space>(xp, batch, seq, dim), yp);
    layer.forward(Space(), {}, device_from<double, Space>(xm, batch, seq, dim), ym);
    const auto a = host_values(yp), b = host_values(ym);
    for (int i = 0; i < n; ++i)
      worst = std::max(worst, std::abs((a[i] - b[i]) / (2 * h) - (i == j)));
  }
  CHECK(worst <= 1e-9);
  // The backward pass passes the gradient through unchanged.
  const auto dy_values = random_values(n, 12);
  const auto dy = device_from<double, Space>(dy_values, batch, seq, dim);
  Tensor3<double, M> dx("dx", batch, seq, dim);
  layer.backward(Space(), {}, dx, dy, dx);
  CHECK(bitwise_equal(host_values(dx), dy_values));
  layer.backward(Space(), {}, dx, dy, dy);  // in place: nothing to do
  CHECK(bitwise_equal(host_values(dy), dy_values));
}

TEMPLATE_LIST_TEST_CASE(
    "Without the encoding self-similarity is permutation-equivariant, with it not",
    "[encoding][fixed]", backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  const int seq = 6, dim = 8;
  const std::vector<int> perm = {3, 0, 5, 1, 4, 2};
  // Tokens that are all different from each other.
  const auto tokens = random_values(seq * dim, 21);
  std::vector<double> permuted(tokens.size());
  for (int p = 0; p < seq; ++p)
    for (int j = 0; j < dim; ++j)
      permuted[p * dim + j] = tokens[perm[p] * dim + j];
  const PositionalEncoding<double, Space> layer(dim);

  // S = X X^T, with or without the encoding added first.
  const auto similarity = [&](const std::vector<double>& x_values, bool encode) {
    auto x = device_from<double, Space>(x_values, seq, dim);
    if (encode) layer.forward(Space(), {}, x, x);
    Tensor2<double, M> s("s", seq, seq);
    backends::gemm(Space(), backends::Op::N, backends::Op::T, 1.0, x, x, 0.0, s);
    return host_values(s);
  };
  // Equivariance: S(P X) = P S(X) P^T.
  const auto conjugated = [&](const std::vector<double>& s) {
    std::vector<double> out(s.size());
    for (int a = 0; a < seq; ++a)
      for (int b = 0; b < seq; ++b)
        out[a * seq + b] = s[perm[a] * seq + perm[b]];
    return out;
  };
  CHECK(max_abs_diff(similarity(permuted, false), conjugated(similarity(tokens, false))) <= 1e-12);
  CHECK(max_abs_diff(similarity(permuted, true), conjugated(similarity(tokens, true))) > 1e-2);
}

TEST_CASE("PositionalEncoding gives the same bits on every backend",
          "[encoding][fixed][backends]") {
  const int batch = 3, seq = 1000, dim = 130;
  const auto x_values = random_values(batch * seq * dim, 5);
  std::vector<std::vector<double>> results;
  backends::for_each_space([&](auto space) {
    using Space = decltype(space);
    const PositionalEncoding<float, Space> layer(dim);
    auto x = device_from<float, Space>(x_values, batch, seq, dim);
    layer.forward(space, {}, x, x);
    results.push_back(host_values(x));
    CAPTURE(backends::space_name<Space>());
    check_matches_first_backend<Space>(results.back(), results.front());
  });
}

TEMPLATE_LIST_TEST_CASE("PositionalEncoding rejects bad shapes and leaves the output untouched",
                        "[encoding][fixed][errors]", backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  const PositionalEncoding<float, Space> layer(8);
  Tensor3<float, M> x("x", 2, 5, 7), y("y", 2, 5, 8), y_bad("y_bad", 2, 4, 8);
  Kokkos::deep_copy(y, 42.0f);
  CHECK_THROWS_WITH(layer.forward(Space(), {}, x, y),
                    ContainsText("kformer::PositionalEncoding::forward") &&
                        ContainsText("x has shape (2, 5, 7), expected (*, *, 8)"));
  Tensor3<float, M> x_ok("x_ok", 2, 5, 8);
  CHECK_THROWS_WITH(layer.forward(Space(), {}, x_ok, y_bad),
                    ContainsText("y has shape (2, 4, 8), expected (2, 5, 8)"));
  for (double v : host_values(y))
    REQUIRE(v == 42.0);
  CHECK_THROWS_AS((PositionalEncoding<float, Space>(0)), Error);
  PositionalEncodingOptions bad_base;
  bad_base.base = 1.0;
  CHECK_THROWS_WITH((PositionalEncoding<float, Space>(8, bad_base)), ContainsText("base"));
  CHECK_THROWS_WITH(positional_encoding<float>(Space(), 8, -1), ContainsText("seq_length"));
}

TEMPLATE_LIST_TEST_CASE("PositionalEncoding allocates nothing in steady state",
                        "[encoding][fixed][allocations]", backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  const PositionalEncoding<float, Space> layer(64);
  Tensor3<float, M> x("x", 4, 300, 64), y("y", 4, 300, 64);
  layer.forward(Space(), {}, x, y);  // warm-up: first use of team scratch may size its pool
  layer.backward(Space(), {}, x, y, x);
  Space().fence();
  const AllocationCounter counter;
  for (int i = 0; i < 3; ++i) {
    layer.forward(Space(), {}, x, y);
    layer.forward(Space(), {}, y, y);
    layer.backward(Space(), {}, x, y, x);
  }
  Space().fence();
  CHECK(counter.allocations() == 0);
}

TEMPLATE_LIST_TEST_CASE(
    "PositionalEncoding scales its input (TST's sqrt(d_model)) and its gradient",
    "[encoding][fixed]", backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  const int batch = 2, seq = 9, dim = 6;
  PositionalEncodingOptions options;
  options.input_scale = 8.0;
  const PositionalEncoding<double, Space> layer(dim, options);
  const auto x_values = random_values(batch * seq * dim, 3);
  Tensor3<double, M> y("y", batch, seq, dim), dx("dx", batch, seq, dim);
  const auto x = device_from<double, Space>(x_values, batch, seq, dim);
  layer.forward(Space(), {}, x, y);
  const auto pe = ReferenceSinusoid{dim}.matrix(seq);
  std::vector<double> expected(x_values.size());
  for (std::size_t i = 0; i < expected.size(); ++i)
    expected[i] = 8.0 * x_values[i] + pe[i % (seq * dim)];
  CHECK(max_abs_diff(host_values(y), expected) <= 1e-12);
  layer.backward(Space(), {}, x, x, dx);  // dy = x values
  const auto dxh = host_values(dx);
  for (std::size_t i = 0; i < dxh.size(); ++i)
    REQUIRE(dxh[i] == 8.0 * x_values[i]);
  // WriteMode::Add adds the scaled gradient to what dx holds.
  layer.backward(Space(), {}, x, x, dx, WriteMode::Add);
  const auto dx2 = host_values(dx);
  for (std::size_t i = 0; i < dx2.size(); ++i)
    REQUIRE(dx2[i] == 16.0 * x_values[i]);
}
