// Kernels of the fixed sinusoidal positional encoding.
//
// y[b, p, :] = (s x[b, p, :] or 0) + PE[p, :], without materialising PE.
//
// CPUs: evaluating sin/cos for every (position, frequency) costs far more than streaming the
// tensor once, so each frequency is evaluated exactly (in double) only at anchor positions, every
// 1024 steps, and carried to the following positions by the rotation
//     sin((p+1) w) = sin(p w) cos(w) + cos(p w) sin(w)
//     cos((p+1) w) = cos(p w) cos(w) - sin(p w) sin(w),
// also in double. The rotation's error grows by at most ~2e-16 per step, so after 1024 steps it
// is below 3e-13: far below float precision and the 1e-12 double tolerance. A team (one thread)
// owns one anchor block of positions (and a group of batch elements). It builds 64 KiB of rows of
// PE at a time in scratch, small enough to stay in the cache while the tensor streams past, and
// adds them to every batch element of its group, for which they are one contiguous run of memory
// (long runs: chunks of 16 KiB were measured slower on 2 threads). Large outputs are written
// around the caches (backends/streaming_store.hpp). The matrix alone (one batch element, no input)
// is written straight into its rows unless it is that large: the copy out of scratch was half its
// time. The bits do not depend on the chunk size, the thread count or these paths.
//
// The rows are built kRotationGroup frequencies at a time, the group's state in registers through
// all rows of the chunk, instead of a row at a time through the whole state in scratch (a load and
// a store of it per row). On the 2-core development machine, for the (4096, 512) float matrix
// rewritten in the cache, 0.24 ms (written straight, a row at a time) became 0.10 ms with groups
// of 32; groups of 8, 16, 24, 48 and 64 took 0.49, 0.15, 0.18, 0.15 and 0.10 ms.
//
// GPUs: double-precision sin and cos for every (position, frequency) pair are cheap there (a few
// microseconds of an H200 for a 4096 x 512 table), and what matters is many independent threads
// with loads in flight: a thread per pair, applied to every batch element.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include <Kokkos_Core.hpp>

#include "../../../backends/for_each.hpp"
#include "../../../backends/streaming_store.hpp"
#include "../../../core/compat.hpp"
#include "../../../core/tensor.hpp"
#include "../sinusoid.hpp"

namespace kformer::impl {

// Positions per exact sin/cos evaluation (CPUs).
inline constexpr int kHostAnchorSpacing = 1024;
// Frequencies whose rotation state a CPU thread holds in registers (4 + 4 AVX-512 registers of
// doubles, and as many for the step).
inline constexpr int kRotationGroup = 32;

// (sin p w, cos p w) -> (sin (p+1) w, cos (p+1) w), given (sin w, cos w).
KOKKOS_INLINE_FUNCTION void rotate_one_position(double& sin_p, double& cos_p, const double sin_w,
                                                const double cos_w) {
  const double s = sin_p, c = cos_p;
  sin_p = s * cos_w + c * sin_w;
  cos_p = c * cos_w - s * sin_w;
}

// Rows [0, n_rows) (row stride dim) of the kRotationGroup frequencies from f0 (all with a cosine),
// in the layout of s, from the rotation state (sin_z, cos_z) and step (sin_w, cos_w), which it
// advances by n_rows positions. kStride: 2 interleaved, 1 split halves.
template <int kStride, class T>
KOKKOS_INLINE_FUNCTION void rotate_group_rows(const Sinusoid& s, const int f0, T* const rows,
                                              const int n_rows, double* const sin_z,
                                              double* const cos_z, const double* const sin_w,
                                              const double* const cos_w) {
  constexpr int kGroup = kRotationGroup;
  double sin_p[kGroup], cos_p[kGroup], sin_step[kGroup], cos_step[kGroup];
  for (int j = 0; j < kGroup; ++j) {
    sin_p[j] = sin_z[f0 + j];
    cos_p[j] = cos_z[f0 + j];
    sin_step[j] = sin_w[f0 + j];
    cos_step[j] = cos_w[f0 + j];
  }
  T* const sin_out = rows + s.sin_column(f0);
  T* const cos_out = rows + s.cos_column(f0);
  for (int r = 0; r < n_rows; ++r) {
    for (int j = 0; j < kGroup; ++j) {
      sin_out[std::int64_t(r) * s.dim + kStride * j] = static_cast<T>(sin_p[j]);
      cos_out[std::int64_t(r) * s.dim + kStride * j] = static_cast<T>(cos_p[j]);
      rotate_one_position(sin_p[j], cos_p[j], sin_step[j], cos_step[j]);
    }
  }
  for (int j = 0; j < kGroup; ++j) {
    sin_z[f0 + j] = sin_p[j];
    cos_z[f0 + j] = cos_p[j];
  }
}

// GPUs: a thread per (position, frequency) pair evaluates sin and cos exactly, in double, and
// applies them to every batch element, reading kGroup elements' inputs before it writes any, so
// that their loads are in flight together (x may be y itself: it cannot hoist them otherwise).
template <class T, class ExecutionSpace, bool kAddInput>
struct DirectPositionalEncodingFunctor {
  using memory_space = typename ExecutionSpace::memory_space;
  static constexpr int kGroup = 4;

