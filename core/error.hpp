// kformer's one exception type and the host-side checks that raise it.
//
// Every check runs on the host before a kernel is launched, so a failed check leaves outputs and
// parameters untouched. Messages name the layer and method ("kformer::Linear::forward"), the
// argument, and the expected versus actual shape or value.
#pragma once

#include <array>
#include <cstdint>
#include <ostream>
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

// Where a check runs, printed only when it fails: a C string ("kformer::Losses::mse"), or a
// layer's name and a method ("<name>::forward"), so that a forward or backward names its layer
// without building a std::string (a heap allocation) on every call. A Where refers to its strings:
// they must outlive it (a layer's name member, a string literal).
class Where {
 public:
  Where(const char* text) : text_(text) {}
  Where(const std::string& name, const char* method = "") : name_(&name), text_(method) {}
  friend std::ostream& operator<<(std::ostream& os, const Where& where) {
    if (where.name_ != nullptr) os << *where.name_;
    return os << where.text_;
  }
  std::string str() const { return name_ != nullptr ? *name_ + text_ : std::string(text_); }

 private:
  const std::string* name_ = nullptr;
  const char* text_ = "";
};

// Throws Error("<where>: <parts...>"). where is anything a stream prints (a C string, so that a
// check that passes builds no std::string).
template <class Where, class... Parts>
[[noreturn]] void fail(const Where& where, const Parts&... parts) {
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
template <class Where, class ViewType>
void check_shape(const Where& where, const char* name, const ViewType& v,
                 const std::array<std::int64_t, compat::rank_v<ViewType>>& expected) {
  const auto actual = extents_of(v);
  for (int i = 0; i < compat::rank_v<ViewType>; ++i) {
    if (expected[i] >= 0 && expected[i] != actual[i])
      fail(where, name, " has shape ", shape_string(actual), ", expected ", shape_string(expected));
  }
}

// Two views that must not share memory (an out-of-place kernel reading one while writing the
// other).
template <class Where, class A, class B>
void check_distinct(const Where& where, const char* a_name, const A& a, const char* b_name,
                    const B& b) {
  const auto* a0 = reinterpret_cast<const char*>(a.data());
  const auto* b0 = reinterpret_cast<const char*>(b.data());
  const auto* a1 = a0 + a.span() * sizeof(typename A::value_type);
  const auto* b1 = b0 + b.span() * sizeof(typename B::value_type);
  if (a.span() > 0 && b.span() > 0 && a0 < b1 && b0 < a1)
    fail(where, a_name, " and ", b_name, " overlap in memory; use the in-place form instead");
}

}  // namespace kformer
