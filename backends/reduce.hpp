// Deterministic reductions over the rows of a (rows, cols) matrix: bias and norm-parameter
// gradients, batch statistics; and the first out-of-range entry of an integer vector. No
// floating-point atomics: rows are cut into a fixed number of blocks (independent of the backend
// and the thread count), each block is summed in row order into a partial row, and the partial rows
// are summed in block order. The same inputs give the same bits on a backend for any number of
// threads.
#pragma once

#include <cstdint>
#include <string>

#include <Kokkos_Core.hpp>

#include "../core/profiling.hpp"
#include "../core/tensor.hpp"
#include "../core/workspace.hpp"
#include "for_each.hpp"

namespace kformer::backends {

inline constexpr int kReductionBlocks = 64;

// out[j] = (accumulate ? out[j] : 0) + sum_i value(i, j) for i < rows, j < cols, where value is a
// device-callable (i, j) -> T (for instance dy(i, j) or dy(i, j) * xhat(i, j)).
template <class ExecutionSpace, class T, class Value>
void column_reduce(const ExecutionSpace& exec, std::int64_t rows, int cols, const Value& value,
                   const Tensor1<T, typename ExecutionSpace::memory_space>& out, bool accumulate,
                   GrowingBuffer<T, typename ExecutionSpace::memory_space>& partial_buffer) {
  using member_type = typename Kokkos::TeamPolicy<ExecutionSpace>::member_type;
  if (cols == 0) return;
  const int blocks =
      static_cast<int>(rows < kReductionBlocks ? (rows > 0 ? rows : 1) : kReductionBlocks);
  const auto partial = partial_buffer.view(blocks, cols);
  const std::int64_t rows_per_block = (rows + blocks - 1) / blocks;
  if constexpr (runs_on_host<ExecutionSpace>) {
    // A thread per block, its rows added into the partial row in order (vector loops over j).
    Kokkos::parallel_for(
        KFORMER_LABEL("kformer::column_reduce::blocks"),
        Kokkos::TeamPolicy<ExecutionSpace>(exec, blocks, Kokkos::AUTO),
        KOKKOS_LAMBDA(const member_type& team) {
          const int b = team.league_rank();
          const std::int64_t begin = b * rows_per_block;
          const std::int64_t end = begin + rows_per_block < rows ? begin + rows_per_block : rows;
          T* const acc = &partial(b, 0);
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, cols),
                               [=](const int j) { acc[j] = T(0); });
          for (std::int64_t i = begin; i < end; ++i)
            Kokkos::parallel_for(Kokkos::TeamThreadRange(team, cols),
                                 [=](const int j) { acc[j] += value(i, j); });
        });
  } else {
    // A thread per (block, column), summing its block's rows in a register in the same order
    // (the same bits): blocks x cols threads, neighbours on neighbouring columns, rather than 64
    // teams that update their partial rows in memory row by row.
    T* const out_partial = partial.data();
    Kokkos::parallel_for(
        KFORMER_LABEL("kformer::column_reduce::blocks"),
        Kokkos::RangePolicy<ExecutionSpace, Kokkos::IndexType<std::int64_t>>(
            exec, 0, std::int64_t(blocks) * cols),
        KOKKOS_LAMBDA(const std::int64_t k) {
          const std::int64_t b = k / cols;
          const int j = static_cast<int>(k % cols);
          const std::int64_t begin = b * rows_per_block;
          const std::int64_t end = begin + rows_per_block < rows ? begin + rows_per_block : rows;
          T acc = 0;
          for (std::int64_t i = begin; i < end; ++i)
            acc += value(i, j);
          out_partial[k] = acc;
        });
  }
  Kokkos::parallel_for(
      KFORMER_LABEL("kformer::column_reduce::combine"),
      Kokkos::RangePolicy<ExecutionSpace>(exec, 0, cols), KOKKOS_LAMBDA(const int j) {
        T sum = accumulate ? out(j) : T(0);
        T total = 0;
        for (int b = 0; b < blocks; ++b)
          total += partial(b, j);
        out(j) = sum + total;
      });
}

// out[j] (+)= sum_i m(i, j).
template <class ExecutionSpace, class T>
void column_sum(const ExecutionSpace& exec,
                const Tensor2<const T, typename ExecutionSpace::memory_space>& m,
                const Tensor1<T, typename ExecutionSpace::memory_space>& out, bool accumulate,
                GrowingBuffer<T, typename ExecutionSpace::memory_space>& partial_buffer) {
  column_reduce(
      exec, m.extent(0), static_cast<int>(m.extent(1)),
      KOKKOS_LAMBDA(const std::int64_t i, const int j) { return m(i, j); }, out, accumulate,
      partial_buffer);
}

// The first index i whose values(i) lies outside [lowest, highest], and that value; index is
// values.extent(0) when every value is inside. An integer reduction on the device, so that labels
// or lengths can be checked without copying them to the host.
struct FirstOutside {
  std::int64_t index;
  std::int32_t value;
};

template <class ExecutionSpace>
FirstOutside first_outside(
    const ExecutionSpace& exec, const std::string& label,
    const Tensor1<const std::int32_t, typename ExecutionSpace::memory_space>& values,
    std::int64_t lowest, std::int64_t highest) {
  using Reducer = Kokkos::MinLoc<std::int64_t, std::int32_t>;
  typename Reducer::value_type first;
  const std::int64_t n = values.extent(0);
  Kokkos::parallel_reduce(
      label, Kokkos::RangePolicy<ExecutionSpace, Kokkos::IndexType<std::int64_t>>(exec, 0, n),
      KOKKOS_LAMBDA(const std::int64_t i, typename Reducer::value_type& bad) {
        const std::int32_t v = values(i);
        if ((v < lowest || v > highest) && i < bad.val) {
          bad.val = i;
          bad.loc = v;
        }
      },
      Reducer(first));
  return {first.val < n ? first.val : n, first.loc};
}

}  // namespace kformer::backends
