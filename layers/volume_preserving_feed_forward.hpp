// Volume-preserving feed-forward layers (GeometricMachineLearning.jl's VolumePreservingLowerLayer,
// VolumePreservingUpperLayer and VolumePreservingFeedForward), applied to every token.
//
//   lower:  y = x + σ(S x + b),  S strictly lower triangular (S_ij = 0 for j >= i)
//   upper:  y = x + σ(S x + b),  S strictly upper triangular (S_ij = 0 for j <= i)
//
// y_i depends on x_i only through the identity (S has no diagonal), so the Jacobian
// I + diag(σ'(S x + b)) S is triangular with ones on its diagonal: det J = 1 for every x and every
// parameter value, i.e. each layer, and any stack of them, preserves volume exactly (up to
// rounding). σ is tanh or the identity (the "linear" layers).
//
// Layout: tokens are rows, (N, dim) LayoutRight, N = batch * seq (Julia's column-major (dim, N)).
// S is stored packed, its dim*(dim-1)/2 free entries only (GeometricMachineLearning's
// LowerTriangular/UpperTriangular): entry (i, j) of the lower layer, j < i, at i*(i-1)/2 + j, and
// entry (i, j) of the upper layer, i < j, at j*(j-1)/2 + i (the transpose's).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <Kokkos_Core.hpp>

#include "../core/error.hpp"
#include "../core/layer.hpp"
#include "../core/param.hpp"
#include "../core/profiling.hpp"
#include "../core/random.hpp"
#include "../core/run_context.hpp"
#include "../core/tensor.hpp"
#include "../core/view_adapters.hpp"
#include "../core/workspace.hpp"
#include "elementwise.hpp"

namespace kformer {

enum class Triangle { Lower, Upper };
enum class VolumePreservingActivation { Identity, Tanh };

struct VolumePreservingTriangularOptions {
  VolumePreservingActivation activation = VolumePreservingActivation::Tanh;
  bool bias = true;
  std::uint64_t seed = 0;
};

namespace impl {

// Index of entry (i, j) of the strictly triangular matrix in its packed storage, or -1 where the
// entry is structurally zero.
KOKKOS_INLINE_FUNCTION int packed_index(bool lower, int i, int j) {
  if (lower) return j < i ? i * (i - 1) / 2 + j : -1;
  return i < j ? j * (j - 1) / 2 + i : -1;
}

}  // namespace impl

template <class T, class ExecutionSpace>
class VolumePreservingTriangular {
 public:
  using execution_space = ExecutionSpace;
  using memory_space = typename ExecutionSpace::memory_space;
  using Matrix = RowMajorView<Tensor2<T, memory_space>>;
  using ConstMatrix = RowMajorView<Tensor2<const T, memory_space>>;

  VolumePreservingTriangular() = default;
  VolumePreservingTriangular(const ExecutionSpace& exec, int dim, Triangle triangle,
                             const VolumePreservingTriangularOptions& options = {},
                             std::string name = "kformer::VolumePreservingTriangular")
      : name_(std::move(name)),
        dim_(dim),
        lower_(triangle == Triangle::Lower),
        tanh_(options.activation == VolumePreservingActivation::Tanh),
        has_bias_(options.bias) {
    if (dim < 2)
      fail(name_, "dim must be at least 2 (a triangle needs two coordinates), got ", dim);
    weight_ = Param<T, memory_space>("weight", {std::int64_t(dim) * (dim - 1) / 2});
    const double bound = 1.0 / std::sqrt(static_cast<double>(dim));
    fill_uniform(exec, weight_.value, -bound, bound, derive_seed(options.seed, "weight"));
    if (has_bias_) {
      bias_ = Param<T, memory_space>("bias", {dim});
      fill_uniform(exec, bias_.value, -bound, bound, derive_seed(options.seed, "bias"));
    }
  }

  int dim() const { return dim_; }
  Triangle triangle() const { return lower_ ? Triangle::Lower : Triangle::Upper; }

