// Large outputs written around the caches (backends/streaming_store.hpp): the helper at every
// alignment and length, and each encoding on tensors above kStreamingStoreBytes, where its CPU
// kernels take that path (GPU backends run the same checks on their own kernels).
#include "support/catch.hpp"

#include <cstdint>
#include <vector>

#include <Kokkos_Core.hpp>

#include <kformer/backends/spaces.hpp>
#include <kformer/backends/streaming_store.hpp>
#include <kformer/layers/encodings/learnable_positional_encoding.hpp>
#include <kformer/layers/encodings/positional_encoding.hpp>
#include <kformer/layers/encodings/value_encoding.hpp>

#include "support/reference_encodings.hpp"
#include "support/test_support.hpp"

using namespace kformer;
using namespace kformer::testing;

namespace {

// value(k) = slope k + intercept, counting its calls. A functor with KOKKOS_INLINE_FUNCTION, since
// store_run is a host-and-device function (nvcc rejects a host lambda there).
template <class T>
struct CountedValues {
  int* calls;
  T slope, intercept;
  KOKKOS_INLINE_FUNCTION T operator()(const std::int64_t k) const {
    ++*calls;
    return slope * T(k) + intercept;
  }
};

// A run of n elements `offset` elements past a 64-byte boundary, with guard values on both sides.
template <class T>
struct GuardedRun {
  static constexpr int kGuard = 64;
  std::vector<T> buffer;
  T* out;
  int n;
  GuardedRun(const int n_, const int offset) : buffer(n_ + 3 * kGuard, T(-7)), n(n_) {
    const auto address = reinterpret_cast<std::uintptr_t>(buffer.data() + kGuard);
    out = buffer.data() + kGuard + (64 - address % 64) % 64 / sizeof(T) + offset;
  }
  // Whether the run holds slope k + intercept and the guards are untouched.
  bool holds(const T slope, const T intercept) const {
    bool ok = true;
    for (int k = 0; k < n; ++k)
      ok = ok && out[k] == slope * T(k) + intercept;
    for (const T* p = buffer.data(); p < out; ++p)
      ok = ok && *p == T(-7);
    for (const T* p = out + n; p < buffer.data() + buffer.size(); ++p)
      ok = ok && *p == T(-7);
    return ok;
  }
};

const int kLengths[] = {0, 1, 7, 8, 15, 16, 17, 31, 33, 100, 1000, 4099};

template <class T>
void check_store_run_everywhere() {
  for (const bool streaming : {false, true})
    for (int offset = 0; offset < 17; ++offset)
      for (const int n : kLengths) {
        CAPTURE(streaming, offset, n);
        GuardedRun<T> run(n, offset);
        int calls = 0;
        backends::store_run(run.out, n, streaming, CountedValues<T>{&calls, T(0.5), T(1)});
        backends::streaming_fence();
        CHECK(calls == n);
        CHECK(run.holds(T(0.5), T(1)));
      }
}

// N runs at the same offset within a line (written interleaved), and with the last at another
// offset (one after the other).
template <int N, class T>
void check_store_runs_everywhere() {
  for (const bool streaming : {false, true})
    for (int offset = 0; offset < 17; ++offset)
      for (const int last_offset : {offset, (offset + 5) % 17})
        for (const int n : kLengths) {
          CAPTURE(N, streaming, offset, last_offset, n);
          std::vector<GuardedRun<T>> runs;
          for (int i = 0; i < N; ++i)
            runs.emplace_back(n, i + 1 < N ? offset : last_offset);
          int calls[N] = {};
          T* out[N];
          CountedValues<T> values[N];
          for (int i = 0; i < N; ++i) {
            out[i] = runs[i].out;
            values[i] = CountedValues<T>{&calls[i], T(0.5) - T(i), T(1 + 2 * i)};
          }
          backends::store_runs(out, values, n, streaming);
          backends::streaming_fence();
          for (int i = 0; i < N; ++i) {
            CHECK(calls[i] == n);
            CHECK(runs[i].holds(T(0.5) - T(i), T(1 + 2 * i)));
          }
        }
}

// An odd dim, so that the kernels' runs start and end inside cache lines; seq a multiple of 16, so
// that the batch elements' runs sit at the same offset within a line and are written interleaved
// (store_runs: four, then one); a size above the streaming threshold.
constexpr int kBatch = 5, kSeq = 4208, kDim = 509;

}  // namespace

