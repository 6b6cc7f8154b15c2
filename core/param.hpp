// A trainable parameter: its value and gradient, flat and contiguous, with its PyTorch shape.
//
// Layers read them through typed views built on the fly (`matrix_of(p.value, rows, cols)`), so
// a model can move every parameter into one contiguous buffer (see ParameterBuffer) by pointing
// `value` and `grad` into it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <Kokkos_Core.hpp>

#include "tensor.hpp"

namespace kformer {

template <class T, class MemorySpace>
struct Param {
  std::string name;                 // state_dict name relative to its layer ("weight")
  std::vector<std::int64_t> shape;  // PyTorch shape ({out, in} for a Linear weight)
  Tensor1<T, MemorySpace> value;
  Tensor1<T, MemorySpace> grad;

  Param() = default;
  Param(std::string param_name, std::vector<std::int64_t> param_shape)
      : name(std::move(param_name)), shape(std::move(param_shape)) {
    value = Tensor1<T, MemorySpace>("kformer::param::" + name, numel());
    grad = Tensor1<T, MemorySpace>("kformer::grad::" + name, numel());
  }

  std::int64_t numel() const {
    std::int64_t n = 1;
    for (auto e : shape)
      n *= e;
    return n;
  }
};

// A row-major (rows, cols) view of a flat parameter, same memory.
template <class T, class MemorySpace>
Tensor2<T, MemorySpace> matrix_of(const Tensor1<T, MemorySpace>& flat, std::int64_t rows,
                                  std::int64_t cols) {
  return Tensor2<T, MemorySpace>(flat.data(), rows, cols);
}

}  // namespace kformer
