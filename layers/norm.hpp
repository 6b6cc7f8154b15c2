// The normalisations an encoder layer can use, chosen at run time by name. The registry of norm
// kinds is norm_kinds.hpp (names, for configs and the command line, without Kokkos) and
// NormVariant below (the classes, whose visit_parameters and visit_buffers give the state_dict
// names). Adding a kind: its header, its entry in both, and its tests (docs/architecture.md).
//
//   batchnorm  BatchNorm1d over the tokens of the batch (TST's default)
//   layernorm  LayerNorm over the features (PyTorch's TransformerEncoderLayer)
//   rmsnorm    RMSNorm over the features (LLaMA-style transformers; weight only)
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <variant>

#include "../core/error.hpp"
#include "../core/layer.hpp"
#include "../core/view_adapters.hpp"
#include "batch_norm.hpp"
#include "layer_norm.hpp"
#include "norm_kinds.hpp"
#include "rms_norm.hpp"

namespace kformer {

// Alternatives in NormType order.
template <class T, class ExecutionSpace>
using NormVariant = std::variant<BatchNorm<T, ExecutionSpace>, LayerNorm<T, ExecutionSpace>,
                                 RMSNorm<T, ExecutionSpace>>;

inline NormType parse_norm(const std::string& name) {
  for (const auto& kind : kNormKinds)
    if (name == kind.name || name == kind.pytorch_name) return kind.type;
  fail("kformer::parse_norm", "unknown normalization '", name, "' (expected ", norm_names(), ")");
}
inline const char* norm_name(NormType type) {
  for (const auto& kind : kNormKinds)
    if (kind.type == type) return kind.name;
  return "unknown";
}

// A normalisation of (N, d) token matrices of the kind named at construction.
template <class T, class ExecutionSpace>
class Norm {
 public:
  using memory_space = typename ExecutionSpace::memory_space;
  using Matrix = RowMajorView<Tensor2<T, memory_space>>;
  using ConstMatrix = RowMajorView<Tensor2<const T, memory_space>>;

  Norm() = default;
  Norm(const ExecutionSpace& exec, NormType type, int dim, const std::string& name)
      : norm_(make(exec, type, dim, name)) {}

  NormType type() const { return static_cast<NormType>(norm_.index()); }
  // The layer itself, for a caller that knows its kind (BatchNorm's running statistics).
  template <class Layer>
  Layer* get() {
    return std::get_if<Layer>(&norm_);
  }

  template <class F>
  void visit_parameters(F&& f) {
    std::visit([&](auto& n) { n.visit_parameters(f); }, norm_);
  }
  template <class F>
  void visit_buffers(F&& f) {
    std::visit([&](auto& n) { n.visit_buffers(f); }, norm_);
  }
  void zero_grad(const ExecutionSpace& exec) {
    std::visit([&](auto& n) { n.zero_grad(exec); }, norm_);
  }
  std::int64_t buffer_bytes() const {
    return std::visit([](const auto& n) { return n.buffer_bytes(); }, norm_);
  }
  void forward(const ExecutionSpace& exec, const RunContext& ctx, const ConstMatrix& x,
               const Matrix& y) {
    std::visit([&](auto& n) { n.forward(exec, ctx, x, y); }, norm_);
  }
  void backward(const ExecutionSpace& exec, const RunContext& ctx, const ConstMatrix& x,
                const ConstMatrix& dy, const Matrix& dx, WriteMode dx_mode = WriteMode::Assign) {
    std::visit([&](auto& n) { n.backward(exec, ctx, x, dy, dx, dx_mode); }, norm_);
  }

 private:
  // The kind's layer with its defaults (eps 1e-5, BatchNorm's momentum 0.1), as PyTorch's.
  static NormVariant<T, ExecutionSpace> make(const ExecutionSpace& exec, NormType type, int dim,
                                             const std::string& name) {
    switch (type) {
      case NormType::BatchNorm:
        return BatchNorm<T, ExecutionSpace>(exec, dim, 1e-5, 0.1, name);
      case NormType::LayerNorm:
        return LayerNorm<T, ExecutionSpace>(exec, dim, 1e-5, name);
      case NormType::RMSNorm:
        return RMSNorm<T, ExecutionSpace>(exec, dim, 1e-5, name);
    }
    fail(name, "unknown normalization type ", static_cast<int>(type));
  }

  NormVariant<T, ExecutionSpace> norm_;
};

}  // namespace kformer
