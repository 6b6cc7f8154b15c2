// Optimizers over a model's flat parameter buffer (one kernel per step), gradient clipping by
// global norm, and TST's step-decay learning-rate schedule.
//
// The updates are PyTorch 1.13's torch.optim.Adam, AdamW and RAdam (single-tensor path, no
// amsgrad), element by element, with t the step count after this step and g the gradient:
//
//   Adam:   g += wd p                                  (L2 through the gradient)
//           m = b1 m + (1 - b1) g,   v = b2 v + (1 - b2) g^2
//           p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
//   AdamW:  p *= 1 - lr wd                             (decoupled weight decay), then Adam with wd
//   0 RAdam:  g += wd p,  m and v as Adam,  mhat = m / (1 - b1^t)
//           rho_inf = 2 / (1 - b2) - 1,  rho_t = rho_inf - 2 t b2^t / (1 - b2^t)
//           rho_t > 5:  r = sqrt((rho_t - 4)(rho_t - 2) rho_inf / ((rho_inf - 4)(rho_inf - 2)
//           rho_t))
//                       p -= mhat lr sqrt(1 - b2^t) / (sqrt(v) + eps) r
//           otherwise:  p -= mhat lr                   (SGD with momentum while the variance
//                                                       estimate is too young to rectify)
//
// The scalar factors are computed on the host in double, as PyTorch computes them in Python, and
// applied in the parameters' precision in PyTorch's order of operations.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <Kokkos_Core.hpp>

#include "../core/compat.hpp"
#include "../core/error.hpp"
#include "../core/profiling.hpp"
#include "../core/tensor.hpp"
#include "../losses/deterministic_sum.hpp"

namespace kformer {

enum class OptimizerKind { Adam, AdamW, RAdam };

inline const char* optimizer_name(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::Adam:
      return "Adam";
    case OptimizerKind::AdamW:
      return "AdamW";
    case OptimizerKind::RAdam:
      return "RAdam";
  }
  return "unknown";
}

// "kformer::Optimizer<Adam>::step", a literal: step() names itself without building a string.
inline const char* step_where(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::Adam:
      return "kformer::Optimizer<Adam>::step";
    case OptimizerKind::AdamW:
      return "kformer::Optimizer<AdamW>::step";
    case OptimizerKind::RAdam:
      return "kformer::Optimizer<RAdam>::step";
  }
  return "kformer::Optimizer::step";
}

namespace detail {
// How a parameter moves once its moments are updated (uniform over a step's kernel).
enum class UpdateRule { Adam, Rectified, Momentum };
}  // namespace detail

struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::Adam;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;  // L2 for Adam and RAdam, decoupled for AdamW
};

template <class T, class ExecutionSpace>
class Optimizer {
 public:
  using memory_space = typename ExecutionSpace::memory_space;
  using Vector = Tensor1<T, memory_space>;
  using ConstVector = Tensor1<const T, memory_space>;

  // State for n_params parameters: exp_avg and exp_avg_sq start at zero, the step count at 0.
  Optimizer(const ExecutionSpace& exec, std::int64_t n_params, const OptimizerOptions& options)
      : options_(options) {
    const std::string where =
        std::string("kformer::Optimizer<") + optimizer_name(options.kind) + ">";
    if (n_params < 0) fail(where, "n_params must be at least 0, got ", n_params);
    if (!(options.beta1 >= 0.0 && options.beta1 < 1.0))
      fail(where, "beta1 must be in [0, 1), got ", options.beta1);
    if (!(options.beta2 >= 0.0 && options.beta2 < 1.0))
      fail(where, "beta2 must be in [0, 1), got ", options.beta2);
    if (!(options.eps >= 0.0)) fail(where, "eps must be at least 0, got ", options.eps);
    if (!(options.weight_decay >= 0.0))
      fail(where, "weight_decay must be at least 0, got ", options.weight_decay);
    exp_avg_ = Vector(
        Kokkos::view_alloc(Kokkos::WithoutInitializing, "kformer::Optimizer::exp_avg"), n_params);
    exp_avg_sq_ =
        Vector(Kokkos::view_alloc(Kokkos::WithoutInitializing, "kformer::Optimizer::exp_avg_sq"),
               n_params);
    Kokkos::deep_copy(exec, exp_avg_, T(0));
    Kokkos::deep_copy(exec, exp_avg_sq_, T(0));
  }

