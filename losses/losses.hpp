// Training losses and evaluation metrics. Each loss returns its value on the host (as a double,
// summed in double through DeterministicSum: the same bits for any thread count) and writes the
// gradient with respect to its prediction, ready for the model's backward. MSE can also leave its
// value on the device, so that a training step waits for nothing.
//
//   masked MSE (TST pretraining)   pred, target, mask: (B, S, F); N = sum mask
//     L = (1/N) sum_{mask=1} (pred - target)^2
//     dL/dpred = 2 (pred - target) / N where mask = 1, 0 elsewhere
//     N = 0 (nothing masked) gives L = 0 and a zero gradient rather than PyTorch's NaN, so that
//     an unlucky batch does not poison training.
//   MSE (regression)               pred, target: (B, n_out); N = B n_out
//     L = (1/N) sum (pred - target)^2,  dL/dpred = 2 (pred - target) / N
//   cross-entropy (classification) logits: (B, C), labels: (B) int32 in [0, C)
//     L = (1/B) sum_b [ log sum_j exp z_bj - z_b,y_b ]     (max-shifted log-sum-exp)
//     dL/dz_bj = (softmax(z_b)_j - [j = y_b]) / B
//   metrics                        correct_count: argmax (ties to the lowest index) = label;
//     error_sums: sum (pred - target)^2 and sum |pred - target|, for RMSE and MAE over a
//     dataset (the caller adds the batches' sums and divides by the total count).
//
// Elements with mask 0 never reach the loss or the gradient, even when they are NaN (missing
// values): they are selected, not multiplied by 0. Gradients may be written over their
// prediction (d_pred = pred, d_logits = logits); an empty gradient View skips the gradient.
#pragma once

#include <cstdint>
#include <string>

#include <Kokkos_Core.hpp>

#include "../backends/reduce.hpp"
#include "../core/compat.hpp"
#include "../core/error.hpp"
#include "../core/profiling.hpp"
#include "../core/tensor.hpp"
#include "deterministic_sum.hpp"

namespace kformer {

struct MaskedLoss {
  double loss = 0;         // mean over the counted elements (0 when there are none)
  std::int64_t count = 0;  // counted elements (mask = 1)
};

struct ErrorSums {
  double squared = 0;      // sum (pred - target)^2
  double absolute = 0;     // sum |pred - target|
  std::int64_t count = 0;  // elements summed
};

namespace detail {

// Throws Error(where: "labels(i) = y is outside [0, classes)") for the first such i.
template <class ExecutionSpace>
void check_labels(const ExecutionSpace& exec, const Where& where,
                  const Tensor1<const std::int32_t, typename ExecutionSpace::memory_space>& labels,
                  std::int64_t classes) {
  const auto bad = backends::first_outside(exec, KFORMER_LABEL("kformer::losses::check_labels"),
                                           labels, 0, classes - 1);
  if (bad.index < std::int64_t(labels.extent(0)))
    fail(where, "labels(", bad.index, ") = ", bad.value, " is outside [0, ", classes, ")");
}

}  // namespace detail

template <class T, class ExecutionSpace>
class Losses {
 public:
  using memory_space = typename ExecutionSpace::memory_space;
  using Tensor = Tensor3<T, memory_space>;
  using ConstTensor = Tensor3<const T, memory_space>;
  using Matrix = Tensor2<T, memory_space>;
  using ConstMatrix = Tensor2<const T, memory_space>;
  using ConstMask = Kokkos::View<const std::uint8_t***, Kokkos::LayoutRight, memory_space>;
  using ConstLabels = Tensor1<const std::int32_t, memory_space>;

