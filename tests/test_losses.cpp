// losses/: masked MSE, MSE and cross-entropy against PyTorch 1.13 goldens
// (tests/golden/make_training_goldens.py) and finite differences, masks and padding, the metrics
// against closed forms, errors, determinism and allocation-free steady state.
#include "support/catch.hpp"

#include <cmath>
#include <limits>

#include <Kokkos_Core.hpp>

#include <kformer/backends/spaces.hpp>
#include <kformer/losses/losses.hpp>

#include "support/allocation_counter.hpp"
#include "support/golden.hpp"
#include "support/test_support.hpp"

using namespace kformer;
using namespace kformer::testing;

namespace {

const Golden& goldens() {
  static const Golden g(KFORMER_GOLDEN_DIR "/training.safetensors");
  return g;
}

template <class Space>
using Mask3 = Kokkos::View<std::uint8_t***, Kokkos::LayoutRight, MemorySpaceOf<Space>>;
template <class Space>
using Labels = Tensor1<std::int32_t, MemorySpaceOf<Space>>;

template <class Space>
Labels<Space> labels_from(const std::vector<double>& values) {
  return device_from<std::int32_t, Space>(values, values.size());
}

// pred - target = diff with target = 0.5: simple closed forms.
std::vector<double> shifted(const std::vector<double>& diff) {
  std::vector<double> pred(diff);
  for (auto& p : pred)
    p += 0.5;
  return pred;
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("Masked MSE, MSE and cross-entropy match PyTorch", "[losses][parity]",
                        backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  Losses<float, Space> losses;

  SECTION("masked MSE over masked, observed elements") {
    const auto& pred = goldens().tensor("masked_mse.pred");
    const int b = pred.shape[0], s = pred.shape[1], f = pred.shape[2];
    Tensor3<float, M> d_pred("d_pred", b, s, f);
    Kokkos::deep_copy(d_pred, 7.0f);  // every element must be written
    const auto result = losses.masked_mse(
        Space(), device_from<float, Space>(pred.values, b, s, f),
        device_from<float, Space>(goldens().tensor("masked_mse.target").values, b, s, f),
        device_from<std::uint8_t, Space>(goldens().tensor("masked_mse.mask").values, b, s, f),
        d_pred);
    CHECK(result.count == goldens().tensor("masked_mse.count").values[0]);
    CHECK(result.loss == Approx(goldens().tensor("masked_mse.loss").values[0]).epsilon(1e-6));
    CHECK(max_rel_diff(host_values(d_pred), goldens().tensor("masked_mse.d_pred").values) <= 1e-6);
  }

  SECTION("MSE") {
    const auto& pred = goldens().tensor("mse.pred");
    const int b = pred.shape[0], n = pred.shape[1];
    Tensor2<float, M> d_pred("d_pred", b, n);
    const double loss =
        losses.mse(Space(), device_from<float, Space>(pred.values, b, n),
                   device_from<float, Space>(goldens().tensor("mse.target").values, b, n), d_pred);
    CHECK(loss == Approx(goldens().tensor("mse.loss").values[0]).epsilon(1e-6));
    CHECK(max_rel_diff(host_values(d_pred), goldens().tensor("mse.d_pred").values) <= 1e-6);
  }

  SECTION("cross-entropy, including logits near 1000 that overflow a naive softmax") {
    for (const std::string c : {"cross_entropy", "cross_entropy_large"}) {
      CAPTURE(c);
      const auto& logits = goldens().tensor(c + ".logits");
      const int b = logits.shape[0], classes = logits.shape[1];
      Tensor2<float, M> d_logits("d_logits", b, classes);
      const double loss = losses.cross_entropy(
          Space(), device_from<float, Space>(logits.values, b, classes),
          labels_from<Space>(goldens().tensor(c + ".labels").values), d_logits);
      CHECK(std::isfinite(loss));
      CHECK(loss == Approx(goldens().tensor(c + ".loss").values[0]).epsilon(1e-6));
      CHECK(max_rel_diff(host_values(d_logits), goldens().tensor(c + ".d_logits").values) <= 1e-6);
    }
  }
}

TEMPLATE_LIST_TEST_CASE("Loss gradients match finite differences in double", "[losses][gradcheck]",
                        backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  Losses<double, Space> losses;
  const Tensor3<double, M> no_grad3;
  const Tensor2<double, M> no_grad2;

  SECTION("masked MSE: unmasked and padded elements get exactly zero") {
    const int b = 2, s = 5, f = 3;
    const auto target_values = random_values(b * s * f, 11);
    std::vector<double> mask_values(b * s * f);
    const auto u = random_values(b * s * f, 12, 0.0, 1.0);
    for (int i = 0; i < b * s * f; ++i)
      mask_values[i] = u[i] < 0.4 && (i / (s * f) == 0 || (i / f) % s < 3);  // row 1: length 3
    const auto target = device_from<double, Space>(target_values, b, s, f);
    const auto mask = device_from<std::uint8_t, Space>(mask_values, b, s, f);
    const auto loss = [&](const std::vector<double>& p) {
      return losses
          .masked_mse(Space(), device_from<double, Space>(p, b, s, f), target, mask, no_grad3)
          .loss;
    };
    const auto pred = random_values(b * s * f, 13);
    Tensor3<double, M> d_pred("d_pred", b, s, f);
    losses.masked_mse(Space(), device_from<double, Space>(pred, b, s, f), target, mask, d_pred);
    const auto analytic = host_values(d_pred);
    CHECK(max_rel_diff(analytic, numeric_gradient(loss, pred)) <= 1e-7);
    for (int i = 0; i < b * s * f; ++i)
      if (!mask_values[i]) CHECK(analytic[i] == 0.0);
  }

  SECTION("MSE") {
    const int b = 4, n = 3;
    const auto target = device_from<double, Space>(random_values(b * n, 21), b, n);
    const auto loss = [&](const std::vector<double>& p) {
      return losses.mse(Space(), device_from<double, Space>(p, b, n), target, no_grad2);
    };
    const auto pred = random_values(b * n, 22);
    Tensor2<double, M> d_pred("d_pred", b, n);
    losses.mse(Space(), device_from<double, Space>(pred, b, n), target, d_pred);
    CHECK(max_rel_diff(host_values(d_pred), numeric_gradient(loss, pred)) <= 1e-7);
  }

  SECTION("cross-entropy") {
    const int b = 5, classes = 4;
    const auto labels = labels_from<Space>({3, 0, 1, 1, 2});
    const auto loss = [&](const std::vector<double>& z) {
      return losses.cross_entropy(Space(), device_from<double, Space>(z, b, classes), labels,
                                  no_grad2);
    };
    const auto logits = random_values(b * classes, 31, -3.0, 3.0);
    Tensor2<double, M> d_logits("d_logits", b, classes);
    losses.cross_entropy(Space(), device_from<double, Space>(logits, b, classes), labels, d_logits);
    CHECK(max_rel_diff(host_values(d_logits), numeric_gradient(loss, logits)) <= 1e-7);
  }
}

TEMPLATE_LIST_TEST_CASE("Only masked elements count: unmasked targets, NaN and an empty mask",
                        "[losses][masks]", backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  Losses<float, Space> losses;
  const int b = 3, s = 6, f = 2, n = b * s * f;
  const auto pred = device_from<float, Space>(random_values(n, 41), b, s, f);
  const auto target_values = random_values(n, 42);
  std::vector<double> mask_values(n);
  for (int i = 0; i < n; ++i)
    mask_values[i] = i % 3 == 0;
  const auto mask = device_from<std::uint8_t, Space>(mask_values, b, s, f);

  Tensor3<float, M> d_pred("d_pred", b, s, f);
  const auto reference = losses.masked_mse(
      Space(), pred, device_from<float, Space>(target_values, b, s, f), mask, d_pred);
  const auto reference_grad = host_values(d_pred);

  // Unmasked targets replaced by other values and by NaN (missing): the same bits.
  auto changed = target_values;
  for (int i = 0; i < n; ++i)
    if (!mask_values[i]) changed[i] = i % 2 ? std::numeric_limits<double>::quiet_NaN() : 1e3;
  const auto result =
      losses.masked_mse(Space(), pred, device_from<float, Space>(changed, b, s, f), mask, d_pred);
  CHECK(result.count == n / 3);
  CHECK(result.loss == reference.loss);
  CHECK(bitwise_equal(host_values(d_pred), reference_grad));

  // Nothing masked: loss 0, count 0, a zero gradient (not NaN).
  Kokkos::deep_copy(d_pred, 7.0f);
  const auto none = losses.masked_mse(
      Space(), pred, device_from<float, Space>(changed, b, s, f),
      device_from<std::uint8_t, Space>(std::vector<double>(n, 0.0), b, s, f), d_pred);
  CHECK(none.count == 0);
  CHECK(none.loss == 0.0);
  CHECK(host_values(d_pred) == std::vector<double>(n, 0.0));
}

TEMPLATE_LIST_TEST_CASE("Closed forms: losses and metrics", "[losses][metrics]",
                        backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  Losses<double, Space> losses;
  const Tensor2<double, M> no_grad;

  // Equal logits: softmax is uniform, the loss log C, the gradient (1/C - [j = y]) / B.
  {
    const int b = 2, classes = 4;
    Tensor2<double, M> d_logits("d_logits", b, classes);
    const double loss =
        losses.cross_entropy(Space(), device_from<double, Space>(std::vector<double>(8, 3.0), b, 4),
                             labels_from<Space>({1, 3}), d_logits);
    CHECK(loss == Approx(std::log(4.0)).epsilon(1e-15));
    CHECK(host_values(d_logits) ==
          std::vector<double>{0.125, -0.375, 0.125, 0.125, 0.125, 0.125, 0.125, -0.375});
  }

  // Accuracy: argmax with ties broken towards the lowest index.
  {
    const std::vector<double> logits = {0.1,  0.9, 0.3,   // argmax 1
                                        2.0,  2.0, 1.0,   // tie: 0
                                        -1.0, 5.0, 5.0,   // tie: 1
                                        0.0,  0.0, 0.0};  // all equal: 0
    const auto z = device_from<double, Space>(logits, 4, 3);
    CHECK(losses.correct_count(Space(), z, labels_from<Space>({1, 0, 1, 0})) == 4);
    CHECK(losses.correct_count(Space(), z, labels_from<Space>({1, 1, 2, 2})) == 1);
  }

  // Error sums and MSE from known differences.
  {
    const std::vector<double> diff = {1.0, -2.0, 3.0, -0.5, 0.0, 0.25};
    const auto pred = device_from<double, Space>(shifted(diff), 2, 3);
    const auto target = device_from<double, Space>(std::vector<double>(6, 0.5), 2, 3);
    const auto sums = losses.error_sums(Space(), pred, target);
    CHECK(sums.squared == Approx(1 + 4 + 9 + 0.25 + 0 + 0.0625).epsilon(1e-15));
    CHECK(sums.absolute == Approx(1 + 2 + 3 + 0.5 + 0 + 0.25).epsilon(1e-15));
    CHECK(sums.count == 6);
    CHECK(losses.mse(Space(), pred, target, no_grad) == Approx(14.3125 / 6).epsilon(1e-15));
  }
}

TEMPLATE_LIST_TEST_CASE("Bad arguments throw before anything is written", "[losses][errors]",
                        backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  Losses<float, Space> losses;
  const auto logits = device_from<float, Space>(random_values(12, 51), 4, 3);
  Tensor2<float, M> d_logits("d_logits", 4, 3);
  Kokkos::deep_copy(d_logits, 7.0f);

  CHECK_THROWS_WITH(
      losses.cross_entropy(Space(), logits, labels_from<Space>({0, 2, 3, 1}), d_logits),
      "kformer::Losses::cross_entropy: labels(2) = 3 is outside [0, 3)");
  CHECK_THROWS_WITH(
      losses.cross_entropy(Space(), logits, labels_from<Space>({0, -1, 9, 1}), d_logits),
      "kformer::Losses::cross_entropy: labels(1) = -1 is outside [0, 3)");
  CHECK_THROWS_WITH(losses.correct_count(Space(), logits, labels_from<Space>({0, 1, 2, 5})),
                    "kformer::Losses::correct_count: labels(3) = 5 is outside [0, 3)");
  CHECK_THROWS_WITH(losses.cross_entropy(Space(), logits, labels_from<Space>({0, 1, 2}), d_logits),
                    "kformer::Losses::cross_entropy: labels has shape (3), expected (4)");
  CHECK_THROWS_WITH(losses.cross_entropy(Space(), logits, labels_from<Space>({0, 1, 2, 0}),
                                         Tensor2<float, M>("wrong", 4, 2)),
                    "kformer::Losses::cross_entropy: d_logits has shape (4, 2), expected (4, 3)");
  CHECK_THROWS_WITH(losses.cross_entropy(Space(), Tensor2<float, M>("empty", 0, 3),
                                         labels_from<Space>({}), d_logits),
                    ContainsText("logits has shape (0, 3)"));
  CHECK(host_values(d_logits) == std::vector<double>(12, 7.0));

  Tensor3<float, M> pred("pred", 2, 3, 4), d_pred("d_pred", 2, 3, 4);
  Kokkos::deep_copy(d_pred, 7.0f);
  CHECK_THROWS_WITH(losses.masked_mse(Space(), pred, Tensor3<float, M>("target", 2, 4, 4),
                                      Mask3<Space>("m", 2, 3, 4), d_pred),
                    "kformer::Losses::masked_mse: target has shape (2, 4, 4), expected (2, 3, 4)");
  CHECK_THROWS_WITH(losses.masked_mse(Space(), pred, pred, Mask3<Space>("m", 2, 3, 1), d_pred),
                    "kformer::Losses::masked_mse: mask has shape (2, 3, 1), expected (2, 3, 4)");
  CHECK(host_values(d_pred) == std::vector<double>(24, 7.0));
  CHECK_THROWS_WITH(losses.mse(Space(), Tensor2<float, M>("p", 0, 2), Tensor2<float, M>("t", 0, 2),
                               Tensor2<float, M>()),
                    ContainsText("kformer::Losses::mse: pred has shape (0, 2)"));
  CHECK_THROWS_WITH(
      losses.error_sums(Space(), Tensor2<float, M>("p", 3, 2), Tensor2<float, M>("t", 2, 3)),
      "kformer::Losses::error_sums: target has shape (2, 3), expected (3, 2)");
}

TEST_CASE(
    "Losses repeat bit for bit, agree across backends and allocate nothing after the first call",
    "[losses][determinism]") {
  // Large enough that every block of the deterministic sum holds many elements.
  const int b = 32, s = 100, f = 7, n = b * s * f;  // logits: (b s, f), f classes
  const auto pred_values = random_values(n, 61);
  const auto target_values = random_values(n, 62);
  std::vector<double> mask_values(n), labels(b * s);
  for (int i = 0; i < n; ++i)
    mask_values[i] = (i * 7919) % 5 == 0;
  for (int i = 0; i < b * s; ++i)
    labels[i] = (i * 31) % f;
  // Reference sums in long double on the host.
  long double sq = 0;
  std::int64_t count = 0;
  for (int i = 0; i < n; ++i)
    if (mask_values[i]) {
      const long double d = static_cast<long double>(static_cast<float>(pred_values[i])) -
                            static_cast<float>(target_values[i]);
      sq += d * d;
      ++count;
    }

  std::vector<std::vector<double>> first;
  backends::for_each_space([&](auto space) {
    using Space = decltype(space);
    using M = MemorySpaceOf<Space>;
    CAPTURE(backends::space_name<Space>());
    Losses<float, Space> losses;
    const auto pred = device_from<float, Space>(pred_values, b, s, f);
    const auto target = device_from<float, Space>(target_values, b, s, f);
    const auto mask = device_from<std::uint8_t, Space>(mask_values, b, s, f);
    const auto logits = device_from<float, Space>(pred_values, b * s, f);
    const auto label_view = labels_from<Space>(labels);
    Tensor3<float, M> d_pred("d_pred", b, s, f);
    Tensor2<float, M> d_logits("d_logits", b * s, f);
    const auto run = [&] {
      const auto masked = losses.masked_mse(Space(), pred, target, mask, d_pred);
      const double ce = losses.cross_entropy(Space(), logits, label_view, d_logits);
      const auto sums = losses.error_sums(Space(), Tensor2<const float, M>(pred.data(), b * s, f),
                                          Tensor2<const float, M>(target.data(), b * s, f));
      return std::vector<double>{masked.loss, static_cast<double>(masked.count), ce, sums.squared,
                                 sums.absolute};
    };
    const auto values = run();
    CHECK(values[1] == count);
    CHECK(values[0] == Approx(static_cast<double>(sq / count)).epsilon(1e-14));
    Space().fence();
    const AllocationCounter counter;
    const auto again = run();
    Space().fence();
    CHECK(counter.allocations() == 0);
    CHECK(bitwise_equal(values, again));
    // The reduction's structure does not depend on the backend's threads: the host backends give
    // the same bits.
    if (first.empty())
      first.push_back(values);
    else if (Kokkos::SpaceAccessibility<Kokkos::HostSpace, M>::accessible)
      CHECK(bitwise_equal(values, first[0]));
  });
}

TEMPLATE_LIST_TEST_CASE("MSE left on the device: the host form's bits, no allocation, no wait",
                        "[losses][device]", backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  Losses<float, Space> losses;
  const int b = 16, n = 37;  // b n not a multiple of the sum's slots
  const auto pred = device_from<float, Space>(random_values(b * n, 71), b, n);
  const auto target = device_from<float, Space>(random_values(b * n, 72), b, n);
  Tensor2<float, M> d_host("d_host", b, n), d_device("d_device", b, n);
  const double on_host = losses.mse(Space(), pred, target, d_host);
  const Kokkos::View<double, M> loss("loss");
  losses.mse(Space(), pred, target, d_device, loss);  // first call: the sum's scratch grows
  const AllocationCounter counter;
  losses.mse(Space(), pred, target, d_device, loss);
  CHECK(counter.allocations() == 0);
  Space().fence();
  const auto loss_host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), loss);
  CHECK(loss_host() == on_host);  // the same slots added in the same order
  CHECK(host_values(d_device) == host_values(d_host));
  // A reference in long double from the host values.
  long double sum = 0;
  const auto p = host_values(pred), t = host_values(target);
  for (std::size_t i = 0; i < p.size(); ++i)
    sum += (static_cast<long double>(p[i]) - t[i]) * (static_cast<long double>(p[i]) - t[i]);
  CHECK(loss_host() == Approx(static_cast<double>(sum / p.size())).epsilon(1e-12));

  // Bad arguments: named, nothing written.
  Kokkos::deep_copy(loss, -1.0);
  CHECK_THROWS_WITH(losses.mse(Space(), pred, Tensor2<float, M>("t", b, n + 1), d_device, loss),
                    "kformer::Losses::mse: target has shape (16, 38), expected (16, 37)");
  CHECK_THROWS_WITH(losses.mse(Space(), pred, target, d_device, Kokkos::View<double, M>()),
                    "kformer::Losses::mse: loss is an empty View, expected a rank-0 View");
  CHECK(Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), loss)() == -1.0);
}
