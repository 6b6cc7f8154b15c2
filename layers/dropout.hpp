// Dropout with masks drawn from a counter-based hash.
//
//   training:  y = x * m / (1 - p),  m_i = [u(seed, step, i) >= p]
//              backward: dx = dy * m / (1 - p)
//   eval:      y = x,  backward: dx = dy
//
// u is a function of (seed, training step, element) only (see DropoutDecisions): the same on
// every backend and thread count, and the same again when a run resumes at that step. The mask
// is kept (one byte per element) for backward.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include <Kokkos_Core.hpp>

#include "../backends/for_each.hpp"
#include "../core/error.hpp"
#include "../core/layer.hpp"
#include "../core/profiling.hpp"
#include "../core/random.hpp"
#include "../core/run_context.hpp"
#include "../core/tensor.hpp"
#include "../core/workspace.hpp"
#include "elementwise.hpp"

namespace kformer {

// Keep/drop decisions for element 4 g + w: the w-th 16 bits of a 64-bit hash of (seed, step, g)
// compared with p 2^16 (u >= p for u uniform at 16-bit resolution). The hash is splitmix64's
// finaliser, whose outputs on consecutive counters pass BigCrush: plenty for dropout, and several
// times cheaper than Philox (the element count of a training step makes this the hot loop).
struct DropoutDecisions {
  std::uint64_t key;
  std::uint32_t threshold;  // ceil(p 2^16)

  DropoutDecisions(std::uint64_t seed, std::uint64_t step, double p)
      : key(mix(seed ^ mix(step + 0x632BE59BD9B4E019ull))),
        threshold(static_cast<std::uint32_t>(std::ceil(p * 65536.0))) {}

  KOKKOS_INLINE_FUNCTION static std::uint64_t mix(std::uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // The hash of a group: its lane w's uniform is bits [16 w, 16 w + 16).
  KOKKOS_INLINE_FUNCTION std::uint64_t hash(std::uint64_t group) const {
    return mix(key + group * 0x9E3779B97F4A7C15ull);
  }
  KOKKOS_INLINE_FUNCTION void keep4(std::uint64_t group, bool keep[4]) const {
    const std::uint64_t h = hash(group);
    keep[0] = (h & 0xFFFFu) >= threshold;
    keep[1] = ((h >> 16) & 0xFFFFu) >= threshold;
    keep[2] = ((h >> 32) & 0xFFFFu) >= threshold;
    keep[3] = (h >> 48) >= threshold;
  }

  // f(e, keep) for e in [0, n), in order, element e being lane e % 4 of group first_group + e / 4:
  // keep4's decisions, for loops on a CPU. Hashing up to kHostGroups groups into a local array
  // first, then deciding element by element, lets both loops vectorise: dropout over 2^19 floats
  // took 1.85 ns an element on one core with keep4 per group, 0.16 this way.
  static constexpr int kHostGroups = 512;
  template <class F>
  KOKKOS_INLINE_FUNCTION void for_each_keep(std::uint64_t first_group, std::int64_t n,
                                            const F& f) const {
    const F body = f;  // a local copy: its captures stay in registers along the loops
    std::uint16_t u[4 * kHostGroups];
    for (std::int64_t e0 = 0; e0 < n; e0 += 4 * kHostGroups) {
      const int count = n - e0 < 4 * kHostGroups ? static_cast<int>(n - e0) : 4 * kHostGroups;
      const std::uint64_t g0 = first_group + static_cast<std::uint64_t>(e0 / 4);
      for (int g = 0; g < (count + 3) / 4; ++g) {
        const std::uint64_t h = hash(g0 + g);
        u[4 * g] = static_cast<std::uint16_t>(h);
        u[4 * g + 1] = static_cast<std::uint16_t>(h >> 16);
        u[4 * g + 2] = static_cast<std::uint16_t>(h >> 32);
        u[4 * g + 3] = static_cast<std::uint16_t>(h >> 48);
      }
      for (int e = 0; e < count; ++e)
        body(e0 + e, u[e] >= threshold);
    }
  }

  // for_each_keep over `rows` rows of n elements, row r (from first_row) starting at group
  // r ceil(n / 4): f(r n + j, keep) for element j of row r. Where n is a multiple of 4 the rows'
  // groups follow one another, and one sweep over all rows replaces a sweep a row: 64 rows of 64
  // took 0.41 us on one core this way, 1.10 row by row.
  template <class F>
  KOKKOS_INLINE_FUNCTION void for_each_keep_in_rows(std::uint64_t first_row, int rows, int n,
                                                    const F& f) const {
    const std::uint64_t groups_per_row = static_cast<std::uint64_t>(n + 3) / 4;
    if (n % 4 == 0) {
      for_each_keep(first_row * groups_per_row, std::int64_t(rows) * n, f);
      return;
    }
    for (int r = 0; r < rows; ++r) {
      const std::int64_t row_start = std::int64_t(r) * n;
      for_each_keep((first_row + r) * groups_per_row, n,
                    [&](const std::int64_t j, const bool keep) { f(row_start + j, keep); });
    }
  }
};

template <class T, class ExecutionSpace>
class Dropout {
 public:
  using memory_space = typename ExecutionSpace::memory_space;