  // Masked MSE over the elements with mask = 1 (masked by the noise mask, observed, not padding).
  //   pred, target, mask: (B, S, F); d_pred: (B, S, F) or empty.
  MaskedLoss masked_mse(const ExecutionSpace& exec, const ConstTensor& pred,
                        const ConstTensor& target, const ConstMask& mask, const Tensor& d_pred) {
    constexpr const char* where = "kformer::Losses::masked_mse";
    const ProfilingRegion region(where);
    check_shape(where, "target", target, extents_of(pred));
    check_shape(where, "mask", mask, extents_of(pred));
    if (d_pred.data() != nullptr) check_shape(where, "d_pred", d_pred, extents_of(pred));
    const std::int64_t n = pred.size();
    const T* const p = pred.data();
    const T* const t = target.data();
    const std::uint8_t* const m = mask.data();
    const auto sums = pair_sum_(
        exec, KFORMER_LABEL("kformer::losses::masked_mse"), n,
        KOKKOS_LAMBDA(const std::int64_t i, double* acc) {
          if (m[i]) {
            const double diff = static_cast<double>(p[i]) - static_cast<double>(t[i]);
            acc[0] += diff * diff;
            acc[1] += 1;
          }
        });
    MaskedLoss result;
    result.count = static_cast<std::int64_t>(sums[1]);
    result.loss = result.count > 0 ? sums[0] / sums[1] : 0.0;
    if (d_pred.data() == nullptr) return result;
    const T scale = result.count > 0 ? static_cast<T>(2.0 / sums[1]) : T(0);
    T* const g = d_pred.data();
    Kokkos::parallel_for(
        KFORMER_LABEL("kformer::losses::masked_mse_grad"),
        Kokkos::RangePolicy<ExecutionSpace, Kokkos::IndexType<std::int64_t>>(exec, 0, n),
        KOKKOS_LAMBDA(const std::int64_t i) { g[i] = m[i] ? (p[i] - t[i]) * scale : T(0); });
    return result;
  }

  // MSE over every element.   pred, target: (B, n_out), not empty; d_pred: (B, n_out) or empty.
  double mse(const ExecutionSpace& exec, const ConstMatrix& pred, const ConstMatrix& target,
             const Matrix& d_pred) {
    constexpr const char* where = "kformer::Losses::mse";
    const ProfilingRegion region(where);
    check_shape(where, "target", target, extents_of(pred));
    if (d_pred.data() != nullptr) check_shape(where, "d_pred", d_pred, extents_of(pred));
    if (pred.size() == 0)
      fail(where, "pred has shape ", shape_of(pred), ", expected at least one element");
    const std::int64_t n = pred.size();
    const T* const p = pred.data();
    const T* const t = target.data();
    T* const g = d_pred.data();
    const T scale = static_cast<T>(2.0 / static_cast<double>(n));
    // The gradient needs only n, so it is written by the reduction itself.
    const auto sum = scalar_sum_(
        exec, KFORMER_LABEL("kformer::losses::mse"), n,
        KOKKOS_LAMBDA(const std::int64_t i, double* acc) {
          const double diff = static_cast<double>(p[i]) - static_cast<double>(t[i]);
          acc[0] += diff * diff;
          if (g != nullptr) g[i] = (p[i] - t[i]) * scale;
        });
    return sum[0] / static_cast<double>(n);
  }

  // The same MSE and gradient, the loss left on the device in `loss` (a rank-0 View on exec's
  // memory space, same bits as the host form) and nothing waited for: a simulation's training step
  // need not synchronise to learn a value it may read later, or never. Shapes as above.
  void mse(const ExecutionSpace& exec, const ConstMatrix& pred, const ConstMatrix& target,
           const Matrix& d_pred, const Kokkos::View<double, memory_space>& loss) {
    constexpr const char* where = "kformer::Losses::mse";
    check_shape(where, "target", target, extents_of(pred));
    if (d_pred.data() != nullptr) check_shape(where, "d_pred", d_pred, extents_of(pred));
    if (pred.size() == 0)
      fail(where, "pred has shape ", shape_of(pred), ", expected at least one element");
    if (loss.data() == nullptr) fail(where, "loss is an empty View, expected a rank-0 View");
    const std::int64_t n = pred.size();
    const T* const p = pred.data();
    const T* const t = target.data();
    T* const g = d_pred.data();
    const T scale = static_cast<T>(2.0 / static_cast<double>(n));
    const double count = static_cast<double>(n);
    const Kokkos::View<double, memory_space> out = loss;
    scalar_sum_.on_device(
        exec, KFORMER_LABEL("kformer::losses::mse"), n,
        KOKKOS_LAMBDA(const std::int64_t i, double* acc) {
          const double diff = static_cast<double>(p[i]) - static_cast<double>(t[i]);
          acc[0] += diff * diff;
          if (g != nullptr) g[i] = (p[i] - t[i]) * scale;
        },
        KOKKOS_LAMBDA(const double* total) { out() = total[0] / count; });
  }

