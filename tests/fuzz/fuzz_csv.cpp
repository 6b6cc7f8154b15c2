// Fuzz target: the CSV readers (data/csv_format.cpp) on arbitrary text: the one-file layout under
// four sets of options (the column roles, a time column, targets, ';' as the delimiter, given
// class names) and the imputation-mask reader. Bad input must be refused with a kformer::Error; a
// set that parses must be consistent.
#include <cstdint>
#include <string>
#include <vector>

#include <kformer/core/error.hpp>
#include <kformer/data/csv_format.hpp>
#include <kformer/data/series_set.hpp>

#include "fuzz_support.hpp"

namespace {

using kformer::data::CsvOptions;
using kformer::data::SeriesSet;

constexpr const char* target = "fuzz_csv";

std::vector<CsvOptions> option_sets() {
  std::vector<CsvOptions> sets(4);
  // 0: the defaults, every column but series_id a feature.
  sets[1].time_column = "time";
  sets[1].label_column = "label";
  sets[2].delimiter = ';';
  sets[2].id_column = "id";
  sets[2].time_column = "t";
  sets[2].feature_columns = {"a", "b"};
  sets[2].target_columns = {"y"};
  sets[3].label_column = "label";
  sets[3].class_names = {"calm", "storm"};
  return sets;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::vector<CsvOptions> options = option_sets();
  const std::string text(reinterpret_cast<const char*>(data), size);
  for (std::size_t k = 0; k < options.size(); ++k) {
    SeriesSet set;
    try {
      set = kformer::data::parse_csv(text, "fuzz.csv", options[k]);
    } catch (const kformer::Error&) {
      continue;
    }
    try {
      set.validate(target);
    } catch (const kformer::Error& e) {
      kformer::fuzz::finding(target, "parse_csv (options " + std::to_string(k) +
                                         ") gave an inconsistent set: " + e.what());
    }
    if (set.n_series < 1 || set.max_len < 1 || set.n_features < 1)
      kformer::fuzz::finding(target,
                             "parse_csv (options " + std::to_string(k) + ") gave an empty set");
  }

  SeriesSet shape;
  shape.reset(3, 4, 2);
  try {
    const std::vector<std::uint8_t> mask = kformer::data::parse_mask_csv(text, "mask.csv", shape);
    if (mask.size() != shape.values.size())
      kformer::fuzz::finding(target, "parse_mask_csv gave a mask of " +
                                         std::to_string(mask.size()) + " entries for 24 values");
  } catch (const kformer::Error&) {
  }
  return 0;
}
