// The GEMM entry point against a naive host product, for every transpose combination, both
// scalar types and every backend; edge cases and errors. The same checks run on gemm_native, the
// Kokkos-native kernel that gemm falls back on in builds without Kokkos Kernels (HIP from Debian),
// so that it stays correct in the builds that do have them.
#include "support/catch.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include <Kokkos_Core.hpp>

#include <kformer/backends/for_each.hpp>
#include <kformer/backends/gemm.hpp>
#include <kformer/backends/spaces.hpp>
#include <kformer/layers/impl/attention/host_products.hpp>

#include "support/test_support.hpp"

using namespace kformer;
using namespace kformer::testing;
using backends::Op;

namespace {

// C = alpha op(A) op(B) + beta C on row-major host matrices, in double.
std::vector<double> naive_gemm(bool ta, bool tb, int m, int n, int k, double alpha,
                               const std::vector<double>& a, const std::vector<double>& b,
                               double beta, std::vector<double> c) {
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double s = 0;
      for (int l = 0; l < k; ++l)
        s += (ta ? a[l * m + i] : a[i * k + l]) * (tb ? b[j * k + l] : b[l * n + j]);
      c[i * n + j] = alpha * s + beta * c[i * n + j];
    }
  return c;
}

// The two entry points, as types for the test templates.
struct ViaGemm {
  template <class... Args>
  void operator()(const Args&... args) const {
    backends::gemm(args...);
  }
};
struct ViaNative {
  template <class... Args>
  void operator()(const Args&... args) const {
    backends::gemm_native(args...);
  }
};

