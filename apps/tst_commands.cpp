#include "tst_commands.hpp"

#include <sys/stat.h>

#include <algorithm>

#include <cmath>
#include <cstdio>
#include <limits>

namespace kformer::app {

namespace {
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
bool is_directory(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}
}  // namespace

data::SeriesSet load_dataset(const std::string& path, const DataOptions& o,
                             const std::vector<std::string>& class_names) {
  data::SeriesSet set = read_dataset(path, o, class_names);
  if (!o.missing_values.empty() &&
      data::parse_missing_values(o.missing_values, "kformer") == data::MissingValues::Interpolate)
    data::interpolate_missing(set);
  return set;
}

data::SeriesSet read_dataset(const std::string& path, const DataOptions& o,
                             const std::vector<std::string>& class_names) {
  const std::string where = "kformer::load_dataset";
  if (path.empty()) fail(where, "no data file given");
  if (is_directory(path)) {
    if (o.labels.empty()) fail(where, path, " is a directory: give its labels file with --labels");
    data::CsvDirectoryOptions d;
    d.time_column = o.time_column;
    d.class_names = class_names;
    d.regression = !o.target_columns.empty();
    return data::read_csv_directory(path, o.labels, d);
  }
  if (ends_with(path, ".ts")) {
    data::SeriesSet set = data::read_ts(path);
    if (!class_names.empty() && set.is_classification())
      set.relabel_classes(class_names, where + ": " + path);
    return set;
  }
  if (ends_with(path, ".csv")) {
    data::CsvOptions c;
    c.id_column = o.id_column;
    c.time_column = o.time_column;
    c.label_column = o.label_column;
    c.target_columns = o.target_columns;
    c.class_names = class_names;
    return data::read_csv(path, c);
  }
  fail(where, path, ": expected a .ts or .csv file, or a directory of .csv files");
}

TstConfig model_config(const ModelOptions& m, const data::SeriesSet& data, TstTask task) {
  TstConfig c;
  c.feat_dim = static_cast<int>(data.n_features);
  c.max_len = static_cast<int>(data.max_len);
  c.d_model = m.d_model;
  c.n_heads = m.heads;
  c.num_layers = m.layers;
  c.dim_feedforward = m.dim_feedforward;
  c.dropout = m.dropout;
  c.activation = parse_activation(m.activation);
  c.norm = parse_norm(m.norm);
  c.norm_first = m.norm_first;
  c.pos_encoding = parse_pos_encoding(m.pos_encoding);
  c.projection = parse_projection(m.projection);
  c.conv.kernel_size = m.conv_kernel;
  if (m.conv_kernel < 1) fail("kformer", "--conv-kernel must be at least 1, got ", m.conv_kernel);
  c.task = task;
  c.num_outputs = task == TstTask::Classification ? static_cast<int>(data.class_names.size())
                  : task == TstTask::Regression   ? static_cast<int>(data.n_targets)
                                                  : 0;
  return c;
}

TrainingOptions training_options(const TrainCliOptions& t) {
  const std::string where = "kformer";
  TrainingOptions o;
  o.batch_size = t.batch_size;
  o.lr = t.lr;
  o.lr_step = t.lr_step;
  o.lr_factor = t.lr_factor;
  o.optimizer.weight_decay = t.weight_decay;
  o.clip_norm = t.clip_norm;
  o.l2_reg = t.l2_reg;
  o.masking.masking_ratio = t.masking_ratio;
  o.masking.mean_mask_length = t.mean_mask_length;
  o.masking.exclude_features = t.exclude_features;
  o.forecast_horizon = t.forecast_horizon;
  o.freeze_encoder = t.freeze_encoder;
  o.check_finite = t.check_finite;
  o.sync_batchnorm = t.sync_batchnorm;
  o.seed = t.seed;
  if (t.optimizer == "adam")
    o.optimizer.kind = OptimizerKind::Adam;
  else if (t.optimizer == "adamw")
    o.optimizer.kind = OptimizerKind::AdamW;
  else if (t.optimizer == "radam")
    o.optimizer.kind = OptimizerKind::RAdam;
  else
    fail(where, "unknown optimizer '", t.optimizer, "' (expected adam, adamw or radam)");
  if (t.mask_mode == "separate")
    o.masking.mode = MaskMode::Separate;
  else if (t.mask_mode == "concurrent")
    o.masking.mode = MaskMode::Concurrent;
  else
    fail(where, "unknown mask mode '", t.mask_mode, "' (expected separate or concurrent)");
  if (t.mask_distribution == "geometric")
    o.masking.distribution = MaskDistribution::Geometric;
  else if (t.mask_distribution == "bernoulli")
    o.masking.distribution = MaskDistribution::Bernoulli;
  else
    fail(where, "unknown mask distribution '", t.mask_distribution,
         "' (expected geometric or bernoulli)");
  if (t.epochs < 0) fail(where, "--epochs must not be negative, got ", t.epochs);
  if (!(t.clip_norm >= 0) || !std::isfinite(t.clip_norm))
    fail(where, "--clip-norm must be a finite number of at least 0 (0 turns clipping off), got ",
         t.clip_norm);
  if (!(t.lr_factor > 0) || !std::isfinite(t.lr_factor))
    fail(where, "--lr-factor must be a finite number above 0, got ", t.lr_factor);
  if (!(t.l2_reg >= 0) || !std::isfinite(t.l2_reg))
    fail(where, "--l2-reg must be a finite number of at least 0, got ", t.l2_reg);
  if (t.forecast_horizon < 0)
    fail(where,
         "--forecast must be a number of steps of at least 0 (0: masked values instead), "
         "got ",
         t.forecast_horizon);
  return o;
}

void check_pretraining(const TrainCliOptions& t, const data::SeriesSet& train) {
  const std::string where = "kformer pretrain";
  if (t.forecast_horizon == 0 && !(t.masking_ratio > 0 && t.masking_ratio < 1))
    fail(where, "--masking-ratio must be above 0 and below 1 (the fraction of values masked), got ",
         t.masking_ratio, ": with none masked there is nothing to learn");
  std::vector<bool> excluded(static_cast<std::size_t>(train.n_features), false);
  for (const int f : t.exclude_features) {
    if (f < 0 || f >= train.n_features)
      fail(where, "--exclude-features names feature ", f, ", the data has features 0 to ",
           train.n_features - 1);
    excluded[std::size_t(f)] = true;
  }
  if (t.forecast_horizon == 0 && train.n_features > 0 &&
      std::all_of(excluded.begin(), excluded.end(), [](bool e) { return e; }))
    fail(where, "--exclude-features excludes all ", train.n_features,
         " features: nothing would be masked");
  if (t.forecast_horizon > 0) {
    std::int32_t shortest = std::numeric_limits<std::int32_t>::max();
    for (const std::int32_t length : train.lengths)
      shortest = std::min(shortest, length);
    if (!train.lengths.empty() && t.forecast_horizon >= shortest)
      fail(where, "--forecast ", t.forecast_horizon, " masks whole series: the shortest has ",
           shortest, " steps (the forecast must be shorter)");
  }
}

void require_observed_values(const data::SeriesSet& data, const std::string& path) {
  for (std::int64_t s = 0; s < data.n_series; ++s)
    for (std::size_t i = data.offset(s, 0); i < data.offset(s, data.lengths[std::size_t(s)]); ++i)
      if (!std::isnan(data.values[i])) return;
  fail("kformer", path, ": every value of its ", data.n_series,
       " series is missing: nothing to learn from or predict");
}

std::string describe(const Evaluation& e, TstTask task) {
  char text[160];
  if (task == TstTask::Classification)
    std::snprintf(text, sizeof text, "validation loss %.4f accuracy %.3f", e.loss, e.accuracy);
  else if (task == TstTask::Regression)
    std::snprintf(text, sizeof text, "validation MSE %.4f RMSE %.4f MAE %.4f", e.loss, e.rmse,
                  e.mae);
  else
    std::snprintf(text, sizeof text, "validation masked MSE %.4f", e.loss);
  return text;
}

}  // namespace kformer::app