  template <class F>
  void visit_parameters(F&& f) {
    f(std::string("weight"), weight_);
    if (has_bias_) f(std::string("bias"), bias_);
  }
  template <class F>
  void visit_buffers(F&&) {}
  void zero_grad(const ExecutionSpace& exec) {
    fill(exec, T(0), weight_.grad);
    if (has_bias_) fill(exec, T(0), bias_.grad);
  }
  std::int64_t buffer_bytes() const { return std::int64_t(gates_.bytes()); }

  // y = x + σ(S x + b) for every row.   x, y: (N, dim), distinct
  void forward(const ExecutionSpace& exec, const RunContext&, const ConstMatrix& x,
               const Matrix& y) const {
    const Where where{name_, "::forward"};
    const ProfilingRegion region(where);
    check_shape(where, "x", x, {-1, dim_});
    check_shape(where, "y", y, extents_of(x));
    check_distinct(where, "x", x, "y", y);
    const auto w = weight_.value;
    const auto b = bias_.value;
    const int d = dim_;
    const bool lower = lower_, tanh_act = tanh_, bias = has_bias_;
    Kokkos::parallel_for(
        KFORMER_LABEL("kformer::VolumePreservingTriangular::forward"),
        Kokkos::RangePolicy<ExecutionSpace>(exec, 0, std::int64_t(x.extent(0)) * d),
        KOKKOS_LAMBDA(const std::int64_t idx) {
          const std::int64_t n = idx / d;
          const int i = static_cast<int>(idx % d);
          const T a = pre_activation(w, b, bias, lower, x, n, i, d);
          y(n, i) = x(n, i) + (tanh_act ? compat::math::tanh(a) : a);
        });
  }

  // With g = dy ⊙ σ'(S x + b):  dS_ij += Σ_n g_ni x_nj,  db += Σ_n g_n,  dx = dy + g S
  // (+= with WriteMode::Add); dx may be empty.   x: the forward's input (N, dim), dy, dx: (N, dim)
  void backward(const ExecutionSpace& exec, const RunContext&, const ConstMatrix& x,
                const ConstMatrix& dy, const Matrix& dx, WriteMode dx_mode = WriteMode::Assign) {
    const Where where{name_, "::backward"};
    const ProfilingRegion region(where);
    check_shape(where, "x", x, {-1, dim_});
    check_shape(where, "dy", dy, extents_of(x));
    if (dx.data() != nullptr) check_shape(where, "dx", dx, extents_of(x));
    const std::int64_t rows = x.extent(0);
    const int d = dim_;
    const bool lower = lower_, tanh_act = tanh_, bias = has_bias_;
    const auto w = weight_.value;
    const auto b = bias_.value;
    auto g = gates_.view(rows, d);
    Kokkos::parallel_for(
        KFORMER_LABEL("kformer::VolumePreservingTriangular::gates"),
        Kokkos::RangePolicy<ExecutionSpace>(exec, 0, rows * d),
        KOKKOS_LAMBDA(const std::int64_t idx) {
          const std::int64_t n = idx / d;
          const int i = static_cast<int>(idx % d);
          T slope = T(1);
          if (tanh_act) {
            const T t = compat::math::tanh(pre_activation(w, b, bias, lower, x, n, i, d));
            slope = T(1) - t * t;
          }
          g(n, i) = dy(n, i) * slope;
        });
    if (dx.data() != nullptr) {
      const bool add = dx_mode == WriteMode::Add;
      Kokkos::parallel_for(
          KFORMER_LABEL("kformer::VolumePreservingTriangular::input_gradient"),
          Kokkos::RangePolicy<ExecutionSpace>(exec, 0, rows * d),
          KOKKOS_LAMBDA(const std::int64_t idx) {
            const std::int64_t n = idx / d;
            const int j = static_cast<int>(idx % d);
            T sum = dy(n, j);
            for (int i = 0; i < d; ++i) {
              const int p = impl::packed_index(lower, i, j);
              if (p >= 0) sum += g(n, i) * w(p);
            }
            dx(n, j) = add ? dx(n, j) + sum : sum;
          });
    }
    // One team per parameter entry (the packed weights, then the biases) sums over the rows: the
    // same order at every call, so the same bits.
    const int n_weights = d * (d - 1) / 2;
    const auto dw = weight_.grad;
    const auto db = bias_.grad;
    using Team = typename Kokkos::TeamPolicy<ExecutionSpace>::member_type;
    Kokkos::parallel_for(
        KFORMER_LABEL("kformer::VolumePreservingTriangular::parameter_gradients"),
        Kokkos::TeamPolicy<ExecutionSpace>(exec, n_weights + (bias ? d : 0), Kokkos::AUTO),
        KOKKOS_LAMBDA(const Team& team) {
          const int entry = team.league_rank();
          int i = 0, j = 0;
          if (entry < n_weights) {
            // Invert the packed index: row r of the lower storage holds r entries.
            int r = 1;
            while ((r + 1) * r / 2 <= entry)
              ++r;
            const int c = entry - r * (r - 1) / 2;
            i = lower ? r : c;
            j = lower ? c : r;
          }
          T sum = T(0);
          Kokkos::parallel_reduce(
              Kokkos::TeamThreadRange(team, rows),
              [&](const std::int64_t n, T& acc) {
                acc += entry < n_weights ? g(n, i) * x(n, j) : g(n, entry - n_weights);
              },
              sum);
          Kokkos::single(Kokkos::PerTeam(team), [&]() {
            if (entry < n_weights)
              dw(entry) += sum;
            else
              db(entry - n_weights) += sum;
          });
        });
  }

