// Preparing a SeriesSet for training: per-feature standardization, a seeded train/validation
// split, and batches gathered into host buffers that are allocated once.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "series_set.hpp"

namespace kformer::data {

// Per-feature standardization x -> (x - mean[f]) / std[f], fitted on a training set and applied
// unchanged to validation and test sets. The two vectors are the whole state: store them (e.g.
// as checkpoint tensors) and rebuild with Standardization{mean, std}.
struct Standardization {
  std::vector<float> mean, std;

  // Mean and sample standard deviation (n - 1 in the denominator, as pandas' std in the TST
  // reference code) of each feature over the observed values of `train`: steps before each
  // series' length that are not NaN. Accumulated in double. A feature whose std is 0 (constant)
  // or undefined (fewer than two values) gets std 1; one with no values at all gets mean 0.
  static Standardization fit(const SeriesSet& train);

  // In place; NaN (missing values and padding) stays NaN. Throws kformer::Error when the set's
  // feature count differs from the fitted one or a std is not positive and finite.
  void apply(SeriesSet& data) const;
  // The same on raw values laid out (..., n_features), e.g. a batch; `count` values in all.
  void apply(float* values, std::size_t count) const;
  // The inverse, x -> x * std[f] + mean[f], to report imputed values in the data's units.
  void invert(float* values, std::size_t count) const;

 private:
  void check(std::int64_t n_features, const char* where) const;
};

// How missing values (NaN at observed steps) reach the model.
enum class MissingValues {
  Zero,         // left NaN; the batches give the model 0 for them (after standardization: the mean)
  Interpolate,  // as the TST reference code: interpolate_missing on the raw values when read
};
// "zero" or "interpolate"; throws kformer::Error naming `where` and the text otherwise.
MissingValues parse_missing_values(const std::string& text, const std::string& where);
const char* missing_values_name(MissingValues m);

// In place, each feature of each series along its observed steps: a NaN between two observed
// values becomes their linear interpolation (by step), NaNs before the first or after the last
// observed value take that value, as pandas' interpolate(method='linear', limit_direction='both')
// in the TST reference code. A feature with no observed value in a series stays NaN; padding is
// untouched.
void interpolate_missing(SeriesSet& data);

struct Split {
  std::vector<std::int64_t> train, validation;  // series indices, each list ascending
};

// Shuffles `indices` with `rng` (Fisher-Yates). The standard library's std::shuffle and
// distributions are implementation-defined; this one gives the same order everywhere.
void seeded_shuffle(std::vector<std::int64_t>& indices, std::mt19937_64& rng);

// Sends round(validation_fraction * n) series, chosen by a seeded shuffle, to validation and the
// rest to training. For a classification set the split is stratified: each class is shuffled and
// split on its own (round(fraction * class size) to validation), so both sides keep the class
// proportions. Throws kformer::Error unless 0 <= validation_fraction < 1.
Split train_validation_split(const SeriesSet& data, double validation_fraction, std::uint64_t seed);

// One batch in host memory, laid out as the model's inputs, filled by gather_batch. Allocated
// once by make_batch_buffers for `capacity` series; gathering never reallocates, so the buffers'
// addresses stay valid (for unmanaged Views, or pinned copies) for the whole training.
//
// Rows [0, size) hold the gathered series; rows [size, capacity) of a short last batch are
// cleared to padding (NaN values, mask 0, length 0, label -1, target NaN, index -1), so nothing
// stale is left there.
struct HostBatch {
  std::int64_t capacity = 0, max_len = 0, n_features = 0, n_targets = 0;
  std::int64_t size = 0;                   // series gathered by the last gather_batch
  std::vector<float> values;               // (capacity, max_len, n_features); NaN = missing/padding
  std::vector<std::uint8_t> padding_mask;  // (capacity, max_len): 1 = observed step (keep),
                                           // 0 = padding, the TST reference's convention
  std::vector<std::int32_t> lengths;       // (capacity)
  std::vector<std::int32_t> labels;        // (capacity) for a classification set, else empty
  std::vector<float> targets;              // (capacity, n_targets)
  std::vector<std::int64_t> indices;       // (capacity): the series' indices in the set
};

// Buffers for batches of up to `capacity` series of `data`.
HostBatch make_batch_buffers(const SeriesSet& data, std::int64_t capacity);

// Gathers series order[first], ..., order[first + count - 1] of `data` into `batch` and sets
// batch.size = count. Throws kformer::Error (leaving the batch as it was) when count exceeds the
// capacity, an index is out of range, or the batch was made for a set of other extents.
void gather_batch(const SeriesSet& data, const std::vector<std::int64_t>& order, std::int64_t first,
                  std::int64_t count, HostBatch& batch);

}  // namespace kformer::data
