// optimizers/: Adam, AdamW and RAdam against PyTorch 1.13 goldens
// (tests/golden/make_training_goldens.py) and closed forms, gradient clipping, the step-decay
// schedule, resuming from saved state, determinism, errors and allocation-free steps.
#include "support/catch.hpp"

#include <cmath>
#include <limits>

#include <Kokkos_Core.hpp>

#include <kformer/backends/spaces.hpp>
#include <kformer/optimizers/optimizers.hpp>

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

OptimizerOptions golden_options(const std::string& c) {
  const auto& h = goldens().hyper(c);
  const std::string kind = h.at("kind");
  OptimizerOptions o;
  o.kind = kind == "Adam" ? OptimizerKind::Adam
                          : (kind == "AdamW" ? OptimizerKind::AdamW : OptimizerKind::RAdam);
  o.beta1 = h.at("beta1");
  o.beta2 = h.at("beta2");
  o.eps = h.at("eps");
  o.weight_decay = h.at("weight_decay");
  return o;
}

// Row k of a (rows, n) golden tensor.
std::vector<double> row(const GoldenTensor& t, int k) {
  const auto n = t.shape.at(1);
  return std::vector<double>(t.values.begin() + k * n, t.values.begin() + (k + 1) * n);
}

// Runs a golden optimizer case in precision T; checks the parameters after every step and the
// state after the last.
template <class T, class Space>
void check_golden_case(const std::string& c) {
  using M = MemorySpaceOf<Space>;
  CAPTURE(c);
  const auto& h = goldens().hyper(c);
  const int n = h.at("n"), steps = h.at("steps");
  Optimizer<T, Space> optimizer(Space(), n, golden_options(c));
  const auto params = device_from<T, Space>(goldens().tensor(c + ".params0").values, n);
  Tensor1<T, M> grads("grads", n);
  for (int k = 0; k < steps; ++k) {
    CAPTURE(k);
    Kokkos::deep_copy(grads, device_from<T, Space>(row(goldens().tensor(c + ".grads"), k), n));
    optimizer.step(Space(), params, grads, goldens().tensor(c + ".lr").values[k]);
    CHECK(max_abs_diff(host_values(params), row(goldens().tensor(c + ".params"), k)) <= 1e-6);
  }
  CHECK(optimizer.steps() == steps);
  CHECK(max_rel_diff(host_values(optimizer.exp_avg()), goldens().tensor(c + ".exp_avg").values) <=
        1e-6);
  CHECK(max_rel_diff(host_values(optimizer.exp_avg_sq()),
                     goldens().tensor(c + ".exp_avg_sq").values) <= 1e-6);
}

const char* const kGoldenCases[] = {"adam", "adam_l2", "adamw", "radam", "radam_l2"};

}  // namespace

TEMPLATE_LIST_TEST_CASE("Adam, AdamW and RAdam match PyTorch step by step within 1e-6",
                        "[optimizers][parity]", backends::EnabledSpaces) {
  using Space = TestType;
  for (const std::string c : kGoldenCases) {
    check_golden_case<float, Space>(c);
    check_golden_case<double, Space>(c);
  }
}

