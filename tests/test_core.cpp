// core/: error messages, the counter-based generator, atomic file output, PNG output, the
// vectorisable sin/cos (of an angle, and of a product v w).
#include "support/catch.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <set>
#include <type_traits>
#include <utility>

#include <Kokkos_Core.hpp>

#include <kformer/core/error.hpp>
#include <kformer/core/file_io.hpp>
#include <kformer/core/math.hpp>
#include <kformer/core/png.hpp>
#include <kformer/core/random.hpp>
#include <kformer/core/tensor.hpp>
#include <kformer/core/view_adapters.hpp>

#include "support/test_support.hpp"

using namespace kformer;
using namespace kformer::testing;

TEST_CASE("check_shape names the argument and both shapes", "[core][errors]") {
  Kokkos::View<float***, Kokkos::LayoutRight, Kokkos::HostSpace> v("v", 2, 5, 7);
  CHECK_NOTHROW(check_shape("kformer::X::f", "x", v, {2, -1, 7}));
  CHECK_THROWS_AS(check_shape("kformer::X::f", "x", v, {2, -1, 8}), Error);
  CHECK_THROWS_WITH(check_shape("kformer::X::f", "x", v, {-1, -1, 8}),
                    "kformer::X::f: x has shape (2, 5, 7), expected (*, *, 8)");
}

TEST_CASE("Philox4x32-10 reproduces the Random123 known-answer vectors", "[core][random]") {
  struct Kat {
    std::uint32_t ctr[4], key[2], out[4];
  };
  const Kat kats[] = {{{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
                      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
                       {0xffffffff, 0xffffffff},
                       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
                      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
                       {0xa4093822, 0x299f31d0},
                       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}}};
  for (const auto& kat : kats) {
    const Philox4x32 rng((std::uint64_t(kat.key[1]) << 32) | kat.key[0]);
    std::uint32_t c[4] = {kat.ctr[0], kat.ctr[1], kat.ctr[2], kat.ctr[3]};
    rng(c);
    for (int i = 0; i < 4; ++i)
      CHECK(c[i] == kat.out[i]);
  }
}

TEST_CASE("derive_seed gives distinct child seeds", "[core][random]") {
  std::set<std::uint64_t> seeds;
  for (const char* name : {"weight", "bias", "pe", "layers.0.weight", "layers.1.weight"})
    for (std::uint64_t s : {0ull, 1ull, 42ull})
      seeds.insert(derive_seed(s, name));
  CHECK(seeds.size() == 15);
}

namespace {
std::string read_file(const std::string& path) {
  std::ifstream is(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(is), {});
}
}  // namespace

TEST_CASE("write_file_atomic replaces whole files and leaves them alone on failure", "[core][io]") {
  char dir_template[] = "/tmp/kformer-test-XXXXXX";
  const std::string dir = mkdtemp(dir_template);
  const std::string path = dir + "/out.txt";
  write_file_atomic(path, "first");
  CHECK(read_file(path) == "first");
  write_file_atomic(path, "second version");
  CHECK(read_file(path) == "second version");
  CHECK_THROWS_WITH(write_file_atomic(dir + "/missing/out.txt", "x"),
                    ContainsText("kformer::write_file_atomic") && ContainsText("missing/out.txt"));
  if (geteuid() != 0) {  // root writes into read-only directories
    chmod(dir.c_str(), 0500);
    CHECK_THROWS_AS(write_file_atomic(path, "third"), Error);
    chmod(dir.c_str(), 0700);
    CHECK(read_file(path) == "second version");
  }
  std::remove(path.c_str());
  rmdir(dir.c_str());
}

