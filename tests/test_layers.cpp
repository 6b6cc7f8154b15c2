// Layer behaviour beyond gradients: backends agree, runs repeat bit for bit, dropout decisions,
// bad input, and allocation-free steady state (attention's own in test_attention.cpp).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "support/catch.hpp"

#include <Kokkos_Core.hpp>

#include <kformer/kformer.hpp>

#include "support/allocation_counter.hpp"
#include "support/test_support.hpp"

using namespace kformer;
using namespace kformer::testing;

namespace {

EncoderLayerOptions small_options(NormType norm, bool norm_first) {
  EncoderLayerOptions o;
  o.d_model = 16;
  o.heads = 4;
  o.dim_feedforward = 24;
  o.dropout = 0.1;
  o.norm = norm;
  o.norm_first = norm_first;
  o.seed = 2024;
  return o;
}

// One training step of a 2-layer stack: output, input gradient and every parameter gradient.
template <class Space>
std::vector<std::vector<double>> training_step(NormType norm, bool norm_first, std::uint64_t step) {
  using M = typename Space::memory_space;
  const int batch = 3, seq = 7, d = 16;
  TransformerEncoder<float, Space> encoder(Space(), 2, small_options(norm, norm_first));
  const auto x = device_from<float, Space>(random_values(batch * seq * d, 1), batch, seq, d);
  const auto dy = device_from<float, Space>(random_values(batch * seq * d, 2), batch, seq, d);
  Tensor3<float, M> y("y", batch, seq, d), dx("dx", batch, seq, d);
  const auto kpm = padding_mask<Space>(batch, seq, {7, 5, 3});
  encoder.forward(Space(), RunContext{true, step}, x, y, kpm);
  encoder.backward(Space(), {}, x, dy, dx);
  std::vector<std::vector<double>> out = {host_values(y), host_values(dx)};
  encoder.visit_parameters(
      [&](const std::string&, auto& p) { out.push_back(host_values(p.grad)); });
  return out;
}

}  // namespace

TEST_CASE("Backends agree on a training step within 4e-6, and runs repeat bit for bit",
          "[layers][backends][determinism]") {
  for (const auto& kind : kNormKinds) {  // every kind in the registry
    const NormType norm = kind.type;
    for (const bool norm_first : {false, true}) {
      CAPTURE(norm_name(norm), norm_first);
      std::vector<std::vector<std::vector<double>>> per_backend;
      std::vector<std::string> names;
      backends::for_each_space([&](auto space) {
        using Space = decltype(space);
        const auto first = training_step<Space>(norm, norm_first, 7);
        const auto again = training_step<Space>(norm, norm_first, 7);
        const auto other_step = training_step<Space>(norm, norm_first, 8);
        CAPTURE(backends::space_name<Space>());
        for (std::size_t i = 0; i < first.size(); ++i)
          CHECK(bitwise_equal(first[i], again[i]));
        CHECK(!bitwise_equal(first[0], other_step[0]));  // another step draws other dropout masks
        per_backend.push_back(first);
        names.push_back(backends::space_name<Space>());
      });
      for (std::size_t b = 1; b < per_backend.size(); ++b) {
        CAPTURE(names[0], names[b]);
        for (std::size_t i = 0; i < per_backend[0].size(); ++i) {
          CAPTURE(i);
          // 32 float epsilons: GPUs sum in other orders (cuBLAS, tree reductions), and
          // BatchNorm's backward amplifies the difference; an H200 gave 1.4e-6 against Serial.
          CHECK(max_rel_diff(per_backend[b][i], per_backend[0][i], 1e-3) <= 4e-6);
        }
      }
    }
  }
}

