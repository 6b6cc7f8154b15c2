// Batch normalisation over the feature axis with statistics over all N = batch*seq tokens, as TST
// applies BatchNorm1d(d_model) to (batch, d_model, seq) (padded steps included).
//
// training:  mu_j = mean_n x[n,j],  var_j = mean_n (x[n,j] - mu_j)^2 (biased)
//            rstd = 1/sqrt(var + eps),  y = (x - mu) rstd gamma + beta
//            running_mean = (1 - m) running_mean + m mu
//            running_var  = (1 - m) running_var + m var N/(N-1)   (unbiased)
//            num_batches_tracked += 1
// eval:      y = (x - running_mean) / sqrt(running_var + eps) gamma + beta
// backward (training, xhat = (x - mu) rstd):
//            dx = gamma rstd / N (N dy - sum_n dy - xhat sum_n(dy xhat))
// backward (eval):  dx = dy gamma / sqrt(running_var + eps)
//            dgamma += sum_n dy xhat,  dbeta += sum_n dy
//
// Synchronised across replicas (PyTorch's SyncBatchNorm; set_replica_sums): the sums over n in
// the statistics and in dx run over every replica's tokens, N is their total; dgamma and dbeta
// keep this replica's own sums, which data-parallel training then adds up with the other
// gradients.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <Kokkos_Core.hpp>

#include "../backends/reduce.hpp"
#include "../backends/rows.hpp"
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
class BatchNorm {
 public:
  using memory_space = typename ExecutionSpace::memory_space;
  using Matrix = RowMajorView<Tensor2<T, memory_space>>;
  using ConstMatrix = RowMajorView<Tensor2<const T, memory_space>>;
  using Vector = Tensor1<T, memory_space>;

  BatchNorm() = default;
  BatchNorm(const ExecutionSpace& exec, int dim, double eps = 1e-5, double momentum = 0.1,
            std::string name = "kformer::BatchNorm")
      : name_(std::move(name)), dim_(dim), eps_(eps), momentum_(momentum) {
    if (dim < 1) fail(name_, "dim must be at least 1, got ", dim);
    weight_ = Param<T, memory_space>("weight", {dim});
    bias_ = Param<T, memory_space>("bias", {dim});
    Kokkos::deep_copy(exec, weight_.value, T(1));
    running_mean_ = Vector("kformer::BatchNorm::running_mean", dim);
    running_var_ = Vector("kformer::BatchNorm::running_var", dim);
    Kokkos::deep_copy(exec, running_var_, T(1));
    mean_ = Vector("kformer::BatchNorm::mean", dim);
    rstd_ = Vector("kformer::BatchNorm::rstd", dim);
    sum_dy_ = Vector("kformer::BatchNorm::sum_dy", dim);
    sum_dy_xhat_ = Vector("kformer::BatchNorm::sum_dy_xhat", dim);
  }

  // Sums over the replicas of data-parallel training: values(exec, device pointer, n) adds n
  // values in place over every replica, count(n) the token counts. Empty functions (the default):
  // statistics of this replica's batch alone.
  using ReplicaValueSum = std::function<void(const ExecutionSpace&, T*, std::int64_t)>;
  using ReplicaCountSum = std::function<std::int64_t(std::int64_t)>;
  void set_replica_sums(ReplicaValueSum values, ReplicaCountSum count) {
    replica_values_ = std::move(values);
    replica_count_ = std::move(count);
  }

  int dim() const { return dim_; }
  Param<T, memory_space>& weight() { return weight_; }
  Param<T, memory_space>& bias() { return bias_; }
  Vector running_mean() const { return running_mean_; }
  Vector running_var() const { return running_var_; }
  std::int64_t num_batches_tracked() const { return num_batches_tracked_; }
  void set_num_batches_tracked(std::int64_t n) { num_batches_tracked_ = n; }