TEMPLATE_LIST_TEST_CASE("First steps and weight decay against closed forms", "[optimizers]",
                        backends::EnabledSpaces) {
  using Space = TestType;
  const std::vector<double> p0 = {0.5, -1.5, 2.0, 0.0};
  const std::vector<double> g = {0.3, -2.0, 1e-3, 4.0};
  const double lr = 0.1, eps = 1e-8;
  const auto first_step = [&](OptimizerKind kind, double weight_decay,
                              const std::vector<double>& grads) {
    OptimizerOptions o;
    o.kind = kind;
    o.weight_decay = weight_decay;
    Optimizer<double, Space> optimizer(Space(), 4, o);
    const auto params = device_from<double, Space>(p0, 4);
    optimizer.step(Space(), params, device_from<double, Space>(grads, 4), lr);
    return host_values(params);
  };

  // Adam's first step: m_hat = g, v_hat = g^2, so p -= lr g / (|g| + eps).
  auto p = first_step(OptimizerKind::Adam, 0.0, g);
  for (int i = 0; i < 4; ++i)
    CHECK(p[i] == Approx(p0[i] - lr * g[i] / (std::abs(g[i]) + eps)).epsilon(1e-14));

  // Adam with L2: the gradient is g + wd p.
  const double wd = 0.2;
  p = first_step(OptimizerKind::Adam, wd, g);
  for (int i = 0; i < 4; ++i) {
    const double gi = g[i] + wd * p0[i];
    CHECK(p[i] == Approx(p0[i] - lr * gi / (std::abs(gi) + eps)).epsilon(1e-14));
  }

  // AdamW with a zero gradient moves p only by the decoupled decay: p (1 - lr wd).
  p = first_step(OptimizerKind::AdamW, wd, std::vector<double>(4, 0.0));
  for (int i = 0; i < 4; ++i)
    CHECK(p[i] == Approx(p0[i] * (1 - lr * wd)).epsilon(1e-15));

  // RAdam's first step is SGD with momentum (rho_1 = 1 <= 5): p -= lr m_hat = lr g.
  p = first_step(OptimizerKind::RAdam, 0.0, g);
  for (int i = 0; i < 4; ++i)
    CHECK(p[i] == Approx(p0[i] - lr * g[i]).epsilon(1e-15));
}

TEMPLATE_LIST_TEST_CASE("clip_grad_norm matches PyTorch's clip_grad_norm_", "[optimizers][clip]",
                        backends::EnabledSpaces) {
  using Space = TestType;
  DeterministicSum<Space> workspace;
  for (const std::string c : {"clip_above", "clip_below"}) {
    CAPTURE(c);
    const auto& before = goldens().tensor(c + ".grads");
    const auto grads = device_from<float, Space>(before.values, before.values.size());
    const double norm =
        clip_grad_norm(Space(), grads, goldens().tensor(c + ".max_norm").values[0], workspace);
    CHECK(norm == Approx(goldens().tensor(c + ".norm").values[0]).epsilon(1e-6));
    CHECK(max_rel_diff(host_values(grads), goldens().tensor(c + ".clipped").values) <= 1e-6);
    if (c == "clip_below") CHECK(bitwise_equal(host_values(grads), before.values));
  }

  // A non-finite norm is reported and the gradients are left for the caller to skip.
  std::vector<double> bad = {1.0, std::numeric_limits<double>::quiet_NaN(), 3.0};
  const auto grads = device_from<double, Space>(bad, 3);
  CHECK(std::isnan(clip_grad_norm(Space(), grads, 1.0, workspace)));
  const auto after = host_values(grads);
  CHECK((after[0] == 1.0 && std::isnan(after[1]) && after[2] == 3.0));

  // Closed form: |(3, 4)| = 5.
  const auto small = device_from<double, Space>({3.0, 4.0}, 2);
  CHECK(global_norm(Space(), small, workspace) == 5.0);
  CHECK(clip_grad_norm(Space(), small, 2.5, workspace) == 5.0);
  const double coef = 2.5 / (5.0 + 1e-6);
  CHECK(host_values(small) == std::vector<double>{3.0 * coef, 4.0 * coef});

  CHECK_THROWS_WITH(clip_grad_norm(Space(), small, 0.0, workspace),
                    "kformer::clip_grad_norm: max_norm must be finite and greater than 0, got 0");
  CHECK(host_values(small) == std::vector<double>{3.0 * coef, 4.0 * coef});
}

