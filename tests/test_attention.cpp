// Multi-head attention's fused kernels on every backend: the portable kernel against the
// backend's specialisation (and so against each other backend), fully masked queries, -inf masks,
// masks reused before the backward, and memory: no (B, H, S, S) buffer in training or inference
// unless P is asked for, peaks that grow linearly with the sequence, and refusals before
// allocating. Gradients (finite differences) are in test_layer_gradients.cpp, PyTorch parity in
// test_pytorch_parity.cpp.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "support/catch.hpp"

#include <Kokkos_Core.hpp>

#include <kformer/backends/memory_tracker.hpp>
#include <kformer/layers/attention.hpp>

#include "support/allocation_counter.hpp"
#include "support/test_support.hpp"

using namespace kformer;
using namespace kformer::testing;

namespace {

constexpr AttentionKernel kKernels[] = {AttentionKernel::Best, AttentionKernel::Portable};

const char* kernel_name(AttentionKernel k) {
  return k == AttentionKernel::Best ? "best" : "portable";
}

// One training forward and backward of attention with dropout, a padding mask and an additive
// mask: output, probabilities (when kept), input gradient and parameter gradients. With
// reuse_masks the caller's masks are overwritten between the forward and the backward (the next
// batch's masks filled into the same memory).
template <class T, class Space>
std::vector<std::vector<double>> attention_pass(AttentionKernel kernel, int batch, int seq, int d,
                                                bool keep_probabilities = true,
                                                bool reuse_masks = false, int heads = 2) {
  using M = MemorySpaceOf<Space>;
  MultiHeadAttentionOptions options{heads, 0.2, 11};
  options.kernel = kernel;
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
  mha.backward(Space(), {}, x, dy, dx);
  std::vector<std::vector<double>> out = {host_values(y)};
  if (keep_probabilities) out.push_back(host_values(mha.probabilities()));
  out.push_back(host_values(dx));
  mha.visit_parameters([&](const std::string&, auto& p) { out.push_back(host_values(p.grad)); });
  return out;
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("The portable fused kernel gives the specialised kernel's results",
                        "[layers][attention]", backends::EnabledSpaces) {
  using Space = TestType;
  // Head widths 4 (BLAS products on a CPU), 8, 16, 32 (vector loops) and 64, and 3, 100 and 200
  // (zero-padded to the portable kernel's widths 8, 128 and 256); 9 queries (one tile), 300
  // (tiles of 64 with a partial last one; several blocks of query rows).
  struct Case {
    int dh, seq;
  };
  std::vector<Case> cases = {{3, 300}, {100, 70}, {200, 40}};
  for (const int dh : {4, 8, 16, 32, 64})
    for (const int seq : {9, 300})
      cases.push_back({dh, seq});
  for (const auto& [dh, seq] : cases) {
    CAPTURE(dh, seq);
    const auto best = attention_pass<double, Space>(AttentionKernel::Best, 2, seq, 2 * dh);
    const auto portable = attention_pass<double, Space>(AttentionKernel::Portable, 2, seq, 2 * dh);
    const auto best_f = attention_pass<float, Space>(AttentionKernel::Best, 2, seq, 2 * dh);
    const auto portable_f = attention_pass<float, Space>(AttentionKernel::Portable, 2, seq, 2 * dh);
    REQUIRE(best.size() == portable.size());
    for (std::size_t i = 0; i < best.size(); ++i) {
      CAPTURE(i);  // 0: y, 1: P, 2: dx, then the parameter gradients
      CHECK(max_rel_diff(portable[i], best[i]) <= 1e-13);
      CHECK(max_rel_diff(portable_f[i], best_f[i]) <= 2e-5);
      CHECK(max_rel_diff(portable_f[i], best[i]) <= 2e-5);
    }
  }
}

TEMPLATE_LIST_TEST_CASE("Attention on every backend gives the host's results",
                        "[layers][attention]", backends::EnabledSpaces) {
  using Space = TestType;
  using Host = Kokkos::DefaultHostExecutionSpace;
  // The backend's kernel (the portable one on a GPU) against the host's own (its specialisation
  // where it has a BLAS), over every compiled register width (8 ... 256, head widths that are
  // not a power of two padded) and sequences of one tile and of several with a partial last one.
  // The host itself is compared with its other kernel by the test above.
  if constexpr (!std::is_same_v<Space, Host>) {
    struct Case {
      int dh, seq;
    };
    for (const Case c : {Case{3, 9}, Case{3, 300}, Case{8, 300}, Case{16, 300}, Case{24, 133},
                         Case{64, 300}, Case{100, 70}, Case{200, 40}}) {
      CAPTURE(c.dh, c.seq);
      const auto device = attention_pass<double, Space>(AttentionKernel::Best, 2, c.seq, 2 * c.dh);
      const auto host = attention_pass<double, Host>(AttentionKernel::Best, 2, c.seq, 2 * c.dh);
      const auto device_f = attention_pass<float, Space>(AttentionKernel::Best, 2, c.seq, 2 * c.dh);
      REQUIRE(device.size() == host.size());
      for (std::size_t i = 0; i < host.size(); ++i) {
        CAPTURE(i);  // 0: y, 1: P, 2: dx, then the parameter gradients
        CHECK(max_rel_diff(device[i], host[i]) <= 1e-12);
        CHECK(max_rel_diff(device_f[i], host[i]) <= 2e-5);
      }
    }
  }
}

TEMPLATE_LIST_TEST_CASE("Keeping P for inspection changes neither outputs nor gradients",
                        "[layers][attention]", backends::EnabledSpaces) {
  using Space = TestType;
  for (const AttentionKernel kernel : kKernels)
    for (const int seq : {9, 300}) {
      CAPTURE(kernel_name(kernel), seq);
      const auto kept = attention_pass<float, Space>(kernel, 2, seq, 32, true);
      const auto not_kept = attention_pass<float, Space>(kernel, 2, seq, 32, false);
      REQUIRE(kept.size() == not_kept.size() + 1);
      for (std::size_t i = 0; i < not_kept.size(); ++i) {
        CAPTURE(i);
        CHECK(bitwise_equal(not_kept[i], kept[i == 0 ? 0 : i + 1]));  // kept[1]: P
      }
      // Each kept row of P sums to 1 or (fully masked) to 0.
      const int rows = 2 * 2 * seq;
      for (int r = 0; r < rows; ++r) {
        double sum = 0;
        for (int j = 0; j < seq; ++j)
          sum += kept[1][std::size_t(r) * seq + j];
        CHECK((std::abs(sum - 1.0) < 1e-5 || sum == 0.0));
      }
    }
}

TEMPLATE_LIST_TEST_CASE("A query whose keys are all masked attends to nothing",
                        "[layers][attention]", backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  for (const AttentionKernel kernel : kKernels) {
    CAPTURE(kernel_name(kernel));
    const int batch = 2, seq = 4, d = 8;
    MultiHeadAttentionOptions options{2, 0.0, 5};
    options.kernel = kernel;
    MultiHeadAttention<double, Space> mha(Space(), d, options);
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
    // No gradient reaches the fully masked element's inputs through attention scores or
    // values; only the query projection path remains, and it is zero too because the query is
    // unused.
    const auto dy = device_from<double, Space>(random_values(batch * seq * d, 4), batch, seq, d);
    mha.backward(Space(), {}, x, dy, dx);
    const auto dxh = host_values(dx);
    for (double v : dxh)
      REQUIRE(std::isfinite(v));
    for (int i = seq * d; i < 2 * seq * d; ++i)
      CHECK(dxh[i] == 0.0);
  }
}

TEMPLATE_LIST_TEST_CASE("An additive -inf attention mask gives exactly zero probability",
                        "[layers][attention]", backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  for (const AttentionKernel kernel : kKernels) {
    CAPTURE(kernel_name(kernel));
    const int batch = 2, seq = 70, d = 8, heads = 2;  // two key tiles of the portable kernel
    MultiHeadAttentionOptions options{heads, 0.0, 7};
    options.kernel = kernel;
    MultiHeadAttention<double, Space> mha(Space(), d, options);
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
        if (j > i)
          REQUIRE(p == 0.0);
        else
          REQUIRE(p > 0.0);
        sum += p;
      }
      CHECK(sum == Approx(1.0).epsilon(1e-14));
    }
  }
}

