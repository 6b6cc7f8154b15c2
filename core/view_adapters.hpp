// A caller's View of any layout, as the row-major Tensor kformer's layers take, over the same
// memory (no copy), or a kformer::Error that names the layout.
//
// Layers take LayoutRight Views (core/tensor.hpp). A View of another layout converts implicitly
// only where Kokkos can prove it safe at compile time; a LayoutStride View converts at run time
// and Kokkos aborts the program when its strides are not row-major. Pass such Views through these
// functions instead:
//
//   as_tensor(v, where, name)
//       v of rank 1-4 whose memory is row-major (last index fastest): LayoutRight; LayoutLeft or
//       LayoutStride when the strides happen to be row-major (a subview of rows of a LayoutRight
//       View, a window of a trajectory, extents of 1). Extents of 0 or 1 place no constraint.
//   as_tensor_from_column_major(v, where, name)
//       v: LayoutLeft (or column-major LayoutStride) of extents (n_0, ..., n_{r-1}), as Fortran
//       and Kokkos' CUDA default lay arrays out, seen as the row-major Tensor of the reversed
//       extents (n_{r-1}, ..., n_0): the same memory. A Fortran x(dim, seq, batch) is kformer's
//       (batch, seq, dim).
//
// Anything else (overlapping windows of a trajectory, a column of a matrix) cannot be read in
// place: the Error says so, and that a copy into a LayoutRight View (Kokkos::deep_copy) works.
//
// Layers take their tensor arguments as RowMajorView<Tensor>, which does the as_tensor check on
// the conversion itself: any View of the right rank, value type and memory space can be passed
// to a layer directly, and one whose memory is not row-major is a kformer::Error there (Kokkos'
// own conversion would abort the program, or not compile for LayoutLeft).
#pragma once

#include <array>
#include <cstdint>
#include <sstream>
#include <string>
#include <type_traits>

#include <Kokkos_Core.hpp>

#include "compat.hpp"
#include "error.hpp"
#include "tensor.hpp"

namespace kformer {

namespace detail {

template <class View>
const char* layout_name() {
  using Layout = typename View::array_layout;
  if constexpr (std::is_same_v<Layout, Kokkos::LayoutRight>) return "LayoutRight";
  if constexpr (std::is_same_v<Layout, Kokkos::LayoutLeft>) return "LayoutLeft";
  if constexpr (std::is_same_v<Layout, Kokkos::LayoutStride>) return "LayoutStride";
  return "a layout other than LayoutRight, LayoutLeft or LayoutStride";
}

template <class View>
std::array<std::int64_t, compat::rank_v<View>> strides_of(const View& v) {
  std::array<std::int64_t, compat::rank_v<View>> s{};
  for (int i = 0; i < compat::rank_v<View>; ++i)
    s[i] = static_cast<std::int64_t>(v.stride(i));
  return s;
}

// True when walking the dimensions in `order` (fastest first) finds each stride equal to the
// product of the extents before it; dimensions of extent 0 or 1 are skipped.
template <class View, std::size_t N>
bool is_dense_in_order(const View& v, const std::array<int, N>& order) {
  std::int64_t expected = 1;
  for (const int d : order) {
    const auto extent = static_cast<std::int64_t>(v.extent(d));
    if (extent <= 1) continue;
    if (static_cast<std::int64_t>(v.stride(d)) != expected) return false;
    expected *= extent;
  }
  return true;
}

// True when v's memory is row-major dense (is_dense_in_order, last dimension fastest).
template <class View>
bool is_row_major_dense(const View& v) {
  constexpr int rank = compat::rank_v<View>;
  std::array<int, rank> order{};
  for (int i = 0; i < rank; ++i)
    order[i] = rank - 1 - i;
  return is_dense_in_order(v, order);
}

template <class View>
[[noreturn]] void fail_layout(const char* where, const char* name, const View& v,
                              const char* wanted) {
  fail(where, name, " is a ", layout_name<View>(), " View of shape ", shape_of(v), " and strides ",
       shape_string(strides_of(v)), ", which is not ", wanted,
       " memory; kformer reads it in place only then (copy it into a LayoutRight View with "
       "Kokkos::deep_copy otherwise)");
}

template <class T, class M, std::size_t R>
auto row_major_tensor(T* data, const std::array<std::int64_t, R>& e) {
  if constexpr (R == 1) return Tensor1<T, M>(data, e[0]);
  if constexpr (R == 2) return Tensor2<T, M>(data, e[0], e[1]);
  if constexpr (R == 3) return Tensor3<T, M>(data, e[0], e[1], e[2]);
  if constexpr (R == 4) return Tensor4<T, M>(data, e[0], e[1], e[2], e[3]);
}

}  // namespace detail

// v as a row-major Tensor of the same extents over the same memory (must not outlive v).
template <class View>
auto as_tensor(const View& v, const char* where, const char* name) {
  constexpr int rank = compat::rank_v<View>;
  static_assert(rank >= 1 && rank <= 4, "kformer::as_tensor: Views of rank 1 to 4");
  if (!detail::is_row_major_dense(v)) detail::fail_layout(where, name, v, "row-major dense");
  using T = typename View::value_type;
  using M = typename View::memory_space;
  return detail::row_major_tensor<T, M>(v.data(), extents_of(v));
}

// v's extents reversed, as a row-major Tensor over the same memory (must not outlive v).
template <class View>
auto as_tensor_from_column_major(const View& v, const char* where, const char* name) {
  constexpr int rank = compat::rank_v<View>;
  static_assert(rank >= 1 && rank <= 4,
                "kformer::as_tensor_from_column_major: Views of rank 1 to 4");
  std::array<int, rank> order{};
  for (int i = 0; i < rank; ++i)
    order[i] = i;
  if (!detail::is_dense_in_order(v, order))
    detail::fail_layout(where, name, v, "column-major dense");
  const auto e = extents_of(v);
  std::array<std::int64_t, rank> reversed{};
  for (int i = 0; i < rank; ++i)
    reversed[i] = e[rank - 1 - i];
  using T = typename View::value_type;
  using M = typename View::memory_space;
  return detail::row_major_tensor<T, M>(v.data(), reversed);
}

namespace detail {

// True for a Kokkos::View and for classes derived from one (RowMajorView).
template <class D, class... P>
std::true_type derives_from_view(const Kokkos::View<D, P...>*);
std::false_type derives_from_view(...);
template <class V>
inline constexpr bool is_view_like_v =
    decltype(derives_from_view(static_cast<const std::decay_t<V>*>(nullptr)))::value;

// Kokkos' own rule for assigning a LayoutStride View to a LayoutRight one: every stride exactly
// row-major, extents of 1 included.
template <class View>
bool has_exact_row_major_strides(const View& v) {
  std::int64_t expected = 1;
  for (int d = compat::rank_v<View> - 1; d >= 0; --d) {
    if (static_cast<std::int64_t>(v.stride(d)) != expected) return false;
    expected *= static_cast<std::int64_t>(v.extent(d));
  }
  return true;
}

}  // namespace detail

// Tensor (a LayoutRight View), constructible from any View of the same rank, value type (const
// added or kept) and memory space: a contiguous LayoutRight View as Kokkos assigns it; any other
// View (a LayoutRight subview of columns included) when its memory is row-major dense (as_tensor's
// rule), else a kformer::Error naming the layout, shape and strides. A LayoutStride View with
// exactly row-major strides keeps its allocation alive; any other accepted View is viewed unmanaged
// (a layer's argument lives for the call). Everything else is the View's: kernels, deep_copy and
// subview see the Tensor itself.
template <class Tensor>
class RowMajorView : public Tensor {
  static_assert(std::is_same_v<typename Tensor::array_layout, Kokkos::LayoutRight>,
                "kformer::RowMajorView wraps a LayoutRight View");