  const OptimizerOptions& options() const { return options_; }
  std::int64_t size() const { return exp_avg_.extent(0); }
  // Steps taken so far (PyTorch's state["step"]).
  std::int64_t steps() const { return steps_; }

  // The state, for checkpoints: write into these views and call set_steps to resume a run.
  Vector exp_avg() const { return exp_avg_; }
  Vector exp_avg_sq() const { return exp_avg_sq_; }
  void set_steps(std::int64_t steps) {
    if (steps < 0) fail("kformer::Optimizer::set_steps", "steps must be at least 0, got ", steps);
    steps_ = steps;
  }

  // One update of params (n_params) from grads (n_params) with learning rate lr >= 0.
  void step(const ExecutionSpace& exec, const Vector& params, const ConstVector& grads, double lr) {
    const char* const where = step_where(options_.kind);
    const ProfilingRegion region(where);
    check_shape(where, "params", params, {size()});
    check_shape(where, "grads", grads, {size()});
    if (!(lr >= 0.0 && std::isfinite(lr)))
      fail(where, "lr must be finite and at least 0, got ", lr);

    const double t = static_cast<double>(steps_ + 1);
    const double beta1 = options_.beta1, beta2 = options_.beta2;
    const double bias_correction1 = 1 - std::pow(beta1, t);
    const double bias_correction2 = 1 - std::pow(beta2, t);

    using Rule = detail::UpdateRule;
    Rule rule = Rule::Adam;
    double rect = 0;
    if (options_.kind == OptimizerKind::RAdam) {
      const double rho_inf = 2 / (1 - beta2) - 1;
      const double rho_t = rho_inf - 2 * t * std::pow(beta2, t) / bias_correction2;
      rule = rho_t > 5.0 ? Rule::Rectified : Rule::Momentum;
      if (rule == Rule::Rectified)
        rect = std::sqrt((rho_t - 4) * (rho_t - 2) * rho_inf /
                         ((rho_inf - 4) * (rho_inf - 2) * rho_t));
    }
    const bool decoupled = options_.kind == OptimizerKind::AdamW;
    const T param_scale = static_cast<T>(decoupled ? 1 - lr * options_.weight_decay : 1.0);
    const T grad_decay = static_cast<T>(decoupled ? 0.0 : options_.weight_decay);
    const T b1 = static_cast<T>(beta1), one_minus_b1 = static_cast<T>(1 - beta1);
    const T b2 = static_cast<T>(beta2), one_minus_b2 = static_cast<T>(1 - beta2);
    const T eps = static_cast<T>(options_.eps);
    const T neg_step_size = static_cast<T>(-(lr / bias_correction1));  // Adam, AdamW
    const T bc1 = static_cast<T>(bias_correction1);                    // RAdam
    const T bc2_sqrt = static_cast<T>(std::sqrt(bias_correction2));
    const T lr_t = static_cast<T>(lr), rect_t = static_cast<T>(rect);
    const Vector m = exp_avg_, v = exp_avg_sq_;

    Kokkos::parallel_for(
        KFORMER_LABEL("kformer::optimizer::step"),
        Kokkos::RangePolicy<ExecutionSpace, Kokkos::IndexType<std::int64_t>>(exec, 0, size()),
        KOKKOS_LAMBDA(const std::int64_t i) {
          T p = params(i);
          T g = grads(i);
          if (grad_decay != T(0)) g = g + grad_decay * p;
          if (decoupled) p = p * param_scale;
          const T mi = m(i) * b1 + one_minus_b1 * g;
          const T vi = v(i) * b2 + one_minus_b2 * g * g;
          m(i) = mi;
          v(i) = vi;
          if (rule == Rule::Adam) {
            p = p + neg_step_size * (mi / (compat::math::sqrt(vi) / bc2_sqrt + eps));
          } else if (rule == Rule::Rectified) {
            const T adaptive_lr = T(1) / (compat::math::sqrt(vi) + eps) * bc2_sqrt;
            p = p - mi / bc1 * lr_t * adaptive_lr * rect_t;
          } else {
            p = p - mi / bc1 * lr_t;
          }
          params(i) = p;
        });
    ++steps_;
  }

 private:
  OptimizerOptions options_;
  std::int64_t steps_ = 0;
  Vector exp_avg_, exp_avg_sq_;
};