TEST_CASE("require_regular_file refuses what is not a file without opening it", "[core][io]") {
  char dir_template[] = "/tmp/kformer-test-XXXXXX";
  const std::string dir = mkdtemp(dir_template);
  const std::string fifo = dir + "/fifo", file = dir + "/file";
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  write_file_atomic(file, "x");
  // Opening a FIFO with no writer would wait forever; the check only looks at it.
  CHECK_THROWS_WITH(require_regular_file(fifo, "where"),
                    ContainsText("where: cannot read '" + fifo + "': it is a FIFO (a pipe)"));
  CHECK_THROWS_WITH(require_regular_file(dir, "where"), ContainsText("it is a directory"));
  CHECK_THROWS_WITH(require_regular_file(dir + "/nope", "where"),
                    ContainsText("No such file or directory"));
  CHECK_NOTHROW(require_regular_file(file, "where"));
  std::remove(fifo.c_str());
  std::remove(file.c_str());
  rmdir(dir.c_str());
}

TEST_CASE("write_heatmap_png writes a PNG of the matrix size", "[core][io]") {
  const std::string path = "/tmp/kformer-test-heatmap.png";
  write_heatmap_png(path, {-1.0, 0.0, 1.0, 0.5, -0.5, 0.25}, 2, 3, -1.0, 1.0, 4, 2);
  const std::string png = read_file(path);
  REQUIRE(png.size() > 33);
  CHECK(png.compare(0, 8, "\x89PNG\r\n\x1a\n") == 0);
  CHECK(png.compare(12, 4, "IHDR") == 0);
  const auto u32 = [&](int at) {
    return (std::uint32_t(std::uint8_t(png[at])) << 24) |
           (std::uint32_t(std::uint8_t(png[at + 1])) << 16) |
           (std::uint32_t(std::uint8_t(png[at + 2])) << 8) | std::uint8_t(png[at + 3]);
  };
  CHECK(u32(16) == 12);  // width: 3 columns x 4 pixels
  CHECK(u32(20) == 4);   // height: 2 rows x 2 pixels
  std::remove(path.c_str());
  CHECK_THROWS_WITH(write_heatmap_png(path, {1.0, 2.0}, 2, 3, 0, 1),
                    ContainsText("expected 6 values"));
}

TEST_CASE("math::exp_nonpositive and math::erf for float are within their documented errors",
          "[core][math]") {
  std::mt19937_64 gen(3);
  std::uniform_real_distribution<float> exp_args(-87.0f, 0.0f), erf_args(-6.0f, 6.0f);
  // x <= 0 is the domain; it stays correct up to 88.
  std::vector<float> xs = {0.0f, -0.0f, -87.0f, 88.0f, 1e-30f, -1e-30f, 0.6f, -0.6f, 50.0f};
  for (int i = 0; i < 200000; ++i)
    xs.push_back(exp_args(gen));
  double worst_exp = 0, worst_exp_at = 0;
  for (const float x : xs) {
    const double ref = std::exp(double(x));
    const double error = std::abs(double(math::exp_nonpositive(x)) - ref) / ref;
    if (error > worst_exp) worst_exp = error, worst_exp_at = x;
  }
  // Below -87 (a masked score minus the row's maximum, say): tiny, positive and finite.
  const float inf = std::numeric_limits<float>::infinity();
  for (const float x : {-88.0f, -1e9f, -1e30f, -inf}) {
    CAPTURE(x);
    CHECK(math::exp_nonpositive(x) > 0.0f);
    CHECK(math::exp_nonpositive(x) < 2e-38f);
  }
  CHECK(std::isnan(math::exp_nonpositive(std::numeric_limits<float>::quiet_NaN())));
  for (int i = 0; i < 200000; ++i)
    xs.push_back(erf_args(gen));
  double worst_erf = 0, worst_erf_at = 0;
  for (const float x : xs) {
    const double ref = std::erf(double(x));
    if (ref == 0) {
      CHECK(math::erf(x) == 0.0f);
      continue;
    }
    const double error = std::abs(double(math::erf(x)) - ref) / std::abs(ref);
    if (error > worst_erf) worst_erf = error, worst_erf_at = x;
  }
  CAPTURE(worst_exp_at, worst_erf_at);
  CHECK(worst_exp <= 2e-7);
  CHECK(worst_erf <= 4e-7);
  // Past the clamp of the argument and of the result.
  CHECK(math::erf(inf) == 1.0f);
  CHECK(math::erf(-inf) == -1.0f);
  CHECK(std::isnan(math::erf(std::numeric_limits<float>::quiet_NaN())));
  float largest = 0.0f, smallest = 0.0f;  // where the rational form's rounding passes 1
  for (float x = 3.0f; x < 4.0f; x += 1e-5f) {
    largest = std::max(largest, math::erf(x));
    smallest = std::min(smallest, math::erf(-x));
  }
  CHECK(largest == 1.0f);
  CHECK(smallest == -1.0f);
}

