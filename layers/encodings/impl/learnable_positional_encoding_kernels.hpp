// Kernels of the learnable positional encoding. Each kernel runs over (position, column) pairs
// of the table and loops over the batch inside, so a table entry is read (or its gradient summed)
// once, in a fixed order.
#pragma once

#include <cstdint>

#include <Kokkos_Core.hpp>

#include "../../../backends/for_each.hpp"
#include "../../../backends/streaming_store.hpp"
#include "../../../core/compat.hpp"
#include "../../../core/profiling.hpp"
#include "../../../core/tensor.hpp"

namespace kformer::impl {

// CPUs: table entries per team, 64 KiB: small enough to stay in the caches while the batch's
// runs stream past.
template <class T>
inline constexpr std::int64_t kHostTableChunk = 64 * 1024 / sizeof(T);

template <class ExecutionSpace>
using FlatPolicy = Kokkos::RangePolicy<ExecutionSpace, Kokkos::IndexType<std::int64_t>>;

// Where position p of a seq-step sequence reads a max_len-row table, linearly interpolated:
// rows r0 and r1 with weights (1 - t) and t.
struct InterpolationStencil {
  int r0, r1;
  double t;
  KOKKOS_INLINE_FUNCTION InterpolationStencil(int p, int seq, int max_len) {
    const double pos = seq > 1 ? static_cast<double>(p) * (max_len - 1) / (seq - 1) : 0.0;
    r0 = static_cast<int>(compat::math::floor(pos));
    if (r0 > max_len - 1) r0 = max_len - 1;
    r1 = r0 + 1 < max_len ? r0 + 1 : max_len - 1;
    t = pos - r0;
  }
};

// y[b, p, j] = s x[b, p, j] + pe[p, j] for p < y.extent(1).
//
// CPUs: a team per chunk of the table, streaming it into every batch element. GPUs: a thread per
// table entry, which reads kGroup batch elements before it writes them, so that their loads are in
// flight together.
template <class ExecutionSpace, class T, class M>
void learnable_pe_forward(const ExecutionSpace& exec, const Tensor3<const T, M>& x,
                          const Tensor3<T, M>& y, const Tensor2<const T, M>& pe, T s) {
  using member_type = typename Kokkos::TeamPolicy<ExecutionSpace>::member_type;
  const int batch = y.extent(0);
  const std::int64_t n = std::int64_t(y.extent(1)) * y.extent(2);
  const std::int64_t x_stride = std::int64_t(x.extent(1)) * x.extent(2);
  const T* const xp = x.data();
  T* const yp = y.data();
  const T* const table = pe.data();
  if constexpr (!backends::runs_on_host<ExecutionSpace>) {
    constexpr int kGroup = 4;
    Kokkos::parallel_for(
        KFORMER_LABEL("kformer::learnable_pe::forward"), FlatPolicy<ExecutionSpace>(exec, 0, n),
        KOKKOS_LAMBDA(const std::int64_t k) {
          const T t = table[k];
          for (int b0 = 0; b0 < batch; b0 += kGroup) {
            const int count = batch - b0 < kGroup ? batch - b0 : kGroup;
            T in[kGroup] = {};
            for (int g = 0; g < kGroup; ++g)
              if (g < count) in[g] = xp[(b0 + g) * x_stride + k];
            for (int g = 0; g < kGroup; ++g)
              if (g < count) yp[(b0 + g) * n + k] = in[g] * s + t;
          }
        });
  } else {
    const std::int64_t chunk = kHostTableChunk<T>;
    const bool streaming = backends::use_streaming_stores(yp, xp, y.span() * sizeof(T));
    Kokkos::parallel_for(
        KFORMER_LABEL("kformer::learnable_pe::forward"),
        Kokkos::TeamPolicy<ExecutionSpace>(exec, (n + chunk - 1) / chunk, 1),
        KOKKOS_LAMBDA(const member_type& team) {
          const std::int64_t begin = team.league_rank() * chunk;
          const std::int64_t len = begin + chunk < n ? chunk : n - begin;
          const T* const t = table + begin;
          backends::store_batch_runs(
              0, batch, len, streaming, [=](const int b) { return yp + b * n + begin; },
              [=](const int b) {
                const T* const in = xp + b * x_stride + begin;
                return [=](const std::int64_t k) { return in[k] * s + t[k]; };
              });
          if (streaming) backends::streaming_fence();
        });
  }
}

// y[b, p, j] = s x[b, p, j] + (1 - t) pe[r0, j] + t pe[r1, j]   (InterpolationStencil of p).
template <class ExecutionSpace, class T, class M>
void learnable_pe_forward_interpolated(const ExecutionSpace& exec, const Tensor3<const T, M>& x,
                                       const Tensor3<T, M>& y, const Tensor2<const T, M>& pe, T s) {
  const int batch = y.extent(0), seq = y.extent(1), dim = y.extent(2);
  const int max_len = pe.extent(0);
  Kokkos::parallel_for(
      KFORMER_LABEL("kformer::learnable_pe::forward_interpolated"),
      FlatPolicy<ExecutionSpace>(exec, 0, std::int64_t(seq) * dim),
      KOKKOS_LAMBDA(const std::int64_t i) {
        const int p = static_cast<int>(i / dim), j = static_cast<int>(i % dim);
        const InterpolationStencil st(p, seq, max_len);
        const T v = static_cast<T>((1.0 - st.t) * pe(st.r0, j) + st.t * pe(st.r1, j));
        for (int b = 0; b < batch; ++b)
          y(b, p, j) = x(b, p, j) * s + v;
      });
}

// dx[b, p, :] = s dy[b, p, :] and grad[p, :] += sum_b dy[b, p, :] for p < dy.extent(1), in one
// pass over dy; dx[b, p, :] = 0 beyond (the truncated steps). The batch is summed in order, so
// every backend gives the same bits. dx may be dy itself (then nothing is written for s = 1).
//
// CPUs: a team (one thread) per chunk of the table sums the batch's runs into scratch, writing
// each run's dx as it reads it. GPUs: a thread per table entry, loading kGroup batch elements at
// a time so that their loads are in flight together.
template <class ExecutionSpace, class T, class M>
void learnable_pe_backward(const ExecutionSpace& exec, const Tensor3<const T, M>& dy,
                           const Tensor3<T, M>& dx, const Tensor2<T, M>& grad, T s) {
  using policy_type = Kokkos::TeamPolicy<ExecutionSpace>;
  using member_type = typename policy_type::member_type;
  using Scratch =
      Kokkos::View<T*, typename ExecutionSpace::scratch_memory_space, Kokkos::MemoryUnmanaged>;
  const int batch = dy.extent(0);
  const std::int64_t n = std::int64_t(dy.extent(1)) * dy.extent(2);
  const std::int64_t dx_stride = std::int64_t(dx.extent(1)) * dx.extent(2);
  const T* const dyp = dy.data();
  T* const dxp = dx.data();
  T* const g = grad.data();
  const bool in_place = dxp == dyp, write_dx = !in_place || s != T(1);
  if constexpr (!backends::runs_on_host<ExecutionSpace>) {
    constexpr int kGroup = 4;
    Kokkos::parallel_for(
        KFORMER_LABEL("kformer::learnable_pe::backward"), FlatPolicy<ExecutionSpace>(exec, 0, n),
        KOKKOS_LAMBDA(const std::int64_t k) {
          T sum = 0;
          for (int b0 = 0; b0 < batch; b0 += kGroup) {
            const int count = batch - b0 < kGroup ? batch - b0 : kGroup;
            T d[kGroup] = {};
            for (int i = 0; i < kGroup; ++i)
              if (i < count) d[i] = dyp[(b0 + i) * n + k];
            for (int i = 0; i < kGroup; ++i)
              if (i < count) {
                sum += d[i];
                if (write_dx) dxp[(b0 + i) * dx_stride + k] = s * d[i];
              }
          }
          g[k] += sum;
        });
  } else {
    const std::int64_t chunk = kHostTableChunk<T>;
    const bool streaming = backends::use_streaming_stores(dxp, dyp, dx.span() * sizeof(T));
    const std::size_t bytes = Scratch::shmem_size(chunk);
    const int level = backends::team_scratch_level<ExecutionSpace>(bytes);
    Kokkos::parallel_for(
        KFORMER_LABEL("kformer::learnable_pe::backward"),
        policy_type(exec, (n + chunk - 1) / chunk, 1)
            .set_scratch_size(level, Kokkos::PerTeam(bytes)),
        KOKKOS_LAMBDA(const member_type& team) {
          const std::int64_t begin = team.league_rank() * chunk;
          const std::int64_t len = begin + chunk < n ? chunk : n - begin;
          T* const sum = Scratch(team.team_scratch(level), chunk).data();
          for (std::int64_t k = 0; k < len; ++k)
            sum[k] = 0;
          // Groups of kGroup batch elements: their dx runs written together (four input streams
          // in flight), then their sums, in one pass over the group (still in batch order), and
          // in-place scaling, reading dy from cache. Separate loops: one loop doing both would
          // not vectorise, sum and dy being possibly the same memory to the compiler. dx first
          // (measured faster, 0.72x of a copy against 0.54-0.61x the other way round), except in
          // place, where the sum must read dy before it is scaled. One pass for the group's sums
          // instead of one per element: 0.85-0.97x to 0.92-1.05x of a copy (eight runs each).
          constexpr int kGroup = 4;
          static_assert(kGroup == 4, "the one-pass sum below adds four runs d0 .. d3");
          for (int b0 = 0; b0 < batch; b0 += kGroup) {
            const int b1 = b0 + kGroup < batch ? b0 + kGroup : batch;
            if (!in_place)
              backends::store_batch_runs(
                  b0, b1, len, streaming, [=](const int b) { return dxp + b * dx_stride + begin; },
                  [=](const int b) {
                    const T* const d = dyp + b * n + begin;
                    return [=](const std::int64_t k) { return s * d[k]; };
                  });
            if (b1 - b0 == kGroup) {
              const T* const d0 = dyp + b0 * n + begin;
              const T* const d1 = d0 + n;
              const T* const d2 = d1 + n;
              const T* const d3 = d2 + n;
              for (std::int64_t k = 0; k < len; ++k)
                sum[k] = (((sum[k] + d0[k]) + d1[k]) + d2[k]) + d3[k];
            } else {
              for (int b = b0; b < b1; ++b) {
                const T* const d = dyp + b * n + begin;
                for (std::int64_t k = 0; k < len; ++k)
                  sum[k] += d[k];
              }
            }
            if (in_place && s != T(1))
              for (int b = b0; b < b1; ++b) {
                const T* const d = dyp + b * n + begin;
                T* const out = dxp + b * dx_stride + begin;
                for (std::int64_t k = 0; k < len; ++k)
                  out[k] = s * d[k];
              }
          }
          T* const out = g + begin;
          for (std::int64_t k = 0; k < len; ++k)
            out[k] += sum[k];
          if (streaming) backends::streaming_fence();
        });
  }
  const std::int64_t tail = dx_stride - n;  // per batch element, after its first n entries
  if (tail > 0)
    backends::for_each_index(
        exec, KFORMER_LABEL("kformer::learnable_pe::backward_truncated"), batch * tail,
        KOKKOS_LAMBDA(const std::int64_t i) { dxp[i / tail * dx_stride + n + i % tail] = T(0); });
}

// grad[r, j] += sum_b sum_p weight(p, r) dy[b, p, j], gathering over the positions whose stencil
// touches row r (no scatter, so no atomics).
template <class ExecutionSpace, class T, class M>
void learnable_pe_backward_interpolated(const ExecutionSpace& exec, const Tensor3<const T, M>& dy,
                                        const Tensor2<T, M>& grad, int seq) {
  const int batch = dy.extent(0), dim = dy.extent(2), max_len = grad.extent(0);
  Kokkos::parallel_for(
      KFORMER_LABEL("kformer::learnable_pe::backward_interpolated"),
      FlatPolicy<ExecutionSpace>(exec, 0, std::int64_t(max_len) * dim),
      KOKKOS_LAMBDA(const std::int64_t i) {
        const int r = static_cast<int>(i / dim), j = static_cast<int>(i % dim);
        // Positions with r - 1 < p (max_len - 1) / (seq - 1) < r + 1, widened by one for rounding.
        const double scale = static_cast<double>(seq - 1) / (max_len > 1 ? max_len - 1 : 1);
        int p_lo = static_cast<int>(compat::math::floor((r - 1) * scale)) - 1;
        int p_hi = static_cast<int>(compat::math::ceil((r + 1) * scale)) + 1;
        if (max_len == 1) p_lo = 0, p_hi = seq - 1;
        if (p_lo < 0) p_lo = 0;
        if (p_hi > seq - 1) p_hi = seq - 1;
        double sum = 0;
        for (int p = p_lo; p <= p_hi; ++p) {
          const InterpolationStencil s(p, seq, max_len);
          double w = 0;
          if (s.r0 == r) w += 1.0 - s.t;
          if (s.r1 == r) w += s.t;
          if (w == 0) continue;
          double column = 0;
          for (int b = 0; b < batch; ++b)
            column += dy(b, p, j);
          sum += w * column;
        }
        grad(r, j) += static_cast<T>(sum);
      });
}

}  // namespace kformer::impl
