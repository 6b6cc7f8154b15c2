// Volume-preserving attention (GeometricMachineLearning.jl's VolumePreservingAttention, with its
// default arbitrary weighting, skew_sym = false): the tokens of a sequence are mixed by an
// orthogonal matrix built from their correlations.
//
// For one sequence X: (T, d) (rows are time steps x_1..x_T; Julia's Z = Xᵀ is (d, T)):
//   C_ij = x_iᵀ A x_j / sqrt(d)  for i > j, 0 otherwise     A: (d, d), the layer's one parameter
//   S    = C - Cᵀ                                           skew-symmetric (T, T)
//   Λ    = (I - S)(I + S)⁻¹                                 Cayley transform: orthogonal, det +1
//   Y    = Λᵀ X,  i.e. y_t = Σ_s Λ_st x_s                   (Julia: Z Λ)
//
// What is volume-preserving, and what is not (Brantner, de Romemont, Kraus, Li, "Volume-preserving
// transformers for learning time series data with structure", 2024, and the package's docs): the
// mixing with Λ held fixed, X ↦ Λᵀ X, is linear with Jacobian Λᵀ ⊗ I_d, whose determinant is
// det(Λ)^d = 1 because Λ is orthogonal with det +1. That is the claim kformer makes and tests. The
// full map X ↦ Λ(X)ᵀ X, in which Λ depends on X, is NOT volume-preserving in general (its Jacobian
// adds the derivative of Λ): the tests measure its determinant and do not assert it. backward
// computes either derivative: MixingDerivative::Full (training) or ::Held (Λ treated as a
// constant, the Jacobian of the claim).
//
// Each sequence is one thread's work (T×T matrices, T is a short window); I + S is inverted by
// Gauss-Jordan elimination without pivoting, which is stable here: the symmetric part of I + S
// is I, so every pivot is at least 1.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

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

// Which derivative of the attention backward computes.
enum class MixingDerivative {
  Full,  // through Λ(X) too: the gradient of training
  Held,  // Λ held at its forward value: dx = Λ dy, and no parameter gradient
};

struct VolumePreservingAttentionOptions {
  std::uint64_t seed = 0;
};

template <class T, class ExecutionSpace>
class VolumePreservingAttention {
 public:
  using execution_space = ExecutionSpace;
  using memory_space = typename ExecutionSpace::memory_space;
  using Tensor3 = RowMajorView<kformer::Tensor3<T, memory_space>>;
  using ConstTensor3 = RowMajorView<kformer::Tensor3<const T, memory_space>>;

  // The largest sequence length: Λ is formed and inverted per sequence by one thread.
  static constexpr int kMaxSeqLength = 256;