TEST_CASE("math::sin_cos is within 1e-7 of sin and cos up to its limit", "[core][math]") {
  std::vector<double> angles = {0.0, -0.0, math::kSinCosLimit, -math::kSinCosLimit};
  for (int q = -64; q <= 64; ++q) {  // around the quadrant boundaries k pi/4
    const double a = q * M_PI / 4;
    angles.insert(angles.end(), {a, std::nextafter(a, -1e300), std::nextafter(a, 1e300)});
  }
  std::mt19937_64 gen(7);
  for (double range = 1; range <= math::kSinCosLimit; range *= 8) {
    std::uniform_real_distribution<double> dist(-range, range);
    for (int i = 0; i < 20000; ++i)
      angles.push_back(dist(gen));
  }
  double worst = 0, worst_angle = 0;
  for (const double a : angles) {
    float s, c;
    math::sin_cos(a, s, c);
    const double error = std::max(std::abs(s - std::sin(a)), std::abs(c - std::cos(a)));
    if (error > worst) worst = error, worst_angle = a;
  }
  CAPTURE(worst_angle);
  CHECK(worst <= 1e-7);
}

TEST_CASE("math::sin_cos_product is within 1.2e-7 of sin and cos of v w up to its limit",
          "[core][math]") {
  // Products v w as the value encoding forms them: w from 1 down to 1e-4 (base 10000), v float,
  // angles up to the limit, and angles next to the quadrant boundaries k pi/4.
  struct Product {
    float v;
    double w;
  };
  std::vector<Product> products;
  std::mt19937_64 gen(11);
  std::uniform_real_distribution<double> unit(-1.0, 1.0), log_w(std::log(1e-4), 0.0);
  for (double range = 1; range <= math::kSinCosProductLimit; range *= 4)
    for (int i = 0; i < 20000; ++i) {
      const double w = std::exp(log_w(gen));
      products.push_back({static_cast<float>(unit(gen) * range / w), w});
    }
  for (int q = -64; q <= 64; ++q)
    for (const double w : {1.0, 0.0123}) {
      const float v = static_cast<float>(q * M_PI / 4 / w);
      products.insert(products.end(),
                      {{v, w}, {std::nextafter(v, -1e30f), w}, {std::nextafter(v, 1e30f), w}});
    }
  products.push_back({math::kSinCosProductLimit, 1.0});
  products.push_back({-math::kSinCosProductLimit, 1.0});
  double worst = 0, worst_angle = 0;
  for (const auto& p : products) {
    const float w_hi = static_cast<float>(p.w);
    const float w_lo = static_cast<float>(p.w - w_hi);
    float s, c;
    math::sin_cos_product(p.v, w_hi, w_lo, s, c);
    const long double angle = static_cast<long double>(p.v) * p.w;
    const double error =
        std::max(std::abs(double(s - std::sin(angle))), std::abs(double(c - std::cos(angle))));
    if (error > worst) worst = error, worst_angle = double(angle);
  }
  CAPTURE(worst_angle);
  CHECK(worst <= 1.2e-7);
}

TEST_CASE("math::sin_cos_small_product gives sin_cos_product's bits below its limit",
          "[core][math]") {
  std::mt19937_64 gen(12);
  std::uniform_real_distribution<double> unit(-1.0, 1.0), log_w(std::log(1e-4), 0.0);
  int differing = 0;
  for (int i = 0; i < 200000; ++i) {
    const double w = std::exp(log_w(gen));
    const float w_hi = static_cast<float>(w);
    const float w_lo = static_cast<float>(w - w_hi);
    float v = static_cast<float>(unit(gen) * math::kSinCosSmallProductLimit / w_hi);
    if (std::abs(v * w_hi) > math::kSinCosSmallProductLimit) v = std::nextafter(v, 0.0f);
    float s_small, c_small, s, c;
    math::sin_cos_small_product(v, w_hi, w_lo, s_small, c_small);
    math::sin_cos_product(v, w_hi, w_lo, s, c);
    if (s_small != s || c_small != c) ++differing;
  }
  CHECK(differing == 0);
}

