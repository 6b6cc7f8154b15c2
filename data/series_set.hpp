// The host-side container of a multivariate time-series dataset, as the readers (.ts, CSV) and
// the generator produce it and the batching code consumes it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kformer::data {

// Multivariate series in host memory, padded to max_len. Missing values are NaN.
struct SeriesSet {
  std::int64_t n_series = 0, max_len = 0, n_features = 0;
  std::vector<float> values;  // (n_series, max_len, n_features), row-major; padded steps are NaN
  std::vector<std::int32_t> lengths;     // observed steps per series (<= max_len)
  std::vector<std::string> class_names;  // classification: label index -> name (empty otherwise)
  std::vector<std::int32_t> labels;      // classification: per series, index into class_names
  std::int64_t n_targets = 0;            // regression: targets per series
  std::vector<float> targets;            // regression: (n_series, n_targets)

  // Resets to n_series series of max_len steps and n_features features, every value NaN, every
  // length 0, no labels or targets.
  void reset(std::int64_t series, std::int64_t steps, std::int64_t features);

  // Index of values(series, step, 0) in `values`.
  std::size_t offset(std::int64_t series, std::int64_t step) const {
    return static_cast<std::size_t>((series * max_len + step) * n_features);
  }
  float value(std::int64_t series, std::int64_t step, std::int64_t feature) const {
    return values[offset(series, step) + static_cast<std::size_t>(feature)];
  }
  float& value(std::int64_t series, std::int64_t step, std::int64_t feature) {
    return values[offset(series, step) + static_cast<std::size_t>(feature)];
  }

  bool is_classification() const { return !class_names.empty(); }
  bool is_regression() const { return n_targets > 0; }

  // Checks that the vectors' sizes match the extents, lengths lie in [0, max_len], labels index
  // class_names, and padded steps are NaN. Throws kformer::Error("<where>: ...") otherwise.
  void validate(const std::string& where) const;

  // The series at `indices`, in that order, with the same max_len, features and classes.
  SeriesSet subset(const std::vector<std::int64_t>& indices) const;

  // Pads every series with NaN steps up to new_max_len, or cuts longer series to new_max_len
  // steps (their lengths shrink accordingly), so that a test set matches a model's max_len.
  void set_max_len(std::int64_t new_max_len);

  // Re-indexes the labels by `model_classes` (a model's class order), which must name every class
  // of this set; class_names becomes model_classes. A file may list its classes in another order
  // than the model's training data, or only some of them. Throws kformer::Error("<where>: ...")
  // naming the classes the model does not know, and the model's.
  void relabel_classes(const std::vector<std::string>& model_classes, const std::string& where);
};

}  // namespace kformer::data