  Dropout() = default;
  Dropout(const ExecutionSpace&, double p, std::uint64_t seed,
          std::string name = "kformer::Dropout")
      : name_(std::move(name)), p_(p), seed_(seed) {
    if (!(p >= 0.0 && p < 1.0)) fail(name_, "dropout probability must be in [0, 1), got ", p);
  }

  double p() const { return p_; }
  // Whether the last forward dropped anything (so that backward must apply the mask).
  bool active() const { return active_; }
  template <class F>
  void visit_parameters(F&&) {}
  template <class F>
  void visit_buffers(F&&) {}
  void zero_grad(const ExecutionSpace&) {}
  std::int64_t buffer_bytes() const { return std::int64_t(mask_.bytes()); }

  // y = dropout(x) over contiguous views of equal size; y may be x.
  template <class XView, class YView>
  void forward(const ExecutionSpace& exec, const RunContext& ctx, const XView& x, const YView& y) {
    const Where where{name_, "::forward"};
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
    const DropoutDecisions decide(seed_, ctx.step, p_);
    const T scale = static_cast<T>(1.0 / (1.0 - p_));
    if constexpr (backends::runs_on_host<ExecutionSpace>) {
      // Chunks of whole groups, each deciding its elements in vectorised loops.
      constexpr std::int64_t chunk = 4 * DropoutDecisions::kHostGroups;
      Kokkos::parallel_for(
          KFORMER_LABEL("kformer::dropout::forward"),
          Kokkos::RangePolicy<ExecutionSpace, Kokkos::IndexType<std::int64_t>>(
              exec, 0, (n + chunk - 1) / chunk),
          KOKKOS_LAMBDA(const std::int64_t c) {
            const std::int64_t first = c * chunk;
            const std::int64_t count = n - first < chunk ? n - first : chunk;
            const T* const x_chunk = in + first;
            T* const y_chunk = out + first;
            std::uint8_t* const m_chunk = mask + first;
            decide.for_each_keep(static_cast<std::uint64_t>(first / 4), count,
                                 [=](const std::int64_t e, const bool keep) {
                                   m_chunk[e] = keep;
                                   y_chunk[e] = keep ? x_chunk[e] * scale : T(0);
                                 });
          });
      return;
    }
    // Whole groups of four in the main loop (straight-line code), the last partial group alone.
    const std::int64_t full = n / 4;
    backends::for_each_index(
        exec, KFORMER_LABEL("kformer::dropout::forward"), full,
        KOKKOS_LAMBDA(const std::int64_t g) {
          bool keep[4];
          decide.keep4(static_cast<std::uint64_t>(g), keep);
          const std::int64_t i = 4 * g;
          mask[i] = keep[0], mask[i + 1] = keep[1], mask[i + 2] = keep[2], mask[i + 3] = keep[3];
          out[i] = keep[0] ? in[i] * scale : T(0);
          out[i + 1] = keep[1] ? in[i + 1] * scale : T(0);
          out[i + 2] = keep[2] ? in[i + 2] * scale : T(0);
          out[i + 3] = keep[3] ? in[i + 3] * scale : T(0);
        });
    if (n % 4 != 0)  // the last, partial group
      Kokkos::parallel_for(
          KFORMER_LABEL("kformer::dropout::forward_tail"),
          Kokkos::RangePolicy<ExecutionSpace, Kokkos::IndexType<std::int64_t>>(exec, full,
                                                                               full + 1),
          KOKKOS_LAMBDA(const std::int64_t g) {
            bool keep[4];
            decide.keep4(static_cast<std::uint64_t>(g), keep);
            for (std::int64_t i = 4 * g; i < n; ++i) {
              mask[i] = keep[i - 4 * g];
              out[i] = keep[i - 4 * g] ? in[i] * scale : T(0);
            }
          });
  }

  // dx = dy * m / (1 - p) after a training forward, dx = dy otherwise (+= with WriteMode::Add);
  // dx may be dy. x (the forward's input) is not read.
  template <class XView, class DYView, class DXView>
  void backward(const ExecutionSpace& exec, const RunContext&, const XView&, const DYView& dy,
                const DXView& dx, WriteMode dx_mode = WriteMode::Assign) {
    const Where where{name_, "::backward"};
    if (dy.size() != dx.size())
      fail(where, "dy has shape ", shape_of(dy), ", dx has shape ", shape_of(dx));
    const std::int64_t n = static_cast<std::int64_t>(dy.size());
    const T* const g = dy.data();
    T* const out = dx.data();
    if (!active_) return write_scaled(exec, dx_mode, T(1), dy, dx);
    if (static_cast<std::int64_t>(mask_.capacity()) < n)
      fail(where, "dy has ", n, " elements but the last forward masked ", mask_.capacity());
    const std::uint8_t* const mask = mask_.view(n).data();
    const T scale = static_cast<T>(1.0 / (1.0 - p_));
    const bool add = dx_mode == WriteMode::Add;
    backends::for_each_index(
        exec, KFORMER_LABEL("kformer::dropout::backward"), n, KOKKOS_LAMBDA(const std::int64_t i) {
          const T v = mask[i] ? g[i] * scale : T(0);
          out[i] = add ? out[i] + v : v;
        });
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