  VolumePreservingAttention() = default;
  VolumePreservingAttention(const ExecutionSpace& exec, int dim,
                            const VolumePreservingAttentionOptions& options = {},
                            std::string name = "kformer::VolumePreservingAttention")
      : name_(std::move(name)), dim_(dim) {
    if (dim < 1) fail(name_, "dim must be at least 1, got ", dim);
    weight_ = Param<T, memory_space>("weight", {dim, dim});
    // Glorot uniform, as the Julia package initialises A.
    const double bound = std::sqrt(6.0 / (2.0 * dim));
    fill_uniform(exec, weight_.value, -bound, bound, derive_seed(options.seed, "weight"));
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
  std::int64_t buffer_bytes() const {
    return std::int64_t(mixing_.bytes() + inverse_.bytes() + work_.bytes() + partial_.bytes());
  }

  // The last forward's Λ of every sequence: (batch, seq, seq).
  Kokkos::View<const T***, Kokkos::LayoutRight, memory_space> mixing(int batch, int seq) {
    return mixing_.view(batch, seq, seq);
  }

  // y_t = Σ_s Λ_st x_s per sequence; Λ and (I + S)⁻¹ are kept for the backward.
  // x, y: (batch, seq, dim), distinct
  void forward(const ExecutionSpace& exec, const RunContext&, const ConstTensor3& x,
               const Tensor3& y) {
    const Where where{name_, "::forward"};
    const ProfilingRegion region(where);
    check_input(where, x);
    check_shape(where, "y", y, extents_of(x));
    check_distinct(where, "x", x, "y", y);
    const int batch = x.extent(0), seq = x.extent(1), d = dim_;
    auto lambda = mixing_.view(batch, seq, seq);
    auto inverse = inverse_.view(batch, seq, seq);
    auto work = work_.view(batch, seq, seq + d);  // S, then A x_j in the last d columns
    const auto a = weight_.value;
    const T scale = static_cast<T>(1.0 / std::sqrt(double(d)));
    Kokkos::parallel_for(
        KFORMER_LABEL("kformer::VolumePreservingAttention::forward"),
        Kokkos::RangePolicy<ExecutionSpace>(exec, 0, batch), KOKKOS_LAMBDA(const int b) {
          // u_j = A x_j in work(b, j, seq..seq+d)
          for (int j = 0; j < seq; ++j)
            for (int k = 0; k < d; ++k) {
              T sum = T(0);
              for (int l = 0; l < d; ++l)
                sum += a(k * d + l) * x(b, j, l);
              work(b, j, seq + k) = sum;
            }
          // S = C - Cᵀ; M = I + S into lambda(b) (eliminated in place), inverse(b) = I
          for (int i = 0; i < seq; ++i) {
            work(b, i, i) = T(0);
            for (int j = 0; j < i; ++j) {
              T c = T(0);
              for (int k = 0; k < d; ++k)
                c += x(b, i, k) * work(b, j, seq + k);
              c *= scale;
              work(b, i, j) = c;
              work(b, j, i) = -c;
            }
          }
          for (int i = 0; i < seq; ++i)
            for (int j = 0; j < seq; ++j) {
              lambda(b, i, j) = (i == j ? T(1) : T(0)) + work(b, i, j);
              inverse(b, i, j) = i == j ? T(1) : T(0);
            }
          // Gauss-Jordan: lambda(b) -> I, inverse(b) -> (I + S)⁻¹
          for (int p = 0; p < seq; ++p) {
            const T pivot = lambda(b, p, p);
            for (int j = 0; j < seq; ++j) {
              lambda(b, p, j) /= pivot;
              inverse(b, p, j) /= pivot;
            }
            for (int i = 0; i < seq; ++i) {
              if (i == p) continue;
              const T f = lambda(b, i, p);
              if (f == T(0)) continue;
              for (int j = 0; j < seq; ++j) {
                lambda(b, i, j) -= f * lambda(b, p, j);
                inverse(b, i, j) -= f * inverse(b, p, j);
              }
            }
          }
          // Λ = (I - S) (I + S)⁻¹ = M⁻¹ - S M⁻¹
          for (int i = 0; i < seq; ++i)
            for (int j = 0; j < seq; ++j) {
              T sum = inverse(b, i, j);
              for (int k = 0; k < seq; ++k)
                sum -= work(b, i, k) * inverse(b, k, j);
              lambda(b, i, j) = sum;
            }
          // y_t = Σ_s Λ_st x_s
          for (int t = 0; t < seq; ++t)
            for (int k = 0; k < d; ++k) {
              T sum = T(0);
              for (int s = 0; s < seq; ++s)
                sum += lambda(b, s, t) * x(b, s, k);
              y(b, t, k) = sum;
            }
        });
  }

  // With G = X dYᵀ (G_st = x_s · dy_t), M = I + S:
  //   dx_s  = Σ_t Λ_st dy_t                                  (the mixing, Λ held)
  //   dS    = -(I + Λᵀ) G M⁻ᵀ,  dC_ij = dS_ij - dS_ji (i > j)  (MixingDerivative::Full only)
  //   dx_i += Σ_{j<i} dC_ij A x_j / sqrt(d),  dx_j += Σ_{i>j} dC_ij Aᵀ x_i / sqrt(d)
  //   dA   += Σ_b Σ_{i>j} dC_ij x_i x_jᵀ / sqrt(d)
  // x: the last forward's input (batch, seq, dim); dy, dx: (batch, seq, dim); dx may be empty.
  void backward(const ExecutionSpace& exec, const RunContext&, const ConstTensor3& x,
                const ConstTensor3& dy, const Tensor3& dx, WriteMode dx_mode = WriteMode::Assign,
                MixingDerivative derivative = MixingDerivative::Full) {
    const Where where{name_, "::backward"};
    const ProfilingRegion region(where);
    check_input(where, x);
    check_shape(where, "dy", dy, extents_of(x));
    const bool want_dx = dx.data() != nullptr;
    if (want_dx) check_shape(where, "dx", dx, extents_of(x));
    const int batch = x.extent(0), seq = x.extent(1), d = dim_;
    if (mixing_.capacity() < std::size_t(batch) * seq * seq)
      fail(where, "no forward of this batch ran before the backward");
    auto lambda = mixing_.view(batch, seq, seq);
    auto inverse = inverse_.view(batch, seq, seq);
    auto work = work_.view(batch, seq, 2 * seq);  // G, then dS / dC
    const bool full = derivative == MixingDerivative::Full;
    auto partial = partial_.view(full ? batch : 0, d, d);
    const auto a = weight_.value;
    const T scale = static_cast<T>(1.0 / std::sqrt(double(d)));
    const bool add = dx_mode == WriteMode::Add;
    Kokkos::parallel_for(
        KFORMER_LABEL("kformer::VolumePreservingAttention::backward"),
        Kokkos::RangePolicy<ExecutionSpace>(exec, 0, batch), KOKKOS_LAMBDA(const int b) {
          if (want_dx)
            for (int s = 0; s < seq; ++s)
              for (int k = 0; k < d; ++k) {
                T sum = add ? dx(b, s, k) : T(0);
                for (int t = 0; t < seq; ++t)
                  sum += lambda(b, s, t) * dy(b, t, k);
                dx(b, s, k) = sum;
              }
          if (!full) return;
          // G in work(b, :, 0:seq); P = G M⁻ᵀ in work(b, :, seq:2seq)
          for (int s = 0; s < seq; ++s)
            for (int t = 0; t < seq; ++t) {
              T sum = T(0);
              for (int k = 0; k < d; ++k)
                sum += x(b, s, k) * dy(b, t, k);
              work(b, s, t) = sum;
            }
          for (int s = 0; s < seq; ++s)
            for (int j = 0; j < seq; ++j) {
              T sum = T(0);
              for (int t = 0; t < seq; ++t)
                sum += work(b, s, t) * inverse(b, j, t);
              work(b, s, seq + j) = sum;
            }
          // dS = -(P + Λᵀ P) into work(b, :, 0:seq)
          for (int i = 0; i < seq; ++i)
            for (int j = 0; j < seq; ++j) {
              T sum = work(b, i, seq + j);
              for (int k = 0; k < seq; ++k)
                sum += lambda(b, k, i) * work(b, k, seq + j);
              work(b, i, j) = -sum;
            }
          // dC_ij / sqrt(d) for i > j, into the strictly lower part of work(b, :, seq:2seq)
          for (int i = 0; i < seq; ++i)
            for (int j = 0; j < i; ++j)
              work(b, i, seq + j) = (work(b, i, j) - work(b, j, i)) * scale;
          for (int k = 0; k < d; ++k)
            for (int l = 0; l < d; ++l) {
              T sum = T(0);
              for (int i = 0; i < seq; ++i)
                for (int j = 0; j < i; ++j)
                  sum += work(b, i, seq + j) * x(b, i, k) * x(b, j, l);
              partial(b, k, l) = sum;
            }
          if (!want_dx) return;
          for (int s = 0; s < seq; ++s)
            for (int k = 0; k < d; ++k) {
              T sum = T(0);
              for (int l = 0; l < d; ++l) {
                T u = T(0), v = T(0);  // Σ_{j<s} dC_sj x_j,l and Σ_{i>s} dC_is x_i,l
                for (int j = 0; j < s; ++j)
                  u += work(b, s, seq + j) * x(b, j, l);
                for (int i = s + 1; i < seq; ++i)
                  v += work(b, i, seq + s) * x(b, i, l);
                sum += a(k * d + l) * u + a(l * d + k) * v;
              }
              dx(b, s, k) += sum;
            }
        });
    if (!full) return;
    // dA summed over the sequences in a fixed order: the same bits at every call.
    const auto da = weight_.grad;
    Kokkos::parallel_for(
        KFORMER_LABEL("kformer::VolumePreservingAttention::weight_gradient"),
        Kokkos::RangePolicy<ExecutionSpace>(exec, 0, d * d), KOKKOS_LAMBDA(const int kl) {
          T sum = T(0);
          for (int b = 0; b < batch; ++b)
            sum += partial(b, kl / d, kl % d);
          da(kl) += sum;
        });
  }

 private:
  void check_input(const Where& where, const ConstTensor3& x) const {
    check_shape(where, "x", x, {-1, -1, dim_});
    if (x.extent(1) < 1 || x.extent(1) > std::size_t(kMaxSeqLength))
      fail(where, "the sequence length must be between 1 and ", kMaxSeqLength, ", got ",
           x.extent(1));
  }

  std::string name_ = "kformer::VolumePreservingAttention";
  int dim_ = 0;
  Param<T, memory_space> weight_;
  GrowingBuffer<T, memory_space> mixing_{"kformer::VolumePreservingAttention::mixing"};
  GrowingBuffer<T, memory_space> inverse_{"kformer::VolumePreservingAttention::inverse"};
  GrowingBuffer<T, memory_space> work_{"kformer::VolumePreservingAttention::work"};
  GrowingBuffer<T, memory_space> partial_{"kformer::VolumePreservingAttention::partial"};
};

}  // namespace kformer
