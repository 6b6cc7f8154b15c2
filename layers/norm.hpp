// The normalisation of an encoder layer, chosen at run time: BatchNorm (TST's default) or
// LayerNorm (PyTorch's TransformerEncoderLayer). Both normalise (N, d) token matrices.
#pragma once

#include <string>

#include "../core/error.hpp"
#include "batch_norm.hpp"
#include "layer_norm.hpp"

namespace kformer {

enum class NormType { BatchNorm, LayerNorm };

inline NormType parse_norm(const std::string& name) {
  if (name == "batchnorm" || name == "BatchNorm") return NormType::BatchNorm;
  if (name == "layernorm" || name == "LayerNorm") return NormType::LayerNorm;
  fail("kformer::parse_norm", "unknown normalization '", name,
       "' (expected batchnorm or layernorm)");
}
inline const char* norm_name(NormType n) {
  return n == NormType::BatchNorm ? "batchnorm" : "layernorm";
}

template <class T, class ExecutionSpace>
class Norm {
 public:
  using memory_space = typename ExecutionSpace::memory_space;
  using Matrix = Tensor2<T, memory_space>;
  using ConstMatrix = Tensor2<const T, memory_space>;

  Norm() = default;
  Norm(const ExecutionSpace& exec, NormType type, int dim, const std::string& name) : type_(type) {
    if (type == NormType::BatchNorm)
      batch_ = BatchNorm<T, ExecutionSpace>(exec, dim, 1e-5, 0.1, name);
    else
      layer_ = LayerNorm<T, ExecutionSpace>(exec, dim, 1e-5, name);
  }

  NormType type() const { return type_; }
  BatchNorm<T, ExecutionSpace>& batch_norm() { return batch_; }
  LayerNorm<T, ExecutionSpace>& layer_norm() { return layer_; }

  template <class F>
  void visit_parameters(F&& f) {
    if (type_ == NormType::BatchNorm)
      batch_.visit_parameters(f);
    else
      layer_.visit_parameters(f);
  }
  template <class F>
  void visit_buffers(F&& f) {
    if (type_ == NormType::BatchNorm) batch_.visit_buffers(f);
  }
  void zero_grad(const ExecutionSpace& exec) {
    if (type_ == NormType::BatchNorm)
      batch_.zero_grad(exec);
    else
      layer_.zero_grad(exec);
  }
  void forward(const ExecutionSpace& exec, const RunContext& ctx, const ConstMatrix& x,
               const Matrix& y) {
    if (type_ == NormType::BatchNorm)
      batch_.forward(exec, ctx, x, y);
    else
      layer_.forward(exec, ctx, x, y);
  }
  void backward(const ExecutionSpace& exec, const ConstMatrix& x, const ConstMatrix& dy,
                const Matrix& dx, bool accumulate_dx = false) {
    if (type_ == NormType::BatchNorm)
      batch_.backward(exec, x, dy, dx, accumulate_dx);
    else
      layer_.backward(exec, x, dy, dx, accumulate_dx);
  }

 private:
  NormType type_ = NormType::BatchNorm;
  BatchNorm<T, ExecutionSpace> batch_;
  LayerNorm<T, ExecutionSpace> layer_;
};

}  // namespace kformer
