// The kformer program: the TST pipeline (masked pretraining, fine-tuning, evaluation,
// representations) on time-series files, the encoding matrix, and the default demonstration.
//
//   kformer                      the default job on embedded generated data (see README)
//   kformer pretrain  --data train.ts [--test test.ts] [model and training options]
//   kformer finetune  --data train.ts [--pretrained DIR --change-output [--freeze]]
//   kformer evaluate  --checkpoint DIR --data test.ts
//   kformer embed     --checkpoint DIR --data file.ts --output embeddings.csv
//   kformer predict   --checkpoint DIR --data file.ts --output predictions.csv [--masks masks.csv]
//   kformer encode    --dim D --len L [--csv F] [--png F]
//   kformer generate-data --output-dir DIR
//   kformer info
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <kformer/core/file_io.hpp>
#include <kformer/core/png.hpp>
#include <kformer/data/csv_format.hpp>
#include <kformer/data/lorenz96.hpp>
#include <kformer/data/ts_format.hpp>
#include <kformer/distributed/environment.hpp>
#include <kformer/kformer.hpp>

#include "cli.hpp"
#include "dispatch.hpp"
#include "output_safety.hpp"
#include "tst_commands.hpp"

namespace {

using namespace kformer;
using namespace kformer::app;

// --- encode ----------------------------------------------------------------------------------

template <class T, class Space>
std::vector<double> encoding_on(const Space& space, const EncodeOptions& o) {
  PositionalEncodingOptions opt;
  opt.base = o.base;
  opt.first_position = o.first_position;
  opt.layout = o.split ? SinusoidLayout::SplitHalves : SinusoidLayout::Interleaved;
  Kokkos::Timer timer;
  const auto pe = positional_encoding<T>(space, o.dim, o.len, opt);
  space.fence();
  const double seconds = timer.seconds();
  const auto host = to_host(pe);
  std::printf("encoding (%d positions x %d dims, %s, %s layout, base %g) on %s in %.3f ms\n", o.len,
              o.dim, o.precision.c_str(), o.split ? "split" : "interleaved", o.base,
              backends::space_name<Space>().c_str(), seconds * 1e3);
  return std::vector<double>(host.data(), host.data() + host.size());
}

template <class Space>
void run_encode(const Space& space, const EncodeOptions& o) {
  const std::vector<double> values =
      o.precision == "double" ? encoding_on<double>(space, o) : encoding_on<float>(space, o);
  std::printf("first rows:\n");
  for (int p = 0; p < std::min(o.len, 3); ++p) {
    std::printf("  p=%d:", p);
    for (int j = 0; j < std::min(o.dim, 8); ++j)
      std::printf(" %+.6f", values[std::size_t(p) * o.dim + j]);
    std::printf("%s\n", o.dim > 8 ? " ..." : "");
  }
  if (!o.csv.empty()) {
    std::ostringstream os;
    os.precision(9);
    os << "position";
    for (int j = 0; j < o.dim; ++j)
      os << ",d" << j;
    os << '\n';
    for (int p = 0; p < o.len; ++p) {
      os << p + o.first_position;
      for (int j = 0; j < o.dim; ++j)
        os << ',' << values[std::size_t(p) * o.dim + j];
      os << '\n';
    }
    write_file_atomic(o.csv, os.str());
    std::printf("wrote %s\n", o.csv.c_str());
  }
  if (!o.png.empty()) {
    // One row of pixels per position, columns = dimensions; cells enlarged for small matrices.
    const int cell_w = std::max(1, 512 / o.dim), cell_h = std::max(1, 512 / std::max(o.len, 1));
    write_heatmap_png(o.png, values, o.len, o.dim, -1.0, 1.0, cell_w, cell_h);
    std::printf("wrote %s (rows = positions, columns = dimensions; blue -1, white 0, red +1)\n",
                o.png.c_str());
  }
}

// --- TST commands ------------------------------------------------------------------------------

// The training and validation sets: --test when given, otherwise a seeded split of --data.
struct Datasets {
  data::SeriesSet train, validation;
};

Datasets load_train_validation(const DataOptions& d, std::uint64_t seed,
                               const std::vector<std::string>& classes = {}) {
  Datasets sets;
  data::SeriesSet all = load_dataset(d.train, d, classes);
  if (!d.test.empty()) {
    sets.train = std::move(all);
    sets.validation = load_dataset(d.test, d, sets.train.class_names);
  } else {
    const auto split = data::train_validation_split(all, d.validation_fraction, seed);
    if (split.train.empty() || split.validation.empty())
      fail("kformer", "--val-ratio ", d.validation_fraction, " of ", all.n_series,
           " series leaves ", split.train.size(), " to train on and ", split.validation.size(),
           " to validate: give --test, or a --val-ratio that leaves both some");
    sets.train = all.subset(split.train);
    sets.validation = all.subset(split.validation);
  }
  if (sets.validation.n_series == 0) fail("kformer", d.test, " holds no series to validate on");
  require_observed_values(sets.train, d.train);
  // Both padded to the longer of the two, so that one model serves both.
  const std::int64_t max_len = std::max(sets.train.max_len, sets.validation.max_len);
  sets.train.set_max_len(max_len);
  sets.validation.set_max_len(max_len);
  return sets;
}

void print_data(const char* what, const data::SeriesSet& s) {
  std::printf("%s: %lld series, %lld features, up to %lld steps", what,
              static_cast<long long>(s.n_series), static_cast<long long>(s.n_features),
              static_cast<long long>(s.max_len));
  if (s.is_classification()) std::printf(", %zu classes", s.class_names.size());
  if (s.is_regression())
    std::printf(", %lld regression targets", static_cast<long long>(s.n_targets));
  std::printf("\n");
}

// `d` with its missing-value handling decided: the one given, else `inherited`'s.
DataOptions with_missing_values(DataOptions d, data::MissingValues inherited) {
  if (d.missing_values.empty()) d.missing_values = data::missing_values_name(inherited);
  return d;
}

// Under several ranks (comm), every rank reads the data and builds the model; rank 0 alone holds
// the output directory's lock and writes there (a resumed run's checkpoint is read by all).
template <class T, class Space>
void command_pretrain(const Space& exec, const DataOptions& given, const ModelOptions& m,
                      const TrainCliOptions& t, const RunOptions& r,
                      distributed::Communicator& comm) {
  const TrainingOptions training = training_options(t);
  check_key_metric(r, TstTask::Imputation);
  const DataOptions d = with_missing_values(given, data::MissingValues::Zero);
  Datasets sets;
  std::optional<data::Standardization> standardization;
  TstConfig config;
  on_every_rank(comm, "reading the data", [&] {
    sets = load_train_validation(d, training.seed);
    check_pretraining(t, sets.train);
    standardization = data::Standardization::fit(sets.train);
    standardization->apply(sets.train);
    standardization->apply(sets.validation);
    config = model_config(m, sets.train, TstTask::Imputation);
    check_problem_size<Space>(config, sets.train, training.batch_size, true);
  });
  print_data("training data", sets.train);
  print_data("validation data", sets.validation);
  TimeSeriesTransformer<T, Space> model(exec, config);
  TstTrainer<T, Space> trainer(exec, model, training, sets.train);
  CheckpointInfo info;
  int first = 0;
  std::optional<OutputDirectoryLock> lock;  // held while this run writes there
  on_every_rank(comm, "opening the output directory", [&] {
    if (comm.is_root()) lock.emplace(r.output_dir);
    if (r.resume) {
      info = load_checkpoint(exec, r.output_dir, model, &trainer.optimizer());
      first = info.next_epoch;
      trainer.set_global_step(info.step);
    }
  });
  trainer.set_communicator(exec, &comm);
  if (r.resume) std::printf("resuming %s at epoch %d\n", r.output_dir.c_str(), first + 1);
  info.standardization = standardization;
  info.missing_values = data::parse_missing_values(d.missing_values, "kformer");
  const Evaluation before = trainer.evaluate(exec, sets.validation);
  MetricsLog log(r.output_dir);
  if (r.resume) log.resume("pretrain", first);  // the epochs before it stay in the metrics
  const EpochsResult after = train_epochs(exec, model, trainer, sets.train, sets.validation, first,
                                          t.epochs, "pretrain", r.output_dir, info, log, r, comm);
  std::printf("masked MSE on validation: %.4f before pretraining, %.4f after\n", before.loss,
              after.last.loss);
  std::printf("checkpoint: %s\n", r.output_dir.c_str());
}

template <class T, class Space>
void command_finetune(const Space& exec, const DataOptions& given, const ModelOptions& m,
                      const TrainCliOptions& t, const RunOptions& r, const std::string& pretrained,
                      bool change_output, distributed::Communicator& comm) {
  const TrainingOptions training = training_options(t);
  Datasets sets;
  DataOptions d;
  TstTask task = TstTask::Classification;
  TstConfig config;
  std::optional<data::Standardization> standardization;
  on_every_rank(comm, "reading the data", [&] {
    // A pretrained model's data were filled in one way; its fine-tuning data are too, by default.
    d = with_missing_values(given, pretrained.empty() || !given.missing_values.empty()
                                       ? data::MissingValues::Zero
                                       : read_checkpoint_config(pretrained).missing_values);
    sets = load_train_validation(d, training.seed);
    task = sets.train.is_classification() ? TstTask::Classification
           : sets.train.is_regression()
               ? TstTask::Regression
               : throw Error(
                     "kformer finetune: the data has neither class labels nor regression targets");
    check_key_metric(r, task);
    config = model_config(m, sets.train, task);
    if (!pretrained.empty()) {
      // The pretrained model decides the architecture and the standardization.
      const CheckpointInfo source = read_checkpoint_config(pretrained);
      if (!m.architecture_given.empty())
        fail("kformer finetune", m.architecture_given.front(),
             " does not apply with --pretrained: the model is the pretrained one (d_model ",
             source.config.d_model, ", ", source.config.n_heads, " heads, ",
             source.config.num_layers, " layers)");
      TstConfig c = source.config;
      c.task = config.task;
      c.num_outputs = config.num_outputs;
      c.max_len = config.max_len;
      c.dropout = config.dropout;
      config = c;
    }
    check_problem_size<Space>(config, sets.train, training.batch_size, true);
  });
  print_data("training data", sets.train);
  print_data("validation data", sets.validation);
  TimeSeriesTransformer<T, Space> model(exec, config);
  TstTrainer<T, Space> trainer(exec, model, training, sets.train);
  CheckpointInfo info;
  info.class_names = sets.train.class_names;
  int first = 0;
  std::optional<OutputDirectoryLock> lock;  // held while this run writes there
  on_every_rank(comm, "loading the models", [&] {
    if (!pretrained.empty()) {
      LoadOptions load;
      if (change_output) load.skip_prefixes = {"output_layer."};
      const CheckpointInfo source =
          load_checkpoint<T, Space>(exec, pretrained, model, nullptr, load);
      standardization = source.standardization;
    }
    if (!standardization) standardization = data::Standardization::fit(sets.train);
    standardization->apply(sets.train);
    standardization->apply(sets.validation);
    info.standardization = standardization;
    if (comm.is_root()) lock.emplace(r.output_dir);
    if (r.resume) {
      info = load_checkpoint(exec, r.output_dir, model, &trainer.optimizer());
      first = info.next_epoch;
      trainer.set_global_step(info.step);
    }
  });
  trainer.set_communicator(exec, &comm);
  if (!pretrained.empty())
    std::printf("loaded %s%s\n", pretrained.c_str(), change_output ? " (new output layer)" : "");
  if (r.resume) std::printf("resuming %s at epoch %d\n", r.output_dir.c_str(), first + 1);
  info.missing_values = data::parse_missing_values(d.missing_values, "kformer");
  MetricsLog log(r.output_dir);
  if (r.resume) log.resume("finetune", first);  // the epochs before it stay in the metrics
  const EpochsResult e = train_epochs(exec, model, trainer, sets.train, sets.validation, first,
                                      t.epochs, "finetune", r.output_dir, info, log, r, comm);
  std::printf("%s\ncheckpoint: %s%s\n", describe(e.last, task).c_str(), r.output_dir.c_str(),
              r.best.keep ? " (last epoch), best epoch's in its best/" : "");
}

// A model and its data from a checkpoint directory, for evaluate / embed.
template <class T, class Space>
struct Loaded {
  CheckpointInfo info;
  TimeSeriesTransformer<T, Space> model;
  data::SeriesSet data;
};

template <class T, class Space>
Loaded<T, Space> load_for_inference(const Space& exec, const std::string& checkpoint,
                                    const std::string& path, const DataOptions& d) {
  const CheckpointInfo info = read_checkpoint_config(checkpoint);
  data::SeriesSet data =
      load_dataset(path, with_missing_values(d, info.missing_values), info.class_names);
  if (data.n_features != info.config.feat_dim)
    fail("kformer", path, " has ", data.n_features, " features, the checkpoint's model ",
         info.config.feat_dim);
  if (data.max_len > info.config.max_len &&
      (info.config.task != TstTask::Imputation ||
       info.config.pos_encoding == PositionalEncodingKind::Learnable))
    fail("kformer", path, " has series of up to ", data.max_len,
         " steps, longer than the model's max_len ", info.config.max_len);
  if (info.config.task != TstTask::Imputation) data.set_max_len(info.config.max_len);
  require_observed_values(data, path);
  Loaded<T, Space> loaded{info, TimeSeriesTransformer<T, Space>(exec, info.config),
                          std::move(data)};
  loaded.info = load_checkpoint<T, Space>(exec, checkpoint, loaded.model, nullptr);
  if (!loaded.info.standardization)
    fail("kformer", checkpoint, " holds no standardization of its training data");
  loaded.info.standardization->apply(loaded.data);
  return loaded;
}

template <class T, class Space>
void command_evaluate(const Space& exec, const std::string& checkpoint, const std::string& path,
                      const DataOptions& d, int batch_size) {
  auto loaded = load_for_inference<T, Space>(exec, checkpoint, path, d);
  print_data("data", loaded.data);
  TrainingOptions o;
  o.batch_size = batch_size;
  check_problem_size<Space>(loaded.info.config, loaded.data, batch_size, false);
  TstTrainer<T, Space> trainer(exec, loaded.model, o, loaded.data);
  const Evaluation e = trainer.evaluate(exec, loaded.data);
  if (std::isnan(e.loss))
    fail("kformer evaluate", "the loss on ", path,
         " is NaN: the model's outputs are not finite "
         "(its weights overflow, or it diverged in training)");
  std::printf("%s\n", describe(e, loaded.info.config.task).c_str());
}

template <class T, class Space>
void command_embed(const Space& exec, const std::string& checkpoint, const std::string& path,
                   const DataOptions& d, const std::string& output, int batch_size) {
  auto loaded = load_for_inference<T, Space>(exec, checkpoint, path, d);
  check_problem_size<Space>(loaded.info.config, loaded.data, batch_size, false);
  TrainingOptions o;
  o.batch_size = batch_size;
  TstTrainer<T, Space> trainer(exec, loaded.model, o, loaded.data);
  std::vector<float> steps, pooled;
  trainer.representations(exec, loaded.data, steps, pooled);
  if (!std::all_of(pooled.begin(), pooled.end(), [](float v) { return std::isfinite(v); }))
    fail("kformer embed", "the model's representations of ", path,
         " are not finite (its weights overflow, or it diverged in training): nothing written");
  const int dim = loaded.info.config.d_model;
  std::ostringstream csv;
  csv.precision(8);
  csv << "series";
  if (loaded.data.is_classification()) csv << ",label";
  for (int j = 0; j < dim; ++j)
    csv << ",z" << j;
  csv << '\n';
  for (std::int64_t s = 0; s < loaded.data.n_series; ++s) {
    csv << s;
    if (loaded.data.is_classification())
      csv << ',' << loaded.data.class_names[loaded.data.labels[s]];
    for (int j = 0; j < dim; ++j)
      csv << ',' << pooled[std::size_t(s) * dim + j];
    csv << '\n';
  }
  write_file_atomic(output, csv.str());
  std::printf(
      "wrote %s: the mean of the per-step representations over the observed steps of each of %lld "
      "series "
      "(%d values each)\n",
      output.c_str(), static_cast<long long>(loaded.data.n_series), dim);
}

// Outputs of a checkpoint's model for every series of a dataset, as CSV in the data's units.
template <class T, class Space>
void command_predict(const Space& exec, const std::string& checkpoint, const std::string& path,
                     const DataOptions& d, const std::string& masks, const std::string& output,
                     int batch_size) {
  auto loaded = load_for_inference<T, Space>(exec, checkpoint, path, d);
  const auto& data = loaded.data;
  const TstConfig& c = loaded.info.config;
  check_problem_size<Space>(c, data, batch_size, false);
  TrainingOptions o;
  o.batch_size = batch_size;
  TstTrainer<T, Space> trainer(exec, loaded.model, o, data);
  std::vector<std::uint8_t> mask;
  if (!masks.empty()) {
    if (c.task != TstTask::Imputation)
      fail("kformer predict", "--masks applies to imputation models only");
    mask = data::read_mask_csv(masks, data);
  }
  std::vector<float> out = trainer.predict(exec, data, false, masks.empty() ? nullptr : &mask);
  if (!std::all_of(out.begin(), out.end(), [](float v) { return std::isfinite(v); }))
    fail("kformer predict", "the model's outputs on ", path,
         " are not finite (its weights overflow, or it diverged in training): nothing written");
  std::ostringstream csv;
  csv.precision(8);
  if (c.task == TstTask::Imputation) {
    // Back to the data's units.
    std::vector<float> observed(data.values);
    loaded.info.standardization->invert(observed.data(), observed.size());
    loaded.info.standardization->invert(out.data(), out.size());
    csv << "series,step,feature,observed,masked,prediction\n";
    for (std::int64_t s = 0; s < data.n_series; ++s)
      for (std::int64_t t = 0; t < data.lengths[s]; ++t)
        for (std::int64_t f = 0; f < data.n_features; ++f) {
          const std::size_t i = data.offset(s, t) + static_cast<std::size_t>(f);
          csv << s << ',' << t << ',' << f << ',';
          if (!std::isnan(observed[i])) csv << observed[i];
          csv << ',' << (mask.empty() ? 0 : int(mask[i] == 0)) << ',' << out[i] << '\n';
        }
  } else {
    const int n_out = c.num_outputs;
    csv << "series";
    if (c.task == TstTask::Classification) {
      csv << ",predicted";
      for (const auto& name : loaded.info.class_names)
        csv << ",logit_" << name;
    } else {
      for (int k = 0; k < n_out; ++k)
        csv << ",output_" << k;
    }
    csv << '\n';
    for (std::int64_t s = 0; s < data.n_series; ++s) {
      const float* row = out.data() + s * n_out;
      csv << s;
      if (c.task == TstTask::Classification)
        csv << ',' << loaded.info.class_names[std::max_element(row, row + n_out) - row];
      for (int k = 0; k < n_out; ++k)
        csv << ',' << row[k];
      csv << '\n';
    }
  }
  write_file_atomic(output, csv.str());
  std::printf("wrote %s (%lld series)\n", output.c_str(), static_cast<long long>(data.n_series));
}

void command_generate_data(const std::string& directory, std::uint64_t seed) {
  make_directories(directory);
  const auto sets = data::generate_default_datasets(seed);
  data::write_ts(directory + "/classification_train.ts", sets.classification_train,
                 "default_classification");
  data::write_ts(directory + "/classification_test.ts", sets.classification_test,
                 "default_classification");
  data::write_ts(directory + "/regression_train.ts", sets.regression_train, "default_regression");
  data::write_ts(directory + "/regression_test.ts", sets.regression_test, "default_regression");
  std::printf("wrote classification_{train,test}.ts and regression_{train,test}.ts to %s\n",
              directory.c_str());
}

// --- the default job -----------------------------------------------------------------------------

// The default job is the TST paper's case for masked-value pretraining: many unlabelled series,
// few labels. A model is pretrained on the values of a pool of generated series; then, for each
// seed, a small stratified part of the pool gets its labels, and the pretrained model fine-tuned
// on it is compared with the same classifier trained from scratch on it, with and without
// positional encoding. Each classifier keeps its best epoch on a validation quarter of the
// labelled part (as TST's model_best.pth) and is scored on the test set.
constexpr std::int64_t kDemoPool = 2400;          // series; pretraining reads all their values
constexpr double kDemoLabelledFraction = 0.2;     // of the pool, given their labels
constexpr double kDemoValidationFraction = 0.25;  // of those, to choose the best epoch
constexpr int kDemoSeeds = 3, kDemoPretrainEpochs = 8, kDemoFinetuneEpochs = 30;

struct DemoRow {
  std::string run, label;
  std::vector<double> accuracy;  // per seed
  std::vector<int> kept_epoch;   // per seed
  double seconds = 0;
};

// Mean and sample standard deviation.
std::pair<double, double> mean_and_sd(const std::vector<double>& v) {
  double mean = 0, ss = 0;
  for (const double x : v)
    mean += x / double(v.size());
  for (const double x : v)
    ss += (x - mean) * (x - mean);
  return {mean, v.size() > 1 ? std::sqrt(ss / double(v.size() - 1)) : 0.0};
}

template <class T, class Space>
void command_demo(const Space& exec, const RunOptions& r, std::uint64_t seed) {
  using clock = std::chrono::steady_clock;
  const auto seconds_since = [](clock::time_point t) {
    return std::chrono::duration<double>(clock::now() - t).count();
  };
  const auto start = clock::now();
  std::printf("\n== data: generated (data/README.md), seed %llu\n",
              static_cast<unsigned long long>(seed));
  // The pool: series generated as the labelled sets are; pretraining reads their values only,
  // and a small stratified part of them is given its labels for the classifiers.
  data::SeriesSet pool = data::default_pool_dataset(kDemoPool, seed);
  data::SeriesSet test = data::generate_default_datasets(seed).classification_test;
  print_data("pool (pretraining: values only)", pool);
  print_data("test set", test);
  const auto standardization = data::Standardization::fit(pool);  // no labels needed
  standardization.apply(pool);
  standardization.apply(test);
  const auto values_only = [](data::SeriesSet set) {
    set.class_names.clear();
    set.labels.clear();
    return set;
  };
  const data::SeriesSet unlabelled = values_only(pool);
  const data::SeriesSet test_values = values_only(test);  // pretraining's validation
  MetricsLog log(r.output_dir);
  const OutputDirectoryLock lock(r.output_dir);  // held while the job writes there

  ModelOptions m;  // TST's defaults: d_model 64, 8 heads, 3 layers, ff 256, dropout 0.1, BatchNorm
  TrainingOptions o;
  o.batch_size = 32;
  RunOptions pretraining = r, finetuning = r;
  pretraining.best = {};  // every epoch; the last one is fine-tuned
  finetuning.best.keep = true;
  // Accuracy, not loss: the validation loss rises from epoch 2 or 3 (the classifiers grow
  // confident on the regime) while the accuracy often rises late, when a model starts to tell the
  // direction of time; every epoch runs, as in TST.
  finetuning.best.metric = "accuracy";

  std::vector<DemoRow> rows = {
      {"finetuned", "with pretraining (fine-tuned)", {}, {}, 0},
      {"from_scratch", "without pretraining", {}, {}, 0},
      {"no_positional_encoding", "without positional encoding", {}, {}, 0}};
  std::vector<std::string> first_seed_runs = {"pretrain"};
  std::printf("\n== masked pretraining on the %lld series of the pool (their values only)\n",
              static_cast<long long>(unlabelled.n_series));
  o.seed = seed;
  TimeSeriesTransformer<T, Space> imputer(exec, model_config(m, unlabelled, TstTask::Imputation));
  TstTrainer<T, Space> pretrainer(exec, imputer, o, unlabelled);
  const Evaluation before = pretrainer.evaluate(exec, test_values);
  CheckpointInfo info;
  info.standardization = standardization;
  const std::string pretrained = r.output_dir + "/pretrained";
  const auto t_pretrain = clock::now();
  const EpochsResult after =
      train_epochs(exec, imputer, pretrainer, unlabelled, test_values, 0, kDemoPretrainEpochs,
                   "pretrain", pretrained, info, log, pretraining);
  const double pretrain_seconds = seconds_since(t_pretrain);
  std::printf("masked MSE on the test series: %.4f before pretraining, %.4f after\n", before.loss,
              after.last.loss);

  std::int64_t n_train = 0, n_validation = 0;
  for (int k = 1; k <= kDemoSeeds; ++k) {
    o.seed = seed + static_cast<std::uint64_t>(k);
    const std::string tag = "_seed" + std::to_string(k),
                      dir = r.output_dir + "/seed" + std::to_string(k);
    // A stratified part of the pool gets its labels; a stratified quarter of it validates.
    const auto pick = data::train_validation_split(pool, kDemoLabelledFraction, o.seed);
    const data::SeriesSet labelled = pool.subset(pick.validation);
    const auto split = data::train_validation_split(labelled, kDemoValidationFraction, o.seed);
    const data::SeriesSet train = labelled.subset(split.train);
    const data::SeriesSet validation = labelled.subset(split.validation);
    n_train = train.n_series;
    n_validation = validation.n_series;
    std::printf("\n== seed %d: classifiers on %lld labelled series (%lld more for validation)\n", k,
                static_cast<long long>(train.n_series),
                static_cast<long long>(validation.n_series));
    for (std::size_t i = 0; i < rows.size(); ++i) {
      DemoRow& row = rows[i];
      const auto t0 = clock::now();
      ModelOptions mc = m;
      mc.pos_encoding = row.run == "no_positional_encoding" ? "none" : "fixed";
      TimeSeriesTransformer<T, Space> model(exec, model_config(mc, train, TstTask::Classification));
      if (row.run == "finetuned") {
        LoadOptions load;
        load.skip_prefixes = {"output_layer."};
        load_checkpoint<T, Space>(exec, pretrained, model, nullptr, load);
      }
      TstTrainer<T, Space> trainer(exec, model, o, train);
      CheckpointInfo ci;
      ci.standardization = standardization;
      ci.class_names = train.class_names;
      const std::string checkpoint = dir + "/" + row.run;
      const EpochsResult e =
          train_epochs(exec, model, trainer, train, validation, 0, kDemoFinetuneEpochs,
                       row.run + tag, checkpoint, ci, log, finetuning);
      // The kept epoch's model on the test set.
      load_checkpoint<T, Space>(exec, checkpoint + "/best", model, nullptr);
      row.accuracy.push_back(trainer.evaluate(exec, test).accuracy);
      row.kept_epoch.push_back(e.best_epoch);
      row.seconds += seconds_since(t0);
      if (k == 1) first_seed_runs.push_back(row.run + tag);
    }
  }

  std::int64_t majority = 0;
  for (std::size_t c = 0; c < test.class_names.size(); ++c)
    majority = std::max<std::int64_t>(majority,
                                      std::count(test.labels.begin(), test.labels.end(), int(c)));
  std::printf(
      "\n== test accuracy (%lld series, %zu classes; majority class %.3f) of the kept epoch's "
      "model,\n   trained on %lld labelled series (%.0f %% of the pool's %lld, %lld more for "
      "validation), over %d seeds\n",
      static_cast<long long>(test.n_series), test.class_names.size(),
      double(majority) / test.n_series, static_cast<long long>(n_train),
      100 * kDemoLabelledFraction, static_cast<long long>(pool.n_series),
      static_cast<long long>(n_validation), kDemoSeeds);
  std::printf("  %-32s %15s %7s %7s %7s %9s\n", "model", "mean +- sd", "seed 1", "seed 2", "seed 3",
              "seconds");
  for (const DemoRow& row : rows) {
    const auto [mean, sd] = mean_and_sd(row.accuracy);
    std::printf("  %-32s %7.3f +- %.3f", row.label.c_str(), mean, sd);
    for (const double a : row.accuracy)
      std::printf(" %7.3f", a);
    std::printf(" %9.1f\n", row.seconds);
  }
  std::printf("  (kept epochs:");
  for (const DemoRow& row : rows) {
    std::printf(" %s", row.run.c_str());
    for (const int e : row.kept_epoch)
      std::printf(" %d", e);
    std::printf(row.run == rows.back().run ? ")\n" : ";");
  }
  std::printf("  (pretraining, shared by the seeds: %.1f s)\n", pretrain_seconds);
  const std::string png = log.plot_loss_curves(first_seed_runs);
  std::printf("\nmetrics: %s/metrics.csv, %s/metrics.jsonl%s%s (seed 1)\n", r.output_dir.c_str(),
              r.output_dir.c_str(), png.empty() ? "" : "; loss curves: ", png.c_str());
  std::printf(
      "checkpoints: %s/pretrained, %s/seed{1,2,3}/{finetuned,from_scratch,"
      "no_positional_encoding} (each classifier's kept epoch in its best/)\n",
      r.output_dir.c_str(), r.output_dir.c_str());
  std::printf("total %.0f s\n", seconds_since(start));
}

// The --kokkos-* options Kokkos 3.4 to 5.2 read, and what their values must be ("" for a flag,
// "n>=0", "n>=1" for whole numbers, "text" for anything): Kokkos ignores the names it does not
// know, and aborts on some bad values, so both are refused here first.
const std::map<std::string, std::string>& kokkos_options() {
  static const std::map<std::string, std::string> options = {{"--kokkos-threads", "n>=1"},
                                                             {"--kokkos-num-threads", "n>=1"},
                                                             {"--kokkos-numa", "n>=1"},
                                                             {"--kokkos-device-id", "n>=0"},
                                                             {"--kokkos-num-devices", "n>=1"},
                                                             {"--kokkos-skip-device", "n>=0"},
                                                             {"--kokkos-map-device-id-by", "text"},
                                                             {"--kokkos-disable-warnings", ""},
                                                             {"--kokkos-print-configuration", ""},
                                                             {"--kokkos-tune-internals", ""},
                                                             {"--kokkos-help", ""},
                                                             {"--kokkos-tools-library", "text"},
                                                             {"--kokkos-tools-libs", "text"},
                                                             {"--kokkos-tools-args", "text"},
                                                             {"--kokkos-tools-help", ""}};
  return options;
}

// "" when `arg` is a --kokkos-* option Kokkos reads with a valid value, else why not.
std::string kokkos_option_problem(const std::string& arg) {
  const std::size_t eq = arg.find('=');
  const std::string name = arg.substr(0, eq);
  const auto found = kokkos_options().find(name);
  if (found == kokkos_options().end()) {
    std::string known;
    for (const auto& [option, value] : kokkos_options())
      known += (known.empty() ? "" : ", ") + option;
    return "unknown Kokkos option '" + name + "' (known: " + known + ")";
  }
  const std::string& kind = found->second;
  if (kind.empty())
    return eq == std::string::npos ? "" : name + " takes no value, got '" + arg + "'";
  if (eq == std::string::npos) return name + " needs a value: " + name + "=VALUE";
  const std::string value = arg.substr(eq + 1);
  if (kind == "text") return value.empty() ? name + " needs a value, got nothing" : "";
  const long long low = kind == "n>=1" ? 1 : 0;
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || errno == ERANGE || n < low || n > 1 << 20)
    return name + " needs a whole number from " + std::to_string(low) + " to 1048576, got '" +
           value + "'";
  return "";
}

}  // namespace