template <class T, class Space, class Via = ViaGemm>
void check_products(double tolerance, int m = 37, int n = 29, int k = 53) {
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (double beta : {0.0, 0.5}) {
        CAPTURE(ta, tb, beta);
        const auto a = random_values(m * k, 1), b = random_values(k * n, 2),
                   c = random_values(m * n, 3);
        const auto A = ta ? device_from<T, Space>(a, k, m) : device_from<T, Space>(a, m, k);
        const auto B = tb ? device_from<T, Space>(b, n, k) : device_from<T, Space>(b, k, n);
        auto C = device_from<T, Space>(c, m, n);
        Via()(Space(), ta ? Op::T : Op::N, tb ? Op::T : Op::N, T(1.5), A, B, T(beta), C);
        CHECK(max_rel_diff(host_values(C), naive_gemm(ta, tb, m, n, k, 1.5, a, b, beta, c)) <=
              tolerance);
      }
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("gemm matches a naive product", "[backends][gemm]",
                        backends::EnabledSpaces) {
  check_products<double, TestType>(1e-14);
  check_products<float, TestType>(1e-6);
}

TEMPLATE_LIST_TEST_CASE("gemm_native matches a naive product", "[backends][gemm][native]",
                        backends::EnabledSpaces) {
  check_products<double, TestType, ViaNative>(1e-14);
  check_products<float, TestType, ViaNative>(1e-6);
  // Several tiles in every direction, partial ones at the edges; a single element.
  check_products<double, TestType, ViaNative>(1e-14, 70, 65, 100);
  check_products<float, TestType, ViaNative>(1e-6, 1, 1, 1);
}

TEST_CASE("host GEMMs are cut into one block of rows or columns per thread", "[backends][gemm]") {
  using backends::impl::partition_host_gemm;
  const auto rows = partition_host_gemm(2, 2048, 64, 64);  // a (B*S, d) x (d, d) projection
  CHECK((rows.by_rows && rows.length == 1024 && rows.blocks == 2));
  const auto odd = partition_host_gemm(3, 1000, 64, 256);  // 334 rounded up to 16
  CHECK((odd.by_rows && odd.length == 336 && odd.blocks == 3));
  const auto cols = partition_host_gemm(2, 64, 256, 2048);  // a weight gradient
  CHECK((!cols.by_rows && cols.length == 128 && cols.blocks == 2));
  const auto many = partition_host_gemm(16, 192, 64, 2048);  // 12 blocks of 16 rows
  CHECK((many.by_rows && many.length == 16 && many.blocks == 12));
  const auto head = partition_host_gemm(2, 32, 4, 8192);  // TST's output layer, 2 MFLOP
  CHECK((head.by_rows && head.length == 16 && head.blocks == 2));
  // Not cut: one thread, under 1 MFLOP a thread, too narrow for a block each.
  CHECK(partition_host_gemm(1, 2048, 2048, 2048).blocks == 0);
  CHECK(partition_host_gemm(2, 128, 128, 8).blocks == 0);
  CHECK(partition_host_gemm(2, 128, 64, 60).blocks == 0);
  CHECK(partition_host_gemm(2, 16, 16, 100000).blocks == 0);
  CHECK(partition_host_gemm(16, 40, 20, 20000).blocks == 0);
}

TEMPLATE_LIST_TEST_CASE("gemm cut between threads matches a naive product", "[backends][gemm]",
                        backends::EnabledSpaces) {
  // Large enough to be cut on two threads, by rows and by columns, with a shorter last block.
  for (const auto& shape : {std::array<int, 3>{300, 70, 200}, {40, 301, 400}}) {
    const int m = shape[0], n = shape[1], k = shape[2];
    CAPTURE(m, n, k);
    if (backends::runs_on_host<TestType> && compat::concurrency(TestType()) >= 2)
      REQUIRE(
          backends::impl::partition_host_gemm(compat::concurrency(TestType()), m, n, k).blocks >=
          2);
    check_products<double, TestType>(1e-14, m, n, k);
    check_products<float, TestType>(1e-6, m, n, k);
  }
}

namespace {

template <class Space, class Via>
void check_beta_and_empty_k() {
  using M = MemorySpaceOf<Space>;
  const auto a = random_values(4 * 3, 1), b = random_values(3 * 5, 2);
  auto C = device_from<double, Space>(std::vector<double>(20, std::nan("")), 4, 5);
  Via()(Space(), Op::N, Op::N, 1.0, device_from<double, Space>(a, 4, 3),
        device_from<double, Space>(b, 3, 5), 0.0, C);
  CHECK(max_rel_diff(host_values(C), naive_gemm(false, false, 4, 5, 3, 1.0, a, b, 0.0,
                                                std::vector<double>(20, 0.0))) <= 1e-14);
  Tensor2<double, M> A0("A0", 4, 0), B0("B0", 0, 5);
  auto C2 = device_from<double, Space>(std::vector<double>(20, 2.0), 4, 5);
  Via()(Space(), Op::N, Op::N, 1.0, A0, B0, 0.25, C2);
  for (double v : host_values(C2))
    REQUIRE(v == 0.5);
  Via()(Space(), Op::N, Op::N, 1.0, A0, B0, 0.0, C2);
  for (double v : host_values(C2))
    REQUIRE(v == 0.0);
  Tensor2<double, M> E("E", 0, 3), F("F", 3, 5), G("G", 0, 5);
  Via()(Space(), Op::N, Op::N, 1.0, E, F, 0.0, G);  // empty output: nothing to do
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("gemm with beta = 0 ignores C, and k = 0 scales C", "[backends][gemm]",
                        backends::EnabledSpaces) {
  SECTION("gemm") {
    check_beta_and_empty_k<TestType, ViaGemm>();
  }
  SECTION("gemm_native") {
    check_beta_and_empty_k<TestType, ViaNative>();
  }
}

TEMPLATE_LIST_TEST_CASE("gemm reports mismatched shapes and aliasing", "[backends][gemm][errors]",
                        backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  Tensor2<float, M> A("A", 4, 3), B("B", 5, 6), C("C", 4, 6), C_bad("C_bad", 3, 6);
  CHECK_THROWS_WITH(
      backends::gemm(Space(), Op::N, Op::N, 1.0f, A, B, 0.0f, C),
      ContainsText("kformer::backends::gemm") &&
          ContainsText("inner dimensions differ: op(A) is (4, 3) from A (4, 3), op(B) is (5, 6)"));
  Tensor2<float, M> B_ok("B_ok", 3, 6);
  Kokkos::deep_copy(C_bad, 9.0f);
  CHECK_THROWS_WITH(backends::gemm(Space(), Op::N, Op::N, 1.0f, A, B_ok, 0.0f, C_bad),
                    ContainsText("C has shape (3, 6), expected (4, 6)"));
  for (double v : host_values(C_bad))
    REQUIRE(v == 9.0);
  Tensor2<float, M> S("S", 4, 4);
  CHECK_THROWS_WITH(backends::gemm(Space(), Op::N, Op::N, 1.0f, S, S, 0.0f, S),
                    ContainsText("overlap"));
}

namespace {

// Turns reproducible mode on for a scope.
struct ReproducibleGemm {
  ReproducibleGemm() { backends::set_reproducible_gemm(true); }
  ~ReproducibleGemm() { backends::set_reproducible_gemm(false); }
};

}  // namespace

TEMPLATE_LIST_TEST_CASE("gemm in reproducible mode matches a naive product", "[backends][gemm]",
                        backends::EnabledSpaces) {
  const ReproducibleGemm mode;
  check_products<double, TestType>(1e-14);
  check_products<float, TestType>(1e-6);
  // Several row and column tiles, partial ones at the edges.
  check_products<double, TestType>(1e-14, 70, 300, 40);
  check_products<float, TestType>(1e-6, 70, 300, 40);
}

TEST_CASE("gemm in reproducible mode gives the same bits on every host backend",
          "[backends][gemm]") {
  const ReproducibleGemm mode;
  const int m = 100, n = 300, k = 257;
  const auto a = random_values(m * k, 4), b = random_values(k * n, 5);
  std::vector<std::vector<double>> results;
  backends::for_each_space([&](auto space) {
    using Space = decltype(space);
    if constexpr (Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemorySpaceOf<Space>>::accessible) {
      auto C = device_from<float, Space>(std::vector<double>(m * n, 0.0), m, n);
      backends::gemm(Space(), Op::N, Op::T, 1.0f, device_from<float, Space>(a, m, k),
                     device_from<float, Space>(b, n, k), 0.0f, C);
      results.push_back(host_values(C));
    }
  });
  for (std::size_t i = 1; i < results.size(); ++i)
    CHECK(results[i] == results[0]);
}

#if defined(KOKKOSKERNELS_ENABLE_TPL_BLAS)
namespace {

// The packed (rows, cols) matrix `packed` at leading dimension ld, the padding set to `pad`.
template <class T>
std::vector<T> with_leading_dim(const std::vector<double>& packed, int rows, int cols, int ld,
                                T pad) {
  std::vector<T> out(std::size_t(rows) * ld, pad);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c)
      out[std::size_t(r) * ld + c] = static_cast<T>(packed[std::size_t(r) * cols + c]);
  return out;
}

// Row r's first `cols` entries of a matrix at leading dimension ld, packed, in double.
template <class T>
std::vector<double> packed_from(const std::vector<T>& m, int rows, int cols, int ld) {
  std::vector<double> out(std::size_t(rows) * cols);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c)
      out[std::size_t(r) * cols + c] = m[std::size_t(r) * ld + c];
  return out;
}

// Whether every padding entry of a matrix at leading dimension ld still holds `pad`.
template <class T>
bool padding_untouched(const std::vector<T>& m, int rows, int cols, int ld, T pad) {
  for (int r = 0; r < rows; ++r)
    for (int c = cols; c < ld; ++c)
      if (!(m[std::size_t(r) * ld + c] == pad)) return false;
  return true;
}

// The three products of fused CPU attention (nt, nn, tn) against naive_gemm, at head widths with
// loops of their own (8, 16, 32) and one that goes to the BLAS (4). Operands sit in wider rows
// whose padding is NaN: a product that reads past its rows gives NaN. Row and column counts
// cover the loops' whole blocks (64 columns, or 32 from 1024 columns on, 16 rows or columns, 8,
// 6, 4) and their remainders.
// `tolerance` holds for sums of up to 128 products; rounding errors grow as the square root of the
// number of terms beyond.
template <class T>
void check_head_products(double tolerance) {
  const T nan = std::numeric_limits<T>::quiet_NaN(), pad = T(-7);
  const auto tolerance_for = [=](const int terms) {
    return tolerance * std::max(1.0, std::sqrt(terms / 128.0));
  };
  for (const int dh : {4, 8, 16, 32})
    for (const auto& [m, n] :
         {std::array<int, 2>{64, 64}, {37, 45}, {128, 19}, {21, 83}, {7, 1027}}) {
      CAPTURE(dh, m, n);
      const int ld = dh + 5;  // qkv-like operands: rows of more than one head
      {                       // nt: C (m, n) = 0.5 A (m, dh) B (n, dh)^T
        const auto a = random_values(std::size_t(m) * dh, 1),
                   b = random_values(std::size_t(n) * dh, 2);
        const auto A = with_leading_dim<T>(a, m, dh, ld, nan);
        const auto B = with_leading_dim<T>(b, n, dh, ld, nan);
        auto C = with_leading_dim<T>(std::vector<double>(std::size_t(m) * n), m, n, n + 3, pad);
        impl::head::product_nt(dh, m, n, T(0.5), A.data(), ld, B.data(), ld, C.data(), n + 3);
        CHECK(max_rel_diff(packed_from(C, m, n, n + 3),
                           naive_gemm(false, true, m, n, dh, 0.5, a, b, 0.0,
                                      std::vector<double>(std::size_t(m) * n))) <= tolerance);
        CHECK(padding_untouched(C, m, n, n + 3, pad));
      }
      {  // nn: C (m, dh) = A (m, n) B (n, dh)
        const auto a = random_values(std::size_t(m) * n, 3),
                   b = random_values(std::size_t(n) * dh, 4);
        const auto A = with_leading_dim<T>(a, m, n, n + 2, nan);
        const auto B = with_leading_dim<T>(b, n, dh, ld, nan);
        auto C = with_leading_dim<T>(std::vector<double>(std::size_t(m) * dh), m, dh, ld, pad);
        impl::head::product_nn(dh, m, n, A.data(), n + 2, B.data(), ld, C.data(), ld);
        CHECK(max_rel_diff(packed_from(C, m, dh, ld),
                           naive_gemm(false, false, m, dh, n, 1.0, a, b, 0.0,
                                      std::vector<double>(std::size_t(m) * dh))) <=
              tolerance_for(n));
        CHECK(padding_untouched(C, m, dh, ld, pad));
      }
      for (const double beta : {0.0, 1.0}) {  // tn: C (n, dh) = beta C + A (m, n)^T B (m, dh)
        CAPTURE(beta);
        const auto a = random_values(std::size_t(m) * n, 5),
                   b = random_values(std::size_t(m) * dh, 6),
                   c = random_values(std::size_t(n) * dh, 7);
        const auto A = with_leading_dim<T>(a, m, n, n + 2, nan);
        const auto B = with_leading_dim<T>(b, m, dh, ld, nan);
        const auto C_before = with_leading_dim<T>(c, n, dh, ld, pad);
        auto C = C_before;
        impl::head::product_tn(dh, m, n, A.data(), n + 2, B.data(), ld, T(beta), C.data(), ld);
        CHECK(max_rel_diff(packed_from(C, n, dh, ld),
                           naive_gemm(true, false, n, dh, m, 1.0, a, b, beta,
                                      packed_from(C_before, n, dh, ld))) <= tolerance_for(m));
        CHECK(padding_untouched(C, n, dh, ld, pad));
      }
    }
}

}  // namespace

TEST_CASE("The attention head products match a naive product", "[backends][gemm][attention]") {
  check_head_products<float>(1e-6);
  check_head_products<double>(1e-14);
}
#endif
