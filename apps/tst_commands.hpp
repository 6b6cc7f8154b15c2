// The kformer program's TST commands, written once for any execution space and scalar type.
#pragma once

#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include <kformer/core/error.hpp>
#include <kformer/core/file_io.hpp>
#include <kformer/data/csv_format.hpp>
#include <kformer/data/preprocess.hpp>
#include <kformer/data/series_set.hpp>
#include <kformer/data/ts_format.hpp>
#include <kformer/models/tst.hpp>
#include <kformer/training/checkpoint.hpp>
#include <kformer/training/tst_trainer.hpp>

#include "cli.hpp"
#include "progress.hpp"
#include "report.hpp"

namespace kformer::app {

// Reads a dataset: .ts, a CSV file, or a directory of CSV files with a labels file, and fills its
// missing values as o.missing_values says (nothing when it is empty or "zero").
data::SeriesSet load_dataset(const std::string& path, const DataOptions& o,
                             const std::vector<std::string>& class_names = {});
// The same without filling the missing values.
data::SeriesSet read_dataset(const std::string& path, const DataOptions& o,
                             const std::vector<std::string>& class_names = {});

TstConfig model_config(const ModelOptions& m, const data::SeriesSet& data, TstTask task);
// The training options of the command line; throws kformer::Error for an unknown optimizer, mask
// mode or mask distribution, and for a negative number of epochs.
TrainingOptions training_options(const TrainCliOptions& t);
std::string describe(const Evaluation& e, TstTask task);

// Throws kformer::Error unless r.best.metric applies to `task` (accuracy: classification only).
// Commands call it before they create or write anything.
inline void check_key_metric(const RunOptions& r, TstTask task) {
  if (r.best.metric == "accuracy" && task != TstTask::Classification)
    fail("kformer", "--key-metric accuracy needs a classification model; this one is ",
         task == TstTask::Regression ? "a regression" : "an imputation (pretraining)", " model");
}

// What train_epochs ran and kept.
struct EpochsResult {
  Evaluation last;             // on validation after the last epoch run
  Evaluation best;             // the best epoch's (the last's when the best is not tracked)
  int best_epoch = 0;          // 1-based; 0 when no epoch has run
  int last_epoch = 0;          // 1-based
  bool stopped_early = false;  // by r.best.patience
};

// Runs epochs [first, epochs) of `trainer`, evaluating on `validation` after each, saving a
// checkpoint after each (so a killed run resumes from the last complete epoch) and logging them.
// With r.best.keep, the model of the epoch with the best validation metric (lowest loss, or
// highest accuracy) is also saved to <checkpoint_dir>/best, as TST keeps model_best.pth; with
// r.best.patience > 0 the run stops after that many epochs without a better one. A resumed run
// takes the best epoch so far from the metrics of the epochs before it.
template <class T, class Space>
EpochsResult train_epochs(const Space& exec, TimeSeriesTransformer<T, Space>& model,
                          TstTrainer<T, Space>& trainer, const data::SeriesSet& train,
                          const data::SeriesSet& validation, int first, int epochs,
                          const std::string& run, const std::string& checkpoint_dir,
                          CheckpointInfo info, MetricsLog& log, const RunOptions& r) {
  const TstTask task = model.config().task;
  check_key_metric(r, task);
  const bool by_accuracy = r.best.metric == "accuracy";
  // NaN is never better: a diverged epoch is not kept.
  const auto better = [&](double value, double best) {
    return !std::isnan(value) && (std::isnan(best) || (by_accuracy ? value > best : value < best));
  };
  EpochsResult result;
  double best_value = std::numeric_limits<double>::quiet_NaN();
  for (const EpochRecord& e : log.records_of(run)) {
    if (e.epoch > first) continue;
    const double value = by_accuracy ? e.validation_metric : e.validation_loss;
    if (better(value, best_value)) {
      best_value = value;
      result.best_epoch = e.epoch;
      result.best.loss = e.validation_loss;
      if (by_accuracy) result.best.accuracy = e.validation_metric;
    }
  }
  const auto patience_spent = [&](int epoch_done) {
    return r.best.patience > 0 && result.best_epoch > 0 &&
           epoch_done - result.best_epoch >= r.best.patience;
  };
  Progress progress(run, epochs, r.progress && Progress::stdout_is_terminal());
  result.last = trainer.evaluate(exec, validation);
  result.last_epoch = first;
  for (int epoch = first; epoch < epochs && !patience_spent(epoch); ++epoch) {
    const auto stats = trainer.train_epoch(exec, train, epoch, [&](const BatchProgress& p) {
      progress.batch(p.epoch, p.batch, p.batches, p.loss, p.seconds, p.series_per_second);
    });
    result.last = trainer.evaluate(exec, validation);
    result.last_epoch = epoch + 1;
    progress.epoch(epoch, stats.loss, describe(result.last, task), stats.seconds);
    log.add({run, epoch + 1, stats.loss, result.last.loss,
             task == TstTask::Classification ? result.last.accuracy
             : task == TstTask::Regression   ? result.last.rmse
                                             : result.last.loss,
             task == TstTask::Classification ? "accuracy"
             : task == TstTask::Regression   ? "rmse"
                                             : "masked_mse",
             stats.lr, stats.seconds});
    info.next_epoch = epoch + 1;
    info.step = trainer.global_step();
    const double value = by_accuracy ? result.last.accuracy : result.last.loss;
    const bool improved = better(value, best_value);
    if (improved) {
      best_value = value;
      result.best_epoch = epoch + 1;
      result.best = result.last;
    }
    if (!checkpoint_dir.empty()) {
      save_checkpoint(checkpoint_dir, model, &trainer.optimizer(), info);
      if (r.best.keep && improved)
        save_checkpoint<T, Space>(checkpoint_dir + "/best", model, nullptr, info);
    }
    log.write();  // after the checkpoints: the metrics never list an epoch that was not saved
  }
  result.stopped_early = result.last_epoch < epochs;
  if (result.stopped_early)
    std::printf("%s: no better validation %s in %d epochs: stopped after epoch %d of %d\n",
                run.c_str(), r.best.metric.c_str(), r.best.patience, result.last_epoch, epochs);
  if (!r.best.keep) result.best = result.last;
  if (r.best.keep && result.best_epoch > 0 && !checkpoint_dir.empty())
    std::printf("%s: kept epoch %d of %d (validation %s %.4f) in %s/best\n", run.c_str(),
                result.best_epoch, result.last_epoch, r.best.metric.c_str(), best_value,
                checkpoint_dir.c_str());
  return result;
}

}  // namespace kformer::app
