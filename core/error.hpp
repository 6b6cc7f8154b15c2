// kformer's one exception type and the host-side checks that raise it.
//
// Every check runs on the host before a kernel is launched, so a failed check leaves outputs and
// parameters untouched. Messages name the layer and method ("kformer::Linear::forward"), the
// argument, and the expected versus actual shape or value.
#pragma once

#include <array>
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

#include "compat.hpp"

namespace kformer {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws Error("<where>: <parts...>").
template <class... Parts>
[[noreturn]] void fail(const std::string& where, const Parts&... parts) {
  std::ostringstream os;
  os << where << ": ";
  (os << ... << parts);
  throw Error(os.str());
}

// "(2, 5, 7)"; a negative extent prints as "*" (any size).
template <std::size_t N>
std::string shape_string(const std::array<std::int64_t, N>& extents) {
  std::ostringstream os;
  os << '(';
  for (std::size_t i = 0; i < extents.size(); ++i) {
    if (i) os << ", ";
    if (extents[i] < 0)
      os << '*';
    else
      os << extents[i];
  }
  os << ')';
  return os.str();
}

template <class ViewType>
std::array<std::int64_t, compat::rank_v<ViewType>> extents_of(const ViewType& v) {
  std::array<std::int64_t, compat::rank_v<ViewType>> e{};
  for (int i = 0; i < compat::rank_v<ViewType>; ++i)
    e[i] = static_cast<std::int64_t>(v.extent(i));
  return e;
}

template <class ViewType>
std::string shape_of(const ViewType& v) {
  return shape_string(extents_of(v));
}

// Checks v's extents against `expected` (negative entries match any size).
template <class ViewType>
void check_shape(const std::string& where, const char* name, const ViewType& v,
                 const std::array<std::int64_t, compat::rank_v<ViewType>>& expected) {
  const auto actual = extents_of(v);
  for (int i = 0; i < compat::rank_v<ViewType>; ++i) {
    if (expected[i] >= 0 && expected[i] != actual[i])
      fail(where, name, " has shape ", shape_string(actual), ", expected ", shape_string(expected));
  }
}

// Two views that must not share memory (an out-of-place kernel reading one while writing the
// other).
template <class A, class B>
void check_distinct(const std::string& where, const char* a_name, const A& a, const char* b_name,
                    const B& b) {
  const auto* a0 = reinterpret_cast<const char*>(a.data());
  const auto* b0 = reinterpret_cast<const char*>(b.data());
  const auto* a1 = a0 + a.span() * sizeof(typename A::value_type);
  const auto* b1 = b0 + b.span() * sizeof(typename B::value_type);
  if (a.span() > 0 && b.span() > 0 && a0 < b1 && b0 < a1)
    fail(where, a_name, " and ", b_name, " overlap in memory; use the in-place form instead");
}

}  // namespace kformer