TEST_CASE("Views of any layout: read in place where row-major, else an Error naming the layout",
          "[core][layouts]") {
  using Host = Kokkos::HostSpace;
  // A trajectory (steps, dim) and views of it.
  Kokkos::View<double**, Kokkos::LayoutRight, Host> trajectory("trajectory", 12, 3);
  for (int s = 0; s < 12; ++s)
    for (int d = 0; d < 3; ++d)
      trajectory(s, d) = 10 * s + d;
  // Rows 4..7: a subview (its own View type, which as_batch takes).
  const auto rows = Kokkos::subview(trajectory, std::make_pair(4, 8), Kokkos::ALL);
  const auto one = as_batch(rows);
  CHECK(one.data() == &trajectory(4, 0));
  CHECK(one.extent(0) == 1);
  CHECK(one(0, 2, 1) == 61);

  // Non-overlapping windows of 4 steps as a (3, 4, 3) batch, no copy, through LayoutStride.
  const Kokkos::LayoutStride windows_layout(3, 12, 4, 3, 3, 1);
  const Kokkos::View<double***, Kokkos::LayoutStride, Host> windows(trajectory.data(),
                                                                    windows_layout);
  const auto batch = as_tensor(windows, "sim", "windows");
  static_assert(std::is_same_v<decltype(batch), const Tensor3<double, Host>>);
  CHECK(batch.data() == trajectory.data());
  CHECK(batch(2, 1, 2) == trajectory(9, 2));

  // Overlapping windows (stride of one step): not a row-major tensor, an Error.
  const Kokkos::LayoutStride overlapping_layout(5, 3, 4, 3, 3, 1);
  const Kokkos::View<double***, Kokkos::LayoutStride, Host> overlapping(trajectory.data(),
                                                                        overlapping_layout);
  CHECK_THROWS_WITH(as_tensor(overlapping, "sim", "windows"),
                    "sim: windows is a LayoutStride View of shape (5, 4, 3) and strides (3, 3, 1), "
                    "which is not row-major dense memory; kformer reads it in place only then "
                    "(copy it into a LayoutRight View with Kokkos::deep_copy otherwise)");
  CHECK_THROWS_WITH(as_batch(Kokkos::subview(trajectory, Kokkos::ALL, std::make_pair(0, 2))),
                    "kformer::as_batch: x of shape (12, 2) has strides (3, 1), expected "
                    "row-major (2, 1)");

  // LayoutLeft: a Fortran x(dim, seq, batch) is kformer's (batch, seq, dim), the same memory.
  Kokkos::View<float***, Kokkos::LayoutLeft, Host> fortran("fortran", 3, 5, 2);
  fortran(2, 4, 1) = 7.0f;
  const auto x = as_tensor_from_column_major(fortran, "sim", "x");
  CHECK(x.extent(0) == 2);
  CHECK(x.extent(2) == 3);
  CHECK(x(1, 4, 2) == 7.0f);
  CHECK_THROWS_WITH(as_tensor(fortran, "sim", "x"), ContainsText("x is a LayoutLeft View of "
                                                                 "shape (3, 5, 2) and strides "
                                                                 "(1, 3, 15)"));
  // A LayoutLeft vector or (n, 1) matrix is row-major too.
  Kokkos::View<float**, Kokkos::LayoutLeft, Host> column("column", 4, 1);
  CHECK(as_tensor(column, "sim", "column").extent(0) == 4);
  CHECK_THROWS_WITH(as_tensor_from_column_major(trajectory, "sim", "trajectory"),
                    ContainsText("not column-major dense memory"));
}