// The program; main() adds the last guard.
// Runs the command line; under several ranks (world) sets stopped_on_every_rank when the error it
// returns for was raised by every rank at the same point (ErrorOnEveryRank), so that each rank can
// end normally after printing its own message rather than abort the job.
static int run_program(int argc, char* argv[], distributed::Communicator& world,
                       bool& stopped_on_every_rank) {
  // --kokkos-* arguments go to Kokkos, the rest to the command line parser.
  std::vector<char*> kokkos_args = {argv[0]}, app_args = {argv[0]};
  for (int i = 1; i < argc; ++i)
    (std::string(argv[i]).rfind("--kokkos-", 0) == 0 ? kokkos_args : app_args).push_back(argv[i]);
  int kokkos_argc = static_cast<int>(kokkos_args.size());
  const int app_argc = static_cast<int>(app_args.size());
  std::string kokkos_problem;
  for (int i = 1; i < kokkos_argc && kokkos_problem.empty(); ++i)
    kokkos_problem = kokkos_option_problem(kokkos_args[std::size_t(i)]);

  CLI::App app;
  CliOptions cli;
  Command command = Command::Default;
  int parse_status = -1;  // CLI11's exit status where the command line does not name a run
  if (kokkos_problem.empty()) {
    try {
      command = parse_command_line(app, cli, app_argc, app_args.data());
    } catch (const CLI::ParseError& e) {
      parse_status = app.exit(e);
    }
  } else {
    std::fprintf(stderr, "kformer: error: %s\n", kokkos_problem.c_str());
    parse_status = 2;
  }
  if (world.size() > 1) {
    // Under mpirun: data-parallel training, rank 0 alone printing. The first collective of every
    // rank: all of them run the same training command, or all stop, each saying why.
    const bool trains =
        parse_status < 0 && (command == Command::Pretrain || command == Command::Finetune);
    if (parse_status < 0 && !trains)
      std::fprintf(stderr,
                   "kformer: error: under %d ranks only pretrain and finetune run (data-parallel "
                   "training); run other commands as one process\n",
                   world.size());
    stopped_on_every_rank = true;
    if (!world.all(trains)) {
      if (trains)
        std::fprintf(stderr,
                     "kformer: error: another rank's command line does not train (its "
                     "error is in its output)\n");
      return parse_status > 0 ? parse_status : 2;
    }
    try {
      world.require_same("the command (pretrain or finetune)", static_cast<std::int64_t>(command));
    } catch (const Error& e) {
      std::fprintf(stderr, "kformer: error: %s\n", e.what());
      return 2;
    }
    stopped_on_every_rank = false;
    if (!world.is_root() && std::freopen("/dev/null", "w", stdout) == nullptr) return 2;
  } else if (parse_status >= 0) {
    return parse_status;
  }
  const std::string& backend = cli.backend;
  const std::string& precision = cli.precision;

  try {
    check_outputs(command, cli);
  } catch (const Error& e) {
    std::fprintf(stderr, "kformer: error: %s\n", e.what());
    return 2;
  }

  // The OpenMP runtime has already read its environment: with OMP_PROC_BIND unset it does not
  // bind threads. Saying so explicitly keeps that behaviour and stops Kokkos' warning about the
  // unset variable at every run; a user who sets it (e.g. spread, for benchmarks) is not
  // overridden.
  setenv("OMP_PROC_BIND", "false", /*overwrite=*/0);
  std::optional<Kokkos::ScopeGuard> kokkos;
  try {
    kokkos.emplace(kokkos_argc, kokkos_args.data());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kformer: error: Kokkos did not start: %s\n", e.what());
    return 2;
  }
  backends::set_reproducible_gemm(cli.reproducible);
  try {
    switch (command) {
      case Command::Info:
        backends::dispatch(backend, [](auto) {});  // a --backend that is not enabled is refused
        backends::print_backends(std::cout, true);
        break;
      case Command::Encode:
        backends::dispatch(backend, [&](auto space) { run_encode(space, cli.encode); });
        break;
      case Command::GenerateData:
        command_generate_data(cli.data_dir, cli.demo_seed);
        break;
      case Command::Trajectory:
        run_trajectory_command(backend, precision, cli.trajectory);
        break;
      case Command::Spectra:
        run_spectra_command(backend, precision, cli.spectra);
        break;
      case Command::Pretrain:
        dispatch(backend, precision, [&](auto space, auto p) {
          command_pretrain<typename decltype(p)::type>(space, cli.data, cli.model, cli.training,
                                                       cli.run, world);
        });
        break;
      case Command::Finetune:
        dispatch(backend, precision, [&](auto space, auto p) {
          command_finetune<typename decltype(p)::type>(space, cli.data, cli.model, cli.training,
                                                       cli.run, cli.pretrained, cli.change_output,
                                                       world);
        });
        break;
      case Command::Evaluate:
        dispatch(backend, precision, [&](auto space, auto p) {
          command_evaluate<typename decltype(p)::type>(space, cli.checkpoint, cli.data.train,
                                                       cli.data, cli.batch_size);
        });
        break;
      case Command::Predict:
        dispatch(backend, precision, [&](auto space, auto p) {
          command_predict<typename decltype(p)::type>(space, cli.checkpoint, cli.data.train,
                                                      cli.data, cli.masks, cli.output,
                                                      cli.batch_size);
        });
        break;
      case Command::Embed:
        dispatch(backend, precision, [&](auto space, auto p) {
          command_embed<typename decltype(p)::type>(space, cli.checkpoint, cli.data.train, cli.data,
                                                    cli.output, cli.batch_size);
        });
        break;
      case Command::Default:
        backends::print_backends(std::cout);
        cli.run.output_dir = "kformer-out";
        dispatch(backend, precision, [&](auto space, auto p) {
          command_demo<typename decltype(p)::type>(space, cli.run, cli.demo_seed);
        });
        break;
    }
  } catch (const distributed::ErrorOnEveryRank& e) {
    std::fprintf(stderr, "\nkformer: error: %s\n", e.what());
    stopped_on_every_rank = true;
    return 2;
  } catch (const Error& e) {
    std::fprintf(stderr, "\nkformer: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    // Not one of kformer's checks (an allocation that failed, a library's own exception): still
    // one line and a non-zero exit rather than std::terminate.
    std::fprintf(stderr, "\nkformer: error (unexpected): %s\n", e.what());
    return 3;
  }
  return 0;
}

int main(int argc, char* argv[]) {
  // MPI first (under mpirun), Kokkos inside run_program(), finalised before MPI is.
  distributed::Environment mpi(&argc, &argv);
  int status = 3;
  bool stopped_on_every_rank = false;
  // Whatever escapes run_program() (an exception of the command-line library's own setup, an
  // allocation that fails before the commands' handlers) still ends in one line and a non-zero
  // exit.
  try {
    status = run_program(argc, argv, mpi.world(), stopped_on_every_rank);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kformer: error (unexpected): %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "kformer: error (unexpected): an unknown exception\n");
  }
  // A rank that stops with an error of its own ends the job, so that no other rank waits for it.
  if (status != 0 && !stopped_on_every_rank && mpi.world().size() > 1)
    mpi.world().abort_all(status);
  return status;
}