  Kokkos::View<const T***, Kokkos::LayoutRight, memory_space> x;  // read only when kAddInput
  Kokkos::View<T***, Kokkos::LayoutRight, memory_space> y;
  Sinusoid sinusoid;
  double first_position;
  T input_scale;

  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t pair) const {
    const Sinusoid& sn = sinusoid;
    const int p = static_cast<int>(pair / sn.n_freq), i = static_cast<int>(pair % sn.n_freq);
    const double angle = (first_position + p) * sn.frequency(i);
    const T pe_sin = static_cast<T>(compat::math::sin(angle));
    const T pe_cos = static_cast<T>(compat::math::cos(angle));
    const bool has_cos = i < sn.n_cos;
    const int sc = sn.sin_column(i), cc = has_cos ? sn.cos_column(i) : sc;
    const int batch = static_cast<int>(y.extent(0));
    for (int b0 = 0; b0 < batch; b0 += kGroup) {
      const int n = batch - b0 < kGroup ? batch - b0 : kGroup;
      T in_sin[kGroup] = {}, in_cos[kGroup] = {};
      if constexpr (kAddInput)
        for (int g = 0; g < kGroup; ++g)
          if (g < n) {
            in_sin[g] = x(b0 + g, p, sc) * input_scale;
            in_cos[g] = x(b0 + g, p, cc) * input_scale;
          }
      for (int g = 0; g < kGroup; ++g)
        if (g < n) {
          y(b0 + g, p, sc) = in_sin[g] + pe_sin;
          if (has_cos) y(b0 + g, p, cc) = in_cos[g] + pe_cos;
        }
    }
  }
};

template <class T, class ExecutionSpace, bool kAddInput>
struct PositionalEncodingFunctor {
  // CPUs: a team is one thread, with the rotation state and the rows of PE in its scratch.
  using policy_type = Kokkos::TeamPolicy<ExecutionSpace>;
  using member_type = typename policy_type::member_type;
  using scratch_space = typename ExecutionSpace::scratch_memory_space;
  using ScratchDoubles = Kokkos::View<double*, scratch_space, Kokkos::MemoryUnmanaged>;
  using ScratchRows = Kokkos::View<T*, scratch_space, Kokkos::MemoryUnmanaged>;
  using memory_space = typename ExecutionSpace::memory_space;

  Kokkos::View<const T***, Kokkos::LayoutRight, memory_space> x;  // read only when kAddInput
  Kokkos::View<T***, Kokkos::LayoutRight, memory_space> y;
  Sinusoid sinusoid;
  double first_position;
  T input_scale;        // y = input_scale * x + PE (TST scales the projected input by sqrt(d))
  int anchor_spacing;   // positions per anchor block
  int n_blocks;         // anchor blocks of positions
  int chunk_rows;       // rows of PE built in scratch at a time
  int batch_per_group;  // the batch is split across teams when there are few blocks
  int scratch_level;    // 0 (fast, small) unless the rows do not fit there
  bool streaming;       // y is written around the caches (backends/streaming_store.hpp)

  static std::size_t scratch_bytes(int dim, int chunk_rows) {
    return 4 * ScratchDoubles::shmem_size((dim + 1) / 2) +
           ScratchRows::shmem_size(std::size_t(chunk_rows) * dim);
  }