namespace {

// Dropout's documented decision for element i, written out again: lane i % 4 (16 bits each) of
// splitmix64's finaliser applied to key + (i / 4) * golden, key = mix(seed ^ mix(step + c)),
// kept when the lane is at least ceil(p 2^16).
bool reference_keep(std::uint64_t seed, std::uint64_t step, double p, std::uint64_t i) {
  const auto mix = [](std::uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  const std::uint64_t key = mix(seed ^ mix(step + 0x632BE59BD9B4E019ull));
  const std::uint64_t h = mix(key + (i / 4) * 0x9E3779B97F4A7C15ull);
  return ((h >> (16 * (i % 4))) & 0xFFFFu) >= static_cast<std::uint64_t>(std::ceil(p * 65536.0));
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("Dropout keeps exactly the elements its counter hash decides",
                        "[layers][dropout]", backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  // Several of the CPU path's 2048-element chunks and a partial group of four at the end.
  const std::int64_t n = 3 * 2048 + 907;
  const double p = 0.3;
  Dropout<float, Space> dropout(Space(), p, 99);
  Tensor1<float, M> x("x", n), y("y", n);
  Kokkos::deep_copy(x, 2.0f);
  dropout.forward(Space(), RunContext{true, 5}, x, y);
  const auto yh = host_values(y);
  auto mask = Kokkos::create_mirror_view(dropout.mask(n));
  Kokkos::deep_copy(mask, dropout.mask(n));
  std::int64_t kept = 0, wrong = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const bool keep = reference_keep(99, 5, p, static_cast<std::uint64_t>(i));
    kept += keep;
    wrong += (mask(i) != keep) + (yh[i] != (keep ? 2.0f / 0.7f : 0.0f));
  }
  CHECK(wrong == 0);
  CHECK(std::abs(double(kept) / n - (1 - p)) < 0.02);
}

namespace {

// for_each_keep's callback as a functor: nvcc does not let its host-device loop call a lambda.
struct RecordKeeps {
  int* seen;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t e, const bool keep) const {
    seen[e] = keep;
  }
};

}  // namespace

TEST_CASE("The CPU loops' dropout decisions are keep4's", "[layers][dropout]") {
  const DropoutDecisions decide(7, 3, 0.25);
  const std::uint64_t first_group = 12345;
  const std::int64_t n = 2 * 4 * DropoutDecisions::kHostGroups + 6;  // two blocks and a part
  std::vector<int> seen(n, -1);
  decide.for_each_keep(first_group, n, RecordKeeps{seen.data()});
  std::int64_t wrong = 0;
  for (std::int64_t e = 0; e < n; ++e) {
    bool keep[4];
    decide.keep4(first_group + e / 4, keep);
    wrong += seen[e] != int(keep[e % 4]);
  }
  CHECK(wrong == 0);
}

TEST_CASE("Dropout decisions over rows are keep4's at each row's own groups", "[layers][dropout]") {
  // Element j of row r is lane j % 4 of group (first_row + r) ceil(n / 4) + j / 4: rows of a
  // multiple of 4 (one sweep over all rows) and of other lengths (a sweep a row, a last partial
  // group in each), more elements than one for_each_keep block.
  const DropoutDecisions decide(11, 5, 0.3);
  const std::uint64_t first_row = 77;
  for (const int n : {64, 66, 9, 1}) {
    CAPTURE(n);
    const int rows = 4 * DropoutDecisions::kHostGroups / n + 3;
    std::vector<int> seen(std::size_t(rows) * n, -1);
    decide.for_each_keep_in_rows(first_row, rows, n, RecordKeeps{seen.data()});
    std::int64_t wrong = 0;
    for (int r = 0; r < rows; ++r)
      for (int j = 0; j < n; ++j) {
        bool keep[4];
        decide.keep4((first_row + r) * std::uint64_t((n + 3) / 4) + j / 4, keep);
        wrong += seen[std::size_t(r) * n + j] != int(keep[j % 4]);
      }
    CHECK(wrong == 0);
  }
}

TEMPLATE_LIST_TEST_CASE("Layers reject bad input with both shapes named and change nothing",
                        "[layers][errors]", backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  CHECK_THROWS_WITH((MultiHeadAttention<float, Space>(Space(), 10, {4, 0.0, 0})),
                    ContainsText("kformer::MultiHeadAttention") &&
                        ContainsText("heads (4) must divide d_model (10)"));
  CHECK_THROWS_WITH((MultiHeadAttention<float, Space>(Space(), 1024, {2, 0.0, 0})),
                    ContainsText("kformer::MultiHeadAttention") &&
                        ContainsText("head width d_model / heads must be at most 256") &&
                        ContainsText("1024 / 2 = 512"));
  TransformerEncoder<float, Space> encoder(Space(), 2, small_options(NormType::BatchNorm, false));
  Tensor3<float, M> x("x", 2, 5, 12), y("y", 2, 5, 16), x_ok("x_ok", 2, 5, 16);
  Kokkos::deep_copy(y, 3.0f);
  CHECK_THROWS_WITH(encoder.forward(Space(), RunContext{true, 0}, x, y),
                    ContainsText("kformer::TransformerEncoder::forward") &&
                        ContainsText("x has shape (2, 5, 12), expected (*, *, 16)"));
  Mask<Space> wrong("wrong", 2, 4);
  CHECK_THROWS_WITH(encoder.forward(Space(), RunContext{true, 0}, x_ok, y, wrong),
                    ContainsText("self_attn::forward") &&
                        ContainsText("key_padding_mask has shape (2, 4), expected (2, 5)"));
  Tensor2<float, M> attn_mask("attn_mask", 4, 5);
  CHECK_THROWS_WITH(encoder.forward(Space(), RunContext{true, 0}, x_ok, y, {}, attn_mask),
                    ContainsText("attn_mask has shape (4, 5), expected (5, 5)"));
  for (double v : host_values(y))
    REQUIRE(v == 3.0);
  // Nothing was updated: no BatchNorm statistics, no parameter gradients.
  CHECK(encoder.layer(0).norm1().template get<BatchNorm<float, Space>>()->num_batches_tracked() ==
        0);
  encoder.visit_parameters([](const std::string& name, auto& p) {
    CAPTURE(name);
    for (double g : host_values(p.grad))
      REQUIRE(g == 0.0);
  });
  Linear<float, Space> linear(Space(), 4, 3);
  Tensor2<float, M> in("in", 6, 5), out("out", 6, 3);
  CHECK_THROWS_WITH(linear.forward(Space(), {}, in, out),
                    ContainsText("kformer::Linear::forward") &&
                        ContainsText("x has shape (6, 5), expected (*, 4)"));
  CHECK_THROWS_WITH(
      (RMSNorm<float, Space>(Space(), 4, 0.0)),
      ContainsText("kformer::RMSNorm") && ContainsText("eps must be positive, got 0"));
  RMSNorm<float, Space> rms(Space(), 4);
  Tensor2<float, M> rms_x("rms_x", 6, 4), rms_y("rms_y", 6, 5), rms_dy("rms_dy", 3, 4);
  Kokkos::deep_copy(rms_y, 3.0f);
  CHECK_THROWS_WITH(rms.forward(Space(), {}, rms_x, rms_y),
                    ContainsText("kformer::RMSNorm::forward") &&
                        ContainsText("y has shape (6, 5), expected (6, 4)"));
  CHECK_THROWS_WITH(rms.backward(Space(), {}, rms_x, rms_dy, Tensor2<float, M>()),
                    ContainsText("kformer::RMSNorm::backward") &&
                        ContainsText("dy has shape (3, 4), expected (6, 4)"));
  for (double v : host_values(rms_y))
    REQUIRE(v == 3.0);
  for (double g : host_values(rms.weight().grad))
    REQUIRE(g == 0.0);
}

TEMPLATE_LIST_TEST_CASE(
    "Layers read a caller's strided Views in place where row-major and refuse others by an Error",
    "[layers][layouts]", backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  using Strided3 = Kokkos::View<float***, Kokkos::LayoutStride, M>;
  const int steps = 20, d = 16, windows = 4, window = 5;
  TransformerEncoder<float, Space> encoder(Space(), 2, small_options(NormType::LayerNorm, false));
  // A simulation's trajectory and its output array, (steps, d); the model reads 4 windows of 5
  // steps of the one and writes the same windows of the other, both through LayoutStride.
  const auto trajectory = device_from<float, Space>(random_values(steps * d, 3), steps, d);
  Tensor2<float, M> predicted("predicted", steps, d);
  const Strided3 x_windows(trajectory.data(),
                           Kokkos::LayoutStride(windows, window * d, window, d, d, 1));
  const Strided3 y_windows(predicted.data(),
                           Kokkos::LayoutStride(windows, window * d, window, d, d, 1));
  encoder.forward(Space(), RunContext{false, 0}, x_windows, y_windows);
  // The same through LayoutRight copies: the same kernels on the same values, bit for bit.
  Tensor3<float, M> x_copy("x_copy", windows, window, d), y_copy("y_copy", windows, window, d);
  Kokkos::deep_copy(x_copy, x_windows);
  encoder.forward(Space(), RunContext{false, 0}, x_copy, y_copy);
  CHECK(host_values(predicted) == host_values(y_copy));

  // One window with an arbitrary stride over its extent-1 batch dimension: row-major memory.
  const Strided3 lone(trajectory.data(), Kokkos::LayoutStride(1, 12345, window, d, d, 1));
  Tensor3<float, M> y_lone("y_lone", 1, window, d);
  encoder.forward(Space(), RunContext{false, 0}, lone, y_lone);
  const auto first = host_values(y_copy);
  CHECK(host_values(y_lone) == std::vector<double>(first.begin(), first.begin() + window * d));

  // Overlapping windows (a stride of 2 steps) are not row-major: an Error, nothing written.
  const Strided3 overlapping(trajectory.data(),
                             Kokkos::LayoutStride(windows, 2 * d, window, d, d, 1));
  Kokkos::deep_copy(y_copy, 3.0f);
  CHECK_THROWS_WITH(encoder.forward(Space(), RunContext{false, 0}, overlapping, y_copy),
                    ContainsText("kformer::RowMajorView: a LayoutStride View of shape (4, 5, 16) "
                                 "and strides (32, 16, 1) was passed where kformer takes a "
                                 "row-major (LayoutRight) tensor") &&
                        ContainsText("as_tensor_from_column_major"));
  for (double v : host_values(y_copy))
    REQUIRE(v == 3.0);
  // A LayoutLeft matrix (Kokkos' default on GPUs) is refused by name, not by a static_assert.
  Linear<float, Space> linear(Space(), 4, 3);
  Kokkos::View<float**, Kokkos::LayoutLeft, M> left("left", 6, 4);
  Tensor2<float, M> out("out", 6, 3);
  CHECK_THROWS_WITH(linear.forward(Space(), {}, left, out),
                    ContainsText("a LayoutLeft View of shape (6, 4) and strides (1, 6)"));
  // A column of a matrix as dx: refused before any gradient is accumulated.
  Tensor2<float, M> wide("wide", 6, 8), dy("dy", 6, 3);
  CHECK_THROWS_WITH(linear.backward(Space(), {}, Tensor2<float, M>("x", 6, 4), dy,
                                    Kokkos::subview(wide, Kokkos::ALL, std::make_pair(0, 4))),
                    ContainsText("a LayoutRight View of shape (6, 4) and strides (8, 1)"));
  for (double g : host_values(linear.weight().grad))
    REQUIRE(g == 0.0);

  // Key-padding masks follow the same rule: a LayoutStride mask with row-major strides is read
  // in place (the same outputs as its LayoutRight original), a LayoutLeft one is refused.
  Kokkos::View<bool**, Kokkos::LayoutRight, M> mask("mask", windows, window);
  const auto mask_host = Kokkos::create_mirror_view(mask);
  for (int b = 0; b < windows; ++b)
    for (int s = 0; s < window; ++s)
      mask_host(b, s) = s >= window - b;  // window b pads its last b steps
  Kokkos::deep_copy(mask, mask_host);
  const Kokkos::View<const bool**, Kokkos::LayoutStride, M> strided_mask(
      mask.data(), Kokkos::LayoutStride(windows, window, window, 1));
  Tensor3<float, M> y_masked("y_masked", windows, window, d);
  encoder.forward(Space(), RunContext{false, 0}, x_copy, y_copy, mask);
  encoder.forward(Space(), RunContext{false, 0}, x_copy, y_masked, strided_mask);
  CHECK(host_values(y_masked) == host_values(y_copy));
  CHECK(host_values(y_masked) != host_values(predicted));  // the mask changed the outputs
  const Kokkos::View<bool**, Kokkos::LayoutLeft, M> left_mask("left_mask", windows, window);
  CHECK_THROWS_WITH(encoder.forward(Space(), RunContext{false, 0}, x_copy, y_masked, left_mask),
                    ContainsText("a LayoutLeft View of shape (4, 5) and strides (1, 4)"));
}

TEMPLATE_LIST_TEST_CASE(
    "A steady-state training step allocates nothing, and a larger shape reallocates once",
    "[layers][allocations]", backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  for (const bool norm_first : {false, true}) {
    TransformerEncoder<float, Space> encoder(Space(), 2,
                                             small_options(NormType::BatchNorm, norm_first));
    const auto step = [&](int batch, int seq, std::uint64_t s) {
      Tensor3<float, M> x("x", batch, seq, 16), y("y", batch, seq, 16), dx("dx", batch, seq, 16);
      const auto kpm = padding_mask<Space>(batch, seq, std::vector<int>(batch, seq));
      Space().fence();
      const AllocationCounter counter;  // the step itself, not its inputs
      encoder.zero_grad(Space());
      encoder.forward(Space(), RunContext{true, s}, x, y, kpm);
      encoder.backward(Space(), {}, x, y, dx);
      Space().fence();
      return counter.allocations();
    };
    CHECK(step(4, 10, 0) > 0);   // first step: buffers are sized
    CHECK(step(4, 10, 1) == 0);  // steady state
    CHECK(step(3, 8, 2) == 0);   // a smaller shape reuses the buffers
    CHECK(step(4, 10, 3) == 0);
    const auto grown = step(6, 12, 4);  // larger: the buffers that must grow reallocate
    CHECK(grown > 0);
    CHECK(step(6, 12, 5) == 0);
    CHECK(step(5, 12, 6) == 0);
  }
}
