// Reading numbers from JSON exactly, for kformer's .cpp files that parse configs (nlohmann-json
// is a private dependency: no public header includes this one).
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include "error.hpp"

namespace kformer {

// value.get<T>() for a key that holds an integer, refusing what get() would convert silently:
// booleans (true reads as 1), a fraction or an exponent form (2.5, 8.0, 1e3; it truncates them,
// and a float beyond T's range is undefined behaviour) and integers beyond T's range (it wraps
// them).
template <class T>
T get_integer(const nlohmann::json& value, const std::string& where, const std::string& source,
              const std::string& key) {
  using limits = std::numeric_limits<T>;
  bool fits = false;
  if (value.is_number_unsigned()) {
    fits = value.get<std::uint64_t>() <= std::uint64_t(limits::max());
  } else if (value.is_number_integer()) {
    const auto v = value.get<std::int64_t>();
    fits = v >= std::int64_t(limits::min()) &&
           (v < 0 || std::uint64_t(v) <= std::uint64_t(limits::max()));
  }
  if (!fits)
    fail(where, source, ": key '", key, "' must be an integer in [", limits::min(), ", ",
         limits::max(), "], got ", value.dump());
  return value.get<T>();
}

// value.get<double>() for a key that holds a number, refusing booleans (get() reads true as 1).
inline double get_number(const nlohmann::json& value, const std::string& where,
                         const std::string& source, const std::string& key) {
  if (!value.is_number())
    fail(where, source, ": key '", key, "' must be a number, got ", value.dump());
  return value.get<double>();
}

}  // namespace kformer