TEST_CASE("store_run writes each value once at any alignment, streaming or not",
          "[backends][streaming]") {
  check_store_run_everywhere<float>();
  check_store_run_everywhere<double>();
}

TEST_CASE("store_runs writes every run at any alignment, streaming or not",
          "[backends][streaming]") {
  check_store_runs_everywhere<2, float>();
  check_store_runs_everywhere<4, float>();
  check_store_runs_everywhere<2, double>();
  check_store_runs_everywhere<4, double>();
}

TEMPLATE_LIST_TEST_CASE("encodings write large outputs correctly", "[encoding][streaming]",
                        backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  const std::size_t n = std::size_t(kBatch) * kSeq * kDim;
  REQUIRE(n * sizeof(float) >= backends::kStreamingStoreBytes);
  const auto x_values = random_values(n, 41);
  const auto x = device_from<float, Space>(x_values, kBatch, kSeq, kDim);
  Tensor3<float, M> y("y", kBatch, kSeq, kDim);
  std::vector<double> xf(x_values.begin(), x_values.end());  // x as the kernels see it
  for (auto& v : xf)
    v = static_cast<float>(v);

  SECTION("fixed positional encoding, y = 2 x + PE") {
    PositionalEncodingOptions options;
    options.input_scale = 2.0;
    const PositionalEncoding<float, Space> pe(kDim, options);
    pe.forward(Space(), {}, x, y);
    const auto table = ReferenceSinusoid{kDim}.matrix(kSeq);
    std::vector<double> expected(n);
    for (std::size_t i = 0; i < n; ++i)
      expected[i] = 2 * xf[i] + table[i % table.size()];
    CHECK(max_abs_diff(host_values(y), expected) <= 3e-6);
  }

  SECTION("learnable positional encoding, forward and backward") {
    LearnablePositionalEncodingOptions options;
    options.input_scale = 2.0;
    LearnablePositionalEncoding<float, Space> layer(Space(), kSeq, kDim, options);
    const auto table = host_values(layer.pe().value);
    layer.forward(Space(), {}, x, y);
    std::vector<double> expected(n);
    for (std::size_t i = 0; i < n; ++i)
      expected[i] = 2 * xf[i] + table[i % table.size()];
    CHECK(max_abs_diff(host_values(y), expected) <= 5e-7);

    layer.zero_grad(Space());
    Kokkos::deep_copy(y, 7.0f);  // dx: every element must be written
    layer.backward(Space(), {}, x, x, y);
    for (std::size_t i = 0; i < n; ++i)
      expected[i] = 2 * xf[i];
    CHECK(max_abs_diff(host_values(y), expected) <= 5e-7);
    std::vector<double> grad(table.size(), 0.0);
    for (std::size_t i = 0; i < n; ++i)
      grad[i % grad.size()] += xf[i];
    CHECK(max_abs_diff(host_values(layer.pe().grad), grad) <= 1e-6);

    // In place: dx is dy itself, scaled.
    layer.zero_grad(Space());
    Kokkos::deep_copy(y, x);
    layer.backward(Space(), {}, x, y, y);
    for (std::size_t i = 0; i < n; ++i)
      expected[i] = 2 * xf[i];
    CHECK(max_abs_diff(host_values(y), expected) <= 5e-7);
    CHECK(max_abs_diff(host_values(layer.pe().grad), grad) <= 1e-6);
  }

  SECTION("value encoding, y = x + enc(values)") {
    const ValueEncoding<float, Space> enc(Space(), kDim);
    auto values = random_values(std::size_t(kBatch) * kSeq, 42, 0.0, 1000.0);
    values[5] = 1e9;  // an angle past math::kSinCosLimit: the library's sin and cos
    enc.forward(Space(), {}, device_from<float, Space>(values, kBatch, kSeq), x, y);
    const ReferenceSinusoid ref{kDim};
    std::vector<double> expected(n);
    for (std::size_t i = 0; i < n; ++i)
      expected[i] = xf[i] + ref(static_cast<float>(values[i / kDim]), static_cast<int>(i % kDim));
    CHECK(max_abs_diff(host_values(y), expected) <= 3e-6);
  }
}
