// Row-wise kernels (softmax rows, normalised tokens, bias rows): a team takes several consecutive
// rows, a thread per row, and the body runs vector loops (ThreadVectorRange) along its row. On a
// CPU a team is one thread with many rows, so launches are few and the row loops vectorise; on a
// GPU the rows of a team share a block and the vector lanes read a row coalesced.
#pragma once

#include <cstdint>
#include <string>

#include <Kokkos_Core.hpp>

#include "for_each.hpp"

namespace kformer::backends {

template <class ExecutionSpace>
struct RowShape {
  static constexpr bool host = runs_on_host<ExecutionSpace>;
  static constexpr int team_size = host ? 1 : 8;
  static constexpr int vector_length = host ? 1 : 32;
  static constexpr int rows_per_team = host ? 32 : team_size;
};

namespace impl {

// The kernel of for_each_row as a named functor: nvcc cannot compile a device lambda that
// captures another device lambda passed in as a template argument.
template <class ExecutionSpace, class Body>
struct RowKernel {
  using member_type = typename Kokkos::TeamPolicy<ExecutionSpace>::member_type;
  Body body;
  std::int64_t rows, per_team;

  KOKKOS_INLINE_FUNCTION void operator()(const member_type& team) const {
    const std::int64_t first = team.league_rank() * per_team;
    const int count = static_cast<int>(first + per_team < rows ? per_team : rows - first);
    const Body& f = body;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, count),
                         [&](const int r) { f(team, first + r); });
  }
};

}  // namespace impl

// Calls body(member, row) for every row in [0, rows), with member usable for ThreadVectorRange
// loops over the row's columns.
template <class ExecutionSpace, class Body>
void for_each_row(const ExecutionSpace& exec, const std::string& label, std::int64_t rows,
                  const Body& body) {
  using Shape = RowShape<ExecutionSpace>;
  if (rows <= 0) return;
  const std::int64_t per_team = Shape::rows_per_team;
  const std::int64_t league = (rows + per_team - 1) / per_team;
  Kokkos::parallel_for(label,
                       Kokkos::TeamPolicy<ExecutionSpace>(exec, static_cast<int>(league),
                                                          Shape::team_size, Shape::vector_length),
                       impl::RowKernel<ExecutionSpace, Body>{body, rows, per_team});
}

// Loops along one row inside for_each_row's body. On a CPU they are plain loops that the compiler
// vectorises: the reductions keep 8 independent partials (combined in a fixed order), which needs
// no reassociation and gives the same bits on Serial and OpenMP. On a GPU they spread the row
// over the team's vector lanes.
template <class Member>
inline constexpr bool is_host_member = runs_on_host<typename Member::execution_space>;

// The member of a row loop run by one CPU thread outside any team (a task that does the rest of
// its work itself): the row helpers below need nothing of it but its execution space.
struct HostRowMember {
  using execution_space = Kokkos::DefaultHostExecutionSpace;
};

// f(j) for j in [0, n).
template <class Member, class F>
KOKKOS_INLINE_FUNCTION void row_for(const Member& team, const int n, const F& f) {
  if constexpr (is_host_member<Member>) {
    for (int j = 0; j < n; ++j)
      f(j);
  } else {
    Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, n), f);
  }
}

// The sum of f(j) over [0, n).
template <class T, class Member, class F>
KOKKOS_INLINE_FUNCTION T row_sum(const Member& team, const int n, const F& f) {
  if constexpr (is_host_member<Member>) {
    T partial[8] = {};
    int j = 0;
    for (; j + 8 <= n; j += 8)
      for (int k = 0; k < 8; ++k)
        partial[k] += f(j + k);
    for (int k = 0; j + k < n; ++k)
      partial[k] += f(j + k);
    return ((partial[0] + partial[1]) + (partial[2] + partial[3])) +
           ((partial[4] + partial[5]) + (partial[6] + partial[7]));
  } else {
    T sum = 0;
    Kokkos::parallel_reduce(
        Kokkos::ThreadVectorRange(team, n), [&](const int j, T& s) { s += f(j); }, sum);
    return sum;
  }
}

// The maximum of f(j) over [0, n), and at least the lowest finite T (Kokkos' identity for Max).
template <class T, class Member, class F>
KOKKOS_INLINE_FUNCTION T row_max(const Member& team, const int n, const F& f) {
  const T lowest = Kokkos::reduction_identity<T>::max();
  if constexpr (is_host_member<Member>) {
    T partial[8] = {lowest, lowest, lowest, lowest, lowest, lowest, lowest, lowest};
    int j = 0;
    for (; j + 8 <= n; j += 8)
      for (int k = 0; k < 8; ++k) {
        const T v = f(j + k);
        partial[k] = v > partial[k] ? v : partial[k];
      }
    for (int k = 0; j + k < n; ++k) {
      const T v = f(j + k);
      partial[k] = v > partial[k] ? v : partial[k];
    }
    T m = lowest;
    for (int k = 0; k < 8; ++k)
      m = partial[k] > m ? partial[k] : m;
    return m;
  } else {
    T m = lowest;
    Kokkos::parallel_reduce(
        Kokkos::ThreadVectorRange(team, n),
        [&](const int j, T& acc) {
          const T v = f(j);
          if (v > acc) acc = v;
        },
        Kokkos::Max<T>(m));
    return m;
  }
}

}  // namespace kformer::backends
