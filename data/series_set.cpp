#include "series_set.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "../core/error.hpp"

namespace kformer::data {

void SeriesSet::reset(std::int64_t series, std::int64_t steps, std::int64_t features) {
  if (series < 0 || steps < 0 || features < 0)
    fail("kformer::data::SeriesSet::reset", "extents (", series, ", ", steps, ", ", features,
         ") must not be negative");
  n_series = series;
  max_len = steps;
  n_features = features;
  values.assign(static_cast<std::size_t>(series * steps * features),
                std::numeric_limits<float>::quiet_NaN());
  lengths.assign(static_cast<std::size_t>(series), 0);
  class_names.clear();
  labels.clear();
  n_targets = 0;
  targets.clear();
}

void SeriesSet::validate(const std::string& where) const {
  if (n_series < 0 || max_len < 0 || n_features < 0 || n_targets < 0)
    fail(where, "negative extents: n_series ", n_series, ", max_len ", max_len, ", n_features ",
         n_features, ", n_targets ", n_targets);
  const auto expect_size = [&](const char* name, std::size_t actual, std::int64_t expected) {
    if (actual != static_cast<std::size_t>(expected))
      fail(where, name, " holds ", actual, " entries, expected ", expected);
  };
  expect_size("values", values.size(), n_series * max_len * n_features);
  expect_size("lengths", lengths.size(), n_series);
  expect_size("labels", labels.size(), class_names.empty() ? 0 : n_series);
  expect_size("targets", targets.size(), n_series * n_targets);
  for (std::int64_t s = 0; s < n_series; ++s) {
    const std::int32_t length = lengths[static_cast<std::size_t>(s)];
    if (length < 0 || length > max_len)
      fail(where, "series ", s, " has length ", length, ", outside [0, ", max_len, "]");
    for (std::size_t i = offset(s, length); i < offset(s + 1, 0); ++i)
      if (!std::isnan(values[i]))
        fail(where, "series ", s, " (length ", length,
             ") has a value in its padding; padded steps must be NaN");
    if (!class_names.empty()) {
      const std::int32_t label = labels[static_cast<std::size_t>(s)];
      if (label < 0 || label >= static_cast<std::int64_t>(class_names.size()))
        fail(where, "series ", s, " has label ", label, ", outside [0, ", class_names.size(), ")");
    }
  }
}

SeriesSet SeriesSet::subset(const std::vector<std::int64_t>& indices) const {
  SeriesSet out;
  out.n_series = static_cast<std::int64_t>(indices.size());
  out.max_len = max_len;
  out.n_features = n_features;
  out.class_names = class_names;
  out.n_targets = n_targets;
  const std::size_t row = static_cast<std::size_t>(max_len * n_features);
  out.values.reserve(indices.size() * row);
  for (const std::int64_t s : indices) {
    if (s < 0 || s >= n_series)
      fail("kformer::data::SeriesSet::subset", "index ", s, " is outside [0, ", n_series, ")");
    const auto u = static_cast<std::size_t>(s);
    out.values.insert(out.values.end(), values.begin() + offset(s, 0),
                      values.begin() + offset(s + 1, 0));
    out.lengths.push_back(lengths[u]);
    if (!class_names.empty()) out.labels.push_back(labels[u]);
    const auto t = static_cast<std::size_t>(n_targets);
    out.targets.insert(out.targets.end(), targets.begin() + u * t, targets.begin() + (u + 1) * t);
  }
  return out;
}

void SeriesSet::set_max_len(std::int64_t new_max_len) {
  if (new_max_len < 0)
    fail("kformer::data::SeriesSet::set_max_len", "new max_len ", new_max_len, " is negative");
  std::vector<float> resized(static_cast<std::size_t>(n_series * new_max_len * n_features),
                             std::numeric_limits<float>::quiet_NaN());
  const std::int64_t kept = std::min(max_len, new_max_len);
  for (std::int64_t s = 0; s < n_series; ++s) {
    std::copy(values.begin() + offset(s, 0), values.begin() + offset(s, kept),
              resized.begin() + (s * new_max_len) * n_features);
    auto& length = lengths[static_cast<std::size_t>(s)];
    length = static_cast<std::int32_t>(std::min<std::int64_t>(length, new_max_len));
  }
  values = std::move(resized);
  max_len = new_max_len;
}

void SeriesSet::relabel_classes(const std::vector<std::string>& model_classes,
                                const std::string& where) {
  std::vector<std::int32_t> model_index(class_names.size(), -1);
  std::string unknown;
  for (std::size_t c = 0; c < class_names.size(); ++c) {
    const auto found = std::find(model_classes.begin(), model_classes.end(), class_names[c]);
    if (found == model_classes.end())
      unknown += (unknown.empty() ? "" : ", ") + class_names[c];
    else
      model_index[c] = static_cast<std::int32_t>(found - model_classes.begin());
  }
  if (!unknown.empty()) {
    std::string known;
    for (const auto& name : model_classes)
      known += (known.empty() ? "" : ", ") + name;
    fail(where, "class(es) ", unknown, " are not among the model's classes (", known, ")");
  }
  for (auto& label : labels)
    if (label >= 0) label = model_index[static_cast<std::size_t>(label)];
  class_names = model_classes;
}

}  // namespace kformer::data
