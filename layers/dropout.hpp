// Dropout with masks drawn from the counter-based generator.
//
//   training:  y = x * m / (1 - p),  m_i = [u(seed, step, i) >= p]     backward: dx = dy * m / (1 -
//   p) eval:      y = x                                                   backward: dx = dy
//
// u is Philox4x32-10 of (element index / 4, step) under the layer's seed (word index % 4 of the
// result), so a mask depends only on
// the seed, the training step and the element: the same on every backend and thread count, and
// the same again when a run resumes at that step. The mask is kept (one byte per element) for
// backward.
#pragma once

#include <cstdint>
#include <string>

#include <Kokkos_Core.hpp>

#include "../core/error.hpp"
#include "../core/random.hpp"
#include "../core/run_context.hpp"
#include "../core/tensor.hpp"
#include "../core/workspace.hpp"
#include "elementwise.hpp"

namespace kformer {

template <class T, class ExecutionSpace>
class Dropout {
 public:
  using memory_space = typename ExecutionSpace::memory_space;

  Dropout() = default;
  Dropout(double p, std::uint64_t seed, std::string name = "kformer::Dropout")
      : name_(std::move(name)), p_(p), seed_(seed) {
    if (!(p >= 0.0 && p < 1.0)) fail(name_, "dropout probability must be in [0, 1), got ", p);
  }

  double p() const { return p_; }
  // Whether the last forward dropped anything (so that backward must apply the mask).
  bool active() const { return active_; }

  // y = dropout(x) over contiguous views of equal size; y may be x.
  template <class XView, class YView>
  void forward(const ExecutionSpace& exec, const RunContext& ctx, const XView& x, const YView& y) {
    const std::string where = name_ + "::forward";
    if (x.size() != y.size())
      fail(where, "x has shape ", shape_of(x), ", y has shape ", shape_of(y));
    active_ = ctx.training && p_ > 0.0;
    const std::int64_t n = static_cast<std::int64_t>(x.size());
    const T* const in = x.data();
    T* const out = y.data();
    if (!active_) {
      copy(exec, x, y);
      return;
    }
    std::uint8_t* const mask = mask_.view(n).data();
    const Philox4x32 rng(seed_);
    const std::uint64_t stream = ctx.step;
    const double p = p_;
    const T scale = static_cast<T>(1.0 / (1.0 - p_));
    // One Philox evaluation gives the words of four consecutive elements.
    Kokkos::parallel_for(
        "kformer::dropout::forward",
        Kokkos::RangePolicy<ExecutionSpace, Kokkos::IndexType<std::int64_t>>(exec, 0, (n + 3) / 4),
        KOKKOS_LAMBDA(const std::int64_t group) {
          std::uint32_t words[4];
          rng.words(static_cast<std::uint64_t>(group), stream, words);
          for (int w = 0; w < 4; ++w) {
            const std::int64_t i = 4 * group + w;
            if (i >= n) break;
            const bool keep = uniform01(words[w]) >= p;
            mask[i] = keep ? 1 : 0;
            out[i] = keep ? in[i] * scale : T(0);
          }
        });
  }

  // dx = dy * m / (1 - p) after a training forward, dx = dy otherwise; dx may be dy.
  template <class DYView, class DXView>
  void backward(const ExecutionSpace& exec, const DYView& dy, const DXView& dx) {
    const std::string where = name_ + "::backward";
    if (dy.size() != dx.size())
      fail(where, "dy has shape ", shape_of(dy), ", dx has shape ", shape_of(dx));
    const std::int64_t n = static_cast<std::int64_t>(dy.size());
    const T* const g = dy.data();
    T* const out = dx.data();
    if (!active_) {
      copy(exec, dy, dx);
      return;
    }
    if (static_cast<std::int64_t>(mask_.capacity()) < n)
      fail(where, "dy has ", n, " elements but the last forward masked ", mask_.capacity());
    const std::uint8_t* const mask = mask_.view(n).data();
    const T scale = static_cast<T>(1.0 / (1.0 - p_));
    Kokkos::parallel_for(
        "kformer::dropout::backward",
        Kokkos::RangePolicy<ExecutionSpace, Kokkos::IndexType<std::int64_t>>(exec, 0, n),
        KOKKOS_LAMBDA(const std::int64_t i) { out[i] = mask[i] ? g[i] * scale : T(0); });
  }

  // The mask of the last training forward (1 = kept), for tests and inspection.
  Kokkos::View<const std::uint8_t*, memory_space> mask(std::int64_t n) { return mask_.view(n); }

 private:
  std::string name_ = "kformer::Dropout";
  double p_ = 0.0;
  std::uint64_t seed_ = 0;
  bool active_ = false;
  GrowingBuffer<std::uint8_t, memory_space> mask_{"kformer::Dropout::mask"};
};

}  // namespace kformer
