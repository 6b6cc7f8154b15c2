// Buffers for activations and temporaries that are sized for the largest shape seen so far and
// reused after that, so that a steady-state forward/backward allocates nothing.
#pragma once

#include <cstddef>
#include <string>
#include <utility>

#include <Kokkos_Core.hpp>

#include "tensor.hpp"

namespace kformer {

namespace detail {
// T*** for Rank 3: the data type of a View of that rank.
template <class T, int Rank>
struct pointers {
  using type = typename pointers<T, Rank - 1>::type*;
};
template <class T>
struct pointers<T, 0> {
  using type = T;
};
}  // namespace detail

// A device buffer that only grows. Views carved from it (`view(...)`) alias its storage and are
// valid until the next call that grows it, so owners re-derive their views at every call.
template <class T, class MemorySpace>
class GrowingBuffer {
 public:
  GrowingBuffer() = default;
  explicit GrowingBuffer(std::string label) : label_(std::move(label)) {}

  // A (n0, n1, ...) row-major view of the first n0*n1*... elements, growing the storage first
  // when it is too small (old contents are then lost). Growth is the only allocation.
  template <class... Extents>
  auto view(Extents... extents) {
    const std::size_t n = (std::size_t{1} * ... * static_cast<std::size_t>(extents));
    if (storage_.size() < n) {
      storage_ = Kokkos::View<T*, MemorySpace>();  // free first: peak memory is the new size
      storage_ =
          Kokkos::View<T*, MemorySpace>(Kokkos::view_alloc(Kokkos::WithoutInitializing, label_), n);
    }
    using ViewType = Kokkos::View<typename detail::pointers<T, sizeof...(Extents)>::type,
                                  Kokkos::LayoutRight, MemorySpace>;
    return ViewType(storage_.data(), static_cast<std::size_t>(extents)...);
  }

  std::size_t capacity() const { return storage_.size(); }
  std::size_t bytes() const { return storage_.size() * sizeof(T); }

 private:
  std::string label_ = "kformer::buffer";
  Kokkos::View<T*, MemorySpace> storage_;
};

}  // namespace kformer