TEMPLATE_LIST_TEST_CASE(
    "Attention's backward uses the forward's masks when the caller reuses their memory before it",
    "[layers][attention]", backends::EnabledSpaces) {
  using Space = TestType;
  // The backward recomputes P from copies of the masks; each run must give the bits of an
  // untouched one.
  for (const AttentionKernel kernel : kKernels)
    for (const bool keep : {false, true})
      for (const int seq : {9, 300}) {
        CAPTURE(kernel_name(kernel), keep, seq);
        const auto untouched = attention_pass<float, Space>(kernel, 2, seq, 16, keep, false);
        const auto reused = attention_pass<float, Space>(kernel, 2, seq, 16, keep, true);
        REQUIRE(untouched.size() == reused.size());
        for (std::size_t i = 0; i < untouched.size(); ++i) {
          CAPTURE(i);
          CHECK(bitwise_equal(reused[i], untouched[i]));
        }
      }
}

TEMPLATE_LIST_TEST_CASE(
    "Attention trains and infers without a (B, H, S, S) buffer unless asked to keep P",
    "[layers][attention][allocations]", backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  // Long enough that P (16 MiB) outweighs the threads' scratch for blocks of rows (0.75 MiB each).
  const int batch = 2, seq = 1024, d = 16, heads = 2;
  const std::uint64_t square_bytes = std::uint64_t(batch) * heads * seq * seq * sizeof(float);
  const auto x = device_from<float, Space>(random_values(batch * seq * d, 31), batch, seq, d);
  Tensor3<float, M> y("y", batch, seq, d), dx("dx", batch, seq, d);
  for (const AttentionKernel kernel : kKernels)
    for (const bool keep : {false, true})
      for (const bool grad : {false, true}) {
        MultiHeadAttentionOptions options{heads, 0.1, 5};
        options.keep_probabilities = keep;
        options.kernel = kernel;
        MultiHeadAttention<float, Space> mha(Space(), d, options);
        CAPTURE(kernel_name(kernel), keep, grad);
        const AllocationCounter counter;
        mha.forward(Space(), RunContext{grad, 1, grad}, x, y);
        if (grad) mha.backward(Space(), {}, x, y, dx);
        Space().fence();
        CHECK((counter.allocated_bytes() >= square_bytes) == keep);
        CHECK((mha.saved_bytes(batch, seq) >= std::int64_t(square_bytes)) == keep);
        if (!grad) {
          CHECK_THROWS_WITH(mha.backward(Space(), {}, x, y, dx),
                            ContainsText("kformer::MultiHeadAttention::backward") &&
                                ContainsText("kept nothing for a backward"));
        }
        if (!keep) {
          CHECK_THROWS_WITH(mha.probabilities(),
                            ContainsText("kformer::MultiHeadAttention::probabilities") &&
                                ContainsText("did not keep them"));
        }
      }
}

