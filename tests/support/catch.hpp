// Catch2 for kformer's tests, version 2 (Debian bookworm: 2.13) or 3 (sid: 3.7): the one place
// that knows which. Tests include this header and use the names below.
#pragma once

#include <string>

#if __has_include(<catch2/catch_all.hpp>)
#include <catch2/catch_all.hpp>
#define KFORMER_CATCH_MAJOR 3
using Catch::Approx;
inline auto ContainsText(const std::string& text) {
  return Catch::Matchers::ContainsSubstring(text);
}
inline auto StartsWithText(const std::string& text) {
  return Catch::Matchers::StartsWith(text);
}
#else
#include <catch2/catch.hpp>
#define KFORMER_CATCH_MAJOR 2
inline Catch::Matchers::StdString::ContainsMatcher ContainsText(const std::string& text) {
  return Catch::Matchers::Contains(text);
}
inline Catch::Matchers::StdString::StartsWithMatcher StartsWithText(const std::string& text) {
  return Catch::Matchers::StartsWith(text);
}
#endif