  KOKKOS_INLINE_FUNCTION void operator()(const member_type& team) const {
    const Sinusoid sn = sinusoid;  // a local copy: the loops below keep it in registers
    const int seq = static_cast<int>(y.extent(1)), batch = static_cast<int>(y.extent(0));
    const int block = team.league_rank() % n_blocks, group = team.league_rank() / n_blocks;
    const int p_begin = block * anchor_spacing;
    const int p_end = p_begin + anchor_spacing < seq ? p_begin + anchor_spacing : seq;
    const int b_begin = group * batch_per_group;
    const int b_end = b_begin + batch_per_group < batch ? b_begin + batch_per_group : batch;

    // Rotation state (sin p w_i, cos p w_i) in double, and the step (sin w_i, cos w_i).
    double* const sin_z = ScratchDoubles(team.team_scratch(scratch_level), sn.n_freq).data();
    double* const cos_z = ScratchDoubles(team.team_scratch(scratch_level), sn.n_freq).data();
    double* const sin_w = ScratchDoubles(team.team_scratch(scratch_level), sn.n_freq).data();
    double* const cos_w = ScratchDoubles(team.team_scratch(scratch_level), sn.n_freq).data();
    T* const pe = ScratchRows(team.team_scratch(scratch_level), chunk_rows * sn.dim).data();
    const double anchor = first_position + p_begin;
    for (int i = 0; i < sn.n_freq; ++i) {
      const double w = sn.frequency(i);
      sin_z[i] = compat::math::sin(anchor * w);
      cos_z[i] = compat::math::cos(anchor * w);
      sin_w[i] = compat::math::sin(w);
      cos_w[i] = compat::math::cos(w);
    }
    // Rows [0, n_rows) of PE into `rows`, advancing the state by n_rows positions: the whole
    // groups of frequencies, then the rest (a last partial group, an odd dim's last sine) a row at
    // a time.
    const int dim = sn.dim;
    const auto write_rows = [=](T* const rows, const int n_rows) {
      const int groups_end = sn.n_cos / kRotationGroup * kRotationGroup;
      for (int f0 = 0; f0 < groups_end; f0 += kRotationGroup) {
        if (sn.interleaved)
          rotate_group_rows<2>(sn, f0, rows, n_rows, sin_z, cos_z, sin_w, cos_w);
        else
          rotate_group_rows<1>(sn, f0, rows, n_rows, sin_z, cos_z, sin_w, cos_w);
      }
      if (groups_end == sn.n_freq) return;
      for (int r = 0; r < n_rows; ++r) {
        write_sinusoid_frequencies(sn, rows + r * dim, groups_end, sn.n_freq,
                                   [=](const int i, T& sin_v, T& cos_v) {
                                     sin_v = static_cast<T>(sin_z[i]);
                                     cos_v = static_cast<T>(cos_z[i]);
                                     rotate_one_position(sin_z[i], cos_z[i], sin_w[i], cos_w[i]);
                                   });
      }
    };
    if (!kAddInput && b_end - b_begin == 1 && !streaming) {
      write_rows(&y(b_begin, p_begin, 0), p_end - p_begin);
      return;
    }
    for (int chunk_begin = p_begin; chunk_begin < p_end; chunk_begin += chunk_rows) {
      const int n_rows = chunk_begin + chunk_rows < p_end ? chunk_rows : p_end - chunk_begin;
      write_rows(pe, n_rows);

      // The chunk of each batch element is one contiguous run of n_rows * dim values, written
      // two batch elements at a time.
      const std::int64_t n = std::int64_t(n_rows) * dim;
      const T scale = input_scale;
      const auto out = y;
      const auto input = x;
      backends::store_batch_runs(
          b_begin, b_end, n, streaming, [=](const int b) { return &out(b, chunk_begin, 0); },
          [=](const int b) {
            const T* const in = &input(b, chunk_begin, 0);  // read only when kAddInput
            return [=](const std::int64_t k) { return kAddInput ? in[k] * scale + pe[k] : pe[k]; };
          });
    }
    if (streaming) backends::streaming_fence();
  }

  // Launches the kernel on exec. x may be y itself (in place).
  static void launch(const std::string& label, const ExecutionSpace& exec,
                     const Kokkos::View<const T***, Kokkos::LayoutRight, memory_space>& x,
                     const Kokkos::View<T***, Kokkos::LayoutRight, memory_space>& y,
                     const Sinusoid& sinusoid, double first_position, T input_scale = T(1)) {
    const int batch = static_cast<int>(y.extent(0));
    const int seq = static_cast<int>(y.extent(1));
    if (batch == 0 || seq == 0) return;
    constexpr bool host = Kokkos::SpaceAccessibility<Kokkos::HostSpace, memory_space>::accessible;
    if constexpr (!host) {
      Kokkos::parallel_for(label,
                           Kokkos::RangePolicy<ExecutionSpace, Kokkos::IndexType<std::int64_t>>(
                               exec, 0, std::int64_t(seq) * sinusoid.n_freq),
                           DirectPositionalEncodingFunctor<T, ExecutionSpace, kAddInput>{
                               x, y, sinusoid, first_position, input_scale});
      return;
    }
    PositionalEncodingFunctor f;
    f.x = x;
    f.y = y;
    f.sinusoid = sinusoid;
    f.first_position = first_position;
    f.input_scale = input_scale;
    f.anchor_spacing = kHostAnchorSpacing;
    f.n_blocks = (seq + f.anchor_spacing - 1) / f.anchor_spacing;
    // Enough teams to fill the space: one per thread.
    const int wanted_teams = compat::concurrency(exec);
    const int groups = std::clamp((wanted_teams + f.n_blocks - 1) / f.n_blocks, 1, batch);
    f.batch_per_group = (batch + groups - 1) / groups;
    const int league = f.n_blocks * ((batch + f.batch_per_group - 1) / f.batch_per_group);

    f.streaming = backends::use_streaming_stores(y.data(), kAddInput ? x.data() : nullptr,
                                                 y.span() * sizeof(T));
    const std::size_t chunk_bytes = 64 * 1024;
    f.chunk_rows = static_cast<int>(
        std::clamp<std::size_t>(chunk_bytes / (sizeof(T) * sinusoid.dim), 1, f.anchor_spacing));
    const std::size_t bytes = scratch_bytes(sinusoid.dim, f.chunk_rows);
    f.scratch_level = backends::team_scratch_level<ExecutionSpace>(bytes);
    policy_type policy(exec, league, 1);
    Kokkos::parallel_for(label, policy.set_scratch_size(f.scratch_level, Kokkos::PerTeam(bytes)),
                         f);
  }
};

}  // namespace kformer::impl