TEST_CASE("StepDecaySchedule follows TST's --lr_step / --lr_factor", "[optimizers][schedule]") {
  // TST multiplies lr after epochs 3 and 5 (counted from 1): epochs 0-2 here use lr, 3-4 use
  // 0.1 lr, 5 on 0.01 lr.
  const StepDecaySchedule one_factor(1e-3, {3, 5}, {0.1});
  const std::vector<double> expected = {1e-3, 1e-3, 1e-3, 1e-4, 1e-4, 1e-5, 1e-5, 1e-5};
  for (int epoch = 0; epoch < 8; ++epoch) {
    CAPTURE(epoch);
    CHECK(one_factor.lr(epoch) == Approx(expected[epoch]).epsilon(1e-15));
  }
  const StepDecaySchedule two_factors(0.5, {2, 4}, {0.5, 0.1});
  CHECK(two_factors.lr(1) == 0.5);
  CHECK(two_factors.lr(2) == 0.25);
  CHECK(two_factors.lr(4) == Approx(0.025).epsilon(1e-15));
  CHECK(StepDecaySchedule(0.01, {}, {}).lr(1000) == 0.01);

  CHECK_THROWS_WITH(StepDecaySchedule(1e-3, {3, 5, 7}, {0.1, 0.5}),
                    "kformer::StepDecaySchedule: got 3 milestones and 2 factors, expected as many "
                    "factors or one");
  CHECK_THROWS_WITH(StepDecaySchedule(1e-3, {5, 5}, {0.1}),
                    ContainsText("milestones must be increasing epochs of at least 1, got "
                                 "milestones[1] = 5"));
  CHECK_THROWS_WITH(StepDecaySchedule(1e-3, {0}, {0.1}), ContainsText("milestones[0] = 0"));
  CHECK_THROWS_WITH(StepDecaySchedule(1e-3, {2}, {-1.0}),
                    ContainsText("factors[0] must be finite and greater than 0"));
  CHECK_THROWS_WITH(StepDecaySchedule(-1.0, {}, {}), ContainsText("base_lr must be finite"));
}

TEMPLATE_LIST_TEST_CASE("Optimizer state resumes bit for bit, and repeats are bitwise equal",
                        "[optimizers][determinism]", backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  const int n = 1000, steps = 8;
  const auto p0 = random_values(n, 71);
  std::vector<std::vector<double>> grads;
  for (int k = 0; k < steps; ++k)
    grads.push_back(random_values(n, 100 + k));
  for (const OptimizerKind kind :
       {OptimizerKind::Adam, OptimizerKind::AdamW, OptimizerKind::RAdam}) {
    CAPTURE(optimizer_name(kind));
    OptimizerOptions o;
    o.kind = kind;
    o.weight_decay = 0.01;
    const auto run = [&](int first, int last, Optimizer<float, Space>& optimizer,
                         const Tensor1<float, M>& params) {
      for (int k = first; k < last; ++k)
        optimizer.step(Space(), params, device_from<float, Space>(grads[k], n), 1e-2);
    };
    Optimizer<float, Space> straight(Space(), n, o);
    const auto params = device_from<float, Space>(p0, n);
    run(0, steps, straight, params);

    Optimizer<float, Space> again(Space(), n, o);
    const auto params_again = device_from<float, Space>(p0, n);
    run(0, steps, again, params_again);
    CHECK(bitwise_equal(host_values(params), host_values(params_again)));

    // Stop after 5 steps, copy the state into a fresh optimizer (as a checkpoint would) and go on.
    Optimizer<float, Space> before(Space(), n, o);
    const auto params_resumed = device_from<float, Space>(p0, n);
    run(0, 5, before, params_resumed);
    Optimizer<float, Space> resumed(Space(), n, o);
    Kokkos::deep_copy(resumed.exp_avg(), before.exp_avg());
    Kokkos::deep_copy(resumed.exp_avg_sq(), before.exp_avg_sq());
    resumed.set_steps(before.steps());
    run(5, steps, resumed, params_resumed);
    CHECK(resumed.steps() == steps);
    CHECK(bitwise_equal(host_values(params), host_values(params_resumed)));
  }
}

