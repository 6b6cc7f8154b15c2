// Kernels of the fixed sinusoidal positional encoding.
//
// y[b, p, :] = (s x[b, p, :] or 0) + PE[p, :], without materialising PE.
//
// Evaluating sin/cos for every (position, frequency) costs far more than streaming the tensor
// once, so each frequency is evaluated exactly (in double) only at anchor positions and carried to
// the following positions by the rotation
//     sin((p+1) w) = sin(p w) cos(w) + cos(p w) sin(w)
//     cos((p+1) w) = cos(p w) cos(w) - sin(p w) sin(w),
// also in double. The rotation's error grows by at most ~2e-16 per step, so after the host's 1024
// steps between anchors it is below 3e-13: far below float precision and the 1e-12 double
// tolerance. GPUs anchor every 32 steps, which gives them more independent teams.
//
// A team owns one anchor block of positions (and a group of batch elements). It builds a chunk of
// rows of PE at a time in scratch and adds it to every batch element of its group, for which the
// chunk is one contiguous run of memory (streams on CPUs, coalesces on GPUs). Chunks are large on
// CPUs (~256 KiB: long streams, measured best on 2 threads) and small on GPUs (fit in shared
// memory). Only the anchor spacing affects the values, and it is fixed per kind of space: the bits
// do not depend on the chunk size, the team size or the thread count.
#pragma once

#include <algorithm>
#include <cstdint>

#include <Kokkos_Core.hpp>

#include "../../../core/compat.hpp"
#include "../../../core/tensor.hpp"
#include "../sinusoid.hpp"

namespace kformer::impl {

// Positions per exact sin/cos evaluation.
inline constexpr int kHostAnchorSpacing = 1024;
inline constexpr int kDeviceAnchorSpacing = 32;

template <class T, class ExecutionSpace, bool kAddInput>
struct PositionalEncodingFunctor {
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

  static std::size_t scratch_bytes(int dim, int chunk_rows) {
    return ScratchDoubles::shmem_size(dim + 1) + 2 * ScratchDoubles::shmem_size((dim + 1) / 2) +
           ScratchRows::shmem_size(std::size_t(chunk_rows) * dim);
  }

  KOKKOS_INLINE_FUNCTION void operator()(const member_type& team) const {
    const Sinusoid sn = sinusoid;  // local copies: the loops below capture by value and vectorise
    const int seq = static_cast<int>(y.extent(1)), batch = static_cast<int>(y.extent(0));
    const int block = team.league_rank() % n_blocks, group = team.league_rank() / n_blocks;
    const int p_begin = block * anchor_spacing;
    const int p_end = p_begin + anchor_spacing < seq ? p_begin + anchor_spacing : seq;
    const int b_begin = group * batch_per_group;
    const int b_end = b_begin + batch_per_group < batch ? b_begin + batch_per_group : batch;

    // Rotation state z, laid out like a row of PE (z[sin_column(i)] = sin p w_i, z[cos_column(i)]
    // = cos p w_i, in double; an odd dim's last cosine in z[dim]), and the step (sin w_i, cos w_i).
    ScratchDoubles z(team.team_scratch(scratch_level), sn.dim + 1);
    ScratchDoubles sin_w(team.team_scratch(scratch_level), sn.n_freq);
    ScratchDoubles cos_w(team.team_scratch(scratch_level), sn.n_freq);
    ScratchRows rows(team.team_scratch(scratch_level), chunk_rows * sn.dim);
    const double anchor = first_position + p_begin;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, sn.n_freq), [=](const int i) {
      const double w = sn.frequency(i);
      z(sn.sin_column(i)) = compat::math::sin(anchor * w);
      z(i < sn.n_cos ? sn.cos_column(i) : sn.dim) = compat::math::cos(anchor * w);
      sin_w(i) = compat::math::sin(w);
      cos_w(i) = compat::math::cos(w);
    });