 private:
  template <class W, class B, class X>
  KOKKOS_INLINE_FUNCTION static T pre_activation(const W& w, const B& b, bool bias, bool lower,
                                                 const X& x, std::int64_t n, int i, int d) {
    T a = bias ? b(i) : T(0);
    for (int j = 0; j < d; ++j) {
      const int p = impl::packed_index(lower, i, j);
      if (p >= 0) a += w(p) * x(n, j);
    }
    return a;
  }

  std::string name_ = "kformer::VolumePreservingTriangular";
  int dim_ = 0;
  bool lower_ = true, tanh_ = true, has_bias_ = true;
  Param<T, memory_space> weight_, bias_;
  GrowingBuffer<T, memory_space> gates_{"kformer::VolumePreservingTriangular::gates"};
};

struct VolumePreservingFeedForwardOptions {
  int n_blocks = 1;  // blocks of linear and nonlinear layers
  int n_linear = 1;  // lower/upper pairs of linear layers per block
  VolumePreservingActivation activation = VolumePreservingActivation::Tanh;
  bool init_upper = false;  // the first layer of each pair is upper (else lower)
  std::uint64_t seed = 0;
};

// GeometricMachineLearning.jl's VolumePreservingFeedForward: for each of n_blocks blocks, n_linear
// (lower, upper) pairs of linear layers (the last of them with a bias), then a nonlinear (lower,
// upper) pair with biases; and a final linear (lower, upper) pair with the upper's bias. (upper,
// lower) with init_upper. Every layer has det J = 1, so the stack has too.
template <class T, class ExecutionSpace>
class VolumePreservingFeedForward {
 public:
  using execution_space = ExecutionSpace;
  using memory_space = typename ExecutionSpace::memory_space;
  using Matrix = RowMajorView<Tensor2<T, memory_space>>;
  using ConstMatrix = RowMajorView<Tensor2<const T, memory_space>>;
  using Layer = VolumePreservingTriangular<T, ExecutionSpace>;

  VolumePreservingFeedForward() = default;
  VolumePreservingFeedForward(const ExecutionSpace& exec, int dim,
                              const VolumePreservingFeedForwardOptions& options = {},
                              std::string name = "kformer::VolumePreservingFeedForward")
      : name_(std::move(name)), dim_(dim) {
    if (options.n_blocks < 0 || options.n_linear < 1)
      fail(name_, "n_blocks must be at least 0 and n_linear at least 1, got ", options.n_blocks,
           " and ", options.n_linear);
    const Triangle first = options.init_upper ? Triangle::Upper : Triangle::Lower;
    const Triangle second = options.init_upper ? Triangle::Lower : Triangle::Upper;
    const auto add_pair = [&](VolumePreservingActivation act, bool first_bias, bool second_bias) {
      for (const auto& [triangle, bias] : {std::pair{first, first_bias}, {second, second_bias}}) {
        const std::string index = std::to_string(layers_.size());
        layers_.emplace_back(
            exec, dim, triangle,
            VolumePreservingTriangularOptions{act, bias, derive_seed(options.seed, index)},
            name_ + "." + index);
      }
    };
    for (int block = 0; block < options.n_blocks; ++block) {
      for (int k = 0; k < options.n_linear; ++k)
        add_pair(VolumePreservingActivation::Identity, false, k + 1 == options.n_linear);
      add_pair(options.activation, true, true);
    }
    add_pair(VolumePreservingActivation::Identity, false, true);
  }

