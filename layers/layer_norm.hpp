// Layer normalisation over the feature axis (PyTorch's LayerNorm(d), eps 1e-5).
//
//   forward:   mu_n = mean_j x[n,j],  rstd_n = 1 / sqrt(mean_j (x[n,j] - mu_n)^2 + eps)
//              xhat = (x - mu) rstd,  y = xhat * gamma + beta              x, y: (N, d)
//   backward:  g = dy * gamma
//              dx = rstd (g - mean_j g - xhat mean_j(g xhat))
//              dgamma += sum_n dy xhat,  dbeta += sum_n dy
//
// mu and rstd are saved by forward for backward, which must follow the forward of the same x.
#pragma once

#include <cstdint>
#include <string>

#include <Kokkos_Core.hpp>

#include "../backends/reduce.hpp"
#include "../core/compat.hpp"
#include "../core/error.hpp"
#include "../core/layer.hpp"
#include "../core/param.hpp"
#include "../core/profiling.hpp"
#include "../core/run_context.hpp"
#include "../core/tensor.hpp"
#include "../core/view_adapters.hpp"
#include "../core/workspace.hpp"
#include "elementwise.hpp"

namespace kformer {

template <class T, class ExecutionSpace>
class LayerNorm {
 public:
  using memory_space = typename ExecutionSpace::memory_space;
  using Matrix = RowMajorView<Tensor2<T, memory_space>>;
  using ConstMatrix = RowMajorView<Tensor2<const T, memory_space>>;
  using member_type = typename Kokkos::TeamPolicy<ExecutionSpace>::member_type;

  LayerNorm() = default;
  LayerNorm(const ExecutionSpace& exec, int dim, double eps = 1e-5,
            std::string name = "kformer::LayerNorm")
      : name_(std::move(name)), dim_(dim), eps_(eps) {
    if (dim < 1) fail(name_, "dim must be at least 1, got ", dim);
    weight_ = Param<T, memory_space>("weight", {dim});
    bias_ = Param<T, memory_space>("bias", {dim});
    Kokkos::deep_copy(exec, weight_.value, T(1));
  }

  int dim() const { return dim_; }
  Param<T, memory_space>& weight() { return weight_; }
  Param<T, memory_space>& bias() { return bias_; }

  template <class F>
  void visit_parameters(F&& f) {
    f(std::string("weight"), weight_);
    f(std::string("bias"), bias_);
  }
  template <class F>
  void visit_buffers(F&&) {}
  void zero_grad(const ExecutionSpace& exec) {
    fill(exec, T(0), weight_.grad);
    fill(exec, T(0), bias_.grad);
  }
  std::int64_t buffer_bytes() const {
    return std::int64_t(mean_.bytes() + rstd_.bytes() + partial_.bytes());
  }