TEMPLATE_LIST_TEST_CASE("Bad arguments throw and leave parameters and state untouched",
                        "[optimizers][errors]", backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  OptimizerOptions o;
  o.kind = OptimizerKind::AdamW;
  Optimizer<float, Space> optimizer(Space(), 6, o);
  const auto params = device_from<float, Space>(std::vector<double>(6, 1.0), 6);
  const auto grads = device_from<float, Space>(std::vector<double>(6, 0.5), 6);

  CHECK_THROWS_WITH(optimizer.step(Space(), params, Tensor1<float, M>("short", 5), 1e-3),
                    "kformer::Optimizer<AdamW>::step: grads has shape (5), expected (6)");
  CHECK_THROWS_WITH(optimizer.step(Space(), Tensor1<float, M>("long", 7), grads, 1e-3),
                    "kformer::Optimizer<AdamW>::step: params has shape (7), expected (6)");
  CHECK_THROWS_WITH(
      optimizer.step(Space(), params, grads, -1e-3),
      "kformer::Optimizer<AdamW>::step: lr must be finite and at least 0, got -0.001");
  CHECK_THROWS_WITH(optimizer.step(Space(), params, grads, std::nan("")),
                    ContainsText("lr must be finite and at least 0"));
  CHECK(optimizer.steps() == 0);
  CHECK(host_values(params) == std::vector<double>(6, 1.0));
  CHECK(host_values(optimizer.exp_avg()) == std::vector<double>(6, 0.0));
  CHECK_THROWS_WITH(optimizer.set_steps(-1),
                    "kformer::Optimizer::set_steps: steps must be at least 0, got -1");

  OptimizerOptions bad = o;
  bad.beta1 = 1.0;
  CHECK_THROWS_WITH((Optimizer<float, Space>(Space(), 6, bad)),
                    "kformer::Optimizer<AdamW>: beta1 must be in [0, 1), got 1");
  bad = o;
  bad.beta2 = -0.5;
  CHECK_THROWS_WITH((Optimizer<float, Space>(Space(), 6, bad)),
                    ContainsText("beta2 must be in [0, 1), got -0.5"));
  bad = o;
  bad.eps = -1;
  CHECK_THROWS_WITH((Optimizer<float, Space>(Space(), 6, bad)),
                    ContainsText("eps must be at least 0"));
  bad = o;
  bad.weight_decay = -0.1;
  CHECK_THROWS_WITH((Optimizer<float, Space>(Space(), 6, bad)),
                    ContainsText("weight_decay must be at least 0"));
  CHECK_THROWS_WITH((Optimizer<float, Space>(Space(), -1, o)),
                    ContainsText("n_params must be at least 0, got -1"));
}

TEST_CASE("An optimizer step and clipping allocate nothing, and host backends agree bit for bit",
          "[optimizers][determinism]") {
  const int n = 50000;
  const auto p0 = random_values(n, 81);
  const auto g0 = random_values(n, 82, -5.0, 5.0);
  std::vector<std::vector<double>> first;
  backends::for_each_space([&](auto space) {
    using Space = decltype(space);
    using M = MemorySpaceOf<Space>;
    CAPTURE(backends::space_name<Space>());
    OptimizerOptions o;
    o.kind = OptimizerKind::RAdam;
    Optimizer<float, Space> optimizer(Space(), n, o);
    DeterministicSum<Space> workspace;
    const auto params = device_from<float, Space>(p0, n);
    const auto grads = device_from<float, Space>(g0, n);
    const Tensor1<float, M> scratch("scratch", n);
    const auto step = [&] {
      Kokkos::deep_copy(scratch, grads);
      const double norm = clip_grad_norm(Space(), scratch, 4.0, workspace);
      optimizer.step(Space(), params, scratch, 1e-3);
      return norm;
    };
    const double norm = step();
    Space().fence();
    const AllocationCounter counter;
    CHECK(step() == norm);
    Space().fence();
    CHECK(counter.allocations() == 0);
    const std::vector<double> result = {norm};
    if (first.empty()) {
      first.push_back(result);
      first.push_back(host_values(params));
    } else if (Kokkos::SpaceAccessibility<Kokkos::HostSpace, M>::accessible) {
      CHECK(bitwise_equal(result, first[0]));
      CHECK(bitwise_equal(host_values(params), first[1]));
    }
  });
}