  template <class F>
  void visit_parameters(F&& f) {
    f(std::string("weight"), weight_);
    f(std::string("bias"), bias_);
  }
  // Non-trainable state, by state_dict name (num_batches_tracked is a host counter).
  template <class F>
  void visit_buffers(F&& f) {
    f(std::string("running_mean"), running_mean_);
    f(std::string("running_var"), running_var_);
  }
  void zero_grad(const ExecutionSpace& exec) {
    fill(exec, T(0), weight_.grad);
    fill(exec, T(0), bias_.grad);
  }
  std::int64_t buffer_bytes() const {
    return std::int64_t(partial_.bytes()) + 4 * std::int64_t(dim_) * std::int64_t(sizeof(T));
  }

  // y = BatchNorm(x) with batch statistics (training) or running statistics (eval).
  //   x, y: (N, dim); y may be x.
  void forward(const ExecutionSpace& exec, const RunContext& ctx, const ConstMatrix& x,
               const Matrix& y) {
    const Where where{name_, "::forward"};
    const ProfilingRegion region(where);
    check_shape(where, "x", x, {-1, dim_});
    check_shape(where, "y", y, extents_of(x));
    const std::int64_t n = x.extent(0);
    training_ = ctx.training;
    const bool synchronised = training_ && replica_values_ != nullptr;
    n_total_ = synchronised ? replica_count_(n) : n;
    if (training_ && n_total_ < 2)
      fail(where, "training needs more than one value per channel, got x of shape ", shape_of(x));
    const Vector mean = mean_, rstd = rstd_, running_mean = running_mean_,
                 running_var = running_var_;
    const T eps = static_cast<T>(eps_);
    if (training_) {
      backends::column_reduce(
          exec, n, dim_, KOKKOS_LAMBDA(const std::int64_t i, const int j) { return x(i, j); }, mean,
          false, partial_);
      if (synchronised) replica_values_(exec, mean.data(), dim_);
      const T inv_n = T(1) / static_cast<T>(n_total_);
      Kokkos::parallel_for(
          KFORMER_LABEL("kformer::batch_norm::mean"),
          Kokkos::RangePolicy<ExecutionSpace>(exec, 0, dim_),
          KOKKOS_LAMBDA(const int j) { mean(j) *= inv_n; });
      backends::column_reduce(
          exec, n, dim_,
          KOKKOS_LAMBDA(const std::int64_t i, const int j) {
            return (x(i, j) - mean(j)) * (x(i, j) - mean(j));
          },
          rstd, false, partial_);
      if (synchronised) replica_values_(exec, rstd.data(), dim_);
      const T m = static_cast<T>(momentum_);
      const T unbiased = static_cast<T>(n_total_) / static_cast<T>(n_total_ - 1);
      Kokkos::parallel_for(
          KFORMER_LABEL("kformer::batch_norm::statistics"),
          Kokkos::RangePolicy<ExecutionSpace>(exec, 0, dim_), KOKKOS_LAMBDA(const int j) {
            const T var = rstd(j) * inv_n;
            rstd(j) = T(1) / compat::math::sqrt(var + eps);
            running_mean(j) = (T(1) - m) * running_mean(j) + m * mean(j);
            running_var(j) = (T(1) - m) * running_var(j) + m * var * unbiased;
          });
      ++num_batches_tracked_;
    } else {
      Kokkos::parallel_for(
          KFORMER_LABEL("kformer::batch_norm::running_statistics"),
          Kokkos::RangePolicy<ExecutionSpace>(exec, 0, dim_), KOKKOS_LAMBDA(const int j) {
            mean(j) = running_mean(j);
            rstd(j) = T(1) / compat::math::sqrt(running_var(j) + eps);
          });
    }
    const int d = dim_;
    const T* const gamma = weight_.value.data();
    const T* const beta = bias_.value.data();
    const T* const in = x.data();
    T* const out = y.data();
    const T* const mu = mean.data();
    const T* const rs = rstd.data();
    backends::for_each_row(
        exec, KFORMER_LABEL("kformer::batch_norm::normalize"), n,
        KOKKOS_LAMBDA(const typename Kokkos::TeamPolicy<ExecutionSpace>::member_type& team,
                      const std::int64_t i) {
          const T* const xi = in + i * d;
          T* const yi = out + i * d;
          backends::row_for(
              team, d, [=](const int j) { yi[j] = (xi[j] - mu[j]) * rs[j] * gamma[j] + beta[j]; });
        });
  }