    // Frequency pairs (i < n_cos) with the layout's access pattern fixed inside the loop, so that
    // it vectorises; an odd dim's last sine separately. A thread owns the same frequencies in
    // every row (the range is split the same way each time): no barrier between rows.
    const int n_cos = sn.n_cos, dim = sn.dim;
    const bool interleaved = sn.interleaved, odd = n_cos < sn.n_freq;
    const T* const pe = rows.data();
    double* const state = z.data();
    for (int chunk_begin = p_begin; chunk_begin < p_end; chunk_begin += chunk_rows) {
      const int n_rows = chunk_begin + chunk_rows < p_end ? chunk_rows : p_end - chunk_begin;
      team.team_barrier();  // the previous chunk has been added everywhere
      for (int r = 0; r < n_rows; ++r) {
        T* const row = rows.data() + r * dim;
        // Writes (sin, cos) of frequency i from z[si], z[ci] to the row, then rotates them.
        const auto step = [=](const int i, const int si, const int ci) {
          const double a = state[si], b = state[ci];
          row[si] = static_cast<T>(a);
          row[ci] = static_cast<T>(b);
          state[si] = a * cos_w(i) + b * sin_w(i);
          state[ci] = b * cos_w(i) - a * sin_w(i);
        };
        if (interleaved)
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n_cos),
                               [=](const int i) { step(i, 2 * i, 2 * i + 1); });
        else
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n_cos),
                               [=](const int i) { step(i, i, n_cos + i); });
        if (odd) {  // the last column is the sine of frequency n_cos; its cosine lives in z[dim]
          Kokkos::single(Kokkos::PerTeam(team), [=]() {
            const double a = state[dim - 1], b = state[dim];
            row[dim - 1] = static_cast<T>(a);
            state[dim - 1] = a * cos_w(n_cos) + b * sin_w(n_cos);
            state[dim] = b * cos_w(n_cos) - a * sin_w(n_cos);
          });
        }
      }
      team.team_barrier();

      // The chunk of each batch element is one contiguous run of n_rows * dim values.
      const int n = n_rows * dim;
      const T scale = input_scale;
      for (int b = b_begin; b < b_end; ++b) {
        T* const out = &y(b, chunk_begin, 0);
        if constexpr (kAddInput) {
          const T* const in = &x(b, chunk_begin, 0);
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n),
                               [=](const int k) { out[k] = in[k] * scale + pe[k]; });
        } else {
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n),
                               [=](const int k) { out[k] = pe[k]; });
        }
      }
    }
  }

  // Launches the kernel on exec. x may be y itself (in place).
  static void launch(const char* label, const ExecutionSpace& exec,
                     const Kokkos::View<const T***, Kokkos::LayoutRight, memory_space>& x,
                     const Kokkos::View<T***, Kokkos::LayoutRight, memory_space>& y,
                     const Sinusoid& sinusoid, double first_position, T input_scale = T(1)) {
    const int batch = static_cast<int>(y.extent(0));
    const int seq = static_cast<int>(y.extent(1));
    if (batch == 0 || seq == 0) return;
    PositionalEncodingFunctor f;
    f.x = x;
    f.y = y;
    f.sinusoid = sinusoid;
    f.first_position = first_position;
    f.input_scale = input_scale;
    const bool host = Kokkos::SpaceAccessibility<Kokkos::HostSpace, memory_space>::accessible;
    f.anchor_spacing = host ? kHostAnchorSpacing : kDeviceAnchorSpacing;
    f.n_blocks = (seq + f.anchor_spacing - 1) / f.anchor_spacing;
    // Enough teams to fill the space: one per host thread, or one per ~64 device threads.
    const int concurrency = compat::concurrency(exec);
    const int wanted_teams = host ? concurrency : std::max(1, concurrency / 64);
    const int groups = std::clamp((wanted_teams + f.n_blocks - 1) / f.n_blocks, 1, batch);
    f.batch_per_group = (batch + groups - 1) / groups;
    const int league = f.n_blocks * ((batch + f.batch_per_group - 1) / f.batch_per_group);

    const std::size_t chunk_bytes = host ? 256 * 1024 : 16 * 1024;
    f.chunk_rows = static_cast<int>(
        std::clamp<std::size_t>(chunk_bytes / (sizeof(T) * sinusoid.dim), 1, f.anchor_spacing));
    const std::size_t bytes = scratch_bytes(sinusoid.dim, f.chunk_rows);
    f.scratch_level = bytes <= static_cast<std::size_t>(policy_type::scratch_size_max(0)) ? 0 : 1;
    policy_type policy(exec, league, Kokkos::AUTO);
    Kokkos::parallel_for(label, policy.set_scratch_size(f.scratch_level, Kokkos::PerTeam(bytes)),
                         f);
  }
};

}  // namespace kformer::impl
