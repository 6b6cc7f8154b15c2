#include "preprocess.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "../core/error.hpp"

namespace kformer::data {

Standardization Standardization::fit(const SeriesSet& train) {
  train.validate("kformer::data::Standardization::fit");
  const auto features = static_cast<std::size_t>(train.n_features);
  std::vector<double> sum(features, 0.0), squares(features, 0.0);
  std::vector<std::int64_t> count(features, 0);
  const auto for_each_observed = [&](auto&& visit) {
    for (std::int64_t s = 0; s < train.n_series; ++s)
      for (std::int64_t t = 0; t < train.lengths[static_cast<std::size_t>(s)]; ++t)
        for (std::size_t f = 0; f < features; ++f) {
          const float v = train.values[train.offset(s, t) + f];
          if (!std::isnan(v)) visit(f, static_cast<double>(v));
        }
  };
  // Two passes (mean, then squared deviations) to avoid the cancellation of sum(x^2) - n mean^2.
  for_each_observed([&](std::size_t f, double v) {
    sum[f] += v;
    ++count[f];
  });
  Standardization out;
  out.mean.resize(features);
  out.std.resize(features);
  for (std::size_t f = 0; f < features; ++f)
    out.mean[f] = count[f] > 0 ? static_cast<float>(sum[f] / double(count[f])) : 0.0f;
  for_each_observed([&](std::size_t f, double v) {
    const double d = v - sum[f] / double(count[f]);
    squares[f] += d * d;
  });
  for (std::size_t f = 0; f < features; ++f) {
    const double deviation = count[f] > 1 ? std::sqrt(squares[f] / double(count[f] - 1)) : 0.0;
    out.std[f] = deviation > 0 ? static_cast<float>(deviation) : 1.0f;
  }
  return out;
}

void Standardization::check(std::int64_t n_features, const char* where) const {
  if (mean.size() != std.size() || static_cast<std::int64_t>(mean.size()) != n_features)
    fail(where, "fitted for ", mean.size(), " means and ", std.size(), " stds, the data has ",
         n_features, " features");
  for (std::size_t f = 0; f < std.size(); ++f)
    if (!(std[f] > 0) || !std::isfinite(std[f]) || !std::isfinite(mean[f]))
      fail(where, "feature ", f, " has mean ", mean[f], " and std ", std[f],
           " (std must be positive, both finite)");
}

void Standardization::apply(SeriesSet& data) const {
  check(data.n_features, "kformer::data::Standardization::apply");
  apply(data.values.data(), data.values.size());
}

void Standardization::apply(float* values, std::size_t count) const {
  const std::size_t features = mean.size();
  check(static_cast<std::int64_t>(features), "kformer::data::Standardization::apply");
  if (features == 0 || count % features != 0)
    fail("kformer::data::Standardization::apply", count, " values are not whole steps of ",
         features, " features");
  for (std::size_t i = 0; i < count; ++i)
    values[i] = (values[i] - mean[i % features]) / std[i % features];
}

void Standardization::invert(float* values, std::size_t count) const {
  const std::size_t features = mean.size();
  check(static_cast<std::int64_t>(features), "kformer::data::Standardization::invert");
  if (features == 0 || count % features != 0)
    fail("kformer::data::Standardization::invert", count, " values are not whole steps of ",
         features, " features");
  for (std::size_t i = 0; i < count; ++i)
    values[i] = values[i] * std[i % features] + mean[i % features];
}

namespace {

// Uniform on [0, bound) from the generator's raw 64-bit output, by rejection (no modulo bias).
std::uint64_t uniform_below(std::mt19937_64& rng, std::uint64_t bound) {
  const std::uint64_t limit =
      std::numeric_limits<std::uint64_t>::max() - std::numeric_limits<std::uint64_t>::max() % bound;
  std::uint64_t x;
  do {
    x = rng();
  } while (x >= limit);
  return x % bound;
}

}  // namespace

void seeded_shuffle(std::vector<std::int64_t>& indices, std::mt19937_64& rng) {
  for (std::size_t i = indices.size(); i > 1; --i)
    std::swap(indices[i - 1], indices[uniform_below(rng, i)]);
}

MissingValues parse_missing_values(const std::string& text, const std::string& where) {
  if (text == "zero") return MissingValues::Zero;
  if (text == "interpolate") return MissingValues::Interpolate;
  fail(where, "missing values '", text, "': expected zero or interpolate");
}

const char* missing_values_name(MissingValues m) {
  return m == MissingValues::Interpolate ? "interpolate" : "zero";
}

void interpolate_missing(SeriesSet& data) {
  for (std::int64_t s = 0; s < data.n_series; ++s) {
    const std::int64_t length = data.lengths[static_cast<std::size_t>(s)];
    for (std::int64_t f = 0; f < data.n_features; ++f) {
      std::int64_t previous = -1;  // the last observed step so far
      for (std::int64_t t = 0; t <= length; ++t) {
        if (t < length && std::isnan(data.value(s, t, f))) continue;
        if (t == length && previous < 0) break;  // nothing observed: stays NaN
        // Steps (previous, t) are missing: interpolate, or extend the observed end.
        for (std::int64_t u = previous + 1; u < t; ++u) {
          if (previous < 0)
            data.value(s, u, f) = data.value(s, t, f);
          else if (t == length)
            data.value(s, u, f) = data.value(s, previous, f);
          else {
            const double w = double(u - previous) / double(t - previous);
            data.value(s, u, f) =
                static_cast<float>((1 - w) * data.value(s, previous, f) + w * data.value(s, t, f));
          }
        }
        previous = t;
      }
    }
  }
}

Split train_validation_split(const SeriesSet& data, double validation_fraction,
                             std::uint64_t seed) {
  if (!(validation_fraction >= 0.0 && validation_fraction < 1.0))
    fail("kformer::data::train_validation_split", "validation fraction ", validation_fraction,
         " is outside [0, 1)");
  // Groups to split separately: the classes, or the whole set.
  std::map<std::int32_t, std::vector<std::int64_t>> groups;
  for (std::int64_t s = 0; s < data.n_series; ++s)
    groups[data.is_classification() ? data.labels[static_cast<std::size_t>(s)] : 0].push_back(s);
  std::mt19937_64 rng(seed);
  Split split;
  for (auto& [group, members] : groups) {
    seeded_shuffle(members, rng);
    const auto n_validation = static_cast<std::size_t>(
        std::llround(validation_fraction * static_cast<double>(members.size())));
    split.validation.insert(split.validation.end(), members.begin(),
                            members.begin() + static_cast<std::ptrdiff_t>(n_validation));
    split.train.insert(split.train.end(),
                       members.begin() + static_cast<std::ptrdiff_t>(n_validation), members.end());
  }
  std::sort(split.train.begin(), split.train.end());
  std::sort(split.validation.begin(), split.validation.end());
  return split;
}

HostBatch make_batch_buffers(const SeriesSet& data, std::int64_t capacity) {
  if (capacity <= 0)
    fail("kformer::data::make_batch_buffers", "capacity ", capacity, " must be positive");
  HostBatch batch;
  batch.capacity = capacity;
  batch.max_len = data.max_len;
  batch.n_features = data.n_features;
  batch.n_targets = data.n_targets;
  const auto rows = static_cast<std::size_t>(capacity);
  batch.values.assign(rows * static_cast<std::size_t>(data.max_len * data.n_features),
                      std::numeric_limits<float>::quiet_NaN());
  batch.padding_mask.assign(rows * static_cast<std::size_t>(data.max_len), 0);
  batch.lengths.assign(rows, 0);
  if (data.is_classification()) batch.labels.assign(rows, -1);
  batch.targets.assign(rows * static_cast<std::size_t>(data.n_targets),
                       std::numeric_limits<float>::quiet_NaN());
  batch.indices.assign(rows, -1);
  return batch;
}

void gather_batch(const SeriesSet& data, const std::vector<std::int64_t>& order, std::int64_t first,
                  std::int64_t count, HostBatch& batch) {
  const char* where = "kformer::data::gather_batch";
  if (batch.max_len != data.max_len || batch.n_features != data.n_features ||
      batch.n_targets != data.n_targets || batch.labels.empty() == data.is_classification())
    fail(where, "the batch was made for series of (", batch.max_len, " steps, ", batch.n_features,
         " features, ", batch.n_targets, " targets), the set has (", data.max_len, ", ",
         data.n_features, ", ", data.n_targets, ")",
         batch.labels.empty() == data.is_classification() ? " and other labels" : "");
  if (count < 0 || count > batch.capacity)
    fail(where, "batch of ", count, " series, the buffers hold ", batch.capacity);
  if (first < 0 || first + count > static_cast<std::int64_t>(order.size()))
    fail(where, "series [", first, ", ", first + count, ") of an order of ", order.size());
  for (std::int64_t b = 0; b < count; ++b) {
    const std::int64_t s = order[static_cast<std::size_t>(first + b)];
    if (s < 0 || s >= data.n_series)
      fail(where, "index ", s, " at position ", first + b, " is outside [0, ", data.n_series, ")");
  }

  const auto step_values = static_cast<std::size_t>(data.n_features);
  const auto row_values = static_cast<std::size_t>(data.max_len) * step_values;
  const auto row_steps = static_cast<std::size_t>(data.max_len);
  const auto targets = static_cast<std::size_t>(data.n_targets);
  for (std::int64_t b = 0; b < batch.capacity; ++b) {
    const auto row = static_cast<std::size_t>(b);
    float* values = batch.values.data() + row * row_values;
    std::uint8_t* mask = batch.padding_mask.data() + row * row_steps;
    float* target = batch.targets.data() + row * targets;
    if (b >= count) {  // unused rows of a short batch: padding
      std::fill(values, values + row_values, std::numeric_limits<float>::quiet_NaN());
      std::fill(mask, mask + row_steps, std::uint8_t(0));
      std::fill(target, target + targets, std::numeric_limits<float>::quiet_NaN());
      batch.lengths[row] = 0;
      if (!batch.labels.empty()) batch.labels[row] = -1;
      batch.indices[row] = -1;
      continue;
    }
    const std::int64_t s = order[static_cast<std::size_t>(first + b)];
    const auto series = static_cast<std::size_t>(s);
    const std::int32_t length = data.lengths[series];
    std::copy(data.values.begin() + data.offset(s, 0), data.values.begin() + data.offset(s + 1, 0),
              values);
    std::fill(mask, mask + length, std::uint8_t(1));
    std::fill(mask + length, mask + row_steps, std::uint8_t(0));
    std::copy(data.targets.begin() + series * targets,
              data.targets.begin() + (series + 1) * targets, target);
    batch.lengths[row] = length;
    if (!batch.labels.empty()) batch.labels[row] = data.labels[series];
    batch.indices[row] = s;
  }
  batch.size = count;
}

}  // namespace kformer::data