  // dx (+)= d BatchNorm / dx for the last forward's mode; dgamma, dbeta accumulate.
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
    const Vector mean = mean_, rstd = rstd_, sum_dy = sum_dy_, sum_dy_xhat = sum_dy_xhat_;
    backends::column_reduce(
        exec, n, dim_, KOKKOS_LAMBDA(const std::int64_t i, const int j) { return dy(i, j); },
        sum_dy, false, partial_);
    backends::column_reduce(
        exec, n, dim_,
        KOKKOS_LAMBDA(const std::int64_t i, const int j) {
          return dy(i, j) * (x(i, j) - mean(j)) * rstd(j);
        },
        sum_dy_xhat, false, partial_);
    const Vector dgamma = weight_.grad, dbeta = bias_.grad;
    Kokkos::parallel_for(
        KFORMER_LABEL("kformer::batch_norm::parameter_grads"),
        Kokkos::RangePolicy<ExecutionSpace>(exec, 0, dim_), KOKKOS_LAMBDA(const int j) {
          dgamma(j) += sum_dy_xhat(j);
          dbeta(j) += sum_dy(j);
        });
    if (dx.data() == nullptr) return;
    // dx's sums run over every replica's tokens (dgamma and dbeta above keep this one's).
    const bool synchronised = training_ && replica_values_ != nullptr;
    if (synchronised) {
      replica_values_(exec, sum_dy.data(), dim_);
      replica_values_(exec, sum_dy_xhat.data(), dim_);
    }

    const int d = dim_;
    const bool training = training_;
    const T inv_n = T(1) / static_cast<T>(synchronised ? n_total_ : n);
    const T* const gamma = weight_.value.data();
    const T* const in = x.data();
    const T* const g = dy.data();
    T* const out = dx.data();
    const T* const mu = mean.data();
    const T* const rs = rstd.data();
    const T* const s_dy = sum_dy.data();
    const T* const s_dy_xhat = sum_dy_xhat.data();
    backends::for_each_row(
        exec, KFORMER_LABEL("kformer::batch_norm::backward"), n,
        KOKKOS_LAMBDA(const typename Kokkos::TeamPolicy<ExecutionSpace>::member_type& team,
                      const std::int64_t i) {
          const T* const xi = in + i * d;
          const T* const gi = g + i * d;
          T* const dxi = out + i * d;
          backends::row_for(team, d, [=](const int j) {
            const T scale = gamma[j] * rs[j];
            const T v = training ? scale * (gi[j] - inv_n * s_dy[j] -
                                            (xi[j] - mu[j]) * rs[j] * inv_n * s_dy_xhat[j])
                                 : scale * gi[j];
            dxi[j] = accumulate_dx ? dxi[j] + v : v;
          });
        });
  }

 private:
  std::string name_ = "kformer::BatchNorm";
  int dim_ = 0;
  double eps_ = 1e-5, momentum_ = 0.1;
  bool training_ = false;
  std::int64_t num_batches_tracked_ = 0;
  std::int64_t n_total_ = 0;  // tokens of the last training forward, over every replica when synced
  ReplicaValueSum replica_values_;
  ReplicaCountSum replica_count_;
  Param<T, memory_space> weight_, bias_;
  Vector running_mean_, running_var_;
  Vector mean_, rstd_;  // of the last forward: batch statistics, or the running ones in eval
  Vector sum_dy_, sum_dy_xhat_;
  GrowingBuffer<T, memory_space> partial_{"kformer::BatchNorm::partial"};
};

}  // namespace kformer
