// All parameters of a model in one contiguous value buffer and one gradient buffer (llm.c's
// layout): each layer's Params become views into them, so that the optimizer is one kernel over
// the buffer, gradient clipping one reduction, and a data-parallel allreduce one call.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <Kokkos_Core.hpp>

#include "param.hpp"
#include "tensor.hpp"

namespace kformer {

template <class T, class MemorySpace>
class ParameterBuffer {
 public:
  struct Entry {
    std::string name;                 // state_dict name
    std::vector<std::int64_t> shape;  // PyTorch shape
    std::int64_t offset = 0, numel = 0;
  };

  ParameterBuffer() = default;

  // Moves every parameter a model's visit_parameters(f(name, Param&)) reaches into the two
  // buffers, in visit order, keeping their current values; gradients start at zero.
  template <class ExecutionSpace, class Model>
  void gather(const ExecutionSpace& exec, Model& model) {
    entries_.clear();
    std::int64_t total = 0;
    model.visit_parameters([&](const std::string& name, Param<T, MemorySpace>& p) {
      entries_.push_back({name, p.shape, total, p.numel()});
      total += p.numel();
    });
    values_ = Tensor1<T, MemorySpace>("kformer::parameters", total);
    grads_ = Tensor1<T, MemorySpace>("kformer::gradients", total);
    std::size_t i = 0;
    model.visit_parameters([&](const std::string&, Param<T, MemorySpace>& p) {
      const Entry& e = entries_[i++];
      const auto range = std::make_pair(e.offset, e.offset + e.numel);
      const auto value = Kokkos::subview(values_, range);
      Kokkos::deep_copy(exec, value, p.value);
      p.value = Tensor1<T, MemorySpace>(value.data(), e.numel);
      p.grad = Tensor1<T, MemorySpace>(grads_.data() + e.offset, e.numel);
    });
    exec.fence();
  }

  Tensor1<T, MemorySpace> values() const { return values_; }
  Tensor1<T, MemorySpace> grads() const { return grads_; }
  std::int64_t size() const { return static_cast<std::int64_t>(values_.size()); }
  const std::vector<Entry>& entries() const { return entries_; }
  // The entry called `name`, or nullptr.
  const Entry* find(const std::string& name) const {
    for (const auto& e : entries_)
      if (e.name == name) return &e;
    return nullptr;
  }

 private:
  std::vector<Entry> entries_;
  Tensor1<T, MemorySpace> values_, grads_;
};

}  // namespace kformer
