// Small elementwise kernels shared by the composite layers (residual connections).
#pragma once

#include <cstdint>

#include <Kokkos_Core.hpp>

#include "../backends/for_each.hpp"
#include "../backends/rows.hpp"
#include "../core/error.hpp"
#include "../core/layer.hpp"
#include "../core/profiling.hpp"

namespace kformer {

// out = value everywhere, over a contiguous view (Kokkos::deep_copy's fill names its kernel with a
// std::string made at every call).
template <class ExecutionSpace, class Out>
void fill(const ExecutionSpace& exec, typename Out::const_value_type value, const Out& out) {
  using T = typename Out::non_const_value_type;
  T* const po = out.data();
  const T v = value;
  backends::for_each_index(
      exec, KFORMER_LABEL("kformer::fill"), std::int64_t(out.size()),
      KOKKOS_LAMBDA(const std::int64_t i) { po[i] = v; });
}

// out = a + b over contiguous views of equal size (out may be a or b).
template <class ExecutionSpace, class A, class B, class Out>
void add(const ExecutionSpace& exec, const A& a, const B& b, const Out& out) {
  using T = typename Out::non_const_value_type;
  if (a.size() != out.size() || b.size() != out.size())
    fail("kformer::add", "sizes differ: ", shape_of(a), ", ", shape_of(b), ", ", shape_of(out));
  const T* const pa = a.data();
  const T* const pb = b.data();
  T* const po = out.data();
  backends::for_each_index(
      exec, KFORMER_LABEL("kformer::add"), std::int64_t(out.size()),
      KOKKOS_LAMBDA(const std::int64_t i) { po[i] = pa[i] + pb[i]; });
}

// out = in over contiguous views of equal size.
template <class ExecutionSpace, class In, class Out>
void copy(const ExecutionSpace& exec, const In& in, const Out& out) {
  using T = typename Out::non_const_value_type;
  if (in.size() != out.size())
    fail("kformer::copy", "sizes differ: ", shape_of(in), ", ", shape_of(out));
  const T* const pi = in.data();
  T* const po = out.data();
  if (pi == po) return;
  backends::for_each_index(
      exec, KFORMER_LABEL("kformer::copy"), std::int64_t(out.size()),
      KOKKOS_LAMBDA(const std::int64_t i) { po[i] = pi[i]; });
}

// out = scale * in over contiguous views of equal size; nothing to do for scale 1 in place.
template <class ExecutionSpace, class T, class In, class Out>
void scale_copy(const ExecutionSpace& exec, T scale, const In& in, const Out& out) {
  using V = typename Out::non_const_value_type;
  if (in.size() != out.size())
    fail("kformer::scale_copy", "sizes differ: ", shape_of(in), ", ", shape_of(out));
  if (scale == T(1)) return copy(exec, in, out);
  const V* const pi = in.data();
  V* const po = out.data();
  const V s = static_cast<V>(scale);
  backends::for_each_index(
      exec, KFORMER_LABEL("kformer::scale_copy"), std::int64_t(out.size()),
      KOKKOS_LAMBDA(const std::int64_t i) { po[i] = s * pi[i]; });
}

// out = scale * in (Assign) or out += scale * in (Add), over contiguous views of equal size: how a
// backward whose input gradient is its output gradient scaled writes dx.
template <class ExecutionSpace, class T, class In, class Out>
void write_scaled(const ExecutionSpace& exec, WriteMode mode, T scale, const In& in,
                  const Out& out) {
  using V = typename Out::non_const_value_type;
  if (mode == WriteMode::Assign) return scale_copy(exec, scale, in, out);
  if (in.size() != out.size())
    fail("kformer::write_scaled", "sizes differ: ", shape_of(in), ", ", shape_of(out));
  const V* const pi = in.data();
  V* const po = out.data();
  const V s = static_cast<V>(scale);
  backends::for_each_index(
      exec, KFORMER_LABEL("kformer::add_scaled"), std::int64_t(out.size()),
      KOKKOS_LAMBDA(const std::int64_t i) { po[i] += s * pi[i]; });
}

// m[i, :] = row for every row of a (rows, cols) matrix (a bias broadcast before a GEMM with beta
// 1).
template <class ExecutionSpace, class Row, class Matrix>
void fill_rows(const ExecutionSpace& exec, const Row& row, const Matrix& m) {
  using T = typename Matrix::non_const_value_type;
  const int cols = static_cast<int>(m.extent(1));
  if (row.size() != m.extent(1))
    fail("kformer::fill_rows", "row has shape ", shape_of(row), ", matrix has shape ", shape_of(m));
  const T* const r = row.data();
  const Matrix out = m;
  backends::for_each_row(
      exec, KFORMER_LABEL("kformer::fill_rows"), std::int64_t(m.extent(0)),
      KOKKOS_LAMBDA(const typename Kokkos::TeamPolicy<ExecutionSpace>::member_type& team,
                    const std::int64_t i) {
        backends::row_for(team, cols, [=](const int j) { out(i, j) = r[j]; });
      });
}

}  // namespace kformer
