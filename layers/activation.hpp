// Elementwise activations: GELU (exact erf form, PyTorch's default) and ReLU. Float uses the
// vectorisable erf and exp of core/math.hpp (relative error below 4e-7).
//
//   GELU:  y = x Phi(x) = x (1 + erf(x / sqrt 2)) / 2,    dy/dx = Phi(x) + x phi(x)
//   ReLU:  y = max(x, 0),                                 dy/dx = [x > 0]
#pragma once

#include <cstdint>
#include <string>

#include <Kokkos_Core.hpp>

#include "../backends/for_each.hpp"
#include "../core/compat.hpp"
#include "../core/error.hpp"
#include "../core/layer.hpp"
#include "../core/math.hpp"
#include "../core/profiling.hpp"
#include "../core/run_context.hpp"
#include "../core/tensor.hpp"

namespace kformer {

enum class Activation { GELU, ReLU };

inline Activation parse_activation(const std::string& name) {
  if (name == "gelu") return Activation::GELU;
  if (name == "relu") return Activation::ReLU;
  fail("kformer::parse_activation", "unknown activation '", name, "' (expected gelu or relu)");
}
inline const char* activation_name(Activation a) {
  return a == Activation::GELU ? "gelu" : "relu";
}

template <class T>
KOKKOS_INLINE_FUNCTION T activation_value(Activation a, T x) {
  if (a == Activation::ReLU) return x > T(0) ? x : T(0);
  constexpr T inv_sqrt2 = T(0.70710678118654752440);
  return T(0.5) * x * (T(1) + math::erf(x * inv_sqrt2));
}

// d activation(x) / dx
template <class T>
KOKKOS_INLINE_FUNCTION T activation_derivative(Activation a, T x) {
  if (a == Activation::ReLU) return x > T(0) ? T(1) : T(0);
  constexpr T inv_sqrt2 = T(0.70710678118654752440), inv_sqrt_2pi = T(0.39894228040143267794);
  const T cdf = T(0.5) * (T(1) + math::erf(x * inv_sqrt2));
  return cdf + x * inv_sqrt_2pi * math::exp_nonpositive(T(-0.5) * x * x);
}

// y = act(x), elementwise over contiguous views of equal size (y may be x).
template <class ExecutionSpace, class XView, class YView>
void activation_forward(const ExecutionSpace& exec, Activation a, const XView& x, const YView& y) {
  using T = typename YView::non_const_value_type;
  if (x.size() != y.size())
    fail("kformer::activation_forward", "x has shape ", shape_of(x), ", y has shape ", shape_of(y));
  const T* const in = x.data();
  T* const out = y.data();
  // One kernel per activation: a loop without the runtime choice inside vectorises.
  if (a == Activation::GELU)
    backends::for_each_index(
        exec, KFORMER_LABEL("kformer::activation::forward"), std::int64_t(y.size()),
        KOKKOS_LAMBDA(const std::int64_t i) {
          out[i] = activation_value(Activation::GELU, in[i]);
        });
  else
    backends::for_each_index(
        exec, KFORMER_LABEL("kformer::activation::forward"), std::int64_t(y.size()),
        KOKKOS_LAMBDA(const std::int64_t i) {
          out[i] = activation_value(Activation::ReLU, in[i]);
        });
}

// dx = dy * act'(x) (dx += with WriteMode::Add), elementwise (dx may be dy).
template <class ExecutionSpace, class XView, class DYView, class DXView>
void activation_backward(const ExecutionSpace& exec, Activation a, const XView& x, const DYView& dy,
                         const DXView& dx, WriteMode mode = WriteMode::Assign) {
  using T = typename DXView::non_const_value_type;
  if (x.size() != dy.size() || x.size() != dx.size())
    fail("kformer::activation_backward", "x, dy and dx must have the same size, got ", shape_of(x),
         ", ", shape_of(dy), ", ", shape_of(dx));
  const T* const in = x.data();
  const T* const g = dy.data();
  T* const out = dx.data();
  const bool add = mode == WriteMode::Add;
  if (a == Activation::GELU)
    backends::for_each_index(
        exec, KFORMER_LABEL("kformer::activation::backward"), std::int64_t(x.size()),
        KOKKOS_LAMBDA(const std::int64_t i) {
          const T v = g[i] * activation_derivative(Activation::GELU, in[i]);
          out[i] = add ? out[i] + v : v;
        });
  else
    backends::for_each_index(
        exec, KFORMER_LABEL("kformer::activation::backward"), std::int64_t(x.size()),
        KOKKOS_LAMBDA(const std::int64_t i) {
          const T v = g[i] * activation_derivative(Activation::ReLU, in[i]);
          out[i] = add ? out[i] + v : v;
        });
}

// An activation as a layer (for containers of layers): no parameters, any shape.
template <class T, class ExecutionSpace>
class ActivationLayer {
 public:
  using memory_space = typename ExecutionSpace::memory_space;

  ActivationLayer() = default;
  ActivationLayer(const ExecutionSpace&, Activation activation) : activation_(activation) {}

  Activation activation() const { return activation_; }
  template <class F>
  void visit_parameters(F&&) {}
  template <class F>
  void visit_buffers(F&&) {}
  void zero_grad(const ExecutionSpace&) {}
  std::int64_t buffer_bytes() const { return 0; }

  // y = act(x); y may be x.
  template <class XView, class YView>
  void forward(const ExecutionSpace& exec, const RunContext&, const XView& x, const YView& y) {
    activation_forward(exec, activation_, x, y);
  }
  // dx (+)= dy * act'(x); x is the forward's input (not its output, so y may not have been x).
  template <class XView, class DYView, class DXView>
  void backward(const ExecutionSpace& exec, const RunContext&, const XView& x, const DYView& dy,
                const DXView& dx, WriteMode dx_mode = WriteMode::Assign) {
    activation_backward(exec, activation_, x, dy, dx, dx_mode);
  }

 private:
  Activation activation_ = Activation::GELU;
};

}  // namespace kformer