  int dim() const { return dim_; }
  std::size_t size() const { return layers_.size(); }
  Layer& operator[](std::size_t i) { return layers_[i]; }

  // f("<index>.weight", Param&) ...
  template <class F>
  void visit_parameters(F&& f) {
    for (std::size_t i = 0; i < layers_.size(); ++i)
      layers_[i].visit_parameters(
          [&](const std::string& name, auto& p) { f(std::to_string(i) + "." + name, p); });
  }
  template <class F>
  void visit_buffers(F&&) {}
  void zero_grad(const ExecutionSpace& exec) {
    for (auto& layer : layers_)
      layer.zero_grad(exec);
  }
  std::int64_t buffer_bytes() const {
    std::int64_t bytes = std::int64_t(inputs_.bytes() + grads_.bytes());
    for (const auto& layer : layers_)
      bytes += layer.buffer_bytes();
    return bytes;
  }

  // y = layer_{L-1}(... layer_0(x)); the inputs of layers 1..L-1 are kept for the backward.
  // x, y: (N, dim), distinct
  void forward(const ExecutionSpace& exec, const RunContext& ctx, const ConstMatrix& x,
               const Matrix& y) {
    const Where where{name_, "::forward"};
    check_shape(where, "x", x, {-1, dim_});
    check_shape(where, "y", y, extents_of(x));
    check_distinct(where, "x", x, "y", y);
    const std::int64_t rows = x.extent(0);
    const std::size_t n = layers_.size();
    auto kept = inputs_.view(n - 1, rows, dim_);
    ConstMatrix in = x;
    for (std::size_t i = 0; i < n; ++i) {
      const Matrix out = i + 1 == n ? y : Matrix(&kept(i, 0, 0), rows, dim_);
      layers_[i].forward(exec, ctx, in, out);
      in = out;
    }
  }

  // Through the layers in reverse, from the inputs kept by the last forward (of this x).
  // x: (N, dim), dy, dx: (N, dim); dx may be empty
  void backward(const ExecutionSpace& exec, const RunContext& ctx, const ConstMatrix& x,
                const ConstMatrix& dy, const Matrix& dx, WriteMode dx_mode = WriteMode::Assign) {
    const Where where{name_, "::backward"};
    check_shape(where, "x", x, {-1, dim_});
    check_shape(where, "dy", dy, extents_of(x));
    const std::int64_t rows = x.extent(0);
    const std::size_t n = layers_.size();
    auto kept = inputs_.view(n - 1, rows, dim_);
    auto ping = grads_.view(2, rows, dim_);
    ConstMatrix upstream = dy;
    for (std::size_t k = n; k-- > 0;) {
      const ConstMatrix in = k == 0 ? x : ConstMatrix(&kept(k - 1, 0, 0), rows, dim_);
      const Matrix down = k == 0 ? dx : Matrix(&ping(k % 2, 0, 0), rows, dim_);
      layers_[k].backward(exec, ctx, in, upstream, down, k == 0 ? dx_mode : WriteMode::Assign);
      upstream = down;
    }
  }

 private:
  std::string name_ = "kformer::VolumePreservingFeedForward";
  int dim_ = 0;
  std::vector<Layer> layers_;
  GrowingBuffer<T, memory_space> inputs_{"kformer::VolumePreservingFeedForward::inputs"};
  GrowingBuffer<T, memory_space> grads_{"kformer::VolumePreservingFeedForward::grads"};
};

}  // namespace kformer
