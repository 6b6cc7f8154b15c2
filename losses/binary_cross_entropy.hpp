// Binary cross-entropy with logits, the loss of multi-label targets such as a molecular
// fingerprint's bits (PyTorch's BCEWithLogitsLoss, mean reduction):
//
//   L = (1/N) sum [ softplus(z) - y z ],   softplus(z) = max(z, 0) + log(1 + exp(-|z|))
//   dL/dz = (sigmoid(z) - y) / N,          N = B K
//
//   logits, targets: (B, K), targets in [0, 1]; d_logits: (B, K) or empty (no gradient). The
// value is summed in double through DeterministicSum (the same bits for any thread count) and
// returned on the host; the gradient is written by the same pass.
#pragma once

#include <string>

#include <Kokkos_Core.hpp>

#include "../core/compat.hpp"
#include "../core/error.hpp"
#include "../core/profiling.hpp"
#include "../core/tensor.hpp"
#include "deterministic_sum.hpp"

namespace kformer {

template <class T, class ExecutionSpace>
class BinaryCrossEntropy {
 public:
  using memory_space = typename ExecutionSpace::memory_space;
  using Matrix = Tensor2<T, memory_space>;
  using ConstMatrix = Tensor2<const T, memory_space>;

  double operator()(const ExecutionSpace& exec, const ConstMatrix& logits,
                    const ConstMatrix& targets, const Matrix& d_logits) {
    constexpr const char* where = "kformer::BinaryCrossEntropy";
    const ProfilingRegion region(where);
    check_shape(where, "targets", targets, extents_of(logits));
    if (d_logits.data() != nullptr) check_shape(where, "d_logits", d_logits, extents_of(logits));
    if (logits.size() == 0)
      fail(where, "logits has shape ", shape_of(logits), ", expected at least one element");
    const std::int64_t n = logits.size();
    const T* const z = logits.data();
    const T* const y = targets.data();
    T* const g = d_logits.data();
    const T scale = static_cast<T>(1.0 / static_cast<double>(n));
    const auto sum = sum_(
        exec, KFORMER_LABEL("kformer::losses::binary_cross_entropy"), n,
        KOKKOS_LAMBDA(const std::int64_t i, double* acc) {
          const T zi = z[i];
          const T e = compat::math::exp(zi < T(0) ? zi : -zi);  // exp(-|z|), in (0, 1]
          const T softplus = (zi > T(0) ? zi : T(0)) + compat::math::log1p(e);
          acc[0] +=
              static_cast<double>(softplus) - static_cast<double>(y[i]) * static_cast<double>(zi);
          if (g != nullptr) {
            const T sigmoid = zi >= T(0) ? T(1) / (T(1) + e) : e / (T(1) + e);
            g[i] = (sigmoid - y[i]) * scale;
          }
        });
    return sum[0] / static_cast<double>(n);
  }

 private:
  DeterministicSum<ExecutionSpace, 1> sum_;
};

}  // namespace kformer