// The Euclidean norm of grads, reduced deterministically (the same bits for any thread count).
template <class ExecutionSpace, class T>
double global_norm(const ExecutionSpace& exec,
                   const Tensor1<T, typename ExecutionSpace::memory_space>& grads,
                   DeterministicSum<ExecutionSpace, 1>& workspace) {
  const T* const g = grads.data();
  const auto sum = workspace(
      exec, KFORMER_LABEL("kformer::optimizer::global_norm"),
      static_cast<std::int64_t>(grads.extent(0)), KOKKOS_LAMBDA(const std::int64_t i, double* acc) {
        const double gi = static_cast<double>(g[i]);
        acc[0] += gi * gi;
      });
  return std::sqrt(sum[0]);
}

// PyTorch's clip_grad_norm_(parameters, max_norm) over a flat gradient buffer: with
// norm = |grads|_2, grads *= max_norm / (norm + 1e-6) when that factor is below 1. Returns the
// norm before clipping. A non-finite norm is returned with the gradients left as they are (PyTorch
// would scale them by NaN), so that the caller can skip the step.
template <class ExecutionSpace, class T>
double clip_grad_norm(const ExecutionSpace& exec,
                      const Tensor1<T, typename ExecutionSpace::memory_space>& grads,
                      double max_norm, DeterministicSum<ExecutionSpace, 1>& workspace) {
  constexpr const char* where = "kformer::clip_grad_norm";
  const ProfilingRegion region(where);
  if (!(max_norm > 0.0 && std::isfinite(max_norm)))
    fail(where, "max_norm must be finite and greater than 0, got ", max_norm);
  const double norm = global_norm(exec, grads, workspace);
  const double clip_coef = max_norm / (norm + 1e-6);
  if (!(std::isfinite(norm) && clip_coef < 1.0)) return norm;
  const T scale = static_cast<T>(clip_coef);
  T* const g = grads.data();
  Kokkos::parallel_for(
      KFORMER_LABEL("kformer::optimizer::clip_grad_norm"),
      Kokkos::RangePolicy<ExecutionSpace, Kokkos::IndexType<std::int64_t>>(
          exec, 0, static_cast<std::int64_t>(grads.extent(0))),
      KOKKOS_LAMBDA(const std::int64_t i) { g[i] = g[i] * scale; });
  return norm;
}

// TST's --lr_step / --lr_factor: the learning rate is multiplied by factors[i] after epoch
// milestones[i] (TST counts epochs from 1), so with epochs counted from 0 here,
//   lr(epoch) = base_lr * prod { factors[i] : milestones[i] <= epoch },
// which is also PyTorch's MultiStepLR. A single factor applies at every milestone, as in TST.
class StepDecaySchedule {
 public:
  StepDecaySchedule(double base_lr, std::vector<int> milestones, std::vector<double> factors)
      : base_lr_(base_lr), milestones_(std::move(milestones)), factors_(std::move(factors)) {
    constexpr const char* where = "kformer::StepDecaySchedule";
    if (!(base_lr >= 0.0 && std::isfinite(base_lr)))
      fail(where, "base_lr must be finite and at least 0, got ", base_lr);
    if (factors_.size() == 1)  // one factor for every milestone (also for none)
      factors_.assign(milestones_.size(), factors_[0]);
    if (factors_.size() != milestones_.size())
      fail(where, "got ", milestones_.size(), " milestones and ", factors_.size(),
           " factors, expected as many factors or one");
    for (std::size_t i = 0; i < milestones_.size(); ++i) {
      if (milestones_[i] < 1 || (i > 0 && milestones_[i] <= milestones_[i - 1]))
        fail(where, "milestones must be increasing epochs of at least 1, got milestones[", i,
             "] = ", milestones_[i]);
      if (!(factors_[i] > 0.0 && std::isfinite(factors_[i])))
        fail(where, "factors[", i, "] must be finite and greater than 0, got ", factors_[i]);
    }
  }

  // The learning rate for epoch `epoch` (counted from 0).
  double lr(int epoch) const {
    double lr = base_lr_;
    for (std::size_t i = 0; i < milestones_.size() && milestones_[i] <= epoch; ++i)
      lr *= factors_[i];
    return lr;
  }

  double base_lr() const { return base_lr_; }
  const std::vector<int>& milestones() const { return milestones_; }
  const std::vector<double>& factors() const { return factors_; }

 private:
  double base_lr_;
  std::vector<int> milestones_;
  std::vector<double> factors_;
};

}  // namespace kformer