  // Cross-entropy with logits, mean over the batch.
  //   logits: (B, C), B >= 1, C >= 1; labels: (B) in [0, C); d_logits: (B, C) or empty.
  // An out-of-range label is an Error naming its index and value, found before anything is
  // written.
  double cross_entropy(const ExecutionSpace& exec, const ConstMatrix& logits,
                       const ConstLabels& labels, const Matrix& d_logits) {
    constexpr const char* where = "kformer::Losses::cross_entropy";
    const ProfilingRegion region(where);
    check_classification(exec, where, logits, labels);
    if (d_logits.data() != nullptr) check_shape(where, "d_logits", d_logits, extents_of(logits));
    const std::int64_t batch = logits.extent(0);
    const int classes = static_cast<int>(logits.extent(1));
    const T inv_batch = static_cast<T>(1.0 / static_cast<double>(batch));
    const bool write_grad = d_logits.data() != nullptr;
    const Matrix grad = d_logits;
    const auto sum = scalar_sum_(
        exec, KFORMER_LABEL("kformer::losses::cross_entropy"), batch,
        KOKKOS_LAMBDA(const std::int64_t b, double* acc) {
          T max = logits(b, 0);
          for (int j = 1; j < classes; ++j)
            max = logits(b, j) > max ? logits(b, j) : max;
          T sum_exp = 0;
          for (int j = 0; j < classes; ++j)
            sum_exp += compat::math::exp(logits(b, j) - max);
          const int y = labels(b);
          // log sum_j exp z_j - z_y = log sum_j exp(z_j - max) - (z_y - max)
          acc[0] += static_cast<double>(compat::math::log(sum_exp)) -
                    static_cast<double>(logits(b, y) - max);
          if (!write_grad) return;
          const T inv_sum = T(1) / sum_exp;
          for (int j = 0; j < classes; ++j) {
            const T softmax = compat::math::exp(logits(b, j) - max) * inv_sum;
            grad(b, j) = (j == y ? softmax - T(1) : softmax) * inv_batch;
          }
        });
    return sum[0] / static_cast<double>(batch);
  }

  // The rows whose argmax (the lowest index among equal maxima) is their label.
  //   logits: (B, C), C >= 1; labels: (B) in [0, C).
  std::int64_t correct_count(const ExecutionSpace& exec, const ConstMatrix& logits,
                             const ConstLabels& labels) {
    constexpr const char* where = "kformer::Losses::correct_count";
    const ProfilingRegion region(where);
    check_classification(exec, where, logits, labels);
    const int classes = static_cast<int>(logits.extent(1));
    const auto sum = scalar_sum_(
        exec, KFORMER_LABEL("kformer::losses::correct_count"), logits.extent(0),
        KOKKOS_LAMBDA(const std::int64_t b, double* acc) {
          int best = 0;
          for (int j = 1; j < classes; ++j)
            if (logits(b, j) > logits(b, best)) best = j;
          if (best == labels(b)) acc[0] += 1;
        });
    return static_cast<std::int64_t>(sum[0]);
  }

  // Sums of squared and absolute errors.   pred, target: (B, n_out).
  ErrorSums error_sums(const ExecutionSpace& exec, const ConstMatrix& pred,
                       const ConstMatrix& target) {
    constexpr const char* where = "kformer::Losses::error_sums";
    const ProfilingRegion region(where);
    check_shape(where, "target", target, extents_of(pred));
    const T* const p = pred.data();
    const T* const t = target.data();
    const std::int64_t n = pred.size();
    const auto sums = pair_sum_(
        exec, KFORMER_LABEL("kformer::losses::error_sums"), n,
        KOKKOS_LAMBDA(const std::int64_t i, double* acc) {
          const double diff = static_cast<double>(p[i]) - static_cast<double>(t[i]);
          acc[0] += diff * diff;
          acc[1] += diff < 0 ? -diff : diff;
        });
    return ErrorSums{sums[0], sums[1], n};
  }

 private:
  static void check_classification(const ExecutionSpace& exec, const Where& where,
                                   const ConstMatrix& logits, const ConstLabels& labels) {
    if (logits.extent(0) == 0 || logits.extent(1) == 0)
      fail(where, "logits has shape ", shape_of(logits), ", expected at least one row and class");
    check_shape(where, "labels", labels, {static_cast<std::int64_t>(logits.extent(0))});
    detail::check_labels(exec, where, labels, static_cast<std::int64_t>(logits.extent(1)));
  }

  DeterministicSum<ExecutionSpace, 1> scalar_sum_;
  DeterministicSum<ExecutionSpace, 2> pair_sum_;
};

}  // namespace kformer
