// Root-mean-square normalisation over the feature axis (PyTorch's nn.RMSNorm(d, eps), as in
// LLaMA-style transformers): LayerNorm without the mean and without a bias.
//
//   forward:   rstd_n = 1 / sqrt(mean_j x[n,j]^2 + eps),  xhat = x rstd,  y = xhat * gamma
//                                                                           x, y: (N, d)
//   backward:  g = dy * gamma
//              dx = rstd (g - xhat mean_j(g xhat))
//              dgamma += sum_n dy xhat
//
// rstd is saved by forward for backward, which must follow the forward of the same x.
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
class RMSNorm {
 public:
  using memory_space = typename ExecutionSpace::memory_space;
  using Matrix = RowMajorView<Tensor2<T, memory_space>>;
  using ConstMatrix = RowMajorView<Tensor2<const T, memory_space>>;
  using member_type = typename Kokkos::TeamPolicy<ExecutionSpace>::member_type;

  RMSNorm() = default;
  RMSNorm(const ExecutionSpace& exec, int dim, double eps = 1e-5,
          std::string name = "kformer::RMSNorm")
      : name_(std::move(name)), dim_(dim), eps_(eps) {
    if (dim < 1) fail(name_, "dim must be at least 1, got ", dim);
    if (!(eps > 0.0)) fail(name_, "eps must be positive, got ", eps);
    weight_ = Param<T, memory_space>("weight", {dim});
    Kokkos::deep_copy(exec, weight_.value, T(1));
  }

  int dim() const { return dim_; }
  Param<T, memory_space>& weight() { return weight_; }

  template <class F>
  void visit_parameters(F&& f) {
    f(std::string("weight"), weight_);
  }
  template <class F>
  void visit_buffers(F&&) {}
  void zero_grad(const ExecutionSpace& exec) { fill(exec, T(0), weight_.grad); }
  std::int64_t buffer_bytes() const { return std::int64_t(rstd_.bytes() + partial_.bytes()); }

  // y = RMSNorm(x).   x, y: (N, dim); y may be x.
  void forward(const ExecutionSpace& exec, const RunContext&, const ConstMatrix& x,
               const Matrix& y) {
    const Where where{name_, "::forward"};
    const ProfilingRegion region(where);
    check_shape(where, "x", x, {-1, dim_});
    check_shape(where, "y", y, extents_of(x));
    const std::int64_t n = x.extent(0);
    const auto rstd = rstd_.view(n);
    const int d = dim_;
    const T eps = static_cast<T>(eps_);
    const T* const gamma = weight_.value.data();
    Kokkos::parallel_for(
        KFORMER_LABEL("kformer::rms_norm::forward"),
        Kokkos::TeamPolicy<ExecutionSpace>(exec, n, Kokkos::AUTO),
        KOKKOS_LAMBDA(const member_type& team) {
          const std::int64_t row = team.league_rank();
          const T* const xr = &x(row, 0);
          T* const yr = &y(row, 0);
          T sq = 0;
          Kokkos::parallel_reduce(
              Kokkos::TeamThreadRange(team, d), [=](const int j, T& s) { s += xr[j] * xr[j]; }, sq);
          const T r = T(1) / compat::math::sqrt(sq / d + eps);
          team.team_barrier();  // every thread has read x before y (which may be x) is written
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, d),
                               [=](const int j) { yr[j] = xr[j] * r * gamma[j]; });
          Kokkos::single(Kokkos::PerTeam(team), [=]() { rstd(row) = r; });
        });
  }

  // dx (+)= d RMSNorm / dx, dgamma += sum dy xhat.
  //   x: the forward's input, dy: (N, dim), dx: (N, dim) or empty; dx may be dy.
  void backward(const ExecutionSpace& exec, const RunContext&, const ConstMatrix& x,
                const ConstMatrix& dy, const Matrix& dx, WriteMode dx_mode = WriteMode::Assign) {
    const Where where{name_, "::backward"};
    const ProfilingRegion region(where);
    check_shape(where, "x", x, {-1, dim_});
    check_shape(where, "dy", dy, extents_of(x));
    if (dx.data() != nullptr) check_shape(where, "dx", dx, extents_of(x));
    const std::int64_t n = x.extent(0);
    if (std::int64_t(rstd_.capacity()) < n)
      fail(where, "x has ", n, " rows but the last forward saw ", rstd_.capacity());
    const auto rstd = rstd_.view(n);
    const int d = dim_;
    const T* const gamma = weight_.value.data();
    // The weight's gradient first: dx may overwrite dy.
    backends::column_reduce(
        exec, n, d,
        KOKKOS_LAMBDA(const std::int64_t i, const int j) { return dy(i, j) * x(i, j) * rstd(i); },
        weight_.grad, true, partial_);
    if (dx.data() == nullptr) return;
    const bool add = dx_mode == WriteMode::Add;
    Kokkos::parallel_for(
        KFORMER_LABEL("kformer::rms_norm::backward"),
        Kokkos::TeamPolicy<ExecutionSpace>(exec, n, Kokkos::AUTO),
        KOKKOS_LAMBDA(const member_type& team) {
          const std::int64_t row = team.league_rank();
          const T* const xr = &x(row, 0);
          const T* const g = &dy(row, 0);
          T* const out = &dx(row, 0);
          const T r = rstd(row);
          T mean_gx = 0;
          Kokkos::parallel_reduce(
              Kokkos::TeamThreadRange(team, d),
              [=](const int j, T& s) { s += g[j] * gamma[j] * xr[j] * r; }, mean_gx);
          mean_gx /= d;
          team.team_barrier();  // dy (which may be dx) has been read by every thread
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, d), [=](const int j) {
            const T v = r * (g[j] * gamma[j] - xr[j] * r * mean_gx);
            out[j] = add ? out[j] + v : v;
          });
        });
  }

 private:
  std::string name_ = "kformer::RMSNorm";
  int dim_ = 0;
  double eps_ = 1e-5;
  Param<T, memory_space> weight_;
  GrowingBuffer<T, memory_space> rstd_{"kformer::RMSNorm::rstd"};
  GrowingBuffer<T, memory_space> partial_{"kformer::RMSNorm::partial"};
};

}  // namespace kformer
