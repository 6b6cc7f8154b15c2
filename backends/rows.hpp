// Row-wise kernels (softmax rows, normalised tokens, bias rows): a team takes several consecutive
// rows, a thread per row, and the body runs vector loops (ThreadVectorRange) along its row. On a
// CPU a team is one thread with many rows, so launches are few and the row loops vectorise; on a
// GPU the rows of a team share a block and the vector lanes read a row coalesced.
#pragma once

#include <cstdint>

#include <Kokkos_Core.hpp>

namespace kformer::backends {

template <class ExecutionSpace>
struct RowShape {
  static constexpr bool host =
      Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename ExecutionSpace::memory_space>::accessible;
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
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, count), [&](const int r) { f(team, first + r); });
  }
};

}  // namespace impl

// Calls body(member, row) for every row in [0, rows), with member usable for ThreadVectorRange
// loops over the row's columns.
template <class ExecutionSpace, class Body>
void for_each_row(const ExecutionSpace& exec, const char* label, std::int64_t rows, const Body& body) {
  using Shape = RowShape<ExecutionSpace>;
  if (rows <= 0) return;
  const std::int64_t per_team = Shape::rows_per_team;
  const std::int64_t league = (rows + per_team - 1) / per_team;
  Kokkos::parallel_for(
      label, Kokkos::TeamPolicy<ExecutionSpace>(exec, static_cast<int>(league), Shape::team_size, Shape::vector_length),
      impl::RowKernel<ExecutionSpace, Body>{body, rows, per_team});
}

}  // namespace kformer::backends