  // y = LayerNorm(x).   x, y: (N, dim); y may be x.
  void forward(const ExecutionSpace& exec, const RunContext&, const ConstMatrix& x,
               const Matrix& y) {
    const Where where{name_, "::forward"};
    const ProfilingRegion region(where);
    check_shape(where, "x", x, {-1, dim_});
    check_shape(where, "y", y, extents_of(x));
    const std::int64_t n = x.extent(0);
    const auto mean = mean_.view(n);
    const auto rstd = rstd_.view(n);
    const int d = dim_;
    const T eps = static_cast<T>(eps_);
    const T* const gamma = weight_.value.data();
    const T* const beta = bias_.value.data();
    Kokkos::parallel_for(
        KFORMER_LABEL("kformer::layer_norm::forward"),
        Kokkos::TeamPolicy<ExecutionSpace>(exec, n, Kokkos::AUTO),
        KOKKOS_LAMBDA(const member_type& team) {
          const std::int64_t row = team.league_rank();
          const T* const xr = &x(row, 0);
          T* const yr = &y(row, 0);
          T sum = 0;
          Kokkos::parallel_reduce(
              Kokkos::TeamThreadRange(team, d), [=](const int j, T& s) { s += xr[j]; }, sum);
          const T mu = sum / d;
          T sq = 0;
          Kokkos::parallel_reduce(
              Kokkos::TeamThreadRange(team, d),
              [=](const int j, T& s) { s += (xr[j] - mu) * (xr[j] - mu); }, sq);
          const T r = T(1) / compat::math::sqrt(sq / d + eps);
          team.team_barrier();  // every thread has read x before y (which may be x) is written
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, d),
                               [=](const int j) { yr[j] = (xr[j] - mu) * r * gamma[j] + beta[j]; });
          Kokkos::single(Kokkos::PerTeam(team), [=]() {
            mean(row) = mu;
            rstd(row) = r;
          });
        });
  }

  // dx (+)= d LayerNorm / dx, dgamma += sum dy xhat, dbeta += sum dy.
  //   x: the forward's input, dy: (N, dim), dx: (N, dim) or empty; dx may be dy.
  void backward(const ExecutionSpace& exec, const RunContext&, const ConstMatrix& x,
                const ConstMatrix& dy, const Matrix& dx, WriteMode dx_mode = WriteMode::Assign) {
    const bool accumulate_dx = dx_mode == WriteMode::Add;
    const Where where{name_, "::backward"};
    const ProfilingRegion region(where);
    check_shape(where, "x", x, {-1, dim_});
    check_shape(where, "dy", dy, extents_of(x));
    if (dx.data() != nullptr) check_shape(where, "dx", dx, extents_of(x));
    const std::int64_t n = x.extent(0);
    const auto mean = mean_.view(n);
    const auto rstd = rstd_.view(n);
    const int d = dim_;
    const T* const gamma = weight_.value.data();

    // Parameter gradients first: dx may overwrite dy.
    backends::column_reduce(
        exec, n, d,
        KOKKOS_LAMBDA(const std::int64_t i, const int j) {
          return dy(i, j) * (x(i, j) - mean(i)) * rstd(i);
        },
        weight_.grad, true, partial_);
    backends::column_reduce(
        exec, n, d, KOKKOS_LAMBDA(const std::int64_t i, const int j) { return dy(i, j); },
        bias_.grad, true, partial_);
    if (dx.data() == nullptr) return;

    Kokkos::parallel_for(
        KFORMER_LABEL("kformer::layer_norm::backward"),
        Kokkos::TeamPolicy<ExecutionSpace>(exec, n, Kokkos::AUTO),
        KOKKOS_LAMBDA(const member_type& team) {
          const std::int64_t row = team.league_rank();
          const T* const xr = &x(row, 0);
          const T* const g = &dy(row, 0);
          T* const out = &dx(row, 0);
          const T mu = mean(row), r = rstd(row);
          T mean_g = 0, mean_gx = 0;
          Kokkos::parallel_reduce(
              Kokkos::TeamThreadRange(team, d), [=](const int j, T& s) { s += g[j] * gamma[j]; },
              mean_g);
          Kokkos::parallel_reduce(
              Kokkos::TeamThreadRange(team, d),
              [=](const int j, T& s) { s += g[j] * gamma[j] * (xr[j] - mu) * r; }, mean_gx);
          mean_g /= d;
          mean_gx /= d;
          team.team_barrier();  // dy (which may be dx) has been read by every thread
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, d), [=](const int j) {
            const T v = r * (g[j] * gamma[j] - mean_g - (xr[j] - mu) * r * mean_gx);
            out[j] = accumulate_dx ? out[j] + v : v;
          });
        });
  }

 private:
  std::string name_ = "kformer::LayerNorm";
  int dim_ = 0;
  double eps_ = 1e-5;
  Param<T, memory_space> weight_, bias_;
  GrowingBuffer<T, memory_space> mean_{"kformer::LayerNorm::mean"},
      rstd_{"kformer::LayerNorm::rstd"};
  GrowingBuffer<T, memory_space> partial_{"kformer::LayerNorm::partial"};
};

}  // namespace kformer
