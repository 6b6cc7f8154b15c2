// The kformer program's TST commands, written once for any execution space and scalar type.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include <kformer/backends/device_info.hpp>
#include <kformer/core/error.hpp>
#include <kformer/core/file_io.hpp>
#include <kformer/data/csv_format.hpp>
#include <kformer/data/preprocess.hpp>
#include <kformer/data/series_set.hpp>
#include <kformer/data/ts_format.hpp>
#include <kformer/distributed/communicator.hpp>
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

// Throws kformer::Error when pretraining on `train` would learn nothing or mask what is not
// there: a masking ratio of 0 (or 1), every feature excluded from masking, a feature index past
// the data's, a --forecast that covers the shortest series.
void check_pretraining(const TrainCliOptions& t, const data::SeriesSet& train);
// Throws kformer::Error when every value of `data` (read from `path`) is missing.
void require_observed_values(const data::SeriesSet& data, const std::string& path);
// Throws kformer::Error when a training step on batches of `batch_size` series of `data` would
// need more memory than the space has; prints a warning with the count when an epoch needs more
// than 1e15 floating-point operations (hours on a CPU).
template <class Space>
void check_problem_size(const TstConfig& c, const data::SeriesSet& data, int batch_size,
                        bool training);

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

// Runs `step` on every rank of comm, and if it throws on some, throws on all: the failing ranks
// their own error, the others one naming them, so that no rank waits in a collective for a rank
// that left. Setup steps that can fail on one rank alone (reading its files) run through it.
template <class F>
void on_every_rank(const distributed::Communicator& comm, const char* what, F&& step) {
  try {
    step();
  } catch (const Error& e) {
    (void)comm.all(false);  // tell the others, then raise this rank's own error
    throw distributed::ErrorOnEveryRank(e.what());
  } catch (...) {
    (void)comm.all(false);
    throw;
  }
  if (!comm.all(true))
    distributed::fail_on_every_rank("kformer", what,
                                    " failed on another rank (its error is in its output)");
}

// Runs epochs [first, epochs) of `trainer`, evaluating on `validation` after each, saving a
// checkpoint after each (so a killed run resumes from the last complete epoch) and logging them.
// Under several ranks (comm) every rank trains its replica and rank 0 alone writes the
// checkpoints and metrics; a save that fails there stops every rank.
// With r.best.keep, the model of the epoch with the best validation metric (lowest loss, or
// highest accuracy) is also saved to <checkpoint_dir>/best, as TST keeps model_best.pth; with
// r.best.patience > 0 the run stops after that many epochs without a better one. A resumed run
// takes the best epoch so far from the metrics of the epochs before it.
template <class T, class Space>
EpochsResult train_epochs(const Space& exec, TimeSeriesTransformer<T, Space>& model,
                          TstTrainer<T, Space>& trainer, const data::SeriesSet& train,
                          const data::SeriesSet& validation, int first, int epochs,
                          const std::string& run, const std::string& checkpoint_dir,
                          CheckpointInfo info, MetricsLog& log, const RunOptions& r,
                          const distributed::Communicator& comm = {}) {
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
    if (std::isnan(result.last.loss))
      fail("kformer " + run, "the validation loss is NaN after epoch ", epoch + 1,
           ": the model diverged (try a lower --lr or --clip-norm); this epoch was not saved");
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
    on_every_rank(comm, "saving the checkpoint", [&] {
      if (!comm.is_root()) return;
      if (!checkpoint_dir.empty()) {
        save_checkpoint(checkpoint_dir, model, &trainer.optimizer(), info);
        if (r.best.keep && improved)
          save_checkpoint<T, Space>(checkpoint_dir + "/best", model, nullptr, info);
      }
      log.write();  // after the checkpoints: the metrics never list an epoch that was not saved
    });
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

template <class Space>
void check_problem_size(const TstConfig& c, const data::SeriesSet& data, int batch_size,
                        bool training) {
  const double b = std::max<std::int64_t>(1, std::min<std::int64_t>(batch_size, data.n_series));
  const double s = static_cast<double>(std::max<std::int64_t>(data.max_len, 1));
  const double d = c.d_model, ff = c.dim_feedforward, layers = c.num_layers;
  // Per layer and token, what a training step holds: q, k, v, the attention output and its
  // projection, the norms' inputs and outputs, the feed-forward's two (S, ff) activations, and
  // about as much again for their gradients; attention itself is linear in S (no S x S buffer).
  const double values_per_token = (12 * d + 3 * ff) * (training ? 2 : 1);
  const double bytes = layers * b * s * values_per_token * sizeof(double);
  const std::int64_t available = backends::available_bytes<typename Space::memory_space>();
  if (available >= 0 && bytes > double(available))
    fail("kformer", "batches of ", b, " series of ", data.max_len, " steps need about ",
         backends::format_bytes(bytes), " for a ", training ? "training step" : "forward pass",
         " of this model, but ", backends::format_bytes(double(available)), " of ",
         Space::memory_space::name(),
         " is available: use a smaller --batch-size, shorter series or a smaller model");
  const double per_series = layers * (2 * s * d * (4 * d + 2 * ff) + 4 * s * s * d);
  const double flops = per_series * static_cast<double>(data.n_series) * (training ? 3 : 1);
  if (flops > 1e15)
    std::fprintf(stderr,
                 "kformer: warning: one pass over these %lld series of up to %lld steps needs "
                 "%.1e floating-point operations (attention grows with the square of the steps): "
                 "hours on a CPU\n",
                 static_cast<long long>(data.n_series), static_cast<long long>(data.max_len),
                 flops);
}

}  // namespace kformer::app