  template <class Source>
  static constexpr bool converts_from() {
    using S = typename Source::value_type;
    using D = typename Tensor::value_type;
    return compat::rank_v<Source> == compat::rank_v<Tensor> &&
           std::is_same_v<typename Source::memory_space, typename Tensor::memory_space> &&
           std::is_same_v<std::remove_const_t<S>, std::remove_const_t<D>> &&
           (std::is_const_v<D> || !std::is_const_v<S>);
  }

  template <class Source>
  static Tensor checked(const Source& v) {
    using Layout = typename Source::array_layout;
    // A LayoutRight subview of columns keeps its row stride: LayoutRight, but not dense.
    if constexpr (std::is_same_v<Layout, Kokkos::LayoutRight>)
      if (v.span_is_contiguous()) return v;
    if (!detail::is_row_major_dense(v))
      fail("kformer::RowMajorView", "a ", detail::layout_name<Source>(), " View of shape ",
           shape_of(v), " and strides ", shape_string(detail::strides_of(v)),
           " was passed where kformer takes a row-major (LayoutRight) tensor; its memory is not "
           "row-major dense, so it cannot be read in place (copy it into a LayoutRight View with "
           "Kokkos::deep_copy, or pass a column-major View through "
           "kformer::as_tensor_from_column_major)");
    if constexpr (std::is_same_v<Layout, Kokkos::LayoutStride>)
      if (detail::has_exact_row_major_strides(v)) return v;
    return detail::row_major_tensor<typename Tensor::value_type, typename Tensor::memory_space>(
        v.data(), extents_of(v));
  }

 public:
  RowMajorView() = default;

  // Any View that converts (see above); implicit, like Kokkos' own View conversions.
  template <class D, class... P, std::enable_if_t<converts_from<Kokkos::View<D, P...>>(), int> = 0>
  RowMajorView(const Kokkos::View<D, P...>& v)  // NOLINT(google-explicit-constructor)
      : Tensor(checked(v)) {}

  // Tensor's own constructors: (label, extents...), (pointer, extents...), (view_alloc(...), ...).
  template <class First, class... Rest,
            std::enable_if_t<!detail::is_view_like_v<First> &&
                                 std::is_constructible_v<Tensor, const First&, const Rest&...>,
                             int> = 0>
  explicit RowMajorView(const First& first, const Rest&... rest) : Tensor(first, rest...) {}
};

}  // namespace kformer
