// Fuzz target: the .ts reader (data/ts_format.cpp) on arbitrary text. Bad input must be refused
// with a kformer::Error; a set that parses must be consistent and, when format_ts can write it,
// read back from that text unchanged.
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include <kformer/core/error.hpp>
#include <kformer/data/series_set.hpp>
#include <kformer/data/ts_format.hpp>

#include "fuzz_support.hpp"

namespace {

using kformer::data::SeriesSet;

constexpr const char* target = "fuzz_ts";

// Floats compared as bits, so that NaN (missing values, padding) counts.
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

bool same(const SeriesSet& a, const SeriesSet& b) {
  return a.n_series == b.n_series && a.max_len == b.max_len && a.n_features == b.n_features &&
         same_bits(a.values, b.values) && a.lengths == b.lengths &&
         a.class_names == b.class_names && a.labels == b.labels && a.n_targets == b.n_targets &&
         same_bits(a.targets, b.targets);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  SeriesSet set;
  try {
    set = kformer::data::parse_ts(text, "fuzz.ts");
  } catch (const kformer::Error&) {
    return 0;
  }
  try {
    set.validate(target);
  } catch (const kformer::Error& e) {
    kformer::fuzz::finding(target, std::string("parse_ts gave an inconsistent set: ") + e.what());
  }
  if (set.n_series < 1 || set.n_features < 1)
    kformer::fuzz::finding(target, "parse_ts gave an empty set");

  // What format_ts cannot write (class names with ':', say) it refuses; what it writes must read
  // back as the same set.
  std::string written;
  try {
    written = kformer::data::format_ts(set, "fuzz");
  } catch (const kformer::Error&) {
    return 0;
  }
  SeriesSet again;
  try {
    again = kformer::data::parse_ts(written, "written.ts");
  } catch (const kformer::Error& e) {
    kformer::fuzz::finding(
        target, std::string("format_ts wrote what parse_ts refuses: ") + e.what() + "\n" + written);
  }
  if (!same(set, again))
    kformer::fuzz::finding(target, "format_ts then parse_ts changed the set:\n" + written);
  return 0;
}