TEMPLATE_LIST_TEST_CASE("Attention's peak memory grows linearly with the sequence",
                        "[layers][attention][allocations]", backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  // The peak of the live Kokkos allocations over a pass (its inputs included), at seq and 2 seq:
  // a (B, H, S, S) buffer would quadruple it; the fused kernels' buffers double.
  const int batch = 1, d = 32, heads = 4;
  const auto peak_of = [&](AttentionKernel kernel, int seq, bool train) {
    Space().fence();
    backends::MemoryTracker::reset_peak();
    const std::int64_t before = backends::MemoryTracker::live();
    {
      MultiHeadAttentionOptions options{heads, 0.1, 9};
      options.keep_probabilities = false;
      options.kernel = kernel;
      MultiHeadAttention<float, Space> mha(Space(), d, options);
      Tensor3<float, M> x("x", batch, seq, d), y("y", batch, seq, d), dx("dx", batch, seq, d);
      Kokkos::deep_copy(x, 0.5f);
      mha.forward(Space(), RunContext{train, 1, train}, x, y);
      if (train) mha.backward(Space(), {}, x, y, dx);
      Space().fence();
    }
    return double(backends::MemoryTracker::peak() - before);
  };
  for (const AttentionKernel kernel : kKernels) {
    CAPTURE(kernel_name(kernel));
    const double train_1024 = peak_of(kernel, 1024, true), train_2048 = peak_of(kernel, 2048, true);
    const double forward_2048 = peak_of(kernel, 2048, false),
                 forward_4096 = peak_of(kernel, 4096, false);
    CAPTURE(train_1024, train_2048, forward_2048, forward_4096);
    CHECK(train_2048 / train_1024 <= 2.2);
    CHECK(forward_4096 / forward_2048 <= 2.2);
    // And it is small: at 4096 steps a (1, 4, S, S) float buffer alone would be 256 MiB.
    CHECK(forward_4096 < 16.0 * 1024 * 1024);
  }
}

TEMPLATE_LIST_TEST_CASE(
    "Attention refuses a sequence whose kept probabilities cannot fit, before allocating",
    "[layers][attention][errors]", backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  // seq = 2^21: the input is 32 MiB, one (1, 1, seq, seq) float probability matrix 16 TiB.
  const int seq = 1 << 21, d = 4;
  Tensor3<float, M> x("x", 1, seq, d), y("y", 1, seq, d);
  Kokkos::deep_copy(y, 3.0f);
  for (const AttentionKernel kernel : kKernels) {
    MultiHeadAttentionOptions options{1, 0.1, 3};
    options.kernel = kernel;
    MultiHeadAttention<float, Space> mha(Space(), d, options);
    for (const bool training : {false, true}) {
      CAPTURE(kernel_name(kernel), training);
      CHECK_THROWS_WITH(mha.forward(Space(), RunContext{training, 0}, x, y),
                        ContainsText("kformer::MultiHeadAttention::forward") &&
                            ContainsText("batch 1, seq 2097152 and 1 heads need 16.0 TiB") &&
                            ContainsText("is available") &&
                            ContainsText("set_keep_probabilities(false)"));
    }
    CHECK(mha.probabilities().size() == 0);
  }
  const auto yh = host_values(y);
  CHECK(std::all_of(yh.begin(), yh.end(), [](double v) { return v == 3.0; }));
}
