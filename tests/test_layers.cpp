// Layer behaviour beyond gradients: backends agree, runs repeat bit for bit, fully masked queries,
// bad input, and allocation-free steady state.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <catch2/catch.hpp>

#include <Kokkos_Core.hpp>

#include <kformer/kformer.hpp>

#include "support/allocation_counter.hpp"
#include "support/test_support.hpp"

using namespace kformer;
using namespace kformer::testing;

namespace {

template <class Space>
using Mask = Kokkos::View<bool**, Kokkos::LayoutRight, typename Space::memory_space>;

template <class Space>
Mask<Space> padding_mask(int batch, int seq, const std::vector<int>& lengths) {
  Mask<Space> m("kpm", batch, seq);
  auto h = Kokkos::create_mirror_view(m);
  for (int b = 0; b < batch; ++b)
    for (int s = 0; s < seq; ++s)
      h(b, s) = s >= lengths[b];
  Kokkos::deep_copy(m, h);
  return m;
}

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
  encoder.backward(Space(), x, dy, dx);
  std::vector<std::vector<double>> out = {host_values(y), host_values(dx)};
  encoder.visit_parameters(
      [&](const std::string&, auto& p) { out.push_back(host_values(p.grad)); });
  return out;
}

}  // namespace

TEST_CASE("Backends agree on a training step within 4e-6, and runs repeat bit for bit",
          "[layers][backends][determinism]") {
  for (const NormType norm : {NormType::BatchNorm, NormType::LayerNorm}) {
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

TEMPLATE_LIST_TEST_CASE("A query whose keys are all masked attends to nothing",
                        "[layers][attention]", backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  const int batch = 2, seq = 4, d = 8;
  MultiHeadAttention<double, Space> mha(Space(), d, {2, 0.0, 5});
  Kokkos::deep_copy(mha.out_proj().bias().value, 0.25);
  // Batch element 1 has every key masked.
  const auto kpm = padding_mask<Space>(batch, seq, {3, 0});
  const auto x = device_from<double, Space>(random_values(batch * seq * d, 3), batch, seq, d);
  Tensor3<double, M> y("y", batch, seq, d), dx("dx", batch, seq, d);
  mha.forward(Space(), RunContext{true, 0}, x, y, kpm);
  const auto yh = host_values(y);
  for (double v : yh)
    REQUIRE(std::isfinite(v));
  for (int i = seq * d; i < 2 * seq * d; ++i)
    CHECK(yh[i] == 0.25);  // out_proj.bias only
  const auto probs = host_values(mha.probabilities());
  for (std::size_t i = probs.size() / 2; i < probs.size(); ++i)
    CHECK(probs[i] == 0.0);
  // No gradient reaches the fully masked element's inputs through attention scores or values;
  // only the query projection path remains, and it is zero too because the query is unused.
  const auto dy = device_from<double, Space>(random_values(batch * seq * d, 4), batch, seq, d);
  mha.backward(Space(), x, dy, dx);
  const auto dxh = host_values(dx);
  for (double v : dxh)
    REQUIRE(std::isfinite(v));
  for (int i = seq * d; i < 2 * seq * d; ++i)
    CHECK(dxh[i] == 0.0);
}

namespace {

// One training forward and backward of attention with dropout, a padding mask and an additive
// mask: output, probabilities (when kept), input gradient and parameter gradients. With
// reuse_masks the caller's masks are overwritten between the forward and the backward (the next
// batch's masks filled into the same memory).
template <class T, class Space>
std::vector<std::vector<double>> attention_pass(bool fused_cpu, int batch, int seq, int d,
                                                bool keep_probabilities = true,
                                                bool reuse_masks = false) {
  using M = MemorySpaceOf<Space>;
  MultiHeadAttentionOptions options{2, 0.2, 11};
  options.fused_cpu = fused_cpu;
  options.keep_probabilities = keep_probabilities;
  MultiHeadAttention<T, Space> mha(Space(), d, options);
  const auto x = device_from<T, Space>(random_values(batch * seq * d, 1), batch, seq, d);
  const auto dy = device_from<T, Space>(random_values(batch * seq * d, 2), batch, seq, d);
  std::vector<int> lengths;
  for (int b = 0; b < batch; ++b)
    lengths.push_back(seq / (b + 1));
  const auto kpm = padding_mask<Space>(batch, seq, lengths);
  std::vector<double> mask_values(seq * seq);
  for (int i = 0; i < seq; ++i)
    for (int j = 0; j < seq; ++j)
      mask_values[i * seq + j] =
          j > i + 3 ? -std::numeric_limits<double>::infinity() : 0.1 * (i - j);
  const auto attn_mask = device_from<T, Space>(mask_values, seq, seq);
  Tensor3<T, M> y("y", batch, seq, d), dx("dx", batch, seq, d);
  mha.forward(Space(), RunContext{true, 3}, x, y, kpm, attn_mask);
  if (reuse_masks) {
    Kokkos::deep_copy(kpm, padding_mask<Space>(batch, seq, std::vector<int>(batch, 1)));
    Kokkos::deep_copy(attn_mask, T(0.5));
  }
  mha.backward(Space(), x, dy, dx);
  std::vector<std::vector<double>> out = {host_values(y)};
  if (keep_probabilities) out.push_back(host_values(mha.probabilities()));
  out.push_back(host_values(dx));
  mha.visit_parameters([&](const std::string&, auto& p) { out.push_back(host_values(p.grad)); });
  return out;
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("Fused CPU attention gives the staged kernels' results",
                        "[layers][attention]", backends::EnabledSpaces) {
  using Space = TestType;
  // Two heads of width 4 (BLAS products), and 8, 16, 32 (loops of their own); one block of
  // query rows per (batch, head), and 300 queries: blocks of 218 and 82 rows, dK and dV summed
  // over the two; column and row counts that are not multiples of the loops' widths.
  for (const int dh : {4, 8, 16, 32}) {
    CAPTURE(dh);
    const auto staged = attention_pass<float, Space>(false, 3, 9, 2 * dh);
    const auto fused = attention_pass<float, Space>(true, 3, 9, 2 * dh);
    const auto staged_double = attention_pass<double, Space>(false, 3, 9, 2 * dh);
    const auto fused_double = attention_pass<double, Space>(true, 3, 9, 2 * dh);
    const auto staged_long = attention_pass<double, Space>(false, 2, 300, 2 * dh);
    const auto fused_long = attention_pass<double, Space>(true, 2, 300, 2 * dh);
    REQUIRE(staged.size() == fused.size());
    for (std::size_t i = 0; i < staged.size(); ++i) {
      CAPTURE(i);
      // The same BLAS calls and softmax rows give the same bits.
      if (dh == 4) CHECK(bitwise_equal(fused[i], staged[i]));
      CHECK(max_rel_diff(fused[i], staged[i]) <= 2e-6);
      CHECK(max_rel_diff(fused_double[i], staged_double[i]) <= 1e-14);
      CHECK(max_rel_diff(fused_long[i], staged_long[i]) <= 1e-13);
    }
  }
}

TEMPLATE_LIST_TEST_CASE(
    "Fused CPU attention recomputing P in the backward gives the bits of reading it back",
    "[layers][attention]", backends::EnabledSpaces) {
  using Space = TestType;
  // With dropout and both masks; 300 queries: two blocks of query rows per (batch, head).
  for (const int dh : {4, 8, 16, 32})
    for (const int seq : {9, 300}) {
      CAPTURE(dh, seq);
      const auto read = attention_pass<float, Space>(true, 2, seq, 2 * dh, true);
      const auto recomputed = attention_pass<float, Space>(true, 2, seq, 2 * dh, false);
      REQUIRE(read.size() == recomputed.size() + 1);
      for (std::size_t i = 0; i < recomputed.size(); ++i) {
        CAPTURE(i);
        CHECK(bitwise_equal(recomputed[i], read[i == 0 ? 0 : i + 1]));  // read[1]: P
      }
      const auto read_double = attention_pass<double, Space>(true, 2, seq, 2 * dh, true);
      const auto recomputed_double = attention_pass<double, Space>(true, 2, seq, 2 * dh, false);
      for (std::size_t i = 0; i < recomputed_double.size(); ++i)
        CHECK(bitwise_equal(recomputed_double[i], read_double[i == 0 ? 0 : i + 1]));
    }
}

TEMPLATE_LIST_TEST_CASE(
    "Attention's backward uses the forward's masks when the caller reuses their memory before it",
    "[layers][attention]", backends::EnabledSpaces) {
  using Space = TestType;
  // The recomputing backward (P not kept) works from copies of the masks; the reading one and
  // the staged path do not need them. Each must give the bits of an untouched run.
  for (const bool fused_cpu : {false, true})
    for (const bool keep : {false, true})
      for (const int seq : {9, 300}) {
        CAPTURE(fused_cpu, keep, seq);
        const auto untouched = attention_pass<float, Space>(fused_cpu, 2, seq, 16, keep, false);
        const auto reused = attention_pass<float, Space>(fused_cpu, 2, seq, 16, keep, true);
        REQUIRE(untouched.size() == reused.size());
        for (std::size_t i = 0; i < untouched.size(); ++i) {
          CAPTURE(i);
          CHECK(bitwise_equal(reused[i], untouched[i]));
        }
      }
}

TEMPLATE_LIST_TEST_CASE(
    "Fused CPU attention trains without a (B, H, S, S) buffer unless asked to keep P",
    "[layers][attention][allocations]", backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  // Long enough that P (16 MiB) outweighs the threads' scratch for blocks of rows (0.75 MiB each).
  const int batch = 2, seq = 1024, d = 16, heads = 2;
  const std::uint64_t square_bytes = std::uint64_t(batch) * heads * seq * seq * sizeof(float);
  const auto x = device_from<float, Space>(random_values(batch * seq * d, 31), batch, seq, d);
  Tensor3<float, M> y("y", batch, seq, d), dx("dx", batch, seq, d);
  for (const bool keep : {false, true}) {
    MultiHeadAttentionOptions options{heads, 0.1, 5};
    options.keep_probabilities = keep;
    MultiHeadAttention<float, Space> mha(Space(), d, options);
    CAPTURE(keep, mha.fused_on_cpu());
    const AllocationCounter counter;
    mha.forward(Space(), RunContext{true, 1}, x, y);
    mha.backward(Space(), x, y, dx);
    Space().fence();
    CHECK((counter.allocated_bytes() >= square_bytes) == (keep || !mha.fused_on_cpu()));
    CHECK((mha.saved_bytes(batch, seq) >= std::int64_t(square_bytes)) ==
          (keep || !mha.fused_on_cpu()));
  }
}

TEMPLATE_LIST_TEST_CASE(
    "Attention without grad keeps no (B, H, S, S) buffer unless asked, with the same outputs",
    "[layers][attention][allocations]", backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  // seq 300: the fused CPU path takes each (batch, head) in two blocks of query rows.
  const int batch = 2, seq = 300, d = 16, heads = 2;
  const std::uint64_t square_bytes = std::uint64_t(batch) * heads * seq * seq * sizeof(float);
  const auto x = device_from<float, Space>(random_values(batch * seq * d, 21), batch, seq, d);
  const auto kpm = padding_mask<Space>(batch, seq, {seq, 250});
  const auto mask = device_from<float, Space>(random_values(seq * seq, 22), seq, seq);  // additive
  for (const bool fused_cpu : {false, true}) {
    MultiHeadAttentionOptions options{heads, 0.0, 23, fused_cpu};
    MultiHeadAttention<float, Space> with_grad(Space(), d, options);
    options.keep_probabilities = false;
    MultiHeadAttention<float, Space> no_grad(Space(), d, options);
    CAPTURE(fused_cpu, no_grad.fused_on_cpu());
    Tensor3<float, M> y("y", batch, seq, d), y_no_grad("y_no_grad", batch, seq, d);
    with_grad.forward(Space(), RunContext{false, 0, true}, x, y, kpm, mask);
    Space().fence();
    const AllocationCounter counter;
    no_grad.forward(Space(), RunContext{false, 0, false}, x, y_no_grad, kpm, mask);
    Space().fence();
    CHECK(bitwise_equal(host_values(y_no_grad), host_values(y)));
    if (no_grad.fused_on_cpu()) {
      CHECK(counter.allocated_bytes() < square_bytes);
      CHECK_THROWS_WITH(no_grad.probabilities(),
                        Catch::Contains("kformer::MultiHeadAttention::probabilities") &&
                            Catch::Contains("did not keep them"));
      Tensor3<float, M> dx("dx", batch, seq, d);
      CHECK_THROWS_WITH(no_grad.backward(Space(), x, y, dx),
                        Catch::Contains("kformer::MultiHeadAttention::backward") &&
                            Catch::Contains("kept nothing for a backward"));
    } else {  // the staged path computes every score in the buffer anyway, and keeps it
      CHECK(counter.allocated_bytes() >= square_bytes);
      CHECK(no_grad.probabilities().size() == std::size_t(batch) * heads * seq * seq);
    }
    // Asked to keep them, a forward without grad gives them as one with grad does.
    no_grad.set_keep_probabilities(true);
    no_grad.forward(Space(), RunContext{false, 0, false}, x, y_no_grad, kpm, mask);
    CHECK(bitwise_equal(host_values(no_grad.probabilities()),
                        host_values(with_grad.probabilities())));
  }
}

TEMPLATE_LIST_TEST_CASE("An additive -inf attention mask gives exactly zero probability",
                        "[layers][attention]", backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  const int batch = 2, seq = 5, d = 8, heads = 2;
  MultiHeadAttention<double, Space> mha(Space(), d, {heads, 0.0, 7});
  // Causal mask: query i may not see keys j > i.
  std::vector<double> causal(seq * seq, 0.0);
  for (int i = 0; i < seq; ++i)
    for (int j = i + 1; j < seq; ++j)
      causal[i * seq + j] = -std::numeric_limits<double>::infinity();
  const auto mask = device_from<double, Space>(causal, seq, seq);
  const auto x = device_from<double, Space>(random_values(batch * seq * d, 8), batch, seq, d);
  Tensor3<double, M> y("y", batch, seq, d);
  mha.forward(Space(), RunContext{false, 0}, x, y, {}, mask);
  const auto probs = host_values(mha.probabilities());  // (B, H, S, S)
  for (int row = 0; row < batch * heads * seq; ++row) {
    const int i = row % seq;
    double sum = 0.0;
    for (int j = 0; j < seq; ++j) {
      const double p = probs[std::size_t(row) * seq + j];
      CAPTURE(row, i, j);
      if (j > i)
        CHECK(p == 0.0);
      else
        CHECK(p > 0.0);
      sum += p;
    }
    CHECK(sum == Approx(1.0).epsilon(1e-14));
  }
}

TEMPLATE_LIST_TEST_CASE(
    "Attention refuses a sequence whose score matrices cannot fit, before allocating",
    "[layers][attention][errors]", backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  // seq = 2^21: the input is 32 MiB, one (1, 1, seq, seq) float score matrix 16 TiB.
  const int seq = 1 << 21, d = 4;
  Tensor3<float, M> x("x", 1, seq, d), y("y", 1, seq, d);
  Kokkos::deep_copy(y, 3.0f);
  for (const bool fused_cpu : {false, true}) {
    MultiHeadAttentionOptions options{1, 0.1, 3};
    options.fused_cpu = fused_cpu;
    MultiHeadAttention<float, Space> mha(Space(), d, options);
    // Staged training holds P, its dropout copy and, in the backward, all of dP; the fused CPU
    // path only P, kept for probabilities() (it recomputes the softmax block by block).
    const char* training_need = mha.fused_on_cpu() ? "16.0 TiB" : "48.0 TiB";
    CHECK(mha.fused_on_cpu() ==
          (fused_cpu && backends::runs_on_host<Space> && backends::has_host_blas));
    for (const bool training : {false, true}) {
      CAPTURE(fused_cpu, training);
      CHECK_THROWS_WITH(mha.forward(Space(), RunContext{training, 0}, x, y),
                        Catch::Contains("kformer::MultiHeadAttention::forward") &&
                            Catch::Contains("batch 1, seq 2097152 and 1 heads need") &&
                            Catch::Contains(training ? training_need : "16.0 TiB") &&
                            Catch::Contains("is available"));
    }
    CHECK(mha.probabilities().size() == 0);
  }
  const auto yh = host_values(y);
  CHECK(std::all_of(yh.begin(), yh.end(), [](double v) { return v == 3.0; }));
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
  Dropout<float, Space> dropout(p, 99);
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
                    Catch::Contains("kformer::MultiHeadAttention") &&
                        Catch::Contains("heads (4) must divide d_model (10)"));
  TransformerEncoder<float, Space> encoder(Space(), 2, small_options(NormType::BatchNorm, false));
  Tensor3<float, M> x("x", 2, 5, 12), y("y", 2, 5, 16), x_ok("x_ok", 2, 5, 16);
  Kokkos::deep_copy(y, 3.0f);
  CHECK_THROWS_WITH(encoder.forward(Space(), RunContext{true, 0}, x, y),
                    Catch::Contains("kformer::TransformerEncoder::forward") &&
                        Catch::Contains("x has shape (2, 5, 12), expected (*, *, 16)"));
  Mask<Space> wrong("wrong", 2, 4);
  CHECK_THROWS_WITH(encoder.forward(Space(), RunContext{true, 0}, x_ok, y, wrong),
                    Catch::Contains("self_attn::forward") &&
                        Catch::Contains("key_padding_mask has shape (2, 4), expected (2, 5)"));
  Tensor2<float, M> attn_mask("attn_mask", 4, 5);
  CHECK_THROWS_WITH(encoder.forward(Space(), RunContext{true, 0}, x_ok, y, {}, attn_mask),
                    Catch::Contains("attn_mask has shape (4, 5), expected (5, 5)"));
  for (double v : host_values(y))
    REQUIRE(v == 3.0);
  // Nothing was updated: no BatchNorm statistics, no parameter gradients.
  CHECK(encoder.layer(0).norm1().batch_norm().num_batches_tracked() == 0);
  encoder.visit_parameters([](const std::string& name, auto& p) {
    CAPTURE(name);
    for (double g : host_values(p.grad))
      REQUIRE(g == 0.0);
  });
  Linear<float, Space> linear(Space(), 4, 3);
  Tensor2<float, M> in("in", 6, 5), out("out", 6, 3);
  CHECK_THROWS_WITH(linear.forward(Space(), in, out),
                    Catch::Contains("kformer::Linear::forward") &&
                        Catch::Contains("x has shape (6, 5), expected (*, 4)"));
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
      encoder.backward(Space(), x, y, dx);
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
