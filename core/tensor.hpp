// Tensor aliases and zero-copy reshapes.
//
// Activations are (batch, seq, feature) LayoutRight Views: the feature index is fastest, which is
// PyTorch's batch_first layout and the same memory as Julia's column-major (feature, seq, batch).
// GEMMs see them as (batch*seq, feature) matrices over the same memory.
#pragma once

#include <Kokkos_Core.hpp>

#include "compat.hpp"
#include "error.hpp"

namespace kformer {

template <class T, class MemorySpace>
using Tensor1 = Kokkos::View<T*, Kokkos::LayoutRight, MemorySpace>;
template <class T, class MemorySpace>
using Tensor2 = Kokkos::View<T**, Kokkos::LayoutRight, MemorySpace>;
template <class T, class MemorySpace>
using Tensor3 = Kokkos::View<T***, Kokkos::LayoutRight, MemorySpace>;
template <class T, class MemorySpace>
using Tensor4 = Kokkos::View<T****, Kokkos::LayoutRight, MemorySpace>;

// (batch, seq, feature) viewed as (batch*seq, feature), same memory. The result does not keep the
// allocation alive: it must not outlive x.
template <class T, class MemorySpace>
Tensor2<T, MemorySpace> as_matrix(const Tensor3<T, MemorySpace>& x) {
  return Tensor2<T, MemorySpace>(x.data(), x.extent(0) * x.extent(1), x.extent(2));
}

// A (seq, feature) sequence viewed as a batch of one, same memory (must not outlive x). x may be
// any rank-2 View whose memory is row-major (a subview of rows of a trajectory); other strides
// are an Error (core/view_adapters.hpp reads more layouts).
template <class View>
auto as_batch(const View& x) {
  static_assert(compat::rank_v<View> == 2, "kformer::as_batch takes a (seq, feature) View");
  const bool row_major =
      (x.extent(1) <= 1 || x.stride(1) == 1) && (x.extent(0) <= 1 || x.stride(0) == x.extent(1));
  if (!row_major)
    fail("kformer::as_batch", "x of shape ", shape_of(x), " has strides (", x.stride(0), ", ",
         x.stride(1), "), expected row-major (", x.extent(1), ", 1)");
  return Tensor3<typename View::value_type, typename View::memory_space>(x.data(), 1, x.extent(0),
                                                                         x.extent(1));
}

// A deep copy of any View in host memory (for tests, I/O and printing; never in a forward pass).
template <class ViewType>
auto to_host(const ViewType& v) {
  return Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
}

}  // namespace kformer
