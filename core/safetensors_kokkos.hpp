// Host values (from a safetensors file or elsewhere) into Kokkos Views of any memory space.
//
// The host vector itself is the staging buffer: it is wrapped in an unmanaged host View of the
// target's layout and extents and copied with one deep_copy, so loading a tensor into device
// memory costs one host-to-device transfer and no extra host copy. Kept apart from
// safetensors.hpp so that the reader does not need Kokkos.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <Kokkos_Core.hpp>

#include "compat.hpp"
#include "error.hpp"
#include "safetensors.hpp"

namespace kformer {

// Copies `host` (row-major) into `view` with one deep_copy. The view must be contiguous and
// LayoutRight (or of rank 0 or 1, where layouts agree) and hold exactly host.size() elements;
// otherwise kformer::Error names `what`, the view's label and both counts, and nothing is copied.
template <class ViewType>
void copy_to_view(const std::vector<typename ViewType::non_const_value_type>& host,
                  const ViewType& view, const std::string& what = "host values") {
  constexpr int rank = compat::rank_v<ViewType>;
  static_assert(rank <= 1 || std::is_same_v<typename ViewType::array_layout, Kokkos::LayoutRight>,
                "copy_to_view: host data is row-major; the view must be LayoutRight");
  const std::string where = "kformer::copy_to_view";
  if (host.size() != view.size())
    fail(where, what, " has ", host.size(), " values but view '", view.label(), "' of shape ",
         shape_of(view), " holds ", view.size());
  if (!view.span_is_contiguous())
    fail(where, "view '", view.label(), "' is not contiguous; copy into a contiguous view");
  using Staging = Kokkos::View<typename ViewType::const_data_type, typename ViewType::array_layout,
                               Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  const Staging staging(host.data(), view.layout());
  Kokkos::deep_copy(view, staging);
}

// Loads tensor `name` of `file` into `view`, whose extents must equal the tensor's shape. The
// elements are converted to the view's value type (float or double from any dtype, integers from
// integer and BOOL tensors; see File::to_float and friends).
template <class ViewType>
void load_tensor(const safetensors::File& file, std::string_view name, const ViewType& view) {
  using Value = typename ViewType::non_const_value_type;
  static_assert(std::is_arithmetic_v<Value>, "load_tensor: the view must hold numbers");
  constexpr int rank = compat::rank_v<ViewType>;
  const safetensors::TensorInfo& info = file.info(name);
  bool same_shape = static_cast<int>(info.shape.size()) == rank;
  for (int d = 0; same_shape && d < rank; ++d)
    same_shape = info.shape[d] == static_cast<std::int64_t>(view.extent(d));
  if (!same_shape) {
    std::string shape = "(";
    for (std::size_t d = 0; d < info.shape.size(); ++d)
      shape += (d ? ", " : "") + std::to_string(info.shape[d]);
    fail("kformer::load_tensor", file.source(), ": tensor '", info.name, "' has shape ",
         shape + ")", ", view '", view.label(), "' has shape ", shape_of(view));
  }
  const std::string what = "tensor '" + info.name + "'";
  if constexpr (std::is_same_v<Value, float>) {
    copy_to_view(file.to_float(name), view, what);
  } else if constexpr (std::is_same_v<Value, double>) {
    copy_to_view(file.to_double(name), view, what);
  } else {
    const std::vector<std::int64_t> values = file.to_int64(name);
    std::vector<Value> converted(values.size());
    for (std::size_t i = 0; i < values.size(); ++i) {
      converted[i] = static_cast<Value>(values[i]);
      const bool fits = static_cast<std::int64_t>(converted[i]) == values[i] &&
                        (std::is_signed_v<Value> || values[i] >= 0);
      if (!fits)
        fail("kformer::load_tensor", file.source(), ": tensor '", info.name, "': value ", values[i],
             " at element ", i, " does not fit in the view's value type");
    }
    copy_to_view(converted, view, what);
  }
}

}  // namespace kformer
